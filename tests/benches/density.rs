//! Density and idle cost (issue 30): a node filled to its pod limit, the crustlet on
//! crustd at `--max-pods=250` against the real kubelet v1.28.7 on containerd + runc at
//! its default 110 and at 250, in one cluster on the same machine (tests/src/cluster/
//! with `Options::containerd = Kubelet`, each daemon in a memory cgroup of its own, the
//! reference CNI plugins on both). Run as root through `hack/bench.d/density` (release
//! binaries), or `cargo bench -p crust-e2e --bench density`.
//!
//! One visit per stack and limit, one at a time, the other node empty (order: the
//! kubelet at 110, the crustlet, the kubelet at 250; `BENCH_VISITS` picks some, e.g.
//! `crust-250,kubelet-250`); the agent is restarted with the visit's `--max-pods` and
//! its Node waited for until it reports that capacity. A visit:
//! 1. the node stack's memory with no pod, the median of 5 samples 2 s apart;
//! 2. a Deployment of busybox `sleep` pods (requests of 1m CPU and 4 MiB, pinned to the
//!    node) created with as many replicas as the node has room for; the time from its
//!    creation to the last pod Running with its container running, as a
//!    `kubectl get --watch` sees it, with the p50 and p99 of each pod's own
//!    creation-to-Running;
//! 3. `BENCH_SETTLE` seconds (default 30), then the memory again: per group (the agent;
//!    the runtime with its shims or monitors; the pauses) the RSS, anonymous memory and
//!    PSS from `/proc/<pid>/smaps_rollup`, and the agent's and the runtime's memory
//!    cgroup working set and anonymous memory (the shims and monitors stay in their
//!    runtime's cgroup; a pause is in its pod's cgroup with the containers, whose
//!    cgroup figures would count the containers' own memory, so the pauses have only
//!    their process figures). The per-pod cost is the stack's figure full less empty,
//!    divided by the pods;
//! 4. the CPU the idle stack spends over `BENCH_IDLE` seconds (default 300): utime +
//!    stime of the agent, the runtime, every shim or monitor and every pause (the
//!    containers' own `sleep`s left out, asleep on both sides);
//! 5. the Deployment scaled to 0: the time until the last pod is gone from the API,
//!    and until the node has no shim or monitor and no pause left.
//!
//! `BENCH_INSPECT=<shell command>` runs that command once the full stack's memory is
//! read, with `AGENT_PID` and `RUNTIME_PID` set (to look closer than smaps_rollup).
//!
//! Both nodes run all along (the empty one idles beside the visit, the same for every
//! visit). `BENCH_CRUST_MAX` and `BENCH_KUBELET_MAX` (comma list) change the limits.
//!
//! `BENCH_CNI=crust` runs crust's bridge and host-local on both nodes (containerd's CNI
//! directory then links to them, and to the reference plugins for the rest) instead of
//! the reference plugins (`reference`, the default): the same plugins on both sides
//! either way. A filled node spends most of crust's CPU in the plugins; which plugins
//! a node runs is its operator's choice, hence both.

mod stack;

use crust_e2e::cluster::{kube_bins, run_timeout, watch_events, Cluster, ContainerdFor, Options};
use crust_e2e::cluster::{CRUSTLET_NODE, CRUSTLET_TAINT, NODE};
use serde_json::{json, Value};
use stack::{cpu_with_children, idle_cpu, mib, pids_in, pids_of, running, sample_median};
use stack::{Daemon, Figures, Mem};
use std::collections::HashMap;
use std::process::Child;
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

const NS: &str = "density";

/// What the watch saw of each pod of the bench namespace.
#[derive(Default)]
struct Seen {
    /// When each pod was first seen, and when it was first Running.
    added: HashMap<String, Instant>,
    running: HashMap<String, Instant>,
    /// The pods the API still has.
    present: HashMap<String, String>,
    /// When the watch was last started again: the new one lists what is there, and a
    /// pod deleted in between is never seen DELETED, so `present` starts anew.
    relisted: Option<Instant>,
    /// When the watch last said anything: a watch silent for long while the bench waits
    /// for a change is started again (a connection can stall without kubectl exiting).
    last_event: Option<Instant>,
}

