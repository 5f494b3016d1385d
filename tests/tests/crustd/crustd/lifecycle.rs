//! The sandbox's lifecycle through CRI: run, status, list, stop and remove, a name taken
//! twice, pods made at once or made again, and bad requests refused.

use super::*;

/// Two pods get addresses from the bridge network, report READY with their IPs, reach
/// each other, and are stopped and removed without a trace.
#[tokio::test]
async fn two_pods_run_ping_stop_remove() {
    if !root() {
        return;
    }
    let d = Crustd::start();
    let mut c = d.client().await;
    let v = c
        .version(VersionRequest::default())
        .await
        .unwrap()
        .into_inner();
    assert_eq!(v.runtime_name, "crust");
    assert_eq!(v.runtime_api_version, "v1");

    let a = run(&mut c, pod_config("a", "uid-a")).await;
    let b = run(&mut c, pod_config("b", "uid-b")).await;
    let c0 = c.clone();
    let st = |id: String| {
        let mut c = c0.clone();
        async move {
            c.pod_sandbox_status(PodSandboxStatusRequest {
                pod_sandbox_id: id,
                verbose: true,
            })
            .await
            .unwrap()
            .into_inner()
        }
    };
    let sa = st(a.clone()).await;
    let sb = st(b.clone()).await;
    let status_a = sa.status.unwrap();
    assert_eq!(status_a.state, PodSandboxState::SandboxReady as i32);
    let ip_a = status_a.network.as_ref().unwrap().ip.clone();
    let ip_b = sb.status.unwrap().network.unwrap().ip;
    assert!(ip_a.starts_with("10.66.0."), "{ip_a}");
    assert_eq!(
        status_a.network.unwrap().additional_ips[0]
            .ip
            .split(':')
            .next(),
        Some("fd00")
    );
    let info: serde_json::Value = serde_json::from_str(&sa.info["info"]).unwrap();
    assert!(info["pid"].as_i64().unwrap() > 0, "{info}");

    let out = std::process::Command::new("nsenter")
        .arg(format!("--net={}", d.pin(&a, "net").display()))
        .args(["ping", "-c", "1", "-W", "2", &ip_b])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "pod a cannot reach pod b: {}",
        String::from_utf8_lossy(&out.stdout)
    );

    c.stop_pod_sandbox(StopPodSandboxRequest {
        pod_sandbox_id: a.clone(),
    })
    .await
    .unwrap();
    let s = st(a.clone()).await.status.unwrap();
    assert_eq!(s.state, PodSandboxState::SandboxNotready as i32);
    c.remove_pod_sandbox(RemovePodSandboxRequest {
        pod_sandbox_id: a.clone(),
    })
    .await
    .unwrap();
    c.remove_pod_sandbox(RemovePodSandboxRequest {
        pod_sandbox_id: b.clone(),
    })
    .await
    .unwrap();
    let list = c
        .list_pod_sandbox(ListPodSandboxRequest::default())
        .await
        .unwrap()
        .into_inner()
        .items;
    assert!(list.is_empty(), "{list:?}");
    assert!(d.mounts().is_empty(), "pins left: {:?}", d.mounts());
    assert!(crust_e2e::ip_files(d.ipam_data.path(), "crust-e2e").is_empty());
}

