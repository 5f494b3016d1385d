//! Images end to end: a real registry (`docker-registry`) on 127.0.0.1, images built
//! from busybox-static as OCI layouts and pushed with `skopeo`, pulled by crust's image
//! store, by `crustd images`, and through crustd's CRI ImageService.

use crust_e2e::registry::Registry;
use crust_e2e::{require_root, which, TempDir};
use image::layout::{write_oci_layout, Compression, LayerBuilder, LayoutEntry, LayoutImage};
use image::{Auth, ErrorKind, ImageStore};
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

#[test]
fn htpasswd_auth() {
    if !require_root(TOOLS) {
        return;
    }
    let t = TempDir::new("img");
    let reg = Registry::start_with(Some(("crust", "s3cret")), None);
    push(
        &reg,
        t.path(),
        "private/app:v1",
        vec![image(vec![(busybox_layer(), Compression::Gzip)], "p")],
    );
    let s = store(&t);
    let r = reg.name("private/app:v1");
    rt().block_on(async {
        let e = s.pull(&r, None).await.unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Unauthenticated, "{e}");
        let wrong = Auth {
            username: "crust".into(),
            password: "nope".into(),
            ..Default::default()
        };
        let e = s.pull(&r, Some(wrong)).await.unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Unauthenticated, "{e}");
        assert!(e.to_string().contains("private/app"), "{e}");
        assert!(s.resolve(&r).is_none());
        let right = Auth {
            username: "crust".into(),
            password: "s3cret".into(),
            ..Default::default()
        };
        s.pull(&r, Some(right)).await.unwrap();
        s.remove(&r).unwrap();
        // The same credentials as the `auth` field (base64 of user:password).
        let b64 = Auth {
            auth: "Y3J1c3Q6czNjcmV0".into(),
            ..Default::default()
        };
        s.pull(&r, Some(b64)).await.unwrap();
    });
}

/// A CRI `identity_token` (an OAuth2 refresh token) is traded at the registry's token
/// service (docker-registry with token auth; the token service is the test's) for an
/// access token: a POST with grant_type=refresh_token, the repository's pull scope and
/// a client id. A wrong one is refused as Unauthenticated, naming the token service.
#[test]
fn identity_token_is_exchanged_at_the_token_service() {
    if !require_root(&["docker-registry", "skopeo", "openssl"]) {
        return;
    }
    let t = TempDir::new("img");
    let tokens = crust_e2e::token_server::TokenServer::start("refresh-s3cret", "pusher", "pw");
    let reg = Registry::start_token(&tokens, ("pusher", "pw"));
    push(
        &reg,
        t.path(),
        "private/oauth:v1",
        vec![image(vec![(busybox_layer(), Compression::Gzip)], "o")],
    );
    let s = store(&t);
    let r = reg.name("private/oauth:v1");
    rt().block_on(async {
        let e = s.pull(&r, None).await.unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Unauthenticated, "{e}");
        let wrong = Auth {
            identity_token: "not-it".into(),
            ..Default::default()
        };
        let e = s.pull(&r, Some(wrong)).await.unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Unauthenticated, "{e}");
        assert!(e.to_string().contains(&tokens.realm()), "{e}");
        let right = Auth {
            identity_token: "refresh-s3cret".into(),
            ..Default::default()
        };
        let img = s.pull(&r, Some(right)).await.unwrap();
        assert_eq!(img.repo_tags, vec![r.clone()]);
    });
    let posts = tokens.posts.lock().unwrap().clone();
    let last = posts.last().expect("no POST to the token service");
    assert_eq!(last["grant_type"], "refresh_token");
    assert_eq!(last["refresh_token"], "refresh-s3cret");
    assert_eq!(last["scope"], "repository:private/oauth:pull");
    assert_eq!(last["service"], crust_e2e::token_server::SERVICE);
    assert_eq!(last["client_id"], "crust");
}

