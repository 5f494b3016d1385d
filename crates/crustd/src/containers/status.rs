//! ContainerStatus and ListContainers: a container's record as the CRI shows it, read
//! without waiting for an operation in flight.

use crate::containers::lifecycle::refresh;
use crate::containers::store::{Container, ContainerRecord, ContainerState, RunAs};
use crate::cri::error::Result;
use crate::cri::labels;
use crate::daemon::Crust;
use cri_api::*;
use std::sync::Arc;

fn metadata(rec: &ContainerRecord) -> ContainerMetadata {
    ContainerMetadata {
        name: rec.name.clone(),
        attempt: rec.attempt,
    }
}

fn image_spec(rec: &ContainerRecord) -> ImageSpec {
    ImageSpec {
        image: rec.image_name.clone(),
        annotations: Default::default(),
        user_specified_image: rec.image.clone(),
        runtime_handler: String::new(),
        image_ref: String::new(),
    }
}

/// A record as the CRI's ContainerStatus, with the config and runtime spec it read.
/// Sync and lock-free (the caller holds the record), so events can take the status of
/// the container they are about at the moment they happen.
pub fn cri_status(
    crust: &Crust,
    rec: &ContainerRecord,
    verbose: bool,
) -> (ContainerStatus, ContainerConfig, Option<serde_json::Value>) {
    let cfg = rec.config().unwrap_or_default();
    let image_ref = crust
        .images
        .resolve(&rec.image_id)
        .and_then(|i| i.repo_digests.first().cloned())
        .unwrap_or_else(|| rec.image_id.clone());
    // The spec only for the verbose info, or for the user of a record from before it
    // kept one: a status is asked for every container every time a kubelet syncs.
    let spec: Option<serde_json::Value> = (verbose || rec.user.is_none())
        .then(|| std::fs::read(crust.containers.bundle(&rec.id).join("config.json")).ok())
        .flatten()
        .and_then(|b| serde_json::from_slice(&b).ok());
    let run_as = rec.user.clone().or_else(|| {
        spec.as_ref().map(|s| RunAs {
            uid: s["process"]["user"]["uid"].as_i64().unwrap_or(0),
            gid: s["process"]["user"]["gid"].as_i64().unwrap_or(0),
            groups: s["process"]["user"]["additionalGids"]
                .as_array()
                .map(|a| a.iter().filter_map(|v| v.as_i64()).collect())
                .unwrap_or_default(),
        })
    });
    let user = run_as.map(|u| ContainerUser {
        linux: Some(LinuxContainerUser {
            uid: u.uid,
            gid: u.gid,
            supplemental_groups: u.groups,
        }),
    });
    let status = ContainerStatus {
        id: rec.id.clone(),
        metadata: Some(metadata(rec)),
        state: rec.state.cri() as i32,
        created_at: rec.created_at,
        started_at: rec.started_at,
        finished_at: rec.finished_at,
        exit_code: rec.exit_code,
        image: Some(image_spec(rec)),
        image_ref,
        reason: rec.reason.clone(),
        message: rec.message.clone(),
        labels: labels::to_cri(&rec.labels),
        annotations: labels::to_cri(&rec.annotations),
        mounts: cfg.mounts.clone(),
        log_path: rec
            .log_path
            .as_ref()
            .map(|p| p.display().to_string())
            .unwrap_or_default(),
        resources: rec.resources().map(|r| ContainerResources {
            linux: Some(r),
            windows: None,
        }),
        image_id: rec.image_id.clone(),
        user,
    };
    (status, cfg, spec)
}

/// A container's record for ContainerStatus and ListContainers: refreshed (an exit the
/// monitor recorded is taken in) when no operation holds it; else as the last one left
/// it, without waiting for the one in flight (see `daemon::record`).
fn read_rec(crust: &Crust, c: &Container) -> Arc<ContainerRecord> {
    // A watched container's record learns its exit by itself (the watch refreshes it
    // when the monitor ends): no file or /proc read per call.
    if c.watched.load(std::sync::atomic::Ordering::Acquire) {
        return c.rec.view();
    }
    match c.rec.try_lock() {
        Some(mut rec) => {
            refresh(crust, &mut rec);
            Arc::new(rec.clone())
        }
        None => c.rec.view(),
    }
}

