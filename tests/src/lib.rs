//! The harness of crust's root tests: throwaway network namespaces and temp dirs that
//! clean up on drop (so also when a test panics), names unique per process and test,
//! a root check that skips loudly on a developer's laptop but fails in CI, and helpers
//! to run the built binaries.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};

static COUNTER: AtomicU32 = AtomicU32::new(0);

/// A name no other test of any running process uses: `prefix` + pid + counter, short
/// enough (at most 15 bytes for a 3-byte prefix) to be an interface name.
pub fn unique(prefix: &str) -> String {
    let n = COUNTER.fetch_add(1, Ordering::SeqCst);
    let pid = std::process::id() % 0x10_0000;
    format!("{prefix}{pid:x}x{n:x}")
}

/// True when the test may run. Without root or a needed tool it prints why and returns
/// false, unless `CI=true`: there a skipped root test is a failure.
pub fn require_root(tools: &[&str]) -> bool {
    let mut missing = Vec::new();
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        missing.push("root".to_string());
    }
    for t in tools {
        if which(t).is_none() {
            missing.push(format!("the `{t}` command"));
        }
    }
    if missing.is_empty() {
        return true;
    }
    let msg = format!("root test needs {}", missing.join(", "));
    if ci() {
        panic!("{msg}; CI must run every root test");
    }
    say_skipped(&msg);
    false
}

/// True under `CI=true` (`.ci/run` sets it): there a test that cannot run fails.
pub fn ci() -> bool {
    std::env::var("CI").is_ok_and(|v| v == "true")
}

/// Says loudly on the test runner's stdout that a test is skipped, and why. Written to
/// the stdout handle itself: what `println!` and `eprintln!` print from a test is
/// captured by libtest and shown only when the test fails, and a skipped test passes.
pub fn say_skipped(msg: &str) {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "\n!!!!! SKIPPED: {msg} !!!!!\n");
    let _ = out.flush();
}

pub fn which(cmd: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|d| d.join(cmd))
        .find(|p| p.is_file())
}

/// Where cargo put the workspace's binaries: next to the test executable's `deps/`,
/// or `CRUST_BIN_DIR` when set.
pub fn bin_dir() -> PathBuf {
    if let Some(d) = std::env::var_os("CRUST_BIN_DIR") {
        return PathBuf::from(d);
    }
    let exe = std::env::current_exe().expect("current_exe");
    let deps = exe.parent().expect("exe dir");
    if deps.file_name().map(|n| n == "deps").unwrap_or(false) {
        deps.parent().unwrap().to_path_buf()
    } else {
        deps.to_path_buf()
    }
}

/// A built binary of the workspace; panics with a hint when it was not built.
pub fn bin(name: &str) -> PathBuf {
    let p = bin_dir().join(name);
    assert!(
        p.is_file(),
        "{} not built: run `cargo build --workspace --bins` first",
        p.display()
    );
    p
}

/// Runs a command, panicking with its output if it cannot start.
pub fn run(cmd: &mut Command) -> Output {
    cmd.stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("failed to run {cmd:?}: {e}"))
}

