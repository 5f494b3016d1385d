//! The few rtnetlink operations the bridge plugin needs, with errors that name the
//! link and address involved.

use crate::netns::NetNs;
use cni::{CniError, CniResult};
use futures::TryStreamExt;
use ipnetwork::IpNetwork;
use netlink_packet_route::address::{AddressAttribute, AddressMessage};
use netlink_packet_route::link::{
    InfoBridge, InfoBridgePort, InfoData, InfoKind, LinkAttribute, LinkFlags, LinkInfo,
    LinkMessage, State,
};
use netlink_packet_route::route::{RouteAttribute, RouteMessage};
use netlink_packet_route::AddressFamily;
use rtnetlink::{
    Handle, LinkBridge, LinkMessageBuilder, LinkUnspec, LinkVeth, RouteMessageBuilder,
};
use std::net::IpAddr;

/// A link as the plugin cares about it.
#[derive(Debug, Clone)]
pub struct Link {
    pub index: u32,
    pub name: String,
    pub mac: String,
    pub kind: Option<InfoKind>,
    pub controller: Option<u32>,
    pub mtu: Option<u32>,
    pub up: bool,
    /// Operationally up (RFC 2863 `IF_OPER_UP`): for a bridge port, forwarding can start.
    pub oper_up: bool,
    /// For a veth, the index of its peer (in the peer's namespace).
    pub peer_index: Option<u32>,
}

impl Link {
    fn from_msg(m: &LinkMessage) -> Link {
        let mut l = Link {
            index: m.header.index,
            name: String::new(),
            mac: String::new(),
            kind: None,
            controller: None,
            mtu: None,
            up: m.header.flags.contains(LinkFlags::Up),
            oper_up: false,
            peer_index: None,
        };
        for a in &m.attributes {
            match a {
                LinkAttribute::IfName(n) => l.name = n.clone(),
                LinkAttribute::Address(b) => l.mac = format_mac(b),
                LinkAttribute::Controller(c) => l.controller = Some(*c),
                LinkAttribute::Mtu(v) => l.mtu = Some(*v),
                LinkAttribute::Link(p) => l.peer_index = Some(*p),
                LinkAttribute::OperState(s) => l.oper_up = *s == State::Up,
                LinkAttribute::LinkInfo(infos) => {
                    for i in infos {
                        if let LinkInfo::Kind(k) = i {
                            l.kind = Some(k.clone());
                        }
                    }
                }
                _ => {}
            }
        }
        l
    }
}

pub fn format_mac(b: &[u8]) -> String {
    b.iter()
        .map(|x| format!("{x:02x}"))
        .collect::<Vec<_>>()
        .join(":")
}

pub fn parse_mac(s: &str) -> Option<Vec<u8>> {
    let v: Vec<u8> = s
        .split(':')
        .map(|p| u8::from_str_radix(p, 16))
        .collect::<Result<_, _>>()
        .ok()?;
    (v.len() == 6 && p_is_two_digits(s)).then_some(v)
}

fn p_is_two_digits(s: &str) -> bool {
    s.split(':').all(|p| p.len() == 2)
}

/// The errno of a netlink error, if it is one.
pub fn errno(e: &rtnetlink::Error) -> Option<i32> {
    match e {
        rtnetlink::Error::NetlinkError(m) => m.code.map(|c| -c.get()),
        _ => None,
    }
}

fn nl_err(what: impl std::fmt::Display, e: rtnetlink::Error) -> CniError {
    CniError::io(format!("{what}: {e}"))
}

/// A netlink connection bound to one network namespace.
#[derive(Clone)]
pub struct Netlink {
    pub h: Handle,
}

impl Netlink {
    /// Connects in `ns`, or in the caller's namespace when `None`. Must run inside a
    /// tokio runtime; the connection's task is spawned on it.
    pub fn connect(ns: Option<&NetNs>) -> CniResult<Netlink> {
        let rt = tokio::runtime::Handle::current();
        let made = match ns {
            None => rtnetlink::new_connection(),
            Some(ns) => ns.run(|| {
                let _enter = rt.enter();
                rtnetlink::new_connection()
            })?,
        };
        let (conn, h, _) =
            made.map_err(|e| CniError::io(format!("failed to open netlink socket: {e}")))?;
        tokio::spawn(conn);
        Ok(Netlink { h })
    }

