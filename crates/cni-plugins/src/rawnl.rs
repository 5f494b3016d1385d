//! A bare netlink socket and message builder for nftables (`nft.rs`), the one place the
//! plugin speaks netlink byte by byte: `netlink-packet-route` and `rtnetlink` cover
//! links, addresses and routes (`netlink.rs`, `finish.rs`), not nf_tables' messages.

use cni::{CniError, CniResult};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

pub const NLM_F_REQUEST: u16 = 0x1;
pub const NLM_F_ACK: u16 = 0x4;
/// Set on a dump's messages when what was dumped changed meanwhile, so the dump may
/// have skipped or repeated entries.
pub const NLM_F_DUMP_INTR: u16 = 0x10;
pub const NLM_F_DUMP: u16 = 0x300;
pub const NLM_F_CREATE: u16 = 0x400;
pub const NLM_F_APPEND: u16 = 0x800;
pub const NLMSG_ERROR: u16 = 2;
pub const NLMSG_DONE: u16 = 3;
const NLA_F_NESTED: u16 = 0x8000;

/// A netlink socket of `protocol`, bound to the calling thread's network namespace.
pub struct Socket {
    fd: OwnedFd,
}

impl Socket {
    pub fn open(protocol: i32) -> CniResult<Socket> {
        // SAFETY: plain socket(2); the fd is owned right away.
        let fd = unsafe {
            libc::socket(
                libc::AF_NETLINK,
                libc::SOCK_RAW | libc::SOCK_CLOEXEC,
                protocol,
            )
        };
        if fd < 0 {
            return Err(CniError::io(format!(
                "failed to open a netlink socket: {}",
                std::io::Error::last_os_error()
            )));
        }
        Ok(Socket {
            // SAFETY: fd was just returned by socket(2) and is ours alone.
            fd: unsafe { OwnedFd::from_raw_fd(fd) },
        })
    }

    pub fn send(&self, buf: &[u8]) -> std::io::Result<()> {
        send_raw(self.fd.as_raw_fd(), buf)
    }

    /// Receives one datagram (possibly several messages) into `buf`.
    pub fn recv<'a>(&self, buf: &'a mut [u8]) -> std::io::Result<&'a [u8]> {
        loop {
            // SAFETY: buf is valid for writes of its length.
            let n =
                unsafe { libc::recv(self.fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len(), 0) };
            if n >= 0 {
                return Ok(&buf[..n as usize]);
            }
            let e = std::io::Error::last_os_error();
            if e.kind() != std::io::ErrorKind::Interrupted {
                return Err(e);
            }
        }
    }

    pub fn into_fd(self) -> OwnedFd {
        self.fd
    }
}

/// send(2) of a whole buffer.
fn send_raw(fd: RawFd, buf: &[u8]) -> std::io::Result<()> {
    loop {
        // SAFETY: buf is valid for reads of its length.
        let n = unsafe { libc::send(fd, buf.as_ptr().cast(), buf.len(), 0) };
        if n >= 0 {
            return Ok(());
        }
        let e = std::io::Error::last_os_error();
        if e.kind() != std::io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
}

/// One netlink message: header as read, payload after the 16-byte header.
pub struct Msg<'a> {
    pub ty: u16,
    pub flags: u16,
    pub seq: u32,
    pub payload: &'a [u8],
}

impl Msg<'_> {
    /// For NLMSG_ERROR: the (positive) errno, 0 for an ACK.
    pub fn errno(&self) -> i32 {
        self.payload
            .get(..4)
            .map(|b| -i32::from_ne_bytes(b.try_into().unwrap()))
            .unwrap_or(libc::EPROTO)
    }
}

/// The messages in one received datagram.
pub fn messages(mut buf: &[u8]) -> impl Iterator<Item = Msg<'_>> {
    std::iter::from_fn(move || {
        if buf.len() < 16 {
            return None;
        }
        let len = u32::from_ne_bytes(buf[0..4].try_into().unwrap()) as usize;
        if len < 16 || len > buf.len() {
            return None;
        }
        let m = Msg {
            ty: u16::from_ne_bytes(buf[4..6].try_into().unwrap()),
            flags: u16::from_ne_bytes(buf[6..8].try_into().unwrap()),
            seq: u32::from_ne_bytes(buf[8..12].try_into().unwrap()),
            payload: &buf[16..len],
        };
        buf = &buf[align(len).min(buf.len())..];
        Some(m)
    })
}

