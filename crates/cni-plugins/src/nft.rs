//! The nftables rules of `ipMasq` and `macspoofchk`, spoken to the kernel over
//! netlink instead of through the `nft` tool.
//!
//! Why: each `nft` run is a process start plus a fetch of the whole ruleset into its
//! cache, several milliseconds that ADD and DEL paid two or three times. The rules are
//! few and fixed, so they are built here expression by expression, exactly as `nft`
//! itself encodes them (`nft --debug=netlink`), and `nft list ruleset` shows them as
//! if typed: `ip saddr 10.88.0.5 ip daddr != 10.88.0.0/16 ip daddr != 224.0.0.0/4
//! masquerade comment "..."`. The comment is stored where `nft` keeps it (the rule's
//! user data, TLV type 0), so rules made by either are found by the other.

use crate::rawnl::{self, Builder, Socket, NLMSG_DONE, NLMSG_ERROR};
use cni::{CniError, CniResult};
use ipnetwork::IpNetwork;
use std::net::IpAddr;
use std::os::fd::OwnedFd;

/// The netfilter netlink protocol (nf_tables here, ctnetlink in portmap/conntrack.rs).
pub const NETLINK_NETFILTER: i32 = 12;
const SUBSYS: u16 = 10 << 8; // NFNL_SUBSYS_NFTABLES
const BATCH_BEGIN: u16 = 0x10;
const BATCH_END: u16 = 0x11;
const NEWTABLE: u16 = 0;
const NEWCHAIN: u16 = 3;
const NEWRULE: u16 = 6;
const GETRULE: u16 = 7;
const DELRULE: u16 = 8;

pub const INET: u8 = 1;
pub const BRIDGE: u8 = 7;
/// The `ip` and `ip6` families (the portmap plugin's tables).
pub const NFPROTO_IPV4: u8 = 2;
pub const NFPROTO_IPV6: u8 = 10;

// Attribute numbers of linux/netfilter/nf_tables.h.
const TABLE_NAME: u16 = 1;
const TABLE_USERDATA: u16 = 6;
const CHAIN_TABLE: u16 = 1;
const CHAIN_NAME: u16 = 3;
const CHAIN_HOOK: u16 = 4;
const CHAIN_POLICY: u16 = 5;
const CHAIN_TYPE: u16 = 7;
const HOOK_NUM: u16 = 1;
const HOOK_PRIORITY: u16 = 2;
const RULE_TABLE: u16 = 1;
const RULE_CHAIN: u16 = 2;
const RULE_HANDLE: u16 = 3;
const RULE_EXPRESSIONS: u16 = 4;
const RULE_USERDATA: u16 = 7;
const LIST_ELEM: u16 = 1;
const EXPR_NAME: u16 = 1;
const EXPR_DATA: u16 = 2;
const DATA_VALUE: u16 = 1;
const DATA_VERDICT: u16 = 2;
const VERDICT_CODE: u16 = 1;
const REG_VERDICT: u32 = 0;
const REG_1: u32 = 1;
const NF_DROP: u32 = 0;
const NF_ACCEPT: u32 = 1;
const META_IIFNAME: u32 = 6;
const META_NFPROTO: u32 = 15;
const META_L4PROTO: u32 = 16;
const PAYLOAD_TRANSPORT: u32 = 2;
const REG_2: u32 = 2;
const NF_JUMP: i32 = -3;
const VERDICT_CHAIN: u16 = 2;
const NFT_FIB_RESULT_ADDRTYPE: u32 = 3;
const NFTA_FIB_F_DADDR: u32 = 1 << 1;
const RTN_LOCAL: u32 = 2;
const NFT_NAT_DNAT: u32 = 1;
const NF_NAT_RANGE_PROTO_SPECIFIED: u32 = 2;
const PAYLOAD_LL: u32 = 0;
const PAYLOAD_NETWORK: u32 = 1;
const CMP_EQ: u32 = 0;
const CMP_NEQ: u32 = 1;

/// A chain: its family and name, and for a base chain where it hooks and how.
pub struct ChainSpec {
    pub family: u8,
    pub name: &'static str,
    pub base: Option<Base>,
}