    pub async fn link_by_name(&self, name: &str) -> CniResult<Option<Link>> {
        Self::one_link(
            self.h.link().get().match_name(name),
            format_args!("{name:?}"),
        )
        .await
    }

    pub async fn link_by_index(&self, index: u32) -> CniResult<Option<Link>> {
        Self::one_link(
            self.h.link().get().match_index(index),
            format_args!("{index}"),
        )
        .await
    }

    /// Runs a single-link query; "no such device" is `None`, not an error.
    async fn one_link(
        req: rtnetlink::LinkGetRequest,
        what: std::fmt::Arguments<'_>,
    ) -> CniResult<Option<Link>> {
        match req.execute().try_next().await {
            Ok(m) => Ok(m.as_ref().map(Link::from_msg)),
            Err(e) if errno(&e) == Some(libc::ENODEV) => Ok(None),
            Err(e) => Err(nl_err(format_args!("failed to look up link {what}"), e)),
        }
    }

    /// Creates the bridge or reuses it; anything else by that name is an error.
    pub async fn ensure_bridge(
        &self,
        name: &str,
        mtu: Option<u32>,
        vlan_filtering: bool,
    ) -> CniResult<Link> {
        if let Some(l) = self.link_by_name(name).await? {
            if l.kind != Some(InfoKind::Bridge) {
                return Err(CniError::config(format!(
                    "{name:?} already exists but is not a bridge"
                )));
            }
            if vlan_filtering {
                let msg = LinkMessageBuilder::<LinkBridge>::new(name)
                    .index(l.index)
                    .set_info_data(InfoData::Bridge(vec![InfoBridge::VlanFiltering(true)]))
                    .build();
                self.h.link().set(msg).execute().await.map_err(|e| {
                    nl_err(format_args!("failed to enable vlan filtering on {name}"), e)
                })?;
            }
            self.set_up(l.index, true).await?;
            return Ok(l);
        }
        let mut b = LinkMessageBuilder::<LinkBridge>::new(name).up();
        if let Some(m) = mtu {
            b = b.mtu(m);
        }
        if vlan_filtering {
            b = b.set_info_data(InfoData::Bridge(vec![InfoBridge::VlanFiltering(true)]));
        }
        match self.h.link().add(b.build()).execute().await {
            Ok(()) => {}
            // Another plugin created it between our look-up and add: reuse it.
            Err(e) if errno(&e) == Some(libc::EEXIST) => {}
            Err(e) => return Err(nl_err(format_args!("failed to create bridge {name:?}"), e)),
        }
        let l = self
            .link_by_name(name)
            .await?
            .ok_or_else(|| CniError::io(format!("bridge {name:?} vanished after creation")))?;
        if l.kind != Some(InfoKind::Bridge) {
            return Err(CniError::config(format!(
                "{name:?} already exists but is not a bridge"
            )));
        }
        // Pin the bridge's random address: otherwise the kernel keeps switching it to the
        // lowest port MAC as pods come and go, and every pod's gateway neighbour entry
        // goes stale with it.
        if let Some(mac) = parse_mac(&l.mac) {
            let msg = LinkUnspec::new_with_index(l.index).address(mac).build();
            self.h
                .link()
                .set(msg)
                .execute()
                .await
                .map_err(|e| nl_err(format_args!("failed to set MAC of {name}"), e))?;
        }
        self.set_up(l.index, true).await?;
        Ok(l)
    }

    pub async fn set_up(&self, index: u32, up: bool) -> CniResult<()> {
        let b = LinkUnspec::new_with_index(index);
        let msg = if up { b.up() } else { b.down() }.build();
        self.h
            .link()
            .set(msg)
            .execute()
            .await
            .map_err(|e| nl_err(format_args!("failed to set link {index} up"), e))
    }

    pub async fn set_promisc(&self, index: u32) -> CniResult<()> {
        let msg = LinkUnspec::new_with_index(index).promiscuous(true).build();
        self.h
            .link()
            .set(msg)
            .execute()
            .await
            .map_err(|e| nl_err(format_args!("failed to set link {index} promisc"), e))
    }

