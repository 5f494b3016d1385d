//! crustd under the real kubelet v1.28.7: one single-node cluster for the whole suite
//! (tests/src/cluster/: etcd, kube-apiserver, controller-manager, scheduler, the
//! kubelet, crustd, a registry, all in a node network namespace the suite makes), and
//! what a cluster user does with it, through the real kubectl (and the real crictl
//! where a check looks under the kubelet).
//!
//! Its own harness (`harness = false`): the cluster comes up once, independent checks
//! run at the same time, those that restart crustd or the kubelet run alone after them,
//! and the cluster is torn down at the end whatever happened. It prints one line per
//! check and libtest's summary line, and exits non-zero when a check failed. Arguments
//! that do not start with `-` filter checks by name, as with libtest.
//!
//! Binaries: `$CRUST_KUBE_BIN`, else `target/kube-bin` (where `hack/deps` unpacks
//! them), else `PATH`; etcd from `PATH` (Debian's `etcd-server`). Without root or
//! them it skips loudly, except under `CI=true`, where that is a failure.

#[path = "kubelet/crustlet_auth_checks.rs"]
mod crustlet_auth_checks;
#[path = "kubelet/crustlet_checks.rs"]
mod crustlet_checks;
#[path = "kubelet/crustlet_fault_checks.rs"]
mod crustlet_fault_checks;
#[path = "kubelet/crustlet_probe_volume_checks.rs"]
mod crustlet_probe_volume_checks;
#[path = "kubelet/kubelet_node_checks.rs"]
mod kubelet_node_checks;
#[path = "kubelet/kubelet_pod_checks.rs"]
mod kubelet_pod_checks;

use crust_e2e::cluster::{run_timeout, wait_for, Cluster, ContainerdFor, Options};
use crust_e2e::tail;
use crust_e2e::terminal::{shell_words, Terminal};
use crustlet_auth_checks::*;
use crustlet_checks::*;
use crustlet_fault_checks::*;
use crustlet_probe_volume_checks::*;
use kubelet_node_checks::*;
use kubelet_pod_checks::*;
use serde_json::{json, Value};
use std::io::{Read, Write};
use std::process::{Command, Output};
use std::sync::Mutex;
use std::time::{Duration, Instant};

type CheckFn = fn(&Cluster);

struct Check {
    name: &'static str,
    f: CheckFn,
}

macro_rules! checks {
    ($($f:ident),* $(,)?) => {
        vec![$(Check { name: stringify!($f), f: $f }),*]
    };
}

fn s(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// How long a check waits for a pod to reach a state or a command to finish. Two
/// minutes, not one: the suite's three nodes and their checks, all at once on two
/// cores, load the apiserver (thousands of requests over 500 ms in a run), and the
/// real kubelet's own status updates were seen reaching it 40 s after the container
/// ran. What this suite checks is behaviour; the times are `hack/bench`'s.
const T: Duration = Duration::from_secs(120);

/// Runs `cmd` (`T` at most) and panics unless it succeeds; returns stdout.
fn ok(mut cmd: Command) -> String {
    let out = run_timeout(&mut cmd, T);
    assert!(
        out.status.success(),
        "{cmd:?} failed ({}): {}{}",
        out.status,
        s(&out.stdout),
        s(&out.stderr)
    );
    s(&out.stdout)
}

/// Runs `cmd` with `input` on stdin, `T` at most.
fn with_input(mut cmd: Command, input: &[u8]) -> Output {
    crust_e2e::cluster::run_timeout_input(&mut cmd, Some(input), T)
}

fn kubectl(c: &Cluster, args: &[&str]) -> String {
    ok(c.kubectl(args))
}

/// `kubectl apply` of one object (JSON is YAML).
fn apply(c: &Cluster, obj: Value) {
    let out = with_input(c.kubectl(&["apply", "-f", "-"]), obj.to_string().as_bytes());
    assert!(
        out.status.success(),
        "kubectl apply failed: {}{}\n{obj:#}",
        s(&out.stdout),
        s(&out.stderr)
    );
}

fn get(c: &Cluster, kind: &str, name: &str) -> Option<Value> {
    let out = run_timeout(&mut c.kubectl(&["get", kind, name, "-o", "json"]), T);
    if !out.status.success() {
        return None;
    }
    serde_json::from_slice(&out.stdout).ok()
}

fn container(name: &str, image: &str, script: &str) -> Value {
    json!({
        "name": name,
        "image": image,
        "imagePullPolicy": "IfNotPresent",
        "command": ["sh", "-c", script],
    })
}

/// A pod of one container `main` running `script`, changed by `change`.
fn pod(c: &Cluster, name: &str, script: &str, change: impl FnOnce(&mut Value)) -> Value {
    let mut p = json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": {"suite": "crust"}},
        "spec": {
            "terminationGracePeriodSeconds": 2,
            "containers": [container("main", &c.image, script)],
        }
    });
    change(&mut p);
    p
}

