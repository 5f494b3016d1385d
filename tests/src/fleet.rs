//! A cluster of crust nodes: the control plane of [`Cluster`] (with
//! [`Options::control_plane_only`]) and N nodes, each in a network namespace of its own
//! with its own crustd, crustlet (`--pod-routes`) and kube-proxy, joined by one L2
//! segment.
//!
//! ```text
//!   control namespace (Cluster)          fabric namespace            node namespace i
//!   apiserver 10.<n>.255.1:6443          bridge fab0                 eth0 10.<n>.250.<10+i>
//!   registry :PORT (every address)  fc0--fc1 (on fab0)  fn<i> --------- default via .250.1
//!   10.<n>.250.1 on fc0                                              crustd, crustlet, kube-proxy
//!                                                                    cni0: the Node's podCIDR
//! ```
//!
//! A node reaches the apiserver (and the registry) through the control namespace,
//! whose address 10.<n>.255.1 is local there. Each Node's pod range comes from the
//! controller-manager (`--allocate-node-cidrs`, out of `10.<n>.0.0/17`): the crustlet
//! sends it to crustd (`UpdateRuntimeConfig`), which renders its CNI template (crust's
//! `bridge` and `host-local`, no masquerade: pods keep their addresses across nodes),
//! and the crustlets route to each other's ranges. The control namespace gets routes to
//! the pod ranges too (the apiserver calls webhooks in pods).

use crate::cluster::{
    pick_cgroup_root, run_timeout, stop_child, wait_for, Cluster, KubeBins, Options,
};
use crate::{sh, unique, Netns};
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::sync::Mutex;
use std::time::Duration;

/// One node of the fleet.
pub struct FleetNode {
    pub name: String,
    pub ns: Netns,
    /// Its InternalIP, on the fabric.
    pub ip: String,
    /// Its files: crustd's root and state, the crustlet's root and pod logs.
    pub dir: PathBuf,
    pub socket: PathBuf,
    pub cgroup_root: String,
    crustd: Mutex<Option<Child>>,
    crustlet: Mutex<Option<Child>>,
    kube_proxy: Mutex<Option<Child>>,
}

pub struct Fleet {
    pub cluster: Cluster,
    pub fabric: Netns,
    pub nodes: Vec<FleetNode>,
    crustd_bin: PathBuf,
    crustlet_bin: PathBuf,
    cni_bin_dirs: Vec<PathBuf>,
    torn_down: Mutex<bool>,
}

/// The control namespace's address on the fabric.
fn control_ip(subnet: u8) -> String {
    format!("10.{subnet}.250.1")
}

impl Fleet {
    /// The control plane and `n` nodes, every node Ready with its pod range and its
    /// routes to the others'.
    pub fn start(
        bins: KubeBins,
        crustd_bin: PathBuf,
        cni_bin_dirs: Vec<PathBuf>,
        n: usize,
    ) -> Fleet {
        let crustlet_bin = crustd_bin.with_file_name("crustlet");
        let mut cluster = Cluster::start_with(
            bins,
            crustd_bin.clone(),
            cni_bin_dirs.clone(),
            Options {
                control_plane_only: true,
                ..Options::default()
            },
        );
        let subnet = cluster.subnet;
        let fabric = Netns::new("fab");
        fabric.sh(&["ip", "link", "add", "fab0", "type", "bridge"]);
        fabric.sh(&["ip", "link", "set", "fab0", "up"]);
        let ctl = cluster.node.name.clone();
        attach(
            &fabric,
            "fc1",
            &ctl,
            "fc0",
            &format!("{}/24", control_ip(subnet)),
        );
        // Where crustd finds registry.k8s.io: the cluster's registry, through the
        // control namespace.
        let port = cluster
            .registry_addr()
            .rsplit(':')
            .next()
            .unwrap_or_default()
            .to_string();
        let mirror = format!("{}:{port}", cluster.ip);
        let certs = cluster.path("fleet-certs.d/registry.k8s.io");
        std::fs::create_dir_all(&certs).unwrap();
        std::fs::write(
            certs.join("hosts.toml"),
            format!("server = \"https://registry.k8s.io\"\n\n[host.\"http://{mirror}\"]\n  capabilities = [\"pull\", \"resolve\"]\n"),
        )
        .unwrap();
        let mut nodes = vec![];
        for i in 0..n {
            let name = format!("crust-{i}");
            let ns = Netns::new(&format!("fn{i}"));
            let ip = format!("10.{subnet}.250.{}", 10 + i);
            attach(
                &fabric,
                &format!("fn{i}"),
                &ns.name,
                "eth0",
                &format!("{ip}/24"),
            );
            ns.sh(&["ip", "route", "add", "default", "via", &control_ip(subnet)]);
            ns.sh(&["sysctl", "-qw", "net.ipv4.ip_forward=1"]);
            let dir = cluster.path(&format!("fleet-{name}"));
            for d in ["root", "state", "cni", "ipam", "crustlet", "pods"] {
                std::fs::create_dir_all(dir.join(d)).unwrap();
            }
            let cgroup_root = pick_cgroup_root(&unique(&format!("crust-fleet{i}-")));
            cluster.make_cgroup_root(&cgroup_root);
            nodes.push(FleetNode {
                socket: dir.join("state/crust.sock"),
                name,
                ns,
                ip,
                dir,
                cgroup_root,
                crustd: Mutex::new(None),
                crustlet: Mutex::new(None),
                kube_proxy: Mutex::new(None),
            });
        }
        let f = Fleet {
            cluster,
            fabric,
            nodes,
            crustd_bin,
            crustlet_bin,
            cni_bin_dirs,
            torn_down: Mutex::new(false),
        };
        for i in 0..n {
            f.node_kubeconfig(i);
            f.start_crustd(i);
            f.start_crustlet(i);
            f.start_kube_proxy(i);
        }
        f.wait_ready(Duration::from_secs(120));
        f
    }

