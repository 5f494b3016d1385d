//! RunPodSandbox, StopPodSandbox and RemovePodSandbox of `crustd` against containerd 1.6
//! with runc, on the same machine in one run, through the same CRI client (`cri-api`),
//! both with a `bridge` and `host-local` pod network (isGateway, ipMasq). Run as root
//! through `hack/bench-sandbox` (which installs containerd and runc and builds the release
//! binaries first), or `cargo bench -p crust-e2e --bench sandbox`. `BENCH_N` pods per
//! round (default 50).
//!
//! Each daemon gets its own node network namespace (started from a thread that entered
//! it, not `ip netns exec`, which would hide `/sys/fs/cgroup`), temp root and state, its
//! own socket, CNI conf dir and IPAM data dir, and pod cgroups below this process's own
//! cgroup. crustd runs with crust's `bridge` and `host-local`; containerd with the
//! reference plugins of Debian's `containernetworking-plugins`, on the same conflist
//! (only the subnet and data dir differ).
//!
//! containerd is set up offline: its sandbox image `localhost/crust-bench/pause:1` is an
//! OCI archive this bench writes itself and imports with `ctr images import` (unpacked
//! for overlayfs). The image holds one file, crust's own `no_std` pause binary
//! (`container::pause::BINARY`), so both runtimes run the very same pause process and
//! the comparison is of the runtimes alone.
//!
//! A round runs N pods (all RunPodSandbox), measures memory with the N pods up, then
//! stops them all, then removes them all: once one RPC at a time ("seq") and once ten
//! in flight ("x10", one shared gRPC connection as the kubelet has). Latency is each
//! RPC's round trip as the client sees it (the server's time plus a unix-socket hop);
//! pods/s is N over the wall time of the three phases. Rounds alternate between the
//! daemons. If containerd cannot be started here, the bench says why and measures
//! crustd alone.
//!
//! Everything is cleaned up on drop, so also on panic: pods through CRI, then by force
//! (daemon, shims, pause processes, cgroups, mounts under the temp dirs, shim sockets),
//! then the node namespaces and temp dirs.

use cri_api::*;
use crust_e2e::crustd::{walk_dirs, Crustd, Options};
use crust_e2e::{enter_netns, require_root, unique, which, Netns, TempDir};
use std::collections::HashMap;
use std::future::Future;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tonic::transport::Channel;

type Client = RuntimeServiceClient<Channel>;

const PAUSE_IMAGE: &str = "localhost/crust-bench/pause:1";
const CONCURRENCY: usize = 10;
const RPC_TIMEOUT: Duration = Duration::from_secs(60);
const SHIM_SOCKET_DIR: &str = "/run/containerd/s";

// ---------------------------------------------------------------------------------
// Measurements

#[derive(Default, Clone, Copy)]
struct Mem {
    rss: u64,
    pss: u64,
}

impl std::ops::Add for Mem {
    type Output = Mem;
    fn add(self, o: Mem) -> Mem {
        Mem {
            rss: self.rss + o.rss,
            pss: self.pss + o.pss,
        }
    }
}

/// VmRSS (`/proc/PID/status`) and Pss (`/proc/PID/smaps_rollup`) of a process, in KiB.
fn mem_of(pid: i32) -> Option<Mem> {
    let field = |file: &str, key: &str| -> Option<u64> {
        let text = std::fs::read_to_string(format!("/proc/{pid}/{file}")).ok()?;
        text.lines()
            .find_map(|l| l.strip_prefix(key))
            .and_then(|v| v.split_whitespace().next())
            .and_then(|v| v.parse().ok())
    };
    Some(Mem {
        rss: field("status", "VmRSS:")?,
        pss: field("smaps_rollup", "Pss:")?,
    })
}

fn ppid_of(pid: i32) -> Option<i32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let after = stat.rsplit_once(')')?.1;
    after.split_whitespace().nth(1)?.parse().ok()
}

fn comm_of(pid: i32) -> String {
    std::fs::read_to_string(format!("/proc/{pid}/comm"))
        .unwrap_or_default()
        .trim()
        .to_string()
}

/// Median of per-pod memory figures.
fn median_mem(v: &[Mem]) -> Mem {
    if v.is_empty() {
        return Mem::default();
    }
    let med = |f: &dyn Fn(&Mem) -> u64| {
        let mut s: Vec<u64> = v.iter().map(f).collect();
        s.sort_unstable();
        s[s.len() / 2]
    };
    Mem {
        rss: med(&|m| m.rss),
        pss: med(&|m| m.pss),
    }
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

fn pct(v: &[Duration], p: f64) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    let mut s: Vec<f64> = v.iter().map(|d| ms(*d)).collect();
    s.sort_by(|a, b| a.partial_cmp(b).unwrap());
    s[((s.len() as f64 - 1.0) * p).round() as usize]
}

#[derive(Default)]
struct Round {
    run: Vec<Duration>,
    stop: Vec<Duration>,
    remove: Vec<Duration>,
    wall: Duration,
}

impl Round {
    fn pods_per_sec(&self) -> f64 {
        self.run.len() as f64 / self.wall.as_secs_f64()
    }
}

/// Memory with the pods of a round up.
#[derive(Default)]
struct PodMem {
    daemon: Mem,
    pause: Mem,
    /// containerd's shim, one per pod; zero for crustd, which has none for a sandbox.
    shim: Mem,
    /// Distinct shim processes seen (one per pod expected).
    shims: usize,
}

