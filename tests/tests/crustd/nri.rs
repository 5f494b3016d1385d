//! NRI end to end with crust's example plugin (`crates/nri/examples/localtime.rs`: every
//! container gets the node's time zone file at `/etc/localtime` and `TZ`), connected
//! to crustd's socket as an external plugin, then started by crustd itself as a
//! pre-installed plugin with its configuration file. critest's NRI specs (the critest
//! suite) check the protocol's events; this checks that adjustments reach the
//! container.

use cri_api::*;
use crust_e2e::cri::*;
use crust_e2e::crustd::{Crustd, Options};
use crust_e2e::{require_root, TempDir};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// The example plugin, as `cargo test --workspace` (or `cargo build -p nri --examples`)
/// builds it.
fn plugin() -> PathBuf {
    let candidates = [
        crust_e2e::bin_dir().join("examples/localtime"),
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/debug/examples/localtime"),
    ];
    candidates
        .iter()
        .find(|p| p.is_file())
        .cloned()
        .unwrap_or_else(|| {
            panic!("no NRI example plugin at {candidates:?}: `cargo build -p nri --examples`")
        })
}

/// Runs `sh -c script` in a new container of `pod` until it exits; its log.
async fn run_in(e: &mut Env, pod: &(String, PodSandboxConfig), name: &str, script: &str) -> String {
    let id = e.create(pod, ctr(name, &["sh", "-c", script])).await;
    e.start(&id).await;
    let s = e.wait_exited(&id).await;
    let log = std::fs::read_to_string(&s.log_path).unwrap_or_default();
    assert_eq!(s.exit_code, 0, "{name}: {log}");
    e.remove(&id).await;
    log
}

const SCRIPT: &str =
    "echo TZ=$TZ; echo size=$(cat /etc/localtime | wc -c); cat /etc/localtime | head -c 16; echo";

fn config(dir: &Path) -> String {
    format!(
        "[nri]\nenable = true\nsocket_path = \"{}\"\nplugin_path = \"{}\"\nplugin_config_path = \"{}\"\n",
        dir.join("nri.sock").display(),
        dir.join("plugins").display(),
        dir.join("conf.d").display()
    )
}

#[tokio::test]
async fn an_nri_plugin_adjusts_containers_external_and_preinstalled() {
    if !require_root(&["ip", "nsenter", "busybox"]) {
        return;
    }
    let plugin = plugin();
    let dir = TempDir::new("nri");
    std::fs::create_dir_all(dir.path().join("plugins")).unwrap();
    std::fs::create_dir_all(dir.path().join("conf.d")).unwrap();
    let d = Crustd::start_with_config(Options::default(), &config(dir.path()));
    let mut e = Env::with(d).await;
    let pod = e.pod("nri").await;

    // Without a plugin: the image's own (busybox has no /etc/localtime).
    let log = run_in(&mut e, &pod, "before", SCRIPT).await;
    assert!(log.contains("TZ=\n") || log.contains("TZ= "), "{log}");

    // An external plugin: it connects, registers, is configured and synchronized.
    let mut external = std::process::Command::new(&plugin)
        .arg(dir.path().join("nri.sock"))
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    while !e.d.log_text().contains("NRI plugin registered") {
        assert!(
            Instant::now() < deadline,
            "the plugin did not register:\n{}",
            e.d.log_text()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let host = std::fs::read("/etc/localtime").unwrap();
    let log = run_in(&mut e, &pod, "external", SCRIPT).await;
    assert!(log.contains("TZ=:/etc/localtime"), "{log}");
    assert!(log.contains(&format!("size={}", host.len())), "{log}");
    external.kill().unwrap();
    external.wait().unwrap();
    e.remove_pod(&pod.0).await;

    // Pre-installed: crustd starts `NN-name` of its plugin folder with the socket as
    // fd 3, and hands it `NN-name.conf` (here: another zone file).
    let zone = dir.path().join("zone");
    std::fs::write(&zone, "TZif-crust-test-zone\n").unwrap();
    std::fs::copy(&plugin, dir.path().join("plugins/10-localtime")).unwrap();
    std::fs::write(
        dir.path().join("conf.d/10-localtime.conf"),
        format!("{}\n", zone.display()),
    )
    .unwrap();
    // (SIGKILL: a SIGTERM'd crustd waits for this test's client connection, which
    // this single-threaded test cannot serve while it waits for crustd.)
    e.d.kill9();
    e.d.spawn();
    e.c = e.d.client().await;
    let deadline = Instant::now() + Duration::from_secs(20);
    while e.d.log_text().matches("NRI plugin registered").count() < 2 {
        assert!(
            Instant::now() < deadline,
            "the pre-installed plugin did not register:\n{}",
            e.d.log_text()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let pod = e.pod("nri2").await;
    let log = run_in(&mut e, &pod, "preinstalled", SCRIPT).await;
    assert!(log.contains("TZ=:/etc/localtime"), "{log}");
    assert!(
        log.contains("size=21") && log.contains("TZif-crust-test-"),
        "{log}"
    );
    e.remove_pod(&pod.0).await;
    // A crustd gone takes its plugins along (they see their socket's end).
    e.d.kill9();
    let deadline = Instant::now() + Duration::from_secs(10);
    while !crust_e2e::crustd::pids_running(&dir.path().join("plugins/10-localtime")).is_empty() {
        assert!(
            Instant::now() < deadline,
            "the pre-installed plugin outlived crustd"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
