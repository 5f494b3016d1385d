//! DEL, CHECK, GC, STATUS and VERSION, and bad input refused with the spec's codes.

use super::*;
use std::collections::BTreeSet;

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
