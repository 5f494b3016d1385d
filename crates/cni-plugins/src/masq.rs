//! `ipMasq`: masquerade a pod's traffic that leaves its subnet.
//!
//! Every rule carries the network name and container id in its comment, so DEL removes
//! exactly the rules of its own attachment and nothing else, and the rules survive the
//! plugin (which keeps no state). nftables (spoken over netlink, see nft.rs; the `nft`
//! tool is not needed) is used when the kernel has it; iptables (the reference plugin's
//! only backend) otherwise, or when `ipMasqBackend` asks for it.
//!
//! `macspoofchk` lives beside it: a rule in `table bridge crust_cni`, chain
//! `macspoof`, drops frames entering the bridge from the pod's veth with any source MAC
//! but the pod's; it carries the same comment, so the same DEL removes it.
//!
//! nftables layout, one table for every network on the node:
//! ```text
//! table inet crust_cni {
//!   chain postrouting { type nat hook postrouting priority srcnat; policy accept;
//!     ip saddr 10.88.0.5 ip daddr != 10.88.0.0/16 ip daddr != 224.0.0.0/4 masquerade comment "name: net id: c1"
//!   }
//! }
//! ```

use crate::finish;
use crate::nft::{self, Nft};
use cni::{CniError, CniResult};
use ipnetwork::IpNetwork;
use std::path::PathBuf;
use std::process::{Command, Stdio};

pub const NFT_TABLE: &str = "crust_cni";
pub const NFT_CHAIN: &str = "postrouting";
pub const NFT_SPOOF_CHAIN: &str = "macspoof";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    Nftables,
    Iptables,
}

/// Whether the kernel has nf_tables: loaded, or loadable because its user-space is
/// installed. Looked up in sysfs rather than asked over netlink, since closing a
/// netfilter socket can wait on the kernel (see finish.rs).
pub fn nftables_present() -> bool {
    std::path::Path::new("/sys/module/nf_tables").exists() || find_tool("nft").is_some()
}

/// Finds a tool on PATH or in the sbin folders runtimes often leave off PATH.
pub fn find_tool(name: &str) -> Option<PathBuf> {
    let mut dirs: Vec<PathBuf> = std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).collect())
        .unwrap_or_default();
    dirs.extend(["/usr/sbin", "/sbin", "/usr/bin", "/bin"].map(PathBuf::from));
    dirs.into_iter().map(|d| d.join(name)).find(|p| p.is_file())
}

impl Backend {
    /// `ipMasqBackend` from the config, or the best the node has.
    pub fn choose(configured: Option<&str>) -> CniResult<Backend> {
        match configured {
            Some("nftables") => Ok(Backend::Nftables),
            Some("iptables") => Ok(Backend::Iptables),
            Some(other) => Err(CniError::config(format!(
                "unknown ipMasqBackend {other:?}: expected \"nftables\" or \"iptables\""
            ))),
            None if nftables_present() => Ok(Backend::Nftables),
            None => Ok(Backend::Iptables),
        }
    }
}

/// The comment that marks an attachment's rules. iptables gets the reference plugin's
/// exact text (`name: "net" id: "cid"`); nftables' parser takes no quotes inside a
/// comment, so there they are left out.
pub fn comment(backend: Backend, network: &str, container_id: &str) -> String {
    match backend {
        Backend::Iptables => format!("name: {network:?} id: {container_id:?}"),
        Backend::Nftables => format!("name: {network} id: {container_id}"),
    }
}

/// How a run of a tool ended: its exit code (-1: killed) and what it said.
pub struct Ran {
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
}

/// Runs `tool` (found by [`find_tool`]) with `args` and no stdin.
pub fn run_tool_status(tool: &str, args: &[&str]) -> CniResult<Ran> {
    let path = find_tool(tool)
        .ok_or_else(|| CniError::io(format!("`{tool}` is needed but not installed")))?;
    let out = Command::new(&path)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| CniError::io(format!("failed to run {tool}: {e}")))?;
    Ok(Ran {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).trim().to_string(),
    })
}

/// Runs `tool` and requires success; its stdout.
pub fn run_tool(tool: &str, args: &[&str]) -> CniResult<String> {
    let r = run_tool_status(tool, args)?;
    if r.code != 0 {
        return Err(CniError::io(format!(
            "{tool} {} failed: {}",
            args.join(" "),
            r.stderr
        )));
    }
    Ok(r.stdout)
}

