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
        // On stdout's handle itself: libtest captures `eprintln!` of a passing test.
        use std::io::Write;
        let _ = writeln!(
            std::io::stdout().lock(),
            "SKIPPED: needs root (device nodes, owners, trusted xattrs)"
        );
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

/// A layer's own symlinks on the way to an entry are followed with the layer's root as
/// `/`: what goes through `up -> ..` or `hostetc -> /etc` lands inside the root.
#[test]
fn symlinked_parents_stay_in_the_root() {
    if !root() {
        return;
    }
    let d = tmp("confined");
    let r = d.join("root");
    std::fs::create_dir(&r).unwrap();
    let tar = LayerBuilder::new()
        .symlink("up", "..")
        .raw(tar::EntryType::Regular, "up/outside", "", b"x")
        .symlink("hostetc", "/etc")
        .raw(tar::EntryType::Regular, "hostetc/crust-evil", "", b"x")
        .finish();
    unpack(&tar[..], &r, "confined").unwrap();
    assert!(r.join("outside").is_file());
    assert!(r.join("etc/crust-evil").is_file());
    assert!(!d.join("outside").exists(), "wrote outside the root");
    assert!(
        !Path::new("/etc/crust-evil").exists(),
        "wrote the host's /etc"
    );
    // A parent that loops is refused.
    let r2 = d.join("root2");
    std::fs::create_dir(&r2).unwrap();
    let tar = LayerBuilder::new()
        .symlink("loop", "loop")
        .raw(tar::EntryType::Regular, "loop/x", "", b"x")
        .finish();
    let e = unpack(&tar[..], &r2, "loop").unwrap_err();
    assert_eq!(e.kind(), crate::ErrorKind::InvalidArgument, "{e}");
    assert!(e.to_string().contains("too many levels of symlinks"), "{e}");
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

/// One tar header block of `kind` for `name` with `size` bytes of data to follow.
fn header(kind: tar::EntryType, name: &str, size: u64) -> tar::Header {
    let mut h = tar::Header::new_gnu();
    h.set_entry_type(kind);
    h.set_path(name).unwrap();
    h.set_size(size);
    h.set_mode(0o644);
    h.set_uid(0);
    h.set_gid(0);
    h.set_mtime(0);
    h.set_cksum();
    h
}

/// One pax record, `<length> <key>=<value>\n`, its length counting itself.
fn pax_record(k: &str, v: &str) -> String {
    let body = format!(" {k}={v}\n");
    let mut n = body.len() + 1;
    while format!("{n}{body}").len() != n {
        n += 1;
    }
    format!("{n}{body}")
}

fn block_pad(v: &mut Vec<u8>) {
    v.resize(v.len().div_ceil(512) * 512, 0);
}

/// A header that, read where data should be, would be refused: the guard must never
/// take data for a header.
fn decoy() -> Vec<u8> {
    header(tar::EntryType::GNULongName, "././@LongLink", 2 << 20)
        .as_bytes()
        .to_vec()
}

#[test]
fn oversized_long_names_and_pax_headers_are_refused_before_they_are_read() {
    let d = tmp("huge-special");
    for (kind, name) in [
        (tar::EntryType::GNULongName, "GNU long name"),
        (tar::EntryType::GNULongLink, "GNU long link"),
        (tar::EntryType::XHeader, "pax header"),
        (tar::EntryType::XGlobalHeader, "pax global header"),
    ] {
        // 600 MiB declared, a few MiB of zeros behind it: read whole, it would take
        // 600 MiB of memory; the guard stops at its header.
        let mut tar = header(kind, "././@LongLink", 600 << 20).as_bytes().to_vec();
        tar.resize(tar.len() + (4 << 20), 0);
        let gz = compress(&tar, Compression::Gzip);
        let e = unpack(&gz[..], &d, "huge").unwrap_err();
        assert_eq!(e.kind(), crate::ErrorKind::InvalidArgument, "{e}");
        let m = e.to_string();
        assert!(m.contains(name) && m.contains("629145600 bytes"), "{m}");
    }
    // Just over the limit is refused too; at the limit a long name is read (and its
    // entry then fails on the name, which no file system takes).
    let over = header(tar::EntryType::GNULongName, "././@LongLink", (1 << 20) + 1);
    let mut tar = over.as_bytes().to_vec();
    tar.resize(tar.len() + (2 << 20), 0);
    let e = unpack(&tar[..], &d, "over").unwrap_err();
    assert!(e.to_string().contains("at most 1048576"), "{e}");
    let at = header(tar::EntryType::GNULongName, "././@LongLink", 1 << 20);
    let mut tar = at.as_bytes().to_vec();
    tar.resize(tar.len() + (2 << 20), 0);
    let e = unpack(&tar[..], &d, "at").unwrap_err();
    assert!(!e.to_string().contains("at most"), "{e}");
    std::fs::remove_dir_all(&d).unwrap();
}

#[test]
fn long_names_and_pax_paths_under_the_limit_unpack() {
    let d = tmp("long-ok");
    let deep = format!("{}/f", vec!["d".repeat(200); 10].join("/"));
    let mut b = tar::Builder::new(Vec::new());
    let mut h = tar::Header::new_gnu();
    h.set_size(5);
    h.set_mode(0o644);
    h.set_uid(0);
    h.set_gid(0);
    h.set_mtime(0);
    h.set_entry_type(tar::EntryType::Regular);
    b.append_data(&mut h, &deep, &b"hello"[..]).unwrap();
    let pax = pax_record(
        "path",
        &format!("{}/p", vec!["e".repeat(200); 10].join("/")),
    );
    let mut raw = b.into_inner().unwrap();
    raw.truncate(raw.len() - 1024); // the end-of-archive blocks
    raw.extend_from_slice(header(tar::EntryType::XHeader, "pax", pax.len() as u64).as_bytes());
    raw.extend_from_slice(pax.as_bytes());
    block_pad(&mut raw);
    raw.extend_from_slice(header(tar::EntryType::Regular, "short", 3).as_bytes());
    raw.extend_from_slice(b"pax");
    block_pad(&mut raw);
    raw.resize(raw.len() + 1024, 0);
    let u = unpack(&raw[..], &d, "long").unwrap();
    assert_eq!(
        u.diff_id,
        crate::layout::digest(&raw),
        "the guard changed no byte"
    );
    assert_eq!(std::fs::read(d.join(&deep)).unwrap(), b"hello");
    let p = format!("{}/p", vec!["e".repeat(200); 10].join("/"));
    assert_eq!(std::fs::read(d.join(p)).unwrap(), b"pax");
    std::fs::remove_dir_all(&d).unwrap();
}

/// The guard follows the archive as the tar crate does: a pax `size` overrides the
/// next entry's header, and it applies past a long name to the file after it.
#[test]
fn pax_size_moves_the_next_header() {
    let d = tmp("pax-size");
    let mut body = decoy();
    body.extend_from_slice(&[b'x'; 488]);
    let pax = pax_record("size", &body.len().to_string());
    let mut raw = header(tar::EntryType::XHeader, "pax", pax.len() as u64)
        .as_bytes()
        .to_vec();
    raw.extend_from_slice(pax.as_bytes());
    block_pad(&mut raw);
    let name = "n".repeat(150);
    raw.extend_from_slice(
        header(
            tar::EntryType::GNULongName,
            "././@LongLink",
            name.len() as u64,
        )
        .as_bytes(),
    );
    raw.extend_from_slice(name.as_bytes());
    block_pad(&mut raw);
    // The file's own header says 0 bytes; the pax size says 1000.
    raw.extend_from_slice(header(tar::EntryType::Regular, "ignored", 0).as_bytes());
    raw.extend_from_slice(&body);
    block_pad(&mut raw);
    raw.extend_from_slice(header(tar::EntryType::Regular, "after", 2).as_bytes());
    raw.extend_from_slice(b"ok");
    block_pad(&mut raw);
    raw.resize(raw.len() + 1024, 0);
    unpack(&raw[..], &d, "pax-size").unwrap();
    assert_eq!(std::fs::read(d.join(&name)).unwrap(), body);
    assert_eq!(std::fs::read(d.join("after")).unwrap(), b"ok");
    std::fs::remove_dir_all(&d).unwrap();
}

/// An old GNU sparse file's extension blocks come between its header and its data.
#[test]
fn gnu_sparse_extension_blocks_are_followed() {
    let d = tmp("sparse");
    let num = |v: u64, f: &mut [u8; 12]| {
        let s = format!("{v:011o}");
        f[..11].copy_from_slice(s.as_bytes());
        f[11] = 0;
    };
    let mut h = tar::Header::new_gnu();
    h.set_entry_type(tar::EntryType::GNUSparse);
    h.set_path("holes").unwrap();
    h.set_size(1024); // the data stored: two blocks
    h.set_mode(0o644);
    h.set_uid(0);
    h.set_gid(0);
    h.set_mtime(0);
    {
        let g = h.as_gnu_mut().unwrap();
        num(0, &mut g.sparse[0].offset);
        num(512, &mut g.sparse[0].numbytes);
        num(4096, &mut g.realsize);
        g.isextended[0] = 1;
    }
    h.set_cksum();
    let mut ext = tar::GnuExtSparseHeader::new();
    num(2048, &mut ext.sparse[0].offset);
    num(512, &mut ext.sparse[0].numbytes);
    // The last block of holes: the real size ends at 4096.
    num(4096, &mut ext.sparse[1].offset);
    num(0, &mut ext.sparse[1].numbytes);
    let mut raw = h.as_bytes().to_vec();
    raw.extend_from_slice(ext.as_bytes());
    raw.extend_from_slice(&[b'A'; 512]);
    raw.extend_from_slice(&decoy());
    raw.extend_from_slice(header(tar::EntryType::Regular, "after", 2).as_bytes());
    raw.extend_from_slice(b"ok");
    block_pad(&mut raw);
    raw.resize(raw.len() + 1024, 0);
    unpack(&raw[..], &d, "sparse").unwrap();
    let f = std::fs::read(d.join("holes")).unwrap();
    assert_eq!(f.len(), 4096);
    assert_eq!(&f[..512], &[b'A'; 512][..]);
    assert_eq!(&f[2048..2560], &decoy()[..]);
    assert!(f[512..2048].iter().all(|b| *b == 0));
    assert_eq!(std::fs::read(d.join("after")).unwrap(), b"ok");
    std::fs::remove_dir_all(&d).unwrap();
}
