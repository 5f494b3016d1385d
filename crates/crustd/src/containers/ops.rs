//! The container RPCs: Create, Start, Stop, Remove, Status, List, UpdateContainerResources
//! and ReopenContainerLog (ExecSync is in `container_exec.rs`).
//!
//! CreateContainer: validate → name reserved → record `creating` on disk → image
//! snapshot → container cgroup under the pod's, with its resources → OCI spec in the
//! bundle → the executor creates the init under a monitor (see `container::executor`)
//! → record `created`. A failed step undoes every earlier one.
//!
//! The monitor is crustd's child while crustd lives (a task per container waits on its
//! pidfd and reaps it), and outlives crustd otherwise; what it writes into the exit
//! record is folded into the container's record by [`refresh`], which every RPC that
//! reports state runs first.

use crate::containers::spec::{self, ImageInfo, SpecInput};
use crate::containers::store::{
    name_key, Container, ContainerRecord, ContainerState, RECORD_VERSION,
};
use crate::cri::error::{Error, Result};
use crate::daemon::failpoint::failpoint;
use crate::daemon::util;
use crate::daemon::Crust;
use crate::sandboxes::store::{SandboxRecord, SandboxState};
use cgroups::CgroupManager;
use container::executor::{self, oci_runtime, CreateOpts, MonitorOpts, RootfsMount, Step};
use cri_api::*;
use prost::Message;
use std::os::fd::AsFd;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How long a SIGKILLed container may take to be reported gone.
const KILL_WAIT: Duration = Duration::from_secs(10);

use container::proc::start_time;

fn monitor_alive(rec: &ContainerRecord) -> bool {
    container::proc::alive(rec.monitor_pid, rec.monitor_start_time)
}

/// cgroups errors: a limit the kernel refuses is the caller's fault.
fn cgroup_err(what: String) -> impl FnOnce(cgroups::Error) -> Error {
    move |e| match e {
        cgroups::Error::Limit { .. } | cgroups::Error::Unsupported { .. } => {
            Error::InvalidArgument(format!("{what}: {e}"))
        }
        e => Error::Internal(format!("{what}: {e}")),
    }
}

