//! End-to-end tests of `crustd` through the CRI client, against a daemon each test
//! starts in a node namespace it made, with crust's bridge as the pod network.

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

/// Runs the crustd binary to completion (it is expected to exit soon); kills it after
/// 10 s and fails if it did not.
fn crustd_exits(args: &[&str]) -> Output {
    let mut child = Command::new(crust_e2e::bin("crustd"))
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawning crustd");
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if child.try_wait().unwrap().is_some() {
            return child.wait_with_output().unwrap();
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let out = child.wait_with_output().unwrap();
            panic!(
                "crustd {args:?} kept running: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Two pods get addresses from the bridge network, report READY with their IPs, reach
/// each other, and are stopped and removed without a trace.
#[tokio::test]
async fn two_pods_run_ping_stop_remove() {
    if !root() {
        return;
    }
    let d = Crustd::start();
    let mut c = d.client().await;
    let v = c
        .version(VersionRequest::default())
        .await
        .unwrap()
        .into_inner();
    assert_eq!(v.runtime_name, "crust");
    assert_eq!(v.runtime_api_version, "v1");

    let a = run(&mut c, pod_config("a", "uid-a")).await;
    let b = run(&mut c, pod_config("b", "uid-b")).await;
    let c0 = c.clone();
    let st = |id: String| {
        let mut c = c0.clone();
        async move {
            c.pod_sandbox_status(PodSandboxStatusRequest {
                pod_sandbox_id: id,
                verbose: true,
            })
            .await
            .unwrap()
            .into_inner()
        }
    };
    let sa = st(a.clone()).await;
    let sb = st(b.clone()).await;
    let status_a = sa.status.unwrap();
    assert_eq!(status_a.state, PodSandboxState::SandboxReady as i32);
    let ip_a = status_a.network.as_ref().unwrap().ip.clone();
    let ip_b = sb.status.unwrap().network.unwrap().ip;
    assert!(ip_a.starts_with("10.66.0."), "{ip_a}");
    assert_eq!(
        status_a.network.unwrap().additional_ips[0]
            .ip
            .split(':')
            .next(),
        Some("fd00")
    );
    let info: serde_json::Value = serde_json::from_str(&sa.info["info"]).unwrap();
    assert!(info["pid"].as_i64().unwrap() > 0, "{info}");

    let out = std::process::Command::new("nsenter")
        .arg(format!("--net={}", d.pin(&a, "net").display()))
        .args(["ping", "-c", "1", "-W", "2", &ip_b])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "pod a cannot reach pod b: {}",
        String::from_utf8_lossy(&out.stdout)
    );

    c.stop_pod_sandbox(StopPodSandboxRequest {
        pod_sandbox_id: a.clone(),
    })
    .await
    .unwrap();
    let s = st(a.clone()).await.status.unwrap();
    assert_eq!(s.state, PodSandboxState::SandboxNotready as i32);
    c.remove_pod_sandbox(RemovePodSandboxRequest {
        pod_sandbox_id: a.clone(),
    })
    .await
    .unwrap();
    c.remove_pod_sandbox(RemovePodSandboxRequest {
        pod_sandbox_id: b.clone(),
    })
    .await
    .unwrap();
    let list = c
        .list_pod_sandbox(ListPodSandboxRequest::default())
        .await
        .unwrap()
        .into_inner()
        .items;
    assert!(list.is_empty(), "{list:?}");
    assert!(d.mounts().is_empty(), "pins left: {:?}", d.mounts());
    assert!(crust_e2e::ip_files(d.ipam_data.path(), "crust-e2e").is_empty());
}

/// PodSandboxStatus reports what RunPodSandbox was asked and what it made: READY, a
/// creation time, both IPs of the dual-stack network (v4 primary), the namespace
/// options, labels, annotations, metadata and runtime handler; and with `verbose` the
/// info map in containerd's shape (live pause pid, netns pin, cgroup, config).
#[tokio::test]
async fn status_reports_what_was_asked() {
    if !root() {
        return;
    }
    let d = Crustd::start();
    let mut c = d.client().await;
    let t0 = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos() as i64;
    let mut cfg = pod_with_modes(
        "web",
        NamespaceMode::Pod,
        NamespaceMode::Container,
        NamespaceMode::Pod,
    );
    cfg.metadata.as_mut().unwrap().namespace = "shop".into();
    cfg.metadata.as_mut().unwrap().attempt = 2;
    cfg.labels.insert("tier".into(), "front".into());
    cfg.annotations
        .insert("example.com/note".into(), "hello, world".into());
    let id = try_run(&mut c, Some(cfg), "crust").await.unwrap();
    assert_eq!(id.len(), 64, "{id}");
    let t1 = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos() as i64;

    let (s, info) = status(&mut c, &id).await;
    assert_eq!(s.id, id);
    assert_eq!(s.state, PodSandboxState::SandboxReady as i32);
    assert!(
        (t0..=t1).contains(&s.created_at),
        "created_at {} not in [{t0}, {t1}]",
        s.created_at
    );
    let md = s.metadata.unwrap();
    assert_eq!(
        (md.name.as_str(), md.namespace.as_str(), md.uid.as_str()),
        ("web", "shop", "uid-web")
    );
    assert_eq!(md.attempt, 2);
    let net = s.network.unwrap();
    assert!(net.ip.starts_with("10.66.0."), "primary IP {}", net.ip);
    assert_eq!(net.additional_ips.len(), 1, "{:?}", net.additional_ips);
    let v6 = &net.additional_ips[0].ip;
    assert!(
        v6.starts_with("fd00:66:") && v6.parse::<std::net::Ipv6Addr>().is_ok(),
        "{v6}"
    );
    let ns = s.linux.unwrap().namespaces.unwrap().options.unwrap();
    assert_eq!(ns.network, NamespaceMode::Pod as i32);
    assert_eq!(ns.pid, NamespaceMode::Container as i32);
    assert_eq!(ns.ipc, NamespaceMode::Pod as i32);
    assert_eq!(s.labels.get("tier").map(String::as_str), Some("front"));
    assert_eq!(s.labels.get("app").map(String::as_str), Some("web"));
    assert_eq!(
        s.annotations.get("example.com/note").map(String::as_str),
        Some("hello, world")
    );
    assert_eq!(s.runtime_handler, "crust");

    // Verbose info, as containerd fills it.
    let pid = info["pid"].as_i64().unwrap() as i32;
    assert!(alive(pid), "pause {pid} from info is not running: {info}");
    assert_eq!(
        d.pause_pids(),
        vec![pid],
        "the info's pid is the pause process"
    );
    assert_eq!(info["processStatus"], "running");
    assert_eq!(info["runtimeHandler"], "crust");
    assert_eq!(info["netns"], d.pin(&id, "net").display().to_string());
    assert_eq!(info["netNamespaceClosed"], false);
    assert_eq!(info["config"]["metadata"]["name"], "web");
    assert_eq!(info["config"]["metadata"]["namespace"], "shop");
    assert_eq!(info["config"]["hostname"], "web");
    assert_eq!(info["config"]["labels"]["tier"], "front");
    let cg = info["cgroupPath"].as_str().unwrap_or_default();
    assert!(cg.ends_with(&id), "cgroupPath {cg:?}");
    assert!(info["cniResult"]["ips"].as_array().is_some(), "{info}");
    // The pin is the pause's network namespace.
    assert_eq!(ns_ino(&d.pin(&id, "net")), proc_ns(pid, "net"));
    // The pause sits in the pod cgroup.
    let pod_cgroups = d.leftovers().pod_cgroups;
    assert!(
        !pod_cgroups.is_empty() && pod_cgroups.iter().all(|p| p.ends_with(&id)),
        "{pod_cgroups:?}"
    );
    // In every hierarchy (each v1 controller's and the cgroup2 one): it is born there.
    // Without a cgroup_parent, crust made a pod-level cgroup of the same name above the
    // pause's (where the containers go, beside it): the pause is in the lower one.
    let pause_cgroups: Vec<_> = pod_cgroups
        .iter()
        .filter(|p| p.parent().is_some_and(|d| d.ends_with(&id)))
        .collect();
    assert!(!pause_cgroups.is_empty(), "{pod_cgroups:?}");
    for dir in pause_cgroups {
        let procs = std::fs::read_to_string(dir.join("cgroup.procs")).unwrap();
        assert!(
            procs.lines().any(|l| l.trim() == pid.to_string()),
            "pause {pid} not in {}: {procs}",
            dir.display()
        );
    }

    // Without verbose, no info.
    let r = c
        .pod_sandbox_status(PodSandboxStatusRequest {
            pod_sandbox_id: id.clone(),
            verbose: false,
        })
        .await
        .unwrap()
        .into_inner();
    assert!(r.info.is_empty(), "{:?}", r.info);

    // A unique prefix of the id works as the id.
    assert_eq!(status(&mut c, &id[..12]).await.0.id, id);
}

/// ListPodSandbox filters by exact id, by a unique id prefix, by state and by label
/// selector (every pair must match), and lists everything without a filter.
#[tokio::test]
async fn list_filters() {
    if !root() {
        return;
    }
    let d = Crustd::start();
    let mut c = d.client().await;
    let mut cfg = pod_config("l1", "u1");
    cfg.labels.insert("tier".into(), "front".into());
    let a = run(&mut c, cfg).await;
    let mut cfg = pod_config("l2", "u2");
    cfg.labels.insert("tier".into(), "back".into());
    let b = run(&mut c, cfg).await;
    let mut cfg = pod_config("l3", "u3");
    cfg.labels.insert("tier".into(), "front".into());
    let e = run(&mut c, cfg).await;
    stop(&mut c, &e).await;

    let mut all = vec![a.clone(), b.clone(), e.clone()];
    all.sort();
    let full = list(&mut c, None).await;
    let mut ids: Vec<String> = full.iter().map(|p| p.id.clone()).collect();
    ids.sort();
    assert_eq!(ids, all);
    let la = full.iter().find(|p| p.id == a).unwrap();
    assert_eq!(la.metadata.as_ref().unwrap().name, "l1");
    assert_eq!(la.state, PodSandboxState::SandboxReady as i32);
    assert_eq!(la.labels["tier"], "front");
    assert!(la.created_at > 0);
    assert!(full.windows(2).all(|w| w[0].created_at <= w[1].created_at));

    let f = |id: &str| PodSandboxFilter {
        id: id.into(),
        ..Default::default()
    };
    assert_eq!(list_ids(&mut c, f(&a)).await, vec![a.clone()]);
    // The shortest prefix that tells `b` apart from the others.
    let n = (1..=64)
        .find(|&n| [&a, &e].iter().all(|o| !o.starts_with(&b[..n])))
        .unwrap();
    assert_eq!(list_ids(&mut c, f(&b[..n.max(8)])).await, vec![b.clone()]);
    assert!(list_ids(&mut c, f("nonexistent")).await.is_empty());

    let by_state = |s: PodSandboxState| PodSandboxFilter {
        state: Some(PodSandboxStateValue { state: s as i32 }),
        ..Default::default()
    };
    let mut ready = vec![a.clone(), b.clone()];
    ready.sort();
    assert_eq!(
        list_ids(&mut c, by_state(PodSandboxState::SandboxReady)).await,
        ready
    );
    assert_eq!(
        list_ids(&mut c, by_state(PodSandboxState::SandboxNotready)).await,
        vec![e.clone()]
    );

    let by_labels = |l: &[(&str, &str)]| PodSandboxFilter {
        label_selector: l
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
        ..Default::default()
    };
    let mut front = vec![a.clone(), e.clone()];
    front.sort();
    assert_eq!(
        list_ids(&mut c, by_labels(&[("tier", "front")])).await,
        front
    );
    assert_eq!(
        list_ids(&mut c, by_labels(&[("tier", "front"), ("app", "l3")])).await,
        vec![e.clone()]
    );
    assert!(list_ids(&mut c, by_labels(&[("tier", "middle")]))
        .await
        .is_empty());
    // Filters combine: front and ready.
    let mut both = by_labels(&[("tier", "front")]);
    both.state = Some(PodSandboxStateValue {
        state: PodSandboxState::SandboxReady as i32,
    });
    assert_eq!(list_ids(&mut c, both).await, vec![a.clone()]);
}

/// StopPodSandbox leaves the record (NOTREADY, IPs kept for the kubelet) but ends the
/// pause, releases the IPs from host-local's data dir, deletes the veth in the node
/// namespace and unpins the namespaces. RemovePodSandbox then removes the record, the
/// pod files, the pod cgroup and every mount. Both are idempotent, also for ids nobody
/// knows; the status of an unknown (or removed) id is NotFound.
#[tokio::test]
async fn stop_then_remove_leave_nothing() {
    if !root() {
        return;
    }
    let d = Crustd::start();
    let mut c = d.client().await;
    let empty = d.leftovers();
    let keep = run(&mut c, pod_config("keep", "uid-keep")).await;
    let with_keep = d.leftovers();
    let id = run(&mut c, pod_config("victim", "uid-victim")).await;
    let pid = pause_pid(&mut c, &id).await;
    let (ip, ip6) = ips(&mut c, &id).await;
    let l = d.leftovers();
    assert_eq!(l.veths.len(), 2, "{l:?}");
    assert_eq!(l.ip_files.len(), 4, "{l:?}");
    assert!(l.ip_files.contains(&ip), "{l:?}");
    assert_eq!(l.pauses.len(), 2);
    assert!(l.masq_rules >= 2, "{l:?}");
    for kind in ["net", "ipc", "uts", "pid"] {
        assert!(
            l.mounts.contains(&d.pin(&id, kind).display().to_string()),
            "{kind} pin missing: {l:?}"
        );
    }
    assert!(d.pod_file(&id, "hostname").is_file());
    assert!(d.pod_file(&id, "record.json").is_file());

    stop(&mut c, &id).await;
    assert_eq!(state(&mut c, &id).await, PodSandboxState::SandboxNotready);
    assert!(wait_gone(pid), "pause {pid} survived StopPodSandbox");
    let (s, info) = status(&mut c, &id).await;
    assert_eq!(info["pid"], 0, "{info}");
    assert_eq!(info["processStatus"], "stopped");
    // The kubelet still sees the addresses the pod had.
    assert_eq!(s.network.unwrap().ip, ip);
    let l = d.leftovers();
    assert_eq!(l.veths, with_keep.veths, "veth left after stop");
    assert_eq!(
        l.ip_files, with_keep.ip_files,
        "IPs still reserved after stop"
    );
    assert!(!l.ip_files.contains(&ip) && !l.ip_files.contains(&ip6[0]));
    assert_eq!(l.mounts, with_keep.mounts, "pins left after stop");
    assert_eq!(l.pauses, with_keep.pauses);
    assert_eq!(l.masq_rules, with_keep.masq_rules, "masquerade rule left");
    assert!(!d.pin(&id, "net").exists(), "net pin file left");
    // The record and files stay until remove.
    assert!(d.pod_file(&id, "record.json").is_file());
    assert!(l.pod_cgroups.iter().any(|p| p.ends_with(&id)));

    // Stop again, and stop of an unknown id: both fine.
    stop(&mut c, &id).await;
    stop(&mut c, &"0".repeat(64)).await;
    stop(&mut c, "no-such-sandbox").await;
    assert_eq!(state(&mut c, &id).await, PodSandboxState::SandboxNotready);

    remove(&mut c, &id).await;
    assert_code(
        try_status(&mut c, &id).await,
        Code::NotFound,
        "status after remove",
    );
    assert_nothing_left(&d, &with_keep, "StopPodSandbox + RemovePodSandbox");
    assert!(!d.pod_file(&id, "").exists(), "sandbox dir left");
    assert!(!d.pin(&id, "").exists(), "pin dir left");
    assert!(d.cgroup_dirs().iter().all(|p| !p.ends_with(&id)));
    remove(&mut c, &id).await;
    remove(&mut c, &"f".repeat(64)).await;
    assert_code(
        try_status(&mut c, &"e".repeat(64)).await,
        Code::NotFound,
        "status of an unknown id",
    );

    // The other pod was untouched; removing a READY pod without a stop works too.
    assert_eq!(state(&mut c, &keep).await, PodSandboxState::SandboxReady);
    remove(&mut c, &keep).await;
    assert_nothing_left(&d, &empty, "RemovePodSandbox of a ready pod");
    assert!(list(&mut c, None).await.is_empty());
}

/// A hostNetwork pod (network NODE) gets no CNI call: no IP, no veth, no reserved
/// address, no net or UTS pin; its pause runs in the node's network namespace, and
/// the pod is READY with an empty network status.
#[tokio::test]
async fn host_network_pod_gets_no_cni() {
    if !root() {
        return;
    }
    let d = Crustd::start();
    let mut c = d.client().await;
    let empty = d.leftovers();
    let id = run(
        &mut c,
        pod_with_modes(
            "hostnet",
            NamespaceMode::Node,
            NamespaceMode::Pod,
            NamespaceMode::Pod,
        ),
    )
    .await;
    let (s, info) = status(&mut c, &id).await;
    assert_eq!(s.state, PodSandboxState::SandboxReady as i32);
    let net = s.network.unwrap_or_default();
    assert!(
        net.ip.is_empty() && net.additional_ips.is_empty(),
        "{net:?}"
    );
    assert_eq!(
        s.linux
            .unwrap()
            .namespaces
            .unwrap()
            .options
            .unwrap()
            .network,
        NamespaceMode::Node as i32
    );
    let l = d.leftovers();
    assert!(l.veths.is_empty(), "{l:?}");
    assert!(l.ip_files.is_empty(), "{l:?}");
    assert_eq!(l.masq_rules, 0);
    assert!(!d.pin(&id, "net").exists() && !d.pin(&id, "uts").exists());
    assert!(d.pin(&id, "ipc").exists() && d.pin(&id, "pid").exists());
    assert_eq!(info["netns"], "", "{info}");
    let pid = info["pid"].as_i64().unwrap() as i32;
    assert_eq!(proc_ns(pid, "net"), ns_ino(&d.node.path()));
    assert_ne!(
        proc_ns(pid, "ipc"),
        proc_ns(std::process::id() as i32, "ipc")
    );

    stop(&mut c, &id).await;
    assert!(wait_gone(pid));
    remove(&mut c, &id).await;
    assert_nothing_left(&d, &empty, "a hostNetwork pod");
}

/// PID and IPC NODE put the pause in the node's PID and IPC namespaces (no pins for
/// them); PID POD gives the pod its own PID namespace with the pause as its PID 1.
#[tokio::test]
async fn pid_and_ipc_namespace_modes() {
    if !root() {
        return;
    }
    let d = Crustd::start();
    let mut c = d.client().await;
    let me = std::process::id() as i32;

    let host = run(
        &mut c,
        pod_with_modes(
            "hostpid",
            NamespaceMode::Pod,
            NamespaceMode::Node,
            NamespaceMode::Node,
        ),
    )
    .await;
    let pid = pause_pid(&mut c, &host).await;
    assert_eq!(proc_ns(pid, "pid"), proc_ns(me, "pid"));
    assert_eq!(proc_ns(pid, "ipc"), proc_ns(me, "ipc"));
    assert_ne!(proc_ns(pid, "net"), ns_ino(&d.node.path()));
    assert!(!d.pin(&host, "pid").exists() && !d.pin(&host, "ipc").exists());
    assert!(d.pin(&host, "net").exists() && d.pin(&host, "uts").exists());
    let st = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let nspid = st.lines().find(|l| l.starts_with("NSpid:")).unwrap();
    assert_eq!(
        nspid.split_whitespace().count(),
        2,
        "host PID pause must have one pid: {nspid}"
    );

    let own = run(
        &mut c,
        pod_with_modes(
            "podpid",
            NamespaceMode::Pod,
            NamespaceMode::Pod,
            NamespaceMode::Pod,
        ),
    )
    .await;
    let pid = pause_pid(&mut c, &own).await;
    assert_ne!(proc_ns(pid, "pid"), proc_ns(me, "pid"));
    assert_ne!(proc_ns(pid, "ipc"), proc_ns(me, "ipc"));
    assert_eq!(
        ns_ino(&d.pin(&own, "pid")),
        proc_ns(pid, "pid_for_children")
    );
    assert_eq!(ns_ino(&d.pin(&own, "ipc")), proc_ns(pid, "ipc"));
    let st = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let nspid = st.lines().find(|l| l.starts_with("NSpid:")).unwrap();
    assert_eq!(
        nspid.split_whitespace().last(),
        Some("1"),
        "the pause is not PID 1 of its namespace: {nspid}"
    );
    for id in [host, own] {
        stop(&mut c, &id).await;
        remove(&mut c, &id).await;
    }
    assert!(d.leftovers().pauses.is_empty());
}

/// The pod sees its own hostname in its UTS namespace; its resolv.conf comes from
/// `dns_config` (or is the node's when none is given); its hosts file names it on its
/// IP; its sysctls are set inside its network and IPC namespaces and not on the node.
#[tokio::test]
async fn pod_sees_hostname_dns_hosts_and_sysctls() {
    if !root() {
        return;
    }
    let d = Crustd::start();
    let mut c = d.client().await;
    let mut cfg = pod_config("dns-pod", "uid-dns");
    cfg.hostname = "my-host-0".into();
    cfg.dns_config = Some(DnsConfig {
        servers: vec!["10.96.0.10".into(), "10.96.0.11".into()],
        searches: vec!["ns.svc.cluster.local".into(), "svc.cluster.local".into()],
        options: vec!["ndots:5".into(), "edns0".into()],
    });
    cfg.linux.as_mut().unwrap().sysctls = HashMap::from([
        (
            "net.ipv4.ip_unprivileged_port_start".to_string(),
            "80".to_string(),
        ),
        ("kernel.shm_rmid_forced".to_string(), "1".to_string()),
    ]);
    let id = run(&mut c, cfg).await;

    assert_eq!(
        in_pod("--uts", &d.pin(&id, "uts"), &["hostname"]),
        "my-host-0"
    );
    let node_hostname = crust_e2e::sh(&["hostname"]);
    assert_ne!(node_hostname.trim(), "my-host-0", "the node was renamed");
    assert_eq!(
        std::fs::read_to_string(d.pod_file(&id, "hostname")).unwrap(),
        "my-host-0\n"
    );

    let resolv = std::fs::read_to_string(d.pod_file(&id, "resolv.conf")).unwrap();
    let lines: Vec<&str> = resolv.lines().collect();
    assert!(
        lines.contains(&"search ns.svc.cluster.local svc.cluster.local"),
        "{resolv}"
    );
    assert!(lines.contains(&"nameserver 10.96.0.10"), "{resolv}");
    assert!(lines.contains(&"nameserver 10.96.0.11"), "{resolv}");
    assert!(lines.contains(&"options ndots:5 edns0"), "{resolv}");

    let (ip, _) = ips(&mut c, &id).await;
    let hosts = std::fs::read_to_string(d.pod_file(&id, "hosts")).unwrap();
    assert!(
        hosts
            .lines()
            .any(|l| l.split_whitespace().collect::<Vec<_>>() == [ip.as_str(), "my-host-0"]),
        "hosts file lacks `{ip} my-host-0`:\n{hosts}"
    );
    assert!(hosts.lines().any(|l| l.starts_with("127.0.0.1")), "{hosts}");

    let port_start = "/proc/sys/net/ipv4/ip_unprivileged_port_start";
    assert_eq!(
        in_pod("--net", &d.pin(&id, "net"), &["cat", port_start]),
        "80"
    );
    assert_eq!(
        in_pod(
            "--ipc",
            &d.pin(&id, "ipc"),
            &["cat", "/proc/sys/kernel/shm_rmid_forced"]
        ),
        "1"
    );
    // Not on the node (its own namespaces are untouched).
    assert_eq!(
        d.node.sh(&["cat", port_start]).trim(),
        "1024",
        "the node's sysctl changed"
    );
    assert_eq!(
        std::fs::read_to_string("/proc/sys/kernel/shm_rmid_forced")
            .unwrap()
            .trim(),
        "0",
        "the host's IPC sysctl changed"
    );

    // Without a DNS config the pod gets the node's resolv.conf (kubelet's `Default`).
    let plain = run(&mut c, pod_config("plain", "uid-plain")).await;
    assert_eq!(
        std::fs::read_to_string(d.pod_file(&plain, "resolv.conf")).unwrap(),
        std::fs::read_to_string("/etc/resolv.conf").unwrap_or_default()
    );
    assert_eq!(
        in_pod("--uts", &d.pin(&plain, "uts"), &["hostname"]),
        "plain"
    );
}

/// Status says RuntimeReady, and NetworkReady false with a reason while the CNI conf
/// dir is empty; RunPodSandbox then fails with FailedPrecondition and leaves nothing.
/// Once a config appears NetworkReady turns true without a restart and pods run.
/// RuntimeConfig reports the cgroupfs driver.
#[tokio::test]
async fn network_readiness_follows_the_conf_dir() {
    if !root() {
        return;
    }
    let d = Crustd::start_with(Options {
        cni_conf: false,
        ..Default::default()
    });
    let mut c = d.client().await;
    let cond = |r: &StatusResponse, t: &str| {
        r.status
            .as_ref()
            .unwrap()
            .conditions
            .iter()
            .find(|x| x.r#type == t)
            .cloned()
            .unwrap_or_else(|| panic!("no {t} condition in {r:?}"))
    };
    let r = c
        .status(StatusRequest { verbose: true })
        .await
        .unwrap()
        .into_inner();
    assert!(cond(&r, "RuntimeReady").status);
    let n = cond(&r, "NetworkReady");
    assert!(!n.status);
    assert!(!n.reason.is_empty() && !n.message.is_empty(), "{n:?}");
    assert!(
        n.message.contains(&d.conf_dir.path().display().to_string()),
        "the message should name the conf dir: {n:?}"
    );
    let cfg: serde_json::Value = serde_json::from_str(&r.info["config"]).unwrap();
    assert_eq!(cfg["cgroupDriver"], "cgroupfs");

    let rc = c
        .runtime_config(RuntimeConfigRequest {})
        .await
        .unwrap()
        .into_inner();
    assert_eq!(
        rc.linux.unwrap().cgroup_driver,
        CgroupDriver::Cgroupfs as i32
    );

    let empty = d.leftovers();
    assert_code(
        try_run(&mut c, Some(pod_config("early", "uid-early")), "").await,
        Code::FailedPrecondition,
        "RunPodSandbox without a CNI config",
    );
    assert_nothing_left(&d, &empty, "RunPodSandbox without a CNI config");
    assert!(list(&mut c, None).await.is_empty());

    d.write_cni_conf();
    let r = c
        .status(StatusRequest { verbose: false })
        .await
        .unwrap()
        .into_inner();
    let n = cond(&r, "NetworkReady");
    assert!(n.status, "{n:?}");
    assert!(cond(&r, "RuntimeReady").status);
    let id = run(&mut c, pod_config("early", "uid-early")).await;
    assert_eq!(state(&mut c, &id).await, PodSandboxState::SandboxReady);
}

/// With `cni.conf_template` in the config file, UpdateRuntimeConfig renders the
/// kubelet's pod CIDRs (dual-stack) into a conflist in the conf dir; NetworkReady
/// turns true and pods get addresses from those ranges. A bad CIDR is InvalidArgument.
#[tokio::test]
async fn update_runtime_config_renders_the_template() {
    if !root() {
        return;
    }
    let tmpl_dir = TempDir::new("ct");
    let tmpl = tmpl_dir.path().join("template.json");
    let d = Crustd::start_with_config(
        Options {
            cni_conf: false,
            ..Default::default()
        },
        &format!("[cni]\nconf_template = \"{}\"\n", tmpl.display()),
    );
    std::fs::write(
        &tmpl,
        format!(
            r#"{{"cniVersion": "1.0.0", "name": "crust-e2e", "plugins": [{{"type": "bridge", "bridge": "{}", "isGateway": true,
              "ipam": {{"type": "host-local", "dataDir": "{}", "ranges": [{{{{.PodCIDRRanges}}}}], "routes": [{{{{.Routes}}}}]}}}}]}}"#,
            d.bridge,
            d.ipam_data.path().display()
        ),
    )
    .unwrap();
    let mut c = d.client().await;
    let net_ready = |r: StatusResponse| {
        r.status
            .unwrap()
            .conditions
            .iter()
            .find(|x| x.r#type == "NetworkReady")
            .unwrap()
            .status
    };
    assert!(!net_ready(
        c.status(StatusRequest::default())
            .await
            .unwrap()
            .into_inner()
    ));
    let update = |cidr: &str| UpdateRuntimeConfigRequest {
        runtime_config: Some(RuntimeConfig {
            network_config: Some(NetworkConfig {
                pod_cidr: cidr.into(),
            }),
        }),
    };
    assert_code(
        c.update_runtime_config(update("10.77.0.0/33")).await,
        Code::InvalidArgument,
        "a bad pod CIDR",
    );
    // Empty: nothing to do.
    c.update_runtime_config(update("")).await.unwrap();
    assert!(crust_e2e::run(Command::new("ls").arg(d.conf_dir.path()))
        .stdout
        .is_empty());

    c.update_runtime_config(update("10.77.0.0/24,fd00:77::/64"))
        .await
        .unwrap();
    let written = d.conf_dir.path().join("10-crust.conflist");
    let conf: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&written).unwrap()).unwrap();
    let ipam = &conf["plugins"][0]["ipam"];
    assert_eq!(ipam["ranges"][0][0]["subnet"], "10.77.0.0/24", "{conf}");
    assert_eq!(ipam["ranges"][1][0]["subnet"], "fd00:77::/64", "{conf}");
    assert_eq!(ipam["routes"][0]["dst"], "0.0.0.0/0");
    assert_eq!(ipam["routes"][1]["dst"], "::/0");
    assert!(net_ready(
        c.status(StatusRequest::default())
            .await
            .unwrap()
            .into_inner()
    ));

    let id = run(&mut c, pod_config("cidr", "uid-cidr")).await;
    let (ip, more) = ips(&mut c, &id).await;
    assert!(ip.starts_with("10.77.0."), "{ip}");
    assert!(
        more.len() == 1 && more[0].starts_with("fd00:77:"),
        "{more:?}"
    );
}

