//! ExecSync: a command in a running container, its output captured, its exit code
//! returned, killed at the deadline.
//!
//! The process is made by the executor (`container::executor::exec`: the init's
//! namespaces and cgroup, the container's user, capabilities and env) as crustd's
//! child; crustd reads its pipes and waits for it on a pidfd, without a thread.

use crate::container_ops::refresh;
use crate::container_store::ContainerState;
use crate::daemon::Crust;
use crate::error::{Error, Result};
use container::executor::{self, ExecOpts, Stdio};
use cri_api::{ExecSyncRequest, ExecSyncResponse};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::AsyncReadExt;

/// Output kept per stream; the rest is read and dropped (containerd keeps 16 MiB).
const MAX_OUTPUT: usize = 16 << 20;

/// How long output is still read after the process exited: a background child that
/// inherited the pipe must not hold the call open.
const DRAIN: Duration = Duration::from_millis(500);

async fn read_all(fd: OwnedFd) -> Vec<u8> {
    let Ok(mut rx) = tokio::net::unix::pipe::Receiver::from_owned_fd(fd) else {
        return vec![];
    };
    let mut out = Vec::new();
    let mut buf = vec![0u8; 64 << 10];
    loop {
        match rx.read(&mut buf).await {
            Ok(0) | Err(_) => return out,
            Ok(n) => {
                let room = MAX_OUTPUT.saturating_sub(out.len());
                out.extend_from_slice(&buf[..n.min(room)]);
            }
        }
    }
}

fn pidfd_signal(fd: &OwnedFd, sig: i32) {
    // SAFETY: pidfd_send_signal on an fd we own.
    unsafe {
        libc::syscall(
            libc::SYS_pidfd_send_signal,
            fd.as_raw_fd(),
            sig,
            std::ptr::null::<libc::siginfo_t>(),
            0,
        )
    };
}

/// The exit code as shells and containerd report it: the status, or 128 + signal.
fn reap(fd: &OwnedFd) -> i32 {
    // SAFETY: waitid on our own child's pidfd into a zeroed siginfo.
    unsafe {
        let mut info: libc::siginfo_t = std::mem::zeroed();
        if libc::waitid(
            libc::P_PIDFD,
            fd.as_raw_fd() as libc::id_t,
            &mut info,
            libc::WEXITED,
        ) != 0
        {
            return -1;
        }
        let status = info.si_status();
        match info.si_code {
            libc::CLD_EXITED => status,
            _ => 128 + status,
        }
    }
}

pub async fn exec_sync(crust: Arc<Crust>, req: ExecSyncRequest) -> Result<ExecSyncResponse> {
    if req.cmd.is_empty() {
        return Err(Error::InvalidArgument("cmd is empty".into()));
    }
    let c = crust.containers.get(&req.container_id)?;
    let (state_dir, bundle, cgroup_dirs, runtime) = {
        let mut rec = c.rec.lock().await;
        refresh(&crust, &mut rec);
        if rec.state != ContainerState::Running {
            return Err(Error::FailedPrecondition(format!(
                "container {} is not running",
                rec.id
            )));
        }
        let dirs: Vec<PathBuf> = match &rec.cgroup {
            Some(cg) => match cgroups::CgroupPath::new(cg) {
                Ok(p) => {
                    use cgroups::CgroupManager;
                    crust.cgroups.dirs(&p)
                }
                Err(_) => vec![],
            },
            None => vec![],
        };
        (
            crust.containers.exec_state(&rec.id),
            crust.containers.bundle(&rec.id),
            dirs,
            rec.runtime.clone(),
        )
    };
    let spec_bytes = std::fs::read(bundle.join("config.json"))
        .map_err(|e| Error::Internal(format!("reading the spec of {}: {e}", c.id)))?;
    let mut spec: executor::oci_spec::runtime::Spec = serde_json::from_slice(&spec_bytes)
        .map_err(|e| Error::Internal(format!("parsing the spec of {}: {e}", c.id)))?;
    let mut process = spec.process().clone().unwrap_or_default();
    process.set_args(Some(req.cmd.clone()));
    process.set_terminal(Some(false));
    spec.set_process(Some(process));

    if let Some(rt) = crust
        .oci_runtimes
        .get(&runtime)
        .filter(|_| !runtime.is_empty())
    {
        return exec_external(rt, &c.id, &bundle, spec, &req).await;
    }
    let (out_r, out_w) =
        nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC | nix::fcntl::OFlag::O_NONBLOCK)
            .map_err(|e| Error::Internal(format!("pipe: {e}")))?;
    let (err_r, err_w) =
        nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC | nix::fcntl::OFlag::O_NONBLOCK)
            .map_err(|e| Error::Internal(format!("pipe: {e}")))?;
    // The process's ends block, as a program expects of its stdout.
    for w in [&out_w, &err_w] {
        let _ = nix::fcntl::fcntl(w, nix::fcntl::FcntlArg::F_SETFL(nix::fcntl::OFlag::empty()));
    }
    let id = c.id.clone();
    let pid = tokio::task::spawn_blocking(move || {
        let x = executor::Container::load(&state_dir)?;
        executor::exec(
            &x,
            ExecOpts {
                spec,
                stdin: Stdio::Null,
                stdout: Stdio::Fd(out_w),
                stderr: Stdio::Fd(err_w),
                cgroup_dirs,
            },
        )
    })
    .await
    .map_err(Error::internal)?
    .map_err(|e| match &e {
        container::Error::Create {
            step: executor::Step::Executable | executor::Step::Cwd,
            ..
        } => Error::InvalidArgument(format!("exec in {id}: {e}")),
        container::Error::ContainerState { .. } => {
            Error::FailedPrecondition(format!("exec in {id}: {e}"))
        }
        _ => Error::Internal(format!("exec in {id}: {e}")),
    })?;
    // SAFETY: pidfd_open of our own unreaped child.
    let raw = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
    if raw < 0 {
        return Err(Error::Internal(format!(
            "pidfd_open {pid}: {}",
            std::io::Error::last_os_error()
        )));
    }
    // SAFETY: the kernel just gave us this fd.
    let pidfd = unsafe { OwnedFd::from_raw_fd(raw as i32) };
    let out_task = tokio::spawn(read_all(out_r));
    let err_task = tokio::spawn(read_all(err_r));
    // SAFETY: an OwnedFd: it stays open, the same fd, for the AsyncFd's life.
    let afd = unsafe {
        tokio::io::unix::AsyncFd::register_with_interest(pidfd, tokio::io::Interest::READABLE)
    }
    .map_err(|e| Error::Internal(format!("watching exec {pid}: {e}")))?;
    let exited = async {
        let _ = afd.readable().await;
    };
    let timed_out = if req.timeout > 0 {
        tokio::time::timeout(Duration::from_secs(req.timeout as u64), exited)
            .await
            .is_err()
    } else {
        exited.await;
        false
    };
    if timed_out {
        pidfd_signal(afd.get_ref(), libc::SIGKILL);
    }
    let pidfd = afd.into_inner();
    let code = tokio::task::spawn_blocking(move || reap(&pidfd))
        .await
        .map_err(Error::internal)?;
    let drain = |t: tokio::task::JoinHandle<Vec<u8>>| async move {
        let abort = t.abort_handle();
        match tokio::time::timeout(DRAIN, t).await {
            Ok(Ok(v)) => v,
            _ => {
                abort.abort();
                vec![]
            }
        }
    };
    let stdout = drain(out_task).await;
    let stderr = drain(err_task).await;
    if timed_out {
        return Err(Error::DeadlineExceeded(format!(
            "command {:?} in container {} timed out after {}s",
            req.cmd, c.id, req.timeout
        )));
    }
    Ok(ExecSyncResponse {
        stdout,
        stderr,
        exit_code: code,
    })
}

