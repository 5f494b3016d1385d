//! The daemon's shared state: configuration, the sandbox store, the network, cgroups,
//! and the pause binary. Every RPC handler works on one `Crust`. Beside it: the
//! configuration file (`config`), Version/Status/RuntimeConfig (`runtime_info`) and
//! small helpers (`util`).

pub mod cni_template;
pub mod config;
pub mod failpoint;
pub mod record;
pub mod runtime_info;
pub mod util;

use crate::daemon::config::Config;
use crate::sandboxes::network::Network;
use crate::sandboxes::store::Store;
use cni::runtime::CniRuntime;
use std::path::PathBuf;

pub struct Crust {
    pub cfg: Config,
    pub store: Store,
    pub containers: crate::containers::store::Containers,
    pub images: std::sync::Arc<image::ImageStore>,
    /// The installed `crust-monitor` binary.
    pub monitor_bin: PathBuf,
    pub network: Network,
    pub cgroups: cgroups::Driver,
    /// Why the pods' cgroups will have no hugetlb controller (`None`: they will), found
    /// once at start: logged then and reported by Status, not once per container.
    pub hugetlb_missing: Option<String>,
    pub pause_bin: PathBuf,
    /// The empty-root mount namespace the pauses share (`container::pause::empty_root_ns`),
    /// made once here; `None` if it could not be: each pause then makes its own.
    pub pause_root_ns: Option<std::os::fd::OwnedFd>,
    /// Runtime handlers RunPodSandbox accepts.
    pub handlers: Vec<String>,
    /// The handlers that make recursive read-only mounts (`rro`): found out on first
    /// use, not at start (it runs each OCI runtime's `features`).
    rro_handlers: std::sync::OnceLock<std::collections::HashSet<String>>,
    /// Handlers whose containers an external OCI runtime (runc, crun) runs.
    pub oci_runtimes:
        std::collections::HashMap<String, container::executor::oci_runtime::OciRuntime>,
    /// Where Exec, Attach and PortForward URLs lead (stream_server.rs).
    pub streams: crate::streaming::server::StreamServer,
    /// GetContainerEvents' source (events.rs).
    pub events: crate::containers::events::Events,
    /// The host's AppArmor: whether containers are confined, and crust's default profile.
    pub apparmor: std::sync::Arc<crate::containers::apparmor::AppArmor>,
    /// NRI, once started (`serve`), when the configuration turns it on.
    pub nri: std::sync::OnceLock<std::sync::Arc<crate::nri::Nri>>,
}

