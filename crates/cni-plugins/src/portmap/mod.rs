//! The `portmap` plugin: a pod's `hostPort`s, chained after the plugin that gave the
//! pod its addresses. Traffic to a port of the node (any of its local addresses, or
//! the mapping's `hostIP`) is DNATed to the pod's address and `containerPort`; with
//! `snat` (the default), traffic that would not find its way back through the node
//! is masqueraded: the pod reaching itself through the node (hairpin) and the node
//! reaching the port on `127.0.0.1` (for which `route_localnet` is set on the
//! interface that routes to the pod).
//!
//! The configuration is the reference plugin's (`snat`, `masqAll`, `markMasqBit`,
//! `externalSetMarkChain`, `conditionsV4`/`conditionsV6`, `backend`, and the
//! `portMappings` capability in `runtimeConfig`), and so are the rules, in either
//! backend, so a node that switches between the two plugins finds and removes the
//! rules the other one made:
//!
//! - **nftables** (spoken over netlink, see nft.rs; chosen when the kernel has
//!   nf_tables and no iptables-only option is set): the reference's nftables layout,
//!   `table ip cni_hostport` (and `ip6`), each rule commented with the container id.
//!   ```text
//!   chain prerouting { type nat hook prerouting priority dstnat; fib daddr type local jump hostports_all }
//!   chain output     { type nat hook output priority dstnat; fib daddr type local jump hostports_all }
//!   chain hostports_all { jump hostip_hostports; jump hostports }
//!   chain hostports  { tcp dport 8080 dnat to 10.88.0.5:80 comment "CID" }
//!   chain masquerading { type nat hook postrouting priority srcnat;
//!     ip saddr 10.88.0.5 ip daddr 10.88.0.5 masquerade comment "CID"
//!     ip saddr 127.0.0.1 ip daddr 10.88.0.5 masquerade comment "CID" }
//!   ```
//! - **iptables** (the `iptables` tool, see iptables.rs): the reference's chains,
//!   `CNI-HOSTPORT-DNAT`, `CNI-HOSTPORT-SETMARK`, `CNI-HOSTPORT-MASQ` and one
//!   `CNI-DN-<hash>` per attachment.
//!
//! Errors past the skeleton's own checks are code 999, as the reference plugin
//! reports them (its config loading and verbs return plain Go errors).
//!
//! For UDP mappings ADD then deletes the conntrack entries of the host port that
//! predate the rules (conntrack.rs), which would keep their flows off the pod.
//!
//! Without port mappings ADD passes the previous result on and DEL does nothing, as
//! the reference plugin: nearly every pod, so that path starts no tool and opens no
//! socket. DEL removes the container's rules from both backends (whichever made
//! them): the nftables ones over netlink, the iptables ones only when the
//! attachment's chain exists.

mod conntrack;
mod iptables;

use crate::bridge::as_reference;
use crate::finish::{self, Finish};
use crate::masq::{find_tool, nftables_present};
use crate::nft::{self, Base, ChainSpec, Nft, Op, Rule, NFPROTO_IPV4, NFPROTO_IPV6};
use crate::rawnl;
use cni::skeleton::{Args, Plugin};
use cni::{AddResult, CniError, CniResult};
use ipnetwork::IpNetwork;
use serde::Deserialize;
use std::io::Write;
use std::net::IpAddr;
use std::process::{Command, Stdio};

pub struct Portmap;

/// The reference plugin's default mark bit (Kubernetes uses 14 and 15).
const DEFAULT_MARK_BIT: i64 = 13;

pub const NFT_TABLE: &str = "cni_hostport";

#[derive(Debug, Clone, Default, Deserialize)]
pub struct PortMapConf {
    #[serde(default)]
    pub backend: Option<String>,
    #[serde(default)]
    pub snat: Option<bool>,
    #[serde(rename = "conditionsV4", default)]
    pub conditions_v4: Option<Vec<String>>,
    #[serde(rename = "conditionsV6", default)]
    pub conditions_v6: Option<Vec<String>>,
    #[serde(rename = "masqAll", default)]
    pub masq_all: bool,
    #[serde(rename = "markMasqBit", default)]
    pub mark_masq_bit: Option<i64>,
    #[serde(rename = "externalSetMarkChain", default)]
    pub external_set_mark_chain: Option<String>,
    #[serde(rename = "runtimeConfig", default)]
    pub runtime_config: Option<RuntimeConfig>,
}

