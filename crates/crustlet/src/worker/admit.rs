//! The kubelet's decisions about a pod as a whole, apart from its containers: whether
//! the node takes it at all (admission), whether it outlived `activeDeadlineSeconds`,
//! and whether its readiness gates hold its Ready condition back. Pure functions; the
//! worker acts on what they say.
//!
//! ```text
//!   pod first seen --admit--> refused: Failed, reason and "Pod was rejected: ...",
//!        |                    no sandbox ever made
//!        v admitted
//!   running --now - startTime >= activeDeadlineSeconds--> containers stopped,
//!                                                         Failed, DeadlineExceeded
//! ```
//!
//! Admission follows the kubelet's admit handlers in their order (v1.28): the eviction
//! manager's refusal under node pressure ([`admit_under_pressure`]), the sysctl
//! allowlist (`pkg/kubelet/sysctl`), then the OS checks of the predicate handler
//! (`pkg/kubelet/lifecycle/predicate.go`), then of its general predicates the host
//! ports ([`HostPorts`]: a pod bound to the node by name, past the scheduler, whose
//! host port another pod of the node holds). The resource predicates are the
//! scheduler's business here: the crustlet does not refuse a pod for them.

use k8s_openapi::api::core::v1::{Pod, PodCondition, PodReadinessGate, PodStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::{SignedDuration, Timestamp};

/// The kubelet's reason for a pod refused for a sysctl.
pub const SYSCTL_FORBIDDEN: &str = "SysctlForbidden";
/// The reason and message of a pod that ran past its active deadline.
pub const DEADLINE_REASON: &str = "DeadlineExceeded";
pub const DEADLINE_MESSAGE: &str = "Pod was active on the node longer than the specified deadline";
/// The Ready condition's reason while a readiness gate is not True.
pub const GATES_NOT_READY: &str = "ReadinessGatesNotReady";

/// The kubelet's safe sysctls (v1.28), with the kernel (major, minor) from which each
/// is namespaced; on an older kernel, or one whose version cannot be read, those with
/// a minimum are left out, as the kubelet does.
const SAFE_SYSCTLS: &[(&str, Option<(u32, u32)>)] = &[
    ("kernel.shm_rmid_forced", None),
    ("net.ipv4.ip_local_port_range", None),
    ("net.ipv4.tcp_syncookies", None),
    ("net.ipv4.ping_group_range", None),
    ("net.ipv4.ip_unprivileged_port_start", None),
    ("net.ipv4.ip_local_reserved_ports", Some((3, 16))),
    ("net.ipv4.tcp_keepalive_time", Some((4, 5))),
];

/// The safe sysctls on a kernel of version `kernel` (major, minor).
pub fn safe_sysctls(kernel: Option<(u32, u32)>) -> Vec<&'static str> {
    SAFE_SYSCTLS
        .iter()
        .filter(|(_, min)| min.is_none_or(|m| kernel.is_some_and(|k| k >= m)))
        .map(|(name, _)| *name)
        .collect()
}

/// The running kernel's (major, minor), from `/proc/sys/kernel/osrelease`.
pub fn kernel_version() -> Option<(u32, u32)> {
    parse_kernel(&std::fs::read_to_string("/proc/sys/kernel/osrelease").ok()?)
}

/// (major, minor) of a kernel release such as `6.8.0-45-generic`.
fn parse_kernel(release: &str) -> Option<(u32, u32)> {
    let mut parts = release.trim().split(|c: char| !c.is_ascii_digit());
    let major = parts.next()?.parse().ok()?;
    let minor = parts.next()?.parse().ok()?;
    Some((major, minor))
}

/// The kernel namespace a sysctl lives in, for the ones the kubelet knows to be
/// namespaced.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ns {
    Ipc,
    Net,
}

impl Ns {
    fn name(self) -> &'static str {
        match self {
            Ns::Ipc => "ipc",
            Ns::Net => "net",
        }
    }
}

/// The namespace of sysctl `name` (dotted), none if it is not known to be namespaced.
pub fn namespaced_by(name: &str) -> Option<Ns> {
    if name == "kernel.sem" {
        return Some(Ns::Ipc);
    }
    const PREFIXES: &[(&str, Ns)] = &[
        ("kernel.shm", Ns::Ipc),
        ("kernel.msg", Ns::Ipc),
        ("fs.mqueue.", Ns::Ipc),
        ("net.", Ns::Net),
    ];
    PREFIXES
        .iter()
        .find(|(p, _)| name.starts_with(p))
        .map(|(_, ns)| *ns)
}

/// A sysctl name in dotted form: one written with slashes
/// (`net/ipv4/conf/eth0.100/forwarding`) has its dots and slashes swapped, so that a
/// dot inside a segment survives as a slash (`net.ipv4.conf.eth0/100.forwarding`).
pub fn to_dots(name: &str) -> String {
    match name.find(['.', '/']) {
        Some(i) if name.as_bytes()[i] == b'/' => name
            .chars()
            .map(|c| match c {
                '.' => '/',
                '/' => '.',
                c => c,
            })
            .collect(),
        _ => name.to_string(),
    }
}