/// A registry with token authentication and no hosts.toml: the pull's user and password
/// go to the token service (GET, HTTP basic) for a pull token, which every request of
/// the pull then carries, manifests and blobs alike. Without credentials, or with a
/// wrong password, the pull is Unauthenticated, naming the image.
#[test]
fn bearer_token_for_user_and_password() {
    if !require_root(&["docker-registry", "skopeo", "openssl"]) {
        return;
    }
    let t = TempDir::new("img");
    let tokens = crust_e2e::token_server::TokenServer::start("unused", "pusher", "pw");
    let reg = Registry::start_token(&tokens, ("pusher", "pw"));
    push(
        &reg,
        t.path(),
        "private/bearer:v1",
        vec![image(vec![(busybox_layer(), Compression::Gzip)], "b")],
    );
    let s = store(&t);
    let r = reg.name("private/bearer:v1");
    rt().block_on(async {
        for auth in [
            None,
            Some(Auth {
                username: "pusher".into(),
                password: "nope".into(),
                ..Default::default()
            }),
        ] {
            let e = s.pull(&r, auth).await.unwrap_err();
            assert_eq!(e.kind(), ErrorKind::Unauthenticated, "{e}");
            assert!(e.to_string().contains("private/bearer"), "{e}");
        }
        let right = Auth {
            username: "pusher".into(),
            password: "pw".into(),
            ..Default::default()
        };
        let img = s.pull(&r, Some(right)).await.unwrap();
        assert_eq!(img.repo_tags, vec![r.clone()]);
        let layers = s.layer_dirs(&r).unwrap();
        assert!(layers[0].join("bin/busybox").is_file());
    });
}

#[test]
fn mirror_from_hosts_toml() {
    if !require_root(TOOLS) {
        return;
    }
    let t = TempDir::new("img");
    let reg = Registry::start();
    push(
        &reg,
        t.path(),
        "library/mirrored:v1",
        vec![image(vec![(busybox_layer(), Compression::Gzip)], "m")],
    );
    // The origin is an address nobody listens on: only the mirror can serve.
    let certs = t.path().join("certs.d");
    let origin = "registry.crust.invalid";
    std::fs::create_dir_all(certs.join(origin)).unwrap();
    let closed = crust_e2e::registry::free_port();
    std::fs::write(
        certs.join(origin).join("hosts.toml"),
        format!(
            "server = \"http://127.0.0.1:{closed}\"\n\n[host.\"http://{}\"]\n  capabilities = [\"pull\", \"resolve\"]\n",
            reg.addr
        ),
    )
    .unwrap();
    let s = ImageStore::open(t.path().join("store"), Some(certs)).unwrap();
    rt().block_on(async {
        let name = format!("{origin}/library/mirrored:v1");
        let img = s.pull(&name, None).await.unwrap();
        assert_eq!(img.repo_tags, vec![name.clone()]);
        assert!(img.repo_digests[0].starts_with(&format!("{origin}/library/mirrored@sha256:")));
        assert_eq!(s.resolve(&name).unwrap().id, img.id);
        // Not on the mirror: the server is tried too, and the error names both.
        let e = s
            .pull(&format!("{origin}/library/absent:v1"), None)
            .await
            .unwrap_err();
        assert!(
            e.to_string().contains(&reg.addr) && e.to_string().contains(&closed.to_string()),
            "{e}"
        );
    });
}

/// A secret the header proxy wants, different per test and run.
fn header_secret() -> String {
    format!("secret-{}", crust_e2e::unique("h"))
}

/// `<dir>/<registry>/hosts.toml` with `body`; returns `dir`.
fn hosts_dir(dir: PathBuf, registry: &str, body: &str) -> PathBuf {
    std::fs::create_dir_all(dir.join(registry)).unwrap();
    std::fs::write(dir.join(registry).join("hosts.toml"), body).unwrap();
    dir
}

