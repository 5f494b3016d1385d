//! ExecSync: a command in a running container, its output captured, its exit code
//! returned, killed at the deadline.
//!
//! The process is made by the executor (`container::executor::exec`: the init's
//! namespaces and cgroup, the container's user, capabilities and env) as crustd's
//! child; crustd reads its pipes and waits for it on a pidfd, without a thread.
//!
//! A call that goes away before its process ends (the client's deadline passed, see
//! `cri::deadline`, or it hung up) kills and reaps the process, as containerd does
//! when an exec's context ends ([`KillOnDrop`]): left as crustd's unreaped child, it
//! would keep the pod's PID namespace from ending, and the pause would not die.

pub mod attach;
pub mod io;

use crate::containers::lifecycle::refresh;
use crate::containers::store::ContainerState;
use crate::cri::error::{Error, Result};
use crate::daemon::Crust;
use container::executor::{self, ExecOpts, Stdio};
use cri_api::{ExecSyncRequest, ExecSyncResponse};
use io::{pump_in, pump_out, read_all, set_nonblocking, Exited};
use std::os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::fs::OpenOptionsExt;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

/// Output kept per stream; the rest is read and dropped (containerd keeps 16 MiB).
const MAX_OUTPUT: usize = 16 << 20;

/// Signals the exec'd process (gone already: nothing to do).
fn pidfd_signal(fd: &OwnedFd, sig: i32) {
    let _ = container::proc::pidfd_signal(fd.as_fd(), sig);
}

/// Reaps the exec'd process: its exit code as shells and containerd report it, -1 if
/// it could not be had.
fn reap(fd: &OwnedFd) -> i32 {
    container::proc::pidfd_reap(fd.as_fd(), false).unwrap_or(-1)
}

/// Holds a dup of an exec'd process's pidfd while its call waits for it: dropped
/// armed (the call went away), it kills the process and reaps it on a blocking
/// thread. [`KillOnDrop::disarm`] once the call has reaped the process itself.
struct KillOnDrop(Option<OwnedFd>);

impl KillOnDrop {
    fn new(pidfd: &OwnedFd) -> KillOnDrop {
        KillOnDrop(pidfd.try_clone().ok())
    }

    fn disarm(mut self) {
        self.0 = None;
    }
}

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let Some(fd) = self.0.take() else {
            return;
        };
        pidfd_signal(&fd, libc::SIGKILL);
        let reap = move || {
            reap(&fd);
        };
        match tokio::runtime::Handle::try_current() {
            Ok(rt) => drop(rt.spawn_blocking(reap)),
            // A thread of its own; where none can be had (a pid limit), reaped here
            // (the process was just killed: a moment's wait).
            Err(_) => {
                let cell = std::sync::Arc::new(parking_lot::Mutex::new(Some(reap)));
                let take = |c: &parking_lot::Mutex<Option<_>>| c.lock().take();
                let theirs = cell.clone();
                let spawned = std::thread::Builder::new().spawn(move || {
                    if let Some(f) = take(&theirs) {
                        f()
                    }
                });
                if spawned.is_err() {
                    if let Some(f) = take(&cell) {
                        f()
                    }
                }
            }
        }
    }
}

/// What running a command in a container needs, read under the container's lock.
pub(crate) struct Prepared {
    pub id: String,
    state_dir: PathBuf,
    bundle: PathBuf,
    cgroup_dirs: Vec<PathBuf>,
    runtime: String,
    spec: executor::oci_spec::runtime::Spec,
    /// The init's pid and start time, to tell a failed exec whether it went meanwhile.
    init: (i32, u64),
}

