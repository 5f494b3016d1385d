//! Picks addresses from a range set: round-robin after the last address handed out,
//! skipping gateways and anything already reserved; the same attachment asking again
//! gets the address it already has.

use super::config::{Range, RangeSet};
use super::store::Store;
use crate::ip;
use cni::{code, CniError, CniResult, IpConfig};
use ipnetwork::IpNetwork;
use std::net::IpAddr;

/// What one range set gave the attachment, and whether this call reserved it.
#[derive(Debug)]
pub struct Allocation {
    pub ip: IpConfig,
    pub fresh: bool,
}

fn config_for(r: &Range, a: IpAddr) -> IpConfig {
    IpConfig {
        interface: None,
        address: IpNetwork::new(a, r.subnet.prefix()).expect("prefix of a valid subnet"),
        gateway: Some(r.gateway),
    }
}

fn range_of(set: &RangeSet, a: IpAddr) -> Option<&Range> {
    set.iter().find(|r| r.contains(a))
}

fn describe(set: &RangeSet) -> String {
    set.iter()
        .map(|r| format!("{}-{}", r.start, r.end))
        .collect::<Vec<_>>()
        .join(",")
}

/// Every candidate of the set once, starting after `last` (or at the first range's start).
fn candidates<'a>(
    set: &'a RangeSet,
    last: Option<IpAddr>,
) -> impl Iterator<Item = (&'a Range, IpAddr)> + 'a {
    let (first_range, first_ip) =
        match last.and_then(|l| set.iter().position(|r| r.contains(l)).map(|i| (i, l))) {
            Some((i, l)) if l != set[i].end => (i, ip::next(l)),
            Some((i, _)) => ((i + 1) % set.len(), set[(i + 1) % set.len()].start),
            None => (0, set[0].start),
        };
    let n = set.len();
    // Segments (range, first, last) to walk: from first_ip to the end of its range, every
    // other range in order, then the start of the first range up to just before first_ip.
    let mut segments = vec![(
        first_range,
        ip::to_u128(first_ip),
        ip::to_u128(set[first_range].end),
    )];
    for k in 1..n {
        let i = (first_range + k) % n;
        segments.push((i, ip::to_u128(set[i].start), ip::to_u128(set[i].end)));
    }
    let r0 = &set[first_range];
    if ip::to_u128(first_ip) > ip::to_u128(r0.start) {
        segments.push((
            first_range,
            ip::to_u128(r0.start),
            ip::to_u128(first_ip) - 1,
        ));
    }
    segments.into_iter().flat_map(move |(i, lo, hi)| {
        let r = &set[i];
        (lo..=hi).map(move |v| (r, ip::from_u128(v, r.start)))
    })
}

/// One address from `set` for the attachment.
pub fn allocate(
    store: &mut dyn Store,
    set: &RangeSet,
    set_idx: usize,
    id: &str,
    ifname: &str,
    requested: Option<IpAddr>,
) -> CniResult<Allocation> {
    let mine = store
        .reservations()?
        .into_iter()
        .find(|r| r.is_for(id, ifname) && range_of(set, r.ip).is_some());
    if let Some(existing) = mine {
        if requested.is_none() || requested == Some(existing.ip) {
            let r = range_of(set, existing.ip).expect("checked above");
            return Ok(Allocation {
                ip: config_for(r, existing.ip),
                fresh: false,
            });
        }
        return Err(CniError::config(format!(
            "{id}/{ifname} already holds {} in range set {}, cannot also take requested {}",
            existing.ip,
            describe(set),
            requested.unwrap()
        )));
    }
    if let Some(want) = requested {
        let r = range_of(set, want).ok_or_else(|| {
            CniError::config(format!(
                "requested IP {want} is not in range set {}",
                describe(set)
            ))
        })?;
        if want == r.gateway {
            return Err(CniError::config(format!(
                "requested IP {want} is the gateway of range set {}",
                describe(set)
            )));
        }
        if !store.reserve(id, ifname, want, set_idx)? {
            return Err(CniError::new(
                code::INTERNAL,
                format!(
                    "requested IP address {want} is not available in range set {}",
                    describe(set)
                ),
            ));
        }
        return Ok(Allocation {
            ip: config_for(r, want),
            fresh: true,
        });
    }
    let last = store.last_reserved(set_idx)?;
    for (r, cand) in candidates(set, last) {
        if set.iter().any(|g| g.gateway == cand) {
            continue;
        }
        if store.reserve(id, ifname, cand, set_idx)? {
            return Ok(Allocation {
                ip: config_for(r, cand),
                fresh: true,
            });
        }
    }
    Err(CniError::new(
        code::TRY_AGAIN_LATER,
        format!("no IP addresses available in range set: {}", describe(set)),
    ))
}

/// Whether at least one address of the set is free (for STATUS). Visits at most one
/// candidate more than there are reservations and gateways.
pub fn has_free(store: &dyn Store, set: &RangeSet) -> CniResult<bool> {
    let held: std::collections::HashSet<IpAddr> =
        store.reservations()?.into_iter().map(|r| r.ip).collect();
    for (_, cand) in candidates(set, None) {
        if !held.contains(&cand) && !set.iter().any(|g| g.gateway == cand) {
            return Ok(true);
        }
    }
    Ok(false)
}

#[cfg(test)]
mod tests {
    use super::super::config::IpamConfig;
    use super::super::store::MemStore;
    use super::*;

    fn set(json: &str) -> RangeSet {
        IpamConfig::parse(
            format!(r#"{{"name":"n","ipam":{{"ranges":[{json}]}}}}"#).as_bytes(),
            &[],
        )
        .unwrap()
        .range_sets
        .remove(0)
    }

    fn take(s: &mut MemStore, set: &RangeSet, id: &str) -> CniResult<String> {
        allocate(s, set, 0, id, "eth0", None).map(|a| a.ip.address.ip().to_string())
    }

    #[test]
    fn round_robin_skips_gateway_and_wraps() {
        let set = set(r#"[{"subnet":"10.0.0.0/29"}]"#);
        let mut s = MemStore::default();
        let got: Vec<String> = (0..5)
            .map(|i| take(&mut s, &set, &format!("c{i}")).unwrap())
            .collect();
        assert_eq!(
            got,
            ["10.0.0.2", "10.0.0.3", "10.0.0.4", "10.0.0.5", "10.0.0.6"]
        );
        let e = take(&mut s, &set, "c9").unwrap_err();
        assert_eq!(e.code, code::TRY_AGAIN_LATER);
        assert!(!has_free(&s, &set).unwrap());
        s.release("10.0.0.3".parse().unwrap()).unwrap();
        assert!(has_free(&s, &set).unwrap());
        assert_eq!(take(&mut s, &set, "c9").unwrap(), "10.0.0.3");
        // After .3 the walk continues from .4, finds nothing until it wraps back.
        s.release("10.0.0.2".parse().unwrap()).unwrap();
        assert_eq!(take(&mut s, &set, "c10").unwrap(), "10.0.0.2");
    }

    #[test]
    fn continues_after_last_reserved_across_ranges() {
        let set = set(
            r#"[{"subnet":"10.0.0.0/24","rangeStart":"10.0.0.10","rangeEnd":"10.0.0.11"},{"subnet":"10.0.1.0/24","rangeStart":"10.0.1.5","rangeEnd":"10.0.1.6"}]"#,
        );
        let mut s = MemStore::default();
        s.last.insert(0, "10.0.0.11".parse().unwrap());
        assert_eq!(take(&mut s, &set, "a").unwrap(), "10.0.1.5");
        assert_eq!(take(&mut s, &set, "b").unwrap(), "10.0.1.6");
        assert_eq!(take(&mut s, &set, "c").unwrap(), "10.0.0.10");
        let a = allocate(&mut s, &set, 0, "d", "eth0", None).unwrap();
        assert_eq!(a.ip.address.to_string(), "10.0.0.11/24");
        assert_eq!(a.ip.gateway.unwrap().to_string(), "10.0.0.1");
    }

    #[test]
    fn same_attachment_gets_same_address() {
        let set = set(r#"[{"subnet":"fd00::/120"}]"#);
        let mut s = MemStore::default();
        let a = allocate(&mut s, &set, 0, "c", "eth0", None).unwrap();
        assert!(a.fresh);
        let b = allocate(&mut s, &set, 0, "c", "eth0", None).unwrap();
        assert!(!b.fresh);
        assert_eq!(a.ip, b.ip);
        let c = allocate(&mut s, &set, 0, "c", "eth1", None).unwrap();
        assert_ne!(a.ip, c.ip);
        assert_eq!(a.ip.address.to_string(), "fd00::2/120");
    }

    #[test]
    fn requested_addresses() {
        let set = set(r#"[{"subnet":"10.0.0.0/24"}]"#);
        let mut s = MemStore::default();
        let want = Some("10.0.0.50".parse().unwrap());
        assert_eq!(
            allocate(&mut s, &set, 0, "a", "eth0", want)
                .unwrap()
                .ip
                .address
                .to_string(),
            "10.0.0.50/24"
        );
        assert_eq!(
            allocate(&mut s, &set, 0, "b", "eth0", want)
                .unwrap_err()
                .code,
            code::INTERNAL
        );
        assert_eq!(
            allocate(
                &mut s,
                &set,
                0,
                "b",
                "eth0",
                Some("10.9.0.1".parse().unwrap())
            )
            .unwrap_err()
            .code,
            7
        );
        assert_eq!(
            allocate(
                &mut s,
                &set,
                0,
                "b",
                "eth0",
                Some("10.0.0.1".parse().unwrap())
            )
            .unwrap_err()
            .code,
            7
        );
    }
}
