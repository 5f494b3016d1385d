//! Pod cgroups, made with the pod's own limits before its first sandbox and removed
//! once the pod is gone, as the kubelet's pod container manager does. A runtime would
//! make `<cgroup-root>/kubepods/.../pod<uid>` itself when it places a sandbox there, but
//! without limits, and it removes only what it made for its sandboxes and containers
//! (runc: `pod<uid>/<id>`): on containerd every pod left an empty `pod<uid>` directory
//! in each hierarchy behind.
//!
//! The crustlet writes only the cpu and memory controllers' files, the ones the kubelet
//! sets for a pod; the other hierarchies (cpuset above all, whose empty `cpuset.cpus` a
//! new directory would start with) are left to the runtime.
//!
//! With the systemd driver (the runtime's, see [`ready`]) every one of these cgroups is
//! a slice made over D-Bus, as the kubelet's libcontainer makes them: systemd then knows
//! them (it would otherwise take a cgroup it did not make for a stray and may prune it
//! on its next reload) and keeps their limits, which are sent as unit properties and
//! written to the cgroup files as well (for the exact values).

use crate::config::{Config, Driver};
use crate::spec::PodLimits;
use cgroups::systemd::Systemd;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// One mounted cgroup hierarchy.
pub struct Hierarchy {
    mount: PathBuf,
    /// The cgroup path of the mount's root (not `/` inside a cgroup namespace).
    root: String,
    v2: bool,
    /// The v1 controllers of the mount (`cpu`, `cpuacct`, `memory`, ...).
    controllers: Vec<String>,
}

impl Hierarchy {
    /// The directory of cgroup `path` in this hierarchy, if it lies under its root.
    fn dir(&self, path: &str) -> Option<PathBuf> {
        let root = self.root.trim_end_matches('/');
        let rel = path.strip_prefix(root)?;
        Some(self.mount.join(rel.trim_start_matches('/')))
    }

    fn has(&self, controller: &str) -> bool {
        self.controllers.iter().any(|c| c == controller)
    }
}

/// Every cgroup hierarchy mounted (v1 controllers, named ones, the v2 or hybrid mount).
pub fn hierarchies() -> Vec<Hierarchy> {
    std::fs::read_to_string("/proc/self/mountinfo")
        .unwrap_or_default()
        .lines()
        .filter_map(|l| {
            let (pre, post) = l.split_once(" - ")?;
            let mut post = post.split_whitespace();
            let fstype = post.next()?;
            if fstype != "cgroup" && fstype != "cgroup2" {
                return None;
            }
            let options = post.nth(1).unwrap_or("");
            let f: Vec<&str> = pre.split_whitespace().collect();
            Some(Hierarchy {
                mount: PathBuf::from(f.get(4)?),
                root: f.get(3)?.to_string(),
                v2: fstype == "cgroup2",
                controllers: options.split(',').map(str::to_string).collect(),
            })
        })
        .collect()
}

fn write(dir: &Path, file: &str, value: &str) -> std::io::Result<()> {
    std::fs::write(dir.join(file), value)
        .map_err(|e| std::io::Error::new(e.kind(), format!("{}/{file}: {e}", dir.display())))
}

/// cgroup v2's weight for v1 CPU shares (the conversion runc and the kubelet use).
fn weight(shares: u64) -> u64 {
    1 + (shares.clamp(2, 262_144) - 2) * 9999 / 262_142
}

