//! Metrics: ListMetricDescriptors and ListPodSandboxMetrics, through CRI and through the
//! real crictl.

use super::*;
use crust_e2e::crustd::Crustd;

/// The pod's metrics by ListPodSandboxMetrics, `None` when it has none.
/// Pings the pod network's gateway `count` times from pod `pod`'s network namespace:
/// traffic both ways on its eth0.
fn ping_gateway(e: &Env, pod: &str, count: u32) {
    let gateway = format!("10.{}.0.1", e.d.opts.subnet);
    let pin = e.d.pin(pod, "net");
    let out = crust_e2e::run(std::process::Command::new("nsenter").args([
        &format!("--net={}", pin.display()),
        "ping",
        "-c",
        &count.to_string(),
        "-i",
        "0.2",
        "-W",
        "2",
        &gateway,
    ]));
    assert!(out.status.success(), "ping {gateway}: {out:?}");
}

async fn pod_metrics(e: &mut Env, pod: &str) -> Option<PodSandboxMetrics> {
    e.c.list_pod_sandbox_metrics(ListPodSandboxMetricsRequest {})
        .await
        .expect("ListPodSandboxMetrics")
        .into_inner()
        .pod_metrics
        .into_iter()
        .find(|p| p.pod_sandbox_id == pod)
}

/// The value of the metric `name` whose label values end with `extra`.
fn metric(ms: &[Metric], name: &str, extra: &[&str]) -> Option<u64> {
    let extra: Vec<String> = extra.iter().map(|s| s.to_string()).collect();
    ms.iter()
        .find(|m| m.name == name && m.label_values.ends_with(&extra))
        .map(|m| m.value.unwrap().value)
}

