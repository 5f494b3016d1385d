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
        // On stdout's handle itself: libtest captures `eprintln!` of a passing test.
        use std::io::Write;
        let _ = writeln!(std::io::stdout().lock(), "SKIPPED: needs root");
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

/// A registry on 127.0.0.1 for pull tests: no auth, blobs and manifests from a table,
/// with ways to misbehave.
mod registry {
    use parking_lot::Mutex;
    use std::collections::{HashMap, HashSet};
    use std::io::{BufRead, BufReader, Write};
    use std::sync::Arc;

    #[derive(Default)]
    pub struct Serve {
        /// Request path (`/v2/...`) → body.
        pub bodies: HashMap<String, Vec<u8>>,
        /// Bodies sent without Content-Length, ended by closing the connection.
        pub no_length: bool,
        /// Paths whose body stops halfway, the connection left open.
        pub stall: HashSet<String>,
        /// Paths whose body never ends.
        pub endless: HashSet<String>,
        /// Requests served, and how many came with the `x-test` header hosts.toml
        /// configures.
        pub requests: usize,
        pub with_header: usize,
    }

    pub fn start(serve: Arc<Mutex<Serve>>) -> String {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap().to_string();
        std::thread::spawn(move || {
            for conn in l.incoming().flatten() {
                let serve = serve.clone();
                std::thread::spawn(move || {
                    let mut w = conn.try_clone().unwrap();
                    let mut r = BufReader::new(conn);
                    loop {
                        let mut line = String::new();
                        if r.read_line(&mut line).unwrap_or(0) == 0 {
                            return;
                        }
                        let path = line.split_whitespace().nth(1).unwrap_or("").to_string();
                        let mut header = false;
                        loop {
                            let mut h = String::new();
                            if r.read_line(&mut h).unwrap_or(0) == 0 {
                                return;
                            }
                            if h.trim_end().is_empty() {
                                break;
                            }
                            header |= h.to_ascii_lowercase().trim_end() == "x-test: 1";
                        }
                        {
                            let mut s = serve.lock();
                            s.requests += 1;
                            s.with_header += header as usize;
                        }
                        let (body, no_length, stall, endless) = {
                            let s = serve.lock();
                            (
                                s.bodies.get(&path).cloned(),
                                s.no_length,
                                s.stall.contains(&path),
                                s.endless.contains(&path),
                            )
                        };
                        let Some(body) = body else {
                            let _ =
                                w.write_all(b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n");
                            continue;
                        };
                        if endless {
                            let _ = w.write_all(b"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\n");
                            let chunk = vec![b' '; 64 << 10];
                            while w.write_all(&chunk).is_ok() {}
                            return;
                        }
                        if stall {
                            let head = format!(
                                "HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n",
                                body.len()
                            );
                            let _ = w.write_all(head.as_bytes());
                            let _ = w.write_all(&body[..body.len() / 2]);
                            let _ = w.flush();
                            std::thread::sleep(std::time::Duration::from_secs(30));
                            return;
                        }
                        if no_length {
                            let _ = w.write_all(b"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\n");
                            let _ = w.write_all(&body);
                            return;
                        }
                        let head =
                            format!("HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n", body.len());
                        if w.write_all(head.as_bytes()).is_err() || w.write_all(&body).is_err() {
                            return;
                        }
                    }
                });
            }
        });
        addr
    }
}

/// What one test image's descriptors get wrong: each delta is added to the size a
/// descriptor gives (0: the truth).
#[derive(Default, Clone, Copy)]
struct Lies {
    index: bool,
    child: i64,
    config: i64,
    layer: i64,
}

/// Puts an image (one layer with a file naming `tag`) into `serve` under repository
/// `t/img` and `tag`: the paths and bodies to serve, and its layer's digest.
fn serve_image(tag: &str, lies: Lies) -> (Vec<(String, Vec<u8>)>, String) {
    let layer = LayerBuilder::new()
        .file("hello", format!("{tag}\n").as_bytes(), 0o644)
        .finish();
    let ld = digest::of(&layer);
    let config = serde_json::to_vec(&serde_json::json!({
        "architecture": crate::platform::node().architecture, "os": "linux",
        "rootfs": {"type": "layers", "diff_ids": [ld]},
        "config": {"Cmd": ["/hello"]},
    }))
    .unwrap();
    let cd = digest::of(&config);
    let sz = |n: usize, d: i64| (n as i64 + d) as u64;
    let manifest = serde_json::to_vec(&serde_json::json!({
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {"mediaType": "application/vnd.oci.image.config.v1+json", "digest": cd,
                   "size": sz(config.len(), lies.config)},
        "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar", "digest": ld,
                    "size": sz(layer.len(), lies.layer)}],
    }))
    .unwrap();
    let md = digest::of(&manifest);
    let mut out = vec![
        (format!("/v2/t/img/blobs/{ld}"), layer),
        (format!("/v2/t/img/blobs/{cd}"), config),
        (format!("/v2/t/img/manifests/{md}"), manifest.clone()),
    ];
    if lies.index {
        let index = serde_json::to_vec(&serde_json::json!({
            "schemaVersion": 2,
            "mediaType": "application/vnd.oci.image.index.v1+json",
            "manifests": [{"mediaType": "application/vnd.oci.image.manifest.v1+json",
                           "digest": md, "size": sz(manifest.len(), lies.child),
                           "platform": {"os": "linux",
                                        "architecture": crate::platform::node().architecture}}],
        }))
        .unwrap();
        out.push((format!("/v2/t/img/manifests/{tag}"), index));
    } else {
        out.push((format!("/v2/t/img/manifests/{tag}"), manifest));
    }
    (out, ld)
}

