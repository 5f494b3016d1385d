//! A new process in a running container (CRI `ExecSync`, later `Exec`): it joins the
//! init's namespaces and cgroup, takes the user, capabilities and limits of the
//! process the caller describes (normally the container's own with other args), and
//! runs as a child of the caller.
//!
//! ```text
//!  main ─fork─▶ intermediate: keeps only its fds, joins the cgroup, setns() into the
//!   │            init's ipc, uts, net, pid, cgroup and mnt namespaces (mnt last: it
//!   │            also moves root and cwd to the container's root)
//!   │            clone(CLONE_PARENT) ─▶ process: setsid, stdio, rlimits, caps, user,
//!   │◀─ InitPid ─┘ exits                  umask, cwd, AppArmor, seccomp, execve (Failed on the
//!   │                                     socket if not)
//!   ▼ socket EOF (execve closed it) → the pid; a Failed message → the error
//! ```
//!
//! Nothing mounts: the container's mount namespace already has its root. The same
//! protections as `create` hold: nothing of the caller's but 0, 1, 2 survives into
//! the process, and the copies of the caller are not dumpable until `execve`.

use std::fs::File;
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd, RawFd};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use oci_spec::runtime::Spec;

use super::channel::{self, Message, Received, Step};
use super::init::{self, At, ChildFds, Fail};
use super::process::{above_stdio, clone_init, enter, hand_over};
use super::spec::{self, Plan};
use super::{open_all_stdio, Container, Stdio};
use crate::error::{Error, Result};

/// The namespaces joined, in order, by their `/proc/PID/ns` names and flags.
const NAMESPACES: [(&str, libc::c_int); 6] = [
    ("ipc", libc::CLONE_NEWIPC),
    ("uts", libc::CLONE_NEWUTS),
    ("net", libc::CLONE_NEWNET),
    ("pid", libc::CLONE_NEWPID),
    ("cgroup", libc::CLONE_NEWCGROUP),
    ("mnt", libc::CLONE_NEWNS),
];

/// How long `exec` waits for the process to reach `execve`.
const EXEC_TIMEOUT: Duration = Duration::from_secs(30);

/// What [`exec`] needs.
#[derive(Debug)]
pub struct ExecOpts {
    /// The container's spec with `process` set to the one to run (args, env, user,
    /// cwd, capabilities, rlimits, no_new_privileges; `terminal` is not supported).
    pub spec: Spec,
    pub stdin: Stdio,
    pub stdout: Stdio,
    pub stderr: Stdio,
    /// The container's cgroup directories (see [`super::CreateOpts::cgroup_dirs`]).
    pub cgroup_dirs: Vec<PathBuf>,
    /// Stdin is a terminal the caller made (a streaming exec with a tty): make it the
    /// process's controlling terminal, so shells get job control and ^C.
    pub controlling_tty: bool,
}

/// Starts a process in the running container `c`; returns its pid once it has
/// `execve`d. The caller is its parent and must reap it.
pub fn exec(c: &Container, opts: ExecOpts) -> Result<libc::pid_t> {
    // Cumulative times of the steps, logged at debug (hack/bench's phase table).
    let t0 = Instant::now();
    let plan = spec::plan(&c.id, &c.bundle, &opts.spec, None)?;
    let t_plan = t0.elapsed();
    if plan.terminal {
        return Err(exec_err(
            &c.id,
            Step::Terminal,
            "process.terminal".into(),
            io::Error::other("a terminal is not supported for exec"),
        ));
    }
    let namespaces = open_namespaces(c)?;
    // Opened before this check: if the init is the one we mean now, they are its.
    if !c.alive() {
        return Err(Error::ContainerState {
            id: c.id.clone(),
            status: super::Status::Stopped,
            op: "exec",
        });
    }
    let stdio = open_all_stdio(&c.id, [opts.stdin, opts.stdout, opts.stderr])?;
    let cgroups = crate::cgroup_join::CgroupJoin::open(&opts.cgroup_dirs)
        .map_err(|(p, e)| exec_err(&c.id, Step::Cgroup, p.display().to_string(), e))?;
    let (sock, child_sock) = channel::pair()
        .and_then(|(main, child)| Ok((main, above_stdio(child)?)))
        .map_err(|e| exec_err(&c.id, Step::Socketpair, String::new(), e))?;
    // The host's /proc, for the process's AppArmor attribute (init::apparmor).
    let host_proc = match &plan.apparmor {
        Some(_) => Some(
            nix::fcntl::open(
                "/proc",
                nix::fcntl::OFlag::O_PATH
                    | nix::fcntl::OFlag::O_DIRECTORY
                    | nix::fcntl::OFlag::O_CLOEXEC,
                nix::sys::stat::Mode::empty(),
            )
            .map_err(|e| exec_err(&c.id, Step::AppArmor, "/proc".into(), e.into()))?,
        ),
        None => None,
    };
    let mut fds = child_fds(
        &child_sock,
        &stdio,
        &namespaces,
        &cgroups,
        opts.controlling_tty,
    );
    fds.host_proc = host_proc.as_ref().map(|f| f.as_raw_fd());
    let t_opened = t0.elapsed();
    let pid = fork_intermediate(&c.id, &plan, &fds)?;
    let t_forked = t0.elapsed();
    drop((child_sock, stdio, cgroups, namespaces, host_proc));
    let deadline = Instant::now() + EXEC_TIMEOUT;

    let child = process_pid(&c.id, &sock, pid, deadline)?;
    let t_joined = t0.elapsed();
    let r = await_execve(&c.id, &sock, child, deadline);
    tracing::debug!(id = %c.id, ?t_plan, ?t_opened, ?t_forked, ?t_joined, t_execve = ?t0.elapsed(), "exec steps");
    r
}

