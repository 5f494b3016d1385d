//! A Kubernetes v1.28 cluster around crustd, for the kubelet suite
//! (tests/tests/cluster/kubelet.rs): etcd, kube-apiserver, kube-controller-manager and
//! kube-scheduler, the real kubelet with crustd as its runtime, the crustlet with a
//! crustd of its own as a second node (tainted NoSchedule once it registers), with
//! [`Options::containerd`] a third node on Debian's containerd + runc (the crustlet's
//! `crustlet-containerd`, tainted the same way, or the kubelet itself, for the pod
//! start benchmark), and a registry with a busybox image and a pause image, all inside
//! a node network namespace the cluster makes (with a veth pair per node whose one end
//! carries the node IP: the kubelet refuses a loopback node IP).
//!
//! The kubelet and crustd share a private mount namespace (held by a `sleep` started
//! under `unshare --mount`), where temp dirs are bind-mounted over the paths the kubelet
//! hard-codes (`/var/lib/kubelet`, `/var/log/pods`, `/var/log/containers`) and temp
//! files over the `/proc/sys` tunables it writes at start, so the host's are never
//! changed. crustd must live there too: it writes the CRI logs under `/var/log/pods`
//! and bind-mounts the kubelet's volumes into containers. Pod cgroups go under a
//! cgroup made below the test's own (the kubelet's `--cgroup-root`); with
//! [`Options::agent_cgroups`] each daemon runs in a memory cgroup of its own beside them.
//!
//! Dropping the cluster stops everything, also after a failed check or a panic: the
//! kubelet, every pod through CRI, crustd, the control plane and the registry; then it
//! kills what is left in the namespaces and cgroups it made, removes those cgroups,
//! the network namespace, the temp dirs and the mount points it had to create.
//!
//! One file per part, [`Cluster::start_with`] the list of their steps: `bins` (the
//! Kubernetes binaries, and a suite that cannot run), `process` (commands in the node's
//! namespaces, daemons with a log each, deadlines), `namespaces` (the nodes' veths, the
//! shared mount namespace), `cgroups` (the agents' cgroup roots and memory cgroups),
//! `control_plane` (PKI, etcd, the apiserver, controller-manager and scheduler), `images`
//! (the registry and its images), `runtimes` (the crustds, containerd, their CNI
//! configs), `agents` (the kubelet, the crustlets, kube-proxy), `clients` (kubectl,
//! crictl, waiting for a pod) and `teardown`; and two the others use, public for the
//! benches: [`agent_cgroups`] (a daemon's memory cgroup and its figures) and
//! [`pod_watch`] (one `kubectl --watch` of every pod, for the waits).

mod agents;
mod bins;
mod cgroups;
mod clients;
mod control_plane;
mod images;
mod namespaces;
mod process;
mod reboot;
mod runtimes;
mod teardown;

pub mod agent_cgroups;
pub mod pod_watch;

pub(crate) use agents::kubelet_common_args;
pub use bins::{default_kube_bin_dir, kube_bin, kube_bins, skip_suite, suite_needs, KubeBins};
pub(crate) use cgroups::{cgroup_mounts, pick_cgroup_root};
pub use clients::{run_ok, watch_events};
pub(crate) use namespaces::KUBELET_DIRS;
pub(crate) use process::stop_child;
pub use process::{run_timeout, run_timeout_input, wait_for};
pub use reboot::Machine;

use crate::registry::Registry;
use crate::{unique, Netns, TempDir};
use std::path::PathBuf;
use std::process::Child;
use std::sync::Mutex;
use std::time::Duration;

/// The first node: the real kubelet on crustd (or on containerd, with
/// [`ContainerdFor::Kubelet`]).
pub const NODE: &str = "crust-node";

/// The second node: the crustlet on a crustd of its own.
pub const CRUSTLET_NODE: &str = "crustlet-node";

/// The taint the crustlet's node gets once it registers, so that the kubelet checks'
/// pods (and controllers' pods without a toleration) never land there.
pub const CRUSTLET_TAINT: &str = "crust.test/crustlet";

/// The third node: a crustlet on containerd (tainted as the second).
pub const CONTAINERD_NODE: &str = "crustlet-containerd";

