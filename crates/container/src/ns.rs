//! Namespace pins: a namespace lives as long as a process is in it or something holds a
//! reference to it. Bind-mounting `/proc/PID/ns/<kind>` onto a file (what `ip netns add`
//! does) is such a reference, so a pod's network namespace survives its pause process
//! (crashes, restarts of `crustd`) until the sandbox is removed, and CNI plugins and
//! `nsenter --net=PATH` can name it by path.

use std::fmt;
use std::fs::{self, OpenOptions};
use std::io;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use nix::errno::Errno;
use nix::mount::{mount, umount2, MntFlags, MsFlags};
use nix::sys::statfs::{statfs, NSFS_MAGIC};

use crate::error::{Error, Result};

/// The namespaces a pod sandbox holds for its containers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum NsKind {
    Net,
    Ipc,
    Uts,
    Pid,
    /// A pod's user namespace (`hostUsers: false`), see `crate::userns`.
    User,
}

impl NsKind {
    /// The namespaces a pause makes new, each unless the pod shares the node's; a
    /// `User` one only comes with `hostUsers: false`.
    pub const ALL: [NsKind; 4] = [NsKind::Net, NsKind::Ipc, NsKind::Uts, NsKind::Pid];

    /// The entry's name under `/proc/PID/ns/`.
    pub fn proc_name(self) -> &'static str {
        match self {
            NsKind::Net => "net",
            NsKind::Ipc => "ipc",
            NsKind::Uts => "uts",
            NsKind::Pid => "pid",
            NsKind::User => "user",
        }
    }

    /// The `CLONE_NEW*` flag that creates one (for `unshare`, `clone`, `setns`).
    pub fn clone_flag(self) -> libc::c_int {
        match self {
            NsKind::Net => libc::CLONE_NEWNET,
            NsKind::Ipc => libc::CLONE_NEWIPC,
            NsKind::Uts => libc::CLONE_NEWUTS,
            NsKind::Pid => libc::CLONE_NEWPID,
            NsKind::User => libc::CLONE_NEWUSER,
        }
    }

    /// `/proc/PID/ns/<name>`.
    pub fn proc_path(self, pid: i32) -> PathBuf {
        PathBuf::from(format!("/proc/{pid}/ns/{}", self.proc_name()))
    }
}

impl fmt::Display for NsKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.proc_name())
    }
}

/// Runs `f` on a new thread inside the namespace pinned at `pin`, so no thread of the
/// caller (least of all an async runtime's worker) is ever left in a pod's namespace.
/// The kernel refuses a namespace file of another kind than `kind`.
pub fn run_in<T: Send>(pin: &Path, kind: NsKind, f: impl FnOnce() -> T + Send) -> Result<T> {
    let err = |source: io::Error| Error::EnterNamespace {
        path: pin.to_path_buf(),
        source,
    };
    let file = fs::File::open(pin).map_err(err)?;
    std::thread::scope(|s| {
        // A thread that cannot be had (a pid limit) is an error, not a panic.
        std::thread::Builder::new()
            .spawn_scoped(s, || {
                nix::sched::setns(
                    std::os::fd::AsFd::as_fd(&file),
                    nix::sched::CloneFlags::from_bits_truncate(kind.clone_flag()),
                )
                .map_err(|e| err(e.into()))?;
                Ok(f())
            })
            .map_err(err)?
            .join()
            .unwrap_or_else(|_| Err(err(io::Error::other("the namespace's thread panicked"))))
    })
}

/// Sets `lo` up in the network namespace pinned at `netns` (what the `loopback` CNI
/// plugin does).
pub fn loopback_up(netns: &Path) -> Result<()> {
    run_in(netns, NsKind::Net, || -> io::Result<()> {
        // SAFETY: plain socket/ioctl calls on a zeroed ifreq naming "lo"; the fd is
        // closed below.
        unsafe {
            let fd = libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0);
            if fd < 0 {
                return Err(io::Error::last_os_error());
            }
            let mut req: libc::ifreq = std::mem::zeroed();
            for (i, b) in b"lo\0".iter().enumerate() {
                req.ifr_name[i] = *b as libc::c_char;
            }
            let mut rc = libc::ioctl(fd, libc::SIOCGIFFLAGS, &mut req);
            if rc == 0 {
                req.ifr_ifru.ifru_flags |= libc::IFF_UP as libc::c_short;
                rc = libc::ioctl(fd, libc::SIOCSIFFLAGS, &req);
            }
            let err = io::Error::last_os_error();
            libc::close(fd);
            if rc != 0 {
                return Err(err);
            }
        }
        Ok(())
    })?
    .map_err(|source| Error::LoopbackUp {
        netns: netns.to_path_buf(),
        source,
    })
}

