//! Where pods come from and who runs them: a watch on the apiserver's pods bound to
//! this node, and a folder of static pod manifests; one worker per pod uid.
//!
//! The watch lists, then watches from the list's resourceVersion, lists again after a
//! 410 Gone and reconnects with back-off (kube's watcher). After each full list, a pod
//! that was running here and is no longer in it was deleted while the watch was down,
//! and is stopped. Sandboxes in the runtime that carry a pod uid label no worker has
//! are left over (from pods deleted while the crustlet was down, or brought back by a
//! runtime that restarted): once every source's first list is in, and every 10 s after,
//! they are removed, as the kubelet's housekeeping kills the pods it does not know.

use crate::spec;
use crate::{worker, Ctx};
use futures::StreamExt;
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::api::{Api, PostParams};
use kube::runtime::watcher;
use kube::runtime::WatchStreamExt;
use std::collections::{HashMap, HashSet};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{mpsc, watch};

/// Each pod's worker by uid: where the pod came from (`api` or `file`) and the channel
/// that hands it the pod as it changes (`None`: stop it). One shared copy of each pod.
type Workers = HashMap<String, (&'static str, watch::Sender<Option<Arc<Pod>>>)>;

/// What a source says about one pod.
pub enum Update {
    /// The pod as it is now (new or changed).
    Pod(Box<Pod>),
    /// The pod with this uid is gone.
    Gone(String),
    /// The source's complete set of uids (after a full list).
    All(&'static str, HashSet<String>),
}

pub const MIRROR: &str = "kubernetes.io/config.mirror";
pub const SOURCE: &str = "kubernetes.io/config.source";

/// Runs the sources and the workers until the process ends.
pub async fn run(ctx: Arc<Ctx>) {
    let (tx, mut rx) = mpsc::channel::<Update>(256);
    if let Some(client) = ctx.client.clone() {
        tokio::spawn(watch_apiserver(
            client,
            ctx.cfg.node_name.clone(),
            tx.clone(),
        ));
    }
    if let Some(dir) = ctx.cfg.pod_manifest_path.clone() {
        tokio::spawn(watch_folder(ctx.clone(), dir, tx.clone()));
    }
    let mut workers: Workers = HashMap::new();
    // Workers no source has any more, still stopping their pod.
    let mut ending: Vec<(String, watch::Sender<Option<Arc<Pod>>>)> = vec![];
    // Every uid with a worker: what the orphan sweep must leave alone.
    let live: Arc<parking_lot::Mutex<HashSet<String>>> = Arc::default();
    let mut known: HashMap<&'static str, HashSet<String>> = HashMap::new();
    let expected =
        usize::from(ctx.client.is_some()) + usize::from(ctx.cfg.pod_manifest_path.is_some());
    let mut orphans_checked = false;
    // Pods' log dirs changed since are not orphans, whatever the first lists say.
    let started = std::time::SystemTime::now();
    let mut burstable = BurstableShare::default();
    while let Some(u) = rx.recv().await {
        match u {
            Update::Pod(pod) => {
                let pod = Arc::new(*pod);
                let uid = spec::uid(&pod).to_string();
                let source = ctx.source(&pod);
                match workers.get(&uid) {
                    Some((_, tx)) => {
                        let _ = tx.send(Some(pod));
                    }
                    None => {
                        let (tx, rx) = watch::channel(Some(pod));
                        // Live before the worker can make a sandbox.
                        live.lock().insert(uid.clone());
                        workers.insert(uid, (source, tx));
                        // The Burstable class's share first, as the kubelet does before
                        // it makes a pod's cgroup.
                        burstable.update(&ctx, &workers);
                        tokio::spawn(worker::run(ctx.clone(), rx));
                    }
                }
            }
            Update::Gone(uid) => {
                if let Some((_, tx)) = workers.remove(&uid) {
                    let _ = tx.send(None);
                    ending.push((uid, tx));
                }
            }
            Update::All(source, uids) => {
                let gone: Vec<String> = workers
                    .iter()
                    .filter(|(uid, (s, _))| *s == source && !uids.contains(*uid))
                    .map(|(uid, _)| uid.clone())
                    .collect();
                for uid in gone {
                    if let Some((_, tx)) = workers.remove(&uid) {
                        let _ = tx.send(None);
                        ending.push((uid, tx));
                    }
                }
                known.insert(source, uids);
                if !orphans_checked && known.len() == expected {
                    orphans_checked = true;
                    let all: HashSet<String> = known.values().flatten().cloned().collect();
                    tokio::spawn(sweep_orphans(ctx.clone(), live.clone(), all, started));
                }
            }
        }
        workers.retain(|_, (_, tx)| !tx.is_closed());
        ending.retain(|(_, tx)| !tx.is_closed());
        {
            let mut l = live.lock();
            l.retain(|uid| workers.contains_key(uid) || ending.iter().any(|(u, _)| u == uid));
        }
        burstable.update(&ctx, &workers);
    }
}

/// The shares of `kubepods/burstable`, written when the CPU its pods request changes.
#[derive(Default)]
struct BurstableShare {
    written: Option<i64>,
}

impl BurstableShare {
    fn update(&mut self, ctx: &Ctx, workers: &Workers) {
        let milli = burstable_request(workers.values().filter_map(|(_, tx)| tx.borrow().clone()));
        if self.written == Some(milli) {
            return;
        }
        match crate::cgroup::set_burstable(&ctx.cfg, milli) {
            Ok(()) => self.written = Some(milli),
            Err(e) => tracing::warn!("kubepods/burstable: {e}"),
        }
    }
}

/// The CPU the node's active Burstable pods request in all, millicores, as the kubelet
/// adds it up: pods that have ended or are being deleted no longer count.
fn burstable_request(pods: impl Iterator<Item = Arc<Pod>>) -> i64 {
    pods.filter(|p| {
        let phase = p.status.as_ref().and_then(|s| s.phase.as_deref());
        p.metadata.deletion_timestamp.is_none()
            && !matches!(phase, Some("Succeeded" | "Failed"))
            && spec::qos(p) == "Burstable"
    })
    .filter_map(|p| spec::pod_limits(&p).ok())
    .map(|l| l.cpu_request)
    .sum()
}

async fn watch_apiserver(client: kube::Client, node: String, tx: mpsc::Sender<Update>) {
    let api: Api<Pod> = Api::all(client.clone());
    let cfg = watcher::Config::default().fields(&format!("spec.nodeName={node}"));
    let mut stream = watcher(api, cfg).default_backoff().boxed();
    let mut listing: HashSet<String> = HashSet::new();
    let is_mirror = |p: &Pod| {
        p.metadata
            .annotations
            .as_ref()
            .is_some_and(|a| a.contains_key(MIRROR))
    };
    while let Some(ev) = stream.next().await {
        let msg = match ev.map(|e| e.modify(slim)) {
            Ok(watcher::Event::Init) => {
                listing.clear();
                continue;
            }
            Ok(watcher::Event::InitApply(p)) => {
                if is_mirror(&p) {
                    continue;
                }
                listing.insert(spec::uid(&p).to_string());
                Update::Pod(Box::new(p))
            }
            Ok(watcher::Event::InitDone) => Update::All("api", std::mem::take(&mut listing)),
            Ok(watcher::Event::Apply(p)) => {
                if is_mirror(&p) {
                    // A mirror pod deleted through the API waits for its node, as any
                    // pod does: it goes at once (the static pod runs on, and the folder
                    // scan makes its mirror again, as the kubelet does).
                    if p.metadata.deletion_timestamp.is_some() {
                        tokio::spawn(delete_now(client.clone(), p));
                    }
                    continue;
                }
                Update::Pod(Box::new(p))
            }
            Ok(watcher::Event::Delete(p)) => {
                if is_mirror(&p) {
                    continue;
                }
                Update::Gone(spec::uid(&p).to_string())
            }
            Err(e) => {
                tracing::warn!("pod watch: {e}");
                continue;
            }
        };
        if tx.send(msg).await.is_err() {
            return;
        }
    }
}

/// Drops what the crustlet never reads and the apiserver sends with every pod: its
/// `managedFields` (server-side apply's bookkeeping, often the largest part of a pod
/// object), held in up to three copies per pod (the update channel, the worker, the
/// HTTPS server's view).
fn slim(p: &mut Pod) {
    p.metadata.managed_fields = None;
}

/// Deletes `p` with grace 0 (only that very object: its uid is a precondition).
async fn delete_now(client: kube::Client, p: Pod) {
    let api: Api<Pod> = Api::namespaced(client, spec::namespace(&p));
    let dp = kube::api::DeleteParams {
        grace_period_seconds: Some(0),
        preconditions: Some(kube::api::Preconditions {
            uid: p.metadata.uid.clone(),
            resource_version: None,
        }),
        ..Default::default()
    };
    if let Err(e) = api.delete(spec::name(&p), &dp).await {
        tracing::debug!(pod = %spec::key(&p), "deleting a mirror pod: {e}");
    }
}

/// Static pods: every `*.yaml`, `*.yml` and `*.json` file of the folder is a Pod, read
/// again every few seconds; a changed file is a new pod (a new uid) that replaces the
/// old one. With an apiserver, each gets a mirror pod there (made again if it was
/// deleted), and the mirror of a pod whose file went is deleted.
async fn watch_folder(ctx: Arc<Ctx>, dir: std::path::PathBuf, tx: mpsc::Sender<Update>) {
    // uid -> the static pod, for the mirrors to delete when their files go.
    let mut mirrored: HashMap<String, Pod> = HashMap::new();
    loop {
        let mut uids = HashSet::new();
        let mut entries: Vec<_> = std::fs::read_dir(&dir)
            .map(|r| r.flatten().map(|e| e.path()).collect())
            .unwrap_or_default();
        entries.sort();
        for path in entries {
            let ext = path.extension().and_then(|e| e.to_str()).unwrap_or("");
            if !["yaml", "yml", "json"].contains(&ext) {
                continue;
            }
            match static_pod(&path, &ctx.cfg.node_name) {
                Ok(pod) => {
                    let uid = spec::uid(&pod).to_string();
                    uids.insert(uid.clone());
                    if let Some(client) = &ctx.client {
                        if mirror(client, &pod).await {
                            mirrored.insert(uid.clone(), pod.clone());
                        }
                    }
                    if tx.send(Update::Pod(Box::new(pod))).await.is_err() {
                        return;
                    }
                }
                Err(e) => tracing::warn!(file = %path.display(), "static pod: {e}"),
            }
        }
        let gone: Vec<String> = mirrored
            .keys()
            .filter(|u| !uids.contains(*u))
            .cloned()
            .collect();
        for uid in gone {
            if let (Some(pod), Some(client)) = (mirrored.remove(&uid), &ctx.client) {
                unmirror(client, &pod).await;
            }
        }
        if tx.send(Update::All("file", uids)).await.is_err() {
            return;
        }
        tokio::time::sleep(Duration::from_secs(5)).await;
    }
}

/// Reads a manifest: the pod gets the node's name appended to its own, the `default`
/// namespace if none, this node, and a uid from the file's content, as the kubelet does
/// for static pods.
pub fn static_pod(path: &Path, node: &str) -> anyhow::Result<Pod> {
    let text = std::fs::read_to_string(path)?;
    // YAML is turned into JSON first and read as the apiserver's pods are (as the
    // kubelet reads manifests too): reading a Pod straight from YAML would compile every
    // API type's deserializer a second time, over a MiB of the crustlet's resident code.
    let mut pod: Pod = if path.extension().is_some_and(|e| e == "json") {
        serde_json::from_str(&text)?
    } else {
        let doc: serde_json::Value = serde_saphyr::from_str(&text)?;
        serde_json::from_str(&doc.to_string())?
    };
    let name = pod
        .metadata
        .name
        .clone()
        .filter(|n| !n.is_empty())
        .ok_or_else(|| anyhow::anyhow!("the pod has no metadata.name"))?;
    if pod.spec.as_ref().is_none_or(|s| s.containers.is_empty()) {
        anyhow::bail!("the pod has no containers");
    }
    // A uid that changes with the content, so an edited file replaces its pod.
    let hash = fnv(format!("{node}\0{text}").as_bytes());
    pod.metadata.name = Some(format!("{name}-{node}"));
    pod.metadata
        .namespace
        .get_or_insert_with(|| "default".into());
    pod.metadata.uid = Some(format!("{hash:016x}"));
    let ann = pod
        .metadata
        .annotations
        .get_or_insert_with(Default::default);
    ann.insert(SOURCE.into(), "file".into());
    ann.insert("kubernetes.io/config.hash".into(), format!("{hash:016x}"));
    if let Some(s) = pod.spec.as_mut() {
        s.node_name = Some(node.to_string());
        // The apiserver's default, which a manifest never went through (the kubelet
        // applies it to static pods too): a container with a limit and no request for
        // that resource requests its limit (QoS, cgroups and the downward API read it).
        let inits = s.init_containers.iter_mut().flatten();
        for c in s.containers.iter_mut().chain(inits) {
            let Some(r) = c.resources.as_mut() else {
                continue;
            };
            if let Some(limits) = &r.limits {
                let requests = r.requests.get_or_insert_with(Default::default);
                for (k, v) in limits {
                    requests.entry(k.clone()).or_insert_with(|| v.clone());
                }
            }
        }
    }
    Ok(pod)
}

fn fnv(b: &[u8]) -> u64 {
    b.iter().fold(0xcbf2_9ce4_8422_2325, |h, &x| {
        (h ^ x as u64).wrapping_mul(0x0100_0000_01b3)
    })
}

/// Creates the static pod's mirror in the apiserver (replacing an outdated one), owned
/// by the Node.
async fn mirror(client: &kube::Client, pod: &Pod) -> bool {
    let api: Api<Pod> = Api::namespaced(client.clone(), spec::namespace(pod));
    let hash = pod
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get("kubernetes.io/config.hash"))
        .cloned()
        .unwrap_or_default();
    if let Ok(Some(existing)) = api.get_opt(spec::name(pod)).await {
        let same = existing
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(MIRROR))
            .is_some_and(|h| *h == hash);
        if same {
            return true;
        }
        let _ = api
            .delete(
                spec::name(pod),
                &kube::api::DeleteParams {
                    grace_period_seconds: Some(0),
                    ..Default::default()
                },
            )
            .await;
    }
    // The Node owns its mirror pods: NodeRestriction admits no other pod from a node.
    let node = pod
        .spec
        .as_ref()
        .and_then(|s| s.node_name.clone())
        .unwrap_or_default();
    let node_uid = match Api::<Node>::all(client.clone()).get(&node).await {
        Ok(n) => n.metadata.uid.unwrap_or_default(),
        Err(e) => {
            tracing::warn!(pod = %spec::key(pod), "mirror pod: the Node {node}: {e}");
            return false;
        }
    };
    let mut m = pod.clone();
    m.metadata.uid = None;
    m.metadata.resource_version = None;
    m.metadata.owner_references = Some(vec![OwnerReference {
        api_version: "v1".into(),
        kind: "Node".into(),
        name: node,
        uid: node_uid,
        controller: Some(true),
        block_owner_deletion: None,
    }]);
    m.metadata
        .annotations
        .get_or_insert_with(Default::default)
        .insert(MIRROR.into(), hash);
    m.status = None;
    match api.create(&PostParams::default(), &m).await {
        Ok(_) => true,
        Err(e) => {
            tracing::warn!(pod = %spec::key(pod), "mirror pod: {e}");
            false
        }
    }
}

