//! A container's life after CreateContainer: StartContainer, the exit learnt from its
//! monitor ([`watch`], [`refresh`]), StopContainer, RemoveContainer and what undoes a
//! container ([`teardown`]), and the stop and removal of a pod's containers for
//! StopPodSandbox and RemovePodSandbox.
//!
//! The monitor is crustd's child while crustd lives, and outlives crustd otherwise; a
//! task per container (after a restart too) waits on the monitor's pidfd and, when it
//! ends, folds what it wrote into the exit record into the container's record by
//! [`refresh`]. The RPCs that change a container run [`refresh`] first; those that only
//! report state read the record as the task keeps it (one whose pidfd could not be
//! watched is refreshed by them instead).

use crate::containers::store::{Container, ContainerRecord, ContainerState};
use crate::cri::error::{Error, Result};
use crate::daemon::failpoint::failpoint;
use crate::daemon::util;
use crate::daemon::Crust;
use cgroups::CgroupManager;
use container::executor::{self, oci_runtime};
use container::proc::start_time;
use cri_api::*;
use std::os::fd::AsFd;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How long a SIGKILLed container may take to be reported gone.
const KILL_WAIT: Duration = Duration::from_secs(10);

pub(super) fn monitor_alive(rec: &ContainerRecord) -> bool {
    container::proc::alive(rec.monitor_pid, rec.monitor_start_time)
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
    poststop(crust, rec);
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

/// The bundle's hooks of one kind (crust's own executor; see `ContainerRecord::oci_hooks`)
/// and the state they read, `pid` given while the container has a process.
fn spec_hooks(
    crust: &Crust,
    rec: &ContainerRecord,
    kind: executor::hooks::HookKind,
    status: &str,
    pid: Option<i32>,
) -> Option<(Vec<oci_spec::runtime::Hook>, Vec<u8>)> {
    if !rec.oci_hooks {
        return None;
    }
    let bundle = crust.containers.bundle(&rec.id);
    let spec = match crust.containers.read_spec(&rec.id) {
        Ok(s) => s,
        Err(e) => {
            tracing::warn!(container = %rec.id, error = %e, "reading the spec for its {} hooks", kind.name());
            return None;
        }
    };
    let hooks = executor::hooks::of(&spec, kind).to_vec();
    if hooks.is_empty() {
        return None;
    }
    let state =
        executor::hooks::state_json(&rec.id, &bundle, status, pid, spec.annotations().as_ref());
    Some((hooks, state))
}

/// The spec's `poststop` hooks, once the container's init has exited (from [`watch`]) or
/// at the latest when it is torn down, before its bundle goes; once (a mark in the
/// bundle: teardown is retried): a failure is a warning only, as the runtime spec says.
fn poststop(crust: &Crust, rec: &ContainerRecord) {
    use executor::hooks::HookKind;
    let mark = crust.containers.bundle(&rec.id).join("poststop.done");
    if mark.exists() {
        return;
    }
    let Some((hooks, state)) = spec_hooks(crust, rec, HookKind::Poststop, "stopped", None) else {
        return;
    };
    if let Err(e) = executor::hooks::run(HookKind::Poststop, &hooks, &state) {
        tracing::warn!(container = %rec.id, error = %e, "poststop hook");
    }
    let _ = std::fs::write(mark, b"");
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
    crate::nri::convert::notify_container(crust, crate::nri::api::Event::StopContainer, rec);
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
        tokio::spawn(ended(crust, c));
        return;
    }
    tokio::spawn(async move {
        if let Some(fd) = pidfd {
            // SAFETY: an OwnedFd: it stays open, the same fd, for the AsyncFd's life.
            let afd = unsafe {
                tokio::io::unix::AsyncFd::register_with_interest(fd, tokio::io::Interest::READABLE)
            };
            if let Ok(afd) = afd {
                // From here the monitor's end reaches the record through this task,
                // and reads take the record as it is (a monitor already gone makes
                // the pidfd readable at once: its exit is folded in right away).
                c.watched.store(true, std::sync::atomic::Ordering::Release);
                let _ = afd.readable().await;
                // Reaping our child (nothing when crustd restarted since).
                let _ = container::proc::pidfd_reap(afd.get_ref().as_fd(), true);
            }
        }
        ended(crust, c).await;
    });
}

