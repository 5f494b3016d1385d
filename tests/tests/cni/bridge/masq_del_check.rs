//! ipMasq's rules per attachment (nftables and iptables), DEL, and CHECK, STATUS and GC.

use super::*;

// ---------------------------------------------------------------------------------------
// ipMasq
// ---------------------------------------------------------------------------------------

/// ipMasq with the default backend (nftables, as `nft` exists): each attachment gets its
/// own rules in `table inet crust_cni` chain `postrouting`, commented
/// `name: <net> id: <container>`, masquerading the pod's addresses; the pod really is
/// masqueraded toward a namespace with no route back (a pod without ipMasq is not); DEL
/// removes exactly its own rules.
#[test]
fn ip_masq_nftables_rules_per_attachment() {
    if !root() {
        return;
    }
    let node = Node::ours();
    let (a, b, plain) = (Netns::new("bp"), Netns::new("bp"), Netns::new("bp"));
    let c = node.conf(
        "1.0.0",
        json!({"isDefaultGateway": true, "ipMasq": true}),
        dual(219),
    );
    node.add(&c, "c1", &a);
    node.add(&c, "c2", &b);
    let rules = node.nft_rules();
    let of = |id: &str| -> Vec<String> {
        let tag = format!("comment \"name: {NET} id: {id}\"");
        rules
            .iter()
            .filter(|r| r.ends_with(&tag))
            .cloned()
            .collect()
    };
    let (r1, r2) = (of("c1"), of("c2"));
    assert_eq!(r1.len() + r2.len(), rules.len(), "foreign rules: {rules:?}");
    for (rs, k) in [(&r1, 2), (&r2, 3)] {
        assert_eq!(rs.len(), 2, "{rules:?}");
        assert!(
            rs[0].starts_with(&format!("ip saddr 10.219.0.{k} ")),
            "{rs:?}"
        );
        assert!(
            rs[1].starts_with(&format!("ip6 saddr fd00:219::{k} ")),
            "{rs:?}"
        );
        for r in rs.iter() {
            assert!(r.contains(" masquerade "), "{r}");
        }
    }

    // The rules do what they say.
    let ext = outside(&node, 219);
    ping(&a, "192.168.219.2");
    node.add(
        &node.conf("1.0.0", json!({"isDefaultGateway": true}), dual(219)),
        "c3",
        &plain,
    );
    assert!(
        !ping_once(&plain, "192.168.219.2"),
        "a pod without ipMasq got an answer from a namespace without a route back"
    );
    drop(ext);

    node.del(&c, "c1", &a);
    assert_eq!(node.nft_rules(), r2, "DEL c1 must leave exactly c2's rules");
    node.del(&c, "c2", &b);
    assert!(node.nft_rules().is_empty(), "{:?}", node.nft_rules());
}

