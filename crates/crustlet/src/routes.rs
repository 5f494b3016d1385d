//! `--pod-routes`: the node's routes to the other nodes' pods, for nodes that share one
//! L2 segment and have no cluster network doing it (the way flannel's host-gw backend
//! works): for every other Node that is Ready, has an InternalIP and a pod CIDR of the
//! IP's family, a route `podCIDR via InternalIP` in the main table.
//!
//! The routes carry their own protocol number ([`PROTO`], `ip route show proto 77`):
//! that is how a restarted crustlet finds the routes it made before (and changes or
//! removes them rather than adding twice), and how it leaves every other route alone.
//! A destination someone else already routes is not taken over: it is logged instead.
//!
//! Nothing is decided before the Nodes have been listed once, so a start or an
//! apiserver outage never removes routes for want of knowing the Nodes; while the
//! apiserver is away the last list stands.

use futures::{StreamExt, TryStreamExt};
use ipnetwork::IpNetwork;
use k8s_openapi::api::core::v1::Node;
use kube::api::Api;
use kube::runtime::reflector::{self, Store};
use kube::runtime::{watcher, WatchStreamExt};
use netlink_packet_route::route::{
    RouteAddress, RouteAttribute, RouteHeader, RouteMessage, RouteProtocol, RouteType,
};
use netlink_packet_route::AddressFamily;
use rtnetlink::{Handle, RouteMessageBuilder};
use std::collections::{BTreeMap, BTreeSet};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::sync::Arc;
use std::time::Duration;

/// The route protocol of the crustlet's routes (not one of iproute2's reserved ones).
pub const PROTO: u8 = 77;

/// How often the routes are checked with nothing changed (a route removed by hand
/// comes back within this).
const RESYNC: Duration = Duration::from_secs(60);

/// Destination -> gateway.
pub type Routes = BTreeMap<IpNetwork, IpAddr>;

/// The pod CIDRs of a Node (`podCIDRs`, else `podCIDR`), those that parse.
fn cidrs(n: &Node) -> Vec<IpNetwork> {
    let Some(spec) = n.spec.as_ref() else {
        return vec![];
    };
    let list: Vec<&String> = match (&spec.pod_cidrs, &spec.pod_cidr) {
        (Some(l), _) if !l.is_empty() => l.iter().collect(),
        (_, Some(one)) => vec![one],
        _ => vec![],
    };
    list.iter().filter_map(|c| c.parse().ok()).collect()
}

fn ready(n: &Node) -> bool {
    n.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

fn internal_ips(n: &Node) -> Vec<IpAddr> {
    n.status
        .as_ref()
        .and_then(|s| s.addresses.as_ref())
        .map(|a| {
            a.iter()
                .filter(|a| a.type_ == "InternalIP")
                .filter_map(|a| a.address.parse().ok())
                .collect()
        })
        .unwrap_or_default()
}

fn overlap(a: &IpNetwork, b: &IpNetwork) -> bool {
    a.is_ipv4() == b.is_ipv4() && (a.contains(b.network()) || b.contains(a.network()))
}

/// The routes this node should have: each other Ready Node's pod CIDRs via its first
/// InternalIP of the same family. Nodes are taken by name, so of two claiming one
/// CIDR the first wins, the same on every node; a CIDR overlapping this node's own is
/// never routed away.
pub fn wanted<'a>(nodes: impl IntoIterator<Item = &'a Node>, own: &str) -> Routes {
    let mut nodes: Vec<&Node> = nodes.into_iter().collect();
    nodes.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
    let mut own_cidrs = vec![];
    let mut out = Routes::new();
    for n in nodes {
        if n.metadata.name.as_deref() == Some(own) {
            own_cidrs = cidrs(n);
            continue;
        }
        if !ready(n) {
            continue;
        }
        let ips = internal_ips(n);
        for c in cidrs(n) {
            if let Some(gw) = ips.iter().find(|ip| ip.is_ipv4() == c.is_ipv4()) {
                out.entry(c).or_insert(*gw);
            }
        }
    }
    out.retain(|c, _| !own_cidrs.iter().any(|o| overlap(o, c)));
    out
}

/// What to do to the routing table.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Plan {
    /// Routes to add, or whose gateway changed (replaced in place).
    pub set: Vec<(IpNetwork, IpAddr)>,
    /// Routes of ours no longer wanted.
    pub delete: Vec<(IpNetwork, IpAddr)>,
    /// Wanted destinations already routed by someone else: left alone.
    pub taken: Vec<IpNetwork>,
}