/// Exec's failures are told as `create`'s are, by step and path (`Error::Create`).
fn exec_err(id: &str, step: Step, path: String, source: io::Error) -> Error {
    Error::Create {
        id: id.to_string(),
        step,
        path,
        source,
    }
}

/// The init's namespaces, opened by the caller so that the intermediate only joins
/// fds (see [`NAMESPACES`]), and its user namespace when it is not ours: entered by
/// the process itself, last before its capability and user switch (see
/// `init::join_userns`).
fn open_namespaces(c: &Container) -> Result<Vec<(OwnedFd, libc::c_int, PathBuf)>> {
    let mut namespaces: Vec<(OwnedFd, libc::c_int, PathBuf)> = vec![];
    for (name, flag) in NAMESPACES {
        let path = PathBuf::from(format!("/proc/{}/ns/{name}", c.pid));
        let f = File::open(&path)
            .map_err(|e| exec_err(&c.id, Step::OpenNamespace, path.display().to_string(), e))?;
        namespaces.push((f.into(), flag, path));
    }
    let userns = PathBuf::from(format!("/proc/{}/ns/user", c.pid));
    if !crate::userns::same_as_own(&userns) {
        let f = File::open(&userns)
            .map_err(|e| exec_err(&c.id, Step::OpenNamespace, userns.display().to_string(), e))?;
        namespaces.push((f.into(), libc::CLONE_NEWUSER, userns));
    }
    Ok(namespaces)
}

/// The fds the intermediate and the process use, as numbers: made before the fork,
/// which the copies may not allocate after.
fn child_fds(
    child_sock: &OwnedFd,
    stdio: &[Option<OwnedFd>; 3],
    namespaces: &[(OwnedFd, libc::c_int, PathBuf)],
    cgroups: &crate::cgroup_join::CgroupJoin,
    controlling_tty: bool,
) -> ChildFds {
    let (cgroup_tasks, cgroup_dir) = cgroups.raw();
    ChildFds {
        sock: child_sock.as_raw_fd(),
        gate: -1,
        stdio: [0, 1, 2].map(|i| stdio[i].as_ref().map(|f| f.as_raw_fd())),
        namespaces: namespaces
            .iter()
            .map(|(f, flag, path)| (f.as_raw_fd(), *flag, path.clone()))
            .collect(),
        cgroup_tasks,
        cgroup_dir,
        tty_sock: None,
        ctty: controlling_tty,
        host_proc: None,
    }
}

/// Forks the intermediate, which never comes back here; its pid.
fn fork_intermediate(id: &str, plan: &Plan, fds: &ChildFds) -> Result<libc::pid_t> {
    // SAFETY: as in `process::spawn`: the child runs only `intermediate` and leaves by
    // `_exit` or `execve`. Signals blocked until the exec, as for a container's init:
    // crustd's handlers must not run in the process, nor take a signal meant for it.
    let pid = unsafe { super::process::fork_signals_blocked() };
    if pid < 0 {
        return Err(exec_err(
            id,
            Step::Fork,
            String::new(),
            io::Error::last_os_error(),
        ));
    }
    if pid == 0 {
        intermediate(plan, fds);
    }
    Ok(pid)
}

/// The process's pid, which the intermediate sends before it exits; the intermediate
/// is reaped here whatever it sent.
fn process_pid(
    id: &str,
    sock: &OwnedFd,
    intermediate: libc::pid_t,
    deadline: Instant,
) -> Result<libc::pid_t> {
    let first = receive(sock, deadline);
    reap(intermediate);
    match first {
        Ok(Received::Message(Message::InitPid(p))) if p > 0 => Ok(p),
        Ok(Received::Message(Message::Failed {
            step,
            errno,
            path,
            detail,
        })) => {
            // From the intermediate, or from the process when it failed before the
            // intermediate got to report its pid: then that pid follows (the
            // intermediate has exited, so it is in the socket already), and the
            // process is ours to reap. An unreaped one in the container's PID
            // namespace would keep the container's init from ever finishing its exit.
            if let Ok(Received::Message(Message::InitPid(p))) = receive(sock, deadline) {
                if p > 0 {
                    reap(p);
                }
            }
            Err(failed(id, step, path, errno, detail))
        }
        other => Err(exec_err(
            id,
            Step::Protocol,
            "exec intermediate".into(),
            io::Error::other(format!("no pid: {other:?}")),
        )),
    }
}

