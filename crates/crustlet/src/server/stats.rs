//! `/stats/summary`: the kubelet's stats/v1alpha1 Summary. The node's numbers come from
//! procfs and statvfs (cadvisor's root-cgroup view, approximated from the kernel's
//! totals); the pods' and containers' from the runtime (CRI ListPodSandboxStats, or
//! ListContainerStats summed per pod for a runtime without it), their log and volume
//! use from the files under `--pod-logs-dir` and `--root-dir`.

use crate::Ctx;
use cri_api as cri;
use parking_lot::Mutex;
use serde_json::{json, Map, Value};
use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::time::Instant;

/// CPU time sampled so that a rate (usageNanoCores) can be given at any time: the
/// node's, and the system containers' by name.
#[derive(Default)]
pub struct CpuSampler {
    /// (when, cumulative ns): the two latest samples of each.
    samples: Mutex<HashMap<String, Vec<(Instant, u64)>>>,
}

impl CpuSampler {
    /// Takes a sample of the node; keeps the two latest.
    pub fn sample(&self) -> Option<(u64, Option<u64>)> {
        let total = node_cpu_ns()?;
        Some((total, self.rate_of("", total)))
    }

    /// Records `total` ns of CPU time of `key`; its rate against the newest sample at
    /// least a second old.
    fn rate_of(&self, key: &str, total: u64) -> Option<u64> {
        let now = Instant::now();
        let mut all = self.samples.lock();
        let s = all.entry(key.to_string()).or_default();
        let rate = s
            .iter()
            .rev()
            .find(|(t, _)| now.duration_since(*t).as_millis() >= 1000)
            .and_then(|(t, v)| {
                let dt = now.duration_since(*t).as_nanos();
                (total >= *v).then(|| ((total - v) as u128 * 1_000_000_000 / dt) as u64)
            });
        if s.last()
            .is_none_or(|(t, _)| now.duration_since(*t).as_millis() >= 1000)
        {
            s.push((now, total));
            if s.len() > 2 {
                s.remove(0);
            }
        }
        rate
    }
}

/// The CPU time the node spent busy, in ns (`/proc/stat`'s first line less idle and
/// iowait).
fn node_cpu_ns() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/stat").ok()?;
    let f: Vec<u64> = text
        .lines()
        .next()?
        .split_whitespace()
        .skip(1)
        .filter_map(|x| x.parse().ok())
        .collect();
    // user nice system idle iowait irq softirq steal (guest time is within user).
    let busy: u64 = f.iter().take(8).sum::<u64>() - f.get(3)? - f.get(4).copied().unwrap_or(0);
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as u64;
    Some(busy * (1_000_000_000 / hz))
}

fn meminfo() -> HashMap<String, u64> {
    std::fs::read_to_string("/proc/meminfo")
        .unwrap_or_default()
        .lines()
        .filter_map(|l| {
            let (k, v) = l.split_once(':')?;
            let kb: u64 = v.split_whitespace().next()?.parse().ok()?;
            Some((k.to_string(), kb * 1024))
        })
        .collect()
}

fn vmstat(key: &str) -> u64 {
    std::fs::read_to_string("/proc/vmstat")
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix(key)?.strip_prefix(' ')?.trim().parse().ok())
        .unwrap_or(0)
}

/// The boot time, as the node's start.
fn boot_time() -> Option<i64> {
    std::fs::read_to_string("/proc/stat")
        .ok()?
        .lines()
        .find_map(|l| l.strip_prefix("btime ")?.trim().parse().ok())
}

/// RFC 3339 with seconds, as metav1.Time is written.
pub fn time(secs: i64) -> String {
    k8s_openapi::jiff::Timestamp::from_second(secs)
        .map(|t| t.strftime("%Y-%m-%dT%H:%M:%SZ").to_string())
        .unwrap_or_default()
}

fn time_ns(ns: i64) -> String {
    time(ns.div_euclid(1_000_000_000))
}

pub fn now() -> String {
    time(k8s_openapi::jiff::Timestamp::now().as_second())
}

/// Capacity, available, used bytes and inodes of the filesystem holding `path`.
pub fn fs_stats(path: &Path, t: &str) -> Option<Value> {
    let s = nix_statvfs(path)?;
    Some(json!({
        "time": t,
        "availableBytes": s.bavail * s.frsize,
        "capacityBytes": s.blocks * s.frsize,
        "usedBytes": (s.blocks - s.bfree) * s.frsize,
        "inodesFree": s.ffree,
        "inodes": s.files,
        "inodesUsed": s.files.saturating_sub(s.ffree),
    }))
}

