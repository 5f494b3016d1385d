//! The crustlet's nodes when the apiserver goes away and comes back, and their pods on
//! the node's network (hostNetwork, hostPort).
//!
//! The outage check stops kube-apiserver for the whole cluster (every node, the
//! controller-manager and the scheduler lose it), so it runs in a group of its own near
//! the end; the checks after it are those of a cluster that came back. While the
//! apiserver is gone the check looks at the nodes through CRI only (crictl on each
//! node's runtime).

use super::crustlet_checks::{condition, get, gone_from_crustd, kubectl, pod, wait_pod, Crustlet};
use super::{apply, http_get, ok, running, s, status_of, wait_for, T};
use crust_e2e::cluster::{Cluster, CONTAINERD_NODE, CRUSTLET_NODE, NODE};
use serde_json::{json, Value};
use std::process::Command;
use std::time::{Duration, Instant};

pub fn crustlet_host_network_pod(c: &Cluster) {
    host_network_pod(&Crustlet::on_crustd(c))
}
pub fn containerd_host_network_pod(c: &Cluster) {
    host_network_pod(&Crustlet::on_containerd(c))
}
pub fn crustlet_host_port_pod(c: &Cluster) {
    host_port_pod(&Crustlet::on_crustd(c))
}
pub fn containerd_host_port_pod(c: &Cluster) {
    host_port_pod(&Crustlet::on_containerd(c))
}

// ---- the node's network ----------------------------------------------------------------

/// This file's ports on the nodes' one network namespace, a pair per node (a
/// hostNetwork server, a hostPort); no other check uses them.
fn ports(c: &Crustlet) -> (u16, u16) {
    if c.runtime == "crust" {
        (18281, 18283)
    } else {
        (18282, 18284)
    }
}

/// Whether something accepts a connection at `addr` in the node namespace (2 s at most:
/// a mapping left to a dead pod would leave the connection hanging).
fn accepts(c: &Cluster, addr: &str) -> bool {
    let node = c.node.path();
    let addr: std::net::SocketAddr = addr.parse().unwrap();
    std::thread::spawn(move || {
        crust_e2e::enter_netns(&node);
        std::net::TcpStream::connect_timeout(&addr, Duration::from_secs(2)).is_ok()
    })
    .join()
    .unwrap()
}

fn serves(c: &Cluster, addr: &str) {
    let body = wait_for(&format!("a web server at {addr}"), T, |last| {
        http_get(c, addr, "/").map_err(|e| *last = e).ok()
    });
    assert!(body.contains("hello from crust"), "{body}");
}

/// A hostNetwork pod has the node's network: the node's IP as its own, the node's
/// interfaces and addresses, and a port it listens on is the node's.
fn host_network_pod(c: &Crustlet) {
    let (port, _) = ports(c);
    apply(
        c,
        pod(
            c,
            "host-net",
            &format!("exec httpd -f -p {port} -h /www"),
            |p| p["spec"]["hostNetwork"] = json!(true),
        ),
    );
    let p = wait_pod(c, "host-net", "Running", Duration::from_secs(90), running);
    let st = &p["status"];
    assert_eq!(st["podIP"], c.ip.as_str(), "{st:#}");
    assert_eq!(st["podIPs"], json!([{"ip": c.ip}]), "{st:#}");
    assert_eq!(st["hostIP"], c.ip.as_str(), "{st:#}");
    let dev = kubectl(c, &["exec", "host-net", "--", "cat", "/proc/net/dev"]);
    assert!(
        dev.contains("knode0") && dev.contains("klet0"),
        "not the node's interfaces: {dev}"
    );
    let local = kubectl(c, &["exec", "host-net", "--", "cat", "/proc/net/fib_trie"]);
    assert!(local.contains(&c.ip), "{} not among {local}", c.ip);
    serves(c, &format!("{}:{port}", c.ip));
    kubectl(c, &["delete", "pod", "host-net", "--wait=true"]);
    assert!(
        !accepts(c, &format!("{}:{port}", c.ip)),
        "port {port} still open after the pod"
    );
}

