//! The pod sandbox's pause process: the process whose namespaces a pod's containers
//! join. The binary is `crates/pause` (`no_std`, static, about 12 KiB resident),
//! embedded here by `build.rs` and written to disk by [`install`].
//!
//! [`spawn`] runs `crust-pause fork` after unsharing the pod's namespaces in the forked
//! child (`pre_exec`). The launcher forks the real pause, prints its pid and exits; so
//! the pause is nobody's child here (no zombie for `crustd` to reap, and it survives
//! `crustd` restarts) and, with a new PID namespace, it is that namespace's PID 1 and
//! reaps the pod's orphans.
//!
//! Unless the spec says `keep_root`, the launcher first gives itself a mount namespace
//! whose only mount, root and cwd is an empty read-only tmpfs (or joins the one
//! [`empty_root_ns`] made for all pauses), and the pause inherits it: a container that
//! may ptrace the pause (`CAP_SYS_PTRACE`, PID namespace shared)
//! finds nothing of the host's behind `/proc/1/root` (see `crates/pause/src/main.rs`).
//! Nothing here or in crustd uses the pause's mount namespace or root: the pod's
//! namespaces are pinned and joined through `/proc/PID/ns/`, sysctls, `/dev/shm` and
//! the pod's files are made from the host's side.
//!
//! A pid alone does not name a process for long: [`Pause`] carries the start time the
//! kernel recorded (field 22 of `/proc/PID/stat`), and [`alive`] and [`stop`] treat a
//! pid with another start time as gone, so a record reloaded after a restart never
//! signals a stranger who got the pid.
//!
//! ```text
//!   crustd ──fork──▶ child: into the pod's v1 cgroups, [into its cgroup2 one and the
//!                    pod's user namespace as its root, `userns_fd`], unshare(flags), sethostname,
//!                    setsid, exec `crust-pause fork [CGROUP2_FD]`: unshare(CLONE_NEWNS),
//!                    pivot_root into an empty read-only tmpfs, the host's mounts detached
//!                       └─clone──▶ pause (PID 1 of the pod's PID namespace if new, born
//!                                  in the pod's cgroups, on the empty root)
//!   crustd ◀── "PID\n" ── launcher exits 0
//! ```

use std::io::{self, BufRead, BufReader, Read};
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::fs::OpenOptionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use std::os::fd::{AsFd, OwnedFd};

use nix::fcntl::OFlag;

use crate::cgroup_join::CgroupJoin;
use crate::embedded;
use crate::error::{Error, Result};
use crate::ns::NsKind;

/// The pause binary built from `crates/pause`.
pub const BINARY: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/crust-pause"));

/// The name [`install`] gives it.
pub const FILE_NAME: &str = "crust-pause";

/// How long [`stop`] waits for the pause to go after SIGKILL before giving up.
const KILL_WAIT: Duration = Duration::from_secs(5);

/// Linux's limit on a hostname (`HOST_NAME_MAX`).
const HOST_NAME_MAX: usize = 64;

/// Writes the embedded pause binary to `dir/crust-pause` (mode 0755), creating `dir`,
/// unless an identical file with that mode is already there; returns its path.
///
/// The file is replaced by a rename, never rewritten in place: a pause running from
/// the old file keeps its inode, and a crash never leaves a half-written binary.
pub fn install(dir: &Path) -> Result<PathBuf> {
    embedded::install(dir, FILE_NAME, BINARY, "pause")
}

