use super::*;
use crate::layout::LayerBuilder;

/// A store in a fresh temp folder with `layers` unpacked into it; their diff ids.
fn store_with(tag: &str, layers: Vec<Vec<u8>>) -> (ImageStore, PathBuf, Vec<String>) {
    let dir = std::env::temp_dir().join(format!("crust-chain-{}-{tag}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let store = ImageStore::open(dir.clone(), None).unwrap();
    let mut ids = vec![];
    for l in layers {
        let id = digest::of(&l);
        crate::unpack_layer_at(&dir, &l[..], None, &id, "test").unwrap();
        ids.push(id);
    }
    (store, dir, ids)
}

fn usrmerge_base() -> Vec<u8> {
    LayerBuilder::new()
        .dir("usr", 0o755)
        .dir("usr/bin", 0o711)
        .file("usr/bin/sh", b"sh", 0o755)
        .symlink("bin", "usr/bin")
        .symlink("abs", "/usr/bin")
        .finish()
}

fn is_dir(p: &Path) -> bool {
    std::fs::symlink_metadata(p).is_ok_and(|m| m.is_dir())
}

/// A later layer's `bin/x` (no `bin/` entry) over the base's `bin -> usr/bin`: a copy
/// keyed by the chain id holds `usr/bin/x`, no `bin/`; the diff id's folder is as
/// unpacked; the folders made on the way carry the base's metadata.
#[test]
fn implied_folders_follow_the_parents_symlinks() {
    let upper = LayerBuilder::new()
        .file("bin/x", b"x", 0o755)
        .file("abs/y", b"y", 0o755)
        .file("opt/z", b"z", 0o644)
        .finish();
    let (store, dir, ids) = store_with("usrmerge", vec![usrmerge_base(), upper]);
    let keys = store.layer_keys(&ids).unwrap();
    assert_eq!(keys[0], ids[0]);
    let chain = chain_id(Some(&ids[0]), &ids[1]);
    assert_eq!(keys[1], chain, "the upper layer needs a copy of its own");
    let copy = store.layer_dir(&chain).unwrap();
    assert!(copy.join("usr/bin/x").is_file());
    assert!(
        copy.join("usr/bin/y").is_file(),
        "an absolute symlink from the root"
    );
    assert!(
        copy.join("opt/z").is_file(),
        "a folder nothing below has stays"
    );
    assert!(
        std::fs::symlink_metadata(copy.join("bin")).is_err(),
        "bin/ would hide the symlink"
    );
    assert!(std::fs::symlink_metadata(copy.join("abs")).is_err());
    let mode = std::fs::metadata(copy.join("usr/bin")).unwrap().mode() & 0o7777;
    assert_eq!(mode, 0o711, "usr/bin takes the base's metadata");
    // The layer as unpacked is untouched, and shared by inode.
    let own = store.layer_dir(&ids[1]).unwrap();
    assert!(own.join("bin/x").is_file());
    assert_eq!(
        std::fs::metadata(own.join("bin/x")).unwrap().ino(),
        std::fs::metadata(copy.join("usr/bin/x")).unwrap().ino()
    );
    // Asked again (another image with the same chain): the same keys, nothing redone.
    assert_eq!(store.layer_keys(&ids).unwrap(), keys);
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Nothing to move, no copy: no symlink below, an explicit folder (which replaces the
/// symlink, as in containerd), a whiteout or an opaque folder between.
#[test]
fn layers_that_need_no_move_keep_their_diff_id() {
    let cases: Vec<(&str, Vec<Vec<u8>>)> = vec![
        (
            "plain",
            vec![
                LayerBuilder::new().dir("bin", 0o755).finish(),
                LayerBuilder::new().file("bin/x", b"x", 0o755).finish(),
            ],
        ),
        (
            "explicit folder",
            vec![
                usrmerge_base(),
                LayerBuilder::new()
                    .dir("bin", 0o755)
                    .file("bin/x", b"x", 0o755)
                    .finish(),
            ],
        ),
        (
            "whited out",
            vec![
                usrmerge_base(),
                LayerBuilder::new().whiteout("bin").finish(),
                LayerBuilder::new().file("bin/x", b"x", 0o755).finish(),
            ],
        ),
        (
            "opaque",
            vec![
                LayerBuilder::new()
                    .dir("a", 0o755)
                    .symlink("a/b", "/elsewhere")
                    .finish(),
                LayerBuilder::new().dir("a", 0o755).opaque("a").finish(),
                LayerBuilder::new().file("a/b/x", b"x", 0o755).finish(),
            ],
        ),
        (
            "lower file",
            vec![
                LayerBuilder::new()
                    .file("bin", b"not a folder", 0o644)
                    .finish(),
                LayerBuilder::new().file("bin/x", b"x", 0o755).finish(),
            ],
        ),
    ];
    for (name, layers) in cases {
        let (store, dir, ids) = store_with(&name.replace(' ', "-"), layers);
        assert_eq!(store.layer_keys(&ids).unwrap(), ids, "{name}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}

/// A symlink of the layer itself is followed inside the layer (containerd applies onto
/// the layer as it goes), confined to its root: `..` and absolute targets stay in it.
#[test]
fn a_layers_own_symlinks_are_followed_inside_it() {
    let l = LayerBuilder::new()
        .symlink("bin", "usr/bin")
        .file("bin/x", b"x", 0o755)
        .symlink("up", "../../..")
        .file("up/top", b"t", 0o644)
        .symlink("lib", "/usr/lib")
        .file("lib/l.so", b"l", 0o644)
        .finish();
    let (store, dir, ids) = store_with("own", vec![l]);
    let d = store.layer_dir(&ids[0]).unwrap();
    assert!(d.join("usr/bin/x").is_file());
    assert!(d.join("top").is_file(), "`..` stops at the root");
    assert!(d.join("usr/lib/l.so").is_file());
    assert!(std::fs::symlink_metadata(d.join("bin"))
        .unwrap()
        .file_type()
        .is_symlink());
    assert!(is_dir(&d.join("usr/bin")));
    // `usr` and `usr/bin` were implied, and noted.
    let noted = read_implied(&implied_file(&dir, &ids[0]).unwrap());
    assert!(noted.contains(Path::new("usr/bin")), "{noted:?}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn chain_ids_as_the_image_spec_defines_them() {
    let a = "sha256:aaaa";
    assert_eq!(chain_id(None, a), a);
    assert_eq!(
        chain_id(Some(a), "sha256:bbbb"),
        digest::of(b"sha256:aaaa sha256:bbbb")
    );
}
