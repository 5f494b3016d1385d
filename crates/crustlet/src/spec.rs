//! A Pod in, the CRI requests out: `PodSandboxConfig` and `ContainerConfig` shaped as
//! the kubelet shapes them (labels, annotations, log paths, DNS, ports, namespaces,
//! resources, security context), so a runtime cannot tell the crustlet from a kubelet.

use crate::config::Config;
use crate::quantity::{milli, value, BadQuantity};
use cri_api as cri;
use k8s_openapi::api::core::v1::{Container, Pod, PodSpec, ResourceRequirements};
use std::collections::HashMap;
use std::path::{Path, PathBuf};

pub const POD_NAME: &str = "io.kubernetes.pod.name";
pub const POD_NAMESPACE: &str = "io.kubernetes.pod.namespace";
pub const POD_UID: &str = "io.kubernetes.pod.uid";
pub const CONTAINER_NAME: &str = "io.kubernetes.container.name";
pub const RESTART_COUNT: &str = "io.kubernetes.container.restartCount";
pub const TERMINATION_MESSAGE_PATH: &str = "io.kubernetes.container.terminationMessagePath";
pub const GRACE: &str = "io.kubernetes.pod.terminationGracePeriod";
pub const CONTAINER_HASH: &str = "io.kubernetes.container.hash";

/// The container's hash annotation: of its image, the one field of a container in a
/// pod's spec that can change (FNV-1a, so it stays the same across builds).
pub fn container_hash(c: &Container) -> String {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in c.image.as_deref().unwrap_or("").bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    format!("{h:x}")
}

/// CFS period the kubelet uses for every container.
const CPU_PERIOD: i64 = 100_000;

pub fn name(pod: &Pod) -> &str {
    pod.metadata.name.as_deref().unwrap_or("")
}

pub fn namespace(pod: &Pod) -> &str {
    pod.metadata.namespace.as_deref().unwrap_or("default")
}

pub fn uid(pod: &Pod) -> &str {
    pod.metadata.uid.as_deref().unwrap_or("")
}

/// The pod's spec, borrowed: a clone is a deep copy of every container, volume and
/// toleration, which a sync of each of 250 pods would make several times over.
pub fn spec(pod: &Pod) -> &PodSpec {
    static EMPTY: std::sync::LazyLock<PodSpec> = std::sync::LazyLock::new(PodSpec::default);
    pod.spec.as_ref().unwrap_or(&EMPTY)
}

/// `namespace/name`, for logs and events.
pub fn key(pod: &Pod) -> String {
    format!("{}/{}", namespace(pod), name(pod))
}

/// The pod's QoS class: the apiserver's when it set one (static pods have none).
pub fn qos(pod: &Pod) -> String {
    if let Some(q) = pod.status.as_ref().and_then(|s| s.qos_class.clone()) {
        return q;
    }
    let spec = spec(pod);
    let all: Vec<&Container> = spec
        .containers
        .iter()
        .chain(spec.init_containers.iter().flatten())
        .collect();
    let res = |c: &Container, limits: bool, r: &str| {
        c.resources
            .as_ref()
            .and_then(|x| {
                if limits {
                    x.limits.as_ref()
                } else {
                    x.requests.as_ref()
                }
            })
            .and_then(|m| m.get(r))
            .is_some_and(|q| milli(q).is_ok_and(|v| v != 0))
    };
    let any = all.iter().any(|c| {
        ["cpu", "memory"]
            .iter()
            .any(|r| res(c, true, r) || res(c, false, r))
    });
    if !any {
        return "BestEffort".into();
    }
    let guaranteed = all.iter().all(|c| {
        ["cpu", "memory"].iter().all(|r| {
            let rr = c.resources.clone().unwrap_or_default();
            let l = rr.limits.as_ref().and_then(|m| m.get(*r)).cloned();
            let q = rr
                .requests
                .as_ref()
                .and_then(|m| m.get(*r))
                .cloned()
                .or(l.clone());
            match (l, q) {
                (Some(l), Some(q)) => {
                    milli(&l).ok() == milli(&q).ok() && milli(&l).is_ok_and(|v| v > 0)
                }
                _ => false,
            }
        })
    });
    if guaranteed {
        "Guaranteed"
    } else {
        "Burstable"
    }
    .into()
}

/// `<pod logs dir>/<namespace>_<name>_<uid>`, where the runtime writes the pod's logs.
pub fn log_directory(cfg: &Config, pod: &Pod) -> String {
    cfg.pod_logs_dir
        .join(format!("{}_{}_{}", namespace(pod), name(pod), uid(pod)))
        .to_string_lossy()
        .into_owned()
}