impl Crust {
    pub fn new(cfg: Config) -> anyhow::Result<Crust> {
        for d in [&cfg.root, &cfg.state] {
            std::fs::create_dir_all(d)
                .map_err(|e| anyhow::anyhow!("creating {}: {e}", d.display()))?;
        }
        let pause_bin = container::pause::install(&cfg.pause_dir()).map_err(|e| {
            anyhow::anyhow!(
                "installing the pause binary in {}: {e}",
                cfg.pause_dir().display()
            )
        })?;
        let pause_root_ns = container::pause::empty_root_ns(&pause_bin)
            .inspect_err(|e| {
                tracing::warn!(error = %e, "no shared empty root for the pauses; each makes its own")
            })
            .ok();
        let monitor_bin = container::monitor::install(&cfg.pause_dir()).map_err(|e| {
            anyhow::anyhow!(
                "installing the monitor binary in {}: {e}",
                cfg.pause_dir().display()
            )
        })?;
        let mut images =
            image::ImageStore::open(cfg.root.join("images"), cfg.registry_config_dir())
                .map_err(|e| anyhow::anyhow!("opening the image store: {e}"))?;
        images.set_failpoint_hook(failpoint::image_hook());
        // Layers an interrupted pull left unrecorded go (snapshots keep theirs).
        images
            .gc()
            .map_err(|e| anyhow::anyhow!("cleaning the image store: {e}"))?;
        let mut cgroups =
            cgroups::Hierarchy::detect().map_err(|e| anyhow::anyhow!("detecting cgroups: {e}"))?;
        if cfg.cgroup.nested {
            cgroups = cgroups
                .nested_in_own_cgroup()
                .map_err(|e| anyhow::anyhow!("finding crustd's own cgroup: {e}"))?;
        }
        let cgroups = if cfg.cgroup.driver == "systemd" {
            let systemd = cgroups::systemd::Systemd::connect().map_err(|e| {
                anyhow::anyhow!("cgroup.driver = \"systemd\", but systemd cannot be reached: {e}")
            })?;
            tracing::info!(version = %systemd.version().unwrap_or_default(), "systemd cgroup driver");
            cgroups::Driver::Systemd(Box::new(cgroups::systemd::Manager::new(
                cgroups,
                systemd,
                pause_bin.clone(),
            )))
        } else {
            cgroups::Driver::Cgroupfs(cgroups)
        };
        let hugetlb_missing = hugetlb_missing(&cgroups, &cfg.cgroup.root);
        match (&hugetlb_missing, cfg.cgroup.require_hugetlb) {
            (None, _) => {
                tracing::debug!("hugetlb cgroup controller present: hugepage limits are applied")
            }
            (Some(reason), false) => tracing::warn!(
                reason = %reason,
                "no usable hugetlb cgroup controller: hugepage limits are not applied (set cgroup.require_hugetlb = true to refuse containers that carry them instead)"
            ),
            (Some(reason), true) => tracing::warn!(
                reason = %reason,
                "no usable hugetlb cgroup controller and cgroup.require_hugetlb is set: containers with hugepage limits will be refused"
            ),
        }
        let network = Network {
            conf_dir: cfg.cni.conf_dir.clone(),
            runtime: CniRuntime::new(cfg.cni.bin_dirs.clone(), cfg.root.join("cni")),
            ifname: cfg.cni.ifname.clone(),
        };
        let mut handlers = vec![String::new(), "crust".to_string()];
        handlers.extend(cfg.runtime_handlers.iter().cloned());
        let mut oci_runtimes = std::collections::HashMap::new();
        for (name, binary) in &cfg.oci_runtimes {
            if name.is_empty() || name == "crust" || name.contains('/') {
                anyhow::bail!("oci_runtimes: {name:?} cannot name a runtime handler");
            }
            handlers.push(name.clone());
            oci_runtimes.insert(
                name.clone(),
                container::executor::oci_runtime::OciRuntime {
                    binary: binary.clone(),
                    root: cfg.state.join("runtimes").join(name),
                },
            );
        }
        let mut apparmor = crate::containers::apparmor::AppArmor::detect();
        if cfg.disable_apparmor {
            apparmor = apparmor.disabled_by_config();
        }
        let apparmor = std::sync::Arc::new(apparmor);
        match apparmor.not_in_use() {
            None => {
                // Loaded in the background: a start does not wait for the parser; the
                // first create that needs the profile does (and tries again if this failed).
                let aa = apparmor.clone();
                std::thread::spawn(move || {
                    if let Err(e) = aa.ensure_default() {
                        tracing::warn!(error = %e, "AppArmor default profile not loaded yet");
                    }
                });
            }
            Some(why) => {
                tracing::info!(reason = %why, "AppArmor not in use: containers run without an AppArmor profile")
            }
        }
        Ok(Crust {
            store: Store::new(cfg.root.join("sandboxes")),
            containers: crate::containers::store::Containers::new(
                cfg.root.join("containers"),
                cfg.state.join("containers"),
            ),
            images: std::sync::Arc::new(images),
            monitor_bin,
            network,
            cgroups,
            hugetlb_missing,
            pause_bin,
            pause_root_ns,
            handlers,
            rro_handlers: Default::default(),
            oci_runtimes,
            streams: Default::default(),
            events: Default::default(),
            apparmor,
            nri: Default::default(),
            cfg,
        })
    }

    /// What Status reports about hugepage limits on this node: whether the hugetlb
    /// controller is there, why not, and what becomes of the limits the kubelet sends.
    pub fn hugetlb_status(&self) -> serde_json::Value {
        let limits = match (&self.hugetlb_missing, self.cfg.cgroup.require_hugetlb) {
            (None, _) => "applied",
            (Some(_), false) => "not applied",
            (Some(_), true) => "refused (cgroup.require_hugetlb)",
        };
        serde_json::json!({
            "controller": self.hugetlb_missing.is_none(),
            "reason": self.hugetlb_missing,
            "requireHugetlb": self.cfg.cgroup.require_hugetlb,
            "hugepageLimits": limits,
        })
    }

    /// Whether `handler` makes recursive read-only mounts: crust's own executor where
    /// the kernel has `mount_setattr`, an OCI runtime where its `features` (asked once,
    /// as containerd asks `runc features`) list `rro` too.
    pub fn recursive_read_only(&self, handler: &str) -> bool {
        self.rro_handlers
            .get_or_init(|| {
                if !container::executor::recursive_mount_options() {
                    return Default::default();
                }
                self.handlers
                    .iter()
                    .filter(|h| {
                        self.oci_runtimes
                            .get(*h)
                            .is_none_or(|rt| rt.supports_mount_option("rro"))
                    })
                    .cloned()
                    .collect()
            })
            .contains(handler)
    }

