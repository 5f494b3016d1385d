//! Images end to end: a real registry (`docker-registry`) on 127.0.0.1, images built
//! from busybox-static as OCI layouts and pushed with `skopeo`, pulled by crust's image
//! store, by `crustd images`, and through crustd's CRI ImageService.
//!
//! By topic, in images/: `registries` (authentication, hosts.toml, TLS) and `layers`
//! (unpacking); the pulls, the `crustd images` CLI and the CRI ImageService are here.

#[path = "images/layers.rs"]
mod layers;
#[path = "images/registries.rs"]
mod registries;

use crust_e2e::registry::Registry;
use crust_e2e::{require_root, which, TempDir};
use image::layout::{write_oci_layout, Compression, LayerBuilder, LayoutEntry, LayoutImage};
use image::{ErrorKind, ImageStore};
use std::path::{Path, PathBuf};

const TOOLS: &[&str] = &[
    "docker-registry",
    "skopeo",
    "htpasswd",
    "busybox",
    "openssl",
];

/// The busybox layer: `/bin/busybox`, a few applets, `/etc/passwd`.
fn busybox_layer() -> Vec<u8> {
    let bb = which("busybox").expect("busybox");
    let mut l = LayerBuilder::new()
        .dir("bin", 0o755)
        .file_from("bin/busybox", &bb, 0o755)
        .dir("etc", 0o755)
        .file(
            "etc/passwd",
            b"root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534::/:/bin/false\n",
            0o644,
        );
    for a in ["sh", "ls", "cat", "echo", "sleep", "true"] {
        l = l.symlink(&format!("bin/{a}"), "busybox");
    }
    l.finish()
}

fn image(layers: Vec<(Vec<u8>, Compression)>, cmd: &str) -> LayoutImage {
    let mut i = LayoutImage::new(layers);
    i.config.cmd = vec!["/bin/sh".into(), "-c".into(), cmd.into()];
    i.config.env = vec!["PATH=/bin".into()];
    i
}

/// Writes a one-entry layout (ref name `img`) and pushes it as `repo_tag`.
fn push(reg: &Registry, work: &Path, repo_tag: &str, platforms: Vec<LayoutImage>) {
    let dir = work.join(repo_tag.replace(['/', ':'], "_"));
    write_oci_layout(
        &dir,
        &[LayoutEntry {
            ref_name: Some("img".into()),
            image_name: None,
            platforms,
        }],
    );
    reg.push(&dir, "img", repo_tag);
}

fn store(t: &TempDir) -> ImageStore {
    ImageStore::open(t.path().join("store"), None).unwrap()
}

/// Mounts `snap` at the new folder `mnt` as a container's root: its overlay.
fn mount_snapshot(snap: &image::Snapshot, mnt: &Path) {
    std::fs::create_dir(mnt).unwrap();
    let opts = snap.overlay_options().join(",");
    crust_e2e::sh(&[
        "mount",
        "-t",
        "overlay",
        "overlay",
        "-o",
        &opts,
        mnt.to_str().unwrap(),
    ]);
}

fn entries(p: &Path) -> usize {
    std::fs::read_dir(p).map(|r| r.count()).unwrap_or(0)
}

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap()
}

