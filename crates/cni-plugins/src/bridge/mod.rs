//! The `bridge` plugin: a Linux bridge on the node, a veth pair per attachment with
//! the host end on the bridge and the other end in the pod's namespace, addresses from
//! the IPAM plugin, optionally the gateway address on the bridge and masquerading.
//!
//! ADD, in order, each step undone on a later failure:
//! ```text
//! bridge (create or reuse) -> veth pair (peer created inside the netns) -> port setup
//! (master, hairpin, vlan) -> IPAM ADD -> container side (addresses, up, routes,
//! gratuitous ARP)
//! -> gateway address on the bridge + forwarding -> ipMasq rules -> result
//! ```

pub mod config;

use crate::arp;
use crate::failpoint::failpoint;
use crate::finish::{self, Finish};
use crate::masq::{self, Backend};
use crate::netlink::{errno, Link, Netlink};
use crate::netns::{self, NetNs};
use cni::invoke::{self, InvokeEnv};
use cni::skeleton::{Args, Plugin};
use cni::{code, AddResult, CniError, CniResult, Interface, Route};
use config::BridgeConf;
use ipnetwork::IpNetwork;
use netlink_sys::Socket;
use std::net::IpAddr;
use std::path::Path;

pub struct Bridge;

fn block_on<F: std::future::Future>(f: F) -> CniResult<F::Output> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| CniError::internal(format!("failed to start runtime: {e}")))?;
    Ok(rt.block_on(f))
}

fn ipam_env(args: &Args) -> InvokeEnv {
    InvokeEnv {
        container_id: args.container_id.clone(),
        netns: args.netns.clone(),
        ifname: args.ifname.clone(),
        args: cni::skeleton::format_cni_args(&args.args),
        path: args.path.clone(),
    }
}

fn ipam_type(args: &Args) -> Option<&str> {
    args.conf
        .ipam
        .as_ref()
        .map(|i| i.plugin_type.as_str())
        .filter(|t| !t.is_empty())
}

fn random_veth_name() -> String {
    let mut b = [0u8; 4];
    if let Ok(mut f) = std::fs::File::open("/dev/urandom") {
        use std::io::Read;
        let _ = f.read_exact(&mut b);
    }
    format!("veth{:02x}{:02x}{:02x}{:02x}", b[0], b[1], b[2], b[3])
}

fn default_net(v4: bool) -> IpNetwork {
    if v4 {
        "0.0.0.0/0".parse().unwrap()
    } else {
        "::/0".parse().unwrap()
    }
}

/// What ADD has done so far, so a failure can undo exactly that.
#[derive(Default)]
struct Undo {
    host_veth: Option<u32>,
    ipam: bool,
    /// nftables/iptables rules were (maybe partly) installed; `true` = iptables too.
    rules: Option<bool>,
}

/// The `CNI_ARGS` keys bridge reads (a requested MAC); DEL takes any, so that tearing
/// down never fails on them.
const KNOWN_ARGS: &[&str] = &["MAC"];

impl Plugin for Bridge {
    fn add(&self, args: &Args) -> CniResult<AddResult> {
        let res = as_reference(add_attachment(args));
        // The netfilter socket is closed by a child (see finish.rs); a failure to fork
        // only means this process closes it itself.
        let _ = Finish::default().run();
        if res.is_ok() {
            failpoint!("bridge.add.after_finisher");
        }
        res
    }

    fn del(&self, args: &Args) -> CniResult<()> {
        as_reference(del(args))
    }

    fn check(&self, args: &Args) -> CniResult<()> {
        as_reference(check_attachment(args))
    }

    fn status(&self, args: &Args) -> CniResult<()> {
        status(args)
    }

    fn gc(&self, args: &Args) -> CniResult<()> {
        gc(args)
    }
}

