//! Memory: a container past its limit, and a node under memory pressure.

use super::*;

/// A container that outgrows its memory limit: OOMKilled, as the API, `kubectl get` and
/// `kubectl describe` show it.
pub(crate) fn oom_killed(side: &Side) {
    let mut p = side.pod(
        "oom",
        "x=$(head -c 200000000 /dev/zero | tr '\\0' a); echo survived",
    );
    p["spec"]["restartPolicy"] = json!("Never");
    p["spec"]["containers"][0]["resources"] =
        json!({"limits": {"memory": "24Mi"}, "requests": {"memory": "24Mi"}});
    let t = Instant::now();
    side.apply(vec![p]);
    let p = side.wait_pod("oom", "Failed", |p| p["status"]["phase"] == "Failed");
    let took = t.elapsed().as_secs_f64();
    let term = &main_status(&p)["state"]["terminated"];
    assert_eq!(term["reason"], "OOMKilled", "{}: {term}", side.name);
    assert_eq!(term["exitCode"], 137, "{}: {term}", side.name);
    let get = side.ok(&["get", "pod", "oom", "--no-headers"]);
    assert!(
        get.contains("OOMKilled"),
        "{}: kubectl get: {get}",
        side.name
    );
    let describe = side.ok(&["describe", "pod", "oom"]);
    let reason = describe
        .lines()
        .find(|l| l.trim_start().starts_with("Reason:") && l.contains("OOMKilled"));
    assert!(
        reason.is_some(),
        "{}: kubectl describe:\n{describe}",
        side.name
    );
    figure(
        side,
        "oom_killed",
        format!("OOMKilled (137) {took:.1} s after the apply"),
    );
    node_stack_oom_scores(side);
}

/// The node agent protects itself from the kernel's OOM killer as the kubelet does
/// (`--oom-score-adj`, -999): where this machine lets a process lower its score (it
/// needs CAP_SYS_RESOURCE, which these sandboxes' bounding set lacks), the agent has
/// -999; where it cannot, it keeps what it inherited and says so in its log. The
/// runtimes are started by the harness as the packaged units would not start them
/// (the units set `OOMScoreAdjust=-999`): their figures are printed.
fn node_stack_oom_scores(side: &Side) {
    let adj = |pid: Option<u32>| -> i64 {
        let pid = pid.expect("the process runs");
        std::fs::read_to_string(format!("/proc/{pid}/oom_score_adj"))
            .ok()
            .and_then(|s| s.trim().parse().ok())
            .expect("oom_score_adj")
    };
    let (agent, runtime) = (adj(side.agent_pid()), adj(side.runtime_pid()));
    let inherited = adj(Some(std::process::id()));
    figure(
        side,
        "oom_killed",
        format!("oom_score_adj: agent {agent}, runtime {runtime} (the suite's own {inherited})"),
    );
    let may_lower = std::fs::read_to_string("/proc/self/status")
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix("CapEff:"))
        .and_then(|h| u64::from_str_radix(h.trim(), 16).ok())
        // CAP_SYS_RESOURCE
        .is_some_and(|caps| caps & (1 << 24) != 0);
    if may_lower {
        assert_eq!(agent, -999, "{}: the agent's oom_score_adj", side.name);
    } else {
        assert_eq!(agent, inherited, "{}: the agent's oom_score_adj", side.name);
        let log = side.c.log(if side.crust { "crustlet" } else { "kubelet" });
        assert!(
            log.contains("oom_score_adj"),
            "{}: the agent does not say it could not protect itself",
            side.name
        );
    }
}

/// The hard eviction thresholds both agents run with in the suite (the cluster's: low
/// enough that a busy CI disk puts no node under pressure), memory's replaced.
pub(crate) fn eviction_hard(memory_available_ki: u64) -> String {
    format!(
        "--eviction-hard=memory.available<{memory_available_ki}Ki,nodefs.available<1%,nodefs.inodesFree<1%,imagefs.available<1%"
    )
}

