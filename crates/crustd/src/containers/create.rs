//! CreateContainer: validate → name reserved → record `creating` on disk → image
//! snapshot → container cgroup under the pod's, with its resources → OCI spec in the
//! bundle → the executor creates the init under a monitor (see `container::executor`)
//! → record `created`. A failed step undoes every earlier one.
//!
//! The cgroup's part of it is in `cgroup`, the CRI log's in `log`; a failed create is
//! undone by `lifecycle::teardown`.

use crate::containers::cgroup::{
    cgroup_err, cgroup_resources, cgroup_watch, container_cgroup, spec_cgroup, swap_accounting,
};
use crate::containers::lifecycle::{teardown, watch};
use crate::containers::log::{log_file, touch_log};
use crate::containers::spec::{self, ImageInfo, SpecInput};
use crate::containers::store::{name_key, ContainerRecord, ContainerState, RECORD_VERSION};
use crate::cri::error::{Error, Result};
use crate::daemon::failpoint::failpoint;
use crate::daemon::util;
use crate::daemon::Crust;
use crate::sandboxes::store::{SandboxRecord, SandboxState};
use cgroups::CgroupManager;
use container::executor::{self, oci_runtime, CreateOpts, MonitorOpts, RootfsMount, Step};
use container::proc::start_time;
use cri_api::*;
use prost::Message;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

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
            let nri_ctr = crust
                .nri
                .get()
                .map(|_| crate::nri::convert::container(&rec, None));
            let c = crust.containers.insert(rec);
            watch(crust.clone(), c);
            if let Some(ctr) = nri_ctr {
                crate::nri::convert::notify(
                    &crust,
                    crate::nri::api::Event::PostCreateContainer,
                    crate::nri::convert::pod(&sb_rec),
                    Some(ctr),
                );
            }
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
        config_pb: util::HexBytes(cfg.encode_to_vec()),
        resources_pb: cfg
            .linux
            .as_ref()
            .and_then(|l| l.resources.as_ref())
            .map(|r| util::HexBytes(r.encode_to_vec()))
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
        oci_hooks: false,
        user: None,
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
    // Plugins told of its creation hear of its end (NRI's undo of a create).
    if crust.nri.get().is_some_and(|n| n.was_created(id)) {
        crate::nri::convert::notify_container(crust, crate::nri::api::Event::RemoveContainer, &rec);
    }
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
    // Before anything is made: an unloaded profile, or one asked of a host without
    // AppArmor, fails the create as it is.
    let sc = cfg
        .linux
        .as_ref()
        .and_then(|l| l.security_context.clone())
        .unwrap_or_default();
    let apparmor = crust.apparmor.profile_for(&sc, sc.privileged)?;
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
    let mut spec = spec::build(
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
            apparmor,
        },
    )?;
    // NRI's plugins see the container as its spec says, and may adjust it; it is not
    // in the store until this create is done.
    if crust.nri.get().is_some() {
        let out = crate::nri::convert::wait_blocking(
            crust,
            crate::nri::api::Event::CreateContainer,
            crate::nri::convert::pod(sb),
            Some(crate::nri::convert::container(rec, Some(&spec))),
        )?;
        if let Some(a) = out.adjust {
            let mut v = serde_json::to_value(&spec)
                .map_err(|e| Error::Internal(format!("the spec of {id}: {e}")))?;
            crate::nri::apply_to_spec(&mut v, &a);
            spec = serde_json::from_value(v).map_err(|e| {
                Error::InvalidArgument(format!("NRI adjustments of {id} make no valid spec: {e}"))
            })?;
        }
    }
    write_spec(&bundle, &spec)?;
    failpoint!("create_container.after_spec");
    rec.oci_hooks = external.is_none() && crustd_runs_hooks(&spec);
    rec.user = spec.process().as_ref().map(|p| {
        let u = p.user();
        crate::containers::store::RunAs {
            uid: i64::from(u.uid()),
            gid: i64::from(u.gid()),
            groups: u
                .additional_gids()
                .iter()
                .flatten()
                .map(|g| i64::from(*g))
                .collect(),
        }
    });

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

/// Whether the spec has hooks that crustd runs itself (`poststart`, `poststop`) under
/// crust's own executor; the others are the executor's.
pub(crate) fn crustd_runs_hooks(spec: &oci_spec::runtime::Spec) -> bool {
    use executor::hooks::{of, HookKind};
    [HookKind::Poststart, HookKind::Poststop]
        .into_iter()
        .any(|k| !of(spec, k).is_empty())
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

/// A record's Created state: the init and its monitor, by pid and start time.
fn mark_created(rec: &mut ContainerRecord, init: &executor::InitInfo) {
    rec.pid = init.pid;
    rec.pid_start_time = init.start_time;
    rec.monitor_pid = init.monitor.unwrap_or(0);
    rec.monitor_start_time = start_time(rec.monitor_pid).unwrap_or(0);
    rec.state = ContainerState::Created;
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
