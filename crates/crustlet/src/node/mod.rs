//! The Node: registration, the Lease, and status, as the kubelet keeps them.
//!
//! Two loops run side by side. One renews the Lease `kube-node-lease/<node>` every 10 s:
//! that is the heartbeat the node lifecycle controller watches, cheap enough to send
//! often. The other reads the host and the runtime every 10 s and patches the Node's
//! status only when something in it changed, or every 5 minutes as a report, so a quiet
//! node costs the apiserver one small write per 10 s. Neither stops on an apiserver or
//! runtime error: they log it and try again.
//!
//! [`host`] reads the machine, [`status`] shapes what the kubelet would post (pure
//! functions, tested without an apiserver).

pub(crate) mod host;
pub(crate) mod status;

use crate::config::Config;
use crate::cri::Cri;
use anyhow::Context;
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::api::core::v1::{
    ContainerImage, DaemonEndpoint, Node, NodeAddress, NodeDaemonEndpoints, NodeStatus,
    NodeSystemInfo,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta, OwnerReference, Time};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, GetParams, Patch, PatchParams, PostParams};
use status::RuntimeState;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::watch;

/// How often the host and the runtime are read (the kubelet's `nodeStatusUpdateFrequency`).
const STATUS_PERIOD: Duration = Duration::from_secs(10);
/// How often the status is synced from the start until the node is first Ready, as the
/// kubelet's fast status update at start: a pod range the controller-manager assigns, a
/// runtime or network that becomes ready, reach the Node within a second, not a period.
const STARTING_PERIOD: Duration = Duration::from_secs(1);
/// How often the status is posted when nothing changed (`nodeStatusReportFrequency`).
const REPORT_PERIOD: Duration = Duration::from_secs(5 * 60);
/// The Lease: renewed every 10 s, valid for 40 (the kubelet's `nodeLeaseDurationSeconds`,
/// renewed at a quarter of it), so three missed renewals in a row are tolerated.
const LEASE_PERIOD: Duration = Duration::from_secs(10);
const LEASE_DURATION_SECONDS: i32 = 40;
const LEASE_NAMESPACE: &str = "kube-node-lease";
/// Retries of a failed registration or lease renewal: the kubelet's 200 ms doubling to 7 s.
const RETRY_MIN: Duration = Duration::from_millis(200);
const RETRY_MAX: Duration = Duration::from_secs(7);
/// A CRI call of the status loop that takes longer than this counts as a runtime down.
const CRI_TIMEOUT: Duration = Duration::from_secs(10);
/// The port of the crustlet's HTTPS server (`--port`), which the apiserver dials for
/// logs and exec; set once at start, before the Node is first written.
pub static KUBELET_PORT: std::sync::atomic::AtomicI32 = std::sync::atomic::AtomicI32::new(10250);

/// The version the crustlet reports as `kubeletVersion` and `kubeProxyVersion`.
///
/// It must be semver: the apiserver, controllers and kubectl parse it (version-skew
/// checks, `kubectl get nodes`, features gated on the node's kubelet version), and a
/// string they cannot parse or a version below what the crustlet actually implements
/// would make them assume an older kubelet. v1.28.7 is the control plane the crustlet is
/// built and tested against, and claiming no newer than that keeps it within the skew
/// policy (kubelets may be older than the apiserver, never newer) on v1.28 and later
/// clusters. The crustlet and its version ride in semver build metadata (`+crustlet.x.y.z`,
/// as k3s writes `+k3s1`), which never changes how the version compares.
pub fn kubelet_version() -> String {
    format!("v1.28.7+crustlet.{}", env!("CARGO_PKG_VERSION"))
}

