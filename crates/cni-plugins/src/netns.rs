//! Doing work inside another network namespace without moving the process.
//!
//! Work runs on a dedicated, short-lived OS thread that `setns`es and then dies, so no
//! thread of ours (least of all an async worker) is ever left in the wrong namespace.
//! A netlink socket opened on such a thread stays bound to that namespace, which is
//! how the plugin talks to the container's network stack from its own thread.

use cni::{code, CniError, CniResult};
use std::fs::File;
use std::os::fd::AsFd;
use std::path::{Path, PathBuf};

/// `statfs` magic of nsfs (namespace files) and of procfs (for `/proc/PID/ns/net`).
const NSFS_MAGIC: i64 = 0x6e73_6673;
const PROC_SUPER_MAGIC: i64 = 0x9fa0;

/// An open network namespace file, such as `/run/netns/NAME` or `/proc/PID/ns/net`.
pub struct NetNs {
    file: File,
    pub path: PathBuf,
}

impl NetNs {
    /// Opens `path`; a path that does not exist is code 3 (the container is gone, so
    /// there is nothing to clean up), one that is not a namespace is code 4.
    pub fn open(path: &Path) -> CniResult<NetNs> {
        let file = File::open(path).map_err(|e| {
            let c = if e.kind() == std::io::ErrorKind::NotFound {
                code::UNKNOWN_CONTAINER
            } else {
                code::INVALID_ENVIRONMENT
            };
            CniError::new(c, format!("failed to open netns {}: {e}", path.display()))
        })?;
        let st = nix::sys::statfs::fstatfs(file.as_fd())
            .map_err(|e| CniError::env(format!("failed to stat netns {}: {e}", path.display())))?;
        let magic = st.filesystem_type().0 as i64;
        if magic != NSFS_MAGIC && magic != PROC_SUPER_MAGIC {
            return Err(CniError::env(format!(
                "{} is not a network namespace",
                path.display()
            )));
        }
        Ok(NetNs {
            file,
            path: path.to_path_buf(),
        })
    }

    /// Runs `f` on a fresh thread inside this namespace and returns what it returns.
    pub fn run<T: Send>(&self, f: impl FnOnce() -> T + Send) -> CniResult<T> {
        std::thread::scope(|s| {
            s.spawn(|| {
                nix::sched::setns(self.file.as_fd(), nix::sched::CloneFlags::CLONE_NEWNET)
                    .map_err(|e| {
                        CniError::io(format!(
                            "failed to enter netns {}: {e}",
                            self.path.display()
                        ))
                    })?;
                Ok(f())
            })
            .join()
            .unwrap_or_else(|_| Err(CniError::internal("worker thread in netns panicked")))
        })
    }

    pub fn fd(&self) -> std::os::fd::BorrowedFd<'_> {
        self.file.as_fd()
    }
}

/// Writes a sysctl of the calling thread's network namespace, e.g.
/// `net/ipv4/ip_forward`.
pub fn write_sysctl(key: &str, value: &str) -> CniResult<()> {
    let p = Path::new("/proc/sys").join(key);
    std::fs::write(&p, value)
        .map_err(|e| CniError::io(format!("failed to set sysctl {key}={value}: {e}")))
}

pub fn read_sysctl(key: &str) -> CniResult<String> {
    let p = Path::new("/proc/sys").join(key);
    std::fs::read_to_string(&p)
        .map(|s| s.trim().to_string())
        .map_err(|e| CniError::io(format!("failed to read sysctl {key}: {e}")))
}
