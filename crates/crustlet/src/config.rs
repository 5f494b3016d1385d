//! The crustlet's settings: the kubelet's flag names, and a `--config` file (TOML) of the
//! same keys. A flag given on the command line wins over the file, the file over the
//! default. Unknown flags and unknown keys are errors that name them.

use anyhow::{bail, Context};
use clap::{ArgAction, Parser};
use serde::Deserialize;
use std::path::PathBuf;

pub const DEFAULT_ENDPOINT: &str = "unix:///run/crust/crust.sock";

#[derive(Parser, Debug, Default)]
// A flag given twice takes its last value, as with the kubelet's flags (a systemd
// drop-in that appends `--eviction-hard=...` to the unit's flags overrides it).
#[command(
    name = "crustlet",
    version,
    args_override_self = true,
    about = "A thin kubelet: runs the pods bound to this node through a CRI runtime"
)]
pub struct Flags {
    /// A TOML file with any of the keys below (flag names without the dashes).
    #[arg(long)]
    pub config: Option<PathBuf>,
    /// Kubeconfig for the apiserver; without it (and without --pod-manifest-path) there
    /// is nothing to run.
    #[arg(long)]
    pub kubeconfig: Option<PathBuf>,
    /// The CRI runtime's socket.
    #[arg(long)]
    pub container_runtime_endpoint: Option<String>,
    /// The node's name (default: the hostname, lowercased).
    #[arg(long)]
    pub hostname_override: Option<String>,
    /// The node's InternalIP (default: the first non-loopback IPv4 address).
    #[arg(long)]
    pub node_ip: Option<String>,
    /// Volumes, pod records and certificates live here.
    #[arg(long)]
    pub root_dir: Option<PathBuf>,
    /// TLS certificates (the HTTPS server of the next round).
    #[arg(long)]
    pub cert_dir: Option<PathBuf>,
    /// Prefix of the pod cgroups (`<root>/kubepods/...`; with the systemd driver only
    /// `/`, the pods' slices being `kubepods.slice` and below).
    #[arg(long)]
    pub cgroup_root: Option<String>,
    /// `cgroupfs` or `systemd`: how pod cgroups are made, which must be the runtime's
    /// way. A runtime that answers CRI `RuntimeConfig` (crustd) says which, and its
    /// answer wins, as with the kubelet's `KubeletCgroupDriverFromCRI`; this is for one
    /// that does not (containerd before 1.7). Default cgroupfs.
    #[arg(long, value_parser = ["cgroupfs", "systemd"])]
    pub cgroup_driver: Option<String>,
    /// Where the pods' log folders go (the kubelet's `podLogsDir`).
    #[arg(long)]
    pub pod_logs_dir: Option<PathBuf>,
    /// A folder of static pod manifests (YAML or JSON).
    #[arg(long)]
    pub pod_manifest_path: Option<PathBuf>,
    /// Cluster DNS servers for ClusterFirst pods (repeat, or comma-separated).
    #[arg(long, value_delimiter = ',')]
    pub cluster_dns: Vec<String>,
    /// The cluster's DNS domain (search paths of ClusterFirst pods).
    #[arg(long)]
    pub cluster_domain: Option<String>,
    /// Pods this node takes at most (its `pods` capacity).
    #[arg(long)]
    pub max_pods: Option<u32>,
    /// Pods being started at once at most (sandbox, containers); the rest wait their
    /// turn. Default: four per core.
    #[arg(long)]
    pub max_parallel_pod_starts: Option<u32>,
    /// Sysctls pods may set besides the safe ones (names, or prefixes ending in `*`,
    /// comma-separated); each must be known to be namespaced.
    #[arg(long, value_delimiter = ',')]
    pub allowed_unsafe_sysctls: Vec<String>,
    /// Image filesystem usage (percent) at which unused images are removed.
    #[arg(long)]
    pub image_gc_high_threshold: Option<u8>,
    /// Usage (percent) image garbage collection brings it down to.
    #[arg(long)]
    pub image_gc_low_threshold: Option<u8>,
    /// How long an image stays unused before garbage collection may remove it, as a Go
    /// duration (`2m0s`, `90s`, `0s`).
    #[arg(long)]
    pub minimum_image_ttl_duration: Option<String>,
    /// Hard eviction thresholds, as the kubelet's flag (`memory.available<100Mi,
    /// nodefs.available<10%,...`): the pressure conditions and allocatable follow them.
    #[arg(long)]
    pub eviction_hard: Option<String>,
    /// The crustlet's own `oom_score_adj` (-1000 to 1000), set at start as the kubelet's
    /// flag of the same name: the kernel's OOM killer takes pods before the node agent.
    #[arg(long, allow_hyphen_values = true, value_parser = clap::value_parser!(i32).range(-1000..=1000))]
    pub oom_score_adj: Option<i32>,
    /// Labels for the Node, `k=v,k2=v2`.
    #[arg(long, value_delimiter = ',')]
    pub node_labels: Vec<String>,
    /// Register the Node object with the apiserver.
    #[arg(long, num_args = 0..=1, default_missing_value = "true", action = ArgAction::Set)]
    pub register_node: Option<bool>,
    /// Keep a route to every other Ready Node's pod CIDR via its InternalIP (nodes on
    /// one L2 segment, as flannel's host-gw backend). Off by default: a cluster network
    /// (Calico, Cilium, flannel) does this itself.
    #[arg(long, num_args = 0..=1, default_missing_value = "true", action = ArgAction::Set)]
    pub pod_routes: Option<bool>,
    /// Log verbosity as the kubelet counts it (0-10); 4 and up is debug.
    #[arg(long = "v", short = 'v')]
    pub verbosity: Option<u8>,
    /// Log level or tracing filter (wins over --v).
    #[arg(long)]
    pub log_level: Option<String>,
    #[command(flatten)]
    pub server: ServerFlags,
}

