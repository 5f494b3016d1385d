//! Crash at every step of the CNI plugins (issue 14): for each failpoint of `bridge` and
//! `host-local` (the list in crates/cni-plugins/src/failpoint_steps.rs, one test per
//! step, named `plugin::verb::step`), the verb runs with `CRUST_CNI_FAILPOINT` naming the
//! step and dies there by SIGKILL, none of its own rollback run. Then the runtime's
//! recovery: DEL, which must succeed, and GC with no valid attachment, which must
//! succeed; after them nothing of the attachment may be left: no reservation in
//! host-local's store (only its `lock` and `last_reserved_ip.N`), no veth in the node, no
//! interface in the pod, no masquerade rule. A new ADD and DEL on the same node must
//! then work and leave nothing either, and the namespaces the test made go away.
//!
//! How each verb is cut:
//! - `bridge.add.*`, `bridge.del.*`: bridge itself dies (exit by signal, its last words
//!   on stderr `failpoint STEP: SIGKILL`).
//! - `host_local.*`: bridge runs host-local with its own environment, so the host-local
//!   child dies; bridge survives and fails with an error quoting that death.
//! - `bridge.finish.*`: the `cni-del-finish` child DEL leaves the link's deletion to is
//!   killed before it sends the deletion (DEL then fails with 999, the pod's interface is still
//!   there) or after the kernel acknowledged it, before it reports or exits (DEL
//!   succeeds, the interface is gone).
//!
//! When bridge dies during ADD, its host-local child (started beside the veth setup)
//! runs on and finishes its ADD as an orphan; a DEL racing it could miss that address,
//! which only the next GC releases. The test waits for such orphans (any process with
//! the attachment's `CNI_CONTAINERID`) before the DEL, as a runtime's retry after a
//! restart would in practice.

// The bridge suite's helpers come whole; this suite uses only some of them.
#![allow(dead_code)]

use crust_e2e::{
    attachment_env, bin, bin_dir, ip_files, require_root, run, unique, Cni, CniOut, Netns, TempDir,
};
use serde_json::{json, Value};
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

include!("node_helpers.rs");
include!("../../../crates/cni-plugins/src/failpoint_steps.rs");

macro_rules! crash_tests {
    ($($plugin:ident { $($verb:ident { $($step:ident),* $(,)? })* })*) => {
        $(mod $plugin {
            $(mod $verb {
                $(
                    #[test]
                    fn $step() {
                        super::super::crash_at(concat!(
                            stringify!($plugin), ".", stringify!($verb), ".", stringify!($step)
                        ));
                    }
                )*
            })*
        })*
    };
}
cni_failpoint_steps!(crash_tests);

/// The variable the plugins read (crates/cni-plugins/src/failpoint.rs).
const FAILPOINT: &str = "CRUST_CNI_FAILPOINT";

/// Gateway, masquerade (nftables) and dual stack: every kind of state ADD makes.
fn crash_conf(node: &Node) -> Value {
    node.conf(
        "1.1.0",
        json!({"isGateway": true, "ipMasq": true}),
        dual(240),
    )
}

/// Runs `cmd` for attachment `id` in `pod` with the failpoint armed.
fn cut(node: &Node, cmd: &str, conf: &Value, id: &str, pod: &Netns, step: &str) -> CniOut {
    attachment_env(
        Cni::new(node.plugin.clone(), Some(&node.ns)),
        id,
        &netns_path(pod),
        "eth0",
        &node.cni_path,
    )
    .env(FAILPOINT, step)
    .call(cmd, &conf.to_string())
}

/// GC with the given valid attachments (and the failpoint, if any).
fn gc(node: &Node, conf: &Value, valid: &[&str], step: Option<&str>) -> CniOut {
    let mut c = conf.clone();
    c["cni.dev/valid-attachments"] = valid
        .iter()
        .map(|id| json!({"containerID": id, "ifname": "eth0"}))
        .collect();
    let mut cni = Cni::new(node.plugin.clone(), Some(&node.ns))
        .env("CNI_PATH", node.cni_path.to_string_lossy());
    if let Some(s) = step {
        cni = cni.env(FAILPOINT, s);
    }
    cni.call("GC", &c.to_string())
}

/// The plugin itself was killed at `step`.
fn assert_killed(out: &CniOut, step: &str) {
    assert_eq!(
        out.code, -1,
        "{step}: the plugin should have died by a signal: {}{}",
        out.stdout, out.stderr
    );
    assert!(
        out.stderr.contains(&format!("failpoint {step}: SIGKILL")),
        "{step}: no failpoint message: {}",
        out.stderr
    );
}

