//! Refused input: what the plugin refuses, with which code, leaving nothing behind; and
//! every configuration the reference refuses, refused by ours the same way.

use super::*;
use crust_e2e::reference_plugin;

// ---------------------------------------------------------------------------------------
// Refused input
// ---------------------------------------------------------------------------------------

/// A masquerading gateway config (so a refused ADD could leave each kind of state).
fn full_conf(node: &Node, n: u32) -> Value {
    node.conf("1.0.0", json!({"isGateway": true, "ipMasq": true}), dual(n))
}

/// Malformed JSON is code 6, and nothing is created.
#[test]
fn refuses_malformed_json() {
    if !root() {
        return;
    }
    let node = Node::ours();
    let pod = Netns::new("bp");
    let mut s = full_conf(&node, 226).to_string();
    s.truncate(s.len() - 3);
    refused(
        &node,
        &pod,
        (&s, &netns_path(&pod), "eth0"),
        Some(6),
        Allow::default(),
    );
}

/// An unknown cniVersion is code 1, and nothing is created.
#[test]
fn refuses_unknown_version() {
    if !root() {
        return;
    }
    let node = Node::ours();
    let pod = Netns::new("bp");
    let mut c = full_conf(&node, 227);
    c["cniVersion"] = json!("9.9.9");
    refused(
        &node,
        &pod,
        (&c.to_string(), &netns_path(&pod), "eth0"),
        Some(1),
        Allow::default(),
    );
}

/// A CNI_NETNS that does not exist is code 3, and nothing is created.
#[test]
fn refuses_missing_netns() {
    if !root() {
        return;
    }
    let node = Node::ours();
    let pod = Netns::new("bp");
    let c = full_conf(&node, 228).to_string();
    let gone = format!("/run/netns/{}", unique("gone"));
    refused(&node, &pod, (&c, &gone, "eth0"), Some(3), Allow::default());
}

/// A CNI_IFNAME longer than 15 bytes is code 4, and nothing is created.
#[test]
fn refuses_long_ifname() {
    if !root() {
        return;
    }
    let node = Node::ours();
    let pod = Netns::new("bp");
    let c = full_conf(&node, 229).to_string();
    refused(
        &node,
        &pod,
        (&c, &netns_path(&pod), "eth0123456789abc"),
        Some(4),
        Allow::default(),
    );
}

/// A CNI_ARGS key bridge does not know is code 999 unless IgnoreUnknown passes it, as in
/// the reference; nothing is created. With IgnoreUnknown (as runtimes send the
/// `K8S_POD_*` keys) the same ADD works.
#[test]
fn refuses_unknown_cni_args_without_ignore_unknown() {
    if !root() {
        return;
    }
    let node = Node::ours();
    let pod = Netns::new("bp");
    let c = full_conf(&node, 231).to_string();
    let with_args = |cmd: &str, args: &str| {
        attachment_env(
            Cni::new(node.plugin.clone(), Some(&node.ns)),
            "cargs",
            &netns_path(&pod),
            "eth0",
            &node.cni_path,
        )
        .env("CNI_ARGS", args)
        .call(cmd, &c)
    };
    let before = state(&node, &pod);
    let e = with_args("ADD", "K8S_POD_NAME=p").err(999);
    assert!(e["msg"].as_str().unwrap().contains("K8S_POD_NAME"), "{e}");
    assert_left_nothing(&node, &before, state(&node, &pod), Allow::default());
    let r = with_args(
        "ADD",
        "IgnoreUnknown=1;K8S_POD_NAME=p;K8S_POD_NAMESPACE=default",
    )
    .ok();
    assert_eq!(r["interfaces"][2]["name"], "eth0", "{r}");
    with_args("DEL", "K8S_POD_NAME=p").ok();
    let after = state(&node, &pod);
    assert!(after.reservations.is_empty(), "{after:?}");
    assert_eq!(after.pod_links, ["lo"]);
}

/// An IPAM plugin not in CNI_PATH is code 999 (as the reference says); the veth made
/// meanwhile is gone again.
#[test]
fn refuses_missing_ipam_plugin() {
    if !root() {
        return;
    }
    let node = Node::ours();
    let pod = Netns::new("bp");
    let mut c = full_conf(&node, 230);
    c["ipam"]["type"] = json!("nope");
    let allow = Allow {
        bridge: true,
        ..Allow::default()
    };
    refused(
        &node,
        &pod,
        (&c.to_string(), &netns_path(&pod), "eth0"),
        Some(999),
        allow,
    );
}