/// A second RunPodSandbox for the same name, namespace, uid and attempt fails with
/// AlreadyExists (the name is reserved, as in containerd) and leaves the first pod
/// alone; another attempt of the same pod is fine, and after RemovePodSandbox the
/// name is free again.
#[tokio::test]
async fn same_pod_twice_is_already_exists() {
    if !root() {
        return;
    }
    let d = Crustd::start();
    let mut c = d.client().await;
    let first = run(&mut c, pod_config("dup", "uid-dup")).await;
    let before = d.leftovers();
    assert_code(
        try_run(&mut c, Some(pod_config("dup", "uid-dup")), "").await,
        Code::AlreadyExists,
        "the same pod twice",
    );
    assert_nothing_left(&d, &before, "the refused duplicate");
    assert_eq!(state(&mut c, &first).await, PodSandboxState::SandboxReady);
    assert_eq!(list(&mut c, None).await.len(), 1);

    // Stopped, the name is still taken (the kubelet removes before it reuses).
    stop(&mut c, &first).await;
    assert_code(
        try_run(&mut c, Some(pod_config("dup", "uid-dup")), "").await,
        Code::AlreadyExists,
        "the same pod twice, first stopped",
    );

    let mut next = pod_config("dup", "uid-dup");
    next.metadata.as_mut().unwrap().attempt = 1;
    let second = run(&mut c, next).await;
    assert_ne!(second, first);
    let (ip2, _) = ips(&mut c, &second).await;
    let other = run(&mut c, pod_config("other", "uid-other")).await;
    assert!(
        ping(&d, &other, &ip2),
        "the second attempt is not reachable"
    );

    remove(&mut c, &first).await;
    let again = run(&mut c, pod_config("dup", "uid-dup")).await;
    assert_eq!(state(&mut c, &again).await, PodSandboxState::SandboxReady);
}

