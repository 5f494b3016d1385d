//! The runtimes alone, side by side in one run (issue 15): three configurations behind the
//! same in-process CRI client (one tonic connection per daemon, as the kubelet has) —
//!
//! - `containerd`: containerd 1.6 + runc with the reference CNI plugins (`/usr/lib/cni`
//!   `bridge`, `host-local`, `portmap`);
//! - `crust`: crustd with the very same reference plugins and the same conflist, so the
//!   ratio of these two rows is the runtimes' alone;
//! - `crust-own`: crustd with crust's own `bridge` and `host-local` (and the reference
//!   `portmap`, which crust does not ship), as a node runs it.
//!
//! Every request is shaped as the kubelet v1.28 sends it for a Burstable pod (cpu request
//! 100m, limit 200m; memory request 64Mi, limit 128Mi): the pod cgroup
//! `kubepods/burstable/pod<uid>` made (with its limits) by the bench before
//! RunPodSandbox, as the kubelet's pod container manager does; the kubelet's labels and
//! annotations, log directory, DNS config, no port mappings, RuntimeDefault seccomp;
//! CreateContainer with cpu shares 102, quota 20000/100000, memory limit 128Mi (swap
//! limit the same where the node has `memsw`), hugepage limits only where the node has a
//! hugetlb controller, oom_score_adj as the kubelet computes it for Burstable, masked
//! and read-only paths, a log path, and the mounts of `/etc/hosts`,
//! `/dev/termination-log` and the service-account token directory (files the bench
//! writes as the kubelet lays them out).
//!
//! A pod is: RunPodSandbox, CreateContainer (`sleep 3600` of a busybox-static image the
//! bench writes and imports into each daemon), StartContainer, ExecSync `true`; later
//! StopPodSandbox (its container still running) and RemovePodSandbox. Each is timed as
//! the client sees it. `BENCH_N` pods (default 50) go up in rounds of ten per
//! configuration, the configurations alternating and their order rotated every round;
//! then, with all of them up, the memory (pause + monitors, or shim + pause, RSS and
//! PSS, median per pod; each daemon's RSS and PSS); then they go down in rounds the same
//! way. Once one call at a time ("seq") and once ten in flight ("x10"); pods/s is the
//! pods over the wall time of their up and down phases. Then `BENCH_MANY` pods (default
//! 200) per configuration, ten at a time, for the memory at that count. Two pods per
//! configuration first, discarded, warm up the binaries, the bridge and the caches.
//!
//! Daemons' state: volatile state (crustd's `--state`, containerd's state and runc's
//! root) on a tmpfs each, as `/run` is on a node; persistent roots (crustd's `--root`,
//! containerd's root and its overlayfs snapshots) in temp dirs on the same disk
//! filesystem. Each daemon runs in a node network namespace of its own.
//!
//! crust's RunPodSandbox with the reference plugins is split with crustd's debug "run
//! phases" line: the CNI ADD's time (the same plugins and conflist containerd runs) is
//! taken off both daemons' RunPodSandbox for the "own share" target.
//!
//! Server side: each call's time inside the daemon, from its log over the phase, beside
//! the client's. crustd (at debug, as the harness runs it) logs each RPC's duration
//! (`ok rpc="RunPodSandbox" id=.. ms=..`); containerd 1.6 (here at `level = "debug"`, as
//! its ExecSync lines are debug) logs only a start and an end line per call ("StartContainer
//! for \"id\"" ... "returns successfully"), with nanosecond timestamps: they are paired
//! by the call's key (the sandbox's metadata for RunPodSandbox, the sandbox id for
//! CreateContainer, else the id the call names). containerd's start line comes after the
//! gRPC decode and its end line before the encode; crustd's timer covers the same span,
//! so the two are alike to within a log write.
//!
//! Prints markdown tables (also appended to `$BENCH_MD` when set, for `hack/bench`).
//! Run as root through `hack/bench` (`BENCH_ONLY=runtime`), or `cargo bench -p crust-e2e
//! --bench runtime` after a release build. Everything is cleaned up on drop, so also on
//! panic: pods through CRI, then by force.

mod common;

use cgroups::{CgroupManager, CgroupPath, Hierarchy};
use common::*;
use cri_api::*;
use crust_e2e::crustd::{Crustd, Options};
use crust_e2e::{bin_dir, require_root, TempDir};
use std::collections::{BTreeSet, HashMap};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tonic::transport::Channel;

type Client = RuntimeServiceClient<Channel>;

const REF_CNI: &str = "/usr/lib/cni";
const CHUNK: usize = 10;
const PAR: usize = 10;
const WARM_UP: usize = 2;
const MI: i64 = 1024 * 1024;
/// The pod's resources, as the kubelet turns them into CRI (`MilliCPUToShares`,
/// `MilliCPUToQuota` with the default 100 ms period).
const CPU_REQUEST_MILLI: i64 = 100;
const CPU_LIMIT_MILLI: i64 = 200;
const MEMORY_REQUEST: i64 = 64 * MI;
const MEMORY_LIMIT: i64 = 128 * MI;
const CPU_PERIOD: i64 = 100_000;

// ---------------------------------------------------------------------------------
// The node as the kubelet sees it

/// What the kubelet reads off the node once.
struct Node {
    /// Page sizes for hugepage limits, empty when no hugetlb controller is there.
    hugepage_sizes: Vec<String>,
    /// cgroup v1 memory has `memsw`: the kubelet sets the swap limit to the memory limit.
    memsw: bool,
    oom_score_adj: i64,
}

impl Node {
    fn read() -> Node {
        let mem_total = std::fs::read_to_string("/proc/meminfo")
            .unwrap_or_default()
            .lines()
            .find_map(|l| l.strip_prefix("MemTotal:"))
            .and_then(|v| v.split_whitespace().next()?.parse::<i64>().ok())
            .unwrap_or(1 << 24)
            * 1024;
        // The kubelet's GetContainerOOMScoreAdjust for Burstable.
        let oom = (1000 - (1000 * MEMORY_REQUEST) / mem_total).clamp(3, 999);
        let v2_root = std::fs::read_to_string("/sys/fs/cgroup/cgroup.controllers").ok();
        let hugetlb = Path::new("/sys/fs/cgroup/hugetlb").is_dir()
            || v2_root.is_some_and(|c| c.split_whitespace().any(|w| w == "hugetlb"));
        let hugepage_sizes = if hugetlb {
            crust_e2e::crustd::dir_names(Path::new("/sys/kernel/mm/hugepages"))
                .iter()
                .filter_map(|d| {
                    d.strip_prefix("hugepages-")?
                        .strip_suffix("kB")?
                        .parse::<u64>()
                        .ok()
                })
                .map(|kb| match kb {
                    k if k >= 1 << 20 => format!("{}GB", k >> 20),
                    k if k >= 1 << 10 => format!("{}MB", k >> 10),
                    k => format!("{k}KB"),
                })
                .collect()
        } else {
            vec![]
        };
        Node {
            hugepage_sizes,
            memsw: Path::new("/sys/fs/cgroup/memory/memory.memsw.limit_in_bytes").exists(),
            oom_score_adj: oom,
        }
    }
}

