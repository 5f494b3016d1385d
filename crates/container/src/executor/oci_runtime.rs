//! An external OCI runtime (`runc`, `crun`) as another way to run a bundle, under the
//! same monitor as crust's own executor.
//!
//! ```text
//!  main ─fork─▶ M: PR_SET_CHILD_SUBREAPER
//!   │            ├─fork─▶ `<runtime> --root R --log L create --bundle B --pid-file P ID`
//!   │            │         (stdio: the container's pipes; its init waits on `start`)
//!   │            │         exits; the orphaned init is re-parented to M, the subreaper
//!   │            │ reaps the runtime; exit status ≠ 0 → M exits 1
//!   │            └ execve crust-monitor (the "ready" pipe closes with the exec)
//!   ▼ EOF on "ready": M still alive (the monitor) → the init pid from P; else the error
//!     the runtime logged to L
//! ```
//!
//! The subreaper attribute survives `execve`, so the monitor is the parent of the
//! container's init exactly as with the built-in executor and writes the same exit
//! record. The bundle's root file system must be on the host here (the runtime
//! mounts nothing of ours): the caller mounts it before `create`.

use std::ffi::CString;
use std::fs;
use std::io::{self, Read};
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use super::process::close_all_but;
use super::{monitor_io, MonitorOpts};
use crate::error::{Error, Result};

/// How long `create` waits for the runtime.
const CREATE_TIMEOUT: Duration = Duration::from_secs(60);

/// An OCI runtime binary and its state root.
#[derive(Debug, Clone)]
pub struct OciRuntime {
    pub binary: PathBuf,
    /// `--root`: where the runtime keeps its container state (volatile).
    pub root: PathBuf,
}

/// What [`OciRuntime::create`] started.
#[derive(Debug, Clone, Copy)]
pub struct Created {
    pub pid: i32,
    pub monitor: i32,
}

fn err(id: &str, step: &'static str, path: impl Into<PathBuf>, source: io::Error) -> Error {
    Error::Container {
        id: id.to_string(),
        step,
        path: path.into(),
        source,
    }
}

fn cstr(p: &[u8]) -> io::Result<CString> {
    CString::new(p).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))
}

/// The last error the runtime logged (`--log-format json`), or the log's tail.
fn runtime_error(log: &Path) -> String {
    let text = fs::read_to_string(log).unwrap_or_default();
    let msg = text
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|v| v["level"] == "error" || v["level"] == "fatal")
        .filter_map(|v| v["msg"].as_str().map(String::from))
        .next_back();
    msg.unwrap_or_else(|| {
        let t = text.trim();
        if t.is_empty() {
            "the runtime failed without a message".into()
        } else {
            t.chars()
                .rev()
                .take(500)
                .collect::<Vec<_>>()
                .into_iter()
                .rev()
                .collect()
        }
    })
}