/// Registers the Node, then keeps its Lease and status fresh until the process ends.
pub async fn run(cfg: Arc<Config>, client: kube::Client, cri: Cri) {
    let (uid_tx, uid_rx) = watch::channel(None);
    let leases: Api<Lease> = Api::namespaced(client.clone(), LEASE_NAMESPACE);
    let recorder = Arc::new(crate::events::Recorder::new(
        client.clone(),
        cfg.node_name.clone(),
    ));
    let mut sync = NodeSync::new(cfg.clone(), Api::all(client), cri, uid_tx);
    sync.recorder = Some(recorder);
    tokio::join!(
        keep_lease(leases, cfg.node_name.clone(), uid_rx),
        sync.run()
    );
}

/// The node's memory capacity in bytes (MemTotal), 0 if /proc/meminfo cannot be read.
pub fn memory_capacity() -> i64 {
    host::memory().map(|(total, _)| total as i64).unwrap_or(0)
}

/// The node's allocatable memory in bytes, as posted in the Node's status: MemTotal less
/// hugepages and the 100Mi eviction threshold. The kubelet gives containers without a
/// memory limit this as their `limits.memory` (downward API), and it bounds the size of
/// Memory emptyDirs.
pub fn memory_allocatable() -> i64 {
    let huge: u64 = host::hugepages(std::path::Path::new("/sys/kernel/mm/hugepages"))
        .iter()
        .map(|(_, b)| b)
        .sum();
    (memory_capacity() as u64)
        .saturating_sub(huge)
        .saturating_sub(
            status::thresholds()
                .memory_available
                .of(memory_capacity() as u64),
        ) as i64
}

/// What the node gives its pods in all (`kubepods`): its CPUs, its memory less
/// hugepages, its task limit.
pub fn limits() -> crate::cgroup::NodeLimits {
    let huge: u64 = host::hugepages(std::path::Path::new("/sys/kernel/mm/hugepages"))
        .iter()
        .map(|(_, b)| b)
        .sum();
    crate::cgroup::NodeLimits {
        cpu_milli: cpu_capacity_milli(),
        memory: (memory_capacity() as u64).saturating_sub(huge),
        pids: host::pids().ok().map(|(max, _)| max),
    }
}

/// The node's CPU capacity (and allocatable: nothing is reserved) in millicores: the
/// online CPUs times 1000. The kubelet gives containers without a CPU limit this as their
/// `limits.cpu` (downward API).
pub fn cpu_capacity_milli() -> i64 {
    host::online_cpus() as i64 * 1000
}

/// The node's allocatable cpu, memory, hugepages-* and ephemeral-storage as the Node's
/// status posts them ([`status::capacity`] over fresh readings; ephemeral-storage is the
/// filesystem holding `dir`, the root dir's or a folder under it). The kubelet gives a
/// container without a cpu, memory or ephemeral-storage limit these as its limits in the
/// downward API. Blocking: statvfs can hang on a dead network filesystem.
pub fn allocatable(
    dir: &std::path::Path,
) -> BTreeMap<String, k8s_openapi::apimachinery::pkg::api::resource::Quantity> {
    // `pods` is the only entry not read from the host, and no container has it.
    let (_, mut alloc) = status::capacity(&host::readings(dir), 0);
    alloc.remove("pods");
    alloc
}

/// The node's InternalIP: `--node-ip`, else the address of the interface with the
/// default route, else the first non-loopback IPv4 address. Pods' `hostIP` is this.
pub fn node_ip(cfg: &Config) -> Option<String> {
    cfg.node_ip
        .clone()
        .or_else(|| host::detect_ip().map(|ip| ip.to_string()))
}

/// The labels a Node registers with: the kubelet's well-known ones, then `--node-labels`
/// (which may override them, as the kubelet lets them).
pub fn node_labels(cfg: &Config) -> BTreeMap<String, String> {
    let arch = host::arch().to_string();
    let mut l = BTreeMap::from([
        ("kubernetes.io/hostname".to_string(), cfg.node_name.clone()),
        ("kubernetes.io/os".to_string(), "linux".to_string()),
        ("kubernetes.io/arch".to_string(), arch.clone()),
        ("beta.kubernetes.io/os".to_string(), "linux".to_string()),
        ("beta.kubernetes.io/arch".to_string(), arch),
    ]);
    l.extend(cfg.node_labels.iter().cloned());
    l
}

