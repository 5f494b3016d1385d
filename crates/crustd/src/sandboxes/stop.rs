//! StopPodSandbox and RemovePodSandbox. Both are idempotent and succeed for an id
//! nobody knows, as the CRI asks: the kubelet calls them again until they succeed.

use crate::cri::error::{Error, Result};
use crate::daemon::failpoint::failpoint;
use crate::daemon::Crust;
use crate::sandboxes::run;
use crate::sandboxes::store::{SandboxRecord, SandboxState};
use std::sync::Arc;

/// What StopPodSandbox and RemovePodSandbox do to the pod's containers first.
#[derive(Clone, Copy)]
enum Containers {
    Stop,
    Remove,
}

/// Under the sandbox's lock: the pod's containers stopped or removed, then `work`
/// (blocking node work) on a copy of the sandbox's record; then `finish` sees the state
/// before, and the record as the work left it, also when the work failed half way, and
/// decides what to keep. `Ok(())` for an unknown id.
async fn with_sandbox(
    crust: Arc<Crust>,
    what: &'static str,
    id: &str,
    containers: Containers,
    work: fn(&Crust, &mut SandboxRecord) -> Result<()>,
    finish: impl FnOnce(&Crust, SandboxState, &SandboxRecord, &Result<()>) -> Result<()>,
) -> Result<()> {
    let sb = match crust.store.get(id) {
        Ok(sb) => sb,
        Err(Error::NotFound(_)) => return Ok(()),
        Err(e) => return Err(e),
    };
    // Cumulative times of the steps, logged at debug (hack/bench's phase table).
    let t0 = std::time::Instant::now();
    let mut rec = sb.rec.lock().await;
    let t_locked = t0.elapsed();
    // A RemovePodSandbox that held the lock before us removed it meanwhile: there is
    // nothing left to do, and saving the record would bring it back on disk (a race
    // suite's StopPodSandbox did).
    if !crust
        .store
        .get(&sb.id)
        .is_ok_and(|now| Arc::ptr_eq(&now, &sb))
    {
        return Ok(());
    }
    // The containers under the sandbox's lock: CreateContainer holds it until its
    // container is in the store, so none can be made in this pod between this step and
    // the work (one made just before a removal took the pod outlived it, and its cgroup
    // kept the pod's from being removed).
    //
    // A stop sends SIGKILL to the containers, then waits for their ends while the
    // sandbox is torn down (pause, CNI DEL, pins): the two do not depend on each other,
    // and the kubelet's StopPodSandbox waits for both. A removal removes the
    // containers first: their snapshots and cgroups go before the pod's.
    let before = rec.state;
    let mut copy = rec.clone();
    let c = crust.clone();
    let run_work = move || {
        tokio::task::spawn_blocking(move || {
            let r = work(&c, &mut copy);
            (copy, r)
        })
    };
    let t_containers;
    let (containers_done, worked) = match containers {
        Containers::Stop if crust.nri.get().is_some() && before == SandboxState::Ready => {
            // With NRI, as containerd: the containers have ended before the plugins
            // hear of the pod's stop, and the pod is torn down after (a plugin's error
            // is only logged: the stop goes on).
            crate::containers::lifecycle::kill_all(&crust, &sb.id).await;
            t_containers = t0.elapsed();
            let stopped = crate::containers::lifecycle::stop_all(crust.clone(), &sb.id).await;
            if let Err(e) = crate::nri::convert::wait(
                &crust,
                crate::nri::api::Event::StopPodSandbox,
                crate::nri::convert::pod(&rec),
                None,
            )
            .await
            {
                tracing::warn!(sandbox = %id, error = %e, "NRI StopPodSandbox");
            }
            (stopped, run_work().await)
        }
        Containers::Stop => {
            crate::containers::lifecycle::kill_all(&crust, &sb.id).await;
            t_containers = t0.elapsed();
            tokio::join!(
                crate::containers::lifecycle::stop_all(crust.clone(), &sb.id),
                run_work()
            )
        }
        Containers::Remove => {
            crate::containers::lifecycle::remove_all(crust.clone(), &sb.id).await?;
            failpoint!("remove_sandbox.after_containers");
            t_containers = t0.elapsed();
            (Ok(()), run_work().await)
        }
    };
    if matches!(containers, Containers::Stop) {
        failpoint!("stop_sandbox.after_containers");
    }
    let (copy, res) = worked.map_err(Error::internal)?;
    let res = containers_done.and(res);
    let t_work = t0.elapsed();
    let kept = finish(&crust, before, &copy, &res);
    *rec = copy;
    tracing::debug!(sandbox = %id, ?t_locked, ?t_containers, ?t_work, t_end = ?t0.elapsed(), "{what} phases");
    res.and(kept)
}

pub async fn stop(crust: Arc<Crust>, id: &str) -> Result<()> {
    // Whatever got done is recorded, also when a later part failed.
    with_sandbox(
        crust,
        "stop",
        id,
        Containers::Stop,
        run::stop,
        move |c, before, rec, res| {
            if before == SandboxState::Ready && res.is_ok() {
                c.events.emit(
                    &rec.id,
                    &rec.id,
                    cri_api::ContainerEventType::ContainerStoppedEvent,
                );
            }
            let saved = c.store.save(rec);
            failpoint!("stop_sandbox.after_record");
            saved
        },
    )
    .await
}

pub async fn remove(crust: Arc<Crust>, id: &str) -> Result<()> {
    with_sandbox(
        crust,
        "remove",
        id,
        Containers::Remove,
        run::teardown,
        |c, _, rec, res| {
            if res.is_ok() {
                c.store.remove(&rec.id);
                c.store.release_name(&rec.name_key(), &rec.id);
                crate::nri::convert::notify_pod(c, crate::nri::api::Event::RemovePodSandbox, rec);
                c.events.emit(
                    &rec.id,
                    &rec.id,
                    cri_api::ContainerEventType::ContainerDeletedEvent,
                );
            } else {
                // Kept, with what is left to undo, for the kubelet's next try.
                let _ = c.store.save(rec);
            }
            Ok(())
        },
    )
    .await
}