/// The executor's errors: those caused by the request (a missing binary or working
/// directory, a bad mount source) are InvalidArgument; the rest Internal.
fn create_err(e: container::Error) -> Error {
    use Step::*;
    match &e {
        container::Error::Create {
            step:
                Executable | Cwd | Mount | MountTarget | Device | Setuid | Setgid | Setgroups | Seccomp,
            ..
        }
        | container::Error::InvalidSpec { .. } => Error::InvalidArgument(e.to_string()),
        _ => Error::Internal(e.to_string()),
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
fn cgroup_resources(
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

/// The container config as the spec gets it, for what an OCI runtime (runc, crun)
/// applies again from the bundle: no swap limit where the cgroup has no swap
/// accounting (runc fails writing the missing file, where crust's own cgroup code
/// skips it; containerd leaves it out there too), and an `oom_score_adj` below
/// crustd's own raised to it when crustd may not lower it (no `CAP_SYS_RESOURCE`, as
/// on these machines), as containerd's `restrict_oom_score_adj` does, where runc
/// would fail the container.
fn spec_config(
    crust: &Crust,
    cfg: &ContainerConfig,
    cg: Option<&cgroups::CgroupPath>,
) -> ContainerConfig {
    let mut cfg = cfg.clone();
    let Some(r) = cfg.linux.as_mut().and_then(|l| l.resources.as_mut()) else {
        return cfg;
    };
    if r.memory_swap_limit_in_bytes != 0 && !cg.is_some_and(|cg| swap_accounting(crust, cg)) {
        r.memory_swap_limit_in_bytes = 0;
    }
    if !util::has_cap_sys_resource() {
        let own = util::own_oom_score_adj();
        if r.oom_score_adj < own {
            tracing::debug!(
                asked = r.oom_score_adj,
                own,
                "no CAP_SYS_RESOURCE: oom_score_adj raised to crustd's own"
            );
            r.oom_score_adj = own;
        }
    }
    cfg
}

/// Whether the container's memory cgroup has a swap limit file (v1
/// `memory.memsw.limit_in_bytes`, v2 `memory.swap.max`).
fn swap_accounting(crust: &Crust, cg: &cgroups::CgroupPath) -> bool {
    let file = match crust.cgroups.version() {
        cgroups::Version::V1 => "memory.memsw.limit_in_bytes",
        cgroups::Version::V2 => "memory.swap.max",
    };
    crust
        .cgroups
        .dir("memory", cg)
        .is_some_and(|d| d.join(file).exists())
}

pub async fn create(crust: Arc<Crust>, req: CreateContainerRequest) -> Result<String> {
    let cfg = req
        .config
        .ok_or_else(|| Error::InvalidArgument("container config is required".into()))?;
    let (md, image_ref) = checked_request(&cfg)?;
    let sb = crust.store.get(&req.pod_sandbox_id)?;
    // Held while the container is made: StopPodSandbox and RemovePodSandbox wait.
    let sb_rec = sb.rec.lock().await;
    if sb_rec.state != SandboxState::Ready {
        return Err(Error::FailedPrecondition(format!(
            "sandbox {} is not ready",
            sb_rec.id
        )));
    }
    let image = crust
        .images
        .resolve(&image_ref)
        .ok_or_else(|| Error::NotFound(format!("image {image_ref:?} not found")))?;
    let key = name_key(
        &md.name,
        &sb_rec.name,
        &sb_rec.namespace,
        &sb_rec.uid,
        md.attempt,
    );
    let id = util::new_id();
    crust.containers.reserve_name(&key, &id)?;
    let kept = config_with_image_volume_refs(&crust, &cfg);
    let mut rec = new_record(&kept, &md, &image, &sb_rec, &key, &id, &image_ref);
    let sb_copy = sb_rec.clone();
    let c = crust.clone();
    let img_cfg = image.config.clone();
    let (rec, res) = tokio::task::spawn_blocking(move || {
        let r = make(&c, &sb_copy, &cfg, &img_cfg, &mut rec).and_then(|()| touch_log(&rec));
        (rec, r)
    })
    .await
    .map_err(Error::internal)?;
    // The sandbox's lock is held until the container is in the store (or rolled back):
    // StopPodSandbox and RemovePodSandbox take the pod's containers under it, and must
    // not miss one made just before they got it.
    let res = match res {
        Ok(()) => {
            crust
                .events
                .emit_container(&crust, &rec, ContainerEventType::ContainerCreatedEvent);
            let c = crust.containers.insert(rec);
            watch(crust, c);
            Ok(id)
        }
        Err(e) => Err(roll_back(&crust, rec, &key, &id, e).await),
    };
    drop(sb_rec);
    res
}

/// The request's metadata and image, after the checks CreateContainer makes first.
fn checked_request(cfg: &ContainerConfig) -> Result<(ContainerMetadata, String)> {
    let md = cfg
        .metadata
        .clone()
        .ok_or_else(|| Error::InvalidArgument("container metadata is required".into()))?;
    if md.name.is_empty() {
        return Err(Error::InvalidArgument(
            "container metadata.name is empty".into(),
        ));
    }
    let image_ref = cfg
        .image
        .as_ref()
        .map(|i| i.image.clone())
        .unwrap_or_default();
    if image_ref.is_empty() {
        return Err(Error::InvalidArgument("container image is empty".into()));
    }
    crate::cri::validate::labels("label", cfg.labels.keys())?;
    crate::cri::validate::labels("annotation", cfg.annotations.keys())?;
    Ok((md, image_ref))
}

/// The record of a container being made (`creating`), from its request and image.
fn new_record(
    cfg: &ContainerConfig,
    md: &ContainerMetadata,
    image: &image::Image,
    sb_rec: &SandboxRecord,
    key: &str,
    id: &str,
    image_ref: &str,
) -> ContainerRecord {
    let stop_signal = if image.config.stop_signal.is_empty() {
        "SIGTERM".to_string()
    } else {
        image.config.stop_signal.clone()
    };
    ContainerRecord {
        version: RECORD_VERSION,
        id: id.to_string(),
        sandbox_id: sb_rec.id.clone(),
        state: ContainerState::Creating,
        name: md.name.clone(),
        attempt: md.attempt,
        name_key: key.to_string(),
        labels: cfg.labels.clone().into_iter().collect(),
        annotations: cfg.annotations.clone().into_iter().collect(),
        image: image_ref.to_string(),
        image_id: image.id.clone(),
        image_name: image
            .repo_tags
            .first()
            .or(image.repo_digests.first())
            .cloned()
            .unwrap_or_else(|| image.id.clone()),
        created_at: util::now_ns(),
        started_at: 0,
        finished_at: 0,
        exit_code: 0,
        reason: String::new(),
        message: String::new(),
        log_path: None,
        config_pb: util::hex(&cfg.encode_to_vec()),
        resources_pb: cfg
            .linux
            .as_ref()
            .and_then(|l| l.resources.as_ref())
            .map(|r| util::hex(&r.encode_to_vec()))
            .unwrap_or_default(),
        cgroup: None,
        snapshot: false,
        pid: 0,
        monitor_pid: 0,
        monitor_start_time: 0,
        stop_signal,
        pid_start_time: 0,
        runtime: String::new(),
        rootfs_mounted: false,
    }
}

/// Undoes a CreateContainer that failed; what cannot be undone is kept as an exited
/// container with reason `CreateFailed`. The error to return.
async fn roll_back(
    crust: &Arc<Crust>,
    rec: ContainerRecord,
    key: &str,
    id: &str,
    e: Error,
) -> Error {
    let c2 = crust.clone();
    let mut rec = rec;
    let undo = tokio::task::spawn_blocking(move || {
        let r = teardown(&c2, &mut rec);
        (rec, r)
    })
    .await;
    let undo = match undo {
        Ok(u) => u,
        Err(join) => return Error::internal(join),
    };
    match undo {
        (_, Ok(())) => crust.containers.release_name(key, id),
        (mut rec, Err(u)) => {
            tracing::error!(container = %id, error = %u, "rolling back a failed CreateContainer left something behind; keeping it as exited");
            rec.state = ContainerState::Exited;
            rec.reason = "CreateFailed".into();
            rec.message = e.to_string();
            let _ = crust.containers.save(&rec);
            crust.containers.insert(rec);
        }
    }
    e
}

/// The container's writable snapshot over the image, and its CRI log path (its
/// directory made).
fn prepare_rootfs_and_log(
    crust: &Crust,
    sb_cfg: &PodSandboxConfig,
    cfg: &ContainerConfig,
    rec: &mut ContainerRecord,
) -> Result<image::Snapshot> {
    let id = rec.id.clone();
    let snap = crust
        .images
        .prepare_snapshot(&id, &rec.image_id)
        .map_err(|e| Error::Internal(format!("preparing the root filesystem of {id}: {e}")))?;
    rec.snapshot = true;
    if !cfg.log_path.is_empty() {
        if sb_cfg.log_directory.is_empty() {
            return Err(Error::InvalidArgument(format!(
                "log_path {:?} given but the sandbox has no log_directory",
                cfg.log_path
            )));
        }
        let p = log_file(Path::new(&sb_cfg.log_directory), &cfg.log_path)?;
        rec.log_path = Some(p);
    }
    Ok(snap)
}

/// A pod with its own user namespace: the writable layer's root belongs to the
/// container's root (the overlay's `/` takes its owner and mode from it). Files the
/// container writes land there with their host ids.
fn own_upper(snap: &image::Snapshot, m: &crate::sandboxes::userns::PodMaps) -> Result<()> {
    let (uid, gid) = m.host_root();
    std::os::unix::fs::chown(&snap.upperdir, Some(uid), Some(gid)).map_err(|e| {
        Error::Internal(format!(
            "giving {} to the pod's root ({uid}:{gid}): {e}",
            snap.upperdir.display()
        ))
    })
}

/// The blocking part of CreateContainer; on error the caller runs [`teardown`].
fn make(
    crust: &Crust,
    sb: &SandboxRecord,
    cfg: &ContainerConfig,
    img: &image::ImageConfig,
    rec: &mut ContainerRecord,
) -> Result<()> {
    let id = rec.id.clone();
    let bundle = make_bundle(crust, &id)?;
    // Cumulative times of the steps, logged at debug: where a slow create spends it.
    let t0 = Instant::now();
    let cg = container_cgroup(crust, sb, rec)?;
    crust.containers.save_unsynced(rec)?;
    failpoint!("create_container.after_record");
    let t_saved = t0.elapsed();

    let sb_cfg = sb.config().unwrap_or_default();
    let userns = pod_userns(&sb_cfg, cfg)?;
    let snap = cgroup_and_rootfs(crust, cg.as_ref(), &sb_cfg, cfg, rec)?;
    if let Some(m) = &userns {
        own_upper(&snap, m)?;
    }
    let image_volumes = image_volumes(crust, &id, cfg)?;
    failpoint!("create_container.after_rootfs");
    let t_snap = t0.elapsed();
    let (cgroup_dirs, oom_events) = cgroup_watch(crust, cg.as_ref());

    let target_pid_ns = target_pid_ns(crust, cfg)?;
    let info = image_info(img, &snap);
    let external = crust.oci_runtimes.get(&sb.runtime_handler).cloned();
    let cgroup_for_spec = spec_cgroup(crust, external.is_some(), &rec.cgroup);
    let hostname = pod_hostname(crust, sb, &sb_cfg);
    let t_cgroup = t0.elapsed();
    let spec = spec::build(
        &spec_config(crust, cfg, cg.as_ref()),
        &SpecInput {
            id: &id,
            sandbox: sb,
            pod_dir: &crust.store.sandbox_dir(&sb.id),
            hostname,
            image: &info,
            cgroup: cgroup_for_spec.as_deref(),
            cgroupns: crust.cgroups.version() == cgroups::Version::V2,
            target_pid_ns,
            image_volumes,
            recursive_read_only: crust.recursive_read_only(&sb.runtime_handler),
            userns,
        },
    )?;
    write_spec(&bundle, &spec)?;
    failpoint!("create_container.after_spec");

    let monitor = monitor_opts(crust, &id, rec, cfg, oom_events)?;
    // Whatever held a new cgroup (the systemd driver's placeholder) goes once the
    // init is in it, or the create failed.
    let joined = || {
        if let Some(cg) = &cg {
            crust.cgroups.joined(cg);
        }
    };
    if let Some(rt) = external {
        let r = create_external(crust, sb, &rt, rec, &bundle, &snap, &monitor, cfg.tty);
        joined();
        return r;
    }
    let mut opts = CreateOpts::new(&id, &bundle, spec, crust.containers.exec_state(&id));
    opts.rootfs_mount = Some(rootfs_mount(&snap, userns.is_some()));
    opts.cgroup_dirs = cgroup_dirs;
    opts.monitor = Some(monitor);
    opts.on_init = Some(created_record_hook(crust, rec));
    let t_spec = t0.elapsed();
    let c = executor::create(opts).map_err(create_err);
    joined();
    let c = c?;
    failpoint!("create_container.after_init");
    let t_exec = t0.elapsed();
    tracing::debug!(container = %id, ?t_saved, ?t_snap, ?t_cgroup, ?t_spec, ?t_exec, "create phases");
    // What the hook wrote, in memory too.
    mark_created(
        rec,
        &executor::InitInfo {
            pid: c.pid,
            start_time: c.start_time,
            monitor: c.monitor,
        },
    );
    Ok(())
}

/// The container's bundle directory with an empty `rootfs`, which the executor (or an
/// external runtime) mounts the snapshot on.
fn make_bundle(crust: &Crust, id: &str) -> Result<PathBuf> {
    let bundle = crust.containers.bundle(id);
    std::fs::create_dir_all(bundle.join("rootfs"))
        .map_err(|e| Error::Internal(format!("creating bundle {}: {e}", bundle.display())))?;
    Ok(bundle)
}

/// The pod's user namespace maps, when it has one; a container's own user namespace
/// options must be its pod's, refused before anything is made for it.
fn pod_userns(
    sb_cfg: &PodSandboxConfig,
    cfg: &ContainerConfig,
) -> Result<Option<crate::sandboxes::userns::PodMaps>> {
    let pod_ns = sb_cfg
        .linux
        .as_ref()
        .and_then(|l| l.security_context.as_ref())
        .and_then(|s| s.namespace_options.as_ref());
    let userns = crate::sandboxes::userns::of_options(pod_ns)?;
    crate::sandboxes::userns::check_container(
        pod_ns.and_then(|n| n.userns_options.as_ref()),
        cfg.linux
            .as_ref()
            .and_then(|l| l.security_context.as_ref())
            .and_then(|s| s.namespace_options.as_ref())
            .and_then(|n| n.userns_options.as_ref()),
    )?;
    Ok(userns)
}

/// What the spec takes from the image, with the snapshot's layers.
fn image_info(img: &image::ImageConfig, snap: &image::Snapshot) -> ImageInfo {
    ImageInfo {
        entrypoint: img.entrypoint.clone(),
        cmd: img.cmd.clone(),
        env: img.env.clone(),
        working_dir: img.working_dir.clone(),
        user: img.user.clone(),
        layers: snap.lowerdirs.clone(),
    }
}

/// The spec's `cgroupsPath`: an external runtime takes it as a path in each hierarchy,
/// the executor as the record has it.
fn spec_cgroup(crust: &Crust, external: bool, cgroup: &Option<String>) -> Option<String> {
    match (external, cgroup) {
        (true, Some(cg)) => Some(external_cgroup_path(crust, cg)),
        (_, cg) => cg.clone(),
    }
}

/// The hostname the pod's files were written with (the sandbox's `hostname` file), so
/// that every container of the pod agrees with them; the config's when it is missing.
fn pod_hostname(crust: &Crust, sb: &SandboxRecord, sb_cfg: &PodSandboxConfig) -> String {
    std::fs::read_to_string(crust.store.sandbox_dir(&sb.id).join("hostname"))
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|_| sb_cfg.hostname.clone())
}

/// Writes the bundle's `config.json`. Not synced: a crash before the record says
/// `created` rolls the container back, and the page cache outlives crustd itself.
fn write_spec(bundle: &Path, spec: &oci_spec::runtime::Spec) -> Result<()> {
    let json = serde_json::to_vec_pretty(spec).map_err(Error::internal)?;
    std::fs::write(bundle.join("config.json"), &json)
        .map_err(|e| Error::Internal(format!("writing {}/config.json: {e}", bundle.display())))
}

/// How the container's monitor runs: its exit record's directory made now, so the
/// monitor can always leave the record there.
fn monitor_opts(
    crust: &Crust,
    id: &str,
    rec: &ContainerRecord,
    cfg: &ContainerConfig,
    oom_events: Option<PathBuf>,
) -> Result<MonitorOpts> {
    let exit_file = crust.containers.exit_file(id);
    if let Some(dir) = exit_file.parent() {
        std::fs::create_dir_all(dir)
            .map_err(|e| Error::Internal(format!("creating {}: {e}", dir.display())))?;
    }
    Ok(MonitorOpts {
        binary: crust.monitor_bin.clone(),
        exit_file,
        log: rec.log_path.clone(),
        oom_events,
        stdin: cfg.stdin,
        stdin_once: cfg.stdin && cfg.stdin_once,
        // Every container gets the socket a later attach connects to.
        attach: true,
    })
}

/// The overlay the executor mounts as the container's root.
fn rootfs_mount(snap: &image::Snapshot, userns: bool) -> RootfsMount {
    let mut rootfs_options = snap.overlay_options();
    if userns {
        // Each image layer id-mapped with the pod's user namespace (see the
        // executor's rootfs.rs): the image's root owns its files inside.
        rootfs_options.push("idmap".into());
    }
    RootfsMount {
        fstype: "overlay".into(),
        source: "overlay".into(),
        options: rootfs_options,
    }
}

/// The Created record reaches the disk while the init mounts (the fsync is the
/// slowest part of this RPC after the init's own work); a create that fails after it
/// is torn down by the caller like any other.
fn created_record_hook(crust: &Crust, rec: &ContainerRecord) -> executor::OnInit {
    let path = crust.containers.record_path(&rec.id);
    let mut early = rec.clone();
    executor::OnInit(Box::new(move |init| {
        mark_created(&mut early, &init);
        let written =
            crate::containers::store::write_record(&path, &early).map_err(std::io::Error::other);
        failpoint!("create_container.after_created_record");
        written
    }))
}

/// The container's cgroup: beside the pause's, under the pod-level cgroup (noted in
/// the record); none for a sandbox without one.
fn container_cgroup(
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

/// The container's cgroup with its limits, made while the root filesystem's snapshot
/// and the log path are prepared; the snapshot.
fn cgroup_and_rootfs(
    crust: &Crust,
    cg: Option<&cgroups::CgroupPath>,
    sb_cfg: &PodSandboxConfig,
    cfg: &ContainerConfig,
    rec: &mut ContainerRecord,
) -> Result<image::Snapshot> {
    let id = rec.id.clone();
    // The cgroup (a dozen mkdirs and limit writes on v1) is made while the snapshot
    // and the log path are prepared.
    let resources_wanted = rec.resources();
    let make_cgroup = || -> Result<()> {
        let Some(cg) = cg else { return Ok(()) };
        crust
            .cgroups
            .create(cg)
            .map_err(cgroup_err(format!("creating cgroup {cg}")))?;
        if let Some(r) = &resources_wanted {
            let what = format!("container resources of {id}");
            let res = cgroup_resources(crust, &what, cg, r)?;
            crust.cgroups.apply(cg, &res).map_err(cgroup_err(what))?;
        }
        Ok(())
    };
    let (made_cgroup, prepared) = util::beside(make_cgroup, || {
        prepare_rootfs_and_log(crust, sb_cfg, cfg, rec)
    });
    let snap = prepared?;
    made_cgroup?;
    Ok(snap)
}

/// The image volumes among the request's mounts, by their index, prepared.
fn image_volumes(
    crust: &Crust,
    id: &str,
    cfg: &ContainerConfig,
) -> Result<std::collections::HashMap<usize, serde_json::Value>> {
    let mut image_volumes = std::collections::HashMap::new();
    for (i, m) in cfg.mounts.iter().enumerate() {
        if crate::containers::image_volume::wanted(m) {
            image_volumes.insert(
                i,
                crate::containers::image_volume::prepare(crust, id, i, m)?,
            );
        }
    }
    Ok(image_volumes)
}

/// The container cgroup's directories (the init joins them) and the file whose change
/// tells of an OOM kill.
fn cgroup_watch(
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

/// The PID namespace of the target container, for a request in TARGET mode.
fn target_pid_ns(crust: &Crust, cfg: &ContainerConfig) -> Result<Option<PathBuf>> {
    Ok({
        let ns = cfg
            .linux
            .as_ref()
            .and_then(|l| l.security_context.as_ref())
            .and_then(|s| s.namespace_options.as_ref());
        match ns {
            Some(n) if n.pid == NamespaceMode::Target as i32 => {
                let t = crust.containers.get(&n.target_id).map_err(|_| {
                    Error::NotFound(format!("target container {:?} not found", n.target_id))
                })?;
                let t = t.rec.view();
                (t.pid > 0).then(|| PathBuf::from(format!("/proc/{}/ns/pid", t.pid)))
            }
            _ => None,
        }
    })
}

/// CreateContainer through an external OCI runtime (runc): the root file system mounted
/// here, the rest the runtime's.
#[allow(clippy::too_many_arguments)]
fn create_external(
    crust: &Crust,
    sb: &SandboxRecord,
    rt: &oci_runtime::OciRuntime,
    rec: &mut ContainerRecord,
    bundle: &Path,
    snap: &image::Snapshot,
    monitor: &MonitorOpts,
    tty: bool,
) -> Result<()> {
    let id = rec.id.clone();
    rec.runtime = sb.runtime_handler.clone();
    rec.rootfs_mounted = true;
    crust.containers.save(rec)?;
    oci_runtime::mount_rootfs(&bundle.join("rootfs"), &snap.overlay_options())
        .map_err(|e| Error::Internal(format!("mounting the root file system of {id}: {e}")))?;
    let c = rt
        .create(&id, bundle, monitor, tty)
        .map_err(|e| Error::InvalidArgument(format!("{} create: {e}", sb.runtime_handler)))?;
    mark_created(
        rec,
        &executor::InitInfo {
            pid: c.pid,
            start_time: start_time(c.pid).unwrap_or(0),
            monitor: Some(c.monitor),
        },
    );
    crust.containers.save(rec)
}

/// The host path of a container's CRI log, `log_path` under the pod's `log_directory`,
/// with its folders made. The log is written by the monitor as root, so it must stay
/// in the log directory: a `log_path` that is absolute or has `..` is refused (the
/// kubelet sends `<container>/<attempt>.log`; `join` would put an absolute one anywhere
/// and `..` leads out), and so is a folder on the way that is a symlink (one planted by
/// whatever can write the pod's log folder, say a container with it as a volume). The
/// file itself is opened with `O_NOFOLLOW` by [`touch_log`] and the monitor.
fn log_file(log_directory: &Path, log_path: &str) -> Result<std::path::PathBuf> {
    use std::path::Component;
    let rel = Path::new(log_path);
    if !rel
        .components()
        .all(|c| matches!(c, Component::Normal(_) | Component::CurDir))
    {
        return Err(Error::InvalidArgument(format!(
            "log_path {log_path:?} must be a relative path without '..'"
        )));
    }
    std::fs::create_dir_all(log_directory).map_err(|e| {
        Error::InvalidArgument(format!("log directory {}: {e}", log_directory.display()))
    })?;
    let mut dir = log_directory.to_path_buf();
    for c in rel.parent().into_iter().flat_map(|p| p.components()) {
        dir.push(c);
        match std::fs::symlink_metadata(&dir) {
            Ok(m) if m.file_type().is_symlink() => {
                return Err(Error::InvalidArgument(format!(
                    "log_path {log_path:?}: {} is a symlink",
                    dir.display()
                )))
            }
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                std::fs::create_dir(&dir).map_err(|e| {
                    Error::InvalidArgument(format!("log directory {}: {e}", dir.display()))
                })?;
            }
            Err(e) => {
                return Err(Error::InvalidArgument(format!(
                    "log directory {}: {e}",
                    dir.display()
                )))
            }
        }
    }
    Ok(log_directory.join(rel))
}

/// Makes sure the CRI log file exists when CreateContainer returns. The monitor opens
/// it too, but on its own time: a client that reads the log right after
/// StartContainer (the conformance suite's log tests do) must find the file.
fn touch_log(rec: &ContainerRecord) -> Result<()> {
    use std::os::unix::fs::OpenOptionsExt;
    let Some(p) = &rec.log_path else {
        return Ok(());
    };
    std::fs::OpenOptions::new()
        .append(true)
        .create(true)
        .mode(0o640)
        // Not through a symlink put in its place (see `log_file`).
        .custom_flags(libc::O_NOFOLLOW)
        .open(p)
        .map(drop)
        .map_err(|e| match e.raw_os_error() {
            Some(libc::ELOOP) => {
                Error::InvalidArgument(format!("the log file {} is a symlink", p.display()))
            }
            _ => Error::Internal(format!("creating the log file {}: {e}", p.display())),
        })
}

/// A record's Created state: the init and its monitor, by pid and start time.
fn mark_created(rec: &mut ContainerRecord, init: &executor::InitInfo) {
    rec.pid = init.pid;
    rec.pid_start_time = init.start_time;
    rec.monitor_pid = init.monitor.unwrap_or(0);
    rec.monitor_start_time = start_time(rec.monitor_pid).unwrap_or(0);
    rec.state = ContainerState::Created;
}

/// Undoes whatever the container has: its processes, executor state, snapshot,
/// cgroup and files. Idempotent; used by RemoveContainer, failed creates and recovery.
pub fn teardown(crust: &Crust, rec: &mut ContainerRecord) -> Result<()> {
    let state_dir = crust.containers.exec_state(&rec.id);
    if let Ok(c) = executor::Container::load(&state_dir) {
        c.delete(true)
            .map_err(|e| Error::Internal(format!("deleting container {}: {e}", rec.id)))?;
        failpoint!("remove_container.after_exec_delete");
    }
    if !rec.runtime.is_empty() {
        if let Some(rt) = crust.oci_runtimes.get(&rec.runtime) {
            if let Err(e) = rt.delete(&rec.id) {
                // A container the runtime never made, or already deleted, is fine.
                if !e.to_string().contains("does not exist") {
                    return Err(Error::Internal(format!(
                        "{} delete {}: {e}",
                        rec.runtime, rec.id
                    )));
                }
            }
        }
    }
    if rec.rootfs_mounted {
        oci_runtime::unmount_rootfs(&crust.containers.bundle(&rec.id).join("rootfs"))
            .map_err(|e| Error::Internal(format!("unmounting the root of {}: {e}", rec.id)))?;
        rec.rootfs_mounted = false;
    }
    if let Some(cg) = rec.cgroup.clone() {
        let path = cgroups::CgroupPath::new(&cg)
            .map_err(|e| Error::Internal(format!("recorded cgroup {cg:?}: {e}")))?;
        if crust.cgroups.exists(&path) {
            crust
                .cgroups
                .kill_all(&path)
                .map_err(|e| Error::Internal(format!("killing what is left in {cg}: {e}")))?;
            crust
                .cgroups
                .remove(&path)
                .map_err(|e| Error::Internal(format!("removing cgroup {cg}: {e}")))?;
            failpoint!("remove_container.after_cgroup");
        }
        rec.cgroup = None;
    }
    // The monitor goes with its init. Once its exit record is in place it touches
    // nothing of the container's any more (it only syncs the folder and exits), so the
    // files can go; the watch task reaps it.
    if rec.monitor_pid > 0 {
        let exit = crust.containers.exit_file(&rec.id);
        let deadline = Instant::now() + KILL_WAIT;
        while monitor_alive(rec) && !exit.exists() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(1));
        }
    }
    if rec.snapshot {
        crust
            .images
            .remove_snapshot(&rec.id)
            .map_err(|e| Error::Internal(format!("removing the snapshot of {}: {e}", rec.id)))?;
        rec.snapshot = false;
        failpoint!("remove_container.after_snapshot");
    }
    crate::containers::image_volume::remove_all(crust, &rec.id)?;
    crust.containers.delete_files(&rec.id)?;
    failpoint!("remove_container.after_files");
    Ok(())
}

/// Folds the monitor's exit record into the container's record once the process has
/// exited; also marks a container whose monitor vanished without one (node reboot,
/// monitor killed) as exited with reason `Unknown`.
pub fn refresh(crust: &Crust, rec: &mut ContainerRecord) {
    if !matches!(rec.state, ContainerState::Created | ContainerState::Running) {
        return;
    }
    let exit = container::monitor::read_exit(&crust.containers.exit_file(&rec.id));
    match exit {
        Ok(Some(x)) => {
            rec.state = ContainerState::Exited;
            rec.exit_code = x.exit_code;
            rec.finished_at = x.finished_ns;
            rec.reason = if x.oom_killed {
                "OOMKilled"
            } else if x.exit_code == 0 {
                "Completed"
            } else {
                "Error"
            }
            .into();
        }
        Ok(None) if !monitor_alive(rec) => {
            // Read once more: the monitor may have written it just before it went.
            if let Ok(Some(_)) = container::monitor::read_exit(&crust.containers.exit_file(&rec.id))
            {
                return refresh(crust, rec);
            }
            rec.state = ContainerState::Exited;
            rec.exit_code = 255;
            rec.finished_at = util::now_ns();
            rec.reason = "Unknown".into();
            rec.message = "the container's monitor is gone without an exit record".into();
        }
        _ => return,
    }
    // In the pod's PID namespace, what the init started outlives it (in its own, the
    // kernel ends it all with the init): it goes now, as containerd's shim and runc's
    // `kill --all` see to, and not only at RemoveContainer.
    if let Some(cg) = rec.cgroup.as_deref() {
        if let Ok(path) = cgroups::CgroupPath::new(cg) {
            let left = crust.cgroups.procs(&path).unwrap_or_default();
            if !left.is_empty() {
                if let Err(e) = crust.cgroups.kill_all(&path) {
                    tracing::warn!(container = %rec.id, error = %e, "killing what the init left");
                }
            }
        }
    }
    if let Err(e) = crust.containers.save(rec) {
        tracing::warn!(container = %rec.id, error = %e, "saving the exit of a container");
    }
    crust
        .events
        .emit_container(crust, rec, ContainerEventType::ContainerStoppedEvent);
}

/// Waits (without a thread) for the monitor to exit, reaps it, and refreshes the record.
pub fn watch(crust: Arc<Crust>, c: Arc<Container>) {
    let (pid, st) = {
        let Some(rec) = c.rec.try_lock() else {
            return;
        };
        (rec.monitor_pid, rec.monitor_start_time)
    };
    if pid <= 0 {
        return;
    }
    let pidfd = container::proc::pidfd_open(pid).ok();
    // Checked after opening: the pidfd is the monitor's, not a reused pid's.
    if start_time(pid) != Some(st) {
        drop(pidfd);
        tokio::spawn(async move {
            let mut rec = c.rec.lock().await;
            refresh(&crust, &mut rec);
        });
        return;
    }
    tokio::spawn(async move {
        if let Some(fd) = pidfd {
            // SAFETY: an OwnedFd: it stays open, the same fd, for the AsyncFd's life.
            let afd = unsafe {
                tokio::io::unix::AsyncFd::register_with_interest(fd, tokio::io::Interest::READABLE)
            };
            if let Ok(afd) = afd {
                let _ = afd.readable().await;
                // Reaping our child (nothing when crustd restarted since).
                let _ = container::proc::pidfd_reap(afd.get_ref().as_fd(), true);
            }
        }
        let mut rec = c.rec.lock().await;
        refresh(&crust, &mut rec);
    });
}

pub async fn start(crust: Arc<Crust>, id: &str) -> Result<()> {
    let c = crust.containers.get(id)?;
    let mut rec = c.rec.lock().await;
    refresh(&crust, &mut rec);
    if rec.state != ContainerState::Created {
        return Err(Error::FailedPrecondition(format!(
            "container {} is {:?}, not created",
            rec.id, rec.state
        )));
    }
    // Taken before the gate opens: a process that exits at once must not have finished
    // before it started.
    let started_at = util::now_ns();
    let started = match crust.oci_runtimes.get(&rec.runtime) {
        Some(rt) if !rec.runtime.is_empty() => rt.start(&rec.id),
        _ => executor::Container::load(&crust.containers.exec_state(&rec.id))
            .and_then(|mut x| x.start()),
    };
    if let Err(e) = started {
        refresh(&crust, &mut rec);
        return Err(Error::FailedPrecondition(format!(
            "starting container {}: {e}",
            rec.id
        )));
    }
    failpoint!("start_container.after_gate");
    rec.state = ContainerState::Running;
    rec.started_at = started_at;
    crust.containers.save(&rec)?;
    failpoint!("start_container.after_record");
    crust
        .events
        .emit_container(&crust, &rec, ContainerEventType::ContainerStartedEvent);
    Ok(())
}

fn signal_number(name: &str) -> i32 {
    let n = name.trim().to_ascii_uppercase();
    if let Ok(v) = n.parse::<i32>() {
        return v;
    }
    let n = if n.starts_with("SIG") {
        n
    } else {
        format!("SIG{n}")
    };
    n.parse::<nix::sys::signal::Signal>()
        .map(|s| s as i32)
        .unwrap_or(libc::SIGTERM)
}

/// Signals the container's init (pid and start time: never a reused pid).
/// A process's state, pending and blocked signals and wait channel, for an operator
/// reading why a container would not die.
fn proc_state(pid: i32) -> String {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let fields: Vec<&str> = status
        .lines()
        .filter(|l| {
            ["State:", "PPid:", "SigPnd:", "ShdPnd:", "SigBlk:"]
                .iter()
                .any(|k| l.starts_with(k))
        })
        .collect();
    let wchan = std::fs::read_to_string(format!("/proc/{pid}/wchan")).unwrap_or_default();
    // An init stuck in `zap_pid_ns_processes` waits for the rest of its PID namespace.
    let mut others = vec![];
    if let Ok(ns) = std::fs::read_link(format!("/proc/{pid}/ns/pid")) {
        for e in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
            let Some(p) = e.file_name().to_str().and_then(|n| n.parse::<i32>().ok()) else {
                continue;
            };
            if p != pid
                && std::fs::read_link(format!("/proc/{p}/ns/pid"))
                    .ok()
                    .as_ref()
                    == Some(&ns)
            {
                let st = std::fs::read_to_string(format!("/proc/{p}/stat")).unwrap_or_default();
                others.push(format!(
                    "{p}: {}",
                    st.split_whitespace().take(4).collect::<Vec<_>>().join(" ")
                ));
            }
        }
    }
    format!(
        "[{} wchan {wchan}; its PID namespace also holds: {}]",
        fields.join(" ").replace('\t', " "),
        others.join(", ")
    )
}

