//! The generated messages encode and decode with prost without losing fields.

use std::collections::HashMap;

use cri_api::{
    Int64Value, LinuxPodSandboxConfig, LinuxSandboxSecurityContext, NamespaceMode, NamespaceOption,
    PodSandboxConfig, PodSandboxMetadata, RunPodSandboxRequest,
};
use prost::Message;

#[test]
fn run_pod_sandbox_request_round_trips() {
    let request = RunPodSandboxRequest {
        config: Some(PodSandboxConfig {
            metadata: Some(PodSandboxMetadata {
                name: "nginx".into(),
                uid: "8d5a9b5e-3c7f-4a8e-9d1b-2f6c0e4a7b31".into(),
                namespace: "default".into(),
                attempt: 2,
            }),
            hostname: "nginx".into(),
            log_directory: "/var/log/pods/default_nginx".into(),
            labels: HashMap::from([
                ("app".to_string(), "nginx".to_string()),
                ("tier".to_string(), "web".to_string()),
            ]),
            annotations: HashMap::from([("note".to_string(), "round trip".to_string())]),
            linux: Some(LinuxPodSandboxConfig {
                cgroup_parent: "/kubepods/besteffort/pod8d5a9b5e".into(),
                security_context: Some(LinuxSandboxSecurityContext {
                    namespace_options: Some(NamespaceOption {
                        network: NamespaceMode::Pod.into(),
                        pid: NamespaceMode::Container.into(),
                        ipc: NamespaceMode::Node.into(),
                        ..Default::default()
                    }),
                    run_as_user: Some(Int64Value { value: 1000 }),
                    run_as_group: Some(Int64Value { value: 3000 }),
                    readonly_rootfs: true,
                    supplemental_groups: vec![4000, 5000],
                    privileged: false,
                    ..Default::default()
                }),
                sysctls: HashMap::from([(
                    "net.ipv4.ip_unprivileged_port_start".to_string(),
                    "0".to_string(),
                )]),
                ..Default::default()
            }),
            ..Default::default()
        }),
        runtime_handler: "runc".into(),
    };

    let bytes = request.encode_to_vec();
    assert!(!bytes.is_empty());
    let decoded = RunPodSandboxRequest::decode(bytes.as_slice()).expect("decode");
    assert_eq!(decoded, request);

    let config = decoded.config.expect("config");
    assert_eq!(config.metadata.expect("metadata").attempt, 2);
    assert_eq!(config.labels["tier"], "web");
    let security = config
        .linux
        .expect("linux")
        .security_context
        .expect("security context");
    let namespaces = security.namespace_options.expect("namespace options");
    assert_eq!(namespaces.network(), NamespaceMode::Pod);
    assert_eq!(namespaces.pid(), NamespaceMode::Container);
    assert_eq!(namespaces.ipc(), NamespaceMode::Node);
    assert_eq!(security.run_as_user, Some(Int64Value { value: 1000 }));
    assert!(security.readonly_rootfs);
}

#[test]
fn truncated_message_fails_to_decode() {
    // Field 1 (config) claims a 100-byte length but only 1 byte follows.
    assert!(RunPodSandboxRequest::decode(&[0x0a, 100, 0][..]).is_err());
}