/// Deletes the mirror pod of a static pod whose file went (only the mirror of that
/// very content: another file of the same pod name may have replaced it).
async fn unmirror(client: &kube::Client, pod: &Pod) {
    let api: Api<Pod> = Api::namespaced(client.clone(), spec::namespace(pod));
    let Ok(Some(m)) = api.get_opt(spec::name(pod)).await else {
        return;
    };
    let ours = m
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(MIRROR))
        .is_some_and(|h| h == spec::uid(pod));
    if ours {
        delete_now(client.clone(), m).await;
    }
}

/// Removes the sandboxes of pods no worker has, now and every 10 s; the first time, also
/// the logs of pods no source knows (`known`, their first lists: deleted while the
/// crustlet was down).
async fn sweep_orphans(
    ctx: Arc<Ctx>,
    live: Arc<parking_lot::Mutex<HashSet<String>>>,
    known: HashSet<String>,
    started: std::time::SystemTime,
) {
    remove_orphan_sandboxes(&ctx, &live).await;
    // Logs of pods whose sandbox is gone already (the crustlet stopped in between).
    let logs = ctx.cfg.pod_logs_dir.clone();
    let _ = tokio::task::spawn_blocking(move || {
        crate::pod_logs::remove_unknown(&logs, &known, started)
    })
    .await;
    loop {
        tokio::time::sleep(Duration::from_secs(10)).await;
        remove_orphan_sandboxes(&ctx, &live).await;
    }
}