/// After SIGKILL of crustd and a restart, every sandbox comes back with the same id,
/// state, IPs, labels and annotations, the pods still reach each other (they never
/// stopped), the stale socket is replaced, and stop and remove then clean up fully.
#[tokio::test]
async fn restart_after_sigkill_gives_the_same_answers() {
    if !root() {
        return;
    }
    let mut d = Crustd::start();
    let mut c = d.client().await;
    let empty = d.leftovers();
    let mut cfg = pod_config("r1", "uid-r1");
    cfg.annotations.insert("note".into(), "kept".into());
    let a = run(&mut c, cfg).await;
    let b = run(&mut c, pod_config("r2", "uid-r2")).await;
    let e = run(&mut c, pod_config("r3", "uid-r3")).await;
    stop(&mut c, &e).await;
    let pauses = d.leftovers().pauses;
    let mut before = Vec::new();
    for id in [&a, &b, &e] {
        before.push(status(&mut c, id).await);
    }
    let listed = list(&mut c, None).await;
    drop(c);

    d.kill9();
    assert!(d.socket.exists(), "SIGKILL should leave the socket file");
    assert!(std::os::unix::net::UnixStream::connect(&d.socket).is_err());
    assert_eq!(d.leftovers().pauses, pauses, "pods must outlive crustd");
    d.spawn();
    assert!(
        d.log_text().contains("stale socket"),
        "no word of the stale socket in the log"
    );
    let mut c = d.client().await;
    for (id, (old, old_info)) in [&a, &b, &e].into_iter().zip(&before) {
        let (new, info) = status(&mut c, id).await;
        assert_eq!(&new, old, "status of {id} changed across the restart");
        assert_eq!(info["pid"], old_info["pid"]);
        assert_eq!(info["config"], old_info["config"]);
    }
    assert_eq!(list(&mut c, None).await, listed);
    assert_eq!(d.leftovers().pauses, pauses);
    let (ip_b, _) = ips(&mut c, &b).await;
    let (ip_a, _) = ips(&mut c, &a).await;
    assert!(ping(&d, &a, &ip_b), "a cannot reach b after the restart");
    assert!(ping(&d, &b, &ip_a), "b cannot reach a after the restart");
    // Names are still reserved after the restart.
    assert_code(
        try_run(&mut c, Some(pod_config("r1", "uid-r1")), "").await,
        Code::AlreadyExists,
        "a recovered pod's name",
    );

    for id in [&a, &b, &e] {
        stop(&mut c, id).await;
        assert_eq!(state(&mut c, id).await, PodSandboxState::SandboxNotready);
        remove(&mut c, id).await;
    }
    assert_nothing_left(&d, &empty, "stop and remove after a restart");
}