/// Waits for the process `child` to reach `execve`; a process that failed before is
/// reaped, one that says anything else is killed and reaped, so that no error leaves
/// a child of the caller behind.
fn await_execve(
    id: &str,
    sock: &OwnedFd,
    child: libc::pid_t,
    deadline: Instant,
) -> Result<libc::pid_t> {
    match receive(sock, deadline) {
        // EOF: the process closed the socket by `execve` (or died trying, which its
        // exit status tells the caller).
        Ok(Received::Eof) => Ok(child),
        Ok(Received::Message(Message::Failed {
            step,
            errno,
            path,
            detail,
        })) => {
            reap(child);
            Err(failed(id, step, path, errno, detail))
        }
        other => {
            // SAFETY: our own unreaped child (CLONE_PARENT).
            unsafe { libc::kill(child, libc::SIGKILL) };
            reap(child);
            Err(exec_err(
                id,
                Step::Protocol,
                "exec process".into(),
                io::Error::other(format!("{other:?} instead of exec")),
            ))
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

fn reap(pid: libc::pid_t) {
    loop {
        // SAFETY: waitpid on our own child.
        let rc = unsafe { libc::waitpid(pid, std::ptr::null_mut(), 0) };
        if rc >= 0 || io::Error::last_os_error().raw_os_error() != Some(libc::EINTR) {
            return;
        }
    }
}

/// The next message or EOF, blocking until `deadline` (then `TimedOut`).
fn receive(sock: &OwnedFd, deadline: Instant) -> io::Result<Received> {
    loop {
        let now = Instant::now();
        if now >= deadline {
            return Err(io::Error::from_raw_os_error(libc::ETIMEDOUT));
        }
        let mut pfd = libc::pollfd {
            fd: sock.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        let ms = (deadline - now).as_millis().min(i32::MAX as u128) as libc::c_int;
        // SAFETY: poll on one pollfd we own.
        let rc = unsafe { libc::poll(&mut pfd, 1, ms) };
        if rc < 0 {
            let e = io::Error::last_os_error();
            if e.raw_os_error() == Some(libc::EINTR) {
                continue;
            }
            return Err(e);
        }
        if rc > 0 {
            match channel::recv(sock.as_fd(), true)? {
                Received::Empty => continue,
                r => return Ok(r),
            }
        }
    }
}

/// The intermediate of an exec; never returns.
fn intermediate(p: &Plan, fds: &ChildFds) -> ! {
    // SAFETY: the fd number is ours in this process.
    let sock = unsafe { BorrowedFd::borrow_raw(fds.sock) };
    let fail = |f: Fail| -> ! {
        let _ = channel::send(sock, &f.message());
        init::exit(1)
    };
    // SAFETY: prctl with integer arguments.
    unsafe { libc::prctl(libc::PR_SET_DUMPABLE, 0, 0, 0, 0) };
    if let Err(f) = enter(fds, &[fds.sock]) {
        fail(f)
    }
    match clone_init(libc::CLONE_PARENT, fds.cgroup_dir.as_ref()) {
        Err(err) => fail(Fail {
            step: Step::Clone,
            path: "exec process".into(),
            err,
        }),
        Ok(0) => match init::join_cgroups(fds, false).and_then(|()| setup(p, fds)) {
            Ok(exe) => init::exec(p, &exe, Some(fds.sock)),
            Err(f) => fail(f),
        },
        Ok(pid) => hand_over(sock, pid),
    }
}

/// Everything up to `execve`, in the order the init does it after `pivot_root`.
fn setup(p: &Plan, fds: &ChildFds) -> std::result::Result<std::ffi::CString, Fail> {
    // SAFETY: plain syscalls on our own process.
    unsafe {
        if libc::setsid() < 0 {
            return Err(io::Error::last_os_error()).at(Step::Setsid, "");
        }
        for (target, src) in fds.stdio.iter().enumerate() {
            if let Some(src) = src {
                if libc::dup2(*src, target as RawFd) < 0 {
                    return Err(io::Error::last_os_error()).at(Step::Stdio, target);
                }
            }
        }
        if fds.ctty && libc::ioctl(0, libc::TIOCSCTTY, 0) < 0 {
            return Err(io::Error::last_os_error()).at(Step::Terminal, "stdin");
        }
    }
    init::apparmor(p, fds.host_proc)?;
    init::rlimits(p)?;
    init::join_userns(fds)?;
    // The container's seccomp filter: here without no_new_privs, else in `init::exec`.
    init::seccomp_early(p)?;
    super::caps::drop_bounding(p)?;
    super::caps::switch_user(p)?;
    super::caps::apply(p)?;
    super::caps::no_new_privs(p)?;
    // SAFETY: umask has no failure mode.
    unsafe { libc::umask(p.umask) };
    nix::unistd::chdir(&p.cwd).at(Step::Cwd, p.cwd.display())?;
    nix::unistd::getcwd().at(Step::Cwd, p.cwd.display())?;
    init::find_executable(p)
}
