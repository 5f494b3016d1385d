//! ContainerStats, ListContainerStats, PodSandboxStats and ListPodSandboxStats: what the
//! kubelet's summary API and eviction manager read, from the cgroups (`cgroups` crate),
//! the pod's `/proc/<pause>/net/dev` and the snapshots' writable layers.
//!
//! `usage_nano_cores` is a rate: the difference to the previous sample of the same
//! cgroup over the time between them, as containerd computes it; the first sample of a
//! cgroup reports none.

use crate::containers::store::{ContainerRecord, ContainerState};
use crate::cri::error::{Error, Result};
use crate::cri::labels;
use crate::daemon::util;
use crate::daemon::Crust;
use crate::sandboxes::store::{SandboxRecord, SandboxState};
use cgroups::CgroupManager;
use cri_api::*;
use parking_lot::Mutex;
use std::collections::HashMap;
use std::sync::{Arc, LazyLock};

/// The last sample of each cgroup's CPU time, for the rate.
static SAMPLES: LazyLock<Mutex<CpuSamples>> = LazyLock::new(Default::default);

/// The last (timestamp ns, cumulative CPU ns) per cgroup path.
#[derive(Default)]
struct CpuSamples(HashMap<String, (i64, u64)>);

impl CpuSamples {
    /// Records `usage` ns of CPU of cgroup `cg` at `ts`; the rate since the previous
    /// sample (ns of CPU per second), none for the first.
    fn rate(&mut self, cg: &str, ts: i64, usage: u64) -> Option<u64> {
        let (pts, pusage) = self.0.insert(cg.to_string(), (ts, usage))?;
        let dt = ts.checked_sub(pts).filter(|d| *d > 0)? as u64;
        (usage >= pusage).then(|| ((usage - pusage) as u128 * 1_000_000_000 / dt as u128) as u64)
    }

    /// Forgets the cgroups that `exists` says are gone: without it, every container
    /// and pod that came and went would keep its entry (the churn benchmark's load).
    fn forget_gone(&mut self, exists: impl Fn(&str) -> bool) {
        self.0.retain(|cg, _| exists(cg));
    }
}

/// After a list of stats (every few seconds from the kubelet): the samples of cgroups
/// removed since go.
fn forget_gone_cgroups(crust: &Crust) {
    SAMPLES
        .lock()
        .forget_gone(|cg| cgroups::CgroupPath::new(cg).is_ok_and(|p| crust.cgroups.exists(&p)));
}

fn u(v: u64) -> Option<UInt64Value> {
    Some(UInt64Value { value: v })
}

/// CPU and memory of a cgroup, or `None` when it cannot be read (gone).
fn usage(crust: &Crust, cg: &str) -> Option<(CpuUsage, MemoryUsage, SwapUsage, u64)> {
    let path = cgroups::CgroupPath::new(cg).ok()?;
    if !crust.cgroups.exists(&path) {
        return None;
    }
    let st = crust.cgroups.stats(&path).ok()?;
    let ts = util::now_ns();
    let nano_cores = SAMPLES.lock().rate(cg, ts, st.cpu.usage_ns);
    let cpu = CpuUsage {
        timestamp: ts,
        usage_core_nano_seconds: u(st.cpu.usage_ns),
        usage_nano_cores: nano_cores.and_then(u),
    };
    let m = &st.memory;
    let memory = MemoryUsage {
        timestamp: ts,
        working_set_bytes: u(m.working_set),
        available_bytes: m.limit.map(|l| l.saturating_sub(m.working_set)).and_then(u),
        usage_bytes: u(m.usage),
        rss_bytes: u(m.rss),
        page_faults: u(m.page_faults),
        major_page_faults: u(m.major_page_faults),
    };
    let swap = SwapUsage {
        timestamp: ts,
        swap_available_bytes: None,
        swap_usage_bytes: u(m.swap),
    };
    Some((cpu, memory, swap, st.pids.current))
}

