//! Version, Status, RuntimeConfig and UpdateRuntimeConfig: what the kubelet asks
//! about the runtime itself.

use crate::cri::error::{Error, Result};
use crate::daemon::Crust;
use cgroups::CgroupManager;
use cri_api::*;
use serde_json::json;

pub const RUNTIME_NAME: &str = "crust";
pub const CRI_VERSION: &str = "v1";

pub fn version() -> VersionResponse {
    VersionResponse {
        version: "0.1.0".into(),
        runtime_name: RUNTIME_NAME.into(),
        runtime_version: env!("CARGO_PKG_VERSION").into(),
        runtime_api_version: CRI_VERSION.into(),
    }
}

/// RuntimeReady is always true once we answer; NetworkReady follows the CNI folder,
/// re-read on every call, so a config dropped in later is picked up without a restart.
pub fn status(crust: &Crust, verbose: bool) -> StatusResponse {
    let runtime = RuntimeCondition {
        r#type: "RuntimeReady".into(),
        status: true,
        reason: String::new(),
        message: String::new(),
    };
    let network = match crust.network.current() {
        Ok(_) => RuntimeCondition {
            r#type: "NetworkReady".into(),
            status: true,
            reason: String::new(),
            message: String::new(),
        },
        Err(why) => RuntimeCondition {
            r#type: "NetworkReady".into(),
            status: false,
            reason: "NetworkPluginNotReady".into(),
            message: format!("Network plugin returns error: {why}"),
        },
    };
    let mut info = std::collections::HashMap::new();
    if verbose {
        let cni = crust
            .network
            .current()
            .ok()
            .map(|l| json!({"name": l.name, "cniVersion": l.cni_version, "source": l.source}));
        info.insert(
            "config".to_string(),
            json!({
                "root": crust.cfg.root, "state": crust.cfg.state, "cgroupDriver": crust.cfg.cgroup.driver,
                "cniConfDir": crust.cfg.cni.conf_dir, "cniBinDirs": crust.cfg.cni.bin_dirs, "network": cni,
            })
            .to_string(),
        );
        let version = match crust.cgroups.version() {
            cgroups::Version::V1 => "v1",
            cgroups::Version::V2 => "v2",
        };
        info.insert(
            "cgroups".to_string(),
            json!({"version": version, "hugetlb": crust.hugetlb_status()}).to_string(),
        );
        let aa = &crust.apparmor;
        info.insert(
            "apparmor".to_string(),
            json!({
                "enabled": aa.enabled(),
                "reason": aa.not_in_use(),
                "defaultProfile": crate::containers::apparmor::DEFAULT_PROFILE,
                "defaultProfileLoaded": aa.default_loaded(),
            })
            .to_string(),
        );
    }
    StatusResponse {
        status: Some(RuntimeStatus {
            conditions: vec![runtime, network],
        }),
        info,
        runtime_handlers: crust
            .handlers
            .iter()
            .map(|h| RuntimeHandler {
                name: h.clone(),
                features: Some(RuntimeHandlerFeatures {
                    recursive_read_only_mounts: crust.recursive_read_only(h),
                    // The built-in executor's (its id-mapped mounts need
                    // mount_setattr); the runc/crun handlers are not given the pod's
                    // namespace yet, and RunPodSandbox refuses it for them.
                    user_namespaces: !crust.oci_runtimes.contains_key(h)
                        && container::executor::recursive_mount_options(),
                }),
            })
            .collect(),
        features: Some(RuntimeFeatures {
            supplemental_groups_policy: true,
        }),
    }
}

pub fn runtime_config(crust: &Crust) -> RuntimeConfigResponse {
    let driver = if crust.cgroups.is_systemd() {
        CgroupDriver::Systemd
    } else {
        CgroupDriver::Cgroupfs
    };
    RuntimeConfigResponse {
        linux: Some(LinuxRuntimeConfiguration {
            cgroup_driver: driver as i32,
        }),
    }
}

/// The kubelet sends the node's pod CIDR(s) here. With `cni.conf_template` set, the
/// template is rendered with them into the CNI folder (as containerd does); without
/// one, the network is the operator's business and nothing is written.
pub fn update_runtime_config(crust: &Crust, req: UpdateRuntimeConfigRequest) -> Result<()> {
    let cidr = req
        .runtime_config
        .and_then(|r| r.network_config)
        .map(|n| n.pod_cidr)
        .unwrap_or_default();
    if cidr.is_empty() || crust.cfg.cni.conf_template.as_os_str().is_empty() {
        return Ok(());
    }
    let cidrs: Vec<&str> = cidr
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .collect();
    for c in &cidrs {
        c.parse::<ipnetwork::IpNetwork>()
            .map_err(|e| Error::InvalidArgument(format!("invalid pod CIDR {c:?}: {e}")))?;
    }
    let template = std::fs::read_to_string(&crust.cfg.cni.conf_template).map_err(|e| {
        Error::FailedPrecondition(format!(
            "reading cni.conf_template {}: {e}",
            crust.cfg.cni.conf_template.display()
        ))
    })?;
    let text = crate::daemon::cni_template::render(&template, &cidrs).map_err(|e| {
        Error::FailedPrecondition(format!(
            "cni.conf_template {}: {e}",
            crust.cfg.cni.conf_template.display()
        ))
    })?;
    serde_json::from_str::<serde_json::Value>(&text).map_err(|e| {
        Error::FailedPrecondition(format!(
            "cni.conf_template rendered with {cidr} is not JSON: {e}"
        ))
    })?;
    let out = crust.cfg.cni.conf_dir.join("10-crust.conflist");
    crate::daemon::util::write_atomic(&out, text.as_bytes())
        .map_err(|e| Error::Internal(format!("writing {}: {e}", out.display())))
}
