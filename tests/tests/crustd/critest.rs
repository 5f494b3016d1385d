//! The CRI conformance suite (critest 1.36 of ../shared/tools/kubernetes-e2e-v1.28.7)
//! against crustd as a node runs it: crust's own `bridge`, `host-local` and `portmap`
//! from the packaged conflist, images pulled from a registry on the node's loopback
//! that mirrors `registry.k8s.io` (the offline stand-ins pushed there by the tools'
//! `install`). critest runs in the node's network namespace (and the host's mount
//! namespace, as crustd), so its port-mapping and port-forward specs dial the node as a
//! user on it would.
//!
//! cri-tools' own test images (gcr.io/k8s-staging-cri-tools/...) are stand-ins built here
//! from the node's static busybox, with the configs and relations the specs check (see
//! [`push_cri_tools_images`]); `k8s.gcr.io/pause:3.9` is the tools' `pause:3.9` through a
//! `k8s.gcr.io` mirror. Skipped, and only this: the spec that pulls an image by its
//! public digest.

use crust_e2e::crustd::{Crustd, Options};
use crust_e2e::registry::Registry;
use crust_e2e::{require_root, run, TempDir};
use image::layout::{write_oci_layout, Compression, LayerBuilder, LayoutEntry, LayoutImage};
use std::path::{Path, PathBuf};

/// The one spec that needs the Internet: it pulls cri-tools' test image by its public
/// digest, which no image made here can have. Every other image critest pulls has an
/// offline stand-in: the tools' (registry.k8s.io's) or [`push_cri_tools_images`]'.
const NEEDS_THE_INTERNET: &[&str] = &[r"Image Manager public image with digest"];

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

#[test]
fn critest_passes_with_crusts_plugins() {
    if !require_root(&["docker-registry", "skopeo", "xz", "nsenter"]) {
        return;
    }
    let (passed, summary) = critest(&Focus::All);
    // Every spec but the public digest's, and the AppArmor ones where the kernel has
    // AppArmor off. hack/vm-test's boot has it on (and says so), and an ext4 /tmp on
    // which the user-namespace spec's id-mapped mount works: all 136 run there.
    let apparmor = std::env::var("CRUST_APPARMOR_VM").is_ok_and(|v| v == "1");
    let want = if apparmor { 136 } else { 127 };
    assert!(
        passed >= want,
        "critest passed only {passed} specs (want {want}): {summary}"
    );
    println!("critest: {summary}");
}

/// critest's 9 AppArmor specs (deprecated field, structured field, both: an unloaded
/// profile refused, a blocking one blocking, a permissive one letting the container
/// run). They need a kernel with AppArmor, which this host's has off: hack/vm-test runs
/// this in its first boot, with securityfs mounted (`--include-ignored apparmor`).
#[test]
#[ignore = "needs AppArmor in the kernel: hack/vm-test runs it"]
fn critest_apparmor_specs_pass() {
    if !require_root(&[
        "docker-registry",
        "skopeo",
        "nsenter",
        "apparmor_parser",
        "sudo",
    ]) {
        return;
    }
    let (passed, summary) = critest(&Focus::Only("AppArmor", &["busybox"]));
    // A spec that skips (critest found no AppArmor) is not among the passed.
    assert!(
        passed >= 9,
        "critest passed only {passed} AppArmor specs: {summary}"
    );
    println!("critest AppArmor: {summary}");
}

/// critest's NRI specs on their own (they also run in the whole suite above): critest
/// connects to crustd's NRI socket as a plugin and checks the events' order and
/// contents, that a pod or container is not seen while a plugin's hook holds it, that a
/// plugin's error fails RunPodSandbox and CreateContainer with nothing left, and that a
/// plugin joining late is synchronized with every pod and container, also with those
/// made while it joins. None may skip.
#[test]
fn critest_nri_specs_pass() {
    if !require_root(&["docker-registry", "skopeo", "nsenter"]) {
        return;
    }
    let (passed, summary) = critest(&Focus::Only("NRI", &["busybox", "pause"]));
    assert!(
        passed >= 13,
        "critest passed only {passed} NRI specs: {summary}"
    );
    println!("critest NRI: {summary}");
}

