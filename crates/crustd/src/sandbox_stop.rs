//! StopPodSandbox and RemovePodSandbox. Both are idempotent and succeed for an id
//! nobody knows, as the CRI asks: the kubelet calls them again until they succeed.

use crate::daemon::Crust;
use crate::error::{Error, Result};
use crate::sandbox_run;
use std::sync::Arc;

pub async fn stop(crust: Arc<Crust>, id: &str) -> Result<()> {
    let sb = match crust.store.get(id) {
        Ok(sb) => sb,
        Err(Error::NotFound(_)) => return Ok(()),
        Err(e) => return Err(e),
    };
    let mut rec = sb.rec.lock().await;
    let mut work = rec.clone();
    let c = crust.clone();
    let (work, res) = tokio::task::spawn_blocking(move || {
        let r = sandbox_run::stop(&c, &mut work);
        (work, r)
    })
    .await
    .map_err(Error::internal)?;
    // Whatever got done is recorded, also when a later part failed.
    crust.store.save(&work)?;
    *rec = work;
    res
}

pub async fn remove(crust: Arc<Crust>, id: &str) -> Result<()> {
    let sb = match crust.store.get(id) {
        Ok(sb) => sb,
        Err(Error::NotFound(_)) => return Ok(()),
        Err(e) => return Err(e),
    };
    let mut rec = sb.rec.lock().await;
    let mut work = rec.clone();
    let c = crust.clone();
    let (work, res) = tokio::task::spawn_blocking(move || {
        let r = sandbox_run::teardown(&c, &mut work);
        (work, r)
    })
    .await
    .map_err(Error::internal)?;
    match res {
        Ok(()) => {
            crust.store.remove(&work.id);
            crust.store.release_name(&work.name_key(), &work.id);
            *rec = work;
            Ok(())
        }
        Err(e) => {
            let _ = crust.store.save(&work);
            *rec = work;
            Err(e)
        }
    }
}
