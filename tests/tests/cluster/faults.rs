//! Faults from outside the runtime, on the crustlet on crustd and on the real kubelet on
//! containerd side by side in one cluster (the incumbent is the bar): the node agent
//! SIGKILLed in the middle of a burst of creations and deletions, the runtime SIGKILLed
//! the same way, a container that outgrows its memory limit, a node under memory
//! pressure, and a container flooding its log. Each check runs its scenario on both nodes and prints what it measured for
//! each, then asserts what a node operator relies on, on both.
//!
//! Its own harness (`harness = false`), one cluster for every check; without root or
//! the tools it skips loudly, except under `CI=true`, where that is a failure. Arguments
//! that do not start with `-` filter checks by name.

use crust_e2e::cluster::{
    run_timeout, wait_for, Cluster, ContainerdFor, Options, CRUSTLET_NODE, CRUSTLET_TAINT, NODE,
};
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::io::Read;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// How long a check waits for a pod or a command (two cores, two nodes, one control
/// plane: behaviour is checked here, times are printed, not asserted).
const T: Duration = Duration::from_secs(120);

/// The log rotation both agents run with: small, so that a flooding container rotates
/// many times in the check's seconds.
const LOG_MAX_FILES: usize = 3;
const AGENT_ARGS: &[&str] = &[
    "--container-log-max-size=1Mi",
    "--container-log-max-files=3",
];

fn s(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// One node as the checks see it: the crustlet on crustd, or the kubelet on containerd.
#[derive(Clone, Copy)]
struct Side<'a> {
    c: &'a Cluster,
    /// Who runs the node, for the figures: `crustlet+crustd`, `kubelet+containerd`.
    name: &'static str,
    node: &'static str,
    /// The namespace of this side's pods.
    ns: &'static str,
    crust: bool,
}

impl<'a> Side<'a> {
    fn crust(c: &'a Cluster) -> Self {
        Side {
            c,
            name: "crustlet+crustd",
            node: CRUSTLET_NODE,
            ns: "faults-crust",
            crust: true,
        }
    }

    fn incumbent(c: &'a Cluster) -> Self {
        Side {
            c,
            name: "kubelet+containerd",
            node: NODE,
            ns: "faults-ctrd",
            crust: false,
        }
    }

    fn kubectl(&self, args: &[&str]) -> Command {
        let mut cmd = self.c.kubectl(&["-n", self.ns]);
        cmd.args(args);
        cmd
    }

    fn ok(&self, args: &[&str]) -> String {
        let out = run_timeout(&mut self.kubectl(args), T);
        assert!(
            out.status.success(),
            "{}: kubectl {args:?} ({}): {}{}",
            self.name,
            out.status,
            // (a flooding container's log is not a message)
            crust_e2e::tail(&s(&out.stdout), 5),
            crust_e2e::tail(&s(&out.stderr), 5)
        );
        s(&out.stdout)
    }

    fn apply(&self, objs: Vec<Value>) {
        let list = json!({"apiVersion": "v1", "kind": "List", "items": objs});
        let path = self
            .c
            .path(&format!("{}.json", crust_e2e::unique("faults-obj")));
        std::fs::write(&path, list.to_string()).unwrap();
        self.ok(&["apply", "-f", path.to_str().unwrap()]);
    }

    /// `crictl` against this node's runtime.
    fn crictl(&self, args: &[&str]) -> Command {
        if self.crust {
            self.c.crustlet_crictl(args)
        } else {
            self.c.crictl(args)
        }
    }

    fn crictl_json(&self, args: &[&str]) -> Value {
        let out = run_timeout(&mut self.crictl(args), T);
        assert!(
            out.status.success(),
            "{}: crictl {args:?}: {}",
            self.name,
            s(&out.stderr)
        );
        serde_json::from_slice(&out.stdout).unwrap()
    }

    fn agent_pid(&self) -> Option<u32> {
        if self.crust {
            self.c.crustlet_pid()
        } else {
            self.c.kubelet_pid()
        }
    }

    fn runtime_pid(&self) -> Option<u32> {
        if self.crust {
            self.c.crustlet_crustd_pid()
        } else {
            self.c.containerd_pid()
        }
    }

    fn kill_agent(&self) {
        if self.crust {
            self.c.kill_crustlet()
        } else {
            self.c.kill_kubelet()
        }
    }

    fn start_agent(&self) {
        if self.crust {
            self.c.start_crustlet()
        } else {
            self.c.start_kubelet()
        }
    }

    fn kill_runtime(&self) {
        if self.crust {
            self.c.kill_crustlet_crustd()
        } else {
            self.c.kill_containerd()
        }
    }

    fn start_runtime(&self) {
        if self.crust {
            self.c.start_crustlet_crustd()
        } else {
            self.c.start_containerd()
        }
    }

