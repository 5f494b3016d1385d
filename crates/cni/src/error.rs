//! The CNI error result and its well-known codes.
//!
//! Every failure a plugin reports leaves the process as this JSON on stdout with a
//! non-zero exit, so the codes are chosen here and nowhere else.

use serde::{Deserialize, Serialize};
use std::fmt;

/// Error codes reserved by the CNI specification (section "Error").
pub mod code {
    /// The runtime asked for a version the plugin does not speak.
    pub const INCOMPATIBLE_VERSION: u32 = 1;
    /// A field of the network configuration is not supported.
    pub const UNSUPPORTED_FIELD: u32 = 2;
    /// The container is unknown or does not exist; the runtime needs no cleanup.
    pub const UNKNOWN_CONTAINER: u32 = 3;
    /// A `CNI_*` variable is missing or malformed.
    pub const INVALID_ENVIRONMENT: u32 = 4;
    /// Reading or writing something (files, netlink, the IPAM store) failed.
    pub const IO_FAILURE: u32 = 5;
    /// The configuration or a result could not be decoded.
    pub const DECODING_FAILURE: u32 = 6;
    /// The configuration decodes but is not valid.
    pub const INVALID_NETWORK_CONFIG: u32 = 7;
    /// A transient condition; the runtime may retry.
    pub const TRY_AGAIN_LATER: u32 = 11;
    /// STATUS: the plugin cannot serve ADD now.
    pub const PLUGIN_NOT_AVAILABLE: u32 = 50;
    /// STATUS: not available, and existing attachments may be degraded.
    pub const PLUGIN_NOT_AVAILABLE_LIMITED: u32 = 51;
    /// Not from the spec: an error without a better code, as the reference skeleton uses.
    pub const INTERNAL: u32 = 999;
}

/// The error object of the CNI specification.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
pub struct CniError {
    #[serde(
        rename = "cniVersion",
        default,
        skip_serializing_if = "String::is_empty"
    )]
    pub cni_version: String,
    pub code: u32,
    pub msg: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub details: String,
}

impl CniError {
    pub fn new(code: u32, msg: impl Into<String>) -> Self {
        CniError {
            cni_version: String::new(),
            code,
            msg: msg.into(),
            details: String::new(),
        }
    }

    pub fn with_details(mut self, details: impl Into<String>) -> Self {
        self.details = details.into();
        self
    }

    pub fn io(msg: impl Into<String>) -> Self {
        Self::new(code::IO_FAILURE, msg)
    }

    pub fn config(msg: impl Into<String>) -> Self {
        Self::new(code::INVALID_NETWORK_CONFIG, msg)
    }

    pub fn decode(msg: impl Into<String>) -> Self {
        Self::new(code::DECODING_FAILURE, msg)
    }

    pub fn env(msg: impl Into<String>) -> Self {
        Self::new(code::INVALID_ENVIRONMENT, msg)
    }

    pub fn internal(msg: impl Into<String>) -> Self {
        Self::new(code::INTERNAL, msg)
    }

    /// Prefixes the message with what was being done, keeping the code.
    pub fn context(mut self, what: impl fmt::Display) -> Self {
        self.msg = format!("{what}: {}", self.msg);
        self
    }
}

impl fmt::Display for CniError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.msg)?;
        if !self.details.is_empty() {
            write!(f, "; {}", self.details)?;
        }
        write!(f, " (CNI code {})", self.code)
    }
}

impl From<std::io::Error> for CniError {
    fn from(e: std::io::Error) -> Self {
        CniError::io(e.to_string())
    }
}

pub type CniResult<T> = std::result::Result<T, CniError>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn serializes_like_the_spec() {
        let mut e = CniError::new(code::DECODING_FAILURE, "bad json").with_details("line 1");
        e.cni_version = "1.1.0".into();
        let v = serde_json::to_value(&e).unwrap();
        assert_eq!(
            v,
            serde_json::json!({"cniVersion":"1.1.0","code":6,"msg":"bad json","details":"line 1"})
        );
        let back: CniError = serde_json::from_value(v).unwrap();
        assert_eq!(back, e);
    }

    /// The codes are the spec's (SPEC.md, "Error"; 999 is libcni's ErrInternal).
    #[test]
    fn codes_are_the_specs() {
        let codes = [
            code::INCOMPATIBLE_VERSION,
            code::UNSUPPORTED_FIELD,
            code::UNKNOWN_CONTAINER,
            code::INVALID_ENVIRONMENT,
            code::IO_FAILURE,
            code::DECODING_FAILURE,
            code::INVALID_NETWORK_CONFIG,
            code::TRY_AGAIN_LATER,
            code::PLUGIN_NOT_AVAILABLE,
            code::PLUGIN_NOT_AVAILABLE_LIMITED,
            code::INTERNAL,
        ];
        assert_eq!(codes, [1, 2, 3, 4, 5, 6, 7, 11, 50, 51, 999]);
    }

    #[test]
    fn context_keeps_the_code() {
        let e = CniError::io("permission denied").context("writing /x");
        assert_eq!(e.code, code::IO_FAILURE);
        assert_eq!(e.msg, "writing /x: permission denied");
    }
}
