//! A cluster of three crust nodes (tests/src/fleet.rs): each in a network namespace of
//! its own with its own crustd, crustlet and kube-proxy, on one L2 segment, under the
//! real control plane. What a user runs across nodes must work: pods reaching each
//! other by pod IP, through a ClusterIP and through a NodePort, from pods and from the
//! nodes, and a pod reaching itself through its own Service.
//!
//! Its own harness (`harness = false`), one fleet for every check; without root or the
//! tools it skips loudly, except under `CI=true`, where that is a failure.

use crust_e2e::cluster::{run_timeout, wait_for};
use crust_e2e::fleet::{Flavour, Fleet};
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// Nodes in the suite's fleet (`CRUST_FLEET_NODES` for `hack/cluster up N`).
const NODES: usize = 3;
const NS: &str = "fleet";
const AGNHOST: &str = "registry.k8s.io/e2e-test-images/agnhost:2.45";
const T: Duration = Duration::from_secs(60);

fn s(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn ok(f: &Fleet, args: &[&str]) -> String {
    let out = run_timeout(&mut f.kubectl(args), T);
    assert!(
        out.status.success(),
        "kubectl {args:?}: {}{}",
        s(&out.stdout),
        s(&out.stderr)
    );
    s(&out.stdout)
}

fn apply(f: &Fleet, obj: Value) {
    let path = f
        .cluster
        .path(&format!("obj-{}.json", crust_e2e::unique("o")));
    std::fs::write(&path, obj.to_string()).unwrap();
    ok(f, &["apply", "-f", path.to_str().unwrap()]);
}

fn pod_name(i: usize) -> String {
    format!("web-{i}")
}

/// `curl` in pod `from` (agnhost has it): the body, or None.
fn curl_in_pod(f: &Fleet, from: &str, url: &str) -> Option<String> {
    let out = run_timeout(
        &mut f.kubectl(&[
            "-n",
            NS,
            "exec",
            from,
            "--",
            "curl",
            "-s",
            "--max-time",
            "3",
            url,
        ]),
        T,
    );
    out.status
        .success()
        .then(|| s(&out.stdout).trim().to_string())
}

/// `curl` in node `i`'s network namespace: the body, or None.
fn curl_on_node(f: &Fleet, i: usize, url: &str) -> Option<String> {
    let out = run_timeout(
        f.node_cmd(i, "curl").args(["-s", "--max-time", "3", url]),
        T,
    );
    out.status
        .success()
        .then(|| s(&out.stdout).trim().to_string())
}

/// Asks `get` until every name of `want` answered (a Service spreads requests at
/// random), failing after 40 tries.
fn all_answer(what: &str, want: &[String], mut get: impl FnMut() -> Option<String>) {
    let mut seen = std::collections::BTreeSet::new();
    for _ in 0..40 {
        if let Some(b) = get() {
            seen.insert(b);
        }
        if want.iter().all(|w| seen.contains(w)) {
            return;
        }
    }
    panic!("{what}: answered {seen:?}, want every one of {want:?}");
}

/// One agnhost web server per node (bound by name), each answering `/hostname` with its
/// pod's name; their IPs.
fn web_pods(f: &Fleet) -> Vec<String> {
    apply(
        f,
        json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}}),
    );
    for i in 0..NODES {
        apply(
            f,
            json!({"apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": pod_name(i), "namespace": NS,
                             "labels": {"app": "web", "idx": i.to_string()}},
                "spec": {"nodeName": f.nodes[i].name,
                         "terminationGracePeriodSeconds": 1,
                         "containers": [{"name": "web", "image": AGNHOST,
                                         "args": ["netexec", "--http-port=8080"],
                                         "ports": [{"containerPort": 8080}]}]}}),
        );
    }
    (0..NODES)
        .map(|i| {
            wait_for(
                &format!("{} Running", pod_name(i)),
                Duration::from_secs(120),
                |last| {
                    let out = run_timeout(
                        &mut f.kubectl(&["-n", NS, "get", "pod", &pod_name(i), "-o", "json"]),
                        T,
                    );
                    let v: Value = serde_json::from_slice(&out.stdout).ok()?;
                    *last = v["status"].to_string();
                    let ready = v["status"]["conditions"]
                        .as_array()?
                        .iter()
                        .any(|c| c["type"] == "Ready" && c["status"] == "True");
                    ready
                        .then(|| v["status"]["podIP"].as_str().map(str::to_string))
                        .flatten()
                },
            )
        })
        .collect()
}