/// What [`spawn`] starts: which binary, and which namespaces the pause gets new.
/// Namespaces not asked for are the caller's (the host's, for `hostNetwork` pods...).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PauseSpec {
    /// The pause binary, usually what [`install`] returned.
    pub binary: PathBuf,
    /// Set in the new UTS namespace. Ignored without `new_uts`: a pod on the host's
    /// UTS namespace must not rename the node (the kubelet sends a hostname anyway).
    pub hostname: Option<String>,
    pub new_net: bool,
    pub new_ipc: bool,
    pub new_uts: bool,
    pub new_pid: bool,
    /// The pod's cgroup directories (each v1 hierarchy's and/or the cgroup2 one) the
    /// pause is born in; empty: the caller's. See `crate::cgroup_join` for how.
    pub cgroup_dirs: Vec<PathBuf>,
    /// A user namespace (an fd from `crate::userns::create`, open until `spawn`
    /// returns) the pause enters, as its root, before it makes the new namespaces
    /// above, which that namespace then owns. `None`: the caller's.
    pub userns_fd: Option<RawFd>,
    /// The pause keeps the caller's mount namespace, root and cwd; only for callers
    /// that may not make a mount namespace (tests without privilege). Otherwise it gets
    /// a mount namespace of its own on an empty read-only tmpfs, so that a process
    /// reaching it through `/proc/PID/root` or `cwd` finds nothing of the host's.
    pub keep_root: bool,
    /// A mount namespace from [`empty_root_ns`] (an fd open until `spawn` returns) the
    /// pause joins instead of making its own: the same empty root, without copying
    /// and detaching every mount of the host's table at each start. Ignored with
    /// `keep_root`, and with `userns_fd` (the pause's root there may not join a
    /// namespace the host's user namespace owns; it makes its own, as without this).
    pub mount_ns: Option<RawFd>,
}

impl PauseSpec {
    /// The namespaces this spec makes new.
    pub fn new_namespaces(&self) -> Vec<NsKind> {
        [
            (self.new_net, NsKind::Net),
            (self.new_ipc, NsKind::Ipc),
            (self.new_uts, NsKind::Uts),
            (self.new_pid, NsKind::Pid),
        ]
        .into_iter()
        .filter_map(|(on, k)| on.then_some(k))
        .collect()
    }

    fn unshare_flags(&self) -> libc::c_int {
        self.new_namespaces()
            .into_iter()
            .fold(0, |f, k| f | k.clone_flag())
    }
}

/// A running pause: its pid in the caller's PID namespace and its start time (clock
/// ticks after boot, field 22 of `/proc/PID/stat`), which together name one process
/// even after the pid is reused. Both are worth persisting in the sandbox record.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Pause {
    pub pid: i32,
    pub start_time: u64,
}

impl Pause {
    pub fn alive(&self) -> bool {
        alive(self.pid, self.start_time)
    }

    pub fn stop(&self, timeout: Duration) -> Result<()> {
        stop(self.pid, self.start_time, timeout)
    }
}

// What failed in the forked child, sent to the parent as one byte over a pipe (std's
// own error pipe carries only the errno).
const STEP_UNSHARE: u8 = 1;
const STEP_SETHOSTNAME: u8 = 2;
const STEP_SETSID: u8 = 3;
const STEP_CGROUP: u8 = 4;
const STEP_USERNS: u8 = 5;
// What failed in the launcher on its way into the empty root: its exit status, with
// `-ERRNO` on its stdout (crates/pause/src/main.rs has the same numbers).
const STEP_MOUNT_NS: u8 = 6;
const STEP_PRIVATE: u8 = 7;
const STEP_TMPFS: u8 = 8;
const STEP_PIVOT_ROOT: u8 = 9;
const STEP_DETACH: u8 = 10;
const STEP_JOIN_MOUNT_NS: u8 = 11;

fn step_name(code: Option<u8>) -> &'static str {
    match code {
        Some(STEP_UNSHARE) => "unshare",
        Some(STEP_SETHOSTNAME) => "sethostname",
        Some(STEP_SETSID) => "setsid",
        Some(STEP_CGROUP) => "cgroup",
        Some(STEP_USERNS) => "join user namespace",
        Some(STEP_MOUNT_NS) => "unshare mount namespace",
        Some(STEP_PRIVATE) => "make mounts private",
        Some(STEP_TMPFS) => "mount empty root",
        Some(STEP_PIVOT_ROOT) => "pivot_root",
        Some(STEP_DETACH) => "detach host root",
        Some(STEP_JOIN_MOUNT_NS) => "join the empty-root mount namespace",
        _ => "exec",
    }
}

fn check_hostname(hostname: &str) -> Result<Vec<u8>> {
    let reason = if hostname.is_empty() {
        Some("empty")
    } else if hostname.len() > HOST_NAME_MAX {
        Some("longer than 64 bytes")
    } else if hostname.contains('\0') {
        Some("contains a NUL byte")
    } else {
        None
    };
    match reason {
        Some(reason) => Err(Error::InvalidHostname {
            hostname: hostname.to_string(),
            reason,
        }),
        None => Ok(hostname.as_bytes().to_vec()),
    }
}