#[derive(Debug, Clone, Default, Deserialize)]
pub struct RuntimeConfig {
    #[serde(rename = "portMappings", default)]
    pub port_mappings: Option<Vec<serde_json::Map<String, serde_json::Value>>>,
}

/// A mapping as the runtime sends it (CNI's `portMappings` convention).
#[derive(Debug, Clone, Default)]
pub struct RawMapping {
    pub host_port: i64,
    pub container_port: i64,
    pub protocol: String,
    pub host_ip: String,
}

impl RawMapping {
    /// Reads a mapping's keys as Go's `encoding/json` does, which the reference plugin
    /// relies on: the exact name, else any spelling that differs only in case.
    /// containerd (go-cni) sends `{"HostPort": 8080, "ContainerPort": 80, "Protocol":
    /// "tcp", "HostIP": ""}`, its struct having no JSON tags.
    pub fn from_map(m: &serde_json::Map<String, serde_json::Value>) -> CniResult<RawMapping> {
        let get = |key: &str| {
            m.get(key).or_else(|| {
                m.iter()
                    .find(|(k, _)| k.eq_ignore_ascii_case(key))
                    .map(|(_, v)| v)
            })
        };
        let int = |key: &str| -> CniResult<i64> {
            match get(key) {
                None | Some(serde_json::Value::Null) => Ok(0),
                Some(v) => v.as_i64().ok_or_else(|| {
                    CniError::decode(format!("portMappings: {key} is not an integer: {v}"))
                }),
            }
        };
        let text = |key: &str| -> CniResult<String> {
            match get(key) {
                None | Some(serde_json::Value::Null) => Ok(String::new()),
                Some(serde_json::Value::String(s)) => Ok(s.clone()),
                Some(v) => Err(CniError::decode(format!(
                    "portMappings: {key} is not a string: {v}"
                ))),
            }
        };
        Ok(RawMapping {
            host_port: int("hostPort")?,
            container_port: int("containerPort")?,
            protocol: text("protocol")?,
            host_ip: text("hostIP")?,
        })
    }
}

/// A checked mapping.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mapping {
    pub host_port: u16,
    pub container_port: u16,
    /// `tcp`, `udp` or `sctp`.
    pub protocol: &'static str,
    /// None when not given or unspecified (`0.0.0.0`, `::`): every local address.
    pub host_ip: Option<IpAddr>,
    /// The mapping's `hostIP` was of the other family than the address at hand: the
    /// reference plugin skips such a mapping for that family.
    pub host_family: Option<bool>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    Nftables,
    Iptables,
}

/// The configuration, checked, with defaults filled in.
#[derive(Debug, Clone)]
pub struct Conf {
    pub network: String,
    pub backend: Backend,
    pub snat: bool,
    pub masq_all: bool,
    pub mark_bit: u32,
    pub external_set_mark_chain: Option<String>,
    pub conditions_v4: Vec<String>,
    pub conditions_v6: Vec<String>,
    pub mappings: Vec<Mapping>,
}

fn protocol(p: &str) -> Option<&'static str> {
    match p.to_ascii_lowercase().as_str() {
        "tcp" => Some("tcp"),
        "udp" => Some("udp"),
        "sctp" => Some("sctp"),
        _ => None,
    }
}

fn port(what: &str, n: i64) -> CniResult<u16> {
    match u16::try_from(n) {
        Ok(p) if p > 0 => Ok(p),
        _ => Err(CniError::config(format!("invalid {what} port number: {n}"))),
    }
}

/// iptables conditions start with `-` or `!`; no nftables condition does.
fn conditions_backend(c: &[String]) -> Option<Backend> {
    let first = c.first().filter(|s| !s.is_empty())?;
    Some(if first.starts_with('-') || first.starts_with('!') {
        Backend::Iptables
    } else {
        Backend::Nftables
    })
}

