//! The main process's side of `create` and the intermediate process.
//!
//! ```text
//!  main (the caller; may be multi-threaded)
//!   │ socketpair, gate fifo, stdio and namespace fds: all O_CLOEXEC
//!   ├─fork──▶ intermediate (single-threaded copy; not dumpable)
//!   │           closes every fd it was not given, setns() into each namespace
//!   │           the spec names by path (PID too: it affects only its children)
//!   │           clone3(CLONE_PARENT | CLONE_NEWNS | new namespaces), clone on ENOSYS
//!   │             └──▶ init (child of main thanks to CLONE_PARENT; see init.rs)
//!   │◀─ InitPid ─┘ exits 0, reaped by main
//!   │── Go ──▶ init (it sets up meanwhile, and reports only after Go)
//!   │◀─ Hooks ── init   runs prestart + createRuntime   ── HooksDone ──▶ (spec hooks only)
//!   │◀─ Ready / Failed ── init
//!   ▼ returns the init's pid (or reaps it and returns the init's error)
//! ```
//!
//! The intermediate exists because joining or creating a PID namespace moves only the
//! children of the caller into it, and because `setns` on the caller's threads would
//! change the caller (a tokio runtime, say). `CLONE_PARENT` makes the init a child of
//! the main process, so the future monitor can wait for it and nobody leaves it
//! un-reaped when the intermediate exits.
//!
//! Waiting on a child never hangs: the socket is polled with a short tick, between
//! ticks the child is checked with `waitpid(WNOHANG)` (a crash without a message shows
//! up), and an overall deadline ends the wait with a SIGKILL.

use std::io;
use std::os::fd::{AsFd, AsRawFd, OwnedFd, RawFd};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use oci_spec::runtime::LinuxNamespaceType;

use super::channel::{self, Message, Received, Step};
use super::init::{self, ChildFds, Fail};
use super::spec::Plan;
use crate::cgroup_join::{self, CgroupJoin};
use crate::error::{Error, Result};

/// How long `create` waits for the intermediate and the init in all.
pub(crate) const CREATE_TIMEOUT: Duration = Duration::from_secs(60);

/// The polling tick between checks that a silent child is still alive.
const TICK: Duration = Duration::from_millis(50);

/// The order namespaces are joined in (mount last: it changes what paths mean).
const JOIN_ORDER: [LinuxNamespaceType; 7] = [
    LinuxNamespaceType::User,
    LinuxNamespaceType::Network,
    LinuxNamespaceType::Ipc,
    LinuxNamespaceType::Uts,
    LinuxNamespaceType::Cgroup,
    LinuxNamespaceType::Pid,
    LinuxNamespaceType::Mount,
];

/// What the main process hands to [`spawn`]; all close-on-exec, all given away.
pub(crate) struct SpawnFds {
    pub gate: OwnedFd,
    pub stdio: [Option<OwnedFd>; 3],
    /// The container's cgroup: the init is cloned into the cgroup2 directory and
    /// moves itself into the v1 ones (see `crate::cgroup_join`).
    pub cgroups: CgroupJoin,
    /// When set, the init's parent is a monitor process instead of the caller.
    pub monitor: Option<MonitorExec>,
    /// A tty container's end of a socket to the monitor: the init makes the pty in the
    /// container's own devpts and sends the master over it.
    pub tty_sock: Option<OwnedFd>,
    /// The caller's hook, run while the init sets up.
    pub on_init: Option<super::OnInit>,
}

/// How the monitor is started: a child of the caller joins the namespaces and clones
/// the init as its own child (see `monitor_parent`), and `execve`s the monitor binary
/// with the fds in `keep` (their numbers are in `argv`).
pub(crate) struct MonitorExec {
    pub path: std::ffi::CString,
    pub argv: Vec<std::ffi::CString>,
    pub keep: Vec<OwnedFd>,
    pub devnull: OwnedFd,
}