fn multicast(net: &IpNetwork) -> &'static str {
    if net.is_ipv4() {
        "224.0.0.0/4"
    } else {
        "ff00::/8"
    }
}

/// Installs masquerading for each address (given with its subnet's prefix) through
/// `backend`, and, with `spoof` = (host veth, pod MAC), the MAC spoofing check.
pub fn setup(
    backend: Option<Backend>,
    network: &str,
    container_id: &str,
    ips: &[IpNetwork],
    spoof: Option<(&str, &str)>,
) -> CniResult<()> {
    let c = comment(Backend::Nftables, network, container_id);
    let mut rules = Vec::new();
    if backend == Some(Backend::Nftables) {
        rules.extend(ips.iter().map(|ip| nft::Rule::masquerade(*ip, &c)));
    }
    if let Some((veth, mac)) = spoof {
        let mac = crate::netlink::parse_mac(mac)
            .ok_or_else(|| CniError::internal(format!("the pod's MAC {mac:?} is not a MAC")))?;
        rules.push(nft::Rule::macspoof(veth, &mac, &c));
    }
    if !rules.is_empty() {
        let mut n = Nft::open()?;
        let res = n.add(NFT_TABLE, &rules);
        finish::defer_close(n.into_fd());
        res?;
    }
    if backend == Some(Backend::Iptables) {
        iptables_setup(network, container_id, ips)?;
    }
    Ok(())
}

/// The reference plugin's rules: a per-attachment chain accepting the subnet and
/// masquerading the rest (not multicast), jumped to from `nat POSTROUTING` for the
/// pod's address.
fn iptables_setup(network: &str, container_id: &str, ips: &[IpNetwork]) -> CniResult<()> {
    let c = comment(Backend::Iptables, network, container_id);
    let chain = iptables_chain(network, container_id);
    for ip in ips {
        let tool = if ip.is_ipv4() {
            "iptables"
        } else {
            "ip6tables"
        };
        let subnet = crate::ip::network_of(*ip).to_string();
        let host = format!("{}/{}", ip.ip(), if ip.is_ipv4() { 32 } else { 128 });
        let nat = |args: &[&str]| {
            let mut full = vec!["-w", "-t", "nat"];
            full.extend_from_slice(args);
            run_tool(tool, &full)
        };
        // -N fails if the chain exists (a second address of the same family): fine.
        let _ = nat(&["-N", &chain]);
        nat(&[
            "-A",
            &chain,
            "-d",
            &subnet,
            "-m",
            "comment",
            "--comment",
            &c,
            "-j",
            "ACCEPT",
        ])?;
        nat(&[
            "-A",
            &chain,
            "!",
            "-d",
            multicast(ip),
            "-m",
            "comment",
            "--comment",
            &c,
            "-j",
            "MASQUERADE",
        ])?;
        nat(&[
            "-A",
            "POSTROUTING",
            "-s",
            &host,
            "-m",
            "comment",
            "--comment",
            &c,
            "-j",
            &chain,
        ])?;
    }
    Ok(())
}

/// Removes every rule of the attachment: its nftables rules (masquerade and MAC spoof
/// check) and, with `iptables`, its iptables chains. Nothing installed is not an error.
///
/// The netfilter socket is left to `finish` to close: its close waits for the kernel
/// to free the deleted rules.
pub fn teardown(network: &str, container_id: &str, iptables: bool) -> CniResult<()> {
    if nftables_present() {
        let mut n = Nft::open()?;
        let res = n.delete(
            NFT_TABLE,
            &comment(Backend::Nftables, network, container_id),
        );
        finish::defer_close(n.into_fd());
        res?;
    }
    if iptables {
        let chain = iptables_chain(network, container_id);
        for tool in ["iptables", "ip6tables"] {
            if find_tool(tool).is_none() {
                continue;
            }
            let rules = run_tool(tool, &["-w", "-t", "nat", "-S", "POSTROUTING"])?;
            for line in rules
                .lines()
                .filter(|l| l.ends_with(&format!("-j {chain}")))
            {
                let spec: Vec<String> = shell_words(line.trim_start_matches("-A POSTROUTING"));
                let mut args = vec!["-w", "-t", "nat", "-D", "POSTROUTING"];
                args.extend(spec.iter().map(String::as_str));
                run_tool(tool, &args)?;
            }
            let _ = run_tool(tool, &["-w", "-t", "nat", "-F", &chain]);
            let _ = run_tool(tool, &["-w", "-t", "nat", "-X", &chain]);
        }
    }
    Ok(())
}