type Shared = Arc<(Mutex<Seen>, Condvar)>;

/// `kubectl get pods --watch` of the bench namespace, each event noted as it arrives.
fn watch(c: &Cluster, seen: Shared) -> Child {
    let args = [
        "-n",
        NS,
        "get",
        "pods",
        "--watch",
        "--output-watch-events",
        "-o",
        "json",
    ];
    watch_events(c.kubectl(&args), move |kind, p, now| {
        let Some(name) = p["metadata"]["name"].as_str() else {
            return;
        };
        let (m, cv) = &*seen;
        let mut s = m.lock().unwrap();
        s.last_event = Some(now);
        if kind == "DELETED" {
            s.present.remove(name);
        } else {
            let node = p["spec"]["nodeName"].as_str().unwrap_or_default();
            s.present.insert(name.to_string(), node.to_string());
            s.added.entry(name.to_string()).or_insert(now);
            if running(p) {
                s.running.entry(name.to_string()).or_insert(now);
            }
        }
        cv.notify_all();
    })
}

/// Waits (`limit` at most) until `done` holds of what the watch saw; a watch that ended
/// (kubectl exits when its connection drops) is started again.
fn wait(
    c: &Cluster,
    w: &mut Child,
    seen: &Shared,
    what: &str,
    limit: Duration,
    done: impl Fn(&Seen) -> bool,
) {
    let deadline = Instant::now() + limit;
    loop {
        {
            let (m, cv) = &**seen;
            let g = m.lock().unwrap();
            let listed = g
                .relisted
                .is_none_or(|t| t.elapsed() > Duration::from_secs(3));
            if listed && done(&g) {
                return;
            }
            let quiet = [g.last_event, g.relisted]
                .into_iter()
                .flatten()
                .max()
                .is_some_and(|t| t.elapsed() > Duration::from_secs(60));
            let (g, _) = cv.wait_timeout(g, Duration::from_millis(500)).unwrap();
            drop(g);
            if quiet {
                // Relisted below once it has exited; a pod still there is listed again.
                let _ = w.kill();
                let _ = w.wait();
            }
        }
        if w.try_wait().ok().flatten().is_some() {
            {
                let mut g = seen.0.lock().unwrap();
                g.present.clear();
                g.relisted = Some(Instant::now());
            }
            *w = watch(c, seen.clone());
        }
        if Instant::now() >= deadline {
            give_up(c, seen, &format!("{what}: not in {limit:?}"));
        }
    }
}

/// Ends a run that stalled with what tells why: the pods still seen, the daemons that
/// had exited, and the cluster's logs copied to `target/tmp/density-logs` (the cluster's
/// own directory goes with its teardown).
fn give_up(c: &Cluster, seen: &Shared, what: &str) -> ! {
    let dest = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("density-logs");
    let _ = std::fs::remove_dir_all(&dest);
    let _ = std::fs::create_dir_all(&dest);
    if let Ok(rd) = std::fs::read_dir(c.path("logs")) {
        for e in rd.flatten() {
            let _ = std::fs::copy(e.path(), dest.join(e.file_name()));
        }
    }
    let left: Vec<String> = {
        let g = seen.0.lock().unwrap();
        g.present.keys().take(10).cloned().collect()
    };
    if let Ok(out) = c.kubectl(&["get", "pods", "-A", "-o", "wide"]).output() {
        let text = String::from_utf8_lossy(&out.stdout);
        println!("{}", crust_e2e::tail(&text, 20));
    }
    panic!(
        "{what}; pods still seen (first 10): {left:?}; daemons exited: {:?}; logs in {}",
        c.exited_daemons(),
        dest.display()
    );
}

fn kubectl_ok(c: &Cluster, args: &[&str], stdin: Option<&Value>) {
    crust_e2e::cluster::run_ok(c.kubectl(args), stdin);
}

