//! Churn: a Job-like load through a real control plane, the crustlet on crustd against
//! the real kubelet v1.28.7 on containerd + runc (issue 30's "Churn"), in one cluster
//! on the same machine (tests/src/cluster/ with `Options::containerd = Kubelet`, as
//! the pods bench: `crust-node` runs the kubelet on containerd, `crustlet-node` the
//! crustlet on crustd). Run as root through `hack/bench.d/churn`, or
//! `cargo bench -p crust-e2e --bench churn`; the hour-long version is `hack/soak`.
//!
//! One stack at a time (the crustlet first; `BENCH_ROUNDS` > 1 alternates the order
//! round by round) keeps `BENCH_INFLIGHT` pods (default 10) in flight on its node for
//! `BENCH_CHURN_SECS` seconds (default 600) per round: each pod `restartPolicy: Never`,
//! `terminationGracePeriodSeconds: 1`, the cluster's busybox image, its command `true`
//! and `sleep 1` by turns. When the watch sees a pod Succeeded (or Failed) the bench
//! deletes it and creates the next. Printed per stack: pods Succeeded within the
//! window per second, p50/p99 from the pod's creation to Succeeded as one
//! `kubectl get --watch` sees it (the same for both stacks), and the time to drain:
//! from the end of the window until every pod is gone from the API.
//!
//! The bench's own side costs both stacks the same: creates and deletes go through one
//! long-lived `kubectl proxy` on a unix socket (no kubectl spawned per pod), a plain
//! HTTP/1.1 request per call, and the watch is one `kubectl` process (restarted if the
//! apiserver ends it, as it does after `--min-request-timeout`, 30 to 60 minutes).
//!
//! Then what the run left. Before the first round of a stack (after a warm-up pod on
//! each node, run, deleted and gone, and `BENCH_SETTLE` seconds, default 30) and after
//! its last (every pod deleted and gone from the API, then `BENCH_SETTLE` seconds, and
//! more, every 5 s, while a count is not back yet, up to [`SETTLE_MAX`]: a connection
//! pool's idle timeout or a once-a-minute garbage collection is not a leak; the same
//! for both stacks):
//! - for crustd and the crustlet (containerd and the kubelet): RSS and its anonymous
//!   part (`/proc/<pid>/smaps_rollup`), open fds (`/proc/<pid>/fd`), threads; crustd's
//!   monitors (containerd's shims) still running;
//! - for the node: mounts in its mount namespace (all, and those under the stack's own
//!   dirs), cgroups at or below the stack's `--cgroup-root` in every hierarchy, veths
//!   on the stack's bridge and in the node's network namespace, IPs reserved in the
//!   stack's host-local data dir, and files (and dirs) under each state, root and log
//!   dir the stack writes.
//!
//! A table per stack: counter | before | after | delta. Nothing of the crust stack may
//! grow with the number of pods that came and went: every count must be back exactly,
//! and RSS and anonymous memory may grow by allocator noise only, at most
//! [`NOISE_KIB`] per process (freed memory the allocator keeps in its arenas for the
//! next pod; a leak per pod passes that within a few thousand pods, and the hour of
//! `hack/soak` shows the slope). A crust counter beyond that fails the bench, after
//! the tables are printed. The incumbent's counters are printed, not checked.
//!
//! `BENCH_SAMPLES_CSV=path` writes the counters of the stack under load every
//! `BENCH_SAMPLE_SECS` seconds (default 30) during the run, long format (`seconds,
//! stack,counter,value`), with the pods completed and in flight: what `hack/soak`
//! plots. `BENCH_STACKS=crustlet` (or `kubelet`) runs one stack only.

#[path = "churn/counters.rs"]
mod counters;
mod stack;

