//! Layers as unpacked: every compression, whiteouts and opaque directories, a usrmerge
//! base, malicious layers refused, and layers writing through symlinks compared with
//! containerd's snapshotters.

use super::*;

/// Layers of every compression, whiteouts and opaque directories, seen through the
/// overlay a container would get.
#[test]
fn compressions_whiteouts_and_overlay() {
    if !require_root(TOOLS) {
        return;
    }
    let t = TempDir::new("img");
    let reg = Registry::start();
    let base = busybox_layer();
    let middle = LayerBuilder::new()
        .dir("data", 0o755)
        .file("data/keep", b"keep\n", 0o644)
        .file("data/remove-me", b"x\n", 0o644)
        .dir("cache", 0o755)
        .file("cache/old", b"old\n", 0o644)
        .finish();
    let top = LayerBuilder::new()
        .whiteout("data/remove-me")
        .whiteout("bin/ls")
        .opaque("cache")
        .file("cache/new", b"new\n", 0o644)
        .finish();
    push(
        &reg,
        t.path(),
        "layers/app:v1",
        vec![image(
            vec![
                (base, Compression::Gzip),
                (middle, Compression::Zstd),
                (top, Compression::None),
            ],
            "x",
        )],
    );
    let s = store(&t);
    let img = rt()
        .block_on(s.pull(&reg.name("layers/app:v1"), None))
        .unwrap();
    let snap = s.prepare_snapshot("ctr1", &img.id).unwrap();
    assert_eq!(snap.lowerdirs.len(), 3);
    let mnt = t.path().join("rootfs");
    mount_snapshot(&snap, &mnt);
    let check = std::panic::catch_unwind(|| {
        assert_eq!(std::fs::read(mnt.join("data/keep")).unwrap(), b"keep\n");
        assert!(!mnt.join("data/remove-me").exists(), "whiteout ignored");
        assert!(
            !mnt.join("bin/ls").exists(),
            "whiteout of a lower symlink ignored"
        );
        assert!(mnt.join("bin/cat").exists());
        assert!(
            !mnt.join("cache/old").exists(),
            "opaque dir shows the lower layer"
        );
        assert_eq!(std::fs::read(mnt.join("cache/new")).unwrap(), b"new\n");
        let out = crust_e2e::sh(&[
            "chroot",
            mnt.to_str().unwrap(),
            "/bin/sh",
            "-c",
            "echo from-image",
        ]);
        assert_eq!(out.trim(), "from-image");
    });
    crust_e2e::sh(&["umount", mnt.to_str().unwrap()]);
    check.unwrap();
    // The image goes, the snapshot's layers stay until the snapshot goes.
    s.remove(&img.id).unwrap();
    assert!(snap.lowerdirs.iter().all(|d| d.is_dir()));
    s.remove_snapshot("ctr1").unwrap();
    assert_eq!(entries(&t.path().join("store/layers")), 0);
}

