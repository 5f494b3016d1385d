//! The kubelet's checks of what its node does around a pod: requests and limits in
//! cgroups, volumes, the host's network and ports, deletion and grace periods, stats and
//! metrics, and crustd and the kubelet restarted under running pods.

use super::{
    apply, container_id, delete_and_time, get, http_get, jwt_claims, kubectl, ok, pod, read_trim,
    run_pod, run_timeout, running, s, sleeper, status_of, tail, wait_for, wait_pod, T,
};
use crust_e2e::cluster::{Cluster, NODE};
use serde_json::{json, Value};
use std::io::Read;
use std::time::Duration;

// ---- c. resources, volumes, host network ----------------------------------------------

pub fn requests_and_limits_in_cgroups(c: &Cluster) {
    let p = run_pod(
        c,
        pod(c, "res", "exec sleep 3600", |p| {
            p["spec"]["containers"][0]["resources"] = json!({
                "requests": {"cpu": "100m", "memory": "32Mi"},
                "limits": {"cpu": "200m", "memory": "64Mi"},
            });
        }),
    );
    assert_eq!(p["status"]["qosClass"], "Burstable");
    let id = container_id(&p, "main");
    let mem = c
        .cgroup_dir_named("memory", &id)
        .unwrap_or_else(|| panic!("no memory cgroup named {id} under {}", c.cgroup_root));
    assert!(
        mem.to_string_lossy().contains("/kubepods/burstable/pod"),
        "{}",
        mem.display()
    );
    assert_eq!(read_trim(&mem.join("memory.limit_in_bytes")), "67108864");
    let cpu = c.cgroup_dir_named("cpu", &id).expect("cpu cgroup");
    assert_eq!(read_trim(&cpu.join("cpu.cfs_quota_us")), "20000");
    assert_eq!(read_trim(&cpu.join("cpu.cfs_period_us")), "100000");
    assert_eq!(read_trim(&cpu.join("cpu.shares")), "102");
    // The container's processes are in it.
    let procs = read_trim(&mem.join("cgroup.procs"));
    assert!(!procs.is_empty(), "no process in {}", mem.display());
    // The pod-level cgroup the kubelet made carries the pod's limit too.
    let pod_mem = mem.parent().unwrap();
    assert_eq!(
        read_trim(&pod_mem.join("memory.limit_in_bytes")),
        "67108864"
    );
}

pub fn configmap_secret_and_token_volumes(c: &Cluster) {
    apply(
        c,
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cfg"},
               "data": {"greeting": "hello-config"}}),
    );
    apply(
        c,
        json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "sec"},
               "stringData": {"password": "s3cret"}}),
    );
    run_pod(
        c,
        pod(c, "vols", "exec sleep 3600", |p| {
            p["spec"]["volumes"] = json!([
                {"name": "cfg", "configMap": {"name": "cfg"}},
                {"name": "sec", "secret": {"secretName": "sec"}},
                {"name": "tok", "projected": {"sources": [
                    {"serviceAccountToken": {"path": "token", "audience": "crust-test", "expirationSeconds": 3600}}
                ]}},
            ]);
            p["spec"]["containers"][0]["volumeMounts"] = json!([
                {"name": "cfg", "mountPath": "/etc/cfg"},
                {"name": "sec", "mountPath": "/etc/sec"},
                {"name": "tok", "mountPath": "/var/run/tok"},
            ]);
        }),
    );
    let cat = |f: &str| kubectl(c, &["exec", "vols", "--", "cat", f]);
    assert_eq!(cat("/etc/cfg/greeting"), "hello-config");
    assert_eq!(cat("/etc/sec/password"), "s3cret");
    let claims = jwt_claims(&cat("/var/run/tok/token"));
    assert_eq!(claims["aud"], json!(["crust-test"]), "{claims}");
    assert_eq!(claims["kubernetes.io"]["pod"]["name"], "vols", "{claims}");
    // The default service account token, with the cluster's CA and namespace.
    let sa = "/var/run/secrets/kubernetes.io/serviceaccount";
    let claims = jwt_claims(&cat(&format!("{sa}/token")));
    assert_eq!(
        claims["sub"], "system:serviceaccount:default:default",
        "{claims}"
    );
    assert_eq!(cat(&format!("{sa}/namespace")), "default");
    let ca = std::fs::read_to_string(c.path("pki/ca.pem")).unwrap();
    assert_eq!(cat(&format!("{sa}/ca.crt")).trim(), ca.trim());
    // Read-only where Kubernetes says so.
    let out = run_timeout(
        &mut c.kubectl(&["exec", "vols", "--", "touch", "/etc/sec/x"]),
        T,
    );
    assert!(!out.status.success(), "the secret volume is writable");
}

