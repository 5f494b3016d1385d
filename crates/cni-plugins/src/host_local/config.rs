//! host-local's configuration: range sets, routes, the data dir, and requested
//! addresses from `CNI_ARGS`, `args.cni.ips` and the `ips` capability.

use crate::ip;
use cni::{CniError, CniResult, Route};
use ipnetwork::IpNetwork;
use serde::Deserialize;
use std::net::IpAddr;
use std::path::PathBuf;

pub const DEFAULT_DATA_DIR: &str = "/var/lib/cni/networks";

#[derive(Debug, Deserialize)]
struct RawNetConf {
    #[serde(default)]
    name: String,
    ipam: Option<RawIpam>,
    #[serde(default)]
    args: Option<RawArgs>,
    #[serde(rename = "runtimeConfig", default)]
    runtime_config: Option<RawIps>,
}

#[derive(Debug, Default, Deserialize)]
struct RawArgs {
    #[serde(default)]
    cni: Option<RawIps>,
}

#[derive(Debug, Default, Deserialize)]
struct RawIps {
    #[serde(default)]
    ips: Vec<String>,
}

#[derive(Debug, Deserialize)]
struct RawIpam {
    #[serde(default)]
    ranges: Vec<Vec<RawRange>>,
    #[serde(default, deserialize_with = "some_cidr")]
    subnet: Option<IpNetwork>,
    #[serde(rename = "rangeStart", default, deserialize_with = "some_ip")]
    range_start: Option<IpAddr>,
    #[serde(rename = "rangeEnd", default, deserialize_with = "some_ip")]
    range_end: Option<IpAddr>,
    #[serde(default, deserialize_with = "some_ip")]
    gateway: Option<IpAddr>,
    #[serde(default)]
    routes: Vec<RawRoute>,
    #[serde(rename = "dataDir", default)]
    data_dir: Option<String>,
    #[serde(rename = "resolvConf", default)]
    resolv_conf: Option<String>,
}

#[derive(Debug, Deserialize)]
struct RawRange {
    #[serde(default, deserialize_with = "some_cidr")]
    subnet: Option<IpNetwork>,
    #[serde(rename = "rangeStart", default, deserialize_with = "some_ip")]
    range_start: Option<IpAddr>,
    #[serde(rename = "rangeEnd", default, deserialize_with = "some_ip")]
    range_end: Option<IpAddr>,
    #[serde(default, deserialize_with = "some_ip")]
    gateway: Option<IpAddr>,
}

#[derive(Debug, Deserialize)]
struct RawRoute {
    #[serde(deserialize_with = "cidr")]
    dst: IpNetwork,
    #[serde(default, deserialize_with = "some_ip")]
    gw: Option<IpAddr>,
}

/// An address with its prefix length, `10.1.0.0/16` (a bare address is refused, as
/// the reference's `net.ParseCIDR` does), the error naming the text.
fn cidr<'de, D: serde::Deserializer<'de>>(d: D) -> Result<IpNetwork, D::Error> {
    let s = String::deserialize(d)?;
    match s.split_once('/') {
        Some((_, len)) if !len.is_empty() && len.bytes().all(|b| b.is_ascii_digit()) => s
            .parse()
            .map_err(|_| serde::de::Error::custom(format!("invalid CIDR address: {s}"))),
        _ => Err(serde::de::Error::custom(format!(
            "invalid CIDR address: {s}"
        ))),
    }
}

fn some_cidr<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<IpNetwork>, D::Error> {
    cidr(d).map(Some)
}

/// An IP address, the error naming the text.
fn some_ip<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<IpAddr>, D::Error> {
    let s = String::deserialize(d)?;
    s.parse()
        .map(Some)
        .map_err(|_| serde::de::Error::custom(format!("invalid IP address: {s}")))
}

/// One contiguous range of a subnet, canonical: start and end inside the subnet,
/// never the network or (IPv4) broadcast address; gateway defaults to the first host.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Range {
    pub subnet: IpNetwork,
    pub start: IpAddr,
    pub end: IpAddr,
    pub gateway: IpAddr,
}

