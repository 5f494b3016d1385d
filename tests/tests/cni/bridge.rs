//! End-to-end tests of the `bridge` CNI plugin binary (with our `host-local` as IPAM).
//!
//! Every test makes its own "node" network namespace, where the plugin runs (through
//! `ip netns exec`) and where the bridge, the host ends of the veths and the masquerade
//! rules live, plus one "pod" namespace per attachment (`CNI_NETNS=/run/netns/<pod>`),
//! a temp `dataDir` for host-local and a unique bridge name. Guards delete all of them,
//! also when a test panics; nothing touches the host's own namespace, and traffic only
//! flows between namespaces the test made. Each test has its own subnets (10.2xx.0.0/24,
//! fd00:2xx::/64).
//!
//! The last groups run Debian's reference `bridge` + `host-local` (containernetworking-
//! plugins 1.1.1) on the same configuration in a second node namespace and demand the same
//! result, pod addresses and routes, bridge and reservation files.
//!
//! Known, intentional differences from the reference, not compared: ipMasq uses nftables
//! (`table inet crust_cni`) when `nft` exists (the reference: iptables only), the bridge's
//! MAC is pinned when it is created, DEL with a namespace path that no longer exists
//! succeeds, and ADD sets the node's neighbour entry for the pod's addresses to the pod's
//! MAC (the reference 1.1.1 relies on its gratuitous ARP, which the bridge drops while
//! the new port is not yet forwarding).
//!
//! Submodules by topic, in bridge/: `masq_del_check`, `refused`, `reference`; ADD here.

#[path = "bridge/masq_del_check.rs"]
mod masq_del_check;
#[path = "bridge/reference.rs"]
mod reference;
#[path = "bridge/refused.rs"]
mod refused;

use crust_e2e::{
    attachment_env, bin, bin_dir, ip_files, require_root, run, unique, Cni, CniOut, Netns, TempDir,
};
use serde_json::{json, Value};
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

include!("node_helpers.rs");

/// A refused ADD of `id` in `pod` with this raw configuration and ifname: the plugin
/// fails with `code` (if given) and leaves every namespace, the dataDir and the masq
/// rules as they were (but for what `allow` permits).
fn refused(
    node: &Node,
    pod: &Netns,
    (conf, netns, ifname): (&str, &str, &str),
    code: Option<u64>,
    allow: Allow,
) {
    let before = state(node, pod);
    let out = node.call_raw("ADD", conf, "cbad", netns, ifname);
    match code {
        Some(c) => {
            out.err(c);
        }
        None => {
            assert_ne!(out.code, 0, "ADD should have failed: {}", out.stdout);
            assert!(out.json["code"].as_u64().is_some(), "{}", out.stdout);
        }
    }
    assert_left_nothing(node, &before, state(node, pod), allow);
}

// ---------------------------------------------------------------------------------------
// ADD
// ---------------------------------------------------------------------------------------

