//! The few fields of indexes, manifests and image configs crust reads, for OCI and
//! Docker schema 2 alike (their JSON differs only in media types).

use crate::error::{Error, Result};
use crate::platform::{self, NodePlatform};
use crate::ImageConfig;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

pub const OCI_INDEX: &str = "application/vnd.oci.image.index.v1+json";
pub const OCI_MANIFEST: &str = "application/vnd.oci.image.manifest.v1+json";
pub const DOCKER_LIST: &str = "application/vnd.docker.distribution.manifest.list.v2+json";
pub const DOCKER_MANIFEST: &str = "application/vnd.docker.distribution.manifest.v2+json";
/// What crust asks registries for.
pub const ACCEPTED: &[&str] = &[OCI_INDEX, OCI_MANIFEST, DOCKER_LIST, DOCKER_MANIFEST];

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Platform {
    #[serde(default)]
    pub os: String,
    #[serde(default)]
    pub architecture: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub variant: Option<String>,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Descriptor {
    #[serde(rename = "mediaType", default)]
    pub media_type: String,
    pub digest: String,
    #[serde(default)]
    pub size: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub platform: Option<Platform>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub annotations: Option<BTreeMap<String, String>>,
}

/// An index, a manifest list, or a manifest: told apart by which lists they carry.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct Manifest {
    #[serde(rename = "schemaVersion", default)]
    pub schema_version: u32,
    #[serde(rename = "mediaType", default)]
    pub media_type: String,
    /// Present in an index / manifest list.
    #[serde(default)]
    pub manifests: Option<Vec<Descriptor>>,
    /// Present in an image manifest.
    #[serde(default)]
    pub config: Option<Descriptor>,
    #[serde(default)]
    pub layers: Vec<Descriptor>,
}

impl Manifest {
    pub fn parse(data: &[u8], what: &str) -> Result<Manifest> {
        let m: Manifest = serde_json::from_slice(data).map_err(|e| {
            Error::InvalidArgument(format!("{what}: manifest is not valid JSON: {e}"))
        })?;
        if m.schema_version != 2 {
            return Err(Error::InvalidArgument(format!(
                "{what}: unsupported manifest schema version {} (only 2)",
                m.schema_version
            )));
        }
        if m.manifests.is_none() && m.config.is_none() {
            return Err(Error::InvalidArgument(format!(
                "{what}: neither an index nor an image manifest (media type {:?})",
                m.media_type
            )));
        }
        Ok(m)
    }

    pub fn is_index(&self) -> bool {
        self.manifests.is_some()
    }

    /// The index entry for this node's platform (attestations and other platforms
    /// skipped; see `platform` for which entry fits best).
    pub fn pick_platform(&self, what: &str) -> Result<&Descriptor> {
        self.pick_platform_for(&platform::node(), what)
    }

    /// The index entry that fits `node` best.
    pub fn pick_platform_for(&self, node: &NodePlatform, what: &str) -> Result<&Descriptor> {
        let list = self.manifests.as_deref().unwrap_or_default();
        let with: Vec<(&Descriptor, &Platform)> = list
            .iter()
            .filter_map(|d| Some((d, d.platform.as_ref()?)))
            .collect();
        match node.choose(with.iter().map(|(_, p)| *p)) {
            Some(i) => Ok(with[i].0),
            None => {
                let have: Vec<String> = with
                    .iter()
                    .map(|(_, p)| match p.variant.as_deref() {
                        Some(v) if !v.is_empty() => format!("{}/{}/{v}", p.os, p.architecture),
                        _ => format!("{}/{}", p.os, p.architecture),
                    })
                    .collect();
                Err(Error::FailedPrecondition(format!(
                    "{what}: no manifest for {node} (the index has {})",
                    if have.is_empty() {
                        "none".to_string()
                    } else {
                        have.join(", ")
                    }
                )))
            }
        }
    }
}

/// The image config blob.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct ConfigBlob {
    #[serde(default)]
    pub architecture: String,
    #[serde(default)]
    pub os: String,
    #[serde(default)]
    pub config: Option<ContainerConfig>,
    pub rootfs: RootFs,
}

#[derive(Debug, Clone, Default, Deserialize)]
pub struct RootFs {
    #[serde(default)]
    pub diff_ids: Vec<String>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct ContainerConfig {
    #[serde(default)]
    pub entrypoint: Option<Vec<String>>,
    #[serde(default)]
    pub cmd: Option<Vec<String>>,
    #[serde(default)]
    pub env: Option<Vec<String>>,
    #[serde(default)]
    pub working_dir: Option<String>,
    #[serde(default)]
    pub user: Option<String>,
    #[serde(default)]
    pub stop_signal: Option<String>,
    #[serde(default)]
    pub labels: Option<BTreeMap<String, String>>,
}

impl ConfigBlob {
    pub fn parse(data: &[u8], what: &str) -> Result<ConfigBlob> {
        serde_json::from_slice(data)
            .map_err(|e| Error::InvalidArgument(format!("{what}: image config is not valid: {e}")))
    }