/// The reference bridge reports every failure past its skeleton's own checks (JSON,
/// name, version, environment) as a plain error, code 999: a bad field, VLAN, MTU or
/// MAC, hairpin with promiscuous mode, a missing IPAM plugin, a CHECK without
/// prevResult. Ours says the same, so a runtime sees one code from either plugin; a
/// missing netns stays 3 (the spec's code for it), and an IPAM plugin's own error
/// (host-local's 11 for an exhausted range) is passed on as it came.
pub(crate) fn as_reference<T>(r: CniResult<T>) -> CniResult<T> {
    r.map_err(|e| match e.code {
        code::INVALID_ENVIRONMENT
        | code::IO_FAILURE
        | code::DECODING_FAILURE
        | code::INVALID_NETWORK_CONFIG => CniError::new(code::INTERNAL, e.msg),
        _ => e,
    })
}

/// DEL proper: the IPAM release, the rules and the link, at once.
fn del(args: &Args) -> CniResult<()> {
    let conf = BridgeConf::parse(&args.stdin)?;
    let backend = if conf.ip_masq {
        Some(Backend::choose(conf.ip_masq_backend.as_deref())?)
    } else {
        None
    };
    // The three parts are independent and each mostly waits on the kernel (RCU
    // grace periods for the link and the nftables commit), so they run at once; the
    // kernel's waits after the link is unlisted and the rules are gone are left to
    // a child (see finish.rs).
    std::thread::scope(|s| {
        let ipam = ipam_type(args).map(|t| {
            s.spawn(move || {
                let r = invoke::delegate(t, "DEL", &ipam_env(args), &args.stdin);
                if r.is_ok() {
                    failpoint!("bridge.del.after_ipam");
                }
                r
            })
        });
        let rules = (backend.is_some() || conf.macspoofchk).then(|| {
            let iptables = backend == Some(Backend::Iptables);
            s.spawn(move || {
                let r = masq::teardown(&args.conf.name, &args.container_id, iptables);
                if r.is_ok() {
                    failpoint!("bridge.del.after_rules");
                }
                r
            })
        });
        let link = find_link(args);
        let rules = rules.map(|h| {
            h.join()
                .unwrap_or_else(|_| Err(CniError::internal("ipMasq teardown panicked")))
        });
        let link = match link {
            Ok(l) => Finish { link: l }.run(),
            Err(e) => Finish::default().run().and(Err(e)),
        };
        if link.is_ok() {
            failpoint!("bridge.del.after_link");
        }
        let ipam = ipam.map(|h| {
            h.join()
                .unwrap_or_else(|_| Err(CniError::internal("IPAM DEL panicked")))
        });
        ipam.unwrap_or(Ok(()))?;
        rules.unwrap_or(Ok(()))?;
        link
    })
}

fn check_attachment(args: &Args) -> CniResult<()> {
    args.known_args_only(KNOWN_ARGS)?;
    let conf = BridgeConf::parse(&args.stdin)?;
    let prev = args
        .conf
        .prev_result()?
        .ok_or_else(|| CniError::config("CHECK: required prevResult missing"))?;
    if let Some(t) = ipam_type(args) {
        invoke::delegate(t, "CHECK", &ipam_env(args), &args.stdin)?;
    }
    let ns = NetNs::open(Path::new(&args.netns))?;
    block_on(check(args, &conf, &prev, &ns))??;
    if conf.ip_masq && !prev.ips.is_empty() {
        let backend = Backend::choose(conf.ip_masq_backend.as_deref())?;
        if !masq::masq_present(backend, &args.conf.name, &args.container_id)? {
            return Err(CniError::internal(format!(
                "CHECK: masquerade rules of {} on network {} are missing",
                args.container_id, args.conf.name
            )));
        }
    }
    if conf.macspoofchk && !masq::spoof_present(&args.conf.name, &args.container_id)? {
        return Err(CniError::internal(format!(
            "CHECK: the MAC spoof check of {} on network {} is missing",
            args.container_id, args.conf.name
        )));
    }
    Ok(())
}

