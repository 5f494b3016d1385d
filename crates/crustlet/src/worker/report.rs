//! The pod's status, made (by `status`) from what the worker knows and the files its
//! containers wrote, and sent to the apiserver (the kubelet's status manager): only
//! when it differs from what was sent last, or when someone else changed it.

use super::status::{self, Facts, PodFacts, Verdicts};
use super::{is_sidecar, now, Instance, Worker};
use crate::spec;
use k8s_openapi::api::core::v1::{Container, ContainerStatus, Pod, PodStatus};
use kube::api::{Api, Patch, PatchParams};
use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The first retry of a status that could not be sent; the waits double from there.
const STATUS_RETRY_MIN: Duration = Duration::from_secs(1);
/// The longest wait between retries: the kubelet's status manager's resync period.
pub(super) const STATUS_RETRY_MAX: Duration = Duration::from_secs(10);

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

impl Worker {
    /// The pod's status from the container instances of its sandbox, by name (newest
    /// first); `initialized` once its init containers are done.
    pub(super) async fn status(
        &mut self,
        pod: &Pod,
        instances: &HashMap<String, Vec<Instance>>,
        initialized: bool,
    ) -> PodStatus {
        let spec = spec::spec(pod);
        let init_statuses: Vec<ContainerStatus> = spec
            .init_containers
            .iter()
            .flatten()
            .map(|c| self.container_status(pod, c, instances.get(&c.name), !is_sidecar(c)))
            .collect();
        let statuses: Vec<ContainerStatus> = spec
            .containers
            .iter()
            .map(|c| self.container_status(pod, c, instances.get(&c.name), false))
            .collect();
        let ephemeral = self.ephemeral_statuses(pod, instances);
        let facts = PodFacts {
            pod,
            initialized,
            finished: self.finished.as_deref(),
            sandbox: self
                .sandbox
                .as_ref()
                .map(|s| (s.ip.as_str(), s.ips.as_slice())),
            node_ip: &self.ctx.node_ip,
            start_time: self.start_time.clone(),
            verdict: self.verdict.as_ref(),
            now: now(),
        };
        status::pod_status(&facts, init_statuses, statuses, ephemeral)
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
        let instances = v.map_or(&[][..], Vec::as_slice);
        let probes = instances.first().and_then(|i| self.probes.get(&i.id));
        let mut f = Facts {
            container: c,
            instances,
            carried: self.carried.get(&c.name),
            waiting: self.waiting.get(&c.name),
            verdicts: Verdicts {
                startup: probes.and_then(|p| p.startup.as_ref()?.verdict),
                readiness: probes.and_then(|p| p.readiness.as_ref()?.verdict),
            },
            init,
            messages: HashMap::new(),
        };
        let (now, last) = f.shown_exits();
        for i in [now, last].into_iter().flatten() {
            f.messages.insert(i.id.clone(), self.own_message(pod, c, i));
        }
        status::container_status(pod, &f, &self.runtime_name)
    }

    /// What an exited instance wrote of its end: its termination file or, when it
    /// failed with FallbackToLogsOnError and wrote nothing there, the end of its log
    /// (80 lines, 2 KiB), as the kubelet does.
    fn own_message(&self, pod: &Pod, c: &Container, i: &Instance) -> String {
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
        own
    }

    /// The statuses of the pod's ephemeral containers (kubectl debug), which are never
    /// ready.
    fn ephemeral_statuses(
        &self,
        pod: &Pod,
        instances: &HashMap<String, Vec<Instance>>,
    ) -> Vec<ContainerStatus> {
        super::ephemeral::containers(pod)
            .iter()
            .map(|c| {
                super::ephemeral::status(self.container_status(
                    pod,
                    c,
                    instances.get(&c.name),
                    false,
                ))
            })
            .collect()
    }

    /// Sends the status when it differs from what was sent last.
    pub(super) async fn report(&mut self, pod: &Arc<Pod>, st: PodStatus) {
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
        // A status that could not be sent waits for its retry, as the kubelet's status
        // manager retries every 10 s; the newest status goes then.
        if self.status_retry.is_some_and(|(at, _)| Instant::now() < at) {
            return;
        }
        let api: Api<Pod> = Api::namespaced(client, spec::namespace(pod));
        match api
            .patch_status(
                spec::name(pod),
                &PatchParams::default(),
                &Patch::Strategic(&value),
            )
            .await
        {
            Ok(_) => {
                self.last_status = Some(cmp);
                self.status_retry = None;
            }
            Err(e) => {
                let wait = self
                    .status_retry
                    .map_or(STATUS_RETRY_MIN, |(_, w)| (w * 2).min(STATUS_RETRY_MAX));
                if self.status_retry.is_none() {
                    tracing::warn!(pod = %spec::key(pod), "status update: {e}");
                } else {
                    tracing::debug!(pod = %spec::key(pod), "status update: {e}");
                }
                self.status_retry = Some((Instant::now() + wait, wait));
            }
        }
    }
}