/// The mount namespace every pause outside a user namespace can share
/// ([`PauseSpec::mount_ns`]): its only mount, root and cwd an empty read-only tmpfs.
/// Made once by a pause of its own, which is stopped once the namespace is open.
///
/// One namespace for all those pauses loses nothing: it holds nothing but the
/// read-only tmpfs, and only a process with `CAP_SYS_ADMIN` over the host's user
/// namespace could join it to mount something there, which could then do anything to
/// the host anyway.
pub fn empty_root_ns(binary: &Path) -> Result<OwnedFd> {
    let spec = PauseSpec {
        binary: binary.to_path_buf(),
        ..PauseSpec::default()
    };
    let pause = spawn(&spec)?;
    let opened = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_CLOEXEC)
        .open(format!("/proc/{}/ns/mnt", pause.pid));
    // Still the same process after the open: the namespace is the pause's.
    let ours = pause.alive();
    let stopped = pause.stop(Duration::from_secs(2));
    let fd = match opened {
        Ok(f) if ours => OwnedFd::from(f),
        Ok(_) => return Err(Error::PauseVanished { pid: pause.pid }),
        Err(source) => {
            return Err(Error::SpawnPause {
                binary: binary.to_path_buf(),
                step: "open the empty root's mount namespace",
                source,
            })
        }
    };
    stopped?;
    Ok(fd)
}

/// Starts a pause as [`PauseSpec`] says and returns it once it runs.
///
/// Steps, each named in its error: `unshare`, `sethostname` and `setsid` in the forked
/// child before exec and the launcher's steps into the empty root (`SpawnPause`), the
/// launcher's exit status and pid line (`PauseLauncher`), the pause's presence in
/// `/proc` (`PauseVanished`).
///
/// Safe to call from a multi-threaded program (a tokio runtime): the code between fork
/// and exec makes only async-signal-safe syscalls on data prepared before the fork.
pub fn spawn(spec: &PauseSpec) -> Result<Pause> {
    // ETXTBSY: another thread of this process forked while the binary was still open
    // for writing (its install), and that child holds the fd until it execs. Transient.
    let mut tries = 0;
    loop {
        match spawn_once(spec) {
            Err(Error::SpawnPause { source, .. })
                if source.raw_os_error() == Some(libc::ETXTBSY) && tries < 20 =>
            {
                tries += 1;
                std::thread::sleep(std::time::Duration::from_millis(5));
            }
            other => return other,
        }
    }
}

fn spawn_once(spec: &PauseSpec) -> Result<Pause> {
    let binary = spec.binary.clone();
    let hostname = match (&spec.hostname, spec.new_uts) {
        (Some(h), true) => Some(check_hostname(h)?),
        _ => None,
    };
    let (step_r, step_w) = step_pipe(&binary)?;
    let cgroups = open_cgroups(&spec.cgroup_dirs, &binary)?;
    let setup = ChildSetup::new(spec, hostname, step_w.as_raw_fd(), &cgroups);
    let binary_fd = open_binary_fd(&binary, setup.userns)?;
    let mut cmd = launcher_command(
        &binary,
        binary_fd.as_ref(),
        spec.keep_root,
        setup.mount_ns,
        setup.launcher_cgroup,
    );
    // SAFETY: the closure runs between fork and exec; `ChildSetup::run` says what it
    // may do there.
    unsafe {
        cmd.pre_exec(move || setup.run());
    }
    let spawned = cmd.spawn();
    drop((step_w, cgroups, binary_fd));
    let mut launcher = match spawned {
        Ok(c) => c,
        Err(source) => return Err(child_failure(&step_r, binary, source)),
    };
    drop(step_r);

    let pid = launched_pid(&mut launcher, &binary)?;
    started(pid, spec)
}

