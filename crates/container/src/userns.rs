//! A pod's user namespace (`hostUsers: false`): made empty by a short-lived helper
//! process, its uid and gid maps written from outside by the caller (root on the host),
//! and handed back as an fd, before any process of the pod enters it.
//!
//! ```text
//!  caller ──fork──▶ helper: unshare(CLONE_NEWUSER), "ready" ─▶ caller
//!  caller: /proc/HELPER/uid_map, gid_map; open /proc/HELPER/ns/user; close "done"
//!  helper: sees EOF on "done", exits; caller reaps it      ──▶ the namespace's fd
//! ```
//!
//! The fd keeps the namespace alive; the pause `setns`es into it and makes the pod's
//! other namespaces there, so they are owned by it (see `crate::pause`), and the
//! caller pins it like them (`crate::ns::pin` of `/proc/PAUSE/ns/user`).
//!
//! The helper is forked from a possibly multi-threaded caller and makes only
//! async-signal-safe syscalls (`unshare`, `write`, `read`, `close`, `_exit`).

use std::fmt;
use std::fs;
use std::io;
use std::os::fd::{AsRawFd, OwnedFd};

use crate::error::{Error, Result};

/// One line of a uid or gid map: `size` ids from `container_id` inside are `host_id`
/// and on outside.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub struct IdMap {
    pub container_id: u32,
    pub host_id: u32,
    pub size: u32,
}

impl IdMap {
    /// The host id of `id` inside, when this line maps it.
    pub fn to_host(&self, id: u32) -> Option<u32> {
        let off = id.checked_sub(self.container_id)?;
        (off < self.size).then(|| self.host_id + off)
    }
}

impl fmt::Display for IdMap {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {} {}", self.container_id, self.host_id, self.size)
    }
}

/// The kernel's limit on lines in a map (since 4.15).
const MAX_LINES: usize = 340;

/// Checks a map the way the kernel will (lengths above 0, no range past 2^32 - 1 on
/// either side, no overlap inside or outside, at most 340 lines), so a bad one is
/// refused with a reason before anything is made. `what` is `uid` or `gid`.
pub fn check(what: &str, maps: &[IdMap]) -> std::result::Result<(), String> {
    if maps.is_empty() {
        return Err(format!("no {what} mapping"));
    }
    if maps.len() > MAX_LINES {
        return Err(format!(
            "{} {what} mappings, the kernel takes at most {MAX_LINES}",
            maps.len()
        ));
    }
    let end = |start: u32, size: u32| u64::from(start) + u64::from(size);
    for (i, m) in maps.iter().enumerate() {
        if m.size == 0 {
            return Err(format!("{what} mapping {m}: length 0"));
        }
        if end(m.container_id, m.size) > 1 << 32 || end(m.host_id, m.size) > 1 << 32 {
            return Err(format!("{what} mapping {m}: range goes past 4294967295"));
        }
        for o in &maps[..i] {
            let overlap =
                |a: u32, b: u32| u64::from(a) < end(b, o.size) && u64::from(b) < end(a, m.size);
            if overlap(m.container_id, o.container_id) || overlap(m.host_id, o.host_id) {
                return Err(format!("{what} mappings {o} and {m} overlap"));
            }
        }
    }
    Ok(())
}

/// The contents of a `uid_map`/`gid_map` file: one line per mapping.
pub fn map_file(maps: &[IdMap]) -> String {
    maps.iter().map(|m| format!("{m}\n")).collect()
}

/// Makes a user namespace with these maps (checked with [`check`] first) and returns
/// an fd of it (`O_CLOEXEC`). Needs `CAP_SETUID`/`CAP_SETGID` over the host ids,
/// that is: root.
pub fn create(uids: &[IdMap], gids: &[IdMap]) -> Result<OwnedFd> {
    let invalid = |reason: String| Error::InvalidIdMapping { reason };
    check("uid", uids).map_err(invalid)?;
    check("gid", gids).map_err(invalid)?;
    let err = |step: &'static str, source: io::Error| Error::UserNamespace { step, source };
    let (ready_r, ready_w) = crate::executor::pipe_cloexec().map_err(|e| err("pipe", e))?;
    let (done_r, done_w) = crate::executor::pipe_cloexec().map_err(|e| err("pipe", e))?;
    // SAFETY: the child below only makes async-signal-safe syscalls on fds made
    // before the fork, then `_exit`s.
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        return Err(err("fork", io::Error::last_os_error()));
    }
    if pid == 0 {
        // SAFETY: as above; the buffers are on this stack.
        unsafe {
            libc::close(done_w.as_raw_fd());
            libc::close(ready_r.as_raw_fd());
            let code: i32 = if libc::unshare(libc::CLONE_NEWUSER) == 0 {
                0
            } else {
                *libc::__errno_location()
            };
            let b = code.to_ne_bytes();
            libc::write(ready_w.as_raw_fd(), b.as_ptr().cast(), b.len());
            let mut x = [0u8; 1];
            libc::read(done_r.as_raw_fd(), x.as_mut_ptr().cast(), 1);
            libc::_exit(0)
        }
    }
    drop((ready_w, done_r));
    let result = (|| {
        let mut b = [0u8; 4];
        let n =
            nix::unistd::read(&ready_r, &mut b).map_err(|e| err("wait for helper", e.into()))?;
        if n != 4 {
            return Err(err(
                "wait for helper",
                io::Error::other("the helper died before unshare"),
            ));
        }
        let code = i32::from_ne_bytes(b);
        if code != 0 {
            return Err(err("unshare", io::Error::from_raw_os_error(code)));
        }
        fs::write(format!("/proc/{pid}/uid_map"), map_file(uids))
            .map_err(|e| err("write uid_map", e))?;
        fs::write(format!("/proc/{pid}/gid_map"), map_file(gids))
            .map_err(|e| err("write gid_map", e))?;
        let f = fs::File::open(format!("/proc/{pid}/ns/user"))
            .map_err(|e| err("open /proc/PID/ns/user", e))?;
        Ok(OwnedFd::from(f))
    })();
    if result.is_err() {
        // SAFETY: our own child, not reaped yet.
        unsafe { libc::kill(pid, libc::SIGKILL) };
    }
    drop(done_w);
    loop {
        // SAFETY: waitpid on our own child.
        let rc = unsafe { libc::waitpid(pid, std::ptr::null_mut(), 0) };
        if rc >= 0 || io::Error::last_os_error().raw_os_error() != Some(libc::EINTR) {
            break;
        }
    }
    result
}

