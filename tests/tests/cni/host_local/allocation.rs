//! Allocation: order and limits of the ranges, idempotent ADD, requested addresses, and
//! ADDs and DELs racing for addresses.

use super::*;
use std::collections::BTreeSet;

// ---------------------------------------------------------------------------------------
// Allocation order and limits
// ---------------------------------------------------------------------------------------

/// Round-robin: after the last handed-out address is released, the next ADD continues
/// after it instead of handing it out again (a just-freed IP is not reused at once).
#[test]
fn round_robin_does_not_reuse_released_address() {
    if !require_root(&[]) {
        return;
    }
    let tmp = TempDir::new("hl");
    let c = conf(
        "1.0.0",
        tmp.path(),
        json!({"ranges": [[{"subnet": "10.60.0.0/24"}]]}),
    );
    assert_eq!(addr(&add(&c, "a", "eth0")), "10.60.0.2");
    assert_eq!(addr(&add(&c, "b", "eth0")), "10.60.0.3");
    assert_eq!(addr(&add(&c, "c", "eth0")), "10.60.0.4");
    del(&c, "c", "eth0");
    assert_eq!(
        last_reserved(tmp.path(), 0),
        "10.60.0.4",
        "DEL must not rewind last_reserved_ip"
    );
    assert_eq!(addr(&add(&c, "d", "eth0")), "10.60.0.5");
    del(&c, "a", "eth0");
    assert_eq!(addr(&add(&c, "e", "eth0")), "10.60.0.6");
    assert_eq!(
        ip_files(tmp.path(), NET),
        ["10.60.0.3", "10.60.0.5", "10.60.0.6"]
    );
}

/// A /29 hands out exactly .2-.6 (not the network .0, the gateway .1, nor the broadcast
/// .7), then fails with code 11 and reserves nothing more; a gateway inside the range is
/// skipped; after a release the walk wraps round to the freed address.
#[test]
fn small_subnet_skips_gateway_network_broadcast_and_exhausts() {
    if !require_root(&[]) {
        return;
    }
    let tmp = TempDir::new("hl");
    let c = conf(
        "1.0.0",
        tmp.path(),
        json!({"ranges": [[{"subnet": "10.61.0.0/29"}]]}),
    );
    let got: Vec<String> = (0..5)
        .map(|i| addr(&add(&c, &format!("c{i}"), "eth0")))
        .collect();
    assert_eq!(
        got,
        [
            "10.61.0.2",
            "10.61.0.3",
            "10.61.0.4",
            "10.61.0.5",
            "10.61.0.6"
        ]
    );
    let before = snapshot(tmp.path());
    call(&ours(), "ADD", &c, "c9", "eth0").err(11);
    assert_eq!(
        snapshot(tmp.path()),
        before,
        "a failed ADD must reserve nothing"
    );
    del(&c, "c1", "eth0");
    assert_eq!(addr(&add(&c, "c9", "eth0")), "10.61.0.3");
    call(&ours(), "ADD", &c, "c10", "eth0").err(11);

    // A gateway in the middle of the range is never handed out.
    let tmp = TempDir::new("hl");
    let c = conf(
        "0.4.0",
        tmp.path(),
        json!({"subnet": "10.62.0.0/29", "gateway": "10.62.0.4"}),
    );
    let got: Vec<String> = (0..5)
        .map(|i| addr(&add(&c, &format!("c{i}"), "eth0")))
        .collect();
    assert_eq!(
        got,
        [
            "10.62.0.1",
            "10.62.0.2",
            "10.62.0.3",
            "10.62.0.5",
            "10.62.0.6"
        ]
    );
    call(&ours(), "ADD", &c, "c9", "eth0").err(11);
    assert_eq!(ip_files(tmp.path(), NET).len(), 5);

    // IPv6 has no broadcast: a /125 gives ::2-::7.
    let tmp = TempDir::new("hl");
    let c = conf(
        "1.0.0",
        tmp.path(),
        json!({"ranges": [[{"subnet": "fd00:62::/125"}]]}),
    );
    let got: Vec<String> = (0..6)
        .map(|i| addr(&add(&c, &format!("c{i}"), "eth0")))
        .collect();
    assert_eq!(
        got,
        [
            "fd00:62::2",
            "fd00:62::3",
            "fd00:62::4",
            "fd00:62::5",
            "fd00:62::6",
            "fd00:62::7"
        ]
    );
    call(&ours(), "ADD", &c, "c9", "eth0").err(11);
    assert_eq!(ip_files(tmp.path(), NET).len(), 6);
}

