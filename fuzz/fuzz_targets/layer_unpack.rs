//! A layer (tar, gzip- or zstd-compressed or plain) as a registry serves it, unpacked
//! by the image store's unpacker: paths, links, whiteouts, devices, owners, xattrs.
//!
//! Nothing may land outside the root. The target runs the unpacker as root, so at its
//! first input it moves itself into a private mount namespace and chroots into a
//! 64 MiB tmpfs (a bomb fills it and gets ENOSPC, not the machine's memory); the fuzz
//! folder is bind-mounted at its own path inside, so libFuzzer still reads its corpus
//! and writes its artifacts. After every input the tmpfs must hold nothing but the
//! root's own ancestors: whatever a bad entry wrote through `..`, an absolute name, a
//! symlink or a hard link would show up beside them.
#![no_main]

use libfuzzer_sys::fuzz_target;
use std::ffi::CString;
use std::path::{Path, PathBuf};
use std::sync::Once;

const FUZZ_DIR: &str = env!("CARGO_MANIFEST_DIR");
/// The layer's root inside the chroot: two levels below `/`, so a `../..` escape lands
/// where the check below sees it.
const ROOT: &str = "/a/b/root";

fn sys(what: &str, rc: libc::c_int) {
    assert!(rc == 0, "{what}: {}", std::io::Error::last_os_error());
}

fn cstr(p: &Path) -> CString {
    CString::new(p.as_os_str().as_encoded_bytes()).unwrap()
}

fn jail() {
    let top = PathBuf::from(format!("/dev/shm/crust-fuzz-unpack-{}", std::process::id()));
    std::fs::create_dir_all(&top).unwrap();
    let none = std::ptr::null::<libc::c_char>();
    // SAFETY: plain syscalls on paths and flags we own; the new mount namespace is ours.
    unsafe {
        sys("unshare", libc::unshare(libc::CLONE_NEWNS));
        sys(
            "making / private",
            libc::mount(
                none,
                c"/".as_ptr(),
                none,
                libc::MS_REC | libc::MS_PRIVATE,
                std::ptr::null(),
            ),
        );
        sys(
            "mounting the tmpfs",
            libc::mount(
                c"tmpfs".as_ptr(),
                cstr(&top).as_ptr(),
                c"tmpfs".as_ptr(),
                libc::MS_NOSUID | libc::MS_NODEV,
                c"size=64m,mode=0755".as_ptr().cast(),
            ),
        );
        let inner = top.join(FUZZ_DIR.trim_start_matches('/'));
        std::fs::create_dir_all(&inner).unwrap();
        sys(
            "binding the fuzz folder",
            libc::mount(
                cstr(Path::new(FUZZ_DIR)).as_ptr(),
                cstr(&inner).as_ptr(),
                none,
                libc::MS_BIND,
                std::ptr::null(),
            ),
        );
        // A /proc of its own, for LeakSanitizer's check at exit and for backtraces.
        std::fs::create_dir_all(top.join("proc")).unwrap();
        sys(
            "mounting /proc",
            libc::mount(
                c"proc".as_ptr(),
                cstr(&top.join("proc")).as_ptr(),
                c"proc".as_ptr(),
                libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC,
                std::ptr::null(),
            ),
        );
        sys("chroot", libc::chroot(cstr(&top).as_ptr()));
    }
    std::env::set_current_dir(FUZZ_DIR).unwrap();
}

/// Names in `dir`, sorted.
fn names(dir: &str) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

fuzz_target!(|data: &[u8]| {
    static JAIL: Once = Once::new();
    JAIL.call_once(jail);
    let _ = std::fs::remove_dir_all("/a");
    std::fs::create_dir_all(ROOT).unwrap();
    let res = image::unpack::unpack(data, Path::new(ROOT), "fuzz");
    let first = FUZZ_DIR
        .trim_start_matches('/')
        .split('/')
        .next()
        .unwrap()
        .to_string();
    let mut want_top = vec!["a".to_string(), "proc".to_string(), first];
    want_top.sort();
    assert_eq!(
        names("/"),
        want_top,
        "something escaped the root to / ({res:?})"
    );
    assert_eq!(
        names("/a"),
        ["b"],
        "something escaped the root to /a ({res:?})"
    );
    assert_eq!(
        names("/a/b"),
        ["root"],
        "something escaped the root to /a/b ({res:?})"
    );
    // The root itself may have been made a symlink or a file by a bad entry: not allowed.
    let meta = std::fs::symlink_metadata(ROOT).unwrap();
    assert!(meta.is_dir(), "the root is no longer a directory ({res:?})");
});
