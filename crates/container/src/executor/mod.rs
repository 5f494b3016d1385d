//! The OCI executor: an OCI runtime spec and a bundle become a process, with the
//! create/start split, without runc and without a daemon.
//!
//! ```text
//!  create(CreateOpts) ──▶ Container (Created: the init waits on the gate)
//!        │ start()          kill(sig) ─▶ signal      wait() ─▶ exit status (parent only)
//!        ▼                  status()  ─▶ Created | Running | Stopped
//!     Running ── process exits ──▶ Stopped ── delete(false) ──▶ (state dir removed)
//!     any state ─────────────────────────────── delete(true) ──▶ SIGKILL, removed
//! ```
//!
//! - [`create`] validates the spec into a plan, makes the state dir (`state.json`, the
//!   `exec.fifo` gate), forks an intermediate process that joins the namespaces the
//!   spec names by path and clones the init into new ones; the init mounts,
//!   `pivot_root`s, drops privileges and reports `Ready` (see `process.rs`, `init.rs`).
//!   An error anywhere comes back as [`Error::Create`](crate::Error::Create) naming the
//!   step and path, after every child was reaped and the state dir removed.
//! - [`Container::start`] opens the gate: it writes a byte into `exec.fifo`, which the
//!   init holds open and blocks reading. Any process can do it later (after a daemon
//!   restart, say): [`Container::load`] reads the state dir back.
//! - A pid alone does not name a process: the state keeps the init's start time too,
//!   and [`Container::kill`] signals through a pidfd opened after checking it.
//! - [`Container::delete`] unmounts nothing on the host: the container's mounts live in
//!   its mount namespace, which dies with its last process.
//!
//! ## The init runs no crust binary (the `/proc/self/exe` class, CVE-2019-5736)
//! runc's init is runc re-executed; a container process that could open
//! `/proc/<runc init>/exe` could write the host's runc binary. Here the init is a
//! forked copy of the caller that executes the container's binary directly, from a
//! path resolved inside the container after `pivot_root`, so no crust binary is ever
//! exec'd into the container. Until that `execve`, the intermediate and the init are
//! non-dumpable (`PR_SET_DUMPABLE` 0), so even a process of another container in a
//! shared PID namespace cannot open their `/proc/PID/exe` (the caller's binary),
//! `fd` or `mem`; the init's own pid 1 is not reachable by container processes before
//! it exec'd anyway. No fd of the caller survives: the intermediate closes every fd it
//! was not given right after the fork, everything is `O_CLOEXEC`, and the init closes
//! all but 0, 1, 2 just before `execve` (CVE-2024-21626 was a leaked directory fd used
//! as the cwd; the cwd is also checked to be inside the root). Mount targets are
//! resolved under the rootfs one component at a time (`resolve.rs`).
//!
//! ## Choices worth knowing
//! - `hostname`/`domainname` are set only in a UTS namespace of the container's own;
//!   with the pod's joined by path they are ignored (the pod's name stays), and the
//!   host's is never renamed.
//! - `oom_score_adj` below the caller's own is clamped to it when the kernel refuses
//!   (no `CAP_SYS_RESOURCE`), as containerd's `restrict_oom_score_adj` does.
//! - A missing `process.cwd` is created in the rootfs; `linux.sysctl` is written
//!   without a namespaced-only check (the caller's policy).
//! - The `cgroup` mount: on cgroup v1 (these machines), a tmpfs holding one mount per
//!   host hierarchy (own cgroup namespace) or read-only binds of the container's own
//!   cgroup directories (no cgroup namespace); on a unified host, `cgroup2` or a bind
//!   of its own directory. See `cgroupfs.rs`.
//!
//! - `linux.seccomp` is compiled into a BPF program by crust itself (x86_64, and
//!   i386/x32 when `architectures` lists them; other ABIs are killed; the ABIs and
//!   their numbers are per `target_arch` in `syscalls/`) and installed last, right before `execve` with
//!   `noNewPrivileges`, or before the capability drop without it: see `seccomp.rs`.
//!
//! ## OCI hooks
//! `prestart` and `createRuntime` are run by the caller of `create` while the init waits
//! with its mounts made (the `Hooks`/`HooksDone` messages), `createContainer` and
//! `startContainer` by the init itself (before `pivot_root`, and after the gate);
//! `poststart` and `poststop` are the caller's to run at start and delete
//! ([`hooks::run`]), since only it knows when those are. See `hooks.rs`.
//!
//! ## User namespaces
//! A spec may join a user namespace by path (a pod's, made with its maps by
//! `crate::userns`); a new one without a path is refused. The init makes every mount as
//! the caller's root and enters the user namespace only after them, right before the
//! capability and user switch (`init::join_userns`; an exec's process the same way):
//! so `/proc`, `/sys`, devices (owned by the host ids the spec's maps give) and the
//! cgroup mounts need nothing from the namespace, the container's mount namespace stays
//! the caller's root's (nothing inside can change its mounts), and its capabilities
//! are the user namespace's only. Files keep their owners through id-mapped mounts made
//! with the namespace (`open_tree` + `mount_setattr(MOUNT_ATTR_IDMAP)` + `move_mount`):
//! the rootfs overlay's layers when its options say `idmap` (Linux 5.19 for overlayfs
//! to take them), and binds with `idmap`/`ridmap` or with the spec's own maps as
//! `uidMappings`/`gidMappings`. A file system the kernel cannot id-map is named in
//! the error.
//!
//! ## Not yet
//! seccomp notify (`SCMP_ACT_NOTIFY`, refused), new user namespaces and id-mapped
//! mounts with other maps than the container's (refused), terminals (refused), SELinux labels, time namespaces (refused).
//!
//! The recursive flag options (`rro`, `rnosuid`, `rnodev`, `rnoexec` and their
//! opposites) are set with `mount_setattr(AT_RECURSIVE)` after the mount (Linux 5.12;
//! [`recursive_mount_options`] says whether the kernel has it).