impl Conf {
    pub fn parse(args: &Args) -> CniResult<Conf> {
        let raw: PortMapConf = cni::types::decode(&args.stdin, "portmap configuration")?;
        Conf::from_raw(&args.conf.name, raw, nftables_present)
    }

    /// `nft_here`: whether the node has nftables (the backend when none is asked);
    /// asked only when the choice rests on it and there is something to map, so the
    /// ADD of a pod without host ports looks nothing up.
    pub fn from_raw(
        network: &str,
        raw: PortMapConf,
        nft_here: impl FnOnce() -> bool,
    ) -> CniResult<Conf> {
        let has_mappings = raw
            .runtime_config
            .as_ref()
            .and_then(|r| r.port_mappings.as_ref())
            .is_some_and(|m| !m.is_empty());
        if raw.mark_masq_bit.is_some() && raw.external_set_mark_chain.is_some() {
            return Err(CniError::config(
                "cannot specify both externalSetMarkChain and markMasqBit",
            ));
        }
        let mark_bit = raw.mark_masq_bit.unwrap_or(DEFAULT_MARK_BIT);
        if !(0..=31).contains(&mark_bit) {
            return Err(CniError::config(format!(
                "markMasqBit must be between 0 and 31, not {mark_bit}"
            )));
        }
        let conditions_v4 = raw.conditions_v4.unwrap_or_default();
        let conditions_v6 = raw.conditions_v6.unwrap_or_default();
        // Options only one backend understands, and which backend.
        let mut only: Vec<(Backend, &str)> = Vec::new();
        if raw.external_set_mark_chain.is_some() {
            only.push((Backend::Iptables, "externalSetMarkChain"));
        }
        if let Some(b) = conditions_backend(&conditions_v4) {
            only.push((b, "conditionsV4"));
        }
        if let Some(b) = conditions_backend(&conditions_v6) {
            only.push((b, "conditionsV6"));
        }
        let backend = match raw.backend.as_deref() {
            Some("nftables") => Backend::Nftables,
            Some("iptables") => Backend::Iptables,
            Some(other) => {
                return Err(CniError::config(format!(
                    "unknown backend {other:?}: expected \"nftables\" or \"iptables\""
                )))
            }
            None => match only.first() {
                Some((b, _)) => *b,
                None if has_mappings && nft_here() => Backend::Nftables,
                None => Backend::Iptables,
            },
        };
        let wrong: Vec<&str> = only
            .iter()
            .filter(|(b, _)| *b != backend)
            .map(|(_, o)| *o)
            .collect();
        if !wrong.is_empty() {
            return Err(CniError::config(format!(
                "the {} backend was chosen but the configuration has options of the other one: {}",
                match backend {
                    Backend::Nftables => "nftables",
                    Backend::Iptables => "iptables",
                },
                wrong.join(", ")
            )));
        }
        let mut mappings = Vec::new();
        let raw_maps = raw
            .runtime_config
            .and_then(|r| r.port_mappings)
            .unwrap_or_default();
        for m in raw_maps {
            let m = RawMapping::from_map(&m)?;
            let container_port = port("container", m.container_port)?;
            let host_port = port("host", m.host_port)?;
            let proto = protocol(&m.protocol).ok_or_else(|| {
                CniError::config(format!(
                    "invalid protocol {:?} of host port {host_port}: expected tcp, udp or sctp",
                    m.protocol
                ))
            })?;
            let (host_ip, host_family) = if m.host_ip.is_empty() {
                (None, None)
            } else {
                let ip: IpAddr = m.host_ip.parse().map_err(|_| {
                    CniError::config(format!(
                        "invalid hostIP {:?} of host port {host_port}",
                        m.host_ip
                    ))
                })?;
                ((!ip.is_unspecified()).then_some(ip), Some(ip.is_ipv4()))
            };
            mappings.push(Mapping {
                host_port,
                container_port,
                protocol: proto,
                host_ip,
                host_family,
            });
        }
        Ok(Conf {
            network: network.to_string(),
            backend,
            snat: raw.snat.unwrap_or(true),
            masq_all: raw.masq_all,
            mark_bit: mark_bit as u32,
            external_set_mark_chain: raw.external_set_mark_chain,
            conditions_v4,
            conditions_v6,
            mappings,
        })
    }

