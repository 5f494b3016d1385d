//! The container's init: a clone of the intermediate process in the container's new
//! namespaces. It waits for the main process's `Go`, does everything up to `execve`,
//! reports `Ready`, waits on the start gate, and then execs the container's command. Any step that fails is reported to
//! the main process as `Failed { step, errno, path }` and the init exits 1.
//!
//! The order (each step named in its error):
//!
//! ```text
//!  setsid, umask 0, stdio onto 0 1 2
//!  propagation of / (rslave), rootfs bind (or the caller's overlay), spec mounts,
//!  /dev nodes and symlinks, spec devices, read-only /dev, cwd created,
//!  oom_score_adj
//!  ── Hooks ──▶ main (prestart, createRuntime) ◀── HooksDone   (when the spec has them)
//!  createContainer hooks (forked: the container's namespaces, the host's tree)
//!  AppArmor profile for execve                              (host /proc still here)
//!  pivot_root                                               (from here on: the container's paths)
//!  sysctl, masked paths, read-only paths, read-only root
//!  hostname/domainname (own UTS namespace only), rlimits
//!  setns into the user namespace (when the spec joins one)
//!  seccomp filter                                           (only without no_new_privs)
//!  bounding set, keepcaps + setgroups/setgid/setuid, inheritable/effective/
//!  permitted/ambient capabilities, no_new_privs
//!  umask, chdir cwd (checked to be inside the root), args[0] found and executable
//!  ── Ready ──▶ main;  block reading one byte from the gate fifo  ◀── start()
//!  startContainer hooks (forked: the container's root, user and capabilities)
//!  signals reset, seccomp filter (with no_new_privs), every fd but 0 1 2 closed, execve
//! ```
//!
//! The init is a forked copy of the caller, never a re-exec of a crust binary, and
//! it is not dumpable until `execve`: see the module doc of `executor` for why the
//! `/proc/self/exe` class of escapes (CVE-2019-5736) does not reach the host binary.
//!
//! It runs single-threaded in a copy of the caller's memory (glibc's `fork` made the
//! allocator safe to use), so it may allocate, but it takes no lock another thread of
//! the caller could have held (no logging, no stdout, no env lookups) and never
//! returns into the caller's code: every way out is `_exit` or `execve`.