    /// A pod of one container `main` running `script` on this side's node.
    fn pod(&self, name: &str, script: &str) -> Value {
        json!({
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name, "namespace": self.ns, "labels": {"suite": "faults"}},
            "spec": {
                "nodeName": self.node,
                "terminationGracePeriodSeconds": 2,
                "tolerations": [{"key": CRUSTLET_TAINT, "operator": "Exists"}],
                "containers": [{
                    "name": "main",
                    "image": self.c.image,
                    "imagePullPolicy": "IfNotPresent",
                    "command": ["sh", "-c", script],
                }],
            }
        })
    }

    fn get_pod(&self, name: &str) -> Option<Value> {
        let out = run_timeout(&mut self.kubectl(&["get", "pod", name, "-o", "json"]), T);
        out.status
            .success()
            .then(|| serde_json::from_slice(&out.stdout).ok())
            .flatten()
    }

    /// Waits for pod `name` to satisfy `pred`; panics with its last status and events.
    fn wait_pod(&self, name: &str, what: &str, pred: impl Fn(&Value) -> bool) -> Value {
        self.c
            .wait_pod(self.ns, name, T, pred)
            .unwrap_or_else(|last| {
                let ev = run_timeout(
                    &mut self.kubectl(&[
                        "get",
                        "events",
                        "--field-selector",
                        &format!("involvedObject.name={name}"),
                    ]),
                    T,
                );
                panic!(
                    "{}: pod {name} not {what} after {T:?}; last seen: {}\nevents:\n{}",
                    self.name,
                    last.map(|p| p["status"].to_string()).unwrap_or_default(),
                    s(&ev.stdout)
                )
            })
    }

    fn wait_running(&self, name: &str) -> Value {
        self.wait_pod(name, "Running", running)
    }

    fn wait_gone(&self, name: &str) {
        wait_for(&format!("{}: pod {name} deleted", self.name), T, |_| {
            self.get_pod(name).is_none().then_some(())
        });
    }

    /// The Node's Ready status (`True`, `False`, `Unknown`), or "" if it cannot be read.
    fn ready(&self) -> String {
        let out = run_timeout(
            &mut self.c.kubectl(&[
                "get",
                "node",
                self.node,
                "-o",
                r#"jsonpath={.status.conditions[?(@.type=="Ready")].status}"#,
            ]),
            Duration::from_secs(20),
        );
        s(&out.stdout).trim().to_string()
    }

    /// This side's pods as its runtime has them, by pod name: sandboxes (any state),
    /// of them ready, and containers named `main` (any state).
    fn runtime_pods(&self) -> BTreeMap<String, RuntimePod> {
        let label = format!("io.kubernetes.pod.namespace={}", self.ns);
        let mut out: BTreeMap<String, RuntimePod> = BTreeMap::new();
        let pods = self.crictl_json(&["pods", "-o", "json", "--label", &label]);
        for p in pods["items"].as_array().into_iter().flatten() {
            let name = p["metadata"]["name"].as_str().unwrap_or_default();
            let e = out.entry(name.to_string()).or_default();
            e.sandboxes += 1;
            if p["state"] == "SANDBOX_READY" {
                e.ready += 1;
            }
        }
        let ctrs = self.crictl_json(&["ps", "-a", "-o", "json", "--label", &label]);
        for c in ctrs["containers"].as_array().into_iter().flatten() {
            let pod = c["labels"]["io.kubernetes.pod.name"]
                .as_str()
                .unwrap_or_default();
            let e = out.entry(pod.to_string()).or_default();
            e.containers
                .push(c["id"].as_str().unwrap_or_default().to_string());
        }
        out
    }
}

#[derive(Default, Debug)]
struct RuntimePod {
    sandboxes: usize,
    ready: usize,
    containers: Vec<String>,
}

fn running(p: &Value) -> bool {
    p["status"]["phase"] == "Running"
        && p["status"]["containerStatuses"]
            .as_array()
            .is_some_and(|a| a.iter().all(|s| s["state"]["running"].is_object()))
}

fn main_status(p: &Value) -> Value {
    p["status"]["containerStatuses"]
        .as_array()
        .and_then(|a| a.iter().find(|s| s["name"] == "main"))
        .cloned()
        .unwrap_or(Value::Null)
}

/// The runtime's id of pod `p`'s `main` (without `<runtime>://`).
fn container_id(p: &Value) -> String {
    let raw = main_status(p)["containerID"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    raw.split_once("://")
        .map(|(_, id)| id.to_string())
        .unwrap_or(raw)
}

/// CPU seconds process `pid` has used (user + system), or None once it is gone.
fn cpu_seconds(pid: u32) -> Option<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The fields after the command (which may hold spaces) in its parentheses.
    let rest = &stat[stat.rfind(')')? + 2..];
    let f: Vec<&str> = rest.split(' ').collect();
    let ticks: u64 = f.get(11)?.parse::<u64>().ok()? + f.get(12)?.parse::<u64>().ok()?;
    // SAFETY: sysconf reads a constant of the system; no memory is passed.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as f64;
    Some(ticks as f64 / hz)
}

/// The anonymous memory of process `pid` in KiB (`RssAnon`), or 0.
fn anon_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("RssAnon:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

/// Bytes process `pid` has written through write(2) and its kin (`wchar`), or 0.
fn written(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/io"))
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("wchar:"))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0)
}

fn parent_of(pid: u32) -> Option<u32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = &stat[stat.rfind(')')? + 2..];
    rest.split(' ').nth(1)?.parse().ok()
}

/// What a check prints, per side, in the summary table.
static FIGURES: Mutex<Vec<String>> = Mutex::new(Vec::new());