/// Whether IPv4 address `ip` is in `cidr`.
fn in_cidr(ip: &str, cidr: &str) -> bool {
    let Some((base, len)) = cidr.split_once('/') else {
        return false;
    };
    let (Ok(ip), Ok(base), Ok(len)) = (
        ip.parse::<std::net::Ipv4Addr>(),
        base.parse::<std::net::Ipv4Addr>(),
        len.parse::<u32>(),
    ) else {
        return false;
    };
    let mask = u32::MAX.checked_shl(32 - len).unwrap_or(0);
    u32::from(ip) & mask == u32::from(base) & mask
}

fn pods_reach_each_other_by_ip(f: &Fleet, ips: &[String]) {
    // Each pod in its node's pod range.
    for (i, ip) in ips.iter().enumerate() {
        let out = ok(
            f,
            &[
                "get",
                "node",
                &f.nodes[i].name,
                "-o",
                "jsonpath={.spec.podCIDR}",
            ],
        );
        let net = out.trim();
        assert!(
            in_cidr(ip, net),
            "{} has {ip}, outside its node's range {net}",
            pod_name(i)
        );
    }
    for from in 0..NODES {
        for (to, ip) in ips.iter().enumerate() {
            let url = format!("http://{ip}:8080/hostname");
            let got = wait_for(&format!("{} -> {url}", pod_name(from)), T, |last| {
                let b = curl_in_pod(f, &pod_name(from), &url);
                *last = format!("{b:?}");
                b
            });
            assert_eq!(got, pod_name(to), "{} -> {url}", pod_name(from));
            // The server saw the client's own address: no masquerade between pods.
            let url = format!("http://{ip}:8080/clientip");
            let seen = curl_in_pod(f, &pod_name(from), &url).unwrap_or_default();
            assert!(
                seen.starts_with(&format!("{}:", ips[from])),
                "{} -> {url}: the server saw {seen:?}, not {}",
                pod_name(from),
                ips[from]
            );
        }
        // And from every node.
        for (to, ip) in ips.iter().enumerate() {
            let url = format!("http://{ip}:8080/hostname");
            let got = wait_for(&format!("node {from} -> {url}"), T, |last| {
                let b = curl_on_node(f, from, &url);
                *last = format!("{b:?}");
                b
            });
            assert_eq!(got, pod_name(to));
        }
    }
}

