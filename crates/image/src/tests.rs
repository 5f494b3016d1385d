use super::*;
use crate::layout::{write_oci_layout, Compression, LayerBuilder, LayoutEntry, LayoutImage};

struct Tmp(PathBuf);
impl Tmp {
    fn new(tag: &str) -> Tmp {
        let p = std::env::temp_dir().join(format!("crust-image-{}-{tag}", std::process::id()));
        let _ = std::fs::remove_dir_all(&p);
        std::fs::create_dir_all(&p).unwrap();
        Tmp(p)
    }
}
impl Drop for Tmp {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn root() -> bool {
    // SAFETY: no preconditions.
    let is_root = unsafe { libc::geteuid() } == 0;
    if !is_root {
        assert!(
            std::env::var("CI").as_deref() != Ok("true"),
            "CI must run image tests as root"
        );
        eprintln!("SKIPPED: needs root");
    }
    is_root
}

fn base_layer() -> Vec<u8> {
    LayerBuilder::new()
        .dir("etc", 0o755)
        .file("etc/hostname", b"base\n", 0o644)
        .file("etc/old", b"old\n", 0o644)
        .dir("var/cache", 0o755)
        .file("var/cache/stale", b"stale\n", 0o644)
        .finish()
}

fn top_layer() -> Vec<u8> {
    LayerBuilder::new()
        .file("etc/hostname", b"top\n", 0o644)
        .whiteout("etc/old")
        .opaque("var/cache")
        .file("var/cache/fresh", b"fresh\n", 0o644)
        .finish()
}

fn two_layer_layout(dir: &Path, name: &str) {
    let mut img = LayoutImage::new(vec![
        (base_layer(), Compression::Gzip),
        (top_layer(), Compression::Zstd),
    ]);
    img.config.cmd = vec!["/bin/sh".into()];
    img.config.env = vec!["PATH=/bin".into()];
    img.config.user = "1000".into();
    write_oci_layout(
        dir,
        &[LayoutEntry {
            ref_name: Some("v1".into()),
            image_name: Some(name.into()),
            platforms: vec![img],
        }],
    );
}

#[test]
fn import_resolve_snapshot_remove() {
    if !root() {
        return;
    }
    let t = Tmp::new("basic");
    let layout = t.0.join("layout");
    two_layer_layout(&layout, "example.com/app:v1");
    let store = ImageStore::open(t.0.join("store"), None).unwrap();
    let imgs = store.import(&layout).unwrap();
    assert_eq!(imgs.len(), 1);
    let img = &imgs[0];
    assert_eq!(img.repo_tags, vec!["example.com/app:v1"]);
    assert_eq!(img.repo_digests.len(), 1);
    assert_eq!(img.config.cmd, vec!["/bin/sh"]);
    assert_eq!(img.config.user, "1000");
    assert!(img.size > 0);
    let hex = img.id.strip_prefix("sha256:").unwrap();
    for r in [
        "example.com/app:v1",
        img.id.as_str(),
        hex,
        &hex[..12],
        img.repo_digests[0].as_str(),
    ] {
        assert_eq!(
            store.resolve(r).as_ref().map(|i| &i.id),
            Some(&img.id),
            "{r}"
        );
    }
    assert!(store.resolve("example.com/app:v2").is_none());
    assert!(store.resolve("app").is_none());
    assert_eq!(store.list(), vec![img.clone()]);
    // A second handle on the same root (as `crustd images` beside the daemon) sees it.
    let other = ImageStore::open(t.0.join("store"), None).unwrap();
    assert_eq!(other.list().len(), 1);

    let snap = store.prepare_snapshot("c1", &img.id).unwrap();
    assert_eq!(snap.lowerdirs.len(), 2);
    assert_eq!(
        std::fs::read(snap.lowerdirs[0].join("etc/hostname")).unwrap(),
        b"top\n"
    );
    assert_eq!(
        std::fs::read(snap.lowerdirs[1].join("etc/hostname")).unwrap(),
        b"base\n"
    );
    assert!(snap.upperdir.is_dir() && snap.workdir.is_dir());
    let opts = snap.overlay_options();
    assert!(
        opts[0].starts_with("lowerdir=") && opts[0].contains(':'),
        "{opts:?}"
    );
    // Idempotent for the same image, refused for another.
    assert_eq!(
        store.prepare_snapshot("c1", "example.com/app:v1").unwrap(),
        snap
    );
    assert!(store.prepare_snapshot("../x", &img.id).is_err());
    assert_eq!(
        store.prepare_snapshot("c2", "nope").unwrap_err().kind(),
        ErrorKind::NotFound
    );

    // Removing the image keeps the layers the snapshot uses.
    store.remove("example.com/app:v1").unwrap();
    store.remove("example.com/app:v1").unwrap();
    assert!(store.resolve(&img.id).is_none());
    assert!(snap.lowerdirs.iter().all(|d| d.is_dir()));
    assert_eq!(store.snapshots(), vec!["c1"]);
    store.remove_snapshot("c1").unwrap();
    store.remove_snapshot("c1").unwrap();
    assert!(
        snap.lowerdirs.iter().all(|d| !d.exists()),
        "layers not collected"
    );
    assert_eq!(
        std::fs::read_dir(t.0.join("store/blobs/sha256"))
            .unwrap()
            .count(),
        0
    );
    assert_eq!(std::fs::read_dir(t.0.join("store/tmp")).unwrap().count(), 0);
}

#[test]
fn layers_are_shared_and_tags_move() {
    if !root() {
        return;
    }
    let t = Tmp::new("shared");
    let a = LayoutImage::new(vec![(base_layer(), Compression::Gzip)]);
    let mut b = LayoutImage::new(vec![
        (base_layer(), Compression::None),
        (top_layer(), Compression::Gzip),
    ]);
    b.config.cmd = vec!["b".into()];
    write_oci_layout(
        &t.0.join("l"),
        &[
            LayoutEntry {
                ref_name: None,
                image_name: Some("x/a:1".into()),
                platforms: vec![a],
            },
            LayoutEntry {
                ref_name: None,
                image_name: Some("x/b:1".into()),
                platforms: vec![b],
            },
        ],
    );
    let store = ImageStore::open(t.0.join("store"), None).unwrap();
    let imgs = store.import(&t.0.join("l")).unwrap();
    assert_eq!(imgs.len(), 2);
    assert_eq!(
        std::fs::read_dir(t.0.join("store/layers")).unwrap().count(),
        2,
        "base layer stored twice"
    );
    let la = store.layer_dirs("x/a:1").unwrap();
    let lb = store.layer_dirs("x/b:1").unwrap();
    assert_eq!(la[0], lb[0]);
    store.remove("x/a:1").unwrap();
    assert!(la[0].is_dir(), "shared layer removed with one image");
    store.remove("x/b:1").unwrap();
    assert_eq!(
        std::fs::read_dir(t.0.join("store/layers")).unwrap().count(),
        0
    );
}

#[test]
fn import_tar_docker_archive_and_corrupt() {
    if !root() {
        return;
    }
    let t = Tmp::new("tar");
    let layout = t.0.join("layout");
    two_layer_layout(&layout, "docker.io/library/tarred:latest");
    let tarfile = t.0.join("layout.tar");
    {
        let mut b = tar::Builder::new(std::fs::File::create(&tarfile).unwrap());
        b.append_dir_all(".", &layout).unwrap();
        b.finish().unwrap();
    }
    let store = ImageStore::open(t.0.join("store"), None).unwrap();
    let imgs = store.import(&tarfile).unwrap();
    assert_eq!(imgs[0].repo_tags, vec!["docker.io/library/tarred:latest"]);
    assert!(store.resolve("tarred").is_some());

    // docker save: manifest.json, a config, uncompressed layer tars.
    let da = t.0.join("docker");
    std::fs::create_dir_all(da.join("l1")).unwrap();
    let layer = base_layer();
    std::fs::write(da.join("l1/layer.tar"), &layer).unwrap();
    let config = serde_json::json!({"architecture":"amd64","os":"linux","config":{"Cmd":["sh"]},
        "rootfs":{"type":"layers","diff_ids":[crate::digest::of(&layer)]}});
    let config = serde_json::to_vec(&config).unwrap();
    std::fs::write(da.join("cfg.json"), &config).unwrap();
    std::fs::write(
        da.join("manifest.json"),
        br#"[{"Config":"cfg.json","RepoTags":["saved:v2"],"Layers":["l1/layer.tar"]}]"#,
    )
    .unwrap();
    let imgs = store.import(&da).unwrap();
    assert_eq!(imgs[0].id, crate::digest::of(&config));
    assert_eq!(imgs[0].repo_tags, vec!["docker.io/library/saved:v2"]);
    assert_eq!(store.list().len(), 2);

    // A layer whose content does not match its digest: nothing is stored.
    let bad = t.0.join("bad");
    let unique = LayerBuilder::new()
        .file("only-here", &[9u8; 5000], 0o644)
        .finish();
    let mut img = LayoutImage::new(vec![(unique, Compression::Gzip)]);
    img.config.cmd = vec!["bad".into()];
    write_oci_layout(
        &bad,
        &[LayoutEntry {
            ref_name: None,
            image_name: Some("bad:1".into()),
            platforms: vec![img],
        }],
    );
    let m: serde_json::Value =
        serde_json::from_slice(&std::fs::read(bad.join("index.json")).unwrap()).unwrap();
    let md = m["manifests"][0]["digest"]
        .as_str()
        .unwrap()
        .trim_start_matches("sha256:")
        .to_string();
    let man: serde_json::Value =
        serde_json::from_slice(&std::fs::read(bad.join("blobs/sha256").join(md)).unwrap()).unwrap();
    let ld = man["layers"][0]["digest"]
        .as_str()
        .unwrap()
        .trim_start_matches("sha256:")
        .to_string();
    let lp = bad.join("blobs/sha256").join(ld);
    let mut data = std::fs::read(&lp).unwrap();
    let n = data.len();
    data[n - 12] ^= 0xff;
    std::fs::write(&lp, data).unwrap();
    let e = store.import(&bad).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::DataLoss, "{e}");
    assert!(store.resolve("bad:1").is_none());
    assert_eq!(std::fs::read_dir(t.0.join("store/tmp")).unwrap().count(), 0);
    assert_eq!(
        std::fs::read_dir(t.0.join("store/layers")).unwrap().count(),
        2
    );
}

