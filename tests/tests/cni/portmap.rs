//! End-to-end tests of the `portmap` CNI plugin binary, chained after our `bridge`.
//!
//! Each test makes a node namespace (with `192.0.2.10` on its loopback, an address of
//! the node that is not the bridge's) and pod namespaces; the pod serves a
//! file with busybox `httpd` on port 80, and the test fetches it with `curl` through the mapped
//! host port the ways a node's users reach a hostPort: from the node to one of its
//! addresses, from the node to `127.0.0.1` (route_localnet and masquerading), and from
//! the pod to the node (hairpin). Both backends, nftables and iptables, are run on the
//! same cases, and the iptables rules are compared with the reference plugin's
//! (containernetworking-plugins 1.1.1, whose only backend is iptables), each plugin's
//! DEL removing the rules the other made.

#![allow(dead_code)]

use crust_e2e::{
    attachment_env, bin, bin_dir, ip_files, reference_plugin, require_root, run, unique, Cni,
    CniOut, Netns, TempDir,
};
use serde_json::{json, Value};
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Child;
use std::time::{Duration, Instant};

include!("node_helpers.rs");

const NODE_IP: &str = "192.0.2.10";

/// Root and the tools: the bridge suite's, and the web server and client.
fn ready() -> bool {
    root() && require_root(&["busybox", "curl"])
}

/// A node with our bridge, a second address, and a pod with a web server.
struct Setup {
    node: Node,
    pod: Netns,
    bridge_conf: Value,
    prev: Value,
    pod_ip: String,
    _www: TempDir,
    httpd: Child,
}

impl Drop for Setup {
    fn drop(&mut self) {
        let _ = self.httpd.kill();
        let _ = self.httpd.wait();
    }
}

fn setup(subnet: u32) -> Setup {
    setup_with(json!({"subnet": format!("10.{subnet}.0.0/24"), "routes": [{"dst": "0.0.0.0/0"}]}))
}

/// A dual-stack pod: 10.N.0.0/24 and fd00:N::/64, default routes in both.
fn setup_dual(subnet: u32) -> Setup {
    let mut ipam = dual(subnet);
    ipam["routes"] = json!([{"dst": "0.0.0.0/0"}, {"dst": "::/0"}]);
    setup_with(ipam)
}

fn setup_with(ipam: Value) -> Setup {
    let node = Node::ours();
    node.ns
        .sh(&["ip", "addr", "add", &format!("{NODE_IP}/32"), "dev", "lo"]);
    let pod = Netns::new("pmp");
    let bridge_conf = node.conf(
        "1.0.0",
        json!({"isGateway": true, "hairpinMode": true}),
        ipam,
    );
    let prev = node.add(&bridge_conf, "pm1", &pod);
    let pod_ip = prev["ips"][0]["address"]
        .as_str()
        .unwrap()
        .split('/')
        .next()
        .unwrap()
        .to_string();
    let www = TempDir::new("www");
    std::fs::write(www.path().join("f"), "from the pod\n").unwrap();
    let httpd = pod
        .cmd("busybox")
        .args(["httpd", "-f", "-p", "80", "-h"])
        .arg(www.path())
        .spawn()
        .unwrap();
    eventually("the pod's httpd listens", || {
        fetch(&pod, &format!("http://{pod_ip}/f")).is_some()
    });
    Setup {
        node,
        pod,
        bridge_conf,
        prev,
        pod_ip,
        _www: www,
        httpd,
    }
}

/// GET `url` from namespace `ns` with curl: the body, or None.
fn fetch(ns: &Netns, url: &str) -> Option<String> {
    let out = run(ns.cmd("curl").args(["-sf", "-m", "2", url]));
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).into_owned())
}

/// The portmap plugin's configuration in the chain, as a runtime sends it.
fn pm_conf(s: &Setup, extra: Value, mappings: Value) -> Value {
    let mut c = json!({
        "cniVersion": "1.0.0",
        "name": NET,
        "type": "portmap",
        "capabilities": {"portMappings": true},
        "prevResult": s.prev,
    });
    for (k, v) in extra.as_object().unwrap() {
        c[k] = v.clone();
    }
    if !mappings.is_null() {
        c["runtimeConfig"] = json!({ "portMappings": mappings });
    }
    c
}

