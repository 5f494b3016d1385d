//! The Node's status as the kubelet shapes it, from readings and the runtime's answers:
//! pure functions, so every rule here is tested without an apiserver.

use super::host::Readings;
use k8s_openapi::api::core::v1::{ContainerImage, NodeCondition, NodeSpec, NodeStatus};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use std::collections::BTreeMap;

/// The kubelet's default hard eviction thresholds (`memory.available<100Mi`,
/// `nodefs.available<10%`, `nodefs.inodesFree<5%`): the same numbers make the pressure
/// conditions and are taken off allocatable, so a scheduler sees what a kubelet node shows.
/// `--eviction-hard` sets others (see [`Thresholds::parse`]).
pub const MEMORY_AVAILABLE_MIN: u64 = 100 << 20;
pub const NODEFS_AVAILABLE_MIN_PERCENT: u64 = 10;
pub const NODEFS_INODES_FREE_MIN_PERCENT: u64 = 5;
/// The kubelet sets no default `pid.available` threshold, so it never reports PIDPressure
/// out of the box; the crustlet does at under a tenth of the pids left, well before forks
/// start failing.
pub const PIDS_AVAILABLE_MIN_PERCENT: u64 = 10;

/// A threshold as `--eviction-hard` gives it: an amount or a percentage of the total.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Limit {
    Amount(u64),
    Percent(u64),
}

impl Limit {
    /// The threshold in units of `total`.
    pub fn of(self, total: u64) -> u64 {
        match self {
            Limit::Amount(a) => a,
            // The kubelet turns the percentage into bytes by truncating a float product.
            Limit::Percent(p) => total / 100 * p + total % 100 * p / 100,
        }
    }
}

/// The hard eviction thresholds the pressure conditions and allocatable follow.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Thresholds {
    pub memory_available: Limit,
    pub nodefs_available: Limit,
    pub nodefs_inodes_free: Limit,
    pub pid_available: Limit,
}

impl Default for Thresholds {
    fn default() -> Self {
        Thresholds {
            memory_available: Limit::Amount(MEMORY_AVAILABLE_MIN),
            nodefs_available: Limit::Percent(NODEFS_AVAILABLE_MIN_PERCENT),
            nodefs_inodes_free: Limit::Percent(NODEFS_INODES_FREE_MIN_PERCENT),
            pid_available: Limit::Percent(PIDS_AVAILABLE_MIN_PERCENT),
        }
    }
}

static THRESHOLDS: std::sync::OnceLock<Thresholds> = std::sync::OnceLock::new();

/// The node's thresholds: set once at start from the flag, the kubelet's defaults else.
pub fn thresholds() -> Thresholds {
    THRESHOLDS.get().copied().unwrap_or_default()
}

/// Sets the thresholds for the life of the process (first call wins).
pub fn set_thresholds(t: Thresholds) {
    let _ = THRESHOLDS.set(t);
}

impl Thresholds {
    /// The kubelet's `--eviction-hard` syntax: `signal<value` pairs separated by commas,
    /// a value being a quantity (`100Mi`, `1000`) or a percentage (`10%`). Signals not
    /// named keep their defaults; `imagefs.*` are taken and left to image GC.
    pub fn parse(s: &str) -> Result<Thresholds, String> {
        let mut t = Thresholds::default();
        for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let (signal, value) = part
                .split_once('<')
                .ok_or_else(|| format!("--eviction-hard: {part:?} is not signal<value"))?;
            let limit = match value.strip_suffix('%') {
                Some(p) => Limit::Percent(
                    p.parse::<f64>()
                        .ok()
                        .filter(|p| (0.0..=100.0).contains(p))
                        .map(|p| p as u64)
                        .ok_or_else(|| format!("--eviction-hard: bad percentage {value:?}"))?,
                ),
                None => Limit::Amount(
                    crate::quantity::value(&Quantity(value.to_string()))
                        .ok()
                        .and_then(|v| u64::try_from(v).ok())
                        .ok_or_else(|| format!("--eviction-hard: bad quantity {value:?}"))?,
                ),
            };
            match signal {
                "memory.available" => t.memory_available = limit,
                "nodefs.available" => t.nodefs_available = limit,
                "nodefs.inodesFree" => t.nodefs_inodes_free = limit,
                "pid.available" => t.pid_available = limit,
                "imagefs.available" | "imagefs.inodesFree" => {}
                other => return Err(format!("--eviction-hard: unknown signal {other:?}")),
            }
        }
        Ok(t)
    }
}

