//! An image reference as a CRI request or `crustd images` carries it. Whatever is
//! accepted must print as a reference that parses back to itself: the printed form is
//! what the store records and later looks names up by.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(n) = image::Named::parse(text) else {
        return;
    };
    let printed = n.to_string();
    let again = image::Named::parse(&printed)
        .unwrap_or_else(|e| panic!("{text:?} printed as {printed:?}, which is refused: {e}"));
    assert_eq!(again, n, "{text:?} printed as {printed:?}");
});