struct Vfs {
    bavail: u64,
    blocks: u64,
    bfree: u64,
    frsize: u64,
    files: u64,
    ffree: u64,
}

fn nix_statvfs(path: &Path) -> Option<Vfs> {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(path.as_os_str().as_bytes()).ok()?;
    // SAFETY: statvfs is plain integers, for which all zeroes is a valid value.
    let mut s: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: a valid C string and a struct to fill.
    if unsafe { libc::statvfs(c.as_ptr(), &mut s) } != 0 {
        return None;
    }
    Some(Vfs {
        bavail: s.f_bavail,
        blocks: s.f_blocks,
        bfree: s.f_bfree,
        frsize: s.f_frsize.max(1),
        files: s.f_files,
        ffree: s.f_ffree,
    })
}

/// A filesystem's capacity with `used` bytes and `inodes` of it ours.
fn fs_with_use(fs: Option<&Value>, used: u64, inodes: u64) -> Value {
    let mut v = fs.cloned().unwrap_or_else(|| json!({"time": now()}));
    v["usedBytes"] = json!(used);
    v["inodesUsed"] = json!(inodes);
    v
}

/// Bytes and inodes under a directory, this filesystem only, symlinks not followed.
fn du(dir: &Path) -> (u64, u64) {
    use std::os::unix::fs::MetadataExt;
    let dev = std::fs::symlink_metadata(dir).map(|m| m.dev()).unwrap_or(0);
    let mut stack = vec![dir.to_path_buf()];
    let (mut bytes, mut inodes) = (0, 0);
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

/// The node's interfaces (`/proc/net/dev`, loopback left out) and the one the default
/// route goes through.
fn node_network(t: &str) -> Value {
    let text = std::fs::read_to_string("/proc/net/dev").unwrap_or_default();
    let mut ifaces = vec![];
    for line in text.lines().skip(2) {
        let Some((name, rest)) = line.split_once(':') else {
            continue;
        };
        let name = name.trim();
        let f: Vec<u64> = rest
            .split_whitespace()
            .filter_map(|x| x.parse().ok())
            .collect();
        if name == "lo" || f.len() < 11 {
            continue;
        }
        ifaces.push(json!({"name": name, "rxBytes": f[0], "rxErrors": f[2], "txBytes": f[8], "txErrors": f[10]}));
    }
    let default = std::fs::read_to_string("/proc/net/route")
        .unwrap_or_default()
        .lines()
        .skip(1)
        .find_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            (f.get(1) == Some(&"00000000")).then(|| f[0].to_string())
        });
    let mut v = default
        .and_then(|d| ifaces.iter().find(|i| i["name"] == d.as_str()).cloned())
        .or_else(|| ifaces.first().cloned())
        .unwrap_or_else(|| json!({}));
    v["time"] = json!(t);
    v["interfaces"] = json!(ifaces);
    v
}

fn opt(v: &Option<cri::UInt64Value>) -> Option<u64> {
    v.as_ref().map(|x| x.value)
}

fn cpu_json(c: &cri::CpuUsage) -> Value {
    let mut v = json!({"time": time_ns(c.timestamp)});
    if let Some(x) = opt(&c.usage_nano_cores) {
        v["usageNanoCores"] = json!(x);
    }
    if let Some(x) = opt(&c.usage_core_nano_seconds) {
        v["usageCoreNanoSeconds"] = json!(x);
    }
    v
}

fn memory_json(m: &cri::MemoryUsage) -> Value {
    let mut v = json!({"time": time_ns(m.timestamp)});
    for (k, x) in [
        ("availableBytes", &m.available_bytes),
        ("usageBytes", &m.usage_bytes),
        ("workingSetBytes", &m.working_set_bytes),
        ("rssBytes", &m.rss_bytes),
        ("pageFaults", &m.page_faults),
        ("majorPageFaults", &m.major_page_faults),
    ] {
        if let Some(x) = opt(x) {
            v[k] = json!(x);
        }
    }
    v
}

fn network_json(n: &cri::NetworkUsage) -> Value {
    let iface = |i: &cri::NetworkInterfaceUsage| {
        json!({"name": i.name, "rxBytes": opt(&i.rx_bytes), "rxErrors": opt(&i.rx_errors),
               "txBytes": opt(&i.tx_bytes), "txErrors": opt(&i.tx_errors)})
    };
    let mut v = n
        .default_interface
        .as_ref()
        .map(iface)
        .unwrap_or_else(|| json!({}));
    v["time"] = json!(time_ns(n.timestamp));
    v["interfaces"] = json!(n.interfaces.iter().map(iface).collect::<Vec<_>>());
    v
}