/// The annotation the kubelet sets by default: volumes are attached by the
/// controller-manager's attach/detach controller, not by the node.
fn node_annotations() -> BTreeMap<String, String> {
    BTreeMap::from([(
        "volumes.kubernetes.io/controller-managed-attach-detach".to_string(),
        "true".to_string(),
    )])
}

fn api_code(e: &kube::Error) -> Option<u16> {
    match e {
        kube::Error::Api(s) => Some(s.code),
        _ => None,
    }
}

/// The status loop's state.
struct NodeSync {
    cfg: Arc<Config>,
    nodes: Api<Node>,
    cri: Cri,
    /// Facts read once: they do not change while the process lives.
    system: host::SystemInfo,
    /// `<runtime_name>://<runtime_version>`, kept across a runtime outage so nodeInfo does
    /// not flap; asked again when the runtime returns (it may have been upgraded).
    runtime_version: Option<String>,
    version_stale: bool,
    /// The last image list the runtime gave: an outage keeps it, as the kubelet's cache does.
    images: Vec<ContainerImage>,
    /// The pod CIDRs the runtime has; forgotten when the runtime goes away, since a
    /// restarted runtime has lost them.
    applied_cidrs: Option<String>,
    last_report: Option<Instant>,
    registered: bool,
    /// Whether the runtime was Down at the last look, to log changes once.
    runtime_down: Option<bool>,
    uid: watch::Sender<Option<String>>,
    /// Posts the node's events (none in unit tests).
    recorder: Option<Arc<crate::events::Recorder>>,
    started_event: bool,
    /// The node has been reported Ready since the crustlet started.
    ready_once: bool,
}

impl NodeSync {
    fn new(
        cfg: Arc<Config>,
        nodes: Api<Node>,
        cri: Cri,
        uid: watch::Sender<Option<String>>,
    ) -> NodeSync {
        NodeSync {
            cfg,
            nodes,
            cri,
            system: host::system_info(),
            runtime_version: None,
            version_stale: true,
            images: Vec::new(),
            applied_cidrs: None,
            last_report: None,
            registered: false,
            runtime_down: None,
            uid,
            recorder: None,
            started_event: false,
            ready_once: false,
        }
    }

    async fn run(&mut self) {
        let mut retry = RETRY_MIN;
        loop {
            let wait = match self.sync().await {
                Ok(()) => {
                    retry = RETRY_MIN;
                    if self.ready_once {
                        STATUS_PERIOD
                    } else {
                        STARTING_PERIOD
                    }
                }
                Err(e) => {
                    tracing::warn!(node = %self.cfg.node_name, "node status: {e:#}");
                    // Registration is retried quickly, as the kubelet does at start;
                    // a failed status update waits for the next period.
                    if self.registered || !self.cfg.register_node {
                        STATUS_PERIOD
                    } else {
                        retry = (retry * 2).min(RETRY_MAX);
                        retry
                    }
                }
            };
            tokio::time::sleep(wait).await;
        }
    }

    /// One period: read, register or fetch the Node, hand on its pod CIDR, post status.
    async fn sync(&mut self) -> anyhow::Result<()> {
        let runtime = self.poll_runtime().await;
        let root = self.cfg.root_dir.clone();
        // statvfs can hang on a dead network filesystem: keep it off the runtime's threads.
        let readings = tokio::task::spawn_blocking(move || host::readings(&root))
            .await
            .unwrap_or_default();
        let node = self.current_node(&readings, &runtime).await?;
        if let Some(uid) = node.metadata.uid.clone() {
            self.uid.send_if_modified(|u| {
                let changed = u.as_ref() != Some(&uid);
                *u = Some(uid);
                changed
            });
        }
        self.sync_pod_cidr(&node).await;
        let current = node.status.as_ref();
        let desired = self.status(current, &readings, &runtime);
        self.ready_once |= is_ready(Some(&desired));
        let due = self
            .last_report
            .is_none_or(|t| t.elapsed() >= REPORT_PERIOD);
        if !(due || status::differs(current, &desired)) {
            return Ok(());
        }
        let patch = serde_json::json!({ "status": desired });
        self.nodes
            .patch_status(
                &self.cfg.node_name,
                &PatchParams::default(),
                &Patch::Strategic(&patch),
            )
            .await
            .context("patching the Node's status")?;
        self.last_report = Some(Instant::now());
        log_ready_change(current, &desired);
        if !self.started_event {
            self.started_event = true;
            self.event("Starting", "Starting kubelet.".into());
        }
        for reason in status::condition_events(current, &desired) {
            let note = format!("Node {} status is now: {reason}", self.cfg.node_name);
            self.event(reason, note);
        }
        Ok(())
    }

