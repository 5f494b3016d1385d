//! Pod cgroups, removed once their pod is gone, as the kubelet's pod container manager
//! removes them. The runtime makes `<cgroup-root>/kubepods/.../pod<uid>` when it places
//! the pod's first sandbox there, but a runtime removes only what it made for its
//! sandboxes and containers (runc: `pod<uid>/<id>`): on containerd every pod left an
//! empty `pod<uid>` directory in each hierarchy behind.

use crate::config::Config;
use std::path::PathBuf;
use std::time::Duration;

/// The mounts of every cgroup hierarchy (v1 controllers, named ones, the v2 or hybrid
/// mount): (mount point, the cgroup path of its root).
fn mounts() -> Vec<(PathBuf, String)> {
    std::fs::read_to_string("/proc/self/mountinfo")
        .unwrap_or_default()
        .lines()
        .filter_map(|l| {
            let (pre, post) = l.split_once(" - ")?;
            let fstype = post.split_whitespace().next()?;
            if fstype != "cgroup" && fstype != "cgroup2" {
                return None;
            }
            let f: Vec<&str> = pre.split_whitespace().collect();
            Some((PathBuf::from(f.get(4)?), f.get(3)?.to_string()))
        })
        .collect()
}

/// Removes the cgroup of pod `uid` (whatever its QoS class was) in every hierarchy,
/// once its sandboxes are removed. A cgroup that still holds a process or a child
/// (a container being torn down) is tried again for a few seconds, then left.
pub async fn remove_pod(cfg: &Config, uid: &str) {
    let mut dirs = Vec::new();
    for (mount, root) in mounts() {
        for qos in ["Guaranteed", "Burstable", "BestEffort"] {
            let path = cfg.pod_cgroup(qos, uid);
            let root = root.trim_end_matches('/');
            let Some(rel) = path.strip_prefix(root) else {
                continue;
            };
            let dir = mount.join(rel.trim_start_matches('/'));
            if dir.is_dir() {
                dirs.push(dir);
            }
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