    /// The mappings that apply to an address of this family.
    pub fn mappings_for(&self, v4: bool) -> impl Iterator<Item = &Mapping> {
        self.mappings
            .iter()
            .filter(move |m| m.host_family.is_none_or(|f| f == v4))
    }

    pub fn conditions(&self, v4: bool) -> &[String] {
        if v4 {
            &self.conditions_v4
        } else {
            &self.conditions_v6
        }
    }
}

/// The pod's first IPv4 and first IPv6 address (with prefix) in the previous result,
/// on the interface being attached when the result says which.
pub fn container_ips(prev: &AddResult, ifname: &str) -> (Option<IpNetwork>, Option<IpNetwork>) {
    let (mut v4, mut v6) = (None, None);
    for ip in &prev.ips {
        let slot = if ip.address.is_ipv4() {
            &mut v4
        } else {
            &mut v6
        };
        if slot.is_some() {
            continue;
        }
        if let Some(i) = ip.interface {
            let skip = prev
                .interfaces
                .get(i)
                .is_some_and(|itf| itf.name != ifname || itf.sandbox.is_empty());
            if skip {
                continue;
            }
        }
        *slot = Some(ip.address);
    }
    (v4, v6)
}

impl Plugin for Portmap {
    fn add(&self, args: &Args) -> CniResult<AddResult> {
        as_reference(add(args))
    }

    fn del(&self, args: &Args) -> CniResult<()> {
        as_reference(del(args))
    }

    fn check(&self, args: &Args) -> CniResult<()> {
        as_reference(check(args))
    }

    /// The plugin keeps no state and needs no daemon: ready whenever it runs.
    fn status(&self, _args: &Args) -> CniResult<()> {
        Ok(())
    }

    /// Nothing outlives an attachment but its rules, which DEL removes.
    fn gc(&self, _args: &Args) -> CniResult<()> {
        Ok(())
    }
}

fn add(args: &Args) -> CniResult<AddResult> {
    let conf = Conf::parse(args)?;
    let prev = args.conf.prev_result()?.ok_or_else(|| {
        CniError::config("portmap must be called as a chained plugin (no prevResult)")
    })?;
    if conf.mappings.is_empty() {
        return Ok(prev);
    }
    let (v4, v6) = container_ips(&prev, &args.ifname);
    let res = (|| {
        for ip in [v4, v6].into_iter().flatten() {
            match conf.backend {
                Backend::Nftables => nft_forward(&conf, &args.container_id, ip)?,
                Backend::Iptables => iptables::forward(&conf, &args.container_id, ip)?,
            }
            let udp: Vec<u16> = conf
                .mappings_for(ip.is_ipv4())
                .filter(|m| m.protocol == "udp")
                .map(|m| m.host_port)
                .collect();
            let family = if ip.is_ipv4() {
                libc::AF_INET
            } else {
                libc::AF_INET6
            };
            if let Err(e) = conntrack::delete_udp(family as u8, &udp) {
                eprintln!(
                    "portmap: stale UDP conntrack entries not deleted: {}",
                    e.msg
                );
            }
        }
        if let (true, Some(ip)) = (conf.snat, v4) {
            // 127.0.0.1:hostPort from the node crosses to the pod's interface
            // only with route_localnet on the interface that routes there.
            if let Some(ifname) = route_interface(ip.ip())? {
                crate::netns::write_sysctl(&format!("net/ipv4/conf/{ifname}/route_localnet"), "1")
                    .map_err(|e| e.context("enabling route_localnet"))?;
            }
        }
        Ok(())
    })();
    // A failed ADD leaves none of its rules (one family's may be in, or the mappings
    // without the hook rules that nft refused).
    if res.is_err() {
        let _ = remove_rules(&conf, &args.container_id);
    }
    let done = Finish::default().run();
    res.and(done).map(|_| prev)
}