fn nft_rules(network: &str, container_id: &str) -> CniResult<Vec<nft::Found>> {
    Nft::open()?.find(
        NFT_TABLE,
        &comment(Backend::Nftables, network, container_id),
    )
}

/// Whether the attachment's masquerade rules are installed (for CHECK).
pub fn masq_present(backend: Backend, network: &str, container_id: &str) -> CniResult<bool> {
    match backend {
        Backend::Nftables => {
            let rules = nft_rules(network, container_id)?;
            Ok(rules.iter().any(|r| r.family == nft::INET))
        }
        Backend::Iptables => {
            let chain = iptables_chain(network, container_id);
            let rules = run_tool("iptables", &["-w", "-t", "nat", "-S", "POSTROUTING"])?
                + &run_tool("ip6tables", &["-w", "-t", "nat", "-S", "POSTROUTING"])
                    .unwrap_or_default();
            Ok(rules.lines().any(|l| l.ends_with(&format!("-j {chain}"))))
        }
    }
}

/// Whether the attachment's MAC spoof check is installed (for CHECK).
pub fn spoof_present(network: &str, container_id: &str) -> CniResult<bool> {
    let rules = nft_rules(network, container_id)?;
    Ok(rules.iter().any(|r| r.family == nft::BRIDGE))
}

/// The reference plugin's per-attachment chain name: `CNI-` and the first 24 hex
/// digits of SHA-512 over the network name and container id, so a node that switches
/// plugins finds (and DEL removes) the chains the other one made.
pub fn iptables_chain(network: &str, container_id: &str) -> String {
    hashed_chain("CNI-", network, container_id)
}

/// `prefix` filled to iptables' 28 characters with hex digits of SHA-512 over the
/// network name and container id, as the reference plugins name their chains.
pub fn hashed_chain(prefix: &str, network: &str, container_id: &str) -> String {
    use sha2::{Digest, Sha512};
    let digest = Sha512::digest(format!("{network}{container_id}").as_bytes());
    let hex: String = digest.iter().map(|b| format!("{b:02x}")).collect();
    format!("{prefix}{}", &hex[..28 - prefix.len()])
}

/// Splits an `iptables -S` line into arguments, honouring double quotes.
pub fn shell_words(s: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut cur = String::new();
    let mut in_q = false;
    let mut chars = s.chars().peekable();
    let mut has = false;
    while let Some(ch) = chars.next() {
        match ch {
            '\\' if in_q => {
                if let Some(n) = chars.next() {
                    cur.push(n);
                }
            }
            '"' => {
                in_q = !in_q;
                has = true;
            }
            c if c.is_whitespace() && !in_q => {
                if has || !cur.is_empty() {
                    out.push(std::mem::take(&mut cur));
                    has = false;
                }
            }
            c => cur.push(c),
        }
    }
    if has || !cur.is_empty() {
        out.push(cur);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chain_names_match_the_reference() {
        // sha512("mynet" + "abc123"), as the reference plugin names the chain.
        assert_eq!(
            iptables_chain("mynet", "abc123"),
            "CNI-70a29d9dc18bc4d652ea5d59"
        );
        assert_eq!(
            comment(Backend::Iptables, "mynet", "abc123"),
            r#"name: "mynet" id: "abc123""#
        );
    }

    #[test]
    fn chain_names_are_stable_and_distinct() {
        let a = iptables_chain("net", "c1");
        assert_eq!(a.len(), 28);
        assert!(a.starts_with("CNI-"));
        assert_eq!(a, iptables_chain("net", "c1"));
        assert_ne!(a, iptables_chain("net", "c2"));
    }

    #[test]
    fn splits_iptables_lines() {
        assert_eq!(
            shell_words(r#" -s 10.0.0.2/32 -m comment --comment "name: n id: c" -j CNI-x"#),
            [
                "-s",
                "10.0.0.2/32",
                "-m",
                "comment",
                "--comment",
                "name: n id: c",
                "-j",
                "CNI-x"
            ]
        );
    }

    #[test]
    fn backend_choice() {
        assert_eq!(
            Backend::choose(Some("iptables")).unwrap(),
            Backend::Iptables
        );
        assert_eq!(
            Backend::choose(Some("nftables")).unwrap(),
            Backend::Nftables
        );
        assert_eq!(Backend::choose(Some("pf")).unwrap_err().code, 7);
    }
}