impl Range {
    fn canonical(r: RawRange) -> CniResult<Range> {
        let given = r
            .subnet
            .ok_or_else(|| CniError::config("a range has no subnet"))?;
        let subnet = ip::network_of(given);
        if subnet.ip() != given.ip() {
            // The reference refuses it too: the address was meant for something else.
            return Err(CniError::config(format!(
                "network {given} has host bits set: for a prefix of {} the network address is {}",
                subnet.prefix(),
                subnet.ip()
            )));
        }
        let (ones, bits) = match subnet {
            IpNetwork::V4(n) => (n.prefix() as u32, 32),
            IpNetwork::V6(n) => (n.prefix() as u32, 128),
        };
        if ones > bits - 2 {
            return Err(CniError::config(format!(
                "network {subnet} is too small to allocate from"
            )));
        }
        let first = ip::next(subnet.network());
        let last = match subnet {
            IpNetwork::V4(_) => ip::from_u128(ip::to_u128(ip::last_of(subnet)) - 1, first),
            IpNetwork::V6(_) => ip::last_of(subnet),
        };
        let inside = |a: IpAddr, what: &str| -> CniResult<IpAddr> {
            if !subnet.contains(a) {
                return Err(CniError::config(format!(
                    "{what} {a} is not in network {subnet}"
                )));
            }
            Ok(a)
        };
        let start = match r.range_start {
            Some(a) => inside(a, "rangeStart")?,
            None => first,
        };
        let end = match r.range_end {
            Some(a) => inside(a, "rangeEnd")?,
            None => last,
        };
        // The network and broadcast addresses are never handed out, whatever the config says.
        let start = if ip::to_u128(start) < ip::to_u128(first) {
            first
        } else {
            start
        };
        let end = if ip::to_u128(end) > ip::to_u128(last) {
            last
        } else {
            end
        };
        if ip::to_u128(start) > ip::to_u128(end) {
            return Err(CniError::config(format!(
                "rangeStart {start} is after rangeEnd {end} in {subnet}"
            )));
        }
        let gateway = match r.gateway {
            Some(g) if !ip::same_family(g, first) => {
                return Err(CniError::config(format!(
                    "gateway {g} is not of the family of {subnet}"
                )))
            }
            Some(g) => g,
            None => first,
        };
        Ok(Range {
            subnet,
            start,
            end,
            gateway,
        })
    }

    pub fn contains(&self, a: IpAddr) -> bool {
        ip::same_family(a, self.start)
            && ip::to_u128(a) >= ip::to_u128(self.start)
            && ip::to_u128(a) <= ip::to_u128(self.end)
    }

    fn overlaps(&self, o: &Range) -> bool {
        ip::same_family(self.start, o.start)
            && ip::to_u128(self.start) <= ip::to_u128(o.end)
            && ip::to_u128(o.start) <= ip::to_u128(self.end)
    }
}

/// Ranges to pick one address from; each set gives the container one address.
pub type RangeSet = Vec<Range>;

#[derive(Debug, Clone)]
pub struct IpamConfig {
    pub name: String,
    pub range_sets: Vec<RangeSet>,
    pub routes: Vec<Route>,
    pub data_dir: PathBuf,
    pub resolv_conf: Option<PathBuf>,
    /// Addresses the runtime asked for, each to be served by the set containing it.
    pub requested: Vec<IpAddr>,
}

impl IpamConfig {
    /// Decodes the whole network configuration (IPAM plugins get all of it) plus
    /// `CNI_ARGS` pairs.
    pub fn parse(stdin: &[u8], cni_args: &[(String, String)]) -> CniResult<IpamConfig> {
        let raw: RawNetConf = cni::types::decode(stdin, "host-local configuration")?;
        let ipam = raw
            .ipam
            .ok_or_else(|| CniError::config("IPAM config missing 'ipam' key"))?;
        let mut raw_sets = ipam.ranges;
        if let Some(subnet) = ipam.subnet {
            raw_sets.insert(
                0,
                vec![RawRange {
                    subnet: Some(subnet),
                    range_start: ipam.range_start,
                    range_end: ipam.range_end,
                    gateway: ipam.gateway,
                }],
            );
        }
        if raw_sets.is_empty() {
            return Err(CniError::config(
                "host-local: no IP ranges specified ('ranges' or 'subnet')",
            ));
        }
        let mut range_sets = Vec::new();
        for (i, set) in raw_sets.into_iter().enumerate() {
            if set.is_empty() {
                return Err(CniError::config(format!(
                    "host-local: range set {i} is empty"
                )));
            }
            let set: RangeSet = set
                .into_iter()
                .map(Range::canonical)
                .collect::<CniResult<_>>()?;
            if set
                .iter()
                .any(|r| r.subnet.is_ipv4() != set[0].subnet.is_ipv4())
            {
                return Err(CniError::config(format!(
                    "host-local: range set {i} mixes address families"
                )));
            }
            range_sets.push(set);
        }
        let all: Vec<&Range> = range_sets.iter().flatten().collect();
        for (i, a) in all.iter().enumerate() {
            for b in &all[i + 1..] {
                if a.overlaps(b) {
                    return Err(CniError::config(format!(
                        "host-local: range {}-{} overlaps range {}-{}",
                        a.start, a.end, b.start, b.end
                    )));
                }
            }
        }
        if raw.name.is_empty() {
            return Err(CniError::config("network configuration has no name"));
        }
        let mut requested = Vec::new();
        let mut add_req = |s: &str, from: &str| -> CniResult<()> {
            let a = s.split('/').next().unwrap_or(s);
            let ip = a.parse::<IpAddr>().map_err(|_| {
                CniError::config(format!("host-local: invalid requested IP {s:?} in {from}"))
            })?;
            if !requested.contains(&ip) {
                requested.push(ip);
            }
            Ok(())
        };
        for (k, v) in cni_args {
            if k == "IP" {
                for s in v.split(',').filter(|s| !s.is_empty()) {
                    add_req(s, "CNI_ARGS")?;
                }
            }
        }
        for s in raw
            .args
            .and_then(|a| a.cni)
            .map(|c| c.ips)
            .unwrap_or_default()
        {
            add_req(&s, "args.cni.ips")?;
        }
        for s in raw.runtime_config.map(|r| r.ips).unwrap_or_default() {
            add_req(&s, "runtimeConfig.ips")?;
        }
        Ok(IpamConfig {
            name: raw.name,
            range_sets,
            routes: ipam
                .routes
                .into_iter()
                .map(|r| Route::new(r.dst, r.gw))
                .collect(),
            data_dir: PathBuf::from(
                ipam.data_dir
                    .unwrap_or_else(|| DEFAULT_DATA_DIR.to_string()),
            ),
            resolv_conf: ipam
                .resolv_conf
                .filter(|s| !s.is_empty())
                .map(PathBuf::from),
            requested,
        })
    }
}