/// Whether `s` is a sysctl name or pattern the kubelet accepts in its allowlist: at
/// most 253 characters, segments of `[a-z0-9]([-_a-z0-9]*[a-z0-9])?` separated by `.`
/// or `/`, the last of which may end in `*`.
fn valid_pattern(s: &str) -> bool {
    let alnum = |c: char| c.is_ascii_lowercase() || c.is_ascii_digit();
    let inner = |c: char| alnum(c) || c == '-' || c == '_';
    if s.is_empty() || s.len() > 253 || !s.is_ascii() {
        return false;
    }
    let segments: Vec<&str> = s.split(['.', '/']).collect();
    let (last, rest) = segments.split_last().expect("split yields one at least");
    let segment_ok =
        |seg: &str| seg.starts_with(alnum) && seg.ends_with(alnum) && seg.chars().all(inner);
    // The last: `([a-z0-9][-_a-z0-9]*)?[a-z0-9*]`.
    let last_ok = {
        let end = last.chars().last();
        let body = &last[..last.len().saturating_sub(1)];
        end.is_some_and(|c| alnum(c) || c == '*')
            && (body.is_empty() || body.starts_with(alnum) && body.chars().all(inner))
    };
    rest.iter().all(|s| segment_ok(s)) && last_ok
}

/// The sysctls a pod may set on this node: the safe ones and those of
/// `--allowed-unsafe-sysctls`, each a name or a prefix ending in `*`, with the
/// namespace it lives in (the kubelet's `patternAllowlist`).
#[derive(Debug, Clone, Default)]
pub struct Sysctls {
    names: Vec<(String, Ns)>,
    prefixes: Vec<(String, Ns)>,
}

impl Sysctls {
    /// The allowlist of `patterns`; a pattern that is malformed or not known to be
    /// namespaced is an error that names it, as the kubelet refuses to start.
    pub fn new<'a>(patterns: impl IntoIterator<Item = &'a str>) -> Result<Sysctls, String> {
        let mut out = Sysctls::default();
        for p in patterns {
            if !valid_pattern(p) {
                return Err(format!(
                    "sysctl {p:?} must have at most 253 characters and be dot- or slash-separated segments of [a-z0-9]([-_a-z0-9]*[a-z0-9])?, the last of which may end in *"
                ));
            }
            let p = to_dots(p);
            match p.strip_suffix('*') {
                Some(prefix) => {
                    let ns = namespaced_by(prefix).ok_or_else(|| {
                        format!("the sysctls {p:?} are not known to be namespaced")
                    })?;
                    out.prefixes.push((prefix.to_string(), ns));
                }
                None => {
                    let ns = namespaced_by(&p)
                        .ok_or_else(|| format!("the sysctl {p:?} is not known to be namespaced"))?;
                    out.names.push((p, ns));
                }
            }
        }
        Ok(out)
    }

    /// The node's allowlist: the safe sysctls for `kernel` and `unsafe_patterns`.
    pub fn for_node(
        kernel: Option<(u32, u32)>,
        unsafe_patterns: &[String],
    ) -> Result<Sysctls, String> {
        let safe = safe_sysctls(kernel);
        Sysctls::new(
            safe.into_iter()
                .chain(unsafe_patterns.iter().map(String::as_str)),
        )
    }

    /// Whether a pod may set sysctl `name`; `host_net` and `host_ipc` say whether it
    /// shares that namespace with the node, where a sysctl of it would change the
    /// node's own.
    fn check(&self, name: &str, host_net: bool, host_ipc: bool) -> Result<(), String> {
        let name = to_dots(name);
        let ns = self
            .names
            .iter()
            .find(|(n, _)| *n == name)
            .or_else(|| self.prefixes.iter().find(|(p, _)| name.starts_with(p)))
            .map(|(_, ns)| *ns)
            .ok_or_else(|| format!("{name:?} not allowlisted"))?;
        if (ns == Ns::Ipc && host_ipc) || (ns == Ns::Net && host_net) {
            return Err(format!(
                "{name:?} not allowed with host {} enabled",
                ns.name()
            ));
        }
        Ok(())
    }
}

/// Why the node refuses a pod: the status reason and the kubelet's message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rejection {
    pub reason: &'static str,
    pub message: String,
}

impl Rejection {
    /// The status message of the refused pod.
    pub fn status_message(&self) -> String {
        format!("Pod was rejected: {}", self.message)
    }
}

