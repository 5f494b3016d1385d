//! cgroup v2: one unified tree. Creating a cgroup enables the controllers a pod needs in
//! each ancestor's `cgroup.subtree_control` (the leaf itself holds processes, so it gets
//! none: "no internal processes").

use crate::error::{Error, Result};
use crate::kill::kill_v2;
use crate::path::CgroupPath;
use crate::{fs, CgroupManager, Version};
use std::path::{Path, PathBuf};

/// The controllers enabled down to a pod's cgroup, those of them the host has.
pub const CONTROLLERS: &[&str] = &["cpu", "cpuset", "io", "memory", "pids", "hugetlb"];

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Manager {
    root: PathBuf,
    base: CgroupPath,
}

impl Manager {
    /// `root` is the directory cgroup path `/` maps to; `base` is which cgroup that is,
    /// as `/proc/PID/cgroup` names it.
    pub fn new(root: PathBuf, base: CgroupPath) -> Manager {
        Manager { root, base }
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    pub fn base(&self) -> &CgroupPath {
        &self.base
    }
}

impl CgroupManager for Manager {
    fn version(&self) -> Version {
        Version::V2
    }

    fn dirs(&self, path: &CgroupPath) -> Vec<PathBuf> {
        vec![path.dir_under(&self.root)]
    }

    fn dir(&self, _controller: &str, path: &CgroupPath) -> Option<PathBuf> {
        Some(path.dir_under(&self.root))
    }

    /// `mkdir -p`, enabling at each level above the leaf the [`CONTROLLERS`] that level
    /// has (its `cgroup.controllers`, which is its parent's `subtree_control`) but has not
    /// yet enabled. EBUSY, EINVAL and ENOTSUP (a level with processes, a controller that
    /// cannot be enabled there) are logged and skipped.
    fn create(&self, path: &CgroupPath) -> Result<()> {
        let dirs = path.dirs_from_root(&self.root);
        let mut available = fs::controller_set(&fs::read(&self.root.join("cgroup.controllers"))?);
        for pair in dirs.windows(2) {
            let (dir, child) = (&pair[0], &pair[1]);
            let control = dir.join("cgroup.subtree_control");
            let mut enabled = fs::controller_set(&fs::read_opt(&control)?.unwrap_or_default());
            let want: Vec<&str> = CONTROLLERS
                .iter()
                .copied()
                .filter(|c| available.iter().any(|a| a == c) && !enabled.iter().any(|e| e == c))
                .collect();
            if !want.is_empty() {
                enabled.extend(enable(&control, &want)?);
            }
            // What this level enabled is what the child level has.
            available = enabled;
            fs::mkdir(child)?;
        }
        Ok(())
    }

    fn add_process(&self, path: &CgroupPath, pid: i32) -> Result<()> {
        fs::add_process(&self.dirs(path), pid)
    }

    fn procs(&self, path: &CgroupPath) -> Result<Vec<i32>> {
        fs::union_procs(&self.dirs(path))
    }

    fn exists(&self, path: &CgroupPath) -> bool {
        path.dir_under(&self.root).is_dir()
    }

    fn kill_all(&self, path: &CgroupPath) -> Result<()> {
        if path.is_root() {
            return Err(Error::RootCgroup { op: "kill all" });
        }
        let dir = path.dir_under(&self.root);
        if !dir.is_dir() {
            return Ok(());
        }
        kill_v2(&dir)
    }