/// Every rule of the container, in both backends: the nftables ones by their comment,
/// the iptables chain where it exists.
fn remove_rules(conf: &Conf, container_id: &str) -> CniResult<()> {
    if nftables_present() {
        let mut n = Nft::open()?;
        let r = n.delete_in(&[NFPROTO_IPV4, NFPROTO_IPV6], NFT_TABLE, container_id);
        finish::defer_close(n.into_fd());
        r?;
    }
    iptables::teardown(conf, container_id)
}

fn del(args: &Args) -> CniResult<()> {
    let conf = Conf::parse(args)?;
    if conf.mappings.is_empty() {
        return Ok(());
    }
    let res = remove_rules(&conf, &args.container_id);
    let done = Finish::default().run();
    res.and(done)
}

fn check(args: &Args) -> CniResult<()> {
    let conf = Conf::parse(args)?;
    let prev = args
        .conf
        .prev_result()?
        .ok_or_else(|| CniError::config("portmap CHECK needs prevResult"))?;
    if conf.mappings.is_empty() {
        return Ok(());
    }
    let (v4, v6) = container_ips(&prev, &args.ifname);
    for ip in [v4, v6].into_iter().flatten() {
        match conf.backend {
            Backend::Nftables => nft_check(&conf, &args.container_id, ip)?,
            Backend::Iptables => iptables::check(&conf, &args.container_id, ip)?,
        }
    }
    Ok(())
}

/// The chains of `table ip cni_hostport` or `table ip6 cni_hostport`.
pub struct Chains {
    pub family: u8,
    pub prerouting: ChainSpec,
    pub output: ChainSpec,
    pub all: ChainSpec,
    pub hostip: ChainSpec,
    pub hostports: ChainSpec,
    pub masquerading: ChainSpec,
}

const fn chains(family: u8) -> Chains {
    const fn regular(family: u8, name: &'static str) -> ChainSpec {
        ChainSpec {
            family,
            name,
            base: None,
        }
    }
    const fn nat(family: u8, name: &'static str, hook: u32, priority: i32) -> ChainSpec {
        ChainSpec {
            family,
            name,
            base: Some(Base {
                kind: "nat",
                hook,
                priority,
            }),
        }
    }
    Chains {
        family,
        prerouting: nat(family, "prerouting", nft::HOOK_PREROUTING, -100),
        output: nat(family, "output", nft::HOOK_OUTPUT, -100),
        all: regular(family, "hostports_all"),
        // The reference plugin's former chain for mappings with a hostIP; still
        // jumped to, so rules an older plugin left there keep working.
        hostip: regular(family, "hostip_hostports"),
        hostports: regular(family, "hostports"),
        masquerading: nat(family, "masquerading", nft::HOOK_POSTROUTING, 100),
    }
}

pub static CHAINS_V4: Chains = chains(NFPROTO_IPV4);
pub static CHAINS_V6: Chains = chains(NFPROTO_IPV6);

fn ip_proto(p: &str) -> u8 {
    match p {
        "udp" => 17,
        "sctp" => 132,
        _ => 6,
    }
}