/// One configuration (a row of the table).
struct Row {
    name: &'static str,
    client: Client,
    daemon_pid: i32,
    /// The hierarchy the bench makes the kubelet's cgroups in, and the path (in it) of the
    /// Burstable QoS cgroup; `sent` is what RunPodSandbox's cgroup_parent starts with.
    cgroups: Hierarchy,
    burstable: String,
    sent: String,
    /// containerd's list of sandbox ids, for its cleanup.
    pod_ids: Option<Arc<Mutex<Vec<String>>>>,
    /// The kubelet's `/var/lib/kubelet/pods` and `/var/log/pods` for this row.
    kubelet: PathBuf,
    logs: PathBuf,
    /// The daemon's log: crustd's "run phases" and per-RPC lines, containerd's CRI
    /// start and end lines (the server-side times).
    log: Option<PathBuf>,
}

/// One pod's host side, as the kubelet lays it out.
struct PodFiles {
    log_dir: PathBuf,
    hosts: PathBuf,
    term_log: PathBuf,
    token_dir: PathBuf,
}

fn pod_files(row: &Row, name: &str, uid: &str) -> PodFiles {
    let pod = row.kubelet.join(uid);
    let log_dir = row.logs.join(format!("bench_{name}_{uid}"));
    let term_dir = pod.join("containers/app");
    let token_dir = pod.join("volumes/kubernetes.io~projected/kube-api-access-bench");
    let data = token_dir.join("..2026_01_01_00_00_00.000000001");
    for d in [&log_dir, &term_dir, &data] {
        std::fs::create_dir_all(d).unwrap();
    }
    let hosts = pod.join("etc-hosts");
    std::fs::write(
        &hosts,
        format!(
            "# Kubernetes-managed hosts file.\n127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n\
             fe00::0\tip6-localnet\nfe00::0\tip6-mcastprefix\nfe00::1\tip6-allnodes\nfe00::2\tip6-allrouters\n\
             10.0.0.1\t{name}\n"
        ),
    )
    .unwrap();
    let term_log = term_dir.join("0a1b2c3d");
    std::fs::write(&term_log, b"").unwrap();
    std::fs::write(data.join("token"), "eyJhbGciOiJSUzI1NiJ9.bench.signature").unwrap();
    std::fs::write(
        data.join("ca.crt"),
        "-----BEGIN CERTIFICATE-----\n-----END CERTIFICATE-----\n",
    )
    .unwrap();
    std::fs::write(data.join("namespace"), "bench").unwrap();
    std::os::unix::fs::symlink("..2026_01_01_00_00_00.000000001", token_dir.join("..data"))
        .unwrap();
    for f in ["token", "ca.crt", "namespace"] {
        std::os::unix::fs::symlink(format!("..data/{f}"), token_dir.join(f)).unwrap();
    }
    PodFiles {
        log_dir,
        hosts,
        term_log,
        token_dir,
    }
}

fn kv(pairs: &[(&str, &str)]) -> HashMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

fn namespaces() -> NamespaceOption {
    NamespaceOption {
        network: NamespaceMode::Pod as i32,
        pid: NamespaceMode::Container as i32,
        ipc: NamespaceMode::Pod as i32,
        ..Default::default()
    }
}

fn runtime_default() -> SecurityProfile {
    SecurityProfile {
        profile_type: security_profile::ProfileType::RuntimeDefault as i32,
        ..Default::default()
    }
}

/// The pod-level resources the kubelet puts in the sandbox config (the sum of its
/// containers').
fn pod_resources() -> LinuxContainerResources {
    LinuxContainerResources {
        cpu_period: CPU_PERIOD,
        cpu_quota: CPU_LIMIT_MILLI * CPU_PERIOD / 1000,
        cpu_shares: CPU_REQUEST_MILLI * 1024 / 1000,
        memory_limit_in_bytes: MEMORY_LIMIT,
        ..Default::default()
    }
}

fn pod_config(row: &Row, name: &str, uid: &str, files: &PodFiles) -> PodSandboxConfig {
    PodSandboxConfig {
        metadata: Some(PodSandboxMetadata {
            name: name.into(),
            uid: uid.into(),
            namespace: "bench".into(),
            attempt: 0,
        }),
        hostname: name.into(),
        log_directory: files.log_dir.display().to_string(),
        dns_config: Some(DnsConfig {
            servers: vec!["10.96.0.10".into()],
            searches: vec![
                "bench.svc.cluster.local".into(),
                "svc.cluster.local".into(),
                "cluster.local".into(),
            ],
            options: vec!["ndots:5".into()],
        }),
        port_mappings: vec![],
        labels: kv(&[
            ("app", "bench"),
            ("io.kubernetes.pod.name", name),
            ("io.kubernetes.pod.namespace", "bench"),
            ("io.kubernetes.pod.uid", uid),
        ]),
        annotations: kv(&[
            (
                "kubernetes.io/config.seen",
                "2026-01-01T00:00:00.000000000Z",
            ),
            ("kubernetes.io/config.source", "api"),
        ]),
        linux: Some(LinuxPodSandboxConfig {
            cgroup_parent: format!("{}/pod{uid}", row.sent),
            security_context: Some(LinuxSandboxSecurityContext {
                namespace_options: Some(namespaces()),
                seccomp: Some(runtime_default()),
                ..Default::default()
            }),
            resources: Some(pod_resources()),
            ..Default::default()
        }),
        ..Default::default()
    }
}