/// The monitor is gone: its exit record into the container's record, then the spec's
/// `poststop` hooks as containerd runs them: its task is deleted (runc delete) when the
/// container exits, not when the kubelet removes it, maybe hours later. An exit while
/// crustd was down is caught at its restart's watch; the mark in the bundle keeps it
/// to once, and RemoveContainer runs the hooks of a container whose exit no task saw.
/// Under the record's lock: a removal waits for them.
async fn ended(crust: Arc<Crust>, c: Arc<Container>) {
    let mut rec = c.rec.lock().await;
    refresh(&crust, &mut rec);
    if rec.state == ContainerState::Exited && rec.oci_hooks {
        let done = rec.clone();
        let _ = tokio::task::spawn_blocking(move || poststop(&crust, &done)).await;
    }
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
    // NRI's plugins first: one that refuses fails the start (the container stays created).
    crate::nri::convert::wait_container(&crust, crate::nri::api::Event::StartContainer, &rec)
        .await?;
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
    if let Some((hooks, state)) = spec_hooks(
        &crust,
        &rec,
        executor::hooks::HookKind::Poststart,
        "running",
        Some(rec.pid),
    ) {
        let ran = tokio::task::spawn_blocking(move || {
            executor::hooks::run(executor::hooks::HookKind::Poststart, &hooks, &state)
        })
        .await
        .map_err(Error::internal)?;
        // A failed poststart stops the container (runtime spec 1.3, runc): it is killed
        // and the start fails; the exit reaches the record as any other.
        if let Err(e) = ran {
            send_kill(&crust, &mut rec);
            return Err(Error::Internal(format!(
                "starting container {}: {e}",
                rec.id
            )));
        }
    }
    rec.state = ContainerState::Running;
    rec.started_at = started_at;
    crust.containers.save(&rec)?;
    failpoint!("start_container.after_record");
    crust
        .events
        .emit_container(&crust, &rec, ContainerEventType::ContainerStartedEvent);
    crate::nri::convert::notify_container(&crust, crate::nri::api::Event::PostStartContainer, &rec);
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

/// Signals the container's init (pid and start time: never a reused pid).
fn signal_init(rec: &ContainerRecord, sig: i32) {
    if let Err(e) = container::proc::signal(rec.pid, rec.pid_start_time, sig) {
        tracing::warn!(container = %rec.id, sig, error = %e, "signalling the init");
    }
}

/// Waits until the container's process is gone: its monitor wrote the exit record (or
/// is gone without one). On the monitor's pidfd; where none can be had, polls, finely
/// at first, when a killed init is usually gone.
async fn wait_monitor(crust: &Crust, rec: &ContainerRecord, timeout: Duration) -> bool {
    let exit = crust.containers.exit_file(&rec.id);
    let begun = Instant::now();
    // The monitor's exit, as the kernel tells it (it writes the record, then exits):
    // StopPodSandbox and StopContainer return as soon as the container is gone, not
    // at the next tick of a poll.
    if let Ok(fd) = container::proc::pidfd_open(rec.monitor_pid) {
        // Checked after opening: the pidfd is the monitor's, not a reused pid's.
        if start_time(rec.monitor_pid) == Some(rec.monitor_start_time) && !exit.exists() {
            // SAFETY: an OwnedFd: it stays open, the same fd, for the AsyncFd's life.
            let afd = unsafe {
                tokio::io::unix::AsyncFd::register_with_interest(fd, tokio::io::Interest::READABLE)
            };
            if let Ok(afd) = afd {
                return tokio::time::timeout(timeout, afd.readable()).await.is_ok();
            }
        }
    }
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

/// How long after the stop signal an init that would have dropped it is watched for a
/// handler: a program installs its handlers as it starts.
const LATE_HANDLER_WATCH: Duration = Duration::from_secs(5);

/// The grace period after the stop signal: waits for the container to exit, and sends
/// the signal once more if it was thrown away. A container's init is its PID
/// namespace's init, and the kernel discards a signal such an init has no handler for:
/// a stop right after the start (the CRI conformance suite's) would otherwise reach a
/// program that was still setting up, and the whole grace period would end in SIGKILL.
/// So while the init drops the signal, it is watched (for [`LATE_HANDLER_WATCH`]) and
/// signalled again as soon as it has a handler: the first time it can arrive.
async fn grace(crust: &Crust, rec: &ContainerRecord, timeout: Duration) {
    let sig = signal_number(&rec.stop_signal);
    let begun = Instant::now();
    if container::proc::drops_signal(rec.pid, sig) == Some(true) {
        let watch = timeout.min(LATE_HANDLER_WATCH);
        while begun.elapsed() < watch {
            if wait_monitor(crust, rec, Duration::from_millis(50)).await {
                return;
            }
            match container::proc::drops_signal(rec.pid, sig) {
                Some(true) => continue,
                Some(false) => {
                    signal_init(rec, sig);
                    break;
                }
                None => return,
            }
        }
    }
    wait_monitor(crust, rec, timeout.saturating_sub(begun.elapsed())).await;
}

/// Ends a container under its lock: SIGKILL (the grace period, if any, is over) and the
/// wait for its exit; `refresh` then ends what it left in a shared PID namespace.
async fn kill_locked(crust: &Crust, rec: &mut ContainerRecord) -> Result<()> {
    if !send_kill(crust, rec) {
        return Ok(());
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
            grace(&crust, &snapshot, Duration::from_secs(timeout as u64)).await;
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
            crate::nri::convert::notify_container(
                &crust,
                crate::nri::api::Event::RemoveContainer,
                &rec,
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
/// SIGKILL to every container of a sandbox that runs (or waits at its start gate),
/// without waiting: StopPodSandbox sends it first, so that a crash later in the stop
/// still leaves them exited, then waits for them ([`stop_all`]) while it tears the
/// sandbox down.
pub async fn kill_all(crust: &Crust, sandbox_id: &str) {
    for c in crust.containers.of_sandbox(sandbox_id) {
        send_kill(crust, &mut *c.rec.lock().await);
    }
}

/// SIGKILL to a created or running container's init while its monitor lives; whether
/// there is an end to wait for (none for one exited or still being made).
fn send_kill(crust: &Crust, rec: &mut ContainerRecord) -> bool {
    refresh(crust, rec);
    if rec.state == ContainerState::Exited || rec.state == ContainerState::Creating {
        return false;
    }
    if monitor_alive(rec) {
        signal_init(rec, libc::SIGKILL);
    }
    true
}

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
