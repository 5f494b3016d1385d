//! The init's mount work, in the container's new mount namespace: propagation of `/`,
//! the root file system, the spec's mounts in order, `pivot_root`, and after it the
//! masked and read-only paths and the read-only root.
//!
//! Every target inside the root is resolved with [`open_in_root`] and mounted onto
//! through `/proc/self/fd/N` (the host's `/proc`, still visible before `pivot_root`),
//! so a symlink in the image cannot redirect a mount onto the host. A follow-up call
//! on the same target (a read-only remount, a propagation change) resolves it again:
//! the fd from before the mount names the directory underneath, not the new mount.
//!
//! Nothing here is ever undone on the host: these mounts live in the container's mount
//! namespace and go away with its last process.

use std::ffi::OsString;
use std::fs;
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use nix::mount::{mount, umount2, MntFlags, MsFlags};
use oci_spec::runtime::LinuxNamespaceType;

use super::cgroupfs;
use super::channel::Step;
use super::init::{At, Fail};
use super::resolve::{fd_path, open_dir, open_in_root, Create};
use super::spec::{MountKind, MountPlan, Plan};

const NONE: Option<&str> = None;

/// The mount flags a bind remount must keep (`statvfs` reports them): leaving them
/// out would clear them, which a user namespace forbids and nobody means.
fn kept_flags(target: &Path, asked: MsFlags) -> io::Result<MsFlags> {
    let st = nix::sys::statvfs::statvfs(target)?;
    let f = st.flags().bits() as libc::c_ulong;
    let mut out = MsFlags::empty();
    for (st_bit, ms) in [
        (libc::ST_NOSUID, MsFlags::MS_NOSUID),
        (libc::ST_NODEV, MsFlags::MS_NODEV),
        (libc::ST_NOEXEC, MsFlags::MS_NOEXEC),
    ] {
        if f & st_bit != 0 {
            out |= ms;
        }
    }
    let atime = MsFlags::MS_NOATIME | MsFlags::MS_RELATIME | MsFlags::MS_STRICTATIME;
    if !asked.intersects(atime) {
        for (st_bit, ms) in [
            (libc::ST_NOATIME, MsFlags::MS_NOATIME),
            (libc::ST_NODIRATIME, MsFlags::MS_NODIRATIME),
            (libc::ST_RELATIME, MsFlags::MS_RELATIME),
        ] {
            if f & st_bit != 0 {
                out |= ms;
            }
        }
    }
    Ok(out)
}

/// Remounts the bind mount at `target` with `flags` (plus the ones it must keep).
fn remount_bind(target: &Path, flags: MsFlags) -> io::Result<()> {
    let kept = kept_flags(target, flags)?;
    mount(
        NONE,
        target,
        NONE,
        MsFlags::MS_BIND | MsFlags::MS_REMOUNT | flags | kept,
        NONE,
    )?;
    Ok(())
}

/// Step 1: `/` gets `rootfsPropagation` (`rslave` by default) recursively, so nothing
/// the container mounts propagates to the host; with a shared mode the mount holding
/// the rootfs is made private, which `pivot_root` requires.
pub(crate) fn set_propagation(p: &Plan) -> Result<(), Fail> {
    mount(NONE, "/", NONE, p.rootfs_propagation, NONE).at(Step::RootfsPropagation, "/")?;
    if p.rootfs_propagation.contains(MsFlags::MS_SHARED) {
        let parent = p.rootfs.parent().unwrap_or(Path::new("/"));
        let mi = fs::read_to_string("/proc/self/mountinfo")
            .at(Step::RootfsPropagation, "/proc/self/mountinfo")?;
        let point = mi
            .lines()
            .filter_map(|l| l.split(' ').nth(4))
            .map(PathBuf::from)
            .filter(|m| parent.starts_with(m))
            .max_by_key(|m| m.as_os_str().len())
            .unwrap_or_else(|| PathBuf::from("/"));
        mount(NONE, &point, NONE, MsFlags::MS_PRIVATE, NONE)
            .at(Step::RootfsPropagation, point.display())?;
    }
    Ok(())
}