/// Sums of containers' CPU and memory, for a pod the runtime has no pod stats of.
fn sum_usage(cs: &[cri::ContainerStats]) -> (cri::CpuUsage, cri::MemoryUsage) {
    let mut cpu = cri::CpuUsage::default();
    let mut mem = cri::MemoryUsage::default();
    let add = |a: &mut Option<cri::UInt64Value>, b: &Option<cri::UInt64Value>| {
        if let Some(b) = b {
            a.get_or_insert_with(Default::default).value += b.value;
        }
    };
    for c in cs {
        if let Some(u) = &c.cpu {
            cpu.timestamp = cpu.timestamp.max(u.timestamp);
            add(&mut cpu.usage_core_nano_seconds, &u.usage_core_nano_seconds);
            add(&mut cpu.usage_nano_cores, &u.usage_nano_cores);
        }
        if let Some(m) = &c.memory {
            mem.timestamp = mem.timestamp.max(m.timestamp);
            add(&mut mem.working_set_bytes, &m.working_set_bytes);
            add(&mut mem.usage_bytes, &m.usage_bytes);
            add(&mut mem.rss_bytes, &m.rss_bytes);
        }
    }
    (cpu, mem)
}

/// A pod's stats as the runtime gives them: (sandbox attributes, cpu, memory, network,
/// processes, containers).
struct PodReading {
    attrs: cri::PodSandboxAttributes,
    cpu: Option<cri::CpuUsage>,
    memory: Option<cri::MemoryUsage>,
    network: Option<cri::NetworkUsage>,
    processes: Option<u64>,
    containers: Vec<cri::ContainerStats>,
}

fn reading(s: cri::PodSandboxStats) -> Option<PodReading> {
    let l = s.linux.unwrap_or_default();
    Some(PodReading {
        attrs: s.attributes?,
        cpu: l.cpu,
        memory: l.memory,
        network: l.network,
        processes: l.process.and_then(|p| opt(&p.process_count)),
        containers: l.containers,
    })
}

/// One stats listing at a time goes to the runtime: containerd 1.6 keeps the last CPU
/// reading of each container in a map it updates without a lock, and two
/// ListPodSandboxStats at once (two `/stats/summary` requests, or one beside
/// `/metrics/resource`) crash it (`fatal error: concurrent map read and map write`).
/// (The kubelet 1.28 lists container stats instead, unless its PodAndContainerStatsFromCRI
/// gate is on.) The crash was seen in the kubelet suite with containerd 1.6.20.
static RUNTIME_STATS: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

async fn pod_readings(ctx: &Ctx) -> anyhow::Result<Vec<PodReading>> {
    let _one = RUNTIME_STATS.lock().await;
    let mut rt = ctx.cri.runtime.clone();
    match rt
        .list_pod_sandbox_stats(cri::ListPodSandboxStatsRequest { filter: None })
        .await
    {
        Ok(r) => {
            return Ok(r
                .into_inner()
                .stats
                .into_iter()
                .filter_map(reading)
                .collect())
        }
        Err(s) if s.code() == tonic::Code::Unimplemented => {}
        Err(s) => {
            // containerd fails the whole list when one sandbox is not ready (a
            // finished pod's): ask for each ready one instead.
            tracing::debug!("ListPodSandboxStats: {}; asking per sandbox", s.message());
            let ready = rt
                .list_pod_sandbox(cri::ListPodSandboxRequest {
                    filter: Some(cri::PodSandboxFilter {
                        state: Some(cri::PodSandboxStateValue {
                            state: cri::PodSandboxState::SandboxReady as i32,
                        }),
                        ..Default::default()
                    }),
                })
                .await?
                .into_inner()
                .items;
            let mut out = vec![];
            for sb in ready {
                let r = rt
                    .list_pod_sandbox_stats(cri::ListPodSandboxStatsRequest {
                        filter: Some(cri::PodSandboxStatsFilter {
                            id: sb.id.clone(),
                            ..Default::default()
                        }),
                    })
                    .await;
                match r {
                    Ok(r) => out.extend(r.into_inner().stats.into_iter().filter_map(reading)),
                    Err(e) => tracing::debug!(sandbox = %sb.id, "PodSandboxStats: {}", e.message()),
                }
            }
            return Ok(out);
        }
    }
    // A runtime without pod stats: containers' stats summed per sandbox.
    let sandboxes = rt
        .list_pod_sandbox(cri::ListPodSandboxRequest { filter: None })
        .await?
        .into_inner()
        .items;
    let stats = rt
        .list_container_stats(cri::ListContainerStatsRequest { filter: None })
        .await?
        .into_inner()
        .stats;
    let containers = rt
        .list_containers(cri::ListContainersRequest { filter: None })
        .await?
        .into_inner()
        .containers;
    let sandbox_of: HashMap<String, String> = containers
        .into_iter()
        .map(|c| (c.id, c.pod_sandbox_id))
        .collect();
    let mut by_sandbox: HashMap<String, Vec<cri::ContainerStats>> = HashMap::new();
    for s in stats {
        let id = s
            .attributes
            .as_ref()
            .map(|a| a.id.clone())
            .unwrap_or_default();
        if let Some(sb) = sandbox_of.get(&id) {
            by_sandbox.entry(sb.clone()).or_default().push(s);
        }
    }
    Ok(sandboxes
        .into_iter()
        .filter(|s| s.state == cri::PodSandboxState::SandboxReady as i32)
        .map(|s| {
            let cs = by_sandbox.remove(&s.id).unwrap_or_default();
            let (cpu, mem) = sum_usage(&cs);
            PodReading {
                attrs: cri::PodSandboxAttributes {
                    id: s.id,
                    metadata: s.metadata,
                    labels: s.labels,
                    annotations: s.annotations,
                },
                cpu: Some(cpu),
                memory: Some(mem),
                network: None,
                processes: None,
                containers: cs,
            }
        })
        .collect())
}

