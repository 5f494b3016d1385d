//! What a node stack costs the node, for the benchmarks that run one through a real
//! control plane (`pods`, `density`): each daemon's memory from `/proc` and from its
//! memory cgroup, and the CPU it spends. Each bench includes this with `mod stack;`
//! and uses part of it.
#![allow(dead_code)]

use crust_e2e::cluster::agent_cgroups;

/// What a bench's cluster with containerd beside crust needs on the machine.
pub const CLUSTER_TOOLS: [&str; 11] = [
    "ip",
    "nsenter",
    "unshare",
    "iptables",
    "busybox",
    "docker-registry",
    "skopeo",
    "openssl",
    "containerd",
    "containerd-shim-runc-v2",
    "runc",
];
use std::collections::HashMap;
use std::time::Duration;

/// One process's memory, or a sum over processes (KiB), from `/proc/<pid>/smaps_rollup`:
/// the resident set (RSS), its anonymous part (`Anonymous`: heap, stacks, arenas; the
/// rest of the RSS is file pages, the executable, libraries and shared memory, which
/// the kernel can drop and read again) and the proportional share (PSS: each page
/// divided among the processes that map it).
#[derive(Clone, Copy, Default)]
pub struct Mem {
    pub rss: u64,
    pub anon: u64,
    pub pss: u64,
}

impl Mem {
    pub fn of(pid: u32) -> Mem {
        let text = std::fs::read_to_string(format!("/proc/{pid}/smaps_rollup")).unwrap_or_default();
        let field = |k: &str| {
            text.lines()
                .find_map(|l| l.strip_prefix(k))
                .and_then(|r| r.split_whitespace().next())
                .and_then(|n| n.parse().ok())
                .unwrap_or(0)
        };
        Mem {
            rss: field("Rss:"),
            anon: field("Anonymous:"),
            pss: field("Pss:"),
        }
    }

    pub fn sum(pids: &[u32]) -> Mem {
        pids.iter()
            .map(|p| Mem::of(*p))
            .fold(Mem::default(), |a, m| a.plus(m))
    }

    pub fn plus(self, o: Mem) -> Mem {
        Mem {
            rss: self.rss + o.rss,
            anon: self.anon + o.anon,
            pss: self.pss + o.pss,
        }
    }

    /// The file pages of the RSS.
    pub fn file(&self) -> u64 {
        self.rss.saturating_sub(self.anon)
    }
}

/// A daemon and what it forked and keeps (containerd's shims, crustd's monitors): the
/// pids of each, found anew at every sample, and the daemon's memory cgroup.
pub struct Daemon<'a> {
    pub pids: Box<dyn Fn() -> (Vec<u32>, Vec<u32>) + 'a>,
    pub cgroup: Option<&'a std::path::Path>,
}

/// What one sample (or the median of several) found of a [`Daemon`].
#[derive(Clone, Copy, Default)]
pub struct Figures {
    pub main: Mem,
    pub helpers: Mem,
    pub helpers_n: u64,
    /// Its cgroup's working set (usage less inactive file pages) and anonymous memory,
    /// KiB; `None` without a memory cgroup of its own.
    pub cgroup: Option<(u64, u64)>,
    /// The kernel memory within that working set, KiB, where the kernel says.
    pub kernel: Option<u64>,
}

impl Figures {
    pub fn total(&self) -> Mem {
        self.main.plus(self.helpers)
    }
    pub fn working_set(&self) -> Option<u64> {
        self.cgroup.map(|c| c.0)
    }
    pub fn cgroup_anon(&self) -> Option<u64> {
        self.cgroup.map(|c| c.1)
    }
}

pub fn sample(d: &Daemon) -> Figures {
    let (main, helpers) = (d.pids)();
    let usage = d.cgroup.and_then(agent_cgroups::usage);
    Figures {
        main: Mem::sum(&main),
        helpers: Mem::sum(&helpers),
        helpers_n: helpers.len() as u64,
        cgroup: usage.map(|u| (u.working_set() / 1024, u.anon / 1024)),
        kernel: usage.and_then(|u| u.kernel).map(|k| k / 1024),
    }
}

