//! One worker per pod: it turns the pod's spec into CRI calls and the runtime's answers
//! into the pod's status, once a second and whenever the pod changes.
//!
//! ```text
//!            +-------------------------- sync, every second ----------------------+
//!            v                                                                    |
//!   [no sandbox] --volumes, RunPodSandbox--> [sandbox ready] --init containers,   |
//!            ^                                     |          in order, each to   |
//!            | sandbox died: a new one,            |          exit 0--------------+
//!            | every container again               v                              |
//!            +------------------------ [app containers: start, probe, restart by  |
//!                                        restartPolicy with back-off]-------------+
//!   deletionTimestamp or gone --> StopContainer (grace) --> StopPodSandbox -->
//!   RemovePodSandbox --> pod deleted with grace 0 --> worker ends
//! ```
//!
//! The worker keeps nothing that the runtime does not also know: after a restart of the
//! crustlet it finds its sandbox and containers by their labels and carries on.

use crate::admit;
use crate::cri::Cri;
use crate::inputs::Inputs;
use crate::probe;
use crate::spec::{self, ContainerInputs, VolumePaths};
use crate::Ctx;
use cri_api as cri;
use k8s_openapi::api::core::v1::{
    Container, ContainerState, ContainerStateRunning, ContainerStateTerminated,
    ContainerStateWaiting, ContainerStatus, HostIP, Pod, PodCondition, PodIP, PodReadinessGate,
    PodSpec, PodStatus,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::{Api, DeleteParams, Patch, PatchParams, Preconditions};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::watch;

/// Back-off of a container's restarts and image pulls, as the kubelet's: 10 s, doubling,
/// at most 5 minutes.
#[derive(Debug, Clone)]
struct Backoff {
    delay: Duration,
    until: Instant,
}

impl Backoff {
    fn next(prev: Option<&Backoff>) -> Backoff {
        let delay = match prev {
            Some(b) => (b.delay * 2).min(Duration::from_secs(300)),
            None => Duration::from_secs(10),
        };
        Backoff {
            delay,
            until: Instant::now() + delay,
        }
    }
}

/// The sandbox the pod runs in now.
struct Sandbox {
    id: String,
    config: cri::PodSandboxConfig,
    ip: String,
    ips: Vec<String>,
}

/// One container instance as the runtime reports it.
#[derive(Clone)]
struct Instance {
    id: String,
    attempt: u32,
    state: i32,
    status: cri::ContainerStatus,
}

impl Instance {
    fn running(&self) -> bool {
        self.state == cri::ContainerState::ContainerRunning as i32
    }
    fn exited(&self) -> bool {
        self.state == cri::ContainerState::ContainerExited as i32
    }
}

struct Probes {
    liveness: Option<probe::State>,
    readiness: Option<probe::State>,
    startup: Option<probe::State>,
}

pub struct Worker {
    ctx: Arc<Ctx>,
    sandbox: Option<Sandbox>,
    volumes: Option<(HashMap<String, PathBuf>, Instant)>,
    restart_backoff: HashMap<String, Backoff>,
    pull_backoff: HashMap<String, Backoff>,
    /// Why a container is waiting, for its status (reason, message).
    waiting: HashMap<String, (String, String)>,
    /// Probe state by container id.
    probes: HashMap<String, Probes>,
    /// A digest of the status last sent (transition times left out): only a different
    /// one is sent again. A digest rather than the status itself, held by every pod.
    last_status: Option<u64>,
    start_time: Option<Time>,
    sandbox_backoff: Option<Backoff>,
    /// The phase once the pod can no longer change (Succeeded, Failed).
    finished: Option<String>,
    /// The status of the finished pod (read when its sandbox was stopped).
    final_status: Option<PodStatus>,
    /// Whether the node took the pod (asked once, on its first sync).
    admitted: bool,
    /// The status reason and message of a pod the crustlet itself ended (refused at
    /// admission, past its active deadline).
    verdict: Option<(String, String)>,
    runtime_name: String,
    last_pod: Option<Arc<Pod>>,
    /// The newest instance of each container in the sandbox that died, by name: the
    /// last state of the container made again in the new one until it has one of its
    /// own there. The kubelet keeps the old containers until its garbage collection, so
    /// `lastState` shows how the old one ended; the crustlet removes them at once.
    carried: HashMap<String, Instance>,
}

/// Runs the pod until it is deleted (or removed from this node).
pub async fn run(ctx: Arc<Ctx>, mut rx: watch::Receiver<Option<Arc<Pod>>>) {
    let mut w = Worker {
        ctx,
        sandbox: None,
        volumes: None,
        restart_backoff: HashMap::new(),
        pull_backoff: HashMap::new(),
        waiting: HashMap::new(),
        probes: HashMap::new(),
        last_status: None,
        start_time: None,
        sandbox_backoff: None,
        finished: None,
        final_status: None,
        admitted: false,
        verdict: None,
        runtime_name: String::new(),
        last_pod: None,
        carried: HashMap::new(),
    };
    // The worker waits most of its life: sync and terminate are boxed so that their
    // (large) state exists only while they run, not in every idle pod's task.
    loop {
        let pod = rx.borrow_and_update().clone();
        match pod {
            None => {
                // Gone from the apiserver (force-deleted, or bound elsewhere): stop it.
                let last = w.last_pod.take();
                if let Some(p) = last {
                    Box::pin(w.terminate(&p, Some(2), false)).await;
                    w.ctx.ports.release(spec::uid(&p));
                }
                return;
            }
            Some(pod) if pod.metadata.deletion_timestamp.is_some() => {
                let grace = pod
                    .metadata
                    .deletion_grace_period_seconds
                    .or(spec::spec(&pod).termination_grace_period_seconds);
                Box::pin(w.terminate(&pod, grace, true)).await;
                w.ctx.ports.release(spec::uid(&pod));
                return;
            }
            Some(pod) => {
                w.last_pod = Some(pod.clone());
                let started = Instant::now();
                if let Err(e) = Box::pin(w.sync(&pod)).await {
                    tracing::warn!(pod = %spec::key(&pod), "sync: {e:#}");
                }
                w.ctx.seen.metrics.sync(started.elapsed());
            }
        }
        tokio::select! {
            r = rx.changed() => if r.is_err() {
                // The manager dropped the pod.
                let last = w.last_pod.take();
                if let Some(p) = last {
                    Box::pin(w.terminate(&p, Some(2), false)).await;
                    w.ctx.ports.release(spec::uid(&p));
                }
                return;
            },
            _ = tokio::time::sleep(Duration::from_secs(1)) => {}
        }
    }
}

fn now() -> Time {
    Time(k8s_openapi::jiff::Timestamp::now())
}

fn time_from_nanos(ns: i64) -> Option<Time> {
    if ns <= 0 {
        return None;
    }
    k8s_openapi::jiff::Timestamp::from_nanosecond(ns as i128)
        .ok()
        .map(Time)
}

fn by_name<'a>(cs: &'a [Container], name: &str) -> Option<&'a Container> {
    cs.iter().find(|c| c.name == name)
}

/// Stops container `id` as the kubelet kills one: its preStop hook first (`c`'s, if
/// known), whose time comes out of the `grace` seconds, at least 2 s of which are left
/// for the stop signal.
async fn stop_gracefully(
    cri: Cri,
    c: Option<Container>,
    id: String,
    ip: String,
    grace: i64,
) -> Result<tonic::Response<cri::StopContainerResponse>, tonic::Status> {
    let mut left = grace;
    if let Some(c) = &c {
        if let Some(h) = c.lifecycle.as_ref().and_then(|l| l.pre_stop.as_ref()) {
            let started = Instant::now();
            let limit = Duration::from_secs(grace.max(1) as u64);
            if let Err(e) = probe::hook(&cri, h, c, &id, &ip, limit).await {
                tracing::info!(container = %c.name, "preStop hook: {e}");
            }
            left = (grace - started.elapsed().as_secs() as i64).max(2);
        }
    }
    cri.runtime
        .clone()
        .stop_container(cri::StopContainerRequest {
            container_id: id,
            timeout: left,
        })
        .await
}

/// An init container that keeps running beside the app containers (a sidecar).
pub fn is_sidecar(c: &Container) -> bool {
    c.restart_policy.as_deref() == Some("Always")
}

/// Whether the pod's spec no longer describes the running instance: the image is the
/// one field of a container the apiserver lets change.
fn changed(c: &Container, i: &Instance) -> bool {
    i.status
        .annotations
        .get(spec::CONTAINER_HASH)
        .is_some_and(|h| *h != spec::container_hash(c))
}