    /// Where a sandbox's namespace pins live (volatile: they die with the node).
    pub fn pin_dir(&self, id: &str) -> PathBuf {
        self.cfg.state.join("sandboxes").join(id)
    }

    /// The pod cgroup: `<cgroup root>/<cgroup_parent>/<sandbox id>`.
    /// The pod-level cgroup of a sandbox whose own cgroup is `sandbox_cgroup`: its
    /// parent (the kubelet's cgroup_parent, or the one crust made), where the pod's
    /// containers go and whose usage is the pod's.
    pub fn pod_level_cgroup(sandbox_cgroup: &str) -> Option<cgroups::CgroupPath> {
        cgroups::CgroupPath::new(sandbox_cgroup).ok()?.parent()
    }

    pub fn pod_cgroup(
        &self,
        parent: &str,
        id: &str,
    ) -> crate::cri::error::Result<cgroups::CgroupPath> {
        let invalid = |e: cgroups::Error| {
            crate::cri::error::Error::InvalidArgument(format!("cgroup_parent {parent:?}: {e}"))
        };
        if self.cgroups.is_systemd() {
            // The kubelet's `--cgroup-driver=systemd` sends the pod's slice as the cgroup
            // path it expands to (`/kubepods.slice/kubepods-burstable.slice/
            // kubepods-burstable-pod<uid>.slice`); a bare slice name is taken too. A
            // path must be where its last name, a slice, lives. Without a parent the
            // pod gets a slice of crust's own, as the pod-level cgroup.
            let parent = parent.trim_matches('/');
            let slice = if parent.is_empty() {
                cgroups::systemd::expand_slice(&Self::own_pod_slice(id))
            } else {
                let name = parent.rsplit('/').next().unwrap_or(parent);
                cgroups::systemd::expand_slice(name).and_then(|p| {
                    if parent.contains('/') && p.to_string() != format!("/{parent}") {
                        return Err(cgroups::Error::InvalidPath {
                            path: format!("/{parent}"),
                            reason: "not where the systemd slice it ends in lives \
                                     (a-b.slice is /a.slice/a-b.slice)",
                        });
                    }
                    Ok(p)
                })
            };
            return slice
                .and_then(|s| s.join(&self.cgroup_leaf(id)))
                .map_err(invalid);
        }
        let s = self.pod_cgroup_str(parent, id);
        cgroups::CgroupPath::new(&s).map_err(invalid)
    }

    /// The last name of the cgroup of the sandbox or container `id`: the id itself
    /// (cgroupfs), or its systemd scope `crust-<id>.scope`.
    pub fn cgroup_leaf(&self, id: &str) -> String {
        if self.cgroups.is_systemd() {
            format!("crust-{id}.scope")
        } else {
            id.to_string()
        }
    }

    /// The slice crust makes (systemd driver) for a pod without a `cgroup_parent`.
    fn own_pod_slice(id: &str) -> String {
        format!("crust-pod{id}.slice")
    }

    /// Whether `pod_level` is the pod-level cgroup crust made for the sandbox `id`
    /// (no `cgroup_parent`), which goes with the sandbox.
    pub fn is_own_pod_level(&self, pod_level: &cgroups::CgroupPath, id: &str) -> bool {
        let name = pod_level.name();
        name == Some(id) || name == Some(Self::own_pod_slice(id).as_str())
    }

    /// The sandbox's (the pause's) cgroup: `<root>/<cgroup_parent>/<id>`, beside the
    /// pod's containers' `<root>/<cgroup_parent>/<container id>` as containerd lays them
    /// out; without a cgroup_parent crust makes a pod-level one, `<root>/crust/<id>`.
    /// Containers must not sit below the pause's cgroup: on cgroup v2 a cgroup with a
    /// process cannot enable controllers for children ("no internal processes").
    fn pod_cgroup_str(&self, parent: &str, id: &str) -> String {
        let mut p = self.cfg.cgroup.root.trim_end_matches('/').to_string();
        let parent = parent.trim_matches('/');
        if !parent.is_empty() {
            p.push('/');
            p.push_str(parent);
        } else {
            p.push_str("/crust/");
            p.push_str(id);
        }
        p.push('/');
        p.push_str(id);
        p
    }
}

/// [`cgroups::CgroupManager::hugetlb_unavailable`] below the configured cgroup root.
fn hugetlb_missing(h: &cgroups::Driver, root: &str) -> Option<String> {
    use cgroups::CgroupManager;
    match cgroups::CgroupPath::new(root) {
        Ok(root) => h.hugetlb_unavailable(&root),
        Err(e) => Some(format!("cgroup.root {root:?}: {e}")),
    }
}
