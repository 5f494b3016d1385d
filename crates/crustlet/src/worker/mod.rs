//! One worker per pod: it turns the pod's spec into CRI calls and the runtime's answers
//! into the pod's status, whenever the pod changes, when the runtime's events say one
//! of its containers did (`crate::wake`), at its own deadlines (probes, back-offs), and
//! every second while it has work in flight or the runtime sends no events.
//!
//! ```text
//!            +-------------------------------- sync --------------------------------+
//!            v                                                                    |
//!   [no sandbox] --volumes, RunPodSandbox--> [sandbox ready] --init containers,   |
//!            ^                                     |          in order, each to   |
//!            | sandbox died: a new one,            |          exit 0--------------+
//!            | every container again               v                              |
//!            +------------------------ [app containers: start, probe, restart by  |
//!                                        restartPolicy with back-off]-------------+
//!   deletionTimestamp or gone --> StopContainer (grace) --> StopPodSandbox -->
//!   RemovePodSandbox --> pod deleted with grace 0 --> worker ends
//!   (a runtime that cannot be asked: the same again, with back-off, until it can)
//! ```
//!
//! The worker keeps nothing that the runtime does not also know: after a restart of the
//! crustlet it finds its sandbox and containers by their labels and carries on.
//!
//! This file holds the sync loop and the pod-wide steps (admission, active deadline,
//! the end of a finished pod); the rest is cut as the kubelet cuts it:
//!
//! - `sandbox`: the pod's sandbox and its volumes, made or adopted
//!   (`kuberuntime_sandbox`);
//! - `image`: the pull before a container is made, with its back-off (`images`);
//! - `start`: init, app and ephemeral containers started and restarted, postStart;
//! - `prober`: the worker's probes, and the kill a failed one brings (`prober`);
//! - `status`: the pod's phase, conditions and container statuses, as pure functions
//!   with their table tests (`getPhase`, `status/generate.go`);
//! - `report`: the status made from what the worker knows and sent to the apiserver
//!   when it changed (the status manager);
//! - `terminate`: containers stopped (preStop, grace) and the pod removed;
//! - `garbage`: a container's old instances removed (`kuberuntime_gc`);
//! - `admit`: the pure decisions about the pod as a whole (admission, active deadline,
//!   readiness gates), also read by the config for the node's sysctls;
//! - `ephemeral`: ephemeral containers (`kubectl debug`);
//! - `probe`: how one probe or hook is run (exec, HTTP GET, TCP, gRPC; `pkg/probe`).

pub mod admit;
mod ephemeral;
mod garbage;
mod image;
mod probe;
mod prober;
mod report;
mod sandbox;
mod start;
mod status;
mod terminate;

use start::is_sidecar;

