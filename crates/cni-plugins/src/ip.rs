//! Address arithmetic shared by the IPAM allocator and the bridge: both families as
//! 128-bit integers so ranges, gateways and broadcasts are computed one way.

use ipnetwork::IpNetwork;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

pub fn to_u128(ip: IpAddr) -> u128 {
    match ip {
        IpAddr::V4(a) => u32::from(a) as u128,
        IpAddr::V6(a) => u128::from(a),
    }
}

/// The address `n` of the same family as `like`.
pub fn from_u128(n: u128, like: IpAddr) -> IpAddr {
    match like {
        IpAddr::V4(_) => IpAddr::V4(Ipv4Addr::from(n as u32)),
        IpAddr::V6(_) => IpAddr::V6(Ipv6Addr::from(n)),
    }
}

pub fn next(ip: IpAddr) -> IpAddr {
    from_u128(to_u128(ip).wrapping_add(1), ip)
}

/// The subnet with its host bits cleared.
pub fn network_of(net: IpNetwork) -> IpNetwork {
    IpNetwork::new(net.network(), net.prefix()).expect("prefix already valid")
}

/// The last address of the subnet (the broadcast address for IPv4).
pub fn last_of(net: IpNetwork) -> IpAddr {
    match net {
        IpNetwork::V4(n) => IpAddr::V4(n.broadcast()),
        IpNetwork::V6(n) => {
            let bits = 128 - n.prefix() as u32;
            let mask = if bits == 128 {
                u128::MAX
            } else {
                (1u128 << bits) - 1
            };
            IpAddr::V6(Ipv6Addr::from(u128::from(n.network()) | mask))
        }
    }
}

pub fn same_family(a: IpAddr, b: IpAddr) -> bool {
    a.is_ipv4() == b.is_ipv4()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arithmetic() {
        let n: IpNetwork = "10.1.2.3/16".parse().unwrap();
        assert_eq!(network_of(n).to_string(), "10.1.0.0/16");
        assert_eq!(last_of(n).to_string(), "10.1.255.255");
        assert_eq!(next("10.0.0.255".parse().unwrap()).to_string(), "10.0.1.0");
        let n6: IpNetwork = "fd00:1::5/64".parse().unwrap();
        assert_eq!(last_of(n6).to_string(), "fd00:1::ffff:ffff:ffff:ffff");
        assert_eq!(next("fd00::ffff".parse().unwrap()).to_string(), "fd00::1:0");
    }
}