/// Polls the pod's metrics until `f` finds what it wants in them (or 120 s pass: a
/// VM emulating its CPUs is slow).
async fn metrics_until<T>(
    e: &mut Env,
    pod: &str,
    what: &str,
    f: impl Fn(&PodSandboxMetrics) -> Option<T>,
) -> T {
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let m = pod_metrics(e, pod).await;
        if let Some(v) = m.as_ref().and_then(&f) {
            return v;
        }
        assert!(Instant::now() < deadline, "{what}: never so in {m:?}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// ListMetricDescriptors and ListPodSandboxMetrics as the kubelet reads them with
/// PodAndContainerStatsFromCRI: a container with critest's resources that fills 48 MiB
/// of the pod's /dev/shm and then spins shows CPU seconds that rise from one call to
/// the next, throttling, and a working set above 48 MiB; the pod's eth0 counts a ping
/// to the bridge's gateway both ways; every metric has a descriptor and as many label
/// values as it has keys, the labels say pod, namespace, container, id and image;
/// critest's metrics spec would find what it wants; an exited container and a stopped
/// pod have none.
#[tokio::test]
async fn metrics_of_a_busy_container_and_its_pod() {
    if !root() {
        return;
    }
    let mut e = setup().await;
    let pod = e.pod("metered").await;
    let mut cfg = ctr(
        "burner",
        &[
            "sh",
            "-c",
            "head -c 50331648 /dev/zero > /dev/shm/fill && while :; do :; done",
        ],
    );
    // critest's resources for its metrics spec: a fifth of a CPU, 64 MiB.
    *res(&mut cfg) = LinuxContainerResources {
        cpu_period: 100_000,
        cpu_quota: 20_000,
        cpu_shares: 1024,
        memory_limit_in_bytes: 64 << 20,
        memory_swap_limit_in_bytes: 64 << 20,
        ..Default::default()
    };
    let id = e.create(&pod, cfg).await;
    e.start(&id).await;
    let done = e.create(&pod, ctr("done", &["true"])).await;
    e.start(&done).await;
    e.wait_exited(&done).await;

    let descs: std::collections::HashMap<String, MetricDescriptor> =
        e.c.list_metric_descriptors(ListMetricDescriptorsRequest {})
            .await
            .expect("ListMetricDescriptors")
            .into_inner()
            .descriptors
            .into_iter()
            .map(|d| (d.name.clone(), d))
            .collect();
    for name in [
        "container_cpu_usage_seconds_total",
        "container_memory_working_set_bytes",
        "container_network_receive_bytes_total",
        "container_fs_usage_bytes",
    ] {
        assert!(descs.contains_key(name), "no descriptor for {name}");
    }

    // CPU time is in whole seconds: wait for the first, then for one more.
    let cpu = |p: &PodSandboxMetrics| {
        let c = p.container_metrics.iter().find(|c| c.container_id == id)?;
        metric(&c.metrics, "container_cpu_usage_seconds_total", &[]).filter(|&v| v > 0)
    };
    let first = metrics_until(&mut e, &pod.0, "cpu usage above 0", cpu).await;
    let second = metrics_until(&mut e, &pod.0, "cpu usage rising", |p| {
        cpu(p).filter(|&v| v > first)
    })
    .await;
    assert!(second > first);
    // At a fifth of a CPU (and in an emulated VM) the fill may still be going on.
    metrics_until(&mut e, &pod.0, "working set above 48 MiB", |p| {
        let c = p.container_metrics.iter().find(|c| c.container_id == id)?;
        metric(&c.metrics, "container_memory_working_set_bytes", &[]).filter(|&v| v > 48 << 20)
    })
    .await;

    // Traffic on eth0: pings from the pod to the bridge's gateway, and back.
    let before = pod_metrics(&mut e, &pod.0).await.unwrap();
    let net = |p: &PodSandboxMetrics, name: &str| {
        metric(&p.metrics, name, &["eth0"]).unwrap_or_else(|| panic!("no {name}: {p:?}"))
    };
    ping_gateway(&e, &pod.0, 3);
    let p = pod_metrics(&mut e, &pod.0).await.unwrap();
    for (name, least) in [
        ("container_network_transmit_bytes_total", 3 * 84),
        ("container_network_receive_bytes_total", 3 * 84),
        ("container_network_transmit_packets_total", 3),
        ("container_network_receive_packets_total", 3),
    ] {
        let (b, a) = (net(&before, name), net(&p, name));
        assert!(a >= b + least, "{name}: {b} then {a}");
    }
    assert_eq!(
        metric(
            &p.metrics,
            "container_network_receive_errors_total",
            &["eth0"]
        ),
        Some(0)
    );
    assert!(
        p.metrics.iter().all(|m| m.label_values[..5]
            == ["metered", "default", "", pod.0.as_str(), ""]
            && m.label_values[5] != "lo"),
        "{:?}",
        p.metrics
    );

    // The kubelet drops a metric without a descriptor or with a label count its
    // descriptor does not have.
    for m in p
        .metrics
        .iter()
        .chain(p.container_metrics.iter().flat_map(|c| &c.metrics))
    {
        let d = descs
            .get(&m.name)
            .unwrap_or_else(|| panic!("{} has no descriptor", m.name));
        assert_eq!(m.label_values.len(), d.label_keys.len(), "{m:?} {d:?}");
    }

    // Only the running container; its labels, memory, limits, processes, layer.
    let ids: Vec<&str> = p
        .container_metrics
        .iter()
        .map(|c| c.container_id.as_str())
        .collect();
    assert_eq!(ids, [id.as_str()], "the exited container has no metrics");
    let c = &p.container_metrics[0].metrics;
    for m in c {
        assert_eq!(
            m.label_values[..5],
            ["metered", "default", "burner", id.as_str(), "busybox:e2e"],
            "{}",
            m.name
        );
    }
    let v = |name: &str| metric(c, name, &[]).unwrap_or_else(|| panic!("no {name}: {c:?}"));
    assert!(
        v("container_memory_working_set_bytes") > 48 << 20,
        "{}",
        v("container_memory_working_set_bytes")
    );
    assert!(v("container_memory_usage_bytes") >= v("container_memory_working_set_bytes"));
    assert!(v("container_memory_max_usage_bytes") >= v("container_memory_usage_bytes"));
    assert_eq!(v("container_spec_memory_limit_bytes"), 64 << 20);
    assert_eq!(v("container_spec_memory_swap_limit_bytes"), 64 << 20);
    assert_eq!(v("container_spec_cpu_period"), 100_000);
    assert_eq!(v("container_spec_cpu_quota"), 20_000);
    assert_eq!(v("container_spec_cpu_shares"), 1024);
    // Spinning at a fifth of a CPU: throttled in most periods.
    assert!(v("container_cpu_cfs_periods_total") > 0);
    assert!(v("container_cpu_cfs_throttled_periods_total") > 0);
    assert!(v("container_processes") >= 1 && v("container_threads") >= 1);
    assert!(v("container_file_descriptors") >= 3);
    assert_eq!(v("container_oom_events_total"), 0);
    let started = v("container_start_time_seconds");
    assert!(started > 1_600_000_000 && v("container_last_seen") >= started);
    assert!(
        c.iter().any(|m| m.name == "container_fs_usage_bytes"),
        "{c:?}"
    );
    assert!(
        metric(c, "container_ulimits_soft", &["RLIMIT_NOFILE"]).is_some_and(|n| n > 0),
        "{c:?}"
    );

    // critest's metrics spec (cri-tools pkg/validate/pod.go): these names have values
    // (the rest of its list it takes as optional or not yet implemented by every
    // runtime), and so does every descriptor the runtime gave but those.
    let sent: std::collections::HashSet<&str> = p
        .metrics
        .iter()
        .chain(p.container_metrics.iter().flat_map(|c| &c.metrics))
        .map(|m| m.name.as_str())
        .collect();
    let critest_wants = [
        "container_cpu_cfs_periods_total",
        "container_cpu_cfs_throttled_periods_total",
        "container_cpu_cfs_throttled_seconds_total",
        "container_cpu_system_seconds_total",
        "container_cpu_usage_seconds_total",
        "container_cpu_user_seconds_total",
        "container_file_descriptors",
        "container_fs_inodes_free",
        "container_fs_inodes_total",
        "container_fs_limit_bytes",
        "container_fs_usage_bytes",
        "container_last_seen",
        "container_memory_cache",
        "container_memory_failcnt",
        "container_memory_failures_total",
        "container_memory_kernel_usage",
        "container_memory_mapped_file",
        "container_memory_max_usage_bytes",
        "container_memory_rss",
        "container_memory_swap",
        "container_memory_usage_bytes",
        "container_memory_working_set_bytes",
        "container_network_receive_bytes_total",
        "container_network_receive_errors_total",
        "container_network_receive_packets_dropped_total",
        "container_network_receive_packets_total",
        "container_network_transmit_bytes_total",
        "container_network_transmit_errors_total",
        "container_network_transmit_packets_dropped_total",
        "container_network_transmit_packets_total",
        "container_oom_events_total",
        "container_processes",
        "container_sockets",
        "container_spec_cpu_period",
        "container_spec_cpu_shares",
        "container_spec_memory_limit_bytes",
        "container_spec_memory_swap_limit_bytes",
        "container_start_time_seconds",
        "container_threads",
        "container_threads_max",
    ];
    let critest_optional = [
        "container_blkio_device_usage_total",
        "container_fs_reads_bytes_total",
        "container_fs_reads_total",
        "container_fs_writes_bytes_total",
        "container_fs_writes_total",
        "container_ulimits_soft",
    ];
    for name in critest_wants {
        assert!(descs.contains_key(name), "no descriptor for {name}");
        assert!(sent.contains(name), "no value for {name}");
    }
    for (name, d) in &descs {
        assert!(!d.help.is_empty() && !d.label_keys.is_empty(), "{d:?}");
        assert!(
            sent.contains(name.as_str()) || critest_optional.contains(&name.as_str()),
            "a descriptor without values: {name}"
        );
    }

    e.stop_pod(&pod.0).await;
    assert!(
        pod_metrics(&mut e, &pod.0).await.is_none(),
        "a stopped pod has no metrics"
    );
}

/// The real crictl (cri-tools, `$CRUST_KUBE_BIN` or where `hack/deps` unpacks it), or
/// `None` after saying loudly that the test is skipped (under `CI=true`, a failure).
fn crictl() -> Option<PathBuf> {
    if let Some(p) = crust_e2e::cluster::kube_bin("crictl") {
        return Some(p);
    }
    let msg = "test needs crictl (hack/deps unpacks it into target/kube-bin)";
    if crust_e2e::ci() {
        panic!("{msg}; CI must run every root test");
    }
    crust_e2e::say_skipped(msg);
    None
}

/// `crictl <args> -o json` against the daemon's socket, parsed.
fn crictl_json(crictl: &Path, d: &Crustd, args: &[&str]) -> serde_json::Value {
    let ep = format!("unix://{}", d.socket.display());
    let out = crust_e2e::run(
        std::process::Command::new(crictl)
            .args(["--runtime-endpoint", &ep, "--image-endpoint", &ep])
            .args(["--timeout", "20s"])
            .args(args)
            .args(["-o", "json"])
            // No config file: the endpoints are all it needs.
            .env("CRI_CONFIG_FILE", "/dev/null"),
    );
    assert!(
        out.status.success(),
        "crictl {args:?}: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "crictl {args:?}: {e}: {}",
            String::from_utf8_lossy(&out.stdout)
        )
    })
}