/// The sandbox of `pod`, `attempt` counting the sandboxes made for it before.
pub fn sandbox_config(
    cfg: &Config,
    pod: &Pod,
    attempt: u32,
    source: &str,
) -> cri::PodSandboxConfig {
    let spec = spec(pod);
    let host_network = spec.host_network.unwrap_or(false);
    let mut labels: HashMap<String, String> = pod
        .metadata
        .labels
        .clone()
        .unwrap_or_default()
        .into_iter()
        .collect();
    labels.insert(POD_NAME.into(), name(pod).into());
    labels.insert(POD_NAMESPACE.into(), namespace(pod).into());
    labels.insert(POD_UID.into(), uid(pod).into());
    let mut annotations: HashMap<String, String> = pod
        .metadata
        .annotations
        .clone()
        .unwrap_or_default()
        .into_iter()
        .collect();
    annotations.insert("kubernetes.io/config.source".into(), source.into());
    let (hostname, domain) = hostname_and_domain(cfg, pod);
    // setHostnameAsFQDN: the kernel's hostname is the whole name.
    let hostname = match domain {
        Some(d) if spec.set_hostname_as_fqdn == Some(true) => format!("{hostname}.{d}"),
        _ => hostname,
    };
    let psc = spec.security_context.clone().unwrap_or_default();
    let privileged = spec
        .containers
        .iter()
        .chain(spec.init_containers.iter().flatten())
        .any(|c| {
            c.security_context
                .as_ref()
                .and_then(|s| s.privileged)
                .unwrap_or(false)
        });
    cri::PodSandboxConfig {
        metadata: Some(cri::PodSandboxMetadata {
            name: name(pod).into(),
            uid: uid(pod).into(),
            namespace: namespace(pod).into(),
            attempt,
        }),
        // A pod on the node's network has the node's hostname: the kubelet sends none.
        hostname: if host_network {
            String::new()
        } else {
            hostname
        },
        log_directory: log_directory(cfg, pod),
        dns_config: Some(dns_config(cfg, pod)),
        port_mappings: port_mappings(spec),
        labels,
        annotations,
        linux: Some(cri::LinuxPodSandboxConfig {
            cgroup_parent: cfg.pod_cgroup(&qos(pod), uid(pod)),
            security_context: Some(cri::LinuxSandboxSecurityContext {
                namespace_options: Some(namespaces(spec)),
                run_as_user: psc.run_as_user.map(|value| cri::Int64Value { value }),
                run_as_group: psc.run_as_group.map(|value| cri::Int64Value { value }),
                supplemental_groups: supplemental_groups(&psc),
                privileged,
                seccomp: Some(seccomp(psc.seccomp_profile.as_ref())),
                ..Default::default()
            }),
            sysctls: psc
                .sysctls
                .unwrap_or_default()
                .into_iter()
                .map(|s| (s.name, s.value))
                .collect(),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// The pod's hostname (`hostname`, else its name, cut to 63 characters) and, with a
/// `subdomain`, its domain `<subdomain>.<namespace>.svc.<cluster domain>`.
pub fn hostname_and_domain(cfg: &Config, pod: &Pod) -> (String, Option<String>) {
    let spec = spec(pod);
    let mut hostname = spec
        .hostname
        .clone()
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| name(pod).to_string());
    hostname.truncate(63);
    let hostname = hostname.trim_end_matches(['-', '.']).to_string();
    let domain = spec
        .subdomain
        .clone()
        .filter(|s| !s.is_empty())
        .map(|s| format!("{s}.{}.svc.{}", namespace(pod), cfg.cluster_domain));
    (hostname, domain)
}

/// The `/etc/hosts` the kubelet mounts into every container that does not mount its
/// own: localhost, the pod's addresses under its names, then `hostAliases`. A pod on
/// the node's network gets the node's file with the aliases after it.
pub fn hosts_file(cfg: &Config, pod: &Pod, ips: &[String], node_hosts: &str) -> String {
    let spec = spec(pod);
    let mut out = String::new();
    if spec.host_network.unwrap_or(false) {
        out.push_str("# Kubernetes-managed hosts file (host network).\n");
        out.push_str(node_hosts);
    } else {
        out.push_str("# Kubernetes-managed hosts file.\n");
        out.push_str("127.0.0.1\tlocalhost\n");
        out.push_str("::1\tlocalhost ip6-localhost ip6-loopback\n");
        out.push_str("fe00::0\tip6-localnet\n");
        out.push_str("fe00::0\tip6-mcastprefix\n");
        out.push_str("fe00::1\tip6-allnodes\n");
        out.push_str("fe00::2\tip6-allrouters\n");
        let (hostname, domain) = hostname_and_domain(cfg, pod);
        for ip in ips.iter().filter(|i| !i.is_empty()) {
            match &domain {
                Some(d) => out.push_str(&format!("{ip}\t{hostname}.{d}\t{hostname}\n")),
                None => out.push_str(&format!("{ip}\t{hostname}\n")),
            }
        }
    }
    let aliases = spec.host_aliases.clone().unwrap_or_default();
    if !aliases.is_empty() {
        out.push_str("\n# Entries added by HostAliases.\n");
        for a in aliases {
            let names = a.hostnames.unwrap_or_default().join("\t");
            out.push_str(&format!("{}\t{names}\n", a.ip));
        }
    }
    out
}

/// The pod's extra groups, its fsGroup first (so its processes can read the volumes
/// given to that group), as the kubelet adds them to the sandbox and every container.
fn supplemental_groups(psc: &k8s_openapi::api::core::v1::PodSecurityContext) -> Vec<i64> {
    psc.fs_group
        .into_iter()
        .chain(psc.supplemental_groups.iter().flatten().copied())
        .collect()
}

fn namespaces(spec: &PodSpec) -> cri::NamespaceOption {
    use cri::NamespaceMode::*;
    let mode = |node: Option<bool>, otherwise| if node.unwrap_or(false) { Node } else { otherwise } as i32;
    cri::NamespaceOption {
        network: mode(spec.host_network, Pod),
        pid: mode(
            spec.host_pid,
            if spec.share_process_namespace.unwrap_or(false) {
                Pod
            } else {
                Container
            },
        ),
        ipc: mode(spec.host_ipc, Pod),
        ..Default::default()
    }
}

fn seccomp(p: Option<&k8s_openapi::api::core::v1::SeccompProfile>) -> cri::SecurityProfile {
    use cri::security_profile::ProfileType;
    match p.map(|p| (p.type_.as_str(), p.localhost_profile.clone())) {
        Some(("RuntimeDefault", _)) => cri::SecurityProfile {
            profile_type: ProfileType::RuntimeDefault as i32,
            localhost_ref: String::new(),
        },
        Some(("Localhost", Some(r))) => cri::SecurityProfile {
            profile_type: ProfileType::Localhost as i32,
            localhost_ref: r,
        },
        // The kubelet's default without the SeccompDefault feature gate.
        _ => cri::SecurityProfile {
            profile_type: ProfileType::Unconfined as i32,
            localhost_ref: String::new(),
        },
    }
}

/// The pod annotation naming a container's AppArmor profile (the kubelet v1.28's only
/// source), `container.apparmor.security.beta.kubernetes.io/NAME`.
pub const APPARMOR_ANNOTATION: &str = "container.apparmor.security.beta.kubernetes.io/";

/// A container's AppArmor profile as the kubelet sends it: the `appArmorProfile` of the
/// container's or else the pod's security context (API 1.30 and later) as both CRI
/// fields, as the kubelet 1.30 does; else the annotation's value as the deprecated
/// string alone, as the kubelet 1.28 does; else nothing (the runtime's default).
pub fn apparmor(
    pod: &Pod,
    c: &Container,
) -> Result<(Option<cri::SecurityProfile>, String), String> {
    use cri::security_profile::ProfileType;
    let spec = spec(pod);
    let field = c
        .security_context
        .as_ref()
        .and_then(|sc| sc.app_armor_profile.as_ref())
        .or_else(|| {
            spec.security_context
                .as_ref()
                .and_then(|psc| psc.app_armor_profile.as_ref())
        });
    if let Some(p) = field {
        let (t, reference, string) = match p.type_.as_str() {
            "RuntimeDefault" => (
                ProfileType::RuntimeDefault,
                String::new(),
                "runtime/default".to_string(),
            ),
            "Unconfined" => (
                ProfileType::Unconfined,
                String::new(),
                "unconfined".to_string(),
            ),
            "Localhost" => match p.localhost_profile.as_deref() {
                Some(name) if !name.is_empty() => (
                    ProfileType::Localhost,
                    name.to_string(),
                    format!("localhost/{name}"),
                ),
                _ => return Err("missing localhost apparmor profile name".into()),
            },
            other => return Err(format!("unknown apparmor profile type: {other:?}")),
        };
        return Ok((
            Some(cri::SecurityProfile {
                profile_type: t as i32,
                localhost_ref: reference,
            }),
            string,
        ));
    }
    let annotation = pod
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(&format!("{APPARMOR_ANNOTATION}{}", c.name)))
        .cloned()
        .unwrap_or_default();
    Ok((None, annotation))
}

fn port_mappings(spec: &PodSpec) -> Vec<cri::PortMapping> {
    spec.containers
        .iter()
        .flat_map(|c| c.ports.iter().flatten())
        .filter(|p| p.host_port.is_some_and(|h| h > 0))
        .map(|p| cri::PortMapping {
            protocol: match p.protocol.as_deref() {
                Some("UDP") => cri::Protocol::Udp,
                Some("SCTP") => cri::Protocol::Sctp,
                _ => cri::Protocol::Tcp,
            } as i32,
            container_port: p.container_port,
            host_port: p.host_port.unwrap_or(0),
            host_ip: p.host_ip.clone().unwrap_or_default(),
        })
        .collect()
}

/// The node's own resolver settings (`Default` pods, and the search paths that
/// ClusterFirst pods append).
fn host_resolv() -> (Vec<String>, Vec<String>, Vec<String>) {
    let text = std::fs::read_to_string("/etc/resolv.conf").unwrap_or_default();
    let (mut servers, mut searches, mut options) = (vec![], vec![], vec![]);
    for line in text.lines() {
        let mut w = line.split_whitespace();
        match w.next() {
            Some("nameserver") => servers.extend(w.next().map(str::to_string)),
            Some("search") | Some("domain") => searches = w.map(str::to_string).collect(),
            Some("options") => options.extend(w.map(str::to_string)),
            _ => {}
        }
    }
    (servers, searches, options)
}

/// Whether the pod asks for the cluster's DNS and the node has none configured (the
/// kubelet then falls back to the node's resolver and posts MissingClusterDNS).
pub fn missing_cluster_dns(cfg: &Config, pod: &Pod) -> bool {
    let spec = spec(pod);
    let wants = match spec.dns_policy.as_deref().unwrap_or("ClusterFirst") {
        "ClusterFirstWithHostNet" => true,
        "ClusterFirst" => !spec.host_network.unwrap_or(false),
        _ => false,
    };
    wants && cfg.cluster_dns.is_empty()
}

/// `dnsPolicy` and `dnsConfig` as the kubelet resolves them.
pub fn dns_config(cfg: &Config, pod: &Pod) -> cri::DnsConfig {
    let spec = spec(pod);
    let policy = spec.dns_policy.as_deref().unwrap_or("ClusterFirst");
    let host_network = spec.host_network.unwrap_or(false);
    let cluster = match policy {
        "ClusterFirstWithHostNet" => true,
        "ClusterFirst" => !host_network,
        _ => false,
    } && !cfg.cluster_dns.is_empty();
    let (hs, hsearch, hopts) = host_resolv();
    let mut d = match policy {
        "None" => cri::DnsConfig::default(),
        _ if cluster => {
            let ns = namespace(pod);
            let dom = &cfg.cluster_domain;
            let mut searches = vec![format!("{ns}.svc.{dom}"), format!("svc.{dom}"), dom.clone()];
            searches.extend(hsearch);
            cri::DnsConfig {
                servers: cfg.cluster_dns.clone(),
                searches,
                options: vec!["ndots:5".into()],
            }
        }
        _ => cri::DnsConfig {
            servers: hs,
            searches: hsearch,
            options: hopts,
        },
    };
    if let Some(extra) = &spec.dns_config {
        d.servers
            .extend(extra.nameservers.iter().flatten().cloned());
        d.searches.extend(extra.searches.iter().flatten().cloned());
        for o in extra.options.iter().flatten() {
            let Some(name) = &o.name else { continue };
            d.options
                .retain(|x| x.split(':').next() != Some(name.as_str()));
            d.options.push(match &o.value {
                Some(v) => format!("{name}:{v}"),
                None => name.clone(),
            });
        }
    }
    d.searches.dedup();
    d
}

/// CPU shares, quota and memory limit from a container's requests and limits, and the
/// OOM score the kubelet gives its QoS class.
pub fn resources(
    r: Option<&ResourceRequirements>,
    qos: &str,
    node_memory: i64,
) -> Result<cri::LinuxContainerResources, BadQuantity> {
    let get = |limits: bool, name: &str| {
        r.and_then(|r| {
            if limits {
                r.limits.as_ref()
            } else {
                r.requests.as_ref()
            }
        })
        .and_then(|m| m.get(name))
    };
    let cpu_limit = get(true, "cpu").map(milli).transpose()?;
    let cpu_request = get(false, "cpu").map(milli).transpose()?.or(cpu_limit);
    let mem_limit = get(true, "memory").map(value).transpose()?;
    let mem_request = get(false, "memory").map(value).transpose()?.or(mem_limit);
    let shares = match cpu_request {
        Some(m) if m > 0 => (m * 1024 / 1000).max(2),
        _ => 2,
    };
    let oom = match qos {
        "Guaranteed" => -997,
        "BestEffort" => 1000,
        _ => {
            let req = mem_request.unwrap_or(0);
            let adj = if node_memory > 0 {
                1000 - 1000 * req / node_memory
            } else {
                999
            };
            adj.clamp(2, 999)
        }
    };
    Ok(cri::LinuxContainerResources {
        cpu_period: if cpu_limit.is_some() { CPU_PERIOD } else { 0 },
        cpu_quota: cpu_limit
            .map(|m| (m * CPU_PERIOD / 1000).max(1000))
            .unwrap_or(0),
        cpu_shares: shares,
        memory_limit_in_bytes: mem_limit.unwrap_or(0),
        oom_score_adj: oom,
        ..Default::default()
    })
}

/// The pod cgroup's own limits, as the kubelet's pod container manager sets them, from
/// the pod's requests and limits (the larger of the sum of its containers' and its
/// largest init container's, plus its overhead): CPU shares from the requests (2 for
/// BestEffort); the CFS quota and the memory limit only when every container has that
/// limit (always for Guaranteed).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PodLimits {
    /// The CPU the pod requests, millicores (what its QoS class's cgroup adds up).
    pub cpu_request: i64,
    pub cpu_shares: u64,
    pub cpu_quota: Option<i64>,
    pub memory: Option<i64>,
}

pub fn pod_limits(pod: &Pod) -> Result<PodLimits, BadQuantity> {
    let spec = spec(pod);
    let get = |c: &Container, limits: bool, name: &str| -> Result<i64, BadQuantity> {
        let r = c.resources.as_ref();
        let l = r.and_then(|r| r.limits.as_ref()).and_then(|m| m.get(name));
        let q = if limits {
            l
        } else {
            // A request left out is the limit (the apiserver's defaulting; static pods
            // are not defaulted).
            r.and_then(|r| r.requests.as_ref())
                .and_then(|m| m.get(name))
                .or(l)
        };
        match q {
            Some(q) if name == "cpu" => milli(q),
            Some(q) => value(q),
            None => Ok(0),
        }
    };
    let overhead = |name: &str| -> Result<i64, BadQuantity> {
        match spec.overhead.as_ref().and_then(|o| o.get(name)) {
            Some(q) if name == "cpu" => milli(q),
            Some(q) => value(q),
            None => Ok(0),
        }
    };
    // As the kubelet adds them up: the app containers and the sidecars (restartable init
    // containers, which run beside them), or, if more, an init container with the
    // sidecars started before it; then the pod's overhead.
    let total = |limits: bool, name: &str| -> Result<i64, BadQuantity> {
        let mut sum = 0;
        for c in &spec.containers {
            sum += get(c, limits, name)?;
        }
        let (mut sidecars, mut init) = (0, 0);
        for c in spec.init_containers.iter().flatten() {
            let own = get(c, limits, name)?;
            if c.restart_policy.as_deref() == Some("Always") {
                sum += own;
                sidecars += own;
                init = init.max(sidecars);
            } else {
                init = init.max(own + sidecars);
            }
        }
        Ok(sum.max(init) + overhead(name)?)
    };
    let declared = |name: &str| -> Result<bool, BadQuantity> {
        for c in &spec.containers {
            if get(c, true, name)? == 0 {
                return Ok(false);
            }
        }
        Ok(true)
    };
    let qos = qos(pod);
    let cpu_request = total(false, "cpu")?;
    let cpu_shares = if qos == "BestEffort" || cpu_request == 0 {
        2
    } else {
        (cpu_request as u64 * 1024 / 1000).clamp(2, 262_144)
    };
    let guaranteed = qos == "Guaranteed";
    let cpu_quota = if qos != "BestEffort" && (guaranteed || declared("cpu")?) {
        let limit = total(true, "cpu")?;
        (limit > 0).then(|| (limit * CPU_PERIOD / 1000).max(1000))
    } else {
        None
    };
    let memory = if qos != "BestEffort" && (guaranteed || declared("memory")?) {
        Some(total(true, "memory")?).filter(|m| *m > 0)
    } else {
        None
    };
    Ok(PodLimits {
        cpu_request,
        cpu_shares,
        cpu_quota,
        memory,
    })
}

/// A volume mount made ready: where the volume is on the node.
pub struct VolumePaths<'a> {
    pub dirs: &'a HashMap<String, PathBuf>,
    /// Volumes every mount of is read-only, whatever the mount says.
    pub read_only: &'a std::collections::HashSet<String>,
}

