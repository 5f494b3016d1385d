//! Pod start latency through a real control plane: the crustlet on crustd against the
//! real kubelet v1.28.7 on containerd + runc, in one cluster on the same machine
//! (tests/src/cluster/ with `Options::containerd = Kubelet`: the kubelet's node
//! `crust-node` runs on containerd, the crustlet's `crustlet-node` on crustd). Run as
//! root through `hack/bench.d/pods` (which installs what it needs and builds the release
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
//! timestamps have whole seconds).
//!
//! Then the memory each agent and runtime costs the node, with the N pods running and
//! both nodes idle: `BENCH_SETTLE` seconds (default 30) after the last pod ran, every
//! figure the median of 5 samples 2 s apart, all daemons sampled at the same instants.
//! Four groups: the kubelet, the crustlet, containerd with its shims, crustd with its
//! monitors (crust's counterpart of the shims; only this cluster's crustd, found by its
//! state dir). Each daemon runs in a memory cgroup of its own (`Options::agent_cgroups`:
//! cgroup v2, or v1's `memory` hierarchy on a hybrid host;
//! tests/src/cluster/agent_cgroups.rs); the shims and the monitors, forked by their
//! runtime, stay in its cgroup (the bench lists what each cgroup holds), the containers
//! and pauses are in the pods' cgroups.
//! Per group:
//! - from `/proc/<pid>/smaps_rollup`, summed over its processes: the RSS split into
//!   file pages (executables, libraries: clean pages the kernel can drop and read
//!   again) and anonymous memory (`Anonymous`: heap, stacks, relocated data; without
//!   swap the kernel cannot take it back), and the PSS (each page divided among the
//!   processes that map it);
//! - from its cgroup: the working set as the kubelet and cAdvisor define it (the usage,
//!   kernel memory included, less the inactive file pages: `memory.current` less
//!   `inactive_file`, v1 `memory.usage_in_bytes` less `total_inactive_file`), and its
//!   anonymous memory (`anon`, v1 `total_rss`). A file page is charged to the cgroup
//!   that first reads it: each daemon's executable is dropped from the page cache before
//!   the daemons start, so that a daemon pays for its own (not where another process on
//!   the machine maps it, another cluster's kubelet say). The daemons log to files
//!   here, and what a daemon writes to its log is charged to it as page cache (on a
//!   systemd node, journald's cgroup pays for that).
//!
//! The crustlet's target is on anonymous memory: at most a tenth of the kubelet's. The
//! ratios crustlet/kubelet are printed on anonymous memory, PSS, working set and RSS,
//! and the runtimes' (crustd + monitors against containerd + shims) on the same. The
//! latency table keeps the agents' RSS and PSS and the runtimes' (daemon + shims or
//! monitors). Then where each agent's RSS is, by mapping (its executable, other files,
//! anonymous mappings; threads).
//!
//! Then the CPU the idle node stack spends: each group's utime + stime over `BENCH_IDLE`
//! seconds (default 60) with the pods up and nothing happening (issue 30's idle cost;
//! the pods' own processes and pause, asleep on both sides, are left out).
//!
//! `BENCH_DELETE=1` deletes the pods at the end (for a profile of a node's whole round).
//! `BENCH_INSPECT=<shell command>` runs that command once the memory is read, with the
//! agents still up and `KUBELET_PID` and `CRUSTLET_PID` set (to look at their pages
//! more closely than smaps shows).

mod stack;

use crust_e2e::cluster::{kube_bins, run_timeout, watch_events, Cluster, ContainerdFor, Options};
use crust_e2e::cluster::{CRUSTLET_NODE, CRUSTLET_TAINT, NODE};
use serde_json::{json, Value};
use stack::{breakdown, cgroup_procs, idle_cpu, mib, mib_or_na, pids_of, ratio, running};
use stack::{sample_median, sharers, Daemon, Figures, Mem};
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

