//! The crustlet's checks: the second node of the suite's cluster (`crustlet-node`, the
//! crustlet on a crustd of its own), driven through the same apiserver with the real
//! kubectl, and compared with the real kubelet on `crust-node` where both get the same
//! pod.
//!
//! The crustlet's pods live in the `crustlet` namespace, each with a toleration of the
//! node's taint and a nodeSelector for it (the scheduler binds them, as on any node), so
//! the kubelet checks' pods and their cleanup never meet them. These checks read a
//! container's output from its CRI log file under the crustlet's `--pod-logs-dir` and
//! drive containers through files of a hostPath volume; `kubectl logs`/`exec` and the
//! rest of the HTTPS server have their own checks (crustlet_server_checks.rs).
//!
//! The core of them runs on the cluster's third node too, the crustlet on containerd
//! (`crustlet-containerd`, pods in namespace `crustlet-containerd`): the same check
//! functions, given that node as a [`Crustlet`] (`containerd_*` beside `crustlet_*`).

use super::{apply, container, ok, run_timeout, s, status_of, wait_for, T};
use crust_e2e::cluster::{Cluster, CONTAINERD_NODE, CRUSTLET_NODE, CRUSTLET_TAINT, NODE};
use serde_json::{json, Value};
use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

pub const NS: &str = "crustlet";

/// A crustlet's node as the checks see it: the crustlet on its crustd
/// ([`Crustlet::on_crustd`]) or on containerd ([`Crustlet::on_containerd`]). It
/// derefs to the cluster, so a check takes either.
pub struct Crustlet<'a> {
    c: &'a Cluster,
    pub node: &'static str,
    /// The namespace of its pods.
    pub ns: &'static str,
    pub ip: String,
    /// The runtime's name: the scheme of container ids and of containerRuntimeVersion.
    pub runtime: &'static str,
    /// The pod network's prefix, `10.<n>.<k>.`.
    pub pod_net: String,
    /// The crustlet's `--pod-logs-dir`.
    pub logs: PathBuf,
    /// The crustlet's `--cgroup-root`.
    pub cgroup_root: String,
    crictl: fn(&Cluster, &[&str]) -> Command,
    running: fn(&Cluster) -> bool,
    /// The name of the crustlet's log in the cluster's logs.
    pub log_name: &'static str,
}

impl std::ops::Deref for Crustlet<'_> {
    type Target = Cluster;
    fn deref(&self) -> &Cluster {
        self.c
    }
}

impl<'a> Crustlet<'a> {
    pub fn on_crustd(c: &'a Cluster) -> Self {
        Crustlet {
            c,
            node: CRUSTLET_NODE,
            ns: NS,
            ip: c.crustlet_ip.clone(),
            runtime: "crust",
            pod_net: format!("10.{}.1.", c.subnet),
            logs: c.path("crustlet-pods"),
            cgroup_root: c.crustlet_cgroup_root.clone(),
            crictl: Cluster::crustlet_crictl,
            running: Cluster::crustlet_running,
            log_name: "crustlet",
        }
    }

    pub fn on_containerd(c: &'a Cluster) -> Self {
        Crustlet {
            c,
            node: CONTAINERD_NODE,
            ns: CONTAINERD_NODE,
            ip: c.containerd_ip.clone(),
            runtime: "containerd",
            pod_net: format!("10.{}.2.", c.subnet),
            logs: c.path("ctrdlet-pods"),
            cgroup_root: c.containerd_cgroup_root.clone(),
            crictl: Cluster::containerd_crictl,
            running: Cluster::containerd_crustlet_running,
            log_name: "ctrdlet",
        }
    }

    /// `crictl` against this node's runtime.
    pub fn node_crictl(&self, args: &[&str]) -> Command {
        (self.crictl)(self.c, args)
    }

    pub fn crustlet_up(&self) -> bool {
        (self.running)(self.c)
    }
}

/// `pub fn $crustd(&Cluster)` and `pub fn $containerd(&Cluster)` running the check
/// `$check` on the crustlet's node and on the containerd one.
macro_rules! on_both {
    ($($check:ident => $crustd:ident, $containerd:ident;)*) => {$(
        pub fn $crustd(c: &Cluster) {
            $check(&Crustlet::on_crustd(c))
        }
        pub fn $containerd(c: &Cluster) {
            $check(&Crustlet::on_containerd(c))
        }
    )*};
}