fn status_of<'a>(p: &'a Value, ctr: &str) -> Option<&'a Value> {
    p["status"]["containerStatuses"]
        .as_array()?
        .iter()
        .find(|s| s["name"] == ctr)
}

/// Waits until the pod satisfies `pred`; returns it.
fn wait_pod(
    c: &Cluster,
    name: &str,
    what: &str,
    limit: Duration,
    pred: impl Fn(&Value) -> bool,
) -> Value {
    wait_pod_in(c, "default", name, what, limit, pred)
}

/// Waits for a pod of namespace `ns` to satisfy `pred`; on timeout panics with its last
/// status and its events (CI keeps only this output: the events say what the kubelet
/// tried).
fn wait_pod_in(
    c: &Cluster,
    ns: &str,
    name: &str,
    what: &str,
    limit: Duration,
    pred: impl Fn(&Value) -> bool,
) -> Value {
    c.wait_pod(ns, name, limit, pred).unwrap_or_else(|last| {
        panic!(
            "timed out after {limit:?} waiting for pod {ns}/{name}: {what}; last seen: {}\n\
             its events:\n{}",
            last.map(|p| p["status"].to_string()).unwrap_or_default(),
            pod_events(c, ns, name)
        )
    })
}

/// The events of namespace `ns` that `selector` (a field selector) picks, oldest first
/// (the items of `kubectl get events -o json`), or what kubectl said.
fn events(c: &Cluster, ns: &str, selector: &str) -> Result<Vec<Value>, String> {
    let args = ["-n", ns, "get", "events", "--field-selector", selector];
    let mut cmd = c.kubectl(&args);
    cmd.args(["--sort-by=.lastTimestamp", "-o", "json"]);
    let out = run_timeout(&mut cmd, T);
    match serde_json::from_slice::<Value>(&out.stdout) {
        Ok(v) if out.status.success() => Ok(v["items"].as_array().cloned().unwrap_or_default()),
        _ => Err(format!("kubectl get events failed: {}", s(&out.stderr))),
    }
}

/// The events of one pod, oldest first, one per line with their count, reason, source
/// and message.
fn pod_events(c: &Cluster, ns: &str, name: &str) -> String {
    let sel = format!("involvedObject.kind=Pod,involvedObject.name={name}");
    match events(c, ns, &sel) {
        Ok(items) => items
            .iter()
            .map(|e| {
                format!(
                    "  {} x{} {} ({}): {}\n",
                    e["lastTimestamp"]
                        .as_str()
                        .or(e["eventTime"].as_str())
                        .unwrap_or(""),
                    e["count"].as_u64().unwrap_or(1),
                    e["reason"].as_str().unwrap_or(""),
                    e["source"]["component"].as_str().unwrap_or(""),
                    e["message"].as_str().unwrap_or("")
                )
            })
            .collect(),
        Err(e) => format!("({e})"),
    }
}

fn running(p: &Value) -> bool {
    p["status"]["phase"] == "Running"
        && p["status"]["containerStatuses"]
            .as_array()
            .is_some_and(|a| a.iter().all(|s| s["state"]["running"].is_object()))
}

fn run_pod(c: &Cluster, p: Value) -> Value {
    let name = p["metadata"]["name"].as_str().unwrap().to_string();
    apply(c, p);
    wait_pod(c, &name, "Running", Duration::from_secs(90), running)
}

fn sleeper(c: &Cluster, name: &str) -> Value {
    run_pod(c, pod(c, name, "exec sleep 3600", |_| {}))
}

