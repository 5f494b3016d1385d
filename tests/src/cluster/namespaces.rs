//! The node's namespaces: a veth pair per node agent in the network namespace (the
//! kubelet refuses a loopback node IP), and the private mount namespace the kubelet and
//! its runtime share, where temp dirs and files cover the paths and `/proc/sys`
//! tunables the kubelet writes, so the host's are never changed.

use super::process::{s, wait_for};
use super::Cluster;
use crate::run;
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::Duration;

/// The kernel tunables the kubelet sets at start (with `--protect-kernel-defaults`
/// off), each covered by a temp file in the node's mount namespace.
const SYSCTLS: &[&str] = &[
    "vm/overcommit_memory",
    "vm/panic_on_oom",
    "kernel/panic",
    "kernel/panic_on_oops",
    "kernel/keys/root_maxkeys",
    "kernel/keys/root_maxbytes",
];

/// The paths the kubelet hard-codes, each covered by a temp dir.
pub(crate) const KUBELET_DIRS: &[&str] =
    &["/var/lib/kubelet", "/var/log/pods", "/var/log/containers"];

impl Cluster {
    /// The node agents' IPs, each on a veth pair of its own inside the node namespace:
    /// the kubelet's node, the crustlet's, the containerd node's.
    pub(super) fn network(&self) {
        let ns = &self.node.name;
        for (link, ip) in [
            ("knode", &self.ip),
            ("klet", &self.crustlet_ip),
            ("kctr", &self.containerd_ip),
        ] {
            let (end0, end1) = (format!("{link}0"), format!("{link}1"));
            crate::sh(&[
                "ip", "-n", ns, "link", "add", &end0, "type", "veth", "peer", "name", &end1,
            ]);
            let addr = format!("{ip}/24");
            crate::sh(&["ip", "-n", ns, "addr", "add", &addr, "dev", &end0]);
            crate::sh(&["ip", "-n", ns, "link", "set", &end0, "up"]);
            crate::sh(&["ip", "-n", ns, "link", "set", &end1, "up"]);
        }
    }

    /// The private mount namespace of the kubelet and crustd, with the kubelet's paths
    /// and the tunables it writes covered by the cluster's own files.
    pub(super) fn mount_namespace(&mut self) {
        let mut binds: Vec<(PathBuf, PathBuf)> = KUBELET_DIRS
            .iter()
            .zip(["mnt/kubelet", "mnt/pods", "mnt/containers"])
            .map(|(d, src)| (self.path(src), PathBuf::from(d)))
            .collect();
        if self.opts.containerd.is_some() {
            // containerd puts its shims' sockets in `/run/containerd/s` whatever its
            // state dir: a dir of the cluster's covers it.
            binds.push((self.path("ctrd-run"), PathBuf::from("/run/containerd")));
        }
        binds.extend(self.sysctl_binds(&self.path("sysctl")));
        self.make_host_dirs(&binds);
        let child = self.mount_holder(&self.node.path(), "mount-namespace", &binds);
        self.holder_pid = child.id();
        *self.holder.lock().unwrap() = Some(child);
    }

    /// Makes the host paths that `binds` cover when missing (bind targets must exist).
    /// They stay after the teardown: another cluster on the machine may have its own
    /// binds on them, and removing a directory dissolves every mount on it in every
    /// mount namespace (a suite run beside another lost its `/var/lib/kubelet` that
    /// way, and its kubelet went on in the host's directory).
    pub(crate) fn make_host_dirs(&mut self, binds: &[(PathBuf, PathBuf)]) {
        for (_, target) in binds {
            if !target.exists() {
                std::fs::create_dir_all(target).unwrap();
            }
        }
    }

    /// The kubelet's tunables (`SYSCTLS`), each to be covered by a copy in `dir`.
    pub(crate) fn sysctl_binds(&self, dir: &Path) -> Vec<(PathBuf, PathBuf)> {
        std::fs::create_dir_all(dir).unwrap();
        SYSCTLS
            .iter()
            .filter_map(|t| {
                let target = Path::new("/proc/sys").join(t);
                if !target.exists() {
                    return None;
                }
                let file = dir.join(t.replace('/', "."));
                std::fs::write(&file, std::fs::read(&target).unwrap_or_default()).unwrap();
                Some((file, target))
            })
            .collect()
    }

    /// A process (`sleep`) holding a private mount namespace in network namespace
    /// `netns`, with each `(source, target)` of `binds` bind-mounted there: the
    /// namespace a node's kubelet and runtime share, and which goes when the last of
    /// its processes does.
    pub(crate) fn mount_holder(
        &self,
        netns: &Path,
        name: &str,
        binds: &[(PathBuf, PathBuf)],
    ) -> Child {
        let mut holder = Command::new("nsenter");
        holder
            .arg(format!("--net={}", netns.display()))
            .args(["--", "unshare", "--mount", "--propagation", "private"])
            .args(["sleep", "infinity"]);
        let child = self.spawn_logged(holder, name);
        let pid = child.id();
        let own = std::fs::read_link("/proc/self/ns/mnt").unwrap();
        wait_for("the mount namespace", Duration::from_secs(10), |_| {
            let ns = std::fs::read_link(format!("/proc/{pid}/ns/mnt")).ok()?;
            let exe = std::fs::read_link(format!("/proc/{pid}/exe")).ok()?;
            (ns != own && exe.ends_with("sleep")).then_some(())
        });
        for (src, dst) in binds {
            let mut m = Command::new("nsenter");
            m.arg(format!("--mount=/proc/{pid}/ns/mnt"))
                .args(["mount", "--bind"])
                .arg(src)
                .arg(dst);
            let out = run(&mut m);
            assert!(
                out.status.success(),
                "bind-mounting {} over {}: {}",
                src.display(),
                dst.display(),
                s(&out.stderr)
            );
        }
        child
    }
}