/// A usrmerge base (`bin -> usr/bin`, the programs in `/usr/bin`) under a layer whose
/// tar writes `bin/hello` without a `bin/` entry (as image builders that do not
/// resolve the base's symlinks write it): as with containerd, `hello` lands in
/// `/usr/bin`, and `/bin` stays the base's symlink, so the base's programs are still
/// there. Unpacked alone the layer would have a real `bin/` hiding the symlink, and
/// `/bin/sh` would be gone. A layer with its own `bin -> usr/bin` and `bin/x` is
/// followed inside the layer.
#[test]
fn a_layer_over_a_usrmerge_base() {
    if !require_root(TOOLS) {
        return;
    }
    let t = TempDir::new("img");
    let reg = Registry::start();
    let bb = which("busybox").expect("busybox");
    let mut base = LayerBuilder::new()
        .dir("usr", 0o755)
        .dir("usr/bin", 0o755)
        .file_from("usr/bin/busybox", &bb, 0o755)
        .symlink("bin", "usr/bin");
    for a in ["sh", "ls", "cat", "readlink"] {
        base = base.symlink(&format!("usr/bin/{a}"), "busybox");
    }
    let app = LayerBuilder::new()
        .file("bin/hello", b"#!/bin/sh\necho hello from usr/bin\n", 0o755)
        .finish();
    let own = LayerBuilder::new()
        .symlink("sbin", "usr/sbin")
        .file("sbin/tool", b"#!/bin/sh\necho tool\n", 0o755)
        .finish();
    push(
        &reg,
        t.path(),
        "merged/app:v1",
        vec![image(
            vec![
                (base.finish(), Compression::Gzip),
                (app, Compression::Gzip),
                (own, Compression::None),
            ],
            "hello",
        )],
    );
    let s = store(&t);
    let img = rt()
        .block_on(s.pull(&reg.name("merged/app:v1"), None))
        .unwrap();
    let snap = s.prepare_snapshot("ctr1", &img.id).unwrap();
    let mnt = t.path().join("rootfs");
    mount_snapshot(&snap, &mnt);
    let check = std::panic::catch_unwind(|| {
        let bin = std::fs::symlink_metadata(mnt.join("bin")).unwrap();
        assert!(
            bin.file_type().is_symlink(),
            "/bin is no longer the base's symlink"
        );
        assert!(mnt.join("usr/bin/hello").is_file());
        assert!(mnt.join("usr/sbin/tool").is_file());
        let out = crust_e2e::sh(&[
            "chroot",
            mnt.to_str().unwrap(),
            "/bin/sh",
            "-c",
            "/bin/hello; /usr/bin/hello; /sbin/tool; readlink /bin; ls /bin/busybox",
        ]);
        assert_eq!(
            out.lines().collect::<Vec<_>>(),
            [
                "hello from usr/bin",
                "hello from usr/bin",
                "tool",
                "usr/bin",
                "/bin/busybox"
            ],
            "{out}"
        );
    });
    crust_e2e::sh(&["umount", mnt.to_str().unwrap()]);
    check.unwrap();
    s.remove_snapshot("ctr1").unwrap();
    s.remove(&img.id).unwrap();
    assert_eq!(
        entries(&t.path().join("store/layers")),
        0,
        "a layer copy was left"
    );
    assert_eq!(
        entries(&t.path().join("store/implied")),
        0,
        "a layer's note was left"
    );
}

#[test]
fn malicious_layers_are_refused() {
    if !require_root(TOOLS) {
        return;
    }
    let t = TempDir::new("img");
    let reg = Registry::start();
    let canary = t.path().join("canary");
    let dotdot = LayerBuilder::new()
        .file("ok", b"ok", 0o644)
        .raw(
            tar::EntryType::Regular,
            "../../../../../../../../tmp/crust-escape",
            "",
            b"x",
        )
        .finish();
    let through_abs = LayerBuilder::new()
        .symlink("etc", "/etc")
        .raw(tar::EntryType::Regular, "etc/crust-escape", "", b"x")
        .finish();
    let link_out = LayerBuilder::new()
        .symlink("out", canary.to_str().unwrap())
        .raw(
            tar::EntryType::Link,
            "shadow",
            "../../../../etc/shadow",
            b"",
        )
        .finish();
    push(
        &reg,
        t.path(),
        "evil/dotdot:v1",
        vec![image(vec![(dotdot, Compression::Gzip)], "x")],
    );
    push(
        &reg,
        t.path(),
        "evil/abs:v1",
        vec![image(vec![(through_abs, Compression::Gzip)], "x")],
    );
    push(
        &reg,
        t.path(),
        "evil/link:v1",
        vec![image(vec![(link_out, Compression::Gzip)], "x")],
    );
    let s = store(&t);
    rt().block_on(async {
        for r in ["evil/dotdot:v1", "evil/abs:v1", "evil/link:v1"] {
            let e = s.pull(&reg.name(r), None).await.unwrap_err();
            assert_eq!(e.kind(), ErrorKind::InvalidArgument, "{r}: {e}");
            assert!(e.to_string().contains(r.split(':').next().unwrap()), "{e}");
            assert!(s.resolve(&reg.name(r)).is_none());
        }
    });
    assert!(!Path::new("/tmp/crust-escape").exists());
    assert!(!Path::new("/etc/crust-escape").exists());
    assert!(!canary.exists());
    assert_eq!(entries(&t.path().join("store/layers")), 0);
    assert_eq!(entries(&t.path().join("store/tmp")), 0);
    // An absolute symlink on its own is just a symlink in the image.
    let abs = LayerBuilder::new().symlink("etc-link", "/etc").finish();
    push(
        &reg,
        t.path(),
        "fine/abs:v1",
        vec![image(vec![(abs, Compression::Gzip)], "x")],
    );
    let img = rt()
        .block_on(s.pull(&reg.name("fine/abs:v1"), None))
        .unwrap();
    let l = &s.layer_dirs(&img.id).unwrap()[0];
    assert_eq!(
        std::fs::read_link(l.join("etc-link")).unwrap(),
        Path::new("/etc")
    );
}