/// Waits for the CONTAINER_STOPPED_EVENT of sandbox `id` on `events`, whose pod status
/// must say NOTREADY.
async fn sandbox_stopped_event(events: &mut tonic::Streaming<ContainerEventResponse>, id: &str) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let ev = tokio::time::timeout_at(deadline, events.message())
            .await
            .unwrap_or_else(|_| panic!("no stopped event for sandbox {id}"))
            .expect("the event stream")
            .expect("an event");
        if ev.container_id == id
            && ev.container_event_type == ContainerEventType::ContainerStoppedEvent as i32
        {
            let s = ev.pod_sandbox_status.expect("the sandbox's status");
            assert_eq!(s.state, PodSandboxState::SandboxNotready as i32);
            return;
        }
    }
}

/// Kills the pause `pid` of a sandbox the test made and waits until it is gone.
fn kill_pause(pid: i32) {
    // SAFETY: killing the pause process of a sandbox this test made.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGKILL) }, 0);
    assert!(wait_gone(pid));
}

/// A sandbox whose pause process was killed reports NOTREADY (and no pid), and its
/// death is an event (the agent need not poll), also after a restart of crustd; stop
/// and remove still clean up its network and pins.
#[tokio::test]
async fn dead_pause_is_notready_also_after_restart() {
    if !root() {
        return;
    }
    let mut d = Crustd::start();
    let mut c = d.client().await;
    let empty = d.leftovers();
    let id = run(&mut c, pod_config("mortal", "uid-mortal")).await;
    let later = run(&mut c, pod_config("later", "uid-later")).await;
    let pid = pause_pid(&mut c, &id).await;
    let mut events = c
        .get_container_events(GetEventsRequest {})
        .await
        .expect("GetContainerEvents")
        .into_inner();
    kill_pause(pid);
    sandbox_stopped_event(&mut events, &id).await;
    assert_eq!(state(&mut c, &id).await, PodSandboxState::SandboxNotready);
    assert_eq!(status(&mut c, &id).await.1["pid"], 0);
    let notready = list_ids(
        &mut c,
        PodSandboxFilter {
            state: Some(PodSandboxStateValue {
                state: PodSandboxState::SandboxNotready as i32,
            }),
            ..Default::default()
        },
    )
    .await;
    assert_eq!(notready, vec![id.clone()]);
    drop(c);

    d.kill9();
    d.spawn();
    let mut c = d.client().await;
    assert_eq!(state(&mut c, &id).await, PodSandboxState::SandboxNotready);
    // A pause that dies after the restart: the recovered sandbox is watched too.
    assert_eq!(state(&mut c, &later).await, PodSandboxState::SandboxReady);
    let mut events = c
        .get_container_events(GetEventsRequest {})
        .await
        .expect("GetContainerEvents")
        .into_inner();
    kill_pause(pause_pid(&mut c, &later).await);
    sandbox_stopped_event(&mut events, &later).await;
    assert_eq!(
        state(&mut c, &later).await,
        PodSandboxState::SandboxNotready
    );
    stop(&mut c, &later).await;
    remove(&mut c, &later).await;
    // The namespace outlived the pause through its pin; stop tears the network down.
    assert_eq!(d.leftovers().veths.len(), 1);
    stop(&mut c, &id).await;
    assert!(d.leftovers().veths.is_empty());
    remove(&mut c, &id).await;
    assert_nothing_left(&d, &empty, "a pod whose pause died");
}