    /// Creates a veth pair: `host` here, `peer` directly inside `peer_ns`. Returns the
    /// raw netlink error so the caller can retry a name clash.
    pub async fn add_veth(
        &self,
        host: &str,
        peer: &str,
        peer_ns: &NetNs,
        mtu: Option<u32>,
        peer_mac: Option<Vec<u8>>,
    ) -> Result<(), rtnetlink::Error> {
        use std::os::fd::AsRawFd;
        let mut peer_msg = LinkMessageBuilder::<LinkUnspec>::new()
            .name(peer.to_string())
            .setns_by_fd(peer_ns.fd().as_raw_fd());
        if let Some(m) = mtu {
            peer_msg = peer_msg.mtu(m);
        }
        if let Some(mac) = peer_mac {
            peer_msg = peer_msg.address(mac);
        }
        let mut b = LinkMessageBuilder::<LinkVeth>::new_with_info_kind(InfoKind::Veth)
            .name(host.to_string())
            .set_info_data(InfoData::Veth(netlink_packet_route::link::InfoVeth::Peer(
                peer_msg.build(),
            )));
        if let Some(m) = mtu {
            b = b.mtu(m);
        }
        // Make sure the builder type is LinkVeth's (peer set above by hand).
        let _ = LinkVeth;
        self.h.link().add(b.build()).execute().await
    }

    pub async fn set_controller(&self, index: u32, controller: u32) -> CniResult<()> {
        let msg = LinkUnspec::new_with_index(index)
            .controller(controller)
            .build();
        self.h.link().set(msg).execute().await.map_err(|e| {
            nl_err(
                format_args!("failed to attach link {index} to bridge {controller}"),
                e,
            )
        })
    }

    pub async fn set_hairpin(&self, index: u32, on: bool) -> CniResult<()> {
        self.set_port(index, InfoBridgePort::HairpinMode(on), "hairpin")
            .await
    }

    pub async fn set_isolated(&self, index: u32, on: bool) -> CniResult<()> {
        self.set_port(index, InfoBridgePort::Isolated(on), "port isolation")
            .await
    }

    async fn set_port(&self, index: u32, info: InfoBridgePort, what: &str) -> CniResult<()> {
        let msg = rtnetlink::LinkBridgePort::new(index)
            .append_info_data(info)
            .build();
        self.h
            .link()
            .set_port(msg)
            .execute()
            .await
            .map_err(|e| nl_err(format_args!("failed to set {what} on {index}"), e))
    }

    /// Puts a bridge port (or, with `on_bridge`, the bridge device itself) into `vid`
    /// as its untagged PVID, and out of the default VLAN 1 unless `keep_default`.
    pub async fn set_vlan(
        &self,
        index: u32,
        vid: u16,
        keep_default: bool,
        on_bridge: bool,
    ) -> CniResult<()> {
        use netlink_packet_route::link::BridgeVlanInfoFlags;
        let builder = || {
            let b = rtnetlink::LinkBridgeVlan::new(index);
            if on_bridge {
                b.bridge_self()
            } else {
                b
            }
        };
        if !keep_default {
            self.leave_default_vlan(builder()).await?;
        }
        let msg = builder()
            .vlan(
                vid,
                BridgeVlanInfoFlags::Pvid | BridgeVlanInfoFlags::Untagged,
            )
            .build();
        self.h
            .link()
            .set(msg)
            .execute()
            .await
            .map_err(|e| nl_err(format_args!("failed to set vlan {vid} on {index}"), e))
    }

    /// Takes a bridge port (or the bridge, per `b`) out of the default VLAN 1; one that
    /// is not in it is fine.
    async fn leave_default_vlan(
        &self,
        b: rtnetlink::LinkMessageBuilder<rtnetlink::LinkBridgeVlan>,
    ) -> CniResult<()> {
        use netlink_packet_route::link::BridgeVlanInfoFlags;
        let msg = b.vlan(1, BridgeVlanInfoFlags::empty()).build();
        let index = msg.header.index;
        match self.h.link().del_with_message(msg).execute().await {
            Ok(()) => Ok(()),
            Err(e) if errno(&e) == Some(libc::ENOENT) || errno(&e) == Some(libc::EINVAL) => Ok(()),
            Err(e) => Err(nl_err(
                format_args!("failed to remove default vlan from {index}"),
                e,
            )),
        }
    }

