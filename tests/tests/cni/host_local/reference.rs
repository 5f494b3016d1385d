//! Against the reference plugin: the same results and files, reservations shared with it,
//! and every input it refuses refused the same way.

use super::*;
use std::collections::BTreeSet;

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