/// An exhausted range fails with host-local's code 11; the veth created before IPAM
/// answered is removed, and the attachment that holds the address is untouched.
#[test]
fn refuses_when_the_range_is_exhausted() {
    if !root() {
        return;
    }
    let node = Node::ours();
    let (a, b) = (Netns::new("bp"), Netns::new("bp"));
    let c = node.conf(
        "1.0.0",
        json!({"isGateway": true, "ipMasq": true}),
        json!({"ranges": [[{"subnet": "10.231.0.0/24", "rangeStart": "10.231.0.10", "rangeEnd": "10.231.0.10"}]]}),
    );
    node.add(&c, "c1", &a);
    refused(
        &node,
        &b,
        (&c.to_string(), &netns_path(&b), "eth0"),
        Some(11),
        Allow::default(),
    );
    assert_eq!(node.reservations(), ["10.231.0.10"]);
    assert_eq!(node.veths().len(), 1);
    ping(&a, "10.231.0.1");
}

/// A `bridge` name taken by a link that is not a bridge (a veth here) is code 999 (as
/// the reference says), and
/// nothing is created (nor is that link touched).
#[test]
fn refuses_a_non_bridge_link_as_bridge() {
    if !root() {
        return;
    }
    let node = Node::ours();
    let pod = Netns::new("bp");
    let peer = unique("bq");
    node.ns.sh(&[
        "ip",
        "link",
        "add",
        &node.bridge,
        "type",
        "veth",
        "peer",
        "name",
        &peer,
    ]);
    let c = full_conf(&node, 232).to_string();
    let allow = Allow {
        ipam_bookkeeping: true,
        ..Allow::default()
    };
    refused(
        &node,
        &pod,
        (&c, &netns_path(&pod), "eth0"),
        Some(999),
        allow,
    );
    assert_eq!(
        link(&node.ns, &node.bridge)["linkinfo"]["info_kind"],
        "veth"
    );
}

/// A container ifname that already exists in the pod's namespace fails, and the
/// existing interface is left alone (not deleted by the rollback).
#[test]
fn refuses_an_existing_container_ifname() {
    if !root() {
        return;
    }
    let node = Node::ours();
    let pod = Netns::new("bp");
    pod.sh(&[
        "ip", "link", "add", "eth0", "type", "veth", "peer", "name", "eth0peer",
    ]);
    let mac = link(&pod, "eth0")["address"].clone();
    let c = full_conf(&node, 233).to_string();
    refused(
        &node,
        &pod,
        (&c, &netns_path(&pod), "eth0"),
        None,
        Allow::default(),
    );
    assert_eq!(link(&pod, "eth0")["address"], mac);
}

// ---------------------------------------------------------------------------------------
// Refused as the reference refuses
// ---------------------------------------------------------------------------------------