impl OciRuntime {
    /// Whether the runtime says (`<runtime> features`, OCI runtime features) that it
    /// takes mount option `opt`; false when it cannot say.
    pub fn supports_mount_option(&self, opt: &str) -> bool {
        let Ok(out) = Command::new(&self.binary)
            .arg("features")
            .stdin(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .output()
        else {
            return false;
        };
        out.status.success()
            && serde_json::from_slice::<serde_json::Value>(&out.stdout)
                .ok()
                .and_then(|v| {
                    v["mountOptions"]
                        .as_array()
                        .map(|a| a.iter().any(|o| o.as_str() == Some(opt)))
                })
                .unwrap_or(false)
    }

    fn run(&self, id: &str, args: &[&str]) -> Result<()> {
        let log = self.root.join(format!("{id}.log"));
        let out = Command::new(&self.binary)
            .arg("--root")
            .arg(&self.root)
            .arg("--log")
            .arg(&log)
            .arg("--log-format")
            .arg("json")
            .args(args)
            .output()
            .map_err(|e| err(id, "run runtime", &self.binary, e))?;
        if out.status.success() {
            return Ok(());
        }
        let mut msg = runtime_error(&log);
        if msg.starts_with("the runtime failed") {
            msg = String::from_utf8_lossy(&out.stderr).trim().to_string();
        }
        Err(err(
            id,
            "runtime",
            &self.binary,
            io::Error::other(format!("{} {}: {msg}", self.binary.display(), args[0])),
        ))
    }

    /// Creates the container from the bundle (its `config.json` and a mounted root file
    /// system) under a monitor; the init waits for [`OciRuntime::start`].
    ///
    /// `terminal` (the bundle's `process.terminal`): the runtime makes the container's
    /// pty and sends its master to a console socket of ours; the connection it made is
    /// what the monitor is given to receive the master on, as from crust's own init.
    pub fn create(
        &self,
        id: &str,
        bundle: &Path,
        monitor: &MonitorOpts,
        terminal: bool,
    ) -> Result<Created> {
        fs::create_dir_all(&self.root)
            .map_err(|e| err(id, "create runtime root", &self.root, e))?;
        let pid_file = self.root.join(format!("{id}.pid"));
        let log = self.root.join(format!("{id}.log"));
        let _ = fs::remove_file(&pid_file);
        let _ = fs::remove_file(&log);
        // The attach socket, if any, goes into the bundle (the runtime owns its state dir).
        let (stdio, mexec, _init_end) = monitor_io(monitor, terminal, bundle)
            .map_err(|e| err(id, "set up monitor", &monitor.binary, e))?;
        // The fd number the monitor is told (`-T N`) to receive the master on.
        let tty_target: Option<RawFd> = mexec
            .argv
            .iter()
            .position(|a| a.as_bytes() == b"-T")
            .and_then(|i| mexec.argv.get(i + 1))
            .and_then(|n| n.to_str().ok()?.parse().ok());
        let console = if terminal {
            Some(ConsoleSocket::bind(&self.root, id)?)
        } else {
            None
        };
        let mut args: Vec<&[u8]> = vec![
            self.binary.as_os_str().as_bytes(),
            b"--root",
            self.root.as_os_str().as_bytes(),
            b"--log",
            log.as_os_str().as_bytes(),
            b"--log-format",
            b"json",
            b"create",
            b"--bundle",
            bundle.as_os_str().as_bytes(),
            b"--pid-file",
            pid_file.as_os_str().as_bytes(),
        ];
        if let Some(c) = &console {
            args.push(b"--console-socket");
            args.push(c.path.as_os_str().as_bytes());
        }
        args.push(id.as_bytes());
        let argv: Vec<CString> = args
            .iter()
            .map(|a| cstr(a))
            .collect::<io::Result<_>>()
            .map_err(|e| err(id, "runtime arguments", bundle, e))?;
        let console_fd: RawFd = console.as_ref().map_or(-1, |c| c.fd.as_raw_fd());
        let envp = [
            cstr(b"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin")
                .map_err(|e| err(id, "runtime arguments", bundle, e))?,
        ];
        let (ready_r, ready_w) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC)
            .map_err(|e| err(id, "pipe", bundle, e.into()))?;
        let argv_p = super::init::c_array(&argv);
        let envp_p: [*const libc::c_char; 2] = [envp[0].as_ptr(), std::ptr::null()];
        let margv_p = super::init::c_array(&mexec.argv);
        let stdio_raw: [RawFd; 3] = [
            stdio[0].as_raw_fd(),
            stdio[1].as_raw_fd(),
            stdio[2].as_raw_fd(),
        ];

        // Everything M keeps and runs is made here: after fork it may not allocate.
        let mut keep: Vec<RawFd> = mexec.keep.iter().map(|f| f.as_raw_fd()).collect();
        keep.push(mexec.devnull.as_raw_fd());
        keep.push(ready_w.as_raw_fd());
        if console_fd >= 0 {
            keep.push(console_fd);
        }
        let keep_after: Vec<RawFd> = mexec.keep.iter().map(|f| f.as_raw_fd()).collect();
        let envp0: [*const libc::c_char; 1] = [std::ptr::null()];
        let mut plan = MonitorFork {
            stdio: stdio_raw,
            argv: &argv_p,
            envp: &envp_p,
            keep: &mut keep,
            keep_after: &keep_after,
            devnull: mexec.devnull.as_raw_fd(),
            console_fd,
            tty_target,
            monitor_path: mexec.path.as_ptr(),
            monitor_argv: &margv_p,
            monitor_envp: &envp0,
        };
        let plan = &mut plan;

        // SAFETY: fork in a possibly multi-threaded caller; the child only makes
        // async-signal-safe syscalls on data prepared above and leaves by execve/_exit.
        let m = unsafe { libc::fork() };
        if m < 0 {
            return Err(err(id, "fork", bundle, io::Error::last_os_error()));
        }
        if m == 0 {
            // SAFETY: as above; this is M, which never returns.
            unsafe { become_monitor(plan) }
        }
        drop((stdio, mexec, ready_w, _init_end));
        self.wait_created(id, m, ready_r, &log, &pid_file)
    }

