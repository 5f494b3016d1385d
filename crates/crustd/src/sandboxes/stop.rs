//! StopPodSandbox and RemovePodSandbox. Both are idempotent and succeed for an id
//! nobody knows, as the CRI asks: the kubelet calls them again until they succeed.

use crate::cri::error::{Error, Result};
use crate::daemon::failpoint::failpoint;
use crate::daemon::Crust;
use crate::sandboxes::run;
use crate::sandboxes::store::SandboxRecord;
use std::sync::Arc;

/// Runs `work` (blocking node work) on a copy of the sandbox's record under its lock;
/// then `finish` sees the record as the work left it, also when the work failed half
/// way, and decides what to keep. `Ok(())` for an unknown id.
async fn with_sandbox(
    crust: Arc<Crust>,
    id: &str,
    work: fn(&Crust, &mut SandboxRecord) -> Result<()>,
    finish: impl FnOnce(&Crust, &SandboxRecord, &Result<()>) -> Result<()>,
) -> Result<()> {
    let sb = match crust.store.get(id) {
        Ok(sb) => sb,
        Err(Error::NotFound(_)) => return Ok(()),
        Err(e) => return Err(e),
    };
    let mut rec = sb.rec.lock().await;
    let mut copy = rec.clone();
    let c = crust.clone();
    let (copy, res) = tokio::task::spawn_blocking(move || {
        let r = work(&c, &mut copy);
        (copy, r)
    })
    .await
    .map_err(Error::internal)?;
    let kept = finish(&crust, &copy, &res);
    *rec = copy;
    res.and(kept)
}

pub async fn stop(crust: Arc<Crust>, id: &str) -> Result<()> {
    let mut was_ready = false;
    if let Ok(sb) = crust.store.get(id) {
        was_ready = sb.rec.lock().await.state == crate::sandboxes::store::SandboxState::Ready;
        crate::containers::ops::stop_all(crust.clone(), &sb.id).await?;
        failpoint!("stop_sandbox.after_containers");
    }
    // Whatever got done is recorded, also when a later part failed.
    with_sandbox(crust, id, run::stop, move |c, rec, res| {
        if was_ready && res.is_ok() {
            c.events.emit(
                &rec.id,
                &rec.id,
                cri_api::ContainerEventType::ContainerStoppedEvent,
            );
        }
        let saved = c.store.save(rec);
        failpoint!("stop_sandbox.after_record");
        saved
    })
    .await
}

pub async fn remove(crust: Arc<Crust>, id: &str) -> Result<()> {
    if let Ok(sb) = crust.store.get(id) {
        crate::containers::ops::remove_all(crust.clone(), &sb.id).await?;
        failpoint!("remove_sandbox.after_containers");
    }
    with_sandbox(crust, id, run::teardown, |c, rec, res| {
        if res.is_ok() {
            c.store.remove(&rec.id);
            c.store.release_name(&rec.name_key(), &rec.id);
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
    })
    .await
}
