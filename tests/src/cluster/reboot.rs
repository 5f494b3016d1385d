//! A node's power cut, simulated: what a reboot takes (every process of the node, its
//! mounts, its volatile state dirs, the pods' cgroups and network namespaces, the pod
//! bridge) taken, what it keeps (the runtime's and the agent's persistent dirs, the
//! pods' logs, the CNI plugins' IP reservations on disk) kept, as a machine that lost
//! power and booted again has them. The control plane runs on.

use super::{Cluster, ContainerdFor};
use std::path::PathBuf;
use std::time::Duration;

/// One of the cluster's nodes whose machine loses power.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Machine {
    /// The crustlet on its crustd.
    Crustlet,
    /// The kubelet on containerd (with [`ContainerdFor::Kubelet`]).
    KubeletContainerd,
}

impl Cluster {
    /// Everything of `m`'s node stops at once, as at a power loss, and what a boot does
    /// not keep goes; nothing is started again (the caller starts the runtime, then the
    /// agent, as the node's init would).
    pub fn power_loss(&self, m: Machine) {
        let (cgroup_root, volatile, mounted, bridge) = match m {
            Machine::Crustlet => {
                self.kill_crustlet();
                self.kill_crustlet_crustd();
                (
                    self.crustlet_cgroup_root.clone(),
                    vec![self.path("crustlet-crust-state")],
                    vec![
                        self.path("crustlet-crust-state"),
                        self.path("crustlet-crust-root"),
                        self.path("crustlet-root"),
                    ],
                    "crustlet0",
                )
            }
            Machine::KubeletContainerd => {
                assert_eq!(self.opts.containerd, Some(ContainerdFor::Kubelet));
                self.kill_kubelet();
                self.kill_containerd();
                (
                    self.cgroup_root.clone(),
                    vec![self.path("ctrd-state"), self.path("ctrd-runc")],
                    vec![
                        self.path("ctrd-state"),
                        self.path("ctrd-runc"),
                        self.path("ctrd-root"),
                        PathBuf::from("/var/lib/kubelet"),
                        // containerd's pins of the pods' network namespaces.
                        PathBuf::from("/var/run/netns/cni-"),
                        PathBuf::from("/run/netns/cni-"),
                    ],
                    "ctrd0",
                )
            }
        };
        let volatile_text: Vec<String> = volatile.iter().map(|p| p.display().to_string()).collect();
        // The processes: the pods' (in the agent's cgroups), and the runtime's helpers
        // (crustd's monitors and pauses, containerd's shims), which name their state dir.
        for _ in 0..5 {
            let mut pids = std::collections::BTreeSet::new();
            for d in self.cgroups_below(&cgroup_root) {
                if let Ok(t) = std::fs::read_to_string(d.join("cgroup.procs")) {
                    pids.extend(t.lines().filter_map(|l| l.trim().parse::<i32>().ok()));
                }
            }
            for e in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
                let Some(pid) = e.file_name().to_str().and_then(|n| n.parse::<i32>().ok()) else {
                    continue;
                };
                let cmd = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
                let cmd = String::from_utf8_lossy(&cmd);
                if volatile_text.iter().any(|v| cmd.contains(v.as_str())) {
                    pids.insert(pid);
                }
            }
            pids.remove(&(std::process::id() as i32));
            if pids.is_empty() {
                break;
            }
            for p in pids {
                // SAFETY: killing the processes of a node this cluster made.
                unsafe { libc::kill(p, libc::SIGKILL) };
            }
            std::thread::sleep(Duration::from_millis(300));
        }
        // The mounts, deepest first, in the node's mount namespace.
        let info = std::fs::read_to_string(format!("/proc/{}/mountinfo", self.holder_pid))
            .unwrap_or_default();
        let mut points: Vec<String> = info
            .lines()
            .filter_map(|l| l.split_whitespace().nth(4))
            // Below each dir, never the dir itself: `/var/lib/kubelet` is the cluster's
            // bind mount over the host's, which must stay.
            .filter(|mp| {
                mounted.iter().any(|m| {
                    let m = m.display().to_string();
                    mp.starts_with(&m)
                        && mp.len() > m.len()
                        && (m.ends_with('-') || mp[m.len()..].starts_with('/'))
                })
            })
            .map(str::to_string)
            .collect();
        points.sort_by_key(|p| std::cmp::Reverse(p.len()));
        points.dedup();
        for mp in &points {
            let _ = self
                .node_cmd("umount")
                .args(["-l", mp])
                .stderr(std::process::Stdio::null())
                .status();
        }
        let left = self.node_mounts();
        for d in super::namespaces::KUBELET_DIRS {
            assert!(
                left.iter().any(|m| m == d),
                "the power loss took the cluster's mount over {d}"
            );
        }
        for m in &mounted {
            let m = m.display().to_string();
            if let Some(prefix) = m.strip_suffix("cni-") {
                // The pin files, in the node's mount namespace.
                let _ = self
                    .node_cmd("sh")
                    .args(["-c", &format!("rm -f {prefix}cni-*")])
                    .status();
            }
        }
        for d in &volatile {
            let _ = std::fs::remove_dir_all(d);
        }
        // The pods' cgroups (the agent's root stays: the harness made it).
        for _ in 0..20 {
            let mut dirs = self.cgroups_below(&cgroup_root);
            dirs.sort_by_key(|d| std::cmp::Reverse(d.components().count()));
            let roots: Vec<PathBuf> = super::cgroup_mounts()
                .into_iter()
                .map(|(_, m)| m.join(cgroup_root.trim_start_matches('/')))
                .collect();
            dirs.retain(|d| !roots.contains(d));
            if dirs.is_empty() {
                break;
            }
            for d in dirs {
                let _ = std::fs::remove_dir(d);
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        let _ = self
            .net_cmd("ip")
            .args(["link", "del", bridge])
            .stderr(std::process::Stdio::null())
            .status();
    }

    /// The mount points of the node's mount namespace (for checking what a node left).
    pub fn node_mounts(&self) -> Vec<String> {
        std::fs::read_to_string(format!("/proc/{}/mountinfo", self.holder_pid))
            .unwrap_or_default()
            .lines()
            .filter_map(|l| l.split_whitespace().nth(4).map(str::to_string))
            .collect()
    }
}
