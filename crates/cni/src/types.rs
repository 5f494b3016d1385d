//! Network configuration as the runtime hands it to a plugin, and config lists as
//! operators write them in `/etc/cni/net.d`.

use crate::error::{CniError, CniResult};
use crate::result::AddResult;
use serde::{Deserialize, Deserializer, Serialize};
use serde_json::{Map, Value};
use std::collections::BTreeMap;

/// The fields every plugin configuration shares (spec section "Plugin configuration
/// objects"). Plugin-specific keys stay in `extra` so a plugin can deserialize its own
/// struct from the same bytes.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct NetConf {
    #[serde(rename = "cniVersion", default)]
    pub cni_version: String,
    #[serde(default)]
    pub name: String,
    #[serde(rename = "type", default)]
    pub plugin_type: String,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub capabilities: BTreeMap<String, bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ipam: Option<IpamRef>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dns: Option<crate::result::Dns>,
    #[serde(
        rename = "prevResult",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub prev_result: Option<Value>,
    #[serde(
        rename = "runtimeConfig",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub runtime_config: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub args: Option<Value>,
}

/// Just enough of an `ipam` section to find the plugin; the rest belongs to it.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct IpamRef {
    #[serde(rename = "type", default)]
    pub plugin_type: String,
}

impl NetConf {
    /// Decodes a configuration from stdin, with the spec's codes: 6 when it is not
    /// JSON of the right shape, 7 when required fields are missing, 1 for a version
    /// crust does not speak.
    pub fn parse(bytes: &[u8]) -> CniResult<NetConf> {
        let conf: NetConf = decode(bytes, "network configuration")?;
        conf.validate()?;
        Ok(conf)
    }

    pub fn validate(&self) -> CniResult<()> {
        if self.cni_version.is_empty() {
            return Err(CniError::config("network configuration has no cniVersion"));
        }
        crate::version::check_supported(&self.cni_version)?;
        if self.name.is_empty() {
            return Err(CniError::config("network configuration has no name"));
        }
        if self.plugin_type.is_empty() {
            return Err(CniError::config("network configuration has no type"));
        }
        Ok(())
    }

    /// The previous plugin's result, converted to the current shape.
    pub fn prev_result(&self) -> CniResult<Option<AddResult>> {
        match &self.prev_result {
            None | Some(Value::Null) => Ok(None),
            Some(v) => AddResult::from_value(v.clone()).map(Some),
        }
    }
}

/// Deserializes with code 6 (decoding failure) and a message naming what was read.
pub fn decode<T: serde::de::DeserializeOwned>(bytes: &[u8], what: &str) -> CniResult<T> {
    serde_json::from_slice(bytes)
        .map_err(|e| CniError::decode(format!("failed to decode {what}: {e}")))
}

/// A `.conflist` file: a named chain of plugins sharing one version.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct NetConfList {
    #[serde(rename = "cniVersion", default)]
    pub cni_version: String,
    /// Spec 1.1.0: the versions this list may be run at; the highest supported wins.
    #[serde(rename = "cniVersions", default, skip_serializing_if = "Vec::is_empty")]
    pub cni_versions: Vec<String>,
    #[serde(default)]
    pub name: String,
    #[serde(rename = "disableCheck", default, deserialize_with = "bool_or_string")]
    pub disable_check: bool,
    #[serde(rename = "disableGC", default, deserialize_with = "bool_or_string")]
    pub disable_gc: bool,
    #[serde(default)]
    pub plugins: Vec<Map<String, Value>>,
}

/// Old configs write `"disableCheck": "true"`; libcni accepts both.
fn bool_or_string<'de, D: Deserializer<'de>>(d: D) -> Result<bool, D::Error> {
    match Value::deserialize(d)? {
        Value::Bool(b) => Ok(b),
        Value::String(s) => s
            .parse::<bool>()
            .map_err(|_| serde::de::Error::custom(format!("expected a boolean, got {s:?}"))),
        Value::Null => Ok(false),
        other => Err(serde::de::Error::custom(format!(
            "expected a boolean, got {other}"
        ))),
    }
}

/// The `cni.dev/valid-attachments` entries of a GC request.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Attachment {
    #[serde(rename = "containerID")]
    pub container_id: String,
    #[serde(rename = "ifname")]
    pub ifname: String,
}

/// Key under which GC receives the attachments to keep.
pub const VALID_ATTACHMENTS: &str = "cni.dev/valid-attachments";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_reports_spec_codes() {
        assert_eq!(NetConf::parse(b"{not json").unwrap_err().code, 6);
        assert_eq!(
            NetConf::parse(br#"{"cniVersion":"1.0.0","type":"x"}"#)
                .unwrap_err()
                .code,
            7
        );
        assert_eq!(
            NetConf::parse(br#"{"name":"n","type":"x"}"#)
                .unwrap_err()
                .code,
            7
        );
        assert_eq!(
            NetConf::parse(br#"{"cniVersion":"7.0.0","name":"n","type":"x"}"#)
                .unwrap_err()
                .code,
            1
        );
        assert_eq!(
            NetConf::parse(br#"{"cniVersion":"1.0.0","name":5,"type":"x"}"#)
                .unwrap_err()
                .code,
            6
        );
        let c = NetConf::parse(br#"{"cniVersion":"1.0.0","name":"n","type":"bridge","ipam":{"type":"host-local"},"extra":1}"#)
            .unwrap();
        assert_eq!(c.ipam.unwrap().plugin_type, "host-local");
    }

    #[test]
    fn conflist_accepts_string_booleans() {
        let l: NetConfList = serde_json::from_str(
            r#"{"cniVersion":"1.0.0","name":"n","disableCheck":"true","plugins":[{"type":"bridge"}]}"#,
        )
        .unwrap();
        assert!(l.disable_check);
        assert!(!l.disable_gc);
        assert_eq!(l.plugins.len(), 1);
    }
}