/// Settles the cgroup driver once, before the first pod cgroup: the runtime's, when it
/// answers `RuntimeConfig` (crustd; the crustlet must place pods where the runtime
/// expects them: crustd's systemd driver refuses a cgroupfs parent, its cgroupfs driver
/// a slice), else `--cgroup-driver`'s (containerd 1.6 has no `RuntimeConfig`). Then the
/// node's pod cgroups are made. An error (the runtime not there yet) is tried again by
/// the next caller.
pub async fn ready(cfg: &std::sync::Arc<Config>, cri: &crate::cri::Cri) -> anyhow::Result<()> {
    // Not `driver_in_use` itself: that is set before the node's cgroups are made (their
    // paths follow it), and callers must wait for both.
    static READY: tokio::sync::OnceCell<()> = tokio::sync::OnceCell::const_new();
    READY
        .get_or_try_init(|| async {
            let asked = cri
                .runtime
                .clone()
                .runtime_config(cri_api::RuntimeConfigRequest {})
                .await;
            let runtimes = match asked {
                Ok(r) => r.into_inner().linux.map(|l| {
                    if l.cgroup_driver == cri_api::CgroupDriver::Cgroupfs as i32 {
                        Driver::Cgroupfs
                    } else {
                        Driver::Systemd
                    }
                }),
                Err(s) if s.code() == tonic::Code::Unimplemented => None,
                Err(s) => anyhow::bail!("asking the runtime for its cgroup driver: {}", s.message()),
            };
            let driver = match (runtimes, cfg.cgroup_driver) {
                (Some(d), flag) => {
                    if flag.is_some_and(|f| f != d) {
                        tracing::warn!(
                            "the runtime uses the {} cgroup driver, --cgroup-driver says {}: taking the runtime's",
                            d.name(),
                            flag.map_or("", Driver::name)
                        );
                    }
                    tracing::info!("cgroup driver {} (from the runtime)", d.name());
                    d
                }
                (None, flag) => {
                    let d = flag.unwrap_or(Driver::Cgroupfs);
                    tracing::info!("cgroup driver {} (the runtime does not say)", d.name());
                    d
                }
            };
            if driver == Driver::Systemd && !cfg.cgroup_root.trim_end_matches('/').is_empty() {
                tracing::warn!(
                    root = %cfg.cgroup_root,
                    "with the systemd cgroup driver pods go in kubepods.slice: --cgroup-root is not used"
                );
            }
            let _ = cfg.driver_in_use.set(driver);
            let cfg = cfg.clone();
            let made = tokio::task::spawn_blocking(move || make_node(&cfg, crate::node::limits()))
                .await
                .map_err(std::io::Error::other)
                .and_then(|r| r);
            if let Err(e) = made {
                tracing::warn!("the node's pod cgroups (kubepods): {e}");
            }
            Ok(())
        })
        .await
        .map(drop)
}

/// The connection to systemd, made on first use and kept (a runtime thread of its own).
fn systemd() -> std::io::Result<&'static Systemd> {
    static SYSTEMD: std::sync::OnceLock<Result<Systemd, String>> = std::sync::OnceLock::new();
    SYSTEMD
        .get_or_init(|| Systemd::connect().map_err(|e| e.to_string()))
        .as_ref()
        .map_err(|e| std::io::Error::other(format!("the systemd cgroup driver: {e}")))
}

/// Makes the slice whose cgroup is `path` (its parent slices with it) and sets `limits`
/// on it as unit properties.
fn make_slice(path: &str, limits: cgroups::Resources, description: &str) -> std::io::Result<()> {
    let name = path.rsplit('/').next().unwrap_or(path);
    let sd = systemd()?;
    let err = |e: cgroups::Error| std::io::Error::other(format!("{name}: {e}"));
    sd.start_slice(name, description).map_err(err)?;
    // The host's cgroup version does not change: read once, not on every pod.
    static VERSION: std::sync::OnceLock<cgroups::Version> = std::sync::OnceLock::new();
    let version = *VERSION.get_or_init(|| {
        if hierarchies().iter().any(|h| h.v2 && h.root == "/") {
            cgroups::Version::V2
        } else {
            cgroups::Version::V1
        }
    });
    sd.set_properties(name, cgroups::systemd::properties(&limits, version))
        .map_err(err)
}

