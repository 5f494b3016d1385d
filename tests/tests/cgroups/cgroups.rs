//! Root tests of the `cgroups` crate on real cgroupfs: cgroup v1 on this project's
//! machines (with a hybrid cgroup2 mount that holds only `hugetlb`; see TESTING.md), and
//! cgroup v2 inside the VM `hack/vm-test` boots.
//!
//! - Most tests run on either version and check the files of the one they find. With
//!   `CRUST_CGROUP_V2_VM=1` (set only by the VM's init) they insist on v2.
//! - Tests named `v2_*` are `#[ignore]`d: the host suite lists them as ignored rather
//!   than passing them, and the VM runs them with `--include-ignored`. Run on a v1 host,
//!   they fail.
//!
//! Every test nests its cgroups under the cgroup the test process is already in, per
//! hierarchy ([`Hierarchy::nested_in_own_cgroup`]), under a name unique to the process
//! and test, so tests run in parallel; a guard kills and removes them on panic too.
//! Nothing else is touched and the test process itself is never moved. The processes
//! put in cgroups are `sh` scripts using only commands busybox also has.

use cgroups::{CgroupManager, CgroupPath, Error, Hierarchy, Resources, Version};
use crust_e2e::{proc_cgroup, require_root, unique};
use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::process::ExitStatusExt;
use std::path::PathBuf;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

const MIB: i64 = 1 << 20;

/// True inside `hack/vm-test`'s VM, whose init sets `CRUST_CGROUP_V2_VM=1`.
fn in_v2_vm() -> bool {
    std::env::var("CRUST_CGROUP_V2_VM").is_ok_and(|v| v == "1")
}

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
        if in_v2_vm() {
            assert_eq!(h.version(), Version::V2, "CRUST_CGROUP_V2_VM=1 but {h:?}");
        }
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

    /// Makes `cg` and starts `sh -c SCRIPT` in it: the shell waits on stdin until it is
    /// in the cgroup, so everything the script does is charged there. The caller waits
    /// for the child or gives it to `children`; the guard kills the cgroup's processes
    /// in any case.
    fn start_in(&self, cg: &CgroupPath, script: &str, stdout: Stdio, stderr: Stdio) -> Child {
        self.h.create(cg).unwrap();
        let mut child = Command::new("sh")
            .args(["-c", &format!("read x; {script}")])
            .stdin(Stdio::piped())
            .stdout(stdout)
            .stderr(stderr)
            .spawn()
            .unwrap_or_else(|e| panic!("spawn sh: {e}"));
        self.h.add_process(cg, child.id() as i32).unwrap();
        child.stdin.take().unwrap().write_all(b"go\n").unwrap();
        child
    }

    /// The control file `name` of `cg` in `controller`'s hierarchy, trimmed.
    fn file(&self, controller: &str, cg: &CgroupPath, name: &str) -> String {
        let f = self.dir(controller, cg).join(name);
        std::fs::read_to_string(&f)
            .unwrap_or_else(|e| panic!("{}: {e}", f.display()))
            .trim()
            .to_string()
    }

    fn dir(&self, controller: &str, cg: &CgroupPath) -> PathBuf {
        self.h
            .dir(controller, cg)
            .unwrap_or_else(|| panic!("no {controller} hierarchy"))
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
    let path = std::ffi::CString::new("/sys/fs/cgroup").unwrap();
    // SAFETY: statfs is plain integers, for which all zeroes is a valid value.
    let mut st: libc::statfs = unsafe { std::mem::zeroed() };
    // SAFETY: statfs fills the struct it is given from a NUL-terminated path.
    let rc = unsafe { libc::statfs(path.as_ptr(), &mut st) };
    assert_eq!(rc, 0, "statfs /sys/fs/cgroup");
    st.f_type == libc::CGROUP2_SUPER_MAGIC
}