use std::ffi::{CStr, CString};
use std::fmt;
use std::fs;
use std::io;
use std::os::fd::{AsFd, BorrowedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use oci_spec::runtime::LinuxNamespaceType;

use super::caps;
use super::channel::{self, Message, Step};
use super::dev;
use super::resolve::{open_in_root, Create};
use super::rootfs;
use super::seccomp;
use super::spec::Plan;

/// A failed step in a child: what, on which path, and the error.
#[derive(Debug)]
pub(crate) struct Fail {
    pub step: Step,
    pub path: String,
    pub err: io::Error,
}

impl Fail {
    pub(crate) fn message(&self) -> Message {
        let errno = self.err.raw_os_error().unwrap_or(0);
        Message::Failed {
            step: self.step,
            errno,
            path: self.path.clone(),
            detail: if errno == 0 {
                self.err.to_string()
            } else {
                String::new()
            },
        }
    }
}

/// `.at(step, path)`: turns any error convertible to `io::Error` into a [`Fail`].
pub(crate) trait At<T> {
    fn at(self, step: Step, path: impl fmt::Display) -> Result<T, Fail>;
}

impl<T, E: Into<io::Error>> At<T> for Result<T, E> {
    fn at(self, step: Step, path: impl fmt::Display) -> Result<T, Fail> {
        self.map_err(|e| Fail {
            step,
            path: path.to_string(),
            err: e.into(),
        })
    }
}

fn os_err<T>(step: Step, path: impl fmt::Display) -> Result<T, Fail> {
    Err(io::Error::last_os_error()).at(step, path)
}

/// The fds a child holds, by number (the main process made them close-on-exec).
#[derive(Debug, Clone)]
pub(crate) struct ChildFds {
    /// The sending end of the message socket pair.
    pub sock: RawFd,
    /// The start gate fifo, opened read-write.
    pub gate: RawFd,
    /// What becomes the container's 0, 1, 2 (`None`: keep the caller's).
    pub stdio: [Option<RawFd>; 3],
    /// Namespaces to join: fd, `CLONE_NEW*` flag, path (for messages).
    pub namespaces: Vec<(RawFd, libc::c_int, PathBuf)>,
    /// v1 `tasks` files the cloned child writes itself into (fd, path).
    pub cgroup_tasks: Vec<(RawFd, PathBuf)>,
    /// The cgroup2 directory the child is cloned into (`CLONE_INTO_CGROUP`).
    pub cgroup_dir: Option<(RawFd, PathBuf)>,
    /// A tty container's socket to the monitor (see [`console`]).
    pub tty_sock: Option<RawFd>,
    /// An exec's stdin is a terminal to make its controlling one.
    pub ctty: bool,
    /// The host's `/proc` (`O_PATH`), for an exec's process in the container's mount
    /// namespace to reach its own AppArmor attributes (see [`apparmor`]).
    pub host_proc: Option<RawFd>,
}

pub(crate) fn exit(code: libc::c_int) -> ! {
    // SAFETY: _exit ends the process without running the caller's atexit handlers or
    // destructors, which belong to the main process, not to this copy of it.
    unsafe { libc::_exit(code) }
}

/// The init's life; never returns.
pub(crate) fn run(p: &Plan, fds: &ChildFds) -> ! {
    // SAFETY: the fd numbers are ours in this process until exec.
    let sock = unsafe { BorrowedFd::borrow_raw(fds.sock) };
    // The setup happens inside the container's own namespaces, so it need not wait
    // for the main process; what it reports does: nothing of ours may reach the main
    // process before it knows our pid (see channel.rs). A main process that went away
    // (EOF) or said anything but `Go` means: do not go on.
    // With hooks for the caller to run, the setup takes `Go` itself (see `hooks`).
    let mut go = false;
    let result = join_cgroups(fds, p.is_new(LinuxNamespaceType::Cgroup))
        .and_then(|()| setup(p, fds, &mut go));
    if !go {
        await_go(sock)
    }
    let exe = match result {
        Ok(exe) => exe,
        Err(f) => {
            let _ = channel::send(sock, &f.message());
            exit(1)
        }
    };
    if channel::send(sock, &Message::Ready).is_err() {
        // Nobody to start us: never run the command unasked.
        exit(1)
    }
    wait_gate(fds.gate);
    start_container_hooks(p);
    exec(p, &exe, None)
}

/// Waits for the main process's `Go`; anything else ends the init.
fn await_go(sock: BorrowedFd<'_>) {
    if !matches!(
        channel::recv(sock, false),
        Ok(channel::Received::Message(Message::Go))
    ) {
        exit(1)
    }
}

/// The spec's hooks at the point they want: the mounts made, the root not yet pivoted.
/// The caller's `prestart` and `createRuntime` first (it runs them in the runtime's
/// namespaces while the init waits; a failure there kills the init), then
/// `createContainer` forked from here: in the container's namespaces (its user
/// namespace entered by the hook alone, the init joins it later), the host's tree
/// still visible, the rootfs its cwd, as runc runs them.
fn hooks(p: &Plan, fds: &ChildFds, go: &mut bool) -> Result<(), Fail> {
    use super::hooks::{run_prepared, with_pid, Extra, HookKind};
    if !p.hooks.runtime.is_empty() {
        // SAFETY: the fd number is ours in this process until exec.
        let sock = unsafe { BorrowedFd::borrow_raw(fds.sock) };
        if !*go {
            await_go(sock);
            *go = true;
        }
        if channel::send(sock, &Message::Hooks).is_err() {
            exit(1)
        }
        if !matches!(
            channel::recv(sock, false),
            Ok(channel::Received::Message(Message::HooksDone))
        ) {
            exit(1)
        }
    }
    if p.hooks.create_container.is_empty() {
        return Ok(());
    }
    let state = with_pid(&p.hooks.state_creating, std::process::id() as i32);
    let extra = Extra {
        cwd: Some(&p.hooks.rootfs),
        userns: fds
            .namespaces
            .iter()
            .find(|n| n.1 == libc::CLONE_NEWUSER)
            .map(|n| n.0),
    };
    run_prepared(
        HookKind::CreateContainer,
        &p.hooks.create_container,
        state.as_bytes(),
        &extra,
    )
    .map_err(|e| Fail {
        step: Step::Hook,
        path: String::new(),
        err: io::Error::other(e),
    })
}

/// `startContainer` hooks, after the gate: in the container's root, as its user with
/// its capabilities (and its seccomp filter when it has no `no_new_privs`), as runc
/// runs them. Nobody waits for a report any more: a failure goes to the container's
/// stderr (its log) and ends the init before `execve`, with 1.
fn start_container_hooks(p: &Plan) {
    use super::hooks::{run_prepared, with_pid, Extra, HookKind};
    if p.hooks.start_container.is_empty() {
        return;
    }
    let state = with_pid(&p.hooks.state_created, std::process::id() as i32);
    if let Err(e) = run_prepared(
        HookKind::StartContainer,
        &p.hooks.start_container,
        state.as_bytes(),
        &Extra::default(),
    ) {
        let msg = format!("crust: {e}\n");
        // SAFETY: a write to the container's stderr from a buffer we own.
        unsafe { libc::write(2, msg.as_ptr().cast(), msg.len()) };
        exit(1)
    }
}

/// The cloned child's first act (an init's or an exec's): it moves itself into its v1
/// cgroups (it was cloned into the cgroup2 one already, see `cgroup_join`), then makes
/// or joins its cgroup namespace, whose root is thereby the container's cgroup.
pub(crate) fn join_cgroups(fds: &ChildFds, new_cgroupns: bool) -> Result<(), Fail> {
    for (fd, path) in &fds.cgroup_tasks {
        crate::cgroup_join::move_self_v1(*fd).at(Step::Cgroup, path.display())?;
        // SAFETY: the fd is ours and not used again.
        unsafe { libc::close(*fd) };
    }
    if let Some((fd, _)) = &fds.cgroup_dir {
        // SAFETY: as above.
        unsafe { libc::close(*fd) };
    }
    for (fd, flag, path) in fds
        .namespaces
        .iter()
        .filter(|n| n.1 == libc::CLONE_NEWCGROUP)
    {
        // SAFETY: setns on an fd we hold; this process is single-threaded.
        if unsafe { libc::setns(*fd, *flag) } != 0 {
            return os_err(Step::Setns, path.display());
        }
        // SAFETY: the fd is ours and not used again.
        unsafe { libc::close(*fd) };
    }
    // SAFETY: unshare of this single-threaded process.
    if new_cgroupns && unsafe { libc::unshare(libc::CLONE_NEWCGROUP) } != 0 {
        return os_err(Step::Setns, "a new cgroup namespace");
    }
    Ok(())
}

/// Enters the container's user namespace, when it has one: after every mount (made
/// by the caller's root, so id-mapped layers and binds, `/proc` and `/sys` need
/// nothing of the namespace) and the rlimits, before the capability and user switch,
/// which then happen inside it: the capabilities kept are the namespace's, and uid 0
/// is its root, the host id the map gives. The mount namespace stays the caller's
/// root's, so nothing in the container can change its mounts.
pub(crate) fn join_userns(fds: &ChildFds) -> Result<(), Fail> {
    for (fd, flag, path) in fds.namespaces.iter().filter(|n| n.1 == libc::CLONE_NEWUSER) {
        // SAFETY: setns on an fd we hold; this process is single-threaded and shares
        // no fs_struct (cloned without CLONE_FS).
        if unsafe { libc::setns(*fd, *flag) } != 0 {
            return os_err(Step::Setns, path.display());
        }
        // SAFETY: the fd is ours and not used again.
        unsafe { libc::close(*fd) };
    }
    Ok(())
}

/// Blocks until `start` writes a byte to the gate. The fifo is open read-write here,
/// so a reader exists as soon as the init does (`start` never blocks on open) and a
/// writer always exists (the read never sees EOF, only the byte).
fn wait_gate(gate: RawFd) {
    let mut b = [0u8; 1];
    loop {
        // SAFETY: read into a buffer we own from an fd we hold.
        let n = unsafe { libc::read(gate, b.as_mut_ptr().cast(), 1) };
        if n == 1 {
            return;
        }
        if n < 0 && io::Error::last_os_error().raw_os_error() == Some(libc::EINTR) {
            continue;
        }
        exit(1)
    }
}

fn setup(p: &Plan, fds: &ChildFds, go: &mut bool) -> Result<CString, Fail> {
    // SAFETY: plain syscalls on our own process.
    unsafe {
        libc::prctl(libc::PR_SET_DUMPABLE, 0, 0, 0, 0);
        if libc::setsid() < 0 {
            return os_err(Step::Setsid, "");
        }
        libc::umask(0);
        for (target, src) in fds.stdio.iter().enumerate() {
            if let Some(src) = src {
                if libc::dup2(*src, target as RawFd) < 0 {
                    return os_err(Step::Stdio, target);
                }
            }
        }
        // A tty container whose caller gave it a pty slave as stdio: it becomes the
        // controlling terminal of the new session, so ^C and job control reach the
        // container's processes. (Under a monitor the pty is made after pivot_root.)
        if p.terminal && fds.tty_sock.is_none() && libc::ioctl(0, libc::TIOCSCTTY, 0) < 0 {
            return os_err(Step::Terminal, "stdin");
        }
    }

    rootfs::set_propagation(p)?;
    let userns = fds
        .namespaces
        .iter()
        .find(|n| n.1 == libc::CLONE_NEWUSER)
        .map(|n| n.0);
    let root = rootfs::mount_rootfs(p, userns)?;
    rootfs::mount_all(p, root.as_fd(), userns)?;
    dev::populate(p, root.as_fd())?;
    rootfs::dev_readonly(p, root.as_fd())?;
    open_in_root(root.as_fd(), &p.cwd, Create::Dir).at(Step::Cwd, p.cwd.display())?;
    drop(root);
    oom_score_adj(p)?;
    hooks(p, fds, go)?;
    apparmor(p, None)?;
    rootfs::pivot_root(p)?;
    if let Some(sock) = fds.tty_sock {
        console(sock)?;
    }

    rootfs::sysctl(p)?;
    rootfs::mask_and_protect(p)?;
    rootfs::readonly_root(p)?;
    names(p)?;
    rlimits(p)?;
    join_userns(fds)?;

    seccomp_early(p)?;
    caps::drop_bounding(p)?;
    caps::switch_user(p)?;
    caps::apply(p)?;
    caps::no_new_privs(p)?;

    // SAFETY: umask has no failure mode.
    unsafe { libc::umask(p.umask) };
    nix::unistd::chdir(&p.cwd).at(Step::Cwd, p.cwd.display())?;
    // A cwd reached through a leaked fd or a racing symlink would be outside the root;
    // getcwd says "unreachable" (ENOENT) then.
    nix::unistd::getcwd().at(Step::Cwd, p.cwd.display())?;
    find_executable(p)
}

/// Asks AppArmor to confine the process in `p.apparmor` from its next `execve` on
/// (the `exec` attribute, as `aa_change_onexec`): the runtime's own steps up to
/// `execve` stay unconfined, the command and everything it starts are confined. The
/// attribute is the task's own (only the task itself may write it), so it is looked
/// up through the host's `/proc`: by path while the init still has it (before
/// `pivot_root`), through `host_proc` for an exec's process, which is already in the
/// container's mount namespace, whose `/proc` the container's processes could have
/// changed. `attr/apparmor/exec` (Linux 5.8) first, the older shared `attr/exec`
/// where it is missing. A profile not loaded fails the write with `ENOENT`, a kernel
/// without AppArmor the open: either way the process never runs unconfined.
pub(crate) fn apparmor(p: &Plan, host_proc: Option<RawFd>) -> Result<(), Fail> {
    let Some(name) = &p.apparmor else {
        return Ok(());
    };
    let (dir, prefix) = match host_proc {
        Some(fd) => (fd, ""),
        None => (libc::AT_FDCWD, "/proc/"),
    };
    let mut value = b"exec ".to_vec();
    value.extend_from_slice(name.as_bytes());
    let mut last = io::Error::from_raw_os_error(libc::ENOENT);
    for rel in ["thread-self/attr/apparmor/exec", "thread-self/attr/exec"] {
        let path = CString::new(format!("{prefix}{rel}")).expect("no NUL in a literal");
        // SAFETY: openat on a NUL-terminated path we own; the fd is closed below.
        let fd = unsafe { libc::openat(dir, path.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC) };
        if fd < 0 {
            last = io::Error::last_os_error();
            if last.raw_os_error() == Some(libc::ENOENT) {
                continue;
            }
            break;
        }
        // SAFETY: a write from a buffer we own to the fd opened above, then its close.
        let n = unsafe { libc::write(fd, value.as_ptr().cast(), value.len()) };
        let err = io::Error::last_os_error();
        // SAFETY: as above.
        unsafe { libc::close(fd) };
        return if n == value.len() as isize {
            Ok(())
        } else {
            Err(err).at(Step::AppArmor, name.to_string_lossy())
        };
    }
    Err(last).at(Step::AppArmor, name.to_string_lossy())
}

/// Writes `oom_score_adj`. Lowering it needs `CAP_SYS_RESOURCE`, which the caller's
/// bounding set may lack (these machines'): then the init keeps the lowest value it
/// may have, its own inherited one, as containerd's `restrict_oom_score_adj` does.
fn oom_score_adj(p: &Plan) -> Result<(), Fail> {
    let Some(v) = p.oom_score_adj else {
        return Ok(());
    };
    let path = "/proc/self/oom_score_adj";
    match fs::write(path, v.to_string()) {
        Ok(()) => Ok(()),
        Err(e) if matches!(e.raw_os_error(), Some(libc::EACCES) | Some(libc::EPERM)) => {
            let cur: Option<i32> = fs::read_to_string(path)
                .ok()
                .and_then(|s| s.trim().parse().ok());
            match cur {
                Some(cur) if v < cur => Ok(()),
                _ => Err(e).at(Step::OomScoreAdj, format!("{path} = {v}")),
            }
        }
        Err(e) => Err(e).at(Step::OomScoreAdj, format!("{path} = {v}")),
    }
}

/// Hostname and domain name; the plan has them only for a UTS namespace of the
/// container's own (see `spec.rs`).
fn names(p: &Plan) -> Result<(), Fail> {
    if let Some(h) = &p.hostname {
        nix::unistd::sethostname(h).at(Step::Hostname, h)?;
    }
    if let Some(d) = &p.domainname {
        // SAFETY: setdomainname reads `len` bytes from the string.
        if unsafe { libc::setdomainname(d.as_ptr().cast(), d.len()) } != 0 {
            return os_err(Step::Domainname, d);
        }
    }
    Ok(())
}

pub(crate) fn rlimits(p: &Plan) -> Result<(), Fail> {
    for &(resource, soft, hard) in &p.rlimits {
        let lim = libc::rlimit {
            rlim_cur: soft,
            rlim_max: hard,
        };
        // SAFETY: setrlimit reads the struct we own.
        if unsafe { libc::setrlimit(resource as _, &lim) } != 0 {
            return os_err(Step::Rlimit, format!("resource {resource} = {soft}/{hard}"));
        }
    }
    Ok(())
}

/// An existing regular file the (already switched) user may execute.
fn check_executable(path: &Path) -> io::Result<()> {
    let meta = fs::metadata(path)?;
    if !meta.is_file() {
        return Err(io::Error::from_raw_os_error(libc::EACCES));
    }
    let c = CString::new(path.as_os_str().as_bytes())
        .map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
    // SAFETY: faccessat with a NUL-terminated path; AT_EACCESS checks the effective
    // ids, which are the container user's now.
    if unsafe { libc::faccessat(libc::AT_FDCWD, c.as_ptr(), libc::X_OK, libc::AT_EACCESS) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// `args[0]` as is when it has a slash, else searched in the spec's `PATH` (the
/// container's, not ours), before the gate: a missing binary fails `create`.
pub(crate) fn find_executable(p: &Plan) -> Result<CString, Fail> {
    let arg0 = p.args[0].to_bytes();
    let name = String::from_utf8_lossy(arg0).into_owned();
    let candidates: Vec<PathBuf> = if arg0.contains(&b'/') {
        vec![PathBuf::from(std::ffi::OsStr::from_bytes(arg0))]
    } else {
        p.path_env
            .split(':')
            .map(|d| if d.is_empty() { "." } else { d })
            .map(|d| Path::new(d).join(std::ffi::OsStr::from_bytes(arg0)))
            .collect()
    };
    let mut err = io::Error::from_raw_os_error(libc::ENOENT);
    for c in candidates {
        match check_executable(&c) {
            Ok(()) => {
                return CString::new(c.as_os_str().as_bytes())
                    .map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))
                    .at(Step::Executable, &name)
            }
            // A candidate that exists but may not be run is the more useful error.
            Err(e) if e.raw_os_error() != Some(libc::ENOENT) => err = e,
            Err(_) => {}
        }
    }
    Err(err).at(Step::Executable, name)
}

/// Installs the seccomp filter now when the process will not have `no_new_privs`:
/// the kernel then wants `CAP_SYS_ADMIN`, which the container may be about to drop,
/// so it goes in before the capability and user switch (as runc, crun and youki do).
/// With `no_new_privs` it waits for [`exec`].
pub(crate) fn seccomp_early(p: &Plan) -> Result<(), Fail> {
    match &p.seccomp {
        Some(f) if !p.no_new_privileges => seccomp::install(f).at(Step::Seccomp, ""),
        _ => Ok(()),
    }
}

/// Closes every fd from 3 up: `close_range`, or one by one where it is missing.
pub(crate) fn close_from_3() {
    // SAFETY: closing fds is what we mean; nothing of ours is used after this.
    unsafe {
        if libc::syscall(libc::SYS_close_range, 3u32, u32::MAX, 0u32) == 0 {
            return;
        }
        let mut lim = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        let max = if libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) == 0 {
            lim.rlim_cur.min(1 << 20) as RawFd
        } else {
            1024
        };
        for fd in 3..max {
            libc::close(fd);
        }
    }
}

