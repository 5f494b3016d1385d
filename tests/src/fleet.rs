//! A cluster of crust nodes: the control plane of [`Cluster`] (with
//! [`Options::control_plane_only`]) and N nodes, each in a network namespace of its own
//! with its own crustd, crustlet (`--pod-routes`) and kube-proxy, joined by one L2
//! segment. The same fleet of the real kubelet on containerd ([`Flavour::Containerd`])
//! is the bar it is compared with.
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
//!
//! A containerd node runs the real kubelet and Debian's containerd + runc with the
//! reference CNI plugins (containerd's own `conf_template`, rendered from the same pod
//! range), in a mount namespace of its own that covers the paths the kubelet and
//! containerd hard-code (`/var/lib/kubelet`, `/var/log/pods`, `/run/containerd`...);
//! the kubelet has no `--pod-routes`, so the fleet routes between those nodes itself,
//! as a cloud's route controller or flannel's host-gw would.

use crate::cluster::{
    pick_cgroup_root, run_timeout, stop_child, wait_for, Cluster, KubeBins, Options,
};
use crate::{sh, unique, Netns};
use serde_json::Value;
use std::path::PathBuf;
use std::process::{Child, Command};
use std::sync::Mutex;
use std::time::Duration;

/// What runs a fleet's pods.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Flavour {
    /// crustd and the crustlet.
    Crust,
    /// The real kubelet v1.28.7 on containerd + runc.
    Containerd,
}

/// One node of the fleet.
pub struct FleetNode {
    pub name: String,
    pub ns: Netns,
    /// Its InternalIP, on the fabric.
    pub ip: String,
    /// Its files: crustd's root and state, the crustlet's root and pod logs.
    pub dir: PathBuf,
    /// Its runtime's CRI socket.
    pub socket: PathBuf,
    pub cgroup_root: String,
    /// crustd or containerd.
    runtime: Mutex<Option<Child>>,
    /// The crustlet or the kubelet.
    agent: Mutex<Option<Child>>,
    kube_proxy: Mutex<Option<Child>>,
    /// The holder of a containerd node's mount namespace.
    holder: Mutex<Option<Child>>,
    holder_pid: std::sync::atomic::AtomicU32,
}