/// The ADD result in every result version: interfaces [bridge, host veth, container
/// ifname with `sandbox`], the IPs on interface 2 with the gateway (and `version` in
/// 0.x), IPAM's routes, and the netconf's `dns` (IPAM's resolvConf DNS is not passed on;
/// without netconf `dns` it is `{}`); the MACs are those the links really have; the pod's
/// eth0 is UP with the addresses, the host veth is UP on the bridge, and the bridge
/// carries both gateway addresses (isGateway).
#[test]
fn add_result_matches_the_links_in_every_version() {
    if !root() {
        return;
    }
    for (i, v) in ["1.1.0", "1.0.0", "0.4.0", "0.3.1"].iter().enumerate() {
        let node = Node::ours();
        let pod = Netns::new("bp");
        let resolv = node.data.path().join("resolv.conf");
        std::fs::write(&resolv, "nameserver 10.99.9.9\nsearch ipam.example\n").unwrap();
        let mut ipam = dual(210);
        ipam["routes"] = json!([{"dst": "192.168.210.0/24"}]);
        ipam["resolvConf"] = json!(resolv);
        let netconf_dns = json!({"nameservers": ["10.96.0.10"], "search": ["svc.example"]});
        let mut settings = json!({"isGateway": true});
        if i % 2 == 0 {
            settings["dns"] = netconf_dns.clone();
        }
        let c = node.conf(v, settings, ipam);
        let r = node.add(&c, "c1", &pod);

        let veth = node.the_veth();
        let (br, host, eth0) = (
            link(&node.ns, &node.bridge),
            link(&node.ns, &veth),
            link(&pod, "eth0"),
        );
        let legacy = v.starts_with("0.");
        let ip = |addr: &str, gw: &str, fam: &str| {
            let mut o = json!({"interface": 2, "address": addr, "gateway": gw});
            if legacy {
                o["version"] = json!(fam);
            }
            o
        };
        let want = json!({
            "cniVersion": v,
            "interfaces": [
                {"name": node.bridge, "mac": br["address"]},
                {"name": veth, "mac": host["address"]},
                {"name": "eth0", "mac": eth0["address"], "sandbox": netns_path(&pod)},
            ],
            "ips": [
                ip("10.210.0.2/24", "10.210.0.1", "4"),
                ip("fd00:210::2/64", "fd00:210::1", "6"),
            ],
            "routes": [{"dst": "192.168.210.0/24"}],
            "dns": if i % 2 == 0 { netconf_dns } else { json!({}) },
        });
        assert_eq!(r, want, "v{v}");

        assert!(is_up(&eth0), "v{v}: eth0 not up: {eth0}");
        assert_eq!(
            addrs(&pod, "eth0"),
            ["10.210.0.2/24", "fd00:210::2/64"],
            "v{v}"
        );
        assert_eq!(host["master"], json!(node.bridge), "v{v}: {host}");
        assert!(is_up(&host), "v{v}: host veth not up: {host}");
        assert_eq!(host["linkinfo"]["info_kind"], "veth");
        assert_eq!(br["linkinfo"]["info_kind"], "bridge", "v{v}: {br}");
        assert!(is_up(&br), "v{v}: bridge not up: {br}");
        assert_eq!(
            addrs(&node.ns, &node.bridge),
            ["10.210.0.1/24", "fd00:210::1/64"],
            "v{v}"
        );
        // The two ends are one veth pair.
        assert_eq!(eth0["link_index"], host["ifindex"], "v{v}");
        // The IPAM routes go through the gateway.
        let rt = route(&pod, false, "192.168.210.0/24").expect("IPAM route missing");
        assert_eq!(rt["gateway"], "10.210.0.1");
    }
}

/// Two pods on one bridge reach each other over IPv4 and IPv6, and each reaches its
/// gateway (the bridge's addresses, isGateway) in both families.
#[test]
fn pods_ping_each_other_and_the_gateway_dual_stack() {
    if !root() {
        return;
    }
    let node = Node::ours();
    let (a, b) = (Netns::new("bp"), Netns::new("bp"));
    let c = node.conf("1.0.0", json!({"isGateway": true}), dual(211));
    assert_eq!(
        result_ips(&node.add(&c, "c1", &a)),
        ["10.211.0.2", "fd00:211::2"]
    );
    assert_eq!(
        result_ips(&node.add(&c, "c2", &b)),
        ["10.211.0.3", "fd00:211::3"]
    );
    ping(&a, "10.211.0.3");
    ping(&a, "fd00:211::3");
    ping(&b, "10.211.0.2");
    ping(&b, "fd00:211::2");
    for p in [&a, &b] {
        ping(p, "10.211.0.1");
        ping(p, "fd00:211::1");
    }
}

/// isDefaultGateway: the pod gets default routes via the gateways of both families, the
/// result lists them after IPAM's routes, and IPAM's routes are installed with the
/// gateway as next hop unless they name their own.
#[test]
fn default_gateway_and_ipam_routes_in_the_pod() {
    if !root() {
        return;
    }
    let node = Node::ours();
    let pod = Netns::new("bp");
    let mut ipam = dual(212);
    let ipam_routes = json!([
        {"dst": "192.168.212.0/24"},
        {"dst": "172.30.212.0/24", "gw": "10.212.0.254"},
        {"dst": "fd00:212:1::/64"},
    ]);
    ipam["routes"] = ipam_routes.clone();
    let c = node.conf("1.0.0", json!({"isDefaultGateway": true}), ipam);
    let r = node.add(&c, "c1", &pod);
    let mut want = ipam_routes.as_array().unwrap().clone();
    want.push(json!({"dst": "0.0.0.0/0", "gw": "10.212.0.1"}));
    want.push(json!({"dst": "::/0", "gw": "fd00:212::1"}));
    assert_eq!(r["routes"], json!(want));
    // isDefaultGateway implies isGateway.
    assert_eq!(
        addrs(&node.ns, &node.bridge),
        ["10.212.0.1/24", "fd00:212::1/64"]
    );

    let via = |v6: bool, dst: &str| {
        let r = route(&pod, v6, dst)
            .unwrap_or_else(|| panic!("no route to {dst} in the pod: {:?}", routes(&pod, v6)));
        assert_eq!(r["dev"], "eth0", "{r}");
        r["gateway"].as_str().unwrap_or("").to_string()
    };
    assert_eq!(via(false, "default"), "10.212.0.1");
    assert_eq!(via(false, "192.168.212.0/24"), "10.212.0.1");
    assert_eq!(via(false, "172.30.212.0/24"), "10.212.0.254");
    assert_eq!(via(true, "default"), "fd00:212::1");
    assert_eq!(via(true, "fd00:212:1::/64"), "fd00:212::1");
}

