//! A `crustd` for one test: its own node network namespace with a CNI config for
//! crust's bridge, temp root and state dirs, a socket, and pod cgroups nested under the
//! test's own cgroup. Dropping it removes every pod through CRI, kills the daemon, and
//! then clears by force whatever is still there (mounts under its state dir, pause
//! processes, cgroups), so a failing test leaves nothing behind.

use crate::{bin, bin_dir, enter_netns, run, unique, Netns, TempDir};
use cgroups::{CgroupManager, CgroupPath, Hierarchy};
use cri_api::{ImageServiceClient, RuntimeServiceClient};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use tonic::transport::Channel;

pub struct Options {
    /// Write a CNI config list into the conf dir before starting.
    pub cni_conf: bool,
    /// Third octet of the pod subnet `10.<n>.0.0/24` (and `fd00:<n>::/64`).
    pub subnet: u8,
    pub extra_args: Vec<String>,
    /// The state dir (`--state`) on a tmpfs of its own, as `/run` is on a node (the
    /// benchmarks; tests keep it on disk, which costs them only time).
    pub state_on_tmpfs: bool,
    /// More environment for the daemon (the crash suite's `CRUST_FAILPOINT`); `spawn`
    /// reads it each time, so a restart can go without.
    pub env: Vec<(String, String)>,
    /// `--cni-bin-dir`s in order; empty: the workspace's built plugins alone.
    pub cni_bin_dirs: Vec<PathBuf>,
    /// `cgroup.driver = "systemd"`: pods and containers as systemd units, named from
    /// the top of the tree (no `--cgroup-root`, not nested in the test's cgroup).
    /// Needs systemd as PID 1 (hack/vm-test's systemd boot).
    pub systemd_cgroups: bool,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            cni_conf: true,
            subnet: 66,
            extra_args: vec![],
            state_on_tmpfs: false,
            env: vec![],
            cni_bin_dirs: vec![],
            systemd_cgroups: false,
        }
    }
}

pub struct Crustd {
    pub node: Netns,
    pub root: TempDir,
    pub state: TempDir,
    pub conf_dir: TempDir,
    pub ipam_data: TempDir,
    pub socket: PathBuf,
    pub bridge: String,
    pub cgroup_root: String,
    pub log: PathBuf,
    pub opts: Options,
    /// What `spawn` writes to the file it passes as `--config` (empty: every default).
    pub config_toml: String,
    child: Option<Child>,
}

impl Crustd {
    pub fn start() -> Crustd {
        Self::start_with(Options::default())
    }

    pub fn start_with(opts: Options) -> Crustd {
        let mut d = Self::prepare(opts);
        d.spawn();
        d
    }

    /// Starts crustd with `toml` as its config file (flags still override it).
    pub fn start_with_config(opts: Options, toml: &str) -> Crustd {
        let mut d = Self::prepare(opts);
        d.config_toml = toml.to_string();
        d.spawn();
        d
    }

    /// Everything `start_with` makes, without starting the daemon.
    fn prepare(opts: Options) -> Crustd {
        let root = TempDir::new("cr");
        let log = root.path().join("crustd.log");
        let state = if opts.state_on_tmpfs {
            TempDir::tmpfs("cs")
        } else {
            TempDir::new("cs")
        };
        let d = Crustd {
            node: Netns::new("cn"),
            socket: state.path().join("crust.sock"),
            root,
            state,
            conf_dir: TempDir::new("cc"),
            ipam_data: TempDir::new("ci"),
            bridge: unique("cb"),
            cgroup_root: format!("/{}", unique("crust-e2e-")),
            log,
            opts,
            config_toml: String::new(),
            child: None,
        };
        if d.opts.cni_conf {
            d.write_cni_conf();
        }
        d
    }

