//! OCI hooks (runtime spec, "POSIX-platform Hooks"): programs the spec names, run at
//! points of the container's life with the container's state on stdin.
//!
//! | hook | who runs it, where | when |
//! |---|---|---|
//! | `prestart`, `createRuntime` | the caller of `create` (the runtime's namespaces) | the init has made its mounts, before `pivot_root`; the init waits (`Hooks`/`HooksDone`, see `channel.rs`) |
//! | `createContainer` | the init (the container's namespaces; path resolved on the host's tree, cwd the rootfs) | right after them, before `pivot_root` |
//! | `startContainer` | the init (the container's namespaces and root, as the container's user) | after the start gate opened, before `execve` |
//! | `poststart` | the caller of `start` ([`run`]) | once the gate is open |
//! | `poststop` | the caller that deletes the container ([`run`]) | after its processes are gone, before its files go |
//!
//! A hook is `execve`d with its own `args` (`[path]` when none) and `env` (when none:
//! the caller's environment in the runtime's namespaces, as runc's hooks inherit runc's,
//! and the container's own for `startContainer`, runc's "historical" default). Its
//! stdin is the state JSON, its stdout and stderr are kept (4 KiB of each) for the
//! error of a hook that fails; a hook past its `timeout` is killed. The first failure
//! ends the list, and the error says which hook failed as runc says it:
//! `error running createRuntime hook #0: exit status 1, stdout: ..., stderr: ...`.
//!
//! The runner forks and execs by raw syscalls with everything it needs prepared
//! before the fork ([`Prepared`]): it runs in the init (single-threaded copy of the
//! caller, no locks) and in multi-threaded callers (crustd) alike. Its stdio are
//! memfds, not pipes: nothing to poll, and a hook that leaves a daemon holding them
//! does not keep the caller waiting.

use std::collections::HashMap;
use std::ffi::{CStr, CString};
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::time::Duration;

use oci_spec::runtime::{Hook, Spec};

/// Where in the container's life a hook runs (the spec's names).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HookKind {
    Prestart,
    CreateRuntime,
    CreateContainer,
    StartContainer,
    Poststart,
    Poststop,
}

impl HookKind {
    pub const ALL: [HookKind; 6] = [
        HookKind::Prestart,
        HookKind::CreateRuntime,
        HookKind::CreateContainer,
        HookKind::StartContainer,
        HookKind::Poststart,
        HookKind::Poststop,
    ];

    /// The spec's name of the list.
    pub fn name(self) -> &'static str {
        match self {
            HookKind::Prestart => "prestart",
            HookKind::CreateRuntime => "createRuntime",
            HookKind::CreateContainer => "createContainer",
            HookKind::StartContainer => "startContainer",
            HookKind::Poststart => "poststart",
            HookKind::Poststop => "poststop",
        }
    }
}

/// The hooks of one kind the spec lists (none when it has no `hooks`).
pub fn of(spec: &Spec, kind: HookKind) -> &[Hook] {
    let Some(h) = spec.hooks() else {
        return &[];
    };
    #[allow(deprecated)] // prestart: deprecated by the spec, still run by runc and here.
    let list = match kind {
        HookKind::Prestart => h.prestart(),
        HookKind::CreateRuntime => h.create_runtime(),
        HookKind::CreateContainer => h.create_container(),
        HookKind::StartContainer => h.start_container(),
        HookKind::Poststart => h.poststart(),
        HookKind::Poststop => h.poststop(),
    };
    list.as_deref().unwrap_or(&[])
}

/// Whether the spec has any hook at all.
pub fn any(spec: &Spec) -> bool {
    HookKind::ALL.into_iter().any(|k| !of(spec, k).is_empty())
}

/// What the spec requires of every hook: an absolute path, a positive timeout.
pub(crate) fn check(spec: &Spec) -> Result<(), String> {
    for kind in HookKind::ALL {
        for (i, h) in of(spec, kind).iter().enumerate() {
            if !h.path().is_absolute() {
                return Err(format!(
                    "{} hook #{i}: path {:?} is not absolute",
                    kind.name(),
                    h.path()
                ));
            }
            if let Some(t) = h.timeout() {
                if t <= 0 {
                    return Err(format!(
                        "{} hook #{i}: timeout {t} is not greater than zero",
                        kind.name()
                    ));
                }
            }
        }
    }
    Ok(())
}