/// utime + stime of a process so far, in seconds (`/proc/<pid>/stat`); None once gone.
pub fn cpu_secs(pid: u32) -> Option<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // After the command's closing parenthesis: state is field 3, utime 14, stime 15.
    let f: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
    let ticks: u64 = f.get(11)?.parse::<u64>().ok()? + f.get(12)?.parse::<u64>().ok()?;
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as f64;
    Some(ticks as f64 / hz)
}

/// utime + stime of a process and of its children it has reaped (`cutime`, `cstime`:
/// the CNI plugins a runtime ran, the runc a shim ran), in seconds; None once gone.
pub fn cpu_with_children(pid: u32) -> Option<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let f: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
    let mut ticks = 0u64;
    for i in 11..15 {
        ticks += f.get(i)?.parse::<u64>().ok()?;
    }
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as f64;
    Some(ticks as f64 / hz)
}

/// CPU seconds each daemon (its main processes, its helpers) spent over `span`, counted
/// for the processes there at both ends.
pub fn idle_cpu(daemons: &[Daemon], span: Duration) -> Vec<(f64, f64)> {
    let take = |pids: &[u32]| -> HashMap<u32, f64> {
        pids.iter()
            .filter_map(|p| Some((*p, cpu_secs(*p)?)))
            .collect()
    };
    let before: Vec<(HashMap<u32, f64>, HashMap<u32, f64>)> = daemons
        .iter()
        .map(|d| {
            let (m, h) = (d.pids)();
            (take(&m), take(&h))
        })
        .collect();
    std::thread::sleep(span);
    let spent = |b: &HashMap<u32, f64>| -> f64 {
        b.iter()
            .filter_map(|(p, t0)| Some(cpu_secs(*p)? - t0))
            .sum()
    };
    before.iter().map(|(m, h)| (spent(m), spent(h))).collect()
}

/// Each daemon sampled `n` times 2 s apart (all at the same instants), the median of
/// each figure: one sample can land on a Go GC cycle, a housekeeping pass or a stats
/// request.
pub fn sample_median(daemons: &[Daemon], n: usize) -> Vec<Figures> {
    let mut samples: Vec<Vec<Figures>> = vec![vec![]; daemons.len()];
    for i in 0..n {
        if i > 0 {
            std::thread::sleep(Duration::from_secs(2));
        }
        for (s, d) in samples.iter_mut().zip(daemons) {
            s.push(sample(d));
        }
    }
    samples.iter().map(|s| median(s)).collect()
}

pub fn median(samples: &[Figures]) -> Figures {
    let med = |f: &dyn Fn(&Figures) -> Option<u64>| {
        let mut v: Vec<u64> = samples.iter().filter_map(f).collect();
        v.sort();
        v.get(v.len() / 2).copied()
    };
    let mem = |g: fn(&Figures) -> Mem| Mem {
        rss: med(&|s| Some(g(s).rss)).unwrap_or(0),
        anon: med(&|s| Some(g(s).anon)).unwrap_or(0),
        pss: med(&|s| Some(g(s).pss)).unwrap_or(0),
    };
    Figures {
        main: mem(|s| s.main),
        helpers: mem(|s| s.helpers),
        helpers_n: med(&|s| Some(s.helpers_n)).unwrap_or(0),
        cgroup: med(&|s| s.working_set()).zip(med(&|s| s.cgroup_anon())),
        kernel: med(&|s| s.kernel),
    }
}

/// The processes in the cgroup at `dir`, counted by name (`1 containerd, 31
/// containerd-shim-runc-v2`): what its figures cover.
pub fn cgroup_procs(dir: &std::path::Path) -> String {
    let mut names: Vec<(String, usize)> = vec![];
    for pid in agent_cgroups::procs(dir) {
        let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default();
        let comm = comm.trim().to_string();
        match names.iter_mut().find(|(n, _)| *n == comm) {
            Some((_, k)) => *k += 1,
            None => names.push((comm, 1)),
        }
    }
    let list: Vec<String> = names.iter().map(|(n, k)| format!("{k} {n}")).collect();
    if list.is_empty() {
        "none".into()
    } else {
        list.join(", ")
    }
}

