//! The container path of `crustd` against containerd 1.6 with runc, on the same machine
//! in one run, through the same CRI client: in a running pod, CreateContainer,
//! StartContainer, ContainerStatus until EXITED, and RemoveContainer of a container
//! running `/bin/true`, `BENCH_N` times per daemon (default 50), one daemon after the
//! other for each iteration. Beside them, `runc run` and `crun run` of `/bin/true` on an
//! OCI bundle of the same root file system, ExecSync of `/bin/true` in a running
//! container, and the memory of a pod with two
//! long-running containers: crustd's pause and monitors against containerd's shim and
//! pause. Run as root through `hack/bench.d/container` (which installs containerd, runc
//! and crun and builds the release binaries first), or `cargo bench -p crust-e2e --bench
//! container`.
//!
//! The image is busybox-static (`/bin/busybox` and its `true`, `sh` and `sleep`
//! applets), written here as an OCI layout: imported into crustd's image store, and as
//! an OCI archive of the same layout into containerd with `ctr images import`, so the
//! bench runs offline. Both daemons run in node namespaces of their own with the same
//! bridge + host-local conflist (see `sandbox.rs` and `common`), pods and containers
//! under this process's cgroup. The containers are configured as the kubelet sends
//! them: the pod's network and IPC namespaces, a PID namespace of their own, a CRI log
//! file under the pod's `log_directory`, a termination-log mount, the kubelet's
//! labels, annotations, masked and read-only paths.
//!
//! Latency is each RPC's round trip as the client sees it; "exited" is from
//! StartContainer's answer until ContainerStatus first says EXITED (polled every
//! millisecond); a cycle is all four. If containerd cannot be started here, the bench
//! says why and measures crustd alone; likewise for a runtime that cannot run a bundle.
//! Everything is cleaned up on drop, so also on panic.

mod common;

