//! `[nri]` of crustd's configuration, in a file of its own: the config fuzz target
//! compiles crustd's `config.rs` with it, without the rest of NRI.

use serde::{Deserialize, Serialize};
use std::path::PathBuf;

/// `[nri]` in crustd's configuration; containerd's keys and defaults.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct NriConfig {
    /// Off by default, as containerd 1.7's.
    pub enable: bool,
    pub socket_path: PathBuf,
    /// Pre-installed plugins, started by crustd: executables named `NN-name`.
    pub plugin_path: PathBuf,
    /// `NN-name.conf` or `name.conf`: a pre-installed plugin's configuration.
    pub plugin_config_path: PathBuf,
    pub plugin_registration_timeout_ms: u64,
    pub plugin_request_timeout_ms: u64,
    /// Only the pre-installed plugins: no socket.
    pub disable_connections: bool,
}

impl Default for NriConfig {
    fn default() -> Self {
        NriConfig {
            enable: false,
            socket_path: "/var/run/nri/nri.sock".into(),
            plugin_path: "/opt/nri/plugins".into(),
            plugin_config_path: "/etc/nri/conf.d".into(),
            plugin_registration_timeout_ms: 5000,
            plugin_request_timeout_ms: 2000,
            disable_connections: false,
        }
    }
}