fn status(args: &Args) -> CniResult<()> {
    match ipam_type(args) {
        Some(t) => invoke::delegate(t, "STATUS", &ipam_env(args), &args.stdin).map_err(|e| {
            if e.code == code::PLUGIN_NOT_AVAILABLE || e.code == code::PLUGIN_NOT_AVAILABLE_LIMITED
            {
                e
            } else {
                CniError::new(code::PLUGIN_NOT_AVAILABLE, e.msg)
            }
        }),
        None => Ok(()),
    }
}

fn gc(args: &Args) -> CniResult<()> {
    match ipam_type(args) {
        Some(t) => invoke::delegate(t, "GC", &ipam_env(args), &args.stdin),
        None => Ok(()),
    }
}

/// ADD proper: the bridge, the veth, IPAM, the pod and node side, the rules.
fn add_attachment(args: &Args) -> CniResult<AddResult> {
    args.known_args_only(KNOWN_ARGS)?;
    let conf = BridgeConf::parse(&args.stdin)?;
    // The reference's refusals at the start of ADD (DEL takes such a config).
    if conf.hairpin_mode && conf.promisc_mode {
        return Err(CniError::config(
            "cannot set hairpin mode and promiscuous mode at the same time",
        ));
    }
    if conf.disable_container_interface && ipam_type(args).is_some() {
        // The reference plugin's refusal, before anything is made.
        return Err(CniError::internal(
            "cannot use IPAM when DisableContainerInterface flag is set",
        ));
    }
    let mac = conf.requested_mac(&args.args)?;
    let backend = if conf.ip_masq {
        Some(Backend::choose(conf.ip_masq_backend.as_deref())?)
    } else {
        None
    };
    let ns = NetNs::open(Path::new(&args.netns))?;
    // Refuse a second ADD of one attachment before IPAM runs: host-local would hand
    // back the existing address, and rolling this ADD back would then release it.
    let ifname = args.ifname.clone();
    if ns.run(move || nix::net::if_::if_nametoindex(ifname.as_str()).is_ok())? {
        return Err(CniError::internal(format!(
            "container interface {:?} already exists in {}",
            args.ifname, args.netns
        )));
    }
    std::thread::scope(|s| {
        block_on(async {
            let host = Netlink::connect(None)?;
            let cont = Netlink::connect(Some(&ns))?;
            let mut undo = Undo::default();
            let mut ipam: IpamJob = None;
            let res = async {
                let br = host
                    .ensure_bridge(
                        &conf.bridge,
                        conf.mtu,
                        conf.vlan().is_some() || !conf.trunk_vids.is_empty(),
                    )
                    .await?;
                if conf.promisc_mode {
                    host.set_promisc(br.index).await?;
                }
                failpoint!("bridge.add.after_bridge");
                // IPAM runs in its own process anyway: start it now, beside the veth
                // setup, but only once the bridge is known good, so a bad bridge
                // config fails before any address is touched.
                ipam = ipam_type(args).map(|t| {
                    s.spawn(move || invoke::delegate_add(t, &ipam_env(args), &args.stdin))
                });
                add(
                    args, &conf, mac, backend, &ns, &host, &cont, &br, &mut ipam, &mut undo,
                )
                .await
            }
            .await;
            if res.is_err() {
                if let Some(h) = ipam.take() {
                    undo.ipam = matches!(h.join(), Ok(Ok(_)));
                }
                if let Some(iptables) = undo.rules {
                    let _ = masq::teardown(&args.conf.name, &args.container_id, iptables);
                }
                if undo.ipam {
                    if let Some(t) = ipam_type(args) {
                        let _ = invoke::delegate(t, "DEL", &ipam_env(args), &args.stdin);
                    }
                }
                if let Some(idx) = undo.host_veth {
                    let _ = host.del_link(idx).await;
                }
            }
            res
        })?
    })
}