/// Where a process's resident memory is (KiB of RSS from `/proc/<pid>/smaps`), by
/// mapping: its own executable's mappings (text and data, with the anonymous pages of
/// its relocated data, which `smaps_rollup`'s `Anonymous` counts), other files (shared
/// libraries), anonymous mappings (heap, arenas, stacks), and its thread count.
pub fn breakdown(pid: u32) -> String {
    let exe = std::fs::read_link(format!("/proc/{pid}/exe")).unwrap_or_default();
    let text = std::fs::read_to_string(format!("/proc/{pid}/smaps")).unwrap_or_default();
    let (mut own, mut files, mut anon) = (0u64, 0u64, 0u64);
    let mut path = String::new();
    for l in text.lines() {
        let mut w = l.split_whitespace();
        let first = w.next().unwrap_or("");
        if first.contains('-') && !first.ends_with(':') {
            // A mapping's header: range, perms, offset, dev, inode, path.
            path = w.nth(4).unwrap_or("").to_string();
        } else if first == "Rss:" {
            let kib: u64 = w.next().and_then(|n| n.parse().ok()).unwrap_or(0);
            if path.starts_with('/') && std::path::Path::new(&path) == exe {
                own += kib;
            } else if path.starts_with('/') {
                files += kib;
            } else {
                anon += kib;
            }
        }
    }
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let threads = status
        .lines()
        .find_map(|l| l.strip_prefix("Threads:"))
        .map_or("?", str::trim)
        .to_string();
    format!(
        "executable {}, other files {}, anonymous mappings {}; {threads} threads",
        mib(own),
        mib(files),
        mib(anon)
    )
}

/// How many other processes run the executable of `pid` (another cluster's kubelet
/// beside the bench's, say): they share its pages, which lowers its PSS.
pub fn sharers(pid: u32) -> usize {
    let exe = |p: u32| std::fs::read_link(format!("/proc/{p}/exe")).ok();
    let Some(mine) = exe(pid) else { return 0 };
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| e.file_name().to_string_lossy().parse::<u32>().ok())
        .filter(|p| *p != pid && exe(*p).as_ref() == Some(&mine))
        .count()
}

/// The pids whose command line starts with `prog` (a path ending in it) and names `arg`.
pub fn pids_of(prog: &str, arg: &str) -> Vec<u32> {
    let mut v = vec![];
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let cmd = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
        let args: Vec<String> = cmd
            .split(|b| *b == 0)
            .map(|a| String::from_utf8_lossy(a).into_owned())
            .collect();
        if args.first().is_some_and(|a| a.ends_with(prog)) && args.iter().any(|a| a.contains(arg)) {
            v.push(pid);
        }
    }
    v
}

pub fn mib(kib: u64) -> String {
    format!("{:.1} MiB", kib as f64 / 1024.0)
}

pub fn mib_or_na(kib: Option<u64>) -> String {
    kib.map_or_else(|| "n/a".into(), mib)
}

/// `a / b` with three decimals, `n/a` without either.
pub fn ratio(a: Option<u64>, b: Option<u64>) -> String {
    match (a, b) {
        (Some(a), Some(b)) if b > 0 => format!("{:.3}", a as f64 / b as f64),
        _ => "n/a".into(),
    }
}

/// The pids whose command name (`/proc/<pid>/comm`) is `comm` and whose memory cgroup
/// lies below `under` (a cgroup path from the hierarchy's root, a stack's
/// `--cgroup-root`): one node's pauses, say, and not another's.
pub fn pids_in(comm: &str, under: &str) -> Vec<u32> {
    let under = under.trim_matches('/');
    let mut v = vec![];
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let c = std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default();
        if c.trim() != comm {
            continue;
        }
        let cg = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).unwrap_or_default();
        if cg.lines().any(|l| l.contains(&format!("/{under}/"))) {
            v.push(pid);
        }
    }
    v
}

/// A pod Running with each of its containers running (as a watch event shows it).
pub fn running(p: &serde_json::Value) -> bool {
    p["status"]["phase"] == "Running"
        && p["status"]["containerStatuses"]
            .as_array()
            .is_some_and(|a| !a.is_empty() && a.iter().all(|s| s["state"]["running"].is_object()))
}