/// isGateway turns on IPv4 and IPv6 forwarding in the node namespace; without it the
/// sysctls are left alone.
#[test]
fn gateway_turns_on_forwarding_in_the_node() {
    if !root() {
        return;
    }
    let node = Node::ours();
    let (a, b) = (Netns::new("bp"), Netns::new("bp"));
    let (v4, v6) = ("net/ipv4/ip_forward", "net/ipv6/conf/all/forwarding");
    node.set_sysctl(v4, "0");
    node.set_sysctl(v6, "0");
    node.add(&node.conf("1.0.0", json!({}), dual(213)), "c1", &a);
    assert_eq!((node.sysctl(v4), node.sysctl(v6)), ("0".into(), "0".into()));
    node.add(
        &node.conf("1.0.0", json!({"isGateway": true}), dual(213)),
        "c2",
        &b,
    );
    assert_eq!((node.sysctl(v4), node.sysctl(v6)), ("1".into(), "1".into()));
}

/// `mtu` is set on the bridge it creates and on both ends of the veth.
#[test]
fn mtu_on_bridge_and_both_veth_ends() {
    if !root() {
        return;
    }
    let node = Node::ours();
    let pod = Netns::new("bp");
    node.add(
        &node.conf("1.0.0", json!({"mtu": 1400}), dual(214)),
        "c1",
        &pod,
    );
    assert_eq!(link(&node.ns, &node.bridge)["mtu"], 1400);
    assert_eq!(link(&node.ns, &node.the_veth())["mtu"], 1400);
    assert_eq!(link(&pod, "eth0")["mtu"], 1400);
}

/// hairpinMode turns hairpin on for the pod's bridge port (and only with it set).
#[test]
fn hairpin_mode_on_the_port() {
    if !root() {
        return;
    }
    let node = Node::ours();
    let (a, b) = (Netns::new("bp"), Netns::new("bp"));
    let plain = node.conf("1.0.0", json!({}), dual(215));
    node.add(&plain, "c1", &a);
    let first = node.the_veth();
    node.add(
        &node.conf("1.0.0", json!({"hairpinMode": true}), dual(215)),
        "c2",
        &b,
    );
    let hairpin = |veth: &str| {
        let l = link(&node.ns, veth);
        assert_eq!(l["linkinfo"]["info_slave_kind"], "bridge", "{l}");
        l["linkinfo"]["info_slave_data"]["hairpin"].clone()
    };
    let second = node
        .veths()
        .into_iter()
        .find(|v| *v != first)
        .expect("second veth");
    assert_eq!(hairpin(&first), false);
    assert_eq!(hairpin(&second), true);
    // `bridge link` agrees.
    let bl: Value =
        serde_json::from_str(&node.ns.sh(&["bridge", "-d", "-j", "link", "show"])).unwrap();
    let port = bl
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["ifname"] == second)
        .unwrap_or_else(|| panic!("{second} not in bridge link: {bl}"));
    assert_eq!(port["hairpin"], true, "{port}");
}

