//! A node whose disk fills: DiskPressure and the eviction of the pod filling it.

use super::*;

/// nodefs.available as this side's agent computes it, in bytes: the crustlet statfs's
/// its root dir; the kubelet, its summary API's `node.fs.availableBytes`.
fn nodefs_available(side: &Side) -> u64 {
    if side.crust {
        let out = Command::new("df")
            .args(["-B1", "--output=avail"])
            .arg(side.c.path("crustlet-root"))
            .output()
            .expect("df");
        s(&out.stdout)
            .lines()
            .nth(1)
            .and_then(|l| l.trim().parse().ok())
            .expect("df's figure")
    } else {
        let path = format!("/api/v1/nodes/{}/proxy/stats/summary", side.node);
        let out = run_timeout(&mut side.c.kubectl(&["get", "--raw", &path]), T);
        let v: Value = serde_json::from_slice(&out.stdout).unwrap_or(Value::Null);
        v["node"]["fs"]["availableBytes"]
            .as_u64()
            .unwrap_or_else(|| panic!("the kubelet's summary: {}", s(&out.stderr)))
    }
}

/// A pod that writes into its emptyDir, 50 MB at a time up to 4 GB, on a node whose
/// agent was restarted with `nodefs.available` 200 MiB below what is free: the node
/// reports DiskPressure, and the agent evicts that pod (its ephemeral storage beyond
/// its request of none), not its Guaranteed neighbour; the evicted pod is Failed,
/// Evicted, with the kubelet's message for ephemeral storage; its volume is removed
/// with it, so the pressure ends.
pub(crate) fn disk_pressure_eviction(side: &Side) {
    let mut quiet = side.pod("dp-guaranteed", "exec sleep 3600");
    quiet["spec"]["containers"][0]["resources"] = json!({
        "limits": {"memory": "64Mi", "cpu": "50m"},
        "requests": {"memory": "64Mi", "cpu": "50m"},
    });
    let mut writer = side.pod(
        "dp-writer",
        r#"while [ ! -e /tmp/go ]; do sleep 0.2; done; i=0
        while [ $i -lt 80 ]; do
            head -c 50000000 /dev/zero > /data/f$i
            i=$((i + 1)); echo "wrote $((i * 50)) MB"; sleep 0.3
        done; sleep 3600"#,
    );
    writer["spec"]["volumes"] = json!([{"name": "data", "emptyDir": {}}]);
    writer["spec"]["containers"][0]["volumeMounts"] =
        json!([{"name": "data", "mountPath": "/data"}]);
    side.apply(vec![quiet, writer]);
    let quiet_id = container_id(&side.wait_running("dp-guaranteed"));
    side.wait_running("dp-writer");
    let available = nodefs_available(side);
    let threshold_ki = (available / 1024).saturating_sub(200 * 1024);
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        restart_agent_with(
            side,
            &[format!(
                "--eviction-hard=memory.available<1Mi,nodefs.available<{threshold_ki}Ki,nodefs.inodesFree<1%,imagefs.available<1%"
            )],
        );
        wait_for(&format!("{} Ready", side.node), T, |last| {
            *last = side.ready();
            (*last == "True").then_some(())
        });
        wait_for(&format!("{}: exec in dp-writer", side.name), T, |last| {
            let out = run_timeout(
                &mut side.kubectl(&["exec", "dp-writer", "--", "touch", "/tmp/go"]),
                T,
            );
            *last = s(&out.stderr);
            let failed = || {
                side.get_pod("dp-writer")
                    .is_some_and(|p| p["status"]["phase"] == "Failed")
            };
            (out.status.success() || failed()).then_some(())
        });
        let t = Instant::now();
        let pressure_seen = std::cell::Cell::new(false);
        let p = side.wait_pod("dp-writer", "Evicted", |p| {
            if !pressure_seen.get() {
                let out = run_timeout(
                    &mut side.c.kubectl(&[
                        "get",
                        "node",
                        side.node,
                        "-o",
                        r#"jsonpath={.status.conditions[?(@.type=="DiskPressure")].status}"#,
                    ]),
                    Duration::from_secs(20),
                );
                pressure_seen.set(s(&out.stdout).trim() == "True");
            }
            p["status"]["phase"] == "Failed"
        });
        let took = t.elapsed().as_secs_f64();
        let st = &p["status"];
        assert_eq!(st["reason"], "Evicted", "{}: {st}", side.name);
        let msg = st["message"].as_str().unwrap_or_default();
        assert!(
            msg.contains("low on resource: ephemeral-storage"),
            "{}: {msg}",
            side.name
        );
        let q = side.get_pod("dp-guaranteed").unwrap();
        assert!(
            running(&q) && container_id(&q) == quiet_id,
            "{}: the Guaranteed pod: {}",
            side.name,
            q["status"]
        );
        // The evicted pod's volume goes with it: the disk comes back.
        wait_for(
            &format!("{}: the evicted pod's data removed", side.name),
            T,
            |last| {
                let now = nodefs_available(side);
                *last = format!("{} MiB free, {} MiB before", now >> 20, available >> 20);
                (now + (100 << 20) > available).then_some(())
            },
        );
        (took, pressure_seen.get())
    }));
    restart_agent_with(side, &[]);
    let (took, pressure_seen) = result.unwrap_or_else(|e| std::panic::resume_unwind(e));
    figure(
        side,
        "disk_pressure_eviction",
        format!(
            "the pod writing 50 MB steps Evicted {took:.1} s after it began (nodefs.available<{} MiB, {} MiB free before); DiskPressure {} seen; its data removed, its Guaranteed neighbour untouched",
            threshold_ki / 1024,
            available >> 20,
            if pressure_seen { "was" } else { "not" }
        ),
    );
}
