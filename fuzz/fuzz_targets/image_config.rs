//! An image config blob as a registry serves it.
#![no_main]

use image::manifest::ConfigBlob;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(c) = ConfigBlob::parse(data, "fuzz") {
        let _ = c.check_platform("fuzz");
        let _ = c.image_config();
    }
});
