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
//!
//! The requests are `netlink-packet-route` messages on `netlink-sys` sockets. The
//! child's is serialized before the fork, and the child reads the kernel's answer
//! through `netlink-packet-core`'s buffer views, which allocate nothing.

use crate::failpoint;
use cni::{CniError, CniResult};
use netlink_packet_core::{
    ErrorBuffer, NetlinkBuffer, NetlinkHeader, NetlinkMessage, NetlinkPayload, NLMSG_ALIGNTO,
    NLMSG_ERROR, NLM_F_ACK, NLM_F_REQUEST,
};
use netlink_packet_route::link::{LinkAttribute, LinkMessage};
use netlink_packet_route::RouteNetlinkMessage;
use netlink_sys::protocols::NETLINK_ROUTE;
use netlink_sys::Socket;
use parking_lot::Mutex;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::time::Duration;

/// Sequence numbers of the three requests, told apart in the replies.
const SEQ_LOOKUP: u32 = 1;
const SEQ_LISTED: u32 = 2;
const SEQ_DELETE: u32 = 3;
/// `sizeof(struct nlmsghdr)`.
const HEADER_LEN: usize = 16;

/// A route netlink socket in the calling thread's network namespace.
pub fn route_socket() -> CniResult<Socket> {
    Socket::new(NETLINK_ROUTE)
        .map_err(|e| CniError::io(format!("failed to open a netlink socket: {e}")))
}

/// `f` again while it fails with `EINTR`. Allocates nothing.
fn retry<T>(mut f: impl FnMut() -> io::Result<T>) -> io::Result<T> {
    loop {
        match f() {
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            r => return r,
        }
    }
}

/// A request about link `index` (0: the one named `name`) as the bytes to send.
fn link_request(
    msg: fn(LinkMessage) -> RouteNetlinkMessage,
    index: u32,
    name: Option<&str>,
    flags: u16,
    seq: u32,
) -> Vec<u8> {
    let mut link = LinkMessage::default();
    link.header.index = index;
    if let Some(name) = name {
        link.attributes
            .push(LinkAttribute::IfName(name.to_string()));
    }
    let mut header = NetlinkHeader::default();
    header.flags = flags;
    header.sequence_number = seq;
    let mut m = NetlinkMessage::new(header, NetlinkPayload::InnerMessage(msg(link)));
    m.finalize();
    let mut buf = vec![0; m.buffer_len()];
    m.serialize(&mut buf);
    buf
}

/// The messages of one received datagram; a truncated one ends it. Allocates nothing
/// (the child uses it).
fn messages(mut d: &[u8]) -> impl Iterator<Item = NetlinkBuffer<&[u8]>> {
    std::iter::from_fn(move || {
        if d.len() < HEADER_LEN {
            return None;
        }
        let len = NetlinkBuffer::new(d).length() as usize;
        if !(HEADER_LEN..=d.len()).contains(&len) {
            return None;
        }
        let m = NetlinkBuffer::new(&d[..len]);
        let align = usize::from(NLMSG_ALIGNTO);
        d = &d[len.next_multiple_of(align).min(d.len())..];
        Some(m)
    })
}

/// The errno of an `NLMSG_ERROR` message (0 for an ACK). Allocates nothing.
fn error_code(m: &NetlinkBuffer<&[u8]>) -> i32 {
    let p = m.payload();
    if p.len() < 4 {
        return libc::EPROTO;
    }
    ErrorBuffer::new(p).code().map_or(0, |c| -c.get())
}

/// Link `index` (0: the one named `name`) in the namespace of `sock`, or `None` when
/// the kernel answers `ENODEV`.
fn get_link(sock: &Socket, index: u32, name: Option<&str>, seq: u32) -> io::Result<Option<u32>> {
    let req = link_request(
        RouteNetlinkMessage::GetLink,
        index,
        name,
        NLM_F_REQUEST,
        seq,
    );
    retry(|| sock.send(&req, 0))?;
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        let n = retry(|| sock.recv(&mut &mut buf[..], 0))?.min(buf.len());
        for m in messages(&buf[..n]) {
            let m = NetlinkMessage::<RouteNetlinkMessage>::deserialize(m.buffer)
                .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e.to_string()))?;
            match m.payload {
                NetlinkPayload::InnerMessage(RouteNetlinkMessage::NewLink(l)) => {
                    return Ok(Some(l.header.index))
                }
                NetlinkPayload::Error(e) => match e.code.map_or(0, |c| -c.get()) {
                    libc::ENODEV => return Ok(None),
                    errno => return Err(io::Error::from_raw_os_error(errno)),
                },
                _ => {}
            }
        }
    }
}

/// The index of link `name` in the namespace of `sock`, if it exists.
pub fn link_index(sock: &Socket, name: &str) -> CniResult<Option<u32>> {
    get_link(sock, 0, Some(name), SEQ_LOOKUP)
        .map_err(|e| CniError::io(format!("failed to look up link {name}: {e}")))
}

/// Whether link `index` is still listed in the namespace of `sock`.
fn listed(sock: &Socket, index: u32) -> io::Result<bool> {
    Ok(get_link(sock, index, None, SEQ_LISTED)?.is_some())
}

/// Descriptors whose close may wait on the kernel, for the next `Finish` to close.
static DEFERRED: Mutex<Vec<OwnedFd>> = Mutex::new(Vec::new());