/// The Summary; with `only_cpu_and_memory`, what metrics-server asks for.
pub async fn summary(
    ctx: &Ctx,
    sampler: &CpuSampler,
    only_cpu_and_memory: bool,
) -> anyhow::Result<Value> {
    let t = now();
    let cfg = &ctx.cfg;
    let (mut node, mem_total) = node_totals(cfg, sampler, &t);
    // The cgroup mounts, read once for every cgroup below.
    let hs = crate::cgroup::hierarchies();
    let system = system_containers(cfg, &hs, sampler, &t, mem_total);
    node.insert("systemContainers".into(), json!(system));
    let image_fs = image_fs(ctx, &t).await;
    let created = created_at(ctx).await;
    let readings = pod_readings(ctx).await?;
    // statvfs can hang on a dead network file system, and the pods' disk usage is a walk
    // of their volumes and logs, as long as they are big: both off the runtime's thread,
    // which every pod's worker shares.
    let cfg = ctx.cfg.clone();
    let measured = ctx.seen.all_measured();
    let (node, pods) = tokio::task::spawn_blocking(move || {
        let node_fs = fs_stats(&cfg.root_dir, &t);
        let logs_fs = fs_stats(&cfg.pod_logs_dir, &t);
        if !only_cpu_and_memory {
            node_storage(&mut node, &t, node_fs.as_ref(), image_fs.as_ref());
        }
        let view = PodView {
            cfg: &cfg,
            hs: &hs,
            t: &t,
            created: &created,
            image_fs: image_fs.as_ref(),
            node_fs: node_fs.as_ref(),
            logs_fs: logs_fs.as_ref(),
            only_cpu_and_memory,
            measured: &measured,
        };
        let mut pods: Vec<Value> = readings.iter().filter_map(|p| pod_json(&view, p)).collect();
        pods.sort_by(|a, b| {
            let k = |v: &Value| format!("{}/{}", v["podRef"]["namespace"], v["podRef"]["name"]);
            k(a).cmp(&k(b))
        });
        (node, pods)
    })
    .await?;
    Ok(json!({"node": node, "pods": pods}))
}

/// The node's name, start, CPU, memory and swap from the kernel's totals, and its
/// MemTotal, which caps the system containers that have no limit of their own.
fn node_totals(
    cfg: &crate::config::Config,
    sampler: &CpuSampler,
    t: &str,
) -> (Map<String, Value>, u64) {
    let mut node = Map::new();
    node.insert("nodeName".into(), json!(cfg.node_name));
    if let Some(b) = boot_time() {
        node.insert("startTime".into(), json!(time(b)));
    }
    if let Some((total, rate)) = sampler.sample() {
        let mut cpu = json!({"time": t, "usageCoreNanoSeconds": total});
        if let Some(r) = rate {
            cpu["usageNanoCores"] = json!(r);
        }
        node.insert("cpu".into(), cpu);
    }
    let mi = meminfo();
    let g = |k: &str| mi.get(k).copied().unwrap_or(0);
    let usage = g("MemTotal").saturating_sub(g("MemFree"));
    let working_set = usage.saturating_sub(g("Inactive(file)"));
    node.insert(
        "memory".into(),
        json!({"time": t, "availableBytes": g("MemTotal").saturating_sub(working_set),
               "usageBytes": usage, "workingSetBytes": working_set, "rssBytes": g("AnonPages"),
               "pageFaults": vmstat("pgfault"), "majorPageFaults": vmstat("pgmajfault")}),
    );
    node.insert(
        "swap".into(),
        json!({"time": t, "swapAvailableBytes": g("SwapFree"),
               "swapUsageBytes": g("SwapTotal").saturating_sub(g("SwapFree"))}),
    );
    (node, g("MemTotal"))
}

