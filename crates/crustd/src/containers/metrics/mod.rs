//! ListMetricDescriptors and ListPodSandboxMetrics: cAdvisor's container metrics, which
//! the kubelet serves on `/metrics/cadvisor` from these RPCs when its
//! `PodAndContainerStatsFromCRI` gate is on. The names, label keys and units are
//! containerd 2.x's (`descriptors.rs` has the set); what crust does otherwise:
//!
//! - Which pods: ready sandboxes only, as containerd. Each has its network metrics,
//!   one set per interface of its namespace but `lo` (containerd sends only `eth0`;
//!   cAdvisor and CRI-O every interface), with `container` and `image` empty; none
//!   for a pod on the host's network (containerd: none without a network namespace).
//! - Which containers: created and running ones whose cgroup is there, as
//!   ContainerStats; an exited container has no metrics.
//! - `image` is the image as CreateContainer named it, or its repo tag when it was
//!   named by its id, as the kubelet v1.28 names it (containerd 2.x sends the
//!   `user_specified_image`, empty from that kubelet).
//! - Units: the CRI's values are integers, so CPU and throttled time are whole
//!   seconds, rounded down, as containerd and CRI-O send them (cAdvisor has fractions).
//!   A rate over a few minutes is still right; over less than a second it is coarse.
//! - cgroup v1 and v2 read alike (the `cgroups` crate's stats): the kernel memory is
//!   `memory.kmem.usage_in_bytes` or `memory.stat`'s `kernel`, the peak
//!   `memory.max_usage_in_bytes` or `memory.peak`, failcnt `memory.failcnt` or
//!   `memory.events`'s `max` (containerd sends 0 there on v2, and a limit as the peak).
//! - File system: `container_fs_usage_bytes` is the writable layer's size (as
//!   ContainerStats' `writable_layer`), the limit and inodes those of the file system
//!   it is on; `device` names that file system's block device (`/dev/vda1`, from
//!   `/sys/dev/block`) or, when it has none (tmpfs, btrfs), `MAJOR:MINOR` (containerd
//!   sends `/`). Block I/O metrics name their device the same way (containerd: the
//!   device's name on v1, `MAJOR:MINOR` on v2); they are there only for devices the
//!   kernel counted I/O on, which on v1 is at best what BFQ or the throttling layer saw
//!   (on a 6.18 kernel not even a container's direct reads).
//! - `container_processes` counts processes (`cgroup.procs`), `container_threads`
//!   tasks (`pids.current`); containerd sends the task count for both.
//! - `container_ulimits_soft` is read from the init's `/proc/<pid>/limits` (what is in
//!   force, not what was asked), labelled `RLIMIT_NOFILE` and so on as containerd
//!   labels its spec's; unlimited ones are left out (the value cannot be -1).
//! - `container_spec_*` come from the resources in force (UpdateContainerResources
//!   changes them), a value the container did not set left out, as containerd.
//!   `container_spec_memory_reservation_limit_bytes` is not sent: the CRI has no such
//!   resource. Hugetlb and pressure metrics (CRI-O's) are not sent either.
//! - Timestamps are 0: every value is read when asked, and the CRI says a live value
//!   carries none (containerd and CRI-O stamp the time of the call).

pub mod descriptors;

use super::stats::{self, NetDev};
use crate::containers::store::{ContainerRecord, ContainerState};
use crate::cri::error::{Error, Result};
use crate::daemon::{util, Crust};
use crate::sandboxes::store::{SandboxRecord, SandboxState};
use cgroups::CgroupManager;
use cri_api::*;
use descriptors::{self as d, Desc};
use std::path::Path;
use std::sync::Arc;

/// ListMetricDescriptors' answer.
pub fn descriptors() -> Vec<MetricDescriptor> {
    d::descriptors()
}