/// One image of [`usrmerge_layers_against_containerd`]: its layers (bottom first), and
/// where containerd's overlayfs snapshotter gives another tree than crust: path → its
/// entry there (`None`: absent there).
struct Case {
    name: &'static str,
    layers: Vec<Vec<u8>>,
    overlayfs: &'static [(&'static str, Option<&'static str>)],
}

/// A usrmerge base: the programs in `usr/bin`, `bin -> usr/bin`.
fn usrmerge_base() -> LayerBuilder {
    LayerBuilder::new()
        .dir("usr", 0o755)
        .dir("usr/bin", 0o755)
        .file("usr/bin/sh", b"base sh", 0o755)
        .symlink("bin", "usr/bin")
}

fn usrmerge_cases() -> Vec<Case> {
    let usrmerge = usrmerge_base().finish();
    vec![
        // A later layer writes `bin/hello` with no `bin/` entry over the base's symlink.
        Case {
            name: "implied",
            layers: vec![
                usrmerge.clone(),
                LayerBuilder::new()
                    .file("bin/hello", b"hello", 0o755)
                    .file("bin/sub/deep", b"deep", 0o644)
                    .finish(),
            ],
            overlayfs: &[
                ("/bin", Some("dir")),
                ("/bin/hello", Some("file hello")),
                ("/bin/sub", Some("dir")),
                ("/bin/sub/deep", Some("file deep")),
                ("/usr/bin/hello", None),
                ("/usr/bin/sub", None),
                ("/usr/bin/sub/deep", None),
            ],
        },
        // A layer's own symlink, then a file through it in the same layer.
        Case {
            name: "own",
            layers: vec![
                LayerBuilder::new()
                    .dir("etc", 0o755)
                    .file("etc/os", b"base", 0o644)
                    .finish(),
                LayerBuilder::new()
                    .symlink("sbin", "usr/sbin")
                    .file("sbin/tool", b"tool", 0o755)
                    .finish(),
            ],
            overlayfs: &[],
        },
        // An absolute symlink in the base, a file under it in a later layer.
        Case {
            name: "absolute",
            layers: vec![
                LayerBuilder::new()
                    .dir("usr", 0o755)
                    .dir("usr/lib", 0o755)
                    .file("usr/lib/base.so", b"base.so", 0o644)
                    .symlink("lib", "/usr/lib")
                    .finish(),
                LayerBuilder::new()
                    .file("lib/x.so", b"x.so", 0o644)
                    .finish(),
            ],
            overlayfs: &[
                ("/lib", Some("dir")),
                ("/lib/x.so", Some("file x.so")),
                ("/usr/lib/x.so", None),
            ],
        },
        // The base's symlink whited out in the middle: the top's `bin/x` is a new folder.
        Case {
            name: "whiteout",
            layers: vec![
                usrmerge.clone(),
                LayerBuilder::new().whiteout("bin").finish(),
                LayerBuilder::new().file("bin/x", b"x", 0o755).finish(),
            ],
            overlayfs: &[],
        },
        // An explicit `bin/` entry replaces the base's symlink.
        Case {
            name: "explicit",
            layers: vec![
                usrmerge.clone(),
                LayerBuilder::new()
                    .dir("bin", 0o755)
                    .file("bin/x", b"x", 0o755)
                    .finish(),
            ],
            overlayfs: &[],
        },
        // Symlinks that climb out: the base's `a/up -> ../../..` used by a later layer,
        // the top layer's own `own -> ../../../../x` by itself. Both stop at the root.
        Case {
            name: "up",
            layers: vec![
                LayerBuilder::new()
                    .dir("etc", 0o755)
                    .file("etc/os", b"base", 0o644)
                    .dir("a", 0o755)
                    .symlink("a/up", "../../..")
                    .finish(),
                LayerBuilder::new()
                    .file("a/up/etc/escaped", b"escaped", 0o644)
                    .symlink("own", "../../../../x")
                    .file("own/y", b"y", 0o644)
                    .finish(),
            ],
            overlayfs: &[
                ("/a/up", Some("dir")),
                ("/a/up/etc", Some("dir")),
                ("/a/up/etc/escaped", Some("file escaped")),
                ("/etc/escaped", None),
            ],
        },
        // Two lower symlinks on one path: `bin -> usr/bin`, then `usr/bin/sub -> ../lib/sub`.
        Case {
            name: "nested",
            layers: vec![
                usrmerge_base()
                    .dir("usr/lib", 0o755)
                    .dir("usr/lib/sub", 0o755)
                    .file("usr/lib/sub/base", b"base", 0o644)
                    .symlink("usr/bin/sub", "../lib/sub")
                    .finish(),
                LayerBuilder::new().file("bin/sub/f", b"f", 0o644).finish(),
            ],
            overlayfs: &[
                ("/bin", Some("dir")),
                ("/bin/sub", Some("dir")),
                ("/bin/sub/f", Some("file f")),
                ("/usr/lib/sub/f", None),
            ],
        },
    ]
}