fn signal_init(rec: &ContainerRecord, sig: i32) {
    if let Err(e) = container::proc::signal(rec.pid, rec.pid_start_time, sig) {
        tracing::warn!(container = %rec.id, sig, error = %e, "signalling the init");
    }
}

/// Waits until the container's process is gone: its monitor wrote the exit record (or
/// is gone without one). Polls finely at first, when a killed init is usually gone.
async fn wait_monitor(crust: &Crust, rec: &ContainerRecord, timeout: Duration) -> bool {
    let exit = crust.containers.exit_file(&rec.id);
    let begun = Instant::now();
    while monitor_alive(rec) && !exit.exists() {
        let waited = begun.elapsed();
        if waited >= timeout {
            return false;
        }
        let tick = if waited < Duration::from_millis(50) {
            1
        } else {
            5
        };
        tokio::time::sleep(Duration::from_millis(tick)).await;
    }
    true
}

/// Ends a container under its lock: SIGKILL (the grace period, if any, is over) and the
/// wait for its exit; `refresh` then ends what it left in a shared PID namespace.
async fn kill_locked(crust: &Crust, rec: &mut ContainerRecord) -> Result<()> {
    refresh(crust, rec);
    if rec.state == ContainerState::Exited || rec.state == ContainerState::Creating {
        return Ok(());
    }
    if monitor_alive(rec) {
        signal_init(rec, libc::SIGKILL);
    }
    if !wait_monitor(crust, rec, KILL_WAIT).await {
        return Err(Error::Internal(format!(
            "container {} did not exit within {KILL_WAIT:?} of SIGKILL (init {} {} {}, monitor {} {}, exit record {})",
            rec.id,
            rec.pid,
            if container::proc::alive(rec.pid, rec.pid_start_time) { "alive" } else { "gone" },
            proc_state(rec.pid),
            rec.monitor_pid,
            proc_state(rec.monitor_pid),
            if crust.containers.exit_file(&rec.id).exists() { "written" } else { "missing" },
        )));
    }
    refresh(crust, rec);
    Ok(())
}

