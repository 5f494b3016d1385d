//! Against the reference plugin (the same results and state, and our DEL after its ADD),
//! ADDs and DELs racing on one bridge, and macspoofchk.

use super::*;
use crust_e2e::reference_plugin;

// ---------------------------------------------------------------------------------------
// Against the reference plugin
// ---------------------------------------------------------------------------------------

/// The result with what legitimately differs between two runs (MACs, the random host
/// veth name, the pod's namespace path) replaced by placeholders.
fn normalized(mut r: Value) -> Value {
    for i in r["interfaces"].as_array_mut().expect("interfaces") {
        let mac = i["mac"].as_str().unwrap_or("");
        assert_eq!(mac.len(), 17, "bad MAC in {i}");
        i["mac"] = json!("<mac>");
        let name = i["name"].as_str().unwrap().to_string();
        if name.len() == 12
            && name.starts_with("veth")
            && name[4..].chars().all(|c| c.is_ascii_hexdigit())
        {
            i["name"] = json!("<veth>");
        }
        if i.get("sandbox").is_some() {
            i["sandbox"] = json!("<netns>");
        }
    }
    r
}

/// What a node and its pod look like after an ADD, for comparison.
fn observed(node: &Node, pod: &Netns) -> Value {
    let br = link(&node.ns, &node.bridge);
    let veths = node.veths();
    let hosts: Vec<Value> = veths
        .iter()
        .map(|v| {
            let l = link(&node.ns, v);
            json!({"master": l["master"], "up": is_up(&l), "mtu": l["mtu"]})
        })
        .collect();
    let eth0 = has_link(pod, "eth0").then(|| link(pod, "eth0"));
    json!({
        "bridge": {
            "name": br["ifname"],
            "kind": br["linkinfo"]["info_kind"],
            "up": is_up(&br),
            "mtu": br["mtu"],
            "addrs": addrs(&node.ns, &node.bridge),
        },
        "host_veths": hosts,
        "pod": {
            "links": pod.links(),
            "eth0": eth0.as_ref().map(|l| json!({"up": is_up(l), "mtu": l["mtu"]})),
            "addrs": if eth0.is_some() { json!(addrs(pod, "eth0")) } else { json!(null) },
            "routes4": routes(pod, false),
            "routes6": routes(pod, true),
        },
        "forwarding": [node.sysctl("net/ipv4/ip_forward"), node.sysctl("net/ipv6/conf/all/forwarding")],
        "files": node.files(),
    })
}

/// Runs ours and the reference (each on its own node, pod and dataDir) on the same
/// configuration, attachment and bridge name, and compares the results, the pod's
/// interface, addresses and routes, the bridge, the node's forwarding and host-local's
/// files; then DELs with both and compares again.
fn differential(reference: PathBuf, n: u32, settings: Value, mut ipam: Value) {
    let bridge = unique("br");
    let ours = Node::with(bin("bridge"), bin_dir(), bridge.clone());
    let theirs = Node::with(reference, PathBuf::from("/usr/lib/cni"), bridge);
    let (p_ours, p_theirs) = (Netns::new("bp"), Netns::new("bp"));
    let shared = TempDir::new("brres");
    let resolv = shared.path().join("resolv.conf");
    std::fs::write(&resolv, "nameserver 10.99.9.9\nsearch ipam.example\n").unwrap();
    ipam["resolvConf"] = json!(resolv);
    let c_ours = ours.conf("1.0.0", settings.clone(), ipam.clone());
    let c_theirs = theirs.conf("1.0.0", settings, ipam);

    let r_ours = ours.add(&c_ours, "cdiff", &p_ours);
    let r_theirs = theirs.add(&c_theirs, "cdiff", &p_theirs);
    assert_eq!(
        normalized(r_ours.clone()),
        normalized(r_theirs.clone()),
        "ADD results differ (left ours)"
    );
    // Our own result is consistent with the links (the reference's MAC of a fresh
    // bridge may be stale, so only ours is held to this).
    assert_eq!(
        r_ours["interfaces"][2]["sandbox"],
        json!(netns_path(&p_ours))
    );
    assert_eq!(
        r_ours["interfaces"][0]["mac"],
        link(&ours.ns, &ours.bridge)["address"]
    );
    let (o_ours, o_theirs) = (observed(&ours, &p_ours), observed(&theirs, &p_theirs));
    for k in ["bridge", "host_veths", "pod", "forwarding", "files"] {
        assert_eq!(o_ours[k], o_theirs[k], "after ADD, {k} differs (left ours)");
    }
    // Both masquerade the pod, each its own way.
    if c_ours["ipMasq"] == true {
        assert!(!ours.nft_rules().is_empty(), "our masq rules are missing");
        assert!(
            !theirs.ipt_rules().is_empty(),
            "reference masq rules are missing"
        );
    }
    // Both pods reach their gateway in both families.
    for p in [&p_ours, &p_theirs] {
        ping(p, &format!("10.{n}.0.1"));
        ping(p, &format!("fd00:{n}::1"));
    }

    ours.del(&c_ours, "cdiff", &p_ours);
    theirs.del(&c_theirs, "cdiff", &p_theirs);
    let (o_ours, o_theirs) = (observed(&ours, &p_ours), observed(&theirs, &p_theirs));
    assert_eq!(o_ours, o_theirs, "after DEL (left ours)");
    assert!(ours.veths().is_empty() && theirs.veths().is_empty());
    assert!(ours.reservations().is_empty() && theirs.reservations().is_empty());
    assert!(ours.nft_rules().is_empty(), "{:?}", ours.nft_rules());
    assert!(theirs.ipt_rules().is_empty(), "{:?}", theirs.ipt_rules());
    // And DEL again, with both.
    ours.del(&c_ours, "cdiff", &p_ours);
    theirs.del(&c_theirs, "cdiff", &p_theirs);
}