/// A base chain's type, hook and priority.
pub struct Base {
    pub kind: &'static str,
    pub hook: u32,
    pub priority: i32,
}

/// `type nat hook postrouting priority srcnat` in `table inet crust_cni`.
pub const POSTROUTING: ChainSpec = ChainSpec {
    family: INET,
    name: crate::masq::NFT_CHAIN,
    base: Some(Base {
        kind: "nat",
        hook: HOOK_POSTROUTING,
        priority: 100,
    }),
};

/// `type filter hook prerouting priority -300` in `table bridge crust_cni`.
pub const MACSPOOF: ChainSpec = ChainSpec {
    family: BRIDGE,
    name: crate::masq::NFT_SPOOF_CHAIN,
    base: Some(Base {
        kind: "filter",
        hook: 0, // NF_BR_PRE_ROUTING
        priority: -300,
    }),
};

pub const HOOK_PREROUTING: u32 = 0;
pub const HOOK_OUTPUT: u32 = 3;
pub const HOOK_POSTROUTING: u32 = 4;

/// One rule to add: its chain, expressions (already encoded) and comment.
pub struct Rule {
    chain: &'static ChainSpec,
    exprs: Builder,
    comment: String,
}

impl Rule {
    /// `ip saddr A ip daddr != SUBNET ip daddr != 224.0.0.0/4 masquerade` (or the
    /// ip6 form), for one address of the pod given with its subnet's prefix.
    pub fn masquerade(ip: IpNetwork, comment: &str) -> Rule {
        let subnet = crate::ip::network_of(ip);
        let mut e = Builder::default();
        let (proto, saddr_off, daddr_off, mcast) = match ip.ip() {
            IpAddr::V4(_) => (NFPROTO_IPV4, 12, 16, "224.0.0.0/4"),
            IpAddr::V6(_) => (NFPROTO_IPV6, 8, 24, "ff00::/8"),
        };
        meta(&mut e, META_NFPROTO);
        cmp(&mut e, CMP_EQ, &[proto]);
        payload(
            &mut e,
            PAYLOAD_NETWORK,
            saddr_off,
            addr_bytes(ip.ip()).len() as u32,
        );
        cmp(&mut e, CMP_EQ, &addr_bytes(ip.ip()));
        prefix_neq(&mut e, daddr_off, subnet);
        prefix_neq(&mut e, daddr_off, mcast.parse().expect("literal"));
        expr(&mut e, "masq", |_| {});
        Rule {
            chain: &POSTROUTING,
            exprs: e,
            comment: comment.to_string(),
        }
    }

    /// `iifname VETH ether saddr != MAC drop`.
    pub fn macspoof(veth: &str, mac: &[u8], comment: &str) -> Rule {
        let mut e = Builder::default();
        meta(&mut e, META_IIFNAME);
        let mut name = [0u8; 16];
        let n = veth.len().min(15);
        name[..n].copy_from_slice(&veth.as_bytes()[..n]);
        cmp(&mut e, CMP_EQ, &name);
        payload(&mut e, PAYLOAD_LL, 6, mac.len() as u32);
        cmp(&mut e, CMP_NEQ, mac);
        expr(&mut e, "immediate", |b| {
            b.be32(1, REG_VERDICT) // NFTA_IMMEDIATE_DREG
                .nest(2) // NFTA_IMMEDIATE_DATA
                .nest(DATA_VERDICT)
                .be32(VERDICT_CODE, NF_DROP)
                .unnest()
                .unnest();
        });
        Rule {
            chain: &MACSPOOF,
            exprs: e,
            comment: comment.to_string(),
        }
    }
}

/// The portmap plugin's rules, in tables of the `ip` or `ip6` family, where an
/// address match needs no protocol check before it.
impl Rule {
    /// `fib daddr type local jump TARGET`.
    pub fn jump_if_local(chain: &'static ChainSpec, target: &str) -> Rule {
        let mut e = Builder::default();
        expr(&mut e, "fib", |b| {
            // NFTA_FIB_DREG, _RESULT, _FLAGS
            b.be32(1, REG_1)
                .be32(2, NFT_FIB_RESULT_ADDRTYPE)
                .be32(3, NFTA_FIB_F_DADDR);
        });
        // The address type is compared in host byte order, as nft encodes it.
        cmp(&mut e, CMP_EQ, &RTN_LOCAL.to_ne_bytes());
        jump(&mut e, target);
        Rule {
            chain,
            exprs: e,
            comment: String::new(),
        }
    }