/// The attempt after the newest `<attempt>.log` in the container's log folder: a
/// container made again in a new sandbox goes on counting its restarts, as with the
/// kubelet (which looks at the same files when the runtime has forgotten).
fn attempt_from_logs(dir: &std::path::Path) -> u32 {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return 0;
    };
    rd.flatten()
        .filter_map(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            let n = name.split_once(".log")?.0.to_string();
            n.parse::<u32>().ok()
        })
        .max()
        .map_or(0, |n| n + 1)
}

/// Whether the pod as the apiserver has it shows `st`'s phase, and the same status for
/// each of `st`'s conditions it has (one it drops is no reason to send them again).
fn agrees(pod: &Pod, st: &PodStatus) -> bool {
    let Some(have) = pod.status.as_ref() else {
        return false;
    };
    let conds = have.conditions.as_deref().unwrap_or_default();
    have.phase == st.phase
        && st.conditions.iter().flatten().all(|c| {
            conds
                .iter()
                .filter(|h| h.type_ == c.type_)
                .all(|h| h.status == c.status)
        })
}

/// A container's waiting state: why the worker holds it back, else the kubelet's
/// default, PodInitializing for every container of a pod with init containers.
fn waiting_state(pod: &Pod, waiting: Option<&(String, String)>) -> ContainerStateWaiting {
    ContainerStateWaiting {
        reason: Some(waiting.map_or_else(
            || {
                if spec::spec(pod)
                    .init_containers
                    .is_some_and(|i| !i.is_empty())
                {
                    "PodInitializing".into()
                } else {
                    "ContainerCreating".into()
                }
            },
            |w| w.0.clone(),
        )),
        message: waiting.map(|w| w.1.clone()).filter(|m| !m.is_empty()),
    }
}

/// The statuses of a pod's containers, by kind, for its conditions.
struct Containers<'a> {
    init: &'a [ContainerStatus],
    /// The init containers that are sidecars (also in `init`).
    sidecars: &'a [&'a ContainerStatus],
    app: &'a [ContainerStatus],
}

impl Containers<'_> {
    /// The init containers not yet complete: a sidecar is complete once started, other
    /// init containers once they exit 0.
    fn incomplete_init(&self) -> String {
        let sidecar_names: Vec<&str> = self.sidecars.iter().map(|s| s.name.as_str()).collect();
        names(self.init, |s| {
            if sidecar_names.contains(&s.name.as_str()) {
                return s.started != Some(true);
            }
            s.state
                .as_ref()
                .and_then(|st| st.terminated.as_ref())
                .is_none_or(|t| t.exit_code != 0)
        })
    }
}

/// The names of the containers `f` picks, space-separated, as the kubelet lists them
/// in a condition's message.
fn names<'a>(
    v: impl IntoIterator<Item = &'a ContainerStatus>,
    f: impl Fn(&ContainerStatus) -> bool,
) -> String {
    let n: Vec<&str> = v
        .into_iter()
        .filter(|s| f(s))
        .map(|s| s.name.as_str())
        .collect();
    n.join(" ")
}

/// A condition of type `t`; its transition time is the `old` one's while the status
/// stays the same.
fn condition(
    old: &PodStatus,
    t: &str,
    ok: bool,
    reason: Option<&str>,
    message: Option<String>,
) -> PodCondition {
    let prev = old.conditions.iter().flatten().find(|c| c.type_ == t);
    let status = if ok { "True" } else { "False" };
    let transition = match prev {
        Some(p) if p.status == status => p.last_transition_time.clone(),
        _ => Some(now()),
    };
    PodCondition {
        type_: t.into(),
        status: status.into(),
        last_transition_time: transition,
        reason: reason.map(str::to_string),
        message,
        ..Default::default()
    }
}

/// The pod's phase: the one it `finished` with, Pending until it is initialized
/// (Failed if an init container failed and the pod never restarts), else what its
/// app containers and restart policy make it.
fn pod_phase(
    finished: Option<&str>,
    policy: &str,
    initialized: bool,
    init_statuses: &[ContainerStatus],
    sidecars: &[&ContainerStatus],
    statuses: &[ContainerStatus],
) -> String {
    let phase = if let Some(f) = finished {
        f.to_string()
    } else if !initialized {
        "Pending".to_string()
    } else {
        containers_phase(policy, statuses).to_string()
    };
    if phase == "Pending"
        && !initialized
        && policy == "Never"
        && init_statuses.iter().any(|s| {
            !sidecars.iter().any(|x| x.name == s.name)
                && s.state
                    .as_ref()
                    .and_then(|st| st.terminated.as_ref())
                    .is_some_and(|t| t.exit_code != 0)
        })
    {
        "Failed".to_string()
    } else {
        phase
    }
}

/// The phase of an initialized pod from its app containers: Pending while one waits,
/// Running while one runs, and once all stopped what the restart policy makes of
/// their exit codes.
fn containers_phase(policy: &str, statuses: &[ContainerStatus]) -> &'static str {
    let (mut running, mut waiting, mut stopped, mut succeeded) = (0, 0, 0, 0);
    for s in statuses {
        let st = s.state.clone().unwrap_or_default();
        if st.running.is_some() {
            running += 1;
        } else if let Some(t) = &st.terminated {
            stopped += 1;
            if t.exit_code == 0 {
                succeeded += 1;
            }
        } else if s
            .last_state
            .as_ref()
            .and_then(|l| l.terminated.as_ref())
            .is_some()
        {
            stopped += 1;
        } else {
            waiting += 1;
        }
    }
    if waiting > 0 {
        "Pending"
    } else if running > 0 {
        "Running"
    } else if stopped > 0 {
        match policy {
            "Always" => "Running",
            "OnFailure" if stopped == succeeded => "Succeeded",
            "OnFailure" => "Running",
            _ if stopped == succeeded => "Succeeded",
            _ => "Failed",
        }
    } else {
        "Pending"
    }
}

impl Worker {
    fn cri(&self) -> Cri {
        self.ctx.cri.clone()
    }

    fn event(&self, pod: &Pod, warning: bool, reason: &str, note: String) {
        self.ctx.event(pod, warning, reason, note);
    }

    /// The pod's sandboxes in the runtime, newest first.
    async fn sandboxes(&self, uid: &str) -> anyhow::Result<Vec<cri::PodSandbox>> {
        let mut rt = self.cri().runtime;
        let mut items = rt
            .list_pod_sandbox(cri::ListPodSandboxRequest {
                filter: Some(cri::PodSandboxFilter {
                    label_selector: HashMap::from([(spec::POD_UID.to_string(), uid.to_string())]),
                    ..Default::default()
                }),
            })
            .await?
            .into_inner()
            .items;
        items.sort_by_key(|s| std::cmp::Reverse(s.created_at));
        Ok(items)
    }

    /// The container instances of the sandbox, by container name, newest attempt first.
    async fn instances(&self, sandbox: &str) -> anyhow::Result<HashMap<String, Vec<Instance>>> {
        let mut rt = self.cri().runtime;
        let list = rt
            .list_containers(cri::ListContainersRequest {
                filter: Some(cri::ContainerFilter {
                    pod_sandbox_id: sandbox.to_string(),
                    ..Default::default()
                }),
            })
            .await?
            .into_inner()
            .containers;
        let mut out: HashMap<String, Vec<Instance>> = HashMap::new();
        for c in list {
            let status = match rt
                .container_status(cri::ContainerStatusRequest {
                    container_id: c.id.clone(),
                    verbose: false,
                })
                .await
            {
                Ok(r) => r.into_inner().status.unwrap_or_default(),
                Err(_) => continue,
            };
            let name = c
                .metadata
                .as_ref()
                .map(|m| m.name.clone())
                .unwrap_or_default();
            let attempt = c.metadata.as_ref().map_or(0, |m| m.attempt);
            out.entry(name).or_default().push(Instance {
                id: c.id,
                attempt,
                state: status.state,
                status,
            });
        }
        for v in out.values_mut() {
            v.sort_by_key(|i| {
                (
                    std::cmp::Reverse(i.attempt),
                    std::cmp::Reverse(i.status.created_at),
                )
            });
        }
        Ok(out)
    }