fn deployment(c: &Cluster, name: &str, node: &str, replicas: usize) -> Value {
    let mut spec = json!({
        "terminationGracePeriodSeconds": 1,
        "nodeSelector": {"kubernetes.io/hostname": node},
        "automountServiceAccountToken": false,
        "enableServiceLinks": false,
        "containers": [{
            "name": "main",
            "image": c.image,
            "imagePullPolicy": "IfNotPresent",
            "command": ["sleep", "36000"],
            "resources": {"requests": {"cpu": "1m", "memory": "4Mi"}},
        }],
    });
    if node == CRUSTLET_NODE {
        spec["tolerations"] =
            json!([{"key": CRUSTLET_TAINT, "operator": "Exists", "effect": "NoSchedule"}]);
    }
    json!({
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "namespace": NS},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": name}},
            "template": {"metadata": {"labels": {"app": name}}, "spec": spec},
        },
    })
}

/// The Node's `status.capacity.pods`, and how many pods not yet finished are bound to
/// it (in every namespace).
fn node_room(c: &Cluster, node: &str) -> (usize, usize) {
    let out = run_timeout(
        &mut c.kubectl(&["get", "node", node, "-o", "json"]),
        Duration::from_secs(20),
    );
    let n: Value = serde_json::from_slice(&out.stdout).unwrap_or_default();
    let cap = n["status"]["capacity"]["pods"]
        .as_str()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let sel = format!("spec.nodeName={node},status.phase!=Succeeded,status.phase!=Failed");
    let out = run_timeout(
        &mut c.kubectl(&["get", "pods", "-A", "--field-selector", &sel, "-o", "name"]),
        Duration::from_secs(20),
    );
    let used = String::from_utf8_lossy(&out.stdout).lines().count();
    (cap, used)
}

/// One stack at one pod limit.
#[derive(Clone, Copy)]
struct Visit {
    crust: bool,
    max: usize,
}

impl Visit {
    fn name(&self) -> String {
        if self.crust {
            format!("crustlet + crustd, max {}", self.max)
        } else {
            format!("kubelet + containerd, max {}", self.max)
        }
    }
    fn node(&self) -> &'static str {
        if self.crust {
            CRUSTLET_NODE
        } else {
            NODE
        }
    }
}

/// What a visit measured.
struct Result {
    visit: Visit,
    pods: usize,
    up: Duration,
    pod_p50: f64,
    pod_p99: f64,
    empty: Vec<Figures>,
    full: Vec<Figures>,
    /// CPU seconds over the scale-up: agent, runtime with its reaped children, shims or
    /// monitors (those there at the end, with what they reaped).
    up_cpu: [f64; 3],
    /// CPU seconds over the idle span: agent, runtime, its shims or monitors, pauses.
    idle: [f64; 4],
    gone_api: Duration,
    gone_node: Duration,
}

fn pct(v: &[f64], p: f64) -> f64 {
    let mut v = v.to_vec();
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    v[(((p / 100.0) * (v.len() as f64 - 1.0)).round() as usize).min(v.len() - 1)]
}

fn env_u64(key: &str, default: u64) -> u64 {
    std::env::var(key)
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(default)
}

