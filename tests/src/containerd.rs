//! containerd 1.6 + runc running offline in a node network namespace of its own, for
//! the side-by-side benchmarks and the tests that compare crust with containerd: its
//! config (own root, state on a tmpfs, runc, the reference CNI plugins), a pause image
//! holding crust's pause binary imported as its sandbox image, and a cleanup on drop
//! (pods through CRI, then shims, pod cgroups, mounts, shim sockets) that also runs
//! when a test panics. Plus the CRI call wrapper and readiness wait both daemons use.

use crate::crustd::walk_dirs;
use crate::{enter_netns, unique, which, Netns, TempDir};
use cri_api::*;
use std::future::Future;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

pub const PAUSE_IMAGE: &str = "localhost/crust-bench/pause:1";
pub const RPC_TIMEOUT: Duration = Duration::from_secs(60);
pub const SHIM_SOCKET_DIR: &str = "/run/containerd/s";

// ---------------------------------------------------------------------------------
// CRI calls

pub async fn rpc<T>(
    what: &str,
    f: impl Future<Output = Result<tonic::Response<T>, tonic::Status>>,
) -> Result<T, String> {
    match tokio::time::timeout(RPC_TIMEOUT, f).await {
        Ok(Ok(r)) => Ok(r.into_inner()),
        Ok(Err(s)) => Err(format!("{what}: {:?}: {}", s.code(), s.message())),
        Err(_) => Err(format!("{what}: no answer within {RPC_TIMEOUT:?}")),
    }
}

