//! The pod's status as the kubelet v1.28 makes it: its phase (`getPhase` in
//! `pkg/kubelet/kubelet_pods.go`), its conditions (`pkg/kubelet/status/generate.go`)
//! and its containers' statuses, with the started and ready the prober gives them.
//!
//! Pure functions: what the runtime reported and the worker knows comes in ([`Facts`]
//! for a container, [`PodFacts`] for the pod), the status goes out. The worker reads
//! what they need from files and the clock and sends what they make (`report`).

use super::admit;
use super::probe;
use super::{is_sidecar, time_from_nanos, Instance};
use crate::spec;
use k8s_openapi::api::core::v1::{
    Container, ContainerState, ContainerStateRunning, ContainerStateTerminated,
    ContainerStateWaiting, ContainerStatus, HostIP, Pod, PodCondition, PodIP, PodReadinessGate,
    PodStatus,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use std::collections::HashMap;

/// What the worker knows of one container, for its status.
pub(super) struct Facts<'a> {
    pub(super) container: &'a Container,
    /// Its instances in the pod's sandbox, newest first.
    pub(super) instances: &'a [Instance],
    /// Its newest instance in the sandbox that died (the worker's `carried`): the last
    /// state while it has no older instance in this one.
    pub(super) carried: Option<&'a Instance>,
    /// Why the worker holds it back (reason, message).
    pub(super) waiting: Option<&'a (String, String)>,
    /// What the probes of its newest instance concluded.
    pub(super) verdicts: Verdicts,
    /// An init container that must exit 0 (not a sidecar), which is ready once it did.
    pub(super) init: bool,
    /// What the exited instances the status shows ([`Facts::shown_exits`]) wrote of
    /// their end (termination file, or log tail), by instance id; none is no message.
    pub(super) messages: HashMap<String, String>,
}

/// The verdicts of a container instance's startup and readiness probes (None while a
/// probe has not run, or no threshold was crossed yet).
#[derive(Debug, Default, Clone, Copy)]
pub(super) struct Verdicts {
    pub(super) startup: Option<probe::Outcome>,
    pub(super) readiness: Option<probe::Outcome>,
}

impl<'a> Facts<'a> {
    fn latest(&self) -> Option<&'a Instance> {
        self.instances.first()
    }

    /// The exited instances the status shows: the newest one as the state (when the
    /// worker does not hold the container back), and the one the last state shows (in
    /// back-off the newest, which exited last; else the one before it).
    pub(super) fn shown_exits(&self) -> (Option<&'a Instance>, Option<&'a Instance>) {
        let latest = self.latest().filter(|i| i.exited());
        let previous = self.instances.get(1).or(self.carried);
        match latest {
            Some(i) if self.waiting.is_none() => (Some(i), previous.filter(|p| p.exited())),
            Some(i) => (None, Some(i)),
            None => (None, previous.filter(|p| p.exited())),
        }
    }
}