/// Checks that the container runs and builds the process to exec: the container's
/// process with `cmd` as its args.
pub(crate) async fn prepare(crust: &Crust, container_id: &str, cmd: &[String]) -> Result<Prepared> {
    if cmd.is_empty() {
        return Err(Error::InvalidArgument("cmd is empty".into()));
    }
    let c = crust.containers.get(container_id)?;
    let (state_dir, bundle, cgroup_dirs, runtime, init) = {
        let mut rec = c.rec.lock().await;
        refresh(crust, &mut rec);
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
            (rec.pid, rec.pid_start_time),
        )
    };
    let mut spec = crust.containers.read_spec(&c.id)?;
    let mut process = spec.process().clone().unwrap_or_default();
    process.set_args(Some(cmd.to_vec()));
    process.set_terminal(Some(false));
    spec.set_process(Some(process));
    Ok(Prepared {
        id: c.id.clone(),
        state_dir,
        bundle,
        cgroup_dirs,
        runtime,
        spec,
        init,
    })
}

impl Prepared {
    /// A process on a terminal: `TERM=xterm`, replacing the container's own, as
    /// containerd sets for a tty exec, so full-screen programs know what they talk to.
    /// (`process.terminal` stays off: the built-in executor is handed its pty; an OCI
    /// runtime is told in [`exec_terminal_external`].)
    fn for_terminal(&mut self) {
        let mut process = self.spec.process().clone().unwrap_or_default();
        let mut env: Vec<String> = process
            .env()
            .clone()
            .unwrap_or_default()
            .into_iter()
            .filter(|e| !e.starts_with("TERM="))
            .collect();
        env.push("TERM=xterm".into());
        process.set_env(Some(env));
        self.spec.set_process(Some(process));
    }

    /// The external OCI runtime that runs this container, if not the built-in executor.
    fn external<'a>(
        &self,
        crust: &'a Crust,
    ) -> Option<&'a container::executor::oci_runtime::OciRuntime> {
        crust
            .oci_runtimes
            .get(&self.runtime)
            .filter(|_| !self.runtime.is_empty())
    }

    /// Starts the process with the built-in executor; returns a pidfd to wait on and a
    /// guard, armed, that kills the process if dropped. The guard is armed in the
    /// blocking task that starts the process: a call that goes away meanwhile (its
    /// future dropped, and with it this task's result) kills it too, where a guard made
    /// after the await would never exist (seen under emulation, where a start outlasts
    /// a 300 ms deadline).
    async fn start(
        self,
        stdin: Stdio,
        stdout: Stdio,
        stderr: Stdio,
        controlling_tty: bool,
    ) -> Result<(OwnedFd, KillOnDrop)> {
        let id = self.id.clone();
        let (init_pid, init_start) = self.init;
        let started = tokio::task::spawn_blocking(move || {
            let x = executor::Container::load(&self.state_dir)?;
            let pid = executor::exec(
                &x,
                ExecOpts {
                    spec: self.spec,
                    stdin,
                    stdout,
                    stderr,
                    cgroup_dirs: self.cgroup_dirs,
                    controlling_tty,
                },
            )?;
            let pidfd = container::proc::pidfd_or_reap(pid);
            let guard = match &pidfd {
                Ok(fd) => KillOnDrop::new(fd),
                Err(_) => KillOnDrop(None),
            };
            Ok((pid, pidfd, guard))
        })
        .await
        .map_err(Error::internal)?
        .map_err(|e| match &e {
            // The container stopped (RemoveContainer, StopContainer, its own exit) after
            // the check that it runs: its namespaces were gone when the exec went to
            // join them. Not running, as the check would now say, not an internal error.
            // (An init on its way out has let go of its namespaces before it is a zombie.)
            _ if !init_running(init_pid, init_start) => {
                Error::FailedPrecondition(format!("container {id} is not running: {e}"))
            }
            container::Error::Create {
                step: executor::Step::Executable | executor::Step::Cwd,
                ..
            } => Error::InvalidArgument(format!("exec in {id}: {e}")),
            container::Error::ContainerState { .. } => {
                Error::FailedPrecondition(format!("exec in {id}: {e}"))
            }
            _ => Error::Internal(format!("exec in {id}: {e}")),
        })?;
        let (pid, pidfd, guard) = started;
        let pidfd =
            pidfd.map_err(|e| Error::Internal(format!("exec in {id}: pidfd_open {pid}: {e}")))?;
        Ok((pidfd, guard))
    }
}