/// Pins the `kind` namespace of process `pid` at `target`: creates the parent dirs and
/// an empty file there and bind-mounts `/proc/PID/ns/<kind>` onto it. Refuses a target
/// that already is a pin (stacking a second mount would make one `unpin` not enough and
/// hide which namespace is meant). On failure the file is removed again.
///
/// The mount is made in the caller's mount namespace; whether other mount namespaces
/// see it follows the propagation of the mount `target` is on.
pub fn pin(pid: i32, kind: NsKind, target: &Path) -> Result<()> {
    let err = |step: &'static str, source: io::Error| Error::Pin {
        pid,
        kind,
        target: target.to_path_buf(),
        step,
        source,
    };
    if is_pinned(target) {
        return Err(err(
            "target is already a pin",
            io::Error::from_raw_os_error(libc::EEXIST),
        ));
    }
    if let Some(parent) = target.parent().filter(|p| !p.as_os_str().is_empty()) {
        fs::create_dir_all(parent).map_err(|e| err("create parent dir", e))?;
    }
    OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o444)
        .open(target)
        .map_err(|e| err("create mount point", e))?;
    let source = kind.proc_path(pid);
    if let Err(e) = mount(
        Some(&source),
        target,
        None::<&str>,
        MsFlags::MS_BIND,
        None::<&str>,
    ) {
        let _ = fs::remove_file(target);
        return Err(err("bind mount", e.into()));
    }
    tracing::debug!(pid, %kind, target = %target.display(), "namespace pinned");
    Ok(())
}

/// Removes a pin: detaches the mount (every one, should several be stacked) and deletes
/// the file. Idempotent: a target that is not mounted or does not exist is fine, so
/// rollback and `RemovePodSandbox` can call it whatever state they find.
pub fn unpin(target: &Path) -> Result<()> {
    let err = |step: &'static str, source: io::Error| Error::Unpin {
        target: target.to_path_buf(),
        step,
        source,
    };
    // Checking first also spares an unprivileged caller EPERM on a plain file.
    for _ in 0..16 {
        if !is_pinned(target) {
            break;
        }
        match umount2(target, MntFlags::MNT_DETACH) {
            Ok(()) => {}
            // Not a mount point / no such file: nothing (left) to unmount.
            Err(Errno::EINVAL) | Err(Errno::ENOENT) => break,
            Err(e) => return Err(err("unmount", e.into())),
        }
    }
    match fs::remove_file(target) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => return Err(err("remove file", e)),
    }
    tracing::debug!(target = %target.display(), "namespace unpinned");
    Ok(())
}

/// True when `target` is a namespace file: its file system is nsfs (statfs magic
/// `0x6e736673`), which is what a pin's bind mount shows. A plain file, a missing one
/// or an unreadable path is not.
pub fn is_pinned(target: &Path) -> bool {
    statfs(target)
        .map(|s| s.filesystem_type() == NSFS_MAGIC)
        .unwrap_or(false)
}

/// The pod's `/dev/shm`: a tmpfs of `size` bytes at `target` (a directory, created),
/// bind-mounted into every container of a pod that shares the pod's IPC namespace, so
/// POSIX shared memory is shared the way System V IPC is. Idempotent.
pub fn mount_shm(target: &Path, size: u64) -> Result<()> {
    let err = |step: &'static str, source: io::Error| Error::Unpin {
        target: target.to_path_buf(),
        step,
        source,
    };
    fs::create_dir_all(target).map_err(|e| err("create shm dir", e))?;
    if is_mount_point(target) {
        return Ok(());
    }
    mount(
        Some("shm"),
        target,
        Some("tmpfs"),
        MsFlags::MS_NOSUID | MsFlags::MS_NODEV | MsFlags::MS_NOEXEC,
        Some(format!("mode=1777,size={size}").as_str()),
    )
    .map_err(|e| err("mount shm tmpfs", e.into()))
}