    /// A client certificate as `system:node:<name>` and a kubeconfig with it.
    fn node_kubeconfig(&self, i: usize) {
        let node = &self.nodes[i];
        let c = &self.cluster;
        let (cert, key) = c.client_cert(
            &format!("fleet-{}", node.name),
            &format!("system:node:{}", node.name),
            &["system:nodes"],
        );
        std::fs::write(
            node.dir.join("kubeconfig"),
            format!(
                "apiVersion: v1
kind: Config
clusters:
- name: crust
  cluster:
    server: https://{}:6443
    certificate-authority: {}
users:
- name: node
  user:
    client-certificate: {}
    client-key: {}
contexts:
- name: crust
  context:
    cluster: crust
    user: node
current-context: crust
",
                c.ip,
                c.path("pki/ca.pem").display(),
                cert.display(),
                key.display()
            ),
        )
        .unwrap();
    }

    /// A command in node `i`'s network namespace.
    pub fn node_cmd(&self, i: usize, program: impl AsRef<std::ffi::OsStr>) -> Command {
        let mut c = Command::new("nsenter");
        c.arg(format!("--net={}", self.nodes[i].ns.path().display()))
            .arg("--")
            .arg(program);
        c
    }

    /// Starts node `i`'s crustd and waits for its socket: its pod network is its CNI
    /// template, rendered when the crustlet sends the Node's pod range.
    pub fn start_crustd(&self, i: usize) {
        let node = &self.nodes[i];
        let template = serde_json::json!({
            "cniVersion": "1.0.0",
            "name": "crust-fleet",
            "plugins": [{
                "type": "bridge",
                "bridge": "cni0",
                "isGateway": true,
                // Pods keep their addresses to other nodes' pods (kube-proxy
                // masquerades what leaves the cluster range for a Service).
                "ipMasq": false,
                "hairpinMode": true,
                "ipam": {
                    "type": "host-local",
                    "dataDir": node.dir.join("ipam"),
                    "ranges": ["{{.PodCIDRRanges}}"],
                    "routes": ["{{.Routes}}"]
                }
            }, {
                "type": "portmap",
                "capabilities": {"portMappings": true},
                "snat": true
            }]
        })
        .to_string()
        // The placeholders stand for JSON, not strings.
        .replace("\"{{.PodCIDRRanges}}\"", "{{.PodCIDRRanges}}")
        .replace("\"{{.Routes}}\"", "{{.Routes}}");
        let tpl = node.dir.join("cni-template.json");
        std::fs::write(&tpl, template).unwrap();
        let conf = node.dir.join("crustd.toml");
        std::fs::write(
            &conf,
            format!("[cni]\nconf_template = \"{}\"\n", tpl.display()),
        )
        .unwrap();
        let mut cmd = self.node_cmd(i, &self.crustd_bin);
        cmd.arg("--config")
            .arg(&conf)
            .arg("--root")
            .arg(node.dir.join("root"))
            .arg("--state")
            .arg(node.dir.join("state"))
            .arg("--cni-conf-dir")
            .arg(node.dir.join("cni"))
            .arg("--registry-config-dir")
            .arg(self.cluster.path("fleet-certs.d"));
        for d in &self.cni_bin_dirs {
            cmd.arg("--cni-bin-dir").arg(d);
        }
        cmd.args(["--cgroup-root", "/", "--log-level", "debug"]);
        let log = format!("{}-crustd", node.name);
        *node.crustd.lock().unwrap() = Some(self.cluster.spawn_serving(cmd, &log, &node.socket));
    }

