//! Root tests of the `cgroups` crate on this host's real cgroupfs (cgroup v1 here, with a
//! hybrid cgroup2 mount that holds only `hugetlb`; see TESTING.md).
//!
//! Every test nests its cgroups under the cgroup the test process is already in, per
//! hierarchy ([`Hierarchy::nested_in_own_cgroup`]), under a name unique to the process
//! and test, so tests run in parallel; a guard kills and removes them on panic too.
//! Nothing else is touched and the test process itself is never moved.

use cgroups::{CgroupManager, CgroupPath, Error, Hierarchy, Version};
use crust_e2e::{proc_cgroup, require_root, unique};
use std::os::unix::process::ExitStatusExt;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Kills and removes the test's cgroups (deepest first) and children on drop.
struct Guard {
    h: Hierarchy,
    /// The test's top cgroup, `/<unique>`; everything the test makes is below it.
    top: CgroupPath,
    children: Vec<Child>,
}

impl Guard {
    fn new(tag: &str) -> Guard {
        let h = Hierarchy::detect()
            .and_then(|h| h.nested_in_own_cgroup())
            .expect("detect cgroups");
        let top = CgroupPath::new(&unique(tag)).unwrap();
        Guard {
            h,
            top,
            children: vec![],
        }
    }

    fn path(&self, rel: &str) -> CgroupPath {
        self.top.join(rel).unwrap()
    }

    fn spawn(&mut self, args: &[&str]) -> u32 {
        let child = Command::new(args[0])
            .args(&args[1..])
            .stdin(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("spawn {args:?}: {e}"));
        let pid = child.id();
        self.children.push(child);
        pid
    }

    /// Every cgroup below `top` (and `top`), deepest first.
    fn all_below_top(&self) -> Vec<CgroupPath> {
        let mut found = vec![];
        for dir in self.h.dirs(&self.top) {
            walk(&dir, &self.top, &mut found);
        }
        found.sort_by_key(|p| std::cmp::Reverse(p.depth()));
        found.dedup();
        found.push(self.top.clone());
        found
    }
}

fn walk(dir: &std::path::Path, path: &CgroupPath, out: &mut Vec<CgroupPath>) {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return;
    };
    for e in rd.flatten() {
        if e.file_type().map(|t| t.is_dir()).unwrap_or(false) {
            let child = path.join(&e.file_name().to_string_lossy()).unwrap();
            walk(&e.path(), &child, out);
            out.push(child);
        }
    }
}

impl Drop for Guard {
    fn drop(&mut self) {
        for c in &mut self.children {
            let _ = c.kill();
            let _ = c.wait();
        }
        for p in self.all_below_top() {
            let _ = self.h.kill_all(&p);
            if let Err(e) = self.h.remove(&p) {
                eprintln!("cleanup: {e}");
            }
        }
    }
}

/// The path `/proc/PID/cgroup` shows for `path` of the nested hierarchy: the test
/// process's own cgroup for that controller with `path` below it.
fn expected(controller: &str, path: &CgroupPath) -> String {
    let own = proc_cgroup("self", controller).expect("own cgroup");
    CgroupPath::new(&own).unwrap().append(path).to_string()
}

fn sys_fs_cgroup_is_cgroup2() -> bool {
    let out = Command::new("stat")
        .args(["-f", "-c", "%T", "/sys/fs/cgroup"])
        .output()
        .expect("stat");
    String::from_utf8_lossy(&out.stdout).trim() == "cgroup2fs"
}

#[test]
fn detects_the_host_layout() {
    if !require_root(&[]) {
        return;
    }
    let h = Hierarchy::detect().unwrap();
    if sys_fs_cgroup_is_cgroup2() {
        assert_eq!(h.version(), Version::V2, "{h:?}");
        return;
    }
    // This machine: v1 controllers, and `/sys/fs/cgroup/unified` is only the hybrid mount.
    assert_eq!(h.version(), Version::V1, "{h:?}");
    let pod = CgroupPath::new("/p").unwrap();
    for c in [
        "cpu", "cpuacct", "cpuset", "memory", "pids", "freezer", "devices", "blkio",
    ] {
        let dir = h.dir(c, &pod).unwrap_or_else(|| panic!("no {c} in {h:?}"));
        assert!(dir.starts_with("/sys/fs/cgroup"), "{c}: {}", dir.display());
        assert!(
            !dir.starts_with("/sys/fs/cgroup/unified"),
            "{c}: {}",
            dir.display()
        );
    }
    if std::path::Path::new("/sys/fs/cgroup/unified/cgroup.procs").exists() {
        assert_eq!(
            h.dir("", &pod),
            Some("/sys/fs/cgroup/unified/p".into()),
            "hybrid mount"
        );
    }
}

