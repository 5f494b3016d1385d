//! RunPodSandbox: validate → record `creating` on disk → pause process in new
//! namespaces → namespaces pinned → oom score → pod cgroup → sysctls → loopback and
//! CNI ADD → hostname, hosts and resolv.conf → record `ready`.
//!
//! Every step that made something registers its undo first; any failure runs the undo
//! list in reverse and removes the record, so a failed call leaves nothing behind.
//! A crash in the middle leaves a `creating` record, which start-up recovery rolls back
//! the same way (`teardown`).

use crate::cri::error::{Error, Result};
use crate::daemon::failpoint::failpoint;
use crate::daemon::Crust;
use crate::sandboxes::store::{name_key, PauseRef, SandboxRecord, SandboxState, RECORD_VERSION};
use crate::{
    cri::validate, daemon::util, sandboxes::network, sandboxes::pod_files, sandboxes::podns,
    sandboxes::userns,
};
use cgroups::CgroupManager;
use cri_api::{NamespaceMode, PodSandboxConfig, RunPodSandboxRequest};
use prost::Message;
use std::collections::BTreeMap;
use std::time::Duration;

/// The pause's oom_score_adj as the kubelet asks for it; clamped to what we may set.
const PAUSE_OOM_SCORE_ADJ: i32 = -998;

/// The pod's `/dev/shm` size (containerd's and Docker's default, 64 MiB).
const POD_SHM_SIZE: u64 = 64 << 20;

pub fn run(crust: &Crust, req: RunPodSandboxRequest) -> Result<String> {
    let cfg = req
        .config
        .ok_or_else(|| Error::InvalidArgument("sandbox config is required".into()))?;
    let md = cfg
        .metadata
        .clone()
        .ok_or_else(|| Error::InvalidArgument("sandbox config metadata is required".into()))?;
    if md.name.is_empty() {
        return Err(Error::InvalidArgument(
            "sandbox metadata.name is empty".into(),
        ));
    }
    if md.namespace.is_empty() {
        return Err(Error::InvalidArgument(
            "sandbox metadata.namespace is empty".into(),
        ));
    }
    if md.uid.is_empty() {
        return Err(Error::InvalidArgument(
            "sandbox metadata.uid is empty".into(),
        ));
    }
    validate::labels("label", cfg.labels.keys())?;
    validate::labels("annotation", cfg.annotations.keys())?;
    if !crust.handlers.contains(&req.runtime_handler) {
        return Err(Error::InvalidArgument(format!(
            "unknown runtime handler {:?}: this node knows {:?}",
            req.runtime_handler,
            crust
                .handlers
                .iter()
                .filter(|h| !h.is_empty())
                .collect::<Vec<_>>()
        )));
    }
    let linux = cfg.linux.clone().unwrap_or_default();
    let ns = linux
        .security_context
        .as_ref()
        .and_then(|s| s.namespace_options.clone())
        .unwrap_or_default();
    let host_network = ns.network == NamespaceMode::Node as i32;
    let host_pid = ns.pid == NamespaceMode::Node as i32;
    let host_ipc = ns.ipc == NamespaceMode::Node as i32;
    let sysctls: BTreeMap<String, String> = linux.sysctls.clone().into_iter().collect();
    podns::validate_sysctls(&sysctls, host_network, host_ipc)?;
    let userns = userns::of_options(Some(&ns))?;
    if userns.is_some() && crust.oci_runtimes.contains_key(&req.runtime_handler) {
        return Err(Error::InvalidArgument(format!(
            "runtime handler {:?} does not support user namespaces (hostUsers: false); the built-in one does",
            req.runtime_handler
        )));
    }
    if !host_network {
        // Fail before making anything when there is no network to join.
        crust.network.current().map_err(Error::FailedPrecondition)?;
    }

    let id = util::new_id();
    let key = name_key(&md.name, &md.namespace, &md.uid, md.attempt);
    crust.store.reserve_name(&key, &id)?;
    let mut rec = SandboxRecord {
        version: RECORD_VERSION,
        id: id.clone(),
        state: SandboxState::Creating,
        name: md.name.clone(),
        namespace: md.namespace.clone(),
        uid: md.uid.clone(),
        attempt: md.attempt,
        labels: cfg.labels.clone().into_iter().collect(),
        annotations: cfg.annotations.clone().into_iter().collect(),
        runtime_handler: req.runtime_handler.clone(),
        created_at: util::now_ns(),
        config_pb: util::HexBytes(cfg.encode_to_vec()),
        host_network,
        host_pid,
        host_ipc,
        pause: None,
        pins: BTreeMap::new(),
        network: None,
        ips: vec![],
        cgroup: None,
        shm: None,
    };
    let res = create(crust, &cfg, &sysctls, userns.as_ref(), &mut rec);
    match res {
        Ok(()) => {
            crust.store.insert(rec);
            Ok(id)
        }
        Err(e) => {
            if let Err(undo) = teardown(crust, &mut rec) {
                // As recovery does: keep what is left as a NOTREADY sandbox the kubelet
                // sees and removes (retrying), instead of forgetting it while its pins,
                // cgroup and record stay behind. Its name stays reserved until then.
                tracing::error!(sandbox = %id, error = %undo, "rolling back a failed RunPodSandbox left something behind; keeping the sandbox as NOTREADY");
                rec.state = SandboxState::NotReady;
                let _ = crust.store.save(&rec);
                crust.store.insert(rec);
            } else {
                crust.store.release_name(&key, &id);
            }
            Err(e)
        }
    }
}