fn main() {
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    if !crust_e2e::require_root(&stack::CLUSTER_TOOLS) {
        return;
    }
    let crust_max = env_u64("BENCH_CRUST_MAX", 250) as usize;
    let kubelet_max: Vec<usize> = std::env::var("BENCH_KUBELET_MAX")
        .unwrap_or_else(|_| "110,250".into())
        .split(',')
        .filter_map(|s| s.trim().parse().ok())
        .collect();
    // The kubelet at its default first, the crustlet, then the kubelet at the
    // crustlet's limit: the crustlet's visit between the kubelet's two.
    let mut visits: Vec<Visit> = vec![];
    let mut kubelet = kubelet_max.iter().map(|m| Visit {
        crust: false,
        max: *m,
    });
    visits.extend(kubelet.next());
    visits.push(Visit {
        crust: true,
        max: crust_max,
    });
    visits.extend(kubelet);
    if let Ok(pick) = std::env::var("BENCH_VISITS") {
        let want: Vec<&str> = pick.split(',').map(str::trim).collect();
        visits.retain(|v| {
            let tag = format!("{}-{}", if v.crust { "crust" } else { "kubelet" }, v.max);
            want.contains(&tag.as_str())
        });
    }
    let settle = Duration::from_secs(env_u64("BENCH_SETTLE", 30));
    let idle_span = Duration::from_secs(env_u64("BENCH_IDLE", 300));

    let bins = kube_bins().unwrap_or_else(|m| {
        panic!(
            "no {} (hack/deps unpacks the Kubernetes binaries)",
            m.join(", ")
        )
    });
    let crust_cni = match std::env::var("BENCH_CNI").as_deref() {
        Ok("crust") => true,
        Ok("reference") | Err(_) => false,
        Ok(other) => panic!("BENCH_CNI={other}: crust or reference"),
    };
    let plugins = if crust_cni {
        "crust's bridge and host-local"
    } else {
        "the reference CNI plugins"
    };
    let mut cni_dirs = vec![std::path::PathBuf::from("/usr/lib/cni")];
    if crust_cni {
        cni_dirs.insert(0, crust_e2e::bin_dir());
    }
    let signals = crust_e2e::block_signals();
    let started = Instant::now();
    let c = Cluster::start_with(
        bins,
        crust_e2e::bin("crustd"),
        cni_dirs,
        Options {
            containerd: Some(ContainerdFor::Kubelet),
            agent_cgroups: true,
            crustd_log: Some("info"),
            ..Options::default()
        },
    );
    let c = Arc::new(c);
    Cluster::teardown_on_signal(&c, signals, "density");
    c.wait_node_ready(Duration::from_secs(120));
    println!(
        "cluster up in {:.1}s: kubelet v1.28.7 + containerd + runc on {NODE}, crustlet + crustd on {CRUSTLET_NODE} ({plugins} for both)",
        started.elapsed().as_secs_f32()
    );
    kubectl_ok(
        &c,
        &["apply", "-f", "-"],
        Some(&json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}})),
    );
    let seen: Shared = Arc::new((Mutex::new(Seen::default()), Condvar::new()));
    let mut w = watch(&c, seen.clone());
    // The image on both nodes first (one pod each, gone before the visits).
    for (i, node) in [NODE, CRUSTLET_NODE].into_iter().enumerate() {
        let name = format!("warm-{i}");
        kubectl_ok(
            &c,
            &["apply", "-f", "-"],
            Some(&deployment(&c, &name, node, 1)),
        );
        wait(
            &c,
            &mut w,
            &seen,
            "the warm-up pod",
            Duration::from_secs(180),
            |s| {
                s.present
                    .keys()
                    .any(|p| p.starts_with(&format!("{name}-")) && s.running.contains_key(p))
            },
        );
        kubectl_ok(&c, &["-n", NS, "delete", "deployment", &name], None);
    }
    wait(
        &c,
        &mut w,
        &seen,
        "the warm-up pods gone",
        Duration::from_secs(120),
        |s| s.present.is_empty(),
    );

    let kubelet_pid = || c.kubelet_pid().expect("kubelet");
    let crustlet_pid = || c.crustlet_pid().expect("crustlet");
    let containerd_pid = c.containerd_pid().expect("containerd");
    let sock = c.containerd_socket.display().to_string();
    let state = c.path("crustlet-crust-state").display().to_string();
    let mut results = vec![];
    for v in visits.clone() {
        println!("=== {}", v.name());
        let flag = vec![format!("--max-pods={}", v.max)];
        if v.crust {
            c.stop_crustlet();
            c.start_crustlet_with(&flag);
        } else {
            c.stop_kubelet();
            c.start_kubelet_with(&flag);
        }
        let deadline = Instant::now() + Duration::from_secs(120);
        while node_room(&c, v.node()).0 != v.max {
            assert!(
                Instant::now() < deadline,
                "{} never reported {} pods",
                v.node(),
                v.max
            );
            std::thread::sleep(Duration::from_secs(1));
        }
        if !v.crust {
            c.wait_node_ready(Duration::from_secs(120));
        }
        // The agent's pid changes with each restart: read at each sample.
        let cgroup_root = if v.crust {
            c.crustlet_cgroup_root.clone()
        } else {
            c.cgroup_root.clone()
        };
        let (agent_cg, rt_cg) = if v.crust {
            ("crustlet", "crustlet-crustd")
        } else {
            ("kubelet", "containerd")
        };
        let root = cgroup_root.clone();
        let (sock, state, pause_state) = (sock.clone(), state.clone(), state.clone());
        let daemons = [
            Daemon {
                pids: Box::new(move || {
                    (
                        vec![if v.crust {
                            crustlet_pid()
                        } else {
                            kubelet_pid()
                        }],
                        vec![],
                    )
                }),
                cgroup: c.agent_cgroup(agent_cg),
            },
            Daemon {
                pids: Box::new(move || {
                    if v.crust {
                        (pids_of("crustd", &state), pids_of("crust-monitor", &state))
                    } else {
                        (
                            vec![containerd_pid],
                            pids_of("containerd-shim-runc-v2", &sock),
                        )
                    }
                }),
                cgroup: c.agent_cgroup(rt_cg),
            },
            Daemon {
                pids: Box::new(move || {
                    if v.crust {
                        // Run from this crustd's state dir: another cluster's are not.
                        (vec![], pids_of("crust-pause", &pause_state))
                    } else {
                        (vec![], pids_in("pause", &root))
                    }
                }),
                cgroup: None,
            },
        ];
        std::thread::sleep(Duration::from_secs(10));
        let empty = sample_median(&daemons, 5);

        let (_, used) = node_room(&c, v.node());
        let pods = v.max - used;
        let name = format!(
            "dense-{}-{}",
            if v.crust { "crust" } else { "kubelet" },
            v.max
        );
        // CPU of the agent and the runtime (with what they ran and reaped: CNI plugins,
        // runc under the shims) and of the shims or monitors, over the scale-up.
        let up_cpu = |d: &[Daemon]| -> [f64; 3] {
            let sum =
                |pids: &[u32]| -> f64 { pids.iter().filter_map(|p| cpu_with_children(*p)).sum() };
            let (agent, _) = (d[0].pids)();
            let (rt, helpers) = (d[1].pids)();
            [sum(&agent), sum(&rt), sum(&helpers)]
        };
        let cpu0 = up_cpu(&daemons);
        let t0 = Instant::now();
        kubectl_ok(
            &c,
            &["apply", "-f", "-"],
            Some(&deployment(&c, &name, v.node(), pods)),
        );
        let prefix = format!("{name}-");
        let mine = |s: &Seen| -> Vec<String> {
            s.present
                .keys()
                .filter(|p| p.starts_with(&prefix))
                .cloned()
                .collect()
        };
        wait(
            &c,
            &mut w,
            &seen,
            "every pod Running",
            Duration::from_secs(1200),
            |s| {
                let m = mine(s);
                m.len() == pods && m.iter().all(|p| s.running.contains_key(p))
            },
        );
        let (up, per_pod) = {
            let s = seen.0.lock().unwrap();
            let m = mine(&s);
            let last = m.iter().map(|p| s.running[p]).max().unwrap();
            let per: Vec<f64> = m
                .iter()
                .map(|p| (s.running[p] - s.added[p]).as_secs_f64())
                .collect();
            (last - t0, per)
        };
        let cpu1 = up_cpu(&daemons);
        let up_spent = [cpu1[0] - cpu0[0], cpu1[1] - cpu0[1], cpu1[2] - cpu0[2]];
        println!(
            "{pods} pods Running in {:.1} s; CPU meanwhile: agent {:.1} s, runtime and its children {:.1} s, shims or monitors {:.1} s",
            up.as_secs_f64(),
            up_spent[0],
            up_spent[1],
            up_spent[2]
        );
        std::thread::sleep(settle);
        let full = sample_median(&daemons, 5);
        if let Some(cmd) = std::env::var_os("BENCH_INSPECT") {
            let (rt, _) = (daemons[1].pids)();
            let (agent, _) = (daemons[0].pids)();
            let _ = std::process::Command::new("sh")
                .arg("-c")
                .arg(cmd)
                .env("AGENT_PID", agent.first().map_or(0, |p| *p).to_string())
                .env("RUNTIME_PID", rt.first().map_or(0, |p| *p).to_string())
                .status();
        }
        let spent = idle_cpu(&daemons, idle_span);
        let idle = [spent[0].0, spent[1].0, spent[1].1, spent[2].1];
        println!(
            "idle {} s: agent {:.2} s, runtime {:.2} s, shims/monitors {:.2} s, pauses {:.2} s",
            idle_span.as_secs(),
            idle[0],
            idle[1],
            idle[2],
            idle[3]
        );

        let t0 = Instant::now();
        kubectl_ok(
            &c,
            &["-n", NS, "scale", "deployment", &name, "--replicas=0"],
            None,
        );
        wait(
            &c,
            &mut w,
            &seen,
            "every pod gone",
            Duration::from_secs(1200),
            |s| mine(s).is_empty(),
        );
        let gone_api = t0.elapsed();
        let deadline = Instant::now() + Duration::from_secs(600);
        loop {
            let (_, helpers) = (daemons[1].pids)();
            let (_, pauses) = (daemons[2].pids)();
            if helpers.is_empty() && pauses.is_empty() {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "{} helpers and {} pauses left on {}",
                helpers.len(),
                pauses.len(),
                v.node()
            );
            std::thread::sleep(Duration::from_millis(200));
        }
        let gone_node = t0.elapsed();
        kubectl_ok(&c, &["-n", NS, "delete", "deployment", &name], None);
        println!(
            "scaled to 0: gone from the API in {:.1} s, from the node in {:.1} s",
            gone_api.as_secs_f64(),
            gone_node.as_secs_f64()
        );
        results.push(Result {
            visit: v,
            pods,
            up,
            up_cpu: up_spent,
            pod_p50: pct(&per_pod, 50.0),
            pod_p99: pct(&per_pod, 99.0),
            empty,
            full,
            idle,
            gone_api,
            gone_node,
        });
    }
    let _ = w.kill();
    let _ = w.wait();
    report(&results, idle_span, plugins);
    c.teardown();
}