/// The init is alive and still in its namespaces (an exiting one leaves them first).
fn init_running(pid: i32, start_time: u64) -> bool {
    container::proc::alive(pid, start_time)
        && std::fs::read_link(format!("/proc/{pid}/ns/mnt")).is_ok()
}

fn pipe() -> Result<(OwnedFd, OwnedFd)> {
    let (r, w) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC | nix::fcntl::OFlag::O_NONBLOCK)
        .map_err(|e| Error::Internal(format!("pipe: {e}")))?;
    Ok((r, w))
}

pub async fn exec_sync(crust: Arc<Crust>, req: ExecSyncRequest) -> Result<ExecSyncResponse> {
    let p = prepare(&crust, &req.container_id, &req.cmd).await?;
    if let Some(rt) = p.external(&crust) {
        return exec_external(rt, &p.id, &p.bundle, p.spec, &req).await;
    }
    let (out_r, out_w) = pipe()?;
    let (err_r, err_w) = pipe()?;
    // The process's ends blocking, as a program expects of its stdio.
    for w in [&out_w, &err_w] {
        set_nonblocking(w, false);
    }
    let id = p.id.clone();
    let (pidfd, guard) = p
        .start(Stdio::Null, Stdio::Fd(out_w), Stdio::Fd(err_w), false)
        .await?;
    let (done, rx) = Exited::new();
    let out_task = tokio::spawn(read_all(out_r, rx.clone(), MAX_OUTPUT));
    let err_task = tokio::spawn(read_all(err_r, rx, MAX_OUTPUT));
    // SAFETY: an OwnedFd: it stays open, the same fd, for the AsyncFd's life.
    let afd = unsafe {
        tokio::io::unix::AsyncFd::register_with_interest(pidfd, tokio::io::Interest::READABLE)
    }
    .map_err(|e| Error::Internal(format!("watching exec in {id}: {e}")))?;
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
    guard.disarm();
    done.send();
    let stdout = out_task.await.unwrap_or_default();
    let stderr = err_task.await.unwrap_or_default();
    if timed_out {
        return Err(Error::DeadlineExceeded(format!(
            "command {:?} in container {} timed out after {}s",
            req.cmd, id, req.timeout
        )));
    }
    Ok(ExecSyncResponse {
        stdout,
        stderr,
        exit_code: code,
    })
}

/// The files `<runtime> exec --process` needs beside the bundle: the process to run
/// and where the runtime writes its pid. Removed when dropped.
struct RuntimeExec {
    proc_file: PathBuf,
    pid_file: PathBuf,
}

impl RuntimeExec {
    fn new(bundle: &std::path::Path, spec: &executor::oci_spec::runtime::Spec) -> Result<Self> {
        let tag = crate::daemon::util::new_id();
        let x = RuntimeExec {
            proc_file: bundle.join(format!("exec-{}.json", &tag[..12])),
            pid_file: bundle.join(format!("exec-{}.pid", &tag[..12])),
        };
        let process = serde_json::to_vec(&spec.process().clone().unwrap_or_default())
            .map_err(Error::internal)?;
        std::fs::write(&x.proc_file, process)
            .map_err(|e| Error::Internal(format!("writing {}: {e}", x.proc_file.display())))?;
        Ok(x)
    }

    fn command(
        &self,
        rt: &container::executor::oci_runtime::OciRuntime,
        id: &str,
    ) -> tokio::process::Command {
        tokio::process::Command::from(rt.exec_command(id, &self.proc_file, &self.pid_file))
    }
}

impl Drop for RuntimeExec {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.proc_file);
        let _ = std::fs::remove_file(&self.pid_file);
    }
}

/// The exit code as shells and containerd report it, from a child's status.
fn exit_code(status: std::process::ExitStatus) -> i32 {
    use std::os::unix::process::ExitStatusExt;
    status
        .code()
        .unwrap_or_else(|| 128 + status.signal().unwrap_or(0))
}