/// The pod's volumes the kubelet mounts read-only in every container: configMap,
/// secret, downwardAPI and projected ones (their files are its to update), and claims
/// the pod takes `readOnly`.
pub fn read_only_volumes(pod: &Pod) -> std::collections::HashSet<String> {
    spec(pod)
        .volumes
        .iter()
        .flatten()
        .filter(|v| {
            v.config_map.is_some()
                || v.secret.is_some()
                || v.downward_api.is_some()
                || v.projected.is_some()
                || v.persistent_volume_claim
                    .as_ref()
                    .is_some_and(|c| c.read_only == Some(true))
        })
        .map(|v| v.name.clone())
        .collect()
}

/// A mount's `subPathExpr` with the container's variables (`$(NAME)`), as the kubelet
/// expands it: a variable that is missing or empty is an error naming it, since the
/// mount would silently become another folder.
pub fn sub_path_expr(expr: &str, envs: &[cri::KeyValue]) -> Result<String, String> {
    let vars: Vec<(String, String)> = envs
        .iter()
        .map(|kv| (kv.key.clone(), kv.value.clone()))
        .collect();
    let mut missing = vec![];
    let mut rest = expr;
    while let Some(i) = rest.find('$') {
        let after = &rest[i + 1..];
        if let Some(a) = after.strip_prefix('$') {
            rest = a;
        } else if let Some((name, tail)) = after.strip_prefix('(').and_then(|b| b.split_once(')')) {
            if !vars.iter().any(|(n, v)| n == name && !v.is_empty()) && !missing.contains(&name) {
                missing.push(name);
            }
            rest = tail;
        } else {
            rest = after;
        }
    }
    if !missing.is_empty() {
        return Err(format!(
            "subPathExpr {expr:?}: missing value for {}",
            missing.join(", ")
        ));
    }
    Ok(crate::inputs::expand(expr, &vars))
}