/// The crust container id of `ctr` in pod JSON `p` (`crust://<id>`).
fn container_id(p: &Value, ctr: &str) -> String {
    let id = status_of(p, ctr).expect("container status")["containerID"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    id.strip_prefix("crust://")
        .unwrap_or_else(|| panic!("container id {id:?} is not crust's"))
        .to_string()
}

/// GET `http://addr/path` from inside the node namespace: the body, or the error.
fn http_get(c: &Cluster, addr: &str, path: &str) -> Result<String, String> {
    let node = c.node.path();
    let (addr, path) = (addr.to_string(), path.to_string());
    std::thread::spawn(move || {
        crust_e2e::enter_netns(&node);
        let mut conn = std::net::TcpStream::connect(&addr).map_err(|e| format!("{addr}: {e}"))?;
        conn.set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        write!(conn, "GET {path} HTTP/1.0\r\nHost: x\r\n\r\n").map_err(|e| e.to_string())?;
        let mut resp = String::new();
        conn.read_to_string(&mut resp).map_err(|e| e.to_string())?;
        Ok(resp)
    })
    .join()
    .unwrap()
}

/// Waits until a GET through `addr` returns a body with `want`: a pod is Running once its
/// shell runs, a moment before the server it execs listens, and a forwarded connection to
/// a port nothing listens on yet just closes. Only the first answer may be missing;
/// callers then check the ones after it strictly.
fn wait_served(c: &Cluster, addr: &str, want: &str) {
    wait_for(&format!("{want:?} served through {addr}"), T, |last| {
        let r = http_get(c, addr, "/");
        *last = format!("{r:?}");
        r.is_ok_and(|b| b.contains(want)).then_some(())
    })
}

/// A child process killed when this goes (also when the check panics).
struct Killed(std::process::Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn read_trim(p: &std::path::Path) -> String {
    std::fs::read_to_string(p)
        .unwrap_or_else(|e| panic!("{}: {e}", p.display()))
        .trim()
        .to_string()
}

fn b64url(text: &str) -> Vec<u8> {
    let mut out = Vec::new();
    let (mut acc, mut bits) = (0u32, 0);
    for ch in text.bytes() {
        let v = match ch {
            b'A'..=b'Z' => ch - b'A',
            b'a'..=b'z' => ch - b'a' + 26,
            b'0'..=b'9' => ch - b'0' + 52,
            b'-' | b'+' => 62,
            b'_' | b'/' => 63,
            _ => continue,
        } as u32;
        acc = (acc << 6) | v;
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            out.push((acc >> bits) as u8);
            acc &= (1 << bits) - 1;
        }
    }
    out
}

fn jwt_claims(token: &str) -> Value {
    let parts: Vec<&str> = token.trim().split('.').collect();
    assert_eq!(parts.len(), 3, "not a JWT: {token}");
    serde_json::from_slice(&b64url(parts[1])).expect("JWT claims")
}

/// Runs `delete` (a `kubectl delete pod ... --wait=true`) and tells how long until
/// `running` (a `crictl ps -q` of the pod's containers) printed nothing: the runtime's
/// part of a deletion, SIGTERM, the grace period and SIGKILL. The deletion itself is only
/// waited for (90 s at most): after the kill the kubelet's status and cleanup loops run
/// on 2 s and 10 s periods that stretch on a loaded machine (one took 27 s in CI for a
/// 4 s grace period), so its length says little about the runtime.
pub(crate) fn delete_and_time(mut delete: Command, running: &dyn Fn() -> Command) -> Duration {
    let start = Instant::now();
    std::thread::scope(|sc| {
        let deleting = sc.spawn(move || run_timeout(&mut delete, Duration::from_secs(90)));
        let mut stopped = None;
        while stopped.is_none() && start.elapsed() < Duration::from_secs(90) {
            let out = run_timeout(&mut running(), T);
            if out.status.success() && s(&out.stdout).trim().is_empty() {
                stopped = Some(start.elapsed());
            } else {
                std::thread::sleep(Duration::from_millis(100));
            }
        }
        let out = deleting.join().unwrap();
        assert!(out.status.success(), "{}", s(&out.stderr));
        stopped.expect("the pod's containers still ran 90 s after its deletion")
    })
}

// ---- g. the kubelet's log ----------------------------------------------------------------

/// A quoted klog value starting at `text` (just after its opening quote), unescaped.
fn quoted(text: &str) -> String {
    let mut out = String::new();
    let mut chars = text.chars();
    while let Some(ch) = chars.next() {
        match ch {
            '\\' => out.extend(chars.next()),
            '"' => break,
            _ => out.push(ch),
        }
    }
    out
}

/// The CRI errors in the kubelet's log (its message and the error, ids and all), and
/// how often each appears.
fn cri_errors(log: &str) -> Vec<(String, usize)> {
    let mut counts: std::collections::BTreeMap<String, usize> = Default::default();
    for line in log.lines() {
        if !line.contains("rpc error: code = ") {
            continue;
        }
        let msg = line
            .split_once("] \"")
            .map(|(_, m)| quoted(m))
            .unwrap_or_default();
        let err = line
            .split_once(" err=\"")
            .map(|(_, e)| quoted(e))
            .unwrap_or_default();
        *counts.entry(format!("{msg}: {err}")).or_default() += 1;
    }
    counts.into_iter().collect()
}

fn no_repeated_cri_errors(c: &Cluster) {
    let errors = cri_errors(&c.log("kubelet"));
    // While crustd is down the kubelet cannot reach it (Unavailable): that is the
    // kill check, not a CRI error.
    let repeated: Vec<_> = errors
        .iter()
        .filter(|(m, n)| *n > 3 && !m.contains("code = Unavailable"))
        .collect();
    assert!(
        repeated.is_empty(),
        "CRI errors repeated in the kubelet's log: {repeated:#?}"
    );
}

/// Everything deleted through the API, and then nothing of it left in crustd.
fn nothing_left_in_crustd(c: &Cluster) {
    kubectl(
        c,
        &[
            "delete",
            "deployments,jobs,pods",
            "--all",
            "--grace-period=1",
            "--wait=true",
        ],
    );
    wait_for(
        "crustd to have no pod or container",
        Duration::from_secs(150),
        |last| {
            let pods = ok(c.crictl(&["pods", "-q"]));
            let ctrs = ok(c.crictl(&["ps", "-a", "-q"]));
            *last = format!("pods: {pods:?} containers: {ctrs:?}");
            (pods.trim().is_empty() && ctrs.trim().is_empty()).then_some(())
        },
    );
    let records = std::fs::read_dir(c.path("crust-root/sandboxes"))
        .map(|r| r.count())
        .unwrap_or(0);
    assert_eq!(records, 0, "sandbox records left in crustd's root");
}

// ---- the harness ------------------------------------------------------------------------

struct Results {
    passed: Vec<&'static str>,
    failed: Vec<(&'static str, String)>,
    /// The daemons found dead so far (their logs told once).
    dead: std::collections::BTreeSet<String>,
}

fn panic_text(e: &(dyn std::any::Any + Send)) -> String {
    e.downcast_ref::<String>()
        .cloned()
        .or_else(|| e.downcast_ref::<&str>().map(|s| s.to_string()))
        .unwrap_or_else(|| "panicked".into())
}

thread_local! {
    /// Where the check on this thread panicked (the panic hook's note).
    static PANIC_AT: std::cell::RefCell<String> = const { std::cell::RefCell::new(String::new()) };
}

fn run_one(c: &Cluster, ch: &Check, results: &Mutex<Results>) {
    let start = Instant::now();
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| (ch.f)(c))).map_err(|e| {
        let at = PANIC_AT.with(|p| p.borrow().clone());
        format!("{}\n  at {at}", panic_text(&*e))
    });
    let secs = start.elapsed().as_secs_f32();
    let gone = if r.is_err() {
        c.exited_daemons()
    } else {
        Vec::new()
    };
    let mut res = results.lock().unwrap();
    match r {
        Ok(()) => {
            println!("test {} ... ok ({secs:.1}s)", ch.name);
            res.passed.push(ch.name);
        }
        Err(mut e) => {
            println!("test {} ... FAILED ({secs:.1}s)", ch.name);
            // A daemon found dead is told once, with its log, at the first check
            // that failed after it; the later ones name it.
            for gone in gone {
                let name = gone.split(' ').next().unwrap_or_default().to_string();
                if res.dead.insert(name.clone()) {
                    e.push_str(&format!("\n  by then {gone}"));
                } else {
                    e.push_str(&format!("\n  ({name} had exited)"));
                }
            }
            res.failed.push((ch.name, e));
        }
    }
}

