//! UpdateContainerResources: new limits into the container's cgroup, and into its record.

use crate::containers::cgroup::{cgroup_err, cgroup_resources};
use crate::containers::lifecycle::refresh;
use crate::containers::store::ContainerState;
use crate::cri::error::{Error, Result};
use crate::daemon::util;
use crate::daemon::Crust;
use cgroups::CgroupManager;
use cri_api::*;
use prost::Message;
use std::sync::Arc;

pub async fn update_resources(
    crust: Arc<Crust>,
    id: &str,
    r: Option<LinuxContainerResources>,
) -> Result<()> {
    let c = crust.containers.get(id)?;
    let mut rec = c.rec.lock().await;
    refresh(&crust, &mut rec);
    if !matches!(rec.state, ContainerState::Created | ContainerState::Running) {
        return Err(Error::FailedPrecondition(format!(
            "container {} is {:?}: only a created or running container can be updated",
            rec.id, rec.state
        )));
    }
    let Some(r) = r else {
        return Ok(());
    };
    if let Some(cg) = &rec.cgroup {
        let path = cgroups::CgroupPath::new(cg)
            .map_err(|e| Error::Internal(format!("recorded cgroup {cg:?}: {e}")))?;
        let what = format!("updating the resources of {}", rec.id);
        let res = cgroup_resources(&crust, &what, &path, &r)?;
        crust.cgroups.apply(&path, &res).map_err(cgroup_err(what))?;
    }
    rec.resources_pb = util::HexBytes(r.encode_to_vec());
    crust.containers.save(&rec)
}