/// From `ours` (the table's routes with [`PROTO`]) and `others` (the main table's other
/// destinations) to `wanted`.
pub fn plan(ours: &Routes, others: &BTreeSet<IpNetwork>, wanted: &Routes) -> Plan {
    let mut p = Plan::default();
    for (dst, gw) in wanted {
        if others.contains(dst) && !ours.contains_key(dst) {
            p.taken.push(*dst);
        } else if ours.get(dst) != Some(gw) {
            p.set.push((*dst, *gw));
        }
    }
    for (dst, gw) in ours {
        if !wanted.contains_key(dst) {
            p.delete.push((*dst, *gw));
        }
    }
    p
}

/// Watches the Nodes and keeps the routes, for as long as the crustlet runs.
pub fn start(client: kube::Client, own: String) {
    let (store, writer) = reflector::store();
    let changed = Arc::new(tokio::sync::Notify::new());
    // Of a Node only what decides its route is kept (its image list is most of it).
    let watch =
        watcher(Api::<Node>::all(client), watcher::Config::default()).modify(|n: &mut Node| {
            n.metadata.managed_fields = None;
            n.metadata.annotations = None;
            if let Some(s) = n.status.as_mut() {
                s.images = None;
                s.node_info = None;
            }
        });
    let stream = reflector::reflector(writer, watch).default_backoff();
    let tx = changed.clone();
    tokio::spawn(async move {
        let mut stream = std::pin::pin!(stream);
        while let Some(r) = stream.next().await {
            match r {
                Ok(_) => tx.notify_one(),
                Err(e) => tracing::debug!("nodes watch: {e}"),
            }
        }
    });
    tokio::spawn(async move {
        let handle = loop {
            match rtnetlink::new_connection() {
                Ok((conn, handle, _)) => {
                    tokio::spawn(conn);
                    break handle;
                }
                Err(e) => {
                    tracing::error!("pod routes: no netlink socket: {e}");
                    tokio::time::sleep(RESYNC).await;
                }
            }
        };
        if store.wait_until_ready().await.is_err() {
            return;
        }
        let mut last_taken = vec![];
        loop {
            if let Err(e) = reconcile(&handle, &store, &own, &mut last_taken).await {
                tracing::warn!("pod routes: {e}");
            }
            tokio::select! {
                _ = changed.notified() => {}
                _ = tokio::time::sleep(RESYNC) => {}
            }
        }
    });
}

async fn reconcile(
    h: &Handle,
    store: &Store<Node>,
    own: &str,
    last_taken: &mut Vec<IpNetwork>,
) -> Result<(), String> {
    let nodes = store.state();
    let want = wanted(nodes.iter().map(|n| &**n), own);
    let (ours, others) = table(h).await?;
    let p = plan(&ours, &others, &want);
    if p.taken != *last_taken {
        for dst in &p.taken {
            tracing::warn!("pod routes: {dst} is already routed by someone else: left alone");
        }
        *last_taken = p.taken.clone();
    }
    for (dst, gw) in &p.set {
        match h.route().add(message(*dst, *gw)).replace().execute().await {
            Ok(()) => tracing::info!("pod routes: {dst} via {gw}"),
            Err(e) => tracing::warn!("pod routes: adding {dst} via {gw}: {e}"),
        }
    }
    for (dst, gw) in &p.delete {
        match h.route().del(message(*dst, *gw)).execute().await {
            Ok(()) => tracing::info!("pod routes: removed {dst} via {gw}"),
            Err(e) => tracing::warn!("pod routes: removing {dst} via {gw}: {e}"),
        }
    }
    Ok(())
}

/// The route `dst via gw` with [`PROTO`] in the main table.
fn message(dst: IpNetwork, gw: IpAddr) -> RouteMessage {
    let proto = RouteProtocol::from(PROTO);
    match (dst, gw) {
        (IpNetwork::V4(d), IpAddr::V4(g)) => RouteMessageBuilder::<Ipv4Addr>::new()
            .destination_prefix(d.network(), d.prefix())
            .gateway(g)
            .protocol(proto)
            .build(),
        (IpNetwork::V6(d), IpAddr::V6(g)) => {
            let mut m = RouteMessageBuilder::<Ipv6Addr>::new()
                .destination_prefix(d.network(), d.prefix())
                .protocol(proto)
                .build();
            m.attributes
                .push(RouteAttribute::Gateway(RouteAddress::Inet6(g)));
            m
        }
        // `wanted` pairs families; a mixed pair cannot be routed.
        (d, _) => RouteMessageBuilder::<IpAddr>::new()
            .destination_prefix(d.network(), d.prefix())
            .map(|b| b.protocol(proto).build())
            .unwrap_or_default(),
    }
}