// ---------------------------------------------------------------------------------
// The CRI side, the same for both daemons

fn pod_config(name: &str, uid: &str, cgroup_parent: &str) -> PodSandboxConfig {
    PodSandboxConfig {
        metadata: Some(PodSandboxMetadata {
            name: name.into(),
            uid: uid.into(),
            namespace: "bench".into(),
            attempt: 0,
        }),
        hostname: name.into(),
        labels: HashMap::from([("app".to_string(), "bench".to_string())]),
        linux: Some(LinuxPodSandboxConfig {
            cgroup_parent: cgroup_parent.into(),
            // What the kubelet sends for an ordinary pod.
            security_context: Some(LinuxSandboxSecurityContext {
                namespace_options: Some(NamespaceOption {
                    network: NamespaceMode::Pod as i32,
                    pid: NamespaceMode::Container as i32,
                    ipc: NamespaceMode::Pod as i32,
                    ..Default::default()
                }),
                ..Default::default()
            }),
            ..Default::default()
        }),
        ..Default::default()
    }
}

async fn rpc<T>(
    what: &str,
    f: impl Future<Output = Result<tonic::Response<T>, tonic::Status>>,
) -> Result<T, String> {
    match tokio::time::timeout(RPC_TIMEOUT, f).await {
        Ok(Ok(r)) => Ok(r.into_inner()),
        Ok(Err(s)) => Err(format!("{what}: {:?}: {}", s.code(), s.message())),
        Err(_) => Err(format!("{what}: no answer within {RPC_TIMEOUT:?}")),
    }
}

/// Runs `f(0..n)` with `par` calls in flight; returns every call's duration and the
/// phase's wall time.
async fn phase<F, Fut>(n: usize, par: usize, f: F) -> Result<(Vec<Duration>, Duration), String>
where
    F: Fn(usize) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<Duration, String>> + Send + 'static,
{
    let f = Arc::new(f);
    let next = Arc::new(AtomicUsize::new(0));
    let t = Instant::now();
    let workers: Vec<_> = (0..par)
        .map(|_| {
            let (f, next) = (f.clone(), next.clone());
            tokio::spawn(async move {
                let mut out = Vec::new();
                loop {
                    let i = next.fetch_add(1, Ordering::SeqCst);
                    if i >= n {
                        return Ok::<_, String>(out);
                    }
                    out.push(f(i).await?);
                }
            })
        })
        .collect();
    let mut all = Vec::with_capacity(n);
    let mut first_err = None;
    for w in workers {
        match w.await {
            Ok(Ok(v)) => all.extend(v),
            Ok(Err(e)) => {
                first_err.get_or_insert(e);
            }
            Err(e) => {
                first_err.get_or_insert(format!("worker panicked: {e}"));
            }
        }
    }
    match first_err {
        Some(e) => Err(e),
        None => Ok((all, t.elapsed())),
    }
}

/// One daemon as the bench sees it.
struct Side {
    name: &'static str,
    socket: PathBuf,
    daemon_pid: i32,
    cgroup_parent: String,
    /// Count a per-pod shim (the pause's parent) in the pod's memory.
    has_shim: bool,
    /// Every sandbox id the daemon returned, for the cleanup.
    ids_seen: Arc<Mutex<Vec<String>>>,
}

/// The pause pid of a sandbox, from the verbose status's `info` JSON (`.info.pid`), the
/// same for both daemons.
async fn pause_pid(c: &mut Client, id: &str) -> Result<i32, String> {
    let st = rpc(
        "PodSandboxStatus",
        c.pod_sandbox_status(PodSandboxStatusRequest {
            pod_sandbox_id: id.to_string(),
            verbose: true,
        }),
    )
    .await?;
    let ready = st.status.as_ref().map(|s| s.state) == Some(PodSandboxState::SandboxReady as i32);
    if !ready {
        return Err(format!("sandbox {id} is not READY after RunPodSandbox"));
    }
    let ip = st.status.as_ref().and_then(|s| s.network.as_ref());
    if ip.is_none_or(|n| n.ip.is_empty()) {
        return Err(format!(
            "sandbox {id} has no pod IP: the bridge network did not attach"
        ));
    }
    let info = st
        .info
        .get("info")
        .ok_or_else(|| format!("no verbose info for {id}"))?;
    let v: serde_json::Value =
        serde_json::from_str(info).map_err(|e| format!("verbose info of {id}: {e}"))?;
    v["pid"]
        .as_i64()
        .filter(|p| *p > 0)
        .map(|p| p as i32)
        .ok_or_else(|| format!("no pid in the verbose info of {id}: {info}"))
}

async fn measure_mem(side: &Side, c: &mut Client, ids: &[String]) -> Result<PodMem, String> {
    let mut pauses = Vec::new();
    let mut shims = Vec::new();
    let mut shim_pids = std::collections::BTreeSet::new();
    for id in ids {
        let pid = pause_pid(c, id).await?;
        pauses.push(mem_of(pid).ok_or_else(|| format!("pause {pid} of {id} is gone"))?);
        if side.has_shim {
            let shim = ppid_of(pid).ok_or_else(|| format!("no parent of pause {pid}"))?;
            let comm = comm_of(shim);
            if !comm.starts_with("containerd-shim") {
                return Err(format!(
                    "pause {pid}'s parent {shim} is {comm:?}, not a shim"
                ));
            }
            shim_pids.insert(shim);
            shims.push(mem_of(shim).unwrap_or_default());
        }
    }
    Ok(PodMem {
        daemon: mem_of(side.daemon_pid).unwrap_or_default(),
        pause: median_mem(&pauses),
        shim: median_mem(&shims),
        shims: shim_pids.len(),
    })
}