/// A pod that gets an address a gone pod had (host-local's range wrapped) is reachable
/// from the node at once: the plugin sets the node's neighbour entry, still holding the
/// old pod's MAC, to the new one before ADD answers; without it the node sends to the old
/// MAC for seconds (the kubelet's probes of such a pod time out). The reference plugin
/// means to do the same with a gratuitous ARP, but Debian's 1.1.1 sends it before the
/// host end's port forwards, and the bridge drops it (here it leaves the old MAC in
/// place): ours only.
#[test]
fn reused_address_is_announced_to_the_node() {
    if !root() {
        return;
    }
    {
        let node = Node::ours();
        // One address only, as a wrapped range hands the same one out again.
        let ipam = json!({"ranges": [[{
            "subnet": "10.238.0.0/24", "rangeStart": "10.238.0.7", "rangeEnd": "10.238.0.7",
        }]]});
        let c = node.conf("1.0.0", json!({"isGateway": true}), ipam);
        // A pod that stays: the bridge keeps its carrier (with no port left the kernel
        // would flush its neighbours, the stale entry with them).
        let keeper_ipam = json!({"ranges": [[{
            "subnet": "10.238.0.0/24", "rangeStart": "10.238.0.8", "rangeEnd": "10.238.0.8",
        }]]});
        let keeper = Netns::new("bp");
        node.add(
            &node.conf("1.0.0", json!({"isGateway": true}), keeper_ipam),
            "keep",
            &keeper,
        );
        let (a, b) = (Netns::new("bp"), Netns::new("bp"));
        node.add(&c, "c1", &a);
        ping(&node.ns, "10.238.0.7");
        let mac_of = |pod: &Netns| link(pod, "eth0")["address"].as_str().unwrap().to_string();
        let old = mac_of(&a);
        let neigh = || {
            node.ns.sh(&[
                "ip",
                "-j",
                "neigh",
                "show",
                "10.238.0.7",
                "dev",
                &node.bridge,
            ])
        };
        assert!(
            neigh().contains(&old),
            "{}: {}",
            node.plugin.display(),
            neigh()
        );
        node.del(&c, "c1", &a);
        node.add(&c, "c2", &b);
        let new = mac_of(&b);
        assert_ne!(old, new);
        // What the node holds for the address right after ADD: the new MAC, not the
        // old one (which the kernel would still use for 5 s and more).
        let held: Value = serde_json::from_str(&neigh()).unwrap();
        assert_eq!(
            held[0]["lladdr"],
            new.as_str(),
            "{}: the node still sends 10.238.0.7 to {old}: {held}",
            node.plugin.display()
        );
        assert!(
            ping_once(&node.ns, "10.238.0.7"),
            "{}",
            node.plugin.display()
        );
    }
}

/// portIsolation: pods on isolated ports reach the gateway and a pod on a plain port,
/// but not each other; the port says `isolated` (and only with it set).
#[test]
fn port_isolation_keeps_pods_apart() {
    if !root() {
        return;
    }
    let node = Node::ours();
    let (a, b, c) = (Netns::new("bp"), Netns::new("bp"), Netns::new("bp"));
    let isolated = node.conf(
        "1.0.0",
        json!({"isGateway": true, "portIsolation": true}),
        dual(226),
    );
    let plain = node.conf("1.0.0", json!({"isGateway": true}), dual(226));
    let ip_a = result_ips(&node.add(&isolated, "iso-a", &a))[0].clone();
    let ip_b = result_ips(&node.add(&isolated, "iso-b", &b))[0].clone();
    let ip_c = result_ips(&node.add(&plain, "plain-c", &c))[0].clone();
    for pod in [&a, &b] {
        ping(pod, "10.226.0.1");
        ping(pod, &ip_c);
    }
    ping(&c, &ip_a);
    assert!(!ping_once(&a, &ip_b), "isolated ports reached each other");
    assert!(!ping_once(&b, &ip_a), "isolated ports reached each other");
    let isolated_ports: Vec<String> = node
        .veths()
        .into_iter()
        .filter(|v| link(&node.ns, v)["linkinfo"]["info_slave_data"]["isolated"] == true)
        .collect();
    assert_eq!(isolated_ports.len(), 2, "{:?}", node.veths());
}

/// disableContainerInterface: without IPAM the pod's interface is made and left down;
/// with IPAM the ADD is refused, as the reference plugin does, and leaves nothing.
#[test]
fn disable_container_interface_leaves_the_pod_end_down() {
    if !root() {
        return;
    }
    let node = Node::ours();
    let pod = Netns::new("bp");
    let mut c = node.conf(
        "1.0.0",
        json!({"disableContainerInterface": true}),
        json!({}),
    );
    c.as_object_mut().unwrap().remove("ipam");
    let r = node.add(&c, "down", &pod);
    assert!(r["ips"].as_array().is_none_or(|a| a.is_empty()), "{r}");
    let l = link(&pod, "eth0");
    assert!(!is_up(&l), "{l}");
    node.del(&c, "down", &pod);
    assert!(!has_link(&pod, "eth0"));

    let other = Netns::new("bp");
    let with_ipam = node.conf(
        "1.0.0",
        json!({"disableContainerInterface": true}),
        dual(227),
    );
    let conf = with_ipam.to_string();
    refused(
        &node,
        &other,
        (&conf, &netns_path(&other), "eth0"),
        Some(999),
        Allow::default(),
    );
}

