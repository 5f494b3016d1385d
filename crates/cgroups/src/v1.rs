//! cgroup v1: one hierarchy per controller (or per co-mounted group such as
//! `cpu,cpuacct`), each with its own directory tree. A cgroup path is created in every
//! hierarchy and a process is written to every hierarchy's `cgroup.procs`. On a hybrid
//! host the cgroup2 mount (`/sys/fs/cgroup/unified`) is joined as well, as runc does, so
//! `/proc/PID/cgroup`'s `0::` line shows the pod too; no controller is enabled there.

use crate::controller::{cpu, cpuset, hugetlb, io, memory, pids};
use crate::error::{Error, Result};
use crate::freezer::{Freezer, FREEZE_TIMEOUT};
use crate::kill::kill_loop;
use crate::path::CgroupPath;
use crate::{fs, CgroupManager, Resources, Stats, Version};
use std::path::{Path, PathBuf};

/// The v1 controllers a pod's cgroup is made in, when the host mounts them.
pub const CONTROLLERS: &[&str] = &[
    "cpu", "cpuacct", "cpuset", "memory", "pids", "blkio", "devices", "freezer", "hugetlb",
];

/// One mounted hierarchy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Root {
    /// The controllers mounted together here (`["cpu", "cpuacct"]`); empty for the
    /// hybrid cgroup2 mount.
    pub controllers: Vec<String>,
    /// The directory that cgroup path `/` maps to.
    pub dir: PathBuf,
    /// Which cgroup `dir` is, as `/proc/PID/cgroup` names it (the mount's root, or the
    /// process's own cgroup after [`crate::Hierarchy::nested_in`]).
    pub base: CgroupPath,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Manager {
    roots: Vec<Root>,
    hybrid: Option<Root>,
}

impl Manager {
    pub fn new(roots: Vec<Root>, hybrid: Option<Root>) -> Manager {
        Manager { roots, hybrid }
    }

    /// The controller hierarchies.
    pub fn roots(&self) -> &[Root] {
        &self.roots
    }

    /// The hybrid cgroup2 mount, if the host has one.
    pub fn hybrid(&self) -> Option<&Root> {
        self.hybrid.as_ref()
    }

    fn all_roots(&self) -> impl Iterator<Item = &Root> {
        self.roots.iter().chain(self.hybrid.iter())
    }

    fn root_of(&self, controller: &str) -> Option<&Root> {
        if controller.is_empty() {
            return self.hybrid.as_ref();
        }
        self.roots
            .iter()
            .find(|r| r.controllers.iter().any(|c| c == controller))
    }

    /// The cgroup's directory for `controller`, or [`Error::Unsupported`] when the host
    /// does not mount it.
    fn need(&self, controller: &str, path: &CgroupPath) -> Result<PathBuf> {
        self.dir(controller, path)
            .ok_or_else(|| Error::Unsupported {
                cgroup: path.to_string(),
                reason: format!("no cgroup v1 {controller} controller mounted"),
            })
    }

    /// hugetlb from the v1 hierarchy, else from the hybrid cgroup2 mount when the
    /// controller is enabled there for this cgroup (some hosts have it only there).
    fn apply_hugetlb(&self, path: &CgroupPath, r: &Resources) -> Result<()> {
        if let Some(dir) = self.dir("hugetlb", path) {
            return hugetlb::apply(&dir, r, hugetlb::V1);
        }
        match self.dir("", path) {
            Some(dir) if self.has_controller("hugetlb", path) => {
                hugetlb::apply(&dir, r, hugetlb::V2)
            }
            _ => Err(Error::Unsupported {
                cgroup: path.to_string(),
                reason: "no hugetlb controller (neither v1 nor on the hybrid cgroup2 mount)".into(),
            }),
        }
    }

    pub(crate) fn map_roots(&self, f: impl Fn(&Root) -> Result<Root>) -> Result<Manager> {
        Ok(Manager {
            roots: self.roots.iter().map(&f).collect::<Result<_>>()?,
            hybrid: self.hybrid.as_ref().map(&f).transpose()?,
        })
    }
}