#[test]
fn overlay_of_a_snapshot_applies_whiteouts() {
    if !root() {
        return;
    }
    let t = Tmp::new("overlay");
    two_layer_layout(&t.0.join("layout"), "ov:1");
    let store = ImageStore::open(t.0.join("store"), None).unwrap();
    store.import(&t.0.join("layout")).unwrap();
    let snap = store.prepare_snapshot("ctr", "ov:1").unwrap();
    let mnt = t.0.join("mnt");
    std::fs::create_dir(&mnt).unwrap();
    nix::mount::mount(
        Some("overlay"),
        &mnt,
        Some("overlay"),
        nix::mount::MsFlags::empty(),
        Some(snap.overlay_options().join(",").as_str()),
    )
    .unwrap();
    let seen = std::panic::catch_unwind(|| {
        assert_eq!(std::fs::read(mnt.join("etc/hostname")).unwrap(), b"top\n");
        assert!(!mnt.join("etc/old").exists(), "whiteout not applied");
        assert!(
            !mnt.join("var/cache/stale").exists(),
            "opaque dir shows lower content"
        );
        assert!(mnt.join("var/cache/fresh").exists());
        std::fs::write(mnt.join("etc/new"), b"written").unwrap();
    });
    nix::mount::umount(&mnt).unwrap();
    seen.unwrap();
    assert_eq!(
        std::fs::read(snap.upperdir.join("etc/new")).unwrap(),
        b"written"
    );
    store.remove_snapshot("ctr").unwrap();
    assert!(!snap.upperdir.exists());
}
