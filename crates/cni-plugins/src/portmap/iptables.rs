//! The iptables backend: the reference plugin's chains in the `nat` table, made and
//! removed through the `iptables`/`ip6tables` tools (which serialise on the xtables
//! lock with `-w`).
//!
//! ```text
//! PREROUTING, OUTPUT: -m addrtype --dst-type LOCAL -j CNI-HOSTPORT-DNAT
//! CNI-HOSTPORT-DNAT:  -m comment --comment "dnat name: \"net\" id: \"CID\"" -m multiport -p tcp --destination-ports 8080 -j CNI-DN-<hash>
//! CNI-DN-<hash>:      -p tcp --dport 8080 -s 10.88.0.5/16 -j CNI-HOSTPORT-SETMARK
//!                     -p tcp --dport 8080 -s 127.0.0.1 -j CNI-HOSTPORT-SETMARK
//!                     -p tcp --dport 8080 -j DNAT --to-destination 10.88.0.5:80
//! CNI-HOSTPORT-SETMARK: -j MARK --set-xmark 0x2000/0x2000
//! POSTROUTING (first): -j CNI-HOSTPORT-MASQ
//! CNI-HOSTPORT-MASQ:   -m mark --mark 0x2000/0x2000 -j MASQUERADE
//! ```

use super::Conf;
use crate::masq::{find_tool, run_tool, run_tool_status, Ran};
use cni::{CniError, CniResult};
use ipnetwork::IpNetwork;

const TOP_DNAT: &str = "CNI-HOSTPORT-DNAT";
const SET_MARK: &str = "CNI-HOSTPORT-SETMARK";
const MARK_MASQ: &str = "CNI-HOSTPORT-MASQ";

struct Ipt {
    tool: &'static str,
}

impl Ipt {
    fn for_ip(v4: bool) -> Ipt {
        Ipt {
            tool: if v4 { "iptables" } else { "ip6tables" },
        }
    }

    /// `TOOL -w -t nat ARGS`, however it ends.
    fn run(&self, args: &[&str]) -> CniResult<Ran> {
        run_tool_status(self.tool, &nat(args))
    }

    /// Runs and requires success.
    fn must(&self, args: &[&str]) -> CniResult<String> {
        run_tool(self.tool, &nat(args))
    }

    fn chain_exists(&self, chain: &str) -> CniResult<bool> {
        Ok(self.run(&["-S", chain])?.code == 0)
    }

    fn ensure_chain(&self, chain: &str) -> CniResult<()> {
        if self.chain_exists(chain)? {
            return Ok(());
        }
        let r = self.run(&["-N", chain])?;
        // Made meanwhile by another plugin: as good.
        if r.code != 0 && !self.chain_exists(chain)? {
            return Err(CniError::io(format!(
                "{} -t nat -N {chain} failed: {}",
                self.tool, r.stderr
            )));
        }
        Ok(())
    }

    /// Whether `rule` is in `chain` (`-C`: exit 1 means no; anything else, an error).
    fn exists(&self, chain: &str, rule: &[String]) -> CniResult<bool> {
        let mut a = vec!["-C", chain];
        a.extend(rule.iter().map(String::as_str));
        let r = self.run(&a)?;
        match r.code {
            0 => Ok(true),
            1 => Ok(false),
            _ => Err(CniError::io(format!(
                "{} -t nat -C {chain} failed: {}",
                self.tool, r.stderr
            ))),
        }
    }

    fn insert_unique(&self, chain: &str, prepend: bool, rule: &[String]) -> CniResult<()> {
        if self.exists(chain, rule)? {
            return Ok(());
        }
        let mut a = if prepend {
            vec!["-I", chain, "1"]
        } else {
            vec!["-A", chain]
        };
        a.extend(rule.iter().map(String::as_str));
        self.must(&a).map(drop)
    }
}

/// A chain with the rules it holds and the rules that jump to it (`entry`, in each of
/// `entry_chains`), as the reference plugin describes each of its chains.
struct Chain {
    name: String,
    entry_chains: Vec<&'static str>,
    entry_rules: Vec<Vec<String>>,
    rules: Vec<Vec<String>>,
    prepend_entry: bool,
}