/// Bytes and inodes under a directory (the writable layer), not following symlinks
/// and not crossing into other filesystems.
pub fn du(dir: &std::path::Path) -> (u64, u64) {
    use std::os::unix::fs::MetadataExt;
    let mut bytes = 0;
    let mut inodes = 0;
    let mut stack = vec![dir.to_path_buf()];
    let dev = std::fs::symlink_metadata(dir).map(|m| m.dev()).unwrap_or(0);
    while let Some(d) = stack.pop() {
        let Ok(rd) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in rd.flatten() {
            let Ok(m) = e.metadata() else { continue };
            inodes += 1;
            bytes += m.blocks() * 512;
            if m.is_dir() && m.dev() == dev {
                stack.push(e.path());
            }
        }
    }
    (bytes, inodes)
}

fn container_stats(crust: &Crust, rec: &ContainerRecord) -> Option<ContainerStats> {
    if !matches!(rec.state, ContainerState::Created | ContainerState::Running) {
        return None;
    }
    let (cpu, memory, swap, _) = usage(crust, rec.cgroup.as_deref()?)?;
    let writable_layer = crust.images.snapshot(&rec.id).map(|s| {
        let (bytes, inodes) = du(&s.upperdir);
        FilesystemUsage {
            timestamp: cpu.timestamp,
            fs_id: Some(FilesystemIdentifier {
                mountpoint: crust.images.root().display().to_string(),
            }),
            used_bytes: u(bytes),
            inodes_used: u(inodes),
        }
    });
    Some(ContainerStats {
        attributes: Some(ContainerAttributes {
            id: rec.id.clone(),
            metadata: Some(ContainerMetadata {
                name: rec.name.clone(),
                attempt: rec.attempt,
            }),
            labels: labels::to_cri(&rec.labels),
            annotations: labels::to_cri(&rec.annotations),
        }),
        cpu: Some(cpu),
        memory: Some(memory),
        writable_layer,
        swap: Some(swap),
    })
}

/// One interface's counters, a line of `/proc/<pid>/net/dev`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NetDev {
    pub name: String,
    pub rx_bytes: u64,
    pub rx_packets: u64,
    pub rx_errors: u64,
    pub rx_dropped: u64,
    pub tx_bytes: u64,
    pub tx_packets: u64,
    pub tx_errors: u64,
    pub tx_dropped: u64,
}

/// The interfaces of a `/proc/<pid>/net/dev` text but `lo` (left out as cAdvisor
/// does), in the kernel's order.
pub fn parse_net_dev(text: &str) -> Vec<NetDev> {
    let mut ifaces = vec![];
    for line in text.lines().skip(2) {
        let Some((name, rest)) = line.split_once(':') else {
            continue;
        };
        let name = name.trim();
        if name == "lo" {
            continue;
        }
        // Receive: bytes packets errs drop fifo frame compressed multicast; then
        // transmit: bytes packets errs drop fifo colls carrier compressed.
        let f: Vec<u64> = rest
            .split_whitespace()
            .filter_map(|x| x.parse().ok())
            .collect();
        if f.len() < 12 {
            continue;
        }
        ifaces.push(NetDev {
            name: name.to_string(),
            rx_bytes: f[0],
            rx_packets: f[1],
            rx_errors: f[2],
            rx_dropped: f[3],
            tx_bytes: f[8],
            tx_packets: f[9],
            tx_errors: f[10],
            tx_dropped: f[11],
        });
    }
    ifaces
}

/// The interfaces of the pod's network namespace, from `/proc/<pause>/net/dev` (the
/// file shows the reader's view of the namespace of that process); `None` for a pod
/// on the host's network or without a pause.
pub fn pod_interfaces(rec: &SandboxRecord) -> Option<Vec<NetDev>> {
    let pause = rec.pause?;
    if rec.host_network {
        return None;
    }
    let text = std::fs::read_to_string(format!("/proc/{}/net/dev", pause.pid)).ok()?;
    Some(parse_net_dev(&text))
}

/// The pod's interfaces as CRI stats.
fn network(rec: &SandboxRecord, ts: i64) -> Option<NetworkUsage> {
    let ifname = rec.network.as_ref().map(|n| n.ifname.as_str());
    network_usage(pod_interfaces(rec)?, ifname, ts)
}

