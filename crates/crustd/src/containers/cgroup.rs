//! The container's cgroup: where it goes (beside the pause's, under the pod-level
//! cgroup), the limits CreateContainer and UpdateContainerResources write into it, the
//! path an external OCI runtime is given, and the files the init joins and the monitor
//! watches for OOM kills.

use crate::containers::store::ContainerRecord;
use crate::cri::error::{Error, Result};
use crate::daemon::Crust;
use crate::sandboxes::store::SandboxRecord;
use cgroups::CgroupManager;
use cri_api::*;
use std::path::PathBuf;

/// cgroups errors: a limit the kernel refuses is the caller's fault.
pub(super) fn cgroup_err(what: String) -> impl FnOnce(cgroups::Error) -> Error {
    move |e| match e {
        cgroups::Error::Limit { .. } | cgroups::Error::Unsupported { .. } => {
            Error::InvalidArgument(format!("{what}: {e}"))
        }
        e => Error::Internal(format!("{what}: {e}")),
    }
}

/// The container cgroup as an external runtime's `cgroupsPath`: runc and crun take a
/// relative path as relative to their own cgroup in each hierarchy, which is crustd's
/// (they run as its descendants), so with `cgroup.nested` the logical path without its
/// leading `/` names exactly the cgroup crustd made, in every hierarchy; otherwise the
/// absolute logical path does.
fn external_cgroup_path(crust: &Crust, cg: &str) -> String {
    if crust.cfg.cgroup.nested {
        cg.trim_start_matches('/').to_string()
    } else {
        cg.to_string()
    }
}

/// CRI resources → the cgroups crate's.
pub fn resources(r: &LinuxContainerResources) -> cgroups::Resources {
    cgroups::Resources {
        cpu_shares: (r.cpu_shares > 0).then_some(r.cpu_shares as u64),
        cpu_quota: (r.cpu_quota != 0).then_some(r.cpu_quota),
        cpu_period: (r.cpu_period > 0).then_some(r.cpu_period as u64),
        cpuset_cpus: (!r.cpuset_cpus.is_empty()).then(|| r.cpuset_cpus.clone()),
        cpuset_mems: (!r.cpuset_mems.is_empty()).then(|| r.cpuset_mems.clone()),
        memory_limit: (r.memory_limit_in_bytes > 0).then_some(r.memory_limit_in_bytes),
        memory_swap_limit: (r.memory_swap_limit_in_bytes > 0)
            .then_some(r.memory_swap_limit_in_bytes),
        hugepage_limits: r
            .hugepage_limits
            .iter()
            .map(|h| (h.page_size.clone(), h.limit))
            .collect(),
        unified: r.unified.clone().into_iter().collect(),
        ..Default::default()
    }
}

/// The limits CreateContainer and UpdateContainerResources write into the container's
/// cgroup `cg` (made already): the CRI resources, less the hugepage limits where the
/// cgroup has no hugetlb controller. The kubelet sends a limit for every page size the
/// kernel has (0 when the pod asks for none) whether or not the node has the
/// controller, so refusing them would fail every pod on such a node; containerd leaves
/// them out by default too. With `cgroup.require_hugetlb` they are refused instead.
pub(super) fn cgroup_resources(
    crust: &Crust,
    what: &str,
    cg: &cgroups::CgroupPath,
    r: &LinuxContainerResources,
) -> Result<cgroups::Resources> {
    let mut res = resources(r);
    let has = res.hugepage_limits.is_empty() || crust.cgroups.has_controller("hugetlb", cg);
    hugepages_without_hugetlb(
        &mut res,
        has,
        crust.cfg.cgroup.require_hugetlb,
        crust.hugetlb_missing.as_deref(),
        what,
        cg,
    )?;
    Ok(res)
}

/// [`cgroup_resources`]' decision: nothing to do when the cgroup has hugetlb (or no
/// limit names it); else the limits are dropped, or refused naming the key that asks
/// for them. `why` is the node's reason found at start, when it has one.
fn hugepages_without_hugetlb(
    res: &mut cgroups::Resources,
    has_hugetlb: bool,
    require: bool,
    why: Option<&str>,
    what: &str,
    cg: &cgroups::CgroupPath,
) -> Result<()> {
    if has_hugetlb || res.hugepage_limits.is_empty() {
        return Ok(());
    }
    let sizes: Vec<&str> = res.hugepage_limits.keys().map(String::as_str).collect();
    let sizes = sizes.join(", ");
    if require {
        let why = why.map(|w| format!(": {w}")).unwrap_or_default();
        return Err(Error::FailedPrecondition(format!(
            "{what}: hugepage limits ({sizes}) need the hugetlb cgroup controller and cgroup \
             {cg} has none{why}; refused because cgroup.require_hugetlb is set (set it to \
             false to run such containers without hugepage limits)"
        )));
    }
    // Said once at start (daemon.rs); per container only at debug.
    tracing::debug!(%cg, sizes, "no hugetlb controller: hugepage limits not applied");
    res.hugepage_limits.clear();
    Ok(())
}

