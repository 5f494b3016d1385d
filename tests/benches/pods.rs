//! Pod start latency through a real control plane: the crustlet on crustd against the
//! real kubelet v1.28.7 on containerd + runc, in one cluster on the same machine
//! (tests/src/cluster.rs with `Options::containerd = Kubelet`: the kubelet's node
//! `crust-node` runs on containerd, the crustlet's `crustlet-node` on crustd). Run as
//! root through `hack/bench-pods` (which installs what it needs and builds the release
//! binaries), or `cargo bench -p crust-e2e --bench pods`. `BENCH_N` pods per node
//! (default 30).
//!
//! Both nodes get the same pod (the busybox image of the cluster's registry, already
//! on the node after a warm-up pod, `sleep 3600`, no volumes but the service-account
//! token every pod has) and, by default, the same CNI plugins: the reference `bridge`,
//! `host-local` and `portmap` of `/usr/lib/cni` (`BENCH_CNI=crust` gives crustd crust's
//! own). Pods are created one at a time, alternating the node that goes first, and
//! each is waited for before the next; they stay up, so the last one starts beside
//! N-1 running pods on its node.
//!
//! Two latencies per pod: as a watch sees it (a `kubectl get --watch` started before:
//! from the event that shows the pod created to the one that shows it Running with its
//! container running; millisecond resolution, the same watch for both nodes), and as
//! the pod's status says (creationTimestamp to the container's `startedAt`: the API's
//! timestamps have whole seconds). Then the resident memory (RSS, and PSS from
//! `/proc/<pid>/smaps_rollup`) of the crustlet and the kubelet process, and of their
//! runtimes (crustd; containerd and its shims), with the N pods running and both nodes
//! idle: `BENCH_SETTLE` seconds (default 30) after the last pod ran, the agents' figures
//! the median of 5 samples 2 s apart, taken at the same instants for both; and where
//! each agent's RSS is (its executable, other files, anonymous memory; threads).
//! `BENCH_DELETE=1` deletes the pods at the end (for a profile of a node's whole round).
//! `BENCH_INSPECT=<shell command>` runs that command once the memory is read, with the
//! agents still up and `KUBELET_PID` and `CRUSTLET_PID` set (to look at their pages
//! more closely than smaps shows).

use crust_e2e::cluster::{kube_bins, run_timeout, Cluster, ContainerdFor, Options};
use crust_e2e::cluster::{CRUSTLET_NODE, CRUSTLET_TAINT, NODE};
use serde_json::{json, Value};
use std::collections::HashMap;
use std::io::Write;
use std::process::{Command, Stdio};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

const NS: &str = "bench";

/// What the watch saw of a pod: when it first appeared, and when it was Running.
#[derive(Default, Clone)]
struct Seen {
    added: Option<Instant>,
    running: Option<Instant>,
    /// The pod as it was then.
    object: Option<Value>,
}

type Watched = Arc<(Mutex<HashMap<String, Seen>>, Condvar)>;

fn running(p: &Value) -> bool {
    p["status"]["phase"] == "Running"
        && p["status"]["containerStatuses"]
            .as_array()
            .is_some_and(|a| !a.is_empty() && a.iter().all(|s| s["state"]["running"].is_object()))
}

/// `kubectl get pods --watch` of the bench namespace, its events noted as they arrive.
fn watch(c: &Cluster, seen: Watched) -> std::process::Child {
    let mut child = c
        .kubectl(&[
            "-n",
            NS,
            "get",
            "pods",
            "--watch",
            "--output-watch-events",
            "-o",
            "json",
        ])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let out = child.stdout.take().unwrap();
    std::thread::spawn(move || {
        let stream = serde_json::Deserializer::from_reader(std::io::BufReader::new(out));
        for ev in stream.into_iter::<Value>() {
            let Ok(ev) = ev else { return };
            let now = Instant::now();
            let p = &ev["object"];
            let Some(name) = p["metadata"]["name"].as_str() else {
                continue;
            };
            let (m, cv) = &*seen;
            let mut m = m.lock().unwrap();
            let s = m.entry(name.to_string()).or_default();
            s.added.get_or_insert(now);
            if s.running.is_none() && running(p) {
                s.running = Some(now);
                s.object = Some(p.clone());
            }
            cv.notify_all();
        }
    });
    child
}