mod caps;
mod cgroupfs;
mod channel;
mod dev;
mod exec;
pub mod hooks;
mod init;
pub mod oci_runtime;
mod process;
mod resolve;
mod rootfs;
mod seccomp;
mod spec;
mod state;
mod syscalls;

use std::fs::{self, OpenOptions};
use std::io;
use std::os::fd::OwnedFd;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::time::{Instant, SystemTime};

use oci_spec::runtime::Spec;

pub use channel::Step;

pub use exec::{exec, ExecOpts};
/// The spec types (and builders) `create` takes, at the version this crate uses.
pub use oci_spec;
pub use rootfs::{idmapped_mounts_supported, recursive_mount_options};
pub use state::{Container, Status};

/// The length in BPF instructions of the program `linux.seccomp` compiles to, or the
/// compiler's error (the kernel takes at most 4096): for checking a built-in profile.
pub fn seccomp_program_len(
    s: &oci_spec::runtime::LinuxSeccomp,
) -> std::result::Result<usize, String> {
    seccomp::compile(s).map(|f| f.program.len())
}

/// The seccomp architectures this build's kernel runs, the native one first: what a
/// default profile lists so that each ABI gets the rules by its own numbers.
pub fn seccomp_arches() -> Vec<oci_spec::runtime::Arch> {
    seccomp::arches()
}

use crate::error::{Error, Result};

/// The gate's file name in the state dir.
pub const GATE: &str = "exec.fifo";
/// The state record's file name in the state dir.
pub const STATE: &str = "state.json";

/// Where one of the container's standard streams goes.
#[derive(Debug, Default)]
pub enum Stdio {
    /// `/dev/null`.
    #[default]
    Null,
    /// The caller's own fd of the same number.
    Inherit,
    /// This fd (a pipe end, a log file); `create` consumes it.
    Fd(OwnedFd),
    /// This file, opened by `create`: read-only for stdin, else created and appended.
    File(PathBuf),
}

/// A mount the caller wants at the root path instead of a bind of the directory (an
/// overlay of image layers, say), made inside the container's mount namespace so it
/// needs no unmounting on the host.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RootfsMount {
    pub fstype: String,
    pub source: String,
    /// fstab-style: flags (`ro`, `nosuid`) and data (`lowerdir=...,upperdir=...`).
    pub options: Vec<String>,
}

/// What [`create`] needs.
#[derive(Debug)]
pub struct CreateOpts {
    /// The container's id: a file name (no `/`).
    pub id: String,
    /// The bundle: `spec.root.path` and relative bind sources are relative to it.
    pub bundle: PathBuf,
    pub spec: Spec,
    /// The container's own state dir, created by `create` (its parent too); must not
    /// exist yet. Holds `state.json` and the gate.
    pub state_dir: PathBuf,
    pub stdin: Stdio,
    pub stdout: Stdio,
    pub stderr: Stdio,
    pub rootfs_mount: Option<RootfsMount>,
    /// The container's cgroup directories (one per v1 hierarchy and/or the cgroup2
    /// one) the init is born into. The caller makes the cgroups; empty: the caller's
    /// own.
    pub cgroup_dirs: Vec<PathBuf>,
    /// A monitor to be the init's parent instead of the caller; it then owns the
    /// container's output (`stdin`/`stdout`/`stderr` above are ignored).
    pub monitor: Option<MonitorOpts>,
    /// Called once the init exists, while it sets up its mounts: the caller can make
    /// its own record of the container durable then instead of after `create`.
    pub on_init: Option<OnInit>,
}