/// The main table's unicast routes: ours (destination -> gateway) and the others'
/// destinations.
async fn table(h: &Handle) -> Result<(Routes, BTreeSet<IpNetwork>), String> {
    let mut ours = Routes::new();
    let mut others = BTreeSet::new();
    for family in [AddressFamily::Inet, AddressFamily::Inet6] {
        let mut q = RouteMessage::default();
        q.header.address_family = family;
        let msgs: Vec<RouteMessage> = h
            .route()
            .get(q)
            .execute()
            .try_collect()
            .await
            .map_err(|e| format!("listing routes: {e}"))?;
        for m in msgs {
            let mut table = u32::from(m.header.table);
            let (mut dst, mut gw) = (None, None);
            for a in &m.attributes {
                match a {
                    RouteAttribute::Table(t) => table = *t,
                    RouteAttribute::Destination(d) => dst = addr(d),
                    RouteAttribute::Gateway(g) => gw = addr(g),
                    _ => {}
                }
            }
            if table != u32::from(RouteHeader::RT_TABLE_MAIN) || m.header.kind != RouteType::Unicast
            {
                continue;
            }
            let base = dst.unwrap_or(match family {
                AddressFamily::Inet6 => IpAddr::V6(Ipv6Addr::UNSPECIFIED),
                _ => IpAddr::V4(Ipv4Addr::UNSPECIFIED),
            });
            let Ok(net) = IpNetwork::new(base, m.header.destination_prefix_length) else {
                continue;
            };
            match (m.header.protocol == RouteProtocol::from(PROTO), gw) {
                (true, Some(gw)) => {
                    ours.insert(net, gw);
                }
                _ => {
                    others.insert(net);
                }
            }
        }
    }
    Ok((ours, others))
}

