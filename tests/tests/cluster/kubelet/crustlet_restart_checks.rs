//! Restarts on the crustlet's node: of a container (a new image, a sandbox that died), of
//! crustd and of the crustlet under running pods, `--pod-routes` across a restart, and
//! nothing left in its runtime at the end.

use super::*;

on_both! {
    image_change_restarts => crustlet_image_change_restarts, containerd_image_change_restarts;
    restart_count_across_sandboxes => crustlet_restart_count_across_sandboxes, containerd_restart_count_across_sandboxes;
    nothing_left => crustlet_nothing_left_in_crustd, containerd_nothing_left;
}

/// A new image for a running container (`kubectl set image`): the container is killed
/// and made again from it at once, its restart count one up.
fn image_change_restarts(c: &Crustlet) {
    let p = run_pod(c, pod(c, "newimage", "exec sleep 3600", |_| {}));
    let before = raw_id(&p, "main");
    let image2 = c.image.replace(":1", ":2");
    kubectl(
        c,
        &["set", "image", "pod/newimage", &format!("main={image2}")],
    );
    let p = wait_pod(c, "newimage", "running the new image", T, |p| {
        running(p)
            && status_of(p, "main").is_some_and(|s| {
                s["image"].as_str().is_some_and(|i| i.ends_with(":2"))
                    && s["state"]["running"].is_object()
                    && s["restartCount"] == 1
            })
    });
    assert_ne!(raw_id(&p, "main"), before, "the same container");
    assert!(
        event_reasons(c, "newimage").contains(&"Killing".to_string()),
        "no Killing event"
    );
    kubectl(c, &["delete", "pod", "newimage", "--wait=false"]);
}

/// A sandbox that died is made again with every container in it; the containers go on
/// counting their restarts from the old one's.
fn restart_count_across_sandboxes(c: &Crustlet) {
    let p = run_pod(c, pod(c, "newsandbox", "exec sleep 3600", |_| {}));
    let before = raw_id(&p, "main");
    let uid = p["metadata"]["uid"].as_str().unwrap();
    let out = ok(c.node_crictl(&[
        "pods",
        "-q",
        "--label",
        &format!("io.kubernetes.pod.uid={uid}"),
    ]));
    let sandbox = out.lines().next().expect("the pod's sandbox").to_string();
    ok(c.node_crictl(&["stopp", &sandbox]));
    let p = wait_for("a new sandbox running the pod", T, |last| {
        let p = get(c, "pod", "newsandbox")?;
        let sel = format!("io.kubernetes.pod.uid={uid}");
        let out = run_timeout(
            &mut c.node_crictl(&["pods", "--label", &sel, "-o", "json"]),
            T,
        );
        *last = format!("{}\n{}", p["status"], s(&out.stdout));
        (running(&p) && raw_id(&p, "main") != before).then_some(p)
    });
    // 1 as the kubelet shows it. More when the crustlet raced the stop: it saw the
    // container killed while the sandbox still said ready (containerd says so until its
    // pause process is gone) and made it again there, each time a restart, as the
    // kubelet would. Seen once in CI: 3, a slow stop outlasting the 10 s back-off.
    let st = status_of(&p, "main").unwrap();
    let n = st["restartCount"].as_u64().unwrap_or(0);
    assert!(n >= 1, "the restart count starts over: {p:#}");
    // How the one before ended, as the kubelet shows it (it keeps the old container
    // until its garbage collection): killed with the sandbox (137); after the race
    // above, the restart in the dying sandbox (CI: StartError, 128, its pause gone).
    let last = &st["lastState"]["terminated"];
    let last_id = last["containerID"].as_str().unwrap_or_default();
    assert!(
        last["exitCode"].is_i64() && !last_id.is_empty() && last_id != raw_id(&p, "main"),
        "no last state from the old sandbox: {p:#}"
    );
    if n == 1 {
        assert!(last_id == before && last["exitCode"] == 137, "{p:#}");
    }
    kubectl(c, &["delete", "pod", "newsandbox", "--wait=false"]);
}

// ---- faults: crustd and the crustlet restarted ---------------------------------------

fn snapshot(c: &Crustlet, pods: &[&str]) -> Vec<(String, u64)> {
    pods.iter()
        .map(|n| {
            let p = get(c, "pod", n).unwrap();
            let st = status_of(&p, "main").unwrap();
            (
                container_id(&p, "main"),
                st["restartCount"].as_u64().unwrap(),
            )
        })
        .collect()
}

fn survivors_unchanged(c: &Crustlet, pods: &[&str], before: &[(String, u64)]) {
    // Several status syncs of the crustlet.
    std::thread::sleep(Duration::from_secs(5));
    for (n, (id, restarts)) in pods.iter().zip(before) {
        let p = wait_pod(c, n, "running", T, running);
        assert_eq!(&container_id(&p, "main"), id, "{n}: a new container");
        assert_eq!(
            status_of(&p, "main").unwrap()["restartCount"].as_u64(),
            Some(*restarts),
            "{n} restarted"
        );
        assert_eq!(condition(&p, "Ready").unwrap()["status"], "True", "{n}");
    }
}