    /// Adds the sorted `vids` to a bridge port, tagged, in one message (consecutive ids
    /// as one range); drops the port from the default VLAN 1 unless `keep_default`.
    pub async fn add_trunk(&self, index: u32, vids: &[u16], keep_default: bool) -> CniResult<()> {
        use netlink_packet_route::link::BridgeVlanInfoFlags as F;
        if !keep_default && !vids.contains(&1) {
            self.leave_default_vlan(rtnetlink::LinkBridgeVlan::new(index))
                .await?;
        }
        let mut b = rtnetlink::LinkBridgeVlan::new(index);
        for (first, last) in vid_ranges(vids) {
            b = if first == last {
                b.vlan(first, F::empty())
            } else {
                b.vlan_range_start(first, F::empty())
                    .vlan_range_end(last, F::empty())
            };
        }
        self.h
            .link()
            .set(b.build())
            .execute()
            .await
            .map_err(|e| nl_err(format_args!("failed to add trunk vlans to {index}"), e))
    }

    pub async fn del_link(&self, index: u32) -> CniResult<()> {
        match self.h.link().del(index).execute().await {
            Ok(()) => Ok(()),
            Err(e) if errno(&e) == Some(libc::ENODEV) => Ok(()),
            Err(e) => Err(nl_err(format_args!("failed to delete link {index}"), e)),
        }
    }

    /// Addresses of a link, with their prefix lengths, both families.
    pub async fn addrs(&self, index: u32) -> CniResult<Vec<IpNetwork>> {
        let msgs: Vec<AddressMessage> = self
            .h
            .address()
            .get()
            .set_link_index_filter(index)
            .execute()
            .try_collect()
            .await
            .map_err(|e| nl_err(format_args!("failed to list addresses of link {index}"), e))?;
        Ok(msgs
            .iter()
            .filter(|m| m.header.index == index)
            .filter_map(|m| {
                let ip = m.attributes.iter().find_map(|a| match a {
                    AddressAttribute::Address(ip) => Some(*ip),
                    _ => None,
                })?;
                IpNetwork::new(ip, m.header.prefix_len).ok()
            })
            .collect())
    }

    /// `ip` reached at `mac` through link `index`, in the neighbour table as STALE (used
    /// at once, confirmed by the kernel on use), replacing what was there.
    pub async fn replace_neigh(&self, index: u32, ip: IpAddr, mac: &[u8]) -> CniResult<()> {
        self.h
            .neighbours()
            .add(index, ip)
            .link_layer_address(mac)
            .state(netlink_packet_route::neighbour::NeighbourState::Stale)
            .replace()
            .execute()
            .await
            .map_err(|e| {
                nl_err(
                    format_args!("failed to set the neighbour {ip} on link {index}"),
                    e,
                )
            })
    }

    pub async fn add_addr(&self, index: u32, net: IpNetwork) -> CniResult<()> {
        match self
            .h
            .address()
            .add(index, net.ip(), net.prefix())
            .execute()
            .await
        {
            Ok(()) => Ok(()),
            Err(e) if errno(&e) == Some(libc::EEXIST) => Ok(()),
            Err(e) => Err(nl_err(
                format_args!("failed to add address {net} to link {index}"),
                e,
            )),
        }
    }

    pub async fn del_addr(&self, index: u32, net: IpNetwork) -> CniResult<()> {
        let mut msg = AddressMessage::default();
        msg.header.family = if net.is_ipv4() {
            AddressFamily::Inet
        } else {
            AddressFamily::Inet6
        };
        msg.header.prefix_len = net.prefix();
        msg.header.index = index;
        msg.attributes.push(AddressAttribute::Address(net.ip()));
        if net.is_ipv4() {
            msg.attributes.push(AddressAttribute::Local(net.ip()));
        }
        self.h
            .address()
            .del(msg)
            .execute()
            .await
            .map_err(|e| nl_err(format_args!("failed to delete address {net}"), e))
    }

