//! cgroups for crust's pods and containers, cgroupfs driver: one [`CgroupManager`]
//! interface over cgroup v2 ([`v2::Manager`]) and v1 ([`v1::Manager`]), picked from what
//! the host mounts by [`Hierarchy::detect`].
//!
//! A cgroup is named by a [`CgroupPath`] relative to the hierarchy root(s), such as the
//! kubelet's cgroupfs `cgroup_parent` plus a child for the sandbox:
//! `/kubepods/burstable/pod123/<sandbox-id>`. A pod sandbox's life:
//!
//! ```text
//! create(path) ── add_process(path, pause) ── procs(path) ── kill_all(path) ── remove(path)
//! ```
//!
//! Every step is idempotent. `remove` only removes the leaf, never an ancestor: the
//! levels above it (the kubelet's `/kubepods/...` and pod cgroups) belong to whoever
//! made them, and a caller that made one removes it with its own `remove` call, child
//! first. `remove` does not kill: call `kill_all` first.
//!
//! Limits are a [`Resources`] given to `apply` (any time after `create`, again for an
//! update); `stats` and `oom_kills` read what the cgroup used; `freeze` and `thaw` stop
//! and resume every task in it. Each controller's files are in its own module under
//! `controller/`, v1 and v2 side by side.

mod controller;
mod detect;
mod error;
mod freezer;
mod fs;
mod kill;
mod path;
mod proc_cgroup;
mod resources;
mod stats;
pub mod systemd;
pub mod v1;
pub mod v2;

pub use error::{Error, Op, Result};
pub use path::CgroupPath;
pub use proc_cgroup::{cgroup_in_text, cgroup_of, own_cgroup};
pub use resources::{
    shares_to_weight, weight_to_shares, Resources, MAX_SHARES, MAX_WEIGHT, MIN_MEMORY_LIMIT,
    MIN_SHARES, MIN_WEIGHT,
};
pub use stats::{CpuStats, DeviceIo, MemoryStats, PidsStats, Stats};

use std::path::{Path, PathBuf};

/// Which cgroup version a hierarchy is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Version {
    V1,
    V2,
}

/// What a cgroup driver does with one cgroup. Implemented by [`v1::Manager`],
/// [`v2::Manager`] and, dispatching to them, [`Hierarchy`].
pub trait CgroupManager {
    fn version(&self) -> Version;

    /// The cgroup's directory in every hierarchy (one on v2; on v1 one per mounted
    /// hierarchy, co-mounted controllers once, then the hybrid cgroup2 mount if any).
    fn dirs(&self, path: &CgroupPath) -> Vec<PathBuf>;

    /// The cgroup's directory in the hierarchy of `controller` (v1; `""` is the hybrid
    /// cgroup2 mount), or its only directory (v2). `None` when v1 lacks the controller.
    fn dir(&self, controller: &str, path: &CgroupPath) -> Option<PathBuf>;

    /// Makes the cgroup and any missing ancestor in every hierarchy, ready to take
    /// processes (v1: cpuset filled in; v2: controllers enabled down to it).
    fn create(&self, path: &CgroupPath) -> Result<()>;

    /// Moves the process `pid` (all its threads) into the cgroup in every hierarchy.
    fn add_process(&self, path: &CgroupPath, pid: i32) -> Result<()> {
        fs::add_process(&self.dirs(path), pid)
    }

    /// The pids in the cgroup (on v1 the union over the hierarchies), sorted; empty when
    /// it does not exist.
    fn procs(&self, path: &CgroupPath) -> Result<Vec<i32>> {
        fs::union_procs(&self.dirs(path))
    }

    /// The first process the caller started into the cgroup made by `create` is in it:
    /// whatever held the cgroup until then can go (the systemd driver's placeholder in
    /// a new scope; nothing for cgroupfs).
    fn joined(&self, _path: &CgroupPath) {}

    /// Whether the cgroup's directory exists in any hierarchy.
    fn exists(&self, path: &CgroupPath) -> bool;

    /// SIGKILLs every process in the cgroup and waits until none is left. Fine when the
    /// cgroup does not exist; refuses the root.
    fn kill_all(&self, path: &CgroupPath) -> Result<()>;