/// The container's rules in one transaction, after removing any it already had (a
/// repeated ADD replaces them rather than doubling them).
fn nft_forward(conf: &Conf, container_id: &str, ip: IpNetwork) -> CniResult<()> {
    let v4 = ip.is_ipv4();
    let c: &'static Chains = if v4 { &CHAINS_V4 } else { &CHAINS_V6 };
    let conditions = conf.conditions(v4);
    let mut rules = vec![
        Rule::jump(&c.all, c.hostip.name),
        Rule::jump(&c.all, c.hostports.name),
    ];
    let hooked = conditions.is_empty();
    if hooked {
        rules.push(Rule::jump_if_local(&c.prerouting, c.all.name));
        rules.push(Rule::jump_if_local(&c.output, c.all.name));
    }
    let first_own = rules.len();
    for m in conf.mappings_for(v4) {
        rules.push(Rule::dnat(
            &c.hostports,
            m.host_ip,
            (ip_proto(m.protocol), m.host_port),
            (ip.ip(), m.container_port),
            container_id,
        ));
    }
    if conf.snat {
        let src = (!conf.masq_all).then_some(ip.ip());
        rules.push(Rule::masquerade_to(
            &c.masquerading,
            src,
            ip.ip(),
            container_id,
        ));
        if v4 && !conf.masq_all {
            rules.push(Rule::masquerade_to(
                &c.masquerading,
                Some(IpAddr::from([127, 0, 0, 1])),
                ip.ip(),
                container_id,
            ));
        }
    }
    let mut ops = vec![
        Op::Table {
            family: c.family,
            name: NFT_TABLE,
            comment: "CNI portmap plugin",
        },
        Op::Chain(NFT_TABLE, &c.hostports),
        Op::Chain(NFT_TABLE, &c.hostip),
        Op::Chain(NFT_TABLE, &c.all),
        Op::Flush(NFT_TABLE, &c.all),
        Op::Rule(NFT_TABLE, &rules[0]),
        Op::Rule(NFT_TABLE, &rules[1]),
        Op::Chain(NFT_TABLE, &c.prerouting),
        Op::Chain(NFT_TABLE, &c.output),
    ];
    if hooked {
        ops.extend([
            Op::Flush(NFT_TABLE, &c.prerouting),
            Op::Rule(NFT_TABLE, &rules[2]),
            Op::Flush(NFT_TABLE, &c.output),
            Op::Rule(NFT_TABLE, &rules[3]),
        ]);
    }
    if conf.snat {
        ops.push(Op::Chain(NFT_TABLE, &c.masquerading));
    }
    ops.extend(rules[first_own..].iter().map(|r| Op::Rule(NFT_TABLE, r)));
    let mut n = Nft::open()?;
    let res = n
        .delete_in(&[c.family], NFT_TABLE, container_id)
        .and_then(|_| n.apply(&ops));
    finish::defer_close(n.into_fd());
    res.map_err(|e| e.context("setting up nftables rules for port mappings"))?;
    if !hooked {
        hook_with_conditions(v4, conditions)?;
    }
    Ok(())
}