/// The user of the apiserver's client certificate to the nodes' servers (as kubeadm
/// names it), bound to the built-in ClusterRole `system:kubelet-api-admin`.
pub const KUBELET_CLIENT: &str = "kube-apiserver-kubelet-client";

/// What the cluster runs beside the control plane and its first two nodes.
#[derive(Clone, Copy, Default, PartialEq, Eq, Debug)]
pub struct Options {
    /// containerd (Debian's 1.6/1.7, with runc and the reference CNI plugins), and who
    /// drives it.
    pub containerd: Option<ContainerdFor>,
    /// kube-proxy (iptables mode) in the node namespace, so that Services work from
    /// pods and from the node, as on any real node: see [`Cluster::start_kube_proxy`].
    pub kube_proxy: bool,
    /// The control plane (and the registry) only, no node agent in its namespace: the
    /// nodes are [`crate::fleet`]'s, each in a namespace of its own. The
    /// controller-manager then gives every Node a pod CIDR out of `10.<n>.0.0/17`.
    pub control_plane_only: bool,
    /// Each node agent and runtime (the kubelet, the crustlets, the crustds, containerd)
    /// in a memory cgroup of its own below [`Cluster::agents_cgroup_root`], named as its
    /// log ([`Cluster::agent_cgroup`]), each executable dropped from the page cache
    /// first: what each daemon costs the node, for the pods benchmark (see
    /// [`agent_cgroups`]). Off, they run in the suite's own cgroup.
    pub agent_cgroups: bool,
    /// crustd's `--log-level` (default `debug`, for the suites' logs): the benchmarks
    /// run it at `info`, as containerd runs, since logging each call costs CPU.
    pub crustd_log: Option<&'static str>,
    /// Flags the kubelet and the crustlet on crustd both take, given to both at every
    /// start (`--container-log-max-size=1Mi`: the faults suite's log flood).
    pub agent_args: &'static [&'static str],
}

/// Who runs pods on the cluster's containerd.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum ContainerdFor {
    /// A crustlet of its own, as node [`CONTAINERD_NODE`].
    Crustlet,
    /// The real kubelet (node [`NODE`]), in place of its crustd.
    Kubelet,
}

pub struct Cluster {
    pub bins: KubeBins,
    pub node: Netns,
    /// The node IP, on one end of a veth pair inside the node namespace.
    pub ip: String,
    /// Everything the cluster writes: PKI, kubeconfigs, etcd data, crustd's root and
    /// state, the dirs behind the kubelet's paths, and every process's log in `logs/`.
    pub dir: TempDir,
    /// `--cgroup-root` of the kubelet: a cgroup below the test's own.
    pub cgroup_root: String,
    /// crustd's socket.
    pub socket: PathBuf,
    /// The busybox image in the registry.
    pub image: String,
    registry: Mutex<Option<Registry>>,
    /// The holder of the node's mount namespace, and its pid (0 before it runs).
    holder: Mutex<Option<Child>>,
    holder_pid: u32,
    /// etcd, controller-manager, scheduler.
    control: Mutex<Vec<Child>>,
    /// kube-apiserver (apart, for a check to stop and start it).
    apiserver: Mutex<Option<Child>>,
    /// Set once [`Cluster::teardown`] has run (held while it runs).
    torn_down: Mutex<bool>,
    crustd: Mutex<Option<Child>>,
    kubelet: Mutex<Option<Child>>,
    kube_proxy: Mutex<Option<Child>>,
    /// Cgroup dirs (every hierarchy) that did not exist before, ancestors of
    /// `cgroup_root` included, removed at the end.
    made_cgroups: Vec<PathBuf>,
    /// Subnet byte of the pod network `10.<n>.0.0/24` (the crustlet's: `10.<n>.1.0/24`).
    pub subnet: u8,
    crustd_bin: PathBuf,
    /// The crustlet's node: its IP (on a second veth pair in the node namespace), its
    /// crustd's socket, its `--cgroup-root` (a sibling of the kubelet's), its crustd and
    /// itself. Its files are the `crustlet-*` entries of `dir`.
    pub crustlet_ip: String,
    pub crustlet_socket: PathBuf,
    pub crustlet_cgroup_root: String,
    crustlet_crustd: Mutex<Option<Child>>,
    crustlet: Mutex<Option<Child>>,
    crustlet_bin: PathBuf,
    /// crust's plugins first (`portmap` included), then the reference plugins' folder
    /// (containerd's node runs those).
    cni_bin_dirs: Vec<PathBuf>,
    pub opts: Options,
    /// The pause image in the registry (containerd's sandbox image).
    pub pause_image: String,
    /// An image in the registry no pod of the harness runs.
    pub spare_image: String,
    /// containerd's node (with [`Options::containerd`]): the crustlet's IP there (on a
    /// third veth pair), containerd's socket, the crustlet's `--cgroup-root`, containerd
    /// and the crustlet. Its files are the `ctrd-*` (containerd) and `ctrdlet-*`
    /// (crustlet) entries of `dir`.
    pub containerd_ip: String,
    pub containerd_socket: PathBuf,
    pub containerd_cgroup_root: String,
    containerd: Mutex<Option<Child>>,
    containerd_crustlet: Mutex<Option<Child>>,
    /// With [`Options::agent_cgroups`], the parent of the daemons' cgroups (a sibling of
    /// the pods' roots), and each daemon's cgroup by the name of its log.
    pub agents_cgroup_root: String,
    agent_cgroups: Vec<(String, PathBuf)>,
    /// Every pod, for [`Cluster::wait_pod`]: started by the first wait.
    pod_watch: std::sync::OnceLock<std::sync::Arc<pod_watch::PodWatch>>,
}