/// Tells the output pumps the process has exited and lets them finish (they end by
/// themselves, see [`io`](self::io)).
async fn drain_pumps(exited: Exited, pumps: Vec<tokio::task::JoinHandle<()>>) {
    exited.send();
    for t in pumps {
        let _ = t.await;
    }
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
    let files = RuntimeExec::new(bundle, &spec)?;
    let mut cmd = files.command(rt, id);
    cmd.stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true);
    let mut child = cmd
        .spawn()
        .map_err(|e| Error::Internal(format!("running {}: {e}", rt.binary.display())))?;
    let out = child.stdout.take().expect("piped");
    let err = child.stderr.take().expect("piped");
    let (exited, rx) = Exited::new();
    let out_task = tokio::spawn(read_all(
        out.into_owned_fd().map_err(Error::internal)?,
        rx.clone(),
        MAX_OUTPUT,
    ));
    let err_task = tokio::spawn(read_all(
        err.into_owned_fd().map_err(Error::internal)?,
        rx,
        MAX_OUTPUT,
    ));
    let status = if req.timeout > 0 {
        tokio::time::timeout(Duration::from_secs(req.timeout as u64), child.wait())
            .await
            .ok()
    } else {
        Some(child.wait().await)
    };
    let Some(status) = status else {
        if let Some(pid) = container::executor::oci_runtime::read_pid(&files.pid_file) {
            // SAFETY: the exec'd process, named by the runtime's pid file just now.
            unsafe { libc::kill(pid, libc::SIGKILL) };
        }
        let _ = child.kill().await;
        out_task.abort();
        err_task.abort();
        return Err(Error::DeadlineExceeded(format!(
            "command {:?} in container {id} timed out after {}s",
            req.cmd, req.timeout
        )));
    };
    let status = status.map_err(|e| Error::Internal(format!("waiting for exec: {e}")))?;
    exited.send();
    let stdout = out_task.await.unwrap_or_default();
    let stderr = err_task.await.unwrap_or_default();
    Ok(ExecSyncResponse {
        stdout,
        stderr,
        exit_code: exit_code(status),
    })
}

/// The terminal size a tty client sends first thing, waited for so the process can start
/// with it: a shell, `stty size` or a full-screen program asks at once, and a pty that
/// was never sized answers 0x0 (`stty: standard input`). kubectl's size crosses the
/// apiserver and the kubelet's proxy; on a loaded node that took more than half a second
/// (the wait this had before), so it is given seconds. Only a client that opens a resize
/// stream and never writes to it waits them all; one without the stream, or that closes
/// it, does not wait. `buf` keeps what was read of the next size.
pub(crate) async fn first_size(
    resize: Option<&mut streaming::remotecommand::Input>,
    buf: &mut Vec<u8>,
) -> Option<streaming::remotecommand::Size> {
    let first = streaming::remotecommand::next_size(resize?, buf);
    tokio::time::timeout(Duration::from_secs(5), first)
        .await
        .ok()
        .flatten()
}

/// Sets a terminal's size (on either side of the pty); the kernel sends SIGWINCH to its
/// foreground process group.
pub(crate) fn set_size(master: &OwnedFd, sz: streaming::remotecommand::Size) {
    let ws = libc::winsize {
        ws_row: sz.height,
        ws_col: sz.width,
        ws_xpixel: 0,
        ws_ypixel: 0,
    };
    // SAFETY: TIOCSWINSZ on a pty master we own, with a valid winsize.
    unsafe { libc::ioctl(master.as_raw_fd(), libc::TIOCSWINSZ, &ws) };
}

/// Applies each terminal size the client reports to the pty.
async fn pump_resize(mut from: streaming::remotecommand::Input, master: OwnedFd, mut buf: Vec<u8>) {
    while let Some(sz) = streaming::remotecommand::next_size(&mut from, &mut buf).await {
        set_size(&master, sz);
    }
}