pub async fn stop(crust: Arc<Crust>, id: &str, timeout: i64) -> Result<()> {
    // Idempotent as the CRI asks: a container that is gone is stopped (containerd
    // answers the same, and the CRI conformance suite checks it).
    let c = match crust.containers.get(id) {
        Ok(c) => c,
        Err(Error::NotFound(_)) => return Ok(()),
        Err(e) => return Err(e),
    };
    // The stop signal and the grace period without the record's lock: the kubelet
    // relists (ListContainers, ContainerStatus) every second and must not wait out a
    // pod's terminationGracePeriodSeconds; SIGKILL and the rest under it.
    if timeout > 0 {
        let running = {
            let mut rec = c.rec.lock().await;
            refresh(&crust, &mut rec);
            match rec.state {
                ContainerState::Exited | ContainerState::Creating => return Ok(()),
                ContainerState::Running => {
                    signal_init(&rec, signal_number(&rec.stop_signal));
                    failpoint!("stop_container.after_stop_signal");
                    Some(rec.clone())
                }
                _ => None,
            }
        };
        if let Some(snapshot) = running {
            wait_monitor(&crust, &snapshot, Duration::from_secs(timeout as u64)).await;
        }
    }
    let mut rec = c.rec.lock().await;
    kill_locked(&crust, &mut rec).await?;
    failpoint!("stop_container.after_exit");
    Ok(())
}

