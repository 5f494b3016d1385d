//! A registry's `hosts.toml` (containerd's format) from the registry config folder.
#![no_main]

use libfuzzer_sys::fuzz_target;
use std::path::Path;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    for registry in ["docker.io", "localhost:5000", "registry.example"] {
        let _ = image::hosts::parse(text, registry, Path::new("/etc/crust/certs.d/x/hosts.toml"));
    }
});
