//! `/metrics/resource` (what metrics-server scrapes, in the kubelet's names, taken from
//! the same readings as the Summary) and `/metrics` (the crustlet's own few numbers).
//! Prometheus text format, written by hand: a handful of series needs no metrics crate.

use parking_lot::Mutex;
use serde_json::Value;
use std::fmt::Write;
use std::sync::atomic::{AtomicU64, Ordering};

/// Label values escaped as the text format wants.
fn esc(s: &str) -> String {
    s.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

/// Milliseconds since the epoch of an RFC 3339 time (the sample's timestamp).
fn ms(t: &Value) -> Option<i64> {
    t.as_str()?
        .parse::<k8s_openapi::jiff::Timestamp>()
        .ok()
        .map(|t| t.as_millisecond())
}

fn sample(out: &mut String, name: &str, labels: &str, v: f64, t: Option<i64>) {
    let _ = write!(out, "{name}");
    if !labels.is_empty() {
        let _ = write!(out, "{{{labels}}}");
    }
    let _ = write!(out, " {v}");
    if let Some(t) = t {
        let _ = write!(out, " {t}");
    }
    out.push('\n');
}

fn head(out: &mut String, name: &str, kind: &str, help: &str) {
    let _ = writeln!(out, "# HELP {name} {help}");
    let _ = writeln!(out, "# TYPE {name} {kind}");
}

/// The resource metrics from a Summary (`None`: it could not be made, `scrape_error` 1).
pub fn resource(summary: Option<&Value>) -> String {
    let mut out = String::new();
    let empty = Value::Null;
    let s = summary.unwrap_or(&empty);
    let pods = s["pods"].as_array().cloned().unwrap_or_default();
    let cpu_s = |v: &Value| v["usageCoreNanoSeconds"].as_u64().map(|n| n as f64 / 1e9);
    let ws = |v: &Value| v["workingSetBytes"].as_u64().map(|n| n as f64);
    let plabels = |p: &Value| {
        format!(
            "namespace=\"{}\",pod=\"{}\"",
            esc(p["podRef"]["namespace"].as_str().unwrap_or("")),
            esc(p["podRef"]["name"].as_str().unwrap_or(""))
        )
    };
    let clabels = |p: &Value, c: &Value| {
        format!(
            "container=\"{}\",{}",
            esc(c["name"].as_str().unwrap_or("")),
            plabels(p)
        )
    };
    // (labels, stats) of each subject: the node, the pods, their containers.
    let node = vec![(String::new(), s["node"].clone())];
    let pod_subjects: Vec<(String, Value)> = pods.iter().map(|p| (plabels(p), p.clone())).collect();
    let containers: Vec<(String, Value)> = pods
        .iter()
        .flat_map(|p| {
            p["containers"]
                .as_array()
                .into_iter()
                .flatten()
                .map(move |c| (clabels(p, c), c.clone()))
        })
        .collect();
    // A sample's value and timestamp; the subjects of a family, with their labels.
    type Reading = dyn Fn(&Value) -> Option<(f64, Option<i64>)>;
    type Subjects = [(String, Value)];
    let cpu: &Reading = &move |v| cpu_s(&v["cpu"]).map(|x| (x, ms(&v["cpu"]["time"])));
    let mem: &Reading = &move |v| ws(&v["memory"]).map(|x| (x, ms(&v["memory"]["time"])));
    let start: &Reading = &|v| ms(&v["startTime"]).map(|t| (t as f64 / 1000.0, None));
    let families: [(&str, &str, &str, &Subjects, &Reading); 7] = [
        (
            "container_cpu_usage_seconds_total",
            "counter",
            "[STABLE] Cumulative cpu time consumed by the container in core-seconds",
            &containers,
            cpu,
        ),
        (
            "container_memory_working_set_bytes",
            "gauge",
            "[STABLE] Current working set of the container in bytes",
            &containers,
            mem,
        ),
        (
            "container_start_time_seconds",
            "gauge",
            "[STABLE] Start time of the container since unix epoch in seconds",
            &containers,
            start,
        ),
        (
            "node_cpu_usage_seconds_total",
            "counter",
            "[STABLE] Cumulative cpu time consumed by the node in core-seconds",
            &node,
            cpu,
        ),
        (
            "node_memory_working_set_bytes",
            "gauge",
            "[STABLE] Current working set of the node in bytes",
            &node,
            mem,
        ),
        (
            "pod_cpu_usage_seconds_total",
            "counter",
            "[STABLE] Cumulative cpu time consumed by the pod in core-seconds",
            &pod_subjects,
            cpu,
        ),
        (
            "pod_memory_working_set_bytes",
            "gauge",
            "[STABLE] Current working set of the pod in bytes",
            &pod_subjects,
            mem,
        ),
    ];
    for (name, kind, help, subjects, read) in families {
        head(&mut out, name, kind, help);
        for (labels, v) in subjects {
            if let Some((x, t)) = read(v) {
                sample(&mut out, name, labels, x, t);
            }
        }
    }
    head(
        &mut out,
        "scrape_error",
        "gauge",
        "[ALPHA] 1 if there was an error while getting container metrics, 0 otherwise",
    );
    sample(
        &mut out,
        "scrape_error",
        "",
        if summary.is_some() { 0.0 } else { 1.0 },
        None,
    );
    out
}

/// The crustlet's own counters.
#[derive(Default)]
pub struct Own {
    /// Requests served, by (path's first segment, status code).
    requests: Mutex<std::collections::BTreeMap<(String, u16), u64>>,
    /// Pod syncs: count and total seconds (a summary without quantiles).
    syncs: AtomicU64,
    sync_micros: AtomicU64,
    /// Probe results: (namespace, pod, pod uid, container, probe type, result) → count.
    probes: Mutex<std::collections::BTreeMap<ProbeKey, u64>>,
    /// Probe durations: (namespace, pod, pod uid, container, probe type) → histogram.
    probe_durations: Mutex<std::collections::BTreeMap<DurationKey, Histogram>>,
}

type DurationKey = (String, String, String, String, &'static str);

/// Prometheus' default buckets, which the kubelet's probe duration histogram uses.
const BUCKETS: [f64; 11] = [
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
];

#[derive(Default)]
struct Histogram {
    /// Observations at or below each bucket's bound.
    counts: [u64; BUCKETS.len()],
    sum: f64,
    count: u64,
}

type ProbeKey = (String, String, String, String, &'static str, &'static str);

impl Own {
    pub fn request(&self, path: &str, code: u16) {
        let first = path.trim_start_matches('/').split('/').next().unwrap_or("");
        let known = [
            "healthz",
            "pods",
            "containerLogs",
            "exec",
            "attach",
            "portForward",
            "run",
            "stats",
            "metrics",
        ];
        let key = if known.contains(&first) {
            first
        } else {
            "other"
        };
        *self
            .requests
            .lock()
            .entry((key.to_string(), code))
            .or_default() += 1;
    }

    /// One probe of `kind` (Liveness, Readiness, Startup) ran with this outcome.
    pub fn probe(
        &self,
        pod: &k8s_openapi::api::core::v1::Pod,
        container: &str,
        kind: &'static str,
        ok: bool,
        took: std::time::Duration,
    ) {
        let secs = took.as_secs_f64();
        {
            let key = (
                crate::spec::namespace(pod).to_string(),
                crate::spec::name(pod).to_string(),
                crate::spec::uid(pod).to_string(),
                container.to_string(),
                kind,
            );
            let mut all = self.probe_durations.lock();
            let h = all.entry(key).or_default();
            for (i, b) in BUCKETS.iter().enumerate() {
                if secs <= *b {
                    h.counts[i] += 1;
                }
            }
            h.sum += secs;
            h.count += 1;
        }
        let key = (
            crate::spec::namespace(pod).to_string(),
            crate::spec::name(pod).to_string(),
            crate::spec::uid(pod).to_string(),
            container.to_string(),
            kind,
            if ok { "successful" } else { "failed" },
        );
        *self.probes.lock().entry(key).or_default() += 1;
    }

    /// The pod is gone: its probes' series go with it.
    pub fn forget_pod(&self, uid: &str) {
        self.probes.lock().retain(|k, _| k.2 != uid);
        self.probe_durations.lock().retain(|k, _| k.2 != uid);
    }

    /// `/metrics/probes`, in the kubelet's name and labels.
    pub fn render_probes(&self) -> String {
        let mut out = String::new();
        process_start(&mut out);
        let probes = self.probes.lock();
        // A family without series is not shown, as the kubelet's registry leaves it out.
        if !probes.is_empty() {
            head(
                &mut out,
                "prober_probe_total",
                "counter",
                "[ALPHA] Cumulative number of a liveness, readiness or startup probe for a container by result.",
            );
        }
        for ((ns, pod, uid, c, kind, result), n) in probes.iter() {
            let labels = format!(
                "container=\"{}\",namespace=\"{}\",pod=\"{}\",pod_uid=\"{}\",probe_type=\"{kind}\",result=\"{result}\"",
                esc(c),
                esc(ns),
                esc(pod),
                esc(uid)
            );
            sample(&mut out, "prober_probe_total", &labels, *n as f64, None);
        }
        drop(probes);
        let durations = self.probe_durations.lock();
        if !durations.is_empty() {
            head(
                &mut out,
                "prober_probe_duration_seconds",
                "histogram",
                "[ALPHA] Duration in seconds for a probe response.",
            );
        }
        for ((ns, pod, _, c, kind), h) in durations.iter() {
            let labels = format!(
                "container=\"{}\",namespace=\"{}\",pod=\"{}\",probe_type=\"{kind}\"",
                esc(c),
                esc(ns),
                esc(pod)
            );
            let name = "prober_probe_duration_seconds";
            for (b, n) in BUCKETS.iter().zip(h.counts) {
                sample(
                    &mut out,
                    &format!("{name}_bucket"),
                    &format!("{labels},le=\"{b}\""),
                    n as f64,
                    None,
                );
            }
            sample(
                &mut out,
                &format!("{name}_bucket"),
                &format!("{labels},le=\"+Inf\""),
                h.count as f64,
                None,
            );
            sample(&mut out, &format!("{name}_sum"), &labels, h.sum, None);
            sample(
                &mut out,
                &format!("{name}_count"),
                &labels,
                h.count as f64,
                None,
            );
        }
        out
    }

    /// One pod sync took `d`.
    pub fn sync(&self, d: std::time::Duration) {
        self.syncs.fetch_add(1, Ordering::Relaxed);
        self.sync_micros
            .fetch_add(d.as_micros() as u64, Ordering::Relaxed);
    }

    /// The text, with the pod and container counts of the moment and the summary's
    /// entries of the claimed volumes mounted.
    pub fn render(&self, pods: usize, containers: &[(String, usize)], volumes: &[Value]) -> String {
        let mut out = String::new();
        process_start(&mut out);
        head(
            &mut out,
            "kubelet_running_pods",
            "gauge",
            "Number of pods that have a running pod sandbox",
        );
        sample(&mut out, "kubelet_running_pods", "", pods as f64, None);
        head(
            &mut out,
            "kubelet_running_containers",
            "gauge",
            "Number of containers currently running",
        );
        for (state, n) in containers {
            sample(
                &mut out,
                "kubelet_running_containers",
                &format!("container_state=\"{state}\""),
                *n as f64,
                None,
            );
        }
        volume_stats(&mut out, volumes);
        head(
            &mut out,
            "crustlet_pod_sync_duration_seconds",
            "summary",
            "Time a pod worker's sync took",
        );
        sample(
            &mut out,
            "crustlet_pod_sync_duration_seconds_sum",
            "",
            self.sync_micros.load(Ordering::Relaxed) as f64 / 1e6,
            None,
        );
        sample(
            &mut out,
            "crustlet_pod_sync_duration_seconds_count",
            "",
            self.syncs.load(Ordering::Relaxed) as f64,
            None,
        );
        head(
            &mut out,
            "crustlet_http_requests_total",
            "counter",
            "Requests to the crustlet's server, by path and code",
        );
        for ((path, code), n) in self.requests.lock().iter() {
            sample(
                &mut out,
                "crustlet_http_requests_total",
                &format!("code=\"{code}\",path=\"{path}\""),
                *n as f64,
                None,
            );
        }
        out
    }
}

/// The kubelet's `kubelet_volume_stats_*` gauges, one series per claim (a claim two
/// pods mount is counted once), from the claimed volumes' Summary entries.
fn volume_stats(out: &mut String, volumes: &[Value]) {
    let mut by_claim = std::collections::BTreeMap::new();
    for v in volumes {
        let (Some(ns), Some(claim)) = (
            v["pvcRef"]["namespace"].as_str(),
            v["pvcRef"]["name"].as_str(),
        ) else {
            continue;
        };
        by_claim.entry((ns, claim)).or_insert(v);
    }
    if by_claim.is_empty() {
        return;
    }
    for (suffix, field, help) in [
        (
            "available_bytes",
            "availableBytes",
            "Number of available bytes in the volume",
        ),
        (
            "capacity_bytes",
            "capacityBytes",
            "Capacity in bytes of the volume",
        ),
        ("inodes", "inodes", "Maximum number of inodes in the volume"),
        (
            "inodes_free",
            "inodesFree",
            "Number of free inodes in the volume",
        ),
        (
            "inodes_used",
            "inodesUsed",
            "Number of used inodes in the volume",
        ),
        (
            "used_bytes",
            "usedBytes",
            "Number of used bytes in the volume",
        ),
    ] {
        let name = format!("kubelet_volume_stats_{suffix}");
        head(out, &name, "gauge", &format!("[ALPHA] {help}"));
        for ((ns, claim), v) in &by_claim {
            let labels = format!(
                "namespace=\"{}\",persistentvolumeclaim=\"{}\"",
                esc(ns),
                esc(claim)
            );
            let n = v[field].as_u64().unwrap_or(0);
            sample(out, &name, &labels, n as f64, None);
        }
    }
}

/// `process_start_time_seconds`, which every metrics endpoint of the kubelet carries.
fn process_start(out: &mut String) {
    head(
        out,
        "process_start_time_seconds",
        "gauge",
        "[ALPHA] Start time of the process since unix epoch in seconds.",
    );
    sample(out, "process_start_time_seconds", "", note_start(), None);
}

static PROCESS_START: std::sync::OnceLock<f64> = std::sync::OnceLock::new();

/// The process's start in seconds since the epoch: the first call's time (main makes
/// it first).
pub fn note_start() -> f64 {
    *PROCESS_START.get_or_init(|| {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0.0, |d| d.as_secs_f64())
    })
}

/// A metric family's value from a stats object.
type Getter = dyn Fn(&Value) -> Option<f64>;

/// `/metrics/cadvisor`: the containers' and pods' usage from a Summary, in cAdvisor's
/// names and the labels the kubelet gives them (`container`, `namespace`, `pod`; the
/// pod's own cgroup and network with `container=""`), and the machine's size.
pub fn cadvisor(summary: Option<&Value>) -> String {
    let mut out = String::new();
    let empty = Value::Null;
    let s = summary.unwrap_or(&empty);
    let pods = s["pods"].as_array().cloned().unwrap_or_default();
    let labels = |p: &Value, c: &str| {
        format!(
            "container=\"{}\",namespace=\"{}\",pod=\"{}\"",
            esc(c),
            esc(p["podRef"]["namespace"].as_str().unwrap_or("")),
            esc(p["podRef"]["name"].as_str().unwrap_or(""))
        )
    };
    // (labels, the stats object): every container, then each pod's own.
    let mut subjects: Vec<(String, Value)> = vec![];
    for p in &pods {
        for c in p["containers"].as_array().cloned().unwrap_or_default() {
            subjects.push((labels(p, c["name"].as_str().unwrap_or("")), c));
        }
        subjects.push((labels(p, ""), p.clone()));
    }
    let families: [(&str, &str, &str, &Getter); 7] = [
        ("container_cpu_usage_seconds_total", "counter", "Cumulative cpu time consumed in seconds.",
         &|v| v["cpu"]["usageCoreNanoSeconds"].as_u64().map(|n| n as f64 / 1e9)),
        ("container_memory_usage_bytes", "gauge", "Current memory usage in bytes, including all memory regardless of when it was accessed",
         &|v| v["memory"]["usageBytes"].as_u64().map(|n| n as f64)),
        ("container_memory_working_set_bytes", "gauge", "Current working set in bytes.",
         &|v| v["memory"]["workingSetBytes"].as_u64().map(|n| n as f64)),
        ("container_memory_rss", "gauge", "Size of RSS in bytes.",
         &|v| v["memory"]["rssBytes"].as_u64().map(|n| n as f64)),
        ("container_memory_swap", "gauge", "Container swap usage in bytes.",
         &|v| v["swap"]["swapUsageBytes"].as_u64().map(|n| n as f64)),
        ("container_fs_usage_bytes", "gauge", "Number of bytes that are consumed by the container on this filesystem.",
         &|v| v["rootfs"]["usedBytes"].as_u64().map(|n| n as f64)),
        ("container_start_time_seconds", "gauge", "Start time of the container since unix epoch in seconds.",
         &|v| ms(&v["startTime"]).map(|t| t as f64 / 1000.0)),
    ];
    for (name, kind, help, get) in families {
        head(&mut out, name, kind, help);
        for (l, v) in &subjects {
            if let Some(x) = get(v) {
                sample(&mut out, name, l, x, None);
            }
        }
    }
    // The pods' network, by interface.
    for (name, field, help) in [
        (
            "container_network_receive_bytes_total",
            "rxBytes",
            "Cumulative count of bytes received",
        ),
        (
            "container_network_receive_errors_total",
            "rxErrors",
            "Cumulative count of errors encountered while receiving",
        ),
        (
            "container_network_transmit_bytes_total",
            "txBytes",
            "Cumulative count of bytes transmitted",
        ),
        (
            "container_network_transmit_errors_total",
            "txErrors",
            "Cumulative count of errors encountered while transmitting",
        ),
    ] {
        head(&mut out, name, "counter", help);
        for p in &pods {
            for i in p["network"]["interfaces"]
                .as_array()
                .cloned()
                .unwrap_or_default()
            {
                let Some(x) = i[field].as_u64() else { continue };
                let l = format!(
                    "{},interface=\"{}\"",
                    labels(p, ""),
                    esc(i["name"].as_str().unwrap_or(""))
                );
                sample(&mut out, name, &l, x as f64, None);
            }
        }
    }
    head(
        &mut out,
        "machine_cpu_cores",
        "gauge",
        "Number of logical CPU cores.",
    );
    // SAFETY: sysconf has no preconditions.
    let cpus = unsafe { libc::sysconf(libc::_SC_NPROCESSORS_ONLN) }.max(1);
    sample(&mut out, "machine_cpu_cores", "", cpus as f64, None);
    head(
        &mut out,
        "machine_memory_bytes",
        "gauge",
        "Amount of memory installed on the machine.",
    );
    let mem = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|m| {
            m.lines()
                .find_map(|l| l.strip_prefix("MemTotal:"))
                .and_then(|v| v.split_whitespace().next()?.parse::<u64>().ok())
        })
        .map(|kb| kb * 1024);
    if let Some(m) = mem {
        sample(&mut out, "machine_memory_bytes", "", m as f64, None);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn cadvisor_metrics_and_probe_counts() {
        let s = json!({"pods": [{"podRef": {"name": "p", "namespace": "ns", "uid": "u"},
            "cpu": {"usageCoreNanoSeconds": 3_000_000_000u64},
            "network": {"interfaces": [{"name": "eth0", "rxBytes": 10, "txBytes": 20}]},
            "containers": [{"name": "c", "memory": {"workingSetBytes": 200, "usageBytes": 300},
                            "rootfs": {"usedBytes": 4096}}]}]});
        let m = cadvisor(Some(&s));
        for want in [
            "container_memory_working_set_bytes{container=\"c\",namespace=\"ns\",pod=\"p\"} 200\n",
            "container_fs_usage_bytes{container=\"c\",namespace=\"ns\",pod=\"p\"} 4096\n",
            "container_cpu_usage_seconds_total{container=\"\",namespace=\"ns\",pod=\"p\"} 3\n",
            "container_network_receive_bytes_total{container=\"\",namespace=\"ns\",pod=\"p\",interface=\"eth0\"} 10\n",
            "# TYPE machine_cpu_cores gauge\n",
        ] {
            assert!(m.contains(want), "no {want:?} in\n{m}");
        }
        let own = Own::default();
        let pod: k8s_openapi::api::core::v1::Pod = serde_json::from_value(
            json!({"metadata": {"name": "p", "namespace": "ns", "uid": "u"}}),
        )
        .unwrap();
        let ms = std::time::Duration::from_millis;
        own.probe(&pod, "c", "Readiness", true, ms(3));
        own.probe(&pod, "c", "Readiness", true, ms(30));
        own.probe(&pod, "c", "Liveness", false, ms(1));
        let t = own.render_probes();
        assert!(t.contains("prober_probe_duration_seconds_bucket{container=\"c\",namespace=\"ns\",pod=\"p\",probe_type=\"Readiness\",le=\"0.005\"} 1\n"), "{t}");
        assert!(t.contains("prober_probe_duration_seconds_count{container=\"c\",namespace=\"ns\",pod=\"p\",probe_type=\"Readiness\"} 2\n"), "{t}");
        assert!(t.contains("prober_probe_total{container=\"c\",namespace=\"ns\",pod=\"p\",pod_uid=\"u\",probe_type=\"Readiness\",result=\"successful\"} 2\n"), "{t}");
        assert!(
            t.contains("probe_type=\"Liveness\",result=\"failed\"} 1\n"),
            "{t}"
        );
        own.forget_pod("u");
        assert!(!own.render_probes().contains("pod_uid"));
    }

    #[test]
    fn resource_metrics_from_a_summary() {
        let s = json!({
            "node": {"cpu": {"time": "2024-05-01T10:00:00Z", "usageCoreNanoSeconds": 2_500_000_000u64},
                     "memory": {"time": "2024-05-01T10:00:00Z", "workingSetBytes": 1000}},
            "pods": [{"podRef": {"name": "p", "namespace": "ns", "uid": "u"},
                      "cpu": {"time": "2024-05-01T10:00:01Z", "usageCoreNanoSeconds": 500_000_000},
                      "memory": {"time": "2024-05-01T10:00:01Z", "workingSetBytes": 300},
                      "containers": [{"name": "c\"1", "startTime": "2024-05-01T09:00:00Z",
                                      "cpu": {"time": "2024-05-01T10:00:01Z", "usageCoreNanoSeconds": 400_000_000},
                                      "memory": {"time": "2024-05-01T10:00:01Z", "workingSetBytes": 200}}]}]
        });
        let m = resource(Some(&s));
        for line in [
            "node_cpu_usage_seconds_total 2.5 1714557600000",
            "node_memory_working_set_bytes 1000 1714557600000",
            "pod_cpu_usage_seconds_total{namespace=\"ns\",pod=\"p\"} 0.5 1714557601000",
            "pod_memory_working_set_bytes{namespace=\"ns\",pod=\"p\"} 300 1714557601000",
            "container_cpu_usage_seconds_total{container=\"c\\\"1\",namespace=\"ns\",pod=\"p\"} 0.4 1714557601000",
            "container_memory_working_set_bytes{container=\"c\\\"1\",namespace=\"ns\",pod=\"p\"} 200 1714557601000",
            "container_start_time_seconds{container=\"c\\\"1\",namespace=\"ns\",pod=\"p\"} 1714554000",
            "scrape_error 0",
            "# TYPE container_cpu_usage_seconds_total counter",
        ] {
            assert!(m.lines().any(|l| l == line), "{line:?} missing in\n{m}");
        }
        assert!(resource(None).lines().any(|l| l == "scrape_error 1"));
    }

    #[test]
    fn own_metrics() {
        let o = Own::default();
        o.request("/stats/summary", 200);
        o.request("/stats/summary", 200);
        o.request("/nope", 404);
        o.sync(std::time::Duration::from_millis(1500));
        let t = o.render(3, &[("running".into(), 4)], &[]);
        assert!(
            !t.contains("kubelet_volume_stats"),
            "no claim, no family: {t}"
        );
        assert!(t.contains("kubelet_running_pods 3\n"), "{t}");
        assert!(
            t.contains("kubelet_running_containers{container_state=\"running\"} 4\n"),
            "{t}"
        );
        assert!(
            t.contains("crustlet_http_requests_total{code=\"200\",path=\"stats\"} 2\n"),
            "{t}"
        );
        assert!(
            t.contains("crustlet_http_requests_total{code=\"404\",path=\"other\"} 1\n"),
            "{t}"
        );
        assert!(
            t.contains("crustlet_pod_sync_duration_seconds_sum 1.5\n"),
            "{t}"
        );
        assert!(
            t.contains("crustlet_pod_sync_duration_seconds_count 1\n"),
            "{t}"
        );
    }

    #[test]
    fn claimed_volumes_once_per_claim() {
        let v = |pod_volume: &str, claim: &str, used: u64| {
            serde_json::json!({
                "name": pod_volume, "capacityBytes": 100, "availableBytes": 100 - used,
                "usedBytes": used, "inodes": 10, "inodesFree": 7, "inodesUsed": 3,
                "pvcRef": {"name": claim, "namespace": "ns"},
            })
        };
        // Two pods mounting claim "a", one claim "b"; an entry without a claim is not one.
        let mut plain = v("cache", "x", 1);
        plain.as_object_mut().unwrap().remove("pvcRef");
        let vols = [
            v("data", "a", 40),
            v("other", "a", 40),
            v("d", "b", 5),
            plain,
        ];
        let t = Own::default().render(0, &[], &vols);
        for line in [
            "# TYPE kubelet_volume_stats_used_bytes gauge",
            "kubelet_volume_stats_used_bytes{namespace=\"ns\",persistentvolumeclaim=\"a\"} 40",
            "kubelet_volume_stats_used_bytes{namespace=\"ns\",persistentvolumeclaim=\"b\"} 5",
            "kubelet_volume_stats_available_bytes{namespace=\"ns\",persistentvolumeclaim=\"b\"} 95",
            "kubelet_volume_stats_capacity_bytes{namespace=\"ns\",persistentvolumeclaim=\"a\"} 100",
            "kubelet_volume_stats_inodes{namespace=\"ns\",persistentvolumeclaim=\"a\"} 10",
            "kubelet_volume_stats_inodes_free{namespace=\"ns\",persistentvolumeclaim=\"a\"} 7",
            "kubelet_volume_stats_inodes_used{namespace=\"ns\",persistentvolumeclaim=\"b\"} 3",
        ] {
            assert!(t.lines().any(|l| l == line), "{line:?} missing in\n{t}");
        }
        let series = t
            .lines()
            .filter(|l| l.starts_with("kubelet_volume_stats_used_bytes{"))
            .count();
        assert_eq!(series, 2, "one series per claim:\n{t}");
        assert!(!t.contains("persistentvolumeclaim=\"x\""), "{t}");
    }
}