on_both! {
    node_ready => crustlet_node, containerd_node;
    pod_running => crustlet_pod_running, containerd_pod_running;
    init_containers_in_order => crustlet_init_containers_in_order, containerd_init_containers_in_order;
    restart_policies => crustlet_restart_policies, containerd_restart_policies;
    liveness_probe_exec => crustlet_liveness_probe_exec, containerd_liveness_probe_exec;
    readiness_probe_http => crustlet_readiness_probe_http, containerd_readiness_probe_http;
    startup_probe_tcp => crustlet_startup_probe_tcp, containerd_startup_probe_tcp;
    graceful_deletion => crustlet_graceful_deletion, containerd_graceful_deletion;
}

pub(crate) fn kubectl(c: &Crustlet, args: &[&str]) -> String {
    let mut full = vec!["-n", c.ns];
    full.extend_from_slice(args);
    ok(c.kubectl(&full))
}

pub(crate) fn get(c: &Crustlet, kind: &str, name: &str) -> Option<Value> {
    let out = run_timeout(
        &mut c.kubectl(&["-n", c.ns, "get", kind, name, "-o", "json"]),
        T,
    );
    if !out.status.success() {
        return None;
    }
    serde_json::from_slice(&out.stdout).ok()
}

fn node(c: &Cluster, name: &str) -> Option<Value> {
    let out = run_timeout(&mut c.kubectl(&["get", "node", name, "-o", "json"]), T);
    out.status
        .success()
        .then(|| serde_json::from_slice(&out.stdout).ok())
        .flatten()
}

pub(crate) fn condition<'a>(v: &'a Value, t: &str) -> Option<&'a Value> {
    v["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == t)
}

/// Puts a pod spec (`spec` of a Pod or of a template) on node `to`: a nodeSelector, and
/// for the crustlet's node the toleration of its taint.
fn place(spec: &mut Value, to: &str) {
    spec["nodeSelector"] = json!({"kubernetes.io/hostname": to});
    if to != NODE {
        spec["tolerations"] =
            json!([{"key": CRUSTLET_TAINT, "operator": "Exists", "effect": "NoSchedule"}]);
    }
}

/// A pod of one container `main` running `script` in the crustlet namespace, for the
/// crustlet's node, changed by `change`.
pub(crate) fn pod(
    c: &Crustlet,
    name: &str,
    script: &str,
    change: impl FnOnce(&mut Value),
) -> Value {
    pod_on(c, c.node, name, script, change)
}

pub(crate) fn pod_on(
    c: &Crustlet,
    to: &str,
    name: &str,
    script: &str,
    change: impl FnOnce(&mut Value),
) -> Value {
    let mut p = json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": c.ns, "labels": {"suite": "crustlet"}},
        "spec": {
            "terminationGracePeriodSeconds": 2,
            "containers": [container("main", &c.image, script)],
        }
    });
    place(&mut p["spec"], to);
    change(&mut p);
    p
}

pub(crate) fn wait_pod(
    c: &Crustlet,
    name: &str,
    what: &str,
    limit: Duration,
    pred: impl Fn(&Value) -> bool,
) -> Value {
    super::wait_pod_in(c, c.ns, name, what, limit, pred)
}

fn running(p: &Value) -> bool {
    super::running(p)
}

pub(crate) fn run_pod(c: &Crustlet, p: Value) -> Value {
    let name = p["metadata"]["name"].as_str().unwrap().to_string();
    apply(c, p);
    wait_pod(c, &name, "Running", Duration::from_secs(90), running)
}

fn container_id(p: &Value, ctr: &str) -> String {
    super::container_id(p, ctr)
}

/// `containerID` of `ctr` as the status has it (`<runtime>://<id>`), "" if none.
fn raw_id(p: &Value, ctr: &str) -> String {
    status_of(p, ctr)
        .and_then(|s| s["containerID"].as_str().map(str::to_string))
        .unwrap_or_default()
}

