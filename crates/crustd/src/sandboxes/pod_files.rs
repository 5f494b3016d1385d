//! The files a pod's containers get mounted: `/etc/hostname`, `/etc/hosts` and
//! `/etc/resolv.conf`, written beside the sandbox record.

use crate::cri::error::{Error, Result};
use crate::daemon::util::write_replace;
use std::path::{Path, PathBuf};

pub struct PodFiles {
    pub hostname: PathBuf,
    pub hosts: PathBuf,
    pub resolv_conf: PathBuf,
}

impl PodFiles {
    pub fn in_dir(dir: &Path) -> PodFiles {
        PodFiles {
            hostname: dir.join("hostname"),
            hosts: dir.join("hosts"),
            resolv_conf: dir.join("resolv.conf"),
        }
    }
}

/// resolv.conf from the pod's DNS config; with none, the node's own (the kubelet's
/// `Default` DNS policy arrives as an empty config).
pub fn resolv_conf(dns: Option<&cri_api::DnsConfig>, host_resolv: &Path) -> Result<String> {
    match dns {
        Some(d) if !d.servers.is_empty() || !d.searches.is_empty() || !d.options.is_empty() => {
            let mut s = String::new();
            if !d.searches.is_empty() {
                s.push_str(&format!("search {}\n", d.searches.join(" ")));
            }
            for ns in &d.servers {
                s.push_str(&format!("nameserver {ns}\n"));
            }
            if !d.options.is_empty() {
                s.push_str(&format!("options {}\n", d.options.join(" ")));
            }
            Ok(s)
        }
        _ => std::fs::read_to_string(host_resolv).or_else(|e| {
            if e.kind() == std::io::ErrorKind::NotFound {
                Ok(String::new())
            } else {
                Err(Error::Internal(format!(
                    "reading {}: {e}",
                    host_resolv.display()
                )))
            }
        }),
    }
}

/// /etc/hosts: localhost entries and the pod's own name on its address.
pub fn hosts(hostname: &str, ip: Option<&str>) -> String {
    let mut s = String::from(
        "# Kubernetes-managed hosts file (crust).\n\
         127.0.0.1\tlocalhost\n\
         ::1\tlocalhost ip6-localhost ip6-loopback\n\
         fe00::0\tip6-localnet\n\
         fe00::0\tip6-mcastprefix\n\
         fe00::1\tip6-allnodes\n\
         fe00::2\tip6-allrouters\n",
    );
    if let Some(ip) = ip {
        if !hostname.is_empty() {
            s.push_str(&format!("{ip}\t{hostname}\n"));
        }
    }
    s
}

/// Written atomically but not synced: the kubelet makes a new sandbox after a reboot
/// anyway, and these are made again from its config (containerd does not sync them
/// either).
pub fn write(files: &PodFiles, hostname: &str, hosts_text: &str, resolv: &str) -> Result<()> {
    let w = |p: &Path, t: &str| {
        write_replace(p, t.as_bytes())
            .map_err(|e| Error::Internal(format!("writing {}: {e}", p.display())))
    };
    w(&files.hostname, &format!("{hostname}\n"))?;
    w(&files.hosts, hosts_text)?;
    w(&files.resolv_conf, resolv)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resolv_from_config_or_host() {
        let d = cri_api::DnsConfig {
            servers: vec!["10.96.0.10".into()],
            searches: vec!["ns.svc.cluster.local".into(), "svc.cluster.local".into()],
            options: vec!["ndots:5".into()],
        };
        assert_eq!(
            resolv_conf(Some(&d), Path::new("/nonexistent")).unwrap(),
            "search ns.svc.cluster.local svc.cluster.local\nnameserver 10.96.0.10\noptions ndots:5\n"
        );
        let host = std::env::temp_dir().join(format!("resolv-{}", std::process::id()));
        std::fs::write(&host, "nameserver 1.2.3.4\n").unwrap();
        assert_eq!(resolv_conf(None, &host).unwrap(), "nameserver 1.2.3.4\n");
        assert_eq!(
            resolv_conf(Some(&cri_api::DnsConfig::default()), &host).unwrap(),
            "nameserver 1.2.3.4\n"
        );
        std::fs::remove_file(host).unwrap();
    }

    #[test]
    fn hosts_has_the_pod() {
        let h = hosts("web-0", Some("10.1.0.5"));
        assert!(h.contains("127.0.0.1\tlocalhost\n"));
        assert!(h.ends_with("10.1.0.5\tweb-0\n"));
        assert!(!hosts("web-0", None).contains("web-0"));
    }
}