/// The container end of the veth (deleting it deletes the host end too), with two
/// route sockets in the pod's namespace: one to delete it through, one to watch it go.
fn find_link(args: &Args) -> CniResult<Option<(Socket, Socket, u32)>> {
    if args.netns.is_empty() {
        return Ok(None);
    }
    let ns = match NetNs::open(Path::new(&args.netns)) {
        Ok(ns) => ns,
        // The namespace is gone, and the veth went with it.
        Err(e) if e.code == code::UNKNOWN_CONTAINER => return Ok(None),
        Err(e) => return Err(e),
    };
    let (del, probe) = ns.run(|| -> CniResult<(Socket, Socket)> {
        Ok((finish::route_socket()?, finish::route_socket()?))
    })??;
    Ok(finish::link_index(&probe, &args.ifname)?.map(|i| (del, probe, i)))
}

type IpamJob<'scope> = Option<std::thread::ScopedJoinHandle<'scope, CniResult<AddResult>>>;

#[allow(clippy::too_many_arguments)]
async fn add(
    args: &Args,
    conf: &BridgeConf,
    mac: Option<Vec<u8>>,
    backend: Option<Backend>,
    ns: &NetNs,
    host: &Netlink,
    cont: &Netlink,
    br: &Link,
    ipam: &mut IpamJob<'_>,
    undo: &mut Undo,
) -> CniResult<AddResult> {
    let host_veth = host_veth(args, conf, mac, ns, host, br, undo).await?;

    let mut result = addresses(args, conf, ipam, undo)?;

    // The container's MAC (for the spoof check) is known now that the veth exists.
    let c_link = cont
        .link_by_name(&args.ifname)
        .await?
        .ok_or_else(|| CniError::io(format!("{} vanished from {}", args.ifname, args.netns)))?;
    // The rules need only the addresses and the two ends of the veth: install them
    // while the container and the bridge get configured.
    let rules_job = (backend.is_some() || conf.macspoofchk).then(|| {
        undo.rules = Some(backend == Some(Backend::Iptables));
        let nets: Vec<IpNetwork> = if backend.is_some() {
            result.ips.iter().map(|i| i.address).collect()
        } else {
            vec![]
        };
        let spoof = conf
            .macspoofchk
            .then(|| (host_veth.name.clone(), c_link.mac.clone()));
        let (name, id) = (args.conf.name.clone(), args.container_id.clone());
        std::thread::spawn(move || {
            masq::setup(
                backend,
                &name,
                &id,
                &nets,
                spoof.as_ref().map(|(v, m)| (v.as_str(), m.as_str())),
            )
        })
    });
    let configured = configure(args, conf, ns, host, cont, br, &c_link, &result).await;
    if let Some(job) = rules_job {
        job.join()
            .unwrap_or_else(|_| Err(CniError::internal("ipMasq/macspoofchk setup panicked")))?;
        failpoint!("bridge.add.after_rules");
    }
    configured?;
    if !conf.disable_container_interface {
        announce(ns, host, br, &c_link, &result).await;
    }

    result.interfaces = interfaces(args, conf, host, br, &host_veth, &c_link).await?;
    result.dns = conf.dns.clone().unwrap_or_default();
    result.cni_version = args.conf.cni_version.clone();
    Ok(result)
}