fn create(
    crust: &Crust,
    cfg: &PodSandboxConfig,
    sysctls: &BTreeMap<String, String>,
    userns: Option<&userns::PodMaps>,
    rec: &mut SandboxRecord,
) -> Result<()> {
    let id = rec.id.clone();
    let t0 = std::time::Instant::now();

    // The pod cgroup first: the pause is born in it (no move afterwards, which would
    // wait for the kernel's global cgroup lock).
    let cgroup = crust.pod_cgroup(
        &cfg.linux
            .as_ref()
            .map(|l| l.cgroup_parent.clone())
            .unwrap_or_default(),
        &id,
    )?;
    rec.cgroup = Some(cgroup.to_string());
    // What ADD will run with, known now (a missing CNI config fails before anything is
    // made).
    if !rec.host_network {
        rec.network = Some(crust.network.attachment(&id, cfg)?);
    }
    crust.store.save_progress(rec)?;
    failpoint!("run_sandbox.after_record");

    let pause = start_pause(crust, cfg, &cgroup, userns, rec)?;
    failpoint!("run_sandbox.after_pause");
    let t_cgroup = t0.elapsed();
    crust.store.save_progress(rec)?;

    let t_pause = t0.elapsed();
    pin_namespaces(crust, rec, pause.pid, userns.is_some())?;
    failpoint!("run_sandbox.after_pins");

    set_oom_score_adj(pause.pid, PAUSE_OOM_SCORE_ADJ);

    podns::apply_sysctls(sysctls, &rec.pins)?;
    let t_pins = t0.elapsed();
    let mut t_saved = t_pins;

    if let Some(netns) = rec.netns().map(|p| p.to_path_buf()) {
        podns::loopback_up(&netns)?;
        t_saved = t0.elapsed();
        let result = crust
            .network
            .add(rec.network.as_ref().unwrap(), &id, &netns)?;
        failpoint!("run_sandbox.after_cni_add");
        rec.ips = network::pod_ips(&result);
        if let Some(n) = rec.network.as_mut() {
            n.result = match result.to_value(&result.cni_version.clone()) {
                Ok(v) => util::RawJson::from_value(&v),
                Err(_) => util::RawJson::from_value(&result),
            };
        }
    }

    let t_cni = t0.elapsed();
    write_pod_files(crust, cfg, rec)?;
    failpoint!("run_sandbox.after_pod_files");

    // NRI's plugins hear of the pod last, before anyone else can see it (it is not in
    // the store yet); one that refuses it fails the RunPodSandbox, which is rolled back.
    if crust.nri.get().is_some() {
        let pod = crate::nri::convert::pod(rec);
        if let Err(e) = crate::nri::convert::wait_blocking(
            crust,
            crate::nri::api::Event::RunPodSandbox,
            pod.clone(),
            None,
        ) {
            crate::nri::convert::notify(crust, crate::nri::api::Event::RemovePodSandbox, pod, None);
            return Err(e);
        }
    }

    rec.state = SandboxState::Ready;
    let t_files = t0.elapsed();
    // Not waited onto the disk (an fsync was 1.5 ms of the RPC): a daemon killed now
    // finds the ready record in the page cache, and after a power loss the pod is dead
    // whichever record the disk kept. The one with the attachment was made durable
    // before ADD; an older `creating` one is rolled back at start (CNI DEL), and the
    // containers made in the sandbox meanwhile are removed with it: the kubelet makes
    // the pod again, as after any reboot, but its restart count starts over (only for
    // a pod started in the seconds before the power loss, ext4's commit interval).
    crust.store.save_progress(rec)?;
    failpoint!("run_sandbox.after_ready");
    tracing::debug!(sandbox = %id, ?t_cgroup, ?t_pause, ?t_pins, ?t_saved, ?t_cni, ?t_files, t_end = ?t0.elapsed(), "run phases");
    Ok(())
}

