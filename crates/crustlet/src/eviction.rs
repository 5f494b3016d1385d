//! The eviction manager, as the kubelet's hard eviction does it: every 10 s, when
//! `memory.available` (the host's MemAvailable) or the root dir's filesystem
//! (`nodefs.available`, `nodefs.inodesFree`) is below `--eviction-hard`'s threshold,
//! one pod is chosen and its worker told to end it: killed at once (a hard threshold
//! gives no grace), Failed with reason `Evicted`, a `DisruptionTarget` condition and a
//! warning event saying what it used. One pod per look, as the kubelet: the next look
//! sees what that freed. Before the kernel's OOM killer has to choose (it could choose
//! the node's agents), the pod the kubelet would pick goes.
//!
//! The choice is the kubelet's `rankMemoryPressure` and `rankDiskPressure`: pods using
//! more than they request first (memory: their containers' working sets; disk: their
//! ephemeral storage, the containers' writable layers and logs and the pod's volumes on
//! the node's disk), then lower priority first, then the largest use above the request.
//! Under disk pressure the node's own garbage goes first: every unused image past the
//! collector's minimum age (the kubelet's `DeleteUnusedImages`), and a pod is evicted
//! only if that was not enough. Static and mirror pods and pods of a critical priority
//! (2000000000 and up) are never evicted.

use crate::node::{host, status};
use crate::spec;
use crate::Ctx;
use k8s_openapi::api::core::v1::Pod;
use parking_lot::Mutex;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

/// The kubelet's reason and the start of its message.
pub const REASON: &str = "Evicted";

/// How the message of an eviction for node pressure starts; only those evictions give
/// the pod a `DisruptionTarget` condition (the kubelet's local storage evictions and
/// its admission refusals do not).
pub const PRESSURE: &str = "The node was low on resource: ";

/// Pods the manager has chosen, by uid, with the message their status gets; taken by
/// their workers.
#[derive(Default)]
pub struct Evictions {
    asked: Mutex<HashMap<String, String>>,
}

impl Evictions {
    /// The eviction asked of pod `uid`, if any (once).
    pub fn take(&self, uid: &str) -> Option<String> {
        self.asked.lock().remove(uid)
    }

    fn ask(&self, uid: &str, message: String) {
        self.asked.lock().insert(uid.to_string(), message);
    }
}

/// A pod as the ranking sees it.
#[derive(Debug, Clone, PartialEq)]
pub struct Candidate {
    pub uid: String,
    pub priority: i32,
    /// What its containers request of the resource (memory: a limit stands for a
    /// missing request).
    pub request: u64,
    /// Its containers' use: (name, bytes).
    pub usage: Vec<(String, u64)>,
    /// The pod's use outside its containers (disk: its volumes on the node's disk).
    pub pod_usage: u64,
}

impl Candidate {
    fn used(&self) -> u64 {
        self.usage.iter().map(|(_, b)| b).sum::<u64>() + self.pod_usage
    }
}

/// The pod to evict first, as the kubelet ranks them under memory or disk pressure.
pub fn choose(mut pods: Vec<Candidate>) -> Option<Candidate> {
    pods.sort_by(|a, b| {
        let over = |c: &Candidate| c.used() > c.request;
        over(b)
            .cmp(&over(a))
            .then(a.priority.cmp(&b.priority))
            .then(
                (b.used() as i128 - b.request as i128).cmp(&(a.used() as i128 - a.request as i128)),
            )
    });
    pods.into_iter().next()
}

