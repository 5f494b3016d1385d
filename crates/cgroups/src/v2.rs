//! cgroup v2: one unified tree. Creating a cgroup enables the controllers a pod needs in
//! each ancestor's `cgroup.subtree_control` (the leaf itself holds processes, so it gets
//! none: "no internal processes").

use crate::controller::{cpu, cpuset, hugetlb, io, memory, pids};
use crate::error::{Error, Result};
use crate::freezer::{Freezer, FREEZE_TIMEOUT};
use crate::kill::kill_v2;
use crate::path::CgroupPath;
use crate::{fs, CgroupManager, Resources, Stats, Version};
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

    /// cpuset, memory, cpu, pids, hugetlb, then the `unified` map, so that it overrides
    /// what the fields above wrote. A limit for a controller the parent did not enable
    /// (not delegated: the cgroup has none of its files) is [`Error::Unsupported`]
    /// naming the controller, as is a `unified` key of such a controller (runc refuses
    /// both too); a limit a controller does not ask for writes nothing.
    fn apply(&self, path: &CgroupPath, r: &Resources) -> Result<()> {
        let dir = path.dir_under(&self.root);
        // Unreadable (the cgroup does not exist): each write below fails naming its file.
        let listed = std::fs::read_to_string(dir.join("cgroup.controllers"))
            .ok()
            .map(|t| fs::controller_set(&t));
        let need = |controller: &str, wanted: bool| -> Result<()> {
            match &listed {
                Some(l) if wanted && !l.iter().any(|c| c == controller) => {
                    Err(not_enabled(path, &dir, controller))
                }
                _ => Ok(()),
            }
        };
        need("cpuset", r.has_cpuset())?;
        cpuset::apply(&dir, r)?;
        need("memory", r.has_memory())?;
        memory::apply_v2(&dir, r)?;
        need("cpu", r.has_cpu())?;
        cpu::apply_v2(&dir, r)?;
        need("pids", r.pids_limit.is_some())?;
        pids::apply(&dir, r)?;
        need("hugetlb", !r.hugepage_limits.is_empty())?;
        hugetlb::apply(&dir, r, hugetlb::V2)?;
        for (file, value) in &r.unified {
            let ok = !file.is_empty()
                && file.contains('.')
                && !file.contains(['/', '\0'])
                && !file.starts_with('.');
            if !ok {
                return Err(Error::Limit {
                    path: dir.join(file),
                    value: value.clone(),
                    reason: format!("{file:?} is not a cgroup control file name"),
                });
            }
            match fs::set(&dir.join(file), value) {
                Err(e) if matches!(e.errno(), Some(libc::ENOENT | libc::EACCES | libc::EPERM)) => {
                    // As runc: a key of a controller the cgroup lacks says so.
                    let controller = file.split('.').next().unwrap_or_default();
                    let lacks = listed
                        .as_ref()
                        .is_some_and(|l| !l.iter().any(|c| c == controller));
                    if lacks && controller != "cgroup" {
                        return Err(not_enabled(path, &dir, controller));
                    }
                    return Err(e);
                }
                r => r?,
            }
        }
        Ok(())
    }

    fn has_controller(&self, controller: &str, path: &CgroupPath) -> bool {
        let file = path.dir_under(&self.root).join("cgroup.controllers");
        fs::lists_controller(&file, controller) == Some(true)
    }

    fn hugetlb_unavailable(&self, below: &CgroupPath) -> Option<String> {
        let dir = fs::nearest_existing(&below.dir_under(&self.root), &self.root);
        let file = dir.join("cgroup.controllers");
        match fs::lists_controller(&file, "hugetlb") {
            Some(true) => None,
            Some(false) => Some(format!(
                "the cgroup v2 hierarchy does not delegate hugetlb to {} (not in {})",
                dir.display(),
                file.display()
            )),
            None => Some(format!("cannot read {}", file.display())),
        }
    }

    fn stats(&self, path: &CgroupPath) -> Result<Stats> {
        let dir = path.dir_under(&self.root);
        Ok(Stats {
            cpu: cpu::stats_v2(&dir)?,
            memory: memory::stats_v2(&dir)?.unwrap_or_default(),
            pids: pids::stats(&dir)?,
            io: io::stats_v2(&dir)?,
        })
    }

    fn oom_kills(&self, path: &CgroupPath) -> Result<u64> {
        memory::oom_kills_v2(&path.dir_under(&self.root))
    }

    fn freeze(&self, path: &CgroupPath) -> Result<()> {
        Freezer::V2(path.dir_under(&self.root)).freeze(FREEZE_TIMEOUT)
    }

    fn thaw(&self, path: &CgroupPath) -> Result<()> {
        Freezer::V2(path.dir_under(&self.root)).thaw()
    }
}

/// The error for a limit of `controller` in a cgroup whose parent did not enable it.
fn not_enabled(path: &CgroupPath, dir: &Path, controller: &str) -> Error {
    let parent = dir.parent().unwrap_or(dir).join("cgroup.subtree_control");
    Error::Unsupported {
        cgroup: path.to_string(),
        reason: format!(
            "no {controller} controller: {} does not enable it (not delegated)",
            parent.display()
        ),
    }
}