    /// `jump TARGET`.
    pub fn jump(chain: &'static ChainSpec, target: &str) -> Rule {
        let mut e = Builder::default();
        jump(&mut e, target);
        Rule {
            chain,
            exprs: e,
            comment: String::new(),
        }
    }

    /// `[ip daddr HOST] PROTO dport PORT dnat to ADDR:TO_PORT`, `proto` an IP
    /// protocol number (tcp 6, udp 17, sctp 132).
    pub fn dnat(
        chain: &'static ChainSpec,
        host: Option<IpAddr>,
        (proto, port): (u8, u16),
        (to, to_port): (IpAddr, u16),
        comment: &str,
    ) -> Rule {
        let mut e = Builder::default();
        if let Some(h) = host {
            daddr_eq(&mut e, h);
        }
        meta(&mut e, META_L4PROTO);
        cmp(&mut e, CMP_EQ, &[proto]);
        payload(&mut e, PAYLOAD_TRANSPORT, 2, 2);
        cmp(&mut e, CMP_EQ, &port.to_be_bytes());
        immediate(&mut e, REG_1, &addr_bytes(to));
        immediate(&mut e, REG_2, &to_port.to_be_bytes());
        let family = match to {
            IpAddr::V4(_) => NFPROTO_IPV4,
            IpAddr::V6(_) => NFPROTO_IPV6,
        };
        expr(&mut e, "nat", |b| {
            // NFTA_NAT_TYPE, _FAMILY, _REG_ADDR_MIN, _REG_PROTO_MIN, _FLAGS
            b.be32(1, NFT_NAT_DNAT)
                .be32(2, family as u32)
                .be32(3, REG_1)
                .be32(5, REG_2)
                .be32(7, NF_NAT_RANGE_PROTO_SPECIFIED);
        });
        Rule {
            chain,
            exprs: e,
            comment: comment.to_string(),
        }
    }

    /// `[ip saddr SRC] ip daddr DST masquerade`.
    pub fn masquerade_to(
        chain: &'static ChainSpec,
        src: Option<IpAddr>,
        dst: IpAddr,
        comment: &str,
    ) -> Rule {
        let mut e = Builder::default();
        if let Some(s) = src {
            let b = addr_bytes(s);
            payload(
                &mut e,
                PAYLOAD_NETWORK,
                if s.is_ipv4() { 12 } else { 8 },
                b.len() as u32,
            );
            cmp(&mut e, CMP_EQ, &b);
        }
        daddr_eq(&mut e, dst);
        expr(&mut e, "masq", |_| {});
        Rule {
            chain,
            exprs: e,
            comment: comment.to_string(),
        }
    }
}

fn daddr_eq(e: &mut Builder, ip: IpAddr) {
    let b = addr_bytes(ip);
    payload(
        e,
        PAYLOAD_NETWORK,
        if ip.is_ipv4() { 16 } else { 24 },
        b.len() as u32,
    );
    cmp(e, CMP_EQ, &b);
}

fn immediate(e: &mut Builder, reg: u32, data: &[u8]) {
    expr(e, "immediate", |b| {
        // NFTA_IMMEDIATE_DREG, _DATA
        b.be32(1, reg).nest(2).attr(DATA_VALUE, data).unnest();
    });
}

fn jump(e: &mut Builder, target: &str) {
    expr(e, "immediate", |b| {
        b.be32(1, REG_VERDICT)
            .nest(2)
            .nest(DATA_VERDICT)
            .be32(VERDICT_CODE, NF_JUMP as u32)
            .str(VERDICT_CHAIN, target)
            .unnest()
            .unnest();
    });
}

/// One step of a transaction (`Nft::apply`); tables and chains are created if
/// missing and left as they are otherwise.
pub enum Op<'a> {
    Table {
        family: u8,
        name: &'a str,
        comment: &'a str,
    },
    Chain(&'a str, &'a ChainSpec),
    /// Empties the chain.
    Flush(&'a str, &'a ChainSpec),
    Rule(&'a str, &'a Rule),
}