use crate::cri::Cri;
use crate::inputs::Inputs;
use crate::spec;
use crate::Ctx;
use cri_api as cri;
use k8s_openapi::api::core::v1::{Container, Pod, PodStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use prober::Probes;
use sandbox::Sandbox;
use std::collections::HashMap;
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

pub struct Worker {
    ctx: Arc<Ctx>,
    sandbox: Option<Sandbox>,
    volumes: Option<(crate::inputs::Volumes, Instant)>,
    /// The wait before the next try after a periodic refresh of the volumes failed
    /// (the apiserver gone: no token, no ConfigMap), doubling to the refresh period.
    volume_retry: Option<Duration>,
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
    /// The last sync failed: try again soon.
    behind: bool,
    /// The last status could not be sent: when to try again, and the wait after that
    /// (doubling to [`report::STATUS_RETRY_MAX`]). Without the apiserver a worker
    /// retrying each second would knock at its port once a second per pod.
    status_retry: Option<(Instant, Duration)>,
    /// The attempt of a container whose CreateContainer is under way or failed, by
    /// name: the next try makes the same attempt. The runtime made nothing to count,
    /// but may have left the attempt's log file behind (crustd killed in the middle of
    /// the create, its half-made container rolled back), which the count from the logs
    /// would take for a run: a restart count of 1 for a container never started.
    uncreated: HashMap<String, u32>,
    /// The pod's slot among those being started (`Ctx::starts`), taken when its sandbox
    /// is to be made (after its volumes: what the apiserver has yet to give, a token
    /// it does not issue yet, must not hold a slot or send the pod to the back of the
    /// queue), held through the rest of that sync, given back while it waits on what is
    /// not the node's start work (an image pull, a postStart hook).
    start_slot: Option<tokio::sync::OwnedSemaphorePermit>,
    /// The pod as the worker's loop gets it, watched while waiting for a start slot.
    pod_rx: watch::Receiver<Option<Arc<Pod>>>,
}

/// The worker's wake-up, given back when the worker ends.
struct Registered(Arc<crate::wake::Wakers>, String);

impl Drop for Registered {
    fn drop(&mut self) {
        self.0.unregister(&self.1);
    }
}

/// Runs the pod until it is deleted (or removed from this node).
pub async fn run(ctx: Arc<Ctx>, mut rx: watch::Receiver<Option<Arc<Pod>>>) {
    let uid = rx
        .borrow()
        .as_ref()
        .map(|p| spec::uid(p).to_string())
        .unwrap_or_default();
    let wake = ctx.wakers.register(&uid);
    let _registered = Registered(ctx.wakers.clone(), uid);
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
        behind: false,
        status_retry: None,
        volume_retry: None,
        uncreated: HashMap::new(),
        start_slot: None,
        pod_rx: rx.clone(),
    };
    // The worker waits most of its life: sync and terminate are boxed so that their
    // (large) state exists only while they run, not in every idle pod's task.
    loop {
        let pod = rx.borrow_and_update().clone();
        w.pod_rx = rx.clone();
        match pod {
            None => {
                // Gone from the apiserver (force-deleted, or bound elsewhere): stop it.
                let last = w.last_pod.take();
                if let Some(p) = last {
                    Box::pin(w.terminate_until_done(&p, Some(2), false)).await;
                    w.ctx.ports.release(spec::uid(&p));
                }
                return;
            }
            Some(pod) if pod.metadata.deletion_timestamp.is_some() => {
                let grace = pod
                    .metadata
                    .deletion_grace_period_seconds
                    .or(spec::spec(&pod).termination_grace_period_seconds);
                Box::pin(w.terminate_until_done(&pod, grace, true)).await;
                w.ctx.ports.release(spec::uid(&pod));
                return;
            }
            Some(pod) => {
                w.last_pod = Some(pod.clone());
                let started = Instant::now();
                if let Err(e) = Box::pin(w.sync(&pod)).await {
                    tracing::warn!(pod = %spec::key(&pod), "sync: {e:#}");
                    w.behind = true;
                }
                w.start_slot = None;
                w.ctx.seen.metrics.sync(started.elapsed());
            }
        }
        tokio::select! {
            r = rx.changed() => if r.is_err() {
                w.dropped().await;
                return;
            },
            _ = wake.notified() => {}
            _ = tokio::time::sleep(w.next_sync()) => {}
        }
    }
}

fn now() -> Time {
    Time(k8s_openapi::jiff::Timestamp::now())
}