fn figure(side: &Side, check: &str, what: String) {
    let line = format!("{check:<24} {:<20} {what}", side.name);
    println!("  {line}");
    FIGURES.lock().unwrap().push(line);
}

/// Pods the burst checks keep running through the fault (one of them with a ConfigMap
/// volume), pods they delete during it, and pods they create during it.
const KEEP: usize = 3;
const DOOMED: usize = 3;
const BURST: usize = 12;

/// The burst checks' state from before the fault.
struct Burst {
    /// keep-i's container id.
    kept: Vec<String>,
    /// The ConfigMap volume's `..data` target in keep-0.
    data: String,
}

fn burst_prepare(side: &Side, tag: &str) -> Burst {
    let cm = format!("{tag}-cm");
    side.apply(vec![json!({
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": cm, "namespace": side.ns},
        "data": {"key": "value"},
    })]);
    let mut pods = vec![];
    for i in 0..KEEP {
        let mut p = side.pod(&format!("{tag}-keep-{i}"), "exec sleep 3600");
        if i == 0 {
            p["spec"]["volumes"] = json!([{"name": "cfg", "configMap": {"name": cm}}]);
            p["spec"]["containers"][0]["volumeMounts"] =
                json!([{"name": "cfg", "mountPath": "/etc/cfg"}]);
        }
        pods.push(p);
    }
    for i in 0..DOOMED {
        pods.push(side.pod(&format!("{tag}-doomed-{i}"), "exec sleep 3600"));
    }
    side.apply(pods);
    let mut kept = vec![];
    for i in 0..KEEP {
        kept.push(container_id(&side.wait_running(&format!("{tag}-keep-{i}"))));
    }
    for i in 0..DOOMED {
        side.wait_running(&format!("{tag}-doomed-{i}"));
    }
    let data = side
        .ok(&[
            "exec",
            &format!("{tag}-keep-0"),
            "--",
            "readlink",
            "/etc/cfg/..data",
        ])
        .trim()
        .to_string();
    assert!(!data.is_empty(), "{}: no ..data in the volume", side.name);
    Burst { kept, data }
}

/// Starts the burst (BURST pods created, DOOMED deleted, in two kubectl calls), calls
/// `fault` as soon as the runtime is making the burst's first sandbox, and returns how
/// many of the burst's containers the runtime had made by then.
fn burst_start(side: &Side, tag: &str, fault: impl FnOnce()) -> usize {
    let pods = (0..BURST)
        .map(|i| side.pod(&format!("{tag}-burst-{i}"), "exec sleep 3600"))
        .collect();
    side.apply(pods);
    let doomed: Vec<String> = (0..DOOMED).map(|i| format!("{tag}-doomed-{i}")).collect();
    let mut args = vec!["delete", "pod", "--wait=false"];
    args.extend(doomed.iter().map(String::as_str));
    side.ok(&args);
    let prefix = format!("{tag}-burst-");
    // The first IP host-local reserves for the burst (its files in the network's data
    // dir, the same plugin on both sides): the runtime is in the middle of the burst's
    // first RunPodSandbox. A read of a folder, not a CRI call, so the fault comes that
    // early (polling crictl, crust had made every pod before the first answer).
    let ips = side.c.path(if side.crust {
        "crustlet-ipam/crust-let"
    } else {
        "ctrd-ipam/crust-ctrd"
    });
    let reserved = || -> std::collections::BTreeSet<String> {
        std::fs::read_dir(&ips)
            .into_iter()
            .flatten()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| n.parse::<std::net::Ipv4Addr>().is_ok())
            .collect()
    };
    let before = reserved();
    let deadline = Instant::now() + Duration::from_secs(60);
    while reserved().is_subset(&before) {
        assert!(
            Instant::now() < deadline,
            "{}: no IP reserved for the burst in 60 s",
            side.name
        );
        std::thread::sleep(Duration::from_millis(2));
    }
    fault();
    let label = format!("io.kubernetes.pod.namespace={}", side.ns);
    let out = run_timeout(
        &mut side.crictl(&["ps", "-a", "-o", "json", "--label", &label]),
        T,
    );
    let v: Value = serde_json::from_slice(&out.stdout).unwrap_or(Value::Null);
    v["containers"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|c| {
            c["labels"]["io.kubernetes.pod.name"]
                .as_str()
                .is_some_and(|n| n.starts_with(&prefix))
        })
        .count()
}