fn addr_bytes(ip: IpAddr) -> Vec<u8> {
    match ip {
        IpAddr::V4(a) => a.octets().to_vec(),
        IpAddr::V6(a) => a.octets().to_vec(),
    }
}

fn expr(e: &mut Builder, name: &str, data: impl FnOnce(&mut Builder)) {
    e.nest(LIST_ELEM).str(EXPR_NAME, name).nest(EXPR_DATA);
    data(e);
    e.unnest().unnest();
}

fn meta(e: &mut Builder, key: u32) {
    expr(e, "meta", |b| {
        b.be32(1, REG_1).be32(2, key); // NFTA_META_DREG, NFTA_META_KEY
    });
}

fn payload(e: &mut Builder, base: u32, offset: u32, len: u32) {
    expr(e, "payload", |b| {
        // NFTA_PAYLOAD_DREG, _BASE, _OFFSET, _LEN
        b.be32(1, REG_1).be32(2, base).be32(3, offset).be32(4, len);
    });
}

fn cmp(e: &mut Builder, op: u32, data: &[u8]) {
    expr(e, "cmp", |b| {
        // NFTA_CMP_SREG, _OP, _DATA
        b.be32(1, REG_1)
            .be32(2, op)
            .nest(3)
            .attr(DATA_VALUE, data)
            .unnest();
    });
}

/// `daddr != NET`: whole bytes of the prefix compared directly, as `nft` does; a
/// prefix ending inside a byte through a mask of the whole address.
fn prefix_neq(e: &mut Builder, offset: u32, net: IpNetwork) {
    let addr = addr_bytes(net.network());
    let bits = net.prefix() as usize;
    if bits % 8 == 0 {
        let n = bits / 8;
        payload(e, PAYLOAD_NETWORK, offset, n as u32);
        cmp(e, CMP_NEQ, &addr[..n]);
        return;
    }
    let mask: Vec<u8> = (0..addr.len())
        .map(|i| {
            let left = bits.saturating_sub(i * 8).min(8);
            (0xffu16 << (8 - left)) as u8
        })
        .collect();
    payload(e, PAYLOAD_NETWORK, offset, addr.len() as u32);
    expr(e, "bitwise", |b| {
        // NFTA_BITWISE_SREG, _DREG, _LEN, _MASK, _XOR
        b.be32(1, REG_1)
            .be32(2, REG_1)
            .be32(3, addr.len() as u32)
            .nest(4)
            .attr(DATA_VALUE, &mask)
            .unnest()
            .nest(5)
            .attr(DATA_VALUE, &vec![0u8; addr.len()])
            .unnest();
    });
    cmp(e, CMP_NEQ, &addr);
}

/// The comment as `nft` stores it in a rule's user data.
fn userdata(comment: &str) -> Vec<u8> {
    let mut v = vec![0u8, (comment.len() + 1).min(255) as u8];
    v.extend_from_slice(&comment.as_bytes()[..comment.len().min(254)]);
    v.push(0);
    v
}

fn comment_of(udata: &[u8]) -> Option<&[u8]> {
    let mut b = udata;
    while b.len() >= 2 {
        let (ty, len) = (b[0], b[1] as usize);
        let v = b.get(2..2 + len)?;
        if ty == 0 {
            return Some(v.strip_suffix(&[0]).unwrap_or(v));
        }
        b = &b[2 + len..];
    }
    None
}

/// A rule found in crust's tables.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Found {
    pub family: u8,
    pub chain: String,
    pub handle: u64,
}

/// A netfilter netlink socket of the calling thread's network namespace.
pub struct Nft {
    sock: Socket,
    seq: u32,
}

impl Nft {
    pub fn open() -> CniResult<Nft> {
        Ok(Nft {
            sock: Socket::open(NETLINK_NETFILTER)?,
            seq: 0,
        })
    }

    /// Closing a netfilter socket waits for the kernel to free what this process
    /// deleted (an RCU grace period, ~10 ms). The caller may hand the socket to
    /// whoever can afford that wait.
    pub fn into_fd(self) -> OwnedFd {
        self.sock.into_fd()
    }