/// One sweep: the runtime's sandboxes listed first, then each one's uid looked up among
/// the live workers, so that a sandbox a new worker made after the list was read is
/// never taken for an orphan.
async fn remove_orphan_sandboxes(ctx: &Ctx, live: &parking_lot::Mutex<HashSet<String>>) {
    let mut rt = ctx.cri.runtime.clone();
    let Ok(list) = rt
        .list_pod_sandbox(cri_api::ListPodSandboxRequest { filter: None })
        .await
    else {
        return;
    };
    let orphans: Vec<(String, String)> = {
        let live = live.lock();
        list.into_inner()
            .items
            .into_iter()
            .filter_map(|s| {
                let uid = s.labels.get(spec::POD_UID)?;
                (!live.contains(uid)).then(|| (s.id.clone(), uid.clone()))
            })
            .collect()
    };
    for (id, uid) in orphans {
        tracing::info!(sandbox = %id, uid = %uid, "removing the sandbox of a pod that no longer exists");
        if let Err(e) = ctx.cri.remove_sandbox(&id).await {
            tracing::warn!(sandbox = %id, "removing an orphaned sandbox: {e}");
            continue;
        }
        crate::cgroup::remove_pod(&ctx.cfg, &uid).await;
        let dir = ctx.cfg.pod_dir(&uid);
        let _ =
            tokio::task::spawn_blocking(move || crate::inputs::tmpfs::remove_pod_dir(&dir)).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn static_pods_from_yaml_and_json() {
        let d = std::env::temp_dir().join(format!("crustlet-static-{}", std::process::id()));
        std::fs::create_dir_all(&d).unwrap();
        let y = d.join("web.yaml");
        std::fs::write(
            &y,
            "apiVersion: v1\nkind: Pod\nmetadata:\n  name: web\nspec:\n  containers:\n  - name: c\n    image: busybox\n",
        )
        .unwrap();
        let p = static_pod(&y, "n1").unwrap();
        assert_eq!(spec::name(&p), "web-n1");
        assert_eq!(spec::namespace(&p), "default");
        assert_eq!(p.spec.as_ref().unwrap().node_name.as_deref(), Some("n1"));
        let uid1 = spec::uid(&p).to_string();
        std::fs::write(
            &y,
            "apiVersion: v1\nkind: Pod\nmetadata:\n  name: web\nspec:\n  containers:\n  - name: c\n    image: busybox:1\n",
        )
        .unwrap();
        assert_ne!(
            spec::uid(&static_pod(&y, "n1").unwrap()),
            uid1,
            "a changed file is a new pod"
        );
        let j = d.join("x.json");
        std::fs::write(&j, r#"{"metadata":{"name":"x"},"spec":{"containers":[]}}"#).unwrap();
        assert!(static_pod(&j, "n1")
            .unwrap_err()
            .to_string()
            .contains("no containers"));
        // Requests default to limits, resource by resource, as the apiserver's do.
        std::fs::write(
            &j,
            r#"{"metadata":{"name":"x"},"spec":{
                "initContainers":[{"name":"i","resources":{"limits":{"cpu":"1"}}}],
                "containers":[{"name":"c","resources":{"limits":{"cpu":"500m","memory":"64Mi"},
                                                     "requests":{"cpu":"100m"}}},
                              {"name":"d"}]}}"#,
        )
        .unwrap();
        let p = static_pod(&j, "n1").unwrap();
        let v = serde_json::to_value(p.spec.unwrap()).unwrap();
        assert_eq!(
            v["containers"][0]["resources"]["requests"],
            serde_json::json!({"cpu": "100m", "memory": "64Mi"})
        );
        assert!(v["containers"][1].get("resources").is_none());
        assert_eq!(
            v["initContainers"][0]["resources"]["requests"],
            serde_json::json!({"cpu": "1"})
        );
        std::fs::remove_dir_all(&d).ok();
    }
}