fn node_ready_is(c: &Crustlet, want: &str, limit: Duration) {
    wait_for(
        &format!("the crustlet's node Ready={want}"),
        limit,
        |last| {
            let n = node(c, CRUSTLET_NODE)?;
            let r = condition(&n, "Ready")?.clone();
            *last = r.to_string();
            (r["status"] == want).then_some(())
        },
    );
}

pub fn crustlet_crustd_killed_and_restarted(c: &Cluster) {
    let c = &Crustlet::on_crustd(c);
    let pods = ["survivor-a", "survivor-b"];
    for n in pods {
        run_pod(c, pod(c, n, "exec sleep 3600", |_| {}));
    }
    let before = snapshot(c, &pods);
    c.kill_crustlet_crustd();
    node_ready_is(c, "False", Duration::from_secs(60));
    let n = node(c, CRUSTLET_NODE).unwrap();
    let msg = condition(&n, "Ready").unwrap()["message"].to_string();
    assert!(msg.contains("runtime"), "{msg}");
    c.start_crustlet_crustd();
    node_ready_is(c, "True", Duration::from_secs(60));
    survivors_unchanged(c, &pods, &before);
}

pub fn crustlet_restarted_adopts_its_pods(c: &Cluster) {
    let c = &Crustlet::on_crustd(c);
    let pods = ["survivor-a", "survivor-b"];
    if get(c, "pod", pods[0]).is_none() {
        for n in pods {
            run_pod(c, pod(c, n, "exec sleep 3600", |_| {}));
        }
    }
    run_pod(c, pod(c, "doomed", "exec sleep 3600", |_| {}));
    run_pod(c, pod(c, "forced", "exec sleep 3600", |_| {}));
    let before = snapshot(c, &pods);
    let st = c.stop_crustlet().expect("the crustlet ends on SIGTERM");
    assert!(st.success(), "the crustlet exited {st}");
    // Deleted while it is down: gracefully (the pod waits for its node), and forced
    // (gone from the apiserver at once).
    kubectl(c, &["delete", "pod", "doomed", "--wait=false"]);
    kubectl(
        c,
        &["delete", "pod", "forced", "--grace-period=0", "--force"],
    );
    std::thread::sleep(Duration::from_secs(1));
    assert!(
        get(c, "pod", "doomed").is_some(),
        "a graceful deletion needs the node"
    );
    // The containers kept running without it.
    let running_now =
        ok(c.node_crictl(&["ps", "-q", "--label", "io.kubernetes.pod.name=survivor-a"]));
    assert!(!running_now.trim().is_empty(), "survivor-a stopped");
    c.start_crustlet();
    wait_for("the graceful deletion to finish", T, |_| {
        get(c, "pod", "doomed").is_none().then_some(())
    });
    gone_from_crustd(c, "doomed");
    gone_from_crustd(c, "forced");
    survivors_unchanged(c, &pods, &before);
    // Still taking new pods.
    run_pod(c, pod(c, "after-restart", "exec sleep 3600", |_| {}));
}

/// Everything of the crustlet namespace deleted through the API: nothing left in the
/// crustlet's runtime.
fn nothing_left(c: &Crustlet) {
    // At least one pod came and went, whatever ran before (a filtered run).
    run_pod(c, pod(c, "nothing-left", "exec sleep 3600", |_| {}));
    kubectl(
        c,
        &[
            "delete",
            "deployments,jobs,pods",
            "--all",
            "--grace-period=1",
            "--wait=true",
        ],
    );
    wait_for(
        &format!("the crustlet's {} to have no pod or container", c.runtime),
        Duration::from_secs(60),
        |last| {
            let pods = ok(c.node_crictl(&["pods", "-q"]));
            let ctrs = ok(c.node_crictl(&["ps", "-a", "-q"]));
            *last = format!("pods: {pods:?} containers: {ctrs:?}");
            (pods.trim().is_empty() && ctrs.trim().is_empty()).then_some(())
        },
    );
    // No pod cgroup left behind (runc removes only its containers' own).
    wait_for("the pod cgroups to go", Duration::from_secs(10), |last| {
        let Some(kubepods) = c.cgroup_dir_named_under(&c.cgroup_root, "cpu", "kubepods") else {
            return Some(());
        };
        let mut left = vec![];
        for d in [
            kubepods.clone(),
            kubepods.join("burstable"),
            kubepods.join("besteffort"),
        ] {
            for e in std::fs::read_dir(d).into_iter().flatten().flatten() {
                let n = e.file_name().to_string_lossy().to_string();
                if n.starts_with("pod") {
                    left.push(n);
                }
            }
        }
        *last = format!("{left:?}");
        left.is_empty().then_some(())
    });
    // No pod's logs: the crustlet removes them with the pod, as the kubelet's GC does
    // (the churn benchmark found every pod's left).
    wait_for("the pods' logs to go", Duration::from_secs(10), |last| {
        let left: Vec<String> = std::fs::read_dir(&c.logs)
            .into_iter()
            .flatten()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        *last = format!("in {}: {left:?}", c.logs.display());
        left.is_empty().then_some(())
    });
    if c.runtime == "crust" {
        let records = std::fs::read_dir(c.path("crustlet-crust-root/sandboxes"))
            .map(|r| r.count())
            .unwrap_or(0);
        assert_eq!(records, 0, "sandbox records left in the crustlet's crustd");
    }
    assert!(c.crustlet_up(), "{}", c.log(c.log_name));
}

