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

use crate::registry::Registry;
use crate::{run, unique, which, Netns, TempDir};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// The Kubernetes binaries the cluster runs.
#[derive(Clone)]
pub struct KubeBins {
    pub kubelet: PathBuf,
    pub apiserver: PathBuf,
    pub controller_manager: PathBuf,
    pub scheduler: PathBuf,
    pub kubectl: PathBuf,
    pub crictl: PathBuf,
    pub etcd: PathBuf,
    pub kube_proxy: PathBuf,
}

/// Where `hack/deps` unpacks the Kubernetes binaries (`<workspace>/target/kube-bin`).
pub fn default_kube_bin_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/kube-bin")
}

/// `name` from `$CRUST_KUBE_BIN`, else from where `hack/deps` unpacks them, else from
/// `PATH` (a kubectl there must be v1.2x or later: Debian's 1.20 is too old).
pub fn kube_bin(name: &str) -> Option<PathBuf> {
    if let Some(d) = std::env::var_os("CRUST_KUBE_BIN") {
        let p = PathBuf::from(d).join(name);
        return p.is_file().then_some(p);
    }
    let p = default_kube_bin_dir().join(name);
    if p.is_file() {
        return Some(p);
    }
    let p = which(name)?;
    if name == "kubectl" {
        let out = Command::new(&p)
            .args(["version", "--client", "-o", "json"])
            .output()
            .ok()?;
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).ok()?;
        let minor: u32 = v["clientVersion"]["minor"]
            .as_str()?
            .trim_end_matches('+')
            .parse()
            .ok()?;
        if minor < 26 {
            return None;
        }
    }
    Some(p)
}

/// Ends a cluster suite (its own harness) that cannot run: under `CI=true` a failure,
/// else a loud `SKIPPED` and libtest's summary with the suite ignored.
pub fn skip_suite(suite: &str, why: String) -> ! {
    if crate::ci() {
        eprintln!("{suite}: {why}; CI must run it");
        std::process::exit(1);
    }
    crate::say_skipped(&format!("{suite}: {why}"));
    println!("test result: ok. 0 passed; 0 failed; 1 ignored; 0 measured; 0 filtered out");
    std::process::exit(0);
}

/// What every cluster suite needs before it starts: root, `tools` on `PATH`, the
/// Kubernetes binaries and the reference `portmap` plugin (returned with its folder);
/// else [`skip_suite`].
pub fn suite_needs(suite: &str, tools: &[&str]) -> (KubeBins, PathBuf) {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        skip_suite(suite, "needs root".into());
    }
    let missing: Vec<&str> = tools
        .iter()
        .copied()
        .filter(|t| which(t).is_none())
        .collect();
    if !missing.is_empty() {
        skip_suite(
            suite,
            format!("needs {} (hack/deps installs them)", missing.join(", ")),
        );
    }
    let bins = kube_bins().unwrap_or_else(|m| {
        skip_suite(
            suite,
            format!(
                "no {} in $CRUST_KUBE_BIN, {} or PATH (hack/deps unpacks them)",
                m.join(", "),
                default_kube_bin_dir().display()
            ),
        )
    });
    let Some(portmap) = crate::reference_plugin("portmap") else {
        skip_suite(suite, "no reference portmap plugin".into())
    };
    (bins, portmap.parent().unwrap().to_path_buf())
}

/// The binaries, or what is missing.
pub fn kube_bins() -> Result<KubeBins, Vec<String>> {
    let mut missing = Vec::new();
    let mut get = |n: &str| {
        kube_bin(n).unwrap_or_else(|| {
            missing.push(n.to_string());
            PathBuf::new()
        })
    };
    let bins = KubeBins {
        kubelet: get("kubelet"),
        apiserver: get("kube-apiserver"),
        controller_manager: get("kube-controller-manager"),
        scheduler: get("kube-scheduler"),
        kubectl: get("kubectl"),
        crictl: get("crictl"),
        kube_proxy: get("kube-proxy"),
        etcd: which("etcd").unwrap_or_else(|| {
            missing.push("etcd (apt-get install etcd-server)".into());
            PathBuf::new()
        }),
    };
    if missing.is_empty() {
        Ok(bins)
    } else {
        Err(missing)
    }
}

/// The kernel tunables the kubelet sets at start (with `--protect-kernel-defaults`
/// off), each covered by a temp file in the node's mount namespace.
pub(crate) const SYSCTLS: &[&str] = &[
    "vm/overcommit_memory",
    "vm/panic_on_oom",
    "kernel/panic",
    "kernel/panic_on_oops",
    "kernel/keys/root_maxkeys",
    "kernel/keys/root_maxbytes",
];

/// The paths the kubelet hard-codes, each covered by a temp dir.
pub(crate) const KUBELET_DIRS: &[&str] =
    &["/var/lib/kubelet", "/var/log/pods", "/var/log/containers"];

/// The applets of the suite's busybox image.
const APPLETS: &[&str] = &[
    "sh", "echo", "cat", "ls", "sleep", "true", "false", "test", "httpd", "nc", "tar", "head",
    "tail", "tr", "wc", "grep", "touch", "rm", "mkdir", "date", "id", "kill", "stty", "tty", "env",
    "hostname", "seq", "dd", "mv", "cp", "find", "ps", "readlink", "wget",
];

pub const NODE: &str = "crust-node";

