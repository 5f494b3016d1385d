//! The pod's sandbox: the one the runtime has (adopted after a restart of the
//! crustlet), or a new one, made after the pod's volumes and cgroup; its addresses.

use super::{Backoff, Worker};
use crate::spec;
use cri_api as cri;
use k8s_openapi::api::core::v1::Pod;
use std::collections::HashMap;
use std::time::{Duration, Instant};

/// How often the pod's volumes are made again (a changed ConfigMap or Secret reaches
/// its files), as the kubelet's periodic sync does.
pub(super) const VOLUME_REFRESH: Duration = Duration::from_secs(60);

/// The first retry after a periodic refresh of the volumes failed.
const VOLUME_RETRY_MIN: Duration = Duration::from_secs(2);

/// The sandbox the pod runs in now.
pub(super) struct Sandbox {
    pub(super) id: String,
    pub(super) config: cri::PodSandboxConfig,
    pub(super) ip: String,
    pub(super) ips: Vec<String>,
}

impl Worker {
    /// The pod's sandboxes in the runtime, newest first.
    pub(super) async fn sandboxes(&self, uid: &str) -> anyhow::Result<Vec<cri::PodSandbox>> {
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

    /// The pod's newest sandbox, if the worker has none yet (a restarted crustlet),
    /// so that a pod that ends is stopped.
    pub(super) async fn adopt_newest_sandbox(&mut self, pod: &Pod) {
        if self.sandbox.is_some() {
            return;
        }
        let sandboxes = self.sandboxes(spec::uid(pod)).await.unwrap_or_default();
        if let Some(s) = sandboxes.first() {
            self.adopt(pod, s).await;
        }
    }

    /// Makes `s`, a sandbox the runtime has, the pod's (unless it is already): its
    /// config as it was made (its attempt) and its addresses.
    async fn adopt(&mut self, pod: &Pod, s: &cri::PodSandbox) {
        if self.sandbox.as_ref().map(|x| x.id.as_str()) == Some(s.id.as_str()) {
            return;
        }
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

    /// Whether the pod is `restartPolicy: Never` and its sandbox died after containers
    /// were made in it (the machine rebooted, the pause was killed): then no new
    /// sandbox is made, as by the kubelet, and the old one stays the pod's, stopped, so
    /// that its containers keep how they ended and the pod's phase follows (Failed for
    /// a container the reboot cut off). Made again, the sandbox would run those
    /// containers a second time.
    async fn ran_never_again(&mut self, pod: &Pod, sandboxes: &[cri::PodSandbox]) -> bool {
        let never = spec::spec(pod).restart_policy.as_deref() == Some("Never");
        let Some(s) = sandboxes.first().filter(|_| never) else {
            return false;
        };
        if self.instances(&s.id).await.map_or(true, |i| i.is_empty()) {
            return false;
        }
        if self.sandbox.as_ref().map(|x| x.id.as_str()) != Some(s.id.as_str()) {
            self.ctx.cri.stop_sandbox(&s.id).await;
            self.adopt(pod, s).await;
        }
        true
    }

    /// A ready sandbox for the pod: the one the runtime has, or a new one (with the
    /// pod's volumes made first). A sandbox that died takes its containers with it.
    pub(super) async fn ensure_sandbox(&mut self, pod: &Pod) -> anyhow::Result<()> {
        let uid = spec::uid(pod).to_string();
        let sandboxes = self.sandboxes(&uid).await?;
        let ready = sandboxes
            .iter()
            .find(|s| s.state == cri::PodSandboxState::SandboxReady as i32);
        if let Some(s) = ready {
            // Adopted (a restarted crustlet) or first seen.
            self.adopt(pod, s).await;
            self.refresh_volumes(pod, false).await;
            return Ok(());
        }
        if self.ran_never_again(pod, &sandboxes).await {
            return Ok(());
        }
        // The kubelet says so whenever the pod had a sandbox before, a restarted
        // crustlet's or a rebooted node's too (not again on each retry after a failure).
        let had = self.sandbox.take().is_some();
        if had || (!sandboxes.is_empty() && self.sandbox_backoff.is_none()) {
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
            self.ctx.cri.remove_sandbox(&s.id).await?;
        }
        if !self.refresh_volumes(pod, true).await || !self.wait_start_slot().await {
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
                runtime_handler: spec::spec(pod)
                    .runtime_class_name
                    .clone()
                    .unwrap_or_default(),
            })
            .await;
        match r {
            Ok(r) => {
                let id = r.into_inner().pod_sandbox_id;
                self.sandbox_backoff = None;
                self.clear_creating();
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

    /// What held the containers back before their sandbox (its volumes, a failed
    /// sandbox) is over: their status no longer shows its message.
    fn clear_creating(&mut self) {
        self.waiting
            .retain(|_, (reason, _)| reason != "ContainerCreating");
    }

    /// Makes (or, every [`VOLUME_REFRESH`], refreshes) the pod's volumes; false when they cannot
    /// be made yet (the reason is in the containers' waiting state and an event).
    async fn refresh_volumes(&mut self, pod: &Pod, force: bool) -> bool {
        if !force
            && self
                .volumes
                .as_ref()
                .is_some_and(|(_, at)| at.elapsed() < VOLUME_REFRESH)
        {
            return true;
        }
        let inputs = self.inputs(pod);
        match inputs.volumes(self.volumes.as_ref().map(|(v, _)| v)).await {
            Ok(v) => {
                self.ctx.seen.measured(spec::uid(pod), &v.measured);
                self.volumes = Some((v, Instant::now()));
                self.volume_retry = None;
                self.clear_creating();
                true
            }
            Err(e) if !force && self.volumes.is_some() => {
                // A periodic refresh: the running containers keep the files they have,
                // and the next try waits (the kubelet's volume manager backs off too),
                // rather than one each sync, with its event and its request.
                self.event(pod, true, "FailedMount", e.to_string());
                let wait = self
                    .volume_retry
                    .map_or(VOLUME_RETRY_MIN, |w| (w * 2).min(VOLUME_REFRESH));
                self.volume_retry = Some(wait);
                if let Some((_, at)) = &mut self.volumes {
                    // Due `wait` from now: the refresh is due VOLUME_REFRESH after `at`.
                    *at = Instant::now()
                        .checked_sub(VOLUME_REFRESH - wait)
                        .unwrap_or_else(Instant::now);
                }
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
}