/// The kubelet's `nodeStatusMaxImages` and `MaxNamesPerImageInNodeStatus`.
pub const MAX_IMAGES: usize = 50;
pub const MAX_NAMES_PER_IMAGE: usize = 5;

/// A quantity in the canonical form the apiserver prints for a BinarySI amount: the
/// largest binary suffix that divides it exactly (`8141344Ki`, `100Mi`), else plain bytes.
pub fn binary_si(bytes: u64) -> String {
    const SUFFIXES: [&str; 7] = ["", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei"];
    if bytes == 0 {
        return "0".to_string();
    }
    let (mut v, mut i) = (bytes, 0);
    while v % 1024 == 0 && i < SUFFIXES.len() - 1 {
        v /= 1024;
        i += 1;
    }
    format!("{v}{}", SUFFIXES[i])
}

/// (capacity, allocatable). Allocatable is capacity less the hard eviction thresholds
/// (and less hugepages, for memory), as the kubelet computes it with no reservations.
/// A reading that failed leaves its resource out, which makes Ready false (the kubelet's
/// "Missing node capacity" rule) instead of reporting a zero the scheduler would trust.
pub fn capacity(
    r: &Readings,
    max_pods: u32,
) -> (BTreeMap<String, Quantity>, BTreeMap<String, Quantity>) {
    let mut cap = BTreeMap::new();
    let mut alloc = BTreeMap::new();
    let mut both = |k: &str, c: String, a: String| {
        cap.insert(k.to_string(), Quantity(c));
        alloc.insert(k.to_string(), Quantity(a));
    };
    both("cpu", r.cpus.to_string(), r.cpus.to_string());
    both("pods", max_pods.to_string(), max_pods.to_string());
    if r.mem_total > 0 {
        let huge: u64 = r.hugepages.iter().map(|(_, b)| b).sum();
        let a = r
            .mem_total
            .saturating_sub(huge)
            .saturating_sub(thresholds().memory_available.of(r.mem_total));
        both("memory", binary_si(r.mem_total), binary_si(a));
    }
    for (size, bytes) in &r.hugepages {
        both(
            &format!("hugepages-{size}"),
            binary_si(*bytes),
            binary_si(*bytes),
        );
    }
    if let Some(fs) = r.fs {
        let reserve = thresholds()
            .nodefs_available
            .of(fs.capacity)
            .min(fs.capacity);
        both(
            "ephemeral-storage",
            binary_si(fs.capacity),
            binary_si(fs.capacity - reserve),
        );
    }
    (cap, alloc)
}

/// The pressure conditions that are True, in the Node's order.
pub fn pressure(r: &Readings) -> Vec<&'static str> {
    [
        ("MemoryPressure", memory_pressure(r)),
        ("DiskPressure", disk_pressure(r)),
        ("PIDPressure", pid_pressure(r)),
    ]
    .into_iter()
    .filter_map(|(c, on)| on.then_some(c))
    .collect()
}

pub fn memory_pressure(r: &Readings) -> bool {
    matches!(r.mem_available, Some(a) if a < thresholds().memory_available.of(r.mem_total))
}

pub fn disk_pressure(r: &Readings) -> bool {
    let Some(fs) = r.fs else { return false };
    let t = thresholds();
    let low_space = fs.capacity > 0 && fs.available < t.nodefs_available.of(fs.capacity);
    let low_inodes = fs.inodes > 0 && fs.inodes_free < t.nodefs_inodes_free.of(fs.inodes);
    low_space || low_inodes
}

pub fn pid_pressure(r: &Readings) -> bool {
    let Some((max, now)) = r.pids else {
        return false;
    };
    max.saturating_sub(now) < thresholds().pid_available.of(max)
}

/// What the runtime said when asked for its Status.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RuntimeState {
    /// The call failed: the runtime is gone, or not answering.
    Down,
    /// Its conditions, as (type, status, reason, message).
    Up(Vec<(String, bool, String, String)>),
}