pub async fn remove(crust: Arc<Crust>, id: &str) -> Result<()> {
    let c = match crust.containers.get(id) {
        Ok(c) => c,
        Err(Error::NotFound(_)) => return Ok(()),
        Err(e) => return Err(e),
    };
    remove_container(crust, c).await
}

pub async fn remove_container(crust: Arc<Crust>, c: Arc<Container>) -> Result<()> {
    let mut rec = c.rec.lock().await;
    kill_locked(&crust, &mut rec).await?;
    let copy = rec.clone();
    let cr = crust.clone();
    let (copy, res) = tokio::task::spawn_blocking(move || {
        let mut copy = copy;
        let r = teardown(&cr, &mut copy);
        (copy, r)
    })
    .await
    .map_err(Error::internal)?;
    *rec = copy;
    match res {
        Ok(()) => {
            crust.containers.remove(&rec.id);
            crust.containers.release_name(&rec.name_key, &rec.id);
            crust.events.emit(
                &rec.id,
                &rec.sandbox_id,
                ContainerEventType::ContainerDeletedEvent,
            );
            Ok(())
        }
        Err(e) => {
            let _ = crust.containers.save(&rec);
            Err(e)
        }
    }
}

/// Stops every container of a sandbox (StopPodSandbox) with SIGKILL.
pub async fn stop_all(crust: Arc<Crust>, sandbox_id: &str) -> Result<()> {
    for c in crust.containers.of_sandbox(sandbox_id) {
        let mut rec = c.rec.lock().await;
        kill_locked(&crust, &mut rec).await?;
    }
    Ok(())
}

