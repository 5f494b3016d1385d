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
//!
//! Submodules by topic, in host_local/: `allocation`, `commands`, `reference`; ADD here.

#[path = "host_local/allocation.rs"]
mod allocation;
#[path = "host_local/commands.rs"]
mod commands;
#[path = "host_local/reference.rs"]
mod reference;

use crust_e2e::{attachment_env, ip_files, reference_plugin, require_root, Cni, CniOut, TempDir};
use serde_json::{json, Value};
use std::collections::BTreeMap;
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