/// rangeStart..rangeEnd (here 3 addresses, in both the `ranges` and the legacy form)
/// bound what is handed out; the 4th ADD fails with code 11 and leaves no file.
#[test]
fn range_start_end_respected_and_exhausted() {
    if !require_root(&[]) {
        return;
    }
    let ipams = [
        json!({"ranges": [[{"subnet": "10.63.0.0/24", "rangeStart": "10.63.0.10", "rangeEnd": "10.63.0.12"}]]}),
        json!({"subnet": "10.63.0.0/24", "rangeStart": "10.63.0.10", "rangeEnd": "10.63.0.12"}),
    ];
    for ipam in ipams {
        let tmp = TempDir::new("hl");
        let c = conf("1.0.0", tmp.path(), ipam);
        let got: Vec<String> = ["a", "b", "c"]
            .iter()
            .map(|id| addr(&add(&c, id, "eth0")))
            .collect();
        assert_eq!(got, ["10.63.0.10", "10.63.0.11", "10.63.0.12"]);
        let before = snapshot(tmp.path());
        let e = call(&ours(), "ADD", &c, "d", "eth0").err(11);
        assert!(
            e["msg"].as_str().unwrap().contains("10.63.0.10"),
            "message should name the range: {e}"
        );
        assert_eq!(snapshot(tmp.path()), before);
        del(&c, "b", "eth0");
        assert_eq!(
            addr(&add(&c, "d", "eth0")),
            "10.63.0.11",
            "the only free address"
        );
    }
}

/// A failed ADD gives back what it took in earlier range sets: with the IPv6 set full,
/// the new container's IPv4 address is released again (the first container keeps both).
#[test]
fn failed_add_rolls_back_other_range_sets() {
    if !require_root(&[]) {
        return;
    }
    let tmp = TempDir::new("hl");
    let c = conf(
        "1.0.0",
        tmp.path(),
        json!({"ranges": [
            [{"subnet": "10.64.0.0/24"}],
            [{"subnet": "fd00:64::/64", "rangeStart": "fd00:64::9", "rangeEnd": "fd00:64::9"}],
        ]}),
    );
    assert_eq!(addrs(&add(&c, "c1", "eth0")), ["10.64.0.2", "fd00:64::9"]);
    call(&ours(), "ADD", &c, "c2", "eth0").err(11);
    assert_eq!(ip_files(tmp.path(), NET), ["10.64.0.2", "fd00:64::9"]);
    assert_eq!(holder(tmp.path(), "10.64.0.2"), "c1\r\neth0");
}

// ---------------------------------------------------------------------------------------
// Idempotent ADD
// ---------------------------------------------------------------------------------------

/// An ADD repeated for the same container id and ifname returns the same addresses and
/// reserves nothing new; another ifname of the same container gets its own addresses.
#[test]
fn add_is_idempotent_per_attachment() {
    if !require_root(&[]) {
        return;
    }
    let tmp = TempDir::new("hl");
    let c = conf(
        "1.1.0",
        tmp.path(),
        json!({"ranges": [[{"subnet": "10.65.0.0/24"}], [{"subnet": "fd00:65::/64"}]]}),
    );
    let first = add(&c, "c1", "eth0");
    let files = snapshot(tmp.path());
    assert_eq!(add(&c, "c1", "eth0"), first);
    assert_eq!(
        snapshot(tmp.path()),
        files,
        "a repeated ADD must not touch the store"
    );
    let other = add(&c, "c1", "eth1");
    assert_eq!(addrs(&first), ["10.65.0.2", "fd00:65::2"]);
    assert_eq!(addrs(&other), ["10.65.0.3", "fd00:65::3"]);
    assert_eq!(holder(tmp.path(), "10.65.0.3"), "c1\r\neth1");
    assert_eq!(ip_files(tmp.path(), NET).len(), 4);
    // Asking again for a different address than the one held is refused, changing nothing.
    let files = snapshot(tmp.path());
    failed(call_env(
        &ours(),
        "ADD",
        &c,
        "c1",
        "eth0",
        &[("CNI_ARGS", "IgnoreUnknown=1;IP=10.65.0.50")],
    ));
    assert_eq!(snapshot(tmp.path()), files);
    del(&c, "c1", "eth0");
    assert_eq!(ip_files(tmp.path(), NET), ["10.65.0.3", "fd00:65::3"]);
}

// ---------------------------------------------------------------------------------------
// Requested addresses
// ---------------------------------------------------------------------------------------