    async fn sync(&mut self, pod: &Arc<Pod>) -> anyhow::Result<()> {
        self.note_start_and_runtime(pod).await;
        let spec = spec::spec(pod);
        let policy = spec
            .restart_policy
            .clone()
            .unwrap_or_else(|| "Always".into());
        self.adopt_finished(pod).await;
        if self.finished.is_none() && !self.admitted {
            // A pod that had started before (the crustlet restarted) held its ports.
            let started = pod.status.as_ref().is_some_and(|s| s.start_time.is_some());
            let verdict = admit::admit(pod, &self.ctx.cfg.sysctls).and_then(|()| {
                self.ctx
                    .ports
                    .take(spec::uid(pod), admit::host_ports(pod), started)
            });
            match verdict {
                Ok(()) => self.admitted = true,
                Err(r) => self.reject(pod, r).await,
            }
        }
        let started = self.start_time.as_ref().map(|t| t.0);
        if self.finished.is_none()
            && admit::past_deadline(spec.active_deadline_seconds, started, now().0)
        {
            self.deadline_exceeded(pod).await;
        }
        if self.finished.is_some() {
            self.finish(pod).await;
            return Ok(());
        }

        self.ensure_sandbox(pod).await?;
        let Some(sandbox_id) = self.sandbox.as_ref().map(|s| s.id.clone()) else {
            let st = self.status(pod, &HashMap::new(), false).await;
            self.report(pod, st).await;
            return Ok(());
        };
        let instances = self.instances(&sandbox_id).await?;
        let initialized = self.init_containers(pod, &spec, &policy, &instances).await;
        if initialized {
            self.app_containers(pod, &spec, &policy, &instances).await;
        }

        let instances = self.instances(&sandbox_id).await?;
        self.collect_garbage(&instances).await;
        let st = self.status(pod, &instances, initialized).await;
        let phase = st.phase.clone().unwrap_or_default();
        if phase == "Succeeded" || phase == "Failed" {
            self.finished = Some(phase);
        }
        self.report(pod, st).await;
        Ok(())
    }

    /// The pod's start time (the apiserver's, if it has one, so that a restarted
    /// crustlet keeps it) and the runtime's name for container ids, once.
    async fn note_start_and_runtime(&mut self, pod: &Pod) {
        if self.start_time.is_none() {
            self.start_time = pod
                .status
                .as_ref()
                .and_then(|s| s.start_time.clone())
                .or_else(|| Some(now()));
        }
        if self.runtime_name.is_empty() {
            if let Ok(v) = self
                .cri()
                .runtime
                .version(cri::VersionRequest::default())
                .await
            {
                self.runtime_name = v.into_inner().runtime_name;
            }
        }
    }

    /// A pod the apiserver already has as finished stays finished (a restarted
    /// crustlet must not run a completed Job's pod again); what is left of it is
    /// adopted so that its sandbox is stopped.
    async fn adopt_finished(&mut self, pod: &Pod) {
        if self.finished.is_some() {
            return;
        }
        let phase = pod.status.as_ref().and_then(|s| s.phase.clone());
        let Some(p) = phase.filter(|p| p == "Succeeded" || p == "Failed") else {
            return;
        };
        self.finished = Some(p);
        self.adopt_newest_sandbox(pod).await;
    }

    /// The pod's newest sandbox, if the worker has none yet (a restarted crustlet),
    /// so that a pod that ends is stopped.
    async fn adopt_newest_sandbox(&mut self, pod: &Pod) {
        if self.sandbox.is_some() {
            return;
        }
        let sandboxes = self.sandboxes(spec::uid(pod)).await.unwrap_or_default();
        if let Some(s) = sandboxes.first() {
            let attempt = s.metadata.as_ref().map_or(0, |m| m.attempt);
            let config = spec::sandbox_config(&self.ctx.cfg, pod, attempt, self.ctx.source(pod));
            let (ip, ips) = self.sandbox_ips(&s.id).await;
            self.sandbox = Some(Sandbox {
                id: s.id.clone(),
                config,
                ip,
                ips,
            });
        }
    }

    /// The node does not take the pod (the kubelet's `rejectPod`): a warning event and
    /// the pod Failed with the reason; nothing of it is made. (A pod refused after a
    /// restart of the crustlet has its sandbox stopped.)
    async fn reject(&mut self, pod: &Pod, r: admit::Rejection) {
        self.event(pod, true, r.reason, r.message.clone());
        self.finished = Some("Failed".into());
        self.verdict = Some((r.reason.to_string(), r.status_message()));
        self.adopt_newest_sandbox(pod).await;
        if self.sandbox.is_none() {
            let st = admit::rejected_status(&r, self.start_time.clone(), spec::qos(pod));
            self.final_status = Some(st);
        }
    }

    /// The pod ran past its `activeDeadlineSeconds`: its containers are stopped as
    /// when it is deleted (preStop, then the signal, within its grace period) and it
    /// ends Failed with DeadlineExceeded, as with the kubelet's active deadline handler.
    async fn deadline_exceeded(&mut self, pod: &Pod) {
        self.event(
            pod,
            false,
            admit::DEADLINE_REASON,
            admit::DEADLINE_MESSAGE.into(),
        );
        self.finished = Some("Failed".into());
        self.verdict = Some((
            admit::DEADLINE_REASON.into(),
            admit::DEADLINE_MESSAGE.into(),
        ));
        self.adopt_newest_sandbox(pod).await;
        match self.sandbox.as_ref().map(|s| (s.id.clone(), s.ip.clone())) {
            Some((id, ip)) => {
                let grace = spec::spec(pod)
                    .termination_grace_period_seconds
                    .unwrap_or(30)
                    .max(0);
                self.kill_containers(pod, &id, &ip, grace).await
            }
            None => self.final_status = Some(self.status(pod, &HashMap::new(), false).await),
        }
    }

    /// Stops the running containers of sandbox `id` together, each after its preStop
    /// hook, within `grace` seconds (the hook's time comes out of them).
    async fn kill_containers(&mut self, pod: &Pod, id: &str, ip: &str, grace: i64) {
        let spec = spec::spec(pod);
        let instances = self.instances(id).await.unwrap_or_default();
        let mut stops = vec![];
        for (name, v) in &instances {
            for i in v.iter().filter(|i| i.running()) {
                self.event(pod, false, "Killing", format!("Stopping container {name}"));
                let c = by_name(&spec.containers, name)
                    .or_else(|| by_name(spec.init_containers.as_deref().unwrap_or_default(), name))
                    .cloned();
                stops.push(stop_gracefully(
                    self.cri(),
                    c,
                    i.id.clone(),
                    ip.to_string(),
                    grace,
                ));
                self.probes.remove(&i.id);
            }
        }
        futures::future::join_all(stops).await;
    }

    /// Nothing restarts any more: the kubelet stops the sandbox of a finished pod. Its
    /// final status is read once, from the containers the stopped sandbox still lists,
    /// and sent until the apiserver has it (it may be away when the pod ends).
    async fn finish(&mut self, pod: &Arc<Pod>) {
        self.ctx.ports.release(spec::uid(pod));
        if let Some(sb) = self.sandbox.take() {
            let _ = self
                .cri()
                .runtime
                .stop_pod_sandbox(cri::StopPodSandboxRequest {
                    pod_sandbox_id: sb.id.clone(),
                })
                .await;
            let instances = self.instances(&sb.id).await.unwrap_or_default();
            self.sandbox = Some(sb);
            self.final_status = Some(self.status(pod, &instances, true).await);
            self.sandbox = None;
        }
        if let Some(st) = self.final_status.clone() {
            self.report(pod, st).await;
        }
    }

    /// Init containers, in order: each must exit 0 before the next starts; a sidecar
    /// (`restartPolicy: Always`) must be started, and is restarted whenever it exits.
    /// Once an app container exists the pod was initialized: init containers are not
    /// run again, only sidecars kept up. Whether the pod is initialized.
    async fn init_containers(
        &mut self,
        pod: &Pod,
        spec: &PodSpec,
        policy: &str,
        instances: &HashMap<String, Vec<Instance>>,
    ) -> bool {
        let was_initialized = spec
            .containers
            .iter()
            .any(|c| instances.contains_key(&c.name));
        let mut initialized = true;
        for c in spec.init_containers.iter().flatten() {
            let latest = instances.get(&c.name).and_then(|v| v.first()).cloned();
            if is_sidecar(c) {
                match latest {
                    Some(i) if i.running() => {
                        self.probe(pod, c, &i).await;
                        if self.started(c, &i) || was_initialized {
                            continue;
                        }
                    }
                    Some(i) if i.exited() => self.restart(pod, c, Some(&i)).await,
                    Some(i) if i.state == cri::ContainerState::ContainerCreated as i32 => {
                        self.start_created(&i).await
                    }
                    Some(_) => {}
                    None => self.start(pod, c, None).await,
                }
                if was_initialized {
                    continue;
                }
                initialized = false;
                break;
            }
            if was_initialized {
                continue;
            }
            match latest {
                Some(i) if i.exited() && i.status.exit_code == 0 => continue,
                Some(i)
                    if i.running() || i.state == cri::ContainerState::ContainerCreated as i32 =>
                {
                    initialized = false;
                    break;
                }
                Some(i) if i.exited() => {
                    initialized = false;
                    if policy == "Never" {
                        self.finished = Some("Failed".into());
                    } else {
                        self.restart(pod, c, Some(&i)).await;
                    }
                    break;
                }
                _ => {
                    initialized = false;
                    self.start(pod, c, None).await;
                    break;
                }
            }
        }
        initialized
    }