    /// Starts node `i`'s crustlet, with `--pod-routes`.
    pub fn start_crustlet(&self, i: usize) {
        let node = &self.nodes[i];
        let mut cmd = self.node_cmd(i, &self.crustlet_bin);
        cmd.arg(format!("--kubeconfig={}", node.dir.join("kubeconfig").display()))
            .arg(format!(
                "--container-runtime-endpoint=unix://{}",
                node.socket.display()
            ))
            .arg(format!("--hostname-override={}", node.name))
            .arg(format!("--node-ip={}", node.ip))
            .arg(format!("--root-dir={}", node.dir.join("crustlet").display()))
            .arg(format!("--pod-logs-dir={}", node.dir.join("pods").display()))
            .arg(format!("--cgroup-root={}", node.cgroup_root))
            .args(self.cluster.server_auth_args())
            .arg("--eviction-hard=memory.available<1Mi,nodefs.available<1%,nodefs.inodesFree<1%,imagefs.available<1%")
            .arg("--pod-routes")
            .args(["--v", "2"]);
        let child = self
            .cluster
            .spawn_logged(cmd, &format!("{}-crustlet", node.name));
        *node.crustlet.lock().unwrap() = Some(child);
    }

    /// SIGTERM to node `i`'s crustlet (SIGKILL after 10 s).
    pub fn stop_crustlet(&self, i: usize) {
        if let Some(c) = self.nodes[i].crustlet.lock().unwrap().take() {
            stop_child(c, Duration::from_secs(10));
        }
    }

