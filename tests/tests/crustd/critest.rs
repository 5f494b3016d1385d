//! The CRI conformance suite (critest 1.36 of ../shared/tools/kubernetes-e2e-v1.28.7)
//! against crustd as a node runs it: crust's own `bridge`, `host-local` and `portmap`
//! from the packaged conflist, images pulled from a registry on the node's loopback
//! that mirrors `registry.k8s.io` (the offline stand-ins pushed there by the tools'
//! `install`). critest runs in the node's network namespace (and the host's mount
//! namespace, as crustd), so its port-mapping and port-forward specs dial the node as a
//! user on it would.
//!
//! Skipped, and only these: the specs whose images are cri-tools' own test images on
//! gcr.io or `k8s.gcr.io/pause`, of which there are no offline stand-ins (every one
//! fails with "failed to pull image" here whatever the runtime).

use crust_e2e::crustd::{Crustd, Options};
use crust_e2e::registry::Registry;
use crust_e2e::{require_root, run, TempDir};
use std::path::{Path, PathBuf};

/// The specs that pull images only the Internet has.
const NEEDS_THE_INTERNET: &[&str] = &[
    // All of Image Manager but "public image should timeout if requested", which
    // passes (nothing is pulled to the end).
    r"Image Manager public image with",
    r"Image Manager image status",
    r"Image Manager listImage",
    r"Image Manager removing image",
    r"Image Consistency",
    r"Image Identifier Consistency",
    r"Image Volume",
    r"SupplementalGroupsPolicy",
    r"portforward in host network",
];

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

#[test]
fn critest_passes_with_crusts_plugins() {
    if !require_root(&["docker-registry", "skopeo", "xz", "nsenter"]) {
        return;
    }
    let (passed, summary) = critest(&Focus::All);
    // It ran the suite, not an empty focus.
    assert!(
        passed >= 80,
        "critest passed only {passed} specs: {summary}"
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
    let mirror = certs.path().join("registry.k8s.io");
    std::fs::create_dir_all(&mirror).unwrap();
    std::fs::write(
        mirror.join("hosts.toml"),
        format!(
            "server = \"https://registry.k8s.io\"\n[host.\"http://{}\"]\n  capabilities = [\"pull\", \"resolve\"]\n",
            reg.addr
        ),
    )
    .unwrap();
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
