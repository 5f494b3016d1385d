//! End-to-end tests of `crustd` through the CRI client, against a daemon each test
//! starts in a node namespace it made, with crust's bridge as the pod network.

use cri_api::*;
use crust_e2e::crustd::Crustd;
use crust_e2e::require_root;
use std::collections::HashMap;

fn root() -> bool {
    require_root(&["ip", "nsenter", "ping", "nft"])
}

fn pod_config(name: &str, uid: &str) -> PodSandboxConfig {
    PodSandboxConfig {
        metadata: Some(PodSandboxMetadata {
            name: name.into(),
            uid: uid.into(),
            namespace: "default".into(),
            attempt: 0,
        }),
        hostname: name.into(),
        log_directory: String::new(),
        labels: HashMap::from([("app".to_string(), name.to_string())]),
        linux: Some(LinuxPodSandboxConfig::default()),
        ..Default::default()
    }
}

async fn run(
    c: &mut RuntimeServiceClient<tonic::transport::Channel>,
    cfg: PodSandboxConfig,
) -> String {
    c.run_pod_sandbox(RunPodSandboxRequest {
        config: Some(cfg),
        runtime_handler: String::new(),
    })
    .await
    .expect("RunPodSandbox")
    .into_inner()
    .pod_sandbox_id
}

/// Two pods get addresses from the bridge network, report READY with their IPs, reach
/// each other, and are stopped and removed without a trace.
#[tokio::test]
async fn two_pods_run_ping_stop_remove() {
    if !root() {
        return;
    }
    let d = Crustd::start();
    let mut c = d.client().await;
    let v = c
        .version(VersionRequest::default())
        .await
        .unwrap()
        .into_inner();
    assert_eq!(v.runtime_name, "crust");
    assert_eq!(v.runtime_api_version, "v1");

    let a = run(&mut c, pod_config("a", "uid-a")).await;
    let b = run(&mut c, pod_config("b", "uid-b")).await;
    let c0 = c.clone();
    let st = |id: String| {
        let mut c = c0.clone();
        async move {
            c.pod_sandbox_status(PodSandboxStatusRequest {
                pod_sandbox_id: id,
                verbose: true,
            })
            .await
            .unwrap()
            .into_inner()
        }
    };
    let sa = st(a.clone()).await;
    let sb = st(b.clone()).await;
    let status_a = sa.status.unwrap();
    assert_eq!(status_a.state, PodSandboxState::SandboxReady as i32);
    let ip_a = status_a.network.as_ref().unwrap().ip.clone();
    let ip_b = sb.status.unwrap().network.unwrap().ip;
    assert!(ip_a.starts_with("10.66.0."), "{ip_a}");
    assert_eq!(
        status_a.network.unwrap().additional_ips[0]
            .ip
            .split(':')
            .next(),
        Some("fd00")
    );
    let info: serde_json::Value = serde_json::from_str(&sa.info["info"]).unwrap();
    assert!(info["pid"].as_i64().unwrap() > 0, "{info}");

    let out = std::process::Command::new("nsenter")
        .arg(format!("--net={}", d.pin(&a, "net").display()))
        .args(["ping", "-c", "1", "-W", "2", &ip_b])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "pod a cannot reach pod b: {}",
        String::from_utf8_lossy(&out.stdout)
    );

    c.stop_pod_sandbox(StopPodSandboxRequest {
        pod_sandbox_id: a.clone(),
    })
    .await
    .unwrap();
    let s = st(a.clone()).await.status.unwrap();
    assert_eq!(s.state, PodSandboxState::SandboxNotready as i32);
    c.remove_pod_sandbox(RemovePodSandboxRequest {
        pod_sandbox_id: a.clone(),
    })
    .await
    .unwrap();
    c.remove_pod_sandbox(RemovePodSandboxRequest {
        pod_sandbox_id: b.clone(),
    })
    .await
    .unwrap();
    let list = c
        .list_pod_sandbox(ListPodSandboxRequest::default())
        .await
        .unwrap()
        .into_inner()
        .items;
    assert!(list.is_empty(), "{list:?}");
    assert!(d.mounts().is_empty(), "pins left: {:?}", d.mounts());
    assert!(crust_e2e::ip_files(d.ipam_data.path(), "crust-e2e").is_empty());
}