/// Hard eviction thresholds of every node agent in the cluster: low enough that a test
/// machine's busy disk puts no node under pressure.
pub(crate) const EVICTION_HARD: &str =
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
        // The summary API and /metrics/cadvisor from the runtime's CRI stats and
        // metrics (ListPodSandboxStats, ListPodSandboxMetrics), not cAdvisor's.
        "--feature-gates=SidecarContainers=true,PodAndContainerStatsFromCRI=true",
        // The crustlet's default, which kubeadm sets too.
        "--cluster-domain=cluster.local",
        "--v=2",
    ]
    .iter()
    .map(|a| a.to_string())
    .collect()
}

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
    /// [`crate::agent_cgroups`]). Off, they run in the suite's own cgroup.
    pub agent_cgroups: bool,
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
    /// Mount points created on the host (removed at the end when still empty).
    made_dirs: Vec<PathBuf>,
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
    /// crust's plugins first, then the reference `portmap` (for hostPort).
    cni_bin_dirs: Vec<PathBuf>,
    pub opts: Options,
    /// The pause image in the registry (containerd's sandbox image).
    pub pause_image: String,
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
    pod_watch: std::sync::OnceLock<std::sync::Arc<crate::pod_watch::PodWatch>>,
}

fn log_file(dir: &Path, name: &str) -> std::fs::File {
    std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(dir.join("logs").join(format!("{name}.log")))
        .unwrap()
}

/// The mounts of every v1 hierarchy and the unified one: (controllers, mount dir).
pub(crate) fn cgroup_mounts() -> Vec<(String, PathBuf)> {
    let text = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    let mut v = Vec::new();
    for line in text.lines() {
        let Some((pre, post)) = line.split_once(" - ") else {
            continue;
        };
        let mut post = post.split_whitespace();
        let fstype = post.next().unwrap_or("");
        let _src = post.next();
        let opts = post.next().unwrap_or("");
        let mount = pre.split_whitespace().nth(4).unwrap_or("").to_string();
        match fstype {
            "cgroup" => {
                let ctrls: Vec<&str> = opts
                    .split(',')
                    .filter(|o| {
                        !matches!(*o, "rw" | "ro" | "nosuid" | "nodev" | "noexec" | "relatime")
                            && !o.starts_with("release_agent")
                            && !o.starts_with("xattr")
                            && !o.starts_with("clone_children")
                    })
                    .collect();
                v.push((ctrls.join(","), PathBuf::from(mount)));
            }
            "cgroup2" => v.push((String::new(), PathBuf::from(mount))),
            _ => {}
        }
    }
    v
}

/// The kubelet's cgroup root: `<deepest own cgroup>/<name>`. On cgroup v1 the test may
/// sit at different paths per controller (here: below `/process_api/...` in memory,
/// at `/` in the rest); the kubelet takes one path for all, so the deepest one is used
/// and the dirs it needs in other hierarchies are made (and removed) by the cluster.
pub(crate) fn pick_cgroup_root(name: &str) -> String {
    let text = std::fs::read_to_string("/proc/self/cgroup").unwrap_or_default();
    let own = text
        .lines()
        .filter_map(|l| l.splitn(3, ':').nth(2))
        .max_by_key(|p| p.len())
        .unwrap_or("/")
        .trim_end_matches('/')
        .to_string();
    format!("{own}/{name}")
}

/// SIGTERM to our child `c`, SIGKILL once `grace` has passed: its exit status if it
/// ended by itself in time.
pub(crate) fn stop_child(mut c: Child, grace: Duration) -> Option<std::process::ExitStatus> {
    // SAFETY: signalling our own child.
    unsafe { libc::kill(c.id() as i32, libc::SIGTERM) };
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
    use std::io::Read;
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("failed to run {cmd:?}: {e}"));
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