/// The veth pair, its host end named at random (a clash with a leftover is retried)
/// and attached to the bridge with the port settings the config asks for.
#[allow(clippy::too_many_arguments)]
async fn host_veth(
    args: &Args,
    conf: &BridgeConf,
    mac: Option<Vec<u8>>,
    ns: &NetNs,
    host: &Netlink,
    br: &Link,
    undo: &mut Undo,
) -> CniResult<Link> {
    let mut host_name = String::new();
    for attempt in 0..10 {
        host_name = random_veth_name();
        match host
            .add_veth(&host_name, &args.ifname, ns, conf.mtu, mac.clone())
            .await
        {
            Ok(()) => break,
            Err(e) if errno(&e) == Some(libc::EEXIST) && attempt < 9 => continue,
            Err(e) => {
                return Err(CniError::io(format!(
                    "failed to create veth pair for {}: {e}",
                    args.ifname
                )))
            }
        }
    }
    failpoint!("bridge.add.after_veth");
    let host_veth = host
        .link_by_name(&host_name)
        .await?
        .ok_or_else(|| CniError::io(format!("veth {host_name} vanished after creation")))?;
    undo.host_veth = Some(host_veth.index);
    host.set_controller(host_veth.index, br.index).await?;
    host.set_up(host_veth.index, true).await?;
    if conf.hairpin_mode {
        host.set_hairpin(host_veth.index, true).await?;
    }
    if conf.port_isolation {
        host.set_isolated(host_veth.index, true).await?;
    }
    if let Some(vid) = conf.vlan() {
        host.set_vlan(host_veth.index, vid, conf.preserve_default_vlan, false)
            .await?;
    }
    if !conf.trunk_vids.is_empty() {
        host.add_trunk(
            host_veth.index,
            &conf.trunk_vids,
            conf.preserve_default_vlan,
        )
        .await?;
    }
    failpoint!("bridge.add.after_port");
    Ok(host_veth)
}

/// The addresses the IPAM plugin gave (its ADD ran meanwhile), on the pod's interface,
/// with the bridge as their gateway and default routes through it when configured.
fn addresses(
    args: &Args,
    conf: &BridgeConf,
    ipam: &mut IpamJob<'_>,
    undo: &mut Undo,
) -> CniResult<AddResult> {
    let mut result = match (ipam.take(), ipam_type(args)) {
        (Some(job), Some(t)) => {
            let r = job
                .join()
                .unwrap_or_else(|_| Err(CniError::internal("IPAM ADD panicked")))?;
            undo.ipam = true;
            failpoint!("bridge.add.after_ipam");
            if r.ips.is_empty() {
                return Err(CniError::internal(format!(
                    "IPAM plugin {t} returned no IP config"
                )));
            }
            r
        }
        _ => AddResult::default(),
    };
    for ipc in result.ips.iter_mut() {
        ipc.interface = Some(2);
        if ipc.gateway.is_none() && conf.is_gateway {
            ipc.gateway = Some(crate::ip::next(ipc.address.network()));
        }
    }
    if conf.is_default_gateway {
        for v4 in [true, false] {
            let gw = result
                .ips
                .iter()
                .find(|i| i.address.is_ipv4() == v4)
                .and_then(|i| i.gateway);
            let Some(gw) = gw else { continue };
            let dflt = default_net(v4);
            if !result.routes.iter().any(|r| r.dst == dflt) {
                result.routes.push(Route::new(dflt, Some(gw)));
            }
        }
    }
    Ok(result)
}

/// The result's interfaces: the bridge (re-read: its MAC changes when the first port
/// joins), the host end of the veth and the pod's end.
async fn interfaces(
    args: &Args,
    conf: &BridgeConf,
    host: &Netlink,
    br: &Link,
    host_veth: &Link,
    c_link: &Link,
) -> CniResult<Vec<Interface>> {
    let br_now = host
        .link_by_name(&conf.bridge)
        .await?
        .unwrap_or_else(|| br.clone());
    Ok(vec![
        Interface {
            name: br_now.name.clone(),
            mac: br_now.mac.clone(),
            ..Default::default()
        },
        Interface {
            name: host_veth.name.clone(),
            mac: host_veth.mac.clone(),
            ..Default::default()
        },
        Interface {
            name: c_link.name.clone(),
            mac: c_link.mac.clone(),
            sandbox: args.netns.clone(),
            ..Default::default()
        },
    ])
}

