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
        validate_network_name(&self.name)?;
        if self.plugin_type.is_empty() {
            return Err(CniError::config("network configuration has no type"));
        }
        Ok(())
    }

    /// The previous plugin's result, converted to the current shape.
    pub fn prev_result(&self) -> CniResult<Option<AddResult>> {
        match &self.prev_result {
            None | Some(Value::Null) => Ok(None),
            Some(v) => AddResult::from_value(v.clone())
                .map(Some)
                .map_err(|e| CniError::new(e.code, format!("prevResult: {}", e.msg))),
        }
    }
}

/// libcni's rule for network names (`^[a-zA-Z0-9][a-zA-Z0-9_.-]*$`), which the
/// reference plugins' skeleton enforces with code 7: a name is a folder of host-local
/// and a part of rule comments.
pub fn validate_network_name(name: &str) -> CniResult<()> {
    let ok = name
        .as_bytes()
        .first()
        .is_some_and(|b| b.is_ascii_alphanumeric())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'.' || b == b'-');
    if ok {
        Ok(())
    } else {
        Err(CniError::config(format!(
            "invalid characters found in network name {name:?} (letters, digits, '_', '.', '-'; a letter or digit first)"
        )))
    }
}

/// Deserializes with code 6 (decoding failure) and a message naming what was read.
/// A wrong type or value names the key it was under (`... (key "subnet")`), so the
/// message says which field is wrong.
pub fn decode<T: serde::de::DeserializeOwned>(bytes: &[u8], what: &str) -> CniResult<T> {
    serde_json::from_slice(bytes).map_err(|e| {
        let key = match e.classify() {
            serde_json::error::Category::Data => key_before(bytes, e.line(), e.column()),
            _ => None,
        };
        match key {
            Some(k) => CniError::decode(format!("failed to decode {what}: {e} (key {k:?})")),
            None => CniError::decode(format!("failed to decode {what}: {e}")),
        }
    })
}

/// The last object key opened before `line`:`column` (1-based, as serde_json reports
/// them) in JSON text: a small scan that skips strings, so a `:` inside a value (an
/// IPv6 address) is not taken for one.
fn key_before(bytes: &[u8], line: usize, column: usize) -> Option<String> {
    let mut end = 0;
    let mut l = 1;
    for (i, &b) in bytes.iter().enumerate() {
        if l == line {
            end = (i + column).min(bytes.len());
            break;
        }
        if b == b'\n' {
            l += 1;
        }
    }
    let text = &bytes[..end];
    let (mut key, mut last_string) = (None, None::<(usize, usize)>);
    let mut i = 0;
    while i < text.len() {
        match text[i] {
            b'"' => {
                let start = i + 1;
                i += 1;
                while i < text.len() && text[i] != b'"' {
                    i += if text[i] == b'\\' { 2 } else { 1 };
                }
                last_string = Some((start, i.min(text.len())));
            }
            b':' => {
                if let Some((s, e)) = last_string.take() {
                    key = Some(String::from_utf8_lossy(&text[s..e]).into_owned());
                }
            }
            b' ' | b'\t' | b'\r' | b'\n' => {}
            _ => last_string = None,
        }
        i += 1;
    }
    key
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

#[cfg(test)]
mod decode_tests {
    use super::*;

    #[derive(Debug, Deserialize)]
    #[allow(dead_code)]
    struct T {
        a: String,
        b: Vec<u32>,
    }

    #[test]
    fn errors_name_the_key() {
        let e = decode::<T>(br#"{"a": "x:y", "b": "fd00::1"}"#, "t").unwrap_err();
        assert!(e.msg.ends_with(r#"(key "b")"#), "{}", e.msg);
        let e = decode::<T>(b"{\"a\": 5,\n \"b\": []}", "t").unwrap_err();
        assert!(e.msg.ends_with(r#"(key "a")"#), "{}", e.msg);
        let e = decode::<T>(br#"{"a": "x", "#, "t").unwrap_err();
        assert!(!e.msg.contains("key"), "{}", e.msg);
    }
}
