//! The eviction manager, for memory, as the kubelet's hard eviction does it: every 10 s,
//! when `memory.available` (the host's MemAvailable) is below `--eviction-hard`'s
//! threshold, one pod is chosen and its worker told to end it: killed at once (a hard
//! threshold gives no grace), Failed with reason `Evicted`, a `DisruptionTarget`
//! condition and a warning event saying what it used. One pod per look, as the
//! kubelet: the next look sees what that freed. Before the kernel's OOM killer has to
//! choose (it could choose the node's agents), the pod the kubelet would pick goes.
//!
//! The choice is the kubelet's `rankMemoryPressure`: pods using more than they request
//! first, then lower priority first, then the largest use above the request. Static
//! and mirror pods and pods of a critical priority (2000000000 and up) are never
//! evicted. Disk pressure is left to image garbage collection (`gc`), and pod eviction
//! for it is not done (see the notes in docs/crustlet.md).

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
    /// The memory its containers request (a limit stands for a missing request).
    pub request: u64,
    /// Its containers' working sets: (name, bytes).
    pub usage: Vec<(String, u64)>,
}

impl Candidate {
    fn used(&self) -> u64 {
        self.usage.iter().map(|(_, b)| b).sum()
    }
}

/// The pod to evict first, as the kubelet ranks them under memory pressure.
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

/// `bytes` as the kubelet prints a memory quantity in this message: in Ki.
fn ki(bytes: u64) -> String {
    format!("{}Ki", bytes.div_ceil(1024))
}

/// The kubelet's message for a pod evicted for memory.
pub fn message(
    threshold: u64,
    available: u64,
    c: &Candidate,
    requests: &[(String, u64)],
) -> String {
    let mut m = format!(
        "The node was low on resource: memory. Threshold quantity: {}, available: {}. ",
        ki(threshold),
        ki(available)
    );
    for (name, used) in &c.usage {
        let req = requests
            .iter()
            .find(|(n, _)| n == name)
            .map_or(0, |(_, r)| *r);
        if *used > req {
            m.push_str(&format!(
                "Container {name} was using {}, request is {}, has larger consumption of memory. ",
                ki(*used),
                if req == 0 { "0".to_string() } else { ki(req) }
            ));
        }
    }
    m
}

/// The memory each container of `pod` requests (its limit when it sets no request).
fn requests(pod: &Pod) -> Vec<(String, u64)> {
    spec::spec(pod)
        .containers
        .iter()
        .map(|c| {
            let r = c.resources.as_ref();
            let q = r
                .and_then(|r| r.requests.as_ref()?.get("memory"))
                .or_else(|| r.and_then(|r| r.limits.as_ref()?.get("memory")));
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

async fn look(ctx: &Ctx) -> anyhow::Result<()> {
    let root = ctx.cfg.root_dir.clone();
    let r = tokio::task::spawn_blocking(move || host::readings(&root)).await?;
    if !status::memory_pressure(&r) {
        return Ok(());
    }
    let available = r.mem_available.unwrap_or(0);
    let threshold = status::thresholds().memory_available.of(r.mem_total);
    let usage = usage(ctx).await?;
    let pods: Vec<Arc<Pod>> = ctx
        .seen
        .running()
        .into_iter()
        .filter(|p| !crate::worker::admit::critical(p, ctx.source(p) == "file"))
        .collect();
    let candidates: Vec<Candidate> = pods
        .iter()
        .map(|p| Candidate {
            uid: spec::uid(p).to_string(),
            priority: spec::spec(p).priority.unwrap_or(0),
            request: requests(p).iter().map(|(_, r)| r).sum(),
            usage: usage.get(spec::uid(p)).cloned().unwrap_or_default(),
        })
        .collect();
    let Some(victim) = choose(candidates) else {
        tracing::warn!(
            available,
            threshold,
            "memory pressure, and no pod that can be evicted"
        );
        return Ok(());
    };
    let pod = pods
        .iter()
        .find(|p| spec::uid(p) == victim.uid)
        .expect("the victim is one of the pods");
    let msg = message(threshold, available, &victim, &requests(pod));
    tracing::warn!(pod = %spec::key(pod), available, threshold, "memory pressure: evicting");
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
        };
        let m = message(
            100 << 20,
            90 << 20,
            &v,
            &[("hog".into(), 0), ("quiet".into(), 2 << 20)],
        );
        assert_eq!(
            m,
            "The node was low on resource: memory. Threshold quantity: 102400Ki, available: 92160Ki. \
             Container hog was using 409600Ki, request is 0, has larger consumption of memory. "
        );
    }
}
