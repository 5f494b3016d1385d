//! The node agents: the real kubelet, the crustlet on its crustd, the crustlet of the
//! containerd node, and kube-proxy; served as kubeadm has a kubelet serve, the crustlets'
//! Nodes tainted once they register, and the wait for the kubelet's Node to be Ready.

use super::process::{run_timeout, s, stop_child, wait_for};
use super::{Cluster, CONTAINERD_NODE, CRUSTLET_NODE, CRUSTLET_TAINT, NODE};
use std::time::Duration;

/// Hard eviction thresholds of every node agent in the cluster: low enough that a test
/// machine's busy disk puts no node under pressure.
const EVICTION_HARD: &str =
    "memory.available<1Mi,nodefs.available<1%,nodefs.inodesFree<1%,imagefs.available<1%";

/// The kubelet's flags beyond its node's own (name, IP, paths, credentials): the same
/// for the cluster's kubelet and a fleet's.
pub(crate) fn kubelet_common_args() -> Vec<String> {
    [
        "--cgroup-driver=cgroupfs",
        "--fail-swap-on=false",
        "--root-dir=/var/lib/kubelet",
        "--read-only-port=0",
        "--node-status-update-frequency=4s",
        &format!("--eviction-hard={EVICTION_HARD}"),
        "--eviction-minimum-reclaim=",
        "--image-gc-high-threshold=100",
        "--image-gc-low-threshold=99",
        "--serialize-image-pulls=false",
        // The crustlet's default, which kubeadm sets too.
        "--cluster-domain=cluster.local",
        "--v=2",
    ]
    .iter()
    .map(|a| a.to_string())
    .chain([feature_gates()])
    .collect()
}

/// The summary API and /metrics/cadvisor from the runtime's CRI stats and metrics
/// (ListPodSandboxStats, ListPodSandboxMetrics), not cAdvisor's; plus
/// `CRUST_KUBELET_FEATURE_GATES` (`EventedPLEG=true` runs the kubelet on crustd's
/// GetContainerEvents stream instead of its relist).
fn feature_gates() -> String {
    let mut gates = "SidecarContainers=true,PodAndContainerStatsFromCRI=true".to_string();
    if let Ok(more) = std::env::var("CRUST_KUBELET_FEATURE_GATES") {
        if !more.trim().is_empty() {
            gates.push(',');
            gates.push_str(more.trim());
        }
    }
    format!("--feature-gates={gates}")
}

impl Cluster {
    /// How kubeadm has a kubelet serve, for the kubelet and both crustlets: no
    /// anonymous requests, client certificates of the cluster's CA, bearer tokens through
    /// TokenReview, every request a SubjectAccessReview.
    pub(crate) fn server_auth_args(&self) -> [String; 4] {
        [
            "--anonymous-auth=false".into(),
            format!("--client-ca-file={}", self.path("pki/ca.pem").display()),
            "--authentication-token-webhook=true".into(),
            "--authorization-mode=Webhook".into(),
        ]
    }

    pub fn start_kubelet(&self) {
        self.start_kubelet_with(&[]);
    }

    /// [`Cluster::start_kubelet`] with flags added last (they win over the defaults:
    /// `--max-pods=250` for the density benchmark).
    pub fn start_kubelet_with(&self, extra: &[String]) {
        let mut guard = self.kubelet.lock().unwrap();
        assert!(guard.is_none(), "kubelet already running");
        std::fs::write(self.path("resolv.conf"), "nameserver 127.0.0.1\n").unwrap();
        let p = |r: &str| self.path(r).display().to_string();
        let mut cmd = self.node_cmd(&self.bins.kubelet);
        cmd.arg(format!("--kubeconfig={}", p("kubelet.kubeconfig")))
            .arg(format!(
                "--container-runtime-endpoint=unix://{}",
                self.socket.display()
            ))
            .arg(format!("--cgroup-root={}", self.cgroup_root))
            .arg(format!("--hostname-override={NODE}"))
            .arg(format!("--node-ip={}", self.ip))
            .arg(format!("--cert-dir={}", p("kubelet-certs")))
            .arg(format!("--resolv-conf={}", p("resolv.conf")))
            .args(self.server_auth_args())
            .args(kubelet_common_args())
            // `SyncPod enter`/`exit` of each pod (kubelet.go's V(4), that file alone): the
            // restart checks wait for the syncs after a restart, not for a while.
            .arg("--vmodule=kubelet=4")
            .args(self.opts.agent_args)
            .args(extra);
        *guard = Some(self.spawn_logged(cmd, "kubelet"));
    }

    pub fn kubelet_pid(&self) -> Option<u32> {
        self.kubelet.lock().unwrap().as_ref().map(|c| c.id())
    }

    /// Stops the kubelet (SIGTERM, then SIGKILL after 10 s).
    pub fn stop_kubelet(&self) {
        if let Some(c) = self.kubelet.lock().unwrap().take() {
            stop_child(c, Duration::from_secs(10));
        }
    }

