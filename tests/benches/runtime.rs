//! The runtimes alone, side by side in one run (issue 15): three configurations behind the
//! same in-process CRI client (one tonic connection per daemon, as the kubelet has) —
//!
//! - `containerd`: containerd 1.6 + runc with the reference CNI plugins (`/usr/lib/cni`
//!   `bridge`, `host-local`, `portmap`);
//! - `crust`: crustd with the very same reference plugins and the same conflist, so the
//!   ratio of these two rows is the runtimes' alone;
//! - `crust-own`: crustd with crust's own `bridge`, `host-local` and `portmap`, as a
//!   node runs it.
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
//! Where crust's time goes: crustd logs each call's steps at debug, cumulative from the
//! call's start ("run phases", "create phases" and the executor's "create steps", "exec
//! phases" and "exec steps", "stop phases" and "stop work phases", "remove phases"); the
//! seq phase's lines give a table per kind, the p50 of each step's own time, so each
//! millisecond left has a name. StopPodSandbox waits for the containers' ends while it
//! stops the pause and runs CNI DEL, so its "work" step holds both, and the pause and
//! DEL overlap too ("cni" is DEL's time beyond the pause's).
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
#[path = "runtime/kubelet.rs"]
mod kubelet;
#[path = "runtime/measure.rs"]
mod measure;
#[path = "runtime/report.rs"]
mod report;

use cgroups::{CgroupManager, CgroupPath, Hierarchy};
use common::*;
use cri_api::*;
use crust_e2e::crustd::{Crustd, Options};
use crust_e2e::{bin_dir, require_root, TempDir};
use kubelet::*;
use measure::*;
use report::*;
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

// ---------------------------------------------------------------------------------

/// The commit the bench was built from: `CRUST_REVISION` (hack/vm-test sets it: the VM
/// runs the bench outside the work tree), else git's.
fn crust_revision() -> String {
    std::env::var("CRUST_REVISION").unwrap_or_else(|_| {
        crust_e2e::sh(&["git", "rev-parse", "--short", "HEAD"])
            .trim()
            .to_string()
    })
}

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
    let mut phases: Vec<(&'static str, Phases)> = Vec::new();
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
                if mode == "seq" {
                    phases.push((r.name, crustd_phases(&text)));
                }
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
        crust_revision(),
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
    phase_table(&mut rep, "seq", &phases);
    memory_table(&mut rep, &mems);

    // The targets.
    let seq = &latency[0].1;
    let t = |n: &str| &seq.iter().find(|x| x.0 == n).unwrap().1;
    let (d, c, o) = (t("containerd"), t("crust"), t("crust-own"));
    let mem = |n: &str| mems.iter().find(|x| x.0 == n).unwrap();
    let mut targets: Vec<(String, f64, f64)> = vec![(
        "RunPodSandbox, crust's plugins / containerd's reference".into(),
        p50(&o.run) / p50(&d.run),
        0.1,
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
            0.1,
        ),
        ("ExecSync".to_string(), p50(&c.exec) / p50(&d.exec), 0.05),
        (
            "StopPodSandbox, crust's plugins".to_string(),
            p50(&o.stop) / p50(&d.stop),
            0.08,
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
    rep.line("Targets (issue 30's for RunPodSandbox, Create+Start, ExecSync and StopPodSandbox; issue 15's for the rest), ratios crust/containerd of p50s (seq):");
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