/// The HTTPS server's flags (the kubelet's names and defaults).
#[derive(clap::Args, Debug, Default, Clone)]
pub struct ServerFlags {
    /// The address the server listens on.
    #[arg(long)]
    pub address: Option<String>,
    /// The HTTPS port (logs, exec, port-forward, stats); 0 turns the server off.
    #[arg(long)]
    pub port: Option<u16>,
    /// A plain-HTTP port without authentication for healthz, pods, stats and metrics
    /// (0: off, the default).
    #[arg(long)]
    pub read_only_port: Option<u16>,
    /// The serving certificate (PEM); without it one is made in --cert-dir.
    #[arg(long)]
    pub tls_cert_file: Option<PathBuf>,
    /// The serving certificate's key (PEM).
    #[arg(long)]
    pub tls_private_key_file: Option<PathBuf>,
    /// Client certificates signed by these CAs authenticate as their CN (groups: O).
    #[arg(long)]
    pub client_ca_file: Option<PathBuf>,
    /// Requests no other method authenticates are system:anonymous (default true).
    #[arg(long, num_args = 0..=1, default_missing_value = "true", action = ArgAction::Set)]
    pub anonymous_auth: Option<bool>,
    /// Bearer tokens are checked through the apiserver's TokenReview (default false).
    #[arg(long, num_args = 0..=1, default_missing_value = "true", action = ArgAction::Set)]
    pub authentication_token_webhook: Option<bool>,
    /// AlwaysAllow, or Webhook (SubjectAccessReview on nodes/proxy, stats, metrics, log).
    #[arg(long)]
    pub authorization_mode: Option<String>,
    /// A container's log is rotated at this size (a quantity: 10Mi).
    #[arg(long)]
    pub container_log_max_size: Option<String>,
    /// Log files kept per container, the current one included (at least 2).
    #[arg(long)]
    pub container_log_max_files: Option<u32>,
}