/// Runs a command and panics unless it succeeds; returns stdout.
pub fn sh(args: &[&str]) -> String {
    let out = run(Command::new(args[0]).args(&args[1..]));
    assert!(
        out.status.success(),
        "{args:?} failed: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A named network namespace (`/run/netns/NAME`), deleted on drop with every
/// interface inside it.
pub struct Netns {
    pub name: String,
}

impl Netns {
    pub fn new(prefix: &str) -> Netns {
        let name = unique(prefix);
        sh(&["ip", "netns", "add", &name]);
        let ns = Netns { name };
        ns.sh(&["ip", "link", "set", "lo", "up"]);
        ns
    }

    pub fn path(&self) -> PathBuf {
        PathBuf::from("/run/netns").join(&self.name)
    }

    /// A command to run inside this namespace (via `ip netns exec`, fine for plugins
    /// and `ip`; see TESTING.md for why daemons use nsenter).
    pub fn cmd(&self, program: impl AsRef<std::ffi::OsStr>) -> Command {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", &self.name]).arg(program);
        c
    }

    pub fn sh(&self, args: &[&str]) -> String {
        let mut full = vec!["ip", "netns", "exec", &self.name];
        full.extend_from_slice(args);
        sh(&full)
    }

    /// Like `sh` but returns whether it succeeded instead of panicking.
    pub fn ok(&self, args: &[&str]) -> bool {
        run(self.cmd(args[0]).args(&args[1..])).status.success()
    }

    /// `ip -j ARGS` parsed.
    pub fn ip_json(&self, args: &[&str]) -> serde_json::Value {
        let mut full = vec!["ip", "-j"];
        full.extend_from_slice(args);
        let out = self.sh(&full);
        if out.trim().is_empty() {
            return serde_json::Value::Array(vec![]);
        }
        serde_json::from_str(&out).unwrap_or_else(|e| panic!("ip -j {args:?}: {e}: {out}"))
    }

    /// Names of the links in this namespace.
    pub fn links(&self) -> Vec<String> {
        self.ip_json(&["link", "show"])
            .as_array()
            .unwrap()
            .iter()
            .map(|l| l["ifname"].as_str().unwrap().to_string())
            .collect()
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = Command::new("ip")
            .args(["netns", "del", &self.name])
            .stderr(Stdio::null())
            .status();
    }
}

/// A temp dir removed on drop.
/// A temp dir removed on drop; `tmpfs` ones have a tmpfs of their own mounted on them.
pub struct TempDir(pub PathBuf, bool);

impl TempDir {
    pub fn new(tag: &str) -> TempDir {
        let p = std::env::temp_dir().join(format!("crust-test-{}", unique(tag)));
        let _ = std::fs::remove_dir_all(&p);
        std::fs::create_dir_all(&p).unwrap();
        TempDir(p, false)
    }

    /// A temp dir on a tmpfs of its own (root): where a node keeps volatile state
    /// (`/run` is a tmpfs on every distribution, so fsync there costs nothing), for
    /// benchmarks that put both daemons' state dirs where they live on a real node.
    pub fn tmpfs(tag: &str) -> TempDir {
        let mut d = TempDir::new(tag);
        let out = run(Command::new("mount")
            .args(["-t", "tmpfs", "-o", "mode=0755", "tmpfs"])
            .arg(&d.0));
        assert!(
            out.status.success(),
            "mount tmpfs on {}: {}",
            d.0.display(),
            String::from_utf8_lossy(&out.stderr)
        );
        d.1 = true;
        d
    }

    pub fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        if self.1 {
            let _ = Command::new("umount")
                .arg("-l")
                .arg(&self.0)
                .stderr(Stdio::null())
                .status();
        }
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// What a CNI plugin printed and how it exited.
#[derive(Debug)]
pub struct CniOut {
    pub code: i32,
    pub json: serde_json::Value,
    pub stdout: String,
    pub stderr: String,
}

impl CniOut {
    /// Panics unless the plugin succeeded.
    pub fn ok(self) -> serde_json::Value {
        assert_eq!(
            self.code, 0,
            "plugin failed: {}{}",
            self.stdout, self.stderr
        );
        self.json
    }
    /// Panics unless the plugin failed with this CNI error code; returns the error.
    pub fn err(self, code: u64) -> serde_json::Value {
        assert_ne!(
            self.code, 0,
            "plugin succeeded but should fail with code {code}: {}",
            self.stdout
        );
        assert_eq!(
            self.json["code"].as_u64(),
            Some(code),
            "wrong error: {}{}",
            self.stdout,
            self.stderr
        );
        assert!(
            self.json["msg"]
                .as_str()
                .map(|m| !m.is_empty())
                .unwrap_or(false),
            "error without msg"
        );
        self.json
    }
}

/// One invocation of a CNI plugin binary.
pub struct Cni<'a> {
    pub plugin: PathBuf,
    /// Run inside this (node) namespace; `None` runs in the test's own.
    pub node: Option<&'a Netns>,
    pub env: Vec<(String, String)>,
}

impl<'a> Cni<'a> {
    pub fn new(plugin: PathBuf, node: Option<&'a Netns>) -> Self {
        Cni {
            plugin,
            node,
            env: vec![],
        }
    }

    pub fn env(mut self, k: &str, v: impl AsRef<str>) -> Self {
        self.env.push((k.to_string(), v.as_ref().to_string()));
        self
    }

    /// Runs `command` with `conf` on stdin. With a node namespace the plugin is started
    /// from a thread that entered it, as a runtime runs plugins (no `ip netns exec`
    /// mount namespace, and none of its start-up cost in the benchmarks).
    pub fn call(&self, command: &str, conf: &str) -> CniOut {
        let mut c = Command::new(&self.plugin);
        c.env_clear()
            .env("PATH", std::env::var("PATH").unwrap_or_default());
        c.env("CNI_COMMAND", command);
        for (k, v) in &self.env {
            c.env(k, v);
        }
        c.stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut run = move || {
            use std::io::Write;
            let mut child = c
                .spawn()
                .unwrap_or_else(|e| panic!("spawning {}: {e}", self.plugin.display()));
            child
                .stdin
                .take()
                .unwrap()
                .write_all(conf.as_bytes())
                .unwrap();
            child.wait_with_output().unwrap()
        };
        let out = match self.node {
            None => run(),
            Some(ns) => std::thread::scope(|s| {
                s.spawn(|| {
                    enter_netns(&ns.path());
                    run()
                })
                .join()
                .expect("plugin runner thread panicked")
            }),
        };
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        let json = if stdout.trim().is_empty() {
            serde_json::Value::Null
        } else {
            serde_json::from_str(&stdout)
                .unwrap_or_else(|e| panic!("plugin printed non-JSON ({e}): {stdout}"))
        };
        CniOut {
            code: out.status.code().unwrap_or(-1),
            json,
            stdout,
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        }
    }
}

/// Moves the calling thread into the network namespace at `path`. Only for threads
/// made for that purpose: they never come back.
pub fn enter_netns(path: &Path) {
    use std::os::fd::AsRawFd;
    let f = std::fs::File::open(path).unwrap_or_else(|e| panic!("open {}: {e}", path.display()));
    // SAFETY: setns on an fd we own; affects only this thread.
    let rc = unsafe { libc::setns(f.as_raw_fd(), libc::CLONE_NEWNET) };
    assert_eq!(
        rc,
        0,
        "setns {}: {}",
        path.display(),
        std::io::Error::last_os_error()
    );
}

/// The standard env of an ADD/DEL/CHECK for one attachment.
pub fn attachment_env<'a>(
    cni: Cni<'a>,
    container_id: &str,
    netns: &str,
    ifname: &str,
    cni_path: &Path,
) -> Cni<'a> {
    cni.env("CNI_CONTAINERID", container_id)
        .env("CNI_NETNS", netns)
        .env("CNI_IFNAME", ifname)
        .env("CNI_PATH", cni_path.to_string_lossy())
}