/// The pod cgroup made and the pause started in it, while the record with the network
/// attachment is made durable; the pause noted in the record.
fn start_pause(
    crust: &Crust,
    cfg: &PodSandboxConfig,
    cgroup: &cgroups::CgroupPath,
    userns: Option<&userns::PodMaps>,
    rec: &mut SandboxRecord,
) -> Result<container::pause::Pause> {
    // The pod's user namespace, maps written, for the pause to enter first.
    let userns_fd = userns
        .map(|m| container::userns::create(&[m.uid], &[m.gid]))
        .transpose()
        .map_err(|e| Error::Internal(format!("making the pod's user namespace: {e}")))?;
    // The pause process and its namespaces.
    let spec = container::pause::PauseSpec {
        binary: crust.pause_bin.clone(),
        hostname: (!rec.host_network && !cfg.hostname.is_empty()).then(|| cfg.hostname.clone()),
        new_net: !rec.host_network,
        new_ipc: !rec.host_ipc,
        new_uts: !rec.host_network,
        new_pid: !rec.host_pid,
        cgroup_dirs: crust.cgroups.dirs(cgroup),
        userns_fd: userns_fd.as_ref().map(std::os::fd::AsRawFd::as_raw_fd),
        // Its own mount namespace on an empty root: a container that may ptrace it
        // (PID namespace shared) finds nothing of the host's behind /proc/1/root.
        keep_root: false,
        mount_ns: crust
            .pause_root_ns
            .as_ref()
            .map(std::os::fd::AsRawFd::as_raw_fd),
    };
    // The record with the attachment must be on disk before ADD (CNI may allocate
    // even when ADD fails, and DEL must follow, also after a power loss): its fsync
    // runs while the cgroup is made and the pause starts.
    let durable = rec.clone();
    let (saved, made) = crate::daemon::util::beside(
        || crust.store.save(&durable),
        || {
            crust
                .cgroups
                .create(cgroup)
                .map_err(|e| Error::Internal(format!("creating the pod cgroup {cgroup}: {e}")))
                .and_then(|()| {
                    let spawned = container::pause::spawn(&spec);
                    crust.cgroups.joined(cgroup);
                    spawned.map_err(|e| match e {
                        // The kubelet's input, not our failure.
                        container::Error::InvalidHostname { .. } => {
                            Error::InvalidArgument(e.to_string())
                        }
                        e => Error::Internal(format!("starting the pause process: {e}")),
                    })
                })
        },
    );
    let pause = made?;
    // A pause that started is recorded even when the save failed, so rollback stops it.
    if let Err(e) = saved {
        rec.pause = Some(PauseRef {
            pid: pause.pid,
            start_time: pause.start_time,
        });
        return Err(e);
    }
    rec.pause = Some(PauseRef {
        pid: pause.pid,
        start_time: pause.start_time,
    });
    Ok(pause)
}