/// PodSandboxStatus reports what RunPodSandbox was asked and what it made: READY, a
/// creation time, both IPs of the dual-stack network (v4 primary), the namespace
/// options, labels, annotations, metadata and runtime handler; and with `verbose` the
/// info map in containerd's shape (live pause pid, netns pin, cgroup, config).
#[tokio::test]
async fn status_reports_what_was_asked() {
    if !root() {
        return;
    }
    let d = Crustd::start();
    let mut c = d.client().await;
    let t0 = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos() as i64;
    let mut cfg = pod_with_modes(
        "web",
        NamespaceMode::Pod,
        NamespaceMode::Container,
        NamespaceMode::Pod,
    );
    cfg.metadata.as_mut().unwrap().namespace = "shop".into();
    cfg.metadata.as_mut().unwrap().attempt = 2;
    cfg.labels.insert("tier".into(), "front".into());
    cfg.annotations
        .insert("example.com/note".into(), "hello, world".into());
    let id = try_run(&mut c, Some(cfg), "crust").await.unwrap();
    assert_eq!(id.len(), 64, "{id}");
    let t1 = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos() as i64;

    let (s, info) = status(&mut c, &id).await;
    assert_eq!(s.id, id);
    assert_eq!(s.state, PodSandboxState::SandboxReady as i32);
    assert!(
        (t0..=t1).contains(&s.created_at),
        "created_at {} not in [{t0}, {t1}]",
        s.created_at
    );
    let md = s.metadata.unwrap();
    assert_eq!(
        (md.name.as_str(), md.namespace.as_str(), md.uid.as_str()),
        ("web", "shop", "uid-web")
    );
    assert_eq!(md.attempt, 2);
    let net = s.network.unwrap();
    assert!(net.ip.starts_with("10.66.0."), "primary IP {}", net.ip);
    assert_eq!(net.additional_ips.len(), 1, "{:?}", net.additional_ips);
    let v6 = &net.additional_ips[0].ip;
    assert!(
        v6.starts_with("fd00:66:") && v6.parse::<std::net::Ipv6Addr>().is_ok(),
        "{v6}"
    );
    let ns = s.linux.unwrap().namespaces.unwrap().options.unwrap();
    assert_eq!(ns.network, NamespaceMode::Pod as i32);
    assert_eq!(ns.pid, NamespaceMode::Container as i32);
    assert_eq!(ns.ipc, NamespaceMode::Pod as i32);
    assert_eq!(s.labels.get("tier").map(String::as_str), Some("front"));
    assert_eq!(s.labels.get("app").map(String::as_str), Some("web"));
    assert_eq!(
        s.annotations.get("example.com/note").map(String::as_str),
        Some("hello, world")
    );
    assert_eq!(s.runtime_handler, "crust");

    // Verbose info, as containerd fills it.
    let pid = info["pid"].as_i64().unwrap() as i32;
    assert!(alive(pid), "pause {pid} from info is not running: {info}");
    assert_eq!(
        d.pause_pids(),
        vec![pid],
        "the info's pid is the pause process"
    );
    assert_eq!(info["processStatus"], "running");
    assert_eq!(info["runtimeHandler"], "crust");
    assert_eq!(info["netns"], d.pin(&id, "net").display().to_string());
    assert_eq!(info["netNamespaceClosed"], false);
    assert_eq!(info["config"]["metadata"]["name"], "web");
    assert_eq!(info["config"]["metadata"]["namespace"], "shop");
    assert_eq!(info["config"]["hostname"], "web");
    assert_eq!(info["config"]["labels"]["tier"], "front");
    let cg = info["cgroupPath"].as_str().unwrap_or_default();
    assert!(cg.ends_with(&id), "cgroupPath {cg:?}");
    assert!(info["cniResult"]["ips"].as_array().is_some(), "{info}");
    // The pin is the pause's network namespace.
    assert_eq!(ns_ino(&d.pin(&id, "net")), proc_ns(pid, "net"));
    // The pause sits in the pod cgroup.
    let pod_cgroups = d.leftovers().pod_cgroups;
    assert!(
        !pod_cgroups.is_empty() && pod_cgroups.iter().all(|p| p.ends_with(&id)),
        "{pod_cgroups:?}"
    );
    // In every hierarchy (each v1 controller's and the cgroup2 one): it is born there.
    // Without a cgroup_parent, crust made a pod-level cgroup of the same name above the
    // pause's (where the containers go, beside it): the pause is in the lower one.
    let pause_cgroups: Vec<_> = pod_cgroups
        .iter()
        .filter(|p| p.parent().is_some_and(|d| d.ends_with(&id)))
        .collect();
    assert!(!pause_cgroups.is_empty(), "{pod_cgroups:?}");
    for dir in pause_cgroups {
        let procs = std::fs::read_to_string(dir.join("cgroup.procs")).unwrap();
        assert!(
            procs.lines().any(|l| l.trim() == pid.to_string()),
            "pause {pid} not in {}: {procs}",
            dir.display()
        );
    }

    // Without verbose, no info.
    let r = c
        .pod_sandbox_status(PodSandboxStatusRequest {
            pod_sandbox_id: id.clone(),
            verbose: false,
        })
        .await
        .unwrap()
        .into_inner();
    assert!(r.info.is_empty(), "{:?}", r.info);

    // A unique prefix of the id works as the id.
    assert_eq!(status(&mut c, &id[..12]).await.0.id, id);
}

