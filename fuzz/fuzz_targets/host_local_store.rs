//! host-local's store files as a previous run (ours or the reference plugin's) or
//! anyone with write access to `/var/lib/cni/networks` left them: a reservation file,
//! `last_reserved_ip.0`, and a file of any name, in a store in a tmpfs folder.
#![no_main]

use cni_plugins::host_local::store::{DiskStore, Store};
use libfuzzer_sys::fuzz_target;
use std::path::PathBuf;
use std::sync::OnceLock;

fn data_dir() -> &'static PathBuf {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let d = PathBuf::from(format!(
            "/dev/shm/crust-fuzz-host-local-{}",
            std::process::id()
        ));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    })
}

fuzz_target!(|data: &[u8]| {
    // NAME\0CONTENTS: NAME (no '/') names a third file.
    let (name, contents) = match data.iter().position(|&b| b == 0) {
        Some(i) => (
            String::from_utf8_lossy(&data[..i]).replace('/', "_"),
            &data[i + 1..],
        ),
        None => (String::new(), data),
    };
    let dir = data_dir().join("net");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("10.1.2.3"), contents).unwrap();
    std::fs::write(dir.join("fd00::3"), contents).unwrap();
    std::fs::write(dir.join("last_reserved_ip.0"), contents).unwrap();
    if !name.is_empty() && name != "." && name != ".." && name != "lock" && name.len() < 255 {
        let _ = std::fs::write(dir.join(&name), contents);
    }
    let store = DiskStore::open(data_dir(), "net").expect("opening the store");
    let _ = store.reservations().expect("reading reservations");
    let _ = store.last_reserved(0);
    let _ = store.last_reserved(1);
});