/// Every configuration the reference bridge (1.1.1) refuses in its config loading and
/// validation (skel's checks, `loadNetConf`, the start of `cmdAdd` and `cmdCheck`), one
/// row each, run by both plugins in their own node namespace: both refuse it with the
/// same CNI error code, our message names what is wrong, and ours leaves nothing behind
/// (no veth, no pod interface, no reservation, no rule; the bridge is allowed). The
/// reference reports everything past skel's own checks as 999 (a plain Go error).
/// Settings newer than 1.1.1 that ours reads (`vlanTrunk`, `disableContainerInterface`)
/// are refused as the newer reference's source does, also 999; 1.1.1 ignores them, so
/// those rows run ours only.
#[test]
fn refuses_what_the_reference_refuses() {
    if !root() {
        return;
    }
    let Some(reference) = reference_plugin("bridge") else {
        return;
    };
    let nodes = [
        Node::with(reference, PathBuf::from("/usr/lib/cni"), unique("br")),
        Node::ours(),
    ];
    let pods = [Netns::new("bp"), Netns::new("bp")];
    // The config of node `i` with `f` applied to it.
    let conf = |i: usize, f: &dyn Fn(&mut Value)| {
        let mut c = nodes[i].conf("1.0.0", json!({"isGateway": true}), dual(230));
        f(&mut c);
        c.to_string()
    };
    type Edit = Box<dyn Fn(&mut Value)>;
    let set = |k: &'static str, v: Value| -> Edit { Box::new(move |c| c[k] = v.clone()) };
    let ipam = |k: &'static str, v: Value| -> Edit { Box::new(move |c| c["ipam"][k] = v.clone()) };
    // (what, edit, CNI_ARGS, verb, code, msg word, the reference 1.1.1 refuses it too)
    let rows: Vec<(&str, Edit, &str, &str, u64, &str, bool)> = vec![
        (
            "no name",
            Box::new(|c| {
                c.as_object_mut().unwrap().remove("name");
            }),
            "",
            "ADD",
            7,
            "name",
            true,
        ),
        (
            "name with a space",
            set("name", json!("my net")),
            "",
            "ADD",
            7,
            "name",
            true,
        ),
        (
            "name not a string",
            set("name", json!(5)),
            "",
            "ADD",
            6,
            "name",
            true,
        ),
        (
            "unknown cniVersion",
            set("cniVersion", json!("9.9.9")),
            "",
            "ADD",
            1,
            "9.9.9",
            true,
        ),
        (
            "cniVersion not a string",
            set("cniVersion", json!(1)),
            "",
            "ADD",
            6,
            "cniVersion",
            true,
        ),
        (
            "bridge not a string",
            set("bridge", json!(5)),
            "",
            "ADD",
            999,
            "bridge",
            true,
        ),
        (
            "bridge name too long",
            set("bridge", json!("br-much-too-long0")),
            "",
            "ADD",
            999,
            "br-much-too-long0",
            true,
        ),
        (
            "mtu not a number",
            set("mtu", json!("1500")),
            "",
            "ADD",
            999,
            "mtu",
            true,
        ),
        (
            "mtu too large",
            set("mtu", json!(70000)),
            "",
            "ADD",
            999,
            "mtu",
            true,
        ),
        (
            "vlan negative",
            set("vlan", json!(-1)),
            "",
            "ADD",
            999,
            "vlan",
            true,
        ),
        (
            "vlan 4095",
            set("vlan", json!(4095)),
            "",
            "ADD",
            999,
            "VLAN",
            true,
        ),
        (
            "vlan not a number",
            set("vlan", json!("10")),
            "",
            "ADD",
            999,
            "vlan",
            true,
        ),
        (
            "isGateway not a bool",
            set("isGateway", json!("yes")),
            "",
            "ADD",
            999,
            "isGateway",
            true,
        ),
        (
            "ipMasq not a bool",
            set("ipMasq", json!(1)),
            "",
            "ADD",
            999,
            "ipMasq",
            true,
        ),
        (
            "hairpin and promiscuous",
            Box::new(|c| {
                c["hairpinMode"] = json!(true);
                c["promiscMode"] = json!(true);
            }),
            "",
            "ADD",
            999,
            "promiscuous",
            true,
        ),
        (
            "ipam not an object",
            set("ipam", json!("host-local")),
            "",
            "ADD",
            999,
            "ipam",
            true,
        ),
        (
            "ipam plugin missing",
            ipam("type", json!("no-such-ipam")),
            "",
            "ADD",
            999,
            "no-such-ipam",
            true,
        ),
        (
            "dns not an object",
            set("dns", json!(["10.0.0.53"])),
            "",
            "ADD",
            999,
            "dns",
            true,
        ),
        (
            "args not an object",
            set("args", json!("x")),
            "",
            "ADD",
            999,
            "args",
            true,
        ),
        (
            "runtimeConfig not an object",
            set("runtimeConfig", json!(1)),
            "",
            "ADD",
            999,
            "runtimeConfig",
            true,
        ),
        (
            "prevResult not an object",
            set("prevResult", json!("x")),
            "",
            "ADD",
            999,
            "prevResult",
            true,
        ),
        (
            "runtimeConfig.mac garbage",
            set("runtimeConfig", json!({"mac": "zz"})),
            "",
            "ADD",
            999,
            "zz",
            true,
        ),
        (
            "args.cni.mac garbage",
            set("args", json!({"cni": {"mac": "zz"}})),
            "",
            "ADD",
            999,
            "zz",
            true,
        ),
        (
            "CNI_ARGS MAC garbage",
            Box::new(|_| {}),
            "MAC=zz",
            "ADD",
            999,
            "zz",
            true,
        ),
        (
            "CNI_ARGS unknown key",
            Box::new(|_| {}),
            "FOO=bar",
            "ADD",
            999,
            "FOO",
            true,
        ),
        (
            "CNI_ARGS not key=value",
            Box::new(|_| {}),
            "MAC",
            "ADD",
            999,
            "MAC",
            true,
        ),
        (
            "a host-local refusal passed on",
            ipam("ranges", json!([[{"subnet": "10.230.0.5/24"}]])),
            "",
            "ADD",
            999,
            "host bits",
            true,
        ),
        (
            "CHECK without prevResult",
            Box::new(|_| {}),
            "",
            "CHECK",
            999,
            "prevResult",
            true,
        ),
        (
            "CHECK prevResult of the wrong shape",
            set("prevResult", json!({"ips": "x"})),
            "",
            "CHECK",
            999,
            "prevResult",
            true,
        ),
        (
            "CHECK below 0.4.0",
            set("cniVersion", json!("0.3.1")),
            "",
            "CHECK",
            1,
            "CHECK",
            true,
        ),
        (
            "DEL with vlan 4095",
            set("vlan", json!(4095)),
            "",
            "DEL",
            999,
            "VLAN",
            true,
        ),
        (
            "vlanTrunk id 0",
            set("vlanTrunk", json!([{"id": 0}])),
            "",
            "ADD",
            999,
            "vlanTrunk",
            false,
        ),
        (
            "vlanTrunk minID over maxID",
            set("vlanTrunk", json!([{"minID": 20, "maxID": 10}])),
            "",
            "ADD",
            999,
            "vlanTrunk",
            false,
        ),
        (
            "vlanTrunk minID alone",
            set("vlanTrunk", json!([{"minID": 20}])),
            "",
            "ADD",
            999,
            "maxID",
            false,
        ),
        (
            "disableContainerInterface with ipam",
            set("disableContainerInterface", json!(true)),
            "",
            "ADD",
            999,
            "IPAM",
            false,
        ),
    ];
    let mut wrong = vec![];
    for (what, edit, args, verb, code, msg, both) in &rows {
        let mut outs = vec![];
        for i in if *both { 0..2 } else { 1..2 } {
            let (node, pod) = (&nodes[i], &pods[i]);
            let before = state(node, pod);
            let stdin = conf(i, edit.as_ref());
            let mut cni = attachment_env(
                Cni::new(node.plugin.clone(), Some(&node.ns)),
                "chostile",
                &netns_path(pod),
                "eth0",
                &node.cni_path,
            );
            if !args.is_empty() {
                cni = cni.env("CNI_ARGS", args);
            }
            outs.push(cni.call(verb, &stdin));
            let mut after = state(node, pod);
            after.node_links.retain(|l| *l != node.bridge);
            let mut b = before;
            b.node_links.retain(|l| *l != node.bridge);
            // host-local's lock and last_reserved_ip files may stay; no reservation.
            after.data = b.data.clone();
            if after != b && i == 1 {
                wrong.push(format!("{what}: ours left {after:?}"));
            }
        }
        let ours = outs.pop().unwrap();
        if let Some(theirs) = outs.pop() {
            if theirs.code == 0 || theirs.json["code"].as_u64() != Some(*code) {
                wrong.push(format!("{what}: the reference changed: {}", theirs.json));
                continue;
            }
        }
        if ours.code == 0 || ours.json["code"].as_u64() != Some(*code) {
            wrong.push(format!("{what}: ours {} (wanted {code})", ours.json));
            continue;
        }
        let m = ours.json["msg"].as_str().unwrap_or_default();
        if !m.to_lowercase().contains(&msg.to_lowercase()) {
            wrong.push(format!("{what}: our msg should name {msg:?}: {m:?}"));
        }
    }
    assert!(
        wrong.is_empty(),
        "{} of {} rows:\n{}",
        wrong.len(),
        rows.len(),
        wrong.join("\n")
    );
}