/// The last step: default signal dispositions and an empty mask (an ignored SIGPIPE,
/// say, would survive `execve`), the seccomp filter when the process has
/// `no_new_privs` (so that of the runtime's own calls only `close_range` and `execve`
/// run under it), only fds 0, 1, 2, and `execve`. A filter that cannot be installed
/// ends the process before `execve`: reported on `report` (the exec path's socket)
/// when there is one, always on the container's stderr.
pub(crate) fn exec(p: &Plan, exe: &CStr, report: Option<RawFd>) -> ! {
    let argv = c_array(&p.args);
    let envp = c_array(&p.env);
    default_signals();
    if let (Some(f), true) = (&p.seccomp, p.no_new_privileges) {
        if let Err(e) = seccomp::install(f) {
            if let Some(sock) = report {
                // SAFETY: the socket fd is ours until close_from_3.
                let sock = unsafe { BorrowedFd::borrow_raw(sock) };
                let f = Fail {
                    step: Step::Seccomp,
                    path: String::new(),
                    err: e,
                };
                let _ = channel::send(sock, &f.message());
                exit(1)
            }
            let msg = format!("crust: {}: {e}\n", Step::Seccomp);
            // SAFETY: a write to the container's stderr from a buffer we own.
            unsafe { libc::write(2, msg.as_ptr().cast(), msg.len()) };
            exit(1)
        }
    }
    // SAFETY: closing our own fds, and execve with NUL-terminated arrays of pointers
    // into CStrings that outlive the call.
    unsafe {
        close_from_3();
        libc::execve(exe.as_ptr(), argv.as_ptr(), envp.as_ptr());
    }
    let e = io::Error::last_os_error();
    let msg = format!("crust: exec {}: {e}\n", exe.to_string_lossy());
    // SAFETY: a write to the container's stderr from a buffer we own.
    unsafe { libc::write(2, msg.as_ptr().cast(), msg.len()) };
    exit(if e.raw_os_error() == Some(libc::ENOENT) {
        127
    } else {
        126
    })
}

