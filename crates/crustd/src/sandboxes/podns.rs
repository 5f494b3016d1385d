//! Work inside a pod's namespaces: bring up its loopback, apply its sysctls.
//!
//! Each call runs on a fresh OS thread that enters the pinned namespace and then ends
//! (`container::ns::run_in`), so no thread of the daemon, least of all a tokio worker,
//! is ever left in a pod's namespace: crustd makes no namespace syscall of its own.

use crate::cri::error::{Error, Result};
use container::ns::NsKind;
use std::collections::BTreeMap;
use std::path::Path;

/// Runs `f` on a new thread inside the namespace pinned at `path` (the container
/// crate's [`container::ns::run_in`]).
pub fn in_ns<T: Send>(path: &Path, kind: NsKind, f: impl FnOnce() -> T + Send) -> Result<T> {
    container::ns::run_in(path, kind, f).map_err(|e| Error::Internal(e.to_string()))
}

/// Sets `lo` up in the pod's network namespace (what the `loopback` CNI plugin does).
pub fn loopback_up(netns: &Path) -> Result<()> {
    container::ns::loopback_up(netns).map_err(|e| Error::Internal(e.to_string()))
}

/// Which namespace a sysctl belongs to; `None` for one that is node-wide and so must
/// never be set for a pod.
pub fn sysctl_namespace(key: &str) -> Option<&'static str> {
    let k = key.replace('/', ".");
    const IPC: &[&str] = &[
        "kernel.shmall",
        "kernel.shmmax",
        "kernel.shmmni",
        "kernel.shm_rmid_forced",
        "kernel.msgmax",
        "kernel.msgmnb",
        "kernel.msgmni",
        "kernel.sem",
    ];
    if k.starts_with("net.") {
        Some("net")
    } else if IPC.contains(&k.as_str()) || k.starts_with("fs.mqueue.") {
        Some("ipc")
    } else if k == "kernel.domainname" {
        Some("uts")
    } else {
        None
    }
}

/// The /proc/sys path of a sysctl given in dotted (`net.ipv4.ip_forward`) or slashed
/// (`net/ipv4/conf/eth0.100/forwarding`) form.
fn sysctl_path(key: &str) -> String {
    if key.contains('/') {
        key.to_string()
    } else {
        key.replace('.', "/")
    }
}

/// Checks every sysctl before anything is created: node-wide ones, and ones for a
/// namespace the pod shares with the node, are refused.
pub fn validate_sysctls(
    sysctls: &BTreeMap<String, String>,
    host_net: bool,
    host_ipc: bool,
) -> Result<()> {
    for (k, v) in sysctls {
        if k.is_empty() || k.contains("..") || k.starts_with('/') {
            return Err(Error::InvalidArgument(format!("invalid sysctl name {k:?}")));
        }
        if v.contains('\n') {
            return Err(Error::InvalidArgument(format!(
                "sysctl {k}: value must be one line"
            )));
        }
        match sysctl_namespace(k) {
            None => {
                return Err(Error::InvalidArgument(format!(
                    "sysctl {k:?} is not namespaced: it would change the whole node, so a pod may not set it"
                )))
            }
            Some("net") if host_net => {
                return Err(Error::InvalidArgument(format!("sysctl {k:?} needs the pod's own network namespace (hostNetwork pod)")))
            }
            Some("ipc") if host_ipc => {
                return Err(Error::InvalidArgument(format!("sysctl {k:?} needs the pod's own IPC namespace (hostIPC pod)")))
            }
            _ => {}
        }
    }
    Ok(())
}

/// Writes the sysctls inside the pod's pinned namespaces.
pub fn apply_sysctls(
    sysctls: &BTreeMap<String, String>,
    pins: &BTreeMap<String, std::path::PathBuf>,
) -> Result<()> {
    for (k, v) in sysctls {
        let ns = sysctl_namespace(k)
            .ok_or_else(|| Error::InvalidArgument(format!("sysctl {k:?} is not namespaced")))?;
        let pin = pins.get(ns).ok_or_else(|| {
            Error::InvalidArgument(format!(
                "sysctl {k:?}: the pod has no {ns} namespace of its own"
            ))
        })?;
        let flag = match ns {
            "net" => NsKind::Net,
            "ipc" => NsKind::Ipc,
            _ => NsKind::Uts,
        };
        let path = format!("/proc/sys/{}", sysctl_path(k));
        let value = v.clone();
        in_ns(pin, flag, move || std::fs::write(&path, value.as_bytes()))?.map_err(|e| {
            let kind = if e.kind() == std::io::ErrorKind::NotFound {
                "unknown sysctl"
            } else {
                "failed to set sysctl"
            };
            Error::InvalidArgument(format!("{kind} {k}={v}: {e}"))
        })?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classifies_sysctls() {
        assert_eq!(
            sysctl_namespace("net.ipv4.ip_unprivileged_port_start"),
            Some("net")
        );
        assert_eq!(
            sysctl_namespace("net/ipv4/conf/eth0.100/forwarding"),
            Some("net")
        );
        assert_eq!(sysctl_namespace("kernel.shm_rmid_forced"), Some("ipc"));
        assert_eq!(sysctl_namespace("fs.mqueue.msg_max"), Some("ipc"));
        assert_eq!(sysctl_namespace("kernel.domainname"), Some("uts"));
        assert_eq!(sysctl_namespace("kernel.panic"), None);
        assert_eq!(sysctl_namespace("vm.swappiness"), None);
        assert_eq!(sysctl_path("net.ipv4.ip_forward"), "net/ipv4/ip_forward");
        assert_eq!(
            sysctl_path("net/ipv4/conf/eth0.100/forwarding"),
            "net/ipv4/conf/eth0.100/forwarding"
        );
    }

    #[test]
    fn validation() {
        let m = |k: &str| BTreeMap::from([(k.to_string(), "1".to_string())]);
        assert!(validate_sysctls(&m("net.ipv4.ip_forward"), false, false).is_ok());
        assert!(validate_sysctls(&m("net.ipv4.ip_forward"), true, false).is_err());
        assert!(validate_sysctls(&m("kernel.shmmax"), false, true).is_err());
        assert!(validate_sysctls(&m("kernel.panic"), false, false).is_err());
        assert!(validate_sysctls(&m("net/../../x"), false, false).is_err());
    }
}
