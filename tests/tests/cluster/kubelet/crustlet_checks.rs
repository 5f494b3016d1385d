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
    volumes_and_env => crustlet_volumes_and_env, containerd_volumes_and_env;
    graceful_deletion => crustlet_graceful_deletion, containerd_graceful_deletion;
    image_change_restarts => crustlet_image_change_restarts, containerd_image_change_restarts;
    restart_count_across_sandboxes => crustlet_restart_count_across_sandboxes, containerd_restart_count_across_sandboxes;
    nothing_left => crustlet_nothing_left_in_crustd, containerd_nothing_left;
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

// ---- controllers ----------------------------------------------------------------------

pub fn crustlet_job_to_completion(c: &Cluster) {
    let c = &Crustlet::on_crustd(c);
    let mut template = json!({
        "spec": {
            "restartPolicy": "Never",
            "containers": [container("main", &c.image, "echo job-done")],
        }
    });
    place(&mut template["spec"], CRUSTLET_NODE);
    apply(
        c,
        json!({
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": {"name": "job", "namespace": NS},
            "spec": {"completions": 2, "parallelism": 2, "backoffLimit": 0, "template": template}
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
    let pods: Value = serde_json::from_str(&kubectl(
        c,
        &["get", "pods", "-l", "job-name=job", "-o", "json"],
    ))
    .unwrap();
    for p in pods["items"].as_array().unwrap() {
        assert_eq!(p["spec"]["nodeName"], CRUSTLET_NODE);
        assert_eq!(p["status"]["phase"], "Succeeded");
        assert_eq!(log_of(c, p, "main", 0), "job-done\n");
    }
}

pub fn crustlet_deployment_scaled_up_and_down(c: &Cluster) {
    let c = &Crustlet::on_crustd(c);
    let mut template = json!({
        "metadata": {"labels": {"app": "scaler"}},
        "spec": {
            "terminationGracePeriodSeconds": 1,
            "containers": [container("main", &c.image, "exec sleep 3600")],
        }
    });
    place(&mut template["spec"], CRUSTLET_NODE);
    apply(
        c,
        json!({
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": "scaler", "namespace": NS},
            "spec": {
                "replicas": 1,
                "selector": {"matchLabels": {"app": "scaler"}},
                "template": template,
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
                && items
                    .iter()
                    .all(|p| running(p) && p["spec"]["nodeName"] == CRUSTLET_NODE))
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

// ---- inputs: volumes, env, images -----------------------------------------------------

fn volumes_and_env(c: &Crustlet) {
    apply(
        c,
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cfg", "namespace": c.ns},
               "data": {"greeting": "hello-config"}}),
    );
    apply(
        c,
        json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "sec", "namespace": c.ns},
               "stringData": {"password": "s3cret"}}),
    );
    let sa = "/var/run/secrets/kubernetes.io/serviceaccount";
    let script = format!(
        "echo cfg=$(cat /etc/cfg/greeting); echo sec=$(cat /etc/sec/password); \
         echo tok=$(cat /var/run/tok/token); echo satok=$(cat {sa}/token); \
         echo sans=$(cat {sa}/namespace); echo saca=$(head -1 {sa}/ca.crt); \
         echo env=$GREETING/$PASSWORD/$EXPANDED/$POD_NAME/$NODE_NAME/$POD_IP/$HOST_IP; \
         touch /etc/sec/x 2>/dev/null && echo sec=writable; echo done; exec sleep 3600"
    );
    let p = run_pod(
        c,
        pod(c, "vols", &script, |p| {
            p["spec"]["volumes"] = json!([
                {"name": "cfg", "configMap": {"name": "cfg"}},
                {"name": "sec", "secret": {"secretName": "sec"}},
                {"name": "tok", "projected": {"sources": [
                    {"serviceAccountToken": {"path": "token", "audience": "crust-test", "expirationSeconds": 3600}}
                ]}},
            ]);
            let m = &mut p["spec"]["containers"][0];
            m["volumeMounts"] = json!([
                {"name": "cfg", "mountPath": "/etc/cfg"},
                {"name": "sec", "mountPath": "/etc/sec"},
                {"name": "tok", "mountPath": "/var/run/tok"},
            ]);
            m["env"] = json!([
                {"name": "GREETING", "valueFrom": {"configMapKeyRef": {"name": "cfg", "key": "greeting"}}},
                {"name": "PASSWORD", "valueFrom": {"secretKeyRef": {"name": "sec", "key": "password"}}},
                {"name": "EXPANDED", "value": "[$(GREETING)]"},
                {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
                {"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
                {"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
                {"name": "HOST_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.hostIP"}}},
            ]);
        }),
    );
    let log = wait_log(c, &p, "main", "done");
    let line = |k: &str| {
        log.lines()
            .find_map(|l| l.strip_prefix(&format!("{k}=")))
            .unwrap_or_else(|| panic!("no {k}= in {log}"))
            .to_string()
    };
    assert_eq!(line("cfg"), "hello-config", "{log}");
    assert_eq!(line("sec"), "s3cret", "{log}");
    let claims = super::jwt_claims(&line("tok"));
    assert_eq!(claims["aud"], json!(["crust-test"]), "{claims}");
    assert_eq!(claims["kubernetes.io"]["pod"]["name"], "vols", "{claims}");
    let claims = super::jwt_claims(&line("satok"));
    assert_eq!(
        claims["sub"],
        format!("system:serviceaccount:{}:default", c.ns),
        "{claims}"
    );
    assert_eq!(line("sans"), c.ns);
    assert_eq!(line("saca"), "-----BEGIN CERTIFICATE-----");
    let ip = p["status"]["podIP"].as_str().unwrap();
    assert_eq!(
        line("env"),
        format!(
            "hello-config/s3cret/[hello-config]/vols/{}/{ip}/{}",
            c.node, c.ip
        )
    );
    assert!(
        !log.contains("sec=writable"),
        "the secret volume is writable"
    );
}

pub fn crustlet_image_and_config_errors(c: &Cluster) {
    let c = &Crustlet::on_crustd(c);
    let missing = c.image.replace("busybox:1", "no-such-image:1");
    apply(
        c,
        pod(c, "noimage", "true", |p| {
            p["spec"]["containers"][0]["image"] = json!(missing);
        }),
    );
    apply(
        c,
        pod(c, "neverpull", "true", |p| {
            p["spec"]["containers"][0]["image"] = json!(missing);
            p["spec"]["containers"][0]["imagePullPolicy"] = json!("Never");
        }),
    );
    apply(
        c,
        pod(c, "noconfig", "exec sleep 3600", |p| {
            p["spec"]["containers"][0]["env"] = json!([
                {"name": "X", "valueFrom": {"configMapKeyRef": {"name": "no-such-config", "key": "k"}}},
            ]);
        }),
    );
    let reason = |p: &Value| {
        status_of(p, "main")
            .and_then(|s| s["state"]["waiting"]["reason"].as_str())
            .unwrap_or("")
            .to_string()
    };
    // ErrImagePull (for about a second, so it is seen or not), then ImagePullBackOff,
    // with the failed pull in an event.
    wait_pod(
        c,
        "noimage",
        "ImagePullBackOff",
        Duration::from_secs(60),
        |p| reason(p) == "ImagePullBackOff",
    );
    let sel = "involvedObject.name=noimage";
    let ev = kubectl(c, &["get", "events", "--field-selector", sel, "-o", "json"]);
    assert!(ev.contains("Failed to pull image"), "{ev}");
    let p = wait_pod(c, "neverpull", "ErrImageNeverPull", T, |p| {
        reason(p) == "ErrImageNeverPull"
    });
    assert_eq!(p["status"]["phase"], "Pending");
    let p = wait_pod(c, "noconfig", "CreateContainerConfigError", T, |p| {
        reason(p) == "CreateContainerConfigError"
    });
    let msg = status_of(&p, "main").unwrap()["state"]["waiting"]["message"].to_string();
    assert!(msg.contains("no-such-config"), "{msg}");
    let events = event_reasons(c, "noimage");
    for r in ["Pulling", "Failed", "BackOff"] {
        assert!(events.iter().any(|e| e == r), "no {r}: {events:?}");
    }
    // The other pods carry on: one started beside them runs.
    run_pod(c, pod(c, "beside", "exec sleep 3600", |_| {}));
    // The ConfigMap appears: the waiting pod starts.
    apply(
        c,
        json!({"apiVersion": "v1", "kind": "ConfigMap",
               "metadata": {"name": "no-such-config", "namespace": NS}, "data": {"k": "v"}}),
    );
    wait_pod(
        c,
        "noconfig",
        "running once its ConfigMap exists",
        T,
        running,
    );
}

// ---- resources ------------------------------------------------------------------------

fn read_trim(p: &std::path::Path) -> String {
    super::read_trim(p)
}

pub fn crustlet_requests_and_limits_in_cgroups(c: &Cluster) {
    let c = &Crustlet::on_crustd(c);
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
    let root = &c.crustlet_cgroup_root;
    let id = container_id(&p, "main");
    let uid = p["metadata"]["uid"].as_str().unwrap();
    let mem = c
        .cgroup_dir_named_under(root, "memory", &id)
        .unwrap_or_else(|| panic!("no memory cgroup named {id} under {root}"));
    let want = format!("{root}/kubepods/burstable/pod{uid}/{id}");
    assert!(
        mem.to_string_lossy().ends_with(&want),
        "{} is not at {want}",
        mem.display()
    );
    assert_eq!(read_trim(&mem.join("memory.limit_in_bytes")), "67108864");
    let cpu = c
        .cgroup_dir_named_under(root, "cpu", &id)
        .expect("cpu cgroup");
    assert_eq!(read_trim(&cpu.join("cpu.cfs_quota_us")), "20000");
    assert_eq!(read_trim(&cpu.join("cpu.cfs_period_us")), "100000");
    assert_eq!(read_trim(&cpu.join("cpu.shares")), "102");
    assert!(!read_trim(&mem.join("cgroup.procs")).is_empty());
    // A pod without requests is BestEffort, in its own class's cgroup.
    let p = run_pod(c, pod(c, "besteffort", "exec sleep 3600", |_| {}));
    assert_eq!(p["status"]["qosClass"], "BestEffort");
    let id = container_id(&p, "main");
    let uid = p["metadata"]["uid"].as_str().unwrap();
    let cpu = c
        .cgroup_dir_named_under(root, "cpu", &id)
        .expect("cpu cgroup");
    assert!(
        cpu.to_string_lossy()
            .ends_with(&format!("{root}/kubepods/besteffort/pod{uid}/{id}")),
        "{}",
        cpu.display()
    );
    assert_eq!(read_trim(&cpu.join("cpu.shares")), "2");
    assert_eq!(read_trim(&cpu.join("cpu.cfs_quota_us")), "-1");
    let pod_cpu = cpu.parent().unwrap();
    assert_eq!(read_trim(&pod_cpu.join("cpu.shares")), "2");
    assert_eq!(read_trim(&pod_cpu.join("cpu.cfs_quota_us")), "-1");
    assert_eq!(
        read_trim(&pod_cpu.parent().unwrap().join("cpu.shares")),
        "2"
    );

    // The pod cgroups' own limits, the same as the kubelet's for the same pods.
    type Case = (&'static str, Value);
    let cases: Vec<Case> = vec![
        (
            "guaranteed",
            json!([
                {"requests": {"cpu": "250m", "memory": "48Mi"}, "limits": {"cpu": "250m", "memory": "48Mi"}},
                {"requests": {"cpu": "100m", "memory": "16Mi"}, "limits": {"cpu": "100m", "memory": "16Mi"}},
            ]),
        ),
        (
            "limited",
            json!([{"requests": {"cpu": "100m", "memory": "32Mi"}, "limits": {"cpu": "300m", "memory": "96Mi"}}]),
        ),
        (
            "unlimited",
            json!([
                {"requests": {"cpu": "100m", "memory": "32Mi"}, "limits": {"cpu": "300m", "memory": "96Mi"}},
                {"requests": {"cpu": "50m"}},
            ]),
        ),
    ];
    let files = [
        ("cpu", "cpu.shares"),
        ("cpu", "cpu.cfs_quota_us"),
        ("cpu", "cpu.cfs_period_us"),
        ("memory", "memory.limit_in_bytes"),
    ];
    let mut seen: Vec<Vec<String>> = vec![];
    for (name, res) in &cases {
        for (node, root, tag) in [
            // The kubelet's own (the Crustlet's field of that name is the crustlet's).
            (NODE, &std::ops::Deref::deref(c).cgroup_root, "k"),
            (CRUSTLET_NODE, &c.crustlet_cgroup_root, "c"),
        ] {
            let pn = format!("podres-{name}-{tag}");
            let mut p = pod_on(c, node, &pn, "exec sleep 3600", |_| {});
            let one = p["spec"]["containers"][0].clone();
            let mut all = vec![];
            for (i, r) in res.as_array().unwrap().iter().enumerate() {
                let mut x = one.clone();
                x["name"] = json!(format!("c{i}"));
                x["resources"] = r.clone();
                all.push(x);
            }
            p["spec"]["containers"] = json!(all);
            let p = run_pod(c, p);
            let sid = status_of(&p, "c0").unwrap()["containerID"]
                .as_str()
                .unwrap();
            let id = sid.split_once("://").unwrap().1;
            let mut got = vec![name.to_string()];
            for (ctl, file) in files {
                let dir = c
                    .cgroup_dir_named_under(root, ctl, id)
                    .unwrap_or_else(|| panic!("{pn}: no {ctl} cgroup {id} under {root}"));
                got.push(format!(
                    "{file}={}",
                    read_trim(&dir.parent().unwrap().join(file))
                ));
            }
            seen.push(got);
        }
        let crustlet = seen.pop().unwrap();
        let kubelet = seen.pop().unwrap();
        assert_eq!(
            crustlet, kubelet,
            "the pod cgroup differs from the kubelet's"
        );
        seen.push(crustlet);
    }
    assert_eq!(
        seen[0][1..],
        [
            "cpu.shares=358",
            "cpu.cfs_quota_us=35000",
            "cpu.cfs_period_us=100000",
            "memory.limit_in_bytes=67108864"
        ],
        "guaranteed"
    );
    assert_eq!(seen[2][2], "cpu.cfs_quota_us=-1", "one container unlimited");
    for (name, _) in &cases {
        for tag in ["k", "c"] {
            kubectl(
                c,
                &[
                    "delete",
                    "pod",
                    &format!("podres-{name}-{tag}"),
                    "--wait=false",
                ],
            );
        }
    }
}

/// A CPU quantity in millicores (`250m`, `1`, `0.5`).
fn milli(q: &Value) -> i64 {
    let s = q
        .as_str()
        .map(str::to_string)
        .unwrap_or_else(|| q.to_string());
    match s.strip_suffix('m') {
        Some(m) => m.parse().unwrap(),
        None => (s.parse::<f64>().unwrap() * 1000.0).round() as i64,
    }
}

/// The CPU pod `p` requests, millicores, as the kubelet adds it up: the app containers
/// and sidecars, or an init container with the sidecars before it if more; the overhead.
fn pod_cpu_request(p: &Value) -> i64 {
    let req = |c: &Value| {
        let r = &c["resources"];
        let q = if r["requests"]["cpu"].is_null() {
            &r["limits"]["cpu"]
        } else {
            &r["requests"]["cpu"]
        };
        if q.is_null() {
            0
        } else {
            milli(q)
        }
    };
    let list = |k: &str| p["spec"][k].as_array().cloned().unwrap_or_default();
    let mut sum: i64 = list("containers").iter().map(req).sum();
    let (mut sidecars, mut init) = (0, 0);
    for c in list("initContainers") {
        if c["restartPolicy"] == "Always" {
            sum += req(&c);
            sidecars += req(&c);
            init = init.max(sidecars);
        } else {
            init = init.max(req(&c) + sidecars);
        }
    }
    let overhead = &p["spec"]["overhead"]["cpu"];
    sum.max(init)
        + if overhead.is_null() {
            0
        } else {
            milli(overhead)
        }
}

/// The node-level pod cgroups, the same as the real kubelet's on the same machine:
/// `kubepods` with the node's CPUs as shares, its memory and its task limit, BestEffort at
/// 2 shares; and on each node, Burstable at the shares of the CPU that node's active
/// Burstable pods request in all (from the apiserver's pods, so the same rule is checked
/// on the kubelet).
pub fn crustlet_qos_cgroups_as_kubelet(c: &Cluster) {
    let c = &Crustlet::on_crustd(c);
    let kubelet_root = &std::ops::Deref::deref(c).cgroup_root;
    let roots = [
        (NODE, kubelet_root, "k"),
        (CRUSTLET_NODE, &c.crustlet_cgroup_root, "c"),
    ];
    for (node, _, tag) in roots {
        let p = pod_on(c, node, &format!("qos-{tag}"), "exec sleep 3600", |p| {
            p["spec"]["containers"][0]["resources"] = json!({"requests": {"cpu": "300m"}});
        });
        run_pod(c, p);
    }
    let read = |root: &str, ctl: &str, rel: &str, file: &str| {
        let dir = c
            .cgroup_dir_named_under(root, ctl, "kubepods")
            .unwrap_or_else(|| panic!("no {ctl} cgroup kubepods under {root}"));
        read_trim(&dir.join(rel).join(file))
    };
    for (ctl, rel, file) in [
        ("cpu", "", "cpu.shares"),
        ("memory", "", "memory.limit_in_bytes"),
        ("pids", "", "pids.max"),
        ("cpu", "besteffort", "cpu.shares"),
    ] {
        assert_eq!(
            read(&c.crustlet_cgroup_root, ctl, rel, file),
            read(kubelet_root, ctl, rel, file),
            "kubepods/{rel}/{file} differs from the kubelet's"
        );
    }
    assert_eq!(read(kubelet_root, "cpu", "besteffort", "cpu.shares"), "2");
    for (node, root, _) in roots {
        // The kubelet writes the class's share when a pod starts and every minute.
        wait_for(
            &format!("{node}'s kubepods/burstable to weigh its pods' CPU requests"),
            Duration::from_secs(150),
            |last| {
                let out = ok(c.kubectl(&[
                    "get",
                    "pods",
                    "-A",
                    "--field-selector",
                    &format!("spec.nodeName={node}"),
                    "-o",
                    "json",
                ]));
                let pods: Value = serde_json::from_str(&out).ok()?;
                let milli: i64 = pods["items"]
                    .as_array()?
                    .iter()
                    .filter(|p| {
                        p["metadata"]["deletionTimestamp"].is_null()
                            && p["status"]["qosClass"] == "Burstable"
                            && !matches!(
                                p["status"]["phase"].as_str(),
                                Some("Succeeded" | "Failed")
                            )
                    })
                    .map(pod_cpu_request)
                    .sum();
                let want = (milli * 1024 / 1000).clamp(2, 262_144).to_string();
                let got = read(root, "cpu", "burstable", "cpu.shares");
                *last = format!("cpu.shares {got}, the pods' {milli}m make {want}");
                (got == want).then_some(())
            },
        );
    }
    for tag in ["k", "c"] {
        kubectl(c, &["delete", "pod", &format!("qos-{tag}"), "--wait=false"]);
    }
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

// ---- the same pod on both nodes ------------------------------------------------------

/// What a node makes of a pod, with what depends on timing or the node taken out.
fn digest(p: &Value, events: &[String]) -> Value {
    let (name, uid) = (
        p["metadata"]["name"].as_str().unwrap_or("-"),
        p["metadata"]["uid"].as_str().unwrap_or("-"),
    );
    let ctr = |s: &Value| {
        let state = |st: &Value| {
            let (kind, v) = st
                .as_object()
                .and_then(|o| o.iter().next())
                .map(|(k, v)| (k.clone(), v.clone()))
                .unwrap_or_default();
            // Messages name the pod, which differs by node, and a crash loop's back-off
            // depends on when it is looked at.
            let message = v["message"]
                .as_str()
                .map(|m| {
                    let m = m.replace(name, "POD").replace(uid, "UID");
                    let m = match m.strip_prefix("back-off ") {
                        Some(rest) => format!(
                            "back-off Ns{}",
                            rest.trim_start_matches(|c: char| c.is_ascii_digit())
                                .trim_start_matches('s')
                        ),
                        None => m,
                    };
                    json!(m)
                })
                .unwrap_or(Value::Null);
            json!({"kind": kind, "reason": v["reason"], "exitCode": v["exitCode"], "message": message})
        };
        json!({
            "name": s["name"],
            "state": state(&s["state"]),
            "lastState": state(&s["lastState"]),
            // A crash loop's count depends on when it is looked at.
            "restarted": s["restartCount"].as_u64().unwrap_or(0) > 0,
            "ready": s["ready"],
            "started": s["started"],
        })
    };
    let list = |k: &str| -> Vec<Value> {
        p["status"][k]
            .as_array()
            .map(|a| a.iter().map(ctr).collect())
            .unwrap_or_default()
    };
    // PodReadyToStartContainers is the crustlet's own addition: the kubelet v1.28 has it
    // behind a feature gate that is off (on from v1.29).
    let mut conds: Vec<Value> = p["status"]["conditions"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter(|c| c["type"] != "PodReadyToStartContainers")
                .map(|c| json!({"type": c["type"], "status": c["status"], "reason": c["reason"], "message": c["message"]}))
                .collect()
        })
        .unwrap_or_default();
    conds.sort_by_key(|c| c["type"].as_str().unwrap_or("").to_string());
    json!({
        "phase": p["status"]["phase"],
        "qosClass": p["status"]["qosClass"],
        "conditions": conds,
        "initContainerStatuses": list("initContainerStatuses"),
        "containerStatuses": list("containerStatuses"),
        // Pulling only when the image was not there yet: which pod of the suite pulled
        // it first is a race on either node.
        // FailedMount neither: under Node,RBAC a token or ConfigMap of a pod just bound
        // is now and then refused until the Node authorizer's graph has the pod (a
        // retry mounts it), on either node.
        "events": events
            .iter()
            .filter(|e| *e != "Pulling" && *e != "FailedMount")
            .collect::<Vec<_>>(),
    })
}

/// The same pods on the kubelet's node and on the crustlet's: once each has settled
/// (the condition of the case), what they show must be the same.
pub fn crustlet_same_as_kubelet(c: &Cluster) {
    let c = &Crustlet::on_crustd(c);
    type Settled = fn(&Value) -> bool;
    type Case = (&'static str, &'static str, fn(&mut Value), Settled);
    let cases: Vec<Case> = vec![
        (
            "crash",
            "echo crashing; exit 3",
            |_| {},
            |p| {
                status_of(p, "main").is_some_and(|s| {
                    s["state"]["waiting"]["reason"] == "CrashLoopBackOff"
                        && s["restartCount"].as_u64() >= Some(1)
                })
            },
        ),
        (
            "never",
            "exit 4",
            |p| p["spec"]["restartPolicy"] = json!("Never"),
            |p| p["status"]["phase"] == "Failed",
        ),
        (
            "onfailure",
            "exit 0",
            |p| p["spec"]["restartPolicy"] = json!("OnFailure"),
            |p| p["status"]["phase"] == "Succeeded",
        ),
        (
            "init",
            "exec sleep 3600",
            |p| {
                let img = p["spec"]["containers"][0]["image"].clone();
                let mut i = container("setup", "", "echo setup");
                i["image"] = img;
                p["spec"]["initContainers"] = json!([i]);
            },
            running,
        ),
        (
            "initfail",
            "exec sleep 3600",
            |p| {
                let img = p["spec"]["containers"][0]["image"].clone();
                let mut i = container("setup", "", "exit 1");
                i["image"] = img;
                p["spec"]["initContainers"] = json!([i]);
                p["spec"]["restartPolicy"] = json!("Never");
            },
            |p| p["status"]["phase"] == "Failed",
        ),
        (
            "notready",
            "exec sleep 3600",
            |p| {
                p["spec"]["containers"][0]["readinessProbe"] =
                    json!({"exec": {"command": ["false"]}, "periodSeconds": 1});
            },
            |p| {
                running(p)
                    && status_of(p, "main").is_some_and(|s| s["started"] == true)
                    && condition(p, "Ready").is_some_and(|c| c["status"] == "False")
            },
        ),
        (
            "termmsg",
            "echo bye > /dev/termination-log; exit 1",
            |p| p["spec"]["restartPolicy"] = json!("Never"),
            |p| p["status"]["phase"] == "Failed",
        ),
        (
            "fallback",
            "echo first; echo last words; exit 2",
            |p| {
                p["spec"]["restartPolicy"] = json!("Never");
                p["spec"]["containers"][0]["terminationMessagePolicy"] =
                    json!("FallbackToLogsOnError");
            },
            |p| p["status"]["phase"] == "Failed",
        ),
        // The conformance test's `/bin/echo -n DONE; /bin/false`: the last line has no
        // newline (a `P` record), and the message is `DONE`, without one.
        (
            "fallbackpartial",
            "echo -n DONE; exit 1",
            |p| {
                p["spec"]["restartPolicy"] = json!("Never");
                p["spec"]["containers"][0]["terminationMessagePolicy"] =
                    json!("FallbackToLogsOnError");
            },
            |p| p["status"]["phase"] == "Failed",
        ),
        // The conformance test "as non-root user and at a non-default path": the file
        // must be writable by uid 1000, in a folder the image does not have.
        (
            "termnonroot",
            "echo -n DONE > /tmp/dev/termination-log",
            |p| {
                p["spec"]["restartPolicy"] = json!("Never");
                let c = &mut p["spec"]["containers"][0];
                c["securityContext"] = json!({"runAsUser": 1000});
                c["terminationMessagePath"] = json!("/tmp/dev/termination-log");
            },
            |p| p["status"]["phase"] == "Succeeded",
        ),
        (
            "sidecar",
            "exec sleep 3600",
            |p| {
                let img = p["spec"]["containers"][0]["image"].clone();
                let mut i = container("side", "", "exec sleep 3600");
                i["image"] = img;
                i["restartPolicy"] = json!("Always");
                let mut j = container("setup", "", "echo setup");
                j["image"] = i["image"].clone();
                p["spec"]["initContainers"] = json!([i, j]);
            },
            |p| {
                running(p)
                    && condition(p, "Ready").is_some_and(|c| c["status"] == "True")
                    && p["status"]["initContainerStatuses"][0]["started"] == true
            },
        ),
        (
            "noconfig",
            "exec sleep 3600",
            |p| {
                p["spec"]["containers"][0]["env"] = json!([
                    {"name": "X", "valueFrom": {"configMapKeyRef": {"name": "cmp-missing", "key": "k"}}},
                ]);
            },
            |p| {
                status_of(p, "main").is_some_and(|s| {
                    s["state"]["waiting"]["reason"] == "CreateContainerConfigError"
                })
            },
        ),
    ];
    let nodes = [(NODE, "k"), (CRUSTLET_NODE, "c")];
    for (name, script, change, _) in &cases {
        for (n, tag) in nodes {
            let mut p = pod_on(c, n, &format!("cmp-{name}-{tag}"), script, change);
            p["metadata"]["labels"]["cmp"] = json!("1");
            apply(c, p);
        }
    }
    let mut diffs = vec![];
    for (name, _, _, settled) in &cases {
        let mut got = vec![];
        for (_, tag) in nodes {
            let pn = format!("cmp-{name}-{tag}");
            let p = wait_pod(c, &pn, "settled", Duration::from_secs(90), settled);
            got.push((pn, p));
        }
        // A little longer, for the last events (and for anything that would still
        // change); a pod that moved on (a crash loop restarting) is taken as it settled.
        std::thread::sleep(Duration::from_secs(2));
        let mut d = vec![];
        for (pn, p) in got {
            let now = get(c, "pod", &pn).filter(settled).unwrap_or(p);
            d.push(digest(&now, &event_reasons(c, &pn)));
        }
        if d[0] != d[1] {
            diffs.push(format!(
                "{name}:\n  kubelet:  {}\n  crustlet: {}",
                d[0], d[1]
            ));
        }
        // The termination message as Kubernetes documents it, not only alike.
        let want = match *name {
            "termmsg" => Some("bye\n"),
            "fallback" => Some("first\nlast words\n"),
            "fallbackpartial" | "termnonroot" => Some("DONE"),
            _ => None,
        };
        if let Some(want) = want {
            let got = &d[1]["containerStatuses"][0]["state"]["message"];
            assert_eq!(got, want, "{name}: the termination message");
        }
    }
    kubectl(c, &["delete", "pods", "-l", "cmp=1", "--wait=true"]);
    assert!(
        diffs.is_empty(),
        "the crustlet differs from the kubelet:\n{}",
        diffs.join("\n")
    );
}

/// What the containers of a pod see of the node's making, the same on both nodes: the
/// `/etc/hosts` the kubelet writes (hostname, subdomain, hostAliases, the node's file
/// on its network), the hostname (setHostnameAsFQDN), the Services' variables
/// (`enableServiceLinks`) and `$(VAR)` in env and args.
pub fn crustlet_pod_files_as_kubelet(c: &Cluster) {
    let c = &Crustlet::on_crustd(c);
    apply(
        c,
        json!({
            "apiVersion": "v1", "kind": "Service",
            "metadata": {"name": "cmp-svc", "namespace": c.ns},
            "spec": {"ports": [
                {"name": "web", "port": 80, "targetPort": 8080},
                {"name": "dns", "port": 53, "protocol": "UDP"},
            ]},
        }),
    );
    let script = "echo \"arg0=$0\"; cat /etc/hosts; echo \"hostname=$(hostname)\"; \
                  env | grep -E '^(KUBERNETES_|CMP_SVC_|X=|Y=)' | sort; \
                  for d in /vol /mem; do [ -d $d ] || continue; touch $d/f; \
                  set -- $(ls -ldn $d); echo \"$d=$1 $4\"; \
                  set -- $(ls -ln $d/f); echo \"$d/f=$1 $4\"; done; \
                  [ -d /sub ] && touch /sub/mark && ls /vol/*/mark; \
                  echo done; exec sleep 3600";
    type Case = (&'static str, fn(&mut Value));
    let cases: Vec<Case> = vec![
        ("names", |p| {
            p["spec"]["hostname"] = json!("h1");
            p["spec"]["subdomain"] = json!("sub");
            p["spec"]["hostAliases"] = json!([{"ip": "10.9.9.9", "hostnames": ["a.example", "b"]}]);
        }),
        ("fqdn", |p| {
            p["spec"]["subdomain"] = json!("sub");
            p["spec"]["setHostnameAsFQDN"] = json!(true);
            p["spec"]["enableServiceLinks"] = json!(false);
        }),
        ("hostnet", |p| {
            p["spec"]["hostNetwork"] = json!(true);
            p["spec"]["hostAliases"] = json!([{"ip": "10.9.9.8", "hostnames": ["c"]}]);
        }),
        // emptyDirs of an fsGroup pod: the group's and setgid, and so what is written.
        ("fsgroup", |p| {
            p["spec"]["securityContext"] = json!({"fsGroup": 1234});
            p["spec"]["volumes"] = json!([
                {"name": "vol", "emptyDir": {}},
                {"name": "mem", "emptyDir": {"medium": "Memory"}},
            ]);
            // And a subPathExpr from the container's variables (X, set below).
            p["spec"]["containers"][0]["volumeMounts"] = json!([
                {"name": "vol", "mountPath": "/vol"},
                {"name": "mem", "mountPath": "/mem"},
                {"name": "vol", "mountPath": "/sub", "subPathExpr": "sub-$(X)"},
            ]);
        }),
    ];
    let nodes = [(NODE, "k"), (CRUSTLET_NODE, "c")];
    for (name, change) in &cases {
        for (n, tag) in nodes {
            let mut p = pod_on(c, n, &format!("pf-{name}-{tag}"), script, change);
            p["metadata"]["labels"]["pf"] = json!("1");
            p["spec"]["containers"][0]["command"]
                .as_array_mut()
                .unwrap()
                .push(json!("$(Y)"));
            p["spec"]["containers"][0]["env"] = json!([
                {"name": "X", "value": "$(CMP_SVC_SERVICE_HOST)-x"},
                {"name": "Y", "value": "y:$(X):$(NOPE)"},
            ]);
            apply(c, p);
        }
    }
    let mut diffs = vec![];
    let mut seen = vec![];
    for (name, _) in &cases {
        let mut got = vec![];
        for (_, tag) in nodes {
            let pn = format!("pf-{name}-{tag}");
            let p = wait_pod(c, &pn, "Running", Duration::from_secs(90), running);
            let out = wait_for(&format!("{pn}'s output"), T, |last| {
                let o = run_timeout(&mut c.kubectl(&["-n", c.ns, "logs", &pn]), T);
                *last = s(&o.stdout) + &s(&o.stderr);
                let text = s(&o.stdout);
                text.contains("\ndone\n").then_some(text)
            });
            // What differs by node: the pod's name and address.
            let ip = p["status"]["podIP"].as_str().unwrap_or("-").to_string();
            got.push(out.replace(&pn, "POD").replace(&ip, "POD_IP"));
        }
        if got[0] != got[1] {
            diffs.push(format!(
                "{name}:\n--- kubelet:\n{}--- crustlet:\n{}",
                got[0], got[1]
            ));
        }
        seen.push(got.pop().unwrap());
    }
    kubectl(c, &["delete", "pods", "-l", "pf=1", "--wait=false"]);
    kubectl(c, &["delete", "service", "cmp-svc"]);
    assert!(
        diffs.is_empty(),
        "the crustlet differs from the kubelet:\n{}",
        diffs.join("\n")
    );
    // And what both show is what Kubernetes documents.
    let names = &seen[0];
    for want in [
        "POD_IP\th1.sub.crustlet.svc.cluster.local\th1\n",
        "# Entries added by HostAliases.\n10.9.9.9\ta.example\tb\n",
        "hostname=h1\n",
        "KUBERNETES_SERVICE_PORT=443\n",
        "CMP_SVC_SERVICE_PORT_WEB=80\n",
        "CMP_SVC_PORT_53_UDP_PROTO=udp\n",
    ] {
        assert!(names.contains(want), "no {want:?} in:\n{names}");
    }
    let svc_ip = names
        .lines()
        .find_map(|l| l.strip_prefix("CMP_SVC_SERVICE_HOST="))
        .expect("the service's variables");
    assert!(
        names.contains(&format!("arg0=y:{svc_ip}-x:$(NOPE)\n")),
        "{names}"
    );
    let svc_ip = seen[0]
        .lines()
        .find_map(|l| l.strip_prefix("CMP_SVC_SERVICE_HOST="))
        .unwrap_or("-")
        .to_string();
    let sub_mark = format!("/vol/sub-{svc_ip}-x/mark\n");
    for want in [
        sub_mark.as_str(),
        "/vol=drwxrwsrwx 1234\n",
        "/vol/f=-rw-r--r-- 1234\n",
        "/mem=drwxrwsrwt 1234\n",
        "/mem/f=-rw-r--r-- 1234\n",
    ] {
        assert!(seen[3].contains(want), "no {want:?} in:\n{}", seen[3]);
    }
    let fqdn = &seen[1];
    assert!(
        fqdn.contains("hostname=POD.sub.crustlet.svc.cluster.local\n"),
        "{fqdn}"
    );
    assert!(
        !fqdn.lines().any(|l| l.starts_with("CMP_SVC_")),
        "enableServiceLinks: false\n{fqdn}"
    );
    assert!(fqdn.contains("KUBERNETES_SERVICE_HOST="), "{fqdn}");
    assert!(
        seen[2].starts_with("arg0=")
            && seen[2].contains("# Kubernetes-managed hosts file (host network).\n"),
        "{}",
        seen[2]
    );
}

/// A new image for a running container (`kubectl set image`): the container is killed
/// and made again from it at once, its restart count one up.
fn image_change_restarts(c: &Crustlet) {
    let p = run_pod(c, pod(c, "newimage", "exec sleep 3600", |_| {}));
    let before = raw_id(&p, "main");
    let image2 = c.image.replace(":1", ":2");
    kubectl(
        c,
        &["set", "image", "pod/newimage", &format!("main={image2}")],
    );
    let p = wait_pod(c, "newimage", "running the new image", T, |p| {
        running(p)
            && status_of(p, "main").is_some_and(|s| {
                s["image"].as_str().is_some_and(|i| i.ends_with(":2"))
                    && s["state"]["running"].is_object()
                    && s["restartCount"] == 1
            })
    });
    assert_ne!(raw_id(&p, "main"), before, "the same container");
    assert!(
        event_reasons(c, "newimage").contains(&"Killing".to_string()),
        "no Killing event"
    );
    kubectl(c, &["delete", "pod", "newimage", "--wait=false"]);
}

/// A sandbox that died is made again with every container in it; the containers go on
/// counting their restarts from the old one's.
fn restart_count_across_sandboxes(c: &Crustlet) {
    let p = run_pod(c, pod(c, "newsandbox", "exec sleep 3600", |_| {}));
    let before = raw_id(&p, "main");
    let uid = p["metadata"]["uid"].as_str().unwrap();
    let out = ok(c.node_crictl(&[
        "pods",
        "-q",
        "--label",
        &format!("io.kubernetes.pod.uid={uid}"),
    ]));
    let sandbox = out.lines().next().expect("the pod's sandbox").to_string();
    ok(c.node_crictl(&["stopp", &sandbox]));
    let p = wait_for("a new sandbox running the pod", T, |last| {
        let p = get(c, "pod", "newsandbox")?;
        let sel = format!("io.kubernetes.pod.uid={uid}");
        let out = run_timeout(
            &mut c.node_crictl(&["pods", "--label", &sel, "-o", "json"]),
            T,
        );
        *last = format!("{}\n{}", p["status"], s(&out.stdout));
        (running(&p) && raw_id(&p, "main") != before).then_some(p)
    });
    // 1 as the kubelet shows it. More when the crustlet raced the stop: it saw the
    // container killed while the sandbox still said ready (containerd says so until its
    // pause process is gone) and made it again there, each time a restart, as the
    // kubelet would. Seen once in CI: 3, a slow stop outlasting the 10 s back-off.
    let st = status_of(&p, "main").unwrap();
    let n = st["restartCount"].as_u64().unwrap_or(0);
    assert!(n >= 1, "the restart count starts over: {p:#}");
    // How the one before ended, as the kubelet shows it (it keeps the old container
    // until its garbage collection): killed with the sandbox (137); after the race
    // above, the restart in the dying sandbox (CI: StartError, 128, its pause gone).
    let last = &st["lastState"]["terminated"];
    let last_id = last["containerID"].as_str().unwrap_or_default();
    assert!(
        last["exitCode"].is_i64() && !last_id.is_empty() && last_id != raw_id(&p, "main"),
        "no last state from the old sandbox: {p:#}"
    );
    if n == 1 {
        assert!(last_id == before && last["exitCode"] == 137, "{p:#}");
    }
    kubectl(c, &["delete", "pod", "newsandbox", "--wait=false"]);
}

// ---- faults: crustd and the crustlet restarted ---------------------------------------

fn snapshot(c: &Crustlet, pods: &[&str]) -> Vec<(String, u64)> {
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

fn survivors_unchanged(c: &Crustlet, pods: &[&str], before: &[(String, u64)]) {
    // Several status syncs of the crustlet.
    std::thread::sleep(Duration::from_secs(5));
    for (n, (id, restarts)) in pods.iter().zip(before) {
        let p = wait_pod(c, n, "running", T, running);
        assert_eq!(&container_id(&p, "main"), id, "{n}: a new container");
        assert_eq!(
            status_of(&p, "main").unwrap()["restartCount"].as_u64(),
            Some(*restarts),
            "{n} restarted"
        );
        assert_eq!(condition(&p, "Ready").unwrap()["status"], "True", "{n}");
    }
}

fn node_ready_is(c: &Crustlet, want: &str, limit: Duration) {
    wait_for(
        &format!("the crustlet's node Ready={want}"),
        limit,
        |last| {
            let n = node(c, CRUSTLET_NODE)?;
            let r = condition(&n, "Ready")?.clone();
            *last = r.to_string();
            (r["status"] == want).then_some(())
        },
    );
}

pub fn crustlet_crustd_killed_and_restarted(c: &Cluster) {
    let c = &Crustlet::on_crustd(c);
    let pods = ["survivor-a", "survivor-b"];
    for n in pods {
        run_pod(c, pod(c, n, "exec sleep 3600", |_| {}));
    }
    let before = snapshot(c, &pods);
    c.kill_crustlet_crustd();
    node_ready_is(c, "False", Duration::from_secs(60));
    let n = node(c, CRUSTLET_NODE).unwrap();
    let msg = condition(&n, "Ready").unwrap()["message"].to_string();
    assert!(msg.contains("runtime"), "{msg}");
    c.start_crustlet_crustd();
    node_ready_is(c, "True", Duration::from_secs(60));
    survivors_unchanged(c, &pods, &before);
}

pub fn crustlet_restarted_adopts_its_pods(c: &Cluster) {
    let c = &Crustlet::on_crustd(c);
    let pods = ["survivor-a", "survivor-b"];
    if get(c, "pod", pods[0]).is_none() {
        for n in pods {
            run_pod(c, pod(c, n, "exec sleep 3600", |_| {}));
        }
    }
    run_pod(c, pod(c, "doomed", "exec sleep 3600", |_| {}));
    run_pod(c, pod(c, "forced", "exec sleep 3600", |_| {}));
    let before = snapshot(c, &pods);
    let st = c.stop_crustlet().expect("the crustlet ends on SIGTERM");
    assert!(st.success(), "the crustlet exited {st}");
    // Deleted while it is down: gracefully (the pod waits for its node), and forced
    // (gone from the apiserver at once).
    kubectl(c, &["delete", "pod", "doomed", "--wait=false"]);
    kubectl(
        c,
        &["delete", "pod", "forced", "--grace-period=0", "--force"],
    );
    std::thread::sleep(Duration::from_secs(1));
    assert!(
        get(c, "pod", "doomed").is_some(),
        "a graceful deletion needs the node"
    );
    // The containers kept running without it.
    let running_now =
        ok(c.node_crictl(&["ps", "-q", "--label", "io.kubernetes.pod.name=survivor-a"]));
    assert!(!running_now.trim().is_empty(), "survivor-a stopped");
    c.start_crustlet();
    wait_for("the graceful deletion to finish", T, |_| {
        get(c, "pod", "doomed").is_none().then_some(())
    });
    gone_from_crustd(c, "doomed");
    gone_from_crustd(c, "forced");
    survivors_unchanged(c, &pods, &before);
    // Still taking new pods.
    run_pod(c, pod(c, "after-restart", "exec sleep 3600", |_| {}));
}

/// Everything of the crustlet namespace deleted through the API: nothing left in the
/// crustlet's runtime.
fn nothing_left(c: &Crustlet) {
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
        &format!("the crustlet's {} to have no pod or container", c.runtime),
        Duration::from_secs(60),
        |last| {
            let pods = ok(c.node_crictl(&["pods", "-q"]));
            let ctrs = ok(c.node_crictl(&["ps", "-a", "-q"]));
            *last = format!("pods: {pods:?} containers: {ctrs:?}");
            (pods.trim().is_empty() && ctrs.trim().is_empty()).then_some(())
        },
    );
    // No pod cgroup left behind (runc removes only its containers' own).
    wait_for("the pod cgroups to go", Duration::from_secs(10), |last| {
        let Some(kubepods) = c.cgroup_dir_named_under(&c.cgroup_root, "cpu", "kubepods") else {
            return Some(());
        };
        let mut left = vec![];
        for d in [
            kubepods.clone(),
            kubepods.join("burstable"),
            kubepods.join("besteffort"),
        ] {
            for e in std::fs::read_dir(d).into_iter().flatten().flatten() {
                let n = e.file_name().to_string_lossy().to_string();
                if n.starts_with("pod") {
                    left.push(n);
                }
            }
        }
        *last = format!("{left:?}");
        left.is_empty().then_some(())
    });
    if c.runtime == "crust" {
        let records = std::fs::read_dir(c.path("crustlet-crust-root/sandboxes"))
            .map(|r| r.count())
            .unwrap_or(0);
        assert_eq!(records, 0, "sandbox records left in the crustlet's crustd");
    }
    assert!(c.crustlet_up(), "{}", c.log(c.log_name));
}

// The checks of the crustlet's HTTPS server (kubectl logs, exec, attach, port-forward,
// cp, debug, stats through the apiserver).
#[path = "crustlet_server_checks.rs"]
mod server_checks;
pub use server_checks::*;

/// `--pod-routes` (the cluster starts the crustlet on crustd with it): a route to every
/// other Ready Node's pod CIDR via its InternalIP, changed with the IP, removed with the
/// Node or its readiness, someone else's route to a claimed range left alone, and what
/// it left before a restart found again (changed or removed, never doubled). The peers
/// are Node objects only (unschedulable): their IPs are on the node's own segment, so
/// the kernel takes the routes without a machine behind them.
pub fn crustlet_pod_routes(c: &Cluster) {
    let cl = &Crustlet::on_crustd(c);
    let n = c.subnet;
    let ns = c.node.name.clone();
    let ours = || crust_e2e::sh(&["ip", "-n", &ns, "route", "show", "proto", "77"]);
    let ours_are = |want: &[String], what: &str| {
        wait_for(what, T, |last| {
            let now: Vec<String> = ours()
                .lines()
                .map(|l| l.split(" dev ").next().unwrap_or(l).trim().to_string())
                .collect();
            *last = format!("{now:?}");
            (now == want).then_some(())
        })
    };
    let now = || {
        String::from_utf8_lossy(
            &run_timeout(Command::new("date").args(["-u", "+%FT%TZ"]), T).stdout,
        )
        .trim()
        .to_string()
    };
    let peer = |name: &str, third: u8, ip: &str| {
        apply(
            c,
            json!({"apiVersion": "v1", "kind": "Node",
                "metadata": {"name": name},
                "spec": {"unschedulable": true,
                         "podCIDR": format!("10.{n}.{third}.0/24"),
                         "podCIDRs": [format!("10.{n}.{third}.0/24")]}}),
        );
        set_peer(c, name, ip, "True", &now());
    };
    // Someone else's route, to a range a peer claims.
    let theirs = format!("10.{n}.78.0/24");
    crust_e2e::sh(&[
        "ip",
        "-n",
        &ns,
        "route",
        "add",
        &theirs,
        "via",
        &format!("10.{n}.255.78"),
        "proto",
        "static",
    ]);
    peer("routes-peer-a", 77, &format!("10.{n}.255.77"));
    peer("routes-peer-b", 78, &format!("10.{n}.255.79"));
    ours_are(
        &[format!("10.{n}.77.0/24 via 10.{n}.255.77")],
        "a route to routes-peer-a's pods",
    );
    let theirs_now = crust_e2e::sh(&["ip", "-n", &ns, "route", "show", &theirs]);
    assert!(
        theirs_now.contains(&format!("via 10.{n}.255.78")) && theirs_now.contains("proto static"),
        "someone else's route was changed: {theirs_now}"
    );
    // The peer's IP changes: its route follows.
    set_peer(
        c,
        "routes-peer-a",
        &format!("10.{n}.255.76"),
        "True",
        &now(),
    );
    ours_are(
        &[format!("10.{n}.77.0/24 via 10.{n}.255.76")],
        "routes-peer-a's route to follow its new IP",
    );
    // While the crustlet is down a peer goes and another comes: the restarted crustlet
    // finds the route it left, removes it and adds the new one, with none doubled.
    let st = cl.stop_crustlet().expect("the crustlet ends on SIGTERM");
    assert!(st.success(), "the crustlet exited {st}");
    ok(c.kubectl(&["delete", "node", "routes-peer-a"]));
    peer("routes-peer-c", 79, &format!("10.{n}.255.80"));
    c.start_crustlet();
    ours_are(
        &[format!("10.{n}.79.0/24 via 10.{n}.255.80")],
        "the restarted crustlet's routes",
    );
    // Not Ready: no route.
    set_peer(
        c,
        "routes-peer-c",
        &format!("10.{n}.255.80"),
        "False",
        &now(),
    );
    ours_are(&[], "routes-peer-c's route gone once it is not Ready");
    ok(c.kubectl(&["delete", "node", "routes-peer-b", "routes-peer-c"]));
    crust_e2e::sh(&["ip", "-n", &ns, "route", "del", &theirs]);
    node_ready_is(cl, "True", Duration::from_secs(60));
}

/// The status a peer Node of [`crustlet_pod_routes`] would post: its InternalIP and
/// Ready condition.
fn set_peer(c: &Cluster, name: &str, ip: &str, ready: &str, now: &str) {
    let patch = json!({"status": {
        "addresses": [{"type": "InternalIP", "address": ip}],
        "conditions": [{"type": "Ready", "status": ready, "reason": "Test",
                        "lastHeartbeatTime": now, "lastTransitionTime": now}]}});
    ok(c.kubectl(&[
        "patch",
        "node",
        name,
        "--subresource=status",
        "--type=merge",
        "-p",
        &patch.to_string(),
    ]));
}

/// A pod bound to a node by name (past the scheduler) whose host port another pod of
/// the node holds is refused, as the kubelet's port predicate refuses it (Failed,
/// `NodePorts`, nothing run), on the kubelet's node and the crustlet's alike; once the
/// holder is gone the same port is taken again. (A StatefulSet recreates such a pod:
/// `[Conformance]` "Should recreate evicted statefulset".)
pub fn crustlet_host_port_admission(c: &Cluster) {
    let cl = &Crustlet::on_crustd(c);
    let mut seen = vec![];
    for (node, tag, port) in [(NODE, "k", 18285), (CRUSTLET_NODE, "c", 18286)] {
        let bound = |name: &str| {
            let mut p = pod_on(cl, node, name, "exec sleep 3600", |p| {
                p["spec"]["containers"][0]["ports"] =
                    json!([{"containerPort": 8080, "hostPort": port}]);
            });
            p["spec"]["nodeName"] = json!(node);
            p
        };
        let holder = format!("hpa-holder-{tag}");
        apply(c, bound(&holder));
        wait_pod(cl, &holder, "Running", Duration::from_secs(90), running);
        let second = format!("hpa-second-{tag}");
        apply(c, bound(&second));
        let p = wait_pod(cl, &second, "refused", Duration::from_secs(60), |p| {
            p["status"]["phase"] == "Failed"
        });
        assert!(
            p["status"]["containerStatuses"]
                .as_array()
                .is_none_or(|s| s.iter().all(|s| s["state"]["running"].is_null())),
            "{node}: the refused pod ran: {:#}",
            p["status"]
        );
        seen.push((
            p["status"]["reason"].clone(),
            p["status"]["message"].clone(),
        ));
        kubectl(cl, &["delete", "pod", &holder, &second, "--wait=true"]);
        let third = format!("hpa-third-{tag}");
        apply(c, bound(&third));
        wait_pod(cl, &third, "Running", Duration::from_secs(90), running);
        kubectl(cl, &["delete", "pod", &third, "--wait=false"]);
    }
    assert_eq!(seen[0], seen[1], "kubelet, then crustlet");
    assert_eq!(seen[1].0, "NodePorts");
}