/// Whether the node takes `pod`, as the kubelet's admit handlers decide on Linux:
/// each of its sysctls allowed (`SysctlForbidden`), its `kubernetes.io/os` label, if
/// any, `linux` (`PodOSSelectorNodeLabelDoesNotMatch`), and its `spec.os`, if set,
/// `linux` (`PodOSNotSupported`).
pub fn admit(pod: &Pod, sysctls: &Sysctls) -> Result<(), Rejection> {
    let spec = pod.spec.as_ref();
    let host_net = spec.and_then(|s| s.host_network).unwrap_or(false);
    let host_ipc = spec.and_then(|s| s.host_ipc).unwrap_or(false);
    let wanted = spec
        .and_then(|s| s.security_context.as_ref())
        .and_then(|sc| sc.sysctls.as_deref())
        .unwrap_or_default();
    for s in wanted {
        if let Err(e) = sysctls.check(&s.name, host_net, host_ipc) {
            return Err(Rejection {
                reason: SYSCTL_FORBIDDEN,
                message: format!("forbidden sysctl: {e}"),
            });
        }
    }
    let os_label = pod
        .metadata
        .labels
        .as_ref()
        .and_then(|l| l.get("kubernetes.io/os"));
    if os_label.is_some_and(|os| os != "linux") {
        return Err(Rejection {
            reason: "PodOSSelectorNodeLabelDoesNotMatch",
            message: "Failed to admit pod as the `kubernetes.io/os` label doesn't match node label"
                .into(),
        });
    }
    if spec
        .and_then(|s| s.os.as_ref())
        .is_some_and(|os| os.name != "linux")
    {
        return Err(Rejection {
            reason: "PodOSNotSupported",
            message: "Failed to admit pod as the OS field doesn't match node OS".into(),
        });
    }
    Ok(())
}

/// The kubelet's reason for a pod whose AppArmor profiles the node cannot enforce.
pub const APPARMOR_REASON: &str = "AppArmor";
/// The waiting reason of the containers of a pod the node cannot run yet (the
/// kubelet's soft admission).
pub const BLOCKED: &str = "Blocked";

/// Whether the node can run `pod` as its AppArmor profiles ask, as the kubelet v1.28's
/// soft admit handler decides (`pkg/security/apparmor`): a pod that asks for a
/// profile other than `unconfined` (an annotation, or an `appArmorProfile` of a newer
/// API) needs a host with AppArmor (`host`, asked only then), and every annotation must
/// name a profile in the kubelet's format. Whether a localhost profile is loaded is the
/// runtime's to say at CreateContainer (the kubelet stopped checking in v1.24). The
/// refused pod stays Pending, not Failed: see `Worker::blocked`.
pub fn apparmor(pod: &Pod, host: impl FnOnce() -> Result<(), String>) -> Result<(), Rejection> {
    let spec = pod.spec.as_ref();
    let annotations: Vec<(&str, &str)> = pod
        .metadata
        .annotations
        .iter()
        .flatten()
        .filter(|(k, _)| k.starts_with(crate::spec::APPARMOR_ANNOTATION))
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect();
    let fields = spec
        .and_then(|s| s.security_context.as_ref())
        .and_then(|sc| sc.app_armor_profile.as_ref())
        .into_iter()
        .chain(spec.into_iter().flat_map(|s| {
            s.containers
                .iter()
                .chain(s.init_containers.iter().flatten())
                .filter_map(|c| c.security_context.as_ref()?.app_armor_profile.as_ref())
        }));
    let required = annotations.iter().any(|(_, v)| *v != "unconfined")
        || fields.into_iter().any(|p| p.type_ != "Unconfined");
    if !required {
        return Ok(());
    }
    let refuse = |why: String| Rejection {
        reason: APPARMOR_REASON,
        message: format!("Cannot enforce AppArmor: {why}"),
    };
    host().map_err(refuse)?;
    for (_, v) in annotations {
        let valid = matches!(v, "" | "runtime/default" | "unconfined")
            || v.strip_prefix("localhost/").is_some_and(|n| !n.is_empty());
        if !valid {
            return Err(refuse(format!("invalid AppArmor profile name: {v:?}")));
        }
    }
    Ok(())
}

/// The reason of a pod refused under node pressure (the kubelet's eviction manager's).
pub const PRESSURE_REASON: &str = "Evicted";
/// The priority from which a pod is critical (`system-cluster-critical` and up... the
/// kubelet's `SystemCriticalPriority`).
const CRITICAL_PRIORITY: i32 = 2_000_000_000;

/// Whether the kubelet counts `pod` critical (never refused under pressure, never
/// evicted): a static pod (`static_pod`: it came from the manifest folder), a mirror pod,
/// or one of a critical priority.
pub fn critical(pod: &Pod, static_pod: bool) -> bool {
    let mirror = pod
        .metadata
        .annotations
        .as_ref()
        .is_some_and(|a| a.contains_key(crate::pods::MIRROR));
    static_pod
        || mirror
        || pod.spec.as_ref().and_then(|s| s.priority).unwrap_or(0) >= CRITICAL_PRIORITY
}