/// The init's identity, as soon as the init exists.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct InitInfo {
    pub pid: libc::pid_t,
    /// Its start time (field 22 of `/proc/PID/stat`).
    pub start_time: u64,
    /// The monitor's pid, when there is one.
    pub monitor: Option<libc::pid_t>,
}

/// A hook [`create`] calls with the [`InitInfo`] while the init is still setting up
/// (the main process only waits for it then). An error fails the create: the init is
/// killed and the error returned, naming the step [`Step::WriteState`].
pub struct OnInit(pub Box<dyn FnOnce(InitInfo) -> io::Result<()> + Send>);

impl std::fmt::Debug for OnInit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("OnInit(..)")
    }
}

/// The monitor of a container (the `crust-monitor` binary, see `crate::monitor`): it
/// outlives the caller, writes the container's output to a CRI log and records its
/// exit.
#[derive(Debug, Clone)]
pub struct MonitorOpts {
    pub binary: PathBuf,
    /// Where it writes the exit record.
    pub exit_file: PathBuf,
    /// The CRI log file; `None`: output is read and dropped.
    pub log: Option<PathBuf>,
    /// `memory.events` (v2) or `memory.oom_control` (v1) of the container's cgroup.
    pub oom_events: Option<PathBuf>,
    /// Keep a stdin pipe open for a later attach (else stdin is `/dev/null`).
    pub stdin: bool,
    /// With `stdin`: the first attach client to end its input closes the container's
    /// stdin (CRI `stdin_once`).
    pub stdin_once: bool,
    /// Give the monitor an attach socket (`crate::monitor::connect_attach` reaches it
    /// in the container's state dir).
    pub attach: bool,
}

impl CreateOpts {
    /// Options with every stream on `/dev/null` and the rootfs bind-mounted.
    pub fn new(
        id: impl Into<String>,
        bundle: impl Into<PathBuf>,
        spec: Spec,
        state_dir: impl Into<PathBuf>,
    ) -> CreateOpts {
        CreateOpts {
            id: id.into(),
            bundle: bundle.into(),
            spec,
            state_dir: state_dir.into(),
            stdin: Stdio::Null,
            stdout: Stdio::Null,
            stderr: Stdio::Null,
            rootfs_mount: None,
            cgroup_dirs: vec![],
            monitor: None,
            on_init: None,
        }
    }
}

/// Removes the state dir on drop unless disarmed: `create` leaves nothing behind.
struct StateDirGuard(Option<PathBuf>);

impl Drop for StateDirGuard {
    fn drop(&mut self) {
        if let Some(d) = self.0.take() {
            let _ = fs::remove_dir_all(d);
        }
    }
}

/// A process's stdin, stdout and stderr, opened as the options say.
fn open_all_stdio(id: &str, streams: [Stdio; 3]) -> Result<[Option<OwnedFd>; 3]> {
    let mut stdio: [Option<OwnedFd>; 3] = [None, None, None];
    for (i, s) in streams.into_iter().enumerate() {
        let what = match &s {
            Stdio::File(p) => p.display().to_string(),
            _ => ["stdin", "stdout", "stderr"][i].to_string(),
        };
        stdio[i] = open_stdio(s, i).map_err(|e| Error::Create {
            id: id.to_string(),
            step: Step::OpenStdio,
            path: what,
            source: e,
        })?;
    }
    Ok(stdio)
}

fn open_stdio(s: Stdio, fd: usize) -> io::Result<Option<OwnedFd>> {
    let owned: OwnedFd = match s {
        Stdio::Inherit => return Ok(None),
        Stdio::Null => OpenOptions::new()
            .read(fd == 0)
            .write(fd != 0)
            .open("/dev/null")?
            .into(),
        Stdio::File(p) if fd == 0 => OpenOptions::new().read(true).open(p)?.into(),
        Stdio::File(p) => OpenOptions::new()
            .append(true)
            .create(true)
            .mode(0o640)
            .open(p)?
            .into(),
        Stdio::Fd(f) => f,
    };
    // Moved above 2 so putting one stream in place can never clobber another's source.
    let fd = nix::fcntl::fcntl(&owned, nix::fcntl::FcntlArg::F_DUPFD_CLOEXEC(3))?;
    // SAFETY: a fresh fd from F_DUPFD_CLOEXEC, owned by nobody else.
    Ok(Some(unsafe { std::os::fd::FromRawFd::from_raw_fd(fd) }))
}

