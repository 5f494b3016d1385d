//! `crustd`'s configuration: `/etc/crust/config.toml`, every key with a default, flags
//! on top. Unknown keys and bad values stop the daemon at start, naming the key, so a
//! typo never silently falls back to a default.

use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

pub const DEFAULT_CONFIG: &str = "/etc/crust/config.toml";

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Config {
    /// Persistent state: sandbox records, pod files, the CNI result cache.
    pub root: PathBuf,
    /// Volatile state: the socket, the lock, namespace pins.
    pub state: PathBuf,
    /// The CRI socket; empty means `<state>/crust.sock`.
    pub socket: PathBuf,
    /// `error`, `warn`, `info`, `debug` or `trace`, or a tracing filter.
    pub log_level: String,
    /// Where the pause binary is installed; empty means `<state>/bin`.
    pub pause_dir: PathBuf,
    /// Seconds StopPodSandbox waits for the pause process before SIGKILL.
    pub stop_timeout_seconds: u64,
    /// crustd's own `oom_score_adj`, set at start (containerd's `oom_score`); 0 keeps
    /// what it was started with (the packaged unit's `OOMScoreAdjust=-999`). The lowest
    /// a container's may be is crustd's own, so a node that protects crustd this way
    /// lets Guaranteed pods have the kubelet's -997.
    pub oom_score_adj: i32,
    /// Run every container without an AppArmor profile even where the host has
    /// AppArmor (containerd's `disable_apparmor`): a profile asked for other than
    /// `unconfined` is then refused, as on a host without AppArmor.
    pub disable_apparmor: bool,
    pub cgroup: CgroupConfig,
    /// NRI plugins (crate::nri): off unless `enable`.
    pub nri: crate::nri::NriConfig,
    pub cni: CniConfig,
    pub registry: RegistryConfig,
    /// Runtime handlers RunPodSandbox accepts besides the default ("" and "crust").
    pub runtime_handlers: Vec<String>,
    /// Runtime handlers whose containers an external OCI runtime runs: handler name →
    /// the runtime's binary (`runc = "/usr/sbin/runc"`). Accepted by RunPodSandbox too.
    pub oci_runtimes: std::collections::BTreeMap<String, PathBuf>,
    /// Where the streaming server (the URLs of Exec, Attach and PortForward) listens,
    /// as containerd's options of the same names: an address the kubelet reaches.
    pub stream_server_address: String,
    /// 0: a free port picked at start.
    pub stream_server_port: u16,
    /// A streaming connection nothing crosses for this long is closed (containerd's
    /// `stream_idle_timeout`, 4 h); 0: never.
    pub stream_idle_timeout_seconds: u64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct CgroupConfig {
    /// `cgroupfs` (crust makes the cgroup directories) or `systemd` (pods and containers
    /// as systemd units over D-Bus, as containerd's `SystemdCgroup = true`; the kubelet
    /// then sends `cgroup_parent` as a slice). Must match the kubelet's
    /// `--cgroup-driver`; reported to it by the RuntimeConfig RPC.
    pub driver: String,
    /// Prefix for every pod cgroup (`<root>/<cgroup_parent>/<sandbox id>`).
    pub root: String,
    /// Take `root` relative to crustd's own cgroup (per controller on v1) instead of
    /// the hierarchy's root: for crustd inside a container, and for tests, which must
    /// keep their cgroups under their own.
    pub nested: bool,
    /// Fail CreateContainer and UpdateContainerResources that carry hugepage limits
    /// when the container's cgroup has no hugetlb controller. Off by default because the
    /// kubelet sends a limit for every page size the kernel has (0 for pods asking for
    /// none), so a node without the controller could run no pod at all; containerd
    /// leaves such limits out by default too.
    pub require_hugetlb: bool,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct CniConfig {
    /// The first configuration in lexical order here is the pod network.
    pub conf_dir: PathBuf,
    /// Plugin folders (`CNI_PATH`).
    pub bin_dirs: Vec<PathBuf>,
    /// A conflist template rendered when the kubelet sends the pod CIDR through
    /// UpdateRuntimeConfig: containerd's (`{{.PodCIDR}}`, `range` over
    /// `.PodCIDRRanges` and `.Routes`; see `cni_template`). Empty: UpdateRuntimeConfig
    /// writes nothing.
    pub conf_template: PathBuf,
    /// Interface name inside pods.
    pub ifname: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RegistryConfig {
    /// containerd-style registry hosts: `<config_dir>/<registry>/hosts.toml` (mirrors,
    /// plain HTTP, CAs, skip_verify). Empty, or a missing directory: every registry is
    /// its own only host (HTTPS; plain HTTP for localhost and 127.0.0.1).
    pub config_dir: PathBuf,
}

impl Default for RegistryConfig {
    fn default() -> Self {
        RegistryConfig {
            config_dir: PathBuf::from("/etc/crust/certs.d"),
        }
    }
}

impl Default for Config {
    fn default() -> Self {
        Config {
            root: PathBuf::from("/var/lib/crust"),
            state: PathBuf::from("/run/crust"),
            socket: PathBuf::new(),
            log_level: "info".into(),
            pause_dir: PathBuf::new(),
            stop_timeout_seconds: 10,
            oom_score_adj: 0,
            disable_apparmor: false,
            cgroup: CgroupConfig::default(),
            nri: Default::default(),
            cni: CniConfig::default(),
            registry: RegistryConfig::default(),
            runtime_handlers: vec![],
            oci_runtimes: Default::default(),
            stream_server_address: "127.0.0.1".into(),
            stream_server_port: 0,
            stream_idle_timeout_seconds: 4 * 3600,
        }
    }
}

impl Default for CgroupConfig {
    fn default() -> Self {
        CgroupConfig {
            driver: "cgroupfs".into(),
            root: "/".into(),
            nested: false,
            require_hugetlb: false,
        }
    }
}

impl Default for CniConfig {
    fn default() -> Self {
        CniConfig {
            conf_dir: PathBuf::from("/etc/cni/net.d"),
            bin_dirs: vec![PathBuf::from("/opt/cni/bin")],
            conf_template: PathBuf::new(),
            ifname: "eth0".into(),
        }
    }
}

/// Overrides from the command line; `None` keeps the file's value.
#[derive(Debug, Default, Clone)]
pub struct Overrides {
    pub root: Option<PathBuf>,
    pub state: Option<PathBuf>,
    pub socket: Option<PathBuf>,
    pub cni_conf_dir: Option<PathBuf>,
    pub cni_bin_dirs: Vec<PathBuf>,
    pub cgroup_root: Option<String>,
    pub cgroup_nested: bool,
    pub log_level: Option<String>,
    pub registry_config_dir: Option<PathBuf>,
    /// `--nri`: NRI on, with the configuration's other `[nri]` keys.
    pub nri: bool,
}

impl Config {
    /// Reads `path`; a missing file is fine only when it is the default path.
    pub fn load(path: &Path, explicit: bool) -> anyhow::Result<Config> {
        match std::fs::read_to_string(path) {
            Ok(text) => Self::parse(&text).map_err(|e| anyhow::anyhow!("{}: {e}", path.display())),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound && !explicit => {
                Ok(Config::default())
            }
            Err(e) => Err(anyhow::anyhow!("reading config {}: {e}", path.display())),
        }
    }

    pub fn parse(text: &str) -> anyhow::Result<Config> {
        let c: Config =
            toml::from_str(text).map_err(|e| anyhow::anyhow!("{}", e.to_string().trim_end()))?;
        c.validate()?;
        Ok(c)
    }

    pub fn apply(&mut self, o: Overrides) -> anyhow::Result<()> {
        if let Some(v) = o.root {
            self.root = v;
        }
        if let Some(v) = o.state {
            self.state = v;
        }
        if let Some(v) = o.socket {
            self.socket = v;
        }
        if let Some(v) = o.cni_conf_dir {
            self.cni.conf_dir = v;
        }
        if !o.cni_bin_dirs.is_empty() {
            self.cni.bin_dirs = o.cni_bin_dirs;
        }
        if let Some(v) = o.cgroup_root {
            self.cgroup.root = v;
        }
        if o.cgroup_nested {
            self.cgroup.nested = true;
        }
        if let Some(v) = o.log_level {
            self.log_level = v;
        }
        if let Some(v) = o.registry_config_dir {
            self.registry.config_dir = v;
        }
        if o.nri {
            self.nri.enable = true;
        }
        self.validate()
    }

    fn validate(&self) -> anyhow::Result<()> {
        let abs = |key: &str, p: &Path, may_be_empty: bool| -> anyhow::Result<()> {
            if (p.as_os_str().is_empty() && may_be_empty) || p.is_absolute() {
                Ok(())
            } else {
                Err(anyhow::anyhow!(
                    "{key}: must be an absolute path, got {:?}",
                    p.display().to_string()
                ))
            }
        };
        if !(-1000..=1000).contains(&self.oom_score_adj) {
            anyhow::bail!(
                "oom_score_adj: must be between -1000 and 1000, got {}",
                self.oom_score_adj
            );
        }
        abs("root", &self.root, false)?;
        abs("state", &self.state, false)?;
        abs("socket", &self.socket, true)?;
        abs("pause_dir", &self.pause_dir, true)?;
        abs("cni.conf_dir", &self.cni.conf_dir, false)?;
        abs("cni.conf_template", &self.cni.conf_template, true)?;
        abs("registry.config_dir", &self.registry.config_dir, true)?;
        for d in &self.cni.bin_dirs {
            abs("cni.bin_dirs", d, false)?;
        }
        match self.cgroup.driver.as_str() {
            "cgroupfs" => {}
            "systemd" => {
                // systemd names every cgroup from the top of the tree, and a slice's
                // place follows from its name alone.
                if !self.cgroup.root.trim_end_matches('/').is_empty() || self.cgroup.nested {
                    anyhow::bail!(
                        "cgroup.driver = \"systemd\" takes pods where their slice names put them: cgroup.root must be \"/\" and cgroup.nested false"
                    );
                }
            }
            other => anyhow::bail!(
                "cgroup.driver: {other:?} is not supported (\"cgroupfs\" or \"systemd\")"
            ),
        }
        if !self.cgroup.root.starts_with('/') {
            anyhow::bail!(
                "cgroup.root: must start with '/', got {:?}",
                self.cgroup.root
            );
        }
        if tracing_subscriber::EnvFilter::try_new(&self.log_level).is_err() {
            anyhow::bail!("log_level: {:?} is not a level or filter", self.log_level);
        }
        cni_plugins_ifname_ok(&self.cni.ifname).map_err(|e| anyhow::anyhow!("cni.ifname: {e}"))?;
        Ok(())
    }

    pub fn socket_path(&self) -> PathBuf {
        if self.socket.as_os_str().is_empty() {
            self.state.join("crust.sock")
        } else {
            self.socket.clone()
        }
    }

    /// The registry hosts dir, if one is configured.
    pub fn registry_config_dir(&self) -> Option<PathBuf> {
        let d = &self.registry.config_dir;
        (!d.as_os_str().is_empty()).then(|| d.clone())
    }

    pub fn pause_dir(&self) -> PathBuf {
        if self.pause_dir.as_os_str().is_empty() {
            self.state.join("bin")
        } else {
            self.pause_dir.clone()
        }
    }

    /// Every key with its default, as `crustd config default` prints it.
    pub fn default_toml() -> String {
        let body = toml::to_string_pretty(&Config::default()).expect("defaults serialize");
        format!("# crustd configuration: every key with its default value.\n{body}")
    }
}

fn cni_plugins_ifname_ok(name: &str) -> Result<(), String> {
    cni::skeleton::validate_ifname(name).map_err(|e| e.msg)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_round_trip() {
        let text = Config::default_toml();
        assert!(text.contains("conf_dir = \"/etc/cni/net.d\""), "{text}");
        assert_eq!(Config::parse(&text).unwrap(), Config::default());
        assert_eq!(Config::parse("").unwrap(), Config::default());
        assert!(text.contains("require_hugetlb = false"), "{text}");
        let c = Config::parse("[cgroup]\nrequire_hugetlb = true").unwrap();
        assert!(c.cgroup.require_hugetlb);
    }

    #[test]
    fn unknown_keys_and_bad_values_name_the_key() {
        let e = Config::parse("roots = \"/x\"").unwrap_err().to_string();
        assert!(e.contains("roots"), "{e}");
        let e = Config::parse("[cni]\nconfdir = \"/x\"")
            .unwrap_err()
            .to_string();
        assert!(e.contains("confdir"), "{e}");
        let e = Config::parse("root = \"relative\"")
            .unwrap_err()
            .to_string();
        assert!(e.contains("root"), "{e}");
        let e = Config::parse("stop_timeout_seconds = \"ten\"")
            .unwrap_err()
            .to_string();
        assert!(e.contains("stop_timeout_seconds"), "{e}");
        let e = Config::parse("[cgroup]\ndriver = \"cgroupv3\"")
            .unwrap_err()
            .to_string();
        assert!(e.contains("cgroup.driver"), "{e}");
        let e = Config::parse("[cgroup]\ndriver = \"systemd\"\nnested = true")
            .unwrap_err()
            .to_string();
        assert!(e.contains("cgroup.nested"), "{e}");
        let c = Config::parse("[cgroup]\ndriver = \"systemd\"").unwrap();
        assert_eq!(c.cgroup.driver, "systemd");
    }

    #[test]
    fn flags_override_the_file() {
        let mut c = Config::parse("root = \"/a\"\n[cni]\nbin_dirs = [\"/b\"]").unwrap();
        c.apply(Overrides {
            root: Some("/c".into()),
            cni_bin_dirs: vec!["/d".into(), "/e".into()],
            ..Default::default()
        })
        .unwrap();
        assert_eq!(c.root, PathBuf::from("/c"));
        assert_eq!(c.cni.bin_dirs.len(), 2);
        assert_eq!(c.socket_path(), PathBuf::from("/run/crust/crust.sock"));
        assert!(c
            .apply(Overrides {
                state: Some("rel".into()),
                ..Default::default()
            })
            .is_err());
    }
}
