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

use crust_e2e::cluster::{run_timeout, wait_for, Cluster, ContainerdFor, Options, NODE};
use crust_e2e::terminal::{shell_words, Terminal};
use crustlet_auth_checks::*;
use crustlet_checks::*;
use crustlet_fault_checks::*;
use crustlet_probe_volume_checks::*;
use serde_json::{json, Value};
use std::io::{BufRead, Read, Write};
use std::process::{Command, Output, Stdio};
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

const T: Duration = Duration::from_secs(60);

/// Runs `cmd` (a minute at most) and panics unless it succeeds; returns stdout.
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

/// Runs `cmd` with `input` on stdin, a minute at most.
fn with_input(mut cmd: Command, input: &[u8]) -> Output {
    let mut child = cmd
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let input = input.to_vec();
    std::thread::spawn(move || {
        let _ = stdin.write_all(&input);
    });
    let pid = child.id();
    let done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let d = done.clone();
    std::thread::spawn(move || {
        let deadline = Instant::now() + T;
        while Instant::now() < deadline {
            if d.load(std::sync::atomic::Ordering::SeqCst) {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        // SAFETY: our own child, not reaped while `done` is false.
        unsafe { libc::kill(pid as i32, libc::SIGKILL) };
    });
    let out = child.wait_with_output().unwrap();
    done.store(true, std::sync::atomic::Ordering::SeqCst);
    out
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

// ---- a. the node, pods, logs and streaming --------------------------------------------

fn node_ready_with_crust_version(c: &Cluster) {
    let node = c.wait_node_ready(Duration::from_secs(120));
    let v = node["status"]["nodeInfo"]["containerRuntimeVersion"]
        .as_str()
        .unwrap_or_default();
    assert_eq!(v, format!("crust://{}", env!("CARGO_PKG_VERSION")));
    let addrs = node["status"]["addresses"].to_string();
    assert!(addrs.contains(&c.ip), "{addrs}");
}

fn pod_running_with_ip(c: &Cluster) {
    let p = run_pod(c, pod(c, "web", "exec httpd -f -p 8080 -h /www", |_| {}));
    let ip = p["status"]["podIP"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    assert!(
        ip.starts_with(&format!("10.{}.0.", c.subnet)),
        "pod IP {ip:?}"
    );
    let body = wait_for("the pod's web server", T, |last| {
        http_get(c, &format!("{ip}:8080"), "/")
            .map_err(|e| *last = e)
            .ok()
    });
    assert!(body.contains("hello from crust"), "{body}");
    // Under the kubelet, crustd has the pod's sandbox ready.
    let pods: Value =
        serde_json::from_str(&ok(c.crictl(&["pods", "--name", "web", "-o", "json"]))).unwrap();
    let items = pods["items"].as_array().unwrap();
    assert!(
        items.iter().any(|i| i["state"] == "SANDBOX_READY"),
        "{pods:#}"
    );
}

fn logs(c: &Cluster) {
    apply(
        c,
        pod(
            c,
            "logger",
            "echo line-one; echo to-stderr >&2; echo line-two; sleep 1; echo line-three",
            |p| {
                p["spec"]["restartPolicy"] = json!("Never");
            },
        ),
    );
    wait_pod(c, "logger", "Succeeded", 2 * T, |p| {
        p["status"]["phase"] == "Succeeded"
    });
    // stdout and stderr are two pipes: their lines come in order within each, and
    // what the pod wrote a second later comes after both.
    let out = kubectl(c, &["logs", "logger"]);
    let lines: Vec<&str> = out.lines().collect();
    let mut first_two = lines[..lines.len().min(3)].to_vec();
    first_two.retain(|l| *l != "to-stderr");
    assert_eq!(first_two, ["line-one", "line-two"], "{out}");
    assert!(lines.contains(&"to-stderr"), "{out}");
    assert_eq!(lines.len(), 4, "{out}");
    assert_eq!(lines[3], "line-three", "{out}");
    let out = kubectl(c, &["logs", "logger", "--tail=1"]);
    assert_eq!(out, "line-three\n");
}

fn logs_follow(c: &Cluster) {
    run_pod(
        c,
        pod(
            c,
            "follower",
            "i=0; while true; do echo tick-$i; i=$((i+1)); sleep 0.2; done",
            |_| {},
        ),
    );
    let mut child = Killed(
        c.kubectl(&["logs", "-f", "follower"])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let stdout = child.0.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stdout)
            .lines()
            .map_while(Result::ok)
        {
            if tx.send(line).is_err() {
                return;
            }
        }
    });
    // Lines keep coming after what was there when kubectl started. The first may take
    // a while on a loaded node (kubectl, the apiserver's proxy, the kubelet's lookups);
    // after it, a pause of 10 s means the stream stalled.
    let start = Instant::now();
    let mut seen = Vec::new();
    while seen.len() < 30 && start.elapsed() < 2 * T {
        let wait = if seen.is_empty() {
            T
        } else {
            Duration::from_secs(10)
        };
        match rx.recv_timeout(wait) {
            Ok(l) => seen.push(l),
            Err(_) => break,
        }
    }
    drop(child);
    assert!(seen.len() >= 30, "kubectl logs -f stalled after {seen:?}");
    let first: u32 = seen[0].trim_start_matches("tick-").parse().unwrap();
    let last: u32 = seen[29].trim_start_matches("tick-").parse().unwrap();
    assert_eq!(last, first + 29, "{seen:?}");
}

fn logs_previous(c: &Cluster) {
    let script = "n=$(cat /data/n 2>/dev/null || echo 0); n=$((n+1)); echo $n > /data/n; \
                  echo attempt-$n; if [ $n -ge 2 ]; then exec sleep 3600; fi; exit 1";
    apply(
        c,
        pod(c, "previous", script, |p| {
            p["spec"]["volumes"] = json!([{"name": "data", "emptyDir": {}}]);
            p["spec"]["containers"][0]["volumeMounts"] =
                json!([{"name": "data", "mountPath": "/data"}]);
        }),
    );
    wait_pod(
        c,
        "previous",
        "restarted and running",
        Duration::from_secs(90),
        |p| running(p) && status_of(p, "main").is_some_and(|s| s["restartCount"] == 1),
    );
    assert_eq!(
        kubectl(c, &["logs", "previous", "--previous"]),
        "attempt-1\n"
    );
    assert_eq!(kubectl(c, &["logs", "previous"]), "attempt-2\n");
}

fn exec_output_and_exit_code(c: &Cluster) {
    sleeper(c, "exec");
    let out = run_timeout(
        &mut c.kubectl(&[
            "exec",
            "exec",
            "--",
            "sh",
            "-c",
            "echo to-out; echo to-err >&2; exit 7",
        ]),
        T,
    );
    assert_eq!(s(&out.stdout), "to-out\n", "{}", s(&out.stderr));
    assert!(s(&out.stderr).contains("to-err"), "{}", s(&out.stderr));
    assert_eq!(out.status.code(), Some(7), "{}", s(&out.stderr));
    // stdin reaches the command.
    let out = with_input(
        c.kubectl(&["exec", "-i", "exec", "--", "sh", "-c", "tr a-z A-Z"]),
        b"shout\n",
    );
    assert_eq!(s(&out.stdout), "SHOUT\n", "{}", s(&out.stderr));
    assert_eq!(out.status.code(), Some(0));
    // A command that does not exist.
    let out = run_timeout(&mut c.kubectl(&["exec", "exec", "--", "/no/such"]), T);
    assert!(!out.status.success());
}

fn exec_tty(c: &Cluster) {
    sleeper(c, "tty");
    let k = c.kubectl(&[
        "exec",
        "-it",
        "tty",
        "--",
        "sh",
        "-c",
        "tty >/dev/null && echo is-a-tty; echo term=$TERM; stty size; read l; echo got=$l; exit 3",
    ]);
    let mut t = Terminal::spawn(&format!("stty cols 91 rows 33; exec {}", shell_words(&k)));
    t.wait_for("33 91");
    t.type_in(b"typed\n");
    t.close_input();
    t.wait_for("got=typed");
    let (code, out, err) = t.finish();
    assert!(out.contains("is-a-tty"), "{out}{err}");
    assert!(out.contains("term=xterm"), "{out}{err}");
    assert_eq!(code, Some(3), "{out}{err}");
}

fn attach(c: &Cluster) {
    run_pod(
        c,
        pod(
            c,
            "attach",
            "echo ready; while read l; do echo got:$l; done; echo bye",
            |p| {
                p["spec"]["restartPolicy"] = json!("Never");
                p["spec"]["containers"][0]["stdin"] = json!(true);
                p["spec"]["containers"][0]["stdinOnce"] = json!(true);
            },
        ),
    );
    let out = with_input(
        c.kubectl(&["attach", "-i", "attach", "-c", "main"]),
        b"hello\n",
    );
    assert!(
        s(&out.stdout).contains("got:hello"),
        "{}{}",
        s(&out.stdout),
        s(&out.stderr)
    );
    // stdinOnce: the input ended with the one attach, and so did the shell.
    let p = wait_pod(c, "attach", "Succeeded", 2 * T, |p| {
        p["status"]["phase"] == "Succeeded"
    });
    assert_eq!(
        status_of(&p, "main").unwrap()["state"]["terminated"]["exitCode"],
        0
    );
    assert_eq!(kubectl(c, &["logs", "attach"]), "ready\ngot:hello\nbye\n");
}

/// A child process killed when this goes (also when the check panics).
struct Killed(std::process::Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn port_forward(c: &Cluster) {
    run_pod(c, pod(c, "pf", "exec httpd -f -p 8080 -h /www", |_| {}));
    let mut child = Killed(
        c.kubectl(&["port-forward", "pod/pf", "18080:8080"])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap(),
    );
    let mut stdout = std::io::BufReader::new(child.0.stdout.take().unwrap());
    let mut line = String::new();
    let _ = stdout.read_line(&mut line);
    std::thread::spawn(move || {
        let mut sink = String::new();
        let _ = stdout.read_to_string(&mut sink);
    });
    assert!(
        line.contains("Forwarding from 127.0.0.1:18080"),
        "port-forward said {line:?}"
    );
    wait_served(c, "127.0.0.1:18080", "hello from crust");
    // Each connection ends when the server closes it (read to the end, HTTP/1.0).
    for _ in 0..3 {
        let body = http_get(c, "127.0.0.1:18080", "/").unwrap();
        assert!(body.contains("hello from crust"), "{body}");
    }
}

fn cp(c: &Cluster) {
    sleeper(c, "cp");
    let local = c.path("cp-in.bin");
    let data: Vec<u8> = (0..300_000u32).map(|i| (i * 7 % 251) as u8).collect();
    std::fs::write(&local, &data).unwrap();
    kubectl(
        c,
        &["cp", local.to_str().unwrap(), "default/cp:/tmp/in.bin"],
    );
    let sum = kubectl(c, &["exec", "cp", "--", "wc", "-c", "/tmp/in.bin"]);
    assert!(sum.starts_with("300000 "), "{sum}");
    let back = c.path("cp-out.bin");
    kubectl(c, &["cp", "default/cp:/tmp/in.bin", back.to_str().unwrap()]);
    assert!(
        std::fs::read(&back).unwrap() == data,
        "the copy came back different"
    );
}

// ---- b. controllers, init containers, probes, restarts ---------------------------------

fn deployment_scaled_up_and_down(c: &Cluster) {
    apply(
        c,
        json!({
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": "scaler"},
            "spec": {
                "replicas": 1,
                "selector": {"matchLabels": {"app": "scaler"}},
                "template": {
                    "metadata": {"labels": {"app": "scaler"}},
                    "spec": {
                        "terminationGracePeriodSeconds": 1,
                        "containers": [container("main", &c.image, "exec sleep 3600")],
                    }
                }
            }
        }),
    );
    let ready = |n: u64| {
        move |last: &mut String| {
            let d = get(c, "deployment", "scaler")?;
            *last = d["status"].to_string();
            let pods: Value = serde_json::from_str(&kubectl(
                c,
                &["get", "pods", "-l", "app=scaler", "-o", "json"],
            ))
            .ok()?;
            let items = pods["items"].as_array()?;
            (d["status"]["readyReplicas"].as_u64() == Some(n)
                && d["status"]["replicas"].as_u64() == Some(n)
                && items.len() as u64 == n
                && items.iter().all(running))
            .then_some(())
        }
    };
    wait_for("1 replica", Duration::from_secs(90), ready(1));
    kubectl(c, &["scale", "deployment", "scaler", "--replicas=3"]);
    wait_for("3 replicas", Duration::from_secs(90), ready(3));
    kubectl(c, &["scale", "deployment", "scaler", "--replicas=1"]);
    wait_for("back to 1 replica", Duration::from_secs(90), ready(1));
    kubectl(c, &["delete", "deployment", "scaler", "--wait=true"]);
}

fn job_to_completion(c: &Cluster) {
    apply(
        c,
        json!({
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": {"name": "job"},
            "spec": {
                "completions": 2,
                "parallelism": 2,
                "backoffLimit": 0,
                "template": {
                    "spec": {
                        "restartPolicy": "Never",
                        "containers": [container("main", &c.image, "echo job-done")],
                    }
                }
            }
        }),
    );
    wait_for("the job to complete", Duration::from_secs(90), |last| {
        let j = get(c, "job", "job")?;
        *last = j["status"].to_string();
        let complete = j["status"]["conditions"]
            .as_array()?
            .iter()
            .any(|c| c["type"] == "Complete" && c["status"] == "True");
        (complete && j["status"]["succeeded"] == 2).then_some(())
    });
    assert_eq!(kubectl(c, &["logs", "job/job"]), "job-done\n");
}

fn init_containers_in_order(c: &Cluster) {
    let p = pod(c, "init", "cat /data/order; exec sleep 3600", |p| {
        p["spec"]["volumes"] = json!([{"name": "data", "emptyDir": {}}]);
        let mount = json!([{"name": "data", "mountPath": "/data"}]);
        let mut first = container("first", &c.image, "echo first >> /data/order; sleep 1");
        let mut second = container("second", &c.image, "echo second >> /data/order");
        first["volumeMounts"] = mount.clone();
        second["volumeMounts"] = mount.clone();
        p["spec"]["initContainers"] = json!([first, second]);
        p["spec"]["containers"][0]["volumeMounts"] = mount;
    });
    let p = run_pod(c, p);
    assert_eq!(kubectl(c, &["logs", "init"]), "first\nsecond\n");
    let inits = p["status"]["initContainerStatuses"].as_array().unwrap();
    assert_eq!(inits.len(), 2);
    for i in inits {
        assert_eq!(i["state"]["terminated"]["reason"], "Completed", "{i}");
        assert_eq!(i["state"]["terminated"]["exitCode"], 0, "{i}");
    }
    let t = |i: usize, k: &str| {
        inits[i]["state"]["terminated"][k]
            .as_str()
            .unwrap()
            .to_string()
    };
    assert!(t(1, "startedAt") >= t(0, "finishedAt"), "{inits:?}");
}

fn liveness_probe_exec(c: &Cluster) {
    let p = pod(
        c,
        "live",
        "touch /tmp/healthy; sleep 3; rm /tmp/healthy; exec sleep 3600",
        |p| {
            p["spec"]["containers"][0]["livenessProbe"] = json!({
                "exec": {"command": ["cat", "/tmp/healthy"]},
                "periodSeconds": 1,
                "failureThreshold": 2,
            });
        },
    );
    apply(c, p);
    let p = wait_pod(
        c,
        "live",
        "restarted by its liveness probe",
        Duration::from_secs(90),
        |p| status_of(p, "main").is_some_and(|s| s["restartCount"].as_u64() >= Some(1)),
    );
    let last = &status_of(&p, "main").unwrap()["lastState"]["terminated"];
    assert!(last.is_object(), "{p:#}");
    // Events are posted in the background: on a loaded apiserver they come late.
    wait_for("the Unhealthy event", T, |last| {
        let events = kubectl(
            c,
            &[
                "get",
                "events",
                "--field-selector",
                "involvedObject.name=live",
            ],
        );
        *last = events.clone();
        events.contains("Liveness probe failed").then_some(())
    });
}

fn readiness_probe_http(c: &Cluster) {
    let p = pod(c, "ready", "exec httpd -f -p 8080 -h /www", |p| {
        p["spec"]["containers"][0]["readinessProbe"] = json!({
            "httpGet": {"path": "/ready.html", "port": 8080},
            "periodSeconds": 1,
        });
    });
    apply(c, p);
    // Running but not ready while the page is missing (a few probes long), then ready
    // once it is there.
    wait_pod(c, "ready", "running, not ready", T, |p| {
        running(p) && status_of(p, "main").is_some_and(|s| s["ready"] == false)
    });
    std::thread::sleep(Duration::from_secs(3));
    let p = get(c, "pod", "ready").unwrap();
    assert_eq!(status_of(&p, "main").unwrap()["ready"], false, "{p:#}");
    kubectl(
        c,
        &[
            "exec",
            "ready",
            "--",
            "sh",
            "-c",
            "echo ok > /www/ready.html",
        ],
    );
    let p = wait_pod(c, "ready", "ready", T, |p| {
        status_of(p, "main").is_some_and(|s| s["ready"] == true)
    });
    assert_eq!(status_of(&p, "main").unwrap()["restartCount"], 0);
}

fn startup_probe_tcp(c: &Cluster) {
    // The port opens when the test says so; until then only the startup probe runs
    // (the liveness probe would restart the container at once).
    let script = "while [ ! -e /tmp/go ]; do sleep 0.2; done; exec httpd -f -p 8080 -h /www";
    let p = pod(c, "startup", script, |p| {
        p["spec"]["containers"][0]["startupProbe"] = json!({
            "tcpSocket": {"port": 8080},
            "periodSeconds": 1,
            "failureThreshold": 120,
        });
        p["spec"]["containers"][0]["livenessProbe"] = json!({
            "tcpSocket": {"port": 8080},
            "periodSeconds": 1,
            "failureThreshold": 1,
        });
    });
    apply(c, p);
    wait_pod(c, "startup", "running, not started", T, |p| {
        running(p) && status_of(p, "main").is_some_and(|s| s["started"] == false)
    });
    std::thread::sleep(Duration::from_secs(3));
    kubectl(c, &["exec", "startup", "--", "touch", "/tmp/go"]);
    let p = wait_pod(c, "startup", "started and ready", T, |p| {
        status_of(p, "main").is_some_and(|s| s["started"] == true && s["ready"] == true)
    });
    assert_eq!(status_of(&p, "main").unwrap()["restartCount"], 0, "{p:#}");
}

fn restart_policy_and_crash_loop(c: &Cluster) {
    apply(c, pod(c, "crash", "echo crashing; exit 3", |_| {}));
    apply(
        c,
        pod(c, "onfailure", "exit 0", |p| {
            p["spec"]["restartPolicy"] = json!("OnFailure")
        }),
    );
    apply(
        c,
        pod(c, "never", "exit 4", |p| {
            p["spec"]["restartPolicy"] = json!("Never")
        }),
    );
    let p = wait_pod(
        c,
        "crash",
        "in CrashLoopBackOff",
        Duration::from_secs(90),
        |p| {
            status_of(p, "main").is_some_and(|s| {
                s["state"]["waiting"]["reason"] == "CrashLoopBackOff"
                    && s["restartCount"].as_u64() >= Some(1)
            })
        },
    );
    let last = &status_of(&p, "main").unwrap()["lastState"]["terminated"];
    assert_eq!(last["exitCode"], 3, "{last}");
    assert_eq!(last["reason"], "Error", "{last}");
    let p = wait_pod(c, "onfailure", "Succeeded", 2 * T, |p| {
        p["status"]["phase"] == "Succeeded"
    });
    assert_eq!(status_of(&p, "main").unwrap()["restartCount"], 0);
    let p = wait_pod(c, "never", "Failed", T, |p| {
        p["status"]["phase"] == "Failed"
    });
    let st = status_of(&p, "main").unwrap();
    assert_eq!(st["restartCount"], 0);
    assert_eq!(st["state"]["terminated"]["exitCode"], 4, "{st}");
}

// ---- c. resources, volumes, host network ----------------------------------------------

fn read_trim(p: &std::path::Path) -> String {
    std::fs::read_to_string(p)
        .unwrap_or_else(|e| panic!("{}: {e}", p.display()))
        .trim()
        .to_string()
}

fn requests_and_limits_in_cgroups(c: &Cluster) {
    let p = run_pod(
        c,
        pod(c, "res", "exec sleep 3600", |p| {
            p["spec"]["containers"][0]["resources"] = json!({
                "requests": {"cpu": "100m", "memory": "32Mi"},
                "limits": {"cpu": "200m", "memory": "64Mi"},
            });
        }),
    );
    assert_eq!(p["status"]["qosClass"], "Burstable");
    let id = container_id(&p, "main");
    let mem = c
        .cgroup_dir_named("memory", &id)
        .unwrap_or_else(|| panic!("no memory cgroup named {id} under {}", c.cgroup_root));
    assert!(
        mem.to_string_lossy().contains("/kubepods/burstable/pod"),
        "{}",
        mem.display()
    );
    assert_eq!(read_trim(&mem.join("memory.limit_in_bytes")), "67108864");
    let cpu = c.cgroup_dir_named("cpu", &id).expect("cpu cgroup");
    assert_eq!(read_trim(&cpu.join("cpu.cfs_quota_us")), "20000");
    assert_eq!(read_trim(&cpu.join("cpu.cfs_period_us")), "100000");
    assert_eq!(read_trim(&cpu.join("cpu.shares")), "102");
    // The container's processes are in it.
    let procs = read_trim(&mem.join("cgroup.procs"));
    assert!(!procs.is_empty(), "no process in {}", mem.display());
    // The pod-level cgroup the kubelet made carries the pod's limit too.
    let pod_mem = mem.parent().unwrap();
    assert_eq!(
        read_trim(&pod_mem.join("memory.limit_in_bytes")),
        "67108864"
    );
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

fn configmap_secret_and_token_volumes(c: &Cluster) {
    apply(
        c,
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cfg"},
               "data": {"greeting": "hello-config"}}),
    );
    apply(
        c,
        json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "sec"},
               "stringData": {"password": "s3cret"}}),
    );
    run_pod(
        c,
        pod(c, "vols", "exec sleep 3600", |p| {
            p["spec"]["volumes"] = json!([
                {"name": "cfg", "configMap": {"name": "cfg"}},
                {"name": "sec", "secret": {"secretName": "sec"}},
                {"name": "tok", "projected": {"sources": [
                    {"serviceAccountToken": {"path": "token", "audience": "crust-test", "expirationSeconds": 3600}}
                ]}},
            ]);
            p["spec"]["containers"][0]["volumeMounts"] = json!([
                {"name": "cfg", "mountPath": "/etc/cfg"},
                {"name": "sec", "mountPath": "/etc/sec"},
                {"name": "tok", "mountPath": "/var/run/tok"},
            ]);
        }),
    );
    let cat = |f: &str| kubectl(c, &["exec", "vols", "--", "cat", f]);
    assert_eq!(cat("/etc/cfg/greeting"), "hello-config");
    assert_eq!(cat("/etc/sec/password"), "s3cret");
    let claims = jwt_claims(&cat("/var/run/tok/token"));
    assert_eq!(claims["aud"], json!(["crust-test"]), "{claims}");
    assert_eq!(claims["kubernetes.io"]["pod"]["name"], "vols", "{claims}");
    // The default service account token, with the cluster's CA and namespace.
    let sa = "/var/run/secrets/kubernetes.io/serviceaccount";
    let claims = jwt_claims(&cat(&format!("{sa}/token")));
    assert_eq!(
        claims["sub"], "system:serviceaccount:default:default",
        "{claims}"
    );
    assert_eq!(cat(&format!("{sa}/namespace")), "default");
    let ca = std::fs::read_to_string(c.path("pki/ca.pem")).unwrap();
    assert_eq!(cat(&format!("{sa}/ca.crt")).trim(), ca.trim());
    // Read-only where Kubernetes says so.
    let out = run_timeout(
        &mut c.kubectl(&["exec", "vols", "--", "touch", "/etc/sec/x"]),
        T,
    );
    assert!(!out.status.success(), "the secret volume is writable");
}