/// Waits until the daemon reports RuntimeReady and NetworkReady.
pub async fn wait_ready(socket: &Path, timeout: Duration) -> Result<(), String> {
    let deadline = Instant::now() + timeout;
    let mut last = String::from("no answer");
    while Instant::now() < deadline {
        if let Ok(ch) = cri_api::connect_unix(socket).await {
            let mut c = RuntimeServiceClient::new(ch);
            match rpc("Status", c.status(StatusRequest { verbose: false })).await {
                Ok(st) => {
                    let conds = st.status.map(|s| s.conditions).unwrap_or_default();
                    let not_ready: Vec<String> = conds
                        .iter()
                        .filter(|c| !c.status)
                        .map(|c| format!("{} false: {} {}", c.r#type, c.reason, c.message))
                        .collect();
                    if conds.len() >= 2 && not_ready.is_empty() {
                        return Ok(());
                    }
                    last = not_ready.join("; ");
                }
                Err(e) => last = e,
            }
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    Err(format!("not ready within {timeout:?}: {last}"))
}

// ---------------------------------------------------------------------------------
// The pod network, the same conflist for both

pub fn conflist(bridge: &str, subnet: u8, data_dir: &Path) -> String {
    conflist_chain(bridge, subnet, data_dir, false)
}

/// [`conflist`], with the reference `portmap` chained after `bridge` when `portmap` (as a
/// node's conflist has it for `hostPort`; a pod without port mappings passes through).
pub fn conflist_chain(bridge: &str, subnet: u8, data_dir: &Path, portmap: bool) -> String {
    let mut v = serde_json::json!({
        "cniVersion": "1.0.0",
        "name": "crust-bench",
        "plugins": [{
            "type": "bridge",
            "bridge": bridge,
            "isGateway": true,
            "ipMasq": true,
            "ipam": {
                "type": "host-local",
                "dataDir": data_dir,
                "ranges": [[{"subnet": format!("10.{subnet}.0.0/24")}]],
                "routes": [{"dst": "0.0.0.0/0"}]
            }
        }]
    });
    if portmap {
        v["plugins"]
            .as_array_mut()
            .unwrap()
            .push(serde_json::json!({
                "type": "portmap",
                "capabilities": {"portMappings": true}
            }));
    }
    v.to_string()
}

// ---------------------------------------------------------------------------------
// The pause image: an OCI archive written here, holding crust's pause binary

/// One ustar header + data (padded), for a regular file or (`data == None`) a directory.
pub fn tar_entry(out: &mut Vec<u8>, name: &str, mode: u32, data: Option<&[u8]>) {
    assert!(name.len() < 100, "tar name too long: {name}");
    let mut h = [0u8; 512];
    let put = |h: &mut [u8; 512], off: usize, s: &[u8]| h[off..off + s.len()].copy_from_slice(s);
    put(&mut h, 0, name.as_bytes());
    put(&mut h, 100, format!("{mode:07o}\0").as_bytes());
    put(&mut h, 108, b"0000000\0");
    put(&mut h, 116, b"0000000\0");
    let size = data.map(|d| d.len()).unwrap_or(0);
    put(&mut h, 124, format!("{size:011o}\0").as_bytes());
    put(&mut h, 136, b"00000000000\0");
    put(&mut h, 156, if data.is_some() { b"0" } else { b"5" });
    put(&mut h, 257, b"ustar\0");
    put(&mut h, 263, b"00");
    put(&mut h, 148, b"        ");
    let sum: u32 = h.iter().map(|b| *b as u32).sum();
    put(&mut h, 148, format!("{sum:06o}\0 ").as_bytes());
    out.extend_from_slice(&h);
    if let Some(d) = data {
        out.extend_from_slice(d);
        out.resize(out.len().div_ceil(512) * 512, 0);
    }
}

pub fn tar_finish(out: &mut Vec<u8>) {
    out.extend_from_slice(&[0u8; 1024]);
}

pub fn sha256_hex(data: &[u8], scratch: &Path) -> String {
    std::fs::write(scratch, data).unwrap();
    let out = crate::sh(&["sha256sum", &scratch.to_string_lossy()]);
    let _ = std::fs::remove_file(scratch);
    out.split_whitespace().next().unwrap().to_string()
}

/// Writes an OCI image archive (`oci-layout`, `index.json`, blobs) for `name` whose only
/// file is `/pause` (crust's pause binary), its entrypoint. Returns the archive's path.
pub fn write_pause_image(dir: &Path, name: &str) -> PathBuf {
    let scratch = dir.join("blob.tmp");
    let mut layer = Vec::new();
    tar_entry(&mut layer, "pause", 0o755, Some(container::pause::BINARY));
    tar_finish(&mut layer);
    let layer_digest = sha256_hex(&layer, &scratch);
    let config = serde_json::json!({
        "architecture": image::platform::node().architecture,
        "os": "linux",
        "config": {"Entrypoint": ["/pause"], "WorkingDir": "/"},
        "rootfs": {"type": "layers", "diff_ids": [format!("sha256:{layer_digest}")]},
        "history": [{"created_by": "crust bench-sandbox: crust-pause (container::pause::BINARY)"}]
    })
    .to_string()
    .into_bytes();
    let config_digest = sha256_hex(&config, &scratch);
    let manifest = serde_json::json!({
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {
            "mediaType": "application/vnd.oci.image.config.v1+json",
            "digest": format!("sha256:{config_digest}"),
            "size": config.len()
        },
        "layers": [{
            "mediaType": "application/vnd.oci.image.layer.v1.tar",
            "digest": format!("sha256:{layer_digest}"),
            "size": layer.len()
        }]
    })
    .to_string()
    .into_bytes();
    let manifest_digest = sha256_hex(&manifest, &scratch);
    let index = serde_json::json!({
        "schemaVersion": 2,
        "manifests": [{
            "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "digest": format!("sha256:{manifest_digest}"),
            "size": manifest.len(),
            "platform": {"architecture": image::platform::node().architecture, "os": "linux"},
            "annotations": {
                "io.containerd.image.name": name,
                "org.opencontainers.image.ref.name": name.rsplit_once(':').map(|(_, t)| t).unwrap_or("latest")
            }
        }]
    })
    .to_string()
    .into_bytes();

    let mut ar = Vec::new();
    tar_entry(
        &mut ar,
        "oci-layout",
        0o644,
        Some(br#"{"imageLayoutVersion":"1.0.0"}"#),
    );
    tar_entry(&mut ar, "index.json", 0o644, Some(&index));
    tar_entry(&mut ar, "blobs/", 0o755, None);
    tar_entry(&mut ar, "blobs/sha256/", 0o755, None);
    for (d, b) in [
        (&layer_digest, &layer),
        (&config_digest, &config),
        (&manifest_digest, &manifest),
    ] {
        tar_entry(&mut ar, &format!("blobs/sha256/{d}"), 0o644, Some(b));
    }
    tar_finish(&mut ar);
    let path = dir.join("pause-oci.tar");
    std::fs::write(&path, ar).unwrap();
    path
}

// ---------------------------------------------------------------------------------
// containerd in a node namespace

/// The deepest of this process's cgroups over the hierarchies: a path that is at or
/// below our own cgroup in every hierarchy when the others are ancestors of it (here
/// all are `/` but memory's). Says so when they are not.
pub fn own_cgroup_base() -> String {
    let text = std::fs::read_to_string("/proc/self/cgroup").unwrap_or_default();
    let paths: Vec<&str> = text
        .lines()
        .filter_map(|l| l.splitn(3, ':').nth(2))
        .collect();
    let deepest = paths
        .iter()
        .copied()
        .max_by_key(|p| p.trim_end_matches('/').matches('/').count())
        .unwrap_or("/")
        .trim_end_matches('/')
        .to_string();
    for p in &paths {
        let p = p.trim_end_matches('/');
        if !(p.is_empty() || deepest == p || deepest.starts_with(&format!("{p}/"))) {
            eprintln!(
                "warning: this process's cgroups ({}) do not nest in one path; containerd's pods go under {deepest}",
                paths.join(", ")
            );
        }
    }
    deepest
}

/// Every cgroup hierarchy mounted (v1 controllers, named ones such as `name=systemd`,
/// and the hybrid cgroup2 mount), as (mount point, the cgroup path of its root).
pub fn cgroup_mounts() -> Vec<(PathBuf, String)> {
    std::fs::read_to_string("/proc/self/mountinfo")
        .unwrap_or_default()
        .lines()
        .filter_map(|l| {
            let (pre, post) = l.split_once(" - ")?;
            let fstype = post.split_whitespace().next()?;
            if fstype != "cgroup" && fstype != "cgroup2" {
                return None;
            }
            let f: Vec<&str> = pre.split_whitespace().collect();
            Some((PathBuf::from(f.get(4)?), f.get(3)?.to_string()))
        })
        .collect()
}

/// Mount points at or below `dir` (exactly, not by string prefix), deepest last.
pub fn mounts_below(dir: &Path) -> Vec<String> {
    let d = dir.to_string_lossy().to_string();
    let below = format!("{d}/");
    std::fs::read_to_string("/proc/self/mountinfo")
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.split_whitespace().nth(4).map(str::to_string))
        .filter(|m| *m == d || m.starts_with(&below))
        .collect()
}

pub fn kill(pid: i32, sig: i32) {
    // SAFETY: signalling a process this bench (or a daemon it started) made.
    unsafe { libc::kill(pid, sig) };
}

/// Kills every process in the cgroups at and below `cgroup_parent` (relative to each
/// hierarchy's root, as a CRI `cgroup_parent` is), in every hierarchy, and removes those
/// cgroups deepest first, for up to 5 s: what a bench or test leaves when it is torn down.
pub fn kill_cgroup_tree(cgroup_parent: &str) {
    let mut dirs = Vec::new();
    for (mnt, root) in cgroup_mounts() {
        let rel = cgroup_parent
            .strip_prefix(root.trim_end_matches('/'))
            .unwrap_or(cgroup_parent)
            .trim_start_matches('/')
            .to_string();
        walk_dirs(&mnt.join(rel), &mut dirs);
    }
    dirs.sort_by_key(|d| std::cmp::Reverse(d.components().count()));
    dirs.dedup();
    for d in &dirs {
        if let Ok(procs) = std::fs::read_to_string(d.join("cgroup.procs")) {
            for p in procs.lines().filter_map(|l| l.trim().parse::<i32>().ok()) {
                kill(p, libc::SIGKILL);
            }
        }
    }
    let deadline = Instant::now() + Duration::from_secs(5);
    while dirs.iter().any(|d| d.exists()) && Instant::now() < deadline {
        for d in &dirs {
            let _ = std::fs::remove_dir(d);
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

pub struct Containerd {
    node: Netns,
    pub dir: TempDir,
    /// containerd's state and runc's root: on a tmpfs, as `/run/containerd` is on a node.
    run: TempDir,
    pub socket: PathBuf,
    log: PathBuf,
    /// `[debug] level`: "info"; the runtime bench sets "debug" before `start`, for the
    /// CRI calls' start and end lines (ExecSync's are debug) it times the calls with.
    pub log_level: &'static str,
    /// Absolute cgroup path the pods go under (runc's cgroupfs driver, every hierarchy).
    pub cgroup_parent: String,
    child: Option<Child>,
    /// Shim sockets in /run/containerd/s before we started, and the directories we made.
    shim_sockets_before: Vec<PathBuf>,
    made_dirs: Vec<PathBuf>,
    /// Every sandbox id seen (the benches add theirs), for the shim sockets.
    pub pod_ids: Arc<Mutex<Vec<String>>>,
}

impl Containerd {
    pub fn new(subnet: u8) -> Containerd {
        let dir = TempDir::new("ctrd");
        let made_dirs = ["/run/containerd", SHIM_SOCKET_DIR]
            .iter()
            .map(PathBuf::from)
            .filter(|p| !p.exists())
            .collect();
        let shim_sockets_before = std::fs::read_dir(SHIM_SOCKET_DIR)
            .map(|rd| rd.flatten().map(|e| e.path()).collect())
            .unwrap_or_default();
        let c = Containerd {
            node: Netns::new("bcn"),
            socket: dir.path().join("containerd.sock"),
            log: dir.path().join("containerd.log"),
            log_level: "info",
            cgroup_parent: format!("{}/{}", own_cgroup_base(), unique("crust-bench-ctrd-")),
            dir,
            run: TempDir::tmpfs("ctrdrun"),
            child: None,
            shim_sockets_before,
            made_dirs,
            pod_ids: Arc::new(Mutex::new(Vec::new())),
        };
        for d in ["root", "net.d", "ipam"] {
            std::fs::create_dir_all(c.dir.path().join(d)).unwrap();
        }
        for d in ["state", "runc"] {
            std::fs::create_dir_all(c.run.path().join(d)).unwrap();
        }
        std::fs::write(
            c.dir.path().join("net.d/10-bench.conflist"),
            conflist("cni0", subnet, &c.dir.path().join("ipam")),
        )
        .unwrap();
        c
    }

    fn config(&self) -> String {
        let d = self.dir.path();
        let run = self.run.path();
        config_toml(&Config {
            root: &d.join("root"),
            state: &run.join("state"),
            socket: &self.socket,
            log_level: self.log_level,
            pause_image: PAUSE_IMAGE,
            cni_conf_dir: &d.join("net.d"),
            runc_root: &run.join("runc"),
            certs: None,
            conf_template: None,
            cni_bin_dir: None,
        })
    }

    /// Starts containerd in the node namespace, imports the pause image and the OCI
    /// archives of `images` (archive, the image name it gives) and waits for CRI to be
    /// ready and to list them; an error says what failed, with the end of containerd's log.
    pub async fn start(&mut self, images: &[(PathBuf, String)]) -> Result<(), String> {
        for tool in ["containerd", "ctr", "runc", "containerd-shim-runc-v2"] {
            if which(tool).is_none() {
                return Err(format!(
                    "`{tool}` not found (apt-get install -y containerd runc)"
                ));
            }
        }
        for plugin in ["bridge", "host-local", "loopback"] {
            if !Path::new("/usr/lib/cni").join(plugin).is_file() {
                return Err(format!(
                    "/usr/lib/cni/{plugin} not found (apt-get install -y containernetworking-plugins)"
                ));
            }
        }
        let cfg = self.dir.path().join("config.toml");
        std::fs::write(&cfg, self.config()).unwrap();
        let log = std::fs::File::create(&self.log).unwrap();
        let mut cmd = Command::new(which("containerd").unwrap());
        cmd.arg("--config")
            .arg(&cfg)
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log);
        let node = self.node.path();
        let child = std::thread::scope(|s| {
            s.spawn(|| {
                enter_netns(&node);
                cmd.spawn()
            })
            .join()
            .unwrap()
        })
        .map_err(|e| format!("spawning containerd: {e}"))?;
        self.child = Some(child);

        let deadline = Instant::now() + Duration::from_secs(30);
        while std::os::unix::net::UnixStream::connect(&self.socket).is_err() {
            if let Some(Ok(Some(st))) = self.child.as_mut().map(|c| c.try_wait()) {
                self.child = None;
                return Err(self.failure(&format!("containerd exited with {st} before serving")));
            }
            if Instant::now() > deadline {
                return Err(self.failure("containerd did not serve within 30 s"));
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }

        let mut all = vec![(
            write_pause_image(self.dir.path(), PAUSE_IMAGE),
            PAUSE_IMAGE.to_string(),
        )];
        all.extend(images.iter().cloned());
        let ctr = |args: &[&str]| {
            let out = crate::run(
                Command::new("ctr")
                    .arg("--address")
                    .arg(&self.socket)
                    .args(["--namespace", "k8s.io"])
                    .args(args),
            );
            (
                out.status.success(),
                format!(
                    "{}{}",
                    String::from_utf8_lossy(&out.stdout),
                    String::from_utf8_lossy(&out.stderr)
                ),
            )
        };
        for (tar, name) in &all {
            let (ok, out) = ctr(&[
                "images",
                "import",
                "--platform",
                "linux/amd64",
                &tar.to_string_lossy(),
            ]);
            if !ok {
                return Err(self.failure(&format!("ctr images import failed: {out}")));
            }
            let (_, list) = ctr(&["images", "ls", "-q"]);
            if !list.lines().any(|l| l.trim() == name) {
                return Err(self.failure(&format!(
                    "{name} not in containerd's images after import: {list}{out}"
                )));
            }
        }

        wait_ready(&self.socket, Duration::from_secs(30))
            .await
            .map_err(|e| self.failure(&format!("containerd's CRI: {e}")))?;
        // The CRI plugin must see the image itself, or RunPodSandbox would try to pull.
        let ch = cri_api::connect_unix(&self.socket)
            .await
            .map_err(|e| e.to_string())?;
        let mut cri = ImageServiceClient::new(ch);
        let deadline = Instant::now() + Duration::from_secs(10);
        for (_, name) in &all {
            loop {
                let st = rpc(
                    "ImageStatus",
                    cri.image_status(ImageStatusRequest {
                        image: Some(ImageSpec {
                            image: name.clone(),
                            ..Default::default()
                        }),
                        verbose: false,
                    }),
                )
                .await
                .map_err(|e| self.failure(&e))?;
                if st.image.is_some() {
                    break;
                }
                if Instant::now() > deadline {
                    return Err(self.failure(&format!("CRI does not list {name}")));
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
        Ok(())
    }

    pub fn failure(&self, what: &str) -> String {
        let log = std::fs::read_to_string(&self.log).unwrap_or_default();
        let tail: Vec<&str> = log.lines().rev().take(15).collect();
        let tail: Vec<&str> = tail.into_iter().rev().collect();
        format!(
            "{what}\n  containerd log tail:\n    {}",
            tail.join("\n    ")
        )
    }

    /// containerd's stdout and stderr.
    pub fn log_path(&self) -> &Path {
        &self.log
    }

    pub fn pid(&self) -> i32 {
        self.child.as_ref().map(|c| c.id() as i32).unwrap_or(0)
    }

    /// Every pod through CRI, with a deadline; remembers their ids for the shim sockets.
    fn cleanup_through_cri(&mut self) {
        if self.child.is_none() {
            return;
        }
        let socket = self.socket.clone();
        let ids = self.pod_ids.clone();
        let _ = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            rt.block_on(async move {
                let work = async {
                    let Ok(ch) = cri_api::connect_unix(&socket).await else {
                        return;
                    };
                    let mut c = RuntimeServiceClient::new(ch);
                    let Ok(list) = c.list_pod_sandbox(ListPodSandboxRequest::default()).await
                    else {
                        return;
                    };
                    for sb in list.into_inner().items {
                        ids.lock().unwrap().push(sb.id.clone());
                        let _ = c
                            .stop_pod_sandbox(StopPodSandboxRequest {
                                pod_sandbox_id: sb.id.clone(),
                            })
                            .await;
                        let _ = c
                            .remove_pod_sandbox(RemovePodSandboxRequest {
                                pod_sandbox_id: sb.id,
                            })
                            .await;
                    }
                };
                let _ = tokio::time::timeout(Duration::from_secs(60), work).await;
            })
        })
        .join();
    }

    fn cleanup_by_force(&mut self) {
        // containerd: SIGTERM, then SIGKILL.
        if let Some(mut c) = self.child.take() {
            kill(c.id() as i32, libc::SIGTERM);
            let deadline = Instant::now() + Duration::from_secs(10);
            while matches!(c.try_wait(), Ok(None)) && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(20));
            }
            let _ = c.kill();
            let _ = c.wait();
        }
        // Shims started for our socket (their command line names it).
        let sock = self.socket.to_string_lossy().to_string();
        if let Ok(rd) = std::fs::read_dir("/proc") {
            for e in rd.flatten() {
                let Ok(pid) = e.file_name().to_string_lossy().parse::<i32>() else {
                    continue;
                };
                let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
                let args: Vec<String> = cmdline
                    .split(|b| *b == 0)
                    .map(|a| String::from_utf8_lossy(a).into_owned())
                    .collect();
                if args.first().is_some_and(|a| a.contains("containerd-shim"))
                    && args.contains(&sock)
                {
                    kill(pid, libc::SIGKILL);
                }
            }
        }
        // Pause processes and whatever else is left in our pod cgroups, then the cgroups.
        kill_cgroup_tree(&self.cgroup_parent);
        // Mounts under our dirs (rootfs overlays, pod netns pins, shm), deepest first;
        // the tmpfs of `run` itself goes with its TempDir.
        let mut mounts = mounts_below(self.dir.path());
        mounts.extend(
            mounts_below(self.run.path())
                .into_iter()
                .filter(|m| Path::new(m) != self.run.path()),
        );
        for m in mounts.iter().rev() {
            if let Ok(c) = std::ffi::CString::new(m.as_str()) {
                // SAFETY: lazy unmount of a mount under our own temp dir.
                unsafe { libc::umount2(c.as_ptr(), libc::MNT_DETACH) };
            }
        }
        // Shim sockets left by killed shims: new since we started, named as containerd
        // names ours (sha256 of address/namespace/id).
        let mut ids = self.pod_ids.lock().unwrap().clone();
        ids.sort();
        ids.dedup();
        let ours: Vec<String> = ids
            .iter()
            .map(|id| {
                sha256_hex(
                    format!("{sock}/k8s.io/{id}").as_bytes(),
                    &self.dir.path().join("hash.tmp"),
                )
            })
            .collect();
        if let Ok(rd) = std::fs::read_dir(SHIM_SOCKET_DIR) {
            for e in rd.flatten() {
                let p = e.path();
                let name = e.file_name().to_string_lossy().to_string();
                if !self.shim_sockets_before.contains(&p) && ours.contains(&name) {
                    let _ = std::fs::remove_file(&p);
                }
            }
        }
        for d in self.made_dirs.iter().rev() {
            let _ = std::fs::remove_dir(d);
        }
    }
}

impl Drop for Containerd {
    fn drop(&mut self) {
        self.cleanup_through_cri();
        self.cleanup_by_force();
    }
}

/// Where one containerd keeps what, for [`config_toml`].
pub struct Config<'a> {
    pub root: &'a Path,
    pub state: &'a Path,
    pub socket: &'a Path,
    pub log_level: &'a str,
    pub pause_image: &'a str,
    pub cni_conf_dir: &'a Path,
    pub runc_root: &'a Path,
    /// `certs.d` of registry hosts (`hosts.toml`), if any.
    pub certs: Option<&'a Path>,
    /// The CNI config template rendered with the Node's pod range
    /// (`UpdateRuntimeConfig`), if any.
    pub conf_template: Option<&'a Path>,
    /// Where the CNI plugins are (containerd takes one directory); the reference
    /// plugins' `/usr/lib/cni` when `None`.
    pub cni_bin_dir: Option<&'a Path>,
}

/// containerd 1.6's configuration as the suites and benches run it: its own root, state
/// and socket; the CRI plugin with runc (cgroupfs: the pods' cgroup parents come from
/// the client), the reference CNI plugins on one conflist, and the pause image given.
pub fn config_toml(c: &Config<'_>) -> String {
    let registry = c
        .certs
        .map(|p| {
            format!(
                "\n  [plugins.\"io.containerd.grpc.v1.cri\".registry]\n    config_path = \"{}\"\n",
                p.display()
            )
        })
        .unwrap_or_default();
    format!(
        r#"version = 2
root = "{root}"
state = "{state}"
oom_score = 0
disabled_plugins = [
  "io.containerd.snapshotter.v1.aufs",
  "io.containerd.snapshotter.v1.btrfs",
  "io.containerd.snapshotter.v1.devmapper",
  "io.containerd.snapshotter.v1.zfs",
  "io.containerd.internal.v1.opt",
]

[grpc]
  address = "{sock}"

[ttrpc]
  address = "{sock}.ttrpc"

[debug]
  address = ""
  level = "{level}"

[metrics]
  address = ""

[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "{pause}"
  disable_tcp_service = true
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
  enable_selinux = false
  # The bounding set here lacks CAP_SYS_RESOURCE: the sandbox's -998 must be clamped.
  restrict_oom_score_adj = true
  netns_mounts_under_state_dir = true

  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "{cni_bin}"
    conf_dir = "{cni}"
    max_conf_num = 1{template}

  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"

    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"

      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        BinaryName = "{runc}"
        Root = "{runc_root}"
        SystemdCgroup = false
{registry}"#,
        root = c.root.display(),
        state = c.state.display(),
        sock = c.socket.display(),
        level = c.log_level,
        pause = c.pause_image,
        cni = c.cni_conf_dir.display(),
        cni_bin = c.cni_bin_dir.unwrap_or(Path::new("/usr/lib/cni")).display(),
        runc = which("runc").unwrap_or_default().display(),
        runc_root = c.runc_root.display(),
        template = c
            .conf_template
            .map(|t| format!("\n    conf_template = \"{}\"", t.display()))
            .unwrap_or_default(),
    )
}