pub struct Fleet {
    pub cluster: Cluster,
    pub flavour: Flavour,
    pub fabric: Netns,
    pub nodes: Vec<FleetNode>,
    crustd_bin: PathBuf,
    crustlet_bin: PathBuf,
    cni_bin_dirs: Vec<PathBuf>,
    /// The cluster's registry as the nodes reach it (`host:port`).
    mirror: String,
    /// crustd's `--log-level`.
    crustd_log: &'static str,
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
        Self::start_flavour(bins, crustd_bin, cni_bin_dirs, n, Flavour::Crust)
    }

    /// [`Fleet::start`] of nodes of `flavour`.
    pub fn start_flavour(
        bins: KubeBins,
        crustd_bin: PathBuf,
        cni_bin_dirs: Vec<PathBuf>,
        n: usize,
        flavour: Flavour,
    ) -> Fleet {
        Self::start_logging(bins, crustd_bin, cni_bin_dirs, n, flavour, "debug")
    }

    /// [`Fleet::start_flavour`] with crustd logging at `crustd_log` (the suites want
    /// `debug` to explain a failure; a benchmark wants `info`, as containerd runs).
    pub fn start_logging(
        bins: KubeBins,
        crustd_bin: PathBuf,
        cni_bin_dirs: Vec<PathBuf>,
        n: usize,
        flavour: Flavour,
        crustd_log: &'static str,
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
        // The registry itself over plain HTTP (containerd's sandbox image is there).
        let own = cluster.path(&format!("fleet-certs.d/{mirror}"));
        std::fs::create_dir_all(&own).unwrap();
        std::fs::write(
            own.join("hosts.toml"),
            format!("server = \"http://{mirror}\"\n\n[host.\"http://{mirror}\"]\n  capabilities = [\"pull\", \"resolve\"]\n"),
        )
        .unwrap();
        let mut nodes = vec![];
        for i in 0..n {
            let name = match flavour {
                Flavour::Crust => format!("crust-{i}"),
                Flavour::Containerd => format!("kubelet-{i}"),
            };
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
            for d in [
                "root",
                "state",
                "cni",
                "ipam",
                "crustlet",
                "pods",
                "kubelet",
                "containers",
                "ctrd-run",
                "runc",
                "kubelet-certs",
            ] {
                std::fs::create_dir_all(dir.join(d)).unwrap();
            }
            let cgroup_root = pick_cgroup_root(&unique(&format!("crust-fleet{i}-")));
            cluster.make_cgroup_root(&cgroup_root);
            let socket = match flavour {
                Flavour::Crust => dir.join("state/crust.sock"),
                Flavour::Containerd => dir.join("state/containerd.sock"),
            };
            nodes.push(FleetNode {
                socket,
                name,
                ns,
                ip,
                dir,
                cgroup_root,
                runtime: Mutex::new(None),
                agent: Mutex::new(None),
                kube_proxy: Mutex::new(None),
                holder: Mutex::new(None),
                holder_pid: Default::default(),
            });
        }
        if flavour == Flavour::Containerd {
            // Bind targets must exist on the host.
            let targets: Vec<(PathBuf, PathBuf)> = crate::cluster::KUBELET_DIRS
                .iter()
                .chain(&["/run/containerd"])
                .map(|d| (PathBuf::new(), PathBuf::from(d)))
                .collect();
            cluster.make_host_dirs(&targets);
        }
        let f = Fleet {
            cluster,
            flavour,
            fabric,
            nodes,
            crustd_bin,
            crustlet_bin,
            cni_bin_dirs,
            mirror,
            crustd_log,
            torn_down: Mutex::new(false),
        };
        // A node that does not come up takes the whole fleet down with it: nothing of
        // the nodes started before is left running.
        let up = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            for i in 0..n {
                f.node_kubeconfig(i);
                if flavour == Flavour::Containerd {
                    f.mount_namespace(i);
                }
                f.start_runtime(i);
                f.start_agent(i);
                f.start_kube_proxy(i);
            }
            f.wait_ready(Duration::from_secs(120));
        }));
        if let Err(e) = up {
            f.teardown();
            std::panic::resume_unwind(e);
        }
        f
    }

    /// A containerd node's mount namespace: the kubelet's fixed paths, containerd's
    /// shim sockets and the kubelet's tunables covered by the node's own files.
    fn mount_namespace(&self, i: usize) {
        let node = &self.nodes[i];
        let mut binds: Vec<(PathBuf, PathBuf)> = crate::cluster::KUBELET_DIRS
            .iter()
            .zip(["kubelet", "pods", "containers"])
            .map(|(d, src)| (node.dir.join(src), PathBuf::from(d)))
            .collect();
        binds.push((node.dir.join("ctrd-run"), PathBuf::from("/run/containerd")));
        binds.extend(self.cluster.sysctl_binds(&node.dir.join("sysctl")));
        let child = self.cluster.mount_holder(
            &node.ns.path(),
            &format!("{}-mount-namespace", node.name),
            &binds,
        );
        node.holder_pid
            .store(child.id(), std::sync::atomic::Ordering::SeqCst);
        *node.holder.lock().unwrap() = Some(child);
    }

    /// Starts node `i`'s runtime: crustd or containerd.
    pub fn start_runtime(&self, i: usize) {
        match self.flavour {
            Flavour::Crust => self.start_crustd(i),
            Flavour::Containerd => self.start_containerd(i),
        }
    }

    /// Starts node `i`'s agent: the crustlet or the kubelet.
    pub fn start_agent(&self, i: usize) {
        match self.flavour {
            Flavour::Crust => self.start_crustlet(i),
            Flavour::Containerd => self.start_kubelet(i),
        }
    }

    /// The CNI config template of node `i`: a bridge `cni0` with the Node's pod range,
    /// no masquerade (pods keep their addresses to other nodes' pods; kube-proxy
    /// masquerades what leaves the cluster range for a Service), hairpin, portmap. The
    /// same for crust's plugins and the reference ones.
    fn cni_template(&self, i: usize) -> PathBuf {
        let node = &self.nodes[i];
        // containerd's template language (Go's `range`), which crustd renders too.
        let template = format!(
            r#"{{
  "cniVersion": "1.0.0",
  "name": "crust-fleet",
  "plugins": [{{
    "type": "bridge",
    "bridge": "cni0",
    "isGateway": true,
    "ipMasq": false,
    "hairpinMode": true,
    "ipam": {{
      "type": "host-local",
      "dataDir": "{}",
      "ranges": [{{{{range $i, $range := .PodCIDRRanges}}}}{{{{if $i}}}}, {{{{end}}}}[{{"subnet": "{{{{$range}}}}"}}]{{{{end}}}}],
      "routes": [{{{{range $i, $route := .Routes}}}}{{{{if $i}}}}, {{{{end}}}}{{"dst": "{{{{$route}}}}"}}{{{{end}}}}]
    }}
  }}, {{
    "type": "portmap",
    "capabilities": {{"portMappings": true}},
    "snat": true
  }}]
}}
"#,
            node.dir.join("ipam").display()
        );
        let tpl = node.dir.join("cni-template.json");
        std::fs::write(&tpl, template).unwrap();
        tpl
    }

    /// Starts node `i`'s containerd (in its mount namespace) and waits for its socket.
    fn start_containerd(&self, i: usize) {
        let node = &self.nodes[i];
        let tpl = self.cni_template(i);
        let certs = self.cluster.path("fleet-certs.d");
        // The sandbox image from the registry as the nodes reach it.
        let pause = self.cluster.pause_image.split_once('/').map_or_else(
            || self.cluster.pause_image.clone(),
            |(_, path)| format!("{}/{path}", self.mirror),
        );
        let cfg = node.dir.join("containerd.toml");
        std::fs::write(
            &cfg,
            crate::containerd::config_toml(&crate::containerd::Config {
                root: &node.dir.join("root"),
                state: &node.dir.join("state"),
                socket: &node.socket,
                log_level: "info",
                pause_image: &pause,
                cni_conf_dir: &node.dir.join("cni"),
                runc_root: &node.dir.join("runc"),
                certs: Some(&certs),
                conf_template: Some(&tpl),
                cni_bin_dir: None,
            }),
        )
        .unwrap();
        let mut cmd = self.node_cmd(i, crate::which("containerd").expect("containerd"));
        cmd.arg("--config").arg(&cfg);
        let log = format!("{}-containerd", node.name);
        *node.runtime.lock().unwrap() = Some(self.cluster.spawn_serving(cmd, &log, &node.socket));
    }

    /// Starts node `i`'s kubelet as the cluster's own kubelet runs (the same flags), as
    /// `system:node:<name>`.
    fn start_kubelet(&self, i: usize) {
        let node = &self.nodes[i];
        let resolv = node.dir.join("resolv.conf");
        std::fs::write(&resolv, "nameserver 127.0.0.1\n").unwrap();
        let mut cmd = self.node_cmd(i, &self.cluster.bins.kubelet);
        cmd.arg(format!(
            "--kubeconfig={}",
            node.dir.join("kubeconfig").display()
        ))
        .arg(format!(
            "--container-runtime-endpoint=unix://{}",
            node.socket.display()
        ))
        .arg(format!("--cgroup-root={}", node.cgroup_root))
        .arg(format!("--hostname-override={}", node.name))
        .arg(format!("--node-ip={}", node.ip))
        .arg(format!(
            "--cert-dir={}",
            node.dir.join("kubelet-certs").display()
        ))
        .arg(format!("--resolv-conf={}", resolv.display()))
        .args(self.cluster.server_auth_args())
        .args(crate::cluster::kubelet_common_args());
        let child = self
            .cluster
            .spawn_logged(cmd, &format!("{}-kubelet", node.name));
        *node.agent.lock().unwrap() = Some(child);
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
    /// A containerd node's commands run in its mount namespace too.
    pub fn node_cmd(&self, i: usize, program: impl AsRef<std::ffi::OsStr>) -> Command {
        let mut c = Command::new("nsenter");
        let holder = self.nodes[i]
            .holder_pid
            .load(std::sync::atomic::Ordering::SeqCst);
        if holder != 0 {
            c.arg(format!("--mount=/proc/{holder}/ns/mnt"));
        }
        c.arg(format!("--net={}", self.nodes[i].ns.path().display()))
            .arg("--")
            .arg(program);
        c
    }

    /// Starts node `i`'s crustd and waits for its socket: its pod network is its CNI
    /// template, rendered when the crustlet sends the Node's pod range.
    fn start_crustd(&self, i: usize) {
        let node = &self.nodes[i];
        let tpl = self.cni_template(i);
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
        cmd.args(["--cgroup-root", "/", "--log-level", self.crustd_log]);
        let log = format!("{}-crustd", node.name);
        *node.runtime.lock().unwrap() = Some(self.cluster.spawn_serving(cmd, &log, &node.socket));
    }

    /// Starts node `i`'s crustlet, with `--pod-routes`.
    fn start_crustlet(&self, i: usize) {
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
        *node.agent.lock().unwrap() = Some(child);
    }

    /// SIGTERM to node `i`'s agent (SIGKILL after 10 s).
    pub fn stop_agent(&self, i: usize) {
        if let Some(c) = self.nodes[i].agent.lock().unwrap().take() {
            stop_child(c, Duration::from_secs(10));
        }
    }

    /// SIGKILL to node `i`'s runtime.
    pub fn kill_runtime(&self, i: usize) {
        if let Some(mut c) = self.nodes[i].runtime.lock().unwrap().take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Node `i` as a machine that lost its power: its link to the fabric cut, its
    /// daemons killed, and every process of its pods and of its namespace killed
    /// (SIGKILL, no clean-up). Its files stay, as a disk does.
    pub fn power_off(&self, i: usize) {
        let node = &self.nodes[i];
        self.fabric
            .sh(&["ip", "link", "set", &format!("fn{i}"), "down"]);
        if let Some(mut c) = node.agent.lock().unwrap().take() {
            let _ = c.kill();
            let _ = c.wait();
        }
        if let Some(mut c) = node.kube_proxy.lock().unwrap().take() {
            let _ = c.kill();
            let _ = c.wait();
        }
        self.kill_runtime(i);
        for pid in cgroup_pids(&node.cgroup_root)
            .into_iter()
            .chain(netns_pids(&node.ns.name))
        {
            // SAFETY: killing what runs in a node this fleet made.
            unsafe { libc::kill(pid, libc::SIGKILL) };
        }
    }

    /// Node `i` back after [`Fleet::power_off`]: its link up, crustd (which finds its
    /// pods' processes gone), the crustlet and kube-proxy started again.
    pub fn power_on(&self, i: usize) {
        self.fabric
            .sh(&["ip", "link", "set", &format!("fn{i}"), "up"]);
        self.start_runtime(i);
        self.start_agent(i);
        self.start_kube_proxy(i);
    }

    /// The addresses node `i`'s host-local holds (its data dir's reservations).
    pub fn reserved_ips(&self, i: usize) -> Vec<String> {
        let dir = self.nodes[i].dir.join("ipam/crust-fleet");
        let mut v: Vec<String> = std::fs::read_dir(dir)
            .map(|rd| {
                rd.flatten()
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .filter(|n| n.parse::<std::net::IpAddr>().is_ok())
                    .collect()
            })
            .unwrap_or_default();
        v.sort();
        v
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
    /// namespace to each range (the apiserver's calls to webhooks in pods), and, on
    /// containerd nodes, each node to the others' ranges.
    pub fn wait_ready(&self, limit: Duration) {
        for (i, node) in self.nodes.iter().enumerate() {
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
            let mut routed = vec![self.cluster.node.name.clone()];
            if self.flavour == Flavour::Containerd {
                routed.extend(
                    self.nodes
                        .iter()
                        .enumerate()
                        .filter(|(j, _)| *j != i)
                        .map(|(_, other)| other.ns.name.clone()),
                );
            }
            for ns in routed {
                let _ = run_timeout(
                    Command::new("ip").args(["-n", &ns, "route", "replace", cidr, "via", &node.ip]),
                    Duration::from_secs(10),
                );
            }
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
            self.stop_agent(i);
            if let Some(mut c) = node.kube_proxy.lock().unwrap().take() {
                let _ = c.kill();
                let _ = c.wait();
            }
            if node.runtime.lock().unwrap().is_some() {
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
            self.kill_runtime(i);
            if let Some(mut c) = node.holder.lock().unwrap().take() {
                let _ = c.kill();
                let _ = c.wait();
            }
            // Whatever still runs in the node's namespace (a pod's processes, were its
            // removal to fail) goes with it.
            for p in netns_pids(&node.ns.name) {
                // SAFETY: killing what runs in a namespace this fleet made.
                unsafe { libc::kill(p, libc::SIGKILL) };
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

/// The processes in network namespace `ns`.
fn netns_pids(ns: &str) -> Vec<i32> {
    let out = run_timeout(
        Command::new("ip").args(["netns", "pids", ns]),
        Duration::from_secs(10),
    );
    s(&out.stdout)
        .split_whitespace()
        .filter_map(|p| p.parse().ok())
        .collect()
}

/// The processes in the cgroups below `root`, in every hierarchy.
fn cgroup_pids(root: &str) -> Vec<i32> {
    let mut dirs = vec![];
    for mount in cgroup_mounts() {
        crate::crustd::walk_dirs(&mount.join(root.trim_start_matches('/')), &mut dirs);
    }
    let mut pids: Vec<i32> = dirs
        .iter()
        .flat_map(|d| {
            std::fs::read_to_string(d.join("cgroup.procs"))
                .unwrap_or_default()
                .split_whitespace()
                .filter_map(|p| p.parse().ok())
                .collect::<Vec<i32>>()
        })
        .collect();
    pids.sort();
    pids.dedup();
    pids
}

/// Where each cgroup hierarchy is mounted.
fn cgroup_mounts() -> Vec<PathBuf> {
    let text = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    text.lines()
        .filter_map(|line| {
            let (pre, post) = line.split_once(" - ")?;
            post.starts_with("cgroup")
                .then(|| PathBuf::from(pre.split_whitespace().nth(4).unwrap_or("")))
        })
        .collect()
}

/// The cgroups below `root` in every hierarchy, deepest first (the root itself is the
/// cluster's to remove).
fn remove_cgroups(root: &str) {
    let mut dirs = vec![];
    for mount in cgroup_mounts() {
        crate::crustd::walk_dirs(&mount.join(root.trim_start_matches('/')), &mut dirs);
    }
    dirs.sort_by_key(|d| std::cmp::Reverse(d.components().count()));
    for d in dirs {
        let _ = std::fs::remove_dir(&d);
    }
}