/// `CNI_ARGS=IgnoreUnknown=1;IP=...` gets exactly that address; asking for a taken one
/// fails and reserves nothing; round-robin continues after the requested address.
#[test]
fn requested_ip_from_cni_args() {
    if !require_root(&[]) {
        return;
    }
    let tmp = TempDir::new("hl");
    let c = conf(
        "1.0.0",
        tmp.path(),
        json!({"ranges": [[{"subnet": "10.66.0.0/24"}]]}),
    );
    let ask = [("CNI_ARGS", "IgnoreUnknown=1;IP=10.66.0.77")];
    let r = call_env(&ours(), "ADD", &c, "c1", "eth0", &ask).ok();
    assert_eq!(
        r["ips"],
        json!([{"address": "10.66.0.77/24", "gateway": "10.66.0.1"}])
    );
    assert_eq!(holder(tmp.path(), "10.66.0.77"), "c1\r\neth0");
    failed(call_env(&ours(), "ADD", &c, "c2", "eth0", &ask));
    assert_eq!(
        ip_files(tmp.path(), NET),
        ["10.66.0.77"],
        "a refused request must reserve nothing"
    );
    assert_eq!(addr(&add(&c, "c2", "eth0")), "10.66.0.78");
    // Outside every range, or the gateway: refused, nothing reserved.
    for bad in [
        "IgnoreUnknown=1;IP=10.67.0.5",
        "IgnoreUnknown=1;IP=10.66.0.1",
    ] {
        failed(call_env(
            &ours(),
            "ADD",
            &c,
            "c3",
            "eth0",
            &[("CNI_ARGS", bad)],
        ));
    }
    assert_eq!(ip_files(tmp.path(), NET), ["10.66.0.77", "10.66.0.78"]);
    // Keys host-local does not know are refused (999, as the reference) unless
    // IgnoreUnknown says to pass them: a misspelt request gives no address at all.
    let e = call_env(
        &ours(),
        "ADD",
        &c,
        "c4",
        "eth0",
        &[("CNI_ARGS", "Ip=10.66.0.90")],
    )
    .err(999);
    assert!(e["msg"].as_str().unwrap().contains("Ip=10.66.0.90"), "{e}");
    assert_eq!(ip_files(tmp.path(), NET), ["10.66.0.77", "10.66.0.78"]);
    let k8s = "IgnoreUnknown=true;K8S_POD_NAMESPACE=default;K8S_POD_NAME=p;IP=10.66.0.90";
    let r = call_env(&ours(), "ADD", &c, "c4", "eth0", &[("CNI_ARGS", k8s)]).ok();
    assert_eq!(r["ips"][0]["address"], "10.66.0.90/24");
    // DEL releases whatever CNI_ARGS says.
    call_env(&ours(), "DEL", &c, "c4", "eth0", &[("CNI_ARGS", "Ip=x")]).ok();
    assert_eq!(ip_files(tmp.path(), NET), ["10.66.0.77", "10.66.0.78"]);
}

/// `args.cni.ips` in the configuration: one address per range set, dual-stack.
#[test]
fn requested_ips_from_args_cni_ips() {
    if !require_root(&[]) {
        return;
    }
    let tmp = TempDir::new("hl");
    let mut c = conf(
        "1.0.0",
        tmp.path(),
        json!({"ranges": [[{"subnet": "10.68.0.0/24"}], [{"subnet": "fd00:68::/64"}]]}),
    );
    c["args"] = json!({"cni": {"ips": ["10.68.0.9", "fd00:68::9"]}});
    assert_eq!(addrs(&add(&c, "c1", "eth0")), ["10.68.0.9", "fd00:68::9"]);
    assert_eq!(holder(tmp.path(), "fd00:68::9"), "c1\r\neth0");
    failed(call(&ours(), "ADD", &c, "c2", "eth0"));
    assert_eq!(ip_files(tmp.path(), NET), ["10.68.0.9", "fd00:68::9"]);
}

/// `runtimeConfig.ips` (the `ips` capability), also in address/prefix form.
#[test]
fn requested_ips_from_runtime_config() {
    if !require_root(&[]) {
        return;
    }
    let tmp = TempDir::new("hl");
    let mut c = conf(
        "1.1.0",
        tmp.path(),
        json!({"ranges": [[{"subnet": "10.69.0.0/24"}]]}),
    );
    c["capabilities"] = json!({"ips": true});
    c["runtimeConfig"] = json!({"ips": ["10.69.0.200/24"]});
    let r = add(&c, "c1", "eth0");
    assert_eq!(
        r["ips"],
        json!([{"address": "10.69.0.200/24", "gateway": "10.69.0.1"}])
    );
    failed(call(&ours(), "ADD", &c, "c2", "eth0"));
    assert_eq!(ip_files(tmp.path(), NET), ["10.69.0.200"]);
}

// ---------------------------------------------------------------------------------------
// Concurrency
// ---------------------------------------------------------------------------------------

/// 50 ADDs racing on one network (separate processes, serialised only by the plugin's
/// lock) get 50 distinct addresses with 50 files naming their owners; 50 racing DELs
/// then leave no reservation.
#[test]
fn parallel_adds_and_dels_never_collide() {
    if !require_root(&[]) {
        return;
    }
    const N: usize = 50;
    let tmp = TempDir::new("hl");
    let c = conf(
        "1.0.0",
        tmp.path(),
        json!({"ranges": [[{"subnet": "10.78.0.0/24"}]]}),
    );
    let results: Vec<(String, String)> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..N)
            .map(|i| {
                let c = &c;
                s.spawn(move || {
                    let id = format!("par{i}");
                    let r = add(c, &id, "eth0");
                    (id, addr(&r))
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let distinct: BTreeSet<&String> = results.iter().map(|(_, ip)| ip).collect();
    assert_eq!(distinct.len(), N, "duplicate addresses: {results:?}");
    assert_eq!(ip_files(tmp.path(), NET).len(), N);
    for (id, ip) in &results {
        assert_eq!(holder(tmp.path(), ip), format!("{id}\r\neth0"));
    }
    std::thread::scope(|s| {
        for i in 0..N {
            let c = &c;
            s.spawn(move || del(c, &format!("par{i}"), "eth0"));
        }
    });
    assert!(
        ip_files(tmp.path(), NET).is_empty(),
        "left: {:?}",
        ip_files(tmp.path(), NET)
    );
}