fn call(plugin: &Path, s: &Setup, cmd: &str, conf: &Value, id: &str) -> CniOut {
    attachment_env(
        Cni::new(plugin.to_path_buf(), Some(&s.node.ns)),
        id,
        &netns_path(&s.pod),
        "eth0",
        &bin_dir(),
    )
    .call(cmd, &conf.to_string())
}

fn ours() -> PathBuf {
    bin("portmap")
}

/// The `cni_hostport` tables' rules (ip and ip6), one line each.
fn nft_lines(node: &Node) -> Vec<String> {
    let mut v = Vec::new();
    for fam in ["ip", "ip6"] {
        let out = run(node
            .ns
            .cmd("nft")
            .args(["list", "table", fam, "cni_hostport"]));
        if out.status.success() {
            for l in String::from_utf8_lossy(&out.stdout).lines() {
                let l = l.trim();
                if l.contains("dnat") || l.contains("masquerade") || l.contains("jump") {
                    v.push(format!("{fam} {l}"));
                }
            }
        }
    }
    v
}

fn mappings() -> Value {
    json!([
        {"hostPort": 8080, "containerPort": 80, "protocol": "tcp"},
        {"hostPort": 8081, "containerPort": 80, "protocol": "tcp", "hostIP": NODE_IP},
        {"hostPort": 5353, "containerPort": 53, "protocol": "udp"},
    ])
}

/// The port reaches the pod from the node (an address of it and 127.0.0.1) and from
/// the pod itself through the node; the hostIP mapping only on its address.
fn assert_forwarded(s: &Setup) {
    let want = Some("from the pod\n".to_string());
    let gw = format!("10.{}.0.1", s.pod_ip.split('.').nth(1).unwrap());
    assert_eq!(fetch(&s.node.ns, &format!("http://{NODE_IP}:8080/f")), want);
    assert_eq!(fetch(&s.node.ns, &format!("http://{gw}:8080/f")), want);
    assert_eq!(
        fetch(&s.node.ns, "http://127.0.0.1:8080/f"),
        want,
        "localhost: route_localnet {}",
        s.node
            .sysctl(&format!("net/ipv4/conf/{}/route_localnet", s.node.bridge))
    );
    assert_eq!(
        fetch(&s.pod, &format!("http://{NODE_IP}:8080/f")),
        want,
        "hairpin"
    );
    assert_eq!(fetch(&s.node.ns, &format!("http://{NODE_IP}:8081/f")), want);
    assert_eq!(
        fetch(&s.node.ns, &format!("http://{gw}:8081/f")),
        None,
        "hostIP mapping answered on another address"
    );
}

/// None of the container's rules in either backend: no nftables rule commented with
/// its id, no iptables chain of an attachment.
fn assert_no_rules_of(s: &Setup, id: &str) {
    let nft = nft_lines(&s.node);
    let mark = format!("\"{id}\"");
    assert!(!nft.iter().any(|l| l.contains(&mark)), "{nft:?}");
    let ipt = s.node.ipt_rules();
    assert!(!ipt.iter().any(|l| l.contains("CNI-DN-")), "{ipt:?}");
}

fn assert_not_forwarded(s: &Setup) {
    assert_eq!(fetch(&s.node.ns, &format!("http://{NODE_IP}:8080/f")), None);
    assert_eq!(fetch(&s.node.ns, "http://127.0.0.1:8080/f"), None);
}

