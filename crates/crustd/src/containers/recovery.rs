//! The containers at start-up: their records back into the store, half-made ones
//! rolled back, a start cut off recorded, orphaned folders and snapshots removed, and
//! every container that may still exit watched again.

use crate::containers::lifecycle::{refresh, teardown, watch};
use crate::containers::store::{ContainerRecord, ContainerState};
use crate::daemon::util;
use crate::daemon::Crust;
use container::executor::{self, oci_runtime};
use std::sync::Arc;

/// Start-up: container records back into the store; half-made ones rolled back, the
/// rest watched again.
pub fn recover(crust: &Arc<Crust>) {
    for dir in crust.containers.orphan_dirs() {
        tracing::warn!(dir = %dir.display(), "removing a container folder without a record");
        let _ = oci_runtime::unmount_rootfs(&dir.join("rootfs"));
        if let Err(e) = std::fs::remove_dir_all(&dir) {
            tracing::warn!(dir = %dir.display(), error = %e, "removing an orphaned container folder");
        }
    }
    for r in crust.containers.load_records() {
        let mut rec = match r {
            Ok(r) => r,
            Err(e) => {
                tracing::warn!(error = %e, "skipping an unreadable container record");
                continue;
            }
        };
        if rec.state == ContainerState::Created && create_cut_off(crust, &rec) {
            tracing::warn!(container = %rec.id, "CreateContainer was cut off before the executor recorded the container: rolling it back");
            rec.state = ContainerState::Creating;
        }
        if rec.state == ContainerState::Creating {
            // The record on disk may predate the spec's (it is saved before the spec is
            // written): a rollback runs the spec's poststop hooks, as runc's does.
            if rec.runtime.is_empty() && !rec.oci_hooks {
                rec.oci_hooks = crust
                    .containers
                    .read_spec(&rec.id)
                    .is_ok_and(|s| crate::containers::create::crustd_runs_hooks(&s));
            }
            match teardown(crust, &mut rec) {
                Ok(()) => continue,
                Err(e) => {
                    tracing::error!(container = %rec.id, error = %e, "rolling back a half-created container");
                    rec.state = ContainerState::Exited;
                    rec.reason = "CreateFailed".into();
                }
            }
        }
        started_meanwhile(crust, &mut rec);
        if crust.store.get(&rec.sandbox_id).is_err() {
            tracing::warn!(container = %rec.id, sandbox = %rec.sandbox_id, "container of a sandbox that is gone: removing it");
            let _ = teardown(crust, &mut rec);
            continue;
        }
        refresh(crust, &mut rec);
        if let Err(e) = crust.containers.reserve_name(&rec.name_key, &rec.id) {
            tracing::warn!(container = %rec.id, error = %e, "container name taken twice");
        }
        crust.containers.insert(rec);
    }
}

/// Whether a `created` record is the early one CreateContainer writes while the init
/// sets up (see `make`) with the create cut off before the executor wrote its own
/// state: such a container can never start (its init dies or waits on a gate nobody
/// knows), and the kubelet, never told its id, retries under the same name. Told
/// apart from a node that rebooted (the volatile state dir emptied: the container is
/// reported exited, as before) by the executor's folder, made first and left there.
fn create_cut_off(crust: &Crust, rec: &ContainerRecord) -> bool {
    let dir = crust.containers.exec_state(&rec.id);
    rec.runtime.is_empty() && dir.is_dir() && executor::Container::load(&dir).is_err()
}

/// A StartContainer cut off after the gate opened and before the record said so: the
/// executor's state shows the gate gone, so the record follows (`running`, from the
/// time the executor noted, else now). Left `created`, the container would report a
/// state it is not in and refuse every StartContainer.
fn started_meanwhile(crust: &Crust, rec: &mut ContainerRecord) {
    if rec.state != ContainerState::Created || !rec.runtime.is_empty() {
        return;
    }
    let Ok(x) = executor::Container::load(&crust.containers.exec_state(&rec.id)) else {
        return;
    };
    if x.started.is_none() && x.status() != executor::Status::Running {
        return;
    }
    tracing::warn!(container = %rec.id, "the container was started before crustd stopped: recording it running");
    rec.state = ContainerState::Running;
    rec.started_at = x
        .started
        .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
        .map(|d| d.as_nanos() as i64)
        .unwrap_or_else(util::now_ns);
    if let Err(e) = crust.containers.save(rec) {
        tracing::warn!(container = %rec.id, error = %e, "saving a container found started");
    }
}

/// Removes image snapshots that no container record names (their container's create
/// was cut off before its record was synced); after [`recover`].
pub fn sweep_snapshots(crust: &Crust) {
    let known: std::collections::HashSet<String> = crust
        .containers
        .list()
        .iter()
        .map(|c| c.id.clone())
        .collect();
    for key in crust.images.snapshots() {
        if !known.contains(crate::containers::image_volume::owner(&key)) {
            tracing::warn!(snapshot = %key, "removing a snapshot no container has");
            if let Err(e) = crust.images.remove_snapshot(&key) {
                tracing::warn!(snapshot = %key, error = %e, "removing an orphaned snapshot");
            }
        }
    }
}

/// Watches every container that may still exit (after recovery, inside the runtime).
pub fn watch_all(crust: &Arc<Crust>) {
    for c in crust.containers.list() {
        watch(crust.clone(), c);
    }
}
