//! Stale UDP conntrack entries of a new mapping's host port, deleted over ctnetlink.
//!
//! NAT is decided by a connection's first packet. A client that sent UDP to the host
//! port before the mapping existed (a DNS resolver retrying, a metrics agent) has a
//! conntrack entry without DNAT, and every later datagram of that flow follows it to
//! the node itself instead of the pod, for as long as the client keeps sending. So
//! after the rules are in, the entries whose original destination port is a UDP host
//! port are deleted, as the reference plugin does; best effort (a failure is only
//! reported on stderr). TCP needs nothing: a new connection is a new entry.

use crate::nft::NETLINK_NETFILTER;
use crate::rawnl::{self, Builder, Socket, NLMSG_DONE, NLMSG_ERROR};
use cni::CniResult;

const CTNETLINK: u16 = 1 << 8;
const CT_GET: u16 = 1;
const CT_DELETE: u16 = 2;
const CTA_TUPLE_ORIG: u16 = 1;
const CTA_TUPLE_PROTO: u16 = 2;
const CTA_PROTO_NUM: u16 = 1;
const CTA_PROTO_DST_PORT: u16 = 3;
const NLA_F_NESTED: u16 = 0x8000;
const IPPROTO_UDP: u8 = 17;

/// Deletes the UDP entries of `family` (AF_INET or AF_INET6) whose original
/// destination port is one of `ports`; returns how many.
pub fn delete_udp(family: u8, ports: &[u16]) -> CniResult<usize> {
    if ports.is_empty() {
        return Ok(0);
    }
    let sock = Socket::open(NETLINK_NETFILTER)?;
    let res = delete_with(&sock, family, ports);
    // A netfilter socket's close may wait on the kernel (see finish.rs).
    crate::finish::defer_close(sock.into_fd());
    res
}

fn delete_with(sock: &Socket, family: u8, ports: &[u16]) -> CniResult<usize> {
    let header = [family, 0, 0, 0];
    let mut b = Builder::default();
    b.begin(
        CTNETLINK | CT_GET,
        rawnl::NLM_F_REQUEST | rawnl::NLM_F_DUMP,
        1,
        &header,
    )
    .end();
    let io = |e: std::io::Error| cni::CniError::io(format!("listing conntrack entries: {e}"));
    sock.send(&b.buf).map_err(io)?;
    // The original tuples to delete, as the kernel gave them.
    let mut stale: Vec<Vec<u8>> = Vec::new();
    let mut buf = vec![0u8; 64 * 1024];
    'dump: loop {
        let d = sock.recv(&mut buf).map_err(io)?;
        for m in rawnl::messages(d) {
            match m.ty {
                NLMSG_DONE => break 'dump,
                NLMSG_ERROR => {
                    return Err(cni::CniError::io(format!(
                        "listing conntrack entries: {}",
                        std::io::Error::from_raw_os_error(m.errno())
                    )))
                }
                _ => {}
            }
            for (ty, tuple) in rawnl::attrs(m.payload, 4) {
                if ty == CTA_TUPLE_ORIG && is_udp_to(tuple, ports) {
                    stale.push(tuple.to_vec());
                }
            }
        }
    }
    let mut deleted = 0;
    for (i, tuple) in stale.iter().enumerate() {
        let mut b = Builder::default();
        b.begin(
            CTNETLINK | CT_DELETE,
            rawnl::NLM_F_REQUEST | rawnl::NLM_F_ACK,
            2 + i as u32,
            &header,
        )
        .attr(CTA_TUPLE_ORIG | NLA_F_NESTED, tuple)
        .end();
        sock.send(&b.buf).map_err(io)?;
        let d = sock.recv(&mut buf).map_err(io)?;
        // Gone meanwhile (ENOENT) is as good as deleted.
        if rawnl::messages(d).any(|m| m.ty == NLMSG_ERROR && m.errno() == 0) {
            deleted += 1;
        }
    }
    Ok(deleted)
}

/// Whether an original tuple is UDP to one of `ports`.
fn is_udp_to(tuple: &[u8], ports: &[u16]) -> bool {
    let Some((_, proto)) = rawnl::attrs(tuple, 0).find(|(t, _)| *t == CTA_TUPLE_PROTO) else {
        return false;
    };
    let (mut udp, mut dport) = (false, None);
    for (t, v) in rawnl::attrs(proto, 0) {
        match t {
            CTA_PROTO_NUM => udp = v.first() == Some(&IPPROTO_UDP),
            CTA_PROTO_DST_PORT if v.len() == 2 => dport = Some(u16::from_be_bytes([v[0], v[1]])),
            _ => {}
        }
    }
    udp && dport.is_some_and(|p| ports.contains(&p))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn attr(ty: u16, v: &[u8]) -> Vec<u8> {
        let mut a = ((4 + v.len()) as u16).to_ne_bytes().to_vec();
        a.extend_from_slice(&ty.to_ne_bytes());
        a.extend_from_slice(v);
        while a.len() % 4 != 0 {
            a.push(0);
        }
        a
    }

    #[test]
    fn finds_udp_tuples_by_destination_port() {
        let proto = |num: u8, dport: u16| {
            let mut p = attr(CTA_PROTO_NUM, &[num]);
            p.extend(attr(2, &1234u16.to_be_bytes()));
            p.extend(attr(CTA_PROTO_DST_PORT, &dport.to_be_bytes()));
            let mut t = attr(1 | NLA_F_NESTED, &attr(1, &[10, 0, 0, 1]));
            t.extend(attr(CTA_TUPLE_PROTO | NLA_F_NESTED, &p));
            t
        };
        assert!(is_udp_to(&proto(17, 5353), &[80, 5353]));
        assert!(!is_udp_to(&proto(17, 5354), &[5353]));
        assert!(!is_udp_to(&proto(6, 5353), &[5353]));
        assert!(!is_udp_to(&[], &[5353]));
    }
}