/// After the fault: every pod that should run runs once, the deleted ones are gone from
/// the API and the runtime, the kept ones were not touched. Returns seconds until all
/// burst pods ran, counted from `since`.
fn burst_check(side: &Side, tag: &str, before: &Burst, since: Instant) -> f64 {
    for i in 0..BURST {
        side.wait_running(&format!("{tag}-burst-{i}"));
    }
    let all_running = since.elapsed().as_secs_f64();
    for i in 0..DOOMED {
        side.wait_gone(&format!("{tag}-doomed-{i}"));
    }
    let doomed = format!("{tag}-doomed-");
    wait_for(
        &format!("{}: the deleted pods gone from the runtime", side.name),
        T,
        |last| {
            let rt = side.runtime_pods();
            let left: Vec<&String> = rt.keys().filter(|k| k.starts_with(&doomed)).collect();
            *last = format!("{left:?}");
            left.is_empty().then_some(())
        },
    );
    let rt = side.runtime_pods();
    for i in 0..BURST {
        let name = format!("{tag}-burst-{i}");
        let p = side.get_pod(&name).unwrap();
        let st = main_status(&p);
        assert_eq!(st["restartCount"], 0, "{}: {name}: {st}", side.name);
        let r = &rt[&name];
        assert_eq!(r.ready, 1, "{}: {name}: ready sandboxes {r:?}", side.name);
        assert_eq!(
            r.containers,
            vec![container_id(&p)],
            "{}: {name}: its containers in the runtime",
            side.name
        );
    }
    for i in 0..KEEP {
        let name = format!("{tag}-keep-{i}");
        let p = side.get_pod(&name).unwrap();
        assert!(running(&p), "{}: {name}: {}", side.name, p["status"]);
        assert_eq!(
            container_id(&p),
            before.kept[i],
            "{}: {name} has a new container",
            side.name
        );
        assert_eq!(main_status(&p)["restartCount"], 0, "{}: {name}", side.name);
        let r = &rt[&name];
        assert_eq!(
            (r.sandboxes, r.ready, r.containers.len()),
            (1, 1, 1),
            "{}: {name}: {r:?}",
            side.name
        );
    }
    let data = side
        .ok(&[
            "exec",
            &format!("{tag}-keep-0"),
            "--",
            "readlink",
            "/etc/cfg/..data",
        ])
        .trim()
        .to_string();
    assert_eq!(
        data, before.data,
        "{}: the ConfigMap volume was remade under its container",
        side.name
    );
    // Nothing in the runtime but the pods the API has.
    let stray: Vec<(&String, &RuntimePod)> = rt
        .iter()
        .filter(|(k, _)| {
            !k.starts_with(&format!("{tag}-keep-")) && !k.starts_with(&format!("{tag}-burst-"))
        })
        .collect();
    assert!(
        stray.is_empty(),
        "{}: left in the runtime: {stray:?}",
        side.name
    );
    all_running
}

/// Deletes what a check made in this side's namespace and waits for the runtime to hold
/// none of it.
fn cleanup(side: &Side) {
    side.ok(&["delete", "pods,configmaps", "--all", "--wait=false"]);
    wait_for(
        &format!("{}: the namespace's pods gone from the runtime", side.name),
        T,
        |last| {
            let rt = side.runtime_pods();
            *last = format!("{:?}", rt.keys().collect::<Vec<_>>());
            rt.is_empty().then_some(())
        },
    );
}

/// The node agent (the crustlet, the kubelet) SIGKILLed while it creates and deletes
/// pods, started again 3 s later: every pod runs once (one sandbox, one container), the
/// deletions finish, the running pods and their volumes are untouched, nothing leaks.
fn agent_killed_mid_burst(side: &Side) {
    let tag = "ak";
    let before = burst_prepare(side, tag);
    let started = burst_start(side, tag, || side.kill_agent());
    std::thread::sleep(Duration::from_secs(3));
    side.start_agent();
    let back = Instant::now();
    let took = burst_check(side, tag, &before, back);
    figure(
        side,
        "agent_killed_mid_burst",
        format!(
            "killed with {started} of {BURST} new containers made; all {BURST} running {took:.1} s after the restart; 0 restarts, 1 sandbox and 1 container each"
        ),
    );
}

/// The runtime (crustd, containerd) SIGKILLed during the same burst, down for 5 s: the
/// node is NotReady at most while it is down and a little after, and once it is back
/// every pod runs once and nothing is started twice.
fn runtime_killed_mid_burst(side: &Side) {
    let tag = "rk";
    let before = burst_prepare(side, tag);
    let samples: Mutex<Vec<(Instant, String)>> = Mutex::default();
    let stop = AtomicBool::new(false);
    let killed: Mutex<Option<Instant>> = Mutex::default();
    let (started, back, took) = std::thread::scope(|sc| {
        sc.spawn(|| {
            while !stop.load(Ordering::Relaxed) {
                let r = side.ready();
                samples.lock().unwrap().push((Instant::now(), r));
                std::thread::sleep(Duration::from_millis(500));
            }
        });
        // The sampler stops whatever happens here (the scope waits for it).
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let started = burst_start(side, tag, || {
                *killed.lock().unwrap() = Some(Instant::now());
                side.kill_runtime()
            });
            std::thread::sleep(Duration::from_secs(5));
            side.start_runtime();
            let back = Instant::now();
            let took = burst_check(side, tag, &before, back);
            // Ready again, and staying so a while.
            wait_for(&format!("{}: the node Ready again", side.name), T, |last| {
                *last = side.ready();
                (*last == "True").then_some(())
            });
            std::thread::sleep(Duration::from_secs(10));
            (started, back, took)
        }));
        stop.store(true, Ordering::Relaxed);
        r.unwrap_or_else(|e| std::panic::resume_unwind(e))
    });
    let killed = killed.lock().unwrap().expect("the runtime was killed");
    let samples = samples.lock().unwrap();
    let not_ready: Vec<&(Instant, String)> = samples.iter().filter(|(_, r)| r != "True").collect();
    let first = not_ready
        .first()
        .map(|(t, _)| t.duration_since(killed).as_secs_f64());
    let last_nr = not_ready.last().map(|(t, _)| *t);
    let seconds_not_ready = match (not_ready.first(), last_nr) {
        (Some((a, _)), Some(b)) => b.duration_since(*a).as_secs_f64() + 0.5,
        _ => 0.0,
    };
    if let Some(last_nr) = last_nr {
        // Not NotReady long after the runtime came back: 30 s covers a status update
        // and the agent's look at the runtime.
        let after = last_nr.saturating_duration_since(back);
        assert!(
            after < Duration::from_secs(30),
            "{}: still NotReady {after:?} after the runtime came back",
            side.name
        );
    }
    figure(
        side,
        "runtime_killed_mid_burst",
        format!(
            "killed with {started} of {BURST} new containers made, down 5 s; NotReady {seconds_not_ready:.1} s{}; all {BURST} running {took:.1} s after the restart; 0 restarts, 1 sandbox and 1 container each",
            first.map(|f| format!(" (from {f:.1} s after the kill)")).unwrap_or_default()
        ),
    );
}

