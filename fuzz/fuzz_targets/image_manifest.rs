//! An index, manifest list or image manifest as a registry (or an OCI layout on disk)
//! serves it.
#![no_main]

use image::manifest::Manifest;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(m) = Manifest::parse(data, "fuzz") {
        if m.is_index() {
            let _ = m.pick_platform("fuzz");
        }
    }
});