/// Whether a node under `pressure` (its pressure conditions that are True, in the
/// order MemoryPressure, DiskPressure, PIDPressure) takes a new `pod`, as the kubelet's
/// eviction manager admits: any pod when there is none, a critical one always; under
/// memory pressure alone, any pod but a BestEffort one that does not tolerate the
/// `node.kubernetes.io/memory-pressure` taint; under any other pressure, none.
pub fn admit_under_pressure(
    pod: &Pod,
    qos: &str,
    pressure: &[&str],
    critical: bool,
) -> Result<(), Rejection> {
    if pressure.is_empty() || critical {
        return Ok(());
    }
    if pressure == ["MemoryPressure"] {
        let tolerates = pod
            .spec
            .as_ref()
            .and_then(|s| s.tolerations.as_deref())
            .unwrap_or_default()
            .iter()
            .any(|t| {
                let key = t.key.as_deref().unwrap_or("");
                let op = t.operator.as_deref().unwrap_or("Equal");
                let effect = t.effect.as_deref().unwrap_or("");
                (key == "node.kubernetes.io/memory-pressure" || (key.is_empty() && op == "Exists"))
                    && (op == "Exists" || t.value.as_deref().unwrap_or("").is_empty())
                    && (effect.is_empty() || effect == "NoSchedule")
            });
        if qos != "BestEffort" || tolerates {
            return Ok(());
        }
    }
    Err(Rejection {
        reason: PRESSURE_REASON,
        message: format!("The node had condition: [{}]. ", pressure.join(" ")),
    })
}

/// The kubelet's reason (its predicate's name) and message for a host port taken.
pub const NODE_PORTS: &str = "NodePorts";

/// A host port a pod asks for: protocol, host IP (empty for every address), port.
pub type HostPort = (String, String, i32);

/// The host ports of `pod`'s containers, as the scheduler's NodePorts plugin reads
/// them (app containers; the apiserver fills a hostNetwork pod's from its container
/// ports).
pub fn host_ports(pod: &Pod) -> Vec<HostPort> {
    let Some(spec) = pod.spec.as_ref() else {
        return vec![];
    };
    spec.containers
        .iter()
        .flat_map(|c| c.ports.iter().flatten())
        .filter(|p| p.host_port.is_some_and(|h| h > 0))
        .map(|p| {
            let ip = p.host_ip.clone().unwrap_or_default();
            (
                p.protocol.clone().unwrap_or_else(|| "TCP".into()),
                if ip == "0.0.0.0" { String::new() } else { ip },
                p.host_port.unwrap_or(0),
            )
        })
        .collect()
}

/// Whether two host ports clash: the same protocol and port, and the same address or
/// either one every address.
pub fn clash(a: &HostPort, b: &HostPort) -> bool {
    a.0 == b.0 && a.2 == b.2 && (a.1 == b.1 || a.1.is_empty() || b.1.is_empty())
}

/// The host ports held by the node's admitted pods that have not ended, by pod uid: the
/// kubelet's "other pods" of its port predicate. Admission takes a pod's ports under
/// one lock, so of two pods asking for one port at once exactly one is admitted.
#[derive(Default)]
pub struct HostPorts {
    held: parking_lot::Mutex<std::collections::BTreeMap<String, Vec<HostPort>>>,
}

impl HostPorts {
    /// Admits pod `uid` for `ports` unless another pod holds one of them; `force` takes
    /// them whatever is held (a pod that had started before the crustlet did held them
    /// then, so it keeps running).
    pub fn take(&self, uid: &str, ports: Vec<HostPort>, force: bool) -> Result<(), Rejection> {
        let mut held = self.held.lock();
        let taken = !force
            && held
                .iter()
                .filter(|(u, _)| u.as_str() != uid)
                .any(|(_, theirs)| ports.iter().any(|p| theirs.iter().any(|t| clash(p, t))));
        if taken {
            return Err(Rejection {
                reason: NODE_PORTS,
                message: format!("Predicate {NODE_PORTS} failed"),
            });
        }
        if !ports.is_empty() {
            held.insert(uid.to_string(), ports);
        }
        Ok(())
    }

    /// Pod `uid` ended or left the node: its ports are free.
    pub fn release(&self, uid: &str) {
        self.held.lock().remove(uid);
    }
}

/// The status of a refused pod, as the kubelet sets it: Failed with the reason, its
/// message, the QoS class and a start time, nothing of containers it never made.
pub fn rejected_status(r: &Rejection, start: Option<Time>, qos: String) -> PodStatus {
    PodStatus {
        phase: Some("Failed".into()),
        reason: Some(r.reason.into()),
        message: Some(r.status_message()),
        qos_class: Some(qos),
        start_time: start,
        ..Default::default()
    }
}

