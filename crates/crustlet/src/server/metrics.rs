//! `/metrics/resource` (what metrics-server scrapes, in the kubelet's names, taken from
//! the same readings as the Summary) and `/metrics` (the crustlet's own few numbers).
//! Prometheus text format, written by hand: a handful of series needs no metrics crate.

use serde_json::Value;
use std::fmt::Write;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

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
    let containers = || {
        pods.iter().flat_map(|p| {
            p["containers"]
                .as_array()
                .cloned()
                .unwrap_or_default()
                .into_iter()
                .map(move |c| (p.clone(), c))
        })
    };
    head(
        &mut out,
        "container_cpu_usage_seconds_total",
        "counter",
        "[STABLE] Cumulative cpu time consumed by the container in core-seconds",
    );
    for (p, c) in containers() {
        if let Some(v) = cpu_s(&c["cpu"]) {
            sample(
                &mut out,
                "container_cpu_usage_seconds_total",
                &clabels(&p, &c),
                v,
                ms(&c["cpu"]["time"]),
            );
        }
    }
    head(
        &mut out,
        "container_memory_working_set_bytes",
        "gauge",
        "[STABLE] Current working set of the container in bytes",
    );
    for (p, c) in containers() {
        if let Some(v) = ws(&c["memory"]) {
            sample(
                &mut out,
                "container_memory_working_set_bytes",
                &clabels(&p, &c),
                v,
                ms(&c["memory"]["time"]),
            );
        }
    }
    head(
        &mut out,
        "container_start_time_seconds",
        "gauge",
        "[STABLE] Start time of the container since unix epoch in seconds",
    );
    for (p, c) in containers() {
        if let Some(t) = ms(&c["startTime"]) {
            sample(
                &mut out,
                "container_start_time_seconds",
                &clabels(&p, &c),
                t as f64 / 1000.0,
                None,
            );
        }
    }
    head(
        &mut out,
        "node_cpu_usage_seconds_total",
        "counter",
        "[STABLE] Cumulative cpu time consumed by the node in core-seconds",
    );
    if let Some(v) = cpu_s(&s["node"]["cpu"]) {
        sample(
            &mut out,
            "node_cpu_usage_seconds_total",
            "",
            v,
            ms(&s["node"]["cpu"]["time"]),
        );
    }
    head(
        &mut out,
        "node_memory_working_set_bytes",
        "gauge",
        "[STABLE] Current working set of the node in bytes",
    );
    if let Some(v) = ws(&s["node"]["memory"]) {
        sample(
            &mut out,
            "node_memory_working_set_bytes",
            "",
            v,
            ms(&s["node"]["memory"]["time"]),
        );
    }
    head(
        &mut out,
        "pod_cpu_usage_seconds_total",
        "counter",
        "[STABLE] Cumulative cpu time consumed by the pod in core-seconds",
    );
    for p in &pods {
        if let Some(v) = cpu_s(&p["cpu"]) {
            sample(
                &mut out,
                "pod_cpu_usage_seconds_total",
                &plabels(p),
                v,
                ms(&p["cpu"]["time"]),
            );
        }
    }
    head(
        &mut out,
        "pod_memory_working_set_bytes",
        "gauge",
        "[STABLE] Current working set of the pod in bytes",
    );
    for p in &pods {
        if let Some(v) = ws(&p["memory"]) {
            sample(
                &mut out,
                "pod_memory_working_set_bytes",
                &plabels(p),
                v,
                ms(&p["memory"]["time"]),
            );
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
}

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
            .unwrap()
            .entry((key.to_string(), code))
            .or_default() += 1;
    }

    /// One pod sync took `d`.
    pub fn sync(&self, d: std::time::Duration) {
        self.syncs.fetch_add(1, Ordering::Relaxed);
        self.sync_micros
            .fetch_add(d.as_micros() as u64, Ordering::Relaxed);
    }

    /// The text, with the pod and container counts of the moment.
    pub fn render(&self, pods: usize, containers: &[(String, usize)]) -> String {
        let mut out = String::new();
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
        for ((path, code), n) in self.requests.lock().unwrap().iter() {
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

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

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
        let t = o.render(3, &[("running".into(), 4)]);
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
}