    /// The app containers of an initialized pod: started, probed, and restarted as the
    /// pod's restart policy says; then its ephemeral containers (kubectl debug), started
    /// once and never restarted.
    async fn app_containers(
        &mut self,
        pod: &Pod,
        spec: &PodSpec,
        policy: &str,
        instances: &HashMap<String, Vec<Instance>>,
    ) {
        for c in &spec.containers {
            let latest = instances.get(&c.name).and_then(|v| v.first()).cloned();
            match latest {
                None => self.start(pod, c, None).await,
                Some(i) if i.running() && changed(c, &i) => {
                    // A new image (`kubectl set image`): the kubelet kills the
                    // container and starts it again at once, whatever the policy.
                    self.event(
                        pod,
                        false,
                        "Killing",
                        format!("Container {} definition changed, will be restarted", c.name),
                    );
                    self.stop(pod, c, &i, None).await;
                    self.restart_backoff.remove(&c.name);
                    self.start(pod, c, Some(&i)).await;
                }
                Some(i) if i.running() => self.probe(pod, c, &i).await,
                Some(i) if i.exited() => {
                    let restart = match policy {
                        "Never" => false,
                        "OnFailure" => i.status.exit_code != 0,
                        _ => true,
                    };
                    if restart {
                        self.restart(pod, c, Some(&i)).await;
                    }
                }
                Some(i) if i.state == cri::ContainerState::ContainerCreated as i32 => {
                    self.start_created(&i).await
                }
                Some(_) => {}
            }
        }
        for c in crate::ephemeral::containers(pod) {
            if !instances.contains_key(&c.name) {
                self.start(pod, &c, None).await;
            }
        }
    }

    /// A ready sandbox for the pod: the one the runtime has, or a new one (with the
    /// pod's volumes made first). A sandbox that died takes its containers with it.
    async fn ensure_sandbox(&mut self, pod: &Pod) -> anyhow::Result<()> {
        let uid = spec::uid(pod).to_string();
        let sandboxes = self.sandboxes(&uid).await?;
        let ready = sandboxes
            .iter()
            .find(|s| s.state == cri::PodSandboxState::SandboxReady as i32);
        if let Some(s) = ready {
            if self.sandbox.as_ref().map(|x| x.id.as_str()) != Some(s.id.as_str()) {
                // Adopted (a restarted crustlet) or first seen.
                let (ip, ips) = self.sandbox_ips(&s.id).await;
                let attempt = s.metadata.as_ref().map_or(0, |m| m.attempt);
                self.sandbox = Some(Sandbox {
                    id: s.id.clone(),
                    config: spec::sandbox_config(&self.ctx.cfg, pod, attempt, self.ctx.source(pod)),
                    ip,
                    ips,
                });
            }
            self.refresh_volumes(pod, false).await;
            return Ok(());
        }
        if self.sandbox.take().is_some() {
            self.event(
                pod,
                false,
                "SandboxChanged",
                "Pod sandbox changed, it will be killed and re-created.".into(),
            );
        }
        if let Some(b) = &self.sandbox_backoff {
            if Instant::now() < b.until {
                return Ok(());
            }
        }
        // Old sandboxes go: their containers cannot run again. The newest one is
        // stopped first, for how its containers ended.
        if let Some(s) = sandboxes.first() {
            self.ctx.cri.stop_sandbox(&s.id).await;
            if let Ok(old) = self.instances(&s.id).await {
                self.carried = old
                    .into_iter()
                    .filter_map(|(name, v)| Some((name, v.into_iter().next()?)))
                    .collect();
            }
        }
        for s in &sandboxes {
            self.ctx.cri.remove_sandbox(&s.id).await;
        }
        if !self.refresh_volumes(pod, true).await {
            return Ok(());
        }
        // The pod's cgroup parent depends on the runtime's cgroup driver.
        crate::cgroup::ready(&self.ctx.cfg, &self.ctx.cri).await?;
        let attempt = sandboxes
            .iter()
            .filter_map(|s| s.metadata.as_ref().map(|m| m.attempt + 1))
            .max()
            .unwrap_or(0);
        let config = spec::sandbox_config(&self.ctx.cfg, pod, attempt, self.ctx.source(pod));
        if spec::missing_cluster_dns(&self.ctx.cfg, pod) {
            self.event(
                pod,
                true,
                "MissingClusterDNS",
                format!(
                    "pod: \"{}_{}({})\". kubelet does not have ClusterDNS IP configured and cannot create Pod using \"ClusterFirst\" policy. Falling back to \"Default\" policy.",
                    spec::name(pod),
                    spec::namespace(pod),
                    spec::uid(pod)
                ),
            );
        }
        // The pod's cgroup with its own limits, before the runtime puts anything in it.
        match spec::pod_limits(pod) {
            Ok(limits) => {
                if let Err(e) =
                    crate::cgroup::make_pod(&self.ctx.cfg, &spec::qos(pod), &uid, limits)
                {
                    tracing::warn!(pod = %spec::key(pod), "pod cgroup: {e}");
                }
            }
            Err(e) => tracing::warn!(pod = %spec::key(pod), "pod cgroup: {e}"),
        }
        let _ = std::fs::create_dir_all(&config.log_directory);
        let r = self
            .cri()
            .runtime
            .run_pod_sandbox(cri::RunPodSandboxRequest {
                config: Some(config.clone()),
                runtime_handler: spec::spec(pod).runtime_class_name.unwrap_or_default(),
            })
            .await;
        match r {
            Ok(r) => {
                let id = r.into_inner().pod_sandbox_id;
                self.sandbox_backoff = None;
                let (ip, ips) = self.sandbox_ips(&id).await;
                self.sandbox = Some(Sandbox {
                    id,
                    config,
                    ip,
                    ips,
                });
            }
            Err(e) => {
                let msg = format!("Failed to create pod sandbox: {}", e.message());
                self.event(pod, true, "FailedCreatePodSandBox", msg.clone());
                self.sandbox_backoff = Some(Backoff::next(self.sandbox_backoff.as_ref()));
                for c in spec::spec(pod)
                    .containers
                    .iter()
                    .chain(spec::spec(pod).init_containers.iter().flatten())
                {
                    self.waiting
                        .insert(c.name.clone(), ("ContainerCreating".into(), msg.clone()));
                }
            }
        }
        Ok(())
    }

    async fn sandbox_ips(&self, id: &str) -> (String, Vec<String>) {
        let r = self
            .cri()
            .runtime
            .pod_sandbox_status(cri::PodSandboxStatusRequest {
                pod_sandbox_id: id.to_string(),
                verbose: false,
            })
            .await;
        let net = r
            .ok()
            .and_then(|r| r.into_inner().status)
            .and_then(|s| s.network);
        match net {
            Some(n) if !n.ip.is_empty() => {
                let mut ips = vec![n.ip.clone()];
                ips.extend(n.additional_ips.into_iter().map(|i| i.ip));
                (n.ip, ips)
            }
            _ => {
                let ip = self.ctx.node_ip.clone();
                (ip.clone(), vec![ip])
            }
        }
    }

    /// Makes (or, once a minute, refreshes) the pod's volumes; false when they cannot
    /// be made yet (the reason is in the containers' waiting state and an event).
    async fn refresh_volumes(&mut self, pod: &Pod, force: bool) -> bool {
        if !force
            && self
                .volumes
                .as_ref()
                .is_some_and(|(_, at)| at.elapsed() < Duration::from_secs(60))
        {
            return true;
        }
        let inputs = self.inputs(pod);
        match inputs.volumes().await {
            Ok(v) => {
                self.volumes = Some((v, Instant::now()));
                true
            }
            Err(e) => {
                self.event(pod, true, "FailedMount", e.to_string());
                for c in spec::spec(pod)
                    .containers
                    .iter()
                    .chain(spec::spec(pod).init_containers.iter().flatten())
                {
                    self.waiting
                        .insert(c.name.clone(), ("ContainerCreating".into(), e.to_string()));
                }
                false
            }
        }
    }