/// bridge survived its host-local child, which was killed at `step`.
fn assert_ipam_killed(out: &CniOut, step: &str) {
    assert_ne!(
        out.code, 0,
        "{step}: bridge should have failed: {}",
        out.stdout
    );
    let msg = out.json["msg"].as_str().unwrap_or_default();
    assert!(
        out.json["code"].as_u64().is_some() && msg.contains(&format!("failpoint {step}: SIGKILL")),
        "{step}: bridge's error does not tell the IPAM plugin died: {}{}",
        out.stdout,
        out.stderr
    );
}

/// Waits until no process runs for attachment `id` (an orphaned IPAM child, a
/// finisher), judged by `CNI_CONTAINERID` in its environment.
fn wait_orphans(id: &str) {
    let needle = format!("CNI_CONTAINERID={id}\0");
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let running: Vec<String> = std::fs::read_dir("/proc")
            .unwrap()
            .flatten()
            .filter(|e| e.file_name().to_string_lossy().parse::<u32>().is_ok())
            .filter(|e| {
                std::fs::read(e.path().join("environ"))
                    .map(|env| env.windows(needle.len()).any(|w| w == needle.as_bytes()))
                    .unwrap_or(false)
            })
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        if running.is_empty() {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "processes of {id} still running: {running:?}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The pod's eth0 exists.
fn pod_has_eth0(pod: &Netns) -> bool {
    has_link(pod, "eth0")
}

fn crash_at(step: &str) {
    if !root() {
        return;
    }
    let node = Node::ours();
    let pod = Netns::new("cp");
    let conf = crash_conf(&node);
    let id = unique("cc");
    let before = state(&node, &pod);
    let (plugin, verb) = {
        let mut p = step.split('.');
        (p.next().unwrap(), p.next().unwrap())
    };

    match (plugin, verb) {
        ("bridge", "add") => assert_killed(&cut(&node, "ADD", &conf, &id, &pod, step), step),
        ("host_local", "add") => {
            assert_ipam_killed(&cut(&node, "ADD", &conf, &id, &pod, step), step)
        }
        ("bridge", "del") => {
            node.add(&conf, &id, &pod);
            assert_killed(&cut(&node, "DEL", &conf, &id, &pod, step), step);
        }
        ("host_local", "del") => {
            node.add(&conf, &id, &pod);
            assert_ipam_killed(&cut(&node, "DEL", &conf, &id, &pod, step), step);
        }
        ("bridge", "finish") => {
            node.add(&conf, &id, &pod);
            let out = cut(&node, "DEL", &conf, &id, &pod, step);
            wait_orphans(&id);
            if step.ends_with("before_dellink") {
                out.err(999);
                assert!(pod_has_eth0(&pod), "{step}: the link went all the same");
            } else {
                out.ok();
                assert!(!pod_has_eth0(&pod), "{step}: the link is still there");
            }
        }
        ("host_local", "gc") => {
            // Two attachments, neither valid: GC releases one and dies.
            node.add(&conf, &id, &pod);
            let pod2 = Netns::new("cp");
            let id2 = unique("cc");
            node.add(&conf, &id2, &pod2);
            assert_ipam_killed(&gc(&node, &conf, &[], Some(step)), step);
            assert!(
                !node.reservations().is_empty(),
                "{step}: GC released everything before it died"
            );
            node.del(&conf, &id2, &pod2);
        }
        _ => panic!("no crash test for {step}"),
    }
    wait_orphans(&id);
    eprintln!(
        "{step}: after the cut: node links {:?}, pod links {:?}, reservations {:?}, nft {:?}",
        node.ns.links(),
        pod.links(),
        node.reservations(),
        node.nft_rules()
    );

    // Recovery: DEL (repeatable, so it succeeds whatever the cut left), then GC.
    node.del(&conf, &id, &pod);
    gc(&node, &conf, &[], None).ok();
    let allow = Allow {
        bridge: true,
        ipam_bookkeeping: true,
    };
    assert_left_nothing(&node, &before, state(&node, &pod), allow);

    // The node works: a new ADD gets its addresses, and its DEL leaves nothing.
    let id2 = unique("cc");
    let r = node.add(&conf, &id2, &pod);
    let want: BTreeSet<String> = result_ips(&r).into_iter().collect();
    let have: BTreeSet<String> = addrs(&pod, "eth0")
        .into_iter()
        .map(|a| a.split('/').next().unwrap().to_string())
        .collect();
    assert_eq!(have, want, "{step}: the new ADD's addresses");
    node.del(&conf, &id2, &pod);
    gc(&node, &conf, &[], None).ok();
    assert_left_nothing(&node, &before, state(&node, &pod), allow);

    // And the namespaces the test made go away with it.
    let pins: Vec<PathBuf> = vec![pod.path(), node.ns.path()];
    drop(pod);
    drop(node);
    for p in pins {
        assert!(!p.exists(), "{step}: {} is left", p.display());
    }
}