    /// Posts a Normal event about the Node in the background, referring to it as the
    /// kubelet does (by name, with the name as uid, so events outlive a re-registration).
    fn event(&self, reason: &str, note: String) {
        let Some(rec) = self.recorder.clone() else {
            return;
        };
        let reference = k8s_openapi::api::core::v1::ObjectReference {
            api_version: Some("v1".into()),
            kind: Some("Node".into()),
            name: Some(self.cfg.node_name.clone()),
            uid: Some(self.cfg.node_name.clone()),
            ..Default::default()
        };
        let reason = reason.to_string();
        tokio::spawn(async move {
            if let Err(e) = rec.publish(&reference, false, &reason, &note).await {
                tracing::debug!("node event: {e}");
            }
        });
    }

    /// The Node as the apiserver has it, registering it first if needed (at start, or
    /// after someone deleted it).
    async fn current_node(
        &mut self,
        r: &host::Readings,
        runtime: &RuntimeState,
    ) -> anyhow::Result<Node> {
        if self.registered || !self.cfg.register_node {
            // resourceVersion=0: served from the apiserver's cache, as the kubelet reads it.
            match self
                .nodes
                .get_with(&self.cfg.node_name, &GetParams::any())
                .await
            {
                Ok(n) => return Ok(n),
                Err(e) if api_code(&e) == Some(404) && self.cfg.register_node => {
                    tracing::warn!(node = %self.cfg.node_name, "the Node is gone; registering it again");
                    self.registered = false;
                    self.last_report = None;
                }
                Err(e) => return Err(e).context("getting the Node"),
            }
        }
        self.register(r, runtime).await
    }

    async fn register(
        &mut self,
        r: &host::Readings,
        runtime: &RuntimeState,
    ) -> anyhow::Result<Node> {
        let name = self.cfg.node_name.clone();
        let node = Node {
            metadata: ObjectMeta {
                name: Some(name.clone()),
                labels: Some(node_labels(&self.cfg)),
                annotations: Some(node_annotations()),
                ..Default::default()
            },
            spec: Some(Default::default()),
            status: Some(self.status(None, r, runtime)),
        };
        let n = match self.nodes.create(&PostParams::default(), &node).await {
            Ok(n) => {
                tracing::info!(node = %name, "registered the Node");
                n
            }
            Err(e) if api_code(&e) == Some(409) => {
                // A restart, or a Node made beforehand: take it over, bringing our labels
                // and annotation onto it; its status is patched right after.
                let patch = serde_json::json!({
                    "metadata": { "labels": node.metadata.labels, "annotations": node.metadata.annotations }
                });
                let n = self
                    .nodes
                    .patch(&name, &PatchParams::default(), &Patch::Strategic(&patch))
                    .await
                    .context("updating the existing Node's labels")?;
                tracing::info!(node = %name, "the Node exists already; taking it over");
                n
            }
            Err(e) => return Err(e).context("registering the Node"),
        };
        self.registered = true;
        Ok(n)
    }