/// `None` unless there is a default interface (the CNI's, else the first but `lo`):
/// the kubelet reads `default_interface` of any `network` it is given without a nil
/// check (v1.28 `criInterfaceToSummary`), so a pod whose namespace has only `lo` (its
/// network not yet made, or already torn down) would crash it.
fn network_usage(ifaces: Vec<NetDev>, ifname: Option<&str>, ts: i64) -> Option<NetworkUsage> {
    let ifaces: Vec<NetworkInterfaceUsage> = ifaces
        .into_iter()
        .map(|i| NetworkInterfaceUsage {
            name: i.name,
            rx_bytes: u(i.rx_bytes),
            rx_errors: u(i.rx_errors),
            tx_bytes: u(i.tx_bytes),
            tx_errors: u(i.tx_errors),
        })
        .collect();
    let default = ifname
        .and_then(|n| ifaces.iter().find(|i| i.name == n).cloned())
        .or_else(|| ifaces.first().cloned())?;
    Some(NetworkUsage {
        timestamp: ts,
        default_interface: Some(default),
        interfaces: ifaces,
    })
}

/// The cgroup whose usage is the pod's: the pod-level one (the kubelet's cgroup_parent,
/// or the one crust made for the pod) holding the pause's and the containers' cgroups;
/// the pause's own for a sandbox of the older layout, which sat right in crust's shared
/// `<root>/crust` (no record needs decoding for this: ListPodSandboxStats is polled).
fn pod_level(crust: &Crust, rec: &SandboxRecord) -> Option<String> {
    let own = rec.cgroup.clone()?;
    let parent = crate::daemon::Crust::pod_level_cgroup(&own)?;
    let shared = cgroups::CgroupPath::new(&format!(
        "{}/crust",
        crust.cfg.cgroup.root.trim_end_matches('/')
    ))
    .ok();
    Some(if shared.as_ref() == Some(&parent) {
        own
    } else {
        parent.to_string()
    })
}

async fn sandbox_stats(crust: &Arc<Crust>, rec: &SandboxRecord) -> Option<PodSandboxStats> {
    if rec.state != SandboxState::Ready {
        return None;
    }
    let (cpu, memory, _, procs) = usage(crust, &pod_level(crust, rec)?)?;
    let ts = cpu.timestamp;
    let mut containers = vec![];
    for c in crust.containers.of_sandbox(&rec.id) {
        // A copy: the lock is not held while the writable layer is measured.
        let r = c.rec.view();
        if let Some(s) = container_stats(crust, &r) {
            containers.push(s);
        }
    }
    Some(PodSandboxStats {
        attributes: Some(PodSandboxAttributes {
            id: rec.id.clone(),
            metadata: Some(PodSandboxMetadata {
                name: rec.name.clone(),
                uid: rec.uid.clone(),
                namespace: rec.namespace.clone(),
                attempt: rec.attempt,
            }),
            labels: labels::to_cri(&rec.labels),
            annotations: labels::to_cri(&rec.annotations),
        }),
        linux: Some(LinuxPodSandboxStats {
            cpu: Some(cpu),
            memory: Some(memory),
            network: network(rec, ts),
            process: Some(ProcessUsage {
                timestamp: ts,
                process_count: u(procs),
            }),
            containers,
        }),
        windows: None,
    })
}

pub async fn container(crust: Arc<Crust>, id: &str) -> Result<ContainerStatsResponse> {
    let c = crust.containers.get(id)?;
    let rec = c.rec.view();
    let stats = container_stats(&crust, &rec).ok_or_else(|| {
        Error::NotFound(format!(
            "container {} has no stats: it is not running",
            rec.id
        ))
    })?;
    Ok(ContainerStatsResponse { stats: Some(stats) })
}

pub async fn list_containers(
    crust: Arc<Crust>,
    f: Option<ContainerStatsFilter>,
) -> Result<Vec<ContainerStats>> {
    let f = f.unwrap_or_default();
    let sandbox = if f.pod_sandbox_id.is_empty() {
        None
    } else {
        match crust.store.get(&f.pod_sandbox_id) {
            Ok(sb) => Some(sb.id.clone()),
            Err(_) => return Ok(vec![]),
        }
    };
    let mut out = vec![];
    for c in crust.containers.list() {
        if !f.id.is_empty() && !c.id.starts_with(&f.id) {
            continue;
        }
        if sandbox.as_ref().is_some_and(|s| *s != c.sandbox_id) {
            continue;
        }
        let rec = c.rec.view();
        if !labels::selected(&f.label_selector, &rec.labels) {
            continue;
        }
        if let Some(s) = container_stats(&crust, &rec) {
            out.push(s);
        }
    }
    forget_gone_cgroups(&crust);
    Ok(out)
}

