//! A Deployment spread over a cluster of nodes, scaled up and back to none: a fleet of
//! crust nodes (crustd and the crustlet) against the same fleet of the real kubelet
//! v1.28.7 on containerd 1.6 + runc (tests/src/fleet.rs: the same control plane, fabric,
//! CNI template and registry; one fleet up at a time), on the same machine. Run as root
//! through `hack/bench.d/fleet` (which builds the release binaries), or `cargo bench -p
//! crust-e2e --bench fleet`.
//!
//! Each visit brings a fleet up (`BENCH_FLEET_NODES`, default 3), pulls the image on
//! every node with a warm-up pod, then makes one Deployment of `BENCH_FLEET_PODS` (default
//! 50) replicas per node, spread by a topology constraint (`maxSkew` 1 per hostname, so
//! every node gets its share), and measures:
//! - **up**: from the Deployment's creation to its `availableReplicas` reaching all of
//!   them, as a watch of the Deployment sees it;
//! - **pod startup**: each pod from the watch event that shows it created to the one
//!   that shows it Running with its container running (p50, p99: the control plane's
//!   view, as Kubernetes' pod startup SLI, with the image already on the node);
//! - **down**: from scaling to 0 replicas to the watch's last pod deletion (the agents
//!   stopped every container and the pod objects are gone).
//!
//! The visits alternate: crust, containerd, containerd, crust, ... (`BENCH_ROUNDS`
//! pairs, default 2), and each kind's figures are the medians of its visits. Both fleets
//! use the reference CNI plugins of `/usr/lib/cni` unless `BENCH_CNI=crust`, which gives
//! the crust fleet crust's own. The pod is busybox's shell sleeping, leaving at once on
//! SIGTERM (a pod's time to go is then the node's, not a grace period's).

mod stack;

use crust_e2e::cluster::{kube_bins, run_timeout, watch_events};
use crust_e2e::fleet::{Flavour, Fleet};
use serde_json::{json, Value};
use stack::running;
use std::collections::HashMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Child;
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

const NS: &str = "bench";
const IMAGE: &str = "registry.k8s.io/e2e-test-images/busybox:1.29-4";
/// How long a scale-up or scale-down may take before the visit fails.
const LIMIT: Duration = Duration::from_secs(600);

/// What the watches saw, as they saw it.
#[derive(Default)]
struct Seen {
    /// Per pod: when it appeared, when it was Running, on which node.
    pods: HashMap<String, Pod>,
    /// When the Deployment's `availableReplicas` first reached each value.
    available: HashMap<i64, Instant>,
}

#[derive(Default, Clone)]
struct Pod {
    added: Option<Instant>,
    running: Option<Instant>,
    deleted: Option<Instant>,
    node: String,
}

type Shared = Arc<(Mutex<Seen>, Condvar)>;

/// `kubectl get KIND --watch` of the bench namespace, each event handed to `note` as it
/// arrives (with its arrival time).
fn watch(f: &Fleet, kind: &str, seen: Shared, note: fn(&mut Seen, &str, &Value, Instant)) -> Child {
    let args = [
        "-n",
        NS,
        "get",
        kind,
        "--watch",
        "--output-watch-events",
        "-o",
        "json",
    ];
    watch_events(f.kubectl(&args), move |kind, object, now| {
        let (m, cv) = &*seen;
        note(&mut m.lock().unwrap(), kind, object, now);
        cv.notify_all();
    })
}

fn note_pod(s: &mut Seen, kind: &str, p: &Value, now: Instant) {
    let Some(name) = p["metadata"]["name"].as_str() else {
        return;
    };
    let e = s.pods.entry(name.to_string()).or_default();
    e.added.get_or_insert(now);
    if let Some(n) = p["spec"]["nodeName"].as_str() {
        e.node = n.to_string();
    }
    if e.running.is_none() && running(p) {
        e.running = Some(now);
    }
    if kind == "DELETED" {
        e.deleted.get_or_insert(now);
    }
}

fn note_deployment(s: &mut Seen, _kind: &str, d: &Value, now: Instant) {
    let n = d["status"]["availableReplicas"].as_i64().unwrap_or(0);
    s.available.entry(n).or_insert(now);
}

/// Waits until `done` holds for what the watches saw; panics after [`LIMIT`].
fn wait(seen: &Shared, what: &str, done: impl Fn(&Seen) -> bool) {
    let (m, cv) = &**seen;
    let deadline = Instant::now() + LIMIT;
    let mut g = m.lock().unwrap();
    while !done(&g) {
        let left = deadline
            .checked_duration_since(Instant::now())
            .unwrap_or_else(|| panic!("{what}: not within {LIMIT:?}"));
        g = cv.wait_timeout(g, left).unwrap().0;
    }
}

fn kubectl_ok(f: &Fleet, args: &[&str], stdin: Option<&Value>) {
    crust_e2e::cluster::run_ok(f.kubectl(args), stdin);
}