fn now_ms() -> i64 {
    k8s_openapi::jiff::Timestamp::now().as_millisecond()
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

impl Worker {
    fn cri(&self) -> Cri {
        self.ctx.cri.clone()
    }

    /// The manager dropped the pod: what it has is stopped.
    async fn dropped(&mut self) {
        if let Some(p) = self.last_pod.take() {
            Box::pin(self.terminate_until_done(&p, Some(2), false)).await;
            self.ctx.ports.release(spec::uid(&p));
        }
    }

    /// Gives the pod's start slot back while it waits on something slow that is not
    /// the node's own start work (an image pull, a postStart hook), so that it does
    /// not hold up the pods behind it; whether it had one, to take again after.
    fn lend_start_slot(&mut self) -> bool {
        self.start_slot.take().is_some()
    }

    /// Waits for a start slot (none is needed once the pod has one); false when the pod
    /// changed meanwhile (deleted, say): the sync ends there and the worker's loop looks
    /// at the pod again.
    async fn wait_start_slot(&mut self) -> bool {
        if self.start_slot.is_some() {
            return true;
        }
        // The loop's clone has seen what the loop had when this sync began: a change
        // since then ends the wait.
        let mut rx = self.pod_rx.clone();
        tokio::select! {
            p = self.ctx.starts.clone().acquire_owned() => {
                self.start_slot = p.ok();
                true
            }
            _ = rx.changed() => false,
        }
    }

    /// Takes a start slot again after [`Worker::lend_start_slot`] gave one back.
    async fn take_start_slot(&mut self, had: bool) {
        if had {
            self.start_slot = self.ctx.starts.clone().acquire_owned().await.ok();
        }
    }

    fn event(&self, pod: &Pod, warning: bool, reason: &str, note: String) {
        self.ctx.event(pod, warning, reason, note);
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

    /// How long the worker may sleep when nothing wakes it: a second while it has work
    /// in flight (no sandbox yet, a container waiting, a status not sent, a failed sync)
    /// or no events to wake it; else until its next deadline (a probe due, a back-off
    /// over, the active deadline, the volumes' refresh), and [`crate::wake::SETTLED`] at
    /// most.
    fn next_sync(&self) -> Duration {
        use crate::wake::{POLL, SETTLED};
        let settled = self.ctx.wakers.live()
            && !self.behind
            && (self.sandbox.is_some() || self.finished.is_some())
            && self.waiting.is_empty();
        if !settled {
            return POLL;
        }
        let now = Instant::now();
        let mut next = now + SETTLED;
        for p in self.probes.values() {
            for s in [&p.liveness, &p.readiness, &p.startup]
                .into_iter()
                .flatten()
            {
                // Computed right after a sync, which ran every probe then due: one still
                // past due is not run by a sync (its container is not running), and must
                // not make the worker spin.
                next = next.min(s.next.max(now + POLL));
            }
        }
        let backoffs = self
            .restart_backoff
            .values()
            .chain(self.pull_backoff.values());
        for b in backoffs.chain(self.sandbox_backoff.iter()) {
            if b.until > now {
                next = next.min(b.until);
            }
        }
        if let Some((_, at)) = &self.volumes {
            next = next.min(*at + sandbox::VOLUME_REFRESH);
        }
        if let Some((at, _)) = self.status_retry {
            next = next.min(at.max(now + POLL));
        }
        let deadline = self.last_pod.as_ref().and_then(|p| {
            let secs = spec::spec(p).active_deadline_seconds?;
            let start = self.start_time.as_ref()?.0;
            let left = start.as_millisecond() + secs * 1000 - now_ms();
            Some(now + Duration::from_millis(left.max(0) as u64))
        });
        if let Some(d) = deadline.filter(|_| self.finished.is_none()) {
            next = next.min(d);
        }
        next.saturating_duration_since(now)
    }

    async fn sync(&mut self, pod: &Arc<Pod>) -> anyhow::Result<()> {
        self.behind = false;
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
            // Node pressure refuses new pods only: a pod that ran before a restart of
            // the crustlet is left to the eviction manager (the kubelet refuses it
            // again, and so fails a running BestEffort pod on a node that merely
            // restarted under memory pressure).
            let pressure = if started {
                vec![]
            } else {
                let root = self.ctx.cfg.root_dir.clone();
                let r = tokio::task::spawn_blocking(move || crate::node::host::readings(&root))
                    .await
                    .unwrap_or_default();
                crate::node::status::pressure(&r)
            };
            let critical = admit::critical(pod, self.ctx.source(pod) == "file");
            let verdict = admit::admit_under_pressure(pod, &spec::qos(pod), &pressure, critical)
                .and_then(|()| admit::admit(pod, &self.ctx.cfg.sysctls))
                .and_then(|()| {
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
        // Taken whatever the pod's state, so that an eviction asked of a pod that ended
        // meanwhile is not kept.
        if let Some(msg) = self.ctx.evictions.take(spec::uid(pod)) {
            if self.finished.is_none() {
                self.evicted(pod, msg).await;
            }
        }
        if self.finished.is_some() {
            self.finish(pod).await;
            return Ok(());
        }
        // The kubelet's soft admission, asked at every sync: a pod whose AppArmor
        // profiles the node cannot enforce waits, Pending, and gets no sandbox.
        if self.sandbox.is_none() {
            if let Err(r) = admit::apparmor(pod, crate::node::host::apparmor) {
                self.blocked(pod, r).await;
                return Ok(());
            }
        }

        self.ensure_sandbox(pod).await?;
        let Some(sandbox_id) = self.sandbox.as_ref().map(|s| s.id.clone()) else {
            let st = self.status(pod, &HashMap::new(), false).await;
            self.report(pod, st).await;
            return Ok(());
        };
        let instances = self.instances(&sandbox_id).await?;
        let initialized = self.init_containers(pod, spec, &policy, &instances).await;
        if initialized {
            self.app_containers(pod, spec, &policy, &instances).await;
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

    /// The node cannot run the pod yet (soft admission, [`admit::apparmor`]): it stays
    /// Pending with the handler's reason and message, its waiting containers
    /// `Blocked`, as the kubelet v1.28 reports it; no event, as the kubelet sends none.
    async fn blocked(&mut self, pod: &Arc<Pod>, r: admit::Rejection) {
        let mut st = self.status(pod, &HashMap::new(), false).await;
        st.phase = Some("Pending".into());
        st.reason = Some(r.reason.into());
        st.message = Some(r.message);
        for cs in st
            .init_container_statuses
            .iter_mut()
            .flatten()
            .chain(st.container_statuses.iter_mut().flatten())
        {
            if let Some(w) = cs.state.as_mut().and_then(|s| s.waiting.as_mut()) {
                w.reason = Some(admit::BLOCKED.into());
                w.message = None;
            }
        }
        self.report(pod, st).await;
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

    /// The eviction manager chose the pod (`crate::eviction`): its containers are
    /// killed at once, as for the kubelet's hard thresholds, and it ends Failed with
    /// reason Evicted, the manager's message and a DisruptionTarget condition.
    async fn evicted(&mut self, pod: &Pod, msg: String) {
        self.event(pod, true, crate::eviction::REASON, msg.clone());
        self.finished = Some("Failed".into());
        self.verdict = Some((crate::eviction::REASON.into(), msg));
        self.adopt_newest_sandbox(pod).await;
        match self.sandbox.as_ref().map(|s| (s.id.clone(), s.ip.clone())) {
            Some((id, ip)) => self.kill_containers(pod, &id, &ip, 0).await,
            None => self.final_status = Some(self.status(pod, &HashMap::new(), false).await),
        }
    }

    /// Nothing restarts any more: the kubelet stops the sandbox of a finished pod. Its
    /// final status is read once, from the containers the stopped sandbox still lists,
    /// and sent until the apiserver has it (it may be away when the pod ends).
    async fn finish(&mut self, pod: &Arc<Pod>) {
        self.ctx.ports.release(spec::uid(pod));
        // Nothing is probed any more (nor waited for by `next_sync`).
        self.probes.clear();
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
            // The volumes of a pod that will not run again go (the kubelet's default,
            // without --keep-terminated-pod-volumes): an evicted pod's emptyDir would
            // otherwise keep the node under the disk pressure it was evicted for.
            let volumes = self.ctx.cfg.pod_dir(spec::uid(pod)).join("volumes");
            self.volumes = None;
            self.ctx.seen.measured(spec::uid(pod), &[]);
            let _ =
                tokio::task::spawn_blocking(move || crate::inputs::tmpfs::remove_pod_dir(&volumes))
                    .await;
        }
        if let Some(st) = self.final_status.clone() {
            self.report(pod, st).await;
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
}