/// ExecSync through an external OCI runtime: `<runtime> exec --process` with the
/// container's process (args replaced), its output piped to us, killed at the deadline.
async fn exec_external(
    rt: &container::executor::oci_runtime::OciRuntime,
    id: &str,
    bundle: &std::path::Path,
    spec: executor::oci_spec::runtime::Spec,
    req: &ExecSyncRequest,
) -> Result<ExecSyncResponse> {
    let tag = crate::util::new_id();
    let proc_file = bundle.join(format!("exec-{}.json", &tag[..12]));
    let pid_file = bundle.join(format!("exec-{}.pid", &tag[..12]));
    let process =
        serde_json::to_vec(&spec.process().clone().unwrap_or_default()).map_err(Error::internal)?;
    std::fs::write(&proc_file, process)
        .map_err(|e| Error::Internal(format!("writing {}: {e}", proc_file.display())))?;
    let cleanup = || {
        let _ = std::fs::remove_file(&proc_file);
        let _ = std::fs::remove_file(&pid_file);
    };
    let mut cmd = tokio::process::Command::from(rt.exec_command(id, &proc_file, &pid_file));
    cmd.stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true);
    let mut child = match cmd.spawn() {
        Ok(c) => c,
        Err(e) => {
            cleanup();
            return Err(Error::Internal(format!(
                "running {}: {e}",
                rt.binary.display()
            )));
        }
    };
    let mut out = child.stdout.take().expect("piped");
    let mut err = child.stderr.take().expect("piped");
    let out_task = tokio::spawn(async move {
        let mut v = Vec::new();
        let _ = out.read_to_end(&mut v).await;
        v.truncate(MAX_OUTPUT);
        v
    });
    let err_task = tokio::spawn(async move {
        let mut v = Vec::new();
        let _ = err.read_to_end(&mut v).await;
        v.truncate(MAX_OUTPUT);
        v
    });
    let status = if req.timeout > 0 {
        tokio::time::timeout(Duration::from_secs(req.timeout as u64), child.wait())
            .await
            .ok()
    } else {
        Some(child.wait().await)
    };
    let Some(status) = status else {
        if let Some(pid) = container::executor::oci_runtime::read_pid(&pid_file) {
            // SAFETY: the exec'd process, named by the runtime's pid file just now.
            unsafe { libc::kill(pid, libc::SIGKILL) };
        }
        let _ = child.kill().await;
        out_task.abort();
        err_task.abort();
        cleanup();
        return Err(Error::DeadlineExceeded(format!(
            "command {:?} in container {id} timed out after {}s",
            req.cmd, req.timeout
        )));
    };
    cleanup();
    let status = status.map_err(|e| Error::Internal(format!("waiting for exec: {e}")))?;
    let take = |t: tokio::task::JoinHandle<Vec<u8>>| async move {
        let abort = t.abort_handle();
        match tokio::time::timeout(DRAIN, t).await {
            Ok(Ok(v)) => v,
            _ => {
                abort.abort();
                vec![]
            }
        }
    };
    let stdout = take(out_task).await;
    let stderr = take(err_task).await;
    use std::os::unix::process::ExitStatusExt;
    let code = status
        .code()
        .unwrap_or_else(|| 128 + status.signal().unwrap_or(0));
    Ok(ExecSyncResponse {
        stdout,
        stderr,
        exit_code: code,
    })
}