/// The pause's namespaces pinned under the sandbox's pin folder, and the pod's
/// `/dev/shm`; each recorded before it is mounted, so teardown finds it.
fn pin_namespaces(crust: &Crust, rec: &mut SandboxRecord, pid: i32, userns: bool) -> Result<()> {
    let pin_dir = crust.pin_dir(&rec.id);
    let kinds = [
        (container::ns::NsKind::Net, "net", !rec.host_network),
        (container::ns::NsKind::Ipc, "ipc", !rec.host_ipc),
        (container::ns::NsKind::Uts, "uts", !rec.host_network),
        (container::ns::NsKind::Pid, "pid", !rec.host_pid),
        (container::ns::NsKind::User, "user", userns),
    ];
    // Everything about to be mounted is recorded first, in one save: teardown skips
    // what is not (yet) mounted.
    let kinds: Vec<_> = kinds.into_iter().filter(|k| k.2).collect();
    for (_, name, _) in &kinds {
        rec.pins.insert(name.to_string(), pin_dir.join(name));
    }
    let shm = (!rec.host_ipc).then(|| pin_dir.join("shm"));
    rec.shm = shm.clone();
    crust.store.save_progress(rec)?;
    for (kind, name, _) in kinds {
        container::ns::pin(pid, kind, &pin_dir.join(name))
            .map_err(|e| Error::Internal(format!("pinning the pod's {name} namespace: {e}")))?;
    }
    if let Some(shm) = shm {
        container::ns::mount_shm(&shm, POD_SHM_SIZE)
            .map_err(|e| Error::Internal(format!("mounting the pod's /dev/shm: {e}")))?;
    }
    Ok(())
}

/// The pod's hostname, hosts and resolv.conf, which every container mounts.
fn write_pod_files(crust: &Crust, cfg: &PodSandboxConfig, rec: &SandboxRecord) -> Result<()> {
    let files = pod_files::PodFiles::in_dir(&crust.store.sandbox_dir(&rec.id));
    let hostname = if rec.host_network || cfg.hostname.is_empty() {
        nix::unistd::gethostname()
            .map(|h| h.to_string_lossy().into_owned())
            .unwrap_or_default()
    } else {
        cfg.hostname.clone()
    };
    let hosts = if rec.host_network {
        std::fs::read_to_string("/etc/hosts").unwrap_or_else(|_| pod_files::hosts(&hostname, None))
    } else {
        pod_files::hosts(&hostname, rec.ips.first().map(String::as_str))
    };
    let resolv = pod_files::resolv_conf(
        cfg.dns_config.as_ref(),
        std::path::Path::new("/etc/resolv.conf"),
    )?;
    pod_files::write(&files, &hostname, &hosts, &resolv)?;
    Ok(())
}

/// The kubelet asks -998 for the pause; without CAP_SYS_RESOURCE a value below our own
/// is refused, so clamp to ours as containerd's `restrict_oom_score_adj` does.
fn set_oom_score_adj(pid: i32, want: i32) {
    let own: i32 = std::fs::read_to_string("/proc/self/oom_score_adj")
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(0);
    let path = format!("/proc/{pid}/oom_score_adj");
    if std::fs::write(&path, want.to_string()).is_err() {
        let v = want.max(own);
        if let Err(e) = std::fs::write(&path, v.to_string()) {
            tracing::warn!(pid, error = %e, "could not set the pause's oom_score_adj");
        }
    }
}

