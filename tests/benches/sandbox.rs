//! RunPodSandbox, StopPodSandbox and RemovePodSandbox of `crustd` against containerd 1.6
//! with runc, on the same machine in one run, through the same CRI client (`cri-api`),
//! both with a `bridge` and `host-local` pod network (isGateway, ipMasq). Run as root
//! through `hack/bench.d/sandbox` (which installs containerd and runc and builds the release
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

mod common;

use common::*;
use cri_api::*;
use crust_e2e::crustd::{Crustd, Options};
use crust_e2e::require_root;
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tonic::transport::Channel;

type Client = RuntimeServiceClient<Channel>;

const CONCURRENCY: usize = 10;

// ---------------------------------------------------------------------------------
// Measurements (shared ones in `common`)

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
    println!("volatile state (crustd --state, containerd's state, runc --root) on tmpfs, as /run on a node");
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
        state_on_tmpfs: true,
        ..Default::default()
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
    let ctrd_side = match rt.block_on(ctrd.start(&[])) {
        Ok(()) => Some(Side {
            name: "containerd",
            socket: ctrd.socket.clone(),
            daemon_pid: ctrd.pid(),
            cgroup_parent: ctrd.cgroup_parent.clone(),
            has_shim: true,
            ids_seen: ctrd.pod_ids.clone(),
        }),
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
