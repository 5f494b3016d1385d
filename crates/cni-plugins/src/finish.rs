//! DEL's kernel work that outlasts what the runtime can observe, finished by a child.
//!
//! Deleting a veth takes the kernel ~15–25 ms, nearly all of it after the link is
//! already gone: `RTM_DELLINK` unlists both ends at once, then the deleting thread
//! waits in `netdev_run_todo` for `rcu_barrier()` before the call returns. Closing a
//! netfilter socket through which rules were deleted likewise waits for their memory
//! to be freed after a grace period. Neither wait changes anything a runtime or a
//! later ADD can see: the interface name is free and the rules are out of the ruleset
//! the moment the link is unlisted or the rules' transaction committed.
//!
//! So DEL forks a child that sends the `RTM_DELLINK` and holds the netfilter socket;
//! the plugin returns as soon as the link is no longer in the namespace (or the child
//! reports an error), and the child finishes the kernel's waits and exits, re-parented
//! to init like any orphan. The child closes every other descriptor first, so it never
//! holds the runtime's stdout pipe (which would make the runtime wait for it after all)
//! or an IPAM plugin's stdin.

use crate::failpoint;
use crate::rawnl::{self, Builder, Socket, NLMSG_ERROR};
use cni::{CniError, CniResult};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::Mutex;
use std::time::Duration;

pub const NETLINK_ROUTE: i32 = 0;
const RTM_NEWLINK: u16 = 16;
const RTM_DELLINK: u16 = 17;
const RTM_GETLINK: u16 = 18;
const IFLA_IFNAME: u16 = 3;

/// `struct ifinfomsg` for link `index`.
fn ifinfo(index: u32) -> [u8; 16] {
    let mut h = [0u8; 16];
    h[4..8].copy_from_slice(&(index as i32).to_ne_bytes());
    h
}

/// The index of link `name` in the namespace of `sock`, if it exists.
pub fn link_index(sock: &Socket, name: &str) -> CniResult<Option<u32>> {
    let mut b = Builder::default();
    b.begin(RTM_GETLINK, rawnl::NLM_F_REQUEST, 1, &ifinfo(0))
        .str(IFLA_IFNAME, name)
        .end();
    let err = |e: std::io::Error| CniError::io(format!("failed to look up link {name}: {e}"));
    sock.send(&b.buf).map_err(err)?;
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        let d = sock.recv(&mut buf).map_err(err)?;
        for m in rawnl::messages(d) {
            match m.ty {
                RTM_NEWLINK if m.payload.len() >= 8 => {
                    let idx = i32::from_ne_bytes(m.payload[4..8].try_into().unwrap());
                    return Ok(Some(idx as u32));
                }
                NLMSG_ERROR if m.errno() == libc::ENODEV => return Ok(None),
                NLMSG_ERROR => {
                    return Err(err(std::io::Error::from_raw_os_error(m.errno())));
                }
                _ => {}
            }
        }
    }
}

/// Whether link `index` is still listed in the namespace of `sock`.
fn listed(sock: &Socket, index: u32) -> std::io::Result<bool> {
    let mut b = Builder::default();
    b.begin(RTM_GETLINK, rawnl::NLM_F_REQUEST, 2, &ifinfo(index))
        .end();
    sock.send(&b.buf)?;
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        let d = sock.recv(&mut buf)?;
        for m in rawnl::messages(d) {
            match m.ty {
                RTM_NEWLINK => return Ok(true),
                NLMSG_ERROR if m.errno() == libc::ENODEV => return Ok(false),
                NLMSG_ERROR => return Err(std::io::Error::from_raw_os_error(m.errno())),
                _ => {}
            }
        }
    }
}

/// Descriptors whose close may wait on the kernel, for the next `Finish` to close.
static DEFERRED: Mutex<Vec<OwnedFd>> = Mutex::new(Vec::new());

/// Leaves `fd` for the child to close. Every netfilter socket goes here: its close
/// waits for *any* pending release of deleted rules in the namespace, including one
/// another plugin's DEL just started, so even an ADD would pay up to a grace period.
pub fn defer_close(fd: OwnedFd) {
    DEFERRED.lock().unwrap_or_else(|e| e.into_inner()).push(fd);
}

/// What a verb leaves to the child: maybe a link to delete (through `sock`, a route
/// socket in its namespace; `probe` is a second one the plugin watches it with), and
/// the deferred descriptors.
#[derive(Default)]
pub struct Finish {
    pub link: Option<(Socket, Socket, u32)>,
}