/// The pipe the forked child names its failed step on (see `STEP_*`): non-blocking,
/// so that reading it after a failed spawn never waits, and close-on-exec, so that
/// the exec closes it and an empty pipe means the exec itself failed.
fn step_pipe(binary: &Path) -> Result<(OwnedFd, OwnedFd)> {
    nix::unistd::pipe2(OFlag::O_CLOEXEC | OFlag::O_NONBLOCK).map_err(|e| Error::SpawnPause {
        binary: binary.to_path_buf(),
        step: "pipe",
        source: e.into(),
    })
}

/// The pod's cgroup directories, opened before the fork: the child may only use fds.
fn open_cgroups(dirs: &[PathBuf], binary: &Path) -> Result<CgroupJoin> {
    CgroupJoin::open(dirs).map_err(|(path, source)| Error::SpawnPause {
        binary: binary.to_path_buf(),
        step: "cgroup",
        source: io::Error::new(source.kind(), format!("{}: {source}", path.display())),
    })
}

/// As the root of a user namespace the child may not reach the binary through
/// directories only the host's root may enter: it execs it through an fd opened here
/// instead (what fexecve does). `None` outside a user namespace.
fn open_binary_fd(binary: &Path, userns: Option<RawFd>) -> Result<Option<OwnedFd>> {
    Ok(match userns {
        Some(_) => Some(
            std::fs::OpenOptions::new()
                .read(true)
                .custom_flags(libc::O_PATH | libc::O_CLOEXEC)
                .open(binary)
                .map(OwnedFd::from)
                .map_err(|source| Error::SpawnPause {
                    binary: binary.to_path_buf(),
                    step: "open",
                    source,
                })?,
        ),
        None => None,
    })
}

/// `crust-pause fork [--keep-root | --mount-ns FD] [CGROUP2_FD]`, by `binary_fd` when
/// there is one, with its stdout piped for the pid line.
fn launcher_command(
    binary: &Path,
    binary_fd: Option<&OwnedFd>,
    keep_root: bool,
    mount_ns: Option<RawFd>,
    launcher_cgroup: Option<RawFd>,
) -> Command {
    let mut cmd = match binary_fd {
        Some(fd) => {
            let mut c = Command::new(format!("/proc/self/fd/{}", fd.as_raw_fd()));
            c.arg0(FILE_NAME);
            c
        }
        None => Command::new(binary),
    };
    cmd.arg("fork");
    if keep_root {
        cmd.arg("--keep-root");
    } else if let Some(fd) = mount_ns {
        cmd.arg("--mount-ns").arg(fd.to_string());
    }
    if let Some(fd) = launcher_cgroup {
        // The launcher clones the pause into this cgroup2 directory.
        cmd.arg(fd.to_string());
    }
    cmd.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        // With `keep_root` the pause must not hold a mount busy through its working
        // directory.
        .current_dir("/");
    cmd
}

/// Everything the forked child needs, prepared before the fork: between fork and exec
/// a multi-threaded parent's child may not allocate or take locks.
struct ChildSetup {
    /// The write end of [`step_pipe`].
    step_fd: RawFd,
    /// The `tasks` (or `cgroup.procs`) files of the pod's v1 cgroups.
    tasks: Vec<RawFd>,
    /// The pod's cgroup2 directory.
    unified: Option<RawFd>,
    /// `unified` when the launcher moves the pause there itself (no user namespace),
    /// kept open across the exec.
    launcher_cgroup: Option<RawFd>,
    /// The mount namespace the launcher joins ([`PauseSpec::mount_ns`]), kept open
    /// across the exec.
    mount_ns: Option<RawFd>,
    userns: Option<RawFd>,
    flags: libc::c_int,
    hostname: Option<Vec<u8>>,
}

impl ChildSetup {
    fn new(
        spec: &PauseSpec,
        hostname: Option<Vec<u8>>,
        step_fd: RawFd,
        cgroups: &CgroupJoin,
    ) -> ChildSetup {
        let (tasks, unified) = cgroups.raw();
        let tasks: Vec<RawFd> = tasks.into_iter().map(|(fd, _)| fd).collect();
        let unified = unified.map(|(fd, _)| fd);
        let userns = spec.userns_fd;
        ChildSetup {
            step_fd,
            tasks,
            unified,
            // In a user namespace the pause is no longer root on the host and may not
            // move itself: the forked child joins the cgroup2 directory too, before.
            launcher_cgroup: unified.filter(|_| userns.is_none()),
            mount_ns: spec
                .mount_ns
                .filter(|_| !spec.keep_root && userns.is_none()),
            userns,
            flags: spec.unshare_flags(),
            hostname,
        }
    }