/// The kubelet's system containers: its own cgroup and the pods' (`kubepods`).
fn system_containers(
    cfg: &crate::config::Config,
    hs: &[crate::cgroup::Hierarchy],
    sampler: &CpuSampler,
    t: &str,
    mem_total: u64,
) -> Vec<Value> {
    let mut system = vec![];
    for (name, path) in [
        ("kubelet", crate::cgroup::own()),
        ("pods", Some(cfg.kubepods_cgroup())),
    ] {
        let Some(u) = path.and_then(|p| crate::cgroup::usage(hs, &p)) else {
            continue;
        };
        let mut v = json!({"name": name, "swap": {"time": t, "swapUsageBytes": u.swap}});
        if let Some(c) = u.created {
            v["startTime"] = json!(time(c));
        }
        if let Some(ns) = u.cpu_ns {
            v["cpu"] = json!({"time": t, "usageCoreNanoSeconds": ns});
            if let Some(r) = sampler.rate_of(name, ns) {
                v["cpu"]["usageNanoCores"] = json!(r);
            }
        }
        if let Some(m) = u.memory {
            let ws = u.working_set.unwrap_or(m);
            let cap = u.limit.unwrap_or(mem_total);
            v["memory"] = json!({"time": t, "availableBytes": cap.saturating_sub(ws),
                "usageBytes": m, "workingSetBytes": ws, "rssBytes": u.rss.unwrap_or(0),
                "pageFaults": u.page_faults.unwrap_or(0),
                "majorPageFaults": u.major_page_faults.unwrap_or(0)});
        }
        system.push(v);
    }
    system
}

/// The node's network, filesystems and process count, which metrics-server does not
/// ask for.
fn node_storage(
    node: &mut Map<String, Value>,
    t: &str,
    node_fs: Option<&Value>,
    image_fs: Option<&Value>,
) {
    node.insert("network".into(), node_network(t));
    if let Some(f) = node_fs {
        node.insert("fs".into(), f.clone());
    }
    if let Some(f) = image_fs {
        node.insert("runtime".into(), json!({"imageFs": f, "containerFs": f}));
    }
    let maxpid: u64 = std::fs::read_to_string("/proc/sys/kernel/pid_max")
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(0);
    let curproc = std::fs::read_dir("/proc")
        .map(|r| {
            r.flatten()
                .filter(|e| {
                    e.file_name()
                        .to_string_lossy()
                        .bytes()
                        .all(|b| b.is_ascii_digit())
                })
                .count()
        })
        .unwrap_or(0);
    node.insert(
        "rlimit".into(),
        json!({"time": t, "maxpid": maxpid, "curproc": curproc}),
    );
}

/// Start times: the runtime's creation times of sandboxes and containers, by id; the
/// stats calls do not carry them.
async fn created_at(ctx: &Ctx) -> HashMap<String, i64> {
    let mut rt = ctx.cri.runtime.clone();
    rt.list_pod_sandbox(cri::ListPodSandboxRequest { filter: None })
        .await
        .map(|r| r.into_inner().items)
        .unwrap_or_default()
        .into_iter()
        .map(|s| (s.id, s.created_at))
        .chain(
            rt.list_containers(cri::ListContainersRequest { filter: None })
                .await
                .map(|r| r.into_inner().containers)
                .unwrap_or_default()
                .into_iter()
                .map(|c| (c.id, c.created_at)),
        )
        .collect()
}

/// What every pod's entry is read against, gathered once per Summary.
struct PodView<'a> {
    cfg: &'a crate::config::Config,
    hs: &'a [crate::cgroup::Hierarchy],
    t: &'a str,
    /// Creation times of sandboxes and containers by id ([`created_at`]).
    created: &'a HashMap<String, i64>,
    image_fs: Option<&'a Value>,
    node_fs: Option<&'a Value>,
    logs_fs: Option<&'a Value>,
    only_cpu_and_memory: bool,
    /// The measured claimed volumes of each pod, by uid.
    measured: &'a BTreeMap<String, Vec<crate::inputs::Measured>>,
}