/// Files in a host-local network dir other than `lock`, sorted.
pub fn ip_files(data_dir: &Path, network: &str) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(data_dir.join(network))
        .map(|rd| {
            rd.filter_map(|e| e.ok())
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    v.retain(|n| n != "lock" && !n.starts_with("last_reserved_ip"));
    v.sort();
    v
}

/// A plugin of Debian's `containernetworking-plugins` (`/usr/lib/cni/NAME`), the reference
/// crust's plugins are compared with. When it is missing this says so loudly and returns
/// `None`, unless `CI=true`: there a skipped comparison is a failure.
pub fn reference_plugin(name: &str) -> Option<PathBuf> {
    let p = Path::new("/usr/lib/cni").join(name);
    if p.is_file() {
        return Some(p);
    }
    let msg = format!(
        "test needs the reference plugin {} (apt-get install -y containernetworking-plugins)",
        p.display()
    );
    if ci() {
        panic!("{msg}; CI must run every comparison");
    }
    say_skipped(&msg);
    None
}

/// The cgroup path of process `pid` (`"self"` for this one) for `controller` as
/// `/proc/PID/cgroup` lists it: the v1 line naming the controller, else the unified
/// `0::` line; `controller == ""` asks for the `0::` line. Parsed here, independently of
/// the `cgroups` crate, so tests can check it.
pub fn proc_cgroup(pid: &str, controller: &str) -> Option<String> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).ok()?;
    let mut unified = None;
    for line in text.lines() {
        let mut f = line.splitn(3, ':');
        let (_, ctrls, path) = (f.next()?, f.next()?, f.next()?);
        if ctrls.is_empty() {
            unified = Some(path.to_string());
        } else if !controller.is_empty() && ctrls.split(',').any(|c| c == controller) {
            return Some(path.to_string());
        }
    }
    unified
}
pub mod attach;

/// Writes `contents` to `path` as an executable (mode 0755) without this process ever
/// holding a write fd of it: `sh` writes it. A write fd open here while another test
/// thread forks lives on in that child until it execs (O_CLOEXEC only closes it then),
/// and meanwhile `execve` of the file fails with ETXTBSY ("Text file busy"), which is
/// how a hook or plugin test failed now and then when written with `std::fs::write`.
pub fn write_executable(path: &Path, contents: impl AsRef<[u8]>) {
    use std::io::Write;
    let mut child = Command::new("sh")
        .args(["-c", "cat >\"$0\" && chmod 755 \"$0\""])
        .arg(path)
        .stdin(std::process::Stdio::piped())
        .spawn()
        .expect("spawn sh to write an executable");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(contents.as_ref())
        .unwrap();
    let status = child.wait().unwrap();
    assert!(status.success(), "writing {}: {status}", path.display());
}