    fn inputs<'a>(&'a self, pod: &'a Pod) -> Inputs<'a> {
        Inputs {
            client: self.ctx.client.as_ref(),
            services: self.ctx.services.as_ref(),
            pod,
            pod_dir: self.ctx.cfg.pod_dir(spec::uid(pod)),
            node_name: &self.ctx.cfg.node_name,
            node_ip: &self.ctx.node_ip,
        }
    }

    /// Restarts an exited container when its back-off allows.
    async fn restart(&mut self, pod: &Pod, c: &Container, prev: Option<&Instance>) {
        let b = self.restart_backoff.get(&c.name).cloned();
        match &b {
            // It ran for 10 minutes: the back-off starts over, as the kubelet's does.
            Some(_)
                if prev.is_some_and(|p| {
                    p.status.finished_at - p.status.started_at > 600_000_000_000
                }) =>
            {
                self.restart_backoff.remove(&c.name);
            }
            Some(b) if Instant::now() < b.until => {
                let msg = format!(
                    "back-off {}s restarting failed container={} pod={}_{}({})",
                    b.delay.as_secs(),
                    c.name,
                    spec::name(pod),
                    spec::namespace(pod),
                    spec::uid(pod)
                );
                if self.waiting.get(&c.name).map(|w| w.0.as_str()) != Some("CrashLoopBackOff") {
                    self.event(
                        pod,
                        true,
                        "BackOff",
                        format!(
                            "Back-off restarting failed container {} in pod {}",
                            c.name,
                            spec::key(pod)
                        ),
                    );
                }
                self.waiting
                    .insert(c.name.clone(), ("CrashLoopBackOff".into(), msg));
                return;
            }
            _ => {}
        }
        let next = Backoff::next(self.restart_backoff.get(&c.name));
        self.restart_backoff.insert(c.name.clone(), next);
        self.start(pod, c, prev).await;
    }

    /// Pulls the image as the policy says, then creates and starts the container.
    async fn start(&mut self, pod: &Pod, c: &Container, prev: Option<&Instance>) {
        let Some(sandbox) = self.sandbox.as_ref() else {
            return;
        };
        let (sandbox_id, sandbox_config, pod_ip) = (
            sandbox.id.clone(),
            sandbox.config.clone(),
            sandbox.ip.clone(),
        );
        let attempt = match prev.or_else(|| self.carried.get(&c.name)) {
            Some(p) => p.attempt + 1,
            None => attempt_from_logs(&Path::new(&sandbox_config.log_directory).join(&c.name)),
        };
        let image = match self.ensure_image(pod, c).await {
            Some(i) => i,
            None => return,
        };
        let inputs = self.inputs(pod);
        let envs = match inputs.env(c, &pod_ip).await {
            Ok(e) => e,
            Err(e) => {
                self.failed(pod, &c.name, e.reason(), e.to_string());
                return;
            }
        };
        let Some(mounts) = self.mounts(pod, c, attempt, &envs) else {
            return;
        };
        let config = match spec::container_config(
            pod,
            c,
            ContainerInputs {
                attempt,
                envs,
                mounts,
                image: image.clone(),
                node_memory: self.ctx.node_memory,
            },
        ) {
            Ok(cfg) => cfg,
            Err(e) => {
                self.failed(pod, &c.name, "CreateContainerConfigError", e);
                return;
            }
        };
        let config =
            crate::ephemeral::target(&self.ctx.cri, &sandbox_id, pod, &c.name, config).await;
        let Some(id) = self
            .create_and_start(pod, c, sandbox_id, sandbox_config, config)
            .await
        else {
            return;
        };
        self.waiting.remove(&c.name);
        self.post_start(pod, c, &id, &pod_ip).await;
    }

    /// The container's mounts: its volumes, the file for its termination message and
    /// the kubelet's /etc/hosts; none when they cannot be had (the reason is in its
    /// waiting state).
    fn mounts(
        &mut self,
        pod: &Pod,
        c: &Container,
        attempt: u32,
        envs: &[cri::KeyValue],
    ) -> Option<Vec<cri::Mount>> {
        let dirs = self
            .volumes
            .as_ref()
            .map(|(d, _)| d.clone())
            .unwrap_or_default();
        let read_only = spec::api_data_volumes(pod);
        let paths = VolumePaths {
            dirs: &dirs,
            read_only: &read_only,
        };
        let mut mounts = match paths.mounts(c, envs) {
            Ok(m) => m,
            Err(e) => {
                self.failed(pod, &c.name, "CreateContainerConfigError", e);
                return None;
            }
        };
        // The termination message file, written by the container, read at its exit.
        let term = self.termination_file(pod, &c.name, attempt);
        if let Some(dir) = term.parent() {
            let _ = std::fs::create_dir_all(dir);
        }
        let made = std::fs::write(&term, b"");
        if let Err(e) = &made {
            // The container still runs, but its termination message cannot be read.
            tracing::warn!(pod = %spec::key(pod), container = %c.name,
                "termination message file {}: {e}", term.display());
        }
        if made.is_ok() {
            // Writable by whatever user the container runs as: 0666 whatever the
            // umask, as the kubelet makes it (`makeMounts`).
            use std::os::unix::fs::PermissionsExt;
            let _ = std::fs::set_permissions(&term, std::fs::Permissions::from_mode(0o666));
            mounts.push(cri::Mount {
                container_path: c
                    .termination_message_path
                    .clone()
                    .unwrap_or_else(|| "/dev/termination-log".into()),
                host_path: term.to_string_lossy().into_owned(),
                ..Default::default()
            });
        }
        // The kubelet's /etc/hosts, unless the container mounts its own.
        let own_hosts = c
            .volume_mounts
            .iter()
            .flatten()
            .any(|m| m.mount_path == "/etc/hosts");
        if !own_hosts {
            match self.hosts_mount(pod) {
                Ok(m) => mounts.push(m),
                Err(msg) => {
                    self.failed(pod, &c.name, "CreateContainerConfigError", msg);
                    return None;
                }
            }
        }
        Some(mounts)
    }

    /// The pod's /etc/hosts, written afresh for each container started, as the
    /// kubelet's.
    fn hosts_mount(&self, pod: &Pod) -> Result<cri::Mount, String> {
        let ips = self
            .sandbox
            .as_ref()
            .map(|s| s.ips.clone())
            .unwrap_or_default();
        // The node's own file only matters to a pod on the node's network.
        let node_hosts = if spec::spec(pod).host_network == Some(true) {
            std::fs::read_to_string("/etc/hosts").unwrap_or_default()
        } else {
            String::new()
        };
        let file = self.ctx.cfg.pod_dir(spec::uid(pod)).join("etc-hosts");
        let text = spec::hosts_file(&self.ctx.cfg, pod, &ips, &node_hosts);
        match std::fs::write(&file, text) {
            Ok(()) => Ok(cri::Mount {
                container_path: "/etc/hosts".into(),
                host_path: file.to_string_lossy().into_owned(),
                ..Default::default()
            }),
            Err(e) => Err(format!("writing {}: {e}", file.display())),
        }
    }

    /// CreateContainer then StartContainer, each with the kubelet's event; the new
    /// container's id, or none when either failed (the reason is in its waiting
    /// state).
    async fn create_and_start(
        &mut self,
        pod: &Pod,
        c: &Container,
        sandbox_id: String,
        sandbox_config: cri::PodSandboxConfig,
        config: cri::ContainerConfig,
    ) -> Option<String> {
        let mut rt = self.cri().runtime;
        let created = rt
            .create_container(cri::CreateContainerRequest {
                pod_sandbox_id: sandbox_id,
                config: Some(config),
                sandbox_config: Some(sandbox_config),
            })
            .await;
        let id = match created {
            Ok(r) => r.into_inner().container_id,
            Err(e) => {
                let msg = e.message().to_string();
                self.failed(pod, &c.name, "CreateContainerError", msg);
                return None;
            }
        };
        self.event(
            pod,
            false,
            "Created",
            format!("Created container {}", c.name),
        );
        if let Err(e) = rt
            .start_container(cri::StartContainerRequest {
                container_id: id.clone(),
            })
            .await
        {
            let msg = e.message().to_string();
            self.failed(pod, &c.name, "RunContainerError", msg);
            return None;
        }
        self.event(
            pod,
            false,
            "Started",
            format!("Started container {}", c.name),
        );
        Some(id)
    }