/// What a pod's containers add up to: swap, and the ephemeral storage of their
/// writable layers and logs.
#[derive(Default)]
struct PodTotals {
    swap: u64,
    eph_bytes: u64,
    eph_inodes: u64,
}

/// One pod's entry; none for a sandbox without the labels that name its pod.
fn pod_json(view: &PodView, p: &PodReading) -> Option<Value> {
    let (cfg, t) = (view.cfg, view.t);
    let labels = &p.attrs.labels;
    let (Some(uid), Some(name), Some(ns)) = (
        labels.get(crate::spec::POD_UID),
        labels.get(crate::spec::POD_NAME),
        labels.get(crate::spec::POD_NAMESPACE),
    ) else {
        return None;
    };
    let log_dir = cfg.pod_logs_dir.join(format!("{ns}_{name}_{uid}"));
    let mut pod = Map::new();
    pod.insert(
        "podRef".into(),
        json!({"name": name, "namespace": ns, "uid": uid}),
    );
    if let Some(c) = view.created.get(&p.attrs.id) {
        pod.insert("startTime".into(), json!(time_ns(*c)));
    }
    // The pod's cgroup, whatever its QoS class, for swap the runtime may not give.
    let pod_cgroup = ["Guaranteed", "Burstable", "BestEffort"]
        .into_iter()
        .map(|q| cfg.pod_cgroup(q, uid))
        .find_map(|p| crate::cgroup::usage(view.hs, &p).map(|u| (p, u)));
    let mut totals = PodTotals::default();
    let mut containers = vec![];
    for c in &by_name(&p.containers) {
        let cgroup = pod_cgroup.as_ref().map(|(p, _)| p.as_str());
        if let Some(v) = container_json(view, c, cgroup, &log_dir, &mut totals) {
            containers.push(v);
        }
    }
    pod.insert("containers".into(), json!(containers));
    if let Some(u) = &p.cpu {
        pod.insert("cpu".into(), cpu_json(u));
    }
    if let Some(m) = &p.memory {
        pod.insert("memory".into(), memory_json(m));
    }
    let swap = pod_cgroup.map_or(totals.swap, |(_, u)| u.swap);
    pod.insert("swap".into(), json!({"time": t, "swapUsageBytes": swap}));
    if !view.only_cpu_and_memory {
        pod_storage(view, p, uid, &mut pod, totals);
    }
    Some(Value::Object(pod))
}

/// The pod's containers in the order of their names.
fn by_name(containers: &[cri::ContainerStats]) -> Vec<cri::ContainerStats> {
    let mut cs = containers.to_vec();
    cs.sort_by(|a, b| {
        let n = |c: &cri::ContainerStats| {
            c.attributes
                .as_ref()
                .and_then(|a| a.metadata.as_ref())
                .map(|m| m.name.clone())
        };
        n(a).cmp(&n(b))
    });
    cs
}

/// One container's entry, its swap and ephemeral storage added to `totals`; none for
/// stats without attributes. Swap the runtime does not give is read from the
/// container's cgroup under the pod's, `pod_cgroup`.
fn container_json(
    view: &PodView,
    c: &cri::ContainerStats,
    pod_cgroup: Option<&str>,
    log_dir: &Path,
    totals: &mut PodTotals,
) -> Option<Value> {
    let a = c.attributes.as_ref()?;
    let cname = a
        .metadata
        .as_ref()
        .map(|m| m.name.clone())
        .unwrap_or_default();
    let mut v = json!({"name": cname});
    if let Some(ct) = view.created.get(&a.id) {
        v["startTime"] = json!(time_ns(*ct));
    }
    if let Some(u) = &c.cpu {
        v["cpu"] = cpu_json(u);
    }
    if let Some(m) = &c.memory {
        v["memory"] = memory_json(m);
    }
    let swap = c
        .swap
        .as_ref()
        .and_then(|w| opt(&w.swap_usage_bytes))
        .or_else(|| {
            let p = pod_cgroup?;
            Some(crate::cgroup::usage(view.hs, &format!("{p}/{}", a.id))?.swap)
        })
        .unwrap_or(0);
    totals.swap += swap;
    v["swap"] = json!({"time": view.t, "swapUsageBytes": swap});
    if !view.only_cpu_and_memory {
        let (rb, ri) = c.writable_layer.as_ref().map_or((0, 0), |w| {
            (
                opt(&w.used_bytes).unwrap_or(0),
                opt(&w.inodes_used).unwrap_or(0),
            )
        });
        v["rootfs"] = fs_with_use(view.image_fs, rb, ri);
        let (lb, li) = du(&log_dir.join(&cname));
        v["logs"] = fs_with_use(view.logs_fs, lb, li);
        totals.eph_bytes += rb + lb;
        totals.eph_inodes += ri + li;
    }
    Some(v)
}

