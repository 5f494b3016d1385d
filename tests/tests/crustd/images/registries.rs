//! Registries: authentication (htpasswd, bearer and identity tokens), hosts.toml
//! (mirrors, headers, a CA or skip_verify for HTTPS), and layers a registry serves
//! corrupted or truncated.

use super::*;
use image::Auth;

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
