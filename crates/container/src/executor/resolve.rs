//! Resolving a container path under the root file system without ever leaving it.
//!
//! A mount target such as `/escape/x`, where the image made `escape` a symlink to
//! `/etc`, must land on `<rootfs>/etc/x`, not on the host's `/etc/x`. So paths are walked
//! one component at a time with `openat(O_PATH | O_NOFOLLOW)` from a directory fd:
//! a symlink is read (`readlinkat`) and its target spliced into the remaining
//! components, an absolute target restarting at the root fd, and `..` at the root
//! staying at the root, exactly as if the root were `/` (what `openat2`'s
//! `RESOLVE_IN_ROOT` does; done by hand so it works on every kernel and can be tested
//! without privileges). The result is an `O_PATH` fd, and the caller mounts onto
//! `/proc/self/fd/N`, so nothing re-resolves the path between the check and the use.
//!
//! Where the kernel has `openat2` (5.6+), an existing path is first opened in one
//! syscall with `RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS` (a container's init resolves
//! some 30 targets, 3 syscalls per component by hand); anything it refuses or does not
//! find goes the walk, which has the last word (and creates what is missing).
//!
//! Missing components can be created on the way (directories, and the last one as a
//! file or a directory), as runtimes do for mount targets and device nodes.

use std::collections::VecDeque;
use std::ffi::{CString, OsStr, OsString};
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::{Component, Path, PathBuf};

/// Linux's limit on symlinks followed in one lookup.
const MAX_SYMLINKS: u32 = 40;

/// What to do with missing components.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Create {
    /// Fail with `ENOENT`.
    No,
    /// Create directories, the last one too.
    Dir,
    /// Create directories, and the last component as an empty regular file.
    File,
}

fn cstr(name: &OsStr) -> io::Result<CString> {
    CString::new(name.as_bytes()).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))
}