impl CgroupManager for Manager {
    fn version(&self) -> Version {
        Version::V1
    }

    fn dirs(&self, path: &CgroupPath) -> Vec<PathBuf> {
        self.all_roots().map(|r| path.dir_under(&r.dir)).collect()
    }

    fn dir(&self, controller: &str, path: &CgroupPath) -> Option<PathBuf> {
        self.root_of(controller).map(|r| path.dir_under(&r.dir))
    }

    /// `mkdir -p` in every hierarchy; in `cpuset`, every level whose `cpuset.cpus` or
    /// `cpuset.mems` is empty gets its parent's (a cgroup with an empty cpuset cannot
    /// take tasks).
    ///
    /// Below the hierarchy's root, a cpuset parent gets `cgroup.clone_children` first,
    /// so the kernel gives a new child the parent's sets as it makes it: writing
    /// `cpuset.cpus` afterwards rebuilds the scheduler domains, half a millisecond per
    /// level here, of every pod's and container's start. The flag does nothing else
    /// (and is inherited), so setting it on a parent the kubelet made changes no more
    /// than the copy every v1 runtime makes by hand; the root's stays as the host has it.
    fn create(&self, path: &CgroupPath) -> Result<()> {
        for root in self.all_roots() {
            let cpuset = root.controllers.iter().any(|c| c == "cpuset");
            let dirs = path.dirs_from_root(&root.dir);
            for pair in dirs.windows(2) {
                if cpuset && pair[0] != root.dir && !pair[1].exists() {
                    clone_children(&pair[0]);
                }
                fs::mkdir(&pair[1])?;
                if cpuset {
                    copy_cpuset(&pair[0], &pair[1])?;
                }
            }
        }
        Ok(())
    }

    fn exists(&self, path: &CgroupPath) -> bool {
        self.dirs(path).iter().any(|d| d.is_dir())
    }

    fn kill_all(&self, path: &CgroupPath) -> Result<()> {
        if path.is_root() {
            return Err(Error::RootCgroup { op: "kill all" });
        }
        let dirs = self.dirs(path);
        let freezer = self.dir("freezer", path);
        let name = freezer.clone().or_else(|| dirs.first().cloned());
        let Some(name) = name else { return Ok(()) };
        kill_loop(&name, &dirs, freezer.map(Freezer::V1))
    }

    fn remove(&self, path: &CgroupPath) -> Result<()> {
        if path.is_root() {
            return Err(Error::RootCgroup { op: "remove" });
        }
        fs::rmdir_all(&self.dirs(path))
    }

    /// cpuset, memory, cpu, pids, hugetlb, each in its own hierarchy. The `unified` map
    /// is refused: v1 has no such files.
    fn apply(&self, path: &CgroupPath, r: &Resources) -> Result<()> {
        if let Some(key) = r.unified.keys().next() {
            return Err(Error::Unsupported {
                cgroup: path.to_string(),
                reason: format!("the unified map ({key:?}) needs cgroup v2"),
            });
        }
        if r.has_cpuset() {
            cpuset::apply(&self.need("cpuset", path)?, r)?;
        }
        if r.has_memory() {
            memory::apply_v1(&self.need("memory", path)?, r)?;
        }
        if r.has_cpu() {
            cpu::apply_v1(&self.need("cpu", path)?, r)?;
        }
        if r.pids_limit.is_some() {
            pids::apply(&self.need("pids", path)?, r)?;
        }
        if !r.hugepage_limits.is_empty() {
            self.apply_hugetlb(path, r)?;
        }
        Ok(())
    }

    fn has_controller(&self, controller: &str, path: &CgroupPath) -> bool {
        if self.root_of(controller).is_some() && !controller.is_empty() {
            return true;
        }
        // Only hugetlb is ever taken from the hybrid mount (see `apply_hugetlb`).
        controller == "hugetlb"
            && self.dir("", path).is_some_and(|d| {
                fs::lists_controller(&d.join("cgroup.controllers"), controller) == Some(true)
            })
    }