/// What [`spawn`] started.
pub(crate) struct Spawned {
    pub init: libc::pid_t,
    /// The monitor's pid: the caller's child, the init's parent.
    pub monitor: Option<libc::pid_t>,
}

/// A child of the main process, reaped at most once.
struct Child {
    pid: libc::pid_t,
    status: Option<libc::c_int>,
}

impl Child {
    fn new(pid: libc::pid_t) -> Child {
        Child { pid, status: None }
    }

    /// Reaps the child if it has exited; true when it is gone.
    fn try_reap(&mut self) -> bool {
        if self.status.is_some() {
            return true;
        }
        let mut st = 0;
        // SAFETY: waitpid on our own child, into a local.
        let rc = unsafe { libc::waitpid(self.pid, &mut st, libc::WNOHANG) };
        if rc == self.pid {
            self.status = Some(st);
            return true;
        }
        // ECHILD: not ours to wait for any more; treat as gone.
        rc < 0 && io::Error::last_os_error().raw_os_error() == Some(libc::ECHILD)
    }

    /// Waits for the child to exit.
    fn reap(&mut self) {
        while self.status.is_none() {
            let mut st = 0;
            // SAFETY: waitpid on our own child, into a local.
            let rc = unsafe { libc::waitpid(self.pid, &mut st, 0) };
            if rc == self.pid {
                self.status = Some(st);
            } else if rc < 0 && io::Error::last_os_error().raw_os_error() != Some(libc::EINTR) {
                return;
            }
        }
    }

    fn kill_and_reap(&mut self) {
        if self.status.is_none() {
            // SAFETY: our own, not yet reaped child: the pid cannot have been reused.
            unsafe { libc::kill(self.pid, libc::SIGKILL) };
            self.reap();
        }
    }

    fn describe(&self) -> String {
        match self.status {
            None => "still running".into(),
            Some(st) if libc::WIFEXITED(st) => format!("exited {}", libc::WEXITSTATUS(st)),
            Some(st) if libc::WIFSIGNALED(st) => format!("killed by signal {}", libc::WTERMSIG(st)),
            Some(st) => format!("wait status {st:#x}"),
        }
    }
}

/// What waiting for a child's message ended with.
enum Outcome {
    Message(Message),
    /// The child is gone (or every sending end closed) without a message.
    Gone,
    Timeout,
}