/// `--pod-routes` (the cluster starts the crustlet on crustd with it): a route to every
/// other Ready Node's pod CIDR via its InternalIP, changed with the IP, removed with the
/// Node or its readiness, someone else's route to a claimed range left alone, and what
/// it left before a restart found again (changed or removed, never doubled). The peers
/// are Node objects only (unschedulable): their IPs are on the node's own segment, so
/// the kernel takes the routes without a machine behind them.
pub fn crustlet_pod_routes(c: &Cluster) {
    let cl = &Crustlet::on_crustd(c);
    let n = c.subnet;
    let ns = c.node.name.clone();
    let ours = || crust_e2e::sh(&["ip", "-n", &ns, "route", "show", "proto", "77"]);
    let ours_are = |want: &[String], what: &str| {
        wait_for(what, T, |last| {
            let now: Vec<String> = ours()
                .lines()
                .map(|l| l.split(" dev ").next().unwrap_or(l).trim().to_string())
                .collect();
            *last = format!("{now:?}");
            (now == want).then_some(())
        })
    };
    let now = || {
        String::from_utf8_lossy(
            &run_timeout(Command::new("date").args(["-u", "+%FT%TZ"]), T).stdout,
        )
        .trim()
        .to_string()
    };
    let peer = |name: &str, third: u8, ip: &str| {
        apply(
            c,
            json!({"apiVersion": "v1", "kind": "Node",
                "metadata": {"name": name},
                "spec": {"unschedulable": true,
                         "podCIDR": format!("10.{n}.{third}.0/24"),
                         "podCIDRs": [format!("10.{n}.{third}.0/24")]}}),
        );
        set_peer(c, name, ip, "True", &now());
    };
    // Someone else's route, to a range a peer claims.
    let theirs = format!("10.{n}.78.0/24");
    crust_e2e::sh(&[
        "ip",
        "-n",
        &ns,
        "route",
        "add",
        &theirs,
        "via",
        &format!("10.{n}.255.78"),
        "proto",
        "static",
    ]);
    peer("routes-peer-a", 77, &format!("10.{n}.255.77"));
    peer("routes-peer-b", 78, &format!("10.{n}.255.79"));
    ours_are(
        &[format!("10.{n}.77.0/24 via 10.{n}.255.77")],
        "a route to routes-peer-a's pods",
    );
    let theirs_now = crust_e2e::sh(&["ip", "-n", &ns, "route", "show", &theirs]);
    assert!(
        theirs_now.contains(&format!("via 10.{n}.255.78")) && theirs_now.contains("proto static"),
        "someone else's route was changed: {theirs_now}"
    );
    // The peer's IP changes: its route follows.
    set_peer(
        c,
        "routes-peer-a",
        &format!("10.{n}.255.76"),
        "True",
        &now(),
    );
    ours_are(
        &[format!("10.{n}.77.0/24 via 10.{n}.255.76")],
        "routes-peer-a's route to follow its new IP",
    );
    // While the crustlet is down a peer goes and another comes: the restarted crustlet
    // finds the route it left, removes it and adds the new one, with none doubled.
    let st = cl.stop_crustlet().expect("the crustlet ends on SIGTERM");
    assert!(st.success(), "the crustlet exited {st}");
    ok(c.kubectl(&["delete", "node", "routes-peer-a"]));
    peer("routes-peer-c", 79, &format!("10.{n}.255.80"));
    c.start_crustlet();
    ours_are(
        &[format!("10.{n}.79.0/24 via 10.{n}.255.80")],
        "the restarted crustlet's routes",
    );
    // Not Ready: no route.
    set_peer(
        c,
        "routes-peer-c",
        &format!("10.{n}.255.80"),
        "False",
        &now(),
    );
    ours_are(&[], "routes-peer-c's route gone once it is not Ready");
    ok(c.kubectl(&["delete", "node", "routes-peer-b", "routes-peer-c"]));
    crust_e2e::sh(&["ip", "-n", &ns, "route", "del", &theirs]);
    node_ready_is(cl, "True", Duration::from_secs(60));
}

/// The status a peer Node of [`crustlet_pod_routes`] would post: its InternalIP and
/// Ready condition.
fn set_peer(c: &Cluster, name: &str, ip: &str, ready: &str, now: &str) {
    let patch = json!({"status": {
        "addresses": [{"type": "InternalIP", "address": ip}],
        "conditions": [{"type": "Ready", "status": ready, "reason": "Test",
                        "lastHeartbeatTime": now, "lastTransitionTime": now}]}});
    ok(c.kubectl(&[
        "patch",
        "node",
        name,
        "--subresource=status",
        "--type=merge",
        "-p",
        &patch.to_string(),
    ]));
}