/// A pty of the container's own devpts (what its `/dev/pts` shows), so `tty` and
/// `ttyname` work inside: its `ptmx` opened through the init's root, the peer taken
/// from the master itself (TIOCGPTPEER) rather than by a path.
fn container_pty(state_dir: &std::path::Path) -> std::io::Result<(OwnedFd, OwnedFd)> {
    let x = executor::Container::load(state_dir).map_err(std::io::Error::other)?;
    let ptmx = format!("/proc/{}/root/dev/pts/ptmx", x.pid);
    let master: OwnedFd = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .custom_flags(libc::O_NOCTTY | libc::O_CLOEXEC)
        .open(&ptmx)?
        .into();
    // SAFETY: ioctls on the master we just opened; `unlock` outlives the call.
    unsafe {
        let unlock: libc::c_int = 0;
        if libc::ioctl(master.as_raw_fd(), libc::TIOCSPTLCK, &unlock) < 0 {
            return Err(std::io::Error::last_os_error());
        }
        let peer = libc::ioctl(
            master.as_raw_fd(),
            libc::TIOCGPTPEER,
            libc::O_RDWR | libc::O_NOCTTY | libc::O_CLOEXEC,
        );
        if peer < 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok((master, OwnedFd::from_raw_fd(peer)))
    }
}

/// Waits for the process behind `pidfd` and reaps it: its exit code.
async fn wait_exit(pidfd: OwnedFd) -> Result<i32> {
    // SAFETY: an OwnedFd: it stays open, the same fd, for the AsyncFd's life.
    let afd = unsafe {
        tokio::io::unix::AsyncFd::register_with_interest(pidfd, tokio::io::Interest::READABLE)
    }
    .map_err(|e| Error::Internal(format!("watching exec: {e}")))?;
    let _ = afd.readable().await;
    let pidfd = afd.into_inner();
    tokio::task::spawn_blocking(move || reap(&pidfd))
        .await
        .map_err(Error::internal)
}

/// Exec through the streaming server (the Exec RPC's URL): the command's stdio wired
/// to the client's streams, with a pty when it asked for a tty; its exit code goes back
/// on the error stream.
pub async fn exec_stream(
    crust: Arc<Crust>,
    req: cri_api::ExecRequest,
    mut streams: streaming::remotecommand::Streams,
) {
    let started = std::time::Instant::now();
    let res = exec_streams(&crust, &req, &mut streams).await;
    match &res {
        Ok(code) => tracing::debug!(
            container = %req.container_id,
            tty = req.tty,
            code,
            ms = started.elapsed().as_secs_f64() * 1e3,
            "streaming exec ended"
        ),
        Err(e) => tracing::debug!(container = %req.container_id, "streaming exec failed: {e}"),
    }
    streams.finish(res.map_err(|e| e.to_string()));
}