    /// Removes the cgroup's directory (only the leaf) in every hierarchy. Missing is fine;
    /// EBUSY (processes or child cgroups still inside) is retried briefly, then
    /// [`Error::Busy`] naming the directory. Refuses the root.
    fn remove(&self, path: &CgroupPath) -> Result<()>;

    /// Writes the limits `resources` names into the cgroup's control files, leaving the
    /// others alone (see [`Resources`] for the files; v2's `unified` map goes last). A
    /// limit the kernel refuses is an error naming the file and value
    /// ([`Error::Limit`] for a memory limit below [`MIN_MEMORY_LIMIT`] or, on v1, below
    /// what the cgroup uses). A limit needing a controller the cgroup lacks (v1: not
    /// mounted; v2: not enabled by the parent) is [`Error::Unsupported`]; a field left
    /// `None` asks nothing of its controller. Stops at the first error: earlier files keep
    /// their new values.
    fn apply(&self, path: &CgroupPath, resources: &Resources) -> Result<()>;

    /// Whether limits of `controller` can be written for the cgroup (made already): on
    /// v1 its hierarchy is mounted (hugetlb also counts when the hybrid cgroup2 mount
    /// has it enabled for this cgroup); on v2 the cgroup's `cgroup.controllers` lists it,
    /// that is its parent enabled it. Callers that may leave a limit out (hugepages on a
    /// node without hugetlb) ask this first instead of parsing [`Error::Unsupported`].
    fn has_controller(&self, controller: &str, path: &CgroupPath) -> bool;

    /// Why cgroups made below `below` (crust's cgroup root) will not have the hugetlb
    /// controller, or `None` when they will. Asked once at start, so that a node
    /// without it is reported once, not once per container: v1 needs a hugetlb
    /// hierarchy or the hybrid cgroup2 mount enabling hugetlb for `below`'s children
    /// (crust enables nothing there); v2 needs hugetlb in `below`'s `cgroup.controllers`
    /// (crust enables it further down itself). A `below` not made yet is judged by its
    /// nearest existing ancestor.
    fn hugetlb_unavailable(&self, below: &CgroupPath) -> Option<String>;

    /// What the cgroup used (CPU, memory, pids, block I/O); a controller it lacks reads
    /// as zero (no I/O entries).
    fn stats(&self, path: &CgroupPath) -> Result<Stats>;

    /// How many processes of the cgroup the OOM killer killed (v1
    /// `memory.oom_control`, v2 `memory.events`): the monitor's `OOMKilled` evidence.
    fn oom_kills(&self, path: &CgroupPath) -> Result<u64>;

    /// Freezes every task in the cgroup (and below) and waits until the kernel reports
    /// it frozen; when that takes too long, thaws again and fails with
    /// [`Error::FreezeTimeout`].
    fn freeze(&self, path: &CgroupPath) -> Result<()>;

    /// Resumes a frozen cgroup. Fine when it is not frozen.
    fn thaw(&self, path: &CgroupPath) -> Result<()>;
}

/// The host's cgroup hierarchy: v1 or v2.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Hierarchy {
    V1(v1::Manager),
    V2(v2::Manager),
}

/// The driver a daemon runs with: cgroupfs (crust makes the directories itself) or
/// systemd (units over D-Bus, see [`systemd`]).
#[derive(Debug)]
pub enum Driver {
    Cgroupfs(Hierarchy),
    Systemd(Box<systemd::Manager>),
}

impl Driver {
    fn inner(&self) -> &dyn CgroupManager {
        match self {
            Driver::Cgroupfs(h) => h,
            Driver::Systemd(m) => m.as_ref(),
        }
    }

    pub fn is_systemd(&self) -> bool {
        matches!(self, Driver::Systemd(_))
    }
}

/// Hierarchy roots for [`Hierarchy::with_roots`] (fake trees in tests, or a layout known
/// in advance).
#[derive(Debug, Clone)]
pub enum Roots {
    /// The directory of the unified hierarchy's root.
    V2(PathBuf),
    /// Each mounted v1 hierarchy as its controllers (comma-separated, `"cpu,cpuacct"`
    /// when co-mounted) and directory, and the hybrid cgroup2 mount if any.
    V1 {
        hierarchies: Vec<(String, PathBuf)>,
        hybrid: Option<PathBuf>,
    },
}

