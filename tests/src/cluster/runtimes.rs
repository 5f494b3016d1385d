//! The nodes' container runtimes: the kubelet's crustd and the crustlet's (each with its
//! own root, state, socket and pod network), containerd for the third node, and the CNI
//! configs they run pods with.

use super::Cluster;
use crate::which;
use std::path::{Path, PathBuf};
use std::process::Child;
use std::sync::Mutex;
use std::time::{Duration, Instant};

impl Cluster {
    /// The pod networks: the kubelet's crustd on `crustkube0` with `10.<n>.0.0/24`, the
    /// crustlet's on `crustlet0` with `10.<n>.1.0/24`.
    pub(super) fn write_cni_conf(&self) {
        self.write_cni_conf_of("", "crust-kube", "crustkube0", 0);
        self.write_cni_conf_of("crustlet-", "crust-let", "crustlet0", 1);
        // containerd's: the reference plugins on `ctrd0` with `10.<n>.2.0/24`.
        self.write_cni_conf_of("ctrd-", "crust-ctrd", "ctrd0", 2);
    }

    fn write_cni_conf_of(&self, prefix: &str, name: &str, bridge: &str, third: u8) {
        let n = self.subnet;
        let conf = serde_json::json!({
            "cniVersion": "1.0.0",
            "name": name,
            "plugins": [{
                "type": "bridge",
                "bridge": bridge,
                "isGateway": true,
                "ipMasq": true,
                // A pod reaching itself through its Service (kube-proxy's DNAT sends it
                // back out of the port it came in).
                "hairpinMode": true,
                "ipam": {
                    "type": "host-local",
                    "dataDir": self.path(&format!("{prefix}ipam")),
                    "ranges": [[{"subnet": format!("10.{n}.{third}.0/24")}]],
                    "routes": [{"dst": "0.0.0.0/0"}]
                }
            }, {
                "type": "portmap",
                "capabilities": {"portMappings": true},
                "snat": true
            }]
        });
        std::fs::write(
            self.path(&format!("{prefix}cni/10-crust.conflist")),
            conf.to_string(),
        )
        .unwrap();
    }

    /// Starts crustd in the node's namespaces and waits for its socket.
    pub fn start_crustd(&self) {
        self.spawn_crustd(&self.crustd, "", &self.socket);
    }

    /// Starts the crustlet's crustd (its own root, state, socket and pod network).
    pub fn start_crustlet_crustd(&self) {
        self.spawn_crustd(&self.crustlet_crustd, "crustlet-", &self.crustlet_socket);
    }

    fn spawn_crustd(&self, slot: &Mutex<Option<Child>>, prefix: &str, socket: &Path) {
        let mut guard = slot.lock().unwrap();
        assert!(guard.is_none(), "{prefix}crustd already running");
        let p = |r: &str| self.path(&format!("{prefix}{r}")).display().to_string();
        std::fs::write(p("crustd.toml"), "").unwrap();
        let mut cmd = self.node_cmd(&self.crustd_bin);
        cmd.arg("--config")
            .arg(p("crustd.toml"))
            .arg("--root")
            .arg(p("crust-root"))
            .arg("--state")
            .arg(p("crust-state"))
            .arg("--cni-conf-dir")
            .arg(p("cni"))
            .arg("--registry-config-dir")
            .arg(self.path("certs.d"));
        for d in &self.cni_bin_dirs {
            cmd.arg("--cni-bin-dir").arg(d);
        }
        let level = self.opts.crustd_log.unwrap_or("debug");
        cmd.args(["--cgroup-root", "/", "--log-level", level]);
        let name = format!("{prefix}crustd");
        *guard = Some(self.spawn_serving(cmd, &name, socket));
    }