pub fn host_network_pod(c: &Cluster) {
    let p = run_pod(
        c,
        pod(c, "hostnet", "exec sleep 3600", |p| {
            p["spec"]["hostNetwork"] = json!(true)
        }),
    );
    assert_eq!(p["status"]["podIP"], c.ip.as_str());
    let dev = kubectl(c, &["exec", "hostnet", "--", "cat", "/proc/net/dev"]);
    assert!(dev.contains("knode0"), "{dev}");
}

pub fn host_port_pod(c: &Cluster) {
    run_pod(
        c,
        pod(c, "hostport", "exec httpd -f -p 8080 -h /www", |p| {
            p["spec"]["containers"][0]["ports"] =
                json!([{"containerPort": 8080, "hostPort": 18081, "protocol": "TCP"}]);
        }),
    );
    for addr in [format!("{}:18081", c.ip), "127.0.0.1:18081".to_string()] {
        let body = wait_for(&format!("the host port on {addr}"), T, |last| {
            http_get(c, &addr, "/").map_err(|e| *last = e).ok()
        });
        assert!(body.contains("hello from crust"), "{body}");
    }
}

// ---- d. deletion -----------------------------------------------------------------------

/// Deletes pod `name` and waits until it is gone: how long that took.
/// Deletes pod `name` (`kubectl delete`, in `c`'s default namespace) and tells how long
/// until the runtime showed none of its containers running (see [`delete_and_time`]).
fn delete_until_stopped(c: &Cluster, name: &str) -> Duration {
    let label = format!("io.kubernetes.pod.name={name}");
    delete_and_time(c.kubectl(&["delete", "pod", name, "--wait=true"]), &|| {
        c.crictl(&["ps", "-q", "--label", &label])
    })
}

/// What crustd still has of pod `name`'s containers, running or not.
fn crictl_containers(c: &Cluster, pod_name: &str, all: bool) -> Vec<Value> {
    let mut args = vec!["ps", "-o", "json", "--label", ""];
    let label = format!("io.kubernetes.pod.name={pod_name}");
    args[4] = &label;
    if all {
        args.push("-a");
    }
    let v: Value = serde_json::from_str(&ok(c.crictl(&args))).unwrap();
    v["containers"].as_array().cloned().unwrap_or_default()
}

/// Waits until crustd has no ready sandbox and no running container of pod `name`.
fn stopped_in_crustd(c: &Cluster, name: &str) {
    let label = format!("io.kubernetes.pod.name={name}");
    wait_for(&format!("crustd to stop {name}"), T, |last| {
        let ctrs = crictl_containers(c, name, false);
        let pods = ok(c.crictl(&["pods", "-q", "--state", "ready", "--label", &label]));
        *last = format!("containers {ctrs:?}, ready sandboxes {pods:?}");
        (ctrs.is_empty() && pods.trim().is_empty()).then_some(())
    });
}

pub fn graceful_deletion(c: &Cluster) {
    run_pod(
        c,
        pod(
            c,
            "graceful",
            "trap 'echo got TERM; exit 0' TERM; while true; do sleep 0.2; done",
            |p| {
                p["spec"]["terminationGracePeriodSeconds"] = json!(30);
            },
        ),
    );
    let took = delete_until_stopped(c, "graceful");
    // Without SIGTERM the grace period (30 s) would run out first.
    assert!(
        took < Duration::from_secs(20),
        "the container ran {took:?} after its deletion: SIGTERM not delivered?"
    );
    stopped_in_crustd(c, "graceful");
}

pub fn sigterm_ignored_until_grace_period(c: &Cluster) {
    run_pod(
        c,
        pod(
            c,
            "stubborn",
            "trap '' TERM; while true; do sleep 0.2; done",
            |p| {
                p["spec"]["terminationGracePeriodSeconds"] = json!(4);
            },
        ),
    );
    let took = delete_until_stopped(c, "stubborn");
    assert!(
        took >= Duration::from_millis(3500),
        "stopped after {took:?}, before its grace period"
    );
    // SIGKILL at the end of the 4 s grace period.
    assert!(
        took < Duration::from_secs(20),
        "the container ran {took:?} after its deletion"
    );
    stopped_in_crustd(c, "stubborn");
}

// ---- e. stats --------------------------------------------------------------------------