/// ListPodSandbox filters by exact id, by a unique id prefix, by state and by label
/// selector (every pair must match), and lists everything without a filter.
#[tokio::test]
async fn list_filters() {
    if !root() {
        return;
    }
    let d = Crustd::start();
    let mut c = d.client().await;
    let mut cfg = pod_config("l1", "u1");
    cfg.labels.insert("tier".into(), "front".into());
    let a = run(&mut c, cfg).await;
    let mut cfg = pod_config("l2", "u2");
    cfg.labels.insert("tier".into(), "back".into());
    let b = run(&mut c, cfg).await;
    let mut cfg = pod_config("l3", "u3");
    cfg.labels.insert("tier".into(), "front".into());
    let e = run(&mut c, cfg).await;
    stop(&mut c, &e).await;

    let mut all = vec![a.clone(), b.clone(), e.clone()];
    all.sort();
    let full = list(&mut c, None).await;
    let mut ids: Vec<String> = full.iter().map(|p| p.id.clone()).collect();
    ids.sort();
    assert_eq!(ids, all);
    let la = full.iter().find(|p| p.id == a).unwrap();
    assert_eq!(la.metadata.as_ref().unwrap().name, "l1");
    assert_eq!(la.state, PodSandboxState::SandboxReady as i32);
    assert_eq!(la.labels["tier"], "front");
    assert!(la.created_at > 0);
    assert!(full.windows(2).all(|w| w[0].created_at <= w[1].created_at));

    let f = |id: &str| PodSandboxFilter {
        id: id.into(),
        ..Default::default()
    };
    assert_eq!(list_ids(&mut c, f(&a)).await, vec![a.clone()]);
    // The shortest prefix that tells `b` apart from the others.
    let n = (1..=64)
        .find(|&n| [&a, &e].iter().all(|o| !o.starts_with(&b[..n])))
        .unwrap();
    assert_eq!(list_ids(&mut c, f(&b[..n.max(8)])).await, vec![b.clone()]);
    assert!(list_ids(&mut c, f("nonexistent")).await.is_empty());

    let by_state = |s: PodSandboxState| PodSandboxFilter {
        state: Some(PodSandboxStateValue { state: s as i32 }),
        ..Default::default()
    };
    let mut ready = vec![a.clone(), b.clone()];
    ready.sort();
    assert_eq!(
        list_ids(&mut c, by_state(PodSandboxState::SandboxReady)).await,
        ready
    );
    assert_eq!(
        list_ids(&mut c, by_state(PodSandboxState::SandboxNotready)).await,
        vec![e.clone()]
    );

    let by_labels = |l: &[(&str, &str)]| PodSandboxFilter {
        label_selector: l
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
        ..Default::default()
    };
    let mut front = vec![a.clone(), e.clone()];
    front.sort();
    assert_eq!(
        list_ids(&mut c, by_labels(&[("tier", "front")])).await,
        front
    );
    assert_eq!(
        list_ids(&mut c, by_labels(&[("tier", "front"), ("app", "l3")])).await,
        vec![e.clone()]
    );
    assert!(list_ids(&mut c, by_labels(&[("tier", "middle")]))
        .await
        .is_empty());
    // Filters combine: front and ready.
    let mut both = by_labels(&[("tier", "front")]);
    both.state = Some(PodSandboxStateValue {
        state: PodSandboxState::SandboxReady as i32,
    });
    assert_eq!(list_ids(&mut c, both).await, vec![a.clone()]);
}