fn wait_exit(child: &mut Child, within: Duration) -> ExitStatus {
    let start = Instant::now();
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return status;
        }
        assert!(
            start.elapsed() < within,
            "pid {} still running after {within:?}",
            child.id()
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Polls `f` until it is true; panics naming `what` after `within`.
fn eventually(within: Duration, what: &str, mut f: impl FnMut() -> bool) {
    let start = Instant::now();
    while !f() {
        assert!(start.elapsed() < within, "{what}: not within {within:?}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The `unified` hierarchy's root controllers (v2).
fn v2_root_controllers(g: &Guard) -> Vec<String> {
    let root = g.dir("", &CgroupPath::root());
    std::fs::read_to_string(root.join("cgroup.controllers"))
        .unwrap()
        .split_whitespace()
        .map(str::to_string)
        .collect()
}

#[test]
fn detects_the_host_layout() {
    if !require_root(&[]) {
        return;
    }
    let h = Hierarchy::detect().unwrap();
    if sys_fs_cgroup_is_cgroup2() || in_v2_vm() {
        assert!(sys_fs_cgroup_is_cgroup2());
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

/// crustd's pod layout: the pause in `pod/sandbox`, the containers beside it in
/// `pod/ctr` with limits of their own. On cgroup v2 that works because `pod` holds no
/// process; with the container below the pause's cgroup (`pod/sandbox/ctr`) the limit
/// could not be set ("no internal processes": the pause's cgroup cannot enable the
/// memory controller for a child).
#[test]
fn containers_beside_the_pause_get_their_limits() {
    if !require_root(&["sleep"]) {
        return;
    }
    let mut g = Guard::new("crustcgl");
    let sandbox = g.path("pod/sandbox");
    let ctr = g.path("pod/ctr");
    g.h.create(&sandbox).unwrap();
    let pause = g.spawn(&["sleep", "30"]);
    g.h.add_process(&sandbox, pause as i32).unwrap();
    g.h.create(&ctr).unwrap();
    let r = Resources {
        memory_limit: Some(64 * MIB),
        pids_limit: Some(20),
        ..Default::default()
    };
    g.h.apply(&ctr, &r).unwrap();
    let mem = g.h.dir("memory", &ctr).unwrap();
    let file = match g.h.version() {
        Version::V2 => "memory.max",
        Version::V1 => "memory.limit_in_bytes",
    };
    assert_eq!(
        std::fs::read_to_string(mem.join(file)).unwrap().trim(),
        (64 * MIB).to_string()
    );
    if g.h.version() == Version::V2 {
        // Below the pause's cgroup the controllers are not there to be limited.
        let nested = g.path("pod/sandbox/ctr");
        g.h.create(&nested).unwrap();
        assert!(
            g.h.apply(&nested, &r).is_err(),
            "a limit below a cgroup with a process"
        );
        g.h.remove(&nested).unwrap();
    }
    g.h.kill_all(&sandbox).unwrap();
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

/// The memory limit lands in the file, and a process allocating beyond it is OOM-killed
/// and counted (v1 `memory.oom_control`, v2 `memory.events`).
#[test]
fn memory_limit_and_oom_kill() {
    if !require_root(&["sh", "head", "tail"]) {
        return;
    }
    let g = Guard::new("crustcgm");
    let cg = g.path("oom");
    g.h.create(&cg).unwrap();
    let r = Resources {
        memory_limit: Some(32 * MIB),
        memory_swap_limit: Some(32 * MIB),
        ..Default::default()
    };
    g.h.apply(&cg, &r).unwrap();
    let want = (32 * MIB).to_string();
    match g.h.version() {
        Version::V1 => {
            assert_eq!(g.file("memory", &cg, "memory.limit_in_bytes"), want);
            if g.dir("memory", &cg)
                .join("memory.memsw.limit_in_bytes")
                .exists()
            {
                assert_eq!(g.file("memory", &cg, "memory.memsw.limit_in_bytes"), want);
            }
        }
        Version::V2 => {
            assert_eq!(g.file("memory", &cg, "memory.max"), want);
            if g.dir("memory", &cg).join("memory.swap.max").exists() {
                assert_eq!(g.file("memory", &cg, "memory.swap.max"), "0");
            }
        }
    }
    assert_eq!(g.h.stats(&cg).unwrap().memory.limit, Some(32 << 20));
    assert_eq!(g.h.oom_kills(&cg).unwrap(), 0);

    // `tail` keeps the last lines of input without newlines: all 256 MiB of it.
    let script = "head -c 268435456 /dev/zero | tail";
    let mut child = g.start_in(&cg, script, Stdio::null(), Stdio::null());
    let status = wait_exit(&mut child, Duration::from_secs(120));
    assert!(!status.success(), "{status:?}");
    // `tail` is killed; `head` sometimes too, by a second OOM before tail's memory is
    // freed (seen under emulation): one kill or two, counted the same both ways.
    let kills = g.h.oom_kills(&cg).unwrap();
    assert!((1..=2).contains(&kills), "{kills} OOM kills");
    assert_eq!(g.h.stats(&cg).unwrap().memory.oom_kills, kills);
}

/// A tiny limit is refused before the kernel sees it; a limit below what the cgroup
/// uses is EBUSY on v1 (a clear error, the limit unchanged) and an OOM kill on v2.
#[test]
fn memory_limit_below_usage() {
    if !require_root(&["sh", "head", "tail", "sleep"]) {
        return;
    }
    let mut g = Guard::new("crustcgu");
    let cg = g.path("use");
    let limit_file = match g.h.version() {
        Version::V1 => "memory.limit_in_bytes",
        Version::V2 => "memory.max",
    };
    g.h.create(&cg).unwrap();
    let before = g.file("memory", &cg, limit_file);
    let tiny = Resources {
        memory_limit: Some(4096),
        ..Default::default()
    };
    let e = g.h.apply(&cg, &tiny).unwrap_err();
    assert!(matches!(e, Error::Limit { .. }), "{e}");
    let path = g.dir("memory", &cg).join(limit_file);
    assert!(
        e.to_string()
            .starts_with(&format!("set {} to 4096: ", path.display())),
        "{e}"
    );
    assert_eq!(g.file("memory", &cg, limit_file), before, "nothing written");

    // 64 MiB held by `tail` until `sleep` ends.
    let script = "{ head -c 67108864 /dev/zero; sleep 120; } | tail";
    let child = g.start_in(&cg, script, Stdio::null(), Stdio::null());
    g.children.push(child);
    eventually(Duration::from_secs(60), "64 MiB charged", || {
        g.h.stats(&cg).unwrap().memory.usage >= (60 << 20)
    });
    let low = Resources {
        memory_limit: Some(16 * MIB),
        ..Default::default()
    };
    match g.h.version() {
        Version::V1 => {
            let e = g.h.apply(&cg, &low).unwrap_err();
            assert!(matches!(e, Error::Limit { .. }), "{e}");
            let msg = e.to_string();
            assert!(
                msg.starts_with(&format!("set {} to 16777216: ", path.display())),
                "{msg}"
            );
            assert!(msg.contains("EBUSY"), "{msg}");
            assert_eq!(g.file("memory", &cg, limit_file), before);
            assert_eq!(g.h.oom_kills(&cg).unwrap(), 0);
        }
        Version::V2 => {
            // v2 takes it, reclaims what it can and OOM-kills the rest.
            g.h.apply(&cg, &low).unwrap();
            assert_eq!(g.file("memory", &cg, limit_file), "16777216");
            eventually(Duration::from_secs(60), "OOM kill counted", || {
                g.h.oom_kills(&cg).unwrap() >= 1
            });
        }
    }
}

/// With `pids.max` 5 a shell that starts 10 children fails to fork.
#[test]
fn pids_limit_stops_forks() {
    if !require_root(&["sh", "sleep"]) {
        return;
    }
    let g = Guard::new("crustcgp");
    let cg = g.path("pids");
    g.h.create(&cg).unwrap();
    let r = Resources {
        pids_limit: Some(5),
        ..Default::default()
    };
    g.h.apply(&cg, &r).unwrap();
    assert_eq!(g.file("pids", &cg, "pids.max"), "5");
    // The sleeps must not hold the pipes open: the test reads them to the end.
    let script =
        "for i in 1 2 3 4 5 6 7 8 9 10; do sleep 60 >/dev/null 2>&1 & done; echo forked all";
    let mut child = g.start_in(&cg, script, Stdio::piped(), Stdio::piped());
    let status = wait_exit(&mut child, Duration::from_secs(60));
    let (mut out, mut err) = (String::new(), String::new());
    child
        .stdout
        .take()
        .unwrap()
        .read_to_string(&mut out)
        .unwrap();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut err)
        .unwrap();
    assert!(!status.success(), "{status:?} {out:?} {err:?}");
    assert!(err.to_lowercase().contains("fork"), "stderr: {err:?}");
    assert!(!out.contains("forked all"), "{out:?}");
    let s = g.h.stats(&cg).unwrap();
    assert!((1..=5).contains(&s.pids.current), "{s:?}");
    assert_eq!(s.pids.limit, Some(5));
    assert!(g.h.procs(&cg).unwrap().len() <= 5);
}

/// Shares (weight on v2), quota and period land in the files, and a busy loop gets
/// about its quota.
#[test]
fn cpu_limits() {
    if !require_root(&["sh"]) {
        return;
    }
    let mut g = Guard::new("crustcgc");
    let cg = g.path("cpu");
    g.h.create(&cg).unwrap();
    let r = Resources {
        cpu_shares: Some(512),
        cpu_quota: Some(10_000),
        cpu_period: Some(100_000),
        ..Default::default()
    };
    g.h.apply(&cg, &r).unwrap();
    match g.h.version() {
        Version::V1 => {
            assert_eq!(g.file("cpu", &cg, "cpu.shares"), "512");
            assert_eq!(g.file("cpu", &cg, "cpu.cfs_quota_us"), "10000");
            assert_eq!(g.file("cpu", &cg, "cpu.cfs_period_us"), "100000");
        }
        Version::V2 => {
            // 1 + ((512 - 2) * 9999) / 262142
            assert_eq!(g.file("cpu", &cg, "cpu.weight"), "20");
            assert_eq!(g.file("cpu", &cg, "cpu.max"), "10000 100000");
        }
    }
    let child = g.start_in(&cg, "while :; do :; done", Stdio::null(), Stdio::null());
    g.children.push(child);
    let start = Instant::now();
    let before = g.h.stats(&cg).unwrap().cpu;
    std::thread::sleep(Duration::from_secs(2));
    let after = g.h.stats(&cg).unwrap().cpu;
    let wall = start.elapsed().as_nanos() as u64;
    let used = after.usage_ns - before.usage_ns;
    assert!(used > 0, "{after:?}");
    // 10% of one CPU, with room for slack; unthrottled it would be ~100%.
    assert!(used < wall / 2, "used {used} ns of {wall} ns: {after:?}");
    assert!(after.throttled_periods > 0, "{after:?}");
    assert!(after.throttled_ns > 0, "{after:?}");
    // Unlimited again.
    let r = Resources {
        cpu_quota: Some(-1),
        ..Default::default()
    };
    g.h.apply(&cg, &r).unwrap();
    match g.h.version() {
        Version::V1 => assert_eq!(g.file("cpu", &cg, "cpu.cfs_quota_us"), "-1"),
        Version::V2 => assert_eq!(g.file("cpu", &cg, "cpu.max"), "max 100000"),
    }
}

/// cpuset.cpus / mems land in the files and in the process's allowed CPUs.
#[test]
fn cpuset_limits() {
    if !require_root(&["sh", "sleep"]) {
        return;
    }
    let mut g = Guard::new("crustcgs");
    let cg = g.path("cpuset");
    g.h.create(&cg).unwrap();
    let r = Resources {
        cpuset_cpus: Some("0".into()),
        cpuset_mems: Some("0".into()),
        ..Default::default()
    };
    g.h.apply(&cg, &r).unwrap();
    assert_eq!(g.file("cpuset", &cg, "cpuset.cpus"), "0");
    assert_eq!(g.file("cpuset", &cg, "cpuset.mems"), "0");
    let child = g.start_in(&cg, "sleep 60", Stdio::null(), Stdio::null());
    let status = format!("/proc/{}/status", child.id());
    g.children.push(child);
    eventually(Duration::from_secs(10), "Cpus_allowed_list 0", || {
        std::fs::read_to_string(&status)
            .unwrap()
            .lines()
            .any(|l| l.split_whitespace().collect::<Vec<_>>() == ["Cpus_allowed_list:", "0"])
    });
    // A CPU the parent does not have is refused, naming the file and value.
    let r = Resources {
        cpuset_cpus: Some("4095".into()),
        ..Default::default()
    };
    let e = g.h.apply(&cg, &r).unwrap_err();
    let msg = e.to_string();
    assert!(msg.contains("cpuset.cpus to \"4095\""), "{msg}");
}

/// A busy process that allocates shows CPU time, memory and its pid in the stats.
#[test]
fn stats_of_a_busy_process() {
    if !require_root(&["sh", "head", "tr"]) {
        return;
    }
    let mut g = Guard::new("crustcgt");
    let cg = g.path("busy");
    let script = "x=$(head -c 8000000 /dev/zero | tr '\\0' a); while :; do :; done";
    let child = g.start_in(&cg, script, Stdio::null(), Stdio::null());
    g.children.push(child);
    eventually(Duration::from_secs(60), "CPU time and 8 MB charged", || {
        let s = g.h.stats(&cg).unwrap();
        s.cpu.usage_ns > 300_000_000 && s.memory.usage > 8_000_000
    });
    let s = g.h.stats(&cg).unwrap();
    assert!(s.cpu.user_ns > 0, "{s:?}");
    assert!(
        s.cpu.user_ns + s.cpu.system_ns <= s.cpu.usage_ns + 50_000_000,
        "{s:?}"
    );
    assert!(s.memory.working_set > 0, "{s:?}");
    assert!(s.memory.working_set <= s.memory.usage, "{s:?}");
    assert!(s.memory.rss > 4_000_000, "{s:?}");
    assert!(s.memory.page_faults > 0, "{s:?}");
    assert_eq!(s.memory.limit, None, "{s:?}");
    assert_eq!(s.memory.oom_kills, 0);
    assert!(s.pids.current >= 1, "{s:?}");
}

/// Freeze stops a counting process (its output stops advancing) and thaw resumes it.
#[test]
fn freeze_and_thaw() {
    if !require_root(&["sh"]) {
        return;
    }
    let g = Guard::new("crustcgz");
    let cg = g.path("count");
    let script = "i=0; while :; do i=$((i+1)); echo $i; done";
    let mut child = g.start_in(&cg, script, Stdio::piped(), Stdio::null());
    let count = Arc::new(AtomicU64::new(0));
    let reader = {
        let count = count.clone();
        let out = child.stdout.take().unwrap();
        std::thread::spawn(move || {
            for line in BufReader::new(out).lines() {
                let Ok(line) = line else { break };
                count.store(line.trim().parse().unwrap_or(0), Ordering::SeqCst);
            }
        })
    };
    eventually(Duration::from_secs(30), "counting", || {
        count.load(Ordering::SeqCst) > 100
    });
    g.h.freeze(&cg).unwrap();
    match g.h.version() {
        Version::V1 => assert_eq!(g.file("freezer", &cg, "freezer.state"), "FROZEN"),
        Version::V2 => {
            let events = g.file("", &cg, "cgroup.events");
            assert!(events.lines().any(|l| l == "frozen 1"), "{events}");
        }
    }
    // Once what was in the pipe is read, nothing more comes.
    let mut frozen_at = count.load(Ordering::SeqCst);
    eventually(Duration::from_secs(10), "counter stops", || {
        std::thread::sleep(Duration::from_millis(200));
        let now = count.load(Ordering::SeqCst);
        std::mem::replace(&mut frozen_at, now) == now
    });
    std::thread::sleep(Duration::from_millis(700));
    assert_eq!(
        count.load(Ordering::SeqCst),
        frozen_at,
        "counted while frozen"
    );
    g.h.freeze(&cg).unwrap();

    g.h.thaw(&cg).unwrap();
    eventually(Duration::from_secs(30), "counting again", || {
        count.load(Ordering::SeqCst) > frozen_at
    });
    g.h.thaw(&cg).unwrap();
    g.h.kill_all(&cg).unwrap();
    assert_eq!(child.wait().unwrap().signal(), Some(libc::SIGKILL));
    reader.join().unwrap();
}

/// v2: `create` enables the controllers down to the new cgroup, which then has each
/// controller's files.
#[test]
#[ignore = "cgroup v2 only: hack/vm-test runs it in a VM"]
fn v2_create_enables_controllers() {
    if !require_root(&[]) {
        return;
    }
    let g = Guard::new("crustcg2c");
    assert_eq!(g.h.version(), Version::V2, "needs a cgroup v2 host");
    let ctr = g.path("pod/ctr");
    g.h.create(&ctr).unwrap();
    let have = v2_root_controllers(&g);
    let want: Vec<&str> = ["cpu", "cpuset", "io", "memory", "pids", "hugetlb"]
        .into_iter()
        .filter(|c| have.iter().any(|h| h == c))
        .collect();
    for c in ["cpu", "cpuset", "io", "memory", "pids"] {
        assert!(want.contains(&c), "root lacks {c}: {have:?}");
    }
    for (cg, file) in [
        (g.top.clone(), "cgroup.subtree_control"),
        (g.path("pod"), "cgroup.subtree_control"),
        (ctr.clone(), "cgroup.controllers"),
    ] {
        let text = g.file("", &cg, file);
        let got: Vec<&str> = text.split_whitespace().collect();
        for c in &want {
            assert!(got.contains(c), "{c} not in {cg}/{file}: {text:?}");
        }
    }
    for f in [
        "memory.max",
        "cpu.max",
        "cpu.weight",
        "pids.max",
        "cpuset.cpus",
        "io.max",
    ] {
        assert!(g.dir("", &ctr).join(f).exists(), "{ctr}/{f} missing");
    }
    // Creating again changes nothing.
    g.h.create(&ctr).unwrap();
}

/// v2: the `unified` map is written last and wins; swap is memory+swap minus memory;
/// a file the kernel does not have is an error naming it.
#[test]
#[ignore = "cgroup v2 only: hack/vm-test runs it in a VM"]
fn v2_unified_and_swap() {
    if !require_root(&[]) {
        return;
    }
    let g = Guard::new("crustcg2u");
    assert_eq!(g.h.version(), Version::V2, "needs a cgroup v2 host");
    let cg = g.path("u");
    g.h.create(&cg).unwrap();
    let mut r = Resources {
        cpu_shares: Some(1024),
        memory_limit: Some(64 * MIB),
        memory_swap_limit: Some(96 * MIB),
        ..Default::default()
    };
    r.unified.insert("cpu.weight".into(), "300".into());
    r.unified
        .insert("memory.high".into(), (48 * MIB).to_string());
    g.h.apply(&cg, &r).unwrap();
    assert_eq!(g.file("", &cg, "cpu.weight"), "300");
    assert_eq!(g.file("", &cg, "memory.high"), (48 * MIB).to_string());
    assert_eq!(g.file("", &cg, "memory.max"), (64 * MIB).to_string());
    if g.dir("", &cg).join("memory.swap.max").exists() {
        assert_eq!(g.file("", &cg, "memory.swap.max"), (32 * MIB).to_string());
    }
    let r = Resources {
        unified: [("memory.nosuchfile".to_string(), "1".to_string())].into(),
        ..Default::default()
    };
    let e = g.h.apply(&cg, &r).unwrap_err();
    assert!(matches!(e, Error::Set { .. }), "{e}");
    assert!(e.to_string().contains("memory.nosuchfile to \"1\""), "{e}");
}

/// v2: a hugetlb limit per page size.
#[test]
#[ignore = "cgroup v2 only: hack/vm-test runs it in a VM"]
fn v2_hugetlb() {
    if !require_root(&[]) {
        return;
    }
    let g = Guard::new("crustcg2h");
    assert_eq!(g.h.version(), Version::V2, "needs a cgroup v2 host");
    assert!(
        v2_root_controllers(&g).iter().any(|c| c == "hugetlb"),
        "no hugetlb controller"
    );
    let cg = g.path("h");
    g.h.create(&cg).unwrap();
    let r = Resources {
        hugepage_limits: [("2MB".to_string(), 4 << 20)].into(),
        ..Default::default()
    };
    g.h.apply(&cg, &r).unwrap();
    assert_eq!(g.file("", &cg, "hugetlb.2MB.max"), "4194304");
    if g.dir("", &cg).join("hugetlb.2MB.rsvd.max").exists() {
        assert_eq!(g.file("", &cg, "hugetlb.2MB.rsvd.max"), "4194304");
    }
}

/// v2: `kill_all` goes through `cgroup.kill`, which also kills a frozen cgroup.
#[test]
#[ignore = "cgroup v2 only: hack/vm-test runs it in a VM"]
fn v2_cgroup_kill_of_a_frozen_cgroup() {
    if !require_root(&["sh", "sleep"]) {
        return;
    }
    let g = Guard::new("crustcg2k");
    assert_eq!(g.h.version(), Version::V2, "needs a cgroup v2 host");
    let cg = g.path("k");
    let script = "sleep 60 & sleep 60 & wait";
    let mut child = g.start_in(&cg, script, Stdio::null(), Stdio::null());
    assert!(g.dir("", &cg).join("cgroup.kill").exists());
    eventually(Duration::from_secs(30), "sh and two sleeps", || {
        g.h.procs(&cg).unwrap().len() == 3
    });
    g.h.freeze(&cg).unwrap();
    g.h.kill_all(&cg).unwrap();
    assert_eq!(g.h.procs(&cg).unwrap(), Vec::<i32>::new());
    assert_eq!(child.wait().unwrap().signal(), Some(libc::SIGKILL));
    g.h.remove(&cg).unwrap();
    assert!(!g.h.exists(&cg));
}

/// v2: a controller the parent does not enable (not delegated) has no files in the
/// cgroup: a limit or unified key for it is refused naming the controller, limits of
/// the others still apply, and `has_controller` / `hugetlb_unavailable` say so.
#[test]
#[ignore = "cgroup v2 only: hack/vm-test runs it in a VM"]
fn v2_not_delegated_controller_is_named() {
    if !require_root(&[]) {
        return;
    }
    let g = Guard::new("crustcg2n");
    assert_eq!(g.h.version(), Version::V2, "needs a cgroup v2 host");
    let parent = g.path("p");
    let cg = g.path("p/c");
    g.h.create(&cg).unwrap();
    assert!(g.h.has_controller("pids", &cg));
    // Take pids (and hugetlb, where the kernel has it) back from the child.
    let control = g.dir("", &parent).join("cgroup.subtree_control");
    let mut off = vec!["-pids"];
    if g.h.has_controller("hugetlb", &cg) {
        off.push("-hugetlb");
    }
    for c in off {
        std::fs::write(&control, c).unwrap_or_else(|e| panic!("{c}: {e}"));
    }
    assert!(!g.h.has_controller("pids", &cg));
    assert!(!g.h.has_controller("hugetlb", &cg));
    assert!(g.h.has_controller("memory", &cg));
    assert!(g.h.hugetlb_unavailable(&cg).is_some());
    let expect = format!(
        "cgroup {cg}: no pids controller: {} does not enable it (not delegated)",
        control.display()
    );
    let r = Resources {
        pids_limit: Some(10),
        ..Default::default()
    };
    assert_eq!(g.h.apply(&cg, &r).unwrap_err().to_string(), expect);
    let r = Resources {
        unified: [("pids.max".to_string(), "10".to_string())].into(),
        ..Default::default()
    };
    assert_eq!(g.h.apply(&cg, &r).unwrap_err().to_string(), expect);
    let r = Resources {
        memory_limit: Some(64 * MIB),
        cpu_shares: Some(2),
        cpu_period: Some(100_000),
        ..Default::default()
    };
    g.h.apply(&cg, &r).unwrap();
    assert_eq!(g.file("", &cg, "memory.max"), (64 * MIB).to_string());
    assert_eq!(g.file("", &cg, "cpu.max"), "max 100000");
}