/// The pod's side (addresses, link, routes) and the node's (gateway address on the
/// bridge, forwarding).
#[allow(clippy::too_many_arguments)]
async fn configure(
    args: &Args,
    conf: &BridgeConf,
    ns: &NetNs,
    host: &Netlink,
    cont: &Netlink,
    br: &Link,
    c_link: &Link,
    result: &AddResult,
) -> CniResult<()> {
    configure_container(args, conf, ns, cont, c_link, result).await?;

    // The node side: gateway addresses on the bridge and forwarding.
    if conf.is_gateway {
        let mut forwarding = (false, false);
        for ipc in &result.ips {
            let Some(gw) = ipc.gateway else { continue };
            let gw_net = IpNetwork::new(gw, ipc.address.prefix())
                .map_err(|e| CniError::config(format!("gateway {gw}: {e}")))?;
            if let Some(vid) = conf.vlan() {
                // The gateway lives on the bridge device, so the bridge itself joins the VLAN.
                host.set_vlan(br.index, vid, true, true).await?;
            }
            ensure_gateway_addr(host, br, gw_net, conf.force_address).await?;
            if gw.is_ipv4() {
                forwarding.0 = true;
            } else {
                forwarding.1 = true;
            }
        }
        if forwarding.0 {
            netns::write_sysctl("net/ipv4/ip_forward", "1")?;
        }
        if forwarding.1 {
            netns::write_sysctl("net/ipv6/conf/all/forwarding", "1")?;
        }
        failpoint!("bridge.add.after_gateway");
    }
    Ok(())
}

/// Addresses, link up and routes inside the pod's namespace.
async fn configure_container(
    args: &Args,
    conf: &BridgeConf,
    ns: &NetNs,
    cont: &Netlink,
    link: &Link,
    result: &AddResult,
) -> CniResult<()> {
    if result.ips.iter().any(|i| i.address.is_ipv6()) {
        let ifname = args.ifname.clone();
        let dad = conf.enabledad;
        ns.run(move || -> CniResult<()> {
            netns::write_sysctl(&format!("net/ipv6/conf/{ifname}/disable_ipv6"), "0")?;
            // DAD delays a fresh address by a second or more and fails under hairpin.
            if !dad {
                netns::write_sysctl(&format!("net/ipv6/conf/{ifname}/accept_dad"), "0")?;
            }
            Ok(())
        })??;
    }
    if !conf.disable_container_interface {
        cont.set_up(link.index, true).await?;
    }
    for ipc in &result.ips {
        cont.add_addr(link.index, ipc.address).await?;
    }
    failpoint!("bridge.add.after_addresses");
    for r in &result.routes {
        let v4 = r.dst.is_ipv4();
        let gw = r.gw.or_else(|| {
            result
                .ips
                .iter()
                .find(|i| i.address.is_ipv4() == v4)
                .and_then(|i| i.gateway)
        });
        cont.add_route(link.index, r.dst, gw).await?;
    }
    failpoint!("bridge.add.after_routes");
    Ok(())
}

/// A reused address (see `arp`: host-local's range wrapped) reaches the new pod at once.
/// The node's own neighbour entry for each of the pod's IPv4 addresses is set to the new
/// MAC on the bridge (what the kubelet's probes use), and the pod sends a gratuitous ARP
/// for the other pods on the bridge. The ARP is best effort, as the reference plugin
/// sends it: until the kernel's link watch (batched, up to a second) marks the host end
/// up, the bridge drops it; waiting for that made every ADD ~15 ms longer, where the
/// node's entry needs no frame at all.
async fn announce(ns: &NetNs, host: &Netlink, br: &Link, c_link: &Link, result: &AddResult) {
    let v4: Vec<std::net::Ipv4Addr> = result
        .ips
        .iter()
        .filter_map(|i| match i.address.ip() {
            IpAddr::V4(a) => Some(a),
            IpAddr::V6(_) => None,
        })
        .collect();
    let mac = crate::netlink::parse_mac(&c_link.mac).and_then(|m| <[u8; 6]>::try_from(m).ok());
    let (Some(mac), false) = (mac, v4.is_empty()) else {
        return;
    };
    for ip in &v4 {
        let _ = host.replace_neigh(br.index, IpAddr::V4(*ip), &mac).await;
    }
    let index = c_link.index;
    let _ = ns.run(move || {
        for ip in v4 {
            let _ = arp::announce(index, mac, ip);
        }
    });
}