/// The container's state as a hook reads it on stdin (the runtime spec's state
/// schema): `pid` only while there is a process.
pub fn state_json(
    id: &str,
    bundle: &Path,
    status: &str,
    pid: Option<i32>,
    annotations: Option<&HashMap<String, String>>,
) -> Vec<u8> {
    let mut m = serde_json::Map::new();
    m.insert("ociVersion".into(), oci_spec::runtime::VERSION.into());
    m.insert("id".into(), id.into());
    m.insert("status".into(), status.into());
    if let Some(pid) = pid {
        m.insert("pid".into(), pid.into());
    }
    m.insert(
        "bundle".into(),
        bundle.to_string_lossy().into_owned().into(),
    );
    if let Some(a) = annotations.filter(|a| !a.is_empty()) {
        m.insert(
            "annotations".into(),
            serde_json::to_value(a).unwrap_or_default(),
        );
    }
    serde_json::to_vec(&serde_json::Value::Object(m)).unwrap_or_default()
}

/// A hook ready to be forked and exec'd without allocating: C strings, built by the
/// caller before any fork.
#[derive(Debug, Clone)]
pub(crate) struct Prepared {
    pub path: CString,
    pub argv: Vec<CString>,
    pub env: Vec<CString>,
    pub timeout: Option<Duration>,
}

fn cstring(s: &[u8], what: &str) -> Result<CString, String> {
    CString::new(s).map_err(|_| format!("{what} has a NUL byte"))
}

impl Prepared {
    /// `default_env` is what a hook without `env` gets.
    pub(crate) fn new(h: &Hook, default_env: &[CString]) -> Result<Prepared, String> {
        let path = cstring(h.path().as_os_str().as_bytes(), "the hook's path")?;
        let argv = match h.args() {
            Some(a) if !a.is_empty() => a
                .iter()
                .map(|s| cstring(s.as_bytes(), "an argument"))
                .collect::<Result<_, _>>()?,
            _ => vec![path.clone()],
        };
        let env = match h.env() {
            Some(e) => e
                .iter()
                .map(|s| cstring(s.as_bytes(), "an env entry"))
                .collect::<Result<_, _>>()?,
            None => default_env.to_vec(),
        };
        Ok(Prepared {
            path,
            argv,
            env,
            timeout: h
                .timeout()
                .filter(|t| *t > 0)
                .map(|t| Duration::from_secs(t as u64)),
        })
    }
}

/// The caller's environment, what a runtime-namespace hook without `env` gets.
pub(crate) fn own_env() -> Vec<CString> {
    std::env::vars_os()
        .filter_map(|(k, v)| {
            let mut b = k.as_bytes().to_vec();
            b.push(b'=');
            b.extend_from_slice(v.as_bytes());
            CString::new(b).ok()
        })
        .collect()
}

/// Runs the hooks in order in the caller's namespaces; the first that fails ends
/// the list with runc's wording of the error.
pub fn run(kind: HookKind, hooks: &[Hook], state: &[u8]) -> Result<(), String> {
    if hooks.is_empty() {
        return Ok(());
    }
    let env = own_env();
    let prepared = hooks
        .iter()
        .map(|h| Prepared::new(h, &env))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| format!("error running {} hook: {e}", kind.name()))?;
    run_prepared(kind, &prepared, state, &Extra::default())
}

/// What a hook run by the init gets besides its own settings.
#[derive(Debug, Default)]
pub(crate) struct Extra<'a> {
    /// The directory it starts in.
    pub cwd: Option<&'a CStr>,
    /// A user namespace it enters before `execve` (the container's, which the init
    /// itself joins only later).
    pub userns: Option<RawFd>,
}

pub(crate) fn run_prepared(
    kind: HookKind,
    hooks: &[Prepared],
    state: &[u8],
    extra: &Extra<'_>,
) -> Result<(), String> {
    for (i, h) in hooks.iter().enumerate() {
        run_one(h, state, extra)
            .map_err(|e| format!("error running {} hook #{i}: {e}", kind.name()))?;
    }
    Ok(())
}