    /// Runs in the forked child, before exec. It only calls the cgroup moves, fcntl,
    /// setns, setres[ug]id, setgroups, unshare, sethostname, setsid and write (all
    /// async-signal-safe), reads errno, and touches `self`, prepared before the fork;
    /// it allocates nothing and takes no locks.
    fn run(&self) -> io::Result<()> {
        // SAFETY: plain syscalls on fds and buffers owned by `self`.
        unsafe {
            // Into the pod's v1 cgroups first ("0": this single-threaded child
            // itself, which skips the kernel's global cgroup lock); the pause forked
            // from it is born there.
            for &fd in &self.tasks {
                if crate::cgroup_join::move_self_v1(fd).is_err() {
                    return Err(self.fail(STEP_CGROUP));
                }
            }
            if let Some(fd) = self.launcher_cgroup {
                if libc::fcntl(fd, libc::F_SETFD, 0) != 0 {
                    return Err(self.fail(STEP_CGROUP));
                }
            }
            if let Some(fd) = self.mount_ns {
                if libc::fcntl(fd, libc::F_SETFD, 0) != 0 {
                    return Err(self.fail(STEP_JOIN_MOUNT_NS));
                }
            }
            if let Some(ns) = self.userns {
                if let Some(fd) = self.unified {
                    if crate::cgroup_join::move_self_v2(fd).is_err() {
                        return Err(self.fail(STEP_CGROUP));
                    }
                }
                // Root of the pod's user namespace (the host uid it maps 0 to), not
                // the host's: a process of the pod that could reach the pause finds
                // no host root behind it.
                if libc::setns(ns, libc::CLONE_NEWUSER) != 0
                    || libc::setresgid(0, 0, 0) != 0
                    || libc::setgroups(0, std::ptr::null()) != 0
                    || libc::setresuid(0, 0, 0) != 0
                {
                    return Err(self.fail(STEP_USERNS));
                }
            }
            if self.flags != 0 && libc::unshare(self.flags) != 0 {
                return Err(self.fail(STEP_UNSHARE));
            }
            if let Some(h) = &self.hostname {
                if libc::sethostname(h.as_ptr().cast(), h.len()) != 0 {
                    return Err(self.fail(STEP_SETHOSTNAME));
                }
            }
            if libc::setsid() < 0 {
                return Err(self.fail(STEP_SETSID));
            }
            Ok(())
        }
    }

    /// The errno of the call that just failed, with `step` told to the parent first
    /// (std's own error pipe carries only the errno).
    fn fail(&self, step: u8) -> io::Error {
        let e = io::Error::last_os_error();
        // SAFETY: one byte from the stack to an fd of ours.
        unsafe { libc::write(self.step_fd, (&step as *const u8).cast(), 1) };
        e
    }
}

/// A spawn that failed: the step the child wrote on the pipe, if it got to one
/// (nothing: the exec itself failed).
fn child_failure(step_r: &OwnedFd, binary: PathBuf, source: io::Error) -> Error {
    let mut b = [0u8; 1];
    let code = matches!(nix::unistd::read(step_r, &mut b), Ok(1)).then_some(b[0]);
    Error::SpawnPause {
        binary,
        step: step_name(code),
        source,
    }
}

/// The pause as it runs, with the start time that names it; gone already (its
/// launcher's child died at once) is an error, not a pause to record.
fn started(pid: i32, spec: &PauseSpec) -> Result<Pause> {
    let stat = read_stat(pid)
        .filter(|s| !s.is_dead())
        .ok_or(Error::PauseVanished { pid })?;
    tracing::debug!(
        pid,
        start_time = stat.start_time,
        namespaces = ?spec.new_namespaces(),
        "pause started"
    );
    Ok(Pause {
        pid,
        start_time: stat.start_time,
    })
}