impl Cluster {
    /// Starts everything; panics (after cleaning up what it started) when a part does
    /// not come up.
    pub fn start(bins: KubeBins, crustd_bin: PathBuf, cni_bin_dirs: Vec<PathBuf>) -> Cluster {
        Self::start_with(bins, crustd_bin, cni_bin_dirs, Options::default())
    }

    /// [`Cluster::start`] with `opts`.
    pub fn start_with(
        bins: KubeBins,
        crustd_bin: PathBuf,
        cni_bin_dirs: Vec<PathBuf>,
        opts: Options,
    ) -> Cluster {
        let subnet = 240 + (std::process::id() % 12) as u8;
        let dir = TempDir::new("kube");
        for d in [
            "logs",
            "pki",
            "etcd",
            "crust-root",
            "crust-state",
            "cni",
            "ipam",
            "kubelet-certs",
            "sysctl",
            "layout",
            "mnt/kubelet",
            "mnt/pods",
            "mnt/containers",
            "crustlet-crust-root",
            "crustlet-crust-state",
            "crustlet-cni",
            "crustlet-ipam",
            "crustlet-root",
            "crustlet-pods",
            "crustlet-manifests",
            "ctrd-root",
            "ctrd-state",
            "ctrd-runc",
            "ctrd-run",
            "ctrd-cni",
            "ctrd-ipam",
            "ctrd-certs.d",
            "certs.d",
            "ctrdlet-root",
            "ctrdlet-pods",
        ] {
            std::fs::create_dir_all(dir.path().join(d)).unwrap();
        }
        let cgroup_root = pick_cgroup_root(&unique("crust-kube-"));
        let crustlet_cgroup_root = pick_cgroup_root(&unique("crust-let-"));
        let mut c = Cluster {
            bins,
            node: Netns::new("kn"),
            ip: format!("10.{subnet}.255.1"),
            socket: dir.path().join("crust-state/crust.sock"),
            crustlet_ip: format!("10.{subnet}.254.1"),
            crustlet_socket: dir.path().join("crustlet-crust-state/crust.sock"),
            crustlet_cgroup_root,
            crustlet_crustd: Mutex::new(None),
            crustlet: Mutex::new(None),
            crustlet_bin: crustd_bin.with_file_name("crustlet"),
            dir,
            cgroup_root,
            image: String::new(),
            registry: Mutex::new(None),
            holder: Mutex::new(None),
            holder_pid: 0,
            control: Mutex::new(Vec::new()),
            apiserver: Mutex::new(None),
            torn_down: Mutex::new(false),
            crustd: Mutex::new(None),
            kubelet: Mutex::new(None),
            kube_proxy: Mutex::new(None),
            made_cgroups: Vec::new(),
            subnet,
            crustd_bin,
            cni_bin_dirs,
            opts,
            pause_image: String::new(),
            spare_image: String::new(),
            containerd_ip: format!("10.{subnet}.253.1"),
            containerd_socket: PathBuf::new(),
            containerd_cgroup_root: pick_cgroup_root(&unique("crust-ctrd-")),
            containerd: Mutex::new(None),
            containerd_crustlet: Mutex::new(None),
            agents_cgroup_root: pick_cgroup_root(&unique("crust-agents-")),
            agent_cgroups: Vec::new(),
            pod_watch: std::sync::OnceLock::new(),
        };
        c.containerd_socket = c.path("ctrd-state/containerd.sock");
        if opts.containerd == Some(ContainerdFor::Kubelet) {
            // The kubelet's runtime (and crictl's) is containerd.
            c.socket = c.containerd_socket.clone();
        }
        c.network();
        c.pki();
        c.start_registry();
        c.start_control_plane();
        if opts.control_plane_only {
            return c;
        }
        c.mount_namespace();
        let root = c.cgroup_root.clone();
        c.make_cgroup_root(&root);
        let root = c.crustlet_cgroup_root.clone();
        c.make_cgroup_root(&root);
        if opts.containerd == Some(ContainerdFor::Crustlet) {
            let root = c.containerd_cgroup_root.clone();
            c.make_cgroup_root(&root);
        }
        if opts.agent_cgroups {
            c.make_agent_cgroups();
        }
        c.write_cni_conf();
        if opts.containerd.is_some() {
            c.start_containerd();
        }
        if opts.containerd != Some(ContainerdFor::Kubelet) {
            c.start_crustd();
        }
        if opts.kube_proxy {
            // As on any node, a default route: the node's own connections to a
            // Service (the apiserver's to a webhook) are routed before kube-proxy's
            // rules rewrite them, and without a route they fail at once.
            crate::sh(&[
                "ip",
                "-n",
                &c.node.name,
                "route",
                "add",
                "default",
                "dev",
                "knode0",
            ]);
            c.start_kube_proxy(NODE, &c.ip);
        }
        c.start_kubelet();
        c.start_crustlet_crustd();
        c.start_crustlet();
        if opts.containerd == Some(ContainerdFor::Crustlet) {
            c.start_containerd_crustlet();
        }
        c.taint_crustlet_node();
        if opts.containerd == Some(ContainerdFor::Crustlet) {
            c.taint_node(
                CONTAINERD_NODE,
                || c.containerd_crustlet_running(),
                "ctrdlet",
            );
        }
        c
    }