/// Whether a pod that started at `start` is past its `activeDeadlineSeconds` at
/// `now` (the kubelet's `activeDeadlineHandler`); never without either.
pub fn past_deadline(deadline: Option<i64>, start: Option<Timestamp>, now: Timestamp) -> bool {
    match (deadline, start) {
        (Some(d), Some(s)) => now.duration_since(s) >= SignedDuration::from_secs(d),
        _ => false,
    }
}

/// Why the pod's readiness gates keep it from Ready, with the kubelet's words; none
/// when every gate's condition in `conditions` is True.
pub fn unready_gates(gates: &[PodReadinessGate], conditions: &[PodCondition]) -> Option<String> {
    let why: Vec<String> = gates
        .iter()
        .filter_map(|g| {
            let t = &g.condition_type;
            match conditions.iter().find(|c| c.type_ == *t) {
                None => Some(format!(
                    "corresponding condition of pod readiness gate {t:?} does not exist."
                )),
                Some(c) if c.status != "True" => Some(format!(
                    "the status of pod readiness gate {t:?} is not \"True\", but {}",
                    c.status
                )),
                Some(_) => None,
            }
        })
        .collect();
    (!why.is_empty()).then(|| why.join(", "))
}

#[cfg(test)]
mod tests {
    /// The kubelet's eviction admission: what each pressure lets in.
    #[test]
    fn pressure_refuses_what_the_kubelet_refuses() {
        let pod = |v: serde_json::Value| -> Pod { serde_json::from_value(v).unwrap() };
        let plain = pod(serde_json::json!({"metadata": {"name": "p"}, "spec": {"containers": []}}));
        let tolerant = pod(
            serde_json::json!({"metadata": {"name": "p"}, "spec": {"containers": [],
            "tolerations": [{"key": "node.kubernetes.io/memory-pressure", "operator": "Exists", "effect": "NoSchedule"}]}}),
        );
        let everything = pod(
            serde_json::json!({"metadata": {"name": "p"}, "spec": {"containers": [],
            "tolerations": [{"operator": "Exists"}]}}),
        );
        let other = pod(
            serde_json::json!({"metadata": {"name": "p"}, "spec": {"containers": [],
            "tolerations": [{"key": "node.kubernetes.io/disk-pressure", "operator": "Exists"}]}}),
        );
        let mem = ["MemoryPressure"];
        assert!(admit_under_pressure(&plain, "BestEffort", &[], false).is_ok());
        let r = admit_under_pressure(&plain, "BestEffort", &mem, false).unwrap_err();
        assert_eq!(r.reason, "Evicted");
        assert_eq!(
            r.status_message(),
            "Pod was rejected: The node had condition: [MemoryPressure]. "
        );
        assert!(admit_under_pressure(&plain, "Burstable", &mem, false).is_ok());
        assert!(admit_under_pressure(&tolerant, "BestEffort", &mem, false).is_ok());
        assert!(admit_under_pressure(&everything, "BestEffort", &mem, false).is_ok());
        assert!(admit_under_pressure(&other, "BestEffort", &mem, false).is_err());
        assert!(admit_under_pressure(&plain, "BestEffort", &mem, true).is_ok());
        // Disk or PID pressure: nobody but critical pods, tolerations or not.
        let both = ["MemoryPressure", "DiskPressure"];
        let r = admit_under_pressure(&everything, "Guaranteed", &both, false).unwrap_err();
        assert_eq!(
            r.message,
            "The node had condition: [MemoryPressure DiskPressure]. "
        );
        assert!(admit_under_pressure(&plain, "Guaranteed", &["PIDPressure"], false).is_err());
        assert!(admit_under_pressure(&plain, "Guaranteed", &["DiskPressure"], true).is_ok());
        // Critical: static, mirror, or a critical priority.
        assert!(critical(&plain, true));
        assert!(!critical(&plain, false));
        let mirror = pod(serde_json::json!({"metadata": {"name": "p",
            "annotations": {"kubernetes.io/config.mirror": "x"}}, "spec": {"containers": []}}));
        assert!(critical(&mirror, false));
        let high = pod(serde_json::json!({"metadata": {"name": "p"},
            "spec": {"containers": [], "priority": 2000001000}}));
        assert!(critical(&high, false));
    }

    use super::*;
    use serde_json::json;

    fn pod(v: serde_json::Value) -> Pod {
        serde_json::from_value(v).unwrap()
    }

    fn node(unsafe_patterns: &[&str]) -> Sysctls {
        let u: Vec<String> = unsafe_patterns.iter().map(|s| s.to_string()).collect();
        Sysctls::for_node(Some((6, 8)), &u).unwrap()
    }