/// Makes `sub` below the volume's folder `root`, each missing folder with the volume's
/// own mode (the kubelet's `SafeMakeDir` with the volume root's mode), and returns it.
/// What the pod wrote in the volume may hold symlinks: the path is resolved, and one
/// that leads outside the volume is refused (as the kubelet refuses it), never made or
/// mounted. (The kubelet also closes the window between this check and the runtime's
/// mount by mounting an open descriptor; here a container racing to swap a folder for
/// a link in that window is not stopped.)
fn make_sub_path(root: &Path, sub: &Path) -> Result<PathBuf, String> {
    use std::os::unix::fs::PermissionsExt;
    let real_root = std::fs::canonicalize(root).map_err(|e| format!("{}: {e}", root.display()))?;
    let outside = |p: &Path| {
        format!(
            "subPath {:?}: {} is not within the volume",
            sub.display(),
            p.display()
        )
    };
    let mode = std::fs::metadata(root)
        .map(|m| m.permissions().mode() & 0o7777)
        .unwrap_or(0o755);
    let mut p = root.to_path_buf();
    for comp in sub.components() {
        p.push(comp);
        match std::fs::canonicalize(&p) {
            Ok(real) if !real.starts_with(&real_root) => return Err(outside(&real)),
            Ok(_) => {}
            Err(_) if std::fs::symlink_metadata(&p).is_ok() => {
                // A dangling link: it points nowhere yet, and anywhere later.
                return Err(outside(&p));
            }
            Err(_) => {
                std::fs::create_dir(&p).map_err(|e| format!("creating {}: {e}", p.display()))?;
                let _ = std::fs::set_permissions(&p, std::fs::Permissions::from_mode(mode));
            }
        }
    }
    Ok(p)
}

