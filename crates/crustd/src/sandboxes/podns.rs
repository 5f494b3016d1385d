//! Work inside a pod's namespaces: bring up its loopback, apply its sysctls.
//!
//! Each call runs on a fresh OS thread that `setns`es into the pinned namespace and
//! then ends, so no thread of the daemon (least of all a tokio worker) is ever left in
//! a pod's namespace.

use crate::cri::error::{Error, Result};
use nix::sched::CloneFlags;
use std::collections::BTreeMap;
use std::os::fd::AsFd;
use std::path::Path;

/// Runs `f` on a new thread inside the namespace pinned at `path`.
pub fn in_ns<T: Send>(path: &Path, kind: CloneFlags, f: impl FnOnce() -> T + Send) -> Result<T> {
    let file = std::fs::File::open(path)
        .map_err(|e| Error::Internal(format!("opening namespace {}: {e}", path.display())))?;
    std::thread::scope(|s| {
        s.spawn(|| {
            nix::sched::setns(file.as_fd(), kind).map_err(|e| {
                Error::Internal(format!("entering namespace {}: {e}", path.display()))
            })?;
            Ok(f())
        })
        .join()
        .unwrap_or_else(|_| Err(Error::Internal("namespace worker thread panicked".into())))
    })
}

/// Sets `lo` up in the pod's network namespace (what the `loopback` CNI plugin does).
pub fn loopback_up(netns: &Path) -> Result<()> {
    in_ns(
        netns,
        CloneFlags::CLONE_NEWNET,
        || -> std::io::Result<()> {
            // SAFETY: plain socket/ioctl calls on a zeroed ifreq naming "lo"; the fd is closed below.
            unsafe {
                let fd = libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0);
                if fd < 0 {
                    return Err(std::io::Error::last_os_error());
                }
                let mut req: libc::ifreq = std::mem::zeroed();
                for (i, b) in b"lo\0".iter().enumerate() {
                    req.ifr_name[i] = *b as libc::c_char;
                }
                let mut rc = libc::ioctl(fd, libc::SIOCGIFFLAGS, &mut req);
                if rc == 0 {
                    req.ifr_ifru.ifru_flags |= libc::IFF_UP as libc::c_short;
                    rc = libc::ioctl(fd, libc::SIOCSIFFLAGS, &req);
                }
                let err = std::io::Error::last_os_error();
                libc::close(fd);
                if rc != 0 {
                    return Err(err);
                }
            }
            Ok(())
        },
    )?
    .map_err(|e| Error::Internal(format!("setting lo up in {}: {e}", netns.display())))
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
            "net" => CloneFlags::CLONE_NEWNET,
            "ipc" => CloneFlags::CLONE_NEWIPC,
            _ => CloneFlags::CLONE_NEWUTS,
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
