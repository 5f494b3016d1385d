//! `/dev` in the container (before `pivot_root`, under the root fd): the default nodes
//! (`null`, `zero`, `full`, `random`, `urandom`, `tty`) and the spec's devices by
//! `mknod`, falling back to a bind mount of the host's node where `mknod` is refused;
//! then `ptmx -> pts/ptmx` (the container's own devpts instance), `shm`, and the `fd`,
//! `stdin`, `stdout`, `stderr` (and `core`) symlinks into `/proc/self`.
//!
//! The defaults and symlinks are skipped when `/dev` is a bind mount (the caller
//! brought its own); the spec's devices are always made.

use std::ffi::{CString, OsStr};
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use nix::mount::{mount, MsFlags};

use super::channel::Step;
use super::init::{At, Fail};
use super::resolve::{fd_path, open_in_root, Create};
use super::rootfs::symlink_at;
use super::spec::{DevicePlan, Plan};

const SYMLINKS: [(&str, &str); 4] = [
    ("fd", "/proc/self/fd"),
    ("stdin", "/proc/self/fd/0"),
    ("stdout", "/proc/self/fd/1"),
    ("stderr", "/proc/self/fd/2"),
];

fn cstr(s: &OsStr) -> io::Result<CString> {
    CString::new(s.as_bytes()).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))
}

fn check(rc: libc::c_int) -> io::Result<()> {
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Makes one node, or binds the host's node of the same path over an empty file.
fn make(root: BorrowedFd<'_>, d: &DevicePlan) -> io::Result<()> {
    let parent = d.path.parent().unwrap_or(Path::new("/"));
    let name = d
        .path
        .file_name()
        .ok_or_else(|| io::Error::from_raw_os_error(libc::EINVAL))?;
    let (dir, _) = open_in_root(root, parent, Create::Dir)?;
    let cname = cstr(name)?;
    let dirfd = dir.as_raw_fd();
    // SAFETY: *at calls on a dir fd we hold with a NUL-terminated name.
    let rc = unsafe {
        libc::mknodat(
            dirfd,
            cname.as_ptr(),
            d.kind | d.mode,
            libc::makedev(d.major, d.minor),
        )
    };
    if rc != 0 {
        let e = io::Error::last_os_error();
        match e.raw_os_error() {
            // Already there (a rootfs with its own /dev): left as it is, like runc.
            Some(libc::EEXIST) => return Ok(()),
            Some(libc::EPERM) => {
                let (target, _) = open_in_root(root, &d.path, Create::File)?;
                mount(
                    Some(&d.path),
                    &fd_path(target.as_fd()),
                    None::<&str>,
                    MsFlags::MS_BIND,
                    None::<&str>,
                )?;
                return Ok(());
            }
            _ => return Err(e),
        }
    }
    // SAFETY: as above; the umask is 0 during setup, the chmod is for certainty.
    unsafe {
        check(libc::fchownat(
            dirfd,
            cname.as_ptr(),
            d.uid,
            d.gid,
            libc::AT_SYMLINK_NOFOLLOW,
        ))?;
        check(libc::fchmodat(dirfd, cname.as_ptr(), d.mode, 0))?;
    }
    Ok(())
}

pub(crate) fn populate(p: &Plan, root: BorrowedFd<'_>) -> Result<(), Fail> {
    for d in &p.devices {
        make(root, d).at(Step::Device, d.path.display())?;
    }
    if !p.setup_dev {
        return Ok(());
    }
    let (dev, _) =
        open_in_root(root, Path::new("/dev"), Create::Dir).at(Step::DevSymlink, "/dev")?;
    let mut links: Vec<(&str, &str)> = SYMLINKS.to_vec();
    if Path::new("/proc/kcore").exists() {
        links.push(("core", "/proc/kcore"));
    }
    for (name, target) in links {
        symlink_at(Path::new(target), dev.as_fd(), OsStr::new(name))
            .at(Step::DevSymlink, format!("/dev/{name}"))?;
    }
    // ptmx: whatever the image has there gives way to the devpts instance's.
    let ptmx = c"ptmx";
    // SAFETY: unlinkat on a dir fd we hold.
    let rc = unsafe { libc::unlinkat(dev.as_raw_fd(), ptmx.as_ptr(), 0) };
    if rc != 0 && io::Error::last_os_error().raw_os_error() != Some(libc::ENOENT) {
        return Err(io::Error::last_os_error()).at(Step::DevSymlink, "/dev/ptmx");
    }
    symlink_at(Path::new("pts/ptmx"), dev.as_fd(), OsStr::new("ptmx"))
        .at(Step::DevSymlink, "/dev/ptmx")?;
    // shm: a mount point for the spec's /dev/shm tmpfs, or a plain directory.
    // SAFETY: mkdirat on a dir fd we hold.
    let rc = unsafe { libc::mkdirat(dev.as_raw_fd(), c"shm".as_ptr(), 0o1777) };
    if rc != 0 && io::Error::last_os_error().raw_os_error() != Some(libc::EEXIST) {
        return Err(io::Error::last_os_error()).at(Step::DevSymlink, "/dev/shm");
    }
    Ok(())
}