/// The kubelet's runtime and network errors for `state`, in its words
/// (`container runtime network not ready: NetworkReady=false reason:... message:...`), so
/// the Ready condition's message reads the same on a crustlet node.
pub fn runtime_errors(state: &RuntimeState) -> Vec<String> {
    let conds = match state {
        // The kubelet says this once its last good check is 30 s old; the crustlet says
        // it at once, since a socket that refuses is a runtime that is gone.
        RuntimeState::Down => return vec!["container runtime is down".to_string()],
        RuntimeState::Up(c) => c,
    };
    let show = |ty: &str| match conds.iter().find(|c| c.0 == ty) {
        Some((t, s, r, m)) if *s => Ok(format!("{t}={s} reason:{r} message:{m}")),
        Some((t, s, r, m)) => Err(format!("{t}={s} reason:{r} message:{m}")),
        None => Err("<nil>".to_string()),
    };
    let mut errs = Vec::new();
    if let Err(c) = show("RuntimeReady") {
        errs.push(format!("container runtime not ready: {c}"));
    }
    if let Err(c) = show("NetworkReady") {
        errs.push(format!("container runtime network not ready: {c}"));
    }
    errs
}

/// Errors joined as Go's `errors.NewAggregate(...).Error()` joins them: one alone as
/// itself, several deduplicated in `[a, b]`.
pub fn aggregate(errs: &[String]) -> Option<String> {
    let mut seen: Vec<&str> = Vec::new();
    for e in errs {
        if !seen.contains(&e.as_str()) {
            seen.push(e);
        }
    }
    match seen.len() {
        0 => None,
        1 => Some(seen[0].to_string()),
        _ => Some(format!("[{}]", seen.join(", "))),
    }
}

/// A condition's wanted state: (type, status, reason, message).
pub type Want = (&'static str, bool, &'static str, String);

/// The four conditions in the kubelet's order (Ready last: older controllers read the
/// last one), from readings, runtime errors and the capacity just computed.
pub fn wanted_conditions(
    r: &Readings,
    runtime: &[String],
    cap: &BTreeMap<String, Quantity>,
) -> Vec<Want> {
    let mut errs = runtime.to_vec();
    let missing: Vec<&str> = ["cpu", "memory", "pods", "ephemeral-storage"]
        .into_iter()
        .filter(|k| !cap.contains_key(*k))
        .collect();
    if !missing.is_empty() {
        errs.push(format!(
            "Missing node capacity for resources: {}",
            missing.join(", ")
        ));
    }
    let ready = match aggregate(&errs) {
        // The kubelet v1.28 says so when its AppArmor validator finds the host able.
        None => (
            "Ready",
            true,
            "KubeletReady",
            match r.apparmor {
                None => "kubelet is posting ready status. AppArmor enabled".to_string(),
                Some(_) => "kubelet is posting ready status".to_string(),
            },
        ),
        Some(m) => ("Ready", false, "KubeletNotReady", m),
    };
    let pressure = |ty, on: bool, yes: (&'static str, &str), no: (&'static str, &str)| -> Want {
        let (reason, msg) = if on { yes } else { no };
        (ty, on, reason, msg.to_string())
    };
    vec![
        pressure(
            "MemoryPressure",
            memory_pressure(r),
            (
                "KubeletHasInsufficientMemory",
                "kubelet has insufficient memory available",
            ),
            (
                "KubeletHasSufficientMemory",
                "kubelet has sufficient memory available",
            ),
        ),
        pressure(
            "DiskPressure",
            disk_pressure(r),
            ("KubeletHasDiskPressure", "kubelet has disk pressure"),
            ("KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
        ),
        pressure(
            "PIDPressure",
            pid_pressure(r),
            (
                "KubeletHasInsufficientPID",
                "kubelet has insufficient PID available",
            ),
            (
                "KubeletHasSufficientPID",
                "kubelet has sufficient PID available",
            ),
        ),
        ready,
    ]
}

fn status_word(b: bool) -> &'static str {
    if b {
        "True"
    } else {
        "False"
    }
}

/// The conditions to post: heartbeat `now`; the transition time kept from `current` while
/// the status stays, `now` when it flips or the condition is new.
pub fn conditions(current: &[NodeCondition], wanted: &[Want], now: &Time) -> Vec<NodeCondition> {
    wanted
        .iter()
        .map(|(ty, on, reason, message)| {
            let status = status_word(*on);
            let transition = current
                .iter()
                .find(|c| c.type_ == *ty && c.status == status)
                .and_then(|c| c.last_transition_time.clone())
                .unwrap_or_else(|| now.clone());
            NodeCondition {
                type_: ty.to_string(),
                status: status.to_string(),
                reason: Some(reason.to_string()),
                message: Some(message.clone()),
                last_heartbeat_time: Some(now.clone()),
                last_transition_time: Some(transition),
            }
        })
        .collect()
}