/// Every entry below `root` (symlinks not followed), path → what it is: `dir`, `file`
/// and its content, `-> target`, or the mode of anything else.
fn tree(root: &Path) -> std::collections::BTreeMap<String, String> {
    fn walk(root: &Path, rel: &Path, out: &mut std::collections::BTreeMap<String, String>) {
        let Ok(rd) = std::fs::read_dir(root.join(rel)) else {
            return;
        };
        for e in rd.flatten() {
            let r = rel.join(e.file_name());
            let p = root.join(&r);
            let m = std::fs::symlink_metadata(&p).unwrap();
            let what = if m.file_type().is_symlink() {
                format!("-> {}", std::fs::read_link(&p).unwrap().display())
            } else if m.is_dir() {
                walk(root, &r, out);
                "dir".to_string()
            } else if m.is_file() {
                let data = std::fs::read(&p).unwrap();
                format!("file {}", String::from_utf8_lossy(&data).escape_debug())
            } else {
                use std::os::unix::fs::MetadataExt;
                format!("mode {:o}", m.mode())
            };
            out.insert(format!("/{}", r.display()), what);
        }
    }
    let mut out = std::collections::BTreeMap::new();
    walk(root, Path::new(""), &mut out);
    out
}

fn show(t: &std::collections::BTreeMap<String, String>) -> String {
    t.iter()
        .map(|(p, w)| format!("    {p:<20} {w}\n"))
        .collect()
}

/// The chain id of an image's top layer (its snapshot's name in containerd).
fn top_chain_id(layers: &[Vec<u8>]) -> String {
    let mut chain: Option<String> = None;
    for l in layers {
        let diff = image::layout::digest(l);
        chain = Some(match chain {
            None => diff,
            Some(c) => image::layout::digest(format!("{c} {diff}").as_bytes()),
        });
    }
    chain.unwrap()
}