/// The file: the same keys as the flags.
#[derive(Deserialize, Debug, Default)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
struct File {
    kubeconfig: Option<PathBuf>,
    container_runtime_endpoint: Option<String>,
    hostname_override: Option<String>,
    node_ip: Option<String>,
    root_dir: Option<PathBuf>,
    cert_dir: Option<PathBuf>,
    cgroup_root: Option<String>,
    cgroup_driver: Option<String>,
    pod_logs_dir: Option<PathBuf>,
    pod_manifest_path: Option<PathBuf>,
    #[serde(default)]
    cluster_dns: Vec<String>,
    cluster_domain: Option<String>,
    max_pods: Option<u32>,
    max_parallel_pod_starts: Option<u32>,
    #[serde(default)]
    allowed_unsafe_sysctls: Vec<String>,
    image_gc_high_threshold: Option<u8>,
    image_gc_low_threshold: Option<u8>,
    minimum_image_ttl_duration: Option<String>,
    eviction_hard: Option<String>,
    oom_score_adj: Option<i32>,
    #[serde(default)]
    node_labels: Vec<String>,
    register_node: Option<bool>,
    pod_routes: Option<bool>,
    v: Option<u8>,
    log_level: Option<String>,
    address: Option<String>,
    port: Option<u16>,
    read_only_port: Option<u16>,
    tls_cert_file: Option<PathBuf>,
    tls_private_key_file: Option<PathBuf>,
    client_ca_file: Option<PathBuf>,
    anonymous_auth: Option<bool>,
    authentication_token_webhook: Option<bool>,
    authorization_mode: Option<String>,
    container_log_max_size: Option<String>,
    container_log_max_files: Option<u32>,
}

/// The HTTPS server's settings, resolved.
#[derive(Debug, Clone)]
pub struct ServerConfig {
    pub address: String,
    pub port: u16,
    pub read_only_port: u16,
    pub tls_cert_file: Option<PathBuf>,
    pub tls_private_key_file: Option<PathBuf>,
    pub client_ca_file: Option<PathBuf>,
    pub anonymous_auth: bool,
    pub token_webhook: bool,
    pub authorization_mode: crate::server::auth::Mode,
    pub log_max_size: u64,
    pub log_max_files: usize,
}

impl ServerConfig {
    fn resolve(f: ServerFlags, file: &mut File) -> anyhow::Result<ServerConfig> {
        let mode = f
            .authorization_mode
            .or(file.authorization_mode.take())
            .unwrap_or_else(|| "AlwaysAllow".into());
        let max_files = f
            .container_log_max_files
            .or(file.container_log_max_files)
            .unwrap_or(5);
        if max_files < 2 {
            bail!("--container-log-max-files {max_files}: must be at least 2");
        }
        let size = f
            .container_log_max_size
            .or(file.container_log_max_size.take())
            .unwrap_or_else(|| "10Mi".into());
        Ok(ServerConfig {
            address: f
                .address
                .or(file.address.take())
                .unwrap_or_else(|| "0.0.0.0".into()),
            port: f.port.or(file.port).unwrap_or(10250),
            read_only_port: f.read_only_port.or(file.read_only_port).unwrap_or(0),
            tls_cert_file: f.tls_cert_file.or(file.tls_cert_file.take()),
            tls_private_key_file: f.tls_private_key_file.or(file.tls_private_key_file.take()),
            client_ca_file: f.client_ca_file.or(file.client_ca_file.take()),
            anonymous_auth: f.anonymous_auth.or(file.anonymous_auth).unwrap_or(true),
            token_webhook: f
                .authentication_token_webhook
                .or(file.authentication_token_webhook)
                .unwrap_or(false),
            authorization_mode: mode.parse().map_err(anyhow::Error::msg)?,
            log_max_size: crate::server::logs::parse_size(&size).map_err(anyhow::Error::msg)?,
            log_max_files: max_files as usize,
        })
    }
}

/// How pod cgroups are made: directories (`cgroupfs`), or systemd slices over D-Bus.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Driver {
    Cgroupfs,
    Systemd,
}

impl Driver {
    /// The kubelet's name for it.
    pub fn name(self) -> &'static str {
        match self {
            Driver::Cgroupfs => "cgroupfs",
            Driver::Systemd => "systemd",
        }
    }
}