/// `-w -t nat` before `args`: wait for the xtables lock, in the nat table.
fn nat<'a>(args: &[&'a str]) -> Vec<&'a str> {
    let mut v = vec!["-w", "-t", "nat"];
    v.extend_from_slice(args);
    v
}

fn words(s: &[&str]) -> Vec<String> {
    s.iter().map(|w| w.to_string()).collect()
}

impl Chain {
    fn setup(&self, ipt: &Ipt) -> CniResult<()> {
        ipt.ensure_chain(&self.name)?;
        for r in &self.rules {
            ipt.insert_unique(&self.name, false, r)?;
        }
        for entry in &self.entry_chains {
            for r in &self.entry_rules {
                let mut r = r.clone();
                r.extend(words(&["-j", &self.name]));
                ipt.insert_unique(entry, self.prepend_entry, &r)?;
            }
        }
        Ok(())
    }

    /// Removes the chain and every jump to it; nothing there is not an error.
    fn teardown(&self, ipt: &Ipt) -> CniResult<()> {
        if !ipt.chain_exists(&self.name)? {
            return Ok(());
        }
        for entry in &self.entry_chains {
            for r in &self.entry_rules {
                let mut a = vec!["-D", entry];
                a.extend(r.iter().map(String::as_str));
                a.extend(["-j", &self.name]);
                let _ = ipt.run(&a)?;
            }
            // Jumps that differ from ours (another plugin's mappings for the same
            // container id, older rule shapes): found by their target.
            let listed = ipt.must(&["-S", entry])?;
            let target = format!("-j {}", self.name);
            for line in listed.lines().filter(|l| l.ends_with(&target)) {
                let spec = crate::masq::shell_words(line);
                // `-A ENTRY ...`
                let mut a = vec!["-D", entry];
                a.extend(spec.iter().skip(2).map(String::as_str));
                let _ = ipt.run(&a)?;
            }
        }
        let _ = ipt.run(&["-F", &self.name])?;
        let r = ipt.run(&["-X", &self.name])?;
        if r.code != 0 && ipt.chain_exists(&self.name)? {
            return Err(CniError::io(format!(
                "{} -t nat -X {} failed: {}",
                ipt.tool, self.name, r.stderr
            )));
        }
        Ok(())
    }

    fn check(&self, ipt: &Ipt) -> CniResult<()> {
        if !ipt.chain_exists(&self.name)? {
            return Err(CniError::io(format!(
                "chain {} not found in iptables table nat",
                self.name
            )));
        }
        for r in &self.rules {
            if !ipt.exists(&self.name, r)? {
                return Err(CniError::io(format!(
                    "rule {:?} not found in chain {}",
                    r.join(" "),
                    self.name
                )));
            }
        }
        for entry in &self.entry_chains {
            for r in &self.entry_rules {
                let mut r = r.clone();
                r.extend(words(&["-j", &self.name]));
                if !ipt.exists(entry, &r)? {
                    return Err(CniError::io(format!(
                        "rule {:?} not found in chain {entry}",
                        r.join(" ")
                    )));
                }
            }
        }
        Ok(())
    }
}

fn mark(bit: u32) -> String {
    let v = 1u32 << bit;
    format!("{v:#x}/{v:#x}")
}

fn set_mark_chain(bit: u32) -> Chain {
    Chain {
        name: SET_MARK.into(),
        entry_chains: vec![],
        entry_rules: vec![],
        rules: vec![words(&[
            "-m",
            "comment",
            "--comment",
            "CNI portfwd masquerade mark",
            "-j",
            "MARK",
            "--set-xmark",
            &mark(bit),
        ])],
        prepend_entry: false,
    }
}