    /// SIGKILL, as a crash.
    pub fn kill_crustd(&self) {
        if let Some(mut c) = self.crustd.lock().unwrap().take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// SIGKILL of the crustlet's crustd, as a crash.
    pub fn kill_crustlet_crustd(&self) {
        if let Some(mut c) = self.crustlet_crustd.lock().unwrap().take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    pub fn crustd_pid(&self) -> Option<u32> {
        self.crustd.lock().unwrap().as_ref().map(|c| c.id())
    }

    /// The crustlet's crustd (nsenter execs it: the child's pid is crustd's).
    pub fn crustlet_crustd_pid(&self) -> Option<u32> {
        self.crustlet_crustd
            .lock()
            .unwrap()
            .as_ref()
            .map(|c| c.id())
    }

    /// containerd's configuration: its own root, state and socket; the CRI plugin with
    /// runc (cgroupfs: the pods' cgroup parents come from their kubelet), the same CNI
    /// plugins as crustd on its own conflist, the registry's pause image as the sandbox
    /// image and the registry over plain HTTP.
    fn containerd_config(&self) -> String {
        let cni_bin = self.containerd_cni_bin();
        crate::containerd::config_toml(&crate::containerd::Config {
            root: &self.path("ctrd-root"),
            state: &self.path("ctrd-state"),
            socket: &self.containerd_socket,
            log_level: "info",
            pause_image: &self.pause_image,
            cni_conf_dir: &self.path("ctrd-cni"),
            runc_root: &self.path("ctrd-runc"),
            certs: Some(&self.path("ctrd-certs.d")),
            conf_template: None,
            cni_bin_dir: Some(&cni_bin),
        })
    }

    /// containerd takes one CNI plugin directory where crustd searches several in
    /// order: one made of links to the plugin each of crustd's directories would find
    /// first, so both run the same plugins.
    fn containerd_cni_bin(&self) -> PathBuf {
        let dir = self.path("ctrd-cni-bin");
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        for d in &self.cni_bin_dirs {
            for e in std::fs::read_dir(d).into_iter().flatten().flatten() {
                use std::os::unix::fs::PermissionsExt;
                // Executables only: a build directory also holds `deps/`, `*.d`...
                let runs = std::fs::metadata(e.path())
                    .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0);
                let link = dir.join(e.file_name());
                if runs && !link.exists() {
                    std::os::unix::fs::symlink(e.path(), &link).unwrap();
                }
            }
        }
        dir
    }

    /// Starts containerd in the node's namespaces and waits for its socket.
    pub fn start_containerd(&self) {
        let mut guard = self.containerd.lock().unwrap();
        assert!(guard.is_none(), "containerd already running");
        let registry = self.image.split('/').next().unwrap_or_default();
        let hosts = self.path("ctrd-certs.d").join(registry);
        std::fs::create_dir_all(&hosts).unwrap();
        std::fs::write(
            hosts.join("hosts.toml"),
            format!(
                "server = \"http://{registry}\"\n\n[host.\"http://{registry}\"]\n  capabilities = [\"pull\", \"resolve\"]\n"
            ),
        )
        .unwrap();
        let cfg = self.path("ctrd-config.toml");
        std::fs::write(&cfg, self.containerd_config()).unwrap();
        let mut cmd = self.node_cmd(which("containerd").expect("containerd"));
        cmd.arg("--config").arg(&cfg);
        let mut child = self.spawn_logged(cmd, "containerd");
        let deadline = Instant::now() + Duration::from_secs(30);
        while std::os::unix::net::UnixStream::connect(&self.containerd_socket).is_err() {
            if let Ok(Some(st)) = child.try_wait() {
                panic!("containerd exited with {st}: {}", self.log("containerd"));
            }
            assert!(
                Instant::now() < deadline,
                "containerd did not serve in 30 s"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        *guard = Some(child);
    }

    /// SIGKILL of containerd, as a crash (its shims, and the containers under them, live
    /// on).
    pub fn kill_containerd(&self) {
        if let Some(mut c) = self.containerd.lock().unwrap().take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    pub fn containerd_pid(&self) -> Option<u32> {
        self.containerd.lock().unwrap().as_ref().map(|c| c.id())
    }
}