/// Close-on-exec pipe: (read end, write end).
pub(crate) fn pipe_cloexec() -> io::Result<(OwnedFd, OwnedFd)> {
    pipe()
}

fn pipe() -> io::Result<(OwnedFd, OwnedFd)> {
    Ok(nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC)?)
}

/// The container's stdio and the monitor's command line: pipes for stdout and stderr
/// (or a pty for a terminal) whose reading ends the monitor gets, and a stdin pipe
/// whose writing end it holds open when asked.
#[allow(clippy::type_complexity)]
fn monitor_io(
    m: &MonitorOpts,
    terminal: bool,
    state_dir: &Path,
) -> io::Result<([OwnedFd; 3], process::MonitorExec, Option<OwnedFd>)> {
    use std::ffi::CString;
    use std::os::fd::AsRawFd;
    use std::os::unix::ffi::OsStrExt;
    let c = |s: &[u8]| CString::new(s).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL));
    let path = c(m.binary.as_os_str().as_bytes())?;
    let mut argv = vec![
        c(b"crust-monitor")?,
        c(b"-e")?,
        c(m.exit_file.as_os_str().as_bytes())?,
    ];
    if let Some(l) = &m.log {
        argv.push(c(b"-l")?);
        argv.push(c(l.as_os_str().as_bytes())?);
    }
    if let Some(o) = &m.oom_events {
        argv.push(c(b"-m")?);
        argv.push(c(o.as_os_str().as_bytes())?);
    }
    let mut keep = vec![];
    let mut give = |flag: &str, fd: OwnedFd, argv: &mut Vec<CString>| -> io::Result<()> {
        let fd = process::above_stdio(fd)?;
        argv.push(c(flag.as_bytes())?);
        argv.push(c(fd.as_raw_fd().to_string().as_bytes())?);
        keep.push(fd);
        Ok(())
    };
    let devnull: OwnedFd = OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/null")?
        .into();
    if m.attach {
        give("-A", crate::monitor::listen_attach(state_dir)?, &mut argv)?;
    }
    if m.stdin {
        argv.push(c(b"-s")?);
        argv.push(c(if m.stdin_once { b"once" } else { b"keep" })?);
    }
    let mut tty_sock = None;
    let stdio = if terminal {
        // The pty is made by the init inside the container (see `init::console`); its
        // stdio are /dev/null until then.
        let (mon, init) = nix::sys::socket::socketpair(
            nix::sys::socket::AddressFamily::Unix,
            nix::sys::socket::SockType::Stream,
            None,
            nix::sys::socket::SockFlag::SOCK_CLOEXEC,
        )?;
        give("-T", mon, &mut argv)?;
        tty_sock = Some(process::above_stdio(init)?);
        [
            devnull.try_clone()?,
            devnull.try_clone()?,
            devnull.try_clone()?,
        ]
    } else {
        let (out_r, out_w) = pipe()?;
        let (err_r, err_w) = pipe()?;
        give("-o", out_r, &mut argv)?;
        give("-r", err_r, &mut argv)?;
        let stdin = if m.stdin {
            let (in_r, in_w) = pipe()?;
            give("-i", in_w, &mut argv)?;
            in_r
        } else {
            devnull.try_clone()?
        };
        [stdin, out_w, err_w]
    };
    // Above 2 like every other fd handed to the children (see `open_stdio`).
    let stdio = {
        let [a, b, c] = stdio;
        [
            process::above_stdio(a)?,
            process::above_stdio(b)?,
            process::above_stdio(c)?,
        ]
    };
    Ok((
        stdio,
        process::MonitorExec {
            path,
            argv,
            keep,
            devnull: process::above_stdio(devnull)?,
        },
        tty_sock,
    ))
}