/// Step 2: the root file system becomes a mount point of its own: the caller's mount
/// (an overlay, say) when given, else a recursive bind of the directory onto itself.
/// Returns an `O_PATH` fd of it, the root every later target is resolved under.
pub(crate) fn mount_rootfs(p: &Plan, userns: Option<RawFd>) -> Result<OwnedFd, Fail> {
    let at = p.rootfs.display();
    if let (Some(m), Some(ns)) = (&p.rootfs_mount, userns) {
        if m.idmap_layers {
            idmap_layers(&m.data, ns)?;
        }
    }
    match &p.rootfs_mount {
        Some(m) => mount(
            Some(m.source.as_str()),
            &p.rootfs,
            Some(m.fstype.as_str()),
            m.flags,
            (!m.data.is_empty()).then_some(m.data.as_str()),
        )
        .map_err(|e| match e {
            nix::errno::Errno::EINVAL if m.idmap_layers => io::Error::other(format!(
                "{e}: overlayfs refused the id-mapped layers (it takes them from Linux 5.19)"
            )),
            e => e.into(),
        })
        .at(Step::MountRootfs, format!("{at} ({})", m.fstype))?,
        None => mount(
            Some(&p.rootfs),
            &p.rootfs,
            NONE,
            MsFlags::MS_BIND | MsFlags::MS_REC,
            NONE,
        )
        .at(Step::MountRootfs, &at)?,
    }
    open_dir(&p.rootfs).at(Step::OpenRootfs, at)
}

/// Each `lowerdir` of the overlay data is covered, in this mount namespace, by an
/// id-mapped mount of itself, so the overlay (which looks its layers up by path)
/// stacks the mapped ones: the image's root-owned files belong to the container's
/// root. The covers vanish from sight with `pivot_root`; the overlay keeps its own
/// references.
fn idmap_layers(data: &str, userns: RawFd) -> Result<(), Fail> {
    for dir in super::spec::overlay_lowerdirs(data) {
        let tree =
            idmapped_tree(&dir, false, false, userns).at(Step::MountRootfs, dir.display())?;
        let target = open_dir(&dir).at(Step::MountRootfs, dir.display())?;
        move_mount_onto(tree.as_fd(), target.as_fd()).at(Step::MountRootfs, dir.display())?;
    }
    Ok(())
}

const OPEN_TREE_CLONE: libc::c_uint = 1;
const MOUNT_ATTR_IDMAP: u64 = 0x0010_0000;
const MOVE_MOUNT_F_EMPTY_PATH: libc::c_uint = 0x4;
const MOVE_MOUNT_T_EMPTY_PATH: libc::c_uint = 0x40;

/// A detached copy of the mount at `source` (with the mounts below it when
/// `recursive`), id-mapped with the user namespace `userns` (every mount of the copy
/// when `recursive_idmap`). A file system that cannot be id-mapped is named in the
/// error.
fn idmapped_tree(
    source: &Path,
    recursive: bool,
    recursive_idmap: bool,
    userns: RawFd,
) -> io::Result<OwnedFd> {
    let c = std::ffi::CString::new(source.as_os_str().as_bytes())
        .map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
    let rec = |on: bool| {
        if on {
            libc::AT_RECURSIVE as libc::c_uint
        } else {
            0
        }
    };
    // SAFETY: open_tree with a NUL-terminated path; the fd it returns is ours.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_open_tree,
            libc::AT_FDCWD,
            c.as_ptr(),
            OPEN_TREE_CLONE | libc::O_CLOEXEC as libc::c_uint | rec(recursive),
        )
    };
    if fd < 0 {
        let e = io::Error::last_os_error();
        if e.raw_os_error() == Some(libc::ENOSYS) {
            return Err(io::Error::other(
                "id-mapped mounts need open_tree and mount_setattr (Linux 5.12)",
            ));
        }
        return Err(e);
    }
    // SAFETY: a fresh fd from open_tree, owned by nobody else.
    let tree = unsafe { OwnedFd::from_raw_fd(fd as RawFd) };
    let attr = MountAttr {
        attr_set: MOUNT_ATTR_IDMAP,
        attr_clr: 0,
        propagation: 0,
        userns_fd: userns as u64,
    };
    // SAFETY: mount_setattr on the fd we hold, with an empty path and a struct of the
    // size we pass.
    let r = unsafe {
        libc::syscall(
            libc::SYS_mount_setattr,
            tree.as_raw_fd(),
            c"".as_ptr(),
            libc::AT_EMPTY_PATH as libc::c_uint | rec(recursive_idmap),
            &attr as *const MountAttr,
            std::mem::size_of::<MountAttr>(),
        )
    };
    if r != 0 {
        let e = io::Error::last_os_error();
        if e.raw_os_error() == Some(libc::EINVAL) {
            let fs = nix::sys::statfs::statfs(source)
                .map(|s| format!("{:#x}", s.filesystem_type().0))
                .unwrap_or_else(|_| "unknown".into());
            return Err(io::Error::other(format!(
                "{e}: the kernel cannot id-map this file system (statfs type {fs}; tmpfs takes it from Linux 6.3, ext4, xfs and btrfs from 5.12)"
            )));
        }
        return Err(e);
    }
    Ok(tree)
}