fn services_across_nodes(f: &Fleet) {
    apply(
        f,
        json!({"apiVersion": "v1", "kind": "Service",
            "metadata": {"name": "web", "namespace": NS},
            "spec": {"type": "NodePort", "selector": {"app": "web"},
                     "ports": [{"port": 80, "targetPort": 8080}]}}),
    );
    // Only web-0 behind it: web-0 reaching itself through it comes back in through
    // the port it left by (hairpin).
    apply(
        f,
        json!({"apiVersion": "v1", "kind": "Service",
            "metadata": {"name": "self", "namespace": NS},
            "spec": {"selector": {"app": "web", "idx": "0"},
                     "ports": [{"port": 80, "targetPort": 8080}]}}),
    );
    let svc: Value =
        serde_json::from_str(&ok(f, &["-n", NS, "get", "service", "web", "-o", "json"])).unwrap();
    let cluster_ip = svc["spec"]["clusterIP"].as_str().unwrap().to_string();
    let node_port = svc["spec"]["ports"][0]["nodePort"].as_u64().unwrap();
    let self_ip = ok(
        f,
        &[
            "-n",
            NS,
            "get",
            "service",
            "self",
            "-o",
            "jsonpath={.spec.clusterIP}",
        ],
    );
    let all: Vec<String> = (0..NODES).map(pod_name).collect();
    // kube-proxy on every node has the endpoints once the first request answers.
    for from in 0..NODES {
        let url = format!("http://{cluster_ip}/hostname");
        wait_for(&format!("{} -> {url}", pod_name(from)), T, |_| {
            curl_in_pod(f, &pod_name(from), &url)
        });
        all_answer(&format!("{} -> ClusterIP", pod_name(from)), &all, || {
            curl_in_pod(f, &pod_name(from), &url)
        });
        all_answer(&format!("node {from} -> ClusterIP"), &all, || {
            curl_on_node(f, from, &url)
        });
        for to in 0..NODES {
            let url = format!("http://{}:{node_port}/hostname", f.nodes[to].ip);
            all_answer(
                &format!("{} -> NodePort of node {to}", pod_name(from)),
                &all,
                || curl_in_pod(f, &pod_name(from), &url),
            );
            all_answer(
                &format!("node {from} -> NodePort of node {to}"),
                &all,
                || curl_on_node(f, from, &url),
            );
        }
    }
    let url = format!("http://{}/hostname", self_ip.trim());
    let got = wait_for("web-0 -> its own Service", T, |last| {
        let b = curl_in_pod(f, &pod_name(0), &url);
        *last = format!("{b:?}");
        b
    });
    assert_eq!(got, pod_name(0));
}

/// On every node: a `hostNetwork` pod has the node's address and answers on the node's
/// own port, and a pod's `hostPort` is reached at the node's address, from another
/// node and from a pod on another node. Each node holds its own host ports: the same
/// port on every node is no clash.
fn host_network_and_host_port(f: &Fleet) {
    const HOST_NET_PORT: u16 = 18080;
    const HOST_PORT: u16 = 18081;
    for (i, node) in f.nodes.iter().enumerate() {
        apply(
            f,
            json!({"apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": format!("hostnet-{i}"), "namespace": NS},
                "spec": {"nodeName": node.name, "hostNetwork": true,
                         "terminationGracePeriodSeconds": 1,
                         "containers": [{"name": "web", "image": AGNHOST,
                                         "args": ["netexec", format!("--http-port={HOST_NET_PORT}")],
                                         "ports": [{"containerPort": HOST_NET_PORT}]}]}}),
        );
        apply(
            f,
            json!({"apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": format!("hostport-{i}"), "namespace": NS},
                "spec": {"nodeName": node.name,
                         "terminationGracePeriodSeconds": 1,
                         "containers": [{"name": "web", "image": AGNHOST,
                                         "args": ["netexec", "--http-port=8080"],
                                         "ports": [{"containerPort": 8080, "hostPort": HOST_PORT}]}]}}),
        );
    }
    for (i, node) in f.nodes.iter().enumerate() {
        let ip = wait_for(
            &format!("hostnet-{i} Running"),
            Duration::from_secs(120),
            |last| {
                let out = run_timeout(
                    &mut f.kubectl(&[
                        "-n",
                        NS,
                        "get",
                        "pod",
                        &format!("hostnet-{i}"),
                        "-o",
                        "json",
                    ]),
                    T,
                );
                let v: Value = serde_json::from_slice(&out.stdout).ok()?;
                *last = v["status"].to_string();
                (v["status"]["phase"] == "Running")
                    .then(|| v["status"]["podIP"].as_str().map(str::to_string))
                    .flatten()
            },
        );
        assert_eq!(ip, node.ip, "hostnet-{i}'s podIP is not its node's address");
        let other = (i + 1) % NODES;
        let from_pod = pod_name(other);
        let url = format!("http://{}:{HOST_NET_PORT}/hostname", node.ip);
        wait_for(&format!("node {other} -> {url}"), T, |last| {
            let b = curl_on_node(f, other, &url);
            *last = format!("{b:?}");
            b
        });
        wait_for(&format!("{from_pod} -> {url}"), T, |last| {
            let b = curl_in_pod(f, &from_pod, &url);
            *last = format!("{b:?}");
            b
        });
        // The hostPort: the pod behind it answers with its own name.
        let url = format!("http://{}:{HOST_PORT}/hostname", node.ip);
        let want = format!("hostport-{i}");
        for (what, get) in [
            (
                format!("node {other} -> {url}"),
                Box::new(|| curl_on_node(f, other, &url)) as Box<dyn Fn() -> Option<String>>,
            ),
            (
                format!("{from_pod} -> {url}"),
                Box::new(|| curl_in_pod(f, &from_pod, &url)),
            ),
        ] {
            let got = wait_for(&what, T, |last| {
                let b = get();
                *last = format!("{b:?}");
                b.filter(|b| *b == want)
            });
            assert_eq!(got, want, "{what}");
        }
    }
    for i in 0..NODES {
        ok(
            f,
            &[
                "-n",
                NS,
                "delete",
                "pod",
                &format!("hostnet-{i}"),
                &format!("hostport-{i}"),
                "--wait=false",
            ],
        );
    }
}