    /// Runs the container's postStart hook, if it has one. A failed hook kills the
    /// container; the restart policy decides what comes next.
    async fn post_start(&self, pod: &Pod, c: &Container, id: &str, pod_ip: &str) {
        let Some(h) = c.lifecycle.as_ref().and_then(|l| l.post_start.as_ref()) else {
            return;
        };
        let grace = spec::spec(pod)
            .termination_grace_period_seconds
            .unwrap_or(30);
        let limit = Duration::from_secs(grace.max(2) as u64);
        if let Err(e) = probe::hook(&self.ctx.cri, h, c, id, pod_ip, limit).await {
            self.event(
                pod,
                true,
                "FailedPostStartHook",
                format!("PostStartHook failed: {e}"),
            );
            let _ = self
                .cri()
                .runtime
                .stop_container(cri::StopContainerRequest {
                    container_id: id.to_string(),
                    timeout: 0,
                })
                .await;
        }
    }

    /// Running, and past its startup probe if it has one.
    fn started(&self, c: &Container, i: &Instance) -> bool {
        i.running()
            && (c.startup_probe.is_none()
                || self
                    .probes
                    .get(&i.id)
                    .and_then(|p| p.startup.as_ref())
                    .is_some_and(|s| s.verdict == Some(probe::Outcome::Success)))
    }

    /// A container made but never started (a crash between the two calls).
    async fn start_created(&self, i: &Instance) {
        let _ = self
            .cri()
            .runtime
            .start_container(cri::StartContainerRequest {
                container_id: i.id.clone(),
            })
            .await;
    }

    /// Kills a running instance of `c` as the kubelet does (preStop first), with the
    /// grace period [`probe::kill_grace`] picks: `failed` is the probe that failed, if any.
    async fn stop(
        &mut self,
        pod: &Pod,
        c: &Container,
        i: &Instance,
        failed: Option<&k8s_openapi::api::core::v1::Probe>,
    ) {
        let ip = self
            .sandbox
            .as_ref()
            .map(|s| s.ip.clone())
            .unwrap_or_default();
        let grace = probe::kill_grace(pod, failed);
        let _ = stop_gracefully(self.cri(), Some(c.clone()), i.id.clone(), ip, grace).await;
        self.probes.remove(&i.id);
    }

    /// A container that could not be made or started: the kubelet's `Failed` event
    /// ("Error: ...") and the waiting reason its status shows until the next try.
    fn failed(&mut self, pod: &Pod, name: &str, reason: &str, msg: String) {
        self.event(pod, true, "Failed", format!("Error: {msg}"));
        self.waiting
            .insert(name.to_string(), (reason.to_string(), msg));
    }

    fn termination_file(&self, pod: &Pod, name: &str, attempt: u32) -> PathBuf {
        self.ctx
            .cfg
            .pod_dir(spec::uid(pod))
            .join("containers")
            .join(name)
            .join(format!("{attempt}-termination-log"))
    }

    /// The image reference to create the container from, after a pull if the policy
    /// asks; None while it cannot be had (ErrImagePull, then ImagePullBackOff).
    async fn ensure_image(&mut self, pod: &Pod, c: &Container) -> Option<String> {
        let image = c.image.clone().unwrap_or_default();
        if image.is_empty() {
            self.waiting.insert(
                c.name.clone(),
                ("InvalidImageName".into(), "container has no image".into()),
            );
            return None;
        }
        let tag_latest = {
            let last = image.rsplit('/').next().unwrap_or(&image);
            !last.contains(':') && !image.contains('@') || last.ends_with(":latest")
        };
        let policy = c.image_pull_policy.clone().unwrap_or_else(|| {
            if tag_latest {
                "Always".into()
            } else {
                "IfNotPresent".into()
            }
        });
        let mut images = self.cri().images;
        let present = images
            .image_status(cri::ImageStatusRequest {
                image: Some(cri::ImageSpec {
                    image: image.clone(),
                    ..Default::default()
                }),
                verbose: false,
            })
            .await
            .ok()
            .and_then(|r| r.into_inner().image)
            .is_some();
        if present && policy != "Always" {
            // The kubelet says so every time it creates a container from it.
            self.event(
                pod,
                false,
                "Pulled",
                format!("Container image {image:?} already present on machine"),
            );
            return Some(image);
        }
        if policy == "Never" {
            let msg = format!("Container image {image:?} is not present with pull policy of Never");
            self.waiting
                .insert(c.name.clone(), ("ErrImageNeverPull".into(), msg.clone()));
            self.event(pod, true, "ErrImageNeverPull", msg);
            return None;
        }
        if let Some(b) = self.pull_backoff.get(&c.name) {
            if Instant::now() < b.until {
                let msg = format!("Back-off pulling image {image:?}");
                if self.waiting.get(&c.name).map(|w| w.0.as_str()) != Some("ImagePullBackOff") {
                    self.event(pod, false, "BackOff", msg.clone());
                }
                self.waiting
                    .insert(c.name.clone(), ("ImagePullBackOff".into(), msg));
                return None;
            }
        }
        let auth = self.inputs(pod).pull_auth(&image).await.ok().flatten();
        self.event(pod, false, "Pulling", format!("Pulling image {image:?}"));
        let started = Instant::now();
        let r = images
            .pull_image(cri::PullImageRequest {
                image: Some(cri::ImageSpec {
                    image: image.clone(),
                    ..Default::default()
                }),
                auth,
                sandbox_config: self.sandbox.as_ref().map(|s| s.config.clone()),
            })
            .await;
        match r {
            Ok(_) => {
                self.pull_backoff.remove(&c.name);
                self.event(
                    pod,
                    false,
                    "Pulled",
                    format!(
                        "Successfully pulled image {image:?} in {:.3}s",
                        started.elapsed().as_secs_f64()
                    ),
                );
                Some(image)
            }
            Err(e) => {
                let msg = format!("Failed to pull image {image:?}: {}", e.message());
                self.event(pod, true, "Failed", msg.clone());
                self.pull_backoff.insert(
                    c.name.clone(),
                    Backoff::next(self.pull_backoff.get(&c.name)),
                );
                self.waiting
                    .insert(c.name.clone(), ("ErrImagePull".into(), msg));
                None
            }
        }
    }

    /// Runs the container's due probes; a failed liveness or startup probe kills it
    /// (the restart policy then decides).
    async fn probe(&mut self, pod: &Pod, c: &Container, i: &Instance) {
        let started = Instant::now();
        let ps = self.probes.entry(i.id.clone()).or_insert_with(|| Probes {
            liveness: c
                .liveness_probe
                .as_ref()
                .map(|p| probe::State::new(p, started)),
            readiness: c
                .readiness_probe
                .as_ref()
                .map(|p| probe::State::new(p, started)),
            startup: c
                .startup_probe
                .as_ref()
                .map(|p| probe::State::new(p, started)),
        });
        let ip = self
            .sandbox
            .as_ref()
            .map(|s| s.ip.clone())
            .unwrap_or_default();
        let cri = self.ctx.cri.clone();
        let mut kill = None;
        let mut events = vec![];
        let startup_done = ps
            .startup
            .as_ref()
            .is_none_or(|s| s.verdict == Some(probe::Outcome::Success));
        let due = |s: &Option<probe::State>| s.as_ref().is_some_and(|s| Instant::now() >= s.next);
        if !startup_done && due(&ps.startup) {
            let p = c.startup_probe.as_ref().expect("startup probe");
            let took = Instant::now();
            let (r, m) = probe::run(&cri, p, c, &i.id, &ip).await;
            let ok = r == probe::Outcome::Success;
            self.ctx
                .seen
                .metrics
                .probe(pod, &c.name, "Startup", ok, took.elapsed());
            let st = ps.startup.as_mut().expect("state");
            if r == probe::Outcome::Failure {
                events.push(format!("Startup probe failed: {m}"));
            }
            if st.record(p, r, m) == Some(probe::Outcome::Failure) {
                kill = Some(("failed startup probe", p));
            }
        }
        if startup_done {
            for (which, probe_spec) in [
                ("Liveness", &c.liveness_probe),
                ("Readiness", &c.readiness_probe),
            ] {
                let Some(p) = probe_spec else { continue };
                let st = if which == "Liveness" {
                    &mut ps.liveness
                } else {
                    &mut ps.readiness
                };
                if !due(st) {
                    continue;
                }
                let took = Instant::now();
                let (r, m) = probe::run(&cri, p, c, &i.id, &ip).await;
                let ok = r == probe::Outcome::Success;
                self.ctx
                    .seen
                    .metrics
                    .probe(pod, &c.name, which, ok, took.elapsed());
                if r == probe::Outcome::Failure {
                    events.push(format!("{which} probe failed: {m}"));
                }
                let st = st.as_mut().expect("state");
                if st.record(p, r, m) == Some(probe::Outcome::Failure) && which == "Liveness" {
                    kill = Some(("failed liveness probe", p));
                }
            }
        }
        for e in events {
            self.event(pod, true, "Unhealthy", e);
        }
        if let Some((why, failed)) = kill {
            self.event(
                pod,
                false,
                "Killing",
                format!("Container {} {why}, will be restarted", c.name),
            );
            self.stop(pod, c, i, Some(failed)).await;
        }
    }