    #[test]
    fn apparmor_needs_the_host_only_for_a_profile_other_than_unconfined() {
        let no_host = || Err("AppArmor is not enabled on the host".to_string());
        let asked = |annotations: serde_json::Value, sc: serde_json::Value| {
            pod(serde_json::json!({
                "metadata": {"name": "p", "annotations": annotations},
                "spec": {"containers": [{"name": "c", "securityContext": sc}]}
            }))
        };
        let key = "container.apparmor.security.beta.kubernetes.io/c";
        // Nothing asked, or unconfined: the host is not even asked.
        for p in [
            asked(serde_json::json!({}), serde_json::json!({})),
            asked(
                serde_json::json!({key: "unconfined"}),
                serde_json::json!({}),
            ),
            asked(
                serde_json::json!({}),
                serde_json::json!({"appArmorProfile": {"type": "Unconfined"}}),
            ),
        ] {
            assert_eq!(apparmor(&p, || panic!("asked the host")), Ok(()));
        }
        // A profile on a host without AppArmor: the kubelet's reason and message.
        for p in [
            asked(
                serde_json::json!({key: "runtime/default"}),
                serde_json::json!({}),
            ),
            asked(
                serde_json::json!({key: "localhost/x"}),
                serde_json::json!({}),
            ),
            asked(
                serde_json::json!({}),
                serde_json::json!({"appArmorProfile": {"type": "RuntimeDefault"}}),
            ),
        ] {
            assert_eq!(
                apparmor(&p, no_host),
                Err(Rejection {
                    reason: "AppArmor",
                    message: "Cannot enforce AppArmor: AppArmor is not enabled on the host".into()
                })
            );
            assert_eq!(apparmor(&p, || Ok(())), Ok(()));
        }
        let bad = asked(
            serde_json::json!({key: "docker-default"}),
            serde_json::json!({}),
        );
        assert_eq!(
            apparmor(&bad, || Ok(())).unwrap_err().message,
            "Cannot enforce AppArmor: invalid AppArmor profile name: \"docker-default\""
        );
    }

    #[test]
    fn host_ports_first_come_until_released() {
        let with_ports = |ports: serde_json::Value| {
            pod(json!({"spec": {"containers": [{"name": "c", "ports": ports}]}}))
        };
        let a = with_ports(json!([
            {"containerPort": 80, "hostPort": 8080},
            {"containerPort": 53, "hostPort": 53, "protocol": "UDP", "hostIP": "10.0.0.1"},
            {"containerPort": 9000},
        ]));
        assert_eq!(
            host_ports(&a),
            [
                ("TCP".into(), "".into(), 8080),
                ("UDP".into(), "10.0.0.1".into(), 53)
            ]
        );
        let table = [
            // (the other pod's ports, clashes with a's)
            (json!([{"containerPort": 1, "hostPort": 8080}]), true),
            (
                json!([{"containerPort": 1, "hostPort": 8080, "hostIP": "10.0.0.2"}]),
                true,
            ),
            (
                json!([{"containerPort": 1, "hostPort": 8080, "protocol": "UDP"}]),
                false,
            ),
            (
                json!([{"containerPort": 1, "hostPort": 53, "protocol": "UDP", "hostIP": "10.0.0.2"}]),
                false,
            ),
            (
                json!([{"containerPort": 1, "hostPort": 53, "protocol": "UDP", "hostIP": "0.0.0.0"}]),
                true,
            ),
            (json!([{"containerPort": 8080}]), false),
        ];
        for (ports, clashes) in table {
            let h = HostPorts::default();
            h.take("a", host_ports(&a), false).unwrap();
            let b = with_ports(ports.clone());
            let r = h.take("b", host_ports(&b), false);
            assert_eq!(r.is_err(), clashes, "{ports}");
            if clashes {
                let r = r.unwrap_err();
                assert_eq!(
                    (r.reason, r.status_message().as_str()),
                    (NODE_PORTS, "Pod was rejected: Predicate NodePorts failed")
                );
                // Its own ports never clash with themselves (a second sync), a started
                // pod keeps its ports, and once a ends b is admitted.
                assert!(h.take("a", host_ports(&a), false).is_ok());
                assert!(h.take("b", host_ports(&b), true).is_ok());
                h.release("b");
                h.release("a");
                assert!(h.take("b", host_ports(&b), false).is_ok());
            }
        }
    }

    #[test]
    fn safe_sysctls_follow_the_kernel() {
        let table = [
            // (kernel, how many, tcp_keepalive_time among them)
            (Some((6, 8)), 7, true),
            (Some((4, 5)), 7, true),
            (Some((4, 4)), 6, false),
            (Some((3, 10)), 5, false),
            (None, 5, false),
        ];
        for (kernel, n, keepalive) in table {
            let s = safe_sysctls(kernel);
            assert_eq!(s.len(), n, "{kernel:?}");
            assert_eq!(
                s.contains(&"net.ipv4.tcp_keepalive_time"),
                keepalive,
                "{kernel:?}"
            );
        }
        assert_eq!(parse_kernel("6.8.0-45-generic\n"), Some((6, 8)));
        assert_eq!(parse_kernel("4.19"), Some((4, 19)));
        assert_eq!(parse_kernel("garbage"), None);
    }