/// Makes the cgroup of pod `uid` of QoS class `qos` with the pod's limits (written again
/// if it exists: a sandbox made anew), and gives the BestEffort class its 2 shares.
pub fn make_pod(cfg: &Config, qos: &str, uid: &str, limits: PodLimits) -> std::io::Result<()> {
    let path = cfg.pod_cgroup(qos, uid);
    if cfg.driver() == Driver::Systemd {
        let r = cgroups::Resources {
            cpu_shares: Some(limits.cpu_shares),
            cpu_quota: Some(limits.cpu_quota.unwrap_or(-1)),
            cpu_period: Some(100_000),
            memory_limit: Some(limits.memory.unwrap_or(-1)),
            ..Default::default()
        };
        make_slice(&path, r, &format!("libcontainer container {path}"))?;
    }
    let besteffort = (qos == "BestEffort").then(|| cfg.qos_cgroup("besteffort"));
    for h in hierarchies() {
        let Some(dir) = h.dir(&path) else { continue };
        if h.v2 {
            let have =
                std::fs::read_to_string(h.mount.join("cgroup.controllers")).unwrap_or_default();
            let wanted: Vec<&str> = ["cpu", "memory"]
                .into_iter()
                .filter(|c| have.split_whitespace().any(|x| x == *c))
                .collect();
            if wanted.is_empty() {
                // A hybrid host's v2 mount, its controllers all on v1.
                continue;
            }
            std::fs::create_dir_all(&dir)?;
            enable_down_to(&h.mount, &dir, &wanted)?;
            if let Some(be) = besteffort.as_deref().and_then(|p| h.dir(p)) {
                write(&be, "cpu.weight", &weight(2).to_string())?;
            }
            write(&dir, "cpu.weight", &weight(limits.cpu_shares).to_string())?;
            let quota = limits
                .cpu_quota
                .map_or_else(|| "max".to_string(), |q| q.to_string());
            write(&dir, "cpu.max", &format!("{quota} 100000"))?;
            let mem = limits
                .memory
                .map_or_else(|| "max".to_string(), |m| m.to_string());
            write(&dir, "memory.max", &mem)?;
            continue;
        }
        if h.has("cpu") {
            std::fs::create_dir_all(&dir)?;
            if let Some(be) = besteffort.as_deref().and_then(|p| h.dir(p)) {
                write(&be, "cpu.shares", "2")?;
            }
            write(&dir, "cpu.shares", &limits.cpu_shares.to_string())?;
            write(&dir, "cpu.cfs_period_us", "100000")?;
            let quota = limits.cpu_quota.unwrap_or(-1);
            write(&dir, "cpu.cfs_quota_us", &quota.to_string())?;
        }
        if h.has("memory") {
            std::fs::create_dir_all(&dir)?;
            let mem = limits.memory.unwrap_or(-1);
            write(&dir, "memory.limit_in_bytes", &mem.to_string())?;
        }
    }
    Ok(())
}

/// cgroup v2: `controllers` enabled in `cgroup.subtree_control` of every directory from
/// the hierarchy's root down to `dir`'s parent, so `dir` has their files.
fn enable_down_to(mount: &Path, dir: &Path, controllers: &[&str]) -> std::io::Result<()> {
    let Ok(rel) = dir.strip_prefix(mount) else {
        return Ok(());
    };
    let mut at = mount.to_path_buf();
    let mut parts: Vec<_> = rel.components().collect();
    parts.pop();
    for step in std::iter::once(None).chain(parts.into_iter().map(Some)) {
        if let Some(p) = step {
            at.push(p);
        }
        let on = std::fs::read_to_string(at.join("cgroup.subtree_control")).unwrap_or_default();
        for c in controllers {
            if !on.split_whitespace().any(|x| x == *c) {
                write(&at, "cgroup.subtree_control", &format!("+{c}"))?;
            }
        }
    }
    Ok(())
}

/// CPU shares for millicores, as the kubelet converts them (2 at the least).
fn shares(milli: i64) -> u64 {
    ((milli.max(0) as u64) * 1024 / 1000).clamp(2, 262_144)
}