    fn hugetlb_unavailable(&self, below: &CgroupPath) -> Option<String> {
        if self.root_of("hugetlb").is_some() {
            return None;
        }
        let Some(hybrid) = &self.hybrid else {
            return Some(
                "no cgroup v1 hugetlb hierarchy is mounted and there is no cgroup2 mount \
                 beside the v1 ones"
                    .into(),
            );
        };
        let dir = fs::nearest_existing(&below.dir_under(&hybrid.dir), &hybrid.dir);
        let control = dir.join("cgroup.subtree_control");
        match fs::lists_controller(&control, "hugetlb") {
            Some(true) => None,
            _ => Some(format!(
                "no cgroup v1 hugetlb hierarchy is mounted and the cgroup2 mount does not \
                 enable hugetlb for the cgroups below {} (not in {})",
                dir.display(),
                control.display()
            )),
        }
    }

    fn stats(&self, path: &CgroupPath) -> Result<Stats> {
        let cpu = cpu::stats_v1(
            self.dir("cpu", path).as_deref(),
            self.dir("cpuacct", path).as_deref(),
        )?;
        let memory = match self.dir("memory", path) {
            Some(d) => memory::stats_v1(&d)?,
            None => Default::default(),
        };
        let pids = match self.dir("pids", path) {
            Some(d) => pids::stats(&d)?,
            None => Default::default(),
        };
        let io = match self.dir("blkio", path) {
            Some(d) => io::stats_v1(&d)?,
            None => vec![],
        };
        Ok(Stats {
            cpu,
            memory,
            pids,
            io,
        })
    }

    fn oom_kills(&self, path: &CgroupPath) -> Result<u64> {
        memory::oom_kills_v1(&self.need("memory", path)?)
    }

    fn freeze(&self, path: &CgroupPath) -> Result<()> {
        Freezer::V1(self.need("freezer", path)?).freeze(FREEZE_TIMEOUT)
    }

    fn thaw(&self, path: &CgroupPath) -> Result<()> {
        Freezer::V1(self.need("freezer", path)?).thaw()
    }
}

/// `cgroup.clone_children` set in `dir` unless it is; best effort (the copy after the
/// mkdir fills what the kernel did not).
fn clone_children(dir: &Path) {
    let flag = dir.join("cgroup.clone_children");
    if let Ok(Some(v)) = fs::read_opt(&flag) {
        if v.trim() == "0" {
            let _ = fs::write(&flag, "1");
        }
    }
}