/// `"ipMasqBackend": "iptables"`: a POSTROUTING jump per address to the attachment's
/// CNI-... chain (ACCEPT within the subnet, MASQUERADE otherwise), all commented with
/// network and container; the pod is masqueraded; DEL removes exactly its own rules and
/// chain.
#[test]
fn ip_masq_iptables_backend() {
    if !root() {
        return;
    }
    let node = Node::ours();
    let (a, b) = (Netns::new("bp"), Netns::new("bp"));
    let c = node.conf(
        "1.0.0",
        json!({"isDefaultGateway": true, "ipMasq": true, "ipMasqBackend": "iptables"}),
        dual(220),
    );
    node.add(&c, "c1", &a);
    node.add(&c, "c2", &b);
    assert!(
        node.nft_rules().is_empty(),
        "iptables backend wrote nft rules"
    );
    let rules = node.ipt_rules();
    let of = |id: &str| -> Vec<String> {
        // The reference plugin's comment, quotes escaped as `iptables -S` prints them.
        let tag = format!(r#"name: \"{NET}\" id: \"{id}\""#);
        rules.iter().filter(|r| r.contains(&tag)).cloned().collect()
    };
    let (r1, r2) = (of("c1"), of("c2"));
    for (rs, k) in [(&r1, 2), (&r2, 3)] {
        for (tool, src, subnet) in [
            ("iptables", format!("10.220.0.{k}/32"), "10.220.0.0/24"),
            ("ip6tables", format!("fd00:220::{k}/128"), "fd00:220::/64"),
        ] {
            let jump = rs
                .iter()
                .find(|r| r.starts_with(&format!("{tool} -A POSTROUTING -s {src} ")))
                .unwrap_or_else(|| panic!("no {tool} POSTROUTING rule for {src}: {rules:?}"));
            let chain = jump.rsplit(' ').next().unwrap();
            assert!(chain.starts_with("CNI-"), "{jump}");
            let mine: Vec<&String> = rs
                .iter()
                .filter(|r| r.starts_with(&format!("{tool} -A {chain} ")))
                .collect();
            assert!(
                mine.iter()
                    .any(|r| r.contains(&format!("-d {subnet} ")) && r.ends_with("-j ACCEPT")),
                "{mine:?}"
            );
            assert!(
                mine.iter().any(|r| r.ends_with("-j MASQUERADE")),
                "{mine:?}"
            );
            assert!(
                rules.contains(&format!("{tool} -N {chain}")),
                "chain {chain} not declared: {rules:?}"
            );
        }
    }
    let ext = outside(&node, 220);
    ping(&a, "192.168.220.2");
    drop(ext);

    node.del(&c, "c1", &a);
    let left = node.ipt_rules();
    assert!(
        !left
            .iter()
            .any(|r| r.contains(&format!("name: {NET} id: c1"))),
        "c1's rules survived its DEL: {left:?}"
    );
    for r in &r2 {
        assert!(left.contains(r), "DEL c1 removed c2's rule {r}: {left:?}");
    }
    node.del(&c, "c2", &b);
    assert!(node.ipt_rules().is_empty(), "{:?}", node.ipt_rules());
}

// ---------------------------------------------------------------------------------------
// DEL
// ---------------------------------------------------------------------------------------

/// DEL removes the veth (both ends), releases the addresses and removes the masq rules;
/// a second DEL succeeds too. Another pod on the bridge is untouched.
#[test]
fn del_removes_veth_addresses_and_rules_and_repeats() {
    if !root() {
        return;
    }
    let node = Node::ours();
    let (a, b) = (Netns::new("bp"), Netns::new("bp"));
    let c = node.conf(
        "1.0.0",
        json!({"isGateway": true, "ipMasq": true}),
        dual(221),
    );
    node.add(&c, "c1", &a);
    let v1 = node.the_veth();
    node.add(&c, "c2", &b);
    assert_eq!(node.veths().len(), 2);
    node.del(&c, "c1", &a);
    assert!(
        !has_link(&a, "eth0"),
        "eth0 left in the pod: {:?}",
        a.links()
    );
    let veths = node.veths();
    assert_eq!(veths.len(), 1, "{veths:?}");
    assert_ne!(veths[0], v1, "the wrong veth was deleted");
    assert_eq!(node.reservations(), ["10.221.0.3", "fd00:221::3"]);
    assert!(
        node.nft_rules().iter().all(|r| r.contains("id: c2")),
        "{:?}",
        node.nft_rules()
    );
    node.del(&c, "c1", &a);
    node.del(&c, "c2", &b);
    node.del(&c, "c2", &b);
    assert!(node.veths().is_empty());
    assert!(!has_link(&b, "eth0"));
    assert!(node.reservations().is_empty());
    assert!(node.nft_rules().is_empty());
    // The bridge stays, with its gateway addresses.
    assert!(has_link(&node.ns, &node.bridge));
}

/// Inodes of the pipes process `pid` has open.
fn pipes_of(pid: &str) -> BTreeSet<String> {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .map(|d| {
            d.flatten()
                .filter_map(|e| std::fs::read_link(e.path()).ok())
                .map(|l| l.to_string_lossy().into_owned())
                .filter(|l| l.starts_with("pipe:"))
                .collect()
        })
        .unwrap_or_default()
}

/// PIDs of the children DEL leaves to finish the kernel's part (see finish.rs).
fn finishers() -> Vec<String> {
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|p| p.bytes().all(|b| b.is_ascii_digit()))
        .filter(|p| {
            std::fs::read_to_string(format!("/proc/{p}/comm"))
                .is_ok_and(|c| c.trim() == "cni-del-finish")
        })
        .collect()
}