/// A container that outgrows its memory limit: OOMKilled, as the API, `kubectl get` and
/// `kubectl describe` show it.
fn oom_killed(side: &Side) {
    let mut p = side.pod(
        "oom",
        "x=$(head -c 200000000 /dev/zero | tr '\\0' a); echo survived",
    );
    p["spec"]["restartPolicy"] = json!("Never");
    p["spec"]["containers"][0]["resources"] =
        json!({"limits": {"memory": "24Mi"}, "requests": {"memory": "24Mi"}});
    let t = Instant::now();
    side.apply(vec![p]);
    let p = side.wait_pod("oom", "Failed", |p| p["status"]["phase"] == "Failed");
    let took = t.elapsed().as_secs_f64();
    let term = &main_status(&p)["state"]["terminated"];
    assert_eq!(term["reason"], "OOMKilled", "{}: {term}", side.name);
    assert_eq!(term["exitCode"], 137, "{}: {term}", side.name);
    let get = side.ok(&["get", "pod", "oom", "--no-headers"]);
    assert!(
        get.contains("OOMKilled"),
        "{}: kubectl get: {get}",
        side.name
    );
    let describe = side.ok(&["describe", "pod", "oom"]);
    let reason = describe
        .lines()
        .find(|l| l.trim_start().starts_with("Reason:") && l.contains("OOMKilled"));
    assert!(
        reason.is_some(),
        "{}: kubectl describe:\n{describe}",
        side.name
    );
    figure(
        side,
        "oom_killed",
        format!("OOMKilled (137) {took:.1} s after the apply"),
    );
}