/// ADD forwards, CHECK passes, a second ADD leaves the same rules, DEL removes every
/// rule of the pod and the forwarding with them, CHECK then fails; for each backend.
#[test]
fn host_ports_reach_the_pod_in_each_backend() {
    if !ready() {
        return;
    }
    for (i, backend) in ["nftables", "iptables"].iter().enumerate() {
        let s = setup(231 + i as u32);
        let conf = pm_conf(&s, json!({ "backend": backend }), mappings());
        let out = call(&ours(), &s, "ADD", &conf, "pm1").ok();
        assert_eq!(
            out["ips"], s.prev["ips"],
            "ADD passes the previous result on"
        );
        assert_eq!(out["interfaces"], s.prev["interfaces"]);
        assert_forwarded(&s);
        assert_eq!(
            s.node
                .sysctl(&format!("net/ipv4/conf/{}/route_localnet", s.node.bridge)),
            "1"
        );
        call(&ours(), &s, "CHECK", &conf, "pm1").ok();
        let (nft1, ipt1) = (nft_lines(&s.node), s.node.ipt_rules());
        match *backend {
            "nftables" => {
                assert!(
                    nft1.iter().any(|l| l.contains("tcp dport 8080 dnat to")
                        && l.contains(&s.pod_ip)
                        && l.contains("\"pm1\"")),
                    "{nft1:?}"
                );
                assert!(
                    nft1.iter()
                        .any(|l| l.contains(&format!("ip daddr {NODE_IP} tcp dport 8081"))),
                    "{nft1:?}"
                );
                assert!(
                    nft1.iter().any(|l| l.contains("udp dport 5353")),
                    "{nft1:?}"
                );
                assert!(
                    ipt1.is_empty(),
                    "nftables backend made iptables rules: {ipt1:?}"
                );
            }
            _ => {
                assert!(
                    nft1.is_empty(),
                    "iptables backend made nftables rules: {nft1:?}"
                );
                assert!(
                    ipt1.iter().any(|l| l.contains("CNI-DN-")
                        && l.contains(&format!("--to-destination {}:80", s.pod_ip))),
                    "{ipt1:?}"
                );
            }
        }
        // A repeated ADD (a runtime's retry) leaves the same rules, not twice as many.
        call(&ours(), &s, "ADD", &conf, "pm1").ok();
        assert_eq!(nft_lines(&s.node), nft1, "{backend}: second ADD");
        assert_eq!(s.node.ipt_rules(), ipt1, "{backend}: second ADD");

        let del = call(&ours(), &s, "DEL", &conf, "pm1");
        assert!(del.stdout.trim().is_empty(), "DEL printed {}", del.stdout);
        del.ok();
        assert_no_rules_of(&s, "pm1");
        assert_not_forwarded(&s);
        call(&ours(), &s, "CHECK", &conf, "pm1").err(999);
        // DEL again (the runtime retries): nothing there is not an error.
        call(&ours(), &s, "DEL", &conf, "pm1").ok();
        s.node.del(&s.bridge_conf, "pm1", &s.pod);
    }
}

/// Without mappings (nearly every pod) ADD prints the previous result and makes no
/// table or chain; DEL and CHECK succeed.
#[test]
fn without_mappings_nothing_is_touched() {
    if !ready() {
        return;
    }
    let s = setup(233);
    for extra in [json!({}), json!({"runtimeConfig": {}})] {
        let mut conf = pm_conf(&s, json!({}), Value::Null);
        for (k, v) in extra.as_object().unwrap() {
            conf[k] = v.clone();
        }
        let out = call(&ours(), &s, "ADD", &conf, "pm1").ok();
        assert_eq!(out["ips"], s.prev["ips"]);
        assert_eq!(out["cniVersion"], "1.0.0");
        call(&ours(), &s, "CHECK", &conf, "pm1").ok();
        call(&ours(), &s, "DEL", &conf, "pm1").ok();
    }
    let tables = s.node.ns.sh(&["nft", "list", "tables"]);
    assert!(!tables.contains("cni_hostport"), "{tables}");
    assert!(s.node.ipt_rules().is_empty(), "{:?}", s.node.ipt_rules());
    s.node.del(&s.bridge_conf, "pm1", &s.pod);
}

/// Bad input: a clear CNI error, 999 as the reference plugin says it, nothing made.
#[test]
fn bad_configurations_are_refused() {
    if !ready() {
        return;
    }
    let s = setup(234);
    // (settings, mappings): every one refused.
    let cases = [
        (
            json!({}),
            json!([{"hostPort": 0, "containerPort": 80, "protocol": "tcp"}]),
        ),
        (
            json!({}),
            json!([{"hostPort": 80, "containerPort": 80, "protocol": "icmp"}]),
        ),
        (json!({"backend": "ebpf"}), mappings()),
        (
            json!({"backend": "nftables", "conditionsV4": ["-s", "10.0.0.0/8"]}),
            mappings(),
        ),
        (
            json!({"markMasqBit": 14, "externalSetMarkChain": "KUBE-MARK-MASQ"}),
            mappings(),
        ),
        (
            json!({"runtimeConfig": {"portMappings": "8080"}}),
            Value::Null,
        ),
    ];
    for (settings, maps) in cases {
        call(&ours(), &s, "ADD", &pm_conf(&s, settings, maps), "pm1").err(999);
    }
    // Not chained: no prevResult.
    let mut conf = pm_conf(&s, json!({}), mappings());
    conf.as_object_mut().unwrap().remove("prevResult");
    call(&ours(), &s, "ADD", &conf, "pm1").err(999);
    assert!(nft_lines(&s.node).is_empty(), "{:?}", nft_lines(&s.node));
    assert!(s.node.ipt_rules().is_empty(), "{:?}", s.node.ipt_rules());
    s.node.del(&s.bridge_conf, "pm1", &s.pod);
}

