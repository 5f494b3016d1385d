//! The success result of ADD, in the shape of the newest spec, and its conversion to
//! and from every older version crust supports.
//!
//! Versions differ only in a few fields: 0.3.x/0.4.0 tag every IP with `"version": "4"`
//! or `"6"`; 1.1.0 adds `mtu`, `socketPath` and `pciID` to interfaces and
//! `mtu`, `advmss`, `priority`, `table` and `scope` to routes. So one struct holds the
//! newest shape and serialization patches the JSON for the version asked for.

use crate::error::{CniError, CniResult};
use crate::version::Version;
use ipnetwork::IpNetwork;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::net::IpAddr;

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct AddResult {
    #[serde(rename = "cniVersion", default)]
    pub cni_version: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub interfaces: Vec<Interface>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ips: Vec<IpConfig>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub routes: Vec<Route>,
    #[serde(default)]
    pub dns: Dns,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Interface {
    pub name: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub mac: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mtu: Option<u32>,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub sandbox: String,
    #[serde(
        rename = "socketPath",
        default,
        skip_serializing_if = "String::is_empty"
    )]
    pub socket_path: String,
    #[serde(rename = "pciID", default, skip_serializing_if = "String::is_empty")]
    pub pci_id: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct IpConfig {
    /// Index into `interfaces` of the interface this address sits on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub interface: Option<usize>,
    /// The address with the prefix length of its subnet, e.g. `10.1.0.5/16`.
    pub address: IpNetwork,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gateway: Option<IpAddr>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Route {
    pub dst: IpNetwork,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gw: Option<IpAddr>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mtu: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub advmss: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub table: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scope: Option<u32>,
}

impl Route {
    pub fn new(dst: IpNetwork, gw: Option<IpAddr>) -> Self {
        Route {
            dst,
            gw,
            mtu: None,
            advmss: None,
            priority: None,
            table: None,
            scope: None,
        }
    }
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Dns {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub nameservers: Vec<String>,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub domain: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub search: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub options: Vec<String>,
}

impl Dns {
    pub fn is_empty(&self) -> bool {
        self.nameservers.is_empty()
            && self.domain.is_empty()
            && self.search.is_empty()
            && self.options.is_empty()
    }
}

const V11_INTERFACE_KEYS: &[&str] = &["mtu", "socketPath", "pciID"];
const V11_ROUTE_KEYS: &[&str] = &["mtu", "advmss", "priority", "table", "scope"];

impl AddResult {
    /// Reads a result of any supported version (its own `cniVersion` says which).
    pub fn from_value(v: Value) -> CniResult<AddResult> {
        let version = v
            .get("cniVersion")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string();
        if !version.is_empty() {
            crate::version::check_supported(&version)?;
        }
        let mut r: AddResult = serde_json::from_value(v)
            .map_err(|e| CniError::decode(format!("failed to decode result: {e}")))?;
        r.cni_version = version;
        Ok(r)
    }

    pub fn from_slice(bytes: &[u8]) -> CniResult<AddResult> {
        let v: Value = crate::types::decode(bytes, "result")?;
        Self::from_value(v)
    }

    /// The JSON of this result as a plugin speaking `version` prints it.
    pub fn to_value(&self, version: &str) -> CniResult<Value> {
        crate::version::check_supported(version)?;
        let ver = Version::parse(version)?;
        let mut out = self.clone();
        out.cni_version = version.to_string();
        let mut v = serde_json::to_value(&out).map_err(|e| CniError::internal(e.to_string()))?;
        if ver < Version(1, 1, 0) {
            strip(&mut v, "interfaces", V11_INTERFACE_KEYS);
            strip(&mut v, "routes", V11_ROUTE_KEYS);
        }
        if !ver.is_v1() {
            if let Some(ips) = v.get_mut("ips").and_then(Value::as_array_mut) {
                for (ip, cfg) in ips.iter_mut().zip(&self.ips) {
                    let fam = if cfg.address.is_ipv4() { "4" } else { "6" };
                    ip["version"] = Value::String(fam.into());
                }
            }
        }
        Ok(v)
    }

    pub fn to_json(&self, version: &str) -> CniResult<String> {
        let v = self.to_value(version)?;
        serde_json::to_string_pretty(&v).map_err(|e| CniError::internal(e.to_string()))
    }
}

fn strip(v: &mut Value, list: &str, keys: &[&str]) {
    if let Some(items) = v.get_mut(list).and_then(Value::as_array_mut) {
        for item in items {
            if let Some(obj) = item.as_object_mut() {
                for k in keys {
                    obj.remove(*k);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn sample() -> AddResult {
        AddResult {
            cni_version: "1.1.0".into(),
            interfaces: vec![Interface {
                name: "eth0".into(),
                mac: "aa:bb:cc:dd:ee:ff".into(),
                mtu: Some(1400),
                sandbox: "/run/netns/x".into(),
                ..Default::default()
            }],
            ips: vec![
                IpConfig {
                    interface: Some(0),
                    address: "10.1.0.5/16".parse().unwrap(),
                    gateway: Some("10.1.0.1".parse().unwrap()),
                },
                IpConfig {
                    interface: Some(0),
                    address: "fd00::5/64".parse().unwrap(),
                    gateway: None,
                },
            ],
            routes: vec![Route {
                mtu: Some(1300),
                ..Route::new("0.0.0.0/0".parse().unwrap(), None)
            }],
            dns: Dns::default(),
        }
    }

    #[test]
    fn v110_keeps_new_fields() {
        let v = sample().to_value("1.1.0").unwrap();
        assert_eq!(v["interfaces"][0]["mtu"], 1400);
        assert_eq!(v["routes"][0]["mtu"], 1300);
        assert!(v["ips"][0].get("version").is_none());
        assert_eq!(v["ips"][0]["address"], "10.1.0.5/16");
        assert_eq!(v["dns"], json!({}));
    }

    #[test]
    fn v100_drops_new_fields() {
        let v = sample().to_value("1.0.0").unwrap();
        assert_eq!(v["cniVersion"], "1.0.0");
        assert!(v["interfaces"][0].get("mtu").is_none());
        assert!(v["routes"][0].get("mtu").is_none());
        assert!(v["ips"][1].get("version").is_none());
    }

    #[test]
    fn v04_and_v03_tag_ip_versions() {
        for ver in ["0.3.0", "0.3.1", "0.4.0"] {
            let v = sample().to_value(ver).unwrap();
            assert_eq!(v["cniVersion"], ver);
            assert_eq!(v["ips"][0]["version"], "4");
            assert_eq!(v["ips"][1]["version"], "6");
            assert!(v["interfaces"][0].get("mtu").is_none());
        }
    }

    #[test]
    fn round_trips_through_old_versions() {
        for ver in ["0.3.0", "0.3.1", "0.4.0", "1.0.0"] {
            let back = AddResult::from_value(sample().to_value(ver).unwrap()).unwrap();
            assert_eq!(back.ips, sample().ips);
            assert_eq!(back.interfaces[0].name, "eth0");
            assert_eq!(back.cni_version, ver);
        }
        assert_eq!(
            AddResult::from_value(sample().to_value("1.1.0").unwrap()).unwrap(),
            sample()
        );
    }

    #[test]
    fn rejects_unknown_versions_and_garbage() {
        assert_eq!(sample().to_value("2.0.0").unwrap_err().code, 1);
        assert_eq!(AddResult::from_slice(b"[").unwrap_err().code, 6);
        assert_eq!(
            AddResult::from_value(json!({"cniVersion":"1.0.0","ips":[{"address":"nope"}]}))
                .unwrap_err()
                .code,
            6
        );
    }
}