/// Nothing of a refused pull is taken as whole: no image, no layer, nothing in tmp/.
fn nothing_recorded(store: &ImageStore, root: &Path) {
    assert!(store.list().is_empty(), "{:?}", store.list());
    assert_eq!(std::fs::read_dir(root.join("layers")).unwrap().count(), 0);
    assert_eq!(std::fs::read_dir(root.join("tmp")).unwrap().count(), 0);
}

/// A store whose pulls from `addr` go through a hosts.toml with a `header` when `header`,
/// else to the registry's default host: both ways of configuring a host take the same
/// checks.
fn pull_store(t: &Tmp, addr: &str, header: bool) -> (ImageStore, PathBuf) {
    let root = t.0.join(if header {
        "store-header"
    } else {
        "store-plain"
    });
    let hosts = if header {
        let d = t.0.join("certs.d").join(addr);
        std::fs::create_dir_all(&d).unwrap();
        std::fs::write(
            d.join("hosts.toml"),
            format!("server = \"http://{addr}\"\n[header]\n  x-test = \"1\"\n"),
        )
        .unwrap();
        Some(t.0.join("certs.d"))
    } else {
        None
    };
    (ImageStore::open(root.clone(), hosts).unwrap(), root)
}

/// Every descriptor's size is checked as well as its digest: a layer, config or index
/// child whose length is not its descriptor's is refused (DataLoss, as a digest mismatch
/// is), naming the blob and both sizes, whether the registry announces the length or
/// not, from a host with hosts.toml `header` and from one without; nothing is recorded,
/// and a true image pulls afterwards.
#[tokio::test(flavor = "multi_thread")]
async fn pull_refuses_a_blob_of_another_size() {
    if !root() {
        return;
    }
    let t = Tmp::new("sizes");
    let serve = Arc::new(Mutex::new(registry::Serve::default()));
    let addr = registry::start(serve.clone());
    let cases: Vec<(&str, Lies, &str)> = vec![
        (
            "layer-less",
            Lies {
                layer: -1,
                ..Default::default()
            },
            "layer",
        ),
        (
            "layer-more",
            Lies {
                layer: 1,
                ..Default::default()
            },
            "layer",
        ),
        (
            "config-less",
            Lies {
                config: -3,
                ..Default::default()
            },
            "config",
        ),
        (
            "config-more",
            Lies {
                config: 5,
                ..Default::default()
            },
            "config",
        ),
        (
            "child-less",
            Lies {
                index: true,
                child: -1,
                ..Default::default()
            },
            "manifest",
        ),
        (
            "child-more",
            Lies {
                index: true,
                child: 2,
                ..Default::default()
            },
            "manifest",
        ),
    ];
    let mut layers = HashMap::new();
    for (tag, lies, _) in &cases {
        let mut s = serve.lock();
        let (bodies, ld) = serve_image(tag, *lies);
        s.bodies.extend(bodies);
        layers.insert(tag.to_string(), ld);
    }
    for (tag, lies) in [
        ("good", Lies::default()),
        (
            "good-index",
            Lies {
                index: true,
                ..Default::default()
            },
        ),
    ] {
        let mut s = serve.lock();
        let (bodies, _) = serve_image(tag, lies);
        s.bodies.extend(bodies);
    }
    for header in [false, true] {
        for no_length in [false, true] {
            {
                let mut s = serve.lock();
                (s.no_length, s.requests, s.with_header) = (no_length, 0, 0);
            }
            let (store, root) = pull_store(&t, &addr, header);
            for (tag, _, blob) in &cases {
                let e = store
                    .pull(&format!("{addr}/t/img:{tag}"), None)
                    .await
                    .unwrap_err();
                let ctx = format!("{tag} header={header} no_length={no_length}: {e}");
                assert_eq!(e.kind(), ErrorKind::DataLoss, "{ctx}");
                let m = e.to_string();
                assert!(m.contains("size mismatch: the descriptor says"), "{ctx}");
                assert!(m.contains(&format!("{blob} sha256:")), "{ctx}");
                if *blob == "layer" {
                    assert!(m.contains(&layers[*tag]), "{ctx}");
                }
                nothing_recorded(&store, &root);
            }
            for tag in ["good", "good-index"] {
                let img = store
                    .pull(&format!("{addr}/t/img:{tag}"), None)
                    .await
                    .unwrap();
                let dirs = store.layer_dirs(&img.id).unwrap();
                assert_eq!(
                    std::fs::read(dirs[0].join("hello")).unwrap(),
                    format!("{tag}\n").as_bytes()
                );
            }
            assert_eq!(std::fs::read_dir(root.join("tmp")).unwrap().count(), 0);
            for tag in ["good", "good-index"] {
                store.remove(&format!("{addr}/t/img:{tag}")).unwrap();
            }
            // Every request of the header's store had it, the other's none.
            let (n, with) = {
                let s = serve.lock();
                (s.requests, s.with_header)
            };
            assert!(n > 0);
            assert_eq!(with, if header { n } else { 0 }, "header={header}");
            drop(store);
            std::fs::remove_dir_all(&root).unwrap();
        }
    }
}