/// A sandbox left `creating` by a crash (here: a real one whose record is set back to
/// `creating` while crustd is down) is rolled back at start: no pause, pin, veth,
/// reserved IP, cgroup or record remains, and its name can be used again.
#[tokio::test]
async fn half_made_sandbox_is_rolled_back_at_start() {
    if !root() {
        return;
    }
    let mut d = Crustd::start();
    let mut c = d.client().await;
    let empty = d.leftovers();
    let keep = run(&mut c, pod_config("keep", "uid-keep")).await;
    let with_keep = d.leftovers();
    let id = run(&mut c, pod_config("half", "uid-half")).await;
    let pid = pause_pid(&mut c, &id).await;
    drop(c);
    d.kill9();

    let path = d.pod_file(&id, "record.json");
    let mut rec: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    assert_eq!(rec["state"], "ready", "record layout changed: {rec}");
    rec["state"] = "creating".into();
    std::fs::write(&path, serde_json::to_vec_pretty(&rec).unwrap()).unwrap();

    d.spawn();
    let mut c = d.client().await;
    assert!(
        wait_gone(pid),
        "the half-made pod's pause survived recovery"
    );
    assert_code(
        try_status(&mut c, &id).await,
        Code::NotFound,
        "rolled back pod",
    );
    assert_nothing_left(&d, &with_keep, "recovery of a half-made sandbox");
    assert_eq!(state(&mut c, &keep).await, PodSandboxState::SandboxReady);
    let again = run(&mut c, pod_config("half", "uid-half")).await;
    stop(&mut c, &again).await;
    remove(&mut c, &again).await;
    remove(&mut c, &keep).await;
    assert_nothing_left(&d, &empty, "the rest");
}

/// A second crustd on the same state (or root) dir refuses to start, exits non-zero
/// and says why, naming the dir; the first one keeps serving.
#[tokio::test]
async fn second_crustd_on_the_same_dirs_refuses_to_start() {
    if !root() {
        return;
    }
    let d = Crustd::start();
    let other_root = TempDir::new("cr2");
    let other_state = TempDir::new("cs2");
    let cfg = other_root.path().join("empty.toml");
    std::fs::write(&cfg, "").unwrap();
    let common = |root: &Path, state: &Path| -> Vec<String> {
        vec![
            "--config".into(),
            cfg.display().to_string(),
            "--root".into(),
            root.display().to_string(),
            "--state".into(),
            state.display().to_string(),
            "--cni-conf-dir".into(),
            d.conf_dir.path().display().to_string(),
            "--cgroup-root".into(),
            format!("{}-second", d.cgroup_root),
            "--cgroup-nested".into(),
        ]
    };
    for (root, state, dir) in [
        (other_root.path(), d.state.path(), d.state.path()),
        (d.root.path(), other_state.path(), d.root.path()),
    ] {
        let args = common(root, state);
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let out = crustd_exits(&args);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "second crustd started: {err}");
        assert!(
            err.contains("another crustd is already running")
                && err.contains(&dir.display().to_string()),
            "unclear refusal: {err}"
        );
    }
    assert!(d.socket.exists());
    let mut c = d.client().await;
    c.version(VersionRequest::default()).await.unwrap();
    assert!(d.log_text().lines().count() > 0);
}