/// hosts.toml `header` is sent with every request to that host: a mirror (the header
/// proxy in front of the registry) refuses any request without it. As a mirror's
/// header with several values, and as the server's; without it the pull is refused as
/// Unauthenticated, naming the image.
#[test]
fn hosts_toml_header_is_sent() {
    if !require_root(TOOLS) {
        return;
    }
    let t = TempDir::new("img");
    let reg = Registry::start();
    let extra = LayerBuilder::new()
        .dir("data", 0o755)
        .file("data/hello", b"hello\n", 0o644)
        .finish();
    push(
        &reg,
        t.path(),
        "library/headers:v1",
        vec![image(
            vec![
                (busybox_layer(), Compression::Gzip),
                (extra, Compression::Zstd),
            ],
            "h",
        )],
    );
    let secret = header_secret();
    let proxy = crust_e2e::header_proxy::HeaderProxy::start(&reg.addr, "X-Crust-Test", &secret);
    let origin = "registry.crust.invalid";
    let closed = crust_e2e::registry::free_port();
    let mirror = hosts_dir(
        t.path().join("mirror"),
        origin,
        &format!(
            "server = \"http://127.0.0.1:{closed}\"\n\n[host.\"http://{p}\"]\n  capabilities = [\"pull\", \"resolve\"]\n  [host.\"http://{p}\".header]\n    X-Crust-Test = [\"other\", \"{secret}\"]\n",
            p = proxy.addr
        ),
    );
    let server = hosts_dir(
        t.path().join("server"),
        origin,
        &format!(
            "server = \"http://{}\"\n\n[header]\n  x-crust-test = \"{secret}\"\n",
            proxy.addr
        ),
    );
    let bare = hosts_dir(
        t.path().join("bare"),
        origin,
        &format!("server = \"http://{}\"\n", proxy.addr),
    );
    let name = format!("{origin}/library/headers:v1");
    rt().block_on(async {
        let s = ImageStore::open(t.path().join("s1"), Some(mirror)).unwrap();
        let img = s.pull(&name, None).await.unwrap();
        assert_eq!(img.repo_tags, vec![name.clone()]);
        let layers = s.layer_dirs(&name).unwrap();
        assert_eq!(layers.len(), 2);
        assert_eq!(
            std::fs::read(layers[1].join("data/hello")).unwrap(),
            b"hello\n"
        );
        // By digest, through the same mirror.
        let by_digest = s.pull(&img.repo_digests[0], None).await.unwrap();
        assert_eq!(by_digest.id, img.id);
        // Manifest, config and two layers at least.
        assert!(proxy.with_header() >= 4, "{}", proxy.with_header());
        assert_eq!(
            proxy.without_header(),
            0,
            "requests without the header: {:?}",
            proxy.refused()
        );
        // An unknown tag is NotFound, as from any registry.
        let e = s
            .pull(&format!("{origin}/library/headers:nope"), None)
            .await
            .unwrap_err();
        assert!(
            e.to_string().contains(&proxy.addr) && e.to_string().contains("headers:nope"),
            "{e}"
        );

        let s = ImageStore::open(t.path().join("s2"), Some(server)).unwrap();
        let img2 = s.pull(&name, None).await.unwrap();
        assert_eq!(img2.id, img.id);
        assert_eq!(proxy.without_header(), 0, "{:?}", proxy.refused());

        let s = ImageStore::open(t.path().join("s3"), Some(bare)).unwrap();
        let e = s.pull(&name, None).await.unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Unauthenticated, "{e}");
        assert!(e.to_string().contains(&name), "{e}");
        assert!(s.resolve(&name).is_none());
        assert!(proxy.without_header() > 0);
    });
}

/// A host with `header` that also wants credentials: the 401 challenge is answered with
/// the header on every request, the token service's included. HTTP basic (htpasswd) and a
/// bearer token from the token service, for the caller's user and password; and an
/// identity token traded for an access token (its probe of `/v2/` carries the header).
#[test]
fn hosts_toml_header_with_registry_auth() {
    if !require_root(TOOLS) {
        return;
    }
    let t = TempDir::new("img");
    let basic = Registry::start_with(Some(("crust", "s3cret")), None);
    push(
        &basic,
        t.path(),
        "private/hdr:v1",
        vec![image(vec![(busybox_layer(), Compression::Gzip)], "b")],
    );
    let tokens = crust_e2e::token_server::TokenServer::start("refresh-hdr", "pusher", "pw");
    let bearer = Registry::start_token(&tokens, ("pusher", "pw"));
    push(
        &bearer,
        t.path().join("b").as_path(),
        "private/hdr:v1",
        vec![image(vec![(busybox_layer(), Compression::Gzip)], "t")],
    );
    let secret = header_secret();
    for (reg, (user, pass), identity) in [
        (&basic, ("crust", "s3cret"), None),
        (&bearer, ("pusher", "pw"), Some("refresh-hdr")),
    ] {
        let proxy = crust_e2e::header_proxy::HeaderProxy::start(&reg.addr, "X-Crust-Test", &secret);
        let dir = hosts_dir(
            t.path()
                .join(format!("hosts-{}", reg.addr.replace(':', "_"))),
            &reg.addr,
            &format!(
                "server = \"http://{}\"\n\n[header]\n  X-Crust-Test = \"{secret}\"\n",
                proxy.addr
            ),
        );
        let root = t
            .path()
            .join(format!("store-{}", reg.addr.replace(':', "_")));
        let s = ImageStore::open(root, Some(dir)).unwrap();
        let r = reg.name("private/hdr:v1");
        rt().block_on(async {
            let e = s.pull(&r, None).await.unwrap_err();
            assert_eq!(e.kind(), ErrorKind::Unauthenticated, "{e}");
            assert!(e.to_string().contains("private/hdr"), "{e}");
            let wrong = Auth {
                username: user.into(),
                password: "nope".into(),
                ..Default::default()
            };
            let e = s.pull(&r, Some(wrong)).await.unwrap_err();
            assert_eq!(e.kind(), ErrorKind::Unauthenticated, "{e}");
            let right = Auth {
                username: user.into(),
                password: pass.into(),
                ..Default::default()
            };
            let img = s.pull(&r, Some(right)).await.unwrap();
            assert_eq!(img.repo_tags, vec![r.clone()]);
            if let Some(refresh) = identity {
                s.remove(&r).unwrap();
                let auth = Auth {
                    identity_token: refresh.into(),
                    ..Default::default()
                };
                let again = s.pull(&r, Some(auth)).await.unwrap();
                assert_eq!(again.id, img.id);
            }
        });
        assert!(proxy.with_header() >= 3, "{}", proxy.with_header());
        assert_eq!(
            proxy.without_header(),
            0,
            "requests without the header: {:?}",
            proxy.refused()
        );
    }
}

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

