use super::*;
use crate::layout::{compress, Compression, LayerBuilder};
use std::os::unix::fs::{FileTypeExt, MetadataExt};

fn tmp(tag: &str) -> PathBuf {
    let p = std::env::temp_dir().join(format!("crust-unpack-{}-{tag}", std::process::id()));
    let _ = std::fs::remove_dir_all(&p);
    std::fs::create_dir_all(&p).unwrap();
    p
}

fn root() -> bool {
    // SAFETY: no preconditions.
    let is_root = unsafe { libc::geteuid() } == 0;
    if !is_root {
        assert!(
            std::env::var("CI").as_deref() != Ok("true"),
            "CI must run unpack tests as root"
        );
        eprintln!("SKIPPED: needs root (device nodes, owners, trusted xattrs)");
    }
    is_root
}

#[test]
fn keeps_metadata_and_applies_whiteouts() {
    if !root() {
        return;
    }
    let d = tmp("meta");
    let tar = LayerBuilder::new()
        .dir("etc", 0o755)
        .file_owned("etc/owned", b"x", 0o4750, 1234, 5678)
        .hardlink("etc/link", "etc/owned")
        .symlink("etc/abs", "/etc/passwd")
        .char_device("dev/null", 1, 3)
        .fifo("run/fifo")
        .file_xattr("bin/cap", b"y", "user.crust", b"v1")
        .whiteout("etc/gone")
        .opaque("var/lib")
        .raw(tar::EntryType::Regular, "/abs/inside", "", b"z")
        .raw(tar::EntryType::Regular, "./a/../b", "", b"w")
        .finish();
    for c in [Compression::None, Compression::Gzip, Compression::Zstd] {
        let r = d.join(format!("{c:?}"));
        std::fs::create_dir(&r).unwrap();
        let u = unpack(&compress(&tar, c)[..], &r, "test").unwrap();
        assert_eq!(u.diff_id, crate::digest::of(&tar), "{c:?}");
        let m = std::fs::metadata(r.join("etc/owned")).unwrap();
        assert_eq!((m.uid(), m.gid(), m.mode() & 0o7777), (1234, 5678, 0o4750));
        assert_eq!(m.nlink(), 2);
        assert_eq!(
            std::fs::metadata(r.join("etc/link")).unwrap().ino(),
            m.ino()
        );
        assert_eq!(
            std::fs::read_link(r.join("etc/abs")).unwrap(),
            Path::new("/etc/passwd")
        );
        let dev = std::fs::symlink_metadata(r.join("dev/null")).unwrap();
        assert!(dev.file_type().is_char_device());
        assert_eq!(dev.rdev(), libc::makedev(1, 3));
        assert!(std::fs::symlink_metadata(r.join("run/fifo"))
            .unwrap()
            .file_type()
            .is_fifo());
        let wh = std::fs::symlink_metadata(r.join("etc/gone")).unwrap();
        assert!(wh.file_type().is_char_device() && wh.rdev() == 0);
        assert!(!r.join("etc/.wh.gone").exists());
        assert!(is_opaque(&r.join("var/lib")));
        assert!(!r.join("var/lib/.wh..wh..opq").exists());
        assert_eq!(std::fs::read(r.join("abs/inside")).unwrap(), b"z");
        assert_eq!(std::fs::read(r.join("b")).unwrap(), b"w");
        assert_eq!(
            std::fs::metadata(r.join("etc")).unwrap().mtime(),
            1_700_000_000
        );
        let mut buf = [0u8; 8];
        let c = cpath(&r.join("bin/cap")).unwrap();
        // SAFETY: valid path, name and buffer.
        let n = unsafe {
            libc::lgetxattr(
                c.as_ptr(),
                c"user.crust".as_ptr(),
                buf.as_mut_ptr().cast(),
                8,
            )
        };
        assert_eq!(&buf[..n.max(0) as usize], b"v1");
    }
    std::fs::remove_dir_all(&d).unwrap();
}

#[test]
fn refuses_entries_that_escape() {
    let d = tmp("evil");
    let outside = d.join("outside");
    let cases: Vec<(&str, Vec<u8>)> = vec![
        (
            "dotdot",
            LayerBuilder::new()
                .raw(tar::EntryType::Regular, "../outside", "", b"x")
                .finish(),
        ),
        (
            "deep dotdot",
            LayerBuilder::new()
                .raw(tar::EntryType::Regular, "a/../../outside", "", b"x")
                .finish(),
        ),
        (
            "through symlink",
            LayerBuilder::new()
                .symlink("up", "..")
                .raw(tar::EntryType::Regular, "up/outside", "", b"x")
                .finish(),
        ),
        (
            "through absolute symlink",
            LayerBuilder::new()
                .symlink("etc", "/etc")
                .raw(tar::EntryType::Regular, "etc/crust-evil", "", b"x")
                .finish(),
        ),
        (
            "hard link out",
            LayerBuilder::new()
                .raw(tar::EntryType::Link, "pw", "../../../../etc/passwd", b"")
                .finish(),
        ),
        (
            "hard link to absolute",
            LayerBuilder::new()
                .raw(tar::EntryType::Link, "pw", "/etc/passwd", b"")
                .finish(),
        ),
    ];
    for (name, tar) in cases {
        let r = d.join("root");
        let _ = std::fs::remove_dir_all(&r);
        std::fs::create_dir(&r).unwrap();
        let e = unpack(&tar[..], &r, "evil").expect_err(name);
        assert_eq!(e.kind(), crate::ErrorKind::InvalidArgument, "{name}: {e}");
        assert!(!outside.exists(), "{name} wrote outside");
        assert!(!Path::new("/etc/crust-evil").exists(), "{name} wrote /etc");
    }
    std::fs::remove_dir_all(&d).unwrap();
}

#[test]
fn truncated_layer_is_an_error() {
    let d = tmp("trunc");
    let tar = LayerBuilder::new()
        .file("a", &vec![7u8; 100_000], 0o644)
        .finish();
    let gz = compress(&tar, Compression::Gzip);
    let e = unpack(&gz[..gz.len() / 2], &d, "half").unwrap_err();
    assert_eq!(e.kind(), crate::ErrorKind::DataLoss, "{e}");
    std::fs::remove_dir_all(&d).unwrap();
}

#[test]
fn root_entry_sets_the_root_mode() {
    if !root() {
        return;
    }
    let d = tmp("rootmode");
    let tar = LayerBuilder::new()
        .dir("./", 0o751)
        .file("a", b"x", 0o644)
        .finish();
    unpack(&tar[..], &d, "root").unwrap();
    assert_eq!(std::fs::metadata(&d).unwrap().mode() & 0o7777, 0o751);
    std::fs::remove_dir_all(&d).unwrap();
}

#[test]
fn clean_paths() {
    assert_eq!(
        clean(Path::new("/a/./b/")).unwrap(),
        Some(PathBuf::from("a/b"))
    );
    assert_eq!(clean(Path::new("./")).unwrap(), None);
    assert_eq!(
        clean(Path::new("a/../b")).unwrap(),
        Some(PathBuf::from("b"))
    );
    assert!(clean(Path::new("a/../../b")).is_err());
}