/// A container writing its log as fast as it can for 25 s, with both agents rotating at
/// 1 MiB keeping 3 files: the log stays bounded (at most 3 files once rotated), `kubectl
/// logs` and `logs -f` keep working through the rotations, and the CPU and memory of the
/// runtime's process for the container (crust's monitor, containerd's shim), of the
/// runtime and of the agent are measured, with how long another pod takes to start.
fn log_flood(side: &Side) {
    // A quiet pod's start, then one during the flood.
    let quiet_start = time_pod_start(side, "lf-quiet");
    let line = "flood ".repeat(16);
    side.apply(vec![side.pod("lf-flood", &format!("exec yes '{line}'"))]);
    let p = side.wait_running("lf-flood");
    let id = container_id(&p);
    let info = side.crictl_json(&["inspect", &id]);
    let pid = info["info"]["pid"].as_u64().expect("the container's pid") as u32;
    let log_path = info["status"]["logPath"].as_str().unwrap().to_string();
    let monitor = parent_of(pid).expect("the container's parent");
    let agent = side.agent_pid().unwrap();
    let runtime = side.runtime_pid().unwrap();
    // The log as the node sees it (the agents run in the node's mount namespace).
    let log = std::path::PathBuf::from(format!("/proc/{agent}/root{log_path}"));
    let dir = log.parent().unwrap().to_path_buf();
    let cpu0 = [monitor, runtime, agent].map(|p| cpu_seconds(p).unwrap_or(0.0));
    // Who writes the log file: crust's monitor itself; under containerd, the shim
    // copies the container's output into a FIFO that containerd writes to the file.
    let writer = if side.crust { monitor } else { runtime };
    let written0 = written(writer);

    // `kubectl logs -f` through the flood: bytes read, and when the last came.
    let follow_bytes = Arc::new(AtomicU64::new(0));
    let mut follow = side
        .kubectl(&["logs", "-f", "lf-flood", "--tail=1"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let reader = {
        let mut out = follow.stdout.take().unwrap();
        let n = follow_bytes.clone();
        std::thread::spawn(move || {
            let mut buf = vec![0u8; 1 << 16];
            while let Ok(k) = out.read(&mut buf) {
                if k == 0 {
                    break;
                }
                n.fetch_add(k as u64, Ordering::Relaxed);
            }
        })
    };
    let t = Instant::now();
    let mut max_bytes = 0u64;
    let mut max_files = 0usize;
    let mut rotations_seen = std::collections::BTreeSet::new();
    let mut during_start = None;
    let mut anon_max = [0u64; 3];
    while t.elapsed() < Duration::from_secs(25) {
        let mut bytes = 0;
        let mut files = 0;
        for e in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
            files += 1;
            bytes += e.metadata().map(|m| m.len()).unwrap_or(0);
            let n = e.file_name().to_string_lossy().into_owned();
            if n != "0.log" {
                rotations_seen.insert(n);
            }
        }
        max_bytes = max_bytes.max(bytes);
        max_files = max_files.max(files);
        for (m, p) in anon_max.iter_mut().zip([monitor, runtime, agent]) {
            *m = (*m).max(anon_kib(p));
        }
        if during_start.is_none() && t.elapsed() > Duration::from_secs(8) {
            during_start = Some(time_pod_start(side, "lf-during"));
        }
        std::thread::sleep(Duration::from_millis(500));
    }
    let cpu1 = [monitor, runtime, agent].map(|p| cpu_seconds(p).unwrap_or(0.0));
    let logged = written(writer).saturating_sub(written0) as f64 / (1u64 << 20) as f64;
    let secs = t.elapsed().as_secs_f64();
    let followed_then = follow_bytes.load(Ordering::Relaxed);
    std::thread::sleep(Duration::from_secs(2));
    let followed_now = follow_bytes.load(Ordering::Relaxed);
    let _ = follow.kill();
    let _ = follow.wait();
    let _ = reader.join();

    // Still rotating: at most LOG_MAX_FILES files (a rotation may be mid-way: the next
    // `N.log` made before the oldest goes), and `kubectl logs` reads the newest lines.
    assert!(
        rotations_seen.len() >= 2,
        "{}: the log was not rotated: {rotations_seen:?}",
        side.name
    );
    let files_now = std::fs::read_dir(&dir).map(|r| r.count()).unwrap_or(0);
    assert!(
        files_now <= LOG_MAX_FILES + 1,
        "{}: {files_now} files in {}",
        side.name,
        dir.display()
    );
    assert!(
        followed_now > followed_then,
        "{}: kubectl logs -f stopped after {followed_then} bytes",
        side.name
    );
    let tail = side.ok(&["logs", "lf-flood", "--tail=2"]);
    assert!(tail.contains("flood flood"), "{}: {tail:?}", side.name);
    assert!(
        running(&side.get_pod("lf-flood").unwrap()),
        "{}: the flooding pod stopped",
        side.name
    );
    let cpu: Vec<String> = cpu0
        .iter()
        .zip(cpu1)
        .map(|(a, b)| format!("{:.0}%", (b - a) / secs * 100.0))
        .collect();
    let cpu_total: f64 = cpu0.iter().zip(cpu1).map(|(a, b)| b - a).sum();
    figure(
        side,
        "log_flood",
        format!(
            "{logged:.0} MiB logged in {secs:.0} s, {:.2} CPU s per 100 MiB (monitor+runtime+agent: {}); {:.0} MiB followed by logs -f; log dir at most {:.1} MiB in {max_files} files ({} rotated files seen); anon KiB {}/{}/{}; another pod starts in {quiet_start:.1} s quiet, {:.1} s during",
            cpu_total / logged.max(1.0) * 100.0,
            cpu.join("/"),
            followed_now as f64 / (1 << 20) as f64,
            max_bytes as f64 / (1 << 20) as f64,
            rotations_seen.len(),
            anon_max[0],
            anon_max[1],
            anon_max[2],
            during_start.unwrap_or(0.0),
        ),
    );
}

/// The hard eviction thresholds both agents run with in the suite (the cluster's: low
/// enough that a busy CI disk puts no node under pressure), memory's replaced.
fn eviction_hard(memory_available_ki: u64) -> String {
    format!(
        "--eviction-hard=memory.available<{memory_available_ki}Ki,nodefs.available<1%,nodefs.inodesFree<1%,imagefs.available<1%"
    )
}

/// memory.available as this side's agent computes it, in bytes: the crustlet takes the
/// host's MemAvailable; the kubelet, capacity less the root cgroup's working set (its
/// summary API's `node.memory.availableBytes`).
fn memory_available(side: &Side) -> u64 {
    if side.crust {
        let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap();
        let kib: u64 = meminfo
            .lines()
            .find_map(|l| l.strip_prefix("MemAvailable:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .expect("MemAvailable");
        kib * 1024
    } else {
        let path = format!("/api/v1/nodes/{}/proxy/stats/summary", side.node);
        let out = run_timeout(&mut side.c.kubectl(&["get", "--raw", &path]), T);
        let v: Value = serde_json::from_slice(&out.stdout).unwrap_or(Value::Null);
        v["node"]["memory"]["availableBytes"]
            .as_u64()
            .unwrap_or_else(|| panic!("the kubelet's summary: {}", s(&out.stderr)))
    }
}

fn restart_agent_with(side: &Side, extra: &[String]) {
    if side.crust {
        side.c.stop_crustlet();
        side.c.start_crustlet_with(extra);
    } else {
        side.c.stop_kubelet();
        side.c.start_kubelet_with(extra);
    }
}

/// A pod that allocates 300 MB (its shell keeps the string it read; no `exec`) on a node
/// whose agent was restarted with a hard threshold 150 MiB below the memory available:
/// the agent evicts that pod (BestEffort, using more than it requests), not its
/// Guaranteed neighbour, before the kernel's OOM killer has to; the evicted pod is
/// Failed with reason Evicted, the kubelet's message and a DisruptionTarget condition.
fn memory_pressure_eviction(side: &Side) {
    let mut quiet = side.pod("ev-guaranteed", "exec sleep 3600");
    quiet["spec"]["containers"][0]["resources"] = json!({
        "limits": {"memory": "64Mi", "cpu": "50m"},
        "requests": {"memory": "64Mi", "cpu": "50m"},
    });
    // The hog allocates when the test says so (`/tmp/go`), once its agent runs with the
    // threshold: what is tested is the eviction manager, not admission after a restart
    // on a node already under pressure (where the kubelet rejects a BestEffort pod).
    let hog = side.pod(
        "ev-hog",
        "while [ ! -e /tmp/go ]; do sleep 0.2; done; \
         x=$(head -c 300000000 /dev/zero | tr '\\0' a); echo allocated; sleep 3600",
    );
    side.apply(vec![quiet, hog]);
    let quiet_id = container_id(&side.wait_running("ev-guaranteed"));
    side.wait_running("ev-hog");
    // Pressure once the hog holds half of what it will.
    let available = memory_available(side);
    let threshold_ki = (available / 1024).saturating_sub(150 * 1024);
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        restart_agent_with(side, &[eviction_hard(threshold_ki)]);
        wait_for(&format!("{} Ready", side.node), T, |last| {
            *last = side.ready();
            (*last == "True").then_some(())
        });
        // (The Node was Ready before the restart too: the agent's server may not be
        // listening yet.)
        wait_for(&format!("{}: exec in ev-hog", side.name), T, |last| {
            let out = run_timeout(
                &mut side.kubectl(&["exec", "ev-hog", "--", "touch", "/tmp/go"]),
                T,
            );
            *last = s(&out.stderr);
            out.status.success().then_some(())
        });
        let t = Instant::now();
        let p = side.wait_pod("ev-hog", "Evicted", |p| p["status"]["phase"] == "Failed");
        let took = t.elapsed().as_secs_f64();
        let st = &p["status"];
        assert_eq!(st["reason"], "Evicted", "{}: {st}", side.name);
        let msg = st["message"].as_str().unwrap_or_default();
        assert!(
            msg.contains("low on resource: memory") && msg.contains("Container main was using"),
            "{}: {msg}",
            side.name
        );
        let disruption = st["conditions"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|c| c["type"] == "DisruptionTarget")
            .cloned()
            .unwrap_or(Value::Null);
        assert_eq!(disruption["status"], "True", "{}: {st}", side.name);
        assert_eq!(
            disruption["reason"], "TerminationByKubelet",
            "{}: {st}",
            side.name
        );
        let q = side.get_pod("ev-guaranteed").unwrap();
        assert!(
            running(&q),
            "{}: the Guaranteed pod: {}",
            side.name,
            q["status"]
        );
        assert_eq!(
            container_id(&q),
            quiet_id,
            "{}: the Guaranteed pod restarted",
            side.name
        );
        took
    }));
    // The suite's thresholds back, whatever happened.
    restart_agent_with(side, &[]);
    let took = result.unwrap_or_else(|e| std::panic::resume_unwind(e));
    figure(
        side,
        "memory_pressure_eviction",
        format!(
            "the pod allocating 300 MB Evicted {took:.1} s after it began (memory.available<{} MiB, {} MiB available before), its Guaranteed neighbour untouched",
            threshold_ki / 1024,
            available >> 20
        ),
    );
}