/// isGateway + ipMasq, dual-stack ranges with routes and a netconf `dns`: the same as
/// the reference.
#[test]
fn same_as_reference_gateway_masq_dual_stack() {
    if !root() {
        return;
    }
    let Some(reference) = reference_plugin("bridge") else {
        return;
    };
    let mut ipam = dual(234);
    ipam["routes"] = json!([{"dst": "192.168.234.0/24"}, {"dst": "fd00:234:1::/64"}]);
    differential(
        reference,
        234,
        json!({"isGateway": true, "ipMasq": true, "dns": {"nameservers": ["10.96.0.10"]}}),
        ipam,
    );
}

/// isDefaultGateway with an MTU and IPAM routes (one with its own next hop): the same as
/// the reference.
#[test]
fn same_as_reference_default_gateway_mtu() {
    if !root() {
        return;
    }
    let Some(reference) = reference_plugin("bridge") else {
        return;
    };
    let mut ipam = dual(235);
    ipam["routes"] = json!([{"dst": "172.30.235.0/24", "gw": "10.235.0.254"}]);
    differential(
        reference,
        235,
        json!({"isDefaultGateway": true, "mtu": 1400}),
        ipam,
    );
}

// ---------------------------------------------------------------------------------------
// Concurrency
// ---------------------------------------------------------------------------------------