    /// Adds `rules` in one transaction; creates the tables and chains only when one
    /// is missing, since re-declaring them on every ADD makes every commit heavier.
    pub fn add(&mut self, table: &str, rules: &[Rule]) -> CniResult<()> {
        if rules.is_empty() {
            return Ok(());
        }
        match self.batch(|b, seq| {
            for r in rules {
                Self::push_rule(b, seq, table, r);
            }
        }) {
            Err(e) if e == libc::ENOENT => {}
            other => return other.map_err(|e| nft_err("adding rules", e)),
        }
        let mut chains: Vec<&ChainSpec> = Vec::new();
        for r in rules {
            if !chains.iter().any(|c| std::ptr::eq(*c, r.chain)) {
                chains.push(r.chain);
            }
        }
        self.batch(|b, seq| {
            for c in &chains {
                *seq += 1;
                b.begin(
                    SUBSYS | NEWTABLE,
                    rawnl::NLM_F_REQUEST | rawnl::NLM_F_CREATE | rawnl::NLM_F_ACK,
                    *seq,
                    &nfgen(c.family),
                )
                .str(TABLE_NAME, table)
                .end();
                push_chain(b, seq, table, c);
            }
            for r in rules {
                Self::push_rule(b, seq, table, r);
            }
        })
        .map_err(|e| nft_err("adding tables, chains and rules", e))
    }

    /// Applies `ops` as one transaction: all of them or none.
    pub fn apply(&mut self, ops: &[Op]) -> CniResult<()> {
        self.batch(|b, seq| {
            for op in ops {
                match op {
                    Op::Table {
                        family,
                        name,
                        comment,
                    } => {
                        *seq += 1;
                        b.begin(
                            SUBSYS | NEWTABLE,
                            rawnl::NLM_F_REQUEST | rawnl::NLM_F_CREATE | rawnl::NLM_F_ACK,
                            *seq,
                            &nfgen(*family),
                        )
                        .str(TABLE_NAME, name)
                        .attr(TABLE_USERDATA, &userdata(comment))
                        .end();
                    }
                    Op::Chain(table, c) => push_chain(b, seq, table, c),
                    Op::Flush(table, c) => {
                        // DELRULE naming a chain and no handle empties the chain.
                        *seq += 1;
                        b.begin(
                            SUBSYS | DELRULE,
                            rawnl::NLM_F_REQUEST | rawnl::NLM_F_ACK,
                            *seq,
                            &nfgen(c.family),
                        )
                        .str(RULE_TABLE, table)
                        .str(RULE_CHAIN, c.name)
                        .end();
                    }
                    Op::Rule(table, r) => Self::push_rule(b, seq, table, r),
                }
            }
        })
        .map_err(|e| nft_err("applying a transaction", e))
    }

    fn push_rule(b: &mut Builder, seq: &mut u32, table: &str, r: &Rule) {
        *seq += 1;
        b.begin(
            SUBSYS | NEWRULE,
            rawnl::NLM_F_REQUEST | rawnl::NLM_F_CREATE | rawnl::NLM_F_APPEND | rawnl::NLM_F_ACK,
            *seq,
            &nfgen(r.chain.family),
        )
        .str(RULE_TABLE, table)
        .str(RULE_CHAIN, r.chain.name)
        .nest(RULE_EXPRESSIONS);
        b.buf.extend_from_slice(&r.exprs.buf);
        b.unnest();
        if !r.comment.is_empty() {
            b.attr(RULE_USERDATA, &userdata(&r.comment));
        }
        b.end();
    }

    /// Every rule in `table` (of the inet and bridge families, crust's own tables)
    /// whose comment is `comment`.
    pub fn find(&mut self, table: &str, comment: &str) -> CniResult<Vec<Found>> {
        self.find_in(&[INET, BRIDGE], table, comment)
    }