impl VolumePaths<'_> {
    /// The container's volume mounts; `envs` are its variables, for `subPathExpr`.
    pub fn mounts(&self, c: &Container, envs: &[cri::KeyValue]) -> Result<Vec<cri::Mount>, String> {
        let mut out = Vec::new();
        for m in c.volume_mounts.iter().flatten() {
            let Some(dir) = self.dirs.get(&m.name) else {
                return Err(format!(
                    "volume mount {:?}: the pod has no volume of that name",
                    m.name
                ));
            };
            let mut host = dir.clone();
            let sub = match m.sub_path_expr.as_deref().filter(|s| !s.is_empty()) {
                Some(expr) => Some(sub_path_expr(expr, envs)?),
                None => m.sub_path.clone(),
            };
            if let Some(sub) = sub.as_deref().filter(|s| !s.is_empty()) {
                if Path::new(sub).is_absolute() || sub.split('/').any(|p| p == "..") {
                    return Err(format!(
                        "volume mount {:?}: subPath {sub:?} must be relative and stay inside",
                        m.name
                    ));
                }
                host = make_sub_path(dir, Path::new(sub))?;
            }
            out.push(cri::Mount {
                container_path: m.mount_path.clone(),
                host_path: host.to_string_lossy().into_owned(),
                readonly: m.read_only.unwrap_or(false) || self.read_only.contains(&m.name),
                propagation: match m.mount_propagation.as_deref() {
                    Some("HostToContainer") => cri::MountPropagation::PropagationHostToContainer,
                    Some("Bidirectional") => cri::MountPropagation::PropagationBidirectional,
                    _ => cri::MountPropagation::PropagationPrivate,
                } as i32,
                ..Default::default()
            });
        }
        Ok(out)
    }
}

/// Everything a container's config needs that is not in the pod itself.
pub struct ContainerInputs {
    pub attempt: u32,
    pub envs: Vec<cri::KeyValue>,
    pub mounts: Vec<cri::Mount>,
    pub image: String,
    pub node_memory: i64,
}

fn expand_all(words: Option<&[String]>, envs: &[cri::KeyValue]) -> Vec<String> {
    let vars: Vec<(String, String)> = envs
        .iter()
        .map(|kv| (kv.key.clone(), kv.value.clone()))
        .collect();
    words
        .unwrap_or_default()
        .iter()
        .map(|w| crate::inputs::expand(w, &vars))
        .collect()
}