/// `kubectl get pods --watch` of the bench namespace, its events noted as they arrive.
fn watch(c: &Cluster, seen: Watched) -> std::process::Child {
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
    watch_events(c.kubectl(&args), move |_, p, now| {
        let Some(name) = p["metadata"]["name"].as_str() else {
            return;
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
    })
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

fn main() {
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    if !crust_e2e::require_root(&stack::CLUSTER_TOOLS) {
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
            agent_cgroups: true,
            crustd_log: Some("info"),
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
    // the median of 5 samples 2 s apart, every daemon sampled at the same instants.
    let settle: u64 = std::env::var("BENCH_SETTLE")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(30);
    std::thread::sleep(Duration::from_secs(settle));
    let kubelet_pid = c.kubelet_pid().expect("kubelet");
    let crustlet_pid = c.crustlet_pid().expect("crustlet");
    let containerd_pid = c.containerd_pid().expect("containerd");
    let sock = c.containerd_socket.display().to_string();
    // Only this cluster's crustd and monitors (crust's counterpart of the shims):
    // another cluster's may run beside the bench's.
    let state = c.path("crustlet-crust-state").display().to_string();
    let daemons = [
        Daemon {
            pids: Box::new(move || (vec![kubelet_pid], vec![])),
            cgroup: c.agent_cgroup("kubelet"),
        },
        Daemon {
            pids: Box::new(move || (vec![crustlet_pid], vec![])),
            cgroup: c.agent_cgroup("crustlet"),
        },
        Daemon {
            pids: Box::new(|| {
                let shims = pids_of("containerd-shim-runc-v2", &sock);
                (vec![containerd_pid], shims)
            }),
            cgroup: c.agent_cgroup("containerd"),
        },
        Daemon {
            pids: Box::new(|| (pids_of("crustd", &state), pids_of("crust-monitor", &state))),
            cgroup: c.agent_cgroup("crustlet-crustd"),
        },
    ];
    let figures = sample_median(&daemons, 5);
    // CPU with the pods up and nothing happening: what each daemon and its helpers
    // spent (utime + stime) over BENCH_IDLE seconds (default 60).
    let idle_secs: u64 = std::env::var("BENCH_IDLE")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(60);
    let idle = idle_cpu(&daemons, Duration::from_secs(idle_secs));
    let (kubelet, crustlet, containerd, crustd) = (figures[0], figures[1], figures[2], figures[3]);
    let in_cgroups: Vec<String> = ["kubelet", "crustlet", "containerd", "crustlet-crustd"]
        .iter()
        .filter_map(|n| Some(format!("{n}: {}", cgroup_procs(c.agent_cgroup(n)?))))
        .collect();
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
    let row = |name: &str, tag: &str, agent: Mem, rt: Mem| {
        let w = &watched[tag];
        let s = &status[tag];
        println!(
            "| {name} | {:.0} ms | {:.0} ms | {:.0} ms | {:.0} ms | {:.0} ms | {} | {} | {} | {} |",
            pct(w, 50.0),
            pct(w, 99.0),
            pct(s, 50.0),
            pct(s, 99.0),
            s.iter().sum::<f64>() / s.len() as f64,
            mib(agent.rss),
            mib(agent.pss),
            mib(rt.rss),
            mib(rt.pss),
        );
    };
    row(
        "kubelet + containerd",
        "kubelet",
        kubelet.main,
        containerd.total(),
    );
    row(
        "crustlet + crustd",
        "crustlet",
        crustlet.main,
        crustd.total(),
    );

    // What the node pays for each daemon: its anonymous memory (which the kernel cannot
    // take back without swap), its PSS, and its cgroup's working set.
    println!(
        "\nmemory with the pods up and both nodes idle: processes (smaps_rollup, summed over the group) and the daemon's memory cgroup"
    );
    println!(
        "| | processes | RSS | RSS file | RSS anonymous | PSS | cgroup working set | cgroup anon |"
    );
    println!("| --- | --- | --- | --- | --- | --- | --- | --- |");
    let mem_row = |name: &str, f: &Figures, helpers: &str| {
        let t = f.total();
        let procs = if helpers.is_empty() {
            "1".to_string()
        } else {
            format!("1 + {} {helpers}", f.helpers_n)
        };
        println!(
            "| {name} | {procs} | {} | {} | {} | {} | {} | {} |",
            mib(t.rss),
            mib(t.file()),
            mib(t.anon),
            mib(t.pss),
            mib_or_na(f.working_set()),
            mib_or_na(f.cgroup_anon()),
        );
    };
    mem_row("kubelet", &kubelet, "");
    mem_row("crustlet", &crustlet, "");
    mem_row("containerd + shims", &containerd, "shims");
    mem_row("crustd + monitors", &crustd, "monitors");
    let r = |tag_a: &str, p: f64| pct(&watched[tag_a], p);
    let (ct, kt) = (crustlet.total(), kubelet.total());
    println!(
        "\ncrustlet/kubelet: watch p50 {:.2}, p99 {:.2} (target < 1); anonymous {} (target <= 0.1; cgroups' anon {}), PSS {}, working set {}, RSS {}",
        r("crustlet", 50.0) / r("kubelet", 50.0),
        r("crustlet", 99.0) / r("kubelet", 99.0),
        ratio(Some(ct.anon), Some(kt.anon)),
        ratio(crustlet.cgroup_anon(), kubelet.cgroup_anon()),
        ratio(Some(ct.pss), Some(kt.pss)),
        ratio(crustlet.working_set(), kubelet.working_set()),
        ratio(Some(ct.rss), Some(kt.rss)),
    );
    let (rt_c, rt_k) = (crustd.total(), containerd.total());
    println!(
        "runtimes, crustd + monitors / containerd + shims: anonymous {} (cgroups' anon {}), PSS {}, working set {}, RSS {}; runtimes' PSS (containerd {} + {} shims {}; crustd {} + {} monitors {})",
        ratio(Some(rt_c.anon), Some(rt_k.anon)),
        ratio(crustd.cgroup_anon(), containerd.cgroup_anon()),
        ratio(Some(rt_c.pss), Some(rt_k.pss)),
        ratio(crustd.working_set(), containerd.working_set()),
        ratio(Some(rt_c.rss), Some(rt_k.rss)),
        mib(containerd.main.pss),
        containerd.helpers_n,
        mib(containerd.helpers.pss),
        mib(crustd.main.pss),
        crustd.helpers_n,
        mib(crustd.helpers.pss),
    );
    if in_cgroups.is_empty() {
        println!("no memory cgroup of their own: the daemons ran in the bench's cgroup");
    } else {
        println!(
            "memory cgroups ({}), what each holds: {}",
            c.agents_cgroup_root,
            in_cgroups.join("; ")
        );
    }
    println!(
        "\nCPU over {idle_secs} s idle (utime + stime of each process; the pods' own processes and pause left out)"
    );
    println!("| | agent | runtime | shims / monitors | the node stack |");
    println!("| --- | --- | --- | --- | --- |");
    let cpu_row = |name: &str, agent: (f64, f64), rt: (f64, f64)| {
        println!(
            "| {name} | {:.2} s | {:.2} s | {:.2} s | {:.2} s |",
            agent.0 + agent.1,
            rt.0,
            rt.1,
            agent.0 + agent.1 + rt.0 + rt.1
        );
    };
    cpu_row("kubelet + containerd", idle[0], idle[2]);
    cpu_row("crustlet + crustd", idle[1], idle[3]);
    let stack = |a: (f64, f64), r: (f64, f64)| a.0 + a.1 + r.0 + r.1;
    println!(
        "crust/incumbent idle CPU: node stack {:.2} (issue 30's target <= 0.1), agents {:.2}, runtimes with helpers {:.2}",
        stack(idle[1], idle[3]) / stack(idle[0], idle[2]).max(1e-9),
        (idle[1].0 + idle[1].1) / (idle[0].0 + idle[0].1).max(1e-9),
        (idle[3].0 + idle[3].1) / (idle[2].0 + idle[2].1).max(1e-9),
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