/// The pod's network, volumes, ephemeral storage (its containers' `totals` and the
/// volumes on the node's disk) and process count, which metrics-server does not ask
/// for.
fn pod_storage(
    view: &PodView,
    p: &PodReading,
    uid: &str,
    pod: &mut Map<String, Value>,
    totals: PodTotals,
) {
    let (mut eph_bytes, mut eph_inodes) = (totals.eph_bytes, totals.eph_inodes);
    if let Some(n) = &p.network {
        pod.insert("network".into(), network_json(n));
    }
    let volumes = volume_stats(&view.cfg.pod_dir(uid), view.node_fs);
    for v in &volumes {
        if v.1 {
            eph_bytes += v.0["usedBytes"].as_u64().unwrap_or(0);
            eph_inodes += v.0["inodesUsed"].as_u64().unwrap_or(0);
        }
    }
    let mut volumes: Vec<Value> = volumes.into_iter().map(|v| v.0).collect();
    // After the pod's own volumes, as the kubelet lists its persistent ones.
    for m in view.measured.get(uid).into_iter().flatten() {
        volumes.extend(claimed_volume_stats(m, view.t));
    }
    pod.insert("volume".into(), json!(volumes));
    pod.insert(
        "ephemeral-storage".into(),
        fs_with_use(view.node_fs, eph_bytes, eph_inodes),
    );
    if let Some(n) = p.processes {
        pod.insert("process_stats".into(), json!({"process_count": n}));
    }
}

/// The runtime's image filesystem (CRI ImageFsInfo) with the capacity of the
/// filesystem it is on.
async fn image_fs(ctx: &Ctx, t: &str) -> Option<Value> {
    let mut images = ctx.cri.images.clone();
    let info = images
        .image_fs_info(cri::ImageFsInfoRequest {})
        .await
        .ok()?
        .into_inner();
    let fs = info.image_filesystems.first()?;
    let mount = fs
        .fs_id
        .as_ref()
        .map(|f| f.mountpoint.clone())
        .unwrap_or_default();
    let mut v = fs_stats(Path::new(&mount), t).unwrap_or_else(|| json!({"time": t}));
    if let Some(u) = opt(&fs.used_bytes) {
        v["usedBytes"] = json!(u);
    }
    if let Some(i) = opt(&fs.inodes_used) {
        v["inodesUsed"] = json!(i);
    }
    Some(v)
}

/// A claimed volume's entry: the statfs of its path, as the kubelet's local plugin
/// measures it (the whole filesystem's use, not a walk), under the pod's name for the
/// volume, with the claim it came from.
pub fn claimed_volume_stats(m: &crate::inputs::Measured, t: &str) -> Option<Value> {
    let mut s = fs_stats(&m.path, t)?;
    s["name"] = json!(m.volume);
    s["pvcRef"] = json!({"name": m.claim, "namespace": m.namespace});
    Some(s)
}