/// The pause's pid, which the launcher prints before it exits 0.
fn launched_pid(launcher: &mut std::process::Child, binary: &Path) -> Result<i32> {
    let launcher_err = |reason: String| Error::PauseLauncher {
        binary: binary.to_path_buf(),
        reason,
    };
    let mut line = String::new();
    let read = {
        let stdout = launcher.stdout.take().expect("stdout is piped");
        BufReader::new(stdout.take(32)).read_line(&mut line)
    };
    let status = launcher
        .wait()
        .map_err(|e| launcher_err(format!("wait: {e}")))?;
    if let Some(e) = launcher_step_failure(status.code(), &line, binary) {
        return Err(e);
    }
    if !status.success() {
        return Err(launcher_err(format!("exited with {status}")));
    }
    read.map_err(|e| launcher_err(format!("read pid: {e}")))?;
    line.strip_suffix('\n')
        .and_then(|s| s.parse::<i32>().ok())
        .filter(|&p| p > 0)
        .ok_or_else(|| launcher_err(format!("printed {line:?} instead of a pid")))
}

/// A launcher that exited with the number of one of its steps and printed `-ERRNO`:
/// that step, named as the forked child's are.
fn launcher_step_failure(code: Option<i32>, line: &str, binary: &Path) -> Option<Error> {
    let step = u8::try_from(code?)
        .ok()
        .filter(|s| (STEP_MOUNT_NS..=STEP_JOIN_MOUNT_NS).contains(s))?;
    let errno: i32 = line.strip_suffix('\n')?.strip_prefix('-')?.parse().ok()?;
    Some(Error::SpawnPause {
        binary: binary.to_path_buf(),
        step: step_name(Some(step)),
        source: io::Error::from_raw_os_error(errno),
    })
}

pub use crate::proc::alive;
use crate::proc::read_stat;

/// Stops the pause: SIGTERM, wait up to `timeout` for it to go, then SIGKILL. A pause
/// that is already gone (no such pid, a zombie, or another process on the pid) is
/// fine, so this is idempotent.
pub fn stop(pid: i32, start_time: u64, timeout: Duration) -> Result<()> {
    let Some(target) =
        Target::open(pid, start_time).map_err(|source| Error::SignalPause { pid, source })?
    else {
        return Ok(());
    };
    let signal = |sig| {
        target
            .signal(sig)
            .map_err(|source| Error::SignalPause { pid, source })
    };
    if !signal(libc::SIGTERM)? || wait_gone(pid, start_time, timeout) {
        tracing::debug!(pid, "pause stopped");
        return Ok(());
    }
    tracing::warn!(pid, ?timeout, "pause outlived SIGTERM, sending SIGKILL");
    if !signal(libc::SIGKILL)? || wait_gone(pid, start_time, KILL_WAIT) {
        return Ok(());
    }
    Err(Error::PauseUnkillable {
        pid,
        waited: KILL_WAIT,
    })
}

/// Polls until the process is gone or `timeout` passed; true when gone.
fn wait_gone(pid: i32, start_time: u64, timeout: Duration) -> bool {
    let deadline = Instant::now() + timeout;
    let mut nap = Duration::from_millis(1);
    loop {
        if !alive(pid, start_time) {
            return true;
        }
        let now = Instant::now();
        if now >= deadline {
            return false;
        }
        std::thread::sleep(nap.min(deadline - now));
        nap = (nap * 2).min(Duration::from_millis(20));
    }
}

/// One exact process to signal: through a pidfd when the kernel has them (5.3+), so
/// the pid cannot be reused between the start-time check and the signal; else by pid.
struct Target {
    pid: i32,
    pidfd: Option<OwnedFd>,
}

impl Target {
    /// `None` when the process is already gone.
    fn open(pid: i32, start_time: u64) -> io::Result<Option<Target>> {
        if pid <= 0 {
            return Ok(None);
        }
        let pidfd = match crate::proc::pidfd_open(pid) {
            Ok(fd) => Some(fd),
            Err(e) if crate::proc::gone(&e) => return Ok(None),
            Err(e) => match e.raw_os_error() {
                // A thread's id rather than a process's.
                Some(libc::EINVAL) => return Ok(None),
                Some(libc::ENOSYS) => None,
                _ => return Err(e),
            },
        };
        // Checked after pidfd_open: if the pid has our start time now, the pidfd is
        // our process for good.
        if !alive(pid, start_time) {
            return Ok(None);
        }
        Ok(Some(Target { pid, pidfd }))
    }