/// Images whose layers write through symlinks, pulled by crust (its snapshot mounted as
/// a container's overlay) and by containerd 1.6 (`ctr images pull`, the top snapshot's
/// view mounted), compared entry by entry (type, symlink target, content).
///
/// containerd applies a layer in one of two ways. With the native snapshotter, onto a
/// copy of the layers below: a parent path is resolved through every layer's symlinks,
/// confined to the root, which is what crust does (`crate::chain` of the image crate),
/// and the trees must be the same. With the overlayfs snapshotter, its default and what
/// its CRI plugin uses, onto the layer's own upper folder alone: a lower layer's symlink
/// is never followed (the lower layers only lend their folders' metadata), so a folder
/// the layer implies becomes a real folder hiding that symlink. Each case lists the
/// entries where that gives another tree; any other difference fails.
#[test]
fn usrmerge_layers_against_containerd() {
    let ctrd_tools = ["containerd", "ctr", "runc", "containerd-shim-runc-v2"];
    if !require_root(&[TOOLS, &ctrd_tools[..]].concat()) {
        return;
    }
    let t = TempDir::new("img");
    let reg = Registry::start();
    let cases = usrmerge_cases();
    for c in &cases {
        let layers = c
            .layers
            .iter()
            .map(|l| (l.clone(), Compression::Gzip))
            .collect();
        push(
            &reg,
            t.path(),
            &format!("usrmerge/{}:v1", c.name),
            vec![image(layers, "x")],
        );
    }

    // crust: each image's snapshot mounted as a container's overlay.
    let s = store(&t);
    let mut crust = Vec::new();
    for c in &cases {
        let img = rt()
            .block_on(s.pull(&reg.name(&format!("usrmerge/{}:v1", c.name)), None))
            .unwrap_or_else(|e| panic!("crust pulling {}: {e}", c.name));
        let snap = s.prepare_snapshot(c.name, &img.id).unwrap();
        let mnt = t.path().join(format!("crust-{}", c.name));
        mount_snapshot(&snap, &mnt);
        let got = tree(&mnt);
        crust_e2e::sh(&["umount", mnt.to_str().unwrap()]);
        s.remove_snapshot(c.name).unwrap();
        crust.push(got);
    }

    // containerd: pulled into each snapshotter, the top layer's view mounted. (`ctr
    // images mount` would not do: 1.6's ignores its --snapshotter.)
    let mut ctrd = crust_e2e::containerd::Containerd::new(98);
    rt().block_on(ctrd.start(&[]))
        .unwrap_or_else(|e| panic!("containerd: {e}"));
    let ctr = |args: &[&str]| -> String {
        let out = crust_e2e::run(
            std::process::Command::new("ctr")
                .arg("--address")
                .arg(&ctrd.socket)
                .args(["--namespace", "test"])
                .args(args),
        );
        assert!(
            out.status.success(),
            "ctr {}: {}",
            args.join(" "),
            ctrd.failure(&String::from_utf8_lossy(&out.stderr))
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let mut differ = Vec::new();
    for snapshotter in ["overlayfs", "native"] {
        for (c, ours) in cases.iter().zip(&crust) {
            let r = reg.name(&format!("usrmerge/{}:v1", c.name));
            ctr(&[
                "images",
                "pull",
                "--plain-http",
                "--snapshotter",
                snapshotter,
                &r,
            ]);
            let key = format!("view-{snapshotter}-{}", c.name);
            let mounts: serde_json::Value = serde_json::from_str(&ctr(&[
                "snapshots",
                "--snapshotter",
                snapshotter,
                "view",
                "--mounts",
                &key,
                &top_chain_id(&c.layers),
            ]))
            .unwrap();
            let [m] = mounts.as_array().unwrap().as_slice() else {
                panic!("{key}: one mount expected: {mounts}");
            };
            let opts: Vec<&str> = m["Options"]
                .as_array()
                .unwrap()
                .iter()
                .map(|o| o.as_str().unwrap())
                .collect();
            let mnt = t.path().join(&key);
            std::fs::create_dir(&mnt).unwrap();
            crust_e2e::sh(&[
                "mount",
                "-t",
                m["Type"].as_str().unwrap(),
                m["Source"].as_str().unwrap(),
                mnt.to_str().unwrap(),
                "-o",
                &opts.join(","),
            ]);
            let theirs = tree(&mnt);
            crust_e2e::sh(&["umount", mnt.to_str().unwrap()]);
            // No lease holds the view: containerd's collector may have taken it already.
            let _ = crust_e2e::run(
                std::process::Command::new("ctr")
                    .arg("--address")
                    .arg(&ctrd.socket)
                    .args(["--namespace", "test", "snapshots", "--snapshotter"])
                    .args([snapshotter, "rm", &key]),
            );

            let mut expected = ours.clone();
            if snapshotter == "overlayfs" {
                for (p, what) in c.overlayfs {
                    match what {
                        Some(w) => expected.insert(p.to_string(), w.to_string()),
                        None => expected.remove(*p),
                    };
                }
            }
            let same = *ours == theirs;
            eprintln!(
                "{:<8} containerd {snapshotter:<9}: {}",
                c.name,
                match (same, expected == theirs) {
                    (true, _) => "the same as crust",
                    (false, true) => "differs from crust as listed",
                    (false, false) => "DIFFERS",
                }
            );
            if expected != theirs {
                differ.push(format!(
                    "{} with containerd's {snapshotter} snapshotter:\n  crust:\n{}  containerd:\n{}",
                    c.name,
                    show(ours),
                    show(&theirs)
                ));
            }
        }
    }
    drop(ctrd);
    assert!(differ.is_empty(), "\n{}", differ.join("\n"));
}
