//! The status sent to the apiserver (the kubelet's status manager): only when it
//! differs from what was sent last, or when someone else changed it.

use super::Worker;
use crate::spec;
use k8s_openapi::api::core::v1::{Pod, PodStatus};
use kube::api::{Api, Patch, PatchParams};
use std::sync::Arc;

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
}