fn s(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
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
            made_dirs: Vec::new(),
            subnet,
            crustd_bin,
            cni_bin_dirs,
            opts,
            pause_image: String::new(),
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

    /// The cluster's registry, `127.0.0.1:PORT` in its namespace (listening on every
    /// address there).
    pub fn registry_addr(&self) -> String {
        self.registry
            .lock()
            .unwrap()
            .as_ref()
            .map(|r| r.addr.clone())
            .unwrap_or_default()
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
            crate::agent_cgroups::join_on_exec(&mut cmd, dir);
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

    /// The node agents' IPs, each on a veth pair of its own inside the node namespace:
    /// the kubelet's node, the crustlet's, the containerd node's.
    fn network(&self) {
        let ns = &self.node.name;
        for (link, ip) in [
            ("knode", &self.ip),
            ("klet", &self.crustlet_ip),
            ("kctr", &self.containerd_ip),
        ] {
            let (end0, end1) = (format!("{link}0"), format!("{link}1"));
            crate::sh(&[
                "ip", "-n", ns, "link", "add", &end0, "type", "veth", "peer", "name", &end1,
            ]);
            let addr = format!("{ip}/24");
            crate::sh(&["ip", "-n", ns, "addr", "add", &addr, "dev", &end0]);
            crate::sh(&["ip", "-n", ns, "link", "set", &end0, "up"]);
            crate::sh(&["ip", "-n", ns, "link", "set", &end1, "up"]);
        }
    }

    /// A CA, the API server's certificate and its client certificate to the nodes,
    /// service-account keys, a token per user and a kubeconfig for the admin (kubectl,
    /// controllers; `system:masters`) and for each node (`system:node:<name>` in
    /// `system:nodes`, as the Node authorizer wants them).
    fn pki(&self) {
        let ip = &self.ip;
        let svc = format!("10.{}.128.1", self.subnet);
        let script = format!(
            "set -e; cd {}
openssl req -x509 -newkey rsa:2048 -nodes -keyout ca.key -out ca.pem -days 2 -subj /CN=crust-test-ca 2>/dev/null
openssl req -newkey rsa:2048 -nodes -keyout apiserver.key -out apiserver.csr -subj /CN=kube-apiserver 2>/dev/null
printf 'subjectAltName=IP:{ip},IP:127.0.0.1,IP:{svc},DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc\\nbasicConstraints=CA:FALSE\\nextendedKeyUsage=serverAuth\\n' > ext.cnf
openssl x509 -req -in apiserver.csr -CA ca.pem -CAkey ca.key -CAcreateserial -out apiserver.pem -days 2 -extfile ext.cnf 2>/dev/null
openssl genrsa -out sa.key 2048 2>/dev/null
openssl rsa -in sa.key -pubout -out sa.pub 2>/dev/null",
            self.path("pki").display()
        );
        let out = run(Command::new("sh").args(["-c", &script]));
        assert!(out.status.success(), "making the PKI: {}", s(&out.stderr));
        // How the apiserver authenticates to the nodes' servers (kubectl logs, exec,
        // port-forward): bound to `system:kubelet-api-admin` once the apiserver is up.
        self.client_cert("kubelet-client", KUBELET_CLIENT, &[]);
        std::fs::write(
            self.path("pki/tokens.csv"),
            format!(
                "admin-token,admin,admin,\"system:masters\"\nkubelet-token,system:node:{NODE},kubelet,\"system:nodes\"\ncrustlet-token,system:node:{CRUSTLET_NODE},crustlet,\"system:nodes\"\nctrdlet-token,system:node:{CONTAINERD_NODE},ctrdlet,\"system:nodes\"\n"
            ),
        )
        .unwrap();
        for user in ["admin", "kubelet", "crustlet", "ctrdlet"] {
            std::fs::write(
                self.path(&format!("{user}.kubeconfig")),
                format!(
                    "apiVersion: v1
kind: Config
clusters:
- name: crust
  cluster:
    server: https://{ip}:6443
    certificate-authority: {}
users:
- name: {user}
  user:
    token: {user}-token
contexts:
- name: crust
  context:
    cluster: crust
    user: {user}
current-context: crust
",
                    self.path("pki/ca.pem").display()
                ),
            )
            .unwrap();
        }
    }

    /// A client certificate signed by the cluster's CA for `user` in `groups` (its CN
    /// and O): `pki/<name>.pem` and `pki/<name>.key`, returned in that order.
    pub fn client_cert(&self, name: &str, user: &str, groups: &[&str]) -> (PathBuf, PathBuf) {
        let subj: String = std::iter::once(format!("/CN={user}"))
            .chain(groups.iter().map(|g| format!("/O={g}")))
            .collect();
        let script = format!(
            "set -e; cd {dir}
openssl req -newkey rsa:2048 -nodes -keyout {name}.key -out {name}.csr -subj '{subj}' 2>/dev/null
printf 'basicConstraints=CA:FALSE\\nextendedKeyUsage=clientAuth\\n' > {name}.cnf
openssl x509 -req -in {name}.csr -CA ca.pem -CAkey ca.key -set_serial 0x$(openssl rand -hex 8) -out {name}.pem -days 2 -extfile {name}.cnf 2>/dev/null",
            dir = self.path("pki").display()
        );
        let out = run(Command::new("sh").args(["-c", &script]));
        assert!(
            out.status.success(),
            "making the client certificate {name}: {}",
            s(&out.stderr)
        );
        (
            self.path(&format!("pki/{name}.pem")),
            self.path(&format!("pki/{name}.key")),
        )
    }

    /// The registry on the node's loopback, with the suite's busybox image.
    fn start_registry(&mut self) {
        use image::layout::{
            write_oci_layout, Compression, LayerBuilder, LayoutEntry, LayoutImage,
        };
        let reg = Registry::start_with(None, Some(&self.node));
        let bb = which("busybox").expect("busybox");
        let mut l = LayerBuilder::new()
            .dir("bin", 0o755)
            .file_from("bin/busybox", &bb, 0o755)
            .dir("etc", 0o755)
            .file(
                "etc/passwd",
                b"root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534::/:/bin/false\n",
                0o644,
            )
            .file("etc/group", b"root:x:0:\nnogroup:x:65534:\n", 0o644)
            .dir("tmp", 0o1777)
            .dir("www", 0o755)
            .file("www/index.html", b"hello from crust\n", 0o644);
        for a in APPLETS {
            l = l.symlink(&format!("bin/{a}"), "busybox");
        }
        let mut img = LayoutImage::new(vec![(l.finish(), Compression::Gzip)]);
        img.config.cmd = vec!["/bin/sh".into()];
        img.config.env = vec!["PATH=/bin".into()];
        let layout = self.path("layout");
        write_oci_layout(
            &layout,
            &[LayoutEntry {
                ref_name: Some("img".into()),
                image_name: None,
                platforms: vec![img],
            }],
        );
        reg.push(&layout, "img", "e2e/busybox:1");
        // The same image under a second name, for checks that change a pod's image.
        reg.push(&layout, "img", "e2e/busybox:2");
        self.image = reg.name("e2e/busybox:1");
        // containerd's sandbox image (it would pull registry.k8s.io/pause): crust's
        // static pause binary as `/pause`.
        let l = LayerBuilder::new().file("pause", container::pause::BINARY, 0o755);
        let mut img = LayoutImage::new(vec![(l.finish(), Compression::Gzip)]);
        img.config.entrypoint = vec!["/pause".into()];
        let layout = self.path("layout-pause");
        write_oci_layout(
            &layout,
            &[LayoutEntry {
                ref_name: Some("pause".into()),
                image_name: None,
                platforms: vec![img],
            }],
        );
        reg.push(&layout, "pause", "e2e/pause:1");
        self.pause_image = reg.name("e2e/pause:1");
        // `registry.k8s.io` mirrored by the registry, for every runtime of the cluster:
        // Kubernetes' e2e images (pushed by [`Cluster::push_e2e_images`]) pull by their
        // upstream names.
        for certs in ["certs.d", "ctrd-certs.d"] {
            let hosts = self.path(certs).join("registry.k8s.io");
            std::fs::create_dir_all(&hosts).unwrap();
            std::fs::write(
                hosts.join("hosts.toml"),
                format!(
                    "server = \"https://registry.k8s.io\"\n\n[host.\"http://{}\"]\n  capabilities = [\"pull\", \"resolve\"]\n",
                    reg.addr
                ),
            )
            .unwrap();
        }
        *self.registry.lock().unwrap() = Some(reg);
    }

    /// Pushes the offline stand-ins of Kubernetes' e2e images to the cluster's registry
    /// at their upstream paths (`registry.k8s.io` is mirrored there), with the `install`
    /// script of `tools` (../shared/tools/kubernetes-e2e-v1.28.7), which also unpacks
    /// its binaries into `bin_dir`.
    pub fn push_e2e_images(&self, tools: &Path, bin_dir: &Path) {
        let addr = self.registry.lock().unwrap().as_ref().unwrap().addr.clone();
        let out = run_timeout(
            self.net_cmd(tools.join("install")).arg(bin_dir).arg(&addr),
            Duration::from_secs(600),
        );
        assert!(
            out.status.success(),
            "pushing the e2e images: {}{}",
            s(&out.stdout),
            s(&out.stderr)
        );
    }

    fn start_control_plane(&mut self) {
        let base = self.dir.path().to_path_buf();
        let p = |r: &str| base.join(r).display().to_string();
        let mut etcd = self.net_cmd(&self.bins.etcd);
        etcd.arg("--data-dir").arg(p("etcd")).args([
            "--listen-client-urls=http://127.0.0.1:2379",
            "--advertise-client-urls=http://127.0.0.1:2379",
            "--listen-peer-urls=http://127.0.0.1:2380",
            "--initial-advertise-peer-urls=http://127.0.0.1:2380",
            "--initial-cluster=default=http://127.0.0.1:2380",
            "--unsafe-no-fsync",
        ]);
        let child = self.spawn_logged(etcd, "etcd");
        self.control.lock().unwrap().push(child);

        self.start_apiserver();
        // The apiserver's own requests to the nodes' servers (logs, exec, proxy).
        let out = run_timeout(
            &mut self.kubectl(&[
                "create",
                "clusterrolebinding",
                KUBELET_CLIENT,
                "--clusterrole=system:kubelet-api-admin",
                &format!("--user={KUBELET_CLIENT}"),
            ]),
            Duration::from_secs(20),
        );
        assert!(
            out.status.success(),
            "binding {KUBELET_CLIENT}: {}",
            s(&out.stderr)
        );

        let mut cm = self.net_cmd(&self.bins.controller_manager);
        cm.arg(format!("--kubeconfig={}", p("admin.kubeconfig")))
            .arg(format!(
                "--service-account-private-key-file={}",
                p("pki/sa.key")
            ))
            .arg(format!("--root-ca-file={}", p("pki/ca.pem")))
            .args([
                "--leader-elect=false",
                "--secure-port=0",
                "--use-service-account-credentials",
            ]);
        if !self.opts.control_plane_only {
            // No cloud, no node CIDRs (crust's CNI config has the pod subnet).
            cm.arg("--controllers=*,-nodeipam,-cloud-node-lifecycle,-service,-route");
        } else {
            // The fleet's nodes take their pod ranges from their Nodes, as on kubeadm
            // clusters.
            cm.arg("--controllers=*,-cloud-node-lifecycle,-service,-route")
                .arg("--allocate-node-cidrs=true")
                .arg(format!("--cluster-cidr=10.{}.0.0/17", self.subnet))
                .arg("--node-cidr-mask-size=24");
        }
        let child = self.spawn_logged(cm, "kube-controller-manager");
        self.control.lock().unwrap().push(child);
        // Pods are refused until their namespace's service account exists, and their
        // token volumes need the root CA's config map.
        wait_for(
            "the default service account",
            Duration::from_secs(60),
            |last| {
                let out = run_timeout(
                    &mut self.kubectl(&[
                        "get",
                        "serviceaccount/default",
                        "configmap/kube-root-ca.crt",
                    ]),
                    Duration::from_secs(10),
                );
                *last = s(&out.stderr);
                out.status.success().then_some(())
            },
        );

        let mut sched = self.net_cmd(&self.bins.scheduler);
        sched
            .arg(format!("--kubeconfig={}", p("admin.kubeconfig")))
            .args(["--leader-elect=false", "--secure-port=0"])
            // It refuses to place a pod with a sidecar without the gate.
            .arg("--feature-gates=SidecarContainers=true");
        let child = self.spawn_logged(sched, "kube-scheduler");
        self.control.lock().unwrap().push(child);
    }

    /// kube-apiserver's command line (the same on every start).
    fn apiserver_cmd(&self) -> Command {
        let p = |r: &str| self.path(r).display().to_string();
        let mut api = self.net_cmd(&self.bins.apiserver);
        api.args([
            "--etcd-servers=http://127.0.0.1:2379",
            "--bind-address=0.0.0.0",
            "--secure-port=6443",
            // As kubeadm: nodes get what the Node authorizer gives them, the rest what
            // RBAC does (the admin token is in system:masters).
            "--authorization-mode=Node,RBAC",
            "--enable-admission-plugins=NodeRestriction",
            // As kubeadm runs it: privileged pods are the node's business (node
            // conformance has specs with them).
            "--allow-privileged=true",
            "--service-account-issuer=https://kubernetes.default.svc",
            "--enable-priority-and-fairness=false",
            // Sidecar init containers (restartPolicy Always), alpha in v1.28: without
            // the gate the apiserver drops the field.
            "--feature-gates=SidecarContainers=true",
            // The node's name resolves nowhere: dial the kubelet at its node IP.
            "--kubelet-preferred-address-types=InternalIP",
        ])
        .arg(format!("--advertise-address={}", self.ip))
        .arg(format!(
            "--service-cluster-ip-range=10.{}.128.0/24",
            self.subnet
        ))
        .arg(format!("--tls-cert-file={}", p("pki/apiserver.pem")))
        .arg(format!("--tls-private-key-file={}", p("pki/apiserver.key")))
        .arg(format!("--client-ca-file={}", p("pki/ca.pem")))
        .arg(format!("--token-auth-file={}", p("pki/tokens.csv")))
        .arg(format!("--service-account-key-file={}", p("pki/sa.pub")))
        .arg(format!(
            "--service-account-signing-key-file={}",
            p("pki/sa.key")
        ))
        .arg(format!("--cert-dir={}", p("pki")))
        .arg(format!(
            "--kubelet-client-certificate={}",
            p("pki/kubelet-client.pem")
        ))
        .arg(format!(
            "--kubelet-client-key={}",
            p("pki/kubelet-client.key")
        ));
        if self.opts.control_plane_only {
            // A control plane on no node (a fleet's control namespace, as a hosted
            // control plane) has no kube-proxy to turn a webhook Service's ClusterIP
            // into a pod: the apiserver dials the Service's endpoints itself, for
            // admission and conversion webhooks and aggregated APIs alike.
            api.arg("--enable-aggregator-routing=true");
        }
        api
    }

    /// Starts kube-apiserver (on etcd's data: what it had is still there) and waits
    /// until it is ready.
    pub fn start_apiserver(&self) {
        let mut guard = self.apiserver.lock().unwrap();
        assert!(guard.is_none(), "kube-apiserver already running");
        *guard = Some(self.spawn_logged(self.apiserver_cmd(), "kube-apiserver"));
        drop(guard);
        wait_for(
            "the API server to be ready",
            Duration::from_secs(90),
            |last| {
                let out = run_timeout(
                    &mut self.kubectl(&["get", "--raw", "/readyz"]),
                    Duration::from_secs(10),
                );
                *last = format!("{}{}", s(&out.stdout), s(&out.stderr));
                out.status.success().then_some(())
            },
        );
    }

    /// SIGKILL to kube-apiserver, as an outage: every client's connection ends and new
    /// ones are refused until [`Cluster::start_apiserver`].
    pub fn stop_apiserver(&self) {
        if let Some(mut c) = self.apiserver.lock().unwrap().take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// The private mount namespace of the kubelet and crustd, with the kubelet's paths
    /// and the tunables it writes covered by the cluster's own files.
    fn mount_namespace(&mut self) {
        let mut binds: Vec<(PathBuf, PathBuf)> = KUBELET_DIRS
            .iter()
            .zip(["mnt/kubelet", "mnt/pods", "mnt/containers"])
            .map(|(d, src)| (self.path(src), PathBuf::from(d)))
            .collect();
        if self.opts.containerd.is_some() {
            // containerd puts its shims' sockets in `/run/containerd/s` whatever its
            // state dir: a dir of the cluster's covers it.
            binds.push((self.path("ctrd-run"), PathBuf::from("/run/containerd")));
        }
        binds.extend(self.sysctl_binds(&self.path("sysctl")));
        self.make_host_dirs(&binds);
        let child = self.mount_holder(&self.node.path(), "mount-namespace", &binds);
        self.holder_pid = child.id();
        *self.holder.lock().unwrap() = Some(child);
    }

    /// Makes the host paths that `binds` cover when missing (bind targets must exist),
    /// remembering what it made for the teardown.
    pub(crate) fn make_host_dirs(&mut self, binds: &[(PathBuf, PathBuf)]) {
        for (_, target) in binds {
            if !target.exists() {
                std::fs::create_dir_all(target).unwrap();
                self.made_dirs.push(target.clone());
            }
        }
    }

    /// The kubelet's tunables (`SYSCTLS`), each to be covered by a copy in `dir`.
    pub(crate) fn sysctl_binds(&self, dir: &Path) -> Vec<(PathBuf, PathBuf)> {
        std::fs::create_dir_all(dir).unwrap();
        SYSCTLS
            .iter()
            .filter_map(|t| {
                let target = Path::new("/proc/sys").join(t);
                if !target.exists() {
                    return None;
                }
                let file = dir.join(t.replace('/', "."));
                std::fs::write(&file, std::fs::read(&target).unwrap_or_default()).unwrap();
                Some((file, target))
            })
            .collect()
    }

    /// A process (`sleep`) holding a private mount namespace in network namespace
    /// `netns`, with each `(source, target)` of `binds` bind-mounted there: the
    /// namespace a node's kubelet and runtime share, and which goes when the last of
    /// its processes does.
    pub(crate) fn mount_holder(
        &self,
        netns: &Path,
        name: &str,
        binds: &[(PathBuf, PathBuf)],
    ) -> Child {
        let mut holder = Command::new("nsenter");
        holder
            .arg(format!("--net={}", netns.display()))
            .args(["--", "unshare", "--mount", "--propagation", "private"])
            .args(["sleep", "infinity"]);
        let child = self.spawn_logged(holder, name);
        let pid = child.id();
        let own = std::fs::read_link("/proc/self/ns/mnt").unwrap();
        wait_for("the mount namespace", Duration::from_secs(10), |_| {
            let ns = std::fs::read_link(format!("/proc/{pid}/ns/mnt")).ok()?;
            let exe = std::fs::read_link(format!("/proc/{pid}/exe")).ok()?;
            (ns != own && exe.ends_with("sleep")).then_some(())
        });
        for (src, dst) in binds {
            let mut m = Command::new("nsenter");
            m.arg(format!("--mount=/proc/{pid}/ns/mnt"))
                .args(["mount", "--bind"])
                .arg(src)
                .arg(dst);
            let out = run(&mut m);
            assert!(
                out.status.success(),
                "bind-mounting {} over {}: {}",
                src.display(),
                dst.display(),
                s(&out.stderr)
            );
        }
        child
    }

    /// The kubelet's `--cgroup-root` must exist in every hierarchy; makes it (and the
    /// ancestors missing in hierarchies where the test sits higher), remembering what
    /// it made. A new cpuset cgroup gets its parent's CPUs and memory nodes. The
    /// crustlet's root is made the same way (crustd would make it, but then the
    /// ancestors it made would not be known to the teardown).
    pub(crate) fn make_cgroup_root(&mut self, root: &str) {
        let mounts = cgroup_mounts();
        let pure_v2 = mounts.iter().all(|(c, _)| c.is_empty());
        for (ctrls, mount) in mounts {
            let mut dir = mount.clone();
            for comp in root.trim_start_matches('/').split('/') {
                let parent = dir.clone();
                dir.push(comp);
                if dir.exists() || self.made_cgroups.contains(&dir) {
                    continue;
                }
                // The kubelet wants every v1 hierarchy, named ones too. crustd makes the
                // path on the hybrid cgroup2 mount when it places a pod there: noted,
                // so that the teardown removes what it made.
                if ctrls.is_empty() && !pure_v2 {
                    self.made_cgroups.push(dir.clone());
                    continue;
                }
                std::fs::create_dir(&dir)
                    .unwrap_or_else(|e| panic!("making cgroup {}: {e}", dir.display()));
                self.made_cgroups.push(dir.clone());
                if ctrls.split(',').any(|c| c == "cpuset") {
                    for f in ["cpuset.cpus", "cpuset.mems"] {
                        let v = std::fs::read_to_string(parent.join(f)).unwrap_or_default();
                        let _ = std::fs::write(dir.join(f), v.trim());
                    }
                }
            }
        }
    }

    /// With [`Options::agent_cgroups`]: a memory cgroup below `agents_cgroup_root` for
    /// each daemon the cluster runs, named as its log, and each daemon's executable out
    /// of the page cache, so that the daemon reading it is charged for it.
    fn make_agent_cgroups(&mut self) {
        let Some((mount, v2)) = crate::agent_cgroups::memory_mount() else {
            eprintln!("no memory cgroup controller: the daemons run in the suite's cgroup");
            return;
        };
        let mut names = vec!["kubelet", "crustlet", "crustlet-crustd"];
        let mut exes = vec![
            self.bins.kubelet.clone(),
            self.crustlet_bin.clone(),
            self.crustd_bin.clone(),
        ];
        if self.opts.containerd != Some(ContainerdFor::Kubelet) {
            names.push("crustd");
        }
        if self.opts.containerd.is_some() {
            names.push("containerd");
            exes.extend(
                ["containerd", "containerd-shim-runc-v2", "runc"]
                    .iter()
                    .filter_map(|t| which(t)),
            );
        }
        if self.opts.containerd == Some(ContainerdFor::Crustlet) {
            names.push("ctrdlet");
        }
        for name in names {
            let path = format!("{}/{name}", self.agents_cgroup_root);
            let dir = crate::agent_cgroups::make(&mount, v2, &path, &mut self.made_cgroups);
            self.agent_cgroups.push((name.to_string(), dir));
        }
        for exe in exes {
            crate::agent_cgroups::uncache(&exe);
        }
    }

    /// The memory cgroup of the daemon whose log is `name` (`kubelet`, `crustlet`,
    /// `crustlet-crustd`, `containerd`, ...), with [`Options::agent_cgroups`].
    pub fn agent_cgroup(&self, name: &str) -> Option<&Path> {
        self.agent_cgroups
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, d)| d.as_path())
    }

    /// Every cgroup directory at or below the cluster's cgroup roots, deepest first.
    fn cgroup_dirs(&self) -> Vec<PathBuf> {
        let mut out = Vec::new();
        for (_, mount) in cgroup_mounts() {
            for root in [
                &self.cgroup_root,
                &self.crustlet_cgroup_root,
                &self.containerd_cgroup_root,
                &self.agents_cgroup_root,
            ] {
                let d = mount.join(root.trim_start_matches('/'));
                crate::crustd::walk_dirs(&d, &mut out);
            }
        }
        out.sort_by_key(|d| std::cmp::Reverse(d.components().count()));
        out
    }

    /// The directory named `name` below the kubelet's cgroup root in the v1 hierarchy of
    /// `controller` (or the unified one for `""`).
    pub fn cgroup_dir_named(&self, controller: &str, name: &str) -> Option<PathBuf> {
        self.cgroup_dir_named_under(&self.cgroup_root, controller, name)
    }

    /// The same below `root` (the crustlet's cgroup root, say).
    pub fn cgroup_dir_named_under(
        &self,
        root: &str,
        controller: &str,
        name: &str,
    ) -> Option<PathBuf> {
        let (_, mount) = cgroup_mounts().into_iter().find(|(c, _)| {
            if controller.is_empty() {
                c.is_empty()
            } else {
                c.split(',').any(|x| x == controller)
            }
        })?;
        let mut all = Vec::new();
        crate::crustd::walk_dirs(&mount.join(root.trim_start_matches('/')), &mut all);
        all.into_iter()
            .find(|d| d.file_name().is_some_and(|n| n == name))
    }

    /// The pod networks: the kubelet's crustd on `crustkube0` with `10.<n>.0.0/24`, the
    /// crustlet's on `crustlet0` with `10.<n>.1.0/24`.
    fn write_cni_conf(&self) {
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
        cmd.args(["--cgroup-root", "/", "--log-level", "debug"]);
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

    /// Starts the crustlet on its crustd, in the node's namespaces (for the cgroup
    /// mounts the kubelet's copy of `/sys` would hide; it writes only below the
    /// cluster's dir): its own node name and IP, root and pod logs dirs, cgroup root and
    /// a folder of static pod manifests.
    pub fn start_crustlet(&self) {
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
            .args(["--v", "2"]);
        *guard = Some(self.spawn_logged(cmd, "crustlet"));
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

    /// Waits for the crustlet's Node to register, then taints it NoSchedule: before any
    /// check runs, so no pod without the toleration is ever scheduled there.
    fn taint_crustlet_node(&self) {
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
    fn taint_node(&self, name: &str, running: impl Fn() -> bool, log: &str) {
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

    /// containerd's configuration: its own root, state and socket; the CRI plugin with
    /// runc (cgroupfs: the pods' cgroup parents come from their kubelet), the reference
    /// CNI plugins on its own conflist, the registry's pause image as the sandbox image
    /// and the registry over plain HTTP.
    fn containerd_config(&self) -> String {
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
        })
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

    pub fn containerd_pid(&self) -> Option<u32> {
        self.containerd.lock().unwrap().as_ref().map(|c| c.id())
    }

    pub fn kubelet_pid(&self) -> Option<u32> {
        self.kubelet.lock().unwrap().as_ref().map(|c| c.id())
    }

    pub fn crustlet_pid(&self) -> Option<u32> {
        self.crustlet.lock().unwrap().as_ref().map(|c| c.id())
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

    /// `crictl` against containerd.
    pub fn containerd_crictl(&self, args: &[&str]) -> Command {
        let mut c = self.node_cmd(&self.bins.crictl);
        let ep = format!("unix://{}", self.containerd_socket.display());
        c.arg("--runtime-endpoint")
            .arg(&ep)
            .arg("--image-endpoint")
            .arg(&ep)
            .args(["--timeout", "20s"])
            .args(args);
        c
    }

    pub fn start_kubelet(&self) {
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
            .arg("--vmodule=kubelet=4");
        *guard = Some(self.spawn_logged(cmd, "kubelet"));
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

    /// `kubectl --kubeconfig <admin> ARGS` in the node namespace.
    pub fn kubectl(&self, args: &[&str]) -> Command {
        let mut c = self.net_cmd(&self.bins.kubectl);
        c.arg(format!(
            "--kubeconfig={}",
            self.path("admin.kubeconfig").display()
        ))
        .args(args);
        c
    }

    /// Waits until the pod `ns/name` satisfies `pred`, for at most `limit`, through one
    /// watch of every pod that all waits share (see [`crate::pod_watch`]): the pod, or
    /// the last state of it seen when time ran out.
    pub fn wait_pod(
        &self,
        ns: &str,
        name: &str,
        limit: Duration,
        pred: impl Fn(&serde_json::Value) -> bool,
    ) -> Result<serde_json::Value, Option<serde_json::Value>> {
        let watch = self.pod_watch.get_or_init(|| {
            let (netns, kubectl) = (self.node.path().to_path_buf(), self.bins.kubectl.clone());
            let kubeconfig = format!("--kubeconfig={}", self.path("admin.kubeconfig").display());
            crate::pod_watch::PodWatch::start(move |args| {
                let mut c = Command::new("nsenter");
                c.arg(format!("--net={}", netns.display()))
                    .arg("--")
                    .arg(&kubectl)
                    .arg(&kubeconfig)
                    .args(args);
                c
            })
        });
        watch.wait(ns, name, limit, pred, || {
            let out = run_timeout(
                &mut self.kubectl(&["-n", ns, "get", "pod", name, "-o", "json"]),
                Duration::from_secs(60),
            );
            out.status
                .success()
                .then(|| serde_json::from_slice(&out.stdout).ok())
                .flatten()
        })
    }

    /// `crictl` against crustd's socket, in the node's namespaces.
    pub fn crictl(&self, args: &[&str]) -> Command {
        let mut c = self.node_cmd(&self.bins.crictl);
        let ep = format!("unix://{}", self.socket.display());
        c.arg("--runtime-endpoint")
            .arg(&ep)
            .arg("--image-endpoint")
            .arg(&ep)
            .args(["--timeout", "20s"])
            .args(args);
        c
    }

    /// `crictl` against the crustlet's crustd.
    pub fn crustlet_crictl(&self, args: &[&str]) -> Command {
        let mut c = self.node_cmd(&self.bins.crictl);
        let ep = format!("unix://{}", self.crustlet_socket.display());
        c.arg("--runtime-endpoint")
            .arg(&ep)
            .arg("--image-endpoint")
            .arg(&ep)
            .args(["--timeout", "20s"])
            .args(args);
        c
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

    /// Every process in the namespaces the cluster made, or in its cgroups.
    fn leftover_pids(&self, mnt: Option<&PathBuf>, net: Option<&PathBuf>) -> Vec<i32> {
        let me = std::process::id() as i32;
        let mut pids = std::collections::BTreeSet::new();
        for d in self.cgroup_dirs() {
            if let Ok(t) = std::fs::read_to_string(d.join("cgroup.procs")) {
                pids.extend(t.lines().filter_map(|l| l.trim().parse::<i32>().ok()));
            }
        }
        if let Ok(rd) = std::fs::read_dir("/proc") {
            for e in rd.flatten() {
                let Some(pid) = e.file_name().to_str().and_then(|n| n.parse::<i32>().ok()) else {
                    continue;
                };
                let ns = |kind: &str| std::fs::read_link(format!("/proc/{pid}/ns/{kind}")).ok();
                if (mnt.is_some() && ns("mnt").as_ref() == mnt)
                    || (net.is_some() && ns("net").as_ref() == net)
                {
                    pids.insert(pid);
                }
            }
        }
        pids.remove(&me);
        pids.into_iter().collect()
    }
}

impl Cluster {
    /// Stops and removes everything the cluster made: the kubelet, every pod through
    /// CRI, crustd, the control plane and the registry, then whatever is still in its
    /// namespaces or cgroups, those cgroups, the network namespace, the temp dirs and
    /// the mount points it created. Runs once (on drop, or from a signal handler);
    /// a second caller waits for the first to finish.
    pub fn teardown(&self) {
        let mut done = self.torn_down.lock().unwrap();
        if *done {
            return;
        }
        *done = true;
        if let Some(w) = self.pod_watch.get() {
            w.stop();
        }
        self.stop_kubelet();
        self.stop_crustlet();
        self.stop_kube_proxy();
        if let Some(mut c) = self.containerd_crustlet.lock().unwrap().take() {
            let _ = c.kill();
            let _ = c.wait();
        }
        // Every pod through CRI while each crustd runs (restarted if it died).
        if self.holder_pid != 0 {
            let alive = |slot: &Mutex<Option<Child>>| {
                slot.lock()
                    .unwrap()
                    .as_mut()
                    .is_some_and(|c| c.try_wait().map(|s| s.is_none()).unwrap_or(false))
            };
            if !alive(&self.crustd) && self.opts.containerd != Some(ContainerdFor::Kubelet) {
                self.kill_crustd();
                let _ =
                    std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| self.start_crustd()));
            }
            if !alive(&self.crustlet_crustd) {
                self.kill_crustlet_crustd();
                let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                    self.start_crustlet_crustd()
                }));
            }
            let _ = run_timeout(
                &mut self.crictl(&["rmp", "-a", "-f"]),
                Duration::from_secs(90),
            );
            let _ = run_timeout(
                &mut self.crustlet_crictl(&["rmp", "-a", "-f"]),
                Duration::from_secs(90),
            );
            if self.opts.containerd == Some(ContainerdFor::Crustlet) && alive(&self.containerd) {
                let _ = run_timeout(
                    &mut self.containerd_crictl(&["rmp", "-a", "-f"]),
                    Duration::from_secs(90),
                );
            }
        }
        self.kill_crustd();
        self.kill_crustlet_crustd();
        // containerd: SIGTERM, then SIGKILL; its shims and pauses are in the mount
        // namespace, killed below.
        if let Some(mut c) = self.containerd.lock().unwrap().take() {
            // SAFETY: signalling our own child.
            unsafe { libc::kill(c.id() as i32, libc::SIGTERM) };
            let deadline = Instant::now() + Duration::from_secs(5);
            while c.try_wait().ok().flatten().is_none() && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(50));
            }
            let _ = c.kill();
            let _ = c.wait();
        }
        self.stop_apiserver();
        for mut c in self.control.lock().unwrap().drain(..).rev() {
            let _ = c.kill();
            let _ = c.wait();
        }
        *self.registry.lock().unwrap() = None;
        // What is left: anything in the mount or network namespace, or the cgroups.
        let mnt = (self.holder_pid != 0)
            .then(|| std::fs::read_link(format!("/proc/{}/ns/mnt", self.holder_pid)).ok())
            .flatten();
        // `/run/netns/NAME` is the namespace's nsfs file: its inode names it.
        let net = std::fs::metadata(self.node.path()).ok().map(|m| {
            use std::os::unix::fs::MetadataExt;
            PathBuf::from(format!("net:[{}]", m.ino()))
        });
        for _ in 0..3 {
            for p in self.leftover_pids(mnt.as_ref(), net.as_ref()) {
                if p as u32 == self.holder_pid {
                    continue;
                }
                // SAFETY: killing what runs in namespaces and cgroups this cluster made.
                unsafe { libc::kill(p, libc::SIGKILL) };
            }
            std::thread::sleep(Duration::from_millis(200));
        }
        if let Some(mut h) = self.holder.lock().unwrap().take() {
            let _ = h.kill();
            let _ = h.wait();
        }
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            for d in self.cgroup_dirs() {
                let _ = std::fs::remove_dir(&d);
            }
            for d in self.made_cgroups.iter().rev() {
                let _ = std::fs::remove_dir(d);
            }
            let left =
                self.cgroup_dirs().len() + self.made_cgroups.iter().filter(|d| d.exists()).count();
            if left == 0 || Instant::now() > deadline {
                break;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        for d in self.made_dirs.iter().rev() {
            let _ = std::fs::remove_dir(d);
        }
        let _ = Command::new("ip")
            .args(["netns", "del", &self.node.name])
            .stderr(Stdio::null())
            .status();
        let _ = std::fs::remove_dir_all(self.dir.path());
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        self.teardown();
    }
}

/// Runs `kubectl ... get KIND --watch --output-watch-events -o json` (`cmd`, built by
/// the caller) and hands each event to `on` as it arrives: its type (`ADDED`,
/// `MODIFIED`, `DELETED`), the object, and the instant it was read (the benches time
/// pods by it). The watch ends when the child is killed.
pub fn watch_events(
    mut cmd: Command,
    mut on: impl FnMut(&str, &serde_json::Value, std::time::Instant) + Send + 'static,
) -> std::process::Child {
    let mut child = cmd
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("kubectl watch");
    let out = child.stdout.take().expect("piped stdout");
    std::thread::spawn(move || {
        let stream = serde_json::Deserializer::from_reader(std::io::BufReader::new(out));
        for ev in stream.into_iter::<serde_json::Value>() {
            let Ok(ev) = ev else { return };
            let now = std::time::Instant::now();
            on(ev["type"].as_str().unwrap_or_default(), &ev["object"], now);
        }
    });
    child
}
