//! The bridge plugin's configuration, as the reference plugin reads it.

use cni::{CniError, CniResult, Dns};
use serde::Deserialize;

#[derive(Debug, Clone, Deserialize)]
pub struct BridgeConf {
    #[serde(default = "default_bridge")]
    pub bridge: String,
    #[serde(rename = "isGateway", default)]
    pub is_gateway: bool,
    #[serde(rename = "isDefaultGateway", default)]
    pub is_default_gateway: bool,
    #[serde(rename = "forceAddress", default)]
    pub force_address: bool,
    #[serde(rename = "ipMasq", default)]
    pub ip_masq: bool,
    #[serde(rename = "ipMasqBackend", default)]
    pub ip_masq_backend: Option<String>,
    #[serde(default)]
    pub mtu: Option<u32>,
    #[serde(rename = "hairpinMode", default)]
    pub hairpin_mode: bool,
    #[serde(rename = "promiscMode", default)]
    pub promisc_mode: bool,
    #[serde(default)]
    pub vlan: Option<u32>,
    #[serde(rename = "preserveDefaultVlan", default = "yes")]
    pub preserve_default_vlan: bool,
    /// VLANs the pod's port carries tagged: `{"id": N}` or `{"minID": A, "maxID": B}`.
    #[serde(rename = "vlanTrunk", default)]
    pub vlan_trunk: Vec<TrunkItem>,
    /// `vlanTrunk` as sorted, distinct VLAN ids (filled by `parse`).
    #[serde(skip)]
    pub trunk_vids: Vec<u16>,
    #[serde(default)]
    pub macspoofchk: bool,
    #[serde(default)]
    pub enabledad: bool,
    /// The host end of the veth is an isolated bridge port: pods on isolated ports
    /// reach the bridge and non-isolated ports, not each other.
    #[serde(rename = "portIsolation", default)]
    pub port_isolation: bool,
    /// The pod's end is left down (and, having no use for addresses, IPAM refused).
    #[serde(rename = "disableContainerInterface", default)]
    pub disable_container_interface: bool,
    #[serde(default)]
    pub dns: Option<Dns>,
    #[serde(rename = "runtimeConfig", default)]
    pub runtime_config: Option<MacHolder>,
    #[serde(default)]
    pub args: Option<ArgsHolder>,
    /// Only its shape is checked here (an object, as the reference decodes it); CHECK
    /// reads it through the skeleton.
    #[serde(rename = "prevResult", default)]
    pub prev_result: Option<serde_json::Map<String, serde_json::Value>>,
}

#[derive(Debug, Clone, Default, Deserialize)]
pub struct TrunkItem {
    #[serde(rename = "minID", default)]
    pub min_id: Option<i64>,
    #[serde(rename = "maxID", default)]
    pub max_id: Option<i64>,
    #[serde(default)]
    pub id: Option<i64>,
}

/// The VLAN ids of a `vlanTrunk`, sorted and distinct; each id in 1..=4094, a range
/// given by both ends, low end first (the reference plugin's rules).
fn trunk_vids(items: &[TrunkItem]) -> CniResult<Vec<u16>> {
    let valid = |v: i64, what: &str| -> CniResult<u16> {
        if (1..=4094).contains(&v) {
            Ok(v as u16)
        } else {
            Err(CniError::config(format!(
                "vlanTrunk: {what} {v} is not a VLAN id (1 to 4094)"
            )))
        }
    };
    let mut out = std::collections::BTreeSet::new();
    for item in items {
        match (item.min_id, item.max_id) {
            (Some(lo), Some(hi)) => {
                let (lo, hi) = (valid(lo, "minID")?, valid(hi, "maxID")?);
                if hi < lo {
                    return Err(CniError::config(format!(
                        "vlanTrunk: minID {lo} is greater than maxID {hi}"
                    )));
                }
                out.extend(lo..=hi);
            }
            (Some(_), None) => {
                return Err(CniError::config("vlanTrunk: minID without maxID"));
            }
            (None, Some(_)) => {
                return Err(CniError::config("vlanTrunk: maxID without minID"));
            }
            (None, None) => {}
        }
        if let Some(id) = item.id {
            out.insert(valid(id, "id")?);
        }
    }
    Ok(out.into_iter().collect())
}

#[derive(Debug, Clone, Default, Deserialize)]
pub struct MacHolder {
    #[serde(default)]
    pub mac: Option<String>,
}

#[derive(Debug, Clone, Default, Deserialize)]
pub struct ArgsHolder {
    #[serde(default)]
    pub cni: Option<MacHolder>,
}

fn default_bridge() -> String {
    "cni0".to_string()
}

fn yes() -> bool {
    true
}