/// Runs `checks` at the same time (each on a thread named after it).
fn run_group(c: &Cluster, checks: &[Check], results: &Mutex<Results>) {
    std::thread::scope(|sc| {
        for ch in checks {
            std::thread::Builder::new()
                .name(ch.name.to_string())
                .spawn_scoped(sc, || run_one(c, ch, results))
                .unwrap();
        }
    });
}

fn main() {
    // An interrupted suite (Ctrl-C, a CI timeout's SIGTERM) still tears its cluster down.
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
        "script",
        "iptables",
        "containerd",
        "containerd-shim-runc-v2",
        "runc",
        "curl",
    ];
    let (bins, portmap_dir) = crust_e2e::cluster::suite_needs("kubelet suite", &tools);

    // The crustlet's checks run beside the kubelet's: the two nodes share only the
    // control plane. Those that restart the crustlet's crustd or the crustlet run beside
    // the kubelet's restarts, after every other crustlet check.
    let all_checks: Vec<Vec<Check>> = vec![
        checks![
            node_ready_with_crust_version,
            crustlet_node,
            containerd_node
        ],
        checks![
            crustlet_lease_renewed,
            crustlet_pod_running,
            crustlet_init_containers_in_order,
            crustlet_restart_policies,
            crustlet_liveness_probe_exec,
            crustlet_readiness_probe_http,
            crustlet_startup_probe_tcp,
            crustlet_job_to_completion,
            crustlet_deployment_scaled_up_and_down,
            crustlet_volumes_and_env,
            crustlet_image_and_config_errors,
            crustlet_requests_and_limits_in_cgroups,
            crustlet_qos_cgroups_as_kubelet,
            crustlet_graceful_deletion,
            crustlet_static_pod_mirrored,
            crustlet_same_as_kubelet,
            crustlet_grpc_probes,
            crustlet_grpc_probe_same_as_kubelet,
            crustlet_memory_empty_dir,
            crustlet_pod_files_as_kubelet,
            crustlet_claimed_volumes_as_kubelet,
            crustlet_host_port_admission,
            crustlet_apparmor_admission,
            crustlet_image_change_restarts,
            crustlet_restart_count_across_sandboxes,
            containerd_image_change_restarts,
            containerd_restart_count_across_sandboxes,
            containerd_pod_running,
            containerd_init_containers_in_order,
            containerd_restart_policies,
            containerd_liveness_probe_exec,
            containerd_readiness_probe_http,
            containerd_startup_probe_tcp,
            containerd_volumes_and_env,
            containerd_graceful_deletion,
            containerd_grpc_probes,
            containerd_memory_empty_dir,
            crustlet_host_network_pod,
            crustlet_host_port_pod,
            containerd_host_network_pod,
            containerd_host_port_pod,
            pod_running_with_ip,
            logs,
            logs_follow,
            logs_previous,
            exec_output_and_exit_code,
            exec_tty,
            attach,
            port_forward,
            cp,
            deployment_scaled_up_and_down,
            job_to_completion,
            init_containers_in_order,
            liveness_probe_exec,
            readiness_probe_http,
            startup_probe_tcp,
            restart_policy_and_crash_loop,
            requests_and_limits_in_cgroups,
            configmap_secret_and_token_volumes,
            host_network_pod,
            host_port_pod,
            graceful_deletion,
            sigterm_ignored_until_grace_period,
            stats_summary,
        ],
        // The crustlets' HTTPS servers, in a group of their own: beside the checks above
        // on two cores, the real kubelet's timings (probes, grace periods) slipped.
        checks![
            crustlet_server_logs,
            crustlet_server_exec,
            crustlet_server_attach,
            crustlet_server_port_forward,
            crustlet_server_cp,
            crustlet_server_debug,
            crustlet_server_stats,
            crustlet_server_same_as_kubelet,
            // A spinning container: here, not in the burst of pods above.
            metrics_cadvisor,
            containerd_server_logs,
            containerd_server_exec,
            containerd_server_attach,
            containerd_server_port_forward,
            containerd_server_cp,
            containerd_server_debug,
            containerd_server_stats,
            // Straight to the three servers: who may ask what.
            crustlet_auth_unauthenticated,
            crustlet_auth_no_rights,
            crustlet_auth_stats_only,
            crustlet_auth_apiserver_client,
        ],
        checks![
            crustd_killed_and_restarted,
            crustlet_crustd_killed_and_restarted
        ],
        checks![
            kubelet_restarted_adopts_its_pods,
            crustlet_restarted_adopts_its_pods
        ],
        // It restarts the crustlet too.
        checks![crustlet_pod_routes],
        // The apiserver stopped and started again: every node loses it at once.
        checks![crustlet_apiserver_outage],
        checks![no_repeated_cri_errors],
        checks![
            nothing_left_in_crustd,
            crustlet_nothing_left_in_crustd,
            containerd_nothing_left
        ],
    ];
    let total: usize = all_checks.iter().map(Vec::len).sum();
    let groups: Vec<Vec<Check>> = all_checks
        .into_iter()
        .map(|g| {
            g.into_iter()
                .filter(|ch| {
                    ch.name == "node_ready_with_crust_version"
                        || ch.name == "crustlet_node"
                        || ch.name == "containerd_node"
                        || filters.is_empty()
                        || filters.iter().any(|f| ch.name.contains(f.as_str()))
                })
                .collect()
        })
        .collect();
    let run: usize = groups.iter().map(Vec::len).sum();
    println!("\nrunning {run} tests (one cluster: the kubelet's node, the crustlet's and the crustlet on containerd)");

    // Failures are reported once, in the summary, with where they happened.
    std::panic::set_hook(Box::new(|info| {
        let at = info
            .location()
            .map(|l| format!("{}:{}", l.file(), l.line()))
            .unwrap_or_default();
        PANIC_AT.with(|p| *p.borrow_mut() = at);
    }));
    let started = Instant::now();
    let results = Mutex::new(Results {
        passed: vec![],
        failed: vec![],
        dead: Default::default(),
    });
    let cluster = std::panic::catch_unwind(|| {
        Cluster::start_with(
            bins,
            crust_e2e::bin("crustd"),
            vec![crust_e2e::bin_dir(), portmap_dir],
            Options {
                containerd: Some(ContainerdFor::Crustlet),
                ..Options::default()
            },
        )
    });
    let logs_dir;
    match cluster {
        Err(e) => {
            println!("test cluster_start ... FAILED");
            results
                .lock()
                .unwrap()
                .failed
                .push(("cluster_start", panic_text(&*e)));
            logs_dir = None;
        }
        Ok(cluster) => {
            let cluster = std::sync::Arc::new(cluster);
            Cluster::teardown_on_signal(&cluster, signals, "kubelet suite");
            println!("cluster up in {:.1}s", started.elapsed().as_secs_f32());
            for (i, g) in groups.iter().enumerate() {
                run_group(&cluster, g, &results);
                // Without a Ready node nothing else can pass: say so once.
                if i == 0 && !results.lock().unwrap().failed.is_empty() {
                    break;
                }
            }
            if std::env::var_os("CRUST_KUBELET_HOLD").is_some() {
                cluster.hold();
            }
            let failed = !results.lock().unwrap().failed.is_empty();
            // A developer who names a place keeps the logs of a passing run too (to read
            // how long each pod took, say).
            let keep = failed || std::env::var_os("CRUST_SUITE_LOGS").is_some();
            logs_dir = keep.then(|| keep_logs(&cluster));
            // (Waits for a teardown a signal started.)
            cluster.teardown();
            drop(cluster);
        }
    }
    let res = results.into_inner().unwrap();
    let (passed, failed) = (res.passed.len(), res.failed.len());
    if !res.failed.is_empty() {
        println!("\nfailures:\n");
        for (name, msg) in &res.failed {
            println!("---- {name} ----\n{msg}\n");
        }
        if let Some(d) = logs_dir {
            println!(
                "the cluster's logs (kubelet, crustd, control plane) are in {}\n",
                d.display()
            );
        }
        println!("failures:");
        for (name, _) in &res.failed {
            println!("    {name}");
        }
    }
    println!(
        "\ntest result: {}. {passed} passed; {failed} failed; 0 ignored; 0 measured; {} filtered out; finished in {:.2}s\n",
        if failed == 0 { "ok" } else { "FAILED" },
        total - run,
        started.elapsed().as_secs_f32()
    );
    std::process::exit(if failed == 0 { 0 } else { 101 });
}

/// Copies the cluster's logs where they outlive it: `target/tmp/kubelet-suite-logs` when
/// a check failed, or `$CRUST_SUITE_LOGS` always (two suites run side by side keep theirs
/// apart).
fn keep_logs(c: &Cluster) -> std::path::PathBuf {
    let dest = std::env::var_os("CRUST_SUITE_LOGS")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| {
            std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("kubelet-suite-logs")
        });
    let _ = std::fs::remove_dir_all(&dest);
    let _ = std::fs::create_dir_all(&dest);
    if let Ok(rd) = std::fs::read_dir(c.path("logs")) {
        for e in rd.flatten() {
            let _ = std::fs::copy(e.path(), dest.join(e.file_name()));
        }
    }
    dest
}
