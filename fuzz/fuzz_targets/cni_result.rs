//! A plugin's result as the runtime reads it (and as the next plugin reads it as
//! `prevResult`), then printed again in every version a plugin may be asked for.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(r) = cni::AddResult::from_slice(data) {
        for v in cni::version::SUPPORTED {
            if let Ok(json) = r.to_json(v) {
                // What we print, we read back.
                cni::AddResult::from_slice(json.as_bytes()).expect("re-reading our own result");
            }
        }
    }
});