/// What the node gives its pods, for the `kubepods` cgroup.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NodeLimits {
    pub cpu_milli: i64,
    /// Memory less hugepages (the eviction threshold is not taken off: the kubelet
    /// enforces capacity less reservations, of which the crustlet has none).
    pub memory: u64,
    /// The most tasks (the smaller of `pid_max` and `threads-max`).
    pub pids: Option<u64>,
}

/// Makes the node's pod cgroups as the kubelet's container manager keeps them (QoS
/// cgroups on, node allocatable enforced on pods): `kubepods` with the node's CPU as
/// shares, its memory and its task limit, `kubepods/besteffort` at 2 shares and
/// `kubepods/burstable` at the shares of the CPU its pods request (0 until
/// [`set_burstable`] says otherwise). Without a limit on `kubepods`, a v1 cgroup made by
/// hand starts at 1024 shares: all pods together would weigh as one process.
pub fn make_node(cfg: &Config, node: NodeLimits) -> std::io::Result<()> {
    let kubepods = cfg.kubepods_cgroup();
    let (burstable, besteffort) = (cfg.qos_cgroup("burstable"), cfg.qos_cgroup("besteffort"));
    if cfg.driver() == Driver::Systemd {
        let r = cgroups::Resources {
            cpu_shares: Some(shares(node.cpu_milli)),
            memory_limit: Some(node.memory as i64),
            pids_limit: node.pids.map(|p| p as i64),
            ..Default::default()
        };
        make_slice(&kubepods, r, "libcontainer container kubepods")?;
        let r = cgroups::Resources {
            cpu_shares: Some(2),
            ..Default::default()
        };
        make_slice(&besteffort, r, "libcontainer container kubepods-besteffort")?;
        make_slice(
            &burstable,
            cgroups::Resources::default(),
            "libcontainer container kubepods-burstable",
        )?;
    }
    for h in hierarchies() {
        let Some(dir) = h.dir(&kubepods) else {
            continue;
        };
        let (Some(burstable), Some(besteffort)) = (h.dir(&burstable), h.dir(&besteffort)) else {
            continue;
        };
        if h.v2 {
            let have =
                std::fs::read_to_string(h.mount.join("cgroup.controllers")).unwrap_or_default();
            let wanted: Vec<&str> = ["cpu", "memory", "pids"]
                .into_iter()
                .filter(|c| have.split_whitespace().any(|x| x == *c))
                .collect();
            if wanted.is_empty() {
                continue;
            }
            for sub in [&burstable, &besteffort] {
                std::fs::create_dir_all(sub)?;
                enable_down_to(&h.mount, sub, &wanted)?;
            }
            if wanted.contains(&"cpu") {
                write(
                    &dir,
                    "cpu.weight",
                    &weight(shares(node.cpu_milli)).to_string(),
                )?;
                write(&besteffort, "cpu.weight", &weight(2).to_string())?;
            }
            if wanted.contains(&"memory") {
                write(&dir, "memory.max", &node.memory.to_string())?;
            }
            if let (true, Some(p)) = (wanted.contains(&"pids"), node.pids) {
                write(&dir, "pids.max", &p.to_string())?;
            }
            continue;
        }
        if h.has("cpu") {
            for sub in [&burstable, &besteffort] {
                std::fs::create_dir_all(sub)?;
            }
            write(&dir, "cpu.shares", &shares(node.cpu_milli).to_string())?;
            write(&besteffort, "cpu.shares", "2")?;
        }
        if h.has("memory") {
            std::fs::create_dir_all(&dir)?;
            write(&dir, "memory.limit_in_bytes", &node.memory.to_string())?;
        }
        if let (true, Some(p)) = (h.has("pids"), node.pids) {
            std::fs::create_dir_all(&dir)?;
            write(&dir, "pids.max", &p.to_string())?;
        }
    }
    set_burstable(cfg, 0)
}

