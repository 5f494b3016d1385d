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
/// reports DiskPressure, and the agent removes the image no pod uses (its garbage) and
/// then, the disk still short, evicts that pod (its ephemeral storage beyond its
/// request of none), not its Guaranteed neighbour; the evicted pod is Failed,
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
    // An image no pod uses: the node's garbage, to go before any pod does.
    let spare = &side.c.spare_image;
    let out = run_timeout(&mut side.crictl(&["pull", spare]), T);
    assert!(
        out.status.success(),
        "{}: pull: {}",
        side.name,
        s(&out.stderr)
    );
    let has_spare = || {
        run_timeout(&mut side.crictl(&["inspecti", spare]), T)
            .status
            .success()
    };
    let available = nodefs_available(side);
    let threshold_ki = (available / 1024).saturating_sub(200 * 1024);
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        restart_agent_with(
            side,
            &[
                format!(
                    "--eviction-hard=memory.available<1Mi,nodefs.available<{threshold_ki}Ki,nodefs.inodesFree<1%,imagefs.available<1%"
                ),
                // Unused images may go at once (the spare one was pulled just now).
                "--minimum-image-ttl-duration=0s".to_string(),
            ],
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
                pressure_seen.set(side.condition("DiskPressure") == "True");
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
        assert!(
            !has_spare(),
            "{}: the unused image was not removed before the pod was evicted",
            side.name
        );
        let q = side.get_pod("dp-guaranteed").unwrap();
        assert!(
            running(&q) && container_id(&q) == quiet_id,
            "{}: the Guaranteed pod: {}",
            side.name,
            q["status"]
        );
        // The evicted pod's volume goes with it (the disk's free space is no measure
        // here: CI builds beside the suites).
        let uid = p["metadata"]["uid"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        let data = if side.crust {
            side.c
                .path(&format!(
                    "crustlet-root/pods/{uid}/volumes/kubernetes.io~empty-dir/data"
                ))
                .display()
                .to_string()
        } else {
            let kubelet = side.agent_pid().expect("the kubelet runs");
            format!("/proc/{kubelet}/root/var/lib/kubelet/pods/{uid}/volumes/kubernetes.io~empty-dir/data")
        };
        wait_for(
            &format!("{}: the evicted pod's emptyDir removed", side.name),
            T,
            |last| {
                let files: Vec<String> = std::fs::read_dir(&data)
                    .into_iter()
                    .flatten()
                    .flatten()
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .collect();
                *last = format!("{data}: {files:?}");
                files.is_empty().then_some(())
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
            "the unused image removed, then the pod writing 50 MB steps Evicted {took:.1} s after it began (nodefs.available<{} MiB, {} MiB free before); DiskPressure {} seen; its data removed, its Guaranteed neighbour untouched",
            threshold_ki / 1024,
            available >> 20,
            if pressure_seen { "was" } else { "not" }
        ),
    );
}

/// Every file below `dir` (as the node sees it: `root` is a process of the node's),
/// relative to it.
fn files_below(root: u32, dir: &str) -> Vec<String> {
    let base = std::path::PathBuf::from(format!("/proc/{root}/root{dir}"));
    let mut out = vec![];
    let mut stack = vec![base.clone()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            let p = e.path();
            if p.is_dir() && !p.is_symlink() {
                stack.push(p.clone());
            }
            out.push(p.strip_prefix(&base).unwrap().display().to_string());
        }
    }
    out
}

