//! The pod network through CNI: which configuration is current, ADD and DEL with the
//! Kubernetes arguments and capabilities, and the pod IPs of a result.

use crate::cri::error::{Error, Result};
use crate::sandboxes::store::NetworkRef;
use cni::runtime::{CniRuntime, NetworkList, RuntimeConf};
use cni::AddResult;
use serde_json::{json, Map, Value};
use std::path::{Path, PathBuf};

pub struct Network {
    pub conf_dir: PathBuf,
    pub runtime: CniRuntime,
    pub ifname: String,
}

impl Network {
    /// The first valid configuration list of the folder, or why there is none (the
    /// reason `Status` reports while NetworkReady is false).
    pub fn current(&self) -> std::result::Result<NetworkList, String> {
        match cni::runtime::load_first(&self.conf_dir) {
            Ok(Some(l)) => Ok(l),
            Ok(None) => Err(format!(
                "cni config uninitialized: no network config found in {}",
                self.conf_dir.display()
            )),
            Err(e) => Err(format!("cni config uninitialized: {}", e.msg)),
        }
    }

    /// What ADD will run with, recorded before it runs.
    pub fn attachment(
        &self,
        sandbox_id: &str,
        cfg: &cri_api::PodSandboxConfig,
    ) -> Result<NetworkRef> {
        let list = self.current().map_err(Error::FailedPrecondition)?;
        let conf = std::fs::read_to_string(&list.source).map_err(|e| {
            Error::FailedPrecondition(format!("reading CNI config {}: {e}", list.source.display()))
        })?;
        let md = cfg.metadata.clone().unwrap_or_default();
        Ok(NetworkRef {
            conf_path: list.source.clone(),
            conf,
            args: vec![
                ("IgnoreUnknown".into(), "1".into()),
                ("K8S_POD_NAMESPACE".into(), md.namespace.clone()),
                ("K8S_POD_NAME".into(), md.name.clone()),
                ("K8S_POD_INFRA_CONTAINER_ID".into(), sandbox_id.to_string()),
                ("K8S_POD_UID".into(), md.uid.clone()),
            ],
            capability_args: capability_args(cfg)?,
            ifname: self.ifname.clone(),
            result: None,
            torn_down: false,
        })
    }

    fn list_of(net: &NetworkRef) -> Result<NetworkList> {
        NetworkList::parse(net.conf.as_bytes(), &net.conf_path).map_err(Error::from)
    }

    fn rt_conf(net: &NetworkRef, sandbox_id: &str, netns: Option<&Path>) -> RuntimeConf {
        RuntimeConf {
            container_id: sandbox_id.to_string(),
            netns: netns.map(|p| p.display().to_string()).unwrap_or_default(),
            ifname: net.ifname.clone(),
            args: net.args.clone(),
            capability_args: net.capability_args.clone(),
        }
    }

    pub fn add(&self, net: &NetworkRef, sandbox_id: &str, netns: &Path) -> Result<AddResult> {
        let list = Self::list_of(net)?;
        self.runtime
            .add(&list, &Self::rt_conf(net, sandbox_id, Some(netns)))
            .map_err(|e| {
                Error::Internal(format!(
                    "failed to set up pod network (CNI ADD of network {:?}): {e}",
                    list.name
                ))
            })
    }

    /// DEL; a namespace that is already gone is passed as empty, as the spec allows.
    pub fn del(&self, net: &NetworkRef, sandbox_id: &str, netns: Option<&Path>) -> Result<()> {
        let list = Self::list_of(net)?;
        let netns = netns.filter(|p| p.exists());
        self.runtime
            .del(&list, &Self::rt_conf(net, sandbox_id, netns))
            .map_err(|e| {
                Error::Internal(format!(
                    "failed to tear down pod network (CNI DEL of network {:?}): {e}",
                    list.name
                ))
            })
    }
}

/// Pod IPs, primary first: the first IPv4 address if there is one (as containerd
/// picks), then the others in the order the plugins gave them.
pub fn pod_ips(r: &AddResult) -> Vec<String> {
    let all: Vec<String> = r.ips.iter().map(|i| i.address.ip().to_string()).collect();
    let mut out = Vec::new();
    if let Some(v4) = r.ips.iter().find(|i| i.address.is_ipv4()) {
        out.push(v4.address.ip().to_string());
    }
    for a in all {
        if !out.contains(&a) {
            out.push(a);
        }
    }
    out
}