use common::*;
use cri_api::*;
use crust_e2e::crustd::{Crustd, Options};
use crust_e2e::{busybox_rootfs, require_root, unique, which, TempDir};
use std::collections::{BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use tonic::transport::Channel;

type Client = RuntimeServiceClient<Channel>;

/// How long a `/bin/true` container may take to be seen EXITED.
const EXIT_TIMEOUT: Duration = Duration::from_secs(20);
const WARM_UP: usize = 3;

// ---------------------------------------------------------------------------------
// The CRI side, the same for both daemons

/// One daemon as the bench sees it.
struct Side {
    name: &'static str,
    socket: PathBuf,
    daemon_pid: i32,
    cgroup_parent: String,
    /// The pods' `log_directory`s go below this.
    logs: PathBuf,
    /// Host files mounted as `/dev/termination-log`, one per container, as the kubelet does.
    term_logs: PathBuf,
}

struct Pod {
    id: String,
    config: PodSandboxConfig,
}

fn pod_config(name: &str, cgroup_parent: &str, log_directory: &Path) -> PodSandboxConfig {
    PodSandboxConfig {
        metadata: Some(PodSandboxMetadata {
            name: name.into(),
            uid: format!("uid-{name}"),
            namespace: "bench".into(),
            attempt: 0,
        }),
        hostname: name.into(),
        log_directory: log_directory.display().to_string(),
        labels: HashMap::from([
            ("app".to_string(), "bench".to_string()),
            ("io.kubernetes.pod.name".to_string(), name.to_string()),
            (
                "io.kubernetes.pod.namespace".to_string(),
                "bench".to_string(),
            ),
            ("io.kubernetes.pod.uid".to_string(), format!("uid-{name}")),
        ]),
        linux: Some(LinuxPodSandboxConfig {
            cgroup_parent: cgroup_parent.into(),
            security_context: Some(LinuxSandboxSecurityContext {
                namespace_options: Some(namespaces()),
                ..Default::default()
            }),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// What the kubelet sends for an ordinary pod: network and IPC of the pod, a PID
/// namespace per container.
fn namespaces() -> NamespaceOption {
    NamespaceOption {
        network: NamespaceMode::Pod as i32,
        pid: NamespaceMode::Container as i32,
        ipc: NamespaceMode::Pod as i32,
        ..Default::default()
    }
}

/// A container as the kubelet configures one (BestEffort, no seccomp profile: the
/// kubelet's default), running `cmd`.
fn container_config(name: &str, cmd: &[&str], term_log: &Path) -> ContainerConfig {
    ContainerConfig {
        metadata: Some(ContainerMetadata {
            name: name.into(),
            attempt: 0,
        }),
        image: Some(ImageSpec {
            image: IMAGE.into(),
            ..Default::default()
        }),
        command: cmd.iter().map(|s| s.to_string()).collect(),
        envs: [
            ("KUBERNETES_SERVICE_HOST", "10.96.0.1"),
            ("KUBERNETES_SERVICE_PORT", "443"),
            ("KUBERNETES_PORT", "tcp://10.96.0.1:443"),
        ]
        .iter()
        .map(|(k, v)| KeyValue {
            key: k.to_string(),
            value: v.to_string(),
        })
        .collect(),
        mounts: vec![Mount {
            container_path: "/dev/termination-log".into(),
            host_path: term_log.display().to_string(),
            ..Default::default()
        }],
        labels: HashMap::from([("io.kubernetes.container.name".to_string(), name.to_string())]),
        annotations: HashMap::from([
            ("io.kubernetes.container.hash".to_string(), "1".to_string()),
            (
                "io.kubernetes.container.terminationMessagePath".to_string(),
                "/dev/termination-log".to_string(),
            ),
        ]),
        log_path: format!("{name}/0.log"),
        linux: Some(LinuxContainerConfig {
            resources: Some(LinuxContainerResources {
                cpu_period: 100_000,
                cpu_shares: 2,
                oom_score_adj: 1000,
                ..Default::default()
            }),
            security_context: Some(LinuxContainerSecurityContext {
                namespace_options: Some(namespaces()),
                masked_paths: KUBELET_MASKED_PATHS.iter().map(|s| s.to_string()).collect(),
                readonly_paths: KUBELET_READONLY_PATHS
                    .iter()
                    .map(|s| s.to_string())
                    .collect(),
                ..Default::default()
            }),
        }),
        ..Default::default()
    }
}

async fn run_pod(side: &Side, c: &mut Client, name: &str) -> Result<Pod, String> {
    let logs = side.logs.join(name);
    std::fs::create_dir_all(&logs).unwrap();
    let config = pod_config(name, &side.cgroup_parent, &logs);
    let r = rpc(
        "RunPodSandbox",
        c.run_pod_sandbox(RunPodSandboxRequest {
            config: Some(config.clone()),
            runtime_handler: String::new(),
        }),
    )
    .await?;
    Ok(Pod {
        id: r.pod_sandbox_id,
        config,
    })
}

async fn remove_pod(c: &mut Client, id: &str) -> Result<(), String> {
    rpc(
        "StopPodSandbox",
        c.stop_pod_sandbox(StopPodSandboxRequest {
            pod_sandbox_id: id.into(),
        }),
    )
    .await?;
    rpc(
        "RemovePodSandbox",
        c.remove_pod_sandbox(RemovePodSandboxRequest {
            pod_sandbox_id: id.into(),
        }),
    )
    .await?;
    Ok(())
}

async fn create(
    side: &Side,
    c: &mut Client,
    pod: &Pod,
    name: &str,
    cmd: &[&str],
) -> Result<String, String> {
    let term_log = side.term_logs.join(unique("t"));
    std::fs::write(&term_log, b"").unwrap();
    let r = rpc(
        "CreateContainer",
        c.create_container(CreateContainerRequest {
            pod_sandbox_id: pod.id.clone(),
            config: Some(container_config(name, cmd, &term_log)),
            sandbox_config: Some(pod.config.clone()),
        }),
    )
    .await?;
    Ok(r.container_id)
}

/// One Create + Start + wait + Remove.
#[derive(Clone, Copy)]
struct Cycle {
    create: Duration,
    start: Duration,
    exited: Duration,
    remove: Duration,
}

async fn cycle(side: &Side, c: &mut Client, pod: &Pod, name: &str) -> Result<Cycle, String> {
    let t0 = Instant::now();
    let id = create(side, c, pod, name, &["/bin/true"]).await?;
    let t1 = Instant::now();
    rpc(
        "StartContainer",
        c.start_container(StartContainerRequest {
            container_id: id.clone(),
        }),
    )
    .await?;
    let t2 = Instant::now();
    loop {
        let st = rpc(
            "ContainerStatus",
            c.container_status(ContainerStatusRequest {
                container_id: id.clone(),
                verbose: false,
            }),
        )
        .await?
        .status
        .ok_or_else(|| format!("ContainerStatus of {id}: no status"))?;
        if st.state == ContainerState::ContainerExited as i32 {
            if st.exit_code != 0 {
                return Err(format!(
                    "{name} ({id}) exited with {} ({} {})",
                    st.exit_code, st.reason, st.message
                ));
            }
            break;
        }
        if t2.elapsed() > EXIT_TIMEOUT {
            return Err(format!(
                "{name} ({id}) not EXITED after {EXIT_TIMEOUT:?}: {st:?}"
            ));
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    let t3 = Instant::now();
    rpc(
        "RemoveContainer",
        c.remove_container(RemoveContainerRequest { container_id: id }),
    )
    .await?;
    let t4 = Instant::now();
    Ok(Cycle {
        create: t1 - t0,
        start: t2 - t1,
        exited: t3 - t2,
        remove: t4 - t3,
    })
}

/// ExecSync of `/bin/true` in a running `sleep` container, `n` times: each round trip.
async fn exec_syncs(
    side: &Side,
    c: &mut Client,
    pod: &Pod,
    n: usize,
) -> Result<Vec<Duration>, String> {
    let id = create(side, c, pod, "exec-target", &["/bin/sleep", "1000"]).await?;
    rpc(
        "StartContainer",
        c.start_container(StartContainerRequest {
            container_id: id.clone(),
        }),
    )
    .await?;
    let mut times = Vec::new();
    for i in 0..n + WARM_UP {
        let t = Instant::now();
        let r = rpc(
            "ExecSync",
            c.exec_sync(ExecSyncRequest {
                container_id: id.clone(),
                cmd: vec!["/bin/true".into()],
                timeout: 10,
            }),
        )
        .await?;
        if r.exit_code != 0 {
            return Err(format!("ExecSync of true exited {}", r.exit_code));
        }
        if i >= WARM_UP {
            times.push(t.elapsed());
        }
    }
    let _ = c
        .stop_container(StopContainerRequest {
            container_id: id.clone(),
            timeout: 0,
        })
        .await;
    let _ = c
        .remove_container(RemoveContainerRequest { container_id: id })
        .await;
    Ok(times)
}

/// One process of a pod's overhead, as measured.
struct Proc {
    role: &'static str,
    pid: i32,
    comm: String,
    mem: Mem,
}

/// A pod with two `sleep` containers: the memory of its pause process and of the
/// containers' parents (crust-monitor, or containerd's shim).
async fn pod_memory(side: &Side, c: &mut Client) -> Result<Vec<Proc>, String> {
    let pod = run_pod(side, c, &format!("mem-{}", side.name)).await?;
    let mut out = Vec::new();
    let result = async {
        let mut ctrs = Vec::new();
        for k in 0..2 {
            let id = create(
                side,
                c,
                &pod,
                &format!("sleep-{k}"),
                &["/bin/sleep", "3600"],
            )
            .await?;
            rpc(
                "StartContainer",
                c.start_container(StartContainerRequest {
                    container_id: id.clone(),
                }),
            )
            .await?;
            ctrs.push(id);
        }
        // Let the processes settle (a shim's or monitor's first page faults).
        tokio::time::sleep(Duration::from_millis(300)).await;
        let st = rpc(
            "PodSandboxStatus",
            c.pod_sandbox_status(PodSandboxStatusRequest {
                pod_sandbox_id: pod.id.clone(),
                verbose: true,
            }),
        )
        .await?;
        let pause = info_pid(&st.info, &format!("sandbox {}", pod.id))?;
        let mut seen = BTreeSet::from([pause]);
        out.push(Proc {
            role: "pause",
            pid: pause,
            comm: comm_of(pause),
            mem: mem_of(pause).ok_or_else(|| format!("pause {pause} is gone"))?,
        });
        // containerd's shim is the pause's parent too; crust's pause has no per-pod parent.
        let mut parents = Vec::new();
        if let Some(pp) = ppid_of(pause) {
            if comm_of(pp).starts_with("containerd-shim") {
                parents.push(pp);
            }
        }
        for id in &ctrs {
            let st = rpc(
                "ContainerStatus",
                c.container_status(ContainerStatusRequest {
                    container_id: id.clone(),
                    verbose: true,
                }),
            )
            .await?;
            let state = st.status.as_ref().map(|s| s.state);
            if state != Some(ContainerState::ContainerRunning as i32) {
                return Err(format!("container {id} is not RUNNING: {:?}", st.status));
            }
            let pid = info_pid(&st.info, &format!("container {id}"))?;
            parents.push(ppid_of(pid).ok_or_else(|| format!("no parent of {pid}"))?);
        }
        for p in parents {
            if seen.insert(p) {
                let comm = comm_of(p);
                out.push(Proc {
                    role: if comm.starts_with("containerd-shim") {
                        "shim"
                    } else {
                        "monitor"
                    },
                    pid: p,
                    comm,
                    mem: mem_of(p).ok_or_else(|| format!("process {p} is gone"))?,
                });
            }
        }
        Ok::<_, String>(())
    }
    .await;
    let removed = remove_pod(c, &pod.id).await;
    result?;
    removed?;
    Ok(out)
}

// ---------------------------------------------------------------------------------
// runc run and crun run of /bin/true on a bundle of the same root file system

struct OciRuntimes {
    dir: TempDir,
    /// The runtimes' `--root` dirs, on a tmpfs as `/run/runc` is on a node.
    run: TempDir,
    /// The cgroup (every hierarchy) the bundles' containers go below.
    cgroup_parent: String,
}

impl OciRuntimes {
    fn new() -> OciRuntimes {
        let dir = TempDir::new("oci");
        busybox_rootfs(&dir.path().join("rootfs"), APPLETS);
        for d in ["dev", "proc", "sys", "tmp", "etc"] {
            std::fs::create_dir_all(dir.path().join("rootfs").join(d)).unwrap();
        }
        OciRuntimes {
            dir,
            run: TempDir::tmpfs("ocirun"),
            cgroup_parent: format!("{}/{}", own_cgroup_base(), unique("crust-bench-oci-")),
        }
    }

    /// A bundle for `runtime` made from `runc spec` (its namespaces, mounts and
    /// capabilities), running `/bin/true` without a terminal on the shared rootfs.
    fn bundle(&self, runtime: &str) -> Result<PathBuf, String> {
        let b = self.dir.path().join(format!("bundle-{runtime}"));
        std::fs::create_dir_all(&b).unwrap();
        let out = crust_e2e::run(Command::new("runc").arg("spec").arg("--bundle").arg(&b));
        if !out.status.success() {
            return Err(format!(
                "runc spec: {}",
                String::from_utf8_lossy(&out.stderr).trim()
            ));
        }
        let path = b.join("config.json");
        let mut spec: serde_json::Value =
            serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
        spec["process"]["terminal"] = false.into();
        spec["process"]["args"] = serde_json::json!(["/bin/true"]);
        spec["root"]["path"] = self.dir.path().join("rootfs").display().to_string().into();
        spec["linux"]["cgroupsPath"] = format!("{}/{runtime}", self.cgroup_parent).into();
        std::fs::write(&path, serde_json::to_vec_pretty(&spec).unwrap()).unwrap();
        std::fs::create_dir_all(self.run.path().join(format!("state-{runtime}"))).unwrap();
        Ok(b)
    }

    /// One `RUNTIME run` of the bundle, timed from spawn to exit. With `hide_unified`
    /// the runtime is started from a thread in a mount namespace of its own without
    /// the hybrid layout's cgroup2 mount (`/sys/fs/cgroup/unified`), so it sees plain
    /// cgroup v1 as runc uses it here.
    fn run(
        &self,
        runtime: &str,
        bundle: &Path,
        id: &str,
        hide_unified: bool,
    ) -> Result<Duration, String> {
        let state = self.run.path().join(format!("state-{runtime}"));
        let mut cmd = Command::new(runtime);
        cmd.arg("--root")
            .arg(&state)
            .arg("run")
            .arg("--bundle")
            .arg(bundle)
            .arg(id)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        let (out, d) = std::thread::scope(|s| {
            s.spawn(|| {
                if hide_unified {
                    hide_cgroup2_mount()?;
                }
                let t = Instant::now();
                let out = cmd
                    .output()
                    .map_err(|e| format!("spawning {runtime}: {e}"))?;
                Ok::<_, String>((out, t.elapsed()))
            })
            .join()
            .unwrap()
        })?;
        if !out.status.success() {
            let _ = Command::new(runtime)
                .arg("--root")
                .arg(&state)
                .args(["delete", "--force", id])
                .stderr(Stdio::null())
                .status();
            return Err(format!(
                "`{runtime} run` {}: {}",
                out.status,
                String::from_utf8_lossy(&out.stderr).trim()
            ));
        }
        Ok(d)
    }
}

/// Moves the calling thread (made for this, it ends after) into a mount namespace of its
/// own where `/sys/fs/cgroup/unified` is unmounted; the host's mounts are untouched.
fn hide_cgroup2_mount() -> Result<(), String> {
    let err = |what: &str| format!("{what}: {}", std::io::Error::last_os_error());
    // SAFETY: unshare of this thread's mount namespace (it has its own fs struct after).
    if unsafe { libc::unshare(libc::CLONE_NEWNS) } != 0 {
        return Err(err("unshare(CLONE_NEWNS)"));
    }
    let root = c"/";
    let unified = c"/sys/fs/cgroup/unified";
    // SAFETY: changing propagation and unmounting in the private namespace just made.
    unsafe {
        if libc::mount(
            std::ptr::null(),
            root.as_ptr(),
            std::ptr::null(),
            libc::MS_REC | libc::MS_SLAVE,
            std::ptr::null(),
        ) != 0
        {
            return Err(err("making / a slave mount"));
        }
        if libc::umount2(unified.as_ptr(), libc::MNT_DETACH) != 0 {
            return Err(err("unmounting /sys/fs/cgroup/unified"));
        }
    }
    Ok(())
}

impl Drop for OciRuntimes {
    fn drop(&mut self) {
        kill_cgroup_tree(&self.cgroup_parent);
    }
}

/// How one OCI runtime fared.
struct OciRun {
    runtime: &'static str,
    times: Result<Vec<Duration>, String>,
    /// Why it ran with the cgroup2 mount hidden (it refused the hybrid layout), if it did.
    hidden_because: Option<String>,
}

/// `runc run` and `crun run`, `n` times each, alternating; a runtime that is missing
/// or fails is reported with why. One that refuses the hybrid cgroup layout is run again
/// with the cgroup2 mount hidden from it, and says so.
fn oci_runs(n: usize) -> Vec<OciRun> {
    let oci = OciRuntimes::new();
    let mut out = Vec::new();
    let mut bundles = Vec::new();
    for rt in ["runc", "crun"] {
        let mut r = OciRun {
            runtime: rt,
            times: Ok(Vec::new()),
            hidden_because: None,
        };
        let b = if which(rt).is_none() {
            Err(format!("`{rt}` not found (apt-get install -y {rt})"))
        } else {
            oci.bundle(rt)
        };
        // One untimed run pages the runtime in, and finds out whether it works here.
        let b = b.and_then(|b| match oci.run(rt, &b, &format!("warm-{rt}"), false) {
            Ok(_) => Ok(b),
            Err(e) if e.contains("hybrid") => {
                r.hidden_because = Some(e);
                oci.run(rt, &b, &format!("warm2-{rt}"), true).map(|_| b)
            }
            Err(e) => Err(e),
        });
        if let Err(e) = &b {
            r.times = Err(e.clone());
        }
        bundles.push(b);
        out.push(r);
    }
    for i in 0..n {
        for (k, r) in out.iter_mut().enumerate() {
            let (Ok(b), Ok(v)) = (&bundles[k], &mut r.times) else {
                continue;
            };
            match oci.run(r.runtime, b, &format!("b-{i}"), r.hidden_because.is_some()) {
                Ok(d) => v.push(d),
                Err(e) => r.times = Err(e),
            }
        }
    }
    out
}

// ---------------------------------------------------------------------------------
// Output

fn row(label: &str, c: &[Cycle]) {
    let col = |f: &dyn Fn(&Cycle) -> Duration| -> Vec<Duration> { c.iter().map(f).collect() };
    let cols = [
        col(&|x| x.create),
        col(&|x| x.start),
        col(&|x| x.create + x.start),
        col(&|x| x.exited),
        col(&|x| x.remove),
        col(&|x| x.create + x.start + x.exited + x.remove),
    ];
    let mut line = format!("{label:<18}");
    for v in &cols {
        line += &format!(" {:>7.1} {:>7.1}", pct(v, 0.5), pct(v, 0.95));
    }
    println!("{line}");
}

fn print_latency(n: usize, results: &[(&'static str, Vec<Cycle>)]) {
    println!(
        "Create + Start + wait for EXITED + Remove of a /bin/true container in a running pod, {n} times; ms as the client sees each RPC"
    );
    let mut head = format!("{:<18}", "");
    for h in [
        "Create",
        "Start",
        "Create+Start",
        "exited",
        "Remove",
        "cycle",
    ] {
        head += &format!(" {:>15}", h);
    }
    println!("{head}");
    let mut sub = format!("{:<18}", "");
    for _ in 0..6 {
        sub += &format!(" {:>7} {:>7}", "p50", "p95");
    }
    println!("{sub}");
    for (name, c) in results {
        row(name, c);
    }
}

fn print_oci(runs: &[OciRun]) {
    println!("`RUNTIME run` of /bin/true on a bundle of the same rootfs (runc spec's defaults: new net, pid, ipc, uts and mount namespaces), ms from spawn to exit");
    for r in runs {
        let label = format!("{} run", r.runtime);
        match &r.times {
            Ok(v) => println!(
                "{label:<18} p50 {:>6.1}  p95 {:>6.1}  ({} runs, {} {})",
                pct(v, 0.5),
                pct(v, 0.95),
                v.len(),
                r.runtime,
                tool_version(&[r.runtime, "--version"], 2),
            ),
            Err(e) => println!("{label:<18} FAILED: {e}"),
        }
        if let Some(why) = &r.hidden_because {
            println!(
                "{:<18} (refused this machine's hybrid cgroups: {why:?}; measured from a mount namespace without /sys/fs/cgroup/unified, on the v1 controllers as runc)",
                ""
            );
        }
    }
}

fn print_mem(rows: &[(&'static str, Mem, Vec<Proc>)]) {
    println!("memory of a pod with two `sleep` containers, KiB (Pss from smaps_rollup)");
    println!(
        "{:<18} {:>8} {:>8}   processes (pid comm rss/pss)",
        "", "RSS", "PSS"
    );
    for (name, daemon, procs) in rows {
        let total = procs.iter().fold(Mem::default(), |a, p| a + p.mem);
        let list: Vec<String> = procs
            .iter()
            .map(|p| {
                format!(
                    "{} {} {} {}/{}",
                    p.role, p.pid, p.comm, p.mem.rss, p.mem.pss
                )
            })
            .collect();
        println!(
            "{:<18} {:>8} {:>8}   {}",
            format!("{name} per pod"),
            total.rss,
            total.pss,
            list.join(", ")
        );
        println!(
            "{:<18} {:>8} {:>8}",
            format!("{name} daemon"),
            daemon.rss,
            daemon.pss
        );
    }
}

// ---------------------------------------------------------------------------------

fn main() {
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    if !require_root(&["ip", "nsenter", "iptables", "sha256sum", "busybox"]) {
        return;
    }
    let n: usize = std::env::var("BENCH_N")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(50);
    assert!(n >= 1, "BENCH_N must be at least 1");
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    let scratch = TempDir::new("bcimg");
    let layout = scratch.path().join("layout");
    busybox_layout(&layout);
    let logs = TempDir::new("bclogs");

    let crust = Crustd::start_with(Options {
        cni_conf: false,
        subnet: 93,
        extra_args: vec![],
        state_on_tmpfs: true,
        ..Default::default()
    });
    std::fs::write(
        crust.conf_dir.path().join("10-bench.conflist"),
        conflist("cni0", 93, crust.ipam_data.path()),
    )
    .unwrap();
    image::ImageStore::open(crust.root.path().join("images"), None)
        .and_then(|s| s.import(&layout))
        .unwrap_or_else(|e| panic!("importing busybox into crustd's store: {e}"));
    rt.block_on(wait_ready(&crust.socket, Duration::from_secs(20)))
        .unwrap_or_else(|e| panic!("crustd: {e}\n{}", crust.log_text()));
    let side = |name, socket: &Path, pid, parent: &str| {
        let s = Side {
            name,
            socket: socket.to_path_buf(),
            daemon_pid: pid,
            cgroup_parent: parent.to_string(),
            logs: logs.path().join(name),
            term_logs: logs.path().join(format!("{name}-termination")),
        };
        std::fs::create_dir_all(&s.term_logs).unwrap();
        s
    };
    let crust_side = side("crust", &crust.socket, crust.pid().unwrap() as i32, "bench");

    let mut ctrd = Containerd::new(94);
    let archive = layout_archive(&layout, &scratch.path().join("busybox-oci.tar"));
    let ctrd_side = match rt.block_on(ctrd.start(&[(archive, IMAGE.to_string())])) {
        Ok(()) => Some(side(
            "containerd",
            &ctrd.socket,
            ctrd.pid(),
            &ctrd.cgroup_parent.clone(),
        )),
        Err(e) => {
            println!("\n!!!!! containerd SKIPPED: {e}\n!!!!! measuring crustd alone\n");
            None
        }
    };

    // containerd first: as in the sandbox bench, an odd first cycle (a cold cache) does
    // not count against crust; and it lets a broken containerd drop out before rounds.
    let mut sides: Vec<&Side> = ctrd_side.iter().collect();
    sides.push(&crust_side);
    let mut skip_ctrd: Option<String> = None;
    let mut clients = Vec::new();
    let mut pods = Vec::new();
    for s in &sides {
        let r = rt.block_on(async {
            let ch = cri_api::connect_unix(&s.socket)
                .await
                .map_err(|e| format!("connecting to {}: {e}", s.socket.display()))?;
            let mut c = RuntimeServiceClient::new(ch);
            let pod = run_pod(s, &mut c, &format!("bench-{}", s.name)).await?;
            if s.name == "containerd" {
                ctrd.pod_ids.lock().unwrap().push(pod.id.clone());
            }
            for w in 0..WARM_UP {
                cycle(s, &mut c, &pod, &format!("warm-{w}")).await?;
            }
            Ok::<_, String>((c, pod))
        });
        match r {
            Ok((c, pod)) => {
                clients.push(Some(c));
                pods.push(Some(pod));
            }
            Err(e) if s.name == "crust" => panic!("crustd warm-up: {e}\n{}", crust.log_text()),
            Err(e) => {
                skip_ctrd = Some(ctrd.failure(&format!("warm-up: {e}")));
                clients.push(None);
                pods.push(None);
            }
        }
    }

    let mut results: Vec<(&'static str, Vec<Cycle>)> =
        sides.iter().map(|s| (s.name, Vec::new())).collect();
    for i in 0..n {
        for (k, s) in sides.iter().enumerate() {
            let (Some(c), Some(pod)) = (clients[k].as_mut(), pods[k].as_ref()) else {
                continue;
            };
            match rt.block_on(cycle(s, c, pod, &format!("true-{i}"))) {
                Ok(cy) => results[k].1.push(cy),
                Err(e) if s.name == "crust" => {
                    panic!("crustd cycle {i}: {e}\n{}", crust.log_text())
                }
                Err(e) => {
                    skip_ctrd = Some(ctrd.failure(&format!("cycle {i}: {e}")));
                    clients[k] = None;
                }
            }
        }
    }

    let mut execs: Vec<(&'static str, Vec<Duration>)> = Vec::new();
    for (k, s) in sides.iter().enumerate() {
        let (Some(c), Some(pod)) = (clients[k].as_mut(), pods[k].as_ref()) else {
            continue;
        };
        match rt.block_on(exec_syncs(s, c, pod, n)) {
            Ok(v) => execs.push((s.name, v)),
            Err(e) if s.name == "crust" => panic!("crustd ExecSync: {e}\n{}", crust.log_text()),
            Err(e) => skip_ctrd = Some(ctrd.failure(&format!("ExecSync: {e}"))),
        }
    }

    let mut mems = Vec::new();
    for (k, s) in sides.iter().enumerate() {
        let Some(c) = clients[k].as_mut() else {
            continue;
        };
        let daemon = mem_of(s.daemon_pid).unwrap_or_default();
        match rt.block_on(pod_memory(s, c)) {
            Ok(procs) => mems.push((s.name, daemon, procs)),
            Err(e) if s.name == "crust" => panic!("crustd memory pod: {e}\n{}", crust.log_text()),
            Err(e) => skip_ctrd = Some(ctrd.failure(&format!("memory pod: {e}"))),
        }
    }
    for (k, pod) in pods.iter().enumerate() {
        if let (Some(c), Some(pod)) = (clients[k].as_mut(), pod) {
            let _ = rt.block_on(remove_pod(c, &pod.id));
        }
    }

    let oci = oci_runs(n);

    println!();
    if ctrd_side.is_some() {
        println!(
            "containerd {} + runc {}; image {IMAGE} (busybox-static), the same for both daemons; \
             volatile state (crustd --state, containerd's state, runc/crun --root) on tmpfs, as /run on a node",
            tool_version(&["containerd", "--version"], 2),
            tool_version(&["runc", "--version"], 2),
        );
    }
    results.retain(|(_, v)| !v.is_empty());
    print_latency(n, &results);
    println!("ExecSync of /bin/true in a running container, {n} times, ms");
    for (name, v) in &execs {
        println!(
            "{name:<18} p50 {:>7.1}  p95 {:>7.1}",
            pct(v, 0.5),
            pct(v, 0.95)
        );
    }
    if let [(_, d), (_, c)] = execs.as_slice() {
        println!(
            "crust/containerd ExecSync p50: {:.2}",
            pct(c, 0.5) / pct(d, 0.5)
        );
    }
    print_oci(&oci);
    print_mem(&mems);
    if let Some(e) = &skip_ctrd {
        println!("!!!!! containerd dropped from the comparison: {e}");
    }

    // The targets.
    let cs_p50 = |name: &str| {
        results.iter().find(|r| r.0 == name).map(|r| {
            let v: Vec<Duration> = r.1.iter().map(|c| c.create + c.start).collect();
            pct(&v, 0.5)
        })
    };
    let crust_cs = cs_p50("crust").unwrap_or(f64::NAN);
    if let Some(d) = cs_p50("containerd") {
        let p50 = |f: &dyn Fn(&Cycle) -> Duration, name: &str| {
            let v: Vec<Duration> = results
                .iter()
                .find(|r| r.0 == name)
                .map(|r| r.1.iter().map(f).collect())
                .unwrap_or_default();
            pct(&v, 0.5)
        };
        let ratio = |f: &dyn Fn(&Cycle) -> Duration| p50(f, "crust") / p50(f, "containerd");
        println!(
            "crust/containerd p50: Create {:.2}  Start {:.2}  Create+Start {:.2} (target < 0.20)  exited {:.2}  Remove {:.2}  cycle {:.2}",
            ratio(&|c| c.create),
            ratio(&|c| c.start),
            crust_cs / d,
            ratio(&|c| c.exited),
            ratio(&|c| c.remove),
            ratio(&|c| c.create + c.start + c.exited + c.remove),
        );
    }
    if let Some(Ok(v)) = oci.iter().find(|r| r.runtime == "crun").map(|r| &r.times) {
        println!(
            "crust Create+Start p50 {crust_cs:.1} ms vs crun run p50 {:.1} ms (target: below)",
            pct(v, 0.5)
        );
    }
    if let Some((_, _, procs)) = mems.iter().find(|m| m.0 == "crust") {
        let t = procs.iter().fold(Mem::default(), |a, p| a + p.mem);
        println!(
            "crust pause + 2 monitors: {} KiB resident (target < 3072), {} KiB PSS (target < 1024)",
            t.rss, t.pss
        );
    }
    drop(ctrd);
    drop(crust);
}