/// Waits for the next message while `child` lives.
fn await_message(sock: &OwnedFd, child: &mut Child, deadline: Instant) -> io::Result<Outcome> {
    loop {
        let now = Instant::now();
        if now >= deadline {
            return Ok(Outcome::Timeout);
        }
        let wait = TICK.min(deadline - now);
        let mut pfd = libc::pollfd {
            fd: sock.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: poll on one pollfd we own.
        let rc = unsafe { libc::poll(&mut pfd, 1, wait.as_millis() as libc::c_int) };
        if rc < 0 {
            let e = io::Error::last_os_error();
            if e.raw_os_error() == Some(libc::EINTR) {
                continue;
            }
            return Err(e);
        }
        if rc > 0 {
            match channel::recv(sock.as_fd(), true)? {
                Received::Message(m) => return Ok(Outcome::Message(m)),
                Received::Eof => return Ok(Outcome::Gone),
                Received::Empty => continue,
            }
        }
        if child.try_reap() {
            // A message sent just before the exit is still worth reading.
            return Ok(match channel::recv(sock.as_fd(), true)? {
                Received::Message(m) => Outcome::Message(m),
                Received::Eof | Received::Empty => Outcome::Gone,
            });
        }
    }
}

fn failed(id: &str, step: Step, path: String, errno: i32, detail: String) -> Error {
    Error::Create {
        id: id.to_string(),
        step,
        path,
        source: if errno != 0 {
            io::Error::from_raw_os_error(errno)
        } else {
            io::Error::other(detail)
        },
    }
}

fn protocol(id: &str, what: &str, detail: String) -> Error {
    Error::Create {
        id: id.to_string(),
        step: Step::Protocol,
        path: what.to_string(),
        source: io::Error::other(detail),
    }
}

/// Forks the intermediate, which clones the init; returns the init's pid once it
/// reports `Ready`. On any failure every child is reaped before this returns.
pub(crate) fn spawn(p: &Plan, fds: SpawnFds, deadline: Instant) -> Result<Spawned> {
    let id = p.id.as_str();
    let create_err = |step, path: String, source| Error::Create {
        id: id.to_string(),
        step,
        path,
        source,
    };
    let namespaces = open_namespaces(p)?;
    let (sock, child_sock) = channel::pair()
        .and_then(|(main, child)| Ok((main, above_stdio(child)?)))
        .map_err(|e| create_err(Step::Socketpair, String::new(), e))?;
    let (cgroup_tasks, cgroup_dir) = fds.cgroups.raw();
    let child_fds = ChildFds {
        sock: child_sock.as_raw_fd(),
        gate: fds.gate.as_raw_fd(),
        stdio: [0, 1, 2].map(|i| fds.stdio[i].as_ref().map(|f| f.as_raw_fd())),
        namespaces: namespaces
            .iter()
            .map(|(f, flag, path)| (f.as_raw_fd(), *flag, path.clone()))
            .collect(),
        cgroup_tasks,
        cgroup_dir,
        tty_sock: fds.tty_sock.as_ref().map(|f| f.as_raw_fd()),
        ctty: false,
        host_proc: None,
    };

    // SAFETY: fork in a possibly multi-threaded process. The child is single-threaded;
    // glibc's fork left the allocator usable; the child runs only `intermediate`,
    // `init::run` or `monitor_parent`, which take no lock another thread could hold,
    // and leaves by `_exit` or `execve`, never returning into the caller.
    let pid = unsafe { fork_signals_blocked() };
    if pid < 0 {
        return Err(create_err(
            Step::Fork,
            String::new(),
            io::Error::last_os_error(),
        ));
    }
    if pid == 0 {
        match &fds.monitor {
            Some(m) => monitor_parent(p, &child_fds, m),
            None => intermediate(p, &child_fds),
        }
    }
    let monitored = fds.monitor.is_some();
    let on_init = fds.on_init;
    // The children's fds are theirs now.
    drop((child_sock, namespaces, fds.cgroups));
    // Without a monitor this is the intermediate; with one, the future monitor, which
    // stays alive as long as the init does and so stands for it in the waits below.
    let mut first = Child::new(pid);

    let init_pid = await_init_pid(id, &sock, &mut first, deadline)?;
    // The init is not ours to wait for when a monitor is its parent: a pidfd names it
    // for the kill on failure, whoever reaps it.
    let init_pidfd = crate::proc::pidfd_open(init_pid).ok();
    let mut watched = if monitored {
        first
    } else {
        first.reap();
        Child::new(init_pid)
    };
    let kill_init = |watched: &mut Child| {
        if let Some(fd) = &init_pidfd {
            let _ = crate::proc::pidfd_signal(fd.as_fd(), libc::SIGKILL);
        }
        // The monitor records the init's death and exits; the intermediate-less init
        // is killed by kill_and_reap itself.
        if monitored {
            watched.reap();
        } else {
            watched.kill_and_reap();
        }
    };
    // A send that fails means the init is gone already: the wait below reports it.
    let _ = channel::send(sock.as_fd(), &Message::Go);
    // The init mounts for a few ms now; the caller's hook runs meanwhile.
    if let Some(hook) = on_init {
        let info = super::InitInfo {
            pid: init_pid,
            start_time: crate::proc::start_time(init_pid).unwrap_or(0),
            monitor: monitored.then_some(pid),
        };
        if let Err(e) = (hook.0)(info) {
            kill_init(&mut watched);
            return Err(create_err(
                Step::WriteState,
                "the caller's record".into(),
                e,
            ));
        }
    }

    await_ready(id, &sock, &mut watched, deadline, &kill_init, p, init_pid)?;
    Ok(Spawned {
        init: init_pid,
        monitor: monitored.then_some(pid),
    })
}

/// Waits for the init's `Ready` (it mounted, dropped privileges and waits at the
/// gate), running the spec's `prestart` and `createRuntime` hooks when it asks; a
/// failure it reports, a failed hook, or none in time, ends it. The time the hooks
/// take is not the init's: it extends the deadline.
#[allow(clippy::too_many_arguments)]
fn await_ready(
    id: &str,
    sock: &OwnedFd,
    watched: &mut Child,
    mut deadline: Instant,
    kill_init: &dyn Fn(&mut Child),
    p: &Plan,
    init_pid: libc::pid_t,
) -> Result<()> {
    let mut hooks_ran = false;
    let outcome = loop {
        match await_message(sock, watched, deadline) {
            Ok(Outcome::Message(Message::Hooks)) if !hooks_ran && !p.hooks.runtime.is_empty() => {
                hooks_ran = true;
                let begun = Instant::now();
                let state = super::hooks::with_pid(&p.hooks.state_creating, init_pid);
                for (kind, list) in &p.hooks.runtime {
                    if let Err(e) = super::hooks::run(*kind, list, state.as_bytes()) {
                        kill_init(watched);
                        return Err(Error::Create {
                            id: id.to_string(),
                            step: Step::Hook,
                            path: String::new(),
                            source: io::Error::other(e),
                        });
                    }
                }
                deadline += begun.elapsed();
                // A send that fails means the init is gone: the next wait says so.
                let _ = channel::send(sock.as_fd(), &Message::HooksDone);
            }
            other => break other,
        }
    };
    match outcome {
        Ok(Outcome::Message(Message::Ready)) => Ok(()),
        Ok(Outcome::Message(Message::Failed {
            step,
            errno,
            path,
            detail,
        })) => {
            // The init exits by itself after reporting a failure.
            watched.reap();
            Err(failed(id, step, path, errno, detail))
        }
        other => {
            kill_init(watched);
            let why = match other {
                Ok(Outcome::Message(m)) => format!("sent {} instead of ready", m.kind()),
                Ok(Outcome::Gone) => format!("{} before reporting ready", watched.describe()),
                Ok(Outcome::Timeout) => {
                    return Err(Error::Create {
                        id: id.to_string(),
                        step: Step::Timeout,
                        path: format!("init not ready within {CREATE_TIMEOUT:?}"),
                        source: io::Error::from_raw_os_error(libc::ETIMEDOUT),
                    })
                }
                Err(e) => format!("receive: {e}"),
            };
            Err(protocol(id, "init", why))
        }
    }
}

/// The namespaces to join, opened in the order they must be entered.
fn open_namespaces(p: &Plan) -> Result<Vec<(OwnedFd, libc::c_int, PathBuf)>> {
    let mut namespaces: Vec<(OwnedFd, libc::c_int, PathBuf)> = vec![];
    for kind in JOIN_ORDER {
        for ns in p.namespaces.iter().filter(|n| n.kind == kind) {
            let Some(path) = &ns.path else { continue };
            let f = std::fs::File::open(path).map_err(|e| Error::Create {
                id: p.id.clone(),
                step: Step::OpenNamespace,
                path: path.display().to_string(),
                source: e,
            })?;
            namespaces.push((f.into(), ns.flag, path.clone()));
        }
    }
    Ok(namespaces)
}

/// The init's pid, as the intermediate (or the future monitor) reports it; the first
/// child reaped (killed first if it broke the protocol) when it does not.
fn await_init_pid(
    id: &str,
    sock: &OwnedFd,
    first: &mut Child,
    deadline: Instant,
) -> Result<libc::pid_t> {
    match await_message(sock, first, deadline) {
        Ok(Outcome::Message(Message::InitPid(pid))) if pid > 0 => Ok(pid),
        Ok(Outcome::Message(Message::Failed {
            step,
            errno,
            path,
            detail,
        })) => {
            first.reap();
            Err(failed(id, step, path, errno, detail))
        }
        other => {
            first.kill_and_reap();
            let why = match other {
                Ok(Outcome::Message(m)) => format!("sent {} instead of the init's pid", m.kind()),
                Ok(Outcome::Gone) => format!("{} without sending the init's pid", first.describe()),
                Ok(Outcome::Timeout) => format!("no init pid within {CREATE_TIMEOUT:?}"),
                Err(e) => format!("receive: {e}"),
            };
            Err(protocol(id, "intermediate process", why))
        }
    }
}

/// `fork` with every signal blocked in the child, which keeps them blocked (and so does
/// the init it clones) until `init::exec` sets every disposition to default and only
/// then empties the mask, just before `execve`.
///
/// Why: the child starts with the caller's signal handlers. In crustd those are
/// tokio's for SIGTERM and SIGINT, which only note the signal for the daemon. An init
/// waiting at its start gate, or on its way from the gate to `execve`, would run such a
/// handler and so swallow a stop signal sent just after StartContainer returned (the
/// CRI conformance suite stops a container at once): the container then ran on until
/// the grace period ended in SIGKILL. Blocked, the signal stays pending and acts on the
/// process with its default disposition, as if it came right after `execve`.
///
/// # Safety
/// As `libc::fork`: in a multi-threaded caller the child may only make async-signal-
/// safe calls and must leave by `_exit` or `execve`. The caller's mask is restored in
/// the parent.
pub(crate) unsafe fn fork_signals_blocked() -> libc::pid_t {
    let mut all: libc::sigset_t = std::mem::zeroed();
    let mut old: libc::sigset_t = std::mem::zeroed();
    libc::sigfillset(&mut all);
    libc::pthread_sigmask(libc::SIG_SETMASK, &all, &mut old);
    let pid = libc::fork();
    if pid != 0 {
        libc::pthread_sigmask(libc::SIG_SETMASK, &old, std::ptr::null_mut());
    }
    pid
}

/// The future monitor: clones the init as its own child (after joining the pod's
/// namespaces itself, or through an intermediate when a mount namespace is joined),
/// keeps only the monitor's fds and becomes the monitor by `execve`. Never returns.
/// Failures end it with 1 (after a `Failed` message where there is one to send); the
/// main process sees it gone.
fn monitor_parent(p: &Plan, fds: &ChildFds, m: &MonitorExec) -> ! {
    // SAFETY: prctl with integer arguments; see `intermediate`. A session of its own
    // at once: a signal to the caller's process group (^C on a terminal) must not
    // reach the future monitor before it blocks signals itself.
    unsafe {
        libc::prctl(libc::PR_SET_DUMPABLE, 0, 0, 0, 0);
        libc::setsid();
    }
    let mut keep: Vec<RawFd> = m.keep.iter().map(|f| f.as_raw_fd()).collect();
    keep.push(m.devnull.as_raw_fd());
    let joins_mount_ns = p
        .namespaces
        .iter()
        .any(|n| n.kind == LinuxNamespaceType::Mount && n.path.is_some());
    if joins_mount_ns {
        // Setns into another mount namespace would hide the monitor binary: an
        // intermediate does the joining and cloning instead.
        // SAFETY: fork of this single-threaded copy; the child runs `intermediate`.
        let pid = unsafe { libc::fork() };
        if pid < 0 {
            init::exit(1)
        }
        if pid == 0 {
            intermediate(p, fds);
        }
        close_all_but(&mut keep);
        let mut inter = Child::new(pid);
        inter.reap();
        match inter.status {
            Some(st) if libc::WIFEXITED(st) && libc::WEXITSTATUS(st) == 0 => {}
            _ => init::exit(1),
        }
    } else {
        // The future monitor is the intermediate itself (one fork of the caller
        // fewer): it joins the pod's namespaces (pid only for its children; the
        // others it keeps, harmlessly, as the monitor) and clones the init as its
        // own child.
        let mut own = keep.clone();
        own.extend([fds.sock, fds.gate]);
        clone_and_report(p, fds, &own, p.clone_flags());
        close_all_but(&mut keep);
    }
    let argv = init::c_array(&m.argv);
    let envp: [*const libc::c_char; 1] = [std::ptr::null()];
    // SAFETY: fd juggling on fds this process owns, then execve with NUL-terminated
    // arrays of pointers into CStrings that outlive the call.
    unsafe {
        for target in 0..3 {
            libc::dup2(m.devnull.as_raw_fd(), target);
        }
        for f in &m.keep {
            libc::fcntl(f.as_raw_fd(), libc::F_SETFD, 0);
        }
        // The signal mask stays as it is across the exec: the monitor blocks every
        // signal first thing anyway, and none may kill it in between.
        libc::execve(m.path.as_ptr(), argv.as_ptr(), envp.as_ptr());
    }
    init::exit(127)
}

/// The same file as `fd` on a number above 2 (close-on-exec): a caller running with
/// 0, 1 or 2 closed must not have the init's `dup2` onto 0, 1, 2 clobber its socket
/// or gate.
pub(crate) fn above_stdio(fd: OwnedFd) -> io::Result<OwnedFd> {
    if fd.as_raw_fd() > 2 {
        return Ok(fd);
    }
    let new = nix::fcntl::fcntl(&fd, nix::fcntl::FcntlArg::F_DUPFD_CLOEXEC(3))?;
    // SAFETY: a fresh fd from F_DUPFD_CLOEXEC, owned by nobody else.
    Ok(unsafe { std::os::fd::FromRawFd::from_raw_fd(new) })
}

/// Closes every fd from 3 up except `keep` (which it sorts): fds another thread of
/// the caller opened around the fork must not stay alive in the container's
/// processes (they could hold the message socket open, or be a way out).
pub(crate) fn close_all_but(keep: &mut [RawFd]) {
    keep.sort_unstable();
    let mut from: u32 = 3;
    for &k in keep.iter().filter(|&&k| k >= 3) {
        let k = k as u32;
        if k > from {
            // SAFETY: closing fds of this process that nobody here uses.
            unsafe { libc::syscall(libc::SYS_close_range, from, k - 1, 0u32) };
        }
        from = from.max(k + 1);
    }
    // SAFETY: as above.
    unsafe { libc::syscall(libc::SYS_close_range, from, u32::MAX, 0u32) };
}

/// `CLONE_INTO_CGROUP` (a clone3-only flag above 32 bits).
const CLONE_INTO_CGROUP: u64 = 0x2_0000_0000;

#[repr(C)]
#[derive(Default)]
struct CloneArgs {
    flags: u64,
    pidfd: u64,
    child_tid: u64,
    parent_tid: u64,
    exit_signal: u64,
    stack: u64,
    stack_size: u64,
    tls: u64,
    set_tid: u64,
    set_tid_size: u64,
    cgroup: u64,
}

/// The raw `clone3`: the child's pid, 0 in the child, or -1 with errno.
fn clone3(args: &mut CloneArgs) -> libc::c_long {
    // SAFETY: clone3 without CLONE_VM and without a stack behaves as fork: the child
    // continues in the caller on a copy of this (single-threaded) process's memory.
    unsafe {
        libc::syscall(
            libc::SYS_clone3,
            args as *mut CloneArgs,
            std::mem::size_of::<CloneArgs>(),
        )
    }
}

/// `clone3` into the cgroup2 directory `cgroup` if any, or `clone` where the kernel (or
/// a seccomp filter) says ENOSYS; like fork: 0 in the child, the child's pid in the
/// parent. `CLONE_NEWCGROUP` is not for here: the child makes its cgroup namespace
/// once it is in its cgroups (`init::join_cgroups`). A kernel that refuses
/// `CLONE_INTO_CGROUP` (before 5.7) gets the caller moved into the cgroup instead.
pub(crate) fn clone_init(
    flags: libc::c_int,
    cgroup: Option<&(RawFd, PathBuf)>,
) -> io::Result<libc::pid_t> {
    let flags = flags & !libc::CLONE_NEWCGROUP;
    let sibling = flags & libc::CLONE_PARENT != 0;
    // With CLONE_PARENT no exit signal: the kernel refuses one (EINVAL) and gives the
    // child the caller's own, SIGCHLD (the intermediate was forked). Without, the
    // caller is the parent and wants SIGCHLD (the monitor waits for it).
    let mut args = CloneArgs {
        flags: flags as u64,
        exit_signal: if sibling { 0 } else { libc::SIGCHLD as u64 },
        ..Default::default()
    };
    if let Some((fd, _)) = cgroup {
        args.flags |= CLONE_INTO_CGROUP;
        args.cgroup = *fd as u64;
        let rc = clone3(&mut args);
        if rc >= 0 {
            return Ok(rc as libc::pid_t);
        }
        let e = io::Error::last_os_error();
        // E2BIG/EINVAL: a clone3 without `cgroup`; ENOSYS: no clone3 at all. Anything
        // else (EAGAIN at pids.max, EPERM, ENOENT) is the real answer.
        if !matches!(
            e.raw_os_error(),
            Some(libc::E2BIG | libc::EINVAL | libc::ENOSYS)
        ) {
            return Err(e);
        }
        cgroup_join::move_self_v2(*fd)?;
        args.flags &= !(CLONE_INTO_CGROUP);
        args.cgroup = 0;
    }
    let rc = clone3(&mut args);
    if rc >= 0 {
        return Ok(rc as libc::pid_t);
    }
    let e = io::Error::last_os_error();
    if e.raw_os_error() != Some(libc::ENOSYS) {
        return Err(e);
    }
    // SAFETY: as above, with the x86_64 argument order (flags, stack, ptid, ctid, tls).
    let rc = unsafe {
        libc::syscall(
            libc::SYS_clone,
            (flags | libc::SIGCHLD) as libc::c_ulong,
            0usize,
            0usize,
            0usize,
            0usize,
        )
    };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(rc as libc::pid_t)
}

/// The intermediate's first steps, for a container's init and an exec alike: keep
/// only its own fds (`extra`, stdio, namespaces, cgroup files, the tty socket), then
/// join the namespaces, each fd closed once used. The cgroups and a cgroup namespace
/// are the cloned child's to join (`init::join_cgroups`).
pub(crate) fn enter(fds: &ChildFds, extra: &[RawFd]) -> std::result::Result<(), Fail> {
    let mut keep: Vec<RawFd> = extra.to_vec();
    keep.extend(fds.stdio.iter().flatten());
    keep.extend(fds.namespaces.iter().map(|(fd, _, _)| *fd));
    keep.extend(fds.cgroup_tasks.iter().map(|(fd, _)| *fd));
    keep.extend(fds.cgroup_dir.iter().map(|(fd, _)| *fd));
    keep.extend(fds.tty_sock);
    keep.extend(fds.host_proc);
    close_all_but(&mut keep);
    // The cgroup namespace is the cloned child's to join, and so is a user namespace:
    // the init enters it once its mounts are made (`init::join_userns`).
    for (fd, flag, path) in fds
        .namespaces
        .iter()
        .filter(|n| n.1 != libc::CLONE_NEWCGROUP && n.1 != libc::CLONE_NEWUSER)
    {
        // SAFETY: setns on an fd we hold; this process is single-threaded.
        if unsafe { libc::setns(*fd, *flag) } != 0 {
            return Err(Fail {
                step: Step::Setns,
                path: path.display().to_string(),
                err: io::Error::last_os_error(),
            });
        }
        // SAFETY: the fd is ours and not used again.
        unsafe { libc::close(*fd) };
    }
    Ok(())
}

/// The intermediate process; never returns.
fn intermediate(p: &Plan, fds: &ChildFds) -> ! {
    // Not dumpable: no other process (another container sharing a PID namespace it
    // joins) may open /proc/PID/{exe,fd,mem} of this copy of the caller.
    // SAFETY: prctl with integer arguments.
    unsafe { libc::prctl(libc::PR_SET_DUMPABLE, 0, 0, 0, 0) };
    clone_and_report(
        p,
        fds,
        &[fds.sock, fds.gate],
        p.clone_flags() | libc::CLONE_PARENT,
    );
    init::exit(0)
}

/// What the intermediate (or the monitor-to-be) does: keeps `keep` and its own fds,
/// joins the namespaces, clones the init with `flags` and tells the main process its
/// pid, which it returns. The init runs in the clone and never returns. A failure is
/// reported on the socket and ends this process.
fn clone_and_report(p: &Plan, fds: &ChildFds, keep: &[RawFd], flags: libc::c_int) -> libc::pid_t {
    // SAFETY: the fd number is ours in this process.
    let sock = unsafe { std::os::fd::BorrowedFd::borrow_raw(fds.sock) };
    let fail = |f: Fail| -> ! {
        let _ = channel::send(sock, &f.message());
        init::exit(1)
    };
    if let Err(f) = enter(fds, keep) {
        fail(f)
    }
    match clone_init(flags, fds.cgroup_dir.as_ref()) {
        Err(err) => fail(Fail {
            step: Step::Clone,
            path: format!("flags {:#x}", p.clone_flags()),
            err,
        }),
        Ok(0) => init::run(p, fds),
        Ok(pid) => {
            report_pid(sock, pid);
            pid
        }
    }
}

/// Tells the main process the pid of the child just cloned. A child nobody heard of
/// must not linger: when that fails it is killed and this process exits 1.
fn report_pid(sock: std::os::fd::BorrowedFd<'_>, pid: libc::pid_t) {
    if channel::send(sock, &Message::InitPid(pid)).is_err() {
        // SAFETY: our own child (or, by CLONE_PARENT, main's), not yet reaped.
        unsafe { libc::kill(pid, libc::SIGKILL) };
        init::exit(1)
    }
}

/// The intermediate's last act: [`report_pid`], then exit 0.
pub(crate) fn hand_over(sock: std::os::fd::BorrowedFd<'_>, pid: libc::pid_t) -> ! {
    report_pid(sock, pid);
    init::exit(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn close_all_but_keeps_exactly_what_it_is_told() {
        // In a forked child, so the test process's fds stay as they are. The fds are
        // moved high up, where the other tests' threads (opening and closing their own
        // fds meanwhile) do not reach: a CI run saw this check fail on low numbers.
        let high = |min: i32| {
            let f = std::fs::File::open("/dev/null").unwrap();
            // SAFETY: F_DUPFD_CLOEXEC of an fd we own; the new fd is owned below.
            let fd = unsafe { libc::fcntl(f.as_raw_fd(), libc::F_DUPFD_CLOEXEC, min) };
            assert!(
                fd >= min,
                "F_DUPFD_CLOEXEC: {}",
                std::io::Error::last_os_error()
            );
            // SAFETY: a fresh fd of ours.
            unsafe { <OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(fd) }
        };
        let (a, b, c) = (high(700), high(710), high(720));
        let (ra, rb, rc) = (a.as_raw_fd(), b.as_raw_fd(), c.as_raw_fd());
        // SAFETY: the child only makes syscalls and exits.
        let pid = unsafe { libc::fork() };
        if pid == 0 {
            close_all_but(&mut [rc, ra]);
            // SAFETY: fcntl probes; _exit.
            unsafe {
                let open = |fd| libc::fcntl(fd, libc::F_GETFD) >= 0;
                let ok = open(0) && open(ra) && !open(rb) && open(rc) && !open(rc + 1);
                libc::_exit(if ok { 0 } else { 1 })
            }
        }
        let mut st = 0;
        // SAFETY: waiting for our child.
        unsafe { libc::waitpid(pid, &mut st, 0) };
        assert!(libc::WIFEXITED(st) && libc::WEXITSTATUS(st) == 0, "{st:#x}");
    }
}
