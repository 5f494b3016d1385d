//! End-to-end tests of `crustd` through the CRI client, against a daemon each test
//! starts in a node namespace it made, with crust's bridge as the pod network.

#[path = "crustd/cni.rs"]
mod cni;
#[path = "crustd/daemon.rs"]
mod daemon;
#[path = "crustd/lifecycle.rs"]
mod lifecycle;
#[path = "crustd/namespaces.rs"]
mod namespaces;

use cri_api::*;
use crust_e2e::cri::verbose_info;
use crust_e2e::crustd::{Crustd, Leftovers, Options};
use crust_e2e::{require_root, TempDir};
use std::collections::HashMap;
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};
use tonic::transport::Channel;
use tonic::Code;

type Client = RuntimeServiceClient<Channel>;

fn root() -> bool {
    require_root(&["ip", "nsenter", "ping", "nft", "hostname"])
}

fn pod_config(name: &str, uid: &str) -> PodSandboxConfig {
    PodSandboxConfig {
        metadata: Some(PodSandboxMetadata {
            name: name.into(),
            uid: uid.into(),
            namespace: "default".into(),
            attempt: 0,
        }),
        hostname: name.into(),
        log_directory: String::new(),
        labels: HashMap::from([("app".to_string(), name.to_string())]),
        linux: Some(LinuxPodSandboxConfig::default()),
        ..Default::default()
    }
}

/// A pod config with the given namespace modes for network, PID and IPC.
fn pod_with_modes(
    name: &str,
    network: NamespaceMode,
    pid: NamespaceMode,
    ipc: NamespaceMode,
) -> PodSandboxConfig {
    let mut cfg = pod_config(name, &format!("uid-{name}"));
    cfg.linux = Some(LinuxPodSandboxConfig {
        security_context: Some(LinuxSandboxSecurityContext {
            namespace_options: Some(NamespaceOption {
                network: network as i32,
                pid: pid as i32,
                ipc: ipc as i32,
                ..Default::default()
            }),
            ..Default::default()
        }),
        ..Default::default()
    });
    cfg
}

async fn try_run(
    c: &mut Client,
    cfg: Option<PodSandboxConfig>,
    handler: &str,
) -> Result<String, tonic::Status> {
    c.run_pod_sandbox(RunPodSandboxRequest {
        config: cfg,
        runtime_handler: handler.into(),
    })
    .await
    .map(|r| r.into_inner().pod_sandbox_id)
}

async fn run(c: &mut Client, cfg: PodSandboxConfig) -> String {
    try_run(c, Some(cfg), "").await.expect("RunPodSandbox")
}

async fn try_status(
    c: &mut Client,
    id: &str,
) -> Result<(PodSandboxStatus, serde_json::Value), tonic::Status> {
    let r = c
        .pod_sandbox_status(PodSandboxStatusRequest {
            pod_sandbox_id: id.into(),
            verbose: true,
        })
        .await?
        .into_inner();
    Ok((r.status.expect("status"), verbose_info(&r.info)))
}

/// The status and the verbose info of a sandbox.
async fn status(c: &mut Client, id: &str) -> (PodSandboxStatus, serde_json::Value) {
    try_status(c, id).await.expect("PodSandboxStatus")
}

async fn state(c: &mut Client, id: &str) -> PodSandboxState {
    PodSandboxState::try_from(status(c, id).await.0.state).unwrap()
}

/// The primary IP and the additional ones.
async fn ips(c: &mut Client, id: &str) -> (String, Vec<String>) {
    let n = status(c, id).await.0.network.unwrap_or_default();
    (n.ip, n.additional_ips.into_iter().map(|i| i.ip).collect())
}

async fn stop(c: &mut Client, id: &str) {
    c.stop_pod_sandbox(StopPodSandboxRequest {
        pod_sandbox_id: id.into(),
    })
    .await
    .unwrap_or_else(|e| panic!("StopPodSandbox {id}: {e}"));
}

async fn remove(c: &mut Client, id: &str) {
    c.remove_pod_sandbox(RemovePodSandboxRequest {
        pod_sandbox_id: id.into(),
    })
    .await
    .unwrap_or_else(|e| panic!("RemovePodSandbox {id}: {e}"));
}

async fn list(c: &mut Client, filter: Option<PodSandboxFilter>) -> Vec<PodSandbox> {
    c.list_pod_sandbox(ListPodSandboxRequest { filter })
        .await
        .expect("ListPodSandbox")
        .into_inner()
        .items
}

async fn list_ids(c: &mut Client, filter: PodSandboxFilter) -> Vec<String> {
    let mut v: Vec<String> = list(c, Some(filter))
        .await
        .into_iter()
        .map(|p| p.id)
        .collect();
    v.sort();
    v
}

/// The pid of the pause process from the verbose info, as `crictl inspectp | jq .info.pid`.
async fn pause_pid(c: &mut Client, id: &str) -> i32 {
    let pid = status(c, id).await.1["pid"].as_i64().unwrap_or(0) as i32;
    assert!(pid > 0, "sandbox {id} has no pause pid");
    pid
}

fn assert_code<T: std::fmt::Debug>(r: Result<T, tonic::Status>, code: Code, what: &str) {
    match r {
        Ok(v) => panic!("{what}: succeeded ({v:?}) but should fail with {code:?}"),
        Err(s) => {
            assert_eq!(s.code(), code, "{what}: {}", s.message());
            assert!(!s.message().is_empty(), "{what}: error without a message");
        }
    }
}

fn nsenter(args: &[&str]) -> Output {
    crust_e2e::run(Command::new("nsenter").args(args))
}

/// stdout of a command run inside a pod's pinned namespace (`--net=`, `--uts=`, ...).
fn in_pod(flag: &str, pin: &Path, cmd: &[&str]) -> String {
    let mut args = vec![format!("{flag}={}", pin.display())];
    args.extend(cmd.iter().map(|s| s.to_string()));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let out = nsenter(&args);
    assert!(
        out.status.success(),
        "nsenter {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// Whether pod `from` reaches `ip` (one ping from its network namespace).
fn ping(d: &Crustd, from: &str, ip: &str) -> bool {
    let pin = d.pin(from, "net");
    nsenter(&[
        &format!("--net={}", pin.display()),
        "ping",
        "-c",
        "1",
        "-W",
        "2",
        ip,
    ])
    .status
    .success()
}

/// A process that exists and is not a zombie.
fn alive(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| {
            s.rsplit_once(')')
                .map(|(_, r)| r.split_whitespace().next() != Some("Z"))
        })
        .unwrap_or(false)
}

/// Waits up to 5 s for a process to be gone.
fn wait_gone(pid: i32) -> bool {
    let deadline = Instant::now() + Duration::from_secs(5);
    while alive(pid) {
        if Instant::now() > deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    true
}

/// The inode of a namespace file (`/proc/PID/ns/KIND`, a pin, `/run/netns/NAME`).
fn ns_ino(path: &Path) -> u64 {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(path)
        .unwrap_or_else(|e| panic!("stat {}: {e}", path.display()))
        .ino()
}

fn proc_ns(pid: i32, kind: &str) -> u64 {
    ns_ino(Path::new(&format!("/proc/{pid}/ns/{kind}")))
}

fn assert_nothing_left(d: &Crustd, before: &Leftovers, what: &str) {
    let after = d.leftovers();
    assert_eq!(&after, before, "{what} left something behind");
}