/// What the container `ctr` of pod `p` wrote (attempt `attempt`), from its CRI log file
/// under the crustlet's pod logs dir (there is no `kubectl logs` to the crustlet yet).
fn log_of(c: &Crustlet, p: &Value, ctr: &str, attempt: u32) -> String {
    let dir = format!(
        "{}_{}_{}",
        p["metadata"]["namespace"].as_str().unwrap(),
        p["metadata"]["name"].as_str().unwrap(),
        p["metadata"]["uid"].as_str().unwrap()
    );
    let path = c.logs.join(dir).join(ctr).join(format!("{attempt}.log"));
    let text = std::fs::read_to_string(&path).unwrap_or_default();
    let mut out = String::new();
    for line in text.lines() {
        // <time> <stream> <P|F> <text>
        let mut f = line.splitn(4, ' ');
        let (_, _, tag, msg) = (f.next(), f.next(), f.next(), f.next().unwrap_or(""));
        out.push_str(msg);
        if tag == Some("F") {
            out.push('\n');
        }
    }
    out
}

/// Waits until the container's log has a line starting with `prefix`; all its lines.
pub(crate) fn wait_log(c: &Crustlet, p: &Value, ctr: &str, prefix: &str) -> String {
    wait_for(&format!("a log line {prefix:?}"), T, |last| {
        let l = log_of(c, p, ctr, 0);
        *last = l.clone();
        l.lines().any(|x| x.starts_with(prefix)).then_some(l)
    })
}

/// The event reasons of an object in the crustlet namespace.
fn event_reasons(c: &Crustlet, name: &str) -> Vec<String> {
    let sel = format!("involvedObject.name={name}");
    let v: Value = serde_json::from_str(&kubectl(
        c,
        &["get", "events", "--field-selector", &sel, "-o", "json"],
    ))
    .unwrap();
    let mut r: Vec<String> = v["items"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|e| e["reason"].as_str().map(str::to_string))
        .collect();
    r.sort();
    r.dedup();
    r
}