impl Hierarchy {
    /// Detects the layout of this host from `/proc/self/mountinfo`: v2 when
    /// `/sys/fs/cgroup` is a cgroup2 mount with controllers, else the v1 controllers
    /// mounted (with the hybrid cgroup2 mount, e.g. `/sys/fs/cgroup/unified`, beside them).
    pub fn detect() -> Result<Hierarchy> {
        let file = Path::new("/proc/self/mountinfo");
        let text = fs::read(file)?;
        Hierarchy::from_mountinfo(&text, file, Path::new("/sys/fs/cgroup"))
    }

    /// Like [`Hierarchy::detect`] over the given mountinfo text (`file` names it in
    /// errors), with `cgroup_dir` in place of `/sys/fs/cgroup`.
    pub fn from_mountinfo(mountinfo: &str, file: &Path, cgroup_dir: &Path) -> Result<Hierarchy> {
        detect::detect(mountinfo, file, cgroup_dir)
    }

    /// A hierarchy over the given directories, each the root cgroup `/`.
    pub fn with_roots(roots: Roots) -> Hierarchy {
        match roots {
            Roots::V2(dir) => Hierarchy::V2(v2::Manager::new(dir, CgroupPath::root())),
            Roots::V1 {
                hierarchies,
                hybrid,
            } => {
                let root = |controllers: Vec<String>, dir| v1::Root {
                    controllers,
                    dir,
                    base: CgroupPath::root(),
                };
                let roots = hierarchies
                    .into_iter()
                    .map(|(c, dir)| {
                        let names = c.split(',').filter(|c| !c.is_empty());
                        root(names.map(str::to_string).collect(), dir)
                    })
                    .collect();
                Hierarchy::V1(v1::Manager::new(roots, hybrid.map(|d| root(vec![], d))))
            }
        }
    }

    /// This hierarchy re-rooted at the calling process's own cgroup in each hierarchy
    /// (v1 per controller), so that `/` is where this process is and every path nests
    /// below it: the daemon's default root, and how tests stay inside their own cgroup.
    pub fn nested_in_own_cgroup(&self) -> Result<Hierarchy> {
        let file = Path::new("/proc/self/cgroup");
        self.nested_in(&fs::read(file)?, file)
    }

    /// Like [`Hierarchy::nested_in_own_cgroup`] for the text of a `/proc/PID/cgroup`
    /// (`file` names it in errors).
    pub fn nested_in(&self, proc_cgroup: &str, file: &Path) -> Result<Hierarchy> {
        let lookup = |controller: &str, base: &CgroupPath, dir: &Path| {
            let own = cgroup_in_text(proc_cgroup, file, controller)?;
            // `/proc/PID/cgroup` names cgroups from the top; a mount may show a subtree.
            let rel = own.strip_prefix(base).unwrap_or_else(|| own.clone());
            Ok((rel.dir_under(dir), own))
        };
        Ok(match self {
            Hierarchy::V1(m) => Hierarchy::V1(m.map_roots(|r| {
                let first = r.controllers.first().map(String::as_str).unwrap_or("");
                let (dir, base) = lookup(first, &r.base, &r.dir)?;
                Ok(v1::Root {
                    controllers: r.controllers.clone(),
                    dir,
                    base,
                })
            })?),
            Hierarchy::V2(m) => {
                let (dir, base) = lookup("", m.base(), m.root())?;
                Hierarchy::V2(v2::Manager::new(dir, base))
            }
        })
    }

    fn inner(&self) -> &dyn CgroupManager {
        match self {
            Hierarchy::V1(m) => m,
            Hierarchy::V2(m) => m,
        }
    }
}