    /// Adds a route out of `index`; an identical existing route is fine.
    pub async fn add_route(&self, index: u32, dst: IpNetwork, gw: Option<IpAddr>) -> CniResult<()> {
        let what = || format!("failed to add route {dst} via {gw:?}");
        let mut b = RouteMessageBuilder::<IpAddr>::new()
            .destination_prefix(dst.network(), dst.prefix())
            .map_err(|e| CniError::config(format!("{}: {e}", what())))?
            .output_interface(index)
            // What `ip route add` and the reference plugin record as the route's origin.
            .protocol(netlink_packet_route::route::RouteProtocol::Boot);
        if let Some(g) = gw {
            b = b
                .gateway(g)
                .map_err(|e| CniError::config(format!("{}: {e}", what())))?;
        }
        match self.h.route().add(b.build()).execute().await {
            Ok(()) => Ok(()),
            Err(e) if errno(&e) == Some(libc::EEXIST) => Ok(()),
            Err(e) => Err(nl_err(what(), e)),
        }
    }

    /// Routes of the main table going out of `index`: (dst, gateway).
    pub async fn routes(
        &self,
        index: u32,
        v6: bool,
    ) -> CniResult<Vec<(IpNetwork, Option<IpAddr>)>> {
        let mut q = RouteMessage::default();
        q.header.address_family = if v6 {
            AddressFamily::Inet6
        } else {
            AddressFamily::Inet
        };
        let msgs: Vec<RouteMessage> = self
            .h
            .route()
            .get(q)
            .execute()
            .try_collect()
            .await
            .map_err(|e| nl_err("failed to list routes", e))?;
        let mut out = Vec::new();
        for m in msgs {
            let mut oif = None;
            let mut dst = None;
            let mut gw = None;
            for a in &m.attributes {
                match a {
                    RouteAttribute::Oif(i) => oif = Some(*i),
                    RouteAttribute::Destination(d) => dst = route_addr(d),
                    RouteAttribute::Gateway(g) => gw = route_addr(g),
                    _ => {}
                }
            }
            if oif != Some(index) {
                continue;
            }
            let base = dst.unwrap_or(if v6 {
                IpAddr::from([0u16; 8])
            } else {
                IpAddr::from([0u8; 4])
            });
            if let Ok(net) = IpNetwork::new(base, m.header.destination_prefix_length) {
                out.push((net, gw));
            }
        }
        Ok(out)
    }
}

fn route_addr(a: &netlink_packet_route::route::RouteAddress) -> Option<IpAddr> {
    use netlink_packet_route::route::RouteAddress;
    match a {
        RouteAddress::Inet(v) => Some(IpAddr::V4(*v)),
        RouteAddress::Inet6(v) => Some(IpAddr::V6(*v)),
        _ => None,
    }
}

/// Sorted, distinct VLAN ids as (first, last) runs of consecutive ids, so a trunk of
/// thousands of VLANs is a handful of netlink attributes.
fn vid_ranges(vids: &[u16]) -> Vec<(u16, u16)> {
    let mut out: Vec<(u16, u16)> = Vec::new();
    for &v in vids {
        match out.last_mut() {
            Some((_, last)) if *last + 1 == v => *last = v,
            _ => out.push((v, v)),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn vlan_runs() {
        assert_eq!(vid_ranges(&[1, 2, 3, 7, 9, 10]), [(1, 3), (7, 7), (9, 10)]);
        assert!(vid_ranges(&[]).is_empty());
    }

    #[test]
    fn macs() {
        assert_eq!(format_mac(&[0xaa, 0, 1, 2, 3, 0xff]), "aa:00:01:02:03:ff");
        assert_eq!(
            parse_mac("aa:00:01:02:03:ff").unwrap(),
            vec![0xaa, 0, 1, 2, 3, 0xff]
        );
        assert!(parse_mac("aa:00:01:02:03").is_none());
        assert!(parse_mac("aa:0:01:02:03:ff").is_none());
        assert!(parse_mac("zz:00:01:02:03:ff").is_none());
    }
}