/// The tables: density, memory, idle CPU; and the ratios of the crustlet's visit
/// against each of the kubelet's.
fn report(results: &[Result], idle_span: Duration, plugins: &str) {
    println!(
        "\n### Density: a Deployment filled to the node's pod limit ({plugins} on both nodes)"
    );
    println!("| stack | pods | all Running | pod p50 | pod p99 | CPU while they started: agent, runtime + children, shims or monitors | scaled to 0: gone from the API | gone from the node |");
    println!("| --- | --- | --- | --- | --- | --- | --- | --- |");
    for r in results {
        println!(
            "| {} | {} | {:.1} s | {:.1} s | {:.1} s | {:.1} s, {:.1} s, {:.1} s | {:.1} s | {:.1} s |",
            r.visit.name(),
            r.pods,
            r.up.as_secs_f64(),
            r.pod_p50,
            r.pod_p99,
            r.up_cpu[0],
            r.up_cpu[1],
            r.up_cpu[2],
            r.gone_api.as_secs_f64(),
            r.gone_node.as_secs_f64()
        );
    }
    let total = |f: &[Figures]| -> Mem { f.iter().fold(Mem::default(), |a, g| a.plus(g.total())) };
    let ws = |f: &[Figures]| -> u64 { f.iter().filter_map(|g| g.working_set()).sum() };
    let per_pod = |r: &Result, k: fn(&Mem) -> u64| -> f64 {
        (k(&total(&r.full)) as f64 - k(&total(&r.empty)) as f64) / r.pods as f64
    };
    let per_pod_ws = |r: &Result| (ws(&r.full) as f64 - ws(&r.empty) as f64) / r.pods as f64;
    // The kernel's part of the working set: every group's, or none (a cgroup whose kernel
    // does not say would leave a sum that compares with nothing).
    let kernel = |f: &[Figures]| -> Option<u64> {
        f.iter()
            .filter(|g| g.working_set().is_some())
            .map(|g| g.kernel)
            .sum()
    };
    let per_pod_kernel = |r: &Result| -> Option<f64> {
        Some((kernel(&r.full)? as f64 - kernel(&r.empty)? as f64) / r.pods as f64)
    };
    let kib_or_na = |k: Option<f64>| k.map_or("n/a".to_string(), |k| format!("{k:.0} KiB"));
    println!("\n### Memory of the node stack, full (agent + runtime + shims or monitors + pauses)");
    println!("| stack | processes | RSS | anonymous | PSS | agent + runtime cgroups' working set | of which kernel | per pod: anonymous | per pod: PSS | per pod: working set | per pod: kernel |");
    println!("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |");
    for r in results {
        let t = total(&r.full);
        let procs: u64 = r
            .full
            .iter()
            .map(|f| f.helpers_n + u64::from(f.main.rss > 0))
            .sum();
        println!(
            "| {} | {procs} | {} | {} | {} | {} | {} | {:.0} KiB | {:.0} KiB | {:.0} KiB | {} |",
            r.visit.name(),
            mib(t.rss),
            mib(t.anon),
            mib(t.pss),
            mib(ws(&r.full)),
            kernel(&r.full).map_or("n/a".to_string(), mib),
            per_pod(r, |m| m.anon),
            per_pod(r, |m| m.pss),
            per_pod_ws(r),
            kib_or_na(per_pod_kernel(r)),
        );
    }
    println!("\nper pod, by group (full less empty, divided by the pods): anonymous / PSS");
    for r in results {
        let groups = ["agent", "runtime", "shims or monitors", "pauses"];
        let figs = [
            (r.full[0].main, r.empty[0].main),
            (r.full[1].main, r.empty[1].main),
            (r.full[1].helpers, r.empty[1].helpers),
            (r.full[2].helpers, r.empty[2].helpers),
        ];
        let cells: Vec<String> = groups
            .iter()
            .zip(figs)
            .map(|(g, (f, e))| {
                let d = |a: u64, b: u64| (a as f64 - b as f64) / r.pods as f64;
                format!("{g} {:.0}/{:.0} KiB", d(f.anon, e.anon), d(f.pss, e.pss))
            })
            .collect();
        println!("  {}: {}", r.visit.name(), cells.join(", "));
    }
    println!(
        "\n### Idle: CPU of the full node stack over {} s (utime + stime)",
        idle_span.as_secs()
    );
    println!("| stack | agent | runtime | shims / monitors | pauses | the node stack | per pod per hour |");
    println!("| --- | --- | --- | --- | --- | --- | --- |");
    let stack_cpu = |r: &Result| r.idle.iter().sum::<f64>();
    for r in results {
        let s = stack_cpu(r);
        println!(
            "| {} | {:.2} s | {:.2} s | {:.2} s | {:.2} s | {:.2} s | {:.1} ms |",
            r.visit.name(),
            r.idle[0],
            r.idle[1],
            r.idle[2],
            r.idle[3],
            s,
            s / r.pods as f64 * 3600.0 / idle_span.as_secs_f64() * 1000.0
        );
    }
    let Some(crust) = results.iter().find(|r| r.visit.crust) else {
        return;
    };
    for k in results.iter().filter(|r| !r.visit.crust) {
        let same = if k.pods == crust.pods {
            "the same pod count"
        } else {
            "a different pod count: per-pod figures compare"
        };
        println!(
            "\ncrust/kubelet at max {} ({same}): time to all Running {:.2} (target <= 0.3 at the same count), gone from the node {:.2}; idle CPU of the stack {:.3} per pod {:.3} (target <= 0.1); per-pod memory anonymous {:.3}, PSS {:.3} (target <= 0.02), working set {:.3}",
            k.visit.max,
            crust.up.as_secs_f64() / k.up.as_secs_f64(),
            crust.gone_node.as_secs_f64() / k.gone_node.as_secs_f64(),
            stack_cpu(crust) / stack_cpu(k).max(1e-9),
            (stack_cpu(crust) / crust.pods as f64) / (stack_cpu(k) / k.pods as f64).max(1e-9),
            per_pod(crust, |m| m.anon) / per_pod(k, |m| m.anon).max(1e-9),
            per_pod(crust, |m| m.pss) / per_pod(k, |m| m.pss).max(1e-9),
            per_pod_ws(crust) / per_pod_ws(k).max(1e-9),
        );
        // The kernel objects of a pod (its network namespace and veth pair, the pause's
        // and each monitor's or shim's task) are paid whoever makes them: shown apart,
        // so that what the stacks' own code costs compares on its own.
        if let (Some(ck), Some(kk)) = (per_pod_kernel(crust), per_pod_kernel(k)) {
            println!(
                "  per-pod working set, kernel memory: crust {ck:.0} KiB, kubelet {kk:.0} KiB ({:.3}); the rest: {:.3}",
                ck / kk.max(1e-9),
                (per_pod_ws(crust) - ck) / (per_pod_ws(k) - kk).max(1e-9),
            );
        }
    }
}