pub async fn sandbox(crust: Arc<Crust>, id: &str) -> Result<PodSandboxStatsResponse> {
    let sb = crust.store.get(id)?;
    let rec = sb.rec.view();
    let stats = sandbox_stats(&crust, &rec).await.ok_or_else(|| {
        Error::NotFound(format!("sandbox {} has no stats: it is not ready", rec.id))
    })?;
    Ok(PodSandboxStatsResponse { stats: Some(stats) })
}

pub async fn list_sandboxes(
    crust: Arc<Crust>,
    f: Option<PodSandboxStatsFilter>,
) -> Result<Vec<PodSandboxStats>> {
    let f = f.unwrap_or_default();
    let mut out = vec![];
    for sb in crust.store.list() {
        if !f.id.is_empty() && !sb.id.starts_with(&f.id) {
            continue;
        }
        let rec = sb.rec.view();
        if !labels::selected(&f.label_selector, &rec.labels) {
            continue;
        }
        if let Some(s) = sandbox_stats(&crust, &rec).await {
            out.push(s);
        }
    }
    forget_gone_cgroups(&crust);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_rate_from_the_previous_sample_and_gone_cgroups_forgotten() {
        let mut s = CpuSamples::default();
        assert_eq!(s.rate("/kubepods/pod1", 1_000_000_000, 0), None);
        // Half a core over two seconds.
        assert_eq!(
            s.rate("/kubepods/pod1", 3_000_000_000, 1_000_000_000),
            Some(500_000_000)
        );
        assert_eq!(s.rate("/kubepods/pod2", 3_000_000_000, 5), None);
        // A counter gone backwards (a cgroup made anew under the same path): no rate.
        assert_eq!(s.rate("/kubepods/pod2", 4_000_000_000, 1), None);
        s.forget_gone(|cg| cg != "/kubepods/pod1");
        assert_eq!(s.0.len(), 1);
        assert!(s.0.contains_key("/kubepods/pod2"));
        // A forgotten cgroup starts again with no rate.
        assert_eq!(s.rate("/kubepods/pod1", 5_000_000_000, 2_000_000_000), None);
    }

    #[test]
    fn net_dev_columns_and_no_loopback() {
        let text = "Inter-|   Receive                                                |  Transmit\n \
 face |bytes    packets errs drop fifo frame compressed multicast|bytes    packets errs drop fifo colls carrier compressed\n    \
lo:     140       2    0    0    0     0          0         0      140       2    0    0    0     0       0          0\n  \
eth0:    1500      12    1    2    0     0          0         0      980       9    3    4    0     0       0          0\n";
        assert_eq!(
            parse_net_dev(text),
            [NetDev {
                name: "eth0".into(),
                rx_bytes: 1500,
                rx_packets: 12,
                rx_errors: 1,
                rx_dropped: 2,
                tx_bytes: 980,
                tx_packets: 9,
                tx_errors: 3,
                tx_dropped: 4,
            }]
        );
        assert_eq!(parse_net_dev(""), []);
    }

    #[test]
    fn no_network_stats_without_a_default_interface() {
        let dev = |name: &str| NetDev {
            name: name.into(),
            rx_bytes: 1,
            rx_packets: 1,
            rx_errors: 0,
            rx_dropped: 0,
            tx_bytes: 2,
            tx_packets: 1,
            tx_errors: 0,
            tx_dropped: 0,
        };
        // Only `lo` (left out by the parser): nothing, not a network without a default.
        assert_eq!(network_usage(vec![], Some("eth0"), 5), None);
        assert_eq!(network_usage(vec![], None, 5), None);
        let n = network_usage(vec![dev("net1"), dev("eth0")], Some("eth0"), 5).unwrap();
        assert_eq!(n.default_interface.unwrap().name, "eth0");
        assert_eq!(n.interfaces.len(), 2);
        // The CNI's interface gone: the first one stands in.
        let n = network_usage(vec![dev("net1")], Some("eth0"), 5).unwrap();
        assert_eq!(n.default_interface.unwrap().name, "net1");
    }
}