/// Unmounts the pod's `/dev/shm` and removes the directory. Idempotent.
pub fn unmount_shm(target: &Path) -> Result<()> {
    let err = |step: &'static str, source: io::Error| Error::Unpin {
        target: target.to_path_buf(),
        step,
        source,
    };
    for _ in 0..16 {
        if !is_mount_point(target) {
            break;
        }
        match umount2(target, MntFlags::MNT_DETACH) {
            Ok(()) => {}
            Err(Errno::EINVAL) | Err(Errno::ENOENT) => break,
            Err(e) => return Err(err("unmount shm", e.into())),
        }
    }
    match fs::remove_dir(target) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(err("remove shm dir", e)),
    }
}

/// True when `p` is a mount point: its device differs from its parent's (or it is a
/// mount of the same file system, which `/proc/self/mountinfo` would show; for the tmpfs
/// mounted here the device check suffices).
fn is_mount_point(p: &Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    let (Ok(m), Some(parent)) = (fs::symlink_metadata(p), p.parent()) else {
        return false;
    };
    fs::symlink_metadata(parent)
        .map(|pm| pm.dev() != m.dev())
        .unwrap_or(false)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn temp(tag: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("crust-ns-unit-{tag}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&d);
        fs::create_dir_all(&d).unwrap();
        d
    }

    #[test]
    fn kinds_name_their_proc_entries() {
        let names: Vec<_> = NsKind::ALL.iter().map(|k| k.to_string()).collect();
        assert_eq!(names, ["net", "ipc", "uts", "pid"]);
        assert_eq!(NsKind::User.proc_path(7), PathBuf::from("/proc/7/ns/user"));
        assert_eq!(NsKind::User.clone_flag(), libc::CLONE_NEWUSER);
        assert_eq!(NsKind::Uts.proc_path(42), PathBuf::from("/proc/42/ns/uts"));
        for k in NsKind::ALL {
            assert!(
                Path::new("/proc/self/ns").join(k.proc_name()).exists(),
                "{k}"
            );
        }
        assert_eq!(NsKind::Pid.clone_flag(), libc::CLONE_NEWPID);
    }

    /// The check is the same one `unpin` relies on, so it must tell nsfs from the rest
    /// without root: our own namespace files are nsfs.
    #[test]
    fn is_pinned_tells_nsfs_from_plain_files() {
        let d = temp("ispinned");
        let plain = d.join("plain");
        fs::write(&plain, b"").unwrap();
        assert!(!is_pinned(&plain));
        assert!(!is_pinned(&d.join("missing")));
        assert!(is_pinned(Path::new("/proc/self/ns/net")));
        fs::remove_dir_all(&d).unwrap();
    }

    /// Rollback calls unpin on whatever is there: a leftover mount point without a
    /// mount, or nothing at all.
    #[test]
    fn unpin_of_plain_or_missing_file_is_fine() {
        let d = temp("unpin");
        let plain = d.join("leftover");
        fs::write(&plain, b"").unwrap();
        unpin(&plain).unwrap();
        assert!(!plain.exists());
        unpin(&plain).unwrap();
        unpin(&d.join("a/b/c")).unwrap();
        fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn pin_of_missing_process_fails_and_leaves_nothing() {
        let d = temp("pinfail");
        let target = d.join("sub/net");
        // pid_max is at most 2^22, so this pid cannot exist.
        let e = pin(1 << 23, NsKind::Net, &target).unwrap_err();
        let msg = e.to_string();
        assert!(msg.contains(&target.display().to_string()), "{msg}");
        assert!(msg.starts_with("pin net namespace of pid 8388608"), "{msg}");
        assert!(!target.exists());
        fs::remove_dir_all(&d).unwrap();
    }
}