/// The container's state folder (removed again by the guard unless the create
/// succeeds) and the gate FIFO in it, which holds the init before `execve` until start.
fn state_dir_and_gate(id: &str, state_dir: &Path) -> Result<(StateDirGuard, OwnedFd)> {
    let err = |step, path: String, source| Error::Create {
        id: id.to_string(),
        step,
        path,
        source,
    };
    if let Some(parent) = state_dir.parent() {
        fs::create_dir_all(parent)
            .map_err(|e| err(Step::StateDir, parent.display().to_string(), e))?;
    }
    fs::create_dir(state_dir)
        .map_err(|e| err(Step::StateDir, state_dir.display().to_string(), e))?;
    let guard = StateDirGuard(Some(state_dir.to_path_buf()));
    let gate_path = state_dir.join(GATE);
    nix::unistd::mkfifo(&gate_path, nix::sys::stat::Mode::from_bits_truncate(0o600))
        .map_err(|e| err(Step::Mkfifo, gate_path.display().to_string(), e.into()))?;
    let gate = OpenOptions::new()
        .read(true)
        .write(true)
        .open(&gate_path)
        .and_then(|f| process::above_stdio(f.into()))
        .map_err(|e| err(Step::Mkfifo, gate_path.display().to_string(), e))?;
    Ok((guard, gate))
}

/// Creates the container: its init has done everything up to `execve` and waits on
/// the gate when this returns. The caller's process is the init's parent (it may
/// [`Container::wait`] for it); the state dir lets any process start, signal or
/// delete it later.
///
/// Safe to call from several threads at once and from a tokio runtime (it blocks,
/// so from `spawn_blocking`): the namespace work happens in forked children.
pub fn create(opts: CreateOpts) -> Result<Container> {
    let begun = Instant::now();
    let CreateOpts {
        id,
        bundle,
        spec,
        state_dir,
        stdin,
        stdout,
        stderr,
        rootfs_mount,
        cgroup_dirs,
        monitor,
        on_init,
    } = opts;
    let mut plan = spec::plan(&id, &bundle, &spec, rootfs_mount.as_ref())?;
    plan.hooks =
        hooks::Plan::new(&id, &bundle, &spec, &plan.rootfs, &plan.env).map_err(|reason| {
            Error::InvalidSpec {
                id: id.clone(),
                reason,
            }
        })?;
    let t_plan = begun.elapsed();
    let err = |step, path: String, source| Error::Create {
        id: id.clone(),
        step,
        path,
        source,
    };

    let (mut guard, gate) = state_dir_and_gate(&id, &state_dir)?;

    // With a monitor, the init's stdio are the monitor's pipes (or its pty socket).
    let (stdio, monitor, tty_sock) = match monitor {
        Some(m) => {
            let (fds, exec, sock) = monitor_io(&m, plan.terminal, &state_dir)
                .map_err(|e| err(Step::Monitor, m.binary.display().to_string(), e))?;
            (fds.map(Some), Some(exec), sock)
        }
        None => (open_all_stdio(&id, [stdin, stdout, stderr])?, None, None),
    };
    let cgroups = crate::cgroup_join::CgroupJoin::open(&cgroup_dirs)
        .map_err(|(p, e)| err(Step::Cgroup, p.display().to_string(), e))?;
    let t_opened = begun.elapsed();

    let spawned = process::spawn(
        &plan,
        process::SpawnFds {
            gate,
            stdio,
            cgroups,
            monitor,
            tty_sock,
            on_init,
        },
        begun + process::CREATE_TIMEOUT,
    )?;
    let pid = spawned.init;
    let t_spawned = begun.elapsed();
    let saved = match state::start_time(pid) {
        Some(start_time) => {
            let c = Container {
                id: id.clone(),
                state_dir: state_dir.clone(),
                pid,
                start_time,
                bundle,
                rootfs: plan.rootfs.clone(),
                created: SystemTime::now(),
                started: None,
                monitor: spawned.monitor,
            };
            c.save().map(|()| c).map_err(|e| {
                err(
                    Step::WriteState,
                    state_dir.join(STATE).display().to_string(),
                    e,
                )
            })
        }
        None => Err(err(
            Step::Protocol,
            format!("init {pid}"),
            io::Error::other("gone right after reporting ready"),
        )),
    };
    match saved {
        Ok(c) => {
            guard.0 = None;
            tracing::debug!(id, pid, ?t_plan, ?t_opened, ?t_spawned, t_saved = ?begun.elapsed(), "create steps");
            Ok(c)
        }
        Err(e) => {
            // SAFETY: our own child (CLONE_PARENT), or the child of our own child, the
            // monitor, which is not yet reaped and reaps the init only after it died:
            // either way the pid is still the init's.
            unsafe {
                libc::kill(pid, libc::SIGKILL);
                libc::waitpid(spawned.monitor.unwrap_or(pid), std::ptr::null_mut(), 0);
            }
            Err(e)
        }
    }
}
