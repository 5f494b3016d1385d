//! Ephemeral containers (`kubectl debug`): added to a running pod through the
//! `ephemeralcontainers` subresource, started once in the pod's sandbox and never
//! restarted, reported in `ephemeralContainerStatuses`. With `targetContainerName` the
//! container joins that container's PID namespace (CRI `NamespaceMode::TARGET`), so the
//! debugger sees its processes, as the kubelet arranges it.

use crate::cri::Cri;
use crate::spec;
use cri_api as cri;
use k8s_openapi::api::core::v1::{Container, ContainerStatus, EphemeralContainer, Pod};
use std::collections::HashMap;

/// The pod's ephemeral containers as containers (the same fields, less the target).
pub fn containers(pod: &Pod) -> Vec<Container> {
    spec::spec(pod)
        .ephemeral_containers
        .iter()
        .flatten()
        .filter_map(as_container)
        .collect()
}

/// Through JSON text, read as the apiserver's objects are: `from_value` would compile
/// a second deserializer for every container field's type.
fn as_container(e: &EphemeralContainer) -> Option<Container> {
    let mut v = serde_json::to_value(e).ok()?;
    v.as_object_mut()?.remove("targetContainerName");
    serde_json::from_str(&v.to_string()).ok()
}

/// The container config of `name`, put into its target's PID namespace when it is an
/// ephemeral container with a running target.
pub async fn target(
    cri: &Cri,
    sandbox: &str,
    pod: &Pod,
    name: &str,
    mut config: cri::ContainerConfig,
) -> cri::ContainerConfig {
    let target = spec::spec(pod)
        .ephemeral_containers
        .iter()
        .flatten()
        .find(|e| e.name == name)
        .and_then(|e| e.target_container_name.clone())
        .filter(|t| !t.is_empty());
    let Some(target) = target else {
        return config;
    };
    let mut rt = cri.runtime.clone();
    let running = rt
        .list_containers(cri::ListContainersRequest {
            filter: Some(cri::ContainerFilter {
                pod_sandbox_id: sandbox.to_string(),
                state: Some(cri::ContainerStateValue {
                    state: cri::ContainerState::ContainerRunning as i32,
                }),
                label_selector: HashMap::from([(spec::CONTAINER_NAME.to_string(), target.clone())]),
                ..Default::default()
            }),
        })
        .await
        .map(|r| r.into_inner().containers)
        .unwrap_or_default();
    match running.first() {
        Some(t) => join_pid_namespace(&mut config, &t.id),
        None => {
            tracing::info!(container = name, target = %target, "the target container is not running: the pod's PID namespace instead")
        }
    }
    config
}

fn join_pid_namespace(config: &mut cri::ContainerConfig, target_id: &str) {
    let ns = config
        .linux
        .get_or_insert_with(Default::default)
        .security_context
        .get_or_insert_with(Default::default)
        .namespace_options
        .get_or_insert_with(Default::default);
    ns.pid = cri::NamespaceMode::Target as i32;
    ns.target_id = target_id.to_string();
}

/// An ephemeral container's status: never ready (it serves nothing), as the kubelet's.
pub fn status(mut s: ContainerStatus) -> ContainerStatus {
    s.ready = false;
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ephemeral_containers_run_as_containers_in_their_targets_pid_namespace() {
        let pod: Pod = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "p", "uid": "u"},
            "spec": {"containers": [{"name": "app", "image": "busybox"}],
                     "ephemeralContainers": [{"name": "debugger", "image": "busybox",
                        "command": ["sh"], "stdin": true, "tty": true,
                        "targetContainerName": "app"}]}
        }))
        .unwrap();
        let cs = containers(&pod);
        assert_eq!(cs.len(), 1);
        assert_eq!(cs[0].name, "debugger");
        assert_eq!(cs[0].command.as_deref(), Some(&["sh".to_string()][..]));
        assert_eq!((cs[0].stdin, cs[0].tty), (Some(true), Some(true)));
        let mut config = cri::ContainerConfig::default();
        join_pid_namespace(&mut config, "c1");
        let ns = config
            .linux
            .unwrap()
            .security_context
            .unwrap()
            .namespace_options
            .unwrap();
        assert_eq!(
            (ns.pid, ns.target_id.as_str()),
            (cri::NamespaceMode::Target as i32, "c1")
        );
        let s = status(ContainerStatus {
            ready: true,
            ..Default::default()
        });
        assert!(!s.ready);
    }
}