/// Reads nameservers, domain, search and options from a resolv.conf.
pub fn parse_resolv_conf(text: &str) -> cni::Dns {
    let mut dns = cni::Dns::default();
    for line in text.lines() {
        let line = line.split(['#', ';']).next().unwrap_or("");
        let mut f = line.split_whitespace();
        match f.next() {
            Some("nameserver") => dns.nameservers.extend(f.next().map(str::to_string)),
            Some("domain") => dns.domain = f.next().unwrap_or("").to_string(),
            Some("search") => dns.search = f.map(str::to_string).collect(),
            Some("options") => dns.options.extend(f.map(str::to_string)),
            _ => {}
        }
    }
    dns
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(s: &str) -> CniResult<IpamConfig> {
        IpamConfig::parse(s.as_bytes(), &[])
    }

    #[test]
    fn defaults_like_the_reference() {
        let c =
            parse(r#"{"name":"n","ipam":{"type":"host-local","subnet":"10.1.2.0/24"}}"#).unwrap();
        let r = &c.range_sets[0][0];
        assert_eq!(r.start.to_string(), "10.1.2.1");
        assert_eq!(r.end.to_string(), "10.1.2.254");
        assert_eq!(r.gateway.to_string(), "10.1.2.1");
        assert_eq!(c.data_dir, PathBuf::from("/var/lib/cni/networks"));
        let c = parse(r#"{"name":"n","ipam":{"ranges":[[{"subnet":"fd00::/120"}]]}}"#).unwrap();
        assert_eq!(c.range_sets[0][0].end.to_string(), "fd00::ff");
    }

    #[test]
    fn rejects_bad_ranges() {
        let code = |s: &str| parse(s).unwrap_err().code;
        assert_eq!(code(r#"{"name":"n","ipam":{}}"#), 7);
        assert_eq!(code(r#"{"name":"n"}"#), 7);
        assert_eq!(code(r#"{"name":"n","ipam":{"subnet":"10.0.0.0/31"}}"#), 7);
        assert_eq!(
            code(r#"{"name":"n","ipam":{"subnet":"10.0.0.0/24","rangeStart":"10.0.1.1"}}"#),
            7
        );
        assert_eq!(
            code(
                r#"{"name":"n","ipam":{"subnet":"10.0.0.0/24","rangeStart":"10.0.0.9","rangeEnd":"10.0.0.3"}}"#
            ),
            7
        );
        assert_eq!(
            code(
                r#"{"name":"n","ipam":{"ranges":[[{"subnet":"10.0.0.0/24"}],[{"subnet":"10.0.0.128/25"}]]}}"#
            ),
            7
        );
        assert_eq!(
            code(
                r#"{"name":"n","ipam":{"ranges":[[{"subnet":"10.0.0.0/24"},{"subnet":"fd00::/64"}]]}}"#
            ),
            7
        );
        assert_eq!(code(r#"{"name":"n","ipam":{"subnet":"not-a-subnet"}}"#), 6);
    }

    #[test]
    fn gathers_requested_ips() {
        let c = IpamConfig::parse(
            br#"{"name":"n","ipam":{"subnet":"10.0.0.0/24"},"args":{"cni":{"ips":["10.0.0.7/24"]}},"runtimeConfig":{"ips":["10.0.0.8"]}}"#,
            &[("IP".into(), "10.0.0.9,10.0.0.7".into())],
        )
        .unwrap();
        let got: Vec<String> = c.requested.iter().map(|a| a.to_string()).collect();
        assert_eq!(got, ["10.0.0.9", "10.0.0.7", "10.0.0.8"]);
    }

    #[test]
    fn resolv_conf() {
        let d = parse_resolv_conf("# c\nnameserver 1.1.1.1\nnameserver 8.8.8.8 ; x\ndomain ex.com\nsearch a b\noptions ndots:5 rotate\n");
        assert_eq!(d.nameservers, ["1.1.1.1", "8.8.8.8"]);
        assert_eq!(d.domain, "ex.com");
        assert_eq!(d.search, ["a", "b"]);
        assert_eq!(d.options, ["ndots:5", "rotate"]);
    }
}
