//! PodSandboxStatus and ListPodSandbox.

use crate::cri::error::Result;
use crate::cri::labels;
use crate::daemon::util;
use crate::daemon::Crust;
use crate::sandboxes::store::{Sandbox, SandboxRecord, SandboxState};
use cri_api::{
    LinuxPodSandboxStatus, Namespace, NamespaceOption, PodIp, PodSandbox, PodSandboxFilter,
    PodSandboxMetadata, PodSandboxNetworkStatus, PodSandboxState, PodSandboxStatus,
};
use serde_json::{json, Value};
use std::collections::HashMap;
use std::sync::Arc;

/// A ready sandbox whose pause died is not ready, whatever the record says.
fn state_of(sb: &Sandbox, rec: &SandboxRecord) -> PodSandboxState {
    match rec.state {
        SandboxState::Ready if rec.pause.is_some_and(|p| sb.liveness.alive(p)) => {
            PodSandboxState::SandboxReady
        }
        _ => PodSandboxState::SandboxNotready,
    }
}

fn metadata(rec: &SandboxRecord) -> PodSandboxMetadata {
    PodSandboxMetadata {
        name: rec.name.clone(),
        uid: rec.uid.clone(),
        namespace: rec.namespace.clone(),
        attempt: rec.attempt,
    }
}

pub async fn status(
    crust: Arc<Crust>,
    id: &str,
    verbose: bool,
) -> Result<(PodSandboxStatus, HashMap<String, String>)> {
    let sb = crust.store.get(id)?;
    let rec = sb.rec.view();
    let cfg = rec.config().unwrap_or_default();
    let ns_opts = cfg
        .linux
        .as_ref()
        .and_then(|l| l.security_context.as_ref())
        .and_then(|s| s.namespace_options.clone())
        .unwrap_or_default();
    let state = state_of(&sb, &rec);
    let network = (!rec.host_network).then(|| PodSandboxNetworkStatus {
        ip: rec.ips.first().cloned().unwrap_or_default(),
        additional_ips: rec
            .ips
            .iter()
            .skip(1)
            .map(|ip| PodIp { ip: ip.clone() })
            .collect(),
    });
    let status = PodSandboxStatus {
        id: rec.id.clone(),
        metadata: Some(metadata(&rec)),
        state: state as i32,
        created_at: rec.created_at,
        network: network.or(Some(PodSandboxNetworkStatus::default())),
        linux: Some(LinuxPodSandboxStatus {
            namespaces: Some(Namespace {
                options: Some(NamespaceOption {
                    target_id: String::new(),
                    ..ns_opts
                }),
            }),
        }),
        labels: labels::to_cri(&rec.labels),
        annotations: labels::to_cri(&rec.annotations),
        runtime_handler: rec.runtime_handler.clone(),
    };
    let mut info = HashMap::new();
    if verbose {
        info.insert(
            "info".to_string(),
            verbose_info(&crust, &rec, &cfg, state).to_string(),
        );
    }
    Ok((status, info))
}

/// The verbose info map in the shape containerd gives it, so tooling such as
/// `crictl inspectp ID | jq .info.pid` works unchanged.
fn verbose_info(
    crust: &Crust,
    rec: &SandboxRecord,
    cfg: &cri_api::PodSandboxConfig,
    state: PodSandboxState,
) -> Value {
    let pid = rec.pause.map(|p| p.pid).unwrap_or(0);
    let netns = rec
        .netns()
        .map(|p| p.display().to_string())
        .unwrap_or_default();
    json!({
        "pid": if state == PodSandboxState::SandboxReady { pid } else { 0 },
        "processStatus": if state == PodSandboxState::SandboxReady { "running" } else { "stopped" },
        "netNamespaceClosed": netns.is_empty() && !rec.host_network,
        "netns": netns,
        "runtimeHandler": rec.runtime_handler,
        "runtimeType": "io.crust.runtime.v1",
        "cgroupPath": rec.cgroup,
        "createdAt": util::rfc3339(rec.created_at),
        "sandboxDir": crust.store.sandbox_dir(&rec.id),
        "cniResult": rec.network.as_ref().and_then(|n| n.result.clone()),
        "config": config_json(cfg),
    })
}

fn config_json(cfg: &cri_api::PodSandboxConfig) -> Value {
    let md = cfg.metadata.clone().unwrap_or_default();
    let linux = cfg.linux.clone().unwrap_or_default();
    let ns = linux
        .security_context
        .as_ref()
        .and_then(|s| s.namespace_options.clone())
        .unwrap_or_default();
    let mode = |m: i32| {
        cri_api::NamespaceMode::try_from(m)
            .map(|m| m.as_str_name())
            .unwrap_or("POD")
    };
    json!({
        "metadata": {"name": md.name, "uid": md.uid, "namespace": md.namespace, "attempt": md.attempt},
        "hostname": cfg.hostname,
        "log_directory": cfg.log_directory,
        "dns_config": cfg.dns_config.as_ref().map(|d| json!({"servers": d.servers, "searches": d.searches, "options": d.options})),
        "port_mappings": cfg.port_mappings.iter().map(|p| json!({
            "protocol": cri_api::Protocol::try_from(p.protocol).map(|p| p.as_str_name()).unwrap_or("TCP"),
            "container_port": p.container_port, "host_port": p.host_port, "host_ip": p.host_ip})).collect::<Vec<_>>(),
        "labels": cfg.labels,
        "annotations": cfg.annotations,
        "linux": {
            "cgroup_parent": linux.cgroup_parent,
            "sysctls": linux.sysctls,
            "security_context": {"namespace_options": {"network": mode(ns.network), "pid": mode(ns.pid), "ipc": mode(ns.ipc)}},
        },
    })
}

pub async fn list(crust: Arc<Crust>, filter: Option<PodSandboxFilter>) -> Result<Vec<PodSandbox>> {
    let mut out = Vec::new();
    for sb in crust.store.list() {
        let rec = sb.rec.view();
        let state = state_of(&sb, &rec);
        if let Some(f) = &filter {
            if !f.id.is_empty() && !rec.id.starts_with(&f.id) {
                continue;
            }
            if let Some(s) = &f.state {
                if s.state != state as i32 {
                    continue;
                }
            }
            if !labels::selected(&f.label_selector, &rec.labels) {
                continue;
            }
        }
        out.push(PodSandbox {
            id: rec.id.clone(),
            metadata: Some(metadata(&rec)),
            state: state as i32,
            created_at: rec.created_at,
            labels: labels::to_cri(&rec.labels),
            annotations: labels::to_cri(&rec.annotations),
            runtime_handler: rec.runtime_handler.clone(),
        });
    }
    out.sort_by_key(|s| s.created_at);
    Ok(out)
}