/// StopPodSandbox leaves the record (NOTREADY, IPs kept for the kubelet) but ends the
/// pause, releases the IPs from host-local's data dir, deletes the veth in the node
/// namespace and unpins the namespaces. RemovePodSandbox then removes the record, the
/// pod files, the pod cgroup and every mount. Both are idempotent, also for ids nobody
/// knows; the status of an unknown (or removed) id is NotFound.
#[tokio::test]
async fn stop_then_remove_leave_nothing() {
    if !root() {
        return;
    }
    let d = Crustd::start();
    let mut c = d.client().await;
    let empty = d.leftovers();
    let keep = run(&mut c, pod_config("keep", "uid-keep")).await;
    let with_keep = d.leftovers();
    let id = run(&mut c, pod_config("victim", "uid-victim")).await;
    let pid = pause_pid(&mut c, &id).await;
    let (ip, ip6) = ips(&mut c, &id).await;
    let l = d.leftovers();
    assert_eq!(l.veths.len(), 2, "{l:?}");
    assert_eq!(l.ip_files.len(), 4, "{l:?}");
    assert!(l.ip_files.contains(&ip), "{l:?}");
    assert_eq!(l.pauses.len(), 2);
    assert!(l.masq_rules >= 2, "{l:?}");
    for kind in ["net", "ipc", "uts", "pid"] {
        assert!(
            l.mounts.contains(&d.pin(&id, kind).display().to_string()),
            "{kind} pin missing: {l:?}"
        );
    }
    assert!(d.pod_file(&id, "hostname").is_file());
    assert!(d.pod_file(&id, "record.json").is_file());

    stop(&mut c, &id).await;
    assert_eq!(state(&mut c, &id).await, PodSandboxState::SandboxNotready);
    assert!(wait_gone(pid), "pause {pid} survived StopPodSandbox");
    let (s, info) = status(&mut c, &id).await;
    assert_eq!(info["pid"], 0, "{info}");
    assert_eq!(info["processStatus"], "stopped");
    // The kubelet still sees the addresses the pod had.
    assert_eq!(s.network.unwrap().ip, ip);
    let l = d.leftovers();
    assert_eq!(l.veths, with_keep.veths, "veth left after stop");
    assert_eq!(
        l.ip_files, with_keep.ip_files,
        "IPs still reserved after stop"
    );
    assert!(!l.ip_files.contains(&ip) && !l.ip_files.contains(&ip6[0]));
    assert_eq!(l.mounts, with_keep.mounts, "pins left after stop");
    assert_eq!(l.pauses, with_keep.pauses);
    assert_eq!(l.masq_rules, with_keep.masq_rules, "masquerade rule left");
    assert!(!d.pin(&id, "net").exists(), "net pin file left");
    // The record and files stay until remove.
    assert!(d.pod_file(&id, "record.json").is_file());
    assert!(l.pod_cgroups.iter().any(|p| p.ends_with(&id)));

    // Stop again, and stop of an unknown id: both fine.
    stop(&mut c, &id).await;
    stop(&mut c, &"0".repeat(64)).await;
    stop(&mut c, "no-such-sandbox").await;
    assert_eq!(state(&mut c, &id).await, PodSandboxState::SandboxNotready);

    remove(&mut c, &id).await;
    assert_code(
        try_status(&mut c, &id).await,
        Code::NotFound,
        "status after remove",
    );
    assert_nothing_left(&d, &with_keep, "StopPodSandbox + RemovePodSandbox");
    assert!(!d.pod_file(&id, "").exists(), "sandbox dir left");
    assert!(!d.pin(&id, "").exists(), "pin dir left");
    assert!(d.cgroup_dirs().iter().all(|p| !p.ends_with(&id)));
    remove(&mut c, &id).await;
    remove(&mut c, &"f".repeat(64)).await;
    assert_code(
        try_status(&mut c, &"e".repeat(64)).await,
        Code::NotFound,
        "status of an unknown id",
    );

    // The other pod was untouched; removing a READY pod without a stop works too.
    assert_eq!(state(&mut c, &keep).await, PodSandboxState::SandboxReady);
    remove(&mut c, &keep).await;
    assert_nothing_left(&d, &empty, "RemovePodSandbox of a ready pod");
    assert!(list(&mut c, None).await.is_empty());
}