/// Puts `gw` on the bridge. Another address of the same subnet already there is an
/// error, unless `forceAddress` replaces it.
async fn ensure_gateway_addr(
    host: &Netlink,
    br: &Link,
    gw: IpNetwork,
    force: bool,
) -> CniResult<()> {
    for a in host.addrs(br.index).await? {
        if a.is_ipv4() != gw.is_ipv4() {
            continue;
        }
        if a.ip() == gw.ip() && a.prefix() == gw.prefix() {
            return Ok(());
        }
        let same_subnet = a.contains(gw.ip()) || gw.contains(a.ip());
        if a.ip().is_ipv6()
            && matches!(a.ip(), IpAddr::V6(v6) if v6.segments()[0] & 0xffc0 == 0xfe80)
        {
            continue;
        }
        if same_subnet {
            if !force {
                return Err(CniError::config(format!(
                    "{:?} already has an IP address different from {gw}: {a}",
                    br.name
                )));
            }
            host.del_addr(br.index, a).await?;
        }
    }
    if gw.is_ipv6() {
        // A gateway address stuck in DAD ("tentative") for a second or two would drop
        // the first packets of every new pod on a fresh bridge.
        netns::write_sysctl(&format!("net/ipv6/conf/{}/accept_dad", br.name), "0")?;
    }
    host.add_addr(br.index, gw).await
}

async fn check(args: &Args, conf: &BridgeConf, prev: &AddResult, ns: &NetNs) -> CniResult<()> {
    let host = Netlink::connect(None)?;
    let cont = Netlink::connect(Some(ns))?;
    let br = host.link_by_name(&conf.bridge).await?.ok_or_else(|| {
        CniError::internal(format!("CHECK: bridge {:?} does not exist", conf.bridge))
    })?;
    if br.kind != Some(netlink_packet_route::link::InfoKind::Bridge) {
        return Err(CniError::internal(format!(
            "CHECK: {:?} is not a bridge",
            conf.bridge
        )));
    }
    let link = cont.link_by_name(&args.ifname).await?.ok_or_else(|| {
        CniError::internal(format!(
            "CHECK: {} not found in {}",
            args.ifname, args.netns
        ))
    })?;
    if let Some(want) = prev
        .interfaces
        .iter()
        .find(|i| i.name == args.ifname && !i.sandbox.is_empty())
    {
        if !want.mac.is_empty() && want.mac != link.mac {
            return Err(CniError::internal(format!(
                "CHECK: {} has MAC {}, prevResult says {}",
                args.ifname, link.mac, want.mac
            )));
        }
    }
    let peer = link
        .peer_index
        .and_then(|p| if p == 0 { None } else { Some(p) });
    let host_end = match peer {
        Some(p) => host.link_by_index(p).await?,
        None => None,
    };
    match host_end {
        Some(h) if h.controller == Some(br.index) => {}
        Some(h) => {
            return Err(CniError::internal(format!(
                "CHECK: host veth {} is not attached to {}",
                h.name, conf.bridge
            )))
        }
        None => {
            return Err(CniError::internal(format!(
                "CHECK: the host end of {} is missing",
                args.ifname
            )))
        }
    }
    let have = cont.addrs(link.index).await?;
    for ipc in &prev.ips {
        if !have
            .iter()
            .any(|a| a.ip() == ipc.address.ip() && a.prefix() == ipc.address.prefix())
        {
            return Err(CniError::internal(format!(
                "CHECK: {} lacks address {}",
                args.ifname, ipc.address
            )));
        }
    }
    for r in &prev.routes {
        let routes = cont.routes(link.index, r.dst.is_ipv6()).await?;
        if !routes
            .iter()
            .any(|(dst, _)| dst.network() == r.dst.network() && dst.prefix() == r.dst.prefix())
        {
            return Err(CniError::internal(format!(
                "CHECK: route to {} missing in {}",
                r.dst, args.netns
            )));
        }
    }
    Ok(())
}