/// The runtime's image store on a small filesystem of its own, filled to its last
/// 512 KiB, and a pod whose image is not there: the pod waits with `ErrImagePull` (or
/// `ImagePullBackOff`) and says why (the status's message or a `Failed` event naming
/// the full disk); nothing half-written stays
/// in the store; once there is room again the pull is tried again and the pod runs.
/// (crust: its image store; containerd: its root, metadata, content and snapshots.)
pub(crate) fn image_store_full(side: &Side) {
    let store = if side.crust {
        side.c.path("crustlet-crust-root/images")
    } else {
        side.c.path("ctrd-root")
    }
    .display()
    .to_string();
    side.kill_runtime();
    let fs = NodeTmpfs::mount(side, &store, "64m");
    side.start_runtime();
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        if !side.crust {
            // Its sandboxes' pause image, while there is room.
            let out = run_timeout(&mut side.crictl(&["pull", &side.c.pause_image]), T);
            assert!(
                out.status.success(),
                "pulling the pause image: {}",
                s(&out.stderr)
            );
        }
        let runtime = side.runtime_pid().expect("the runtime runs");
        let avail = {
            let out = side
                .c
                .node_cmd("df")
                .args(["-B1", "--output=avail", &store])
                .output()
                .expect("df");
            s(&out.stdout)
                .lines()
                .nth(1)
                .and_then(|l| l.trim().parse::<u64>().ok())
                .expect("df's figure")
        };
        let filler = format!("{store}/filler");
        let ok = side
            .c
            .node_cmd("fallocate")
            .args(["-l", &(avail - (512 << 10)).to_string(), &filler])
            .status()
            .is_ok_and(|s| s.success());
        assert!(ok, "{}: filling the store", side.name);
        let before: std::collections::BTreeSet<String> =
            files_below(runtime, &store).into_iter().collect();
        side.apply(vec![side.pod("full-pull", "exec sleep 3600")]);
        // The reason as the pod's status says it (`ErrImagePull` with the error, then
        // `ImagePullBackOff`, "Back-off pulling image") and its `Failed` events, as
        // `kubectl describe` shows them.
        let failed_event = || -> Option<String> {
            let out = run_timeout(
                &mut side.kubectl(&[
                    "get",
                    "events",
                    "--field-selector",
                    "involvedObject.name=full-pull,reason=Failed",
                    "-o",
                    "json",
                ]),
                T,
            );
            let v: Value = serde_json::from_slice(&out.stdout).unwrap_or(Value::Null);
            v["items"].as_array().into_iter().flatten().find_map(|e| {
                let m = e["message"].as_str()?;
                m.to_lowercase()
                    .contains("no space left")
                    .then(|| m.to_string())
            })
        };
        side.wait_pod("full-pull", "failing its pull", |p| {
            let w = &main_status(p)["state"]["waiting"];
            matches!(
                w["reason"].as_str(),
                Some("ErrImagePull" | "ImagePullBackOff")
            ) && (w["message"]
                .as_str()
                .is_some_and(|m| m.to_lowercase().contains("no space left"))
                || failed_event().is_some())
        });
        let message = failed_event().unwrap_or_default();
        // Half-written files: anything new in the store but finished blobs is.
        let left: Vec<String> = files_below(runtime, &store)
            .into_iter()
            .filter(|f| !before.contains(f))
            .filter(|f| {
                let name = f.rsplit('/').next().unwrap_or_default();
                name.starts_with('.')
                    || f.starts_with("tmp/")
                    || f.contains("/ingest/")
                    || f.starts_with("io.containerd.content.v1.content/ingest/")
            })
            .collect();
        assert!(
            left.is_empty(),
            "{}: half-written files left in the store after the failed pull: {left:?}",
            side.name
        );
        let _ = side.c.node_cmd("rm").args(["-f", &filler]).status();
        let t = Instant::now();
        side.wait_running("full-pull");
        (message, t.elapsed().as_secs_f64())
    }));
    let _ = run_timeout(
        &mut side.kubectl(&["delete", "pod", "full-pull", "--wait=false"]),
        T,
    );
    let _ = std::panic::catch_unwind(|| side.wait_gone("full-pull"));
    side.kill_runtime();
    drop(fs);
    side.start_runtime();
    let (message, took) = result.unwrap_or_else(|e| std::panic::resume_unwind(e));
    let short: String = message.chars().take(160).collect();
    figure(
        side,
        "image_store_full",
        format!(
            "the pull failed with \"{short}\"; nothing half-written left; running {took:.0} s after room was made"
        ),
    );
}