    /// Keeps each container's newest two instances (the previous one for `--previous`).
    async fn collect_garbage(&mut self, instances: &HashMap<String, Vec<Instance>>) {
        for v in instances.values() {
            for old in v.iter().skip(2).filter(|i| i.exited()) {
                let _ = self
                    .cri()
                    .runtime
                    .remove_container(cri::RemoveContainerRequest {
                        container_id: old.id.clone(),
                    })
                    .await;
                self.probes.remove(&old.id);
            }
        }
        let live: Vec<&String> = instances.values().flatten().map(|i| &i.id).collect();
        self.probes.retain(|id, _| live.contains(&id));
    }

    /// The container's status from its instances `v`, newest first; `init` for an init
    /// container that must exit 0 (not a sidecar), which is ready once it did.
    fn container_status(
        &self,
        pod: &Pod,
        c: &Container,
        v: Option<&Vec<Instance>>,
        init: bool,
    ) -> ContainerStatus {
        let latest = v.and_then(|v| v.first());
        let previous = v
            .and_then(|v| v.get(1))
            .or_else(|| self.carried.get(&c.name));
        let waiting = self.waiting.get(&c.name);
        let state = match latest {
            Some(i) if i.running() => ContainerState {
                running: Some(ContainerStateRunning {
                    started_at: time_from_nanos(i.status.started_at),
                }),
                ..Default::default()
            },
            Some(i) if i.exited() && waiting.is_none() => ContainerState {
                terminated: Some(self.terminated(pod, c, i)),
                ..Default::default()
            },
            _ => ContainerState {
                waiting: Some(waiting_state(pod, waiting)),
                ..Default::default()
            },
        };
        // In back-off, the instance that exited last is the last state.
        let last = match (latest, &state.waiting) {
            (Some(i), Some(_)) if i.exited() => Some(i),
            _ => previous.filter(|p| p.exited()),
        };
        let (started, ready) = self.readiness(c, latest, init, waiting);
        // Each restart is a new attempt of the container's name.
        let restart_count = latest.map_or(0, |i| i.attempt as i32);
        ContainerStatus {
            name: c.name.clone(),
            image: c.image.clone().unwrap_or_default(),
            image_id: latest
                .map(|i| i.status.image_ref.clone())
                .unwrap_or_default(),
            container_id: latest.map(|i| self.container_id(i)),
            ready,
            started: Some(started),
            restart_count,
            state: Some(state),
            last_state: last.map(|i| ContainerState {
                terminated: Some(self.terminated(pod, c, i)),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    /// The instance's id as the apiserver shows it: `<runtime>://<id>`.
    fn container_id(&self, i: &Instance) -> String {
        format!("{}://{}", self.runtime_name, i.id)
    }

    /// An exited instance's state. Its message is the runtime's, then what the
    /// container wrote to its termination file or, when it failed with
    /// FallbackToLogsOnError and wrote nothing there, the end of its log (80 lines,
    /// 2 KiB), as the kubelet does.
    fn terminated(&self, pod: &Pod, c: &Container, i: &Instance) -> ContainerStateTerminated {
        let s = &i.status;
        let mut own = std::fs::read(self.termination_file(pod, &c.name, i.attempt))
            .map(|mut b| {
                b.truncate(4096);
                String::from_utf8_lossy(&b).into_owned()
            })
            .unwrap_or_default();
        let fallback = c.termination_message_policy.as_deref() == Some("FallbackToLogsOnError")
            && s.exit_code != 0
            && s.reason != "ContainerCannotRun";
        if own.is_empty() && fallback && !s.log_path.is_empty() {
            own = crate::server::logs::tail_text(std::path::Path::new(&s.log_path), 80, 2048);
        }
        let message = match (s.message.is_empty(), own.is_empty()) {
            (_, true) => s.message.clone(),
            (true, false) => own,
            (false, false) => format!("{}: {own}", s.message),
        };
        let message = Some(message).filter(|m| !m.is_empty());
        ContainerStateTerminated {
            exit_code: s.exit_code,
            reason: Some(if s.reason.is_empty() {
                if s.exit_code == 0 {
                    "Completed"
                } else {
                    "Error"
                }
                .to_string()
            } else {
                s.reason.clone()
            }),
            message: message.map(|m| m.chars().take(4096).collect()),
            started_at: time_from_nanos(s.started_at),
            finished_at: time_from_nanos(s.finished_at),
            container_id: Some(self.container_id(i)),
            ..Default::default()
        }
    }

    /// (started, ready) of the container's newest instance `latest`: started once
    /// running and past its startup probe; ready once started and past its readiness
    /// probe, or, as an `init` container, once it exited 0 and is not waiting again.
    fn readiness(
        &self,
        c: &Container,
        latest: Option<&Instance>,
        init: bool,
        waiting: Option<&(String, String)>,
    ) -> (bool, bool) {
        let probes = latest.and_then(|i| self.probes.get(&i.id));
        let running = latest.is_some_and(|i| i.running());
        let started = running
            && probes
                .and_then(|p| p.startup.as_ref())
                .is_none_or(|s| s.verdict == Some(probe::Outcome::Success));
        // An init container that exited 0 is ready (the kubelet's prober says so).
        let init_done = init
            && latest.is_some_and(|i| i.exited() && i.status.exit_code == 0)
            && waiting.is_none();
        let ready = init_done
            || started
                && match (
                    &c.readiness_probe,
                    probes.and_then(|p| p.readiness.as_ref()),
                ) {
                    (None, _) => true,
                    (Some(_), Some(s)) => s.verdict == Some(probe::Outcome::Success),
                    (Some(_), None) => false,
                };
        (started, ready)
    }

    async fn status(
        &mut self,
        pod: &Pod,
        instances: &HashMap<String, Vec<Instance>>,
        initialized: bool,
    ) -> PodStatus {
        let spec = spec::spec(pod);
        let policy = spec
            .restart_policy
            .clone()
            .unwrap_or_else(|| "Always".into());
        let init_statuses: Vec<ContainerStatus> = spec
            .init_containers
            .iter()
            .flatten()
            .map(|c| self.container_status(pod, c, instances.get(&c.name), !is_sidecar(c)))
            .collect();
        let sidecars: Vec<&ContainerStatus> = spec
            .init_containers
            .iter()
            .flatten()
            .zip(&init_statuses)
            .filter(|(c, _)| is_sidecar(c))
            .map(|(_, s)| s)
            .collect();
        let statuses: Vec<ContainerStatus> = spec
            .containers
            .iter()
            .map(|c| self.container_status(pod, c, instances.get(&c.name), false))
            .collect();
        let ephemeral = self.ephemeral_statuses(pod, instances);
        let phase = pod_phase(
            self.finished.as_deref(),
            &policy,
            initialized,
            &init_statuses,
            &sidecars,
            &statuses,
        );
        let old = pod.status.clone().unwrap_or_default();
        let containers = Containers {
            init: &init_statuses,
            sidecars: &sidecars,
            app: &statuses,
        };
        let gates = spec.readiness_gates.as_deref().unwrap_or_default();
        let conditions = self.conditions(&old, &phase, initialized, &containers, gates);
        let (pod_ip, pod_ips) = match &self.sandbox {
            Some(s) => (Some(s.ip.clone()), s.ips.clone()),
            None => (
                old.pod_ip.clone(),
                old.pod_ips.iter().flatten().map(|p| p.ip.clone()).collect(),
            ),
        };
        PodStatus {
            phase: Some(phase),
            conditions: Some(conditions),
            host_ip: Some(self.ctx.node_ip.clone()),
            host_ips: Some(vec![HostIP {
                ip: self.ctx.node_ip.clone(),
            }]),
            pod_ip: pod_ip.filter(|i| !i.is_empty()),
            pod_ips: Some(
                pod_ips
                    .into_iter()
                    .filter(|i| !i.is_empty())
                    .map(|ip| PodIP { ip })
                    .collect(),
            ),
            start_time: self.start_time.clone(),
            qos_class: Some(spec::qos(pod)),
            init_container_statuses: if init_statuses.is_empty() {
                None
            } else {
                Some(init_statuses)
            },
            container_statuses: Some(statuses),
            ephemeral_container_statuses: (!ephemeral.is_empty()).then_some(ephemeral),
            reason: self.verdict.as_ref().map(|v| v.0.clone()),
            message: self.verdict.as_ref().map(|v| v.1.clone()),
            ..Default::default()
        }
    }

    /// The statuses of the pod's ephemeral containers (kubectl debug), which are never
    /// ready.
    fn ephemeral_statuses(
        &self,
        pod: &Pod,
        instances: &HashMap<String, Vec<Instance>>,
    ) -> Vec<ContainerStatus> {
        crate::ephemeral::containers(pod)
            .iter()
            .map(|c| {
                crate::ephemeral::status(self.container_status(
                    pod,
                    c,
                    instances.get(&c.name),
                    false,
                ))
            })
            .collect()
    }

    /// The conditions as the kubelet words them: Initialized once every init container
    /// exited 0 (PodCompleted once the pod succeeded); ContainersReady and Ready false
    /// with PodFailed or PodCompleted once the pod is done, else with the names of the
    /// containers not ready; Ready also false while one of the pod's readiness `gates`
    /// is not True in `old`'s conditions (set by others, and left as they are). A
    /// condition keeps its transition time while its status stays, and the
    /// scheduler's condition stays as it set it.
    fn conditions(
        &self,
        old: &PodStatus,
        phase: &str,
        initialized: bool,
        containers: &Containers,
        gates: &[PodReadinessGate],
    ) -> Vec<PodCondition> {
        let sandbox_ready = self.sandbox.is_some() && self.finished.is_none();
        // Sidecars count for readiness like app containers.
        let all_ready =
            containers.app.iter().all(|s| s.ready) && containers.sidecars.iter().all(|s| s.ready);
        let incomplete = containers.incomplete_init();
        let init_ok = (initialized && incomplete.is_empty()) || phase == "Succeeded";
        let unready = names(
            containers
                .sidecars
                .iter()
                .copied()
                .chain(containers.app.iter()),
            |s| !s.ready,
        );
        let (ready_reason, ready_message) = match phase {
            "Failed" => (Some("PodFailed"), None),
            "Succeeded" => (Some("PodCompleted"), None),
            _ if all_ready && initialized => (None, None),
            _ => (
                Some("ContainersNotReady"),
                Some(format!("containers with unready status: [{unready}]")),
            ),
        };
        let containers_ready = all_ready && initialized && ready_reason.is_none();
        let unready_gates = containers_ready
            .then(|| admit::unready_gates(gates, old.conditions.as_deref().unwrap_or_default()))
            .flatten();
        let (pod_ready, pod_ready_reason, pod_ready_message) = match unready_gates {
            Some(m) => (false, Some(admit::GATES_NOT_READY), Some(m)),
            None => (containers_ready, ready_reason, ready_message.clone()),
        };
        let mut conditions = vec![
            condition(old, "PodReadyToStartContainers", sandbox_ready, None, None),
            if init_ok {
                let done = phase == "Succeeded";
                condition(
                    old,
                    "Initialized",
                    true,
                    done.then_some("PodCompleted"),
                    None,
                )
            } else {
                condition(
                    old,
                    "Initialized",
                    false,
                    Some("ContainersNotInitialized"),
                    Some(format!("containers with incomplete status: [{incomplete}]")),
                )
            },
            condition(old, "Ready", pod_ready, pod_ready_reason, pod_ready_message),
            condition(
                old,
                "ContainersReady",
                containers_ready,
                ready_reason,
                ready_message,
            ),
        ];
        conditions.extend(
            old.conditions
                .iter()
                .flatten()
                .filter(|c| c.type_ == "PodScheduled")
                .cloned(),
        );
        conditions
    }

    /// Sends the status when it differs from what was sent last.
    async fn report(&mut self, pod: &Arc<Pod>, st: PodStatus) {
        self.ctx.seen.pod(pod, &st);
        let mut value = serde_json::json!({ "status": st });
        // A strategic merge patch merges conditions by type: a reason or message the
        // condition no longer has must be sent as null, or the old one stays.
        if let Some(cs) = value
            .pointer_mut("/status/conditions")
            .and_then(|c| c.as_array_mut())
        {
            for c in cs.iter_mut().filter_map(|c| c.as_object_mut()) {
                for k in ["reason", "message"] {
                    c.entry(k).or_insert(serde_json::Value::Null);
                }
            }
        }
        // podIPs and hostIPs merge by `ip` too: a new sandbox's address would be added
        // beside the old one (and refused, two of a family). Replaced whole instead.
        for k in ["podIPs", "hostIPs"] {
            if let Some(a) = value
                .pointer_mut(&format!("/status/{k}"))
                .and_then(|c| c.as_array_mut())
            {
                a.push(serde_json::json!({"$patch": "replace"}));
            }
        }
        let mut cmp = value.clone();
        // Transition times alone are no reason to write.
        if let Some(cs) = cmp
            .pointer_mut("/status/conditions")
            .and_then(|c| c.as_array_mut())
        {
            for c in cs {
                c.as_object_mut().map(|o| o.remove("lastTransitionTime"));
            }
        }
        let cmp = {
            use std::hash::{Hash, Hasher};
            let mut h = std::collections::hash_map::DefaultHasher::new();
            cmp.to_string().hash(&mut h);
            h.finish()
        };
        // Someone else changed what this node reports (the node lifecycle controller
        // marks the pods of a node it lost touch with NotReady): sent again, as the
        // kubelet's status manager puts it right.
        if self.last_status == Some(cmp) && self.ctx.source(pod) == "api" && !agrees(pod, &st) {
            self.last_status = None;
        }
        if self.last_status == Some(cmp) {
            return;
        }
        let Some(client) = self.ctx.client.clone() else {
            self.last_status = Some(cmp);
            return;
        };
        let api: Api<Pod> = Api::namespaced(client, spec::namespace(pod));
        match api
            .patch_status(
                spec::name(pod),
                &PatchParams::default(),
                &Patch::Strategic(&value),
            )
            .await
        {
            Ok(_) => self.last_status = Some(cmp),
            Err(e) => tracing::warn!(pod = %spec::key(pod), "status update: {e}"),
        }
    }

    /// Stops every container with the grace period, then the sandbox, removes both, and
    /// (for a pod deleted through the apiserver) deletes the pod object.
    async fn terminate(&mut self, pod: &Arc<Pod>, grace: Option<i64>, delete: bool) {
        let grace = grace.unwrap_or(30).max(0);
        let uid = spec::uid(pod).to_string();
        let sandboxes = self.sandboxes(&uid).await.unwrap_or_default();
        // The hooks' default host: the pod's IP, as its current sandbox has it.
        let ip = self
            .sandbox
            .as_ref()
            .map(|s| s.ip.clone())
            .unwrap_or_default();
        for s in &sandboxes {
            self.kill_containers(pod, &s.id, &ip, grace).await;
            if delete {
                let latest: HashMap<String, Vec<Instance>> =
                    self.instances(&s.id).await.unwrap_or_default();
                let st = self.status(pod, &latest, true).await;
                self.report(pod, st).await;
            }
            self.ctx.cri.remove_sandbox(&s.id).await;
        }
        crate::cgroup::remove_pod(&self.ctx.cfg, &uid).await;
        crate::tmpfs::remove_pod_dir(&self.ctx.cfg.pod_dir(&uid));
        self.ctx.seen.gone(&uid);
        if delete {
            if let Some(client) = self.ctx.client.clone() {
                let api: Api<Pod> = Api::namespaced(client, spec::namespace(pod));
                let dp = DeleteParams {
                    grace_period_seconds: Some(0),
                    preconditions: Some(Preconditions {
                        uid: Some(uid.clone()),
                        resource_version: None,
                    }),
                    ..Default::default()
                };
                if let Err(e) = api.delete(spec::name(pod), &dp).await {
                    tracing::debug!(pod = %spec::key(pod), "delete: {e}");
                }
            }
        }
        tracing::info!(pod = %spec::key(pod), "pod stopped and removed");
    }
}
