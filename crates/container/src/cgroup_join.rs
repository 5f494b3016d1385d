//! Putting a new process (a container's init, an exec, a pause) into its cgroups
//! without the kernel's most expensive path.
//!
//! Moving a process by writing its pid to `cgroup.procs` write-locks the kernel's
//! global `cgroup_threadgroup_rwsem`, and that lock waits for an RCU grace period when
//! nobody took it recently: 5–25 ms on these 2-core machines, the largest single cost
//! of a container start (runc and crun pay it too). Two moves avoid the lock:
//! - cgroup v1: a single-threaded process writes `0` (itself) to the hierarchy's
//!   `tasks` file. Moving one thread that is the writer needs no threadgroup
//!   stability, and the kernel (6.x) skips the global lock for it; older kernels take
//!   it as before, so nothing is lost there.
//! - cgroup v2 (and the cgroup2 mount of a hybrid host): `clone3` with
//!   `CLONE_INTO_CGROUP` (5.7+) starts the child in the cgroup, which takes no write
//!   lock at all. Where the kernel refuses it, the cloning process writes `0` to
//!   `cgroup.procs` first (the slow, always-working move).
//!
//! A child cloned into a cgroup must create or join a cgroup namespace itself, after it
//! is in its cgroup: the kernel roots a namespace made at clone time at the parent's
//! cgroup, not the one `CLONE_INTO_CGROUP` names.

use std::fs::OpenOptions;
use std::io;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

/// `statfs` magic of cgroup2.
const CGROUP2_SUPER_MAGIC: i64 = 0x6367_7270;

/// A raw fd with the path it was opened from (for messages), as a forked child uses it.
pub(crate) type RawFile = (RawFd, PathBuf);

/// The open files that put a process into one cgroup's directories.
#[derive(Debug, Default)]
pub(crate) struct CgroupJoin {
    /// v1 hierarchies: each `tasks` file, opened for writing.
    pub tasks: Vec<(OwnedFd, PathBuf)>,
    /// The cgroup2 directory (`O_PATH`): for `CLONE_INTO_CGROUP`.
    pub unified: Option<(OwnedFd, PathBuf)>,
}

impl CgroupJoin {
    /// Opens what joining the cgroup directories `dirs` needs (one per v1 hierarchy,
    /// plus or only the cgroup2 one). An error names the file.
    pub fn open(dirs: &[PathBuf]) -> Result<CgroupJoin, (PathBuf, io::Error)> {
        let mut j = CgroupJoin::default();
        let mut dirs = dirs.to_vec();
        dirs.sort();
        dirs.dedup();
        for d in dirs {
            if is_cgroup2(&d).map_err(|e| (d.clone(), e))? {
                let f = OpenOptions::new()
                    .read(true)
                    .custom_flags(libc::O_PATH | libc::O_DIRECTORY | libc::O_CLOEXEC)
                    .open(&d)
                    .map_err(|e| (d.clone(), e))?;
                j.unified = Some((f.into(), d));
            } else {
                let path = d.join("tasks");
                let f = OpenOptions::new()
                    .write(true)
                    .custom_flags(libc::O_CLOEXEC)
                    .open(&path)
                    .map_err(|e| (path.clone(), e))?;
                j.tasks.push((f.into(), path));
            }
        }
        Ok(j)
    }

    /// The raw fds, for a forked child: v1 `tasks` files and the cgroup2 directory.
    pub fn raw(&self) -> (Vec<RawFile>, Option<RawFile>) {
        (
            self.tasks
                .iter()
                .map(|(f, p)| (f.as_raw_fd(), p.clone()))
                .collect(),
            self.unified
                .as_ref()
                .map(|(f, p)| (f.as_raw_fd(), p.clone())),
        )
    }
}

fn is_cgroup2(dir: &Path) -> io::Result<bool> {
    Ok(nix::sys::statfs::statfs(dir)?.filesystem_type().0 as i64 == CGROUP2_SUPER_MAGIC)
}

/// Moves the calling thread, which must be its process's only one, into the v1
/// cgroup whose `tasks` file is `fd`. Async-signal-safe (a forked child calls it).
pub(crate) fn move_self_v1(fd: RawFd) -> io::Result<()> {
    // SAFETY: a write from a static buffer to an fd the caller holds.
    if unsafe { libc::write(fd, b"0".as_ptr().cast(), 1) } == 1 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Moves the calling process into the cgroup2 directory `dir_fd` by its
/// `cgroup.procs`: the fallback where `CLONE_INTO_CGROUP` is refused. Async-signal-safe.
pub(crate) fn move_self_v2(dir_fd: RawFd) -> io::Result<()> {
    // SAFETY: openat with a NUL-terminated literal on an fd the caller holds; write from
    // a static buffer; close of the fd just opened.
    unsafe {
        let fd = libc::openat(
            dir_fd,
            c"cgroup.procs".as_ptr(),
            libc::O_WRONLY | libc::O_CLOEXEC,
        );
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        let rc = libc::write(fd, b"0".as_ptr().cast(), 1);
        let e = io::Error::last_os_error();
        libc::close(fd);
        if rc == 1 {
            Ok(())
        } else {
            Err(e)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_directory_that_is_no_cgroup_is_taken_for_v1_and_named_when_it_lacks_tasks() {
        let d = std::env::temp_dir().join(format!("crust-cgjoin-{}", std::process::id()));
        std::fs::create_dir_all(&d).unwrap();
        let e = CgroupJoin::open(std::slice::from_ref(&d)).unwrap_err();
        assert_eq!(e.0, d.join("tasks"));
        std::fs::write(d.join("tasks"), "").unwrap();
        let j = CgroupJoin::open(&[d.clone(), d.clone()]).unwrap();
        assert_eq!(j.tasks.len(), 1, "duplicates are joined once");
        assert!(j.unified.is_none());
        std::fs::remove_dir_all(&d).unwrap();
    }
}