#[test]
fn pull_by_tag_and_by_digest() {
    if !require_root(TOOLS) {
        return;
    }
    let t = TempDir::new("img");
    let reg = Registry::start();
    push(
        &reg,
        t.path(),
        "test/busybox:v1",
        vec![image(vec![(busybox_layer(), Compression::Gzip)], "echo hi")],
    );
    let s = store(&t);
    rt().block_on(async {
        let r = reg.name("test/busybox:v1");
        let img = s.pull(&r, None).await.unwrap();
        assert!(img.id.starts_with("sha256:"));
        assert_eq!(img.repo_tags, vec![r.clone()]);
        assert_eq!(img.repo_digests.len(), 1);
        assert!(img.repo_digests[0].starts_with(&format!("{}@sha256:", reg.name("test/busybox"))));
        assert_eq!(img.config.cmd, vec!["/bin/sh", "-c", "echo hi"]);
        let layers = s.layer_dirs(&r).unwrap();
        assert_eq!(layers.len(), 1);
        assert!(layers[0].join("bin/busybox").is_file());
        assert_eq!(
            std::fs::read_link(layers[0].join("bin/sh")).unwrap(),
            Path::new("busybox")
        );

        // By digest: the same image, found again by that digest.
        let by_digest = s.pull(&img.repo_digests[0], None).await.unwrap();
        assert_eq!(by_digest.id, img.id);
        assert_eq!(s.resolve(&img.repo_digests[0]).unwrap().id, img.id);
        assert_eq!(s.list().len(), 1);

        // Unknown tag and unknown repository: NotFound, naming the image.
        let e = s
            .pull(&reg.name("test/busybox:nope"), None)
            .await
            .unwrap_err();
        assert_eq!(e.kind(), ErrorKind::NotFound, "{e}");
        assert!(e.to_string().contains("test/busybox:nope"), "{e}");
        let e = s.pull(&reg.name("nobody/here:v1"), None).await.unwrap_err();
        assert_eq!(e.kind(), ErrorKind::NotFound, "{e}");
        // A registry that is down.
        let down = format!("127.0.0.1:{}/x/y:1", crust_e2e::registry::free_port());
        let e = s.pull(&down, None).await.unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Unavailable, "{e}");

        s.remove(&r).unwrap();
        assert!(s.resolve(&r).is_none());
        assert!(
            !layers[0].exists(),
            "layer kept after its only image was removed"
        );
    });
}

#[test]
fn multi_platform_index_and_docker_media_types() {
    if !require_root(TOOLS) {
        return;
    }
    let t = TempDir::new("img");
    let reg = Registry::start();
    let mut arm = image(vec![(busybox_layer(), Compression::Gzip)], "arm");
    arm.architecture = "arm64".into();
    let amd = image(vec![(busybox_layer(), Compression::Gzip)], "amd");
    push(&reg, t.path(), "multi/app:v1", vec![arm.clone(), amd]);
    let mut arm2 = arm.clone();
    arm2.os = "linux".into();
    let mut s390 = arm.clone();
    s390.architecture = "s390x".into();
    push(&reg, t.path(), "multi/armonly:v1", vec![arm2, s390]);
    let docker_dir = t.path().join("docker");
    write_oci_layout(
        &docker_dir,
        &[LayoutEntry {
            ref_name: Some("img".into()),
            image_name: None,
            platforms: vec![image(vec![(busybox_layer(), Compression::Gzip)], "docker")],
        }],
    );
    reg.push_args(&docker_dir, "img", "docker/app:v1", &["--format", "v2s2"]);
    let s = store(&t);
    rt().block_on(async {
        let img = s.pull(&reg.name("multi/app:v1"), None).await.unwrap();
        assert_eq!(img.config.cmd[2], "amd");
        let e = s
            .pull(&reg.name("multi/armonly:v1"), None)
            .await
            .unwrap_err();
        assert_eq!(e.kind(), ErrorKind::FailedPrecondition, "{e}");
        assert!(
            e.to_string().contains("linux/arm64") && e.to_string().contains("multi/armonly"),
            "{e}"
        );
        let img = s.pull(&reg.name("docker/app:v1"), None).await.unwrap();
        assert_eq!(img.config.cmd[2], "docker");
        let manifest = std::fs::read_to_string(
            t.path()
                .join("store/blobs/sha256")
                .join(img.repo_digests[0].rsplit(':').next().unwrap()),
        )
        .unwrap();
        assert!(
            manifest.contains("application/vnd.docker.distribution.manifest.v2+json"),
            "{manifest}"
        );
    });
}

fn blob_gets(reg: &Registry, digest: &str) -> usize {
    reg.log()
        .lines()
        .filter(|l| l.contains("GET") && l.contains(digest))
        .count()
}