/// `CgroupManager` for a type whose `inner()` picks the manager that does the work.
macro_rules! dispatch_to_inner {
    ($t:ty) => {
        impl CgroupManager for $t {
            fn version(&self) -> Version {
                self.inner().version()
            }
            fn dirs(&self, path: &CgroupPath) -> Vec<PathBuf> {
                self.inner().dirs(path)
            }
            fn dir(&self, controller: &str, path: &CgroupPath) -> Option<PathBuf> {
                self.inner().dir(controller, path)
            }
            fn create(&self, path: &CgroupPath) -> Result<()> {
                self.inner().create(path)
            }
            fn joined(&self, path: &CgroupPath) {
                self.inner().joined(path)
            }
            fn add_process(&self, path: &CgroupPath, pid: i32) -> Result<()> {
                self.inner().add_process(path, pid)
            }
            fn procs(&self, path: &CgroupPath) -> Result<Vec<i32>> {
                self.inner().procs(path)
            }
            fn exists(&self, path: &CgroupPath) -> bool {
                self.inner().exists(path)
            }
            fn kill_all(&self, path: &CgroupPath) -> Result<()> {
                self.inner().kill_all(path)
            }
            fn remove(&self, path: &CgroupPath) -> Result<()> {
                self.inner().remove(path)
            }
            fn apply(&self, path: &CgroupPath, resources: &Resources) -> Result<()> {
                self.inner().apply(path, resources)
            }
            fn has_controller(&self, controller: &str, path: &CgroupPath) -> bool {
                self.inner().has_controller(controller, path)
            }
            fn hugetlb_unavailable(&self, below: &CgroupPath) -> Option<String> {
                self.inner().hugetlb_unavailable(below)
            }
            fn stats(&self, path: &CgroupPath) -> Result<Stats> {
                self.inner().stats(path)
            }
            fn oom_kills(&self, path: &CgroupPath) -> Result<u64> {
                self.inner().oom_kills(path)
            }
            fn freeze(&self, path: &CgroupPath) -> Result<()> {
                self.inner().freeze(path)
            }
            fn thaw(&self, path: &CgroupPath) -> Result<()> {
                self.inner().thaw(path)
            }
        }
    };
}
dispatch_to_inner!(Hierarchy);
dispatch_to_inner!(Driver);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fs::testutil::{p, Tree};

    #[test]
    fn nested_in_own_cgroup_v1() {
        let t = Tree::new();
        let h = Hierarchy::with_roots(Roots::V1 {
            hierarchies: vec![
                ("cpu,cpuacct".into(), t.path("cpu,cpuacct")),
                ("memory".into(), t.path("memory")),
            ],
            hybrid: Some(t.path("unified")),
        });
        let proc = "4:memory:/process_api/c107\n2:cpu,cpuacct:/\n0::/u\n";
        let n = h.nested_in(proc, Path::new("/proc/self/cgroup")).unwrap();
        let pod = p("/x");
        assert_eq!(
            n.dir("memory", &pod),
            Some(t.path("memory/process_api/c107/x"))
        );
        assert_eq!(n.dir("cpuacct", &pod), Some(t.path("cpu,cpuacct/x")));
        assert_eq!(n.dir("", &pod), Some(t.path("unified/u/x")));
        let Hierarchy::V1(m) = &n else { unreachable!() };
        assert_eq!(m.roots()[1].base.to_string(), "/process_api/c107");
        // A controller missing from /proc/self/cgroup (and no 0:: line) is an error.
        let e = h
            .nested_in("4:memory:/m\n", Path::new("/proc/self/cgroup"))
            .unwrap_err();
        assert!(matches!(e, Error::NoCgroupFor { .. }), "{e}");
    }

    #[test]
    fn nested_in_own_cgroup_v2_with_mount_root() {
        let t = Tree::new();
        // A mount showing the subtree /kube (as in a container): own cgroup /kube/a/b
        // is the directory a/b under the mount.
        let h = Hierarchy::V2(v2::Manager::new(t.0.clone(), p("/kube")));
        let n = h.nested_in("0::/kube/a/b\n", Path::new("f")).unwrap();
        assert_eq!(n.dirs(&p("/x")), vec![t.path("a/b/x")]);
    }

    /// The real host: detection must work and must not mistake a hybrid cgroup2 mount
    /// with no (or few) controllers for a unified host.
    #[test]
    fn detect_this_host() {
        let h = match Hierarchy::detect() {
            Ok(h) => h,
            Err(e) => {
                eprintln!("no cgroups here: {e}");
                return;
            }
        };
        let sys_is_cgroup2 = std::fs::read_to_string("/proc/self/mountinfo")
            .unwrap()
            .lines()
            .any(|l| l.contains(" /sys/fs/cgroup ") && l.contains(" - cgroup2 "));
        if !sys_is_cgroup2 {
            assert_eq!(h.version(), Version::V1, "{h:?}");
        }
    }
}