/// [`read_rec`] for ContainerStatus, which waits for a container still being created
/// (it has no state to show yet; ListContainers leaves it out instead).
async fn status_rec(crust: &Crust, c: &Container) -> Arc<ContainerRecord> {
    let rec = read_rec(crust, c);
    if rec.state != ContainerState::Creating {
        return rec;
    }
    let mut rec = c.rec.lock().await;
    refresh(crust, &mut rec);
    Arc::new(rec.clone())
}

pub async fn status(crust: Arc<Crust>, id: &str, verbose: bool) -> Result<ContainerStatusResponse> {
    let c = crust.containers.get(id)?;
    let rec = status_rec(&crust, &c).await;
    let (status, cfg, spec) = cri_status(&crust, &rec, verbose);
    let mut info = std::collections::HashMap::new();
    if verbose {
        let v = serde_json::json!({
            "sandboxID": rec.sandbox_id,
            "pid": if matches!(rec.state, ContainerState::Created | ContainerState::Running) { rec.pid } else { 0 },
            "removing": false,
            "snapshotKey": rec.id,
            "snapshotter": "overlayfs",
            "runtimeType": "crust",
            "monitorPid": rec.monitor_pid,
            "cgroup": rec.cgroup,
            "config": serde_json::to_value(cfg_json(&cfg)).unwrap_or_default(),
            "runtimeSpec": spec.unwrap_or_default(),
        });
        info.insert("info".to_string(), v.to_string());
    }
    Ok(ContainerStatusResponse {
        status: Some(status),
        info,
    })
}

/// A readable rendering of the ContainerConfig for the verbose info.
fn cfg_json(cfg: &ContainerConfig) -> serde_json::Value {
    serde_json::json!({
        "metadata": cfg.metadata.as_ref().map(|m| serde_json::json!({"name": m.name, "attempt": m.attempt})),
        "image": cfg.image.as_ref().map(|i| serde_json::json!({"image": i.image})),
        "command": cfg.command,
        "args": cfg.args,
        "working_dir": cfg.working_dir,
        "envs": cfg.envs.iter().map(|e| serde_json::json!({"key": e.key, "value": e.value})).collect::<Vec<_>>(),
        "log_path": cfg.log_path,
        "stdin": cfg.stdin,
        "stdin_once": cfg.stdin_once,
        "tty": cfg.tty,
    })
}

/// The statuses of a sandbox's containers (those past Creating), for PodSandboxStatus:
/// with the EventedPLEG feature gate the kubelet takes a pod's containers from this
/// list alone, as containerd 1.7 fills it, and would see a pod without any.
pub fn of_sandbox(crust: &Crust, sandbox_id: &str) -> Vec<ContainerStatus> {
    crust
        .containers
        .of_sandbox(sandbox_id)
        .into_iter()
        .filter_map(|c| {
            let rec = read_rec(crust, &c);
            (rec.state != ContainerState::Creating).then(|| cri_status(crust, &rec, false).0)
        })
        .collect()
}

pub async fn list(
    crust: Arc<Crust>,
    filter: Option<ContainerFilter>,
) -> Result<Vec<cri_api::Container>> {
    let f = filter.unwrap_or_default();
    let mut out = vec![];
    let sandbox_prefix = if f.pod_sandbox_id.is_empty() {
        None
    } else {
        match crust.store.get(&f.pod_sandbox_id) {
            Ok(sb) => Some(sb.id.clone()),
            Err(_) => return Ok(vec![]),
        }
    };
    for c in crust.containers.list() {
        if !f.id.is_empty() && !c.id.starts_with(&f.id) {
            continue;
        }
        if let Some(sb) = &sandbox_prefix {
            if &c.sandbox_id != sb {
                continue;
            }
        }
        let rec = read_rec(&crust, &c);
        if rec.state == ContainerState::Creating {
            continue;
        }
        if let Some(s) = &f.state {
            if s.state != rec.state.cri() as i32 {
                continue;
            }
        }
        if !labels::selected(&f.label_selector, &rec.labels) {
            continue;
        }
        out.push(cri_api::Container {
            id: rec.id.clone(),
            pod_sandbox_id: rec.sandbox_id.clone(),
            metadata: Some(metadata(&rec)),
            image: Some(image_spec(&rec)),
            image_ref: rec.image_id.clone(),
            state: rec.state.cri() as i32,
            created_at: rec.created_at,
            labels: labels::to_cri(&rec.labels),
            annotations: labels::to_cri(&rec.annotations),
            image_id: rec.image_id.clone(),
        });
    }
    out.sort_by_key(|c| c.created_at);
    Ok(out)
}