/// Leaves `fd` for the child to close. Every netfilter socket goes here: its close
/// waits for *any* pending release of deleted rules in the namespace, including one
/// another plugin's DEL just started, so even an ADD would pay up to a grace period.
pub fn defer_close(fd: OwnedFd) {
    DEFERRED.lock().push(fd);
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
        let hold: Vec<OwnedFd> = std::mem::take(&mut *DEFERRED.lock());
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
        let mut msg = vec![];
        let mut keep: Vec<RawFd> = hold.iter().map(|f| f.as_raw_fd()).collect();
        keep.push(wr.as_raw_fd());
        if let Some((sock, _, index)) = &self.link {
            msg = link_request(
                RouteNetlinkMessage::DelLink,
                *index,
                None,
                NLM_F_REQUEST | NLM_F_ACK,
                SEQ_DELETE,
            );
            keep.push(sock.as_raw_fd());
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
            let sock = self.link.as_ref().map(|(s, _, _)| s);
            child(sock, &msg, wr.as_raw_fd(), &keep, die);
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
fn child(sock: Option<&Socket>, msg: &[u8], report: RawFd, keep: &[RawFd], die: (bool, bool)) -> ! {
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
    if let Some(sock) = sock {
        errno = match retry(|| sock.send(msg, 0)) {
            Err(e) => e.raw_os_error().unwrap_or(libc::EIO),
            Ok(_) => {
                let mut buf = [0u8; 1024];
                loop {
                    let Ok(n) = retry(|| sock.recv(&mut &mut buf[..], 0)) else {
                        break libc::EIO;
                    };
                    if let Some(m) = messages(&buf[..n.min(buf.len())]).find(|m| {
                        m.message_type() == NLMSG_ERROR && m.sequence_number() == SEQ_DELETE
                    }) {
                        break error_code(&m);
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rawnl::Builder;

    /// `struct ifinfomsg` for link `index`, as the hand-built requests had it.
    fn ifinfo(index: u32) -> [u8; 16] {
        let mut h = [0u8; 16];
        h[4..8].copy_from_slice(&(index as i32).to_ne_bytes());
        h
    }

    /// The requests are, byte for byte, the ones this module used to build by hand
    /// (RTM_GETLINK by name and by index, RTM_DELLINK with an ACK).
    #[test]
    fn requests_are_the_kernels_structs() {
        const IFLA_IFNAME: u16 = 3;
        let mut b = Builder::default();
        b.begin(18, 0x1, SEQ_LOOKUP, &ifinfo(0))
            .str(IFLA_IFNAME, "eth0")
            .end();
        let got = link_request(
            RouteNetlinkMessage::GetLink,
            0,
            Some("eth0"),
            NLM_F_REQUEST,
            SEQ_LOOKUP,
        );
        assert_eq!(got, b.buf);
        let mut b = Builder::default();
        b.begin(18, 0x1, SEQ_LISTED, &ifinfo(7)).end();
        let got = link_request(
            RouteNetlinkMessage::GetLink,
            7,
            None,
            NLM_F_REQUEST,
            SEQ_LISTED,
        );
        assert_eq!(got, b.buf);
        let mut b = Builder::default();
        b.begin(17, 0x1 | 0x4, SEQ_DELETE, &ifinfo(42)).end();
        let got = link_request(
            RouteNetlinkMessage::DelLink,
            42,
            None,
            NLM_F_REQUEST | NLM_F_ACK,
            SEQ_DELETE,
        );
        assert_eq!(got, b.buf);
    }

    /// An `NLMSG_ERROR` reply: errno (negated, as the kernel sends it), then the request's header.
    fn error_reply(seq: u32, errno: i32) -> Vec<u8> {
        let mut b = Builder::default();
        let mut payload = (-errno).to_ne_bytes().to_vec();
        payload.extend([0u8; 16]);
        b.begin(NLMSG_ERROR, 0, seq, &payload).end();
        b.buf
    }

    #[test]
    fn replies_are_read_without_the_route_parser() {
        let mut d = error_reply(9, libc::EBUSY);
        d.extend(error_reply(SEQ_DELETE, libc::ENODEV));
        d.extend(error_reply(SEQ_DELETE + 1, 0));
        let m: Vec<(u16, u32, i32)> = messages(&d)
            .map(|m| (m.message_type(), m.sequence_number(), error_code(&m)))
            .collect();
        assert_eq!(
            m,
            [
                (NLMSG_ERROR, 9, libc::EBUSY),
                (NLMSG_ERROR, SEQ_DELETE, libc::ENODEV),
                (NLMSG_ERROR, SEQ_DELETE + 1, 0)
            ]
        );
        // A truncated message ends the datagram; a short error payload is EPROTO.
        assert_eq!(messages(&d[..d.len() - 1]).count(), 2);
        assert_eq!(messages(&d[..10]).count(), 0);
        let mut b = Builder::default();
        b.begin(NLMSG_ERROR, 0, 1, &[]).end();
        assert_eq!(error_code(&messages(&b.buf).next().unwrap()), libc::EPROTO);
    }

    /// Lookups in a namespace of the test's own, when it may make one.
    #[test]
    fn looks_up_and_watches_links() {
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } != 0 {
            eprintln!("skipped: needs root for a network namespace");
            return;
        }
        std::thread::spawn(|| {
            // SAFETY: this thread alone moves to a new network namespace, and ends.
            assert_eq!(unsafe { libc::unshare(libc::CLONE_NEWNET) }, 0);
            let sock = route_socket().unwrap();
            assert_eq!(link_index(&sock, "lo").unwrap(), Some(1));
            assert_eq!(link_index(&sock, "nope0").unwrap(), None);
            assert!(listed(&sock, 1).unwrap());
            assert!(!listed(&sock, 999).unwrap());
            let e = link_index(&sock, &"x".repeat(20)).unwrap_err();
            assert!(
                e.msg.starts_with("failed to look up link xxxx"),
                "{}",
                e.msg
            );
        })
        .join()
        .unwrap();
    }
}