/// A registry that stops sending halfway through a layer: after the stall timeout the
/// pull fails (Unavailable, naming the layer and the stall) instead of hanging, and
/// nothing is recorded.
#[tokio::test(flavor = "multi_thread")]
async fn pull_of_a_stalled_layer_fails() {
    if !root() {
        return;
    }
    let t = Tmp::new("stall");
    let serve = Arc::new(Mutex::new(registry::Serve::default()));
    let addr = registry::start(serve.clone());
    let ld = {
        let mut s = serve.lock();
        let (bodies, ld) = serve_image("v1", Lies::default());
        s.bodies.extend(bodies);
        s.stall.insert(format!("/v2/t/img/blobs/{ld}"));
        ld
    };
    for header in [false, true] {
        let (mut store, root) = pull_store(&t, &addr, header);
        store.set_stall_timeout(std::time::Duration::from_millis(500));
        let started = std::time::Instant::now();
        let e = store
            .pull(&format!("{addr}/t/img:v1"), None)
            .await
            .unwrap_err();
        assert!(
            started.elapsed() < std::time::Duration::from_secs(10),
            "{e}"
        );
        assert_eq!(e.kind(), ErrorKind::Unavailable, "header={header}: {e}");
        let m = e.to_string();
        assert!(m.contains(&format!("layer {ld}")), "header={header}: {m}");
        assert!(m.contains("stalled"), "header={header}: {m}");
        nothing_recorded(&store, &root);
    }
}

/// A manifest that never ends is cut at 4 MiB (containerd's limit), not held whole,
/// from a host with hosts.toml `header` as from one without.
#[tokio::test(flavor = "multi_thread")]
async fn pull_of_an_endless_manifest_fails() {
    if !root() {
        return;
    }
    let t = Tmp::new("endless");
    let serve = Arc::new(Mutex::new(registry::Serve::default()));
    let addr = registry::start(serve.clone());
    {
        let mut s = serve.lock();
        let (bodies, _) = serve_image("v1", Lies::default());
        s.bodies.extend(bodies);
        s.endless.insert("/v2/t/img/manifests/v1".into());
    }
    for header in [false, true] {
        let (store, root) = pull_store(&t, &addr, header);
        let e = store
            .pull(&format!("{addr}/t/img:v1"), None)
            .await
            .unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidArgument, "header={header}: {e}");
        assert!(e.to_string().contains("larger than 4194304 bytes"), "{e}");
        nothing_recorded(&store, &root);
    }
}

/// An OCI layout's blobs are checked against their descriptors' sizes too.
#[test]
fn import_refuses_a_blob_of_another_size() {
    if !root() {
        return;
    }
    for what in ["config", "layer"] {
        let t = Tmp::new(&format!("import-size-{what}"));
        let layout = t.0.join("layout");
        two_layer_layout(&layout, "example.com/app:v1");
        let index: serde_json::Value =
            serde_json::from_slice(&std::fs::read(layout.join("index.json")).unwrap()).unwrap();
        let blob = |d: &str| {
            layout
                .join("blobs/sha256")
                .join(d.strip_prefix("sha256:").unwrap())
        };
        let md = index["manifests"][0]["digest"]
            .as_str()
            .unwrap()
            .to_string();
        let m: serde_json::Value =
            serde_json::from_slice(&std::fs::read(blob(&md)).unwrap()).unwrap();
        let d = match what {
            "config" => m["config"]["digest"].as_str().unwrap().to_string(),
            _ => m["layers"][1]["digest"].as_str().unwrap().to_string(),
        };
        let mut f = std::fs::OpenOptions::new()
            .append(true)
            .open(blob(&d))
            .unwrap();
        std::io::Write::write_all(&mut f, b"x").unwrap();
        let store = ImageStore::open(t.0.join("store"), None).unwrap();
        let e = store.import(&layout).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::DataLoss, "{e}");
        let m = e.to_string();
        assert!(m.contains("size mismatch: the descriptor says"), "{m}");
        assert!(m.contains(&d), "{m}");
        assert!(store.list().is_empty());
        assert_eq!(std::fs::read_dir(t.0.join("store/tmp")).unwrap().count(), 0);
    }
}