/// N pods: run them all, measure memory (if asked), stop them all, remove them all, with
/// `par` RPCs in flight.
async fn round(
    side: &Side,
    tag: &str,
    n: usize,
    par: usize,
    with_mem: bool,
) -> Result<(Round, Option<PodMem>), String> {
    let ch = cri_api::connect_unix(&side.socket)
        .await
        .map_err(|e| format!("connecting to {}: {e}", side.socket.display()))?;
    let client = RuntimeServiceClient::new(ch);
    let ids: Arc<Mutex<Vec<String>>> = Arc::new(Mutex::new(vec![String::new(); n]));

    let (c, ids2, seen, parent, tag2) = (
        client.clone(),
        ids.clone(),
        side.ids_seen.clone(),
        side.cgroup_parent.clone(),
        tag.to_string(),
    );
    let (run, t_run) = phase(n, par, move |i| {
        let (mut c, ids, seen, parent) = (c.clone(), ids2.clone(), seen.clone(), parent.clone());
        let name = format!("{tag2}-{i}");
        async move {
            let cfg = pod_config(&name, &format!("uid-{name}"), &parent);
            let t = Instant::now();
            let r = rpc(
                "RunPodSandbox",
                c.run_pod_sandbox(RunPodSandboxRequest {
                    config: Some(cfg),
                    runtime_handler: String::new(),
                }),
            )
            .await?;
            let d = t.elapsed();
            seen.lock().unwrap().push(r.pod_sandbox_id.clone());
            ids.lock().unwrap()[i] = r.pod_sandbox_id;
            Ok(d)
        }
    })
    .await?;

    let all: Vec<String> = ids.lock().unwrap().clone();
    let mem = if with_mem {
        let mut c = client.clone();
        Some(measure_mem(side, &mut c, &all).await?)
    } else {
        None
    };

    let id_list = Arc::new(all);
    let (c, l) = (client.clone(), id_list.clone());
    let (stop, t_stop) = phase(n, par, move |i| {
        let (mut c, id) = (c.clone(), l[i].clone());
        async move {
            let t = Instant::now();
            rpc(
                "StopPodSandbox",
                c.stop_pod_sandbox(StopPodSandboxRequest { pod_sandbox_id: id }),
            )
            .await?;
            Ok(t.elapsed())
        }
    })
    .await?;
    let (c, l) = (client.clone(), id_list.clone());
    let (remove, t_rm) = phase(n, par, move |i| {
        let (mut c, id) = (c.clone(), l[i].clone());
        async move {
            let t = Instant::now();
            rpc(
                "RemovePodSandbox",
                c.remove_pod_sandbox(RemovePodSandboxRequest { pod_sandbox_id: id }),
            )
            .await?;
            Ok(t.elapsed())
        }
    })
    .await?;
    Ok((
        Round {
            run,
            stop,
            remove,
            wall: t_run + t_stop + t_rm,
        },
        mem,
    ))
}