/// A host folder the test writes into and a pod sees at `/ctl` (hostPath).
fn control_dir(c: &Crustlet, name: &str) -> PathBuf {
    let d = c.path(&format!("{}-ctl", c.ns)).join(name);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn with_control(p: &mut Value, dir: &std::path::Path) {
    p["spec"]["volumes"] = json!([{"name": "ctl", "hostPath": {"path": dir, "type": "Directory"}}]);
    p["spec"]["containers"][0]["volumeMounts"] = json!([{"name": "ctl", "mountPath": "/ctl"}]);
}

// ---- the node ------------------------------------------------------------------------

/// Ready, with what the kubelet reports; the namespace the other checks use.
fn node_ready(c: &Crustlet) {
    apply(
        c,
        json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": c.ns}}),
    );
    let n = wait_for(
        &format!("the node {} to be Ready", c.node),
        Duration::from_secs(90),
        |last| {
            let n = node(c, c.node)?;
            *last = n["status"]["conditions"].to_string();
            (condition(&n, "Ready")?["status"] == "True").then_some(n)
        },
    );
    let st = &n["status"];
    let rv = st["nodeInfo"]["containerRuntimeVersion"]
        .as_str()
        .unwrap_or("");
    if c.runtime == "crust" {
        assert_eq!(
            rv,
            format!("crust://{}", env!("CARGO_PKG_VERSION")),
            "{st:#}"
        );
    } else {
        assert!(rv.starts_with(&format!("{}://1.", c.runtime)), "{st:#}");
    }
    let kv = st["nodeInfo"]["kubeletVersion"].as_str().unwrap_or("");
    assert!(kv.starts_with("v1.28.7+crustlet."), "kubeletVersion {kv}");
    for k in ["osImage", "kernelVersion", "machineID", "bootID"] {
        assert!(
            st["nodeInfo"][k].as_str().is_some_and(|v| !v.is_empty()),
            "nodeInfo.{k}: {st:#}"
        );
    }
    let addrs = st["addresses"].as_array().unwrap();
    assert!(
        addrs
            .iter()
            .any(|a| a["type"] == "InternalIP" && a["address"] == c.ip.as_str()),
        "{addrs:?}"
    );
    assert!(
        addrs
            .iter()
            .any(|a| a["type"] == "Hostname" && a["address"] == c.node),
        "{addrs:?}"
    );
    for r in ["cpu", "memory", "pods", "ephemeral-storage"] {
        assert!(st["capacity"][r].is_string(), "capacity.{r}: {st:#}");
        assert!(st["allocatable"][r].is_string(), "allocatable.{r}: {st:#}");
    }
    assert_eq!(st["capacity"]["pods"], "110");
    for t in ["MemoryPressure", "DiskPressure", "PIDPressure"] {
        assert_eq!(condition(&n, t).unwrap()["status"], "False", "{t}");
    }
    // The same shape as the real kubelet's Node, on the same machine.
    let k = node(c, NODE).unwrap();
    assert_eq!(
        st["capacity"]["cpu"], k["status"]["capacity"]["cpu"],
        "cpu capacity"
    );
    let mut ours: Vec<&str> = st["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|c| c["type"].as_str())
        .collect();
    let mut theirs: Vec<&str> = k["status"]["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|c| c["type"].as_str())
        .collect();
    ours.sort();
    theirs.sort();
    assert_eq!(ours, theirs, "node condition types");
    assert_eq!(n["metadata"]["labels"]["kubernetes.io/hostname"], c.node);
    // The taint the cluster put on it, so the kubelet checks' pods stay away.
    assert!(
        n["spec"]["taints"].to_string().contains(CRUSTLET_TAINT),
        "{}",
        n["spec"]
    );
    wait_for(
        "the crustlet namespace's service account and CA",
        T,
        |last| {
            let out = run_timeout(
                &mut c.kubectl(&[
                    "-n",
                    c.ns,
                    "get",
                    "serviceaccount/default",
                    "configmap/kube-root-ca.crt",
                ]),
                T,
            );
            *last = s(&out.stderr);
            out.status.success().then_some(())
        },
    );
}

/// The Lease in kube-node-lease, owned by the Node and renewed.
pub fn crustlet_lease_renewed(c: &Cluster) {
    let c = &Crustlet::on_crustd(c);
    let lease = |_: &mut String| {
        let out = run_timeout(
            &mut c.kubectl(&[
                "-n",
                "kube-node-lease",
                "get",
                "lease",
                CRUSTLET_NODE,
                "-o",
                "json",
            ]),
            T,
        );
        serde_json::from_slice::<Value>(&out.stdout).ok()
    };
    let first = wait_for("the crustlet's lease", T, lease);
    assert_eq!(first["spec"]["holderIdentity"], CRUSTLET_NODE);
    assert_eq!(first["spec"]["leaseDurationSeconds"], 40);
    let t0 = first["spec"]["renewTime"].clone();
    let renewed = wait_for("the lease to be renewed", Duration::from_secs(30), |last| {
        let l = lease(last)?;
        *last = l["spec"].to_string();
        (l["spec"]["renewTime"] != t0).then_some(l)
    });
    // Owned by the Node once that is registered (a renewal after it, like the
    // kubelet's), so the garbage collector takes it with the Node.
    let owner = &renewed["metadata"]["ownerReferences"][0];
    assert_eq!(owner["kind"], "Node", "{renewed:#}");
    assert_eq!(owner["name"], CRUSTLET_NODE, "{renewed:#}");
}

// ---- a pod ----------------------------------------------------------------------------

fn pod_running(c: &Crustlet) {
    let p = run_pod(
        c,
        pod(
            c,
            "web",
            "echo serving; exec httpd -f -p 8080 -h /www",
            |p| {
                p["spec"]["containers"][0]["imagePullPolicy"] = json!("Always");
            },
        ),
    );
    let st = &p["status"];
    let ip = st["podIP"].as_str().unwrap_or_default();
    assert!(ip.starts_with(&c.pod_net), "pod IP {ip:?}");
    assert_eq!(st["podIPs"][0]["ip"], ip);
    assert_eq!(st["hostIP"], c.ip.as_str());
    assert_eq!(st["qosClass"], "BestEffort");
    assert!(st["startTime"].is_string(), "{st:#}");
    for t in [
        "PodScheduled",
        "Initialized",
        "ContainersReady",
        "Ready",
        "PodReadyToStartContainers",
    ] {
        let cond = condition(&p, t).unwrap_or_else(|| panic!("no {t}: {st:#}"));
        assert_eq!(cond["status"], "True", "{t}: {st:#}");
    }
    let cs = status_of(&p, "main").unwrap();
    let scheme = format!("{}://", c.runtime);
    assert!(
        cs["containerID"]
            .as_str()
            .is_some_and(|i| i.starts_with(&scheme)),
        "{cs}"
    );
    assert!(
        cs["imageID"].as_str().is_some_and(|i| !i.is_empty()),
        "{cs}"
    );
    assert_eq!(cs["image"], c.image.as_str());
    assert_eq!(cs["started"], true, "{cs}");
    assert_eq!(cs["ready"], true, "{cs}");
    assert_eq!(cs["restartCount"], 0, "{cs}");
    assert!(cs["state"]["running"]["startedAt"].is_string(), "{cs}");
    // Its web server answers on the pod IP, across the crustlet's bridge.
    let body = wait_for("the pod's web server", T, |last| {
        super::http_get(c, &format!("{ip}:8080"), "/")
            .map_err(|e| *last = e)
            .ok()
    });
    assert!(body.contains("hello from crust"), "{body}");
    assert_eq!(wait_log(c, &p, "main", "serving"), "serving\n");
    let events = event_reasons(c, "web");
    for r in ["Scheduled", "Pulling", "Pulled", "Created", "Started"] {
        assert!(events.iter().any(|e| e == r), "no {r} event: {events:?}");
    }
    // Its sandbox is in the crustlet's runtime, not the kubelet's.
    let pods: Value = serde_json::from_str(&ok(c.node_crictl(&[
        "pods",
        "--name",
        "web",
        "--namespace",
        c.ns,
        "-o",
        "json",
    ])))
    .unwrap();
    assert!(
        pods["items"]
            .as_array()
            .unwrap()
            .iter()
            .any(|i| i["state"] == "SANDBOX_READY"),
        "{pods:#}"
    );
}

fn init_containers_in_order(c: &Crustlet) {
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
    assert_eq!(wait_log(c, &p, "main", "second"), "first\nsecond\n");
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

fn restart_policies(c: &Crustlet) {
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
    let st = status_of(&p, "main").unwrap();
    let last = &st["lastState"]["terminated"];
    assert_eq!(last["exitCode"], 3, "{last}");
    assert_eq!(last["reason"], "Error", "{last}");
    assert_eq!(p["status"]["phase"], "Running", "{:#}", p["status"]);
    assert_eq!(condition(&p, "Ready").unwrap()["status"], "False");
    let events = event_reasons(c, "crash");
    assert!(events.iter().any(|e| e == "BackOff"), "{events:?}");
    let p = wait_pod(c, "onfailure", "Succeeded", T, |p| {
        p["status"]["phase"] == "Succeeded"
    });
    let st = status_of(&p, "main").unwrap();
    assert_eq!(st["restartCount"], 0);
    assert_eq!(st["state"]["terminated"]["reason"], "Completed", "{st}");
    let p = wait_pod(c, "never", "Failed", T, |p| {
        p["status"]["phase"] == "Failed"
    });
    let st = status_of(&p, "main").unwrap();
    assert_eq!(st["restartCount"], 0);
    assert_eq!(st["state"]["terminated"]["exitCode"], 4, "{st}");
}

// ---- probes ---------------------------------------------------------------------------

fn liveness_probe_exec(c: &Crustlet) {
    apply(
        c,
        pod(
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
        ),
    );
    let p = wait_pod(
        c,
        "live",
        "restarted by its liveness probe",
        Duration::from_secs(90),
        |p| status_of(p, "main").is_some_and(|s| s["restartCount"].as_u64() >= Some(1)),
    );
    let last = &status_of(&p, "main").unwrap()["lastState"]["terminated"];
    assert!(last.is_object(), "{p:#}");
    let events = event_reasons(c, "live");
    for r in ["Unhealthy", "Killing"] {
        assert!(events.iter().any(|e| e == r), "no {r}: {events:?}");
    }
}

fn readiness_probe_http(c: &Crustlet) {
    let dir = control_dir(c, "ready");
    let p = pod(c, "ready", "exec httpd -f -p 8080 -h /ctl", |p| {
        with_control(p, &dir);
        p["spec"]["containers"][0]["readinessProbe"] = json!({
            "httpGet": {"path": "/ready.html", "port": 8080},
            "periodSeconds": 1,
        });
    });
    apply(c, p);
    let not_ready = |p: &Value| {
        running(p)
            && status_of(p, "main").is_some_and(|s| s["ready"] == false)
            && condition(p, "Ready").is_some_and(|c| c["status"] == "False")
    };
    wait_pod(c, "ready", "running, not ready", T, not_ready);
    std::thread::sleep(Duration::from_secs(3));
    let p = get(c, "pod", "ready").unwrap();
    assert!(not_ready(&p), "{:#}", p["status"]);
    std::fs::write(dir.join("ready.html"), "ok\n").unwrap();
    wait_pod(c, "ready", "ready", T, |p| {
        status_of(p, "main").is_some_and(|s| s["ready"] == true)
            && condition(p, "Ready").is_some_and(|c| c["status"] == "True")
    });
    // And back: not ready (one failure is enough), still running, no restart.
    std::fs::remove_file(dir.join("ready.html")).unwrap();
    let p = wait_pod(c, "ready", "not ready again", T, not_ready);
    assert_eq!(status_of(&p, "main").unwrap()["restartCount"], 0);
}

fn startup_probe_tcp(c: &Crustlet) {
    let dir = control_dir(c, "startup");
    let script = "while [ ! -e /ctl/go ]; do sleep 0.2; done; exec httpd -f -p 8080 -h /www";
    let p = pod(c, "startup", script, |p| {
        with_control(p, &dir);
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
    let p = get(c, "pod", "startup").unwrap();
    let st = status_of(&p, "main").unwrap();
    assert_eq!(
        (&st["started"], &st["ready"]),
        (&json!(false), &json!(false)),
        "{st}"
    );
    std::fs::write(dir.join("go"), "").unwrap();
    let p = wait_pod(c, "startup", "started and ready", T, |p| {
        status_of(p, "main").is_some_and(|s| s["started"] == true && s["ready"] == true)
    });
    assert_eq!(status_of(&p, "main").unwrap()["restartCount"], 0, "{p:#}");
}

// ---- deletion -------------------------------------------------------------------------

pub(crate) fn delete_timed(c: &Crustlet, name: &str) -> Duration {
    let start = Instant::now();
    let out = run_timeout(
        &mut c.kubectl(&["-n", c.ns, "delete", "pod", name, "--wait=true"]),
        Duration::from_secs(90),
    );
    assert!(out.status.success(), "{}", s(&out.stderr));
    start.elapsed()
}

/// Deletes pod `name` and tells how long until its runtime showed none of its containers
/// running (see [`super::delete_and_time`]).
fn delete_until_stopped(c: &Crustlet, name: &str) -> Duration {
    let label = format!("io.kubernetes.pod.name={name}");
    super::delete_and_time(
        c.kubectl(&["-n", c.ns, "delete", "pod", name, "--wait=true"]),
        &|| c.node_crictl(&["ps", "-q", "--label", &label]),
    )
}

/// The crustlet's runtime has nothing (not even stopped) of pod `name`.
pub(crate) fn gone_from_crustd(c: &Crustlet, name: &str) {
    let label = format!("io.kubernetes.pod.name={name}");
    wait_for(&format!("{} to forget {name}", c.runtime), T, |last| {
        let pods = ok(c.node_crictl(&["pods", "-q", "--label", &label]));
        let ctrs = ok(c.node_crictl(&["ps", "-a", "-q", "--label", &label]));
        *last = format!("sandboxes {pods:?}, containers {ctrs:?}");
        (pods.trim().is_empty() && ctrs.trim().is_empty()).then_some(())
    });
}

fn graceful_deletion(c: &Crustlet) {
    let dir = control_dir(c, "graceful");
    run_pod(
        c,
        pod(
            c,
            "graceful",
            "trap 'echo got-TERM >> /ctl/log; exit 0' TERM; while true; do sleep 0.2; done",
            |p| {
                with_control(p, &dir);
                p["spec"]["terminationGracePeriodSeconds"] = json!(30);
                p["spec"]["containers"][0]["lifecycle"] = json!({
                    "preStop": {"exec": {"command": ["sh", "-c", "echo preStop >> /ctl/log"]}}
                });
            },
        ),
    );
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
    let stubborn = std::thread::scope(|sc| {
        let h = sc.spawn(|| delete_until_stopped(c, "stubborn"));
        let took = delete_until_stopped(c, "graceful");
        // As the kubelet's check: the grace period is 30 s.
        assert!(
            took < Duration::from_secs(20),
            "the container ran {took:?} after its deletion: SIGTERM not delivered?"
        );
        h.join().unwrap()
    });
    assert_eq!(
        std::fs::read_to_string(dir.join("log")).unwrap_or_default(),
        "preStop\ngot-TERM\n",
        "the preStop hook runs before SIGTERM"
    );
    assert!(
        stubborn >= Duration::from_millis(3500),
        "stopped after {stubborn:?}, before its grace period"
    );
    assert!(
        stubborn < Duration::from_secs(20),
        "the container ran {stubborn:?} after its deletion"
    );
    gone_from_crustd(c, "graceful");
    gone_from_crustd(c, "stubborn");
}

// ---- static pods ----------------------------------------------------------------------

pub fn crustlet_static_pod_mirrored(c: &Cluster) {
    let c = &Crustlet::on_crustd(c);
    let manifest = c.path("crustlet-manifests/static.yaml");
    std::fs::write(
        &manifest,
        format!(
            "apiVersion: v1\nkind: Pod\nmetadata:\n  name: static\n  namespace: {NS}\n  labels:\n    app: static\n\
             spec:\n  containers:\n  - name: main\n    image: {}\n    imagePullPolicy: IfNotPresent\n    command: [sh, -c, 'echo static; exec sleep 3600']\n",
            c.image
        ),
    )
    .unwrap();
    let name = format!("static-{CRUSTLET_NODE}");
    let p = wait_pod(
        c,
        &name,
        "a mirror pod, Running",
        Duration::from_secs(60),
        running,
    );
    let ann = &p["metadata"]["annotations"];
    assert!(ann["kubernetes.io/config.mirror"].is_string(), "{ann}");
    assert_eq!(ann["kubernetes.io/config.source"], "file", "{ann}");
    assert_eq!(p["spec"]["nodeName"], CRUSTLET_NODE);
    let cs = status_of(&p, "main").unwrap();
    assert!(
        cs["containerID"]
            .as_str()
            .is_some_and(|i| i.starts_with("crust://")),
        "{cs}"
    );
    assert_eq!(condition(&p, "Ready").unwrap()["status"], "True");
    // Its events go to the mirror pod.
    let events = event_reasons(c, &name);
    assert!(events.iter().any(|e| e == "Started"), "{events:?}");
    // The manifest removed: the pod stops, and its mirror goes.
    std::fs::remove_file(&manifest).unwrap();
    wait_for("the mirror pod to go", T, |_| {
        get(c, "pod", &name).is_none().then_some(())
    });
    gone_from_crustd(c, &name);
}

// The checks of the crustlet's HTTPS server (kubectl logs, exec, attach, port-forward,
// cp, debug, stats through the apiserver).
#[path = "crustlet_server_checks.rs"]
mod server_checks;
pub use server_checks::*;

// Jobs and Deployments, volumes, env, images, resources.
#[path = "crustlet_workload_checks.rs"]
mod workload_checks;
pub use workload_checks::*;

// The same pods on the kubelet's node and on the crustlet's.
#[path = "crustlet_same_as_kubelet_checks.rs"]
mod same_as_kubelet_checks;
pub use same_as_kubelet_checks::*;

// Containers, crustd and the crustlet restarted; pod routes; nothing left at the end.
#[path = "crustlet_restart_checks.rs"]
mod restart_checks;
pub use restart_checks::*;