/// promiscMode puts the bridge into promiscuous mode (and only with it set).
#[test]
fn promisc_mode_on_the_bridge() {
    if !root() {
        return;
    }
    let node = Node::ours();
    let (a, b) = (Netns::new("bp"), Netns::new("bp"));
    node.add(&node.conf("1.0.0", json!({}), dual(216)), "c1", &a);
    assert_eq!(link(&node.ns, &node.bridge)["promiscuity"], 0);
    node.add(
        &node.conf("1.0.0", json!({"promiscMode": true}), dual(216)),
        "c2",
        &b,
    );
    let p = link(&node.ns, &node.bridge)["promiscuity"]
        .as_u64()
        .unwrap();
    assert!(p >= 1, "bridge promiscuity {p}");
}

/// On a kernel without bridge VLAN filtering, checks that an ADD of the VLAN config
/// `c` fails cleanly, and says so (true); false when the kernel has it.
fn refused_without_vlan_filtering(node: &Node, pod: &Netns, c: &Value) -> bool {
    if kernel_has_vlan_filtering(node) {
        return false;
    }
    eprintln!("note: this kernel lacks bridge VLAN filtering; checking only that a VLAN ADD fails cleanly");
    let allow = Allow {
        ipam_bookkeeping: true,
        ..Allow::default()
    };
    refused(
        node,
        pod,
        (&c.to_string(), &netns_path(pod), "eth0"),
        None,
        allow,
    );
    true
}

/// Whether the kernel has bridge VLAN filtering (CONFIG_BRIDGE_VLAN_FILTERING).
fn kernel_has_vlan_filtering(node: &Node) -> bool {
    let probe = unique("bv");
    let ok = node.ns.ok(&[
        "ip",
        "link",
        "add",
        &probe,
        "type",
        "bridge",
        "vlan_filtering",
        "1",
    ]);
    if ok {
        node.ns.sh(&["ip", "link", "del", &probe]);
    }
    ok
}

/// `vlan`: the bridge gets vlan_filtering 1 and the pod's port the VLAN as untagged
/// PVID, and two pods of that VLAN reach each other. On a kernel without bridge VLAN
/// filtering (like these VMs') the reference fails too: then the ADD must fail cleanly,
/// leaving nothing behind.
#[test]
fn vlan_on_the_port() {
    if !root() {
        return;
    }
    let node = Node::ours();
    let (a, b) = (Netns::new("bp"), Netns::new("bp"));
    let c = node.conf(
        "1.0.0",
        json!({"vlan": 100}),
        json!({"ranges": [[{"subnet": "10.217.0.0/24"}]]}),
    );
    if refused_without_vlan_filtering(&node, &a, &c) {
        return;
    }
    node.add(&c, "c1", &a);
    node.add(&c, "c2", &b);
    let br = link(&node.ns, &node.bridge);
    assert_eq!(br["linkinfo"]["info_data"]["vlan_filtering"], 1, "{br}");
    let vlans: Value =
        serde_json::from_str(&node.ns.sh(&["bridge", "-j", "vlan", "show"])).unwrap();
    for veth in node.veths() {
        let port = vlans
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["ifname"] == veth)
            .unwrap_or_else(|| panic!("{veth} not in bridge vlan show: {vlans}"));
        let v100 = port["vlans"]
            .as_array()
            .unwrap()
            .iter()
            .find(|v| v["vlan"] == 100)
            .unwrap_or_else(|| panic!("{veth} lacks vlan 100: {port}"));
        let flags: BTreeSet<&str> = v100["flags"]
            .as_array()
            .unwrap()
            .iter()
            .map(|f| f.as_str().unwrap())
            .collect();
        assert_eq!(flags, BTreeSet::from(["PVID", "Egress Untagged"]), "{port}");
    }
    ping(&a, "10.217.0.3");
}

