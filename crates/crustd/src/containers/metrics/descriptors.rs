//! The metrics ListMetricDescriptors describes and ListPodSandboxMetrics sends: cAdvisor's
//! names, which the kubelet serves on `/metrics/cadvisor` when its
//! `PodAndContainerStatsFromCRI` gate is on, with containerd 2.x's label keys.
//!
//! Every metric carries [`BASE_KEYS`] — `pod`, `namespace`, `container`, `id`, `image`,
//! in that order, as containerd has them (CRI-O orders them otherwise; cAdvisor has
//! `name` too, which neither runtime sends) — and some a few more after them:
//! `interface` for the network, `device` for file systems and block I/O, and so on.
//! The kubelet builds one Prometheus description per descriptor and drops a metric
//! whose name it was not given or whose label values do not match the keys in number;
//! [`Desc::metric`] is the only way crust makes a metric, so both hold by
//! construction, and the unit tests in `metrics/mod.rs` check it over every metric.

use cri_api::{Metric, MetricDescriptor, MetricType, UInt64Value};

/// The labels of every metric, in the order of their values.
pub const BASE_KEYS: [&str; 5] = ["pod", "namespace", "container", "id", "image"];

/// One metric: its name, help, type and the label keys it has after [`BASE_KEYS`].
#[derive(Debug)]
pub struct Desc {
    pub name: &'static str,
    pub help: &'static str,
    pub kind: MetricType,
    pub extra_keys: &'static [&'static str],
}

impl Desc {
    /// This metric with `value`, labelled `base` (the [`BASE_KEYS`] values) then `extra`
    /// (one per [`Desc::extra_keys`]). The timestamp is 0: crust gathers every metric
    /// when asked, and the CRI says a live value carries none.
    pub fn metric(&self, base: &[String; 5], extra: &[&str], value: u64) -> Metric {
        debug_assert_eq!(extra.len(), self.extra_keys.len(), "{}", self.name);
        let mut label_values = Vec::with_capacity(base.len() + extra.len());
        label_values.extend(base.iter().cloned());
        label_values.extend(extra.iter().map(|s| s.to_string()));
        Metric {
            name: self.name.to_string(),
            timestamp: 0,
            metric_type: self.kind as i32,
            label_values,
            value: Some(UInt64Value { value }),
        }
    }

    pub fn descriptor(&self) -> MetricDescriptor {
        MetricDescriptor {
            name: self.name.to_string(),
            help: self.help.to_string(),
            label_keys: BASE_KEYS
                .iter()
                .chain(self.extra_keys)
                .map(|s| s.to_string())
                .collect(),
        }
    }
}

const fn counter(name: &'static str, help: &'static str) -> Desc {
    Desc {
        name,
        help,
        kind: MetricType::Counter,
        extra_keys: &[],
    }
}

const fn gauge(name: &'static str, help: &'static str) -> Desc {
    Desc {
        name,
        help,
        kind: MetricType::Gauge,
        extra_keys: &[],
    }
}

const fn with(d: Desc, extra_keys: &'static [&'static str]) -> Desc {
    Desc { extra_keys, ..d }
}

const INTERFACE: &[&str] = &["interface"];
const DEVICE: &[&str] = &["device"];

// When and whether.
pub const LAST_SEEN: Desc = gauge(
    "container_last_seen",
    "When the runtime last saw the container, in seconds since the Unix epoch.",
);
pub const START_TIME: Desc = gauge(
    "container_start_time_seconds",
    "When the container started, in seconds since the Unix epoch.",
);

