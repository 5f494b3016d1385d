//! The pod's status as the kubelet makes it: its phase, its conditions and its
//! containers' statuses, from what the runtime reports and the worker knows.

use super::{is_sidecar, now, time_from_nanos, Instance, Worker};
use crate::admit;
use crate::probe;
use crate::spec;
use k8s_openapi::api::core::v1::{
    Container, ContainerState, ContainerStateRunning, ContainerStateTerminated,
    ContainerStateWaiting, ContainerStatus, HostIP, Pod, PodCondition, PodIP, PodReadinessGate,
    PodStatus,
};
use std::collections::HashMap;

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

    pub(super) async fn status(
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
}