    pub fn cni_conf(&self) -> serde_json::Value {
        let n = self.opts.subnet;
        serde_json::json!({
            "cniVersion": "1.0.0",
            "name": "crust-e2e",
            "plugins": [{
                "type": "bridge",
                "bridge": self.bridge,
                "isGateway": true,
                "ipMasq": true,
                "ipam": {
                    "type": "host-local",
                    "dataDir": self.ipam_data.path(),
                    "ranges": [[{"subnet": format!("10.{n}.0.0/24")}], [{"subnet": format!("fd00:{n}::/64")}]],
                    "routes": [{"dst": "0.0.0.0/0"}, {"dst": "::/0"}]
                }
            }]
        })
    }

    pub fn write_cni_conf(&self) {
        std::fs::write(
            self.conf_dir.path().join("10-e2e.conflist"),
            self.cni_conf().to_string(),
        )
        .unwrap();
    }

    /// Starts the daemon inside the node namespace (from a thread that entered it, as
    /// TESTING.md asks: `ip netns exec` would hide /sys/fs/cgroup) and waits for its socket.
    pub fn spawn(&mut self) {
        assert!(self.child.is_none(), "crustd already running");
        let mut cmd = Command::new(bin("crustd"));
        cmd.arg("--config")
            .arg(self.root.path().join("no-config.toml"))
            .arg("--root")
            .arg(self.root.path())
            .arg("--state")
            .arg(self.state.path())
            .arg("--cni-conf-dir")
            .arg(self.conf_dir.path())
            .args(self.cni_bin_args());
        if !self.opts.systemd_cgroups {
            cmd.arg("--cgroup-root")
                .arg(&self.cgroup_root)
                .arg("--cgroup-nested");
        }
        cmd.arg("--log-level")
            .arg("debug")
            .args(&self.opts.extra_args)
            .envs(self.opts.env.iter().map(|(k, v)| (k, v)));
        // An explicit --config must exist: give it an empty one unless asked otherwise.
        let mut config = self.config_toml.clone();
        if self.opts.systemd_cgroups {
            config = format!("[cgroup]\ndriver = \"systemd\"\n{config}");
        }
        std::fs::write(self.root.path().join("no-config.toml"), config).unwrap();
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)
            .unwrap();
        cmd.stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log);
        let node = self.node.path();
        let child = std::thread::scope(|s| {
            s.spawn(|| {
                enter_netns(&node);
                cmd.spawn().expect("spawning crustd")
            })
            .join()
            .unwrap()
        });
        self.child = Some(child);
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if std::os::unix::net::UnixStream::connect(&self.socket).is_ok() {
                return;
            }
            if let Some(c) = self.child.as_mut() {
                if let Ok(Some(st)) = c.try_wait() {
                    self.child = None;
                    panic!(
                        "crustd exited with {st} before serving:\n{}",
                        self.log_text()
                    );
                }
            }
            assert!(
                Instant::now() < deadline,
                "crustd did not serve within 20 s:\n{}",
                self.log_text()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn cni_bin_args(&self) -> Vec<std::ffi::OsString> {
        let dirs = if self.opts.cni_bin_dirs.is_empty() {
            vec![bin_dir()]
        } else {
            self.opts.cni_bin_dirs.clone()
        };
        dirs.into_iter()
            .flat_map(|d| ["--cni-bin-dir".into(), d.into_os_string()])
            .collect()
    }

    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(|c| c.id())
    }

    /// SIGKILL, as a crash: nothing of crustd's shutdown runs.
    pub fn kill9(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Waits up to `timeout` for the daemon to exit by itself: how it ended, or `None`
    /// when it still runs (or was not running).
    pub fn wait_exit(&mut self, timeout: Duration) -> Option<std::process::ExitStatus> {
        let deadline = Instant::now() + timeout;
        while let Some(c) = self.child.as_mut() {
            if let Ok(Some(st)) = c.try_wait() {
                self.child = None;
                return Some(st);
            }
            if Instant::now() >= deadline {
                return None;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        None
    }

    /// SIGTERM and wait, as an operator's restart does.
    pub fn terminate(&mut self) {
        if let Some(mut c) = self.child.take() {
            crate::signal_child(&mut c, libc::SIGTERM);
            let _ = c.wait();
        }
    }

    pub fn running(&mut self) -> bool {
        match self.child.as_mut() {
            Some(c) => c.try_wait().map(|s| s.is_none()).unwrap_or(false),
            None => false,
        }
    }

    pub async fn client(&self) -> RuntimeServiceClient<Channel> {
        RuntimeServiceClient::new(
            cri_api::connect_unix(&self.socket)
                .await
                .expect("connecting to crustd"),
        )
    }

    pub async fn images(&self) -> ImageServiceClient<Channel> {
        ImageServiceClient::new(
            cri_api::connect_unix(&self.socket)
                .await
                .expect("connecting to crustd"),
        )
    }

    /// The pinned namespace of a sandbox, e.g. `pin(id, "net")`.
    pub fn pin(&self, id: &str, kind: &str) -> PathBuf {
        self.state.path().join("sandboxes").join(id).join(kind)
    }

    /// The pod files (hostname, hosts, resolv.conf) of a sandbox.
    pub fn pod_file(&self, id: &str, name: &str) -> PathBuf {
        self.root.path().join("sandboxes").join(id).join(name)
    }

    /// The cgroup hierarchy the daemon's pods live in (nested in the test's own).
    pub fn cgroups(&self) -> Hierarchy {
        Hierarchy::detect().unwrap().nested_in_own_cgroup().unwrap()
    }

    /// Every cgroup directory under the daemon's cgroup root, in every hierarchy.
    pub fn cgroup_dirs(&self) -> Vec<PathBuf> {
        let h = self.cgroups();
        let root = CgroupPath::new(&self.cgroup_root).unwrap();
        let mut out = Vec::new();
        for d in h.dirs(&root) {
            walk_dirs(&d, &mut out);
        }
        out
    }

    /// Mount points under the state dir (namespace pins).
    pub fn mounts(&self) -> Vec<String> {
        mounts_under(self.state.path())
    }

    fn cleanup_through_cri(&mut self) {
        if !self.running() {
            self.kill9();
            if std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| self.spawn())).is_err() {
                return;
            }
        }
        let socket = self.socket.clone();
        let _ = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            rt.block_on(async move {
                let Ok(ch) = cri_api::connect_unix(&socket).await else {
                    return;
                };
                let mut c = RuntimeServiceClient::new(ch);
                let Ok(list) = c
                    .list_pod_sandbox(cri_api::ListPodSandboxRequest::default())
                    .await
                else {
                    return;
                };
                for sb in list.into_inner().items {
                    let _ = c
                        .stop_pod_sandbox(cri_api::StopPodSandboxRequest {
                            pod_sandbox_id: sb.id.clone(),
                        })
                        .await;
                    let _ = c
                        .remove_pod_sandbox(cri_api::RemovePodSandboxRequest {
                            pod_sandbox_id: sb.id,
                        })
                        .await;
                }
            })
        })
        .join();
    }

    fn cleanup_by_force(&self) {
        // Pause processes named in records.
        if let Ok(rd) = std::fs::read_dir(self.root.path().join("sandboxes")) {
            for e in rd.flatten() {
                let Ok(b) = std::fs::read(e.path().join("record.json")) else {
                    continue;
                };
                let Ok(v) = serde_json::from_slice::<serde_json::Value>(&b) else {
                    continue;
                };
                if let Some(pid) = v["pause"]["pid"].as_i64() {
                    let start = v["pause"]["start_time"].as_u64().unwrap_or(0);
                    if container::pause::alive(pid as i32, start) {
                        // SAFETY: killing a pause process this test's daemon started.
                        unsafe { libc::kill(pid as i32, libc::SIGKILL) };
                    }
                }
            }
        }
        for m in self.mounts().iter().rev() {
            let c = std::ffi::CString::new(m.as_str()).unwrap();
            // SAFETY: lazy unmount of a pin under our own temp dir.
            unsafe { libc::umount2(c.as_ptr(), libc::MNT_DETACH) };
        }
        let h = self.cgroups();
        let mut dirs = self.cgroup_dirs();
        dirs.sort_by_key(|d| std::cmp::Reverse(d.components().count()));
        for d in &dirs {
            if let Ok(procs) = std::fs::read_to_string(d.join("cgroup.procs")) {
                for p in procs.lines().filter_map(|l| l.trim().parse::<i32>().ok()) {
                    // SAFETY: killing what is left in a cgroup this test created.
                    unsafe { libc::kill(p, libc::SIGKILL) };
                }
            }
        }
        let root = CgroupPath::new(&self.cgroup_root).unwrap();
        let deadline = Instant::now() + Duration::from_secs(3);
        while h.exists(&root) && Instant::now() < deadline {
            for d in &dirs {
                let _ = std::fs::remove_dir(d);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

/// Every directory at or below `d`, parents first.
pub fn walk_dirs(d: &Path, out: &mut Vec<PathBuf>) {
    if !d.is_dir() {
        return;
    }
    out.push(d.to_path_buf());
    if let Ok(rd) = std::fs::read_dir(d) {
        for e in rd.flatten() {
            if e.file_type().map(|t| t.is_dir()).unwrap_or(false) {
                walk_dirs(&e.path(), out);
            }
        }
    }
}

/// Mount points at or below `dir`, from /proc/self/mountinfo. (Matched by path
/// component: `/tmp/x1` must not take `/tmp/x17`'s mounts.)
pub fn mounts_under(dir: &Path) -> Vec<String> {
    let dir = dir.to_string_lossy().to_string();
    let prefix = format!("{}/", dir.trim_end_matches('/'));
    std::fs::read_to_string("/proc/self/mountinfo")
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.split_whitespace().nth(4).map(str::to_string))
        .filter(|m| *m == dir || m.starts_with(&prefix))
        .collect()
}

impl Drop for Crustd {
    fn drop(&mut self) {
        self.cleanup_through_cri();
        self.kill9();
        self.cleanup_by_force();
    }
}

/// What a sandbox can leave behind, counted for one daemon: compare a snapshot taken
/// before a failing call with one taken after to prove the call left nothing.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Leftovers {
    /// Mount points (namespace pins) under the state dir.
    pub mounts: Vec<String>,
    /// Entries under `<state>/sandboxes` (pin folders).
    pub pin_dirs: Vec<String>,
    /// Entries under `<root>/sandboxes` (records and pod files).
    pub records: Vec<String>,
    /// Host ends of pod veths (`veth*`) in the node namespace.
    pub veths: Vec<String>,
    /// Reserved addresses in the host-local data dir of the `crust-e2e` network.
    pub ip_files: Vec<String>,
    /// Processes running this daemon's pause binary.
    pub pauses: Vec<i32>,
    /// Pod cgroups (dirs named like a sandbox id) under the daemon's cgroup root.
    pub pod_cgroups: Vec<PathBuf>,
    /// nftables masquerade rules of the bridge plugin in the node namespace.
    pub masq_rules: usize,
}

/// The names in `dir`, sorted (none if it cannot be read).
pub fn dir_names(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .map(|rd| {
            rd.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    v.sort();
    v
}

/// Pids of the live processes whose executable is `bin`.
pub fn pids_running(bin: &Path) -> Vec<i32> {
    let mut v: Vec<i32> = std::fs::read_dir("/proc")
        .map(|rd| {
            rd.flatten()
                .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
                .filter(|pid| {
                    std::fs::read_link(format!("/proc/{pid}/exe"))
                        .ok()
                        .as_deref()
                        == Some(bin)
                })
                .collect()
        })
        .unwrap_or_default();
    v.sort();
    v
}

/// True for a 64-hex-digit name, the shape of a sandbox id.
pub fn is_sandbox_id(name: &str) -> bool {
    name.len() == 64 && name.bytes().all(|b| b.is_ascii_hexdigit())
}

impl Crustd {
    /// The pause binary this daemon installed (`<state>/bin/crust-pause`).
    pub fn pause_bin(&self) -> PathBuf {
        self.state.path().join("bin").join("crust-pause")
    }

    /// Pids of the live processes running this daemon's pause binary.
    pub fn pause_pids(&self) -> Vec<i32> {
        pids_running(&self.pause_bin())
    }

    /// The monitor binary this daemon installed (`<state>/bin/crust-monitor`).
    pub fn monitor_bin(&self) -> PathBuf {
        self.state.path().join("bin").join("crust-monitor")
    }

    /// Pids of the live processes running this daemon's monitor binary.
    pub fn monitor_pids(&self) -> Vec<i32> {
        pids_running(&self.monitor_bin())
    }

    /// Links named `veth*` in the node namespace.
    pub fn veths(&self) -> Vec<String> {
        let mut v: Vec<String> = self
            .node
            .links()
            .into_iter()
            .filter(|l| l.starts_with("veth"))
            .collect();
        v.sort();
        v
    }

    /// Asserts that nothing is left of the pods and containers removed through the CRI:
    /// [`Crustd::leftovers`] as `empty` counted them before anything was made, and no
    /// container folder (root and state), snapshot, monitor process, or mount under the
    /// root dir. `what` names the test in the failure. (The image store's layers and
    /// blobs are the caller's: they stay until RemoveImage.)
    pub fn assert_clean(&self, empty: &Leftovers, what: &str) {
        let left = self.leftovers();
        assert_eq!(&left, empty, "{what}: left behind\n{}", self.log_text());
        let root = self.root.path();
        let state = self.state.path();
        for dir in [
            root.join("containers"),
            state.join("containers"),
            root.join("images/snapshots"),
        ] {
            assert_eq!(
                dir_names(&dir),
                Vec::<String>::new(),
                "{what}: left in {}",
                dir.display()
            );
        }
        assert_eq!(
            self.monitor_pids(),
            Vec::<i32>::new(),
            "{what}: monitors left"
        );
        assert_eq!(
            mounts_under(root),
            Vec::<String>::new(),
            "{what}: mounts left under the root dir"
        );
    }

    /// Asserts that READY pod `id` is whole after a crash: it has an address (`ips`,
    /// the primary first), each reserved in host-local's store as `left` counted it,
    /// and its network namespace pinned. `what` names the test in the failure.
    pub fn assert_ready_pod_whole(&self, left: &Leftovers, id: &str, ips: &[&str], what: &str) {
        assert!(
            ips.first().is_some_and(|ip| !ip.is_empty()),
            "{what}: READY pod {id} without an IP"
        );
        for ip in ips {
            assert!(
                left.ip_files.iter().any(|f| f == ip),
                "{what}: READY pod {id}'s address {ip} is not reserved"
            );
        }
        assert!(
            self.pin(id, "net").exists(),
            "{what}: READY pod {id} without its netns pin"
        );
    }

    /// Everything that could leak, counted now.
    pub fn leftovers(&self) -> Leftovers {
        let mut pod_cgroups: Vec<PathBuf> = self
            .cgroup_dirs()
            .into_iter()
            .filter(|d| {
                d.file_name()
                    .and_then(|n| n.to_str())
                    .is_some_and(is_sandbox_id)
            })
            .collect();
        pod_cgroups.sort();
        let nft = run(self
            .node
            .cmd("nft")
            .args(["list", "table", "inet", "crust_cni"]));
        let masq_rules = String::from_utf8_lossy(&nft.stdout)
            .lines()
            .filter(|l| l.contains("masquerade"))
            .count();
        Leftovers {
            mounts: self.mounts(),
            pin_dirs: dir_names(&self.state.path().join("sandboxes")),
            records: dir_names(&self.root.path().join("sandboxes")),
            veths: self.veths(),
            ip_files: crate::ip_files(self.ipam_data.path(), "crust-e2e"),
            pauses: self.pause_pids(),
            pod_cgroups,
            masq_rules,
        }
    }
}