// CPU: whole seconds (the CRI carries integers).
pub const CPU_USAGE: Desc = counter(
    "container_cpu_usage_seconds_total",
    "CPU time the container's tasks used, in seconds.",
);
pub const CPU_USER: Desc = counter(
    "container_cpu_user_seconds_total",
    "CPU time the container's tasks used in user mode, in seconds.",
);
pub const CPU_SYSTEM: Desc = counter(
    "container_cpu_system_seconds_total",
    "CPU time the container's tasks used in kernel mode, in seconds.",
);
pub const CFS_PERIODS: Desc = counter(
    "container_cpu_cfs_periods_total",
    "CFS enforcement periods that elapsed while the container had a CPU quota.",
);
pub const CFS_THROTTLED_PERIODS: Desc = counter(
    "container_cpu_cfs_throttled_periods_total",
    "CFS periods in which the container used up its quota and was throttled.",
);
pub const CFS_THROTTLED_SECONDS: Desc = counter(
    "container_cpu_cfs_throttled_seconds_total",
    "How long the container was throttled in all, in seconds.",
);

// Memory, in bytes.
pub const MEMORY_USAGE: Desc = gauge(
    "container_memory_usage_bytes",
    "Memory charged to the container, page cache included, in bytes.",
);
pub const MEMORY_WORKING_SET: Desc = gauge(
    "container_memory_working_set_bytes",
    "Memory in use less the inactive file cache, in bytes: what eviction looks at.",
);
pub const MEMORY_MAX_USAGE: Desc = gauge(
    "container_memory_max_usage_bytes",
    "The highest memory usage recorded, in bytes.",
);
pub const MEMORY_RSS: Desc = gauge(
    "container_memory_rss",
    "Anonymous memory of the container, in bytes.",
);
pub const MEMORY_CACHE: Desc = gauge(
    "container_memory_cache",
    "Page cache charged to the container, in bytes.",
);
pub const MEMORY_MAPPED_FILE: Desc = gauge(
    "container_memory_mapped_file",
    "Page cache mapped into the container's processes, in bytes.",
);
pub const MEMORY_SWAP: Desc = gauge(
    "container_memory_swap",
    "Swap the container uses, in bytes.",
);
pub const MEMORY_KERNEL: Desc = gauge(
    "container_memory_kernel_usage",
    "Kernel memory charged to the container, in bytes.",
);
pub const MEMORY_ACTIVE_FILE: Desc = gauge(
    "container_memory_total_active_file_bytes",
    "File cache of the container on the active list, in bytes.",
);
pub const MEMORY_INACTIVE_FILE: Desc = gauge(
    "container_memory_total_inactive_file_bytes",
    "File cache of the container on the inactive list, in bytes.",
);
pub const MEMORY_FAILCNT: Desc = counter(
    "container_memory_failcnt",
    "How many times the container's memory usage hit its limit.",
);
pub const MEMORY_FAILURES: Desc = with(
    counter(
        "container_memory_failures_total",
        "Page faults of the container's tasks, by kind (pgfault, pgmajfault).",
    ),
    &["failure_type", "scope"],
);
pub const OOM_EVENTS: Desc = counter(
    "container_oom_events_total",
    "Processes of the container the OOM killer killed.",
);

// The writable layer's file system.
pub const FS_USAGE: Desc = with(
    gauge(
        "container_fs_usage_bytes",
        "Bytes the container's writable layer takes on its file system.",
    ),
    DEVICE,
);
pub const FS_LIMIT: Desc = with(
    gauge(
        "container_fs_limit_bytes",
        "Size of the file system the container's writable layer is on, in bytes.",
    ),
    DEVICE,
);
pub const FS_INODES_TOTAL: Desc = with(
    gauge(
        "container_fs_inodes_total",
        "Inodes of the file system the container's writable layer is on.",
    ),
    DEVICE,
);
pub const FS_INODES_FREE: Desc = with(
    gauge(
        "container_fs_inodes_free",
        "Free inodes of the file system the container's writable layer is on.",
    ),
    DEVICE,
);