    /// Asks the runtime for its Status (and, when needed, its Version and images).
    async fn poll_runtime(&mut self) -> RuntimeState {
        let mut rt = self.cri.runtime.clone();
        let answer = tokio::time::timeout(
            CRI_TIMEOUT,
            rt.status(cri_api::StatusRequest { verbose: false }),
        )
        .await;
        let state = match answer {
            Ok(Ok(r)) => RuntimeState::Up(
                r.into_inner()
                    .status
                    .map(|s| s.conditions)
                    .unwrap_or_default()
                    .into_iter()
                    .map(|c| (c.r#type, c.status, c.reason, c.message))
                    .collect(),
            ),
            Ok(Err(e)) => {
                if self.runtime_down != Some(true) {
                    tracing::warn!("the runtime does not answer Status: {}", e.message());
                }
                RuntimeState::Down
            }
            Err(_) => {
                if self.runtime_down != Some(true) {
                    tracing::warn!("the runtime's Status took over {CRI_TIMEOUT:?}");
                }
                RuntimeState::Down
            }
        };
        let down = state == RuntimeState::Down;
        if down {
            self.version_stale = true;
            self.applied_cidrs = None;
        } else {
            if self.runtime_down == Some(true) {
                tracing::info!("the runtime answers again");
            }
            if self.version_stale {
                self.refresh_version().await;
            }
            self.refresh_images().await;
        }
        self.runtime_down = Some(down);
        state
    }

    async fn refresh_version(&mut self) {
        let mut rt = self.cri.runtime.clone();
        let req = cri_api::VersionRequest {
            version: "v1".into(),
        };
        match tokio::time::timeout(CRI_TIMEOUT, rt.version(req)).await {
            Ok(Ok(v)) => {
                let v = v.into_inner();
                self.runtime_version = Some(format!("{}://{}", v.runtime_name, v.runtime_version));
                self.version_stale = false;
            }
            Ok(Err(e)) => tracing::warn!("the runtime's Version: {}", e.message()),
            Err(_) => tracing::warn!("the runtime's Version took over {CRI_TIMEOUT:?}"),
        }
    }

    async fn refresh_images(&mut self) {
        let mut images = self.cri.images.clone();
        let req = cri_api::ListImagesRequest { filter: None };
        match tokio::time::timeout(CRI_TIMEOUT, images.list_images(req)).await {
            Ok(Ok(l)) => self.images = status::images(l.into_inner().images),
            Ok(Err(e)) => tracing::warn!("the runtime's ListImages: {}", e.message()),
            Err(_) => tracing::warn!("the runtime's ListImages took over {CRI_TIMEOUT:?}"),
        }
    }

    /// Hands the Node's pod CIDRs (set by the controller-manager's
    /// `--allocate-node-cidrs`) to the runtime once per change, as the kubelet does; a
    /// failure is tried again next period.
    async fn sync_pod_cidr(&mut self, node: &Node) {
        let Some(cidrs) = status::pod_cidrs(node.spec.as_ref()) else {
            return;
        };
        if self.applied_cidrs.as_deref() == Some(cidrs.as_str()) {
            return;
        }
        let req = cri_api::UpdateRuntimeConfigRequest {
            runtime_config: Some(cri_api::RuntimeConfig {
                network_config: Some(cri_api::NetworkConfig {
                    pod_cidr: cidrs.clone(),
                }),
            }),
        };
        let mut rt = self.cri.runtime.clone();
        match tokio::time::timeout(CRI_TIMEOUT, rt.update_runtime_config(req)).await {
            Ok(Ok(_)) => {
                tracing::info!("pod CIDR {cidrs} handed to the runtime");
                self.applied_cidrs = Some(cidrs);
            }
            Ok(Err(e)) => {
                tracing::warn!("UpdateRuntimeConfig with pod CIDR {cidrs}: {}", e.message())
            }
            Err(_) => tracing::warn!("UpdateRuntimeConfig took over {CRI_TIMEOUT:?}"),
        }
    }

    /// The status to post, conditions' transition times carried over from `current`.
    fn status(
        &self,
        current: Option<&NodeStatus>,
        r: &host::Readings,
        runtime: &RuntimeState,
    ) -> NodeStatus {
        let (capacity, allocatable) = status::capacity(r, self.cfg.max_pods);
        let wanted = status::wanted_conditions(r, &status::runtime_errors(runtime), &capacity);
        let now = Time(Timestamp::now());
        let cur = current
            .and_then(|s| s.conditions.as_deref())
            .unwrap_or_default();
        let mut addresses = Vec::new();
        if let Some(ip) = node_ip(&self.cfg) {
            addresses.push(NodeAddress {
                type_: "InternalIP".into(),
                address: ip,
            });
        }
        addresses.push(NodeAddress {
            type_: "Hostname".into(),
            address: self.cfg.node_name.clone(),
        });
        let version = kubelet_version();
        NodeStatus {
            addresses: Some(addresses),
            capacity: Some(capacity),
            allocatable: Some(allocatable),
            conditions: Some(status::conditions(cur, &wanted, &now)),
            daemon_endpoints: Some(NodeDaemonEndpoints {
                kubelet_endpoint: Some(DaemonEndpoint {
                    port: KUBELET_PORT.load(std::sync::atomic::Ordering::Relaxed),
                }),
            }),
            images: Some(self.images.clone()),
            node_info: Some(NodeSystemInfo {
                architecture: host::arch().into(),
                boot_id: self.system.boot_id.clone(),
                container_runtime_version: self.runtime_version.clone().unwrap_or_default(),
                kernel_version: self.system.kernel_version.clone(),
                kube_proxy_version: version.clone(),
                kubelet_version: version,
                machine_id: self.system.machine_id.clone(),
                operating_system: "linux".into(),
                os_image: self.system.os_image.clone(),
                system_uuid: self.system.system_uuid.clone(),
                swap: None,
            }),
            ..Default::default()
        }
    }
}

/// Logs the Ready condition's flips (the kubelet's "Node became not ready").
fn is_ready(s: Option<&NodeStatus>) -> bool {
    s.and_then(|s| s.conditions.as_ref())
        .and_then(|c| c.iter().find(|c| c.type_ == "Ready"))
        .is_some_and(|c| c.status == "True")
}

fn log_ready_change(current: Option<&NodeStatus>, desired: &NodeStatus) {
    let ready = |s: Option<&NodeStatus>| {
        s.and_then(|s| s.conditions.as_ref())
            .and_then(|c| c.iter().find(|c| c.type_ == "Ready"))
            .map(|c| (c.status.clone(), c.message.clone().unwrap_or_default()))
    };
    let (Some(new), old) = (ready(Some(desired)), ready(current)) else {
        return;
    };
    if old.as_ref().map(|o| &o.0) != Some(&new.0) {
        if new.0 == "True" {
            tracing::info!("node is Ready");
        } else {
            tracing::warn!("node is not Ready: {}", new.1);
        }
    }
}

/// Renews the Lease every period; on a failure, fetches it anew and retries sooner.
async fn keep_lease(api: Api<Lease>, node: String, uid: watch::Receiver<Option<String>>) {
    let mut cached: Option<Lease> = None;
    let mut retry = RETRY_MIN;
    loop {
        let node_uid = uid.borrow().clone();
        match renew_lease(&api, &node, &mut cached, node_uid.as_deref()).await {
            Ok(()) => {
                retry = RETRY_MIN;
                tokio::time::sleep(LEASE_PERIOD).await;
            }
            Err(e) => {
                // Said once per outage; the retries of one outage are debug.
                if retry == RETRY_MIN {
                    tracing::warn!(node = %node, "renewing the Lease: {e:#}");
                } else {
                    tracing::debug!(node = %node, "renewing the Lease: {e:#}");
                }
                cached = None;
                tokio::time::sleep(retry).await;
                retry = (retry * 2).min(RETRY_MAX);
            }
        }
    }
}

/// One renewal: an update of the Lease last seen (its resourceVersion guards against
/// writing over someone else's change), or a create when there is none.
async fn renew_lease(
    api: &Api<Lease>,
    node: &str,
    cached: &mut Option<Lease>,
    uid: Option<&str>,
) -> anyhow::Result<()> {
    let now = MicroTime(Timestamp::now());
    let lease = match cached.take() {
        Some(l) => l,
        None => match api.get_opt(node).await.context("getting the Lease")? {
            Some(l) => l,
            None => {
                let fresh = renewed(Lease::default(), node, uid, now);
                *cached = Some(
                    api.create(&PostParams::default(), &fresh)
                        .await
                        .context("creating the Lease")?,
                );
                tracing::info!(node, "created the Lease");
                return Ok(());
            }
        },
    };
    let l = renewed(lease, node, uid, now);
    *cached = Some(
        api.replace(node, &PostParams::default(), &l)
            .await
            .context("updating the Lease")?,
    );
    Ok(())
}

/// `lease` held by this node and renewed `now`, owned by the Node once its uid is known
/// (so it is deleted with the Node; a reference to an older Node of the same name is
/// replaced, or the garbage collector would delete the Lease under us).
fn renewed(mut lease: Lease, node: &str, uid: Option<&str>, now: MicroTime) -> Lease {
    lease.metadata.name = Some(node.to_string());
    lease.metadata.namespace = Some(LEASE_NAMESPACE.to_string());
    if let Some(uid) = uid {
        let refs = lease.metadata.owner_references.get_or_insert_with(Vec::new);
        refs.retain(|r| !(r.kind == "Node" && r.api_version == "v1" && r.uid != uid));
        if !refs.iter().any(|r| r.kind == "Node" && r.uid == uid) {
            refs.push(OwnerReference {
                api_version: "v1".into(),
                kind: "Node".into(),
                name: node.to_string(),
                uid: uid.to_string(),
                ..Default::default()
            });
        }
    }
    let spec = lease.spec.get_or_insert_with(LeaseSpec::default);
    spec.holder_identity = Some(node.to_string());
    spec.lease_duration_seconds = Some(LEASE_DURATION_SECONDS);
    spec.renew_time = Some(now);
    lease
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg() -> Config {
        use clap::Parser;
        let f = crate::config::Flags::try_parse_from([
            "crustlet",
            "--kubeconfig=k",
            "--hostname-override=N1",
            "--node-labels=node-role.kubernetes.io/worker=,kubernetes.io/os=other",
        ])
        .unwrap();
        Config::resolve(f).unwrap()
    }

    #[test]
    fn the_kubelet_version_is_semver_with_build_metadata() {
        let v = kubelet_version();
        let (core, build) = v.strip_prefix('v').unwrap().split_once('+').unwrap();
        assert_eq!(core, "1.28.7");
        assert!(build.starts_with("crustlet."));
        assert!(build
            .split('.')
            .all(|p| !p.is_empty() && p.chars().all(|c| c.is_ascii_alphanumeric() || c == '-')));
    }

    #[test]
    fn labels_default_then_flags() {
        let l = node_labels(&cfg());
        assert_eq!(l["kubernetes.io/hostname"], "n1");
        assert_eq!(l["kubernetes.io/arch"], host::arch());
        assert_eq!(l["beta.kubernetes.io/arch"], host::arch());
        assert_eq!(l["beta.kubernetes.io/os"], "linux");
        assert_eq!(l["kubernetes.io/os"], "other");
        assert_eq!(l["node-role.kubernetes.io/worker"], "");
    }

    #[test]
    fn public_readings() {
        assert!(memory_capacity() > 0);
        assert!(memory_allocatable() < memory_capacity());
        assert!(cpu_capacity_milli() >= 1000 && cpu_capacity_milli() % 1000 == 0);
        // The downward API's defaults agree with the other readings.
        let alloc = allocatable(std::path::Path::new("/"));
        let milli = |k: &str| crate::quantity::milli(&alloc[k]).unwrap();
        assert_eq!(milli("cpu"), cpu_capacity_milli());
        assert_eq!(milli("memory"), memory_allocatable() * 1000);
        assert!(alloc.contains_key("ephemeral-storage") && !alloc.contains_key("pods"));
        let mut c = cfg();
        c.node_ip = Some("192.0.2.7".into());
        assert_eq!(node_ip(&c).as_deref(), Some("192.0.2.7"));
    }

    fn t(s: &str) -> MicroTime {
        MicroTime(s.parse().unwrap())
    }

    #[test]
    fn a_lease_held_renewed_and_owned_by_its_node() {
        let l = renewed(Lease::default(), "n1", None, t("2024-01-01T00:00:00Z"));
        assert_eq!(l.metadata.name.as_deref(), Some("n1"));
        assert_eq!(l.metadata.namespace.as_deref(), Some("kube-node-lease"));
        assert!(l.metadata.owner_references.is_none());
        let s = l.spec.as_ref().unwrap();
        assert_eq!(s.holder_identity.as_deref(), Some("n1"));
        assert_eq!(s.lease_duration_seconds, Some(40));

        // The uid learnt: owned by the Node; renewing again adds no second reference.
        let l = renewed(l, "n1", Some("u1"), t("2024-01-01T00:00:10Z"));
        let l = renewed(l, "n1", Some("u1"), t("2024-01-01T00:00:20Z"));
        let refs = l.metadata.owner_references.as_ref().unwrap();
        assert_eq!(refs.len(), 1);
        assert_eq!(
            (
                refs[0].kind.as_str(),
                refs[0].uid.as_str(),
                refs[0].name.as_str()
            ),
            ("Node", "u1", "n1")
        );
        assert_eq!(
            l.spec.as_ref().unwrap().renew_time,
            Some(t("2024-01-01T00:00:20Z"))
        );

        // The Node made anew: the stale owner is replaced.
        let l = renewed(l, "n1", Some("u2"), t("2024-01-01T00:00:30Z"));
        let refs = l.metadata.owner_references.as_ref().unwrap();
        assert_eq!(refs.len(), 1);
        assert_eq!(refs[0].uid, "u2");
        let json = serde_json::to_value(&l).unwrap();
        assert_eq!(json["spec"]["renewTime"], "2024-01-01T00:00:30.000000Z");
    }

    #[test]
    fn the_status_posted_has_the_kubelets_shape() {
        let (tx, _rx) = watch::channel(None);
        let c = Arc::new(cfg());
        // A client that is never dialled, and a runtime socket nobody listens on.
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async {
            let kc = kube::Config::new("http://127.0.0.1:9".parse().unwrap());
            let client = kube::Client::try_from(kc).unwrap();
            let cri = Cri::lazy(std::path::Path::new("/nonexistent/crustlet-test.sock"));
            let mut s = NodeSync::new(c, Api::all(client), cri, tx);
            assert_eq!(s.poll_runtime().await, RuntimeState::Down);
            let r = host::readings(std::path::Path::new("/"));
            let st = s.status(None, &r, &RuntimeState::Down);
            let v = serde_json::to_value(&st).unwrap();
            assert_eq!(v["daemonEndpoints"]["kubeletEndpoint"]["Port"], 10250);
            assert_eq!(v["nodeInfo"]["operatingSystem"], "linux");
            assert_eq!(v["nodeInfo"]["architecture"], host::arch());
            assert_eq!(v["nodeInfo"]["kubeletVersion"], kubelet_version());
            assert!(v["nodeInfo"]["kernelVersion"].as_str().unwrap().len() > 2);
            let addrs = v["addresses"].as_array().unwrap();
            assert_eq!(addrs.last().unwrap()["type"], "Hostname");
            assert_eq!(addrs.last().unwrap()["address"], "n1");
            for k in ["cpu", "memory", "pods", "ephemeral-storage"] {
                assert!(
                    v["capacity"][k].is_string() && v["allocatable"][k].is_string(),
                    "{k}: {v}"
                );
            }
            let conds = v["conditions"].as_array().unwrap();
            assert_eq!(conds[3]["type"], "Ready");
            assert_eq!(conds[3]["status"], "False");
            assert_eq!(conds[3]["message"], "container runtime is down");
        });
    }
}
