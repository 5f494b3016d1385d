//! crustd's records as NRI's `PodSandbox` and `Container`, and the calls the CRI
//! handlers make (each does nothing while NRI is off).

use super::api::{self, Event};
use super::Outcome;
use crate::containers::store::{ContainerRecord, ContainerState};
use crate::cri::error::{Error, Result};
use crate::daemon::Crust;
use crate::sandboxes::store::SandboxRecord;

pub fn pod(rec: &SandboxRecord) -> api::PodSandbox {
    api::PodSandbox {
        id: rec.id.clone(),
        name: rec.name.clone(),
        uid: rec.uid.clone(),
        namespace: rec.namespace.clone(),
        labels: rec.labels.clone().into_iter().collect(),
        annotations: rec.annotations.clone().into_iter().collect(),
        runtime_handler: rec.runtime_handler.clone(),
        linux: Some(api::LinuxPodSandbox {
            cgroup_parent: String::new(),
            cgroups_path: rec.cgroup.clone().unwrap_or_default(),
            namespaces: rec
                .pins
                .iter()
                .map(|(kind, path)| api::LinuxNamespace {
                    r#type: match kind.as_str() {
                        "net" => "network".into(),
                        k => k.to_string(),
                    },
                    path: path.display().to_string(),
                })
                .collect(),
        }),
        pid: rec.pause.as_ref().map_or(0, |p| p.pid.max(0) as u32),
        ips: rec.ips.clone(),
    }
}

/// A pod known only by its id (NRI's queue fills in what the plugins were told of it).
pub fn pod_id(id: &str) -> api::PodSandbox {
    api::PodSandbox {
        id: id.to_string(),
        ..Default::default()
    }
}

/// CRI resources as NRI's (UpdateContainer tells the plugins the new ones).
pub fn resources(r: &cri_api::LinuxContainerResources) -> api::LinuxResources {
    let some_i = |v: i64| (v != 0).then_some(api::OptionalInt64 { value: v });
    let some_u = |v: i64| (v > 0).then_some(api::OptionalUInt64 { value: v as u64 });
    api::LinuxResources {
        memory: Some(api::LinuxMemory {
            limit: some_i(r.memory_limit_in_bytes),
            swap: some_i(r.memory_swap_limit_in_bytes),
        }),
        cpu: Some(api::LinuxCpu {
            shares: some_u(r.cpu_shares),
            quota: some_i(r.cpu_quota),
            period: some_u(r.cpu_period),
            cpus: r.cpuset_cpus.clone(),
            mems: r.cpuset_mems.clone(),
        }),
        unified: r.unified.clone().into_iter().collect(),
        ..Default::default()
    }
}

/// The container; its process (args, env, mounts) from `spec` when there is one.
pub fn container(rec: &ContainerRecord, spec: Option<&oci_spec::runtime::Spec>) -> api::Container {
    let mut c = api::Container {
        id: rec.id.clone(),
        pod_sandbox_id: rec.sandbox_id.clone(),
        name: rec.name.clone(),
        state: match rec.state {
            ContainerState::Running => api::state::RUNNING,
            ContainerState::Exited => api::state::STOPPED,
            _ => api::state::CREATED,
        },
        labels: rec.labels.clone().into_iter().collect(),
        annotations: rec.annotations.clone().into_iter().collect(),
        pid: rec.pid.max(0) as u32,
        created_at: rec.created_at,
        started_at: rec.started_at,
        finished_at: rec.finished_at,
        exit_code: rec.exit_code,
        status_reason: rec.reason.clone(),
        status_message: rec.message.clone(),
        ..Default::default()
    };
    if let Some(spec) = spec {
        if let Some(p) = spec.process() {
            c.args = p.args().clone().unwrap_or_default();
            c.env = p.env().clone().unwrap_or_default();
        }
        c.mounts = spec
            .mounts()
            .iter()
            .flatten()
            .map(|m| api::Mount {
                destination: m.destination().display().to_string(),
                r#type: m.typ().clone().unwrap_or_default(),
                source: m
                    .source()
                    .as_ref()
                    .map(|s| s.display().to_string())
                    .unwrap_or_default(),
                options: m.options().clone().unwrap_or_default(),
            })
            .collect();
        if let Some(a) = spec.annotations() {
            c.annotations.extend(a.clone());
        }
    }
    c
}