    /// Sends `sig`; false when the process was gone already.
    fn signal(&self, sig: libc::c_int) -> io::Result<bool> {
        let sent = match &self.pidfd {
            Some(fd) => crate::proc::pidfd_signal(fd.as_fd(), sig),
            // SAFETY: kill on a positive pid (a kernel without pidfds).
            None => match unsafe { libc::kill(self.pid, sig) } {
                0 => Ok(()),
                _ => Err(io::Error::last_os_error()),
            },
        };
        match sent {
            Ok(()) => Ok(true),
            Err(e) if crate::proc::gone(&e) => Ok(false),
            Err(e) => Err(e),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;
    use std::fs::Permissions;
    use std::os::unix::fs::PermissionsExt;

    fn temp(tag: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("crust-pause-unit-{tag}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&d);
        fs::create_dir_all(&d).unwrap();
        d
    }

    /// The point of the no_std build: the embedded pause stays a few KiB.
    #[test]
    fn embedded_binary_is_a_small_static_elf() {
        assert_eq!(&BINARY[..4], b"\x7fELF");
        assert!(BINARY.len() < 16 * 1024, "{} bytes", BINARY.len());
    }

    #[test]
    fn install_writes_once_and_replaces_a_different_file() {
        let d = temp("install");
        let p = install(&d.join("bin")).unwrap();
        assert_eq!(p, d.join("bin").join(FILE_NAME));
        assert_eq!(fs::read(&p).unwrap(), BINARY);
        let m = fs::metadata(&p).unwrap();
        assert_eq!(m.permissions().mode() & 0o7777, 0o755);

        // Identical: left alone (same inode).
        let ino = std::os::unix::fs::MetadataExt::ino(&m);
        install(&d.join("bin")).unwrap();
        assert_eq!(
            std::os::unix::fs::MetadataExt::ino(&fs::metadata(&p).unwrap()),
            ino
        );

        // Different content or mode: replaced.
        fs::write(&p, b"old").unwrap();
        install(&d.join("bin")).unwrap();
        assert_eq!(fs::read(&p).unwrap(), BINARY);
        fs::set_permissions(&p, Permissions::from_mode(0o644)).unwrap();
        install(&d.join("bin")).unwrap();
        assert_eq!(
            fs::metadata(&p).unwrap().permissions().mode() & 0o7777,
            0o755
        );

        // No temp files left behind.
        let names: Vec<_> = fs::read_dir(d.join("bin"))
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, [FILE_NAME]);
        fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn install_into_a_file_names_the_path() {
        let d = temp("installerr");
        let file = d.join("file");
        fs::write(&file, b"").unwrap();
        let msg = install(&file).unwrap_err().to_string();
        assert!(
            msg.starts_with(&format!(
                "install pause binary at {}",
                file.join(FILE_NAME).display()
            )),
            "{msg}"
        );
        fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn spec_flags() {
        let spec = PauseSpec {
            new_net: true,
            new_pid: true,
            ..Default::default()
        };
        assert_eq!(spec.new_namespaces(), [NsKind::Net, NsKind::Pid]);
        assert_eq!(
            spec.unshare_flags(),
            libc::CLONE_NEWNET | libc::CLONE_NEWPID
        );
        assert_eq!(PauseSpec::default().unshare_flags(), 0);
    }

    #[test]
    fn bad_hostnames_are_refused_before_forking() {
        let spec = |h: &str| PauseSpec {
            binary: "/nonexistent".into(),
            hostname: Some(h.to_string()),
            new_uts: true,
            ..Default::default()
        };
        for h in ["", &"a".repeat(65), "a\0b"] {
            let e = spawn(&spec(h)).unwrap_err();
            assert!(matches!(e, Error::InvalidHostname { .. }), "{e}");
        }
    }

    #[test]
    fn spawn_of_missing_binary_names_it() {
        let spec = PauseSpec {
            binary: "/nonexistent/crust-pause".into(),
            ..Default::default()
        };
        let msg = spawn(&spec).unwrap_err().to_string();
        assert!(
            msg.starts_with("spawn pause /nonexistent/crust-pause: exec: "),
            "{msg}"
        );
    }

    /// Without new namespaces no privilege is needed, so the launcher protocol,
    /// start-time bookkeeping and stop are tested here for every user.
    #[test]
    fn spawn_and_stop_in_the_callers_namespaces() {
        let d = temp("spawn");
        let binary = install(&d).unwrap();
        let pause = spawn(&PauseSpec {
            binary,
            keep_root: true,
            ..Default::default()
        })
        .unwrap();
        assert!(pause.alive());
        let status = fs::read_to_string(format!("/proc/{}/status", pause.pid)).unwrap();
        let ppid = status
            .lines()
            .find_map(|l| l.strip_prefix("PPid:"))
            .unwrap()
            .trim();
        assert_ne!(
            ppid,
            std::process::id().to_string(),
            "the launcher must let go"
        );
        let sid = nix::unistd::getsid(Some(nix::unistd::Pid::from_raw(pause.pid))).unwrap();
        assert_ne!(sid, nix::unistd::getsid(None).unwrap(), "own session");

        pause.stop(Duration::from_secs(5)).unwrap();
        assert!(!pause.alive());
        pause.stop(Duration::from_secs(5)).unwrap();
        fs::remove_dir_all(&d).unwrap();
    }

    /// The failing step travels from the forked child as one byte. Only a user who
    /// may not create namespaces sees unshare fail, so as root this checks less.
    #[test]
    fn a_refused_unshare_is_named() {
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } == 0 {
            return;
        }
        let d = temp("refused");
        let spec = PauseSpec {
            binary: install(&d).unwrap(),
            new_net: true,
            ..Default::default()
        };
        let msg = spawn(&spec).unwrap_err().to_string();
        assert!(msg.contains(": unshare: "), "{msg}");
        fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn step_names() {
        assert_eq!(step_name(Some(STEP_UNSHARE)), "unshare");
        assert_eq!(step_name(Some(STEP_SETHOSTNAME)), "sethostname");
        assert_eq!(step_name(Some(STEP_SETSID)), "setsid");
        assert_eq!(step_name(Some(STEP_CGROUP)), "cgroup");
        assert_eq!(step_name(Some(STEP_USERNS)), "join user namespace");
        assert_eq!(step_name(Some(STEP_PIVOT_ROOT)), "pivot_root");
        assert_eq!(step_name(None), "exec");
    }

    /// The launcher's failed step into the empty root: its exit status and `-ERRNO`.
    #[test]
    fn a_launcher_step_failure_is_named() {
        let b = Path::new("/b/crust-pause");
        let e = launcher_step_failure(Some(9), "-22\n", b).unwrap();
        assert_eq!(
            e.to_string(),
            format!(
                "spawn pause /b/crust-pause: pivot_root: {}",
                io::Error::from_raw_os_error(22)
            )
        );
        let e = launcher_step_failure(Some(6), "-1\n", b)
            .unwrap()
            .to_string();
        assert!(e.contains(": unshare mount namespace: "), "{e}");
        // Other exits (fork failed, usage, a panic) or lines are not a step's.
        for (code, line) in [
            (Some(1), "-22\n"),
            (Some(2), "-22\n"),
            (Some(9), ""),
            (Some(9), "22\n"),
            (None, "-22\n"),
        ] {
            assert!(
                launcher_step_failure(code, line, b).is_none(),
                "{code:?} {line:?}"
            );
        }
    }

    /// Without `keep_root` the launcher unshares a mount namespace, which only a
    /// privileged caller may: as anyone else the step is named.
    #[test]
    fn a_refused_empty_root_is_named() {
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } == 0 {
            return;
        }
        let d = temp("refusedroot");
        let spec = PauseSpec {
            binary: install(&d).unwrap(),
            ..Default::default()
        };
        let msg = spawn(&spec).unwrap_err().to_string();
        assert!(msg.contains(": unshare mount namespace: "), "{msg}");
        fs::remove_dir_all(&d).unwrap();
    }
}