/// `execve`'s NULL-terminated array of pointers into `strings` (which must outlive it).
pub(crate) fn c_array(strings: &[CString]) -> Vec<*const libc::c_char> {
    strings
        .iter()
        .map(|a| a.as_ptr())
        .chain(std::iter::once(std::ptr::null()))
        .collect()
}

/// Every signal to its default disposition, then an empty mask: what a process is
/// `execve`d with (an ignored SIGPIPE, or a pending signal the fork blocked, must not
/// reach the program otherwise). Plain syscalls: safe after a fork of a threaded caller.
pub(crate) fn default_signals() {
    // SAFETY: resetting our own signal state.
    unsafe {
        for sig in 1..libc::SIGRTMAX() {
            if sig != libc::SIGKILL && sig != libc::SIGSTOP {
                libc::signal(sig, libc::SIG_DFL);
            }
        }
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigprocmask(libc::SIG_SETMASK, &set, std::ptr::null_mut());
    }
}

/// A tty container's terminal, as runc makes it: a pty of the container's own devpts
/// (so `ttyname()` finds `/dev/pts/N` inside), its slave on 0, 1 and 2 as the
/// controlling terminal, its master sent to the monitor over `sock` (SCM_RIGHTS).
fn console(sock: RawFd) -> Result<(), Fail> {
    // SAFETY: plain syscalls on fds this process owns; the message points into locals
    // that outlive the call.
    unsafe {
        let master = libc::open(
            c"/dev/ptmx".as_ptr(),
            libc::O_RDWR | libc::O_NOCTTY | libc::O_CLOEXEC,
        );
        if master < 0 {
            return os_err(Step::Terminal, "/dev/ptmx");
        }
        let unlock: libc::c_int = 0;
        if libc::ioctl(master, libc::TIOCSPTLCK, &unlock) < 0 {
            return os_err(Step::Terminal, "unlock pty");
        }
        // The peer through the master itself: no path lookup that could be raced.
        let mut slave = libc::ioctl(master, libc::TIOCGPTPEER, libc::O_RDWR | libc::O_NOCTTY);
        if slave < 0 {
            let mut n: libc::c_uint = 0;
            if libc::ioctl(master, libc::TIOCGPTN, &mut n) < 0 {
                return os_err(Step::Terminal, "pty number");
            }
            let path = CString::new(format!("/dev/pts/{n}")).unwrap_or_default();
            slave = libc::open(
                path.as_ptr(),
                libc::O_RDWR | libc::O_NOCTTY | libc::O_CLOEXEC,
            );
            if slave < 0 {
                return os_err(Step::Terminal, format!("/dev/pts/{n}"));
            }
        }
        for target in 0..3 {
            if libc::dup2(slave, target) < 0 {
                return os_err(Step::Terminal, "dup pty");
            }
        }
        libc::close(slave);
        if libc::ioctl(0, libc::TIOCSCTTY, 0) < 0 {
            return os_err(Step::Terminal, "controlling terminal");
        }
        let mut byte = [0u8; 1];
        let mut iov = libc::iovec {
            iov_base: byte.as_mut_ptr().cast(),
            iov_len: 1,
        };
        let mut control = [0u64; 4];
        let space = libc::CMSG_SPACE(std::mem::size_of::<RawFd>() as u32) as usize;
        let mut msg: libc::msghdr = std::mem::zeroed();
        msg.msg_iov = &mut iov;
        msg.msg_iovlen = 1;
        msg.msg_control = control.as_mut_ptr().cast();
        msg.msg_controllen = space;
        let cmsg = libc::CMSG_FIRSTHDR(&msg);
        (*cmsg).cmsg_level = libc::SOL_SOCKET;
        (*cmsg).cmsg_type = libc::SCM_RIGHTS;
        (*cmsg).cmsg_len = libc::CMSG_LEN(std::mem::size_of::<RawFd>() as u32) as usize;
        std::ptr::write_unaligned(libc::CMSG_DATA(cmsg).cast::<RawFd>(), master);
        if libc::sendmsg(sock, &msg, libc::MSG_NOSIGNAL) < 0 {
            return os_err(Step::Terminal, "send pty to the monitor");
        }
        libc::close(master);
        libc::close(sock);
    }
    Ok(())
}