/// Bad requests get InvalidArgument (or NotFound for an unknown id) with a message,
/// and leave nothing behind: also those found only after the pause, pins and cgroup
/// exist (an unknown sysctl, a bad bandwidth annotation, a bad cgroup parent).
#[tokio::test]
async fn bad_input_is_refused_and_leaves_nothing() {
    if !root() {
        return;
    }
    let d = Crustd::start();
    let mut c = d.client().await;
    let empty = d.leftovers();
    type Edit = Box<dyn Fn(&mut PodSandboxConfig)>;
    let cases: Vec<(&str, Option<Edit>, &str, Code)> = vec![
        ("no config", None, "", Code::InvalidArgument),
        (
            "no metadata",
            Some(Box::new(|c| c.metadata = None)),
            "",
            Code::InvalidArgument,
        ),
        (
            "empty name",
            Some(Box::new(|c| c.metadata.as_mut().unwrap().name.clear())),
            "",
            Code::InvalidArgument,
        ),
        (
            "empty namespace",
            Some(Box::new(|c| c.metadata.as_mut().unwrap().namespace.clear())),
            "",
            Code::InvalidArgument,
        ),
        (
            "empty uid",
            Some(Box::new(|c| c.metadata.as_mut().unwrap().uid.clear())),
            "",
            Code::InvalidArgument,
        ),
        (
            "malformed label key",
            Some(Box::new(|c| {
                c.labels.insert("bad key!".into(), "x".into());
            })),
            "",
            Code::InvalidArgument,
        ),
        (
            "malformed annotation key",
            Some(Box::new(|c| {
                c.annotations.insert("Bad.Prefix/x".into(), "x".into());
            })),
            "",
            Code::InvalidArgument,
        ),
        (
            "unknown runtime handler",
            Some(Box::new(|_| {})),
            "gvisor",
            Code::InvalidArgument,
        ),
        (
            "non-namespaced sysctl",
            Some(Box::new(|c| {
                c.linux
                    .as_mut()
                    .unwrap()
                    .sysctls
                    .insert("kernel.panic".into(), "1".into());
            })),
            "",
            Code::InvalidArgument,
        ),
        (
            "unknown sysctl",
            Some(Box::new(|c| {
                c.linux
                    .as_mut()
                    .unwrap()
                    .sysctls
                    .insert("net.ipv4.no_such_knob".into(), "1".into());
            })),
            "",
            Code::InvalidArgument,
        ),
        (
            "net sysctl on a hostNetwork pod",
            Some(Box::new(|c| {
                *c = pod_with_modes(
                    "bad",
                    NamespaceMode::Node,
                    NamespaceMode::Pod,
                    NamespaceMode::Pod,
                );
                c.linux
                    .as_mut()
                    .unwrap()
                    .sysctls
                    .insert("net.ipv4.ip_forward".into(), "1".into());
            })),
            "",
            Code::InvalidArgument,
        ),
        (
            "bad bandwidth annotation",
            Some(Box::new(|c| {
                c.annotations
                    .insert("kubernetes.io/ingress-bandwidth".into(), "fast".into());
            })),
            "",
            Code::InvalidArgument,
        ),
        (
            "cgroup parent escaping its root",
            Some(Box::new(|c| {
                c.linux.as_mut().unwrap().cgroup_parent = "../../escape".into();
            })),
            "",
            Code::InvalidArgument,
        ),
        (
            "hostname too long",
            Some(Box::new(|c| c.hostname = "h".repeat(65))),
            "",
            Code::InvalidArgument,
        ),
    ];
    for (what, edit, handler, code) in cases {
        let cfg = edit.map(|f| {
            let mut cfg = pod_config("bad", "uid-bad");
            f(&mut cfg);
            cfg
        });
        assert_code(try_run(&mut c, cfg, handler).await, code, what);
        assert_nothing_left(&d, &empty, what);
    }
    assert!(list(&mut c, None).await.is_empty());
    assert_code(
        try_status(&mut c, "no-such-sandbox").await,
        Code::NotFound,
        "status of an unknown id",
    );
    assert_code(
        try_status(&mut c, "").await,
        Code::InvalidArgument,
        "status of an empty id",
    );
    // The name was never taken by any of the failures.
    let id = run(&mut c, pod_config("bad", "uid-bad")).await;
    assert_eq!(state(&mut c, &id).await, PodSandboxState::SandboxReady);
}

/// A plugin script for a temp CNI bin dir: ADD fails with a CNI error when
/// `fail_add`, every other command succeeds silently (DEL must, to tear down).
fn fake_plugin(dir: &Path, name: &str, fail_add: bool) {
    let add = if fail_add {
        "echo '{\"cniVersion\": \"1.0.0\", \"code\": 11, \"msg\": \"injected ADD failure\"}'; exit 1"
    } else {
        "cat >/dev/null; echo '{\"cniVersion\": \"1.0.0\"}'; exit 0"
    };
    write_plugin(
        dir,
        name,
        &format!(
            "#!/bin/sh\nif [ \"$CNI_COMMAND\" = ADD ]; then {add}; fi\ncat >/dev/null\nexit 0\n"
        ),
    );
}

/// Writes `script` as the executable plugin `name` of a temp CNI bin dir.
fn write_plugin(dir: &Path, name: &str, script: &str) {
    use std::os::unix::fs::PermissionsExt;
    let p = dir.join(name);
    std::fs::write(&p, script).unwrap();
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
}

/// A crustd that finds CNI plugins in `bin_dir` too (the test's fake ones), besides
/// the workspace's built plugins.
fn crustd_with_cni_bin(bin_dir: &Path) -> Crustd {
    Crustd::start_with(Options {
        extra_args: vec!["--cni-bin-dir".into(), bin_dir.display().to_string()],
        ..Default::default()
    })
}

/// Writes the daemon's conflist with `plugin` chained after its own plugins.
fn chain_plugin(d: &Crustd, plugin: serde_json::Value) {
    let mut conf = d.cni_conf();
    conf["plugins"].as_array_mut().unwrap().push(plugin);
    std::fs::write(d.conf_dir.path().join("10-e2e.conflist"), conf.to_string()).unwrap();
}

/// A CNI failure during RunPodSandbox is an error and rolls everything back, also what
/// a plugin earlier in the chain made (bridge's veth and address): an exhausted address
/// range, and a plugin that fails its ADD. No pause, pin, veth, address, masquerade
/// rule, cgroup or record is left, and the pod's name can be used again.
#[tokio::test]
async fn cni_failure_rolls_back() {
    if !root() {
        return;
    }
    let fake_bin = TempDir::new("cf");
    fake_plugin(fake_bin.path(), "failpoint", true);
    let d = crustd_with_cni_bin(fake_bin.path());
    let mut c = d.client().await;
    let empty = d.leftovers();
    let conf_path = d.conf_dir.path().join("10-e2e.conflist");

    // One address only: the first pod takes it, the second finds none.
    let mut conf = d.cni_conf();
    conf["plugins"][0]["ipam"]["ranges"] = serde_json::json!([[{
        "subnet": "10.66.0.0/24", "rangeStart": "10.66.0.10", "rangeEnd": "10.66.0.10"
    }]]);
    std::fs::write(&conf_path, conf.to_string()).unwrap();
    let first = run(&mut c, pod_config("first", "uid-first")).await;
    assert_eq!(ips(&mut c, &first).await.0, "10.66.0.10");
    let with_first = d.leftovers();
    let r = try_run(&mut c, Some(pod_config("second", "uid-second")), "").await;
    let err = r.expect_err("RunPodSandbox with no address left succeeded");
    assert!(err.message().contains("CNI"), "{err:?}");
    assert_nothing_left(&d, &with_first, "an IPAM failure");
    assert_eq!(list(&mut c, None).await.len(), 1);

    // The bridge sets the pod up, then the next plugin fails its ADD.
    chain_plugin(&d, serde_json::json!({"type": "failpoint"}));
    let r = try_run(&mut c, Some(pod_config("second", "uid-second")), "").await;
    let err = r.expect_err("RunPodSandbox with a failing plugin succeeded");
    assert!(err.message().contains("injected ADD failure"), "{err:?}");
    assert_nothing_left(&d, &with_first, "a failing plugin after the bridge");
    assert_eq!(list(&mut c, None).await.len(), 1);

    // Fixed: the same pod runs, and `first` is still fine.
    d.write_cni_conf();
    let second = run(&mut c, pod_config("second", "uid-second")).await;
    let (ip2, _) = ips(&mut c, &second).await;
    assert!(ping(&d, &first, &ip2));
    for id in [first, second] {
        stop(&mut c, &id).await;
        remove(&mut c, &id).await;
    }
    assert_nothing_left(&d, &empty, "the pods after the failures");
}

