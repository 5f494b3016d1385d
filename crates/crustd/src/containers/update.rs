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
    // NRI plugins hear of it first (and may refuse it), then after it is done.
    let nri = match crust.nri.get() {
        Some(nri) => {
            let c = crust.containers.get(id)?;
            let rec = c.rec.lock().await.clone();
            let pod = crate::nri::convert::pod_id(&rec.sandbox_id);
            let ctr = crate::nri::convert::container(&rec, None);
            nri.emit(
                crate::nri::api::Event::UpdateContainer,
                pod.clone(),
                Some(ctr.clone()),
                r.as_ref().map(crate::nri::convert::resources),
            )
            .await
            .map_err(Error::FailedPrecondition)?;
            Some((pod, ctr))
        }
        None => None,
    };
    apply(crust.clone(), id, r).await?;
    if let Some((pod, ctr)) = nri {
        crate::nri::convert::notify(
            &crust,
            crate::nri::api::Event::PostUpdateContainer,
            pod,
            Some(ctr),
        );
    }
    Ok(())
}

/// An NRI plugin's update of a container's resources (its UpdateContainers): the
/// container's recorded resources with the plugin's fields over them. No NRI event:
/// the plugin asked for it.
pub async fn apply_nri(
    crust: Arc<Crust>,
    id: &str,
    n: &crate::nri::api::LinuxResources,
) -> Result<()> {
    let c = crust.containers.get(id)?;
    let mut r = {
        let rec = c.rec.lock().await;
        LinuxContainerResources::decode(rec.resources_pb.0.as_slice()).unwrap_or_default()
    };
    if let Some(m) = &n.memory {
        if let Some(v) = m.limit {
            r.memory_limit_in_bytes = v.value;
        }
        if let Some(v) = m.swap {
            r.memory_swap_limit_in_bytes = v.value;
        }
    }
    if let Some(cpu) = &n.cpu {
        if let Some(v) = cpu.shares {
            r.cpu_shares = v.value as i64;
        }
        if let Some(v) = cpu.quota {
            r.cpu_quota = v.value;
        }
        if let Some(v) = cpu.period {
            r.cpu_period = v.value as i64;
        }
        if !cpu.cpus.is_empty() {
            r.cpuset_cpus = cpu.cpus.clone();
        }
        if !cpu.mems.is_empty() {
            r.cpuset_mems = cpu.mems.clone();
        }
    }
    r.unified.extend(n.unified.clone());
    apply(crust, id, Some(r)).await
}

/// The update itself: into the cgroup and the record.
async fn apply(crust: Arc<Crust>, id: &str, r: Option<LinuxContainerResources>) -> Result<()> {
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