fn container_config(node: &Node, name: &str, uid: &str, files: &PodFiles) -> ContainerConfig {
    let mount = |c: &str, h: &Path, ro: bool| Mount {
        container_path: c.into(),
        host_path: h.display().to_string(),
        readonly: ro,
        propagation: MountPropagation::PropagationPrivate as i32,
        ..Default::default()
    };
    let mut resources = pod_resources();
    resources.oom_score_adj = node.oom_score_adj;
    if node.memsw {
        resources.memory_swap_limit_in_bytes = MEMORY_LIMIT;
    }
    resources.hugepage_limits = node
        .hugepage_sizes
        .iter()
        .map(|s| HugepageLimit {
            page_size: s.clone(),
            limit: 0,
        })
        .collect();
    ContainerConfig {
        metadata: Some(ContainerMetadata {
            name: "app".into(),
            attempt: 0,
        }),
        image: Some(ImageSpec {
            image: IMAGE.into(),
            ..Default::default()
        }),
        command: vec!["/bin/sleep".into(), "3600".into()],
        envs: [
            ("KUBERNETES_SERVICE_HOST", "10.96.0.1"),
            ("KUBERNETES_SERVICE_PORT", "443"),
            ("KUBERNETES_SERVICE_PORT_HTTPS", "443"),
            ("KUBERNETES_PORT", "tcp://10.96.0.1:443"),
            ("KUBERNETES_PORT_443_TCP", "tcp://10.96.0.1:443"),
            ("KUBERNETES_PORT_443_TCP_PROTO", "tcp"),
            ("KUBERNETES_PORT_443_TCP_PORT", "443"),
            ("KUBERNETES_PORT_443_TCP_ADDR", "10.96.0.1"),
        ]
        .iter()
        .map(|(k, v)| KeyValue {
            key: k.to_string(),
            value: v.to_string(),
        })
        .collect(),
        mounts: vec![
            mount(
                "/var/run/secrets/kubernetes.io/serviceaccount",
                &files.token_dir,
                true,
            ),
            mount("/etc/hosts", &files.hosts, false),
            mount("/dev/termination-log", &files.term_log, false),
        ],
        labels: kv(&[
            ("io.kubernetes.container.name", "app"),
            ("io.kubernetes.pod.name", name),
            ("io.kubernetes.pod.namespace", "bench"),
            ("io.kubernetes.pod.uid", uid),
        ]),
        annotations: kv(&[
            ("io.kubernetes.container.hash", "5d3a1b2c"),
            ("io.kubernetes.container.restartCount", "0"),
            (
                "io.kubernetes.container.terminationMessagePath",
                "/dev/termination-log",
            ),
            ("io.kubernetes.container.terminationMessagePolicy", "File"),
            ("io.kubernetes.pod.terminationGracePeriod", "30"),
        ]),
        log_path: "app/0.log".into(),
        linux: Some(LinuxContainerConfig {
            resources: Some(resources),
            security_context: Some(LinuxContainerSecurityContext {
                namespace_options: Some(namespaces()),
                masked_paths: KUBELET_MASKED_PATHS.iter().map(|s| s.to_string()).collect(),
                readonly_paths: KUBELET_READONLY_PATHS
                    .iter()
                    .map(|s| s.to_string())
                    .collect(),
                seccomp: Some(runtime_default()),
                ..Default::default()
            }),
        }),
        ..Default::default()
    }
}

// ---------------------------------------------------------------------------------
// The kubelet's cgroups: kubepods/burstable, and a pod cgroup with the pod's limits

fn pod_cgroup(row: &Row, uid: &str) -> CgroupPath {
    CgroupPath::new(&format!("{}/pod{uid}", row.burstable)).unwrap()
}

fn make_pod_cgroup(row: &Row, uid: &str) -> Result<(), String> {
    let p = pod_cgroup(row, uid);
    row.cgroups
        .create(&p)
        .map_err(|e| format!("pod cgroup: {e}"))?;
    let r = pod_resources();
    let writes = [
        ("cpu", "cpu.shares", r.cpu_shares),
        ("cpu", "cpu.cfs_period_us", r.cpu_period),
        ("cpu", "cpu.cfs_quota_us", r.cpu_quota),
        ("memory", "memory.limit_in_bytes", r.memory_limit_in_bytes),
    ];
    for (ctl, file, v) in writes {
        if let Some(d) = row.cgroups.dir(ctl, &p) {
            std::fs::write(d.join(file), v.to_string())
                .map_err(|e| format!("{}: {e}", d.join(file).display()))?;
        }
    }
    Ok(())
}