fn mark_masq_chain(bit: u32) -> Chain {
    Chain {
        name: MARK_MASQ.into(),
        entry_chains: vec!["POSTROUTING"],
        entry_rules: vec![words(&[
            "-m",
            "comment",
            "--comment",
            "CNI portfwd requiring masquerade",
        ])],
        rules: vec![words(&[
            "-m",
            "mark",
            "--mark",
            &mark(bit),
            "-j",
            "MASQUERADE",
        ])],
        prepend_entry: true,
    }
}

fn top_dnat_chain() -> Chain {
    Chain {
        name: TOP_DNAT.into(),
        entry_chains: vec!["PREROUTING", "OUTPUT"],
        entry_rules: vec![words(&["-m", "addrtype", "--dst-type", "LOCAL"])],
        rules: vec![],
        prepend_entry: false,
    }
}

/// `CNI-DN-` and 21 hex digits of SHA-512 over network name and container id.
pub fn dnat_chain_name(network: &str, container_id: &str) -> String {
    crate::masq::hashed_chain("CNI-DN-", network, container_id)
}

/// The attachment's chain without its rules (enough to remove it).
fn dnat_chain(network: &str, container_id: &str) -> Chain {
    Chain {
        name: dnat_chain_name(network, container_id),
        entry_chains: vec![TOP_DNAT],
        entry_rules: vec![],
        rules: vec![],
        prepend_entry: false,
    }
}

/// The reference plugin's comment, cut to iptables' 255 bytes as it cuts it.
fn dnat_comment(network: &str, container_id: &str) -> String {
    let c = format!("dnat name: \"{network}\" id: \"{container_id}\"");
    if c.len() <= 255 {
        return c;
    }
    let mut end = 253;
    while !c.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}...", &c[..end])
}

/// The attachment's chain with its rules, for address `ip`.
fn filled_dnat_chain(conf: &Conf, container_id: &str, ip: IpNetwork) -> Chain {
    let v4 = ip.is_ipv4();
    let mut c = dnat_chain(&conf.network, container_id);
    let comment = dnat_comment(&conf.network, container_id);
    let set_mark = conf
        .external_set_mark_chain
        .clone()
        .unwrap_or_else(|| SET_MARK.to_string());
    // One entry per protocol (sorted) and 15 ports (multiport's limit).
    let mut protos: Vec<&str> = conf.mappings.iter().map(|m| m.protocol).collect();
    protos.sort_unstable();
    protos.dedup();
    for proto in protos {
        let ports: Vec<String> = conf
            .mappings
            .iter()
            .filter(|m| m.protocol == proto)
            .map(|m| m.host_port.to_string())
            .collect();
        for chunk in ports.chunks(15) {
            let mut r = words(&["-m", "comment", "--comment", &comment]);
            r.extend(words(&[
                "-m",
                "multiport",
                "-p",
                proto,
                "--destination-ports",
                &chunk.join(","),
            ]));
            r.extend(conf.conditions(v4).iter().cloned());
            c.entry_rules.push(r);
        }
    }
    for m in conf.mappings_for(v4) {
        let mut base = words(&["-p", m.protocol, "--dport", &m.host_port.to_string()]);
        if let Some(h) = m.host_ip {
            base.extend(words(&["-d", &h.to_string()]));
        }
        if conf.snat {
            let src = match (conf.masq_all, v4) {
                (true, true) => "0.0.0.0/0".to_string(),
                (true, false) => "::/0".to_string(),
                (false, _) => ip.to_string(),
            };
            let mut r = base.clone();
            r.extend(words(&["-s", &src, "-j", &set_mark]));
            c.rules.push(r);
            if v4 && !conf.masq_all {
                let mut r = base.clone();
                r.extend(words(&["-s", "127.0.0.1", "-j", &set_mark]));
                c.rules.push(r);
            }
        }
        let to = if v4 {
            format!("{}:{}", ip.ip(), m.container_port)
        } else {
            format!("[{}]:{}", ip.ip(), m.container_port)
        };
        let mut r = base;
        r.extend(words(&["-j", "DNAT", "--to-destination", &to]));
        c.rules.push(r);
    }
    c
}