/// Whether the container's memory cgroup has a swap limit file (v1
/// `memory.memsw.limit_in_bytes`, v2 `memory.swap.max`).
pub(super) fn swap_accounting(crust: &Crust, cg: &cgroups::CgroupPath) -> bool {
    let file = match crust.cgroups.version() {
        cgroups::Version::V1 => "memory.memsw.limit_in_bytes",
        cgroups::Version::V2 => "memory.swap.max",
    };
    crust
        .cgroups
        .dir("memory", cg)
        .is_some_and(|d| d.join(file).exists())
}

/// The spec's `cgroupsPath`: an external runtime takes it as a path in each hierarchy,
/// the executor as the record has it.
pub(super) fn spec_cgroup(
    crust: &Crust,
    external: bool,
    cgroup: &Option<String>,
) -> Option<String> {
    match (external, cgroup) {
        (true, Some(cg)) => Some(external_cgroup_path(crust, cg)),
        (_, cg) => cg.clone(),
    }
}

/// The container's cgroup: beside the pause's, under the pod-level cgroup (noted in
/// the record); none for a sandbox without one.
pub(super) fn container_cgroup(
    crust: &Crust,
    sb: &SandboxRecord,
    rec: &mut ContainerRecord,
) -> Result<Option<cgroups::CgroupPath>> {
    let id = rec.id.clone();
    Ok(
        match sb
            .cgroup
            .as_deref()
            .and_then(crate::daemon::Crust::pod_level_cgroup)
        {
            Some(pod_cg) => {
                let cg_s = format!(
                    "{}/{}",
                    pod_cg.to_string().trim_end_matches('/'),
                    crust.cgroup_leaf(&id)
                );
                let cg = cgroups::CgroupPath::new(&cg_s)
                    .map_err(|e| Error::Internal(format!("container cgroup {cg_s}: {e}")))?;
                rec.cgroup = Some(cg_s);
                Some(cg)
            }
            None => None,
        },
    )
}

/// The container cgroup's directories (the init joins them) and the file whose change
/// tells of an OOM kill.
pub(super) fn cgroup_watch(
    crust: &Crust,
    cg: Option<&cgroups::CgroupPath>,
) -> (Vec<PathBuf>, Option<PathBuf>) {
    let mut cgroup_dirs: Vec<PathBuf> = vec![];
    let mut oom_events = None;
    if let Some(cg) = cg {
        cgroup_dirs = crust.cgroups.dirs(cg);
        oom_events = crust.cgroups.dir("memory", cg).map(|d| {
            d.join(match crust.cgroups.version() {
                cgroups::Version::V2 => "memory.events",
                cgroups::Version::V1 => "memory.oom_control",
            })
        });
    }
    (cgroup_dirs, oom_events)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The kubelet's hugepage limits where the cgroup has no hugetlb controller: left
    /// out by default, refused naming the key with `cgroup.require_hugetlb`, applied
    /// where the controller is.
    #[test]
    fn hugepage_limits_without_hugetlb() {
        let cg = cgroups::CgroupPath::new("/kubepods/pod1/c1").unwrap();
        let r = LinuxContainerResources {
            cpu_shares: 2,
            cpu_period: 100_000,
            hugepage_limits: vec![
                HugepageLimit {
                    page_size: "2MB".into(),
                    limit: 0,
                },
                HugepageLimit {
                    page_size: "1GB".into(),
                    limit: 0,
                },
            ],
            ..Default::default()
        };
        let full = resources(&r);
        assert_eq!(full.hugepage_limits.len(), 2);

        // The controller is there: as asked, for both settings of the key.
        for require in [false, true] {
            let mut res = full.clone();
            hugepages_without_hugetlb(&mut res, true, require, None, "c1", &cg).unwrap();
            assert_eq!(res, full);
        }
        // Not there: dropped, everything else kept.
        let mut res = full.clone();
        hugepages_without_hugetlb(&mut res, false, false, Some("why"), "c1", &cg).unwrap();
        assert!(res.hugepage_limits.is_empty());
        assert_eq!((res.cpu_shares, res.cpu_period), (Some(2), Some(100_000)));
        // Required: refused, naming the sizes, the cgroup, the reason and the key.
        let mut res = full.clone();
        let e = hugepages_without_hugetlb(
            &mut res,
            false,
            true,
            Some("no hugetlb hierarchy"),
            "container resources of c1",
            &cg,
        )
        .unwrap_err();
        assert!(matches!(e, Error::FailedPrecondition(_)), "{e}");
        let text = e.to_string();
        for part in [
            "container resources of c1: hugepage limits (1GB, 2MB)",
            "cgroup /kubepods/pod1/c1 has none: no hugetlb hierarchy",
            "cgroup.require_hugetlb is set",
        ] {
            assert!(text.contains(part), "{part:?} in {text}");
        }
        // No limits asked: nothing to refuse, whatever the node.
        let mut res = resources(&LinuxContainerResources::default());
        hugepages_without_hugetlb(&mut res, false, true, None, "c1", &cg).unwrap();
    }
}