/// Undoes whatever a sandbox has: CNI DEL, the pause, the pins, the cgroup, its files
/// and record. Used by failed runs, recovery and RemovePodSandbox. Each part that is
/// done is marked in the record, so a retry after an error continues where it stopped.
pub fn teardown(crust: &Crust, rec: &mut SandboxRecord) -> Result<()> {
    stop(crust, rec)?;
    if let Some(cg) = rec.cgroup.clone() {
        let cg = cgroups::CgroupPath::new(&cg)
            .map_err(|e| Error::Internal(format!("recorded cgroup {cg:?}: {e}")))?;
        crust
            .cgroups
            .kill_all(&cg)
            .map_err(|e| Error::Internal(format!("killing what is left in {cg}: {e}")))?;
        crust
            .cgroups
            .remove(&cg)
            .map_err(|e| Error::Internal(format!("removing cgroup {cg}: {e}")))?;
        // The pod-level cgroup crust made for a pod without a cgroup_parent goes too
        // (the pod's containers, its other children, are removed before).
        if let Some(parent) = cg.parent().filter(|p| crust.is_own_pod_level(p, &rec.id)) {
            crust
                .cgroups
                .kill_all(&parent)
                .and_then(|()| crust.cgroups.remove(&parent))
                .map_err(|e| Error::Internal(format!("removing cgroup {parent}: {e}")))?;
        }
        rec.cgroup = None;
        failpoint!("remove_sandbox.after_cgroup");
    }
    let pin_dir = crust.pin_dir(&rec.id);
    let _ = std::fs::remove_dir(&pin_dir);
    crust.store.delete_files(&rec.id)?;
    failpoint!("remove_sandbox.after_files");
    Ok(())
}

/// StopPodSandbox's work: the pause ends, the network is torn down, the namespaces
/// are unpinned. The record says what is left when an error stops it half way.
pub fn stop(crust: &Crust, rec: &mut SandboxRecord) -> Result<()> {
    let t0 = std::time::Instant::now();
    // The pause ends while CNI DEL runs: DEL needs the pinned namespace, not the pause.
    let pause = rec.pause;
    let stop_pause = || -> Result<std::time::Duration> {
        if let Some(p) = pause {
            container::pause::stop(
                p.pid,
                p.start_time,
                Duration::from_secs(crust.cfg.stop_timeout_seconds),
            )
            .map_err(|e| Error::Internal(format!("stopping the pause process {}: {e}", p.pid)))?;
            failpoint!("stop_sandbox.after_pause");
        }
        Ok(t0.elapsed())
    };
    let net = rec.network.clone().filter(|n| !n.torn_down);
    let (t_pause, deleted) = match &net {
        Some(net) => crate::daemon::util::beside(stop_pause, || {
            let r = crust.network.del(net, &rec.id, rec.netns());
            if r.is_ok() {
                failpoint!("stop_sandbox.after_cni_del");
            }
            r
        }),
        None => (stop_pause(), Ok(())),
    };
    if net.is_some() && deleted.is_ok() {
        if let Some(n) = rec.network.as_mut() {
            n.torn_down = true;
        }
    }
    let t_pause = t_pause?;
    deleted?;
    let t_cni = t0.elapsed();
    if let Some(shm) = rec.shm.clone() {
        container::ns::unmount_shm(&shm)
            .map_err(|e| Error::Internal(format!("unmounting the pod's /dev/shm: {e}")))?;
        rec.shm = None;
    }
    for (name, pin) in rec.pins.clone() {
        container::ns::unpin(&pin)
            .map_err(|e| Error::Internal(format!("unpinning the pod's {name} namespace: {e}")))?;
        rec.pins.remove(&name);
    }
    failpoint!("stop_sandbox.after_unpin");
    if rec.state != SandboxState::Creating {
        rec.state = SandboxState::NotReady;
    }
    tracing::debug!(sandbox = %rec.id, ?t_pause, ?t_cni, t_unpin = ?t0.elapsed(), "stop work phases");
    Ok(())
}