/// ListPodSandboxMetrics: every ready sandbox with its created and running containers.
/// The records as their last operations left them (no wait on one in flight); the
/// files are read afterwards, on a blocking thread (a writable layer is walked to
/// measure it).
pub async fn list(crust: Arc<Crust>) -> Result<Vec<PodSandboxMetrics>> {
    let mut pods = vec![];
    for sb in crust.store.list() {
        let rec = sb.rec.view();
        if rec.state != SandboxState::Ready {
            continue;
        }
        let mut containers = vec![];
        for c in crust.containers.of_sandbox(&rec.id) {
            let r = c.rec.view();
            if matches!(r.state, ContainerState::Created | ContainerState::Running) {
                containers.push(r);
            }
        }
        pods.push((rec, containers));
    }
    tokio::task::spawn_blocking(move || {
        pods.iter()
            .map(|(sb, containers)| pod(&crust, sb, containers))
            .collect()
    })
    .await
    .map_err(Error::internal)
}

fn pod(
    crust: &Crust,
    sb: &SandboxRecord,
    containers: &[Arc<ContainerRecord>],
) -> PodSandboxMetrics {
    let labels = |container: &str, id: &str, image: &str| {
        [&sb.name, &sb.namespace, container, id, image].map(str::to_string)
    };
    let metrics = stats::pod_interfaces(sb)
        .map(|ifaces| network_metrics(&labels("", &sb.id, ""), &ifaces))
        .unwrap_or_default();
    let container_metrics = containers
        .iter()
        .filter_map(|c| {
            let r = read(crust, c)?;
            Some(ContainerMetrics {
                container_id: c.id.clone(),
                metrics: container_metrics(
                    &labels(
                        &c.name,
                        &c.id,
                        image_label(&c.image, &c.image_id, &c.image_name),
                    ),
                    &r,
                ),
            })
        })
        .collect();
    PodSandboxMetrics {
        pod_sandbox_id: sb.id.clone(),
        metrics,
        container_metrics,
    }
}

/// A container's `image` label: the image as CreateContainer named it, unless it named
/// it by its id (`sha256:<hex>`, the hex or a prefix of it), as the kubelet does with
/// what PullImage gave it: then the name ContainerStatus reports (a repo tag), the name
/// dashboards group by, as cAdvisor's label has it.
fn image_label<'a>(image: &'a str, image_id: &str, image_name: &'a str) -> &'a str {
    fn hex(s: &str) -> &str {
        s.strip_prefix("sha256:").unwrap_or(s)
    }
    let by_id = image.starts_with("sha256:")
        || (!image.is_empty() && hex(image_id).starts_with(hex(image)));
    if by_id && !image_name.is_empty() {
        image_name
    } else {
        image
    }
}