/// Seconds from the apply of a sleeping pod `name` to its Running status in the API.
fn time_pod_start(side: &Side, name: &str) -> f64 {
    let t = Instant::now();
    side.apply(vec![side.pod(name, "exec sleep 3600")]);
    side.wait_running(name);
    t.elapsed().as_secs_f64()
}

type CheckFn = fn(&Side);

struct Check {
    name: &'static str,
    f: CheckFn,
    /// Run on both sides at the same time (faults that do not measure CPU), or one
    /// side after the other.
    together: bool,
}

fn panic_text(e: &(dyn std::any::Any + Send)) -> String {
    e.downcast_ref::<String>()
        .cloned()
        .or_else(|| e.downcast_ref::<&str>().map(|s| s.to_string()))
        .unwrap_or_else(|| "panic".into())
}

fn run_check(c: &Cluster, ch: &Check) -> Vec<String> {
    let sides = [Side::crust(c), Side::incumbent(c)];
    let mut failures = vec![];
    // The incumbent's behaviour is the bar, not the test's subject: where it does not
    // do what the check asks of crust, that is printed beside crust's figures (and
    // written up in docs/fault-tests.md), not failed.
    let one = |side: Side| {
        let e = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            // Whatever a check before this one left.
            cleanup(&side);
            (ch.f)(&side)
        }))
        .err()?;
        let msg = panic_text(&*e);
        if side.crust {
            Some(format!("{}: {msg}", side.name))
        } else {
            let short: String = msg.chars().take(600).collect();
            figure(&side, ch.name, format!("does not meet the check: {short}"));
            None
        }
    };
    if ch.together {
        std::thread::scope(|sc| {
            let hs: Vec<_> = sides
                .iter()
                .map(|side| sc.spawn(move || one(*side)))
                .collect();
            for h in hs {
                failures.extend(h.join().unwrap());
            }
        });
    } else {
        for side in sides {
            failures.extend(one(side));
        }
    }
    failures
}