/// The hooks of a container being created, prepared before the fork.
#[derive(Debug, Clone, Default)]
pub(crate) struct Plan {
    /// `prestart` then `createRuntime`: the caller runs them while the init waits.
    pub runtime: Vec<(HookKind, Vec<Hook>)>,
    pub create_container: Vec<Prepared>,
    pub start_container: Vec<Prepared>,
    /// The state without `pid`, as `createContainer` (`creating`) and
    /// `startContainer` (`created`) read it once the init put its pid in.
    pub state_creating: String,
    pub state_created: String,
    /// The rootfs, `createContainer`'s cwd (runc's too).
    pub rootfs: CString,
}

impl Plan {
    pub(crate) fn new(
        id: &str,
        bundle: &Path,
        spec: &Spec,
        rootfs: &Path,
        container_env: &[CString],
    ) -> Result<Plan, String> {
        check(spec)?;
        if !any(spec) {
            return Ok(Plan::default());
        }
        let runtime = [HookKind::Prestart, HookKind::CreateRuntime]
            .into_iter()
            .filter(|k| !of(spec, *k).is_empty())
            .map(|k| (k, of(spec, k).to_vec()))
            .collect();
        let create = of(spec, HookKind::CreateContainer);
        let own = if create.iter().any(|h| h.env().is_none()) {
            own_env()
        } else {
            vec![]
        };
        let prepare = |hooks: &[Hook], env: &[CString]| {
            hooks
                .iter()
                .map(|h| Prepared::new(h, env))
                .collect::<Result<Vec<_>, _>>()
        };
        let state = |status| {
            let s = state_json(id, bundle, status, None, spec.annotations().as_ref());
            String::from_utf8_lossy(&s).into_owned()
        };
        Ok(Plan {
            runtime,
            create_container: prepare(create, &own)?,
            start_container: prepare(of(spec, HookKind::StartContainer), container_env)?,
            state_creating: state("creating"),
            state_created: state("created"),
            rootfs: cstring(rootfs.as_os_str().as_bytes(), "the rootfs path")?,
        })
    }
}

/// `state` (an object without `pid`) with `pid` put first.
pub(crate) fn with_pid(state: &str, pid: i32) -> String {
    match state.strip_prefix('{') {
        Some("}") => format!("{{\"pid\":{pid}}}"),
        Some(rest) => format!("{{\"pid\":{pid},{rest}"),
        None => state.to_string(),
    }
}

/// How much of a failed hook's stdout and stderr its error quotes.
const KEEP_OUTPUT: usize = 4096;

