//! End-to-end tests of the `host-local` IPAM plugin binary.
//!
//! host-local only touches files, so these tests need no network namespace: every test
//! gives the plugin its own temp `dataDir` and runs the built binary as a runtime (or the
//! bridge plugin, which hands its whole configuration on) would. The last group runs
//! Debian's reference plugin (`/usr/lib/cni/host-local`, containernetworking-plugins
//! 1.1.1) on the same inputs and demands the same results and the same files, so a node
//! can switch between the two.
//!
//! Known, intentional differences from the reference, not compared: an ADD for an
//! attachment that already holds an address returns that address (the reference fails),
//! an exhausted range fails with code 11 (the reference says 999), DEL and GC never create
//! a missing `dataDir` (the reference does), CHECK also demands that every prevResult
//! address be reserved for the attachment (the reference is content with any one), and
//! the reference lacks spec 1.1.0.

use crust_e2e::{attachment_env, ip_files, reference_plugin, require_root, Cni, CniOut, TempDir};
use serde_json::{json, Value};
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The network name: the folder under `dataDir` holding its reservations.
const NET: &str = "hlnet";
/// `CNI_NETNS` for ADD and CHECK: required by the protocol, never opened by host-local.
const NETNS: &str = "/run/netns/crust-host-local-unused";
/// The result versions an ADD must be able to print.
const VERSIONS: &[&str] = &["1.1.0", "1.0.0", "0.4.0", "0.3.1"];

// ---------------------------------------------------------------------------------------
// Helpers
// ---------------------------------------------------------------------------------------

fn ours() -> PathBuf {
    crust_e2e::bin("host-local")
}

/// The reference plugin, or `None` (after a loud message) when it is missing outside CI.
fn reference() -> Option<PathBuf> {
    reference_plugin("host-local")
}

/// A network configuration as the runtime gives it to the bridge plugin, which passes it
/// to host-local unchanged; `ipam` gets `type` and `dataDir` added.
fn conf(version: &str, data_dir: &Path, mut ipam: Value) -> Value {
    ipam["type"] = json!("host-local");
    ipam["dataDir"] = json!(data_dir.to_str().unwrap());
    json!({"cniVersion": version, "name": NET, "type": "bridge", "ipam": ipam})
}

/// Runs `plugin` for one attachment with extra environment (e.g. `CNI_ARGS`).
fn call_env(
    plugin: &Path,
    cmd: &str,
    conf: &Value,
    id: &str,
    ifname: &str,
    env: &[(&str, &str)],
) -> CniOut {
    let mut c = attachment_env(
        Cni::new(plugin.to_path_buf(), None),
        id,
        NETNS,
        ifname,
        Path::new("/usr/lib/cni"),
    );
    for (k, v) in env {
        c = c.env(k, v);
    }
    c.call(cmd, &conf.to_string())
}

fn call(plugin: &Path, cmd: &str, conf: &Value, id: &str, ifname: &str) -> CniOut {
    call_env(plugin, cmd, conf, id, ifname, &[])
}

/// Our ADD, which must succeed; returns the result.
fn add(conf: &Value, id: &str, ifname: &str) -> Value {
    call(&ours(), "ADD", conf, id, ifname).ok()
}

/// Our DEL, which must succeed and print nothing.
fn del(conf: &Value, id: &str, ifname: &str) {
    let out = call(&ours(), "DEL", conf, id, ifname);
    assert!(out.stdout.trim().is_empty(), "DEL printed {}", out.stdout);
    out.ok();
}

/// Runs a verb that takes no attachment (STATUS, GC).
fn call_plain(cmd: &str, conf: &Value) -> CniOut {
    Cni::new(ours(), None)
        .env("CNI_PATH", "/usr/lib/cni")
        .call(cmd, &conf.to_string())
}

/// The addresses of a result, without prefix length, in order.
fn addrs(result: &Value) -> Vec<String> {
    result["ips"]
        .as_array()
        .unwrap_or_else(|| panic!("result without ips: {result}"))
        .iter()
        .map(|ip| {
            ip["address"]
                .as_str()
                .unwrap()
                .split('/')
                .next()
                .unwrap()
                .to_string()
        })
        .collect()
}

/// The one address of a single-stack result.
fn addr(result: &Value) -> String {
    let a = addrs(result);
    assert_eq!(a.len(), 1, "expected one address: {result}");
    a[0].clone()
}

/// The result host-local must print for `version`: `ips` as (address/prefix, gateway),
/// with the per-IP `"version"` field of 0.3.x and 0.4.0 results; `routes` is left out
/// when empty, as both implementations do.
fn expected(version: &str, ips: &[(&str, &str)], routes: &Value, dns: &Value) -> Value {
    let legacy = version.starts_with("0.");
    let ips: Vec<Value> = ips
        .iter()
        .map(|(a, g)| {
            let mut ip = json!({"address": a, "gateway": g});
            if legacy {
                ip["version"] = json!(if a.contains(':') { "6" } else { "4" });
            }
            ip
        })
        .collect();
    let mut r = json!({"cniVersion": version, "ips": ips, "dns": dns});
    if routes.as_array().map(|a| !a.is_empty()).unwrap_or(false) {
        r["routes"] = routes.clone();
    }
    r
}

/// Writes a resolv.conf into `dir`; returns its path and the `dns` a result must carry.
fn resolv_conf(dir: &Path) -> (String, Value) {
    let p = dir.join("resolv.conf");
    std::fs::write(
        &p,
        "# written by the test\nnameserver 10.99.0.53\nnameserver fd00:99::53\ndomain cluster.example\n\
         search ns.svc.cluster.example svc.cluster.example\noptions ndots:5 timeout:2\n",
    )
    .unwrap();
    let dns = json!({
        "nameservers": ["10.99.0.53", "fd00:99::53"],
        "domain": "cluster.example",
        "search": ["ns.svc.cluster.example", "svc.cluster.example"],
        "options": ["ndots:5", "timeout:2"],
    });
    (p.to_str().unwrap().to_string(), dns)
}

/// Every file of the network's folder with its contents (lock and last_reserved_ip.N
/// included); empty when the folder does not exist.
fn snapshot(data_dir: &Path) -> BTreeMap<String, String> {
    let Ok(rd) = std::fs::read_dir(data_dir.join(NET)) else {
        return BTreeMap::new();
    };
    rd.map(|e| {
        let e = e.unwrap();
        assert!(
            e.file_type().unwrap().is_file(),
            "unexpected non-file {:?}",
            e.path()
        );
        (
            e.file_name().to_string_lossy().into_owned(),
            std::fs::read_to_string(e.path()).unwrap(),
        )
    })
    .collect()
}