pub fn container_config(
    pod: &Pod,
    c: &Container,
    inp: ContainerInputs,
) -> Result<cri::ContainerConfig, String> {
    let spec = spec(pod);
    let psc = spec.security_context.clone().unwrap_or_default();
    let sc = c.security_context.clone().unwrap_or_default();
    let qos = qos(pod);
    let resources =
        resources(c.resources.as_ref(), &qos, inp.node_memory).map_err(|e| e.to_string())?;
    let labels = HashMap::from([
        (POD_NAME.to_string(), name(pod).to_string()),
        (POD_NAMESPACE.to_string(), namespace(pod).to_string()),
        (POD_UID.to_string(), uid(pod).to_string()),
        (CONTAINER_NAME.to_string(), c.name.clone()),
    ]);
    let termination_path = c
        .termination_message_path
        .clone()
        .unwrap_or_else(|| "/dev/termination-log".into());
    let annotations = HashMap::from([
        (RESTART_COUNT.to_string(), inp.attempt.to_string()),
        (CONTAINER_HASH.to_string(), container_hash(c)),
        (TERMINATION_MESSAGE_PATH.to_string(), termination_path),
        (
            "io.kubernetes.container.terminationMessagePolicy".to_string(),
            c.termination_message_policy
                .clone()
                .unwrap_or_else(|| "File".into()),
        ),
        (
            GRACE.to_string(),
            spec.termination_grace_period_seconds
                .unwrap_or(30)
                .to_string(),
        ),
    ]);
    let caps = sc.capabilities.clone().unwrap_or_default();
    let seccomp_profile = sc.seccomp_profile.clone().or(psc.seccomp_profile.clone());
    let apparmor = apparmor(pod, c)?;
    #[allow(deprecated)] // apparmor_profile: the field kubelets before 1.30 send alone
    Ok(cri::ContainerConfig {
        metadata: Some(cri::ContainerMetadata {
            name: c.name.clone(),
            attempt: inp.attempt,
        }),
        image: Some(cri::ImageSpec {
            image: inp.image,
            user_specified_image: c.image.clone().unwrap_or_default(),
            ..Default::default()
        }),
        // `$(VAR)` in the command and arguments names the container's final variables.
        command: expand_all(c.command.as_deref(), &inp.envs),
        args: expand_all(c.args.as_deref(), &inp.envs),
        working_dir: c.working_dir.clone().unwrap_or_default(),
        envs: inp.envs,
        mounts: inp.mounts,
        labels,
        annotations,
        log_path: format!("{}/{}.log", c.name, inp.attempt),
        stdin: c.stdin.unwrap_or(false),
        stdin_once: c.stdin_once.unwrap_or(false),
        tty: c.tty.unwrap_or(false),
        linux: Some(cri::LinuxContainerConfig {
            resources: Some(resources),
            security_context: Some(cri::LinuxContainerSecurityContext {
                capabilities: Some(cri::Capability {
                    add_capabilities: caps.add.unwrap_or_default(),
                    drop_capabilities: caps.drop.unwrap_or_default(),
                    ..Default::default()
                }),
                privileged: sc.privileged.unwrap_or(false),
                namespace_options: Some(namespaces(spec)),
                run_as_user: sc
                    .run_as_user
                    .or(psc.run_as_user)
                    .map(|value| cri::Int64Value { value }),
                run_as_group: sc
                    .run_as_group
                    .or(psc.run_as_group)
                    .map(|value| cri::Int64Value { value }),
                readonly_rootfs: sc.read_only_root_filesystem.unwrap_or(false),
                supplemental_groups: supplemental_groups(&psc),
                no_new_privs: sc.allow_privilege_escalation == Some(false),
                seccomp: Some(seccomp(seccomp_profile.as_ref())),
                apparmor: apparmor.0,
                apparmor_profile: apparmor.1,
                ..Default::default()
            }),
        }),
        ..Default::default()
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

    #[test]
    fn pod_cgroup_limits_as_the_kubelet_sets_them() {
        let p = |containers: serde_json::Value, init: serde_json::Value| {
            pod(serde_json::json!({
                "metadata": {"name": "p", "namespace": "n", "uid": "u"},
                "spec": {"containers": containers, "initContainers": init,
                         "overhead": {"cpu": "10m"}}
            }))
        };
        let c = |req: serde_json::Value, lim: serde_json::Value| serde_json::json!({"name": "c", "resources": {"requests": req, "limits": lim}});
        // Guaranteed: requests = limits, summed; the overhead on top.
        let g = p(
            serde_json::json!([
                c(
                    serde_json::json!({}),
                    serde_json::json!({"cpu": "250m", "memory": "64Mi"})
                ),
                c(
                    serde_json::json!({}),
                    serde_json::json!({"cpu": "250m", "memory": "64Mi"})
                ),
            ]),
            serde_json::json!([]),
        );
        assert_eq!(
            pod_limits(&g).unwrap(),
            PodLimits {
                cpu_request: 510,
                cpu_shares: 522,
                cpu_quota: Some(51_000),
                memory: Some(128 << 20)
            }
        );
        // Burstable with one container unlimited: shares only. A bigger init container
        // sets the requests.
        let b = p(
            serde_json::json!([
                c(
                    serde_json::json!({"cpu": "100m"}),
                    serde_json::json!({"cpu": "200m", "memory": "32Mi"})
                ),
                c(serde_json::json!({"cpu": "100m"}), serde_json::json!({})),
            ]),
            serde_json::json!([c(serde_json::json!({"cpu": "1"}), serde_json::json!({}))]),
        );
        assert_eq!(
            pod_limits(&b).unwrap(),
            PodLimits {
                cpu_request: 1010,
                cpu_shares: 1034,
                cpu_quota: None,
                memory: None
            }
        );
        // A sidecar (restartable init container) runs beside the app containers: its
        // requests add up with theirs, and with every init container after it.
        let mut sidecar = c(serde_json::json!({"cpu": "300m"}), serde_json::json!({}));
        sidecar["restartPolicy"] = serde_json::json!("Always");
        let s = p(
            serde_json::json!([c(serde_json::json!({"cpu": "100m"}), serde_json::json!({}))]),
            serde_json::json!([
                sidecar,
                c(serde_json::json!({"cpu": "500m"}), serde_json::json!({}))
            ]),
        );
        assert_eq!(pod_limits(&s).unwrap().cpu_request, 810);
        let mut sidecar = c(serde_json::json!({"cpu": "300m"}), serde_json::json!({}));
        sidecar["restartPolicy"] = serde_json::json!("Always");
        let s = p(
            serde_json::json!([c(serde_json::json!({"cpu": "100m"}), serde_json::json!({}))]),
            serde_json::json!([
                c(serde_json::json!({"cpu": "200m"}), serde_json::json!({})),
                sidecar
            ]),
        );
        assert_eq!(pod_limits(&s).unwrap().cpu_request, 410);
        // BestEffort: 2 shares, nothing else.
        let e = p(serde_json::json!([{"name": "c"}]), serde_json::json!([]));
        assert_eq!(
            pod_limits(&e).unwrap(),
            PodLimits {
                cpu_request: 10,
                cpu_shares: 2,
                cpu_quota: None,
                memory: None
            }
        );
    }

    #[test]
    fn hosts_file_and_hostname_as_the_kubelet_makes_them() {
        let p = pod(serde_json::json!({
            "metadata": {"name": "db-0", "namespace": "data", "uid": "u"},
            "spec": {"hostname": "db-0", "subdomain": "db", "setHostnameAsFQDN": true,
                     "hostAliases": [{"ip": "10.9.9.9", "hostnames": ["a.example", "b"]}],
                     "containers": [{"name": "c"}]}
        }));
        let want = "# Kubernetes-managed hosts file.\n\
                    127.0.0.1\tlocalhost\n\
                    ::1\tlocalhost ip6-localhost ip6-loopback\n\
                    fe00::0\tip6-localnet\n\
                    fe00::0\tip6-mcastprefix\n\
                    fe00::1\tip6-allnodes\n\
                    fe00::2\tip6-allrouters\n\
                    10.1.0.7\tdb-0.db.data.svc.cluster.local\tdb-0\n\
                    \n\
                    # Entries added by HostAliases.\n\
                    10.9.9.9\ta.example\tb\n";
        assert_eq!(hosts_file(&cfg(), &p, &["10.1.0.7".into()], ""), want);
        assert_eq!(
            sandbox_config(&cfg(), &p, 0, "api").hostname,
            "db-0.db.data.svc.cluster.local"
        );

        // On the node's network: the node's file, then the aliases; no hostname sent.
        let p = pod(serde_json::json!({
            "metadata": {"name": "h", "namespace": "n", "uid": "u"},
            "spec": {"hostNetwork": true, "hostAliases": [{"ip": "1.2.3.4", "hostnames": ["x"]}],
                     "containers": [{"name": "c"}]}
        }));
        assert_eq!(
            hosts_file(&cfg(), &p, &[], "127.0.0.1 localhost\n"),
            "# Kubernetes-managed hosts file (host network).\n127.0.0.1 localhost\n\n\
             # Entries added by HostAliases.\n1.2.3.4\tx\n"
        );
        assert_eq!(sandbox_config(&cfg(), &p, 0, "api").hostname, "");
    }

    #[test]
    fn apparmor_from_the_annotation_alone_or_from_the_fields_as_both() {
        use cri::security_profile::ProfileType;
        let p = pod(serde_json::json!({
            "metadata": {"name": "p", "annotations": {
                "container.apparmor.security.beta.kubernetes.io/a": "localhost/deny-write",
                "container.apparmor.security.beta.kubernetes.io/b": "runtime/default",
            }},
            "spec": {
                "securityContext": {"appArmorProfile": {"type": "RuntimeDefault"}},
                "containers": [
                    {"name": "a"},
                    {"name": "b", "securityContext": {"appArmorProfile": {"type": "Localhost", "localhostProfile": "k"}}},
                    {"name": "c", "securityContext": {"appArmorProfile": {"type": "Localhost"}}},
                ]
            }
        }));
        let c = |i: usize| spec(&p).containers[i].clone();
        // The pod's field wins over the annotation (a newer API's pod); the
        // container's field over the pod's.
        assert_eq!(
            apparmor(&p, &c(0)).unwrap(),
            (
                Some(cri::SecurityProfile {
                    profile_type: ProfileType::RuntimeDefault as i32,
                    localhost_ref: String::new()
                }),
                "runtime/default".into()
            )
        );
        assert_eq!(
            apparmor(&p, &c(1)).unwrap(),
            (
                Some(cri::SecurityProfile {
                    profile_type: ProfileType::Localhost as i32,
                    localhost_ref: "k".into()
                }),
                "localhost/k".into()
            )
        );
        assert!(apparmor(&p, &c(2)).is_err());
        // A v1.28 pod: the annotation, as the deprecated string only; none: nothing.
        let old = pod(serde_json::json!({
            "metadata": {"name": "p", "annotations": {
                "container.apparmor.security.beta.kubernetes.io/a": "localhost/deny-write",
            }},
            "spec": {"containers": [{"name": "a"}, {"name": "b"}]}
        }));
        let c = |i: usize| spec(&old).containers[i].clone();
        assert_eq!(
            apparmor(&old, &c(0)).unwrap(),
            (None, "localhost/deny-write".into())
        );
        assert_eq!(apparmor(&old, &c(1)).unwrap(), (None, String::new()));
    }

    fn pod(json: serde_json::Value) -> Pod {
        serde_json::from_value(json).unwrap()
    }

    fn cfg() -> Config {
        Config {
            kubeconfig: None,
            runtime_socket: "/run/crust/crust.sock".into(),
            node_name: "node-a".into(),
            node_ip: None,
            root_dir: "/var/lib/crustlet".into(),
            cert_dir: "/var/lib/crustlet/pki".into(),
            cgroup_root: "/".into(),
            cgroup_driver: None,
            driver_in_use: Default::default(),
            pod_logs_dir: "/var/log/pods".into(),
            pod_manifest_path: None,
            cluster_dns: vec!["10.96.0.10".into()],
            cluster_domain: "cluster.local".into(),
            max_pods: 110,
            max_parallel_pod_starts: 8,
            sysctls: Default::default(),
            image_gc_high: 85,
            eviction_hard: Default::default(),
            image_gc_low: 80,
            image_minimum_gc_age: std::time::Duration::from_secs(120),
            oom_score_adj: -999,
            node_labels: vec![],
            register_node: true,
            pod_routes: false,
            allowed_unsafe_sysctls: vec![],
            log_filter: "info".into(),
        }
    }

    #[test]
    fn qos_classes() {
        let p = |res: serde_json::Value| {
            pod(
                serde_json::json!({"metadata": {"name": "p"}, "spec": {"containers": [{"name": "c", "resources": res}]}}),
            )
        };
        assert_eq!(qos(&p(serde_json::json!({}))), "BestEffort");
        assert_eq!(
            qos(&p(serde_json::json!({"requests": {"cpu": "100m"}}))),
            "Burstable"
        );
        assert_eq!(
            qos(&p(
                serde_json::json!({"limits": {"cpu": "1", "memory": "64Mi"}})
            )),
            "Guaranteed"
        );
        assert_eq!(
            qos(&p(
                serde_json::json!({"limits": {"cpu": "1", "memory": "64Mi"}, "requests": {"cpu": "500m"}})
            )),
            "Burstable"
        );
    }

    #[test]
    fn resources_as_the_kubelet_sends_them() {
        let rr = ResourceRequirements {
            limits: Some(
                [
                    ("cpu".to_string(), Quantity("500m".into())),
                    ("memory".to_string(), Quantity("64Mi".into())),
                ]
                .into(),
            ),
            requests: Some([("cpu".to_string(), Quantity("250m".into()))].into()),
            ..Default::default()
        };
        let r = resources(Some(&rr), "Burstable", 1 << 30).unwrap();
        assert_eq!(
            (r.cpu_period, r.cpu_quota, r.cpu_shares),
            (100_000, 50_000, 256)
        );
        assert_eq!(r.memory_limit_in_bytes, 64 << 20);
        // No memory request given: the limit stands for it.
        assert_eq!(r.oom_score_adj, 1000 - 1000 * (64 << 20) / (1 << 30));
        let none = resources(None, "BestEffort", 1 << 30).unwrap();
        assert_eq!(
            (
                none.cpu_period,
                none.cpu_quota,
                none.cpu_shares,
                none.oom_score_adj
            ),
            (0, 0, 2, 1000)
        );
    }

    #[test]
    fn sandbox_labels_dns_ports_and_namespaces() {
        let p = pod(serde_json::json!({
            "metadata": {"name": "web", "namespace": "ns1", "uid": "u-1", "labels": {"app": "web"}},
            "spec": {"shareProcessNamespace": true, "subdomain": "s",
                     "containers": [{"name": "c", "ports": [{"containerPort": 80, "hostPort": 8080}, {"containerPort": 81}]}]}
        }));
        let s = sandbox_config(&cfg(), &p, 2, "api");
        let hosts = hosts_file(&cfg(), &p, &["10.1.0.5".into()], "");
        assert_eq!(
            hosts.lines().last(),
            Some("10.1.0.5\tweb.s.ns1.svc.cluster.local\tweb")
        );
        let m = s.metadata.clone().unwrap();
        assert_eq!(
            (
                m.name.as_str(),
                m.namespace.as_str(),
                m.uid.as_str(),
                m.attempt
            ),
            ("web", "ns1", "u-1", 2)
        );
        assert_eq!(s.labels["io.kubernetes.pod.uid"], "u-1");
        assert_eq!(s.labels["app"], "web");
        assert_eq!(s.log_directory, "/var/log/pods/ns1_web_u-1");
        assert_eq!(s.hostname, "web");
        let d = s.dns_config.unwrap();
        assert_eq!(d.servers, ["10.96.0.10"]);
        assert_eq!(
            d.searches[..3],
            [
                "ns1.svc.cluster.local",
                "svc.cluster.local",
                "cluster.local"
            ]
        );
        assert_eq!(d.options, ["ndots:5"]);
        assert_eq!(s.port_mappings.len(), 1);
        assert_eq!(
            (
                s.port_mappings[0].container_port,
                s.port_mappings[0].host_port
            ),
            (80, 8080)
        );
        let linux = s.linux.unwrap();
        assert_eq!(linux.cgroup_parent, "/kubepods/besteffort/podu-1");
        let ns = linux.security_context.unwrap().namespace_options.unwrap();
        assert_eq!(ns.pid, cri::NamespaceMode::Pod as i32);
        assert_eq!(ns.network, cri::NamespaceMode::Pod as i32);
    }

    #[test]
    fn sub_path_expressions_as_the_kubelet_expands_them() {
        let kv = |k: &str, v: &str| cri::KeyValue {
            key: k.into(),
            value: v.into(),
        };
        let envs = [kv("POD_NAME", "foo"), kv("EMPTY", ""), kv("NS", "ns1")];
        assert_eq!(sub_path_expr("$(POD_NAME)", &envs).unwrap(), "foo");
        assert_eq!(
            sub_path_expr("logs/$(NS)/$(POD_NAME)", &envs).unwrap(),
            "logs/ns1/foo"
        );
        assert_eq!(sub_path_expr("$$(POD_NAME)", &envs).unwrap(), "$(POD_NAME)");
        let e = sub_path_expr("$(NOPE)/$(EMPTY)/$(NOPE)", &envs).unwrap_err();
        assert!(e.ends_with("missing value for NOPE, EMPTY"), "{e}");
        // Made in the volume with the volume's mode, and mounted from there.
        use std::os::unix::fs::PermissionsExt;
        let root = std::env::temp_dir().join(format!("crustlet-subpath-{}", std::process::id()));
        std::fs::create_dir_all(&root).unwrap();
        std::fs::set_permissions(&root, std::fs::Permissions::from_mode(0o777)).unwrap();
        let dirs: HashMap<String, PathBuf> = [("vol".to_string(), root.clone())].into();
        let none = std::collections::HashSet::new();
        let paths = VolumePaths {
            dirs: &dirs,
            read_only: &none,
        };
        let c: Container = serde_json::from_value(serde_json::json!({
            "name": "c",
            "volumeMounts": [
                {"name": "vol", "mountPath": "/logs", "subPathExpr": "a/$(POD_NAME)"},
                {"name": "vol", "mountPath": "/all"},
            ]
        }))
        .unwrap();
        let m = paths.mounts(&c, &envs).unwrap();
        assert_eq!(m[0].host_path, root.join("a/foo").to_string_lossy());
        assert_eq!(m[1].host_path, root.to_string_lossy());
        for d in ["a", "a/foo"] {
            let mode = std::fs::metadata(root.join(d))
                .unwrap()
                .permissions()
                .mode();
            assert_eq!(mode & 0o7777, 0o777, "{d}");
        }
        let c: Container = serde_json::from_value(serde_json::json!({
            "name": "c",
            "volumeMounts": [{"name": "vol", "mountPath": "/x", "subPathExpr": "$(NS)/../.."}]
        }))
        .unwrap();
        assert!(paths.mounts(&c, &envs).unwrap_err().contains("stay inside"));
        // A link the pod left in the volume leads out of it: refused, nothing made.
        std::os::unix::fs::symlink("/", root.join("out")).unwrap();
        std::os::unix::fs::symlink("../../nowhere", root.join("dangling")).unwrap();
        std::os::unix::fs::symlink("a", root.join("in")).unwrap();
        for (sub, ok) in [
            ("out", false),
            ("out/etc", false),
            ("dangling", false),
            ("in/foo", true),
        ] {
            let c: Container = serde_json::from_value(serde_json::json!({
                "name": "c",
                "volumeMounts": [{"name": "vol", "mountPath": "/x", "subPath": sub}]
            }))
            .unwrap();
            match paths.mounts(&c, &envs) {
                Ok(m) => assert!(ok, "{sub}: {}", m[0].host_path),
                Err(e) => assert!(!ok && e.contains("not within the volume"), "{sub}: {e}"),
            }
        }
        assert!(!Path::new("/etc/nowhere").exists());
        std::fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn the_fs_group_is_a_supplemental_group() {
        let psc = |v: serde_json::Value| serde_json::from_value(v).unwrap();
        assert_eq!(
            supplemental_groups(&psc(
                serde_json::json!({"fsGroup": 1001, "supplementalGroups": [5, 6]})
            )),
            [1001, 5, 6]
        );
        assert_eq!(
            supplemental_groups(&psc(serde_json::json!({"supplementalGroups": [5]}))),
            [5]
        );
        assert!(supplemental_groups(&psc(serde_json::json!({}))).is_empty());
    }

    #[test]
    fn container_config_names_and_paths() {
        let p = pod(serde_json::json!({
            "metadata": {"name": "web", "namespace": "ns1", "uid": "u-1"},
            "spec": {"containers": [{"name": "c", "image": "busybox", "command": ["sh"], "args": ["-c", "true"],
                     "volumeMounts": [{"name": "v", "mountPath": "/data", "readOnly": true}]}]}
        }));
        let c = &spec(&p).containers[0];
        let dirs = HashMap::from([(
            "v".to_string(),
            PathBuf::from("/var/lib/crustlet/pods/u-1/volumes/v"),
        )]);
        let ro = Default::default();
        let mounts = VolumePaths {
            dirs: &dirs,
            read_only: &ro,
        }
        .mounts(c, &[])
        .unwrap();
        let cc = container_config(
            &p,
            c,
            ContainerInputs {
                attempt: 3,
                envs: vec![],
                mounts,
                image: "busybox".into(),
                node_memory: 1 << 30,
            },
        )
        .unwrap();
        assert_eq!(cc.log_path, "c/3.log");
        assert_eq!(cc.labels["io.kubernetes.container.name"], "c");
        assert_eq!(cc.annotations["io.kubernetes.container.restartCount"], "3");
        assert_eq!(cc.mounts[0].container_path, "/data");
        assert!(cc.mounts[0].readonly);
        assert_eq!(
            (cc.command.clone(), cc.args.clone()),
            (
                vec!["sh".to_string()],
                vec!["-c".to_string(), "true".to_string()]
            )
        );
        let bad = VolumePaths {
            dirs: &HashMap::new(),
            read_only: &ro,
        }
        .mounts(c, &[])
        .unwrap_err();
        assert!(bad.contains("no volume"), "{bad}");
    }
}