/// A second RunPodSandbox for the same name, namespace, uid and attempt fails with
/// AlreadyExists (the name is reserved, as in containerd) and leaves the first pod
/// alone; another attempt of the same pod is fine, and after RemovePodSandbox the
/// name is free again.
#[tokio::test]
async fn same_pod_twice_is_already_exists() {
    if !root() {
        return;
    }
    let d = Crustd::start();
    let mut c = d.client().await;
    let first = run(&mut c, pod_config("dup", "uid-dup")).await;
    let before = d.leftovers();
    assert_code(
        try_run(&mut c, Some(pod_config("dup", "uid-dup")), "").await,
        Code::AlreadyExists,
        "the same pod twice",
    );
    assert_nothing_left(&d, &before, "the refused duplicate");
    assert_eq!(state(&mut c, &first).await, PodSandboxState::SandboxReady);
    assert_eq!(list(&mut c, None).await.len(), 1);

    // Stopped, the name is still taken (the kubelet removes before it reuses).
    stop(&mut c, &first).await;
    assert_code(
        try_run(&mut c, Some(pod_config("dup", "uid-dup")), "").await,
        Code::AlreadyExists,
        "the same pod twice, first stopped",
    );

    let mut next = pod_config("dup", "uid-dup");
    next.metadata.as_mut().unwrap().attempt = 1;
    let second = run(&mut c, next).await;
    assert_ne!(second, first);
    let (ip2, _) = ips(&mut c, &second).await;
    let other = run(&mut c, pod_config("other", "uid-other")).await;
    assert!(
        ping(&d, &other, &ip2),
        "the second attempt is not reachable"
    );

    remove(&mut c, &first).await;
    let again = run(&mut c, pod_config("dup", "uid-dup")).await;
    assert_eq!(state(&mut c, &again).await, PodSandboxState::SandboxReady);
}

/// Bad requests get InvalidArgument (or NotFound for an unknown id) with a message,
/// and leave nothing behind: also those found only after the pause, pins and cgroup
/// exist (an unknown sysctl, a bad bandwidth annotation, a bad cgroup parent).
#[tokio::test]
async fn bad_input_is_refused_and_leaves_nothing() {
    if !root() {
        return;
    }
    let d = Crustd::start();
    let mut c = d.client().await;
    let empty = d.leftovers();
    type Edit = Box<dyn Fn(&mut PodSandboxConfig)>;
    let cases: Vec<(&str, Option<Edit>, &str, Code)> = vec![
        ("no config", None, "", Code::InvalidArgument),
        (
            "no metadata",
            Some(Box::new(|c| c.metadata = None)),
            "",
            Code::InvalidArgument,
        ),
        (
            "empty name",
            Some(Box::new(|c| c.metadata.as_mut().unwrap().name.clear())),
            "",
            Code::InvalidArgument,
        ),
        (
            "empty namespace",
            Some(Box::new(|c| c.metadata.as_mut().unwrap().namespace.clear())),
            "",
            Code::InvalidArgument,
        ),
        (
            "empty uid",
            Some(Box::new(|c| c.metadata.as_mut().unwrap().uid.clear())),
            "",
            Code::InvalidArgument,
        ),
        (
            "malformed label key",
            Some(Box::new(|c| {
                c.labels.insert("bad key!".into(), "x".into());
            })),
            "",
            Code::InvalidArgument,
        ),
        (
            "malformed annotation key",
            Some(Box::new(|c| {
                c.annotations.insert("Bad.Prefix/x".into(), "x".into());
            })),
            "",
            Code::InvalidArgument,
        ),
        (
            "unknown runtime handler",
            Some(Box::new(|_| {})),
            "gvisor",
            Code::InvalidArgument,
        ),
        (
            "non-namespaced sysctl",
            Some(Box::new(|c| {
                c.linux
                    .as_mut()
                    .unwrap()
                    .sysctls
                    .insert("kernel.panic".into(), "1".into());
            })),
            "",
            Code::InvalidArgument,
        ),
        (
            "unknown sysctl",
            Some(Box::new(|c| {
                c.linux
                    .as_mut()
                    .unwrap()
                    .sysctls
                    .insert("net.ipv4.no_such_knob".into(), "1".into());
            })),
            "",
            Code::InvalidArgument,
        ),
        (
            "net sysctl on a hostNetwork pod",
            Some(Box::new(|c| {
                *c = pod_with_modes(
                    "bad",
                    NamespaceMode::Node,
                    NamespaceMode::Pod,
                    NamespaceMode::Pod,
                );
                c.linux
                    .as_mut()
                    .unwrap()
                    .sysctls
                    .insert("net.ipv4.ip_forward".into(), "1".into());
            })),
            "",
            Code::InvalidArgument,
        ),
        (
            "bad bandwidth annotation",
            Some(Box::new(|c| {
                c.annotations
                    .insert("kubernetes.io/ingress-bandwidth".into(), "fast".into());
            })),
            "",
            Code::InvalidArgument,
        ),
        (
            "cgroup parent escaping its root",
            Some(Box::new(|c| {
                c.linux.as_mut().unwrap().cgroup_parent = "../../escape".into();
            })),
            "",
            Code::InvalidArgument,
        ),
        (
            "hostname too long",
            Some(Box::new(|c| c.hostname = "h".repeat(65))),
            "",
            Code::InvalidArgument,
        ),
    ];
    for (what, edit, handler, code) in cases {
        let cfg = edit.map(|f| {
            let mut cfg = pod_config("bad", "uid-bad");
            f(&mut cfg);
            cfg
        });
        assert_code(try_run(&mut c, cfg, handler).await, code, what);
        assert_nothing_left(&d, &empty, what);
    }
    assert!(list(&mut c, None).await.is_empty());
    assert_code(
        try_status(&mut c, "no-such-sandbox").await,
        Code::NotFound,
        "status of an unknown id",
    );
    assert_code(
        try_status(&mut c, "").await,
        Code::InvalidArgument,
        "status of an empty id",
    );
    // The name was never taken by any of the failures.
    let id = run(&mut c, pod_config("bad", "uid-bad")).await;
    assert_eq!(state(&mut c, &id).await, PodSandboxState::SandboxReady);
}