    /// Every rule in the tables named `table` of `families` whose comment is
    /// `comment`.
    ///
    /// Each family is dumped on its own: a dump of every family by table name stops
    /// after the first table of that name, so the inet table hid the bridge one.
    /// The kernel resumes a dump that spans several reads by position, so rules
    /// deleted by another plugin meanwhile can make it skip ours; it flags such a dump
    /// (NLM_F_DUMP_INTR), and then the dump is taken again.
    pub fn find_in(
        &mut self,
        families: &[u8],
        table: &str,
        comment: &str,
    ) -> CniResult<Vec<Found>> {
        let mut out = Vec::new();
        'family: for &family in families {
            for _ in 0..20 {
                if let Some(found) = self.find_once(family, table, comment)? {
                    out.extend(found);
                    continue 'family;
                }
            }
            return Err(CniError::new(
                cni::code::TRY_AGAIN_LATER,
                "nftables rules keep changing while being listed",
            ));
        }
        Ok(out)
    }

    /// One dump of one family; None when it was interrupted.
    fn find_once(
        &mut self,
        family: u8,
        table: &str,
        comment: &str,
    ) -> CniResult<Option<Vec<Found>>> {
        let mut b = Builder::default();
        self.seq += 1;
        let seq = self.seq;
        b.begin(
            SUBSYS | GETRULE,
            rawnl::NLM_F_REQUEST | rawnl::NLM_F_DUMP,
            seq,
            &nfgen(family),
        )
        .str(RULE_TABLE, table)
        .end();
        self.sock
            .send(&b.buf)
            .map_err(|e| CniError::io(format!("listing nftables rules: {e}")))?;
        let mut out = Vec::new();
        let mut interrupted = false;
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            let d = self
                .sock
                .recv(&mut buf)
                .map_err(|e| CniError::io(format!("listing nftables rules: {e}")))?;
            for m in rawnl::messages(d) {
                if m.seq != seq {
                    continue;
                }
                interrupted |= m.flags & rawnl::NLM_F_DUMP_INTR != 0;
                match m.ty {
                    NLMSG_DONE => return Ok((!interrupted).then_some(out)),
                    // No such table (yet): nothing of ours is there.
                    NLMSG_ERROR if m.errno() == libc::ENOENT => return Ok(Some(out)),
                    NLMSG_ERROR => return Err(nft_err("listing rules", m.errno())),
                    _ => {}
                }
                let (mut chain, mut handle, mut matches) = (String::new(), None, false);
                for (ty, v) in rawnl::attrs(m.payload, 4) {
                    match ty {
                        RULE_CHAIN => {
                            chain = String::from_utf8_lossy(v.strip_suffix(&[0]).unwrap_or(v))
                                .into_owned()
                        }
                        RULE_HANDLE if v.len() == 8 => {
                            handle = Some(u64::from_be_bytes(v.try_into().unwrap()))
                        }
                        RULE_USERDATA => matches = comment_of(v) == Some(comment.as_bytes()),
                        _ => {}
                    }
                }
                if let (true, Some(handle)) = (matches, handle) {
                    out.push(Found {
                        family,
                        chain,
                        handle,
                    });
                }
            }
        }
    }

    /// Deletes every rule in `table` commented `comment`, and says whether there was
    /// any. A rule deleted meanwhile by someone else fails the transaction with ENOENT:
    /// listed again and retried. Done only when a listing finds none left, so a rule
    /// a listing missed is not left behind.
    pub fn delete(&mut self, table: &str, comment: &str) -> CniResult<bool> {
        self.delete_in(&[INET, BRIDGE], table, comment)
    }

    /// `delete` in the tables named `table` of `families`.
    pub fn delete_in(&mut self, families: &[u8], table: &str, comment: &str) -> CniResult<bool> {
        let mut deleted = false;
        for _ in 0..6 {
            let found = self.find_in(families, table, comment)?;
            if found.is_empty() {
                return Ok(deleted);
            }
            deleted = true;
            match self.batch(|b, seq| {
                for f in &found {
                    *seq += 1;
                    b.begin(
                        SUBSYS | DELRULE,
                        rawnl::NLM_F_REQUEST | rawnl::NLM_F_ACK,
                        *seq,
                        &nfgen(f.family),
                    )
                    .str(RULE_TABLE, table)
                    .str(RULE_CHAIN, &f.chain)
                    .be64(RULE_HANDLE, f.handle)
                    .end();
                }
            }) {
                Ok(()) | Err(libc::ENOENT) => continue,
                Err(e) => return Err(nft_err("deleting rules", e)),
            }
        }
        Err(CniError::new(
            cni::code::TRY_AGAIN_LATER,
            format!("nftables rules commented {comment:?} keep changing while being deleted"),
        ))
    }

    /// Sends the messages `fill` builds (each with NLM_F_ACK) as one transaction and
    /// waits for every answer; the first error's errno if any.
    fn batch(&mut self, fill: impl FnOnce(&mut Builder, &mut u32)) -> Result<(), i32> {
        let mut b = Builder::default();
        self.seq += 1;
        let first = self.seq;
        b.begin(BATCH_BEGIN, rawnl::NLM_F_REQUEST, first, &batch_header())
            .end();
        let mut seq = self.seq;
        fill(&mut b, &mut seq);
        let want = seq - first;
        seq += 1;
        b.begin(BATCH_END, rawnl::NLM_F_REQUEST, seq, &batch_header())
            .end();
        self.seq = seq;
        self.sock
            .send(&b.buf)
            .map_err(|e| e.raw_os_error().unwrap_or(libc::EIO))?;
        let mut buf = vec![0u8; 16 * 1024];
        let (mut got, mut err) = (0, 0);
        while got < want {
            let d = self
                .sock
                .recv(&mut buf)
                .map_err(|e| e.raw_os_error().unwrap_or(libc::EIO))?;
            for m in rawnl::messages(d) {
                if m.ty == NLMSG_ERROR && m.seq > first && m.seq <= first + want {
                    got += 1;
                    if err == 0 {
                        err = m.errno();
                    }
                }
            }
        }
        match err {
            0 => Ok(()),
            e => Err(e),
        }
    }
}