pub fn stats_summary(c: &Cluster) {
    run_pod(
        c,
        pod(
            c,
            "stats",
            "dd if=/dev/zero of=/tmp/fill bs=1M count=16; exec sleep 3600",
            |_| {},
        ),
    );
    let path = format!("/api/v1/nodes/{NODE}/proxy/stats/summary");
    wait_for("the pod's stats", Duration::from_secs(90), |last| {
        let out = run_timeout(&mut c.kubectl(&["get", "--raw", &path]), T);
        let v: Value = serde_json::from_slice(&out.stdout).ok()?;
        let p = v["pods"]
            .as_array()?
            .iter()
            .find(|p| p["podRef"]["name"] == "stats")?
            .clone();
        *last = p.to_string();
        let has = |x: &Value| {
            x["cpu"]["usageCoreNanoSeconds"]
                .as_u64()
                .is_some_and(|n| n > 0)
                && x["memory"]["workingSetBytes"]
                    .as_u64()
                    .is_some_and(|n| n > 0)
        };
        let ctr = p["containers"]
            .as_array()?
            .iter()
            .find(|c| c["name"] == "main")?
            .clone();
        (has(&p) && has(&ctr) && has(&v["node"])).then_some(())
    });
}

/// `/metrics/cadvisor` with PodAndContainerStatsFromCRI on: the kubelet serves it from
/// crustd's ListMetricDescriptors and ListPodSandboxMetrics. A container limited to a
/// fifth of a CPU that puts 16 MiB in the pod's /dev/shm and spins has its CPU seconds
/// (whole ones: the CRI's values are integers) and a working set of 16 MiB or more,
/// labelled with its pod, namespace, container name, crust id and image name, and its
/// memory limit; its pod's eth0 counts bytes both ways.
pub fn metrics_cadvisor(c: &Cluster) {
    use crust_e2e::prometheus::{label, samples, Sample};
    let p = run_pod(
        c,
        pod(
            c,
            "cadvisor",
            "head -c 16777216 /dev/zero > /dev/shm/fill; while :; do :; done",
            |p| {
                p["spec"]["containers"][0]["resources"] = json!({
                    "limits": {"cpu": "200m", "memory": "64Mi"},
                });
            },
        ),
    );
    let id = container_id(&p, "main");
    let path = format!("/api/v1/nodes/{NODE}/proxy/metrics/cadvisor");
    // The pod's samples of `name` for `container` ("" for the pod's own).
    let of = |all: &[Sample], name: &str, container: &str| -> Vec<Sample> {
        all.iter()
            .filter(|s| {
                s.0 == name
                    && label(s, "pod") == Some("cadvisor")
                    && label(s, "namespace") == Some("default")
                    && label(s, "container") == Some(container)
            })
            .cloned()
            .collect()
    };
    const MIB: f64 = 1024.0 * 1024.0;
    let (text, all) = wait_for(
        "the pod's CPU seconds and working set on /metrics/cadvisor",
        Duration::from_secs(90),
        |last| {
            let out = run_timeout(&mut c.kubectl(&["get", "--raw", &path]), T);
            let text = s(&out.stdout);
            let Some(all) = samples(&text) else {
                *last = format!("unreadable: {text}{}", s(&out.stderr));
                return None;
            };
            let cpu = of(&all, "container_cpu_usage_seconds_total", "main");
            let mem = of(&all, "container_memory_working_set_bytes", "main");
            *last = format!("{cpu:?} {mem:?} {}", s(&out.stderr));
            (cpu.first().is_some_and(|s| s.2 >= 1.0)
                && mem.first().is_some_and(|s| s.2 >= 16.0 * MIB))
            .then_some((text, all))
        },
    );
    // Plausible: fewer CPU seconds than the check has waited, no more memory than the
    // limit.
    for (name, kind, most) in [
        ("container_cpu_usage_seconds_total", "counter", 600.0),
        ("container_memory_working_set_bytes", "gauge", 64.0 * MIB),
    ] {
        let found = of(&all, name, "main");
        assert_eq!(found.len(), 1, "{name}: {found:?}");
        let s = &found[0];
        assert_eq!(label(s, "id"), Some(id.as_str()), "{name}: {s:?}");
        // The kubelet v1.28 creates a container by its image's id; the label is the
        // name its pod spec has.
        assert_eq!(label(s, "image"), Some(c.image.as_str()), "{name}: {s:?}");
        assert!(s.2 <= most, "{name}: {}", s.2);
        assert!(
            text.contains(&format!("# TYPE {name} {kind}\n")),
            "{name} is no {kind}"
        );
    }
    let limit = of(&all, "container_spec_memory_limit_bytes", "main");
    assert_eq!(limit.first().map(|s| s.2), Some(64.0 * MIB), "{limit:?}");
    // The pod's network: container "" and interface eth0, bytes both ways.
    for name in [
        "container_network_receive_bytes_total",
        "container_network_transmit_bytes_total",
    ] {
        let net = of(&all, name, "");
        assert!(
            net.iter()
                .any(|s| label(s, "interface") == Some("eth0") && s.2 > 0.0),
            "{name}: {net:?}"
        );
    }
    kubectl(c, &["delete", "pod", "cadvisor", "--wait=false"]);
}

// ---- f. restarts of crustd and the kubelet ----------------------------------------------