impl BridgeConf {
    pub fn parse(stdin: &[u8]) -> CniResult<BridgeConf> {
        let mut c: BridgeConf = cni::types::decode(stdin, "bridge configuration")?;
        if c.is_default_gateway {
            c.is_gateway = true;
        }

        cni::skeleton::validate_ifname(&c.bridge)
            .map_err(|e| CniError::config(format!("invalid bridge name: {}", e.msg)))?;
        if let Some(v) = c.vlan {
            if v > 4094 {
                return Err(CniError::config(format!(
                    "invalid VLAN ID {v} (must be between 0 and 4094)"
                )));
            }
        }
        c.trunk_vids = trunk_vids(&c.vlan_trunk)?;
        if c.vlan().is_some() && !c.trunk_vids.is_empty() {
            return Err(CniError::config(
                "cannot set vlan and vlanTrunk at the same time",
            ));
        }
        if c.mtu == Some(0) {
            c.mtu = None;
        }
        if let Some(m) = c.mtu {
            if !(68..=65535).contains(&m) {
                return Err(CniError::config(format!("invalid mtu {m}")));
            }
        }
        Ok(c)
    }

    pub fn vlan(&self) -> Option<u16> {
        self.vlan.filter(|v| *v != 0).map(|v| v as u16)
    }

    /// The MAC the runtime asked for: the `mac` capability, then `args.cni.mac`, then `CNI_ARGS` `MAC=`.
    pub fn requested_mac(&self, cni_args: &[(String, String)]) -> CniResult<Option<Vec<u8>>> {
        let s = self
            .runtime_config
            .as_ref()
            .and_then(|r| r.mac.clone())
            .or_else(|| {
                self.args
                    .as_ref()
                    .and_then(|a| a.cni.as_ref())
                    .and_then(|c| c.mac.clone())
            })
            .or_else(|| {
                cni_args
                    .iter()
                    .find(|(k, _)| k == "MAC")
                    .map(|(_, v)| v.clone())
            });
        match s {
            None => Ok(None),
            Some(s) => crate::netlink::parse_mac(&s)
                .map(Some)
                .ok_or_else(|| CniError::config(format!("invalid MAC address {s:?}"))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn vlan_trunk_ids_and_ranges() {
        let c = BridgeConf::parse(
            br#"{"cniVersion":"1.0.0","name":"n","type":"bridge",
                "vlanTrunk":[{"id":101},{"minID":200,"maxID":202},{"id":201},{"minID":5,"maxID":5}]}"#,
        )
        .unwrap();
        assert_eq!(c.trunk_vids, [5, 101, 200, 201, 202]);
        for bad in [
            r#"[{"id":0}]"#,
            r#"[{"id":4095}]"#,
            r#"[{"minID":3,"maxID":2}]"#,
            r#"[{"maxID":2}]"#,
        ] {
            let conf =
                format!(r#"{{"cniVersion":"1.0.0","name":"n","type":"bridge","vlanTrunk":{bad}}}"#);
            assert_eq!(
                BridgeConf::parse(conf.as_bytes()).unwrap_err().code,
                7,
                "{bad}"
            );
        }
        let both =
            br#"{"cniVersion":"1.0.0","name":"n","type":"bridge","vlan":4,"vlanTrunk":[{"id":5}]}"#;
        assert_eq!(BridgeConf::parse(both).unwrap_err().code, 7);
    }

    #[test]
    fn defaults_and_validation() {
        let c = BridgeConf::parse(br#"{"isDefaultGateway":true}"#).unwrap();
        assert_eq!(c.bridge, "cni0");
        assert!(c.is_gateway);
        assert!(c.preserve_default_vlan);
        assert_eq!(c.vlan(), None);
        assert_eq!(BridgeConf::parse(br#"{"vlan":5000}"#).unwrap_err().code, 7);
        assert_eq!(
            BridgeConf::parse(br#"{"bridge":"a-name-longer-than-15"}"#)
                .unwrap_err()
                .code,
            7
        );
        assert_eq!(BridgeConf::parse(br#"{"mtu":"x"}"#).unwrap_err().code, 6);
        assert_eq!(BridgeConf::parse(br#"{"mtu":10}"#).unwrap_err().code, 7);
    }

    #[test]
    fn mac_sources() {
        let c = BridgeConf::parse(br#"{"runtimeConfig":{"mac":"02:00:00:00:00:01"}}"#).unwrap();
        assert_eq!(
            c.requested_mac(&[]).unwrap().unwrap(),
            vec![2, 0, 0, 0, 0, 1]
        );
        let c = BridgeConf::parse(br#"{}"#).unwrap();
        assert_eq!(
            c.requested_mac(&[("MAC".into(), "02:00:00:00:00:02".into())])
                .unwrap()
                .unwrap()[5],
            2
        );
        assert_eq!(
            c.requested_mac(&[("MAC".into(), "nope".into())])
                .unwrap_err()
                .code,
            7
        );
        assert!(c.requested_mac(&[]).unwrap().is_none());
    }
}