/// nftables conditions (`conditionsV4`) go on the hook chains' jumps: a condition no
/// packet meets turns the mapping off, one they all meet leaves it on.
#[test]
fn nftables_conditions_gate_the_mappings() {
    if !ready() {
        return;
    }
    let s = setup(235);
    let c = pm_conf(
        &s,
        json!({"conditionsV4": ["ip", "saddr", "198.51.100.0/24"]}),
        mappings(),
    );
    call(&ours(), &s, "ADD", &c, "pm1").ok();
    assert_eq!(
        fetch(&s.node.ns, &format!("http://{NODE_IP}:8080/f")),
        None,
        "{:?}",
        nft_lines(&s.node)
    );
    let c = pm_conf(
        &s,
        json!({"conditionsV4": ["ip", "daddr", "!=", "198.51.100.1"]}),
        mappings(),
    );
    call(&ours(), &s, "ADD", &c, "pm1").ok();
    assert_forwarded(&s);
    call(&ours(), &s, "DEL", &c, "pm1").ok();
    s.node.del(&s.bridge_conf, "pm1", &s.pod);
}

/// The iptables backend writes the reference plugin's rules, rule for rule, and each
/// plugin's DEL removes what the other made, whichever backend it was set to (a node
/// switching plugins with pods running).
#[test]
fn iptables_rules_are_the_reference_plugins() {
    if !ready() {
        return;
    }
    let Some(reference) = reference_plugin("portmap") else {
        return;
    };
    let s = setup(236);
    let conf = pm_conf(&s, json!({}), mappings());
    let ipt_conf = pm_conf(&s, json!({"backend": "iptables"}), mappings());

    call(&reference, &s, "ADD", &conf, "pm1").ok();
    assert_forwarded(&s);
    let theirs = s.node.ipt_rules();
    assert!(!theirs.is_empty());
    // Our CHECK finds the reference's rules. (The reference's own CHECK in 1.1.1 also
    // demands an IPv6 chain for a pod without IPv6, so it fails on its own rules.)
    call(&ours(), &s, "CHECK", &ipt_conf, "pm1").ok();
    // Our DEL, set to its default backend (nftables), removes the reference's chain.
    call(&ours(), &s, "DEL", &conf, "pm1").ok();
    assert_no_rules_of(&s, "pm1");
    assert_not_forwarded(&s);

    call(&ours(), &s, "ADD", &ipt_conf, "pm1").ok();
    let mine = s.node.ipt_rules();
    assert_eq!(
        mine.iter().collect::<BTreeSet<_>>(),
        theirs.iter().collect::<BTreeSet<_>>(),
        "ours (left) against the reference's (right)"
    );
    assert_forwarded(&s);
    // The reference's DEL removes them.
    call(&reference, &s, "DEL", &conf, "pm1").ok();
    assert_no_rules_of(&s, "pm1");
    assert_not_forwarded(&s);
    s.node.del(&s.bridge_conf, "pm1", &s.pod);
}