/// The hook chains' rules with `conditionsV4`/`conditionsV6`, which are nftables
/// syntax: handed to the `nft` tool, the one thing that parses it, as one
/// transaction that replaces both rules.
fn hook_with_conditions(v4: bool, conditions: &[String]) -> CniResult<()> {
    let fam = if v4 { "ip" } else { "ip6" };
    let cond = conditions.join(" ");
    let script = format!(
        "flush chain {fam} {NFT_TABLE} prerouting\n\
         add rule {fam} {NFT_TABLE} prerouting {cond} fib daddr type local jump hostports_all\n\
         flush chain {fam} {NFT_TABLE} output\n\
         add rule {fam} {NFT_TABLE} output {cond} fib daddr type local jump hostports_all\n"
    );
    let nft = find_tool("nft").ok_or_else(|| {
        CniError::io(
            "conditions for the nftables backend need the `nft` tool, which is not installed",
        )
    })?;
    let mut child = Command::new(nft)
        .args(["-f", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| CniError::io(format!("failed to run nft: {e}")))?;
    if let Some(mut i) = child.stdin.take() {
        let _ = i.write_all(script.as_bytes());
    }
    let out = child
        .wait_with_output()
        .map_err(|e| CniError::io(format!("failed to run nft: {e}")))?;
    if !out.status.success() {
        return Err(CniError::io(format!(
            "nft rejected the conditions {cond:?}: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        )));
    }
    Ok(())
}

fn nft_check(conf: &Conf, container_id: &str, ip: IpNetwork) -> CniResult<()> {
    let v4 = ip.is_ipv4();
    let c = if v4 { &CHAINS_V4 } else { &CHAINS_V6 };
    let mut n = Nft::open()?;
    let found = n.find_in(&[c.family], NFT_TABLE, container_id);
    finish::defer_close(n.into_fd());
    let found = found?;
    let count = |chain: &str| found.iter().filter(|f| f.chain == chain).count();
    let want_dnat = conf.mappings_for(v4).count();
    if count(c.hostports.name) + count(c.hostip.name) < want_dnat {
        return Err(CniError::io(format!(
            "missing hostport rules in chain {:?} for {container_id}",
            c.hostports.name
        )));
    }
    let want_masq = match (conf.snat, v4 && !conf.masq_all) {
        (false, _) => 0,
        (true, true) => 2,
        (true, false) => 1,
    };
    if count(c.masquerading.name) < want_masq {
        return Err(CniError::io(format!(
            "missing masquerade rules in chain {:?} for {container_id}",
            c.masquerading.name
        )));
    }
    Ok(())
}

/// The name of the interface the node routes `ip` through, if any.
fn route_interface(ip: IpAddr) -> CniResult<Option<String>> {
    const RTM_GETROUTE: u16 = 26;
    const RTM_NEWROUTE: u16 = 24;
    const RTA_DST: u16 = 1;
    const RTA_OIF: u16 = 4;
    let (family, bytes, bits) = match ip {
        IpAddr::V4(a) => (libc::AF_INET as u8, a.octets().to_vec(), 32u8),
        IpAddr::V6(a) => (libc::AF_INET6 as u8, a.octets().to_vec(), 128u8),
    };
    // struct rtmsg: family, dst_len, src_len, tos, table, protocol, scope, type, flags.
    let mut hdr = [0u8; 12];
    hdr[0] = family;
    hdr[1] = bits;
    let sock = rawnl::Socket::open(libc::NETLINK_ROUTE)?;
    let mut b = rawnl::Builder::default();
    b.begin(RTM_GETROUTE, rawnl::NLM_F_REQUEST, 1, &hdr)
        .attr(RTA_DST, &bytes)
        .end();
    let err = |e: std::io::Error| CniError::io(format!("looking up the route to {ip}: {e}"));
    sock.send(&b.buf).map_err(err)?;
    let mut buf = vec![0u8; 8192];
    let d = sock.recv(&mut buf).map_err(err)?;
    for m in rawnl::messages(d) {
        match m.ty {
            RTM_NEWROUTE => {
                for (ty, v) in rawnl::attrs(m.payload, 12) {
                    if ty == RTA_OIF && v.len() == 4 {
                        let index = u32::from_ne_bytes(v.try_into().unwrap());
                        return Ok(nix::net::if_::if_indextoname(index)
                            .ok()
                            .map(|n| n.to_string_lossy().into_owned()));
                    }
                }
                return Ok(None);
            }
            // No route: nothing to enable, as the reference plugin.
            rawnl::NLMSG_ERROR => return Ok(None),
            _ => {}
        }
    }
    Ok(None)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn conf(v: serde_json::Value, nft_here: bool) -> CniResult<Conf> {
        Conf::from_raw("net", serde_json::from_value(v).unwrap(), || nft_here)
    }

    #[test]
    fn defaults_and_backend_choice() {
        let one = json!({"runtimeConfig": {"portMappings": [
            {"hostPort": 8080, "containerPort": 80, "protocol": "tcp"}]}});
        let c = conf(one.clone(), true).unwrap();
        assert!(c.snat);
        assert_eq!(c.mark_bit, 13);
        assert_eq!(c.backend, Backend::Nftables);
        assert_eq!(conf(one, false).unwrap().backend, Backend::Iptables);
        // Nothing to map: the node is not asked.
        let c = Conf::from_raw("net", PortMapConf::default(), || panic!("asked")).unwrap();
        assert!(c.mappings.is_empty());
        // Options of one backend choose it when none is named...
        let c = conf(json!({"conditionsV4": ["-s", "1.2.3.4"]}), true).unwrap();
        assert_eq!(c.backend, Backend::Iptables);
        let c = conf(json!({"externalSetMarkChain": "KUBE-MARK-MASQ"}), true).unwrap();
        assert_eq!(c.backend, Backend::Iptables);
        let c = conf(json!({"conditionsV4": ["ip saddr 1.2.3.4"]}), false).unwrap();
        assert_eq!(c.backend, Backend::Nftables);
        // ...and contradict the one named.
        let e = conf(
            json!({"backend": "nftables", "externalSetMarkChain": "X"}),
            true,
        )
        .unwrap_err();
        assert_eq!(e.code, 7);
        assert!(e.msg.contains("externalSetMarkChain"), "{}", e.msg);
        assert_eq!(conf(json!({"backend": "pf"}), true).unwrap_err().code, 7);
    }

    #[test]
    fn bad_mappings_and_marks_are_config_errors() {
        for bad in [
            json!({"runtimeConfig": {"portMappings": [{"hostPort": 0, "containerPort": 80, "protocol": "tcp"}]}}),
            json!({"runtimeConfig": {"portMappings": [{"hostPort": 80, "containerPort": -1, "protocol": "tcp"}]}}),
            json!({"runtimeConfig": {"portMappings": [{"hostPort": 70000, "containerPort": 80, "protocol": "tcp"}]}}),
            json!({"runtimeConfig": {"portMappings": [{"hostPort": 80, "containerPort": 80, "protocol": "icmp"}]}}),
            json!({"runtimeConfig": {"portMappings": [{"hostPort": 80, "containerPort": 80, "protocol": "tcp", "hostIP": "nope"}]}}),
            json!({"markMasqBit": 32}),
            json!({"markMasqBit": 3, "externalSetMarkChain": "X"}),
        ] {
            let e = conf(bad.clone(), true).unwrap_err();
            assert_eq!(e.code, 7, "{bad}: {}", e.msg);
        }
    }

    #[test]
    fn mapping_keys_are_read_in_any_case_as_go_does() {
        let c = conf(
            json!({"runtimeConfig": {"portMappings": [
                {"HostPort": 8080, "ContainerPort": 80, "Protocol": "tcp", "HostIP": ""},
                {"hostport": 8081, "containerport": 81, "PROTOCOL": "udp", "hostIp": "192.0.2.1"},
            ]}}),
            true,
        )
        .unwrap();
        assert_eq!(c.mappings[0].host_port, 8080);
        assert_eq!(c.mappings[0].container_port, 80);
        assert_eq!(c.mappings[1].protocol, "udp");
        assert_eq!(c.mappings[1].host_ip, Some("192.0.2.1".parse().unwrap()));
        let e = conf(
            json!({"runtimeConfig": {"portMappings": [{"hostPort": "80", "containerPort": 80}]}}),
            true,
        )
        .unwrap_err();
        assert_eq!(e.code, 6, "{}", e.msg);
    }

    #[test]
    fn host_ips_pick_the_family() {
        let c = conf(
            json!({"runtimeConfig": {"portMappings": [
                {"hostPort": 8080, "containerPort": 80, "protocol": "TCP"},
                {"hostPort": 8081, "containerPort": 81, "protocol": "udp", "hostIP": "192.0.2.1"},
                {"hostPort": 8082, "containerPort": 82, "protocol": "sctp", "hostIP": "::"},
            ]}}),
            true,
        )
        .unwrap();
        let v4: Vec<u16> = c.mappings_for(true).map(|m| m.host_port).collect();
        let v6: Vec<u16> = c.mappings_for(false).map(|m| m.host_port).collect();
        assert_eq!(v4, [8080, 8081]);
        assert_eq!(v6, [8080, 8082]);
        assert_eq!(c.mappings[0].protocol, "tcp");
        assert_eq!(c.mappings[2].host_ip, None);
    }

    #[test]
    fn container_addresses_come_from_the_attached_interface() {
        let prev = AddResult::from_value(json!({
            "cniVersion": "1.0.0",
            "interfaces": [
                {"name": "cni0", "mac": "00:11:22:33:44:55"},
                {"name": "eth0", "mac": "00:11:22:33:44:66", "sandbox": "/run/netns/x"},
            ],
            "ips": [
                {"address": "10.88.0.1/16", "interface": 0},
                {"address": "10.88.0.5/16", "interface": 1},
                {"address": "fd00::5/64", "interface": 1},
            ],
        }))
        .unwrap();
        let (v4, v6) = container_ips(&prev, "eth0");
        assert_eq!(v4.unwrap().to_string(), "10.88.0.5/16");
        assert_eq!(v6.unwrap().to_string(), "fd00::5/64");
        assert_eq!(container_ips(&prev, "eth1"), (None, None));
    }
}