/// Whether `fd` (a user namespace) is the caller's own: an exec into a container
/// joins the init's user namespace only when it is another one.
pub(crate) fn same_as_own(path: &std::path::Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    match (fs::metadata(path), fs::metadata("/proc/self/ns/user")) {
        (Ok(a), Ok(b)) => a.ino() == b.ino() && a.dev() == b.dev(),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m(c: u32, h: u32, s: u32) -> IdMap {
        IdMap {
            container_id: c,
            host_id: h,
            size: s,
        }
    }

    #[test]
    fn checks_maps_as_the_kernel_does() {
        check("uid", &[m(0, 100000, 65536)]).unwrap();
        check("uid", &[m(0, 100000, 1), m(1, 200000, 10)]).unwrap();
        assert_eq!(check("uid", &[]).unwrap_err(), "no uid mapping");
        assert!(check("gid", &[m(0, 1, 0)])
            .unwrap_err()
            .contains("length 0"));
        assert!(check("uid", &[m(0, u32::MAX, 2)])
            .unwrap_err()
            .contains("past 4294967295"));
        assert!(check("uid", &[m(0, 1000, 10), m(5, 5000, 10)])
            .unwrap_err()
            .contains("overlap"));
        assert!(check("uid", &[m(0, 1000, 10), m(20, 1005, 10)])
            .unwrap_err()
            .contains("overlap"));
        let many: Vec<_> = (0..341).map(|i| m(i, 1000 + i, 1)).collect();
        assert!(check("uid", &many).unwrap_err().contains("at most 340"));
    }

    #[test]
    fn map_files_and_lookups() {
        assert_eq!(
            map_file(&[m(0, 100000, 65536), m(65536, 1, 1)]),
            "0 100000 65536\n65536 1 1\n"
        );
        let l = m(0, 100000, 65536);
        assert_eq!(l.to_host(0), Some(100000));
        assert_eq!(l.to_host(65535), Some(165535));
        assert_eq!(l.to_host(65536), None);
        assert_eq!(m(1, 5, 2).to_host(0), None);
    }

    /// As root: the namespace has the maps asked for; as anyone else the refusal
    /// names its step.
    #[test]
    fn create_writes_the_maps() {
        let uids = [m(0, 100000, 65536)];
        let gids = [m(0, 200000, 1000)];
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } != 0 {
            let e = create(&uids, &gids).unwrap_err().to_string();
            assert!(e.starts_with("user namespace: "), "{e}");
            return;
        }
        let fd = create(&uids, &gids).unwrap();
        // Read from inside by a process that enters it before exec (a multi-threaded
        // test process cannot setns into a user namespace itself).
        let read = |file: &str| {
            let raw = fd.as_raw_fd();
            let mut cmd = std::process::Command::new("cat");
            cmd.arg(file);
            // SAFETY: setns is async-signal-safe; the fd outlives the spawn.
            unsafe {
                std::os::unix::process::CommandExt::pre_exec(&mut cmd, move || {
                    if libc::setns(raw, libc::CLONE_NEWUSER) != 0 {
                        return Err(io::Error::last_os_error());
                    }
                    Ok(())
                });
            }
            let out = cmd.output().unwrap();
            assert!(out.status.success(), "{out:?}");
            String::from_utf8(out.stdout).unwrap()
        };
        let words = |s: String| s.split_whitespace().map(String::from).collect::<Vec<_>>();
        assert_eq!(words(read("/proc/self/uid_map")), ["0", "100000", "65536"]);
        assert_eq!(words(read("/proc/self/gid_map")), ["0", "200000", "1000"]);
        let e = create(&uids, &[]).unwrap_err().to_string();
        assert_eq!(e, "invalid id mapping: no gid mapping");
    }
}