/// Errors of a `subtree_control` write that mean "not this controller here": EBUSY
/// (the level has processes), EINVAL / ENOTSUP (cannot be enabled), ENOENT (not
/// available here; a missing file instead means a missing cgroup, not skippable),
/// EACCES / EPERM / EROFS (a level delegated to us without its `subtree_control`, or
/// mounted read-only). runc goes on past all of these too: only a limit for a
/// controller that ended up missing fails, in `apply`, naming it.
fn skippable(control: &Path, e: &Error) -> bool {
    matches!(
        e.errno(),
        Some(
            libc::EBUSY
                | libc::EINVAL
                | libc::ENOTSUP
                | libc::ENOENT
                | libc::EACCES
                | libc::EPERM
                | libc::EROFS
        )
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

    #[test]
    fn apply_writes_unified_last() {
        let t = Tree::new();
        let h = host(&t, "cpuset cpu memory pids hugetlb");
        let cg = p("/pod/c");
        h.create(&cg).unwrap();
        t.write("pod/c/memory.swap.max", "max\n");
        t.writes();
        let mut r = Resources {
            cpu_shares: Some(1024),
            cpu_quota: Some(25_000),
            cpu_period: Some(100_000),
            cpuset_cpus: Some("0-1".into()),
            cpuset_mems: Some("0".into()),
            memory_limit: Some(64 << 20),
            memory_swap_limit: Some(128 << 20),
            pids_limit: Some(42),
            hugepage_limits: [("2MB".to_string(), 4 << 20)].into(),
            ..Default::default()
        };
        r.unified.insert("memory.high".into(), "50000000".into());
        r.unified.insert("cpu.weight".into(), "300".into());
        h.apply(&cg, &r).unwrap();
        assert_eq!(
            t.writes(),
            [
                "pod/c/cpuset.cpus=0-1",
                "pod/c/cpuset.mems=0",
                "pod/c/memory.swap.max=67108864",
                "pod/c/memory.max=67108864",
                "pod/c/cpu.weight=39",
                "pod/c/cpu.max=25000 100000",
                "pod/c/pids.max=42",
                "pod/c/hugetlb.2MB.max=4194304",
                "pod/c/cpu.weight=300",
                "pod/c/memory.high=50000000",
            ]
        );
        assert_eq!(t.read("pod/c/cpu.weight"), "300", "unified wins");
        for bad in ["../cgroup.procs", "", "x/memory.max", ".hidden"] {
            let r = Resources {
                unified: [(bad.to_string(), "1".to_string())].into(),
                ..Default::default()
            };
            let e = h.apply(&cg, &r).unwrap_err();
            assert!(
                e.to_string().contains("not a cgroup control file name"),
                "{e}"
            );
        }
    }

    /// A controller the parent did not enable (not delegated): limits for it are
    /// refused naming it and the parent's `subtree_control`, unified keys of it too
    /// (as runc); limits of other controllers, and unset ones, still go through.
    #[test]
    fn not_delegated_controllers() {
        let t = Tree::new();
        let h = host(&t, "cpu memory pids");
        let cg = p("/pod/c");
        h.create(&cg).unwrap();
        // What the kernel shows in the leaf: what pod/ enabled.
        t.write("pod/c/cgroup.controllers", "cpu memory pids\n");
        t.writes();
        let r = Resources {
            cpu_shares: Some(2),
            cpu_period: Some(100_000),
            memory_limit: Some(64 << 20),
            ..Default::default()
        };
        h.apply(&cg, &r).unwrap();
        assert_eq!(
            t.writes(),
            [
                "pod/c/memory.max=67108864",
                "pod/c/cpu.weight=1",
                "pod/c/cpu.max=max 100000"
            ]
        );
        assert!(h.has_controller("memory", &cg));
        assert!(!h.has_controller("hugetlb", &cg));
        assert!(!h.has_controller("cpuset", &p("/gone")));
        let hp = Resources {
            hugepage_limits: [("2MB".to_string(), 0)].into(),
            ..Default::default()
        };
        let cpuset = Resources {
            cpuset_cpus: Some("0".into()),
            ..Default::default()
        };
        for (r, controller) in [(hp, "hugetlb"), (cpuset, "cpuset")] {
            let e = h.apply(&cg, &r).unwrap_err();
            assert!(matches!(e, Error::Unsupported { .. }), "{e}");
            assert_eq!(
                e.to_string(),
                format!(
                    "cgroup /pod/c: no {controller} controller: {} does not enable it (not \
                     delegated)",
                    t.path("pod/cgroup.subtree_control").display()
                )
            );
        }
        assert_eq!(t.writes(), Vec::<String>::new());
        // A unified key: written when the file is there, refused naming the controller
        // when the controller is missing. Fake trees create the files they write, so a
        // link into a missing directory stands in for the kernel's missing file.
        let r = Resources {
            unified: [("memory.high".to_string(), "1000000".to_string())].into(),
            ..Default::default()
        };
        h.apply(&cg, &r).unwrap();
        assert_eq!(t.writes(), ["pod/c/memory.high=1000000"]);
        let io = Resources {
            unified: [("io.weight".to_string(), "default 100".to_string())].into(),
            ..Default::default()
        };
        std::os::unix::fs::symlink(t.path("missing/io.weight"), t.path("pod/c/io.weight")).unwrap();
        let e = h.apply(&cg, &io).unwrap_err();
        assert!(matches!(e, Error::Unsupported { .. }), "{e}");
        assert!(e.to_string().contains("no io controller"), "{e}");
        // A missing file of a controller the cgroup has is the write's own error.
        std::os::unix::fs::symlink(t.path("missing/memory.low"), t.path("pod/c/memory.low"))
            .unwrap();
        let low = Resources {
            unified: [("memory.low".to_string(), "1".to_string())].into(),
            ..Default::default()
        };
        let e = h.apply(&cg, &low).unwrap_err();
        assert_eq!(e.errno(), Some(libc::ENOENT), "{e}");
        assert!(e.to_string().contains("memory.low"), "{e}");
    }

    /// A `subtree_control` the kernel will not let us write (read-only mount, a
    /// delegation that keeps it) leaves the controller off instead of failing the
    /// cgroup, as runc goes on; a missing file (no such cgroup) still fails.
    #[test]
    fn refused_subtree_control_is_skipped() {
        let t = Tree::new();
        t.write("cgroup.subtree_control", "");
        let control = t.path("cgroup.subtree_control");
        for errno in [libc::EROFS, libc::EACCES, libc::EPERM, libc::EBUSY] {
            let e = Error::io(
                crate::Op::Write,
                &control,
                std::io::Error::from_raw_os_error(errno),
            );
            assert!(skippable(&control, &e), "{errno}");
        }
        let e = Error::io(
            crate::Op::Write,
            t.path("gone/cgroup.subtree_control"),
            std::io::Error::from_raw_os_error(libc::EROFS),
        );
        assert!(!skippable(&t.path("gone/cgroup.subtree_control"), &e));
        let e = Error::io(
            crate::Op::Write,
            &control,
            std::io::Error::from_raw_os_error(libc::EIO),
        );
        assert!(!skippable(&control, &e));
    }

    /// Whether pods below a root get hugetlb: what the root's parent delegated.
    #[test]
    fn hugetlb_on_the_node() {
        let t = Tree::new();
        let h = host(&t, "cpu memory pids hugetlb\n");
        assert_eq!(h.hugetlb_unavailable(&p("/")), None);
        assert_eq!(h.hugetlb_unavailable(&p("/kubepods/not/yet")), None);
        t.write("cgroup.controllers", "cpu memory\n");
        let why = h.hugetlb_unavailable(&p("/kubepods")).unwrap();
        assert!(why.contains("does not delegate hugetlb"), "{why}");
        assert!(why.contains("cgroup.controllers"), "{why}");
        let gone = Hierarchy::with_roots(Roots::V2(t.path("nope")));
        assert!(gone.hugetlb_unavailable(&p("/")).is_some());
    }

    #[test]
    fn stats_oom_kills_and_freeze() {
        let t = Tree::new();
        let h = host(&t, "cpu memory pids");
        let cg = p("/c");
        h.create(&cg).unwrap();
        t.write("c/cpu.stat", "usage_usec 20\nuser_usec 15\nsystem_usec 5\n");
        t.write("c/memory.current", "8192\n");
        t.write("c/memory.max", "16777216\n");
        t.write(
            "c/memory.stat",
            "anon 4096\nfile 4096\ninactive_file 1024\n",
        );
        t.write("c/memory.events", "oom 1\noom_kill 1\n");
        t.write("c/pids.current", "1\n");
        t.write("c/pids.max", "5\n");
        t.write("c/cgroup.events", "populated 1\nfrozen 1\n");
        t.write(
            "c/io.stat",
            "8:0 rbytes=1 wbytes=2 rios=3 wios=4 dbytes=0 dios=0\n",
        );
        let s = h.stats(&cg).unwrap();
        assert_eq!(s.cpu.usage_ns, 20_000);
        assert_eq!((s.io.len(), s.io[0].read_bytes, s.io[0].writes), (1, 1, 4));
        assert_eq!((s.memory.usage, s.memory.working_set), (8192, 7168));
        assert_eq!((s.memory.limit, s.memory.oom_kills), (Some(16 << 20), 1));
        assert_eq!((s.pids.current, s.pids.limit), (1, Some(5)));
        assert_eq!(h.oom_kills(&cg).unwrap(), 1);
        h.freeze(&cg).unwrap();
        assert_eq!(t.read("c/cgroup.freeze"), "1");
        h.thaw(&cg).unwrap();
        assert_eq!(t.read("c/cgroup.freeze"), "0");
        // Without the memory controller: zero memory stats, but an oom_kills error.
        t.mkdir("bare");
        t.write("bare/cpu.stat", "usage_usec 1\n");
        let s = h.stats(&p("/bare")).unwrap();
        assert_eq!(s.memory, Default::default());
        assert!(h.oom_kills(&p("/bare")).is_err());
    }
}
