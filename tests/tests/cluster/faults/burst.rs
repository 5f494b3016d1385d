//! The agent and the runtime SIGKILLed in the middle of a burst of creations and
//! deletions.

use super::*;

/// Pods the burst checks keep running through the fault (one of them with a ConfigMap
/// volume), pods they delete during it, and pods they create during it.
pub(crate) const KEEP: usize = 3;
pub(crate) const DOOMED: usize = 3;
pub(crate) const BURST: usize = 12;

/// The burst checks' state from before the fault.
pub(crate) struct Burst {
    /// keep-i's container id.
    kept: Vec<String>,
    /// The ConfigMap volume's `..data` target in keep-0.
    data: String,
}

/// The generation the ConfigMap volume of `<tag>-keep-0` shows (where its `..data`
/// points): a new one means the volume was written again under the container.
fn volume_generation(side: &Side, tag: &str) -> String {
    let pod = format!("{tag}-keep-0");
    let out = side.ok(&["exec", &pod, "--", "readlink", "/etc/cfg/..data"]);
    out.trim().to_string()
}

pub(crate) fn burst_prepare(side: &Side, tag: &str) -> Burst {
    let cm = format!("{tag}-cm");
    side.apply(vec![json!({
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": cm, "namespace": side.ns},
        "data": {"key": "value"},
    })]);
    let mut pods = vec![];
    for i in 0..KEEP {
        let mut p = side.pod(&format!("{tag}-keep-{i}"), "exec sleep 3600");
        if i == 0 {
            p["spec"]["volumes"] = json!([{"name": "cfg", "configMap": {"name": cm}}]);
            p["spec"]["containers"][0]["volumeMounts"] =
                json!([{"name": "cfg", "mountPath": "/etc/cfg"}]);
        }
        pods.push(p);
    }
    for i in 0..DOOMED {
        pods.push(side.pod(&format!("{tag}-doomed-{i}"), "exec sleep 3600"));
    }
    side.apply(pods);
    let mut kept = vec![];
    for i in 0..KEEP {
        kept.push(container_id(&side.wait_running(&format!("{tag}-keep-{i}"))));
    }
    for i in 0..DOOMED {
        side.wait_running(&format!("{tag}-doomed-{i}"));
    }
    let data = volume_generation(side, tag);
    assert!(!data.is_empty(), "{}: no ..data in the volume", side.name);
    Burst { kept, data }
}

/// Starts the burst (BURST pods created, DOOMED deleted, in two kubectl calls), calls
/// `fault` as soon as the runtime is making the burst's first sandbox, and returns how
/// many of the burst's containers the runtime had made by then.
pub(crate) fn burst_start(side: &Side, tag: &str, fault: impl FnOnce()) -> usize {
    let pods = (0..BURST)
        .map(|i| side.pod(&format!("{tag}-burst-{i}"), "exec sleep 3600"))
        .collect();
    side.apply(pods);
    let doomed: Vec<String> = (0..DOOMED).map(|i| format!("{tag}-doomed-{i}")).collect();
    let mut args = vec!["delete", "pod", "--wait=false"];
    args.extend(doomed.iter().map(String::as_str));
    side.ok(&args);
    let prefix = format!("{tag}-burst-");
    // The first IP host-local reserves for the burst (its files in the network's data
    // dir, the same plugin on both sides): the runtime is in the middle of the burst's
    // first RunPodSandbox. A read of a folder, not a CRI call, so the fault comes that
    // early (polling crictl, crust had made every pod before the first answer).
    let reserved = || reserved_ips(side);
    let before = reserved();
    let deadline = Instant::now() + Duration::from_secs(60);
    while reserved().is_subset(&before) {
        assert!(
            Instant::now() < deadline,
            "{}: no IP reserved for the burst in 60 s",
            side.name
        );
        std::thread::sleep(Duration::from_millis(2));
    }
    fault();
    let label = format!("io.kubernetes.pod.namespace={}", side.ns);
    let out = run_timeout(
        &mut side.crictl(&["ps", "-a", "-o", "json", "--label", &label]),
        T,
    );
    let v: Value = serde_json::from_slice(&out.stdout).unwrap_or(Value::Null);
    v["containers"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|c| {
            c["labels"]["io.kubernetes.pod.name"]
                .as_str()
                .is_some_and(|n| n.starts_with(&prefix))
        })
        .count()
}