/// Fills an empty `cpuset.cpus` / `cpuset.mems` of `dir` from `parent`.
fn copy_cpuset(parent: &Path, dir: &Path) -> Result<()> {
    for file in ["cpuset.cpus", "cpuset.mems"] {
        let own = fs::read_opt(&dir.join(file))?.unwrap_or_default();
        if !own.trim().is_empty() {
            continue;
        }
        let from = fs::read_opt(&parent.join(file))?.unwrap_or_default();
        let from = from.trim();
        if !from.is_empty() {
            fs::write(&dir.join(file), from)?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fs::testutil::{p, Tree};
    use crate::{Hierarchy, Roots};

    /// A fake v1 host: `cpu,cpuacct` co-mounted, plus cpuset, memory, pids, freezer and
    /// a hybrid cgroup2 mount.
    fn host(t: &Tree) -> Hierarchy {
        t.write("cpuset/cpuset.cpus", "0-3\n");
        t.write("cpuset/cpuset.mems", "0\n");
        for c in ["cpu,cpuacct", "memory", "pids", "freezer", "unified"] {
            t.mkdir(c);
        }
        Hierarchy::with_roots(Roots::V1 {
            hierarchies: ["cpu,cpuacct", "cpuset", "memory", "pids", "freezer"]
                .iter()
                .map(|c| (c.to_string(), t.path(c)))
                .collect(),
            hybrid: Some(t.path("unified")),
        })
    }

    #[test]
    fn path_mapping() {
        let t = Tree::new();
        let h = host(&t);
        let pod = p("/kubepods/burstable/pod123/sb1");
        let sub = "kubepods/burstable/pod123/sb1";
        assert_eq!(
            h.dir("cpu", &pod),
            Some(t.path(&format!("cpu,cpuacct/{sub}")))
        );
        assert_eq!(h.dir("cpuacct", &pod), h.dir("cpu", &pod));
        assert_eq!(
            h.dir("memory", &pod),
            Some(t.path(&format!("memory/{sub}")))
        );
        assert_eq!(h.dir("", &pod), Some(t.path(&format!("unified/{sub}"))));
        assert_eq!(h.dir("blkio", &pod), None);
        // One directory per hierarchy: the co-mounted pair once.
        assert_eq!(h.dirs(&pod).len(), 6);
    }

    #[test]
    fn separate_cpu_and_cpuacct() {
        let t = Tree::new();
        t.mkdir("cpu");
        t.mkdir("cpuacct");
        let h = Hierarchy::with_roots(Roots::V1 {
            hierarchies: vec![
                ("cpu".into(), t.path("cpu")),
                ("cpuacct".into(), t.path("cpuacct")),
            ],
            hybrid: None,
        });
        let pod = p("/a");
        h.create(&pod).unwrap();
        assert!(t.exists("cpu/a") && t.exists("cpuacct/a"));
        h.add_process(&pod, 42).unwrap();
        assert_eq!(t.read("cpu/a/cgroup.procs"), "42");
        assert_eq!(t.read("cpuacct/a/cgroup.procs"), "42");
    }

    #[test]
    fn create_copies_cpuset_down() {
        let t = Tree::new();
        let h = host(&t);
        // A pre-existing level with its own (smaller) set: its children copy that.
        t.write("cpuset/kubepods/cpuset.cpus", "1\n");
        t.write("cpuset/kubepods/cpuset.mems", "0\n");
        // A pre-existing empty level gets filled too.
        t.write("cpuset/kubepods/burstable/cpuset.cpus", "\n");
        let pod = p("/kubepods/burstable/pod123/sb1");
        h.create(&pod).unwrap();
        assert_eq!(t.read("cpuset/kubepods/cpuset.cpus"), "1\n");
        for lvl in [
            "kubepods/burstable",
            "kubepods/burstable/pod123",
            "kubepods/burstable/pod123/sb1",
        ] {
            assert_eq!(t.read(&format!("cpuset/{lvl}/cpuset.cpus")), "1", "{lvl}");
            assert_eq!(t.read(&format!("cpuset/{lvl}/cpuset.mems")), "0", "{lvl}");
        }
        for c in ["cpu,cpuacct", "memory", "pids", "freezer", "unified"] {
            assert!(
                t.path(c).join("kubepods/burstable/pod123/sb1").is_dir(),
                "{c}"
            );
            // Only cpuset gets cpuset files.
            assert!(!t.path(c).join("kubepods/cpuset.cpus").exists(), "{c}");
        }
        assert!(h.exists(&pod));
    }

    /// New cpuset levels are made under parents with `cgroup.clone_children` set
    /// (the kernel then copies the sets); the hierarchy's root, and a parent that gets
    /// no new child, are left alone.
    #[test]
    fn create_sets_clone_children_below_the_root() {
        let t = Tree::new();
        let h = host(&t);
        t.write("cpuset/cgroup.clone_children", "0\n");
        t.write("cpuset/kubepods/cgroup.clone_children", "0\n");
        t.write("cpuset/kubepods/burstable/cgroup.clone_children", "0\n");
        h.create(&p("/kubepods/burstable/pod1/sb")).unwrap();
        assert_eq!(t.read("cpuset/cgroup.clone_children"), "0\n");
        // kubepods makes no new child (burstable is there): left as it is.
        assert_eq!(t.read("cpuset/kubepods/cgroup.clone_children"), "0\n");
        assert_eq!(
            t.read("cpuset/kubepods/burstable/cgroup.clone_children"),
            "1"
        );
        // Only cpuset's.
        assert!(!t
            .path("memory")
            .join("kubepods/cgroup.clone_children")
            .exists());
        // The sets are there whatever the kernel did.
        assert_eq!(
            t.read("cpuset/kubepods/burstable/pod1/sb/cpuset.cpus"),
            "0-3"
        );
    }

    #[test]
    fn create_is_idempotent() {
        let t = Tree::new();
        let h = host(&t);
        let pod = p("/pod/sb");
        h.create(&pod).unwrap();
        // A value set later (by a limit) is kept by a second create.
        t.write("cpuset/pod/sb/cpuset.cpus", "2");
        h.create(&pod).unwrap();
        assert_eq!(t.read("cpuset/pod/sb/cpuset.cpus"), "2");
        assert_eq!(t.read("cpuset/pod/cpuset.cpus"), "0-3");
    }

    #[test]
    fn add_procs_kill_remove() {
        let t = Tree::new();
        let h = host(&t);
        let pod = p("/pod");
        assert!(!h.exists(&pod));
        assert_eq!(h.procs(&pod).unwrap(), Vec::<i32>::new());
        h.kill_all(&pod).unwrap();
        h.create(&pod).unwrap();
        h.add_process(&pod, 4242).unwrap();
        for c in [
            "cpu,cpuacct",
            "cpuset",
            "memory",
            "pids",
            "freezer",
            "unified",
        ] {
            assert_eq!(t.read(&format!("{c}/pod/cgroup.procs")), "4242", "{c}");
        }
        assert_eq!(h.procs(&pod).unwrap(), vec![4242]);
        for c in [
            "cpu,cpuacct",
            "cpuset",
            "memory",
            "pids",
            "freezer",
            "unified",
        ] {
            t.write(&format!("{c}/pod/cgroup.procs"), "");
        }
        h.kill_all(&pod).unwrap();
        assert_eq!(t.read("freezer/pod/freezer.state"), "THAWED");

        // Fake dirs are not cgroupfs: emulate the kernel dropping the control files.
        let leaf = p("/pod2/leaf");
        for d in h.dirs(&leaf) {
            std::fs::create_dir_all(d).unwrap();
        }
        h.remove(&leaf).unwrap();
        assert!(!h.exists(&leaf));
        assert!(h.exists(&p("/pod2")), "ancestors are left alone");
        h.remove(&leaf).unwrap();
    }

    #[test]
    fn refuses_root_and_names_paths() {
        let t = Tree::new();
        let h = host(&t);
        assert!(matches!(
            h.remove(&CgroupPath::root()),
            Err(Error::RootCgroup { .. })
        ));
        assert!(matches!(
            h.kill_all(&CgroupPath::root()),
            Err(Error::RootCgroup { .. })
        ));
        // Writing to a cgroup that was never created fails naming the file.
        t.write("memory/x", "not a dir");
        let e = h.create(&p("/x/y")).unwrap_err();
        assert!(e.to_string().starts_with("mkdir "), "{e}");
        assert!(e.to_string().contains("x/y"), "{e}");
    }

    fn all_limits() -> Resources {
        Resources {
            cpu_shares: Some(512),
            cpu_quota: Some(50_000),
            cpu_period: Some(100_000),
            cpuset_cpus: Some("1".into()),
            cpuset_mems: Some("0".into()),
            memory_limit: Some(64 << 20),
            memory_swap_limit: Some(64 << 20),
            pids_limit: Some(10),
            ..Default::default()
        }
    }

    #[test]
    fn apply_writes_each_hierarchy() {
        let t = Tree::new();
        let h = host(&t);
        let cg = p("/pod/c");
        h.create(&cg).unwrap();
        t.write(
            "memory/pod/c/memory.limit_in_bytes",
            "9223372036854771712\n",
        );
        t.write(
            "memory/pod/c/memory.memsw.limit_in_bytes",
            "9223372036854771712\n",
        );
        t.writes();
        h.apply(&cg, &all_limits()).unwrap();
        assert_eq!(
            t.writes(),
            [
                "cpuset/pod/c/cpuset.cpus=1",
                "cpuset/pod/c/cpuset.mems=0",
                "memory/pod/c/memory.limit_in_bytes=67108864",
                "memory/pod/c/memory.memsw.limit_in_bytes=67108864",
                "cpu,cpuacct/pod/c/cpu.shares=512",
                "cpu,cpuacct/pod/c/cpu.cfs_period_us=100000",
                "cpu,cpuacct/pod/c/cpu.cfs_quota_us=50000",
                "pids/pod/c/pids.max=10",
            ]
        );
        // An update names only what changes.
        let r = Resources {
            pids_limit: Some(-1),
            ..Default::default()
        };
        h.apply(&cg, &r).unwrap();
        assert_eq!(t.writes(), ["pids/pod/c/pids.max=max"]);
    }

    #[test]
    fn apply_refuses_what_v1_lacks() {
        let t = Tree::new();
        let h = host(&t);
        let cg = p("/c");
        h.create(&cg).unwrap();
        let mut r = Resources::default();
        r.unified.insert("memory.high".into(), "1000000".into());
        let e = h.apply(&cg, &r).unwrap_err();
        assert_eq!(
            e.to_string(),
            "cgroup /c: the unified map (\"memory.high\") needs cgroup v2"
        );
        // No hugetlb hierarchy, and the hybrid mount does not offer it.
        let r = Resources {
            hugepage_limits: [("2MB".to_string(), 2 << 20)].into(),
            ..Default::default()
        };
        let e = h.apply(&cg, &r).unwrap_err();
        assert!(matches!(e, Error::Unsupported { .. }), "{e}");
        // This project's machines: hugetlb only on the hybrid cgroup2 mount.
        t.write("unified/c/cgroup.controllers", "hugetlb\n");
        t.writes();
        h.apply(&cg, &r).unwrap();
        assert_eq!(t.writes(), ["unified/c/hugetlb.2MB.max=2097152"]);
        assert_eq!(t.writes(), Vec::<String>::new());
    }

    /// Which controllers a cgroup has, and whether a node has hugetlb for its pods:
    /// only a v1 hierarchy, or the hybrid mount enabling it below crust's root, counts.
    #[test]
    fn has_controller_and_hugetlb_on_the_node() {
        let t = Tree::new();
        let h = host(&t);
        let cg = p("/pod/c");
        h.create(&cg).unwrap();
        for c in ["cpu", "cpuacct", "cpuset", "memory", "pids", "freezer"] {
            assert!(h.has_controller(c, &cg), "{c}");
        }
        for c in ["blkio", "hugetlb", ""] {
            assert!(!h.has_controller(c, &cg), "{c:?}");
        }
        // This project's machines: hugetlb on the hybrid root, enabled for nobody.
        t.write("unified/cgroup.controllers", "hugetlb\n");
        t.write("unified/cgroup.subtree_control", "\n");
        let why = h.hugetlb_unavailable(&p("/")).unwrap();
        assert!(why.contains("does not enable hugetlb"), "{why}");
        assert!(why.contains("unified/cgroup.subtree_control"), "{why}");
        // A root not made yet is judged by its nearest existing ancestor.
        let why = h.hugetlb_unavailable(&p("/not/yet")).unwrap();
        assert!(why.contains("unified/cgroup.subtree_control"), "{why}");
        t.write("unified/cgroup.subtree_control", "hugetlb\n");
        assert_eq!(h.hugetlb_unavailable(&p("/not/yet")), None);
        // Per cgroup, what its own cgroup.controllers says.
        assert!(!h.has_controller("hugetlb", &cg));
        t.write("unified/pod/c/cgroup.controllers", "hugetlb\n");
        assert!(h.has_controller("hugetlb", &cg));

        // No hybrid mount at all.
        let t2 = Tree::new();
        t2.mkdir("memory");
        let h2 = Hierarchy::with_roots(Roots::V1 {
            hierarchies: vec![("memory".into(), t2.path("memory"))],
            hybrid: None,
        });
        let why = h2.hugetlb_unavailable(&p("/")).unwrap();
        assert!(why.contains("no cgroup2 mount"), "{why}");
        // A v1 hugetlb hierarchy: always there.
        t2.mkdir("hugetlb");
        let h3 = Hierarchy::with_roots(Roots::V1 {
            hierarchies: vec![("hugetlb".into(), t2.path("hugetlb"))],
            hybrid: None,
        });
        assert_eq!(h3.hugetlb_unavailable(&p("/")), None);
        assert!(h3.has_controller("hugetlb", &p("/x")));
    }

    /// A controller the host does not mount: a limit for it is refused naming it, a
    /// field left unset asks nothing of it.
    #[test]
    fn absent_controller_only_matters_when_named() {
        let t = Tree::new();
        t.mkdir("memory");
        let h = Hierarchy::with_roots(Roots::V1 {
            hierarchies: vec![("memory".into(), t.path("memory"))],
            hybrid: None,
        });
        let cg = p("/c");
        h.create(&cg).unwrap();
        t.write("memory/c/memory.limit_in_bytes", "9223372036854771712\n");
        t.writes();
        let r = Resources {
            memory_limit: Some(64 << 20),
            ..Default::default()
        };
        h.apply(&cg, &r).unwrap();
        assert_eq!(t.writes(), ["memory/c/memory.limit_in_bytes=67108864"]);
        for r in [
            Resources {
                cpu_shares: Some(2),
                ..Default::default()
            },
            Resources {
                cpu_period: Some(100_000),
                ..Default::default()
            },
            Resources {
                cpuset_cpus: Some("0".into()),
                ..Default::default()
            },
            Resources {
                pids_limit: Some(5),
                ..Default::default()
            },
        ] {
            let e = h.apply(&cg, &r).unwrap_err();
            assert!(matches!(e, Error::Unsupported { .. }), "{e}");
            assert!(e.to_string().contains("controller mounted"), "{e}");
        }
        assert_eq!(t.writes(), Vec::<String>::new());
    }

    #[test]
    fn stats_oom_kills_and_freeze() {
        let t = Tree::new();
        let h = host(&t);
        let cg = p("/c");
        h.create(&cg).unwrap();
        t.write("cpu,cpuacct/c/cpuacct.usage", "2000\n");
        t.write("cpu,cpuacct/c/cpuacct.usage_user", "1500\n");
        t.write("cpu,cpuacct/c/cpuacct.usage_sys", "500\n");
        t.write("memory/c/memory.usage_in_bytes", "8192\n");
        t.write("memory/c/memory.limit_in_bytes", "9223372036854771712\n");
        t.write(
            "memory/c/memory.stat",
            "total_inactive_file 4096\ntotal_rss 4096\n",
        );
        t.write(
            "memory/c/memory.oom_control",
            "oom_kill_disable 0\noom_kill 2\n",
        );
        t.write("pids/c/pids.current", "3\n");
        t.write("pids/c/pids.max", "max\n");
        let s = h.stats(&cg).unwrap();
        assert_eq!(
            (s.cpu.usage_ns, s.cpu.user_ns, s.cpu.system_ns),
            (2000, 1500, 500)
        );
        assert_eq!(
            (s.memory.usage, s.memory.working_set, s.memory.rss),
            (8192, 4096, 4096)
        );
        assert_eq!((s.memory.limit, s.memory.oom_kills), (None, 2));
        assert_eq!((s.pids.current, s.pids.limit), (3, None));
        assert_eq!(s.io, [], "no blkio hierarchy");
        assert_eq!(h.oom_kills(&cg).unwrap(), 2);
        h.freeze(&cg).unwrap();
        assert_eq!(t.read("freezer/c/freezer.state"), "FROZEN");
        h.thaw(&cg).unwrap();
        assert_eq!(t.read("freezer/c/freezer.state"), "THAWED");
        let e = h.stats(&p("/gone")).unwrap_err();
        assert!(e.to_string().contains("gone/cpuacct.usage"), "{e}");
    }
}