fn routes_between_nodes(f: &Fleet) {
    if let Some(wrong) = routes_wrong(f) {
        panic!("{wrong}");
    }
}

/// What is wrong with the nodes' routes to each other's pod ranges (crustlet's
/// `--pod-routes`: every other node's range via its address, and nothing else), if
/// anything.
fn routes_wrong(f: &Fleet) -> Option<String> {
    for (i, node) in f.nodes.iter().enumerate() {
        let routes = crust_e2e::sh(&["ip", "-n", &node.ns.name, "route", "show", "proto", "77"]);
        let mut want: Vec<String> = vec![];
        for (j, other) in f.nodes.iter().enumerate() {
            if i == j {
                continue;
            }
            let cidr = ok(
                f,
                &["get", "node", &other.name, "-o", "jsonpath={.spec.podCIDR}"],
            );
            want.push(format!("{} via {}", cidr.trim(), other.ip));
        }
        if let Some(w) = want.iter().find(|w| !routes.contains(w.as_str())) {
            return Some(format!("node {i}: no route {w} in:\n{routes}"));
        }
        if routes.lines().count() != NODES - 1 {
            return Some(format!("node {i}: not {} routes:\n{routes}", NODES - 1));
        }
    }
    None
}

/// Node 2 is lost: its crustlet and crustd die, its pods' processes running on
/// (`whole == false`), or the whole node goes, as a machine losing its power: link cut,
/// every process of it killed (`whole == true`). The Node goes NotReady, the other
/// nodes stop routing to it, its pod is evicted (a short `tolerationSeconds`), the
/// Deployment runs its replica on another node and the Service stops sending there.
/// Started again, the node rejoins, the evicted pod is cleaned off it and nothing of it
/// is left: no sandbox in its crustd, no address held, the routes back.
fn node_lost_and_back(f: &Fleet, whole: bool) {
    let lost = NODES - 1;
    let deployment = if whole { "spread-whole" } else { "spread" };
    let name = &f.nodes[lost].name;
    let toleration = |key: &str| json!({"key": key, "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 2});
    apply(
        f,
        json!({"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": deployment, "namespace": NS},
            "spec": {"replicas": NODES, "selector": {"matchLabels": {"app": deployment}},
              "template": {"metadata": {"labels": {"app": deployment}},
                "spec": {"terminationGracePeriodSeconds": 1,
                  "tolerations": [toleration("node.kubernetes.io/not-ready"),
                                  toleration("node.kubernetes.io/unreachable")],
                  "topologySpreadConstraints": [{"maxSkew": 1,
                      "topologyKey": "kubernetes.io/hostname",
                      "whenUnsatisfiable": "DoNotSchedule",
                      // The lost node (tainted unreachable) is not a place to spread to.
                      "nodeTaintsPolicy": "Honor",
                      "labelSelector": {"matchLabels": {"app": deployment}}}],
                  "containers": [{"name": "web", "image": AGNHOST,
                                  "args": ["netexec", "--http-port=8080"]}]}}}}),
    );
    let pods = |last: &mut String| -> Option<Vec<(String, String, bool, String)>> {
        let out = run_timeout(
            &mut f.kubectl(&[
                "-n",
                NS,
                "get",
                "pods",
                "-l",
                &format!("app={deployment}"),
                "-o",
                "json",
            ]),
            T,
        );
        let v: Value = serde_json::from_slice(&out.stdout).ok()?;
        let list: Vec<(String, String, bool, String)> = v["items"]
            .as_array()?
            .iter()
            .map(|p| {
                let ready = p["status"]["conditions"].as_array().is_some_and(|c| {
                    c.iter()
                        .any(|c| c["type"] == "Ready" && c["status"] == "True")
                });
                (
                    p["metadata"]["name"].as_str().unwrap_or("").to_string(),
                    p["spec"]["nodeName"].as_str().unwrap_or("").to_string(),
                    ready && p["metadata"]["deletionTimestamp"].is_null(),
                    p["status"]["podIP"].as_str().unwrap_or("").to_string(),
                )
            })
            .collect();
        *last = format!("{list:?}");
        Some(list)
    };
    let before = wait_for(
        "a ready spread pod on every node",
        Duration::from_secs(120),
        |last| {
            let l = pods(last)?;
            let nodes: std::collections::BTreeSet<&str> =
                l.iter().filter(|p| p.2).map(|p| p.1.as_str()).collect();
            (nodes.len() == NODES).then_some(l)
        },
    );
    let victim = before.iter().find(|p| p.1 == *name).unwrap().clone();
    apply(
        f,
        json!({"apiVersion": "v1", "kind": "Service",
            "metadata": {"name": deployment, "namespace": NS},
            "spec": {"selector": {"app": deployment}, "ports": [{"port": 80, "targetPort": 8080}]}}),
    );
    if whole {
        f.power_off(lost);
    } else {
        f.stop_agent(lost);
        f.kill_runtime(lost);
    }
    wait_for(
        &format!("{name} not Ready"),
        Duration::from_secs(90),
        |last| {
            let st = ok(
                f,
                &[
                    "get",
                    "node",
                    name,
                    "-o",
                    "jsonpath={.status.conditions[?(@.type==\"Ready\")].status}",
                ],
            );
            *last = st.clone();
            (st.trim() != "True").then_some(())
        },
    );
    // The others no longer route to its pod range.
    let lost_cidr = ok(f, &["get", "node", name, "-o", "jsonpath={.spec.podCIDR}"]);
    let lost_route = format!("{} via {}", lost_cidr.trim(), f.nodes[lost].ip);
    for i in 0..lost {
        wait_for(&format!("node {i} without {lost_route}"), T, |last| {
            *last = crust_e2e::sh(&[
                "ip",
                "-n",
                &f.nodes[i].ns.name,
                "route",
                "show",
                "proto",
                "77",
            ]);
            (!last.contains(&lost_route)).then_some(())
        });
    }
    // Evicted: its replacement runs elsewhere and the Service leaves its address out.
    wait_for(
        "the lost node's replica back elsewhere",
        Duration::from_secs(120),
        |last| {
            let l = pods(last)?;
            let ready: Vec<_> = l.iter().filter(|p| p.2).collect();
            (ready.len() == NODES && ready.iter().all(|p| p.1 != *name)).then_some(())
        },
    );
    wait_for("the Service without the lost pod", T, |last| {
        let ips = ok(
            f,
            &[
                "-n",
                NS,
                "get",
                "endpointslices",
                "-l",
                &format!("kubernetes.io/service-name={deployment}"),
                "-o",
                "jsonpath={.items[*].endpoints[?(@.conditions.ready==true)].addresses[*]}",
            ],
        );
        *last = ips.clone();
        (ips.split_whitespace().count() == NODES && !ips.contains(&victim.3)).then_some(())
    });
    // Back: the node rejoins and its old pod goes for good.
    if whole {
        f.power_on(lost);
    } else {
        f.start_runtime(lost);
        f.start_agent(lost);
    }
    f.wait_ready(Duration::from_secs(120));
    wait_for("the evicted pod gone", Duration::from_secs(120), |last| {
        let l = pods(last)?;
        (!l.iter().any(|p| p.0 == victim.0)).then_some(())
    });
    let endpoint = format!("unix://{}", f.nodes[lost].socket.display());
    wait_for(
        &format!("nothing of {} left in {name}'s crustd", victim.0),
        T,
        |last| {
            let out = run_timeout(
                f.node_cmd(lost, &f.cluster.bins.crictl)
                    .arg(format!("--runtime-endpoint={endpoint}"))
                    .args([
                        "pods",
                        "-q",
                        "--label",
                        &format!("io.kubernetes.pod.name={}", victim.0),
                    ]),
                T,
            );
            *last = s(&out.stdout) + &s(&out.stderr);
            (out.status.success() && s(&out.stdout).trim().is_empty()).then_some(())
        },
    );
    // The address it held is free again: the node's host-local holds only what the
    // pods it runs have.
    wait_for(&format!("{name}'s addresses only its pods'"), T, |last| {
        let out = ok(
            f,
            &[
                "get",
                "pods",
                "-A",
                "--field-selector",
                &format!("spec.nodeName={name}"),
                "-o",
                "json",
            ],
        );
        let v: Value = serde_json::from_str(&out).ok()?;
        let mut running: Vec<String> = v["items"]
            .as_array()?
            .iter()
            .filter(|p| p["spec"]["hostNetwork"] != true)
            .filter_map(|p| p["status"]["podIP"].as_str().map(str::to_string))
            .collect();
        running.sort();
        let held = f.reserved_ips(lost);
        *last = format!("held {held:?}, pods {running:?}");
        (held == running && !held.contains(&victim.3)).then_some(())
    });
    // And the others route to it again.
    wait_for(
        "routes between every node again",
        T,
        |last| match routes_wrong(f) {
            None => Some(()),
            Some(wrong) => {
                *last = wrong;
                None
            }
        },
    );
    ok(f, &["-n", NS, "delete", "deployment", deployment]);
    ok(f, &["-n", NS, "delete", "service", deployment]);
}

/// Writes what `hack/cluster kubectl` needs into `dir` (`env`: the control
/// namespace, the admin kubeconfig, kubectl), says how to reach the fleet, and waits
/// for `dir/release` (`hack/cluster down`).
fn hold_for_a_person(f: &Fleet, dir: &Path) {
    std::fs::create_dir_all(dir).unwrap();
    let _ = std::fs::remove_file(dir.join("release"));
    let env = format!(
        "CLUSTER_NETNS={}\nCLUSTER_KUBECONFIG={}\nCLUSTER_KUBECTL={}\nCLUSTER_LOGS={}\n",
        f.cluster.node.name,
        f.cluster.path("admin.kubeconfig").display(),
        f.cluster.bins.kubectl.display(),
        f.cluster.path("logs").display()
    );
    std::fs::write(dir.join("env"), env).unwrap();
    println!("{} nodes Ready:", f.nodes.len());
    for node in &f.nodes {
        println!(
            "  {} at {} (network namespace {})",
            node.name, node.ip, node.ns.name
        );
    }
    println!("kubectl: hack/cluster kubectl get nodes -o wide");
    println!("logs of every daemon: {}", f.cluster.path("logs").display());
    while !dir.join("release").exists() {
        std::thread::sleep(Duration::from_millis(500));
    }
    let _ = std::fs::remove_file(dir.join("env"));
}

fn main() {
    // An interrupted suite (Ctrl-C, a CI timeout's SIGTERM) still tears its fleet down.
    let signals = crust_e2e::block_signals();
    let tools = [
        "ip",
        "nsenter",
        "unshare",
        "busybox",
        "docker-registry",
        "skopeo",
        "openssl",
        "iptables",
        "xz",
        "curl",
    ];
    let (bins, portmap_dir) = crust_e2e::cluster::suite_needs("multinode", &tools);
    let tools_dir = workspace().join("../shared/tools/kubernetes-e2e-v1.28.7");
    if !tools_dir.join("install").is_file() {
        crust_e2e::cluster::skip_suite("multinode", format!("no {}", tools_dir.display()));
    }
    let e2e_bin = std::env::var_os("CRUST_E2E_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| workspace().join("target/e2e-bin"));
    let started = Instant::now();
    // `hack/cluster up`: the fleet for a person, kept until `<dir>/release` appears.
    let hold = std::env::var_os("CRUST_FLEET_HOLD").map(PathBuf::from);
    let n = match &hold {
        Some(_) => std::env::var("CRUST_FLEET_NODES")
            .ok()
            .and_then(|n| n.parse().ok())
            .filter(|n| (1..=20).contains(n))
            .unwrap_or(NODES),
        None => NODES,
    };
    // `hack/cluster up N containerd`: the same fleet of the real kubelet on containerd.
    let flavour = match std::env::var("CRUST_FLEET_FLAVOUR").as_deref() {
        Ok("containerd") if hold.is_some() => Flavour::Containerd,
        _ => Flavour::Crust,
    };
    let fleet = std::panic::catch_unwind(|| {
        let f = Fleet::start_flavour(
            bins,
            crust_e2e::bin("crustd"),
            vec![crust_e2e::bin_dir(), portmap_dir],
            n,
            flavour,
        );
        f.cluster.push_e2e_images(&tools_dir, &e2e_bin);
        f
    });
    let Ok(fleet) = fleet else {
        println!("test fleet_start ... FAILED");
        println!("\ntest result: FAILED. 0 passed; 1 failed; 0 ignored; 0 measured; 0 filtered out; finished in {:.2}s\n", started.elapsed().as_secs_f32());
        std::process::exit(101);
    };
    let fleet = std::sync::Arc::new(fleet);
    Fleet::teardown_on_signal(&fleet, signals, "multinode");
    if let Some(dir) = hold {
        hold_for_a_person(&fleet, &dir);
        fleet.teardown();
        std::process::exit(0);
    }
    println!(
        "{NODES} nodes up in {:.1}s",
        started.elapsed().as_secs_f32()
    );
    let mut failed = vec![];
    let mut passed = 0;
    let mut run = |name: &str, f: &dyn Fn()| {
        let t = Instant::now();
        match std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)) {
            Ok(()) => {
                println!("test {name} ... ok ({:.1}s)", t.elapsed().as_secs_f32());
                passed += 1;
            }
            Err(_) => {
                println!("test {name} ... FAILED");
                failed.push(name.to_string());
            }
        }
    };
    run("routes_between_nodes", &|| routes_between_nodes(&fleet));
    let ips = std::cell::RefCell::new(vec![]);
    run("web_pods_on_every_node", &|| {
        *ips.borrow_mut() = web_pods(&fleet)
    });
    if ips.borrow().len() == NODES {
        let ips = ips.borrow().clone();
        run("pods_reach_each_other_by_ip", &|| {
            pods_reach_each_other_by_ip(&fleet, &ips)
        });
        run("services_across_nodes", &|| services_across_nodes(&fleet));
        run("host_network_and_host_port", &|| {
            host_network_and_host_port(&fleet)
        });
    }
    run("node_lost_and_back", &|| node_lost_and_back(&fleet, false));
    run("node_powered_off_and_back", &|| {
        node_lost_and_back(&fleet, true)
    });
    if !failed.is_empty() {
        let dest = workspace().join("target/tmp/multinode-logs");
        let _ = std::fs::remove_dir_all(&dest);
        let _ = std::fs::create_dir_all(&dest);
        if let Ok(rd) = std::fs::read_dir(fleet.cluster.path("logs")) {
            for e in rd.flatten() {
                let _ = std::fs::copy(e.path(), dest.join(e.file_name()));
            }
        }
        println!("\nthe fleet's logs are in {}", dest.display());
    }
    fleet.teardown();
    let n = failed.len();
    println!(
        "\ntest result: {}. {passed} passed; {n} failed; 0 ignored; 0 measured; 0 filtered out; finished in {:.2}s\n",
        if n == 0 { "ok" } else { "FAILED" },
        started.elapsed().as_secs_f32()
    );
    std::process::exit(if n == 0 { 0 } else { 101 });
}