    /// Waits for M to exec the monitor (EOF on `ready_r`) or die, then for the pid the
    /// runtime wrote; a runtime that failed or took too long is cleaned up after.
    fn wait_created(
        &self,
        id: &str,
        m: libc::pid_t,
        ready_r: std::os::fd::OwnedFd,
        log: &Path,
        pid_file: &Path,
    ) -> Result<Created> {
        // EOF on the pipe: M exec'd the monitor, or died.
        let deadline = Instant::now() + CREATE_TIMEOUT;
        let mut ready = std::fs::File::from(ready_r);
        let mut b = [0u8; 1];
        loop {
            let mut pfd = libc::pollfd {
                fd: ready.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            };
            let left = deadline.saturating_duration_since(Instant::now());
            // SAFETY: poll on one pollfd we own.
            let rc = unsafe { libc::poll(&mut pfd, 1, left.as_millis() as libc::c_int) };
            if rc == 0 {
                // SAFETY: our own child.
                unsafe {
                    libc::kill(m, libc::SIGKILL);
                    libc::waitpid(m, std::ptr::null_mut(), 0);
                }
                let _ = self.run(id, &["delete", "--force", id]);
                return Err(err(
                    id,
                    "runtime create",
                    &self.binary,
                    io::Error::from_raw_os_error(libc::ETIMEDOUT),
                ));
            }
            if rc > 0 && matches!(ready.read(&mut b), Ok(0) | Err(_)) {
                break;
            }
        }
        let mut st = 0;
        // SAFETY: our own child, not blocking.
        let rc = unsafe { libc::waitpid(m, &mut st, libc::WNOHANG) };
        let failed = rc == m && libc::WIFEXITED(st) && matches!(libc::WEXITSTATUS(st), 1 | 127);
        if failed {
            let msg = runtime_error(log);
            let _ = self.run(id, &["delete", "--force", id]);
            return Err(err(
                id,
                "runtime create",
                &self.binary,
                io::Error::other(msg),
            ));
        }
        let pid = fs::read_to_string(pid_file)
            .ok()
            .and_then(|s| s.trim().parse::<i32>().ok())
            .ok_or_else(|| {
                err(
                    id,
                    "read pid file",
                    pid_file,
                    io::Error::other("the runtime left no pid"),
                )
            })?;
        Ok(Created { pid, monitor: m })
    }

    pub fn start(&self, id: &str) -> Result<()> {
        self.run(id, &["start", id])
    }

    /// Deletes the runtime's state of the container, killing it if it runs.
    pub fn delete(&self, id: &str) -> Result<()> {
        self.run(id, &["delete", "--force", id])?;
        for f in [format!("{id}.pid"), format!("{id}.log")] {
            let _ = fs::remove_file(self.root.join(f));
        }
        Ok(())
    }

    /// A command for `exec --process FILE --pid-file P ID` in the running container;
    /// the caller runs it (its stdio are the process's) and waits for it.
    pub fn exec_command(&self, id: &str, process_json: &Path, pid_file: &Path) -> Command {
        let mut c = Command::new(&self.binary);
        c.arg("--root")
            .arg(&self.root)
            .arg("exec")
            .arg("--process")
            .arg(process_json)
            .arg("--pid-file")
            .arg(pid_file)
            .arg(id);
        c
    }
}

/// A listening socket for `--console-socket`, removed (path and fd) when dropped.
struct ConsoleSocket {
    path: PathBuf,
    fd: std::os::fd::OwnedFd,
}

impl ConsoleSocket {
    fn bind(dir: &Path, id: &str) -> Result<ConsoleSocket> {
        // Short: a socket path has 107 bytes at most, and the state dir comes first.
        let path = dir.join(format!("{}.tty", &id[..id.len().min(12)]));
        let _ = fs::remove_file(&path);
        let l = std::os::unix::net::UnixListener::bind(&path)
            .map_err(|e| err(id, "console socket", &path, e))?;
        Ok(ConsoleSocket { path, fd: l.into() })
    }
}