/// A metric of crictl's JSON (protojson: camelCase names, the type by name, 64-bit
/// integers as strings): its type, label values and value.
fn crictl_metric(m: &serde_json::Value) -> (String, Vec<String>, u64) {
    let labels = m["labelValues"]
        .as_array()
        .unwrap_or_else(|| panic!("no labelValues: {m}"))
        .iter()
        .map(|v| v.as_str().unwrap().to_string())
        .collect();
    let value = m["value"]["value"]
        .as_str()
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no value: {m}"));
    (m["metricType"].as_str().unwrap().to_string(), labels, value)
}

/// ListMetricDescriptors and ListPodSandboxMetrics through the real crictl
/// (`metricdescs`, `metricsp`, as JSON): the descriptors of the container's CPU seconds
/// and working set and of the pod's network have the label keys crust sends; a
/// container limited to half a CPU that fills 8 MiB of the pod's /dev/shm and spins
/// shows a counter of CPU seconds that reaches 1 and a working set gauge above 8 MiB,
/// labelled with its pod, namespace, name, id and image; the pod's eth0 counts a ping
/// to the bridge's gateway in both directions, labelled with the pod and its interface.
#[tokio::test]
async fn metrics_through_crictl() {
    if !root() {
        return;
    }
    let Some(crictl) = crictl() else {
        return;
    };
    let mut e = setup().await;
    let pod = e.pod("crictl-metered").await;
    let mut cfg = ctr(
        "spinner",
        &[
            "sh",
            "-c",
            "head -c 8388608 /dev/zero > /dev/shm/fill && while :; do :; done",
        ],
    );
    *res(&mut cfg) = LinuxContainerResources {
        cpu_period: 100_000,
        cpu_quota: 50_000,
        ..Default::default()
    };
    let id = e.create(&pod, cfg).await;
    e.start(&id).await;

    let descs = crictl_json(&crictl, &e.d, &["metricdescs"]);
    let keys = |name: &str| -> Vec<String> {
        let d = descs["descriptors"]
            .as_array()
            .unwrap_or_else(|| panic!("no descriptors: {descs}"))
            .iter()
            .find(|d| d["name"] == name)
            .unwrap_or_else(|| panic!("no descriptor {name}: {descs}"));
        assert!(!d["help"].as_str().unwrap_or_default().is_empty(), "{d}");
        serde_json::from_value(d["labelKeys"].clone()).unwrap()
    };
    let base = ["pod", "namespace", "container", "id", "image"];
    assert_eq!(keys("container_cpu_usage_seconds_total"), base);
    assert_eq!(keys("container_memory_working_set_bytes"), base);
    for name in [
        "container_network_receive_bytes_total",
        "container_network_transmit_bytes_total",
        "container_network_receive_packets_total",
        "container_network_transmit_packets_total",
    ] {
        assert_eq!(keys(name), [&base[..], &["interface"]].concat(), "{name}");
    }

    // The pod's entry of `crictl metricsp`, and in it the metric `name` of the
    // container (`Some(id)`) or of the pod itself (`None`).
    let pod_entry = || {
        let all = crictl_json(&crictl, &e.d, &["metricsp"]);
        all["podMetrics"]
            .as_array()
            .unwrap_or_else(|| panic!("no podMetrics: {all}"))
            .iter()
            .find(|p| p["podSandboxId"] == pod.0.as_str())
            .cloned()
            .unwrap_or_else(|| panic!("no metrics of pod {}: {all}", pod.0))
    };
    let find = |p: &serde_json::Value, ctr: Option<&str>, name: &str| {
        let metrics = match ctr {
            None => &p["metrics"],
            Some(id) => &p["containerMetrics"]
                .as_array()
                .unwrap()
                .iter()
                .find(|c| c["containerId"] == id)
                .unwrap_or_else(|| panic!("no metrics of container {id}: {p}"))["metrics"],
        };
        metrics
            .as_array()
            .unwrap()
            .iter()
            .filter(|m| m["name"] == name)
            .map(crictl_metric)
            .collect::<Vec<_>>()
    };
    let deadline = Instant::now() + Duration::from_secs(120);
    let p = loop {
        let p = pod_entry();
        let cpu = find(&p, Some(&id), "container_cpu_usage_seconds_total");
        let mem = find(&p, Some(&id), "container_memory_working_set_bytes");
        if cpu.first().is_some_and(|m| m.2 >= 1) && mem.first().is_some_and(|m| m.2 > 8 << 20) {
            break p;
        }
        assert!(
            Instant::now() < deadline,
            "CPU seconds 1 and working set above 8 MiB: never so in {cpu:?} {mem:?}"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    let labels = [
        "crictl-metered",
        "default",
        "spinner",
        id.as_str(),
        "busybox:e2e",
    ];
    for (name, kind) in [
        ("container_cpu_usage_seconds_total", "COUNTER"),
        ("container_memory_working_set_bytes", "GAUGE"),
    ] {
        let found = find(&p, Some(&id), name);
        assert_eq!(found.len(), 1, "{name}: {found:?}");
        assert_eq!(found[0].0, kind, "{name}");
        assert_eq!(found[0].1, labels, "{name}");
    }
    // Half a CPU: no more CPU seconds than wall seconds the test took.
    let cpu = find(&p, Some(&id), "container_cpu_usage_seconds_total")[0].2;
    assert!(cpu <= 120, "{cpu}");

    // Pings from the pod to the bridge's gateway, and back.
    let net = |p: &serde_json::Value, name: &str| {
        let found = find(p, None, name);
        let eth0: Vec<_> = found.iter().filter(|m| m.1[5] == "eth0").collect();
        assert_eq!(eth0.len(), 1, "{name}: {found:?}");
        assert_eq!(eth0[0].0, "COUNTER", "{name}");
        assert_eq!(
            eth0[0].1,
            ["crictl-metered", "default", "", pod.0.as_str(), "", "eth0"],
            "{name}"
        );
        eth0[0].2
    };
    let before = pod_entry();
    ping_gateway(&e, &pod.0, 2);
    let after = pod_entry();
    for (name, least) in [
        ("container_network_transmit_bytes_total", 2 * 84),
        ("container_network_receive_bytes_total", 2 * 84),
        ("container_network_transmit_packets_total", 2),
        ("container_network_receive_packets_total", 2),
    ] {
        let (b, a) = (net(&before, name), net(&after, name));
        assert!(a >= b + least, "{name}: {b} then {a}");
    }
}