// Block I/O, per device.
pub const FS_READS_BYTES: Desc = with(
    counter(
        "container_fs_reads_bytes_total",
        "Bytes the container's tasks read from the device.",
    ),
    DEVICE,
);
pub const FS_READS: Desc = with(
    counter(
        "container_fs_reads_total",
        "Reads from the device the container's tasks completed.",
    ),
    DEVICE,
);
pub const FS_WRITES_BYTES: Desc = with(
    counter(
        "container_fs_writes_bytes_total",
        "Bytes the container's tasks wrote to the device.",
    ),
    DEVICE,
);
pub const FS_WRITES: Desc = with(
    counter(
        "container_fs_writes_total",
        "Writes to the device the container's tasks completed.",
    ),
    DEVICE,
);
pub const BLKIO_DEVICE_USAGE: Desc = with(
    counter(
        "container_blkio_device_usage_total",
        "Bytes the container's tasks moved to or from the device, by operation.",
    ),
    &["device", "major", "minor", "operation"],
);

// Processes.
pub const PROCESSES: Desc = gauge("container_processes", "Processes in the container.");
pub const THREADS: Desc = gauge("container_threads", "Threads in the container.");
pub const THREADS_MAX: Desc = gauge(
    "container_threads_max",
    "The container's task limit (pids.max); 0 when it has none.",
);
pub const FILE_DESCRIPTORS: Desc = gauge(
    "container_file_descriptors",
    "Open file descriptors of the container's processes.",
);
pub const SOCKETS: Desc = gauge(
    "container_sockets",
    "Open sockets of the container's processes.",
);
pub const ULIMITS_SOFT: Desc = with(
    gauge(
        "container_ulimits_soft",
        "Soft resource limits of the container's init process; unlimited ones are left out.",
    ),
    &["ulimit"],
);

// What the container asked for.
pub const SPEC_CPU_PERIOD: Desc = gauge(
    "container_spec_cpu_period",
    "CFS period of the container, in microseconds.",
);
pub const SPEC_CPU_QUOTA: Desc = gauge(
    "container_spec_cpu_quota",
    "CFS quota of the container per period, in microseconds.",
);
pub const SPEC_CPU_SHARES: Desc =
    gauge("container_spec_cpu_shares", "CPU shares of the container.");
pub const SPEC_MEMORY_LIMIT: Desc = gauge(
    "container_spec_memory_limit_bytes",
    "Memory limit of the container, in bytes.",
);
pub const SPEC_MEMORY_SWAP_LIMIT: Desc = gauge(
    "container_spec_memory_swap_limit_bytes",
    "Memory plus swap limit of the container, in bytes.",
);

// The pod's network, per interface (pod-level metrics: `container` and `image` empty).
pub const NET_RX_BYTES: Desc = with(
    counter(
        "container_network_receive_bytes_total",
        "Bytes the pod received on the interface.",
    ),
    INTERFACE,
);
pub const NET_RX_PACKETS: Desc = with(
    counter(
        "container_network_receive_packets_total",
        "Packets the pod received on the interface.",
    ),
    INTERFACE,
);
pub const NET_RX_ERRORS: Desc = with(
    counter(
        "container_network_receive_errors_total",
        "Errors receiving on the interface.",
    ),
    INTERFACE,
);
pub const NET_RX_DROPPED: Desc = with(
    counter(
        "container_network_receive_packets_dropped_total",
        "Packets dropped receiving on the interface.",
    ),
    INTERFACE,
);
pub const NET_TX_BYTES: Desc = with(
    counter(
        "container_network_transmit_bytes_total",
        "Bytes the pod sent on the interface.",
    ),
    INTERFACE,
);
pub const NET_TX_PACKETS: Desc = with(
    counter(
        "container_network_transmit_packets_total",
        "Packets the pod sent on the interface.",
    ),
    INTERFACE,
);
pub const NET_TX_ERRORS: Desc = with(
    counter(
        "container_network_transmit_errors_total",
        "Errors sending on the interface.",
    ),
    INTERFACE,
);
pub const NET_TX_DROPPED: Desc = with(
    counter(
        "container_network_transmit_packets_dropped_total",
        "Packets dropped sending on the interface.",
    ),
    INTERFACE,
);