fn open_path(dir: BorrowedFd<'_>, name: &OsStr) -> io::Result<OwnedFd> {
    let c = cstr(name)?;
    // SAFETY: openat on a dir fd we hold and a NUL-terminated name.
    let fd = unsafe {
        libc::openat(
            dir.as_raw_fd(),
            c.as_ptr(),
            libc::O_PATH | libc::O_NOFOLLOW | libc::O_CLOEXEC,
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: a fresh fd from the kernel.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

pub(crate) fn fstat(fd: BorrowedFd<'_>) -> io::Result<libc::stat> {
    // SAFETY: stat is plain integers, for which all zeroes is a valid value.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: fstat writes into the struct we own; the fd is open for the borrow.
    if unsafe { libc::fstat(fd.as_raw_fd(), &mut st) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(st)
}

/// The target of a symlink opened with `O_PATH | O_NOFOLLOW`.
fn read_link(fd: BorrowedFd<'_>) -> io::Result<OsString> {
    let mut buf = vec![0u8; libc::PATH_MAX as usize];
    // SAFETY: readlinkat with an empty path reads the link the fd itself is; the
    // buffer is ours and its length is passed.
    let n = unsafe {
        libc::readlinkat(
            fd.as_raw_fd(),
            c"".as_ptr(),
            buf.as_mut_ptr().cast(),
            buf.len(),
        )
    };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    buf.truncate(n as usize);
    Ok(OsString::from_vec(buf))
}

fn mkdir(dir: BorrowedFd<'_>, name: &OsStr) -> io::Result<()> {
    let c = cstr(name)?;
    // SAFETY: mkdirat on a dir fd we hold and a NUL-terminated name.
    if unsafe { libc::mkdirat(dir.as_raw_fd(), c.as_ptr(), 0o755) } != 0 {
        let e = io::Error::last_os_error();
        if e.raw_os_error() != Some(libc::EEXIST) {
            return Err(e);
        }
    }
    Ok(())
}

fn create_file(dir: BorrowedFd<'_>, name: &OsStr) -> io::Result<()> {
    let c = cstr(name)?;
    // SAFETY: openat on a dir fd we hold; O_NOFOLLOW|O_CREAT never follows a link
    // that appeared in between (it fails with ELOOP instead).
    let fd = unsafe {
        libc::openat(
            dir.as_raw_fd(),
            c.as_ptr(),
            libc::O_CREAT | libc::O_WRONLY | libc::O_NOFOLLOW | libc::O_CLOEXEC,
            0o644 as libc::c_uint,
        )
    };
    if fd < 0 {
        let e = io::Error::last_os_error();
        if e.raw_os_error() != Some(libc::EEXIST) {
            return Err(e);
        }
        return Ok(());
    }
    // SAFETY: a fresh fd from the kernel, closed right away.
    drop(unsafe { OwnedFd::from_raw_fd(fd) });
    Ok(())
}

/// The components of `path` to walk: names and `..`; `/` and `.` say nothing here.
fn components(path: &Path) -> impl Iterator<Item = OsString> + '_ {
    path.components().filter_map(|c| match c {
        Component::Normal(n) => Some(n.to_os_string()),
        Component::ParentDir => Some(OsString::from("..")),
        Component::RootDir | Component::CurDir | Component::Prefix(_) => None,
    })
}

/// `struct open_how` of `openat2`.
#[repr(C)]
struct OpenHow {
    flags: u64,
    mode: u64,
    resolve: u64,
}

const RESOLVE_NO_MAGICLINKS: u64 = 0x02;
const RESOLVE_IN_ROOT: u64 = 0x10;

/// `openat2(root, path, O_PATH, RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS)`; `None` on
/// any error (a kernel without it, a missing component, a magic link...).
fn openat2_in_root(root: BorrowedFd<'_>, path: &Path) -> Option<OwnedFd> {
    let c = cstr(path.as_os_str()).ok()?;
    let how = OpenHow {
        flags: (libc::O_PATH | libc::O_CLOEXEC) as u64,
        mode: 0,
        resolve: RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS,
    };
    // SAFETY: openat2 with a dir fd we hold, a NUL-terminated path and an open_how
    // of the size passed.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_openat2,
            root.as_raw_fd(),
            c.as_ptr(),
            &how as *const OpenHow,
            std::mem::size_of::<OpenHow>(),
        )
    };
    // SAFETY: a fresh fd from the kernel.
    (fd >= 0).then(|| unsafe { OwnedFd::from_raw_fd(fd as libc::c_int) })
}

/// Opens `path` (absolute or relative, both taken from the root) under `root` as an
/// `O_PATH` fd, following symlinks as if `root` were `/`, creating what is missing as
/// `create` says. Also returns the path relative to `root` (for messages; the
/// resolved one when the walk did it).
pub(crate) fn open_in_root(
    root: BorrowedFd<'_>,
    path: &Path,
    create: Create,
) -> io::Result<(OwnedFd, PathBuf)> {
    if let Some(fd) = openat2_in_root(root, path) {
        let mut rel = PathBuf::new();
        for c in components(path) {
            if c == ".." {
                rel.pop();
            } else {
                rel.push(c);
            }
        }
        return Ok((fd, rel));
    }
    open_walk(root, path, create)
}

/// The component-at-a-time walk behind [`open_in_root`].
fn open_walk(root: BorrowedFd<'_>, path: &Path, create: Create) -> io::Result<(OwnedFd, PathBuf)> {
    let mut todo: VecDeque<OsString> = components(path).collect();
    // The directories walked so far below the root, with their names.
    let mut stack: Vec<(OwnedFd, OsString)> = Vec::new();
    let mut links = 0;
    while let Some(name) = todo.pop_front() {
        if name == ".." {
            stack.pop();
            continue;
        }
        let last = todo.is_empty();
        let fd = {
            let dir = stack.last().map(|(f, _)| f.as_fd()).unwrap_or(root);
            match open_path(dir, &name) {
                Err(e) if e.raw_os_error() == Some(libc::ENOENT) && create != Create::No => {
                    if last && create == Create::File {
                        create_file(dir, &name)?;
                    } else {
                        mkdir(dir, &name)?;
                    }
                    open_path(dir, &name)?
                }
                r => r?,
            }
        };
        let st = fstat(fd.as_fd())?;
        match st.st_mode & libc::S_IFMT {
            libc::S_IFLNK => {
                links += 1;
                if links > MAX_SYMLINKS {
                    return Err(io::Error::from_raw_os_error(libc::ELOOP));
                }
                let target = PathBuf::from(read_link(fd.as_fd())?);
                if target.is_absolute() {
                    stack.clear();
                }
                for c in components(&target).collect::<Vec<_>>().into_iter().rev() {
                    todo.push_front(c);
                }
            }
            libc::S_IFDIR => stack.push((fd, name)),
            _ if last => {
                let mut rel: PathBuf = stack.iter().map(|(_, n)| n.as_os_str()).collect();
                rel.push(&name);
                return Ok((fd, rel));
            }
            _ => return Err(io::Error::from_raw_os_error(libc::ENOTDIR)),
        }
    }
    let rel: PathBuf = stack.iter().map(|(_, n)| n.as_os_str()).collect();
    match stack.pop() {
        Some((fd, _)) => Ok((fd, rel)),
        None => Ok((root.try_clone_to_owned()?, rel)),
    }
}

/// Opens `path` (absolute) as an `O_PATH` directory fd, following symlinks normally:
/// for host paths the spec names (the rootfs itself, bind sources).
pub(crate) fn open_dir(path: &Path) -> io::Result<OwnedFd> {
    let c = cstr(path.as_os_str())?;
    // SAFETY: open with a NUL-terminated path.
    let fd = unsafe {
        libc::open(
            c.as_ptr(),
            libc::O_PATH | libc::O_DIRECTORY | libc::O_CLOEXEC,
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: a fresh fd from the kernel.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// `/proc/self/fd/N`: the magic link through which a syscall taking a path reaches
/// exactly the file `fd` is (mount(2) follows it to the fd's dentry and mount).
pub(crate) fn fd_path(fd: BorrowedFd<'_>) -> PathBuf {
    PathBuf::from(format!("/proc/self/fd/{}", fd.as_raw_fd()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;
    use std::os::unix::fs::symlink;

    struct Tmp(PathBuf);
    impl Drop for Tmp {
        fn drop(&mut self) {
            let _ = fs::remove_dir_all(&self.0);
        }
    }
    fn tmp(tag: &str) -> Tmp {
        let d =
            std::env::temp_dir().join(format!("crust-resolve-unit-{tag}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&d);
        fs::create_dir_all(d.join("root")).unwrap();
        Tmp(d)
    }

    fn real(fd: &OwnedFd) -> PathBuf {
        fs::read_link(fd_path(fd.as_fd())).unwrap()
    }

    #[test]
    fn absolute_and_relative_symlinks_stay_under_the_root() {
        let t = tmp("escape");
        let root = t.0.join("root");
        fs::create_dir_all(root.join("etc")).unwrap();
        fs::create_dir_all(t.0.join("etc")).unwrap();
        symlink("/etc", root.join("abs")).unwrap();
        symlink("../../../../etc", root.join("rel")).unwrap();
        symlink("/..", root.join("up")).unwrap();
        let rfd = open_dir(&root).unwrap();

        for p in ["/abs", "rel", "/up/etc", "/../../etc", "/abs/../../etc"] {
            // openat2 where the kernel has it, and the walk, agree.
            let (fd, _) = open_in_root(rfd.as_fd(), Path::new(p), Create::No).unwrap();
            assert_eq!(real(&fd), root.join("etc"), "{p}");
            let (fd, rel) = open_walk(rfd.as_fd(), Path::new(p), Create::No).unwrap();
            assert_eq!(real(&fd), root.join("etc"), "{p}");
            assert_eq!(rel, Path::new("etc"), "{p}");
        }
        let (fd, rel) = open_in_root(rfd.as_fd(), Path::new("/"), Create::No).unwrap();
        assert_eq!(real(&fd), root);
        assert_eq!(rel, Path::new(""));
    }

    #[test]
    fn creation_follows_the_links_inside_the_root() {
        let t = tmp("create");
        let root = t.0.join("root");
        symlink("/etc", root.join("escape")).unwrap();
        let rfd = open_dir(&root).unwrap();

        let (fd, rel) =
            open_in_root(rfd.as_fd(), Path::new("/escape/sub/x"), Create::File).unwrap();
        assert_eq!(rel, Path::new("etc/sub/x"));
        assert_eq!(real(&fd), root.join("etc/sub/x"));
        // Now it exists: the fast path finds it in the root, not on the host.
        let (fd, _) = open_in_root(rfd.as_fd(), Path::new("/escape/sub/x"), Create::No).unwrap();
        assert_eq!(real(&fd), root.join("etc/sub/x"));
        assert!(root.join("etc/sub/x").is_file());
        assert!(!Path::new("/etc/sub/x").exists());

        // A dangling link as the last component creates its target, in the root.
        symlink("/made-by-link", root.join("dangling")).unwrap();
        open_in_root(rfd.as_fd(), Path::new("/dangling"), Create::Dir).unwrap();
        assert!(root.join("made-by-link").is_dir());
    }

    #[test]
    fn failures() {
        let t = tmp("fail");
        let root = t.0.join("root");
        fs::write(root.join("file"), b"").unwrap();
        symlink("loop", root.join("loop")).unwrap();
        let rfd = open_dir(&root).unwrap();
        let errno = |p: &str, c| {
            open_in_root(rfd.as_fd(), Path::new(p), c)
                .unwrap_err()
                .raw_os_error()
        };
        assert_eq!(errno("/missing", Create::No), Some(libc::ENOENT));
        assert_eq!(errno("/file/x", Create::Dir), Some(libc::ENOTDIR));
        assert_eq!(errno("/loop", Create::No), Some(libc::ELOOP));
        assert!(!root.join("missing").exists());
    }
}