/// Gives `kubepods/burstable` the shares of `milli`, the CPU its pods request in all, as
/// the kubelet does on each pod start (so a Burstable pod's weight against Guaranteed
/// ones follows its request, not a fixed 1024).
pub fn set_burstable(cfg: &Config, milli: i64) -> std::io::Result<()> {
    let path = cfg.qos_cgroup("burstable");
    if cfg.driver() == Driver::Systemd {
        let r = cgroups::Resources {
            cpu_shares: Some(shares(milli)),
            ..Default::default()
        };
        make_slice(&path, r, "libcontainer container kubepods-burstable")?;
    }
    for h in hierarchies() {
        let Some(dir) = h.dir(&path) else { continue };
        if !dir.is_dir() {
            continue;
        }
        if h.v2 {
            if dir.join("cpu.weight").exists() {
                write(&dir, "cpu.weight", &weight(shares(milli)).to_string())?;
            }
        } else if h.has("cpu") {
            write(&dir, "cpu.shares", &shares(milli).to_string())?;
        }
    }
    Ok(())
}

/// Removes the cgroup of pod `uid` (whatever its QoS class was) in every hierarchy,
/// once its sandboxes are removed. A cgroup that still holds a process or a child
/// (a container being torn down) is tried again for a few seconds, then left.
pub async fn remove_pod(cfg: &Config, uid: &str) {
    let mut dirs = Vec::new();
    let mut slices = Vec::new();
    for h in hierarchies() {
        for qos in ["Guaranteed", "Burstable", "BestEffort"] {
            let path = cfg.pod_cgroup(qos, uid);
            let Some(dir) = h.dir(&path) else {
                continue;
            };
            if dir.is_dir() {
                dirs.push(dir);
                // One unit, however many v1 hierarchies have its directory.
                if !slices.contains(&path) {
                    slices.push(path);
                }
            }
        }
    }
    if cfg.driver() == Driver::Systemd && !slices.is_empty() {
        // Stopping the slice is what removes its cgroup (systemd's, not ours to rmdir).
        let stopped = tokio::task::spawn_blocking(move || -> std::io::Result<()> {
            let sd = systemd()?;
            for path in slices {
                let name = path.rsplit('/').next().unwrap_or(&path);
                sd.stop(name)
                    .map_err(|e| std::io::Error::other(format!("{name}: {e}")))?;
            }
            Ok(())
        })
        .await;
        if let Ok(Err(e)) = stopped {
            tracing::warn!(uid, "pod slice not stopped: {e}");
        }
    }
    for _ in 0..50 {
        dirs.retain(|d| match std::fs::remove_dir(d) {
            Ok(()) => false,
            Err(e) => e.kind() != std::io::ErrorKind::NotFound,
        });
        if dirs.is_empty() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    for d in dirs {
        tracing::info!(cgroup = %d.display(), "pod cgroup not removed: still in use");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn millicores_to_shares_as_the_kubelet_converts() {
        assert_eq!(shares(0), 2);
        assert_eq!(shares(1), 2);
        assert_eq!(shares(250), 256);
        assert_eq!(shares(2000), 2048);
        assert_eq!(shares(1_000_000), 262_144);
    }

    #[test]
    fn shares_to_weight_as_runc_converts() {
        assert_eq!(weight(2), 1);
        assert_eq!(weight(1024), 39);
        assert_eq!(weight(262_144), 10_000);
    }
}

/// What a cgroup used, read from its files (v1 `cpuacct` and `memory`, or v2), for the
/// summary's system containers and swap.
#[derive(Debug, Default, Clone, Copy)]
pub struct Usage {
    pub cpu_ns: Option<u64>,
    pub memory: Option<u64>,
    pub working_set: Option<u64>,
    pub rss: Option<u64>,
    pub page_faults: Option<u64>,
    pub major_page_faults: Option<u64>,
    /// The memory limit, when it has one.
    pub limit: Option<u64>,
    /// Swap in use (0 where the kernel does not account it).
    pub swap: u64,
    /// When the cgroup was made (its directory's change time), in seconds.
    pub created: Option<i64>,
}

fn read_u64(dir: &Path, file: &str) -> Option<u64> {
    std::fs::read_to_string(dir.join(file))
        .ok()?
        .trim()
        .parse()
        .ok()
}

fn stat_of(dir: &Path, file: &str) -> HashMap<String, u64> {
    std::fs::read_to_string(dir.join(file))
        .unwrap_or_default()
        .lines()
        .filter_map(|l| {
            let (k, v) = l.split_once(' ')?;
            Some((k.to_string(), v.trim().parse().ok()?))
        })
        .collect()
}

/// The usage of cgroup `path` (as `/proc/<pid>/cgroup` and the runtime name it) in the
/// mounted hierarchies `hs` ([`hierarchies`], read once for many cgroups).
pub fn usage(hs: &[Hierarchy], path: &str) -> Option<Usage> {
    use std::os::unix::fs::MetadataExt;
    let mut u = Usage::default();
    let mut found = false;
    for h in hs {
        let Some(dir) = h.dir(path) else { continue };
        if !dir.is_dir() {
            continue;
        }
        if h.v2 {
            // A hybrid host's v2 mount has no controllers (but a `cpu.stat` of its own).
            let have =
                std::fs::read_to_string(h.mount.join("cgroup.controllers")).unwrap_or_default();
            if !have.split_whitespace().any(|c| c == "memory") {
                continue;
            }
            let cpu = stat_of(&dir, "cpu.stat");
            let mem = stat_of(&dir, "memory.stat");
            found = true;
            u.created = std::fs::metadata(&dir).ok().map(|m| m.ctime());
            u.cpu_ns = cpu.get("usage_usec").map(|v| v * 1000);
            u.memory = read_u64(&dir, "memory.current");
            u.limit = read_u64(&dir, "memory.max");
            u.swap = read_u64(&dir, "memory.swap.current").unwrap_or(0);
            u.rss = mem.get("anon").copied();
            u.page_faults = mem.get("pgfault").copied();
            u.major_page_faults = mem.get("pgmajfault").copied();
            let inactive = mem.get("inactive_file").copied().unwrap_or(0);
            u.working_set = u.memory.map(|m| m.saturating_sub(inactive));
            continue;
        }
        if h.has("cpuacct") {
            found = true;
            u.cpu_ns = read_u64(&dir, "cpuacct.usage");
            u.created = std::fs::metadata(&dir).ok().map(|m| m.ctime());
        }
        if h.has("memory") {
            found = true;
            let mem = stat_of(&dir, "memory.stat");
            u.memory = read_u64(&dir, "memory.usage_in_bytes");
            // v1 says "no limit" with a page-rounded i64::MAX.
            u.limit = read_u64(&dir, "memory.limit_in_bytes").filter(|l| *l < 1 << 62);
            u.swap = read_u64(&dir, "memory.memsw.usage_in_bytes")
                .zip(u.memory)
                .map_or(0, |(sw, m)| sw.saturating_sub(m));
            u.rss = mem.get("total_rss").copied();
            u.page_faults = mem.get("total_pgfault").copied();
            u.major_page_faults = mem.get("total_pgmajfault").copied();
            let inactive = mem.get("total_inactive_file").copied().unwrap_or(0);
            u.working_set = u.memory.map(|m| m.saturating_sub(inactive));
        }
    }
    found.then_some(u)
}

/// The crustlet's own cgroup (its memory controller's, or v2's).
pub fn own() -> Option<String> {
    let text = std::fs::read_to_string("/proc/self/cgroup").ok()?;
    let mut v2 = None;
    for l in text.lines() {
        let mut f = l.splitn(3, ':');
        let (_, ctl, path) = (f.next()?, f.next()?, f.next()?);
        if ctl.split(',').any(|c| c == "memory") {
            return Some(path.to_string());
        }
        if ctl.is_empty() {
            v2 = Some(path.to_string());
        }
    }
    v2
}