/// Everything resolved.
#[derive(Debug, Clone)]
pub struct Config {
    pub kubeconfig: Option<PathBuf>,
    /// The socket path (the `unix://` scheme taken off).
    pub runtime_socket: PathBuf,
    pub node_name: String,
    pub node_ip: Option<String>,
    pub root_dir: PathBuf,
    pub cert_dir: PathBuf,
    pub cgroup_root: String,
    /// The driver of `--cgroup-driver` (or the file), if given.
    pub cgroup_driver: Option<Driver>,
    /// The driver in use, once the runtime was asked (see [`crate::cgroup::ready`]).
    pub driver_in_use: std::sync::OnceLock<Driver>,
    pub pod_logs_dir: PathBuf,
    pub pod_manifest_path: Option<PathBuf>,
    pub cluster_dns: Vec<String>,
    pub cluster_domain: String,
    pub max_pods: u32,
    /// Pods being started at once at most: a node filled at once (a Deployment scaled
    /// up, the crustlet restarted) would otherwise have every pod's sync, with its CRI
    /// calls and buffers, in flight together, and the heap they leave behind holes
    /// between the pods' long-lived state (63 KiB resident per pod at 250 pods, against
    /// 31 KiB with 8 at once, and no slower: the runtime's cores are the bound).
    pub max_parallel_pod_starts: usize,
    /// The sysctls pods may set: the safe ones and `--allowed-unsafe-sysctls`.
    pub sysctls: crate::worker::admit::Sysctls,
    /// `--allowed-unsafe-sysctls` as given (for `/configz`).
    pub allowed_unsafe_sysctls: Vec<String>,
    pub image_gc_high: u8,
    pub eviction_hard: crate::node::status::Thresholds,
    pub image_gc_low: u8,
    /// `--minimum-image-ttl-duration`: the kubelet's 2 minutes by default.
    pub image_minimum_gc_age: std::time::Duration,
    /// What the crustlet sets its own `oom_score_adj` to at start (the kubelet's -999).
    pub oom_score_adj: i32,
    pub node_labels: Vec<(String, String)>,
    pub register_node: bool,
    /// Routes to the other Nodes' pod CIDRs (see [`crate::routes`]).
    pub pod_routes: bool,
    pub log_filter: String,
}

impl Config {
    pub fn resolve(flags: Flags) -> anyhow::Result<Config> {
        Ok(Config::resolve_all(flags)?.0)
    }