/// After the fault: every pod that should run runs once, the deleted ones are gone from
/// the API and the runtime, the kept ones were not touched. Returns seconds until all
/// burst pods ran, counted from `since`.
pub(crate) fn burst_check(side: &Side, tag: &str, before: &Burst, since: Instant) -> f64 {
    for i in 0..BURST {
        side.wait_running(&format!("{tag}-burst-{i}"));
    }
    let all_running = since.elapsed().as_secs_f64();
    for i in 0..DOOMED {
        side.wait_gone(&format!("{tag}-doomed-{i}"));
    }
    let doomed = format!("{tag}-doomed-");
    wait_for(
        &format!("{}: the deleted pods gone from the runtime", side.name),
        T,
        |last| {
            let rt = side.runtime_pods();
            let left: Vec<&String> = rt.keys().filter(|k| k.starts_with(&doomed)).collect();
            *last = format!("{left:?}");
            left.is_empty().then_some(())
        },
    );
    let rt = side.runtime_pods();
    for i in 0..BURST {
        let name = format!("{tag}-burst-{i}");
        let p = side.get_pod(&name).unwrap();
        let st = main_status(&p);
        assert_eq!(st["restartCount"], 0, "{}: {name}: {st}", side.name);
        let r = &rt[&name];
        assert_eq!(r.ready, 1, "{}: {name}: ready sandboxes {r:?}", side.name);
        assert_eq!(
            r.containers,
            vec![container_id(&p)],
            "{}: {name}: its containers in the runtime",
            side.name
        );
    }
    for i in 0..KEEP {
        let name = format!("{tag}-keep-{i}");
        let p = side.get_pod(&name).unwrap();
        assert!(running(&p), "{}: {name}: {}", side.name, p["status"]);
        assert_eq!(
            container_id(&p),
            before.kept[i],
            "{}: {name} has a new container",
            side.name
        );
        assert_eq!(main_status(&p)["restartCount"], 0, "{}: {name}", side.name);
        let r = &rt[&name];
        assert_eq!(
            (r.sandboxes, r.ready, r.containers.len()),
            (1, 1, 1),
            "{}: {name}: {r:?}",
            side.name
        );
    }
    let data = volume_generation(side, tag);
    assert_eq!(
        data, before.data,
        "{}: the ConfigMap volume was remade under its container",
        side.name
    );
    // Nothing in the runtime but the pods the API has.
    let stray: Vec<(&String, &RuntimePod)> = rt
        .iter()
        .filter(|(k, _)| {
            !k.starts_with(&format!("{tag}-keep-")) && !k.starts_with(&format!("{tag}-burst-"))
        })
        .collect();
    assert!(
        stray.is_empty(),
        "{}: left in the runtime: {stray:?}",
        side.name
    );
    all_running
}

/// Deletes what a check made in this side's namespace and waits for the runtime to hold
/// none of it.
pub(crate) fn cleanup(side: &Side) {
    side.ok(&["delete", "pods,configmaps", "--all", "--wait=false"]);
    wait_for(
        &format!("{}: the namespace's pods deleted", side.name),
        T,
        |last| {
            let out = run_timeout(&mut side.kubectl(&["get", "pods", "-o", "name"]), T);
            *last = s(&out.stdout);
            (out.status.success() && last.trim().is_empty()).then_some(())
        },
    );
    // What the agent stopped and has yet to collect (the kubelet's garbage collection
    // of dead sandboxes runs once a minute) goes now: the next check starts clean
    // without waiting for it. Each check asserts itself what its agent leaves.
    let label = format!("io.kubernetes.pod.namespace={}", side.ns);
    let ready = ["pods", "-q", "--state", "ready", "--label", &label];
    wait_for(
        &format!("{}: the namespace's sandboxes stopped", side.name),
        T,
        |last| {
            let out = run_timeout(&mut side.crictl(&ready), T);
            *last = s(&out.stdout);
            (out.status.success() && last.trim().is_empty()).then_some(())
        },
    );
    let out = run_timeout(&mut side.crictl(&["pods", "-q", "--label", &label]), T);
    for id in s(&out.stdout).split_whitespace() {
        let _ = run_timeout(&mut side.crictl(&["rmp", "-f", id]), T);
    }
    wait_for(
        &format!("{}: the namespace's pods gone from the runtime", side.name),
        T,
        |last| {
            let rt = side.runtime_pods();
            *last = format!("{:?}", rt.keys().collect::<Vec<_>>());
            rt.is_empty().then_some(())
        },
    );
}