/// memory.available as this side's agent computes it, in bytes: the crustlet takes the
/// host's MemAvailable; the kubelet, capacity less the root cgroup's working set (its
/// summary API's `node.memory.availableBytes`).
pub(crate) fn memory_available(side: &Side) -> u64 {
    if side.crust {
        let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap();
        let kib: u64 = meminfo
            .lines()
            .find_map(|l| l.strip_prefix("MemAvailable:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .expect("MemAvailable");
        kib * 1024
    } else {
        let path = format!("/api/v1/nodes/{}/proxy/stats/summary", side.node);
        let out = run_timeout(&mut side.c.kubectl(&["get", "--raw", &path]), T);
        let v: Value = serde_json::from_slice(&out.stdout).unwrap_or(Value::Null);
        v["node"]["memory"]["availableBytes"]
            .as_u64()
            .unwrap_or_else(|| panic!("the kubelet's summary: {}", s(&out.stderr)))
    }
}

pub(crate) fn restart_agent_with(side: &Side, extra: &[String]) {
    if side.crust {
        side.c.stop_crustlet();
        side.c.start_crustlet_with(extra);
    } else {
        side.c.stop_kubelet();
        side.c.start_kubelet_with(extra);
    }
}

/// A pod that allocates memory, 50 MB at a time up to 4 GB (its shell keeps the strings
/// it read; no `exec`), on a node whose agent was restarted with a hard threshold 200 MiB
/// below the memory available:
/// the agent evicts that pod (BestEffort, using more than it requests), not its
/// Guaranteed neighbour, before the kernel's OOM killer has to; the evicted pod is
/// Failed with reason Evicted, the kubelet's message and a DisruptionTarget condition.
pub(crate) fn memory_pressure_eviction(side: &Side) {
    let mut quiet = side.pod("ev-guaranteed", "exec sleep 3600");
    quiet["spec"]["containers"][0]["resources"] = json!({
        "limits": {"memory": "64Mi", "cpu": "50m"},
        "requests": {"memory": "64Mi", "cpu": "50m"},
    });
    // The hog allocates when the test says so (`/tmp/go`), once its agent runs with the
    // threshold: what is tested is the eviction manager, not admission after a restart
    // on a node already under pressure (where the kubelet rejects a BestEffort pod).
    let hog = side.pod(
        "ev-hog",
        r#"while [ ! -e /tmp/go ]; do sleep 0.2; done; i=0
        while [ $i -lt 80 ]; do
            eval "x$i=\$(head -c 50000000 /dev/zero | tr '\\0' a)"
            i=$((i + 1)); echo "holding $((i * 50)) MB"; sleep 0.3
        done; sleep 3600"#,
    );
    side.apply(vec![quiet, hog]);
    let quiet_id = container_id(&side.wait_running("ev-guaranteed"));
    side.wait_running("ev-hog");
    // Pressure once the hog holds 200 MiB more than now, whatever else the machine
    // does meanwhile (CI builds the fuzzers beside the suites: hundreds of MB come and
    // go): the hog grows by 50 MB steps up to 4 GB until its agent evicts it.
    let available = memory_available(side);
    let threshold_ki = (available / 1024).saturating_sub(200 * 1024);
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        restart_agent_with(side, &[eviction_hard(threshold_ki)]);
        wait_for(&format!("{} Ready", side.node), T, |last| {
            *last = side.ready();
            (*last == "True").then_some(())
        });
        // (The Node was Ready before the restart too: the agent's server may not be
        // listening yet.)
        // (An eviction before that, the machine's other use having crossed the
        // threshold, is as good: the hog is still the pod to go.)
        wait_for(&format!("{}: exec in ev-hog", side.name), T, |last| {
            let out = run_timeout(
                &mut side.kubectl(&["exec", "ev-hog", "--", "touch", "/tmp/go"]),
                T,
            );
            *last = s(&out.stderr);
            let failed = || {
                side.get_pod("ev-hog")
                    .is_some_and(|p| p["status"]["phase"] == "Failed")
            };
            (out.status.success() || failed()).then_some(())
        });
        let t = Instant::now();
        let p = side.wait_pod("ev-hog", "Evicted", |p| p["status"]["phase"] == "Failed");
        let took = t.elapsed().as_secs_f64();
        let st = &p["status"];
        assert_eq!(st["reason"], "Evicted", "{}: {st}", side.name);
        let msg = st["message"].as_str().unwrap_or_default();
        assert!(
            msg.contains("low on resource: memory") && msg.contains("Container main was using"),
            "{}: {msg}",
            side.name
        );
        let disruption = st["conditions"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|c| c["type"] == "DisruptionTarget")
            .cloned()
            .unwrap_or(Value::Null);
        assert_eq!(disruption["status"], "True", "{}: {st}", side.name);
        assert_eq!(
            disruption["reason"], "TerminationByKubelet",
            "{}: {st}",
            side.name
        );
        let q = side.get_pod("ev-guaranteed").unwrap();
        assert!(
            running(&q),
            "{}: the Guaranteed pod: {}",
            side.name,
            q["status"]
        );
        assert_eq!(
            container_id(&q),
            quiet_id,
            "{}: the Guaranteed pod restarted",
            side.name
        );
        took
    }));
    // The suite's thresholds back, whatever happened.
    restart_agent_with(side, &[]);
    let took = result.unwrap_or_else(|e| std::panic::resume_unwind(e));
    figure(
        side,
        "memory_pressure_eviction",
        format!(
            "the pod allocating 50 MB steps Evicted {took:.1} s after it began (memory.available<{} MiB, {} MiB available before), its Guaranteed neighbour untouched",
            threshold_ki / 1024,
            available >> 20
        ),
    );
}