    /// The settings and the HTTPS server's.
    pub fn resolve_all(mut flags: Flags) -> anyhow::Result<(Config, ServerConfig)> {
        let mut file: File = match &flags.config {
            Some(p) => {
                let text = std::fs::read_to_string(p)
                    .with_context(|| format!("reading --config {}", p.display()))?;
                toml::from_str(&text).with_context(|| format!("in {}", p.display()))?
            }
            None => File::default(),
        };
        let server = ServerConfig::resolve(std::mem::take(&mut flags.server), &mut file)?;
        let pick = |flag: Vec<String>, file: Vec<String>| if flag.is_empty() { file } else { flag };
        let endpoint = flags
            .container_runtime_endpoint
            .or(file.container_runtime_endpoint)
            .unwrap_or_else(|| DEFAULT_ENDPOINT.to_string());
        let runtime_socket = match endpoint.strip_prefix("unix://") {
            Some(p) => PathBuf::from(p),
            None if endpoint.starts_with('/') => PathBuf::from(&endpoint),
            None => bail!(
                "--container-runtime-endpoint {endpoint:?}: only unix:// sockets are supported"
            ),
        };
        let node_name = match flags.hostname_override.or(file.hostname_override) {
            Some(n) => n,
            None => nix_hostname()?,
        }
        .to_lowercase();
        let root_dir = flags
            .root_dir
            .or(file.root_dir)
            .unwrap_or_else(|| PathBuf::from("/var/lib/crustlet"));
        let cert_dir = flags
            .cert_dir
            .or(file.cert_dir)
            .unwrap_or_else(|| root_dir.join("pki"));
        let mut node_labels = Vec::new();
        for l in pick(flags.node_labels, file.node_labels) {
            match l.split_once('=') {
                Some((k, v)) if !k.is_empty() => node_labels.push((k.to_string(), v.to_string())),
                _ => bail!("--node-labels: {l:?} is not key=value"),
            }
        }
        let log_filter = match flags.log_level.or(file.log_level) {
            Some(l) => l,
            None => match flags.verbosity.or(file.v).unwrap_or(0) {
                0..=1 => "info",
                2..=3 => "info,crustlet=debug",
                4..=5 => "debug",
                _ => "trace",
            }
            .to_string(),
        };
        let unsafe_sysctls = pick(flags.allowed_unsafe_sysctls, file.allowed_unsafe_sysctls);
        let image_minimum_gc_age = match flags
            .minimum_image_ttl_duration
            .or(file.minimum_image_ttl_duration)
        {
            Some(d) => go_duration(&d).ok_or_else(|| {
                anyhow::anyhow!("minimum-image-ttl-duration {d:?}: not a duration like 2m0s")
            })?,
            None => std::time::Duration::from_secs(120),
        };
        let oom_score_adj = flags.oom_score_adj.or(file.oom_score_adj).unwrap_or(-999);
        if !(-1000..=1000).contains(&oom_score_adj) {
            bail!("oom-score-adj {oom_score_adj}: must be between -1000 and 1000");
        }
        let cfg = Config {
            kubeconfig: flags.kubeconfig.or(file.kubeconfig),
            runtime_socket,
            node_name,
            node_ip: flags.node_ip.or(file.node_ip),
            root_dir,
            cert_dir,
            cgroup_root: flags
                .cgroup_root
                .or(file.cgroup_root)
                .unwrap_or_else(|| "/".to_string()),
            cgroup_driver: match flags.cgroup_driver.or(file.cgroup_driver).as_deref() {
                None => None,
                Some("cgroupfs") => Some(Driver::Cgroupfs),
                Some("systemd") => Some(Driver::Systemd),
                Some(other) => {
                    bail!("cgroup-driver {other:?}: it is either \"cgroupfs\" or \"systemd\"")
                }
            },
            driver_in_use: std::sync::OnceLock::new(),
            pod_logs_dir: flags
                .pod_logs_dir
                .or(file.pod_logs_dir)
                .unwrap_or_else(|| PathBuf::from("/var/log/pods")),
            pod_manifest_path: flags.pod_manifest_path.or(file.pod_manifest_path),
            cluster_dns: pick(flags.cluster_dns, file.cluster_dns),
            cluster_domain: flags
                .cluster_domain
                .or(file.cluster_domain)
                .unwrap_or_else(|| "cluster.local".to_string()),
            max_pods: flags.max_pods.or(file.max_pods).unwrap_or(110),
            oom_score_adj,
            image_minimum_gc_age,
            max_parallel_pod_starts: flags
                .max_parallel_pod_starts
                .or(file.max_parallel_pod_starts)
                .map(|n| n.max(1) as usize)
                .unwrap_or_else(|| 4 * std::thread::available_parallelism().map_or(1, |n| n.get())),
            sysctls: crate::worker::admit::Sysctls::for_node(
                crate::worker::admit::kernel_version(),
                &unsafe_sysctls,
            )
            .map_err(|e| anyhow::anyhow!("--allowed-unsafe-sysctls: {e}"))?,
            allowed_unsafe_sysctls: unsafe_sysctls,
            eviction_hard: match flags.eviction_hard.or(file.eviction_hard) {
                Some(e) => {
                    crate::node::status::Thresholds::parse(&e).map_err(anyhow::Error::msg)?
                }
                None => Default::default(),
            },
            image_gc_high: flags
                .image_gc_high_threshold
                .or(file.image_gc_high_threshold)
                .unwrap_or(85),
            image_gc_low: flags
                .image_gc_low_threshold
                .or(file.image_gc_low_threshold)
                .unwrap_or(80),
            node_labels,
            register_node: flags.register_node.or(file.register_node).unwrap_or(true),
            pod_routes: flags.pod_routes.or(file.pod_routes).unwrap_or(false),
            log_filter,
        };
        if cfg.image_gc_low > cfg.image_gc_high || cfg.image_gc_high > 100 {
            bail!(
                "--image-gc-low-threshold ({}) must not exceed --image-gc-high-threshold ({}), nor that 100",
                cfg.image_gc_low,
                cfg.image_gc_high
            );
        }
        if cfg.kubeconfig.is_none() && cfg.pod_manifest_path.is_none() {
            bail!(
                "nothing to run: give --kubeconfig (pods from an apiserver) or --pod-manifest-path (static pods), or both"
            );
        }
        Ok((cfg, server))
    }

    /// `<root-dir>/pods/<uid>`: the pod's volumes and files.
    pub fn pod_dir(&self, uid: &str) -> PathBuf {
        self.root_dir.join("pods").join(uid)
    }

    /// The driver in use: the runtime's once known, until then the flag's (cgroupfs
    /// by default).
    pub fn driver(&self) -> Driver {
        self.driver_in_use
            .get()
            .copied()
            .or(self.cgroup_driver)
            .unwrap_or(Driver::Cgroupfs)
    }