/// DEL returns as soon as the veth is out of the pod, and leaves the kernel's slow
/// remainder (RCU waits after the link is unlisted and the rules deleted) to a child.
/// So: the same interface can be added again the moment DEL returns, the rules are
/// gone by then, and the child holds none of the caller's pipes (a runtime reading the
/// plugin's stdout to its end would otherwise wait for it after all).
#[test]
fn del_frees_the_interface_at_once_and_leaves_no_pipe_held() {
    if !root() {
        return;
    }
    let node = Node::ours();
    let pod = Netns::new("bp");
    let c = node.conf(
        "1.0.0",
        json!({"isGateway": true, "ipMasq": true}),
        dual(237),
    );
    let mut seen_finisher = false;
    for round in 0..6 {
        node.add(&c, "c1", &pod);
        assert!(!node.nft_rules().is_empty());
        // DEL by hand, to look at the finisher while it still runs.
        let mut cmd = std::process::Command::new(&node.plugin);
        cmd.env_clear()
            .env("PATH", std::env::var("PATH").unwrap_or_default())
            .env("CNI_COMMAND", "DEL")
            .env("CNI_CONTAINERID", "c1")
            .env("CNI_NETNS", netns_path(&pod))
            .env("CNI_IFNAME", "eth0")
            .env("CNI_PATH", &node.cni_path)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped());
        let (status, ours) = std::thread::scope(|s| {
            s.spawn(|| {
                crust_e2e::enter_netns(&node.ns.path());
                let mut child = cmd.spawn().unwrap();
                use std::io::Write;
                child
                    .stdin
                    .take()
                    .unwrap()
                    .write_all(c.to_string().as_bytes())
                    .unwrap();
                let status = child.wait().unwrap();
                let me = pipes_of("self");
                (status, me)
            })
            .join()
            .unwrap()
        });
        assert!(status.success(), "round {round}: DEL failed: {status}");
        for f in finishers() {
            seen_finisher = true;
            let held: Vec<String> = pipes_of(&f).intersection(&ours).cloned().collect();
            assert!(held.is_empty(), "finisher {f} holds the caller's {held:?}");
        }
        assert!(
            !has_link(&pod, "eth0"),
            "round {round}: eth0 still in the pod"
        );
        assert!(
            node.nft_rules().is_empty(),
            "round {round}: rules left: {:?}",
            node.nft_rules()
        );
    }
    assert!(
        seen_finisher,
        "no DEL left a finisher running: the test looked at nothing"
    );
    node.add(&c, "c1", &pod);
    node.del(&c, "c1", &pod);
    assert!(node.veths().is_empty());
    assert!(node.reservations().is_empty());
}

/// DEL after the pod's namespace is gone succeeds and still releases the addresses and
/// removes the rules (the veth went with the namespace).
#[test]
fn del_with_a_vanished_netns_releases_the_addresses() {
    if !root() {
        return;
    }
    let node = Node::ours();
    let pod = Netns::new("bp");
    let c = node.conf(
        "1.0.0",
        json!({"isGateway": true, "ipMasq": true}),
        dual(222),
    );
    node.add(&c, "c1", &pod);
    let path = netns_path(&pod);
    drop(pod);
    assert!(!Path::new(&path).exists());
    node.del_at(&c, "c1", &path);
    assert!(node.reservations().is_empty(), "{:?}", node.reservations());
    assert!(node.nft_rules().is_empty(), "{:?}", node.nft_rules());
    eventually("the veth is gone with its namespace", || {
        node.veths().is_empty()
    });
    node.del_at(&c, "c1", &path);
}