/// The node agent (the crustlet, the kubelet) SIGKILLed while it creates and deletes
/// pods, started again 3 s later: every pod runs once (one sandbox, one container), the
/// deletions finish, the running pods and their volumes are untouched, nothing leaks.
pub(crate) fn agent_killed_mid_burst(side: &Side) {
    let tag = "ak";
    let before = burst_prepare(side, tag);
    let started = burst_start(side, tag, || side.kill_agent());
    std::thread::sleep(Duration::from_secs(3));
    side.start_agent();
    let back = Instant::now();
    let took = burst_check(side, tag, &before, back);
    figure(
        side,
        "agent_killed_mid_burst",
        format!(
            "killed with {started} of {BURST} new containers made; all {BURST} running {took:.1} s after the restart; 0 restarts, 1 sandbox and 1 container each"
        ),
    );
}

/// The runtime (crustd, containerd) SIGKILLed during the same burst, down for 5 s: the
/// node is NotReady at most while it is down and a little after, and once it is back
/// every pod runs once and nothing is started twice.
pub(crate) fn runtime_killed_mid_burst(side: &Side) {
    let tag = "rk";
    let before = burst_prepare(side, tag);
    let samples: Mutex<Vec<(Instant, String)>> = Mutex::default();
    let stop = AtomicBool::new(false);
    let killed: Mutex<Option<Instant>> = Mutex::default();
    let (started, back, took) = std::thread::scope(|sc| {
        sc.spawn(|| {
            while !stop.load(Ordering::Relaxed) {
                let r = side.ready();
                samples.lock().unwrap().push((Instant::now(), r));
                std::thread::sleep(Duration::from_millis(500));
            }
        });
        // The sampler stops whatever happens here (the scope waits for it).
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let started = burst_start(side, tag, || {
                *killed.lock().unwrap() = Some(Instant::now());
                side.kill_runtime()
            });
            std::thread::sleep(Duration::from_secs(5));
            side.start_runtime();
            let back = Instant::now();
            let took = burst_check(side, tag, &before, back);
            // Ready again, and staying so a while.
            wait_for(&format!("{}: the node Ready again", side.name), T, |last| {
                *last = side.ready();
                (*last == "True").then_some(())
            });
            std::thread::sleep(Duration::from_secs(10));
            (started, back, took)
        }));
        stop.store(true, Ordering::Relaxed);
        r.unwrap_or_else(|e| std::panic::resume_unwind(e))
    });
    let killed = killed.lock().unwrap().expect("the runtime was killed");
    let samples = samples.lock().unwrap();
    let not_ready: Vec<&(Instant, String)> = samples.iter().filter(|(_, r)| r != "True").collect();
    let first = not_ready
        .first()
        .map(|(t, _)| t.duration_since(killed).as_secs_f64());
    let last_nr = not_ready.last().map(|(t, _)| *t);
    let seconds_not_ready = match (not_ready.first(), last_nr) {
        (Some((a, _)), Some(b)) => b.duration_since(*a).as_secs_f64() + 0.5,
        _ => 0.0,
    };
    if let Some(last_nr) = last_nr {
        // Not NotReady long after the runtime came back: 30 s covers a status update
        // and the agent's look at the runtime.
        let after = last_nr.saturating_duration_since(back);
        assert!(
            after < Duration::from_secs(30),
            "{}: still NotReady {after:?} after the runtime came back",
            side.name
        );
    }
    figure(
        side,
        "runtime_killed_mid_burst",
        format!(
            "killed with {started} of {BURST} new containers made, down 5 s; NotReady {seconds_not_ready:.1} s{}; all {BURST} running {took:.1} s after the restart; 0 restarts, 1 sandbox and 1 container each",
            first.map(|f| format!(" (from {f:.1} s after the kill)")).unwrap_or_default()
        ),
    );
}