/// Container ids and restart counts of the given pods.
fn snapshot(c: &Cluster, pods: &[&str]) -> Vec<(String, u64)> {
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

/// The kubelet's log so far, in bytes: where the lines of what happens next begin.
fn kubelet_log_len(c: &Cluster) -> u64 {
    std::fs::metadata(c.log_path("kubelet"))
        .map(|m| m.len())
        .unwrap_or(0)
}

/// How many syncs of each of `pods` the kubelet finished after byte `since` of its log:
/// its `SyncPod exit` lines, which `Cluster::start_kubelet` has it write. A sync ends
/// after the runtime calls it decided on (a container killed, made, started), so what
/// it changed is in crustd by the time its line is.
fn syncs_since(c: &Cluster, pods: &[&str], since: u64) -> Vec<usize> {
    use std::io::Seek;
    let mut log = Vec::new();
    if let Ok(mut f) = std::fs::File::open(c.log_path("kubelet")) {
        if f.seek(std::io::SeekFrom::Start(since)).is_ok() {
            let _ = f.read_to_end(&mut log);
        }
    }
    let log = String::from_utf8_lossy(&log);
    pods.iter()
        .map(|n| {
            log.matches(&format!("\"SyncPod exit\" pod=\"default/{n}\""))
                .count()
        })
        .collect()
}

/// Waits until the kubelet has finished `n` syncs of each of `pods` after byte `since`
/// of its log.
fn wait_synced(c: &Cluster, pods: &[&str], since: u64, n: usize) {
    wait_for(
        &format!("the kubelet to sync {pods:?} {n} time(s)"),
        T,
        |last| {
            let done = syncs_since(c, pods, since);
            *last = format!("syncs so far: {done:?}");
            done.iter().all(|&k| k >= n).then_some(())
        },
    );
}

/// Once the kubelet synced them against crustd as it is now: the survivors' containers
/// are those of before, in crustd (where a restart decided in that sync already shows)
/// and in the pods' status.
fn survivors_unchanged(c: &Cluster, pods: &[&str], before: &[(String, u64)]) {
    assert!(
        c.kubelet_running(),
        "the kubelet exited: {}",
        tail(&c.log("kubelet"), 20)
    );
    for (n, (id, _)) in pods.iter().zip(before) {
        let ctrs = crictl_containers(c, n, true);
        let now: Vec<_> = ctrs.iter().map(|x| (&x["id"], &x["state"])).collect();
        assert_eq!(
            now,
            [(&json!(id), &json!("CONTAINER_RUNNING"))],
            "{n}: crustd's containers of the pod"
        );
    }
    c.wait_node_ready(T);
    for (n, (id, restarts)) in pods.iter().zip(before) {
        let p = wait_pod(c, n, "running", T, running);
        assert_eq!(&container_id(&p, "main"), id, "{n}: a new container");
        assert_eq!(
            status_of(&p, "main").unwrap()["restartCount"].as_u64(),
            Some(*restarts),
            "{n} restarted"
        );
        assert_eq!(kubectl(c, &["exec", n, "--", "echo", "alive"]), "alive\n");
    }
}

pub fn crustd_killed_and_restarted(c: &Cluster) {
    let pods = ["survivor-a", "survivor-b"];
    for n in pods {
        sleeper(c, n);
    }
    let before = snapshot(c, &pods);
    c.kill_crustd();
    std::thread::sleep(Duration::from_secs(3));
    c.start_crustd();
    // The kubelet kept running, and resyncs a pod only every minute or so: each survivor
    // is updated (an annotation) to be synced now, twice. The pod worker starts a sync
    // from a relist of the runtime newer than the end of the one before, so the second
    // one is decided on what the restarted crustd answers.
    let since = kubelet_log_len(c);
    for round in 1..=2 {
        for n in pods {
            let mark = format!("crust.test/sync={round}");
            kubectl(c, &["annotate", "pod", n, &mark, "--overwrite"]);
        }
        wait_synced(c, &pods, since, round);
    }
    survivors_unchanged(c, &pods, &before);
    sleeper(c, "after-crustd");
    kubectl(c, &["delete", "pod", "after-crustd", "--wait=true"]);
}

pub fn kubelet_restarted_adopts_its_pods(c: &Cluster) {
    let pods = ["survivor-a", "survivor-b"];
    if get(c, "pod", pods[0]).is_none() {
        for n in pods {
            sleeper(c, n);
        }
    }
    let before = snapshot(c, &pods);
    c.stop_kubelet();
    std::thread::sleep(Duration::from_secs(2));
    // A new process: its first sync of a pod waits for its first relist of the runtime.
    let since = kubelet_log_len(c);
    c.start_kubelet();
    wait_synced(c, &pods, since, 1);
    survivors_unchanged(c, &pods, &before);
    sleeper(c, "after-kubelet");
}