#[test]
fn concurrent_pulls_share_one_download() {
    if !require_root(TOOLS) {
        return;
    }
    let t = TempDir::new("img");
    let reg = Registry::start();
    // A bigger, incompressible layer so the two pulls overlap.
    let mut noise = vec![0u8; 8 << 20];
    let mut x: u64 = 0x9e3779b97f4a7c15;
    for b in noise.iter_mut() {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        *b = x as u8;
    }
    let big = LayerBuilder::new().file("noise", &noise, 0o644).finish();
    let layer_digest = { image::layout::digest(&image::layout::compress(&big, Compression::Gzip)) };
    push(
        &reg,
        t.path(),
        "big/app:v1",
        vec![image(vec![(big, Compression::Gzip)], "x")],
    );
    let before = blob_gets(&reg, &layer_digest);
    let s = std::sync::Arc::new(store(&t));
    let r = reg.name("big/app:v1");
    let (a, b) = rt().block_on(async {
        let (s1, s2, r1, r2) = (s.clone(), s.clone(), r.clone(), r.clone());
        let a = tokio::spawn(async move { s1.pull(&r1, None).await });
        let b = tokio::spawn(async move { s2.pull(&r2, None).await });
        (a.await.unwrap(), b.await.unwrap())
    });
    assert_eq!(a.unwrap().id, b.unwrap().id);
    assert_eq!(
        blob_gets(&reg, &layer_digest) - before,
        1,
        "layer downloaded twice:\n{}",
        reg.log()
    );
    assert_eq!(s.list().len(), 1);
    assert_eq!(entries(&t.path().join("store/layers")), 1);
}