    /// Tears `cluster` down and exits with 128 + the signal when one of `signals` (the
    /// set [`crate::block_signals`] blocked) comes: a suite interrupted by Ctrl-C or a CI
    /// timeout's SIGTERM leaves nothing behind.
    pub fn teardown_on_signal(
        cluster: &std::sync::Arc<Cluster>,
        signals: libc::sigset_t,
        suite: &'static str,
    ) {
        let weak = std::sync::Arc::downgrade(cluster);
        crate::on_signal(signals, suite, move || {
            if let Some(c) = weak.upgrade() {
                c.teardown();
            }
        });
    }

    /// Keeps the cluster up until the file `<cluster dir>/release` appears, for a
    /// developer to look around (it prints how to reach it).
    pub fn hold(&self) {
        let release = self.path("release");
        println!(
            "holding the cluster: nsenter --net={} {} --kubeconfig={} ...; touch {} to tear it down",
            self.node.path().display(),
            self.bins.kubectl.display(),
            self.path("admin.kubeconfig").display(),
            release.display()
        );
        while !release.exists() {
            std::thread::sleep(Duration::from_millis(500));
        }
    }

    pub fn path(&self, rel: &str) -> PathBuf {
        self.dir.path().join(rel)
    }

    pub fn log_path(&self, name: &str) -> PathBuf {
        self.path("logs").join(format!("{name}.log"))
    }

    pub fn log(&self, name: &str) -> String {
        std::fs::read_to_string(self.log_path(name)).unwrap_or_default()
    }
}