async fn exec_streams(
    crust: &Crust,
    req: &cri_api::ExecRequest,
    streams: &mut streaming::remotecommand::Streams,
) -> Result<i32> {
    let mut p = prepare(crust, &req.container_id, &req.cmd).await?;
    if req.tty {
        p.for_terminal();
    }
    if let Some(rt) = p.external(crust) {
        if req.tty {
            return exec_terminal_external(rt, p, streams).await;
        }
        return exec_streams_external(rt, p, streams).await;
    }
    let dup = |fd: &OwnedFd| {
        fd.try_clone()
            .map_err(|e| Error::Internal(format!("dup: {e}")))
    };
    let mut pumps = Vec::new();
    let (exited, rx) = Exited::new();
    let pidfd = if req.tty {
        let (master, slave) = match container_pty(&p.state_dir) {
            Ok(pair) => pair,
            Err(e) => {
                // A container without its own devpts: a pty of the node's, which
                // works as a terminal but has no name inside the container.
                tracing::debug!(container = %p.id, "no pty in the container's devpts ({e}); using the node's");
                let pty = nix::pty::openpty(None, None)
                    .map_err(|e| Error::Internal(format!("opening a pty: {e}")))?;
                (pty.master, pty.slave)
            }
        };
        // The master must not leak into the process.
        let _ = nix::fcntl::fcntl(
            &master,
            nix::fcntl::FcntlArg::F_SETFD(nix::fcntl::FdFlag::FD_CLOEXEC),
        );
        // The client sends its terminal's size first thing: the process should start
        // with it (a shell asks at once), so it is waited for, briefly.
        let mut size_buf = Vec::new();
        if let Some(sz) = first_size(streams.resize.as_mut(), &mut size_buf).await {
            set_size(&master, sz);
        }
        let stdin = if streams.stdin.is_some() {
            Stdio::Fd(dup(&slave)?)
        } else {
            Stdio::Null
        };
        let (pidfd, started) = p
            .start(stdin, Stdio::Fd(dup(&slave)?), Stdio::Fd(slave), true)
            .await?;
        // From here the stream's own handling ends the process (SIGHUP when the
        // client leaves).
        started.disarm();
        if let Some(s) = streams.stdin.take() {
            tokio::spawn(pump_in(s, dup(&master)?));
        }
        if let Some(r) = streams.resize.take() {
            tokio::spawn(pump_resize(r, dup(&master)?, size_buf));
        }
        pumps.push(tokio::spawn(pump_out(master, rx, streams.stdout.clone())));
        pidfd
    } else {
        let stdin = match streams.stdin.take() {
            Some(s) => {
                let (r, w) = pipe()?;
                set_nonblocking(&r, false);
                tokio::spawn(pump_in(s, w));
                Stdio::Fd(r)
            }
            None => Stdio::Null,
        };
        let (out_r, out_w) = pipe()?;
        let (err_r, err_w) = pipe()?;
        set_nonblocking(&out_w, false);
        set_nonblocking(&err_w, false);
        let (pidfd, started) = p
            .start(stdin, Stdio::Fd(out_w), Stdio::Fd(err_w), false)
            .await?;
        started.disarm();
        pumps.push(tokio::spawn(pump_out(
            out_r,
            rx.clone(),
            streams.stdout.clone(),
        )));
        pumps.push(tokio::spawn(pump_out(err_r, rx, streams.stderr.clone())));
        pidfd
    };
    let code = if req.tty {
        // A client that leaves hangs up its terminal, as closing a terminal window does:
        // the process gets SIGHUP (a shell exits) instead of waiting for input forever.
        let hup = pidfd
            .try_clone()
            .map_err(|e| Error::Internal(format!("dup: {e}")))?;
        let exited = wait_exit(pidfd);
        tokio::pin!(exited);
        tokio::select! {
            code = &mut exited => code?,
            _ = streams.closed() => {
                pidfd_signal(&hup, libc::SIGHUP);
                exited.await?
            }
        }
    } else {
        wait_exit(pidfd).await?
    };
    drain_pumps(exited, pumps).await;
    Ok(code)
}