/// A dual-stack pod gets its host ports on both families: the IPv6 rules go to the
/// ip6 table (or ip6tables), the node reaches the pod through its IPv6 gateway address,
/// the pod reaches itself through it, and DEL removes both families' rules.
#[test]
fn dual_stack_pods_get_both_families() {
    if !ready() {
        return;
    }
    for (i, backend) in ["nftables", "iptables"].iter().enumerate() {
        let n = 237 + i as u32;
        let s = setup_dual(n);
        let pod_ip6 = s.prev["ips"][1]["address"]
            .as_str()
            .unwrap()
            .split('/')
            .next()
            .unwrap()
            .to_string();
        assert!(pod_ip6.starts_with("fd00:"), "{pod_ip6}");
        let conf = pm_conf(&s, json!({ "backend": backend }), mappings());
        call(&ours(), &s, "ADD", &conf, "pm1").ok();
        let want = Some("from the pod\n".to_string());
        let gw6 = format!("http://[fd00:{n}::1]:8080/f");
        assert_eq!(
            fetch(&s.node.ns, &gw6),
            want,
            "{backend}: node to [gw]:8080"
        );
        assert_eq!(fetch(&s.pod, &gw6), want, "{backend}: hairpin over IPv6");
        assert_eq!(
            fetch(&s.node.ns, &format!("http://10.{n}.0.1:8080/f")),
            want,
            "{backend}: IPv4 beside"
        );
        call(&ours(), &s, "CHECK", &conf, "pm1").ok();
        match *backend {
            "nftables" => {
                let l = nft_lines(&s.node);
                assert!(
                    l.iter()
                        .any(|l| l.starts_with("ip6 ")
                            && l.contains(&format!("dnat to [{pod_ip6}]:80"))),
                    "{l:?}"
                );
            }
            _ => {
                let l = s.node.ipt_rules();
                assert!(
                    l.iter().any(|l| l.starts_with("ip6tables ")
                        && l.contains(&format!("--to-destination [{pod_ip6}]:80"))),
                    "{l:?}"
                );
            }
        }
        call(&ours(), &s, "DEL", &conf, "pm1").ok();
        assert_eq!(fetch(&s.node.ns, &gw6), None, "{backend}: after DEL");
        assert_no_rules_of(&s, "pm1");
        s.node.del(&s.bridge_conf, "pm1", &s.pod);
    }
}

/// A UDP flow that reached the node's port before the mapping existed keeps going to
/// the node as long as its conntrack entry lives (NAT is decided by a flow's first
/// packet): ADD of a UDP mapping deletes such entries, and only those.
#[test]
fn stale_udp_entries_of_a_new_host_port_are_deleted() {
    if !ready() || !require_root(&["python3"]) {
        return;
    }
    let s = setup(240);
    // A first mapping makes the nat chains, and with them conntrack in the node.
    let tcp_only = json!([{"hostPort": 8080, "containerPort": 80, "protocol": "tcp"}]);
    call(&ours(), &s, "ADD", &pm_conf(&s, json!({}), tcp_only), "pm1").ok();
    let send = |port: u16| {
        s.node.ns.sh(&[
            "python3",
            "-c",
            &format!(
                "import socket; s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); \
                 s.sendto(b'x', ('{NODE_IP}', {port}))"
            ),
        ]);
    };
    send(5353);
    send(5454);
    let entries = || s.node.ns.sh(&["cat", "/proc/net/nf_conntrack"]);
    let has = |port: u16| {
        entries()
            .lines()
            .any(|l| l.contains("udp") && l.contains(&format!("dport={port} ")))
    };
    assert!(
        has(5353) && has(5454),
        "no UDP entries to start with: {}",
        entries()
    );
    // The mapping of 5353 (and the TCP one again): 5353's entry goes, 5454's stays.
    call(
        &ours(),
        &s,
        "ADD",
        &pm_conf(&s, json!({}), mappings()),
        "pm1",
    )
    .ok();
    assert!(!has(5353), "the stale entry is still there: {}", entries());
    assert!(has(5454), "another port's entry went too: {}", entries());
    call(
        &ours(),
        &s,
        "DEL",
        &pm_conf(&s, json!({}), mappings()),
        "pm1",
    )
    .ok();
    s.node.del(&s.bridge_conf, "pm1", &s.pod);
}

/// An ADD that fails after its mappings went in (nft refuses the conditions of the hook
/// rules, which come last) leaves none of the container's rules.
#[test]
fn a_failed_add_leaves_no_rules() {
    if !ready() {
        return;
    }
    let s = setup(241);
    let bad = pm_conf(
        &s,
        json!({"conditionsV4": ["ip", "saddr", "no-such-address"]}),
        mappings(),
    );
    call(&ours(), &s, "ADD", &bad, "pm1").err(999);
    assert_no_rules_of(&s, "pm1");
    assert_eq!(fetch(&s.node.ns, &format!("http://{NODE_IP}:8080/f")), None);
    s.node.del(&s.bridge_conf, "pm1", &s.pod);
}
