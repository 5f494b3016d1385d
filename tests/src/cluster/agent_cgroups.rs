//! Each node agent and runtime of a [`Cluster`](super::Cluster) in a memory cgroup of its
//! own (with [`Options::agent_cgroups`](super::Options::agent_cgroups), for the pods
//! benchmark), and that cgroup's figures as the kubelet and cAdvisor read a container's:
//! what the node pays for each daemon.
//!
//! - The memory controller is taken where the host has it: v1's `memory` hierarchy (a
//!   hybrid host's unified tree has no memory controller), else cgroup v2, with `memory`
//!   enabled in `cgroup.subtree_control` from the suite's own cgroup down (where the
//!   suite's cgroup cannot enable it, the groups have no memory files and the figures are
//!   missing).
//! - A daemon joins its group between fork and exec (it writes `0`, itself, to the
//!   group's `cgroup.procs`), so every page it faults in is charged there from its first
//!   instruction; what it forks starts there too and stays unless it moves itself:
//!   containerd's shims and crustd's monitors stay, with runc and the CNI plugins while
//!   they run; the containers' inits move into their pod cgroups.
//! - A file page is charged to the cgroup that first reads it into the page cache. An
//!   executable already cached (by the build, by an earlier run) would be charged to
//!   someone else, so [`uncache`] drops each daemon's executable from the page cache
//!   before the daemons start, as after a node's boot; pages another process maps (a
//!   second cluster's kubelet on the same machine) stay where they are charged.

use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The memory controller's mount: (mount dir, whether it is cgroup v2).
pub(crate) fn memory_mount() -> Option<(PathBuf, bool)> {
    let mounts = super::cgroup_mounts();
    if let Some((_, dir)) = mounts
        .iter()
        .find(|(c, _)| c.split(',').any(|c| c == "memory"))
    {
        return Some((dir.clone(), false));
    }
    let (_, dir) = mounts.into_iter().find(|(c, _)| c.is_empty())?;
    let ctrls = std::fs::read_to_string(dir.join("cgroup.controllers")).unwrap_or_default();
    ctrls
        .split_whitespace()
        .any(|c| c == "memory")
        .then_some((dir, true))
}

/// Makes cgroup `path` (from the root of the hierarchy mounted at `mount`) and the
/// missing ancestors, noting each directory it made in `made`; on v2, enables `memory`
/// in the `subtree_control` of the deepest existing ancestor and of each level made.
/// Returns the cgroup's directory.
pub(crate) fn make(mount: &Path, v2: bool, path: &str, made: &mut Vec<PathBuf>) -> PathBuf {
    let mut dir = mount.to_path_buf();
    for comp in path.trim_start_matches('/').split('/') {
        let parent = dir.clone();
        dir.push(comp);
        if dir.is_dir() {
            continue;
        }
        if v2 {
            // EBUSY (the suite's own cgroup holds processes) or ENOENT (no memory
            // controller above): the figures will be missing, which the bench says.
            let _ = std::fs::write(parent.join("cgroup.subtree_control"), "+memory");
        }
        std::fs::create_dir(&dir)
            .unwrap_or_else(|e| panic!("making cgroup {}: {e}", dir.display()));
        made.push(dir.clone());
    }
    dir
}

/// Has `cmd`'s process join the cgroup at `dir` before it execs.
pub(crate) fn join_on_exec(cmd: &mut Command, dir: &Path) {
    let procs = std::ffi::CString::new(dir.join("cgroup.procs").as_os_str().as_bytes())
        .expect("a cgroup path without NUL");
    // SAFETY: only async-signal-safe calls between fork and exec (open, write, close;
    // the error is errno's value, no allocation).
    unsafe {
        use std::os::unix::process::CommandExt;
        cmd.pre_exec(move || {
            let fd = libc::open(procs.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC);
            if fd < 0 {
                return Err(std::io::Error::last_os_error());
            }
            let n = libc::write(fd, b"0".as_ptr().cast(), 1);
            let err = std::io::Error::last_os_error();
            libc::close(fd);
            if n == 1 {
                Ok(())
            } else {
                Err(err)
            }
        });
    }
}