    /// The cgroup of all pods: `<root>/kubepods`, or the slice `/kubepods.slice`.
    pub fn kubepods_cgroup(&self) -> String {
        match self.driver() {
            Driver::Systemd => "/kubepods.slice".to_string(),
            Driver::Cgroupfs => format!("{}/kubepods", self.cgroup_root.trim_end_matches('/')),
        }
    }

    /// The cgroup of the QoS class `class` (`burstable`, `besteffort`).
    pub fn qos_cgroup(&self, class: &str) -> String {
        match self.driver() {
            Driver::Systemd => format!("/kubepods.slice/kubepods-{class}.slice"),
            Driver::Cgroupfs => format!("{}/{class}", self.kubepods_cgroup()),
        }
    }

    /// The cgroup parent of a pod of `qos`, as the kubelet names it: with the systemd
    /// driver the path its slice expands to (`kubepods-burstable-pod<uid>.slice`, the
    /// uid's dashes as underscores, for a dash is a level in a slice's name), which is
    /// what the kubelet sends as the sandbox's cgroup parent.
    pub fn pod_cgroup(&self, qos: &str, uid: &str) -> String {
        let class = match qos {
            "Guaranteed" => None,
            "Burstable" => Some("burstable"),
            _ => Some("besteffort"),
        };
        match (self.driver(), class) {
            (Driver::Systemd, None) => {
                format!(
                    "/kubepods.slice/kubepods-pod{}.slice",
                    uid.replace('-', "_")
                )
            }
            (Driver::Systemd, Some(c)) => format!(
                "{}/kubepods-{c}-pod{}.slice",
                self.qos_cgroup(c),
                uid.replace('-', "_")
            ),
            (Driver::Cgroupfs, None) => format!("{}/pod{uid}", self.kubepods_cgroup()),
            (Driver::Cgroupfs, Some(c)) => format!("{}/pod{uid}", self.qos_cgroup(c)),
        }
    }
}

fn nix_hostname() -> anyhow::Result<String> {
    let h = std::fs::read_to_string("/proc/sys/kernel/hostname").context("reading the hostname")?;
    Ok(h.trim().to_string())
}