    #[test]
    fn names_with_slashes_become_dotted() {
        for (given, want) in [
            ("kernel.shm_rmid_forced", "kernel.shm_rmid_forced"),
            ("kernel/shm_rmid_forced", "kernel.shm_rmid_forced"),
            (
                "net/ipv4/conf/eth0.100/forwarding",
                "net.ipv4.conf.eth0/100.forwarding",
            ),
            (
                "net.ipv4.conf.eth0/100.forwarding",
                "net.ipv4.conf.eth0/100.forwarding",
            ),
            ("plain", "plain"),
        ] {
            assert_eq!(to_dots(given), want, "{given}");
        }
    }

    #[test]
    fn allowlist_patterns_are_checked_as_the_kubelet() {
        let table: &[(&str, Result<(), &str>)] = &[
            ("kernel.msgmax", Ok(())),
            ("kernel.shm*", Ok(())),
            ("net.*", Ok(())),
            ("net/ipv4/tcp_mem", Ok(())),
            ("fs.mqueue.*", Ok(())),
            ("kernel.sem", Ok(())),
            // Not namespaced: the node's own.
            ("kernel.panic", Err("not known to be namespaced")),
            ("vm.*", Err("not known to be namespaced")),
            ("*", Err("not known to be namespaced")),
            // Malformed.
            ("Net.ipv4", Err("must have at most 253")),
            ("net..ipv4", Err("must have at most 253")),
            ("net.*.x", Err("must have at most 253")),
            ("net.ipv4-", Err("must have at most 253")),
            ("", Err("must have at most 253")),
            ("net.é", Err("must have at most 253")),
        ];
        for (p, want) in table {
            match (Sysctls::new([*p]), want) {
                (Ok(_), Ok(())) => {}
                (Err(e), Err(w)) => {
                    assert!(e.contains(w) && e.contains(&format!("{p:?}")), "{p}: {e}")
                }
                (got, _) => panic!("{p}: {got:?}, want {want:?}"),
            }
        }
        let long = format!("net.{}", "a".repeat(250));
        assert!(Sysctls::new([long.as_str()]).is_err());
    }