/// The images of the node status: the largest `MAX_IMAGES` (ties by id, so the list does
/// not reorder between polls), each with its digests then its tags, at most
/// `MAX_NAMES_PER_IMAGE` names, as the kubelet lists them.
pub fn images(mut list: Vec<cri_api::Image>) -> Vec<ContainerImage> {
    list.sort_by(|a, b| b.size.cmp(&a.size).then_with(|| a.id.cmp(&b.id)));
    list.truncate(MAX_IMAGES);
    list.into_iter()
        .map(|i| {
            let mut names = i.repo_digests;
            names.extend(i.repo_tags);
            names.truncate(MAX_NAMES_PER_IMAGE);
            ContainerImage {
                names: Some(names),
                size_bytes: Some(i.size.min(i64::MAX as u64) as i64),
            }
        })
        .collect()
}

/// The pod CIDRs to hand the runtime, comma-joined as the kubelet passes them, once the
/// node has any (`podCIDRs`, or the older single `podCIDR`).
pub fn pod_cidrs(spec: Option<&NodeSpec>) -> Option<String> {
    let spec = spec?;
    match (&spec.pod_cidrs, &spec.pod_cidr) {
        (Some(l), _) if !l.is_empty() => Some(l.join(",")),
        (_, Some(c)) if !c.is_empty() => Some(c.clone()),
        _ => None,
    }
}

/// Whether posting `desired` would change what `current` shows: any condition's status,
/// reason or message, or any other field the crustlet owns. Heartbeats do not count (they
/// are what the 5-minute report refreshes), and fields others own (volumes, config, other
/// conditions, extra capacity keys) are left to them.
pub fn differs(current: Option<&NodeStatus>, desired: &NodeStatus) -> bool {
    let Some(cur) = current else { return true };
    let cur_conds = cur.conditions.as_deref().unwrap_or_default();
    for d in desired.conditions.as_deref().unwrap_or_default() {
        match cur_conds.iter().find(|c| c.type_ == d.type_) {
            Some(c) if c.status == d.status && c.reason == d.reason && c.message == d.message => {}
            _ => return true,
        }
    }
    let map_covers = |cur: &Option<BTreeMap<String, Quantity>>,
                      want: &Option<BTreeMap<String, Quantity>>| {
        let empty = BTreeMap::new();
        let cur = cur.as_ref().unwrap_or(&empty);
        want.iter().flatten().all(|(k, v)| cur.get(k) == Some(v))
    };
    !map_covers(&cur.capacity, &desired.capacity)
        || !map_covers(&cur.allocatable, &desired.allocatable)
        || cur.addresses != desired.addresses
        || cur.node_info != desired.node_info
        || cur.images.as_deref().unwrap_or_default()
            != desired.images.as_deref().unwrap_or_default()
        || cur.daemon_endpoints != desired.daemon_endpoints
}