/// Removes every container of a sandbox (RemovePodSandbox).
pub async fn remove_all(crust: Arc<Crust>, sandbox_id: &str) -> Result<()> {
    for c in crust.containers.of_sandbox(sandbox_id) {
        remove_container(crust.clone(), c).await?;
    }
    Ok(())
}

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

/// The request's config as kept in the record: each image volume's `image_ref` filled
/// with the image's id, what PullImage answered for it (and what the kubelet puts in
/// the mount's `image`): the conformance suite's image volume spec checks the status
/// mount's `image_ref` against PullImage's answer, and containerd fills it with the
/// same config digest. Taken at creation, so it still names the image the volume
/// shows after the image is gone or its tag moved.
fn config_with_image_volume_refs(crust: &Crust, cfg: &ContainerConfig) -> ContainerConfig {
    let mut cfg = cfg.clone();
    for spec in cfg.mounts.iter_mut().filter_map(|m| m.image.as_mut()) {
        if spec.image.is_empty() {
            continue;
        }
        if let Some(img) = crust.images.resolve(&spec.image) {
            spec.image_ref = img.id;
        }
    }
    cfg
}

/// A record as the CRI's ContainerStatus, with the config and runtime spec it read.
/// Sync and lock-free (the caller holds the record), so events can take the status of
/// the container they are about at the moment they happen.
pub fn cri_status(
    crust: &Crust,
    rec: &ContainerRecord,
) -> (ContainerStatus, ContainerConfig, Option<serde_json::Value>) {
    let cfg = rec.config().unwrap_or_default();
    let image_ref = crust
        .images
        .resolve(&rec.image_id)
        .and_then(|i| i.repo_digests.first().cloned())
        .unwrap_or_else(|| rec.image_id.clone());
    let spec: Option<serde_json::Value> =
        std::fs::read(crust.containers.bundle(&rec.id).join("config.json"))
            .ok()
            .and_then(|b| serde_json::from_slice(&b).ok());
    let user = spec.as_ref().map(|s| ContainerUser {
        linux: Some(LinuxContainerUser {
            uid: s["process"]["user"]["uid"].as_i64().unwrap_or(0),
            gid: s["process"]["user"]["gid"].as_i64().unwrap_or(0),
            supplemental_groups: s["process"]["user"]["additionalGids"]
                .as_array()
                .map(|a| a.iter().filter_map(|v| v.as_i64()).collect())
                .unwrap_or_default(),
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
        labels: rec.labels.clone().into_iter().collect(),
        annotations: rec.annotations.clone().into_iter().collect(),
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
fn read_rec(crust: &Crust, c: &Container) -> ContainerRecord {
    match c.rec.try_lock() {
        Some(mut rec) => {
            refresh(crust, &mut rec);
            rec.clone()
        }
        None => (*c.rec.view()).clone(),
    }
}

/// [`read_rec`] for ContainerStatus, which waits for a container still being created
/// (it has no state to show yet; ListContainers leaves it out instead).
async fn status_rec(crust: &Crust, c: &Container) -> ContainerRecord {
    let rec = read_rec(crust, c);
    if rec.state != ContainerState::Creating {
        return rec;
    }
    let mut rec = c.rec.lock().await;
    refresh(crust, &mut rec);
    rec.clone()
}

pub async fn status(crust: Arc<Crust>, id: &str, verbose: bool) -> Result<ContainerStatusResponse> {
    let c = crust.containers.get(id)?;
    let rec = status_rec(&crust, &c).await;
    let (status, cfg, spec) = cri_status(&crust, &rec);
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
        if !f
            .label_selector
            .iter()
            .all(|(k, v)| rec.labels.get(k) == Some(v))
        {
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
            labels: rec.labels.clone().into_iter().collect(),
            annotations: rec.annotations.clone().into_iter().collect(),
            image_id: rec.image_id.clone(),
        });
    }
    out.sort_by_key(|c| c.created_at);
    Ok(out)
}

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
    rec.resources_pb = util::hex(&r.encode_to_vec());
    crust.containers.save(&rec)
}

pub async fn reopen_log(crust: Arc<Crust>, id: &str) -> Result<()> {
    let c = crust.containers.get(id)?;
    let mut rec = c.rec.lock().await;
    refresh(&crust, &mut rec);
    if rec.state != ContainerState::Running {
        return Err(Error::FailedPrecondition(format!(
            "container {} is not running",
            rec.id
        )));
    }
    let Some(log) = rec.log_path.clone() else {
        return Ok(());
    };
    if !monitor_alive(&rec) {
        return Err(Error::FailedPrecondition(format!(
            "container {} is not running",
            rec.id
        )));
    }
    // SAFETY: a signal to the monitor whose start time was just checked.
    unsafe { libc::kill(rec.monitor_pid, libc::SIGUSR1) };
    let deadline = Instant::now() + Duration::from_secs(5);
    while !log.exists() {
        if Instant::now() >= deadline || !monitor_alive(&rec) {
            return Err(Error::Internal(format!(
                "the monitor of {} did not reopen {}",
                rec.id,
                log.display()
            )));
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    Ok(())
}

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

#[cfg(test)]
mod tests {
    use super::*;

    /// A log path stays in the log directory: `..`, absolute paths and a symlinked
    /// folder on the way are refused; folders are made.
    #[test]
    fn log_file_stays_in_the_log_directory() {
        let t = std::env::temp_dir().join(format!("crustd-logfile-{}", std::process::id()));
        let logs = t.join("pod");
        assert_eq!(log_file(&logs, "c/0.log").unwrap(), logs.join("c/0.log"));
        assert!(logs.join("c").is_dir());
        for bad in ["../x.log", "c/../../x.log", "/etc/x.log"] {
            let e = log_file(&logs, bad).unwrap_err();
            assert!(matches!(e, Error::InvalidArgument(_)), "{bad}: {e:?}");
        }
        std::os::unix::fs::symlink(&t, logs.join("link")).unwrap();
        let e = log_file(&logs, "link/0.log").unwrap_err();
        assert!(matches!(e, Error::InvalidArgument(_)), "{e:?}");
        std::fs::remove_dir_all(&t).unwrap();
    }

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