use counters::*;
use crust_e2e::cluster::{kube_bins, run_timeout, Cluster, ContainerdFor, Options};
use crust_e2e::cluster::{CRUSTLET_NODE, CRUSTLET_TAINT, NODE};
use serde_json::{json, Value};
use stack::pids_of;
use std::collections::HashMap;
use std::io::{BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

const NS: &str = "churn";

/// How much RSS (and anonymous memory) a crust daemon may have grown by after the run
/// without failing the bench, KiB: what glibc's allocator keeps of freed memory in its
/// per-thread arenas (a few MiB per busy thread) is not a leak.
const NOISE_KIB: u64 = 8 * 1024;

/// A pod in flight longer than this is stuck: the bench stops there.
const STUCK: Duration = Duration::from_secs(300);

/// One node stack under test.
#[derive(Clone, Copy, PartialEq, Eq)]
struct Stack {
    /// Its pods' name prefix, and its name in `BENCH_STACKS` and the CSV.
    tag: &'static str,
    node: &'static str,
    title: &'static str,
    /// Whether its counters must come back (crust's) or are printed only.
    checked: bool,
}

const CRUST: Stack = Stack {
    tag: "crustlet",
    node: CRUSTLET_NODE,
    title: "crustlet + crustd",
    checked: true,
};

const INCUMBENT: Stack = Stack {
    tag: "kubelet",
    node: NODE,
    title: "kubelet + containerd",
    checked: false,
};

fn env_or<T: std::str::FromStr>(key: &str, default: T) -> T {
    std::env::var(key)
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(default)
}

// ---- the API: one kubectl proxy on a unix socket ---------------------------------------

/// `kubectl proxy` on a unix socket of the cluster's dir: the bench's one client for
/// creates and deletes, so that no kubectl starts per pod (the host reaches the socket
/// by its path; the proxy runs in the node's network namespace, where the apiserver
/// is).
struct Api {
    proxy: Child,
    socket: PathBuf,
}

impl Api {
    fn start(c: &Cluster) -> Api {
        let socket = c.path("churn-proxy.sock");
        let proxy = c
            .kubectl(&["proxy", &format!("--unix-socket={}", socket.display())])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("kubectl proxy");
        let api = Api { proxy, socket };
        let deadline = Instant::now() + Duration::from_secs(30);
        while std::os::unix::net::UnixStream::connect(&api.socket).is_err() {
            assert!(
                Instant::now() < deadline,
                "kubectl proxy did not serve in 30 s"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        api
    }

    /// One request, the connection closed after it: (status, body as read, chunked or
    /// not: only the status is looked at, the body goes into messages).
    fn request(&self, method: &str, path: &str, body: &str) -> std::io::Result<(u16, String)> {
        let mut conn = std::os::unix::net::UnixStream::connect(&self.socket)?;
        conn.set_read_timeout(Some(Duration::from_secs(60)))?;
        write!(
            conn,
            "{method} {path} HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        )?;
        let mut resp = Vec::new();
        conn.read_to_end(&mut resp)?;
        let text = String::from_utf8_lossy(&resp).into_owned();
        let status = text
            .split_whitespace()
            .nth(1)
            .and_then(|s| s.parse().ok())
            .unwrap_or(0);
        let body = text
            .split_once("\r\n\r\n")
            .map(|(_, b)| b.to_string())
            .unwrap_or_default();
        Ok((status, body))
    }

    /// `request`, retried (5 tries, 200 ms apart) on an error, 429 and 5xx; `fine` says
    /// which other statuses than 2xx count as done (409 on a create retried after a
    /// lost answer, 404 on a delete).
    fn call(&self, method: &str, path: &str, body: &str, fine: &[u16]) {
        let mut last = String::new();
        for attempt in 0..5 {
            match self.request(method, path, body) {
                Ok((s, _)) if (200..300).contains(&s) => return,
                Ok((s, _)) if fine.contains(&s) && (attempt > 0 || s == 404) => return,
                Ok((s, b)) if s == 429 || s >= 500 || s == 0 => last = format!("{s}: {b}"),
                Ok((s, b)) => panic!("{method} {path}: {s}: {b}"),
                Err(e) => last = e.to_string(),
            }
            std::thread::sleep(Duration::from_millis(200));
        }
        panic!("{method} {path}: {last}");
    }

    fn create(&self, pod: &Value) {
        let path = format!("/api/v1/namespaces/{NS}/pods");
        self.call("POST", &path, &pod.to_string(), &[409]);
    }

    /// Deletes the pod, as `kubectl delete --wait=false` does (its grace period is the
    /// pod's own).
    fn delete(&self, name: &str) {
        let path = format!("/api/v1/namespaces/{NS}/pods/{name}");
        self.call("DELETE", &path, "", &[404]);
    }
}

impl Drop for Api {
    fn drop(&mut self) {
        let _ = self.proxy.kill();
        let _ = self.proxy.wait();
        let _ = std::fs::remove_file(&self.socket);
    }
}

// ---- the watch ------------------------------------------------------------------------

/// What the watch saw of a pod.
#[derive(Default, Clone, Copy)]
struct Seen {
    added: Option<Instant>,
    /// When it was first seen Succeeded or Failed, and whether it Succeeded.
    finished: Option<(Instant, bool)>,
    /// Gone from the API (a DELETED event).
    gone: bool,
}

type Pods = Arc<(Mutex<HashMap<String, Seen>>, Condvar)>;

/// `kubectl get pods --watch` of the bench's namespace, every event noted as it arrives;
/// started again when the apiserver ends it (it lists the pods first, so a pod finished
/// in the gap is seen then).
struct Watch {
    pods: Pods,
    stop: Arc<AtomicBool>,
    child: Arc<Mutex<Option<Child>>>,
    restarts: Arc<AtomicU64>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Watch {
    fn start(c: &Cluster) -> Watch {
        let (netns, kubectl) = (c.node.path().to_path_buf(), c.bins.kubectl.clone());
        let kubeconfig = format!("--kubeconfig={}", c.path("admin.kubeconfig").display());
        let pods: Pods = Arc::new((Mutex::new(HashMap::new()), Condvar::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let child: Arc<Mutex<Option<Child>>> = Arc::new(Mutex::new(None));
        let restarts = Arc::new(AtomicU64::new(0));
        let (p, st, ch, rs) = (pods.clone(), stop.clone(), child.clone(), restarts.clone());
        let thread = std::thread::spawn(move || {
            while !st.load(Ordering::SeqCst) {
                let mut cmd = Command::new("nsenter");
                cmd.arg(format!("--net={}", netns.display()))
                    .arg("--")
                    .arg(&kubectl)
                    .arg(&kubeconfig)
                    .args(["-n", NS, "get", "pods", "--watch", "--output-watch-events"])
                    .args(["-o", "json"])
                    .stdin(Stdio::null())
                    .stdout(Stdio::piped())
                    .stderr(Stdio::null());
                let mut child = cmd.spawn().expect("kubectl watch");
                let out = child.stdout.take().expect("piped stdout");
                *ch.lock().unwrap() = Some(child);
                if st.load(Ordering::SeqCst) {
                    break;
                }
                let stream = serde_json::Deserializer::from_reader(BufReader::new(out));
                for ev in stream.into_iter::<Value>() {
                    let Ok(ev) = ev else { break };
                    note(&p, &ev, Instant::now());
                }
                if let Some(mut c) = ch.lock().unwrap().take() {
                    let _ = c.kill();
                    let _ = c.wait();
                }
                if !st.load(Ordering::SeqCst) {
                    rs.fetch_add(1, Ordering::SeqCst);
                    std::thread::sleep(Duration::from_millis(200));
                }
            }
        });
        Watch {
            pods,
            stop,
            child,
            restarts,
            thread: Some(thread),
        }
    }

    /// Waits (`limit` at most) until one of `names` is finished: those that are.
    fn finished(&self, names: &[String], limit: Duration) -> Vec<(String, Seen)> {
        let (m, cv) = &*self.pods;
        let deadline = Instant::now() + limit;
        let mut g = m.lock().unwrap();
        loop {
            let done: Vec<(String, Seen)> = names
                .iter()
                .filter_map(|n| {
                    let s = g.get(n)?;
                    s.finished.map(|_| (n.clone(), *s))
                })
                .collect();
            let left = deadline.saturating_duration_since(Instant::now());
            if !done.is_empty() || left.is_zero() {
                return done;
            }
            g = cv.wait_timeout(g, left).unwrap().0;
        }
    }

    /// Waits (`limit` at most) until every pod of `names` is gone from the API; the
    /// names of those that are not.
    /// A pod deleted while the watch was being started again has no DELETED event: every
    /// 10 s of waiting, the pods the API lists tell which of those left are gone.
    fn gone(&self, c: &Cluster, names: &[String], limit: Duration) -> Vec<String> {
        let list = || {
            let out = run_timeout(
                &mut c.kubectl(&["-n", NS, "get", "pods", "-o", "name"]),
                Duration::from_secs(20),
            );
            out.status.success().then(|| {
                String::from_utf8_lossy(&out.stdout)
                    .lines()
                    .map(|l| l.trim_start_matches("pod/").to_string())
                    .collect::<Vec<_>>()
            })
        };
        let (m, cv) = &*self.pods;
        let deadline = Instant::now() + limit;
        let mut listed = Instant::now();
        let mut g = m.lock().unwrap();
        loop {
            let left: Vec<String> = names
                .iter()
                .filter(|n| !g.get(*n).is_some_and(|s| s.gone))
                .cloned()
                .collect();
            let time = deadline.saturating_duration_since(Instant::now());
            if left.is_empty() || time.is_zero() {
                return left;
            }
            if listed.elapsed() >= Duration::from_secs(10) {
                drop(g);
                let present = list();
                g = m.lock().unwrap();
                listed = Instant::now();
                if let Some(present) = present {
                    for n in left.iter().filter(|n| !present.contains(n)) {
                        g.entry(n.clone()).or_default().gone = true;
                    }
                    continue;
                }
            }
            g = cv
                .wait_timeout(g, time.min(Duration::from_secs(10)))
                .unwrap()
                .0;
        }
    }

    fn stop(mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(mut c) = self.child.lock().unwrap().take() {
            let _ = c.kill();
            let _ = c.wait();
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// One watch event into `pods`.
fn note(pods: &Pods, ev: &Value, now: Instant) {
    let p = &ev["object"];
    let Some(name) = p["metadata"]["name"].as_str() else {
        return;
    };
    let (m, cv) = &**pods;
    let mut m = m.lock().unwrap();
    let s = m.entry(name.to_string()).or_default();
    s.added.get_or_insert(now);
    let phase = p["status"]["phase"].as_str().unwrap_or_default();
    if s.finished.is_none() && matches!(phase, "Succeeded" | "Failed") {
        s.finished = Some((now, phase == "Succeeded"));
    }
    if ev["type"] == "DELETED" {
        s.gone = true;
    }
    cv.notify_all();
}

// ---- the load -------------------------------------------------------------------------

fn pod(c: &Cluster, name: &str, stack: Stack, sleeps: bool) -> Value {
    let command = if sleeps {
        json!(["sleep", "1"])
    } else {
        json!(["true"])
    };
    let mut spec = json!({
        "restartPolicy": "Never",
        "terminationGracePeriodSeconds": 1,
        "nodeSelector": {"kubernetes.io/hostname": stack.node},
        "containers": [{
            "name": "main",
            "image": c.image,
            "imagePullPolicy": "IfNotPresent",
            "command": command,
        }],
    });
    if stack.node == CRUSTLET_NODE {
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

/// What one stack did in the windows of its rounds.
#[derive(Default)]
struct Load {
    /// Seconds of churn (the windows).
    secs: f64,
    /// Pods seen Succeeded within a window.
    completed: u64,
    created: u64,
    failed: u64,
    /// Creation to Succeeded as the watch saw it, ms: `true` pods, `sleep 1` pods.
    quick_ms: Vec<f64>,
    sleep_ms: Vec<f64>,
    /// From the end of each window until its last pod was gone from the API, s.
    drain_secs: Vec<f64>,
}

/// Progress of the run, for the samples: the stack under load, its pods completed in
/// the current round so far and in flight.
#[derive(Default)]
struct Progress {
    stack: Mutex<Option<Stack>>,
    completed: AtomicU64,
    inflight: AtomicU64,
}

/// `secs` seconds of churn on `stack`, `inflight` pods at once; then waits for every
/// pod to be gone from the API.
#[allow(clippy::too_many_arguments)]
fn churn(
    c: &Cluster,
    api: &Api,
    watch: &Watch,
    stack: Stack,
    round: usize,
    secs: u64,
    inflight: usize,
    progress: &Progress,
    load: &mut Load,
) {
    let start = Instant::now();
    let end = start + Duration::from_secs(secs);
    let mut next = 0usize;
    // In flight: name, created (the bench's clock, for the stuck check), sleeps.
    let mut pending: Vec<(String, Instant, bool)> = Vec::new();
    let mut all: Vec<String> = Vec::new();
    progress.completed.store(0, Ordering::SeqCst);
    let mut create = |pending: &mut Vec<(String, Instant, bool)>| {
        let name = format!("{}-{round}-{next}", stack.tag);
        let sleeps = next % 2 == 1;
        next += 1;
        api.create(&pod(c, &name, stack, sleeps));
        pending.push((name.clone(), Instant::now(), sleeps));
        all.push(name);
    };
    while pending.len() < inflight {
        create(&mut pending);
    }
    while !pending.is_empty() {
        progress
            .inflight
            .store(pending.len() as u64, Ordering::SeqCst);
        let names: Vec<String> = pending.iter().map(|p| p.0.clone()).collect();
        let done = watch.finished(&names, Duration::from_secs(1));
        for (name, seen) in done {
            let i = pending.iter().position(|p| p.0 == name).unwrap();
            let (_, created, sleeps) = pending.swap_remove(i);
            let (at, ok) = seen.finished.unwrap();
            if ok {
                let ms = at
                    .duration_since(seen.added.unwrap_or(created))
                    .as_secs_f64()
                    * 1000.0;
                if sleeps {
                    load.sleep_ms.push(ms);
                } else {
                    load.quick_ms.push(ms);
                }
                if at < end {
                    load.completed += 1;
                    progress.completed.fetch_add(1, Ordering::SeqCst);
                }
            } else {
                load.failed += 1;
            }
            api.delete(&name);
            if Instant::now() < end {
                create(&mut pending);
            }
        }
        if let Some((name, created, _)) = pending.iter().find(|p| p.1.elapsed() > STUCK) {
            panic!(
                "pod {name} on {} not finished {:.0} s after its creation",
                stack.node,
                created.elapsed().as_secs_f64()
            );
        }
    }
    progress.inflight.store(0, Ordering::SeqCst);
    load.secs += secs as f64;
    load.created += all.len() as u64;
    let left = watch.gone(c, &all, STUCK);
    assert!(
        left.is_empty(),
        "{} pod(s) of {} still in the API {} s after the window: {:?}",
        left.len(),
        stack.node,
        STUCK.as_secs(),
        &left[..left.len().min(5)]
    );
    load.drain_secs
        .push(Instant::now().saturating_duration_since(end).as_secs_f64());
}

/// A pod running `true` on the stack's node, deleted and gone: the image there and the
/// agent's paths warm before the counters are first read.
fn warm_up(c: &Cluster, api: &Api, watch: &Watch, stack: Stack) {
    let name = format!("warm-{}", stack.tag);
    api.create(&pod(c, &name, stack, false));
    let names = vec![name.clone()];
    let deadline = Instant::now() + STUCK;
    while watch.finished(&names, Duration::from_secs(1)).is_empty() {
        assert!(Instant::now() < deadline, "warm-up pod {name} not finished");
    }
    api.delete(&name);
    let left = watch.gone(c, &names, STUCK);
    assert!(left.is_empty(), "warm-up pod {name} not gone");
}

// ---- the counters ---------------------------------------------------------------------

fn pct(v: &[f64], p: f64) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    let mut v = v.to_vec();
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    let i = ((p / 100.0) * (v.len() as f64 - 1.0)).round() as usize;
    v[i.min(v.len() - 1)]
}

/// Every `every`, the counters of the stack under load and the run's progress, into
/// `csv` (long format), until `stop`.
fn sampler(
    c: &Cluster,
    csv: &Path,
    every: Duration,
    progress: &Progress,
    stop: &AtomicBool,
) -> std::io::Result<()> {
    let mut f = std::fs::File::create(csv)?;
    writeln!(f, "seconds,stack,counter,value")?;
    let start = Instant::now();
    let mut next = start;
    while !stop.load(Ordering::SeqCst) {
        if Instant::now() < next {
            std::thread::sleep(Duration::from_millis(200));
            continue;
        }
        next += every;
        let Some(stack) = *progress.stack.lock().unwrap() else {
            continue;
        };
        let t = start.elapsed().as_secs();
        let mut rows = counters(c, stack);
        for (name, a) in [
            ("pods completed this round", &progress.completed),
            ("pods in flight", &progress.inflight),
        ] {
            rows.push(Counter {
                name: name.into(),
                value: a.load(Ordering::SeqCst),
                kind: Kind::Count,
                detail: String::new(),
            });
        }
        for r in rows {
            writeln!(f, "{t},{},{},{}", stack.tag, r.name, r.value)?;
        }
        f.flush()?;
    }
    Ok(())
}

fn main() {
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    if !crust_e2e::require_root(&stack::CLUSTER_TOOLS) {
        return;
    }
    let secs: u64 = env_or("BENCH_CHURN_SECS", 600);
    let inflight: usize = env_or("BENCH_INFLIGHT", 10);
    let rounds: usize = env_or::<usize>("BENCH_ROUNDS", 1).max(1);
    let settle = Duration::from_secs(env_or("BENCH_SETTLE", 30));
    let only = std::env::var("BENCH_STACKS").unwrap_or_else(|_| "crustlet,kubelet".into());
    let stacks: Vec<Stack> = [CRUST, INCUMBENT]
        .into_iter()
        .filter(|s| only.split(',').any(|o| o == s.tag))
        .collect();
    assert!(
        !stacks.is_empty(),
        "BENCH_STACKS={only}: neither crustlet nor kubelet"
    );
    let bins = kube_bins().unwrap_or_else(|m| {
        panic!(
            "no {} (hack/deps unpacks the Kubernetes binaries)",
            m.join(", ")
        )
    });
    let started = Instant::now();
    let c = Cluster::start_with(
        bins,
        crust_e2e::bin("crustd"),
        vec![PathBuf::from("/usr/lib/cni")],
        Options {
            containerd: Some(ContainerdFor::Kubelet),
            agent_cgroups: true,
            // As the kubelet's daemons run: an hour at debug writes gigabytes.
            crustd_log: Some("info"),
            ..Options::default()
        },
    );
    c.wait_node_ready(Duration::from_secs(120));
    println!(
        "cluster up in {:.1}s: kubelet v1.28.7 + containerd + runc on {NODE}, crustlet + crustd on {CRUSTLET_NODE} (the reference CNI plugins for both)",
        started.elapsed().as_secs_f32(),
    );
    let ns = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}});
    let api = Api::start(&c);
    api.call("POST", "/api/v1/namespaces", &ns.to_string(), &[]);
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
    let watch = Watch::start(&c);
    for s in &stacks {
        warm_up(&c, &api, &watch, *s);
    }

    let progress = Progress::default();
    let stop = AtomicBool::new(false);
    let mut loads: HashMap<&str, Load> = HashMap::new();
    let mut before: HashMap<&str, Vec<Counter>> = HashMap::new();
    let mut after: HashMap<&str, Vec<Counter>> = HashMap::new();
    let mut settled_after: HashMap<&str, Duration> = HashMap::new();
    std::thread::scope(|scope| {
        // The scope waits for the sampler, which runs until `stop`: set also when this
        // closure panics (a failed check), or the bench would hang there with its
        // cluster up instead of failing and tearing it down.
        struct StopOnDrop<'a>(&'a AtomicBool);
        impl Drop for StopOnDrop<'_> {
            fn drop(&mut self) {
                self.0.store(true, Ordering::SeqCst);
            }
        }
        let _stop_sampler = StopOnDrop(&stop);
        if let Some(csv) = std::env::var_os("BENCH_SAMPLES_CSV") {
            let every = Duration::from_secs(env_or("BENCH_SAMPLE_SECS", 30));
            let (c, progress, stop) = (&c, &progress, &stop);
            scope.spawn(move || {
                if let Err(e) = sampler(c, Path::new(&csv), every, progress, stop) {
                    eprintln!("samples: {e}");
                }
            });
        }
        for round in 0..rounds {
            let order: Vec<Stack> = if round % 2 == 0 {
                stacks.clone()
            } else {
                stacks.iter().rev().copied().collect()
            };
            for stack in order {
                if round == 0 {
                    std::thread::sleep(settle);
                    before.insert(stack.tag, counters(&c, stack));
                }
                *progress.stack.lock().unwrap() = Some(stack);
                eprintln!("churn: {} round {round}, {secs} s", stack.title);
                let load = loads.entry(stack.tag).or_default();
                churn(
                    &c, &api, &watch, stack, round, secs, inflight, &progress, load,
                );
                if round == rounds - 1 {
                    let (now, waited) = settled(&c, stack, &before[stack.tag], settle);
                    after.insert(stack.tag, now);
                    settled_after.insert(stack.tag, waited);
                }
            }
        }
        stop.store(true, Ordering::SeqCst);
    });
    let restarts = watch.restarts.load(Ordering::SeqCst);
    watch.stop();
    drop(api);

    let mut grew = vec![];
    for s in [CRUST, INCUMBENT] {
        if let (Some(b), Some(a)) = (before.get(s.tag), after.get(s.tag)) {
            grew.extend(table(s, b, a));
            println!(
                "(after: read {:.0} s after its last pod was gone)",
                settled_after[s.tag].as_secs_f64()
            );
        }
    }
    println!(
        "memory may grow by {} MiB per process (allocator noise); every count must be back exactly (crust's checked, the incumbent's printed)",
        NOISE_KIB / 1024
    );
    println!(
        "\nchurn: {inflight} pods in flight per node, {secs} s per stack and round, {rounds} round(s); each pod `true` or `sleep 1` by turns, deleted once Succeeded"
    );
    println!(
        "| | pods completed | pods/s | p50 | p99 | p50 `true` | p50 `sleep 1` | failed | drain |"
    );
    println!("| --- | --- | --- | --- | --- | --- | --- | --- | --- |");
    for s in [INCUMBENT, CRUST] {
        let Some(l) = loads.get(s.tag) else { continue };
        let all: Vec<f64> = l.quick_ms.iter().chain(&l.sleep_ms).copied().collect();
        println!(
            "| {} | {} | {:.2} | {:.0} ms | {:.0} ms | {:.0} ms | {:.0} ms | {} of {} | {:.1} s |",
            s.title,
            l.completed,
            l.completed as f64 / l.secs,
            pct(&all, 50.0),
            pct(&all, 99.0),
            pct(&l.quick_ms, 50.0),
            pct(&l.sleep_ms, 50.0),
            l.failed,
            l.created,
            l.drain_secs.iter().cloned().fold(0.0, f64::max),
        );
    }
    if let (Some(k), Some(cr)) = (loads.get(INCUMBENT.tag), loads.get(CRUST.tag)) {
        let rate = |l: &Load| l.completed as f64 / l.secs;
        println!(
            "crust/incumbent pods/s: {:.2} (issue 30's target >= 3)",
            rate(cr) / rate(k).max(1e-9)
        );
    }
    println!(
        "latency: creation to Succeeded as the watch saw it (restarted {restarts} time(s)); drain: end of the window to the last pod gone from the API (the longest round)"
    );
    c.teardown();
    if !grew.is_empty() {
        panic!("crust counters grew over the run:\n  {}", grew.join("\n  "));
    }
    println!("crust: nothing grew");
}