/// A container's waiting state: why the worker holds it back, else the kubelet's
/// default, PodInitializing for every container of a pod with init containers.
fn waiting_state(pod: &Pod, waiting: Option<&(String, String)>) -> ContainerStateWaiting {
    ContainerStateWaiting {
        reason: Some(waiting.map_or_else(
            || {
                if spec::spec(pod)
                    .init_containers
                    .as_ref()
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
    now: &Time,
    t: &str,
    ok: bool,
    reason: Option<&str>,
    message: Option<String>,
) -> PodCondition {
    let prev = old.conditions.iter().flatten().find(|c| c.type_ == t);
    let status = if ok { "True" } else { "False" };
    let transition = match prev {
        Some(p) if p.status == status => p.last_transition_time.clone(),
        _ => Some(now.clone()),
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

/// The container's status from what the worker knows of it (`f`), in a pod of
/// `runtime` (the runtime's name, for container ids).
pub(super) fn container_status(pod: &Pod, f: &Facts, runtime: &str) -> ContainerStatus {
    let c = f.container;
    let latest = f.latest();
    let (terminated_now, last) = f.shown_exits();
    let message = |i: &Instance| f.messages.get(&i.id).map_or("", String::as_str);
    let state = match (latest, terminated_now) {
        (Some(i), _) if i.running() => ContainerState {
            running: Some(ContainerStateRunning {
                started_at: time_from_nanos(i.status.started_at),
            }),
            ..Default::default()
        },
        (_, Some(i)) => ContainerState {
            terminated: Some(terminated(i, message(i), runtime)),
            ..Default::default()
        },
        _ => ContainerState {
            waiting: Some(waiting_state(pod, f.waiting)),
            ..Default::default()
        },
    };
    let (started, ready) = readiness(f);
    // Each restart is a new attempt of the container's name.
    let restart_count = latest.map_or(0, |i| i.attempt as i32);
    ContainerStatus {
        name: c.name.clone(),
        image: c.image.clone().unwrap_or_default(),
        image_id: latest
            .map(|i| i.status.image_ref.clone())
            .unwrap_or_default(),
        container_id: latest.map(|i| container_id(runtime, i)),
        ready,
        started: Some(started),
        restart_count,
        state: Some(state),
        last_state: last.map(|i| ContainerState {
            terminated: Some(terminated(i, message(i), runtime)),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// The instance's id as the apiserver shows it: `<runtime>://<id>`.
fn container_id(runtime: &str, i: &Instance) -> String {
    format!("{runtime}://{}", i.id)
}

/// An exited instance's state. Its message is the runtime's, then what the container
/// wrote of its end (`own`: its termination file, or the end of its log), as the
/// kubelet does; at most 4096 characters.
fn terminated(i: &Instance, own: &str, runtime: &str) -> ContainerStateTerminated {
    let s = &i.status;
    let message = match (s.message.is_empty(), own.is_empty()) {
        (_, true) => s.message.clone(),
        (true, false) => own.to_string(),
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
        container_id: Some(container_id(runtime, i)),
        ..Default::default()
    }
}

/// (started, ready) of the container's newest instance: started once running and past
/// its startup probe (not before it first passed, as the kubelet's prober); ready once
/// started and past its readiness probe, or, as an `init` container, only once it
/// exited 0 and is not waiting again (running, it is not ready yet).
fn readiness(f: &Facts) -> (bool, bool) {
    let c = f.container;
    let latest = f.latest();
    let running = latest.is_some_and(|i| i.running());
    let passed = |v: Option<probe::Outcome>| v == Some(probe::Outcome::Success);
    let started = running && (c.startup_probe.is_none() || passed(f.verdicts.startup));
    let ready = if f.init {
        // An init container that exited 0 is ready (the kubelet's prober says so).
        latest.is_some_and(|i| i.exited() && i.status.exit_code == 0) && f.waiting.is_none()
    } else {
        started && (c.readiness_probe.is_none() || passed(f.verdicts.readiness))
    };
    (started, ready)
}

/// What the worker knows of the pod as a whole, for its status.
#[derive(Clone)]
pub(super) struct PodFacts<'a> {
    pub(super) pod: &'a Pod,
    /// Whether the pod's init containers are done (see the worker's `init_containers`).
    pub(super) initialized: bool,
    /// The phase the pod ended with, once it can no longer change.
    pub(super) finished: Option<&'a str>,
    /// The addresses of the pod's sandbox (its IP, and all of them), if it has one.
    pub(super) sandbox: Option<(&'a str, &'a [String])>,
    pub(super) node_ip: &'a str,
    pub(super) start_time: Option<Time>,
    /// The status reason and message of a pod the crustlet itself ended.
    pub(super) verdict: Option<&'a (String, String)>,
    /// The time of a condition whose status changes.
    pub(super) now: Time,
}

/// The pod's status from what the worker knows of it and the statuses of its init,
/// app and ephemeral containers (in the order of its spec).
pub(super) fn pod_status(
    p: &PodFacts,
    init_statuses: Vec<ContainerStatus>,
    statuses: Vec<ContainerStatus>,
    ephemeral: Vec<ContainerStatus>,
) -> PodStatus {
    let pod = p.pod;
    let spec = spec::spec(pod);
    let policy = spec
        .restart_policy
        .clone()
        .unwrap_or_else(|| "Always".into());
    let sidecars: Vec<&ContainerStatus> = spec
        .init_containers
        .iter()
        .flatten()
        .zip(&init_statuses)
        .filter(|(c, _)| is_sidecar(c))
        .map(|(_, s)| s)
        .collect();
    let phase = pod_phase(
        p.finished,
        &policy,
        p.initialized,
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
    let sandbox_ready = p.sandbox.is_some() && p.finished.is_none();
    let mut conditions = conditions(
        &old,
        &phase,
        p.initialized,
        sandbox_ready,
        &containers,
        gates,
        &p.now,
    );
    // A pod evicted for node pressure says so as the kubelet's (PodDisruptionConditions,
    // on in v1.28); one evicted for its local storage limits or refused at admission
    // does not.
    let pressure = |v: &&(String, String)| {
        v.0 == crate::eviction::REASON && v.1.starts_with(crate::eviction::PRESSURE)
    };
    if let Some((_, message)) = p.verdict.filter(pressure) {
        conditions.push(condition(
            &old,
            &p.now,
            "DisruptionTarget",
            true,
            Some("TerminationByKubelet"),
            Some(message.clone()),
        ));
    }
    let (pod_ip, pod_ips) = match p.sandbox {
        Some((ip, ips)) => (Some(ip.to_string()), ips.to_vec()),
        None => (
            old.pod_ip.clone(),
            old.pod_ips.iter().flatten().map(|p| p.ip.clone()).collect(),
        ),
    };
    PodStatus {
        phase: Some(phase),
        conditions: Some(conditions),
        host_ip: Some(p.node_ip.to_string()),
        host_ips: Some(vec![HostIP {
            ip: p.node_ip.to_string(),
        }]),
        pod_ip: pod_ip.filter(|i| !i.is_empty()),
        pod_ips: Some(
            pod_ips
                .into_iter()
                .filter(|i| !i.is_empty())
                .map(|ip| PodIP { ip })
                .collect(),
        ),
        start_time: p.start_time.clone(),
        qos_class: Some(spec::qos(pod)),
        init_container_statuses: if init_statuses.is_empty() {
            None
        } else {
            Some(init_statuses)
        },
        container_statuses: Some(statuses),
        ephemeral_container_statuses: (!ephemeral.is_empty()).then_some(ephemeral),
        reason: p.verdict.map(|v| v.0.clone()),
        message: p.verdict.map(|v| v.1.clone()),
        ..Default::default()
    }
}

/// The conditions as the kubelet words them: Initialized once every init container
/// exited 0, at once for a pod that has none (PodCompleted once the pod succeeded); ContainersReady and Ready false
/// with PodFailed or PodCompleted once the pod is done, else with the names of the
/// containers not ready; Ready also false while one of the pod's readiness `gates`
/// is not True in `old`'s conditions (set by others, and left as they are). A
/// condition keeps its transition time while its status stays, and the
/// scheduler's condition stays as it set it.
fn conditions(
    old: &PodStatus,
    phase: &str,
    initialized: bool,
    sandbox_ready: bool,
    containers: &Containers,
    gates: &[PodReadinessGate],
    now: &Time,
) -> Vec<PodCondition> {
    // Sidecars count for readiness like app containers.
    let all_ready =
        containers.app.iter().all(|s| s.ready) && containers.sidecars.iter().all(|s| s.ready);
    let incomplete = containers.incomplete_init();
    let init_ok = containers.init.is_empty()
        || (initialized && incomplete.is_empty())
        || phase == "Succeeded";
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
        condition(
            old,
            now,
            "PodReadyToStartContainers",
            sandbox_ready,
            None,
            None,
        ),
        if init_ok {
            let done = phase == "Succeeded";
            condition(
                old,
                now,
                "Initialized",
                true,
                done.then_some("PodCompleted"),
                None,
            )
        } else {
            condition(
                old,
                now,
                "Initialized",
                false,
                Some("ContainersNotInitialized"),
                Some(format!("containers with incomplete status: [{incomplete}]")),
            )
        },
        condition(
            old,
            now,
            "Ready",
            pod_ready,
            pod_ready_reason,
            pod_ready_message,
        ),
        condition(
            old,
            now,
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

#[cfg(test)]
mod tests {
    use super::*;
    use cri_api as cri;
    use k8s_openapi::api::core::v1::Probe;
    use k8s_openapi::jiff::Timestamp;
    use serde_json::json;

    fn pod(v: serde_json::Value) -> Pod {
        serde_json::from_value(v).unwrap()
    }

    fn at(s: i64) -> Time {
        Time(Timestamp::from_second(s).unwrap())
    }

    // Container statuses as the worker makes them, for the phase and the conditions.

    fn status(name: &str, state: ContainerState, ready: bool, started: bool) -> ContainerStatus {
        ContainerStatus {
            name: name.into(),
            state: Some(state),
            ready,
            started: Some(started),
            ..Default::default()
        }
    }

    fn ended(code: i32) -> ContainerState {
        ContainerState {
            terminated: Some(ContainerStateTerminated {
                exit_code: code,
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    fn held(reason: &str) -> ContainerState {
        ContainerState {
            waiting: Some(ContainerStateWaiting {
                reason: Some(reason.into()),
                message: None,
            }),
            ..Default::default()
        }
    }

    /// Running, started and ready.
    fn ready(name: &str) -> ContainerStatus {
        let state = ContainerState {
            running: Some(ContainerStateRunning { started_at: None }),
            ..Default::default()
        };
        status(name, state, true, true)
    }

    /// Running and started, not (yet) ready.
    fn unready(name: &str) -> ContainerStatus {
        ContainerStatus {
            ready: false,
            ..ready(name)
        }
    }

    /// Running, its startup probe not yet passed.
    fn starting(name: &str) -> ContainerStatus {
        ContainerStatus {
            ready: false,
            started: Some(false),
            ..ready(name)
        }
    }

    /// Exited with `code`, and shown so (no restart pending); an init container that
    /// exited 0 is ready.
    fn exited(name: &str, code: i32) -> ContainerStatus {
        status(name, ended(code), false, false)
    }

    fn init_done(name: &str) -> ContainerStatus {
        status(name, ended(0), true, false)
    }

    /// Never started: waiting for its image, sandbox or turn.
    fn waiting(name: &str) -> ContainerStatus {
        status(name, held("ContainerCreating"), false, false)
    }

    /// Exited with `code`, waiting in back-off to be started again.
    fn crashed(name: &str, code: i32) -> ContainerStatus {
        ContainerStatus {
            last_state: Some(ended(code)),
            ..status(name, held("CrashLoopBackOff"), false, false)
        }
    }

    /// A status with no state at all.
    fn unknown(name: &str) -> ContainerStatus {
        ContainerStatus {
            name: name.into(),
            ..Default::default()
        }
    }

    /// The kubelet's `getPhase` (v1.28) for the cases the worker meets: the pod's
    /// restart policy, its init containers (regular and sidecar, by the flag), whether
    /// the worker found it initialized, and its app containers.
    #[test]
    fn phase_as_the_kubelet_gets_it() {
        type Init = Vec<(ContainerStatus, bool)>;
        #[rustfmt::skip]
        type Case<'a> = (&'a str, &'a str, bool, Init, Vec<ContainerStatus>, &'a str);
        let cases: Vec<Case> = vec![
            // Init containers.
            (
                "init pending",
                "Always",
                false,
                vec![(waiting("i"), false)],
                vec![waiting("a")],
                "Pending",
            ),
            (
                "init running",
                "Always",
                false,
                vec![(unready("i"), false)],
                vec![waiting("a")],
                "Pending",
            ),
            (
                "second init pending",
                "Never",
                false,
                vec![(init_done("i1"), false), (waiting("i2"), false)],
                vec![waiting("a")],
                "Pending",
            ),
            (
                "init failed, Never",
                "Never",
                false,
                vec![(exited("i", 1), false)],
                vec![waiting("a")],
                "Failed",
            ),
            (
                "init failed, OnFailure",
                "OnFailure",
                false,
                vec![(exited("i", 1), false)],
                vec![waiting("a")],
                "Pending",
            ),
            (
                "init failed, Always",
                "Always",
                false,
                vec![(crashed("i", 1), false)],
                vec![waiting("a")],
                "Pending",
            ),
            (
                "sidecar failed, Never",
                "Never",
                false,
                vec![(exited("s", 1), true)],
                vec![waiting("a")],
                "Pending",
            ),
            (
                "sidecar not started",
                "Never",
                false,
                vec![(starting("s"), true)],
                vec![waiting("a")],
                "Pending",
            ),
            (
                "init done, app starting",
                "Never",
                true,
                vec![(init_done("i"), false)],
                vec![waiting("a")],
                "Pending",
            ),
            (
                "sidecar and app running",
                "Never",
                true,
                vec![(ready("s"), true)],
                vec![ready("a")],
                "Running",
            ),
            // Always.
            (
                "Always, running",
                "Always",
                true,
                vec![],
                vec![ready("a"), unready("b")],
                "Running",
            ),
            (
                "Always, one still waiting",
                "Always",
                true,
                vec![],
                vec![ready("a"), waiting("b")],
                "Pending",
            ),
            (
                "Always, all succeeded",
                "Always",
                true,
                vec![],
                vec![exited("a", 0), exited("b", 0)],
                "Running",
            ),
            (
                "Always, one failed",
                "Always",
                true,
                vec![],
                vec![exited("a", 0), exited("b", 2)],
                "Running",
            ),
            (
                "Always, crash loop",
                "Always",
                true,
                vec![],
                vec![crashed("a", 1)],
                "Running",
            ),
            // OnFailure.
            (
                "OnFailure, all succeeded",
                "OnFailure",
                true,
                vec![],
                vec![exited("a", 0), exited("b", 0)],
                "Succeeded",
            ),
            (
                "OnFailure, one failed",
                "OnFailure",
                true,
                vec![],
                vec![exited("a", 0), exited("b", 1)],
                "Running",
            ),
            (
                "OnFailure, restarting",
                "OnFailure",
                true,
                vec![],
                vec![exited("a", 0), crashed("b", 1)],
                "Running",
            ),
            (
                "OnFailure, one running",
                "OnFailure",
                true,
                vec![],
                vec![exited("a", 0), ready("b")],
                "Running",
            ),
            // Never.
            (
                "Never, all succeeded",
                "Never",
                true,
                vec![],
                vec![exited("a", 0), exited("b", 0)],
                "Succeeded",
            ),
            (
                "Never, some failed",
                "Never",
                true,
                vec![],
                vec![exited("a", 0), exited("b", 137)],
                "Failed",
            ),
            (
                "Never, one still running",
                "Never",
                true,
                vec![],
                vec![exited("a", 1), ready("b")],
                "Running",
            ),
            (
                "Never, one still waiting",
                "Never",
                true,
                vec![],
                vec![exited("a", 1), waiting("b")],
                "Pending",
            ),
            // A status with no state counts as one not started: Pending, as the
            // kubelet's unknown.
            (
                "unknown",
                "Always",
                true,
                vec![],
                vec![unknown("a")],
                "Pending",
            ),
            (
                "unknown beside running",
                "Always",
                true,
                vec![],
                vec![ready("a"), unknown("b")],
                "Pending",
            ),
            (
                "unknown beside exited",
                "Never",
                true,
                vec![],
                vec![exited("a", 0), unknown("b")],
                "Pending",
            ),
            ("no statuses", "Always", true, vec![], vec![], "Pending"),
        ];
        for (what, policy, initialized, init, app, want) in cases {
            let init_statuses: Vec<ContainerStatus> = init.iter().map(|(s, _)| s.clone()).collect();
            let sidecars: Vec<&ContainerStatus> = init
                .iter()
                .zip(&init_statuses)
                .filter(|((_, sidecar), _)| *sidecar)
                .map(|(_, s)| s)
                .collect();
            let got = pod_phase(None, policy, initialized, &init_statuses, &sidecars, &app);
            assert_eq!(got, want, "{what}");
        }
    }

    /// Once the pod finished (or was refused, or ran past its deadline) its phase stays.
    #[test]
    fn a_finished_phase_stays() {
        for f in ["Succeeded", "Failed"] {
            let got = pod_phase(Some(f), "Always", true, &[], &[], &[ready("a")]);
            assert_eq!(got, f);
        }
    }

    type Want<'a> = (&'a str, Option<&'a str>, Option<&'a str>);

    /// Initialized, Ready and ContainersReady as the kubelet's `status/generate.go`
    /// words them.
    #[test]
    fn conditions_as_the_kubelet_generates_them() {
        struct Case<'a> {
            what: &'a str,
            phase: &'a str,
            initialized: bool,
            init: Vec<(ContainerStatus, bool)>,
            app: Vec<ContainerStatus>,
            initialized_c: Want<'a>,
            ready_c: Want<'a>,
            containers_ready_c: Want<'a>,
        }
        const TRUE: Want = ("True", None, None);
        let not_ready = |m: &'static str| ("False", Some("ContainersNotReady"), Some(m));
        let not_init = |m: &'static str| ("False", Some("ContainersNotInitialized"), Some(m));
        let cases = vec![
            Case {
                what: "all ready",
                phase: "Running",
                initialized: true,
                init: vec![(init_done("i"), false)],
                app: vec![ready("a"), ready("b")],
                initialized_c: TRUE,
                ready_c: TRUE,
                containers_ready_c: TRUE,
            },
            Case {
                what: "one not ready",
                phase: "Running",
                initialized: true,
                init: vec![],
                app: vec![ready("a"), unready("b"), starting("c")],
                initialized_c: TRUE,
                ready_c: not_ready("containers with unready status: [b c]"),
                containers_ready_c: not_ready("containers with unready status: [b c]"),
            },
            Case {
                what: "init container running",
                phase: "Pending",
                initialized: false,
                init: vec![(init_done("i1"), false), (unready("i2"), false)],
                app: vec![waiting("a")],
                initialized_c: not_init("containers with incomplete status: [i2]"),
                ready_c: not_ready("containers with unready status: [a]"),
                containers_ready_c: not_ready("containers with unready status: [a]"),
            },
            Case {
                what: "init containers pending",
                phase: "Pending",
                initialized: false,
                init: vec![(waiting("i1"), false), (waiting("i2"), false)],
                app: vec![waiting("a")],
                initialized_c: not_init("containers with incomplete status: [i1 i2]"),
                ready_c: not_ready("containers with unready status: [a]"),
                containers_ready_c: not_ready("containers with unready status: [a]"),
            },
            Case {
                what: "init container failed, restarting",
                phase: "Pending",
                initialized: false,
                init: vec![(crashed("i", 1), false)],
                app: vec![waiting("a")],
                initialized_c: not_init("containers with incomplete status: [i]"),
                ready_c: not_ready("containers with unready status: [a]"),
                containers_ready_c: not_ready("containers with unready status: [a]"),
            },
            Case {
                what: "init container failed, never restarted",
                phase: "Failed",
                initialized: false,
                init: vec![(exited("i", 1), false)],
                app: vec![waiting("a")],
                initialized_c: not_init("containers with incomplete status: [i]"),
                ready_c: ("False", Some("PodFailed"), None),
                containers_ready_c: ("False", Some("PodFailed"), None),
            },
            Case {
                what: "sidecar not yet started",
                phase: "Pending",
                initialized: false,
                init: vec![(starting("s"), true)],
                app: vec![waiting("a")],
                initialized_c: not_init("containers with incomplete status: [s]"),
                ready_c: not_ready("containers with unready status: [s a]"),
                containers_ready_c: not_ready("containers with unready status: [s a]"),
            },
            Case {
                what: "sidecar started, not ready",
                phase: "Running",
                initialized: true,
                init: vec![(init_done("i"), false), (unready("s"), true)],
                app: vec![ready("a")],
                initialized_c: TRUE,
                ready_c: not_ready("containers with unready status: [s]"),
                containers_ready_c: not_ready("containers with unready status: [s]"),
            },
            Case {
                what: "all succeeded",
                phase: "Succeeded",
                initialized: true,
                init: vec![(init_done("i"), false)],
                app: vec![exited("a", 0)],
                initialized_c: ("True", Some("PodCompleted"), None),
                ready_c: ("False", Some("PodCompleted"), None),
                containers_ready_c: ("False", Some("PodCompleted"), None),
            },
            Case {
                what: "some failed",
                phase: "Failed",
                initialized: true,
                init: vec![],
                app: vec![exited("a", 0), exited("b", 1)],
                initialized_c: TRUE,
                ready_c: ("False", Some("PodFailed"), None),
                containers_ready_c: ("False", Some("PodFailed"), None),
            },
            Case {
                what: "failed with one still running",
                phase: "Failed",
                initialized: true,
                init: vec![],
                app: vec![ready("a")],
                initialized_c: TRUE,
                ready_c: ("False", Some("PodFailed"), None),
                containers_ready_c: ("False", Some("PodFailed"), None),
            },
            Case {
                what: "crash loop",
                phase: "Running",
                initialized: true,
                init: vec![],
                app: vec![crashed("a", 1)],
                initialized_c: TRUE,
                ready_c: not_ready("containers with unready status: [a]"),
                containers_ready_c: not_ready("containers with unready status: [a]"),
            },
        ];
        for c in cases {
            let init: Vec<ContainerStatus> = c.init.iter().map(|(s, _)| s.clone()).collect();
            let sidecars: Vec<&ContainerStatus> = c
                .init
                .iter()
                .zip(&init)
                .filter(|((_, sidecar), _)| *sidecar)
                .map(|(_, s)| s)
                .collect();
            let containers = Containers {
                init: &init,
                sidecars: &sidecars,
                app: &c.app,
            };
            let got = conditions(
                &PodStatus::default(),
                c.phase,
                c.initialized,
                true,
                &containers,
                &[],
                &at(1),
            );
            let find = |t: &str| {
                let x = got.iter().find(|x| x.type_ == t).expect(t);
                (x.status.as_str(), x.reason.as_deref(), x.message.as_deref())
            };
            assert_eq!(
                find("Initialized"),
                c.initialized_c,
                "{}: Initialized",
                c.what
            );
            assert_eq!(find("Ready"), c.ready_c, "{}: Ready", c.what);
            assert_eq!(
                find("ContainersReady"),
                c.containers_ready_c,
                "{}: ContainersReady",
                c.what
            );
        }
    }

    /// A pod without init containers is initialized even before it has a sandbox (one
    /// that cannot be made yet: its volumes, its sandbox failed), as with the kubelet.
    #[test]
    fn no_sandbox_yet_without_init_containers() {
        let app = [waiting("a")];
        let containers = Containers {
            init: &[],
            sidecars: &[],
            app: &app,
        };
        let got = conditions(
            &PodStatus::default(),
            "Pending",
            false,
            false,
            &containers,
            &[],
            &at(1),
        );
        let init = got.iter().find(|c| c.type_ == "Initialized").unwrap();
        assert_eq!(init.status, "True");
        assert_eq!((init.reason.as_ref(), init.message.as_ref()), (None, None));
        let ready = got.iter().find(|c| c.type_ == "Ready").unwrap();
        assert_eq!(
            ready.message.as_deref(),
            Some("containers with unready status: [a]")
        );
    }

    /// Readiness gates hold Ready back (not ContainersReady) until others set their
    /// conditions True.
    #[test]
    fn readiness_gates_hold_ready_back() {
        let gates: Vec<PodReadinessGate> = ["example.com/lb", "example.com/dns"]
            .iter()
            .map(|t| PodReadinessGate {
                condition_type: t.to_string(),
            })
            .collect();
        let old_with = |conds: &[(&str, &str)]| PodStatus {
            conditions: Some(
                conds
                    .iter()
                    .map(|(t, s)| PodCondition {
                        type_: t.to_string(),
                        status: s.to_string(),
                        ..Default::default()
                    })
                    .collect(),
            ),
            ..Default::default()
        };
        let app = [ready("a")];
        let containers = Containers {
            init: &[],
            sidecars: &[],
            app: &app,
        };
        let cases: Vec<(&[(&str, &str)], Want)> = vec![
            (
                &[],
                (
                    "False",
                    Some("ReadinessGatesNotReady"),
                    Some(
                        "corresponding condition of pod readiness gate \"example.com/lb\" does \
                         not exist., corresponding condition of pod readiness gate \
                         \"example.com/dns\" does not exist.",
                    ),
                ),
            ),
            (
                &[("example.com/lb", "True"), ("example.com/dns", "False")],
                (
                    "False",
                    Some("ReadinessGatesNotReady"),
                    Some(
                        "the status of pod readiness gate \"example.com/dns\" is not \"True\", \
                         but False",
                    ),
                ),
            ),
            (
                &[("example.com/lb", "True"), ("example.com/dns", "True")],
                ("True", None, None),
            ),
        ];
        for (conds, want) in cases {
            let got = conditions(
                &old_with(conds),
                "Running",
                true,
                true,
                &containers,
                &gates,
                &at(1),
            );
            let find = |t: &str| {
                let x = got.iter().find(|x| x.type_ == t).unwrap();
                (x.status.as_str(), x.reason.as_deref(), x.message.as_deref())
            };
            assert_eq!(find("Ready"), want, "{conds:?}");
            assert_eq!(find("ContainersReady"), ("True", None, None), "{conds:?}");
            // The gates' own conditions are others': not in what the worker sends.
            assert!(!got.iter().any(|c| c.type_.starts_with("example.com/")));
        }
        // Not looked at while the containers are not ready.
        let app = [unready("a")];
        let containers = Containers {
            init: &[],
            sidecars: &[],
            app: &app,
        };
        let got = conditions(
            &PodStatus::default(),
            "Running",
            true,
            true,
            &containers,
            &gates,
            &at(1),
        );
        let r = got.iter().find(|c| c.type_ == "Ready").unwrap();
        assert_eq!(r.reason.as_deref(), Some("ContainersNotReady"));
    }

    /// The order of the conditions; PodReadyToStartContainers while the pod has a live
    /// sandbox; a transition time kept while a status stays; PodScheduled as the
    /// scheduler set it, and none where it set none (a static pod).
    #[test]
    fn transitions_sandbox_and_scheduled() {
        let app = [ready("a")];
        let containers = Containers {
            init: &[],
            sidecars: &[],
            app: &app,
        };
        let scheduled = PodCondition {
            type_: "PodScheduled".into(),
            status: "True".into(),
            last_transition_time: Some(at(5)),
            ..Default::default()
        };
        let old = PodStatus {
            conditions: Some(vec![
                PodCondition {
                    type_: "Ready".into(),
                    status: "False".into(),
                    last_transition_time: Some(at(10)),
                    ..Default::default()
                },
                PodCondition {
                    type_: "Initialized".into(),
                    status: "True".into(),
                    last_transition_time: Some(at(10)),
                    ..Default::default()
                },
                scheduled.clone(),
            ]),
            ..Default::default()
        };
        let got = conditions(&old, "Running", true, true, &containers, &[], &at(20));
        let types: Vec<&str> = got.iter().map(|c| c.type_.as_str()).collect();
        assert_eq!(
            types,
            [
                "PodReadyToStartContainers",
                "Initialized",
                "Ready",
                "ContainersReady",
                "PodScheduled"
            ]
        );
        let time = |t: &str| {
            got.iter()
                .find(|c| c.type_ == t)
                .unwrap()
                .last_transition_time
                .clone()
        };
        assert_eq!(time("Initialized"), Some(at(10)), "status kept: time kept");
        assert_eq!(time("Ready"), Some(at(20)), "status changed: now");
        assert_eq!(time("ContainersReady"), Some(at(20)), "new: now");
        assert_eq!(got[4], scheduled);
        assert_eq!(got[0].status, "True");

        let got = conditions(
            &PodStatus::default(),
            "Running",
            true,
            false,
            &containers,
            &[],
            &at(20),
        );
        assert_eq!(got.len(), 4, "no PodScheduled where the scheduler set none");
        assert_eq!(got[0].type_, "PodReadyToStartContainers");
        assert_eq!(got[0].status, "False");
    }

    // Container instances as the runtime reports them, for the container statuses.

    fn instance(id: &str, attempt: u32, state: cri::ContainerState, exit_code: i32) -> Instance {
        Instance {
            id: id.into(),
            attempt,
            state: state as i32,
            status: cri::ContainerStatus {
                id: id.into(),
                state: state as i32,
                exit_code,
                started_at: 1_000_000_000_000,
                finished_at: if state == cri::ContainerState::ContainerExited {
                    2_000_000_000_000
                } else {
                    0
                },
                image_ref: "sha256:abc".into(),
                ..Default::default()
            },
        }
    }

    fn run(id: &str, attempt: u32) -> Instance {
        instance(id, attempt, cri::ContainerState::ContainerRunning, 0)
    }

    fn exit(id: &str, attempt: u32, code: i32) -> Instance {
        instance(id, attempt, cri::ContainerState::ContainerExited, code)
    }

    fn container(v: serde_json::Value) -> Container {
        serde_json::from_value(v).unwrap()
    }

    fn facts<'a>(c: &'a Container, instances: &'a [Instance]) -> Facts<'a> {
        Facts {
            container: c,
            instances,
            carried: None,
            waiting: None,
            verdicts: Verdicts::default(),
            init: false,
            messages: HashMap::new(),
        }
    }

    fn plain_pod() -> Pod {
        pod(json!({"metadata": {"name": "p"}, "spec": {"containers": [{"name": "a"}]}}))
    }

    fn terminated_of(s: &Option<ContainerState>) -> &ContainerStateTerminated {
        s.as_ref().unwrap().terminated.as_ref().unwrap()
    }

    /// A container with no instance waits, for the worker's reason or the kubelet's
    /// default one (PodInitializing in a pod with init containers).
    #[test]
    fn waiting_reasons() {
        let c = container(json!({"name": "a", "image": "busybox"}));
        let with_init = pod(json!({"metadata": {"name": "p"}, "spec": {
            "initContainers": [{"name": "i"}], "containers": [{"name": "a"}]}}));
        let pull = (
            "ErrImagePull".to_string(),
            "Failed to pull image".to_string(),
        );
        let config = ("CreateContainerConfigError".to_string(), String::new());
        let plain = plain_pod();
        type Case<'a> = (
            &'a Pod,
            Option<&'a (String, String)>,
            &'a str,
            Option<&'a str>,
        );
        let cases: Vec<Case> = vec![
            (&plain, None, "ContainerCreating", None),
            (&with_init, None, "PodInitializing", None),
            (
                &with_init,
                Some(&pull),
                "ErrImagePull",
                Some("Failed to pull image"),
            ),
            (&plain, Some(&config), "CreateContainerConfigError", None),
        ];
        for (p, waiting, reason, message) in cases {
            let f = Facts {
                waiting,
                ..facts(&c, &[])
            };
            let s = container_status(p, &f, "crust");
            let w = s.state.as_ref().unwrap().waiting.as_ref().unwrap();
            assert_eq!(w.reason.as_deref(), Some(reason));
            assert_eq!(w.message.as_deref(), message);
            assert_eq!(s.name, "a");
            assert_eq!(s.image, "busybox");
            assert_eq!(s.image_id, "");
            assert_eq!(s.container_id, None);
            assert_eq!(s.restart_count, 0);
            assert_eq!((s.started, s.ready), (Some(false), false));
            assert!(s.last_state.is_none());
        }
    }

    /// The state of the newest instance, the last state of the one before it (or of
    /// the newest itself, in back-off), a restart count from the attempts.
    #[test]
    fn states_last_states_and_restarts() {
        let c = container(json!({"name": "a", "image": "busybox"}));
        let p = plain_pod();

        // Running again after a failure.
        let v = [run("new", 3), exit("old", 2, 1)];
        let s = container_status(&p, &facts(&c, &v), "crust");
        let st = s.state.as_ref().unwrap();
        assert_eq!(
            st.running.as_ref().unwrap().started_at,
            Some(Time(Timestamp::from_second(1000).unwrap()))
        );
        let last = terminated_of(&s.last_state);
        assert_eq!(last.exit_code, 1);
        assert_eq!(last.reason.as_deref(), Some("Error"));
        assert_eq!(last.container_id.as_deref(), Some("crust://old"));
        assert_eq!(last.finished_at, Some(at(2000)));
        assert_eq!(s.container_id.as_deref(), Some("crust://new"));
        assert_eq!(s.image_id, "sha256:abc");
        assert_eq!(s.restart_count, 3);

        // Exited, nothing pending: terminated; its predecessor is the last state.
        let v = [exit("new", 1, 0), exit("old", 0, 2)];
        let s = container_status(&p, &facts(&c, &v), "crust");
        let t = terminated_of(&s.state);
        assert_eq!((t.exit_code, t.reason.as_deref()), (0, Some("Completed")));
        assert_eq!(terminated_of(&s.last_state).exit_code, 2);

        // In back-off: waiting, and the newest is the last state.
        let back_off = ("CrashLoopBackOff".to_string(), "back-off 10s".to_string());
        let f = Facts {
            waiting: Some(&back_off),
            ..facts(&c, &v)
        };
        let s = container_status(&p, &f, "crust");
        let w = s.state.as_ref().unwrap().waiting.as_ref().unwrap();
        assert_eq!(w.reason.as_deref(), Some("CrashLoopBackOff"));
        assert_eq!(w.message.as_deref(), Some("back-off 10s"));
        let last = terminated_of(&s.last_state);
        assert_eq!(last.container_id.as_deref(), Some("crust://new"));
        assert_eq!(s.restart_count, 1);

        // Made again in a new sandbox: the one carried over is the last state until
        // there are two here.
        let carried = exit("gone", 4, 137);
        let v = [run("first", 5)];
        let f = Facts {
            carried: Some(&carried),
            ..facts(&c, &v)
        };
        let s = container_status(&p, &f, "crust");
        assert_eq!(terminated_of(&s.last_state).exit_code, 137);
        assert_eq!(s.restart_count, 5);
        let v = [run("second", 6), exit("first", 5, 1)];
        let f = Facts {
            carried: Some(&carried),
            ..facts(&c, &v)
        };
        let s = container_status(&p, &f, "crust");
        assert_eq!(terminated_of(&s.last_state).exit_code, 1);

        // Made, never started: waiting, no last state.
        let v = [instance(
            "made",
            0,
            cri::ContainerState::ContainerCreated,
            0,
        )];
        let s = container_status(&p, &facts(&c, &v), "crust");
        assert!(s.state.as_ref().unwrap().waiting.is_some());
        assert!(s.last_state.is_none());
        assert_eq!(s.container_id.as_deref(), Some("crust://made"));
    }

    /// Which exited instances the worker reads the termination messages of.
    #[test]
    fn shown_exits() {
        let c = container(json!({"name": "a"}));
        let back_off = ("CrashLoopBackOff".to_string(), String::new());
        let ids = |f: &Facts| {
            let (now, last) = f.shown_exits();
            (now.map(|i| i.id.clone()), last.map(|i| i.id.clone()))
        };
        let v = [exit("b", 1, 1), exit("a", 0, 1)];
        assert_eq!(ids(&facts(&c, &v)), (Some("b".into()), Some("a".into())));
        let f = Facts {
            waiting: Some(&back_off),
            ..facts(&c, &v)
        };
        assert_eq!(ids(&f), (None, Some("b".into())));
        let v = [run("b", 1), run("a", 0)];
        assert_eq!(ids(&facts(&c, &v)), (None, None));
        assert_eq!(ids(&facts(&c, &[])), (None, None));
    }

    /// A terminated state's reason and message: the runtime's reason (Completed or
    /// Error when it gives none), its message and then what the container wrote.
    #[test]
    fn termination_reasons_and_messages() {
        let c = container(json!({"name": "a"}));
        let p = plain_pod();
        let long = "x".repeat(5000);
        // Exit code, the runtime's reason and message, what the container wrote; the
        // reason and message shown.
        type Case<'a> = (
            i32,
            &'a str,
            &'a str,
            &'a str,
            Option<&'a str>,
            Option<String>,
        );
        let cases: Vec<Case> = vec![
            (0, "", "", "", Some("Completed"), None),
            (1, "", "", "", Some("Error"), None),
            (137, "OOMKilled", "", "", Some("OOMKilled"), None),
            (
                1,
                "",
                "",
                "it broke",
                Some("Error"),
                Some("it broke".into()),
            ),
            (
                1,
                "Error",
                "runtime says",
                "",
                Some("Error"),
                Some("runtime says".into()),
            ),
            (
                1,
                "Error",
                "runtime says",
                "it broke",
                Some("Error"),
                Some("runtime says: it broke".into()),
            ),
            (1, "", "", &long, Some("Error"), Some("x".repeat(4096))),
        ];
        for (code, reason, message, own, want_reason, want_message) in cases {
            let mut i = exit("a1", 0, code);
            i.status.reason = reason.into();
            i.status.message = message.into();
            let v = [i];
            let mut f = facts(&c, &v);
            if !own.is_empty() {
                f.messages.insert("a1".into(), own.into());
            }
            let s = container_status(&p, &f, "crust");
            let t = terminated_of(&s.state);
            assert_eq!(t.exit_code, code);
            assert_eq!(t.reason.as_deref(), want_reason, "{reason:?}");
            assert_eq!(t.message, want_message, "{message:?} {own:?}");
            assert_eq!(t.started_at, Some(at(1000)));
        }
    }

    /// Started and ready from the state of the newest instance and its probes'
    /// verdicts, as the kubelet's prober manager sets them.
    #[test]
    fn started_and_ready() {
        let ok = Some(probe::Outcome::Success);
        let bad = Some(probe::Outcome::Failure);
        let plain = container(json!({"name": "a"}));
        let probed = Container {
            readiness_probe: Some(Probe::default()),
            ..plain.clone()
        };
        let slow = Container {
            startup_probe: Some(Probe::default()),
            ..plain.clone()
        };
        let both = Container {
            startup_probe: Some(Probe::default()),
            readiness_probe: Some(Probe::default()),
            ..plain.clone()
        };
        let v = |s| Verdicts {
            startup: s,
            readiness: None,
        };
        let r = |r| Verdicts {
            startup: None,
            readiness: r,
        };
        let back_off = ("CrashLoopBackOff".to_string(), String::new());
        type Case<'a> = (
            &'a str,
            &'a Container,
            Vec<Instance>,
            Verdicts,
            bool,
            Option<&'a (String, String)>,
            (bool, bool),
        );
        #[rustfmt::skip]
        let cases: Vec<Case> = vec![
            ("no instance", &plain, vec![], Verdicts::default(), false, None, (false, false)),
            ("running, no probes", &plain, vec![run("a", 0)], Verdicts::default(), false, None, (true, true)),
            ("exited", &plain, vec![exit("a", 0, 0)], Verdicts::default(), false, None, (false, false)),
            ("readiness, no verdict", &probed, vec![run("a", 0)], r(None), false, None, (true, false)),
            ("readiness passed", &probed, vec![run("a", 0)], r(ok), false, None, (true, true)),
            ("readiness failed", &probed, vec![run("a", 0)], r(bad), false, None, (true, false)),
            // Just started, the probe not yet run: not started until it passed.
            ("startup, no verdict", &slow, vec![run("a", 0)], v(None), false, None, (false, false)),
            ("startup failed", &slow, vec![run("a", 0)], v(bad), false, None, (false, false)),
            ("startup passed", &slow, vec![run("a", 0)], v(ok), false, None, (true, true)),
            ("startup passed, readiness not yet", &both, vec![run("a", 0)],
                Verdicts { startup: ok, readiness: None }, false, None, (true, false)),
            ("startup and readiness passed", &both, vec![run("a", 0)],
                Verdicts { startup: ok, readiness: ok }, false, None, (true, true)),
            ("init exited 0", &plain, vec![exit("a", 0, 0)], Verdicts::default(), true, None, (false, true)),
            ("init exited 1", &plain, vec![exit("a", 0, 1)], Verdicts::default(), true, None, (false, false)),
            ("init running", &plain, vec![run("a", 0)], Verdicts::default(), true, None, (true, false)),
            ("init exited 0, held back", &plain, vec![exit("a", 0, 0)], Verdicts::default(), true,
                Some(&back_off), (false, false)),
        ];
        for (what, c, instances, verdicts, init, waiting, want) in cases {
            let f = Facts {
                verdicts,
                init,
                waiting,
                ..facts(c, &instances)
            };
            assert_eq!(readiness(&f), want, "{what}");
            let s = container_status(&plain_pod(), &f, "crust");
            assert_eq!((s.started, s.ready), (Some(want.0), want.1), "{what}");
        }
    }

    /// The pod's status around its phase and conditions: addresses (the sandbox's, else
    /// the ones it had), the node's, the verdict of a pod the crustlet ended, and the
    /// lists of container statuses.
    #[test]
    fn pod_status_fields() {
        let p = pod(json!({
            "metadata": {"name": "p"},
            "spec": {"containers": [{"name": "a"}]},
            "status": {"podIP": "10.0.0.9", "podIPs": [{"ip": "10.0.0.9"}, {"ip": "fd00::9"}]}
        }));
        let ips = vec!["10.0.0.5".to_string(), "fd00::5".to_string()];
        let verdict = (
            "DeadlineExceeded".to_string(),
            "Pod was active on the node longer than the specified deadline".to_string(),
        );
        let with_sandbox = PodFacts {
            pod: &p,
            initialized: true,
            finished: None,
            sandbox: Some(("10.0.0.5", &ips)),
            node_ip: "192.168.1.2",
            start_time: Some(at(100)),
            verdict: None,
            now: at(200),
        };
        let st = pod_status(&with_sandbox, vec![], vec![ready("a")], vec![]);
        assert_eq!(st.phase.as_deref(), Some("Running"));
        assert_eq!(st.pod_ip.as_deref(), Some("10.0.0.5"));
        let got: Vec<&str> = st.pod_ips.iter().flatten().map(|i| i.ip.as_str()).collect();
        assert_eq!(got, ["10.0.0.5", "fd00::5"]);
        assert_eq!(st.host_ip.as_deref(), Some("192.168.1.2"));
        assert_eq!(st.host_ips.as_ref().unwrap()[0].ip, "192.168.1.2");
        assert_eq!(st.start_time, Some(at(100)));
        assert_eq!(st.qos_class.as_deref(), Some("BestEffort"));
        assert_eq!(st.init_container_statuses, None);
        assert_eq!(st.ephemeral_container_statuses, None);
        assert_eq!(st.container_statuses.as_ref().unwrap().len(), 1);
        assert_eq!((st.reason.as_ref(), st.message.as_ref()), (None, None));

        let ended = PodFacts {
            sandbox: None,
            finished: Some("Failed"),
            verdict: Some(&verdict),
            ..with_sandbox
        };
        let st = pod_status(
            &ended,
            vec![init_done("i")],
            vec![ready("a")],
            vec![waiting("d")],
        );
        assert_eq!(st.phase.as_deref(), Some("Failed"));
        assert_eq!(st.pod_ip.as_deref(), Some("10.0.0.9"));
        let got: Vec<&str> = st.pod_ips.iter().flatten().map(|i| i.ip.as_str()).collect();
        assert_eq!(got, ["10.0.0.9", "fd00::9"]);
        assert_eq!(st.reason.as_deref(), Some("DeadlineExceeded"));
        assert_eq!(st.message, Some(verdict.1.clone()));
        assert_eq!(st.init_container_statuses.as_ref().unwrap().len(), 1);
        assert_eq!(st.ephemeral_container_statuses.as_ref().unwrap().len(), 1);
        let to_start = st
            .conditions
            .iter()
            .flatten()
            .find(|c| c.type_ == "PodReadyToStartContainers")
            .unwrap();
        assert_eq!(to_start.status, "False");
        // Only an evicted pod says it was disrupted, as the kubelet's does.
        let disruption = |st: &PodStatus| {
            st.conditions
                .iter()
                .flatten()
                .find(|c| c.type_ == "DisruptionTarget")
                .map(|c| (c.status.clone(), c.reason.clone(), c.message.clone()))
        };
        assert_eq!(disruption(&st), None);
        let evicted = (
            crate::eviction::REASON.to_string(),
            "The node was low on resource: memory. ".to_string(),
        );
        let st = pod_status(
            &PodFacts {
                verdict: Some(&evicted),
                ..ended.clone()
            },
            vec![],
            vec![ready("a")],
            vec![],
        );
        assert_eq!(st.reason.as_deref(), Some("Evicted"));
        assert_eq!(
            disruption(&st),
            Some((
                "True".to_string(),
                Some("TerminationByKubelet".to_string()),
                Some(evicted.1.clone())
            ))
        );
        // Evicted for a local storage limit, or refused at admission under pressure:
        // Failed and Evicted, but no condition (the kubelet's evictPod without one).
        for message in [
            "Pod ephemeral local storage usage exceeds the total limit of containers 5Mi. ",
            "The node had condition: [DiskPressure]. ",
        ] {
            let v = (crate::eviction::REASON.to_string(), message.to_string());
            let facts = PodFacts {
                verdict: Some(&v),
                ..ended.clone()
            };
            let st = pod_status(&facts, vec![], vec![ready("a")], vec![]);
            assert_eq!(st.reason.as_deref(), Some("Evicted"));
            assert_eq!(disruption(&st), None, "{message}");
        }
    }
}