/// Waits until the daemon reports RuntimeReady and NetworkReady.
async fn wait_ready(socket: &Path, timeout: Duration) -> Result<(), String> {
    let deadline = Instant::now() + timeout;
    let mut last = String::from("no answer");
    while Instant::now() < deadline {
        if let Ok(ch) = cri_api::connect_unix(socket).await {
            let mut c = RuntimeServiceClient::new(ch);
            match rpc("Status", c.status(StatusRequest { verbose: false })).await {
                Ok(st) => {
                    let conds = st.status.map(|s| s.conditions).unwrap_or_default();
                    let not_ready: Vec<String> = conds
                        .iter()
                        .filter(|c| !c.status)
                        .map(|c| format!("{} false: {} {}", c.r#type, c.reason, c.message))
                        .collect();
                    if conds.len() >= 2 && not_ready.is_empty() {
                        return Ok(());
                    }
                    last = not_ready.join("; ");
                }
                Err(e) => last = e,
            }
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    Err(format!("not ready within {timeout:?}: {last}"))
}

// ---------------------------------------------------------------------------------
// The pod network, the same conflist for both

fn conflist(bridge: &str, subnet: u8, data_dir: &Path) -> String {
    serde_json::json!({
        "cniVersion": "1.0.0",
        "name": "crust-bench",
        "plugins": [{
            "type": "bridge",
            "bridge": bridge,
            "isGateway": true,
            "ipMasq": true,
            "ipam": {
                "type": "host-local",
                "dataDir": data_dir,
                "ranges": [[{"subnet": format!("10.{subnet}.0.0/24")}]],
                "routes": [{"dst": "0.0.0.0/0"}]
            }
        }]
    })
    .to_string()
}

// ---------------------------------------------------------------------------------
// The pause image: an OCI archive written here, holding crust's pause binary

/// One ustar header + data (padded), for a regular file or (`data == None`) a directory.
fn tar_entry(out: &mut Vec<u8>, name: &str, mode: u32, data: Option<&[u8]>) {
    assert!(name.len() < 100, "tar name too long: {name}");
    let mut h = [0u8; 512];
    let put = |h: &mut [u8; 512], off: usize, s: &[u8]| h[off..off + s.len()].copy_from_slice(s);
    put(&mut h, 0, name.as_bytes());
    put(&mut h, 100, format!("{mode:07o}\0").as_bytes());
    put(&mut h, 108, b"0000000\0");
    put(&mut h, 116, b"0000000\0");
    let size = data.map(|d| d.len()).unwrap_or(0);
    put(&mut h, 124, format!("{size:011o}\0").as_bytes());
    put(&mut h, 136, b"00000000000\0");
    put(&mut h, 156, if data.is_some() { b"0" } else { b"5" });
    put(&mut h, 257, b"ustar\0");
    put(&mut h, 263, b"00");
    put(&mut h, 148, b"        ");
    let sum: u32 = h.iter().map(|b| *b as u32).sum();
    put(&mut h, 148, format!("{sum:06o}\0 ").as_bytes());
    out.extend_from_slice(&h);
    if let Some(d) = data {
        out.extend_from_slice(d);
        out.resize(out.len().div_ceil(512) * 512, 0);
    }
}

fn tar_finish(out: &mut Vec<u8>) {
    out.extend_from_slice(&[0u8; 1024]);
}

fn sha256_hex(data: &[u8], scratch: &Path) -> String {
    std::fs::write(scratch, data).unwrap();
    let out = crust_e2e::sh(&["sha256sum", &scratch.to_string_lossy()]);
    let _ = std::fs::remove_file(scratch);
    out.split_whitespace().next().unwrap().to_string()
}

/// Writes an OCI image archive (`oci-layout`, `index.json`, blobs) for `name` whose only
/// file is `/pause` (crust's pause binary), its entrypoint. Returns the archive's path.
fn write_pause_image(dir: &Path, name: &str) -> PathBuf {
    let scratch = dir.join("blob.tmp");
    let mut layer = Vec::new();
    tar_entry(&mut layer, "pause", 0o755, Some(container::pause::BINARY));
    tar_finish(&mut layer);
    let layer_digest = sha256_hex(&layer, &scratch);
    let config = serde_json::json!({
        "architecture": "amd64",
        "os": "linux",
        "config": {"Entrypoint": ["/pause"], "WorkingDir": "/"},
        "rootfs": {"type": "layers", "diff_ids": [format!("sha256:{layer_digest}")]},
        "history": [{"created_by": "crust bench-sandbox: crust-pause (container::pause::BINARY)"}]
    })
    .to_string()
    .into_bytes();
    let config_digest = sha256_hex(&config, &scratch);
    let manifest = serde_json::json!({
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {
            "mediaType": "application/vnd.oci.image.config.v1+json",
            "digest": format!("sha256:{config_digest}"),
            "size": config.len()
        },
        "layers": [{
            "mediaType": "application/vnd.oci.image.layer.v1.tar",
            "digest": format!("sha256:{layer_digest}"),
            "size": layer.len()
        }]
    })
    .to_string()
    .into_bytes();
    let manifest_digest = sha256_hex(&manifest, &scratch);
    let index = serde_json::json!({
        "schemaVersion": 2,
        "manifests": [{
            "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "digest": format!("sha256:{manifest_digest}"),
            "size": manifest.len(),
            "platform": {"architecture": "amd64", "os": "linux"},
            "annotations": {
                "io.containerd.image.name": name,
                "org.opencontainers.image.ref.name": name.rsplit_once(':').map(|(_, t)| t).unwrap_or("latest")
            }
        }]
    })
    .to_string()
    .into_bytes();

    let mut ar = Vec::new();
    tar_entry(
        &mut ar,
        "oci-layout",
        0o644,
        Some(br#"{"imageLayoutVersion":"1.0.0"}"#),
    );
    tar_entry(&mut ar, "index.json", 0o644, Some(&index));
    tar_entry(&mut ar, "blobs/", 0o755, None);
    tar_entry(&mut ar, "blobs/sha256/", 0o755, None);
    for (d, b) in [
        (&layer_digest, &layer),
        (&config_digest, &config),
        (&manifest_digest, &manifest),
    ] {
        tar_entry(&mut ar, &format!("blobs/sha256/{d}"), 0o644, Some(b));
    }
    tar_finish(&mut ar);
    let path = dir.join("pause-oci.tar");
    std::fs::write(&path, ar).unwrap();
    path
}

// ---------------------------------------------------------------------------------
// containerd in a node namespace

/// The deepest of this process's cgroups over the hierarchies: a path that is at or
/// below our own cgroup in every hierarchy when the others are ancestors of it (here
/// all are `/` but memory's). Says so when they are not.
fn own_cgroup_base() -> String {
    let text = std::fs::read_to_string("/proc/self/cgroup").unwrap_or_default();
    let paths: Vec<&str> = text
        .lines()
        .filter_map(|l| l.splitn(3, ':').nth(2))
        .collect();
    let deepest = paths
        .iter()
        .copied()
        .max_by_key(|p| p.trim_end_matches('/').matches('/').count())
        .unwrap_or("/")
        .trim_end_matches('/')
        .to_string();
    for p in &paths {
        let p = p.trim_end_matches('/');
        if !(p.is_empty() || deepest == p || deepest.starts_with(&format!("{p}/"))) {
            eprintln!(
                "warning: this process's cgroups ({}) do not nest in one path; containerd's pods go under {deepest}",
                paths.join(", ")
            );
        }
    }
    deepest
}

/// Every cgroup hierarchy mounted (v1 controllers, named ones such as `name=systemd`,
/// and the hybrid cgroup2 mount), as (mount point, the cgroup path of its root).
fn cgroup_mounts() -> Vec<(PathBuf, String)> {
    std::fs::read_to_string("/proc/self/mountinfo")
        .unwrap_or_default()
        .lines()
        .filter_map(|l| {
            let (pre, post) = l.split_once(" - ")?;
            let fstype = post.split_whitespace().next()?;
            if fstype != "cgroup" && fstype != "cgroup2" {
                return None;
            }
            let f: Vec<&str> = pre.split_whitespace().collect();
            Some((PathBuf::from(f.get(4)?), f.get(3)?.to_string()))
        })
        .collect()
}

/// Mount points at or below `dir` (exactly, not by string prefix), deepest last.
fn mounts_below(dir: &Path) -> Vec<String> {
    let d = dir.to_string_lossy().to_string();
    let below = format!("{d}/");
    std::fs::read_to_string("/proc/self/mountinfo")
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.split_whitespace().nth(4).map(str::to_string))
        .filter(|m| *m == d || m.starts_with(&below))
        .collect()
}

fn kill(pid: i32, sig: i32) {
    // SAFETY: signalling a process this bench (or a daemon it started) made.
    unsafe { libc::kill(pid, sig) };
}

struct Containerd {
    node: Netns,
    dir: TempDir,
    socket: PathBuf,
    log: PathBuf,
    /// Absolute cgroup path the pods go under (runc's cgroupfs driver, every hierarchy).
    cgroup_parent: String,
    child: Option<Child>,
    /// Shim sockets in /run/containerd/s before we started, and the directories we made.
    shim_sockets_before: Vec<PathBuf>,
    made_dirs: Vec<PathBuf>,
    pod_ids: Arc<Mutex<Vec<String>>>,
}

impl Containerd {
    fn new(subnet: u8) -> Containerd {
        let dir = TempDir::new("ctrd");
        let made_dirs = ["/run/containerd", SHIM_SOCKET_DIR]
            .iter()
            .map(PathBuf::from)
            .filter(|p| !p.exists())
            .collect();
        let shim_sockets_before = std::fs::read_dir(SHIM_SOCKET_DIR)
            .map(|rd| rd.flatten().map(|e| e.path()).collect())
            .unwrap_or_default();
        let c = Containerd {
            node: Netns::new("bcn"),
            socket: dir.path().join("containerd.sock"),
            log: dir.path().join("containerd.log"),
            cgroup_parent: format!("{}/{}", own_cgroup_base(), unique("crust-bench-ctrd-")),
            dir,
            child: None,
            shim_sockets_before,
            made_dirs,
            pod_ids: Arc::new(Mutex::new(Vec::new())),
        };
        for d in ["root", "state", "net.d", "ipam", "runc"] {
            std::fs::create_dir_all(c.dir.path().join(d)).unwrap();
        }
        std::fs::write(
            c.dir.path().join("net.d/10-bench.conflist"),
            conflist("cni0", subnet, &c.dir.path().join("ipam")),
        )
        .unwrap();
        c
    }

    fn config(&self) -> String {
        let d = self.dir.path().display();
        format!(
            r#"version = 2
root = "{d}/root"
state = "{d}/state"
oom_score = 0
disabled_plugins = [
  "io.containerd.snapshotter.v1.aufs",
  "io.containerd.snapshotter.v1.btrfs",
  "io.containerd.snapshotter.v1.devmapper",
  "io.containerd.snapshotter.v1.zfs",
  "io.containerd.internal.v1.opt",
]

[grpc]
  address = "{sock}"

[ttrpc]
  address = "{sock}.ttrpc"

[debug]
  address = ""
  level = "info"

[metrics]
  address = ""

[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "{PAUSE_IMAGE}"
  disable_tcp_service = true
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
  enable_selinux = false
  # The bounding set here lacks CAP_SYS_RESOURCE: the sandbox's -998 must be clamped.
  restrict_oom_score_adj = true
  netns_mounts_under_state_dir = true

  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "{d}/net.d"
    max_conf_num = 1

  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"

    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"

      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        BinaryName = "{runc}"
        Root = "{d}/runc"
        SystemdCgroup = false
"#,
            sock = self.socket.display(),
            runc = which("runc").unwrap_or_default().display(),
        )
    }

    /// Starts containerd in the node namespace, imports the pause image and waits for
    /// CRI to be ready; an error says what failed, with the end of containerd's log.
    async fn start(&mut self) -> Result<(), String> {
        for tool in ["containerd", "ctr", "runc", "containerd-shim-runc-v2"] {
            if which(tool).is_none() {
                return Err(format!(
                    "`{tool}` not found (apt-get install -y containerd runc)"
                ));
            }
        }
        for plugin in ["bridge", "host-local", "loopback"] {
            if !Path::new("/usr/lib/cni").join(plugin).is_file() {
                return Err(format!(
                    "/usr/lib/cni/{plugin} not found (apt-get install -y containernetworking-plugins)"
                ));
            }
        }
        let cfg = self.dir.path().join("config.toml");
        std::fs::write(&cfg, self.config()).unwrap();
        let log = std::fs::File::create(&self.log).unwrap();
        let mut cmd = Command::new(which("containerd").unwrap());
        cmd.arg("--config")
            .arg(&cfg)
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log);
        let node = self.node.path();
        let child = std::thread::scope(|s| {
            s.spawn(|| {
                enter_netns(&node);
                cmd.spawn()
            })
            .join()
            .unwrap()
        })
        .map_err(|e| format!("spawning containerd: {e}"))?;
        self.child = Some(child);

        let deadline = Instant::now() + Duration::from_secs(30);
        while std::os::unix::net::UnixStream::connect(&self.socket).is_err() {
            if let Some(Ok(Some(st))) = self.child.as_mut().map(|c| c.try_wait()) {
                self.child = None;
                return Err(self.failure(&format!("containerd exited with {st} before serving")));
            }
            if Instant::now() > deadline {
                return Err(self.failure("containerd did not serve within 30 s"));
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }

        let tar = write_pause_image(self.dir.path(), PAUSE_IMAGE);
        let ctr = |args: &[&str]| {
            let out = crust_e2e::run(
                Command::new("ctr")
                    .arg("--address")
                    .arg(&self.socket)
                    .args(["--namespace", "k8s.io"])
                    .args(args),
            );
            (
                out.status.success(),
                format!(
                    "{}{}",
                    String::from_utf8_lossy(&out.stdout),
                    String::from_utf8_lossy(&out.stderr)
                ),
            )
        };
        let (ok, out) = ctr(&[
            "images",
            "import",
            "--platform",
            "linux/amd64",
            &tar.to_string_lossy(),
        ]);
        if !ok {
            return Err(self.failure(&format!("ctr images import failed: {out}")));
        }
        let (_, list) = ctr(&["images", "ls", "-q"]);
        if !list.lines().any(|l| l.trim() == PAUSE_IMAGE) {
            return Err(self.failure(&format!(
                "{PAUSE_IMAGE} not in containerd's images after import: {list}{out}"
            )));
        }

        wait_ready(&self.socket, Duration::from_secs(30))
            .await
            .map_err(|e| self.failure(&format!("containerd's CRI: {e}")))?;
        // The CRI plugin must see the image itself, or RunPodSandbox would try to pull.
        let ch = cri_api::connect_unix(&self.socket)
            .await
            .map_err(|e| e.to_string())?;
        let mut images = ImageServiceClient::new(ch);
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let st = rpc(
                "ImageStatus",
                images.image_status(ImageStatusRequest {
                    image: Some(ImageSpec {
                        image: PAUSE_IMAGE.into(),
                        ..Default::default()
                    }),
                    verbose: false,
                }),
            )
            .await
            .map_err(|e| self.failure(&e))?;
            if st.image.is_some() {
                return Ok(());
            }
            if Instant::now() > deadline {
                return Err(self.failure(&format!("CRI does not list {PAUSE_IMAGE}")));
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    fn failure(&self, what: &str) -> String {
        let log = std::fs::read_to_string(&self.log).unwrap_or_default();
        let tail: Vec<&str> = log.lines().rev().take(15).collect();
        let tail: Vec<&str> = tail.into_iter().rev().collect();
        format!(
            "{what}\n  containerd log tail:\n    {}",
            tail.join("\n    ")
        )
    }

    fn pid(&self) -> i32 {
        self.child.as_ref().map(|c| c.id() as i32).unwrap_or(0)
    }

    fn side(&self) -> Side {
        Side {
            name: "containerd",
            socket: self.socket.clone(),
            daemon_pid: self.pid(),
            cgroup_parent: self.cgroup_parent.clone(),
            has_shim: true,
            ids_seen: self.pod_ids.clone(),
        }
    }

    /// Every pod through CRI, with a deadline; remembers their ids for the shim sockets.
    fn cleanup_through_cri(&mut self) {
        if self.child.is_none() {
            return;
        }
        let socket = self.socket.clone();
        let ids = self.pod_ids.clone();
        let _ = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            rt.block_on(async move {
                let work = async {
                    let Ok(ch) = cri_api::connect_unix(&socket).await else {
                        return;
                    };
                    let mut c = RuntimeServiceClient::new(ch);
                    let Ok(list) = c.list_pod_sandbox(ListPodSandboxRequest::default()).await
                    else {
                        return;
                    };
                    for sb in list.into_inner().items {
                        ids.lock().unwrap().push(sb.id.clone());
                        let _ = c
                            .stop_pod_sandbox(StopPodSandboxRequest {
                                pod_sandbox_id: sb.id.clone(),
                            })
                            .await;
                        let _ = c
                            .remove_pod_sandbox(RemovePodSandboxRequest {
                                pod_sandbox_id: sb.id,
                            })
                            .await;
                    }
                };
                let _ = tokio::time::timeout(Duration::from_secs(60), work).await;
            })
        })
        .join();
    }

    fn cleanup_by_force(&mut self) {
        // containerd: SIGTERM, then SIGKILL.
        if let Some(mut c) = self.child.take() {
            kill(c.id() as i32, libc::SIGTERM);
            let deadline = Instant::now() + Duration::from_secs(10);
            while matches!(c.try_wait(), Ok(None)) && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(20));
            }
            let _ = c.kill();
            let _ = c.wait();
        }
        // Shims started for our socket (their command line names it).
        let sock = self.socket.to_string_lossy().to_string();
        if let Ok(rd) = std::fs::read_dir("/proc") {
            for e in rd.flatten() {
                let Ok(pid) = e.file_name().to_string_lossy().parse::<i32>() else {
                    continue;
                };
                let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
                let args: Vec<String> = cmdline
                    .split(|b| *b == 0)
                    .map(|a| String::from_utf8_lossy(a).into_owned())
                    .collect();
                if args.first().is_some_and(|a| a.contains("containerd-shim"))
                    && args.contains(&sock)
                {
                    kill(pid, libc::SIGKILL);
                }
            }
        }
        // Pause processes and whatever else is left in our pod cgroups, then the cgroups.
        let mut dirs = Vec::new();
        for (mnt, root) in cgroup_mounts() {
            let rel = self
                .cgroup_parent
                .strip_prefix(root.trim_end_matches('/'))
                .unwrap_or(&self.cgroup_parent)
                .trim_start_matches('/')
                .to_string();
            walk_dirs(&mnt.join(rel), &mut dirs);
        }
        dirs.sort_by_key(|d| std::cmp::Reverse(d.components().count()));
        dirs.dedup();
        for d in &dirs {
            if let Ok(procs) = std::fs::read_to_string(d.join("cgroup.procs")) {
                for p in procs.lines().filter_map(|l| l.trim().parse::<i32>().ok()) {
                    kill(p, libc::SIGKILL);
                }
            }
        }
        let deadline = Instant::now() + Duration::from_secs(5);
        while dirs.iter().any(|d| d.exists()) && Instant::now() < deadline {
            for d in &dirs {
                let _ = std::fs::remove_dir(d);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        // Mounts under our dir (rootfs overlays, pod netns pins, shm), deepest first.
        for m in mounts_below(self.dir.path()).iter().rev() {
            if let Ok(c) = std::ffi::CString::new(m.as_str()) {
                // SAFETY: lazy unmount of a mount under our own temp dir.
                unsafe { libc::umount2(c.as_ptr(), libc::MNT_DETACH) };
            }
        }
        // Shim sockets left by killed shims: new since we started, named as containerd
        // names ours (sha256 of address/namespace/id).
        let mut ids = self.pod_ids.lock().unwrap().clone();
        ids.sort();
        ids.dedup();
        let ours: Vec<String> = ids
            .iter()
            .map(|id| {
                sha256_hex(
                    format!("{sock}/k8s.io/{id}").as_bytes(),
                    &self.dir.path().join("hash.tmp"),
                )
            })
            .collect();
        if let Ok(rd) = std::fs::read_dir(SHIM_SOCKET_DIR) {
            for e in rd.flatten() {
                let p = e.path();
                let name = e.file_name().to_string_lossy().to_string();
                if !self.shim_sockets_before.contains(&p) && ours.contains(&name) {
                    let _ = std::fs::remove_file(&p);
                }
            }
        }
        for d in self.made_dirs.iter().rev() {
            let _ = std::fs::remove_dir(d);
        }
    }
}

impl Drop for Containerd {
    fn drop(&mut self) {
        self.cleanup_through_cri();
        self.cleanup_by_force();
    }
}

// ---------------------------------------------------------------------------------
// Output

struct Result1 {
    side: &'static str,
    mode: &'static str,
    round: Round,
}

fn print_results(n: usize, results: &[Result1]) {
    println!(
        "RunPodSandbox / StopPodSandbox / RemovePodSandbox, {n} pods, bridge + host-local (ipMasq); ms as the client sees each RPC"
    );
    println!(
        "{:<16} {:>8} {:>8} {:>8} {:>8} {:>8} {:>8} {:>8}",
        "", "Run p50", "Run p95", "Stop p50", "Stop p95", "Rm p50", "Rm p95", "pods/s"
    );
    for r in results {
        println!(
            "{:<16} {:>8.1} {:>8.1} {:>8.1} {:>8.1} {:>8.1} {:>8.1} {:>8.1}",
            format!("{} {}", r.side, r.mode),
            pct(&r.round.run, 0.5),
            pct(&r.round.run, 0.95),
            pct(&r.round.stop, 0.5),
            pct(&r.round.stop, 0.95),
            pct(&r.round.remove, 0.5),
            pct(&r.round.remove, 0.95),
            r.round.pods_per_sec()
        );
    }
}

fn print_mem(n: usize, rows: &[(&'static str, Mem, PodMem)]) {
    println!("memory, KiB (per pod: median over the {n} pods up in the seq round)");
    println!(
        "{:<16} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9}",
        "", "dmn idle", "dmn+pods", "dmn PSS", "pause", "pause PSS", "shim", "shim PSS", "pod PSS"
    );
    for (name, idle, m) in rows {
        println!(
            "{:<16} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9}",
            name,
            idle.rss,
            m.daemon.rss,
            m.daemon.pss,
            m.pause.rss,
            m.pause.pss,
            m.shim.rss,
            m.shim.pss,
            (m.pause + m.shim).pss
        );
    }
}

/// Word `word` of the first line a tool prints (its version), or `?`.
fn tool_version(cmd: &[&str], word: usize) -> String {
    let out = crust_e2e::run(Command::new(cmd[0]).args(&cmd[1..]));
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .next()
        .and_then(|l| l.split_whitespace().nth(word))
        .unwrap_or("?")
        .to_string()
}

// ---------------------------------------------------------------------------------

fn main() {
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    if !require_root(&["ip", "nsenter", "iptables", "sha256sum"]) {
        return;
    }
    let n: usize = std::env::var("BENCH_N")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(50);
    assert!(
        (1..=250).contains(&n),
        "BENCH_N must be 1..=250 (a /24 per daemon)"
    );
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();

    // crustd, with the same conflist as containerd gets.
    let crust = Crustd::start_with(Options {
        cni_conf: false,
        subnet: 91,
        // The harness runs crustd at debug level (one line per RPC): a little against
        // crust, if anything.
        extra_args: vec![],
    });
    std::fs::write(
        crust.conf_dir.path().join("10-bench.conflist"),
        conflist("cni0", 91, crust.ipam_data.path()),
    )
    .unwrap();
    rt.block_on(wait_ready(&crust.socket, Duration::from_secs(20)))
        .unwrap_or_else(|e| panic!("crustd: {e}\n{}", crust.log_text()));
    let crust_side = Side {
        name: "crust",
        socket: crust.socket.clone(),
        daemon_pid: crust.pid().unwrap() as i32,
        cgroup_parent: "bench".into(),
        has_shim: false,
        ids_seen: Arc::default(),
    };

    let mut ctrd = Containerd::new(92);
    let ctrd_side = match rt.block_on(ctrd.start()) {
        Ok(()) => Some(ctrd.side()),
        Err(e) => {
            println!("\n!!!!! containerd SKIPPED: {e}\n!!!!! measuring crustd alone\n");
            None
        }
    };

    let mut sides: Vec<&Side> = vec![&crust_side];
    sides.extend(ctrd_side.as_ref());

    // Warm up: the first pod makes the bridge and pages in the binaries.
    let mut skip_ctrd: Option<String> = None;
    for s in &sides {
        let r = rt.block_on(round(s, &format!("warm-{}", s.name), 2, 1, false));
        match (s.has_shim, r) {
            (_, Ok(_)) => {}
            (false, Err(e)) => panic!("crustd warm-up: {e}\n{}", crust.log_text()),
            (true, Err(e)) => skip_ctrd = Some(ctrd.failure(&format!("warm-up: {e}"))),
        }
    }
    let idle: Vec<Mem> = sides
        .iter()
        .map(|s| mem_of(s.daemon_pid).unwrap_or_default())
        .collect();

    let mut results = Vec::new();
    let mut mems = Vec::new();
    for (mode, par) in [("seq", 1), ("x10", CONCURRENCY)] {
        for (k, s) in sides.iter().enumerate() {
            if s.has_shim && skip_ctrd.is_some() {
                continue;
            }
            let tag = format!("{}-{mode}", s.name);
            match rt.block_on(round(s, &tag, n, par, mode == "seq")) {
                Ok((r, m)) => {
                    if let Some(m) = m {
                        mems.push((s.name, idle[k], m));
                    }
                    results.push(Result1 {
                        side: s.name,
                        mode,
                        round: r,
                    });
                }
                Err(e) if !s.has_shim => panic!("crustd {mode}: {e}\n{}", crust.log_text()),
                Err(e) => skip_ctrd = Some(ctrd.failure(&format!("{mode} round: {e}"))),
            }
        }
    }

    println!();
    if ctrd_side.is_some() {
        println!(
            "containerd {} + runc {}; its sandbox image {PAUSE_IMAGE} is crust-pause, the binary crustd runs",
            tool_version(&["containerd", "--version"], 2),
            tool_version(&["runc", "--version"], 2),
        );
    }
    print_results(n, &results);
    print_mem(n, &mems);
    if let Some(e) = &skip_ctrd {
        println!("!!!!! containerd dropped from the comparison: {e}");
    }
    let get = |side: &str, mode: &str| {
        results
            .iter()
            .find(|r| r.side == side && r.mode == mode)
            .map(|r| &r.round)
    };
    for mode in ["seq", "x10"] {
        let (Some(c), Some(d)) = (get("crust", mode), get("containerd", mode)) else {
            continue;
        };
        let r = |f: &dyn Fn(&Round) -> f64| f(c) / f(d);
        println!(
            "crust/containerd {mode}: Run p50 {:.2} (target < 0.20)  Stop p50 {:.2}  Remove p50 {:.2}  pods/s {:.1}x",
            r(&|x| pct(&x.run, 0.5)),
            r(&|x| pct(&x.stop, 0.5)),
            r(&|x| pct(&x.remove, 0.5)),
            r(&|x| x.pods_per_sec()),
        );
    }
    if let (Some(c), Some(d)) = (
        mems.iter().find(|m| m.0 == "crust"),
        mems.iter().find(|m| m.0 == "containerd"),
    ) {
        let per_pod = |m: &PodMem| m.pause + m.shim;
        println!(
            "crust/containerd memory: daemon RSS with pods {:.2}  per pod RSS {:.3}  per pod PSS {:.3}  ({} shims for {n} pods)",
            c.2.daemon.rss as f64 / d.2.daemon.rss.max(1) as f64,
            per_pod(&c.2).rss as f64 / per_pod(&d.2).rss.max(1) as f64,
            per_pod(&c.2).pss as f64 / per_pod(&d.2).pss.max(1) as f64,
            d.2.shims,
        );
    }
    if let Some(c) = mems.iter().find(|m| m.0 == "crust") {
        println!(
            "crust pause: {} KiB resident (target < 512 KiB)",
            c.2.pause.rss
        );
    }
    drop(ctrd);
    drop(crust);
}