/// Drops the clean pages of the file at `path` from the page cache (those no process
/// maps), so that the next reader is charged for them. Best effort.
pub(crate) fn uncache(path: &Path) {
    use std::os::fd::AsRawFd;
    if let Ok(f) = std::fs::File::open(path) {
        // SAFETY: fadvise on a descriptor we own; it only drops cached pages.
        unsafe { libc::posix_fadvise(f.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
    }
}

/// A memory cgroup's figures, in bytes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Usage {
    /// What is charged to the cgroup: v2 `memory.current`, v1 `memory.usage_in_bytes`
    /// (anonymous and file pages, and kernel memory such as page tables and sockets).
    pub usage: u64,
    /// Page cache on the inactive list (`inactive_file`; v1 `total_inactive_file`).
    pub inactive_file: u64,
    /// Anonymous memory (`anon`; v1 `total_rss`, anonymous pages and swap cache).
    pub anon: u64,
    /// Kernel memory charged to the cgroup, part of `usage`: v2 `kernel` of
    /// `memory.stat` (kernel stacks, page tables, slab: the namespaces, devices, sockets
    /// and processes its members made), v1 `memory.kmem.usage_in_bytes`; `None` where
    /// the kernel does not say (v2 before 5.18, v1 without kmem accounting).
    pub kernel: Option<u64>,
}

impl Usage {
    /// The working set as the kubelet and cAdvisor define it (what eviction and
    /// `kubectl top` use): the usage less the inactive file pages, which the kernel
    /// reclaims first.
    pub fn working_set(&self) -> u64 {
        self.usage.saturating_sub(self.inactive_file)
    }
}

/// The figures of the memory cgroup at `dir` (v2 or v1), if it has them.
pub fn usage(dir: &Path) -> Option<Usage> {
    let read = |f: &str| std::fs::read_to_string(dir.join(f)).ok();
    let stat = read("memory.stat")?;
    match read("memory.current") {
        Some(current) => parse(&current, &stat, true, None),
        None => parse(
            &read("memory.usage_in_bytes")?,
            &stat,
            false,
            read("memory.kmem.usage_in_bytes").as_deref(),
        ),
    }
}

/// `kmem` is v1's `memory.kmem.usage_in_bytes`, if the cgroup has it.
fn parse(usage: &str, stat: &str, v2: bool, kmem: Option<&str>) -> Option<Usage> {
    let field = |key: &str| {
        stat.lines().find_map(|l| {
            let (k, v) = l.split_once(' ')?;
            (k == key).then(|| v.trim().parse().ok()).flatten()
        })
    };
    let (inactive, anon) = if v2 {
        ("inactive_file", "anon")
    } else {
        ("total_inactive_file", "total_rss")
    };
    Some(Usage {
        usage: usage.trim().parse().ok()?,
        inactive_file: field(inactive)?,
        anon: field(anon)?,
        kernel: if v2 {
            field("kernel")
        } else {
            // Without kmem accounting (`cgroup.memory=nokmem`) the file reads 0.
            kmem.and_then(|k| k.trim().parse().ok()).filter(|&k| k > 0)
        },
    })
}

/// The pids in the cgroup at `dir`.
pub fn procs(dir: &Path) -> Vec<u32> {
    std::fs::read_to_string(dir.join("cgroup.procs"))
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.trim().parse().ok())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn v2_working_set_is_current_less_inactive_file() {
        let stat =
            "anon 4096000\nfile 2048000\nkernel 900000\nanon_thp 0\nactive_file 1024000\ninactive_file 1000000\n";
        let u = parse("7000000\n", stat, true, None).unwrap();
        assert_eq!(
            u,
            Usage {
                usage: 7_000_000,
                inactive_file: 1_000_000,
                anon: 4_096_000,
                kernel: Some(900_000),
            }
        );
        assert_eq!(u.working_set(), 6_000_000);
    }

    #[test]
    fn v1_reads_the_hierarchical_totals() {
        let stat = "cache 10\nrss 20\nrss_huge 0\ninactive_file 5\ntotal_cache 300\ntotal_rss 200\ntotal_rss_huge 0\ntotal_inactive_file 100\n";
        let u = parse("600", stat, false, Some("150\n")).unwrap();
        assert_eq!((u.anon, u.inactive_file, u.working_set()), (200, 100, 500));
        assert_eq!(u.kernel, Some(150));
        assert_eq!(parse("600", stat, false, Some("0\n")).unwrap().kernel, None);
        assert_eq!(parse("600", stat, false, None).unwrap().kernel, None);
    }

    #[test]
    fn missing_figures_are_none_and_working_set_never_negative() {
        assert_eq!(parse("600", "anon_thp 1\n", true, None), None);
        assert_eq!(parse("", "anon 1\ninactive_file 1\n", true, None), None);
        let u = parse("10", "anon 1\ninactive_file 20\n", true, None).unwrap();
        assert_eq!(u.working_set(), 0);
        assert_eq!(u.kernel, None);
    }
}