/// The content of the reservation file of `ip`.
fn holder(data_dir: &Path, ip: &str) -> String {
    std::fs::read_to_string(data_dir.join(NET).join(ip))
        .unwrap_or_else(|e| panic!("no reservation file for {ip}: {e}"))
}

fn last_reserved(data_dir: &Path, set: usize) -> String {
    std::fs::read_to_string(data_dir.join(NET).join(format!("last_reserved_ip.{set}"))).unwrap()
}

/// Asserts that a failed call is a proper CNI error (non-zero exit, a code, a message).
fn failed(out: CniOut) -> Value {
    assert_ne!(out.code, 0, "plugin should have failed: {}", out.stdout);
    assert!(
        out.json["code"].as_u64().is_some(),
        "error without code: {}{}",
        out.stdout,
        out.stderr
    );
    assert!(
        out.json["msg"]
            .as_str()
            .map(|m| !m.is_empty())
            .unwrap_or(false),
        "error without msg: {}",
        out.stdout
    );
    out.json
}

// ---------------------------------------------------------------------------------------
// ADD results
// ---------------------------------------------------------------------------------------

/// `ranges` with one IPv4 range: the first host after the gateway, the subnet's prefix,
/// the gateway, the configured routes and the resolvConf's DNS, in every result version.
#[test]
fn add_ipv4_ranges_result_in_every_version() {
    if !require_root(&[]) {
        return;
    }
    for v in VERSIONS {
        let tmp = TempDir::new("hl");
        let (resolv, dns) = resolv_conf(tmp.path());
        let routes = json!([{"dst": "0.0.0.0/0"}, {"dst": "192.168.0.0/16", "gw": "10.10.0.254"}]);
        let c = conf(
            v,
            tmp.path(),
            json!({"ranges": [[{"subnet": "10.10.0.0/24"}]], "routes": routes, "resolvConf": resolv}),
        );
        assert_eq!(
            add(&c, "c1", "eth0"),
            expected(v, &[("10.10.0.2/24", "10.10.0.1")], &routes, &dns),
            "v{v}"
        );
        assert_eq!(
            add(&c, "c2", "eth0"),
            expected(v, &[("10.10.0.3/24", "10.10.0.1")], &routes, &dns),
            "v{v}"
        );
    }
}

/// The legacy top-level `subnet`/`rangeStart`/`rangeEnd`/`gateway` form: addresses start
/// at rangeStart and carry the configured gateway; no resolvConf gives an empty `dns`.
#[test]
fn add_legacy_subnet_fields() {
    if !require_root(&[]) {
        return;
    }
    for v in VERSIONS {
        let tmp = TempDir::new("hl");
        let c = conf(
            v,
            tmp.path(),
            json!({"subnet": "10.20.0.0/24", "rangeStart": "10.20.0.100", "rangeEnd": "10.20.0.200", "gateway": "10.20.0.254"}),
        );
        let none = json!([]);
        assert_eq!(
            add(&c, "c1", "eth0"),
            expected(v, &[("10.20.0.100/24", "10.20.0.254")], &none, &json!({})),
            "v{v}"
        );
        assert_eq!(
            add(&c, "c2", "eth0"),
            expected(v, &[("10.20.0.101/24", "10.20.0.254")], &none, &json!({})),
            "v{v}"
        );
    }
}

/// IPv6 ranges: `::2` onwards with `::1` as gateway, "version":"6" in 0.x results.
#[test]
fn add_ipv6() {
    if !require_root(&[]) {
        return;
    }
    for v in VERSIONS {
        let tmp = TempDir::new("hl");
        let (resolv, dns) = resolv_conf(tmp.path());
        let routes = json!([{"dst": "::/0"}]);
        let c = conf(
            v,
            tmp.path(),
            json!({"ranges": [[{"subnet": "fd00:30::/64"}]], "routes": routes, "resolvConf": resolv}),
        );
        assert_eq!(
            add(&c, "c1", "eth0"),
            expected(v, &[("fd00:30::2/64", "fd00:30::1")], &routes, &dns),
            "v{v}"
        );
        assert_eq!(
            add(&c, "c2", "eth0"),
            expected(v, &[("fd00:30::3/64", "fd00:30::1")], &routes, &dns),
            "v{v}"
        );
    }
}

/// Two range sets give one address each, in the order of the sets (also IPv6 first).
#[test]
fn add_dual_stack() {
    if !require_root(&[]) {
        return;
    }
    for v in VERSIONS {
        let tmp = TempDir::new("hl");
        let (resolv, dns) = resolv_conf(tmp.path());
        let routes = json!([{"dst": "0.0.0.0/0"}, {"dst": "::/0", "gw": "fd00:40::1"}]);
        let c = conf(
            v,
            tmp.path(),
            json!({
                "ranges": [
                    [{"subnet": "10.40.0.0/16", "rangeStart": "10.40.1.0", "rangeEnd": "10.40.1.255", "gateway": "10.40.0.1"}],
                    [{"subnet": "fd00:40::/64"}],
                ],
                "routes": routes,
                "resolvConf": resolv,
            }),
        );
        let want = expected(
            v,
            &[
                ("10.40.1.0/16", "10.40.0.1"),
                ("fd00:40::2/64", "fd00:40::1"),
            ],
            &routes,
            &dns,
        );
        assert_eq!(add(&c, "c1", "eth0"), want, "v{v}");
        let want = expected(
            v,
            &[
                ("10.40.1.1/16", "10.40.0.1"),
                ("fd00:40::3/64", "fd00:40::1"),
            ],
            &routes,
            &dns,
        );
        assert_eq!(add(&c, "c2", "eth0"), want, "v{v}");

        let tmp6 = TempDir::new("hl");
        let c6 = conf(
            v,
            tmp6.path(),
            json!({"ranges": [[{"subnet": "fd00:41::/120"}], [{"subnet": "10.41.0.0/24"}]]}),
        );
        let want = expected(
            v,
            &[
                ("fd00:41::2/120", "fd00:41::1"),
                ("10.41.0.2/24", "10.41.0.1"),
            ],
            &json!([]),
            &json!({}),
        );
        assert_eq!(add(&c6, "c1", "eth0"), want, "v{v}");
    }
}

