//! Containers stopped as the kubelet kills them (preStop hook, then the signal within
//! the grace period), and a deleted pod's sandboxes, cgroup and folder removed.

use super::probe;
use super::{by_name, Instance, Worker};
use crate::cri::Cri;
use crate::spec;
use cri_api as cri;
use k8s_openapi::api::core::v1::{Container, Pod};
use kube::api::{Api, DeleteParams, Preconditions};
use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

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

impl Worker {
    /// Stops the running containers of sandbox `id` together, each after its preStop
    /// hook, within `grace` seconds (the hook's time comes out of them).
    pub(super) async fn kill_containers(&mut self, pod: &Pod, id: &str, ip: &str, grace: i64) {
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

    /// Kills a running instance of `c` as the kubelet does (preStop first), with the
    /// grace period [`probe::kill_grace`] picks: `failed` is the probe that failed, if any.
    pub(super) async fn stop(
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

    /// [`Worker::terminate`] until the runtime has done it: a pod whose sandboxes could
    /// not be listed or removed (the runtime down, restarting) is not forgotten, nor
    /// deleted from the apiserver while it may still run. As the kubelet's pod worker
    /// retries a terminating pod; every 1 s at first, at most every 30 s.
    pub(super) async fn terminate_until_done(
        &mut self,
        pod: &Arc<Pod>,
        grace: Option<i64>,
        delete: bool,
    ) {
        let mut wait = Duration::from_secs(1);
        while let Err(e) = self.terminate(pod, grace, delete).await {
            tracing::warn!(pod = %spec::key(pod), "stopping the pod: {e:#}; trying again in {wait:?}");
            tokio::time::sleep(wait).await;
            wait = (wait * 2).min(Duration::from_secs(30));
        }
    }

    /// Stops every container with the grace period, then the sandbox, removes both, and
    /// (for a pod deleted through the apiserver) deletes the pod object. An error (the
    /// runtime could not be asked) leaves the pod to be stopped again.
    async fn terminate(
        &mut self,
        pod: &Arc<Pod>,
        grace: Option<i64>,
        delete: bool,
    ) -> anyhow::Result<()> {
        let grace = grace.unwrap_or(30).max(0);
        let uid = spec::uid(pod).to_string();
        let sandboxes = self.sandboxes(&uid).await?;
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
            self.ctx.cri.remove_sandbox(&s.id).await?;
        }
        crate::cgroup::remove_pod(&self.ctx.cfg, &uid).await;
        // A pod's volumes can be large (an emptyDir), and so can its logs: removed off
        // the shared thread.
        let dir = self.ctx.cfg.pod_dir(&uid);
        let logs = std::path::PathBuf::from(spec::log_directory(&self.ctx.cfg, pod));
        let _ = tokio::task::spawn_blocking(move || {
            crate::inputs::tmpfs::remove_pod_dir(&dir);
            crate::pod_logs::remove(&logs);
        })
        .await;
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
        Ok(())
    }
}
