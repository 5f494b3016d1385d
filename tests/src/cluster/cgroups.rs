//! The cluster's cgroups: the node agents' `--cgroup-root`s, made in every hierarchy below
//! the suite's own cgroup (and remembered for the teardown), the daemons' memory cgroups
//! of [`Options::agent_cgroups`](super::Options::agent_cgroups), and finding a pod's or a
//! container's cgroup dir.

use super::{Cluster, ContainerdFor};
use crate::which;
use std::path::{Path, PathBuf};

/// The mounts of every v1 hierarchy and the unified one: (controllers, mount dir).
pub(crate) fn cgroup_mounts() -> Vec<(String, PathBuf)> {
    let text = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    let mut v = Vec::new();
    for line in text.lines() {
        let Some((pre, post)) = line.split_once(" - ") else {
            continue;
        };
        let mut post = post.split_whitespace();
        let fstype = post.next().unwrap_or("");
        let _src = post.next();
        let opts = post.next().unwrap_or("");
        let mount = pre.split_whitespace().nth(4).unwrap_or("").to_string();
        match fstype {
            "cgroup" => {
                let ctrls: Vec<&str> = opts
                    .split(',')
                    .filter(|o| {
                        !matches!(*o, "rw" | "ro" | "nosuid" | "nodev" | "noexec" | "relatime")
                            && !o.starts_with("release_agent")
                            && !o.starts_with("xattr")
                            && !o.starts_with("clone_children")
                    })
                    .collect();
                v.push((ctrls.join(","), PathBuf::from(mount)));
            }
            "cgroup2" => v.push((String::new(), PathBuf::from(mount))),
            _ => {}
        }
    }
    v
}

/// The kubelet's cgroup root: `<deepest own cgroup>/<name>`. On cgroup v1 the test may
/// sit at different paths per controller (here: below `/process_api/...` in memory,
/// at `/` in the rest); the kubelet takes one path for all, so the deepest one is used
/// and the dirs it needs in other hierarchies are made (and removed) by the cluster.
pub(crate) fn pick_cgroup_root(name: &str) -> String {
    let text = std::fs::read_to_string("/proc/self/cgroup").unwrap_or_default();
    let own = text
        .lines()
        .filter_map(|l| l.splitn(3, ':').nth(2))
        .max_by_key(|p| p.len())
        .unwrap_or("/")
        .trim_end_matches('/')
        .to_string();
    format!("{own}/{name}")
}

impl Cluster {
    /// The kubelet's `--cgroup-root` must exist in every hierarchy; makes it (and the
    /// ancestors missing in hierarchies where the test sits higher), remembering what
    /// it made. A new cpuset cgroup gets its parent's CPUs and memory nodes. The
    /// crustlet's root is made the same way (crustd would make it, but then the
    /// ancestors it made would not be known to the teardown).
    pub(crate) fn make_cgroup_root(&mut self, root: &str) {
        let mounts = cgroup_mounts();
        let pure_v2 = mounts.iter().all(|(c, _)| c.is_empty());
        for (ctrls, mount) in mounts {
            let mut dir = mount.clone();
            for comp in root.trim_start_matches('/').split('/') {
                let parent = dir.clone();
                dir.push(comp);
                if dir.exists() || self.made_cgroups.contains(&dir) {
                    continue;
                }
                // The kubelet wants every v1 hierarchy, named ones too. crustd makes the
                // path on the hybrid cgroup2 mount when it places a pod there: noted,
                // so that the teardown removes what it made.
                if ctrls.is_empty() && !pure_v2 {
                    self.made_cgroups.push(dir.clone());
                    continue;
                }
                std::fs::create_dir(&dir)
                    .unwrap_or_else(|e| panic!("making cgroup {}: {e}", dir.display()));
                self.made_cgroups.push(dir.clone());
                if ctrls.split(',').any(|c| c == "cpuset") {
                    for f in ["cpuset.cpus", "cpuset.mems"] {
                        let v = std::fs::read_to_string(parent.join(f)).unwrap_or_default();
                        let _ = std::fs::write(dir.join(f), v.trim());
                    }
                }
            }
        }
    }