    /// SIGKILL to node `i`'s crustd.
    pub fn kill_crustd(&self, i: usize) {
        if let Some(mut c) = self.nodes[i].crustd.lock().unwrap().take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Starts kube-proxy (iptables mode) in node `i`'s namespace.
    pub fn start_kube_proxy(&self, i: usize) {
        let node = &self.nodes[i];
        let c = &self.cluster;
        let mut cmd = self.node_cmd(i, &c.bins.kube_proxy);
        cmd.args(c.kube_proxy_args(&node.name, &node.ip, &format!("10.{}.0.0/17", c.subnet)));
        let child = c.spawn_logged(cmd, &format!("{}-kube-proxy", node.name));
        *node.kube_proxy.lock().unwrap() = Some(child);
    }

    /// Waits until every node is Ready with a pod range, then routes the control
    /// namespace to each range (the apiserver's calls to webhooks in pods).
    pub fn wait_ready(&self, limit: Duration) {
        for node in &self.nodes {
            let n = wait_for(
                &format!("the Node {} Ready with a pod range", node.name),
                limit,
                |last| {
                    let out = run_timeout(
                        &mut self
                            .cluster
                            .kubectl(&["get", "node", &node.name, "-o", "json"]),
                        Duration::from_secs(20),
                    );
                    let v: Value = serde_json::from_slice(&out.stdout).ok()?;
                    *last = format!("{} {}", v["spec"]["podCIDR"], v["status"]["conditions"]);
                    let ready = v["status"]["conditions"]
                        .as_array()?
                        .iter()
                        .any(|c| c["type"] == "Ready" && c["status"] == "True");
                    (ready && v["spec"]["podCIDR"].is_string()).then_some(v)
                },
            );
            let cidr = n["spec"]["podCIDR"].as_str().unwrap_or_default();
            let _ = run_timeout(
                Command::new("ip").args([
                    "-n",
                    &self.cluster.node.name,
                    "route",
                    "replace",
                    cidr,
                    "via",
                    &node.ip,
                ]),
                Duration::from_secs(10),
            );
        }
    }

    /// Tears `fleet` down and exits with 128 + the signal when one of `signals` (the set
    /// [`crate::block_signals`] blocked) comes, as [`Cluster::teardown_on_signal`].
    pub fn teardown_on_signal(
        fleet: &std::sync::Arc<Fleet>,
        signals: libc::sigset_t,
        suite: &'static str,
    ) {
        let weak = std::sync::Arc::downgrade(fleet);
        crate::on_signal(signals, suite, move || {
            if let Some(f) = weak.upgrade() {
                f.teardown();
            }
        });
    }

    /// `kubectl --kubeconfig <admin> ARGS`.
    pub fn kubectl(&self, args: &[&str]) -> Command {
        self.cluster.kubectl(args)
    }

    /// Everything the fleet made gone: each node's pods through CRI, its daemons, its
    /// cgroups, its namespace (on drop), then the control plane.
    pub fn teardown(&self) {
        let mut done = self.torn_down.lock().unwrap();
        if *done {
            return;
        }
        *done = true;
        for (i, node) in self.nodes.iter().enumerate() {
            self.stop_crustlet(i);
            if let Some(mut c) = node.kube_proxy.lock().unwrap().take() {
                let _ = c.kill();
                let _ = c.wait();
            }
            if node.crustd.lock().unwrap().is_some() {
                let _ = run_timeout(
                    self.node_cmd(i, &self.cluster.bins.crictl)
                        .arg(format!(
                            "--runtime-endpoint=unix://{}",
                            node.socket.display()
                        ))
                        .args(["rmp", "-a", "-f"]),
                    Duration::from_secs(90),
                );
            }
            self.kill_crustd(i);
            // Whatever still runs in the node's namespace (a pod's processes, were its
            // removal to fail) goes with it.
            let pids = run_timeout(
                Command::new("ip").args(["netns", "pids", &node.ns.name]),
                Duration::from_secs(10),
            );
            for pid in s(&pids.stdout).split_whitespace() {
                if let Ok(p) = pid.parse::<i32>() {
                    // SAFETY: killing what runs in a namespace this fleet made.
                    unsafe { libc::kill(p, libc::SIGKILL) };
                }
            }
            remove_cgroups(&node.cgroup_root);
            let _ = Command::new("ip")
                .args(["netns", "del", &node.ns.name])
                .status();
        }
        let _ = Command::new("ip")
            .args(["netns", "del", &self.fabric.name])
            .status();
        self.cluster.teardown();
    }
}

impl Drop for Fleet {
    fn drop(&mut self) {
        self.teardown();
    }
}

fn s(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// A veth pair: `outer` on the fabric's bridge, `inner` in namespace `ns` with `addr`.
fn attach(fabric: &Netns, outer: &str, ns: &str, inner: &str, addr: &str) {
    sh(&[
        "ip",
        "-n",
        &fabric.name,
        "link",
        "add",
        outer,
        "type",
        "veth",
        "peer",
        "name",
        inner,
        "netns",
        ns,
    ]);
    fabric.sh(&["ip", "link", "set", outer, "master", "fab0", "up"]);
    sh(&["ip", "-n", ns, "addr", "add", addr, "dev", inner]);
    sh(&["ip", "-n", ns, "link", "set", inner, "up"]);
}

/// The cgroups below `root` in every hierarchy, deepest first (the root itself is the
/// cluster's to remove).
fn remove_cgroups(root: &str) {
    let text = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    let mut dirs = vec![];
    for line in text.lines() {
        let Some((pre, post)) = line.split_once(" - ") else {
            continue;
        };
        if !post.starts_with("cgroup") {
            continue;
        }
        let mount = pre.split_whitespace().nth(4).unwrap_or("");
        let d = Path::new(mount).join(root.trim_start_matches('/'));
        crate::crustd::walk_dirs(&d, &mut dirs);
    }
    dirs.sort_by_key(|d| std::cmp::Reverse(d.components().count()));
    for d in dirs {
        let _ = std::fs::remove_dir(&d);
    }
}