/// `crustd images pull` killed while a layer is half unpacked leaves nothing visible;
/// the next pull completes the image, and the leftovers are cleaned.
#[test]
fn killed_pull_is_completed_by_the_next() {
    if !require_root(TOOLS) {
        return;
    }
    let t = TempDir::new("img");
    let reg = Registry::start();
    let mut layers = vec![(busybox_layer(), Compression::Gzip)];
    for i in 0..4u8 {
        let mut noise = vec![0u8; 8 << 20];
        let mut x: u64 = 0x2545f4914f6cdd1d + i as u64;
        for b in noise.iter_mut() {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            *b = x as u8;
        }
        layers.push((
            LayerBuilder::new()
                .file(&format!("noise{i}"), &noise, 0o644)
                .finish(),
            Compression::Zstd,
        ));
    }
    push(&reg, t.path(), "slow/app:v1", vec![image(layers, "x")]);
    let root = t.path().join("store");
    let r = reg.name("slow/app:v1");
    let mut child = std::process::Command::new(crust_e2e::bin("crustd"))
        .args(["images", "--root"])
        .arg(t.path())
        .args(["pull", &r])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    // Wait for an unpack in progress, then kill.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    let images_root = t.path().join("images");
    loop {
        if entries(&images_root.join("tmp")) > 0 && entries(&images_root.join("layers")) > 0 {
            break;
        }
        assert!(
            child.try_wait().unwrap().is_none(),
            "pull finished before it could be killed"
        );
        assert!(std::time::Instant::now() < deadline, "no unpack seen");
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    child.kill().unwrap();
    child.wait().unwrap();
    let _ = root;
    let s = ImageStore::open(images_root.clone(), None).unwrap();
    assert!(s.resolve(&r).is_none(), "half-pulled image visible");
    assert_eq!(
        entries(&images_root.join("tmp")),
        0,
        "leftovers of the killed pull"
    );
    let img = rt().block_on(s.pull(&r, None)).unwrap();
    assert_eq!(s.layer_dirs(&img.id).unwrap().len(), 5);
}

/// `crustd images import | ls | rm` on an OCI layout tar.
#[test]
fn crustd_images_cli() {
    if !require_root(TOOLS) {
        return;
    }
    let t = TempDir::new("img");
    let layout = t.path().join("layout");
    write_oci_layout(
        &layout,
        &[LayoutEntry {
            ref_name: Some("v1".into()),
            image_name: Some("docker.io/library/imported:v1".into()),
            platforms: vec![image(
                vec![(busybox_layer(), Compression::Gzip)],
                "imported",
            )],
        }],
    );
    let tarfile = t.path().join("img.tar");
    crust_e2e::sh(&[
        "tar",
        "-C",
        layout.to_str().unwrap(),
        "-cf",
        tarfile.to_str().unwrap(),
        ".",
    ]);
    let crustd = |args: &[&str]| -> String {
        let mut full: Vec<String> = vec![
            "images".into(),
            "--root".into(),
            t.path().display().to_string(),
        ];
        full.extend(args.iter().map(|s| s.to_string()));
        let out = crust_e2e::run(std::process::Command::new(crust_e2e::bin("crustd")).args(&full));
        assert!(
            out.status.success(),
            "crustd {full:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let out = crustd(&["import", tarfile.to_str().unwrap()]);
    assert!(out.contains("docker.io/library/imported:v1"), "{out}");
    let ls = crustd(&["ls"]);
    assert!(ls.contains("docker.io/library/imported:v1"), "{ls}");
    crustd(&["rm", "imported:v1"]);
    let ls = crustd(&["ls"]);
    assert!(!ls.contains("imported"), "{ls}");
    let _: PathBuf = layout;
}

/// The CRI ImageService of a real crustd, with the registry in crustd's node namespace.
#[test]
fn cri_image_service() {
    if !require_root(TOOLS) {
        return;
    }
    let t = TempDir::new("img");
    let d = crust_e2e::crustd::Crustd::start();
    let reg = Registry::start_with(Some(("cri", "pw")), Some(&d.node));
    let mut cfg = image(vec![(busybox_layer(), Compression::Gzip)], "cri");
    cfg.config.user = "1234:5".into();
    cfg.config.labels.insert("crust.test".into(), "yes".into());
    push(&reg, t.path(), "cri/app:v1", vec![cfg]);
    let name = reg.name("cri/app:v1");
    rt().block_on(async {
        use cri_api::*;
        let mut c = d.images().await;
        let spec = |s: &str| {
            Some(ImageSpec {
                image: s.to_string(),
                ..Default::default()
            })
        };
        let creds = Some(AuthConfig {
            username: "cri".into(),
            password: "pw".into(),
            ..Default::default()
        });
        // Errors with their codes.
        let e = c
            .pull_image(PullImageRequest {
                image: spec(&name),
                ..Default::default()
            })
            .await
            .unwrap_err();
        assert_eq!(e.code(), tonic::Code::Unauthenticated, "{e:?}");
        let e = c
            .pull_image(PullImageRequest {
                image: spec(&reg.name("cri/app:nope")),
                auth: creds.clone(),
                ..Default::default()
            })
            .await
            .unwrap_err();
        assert_eq!(e.code(), tonic::Code::NotFound, "{e:?}");
        let e = c
            .pull_image(PullImageRequest {
                image: spec("Not A Reference"),
                ..Default::default()
            })
            .await
            .unwrap_err();
        assert_eq!(e.code(), tonic::Code::InvalidArgument, "{e:?}");

        let pulled = c
            .pull_image(PullImageRequest {
                image: spec(&name),
                auth: creds.clone(),
                ..Default::default()
            })
            .await
            .unwrap()
            .into_inner();
        assert!(pulled.image_ref.starts_with("sha256:"));

        let st = c
            .image_status(ImageStatusRequest {
                image: spec(&name),
                verbose: true,
            })
            .await
            .unwrap()
            .into_inner();
        let img = st.image.unwrap();
        assert_eq!(img.id, pulled.image_ref);
        assert_eq!(img.repo_tags, vec![name.clone()]);
        assert_eq!(img.repo_digests.len(), 1);
        assert_eq!(img.uid.unwrap().value, 1234);
        assert!(img.size > 0);
        let info: serde_json::Value = serde_json::from_str(&st.info["info"]).unwrap();
        assert_eq!(info["config"]["labels"]["crust.test"], "yes");
        assert_eq!(info["imageSpec"]["config"]["Cmd"][2], "cri");
        // By id prefix too; an unknown image is an empty answer.
        let short = &pulled.image_ref["sha256:".len().."sha256:".len() + 12];
        let st = c
            .image_status(ImageStatusRequest {
                image: spec(short),
                verbose: false,
            })
            .await
            .unwrap()
            .into_inner();
        assert_eq!(st.image.unwrap().id, pulled.image_ref);
        let st = c
            .image_status(ImageStatusRequest {
                image: spec("absent:v1"),
                verbose: false,
            })
            .await
            .unwrap()
            .into_inner();
        assert!(st.image.is_none());

        let all = c
            .list_images(ListImagesRequest { filter: None })
            .await
            .unwrap()
            .into_inner()
            .images;
        assert_eq!(all.len(), 1);
        let filtered = c
            .list_images(ListImagesRequest {
                filter: Some(ImageFilter {
                    image: spec("absent:v1"),
                }),
            })
            .await
            .unwrap()
            .into_inner()
            .images;
        assert!(filtered.is_empty());
        let filtered = c
            .list_images(ListImagesRequest {
                filter: Some(ImageFilter { image: spec(&name) }),
            })
            .await
            .unwrap()
            .into_inner()
            .images;
        assert_eq!(filtered.len(), 1);

        let fs = c
            .image_fs_info(ImageFsInfoRequest {})
            .await
            .unwrap()
            .into_inner();
        let used = fs.image_filesystems[0].used_bytes.as_ref().unwrap().value;
        assert!(used > 1 << 20, "image fs reports {used} bytes");
        assert!(fs.image_filesystems[0].inodes_used.as_ref().unwrap().value > 5);
        assert_eq!(fs.container_filesystems.len(), 1);

        c.remove_image(RemoveImageRequest { image: spec(&name) })
            .await
            .unwrap();
        c.remove_image(RemoveImageRequest { image: spec(&name) })
            .await
            .unwrap();
        let st = c
            .image_status(ImageStatusRequest {
                image: spec(&name),
                verbose: false,
            })
            .await
            .unwrap()
            .into_inner();
        assert!(st.image.is_none());
        let fs = c
            .image_fs_info(ImageFsInfoRequest {})
            .await
            .unwrap()
            .into_inner();
        assert!(fs.image_filesystems[0].used_bytes.as_ref().unwrap().value < used);
    });
}

/// A container runs from a pulled image and sees its files: a top layer adds a file,
/// deletes one of the base layer (whiteout) and replaces a directory (opaque); the
/// container's root is the overlay of exactly that.
#[test]
fn a_container_runs_from_a_pulled_image() {
    if !require_root(TOOLS) {
        return;
    }
    let t = TempDir::new("img");
    let d = crust_e2e::crustd::Crustd::start();
    let reg = Registry::start_with(None, Some(&d.node));
    let base = LayerBuilder::new()
        .dir("data", 0o755)
        .file("data/gone", b"deleted above\n", 0o644)
        .dir("data/old", 0o755)
        .file("data/old/a", b"old\n", 0o644)
        .finish();
    let top = LayerBuilder::new()
        .dir("data", 0o755)
        .file("data/hello", b"from the pulled image\n", 0o644)
        .whiteout("data/gone")
        .dir("data/old", 0o755)
        .opaque("data/old")
        .file("data/old/b", b"new\n", 0o644)
        .finish();
    push(
        &reg,
        t.path(),
        "run/app:v1",
        vec![image(
            vec![
                (busybox_layer(), Compression::Gzip),
                (base, Compression::Zstd),
                (top, Compression::Gzip),
            ],
            "cat /data/hello; ls /data /data/old",
        )],
    );
    let name = reg.name("run/app:v1");
    rt().block_on(async {
        use cri_api::*;
        let mut e = crust_e2e::cri::Env::with(d).await;
        let r =
            e.d.images()
                .await
                .pull_image(PullImageRequest {
                    image: Some(ImageSpec {
                        image: name.clone(),
                        ..Default::default()
                    }),
                    ..Default::default()
                })
                .await
                .expect("PullImage")
                .into_inner();
        assert!(r.image_ref.starts_with("sha256:"), "{}", r.image_ref);
        let pod = e.pod("pulled").await;
        let mut cfg = crust_e2e::cri::ctr("app", &[]);
        cfg.image = Some(ImageSpec {
            image: name.clone(),
            ..Default::default()
        });
        let id = e.create(&pod, cfg).await;
        e.start(&id).await;
        let s = e.wait_exited(&id).await;
        assert_eq!(s.exit_code, 0, "{s:?}");
        let text: Vec<String> = crust_e2e::cri::log_lines(Path::new(&s.log_path))
            .into_iter()
            .map(|l| l.3)
            .collect();
        assert_eq!(
            text,
            [
                "from the pulled image",
                "/data:",
                "hello",
                "old",
                "",
                "/data/old:",
                "b"
            ],
            "{text:?}"
        );
        assert_eq!(s.image_id, r.image_ref);
        e.remove(&id).await;
    });
}