fn deployment(replicas: usize) -> Value {
    json!({
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "spread", "namespace": NS},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": "spread"}},
            "template": {
                "metadata": {"labels": {"app": "spread"}},
                "spec": {
                    "topologySpreadConstraints": [{
                        "maxSkew": 1,
                        "topologyKey": "kubernetes.io/hostname",
                        "whenUnsatisfiable": "DoNotSchedule",
                        "labelSelector": {"matchLabels": {"app": "spread"}},
                    }],
                    "containers": [{
                        "name": "main",
                        "image": IMAGE,
                        "imagePullPolicy": "IfNotPresent",
                        "command": ["sh", "-c", "trap 'exit 0' TERM; sleep 3600 & wait"],
                    }],
                },
            },
        },
    })
}

/// One pod per node from `IMAGE`, so that the measured pods find it there; gone again
/// before the measure.
fn warm_up(f: &Fleet) {
    let names: Vec<String> = (0..f.nodes.len()).map(|i| format!("warm-{i}")).collect();
    for (node, name) in f.nodes.iter().zip(&names) {
        let pod = json!({
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name, "namespace": NS},
            "spec": {
                "nodeName": node.name,
                "terminationGracePeriodSeconds": 0,
                "containers": [{"name": "main", "image": IMAGE, "command": ["true"]}],
                "restartPolicy": "Never",
            },
        });
        kubectl_ok(f, &["apply", "-f", "-"], Some(&pod));
    }
    for name in &names {
        kubectl_ok(
            f,
            &[
                "-n",
                NS,
                "wait",
                "--for=jsonpath={.status.phase}=Succeeded",
                "--timeout=300s",
                &format!("pod/{name}"),
            ],
            None,
        );
    }
    let mut del = vec!["-n", NS, "delete", "pod", "--wait=true"];
    del.extend(names.iter().map(String::as_str));
    kubectl_ok(f, &del, None);
}

/// What one visit measured.
struct Visit {
    flavour: Flavour,
    fleet_up: f64,
    up: f64,
    down: f64,
    startup: Vec<f64>,
    per_node: Vec<(String, usize)>,
}

fn pct(v: &[f64], p: f64) -> f64 {
    let mut v = v.to_vec();
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    let i = ((p / 100.0) * (v.len() as f64 - 1.0)).round() as usize;
    v[i.min(v.len() - 1)]
}

fn median(v: &[f64]) -> f64 {
    pct(v, 50.0)
}

fn visit(
    flavour: Flavour,
    nodes: usize,
    per_node: usize,
    cni_dirs: &[PathBuf],
    tools: &Path,
    e2e_bin: &Path,
) -> Visit {
    let started = Instant::now();
    let bins = kube_bins().unwrap_or_else(|m| panic!("no {} (hack/deps)", m.join(", ")));
    let f = Fleet::start_logging(
        bins,
        crust_e2e::bin("crustd"),
        cni_dirs.to_vec(),
        nodes,
        flavour,
        "info",
    );
    let f = Arc::new(f);
    let measured = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        f.cluster.push_e2e_images(tools, e2e_bin);
        let fleet_up = started.elapsed().as_secs_f64();
        kubectl_ok(&f, &["create", "namespace", NS], None);
        // The namespace's service account, without which no pod is admitted.
        wait_for_default_sa(&f);
        warm_up(&f);
        let seen: Shared = Default::default();
        // The watches are open before anything is made (an empty namespace: nothing to
        // wait for; a moment for the requests to reach the apiserver). A kubectl that
        // gave up at once (seen once: the pod watch ended right after it started, and
        // the visit waited out its limit for deletions it could no longer see) is
        // started again.
        let open = |kind: &str, note: fn(&mut Seen, &str, &Value, Instant)| {
            for _ in 0..5 {
                let mut child = watch(&f, kind, seen.clone(), note);
                std::thread::sleep(Duration::from_secs(2));
                if child.try_wait().ok().flatten().is_none() {
                    return child;
                }
            }
            panic!("kubectl get {kind} --watch keeps ending");
        };
        let mut pods = open("pods", note_pod);
        let mut deps = open("deployments", note_deployment);
        let total = nodes * per_node;
        let t0 = Instant::now();
        kubectl_ok(&f, &["apply", "-f", "-"], Some(&deployment(total)));
        wait(&seen, "all replicas available", |s| {
            s.available.contains_key(&(total as i64))
        });
        let up = seen.0.lock().unwrap().available[&(total as i64)] - t0;
        let t1 = Instant::now();
        kubectl_ok(
            &f,
            &["-n", NS, "scale", "deployment/spread", "--replicas=0"],
            None,
        );
        wait(&seen, "every pod gone", |s| {
            s.pods.len() >= total && s.pods.values().all(|p| p.deleted.is_some())
        });
        let g = seen.0.lock().unwrap();
        let last = g.pods.values().filter_map(|p| p.deleted).max().unwrap();
        let down = last.saturating_duration_since(t1);
        let startup: Vec<f64> = g
            .pods
            .values()
            .filter_map(|p| Some((p.running? - p.added?).as_secs_f64() * 1000.0))
            .collect();
        let mut counts: HashMap<String, usize> = HashMap::new();
        for p in g.pods.values() {
            *counts.entry(p.node.clone()).or_default() += 1;
        }
        let mut per_node: Vec<(String, usize)> = counts.into_iter().collect();
        per_node.sort();
        drop(g);
        let _ = pods.kill();
        let _ = deps.kill();
        let _ = pods.wait();
        let _ = deps.wait();
        Visit {
            flavour,
            fleet_up,
            up: up.as_secs_f64(),
            down: down.as_secs_f64(),
            startup,
            per_node,
        }
    }));
    f.teardown();
    match measured {
        Ok(v) => v,
        Err(e) => std::panic::resume_unwind(e),
    }
}