    /// Whether the kubelet still runs (it exits when it cannot validate the runtime).
    pub fn kubelet_running(&self) -> bool {
        match self.kubelet.lock().unwrap().as_mut() {
            Some(c) => c.try_wait().map(|s| s.is_none()).unwrap_or(false),
            None => false,
        }
    }

    /// Waits until the node reports Ready (panics with the kubelet's log tail if the
    /// kubelet exits first).
    pub fn wait_node_ready(&self, limit: Duration) -> serde_json::Value {
        wait_for("the node to be Ready", limit, |last| {
            if !self.kubelet_running() {
                let log = self.log("kubelet");
                let tail: Vec<&str> = log.lines().rev().take(15).collect();
                panic!(
                    "the kubelet exited:\n{}",
                    tail.into_iter().rev().collect::<Vec<_>>().join("\n")
                );
            }
            let out = run_timeout(
                &mut self.kubectl(&["get", "node", NODE, "-o", "json"]),
                Duration::from_secs(20),
            );
            if !out.status.success() {
                *last = s(&out.stderr);
                return None;
            }
            let v: serde_json::Value = serde_json::from_slice(&out.stdout).ok()?;
            let ready = v["status"]["conditions"]
                .as_array()?
                .iter()
                .find(|c| c["type"] == "Ready")?
                .clone();
            *last = ready.to_string();
            (ready["status"] == "True").then_some(v)
        })
    }

    /// Starts the crustlet on its crustd, in the node's namespaces (for the cgroup
    /// mounts the kubelet's copy of `/sys` would hide; it writes only below the
    /// cluster's dir): its own node name and IP, root and pod logs dirs, cgroup root and
    /// a folder of static pod manifests.
    pub fn start_crustlet(&self) {
        self.start_crustlet_with(&[]);
    }

    /// [`Cluster::start_crustlet`] with flags added last.
    pub fn start_crustlet_with(&self, extra: &[String]) {
        let mut guard = self.crustlet.lock().unwrap();
        assert!(guard.is_none(), "crustlet already running");
        let p = |r: &str| self.path(r).display().to_string();
        let mut cmd = self.node_cmd(&self.crustlet_bin);
        cmd.arg(format!("--kubeconfig={}", p("crustlet.kubeconfig")))
            .arg(format!(
                "--container-runtime-endpoint=unix://{}",
                self.crustlet_socket.display()
            ))
            .arg(format!("--hostname-override={CRUSTLET_NODE}"))
            .arg(format!("--node-ip={}", self.crustlet_ip))
            .arg(format!("--root-dir={}", p("crustlet-root")))
            .arg(format!("--pod-logs-dir={}", p("crustlet-pods")))
            .arg(format!("--cgroup-root={}", self.crustlet_cgroup_root))
            .arg(format!("--pod-manifest-path={}", p("crustlet-manifests")))
            // The kubelet has 10250 on every address of the node namespace.
            .args(["--port", "10251"])
            .args(self.server_auth_args())
            // The kubelet's relaxed thresholds: a CI disk full of build output must not
            // put the node under DiskPressure (and its pods under the taint).
            .arg(format!("--eviction-hard={EVICTION_HARD}"))
            // Routes to the pod CIDRs of other Nodes: none here has one but the peers
            // of the kubelet suite's pod routes check.
            .arg("--pod-routes")
            .args(["--v", "2"])
            .args(self.opts.agent_args)
            .args(extra);
        *guard = Some(self.spawn_logged(cmd, "crustlet"));
    }