    /// With [`Options::agent_cgroups`](super::Options::agent_cgroups): a memory cgroup
    /// below `agents_cgroup_root` for each daemon the cluster runs, named as its log, and
    /// each daemon's executable out of the page cache, so that the daemon reading it is
    /// charged for it.
    pub(super) fn make_agent_cgroups(&mut self) {
        let Some((mount, v2)) = super::agent_cgroups::memory_mount() else {
            eprintln!("no memory cgroup controller: the daemons run in the suite's cgroup");
            return;
        };
        let mut names = vec!["kubelet", "crustlet", "crustlet-crustd"];
        let mut exes = vec![
            self.bins.kubelet.clone(),
            self.crustlet_bin.clone(),
            self.crustd_bin.clone(),
        ];
        if self.opts.containerd != Some(ContainerdFor::Kubelet) {
            names.push("crustd");
        }
        if self.opts.containerd.is_some() {
            names.push("containerd");
            exes.extend(
                ["containerd", "containerd-shim-runc-v2", "runc"]
                    .iter()
                    .filter_map(|t| which(t)),
            );
        }
        if self.opts.containerd == Some(ContainerdFor::Crustlet) {
            names.push("ctrdlet");
        }
        for name in names {
            let path = format!("{}/{name}", self.agents_cgroup_root);
            let dir = super::agent_cgroups::make(&mount, v2, &path, &mut self.made_cgroups);
            self.agent_cgroups.push((name.to_string(), dir));
        }
        for exe in exes {
            super::agent_cgroups::uncache(&exe);
        }
    }

    /// The memory cgroup of the daemon whose log is `name` (`kubelet`, `crustlet`,
    /// `crustlet-crustd`, `containerd`, ...), with
    /// [`Options::agent_cgroups`](super::Options::agent_cgroups).
    pub fn agent_cgroup(&self, name: &str) -> Option<&Path> {
        self.agent_cgroups
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, d)| d.as_path())
    }

    /// Every cgroup directory at or below the cluster's cgroup roots, deepest first.
    pub(super) fn cgroup_dirs(&self) -> Vec<PathBuf> {
        let mut out = Vec::new();
        for (_, mount) in cgroup_mounts() {
            for root in [
                &self.cgroup_root,
                &self.crustlet_cgroup_root,
                &self.containerd_cgroup_root,
                &self.agents_cgroup_root,
            ] {
                let d = mount.join(root.trim_start_matches('/'));
                crate::crustd::walk_dirs(&d, &mut out);
            }
        }
        out.sort_by_key(|d| std::cmp::Reverse(d.components().count()));
        out
    }

    /// Every cgroup directory at or below `root` (a cgroup path, the crustlet's root
    /// say), in every hierarchy: what a node agent made for its pods and left.
    pub fn cgroups_below(&self, root: &str) -> Vec<PathBuf> {
        let mut out = Vec::new();
        for (_, mount) in cgroup_mounts() {
            crate::crustd::walk_dirs(&mount.join(root.trim_start_matches('/')), &mut out);
        }
        out
    }

    /// The directory named `name` below the kubelet's cgroup root in the v1 hierarchy of
    /// `controller` (or the unified one for `""`).
    pub fn cgroup_dir_named(&self, controller: &str, name: &str) -> Option<PathBuf> {
        self.cgroup_dir_named_under(&self.cgroup_root, controller, name)
    }

    /// The same below `root` (the crustlet's cgroup root, say).
    pub fn cgroup_dir_named_under(
        &self,
        root: &str,
        controller: &str,
        name: &str,
    ) -> Option<PathBuf> {
        let (_, mount) = cgroup_mounts().into_iter().find(|(c, _)| {
            if controller.is_empty() {
                c.is_empty()
            } else {
                c.split(',').any(|x| x == controller)
            }
        })?;
        let mut all = Vec::new();
        crate::crustd::walk_dirs(&mount.join(root.trim_start_matches('/')), &mut all);
        all.into_iter()
            .find(|d| d.file_name().is_some_and(|n| n == name))
    }
}