/// DEL with an empty CNI_NETNS (the runtime lost it) succeeds and releases the
/// addresses and rules; a later DEL with the namespace removes the veth.
#[test]
fn del_with_empty_netns_releases_the_addresses() {
    if !root() {
        return;
    }
    let node = Node::ours();
    let pod = Netns::new("bp");
    let c = node.conf(
        "1.0.0",
        json!({"isGateway": true, "ipMasq": true}),
        dual(223),
    );
    node.add(&c, "c1", &pod);
    node.del_at(&c, "c1", "");
    assert!(node.reservations().is_empty(), "{:?}", node.reservations());
    assert!(node.nft_rules().is_empty(), "{:?}", node.nft_rules());
    node.del(&c, "c1", &pod);
    assert!(node.veths().is_empty());
    assert!(!has_link(&pod, "eth0"));
}

// ---------------------------------------------------------------------------------------
// CHECK, STATUS, GC
// ---------------------------------------------------------------------------------------

/// CHECK with the ADD result as prevResult succeeds (printing nothing); it fails once an
/// address was removed from the pod's interface, or the interface was deleted.
#[test]
fn check_follows_the_pod_interface() {
    if !root() {
        return;
    }
    let node = Node::ours();
    let (a, b) = (Netns::new("bp"), Netns::new("bp"));
    let c = node.conf(
        "1.0.0",
        json!({"isGateway": true, "ipMasq": true}),
        dual(224),
    );
    let with_prev = |r: Value| {
        let mut cc = c.clone();
        cc["prevResult"] = r;
        cc
    };
    let c1 = with_prev(node.add(&c, "c1", &a));
    let c2 = with_prev(node.add(&c, "c2", &b));
    for (cc, id, pod) in [(&c1, "c1", &a), (&c2, "c2", &b)] {
        let out = node.call("CHECK", cc, id, pod);
        assert!(out.stdout.trim().is_empty(), "CHECK printed {}", out.stdout);
        out.ok();
    }

    a.sh(&["ip", "addr", "del", "fd00:224::2/64", "dev", "eth0"]);
    let out = node.call("CHECK", &c1, "c1", &a);
    assert_ne!(out.code, 0, "CHECK passed without the IPv6 address");
    assert!(out.json["code"].as_u64().is_some(), "{}", out.stdout);

    b.sh(&["ip", "link", "del", "eth0"]);
    let out = node.call("CHECK", &c2, "c2", &b);
    assert_ne!(out.code, 0, "CHECK passed without eth0");
    assert!(out.json["code"].as_u64().is_some(), "{}", out.stdout);
    // Cleaning up what is left still works.
    node.del(&c, "c2", &b);
    assert_eq!(node.reservations(), ["10.224.0.2", "fd00:224::2"]);
}

/// STATUS (1.1.0) is host-local's: it succeeds while an address is free and fails with
/// code 50 once the range is exhausted; GC with `cni.dev/valid-attachments` releases
/// every other reservation through host-local.
#[test]
fn status_and_gc_pass_through_to_ipam() {
    if !root() {
        return;
    }
    let node = Node::ours();
    let (a, b) = (Netns::new("bp"), Netns::new("bp"));
    let mut c = node.conf(
        "1.1.0",
        json!({"isGateway": true}),
        json!({"ranges": [[{"subnet": "10.225.0.0/24", "rangeStart": "10.225.0.10", "rangeEnd": "10.225.0.11"}]]}),
    );
    let out = node.call_plain("STATUS", &c);
    assert!(
        out.stdout.trim().is_empty(),
        "STATUS printed {}",
        out.stdout
    );
    out.ok();
    node.add(&c, "c1", &a);
    node.call_plain("STATUS", &c).ok();
    node.add(&c, "c2", &b);
    node.call_plain("STATUS", &c).err(50);

    c["cni.dev/valid-attachments"] = json!([{"containerID": "c1", "ifname": "eth0"}]);
    let out = node.call_plain("GC", &c);
    assert!(out.stdout.trim().is_empty(), "GC printed {}", out.stdout);
    out.ok();
    assert_eq!(node.reservations(), ["10.225.0.10"]);
    node.call_plain("STATUS", &c).ok();
}