fn addr(a: &RouteAddress) -> Option<IpAddr> {
    match a {
        RouteAddress::Inet(v) => Some(IpAddr::V4(*v)),
        RouteAddress::Inet6(v) => Some(IpAddr::V6(*v)),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{NodeAddress, NodeCondition, NodeSpec, NodeStatus};

    fn node(name: &str, cidrs: &[&str], ips: &[&str], ready: bool) -> Node {
        Node {
            metadata: kube::api::ObjectMeta {
                name: Some(name.into()),
                ..Default::default()
            },
            spec: Some(NodeSpec {
                pod_cidr: cidrs.first().map(|c| c.to_string()),
                pod_cidrs: Some(cidrs.iter().map(|c| c.to_string()).collect()),
                ..Default::default()
            }),
            status: Some(NodeStatus {
                addresses: Some(
                    ips.iter()
                        .map(|ip| NodeAddress {
                            type_: "InternalIP".into(),
                            address: ip.to_string(),
                        })
                        .chain(std::iter::once(NodeAddress {
                            type_: "Hostname".into(),
                            address: name.into(),
                        }))
                        .collect(),
                ),
                conditions: Some(vec![NodeCondition {
                    type_: "Ready".into(),
                    status: if ready { "True" } else { "False" }.into(),
                    ..Default::default()
                }]),
                ..Default::default()
            }),
        }
    }

    fn r(pairs: &[(&str, &str)]) -> Routes {
        pairs
            .iter()
            .map(|(d, g)| (d.parse().unwrap(), g.parse().unwrap()))
            .collect()
    }

    #[test]
    fn every_other_ready_node_by_family() {
        let nodes = [
            node("a", &["10.244.0.0/24"], &["192.168.1.1"], true),
            node(
                "b",
                &["10.244.1.0/24", "fd00:1::/64"],
                &["192.168.1.2", "fc00::2"],
                true,
            ),
            // No IPv6 address: no route for its IPv6 range.
            node(
                "c",
                &["10.244.2.0/24", "fd00:2::/64"],
                &["192.168.1.3"],
                true,
            ),
            node("d", &["10.244.3.0/24"], &["192.168.1.4"], false),
            node("e", &[], &["192.168.1.5"], true),
            node("f", &["10.244.5.0/24"], &[], true),
        ];
        assert_eq!(
            wanted(&nodes, "a"),
            r(&[
                ("10.244.1.0/24", "192.168.1.2"),
                ("fd00:1::/64", "fc00::2"),
                ("10.244.2.0/24", "192.168.1.3"),
            ])
        );
    }

    #[test]
    fn a_range_of_ours_or_claimed_twice() {
        let nodes = [
            node("z", &["10.244.1.0/24"], &["192.168.1.26"], true),
            node("a", &["10.244.0.0/16"], &["192.168.1.1"], true),
            node("b", &["10.244.1.0/24"], &["192.168.1.2"], true),
            node("c", &["10.245.0.0/24"], &["192.168.1.3"], true),
        ];
        // Own range 10.244.0.0/16 covers b's and z's: never routed elsewhere.
        assert_eq!(wanted(&nodes, "a"), r(&[("10.245.0.0/24", "192.168.1.3")]));
        // b and z claim one range: b (first by name) wins.
        assert_eq!(
            wanted(&nodes, "c"),
            r(&[
                ("10.244.0.0/16", "192.168.1.1"),
                ("10.244.1.0/24", "192.168.1.2")
            ])
        );
        // Without its own Node (not registered yet) the rest still stands.
        assert_eq!(wanted(&nodes, "new").len(), 3);
    }

    #[test]
    fn the_plan_touches_only_ours() {
        let ours = r(&[
            ("10.244.1.0/24", "192.168.1.2"),
            ("10.244.2.0/24", "192.168.1.3"),
            ("10.244.9.0/24", "192.168.1.9"),
        ]);
        let others: BTreeSet<IpNetwork> = ["0.0.0.0/0", "10.244.0.0/24", "10.244.4.0/24"]
            .iter()
            .map(|s| s.parse().unwrap())
            .collect();
        let want = r(&[
            ("10.244.1.0/24", "192.168.1.2"),  // as it is
            ("10.244.2.0/24", "192.168.1.33"), // the node's IP changed
            ("10.244.3.0/24", "192.168.1.4"),  // a new node
            ("10.244.4.0/24", "192.168.1.5"),  // someone else's route
        ]);
        let p = plan(&ours, &others, &want);
        assert_eq!(
            p,
            Plan {
                set: vec![
                    (
                        "10.244.2.0/24".parse().unwrap(),
                        "192.168.1.33".parse().unwrap()
                    ),
                    (
                        "10.244.3.0/24".parse().unwrap(),
                        "192.168.1.4".parse().unwrap()
                    ),
                ],
                delete: vec![(
                    "10.244.9.0/24".parse().unwrap(),
                    "192.168.1.9".parse().unwrap()
                )],
                taken: vec!["10.244.4.0/24".parse().unwrap()],
            }
        );
        // Once applied, nothing more to do: a restart finds its own routes and adds
        // none twice.
        let applied = r(&[
            ("10.244.1.0/24", "192.168.1.2"),
            ("10.244.2.0/24", "192.168.1.33"),
            ("10.244.3.0/24", "192.168.1.4"),
        ]);
        let p = plan(&applied, &others, &want);
        assert!(p.set.is_empty() && p.delete.is_empty(), "{p:?}");
    }

    #[test]
    fn messages_carry_the_protocol_and_the_family() {
        let m = message(
            "10.244.1.0/24".parse().unwrap(),
            "192.168.1.2".parse().unwrap(),
        );
        assert_eq!(m.header.protocol, RouteProtocol::Other(PROTO));
        assert_eq!(m.header.destination_prefix_length, 24);
        assert_eq!(m.header.table, RouteHeader::RT_TABLE_MAIN);
        assert!(m
            .attributes
            .contains(&RouteAttribute::Gateway(RouteAddress::Inet(
                "192.168.1.2".parse().unwrap()
            ))));
        let m = message("fd00:1::/64".parse().unwrap(), "fc00::2".parse().unwrap());
        assert_eq!(m.header.address_family, AddressFamily::Inet6);
        assert!(m
            .attributes
            .contains(&RouteAttribute::Gateway(RouteAddress::Inet6(
                "fc00::2".parse().unwrap()
            ))));
    }
}