// ---------------------------------------------------------------------------------------
// Disk layout
// ---------------------------------------------------------------------------------------

/// The reference's layout, nothing more: `<ip>` files holding "<id>\r\n<ifname>",
/// `last_reserved_ip.<set>` with the address last handed out per set, and an empty `lock`.
#[test]
fn disk_layout_is_the_reference_layout() {
    if !require_root(&[]) {
        return;
    }
    let tmp = TempDir::new("hl");
    let c = conf(
        "1.0.0",
        tmp.path(),
        json!({"ranges": [[{"subnet": "10.50.0.0/24"}], [{"subnet": "fd00:50::/64"}]]}),
    );
    add(&c, "c1", "eth0");
    add(&c, "c2", "net1");
    let want: BTreeMap<String, String> = [
        ("lock", ""),
        ("last_reserved_ip.0", "10.50.0.3"),
        ("last_reserved_ip.1", "fd00:50::3"),
        ("10.50.0.2", "c1\r\neth0"),
        ("fd00:50::2", "c1\r\neth0"),
        ("10.50.0.3", "c2\r\nnet1"),
        ("fd00:50::3", "c2\r\nnet1"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    assert_eq!(snapshot(tmp.path()), want);
    assert_eq!(
        ip_files(tmp.path(), NET),
        ["10.50.0.2", "10.50.0.3", "fd00:50::2", "fd00:50::3"]
    );
    // Nothing else lands in dataDir itself.
    let top: Vec<_> = std::fs::read_dir(tmp.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(top, [NET]);
}

/// Networks sharing a dataDir are independent: each has its own folder, lock and
/// round-robin position, so the same subnet hands out the same first address in both and
/// a DEL in one leaves the other alone.
#[test]
fn networks_in_one_data_dir_are_independent() {
    if !require_root(&[]) {
        return;
    }
    let tmp = TempDir::new("hl");
    let a = conf(
        "1.0.0",
        tmp.path(),
        json!({"ranges": [[{"subnet": "10.51.0.0/24"}]]}),
    );
    let mut b = a.clone();
    b["name"] = json!("othernet");
    assert_eq!(addr(&add(&a, "c1", "eth0")), "10.51.0.2");
    assert_eq!(addr(&add(&b, "c1", "eth0")), "10.51.0.2");
    assert_eq!(addr(&add(&b, "c2", "eth0")), "10.51.0.3");
    del(&a, "c1", "eth0");
    assert!(ip_files(tmp.path(), NET).is_empty());
    assert_eq!(ip_files(tmp.path(), "othernet"), ["10.51.0.2", "10.51.0.3"]);
}

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
// DEL
// ---------------------------------------------------------------------------------------

/// DEL releases every address of exactly that container id + ifname, and nothing else.
#[test]
fn del_releases_only_that_attachment() {
    if !require_root(&[]) {
        return;
    }
    let tmp = TempDir::new("hl");
    let c = conf(
        "1.0.0",
        tmp.path(),
        json!({"ranges": [[{"subnet": "10.70.0.0/24"}], [{"subnet": "fd00:70::/64"}]]}),
    );
    add(&c, "c1", "eth0");
    add(&c, "c1", "eth1");
    add(&c, "c2", "eth0");
    del(&c, "c1", "eth0");
    assert_eq!(
        ip_files(tmp.path(), NET),
        ["10.70.0.3", "10.70.0.4", "fd00:70::3", "fd00:70::4"]
    );
    assert_eq!(holder(tmp.path(), "10.70.0.3"), "c1\r\neth1");
    assert_eq!(holder(tmp.path(), "fd00:70::4"), "c2\r\neth0");
    del(&c, "c1", "eth0");
    assert_eq!(
        ip_files(tmp.path(), NET).len(),
        4,
        "a second DEL is a no-op"
    );
    // The spec makes CNI_NETNS optional for DEL (the namespace may be gone).
    let out = Cni::new(ours(), None)
        .env("CNI_CONTAINERID", "c1")
        .env("CNI_IFNAME", "eth1")
        .env("CNI_PATH", "/usr/lib/cni")
        .call("DEL", &c.to_string());
    out.ok();
    assert_eq!(ip_files(tmp.path(), NET), ["10.70.0.4", "fd00:70::4"]);
    del(&c, "c2", "eth0");
    assert!(ip_files(tmp.path(), NET).is_empty());
}

/// DEL succeeds when nothing is reserved, for an unknown container, and when dataDir does
/// not exist, which it must not create.
#[test]
fn del_without_reservation_or_data_dir_succeeds() {
    if !require_root(&[]) {
        return;
    }
    let tmp = TempDir::new("hl");
    let missing = tmp.path().join("missing");
    let c = conf(
        "1.0.0",
        &missing,
        json!({"ranges": [[{"subnet": "10.71.0.0/24"}]]}),
    );
    del(&c, "c1", "eth0");
    del(&c, "c1", "eth0");
    assert!(!missing.exists(), "DEL created dataDir");
    for v in VERSIONS {
        let c = conf(
            v,
            tmp.path(),
            json!({"ranges": [[{"subnet": "10.71.0.0/24"}]]}),
        );
        del(&c, "nobody", "eth0");
    }
    add(
        &conf(
            "1.0.0",
            tmp.path(),
            json!({"ranges": [[{"subnet": "10.71.0.0/24"}]]}),
        ),
        "c1",
        "eth0",
    );
    del(
        &conf(
            "1.0.0",
            tmp.path(),
            json!({"ranges": [[{"subnet": "10.71.0.0/24"}]]}),
        ),
        "nobody",
        "eth0",
    );
    assert_eq!(ip_files(tmp.path(), NET), ["10.71.0.2"]);
}

// ---------------------------------------------------------------------------------------
// CHECK
// ---------------------------------------------------------------------------------------

/// CHECK with the ADD result as prevResult succeeds while the reservation exists and
/// fails after DEL, or when prevResult names an address the attachment does not hold.
#[test]
fn check_follows_reservations() {
    if !require_root(&[]) {
        return;
    }
    for v in ["1.1.0", "1.0.0", "0.4.0"] {
        let tmp = TempDir::new("hl");
        let mut c = conf(
            v,
            tmp.path(),
            json!({"ranges": [[{"subnet": "10.72.0.0/24"}], [{"subnet": "fd00:72::/64"}]]}),
        );
        let result = add(&c, "c1", "eth0");
        c["prevResult"] = result.clone();
        let out = call(&ours(), "CHECK", &c, "c1", "eth0");
        assert!(out.stdout.trim().is_empty(), "CHECK printed {}", out.stdout);
        out.ok();
        failed(call(&ours(), "CHECK", &c, "c1", "eth1"));

        let mut wrong = c.clone();
        wrong["prevResult"]["ips"][0]["address"] = json!("10.72.0.99/24");
        failed(call(&ours(), "CHECK", &wrong, "c1", "eth0"));

        del(&c, "c1", "eth0");
        failed(call(&ours(), "CHECK", &c, "c1", "eth0"));
    }
}

/// The spec allows CHECK from 0.4.0 on: a 0.3.x configuration must fail with code 1
/// (the reference says "config version does not allow CHECK").
#[test]
fn check_needs_version_040() {
    if !require_root(&[]) {
        return;
    }
    let tmp = TempDir::new("hl");
    let c = conf(
        "0.3.1",
        tmp.path(),
        json!({"ranges": [[{"subnet": "10.73.0.0/24"}]]}),
    );
    add(&c, "c1", "eth0");
    call(&ours(), "CHECK", &c, "c1", "eth0").err(1);
}

// ---------------------------------------------------------------------------------------
// GC, STATUS, VERSION (spec 1.1.0)
// ---------------------------------------------------------------------------------------

/// GC keeps the reservations of the valid attachments and releases every other one
/// (another ifname of a valid container included); with no list it releases all.
#[test]
fn gc_releases_all_but_valid_attachments() {
    if !require_root(&[]) {
        return;
    }
    let tmp = TempDir::new("hl");
    let mut c = conf(
        "1.1.0",
        tmp.path(),
        json!({"ranges": [[{"subnet": "10.74.0.0/24"}], [{"subnet": "fd00:74::/64"}]]}),
    );
    add(&c, "c1", "eth0"); // .2
    add(&c, "c1", "eth1"); // .3
    add(&c, "c2", "eth0"); // .4
    add(&c, "c3", "eth0"); // .5
    c["cni.dev/valid-attachments"] = json!([
        {"containerID": "c1", "ifname": "eth0"},
        {"containerID": "c3", "ifname": "eth0"},
        {"containerID": "gone", "ifname": "eth0"},
    ]);
    let out = call_plain("GC", &c);
    assert!(out.stdout.trim().is_empty(), "GC printed {}", out.stdout);
    out.ok();
    assert_eq!(
        ip_files(tmp.path(), NET),
        ["10.74.0.2", "10.74.0.5", "fd00:74::2", "fd00:74::5"]
    );
    assert_eq!(holder(tmp.path(), "10.74.0.5"), "c3\r\neth0");
    // Idempotent.
    call_plain("GC", &c).ok();
    assert_eq!(ip_files(tmp.path(), NET).len(), 4);

    c["cni.dev/valid-attachments"] = json!([]);
    call_plain("GC", &c).ok();
    assert!(ip_files(tmp.path(), NET).is_empty());

    // A missing dataDir is fine and stays missing.
    let missing = tmp.path().join("missing");
    call_plain(
        "GC",
        &conf(
            "1.1.0",
            &missing,
            json!({"ranges": [[{"subnet": "10.74.0.0/24"}]]}),
        ),
    )
    .ok();
    assert!(!missing.exists(), "GC created dataDir");
}

/// STATUS succeeds while an address is free, fails with code 50 once a range set is
/// exhausted, and succeeds again after a DEL.
#[test]
fn status_reports_exhaustion() {
    if !require_root(&[]) {
        return;
    }
    let tmp = TempDir::new("hl");
    let c = conf(
        "1.1.0",
        tmp.path(),
        json!({"ranges": [
            [{"subnet": "10.75.0.0/24"}],
            [{"subnet": "fd00:75::/64", "rangeStart": "fd00:75::10", "rangeEnd": "fd00:75::11"}],
        ]}),
    );
    let out = call_plain("STATUS", &c);
    assert!(
        out.stdout.trim().is_empty(),
        "STATUS printed {}",
        out.stdout
    );
    out.ok();
    add(&c, "c1", "eth0");
    call_plain("STATUS", &c).ok();
    add(&c, "c2", "eth0");
    call_plain("STATUS", &c).err(50);
    assert_eq!(
        ip_files(tmp.path(), NET).len(),
        4,
        "STATUS must not change reservations"
    );
    assert_eq!(
        snapshot(tmp.path()).len(),
        7,
        "STATUS must leave no stray file"
    );
    del(&c, "c1", "eth0");
    call_plain("STATUS", &c).ok();
}

/// STATUS and GC are spec 1.1.0 verbs: a 1.0.0 configuration fails with code 1 and GC
/// then releases nothing.
#[test]
fn status_and_gc_need_version_110() {
    if !require_root(&[]) {
        return;
    }
    let tmp = TempDir::new("hl");
    let mut c = conf(
        "1.0.0",
        tmp.path(),
        json!({"ranges": [[{"subnet": "10.76.0.0/24"}]]}),
    );
    add(&c, "c1", "eth0");
    call_plain("STATUS", &c).err(1);
    c["cni.dev/valid-attachments"] = json!([]);
    call_plain("GC", &c).err(1);
    assert_eq!(ip_files(tmp.path(), NET), ["10.76.0.2"]);
}

/// VERSION needs no configuration and lists every version from 0.3.0 to 1.1.0.
#[test]
fn version_lists_supported_versions() {
    if !require_root(&[]) {
        return;
    }
    let v = Cni::new(ours(), None).call("VERSION", "").ok();
    assert_eq!(v["cniVersion"], "1.1.0");
    let listed: BTreeSet<&str> = v["supportedVersions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s.as_str().unwrap())
        .collect();
    for want in ["0.3.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0"] {
        assert!(listed.contains(want), "VERSION lacks {want}: {v}");
    }
}

// ---------------------------------------------------------------------------------------
// Bad input
// ---------------------------------------------------------------------------------------

/// Malformed input fails with the spec's error code and touches no file: malformed
/// JSON 6, no ipam or no ranges 999 (as the reference: a plain error of its config loading), unknown cniVersion 1, bad CNI_IFNAME or missing
/// CNI_CONTAINERID 4.
#[test]
fn bad_input_is_refused_with_spec_codes() {
    if !require_root(&[]) {
        return;
    }
    let tmp = TempDir::new("hl");
    let dd = tmp.path().to_str().unwrap();
    let good = conf(
        "1.0.0",
        tmp.path(),
        json!({"ranges": [[{"subnet": "10.77.0.0/24"}]]}),
    )
    .to_string();
    // (what, stdin, an env override (empty value: unset), expected code)
    type Case<'a> = (&'a str, String, Option<(&'a str, &'a str)>, u64);
    let cases: Vec<Case> = vec![
        ("malformed JSON", format!(r#"{{"cniVersion":"1.0.0","name":"{NET}","ipam":{{"dataDir":"{dd}""#), None, 6),
        ("not an object", "[1,2]".to_string(), None, 6),
        ("no ipam", json!({"cniVersion": "1.0.0", "name": NET, "type": "bridge"}).to_string(), None, 999),
        (
            "no ranges",
            json!({"cniVersion": "1.0.0", "name": NET, "type": "bridge", "ipam": {"type": "host-local", "dataDir": dd}})
                .to_string(),
            None,
            999,
        ),
        ("unknown cniVersion", good.replace("\"1.0.0\"", "\"9.9.9\""), None, 1),
        ("ifname of 16 chars", good.clone(), Some(("CNI_IFNAME", "eth0123456789abc")), 4),
        ("ifname with a slash", good.clone(), Some(("CNI_IFNAME", "eth/0")), 4),
        ("no CNI_CONTAINERID", good.clone(), Some(("CNI_CONTAINERID", "")), 4),
        ("CNI_CONTAINERID with a path", good.clone(), Some(("CNI_CONTAINERID", "../etc")), 4),
    ];
    for (what, stdin, over, code) in cases {
        let mut env = vec![
            ("CNI_CONTAINERID", "c1"),
            ("CNI_IFNAME", "eth0"),
            ("CNI_NETNS", NETNS),
            ("CNI_PATH", "/usr/lib/cni"),
        ];
        if let Some((k, v)) = over {
            env.retain(|(ek, _)| *ek != k);
            env.push((k, v));
        }
        let mut cni = Cni::new(ours(), None);
        for (k, v) in env.into_iter().filter(|(_, v)| !v.is_empty()) {
            cni = cni.env(k, v);
        }
        let out = cni.call("ADD", &stdin);
        assert_eq!(
            out.json["code"].as_u64(),
            Some(code),
            "{what}: {}{}",
            out.stdout,
            out.stderr
        );
        out.err(code);
        assert!(
            ip_files(tmp.path(), NET).is_empty(),
            "{what}: left a reservation"
        );
        assert!(
            !tmp.path().join(NET).exists(),
            "{what}: created the network folder"
        );
    }
    // An unreadable resolvConf fails the ADD before anything is reserved.
    let c = conf(
        "1.0.0",
        tmp.path(),
        json!({"ranges": [[{"subnet": "10.77.0.0/24"}]], "resolvConf": tmp.path().join("nonexistent").to_str().unwrap()}),
    );
    failed(call(&ours(), "ADD", &c, "c1", "eth0"));
    assert!(
        ip_files(tmp.path(), NET).is_empty(),
        "missing resolvConf: left a reservation"
    );
    // A network name that would leave dataDir is refused (7) and creates nothing.
    let mut c = conf(
        "1.0.0",
        &tmp.path().join("data"),
        json!({"ranges": [[{"subnet": "10.77.0.0/24"}]]}),
    );
    c["name"] = json!("../escape");
    call(&ours(), "ADD", &c, "c1", "eth0").err(7);
    assert!(
        !tmp.path().join("escape").exists() && !tmp.path().join("data").exists(),
        "bad network name created a folder"
    );
    // The good configuration does work, so the failures above were about the input.
    add(&serde_json::from_str(&good).unwrap(), "c1", "eth0");
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

// ---------------------------------------------------------------------------------------
// Against the reference plugin
// ---------------------------------------------------------------------------------------

/// One step of a differential scenario.
enum Step {
    /// ADD (container id, ifname, CNI_ARGS).
    Add(&'static str, &'static str, &'static str),
    Del(&'static str, &'static str),
}

/// Runs `steps` with ours and the reference on the same configuration (each with its
/// own dataDir) and demands equal results, equal failures and equal files after every
/// step; then DELs every attachment with both and compares again.
fn differential(reference: &Path, ipam: Value, steps: &[Step]) {
    let (d_ours, d_ref) = (TempDir::new("hl"), TempDir::new("hlref"));
    let (resolv, _) = resolv_conf(d_ours.path());
    let with = |dir: &Path| {
        let mut ipam = ipam.clone();
        if ipam.get("resolvConf").is_some() {
            ipam["resolvConf"] = json!(resolv);
        }
        conf("1.0.0", dir, ipam)
    };
    let (c_ours, c_ref) = (with(d_ours.path()), with(d_ref.path()));
    let mut attachments = BTreeSet::new();
    for (n, step) in steps.iter().enumerate() {
        let what = match step {
            Step::Add(id, ifname, args) => {
                attachments.insert((*id, *ifname));
                let env = [("CNI_ARGS", *args)];
                let env: &[(&str, &str)] = if args.is_empty() { &[] } else { &env };
                let ours = call_env(&ours(), "ADD", &c_ours, id, ifname, env);
                let theirs = call_env(reference, "ADD", &c_ref, id, ifname, env);
                assert_eq!(
                    ours.code == 0,
                    theirs.code == 0,
                    "step {n} ADD {id}/{ifname} {args}: ours {} vs reference {}",
                    ours.stdout,
                    theirs.stdout
                );
                if ours.code == 0 {
                    assert_eq!(
                        ours.json, theirs.json,
                        "step {n}: ADD {id}/{ifname} {args} results differ"
                    );
                }
                format!("ADD {id}/{ifname} {args}")
            }
            Step::Del(id, ifname) => {
                call(&ours(), "DEL", &c_ours, id, ifname).ok();
                call(reference, "DEL", &c_ref, id, ifname).ok();
                format!("DEL {id}/{ifname}")
            }
        };
        assert_eq!(
            snapshot(d_ours.path()),
            snapshot(d_ref.path()),
            "step {n} ({what}): files differ (left ours)"
        );
    }
    for (id, ifname) in attachments {
        call(&ours(), "DEL", &c_ours, id, ifname).ok();
        call(reference, "DEL", &c_ref, id, ifname).ok();
    }
    assert!(ip_files(d_ours.path(), NET).is_empty());
    assert_eq!(
        snapshot(d_ours.path()),
        snapshot(d_ref.path()),
        "after DEL of everything"
    );
}

/// The scenario every differential configuration runs: plain ADDs, a second ifname,
/// a requested address, a DEL of the last address (round-robin must not reuse it) and of
/// an older one.
fn scenario(requested: &'static str) -> Vec<Step> {
    vec![
        Step::Add("c1", "eth0", ""),
        Step::Add("c2", "eth0", ""),
        Step::Add("c1", "eth1", ""),
        Step::Del("c1", "eth1"),
        Step::Add("c3", "eth0", ""),
        Step::Add("c4", "eth0", requested),
        Step::Add("c5", "eth0", ""),
        Step::Del("c2", "eth0"),
        Step::Add("c6", "eth0", ""),
        Step::Del("nobody", "eth0"),
    ]
}

/// IPv4 `ranges` with two ranges in the set, routes and resolvConf: same results, same files.
#[test]
fn same_as_reference_ipv4() {
    if !require_root(&[]) {
        return;
    }
    let Some(reference) = reference() else { return };
    differential(
        &reference,
        json!({
            "ranges": [[
                {"subnet": "10.80.0.0/24", "rangeStart": "10.80.0.250"},
                {"subnet": "10.80.1.0/24", "rangeEnd": "10.80.1.100", "gateway": "10.80.1.254"},
            ]],
            "routes": [{"dst": "0.0.0.0/0"}, {"dst": "192.168.0.0/16", "gw": "10.80.0.254"}],
            "resolvConf": "",
        }),
        &scenario("IgnoreUnknown=1;IP=10.80.1.50"),
    );
}

/// IPv6 `ranges`: same results, same files.
#[test]
fn same_as_reference_ipv6() {
    if !require_root(&[]) {
        return;
    }
    let Some(reference) = reference() else { return };
    differential(
        &reference,
        json!({"ranges": [[{"subnet": "fd00:81::/64"}]], "routes": [{"dst": "::/0"}], "resolvConf": ""}),
        &scenario("IgnoreUnknown=1;IP=fd00:81::1:5"),
    );
}

/// Dual-stack (two range sets): same results, same files, including both
/// last_reserved_ip files.
#[test]
fn same_as_reference_dual_stack() {
    if !require_root(&[]) {
        return;
    }
    let Some(reference) = reference() else { return };
    differential(
        &reference,
        json!({
            "ranges": [[{"subnet": "10.82.0.0/16", "rangeStart": "10.82.3.1", "rangeEnd": "10.82.3.200"}], [{"subnet": "fd00:82::/120"}]],
            "routes": [{"dst": "0.0.0.0/0"}, {"dst": "::/0"}],
            "resolvConf": "",
        }),
        &scenario("IgnoreUnknown=1;IP=10.82.3.100"),
    );
}

/// A legacy-form /29 with the gateway inside the range, driven past exhaustion and
/// round the wrap: same addresses in the same order, both fail when full, same files.
#[test]
fn same_as_reference_small_range_wraparound() {
    if !require_root(&[]) {
        return;
    }
    let Some(reference) = reference() else { return };
    use Step::*;
    differential(
        &reference,
        json!({"subnet": "10.83.0.0/29", "gateway": "10.83.0.3"}),
        &[
            Add("a", "eth0", ""),
            Add("b", "eth0", ""),
            Add("c", "eth0", ""),
            Add("d", "eth0", ""),
            Add("e", "eth0", ""),
            Add("f", "eth0", ""),
            Del("e", "eth0"),
            Del("b", "eth0"),
            Add("g", "eth0", ""),
            Add("h", "eth0", ""),
            Add("i", "eth0", ""),
            Del("a", "eth0"),
            Add("j", "eth0", "IgnoreUnknown=1;IP=10.83.0.1"),
        ],
    );
}

/// A node can switch plugins: reservations written by the reference are honoured by
/// ours (not handed out again, released by our DEL) and the other way round.
#[test]
fn reservations_are_shared_with_reference() {
    if !require_root(&[]) {
        return;
    }
    let Some(reference) = reference() else { return };
    let tmp = TempDir::new("hl");
    let c = conf(
        "1.0.0",
        tmp.path(),
        json!({"ranges": [[{"subnet": "10.84.0.0/24"}], [{"subnet": "fd00:84::/64"}]]}),
    );

    let r1 = call(&reference, "ADD", &c, "c1", "eth0").ok();
    assert_eq!(addrs(&r1), ["10.84.0.2", "fd00:84::2"]);
    let r2 = add(&c, "c2", "eth0");
    assert_eq!(
        addrs(&r2),
        ["10.84.0.3", "fd00:84::3"],
        "ours must skip the reference's reservation and continue after it"
    );
    del(&c, "c1", "eth0");
    assert_eq!(
        ip_files(tmp.path(), NET),
        ["10.84.0.3", "fd00:84::3"],
        "our DEL must remove the reference's files"
    );

    // And back: the reference honours and releases what we reserved.
    let r3 = call(&reference, "ADD", &c, "c3", "eth0").ok();
    assert_eq!(addrs(&r3), ["10.84.0.4", "fd00:84::4"]);
    call(&reference, "DEL", &c, "c2", "eth0").ok();
    assert_eq!(ip_files(tmp.path(), NET), ["10.84.0.4", "fd00:84::4"]);
    // CHECK of ours accepts the reference's reservation.
    let mut chk = c.clone();
    chk["prevResult"] = r3;
    call(&ours(), "CHECK", &chk, "c3", "eth0").ok();
}

/// Files of old reference versions hold only the container id: they stay reserved and
/// DEL of that container (any ifname) releases them, as the reference does.
#[test]
fn legacy_id_only_reservations() {
    if !require_root(&[]) {
        return;
    }
    let Some(reference) = reference() else { return };
    let c_for = |dir: &Path| {
        conf(
            "1.0.0",
            dir,
            json!({"ranges": [[{"subnet": "10.85.0.0/24"}]]}),
        )
    };
    let (d_ours, d_ref) = (TempDir::new("hl"), TempDir::new("hlref"));
    for d in [d_ours.path(), d_ref.path()] {
        std::fs::create_dir_all(d.join(NET)).unwrap();
        std::fs::write(d.join(NET).join("10.85.0.2"), "old").unwrap();
    }
    let ours_r = add(&c_for(d_ours.path()), "c1", "eth0");
    let ref_r = call(&reference, "ADD", &c_for(d_ref.path()), "c1", "eth0").ok();
    assert_eq!(addr(&ours_r), "10.85.0.3");
    assert_eq!(ours_r, ref_r);
    del(&c_for(d_ours.path()), "old", "eth0");
    call(&reference, "DEL", &c_for(d_ref.path()), "old", "eth0").ok();
    assert_eq!(ip_files(d_ours.path(), NET), ["10.85.0.3"]);
    assert_eq!(snapshot(d_ours.path()), snapshot(d_ref.path()));
}

// ---------------------------------------------------------------------------------------
// Refused as the reference refuses
// ---------------------------------------------------------------------------------------

/// Every configuration the reference host-local (1.1.1) refuses in its config loading
/// and validation (skel's checks, `LoadIPAMConfig`, `Range.Canonicalize`,
/// `RangeSet.Canonicalize`, the overlap check, requested addresses, resolvConf,
/// dataDir), one row each: both plugins refuse it on ADD with the same CNI error code,
/// ours with a message naming what is wrong, and ours reserves nothing. The reference
/// reports everything past skel's own checks as 999 (a plain Go error).
#[test]
fn refuses_what_the_reference_refuses() {
    if !require_root(&[]) {
        return;
    }
    let Some(reference) = reference() else {
        return;
    };
    let tmp = TempDir::new("hl");
    let dd = tmp.path().to_str().unwrap().to_string();
    // (what, ipam settings or a whole stdin, CNI_ARGS, code, words our msg must hold)
    struct Case {
        what: &'static str,
        stdin: String,
        args: &'static str,
        code: u64,
        msg: &'static str,
    }
    let ipam = |v: Value| conf("1.0.0", tmp.path(), v).to_string();
    let range = |r: Value| ipam(json!({"ranges": [[r]]}));
    let whole = |mut v: Value| {
        v["type"] = json!("bridge");
        if let Some(i) = v.get_mut("ipam").filter(|i| i.is_object()) {
            i["dataDir"] = json!(dd);
        }
        v.to_string()
    };
    let case = |what, stdin, args, code, msg| Case {
        what,
        stdin,
        args,
        code,
        msg,
    };
    let cases = vec![
        // skel: decoding, name, version
        case(
            "malformed JSON",
            format!("{{\"cniVersion\":\"1.0.0\",\"name\":\"{NET}\""),
            "",
            6,
            "failed to decode",
        ),
        case("not an object", "[1,2]".into(), "", 6, ""),
        case(
            "name not a string",
            whole(json!({"cniVersion": "1.0.0", "name": 5, "ipam": {"type": "host-local"}})),
            "",
            6,
            "name",
        ),
        case(
            "no name",
            whole(
                json!({"cniVersion": "1.0.0", "ipam": {"type": "host-local", "subnet": "10.70.0.0/24"}}),
            ),
            "",
            7,
            "name",
        ),
        case(
            "name with a slash",
            whole(
                json!({"cniVersion": "1.0.0", "name": "a/b", "ipam": {"type": "host-local", "subnet": "10.70.0.0/24"}}),
            ),
            "",
            7,
            "name",
        ),
        case(
            "name starting with a dot",
            whole(
                json!({"cniVersion": "1.0.0", "name": ".x", "ipam": {"type": "host-local", "subnet": "10.70.0.0/24"}}),
            ),
            "",
            7,
            "name",
        ),
        case(
            "cniVersion not a string",
            range(json!({"subnet": "10.70.0.0/24"})).replace("\"1.0.0\"", "1"),
            "",
            6,
            "cniVersion",
        ),
        case(
            "unknown cniVersion",
            range(json!({"subnet": "10.70.0.0/24"})).replace("\"1.0.0\"", "\"9.9.9\""),
            "",
            1,
            "9.9.9",
        ),
        // LoadIPAMConfig
        case(
            "no ipam",
            whole(json!({"cniVersion": "1.0.0", "name": NET})),
            "",
            999,
            "ipam",
        ),
        case(
            "ipam not an object",
            whole(json!({"cniVersion": "1.0.0", "name": NET, "ipam": "host-local"})),
            "",
            999,
            "ipam",
        ),
        case("no ranges", ipam(json!({})), "", 999, "range"),
        case(
            "empty ranges",
            ipam(json!({"ranges": []})),
            "",
            999,
            "range",
        ),
        case(
            "ranges not a list",
            ipam(json!({"ranges": "10.70.0.0/24"})),
            "",
            999,
            "ranges",
        ),
        case(
            "empty range set",
            ipam(json!({"ranges": [[]]})),
            "",
            999,
            "empty",
        ),
        case(
            "subnet not a CIDR",
            range(json!({"subnet": "10.70.0.0"})),
            "",
            999,
            "10.70.0.0",
        ),
        case(
            "subnet garbage",
            range(json!({"subnet": "garbage"})),
            "",
            999,
            "garbage",
        ),
        case(
            "subnet not a string",
            range(json!({"subnet": 10})),
            "",
            999,
            "subnet",
        ),
        case(
            "range without subnet",
            range(json!({"rangeStart": "10.70.0.10"})),
            "",
            999,
            "subnet",
        ),
        case(
            "legacy subnet garbage",
            ipam(json!({"subnet": "garbage"})),
            "",
            999,
            "garbage",
        ),
        case(
            "subnet /32",
            range(json!({"subnet": "10.70.0.1/32"})),
            "",
            999,
            "too small",
        ),
        case(
            "subnet /31",
            range(json!({"subnet": "10.70.0.0/31"})),
            "",
            999,
            "too small",
        ),
        case(
            "subnet /128",
            range(json!({"subnet": "fd00:70::1/128"})),
            "",
            999,
            "too small",
        ),
        case(
            "subnet with host bits",
            range(json!({"subnet": "10.70.0.5/24"})),
            "",
            999,
            "10.70.0.0",
        ),
        case(
            "rangeStart outside",
            range(json!({"subnet": "10.70.0.0/24", "rangeStart": "10.71.0.10"})),
            "",
            999,
            "10.71.0.10",
        ),
        case(
            "rangeEnd outside",
            range(json!({"subnet": "10.70.0.0/24", "rangeEnd": "10.71.0.10"})),
            "",
            999,
            "10.71.0.10",
        ),
        case(
            "rangeStart garbage",
            range(json!({"subnet": "10.70.0.0/24", "rangeStart": "x"})),
            "",
            999,
            "rangeStart",
        ),
        case(
            "rangeEnd of the other family",
            range(json!({"subnet": "10.70.0.0/24", "rangeEnd": "fd00::5"})),
            "",
            999,
            "fd00::5",
        ),
        case(
            "gateway garbage",
            range(json!({"subnet": "10.70.0.0/24", "gateway": "x"})),
            "",
            999,
            "gateway",
        ),
        case(
            "mixed families in a set",
            ipam(json!({"ranges": [[{"subnet": "10.70.0.0/24"}, {"subnet": "fd00:70::/64"}]]})),
            "",
            999,
            "famil",
        ),
        case(
            "overlap inside a set",
            ipam(json!({"ranges": [[{"subnet": "10.70.0.0/24"}, {"subnet": "10.70.0.0/25"}]]})),
            "",
            999,
            "overlap",
        ),
        case(
            "overlapping sets",
            ipam(json!({"ranges": [[{"subnet": "10.70.0.0/24"}], [{"subnet": "10.70.0.128/25"}]]})),
            "",
            999,
            "overlap",
        ),
        case(
            "legacy subnet overlapping ranges",
            ipam(json!({"subnet": "10.70.0.0/24", "ranges": [[{"subnet": "10.70.0.0/24"}]]})),
            "",
            999,
            "overlap",
        ),
        case(
            "routes not a list",
            ipam(json!({"ranges": [[{"subnet": "10.70.0.0/24"}]], "routes": {"dst": "0.0.0.0/0"}})),
            "",
            999,
            "routes",
        ),
        case(
            "route dst garbage",
            ipam(json!({"ranges": [[{"subnet": "10.70.0.0/24"}]], "routes": [{"dst": "x"}]})),
            "",
            999,
            "dst",
        ),
        case(
            "route gw garbage",
            ipam(
                json!({"ranges": [[{"subnet": "10.70.0.0/24"}]], "routes": [{"dst": "0.0.0.0/0", "gw": "x"}]}),
            ),
            "",
            999,
            "gw",
        ),
        case(
            "dataDir not a string",
            ipam(json!({"ranges": [[{"subnet": "10.70.0.0/24"}]]}))
                .replace(&format!("\"{dd}\""), "7"),
            "",
            999,
            "dataDir",
        ),
        // requested addresses
        case(
            "CNI_ARGS IP garbage",
            range(json!({"subnet": "10.70.0.0/24"})),
            "IP=garbage",
            999,
            "garbage",
        ),
        case(
            "CNI_ARGS unknown key",
            range(json!({"subnet": "10.70.0.0/24"})),
            "FOO=bar",
            999,
            "FOO",
        ),
        case(
            "CNI_ARGS not key=value",
            range(json!({"subnet": "10.70.0.0/24"})),
            "IP",
            999,
            "IP",
        ),
        case(
            "args.cni.ips garbage",
            whole(
                json!({"cniVersion": "1.0.0", "name": NET, "ipam": {"type": "host-local", "ranges": [[{"subnet": "10.70.0.0/24"}]]}, "args": {"cni": {"ips": ["garbage"]}}}),
            ),
            "",
            999,
            "garbage",
        ),
        case(
            "runtimeConfig.ips garbage",
            whole(
                json!({"cniVersion": "1.0.0", "name": NET, "ipam": {"type": "host-local", "ranges": [[{"subnet": "10.70.0.0/24"}]]}, "runtimeConfig": {"ips": ["garbage"]}}),
            ),
            "",
            999,
            "garbage",
        ),
        case(
            "requested IP in no range",
            range(json!({"subnet": "10.70.0.0/24"})),
            "IP=10.99.0.5",
            999,
            "10.99.0.5",
        ),
        case(
            "requested IP is the gateway",
            range(json!({"subnet": "10.70.0.0/24"})),
            "IP=10.70.0.1",
            999,
            "10.70.0.1",
        ),
        case(
            "requested IP outside rangeStart..rangeEnd",
            range(
                json!({"subnet": "10.70.0.0/24", "rangeStart": "10.70.0.10", "rangeEnd": "10.70.0.20"}),
            ),
            "IP=10.70.0.30",
            999,
            "10.70.0.30",
        ),
        // files
        case(
            "resolvConf missing",
            ipam(
                json!({"ranges": [[{"subnet": "10.70.0.0/24"}]], "resolvConf": "/nonexistent/resolv.conf"}),
            ),
            "",
            999,
            "/nonexistent/resolv.conf",
        ),
        case(
            "dataDir under a file",
            ipam(json!({"ranges": [[{"subnet": "10.70.0.0/24"}]]})).replace(&dd, "/proc/version/x"),
            "",
            999,
            "/proc/version/x",
        ),
    ];
    let mut wrong = vec![];
    for c in &cases {
        let mut results = vec![];
        let mut left = false;
        for plugin in [&reference, &ours()] {
            let mut cni = attachment_env(
                Cni::new(plugin.to_path_buf(), None),
                "c1",
                NETNS,
                "eth0",
                Path::new("/usr/lib/cni"),
            );
            if !c.args.is_empty() {
                cni = cni.env("CNI_ARGS", c.args);
            }
            results.push(cni.call("ADD", &c.stdin));
            left = !ip_files(tmp.path(), NET).is_empty();
            let _ = std::fs::remove_dir_all(tmp.path().join(NET));
        }
        let ours = results.pop().unwrap();
        let theirs = results.pop().unwrap();
        if theirs.code == 0 || theirs.json["code"].as_u64() != Some(c.code) {
            wrong.push(format!(
                "{}: the reference changed: {}",
                c.what, theirs.stdout
            ));
            continue;
        }
        if ours.json["code"].as_u64() != Some(c.code) {
            wrong.push(format!(
                "{}: ours {} / reference {}",
                c.what, ours.json, theirs.json
            ));
            continue;
        }
        let msg = ours.json["msg"].as_str().unwrap_or_default();
        if msg.is_empty() || !msg.to_lowercase().contains(&c.msg.to_lowercase()) {
            wrong.push(format!(
                "{}: our msg should name {:?}: {msg:?}",
                c.what, c.msg
            ));
        }
        if left {
            wrong.push(format!("{}: ours left a reservation", c.what));
        }
    }
    assert!(
        wrong.is_empty(),
        "{} of {} cases:\n{}",
        wrong.len(),
        cases.len(),
        wrong.join("\n")
    );
}
