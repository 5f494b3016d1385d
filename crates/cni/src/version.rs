//! CNI spec versions: which ones crust speaks, parsing and ordering them.

use crate::error::{code, CniError, CniResult};
use serde::{Deserialize, Serialize};
use std::cmp::Ordering;

/// The newest spec version; results are built in this shape and converted down.
pub const CURRENT: &str = "1.1.0";

/// Every version whose configuration and result crust reads and writes.
pub const SUPPORTED: &[&str] = &["0.3.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0"];

/// A parsed `major.minor.patch`; missing parts count as zero, as in libcni.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Version(pub u32, pub u32, pub u32);

impl Version {
    pub fn parse(s: &str) -> CniResult<Version> {
        let bad = || {
            CniError::new(
                code::INCOMPATIBLE_VERSION,
                format!("invalid version {s:?}: expected major.minor.patch"),
            )
        };
        if s.is_empty() {
            return Err(bad());
        }
        let mut parts = [0u32; 3];
        for (n, p) in s.split('.').enumerate() {
            if n == 3 || p.is_empty() || !p.bytes().all(|b| b.is_ascii_digit()) {
                return Err(bad());
            }
            parts[n] = p.parse().map_err(|_| bad())?;
        }
        Ok(Version(parts[0], parts[1], parts[2]))
    }

    /// Results from 1.0.0 on drop the per-IP `version` field.
    pub fn is_v1(self) -> bool {
        self >= Version(1, 0, 0)
    }
}

/// Orders two version strings; unparsable ones sort first.
pub fn compare(a: &str, b: &str) -> Ordering {
    match (Version::parse(a), Version::parse(b)) {
        (Ok(a), Ok(b)) => a.cmp(&b),
        (Err(_), Ok(_)) => Ordering::Less,
        (Ok(_), Err(_)) => Ordering::Greater,
        (Err(_), Err(_)) => Ordering::Equal,
    }
}

/// Fails with code 1 unless `v` is one crust supports.
pub fn check_supported(v: &str) -> CniResult<()> {
    if SUPPORTED.contains(&v) {
        return Ok(());
    }
    Err(CniError::new(
        code::INCOMPATIBLE_VERSION,
        format!(
            "incompatible CNI versions: config is {v:?}, plugin supports {:?}",
            SUPPORTED
        ),
    ))
}

/// The answer to `CNI_COMMAND=VERSION`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct VersionInfo {
    #[serde(rename = "cniVersion")]
    pub cni_version: String,
    #[serde(rename = "supportedVersions", default)]
    pub supported_versions: Vec<String>,
}

impl VersionInfo {
    pub fn ours() -> Self {
        VersionInfo {
            cni_version: CURRENT.to_string(),
            supported_versions: SUPPORTED.iter().map(|s| s.to_string()).collect(),
        }
    }

    pub fn supports(&self, v: &str) -> bool {
        self.supported_versions.iter().any(|s| s == v)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_orders() {
        assert_eq!(Version::parse("1.1.0").unwrap(), Version(1, 1, 0));
        assert_eq!(Version::parse("0.4").unwrap(), Version(0, 4, 0));
        assert!(Version::parse("1.x").is_err());
        assert!(Version::parse("").is_err());
        assert!(Version::parse("1.2.3.4").is_err());
        assert_eq!(compare("0.3.1", "0.4.0"), Ordering::Less);
        assert_eq!(compare("1.0.0", "0.4.0"), Ordering::Greater);
        assert!(Version::parse("1.0.0").unwrap().is_v1());
        assert!(!Version::parse("0.4.0").unwrap().is_v1());
    }

    #[test]
    fn unsupported_is_code_1() {
        assert!(check_supported("1.0.0").is_ok());
        assert_eq!(check_supported("9.9.9").unwrap_err().code, 1);
        assert_eq!(check_supported("0.2.0").unwrap_err().code, 1);
    }
}