/// A plugin that is not installed fails the ADD, and the rollback's DEL cannot run
/// either (DEL walks the chain in reverse and stops at the missing plugin, so the
/// bridge's veth and address stay). The half-made sandbox is then not forgotten: it
/// is listed NOTREADY with its pause gone, and once the plugin is installed
/// RemovePodSandbox tears the network down and leaves nothing.
#[tokio::test]
async fn missing_plugin_keeps_the_sandbox_until_remove_succeeds() {
    if !root() {
        return;
    }
    let fake_bin = TempDir::new("cm");
    let d = crustd_with_cni_bin(fake_bin.path());
    let mut c = d.client().await;
    let empty = d.leftovers();
    chain_plugin(&d, serde_json::json!({"type": "late-plugin"}));

    let r = try_run(&mut c, Some(pod_config("late", "uid-late")), "").await;
    let err = r.expect_err("RunPodSandbox with a missing plugin succeeded");
    assert!(err.message().contains("late-plugin"), "{err:?}");
    let items = list(&mut c, None).await;
    assert_eq!(items.len(), 1, "the half-made sandbox was forgotten");
    let id = items[0].id.clone();
    assert_eq!(items[0].state, PodSandboxState::SandboxNotready as i32);
    assert!(d.leftovers().pauses.is_empty(), "pause left running");
    assert_code(
        c.remove_pod_sandbox(RemovePodSandboxRequest {
            pod_sandbox_id: id.clone(),
        })
        .await,
        Code::Internal,
        "RemovePodSandbox while DEL cannot run",
    );
    assert!(!d.leftovers().ip_files.is_empty());

    fake_plugin(fake_bin.path(), "late-plugin", false);
    remove(&mut c, &id).await;
    assert_nothing_left(&d, &empty, "the sandbox once its plugin was installed");
    assert!(list(&mut c, None).await.is_empty());
    d.write_cni_conf();
    let again = run(&mut c, pod_config("late", "uid-late")).await;
    assert_eq!(state(&mut c, &again).await, PodSandboxState::SandboxReady);
}

/// RPCs on different pods run in parallel: ten RunPodSandbox at once all succeed with
/// distinct addresses, and ten RemovePodSandbox at once leave nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn ten_pods_at_once() {
    if !root() {
        return;
    }
    let d = Crustd::start();
    let c = d.client().await;
    let empty = d.leftovers();
    let runs: Vec<_> = (0..10)
        .map(|i| {
            let mut c = c.clone();
            tokio::spawn(async move {
                run(&mut c, pod_config(&format!("p{i}"), &format!("u{i}"))).await
            })
        })
        .collect();
    let mut ids = Vec::new();
    for r in runs {
        ids.push(r.await.unwrap());
    }
    let mut c1 = c.clone();
    let mut v4 = std::collections::BTreeSet::new();
    let mut v6 = std::collections::BTreeSet::new();
    for id in &ids {
        assert_eq!(state(&mut c1, id).await, PodSandboxState::SandboxReady);
        let (ip, more) = ips(&mut c1, id).await;
        v4.insert(ip);
        v6.insert(more[0].clone());
    }
    assert_eq!(v4.len(), 10, "{v4:?}");
    assert_eq!(v6.len(), 10, "{v6:?}");
    let l = d.leftovers();
    assert_eq!(
        (l.veths.len(), l.pauses.len(), l.ip_files.len()),
        (10, 10, 20)
    );
    let last = v4.iter().next_back().unwrap().clone();
    assert!(ping(&d, &ids[0], &last));

    let removes: Vec<_> = ids
        .iter()
        .cloned()
        .map(|id| {
            let mut c = c.clone();
            tokio::spawn(async move { remove(&mut c, &id).await })
        })
        .collect();
    for r in removes {
        r.await.unwrap();
    }
    assert!(list(&mut c1, None).await.is_empty());
    assert_nothing_left(&d, &empty, "ten pods removed at once");
}

/// `crustd config default` prints every key, and what it prints is a valid config
/// file; a config file with an unknown key or a bad value stops crustd at start,
/// naming the key; an explicit config file that does not exist is an error too.
#[tokio::test]
async fn config_defaults_and_unknown_keys() {
    if !root() {
        return;
    }
    let out = crustd_exits(&["config", "default"]);
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    let mut section = String::new();
    let mut keys = Vec::new();
    for l in text.lines().map(str::trim) {
        if l.starts_with('[') {
            section = l.trim_matches(|c| c == '[' || c == ']').to_string() + ".";
        } else if let Some((k, _)) = l.split_once(" = ") {
            keys.push(format!("{section}{k}"));
        }
    }
    for k in [
        "root",
        "state",
        "socket",
        "log_level",
        "pause_dir",
        "stop_timeout_seconds",
        "runtime_handlers",
        "cgroup.driver",
        "cgroup.root",
        "cgroup.nested",
        "cni.conf_dir",
        "cni.bin_dirs",
        "cni.conf_template",
        "cni.ifname",
    ] {
        assert!(keys.iter().any(|x| x == k), "{k} missing from:\n{text}");
    }
    assert!(
        text.contains("root = \"/var/lib/crust\"")
            && text.contains("conf_dir = \"/etc/cni/net.d\""),
        "{text}"
    );

    // The printed defaults are a config crustd accepts (flags override the paths).
    let d = Crustd::start_with_config(Options::default(), &text);
    let mut c = d.client().await;
    let id = run(&mut c, pod_config("defaults", "uid-defaults")).await;
    assert_eq!(state(&mut c, &id).await, PodSandboxState::SandboxReady);

    let dir = TempDir::new("cf");
    let mut bad = vec![
        ("bogus_key = true\n", "bogus_key"),
        ("[cni]\nconfdir = \"/x\"\n", "confdir"),
        ("stop_timeout_seconds = \"ten\"\n", "stop_timeout_seconds"),
        ("[cgroup]\ndriver = \"cgroupv3\"\n", "cgroup.driver"),
        // systemd names cgroups from the top: no nesting, no other root.
        (
            "[cgroup]\ndriver = \"systemd\"\nnested = true\n",
            "cgroup.nested",
        ),
        (
            "[cgroup]\ndriver = \"systemd\"\nroot = \"/x\"\n",
            "cgroup.root",
        ),
    ];
    // The systemd driver on a node without systemd (these machines, and the cgroup v2
    // VM) fails start-up, saying so.
    let systemd_runs = std::fs::read_to_string("/proc/1/comm").is_ok_and(|c| c.trim() == "systemd");
    if !systemd_runs {
        bad.push((
            "[cgroup]\ndriver = \"systemd\"\n",
            "systemd cannot be reached",
        ));
    }
    for (toml, key) in bad {
        let cfg = dir.path().join("config.toml");
        std::fs::write(&cfg, toml).unwrap();
        let out = crustd_exits(&[
            "--config",
            &cfg.display().to_string(),
            "--root",
            &dir.path().join("root").display().to_string(),
            "--state",
            &dir.path().join("state").display().to_string(),
        ]);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "crustd accepted {toml:?}");
        assert!(
            err.contains(key),
            "error for {toml:?} does not name {key}: {err}"
        );
        assert!(!dir.path().join("state").join("crust.sock").exists());
    }
    let missing = dir.path().join("missing.toml");
    let out = crustd_exits(&[
        "--config",
        &missing.display().to_string(),
        "--root",
        &dir.path().join("root").display().to_string(),
        "--state",
        &dir.path().join("state").display().to_string(),
    ]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("missing.toml"));
}