/// A Go duration as the kubelet's flags take it: numbers with `h`, `m`, `s`, `ms`,
/// `us`/`µs` or `ns` (`2m0s`, `1.5h`, `0`).
pub fn go_duration(s: &str) -> Option<std::time::Duration> {
    if s == "0" {
        return Some(std::time::Duration::ZERO);
    }
    let mut rest = s;
    let mut total = 0f64;
    if rest.is_empty() {
        return None;
    }
    while !rest.is_empty() {
        let n = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .filter(|&n| n > 0)?;
        let value: f64 = rest[..n].parse().ok()?;
        rest = &rest[n..];
        let unit = ["ns", "us", "µs", "ms", "h", "m", "s"]
            .into_iter()
            .find(|u| rest.starts_with(u))?;
        rest = &rest[unit.len()..];
        total += value
            * match unit {
                "ns" => 1e-9,
                "us" | "µs" => 1e-6,
                "ms" => 1e-3,
                "s" => 1.0,
                "m" => 60.0,
                _ => 3600.0,
            };
    }
    Some(std::time::Duration::from_secs_f64(total))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(args: &[&str]) -> Result<Config, String> {
        let f = Flags::try_parse_from(std::iter::once("crustlet").chain(args.iter().copied()))
            .map_err(|e| e.to_string())?;
        Config::resolve(f).map_err(|e| format!("{e:#}"))
    }

    #[test]
    fn needs_an_apiserver_or_a_manifest_folder() {
        let e = parse(&[]).unwrap_err();
        assert!(
            e.contains("--kubeconfig") && e.contains("--pod-manifest-path"),
            "{e}"
        );
        assert!(parse(&["--pod-manifest-path", "/etc/kubernetes/manifests"]).is_ok());
    }

    /// A flag given twice takes its last value, as the kubelet's do.
    #[test]
    fn the_last_of_a_repeated_flag_wins() {
        let c = parse(&["--kubeconfig=k", "--max-pods=30", "--max-pods=70"]).unwrap();
        assert_eq!(c.max_pods, 70);
    }

    #[test]
    fn go_durations() {
        use std::time::Duration;
        assert_eq!(go_duration("2m0s"), Some(Duration::from_secs(120)));
        assert_eq!(go_duration("0s"), Some(Duration::ZERO));
        assert_eq!(go_duration("0"), Some(Duration::ZERO));
        assert_eq!(go_duration("1.5h"), Some(Duration::from_secs(5400)));
        assert_eq!(go_duration("300ms"), Some(Duration::from_millis(300)));
        for bad in ["", "2", "m", "2x", "-1s"] {
            assert_eq!(go_duration(bad), None, "{bad}");
        }
        let c = parse(&["--kubeconfig=k", "--minimum-image-ttl-duration=30s"]).unwrap();
        assert_eq!(c.image_minimum_gc_age, Duration::from_secs(30));
        assert!(parse(&["--kubeconfig=k", "--minimum-image-ttl-duration=soon"]).is_err());
    }

    /// The kubelet's default and range; a negative value is taken as a value, not a flag.
    #[test]
    fn oom_score_adj_defaults_to_the_kubelets() {
        assert_eq!(parse(&["--kubeconfig=k"]).unwrap().oom_score_adj, -999);
        let c = parse(&["--kubeconfig=k", "--oom-score-adj", "-500"]).unwrap();
        assert_eq!(c.oom_score_adj, -500);
        let e = parse(&["--kubeconfig=k", "--oom-score-adj=-1001"]).unwrap_err();
        assert!(e.contains("-1001"), "{e}");
    }

    /// The kubelet's systemd names: a slice per level, the uid's dashes underscores;
    /// the runtime's answer wins over the flag once known; a bad driver is named.
    #[test]
    fn systemd_driver_names_pod_slices_as_the_kubelet() {
        let c = parse(&["--kubeconfig=k", "--cgroup-driver=systemd"]).unwrap();
        assert_eq!(c.driver(), Driver::Systemd);
        assert_eq!(c.kubepods_cgroup(), "/kubepods.slice");
        assert_eq!(
            c.pod_cgroup("Burstable", "a-b-c"),
            "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-poda_b_c.slice"
        );
        assert_eq!(
            c.pod_cgroup("BestEffort", "u"),
            "/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-podu.slice"
        );
        assert_eq!(
            c.pod_cgroup("Guaranteed", "u-1"),
            "/kubepods.slice/kubepods-podu_1.slice"
        );
        c.driver_in_use.set(Driver::Cgroupfs).unwrap();
        assert_eq!(c.pod_cgroup("Guaranteed", "u-1"), "/kubepods/podu-1");
        let e = parse(&["--kubeconfig=k", "--cgroup-driver=systemdd"]).unwrap_err();
        assert!(e.contains("systemdd"), "{e}");
    }

    /// `--allowed-unsafe-sysctls` (or the file's key) widens what pods may set; a
    /// pattern not known to be namespaced, or malformed, stops the start, named.
    #[test]
    fn allowed_unsafe_sysctls_from_flag_or_file() {
        let dir = std::env::temp_dir().join(format!("crustlet-cfg3-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let f = dir.join("c.toml");
        std::fs::write(
            &f,
            "kubeconfig = \"k\"\nallowed-unsafe-sysctls = [\"kernel.msg*\"]\n",
        )
        .unwrap();
        let sysctl_pod = |name: &str| -> k8s_openapi::api::core::v1::Pod {
            serde_json::from_value(serde_json::json!({
                "metadata": {"name": "p"},
                "spec": {"containers": [], "securityContext": {"sysctls": [{"name": name, "value": "1"}]}},
            }))
            .unwrap()
        };
        let c = parse(&["--config", f.to_str().unwrap()]).unwrap();
        assert!(crate::worker::admit::admit(&sysctl_pod("kernel.msgmax"), &c.sysctls).is_ok());
        assert!(
            crate::worker::admit::admit(&sysctl_pod("net.core.somaxconn"), &c.sysctls).is_err()
        );
        let c = parse(&[
            "--kubeconfig=k",
            "--allowed-unsafe-sysctls=net.*,kernel.sem",
        ])
        .unwrap();
        assert!(crate::worker::admit::admit(&sysctl_pod("net.core.somaxconn"), &c.sysctls).is_ok());
        assert!(crate::worker::admit::admit(&sysctl_pod("kernel.msgmax"), &c.sysctls).is_err());
        let c = parse(&["--kubeconfig=k"]).unwrap();
        assert!(
            crate::worker::admit::admit(&sysctl_pod("kernel.shm_rmid_forced"), &c.sysctls).is_ok()
        );
        let e = parse(&["--kubeconfig=k", "--allowed-unsafe-sysctls=kernel.panic"]).unwrap_err();
        assert!(
            e.contains("--allowed-unsafe-sysctls") && e.contains("kernel.panic"),
            "{e}"
        );
        std::fs::remove_dir_all(&dir).ok();
    }

    #[test]
    fn unknown_flags_and_keys_are_named() {
        let e = parse(&["--kubeconfig", "k", "--no-such-flag"]).unwrap_err();
        assert!(e.contains("--no-such-flag"), "{e}");
        let dir = std::env::temp_dir().join(format!("crustlet-cfg-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let f = dir.join("c.toml");
        std::fs::write(&f, "kubeconfig = \"k\"\nmax-podz = 3\n").unwrap();
        let e = parse(&["--config", f.to_str().unwrap()]).unwrap_err();
        assert!(e.contains("max-podz"), "{e}");
        std::fs::remove_dir_all(&dir).ok();
    }

    #[test]
    fn flags_win_over_the_file_and_defaults_fill_the_rest() {
        let dir = std::env::temp_dir().join(format!("crustlet-cfg2-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let f = dir.join("c.toml");
        std::fs::write(
            &f,
            "kubeconfig = \"/k\"\nmax-pods = 7\ncluster-dns = [\"10.0.0.10\"]\nhostname-override = \"FileNode\"\n",
        )
        .unwrap();
        let c = parse(&[
            "--config",
            f.to_str().unwrap(),
            "--max-pods=9",
            "--register-node=false",
            "--node-labels=a=b,c=",
            "--v=4",
        ])
        .unwrap();
        assert_eq!(c.max_pods, 9);
        assert_eq!(c.cluster_dns, ["10.0.0.10"]);
        assert_eq!(c.node_name, "filenode");
        assert!(!c.register_node);
        assert!(!c.pod_routes);
        assert_eq!(
            c.node_labels,
            [("a".into(), "b".into()), ("c".into(), "".into())]
        );
        assert_eq!(c.log_filter, "debug");
        assert_eq!(c.runtime_socket, PathBuf::from("/run/crust/crust.sock"));
        assert_eq!(c.cluster_domain, "cluster.local");
        assert_eq!(c.pod_cgroup("Burstable", "u1"), "/kubepods/burstable/podu1");
        assert_eq!((c.cgroup_driver, c.driver()), (None, Driver::Cgroupfs));
        assert_eq!(c.qos_cgroup("besteffort"), "/kubepods/besteffort");
        let cores = std::thread::available_parallelism().unwrap().get();
        assert_eq!(c.max_parallel_pod_starts, 4 * cores);
        std::fs::write(&f, "kubeconfig = \"/k\"\nmax-parallel-pod-starts = 3\n").unwrap();
        let c = parse(&["--config", f.to_str().unwrap()]).unwrap();
        assert_eq!(c.max_parallel_pod_starts, 3);
        let c = parse(&["--kubeconfig=k", "--max-parallel-pod-starts=0"]).unwrap();
        assert_eq!(c.max_parallel_pod_starts, 1, "0 would start nothing");
        let f = Flags::try_parse_from(["crustlet", "--kubeconfig=k", "--anonymous-auth=false"])
            .unwrap();
        let (_, s) = Config::resolve_all(f).unwrap();
        assert_eq!(
            (s.port, s.read_only_port, s.address.as_str()),
            (10250, 0, "0.0.0.0")
        );
        assert!(!s.anonymous_auth && !s.token_webhook);
        assert_eq!(s.authorization_mode, crate::server::auth::Mode::AlwaysAllow);
        assert_eq!((s.log_max_size, s.log_max_files), (10 << 20, 5));
        let e = parse(&["--kubeconfig=k", "--container-runtime-endpoint=tcp://x:1"]).unwrap_err();
        assert!(e.contains("unix://"), "{e}");
        let e = parse(&["--kubeconfig=k", "--authorization-mode=RBAC"]).unwrap_err();
        assert!(e.contains("AlwaysAllow or Webhook"), "{e}");
        let e = parse(&["--kubeconfig=k", "--container-log-max-files=1"]).unwrap_err();
        assert!(e.contains("at least 2"), "{e}");
        std::fs::remove_dir_all(&dir).ok();
    }
}