/// 20 dual-stack ADDs racing on one (not yet existing) bridge get 20 distinct
/// addresses, and every pod reaches the first; 20 racing DELs then leave no veth,
/// reservation or masq rule. Forty rules take the kernel several reads to list, and
/// the racing DELs change the list between them: a DEL that trusted such a listing
/// missed its own rules.
#[test]
fn parallel_adds_and_dels_on_one_bridge() {
    if !root() {
        return;
    }
    const N: usize = 20;
    let node = Node::ours();
    let pods: Vec<Netns> = (0..N).map(|_| Netns::new("bp")).collect();
    let c = node.conf(
        "1.0.0",
        json!({"isGateway": true, "ipMasq": true}),
        json!({"ranges": [[{"subnet": "10.236.0.0/24"}], [{"subnet": "fd00:236::/64"}]]}),
    );
    let ips: Vec<String> = std::thread::scope(|s| {
        let hs: Vec<_> = pods
            .iter()
            .enumerate()
            .map(|(i, pod)| {
                let (node, c) = (&node, &c);
                s.spawn(move || result_ips(&node.add(c, &format!("par{i}"), pod))[0].clone())
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let distinct: BTreeSet<&String> = ips.iter().collect();
    assert_eq!(distinct.len(), N, "duplicate addresses: {ips:?}");
    assert_eq!(node.reservations().len(), 2 * N);
    assert_eq!(node.veths().len(), N);
    assert_eq!(node.nft_rules().len(), 2 * N);
    std::thread::scope(|s| {
        for pod in &pods[1..] {
            let first = &ips[0];
            s.spawn(move || ping(pod, first));
        }
    });
    std::thread::scope(|s| {
        for (i, pod) in pods.iter().enumerate() {
            let (node, c) = (&node, &c);
            s.spawn(move || node.del(c, &format!("par{i}"), pod));
        }
    });
    assert!(node.veths().is_empty(), "{:?}", node.veths());
    assert!(node.reservations().is_empty(), "{:?}", node.reservations());
    assert!(node.nft_rules().is_empty(), "{:?}", node.nft_rules());
    for pod in &pods {
        assert!(!has_link(pod, "eth0"));
    }
}

/// A node that ran the reference plugin (iptables masquerade) switches to ours: our DEL
/// finds the reference's chain and comment and removes them, and releases the
/// reference's reservation.
#[test]
fn our_del_removes_what_the_reference_add_made() {
    if !root() {
        return;
    }
    let Some(reference) = reference_plugin("bridge") else {
        return;
    };
    let node = Node::with(
        reference.clone(),
        reference.parent().unwrap().to_path_buf(),
        unique("br"),
    );
    let pod = Netns::new("bp");
    let c = node.conf(
        "1.0.0",
        json!({"isGateway": true, "ipMasq": true}),
        dual(221),
    );
    node.add(&c, "switch1", &pod);
    assert!(
        node.ipt_rules().iter().any(|r| r.contains("-j CNI-")),
        "reference made no masquerade rule"
    );
    assert_eq!(node.reservations().len(), 2);

    let mut ours = c.clone();
    ours["ipMasqBackend"] = json!("iptables");
    let me = Node {
        plugin: bin("bridge"),
        cni_path: bin_dir(),
        ..node
    };
    me.del(&ours, "switch1", &pod);
    let left: Vec<String> = me
        .ipt_rules()
        .into_iter()
        .filter(|r| r.contains("CNI-"))
        .collect();
    assert!(
        left.is_empty(),
        "reference rules left after our DEL: {left:?}"
    );
    assert!(me.reservations().is_empty(), "{:?}", me.reservations());
    assert!(me.veths().is_empty(), "{:?}", me.veths());
}

/// macspoofchk: frames from the pod's veth with a source MAC other than the pod's are
/// dropped at the bridge (the pod can no longer reach its neighbour after changing its
/// MAC, and can again once it changes back); CHECK sees the rule; DEL removes it and
/// leaves the other pod's. With ipMasq on as well, the pod's rules live in two tables
/// of one name (inet and bridge), and CHECK and DEL find both.
#[test]
fn macspoofchk_drops_foreign_source_macs() {
    if !root() {
        return;
    }
    let node = Node::ours();
    let (a, b) = (Netns::new("bp"), Netns::new("bp"));
    let c = node.conf(
        "1.0.0",
        json!({"isGateway": true, "ipMasq": true, "macspoofchk": true}),
        dual(222),
    );
    let ra = node.add(&c, "spoof-a", &a);
    let rb = node.add(&c, "spoof-b", &b);
    let ip_b = result_ips(&rb)[0].clone();
    let mac_a = ra["interfaces"][2]["mac"].as_str().unwrap().to_string();
    let veth_a = ra["interfaces"][1]["name"].as_str().unwrap().to_string();
    let rules = node
        .ns
        .sh(&["nft", "list", "chain", "bridge", "crust_cni", "macspoof"]);
    let mine: Vec<&str> = rules
        .lines()
        .filter(|l| l.contains("id: spoof-a"))
        .collect();
    assert_eq!(mine.len(), 1, "{rules}");
    assert!(
        mine[0].contains(&veth_a) && mine[0].contains(&mac_a),
        "{rules}"
    );
    ping(&a, &ip_b);

    let mut check = c.clone();
    check["prevResult"] = ra.clone();
    node.call("CHECK", &check, "spoof-a", &a).ok();

    a.sh(&["ip", "link", "set", "eth0", "address", "02:00:00:00:00:99"]);
    a.sh(&["ip", "neigh", "flush", "all"]);
    b.sh(&["ip", "neigh", "flush", "all"]);
    assert!(
        !ping_once(&a, &ip_b),
        "a spoofed source MAC got through the bridge"
    );
    a.sh(&["ip", "link", "set", "eth0", "address", &mac_a]);
    ping(&a, &ip_b);

    node.del(&c, "spoof-a", &a);
    let rules = node
        .ns
        .sh(&["nft", "list", "chain", "bridge", "crust_cni", "macspoof"]);
    assert!(!rules.contains("id: spoof-a"), "{rules}");
    assert!(rules.contains("id: spoof-b"), "{rules}");
    let masq = node.ns.sh(&["nft", "list", "table", "inet", "crust_cni"]);
    assert!(!masq.contains("id: spoof-a"), "{masq}");
    assert!(masq.contains("id: spoof-b"), "{masq}");
    node.del(&c, "spoof-b", &b);
    let all = node.ns.sh(&["nft", "list", "ruleset"]);
    assert!(!all.contains("id: spoof"), "{all}");
}