/// Whether the kernel can id-map the file system of `path` (what the layers of a pod
/// with a user namespace need where they live), asked as critest asks: a throwaway user
/// namespace and an id-mapped copy of the mount, attached nowhere. The error says what
/// is missing.
pub fn idmapped_mounts_supported(path: &Path) -> io::Result<()> {
    let map = [crate::userns::IdMap {
        container_id: 0,
        host_id: 65536,
        size: 65536,
    }];
    let ns = crate::userns::create(&map, &map).map_err(io::Error::other)?;
    idmapped_tree(path, false, false, ns.as_raw_fd()).map(drop)
}

/// Attaches the detached mount `tree` onto the directory or file `target`.
fn move_mount_onto(tree: BorrowedFd<'_>, target: BorrowedFd<'_>) -> io::Result<()> {
    // SAFETY: move_mount between two fds we hold, with empty paths.
    let r = unsafe {
        libc::syscall(
            libc::SYS_move_mount,
            tree.as_raw_fd(),
            c"".as_ptr(),
            target.as_raw_fd(),
            c"".as_ptr(),
            MOVE_MOUNT_F_EMPTY_PATH | MOVE_MOUNT_T_EMPTY_PATH,
        )
    };
    if r != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Re-resolves a mounted target (no creation) for a follow-up call on the new mount.
fn reopen(root: BorrowedFd<'_>, dest: &Path) -> Result<OwnedFd, Fail> {
    open_in_root(root, dest, Create::No)
        .map(|(fd, _)| fd)
        .at(Step::MountTarget, dest.display())
}

/// Step 3: the spec's mounts, in order.
pub(crate) fn mount_all(p: &Plan, root: BorrowedFd<'_>, userns: Option<RawFd>) -> Result<(), Fail> {
    for m in &p.mounts {
        mount_one(p, root, m, userns)?;
    }
    Ok(())
}

fn mount_one(
    p: &Plan,
    root: BorrowedFd<'_>,
    m: &MountPlan,
    userns: Option<RawFd>,
) -> Result<(), Fail> {
    let dest = &m.destination;
    let name = dest.display();
    match &m.kind {
        MountKind::Bind { source, recursive } => {
            let src = source.display();
            let what = || format!("{name} (bind source {src})");
            let meta = fs::metadata(source).at(Step::Mount, what())?;
            let create = if meta.is_dir() {
                Create::Dir
            } else {
                Create::File
            };
            let (target, _) = open_in_root(root, dest, create).at(Step::MountTarget, &name)?;
            let mut flags = MsFlags::MS_BIND;
            if *recursive {
                flags |= MsFlags::MS_REC;
            }
            match (m.idmap, userns) {
                (Some(recursive_idmap), Some(ns)) => {
                    let tree = idmapped_tree(source, *recursive, recursive_idmap, ns)
                        .at(Step::Mount, what())?;
                    move_mount_onto(tree.as_fd(), target.as_fd()).at(Step::Mount, what())?;
                }
                _ => mount(Some(source), &fd_path(target.as_fd()), NONE, flags, NONE)
                    .at(Step::Mount, what())?,
            }
            if !m.flags.is_empty() {
                let t = reopen(root, dest)?;
                remount_bind(&fd_path(t.as_fd()), m.flags).at(Step::Mount, what())?;
            }
        }
        MountKind::Cgroup => mount_cgroup(p, root, m)?,
        MountKind::Fs { fstype, source } => {
            let (target, _) = open_in_root(root, dest, Create::Dir).at(Step::MountTarget, &name)?;
            mount(
                Some(source.as_str()),
                &fd_path(target.as_fd()),
                Some(fstype.as_str()),
                m.flags,
                (!m.data.is_empty()).then_some(m.data.as_str()),
            )
            .at(Step::Mount, format!("{name} ({fstype})"))?;
        }
    }
    for &f in &m.propagation {
        let t = reopen(root, dest)?;
        mount(NONE, &fd_path(t.as_fd()), NONE, f, NONE)
            .at(Step::Mount, format!("{name} (propagation)"))?;
    }
    if m.attr_set != 0 || m.attr_clr != 0 {
        let t = reopen(root, dest)?;
        set_recursive_attrs(t.as_fd(), m.attr_set, m.attr_clr)
            .at(Step::Mount, format!("{name} (recursive options)"))?;
    }
    Ok(())
}

/// Whether the kernel has mount_setattr(2), which the recursive options (`rro`, ...)
/// need: asked with a bad fd, it says EBADF if it exists and ENOSYS if not.
pub fn recursive_mount_options() -> bool {
    // SAFETY: mount_setattr with an invalid fd and no attributes changes nothing.
    let r = unsafe {
        libc::syscall(
            libc::SYS_mount_setattr,
            -1,
            c"".as_ptr(),
            libc::AT_EMPTY_PATH,
            std::ptr::null::<MountAttr>(),
            0usize,
        )
    };
    r == 0 || io::Error::last_os_error().raw_os_error() != Some(libc::ENOSYS)
}

/// `struct mount_attr` of mount_setattr(2).
#[repr(C)]
struct MountAttr {
    attr_set: u64,
    attr_clr: u64,
    propagation: u64,
    userns_fd: u64,
}

/// Sets and clears `MOUNT_ATTR_*` on the mount at `fd` and every mount below it: a
/// plain remount changes only the top one, so a read-only bind of a directory with
/// mounts inside would leave those writable (`rro`, the kubelet's recursiveReadOnly).
fn set_recursive_attrs(fd: BorrowedFd<'_>, set: u64, clr: u64) -> io::Result<()> {
    let attr = MountAttr {
        attr_set: set,
        attr_clr: clr,
        propagation: 0,
        userns_fd: 0,
    };
    // SAFETY: mount_setattr on an fd we hold, with an empty path and a struct of the
    // size we pass.
    let r = unsafe {
        libc::syscall(
            libc::SYS_mount_setattr,
            fd.as_raw_fd(),
            c"".as_ptr(),
            libc::AT_EMPTY_PATH | libc::AT_RECURSIVE,
            &attr as *const MountAttr,
            std::mem::size_of::<MountAttr>(),
        )
    };
    if r == 0 {
        return Ok(());
    }
    let e = io::Error::last_os_error();
    if e.raw_os_error() == Some(libc::ENOSYS) {
        return Err(io::Error::other(
            "recursive mount options need mount_setattr (Linux 5.12)",
        ));
    }
    Err(e)
}

fn mount_cgroup(p: &Plan, root: BorrowedFd<'_>, m: &MountPlan) -> Result<(), Fail> {
    let dest = &m.destination;
    let host = match &p.cgroup_host {
        Some(h) => h.clone(),
        None => cgroupfs::host().at(Step::MountCgroup, "/proc/self/mountinfo")?,
    };
    let cg = fs::read_to_string("/proc/self/cgroup").at(Step::MountCgroup, "/proc/self/cgroup")?;
    let steps = cgroupfs::plan(
        &host.hierarchies,
        &cg,
        p.is_new(LinuxNamespaceType::Cgroup),
        &host.links,
    );
    let sub = |name: &Option<OsString>| match name {
        Some(n) => dest.join(n),
        None => dest.clone(),
    };
    let mut tmpfs = false;
    for s in &steps {
        match s {
            cgroupfs::Step::Tmpfs => {
                let (t, _) =
                    open_in_root(root, dest, Create::Dir).at(Step::MountTarget, dest.display())?;
                mount(
                    Some("tmpfs"),
                    &fd_path(t.as_fd()),
                    Some("tmpfs"),
                    m.flags - MsFlags::MS_RDONLY,
                    Some("mode=755"),
                )
                .at(Step::MountCgroup, format!("{} (tmpfs)", dest.display()))?;
                tmpfs = true;
            }
            cgroupfs::Step::Mount { name, fstype, data } => {
                let d = sub(name);
                let (t, _) =
                    open_in_root(root, &d, Create::Dir).at(Step::MountTarget, d.display())?;
                mount(
                    Some(fstype.as_str()),
                    &fd_path(t.as_fd()),
                    Some(fstype.as_str()),
                    m.flags,
                    (!data.is_empty()).then_some(data.as_str()),
                )
                .at(
                    Step::MountCgroup,
                    format!("{} ({fstype} {data})", d.display()),
                )?;
            }
            cgroupfs::Step::Bind { name, source } => {
                let d = sub(name);
                let what = || format!("{} (bind source {})", d.display(), source.display());
                let (t, _) =
                    open_in_root(root, &d, Create::Dir).at(Step::MountTarget, d.display())?;
                mount(
                    Some(source),
                    &fd_path(t.as_fd()),
                    NONE,
                    MsFlags::MS_BIND | MsFlags::MS_REC,
                    NONE,
                )
                .at(Step::MountCgroup, what())?;
                if !m.flags.is_empty() {
                    let t = reopen(root, &d)?;
                    remount_bind(&fd_path(t.as_fd()), m.flags).at(Step::MountCgroup, what())?;
                }
            }
            cgroupfs::Step::Symlink { name, target } => {
                let dir = reopen(root, dest)?;
                symlink_at(target, dir.as_fd(), name.as_os_str())
                    .at(Step::MountCgroup, dest.join(name).display())?;
            }
        }
    }
    if tmpfs && m.flags.contains(MsFlags::MS_RDONLY) {
        let t = reopen(root, dest)?;
        remount_bind(&fd_path(t.as_fd()), m.flags)
            .at(Step::MountCgroup, format!("{} (read-only)", dest.display()))?;
    }
    Ok(())
}

/// `symlinkat(target, dir, name)`; an existing entry of that name is left alone.
pub(crate) fn symlink_at(
    target: &Path,
    dir: BorrowedFd<'_>,
    name: &std::ffi::OsStr,
) -> io::Result<()> {
    let t = std::ffi::CString::new(target.as_os_str().as_bytes())
        .map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
    let n = std::ffi::CString::new(name.as_bytes())
        .map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
    // SAFETY: symlinkat with NUL-terminated strings and a dir fd we hold.
    if unsafe { libc::symlinkat(t.as_ptr(), dir.as_raw_fd(), n.as_ptr()) } != 0 {
        let e = io::Error::last_os_error();
        if e.raw_os_error() != Some(libc::EEXIST) {
            return Err(e);
        }
    }
    Ok(())
}

/// A read-only `/dev` was mounted read-write to be populated; now it becomes read-only.
pub(crate) fn dev_readonly(p: &Plan, root: BorrowedFd<'_>) -> Result<(), Fail> {
    if !p.dev_readonly {
        return Ok(());
    }
    let t = reopen(root, Path::new("/dev"))?;
    let flags = p
        .mounts
        .iter()
        .find(|m| m.destination == Path::new("/dev"))
        .map(|m| m.flags)
        .unwrap_or(MsFlags::empty());
    remount_bind(&fd_path(t.as_fd()), flags | MsFlags::MS_RDONLY)
        .at(Step::Mount, "/dev (read-only)")
}

fn open_flags(path: &Path, flags: libc::c_int) -> io::Result<OwnedFd> {
    let c = std::ffi::CString::new(path.as_os_str().as_bytes())
        .map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
    // SAFETY: open with a NUL-terminated path.
    let fd = unsafe { libc::open(c.as_ptr(), flags | libc::O_CLOEXEC) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: a fresh fd from the kernel.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Step 4: `pivot_root` into the rootfs, never `chroot` (a chroot leaves the host's
/// mounts reachable). `pivot_root(".", ".")` stacks the old root on the new one; it is
/// made `rslave` (so the unmount cannot propagate to the host) and detached.
pub(crate) fn pivot_root(p: &Plan) -> Result<(), Fail> {
    let at = p.rootfs.display();
    let old =
        open_flags(Path::new("/"), libc::O_DIRECTORY | libc::O_RDONLY).at(Step::PivotRoot, "/")?;
    let new = open_flags(&p.rootfs, libc::O_DIRECTORY | libc::O_RDONLY).at(Step::PivotRoot, &at)?;
    nix::unistd::fchdir(&new).at(Step::PivotRoot, &at)?;
    nix::unistd::pivot_root(".", ".").at(Step::PivotRoot, &at)?;
    // Where "." is after pivot_root is not promised; the old root's fd says it.
    nix::unistd::fchdir(&old).at(Step::PivotRoot, "old root")?;
    mount(NONE, ".", NONE, MsFlags::MS_SLAVE | MsFlags::MS_REC, NONE)
        .at(Step::PivotRoot, "old root (rslave)")?;
    umount2(".", MntFlags::MNT_DETACH).at(Step::PivotRoot, "old root (detach)")?;
    nix::unistd::chdir("/").at(Step::PivotRoot, "/")?;
    Ok(())
}

fn is_missing(e: &nix::Error) -> bool {
    matches!(e, nix::Error::ENOENT)
}

/// Step 5 (after `pivot_root`, so every path is the container's): `maskedPaths` get
/// `/dev/null` bound over files and an empty read-only tmpfs over directories;
/// `readonlyPaths` a read-only bind of themselves. Paths that do not exist are skipped.
pub(crate) fn mask_and_protect(p: &Plan) -> Result<(), Fail> {
    for path in &p.masked_paths {
        let st = match nix::sys::stat::stat(path) {
            Ok(st) => st,
            Err(e) if is_missing(&e) => continue,
            Err(e) => return Err(e).at(Step::MaskPath, path.display()),
        };
        if st.st_mode & libc::S_IFMT == libc::S_IFDIR {
            mount(Some("tmpfs"), path, Some("tmpfs"), MsFlags::MS_RDONLY, NONE)
        } else {
            mount(Some("/dev/null"), path, NONE, MsFlags::MS_BIND, NONE)
        }
        .at(Step::MaskPath, path.display())?;
    }
    for path in &p.readonly_paths {
        match mount(
            Some(path),
            path,
            NONE,
            MsFlags::MS_BIND | MsFlags::MS_REC,
            NONE,
        ) {
            Ok(()) => {}
            Err(e) if is_missing(&e) => continue,
            Err(e) => return Err(e).at(Step::ReadonlyPath, path.display()),
        }
        remount_bind(path, MsFlags::MS_RDONLY | MsFlags::MS_REC)
            .at(Step::ReadonlyPath, path.display())?;
    }
    Ok(())
}

/// Step 6: the root read-only, last, once nothing else needs to be created in it.
pub(crate) fn readonly_root(p: &Plan) -> Result<(), Fail> {
    if p.readonly_root {
        remount_bind(Path::new("/"), MsFlags::MS_RDONLY).at(Step::ReadonlyRoot, "/")?;
    }
    Ok(())
}

/// Writes the spec's sysctls under `/proc/sys` (the container's `/proc`, after
/// `pivot_root`; namespaced sysctls only is the caller's policy to enforce).
pub(crate) fn sysctl(p: &Plan) -> Result<(), Fail> {
    for (path, value) in &p.sysctl {
        fs::write(path, value.as_bytes()).at(Step::Sysctl, path.display())?;
    }
    Ok(())
}