fn push_chain(b: &mut Builder, seq: &mut u32, table: &str, c: &ChainSpec) {
    *seq += 1;
    b.begin(
        SUBSYS | NEWCHAIN,
        rawnl::NLM_F_REQUEST | rawnl::NLM_F_CREATE | rawnl::NLM_F_ACK,
        *seq,
        &nfgen(c.family),
    )
    .str(CHAIN_TABLE, table)
    .str(CHAIN_NAME, c.name);
    if let Some(base) = &c.base {
        b.nest(CHAIN_HOOK)
            .be32(HOOK_NUM, base.hook)
            .be32(HOOK_PRIORITY, base.priority as u32)
            .unnest()
            .be32(CHAIN_POLICY, NF_ACCEPT)
            .str(CHAIN_TYPE, base.kind);
    }
    b.end();
}

fn nfgen(family: u8) -> [u8; 4] {
    [family, 0, 0, 0]
}

/// The batch messages name the subsystem they wrap in `res_id`, big-endian.
fn batch_header() -> [u8; 4] {
    let r = (SUBSYS >> 8).to_be_bytes();
    [0, 0, r[0], r[1]]
}

fn nft_err(what: &str, errno: i32) -> CniError {
    CniError::io(format!(
        "nftables: {what}: {}",
        std::io::Error::from_raw_os_error(errno)
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn comments_round_trip_through_user_data() {
        let u = userdata("name: n id: c5");
        assert_eq!(&u[..2], &[0, 15]);
        assert_eq!(comment_of(&u), Some(&b"name: n id: c5"[..]));
        // nft may put other TLVs before the comment.
        let mut v = vec![1, 2, 9, 9];
        v.extend_from_slice(&u);
        assert_eq!(comment_of(&v), Some(&b"name: n id: c5"[..]));
        assert_eq!(comment_of(&[0, 40, 1]), None);
    }

    #[test]
    fn masks_of_prefixes_inside_a_byte() {
        let mut e = Builder::default();
        prefix_neq(&mut e, 16, "224.0.0.0/4".parse().unwrap());
        // payload + bitwise + cmp; the mask is f0 00 00 00.
        let raw = &e.buf;
        assert!(raw.windows(4).any(|w| w == [0xf0, 0, 0, 0]));
        let mut e2 = Builder::default();
        prefix_neq(&mut e2, 16, "10.88.0.0/16".parse().unwrap());
        assert!(!e2.buf.windows(7).any(|w| w == b"bitwise"));
    }
}