/// The events the kubelet posts about its Node when `desired` replaces `current`: one
/// per condition that appears or flips (`NodeHasSufficientMemory`, `NodeNotReady`...).
pub fn condition_events(current: Option<&NodeStatus>, desired: &NodeStatus) -> Vec<&'static str> {
    let cur = current
        .and_then(|s| s.conditions.as_deref())
        .unwrap_or_default();
    let mut out = Vec::new();
    for d in desired.conditions.as_deref().unwrap_or_default() {
        if cur
            .iter()
            .any(|c| c.type_ == d.type_ && c.status == d.status)
        {
            continue;
        }
        let on = d.status == "True";
        let event = match (d.type_.as_str(), on) {
            ("MemoryPressure", true) => "NodeHasInsufficientMemory",
            ("MemoryPressure", false) => "NodeHasSufficientMemory",
            ("DiskPressure", true) => "NodeHasDiskPressure",
            ("DiskPressure", false) => "NodeHasNoDiskPressure",
            ("PIDPressure", true) => "NodeHasInsufficientPID",
            ("PIDPressure", false) => "NodeHasSufficientPID",
            ("Ready", true) => "NodeReady",
            ("Ready", false) => "NodeNotReady",
            _ => continue,
        };
        out.push(event);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::super::host::FsStats;
    use super::*;

    fn t(s: &str) -> Time {
        Time(s.parse().unwrap())
    }

    fn healthy() -> Readings {
        Readings {
            cpus: 2,
            mem_total: 8_141_344 * 1024,
            mem_available: Some(4 << 30),
            hugepages: vec![("1Gi".into(), 0), ("2Mi".into(), 0)],
            fs: Some(FsStats {
                capacity: 100 << 30,
                available: 50 << 30,
                inodes: 1000,
                inodes_free: 900,
            }),
            pids: Some((32768, 400)),
            apparmor: Some("AppArmor is not enabled on the host".into()),
        }
    }

    fn up() -> RuntimeState {
        RuntimeState::Up(vec![
            ("RuntimeReady".into(), true, "".into(), "".into()),
            ("NetworkReady".into(), true, "".into(), "".into()),
        ])
    }

    #[test]
    fn quantities_in_canonical_binary_form() {
        assert_eq!(binary_si(0), "0");
        assert_eq!(binary_si(1000), "1000");
        assert_eq!(binary_si(8_141_344 * 1024), "8141344Ki");
        assert_eq!(binary_si(100 << 20), "100Mi");
        assert_eq!(binary_si(2048 * 1024), "2Mi");
        assert_eq!(binary_si(1 << 30), "1Gi");
        assert_eq!(binary_si(1536), "1536");
    }

    #[test]
    fn capacity_and_allocatable_as_the_kubelet_reports_them() {
        let mut r = healthy();
        r.hugepages[1].1 = 4 << 20;
        let (cap, alloc) = capacity(&r, 110);
        let q = |m: &BTreeMap<String, Quantity>, k: &str| m[k].0.clone();
        assert_eq!(q(&cap, "cpu"), "2");
        assert_eq!(q(&cap, "pods"), "110");
        assert_eq!(q(&cap, "memory"), "8141344Ki");
        assert_eq!(
            q(&alloc, "memory"),
            binary_si(8_141_344 * 1024 - (4 << 20) - (100 << 20))
        );
        assert_eq!(q(&cap, "hugepages-2Mi"), "4Mi");
        assert_eq!(q(&cap, "hugepages-1Gi"), "0");
        assert_eq!(q(&cap, "ephemeral-storage"), "100Gi");
        assert_eq!(q(&alloc, "ephemeral-storage"), "90Gi");
        // An odd size: the reserve is truncated, the rest is plain bytes.
        r.fs.as_mut().unwrap().capacity = 1001;
        assert_eq!(capacity(&r, 1).1["ephemeral-storage"].0, "901");
        // Readings that failed are left out, and Ready says so.
        r.fs = None;
        r.mem_total = 0;
        let (cap, _) = capacity(&r, 1);
        assert!(!cap.contains_key("memory") && !cap.contains_key("ephemeral-storage"));
        let ready = wanted_conditions(&r, &[], &cap).pop().unwrap();
        assert_eq!(
            ready,
            (
                "Ready",
                false,
                "KubeletNotReady",
                "Missing node capacity for resources: memory, ephemeral-storage".into()
            )
        );
    }

    #[test]
    fn eviction_hard_parses_as_the_kubelets() {
        let t = Thresholds::parse(
            "memory.available<1Mi,nodefs.available<1%,nodefs.inodesFree<1%,imagefs.available<1%",
        )
        .unwrap();
        assert_eq!(t.memory_available, Limit::Amount(1 << 20));
        assert_eq!(t.nodefs_available, Limit::Percent(1));
        assert_eq!(t.pid_available, Thresholds::default().pid_available);
        assert_eq!(Limit::Percent(10).of(1000), 100);
        assert!(Thresholds::parse("disk.full<1%")
            .unwrap_err()
            .contains("disk.full"));
        assert!(Thresholds::parse("memory.available=1Mi").is_err());
        assert!(Thresholds::parse("nodefs.available<150%").is_err());
    }

    #[test]
    fn pressure_thresholds() {
        let mut r = healthy();
        assert!(!memory_pressure(&r) && !disk_pressure(&r) && !pid_pressure(&r));
        r.mem_available = Some(99 << 20);
        assert!(memory_pressure(&r));
        r.mem_available = None;
        assert!(!memory_pressure(&r));
        r.fs.as_mut().unwrap().available = 9 << 30;
        assert!(disk_pressure(&r));
        r.fs.as_mut().unwrap().available = 11 << 30;
        r.fs.as_mut().unwrap().inodes_free = 40;
        assert!(disk_pressure(&r));
        r.pids = Some((32768, 30000));
        assert!(pid_pressure(&r));
        r.pids = Some((32768, 29000));
        assert!(!pid_pressure(&r));
    }

    #[test]
    fn ready_follows_the_runtime_in_the_kubelets_words() {
        assert!(runtime_errors(&up()).is_empty());
        assert_eq!(
            runtime_errors(&RuntimeState::Down),
            ["container runtime is down"]
        );
        let net_down = RuntimeState::Up(vec![
            ("RuntimeReady".into(), true, "".into(), "".into()),
            (
                "NetworkReady".into(),
                false,
                "NetworkPluginNotReady".into(),
                "Network plugin returns error: cni plugin not initialized".into(),
            ),
        ]);
        let errs = runtime_errors(&net_down);
        assert_eq!(
            errs,
            ["container runtime network not ready: NetworkReady=false reason:NetworkPluginNotReady message:Network plugin returns error: cni plugin not initialized"]
        );
        let cap = capacity(&healthy(), 110).0;
        let ready = wanted_conditions(&healthy(), &errs, &cap).pop().unwrap();
        assert_eq!(
            (ready.1, ready.2, ready.3.as_str()),
            (false, "KubeletNotReady", errs[0].as_str())
        );
        let none = runtime_errors(&RuntimeState::Up(vec![]));
        assert_eq!(
            aggregate(&none).unwrap(),
            "[container runtime not ready: <nil>, container runtime network not ready: <nil>]"
        );
        let ready = wanted_conditions(&healthy(), &[], &cap).pop().unwrap();
        assert_eq!(
            ready,
            (
                "Ready",
                true,
                "KubeletReady",
                "kubelet is posting ready status".into()
            )
        );
        assert_eq!(aggregate(&["a".into(), "a".into()]).unwrap(), "a");
        let apparmor = Readings {
            apparmor: None,
            ..healthy()
        };
        let ready = wanted_conditions(&apparmor, &[], &cap).pop().unwrap();
        assert_eq!(ready.3, "kubelet is posting ready status. AppArmor enabled");
    }

    #[test]
    fn transitions_only_when_the_status_flips() {
        let cap = capacity(&healthy(), 110).0;
        let t0 = t("2024-01-01T00:00:00Z");
        let first = conditions(&[], &wanted_conditions(&healthy(), &[], &cap), &t0);
        let types: Vec<&str> = first.iter().map(|c| c.type_.as_str()).collect();
        assert_eq!(
            types,
            ["MemoryPressure", "DiskPressure", "PIDPressure", "Ready"]
        );
        assert!(first
            .iter()
            .all(|c| c.last_transition_time == Some(t0.clone())));
        assert_eq!(
            first[0].reason.as_deref(),
            Some("KubeletHasSufficientMemory")
        );
        assert_eq!(first[0].status, "False");
        assert_eq!(first[3].status, "True");

        // Same readings later: heartbeat moves, transition stays.
        let t1 = t("2024-01-01T00:00:10Z");
        let again = conditions(&first, &wanted_conditions(&healthy(), &[], &cap), &t1);
        assert!(again
            .iter()
            .all(|c| c.last_transition_time == Some(t0.clone())));
        assert!(again
            .iter()
            .all(|c| c.last_heartbeat_time == Some(t1.clone())));

        // The runtime goes: Ready flips, the others keep their transition time.
        let t2 = t("2024-01-01T00:00:20Z");
        let down = runtime_errors(&RuntimeState::Down);
        let gone = conditions(&again, &wanted_conditions(&healthy(), &down, &cap), &t2);
        assert_eq!(gone[3].status, "False");
        assert_eq!(gone[3].last_transition_time, Some(t2.clone()));
        assert_eq!(gone[0].last_transition_time, Some(t0.clone()));
        let st = |c: Vec<NodeCondition>| NodeStatus {
            conditions: Some(c),
            ..Default::default()
        };
        assert!(differs(Some(&st(again.clone())), &st(gone.clone())));
        assert!(!differs(Some(&st(first.clone())), &st(again.clone())));
        assert!(differs(None, &st(again.clone())));

        // Back: Ready flips again.
        let t3 = t("2024-01-01T00:00:30Z");
        let back = conditions(&gone, &wanted_conditions(&healthy(), &[], &cap), &t3);
        assert_eq!(back[3].status, "True");
        assert_eq!(back[3].last_transition_time, Some(t3));
    }

    #[test]
    fn events_for_conditions_that_appear_or_flip() {
        let cap = capacity(&healthy(), 110).0;
        let now = t("2024-01-01T00:00:00Z");
        let st = |errs: &[String], cur: &[NodeCondition]| NodeStatus {
            conditions: Some(conditions(
                cur,
                &wanted_conditions(&healthy(), errs, &cap),
                &now,
            )),
            ..Default::default()
        };
        let first = st(&[], &[]);
        assert_eq!(
            condition_events(None, &first),
            [
                "NodeHasSufficientMemory",
                "NodeHasNoDiskPressure",
                "NodeHasSufficientPID",
                "NodeReady"
            ]
        );
        let same = st(&[], first.conditions.as_deref().unwrap());
        assert!(condition_events(Some(&first), &same).is_empty());
        let down = st(
            &runtime_errors(&RuntimeState::Down),
            first.conditions.as_deref().unwrap(),
        );
        assert_eq!(condition_events(Some(&same), &down), ["NodeNotReady"]);
    }

    #[test]
    fn differs_looks_only_at_what_the_crustlet_owns() {
        let (cap, alloc) = capacity(&healthy(), 110);
        let desired = NodeStatus {
            capacity: Some(cap.clone()),
            allocatable: Some(alloc),
            images: Some(vec![]),
            ..Default::default()
        };
        let mut cur = desired.clone();
        // An extra capacity key (a device plugin's) and an unset images list are no change.
        cur.capacity
            .as_mut()
            .unwrap()
            .insert("example.com/gpu".into(), Quantity("1".into()));
        cur.images = None;
        cur.volumes_in_use = Some(vec!["v".into()]);
        assert!(!differs(Some(&cur), &desired));
        cur.capacity
            .as_mut()
            .unwrap()
            .insert("pods".into(), Quantity("10".into()));
        assert!(differs(Some(&cur), &desired));
    }

    fn img(id: &str, size: u64, tags: &[&str], digests: &[&str]) -> cri_api::Image {
        cri_api::Image {
            id: id.into(),
            size,
            repo_tags: tags.iter().map(|s| s.to_string()).collect(),
            repo_digests: digests.iter().map(|s| s.to_string()).collect(),
            ..Default::default()
        }
    }

    #[test]
    fn images_largest_first_digests_then_tags_capped() {
        let mut list = vec![
            img("small", 10, &["busybox:1"], &["busybox@sha256:aa"]),
            img(
                "big",
                1000,
                &["a:1", "a:2", "a:3", "a:4"],
                &["a@sha256:1", "a@sha256:2"],
            ),
            img("mid-b", 100, &["b:1"], &[]),
            img("mid-a", 100, &[], &["c@sha256:3"]),
        ];
        for i in 0..60 {
            list.push(img(&format!("tiny{i:02}"), 1, &[], &[]));
        }
        let out = images(list);
        // The kubelet's nodeStatusMaxImages.
        assert_eq!(out.len(), 50);
        assert_eq!(
            out[0].names.as_deref().unwrap(),
            ["a@sha256:1", "a@sha256:2", "a:1", "a:2", "a:3"]
        );
        assert_eq!(out[0].size_bytes, Some(1000));
        assert_eq!(out[1].names.as_deref().unwrap(), ["c@sha256:3"]);
        assert_eq!(out[2].names.as_deref().unwrap(), ["b:1"]);
        assert_eq!(
            out[3].names.as_deref().unwrap(),
            ["busybox@sha256:aa", "busybox:1"]
        );
        assert_eq!(out[4].size_bytes, Some(1));
    }

    #[test]
    fn pod_cidrs_joined() {
        let s = |one: Option<&str>, many: Option<&[&str]>| NodeSpec {
            pod_cidr: one.map(Into::into),
            pod_cidrs: many.map(|l| l.iter().map(|s| s.to_string()).collect()),
            ..Default::default()
        };
        assert_eq!(pod_cidrs(None), None);
        assert_eq!(pod_cidrs(Some(&s(None, None))), None);
        assert_eq!(
            pod_cidrs(Some(&s(Some("10.244.1.0/24"), None))).as_deref(),
            Some("10.244.1.0/24")
        );
        assert_eq!(
            pod_cidrs(Some(&s(
                Some("10.244.1.0/24"),
                Some(&["10.244.1.0/24", "fd00:1::/64"])
            )))
            .as_deref(),
            Some("10.244.1.0/24,fd00:1::/64")
        );
    }
}