    fn remove(&self, path: &CgroupPath) -> Result<()> {
        if path.is_root() {
            return Err(Error::RootCgroup { op: "remove" });
        }
        fs::rmdir(&path.dir_under(&self.root))
    }
}

/// Errors of a `subtree_control` write that mean "not this controller here": EBUSY
/// (the level has processes), EINVAL / ENOTSUP (cannot be enabled), ENOENT (not
/// available here; a missing file instead means a missing cgroup, not skippable).
fn skippable(control: &Path, e: &Error) -> bool {
    matches!(
        e.errno(),
        Some(libc::EBUSY | libc::EINVAL | libc::ENOTSUP | libc::ENOENT)
    ) && control.exists()
}

/// Writes `+c` for every controller in one write; when the kernel refuses that, one at a
/// time, logging the ones it refuses. Returns the ones enabled.
fn enable(control: &Path, want: &[&str]) -> Result<Vec<String>> {
    let all = want
        .iter()
        .map(|c| format!("+{c}"))
        .collect::<Vec<_>>()
        .join(" ");
    match fs::write(control, &all) {
        Ok(()) => return Ok(want.iter().map(|c| c.to_string()).collect()),
        Err(e) if skippable(control, &e) => {}
        Err(e) => return Err(e),
    }
    let mut enabled = Vec::new();
    for c in want {
        match fs::write(control, &format!("+{c}")) {
            Ok(()) => enabled.push(c.to_string()),
            Err(e) if skippable(control, &e) => {
                tracing::warn!(error = %e, controller = c, "cannot enable cgroup controller");
            }
            Err(e) => return Err(e),
        }
    }
    Ok(enabled)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fs::testutil::{p, Tree};
    use crate::{Hierarchy, Roots};

    fn host(t: &Tree, controllers: &str) -> Hierarchy {
        t.write("cgroup.controllers", controllers);
        t.write("cgroup.subtree_control", "");
        Hierarchy::with_roots(Roots::V2(t.0.clone()))
    }

    #[test]
    fn path_mapping() {
        let t = Tree::new();
        let h = host(&t, "cpu memory");
        let pod = p("/kubepods/pod1/sb");
        assert_eq!(h.version(), Version::V2);
        assert_eq!(h.dirs(&pod), vec![t.path("kubepods/pod1/sb")]);
        assert_eq!(h.dir("memory", &pod), Some(t.path("kubepods/pod1/sb")));
    }

    #[test]
    fn create_enables_controllers_in_ancestors() {
        let t = Tree::new();
        // No io, and rdma which is not wanted.
        let h = host(&t, "cpuset cpu memory pids hugetlb rdma\n");
        let pod = p("/kubepods/pod1/sb");
        h.create(&pod).unwrap();
        let all = "+cpu +cpuset +memory +pids +hugetlb";
        assert_eq!(t.read("cgroup.subtree_control"), all);
        assert_eq!(t.read("kubepods/cgroup.subtree_control"), all);
        assert_eq!(t.read("kubepods/pod1/cgroup.subtree_control"), all);
        assert!(t.path("kubepods/pod1/sb").is_dir());
        assert!(
            !t.exists("kubepods/pod1/sb/cgroup.subtree_control"),
            "not the leaf"
        );
    }

    #[test]
    fn only_missing_controllers_are_written() {
        let t = Tree::new();
        let h = host(&t, "cpu memory pids");
        // The kernel's own format: names without `+`.
        t.write("cgroup.subtree_control", "cpu memory pids\n");
        t.write("kubepods/cgroup.controllers", "cpu memory pids\n");
        t.write("kubepods/cgroup.subtree_control", "memory\n");
        let pod = p("/kubepods/sb");
        h.create(&pod).unwrap();
        assert_eq!(t.read("cgroup.subtree_control"), "cpu memory pids\n");
        assert_eq!(t.read("kubepods/cgroup.subtree_control"), "+cpu +pids");
        // Idempotent: a second create (kernel format again) writes nothing.
        t.write("kubepods/cgroup.subtree_control", "cpu memory pids\n");
        h.create(&pod).unwrap();
        h.create(&pod).unwrap();
        assert_eq!(
            t.read("kubepods/cgroup.subtree_control"),
            "cpu memory pids\n"
        );
    }

    #[test]
    fn add_procs_kill_remove() {
        let t = Tree::new();
        let h = host(&t, "cpu");
        let pod = p("/pod");
        h.kill_all(&pod).unwrap();
        h.create(&pod).unwrap();
        h.add_process(&pod, 7).unwrap();
        assert_eq!(h.procs(&pod).unwrap(), vec![7]);
        t.write("pod/cgroup.procs", "");
        t.write("pod/cgroup.kill", "");
        h.kill_all(&pod).unwrap();
        assert_eq!(t.read("pod/cgroup.kill"), "1");
        std::fs::remove_file(t.path("pod/cgroup.procs")).unwrap();
        std::fs::remove_file(t.path("pod/cgroup.kill")).unwrap();
        h.remove(&pod).unwrap();
        h.remove(&pod).unwrap();
        assert!(!h.exists(&pod));
        assert!(matches!(
            h.remove(&CgroupPath::root()),
            Err(Error::RootCgroup { .. })
        ));
    }

    #[test]
    fn missing_root_names_the_file() {
        let t = Tree::new();
        let h = Hierarchy::with_roots(Roots::V2(t.path("nope")));
        let e = h.create(&p("/a")).unwrap_err();
        assert_eq!(
            e.to_string(),
            format!(
                "read {}: No such file or directory (os error 2)",
                t.path("nope/cgroup.controllers").display()
            )
        );
    }
}
