//! A node that reboots: its machine loses power and boots again.

use super::*;
use crust_e2e::cluster::Machine;

fn restarts(p: &Value) -> u64 {
    main_status(p)["restartCount"].as_u64().unwrap_or(0)
}

/// The sandboxes of this side's pods as the runtime has them: (id, pod name, ready).
fn sandboxes(side: &Side) -> Vec<(String, String, bool)> {
    let label = format!("io.kubernetes.pod.namespace={}", side.ns);
    let v = side.crictl_json(&["pods", "-o", "json", "--label", &label]);
    v["items"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|p| {
            (
                p["id"].as_str().unwrap_or_default().to_string(),
                p["metadata"]["name"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string(),
                p["state"] == "SANDBOX_READY",
            )
        })
        .collect()
}

/// The node's machine loses power (every process of the node killed, its mounts,
/// volatile state, pod cgroups, network namespaces and bridge gone; the persistent
/// dirs, the logs and host-local's reservations kept) and boots: the runtime, then the
/// agent start. Every pod comes back as the kubelet brings it back: a new sandbox, the
/// container started again with its restart count one up; a `restartPolicy: Never` pod
/// that was running is Failed, one that had ended stays Succeeded; the old sandboxes'
/// IPs are released, and nothing of theirs is left mounted or in a cgroup.
pub(crate) fn reboot(side: &Side) {
    let mut never = side.pod("r-never", "exec sleep 3600");
    never["spec"]["restartPolicy"] = json!("Never");
    let mut done = side.pod("r-done", "echo done");
    done["spec"]["restartPolicy"] = json!("Never");
    let mut always = side.pod("r-always", "exec sleep 3600");
    always["spec"]["volumes"] = json!([{"name": "scratch", "emptyDir": {}}]);
    always["spec"]["containers"][0]["volumeMounts"] =
        json!([{"name": "scratch", "mountPath": "/scratch"}]);
    side.apply(vec![always, never, done]);
    let a = side.wait_running("r-always");
    side.wait_running("r-never");
    side.wait_pod("r-done", "Succeeded", |p| {
        p["status"]["phase"] == "Succeeded"
    });
    let id = container_id(&a);
    assert!(
        run_timeout(
            &mut side.crictl(&["exec", &id, "sh", "-c", "echo kept > /scratch/f"]),
            T
        )
        .status
        .success(),
        "{}: exec",
        side.name
    );
    let before = (id, restarts(&a));
    let old: Vec<String> = sandboxes(side).into_iter().map(|s| s.0).collect();

    let t = Instant::now();
    side.c.power_loss(if side.crust {
        Machine::Crustlet
    } else {
        Machine::KubeletContainerd
    });
    std::thread::sleep(Duration::from_secs(2));
    side.start_runtime();
    side.start_agent();

    let p = side.wait_pod("r-always", "running again, restarted once", |p| {
        running(p) && restarts(p) == before.1 + 1
    });
    let took = t.elapsed().as_secs_f64();
    let id = container_id(&p);
    assert_ne!(id, before.0, "{}: the same container", side.name);
    let out = run_timeout(&mut side.crictl(&["exec", &id, "cat", "/scratch/f"]), T);
    assert_eq!(
        s(&out.stdout).trim(),
        "kept",
        "{}: the emptyDir after the reboot: {}",
        side.name,
        s(&out.stderr)
    );
    let p = side.wait_pod("r-never", "Failed", |p| p["status"]["phase"] == "Failed");
    let never_state = main_status(&p)["state"].to_string();
    let p = side.get_pod("r-done").expect("r-done");
    assert_eq!(p["status"]["phase"], "Succeeded", "{}: r-done", side.name);
    // Settled: one ready sandbox, r-always's new one; host-local holds its IP alone;
    // nothing of the old sandboxes mounted or in a cgroup.
    let root = if side.crust {
        side.c.crustlet_cgroup_root.clone()
    } else {
        side.c.cgroup_root.clone()
    };
    let pod_ip = p_ip(side, "r-always");
    wait_for(
        &format!("{}: the node settled after the reboot", side.name),
        T,
        |last| {
            let sbs = sandboxes(side);
            let ready: Vec<&(String, String, bool)> = sbs.iter().filter(|s| s.2).collect();
            let ips = reserved_ips(side);
            let mounts: Vec<String> = side
                .c
                .node_mounts()
                .into_iter()
                .filter(|m| old.iter().any(|o| m.contains(o.as_str())))
                .collect();
            let cgroups: Vec<String> = side
                .c
                .cgroups_below(&root)
                .into_iter()
                .map(|d| d.display().to_string())
                .filter(|d| old.iter().any(|o| d.contains(o.as_str())))
                .collect();
            *last = format!(
                "sandboxes {sbs:?}, reserved IPs {ips:?} (the pod's {pod_ip}), old mounts {mounts:?}, old cgroups {cgroups:?}"
            );
            (ready.len() == 1
                && ready[0].1 == "r-always"
                && !old.contains(&ready[0].0)
                && ips.len() == 1
                && ips.contains(&pod_ip)
                && mounts.is_empty()
                && cgroups.is_empty())
            .then_some(())
        },
    );
    figure(
        side,
        "reboot",
        format!(
            "r-always running again (restartCount {}) {took:.0} s after the power loss; r-never Failed ({never_state})",
            before.1 + 1
        ),
    );
}

fn p_ip(side: &Side, name: &str) -> String {
    side.get_pod(name).expect("the pod")["status"]["podIP"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}