/// A layer the registry serves corrupted or truncated: DataLoss naming the image, and
/// nothing stored; from a host without hosts.toml and from one with `header`.
#[test]
fn corrupt_and_truncated_layers() {
    if !require_root(TOOLS) {
        return;
    }
    let t = TempDir::new("img");
    let reg = Registry::start();
    let s = store(&t);
    let secret = header_secret();
    let proxy = crust_e2e::header_proxy::HeaderProxy::start(&reg.addr, "X-Crust-Test", &secret);
    let hdr = hosts_dir(
        t.path().join("hosts"),
        &reg.addr,
        &format!(
            "server = \"http://{}\"\n\n[header]\n  X-Crust-Test = \"{secret}\"\n",
            proxy.addr
        ),
    );
    let s_hdr = ImageStore::open(t.path().join("store-hdr"), Some(hdr)).unwrap();
    for (i, repo) in ["bad/corrupt:v1", "bad/truncated:v1"].iter().enumerate() {
        let layer = LayerBuilder::new()
            .file("payload", &vec![i as u8 + 1; 300_000], 0o644)
            .finish();
        let blob = image::layout::digest(&image::layout::compress(&layer, Compression::Gzip));
        push(
            &reg,
            t.path(),
            repo,
            vec![image(vec![(layer, Compression::Gzip)], repo)],
        );
        let f = reg.blob_file(&blob);
        let mut data = std::fs::read(&f).unwrap();
        if i == 0 {
            let n = data.len() / 2;
            data[n] ^= 0x55;
        } else {
            data.truncate(data.len() / 2);
        }
        std::fs::write(&f, data).unwrap();
        for s in [&s, &s_hdr] {
            let e = rt().block_on(s.pull(&reg.name(repo), None)).unwrap_err();
            assert_eq!(e.kind(), ErrorKind::DataLoss, "{repo}: {e}");
            assert!(
                e.to_string().contains(repo.split(':').next().unwrap()),
                "{e}"
            );
            assert!(s.resolve(&reg.name(repo)).is_none());
        }
    }
    assert!(proxy.with_header() > 0);
    assert_eq!(proxy.without_header(), 0, "{:?}", proxy.refused());
    for store in ["store", "store-hdr"] {
        assert_eq!(entries(&t.path().join(store).join("layers")), 0);
        assert_eq!(entries(&t.path().join(store).join("tmp")), 0);
    }
}

/// HTTPS registries: trusted through hosts.toml's `ca`, or `skip_verify`; refused otherwise.
#[test]
fn tls_with_ca_and_skip_verify() {
    if !require_root(TOOLS) {
        return;
    }
    let t = TempDir::new("img");
    let reg = Registry::start_tls();
    push(
        &reg,
        t.path(),
        "tls/app:v1",
        vec![image(vec![(busybox_layer(), Compression::Gzip)], "tls")],
    );
    let r = reg.name("tls/app:v1");
    let hosts = |name: &str, body: &str| -> PathBuf {
        let d = t.path().join(name);
        std::fs::create_dir_all(d.join(&reg.addr)).unwrap();
        std::fs::write(d.join(&reg.addr).join("hosts.toml"), body).unwrap();
        d
    };
    let server = format!("server = \"https://{}\"\n", reg.addr);
    std::fs::copy(reg.ca(), t.path().join("ca.pem")).unwrap();
    let with_ca = hosts(
        "ca",
        &format!("{server}ca = \"{}\"\n", t.path().join("ca.pem").display()),
    );
    let skip = hosts("skip", &format!("{server}skip_verify = true\n"));
    let plain = hosts("plain", &server);
    rt().block_on(async {
        let s = ImageStore::open(t.path().join("s1"), Some(plain)).unwrap();
        let e = s.pull(&r, None).await.unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Unavailable, "{e}");
        let s = ImageStore::open(t.path().join("s2"), Some(with_ca)).unwrap();
        s.pull(&r, None).await.unwrap();
        let s = ImageStore::open(t.path().join("s3"), Some(skip)).unwrap();
        s.pull(&r, None).await.unwrap();
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