/// The pod's volumes under `<pod dir>/volumes/<plugin>/<name>`: (stats, on the node's
/// disk and so part of its ephemeral storage).
fn volume_stats(pod_dir: &Path, node_fs: Option<&Value>) -> Vec<(Value, bool)> {
    let mut out = vec![];
    let Ok(plugins) = std::fs::read_dir(pod_dir.join("volumes")) else {
        return out;
    };
    for p in plugins.flatten() {
        let plugin = p.file_name().to_string_lossy().into_owned();
        let Ok(vols) = std::fs::read_dir(p.path()) else {
            continue;
        };
        for v in vols.flatten() {
            let path = v.path();
            let (b, i) = du(&path);
            let mut s = fs_stats(&path, &now()).unwrap_or_else(|| json!({"time": now()}));
            s["usedBytes"] = json!(b);
            s["inodesUsed"] = json!(i);
            s["name"] = json!(v.file_name().to_string_lossy());
            // A memory-backed emptyDir is on a tmpfs of its own, not the node's disk.
            let on_disk = plugin == "kubernetes.io~empty-dir"
                && node_fs.is_none_or(|n| n["capacityBytes"] == s["capacityBytes"]);
            out.push((s, on_disk));
        }
    }
    out.sort_by(|a, b| a.0["name"].as_str().cmp(&b.0["name"].as_str()));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn node_readings_are_there() {
        assert!(node_cpu_ns().unwrap() > 0);
        assert!(meminfo()["MemTotal"] > 0);
        assert!(boot_time().unwrap() > 1_000_000_000);
        let fs = fs_stats(Path::new("/"), "t").unwrap();
        assert!(fs["capacityBytes"].as_u64().unwrap() > 0);
        assert!(fs["usedBytes"].as_u64() <= fs["capacityBytes"].as_u64());
        let s = CpuSampler::default();
        let (a, r) = s.sample().unwrap();
        assert_eq!(r, None, "no rate from one sample");
        assert!(a > 0);
        assert_eq!(time(0), "1970-01-01T00:00:00Z");
        assert_eq!(time_ns(1_500_000_000), "1970-01-01T00:00:01Z");
    }

    #[test]
    fn runtime_numbers_are_shaped_as_the_kubelets() {
        let u = |v| Some(cri::UInt64Value { value: v });
        let cpu = cri::CpuUsage {
            timestamp: 2_000_000_000,
            usage_core_nano_seconds: u(5_000_000_000),
            usage_nano_cores: None,
        };
        assert_eq!(
            cpu_json(&cpu),
            json!({"time": "1970-01-01T00:00:02Z", "usageCoreNanoSeconds": 5_000_000_000u64})
        );
        let m = cri::MemoryUsage {
            timestamp: 0,
            working_set_bytes: u(10),
            usage_bytes: u(20),
            rss_bytes: u(5),
            ..Default::default()
        };
        let j = memory_json(&m);
        assert_eq!(j["workingSetBytes"], 10);
        assert_eq!(j["usageBytes"], 20);
        assert!(j.get("availableBytes").is_none(), "no limit, no available");
        let c = |n: u64, ws: u64| cri::ContainerStats {
            cpu: Some(cri::CpuUsage {
                timestamp: 1,
                usage_core_nano_seconds: u(n),
                usage_nano_cores: u(n / 10),
            }),
            memory: Some(cri::MemoryUsage {
                timestamp: 1,
                working_set_bytes: u(ws),
                ..Default::default()
            }),
            ..Default::default()
        };
        let (cpu, mem) = sum_usage(&[c(100, 1), c(200, 2)]);
        assert_eq!(opt(&cpu.usage_core_nano_seconds), Some(300));
        assert_eq!(opt(&cpu.usage_nano_cores), Some(30));
        assert_eq!(opt(&mem.working_set_bytes), Some(3));
        assert_eq!(opt(&mem.usage_bytes), None);
    }

    #[test]
    fn volumes_are_measured() {
        let d = std::env::temp_dir().join(format!("crustlet-vol-{}", std::process::id()));
        let v = d.join("volumes/kubernetes.io~empty-dir/cache");
        std::fs::create_dir_all(&v).unwrap();
        std::fs::write(v.join("f"), vec![1u8; 8192]).unwrap();
        let node = fs_stats(&d, "t");
        let s = volume_stats(&d, node.as_ref());
        assert_eq!(s.len(), 1);
        assert_eq!(s[0].0["name"], "cache");
        assert!(s[0].0["usedBytes"].as_u64().unwrap() >= 8192);
        assert_eq!(s[0].0["inodesUsed"], 1);
        assert!(s[0].1, "an emptyDir on the node's disk");
        std::fs::remove_dir_all(&d).ok();
    }

    #[test]
    fn a_claimed_volume_is_its_filesystem_under_its_claim() {
        let m = crate::inputs::Measured {
            namespace: "ns".into(),
            volume: "data".into(),
            claim: "pod-data".into(),
            path: std::env::temp_dir(),
        };
        let v = claimed_volume_stats(&m, "t").unwrap();
        assert_eq!(v["name"], "data");
        assert_eq!(v["pvcRef"], json!({"name": "pod-data", "namespace": "ns"}));
        let fs = fs_stats(&m.path, "t").unwrap();
        assert_eq!(v["capacityBytes"], fs["capacityBytes"]);
        assert_eq!(v["inodes"], fs["inodes"]);
        assert!(v["usedBytes"].as_u64().is_some() && v["availableBytes"].as_u64().is_some());
        let gone = crate::inputs::Measured {
            path: "/nonexistent/crust".into(),
            ..m
        };
        assert!(
            claimed_volume_stats(&gone, "t").is_none(),
            "no path, no entry"
        );
    }
}
