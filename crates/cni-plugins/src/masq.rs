//! `ipMasq`: masquerade a pod's traffic that leaves its subnet.
//!
//! Every rule carries the network name and container id in its comment, so DEL removes
//! exactly the rules of its own attachment and nothing else, and the rules survive the
//! plugin (which keeps no state). nftables is used when `nft` is on the node; iptables
//! (the reference plugin's only backend) otherwise, or when `ipMasqBackend` asks for it.
//!
//! nftables layout, one table for every network on the node:
//! ```text
//! table inet crust_cni {
//!   chain postrouting { type nat hook postrouting priority srcnat; policy accept;
//!     ip saddr 10.88.0.5 ip daddr != 10.88.0.0/16 ip daddr != 224.0.0.0/4 masquerade comment "name: net id: c1"
//!   }
//! }
//! ```

use cni::{CniError, CniResult};
use ipnetwork::IpNetwork;
use std::io::Write;
use std::path::PathBuf;
use std::process::{Command, Stdio};

pub const NFT_TABLE: &str = "crust_cni";
pub const NFT_CHAIN: &str = "postrouting";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    Nftables,
    Iptables,
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
            None if find_tool("nft").is_some() => Ok(Backend::Nftables),
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

fn run_tool(tool: &str, args: &[&str], stdin: Option<&str>) -> CniResult<String> {
    let path = find_tool(tool)
        .ok_or_else(|| CniError::io(format!("ipMasq needs `{tool}`, which is not installed")))?;
    let mut cmd = Command::new(&path);
    cmd.args(args).stdout(Stdio::piped()).stderr(Stdio::piped());
    cmd.stdin(if stdin.is_some() {
        Stdio::piped()
    } else {
        Stdio::null()
    });
    let mut child = cmd
        .spawn()
        .map_err(|e| CniError::io(format!("failed to run {tool}: {e}")))?;
    if let Some(input) = stdin {
        let mut pipe = child.stdin.take().expect("piped");
        pipe.write_all(input.as_bytes())
            .map_err(|e| CniError::io(format!("writing to {tool}: {e}")))?;
    }
    let out = child
        .wait_with_output()
        .map_err(|e| CniError::io(format!("waiting for {tool}: {e}")))?;
    if !out.status.success() {
        return Err(CniError::io(format!(
            "{tool} {} failed: {}{}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim(),
            stdin
                .map(|s| format!(" (input: {})", s.trim()))
                .unwrap_or_default()
        )));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

fn multicast(net: &IpNetwork) -> &'static str {
    if net.is_ipv4() {
        "224.0.0.0/4"
    } else {
        "ff00::/8"
    }
}

/// Installs masquerading for each address (given with its subnet's prefix).
pub fn setup(
    backend: Backend,
    network: &str,
    container_id: &str,
    ips: &[IpNetwork],
) -> CniResult<()> {
    if ips.is_empty() {
        return Ok(());
    }
    let c = comment(backend, network, container_id);
    match backend {
        Backend::Nftables => {
            let mut rules = String::new();
            for ip in ips {
                let fam = if ip.is_ipv4() { "ip" } else { "ip6" };
                let subnet = crate::ip::network_of(*ip);
                rules.push_str(&format!(
                    "add rule inet {NFT_TABLE} {NFT_CHAIN} {fam} saddr {} {fam} daddr != {subnet} {fam} daddr != {} masquerade comment \"{c}\"\n",
                    ip.ip(),
                    multicast(ip)
                ));
            }
            // Re-adding an existing table and chain costs a slow commit on every ADD, so
            // add just the rules and create the table only when it is missing.
            match run_tool("nft", &["-f", "-"], Some(&rules)) {
                Ok(_) => Ok(()),
                Err(e) if e.msg.contains("No such file or directory") => {
                    let script = format!(
                        "add table inet {NFT_TABLE}\n\
                         add chain inet {NFT_TABLE} {NFT_CHAIN} {{ type nat hook postrouting priority srcnat ; policy accept ; }}\n{rules}"
                    );
                    run_tool("nft", &["-f", "-"], Some(&script)).map(|_| ())
                }
                Err(e) => Err(e),
            }
        }
        Backend::Iptables => {
            let chain = iptables_chain(network, container_id);
            for ip in ips {
                let tool = if ip.is_ipv4() {
                    "iptables"
                } else {
                    "ip6tables"
                };
                let subnet = crate::ip::network_of(*ip).to_string();
                let host = format!("{}/{}", ip.ip(), if ip.is_ipv4() { 32 } else { 128 });
                // -N fails if the chain exists (a second address of the same family): fine.
                let _ = run_tool(tool, &["-w", "-t", "nat", "-N", &chain], None);
                run_tool(
                    tool,
                    &[
                        "-w",
                        "-t",
                        "nat",
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
                    ],
                    None,
                )?;
                run_tool(
                    tool,
                    &[
                        "-w",
                        "-t",
                        "nat",
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
                    ],
                    None,
                )?;
                run_tool(
                    tool,
                    &[
                        "-w",
                        "-t",
                        "nat",
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
                    ],
                    None,
                )?;
            }
            Ok(())
        }
    }
}

/// Handles of the nftables rules carrying `comment`.
fn nft_handles(c: &str) -> CniResult<Vec<u64>> {
    let listing = match run_tool(
        "nft",
        &["-j", "-a", "list", "chain", "inet", NFT_TABLE, NFT_CHAIN],
        None,
    ) {
        Ok(s) => s,
        // No table or chain: nothing of ours is installed.
        Err(e)
            if e.msg.contains("No such file or directory") || e.msg.contains("does not exist") =>
        {
            return Ok(vec![])
        }
        Err(e) => return Err(e),
    };
    let v: serde_json::Value = serde_json::from_str(&listing)
        .map_err(|e| CniError::io(format!("failed to parse nft listing: {e}")))?;
    Ok(v["nftables"]
        .as_array()
        .map(|items| {
            items
                .iter()
                .filter_map(|i| i.get("rule"))
                .filter(|r| r["comment"].as_str() == Some(c))
                .filter_map(|r| r["handle"].as_u64())
                .collect()
        })
        .unwrap_or_default())
}

/// Removes every masquerade rule of the attachment; nothing installed is not an error.
pub fn teardown(backend: Backend, network: &str, container_id: &str) -> CniResult<()> {
    let c = comment(backend, network, container_id);
    match backend {
        Backend::Nftables => {
            if find_tool("nft").is_none() {
                return Ok(());
            }
            let handles = nft_handles(&c)?;
            if handles.is_empty() {
                return Ok(());
            }
            let script: String = handles
                .iter()
                .map(|h| format!("delete rule inet {NFT_TABLE} {NFT_CHAIN} handle {h}\n"))
                .collect();
            run_tool("nft", &["-f", "-"], Some(&script)).map(|_| ())
        }
        Backend::Iptables => {
            let chain = iptables_chain(network, container_id);
            for tool in ["iptables", "ip6tables"] {
                if find_tool(tool).is_none() {
                    continue;
                }
                let rules = run_tool(tool, &["-w", "-t", "nat", "-S", "POSTROUTING"], None)?;
                for line in rules
                    .lines()
                    .filter(|l| l.ends_with(&format!("-j {chain}")))
                {
                    let spec: Vec<String> = shell_words(line.trim_start_matches("-A POSTROUTING"));
                    let mut args = vec!["-w", "-t", "nat", "-D", "POSTROUTING"];
                    args.extend(spec.iter().map(String::as_str));
                    run_tool(tool, &args, None)?;
                }
                let _ = run_tool(tool, &["-w", "-t", "nat", "-F", &chain], None);
                let _ = run_tool(tool, &["-w", "-t", "nat", "-X", &chain], None);
            }
            Ok(())
        }
    }
}

/// Whether the attachment's masquerade rules are installed (for CHECK).
pub fn present(backend: Backend, network: &str, container_id: &str) -> CniResult<bool> {
    let c = comment(backend, network, container_id);
    match backend {
        Backend::Nftables => Ok(!nft_handles(&c)?.is_empty()),
        Backend::Iptables => {
            let chain = iptables_chain(network, container_id);
            let rules = run_tool("iptables", &["-w", "-t", "nat", "-S", "POSTROUTING"], None)?
                + &run_tool("ip6tables", &["-w", "-t", "nat", "-S", "POSTROUTING"], None)
                    .unwrap_or_default();
            Ok(rules.lines().any(|l| l.ends_with(&format!("-j {chain}"))))
        }
    }
}

/// The reference plugin's per-attachment chain name: `CNI-` and the first 24 hex
/// digits of SHA-512 over the network name and container id, so a node that switches
/// plugins finds (and DEL removes) the chains the other one made.
pub fn iptables_chain(network: &str, container_id: &str) -> String {
    use sha2::{Digest, Sha512};
    let digest = Sha512::digest(format!("{network}{container_id}").as_bytes());
    let hex: String = digest.iter().map(|b| format!("{b:02x}")).collect();
    format!("CNI-{}", &hex[..24])
}

/// Splits an `iptables -S` line into arguments, honouring double quotes.
fn shell_words(s: &str) -> Vec<String> {
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