/// A pod's `hostPort` through a chain of crust's bridge and the reference `portmap`
/// plugin (the conflist a node with hostPort support has): the port mapping of the
/// sandbox config reaches portmap as its `portMappings` capability, a connection to the
/// node's port lands in the pod, and StopPodSandbox runs DEL down the chain so
/// portmap's rules go with the pod.
#[tokio::test]
async fn host_port_through_the_reference_portmap_plugin() {
    if !root() || !require_root(&["iptables"]) {
        return;
    }
    let Some(portmap) = crust_e2e::reference_plugin("portmap") else {
        return;
    };
    let d = Crustd::start_with(Options {
        cni_conf: false,
        subnet: 71,
        extra_args: vec![
            "--cni-bin-dir".into(),
            portmap.parent().unwrap().display().to_string(),
        ],
        ..Default::default()
    });
    let mut conf = d.cni_conf();
    let chain = conf["plugins"].as_array_mut().unwrap();
    chain.push(serde_json::json!({
        "type": "portmap",
        "capabilities": {"portMappings": true},
        "snat": true
    }));
    chain.push(serde_json::json!({"type": "firewall", "backend": "iptables"}));
    chain.push(serde_json::json!({
        "type": "tuning",
        "sysctl": {"net.ipv4.conf.eth0.arp_notify": "1"}
    }));
    std::fs::write(d.conf_dir.path().join("10-e2e.conflist"), conf.to_string()).unwrap();
    let mut c = d.client().await;
    let mut cfg = pod_config("web", "uid-web");
    cfg.port_mappings = vec![PortMapping {
        protocol: Protocol::Tcp as i32,
        container_port: 8080,
        host_port: 18080,
        host_ip: String::new(),
    }];
    let id = run(&mut c, cfg).await;
    let (ip, _) = ips(&mut c, &id).await;
    assert!(ip.starts_with("10.71.0."), "{ip}");

    // A server on the pod's port 8080, inside the pod's network namespace.
    let pod_net = d.pin(&id, "net");
    let listener = std::thread::scope(|s| {
        s.spawn(|| {
            crust_e2e::enter_netns(&pod_net);
            std::net::TcpListener::bind("0.0.0.0:8080").unwrap()
        })
        .join()
        .unwrap()
    });
    std::thread::spawn(move || {
        for mut conn in listener.incoming().flatten() {
            let _ = std::io::Write::write_all(&mut conn, b"from the pod\n");
        }
    });
    // The node dials its own address on the host port (the bridge's gateway address),
    // and its loopback, as the conformance suite does (portmap's snat makes it work).
    let node = d.node.path();
    let dial = move |addr: &'static str| {
        let node = node.clone();
        std::thread::spawn(move || {
            crust_e2e::enter_netns(&node);
            let addr = addr.parse().unwrap();
            let mut conn = std::net::TcpStream::connect_timeout(&addr, Duration::from_secs(3))
                .map_err(|e| e.to_string())?;
            conn.set_read_timeout(Some(Duration::from_secs(3))).unwrap();
            let mut got = String::new();
            std::io::Read::read_to_string(&mut conn, &mut got).map_err(|e| e.to_string())?;
            Ok::<String, String>(got)
        })
        .join()
        .unwrap()
    };
    assert_eq!(dial("10.71.0.1:18080").as_deref(), Ok("from the pod\n"));
    assert_eq!(dial("127.0.0.1:18080").as_deref(), Ok("from the pod\n"));
    let nat = d.node.sh(&["iptables", "-t", "nat", "-S"]);
    assert!(nat.contains(&id), "portmap's rules name the pod: {nat}");
    // The plugins after portmap read the result it passed on: firewall admits the pod's
    // address, tuning finds the pod's interface.
    let filter = d.node.sh(&["iptables", "-S", "CNI-FORWARD"]);
    assert!(filter.contains(&ip), "firewall's rules: {filter}");
    let arp = in_pod(
        "--net",
        &pod_net,
        &["cat", "/proc/sys/net/ipv4/conf/eth0/arp_notify"],
    );
    assert_eq!(arp, "1", "tuning's sysctl in the pod");

    stop(&mut c, &id).await;
    let nat = d.node.sh(&["iptables", "-t", "nat", "-S"]);
    assert!(
        !nat.contains(&id),
        "portmap's rules outlived the pod: {nat}"
    );
    let filter = d.node.sh(&["iptables", "-S", "CNI-FORWARD"]);
    assert!(
        !filter.contains(&ip),
        "firewall's rules outlived the pod: {filter}"
    );
    assert!(
        dial("10.71.0.1:18080").is_err(),
        "the host port still reaches somewhere"
    );
    remove(&mut c, &id).await;
}

/// A pod whose sandbox died is made again (the kubelet's attempt + 1) right after the
/// old one is stopped and removed: the new sandbox reports its own addresses only, not
/// the old one's that a DEL still in the background is about to release.
#[tokio::test]
async fn sandbox_made_again_reports_only_its_own_addresses() {
    if !root() {
        return;
    }
    let d = Crustd::start();
    let mut c = d.client().await;
    let first = run(&mut c, pod_config("again", "uid-again")).await;
    let (ip0, all0) = ips(&mut c, &first).await;
    stop(&mut c, &first).await;
    remove(&mut c, &first).await;
    let mut cfg = pod_config("again", "uid-again");
    cfg.metadata.as_mut().unwrap().attempt = 1;
    let second = run(&mut c, cfg).await;
    let (ip1, all1) = ips(&mut c, &second).await;
    assert_ne!(
        ip0, ip1,
        "a new address while the old one is being released"
    );
    assert_eq!(all1.len(), all0.len(), "first {all0:?}, again {all1:?}");
    assert!(!all1.contains(&ip0), "the old sandbox's address: {all1:?}");
    stop(&mut c, &second).await;
    remove(&mut c, &second).await;
}

/// The kubelet relists every second (ListPodSandbox, then the statuses of the pods that
/// changed, one after another); a read that waited for an operation in flight on a pod
/// held the whole relist, and with it every pod's lifecycle on the node, for as long as
/// that operation took. Here a StopPodSandbox is parked in its CNI DEL (a plugin that
/// waits for a gate file) while it holds its pod: ListPodSandbox, PodSandboxStatus of
/// that pod and of another, ListContainers and the stats must all answer meanwhile
/// (each within 20 s: without the fix they waited for the gate, which never opens
/// before they answer). Then the gate opens and the stop finishes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reads_do_not_wait_for_an_operation_in_flight() {
    if !root() {
        return;
    }
    let fake_bin = TempDir::new("gate");
    let gate = fake_bin.path().join("open");
    let parked = fake_bin.path().join("parked");
    let script = format!(
        "#!/bin/sh\ncat >/dev/null\nif [ \"$CNI_COMMAND\" = ADD ]; then echo '{{\"cniVersion\": \"1.0.0\"}}'; exit 0; fi\n\
         if [ \"$CNI_COMMAND\" = DEL ]; then touch {parked}; while [ ! -e {gate} ]; do sleep 0.05; done; fi\nexit 0\n",
        parked = parked.display(),
        gate = gate.display()
    );
    write_plugin(fake_bin.path(), "gate", &script);
    let d = crustd_with_cni_bin(fake_bin.path());
    /// Opens the gate when the test ends, also by a failed assertion: dropped before
    /// the daemon, whose teardown would otherwise wait for the parked stop forever.
    struct OpenOnDrop(std::path::PathBuf);
    impl Drop for OpenOnDrop {
        fn drop(&mut self) {
            let _ = std::fs::write(&self.0, "");
        }
    }
    let _open = OpenOnDrop(gate.clone());
    let mut c = d.client().await;
    let empty = d.leftovers();
    chain_plugin(&d, serde_json::json!({"type": "gate"}));
    let held = run(&mut c, pod_config("held", "uid-held")).await;
    let other = run(&mut c, pod_config("other", "uid-other")).await;

    let mut c2 = d.client().await;
    let h = held.clone();
    let stopping = tokio::spawn(async move {
        c2.stop_pod_sandbox(StopPodSandboxRequest { pod_sandbox_id: h })
            .await
    });
    let begun = Instant::now();
    while !parked.exists() {
        assert!(
            begun.elapsed() < Duration::from_secs(60),
            "the StopPodSandbox never reached its CNI DEL"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    /// The answer of `read`, which must come within 20 s: `waited` says which read
    /// waited when it does not.
    async fn within<T>(read: impl std::future::Future<Output = T>, waited: &str) -> T {
        tokio::time::timeout(Duration::from_secs(20), read)
            .await
            .unwrap_or_else(|e| panic!("{waited}: {e:?}"))
    }
    let listed = within(
        list(&mut c, None),
        "ListPodSandbox waited for the StopPodSandbox in flight",
    )
    .await;
    let ids: Vec<&str> = listed.iter().map(|p| p.id.as_str()).collect();
    assert!(
        ids.contains(&held.as_str()) && ids.contains(&other.as_str()),
        "{ids:?}"
    );
    within(
        status(&mut c, &held),
        "PodSandboxStatus of the pod being stopped waited for the stop",
    )
    .await;
    let (st, _) = within(
        status(&mut c, &other),
        "PodSandboxStatus of another pod waited",
    )
    .await;
    assert_eq!(st.state, PodSandboxState::SandboxReady as i32);
    within(
        c.list_containers(ListContainersRequest { filter: None }),
        "ListContainers waited",
    )
    .await
    .expect("ListContainers");
    within(
        c.list_pod_sandbox_stats(ListPodSandboxStatsRequest { filter: None }),
        "ListPodSandboxStats waited",
    )
    .await
    .expect("ListPodSandboxStats");
    assert!(
        !stopping.is_finished(),
        "the stop did not wait for its gate"
    );

    std::fs::write(&gate, "").unwrap();
    stopping
        .await
        .unwrap()
        .expect("StopPodSandbox after the gate opened");
    assert_eq!(state(&mut c, &held).await, PodSandboxState::SandboxNotready);
    for id in [&held, &other] {
        stop(&mut c, id).await;
        remove(&mut c, id).await;
    }
    assert_nothing_left(&d, &empty, "the pods after the parked stop");
}