    #[test]
    fn sysctl_admission() {
        struct Case {
            sysctls: &'static [&'static str],
            host_net: bool,
            host_ipc: bool,
            allowed: &'static [&'static str],
            want: Option<&'static str>,
        }
        let c = |sysctls, host_net, host_ipc, allowed, want| Case {
            sysctls,
            host_net,
            host_ipc,
            allowed,
            want,
        };
        let table = [
            c(&[], false, false, &[], None),
            c(&["kernel.shm_rmid_forced"], false, false, &[], None),
            c(&["kernel/shm_rmid_forced"], false, false, &[], None),
            c(&["net.ipv4.ip_local_port_range", "net.ipv4.tcp_keepalive_time"], false, false, &[], None),
            c(
                &["kernel.msgmax"],
                false,
                false,
                &[],
                Some("forbidden sysctl: \"kernel.msgmax\" not allowlisted"),
            ),
            c(&["kernel.msgmax"], false, false, &["kernel.msgmax"], None),
            c(&["kernel.msgmax"], false, false, &["kernel.msg*"], None),
            c(&["net.core.somaxconn"], false, false, &["net.*"], None),
            c(
                &["net.core.somaxconn"],
                true,
                false,
                &["net.*"],
                Some("forbidden sysctl: \"net.core.somaxconn\" not allowed with host net enabled"),
            ),
            c(
                &["net.ipv4.ip_local_port_range"],
                true,
                false,
                &[],
                Some("forbidden sysctl: \"net.ipv4.ip_local_port_range\" not allowed with host net enabled"),
            ),
            c(
                &["kernel.shm_rmid_forced"],
                false,
                true,
                &[],
                Some("forbidden sysctl: \"kernel.shm_rmid_forced\" not allowed with host ipc enabled"),
            ),
            // A net sysctl is fine beside the node's IPC namespace.
            c(&["net.ipv4.tcp_syncookies"], false, true, &[], None),
            // Not namespaced: never allowlisted, so refused.
            c(
                &["kernel.panic"],
                false,
                false,
                &["kernel.msg*"],
                Some("forbidden sysctl: \"kernel.panic\" not allowlisted"),
            ),
            // The first refused one is named.
            c(
                &["kernel.shm_rmid_forced", "kernel.sem", "kernel.msgmax"],
                false,
                false,
                &[],
                Some("forbidden sysctl: \"kernel.sem\" not allowlisted"),
            ),
        ];
        for (i, t) in table.iter().enumerate() {
            let sysctls: Vec<_> = t
                .sysctls
                .iter()
                .map(|n| json!({"name": n, "value": "1"}))
                .collect();
            let p = pod(json!({
                "metadata": {"name": "p"},
                "spec": {
                    "containers": [{"name": "c"}],
                    "hostNetwork": t.host_net,
                    "hostIPC": t.host_ipc,
                    "securityContext": {"sysctls": sysctls},
                },
            }));
            let got = admit(&p, &node(t.allowed));
            match t.want {
                None => assert_eq!(got, Ok(()), "case {i}"),
                Some(m) => assert_eq!(
                    got,
                    Err(Rejection {
                        reason: SYSCTL_FORBIDDEN,
                        message: m.into()
                    }),
                    "case {i}"
                ),
            }
        }
    }

    #[test]
    fn os_admission() {
        let table: &[(serde_json::Value, Option<&str>)] = &[
            (json!({}), None),
            (json!({"spec": {"os": {"name": "linux"}}}), None),
            (
                json!({"spec": {"os": {"name": "windows"}}}),
                Some("PodOSNotSupported"),
            ),
            (json!({"labels": {"kubernetes.io/os": "linux"}}), None),
            (
                json!({"labels": {"kubernetes.io/os": "windows"}}),
                Some("PodOSSelectorNodeLabelDoesNotMatch"),
            ),
        ];
        for (extra, want) in table {
            let mut p = json!({"metadata": {"name": "p"}, "spec": {"containers": [{"name": "c"}]}});
            if let Some(l) = extra.get("labels") {
                p["metadata"]["labels"] = l.clone();
            }
            if let Some(os) = extra.pointer("/spec/os") {
                p["spec"]["os"] = os.clone();
            }
            let got = admit(&pod(p), &node(&[])).err().map(|r| r.reason);
            assert_eq!(got, *want, "{extra}");
        }
        let r = admit(
            &pod(json!({"metadata": {"name": "p"}, "spec": {"containers": [], "os": {"name": "windows"}}})),
            &node(&[]),
        )
        .unwrap_err();
        assert_eq!(
            r.status_message(),
            "Pod was rejected: Failed to admit pod as the OS field doesn't match node OS"
        );
        let st = rejected_status(&r, None, "BestEffort".into());
        assert_eq!(st.phase.as_deref(), Some("Failed"));
        assert_eq!(st.reason.as_deref(), Some("PodOSNotSupported"));
        assert!(st.container_statuses.is_none() && st.conditions.is_none());
    }

    #[test]
    fn active_deadline() {
        let t = |s: i64| Timestamp::from_second(1_700_000_000 + s).unwrap();
        let table = [
            // (deadline, start, now, past)
            (None, Some(t(0)), t(1000), false),
            (Some(5), None, t(1000), false),
            (Some(5), Some(t(0)), t(4), false),
            (Some(5), Some(t(0)), t(5), true),
            (Some(5), Some(t(0)), t(6), true),
            // Lowered below the time already run: past at once.
            (Some(1), Some(t(0)), t(30), true),
            (Some(0), Some(t(0)), t(0), true),
        ];
        for (i, (d, s, n, want)) in table.into_iter().enumerate() {
            assert_eq!(past_deadline(d, s, n), want, "case {i}");
        }
    }

    #[test]
    fn readiness_gates() {
        let gates = |ts: &[&str]| -> Vec<PodReadinessGate> {
            ts.iter()
                .map(|t| PodReadinessGate {
                    condition_type: t.to_string(),
                })
                .collect()
        };
        let conds = |cs: &[(&str, &str)]| -> Vec<PodCondition> {
            cs.iter()
                .map(|(t, s)| PodCondition {
                    type_: t.to_string(),
                    status: s.to_string(),
                    ..Default::default()
                })
                .collect()
        };
        let (g1, g2) = ("k8s.io/test-condition1", "k8s.io/test-condition2");
        // (gates, the pod's conditions, why not ready)
        type Case<'a> = (&'a [&'a str], &'a [(&'a str, &'a str)], Option<&'a str>);
        let table: &[Case] = &[
            (&[], &[], None),
            (&[], &[("Ready", "False")], None),
            (
                &[g1, g2],
                &[],
                Some("corresponding condition of pod readiness gate \"k8s.io/test-condition1\" does not exist., corresponding condition of pod readiness gate \"k8s.io/test-condition2\" does not exist."),
            ),
            (
                &[g1, g2],
                &[(g1, "True")],
                Some("corresponding condition of pod readiness gate \"k8s.io/test-condition2\" does not exist."),
            ),
            (&[g1, g2], &[(g1, "True"), (g2, "True")], None),
            (
                &[g1, g2],
                &[(g1, "False"), (g2, "True")],
                Some("the status of pod readiness gate \"k8s.io/test-condition1\" is not \"True\", but False"),
            ),
        ];
        for (i, (gs, cs, want)) in table.iter().enumerate() {
            assert_eq!(
                unready_gates(&gates(gs), &conds(cs)).as_deref(),
                *want,
                "case {i}"
            );
        }
    }
}