fn pod(c: &Cluster, name: &str, node: &str) -> Value {
    let mut spec = json!({
        "terminationGracePeriodSeconds": 1,
        "nodeSelector": {"kubernetes.io/hostname": node},
        "containers": [{
            "name": "main",
            "image": c.image,
            "imagePullPolicy": "IfNotPresent",
            "command": ["sleep", "3600"],
        }],
    });
    if node == CRUSTLET_NODE {
        spec["tolerations"] =
            json!([{"key": CRUSTLET_TAINT, "operator": "Exists", "effect": "NoSchedule"}]);
    }
    json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": NS},
        "spec": spec,
    })
}

fn apply(c: &Cluster, obj: &Value) {
    let mut child = c
        .kubectl(&["apply", "-f", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(obj.to_string().as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "kubectl apply: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Creates the pod and waits (2 minutes at most) until the watch saw it Running.
fn start_pod(c: &Cluster, seen: &Watched, name: &str, node: &str) -> Seen {
    apply(c, &pod(c, name, node));
    let (m, cv) = &**seen;
    let deadline = Instant::now() + Duration::from_secs(120);
    let mut g = m.lock().unwrap();
    loop {
        if let Some(s) = g.get(name).filter(|s| s.running.is_some()) {
            return s.clone();
        }
        let left = deadline
            .checked_duration_since(Instant::now())
            .unwrap_or_else(|| panic!("pod {name} on {node} not Running in 2 minutes"));
        g = cv.wait_timeout(g, left).unwrap().0;
    }
}

/// Seconds between two RFC 3339 timestamps of whole seconds (`...T12:34:56Z`).
fn api_secs(from: &str, to: &str) -> Option<f64> {
    let secs = |t: &str| -> Option<i64> {
        let (d, t) = t.trim_end_matches('Z').split_once('T')?;
        let d: Vec<i64> = d
            .split('-')
            .map(|x| x.parse().ok())
            .collect::<Option<_>>()?;
        let t: Vec<i64> = t
            .split(':')
            .map(|x| x.parse().ok())
            .collect::<Option<_>>()?;
        Some(((d[0] * 400 + d[1]) * 40 + d[2]) * 86400 + t[0] * 3600 + t[1] * 60 + t[2])
    };
    Some((secs(to)? - secs(from)?) as f64)
}

fn pct(v: &[f64], p: f64) -> f64 {
    let mut v = v.to_vec();
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    let i = ((p / 100.0) * (v.len() as f64 - 1.0)).round() as usize;
    v[i.min(v.len() - 1)]
}

/// (RSS, PSS) in KiB of `pid`.
fn mem(pid: u32) -> (u64, u64) {
    let text = std::fs::read_to_string(format!("/proc/{pid}/smaps_rollup")).unwrap_or_default();
    let field = |k: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(k))
            .and_then(|r| r.split_whitespace().next())
            .and_then(|n| n.parse().ok())
            .unwrap_or(0)
    };
    (field("Rss:"), field("Pss:"))
}

/// `mem` of each pid, sampled `n` times 2 s apart (all pids at the same instants), the
/// median of each figure: one sample can land on a Go GC cycle, a housekeeping pass or
/// a stats request.
fn mem_median(pids: &[u32], n: usize) -> Vec<(u64, u64)> {
    let mut samples: Vec<Vec<(u64, u64)>> = vec![vec![]; pids.len()];
    for i in 0..n {
        if i > 0 {
            std::thread::sleep(Duration::from_secs(2));
        }
        for (s, pid) in samples.iter_mut().zip(pids) {
            s.push(mem(*pid));
        }
    }
    let median = |mut v: Vec<u64>| {
        v.sort();
        v[v.len() / 2]
    };
    samples
        .into_iter()
        .map(|s| {
            (
                median(s.iter().map(|m| m.0).collect()),
                median(s.iter().map(|m| m.1).collect()),
            )
        })
        .collect()
}

/// Where a process's resident memory is (KiB of RSS from `/proc/<pid>/smaps`): its own
/// executable's mappings (text and data), other files (shared libraries), anonymous
/// memory (heap, arenas, stacks), and its thread count.
fn breakdown(pid: u32) -> String {
    let exe = std::fs::read_link(format!("/proc/{pid}/exe")).unwrap_or_default();
    let text = std::fs::read_to_string(format!("/proc/{pid}/smaps")).unwrap_or_default();
    let (mut own, mut files, mut anon) = (0u64, 0u64, 0u64);
    let mut path = String::new();
    for l in text.lines() {
        let mut w = l.split_whitespace();
        let first = w.next().unwrap_or("");
        if first.contains('-') && !first.ends_with(':') {
            // A mapping's header: range, perms, offset, dev, inode, path.
            path = w.nth(4).unwrap_or("").to_string();
        } else if first == "Rss:" {
            let kib: u64 = w.next().and_then(|n| n.parse().ok()).unwrap_or(0);
            if path.starts_with('/') && std::path::Path::new(&path) == exe {
                own += kib;
            } else if path.starts_with('/') {
                files += kib;
            } else {
                anon += kib;
            }
        }
    }
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let threads = status
        .lines()
        .find_map(|l| l.strip_prefix("Threads:"))
        .map_or("?", str::trim)
        .to_string();
    format!(
        "executable {}, other files {}, anonymous {}; {threads} threads",
        mib(own),
        mib(files),
        mib(anon)
    )
}

/// How many other processes run the executable of `pid` (another cluster's kubelet
/// beside the bench's, say): they share its pages, which lowers its PSS.
fn sharers(pid: u32) -> usize {
    let exe = |p: u32| std::fs::read_link(format!("/proc/{p}/exe")).ok();
    let Some(mine) = exe(pid) else { return 0 };
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| e.file_name().to_string_lossy().parse::<u32>().ok())
        .filter(|p| *p != pid && exe(*p).as_ref() == Some(&mine))
        .count()
}

/// The pids whose command line starts with `prog` (a path ending in it) and names `arg`.
fn pids_of(prog: &str, arg: &str) -> Vec<u32> {
    let mut v = vec![];
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let cmd = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
        let args: Vec<String> = cmd
            .split(|b| *b == 0)
            .map(|a| String::from_utf8_lossy(a).into_owned())
            .collect();
        if args.first().is_some_and(|a| a.ends_with(prog)) && args.iter().any(|a| a.contains(arg)) {
            v.push(pid);
        }
    }
    v
}