/// RPCs on different pods run in parallel: ten RunPodSandbox at once all succeed with
/// distinct addresses, and ten RemovePodSandbox at once leave nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn ten_pods_at_once() {
    if !root() {
        return;
    }
    let d = Crustd::start();
    let c = d.client().await;
    let empty = d.leftovers();
    let runs: Vec<_> = (0..10)
        .map(|i| {
            let mut c = c.clone();
            tokio::spawn(async move {
                run(&mut c, pod_config(&format!("p{i}"), &format!("u{i}"))).await
            })
        })
        .collect();
    let mut ids = Vec::new();
    for r in runs {
        ids.push(r.await.unwrap());
    }
    let mut c1 = c.clone();
    let mut v4 = std::collections::BTreeSet::new();
    let mut v6 = std::collections::BTreeSet::new();
    for id in &ids {
        assert_eq!(state(&mut c1, id).await, PodSandboxState::SandboxReady);
        let (ip, more) = ips(&mut c1, id).await;
        v4.insert(ip);
        v6.insert(more[0].clone());
    }
    assert_eq!(v4.len(), 10, "{v4:?}");
    assert_eq!(v6.len(), 10, "{v6:?}");
    let l = d.leftovers();
    assert_eq!(
        (l.veths.len(), l.pauses.len(), l.ip_files.len()),
        (10, 10, 20)
    );
    let last = v4.iter().next_back().unwrap().clone();
    assert!(ping(&d, &ids[0], &last));

    let removes: Vec<_> = ids
        .iter()
        .cloned()
        .map(|id| {
            let mut c = c.clone();
            tokio::spawn(async move { remove(&mut c, &id).await })
        })
        .collect();
    for r in removes {
        r.await.unwrap();
    }
    assert!(list(&mut c1, None).await.is_empty());
    assert_nothing_left(&d, &empty, "ten pods removed at once");
}

/// A pod whose sandbox died is made again (the kubelet's attempt + 1) right after the
/// old one is stopped and removed: the new sandbox reports its own addresses only, not
/// the old one's that a DEL still in the background is about to release.
#[tokio::test]
async fn sandbox_made_again_reports_only_its_own_addresses() {
    if !root() {
        return;
    }
    let d = Crustd::start();
    let mut c = d.client().await;
    let first = run(&mut c, pod_config("again", "uid-again")).await;
    let (ip0, all0) = ips(&mut c, &first).await;
    stop(&mut c, &first).await;
    remove(&mut c, &first).await;
    let mut cfg = pod_config("again", "uid-again");
    cfg.metadata.as_mut().unwrap().attempt = 1;
    let second = run(&mut c, cfg).await;
    let (ip1, all1) = ips(&mut c, &second).await;
    assert_ne!(
        ip0, ip1,
        "a new address while the old one is being released"
    );
    assert_eq!(all1.len(), all0.len(), "first {all0:?}, again {all1:?}");
    assert!(!all1.contains(&ip0), "the old sandbox's address: {all1:?}");
    stop(&mut c, &second).await;
    remove(&mut c, &second).await;
}