fn wait_for_default_sa(f: &Fleet) {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let out = run_timeout(
            &mut f.kubectl(&["-n", NS, "get", "serviceaccount", "default"]),
            Duration::from_secs(20),
        );
        if out.status.success() {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "no default service account in {NS}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

fn name(f: Flavour) -> &'static str {
    match f {
        Flavour::Crust => "crustlet + crustd",
        Flavour::Containerd => "kubelet + containerd",
    }
}

fn env_usize(key: &str, default: usize) -> usize {
    std::env::var(key)
        .ok()
        .and_then(|s| s.parse().ok())
        .filter(|n| *n > 0)
        .unwrap_or(default)
}

fn main() {
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    let tools: Vec<&str> = stack::CLUSTER_TOOLS.into_iter().chain(["xz"]).collect();
    if !crust_e2e::require_root(&tools) {
        return;
    }
    let workspace = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let tools = workspace.join("../shared/tools/kubernetes-e2e-v1.28.7");
    assert!(
        tools.join("install").is_file(),
        "no {} (the e2e images)",
        tools.display()
    );
    let e2e_bin = std::env::var_os("CRUST_E2E_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| workspace.join("target/e2e-bin"));
    let nodes = env_usize("BENCH_FLEET_NODES", 3);
    let per_node = env_usize("BENCH_FLEET_PODS", 50);
    let rounds = env_usize("BENCH_ROUNDS", 2);
    let reference = PathBuf::from("/usr/lib/cni");
    let crust_cni = std::env::var("BENCH_CNI").is_ok_and(|v| v == "crust");

    let mut visits = vec![];
    for r in 0..rounds {
        let order = if r % 2 == 0 {
            [Flavour::Crust, Flavour::Containerd]
        } else {
            [Flavour::Containerd, Flavour::Crust]
        };
        for flavour in order {
            let cni = if flavour == Flavour::Crust && crust_cni {
                vec![crust_e2e::bin_dir(), reference.clone()]
            } else {
                vec![reference.clone()]
            };
            let v = visit(flavour, nodes, per_node, &cni, &tools, &e2e_bin);
            println!(
                "{:<22} fleet up {:5.1} s | up {:6.2} s | down {:6.2} s | startup p50 {:6.0} ms p99 {:6.0} ms | per node {:?}",
                name(v.flavour),
                v.fleet_up,
                v.up,
                v.down,
                pct(&v.startup, 50.0),
                pct(&v.startup, 99.0),
                v.per_node.iter().map(|(_, n)| n).collect::<Vec<_>>()
            );
            std::io::stdout().flush().unwrap();
            visits.push(v);
        }
    }

    let of = |fl: Flavour| -> Vec<&Visit> { visits.iter().filter(|v| v.flavour == fl).collect() };
    let summary = |vs: &[&Visit]| {
        let up = median(&vs.iter().map(|v| v.up).collect::<Vec<_>>());
        let down = median(&vs.iter().map(|v| v.down).collect::<Vec<_>>());
        let p50 = median(&vs.iter().map(|v| pct(&v.startup, 50.0)).collect::<Vec<_>>());
        let p99 = median(&vs.iter().map(|v| pct(&v.startup, 99.0)).collect::<Vec<_>>());
        (up, down, p50, p99)
    };
    let crust = summary(&of(Flavour::Crust));
    let ctrd = summary(&of(Flavour::Containerd));
    println!();
    println!(
        "A Deployment of {nodes} x {per_node} replicas on {nodes} nodes; medians of {rounds} visits each, alternating{}",
        if crust_cni {
            " (crust's CNI plugins on the crust fleet)"
        } else {
            " (the reference CNI plugins on both)"
        }
    );
    println!("| fleet | up (all available) | down (all gone) | pod startup p50 | p99 |");
    println!("| --- | --- | --- | --- | --- |");
    for (fl, s) in [(Flavour::Containerd, ctrd), (Flavour::Crust, crust)] {
        println!(
            "| {} | {:.1} s | {:.1} s | {:.0} ms | {:.0} ms |",
            name(fl),
            s.0,
            s.1,
            s.2,
            s.3
        );
    }
    println!(
        "crust/containerd: up {:.2}, down {:.2}, startup p50 {:.2}, p99 {:.2} (below 1: crust is faster)",
        crust.0 / ctrd.0,
        crust.1 / ctrd.1,
        crust.2 / ctrd.2,
        crust.3 / ctrd.3
    );
}