#[test]
fn pod_cgroup_lifecycle() {
    if !require_root(&[]) {
        return;
    }
    let mut g = Guard::new("crustcg");
    let pod = g.path("pod");
    let sandbox = g.path("pod/sandbox");

    g.h.create(&sandbox).unwrap();
    g.h.create(&sandbox).unwrap();
    assert!(g.h.exists(&sandbox));
    for d in g.h.dirs(&sandbox) {
        assert!(d.join("cgroup.procs").is_file(), "{}", d.display());
    }
    if let Some(cpuset) = g.h.dir("cpuset", &sandbox) {
        if g.h.version() == Version::V1 {
            for f in ["cpuset.cpus", "cpuset.mems"] {
                let v = std::fs::read_to_string(cpuset.join(f)).unwrap();
                assert!(!v.trim().is_empty(), "{f} empty in {}", cpuset.display());
            }
        }
    }

    let pid = g.spawn(&["sleep", "30"]);
    g.h.add_process(&sandbox, pid as i32).unwrap();
    assert_eq!(g.h.procs(&sandbox).unwrap(), vec![pid as i32]);
    assert_eq!(g.h.procs(&pod).unwrap(), Vec::<i32>::new());
    let controllers: &[&str] = match g.h.version() {
        Version::V1 => &["memory", "pids", "cpu", "cpuset", "freezer"],
        Version::V2 => &[""],
    };
    for c in controllers {
        assert_eq!(
            proc_cgroup(&pid.to_string(), c).as_deref(),
            Some(expected(c, &sandbox).as_str()),
            "/proc/{pid}/cgroup for {c:?}"
        );
    }
    if g.h.version() == Version::V1 && g.h.dir("", &sandbox).is_some() {
        // The hybrid cgroup2 mount is joined too.
        assert_eq!(
            proc_cgroup(&pid.to_string(), "").unwrap(),
            expected("", &sandbox)
        );
    }

    // kill_all returns once the cgroup is empty, even before the child is reaped.
    g.h.kill_all(&sandbox).unwrap();
    assert_eq!(g.h.procs(&sandbox).unwrap(), Vec::<i32>::new());
    let status = g.children.pop().unwrap().wait().unwrap();
    assert_eq!(status.signal(), Some(libc::SIGKILL));
    g.h.kill_all(&sandbox).unwrap();

    g.h.remove(&sandbox).unwrap();
    assert!(!g.h.exists(&sandbox));
    for d in g.h.dirs(&sandbox) {
        assert!(!d.exists(), "{} left behind", d.display());
    }
    g.h.remove(&sandbox).unwrap();
    // Ancestors stay until their own remove.
    assert!(g.h.exists(&pod));
    g.h.remove(&pod).unwrap();
    g.h.remove(&g.top).unwrap();
    assert!(!g.h.exists(&g.top));
    // A second create after removal works again.
    g.h.create(&sandbox).unwrap();
    assert!(g.h.exists(&sandbox));
}

#[test]
fn remove_of_busy_cgroup_names_it() {
    if !require_root(&[]) {
        return;
    }
    let mut g = Guard::new("crustcgb");
    let cg = g.path("busy");
    g.h.create(&cg).unwrap();
    let pid = g.spawn(&["sleep", "30"]);
    g.h.add_process(&cg, pid as i32).unwrap();
    let e = g.h.remove(&cg).unwrap_err();
    assert!(matches!(e, Error::Busy { .. }), "{e}");
    let msg = e.to_string();
    assert!(msg.starts_with("rmdir "), "{msg}");
    assert!(msg.contains(&format!("{}", cg)), "{msg}");
    assert!(g.h.exists(&cg));
    g.h.kill_all(&cg).unwrap();
    g.h.remove(&cg).unwrap();
    assert!(!g.h.exists(&cg));
}

/// A process that keeps forking while it is killed: the freezer (v1) or `cgroup.kill`
/// (v2) must leave nothing behind.
#[test]
fn kill_all_catches_forking_processes() {
    if !require_root(&[]) {
        return;
    }
    let mut g = Guard::new("crustcgf");
    let cg = g.path("forker");
    g.h.create(&cg).unwrap();
    // Starts in the cgroup: it waits on stdin until added, then forks without pause.
    let script = "read x; while :; do sleep 30 & done";
    let mut child = Command::new("sh")
        .args(["-c", script])
        .stdin(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id();
    g.h.add_process(&cg, pid as i32).unwrap();
    use std::io::Write;
    child.stdin.take().unwrap().write_all(b"go\n").unwrap();
    g.children.push(child);
    let start = Instant::now();
    while g.h.procs(&cg).unwrap().len() < 20 {
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "forker did not fork"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    g.h.kill_all(&cg).unwrap();
    assert_eq!(g.h.procs(&cg).unwrap(), Vec::<i32>::new());
    g.h.remove(&cg).unwrap();
    assert!(!g.h.exists(&cg));
}