/// What is read about one container for its metrics.
#[derive(Debug, Default)]
struct Readings {
    /// Seconds since the Unix epoch: now, and when the container started (0: not yet).
    now: u64,
    started_at: u64,
    cgroup: cgroups::Stats,
    /// Block I/O per device, each with its device's name.
    io: Vec<(String, cgroups::DeviceIo)>,
    processes: u64,
    fds: u64,
    sockets: u64,
    fs: Option<FsReading>,
    ulimits: Vec<(&'static str, u64)>,
    resources: Option<LinuxContainerResources>,
}

/// The writable layer and the file system it is on.
#[derive(Debug, Default)]
struct FsReading {
    device: String,
    used_bytes: u64,
    capacity_bytes: u64,
    inodes: u64,
    inodes_free: u64,
}

/// Reads a created or running container; `None` when its cgroup is gone (it is being
/// removed, or exited since the record was copied).
fn read(crust: &Crust, rec: &ContainerRecord) -> Option<Readings> {
    let path = cgroups::CgroupPath::new(rec.cgroup.as_deref()?).ok()?;
    if !crust.cgroups.exists(&path) {
        return None;
    }
    let cgroup = match crust.cgroups.stats(&path) {
        Ok(s) => s,
        Err(e) => {
            tracing::debug!(container = rec.id, error = %e, "no metrics: cgroup unreadable");
            return None;
        }
    };
    let procs = crust.cgroups.procs(&path).unwrap_or_default();
    let (fds, sockets) = count_fds(&procs);
    let io = cgroup
        .io
        .iter()
        .map(|io| (device_name(io.major, io.minor), io.clone()))
        .collect();
    Some(Readings {
        now: secs(util::now_ns()),
        started_at: secs(rec.started_at),
        io,
        processes: procs.len() as u64,
        fds,
        sockets,
        fs: crust
            .images
            .snapshot(&rec.id)
            .and_then(|s| fs_reading(&s.upperdir)),
        ulimits: match rec.pid {
            p if p > 0 => std::fs::read_to_string(format!("/proc/{p}/limits"))
                .map(|t| soft_limits(&t))
                .unwrap_or_default(),
            _ => vec![],
        },
        resources: rec.resources().or_else(|| rec.config()?.linux?.resources),
        cgroup,
    })
}

fn secs(ns: i64) -> u64 {
    u64::try_from(ns).unwrap_or(0) / 1_000_000_000
}

fn ns_to_secs(ns: u64) -> u64 {
    ns / 1_000_000_000
}

/// The metrics of one container, labelled `base` (see [`d::BASE_KEYS`]).
fn container_metrics(base: &[String; 5], r: &Readings) -> Vec<Metric> {
    let mut out = vec![];
    let mut put = |desc: &Desc, extra: &[&str], value: u64| {
        out.push(desc.metric(base, extra, value));
    };
    put(&d::LAST_SEEN, &[], r.now);
    if r.started_at > 0 {
        put(&d::START_TIME, &[], r.started_at);
    }

    let cpu = &r.cgroup.cpu;
    put(&d::CPU_USAGE, &[], ns_to_secs(cpu.usage_ns));
    put(&d::CPU_USER, &[], ns_to_secs(cpu.user_ns));
    put(&d::CPU_SYSTEM, &[], ns_to_secs(cpu.system_ns));
    put(&d::CFS_PERIODS, &[], cpu.periods);
    put(&d::CFS_THROTTLED_PERIODS, &[], cpu.throttled_periods);
    put(&d::CFS_THROTTLED_SECONDS, &[], ns_to_secs(cpu.throttled_ns));

    let m = &r.cgroup.memory;
    put(&d::MEMORY_USAGE, &[], m.usage);
    put(&d::MEMORY_WORKING_SET, &[], m.working_set);
    put(&d::MEMORY_MAX_USAGE, &[], m.max_usage);
    put(&d::MEMORY_RSS, &[], m.rss);
    put(&d::MEMORY_CACHE, &[], m.cache);
    put(&d::MEMORY_MAPPED_FILE, &[], m.mapped_file);
    put(&d::MEMORY_SWAP, &[], m.swap);
    put(&d::MEMORY_KERNEL, &[], m.kernel);
    put(&d::MEMORY_ACTIVE_FILE, &[], m.active_file);
    put(&d::MEMORY_INACTIVE_FILE, &[], m.inactive_file);
    put(&d::MEMORY_FAILCNT, &[], m.failcnt);
    put(
        &d::MEMORY_FAILURES,
        &["pgfault", "container"],
        m.page_faults,
    );
    put(
        &d::MEMORY_FAILURES,
        &["pgmajfault", "container"],
        m.major_page_faults,
    );
    put(&d::OOM_EVENTS, &[], m.oom_kills);

    if let Some(fs) = &r.fs {
        let dev: &[&str] = &[&fs.device];
        put(&d::FS_USAGE, dev, fs.used_bytes);
        put(&d::FS_LIMIT, dev, fs.capacity_bytes);
        put(&d::FS_INODES_TOTAL, dev, fs.inodes);
        put(&d::FS_INODES_FREE, dev, fs.inodes_free);
    }
    for (name, io) in &r.io {
        let dev: &[&str] = &[name];
        put(&d::FS_READS_BYTES, dev, io.read_bytes);
        put(&d::FS_READS, dev, io.reads);
        put(&d::FS_WRITES_BYTES, dev, io.write_bytes);
        put(&d::FS_WRITES, dev, io.writes);
        let (major, minor) = (io.major.to_string(), io.minor.to_string());
        for (op, bytes) in [("Read", io.read_bytes), ("Write", io.write_bytes)] {
            put(&d::BLKIO_DEVICE_USAGE, &[name, &major, &minor, op], bytes);
        }
    }

    put(&d::PROCESSES, &[], r.processes);
    put(&d::THREADS, &[], r.cgroup.pids.current);
    put(&d::THREADS_MAX, &[], r.cgroup.pids.limit.unwrap_or(0));
    put(&d::FILE_DESCRIPTORS, &[], r.fds);
    put(&d::SOCKETS, &[], r.sockets);
    for (name, soft) in &r.ulimits {
        put(&d::ULIMITS_SOFT, &[name], *soft);
    }

    if let Some(res) = &r.resources {
        for (desc, v) in [
            (&d::SPEC_CPU_PERIOD, res.cpu_period),
            (&d::SPEC_CPU_QUOTA, res.cpu_quota),
            (&d::SPEC_CPU_SHARES, res.cpu_shares),
            (&d::SPEC_MEMORY_LIMIT, res.memory_limit_in_bytes),
            (&d::SPEC_MEMORY_SWAP_LIMIT, res.memory_swap_limit_in_bytes),
        ] {
            if v > 0 {
                put(desc, &[], v as u64);
            }
        }
    }
    out
}

/// The pod's network metrics, one set per interface, labelled `base`.
fn network_metrics(base: &[String; 5], ifaces: &[NetDev]) -> Vec<Metric> {
    let mut out = vec![];
    for i in ifaces {
        for (desc, v) in [
            (&d::NET_RX_BYTES, i.rx_bytes),
            (&d::NET_RX_PACKETS, i.rx_packets),
            (&d::NET_RX_ERRORS, i.rx_errors),
            (&d::NET_RX_DROPPED, i.rx_dropped),
            (&d::NET_TX_BYTES, i.tx_bytes),
            (&d::NET_TX_PACKETS, i.tx_packets),
            (&d::NET_TX_ERRORS, i.tx_errors),
            (&d::NET_TX_DROPPED, i.tx_dropped),
        ] {
            out.push(desc.metric(base, &[&i.name], v));
        }
    }
    out
}

/// Open file descriptors of `pids`, and how many of them are sockets. A process that
/// exits meanwhile counts as none.
fn count_fds(pids: &[i32]) -> (u64, u64) {
    let (mut fds, mut sockets) = (0, 0);
    for pid in pids {
        let Ok(dir) = std::fs::read_dir(format!("/proc/{pid}/fd")) else {
            continue;
        };
        for e in dir.flatten() {
            fds += 1;
            if std::fs::read_link(e.path())
                .is_ok_and(|t| t.as_os_str().as_encoded_bytes().starts_with(b"socket:"))
            {
                sockets += 1;
            }
        }
    }
    (fds, sockets)
}

/// The name of block device `major:minor` (`/dev/` and its name in `/sys/dev/block`),
/// or `MAJOR:MINOR` when it is not a block device the kernel lists (tmpfs, overlay and
/// btrfs subvolumes have anonymous devices).
fn device_name(major: u64, minor: u64) -> String {
    std::fs::read_link(format!("/sys/dev/block/{major}:{minor}"))
        .ok()
        .and_then(|t| Some(format!("/dev/{}", t.file_name()?.to_str()?)))
        .unwrap_or_else(|| format!("{major}:{minor}"))
}

/// The writable layer's size and the file system it is on; `None` when it is gone.
fn fs_reading(upperdir: &Path) -> Option<FsReading> {
    use std::os::unix::fs::MetadataExt;
    let dev = std::fs::metadata(upperdir).ok()?.dev();
    let vfs = nix::sys::statvfs::statvfs(upperdir).ok()?;
    let (used_bytes, _) = stats::du(upperdir);
    Some(FsReading {
        device: device_name(libc::major(dev).into(), libc::minor(dev).into()),
        used_bytes,
        capacity_bytes: vfs.blocks() * vfs.fragment_size(),
        inodes: vfs.files(),
        inodes_free: vfs.files_free(),
    })
}

/// `/proc/<pid>/limits` lines by the `RLIMIT_` name of each.
const LIMITS: &[(&str, &str)] = &[
    ("Max cpu time", "RLIMIT_CPU"),
    ("Max file size", "RLIMIT_FSIZE"),
    ("Max data size", "RLIMIT_DATA"),
    ("Max stack size", "RLIMIT_STACK"),
    ("Max core file size", "RLIMIT_CORE"),
    ("Max resident set", "RLIMIT_RSS"),
    ("Max processes", "RLIMIT_NPROC"),
    ("Max open files", "RLIMIT_NOFILE"),
    ("Max locked memory", "RLIMIT_MEMLOCK"),
    ("Max address space", "RLIMIT_AS"),
    ("Max file locks", "RLIMIT_LOCKS"),
    ("Max pending signals", "RLIMIT_SIGPENDING"),
    ("Max msgqueue size", "RLIMIT_MSGQUEUE"),
    ("Max nice priority", "RLIMIT_NICE"),
    ("Max realtime priority", "RLIMIT_RTPRIO"),
    ("Max realtime timeout", "RLIMIT_RTTIME"),
];

/// The soft limits of a `/proc/<pid>/limits` text that are not `unlimited`.
fn soft_limits(text: &str) -> Vec<(&'static str, u64)> {
    text.lines()
        .filter_map(|line| {
            let (label, name) = LIMITS.iter().find(|(l, _)| line.starts_with(l))?;
            let soft = line[label.len()..].split_whitespace().next()?;
            Some((*name, soft.parse().ok()?))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::{BTreeSet, HashMap};

    fn base() -> [String; 5] {
        ["web", "default", "app", "c1", "busybox:1"].map(String::from)
    }

    /// A container with something to say for every metric.
    fn everything() -> Readings {
        let mut r = Readings {
            now: 1_700_000_100,
            started_at: 1_700_000_000,
            processes: 2,
            fds: 9,
            sockets: 1,
            fs: Some(FsReading {
                device: "/dev/vda1".into(),
                used_bytes: 8192,
                capacity_bytes: 10 << 30,
                inodes: 655_360,
                inodes_free: 600_000,
            }),
            ulimits: vec![("RLIMIT_NOFILE", 1024)],
            resources: Some(LinuxContainerResources {
                cpu_period: 100_000,
                cpu_quota: 20_000,
                cpu_shares: 1024,
                memory_limit_in_bytes: 64 << 20,
                memory_swap_limit_in_bytes: 64 << 20,
                ..Default::default()
            }),
            ..Default::default()
        };
        let io = cgroups::DeviceIo {
            major: 8,
            minor: 0,
            read_bytes: 4096,
            write_bytes: 512,
            reads: 3,
            writes: 1,
        };
        r.io = vec![("/dev/sda".into(), io.clone())];
        r.cgroup.io = vec![io];
        r.cgroup.cpu = cgroups::CpuStats {
            usage_ns: 2_999_999_999,
            user_ns: 2_000_000_000,
            system_ns: 999_999_999,
            periods: 50,
            throttled_periods: 7,
            throttled_ns: 1_500_000_000,
        };
        r.cgroup.memory = cgroups::MemoryStats {
            usage: 10 << 20,
            working_set: 8 << 20,
            rss: 6 << 20,
            cache: 4 << 20,
            swap: 4096,
            limit: Some(64 << 20),
            page_faults: 1000,
            major_page_faults: 3,
            oom_kills: 1,
            mapped_file: 1 << 20,
            active_file: 2 << 20,
            inactive_file: 2 << 20,
            kernel: 300_000,
            max_usage: 12 << 20,
            failcnt: 4,
        };
        r.cgroup.pids = cgroups::PidsStats {
            current: 5,
            limit: Some(100),
        };
        r
    }

    fn eth0() -> NetDev {
        NetDev {
            name: "eth0".into(),
            rx_bytes: 1500,
            rx_packets: 12,
            rx_errors: 1,
            rx_dropped: 2,
            tx_bytes: 980,
            tx_packets: 9,
            tx_errors: 3,
            tx_dropped: 4,
        }
    }

    fn all_metrics() -> Vec<Metric> {
        let pod_base = ["web", "default", "", "sb1", ""].map(String::from);
        let mut v = network_metrics(&pod_base, &[eth0()]);
        v.extend(container_metrics(&base(), &everything()));
        v
    }

    /// One value per metric name and label values (the first wins).
    fn values(ms: &[Metric]) -> HashMap<(String, Vec<String>), u64> {
        let mut out = HashMap::new();
        for m in ms {
            out.entry((m.name.clone(), m.label_values[5..].to_vec()))
                .or_insert(m.value.unwrap().value);
        }
        out
    }

    fn value(ms: &[Metric], name: &str, extra: &[&str]) -> Option<u64> {
        let extra = extra.iter().map(|s| s.to_string()).collect();
        values(ms).get(&(name.to_string(), extra)).copied()
    }

    /// What the kubelet needs of every metric: a descriptor by that name, the type the
    /// descriptor says, as many label values as it has keys. And the other way: with
    /// everything there to read, every descriptor has values (critest checks both).
    #[test]
    fn every_metric_is_described_and_every_descriptor_sent() {
        let descs: HashMap<String, MetricDescriptor> = d::descriptors()
            .into_iter()
            .map(|x| (x.name.clone(), x))
            .collect();
        let kinds: HashMap<&str, i32> = d::ALL.iter().map(|x| (x.name, x.kind as i32)).collect();
        let ms = all_metrics();
        for m in &ms {
            let desc = descs
                .get(&m.name)
                .unwrap_or_else(|| panic!("{} has no descriptor", m.name));
            assert_eq!(m.label_values.len(), desc.label_keys.len(), "{m:?}");
            assert_eq!(m.metric_type, kinds[m.name.as_str()], "{}", m.name);
            assert_eq!(m.timestamp, 0);
        }
        let sent: BTreeSet<&str> = ms.iter().map(|m| m.name.as_str()).collect();
        let described: BTreeSet<&str> = descs.keys().map(String::as_str).collect();
        assert_eq!(sent, described);
        // No two metrics with the same name and labels: Prometheus refuses a duplicate.
        let mut seen = BTreeSet::new();
        for m in &ms {
            assert!(
                seen.insert((m.name.clone(), m.label_values.clone())),
                "twice: {m:?}"
            );
        }
    }

    #[test]
    fn conversions() {
        let ms = container_metrics(&base(), &everything());
        for m in &ms {
            assert_eq!(&m.label_values[..5], &base()[..], "{}", m.name);
        }
        let v = |name: &str| value(&ms, name, &[]).unwrap_or_else(|| panic!("no {name}"));
        // Whole seconds, rounded down.
        assert_eq!(v("container_cpu_usage_seconds_total"), 2);
        assert_eq!(v("container_cpu_user_seconds_total"), 2);
        assert_eq!(v("container_cpu_system_seconds_total"), 0);
        assert_eq!(v("container_cpu_cfs_throttled_seconds_total"), 1);
        assert_eq!(v("container_cpu_cfs_throttled_periods_total"), 7);
        assert_eq!(v("container_memory_working_set_bytes"), 8 << 20);
        assert_eq!(v("container_memory_usage_bytes"), 10 << 20);
        assert_eq!(v("container_memory_max_usage_bytes"), 12 << 20);
        assert_eq!(v("container_memory_rss"), 6 << 20);
        assert_eq!(v("container_memory_kernel_usage"), 300_000);
        assert_eq!(v("container_memory_failcnt"), 4);
        assert_eq!(v("container_oom_events_total"), 1);
        assert_eq!(v("container_last_seen"), 1_700_000_100);
        assert_eq!(v("container_start_time_seconds"), 1_700_000_000);
        assert_eq!(v("container_processes"), 2);
        assert_eq!(v("container_threads"), 5);
        assert_eq!(v("container_threads_max"), 100);
        assert_eq!(v("container_spec_cpu_quota"), 20_000);
        assert_eq!(v("container_spec_memory_swap_limit_bytes"), 64 << 20);
        let f = |name, extra: &[&str]| value(&ms, name, extra);
        assert_eq!(
            f(
                "container_memory_failures_total",
                &["pgmajfault", "container"]
            ),
            Some(3)
        );
        assert_eq!(
            f("container_memory_failures_total", &["pgfault", "container"]),
            Some(1000)
        );
        assert_eq!(f("container_fs_usage_bytes", &["/dev/vda1"]), Some(8192));
        assert_eq!(f("container_fs_inodes_free", &["/dev/vda1"]), Some(600_000));
        assert_eq!(
            f("container_fs_reads_bytes_total", &["/dev/sda"]),
            Some(4096)
        );
        assert_eq!(f("container_fs_writes_total", &["/dev/sda"]), Some(1));
        assert_eq!(
            f(
                "container_blkio_device_usage_total",
                &["/dev/sda", "8", "0", "Write"]
            ),
            Some(512)
        );
        assert_eq!(f("container_ulimits_soft", &["RLIMIT_NOFILE"]), Some(1024));

        let net = network_metrics(&base(), &[eth0()]);
        let n = |name| value(&net, name, &["eth0"]).unwrap();
        assert_eq!(n("container_network_receive_bytes_total"), 1500);
        assert_eq!(n("container_network_receive_packets_total"), 12);
        assert_eq!(n("container_network_receive_errors_total"), 1);
        assert_eq!(n("container_network_receive_packets_dropped_total"), 2);
        assert_eq!(n("container_network_transmit_bytes_total"), 980);
        assert_eq!(n("container_network_transmit_packets_total"), 9);
        assert_eq!(n("container_network_transmit_errors_total"), 3);
        assert_eq!(n("container_network_transmit_packets_dropped_total"), 4);
        assert_eq!(network_metrics(&base(), &[]), []);
    }

    /// A container not started yet, without limits, writable layer or I/O: those
    /// metrics are left out rather than sent as 0; no task limit is 0 ("none").
    #[test]
    fn what_is_not_there_is_not_sent() {
        let mut r = everything();
        r.started_at = 0;
        r.fs = None;
        r.io.clear();
        r.ulimits.clear();
        r.resources = Some(LinuxContainerResources {
            cpu_shares: 2,
            ..Default::default()
        });
        r.cgroup.pids.limit = None;
        let ms = container_metrics(&base(), &r);
        let names: BTreeSet<&str> = ms.iter().map(|m| m.name.as_str()).collect();
        for gone in [
            "container_start_time_seconds",
            "container_fs_usage_bytes",
            "container_fs_reads_total",
            "container_blkio_device_usage_total",
            "container_ulimits_soft",
            "container_spec_cpu_period",
            "container_spec_memory_limit_bytes",
        ] {
            assert!(!names.contains(gone), "{gone} sent");
        }
        assert_eq!(value(&ms, "container_spec_cpu_shares", &[]), Some(2));
        assert_eq!(value(&ms, "container_threads_max", &[]), Some(0));
    }

    #[test]
    fn image_label_is_a_name() {
        let id = "sha256:0bddfb2fca3f106045b34ac8a0bb3395ce7cf18784c28816a1a12e90d3d3b064";
        let tag = "127.0.0.1:5000/e2e/busybox:1";
        // As the kubelet v1.28 asks: by the id PullImage returned.
        assert_eq!(image_label(id, id, tag), tag);
        assert_eq!(image_label(&id[7..], id, tag), tag);
        assert_eq!(image_label(&id[7..19], id, tag), tag);
        // By a name: that name, short or not.
        assert_eq!(image_label("busybox:e2e", id, tag), "busybox:e2e");
        assert_eq!(image_label(tag, id, tag), tag);
        let by_digest = "127.0.0.1:5000/e2e/busybox@sha256:1111";
        assert_eq!(image_label(by_digest, id, tag), by_digest);
        // An image without a name keeps its id.
        assert_eq!(image_label(id, id, ""), id);
    }

    #[test]
    fn proc_limits() {
        let text = "Limit                     Soft Limit           Hard Limit           Units     \n\
                    Max cpu time              unlimited            unlimited            seconds   \n\
                    Max stack size            8388608              unlimited            bytes     \n\
                    Max processes             63536                63536                processes \n\
                    Max open files            1024                 524288               files     \n\
                    Max realtime timeout      unlimited            unlimited            us        \n";
        assert_eq!(
            soft_limits(text),
            [
                ("RLIMIT_STACK", 8_388_608),
                ("RLIMIT_NPROC", 63_536),
                ("RLIMIT_NOFILE", 1024)
            ]
        );
        // This process's own: the open files limit is never unlimited.
        let own = soft_limits(&std::fs::read_to_string("/proc/self/limits").unwrap());
        assert!(own.iter().any(|(n, _)| *n == "RLIMIT_NOFILE"), "{own:?}");
    }

    #[test]
    fn devices_without_a_block_device_are_major_minor() {
        assert_eq!(device_name(0, 4_000_000), "0:4000000");
        // This process's own descriptors: at least stdin, stdout, stderr.
        let (fds, sockets) = count_fds(&[std::process::id() as i32]);
        assert!(fds >= 3 && sockets <= fds, "{fds} {sockets}");
    }
}