/// Every metric crust sends, in ListMetricDescriptors' order.
pub const ALL: &[&Desc] = &[
    &LAST_SEEN,
    &START_TIME,
    &CPU_USAGE,
    &CPU_USER,
    &CPU_SYSTEM,
    &CFS_PERIODS,
    &CFS_THROTTLED_PERIODS,
    &CFS_THROTTLED_SECONDS,
    &MEMORY_USAGE,
    &MEMORY_WORKING_SET,
    &MEMORY_MAX_USAGE,
    &MEMORY_RSS,
    &MEMORY_CACHE,
    &MEMORY_MAPPED_FILE,
    &MEMORY_SWAP,
    &MEMORY_KERNEL,
    &MEMORY_ACTIVE_FILE,
    &MEMORY_INACTIVE_FILE,
    &MEMORY_FAILCNT,
    &MEMORY_FAILURES,
    &OOM_EVENTS,
    &FS_USAGE,
    &FS_LIMIT,
    &FS_INODES_TOTAL,
    &FS_INODES_FREE,
    &FS_READS_BYTES,
    &FS_READS,
    &FS_WRITES_BYTES,
    &FS_WRITES,
    &BLKIO_DEVICE_USAGE,
    &PROCESSES,
    &THREADS,
    &THREADS_MAX,
    &FILE_DESCRIPTORS,
    &SOCKETS,
    &ULIMITS_SOFT,
    &SPEC_CPU_PERIOD,
    &SPEC_CPU_QUOTA,
    &SPEC_CPU_SHARES,
    &SPEC_MEMORY_LIMIT,
    &SPEC_MEMORY_SWAP_LIMIT,
    &NET_RX_BYTES,
    &NET_RX_PACKETS,
    &NET_RX_ERRORS,
    &NET_RX_DROPPED,
    &NET_TX_BYTES,
    &NET_TX_PACKETS,
    &NET_TX_ERRORS,
    &NET_TX_DROPPED,
];

/// ListMetricDescriptors' answer.
pub fn descriptors() -> Vec<MetricDescriptor> {
    ALL.iter().map(|d| d.descriptor()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    #[test]
    fn names_are_unique_cadvisor_style_and_described() {
        let ds = descriptors();
        let names: HashSet<_> = ds.iter().map(|d| d.name.as_str()).collect();
        assert_eq!(names.len(), ds.len(), "a name twice");
        for d in &ds {
            assert!(d.name.starts_with("container_"), "{}", d.name);
            assert!(
                d.name
                    .chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_'),
                "{}",
                d.name
            );
            assert!(!d.help.is_empty(), "{} has no help", d.name);
            assert_eq!(&d.label_keys[..5], BASE_KEYS, "{}", d.name);
            let keys: HashSet<_> = d.label_keys.iter().collect();
            assert_eq!(keys.len(), d.label_keys.len(), "{}: a key twice", d.name);
        }
        // Prometheus' convention, which cAdvisor keeps but for two names: counters end
        // in `_total`, gauges do not.
        for d in ALL {
            let total = d.name.ends_with("_total");
            match d.kind {
                MetricType::Counter => {
                    assert!(total || d.name == "container_memory_failcnt", "{}", d.name)
                }
                MetricType::Gauge => {
                    assert!(
                        !total || d.name == "container_fs_inodes_total",
                        "{}",
                        d.name
                    )
                }
            }
        }
    }

    #[test]
    fn metric_has_the_base_then_the_extra_labels() {
        let base = ["p", "ns", "c", "id", "img"].map(String::from);
        let m = NET_RX_BYTES.metric(&base, &["eth0"], 42);
        assert_eq!(m.name, "container_network_receive_bytes_total");
        assert_eq!(m.label_values, ["p", "ns", "c", "id", "img", "eth0"]);
        assert_eq!(m.metric_type, MetricType::Counter as i32);
        assert_eq!((m.timestamp, m.value.unwrap().value), (0, 42));
        assert_eq!(
            NET_RX_BYTES.descriptor().label_keys,
            ["pod", "namespace", "container", "id", "image", "interface"]
        );
        assert_eq!(
            MEMORY_USAGE.metric(&base, &[], 1).metric_type,
            MetricType::Gauge as i32
        );
    }
}