/// A container's hostPort is the node's port at the node's IP (the pod on its pod
/// network), and goes with the pod.
fn host_port_pod(c: &Crustlet) {
    let (_, port) = ports(c);
    apply(
        c,
        pod(c, "host-port", "exec httpd -f -p 8080 -h /www", |p| {
            p["spec"]["containers"][0]["ports"] =
                json!([{"containerPort": 8080, "hostPort": port, "protocol": "TCP"}]);
        }),
    );
    let p = wait_pod(c, "host-port", "Running", Duration::from_secs(90), running);
    let ip = p["status"]["podIP"].as_str().unwrap_or_default();
    assert!(ip.starts_with(&c.pod_net), "pod IP {ip:?}");
    let addr = format!("{}:{port}", c.ip);
    serves(c, &addr);
    kubectl(c, &["delete", "pod", "host-port", "--wait=true"]);
    wait_for(
        &format!("the host port {addr} to go with its pod"),
        T,
        |_| (!accepts(c, &addr)).then_some(()),
    );
}

// ---- the apiserver gone and back -------------------------------------------------------

/// A script that exits with `code` when the test says so (touches `/tmp/go` in its
/// container; the next container starts without it and waits again).
fn exit_on_go(code: i32) -> String {
    format!("echo waiting; while [ ! -e /tmp/go ]; do sleep 0.2; done; exit {code}")
}

/// The runtime's id of `ctr`'s container in pod JSON `p` (without `<runtime>://`).
fn runtime_id(p: &Value, ctr: &str) -> String {
    let raw = status_of(p, ctr).expect("a container status")["containerID"]
        .as_str()
        .unwrap_or_default();
    raw.split_once("://")
        .unwrap_or_else(|| panic!("container id {raw:?}"))
        .1
        .to_string()
}

/// The ids of the running containers of pod `ns/name`, from crictl `cmd` (a node's
/// `crictl` with no arguments yet).
fn running_ids(mut cmd: Command, ns: &str, name: &str) -> Vec<String> {
    cmd.args(["ps", "-o", "json", "--label"])
        .arg(format!("io.kubernetes.pod.name={name}"))
        .arg("--label")
        .arg(format!("io.kubernetes.pod.namespace={ns}"));
    let v: Value = serde_json::from_str(&ok(cmd)).unwrap();
    v["containers"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|c| c["id"].as_str().map(str::to_string))
        .collect()
}

/// The Lease's renewTime of `node` ("" if it cannot be read).
fn renew_time(c: &Cluster, node: &str) -> String {
    let out = super::run_timeout(
        &mut c.kubectl(&[
            "-n",
            "kube-node-lease",
            "get",
            "lease",
            node,
            "-o",
            "jsonpath={.spec.renewTime}",
        ]),
        T,
    );
    if out.status.success() {
        s(&out.stdout)
    } else {
        String::new()
    }
}

/// The Node `name` as the apiserver has it.
fn node_json(c: &Cluster, name: &str) -> Option<Value> {
    let out = super::run_timeout(&mut c.kubectl(&["get", "node", name, "-o", "json"]), T);
    out.status
        .success()
        .then(|| serde_json::from_slice(&out.stdout).ok())
        .flatten()
}

/// `node`'s Lease renewed twice after `before` (its renewTime then), and the Node
/// Ready, with no taint of a node the controller-manager lost.
fn node_back(c: &Cluster, node: &str, before: &str) {
    let mut seen = vec![before.to_string()];
    wait_for(
        &format!("{node}'s lease renewed twice after the outage"),
        Duration::from_secs(90),
        |last| {
            let t = renew_time(c, node);
            if !t.is_empty() && !seen.contains(&t) {
                seen.push(t);
            }
            *last = format!("{seen:?}");
            (seen.len() >= 3).then_some(())
        },
    );
    let n = node_json(c, node).unwrap();
    let ready = condition(&n, "Ready").unwrap();
    assert_eq!(ready["status"], "True", "{node}: {ready}");
    let taints = n["spec"]["taints"].to_string();
    assert!(
        !taints.contains("unreachable") && !taints.contains("not-ready"),
        "{node}: {taints}"
    );
}

/// What the check knows of a crustlet node's pods from before the outage.
struct Before {
    /// outage-before's container and restart count.
    before: (String, u64),
    /// The containers that exit during the outage (outage-exits, outage-done).
    exits: String,
    done: String,
}