    /// Refuses an image built for another OS or architecture than this node's.
    pub fn check_platform(&self, what: &str) -> Result<()> {
        let node = platform::node();
        let os_ok = self.os.is_empty() || self.os == node.os;
        let arch_ok = self.architecture.is_empty() || self.architecture == node.architecture;
        if !(os_ok && arch_ok) {
            return Err(Error::FailedPrecondition(format!(
                "{what}: the image is for {}/{}, this node is {}/{}",
                self.os, self.architecture, node.os, node.architecture
            )));
        }
        Ok(())
    }

    pub fn image_config(&self) -> ImageConfig {
        let c = self.config.clone().unwrap_or_default();
        ImageConfig {
            entrypoint: c.entrypoint.unwrap_or_default(),
            cmd: c.cmd.unwrap_or_default(),
            env: c.env.unwrap_or_default(),
            working_dir: c.working_dir.unwrap_or_default(),
            user: c.user.unwrap_or_default(),
            stop_signal: c.stop_signal.unwrap_or_default(),
            labels: c.labels.unwrap_or_default(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn picks_linux_amd64() {
        let idx = br#"{"schemaVersion":2,"mediaType":"application/vnd.oci.image.index.v1+json","manifests":[
          {"mediaType":"application/vnd.oci.image.manifest.v1+json","digest":"sha256:aa","size":1,"platform":{"os":"linux","architecture":"arm64"}},
          {"mediaType":"application/vnd.oci.image.manifest.v1+json","digest":"sha256:bb","size":1,"platform":{"os":"linux","architecture":"amd64"}}]}"#;
        let m = Manifest::parse(idx, "x").unwrap();
        assert!(m.is_index());
        let amd64 = NodePlatform {
            os: "linux",
            architecture: "amd64",
            variant: None,
        };
        assert_eq!(
            m.pick_platform_for(&amd64, "x").unwrap().digest,
            "sha256:bb"
        );
        let only_arm = br#"{"schemaVersion":2,"manifests":[{"digest":"sha256:aa","platform":{"os":"linux","architecture":"arm64"}}]}"#;
        let e = Manifest::parse(only_arm, "img")
            .unwrap()
            .pick_platform_for(&amd64, "img")
            .unwrap_err();
        assert!(e.to_string().contains("linux/arm64"), "{e}");
        assert!(
            e.to_string().contains("no manifest for linux/amd64 "),
            "{e}"
        );
    }

    /// An index with variants (and an attestation, which has no platform to fit).
    #[test]
    fn picks_by_variant() {
        let idx = br#"{"schemaVersion":2,"manifests":[
          {"digest":"sha256:att","annotations":{"vnd.docker.reference.type":"attestation-manifest"},"platform":{"os":"unknown","architecture":"unknown"}},
          {"digest":"sha256:v6","platform":{"os":"linux","architecture":"arm","variant":"v6"}},
          {"digest":"sha256:v7","platform":{"os":"linux","architecture":"arm","variant":"v7"}},
          {"digest":"sha256:a64","platform":{"os":"linux","architecture":"arm64","variant":"v8"}},
          {"digest":"sha256:amd","platform":{"os":"linux","architecture":"amd64"}}]}"#;
        let m = Manifest::parse(idx, "x").unwrap();
        let on = |architecture, variant| {
            let n = NodePlatform {
                os: "linux",
                architecture,
                variant,
            };
            m.pick_platform_for(&n, "x").map(|d| d.digest.clone())
        };
        assert_eq!(on("arm64", Some("v8")).unwrap(), "sha256:a64");
        assert_eq!(on("arm", Some("v7")).unwrap(), "sha256:v7");
        assert_eq!(on("arm", Some("v6")).unwrap(), "sha256:v6");
        assert_eq!(on("amd64", None).unwrap(), "sha256:amd");
        let e = on("arm", Some("v5")).unwrap_err();
        assert!(
            e.to_string().contains("no manifest for linux/arm/v5 (the index has unknown/unknown, linux/arm/v6, linux/arm/v7, linux/arm64/v8, linux/amd64)"),
            "{e}"
        );
        // This node's own platform, whatever it is, is found.
        let own = platform::node();
        let own = format!(
            r#"{{"schemaVersion":2,"manifests":[{{"digest":"sha256:own","platform":{{"os":"{}","architecture":"{}"}}}}]}}"#,
            own.os, own.architecture
        );
        let m = Manifest::parse(own.as_bytes(), "x").unwrap();
        assert_eq!(m.pick_platform("x").unwrap().digest, "sha256:own");
    }

    #[test]
    fn docker_config_nulls() {
        let c = br#"{"architecture":"amd64","os":"linux","config":{"Entrypoint":null,"Cmd":["sh"],"Env":["PATH=/bin"],"WorkingDir":"","Labels":null},"rootfs":{"type":"layers","diff_ids":["sha256:cc"]}}"#;
        let c = ConfigBlob::parse(c, "x").unwrap();
        let ic = c.image_config();
        assert_eq!(ic.cmd, vec!["sh"]);
        assert!(ic.entrypoint.is_empty());
        assert_eq!(c.rootfs.diff_ids, vec!["sha256:cc"]);
    }
}