fn host_network_pod(c: &Cluster) {
    let p = run_pod(
        c,
        pod(c, "hostnet", "exec sleep 3600", |p| {
            p["spec"]["hostNetwork"] = json!(true)
        }),
    );
    assert_eq!(p["status"]["podIP"], c.ip.as_str());
    let dev = kubectl(c, &["exec", "hostnet", "--", "cat", "/proc/net/dev"]);
    assert!(dev.contains("knode0"), "{dev}");
}

fn host_port_pod(c: &Cluster) {
    run_pod(
        c,
        pod(c, "hostport", "exec httpd -f -p 8080 -h /www", |p| {
            p["spec"]["containers"][0]["ports"] =
                json!([{"containerPort": 8080, "hostPort": 18081, "protocol": "TCP"}]);
        }),
    );
    for addr in [format!("{}:18081", c.ip), "127.0.0.1:18081".to_string()] {
        let body = wait_for(&format!("the host port on {addr}"), T, |last| {
            http_get(c, &addr, "/").map_err(|e| *last = e).ok()
        });
        assert!(body.contains("hello from crust"), "{body}");
    }
}

// ---- d. deletion -----------------------------------------------------------------------

/// Deletes pod `name` and waits until it is gone: how long that took.
/// Deletes pod `name` (`kubectl delete`, in `c`'s default namespace) and tells how long
/// until the runtime showed none of its containers running (see [`delete_and_time`]).
fn delete_until_stopped(c: &Cluster, name: &str) -> Duration {
    let label = format!("io.kubernetes.pod.name={name}");
    delete_and_time(c.kubectl(&["delete", "pod", name, "--wait=true"]), &|| {
        c.crictl(&["ps", "-q", "--label", &label])
    })
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

/// What crustd still has of pod `name`'s containers, running or not.
fn crictl_containers(c: &Cluster, pod_name: &str, all: bool) -> Vec<Value> {
    let mut args = vec!["ps", "-o", "json", "--label", ""];
    let label = format!("io.kubernetes.pod.name={pod_name}");
    args[4] = &label;
    if all {
        args.push("-a");
    }
    let v: Value = serde_json::from_str(&ok(c.crictl(&args))).unwrap();
    v["containers"].as_array().cloned().unwrap_or_default()
}

/// Waits until crustd has no ready sandbox and no running container of pod `name`.
fn stopped_in_crustd(c: &Cluster, name: &str) {
    let label = format!("io.kubernetes.pod.name={name}");
    wait_for(&format!("crustd to stop {name}"), T, |last| {
        let ctrs = crictl_containers(c, name, false);
        let pods = ok(c.crictl(&["pods", "-q", "--state", "ready", "--label", &label]));
        *last = format!("containers {ctrs:?}, ready sandboxes {pods:?}");
        (ctrs.is_empty() && pods.trim().is_empty()).then_some(())
    });
}

fn graceful_deletion(c: &Cluster) {
    run_pod(
        c,
        pod(
            c,
            "graceful",
            "trap 'echo got TERM; exit 0' TERM; while true; do sleep 0.2; done",
            |p| {
                p["spec"]["terminationGracePeriodSeconds"] = json!(30);
            },
        ),
    );
    let took = delete_until_stopped(c, "graceful");
    // Without SIGTERM the grace period (30 s) would run out first.
    assert!(
        took < Duration::from_secs(20),
        "the container ran {took:?} after its deletion: SIGTERM not delivered?"
    );
    stopped_in_crustd(c, "graceful");
}

fn sigterm_ignored_until_grace_period(c: &Cluster) {
    run_pod(
        c,
        pod(
            c,
            "stubborn",
            "trap '' TERM; while true; do sleep 0.2; done",
            |p| {
                p["spec"]["terminationGracePeriodSeconds"] = json!(4);
            },
        ),
    );
    let took = delete_until_stopped(c, "stubborn");
    assert!(
        took >= Duration::from_millis(3500),
        "stopped after {took:?}, before its grace period"
    );
    // SIGKILL at the end of the 4 s grace period.
    assert!(
        took < Duration::from_secs(20),
        "the container ran {took:?} after its deletion"
    );
    stopped_in_crustd(c, "stubborn");
}

// ---- e. stats --------------------------------------------------------------------------

fn stats_summary(c: &Cluster) {
    run_pod(
        c,
        pod(
            c,
            "stats",
            "dd if=/dev/zero of=/tmp/fill bs=1M count=16; exec sleep 3600",
            |_| {},
        ),
    );
    let path = format!("/api/v1/nodes/{NODE}/proxy/stats/summary");
    wait_for("the pod's stats", Duration::from_secs(90), |last| {
        let out = run_timeout(&mut c.kubectl(&["get", "--raw", &path]), T);
        let v: Value = serde_json::from_slice(&out.stdout).ok()?;
        let p = v["pods"]
            .as_array()?
            .iter()
            .find(|p| p["podRef"]["name"] == "stats")?
            .clone();
        *last = p.to_string();
        let has = |x: &Value| {
            x["cpu"]["usageCoreNanoSeconds"]
                .as_u64()
                .is_some_and(|n| n > 0)
                && x["memory"]["workingSetBytes"]
                    .as_u64()
                    .is_some_and(|n| n > 0)
        };
        let ctr = p["containers"]
            .as_array()?
            .iter()
            .find(|c| c["name"] == "main")?
            .clone();
        (has(&p) && has(&ctr) && has(&v["node"])).then_some(())
    });
}

/// `/metrics/cadvisor` with PodAndContainerStatsFromCRI on: the kubelet serves it from
/// crustd's ListMetricDescriptors and ListPodSandboxMetrics. A container limited to a
/// fifth of a CPU that puts 16 MiB in the pod's /dev/shm and spins has its CPU seconds
/// (whole ones: the CRI's values are integers) and a working set of 16 MiB or more,
/// labelled with its pod, namespace, container name, crust id and image name, and its
/// memory limit; its pod's eth0 counts bytes both ways.
fn metrics_cadvisor(c: &Cluster) {
    use crust_e2e::prometheus::{label, samples, Sample};
    let p = run_pod(
        c,
        pod(
            c,
            "cadvisor",
            "head -c 16777216 /dev/zero > /dev/shm/fill; while :; do :; done",
            |p| {
                p["spec"]["containers"][0]["resources"] = json!({
                    "limits": {"cpu": "200m", "memory": "64Mi"},
                });
            },
        ),
    );
    let id = container_id(&p, "main");
    let path = format!("/api/v1/nodes/{NODE}/proxy/metrics/cadvisor");
    // The pod's samples of `name` for `container` ("" for the pod's own).
    let of = |all: &[Sample], name: &str, container: &str| -> Vec<Sample> {
        all.iter()
            .filter(|s| {
                s.0 == name
                    && label(s, "pod") == Some("cadvisor")
                    && label(s, "namespace") == Some("default")
                    && label(s, "container") == Some(container)
            })
            .cloned()
            .collect()
    };
    const MIB: f64 = 1024.0 * 1024.0;
    let (text, all) = wait_for(
        "the pod's CPU seconds and working set on /metrics/cadvisor",
        Duration::from_secs(90),
        |last| {
            let out = run_timeout(&mut c.kubectl(&["get", "--raw", &path]), T);
            let text = s(&out.stdout);
            let Some(all) = samples(&text) else {
                *last = format!("unreadable: {text}{}", s(&out.stderr));
                return None;
            };
            let cpu = of(&all, "container_cpu_usage_seconds_total", "main");
            let mem = of(&all, "container_memory_working_set_bytes", "main");
            *last = format!("{cpu:?} {mem:?} {}", s(&out.stderr));
            (cpu.first().is_some_and(|s| s.2 >= 1.0)
                && mem.first().is_some_and(|s| s.2 >= 16.0 * MIB))
            .then_some((text, all))
        },
    );
    // Plausible: fewer CPU seconds than the check has waited, no more memory than the
    // limit.
    for (name, kind, most) in [
        ("container_cpu_usage_seconds_total", "counter", 600.0),
        ("container_memory_working_set_bytes", "gauge", 64.0 * MIB),
    ] {
        let found = of(&all, name, "main");
        assert_eq!(found.len(), 1, "{name}: {found:?}");
        let s = &found[0];
        assert_eq!(label(s, "id"), Some(id.as_str()), "{name}: {s:?}");
        // The kubelet v1.28 creates a container by its image's id; the label is the
        // name its pod spec has.
        assert_eq!(label(s, "image"), Some(c.image.as_str()), "{name}: {s:?}");
        assert!(s.2 <= most, "{name}: {}", s.2);
        assert!(
            text.contains(&format!("# TYPE {name} {kind}\n")),
            "{name} is no {kind}"
        );
    }
    let limit = of(&all, "container_spec_memory_limit_bytes", "main");
    assert_eq!(limit.first().map(|s| s.2), Some(64.0 * MIB), "{limit:?}");
    // The pod's network: container "" and interface eth0, bytes both ways.
    for name in [
        "container_network_receive_bytes_total",
        "container_network_transmit_bytes_total",
    ] {
        let net = of(&all, name, "");
        assert!(
            net.iter()
                .any(|s| label(s, "interface") == Some("eth0") && s.2 > 0.0),
            "{name}: {net:?}"
        );
    }
    kubectl(c, &["delete", "pod", "cadvisor", "--wait=false"]);
}

// ---- f. restarts of crustd and the kubelet ----------------------------------------------

/// Container ids and restart counts of the given pods.
fn snapshot(c: &Cluster, pods: &[&str]) -> Vec<(String, u64)> {
    pods.iter()
        .map(|n| {
            let p = get(c, "pod", n).unwrap();
            let st = status_of(&p, "main").unwrap();
            (
                container_id(&p, "main"),
                st["restartCount"].as_u64().unwrap(),
            )
        })
        .collect()
}

/// The kubelet's log so far, in bytes: where the lines of what happens next begin.
fn kubelet_log_len(c: &Cluster) -> u64 {
    std::fs::metadata(c.log_path("kubelet"))
        .map(|m| m.len())
        .unwrap_or(0)
}

/// How many syncs of each of `pods` the kubelet finished after byte `since` of its log:
/// its `SyncPod exit` lines, which `Cluster::start_kubelet` has it write. A sync ends
/// after the runtime calls it decided on (a container killed, made, started), so what
/// it changed is in crustd by the time its line is.
fn syncs_since(c: &Cluster, pods: &[&str], since: u64) -> Vec<usize> {
    use std::io::Seek;
    let mut log = Vec::new();
    if let Ok(mut f) = std::fs::File::open(c.log_path("kubelet")) {
        if f.seek(std::io::SeekFrom::Start(since)).is_ok() {
            let _ = f.read_to_end(&mut log);
        }
    }
    let log = String::from_utf8_lossy(&log);
    pods.iter()
        .map(|n| {
            log.matches(&format!("\"SyncPod exit\" pod=\"default/{n}\""))
                .count()
        })
        .collect()
}

/// Waits until the kubelet has finished `n` syncs of each of `pods` after byte `since`
/// of its log.
fn wait_synced(c: &Cluster, pods: &[&str], since: u64, n: usize) {
    wait_for(
        &format!("the kubelet to sync {pods:?} {n} time(s)"),
        T,
        |last| {
            let done = syncs_since(c, pods, since);
            *last = format!("syncs so far: {done:?}");
            done.iter().all(|&k| k >= n).then_some(())
        },
    );
}

/// Once the kubelet synced them against crustd as it is now: the survivors' containers
/// are those of before, in crustd (where a restart decided in that sync already shows)
/// and in the pods' status.
fn survivors_unchanged(c: &Cluster, pods: &[&str], before: &[(String, u64)]) {
    assert!(
        c.kubelet_running(),
        "the kubelet exited: {}",
        tail(&c.log("kubelet"), 20)
    );
    for (n, (id, _)) in pods.iter().zip(before) {
        let ctrs = crictl_containers(c, n, true);
        let now: Vec<_> = ctrs.iter().map(|x| (&x["id"], &x["state"])).collect();
        assert_eq!(
            now,
            [(&json!(id), &json!("CONTAINER_RUNNING"))],
            "{n}: crustd's containers of the pod"
        );
    }
    c.wait_node_ready(T);
    for (n, (id, restarts)) in pods.iter().zip(before) {
        let p = wait_pod(c, n, "running", T, running);
        assert_eq!(&container_id(&p, "main"), id, "{n}: a new container");
        assert_eq!(
            status_of(&p, "main").unwrap()["restartCount"].as_u64(),
            Some(*restarts),
            "{n} restarted"
        );
        assert_eq!(kubectl(c, &["exec", n, "--", "echo", "alive"]), "alive\n");
    }
}

fn crustd_killed_and_restarted(c: &Cluster) {
    let pods = ["survivor-a", "survivor-b"];
    for n in pods {
        sleeper(c, n);
    }
    let before = snapshot(c, &pods);
    c.kill_crustd();
    std::thread::sleep(Duration::from_secs(3));
    c.start_crustd();
    // The kubelet kept running, and resyncs a pod only every minute or so: each survivor
    // is updated (an annotation) to be synced now, twice. The pod worker starts a sync
    // from a relist of the runtime newer than the end of the one before, so the second
    // one is decided on what the restarted crustd answers.
    let since = kubelet_log_len(c);
    for round in 1..=2 {
        for n in pods {
            let mark = format!("crust.test/sync={round}");
            kubectl(c, &["annotate", "pod", n, &mark, "--overwrite"]);
        }
        wait_synced(c, &pods, since, round);
    }
    survivors_unchanged(c, &pods, &before);
    sleeper(c, "after-crustd");
    kubectl(c, &["delete", "pod", "after-crustd", "--wait=true"]);
}

fn kubelet_restarted_adopts_its_pods(c: &Cluster) {
    let pods = ["survivor-a", "survivor-b"];
    if get(c, "pod", pods[0]).is_none() {
        for n in pods {
            sleeper(c, n);
        }
    }
    let before = snapshot(c, &pods);
    c.stop_kubelet();
    std::thread::sleep(Duration::from_secs(2));
    // A new process: its first sync of a pod waits for its first relist of the runtime.
    let since = kubelet_log_len(c);
    c.start_kubelet();
    wait_synced(c, &pods, since, 1);
    survivors_unchanged(c, &pods, &before);
    sleeper(c, "after-kubelet");
}

// ---- g. the kubelet's log ----------------------------------------------------------------

fn tail(text: &str, n: usize) -> String {
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

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
    let mut res = results.lock().unwrap();
    match r {
        Ok(()) => {
            println!("test {} ... ok ({secs:.1}s)", ch.name);
            res.passed.push(ch.name);
        }
        Err(e) => {
            println!("test {} ... FAILED ({secs:.1}s)", ch.name);
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
            crustlet_host_port_admission,
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