/// vlanTrunk: the pod's port carries the listed VLANs tagged (ids and ranges, merged),
/// and leaves VLAN 1 with preserveDefaultVlan false; a trunk together with `vlan`, a
/// range backwards and an id out of range are refused and leave nothing.
#[test]
fn vlan_trunk_on_the_port() {
    if !root() {
        return;
    }
    let node = Node::ours();
    let pod = Netns::new("bp");
    for (bad, what) in [
        (
            json!({"vlan": 100, "vlanTrunk": [{"id": 101}]}),
            "vlan and vlanTrunk",
        ),
        (
            json!({"vlanTrunk": [{"minID": 300, "maxID": 200}]}),
            "a backwards range",
        ),
        (json!({"vlanTrunk": [{"id": 5000}]}), "an id out of range"),
        (json!({"vlanTrunk": [{"minID": 300}]}), "minID alone"),
    ] {
        let c = node.conf(
            "1.0.0",
            bad,
            json!({"ranges": [[{"subnet": "10.228.0.0/24"}]]}),
        );
        eprintln!("refusing {what}");
        refused(
            &node,
            &pod,
            (&c.to_string(), &netns_path(&pod), "eth0"),
            Some(999),
            Allow::default(),
        );
    }
    let c = node.conf(
        "1.0.0",
        json!({
            "vlanTrunk": [{"id": 101}, {"minID": 200, "maxID": 203}, {"id": 202}],
            "preserveDefaultVlan": false
        }),
        json!({"ranges": [[{"subnet": "10.228.0.0/24"}]]}),
    );
    if refused_without_vlan_filtering(&node, &pod, &c) {
        return;
    }
    node.add(&c, "trunk", &pod);
    let br = link(&node.ns, &node.bridge);
    assert_eq!(br["linkinfo"]["info_data"]["vlan_filtering"], 1, "{br}");
    let veth = node.the_veth();
    let vlans: Value =
        serde_json::from_str(&node.ns.sh(&["bridge", "-j", "vlan", "show"])).unwrap();
    let port = vlans
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["ifname"] == veth)
        .unwrap_or_else(|| panic!("{veth} not in bridge vlan show: {vlans}"));
    let mut ids = BTreeSet::new();
    for v in port["vlans"].as_array().unwrap() {
        let first = v["vlan"].as_u64().unwrap();
        let last = v["vlanEnd"].as_u64().unwrap_or(first);
        ids.extend(first..=last);
        assert!(
            v["flags"].as_array().is_none_or(|f| f.is_empty()),
            "tagged only: {port}"
        );
    }
    assert_eq!(ids, BTreeSet::from([101, 200, 201, 202, 203]), "{port}");
    node.del(&c, "trunk", &pod);
    assert!(node.veths().is_empty());
}

/// forceAddress: a bridge that already has another address of the gateway's subnet
/// makes the ADD fail (leaving no veth, reservation or masq rule behind) unless
/// forceAddress is set, which replaces that address with the gateway's.
#[test]
fn force_address_replaces_a_foreign_bridge_address() {
    if !root() {
        return;
    }
    let node = Node::ours();
    let pod = Netns::new("bp");
    let br = node.bridge.clone();
    node.ns.sh(&["ip", "link", "add", &br, "type", "bridge"]);
    node.ns
        .sh(&["ip", "addr", "add", "10.218.0.99/24", "dev", &br]);
    node.ns.sh(&["ip", "link", "set", &br, "up"]);
    let ipam = json!({"ranges": [[{"subnet": "10.218.0.0/24"}]]});
    let c = node.conf(
        "1.0.0",
        json!({"isGateway": true, "ipMasq": true}),
        ipam.clone(),
    );

    let before = state(&node, &pod);
    let out = node.call("ADD", &c, "c1", &pod);
    assert_ne!(
        out.code, 0,
        "ADD without forceAddress succeeded: {}",
        out.stdout
    );
    assert!(out.json["code"].as_u64().is_some(), "{}", out.stdout);
    let after = state(&node, &pod);
    assert_eq!(after.node_links, before.node_links);
    assert_eq!(after.pod_links, before.pod_links);
    assert!(after.reservations.is_empty(), "{:?}", after.reservations);
    assert!(after.nft.is_empty(), "{:?}", after.nft);
    assert_eq!(addrs(&node.ns, &br), ["10.218.0.99/24"]);

    let c = node.conf(
        "1.0.0",
        json!({"isGateway": true, "ipMasq": true, "forceAddress": true}),
        ipam,
    );
    let r = node.add(&c, "c1", &pod);
    assert_eq!(addrs(&node.ns, &br), ["10.218.0.1/24"]);
    assert_eq!(r["ips"][0]["gateway"], "10.218.0.1");
    ping(&pod, "10.218.0.1");
}