impl Finish {
    /// Starts the child and returns once the link is unlisted. Without a link, the
    /// child only closes what it holds; with nothing to do, there is no child.
    pub fn run(self) -> CniResult<()> {
        let hold: Vec<OwnedFd> =
            std::mem::take(&mut *DEFERRED.lock().unwrap_or_else(|e| e.into_inner()));
        if self.link.is_none() && hold.is_empty() {
            return Ok(());
        }
        let mut fds = [0 as RawFd; 2];
        // SAFETY: pipe2 writes two fds into the array.
        if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
            return Err(CniError::io(format!(
                "failed to make a pipe: {}",
                std::io::Error::last_os_error()
            )));
        }
        // SAFETY: both fds were just made by pipe2 and are ours alone.
        let (rd, wr) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
        let mut msg = Builder::default();
        let mut keep: Vec<RawFd> = hold.iter().map(|f| f.as_raw_fd()).collect();
        keep.push(wr.as_raw_fd());
        if let Some((sock, _, index)) = &self.link {
            msg.begin(
                RTM_DELLINK,
                rawnl::NLM_F_REQUEST | rawnl::NLM_F_ACK,
                3,
                &ifinfo(*index),
            )
            .end();
            keep.push(sock.raw());
        }
        keep.sort_unstable();
        // Failpoints of the child, decided before the fork (the child may not allocate).
        let die = match self.link {
            Some(_) => (
                failpoint::armed("bridge.finish.before_dellink"),
                failpoint::armed("bridge.finish.after_dellink"),
            ),
            None => (false, false),
        };
        // SAFETY: the child runs only async-signal-safe code (raw syscalls on memory
        // prepared before the fork, no allocation) and leaves with _exit.
        let pid = unsafe { libc::fork() };
        if pid < 0 {
            return Err(CniError::io(format!(
                "failed to fork: {}",
                std::io::Error::last_os_error()
            )));
        }
        if pid == 0 {
            let sock = self.link.as_ref().map(|(s, _, _)| s.raw());
            child(sock, &msg.buf, wr.as_raw_fd(), &keep, die);
        }
        drop(wr);
        // The child holds its own references: closing ours releases nothing.
        drop(hold);
        let Some((sock, probe, index)) = self.link else {
            return Ok(());
        };
        drop(sock);
        // Wait until the link is unlisted, or the child says how the deletion ended.
        let mut pfd = libc::pollfd {
            fd: rd.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        let mut wait = Duration::from_micros(200);
        loop {
            // SAFETY: one valid pollfd.
            let n = unsafe { libc::poll(&mut pfd, 1, wait.as_millis().max(1) as i32) };
            if n > 0 {
                let mut b = [0u8; 4];
                // SAFETY: reading into a 4-byte buffer.
                let r = unsafe { libc::read(rd.as_raw_fd(), b.as_mut_ptr().cast(), 4) };
                return match (r, i32::from_ne_bytes(b)) {
                    (4, 0) | (4, libc::ENODEV) => Ok(()),
                    (4, e) => Err(CniError::io(format!(
                        "failed to delete link {index}: {}",
                        std::io::Error::from_raw_os_error(e)
                    ))),
                    // The child died without a word: see whether the link went.
                    _ => match listed(&probe, index) {
                        Ok(false) => Ok(()),
                        _ => Err(CniError::io(format!(
                            "failed to delete link {index}: the deleting process died"
                        ))),
                    },
                };
            }
            match listed(&probe, index) {
                Ok(false) => return Ok(()),
                Ok(true) => {}
                Err(e) => return Err(CniError::io(format!("failed to delete link {index}: {e}"))),
            }
            wait = (wait * 2).min(Duration::from_millis(2));
        }
    }
}

/// The child: closes all but `keep`, deletes the link, reports the errno, and exits
/// (which closes the held descriptors, waiting for the kernel as long as it takes).
/// `die` = (before, after) the deletion: the crash suite's failpoints, SIGKILL there.
fn child(sock: Option<RawFd>, msg: &[u8], report: RawFd, keep: &[RawFd], die: (bool, bool)) -> ! {
    let mut lo: libc::c_uint = 0;
    for &k in keep {
        if k as libc::c_uint > lo {
            // SAFETY: close_range on fds this process no longer needs.
            unsafe { libc::syscall(libc::SYS_close_range, lo, k as libc::c_uint - 1, 0) };
        }
        lo = k as libc::c_uint + 1;
    }
    // SAFETY: as above.
    unsafe { libc::syscall(libc::SYS_close_range, lo, libc::c_uint::MAX, 0) };
    // SAFETY: PR_SET_NAME with a NUL-terminated string, so ps shows what this is.
    unsafe { libc::prctl(libc::PR_SET_NAME, c"cni-del-finish".as_ptr()) };
    if die.0 {
        failpoint::die();
    }
    let mut errno: i32 = 0;
    if let Some(fd) = sock {
        errno = match rawnl::send_raw(fd, msg) {
            Err(e) => e.raw_os_error().unwrap_or(libc::EIO),
            Ok(()) => {
                let mut buf = [0u8; 1024];
                loop {
                    // SAFETY: buf is valid for writes of its length.
                    let n = unsafe { libc::recv(fd, buf.as_mut_ptr().cast(), buf.len(), 0) };
                    if n < 0 {
                        if std::io::Error::last_os_error().raw_os_error() == Some(libc::EINTR) {
                            continue;
                        }
                        break libc::EIO;
                    }
                    if let Some(m) = rawnl::messages(&buf[..n as usize])
                        .find(|m| m.ty == NLMSG_ERROR && m.seq == 3)
                    {
                        break m.errno();
                    }
                }
            }
        };
    }
    if die.1 {
        // Deleted, but neither reported nor finished.
        failpoint::die();
    }
    let b = errno.to_ne_bytes();
    // SAFETY: writing 4 bytes from a stack buffer; then leaving without unwinding.
    unsafe {
        libc::write(report, b.as_ptr().cast(), 4);
        libc::_exit(0)
    }
}