/// `portMappings` and `bandwidth` from the sandbox config.
fn capability_args(cfg: &cri_api::PodSandboxConfig) -> Result<Map<String, Value>> {
    let mut caps = Map::new();
    let ports: Vec<Value> = cfg
        .port_mappings
        .iter()
        .filter(|p| p.host_port > 0)
        .map(|p| {
            let proto = match cri_api::Protocol::try_from(p.protocol).unwrap_or(cri_api::Protocol::Tcp) {
                cri_api::Protocol::Tcp => "tcp",
                cri_api::Protocol::Udp => "udp",
                cri_api::Protocol::Sctp => "sctp",
            };
            json!({"hostPort": p.host_port, "containerPort": p.container_port, "protocol": proto, "hostIP": p.host_ip})
        })
        .collect();
    if !ports.is_empty() {
        caps.insert("portMappings".into(), Value::Array(ports));
    }
    let mut bw = Map::new();
    for (ann, key) in [
        ("kubernetes.io/ingress-bandwidth", "ingress"),
        ("kubernetes.io/egress-bandwidth", "egress"),
    ] {
        if let Some(q) = cfg.annotations.get(ann) {
            let bits = parse_quantity(q).ok_or_else(|| {
                Error::InvalidArgument(format!("annotation {ann}: invalid quantity {q:?}"))
            })?;
            bw.insert(format!("{key}Rate"), json!(bits));
            // The burst the kubelet's bandwidth shaping has always used: effectively unlimited.
            bw.insert(format!("{key}Burst"), json!(i32::MAX));
        }
    }
    if !bw.is_empty() {
        caps.insert("bandwidth".into(), Value::Object(bw));
    }
    Ok(caps)
}

/// A Kubernetes quantity like `10M`, `1Gi` or `500k` as an integer.
pub fn parse_quantity(q: &str) -> Option<u64> {
    let q = q.trim();
    let split = q
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(q.len());
    let (num, suffix) = q.split_at(split);
    let n: f64 = num.parse().ok()?;
    let mult: f64 = match suffix {
        "" => 1.0,
        "k" => 1e3,
        "M" => 1e6,
        "G" => 1e9,
        "T" => 1e12,
        "P" => 1e15,
        "E" => 1e18,
        "Ki" => 1024.0,
        "Mi" => 1024f64.powi(2),
        "Gi" => 1024f64.powi(3),
        "Ti" => 1024f64.powi(4),
        "Pi" => 1024f64.powi(5),
        "Ei" => 1024f64.powi(6),
        _ => return None,
    };
    let v = n * mult;
    (v.is_finite() && v >= 0.0).then_some(v as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantities() {
        assert_eq!(parse_quantity("10M"), Some(10_000_000));
        assert_eq!(parse_quantity("1Gi"), Some(1 << 30));
        assert_eq!(parse_quantity("1.5k"), Some(1500));
        assert_eq!(parse_quantity("12"), Some(12));
        assert_eq!(parse_quantity("x"), None);
        assert_eq!(parse_quantity("1Q"), None);
    }

    #[test]
    fn capabilities_from_config() {
        let mut cfg = cri_api::PodSandboxConfig::default();
        cfg.port_mappings.push(cri_api::PortMapping {
            protocol: cri_api::Protocol::Udp as i32,
            container_port: 53,
            host_port: 5353,
            host_ip: "127.0.0.1".into(),
        });
        cfg.port_mappings.push(cri_api::PortMapping {
            container_port: 80,
            ..Default::default()
        });
        cfg.annotations
            .insert("kubernetes.io/ingress-bandwidth".into(), "1M".into());
        let caps = capability_args(&cfg).unwrap();
        assert_eq!(
            caps["portMappings"],
            json!([{"hostPort":5353,"containerPort":53,"protocol":"udp","hostIP":"127.0.0.1"}])
        );
        assert_eq!(caps["bandwidth"]["ingressRate"], 1_000_000);
        cfg.annotations
            .insert("kubernetes.io/egress-bandwidth".into(), "fast".into());
        assert!(matches!(
            capability_args(&cfg),
            Err(Error::InvalidArgument(_))
        ));
    }

    #[test]
    fn primary_ip_is_v4() {
        let r: AddResult = serde_json::from_value(json!({"cniVersion":"1.0.0","ips":[{"address":"fd00::5/64"},{"address":"10.0.0.5/24"}]})).unwrap();
        assert_eq!(pod_ips(&r), ["10.0.0.5", "fd00::5"]);
    }
}
