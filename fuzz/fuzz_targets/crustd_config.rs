//! crustd's `config.toml`. crustd is a binary crate: its config module is compiled in
//! here from its own source.
#![no_main]

#[allow(dead_code)]
#[path = "../../crates/crustd/src/daemon/config.rs"]
mod config;

/// `crate::nri::NriConfig`, which the config names, without the rest of NRI.
#[path = "../../crates/crustd/src/nri/config.rs"]
mod nri_config;
mod nri {
    pub use super::nri_config::NriConfig;
}

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(c) = config::Config::parse(text) {
        let _ = c.socket_path();
        let _ = c.registry_config_dir();
        let _ = c.pause_dir();
    }
});