fn main() {
    let signals = crust_e2e::block_signals();
    let filters: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with('-'))
        .collect();
    let tools = [
        "ip",
        "nsenter",
        "unshare",
        "busybox",
        "docker-registry",
        "skopeo",
        "openssl",
        "iptables",
        "containerd",
        "containerd-shim-runc-v2",
        "runc",
    ];
    let (bins, portmap_dir) = crust_e2e::cluster::suite_needs("faults suite", &tools);
    let all = [
        Check {
            name: "agent_killed_mid_burst",
            f: agent_killed_mid_burst,
            together: true,
        },
        Check {
            name: "runtime_killed_mid_burst",
            f: runtime_killed_mid_burst,
            together: true,
        },
        Check {
            name: "oom_killed",
            f: oom_killed,
            together: true,
        },
        Check {
            name: "memory_pressure_eviction",
            f: memory_pressure_eviction,
            together: false,
        },
        Check {
            name: "log_flood",
            f: log_flood,
            together: false,
        },
    ];
    let checks: Vec<&Check> = all
        .iter()
        .filter(|ch| filters.is_empty() || filters.iter().any(|f| ch.name.contains(f.as_str())))
        .collect();
    println!(
        "\nrunning {} tests (one cluster: the crustlet on crustd and the kubelet on containerd)",
        checks.len()
    );
    std::panic::set_hook(Box::new(|_| {}));
    let started = Instant::now();
    let cluster = std::panic::catch_unwind(|| {
        Cluster::start_with(
            bins,
            crust_e2e::bin("crustd"),
            vec![crust_e2e::bin_dir(), portmap_dir],
            Options {
                containerd: Some(ContainerdFor::Kubelet),
                crustd_log: Some("info"),
                agent_args: AGENT_ARGS,
                ..Options::default()
            },
        )
    });
    let mut failed: Vec<(&str, String)> = vec![];
    let mut passed = 0;
    match cluster {
        Err(e) => {
            println!("test cluster_start ... FAILED");
            failed.push(("cluster_start", panic_text(&*e)));
        }
        Ok(cluster) => {
            let cluster = Arc::new(cluster);
            Cluster::teardown_on_signal(&cluster, signals, "faults suite");
            println!("cluster up in {:.1}s", started.elapsed().as_secs_f32());
            let setup = std::panic::catch_unwind(|| {
                cluster.wait_node_ready(T);
                for side in [Side::crust(&cluster), Side::incumbent(&cluster)] {
                    let _ = run_timeout(&mut cluster.kubectl(&["create", "namespace", side.ns]), T);
                    wait_for(
                        &format!("the default ServiceAccount of {}", side.ns),
                        T,
                        |_| {
                            run_timeout(&mut side.kubectl(&["get", "serviceaccount", "default"]), T)
                                .status
                                .success()
                                .then_some(())
                        },
                    );
                    wait_for(&format!("{} Ready", side.node), T, |last| {
                        *last = side.ready();
                        (*last == "True").then_some(())
                    });
                }
            });
            if let Err(e) = setup {
                println!("test setup ... FAILED");
                failed.push(("setup", panic_text(&*e)));
            } else {
                for ch in &checks {
                    let t = Instant::now();
                    println!("test {} ...", ch.name);
                    let f = run_check(&cluster, ch);
                    if f.is_empty() {
                        println!(
                            "test {} ... ok ({:.1}s)",
                            ch.name,
                            t.elapsed().as_secs_f32()
                        );
                        passed += 1;
                    } else {
                        println!("test {} ... FAILED", ch.name);
                        failed.push((ch.name, f.join("\n")));
                    }
                }
            }
            if !failed.is_empty() {
                for name in ["crustlet", "crustlet-crustd", "kubelet", "containerd"] {
                    println!(
                        "---- the last of {name}'s log ----\n{}",
                        crust_e2e::tail(&cluster.log(name), 25)
                    );
                }
            }
            cluster.teardown();
        }
    }
    println!("\nwhat each fault measured:");
    for l in FIGURES.lock().unwrap().iter() {
        println!("  {l}");
    }
    if !failed.is_empty() {
        println!("\nfailures:\n");
        for (name, msg) in &failed {
            println!("---- {name} ----\n{msg}\n");
        }
    }
    println!(
        "\ntest result: {}. {passed} passed; {} failed; 0 ignored; 0 measured; {} filtered out; finished in {:.2}s\n",
        if failed.is_empty() { "ok" } else { "FAILED" },
        failed.len(),
        all.len() - checks.len(),
        started.elapsed().as_secs_f32()
    );
    std::process::exit(if failed.is_empty() { 0 } else { 101 });
}