    /// SIGKILL of the kubelet, as the OOM killer or a crash would end it: no cleanup.
    pub fn kill_kubelet(&self) {
        if let Some(mut c) = self.kubelet.lock().unwrap().take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// SIGKILL of the crustlet on crustd, as a crash.
    pub fn kill_crustlet(&self) {
        if let Some(mut c) = self.crustlet.lock().unwrap().take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// SIGTERM to the crustlet (its pods keep running), waiting for it to exit (SIGKILL
    /// after 10 s); its exit status.
    pub fn stop_crustlet(&self) -> Option<std::process::ExitStatus> {
        let c = self.crustlet.lock().unwrap().take()?;
        stop_child(c, Duration::from_secs(10))
    }

    pub fn crustlet_running(&self) -> bool {
        match self.crustlet.lock().unwrap().as_mut() {
            Some(c) => c.try_wait().map(|s| s.is_none()).unwrap_or(false),
            None => false,
        }
    }

    pub fn crustlet_pid(&self) -> Option<u32> {
        self.crustlet.lock().unwrap().as_ref().map(|c| c.id())
    }

    /// Waits for the crustlet's Node to register, then taints it NoSchedule: before any
    /// check runs, so no pod without the toleration is ever scheduled there.
    pub(super) fn taint_crustlet_node(&self) {
        self.taint_node(CRUSTLET_NODE, || self.crustlet_running(), "crustlet");
    }

    /// Puts [`CRUSTLET_TAINT`] on Node `name` (NoSchedule), or takes it off.
    pub fn set_taint(&self, name: &str, on: bool) {
        let taint = if on {
            format!("{CRUSTLET_TAINT}=true:NoSchedule")
        } else {
            format!("{CRUSTLET_TAINT}:NoSchedule-")
        };
        let out = run_timeout(
            &mut self.kubectl(&["taint", "node", name, &taint, "--overwrite"]),
            Duration::from_secs(20),
        );
        // Taking off a taint the node does not have is not an error here.
        assert!(
            out.status.success() || (!on && s(&out.stderr).contains("not found")),
            "tainting the node {name}: {}",
            s(&out.stderr)
        );
    }

    /// Waits for Node `name` to register (its crustlet, logging to `log`, must keep
    /// running), then taints it with [`CRUSTLET_TAINT`].
    pub(super) fn taint_node(&self, name: &str, running: impl Fn() -> bool, log: &str) {
        wait_for(
            &format!("the Node {name} to register"),
            Duration::from_secs(60),
            |last| {
                if !running() {
                    panic!("the crustlet of {name} exited: {}", self.log(log));
                }
                let out = run_timeout(
                    &mut self.kubectl(&["get", "node", name, "-o", "name"]),
                    Duration::from_secs(20),
                );
                *last = s(&out.stderr);
                out.status.success().then_some(())
            },
        );
        self.set_taint(name, true);
    }

    /// Starts the crustlet of the containerd node ([`CONTAINERD_NODE`]): as
    /// [`Cluster::start_crustlet`], on containerd's socket, with its own IP, root and
    /// pod logs dirs, cgroup root and token.
    pub fn start_containerd_crustlet(&self) {
        let mut guard = self.containerd_crustlet.lock().unwrap();
        assert!(
            guard.is_none(),
            "the containerd node's crustlet already running"
        );
        let p = |r: &str| self.path(r).display().to_string();
        let mut cmd = self.node_cmd(&self.crustlet_bin);
        cmd.arg(format!("--kubeconfig={}", p("ctrdlet.kubeconfig")))
            .arg(format!(
                "--container-runtime-endpoint=unix://{}",
                self.containerd_socket.display()
            ))
            .arg(format!("--hostname-override={CONTAINERD_NODE}"))
            .arg(format!("--node-ip={}", self.containerd_ip))
            .arg(format!("--root-dir={}", p("ctrdlet-root")))
            .arg(format!("--pod-logs-dir={}", p("ctrdlet-pods")))
            .arg(format!("--cgroup-root={}", self.containerd_cgroup_root))
            .args(["--port", "10252"])
            .args(self.server_auth_args())
            // The kubelet's relaxed thresholds: a CI disk full of build output must not
            // put the node under DiskPressure (and its pods under the taint).
            .arg(format!("--eviction-hard={EVICTION_HARD}"))
            .args(["--v", "2"]);
        *guard = Some(self.spawn_logged(cmd, "ctrdlet"));
    }

    pub fn containerd_crustlet_running(&self) -> bool {
        match self.containerd_crustlet.lock().unwrap().as_mut() {
            Some(c) => c.try_wait().map(|s| s.is_none()).unwrap_or(false),
            None => false,
        }
    }

    /// (Re)starts kube-proxy v1.28 in the node namespace (iptables mode, as kubeadm runs
    /// it) as Node `node` at `ip`. The node namespace holds every node of the cluster,
    /// so one kube-proxy serves them all; its name and IP are those of the node under
    /// test (a NodePort answers on every address either way). Pod-to-Service replies
    /// between pods on one bridge go back through conntrack because bridged traffic
    /// passes iptables (`bridge-nf-call-iptables`, on by default in a new namespace),
    /// and a pod reaching itself through its Service comes back through the bridge's
    /// hairpin mode (the CNI config's `hairpinMode`).
    pub fn start_kube_proxy(&self, node: &str, ip: &str) {
        self.stop_kube_proxy();
        let mut cmd = self.net_cmd(&self.bins.kube_proxy);
        // The nodes' pod ranges (10.<n>.0-2.0/24).
        cmd.args(self.kube_proxy_args(node, ip, &format!("10.{}.0.0/22", self.subnet)));
        *self.kube_proxy.lock().unwrap() = Some(self.spawn_logged(cmd, "kube-proxy"));
    }

    /// kube-proxy's arguments, as kubeadm runs it (iptables mode), for Node `node` at
    /// `ip` with the pods in `cluster_cidr` (traffic to a Service from elsewhere is
    /// masqueraded): this cluster's and the fleet's nodes alike.
    pub(crate) fn kube_proxy_args(&self, node: &str, ip: &str, cluster_cidr: &str) -> Vec<String> {
        vec![
            format!("--kubeconfig={}", self.path("admin.kubeconfig").display()),
            format!("--hostname-override={node}"),
            format!("--bind-address={ip}"),
            format!("--cluster-cidr={cluster_cidr}"),
            "--proxy-mode=iptables".into(),
            // nf_conntrack_max is the host's, not the namespace's: leave it.
            "--conntrack-max-per-core=0".into(),
            "--v=2".into(),
        ]
    }

    /// Stops kube-proxy (its rules stay until the next one resyncs them).
    pub fn stop_kube_proxy(&self) {
        if let Some(mut c) = self.kube_proxy.lock().unwrap().take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}