/// An NRI event the operation waits for; a plugin's error fails it.
pub async fn wait(
    crust: &Crust,
    ev: Event,
    pod: api::PodSandbox,
    container: Option<api::Container>,
) -> Result<Outcome> {
    let Some(nri) = crust.nri.get() else {
        return Ok(Outcome::default());
    };
    nri.emit(ev, pod, container, None)
        .await
        .map_err(Error::FailedPrecondition)
}

/// [`wait`] from a blocking task (RunPodSandbox's and CreateContainer's work).
pub fn wait_blocking(
    crust: &Crust,
    ev: Event,
    pod: api::PodSandbox,
    container: Option<api::Container>,
) -> Result<Outcome> {
    if crust.nri.get().is_none() {
        return Ok(Outcome::default());
    }
    tokio::runtime::Handle::current().block_on(wait(crust, ev, pod, container))
}

/// An NRI event nobody waits for.
pub fn notify(crust: &Crust, ev: Event, pod: api::PodSandbox, container: Option<api::Container>) {
    if let Some(nri) = crust.nri.get() {
        let (kind, id) = match &container {
            Some(c) => ('c', c.id.clone()),
            None => ('p', pod.id.clone()),
        };
        let removal = matches!(ev, Event::RemoveContainer | Event::RemovePodSandbox);
        nri.notify(ev, pod, container);
        if removal {
            nri.removed(kind, &id);
        }
    }
}

/// A container event nobody waits for; nothing is built while NRI is off.
pub fn notify_container(crust: &Crust, ev: Event, rec: &ContainerRecord) {
    if crust.nri.get().is_some() {
        notify(
            crust,
            ev,
            pod_id(&rec.sandbox_id),
            Some(container(rec, None)),
        );
    }
}

/// A container event the operation waits for; nothing is built while NRI is off.
pub async fn wait_container(crust: &Crust, ev: Event, rec: &ContainerRecord) -> Result<Outcome> {
    if crust.nri.get().is_none() {
        return Ok(Outcome::default());
    }
    wait(
        crust,
        ev,
        pod_id(&rec.sandbox_id),
        Some(container(rec, None)),
    )
    .await
}

/// A pod event nobody waits for; nothing is built while NRI is off.
pub fn notify_pod(crust: &Crust, ev: Event, rec: &SandboxRecord) {
    if crust.nri.get().is_some() {
        notify(crust, ev, pod(rec), None);
    }
}

/// Starts NRI when the configuration asks, with crustd's pods and containers as they
/// are after recovery.
pub fn start(crust: &std::sync::Arc<Crust>) -> anyhow::Result<()> {
    if !crust.cfg.nri.enable {
        return Ok(());
    }
    let pods: Vec<api::PodSandbox> = crust
        .store
        .list()
        .iter()
        .filter_map(|sb| sb.rec.try_lock().map(|r| pod(&r)))
        .collect();
    let containers: Vec<api::Container> = crust
        .containers
        .list()
        .iter()
        .filter_map(|c| c.rec.try_lock().map(|r| container(&r, None)))
        .collect();
    let nri = super::Nri::start(crust.cfg.nri.clone(), pods, containers)?;
    let c = std::sync::Arc::downgrade(crust);
    nri.set_updater(std::sync::Arc::new(move |id, res| {
        let c = c.clone();
        Box::pin(async move {
            let Some(crust) = c.upgrade() else {
                return Err("crustd is stopping".to_string());
            };
            crate::containers::update::apply_nri(crust, &id, &res)
                .await
                .map_err(|e| e.to_string())
        })
    }));
    let _ = crust.nri.set(nri);
    Ok(())
}

#[cfg(test)]
mod tests {
    #[test]
    fn cri_resources_as_nri_leave_unset_what_the_request_did_not_set() {
        let r = cri_api::LinuxContainerResources {
            memory_limit_in_bytes: 64 << 20,
            cpu_quota: 50_000,
            cpu_period: 100_000,
            cpuset_cpus: "0-1".into(),
            ..Default::default()
        };
        let n = super::resources(&r);
        let m = n.memory.unwrap();
        assert_eq!(m.limit.unwrap().value, 64 << 20);
        assert!(m.swap.is_none());
        let c = n.cpu.unwrap();
        assert_eq!(
            (c.quota.unwrap().value, c.period.unwrap().value),
            (50_000, 100_000)
        );
        assert!(c.shares.is_none());
        assert_eq!(c.cpus, "0-1");
    }
}