pub fn forward(conf: &Conf, container_id: &str, ip: IpNetwork) -> CniResult<()> {
    let ipt = Ipt::for_ip(ip.is_ipv4());
    if conf.snat && conf.external_set_mark_chain.is_none() {
        set_mark_chain(conf.mark_bit).setup(&ipt)?;
        mark_masq_chain(conf.mark_bit).setup(&ipt)?;
    }
    top_dnat_chain().setup(&ipt)?;
    filled_dnat_chain(conf, container_id, ip).setup(&ipt)
}

pub fn check(conf: &Conf, container_id: &str, ip: IpNetwork) -> CniResult<()> {
    filled_dnat_chain(conf, container_id, ip).check(&Ipt::for_ip(ip.is_ipv4()))
}

/// Removes the attachment's chain from both families, where the tool is installed.
pub fn teardown(conf: &Conf, container_id: &str) -> CniResult<()> {
    let c = dnat_chain(&conf.network, container_id);
    for v4 in [true, false] {
        let ipt = Ipt::for_ip(v4);
        if find_tool(ipt.tool).is_none() {
            continue;
        }
        c.teardown(&ipt)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn chain_names_and_comments_match_the_reference() {
        let n = dnat_chain_name("mynet", "abc123");
        assert_eq!(n.len(), 28);
        assert!(n.starts_with("CNI-DN-70a29d9dc18bc4d652ea5"), "{n}");
        assert_eq!(dnat_comment("n", "c"), r#"dnat name: "n" id: "c""#);
        let long = dnat_comment("n", &"x".repeat(300));
        assert_eq!(long.len(), 256);
        assert!(long.ends_with("..."));
        assert_eq!(mark(13), "0x2000/0x2000");
    }

    #[test]
    fn rules_of_an_attachment() {
        let conf = Conf::from_raw(
            "net",
            serde_json::from_value(json!({"backend": "iptables", "runtimeConfig": {"portMappings": [
                {"hostPort": 8080, "containerPort": 80, "protocol": "tcp"},
                {"hostPort": 53, "containerPort": 53, "protocol": "udp", "hostIP": "192.0.2.1"},
                {"hostPort": 9090, "containerPort": 90, "protocol": "tcp", "hostIP": "2001:db8::1"},
            ]}}))
            .unwrap(),
            || true,
        )
        .unwrap();
        let c = filled_dnat_chain(&conf, "cid", "10.88.0.5/16".parse().unwrap());
        let show: Vec<String> = c.rules.iter().map(|r| r.join(" ")).collect();
        assert_eq!(
            show,
            [
                "-p tcp --dport 8080 -s 10.88.0.5/16 -j CNI-HOSTPORT-SETMARK",
                "-p tcp --dport 8080 -s 127.0.0.1 -j CNI-HOSTPORT-SETMARK",
                "-p tcp --dport 8080 -j DNAT --to-destination 10.88.0.5:80",
                "-p udp --dport 53 -d 192.0.2.1 -s 10.88.0.5/16 -j CNI-HOSTPORT-SETMARK",
                "-p udp --dport 53 -d 192.0.2.1 -s 127.0.0.1 -j CNI-HOSTPORT-SETMARK",
                "-p udp --dport 53 -d 192.0.2.1 -j DNAT --to-destination 10.88.0.5:53",
            ]
        );
        let entries: Vec<String> = c.entry_rules.iter().map(|r| r.join(" ")).collect();
        assert_eq!(
            entries,
            [
                "-m comment --comment dnat name: \"net\" id: \"cid\" -m multiport -p tcp --destination-ports 8080,9090",
                "-m comment --comment dnat name: \"net\" id: \"cid\" -m multiport -p udp --destination-ports 53",
            ]
        );
        let c6 = filled_dnat_chain(&conf, "cid", "fd00::5/64".parse().unwrap());
        assert!(c6.rules.iter().any(|r| r.join(" ")
            == "-p tcp --dport 9090 -d 2001:db8::1 -j DNAT --to-destination [fd00::5]:90"));
        assert!(!c6
            .rules
            .iter()
            .any(|r| r.contains(&"127.0.0.1".to_string())));
    }
}