/// The kube-apiserver gone for a while and back: pods run on (and are looked after:
/// a container that exits is restarted) on the crustlets' nodes and the kubelet's;
/// once it is back the crustlets' watches, status updates and Leases resume, a pod
/// deleted then is stopped, a new one runs, and the controller-manager and the
/// scheduler carry on (a Job completes).
pub fn crustlet_apiserver_outage(c: &Cluster) {
    let nodes = [Crustlet::on_crustd(c), Crustlet::on_containerd(c)];
    for n in &nodes {
        for name in ["outage-before", "outage-doomed"] {
            apply(n, pod(n, name, "exec sleep 3600", |_| {}));
        }
        apply(n, pod(n, "outage-exits", &exit_on_go(3), |_| {}));
        apply(
            n,
            pod(n, "outage-done", &exit_on_go(0), |p| {
                p["spec"]["restartPolicy"] = json!("Never")
            }),
        );
    }
    super::apply(
        c,
        super::pod(c, "outage-kubelet", "exec sleep 3600", |_| {}),
    );
    let mut before = vec![];
    for n in &nodes {
        let p = |name: &str| wait_pod(n, name, "Running", Duration::from_secs(90), running);
        let b = p("outage-before");
        p("outage-doomed");
        before.push(Before {
            before: (
                runtime_id(&b, "main"),
                status_of(&b, "main").unwrap()["restartCount"]
                    .as_u64()
                    .unwrap(),
            ),
            exits: runtime_id(&p("outage-exits"), "main"),
            done: runtime_id(&p("outage-done"), "main"),
        });
    }
    let k = super::wait_pod(
        c,
        "outage-kubelet",
        "Running",
        Duration::from_secs(90),
        running,
    );
    let kubelet_ctr = runtime_id(&k, "main");
    let leases: Vec<(&str, String)> = [NODE, CRUSTLET_NODE, CONTAINERD_NODE]
        .into_iter()
        .map(|n| (n, renew_time(c, n)))
        .collect();

    c.stop_apiserver();
    let down = Instant::now();
    let out = super::run_timeout(&mut c.kubectl(&["get", "--raw", "/readyz"]), T);
    assert!(!out.status.success(), "the apiserver still answers");
    for (n, b) in nodes.iter().zip(&before) {
        for id in [&b.exits, &b.done] {
            ok(n.node_crictl(&["exec", id, "touch", "/tmp/go"]));
        }
    }
    // Without the apiserver the pods run on, looked after by their node: the container
    // that exited is started again, the one that ran to its end is left so.
    for (n, b) in nodes.iter().zip(&before) {
        wait_for(
            &format!(
                "{}: outage-exits started again without the apiserver",
                n.node
            ),
            Duration::from_secs(40),
            |last| {
                let ids = running_ids(n.node_crictl(&[]), n.ns, "outage-exits");
                *last = format!("{ids:?}");
                (ids.len() == 1 && ids[0] != b.exits).then_some(())
            },
        );
        assert_eq!(
            running_ids(n.node_crictl(&[]), n.ns, "outage-before"),
            std::slice::from_ref(&b.before.0),
            "{}: outage-before",
            n.node
        );
        assert!(
            running_ids(n.node_crictl(&[]), n.ns, "outage-done").is_empty(),
            "{}: outage-done still runs",
            n.node
        );
        assert!(n.crustlet_up(), "{}", n.log(n.log_name));
    }
    assert_eq!(
        running_ids(c.crictl(&[]), "default", "outage-kubelet"),
        std::slice::from_ref(&kubelet_ctr),
        "the kubelet's outage-kubelet"
    );
    // Longer than the crustlets' Lease renewal (10 s) and a few of their watches'
    // back-offs; shorter than the controller-manager's 40 s grace for a node.
    let outage = Duration::from_secs(20);
    std::thread::sleep(outage.saturating_sub(down.elapsed()));
    assert!(
        c.kubelet_running(),
        "{}",
        super::tail(&c.log("kubelet"), 20)
    );

    c.start_apiserver();
    // What the node lifecycle controller does to the pods of a node whose Lease it saw
    // go stale (it may or may not have come to that here): the pods marked NotReady.
    // Each node agent puts its own status back.
    let not_ready =
        r#"{"status":{"conditions":[{"type":"Ready","status":"False","reason":"NodeLost"}]}}"#;
    let mark = |ns: &str, name: &str| {
        ok(c.kubectl(&[
            "-n",
            ns,
            "patch",
            "pod",
            name,
            "--subresource=status",
            "--type=strategic",
            "-p",
            not_ready,
        ]));
    };
    mark("default", "outage-kubelet");
    // Deleted, and new, as soon as it is back.
    for n in &nodes {
        mark(n.ns, "outage-before");
        kubectl(n, &["delete", "pod", "outage-doomed", "--wait=false"]);
        apply(n, pod(n, "outage-after", "exec sleep 3600", |_| {}));
        let mut spec = pod(n, "x", "echo job-done", |_| {})["spec"].clone();
        spec["restartPolicy"] = json!("Never");
        apply(
            n,
            json!({
                "apiVersion": "batch/v1",
                "kind": "Job",
                "metadata": {"name": "outage-job", "namespace": n.ns},
                "spec": {"backoffLimit": 0, "template": {"spec": spec}},
            }),
        );
    }
    super::apply(
        c,
        super::pod(c, "outage-kubelet-after", "exec sleep 3600", |_| {}),
    );

    for (n, b) in nodes.iter().zip(&before) {
        let on = n.node;
        wait_for(
            &format!("{on}: outage-doomed deleted"),
            Duration::from_secs(90),
            |_| get(n, "pod", "outage-doomed").is_none().then_some(()),
        );
        gone_from_crustd(n, "outage-doomed");
        wait_pod(
            n,
            "outage-after",
            "Running",
            Duration::from_secs(90),
            running,
        );
        // What happened during the outage, in the status now.
        let p = wait_pod(
            n,
            "outage-exits",
            "restarted after exiting 3",
            Duration::from_secs(60),
            |p| {
                running(p)
                    && status_of(p, "main").is_some_and(|s| {
                        s["restartCount"].as_u64() >= Some(1)
                            && s["lastState"]["terminated"]["exitCode"] == 3
                    })
            },
        );
        assert_ne!(runtime_id(&p, "main"), b.exits, "{on}");
        let p = wait_pod(
            n,
            "outage-done",
            "Succeeded",
            Duration::from_secs(60),
            |p| p["status"]["phase"] == "Succeeded",
        );
        let st = &status_of(&p, "main").unwrap()["state"]["terminated"];
        assert_eq!(st["exitCode"], 0, "{on}: {st}");
        assert_eq!(st["reason"], "Completed", "{on}: {st}");
        // The pod from before: the same container, never restarted, Ready again.
        let p = wait_pod(n, "outage-before", "Ready again", T, |p| {
            running(p) && condition(p, "Ready").is_some_and(|r| r["status"] == "True")
        });
        assert_eq!(runtime_id(&p, "main"), b.before.0, "{on}: a new container");
        assert_eq!(
            status_of(&p, "main").unwrap()["restartCount"].as_u64(),
            Some(b.before.1),
            "{on}: outage-before restarted"
        );
        // The controller-manager and the scheduler are back too.
        wait_for(
            &format!("{on}: outage-job complete"),
            Duration::from_secs(90),
            |last| {
                let j = get(n, "job", "outage-job")?;
                *last = j["status"].to_string();
                condition(&j, "Complete")
                    .is_some_and(|c| c["status"] == "True")
                    .then_some(())
            },
        );
        assert!(n.crustlet_up(), "{}", n.log(n.log_name));
    }
    let k = super::wait_pod(c, "outage-kubelet", "Ready again", T, |p| {
        running(p) && condition(p, "Ready").is_some_and(|r| r["status"] == "True")
    });
    assert_eq!(runtime_id(&k, "main"), kubelet_ctr, "the kubelet's pod");
    super::wait_pod(
        c,
        "outage-kubelet-after",
        "Running",
        Duration::from_secs(90),
        running,
    );
    for (node, t) in &leases {
        node_back(c, node, t);
    }
}