/// Attributes (type without flag bits, value) of a payload, after `skip` header bytes.
pub fn attrs(payload: &[u8], skip: usize) -> impl Iterator<Item = (u16, &[u8])> {
    let mut buf = payload.get(skip..).unwrap_or_default();
    std::iter::from_fn(move || {
        if buf.len() < 4 {
            return None;
        }
        let len = u16::from_ne_bytes(buf[0..2].try_into().unwrap()) as usize;
        let ty = u16::from_ne_bytes(buf[2..4].try_into().unwrap()) & 0x3fff;
        if len < 4 || len > buf.len() {
            return None;
        }
        let v = &buf[4..len];
        buf = &buf[align(len).min(buf.len())..];
        Some((ty, v))
    })
}

fn align(n: usize) -> usize {
    (n + 3) & !3
}

/// Builds a buffer of netlink messages with nested attributes.
#[derive(Default)]
pub struct Builder {
    pub buf: Vec<u8>,
    msg: usize,
    nests: Vec<usize>,
}

impl Builder {
    /// Starts a message; `header` is the family header that follows the netlink one.
    pub fn begin(&mut self, ty: u16, flags: u16, seq: u32, header: &[u8]) -> &mut Self {
        self.msg = self.buf.len();
        self.buf.extend_from_slice(&0u32.to_ne_bytes());
        self.buf.extend_from_slice(&ty.to_ne_bytes());
        self.buf.extend_from_slice(&flags.to_ne_bytes());
        self.buf.extend_from_slice(&seq.to_ne_bytes());
        self.buf.extend_from_slice(&0u32.to_ne_bytes());
        self.buf.extend_from_slice(header);
        self.pad();
        self
    }

    pub fn end(&mut self) -> &mut Self {
        let len = (self.buf.len() - self.msg) as u32;
        self.buf[self.msg..self.msg + 4].copy_from_slice(&len.to_ne_bytes());
        self
    }

    pub fn attr(&mut self, ty: u16, v: &[u8]) -> &mut Self {
        self.buf
            .extend_from_slice(&((4 + v.len()) as u16).to_ne_bytes());
        self.buf.extend_from_slice(&ty.to_ne_bytes());
        self.buf.extend_from_slice(v);
        self.pad();
        self
    }

    /// A NUL-terminated string attribute.
    pub fn str(&mut self, ty: u16, s: &str) -> &mut Self {
        let mut v = s.as_bytes().to_vec();
        v.push(0);
        self.attr(ty, &v)
    }

    /// A big-endian u32, as nftables wants its numbers.
    pub fn be32(&mut self, ty: u16, v: u32) -> &mut Self {
        self.attr(ty, &v.to_be_bytes())
    }

    pub fn be64(&mut self, ty: u16, v: u64) -> &mut Self {
        self.attr(ty, &v.to_be_bytes())
    }

    pub fn nest(&mut self, ty: u16) -> &mut Self {
        self.nests.push(self.buf.len());
        self.buf.extend_from_slice(&0u16.to_ne_bytes());
        self.buf
            .extend_from_slice(&(ty | NLA_F_NESTED).to_ne_bytes());
        self
    }

    pub fn unnest(&mut self) -> &mut Self {
        let start = self.nests.pop().expect("unbalanced nest");
        let len = (self.buf.len() - start) as u16;
        self.buf[start..start + 2].copy_from_slice(&len.to_ne_bytes());
        self
    }

    fn pad(&mut self) {
        while self.buf.len() % 4 != 0 {
            self.buf.push(0);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builds_and_parses_nested_attributes() {
        let mut b = Builder::default();
        b.begin(7, NLM_F_REQUEST, 9, &[1, 0, 0, 0])
            .str(1, "abc")
            .nest(2)
            .be32(1, 5)
            .unnest()
            .end();
        let m: Vec<Msg> = messages(&b.buf).collect();
        assert_eq!(m.len(), 1);
        assert_eq!((m[0].ty, m[0].seq), (7, 9));
        let a: Vec<(u16, &[u8])> = attrs(m[0].payload, 4).collect();
        assert_eq!(a[0], (1, &b"abc\0"[..]));
        assert_eq!(a[1].0, 2);
        let inner: Vec<(u16, &[u8])> = attrs(a[1].1, 0).collect();
        assert_eq!(inner, [(1, &5u32.to_be_bytes()[..])]);
        assert_eq!(b.buf.len() % 4, 0);
    }
}