/// The last `n` lines of `text` (a daemon's log in a failure message).
pub fn tail(text: &str, n: usize) -> String {
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

/// Sends `sig` to our child `c` unless it has been reaped already (a `try_wait` that
/// saw it end): a reaped child's pid is free, and on a busy machine (pid_max 32768, a
/// build beside) soon another process's, or a thread's of a Go daemon, which kill(2)
/// reaches as its whole process. A child that ends after the check stays a zombie
/// until reaped, so its pid cannot be reused in between.
pub fn signal_child(c: &mut std::process::Child, sig: i32) {
    if let Ok(None) = c.try_wait() {
        // SAFETY: our own child, not reaped (just checked).
        unsafe { libc::kill(c.id() as i32, sig) };
    }
}

/// The parent pid of process `pid`, from `/proc/PID/stat`; panics when it is gone.
pub fn parent_of(pid: i64) -> i64 {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .unwrap()
        .rsplit_once(')')
        .unwrap()
        .1
        .split_whitespace()
        .nth(1)
        .unwrap()
        .parse()
        .unwrap()
}

/// One HTTP/1.1 request, as the tests' small servers read it (token_server.rs,
/// header_proxy.rs): the request line as sent, the headers with their names as sent,
/// and the body (by Content-Length).
pub struct HttpRequest {
    pub line: String,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl HttpRequest {
    /// The next request on `r`; None when the connection ends or breaks.
    pub fn read(r: &mut impl std::io::BufRead) -> Option<HttpRequest> {
        let mut line = String::new();
        if r.read_line(&mut line).unwrap_or(0) == 0 {
            return None;
        }
        let mut headers = Vec::new();
        loop {
            let mut h = String::new();
            if r.read_line(&mut h).unwrap_or(0) == 0 {
                return None;
            }
            let h = h.trim_end();
            if h.is_empty() {
                break;
            }
            if let Some((k, v)) = h.split_once(':') {
                headers.push((k.trim().to_string(), v.trim().to_string()));
            }
        }
        let mut req = HttpRequest {
            line,
            headers,
            body: vec![],
        };
        let len: usize = req
            .header("content-length")
            .and_then(|v| v.parse().ok())
            .unwrap_or(0);
        req.body = vec![0; len];
        r.read_exact(&mut req.body).ok()?;
        Some(req)
    }

    /// The first value of header `name`, whatever its case.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}
pub mod bundle;
pub mod cluster;
pub mod conformance;
pub mod containerd;
pub mod cri;
pub mod crustd;
pub mod fleet;
pub mod header_proxy;
pub mod kube_shim;
pub mod prometheus;
pub mod registry;
pub mod terminal;
pub mod token_server;

/// Builds a root file system of busybox-static under `dir`: `bin/busybox` and one
/// symlink `bin/APPLET -> busybox` per applet. Panics (with the package to install)
/// when the `busybox` on `PATH` is dynamically linked: a container has no libc.
pub fn busybox_rootfs(dir: &Path, applets: &[&str]) {
    let busybox = which("busybox").expect("busybox on PATH (apt-get install -y busybox-static)");
    let bytes = std::fs::read(&busybox).unwrap();
    assert!(
        !elf_has_interpreter(&bytes),
        "{} is dynamically linked: apt-get install -y busybox-static",
        busybox.display()
    );
    let bin = dir.join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    std::fs::copy(&busybox, bin.join("busybox")).unwrap();
    for a in applets {
        std::os::unix::fs::symlink("busybox", bin.join(a)).unwrap();
    }
}

/// True when a 64-bit little-endian ELF file names a program interpreter (`PT_INTERP`),
/// i.e. is dynamically linked.
fn elf_has_interpreter(elf: &[u8]) -> bool {
    let u16_at = |o: usize| u16::from_le_bytes([elf[o], elf[o + 1]]) as usize;
    if elf.len() < 64 || &elf[..4] != b"\x7fELF" {
        return false;
    }
    let phoff = u64::from_le_bytes(elf[0x20..0x28].try_into().unwrap()) as usize;
    let (phentsize, phnum) = (u16_at(0x36), u16_at(0x38));
    (0..phnum).any(|i| {
        let o = phoff + i * phentsize;
        elf.get(o..o + 4) == Some(&3u32.to_le_bytes()[..])
    })
}

/// Runs `teardown` and exits with 128 + the signal when one of `signals` (the set
/// [`block_signals`] blocked) comes: a suite interrupted by Ctrl-C or a CI timeout's
/// SIGTERM leaves nothing behind.
pub fn on_signal(
    signals: libc::sigset_t,
    suite: &'static str,
    teardown: impl FnOnce() + Send + 'static,
) {
    std::thread::spawn(move || {
        let mut sig = 0;
        // SAFETY: waits for one of the signals every thread blocks.
        unsafe { libc::sigwait(&signals, &mut sig) };
        eprintln!("{suite}: signal {sig}: tearing down");
        teardown();
        std::process::exit(128 + sig);
    });
}

/// Blocks SIGINT, SIGTERM and SIGHUP in this thread and every thread it starts, for a
/// thread of its own to wait for. Children inherit the mask: the cluster's daemons are
/// started with it cleared (`Cluster::spawn_logged`).
pub fn block_signals() -> libc::sigset_t {
    // SAFETY: plain signal-set calls on a local set, before any other thread exists.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        for sig in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP] {
            libc::sigaddset(&mut set, sig);
        }
        libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
        set
    }
}