/// `bytes` as a quantity in binary SI prints (Kubernetes' canonical form): the largest
/// of Ki, Mi, Gi, Ti, Pi, Ei that divides it, else the plain number.
fn binary_si(bytes: u64) -> String {
    if bytes == 0 {
        return "0".into();
    }
    let mut v = bytes;
    let mut unit = 0;
    while v % 1024 == 0 && unit < 6 {
        v /= 1024;
        unit += 1;
    }
    format!("{v}{}", ["", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei"][unit])
}

/// The kubelet's message for a pod evicted for `resource` (`memory`,
/// `ephemeral-storage`): the threshold, what was available, and each container using
/// more than it requests.
pub fn message(
    resource: &str,
    threshold: u64,
    available: u64,
    c: &Candidate,
    requests: &[(String, u64)],
) -> String {
    let mut m = format!(
        "{PRESSURE}{resource}. Threshold quantity: {}, available: {}. ",
        binary_si(threshold),
        binary_si(available)
    );
    for (name, used) in &c.usage {
        let req = requests
            .iter()
            .find(|(n, _)| n == name)
            .map_or(0, |(_, r)| *r);
        if *used > req {
            m.push_str(&format!(
                "Container {name} was using {}, request is {}, has larger consumption of {resource}. ",
                binary_si(*used),
                binary_si(req)
            ));
        }
    }
    m
}

/// What each container of `pod` requests of `resource` (its limit when it sets no
/// request).
fn requests(pod: &Pod, resource: &str) -> Vec<(String, u64)> {
    spec::spec(pod)
        .containers
        .iter()
        .map(|c| {
            let r = c.resources.as_ref();
            let q = r
                .and_then(|r| r.requests.as_ref()?.get(resource))
                .or_else(|| r.and_then(|r| r.limits.as_ref()?.get(resource)));
            let v = q
                .and_then(|q| crate::quantity::value(q).ok())
                .and_then(|v| u64::try_from(v).ok())
                .unwrap_or(0);
            (c.name.clone(), v)
        })
        .collect()
}

/// The working sets of the running containers of pods, by pod uid.
async fn usage(ctx: &Ctx) -> anyhow::Result<HashMap<String, Vec<(String, u64)>>> {
    let stats = ctx
        .cri
        .runtime
        .clone()
        .list_container_stats(cri_api::ListContainerStatsRequest { filter: None })
        .await?
        .into_inner()
        .stats;
    let mut out: HashMap<String, Vec<(String, u64)>> = HashMap::new();
    for s in stats {
        let Some(a) = s.attributes else { continue };
        let Some(uid) = a.labels.get(spec::POD_UID) else {
            continue;
        };
        let name = a.metadata.map(|m| m.name).unwrap_or_default();
        let ws = s
            .memory
            .and_then(|m| m.working_set_bytes)
            .map_or(0, |v| v.value);
        out.entry(uid.clone()).or_default().push((name, ws));
    }
    Ok(out)
}

/// Looks every 10 s for as long as the crustlet runs.
pub async fn run(ctx: Arc<Ctx>) {
    loop {
        tokio::time::sleep(Duration::from_secs(10)).await;
        if let Err(e) = look(&ctx).await {
            tracing::debug!("eviction: {e:#}");
        }
    }
}

/// A pod's use of the node's disk, as `/stats/summary` reports it.
#[derive(Debug, Default, Clone)]
pub struct PodDisk {
    /// Each running container's (name, writable layer + logs).
    pub containers: Vec<(String, u64)>,
    /// Each volume the summary lists: (the pod's name for it, bytes used).
    pub volumes: Vec<(String, u64)>,
    /// The pod's ephemeral storage: its containers' and its volumes on the node's disk.
    pub total: u64,
}

impl PodDisk {
    /// What the pod itself uses beyond its containers (its volumes on the node's disk).
    fn beyond_containers(&self) -> u64 {
        self.total
            .saturating_sub(self.containers.iter().map(|(_, b)| b).sum())
    }
}

/// The ephemeral storage pods use, from the summary's figures (what `/stats/summary`
/// reports), by pod uid.
async fn disk_usage(ctx: &Ctx) -> anyhow::Result<HashMap<String, PodDisk>> {
    let sampler = crate::server::stats::CpuSampler::default();
    let summary = crate::server::stats::summary(ctx, &sampler, false).await?;
    let mut out = HashMap::new();
    for p in summary["pods"].as_array().into_iter().flatten() {
        let Some(uid) = p["podRef"]["uid"].as_str() else {
            continue;
        };
        let list = |k: &str, bytes: &dyn Fn(&serde_json::Value) -> u64| {
            p[k].as_array()
                .into_iter()
                .flatten()
                .map(|v| (v["name"].as_str().unwrap_or_default().to_string(), bytes(v)))
                .collect::<Vec<_>>()
        };
        let used = |v: &serde_json::Value| v["usedBytes"].as_u64().unwrap_or(0);
        let d = PodDisk {
            containers: list("containers", &|c| used(&c["rootfs"]) + used(&c["logs"])),
            volumes: list("volume", &used),
            total: used(&p["ephemeral-storage"]),
        };
        out.insert(uid.to_string(), d);
    }
    Ok(out)
}

/// Whether the pod sets a local storage limit the kubelet enforces: an emptyDir's
/// `sizeLimit` or an `ephemeral-storage` limit of a container.
fn has_local_limits(pod: &Pod) -> bool {
    let s = spec::spec(pod);
    let volumes = s.volumes.iter().flatten();
    volumes
        .into_iter()
        .any(|v| v.empty_dir.as_ref().is_some_and(|e| e.size_limit.is_some()))
        || s.containers
            .iter()
            .chain(s.init_containers.iter().flatten())
            .any(|c| ephemeral_limit(c).is_some())
}

/// A container's `ephemeral-storage` limit.
fn ephemeral_limit(c: &k8s_openapi::api::core::v1::Container) -> Option<Bytes> {
    let q = c
        .resources
        .as_ref()?
        .limits
        .as_ref()?
        .get("ephemeral-storage")?;
    Bytes::of(q)
}

/// A quantity of bytes and the form it was written in.
#[derive(Debug, Clone, Copy)]
struct Bytes {
    n: u64,
    /// Written with a binary suffix (Ki, Mi...): Kubernetes prints it in binary SI,
    /// else in decimal SI.
    binary: bool,
}

impl Bytes {
    fn of(q: &k8s_openapi::apimachinery::pkg::api::resource::Quantity) -> Option<Bytes> {
        let n = u64::try_from(crate::quantity::value(q).ok()?).ok()?;
        let binary = q.0.trim_end().ends_with('i');
        Some(Bytes { n, binary })
    }

    /// `n` in this form (a Quantity's canonical `String()`).
    fn show(self, n: u64) -> String {
        if self.binary {
            binary_si(n)
        } else {
            decimal_si(n)
        }
    }
}

/// `n` with the largest of k, M, G, T, P, E that divides it.
fn decimal_si(n: u64) -> String {
    if n == 0 {
        return "0".into();
    }
    let (mut v, mut unit) = (n, 0);
    while v % 1000 == 0 && unit < 6 {
        v /= 1000;
        unit += 1;
    }
    format!("{v}{}", ["", "k", "M", "G", "T", "P", "E"][unit])
}

/// The kubelet's local storage eviction of one pod (LocalStorageCapacityIsolation, on
/// by default), in its order: an emptyDir beyond its `sizeLimit`, the pod's ephemeral
/// storage beyond the sum of its containers' limits, a container's writable layer and
/// logs beyond its own limit. The message, if the pod is to go.
pub fn local_limit_exceeded(pod: &Pod, d: &PodDisk) -> Option<String> {
    let s = spec::spec(pod);
    for v in s.volumes.iter().flatten() {
        let size = v.empty_dir.as_ref().and_then(|e| e.size_limit.as_ref());
        let Some(limit) = size.and_then(Bytes::of) else {
            continue;
        };
        let used = d
            .volumes
            .iter()
            .find(|(n, _)| *n == v.name)
            .map(|(_, b)| *b);
        if limit.n > 0 && used.is_some_and(|u| u > limit.n) {
            return Some(format!(
                "Usage of EmptyDir volume {:?} exceeds the limit {:?}. ",
                v.name,
                limit.show(limit.n)
            ));
        }
    }
    // The pod's limit: its containers' together, or its largest init container's if
    // more (the kubelet's PodLimits), printed in the first limit's form.
    let limits: Vec<Bytes> = s.containers.iter().filter_map(ephemeral_limit).collect();
    let inits: Vec<Bytes> = s
        .init_containers
        .iter()
        .flatten()
        .filter_map(ephemeral_limit)
        .collect();
    if let Some(first) = limits.iter().chain(&inits).next() {
        let sum: u64 = limits.iter().map(|b| b.n).sum();
        let limit = sum.max(inits.iter().map(|b| b.n).max().unwrap_or(0));
        if d.total > limit {
            return Some(format!(
                "Pod ephemeral local storage usage exceeds the total limit of containers {}. ",
                first.show(limit)
            ));
        }
    }
    for (name, used) in &d.containers {
        let c = s.containers.iter().find(|c| c.name == *name);
        if let Some(limit) = c.and_then(ephemeral_limit).filter(|l| l.n > 0) {
            if *used > limit.n {
                return Some(format!(
                    "Container {name} exceeded its local ephemeral storage limit {:?}. ",
                    limit.show(limit.n)
                ));
            }
        }
    }
    None
}

/// Every running pod with a local storage limit it went beyond is told to end, as the
/// kubelet looks at every pass whatever the node's pressure. The summary (a walk of
/// every pod's disk use) is made only when some pod sets such a limit. True when a pod
/// was told to go: the kubelet's pass ends there.
async fn local_storage(ctx: &Ctx) -> anyhow::Result<bool> {
    let pods: Vec<Arc<Pod>> = ctx
        .seen
        .running()
        .into_iter()
        .filter(|p| {
            has_local_limits(p) && !crate::worker::admit::critical(p, ctx.source(p) == "file")
        })
        .collect();
    if pods.is_empty() {
        return Ok(false);
    }
    let usage = disk_usage(ctx).await?;
    let mut evicted = false;
    for p in pods {
        let Some(msg) = usage
            .get(spec::uid(&p))
            .and_then(|d| local_limit_exceeded(&p, d))
        else {
            continue;
        };
        tracing::warn!(pod = %spec::key(&p), "local storage limit: evicting: {msg}");
        ctx.evictions.ask(spec::uid(&p), msg);
        ctx.wakers.wake(spec::uid(&p));
        evicted = true;
    }
    Ok(evicted)
}

async fn look(ctx: &Ctx) -> anyhow::Result<()> {
    if local_storage(ctx).await? {
        return Ok(());
    }
    let root = ctx.cfg.root_dir.clone();
    let r = tokio::task::spawn_blocking(move || host::readings(&root)).await?;
    if status::memory_pressure(&r) {
        let available = r.mem_available.unwrap_or(0);
        let threshold = status::thresholds().memory_available.of(r.mem_total);
        let usage = usage(ctx).await?;
        return evict_one(ctx, "memory", threshold, available, |uid| {
            (usage.get(uid).cloned().unwrap_or_default(), 0)
        });
    }
    if !status::disk_pressure(&r) {
        return Ok(());
    }
    // The node's garbage first; a pod only if that was not enough.
    let removed = crate::gc::reclaim(ctx).await?;
    let root = ctx.cfg.root_dir.clone();
    let r = if removed > 0 {
        let r = tokio::task::spawn_blocking(move || host::readings(&root)).await?;
        if !status::disk_pressure(&r) {
            tracing::info!(removed, "disk pressure relieved by removing unused images");
            return Ok(());
        }
        r
    } else {
        r
    };
    let fs = r.fs.unwrap_or_default();
    let t = status::thresholds();
    let (threshold, available) =
        if fs.capacity > 0 && fs.available < t.nodefs_available.of(fs.capacity) {
            (t.nodefs_available.of(fs.capacity), fs.available)
        } else {
            // Inodes: the kubelet names the same resource, with counts.
            (t.nodefs_inodes_free.of(fs.inodes), fs.inodes_free)
        };
    let usage = disk_usage(ctx).await?;
    evict_one(ctx, "ephemeral-storage", threshold, available, |uid| {
        let d = usage.get(uid).cloned().unwrap_or_default();
        let beyond = d.beyond_containers();
        (d.containers, beyond)
    })
}

/// Chooses one pod among those that may be evicted, by their use of `resource`
/// (`usage(uid)`: the containers' and the pod's own), and tells its worker to end it.
fn evict_one(
    ctx: &Ctx,
    resource: &str,
    threshold: u64,
    available: u64,
    usage: impl Fn(&str) -> (Vec<(String, u64)>, u64),
) -> anyhow::Result<()> {
    let pods: Vec<Arc<Pod>> = ctx
        .seen
        .running()
        .into_iter()
        .filter(|p| !crate::worker::admit::critical(p, ctx.source(p) == "file"))
        .collect();
    let candidates: Vec<Candidate> = pods
        .iter()
        .map(|p| {
            let (containers, pod_usage) = usage(spec::uid(p));
            Candidate {
                uid: spec::uid(p).to_string(),
                priority: spec::spec(p).priority.unwrap_or(0),
                request: requests(p, resource).iter().map(|(_, r)| r).sum(),
                usage: containers,
                pod_usage,
            }
        })
        .collect();
    let Some(victim) = choose(candidates) else {
        tracing::warn!(
            resource,
            available,
            threshold,
            "node pressure, and no pod that can be evicted"
        );
        return Ok(());
    };
    let pod = pods
        .iter()
        .find(|p| spec::uid(p) == victim.uid)
        .expect("the victim is one of the pods");
    let msg = message(
        resource,
        threshold,
        available,
        &victim,
        &requests(pod, resource),
    );
    tracing::warn!(pod = %spec::key(pod), resource, available, threshold, "node pressure: evicting");
    ctx.evictions.ask(&victim.uid, msg);
    ctx.wakers.wake(&victim.uid);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn c(uid: &str, priority: i32, request: u64, used: u64) -> Candidate {
        Candidate {
            uid: uid.into(),
            priority,
            request,
            usage: vec![("main".into(), used)],
            pod_usage: 0,
        }
    }

    #[test]
    fn the_kubelets_ranking_under_memory_pressure() {
        // Over its request comes first, whatever its size or priority.
        let big_within = c("big-within", 0, 1 << 30, 900 << 20);
        let small_over = c("small-over", 1000, 0, 10 << 20);
        assert_eq!(
            choose(vec![big_within.clone(), small_over.clone()])
                .unwrap()
                .uid,
            "small-over"
        );
        // Among those over: lower priority first, then the most above the request.
        let low = c("low", -5, 0, 1 << 20);
        let high_bigger = c("high", 10, 0, 500 << 20);
        assert_eq!(
            choose(vec![high_bigger.clone(), low.clone()]).unwrap().uid,
            "low"
        );
        let a = c("a", 0, 100 << 20, 300 << 20);
        let b = c("b", 0, 0, 250 << 20);
        assert_eq!(choose(vec![a, b]).unwrap().uid, "b");
        assert!(choose(vec![]).is_none());
    }

    #[test]
    fn the_message_names_what_each_container_used() {
        let v = Candidate {
            uid: "u".into(),
            priority: 0,
            request: 0,
            usage: vec![("hog".into(), 400 << 20), ("quiet".into(), 1 << 20)],
            pod_usage: 0,
        };
        let m = message(
            "memory",
            100 << 20,
            90 << 20,
            &v,
            &[("hog".into(), 0), ("quiet".into(), 2 << 20)],
        );
        assert_eq!(
            m,
            "The node was low on resource: memory. Threshold quantity: 100Mi, available: 90Mi. \
             Container hog was using 400Mi, request is 0, has larger consumption of memory. "
        );
    }

    /// The kubelet's local storage limits, in its order and words.
    #[test]
    fn local_storage_limits_as_the_kubelet() {
        let pod = |containers: serde_json::Value, volumes: serde_json::Value| -> Pod {
            serde_json::from_value(serde_json::json!({
                "metadata": {"name": "p", "uid": "u"},
                "spec": {"containers": containers, "volumes": volumes},
            }))
            .unwrap()
        };
        let limited = |name: &str, limit: &str| serde_json::json!({"name": name, "resources": {"limits": {"ephemeral-storage": limit}}});
        let disk = |containers: &[(&str, u64)], volumes: &[(&str, u64)], total: u64| PodDisk {
            containers: containers
                .iter()
                .map(|(n, b)| (n.to_string(), *b))
                .collect(),
            volumes: volumes.iter().map(|(n, b)| (n.to_string(), *b)).collect(),
            total,
        };
        // upstream's "evicted pods should be terminal": one container, 5Mi, 10 MiB written.
        let p = pod(
            serde_json::json!([limited("bar", "5Mi")]),
            serde_json::json!([]),
        );
        assert!(has_local_limits(&p));
        let over = disk(&[("bar", 10 << 20)], &[], 10 << 20);
        assert_eq!(
            local_limit_exceeded(&p, &over).as_deref(),
            Some("Pod ephemeral local storage usage exceeds the total limit of containers 5Mi. ")
        );
        assert_eq!(
            local_limit_exceeded(&p, &disk(&[("bar", 5 << 20)], &[], 5 << 20)),
            None
        );
        // Two containers: the pod's limit is their sum, in the first one's form.
        let p = pod(
            serde_json::json!([limited("a", "2M"), limited("b", "3000k")]),
            serde_json::json!([]),
        );
        assert_eq!(
            local_limit_exceeded(
                &p,
                &disk(&[("a", 4_000_000), ("b", 1_000_001)], &[], 5_000_001)
            )
            .as_deref(),
            Some("Pod ephemeral local storage usage exceeds the total limit of containers 5M. ")
        );
        // A container beyond its own limit while the pod is within its own: an init
        // container's larger limit raises the pod's.
        let mut p = pod(
            serde_json::json!([limited("main", "1Mi")]),
            serde_json::json!([]),
        );
        p.spec.as_mut().unwrap().init_containers =
            Some(vec![
                serde_json::from_value(limited("init", "100Mi")).unwrap()
            ]);
        assert_eq!(
            local_limit_exceeded(&p, &disk(&[("main", 2 << 20)], &[], 2 << 20)).as_deref(),
            Some("Container main exceeded its local ephemeral storage limit \"1Mi\". ")
        );
        // An emptyDir beyond its sizeLimit comes first, named; a pod without limits is
        // never looked at.
        let p = pod(
            serde_json::json!([limited("main", "1Gi")]),
            serde_json::json!([{"name": "cache", "emptyDir": {"sizeLimit": "1Mi"}}]),
        );
        assert_eq!(
            local_limit_exceeded(&p, &disk(&[("main", 0)], &[("cache", 3 << 20)], 3 << 20))
                .as_deref(),
            Some("Usage of EmptyDir volume \"cache\" exceeds the limit \"1Mi\". ")
        );
        assert_eq!(
            local_limit_exceeded(&p, &disk(&[("main", 0)], &[("cache", 1 << 20)], 1 << 20)),
            None
        );
        let free = pod(
            serde_json::json!([{"name": "main"}]),
            serde_json::json!([{"name": "d", "emptyDir": {}}]),
        );
        assert!(!has_local_limits(&free));
        assert_eq!(decimal_si(5_000_000), "5M");
        assert_eq!(decimal_si(1500), "1500");
    }

    /// Quantities as Kubernetes prints them in binary SI.
    #[test]
    fn quantities_in_their_canonical_form() {
        assert_eq!(binary_si(0), "0");
        assert_eq!(binary_si(1536), "1536");
        assert_eq!(binary_si(4096), "4Ki");
        assert_eq!(binary_si(3 << 30), "3Gi");
        assert_eq!(binary_si((1 << 30) + 512 * 1024), "1049088Ki");
    }

    /// Under disk pressure the pod's volumes count with its containers' layers and
    /// logs, and a pod within its ephemeral-storage request goes after one beyond it.
    #[test]
    fn disk_ranking_counts_volumes_and_requests() {
        let mut logs = c("logs", 0, 0, 10 << 20);
        let mut volume = c("volume", 0, 0, 1 << 20);
        volume.pod_usage = 50 << 20;
        assert_eq!(
            choose(vec![logs.clone(), volume.clone()]).unwrap().uid,
            "volume"
        );
        volume.request = 1 << 30;
        logs.request = 0;
        assert_eq!(
            choose(vec![volume.clone(), logs.clone()]).unwrap().uid,
            "logs"
        );
        let m = message(
            "ephemeral-storage",
            10 << 30,
            (9 << 30) + 4096,
            &logs,
            &[("main".into(), 0)],
        );
        assert_eq!(
            m,
            "The node was low on resource: ephemeral-storage. Threshold quantity: 10Gi, available: 9437188Ki. \
             Container main was using 10Mi, request is 0, has larger consumption of ephemeral-storage. "
        );
    }
}