/// The kubelet removes a pod's cgroup once its sandbox is gone.
fn remove_cgroup(h: &Hierarchy, p: &CgroupPath) {
    let mut dirs = h.dirs(p);
    let deadline = Instant::now() + Duration::from_secs(5);
    while !dirs.is_empty() && Instant::now() < deadline {
        dirs.retain(|d| d.exists() && std::fs::remove_dir(d).is_err());
        if !dirs.is_empty() {
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

// ---------------------------------------------------------------------------------
// One pod's way up and down

#[derive(Default, Clone)]
struct Times {
    run: Vec<Duration>,
    create: Vec<Duration>,
    start: Vec<Duration>,
    create_start: Vec<Duration>,
    exec: Vec<Duration>,
    stop: Vec<Duration>,
    remove: Vec<Duration>,
    wall: Duration,
    pods: usize,
    /// Server side, from the daemon's log over the phase: the calls of `SERVER_RPCS`.
    server: HashMap<&'static str, Vec<Duration>>,
}

/// The calls timed server side too, in the table's order.
const SERVER_RPCS: [&str; 6] = [
    "RunPodSandbox",
    "CreateContainer",
    "StartContainer",
    "ExecSync",
    "StopPodSandbox",
    "RemovePodSandbox",
];

struct Up {
    id: String,
    uid: String,
}

async fn up(row: &Row, node: &Node, name: &str, times: &Mutex<Times>) -> Result<Up, String> {
    let uid = format!("{:08x}-bench-{name}", crc(name));
    make_pod_cgroup(row, &uid)?;
    let files = pod_files(row, name, &uid);
    let config = pod_config(row, name, &uid, &files);
    let mut c = row.client.clone();
    let t0 = Instant::now();
    let id = rpc(
        "RunPodSandbox",
        c.run_pod_sandbox(RunPodSandboxRequest {
            config: Some(config.clone()),
            runtime_handler: String::new(),
        }),
    )
    .await?
    .pod_sandbox_id;
    let t1 = Instant::now();
    if let Some(ids) = &row.pod_ids {
        ids.lock().unwrap().push(id.clone());
    }
    let ctr = rpc(
        "CreateContainer",
        c.create_container(CreateContainerRequest {
            pod_sandbox_id: id.clone(),
            config: Some(container_config(node, name, &uid, &files)),
            sandbox_config: Some(config),
        }),
    )
    .await?
    .container_id;
    let t2 = Instant::now();
    rpc(
        "StartContainer",
        c.start_container(StartContainerRequest {
            container_id: ctr.clone(),
        }),
    )
    .await?;
    let t3 = Instant::now();
    let r = rpc(
        "ExecSync",
        c.exec_sync(ExecSyncRequest {
            container_id: ctr,
            cmd: vec!["true".into()],
            timeout: 10,
        }),
    )
    .await?;
    let t4 = Instant::now();
    if r.exit_code != 0 {
        return Err(format!("ExecSync true in {name} exited {}", r.exit_code));
    }
    let mut t = times.lock().unwrap();
    t.run.push(t1 - t0);
    t.create.push(t2 - t1);
    t.start.push(t3 - t2);
    t.create_start.push(t3 - t1);
    t.exec.push(t4 - t3);
    Ok(Up { id, uid })
}

async fn down(row: &Row, pod: &Up, times: &Mutex<Times>) -> Result<(), String> {
    let mut c = row.client.clone();
    let t0 = Instant::now();
    rpc(
        "StopPodSandbox",
        c.stop_pod_sandbox(StopPodSandboxRequest {
            pod_sandbox_id: pod.id.clone(),
        }),
    )
    .await?;
    let t1 = Instant::now();
    rpc(
        "RemovePodSandbox",
        c.remove_pod_sandbox(RemovePodSandboxRequest {
            pod_sandbox_id: pod.id.clone(),
        }),
    )
    .await?;
    let t2 = Instant::now();
    remove_cgroup(&row.cgroups, &pod_cgroup(row, &pod.uid));
    let _ = std::fs::remove_dir_all(row.kubelet.join(&pod.uid));
    let mut t = times.lock().unwrap();
    t.stop.push(t1 - t0);
    t.remove.push(t2 - t1);
    Ok(())
}

/// A name's short hash, for a uid that looks like one.
fn crc(s: &str) -> u32 {
    s.bytes()
        .fold(2166136261u32, |h, b| (h ^ b as u32).wrapping_mul(16777619))
}

/// `names` up with `par` in flight; the pods in the order of `names`.
async fn up_all(
    row: &Arc<Row>,
    node: &Arc<Node>,
    names: Vec<String>,
    par: usize,
    times: &Arc<Mutex<Times>>,
) -> Result<Vec<Up>, String> {
    let n = names.len();
    let out: Arc<Mutex<Vec<Option<Up>>>> = Arc::new(Mutex::new((0..n).map(|_| None).collect()));
    let (r, nd, t, o, names) = (
        row.clone(),
        node.clone(),
        times.clone(),
        out.clone(),
        Arc::new(names),
    );
    let (_, wall) = phase(n, par, move |i| {
        let (r, nd, t, o, names) = (r.clone(), nd.clone(), t.clone(), o.clone(), names.clone());
        async move {
            let pod = up(&r, &nd, &names[i], &t).await?;
            o.lock().unwrap()[i] = Some(pod);
            Ok(Duration::ZERO)
        }
    })
    .await?;
    times.lock().unwrap().wall += wall;
    let pods = std::mem::take(&mut *out.lock().unwrap());
    Ok(pods.into_iter().flatten().collect())
}

async fn down_all(
    row: &Arc<Row>,
    pods: Vec<Up>,
    par: usize,
    times: &Arc<Mutex<Times>>,
) -> Result<(), String> {
    let n = pods.len();
    let (r, t, pods) = (row.clone(), times.clone(), Arc::new(pods));
    let (_, wall) = phase(n, par, move |i| {
        let (r, t, pods) = (r.clone(), t.clone(), pods.clone());
        async move {
            down(&r, &pods[i], &t).await?;
            Ok(Duration::ZERO)
        }
    })
    .await?;
    let mut t = times.lock().unwrap();
    t.wall += wall;
    t.pods += n;
    Ok(())
}

// ---------------------------------------------------------------------------------
// Memory

#[derive(Default, Clone, Copy)]
struct PodMem {
    daemon: Mem,
    /// Median per pod: pause + the container's monitor, or shim + pause.
    per_pod: Mem,
    /// Distinct per-pod processes seen (shims or monitors) and pods.
    parents: usize,
    pods: usize,
}

async fn measure(row: &Row, pods: &[Up]) -> Result<PodMem, String> {
    // Let the processes settle (a shim's or monitor's first page faults).
    tokio::time::sleep(Duration::from_millis(500)).await;
    let mut c = row.client.clone();
    let mut per_pod = Vec::new();
    let mut parents_seen = BTreeSet::new();
    for p in pods {
        let st = rpc(
            "PodSandboxStatus",
            c.pod_sandbox_status(PodSandboxStatusRequest {
                pod_sandbox_id: p.id.clone(),
                verbose: true,
            }),
        )
        .await?;
        let pause = info_pid(&st.info, &format!("sandbox {}", p.id))?;
        let mut procs = BTreeSet::from([pause]);
        if let Some(pp) = ppid_of(pause).filter(|pp| comm_of(*pp).starts_with("containerd-shim")) {
            procs.insert(pp);
            parents_seen.insert(pp);
        }
        let list = rpc(
            "ListContainers",
            c.list_containers(ListContainersRequest {
                filter: Some(ContainerFilter {
                    pod_sandbox_id: p.id.clone(),
                    ..Default::default()
                }),
            }),
        )
        .await?;
        for ctr in list.containers {
            let st = rpc(
                "ContainerStatus",
                c.container_status(ContainerStatusRequest {
                    container_id: ctr.id.clone(),
                    verbose: true,
                }),
            )
            .await?;
            let pid = info_pid(&st.info, &format!("container {}", ctr.id))?;
            let parent = ppid_of(pid).ok_or_else(|| format!("no parent of {pid}"))?;
            if parent != row.daemon_pid {
                procs.insert(parent);
                parents_seen.insert(parent);
            }
        }
        let m = procs
            .iter()
            .map(|p| mem_of(*p).ok_or_else(|| format!("process {p} is gone")))
            .try_fold(Mem::default(), |a, m| m.map(|m| a + m))?;
        per_pod.push(m);
    }
    Ok(PodMem {
        daemon: mem_of(row.daemon_pid).unwrap_or_default(),
        per_pod: median_mem(&per_pod),
        parents: parents_seen.len(),
        pods: pods.len(),
    })
}

// ---------------------------------------------------------------------------------
// crustd's "run phases" lines: the CNI ADD of each sandbox

/// A `Duration`'s Debug text (`12.3ms`, `950µs`, `1.2s`), in ms.
fn parse_debug_ms(s: &str) -> Option<f64> {
    let s = s.trim_matches(|c| c == '"' || c == ',');
    for (unit, f) in [
        ("ns", 1e-6),
        ("µs", 1e-3),
        ("us", 1e-3),
        ("ms", 1.0),
        ("s", 1000.0),
    ] {
        if let Some(v) = s.strip_suffix(unit) {
            return v.parse::<f64>().ok().map(|v| v * f);
        }
    }
    None
}

/// `s` without its terminal colour sequences (`ESC [ ... m`).
fn strip_ansi(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut it = s.chars();
    while let Some(c) = it.next() {
        if c == '\u{1b}' {
            for d in it.by_ref() {
                if d.is_ascii_alphabetic() {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

/// Median ADD (`t_cni - t_saved`) over the sandboxes `ids` in crustd's log, in ms.
fn cni_add_ms(log: &Path, ids: &BTreeSet<String>) -> Option<f64> {
    let text = strip_ansi(&std::fs::read_to_string(log).ok()?);
    let mut v: Vec<f64> = text
        .lines()
        .filter(|l| l.contains("run phases"))
        .filter_map(|l| {
            let field = |k: &str| {
                l.split_whitespace()
                    .find_map(|w| w.strip_prefix(&format!("{k}=")))
                    .map(|v| v.trim_matches('"').to_string())
            };
            let id = field("sandbox")?;
            if !ids.contains(&id) {
                return None;
            }
            Some(parse_debug_ms(&field("t_cni")?)? - parse_debug_ms(&field("t_saved")?)?)
        })
        .collect();
    if v.is_empty() {
        return None;
    }
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    Some(v[v.len() / 2])
}

// ---------------------------------------------------------------------------------
// Server-side times from the daemons' logs

/// The log's length now: where a phase's lines start.
fn log_len(log: Option<&Path>) -> u64 {
    log.and_then(|l| std::fs::metadata(l).ok())
        .map_or(0, |m| m.len())
}

/// The log's text from byte `from` on.
fn log_since(log: Option<&Path>, from: u64) -> String {
    let bytes = log.and_then(|l| std::fs::read(l).ok()).unwrap_or_default();
    strip_ansi(&String::from_utf8_lossy(
        bytes.get(from as usize..).unwrap_or_default(),
    ))
}

/// crustd's `ok rpc="X" id=.. ms=..` lines: each call's duration as the service timed it.
fn crustd_server_times(text: &str) -> HashMap<&'static str, Vec<Duration>> {
    let mut out: HashMap<&'static str, Vec<Duration>> = HashMap::new();
    for l in text.lines().filter(|l| l.contains(" ok ")) {
        let field = |k: &str| {
            l.split_whitespace()
                .find_map(|w| w.strip_prefix(&format!("{k}=")))
                .map(|v| v.trim_matches('"').to_string())
        };
        let (Some(rpc), Some(ms)) = (field("rpc"), field("ms")) else {
            continue;
        };
        let (Some(rpc), Ok(ms)) = (SERVER_RPCS.iter().find(|r| **r == rpc), ms.parse::<f64>())
        else {
            continue;
        };
        out.entry(*rpc)
            .or_default()
            .push(Duration::from_secs_f64(ms / 1000.0));
    }
    out
}

/// A logrus `time="2026-11-26T16:00:17.123456789Z"` as ms since the epoch (the zone is
/// ignored: every line of one log has the same).
fn logrus_ms(line: &str) -> Option<f64> {
    let t = line.split("time=\"").nth(1)?;
    let num = |a: usize, b: usize| t.get(a..b)?.parse::<i64>().ok();
    let (y, mo, d) = (num(0, 4)?, num(5, 7)?, num(8, 10)?);
    let (h, mi) = (num(11, 13)?, num(14, 16)?);
    let end = t[17..].find(|c: char| !(c.is_ascii_digit() || c == '.'))? + 17;
    let sec: f64 = t[17..end].parse().ok()?;
    // Days from the civil date (Howard Hinnant's days_from_civil).
    let y = if mo <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let doy = (153 * ((mo + 9) % 12) + 2) / 5 + d - 1;
    let days = era * 146097 + yoe * 365 + yoe / 4 - yoe / 100 + doy - 719468;
    Some(((days * 24 + h) * 60 + mi) as f64 * 60_000.0 + sec * 1000.0)
}

/// containerd's CRI start and end lines, paired by the call's key: the RPC name and
/// the sandbox metadata (RunPodSandbox), else the first quoted id of the message.
fn containerd_server_times(text: &str) -> HashMap<&'static str, Vec<Duration>> {
    let mut open: HashMap<(&'static str, String), f64> = HashMap::new();
    let mut out: HashMap<&'static str, Vec<Duration>> = HashMap::new();
    for l in text.lines() {
        let Some(msg) = l.split(" msg=\"").nth(1) else {
            continue;
        };
        let msg = msg.replace("\\\"", "\"");
        let Some(rpc) = SERVER_RPCS
            .iter()
            .find(|r| msg.starts_with(&format!("{r} ")))
        else {
            continue;
        };
        let key = if *rpc == "RunPodSandbox" {
            msg.split("Name:").nth(1).and_then(|m| m.split(',').next())
        } else {
            msg.split('"').nth(1)
        };
        let (Some(key), Some(t)) = (key, logrus_ms(l)) else {
            continue;
        };
        let key = (*rpc, key.to_string());
        if msg.contains(" returns ") {
            if let Some(t0) = open.remove(&key) {
                out.entry(*rpc)
                    .or_default()
                    .push(Duration::from_secs_f64((t - t0).max(0.0) / 1000.0));
            }
        } else if !msg.contains(" failed") {
            open.insert(key, t);
        }
    }
    out
}

// ---------------------------------------------------------------------------------
// Output

struct Report {
    md: String,
}

impl Report {
    fn line(&mut self, s: impl AsRef<str>) {
        println!("{}", s.as_ref());
        self.md.push_str(s.as_ref());
        self.md.push('\n');
    }
}

fn p50(v: &[Duration]) -> f64 {
    pct(v, 0.5)
}

fn cell(v: &[Duration]) -> String {
    format!("{:.1} / {:.1}", pct(v, 0.5), pct(v, 0.95))
}

const LABELS: [(&str, &str); 3] = [
    ("containerd", "containerd + runc, reference plugins"),
    ("crust", "crustd, reference plugins"),
    ("crust-own", "crustd, crust's plugins"),
];

fn label(name: &str) -> &'static str {
    LABELS
        .iter()
        .find(|l| l.0 == name)
        .map(|l| l.1)
        .unwrap_or("?")
}

fn latency_table(r: &mut Report, mode: &str, res: &[(&'static str, Times)]) {
    r.line("");
    r.line(format!(
        "Latency, {mode}, ms p50 / p95 as the client sees each call ({} pods per configuration):",
        res.first().map(|x| x.1.pods).unwrap_or(0)
    ));
    r.line("");
    r.line("| | RunPodSandbox | CreateContainer | StartContainer | Create+Start | ExecSync | StopPodSandbox | RemovePodSandbox | pods/s |");
    r.line("| --- | --- | --- | --- | --- | --- | --- | --- | --- |");
    for (name, t) in res {
        r.line(format!(
            "| {} | {} | {} | {} | {} | {} | {} | {} | {:.1} |",
            label(name),
            cell(&t.run),
            cell(&t.create),
            cell(&t.start),
            cell(&t.create_start),
            cell(&t.exec),
            cell(&t.stop),
            cell(&t.remove),
            t.pods as f64 / t.wall.as_secs_f64()
        ));
    }
    let get = |n: &str| res.iter().find(|x| x.0 == n).map(|x| &x.1);
    let Some(d) = get("containerd") else { return };
    for name in ["crust", "crust-own"] {
        let Some(c) = get(name) else { continue };
        let q = |f: fn(&Times) -> &Vec<Duration>| p50(f(c)) / p50(f(d));
        r.line(format!(
            "| ratio {name}/containerd (p50) | {:.2} | {:.2} | {:.2} | {:.2} | {:.2} | {:.2} | {:.2} | {:.1}x |",
            q(|t| &t.run),
            q(|t| &t.create),
            q(|t| &t.start),
            q(|t| &t.create_start),
            q(|t| &t.exec),
            q(|t| &t.stop),
            q(|t| &t.remove),
            (c.pods as f64 / c.wall.as_secs_f64()) / (d.pods as f64 / d.wall.as_secs_f64()),
        ));
    }
    server_table(r, mode, res);
}

/// The same calls server side, from each daemon's log (see the top of the file).
fn server_table(r: &mut Report, mode: &str, res: &[(&'static str, Times)]) {
    let none = Vec::new();
    let of =
        |t: &'_ Times, rpc: &str| -> Vec<Duration> { t.server.get(rpc).unwrap_or(&none).clone() };
    r.line("");
    r.line(format!(
        "Latency, {mode}, ms p50 / p95 server side (crustd: its per-RPC debug lines; containerd: its CRI start and end lines paired), calls found in the log:"
    ));
    r.line("");
    r.line(format!("| | {} |", SERVER_RPCS.join(" | ")));
    r.line(format!("| --- |{}", " --- |".repeat(SERVER_RPCS.len())));
    for (name, t) in res {
        let cells: Vec<String> = SERVER_RPCS
            .iter()
            .map(|rpc| {
                let v = of(t, rpc);
                if v.is_empty() {
                    "-".to_string()
                } else {
                    format!("{} ({})", cell(&v), v.len())
                }
            })
            .collect();
        r.line(format!("| {} | {} |", label(name), cells.join(" | ")));
    }
    let get = |n: &str| res.iter().find(|x| x.0 == n).map(|x| &x.1);
    let Some(d) = get("containerd") else { return };
    for name in ["crust", "crust-own"] {
        let Some(c) = get(name) else { continue };
        let cells: Vec<String> = SERVER_RPCS
            .iter()
            .map(|rpc| format!("{:.2}", p50(&of(c, rpc)) / p50(&of(d, rpc))))
            .collect();
        r.line(format!(
            "| ratio {name}/containerd (p50) | {} |",
            cells.join(" | ")
        ));
    }
}

fn memory_table(r: &mut Report, mems: &[(&'static str, PodMem, Option<PodMem>)]) {
    r.line("");
    r.line("Memory, KiB: per pod the median of (pause + container monitor) or (shim + pause); each daemon's own:");
    r.line("");
    r.line("| | per pod RSS | per pod PSS | daemon RSS / PSS, N pods | daemon RSS / PSS, MANY pods | shims or monitors |");
    r.line("| --- | --- | --- | --- | --- | --- |");
    for (name, m, many) in mems {
        let many_cell = many
            .map(|x| format!("{} / {} ({} pods)", x.daemon.rss, x.daemon.pss, x.pods))
            .unwrap_or_else(|| "-".into());
        r.line(format!(
            "| {} | {} | {} | {} / {} ({} pods) | {many_cell} | {} for {} pods |",
            label(name),
            m.per_pod.rss,
            m.per_pod.pss,
            m.daemon.rss,
            m.daemon.pss,
            m.pods,
            m.parents,
            m.pods
        ));
    }
}

// ---------------------------------------------------------------------------------

fn env_usize(k: &str, default: usize) -> usize {
    std::env::var(k)
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(default)
}

struct Setup {
    crust_ref: Crustd,
    crust_own: Crustd,
    ctrd: Containerd,
}

fn start_crustd(subnet: u8, bins: Vec<PathBuf>, layout: &Path) -> Crustd {
    let d = Crustd::start_with(Options {
        cni_conf: false,
        subnet,
        state_on_tmpfs: true,
        cni_bin_dirs: bins,
        ..Default::default()
    });
    std::fs::write(
        d.conf_dir.path().join("10-bench.conflist"),
        conflist_chain("cni0", subnet, d.ipam_data.path(), true),
    )
    .unwrap();
    image::ImageStore::open(d.root.path().join("images"), None)
        .and_then(|s| s.import(layout))
        .unwrap_or_else(|e| panic!("importing busybox into crustd's store: {e}"));
    d
}

fn crust_row(name: &'static str, d: &Crustd, client: Client, dirs: &TempDir) -> Row {
    let cgroups = Hierarchy::detect().unwrap().nested_in_own_cgroup().unwrap();
    // crustd takes cgroup_parent below its --cgroup-root (nested in its own cgroup).
    Row {
        name,
        client,
        daemon_pid: d.pid().unwrap() as i32,
        cgroups,
        burstable: format!("{}/kubepods/burstable", d.cgroup_root),
        sent: "/kubepods/burstable".into(),
        pod_ids: None,
        kubelet: dirs.path().join(name).join("pods"),
        logs: dirs.path().join(name).join("logs"),
        log: Some(d.log.clone()),
    }
}

fn main() {
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    if !require_root(&["ip", "nsenter", "iptables", "sha256sum", "busybox"]) {
        return;
    }
    for p in ["bridge", "host-local", "portmap", "loopback"] {
        assert!(
            Path::new(REF_CNI).join(p).is_file(),
            "{REF_CNI}/{p} missing (apt-get install -y containernetworking-plugins)"
        );
    }
    let n = env_usize("BENCH_N", 50);
    let many = env_usize("BENCH_MANY", 200);
    assert!(
        (1..=240).contains(&n) && many <= 240,
        "BENCH_N and BENCH_MANY: 1..=240 (a /24 per daemon)"
    );
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    let node = Arc::new(Node::read());
    let scratch = TempDir::new("brimg");
    let layout = scratch.path().join("layout");
    busybox_layout(&layout);
    let dirs = TempDir::new("brkub");

    let mut s = Setup {
        crust_ref: start_crustd(95, vec![REF_CNI.into()], &layout),
        crust_own: start_crustd(97, vec![bin_dir(), REF_CNI.into()], &layout),
        ctrd: Containerd::new(96),
    };
    // Its CRI calls' start and end lines, for the server-side times (ExecSync's are debug).
    s.ctrd.log_level = "debug";
    std::fs::write(
        s.ctrd.dir.path().join("net.d/10-bench.conflist"),
        conflist_chain("cni0", 96, &s.ctrd.dir.path().join("ipam"), true),
    )
    .unwrap();
    let archive = layout_archive(&layout, &scratch.path().join("busybox-oci.tar"));
    if let Err(e) = rt.block_on(s.ctrd.start(&[(archive, IMAGE.to_string())])) {
        panic!("containerd: {e}");
    }
    let rows: Vec<Arc<Row>> = rt.block_on(async {
        for d in [&s.crust_ref, &s.crust_own] {
            wait_ready(&d.socket, Duration::from_secs(20))
                .await
                .unwrap_or_else(|e| panic!("crustd: {e}\n{}", d.log_text()));
        }
        let connect = |p: PathBuf| async move {
            RuntimeServiceClient::new(cri_api::connect_unix(&p).await.expect("connecting"))
        };
        let burstable = format!("{}/kubepods/burstable", s.ctrd.cgroup_parent);
        vec![
            Arc::new(Row {
                name: "containerd",
                client: connect(s.ctrd.socket.clone()).await,
                daemon_pid: s.ctrd.pid(),
                cgroups: Hierarchy::detect().unwrap(),
                sent: burstable.clone(),
                burstable,
                pod_ids: Some(s.ctrd.pod_ids.clone()),
                kubelet: dirs.path().join("containerd/pods"),
                logs: dirs.path().join("containerd/logs"),
                log: Some(s.ctrd.log_path().to_path_buf()),
            }),
            Arc::new(crust_row(
                "crust",
                &s.crust_ref,
                connect(s.crust_ref.socket.clone()).await,
                &dirs,
            )),
            Arc::new(crust_row(
                "crust-own",
                &s.crust_own,
                connect(s.crust_own.socket.clone()).await,
                &dirs,
            )),
        ]
    });
    // The QoS cgroups the kubelet makes at its start.
    for r in &rows {
        r.cgroups
            .create(&CgroupPath::new(&r.burstable).unwrap())
            .unwrap_or_else(|e| panic!("{}: kubepods/burstable: {e}", r.name));
    }
    let fail = |r: &Row, what: &str, e: String| -> ! {
        let log = match r.name {
            "containerd" => s.ctrd.failure(""),
            "crust" => s.crust_ref.log_text(),
            _ => s.crust_own.log_text(),
        };
        let tail: Vec<&str> = log.lines().rev().take(20).collect();
        panic!(
            "{} {what}: {e}\n{}",
            r.name,
            tail.into_iter().rev().collect::<Vec<_>>().join("\n")
        )
    };

    // Warm-up, discarded.
    for r in &rows {
        let t = Arc::new(Mutex::new(Times::default()));
        let names = (0..WARM_UP)
            .map(|i| format!("warm-{}-{i}", r.name))
            .collect();
        let pods = rt
            .block_on(up_all(r, &node, names, 1, &t))
            .unwrap_or_else(|e| fail(r, "warm-up", e));
        rt.block_on(down_all(r, pods, 1, &t))
            .unwrap_or_else(|e| fail(r, "warm-up", e));
    }

    let rounds = n.div_ceil(CHUNK);
    let mut latency: Vec<(&str, Vec<(&'static str, Times)>)> = Vec::new();
    let mut mems: Vec<(&'static str, PodMem, Option<PodMem>)> = Vec::new();
    let mut seq_ids: Vec<BTreeSet<String>> = vec![BTreeSet::new(); rows.len()];
    for (m, (mode, par)) in [("seq", 1), ("x10", PAR)].into_iter().enumerate() {
        let times: Vec<Arc<Mutex<Times>>> = rows.iter().map(|_| Arc::default()).collect();
        let log_from: Vec<u64> = rows.iter().map(|r| log_len(r.log.as_deref())).collect();
        let mut pods: Vec<Vec<Vec<Up>>> = rows.iter().map(|_| Vec::new()).collect();
        for round in 0..rounds {
            let count = CHUNK.min(n - round * CHUNK);
            for k in 0..rows.len() {
                let i = (k + round + m) % rows.len();
                let r = &rows[i];
                let names = (0..count)
                    .map(|j| format!("{mode}-{}-{}", r.name, round * CHUNK + j))
                    .collect();
                let up = rt
                    .block_on(up_all(r, &node, names, par, &times[i]))
                    .unwrap_or_else(|e| fail(r, mode, e));
                if mode == "seq" {
                    seq_ids[i].extend(up.iter().map(|p| p.id.clone()));
                }
                pods[i].push(up);
            }
        }
        if mode == "seq" {
            for (i, r) in rows.iter().enumerate() {
                let all: Vec<Up> = pods[i]
                    .iter()
                    .flatten()
                    .map(|p| Up {
                        id: p.id.clone(),
                        uid: p.uid.clone(),
                    })
                    .collect();
                let mm = rt
                    .block_on(measure(r, &all))
                    .unwrap_or_else(|e| fail(r, "memory", e));
                mems.push((r.name, mm, None));
            }
        }
        // Round `round` takes every row's chunk `round`, the rows in rotated order.
        #[allow(clippy::needless_range_loop)]
        for round in 0..rounds {
            for k in 0..rows.len() {
                let i = (k + round + m + 1) % rows.len();
                let chunk = std::mem::take(&mut pods[i][round]);
                rt.block_on(down_all(&rows[i], chunk, par, &times[i]))
                    .unwrap_or_else(|e| fail(&rows[i], mode, e));
            }
        }
        for ((r, t), from) in rows.iter().zip(&times).zip(&log_from) {
            let text = log_since(r.log.as_deref(), *from);
            t.lock().unwrap().server = if r.name == "containerd" {
                containerd_server_times(&text)
            } else {
                crustd_server_times(&text)
            };
        }
        latency.push((
            mode,
            rows.iter()
                .zip(&times)
                .map(|(r, t)| (r.name, t.lock().unwrap().clone()))
                .collect(),
        ));
    }
    if many > 0 {
        for (i, r) in rows.iter().enumerate() {
            let t = Arc::new(Mutex::new(Times::default()));
            let names = (0..many).map(|j| format!("many-{}-{j}", r.name)).collect();
            let up = rt
                .block_on(up_all(r, &node, names, PAR, &t))
                .unwrap_or_else(|e| fail(r, "many", e));
            let mm = rt
                .block_on(measure(r, &up))
                .unwrap_or_else(|e| fail(r, "many memory", e));
            mems[i].2 = Some(mm);
            rt.block_on(down_all(r, up, PAR, &t))
                .unwrap_or_else(|e| fail(r, "many", e));
        }
    }

    // crust's ADD on the reference plugins, from its phases.
    let add = rows[1]
        .log
        .as_deref()
        .and_then(|l| cni_add_ms(l, &seq_ids[1]));

    let mut rep = Report { md: String::new() };
    rep.line(format!(
        "### Runtimes alone: containerd {} + runc {} against crustd ({}), kubelet-v1.28-shaped requests",
        tool_version(&["containerd", "--version"], 2),
        tool_version(&["runc", "--version"], 2),
        crust_e2e::sh(&["git", "rev-parse", "--short", "HEAD"]).trim(),
    ));
    rep.line("");
    rep.line(format!(
        "{n} pods (BENCH_N) in rounds of {CHUNK} alternating between the configurations, order rotated each round, {WARM_UP} warm-up pods each discarded; \
         one tonic client (one connection) per daemon; conflist bridge (isGateway, ipMasq) + host-local + portmap, the same for all; \
         volatile state of every daemon on a tmpfs, persistent roots in temp dirs on the same disk; \
         oom_score_adj {}, hugepage limits {}, swap limit {}.",
        node.oom_score_adj,
        if node.hugepage_sizes.is_empty() { "none (no hugetlb controller)".to_string() } else { node.hugepage_sizes.join(", ") },
        if node.memsw { "= memory limit" } else { "none (no memsw)" },
    ));
    for (mode, res) in &latency {
        latency_table(&mut rep, mode, res);
    }
    memory_table(&mut rep, &mems);

    // The targets.
    let seq = &latency[0].1;
    let t = |n: &str| &seq.iter().find(|x| x.0 == n).unwrap().1;
    let (d, c, o) = (t("containerd"), t("crust"), t("crust-own"));
    let mem = |n: &str| mems.iter().find(|x| x.0 == n).unwrap();
    let mut targets: Vec<(String, f64, f64)> = vec![(
        "RunPodSandbox, crust's plugins / containerd's reference".into(),
        p50(&o.run) / p50(&d.run),
        0.2,
    )];
    if let Some(add) = add {
        targets.push((
            format!(
                "RunPodSandbox less the plugins' ADD ({add:.1} ms, crustd's phases), same plugins"
            ),
            (p50(&c.run) - add) / (p50(&d.run) - add),
            0.15,
        ));
    }
    targets.extend([
        (
            "Create+Start, same plugins".to_string(),
            p50(&c.create_start) / p50(&d.create_start),
            0.15,
        ),
        ("ExecSync".to_string(), p50(&c.exec) / p50(&d.exec), 0.1),
        (
            "StopPodSandbox, crust's plugins".to_string(),
            p50(&o.stop) / p50(&d.stop),
            0.1,
        ),
        (
            "per-pod PSS".to_string(),
            mem("crust").1.per_pod.pss as f64 / mem("containerd").1.per_pod.pss.max(1) as f64,
            0.02,
        ),
    ]);
    if let (Some(cm), Some(dm)) = (mem("crust").2, mem("containerd").2) {
        targets.push((
            format!("daemon RSS with {many} pods"),
            cm.daemon.rss as f64 / dm.daemon.rss.max(1) as f64,
            0.3,
        ));
    }
    rep.line("");
    rep.line("Targets (issue 15), ratios crust/containerd of p50s (seq):");
    rep.line("");
    rep.line("| target | ratio | limit | |");
    rep.line("| --- | --- | --- | --- |");
    for (what, ratio, limit) in &targets {
        rep.line(format!(
            "| {what} | {ratio:.3} | ≤ {limit} | {} |",
            if *ratio <= *limit {
                "met"
            } else {
                "**missed**"
            }
        ));
    }
    if let Ok(path) = std::env::var("BENCH_MD") {
        let mut f = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .unwrap();
        use std::io::Write;
        f.write_all(rep.md.as_bytes()).unwrap();
    }

    // Nothing left: the QoS cgroups, then every daemon's own cleanup; then check.
    let mut watch: Vec<PathBuf> = Vec::new();
    for d in [&s.crust_ref, &s.crust_own] {
        watch.extend(
            rows[1]
                .cgroups
                .dirs(&CgroupPath::new(&d.cgroup_root).unwrap()),
        );
        watch.push(d.node.path());
    }
    watch.extend(
        Hierarchy::detect()
            .unwrap()
            .dirs(&CgroupPath::new(&s.ctrd.cgroup_parent).unwrap()),
    );
    let pids: Vec<i32> = rows.iter().map(|r| r.daemon_pid).collect();
    for r in &rows {
        let q = CgroupPath::new(&r.burstable).unwrap();
        remove_cgroup(&r.cgroups, &q);
        remove_cgroup(
            &r.cgroups,
            &CgroupPath::new(r.burstable.trim_end_matches("/burstable")).unwrap(),
        );
    }
    drop(rows);
    drop(s);
    let mut left = String::new();
    for p in watch.iter().filter(|p| p.exists()) {
        let _ = writeln!(left, "{}", p.display());
    }
    for p in pids
        .iter()
        .filter(|p| Path::new(&format!("/proc/{p}")).exists())
    {
        let _ = writeln!(left, "daemon {p} still running");
    }
    for p in [scratch.path(), dirs.path()] {
        for m in mounts_below(p) {
            let _ = writeln!(left, "mount {m}");
        }
    }
    if left.is_empty() {
        println!("cleanup: no daemon, cgroup, node namespace or mount of this bench left");
    } else {
        println!("!!!!! left behind:\n{left}");
    }
}
