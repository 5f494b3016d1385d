//! The cluster's processes: commands in the node's namespaces, daemons spawned with a log
//! of their own (and their memory cgroup), stopped with a grace period; commands run
//! with a deadline, and polling with one.

use super::Cluster;
use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

/// The log of daemon `name`: `logs/<name>.log` in the cluster's `dir`, appended to.
fn log_file(dir: &Path, name: &str) -> std::fs::File {
    std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(dir.join("logs").join(format!("{name}.log")))
        .unwrap()
}

/// SIGTERM to our child `c`, SIGKILL once `grace` has passed: its exit status if it
/// ended by itself in time.
pub(crate) fn stop_child(mut c: Child, grace: Duration) -> Option<std::process::ExitStatus> {
    crate::signal_child(&mut c, libc::SIGTERM);
    let deadline = Instant::now() + grace;
    while Instant::now() < deadline {
        if let Ok(Some(st)) = c.try_wait() {
            return Some(st);
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let _ = c.kill();
    let _ = c.wait();
    None
}

/// Runs `cmd`, killing it after `limit`: (exit status or None when killed, stdout,
/// stderr).
pub fn run_timeout(cmd: &mut Command, limit: Duration) -> Output {
    run_timeout_input(cmd, None, limit)
}

/// [`run_timeout`] with `input` on the command's stdin (then closed), or none. The
/// deadline is kept by polling `try_wait`, never by a timer thread's kill(2): a child
/// reaped just before such a kill leaves its pid to whatever process takes it next.
pub fn run_timeout_input(cmd: &mut Command, input: Option<&[u8]>, limit: Duration) -> Output {
    use std::io::{Read, Write};
    let mut child = cmd
        .stdin(if input.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("failed to run {cmd:?}: {e}"));
    if let (Some(mut stdin), Some(input)) = (child.stdin.take(), input) {
        let input = input.to_vec();
        std::thread::spawn(move || {
            let _ = stdin.write_all(&input);
        });
    }
    let mut out = child.stdout.take().unwrap();
    let mut err = child.stderr.take().unwrap();
    let o = std::thread::spawn(move || {
        let mut v = Vec::new();
        let _ = out.read_to_end(&mut v);
        v
    });
    let e = std::thread::spawn(move || {
        let mut v = Vec::new();
        let _ = err.read_to_end(&mut v);
        v
    });
    let deadline = Instant::now() + limit;
    let status = loop {
        if let Some(st) = child.try_wait().unwrap() {
            break st;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            break child.wait().unwrap();
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    Output {
        status,
        stdout: o.join().unwrap(),
        stderr: e.join().unwrap(),
    }
}

/// Polls `f` every `every` until it returns `Some` or `limit` passes; on timeout
/// panics with `what` and the last value `f` described through `last`.
pub fn wait_for<T>(what: &str, limit: Duration, mut f: impl FnMut(&mut String) -> Option<T>) -> T {
    let deadline = Instant::now() + limit;
    let mut last = String::new();
    loop {
        if let Some(v) = f(&mut last) {
            return v;
        }
        assert!(
            Instant::now() < deadline,
            "timed out after {limit:?} waiting for {what}; last seen: {last}"
        );
        std::thread::sleep(Duration::from_millis(300));
    }
}

pub(super) fn s(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

impl Cluster {
    /// A command in the node's network namespace (the host's mounts: for clients).
    pub fn net_cmd(&self, program: impl AsRef<std::ffi::OsStr>) -> Command {
        let mut c = Command::new("nsenter");
        c.arg(format!("--net={}", self.node.path().display()))
            .arg("--")
            .arg(program);
        c
    }

    /// A command in the node's network and mount namespaces (crustd, the kubelet,
    /// crictl).
    pub fn node_cmd(&self, program: impl AsRef<std::ffi::OsStr>) -> Command {
        let holder = self.holder_pid;
        assert_ne!(holder, 0, "no mount namespace yet");
        let mut c = Command::new("nsenter");
        c.arg(format!("--mount=/proc/{holder}/ns/mnt"))
            .arg(format!("--net={}", self.node.path().display()))
            .arg("--")
            .arg(program);
        c
    }

    /// The node daemons that have ended though nobody stopped them, each as "NAME exited
    /// (STATUS); its log ends: ..." (its last 30 lines). A suite's failures after a
    /// daemon died say so, with why, where its logs are not kept (CI prints the output).
    pub fn exited_daemons(&self) -> Vec<String> {
        let slots: [(&str, &std::sync::Mutex<Option<Child>>); 7] = [
            ("kubelet", &self.kubelet),
            ("crustd", &self.crustd),
            ("crustlet", &self.crustlet),
            ("crustlet-crustd", &self.crustlet_crustd),
            ("containerd", &self.containerd),
            ("ctrdlet", &self.containerd_crustlet),
            ("kube-proxy", &self.kube_proxy),
        ];
        let mut out = Vec::new();
        for (name, slot) in slots {
            let mut guard = slot.lock().unwrap();
            let Some(Ok(Some(st))) = guard.as_mut().map(|c| c.try_wait()) else {
                continue;
            };
            let tail = crate::tail(&self.log(name), 30);
            out.push(format!("{name} exited ({st}); its log ends:\n{tail}"));
        }
        out
    }

    /// [`Cluster::spawn_logged`] of a daemon serving on unix socket `socket`: returns
    /// once it accepts there (30 s at most; its log in the panic if it exits first).
    pub(crate) fn spawn_serving(&self, cmd: Command, name: &str, socket: &Path) -> Child {
        let mut child = self.spawn_logged(cmd, name);
        let deadline = Instant::now() + Duration::from_secs(30);
        while std::os::unix::net::UnixStream::connect(socket).is_err() {
            if let Ok(Some(st)) = child.try_wait() {
                panic!("{name} exited with {st}: {}", self.log(name));
            }
            assert!(Instant::now() < deadline, "{name} did not serve in 30 s");
            std::thread::sleep(Duration::from_millis(50));
        }
        child
    }

    pub(crate) fn spawn_logged(&self, mut cmd: Command, name: &str) -> Child {
        let log = log_file(self.dir.path(), name);
        if let Some(dir) = self.agent_cgroup(name) {
            super::agent_cgroups::join_on_exec(&mut cmd, dir);
        }
        // The suite blocks SIGTERM, SIGINT and SIGHUP in its threads (for its own signal
        // thread), and a child inherits that mask through exec: a daemon must get them
        // unblocked, or SIGTERM (stop_kubelet, stop_crustlet) is never delivered.
        // SAFETY: only async-signal-safe calls between fork and exec.
        unsafe {
            use std::os::unix::process::CommandExt;
            cmd.pre_exec(|| {
                let mut set: libc::sigset_t = std::mem::zeroed();
                libc::sigemptyset(&mut set);
                libc::pthread_sigmask(libc::SIG_SETMASK, &set, std::ptr::null_mut());
                Ok(())
            });
        }
        cmd.stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .unwrap_or_else(|e| panic!("spawning {name}: {e}"))
    }
}