/// A streaming exec with a tty through an external OCI runtime: the runtime runs in the
/// foreground on a pty of ours as its controlling terminal, the way it runs under a
/// user's shell, and relays between that and the pty it makes in the container. Input,
/// output and the exit code then pass through our master; a resize set on it reaches
/// the runtime as SIGWINCH, which it applies to the container's pty; a client that leaves
/// hangs the terminal up (SIGHUP, which the runtime passes on).
async fn exec_terminal_external(
    rt: &container::executor::oci_runtime::OciRuntime,
    mut p: Prepared,
    streams: &mut streaming::remotecommand::Streams,
) -> Result<i32> {
    let pty = nix::pty::openpty(None, None)
        .map_err(|e| Error::Internal(format!("opening a pty: {e}")))?;
    let (master, slave) = (pty.master, pty.slave);
    let _ = nix::fcntl::fcntl(
        &master,
        nix::fcntl::FcntlArg::F_SETFD(nix::fcntl::FdFlag::FD_CLOEXEC),
    );
    // The client's first size goes on our terminal and into the process's
    // `consoleSize`: the runtime sizes the container's pty with it before the command
    // runs (it copies our terminal's size only later, racing a shell that asks at once).
    let mut size_buf = Vec::new();
    let mut process = p.spec.process().clone().unwrap_or_default();
    process.set_terminal(Some(true));
    if let Some(sz) = first_size(streams.resize.as_mut(), &mut size_buf).await {
        set_size(&master, sz);
        let b = executor::oci_spec::runtime::BoxBuilder::default()
            .height(u64::from(sz.height))
            .width(u64::from(sz.width))
            .build()
            .map_err(Error::internal)?;
        process.set_console_size(Some(b));
    }
    p.spec.set_process(Some(process));
    let files = RuntimeExec::new(&p.bundle, &p.spec)?;
    let mut child = {
        let mut cmd = files.command(rt, &p.id);
        let dup = |fd: &OwnedFd| {
            fd.try_clone()
                .map(std::process::Stdio::from)
                .map_err(|e| Error::Internal(format!("dup: {e}")))
        };
        cmd.stdin(dup(&slave)?)
            .stdout(dup(&slave)?)
            .stderr(std::process::Stdio::from(slave));
        // SAFETY: only async-signal-safe calls between fork and exec.
        unsafe {
            cmd.pre_exec(|| {
                if libc::setsid() < 0 || libc::ioctl(0, libc::TIOCSCTTY, 0) < 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        cmd.spawn()
            .map_err(|e| Error::Internal(format!("running {}: {e}", rt.binary.display())))?
        // The command, and with it our copies of the slave, go here: the master reads
        // end-of-file once the runtime is gone.
    };
    if let Some(s) = streams.stdin.take() {
        tokio::spawn(pump_in(s, master.try_clone().map_err(Error::internal)?));
    }
    if let Some(r) = streams.resize.take() {
        tokio::spawn(pump_resize(
            r,
            master.try_clone().map_err(Error::internal)?,
            size_buf,
        ));
    }
    let (exited, rx) = Exited::new();
    let pumps = vec![tokio::spawn(pump_out(master, rx, streams.stdout.clone()))];
    let status = tokio::select! {
        st = child.wait() => st,
        _ = streams.closed() => {
            if let Some(pid) = child.id() {
                // SAFETY: kill(2) of our own child, not yet reaped.
                unsafe { libc::kill(pid as i32, libc::SIGHUP) };
            }
            child.wait().await
        }
    }
    .map_err(|e| Error::Internal(format!("waiting for exec: {e}")))?;
    drain_pumps(exited, pumps).await;
    drop(files);
    Ok(exit_code(status))
}

/// A streaming exec through an external OCI runtime (`<runtime> exec`), without a tty.
async fn exec_streams_external(
    rt: &container::executor::oci_runtime::OciRuntime,
    p: Prepared,
    streams: &mut streaming::remotecommand::Streams,
) -> Result<i32> {
    let files = RuntimeExec::new(&p.bundle, &p.spec)?;
    let mut cmd = files.command(rt, &p.id);
    cmd.stdin(if streams.stdin.is_some() {
        std::process::Stdio::piped()
    } else {
        std::process::Stdio::null()
    })
    .stdout(std::process::Stdio::piped())
    .stderr(std::process::Stdio::piped());
    let mut child = cmd
        .spawn()
        .map_err(|e| Error::Internal(format!("running {}: {e}", rt.binary.display())))?;
    let fd = |o: Option<std::io::Result<OwnedFd>>| o.and_then(|r| r.ok());
    if let (Some(s), Some(w)) = (
        streams.stdin.take(),
        fd(child.stdin.take().map(|x| x.into_owned_fd())),
    ) {
        tokio::spawn(pump_in(s, w));
    }
    let mut pumps = Vec::new();
    let (exited, rx) = Exited::new();
    if let Some(o) = fd(child.stdout.take().map(|x| x.into_owned_fd())) {
        pumps.push(tokio::spawn(pump_out(
            o,
            rx.clone(),
            streams.stdout.clone(),
        )));
    }
    if let Some(e) = fd(child.stderr.take().map(|x| x.into_owned_fd())) {
        pumps.push(tokio::spawn(pump_out(e, rx, streams.stderr.clone())));
    }
    let status = child
        .wait()
        .await
        .map_err(|e| Error::Internal(format!("waiting for exec: {e}")))?;
    drain_pumps(exited, pumps).await;
    Ok(exit_code(status))
}