/// Which of critest's specs run.
enum Focus<'a> {
    /// All but [`NEEDS_THE_INTERNET`], with every image of the tools pushed.
    All,
    /// The specs matching the regex, with only the images whose names contain one
    /// of the words pushed (the tools' binaries as unpacked by hack/deps).
    Only(&'a str, &'a [&'a str]),
}

/// Runs critest against a crustd set up as a node (crust's plugins, a registry
/// mirroring registry.k8s.io); fails on any failed spec. Passed count and summary.
fn critest(focus: &Focus) -> (usize, String) {
    let tools = workspace().join("../shared/tools/kubernetes-e2e-v1.28.7");
    let e2e_bin = std::env::var_os("CRUST_E2E_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| workspace().join("target/e2e-bin"));
    assert!(
        tools.join("install").is_file() && e2e_bin.join("critest").is_file(),
        "critest needs {} unpacked into {} (hack/deps does it)",
        tools.display(),
        e2e_bin.display()
    );
    let certs = TempDir::new("crcerts");
    // NRI on, as a node with NRI plugins runs it: critest's NRI specs connect to its
    // socket as plugins (and every other spec runs with NRI on).
    let nri_dir = TempDir::new("crnri");
    let nri_socket = nri_dir.path().join("nri.sock");
    let d = Crustd::start_with_config(
        Options {
            cni_conf: false,
            subnet: 73,
            extra_args: vec![
                "--registry-config-dir".into(),
                certs.path().display().to_string(),
            ],
            ..Default::default()
        },
        &format!(
            "[nri]\nenable = true\nsocket_path = \"{}\"\nplugin_path = \"{}\"\n",
            nri_socket.display(),
            nri_dir.path().join("plugins").display()
        ),
    );
    // The packaged conflist, on this node's bridge and subnet.
    let mut conf: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(workspace().join("packaging/cni/10-crust.conflist")).unwrap(),
    )
    .unwrap();
    conf["plugins"][0]["bridge"] = d.bridge.clone().into();
    conf["plugins"][0]["ipam"]["ranges"] = serde_json::json!([[{"subnet": "10.73.0.0/16"}]]);
    conf["plugins"][0]["ipam"]["dataDir"] = d.ipam_data.path().display().to_string().into();
    assert_eq!(conf["plugins"][1]["type"], "portmap");
    std::fs::write(
        d.conf_dir.path().join("10-crust.conflist"),
        conf.to_string(),
    )
    .unwrap();

    let reg = Registry::start_with(None, Some(&d.node));
    // registry.k8s.io (the tools' images), gcr.io (cri-tools' test images) and
    // k8s.gcr.io (the same pause:3.9 under its old name), all from the local registry.
    for host in ["registry.k8s.io", "gcr.io", "k8s.gcr.io"] {
        let mirror = certs.path().join(host);
        std::fs::create_dir_all(&mirror).unwrap();
        std::fs::write(
            mirror.join("hosts.toml"),
            format!(
                "server = \"https://{host}\"\n[host.\"http://{}\"]\n  capabilities = [\"pull\", \"resolve\"]\n",
                reg.addr
            ),
        )
        .unwrap();
    }
    match focus {
        Focus::All => {
            let unpacked = TempDir::new("crbin");
            let out = run(d
                .node
                .cmd(tools.join("install"))
                .arg(unpacked.path())
                .arg(&reg.addr));
            assert!(
                out.status.success(),
                "pushing the e2e images: {}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
        }
        Focus::Only(_, words) => push_images(&d, &tools.join("images"), &reg.addr, words),
    }
    if matches!(focus, Focus::All) {
        push_cri_tools_images(&d, &reg.addr);
    }

    let report = TempDir::new("crreport");
    // Only the network namespace is entered (`ip netns exec` would also give critest
    // a mount namespace of its own, hiding the host mounts its propagation specs make
    // from crustd).
    let mut cmd = std::process::Command::new("nsenter");
    cmd.arg(format!("--net={}", d.node.path().display()))
        .arg(e2e_bin.join("critest"))
        .arg(format!("-runtime-endpoint=unix://{}", d.socket.display()))
        .arg(format!("-image-endpoint=unix://{}", d.socket.display()))
        .arg(format!("-nri-socket={}", nri_socket.display()))
        .arg(format!("-ginkgo.skip={}", NEEDS_THE_INTERNET.join("|")))
        .arg("-ginkgo.no-color")
        .arg(format!("-report-dir={}", report.path().display()))
        .current_dir(report.path());
    if let Focus::Only(regex, _) = focus {
        // -v: a skipped spec says why, which the summary below keeps.
        cmd.arg(format!("-ginkgo.focus={regex}")).arg("-ginkgo.v");
    }
    let out = run(&mut cmd);
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    let mut summary = text
        .lines()
        .filter(|l| l.contains("Passed") && l.contains("Failed"))
        .collect::<Vec<_>>()
        .join("\n");
    // Why a focused spec skipped (ginkgo -v prints the reason after `[SKIPPED]`).
    if matches!(focus, Focus::Only(..)) {
        let lines: Vec<&str> = text.lines().collect();
        for (i, l) in lines.iter().enumerate() {
            if l.contains("[SKIPPED]") && !l.contains("[SKIPPED] [") {
                summary.push_str(&format!(
                    "\n{}",
                    lines[i..(i + 3).min(lines.len())].join(" / ")
                ));
            }
        }
    }
    assert!(
        out.status.success(),
        "critest failed ({summary}):\n{}",
        text.lines()
            .filter(|l| l.contains("[FAIL]") || l.contains("[FAILED]") || l.contains("error"))
            .take(60)
            .collect::<Vec<_>>()
            .join("\n")
    );
    let passed: usize = summary
        .split_whitespace()
        .zip(summary.split_whitespace().skip(1))
        .find(|(_, w)| *w == "Passed")
        .and_then(|(n, _)| n.parse().ok())
        .unwrap_or(0);
    (passed, summary)
}

/// Pushes the images of the tools' OCI layout whose names contain one of `words` to
/// the registry, at their upstream paths without the host (as the tools' `install`).
fn push_images(d: &Crustd, layout: &Path, registry: &str, words: &[&str]) {
    let index: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(layout.join("index.json")).unwrap()).unwrap();
    let mut pushed = 0;
    for m in index["manifests"].as_array().unwrap() {
        let name = m["annotations"]["org.opencontainers.image.ref.name"]
            .as_str()
            .unwrap();
        if !words.iter().any(|w| name.contains(w)) {
            continue;
        }
        let path = name.split_once('/').map_or(name, |(_, p)| p);
        let out = run(d
            .node
            .cmd("skopeo")
            .args([
                "copy",
                "-q",
                "--dest-tls-verify=false",
                "--preserve-digests",
            ])
            .arg(format!("oci:{}:{name}", layout.display()))
            .arg(format!("docker://{registry}/{path}")));
        assert!(
            out.status.success(),
            "pushing {name}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        pushed += 1;
    }
    assert!(
        pushed > 0,
        "no image of {} matches {words:?}",
        layout.display()
    );
}

/// Stand-ins for cri-tools' own test images (`gcr.io/k8s-staging-cri-tools/...`, pushed
/// to the local registry without the host), built from the node's static busybox with
/// what each spec checks: `test-image-tag:test` and `:all`, `test-image-latest` and
/// `test-image-1..3` all different images (a marker file each); `test-image-tags:1..3`
/// one image under three tags; the four user images by their config's `User` alone;
/// `test-image-predefined-group` with `default-user` (1000:1000) in
/// `group-defined-in-image` (50000); `hostnet-nginx-amd64` serving `/` on port 12003.
fn push_cri_tools_images(d: &Crustd, registry: &str) {
    let base = crust_e2e::cri::busybox_base(
        b"root:x:0:0:root:/root:/bin/sh\nwww-data:x:33:33:www-data:/var/www:/bin/sh\n",
        b"root:x:0:\nwww-data:x:33:\n",
        &[
            "sh", "ls", "top", "touch", "id", "sleep", "cat", "echo", "true", "httpd", "mkdir",
        ],
    )
    .finish();
    let image = |extra: Option<LayerBuilder>, user: &str, cmd: &[&str]| {
        let mut layers = vec![(base.clone(), Compression::Gzip)];
        if let Some(l) = extra {
            layers.push((l.finish(), Compression::Gzip));
        }
        let mut img = LayoutImage::new(layers);
        img.config.cmd = cmd.iter().map(|s| s.to_string()).collect();
        img.config.env = vec!["PATH=/bin".into()];
        img.config.user = user.into();
        img
    };
    let marked = |name: &str| {
        image(
            Some(LayerBuilder::new().file(name, name.as_bytes(), 0o644)),
            "",
            &["sh"],
        )
    };
    let predefined = image(
        Some(
            LayerBuilder::new()
                .dir("etc", 0o755)
                .file(
                    "etc/passwd",
                    b"root:x:0:0:root:/root:/bin/sh\ndefault-user:x:1000:1000::/home/default-user:/bin/sh\n",
                    0o644,
                )
                .file(
                    "etc/group",
                    b"root:x:0:\ndefault-user:x:1000:\ngroup-defined-in-image:x:50000:default-user\n",
                    0o644,
                ),
        ),
        "1000",
        &["sh"],
    );
    let nginx = image(
        Some(LayerBuilder::new().dir("www", 0o755).file(
            "www/index.html",
            b"crust stand-in for hostnet-nginx\n",
            0o644,
        )),
        "",
        &["httpd", "-f", "-p", "12003", "-h", "/www"],
    );
    // (layout ref, the repository paths and tags it is pushed as)
    let images: Vec<(&str, LayoutImage, Vec<&str>)> = vec![
        ("tag-test", marked("test"), vec!["test-image-tag:test"]),
        ("tag-all", marked("all"), vec!["test-image-tag:all"]),
        (
            "latest",
            marked("test-image-latest"),
            vec!["test-image-latest:latest"],
        ),
        ("one", marked("test-image-1"), vec!["test-image-1:latest"]),
        ("two", marked("test-image-2"), vec!["test-image-2:latest"]),
        ("three", marked("test-image-3"), vec!["test-image-3:latest"]),
        (
            "tags",
            marked("same-image"),
            vec![
                "test-image-tags:1",
                "test-image-tags:2",
                "test-image-tags:3",
            ],
        ),
        (
            "uid",
            image(None, "1002", &["sh"]),
            vec!["test-image-user-uid:latest"],
        ),
        (
            "username",
            image(None, "www-data", &["sh"]),
            vec!["test-image-user-username:latest"],
        ),
        (
            "uid-group",
            image(None, "1003:1004", &["sh"]),
            vec!["test-image-user-uid-group:latest"],
        ),
        (
            "username-group",
            image(None, "www-data:1004", &["sh"]),
            vec!["test-image-user-username-group:latest"],
        ),
        (
            "predefined",
            predefined,
            vec!["test-image-predefined-group:latest"],
        ),
        ("nginx", nginx, vec!["hostnet-nginx-amd64:latest"]),
    ];
    let layout = TempDir::new("crimages");
    let entries: Vec<LayoutEntry> = images
        .iter()
        .map(|(r, img, _)| LayoutEntry {
            ref_name: Some(r.to_string()),
            image_name: None,
            platforms: vec![img.clone()],
        })
        .collect();
    write_oci_layout(layout.path(), &entries);
    for (r, _, dests) in &images {
        for dest in dests {
            let out = run(d
                .node
                .cmd("skopeo")
                .args([
                    "copy",
                    "-q",
                    "--dest-tls-verify=false",
                    "--preserve-digests",
                ])
                .arg(format!("oci:{}:{r}", layout.path().display()))
                .arg(format!("docker://{registry}/k8s-staging-cri-tools/{dest}")));
            assert!(
                out.status.success(),
                "pushing {dest}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
    }
}
