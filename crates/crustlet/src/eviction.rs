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
        "The node was low on resource: {resource}. Threshold quantity: {}, available: {}. ",
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

/// The ephemeral storage pods use, from the summary's figures (what `/stats/summary`
/// reports): by pod uid, the containers' (name, writable layer + logs) and the pod's
/// volumes on the node's disk.
async fn disk_usage(ctx: &Ctx) -> anyhow::Result<HashMap<String, (Vec<(String, u64)>, u64)>> {
    let sampler = crate::server::stats::CpuSampler::default();
    let summary = crate::server::stats::summary(ctx, &sampler, false).await?;
    let mut out = HashMap::new();
    for p in summary["pods"].as_array().into_iter().flatten() {
        let Some(uid) = p["podRef"]["uid"].as_str() else {
            continue;
        };
        let containers: Vec<(String, u64)> = p["containers"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|c| {
                let b = |k: &str| c[k]["usedBytes"].as_u64().unwrap_or(0);
                (
                    c["name"].as_str().unwrap_or_default().to_string(),
                    b("rootfs") + b("logs"),
                )
            })
            .collect();
        let total = p["ephemeral-storage"]["usedBytes"].as_u64().unwrap_or(0);
        let volumes = total.saturating_sub(containers.iter().map(|(_, b)| b).sum());
        out.insert(uid.to_string(), (containers, volumes));
    }
    Ok(out)
}

async fn look(ctx: &Ctx) -> anyhow::Result<()> {
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
        usage.get(uid).cloned().unwrap_or_default()
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