fn mib(kib: u64) -> String {
    format!("{:.1} MiB", kib as f64 / 1024.0)
}

fn main() {
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    if !crust_e2e::require_root(&[
        "ip",
        "nsenter",
        "unshare",
        "iptables",
        "busybox",
        "docker-registry",
        "skopeo",
        "openssl",
        "containerd",
        "containerd-shim-runc-v2",
        "runc",
    ]) {
        return;
    }
    let n: usize = std::env::var("BENCH_N")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(30);
    let bins = kube_bins().unwrap_or_else(|m| {
        panic!(
            "no {} (hack/deps unpacks the Kubernetes binaries)",
            m.join(", ")
        )
    });
    let reference = std::path::PathBuf::from("/usr/lib/cni");
    let crust_cni = std::env::var("BENCH_CNI").is_ok_and(|v| v == "crust");
    let cni_dirs = if crust_cni {
        vec![crust_e2e::bin_dir(), reference]
    } else {
        vec![reference]
    };
    let started = Instant::now();
    let c = Cluster::start_with(
        bins,
        crust_e2e::bin("crustd"),
        cni_dirs,
        Options {
            containerd: Some(ContainerdFor::Kubelet),
            ..Options::default()
        },
    );
    c.wait_node_ready(Duration::from_secs(120));
    println!(
        "cluster up in {:.1}s: kubelet v1.28.7 + containerd {} + runc on {NODE}, crustlet + crustd on {CRUSTLET_NODE} ({} CNI plugins for crustd)",
        started.elapsed().as_secs_f32(),
        version(&["containerd", "--version"], 2),
        if crust_cni { "crust's" } else { "the reference" }
    );
    let ns = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}});
    apply(&c, &ns);
    // Pods are refused until the namespace's service account exists.
    let deadline = Instant::now() + Duration::from_secs(60);
    while !run_timeout(
        &mut c.kubectl(&["-n", NS, "get", "serviceaccount/default"]),
        Duration::from_secs(20),
    )
    .status
    .success()
    {
        assert!(Instant::now() < deadline, "no service account in {NS}");
        std::thread::sleep(Duration::from_millis(200));
    }
    let seen: Watched = Arc::new((Mutex::new(HashMap::new()), Condvar::new()));
    let mut w = watch(&c, seen.clone());
    std::thread::sleep(Duration::from_secs(1));

    // The image on both nodes, and everything warm.
    let nodes = [("kubelet", NODE), ("crustlet", CRUSTLET_NODE)];
    for (tag, node) in nodes {
        start_pod(&c, &seen, &format!("warm-{tag}"), node);
    }
    let mut watched: HashMap<&str, Vec<f64>> = HashMap::new();
    let mut status: HashMap<&str, Vec<f64>> = HashMap::new();
    for i in 0..n {
        let order: Vec<_> = if i % 2 == 0 {
            nodes.to_vec()
        } else {
            nodes.iter().rev().copied().collect()
        };
        for (tag, node) in order {
            let s = start_pod(&c, &seen, &format!("{tag}-{i}"), node);
            let ms = s.running.unwrap().duration_since(s.added.unwrap());
            watched
                .entry(tag)
                .or_default()
                .push(ms.as_secs_f64() * 1000.0);
            let p = s.object.unwrap();
            let created = p["metadata"]["creationTimestamp"].as_str().unwrap_or("");
            let started = p["status"]["containerStatuses"][0]["state"]["running"]["startedAt"]
                .as_str()
                .unwrap_or("");
            if let Some(secs) = api_secs(created, started) {
                status.entry(tag).or_default().push(secs * 1000.0);
            }
        }
    }
    let _ = w.kill();
    let _ = w.wait();

    // Memory with the pods up (N + the warm-up pod on each node), once both nodes are
    // idle and steady: BENCH_SETTLE seconds (default 30) after the last pod ran, then
    // the median of 5 samples 2 s apart, the agents sampled at the same instants.
    let settle: u64 = std::env::var("BENCH_SETTLE")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(30);
    std::thread::sleep(Duration::from_secs(settle));
    let kubelet_pid = c.kubelet_pid().expect("kubelet");
    let crustlet_pid = c.crustlet_pid().expect("crustlet");
    let agents = mem_median(&[kubelet_pid, crustlet_pid], 5);
    let (kubelet, crustlet) = (agents[0], agents[1]);
    let containerd = mem(c.containerd_pid().expect("containerd"));
    let sock = c.containerd_socket.display().to_string();
    let shims: Vec<(u64, u64)> = pids_of("containerd-shim-runc-v2", &sock)
        .into_iter()
        .map(mem)
        .collect();
    let shim_sum = shims.iter().fold((0, 0), |a, m| (a.0 + m.0, a.1 + m.1));
    let state = c.path("crustlet-crust-state").display().to_string();
    let crustd = pids_of("crustd", &state)
        .into_iter()
        .map(mem)
        .fold((0, 0), |a, m| (a.0 + m.0, a.1 + m.1));
    // crust's per-container monitors (its counterpart of the shims).
    // Only this cluster's: another cluster's crustd may run beside the bench's.
    let monitors: Vec<(u64, u64)> = pids_of("crust-monitor", &state)
        .into_iter()
        .map(mem)
        .collect();
    let mon_sum = monitors.iter().fold((0, 0), |a, m| (a.0 + m.0, a.1 + m.1));
    // Where each agent's memory is, mapping by mapping, for a closer look.
    if std::env::var_os("BENCH_KEEP_LOGS").is_some() {
        for (name, pid) in [("kubelet", kubelet_pid), ("crustlet", crustlet_pid)] {
            let _ = std::fs::copy(
                format!("/proc/{pid}/smaps"),
                c.path("logs").join(format!("{name}.smaps")),
            );
        }
    }
    if let Some(cmd) = std::env::var_os("BENCH_INSPECT") {
        let _ = Command::new("sh")
            .arg("-c")
            .arg(cmd)
            .env("KUBELET_PID", kubelet_pid.to_string())
            .env("CRUSTLET_PID", crustlet_pid.to_string())
            .status();
    }
    let kubelet_where = breakdown(kubelet_pid);
    let crustlet_where = breakdown(crustlet_pid);
    let shared = [("kubelet", kubelet_pid), ("crustlet", crustlet_pid)]
        .map(|(name, pid)| (name, sharers(pid)));

    println!("\n{n} pods per node, one at a time, alternating; latency created -> Running");
    println!(
        "| | watch p50 | watch p99 | status p50 | status p99 | status mean | agent RSS | agent PSS | runtime RSS | runtime PSS |"
    );
    println!("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |");
    let row = |name: &str, tag: &str, agent: (u64, u64), rt: (u64, u64)| {
        let w = &watched[tag];
        let s = &status[tag];
        println!(
            "| {name} | {:.0} ms | {:.0} ms | {:.0} ms | {:.0} ms | {:.0} ms | {} | {} | {} | {} |",
            pct(w, 50.0),
            pct(w, 99.0),
            pct(s, 50.0),
            pct(s, 99.0),
            s.iter().sum::<f64>() / s.len() as f64,
            mib(agent.0),
            mib(agent.1),
            mib(rt.0),
            mib(rt.1),
        );
    };
    let ctrd_total = (containerd.0 + shim_sum.0, containerd.1 + shim_sum.1);
    row("kubelet + containerd", "kubelet", kubelet, ctrd_total);
    let crust_total = (crustd.0 + mon_sum.0, crustd.1 + mon_sum.1);
    row("crustlet + crustd", "crustlet", crustlet, crust_total);
    let r = |tag_a: &str, p: f64| pct(&watched[tag_a], p);
    println!(
        "\ncrustlet/kubelet: watch p50 {:.2}, p99 {:.2} (target < 1); RSS {:.3}, PSS {:.3} (target < 0.1); runtimes' PSS {:.3} (containerd {} + {} shims {}; crustd {} + {} monitors {})",
        r("crustlet", 50.0) / r("kubelet", 50.0),
        r("crustlet", 99.0) / r("kubelet", 99.0),
        crustlet.0 as f64 / kubelet.0 as f64,
        crustlet.1 as f64 / kubelet.1 as f64,
        crust_total.1 as f64 / ctrd_total.1 as f64,
        mib(containerd.1),
        shims.len(),
        mib(shim_sum.1),
        mib(crustd.1),
        monitors.len(),
        mib(mon_sum.1),
    );
    println!("RSS of the kubelet: {kubelet_where}\nRSS of the crustlet: {crustlet_where}");
    for (name, n) in shared.into_iter().filter(|(_, n)| *n > 0) {
        println!(
            "note: {n} other process(es) run the {name}'s executable (another cluster?): its PSS is lowered by the sharing, compare RSS"
        );
    }
    let mut w_k = watched["kubelet"].clone();
    let mut w_c = watched["crustlet"].clone();
    w_k.sort_by(|a, b| a.partial_cmp(b).unwrap());
    w_c.sort_by(|a, b| a.partial_cmp(b).unwrap());
    println!("watch latencies (ms), sorted:\n  kubelet  {w_k:.0?}\n  crustlet {w_c:.0?}");
    if std::env::var_os("BENCH_KEEP_LOGS").is_some() {
        let dest = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("bench-pods-logs");
        let _ = std::fs::create_dir_all(&dest);
        for e in std::fs::read_dir(c.path("logs")).unwrap().flatten() {
            let _ = std::fs::copy(e.path(), dest.join(e.file_name()));
        }
        println!("logs in {}", dest.display());
    }
    // A node's whole round (for a profile of the agents): the pods
    // deleted as `kubectl delete` does, after everything was measured.
    if std::env::var_os("BENCH_DELETE").is_some() {
        let out = run_timeout(
            &mut c.kubectl(&["-n", NS, "delete", "pods", "--all", "--timeout=300s"]),
            Duration::from_secs(330),
        );
        println!(
            "pods deleted: {}",
            if out.status.success() {
                "yes"
            } else {
                "no (timed out)"
            }
        );
    }
    c.teardown();
}

/// Word `word` of the first line a tool prints (its version), or `?`.
fn version(cmd: &[&str], word: usize) -> String {
    let out = crust_e2e::run(Command::new(cmd[0]).args(&cmd[1..]));
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .next()
        .and_then(|l| l.split_whitespace().nth(word))
        .unwrap_or("?")
        .to_string()
}