impl Drop for ConsoleSocket {
    fn drop(&mut self) {
        let _ = fs::remove_file(&self.path);
    }
}

/// Mounts an overlay at `target` on the host (an external runtime needs the root file
/// system mounted in the bundle); `options` as in `lowerdir=..,upperdir=..,workdir=..`.
pub fn mount_rootfs(target: &Path, options: &[String]) -> Result<()> {
    let e = |source: io::Error| Error::Container {
        id: String::new(),
        step: "mount rootfs",
        path: target.to_path_buf(),
        source,
    };
    fs::create_dir_all(target).map_err(e)?;
    nix::mount::mount(
        Some("overlay"),
        target,
        Some("overlay"),
        nix::mount::MsFlags::empty(),
        Some(options.join(",").as_str()),
    )
    .map_err(|x| e(x.into()))
}

/// Unmounts what [`mount_rootfs`] mounted; fine if nothing is mounted.
pub fn unmount_rootfs(target: &Path) -> Result<()> {
    match nix::mount::umount2(target, nix::mount::MntFlags::MNT_DETACH) {
        Ok(()) | Err(nix::errno::Errno::EINVAL) | Err(nix::errno::Errno::ENOENT) => Ok(()),
        Err(x) => Err(Error::Container {
            id: String::new(),
            step: "unmount rootfs",
            path: target.to_path_buf(),
            source: x.into(),
        }),
    }
}

/// Reads a pid the runtime wrote (for `exec --pid-file`).
pub fn read_pid(path: &Path) -> Option<i32> {
    fs::read_to_string(path).ok()?.trim().parse().ok()
}

/// What M, the runtime's parent and then the monitor, needs after the fork, all made
/// before it.
struct MonitorFork<'a> {
    stdio: [RawFd; 3],
    argv: &'a [*const libc::c_char],
    envp: &'a [*const libc::c_char; 2],
    keep: &'a mut Vec<RawFd>,
    keep_after: &'a [RawFd],
    devnull: RawFd,
    console_fd: RawFd,
    tty_target: Option<RawFd>,
    monitor_path: *const libc::c_char,
    monitor_argv: &'a [*const libc::c_char],
    monitor_envp: &'a [*const libc::c_char; 1],
}

/// M, in the forked child: runs the runtime's `create` as its own child (a subreaper,
/// so the container's init becomes its child), takes the pty master from the console
/// socket, and becomes the monitor.
///
/// # Safety
/// Only in the child of a fork: async-signal-safe syscalls on `p`, which was prepared
/// before the fork; leaves by execve or _exit.
unsafe fn become_monitor(p: &mut MonitorFork) -> ! {
    libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0);
    let r = libc::fork();
    if r == 0 {
        for (i, fd) in p.stdio.iter().enumerate() {
            libc::dup2(*fd, i as RawFd);
        }
        close_all_but(&mut []);
        libc::execve(p.argv[0], p.argv.as_ptr(), p.envp.as_ptr());
        libc::_exit(127);
    }
    if r < 0 {
        libc::_exit(1);
    }
    close_all_but(p.keep);
    let mut st = 0;
    while libc::waitpid(r, &mut st, 0) < 0 {
        if io::Error::last_os_error().raw_os_error() != Some(libc::EINTR) {
            libc::_exit(1);
        }
    }
    if !(libc::WIFEXITED(st) && libc::WEXITSTATUS(st) == 0) {
        libc::_exit(1);
    }
    // The runtime connected to the console socket and sent the master
    // before its `create` returned: the connection waits in the backlog.
    if let (true, Some(target)) = (p.console_fd >= 0, p.tty_target) {
        let conn = libc::accept4(
            p.console_fd,
            std::ptr::null_mut(),
            std::ptr::null_mut(),
            libc::SOCK_CLOEXEC | libc::SOCK_NONBLOCK,
        );
        if conn >= 0 {
            libc::dup2(conn, target);
            libc::close(conn);
        }
    }
    for target in 0..3 {
        libc::dup2(p.devnull, target);
    }
    for f in p.keep_after {
        libc::fcntl(*f, libc::F_SETFD, 0);
    }
    libc::execve(
        p.monitor_path,
        p.monitor_argv.as_ptr(),
        p.monitor_envp.as_ptr(),
    );
    libc::_exit(127);
}