fn memfd(name: &CStr) -> io::Result<OwnedFd> {
    // SAFETY: memfd_create with a NUL-terminated name; the fd is owned below.
    let fd = unsafe { libc::memfd_create(name.as_ptr(), libc::MFD_CLOEXEC) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: a fresh fd of ours.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// The start of what a memfd holds, as text.
fn read_back(fd: &OwnedFd) -> String {
    let mut buf = vec![0u8; KEEP_OUTPUT];
    // SAFETY: pread into a buffer we own, of its length.
    let n = unsafe { libc::pread(fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len(), 0) };
    buf.truncate(n.max(0) as usize);
    String::from_utf8_lossy(&buf).trim_end().to_string()
}

fn run_one(h: &Prepared, state: &[u8], extra: &Extra<'_>) -> Result<(), String> {
    let describe = |e: io::Error| format!("{}: {e}", h.path.to_string_lossy());
    // The path is checked before the fork, where the error can still be put in words.
    // SAFETY: access on a NUL-terminated path.
    if unsafe { libc::access(h.path.as_ptr(), libc::X_OK) } != 0 {
        return Err(describe(io::Error::last_os_error()));
    }
    let stdin = memfd(c"crust-hook-state").map_err(describe)?;
    let out = memfd(c"crust-hook-stdout").map_err(describe)?;
    let err = memfd(c"crust-hook-stderr").map_err(describe)?;
    let mut off = 0;
    while off < state.len() {
        // SAFETY: a write from a buffer we own into our memfd.
        let n = unsafe {
            libc::write(
                stdin.as_raw_fd(),
                state[off..].as_ptr().cast(),
                state.len() - off,
            )
        };
        if n <= 0 {
            return Err(describe(io::Error::last_os_error()));
        }
        off += n as usize;
    }
    // SAFETY: lseek on our memfd.
    unsafe { libc::lseek(stdin.as_raw_fd(), 0, libc::SEEK_SET) };
    let argv = super::init::c_array(&h.argv);
    let envp = super::init::c_array(&h.env);
    let fds = [stdin.as_raw_fd(), out.as_raw_fd(), err.as_raw_fd()];
    // SAFETY: the child makes only async-signal-safe calls on memory prepared before
    // the fork (no allocation, no lock) and leaves by execve or _exit.
    let pid = unsafe { super::process::fork_signals_blocked() };
    if pid < 0 {
        return Err(describe(io::Error::last_os_error()));
    }
    if pid == 0 {
        // SAFETY: as above; every call is a plain syscall on this process.
        unsafe { hook_child(&fds, extra, h.path.as_ptr(), &argv, &envp) }
    }
    drop(stdin);
    let status = wait_hook(pid, h.timeout)?;
    let text = |fd: &OwnedFd| read_back(fd);
    match status {
        Some(st) if libc::WIFEXITED(st) && libc::WEXITSTATUS(st) == 0 => Ok(()),
        Some(st) => {
            let how = if libc::WIFEXITED(st) {
                format!("exit status {}", libc::WEXITSTATUS(st))
            } else {
                format!("signal: {}", signal_name(libc::WTERMSIG(st)))
            };
            Err(format!(
                "{how}, stdout: {}, stderr: {}",
                text(&out),
                text(&err)
            ))
        }
        None => Err(format!(
            "hook ran past specified timeout of {:.1}s",
            h.timeout.unwrap_or_default().as_secs_f64()
        )),
    }
}

fn signal_name(sig: i32) -> String {
    nix::sys::signal::Signal::try_from(sig)
        .map(|s| s.as_str().to_lowercase())
        .unwrap_or_else(|_| sig.to_string())
}

/// The hook's side of the fork: its stdio, default signal handling, the user
/// namespace and cwd it is given, no other fd, `execve`.
///
/// # Safety
/// Only in the child of a fork; never returns.
unsafe fn hook_child(
    fds: &[RawFd; 3],
    extra: &Extra<'_>,
    path: *const libc::c_char,
    argv: &[*const libc::c_char],
    envp: &[*const libc::c_char],
) -> ! {
    for (target, fd) in fds.iter().enumerate() {
        if libc::dup2(*fd, target as RawFd) < 0 {
            libc::_exit(126);
        }
    }
    if let Some(ns) = extra.userns {
        if libc::setns(ns, libc::CLONE_NEWUSER) != 0 {
            libc::_exit(126);
        }
    }
    if let Some(cwd) = extra.cwd {
        if libc::chdir(cwd.as_ptr()) != 0 {
            libc::_exit(126);
        }
    }
    super::init::default_signals();
    super::init::close_from_3();
    libc::execve(path, argv.as_ptr(), envp.as_ptr());
    libc::_exit(127)
}

/// Waits for the hook; `None` when it ran past `timeout` (then it was killed and
/// reaped).
fn wait_hook(pid: libc::pid_t, timeout: Option<Duration>) -> Result<Option<libc::c_int>, String> {
    let reap = |flags| -> io::Result<Option<libc::c_int>> {
        loop {
            let mut st = 0;
            // SAFETY: waitpid on our own child, into a local.
            let rc = unsafe { libc::waitpid(pid, &mut st, flags) };
            if rc == pid {
                return Ok(Some(st));
            }
            if rc == 0 {
                return Ok(None);
            }
            let e = io::Error::last_os_error();
            if e.raw_os_error() != Some(libc::EINTR) {
                return Err(e);
            }
        }
    };
    let Some(timeout) = timeout else {
        return reap(0).map_err(|e| format!("waiting for the hook: {e}"));
    };
    let deadline = std::time::Instant::now() + timeout;
    let pidfd = crate::proc::pidfd_open(pid).ok();
    loop {
        if let Some(st) = reap(libc::WNOHANG).map_err(|e| format!("waiting for the hook: {e}"))? {
            return Ok(Some(st));
        }
        let now = std::time::Instant::now();
        if now >= deadline {
            // SAFETY: our own child, not yet reaped: the pid is still its.
            unsafe { libc::kill(pid, libc::SIGKILL) };
            let _ = reap(0);
            return Ok(None);
        }
        let wait = (deadline - now).min(Duration::from_millis(100));
        match &pidfd {
            Some(fd) => {
                let mut pfd = libc::pollfd {
                    fd: fd.as_raw_fd(),
                    events: libc::POLLIN,
                    revents: 0,
                };
                // SAFETY: poll on one pollfd we own.
                unsafe { libc::poll(&mut pfd, 1, wait.as_millis().max(1) as libc::c_int) };
            }
            None => std::thread::sleep(wait.min(Duration::from_millis(5))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use oci_spec::runtime::{HookBuilder, HooksBuilder, SpecBuilder};

    fn hook(args: &[&str]) -> Hook {
        HookBuilder::default()
            .path(args[0])
            .args(args.iter().map(|s| s.to_string()).collect::<Vec<_>>())
            .build()
            .unwrap()
    }

    #[test]
    fn state_has_pid_only_with_a_process() {
        let a: HashMap<String, String> = [("k".to_string(), "v".to_string())].into();
        let s: serde_json::Value = serde_json::from_slice(&state_json(
            "c1",
            Path::new("/b"),
            "creating",
            Some(42),
            Some(&a),
        ))
        .unwrap();
        assert_eq!(s["id"], "c1");
        assert_eq!(s["pid"], 42);
        assert_eq!(s["status"], "creating");
        assert_eq!(s["bundle"], "/b");
        assert_eq!(s["annotations"]["k"], "v");
        assert_eq!(s["ociVersion"], oci_spec::runtime::VERSION);
        let s: serde_json::Value =
            serde_json::from_slice(&state_json("c1", Path::new("/b"), "stopped", None, None))
                .unwrap();
        assert!(s.get("pid").is_none() && s.get("annotations").is_none());
    }

    #[test]
    fn the_state_reaches_stdin_and_failures_quote_the_output() {
        let dir = std::env::temp_dir().join(format!("crust-hooks-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let out = dir.join("state");
        let ok = hook(&[
            "/bin/sh",
            "-c",
            &format!("cat > {}; echo \"$X\" >> {}", out.display(), out.display()),
        ]);
        let mut with_env = ok.clone();
        with_env.set_env(Some(vec!["X=from-env".into()]));
        run(HookKind::Poststop, &[with_env], b"{\"id\":\"x\"}").unwrap();
        assert_eq!(
            std::fs::read_to_string(&out).unwrap(),
            "{\"id\":\"x\"}from-env\n"
        );

        let bad = hook(&["/bin/sh", "-c", "echo out; echo err >&2; exit 3"]);
        let e = run(HookKind::CreateRuntime, &[ok.clone(), bad], b"{}").unwrap_err();
        assert_eq!(
            e,
            "error running createRuntime hook #1: exit status 3, stdout: out, stderr: err"
        );
        let e = run(HookKind::Prestart, &[hook(&["/nonexistent/hook"])], b"{}").unwrap_err();
        assert!(
            e.starts_with("error running prestart hook #0: /nonexistent/hook: No such file"),
            "{e}"
        );

        let mut slow = hook(&["/bin/sh", "-c", "sleep 30"]);
        slow.set_timeout(Some(1));
        let t = std::time::Instant::now();
        let e = run(HookKind::Poststart, &[slow], b"{}").unwrap_err();
        assert_eq!(
            e,
            "error running poststart hook #0: hook ran past specified timeout of 1.0s"
        );
        assert!(t.elapsed() < Duration::from_secs(20));
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn hooks_must_have_absolute_paths_and_positive_timeouts() {
        let spec = |h: Hook| {
            SpecBuilder::default()
                .hooks(HooksBuilder::default().poststop(vec![h]).build().unwrap())
                .build()
                .unwrap()
        };
        assert!(check(&spec(hook(&["/bin/true"]))).is_ok());
        let e = check(&spec(hook(&["true"]))).unwrap_err();
        assert!(
            e.contains("poststop hook #0") && e.contains("not absolute"),
            "{e}"
        );
        let mut h = hook(&["/bin/true"]);
        h.set_timeout(Some(0));
        assert!(check(&spec(h)).unwrap_err().contains("timeout 0"));
        assert!(any(&spec(hook(&["/bin/true"]))));
        assert!(!any(&Spec::default()));
    }
}
