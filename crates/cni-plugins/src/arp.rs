//! Gratuitous ARP from a pod's new interface.
//!
//! host-local hands an address out again once its range has wrapped, and the node (and
//! the other pods on the bridge) may still hold the previous pod's MAC for it in their
//! neighbour tables. Until the kernel finds out (a stale entry waits 5 s in DELAY, then
//! probes the old MAC), what they send to the new pod goes to a MAC that no longer
//! exists: a probe or a Service's first connections time out. Announcing the address
//! from its new MAC once it is configured updates every existing entry on the segment at
//! once (the kernel takes a gratuitous request for an address it has an entry for even
//! with `arp_accept` off), as the reference plugin does after configuring the pod's side;
//! best effort: the bridge drops it until the kernel marks the new port up. The node's
//! own entry is set directly (bridge's `announce`), so it needs no frame.

use std::io;
use std::net::Ipv4Addr;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

const BROADCAST: [u8; 6] = [0xff; 6];

/// The ARP request that announces `ip` at `mac` (RFC 5227's announcement form: sender
/// and target address both `ip`), with the broadcast address as target hardware address
/// as most announcers send it.
pub fn announcement(mac: [u8; 6], ip: Ipv4Addr) -> [u8; 28] {
    let mut p = [0u8; 28];
    p[0..2].copy_from_slice(&1u16.to_be_bytes()); // hardware: Ethernet
    p[2..4].copy_from_slice(&0x0800u16.to_be_bytes()); // protocol: IPv4
    p[4] = 6;
    p[5] = 4;
    p[6..8].copy_from_slice(&1u16.to_be_bytes()); // request
    p[8..14].copy_from_slice(&mac);
    p[14..18].copy_from_slice(&ip.octets());
    p[18..24].copy_from_slice(&BROADCAST);
    p[24..28].copy_from_slice(&ip.octets());
    p
}

/// Broadcasts the announcement of `ip` at `mac` on interface `ifindex` of the calling
/// thread's network namespace.
pub fn announce(ifindex: u32, mac: [u8; 6], ip: Ipv4Addr) -> io::Result<()> {
    let proto = (libc::ETH_P_ARP as u16).to_be();
    // SAFETY: socket has no memory preconditions; the descriptor is owned at once.
    let fd = unsafe {
        libc::socket(
            libc::AF_PACKET,
            libc::SOCK_DGRAM | libc::SOCK_CLOEXEC,
            i32::from(proto),
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: fd was just returned by socket and nothing else owns it.
    let sock = unsafe { OwnedFd::from_raw_fd(fd) };
    // SAFETY: sockaddr_ll is plain data; all-zero is a valid value to fill in.
    let mut to: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
    to.sll_family = libc::AF_PACKET as u16;
    to.sll_protocol = proto;
    to.sll_ifindex = ifindex as i32;
    to.sll_halen = 6;
    to.sll_addr[..6].copy_from_slice(&BROADCAST);
    let pkt = announcement(mac, ip);
    // SAFETY: pkt and to live across the call, with the lengths given.
    let n = unsafe {
        libc::sendto(
            sock.as_raw_fd(),
            pkt.as_ptr().cast(),
            pkt.len(),
            0,
            (&to as *const libc::sockaddr_ll).cast(),
            std::mem::size_of::<libc::sockaddr_ll>() as libc::socklen_t,
        )
    };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    // Closing a packet socket waits for an RCU grace period (`synchronize_net` in
    // `packet_release`): ~10 ms an ADD would pay. The finishing child closes it.
    crate::finish::defer_close(sock);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn announcement_layout() {
        let p = announcement([2, 0x42, 0xac, 0x11, 0, 2], Ipv4Addr::new(10, 1, 2, 3));
        assert_eq!(
            p,
            [
                0, 1, 8, 0, 6, 4, 0, 1, // Ethernet, IPv4, lengths, request
                2, 0x42, 0xac, 0x11, 0, 2, 10, 1, 2, 3, // sender
                0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 10, 1, 2, 3, // target
            ]
        );
    }
}
