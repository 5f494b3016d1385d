//! crustd with `cgroup.driver = "systemd"`, end to end through CRI on a node where
//! systemd is PID 1 and manages cgroup v2 (hack/vm-test's systemd boot; these machines
//! have no systemd running, hence `#[ignore]` here and `--include-ignored` there).
//!
//! What a kubelet with `--cgroup-driver=systemd` sees: RuntimeConfig says SYSTEMD; a
//! pod's `cgroup_parent` is the slice the kubelet made; the pause and each container
//! are a transient scope `crust-<id>.scope` in it, with their limits as unit
//! properties and in the cgroup files; the units go with the pod and containers; a
//! crustd killed and started again finds them all; an OOM kill is reported although
//! systemd removes an emptied scope at once. And then the real thing: the real kubelet
//! v1.28 with `--cgroup-driver=systemd`, standalone, runs a static pod on crustd.

use cgroups::systemd::{expand_slice, Systemd};
use cgroups::{CgroupManager, CgroupPath, Hierarchy};
use cri_api::*;
use crust_e2e::cri::*;
use crust_e2e::crustd::{Crustd, Options};
use crust_e2e::tail;
use std::time::{Duration, Instant};
use tonic::Code;

async fn setup() -> Env {
    assert!(
        crust_e2e::require_root(&["ip", "nsenter", "nft", "busybox", "systemctl"]),
        "the systemd suite runs as root"
    );
    Env::with(Crustd::start_with(Options {
        systemd_cgroups: true,
        ..Default::default()
    }))
    .await
}

/// Held by every test that makes `kubepods-*-pod<uid>.slice` slices, the real
/// kubelet's test among them: a kubelet takes any pod slice below its QoS slices that
/// its runtime does not know for an orphan, kills what is in it and stops it (its
/// housekeeping, every 2 s). The other tests' pods are in crustds of their own, so
/// while the kubelet runs they would be killed under them.
static KUBEPODS: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// A pod slice as the kubelet names and makes it (`kubepods-burstable-pod<uid>.slice`,
/// the uid's dashes as underscores), made here over D-Bus as the kubelet does.
fn kubelet_slice(tag: &str) -> String {
    let uid = crust_e2e::unique(tag).replace('-', "_");
    let name = format!("kubepods-burstable-pod{uid}.slice");
    Systemd::connect()
        .unwrap()
        .start_slice(&name, "test pod slice")
        .unwrap();
    name
}

fn fs() -> Hierarchy {
    Hierarchy::detect().unwrap()
}

/// `systemctl show -p NAME --value UNIT`.
fn unit_prop(unit: &str, name: &str) -> String {
    crust_e2e::sh(&["systemctl", "show", "-p", name, "--value", unit])
        .trim()
        .to_string()
}

/// Whether systemd has the unit active (loaded units that are gone read `inactive`).
fn active(unit: &str) -> bool {
    Systemd::connect().unwrap().is_active(unit).unwrap()
}

/// The cgroup v2 path of `pid` (`0::/a/b` → `/a/b`).
fn cgroup_of(pid: i64) -> String {
    let text = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).unwrap();
    text.lines()
        .find_map(|l| l.strip_prefix("0::"))
        .unwrap_or_else(|| panic!("no v2 line in {text}"))
        .to_string()
}

fn read(dir: &std::path::Path, file: &str) -> String {
    std::fs::read_to_string(dir.join(file))
        .unwrap_or_else(|e| panic!("{}/{file}: {e}", dir.display()))
        .trim()
        .to_string()
}

/// Waits until `f` holds (a unit's end is systemd's, a moment after the RPC).
async fn until(what: &str, f: impl Fn() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !f() {
        assert!(Instant::now() < deadline, "not within 30 s: {what}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

async fn pause_pid(e: &mut Env, pod: &str) -> i64 {
    let st =
        e.c.pod_sandbox_status(PodSandboxStatusRequest {
            pod_sandbox_id: pod.into(),
            verbose: true,
        })
        .await
        .unwrap()
        .into_inner();
    verbose_info(&st.info)["pid"].as_i64().unwrap()
}

/// The kubelet's pod slice holds the pause's and the containers' scopes, each with
/// the limits asked as properties and files; updates reach both; the units go with
/// the container and the pod.
#[tokio::test]
#[ignore = "needs systemd as PID 1: runs in hack/vm-test's systemd boot"]
async fn pods_and_containers_are_scopes_in_the_kubelets_slice() {
    let _kubepods = KUBEPODS.lock().await;
    let mut e = setup().await;
    let rc =
        e.c.runtime_config(RuntimeConfigRequest {})
            .await
            .unwrap()
            .into_inner();
    assert_eq!(
        rc.linux.unwrap().cgroup_driver,
        CgroupDriver::Systemd as i32,
        "RuntimeConfig must say SYSTEMD"
    );

    let slice = kubelet_slice("pod");
    let slice_path = expand_slice(&slice).unwrap();
    let pod = e
        .pod_with("sys", |c| {
            c.linux.as_mut().unwrap().cgroup_parent = slice.clone();
        })
        .await;
    let pause_scope = format!("crust-{}.scope", pod.0);
    assert!(active(&pause_scope), "{pause_scope} is not active");
    let pause = pause_pid(&mut e, &pod.0).await;
    assert_eq!(
        cgroup_of(pause),
        format!("{slice_path}/{pause_scope}"),
        "the pause lives in its scope"
    );
    assert_eq!(unit_prop(&pause_scope, "Slice"), slice);

    let mut cfg = ctr("app", &["sleep", "1000"]);
    {
        let r = res(&mut cfg);
        r.cpu_shares = 512;
        r.cpu_quota = 50_000;
        r.cpu_period = 100_000;
        r.memory_limit_in_bytes = 64 << 20;
        r.cpuset_cpus = "0".into();
    }
    let id = e.create(&pod, cfg).await;
    let scope = format!("crust-{id}.scope");
    let path = slice_path.join(&scope).unwrap();
    let dir = fs().dir("", &path).unwrap();
    e.start(&id).await;
    let (pid, _) = e.pids(&id).await;
    assert_eq!(cgroup_of(pid), path.to_string());
    // The placeholder that held the new scope is gone: the container alone is in it.
    assert_eq!(fs().procs(&path).unwrap(), vec![pid as i32], "cgroup.procs");
    assert_eq!(read(&dir, "cpu.weight"), "20");
    assert_eq!(read(&dir, "cpu.max"), "50000 100000");
    assert_eq!(read(&dir, "memory.max"), (64u64 << 20).to_string());
    assert_eq!(read(&dir, "cpuset.cpus"), "0");
    assert_eq!(unit_prop(&scope, "CPUWeight"), "20");
    assert_eq!(unit_prop(&scope, "MemoryMax"), (64u64 << 20).to_string());
    assert_eq!(unit_prop(&scope, "CPUQuotaPerSecUSec"), "500ms");
    assert_eq!(unit_prop(&scope, "Delegate"), "yes");
    // Its own cgroup namespace: the container sees itself at the root.
    let out = e
        .exec(&id, &["cat", "/proc/self/cgroup"], 10)
        .await
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "0::/");

    e.c.update_container_resources(UpdateContainerResourcesRequest {
        container_id: id.clone(),
        linux: Some(LinuxContainerResources {
            memory_limit_in_bytes: 128 << 20,
            cpu_shares: 1024,
            ..Default::default()
        }),
        ..Default::default()
    })
    .await
    .expect("UpdateContainerResources");
    assert_eq!(read(&dir, "memory.max"), (128u64 << 20).to_string());
    assert_eq!(unit_prop(&scope, "MemoryMax"), (128u64 << 20).to_string());
    assert_eq!(unit_prop(&scope, "CPUWeight"), "39");

    e.stop(&id, 0).await;
    e.remove(&id).await;
    until("the container's scope is gone", || {
        !active(&scope) && !dir.exists()
    })
    .await;
    e.remove_pod(&pod.0).await;
    let pause_dir = fs()
        .dir("", &slice_path.join(&pause_scope).unwrap())
        .unwrap();
    until("the pause's scope is gone", || {
        !active(&pause_scope) && !pause_dir.exists()
    })
    .await;
    // The kubelet's slice is the kubelet's: still there.
    assert!(active(&slice), "{slice} went with the pod");
    Systemd::connect().unwrap().stop(&slice).unwrap();
}

/// A pod without a `cgroup_parent` gets a slice of crust's own, which goes with it.
#[tokio::test]
#[ignore = "needs systemd as PID 1: runs in hack/vm-test's systemd boot"]
async fn a_pod_without_parent_gets_its_own_slice() {
    let mut e = setup().await;
    let pod = e.pod("own").await;
    let slice = format!("crust-pod{}.slice", pod.0);
    let pause = pause_pid(&mut e, &pod.0).await;
    assert_eq!(
        cgroup_of(pause),
        format!("/crust.slice/{slice}/crust-{}.scope", pod.0)
    );
    let id = e.create(&pod, ctr("c", &["sleep", "1000"])).await;
    e.start(&id).await;
    let (pid, _) = e.pids(&id).await;
    assert_eq!(
        cgroup_of(pid),
        format!("/crust.slice/{slice}/crust-{id}.scope")
    );
    e.remove_pod(&pod.0).await;
    let dir = fs()
        .dir(
            "",
            &CgroupPath::new(&format!("/crust.slice/{slice}")).unwrap(),
        )
        .unwrap();
    until("crust's pod slice is gone", || {
        !active(&slice) && !dir.exists()
    })
    .await;
}

/// A cgroup_parent that is not a slice is the caller's error, and leaves nothing.
#[tokio::test]
#[ignore = "needs systemd as PID 1: runs in hack/vm-test's systemd boot"]
async fn a_cgroupfs_parent_is_invalid() {
    let mut e = setup().await;
    let before = e.d.leftovers();
    for parent in [
        "/kubepods/burstable/pod1",
        "kubepods--x.slice",
        // A path to a slice must be where that slice lives.
        "/other.slice/kubepods-x.slice",
    ] {
        let mut cfg = pod_config("bad", "default", e.logs.path());
        cfg.linux.as_mut().unwrap().cgroup_parent = parent.into();
        let r = run_pod(&mut e.c, &cfg).await;
        assert_code(r, Code::InvalidArgument, parent);
    }
    assert!(list_pods(&mut e.c).await.is_empty());
    assert_eq!(e.d.leftovers(), before);
}

/// crustd killed and started again: the scopes stayed (they are systemd's), the pod
/// and its container are as they were, and removal still cleans up.
#[tokio::test]
#[ignore = "needs systemd as PID 1: runs in hack/vm-test's systemd boot"]
async fn a_restarted_crustd_keeps_its_units() {
    let _kubepods = KUBEPODS.lock().await;
    let mut e = setup().await;
    let slice = kubelet_slice("rst");
    // The slice as the real kubelet sends it: the cgroup path it expands to.
    let parent = expand_slice(&slice).unwrap().to_string();
    let pod = e
        .pod_with("rst", |c| {
            c.linux.as_mut().unwrap().cgroup_parent = parent;
        })
        .await;
    let id = e.create(&pod, ctr("c", &["sleep", "1000"])).await;
    e.start(&id).await;
    let (pid, _) = e.pids(&id).await;
    e.d.kill9();
    e.d.spawn();
    e.c = e.d.client().await;
    let scope = format!("crust-{id}.scope");
    assert!(active(&scope), "{scope} went with crustd");
    assert!(active(&format!("crust-{}.scope", pod.0)));
    let (s, _) = e.status(&id).await;
    assert_eq!(s.state, ContainerState::ContainerRunning as i32, "{s:?}");
    assert_eq!(e.pids(&id).await.0, pid);
    let st = pod_status(&mut e.c, &pod.0).await.unwrap();
    assert_eq!(st.state, PodSandboxState::SandboxReady as i32);
    e.remove_pod(&pod.0).await;
    until("the scopes are gone", || {
        !active(&scope) && !active(&format!("crust-{}.scope", pod.0))
    })
    .await;
    Systemd::connect().unwrap().stop(&slice).unwrap();
}

/// OOMKilled although systemd removes the container's scope (and with it the
/// `memory.events` the monitor reads) as soon as its last process is gone.
#[tokio::test]
#[ignore = "needs systemd as PID 1: runs in hack/vm-test's systemd boot"]
async fn oom_kill_is_reported() {
    let mut e = setup().await;
    let pod = e.pod("oom").await;
    let id = e.create(&pod, memory_hog("hog")).await;
    e.start(&id).await;
    let deadline = Instant::now() + Duration::from_secs(120);
    let s = loop {
        let (s, _) = e.status(&id).await;
        if s.state == ContainerState::ContainerExited as i32 {
            break s;
        }
        assert!(Instant::now() < deadline, "{id} did not exit: {s:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(s.reason, "OOMKilled", "{s:?}");
    let scope = format!("crust-{id}.scope");
    until("the emptied scope is collected", || !active(&scope)).await;
    e.remove_pod(&pod.0).await;
}

/// Where the suite's test binary found the bus: a sanity check that the D-Bus
/// connection in the cgroups crate works from a process like crustd.
#[test]
#[ignore = "needs systemd as PID 1: runs in hack/vm-test's systemd boot"]
fn systemd_answers_over_dbus() {
    let s = Systemd::connect().expect("connecting to systemd");
    let v = s.version().unwrap();
    assert!(!v.is_empty(), "systemd's version");
    assert!(active("-.slice"), "the root slice is active");
    assert!(!active("crust-no-such-unit.scope"));
}

/// The real kubelet v1.28 (`kubelet` of `$CRUST_KUBE_BIN`, which hack/test sets and
/// hack/vm-test hands to the VM) or the crustlet, standalone, in crustd's node network
/// namespace; its output in `<name>.log`. Dropped, it is stopped, and after a failed
/// check the tails of its log and of crustd's are printed: a kubelet says why it did
/// not do something only there.
struct Kubelet {
    /// `kubelet` or `crustlet`.
    name: &'static str,
    child: Option<std::process::Child>,
    dir: crust_e2e::TempDir,
    crustd_log: std::path::PathBuf,
}

impl Kubelet {
    /// Starts `bin` as `name` in the node network namespace of `crustd`, on its socket,
    /// with the static pods of `manifests`, its root and certificates in `dir`, and
    /// `args` besides.
    fn spawn(
        name: &'static str,
        bin: &std::path::Path,
        dir: crust_e2e::TempDir,
        crustd: &Crustd,
        manifests: &std::path::Path,
        args: impl IntoIterator<Item = String>,
    ) -> Kubelet {
        let log = std::fs::File::create(dir.path().join(format!("{name}.log"))).unwrap();
        let p = |rel: &str| dir.path().join(rel).display().to_string();
        let mut cmd = std::process::Command::new("nsenter");
        // nsenter execs the agent in place (no fork for a network namespace): the
        // child's pid is the agent's, for the SIGTERM.
        cmd.arg(format!("--net={}", crustd.node.path().display()))
            .arg("--")
            .arg(bin)
            .arg(format!("--pod-manifest-path={}", manifests.display()))
            .arg(format!(
                "--container-runtime-endpoint=unix://{}",
                crustd.socket.display()
            ))
            .arg(format!("--root-dir={}", p("root")))
            .arg(format!("--cert-dir={}", p("pki")))
            .args(args)
            .stdin(std::process::Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log);
        let child = cmd
            .spawn()
            .unwrap_or_else(|e| panic!("spawning the {name}: {e}"));
        Kubelet {
            name,
            child: Some(child),
            dir,
            crustd_log: crustd.log.clone(),
        }
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join(format!("{}.log", self.name)))
            .unwrap_or_default()
    }

    /// Panics (with the log's tail) when the kubelet has exited: waiting on a dead one
    /// would only end in a timeout that hides why.
    fn assert_running(&mut self, waiting_for: &str) {
        let Some(c) = self.child.as_mut() else {
            panic!(
                "the {} is not running (waiting for {waiting_for})",
                self.name
            );
        };
        if let Ok(Some(st)) = c.try_wait() {
            self.child = None;
            panic!(
                "the {} exited ({st}) while waiting for {waiting_for}",
                self.name
            );
        }
    }

    /// SIGTERM, as systemd stops a kubelet, then SIGKILL if it is still there after
    /// 30 s; how it ended (`None`: not running).
    fn stop(&mut self) -> Option<std::process::ExitStatus> {
        let mut c = self.child.take()?;
        crust_e2e::signal_child(&mut c, libc::SIGTERM);
        let deadline = Instant::now() + Duration::from_secs(30);
        while Instant::now() < deadline {
            if let Ok(Some(st)) = c.try_wait() {
                return Some(st);
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        eprintln!("the {} ignored SIGTERM for 30 s: killed", self.name);
        let _ = c.kill();
        c.wait().ok()
    }
}

impl Drop for Kubelet {
    fn drop(&mut self) {
        self.stop();
        if std::thread::panicking() {
            eprintln!(
                "--- the {}'s log, last 60 lines:\n{}",
                self.name,
                tail(&self.log(), 60)
            );
            let crustd = std::fs::read_to_string(&self.crustd_log).unwrap_or_default();
            eprintln!("--- crustd's log, last 30 lines:\n{}", tail(&crustd, 30));
        }
    }
}

/// Stops `kubepods.slice` (and so whatever is left below it) when dropped: the QoS
/// slices are the kubelet's, and with the kubelet gone nothing else keeps them.
struct KubepodsSlices;

impl Drop for KubepodsSlices {
    fn drop(&mut self) {
        if let Ok(s) = Systemd::connect() {
            let _ = s.stop("kubepods.slice");
        }
    }
}

/// Panics when `deadline` passed (saying what was last seen) or the kubelet exited.
fn still_waiting(k: &mut Kubelet, deadline: Instant, what: &str, last: &str) {
    k.assert_running(what);
    assert!(
        Instant::now() < deadline,
        "timed out waiting for {what}; last seen: {last}"
    );
}

/// Writes the manifest of a Burstable static pod `name` (host network, one container
/// with requests and limits) into `<dir>/manifests`: (the folder, the file, the
/// `crust.test/run` label its sandbox gets, as the kubelet passes a pod's labels on).
fn static_pod(
    dir: &crust_e2e::TempDir,
    name: &str,
) -> (std::path::PathBuf, std::path::PathBuf, String) {
    let manifests = dir.path().join("manifests");
    std::fs::create_dir(&manifests).unwrap();
    let run = crust_e2e::unique("sd");
    let manifest = manifests.join("sysd.yaml");
    std::fs::write(
        &manifest,
        format!(
            "apiVersion: v1
kind: Pod
metadata:
  name: {name}
  namespace: default
  labels:
    crust.test/run: {run}
spec:
  hostNetwork: true
  terminationGracePeriodSeconds: 1
  containers:
  - name: app
    image: {IMAGE}
    imagePullPolicy: Never
    command: [sleep, \"1000\"]
    resources:
      requests: {{cpu: 100m, memory: 32Mi}}
      limits: {{cpu: 500m, memory: 64Mi}}
"
        ),
    )
    .unwrap();
    (manifests, manifest, run)
}

/// The Burstable static pod's slice, as the kubelet names it (`kubepods-burstable-pod<uid>.slice`,
/// the uid's dashes, if any, as underscores, for a dash is a level in a slice's name):
/// its name and cgroup path, checked active and sent by `agent` as the sandbox's
/// cgroup parent; and the sandbox's verbose info.
async fn pod_slice(
    e: &mut Env,
    sandbox: &PodSandbox,
    agent: &str,
) -> (String, String, serde_json::Value) {
    let uid = sandbox.metadata.as_ref().unwrap().uid.clone();
    assert!(!uid.is_empty(), "the sandbox has no pod uid: {sandbox:?}");
    let slice = format!("kubepods-burstable-pod{}.slice", uid.replace('-', "_"));
    let slice_path = format!("/kubepods.slice/kubepods-burstable.slice/{slice}");
    let st =
        e.c.pod_sandbox_status(PodSandboxStatusRequest {
            pod_sandbox_id: sandbox.id.clone(),
            verbose: true,
        })
        .await
        .unwrap()
        .into_inner();
    let info = verbose_info(&st.info);
    // Not the slice's name: v1.28 sends the cgroup path the slice expands to
    // (containerd takes the last name of it).
    assert_eq!(
        info["config"]["linux"]["cgroup_parent"], slice_path,
        "the cgroup_parent the {agent} sent: {info}"
    );
    assert!(active(&slice), "the pod slice {slice} is not active");
    (slice, slice_path, info)
}

/// Runs `f` every 500 ms until it returns something, `k` still running and `deadline`
/// not passed (else panics with `what` and the last thing `f` saw, when not empty).
async fn poll_until<T>(
    k: &mut Kubelet,
    deadline: Instant,
    what: &str,
    mut f: impl AsyncFnMut() -> Result<T, String>,
) -> T {
    let mut last = String::from("nothing");
    loop {
        still_waiting(k, deadline, what, &last);
        match f().await {
            Ok(t) => return t,
            Err(seen) if !seen.is_empty() => last = seen,
            Err(_) => {}
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// Waits (until `deadline`, while `k` runs) for the Ready sandbox of the static pod
/// labelled `crust.test/run=<run>`.
async fn ready_sandbox(e: &mut Env, k: &mut Kubelet, run: &str, deadline: Instant) -> PodSandbox {
    poll_until(
        k,
        deadline,
        "the static pod's sandbox to be Ready",
        async || {
            let items = sandboxes_of(&mut e.c, run).await;
            let ready = items
                .iter()
                .find(|s| s.state == PodSandboxState::SandboxReady as i32);
            ready.cloned().ok_or_else(|| format!("{items:?}"))
        },
    )
    .await
}

/// Waits (until `deadline`, while `k` runs) for a running container in `sandbox`.
async fn running_container(
    e: &mut Env,
    k: &mut Kubelet,
    sandbox: &str,
    deadline: Instant,
) -> Container {
    poll_until(
        k,
        deadline,
        "the static pod's container to run",
        async || {
            let list = list_containers(&mut e.c).await;
            let running = list.iter().find(|c| {
                c.pod_sandbox_id == sandbox && c.state == ContainerState::ContainerRunning as i32
            });
            running.cloned().ok_or_else(|| format!("{list:?}"))
        },
    )
    .await
}

/// The sandboxes labelled `crust.test/run=<run>`.
async fn sandboxes_of(c: &mut Client, run: &str) -> Vec<PodSandbox> {
    let filter = PodSandboxFilter {
        label_selector: [("crust.test/run".to_string(), run.to_string())].into(),
        ..Default::default()
    };
    c.list_pod_sandbox(ListPodSandboxRequest {
        filter: Some(filter),
    })
    .await
    .expect("ListPodSandbox")
    .into_inner()
    .items
}

/// Under emulation (qemu's TCG) the kubelet takes a while to start (cAdvisor, its
/// managers), and a pod's first sync goes through a dozen CRI calls: generous limits.
const KUBELET_POD_UP: Duration = Duration::from_secs(180);
/// Termination, then the kubelet's container GC (a pass a minute) removes the sandbox.
const KUBELET_POD_GONE: Duration = Duration::from_secs(180);

/// The real kubelet v1.28 with `--cgroup-driver=systemd`, standalone (no apiserver: a
/// static pod from a manifest folder), runs a Burstable pod on crustd: the sandbox is
/// Ready with the kubelet's pod slice as its `cgroup_parent` (the kubelet sends the
/// slice's cgroup path, not its name); the pause and the
/// container live in `crust-<id>.scope` units in that slice
/// (`/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod<uid>.slice`), the
/// container's with its memory limit as `MemoryMax` and in `memory.max`. The kubelet
/// learns the driver from crustd's RuntimeConfig (its `KubeletCgroupDriverFromCRI`
/// gate). With the manifest gone the kubelet stops and removes the pod and stops its
/// slice, and every unit is gone.
#[tokio::test]
#[ignore = "needs systemd as PID 1: runs in hack/vm-test's systemd boot"]
async fn a_real_kubelet_with_the_systemd_driver_runs_a_static_pod() {
    // A missing kubelet is a failure, not a skip: this test runs only in the VM, where
    // CI hands the binaries in.
    let kubelet_bin = crust_e2e::cluster::kube_bin("kubelet").unwrap_or_else(|| {
        panic!(
            "no kubelet: set CRUST_KUBE_BIN to the folder `bash hack/deps` unpacks the \
             Kubernetes v1.28.7 binaries to (target/kube-bin; CRUST_KUBE_BIN={:?})",
            std::env::var_os("CRUST_KUBE_BIN")
        )
    });
    let t0 = Instant::now();
    let _kubepods = KUBEPODS.lock().await;
    // Dropped after crustd (declared before it): by then no pod of the test is left
    // in the kubelet's slices.
    let _slices = KubepodsSlices;
    let mut e = setup().await;

    let rc =
        e.c.runtime_config(RuntimeConfigRequest {})
            .await
            .unwrap()
            .into_inner();
    assert_eq!(
        rc.linux.unwrap().cgroup_driver,
        CgroupDriver::Systemd as i32,
        "RuntimeConfig must say SYSTEMD"
    );

    let dir = crust_e2e::TempDir::new("kubelet");
    std::fs::write(dir.path().join("resolv.conf"), "nameserver 127.0.0.1\n").unwrap();
    let (manifests, manifest, run) = static_pod(&dir, "sysd");

    let p = |rel: &str| dir.path().join(rel).display().to_string();
    let args = [
        format!("--resolv-conf={}", p("resolv.conf")),
        // Its default is under /usr, read-only in the VM.
        format!("--volume-plugin-dir={}", p("volume-plugins")),
    ]
    .into_iter()
    .chain(
        [
            "--cgroup-driver=systemd",
            "--cgroups-per-qos=true",
            // The kubelet then asks crustd (RuntimeConfig) and takes its answer.
            "--feature-gates=KubeletCgroupDriverFromCRI=true",
            "--fail-swap-on=false",
            "--read-only-port=0",
            // A disk full of build output (or the VM's small tmpfs) must not put the
            // node under pressure, nor image GC take the test's image.
            "--eviction-hard=memory.available<1Mi,nodefs.available<1%,nodefs.inodesFree<1%,imagefs.available<1%",
            "--eviction-minimum-reclaim=",
            "--image-gc-high-threshold=100",
            "--image-gc-low-threshold=99",
            // The manifest's removal is seen through inotify; the poll is a fallback.
            "--file-check-frequency=5s",
            "--v=2",
        ]
        .map(String::from),
    );
    let mut k = Kubelet::spawn("kubelet", &kubelet_bin, dir, &e.d, &manifests, args);

    // The sandbox, Ready.
    let deadline = Instant::now() + KUBELET_POD_UP;
    let sandbox = ready_sandbox(&mut e, &mut k, &run, deadline).await;
    let sandbox_up = t0.elapsed();
    let (slice, slice_path, info) = pod_slice(&mut e, &sandbox, "kubelet").await;
    let pause_scope = format!("crust-{}.scope", sandbox.id);
    let pause = info["pid"].as_i64().expect("the pause's pid");
    assert_eq!(
        cgroup_of(pause),
        format!("{slice_path}/{pause_scope}"),
        "the pause's cgroup"
    );
    assert!(active(&pause_scope), "{pause_scope} is not active");
    assert_eq!(unit_prop(&pause_scope, "Slice"), slice);

    // The container, running.
    let ctr = running_container(&mut e, &mut k, &sandbox.id, deadline).await;
    let running = t0.elapsed();
    assert_eq!(ctr.metadata.as_ref().unwrap().name, "app");
    let (_, cinfo) = container_status(&mut e.c, &ctr.id).await.unwrap();
    let pid = cinfo["pid"].as_i64().expect("the container's pid");
    let scope = format!("crust-{}.scope", ctr.id);
    assert_eq!(
        cgroup_of(pid),
        format!("{slice_path}/{scope}"),
        "the container's cgroup"
    );
    assert!(active(&scope), "{scope} is not active");
    assert_eq!(unit_prop(&scope, "Slice"), slice);
    assert_eq!(unit_prop(&scope, "Delegate"), "yes");
    let limit = (64u64 << 20).to_string();
    assert_eq!(unit_prop(&scope, "MemoryMax"), limit, "{scope}'s MemoryMax");
    let cdir = fs()
        .dir(
            "",
            &CgroupPath::new(&format!("{slice_path}/{scope}")).unwrap(),
        )
        .unwrap();
    assert_eq!(read(&cdir, "memory.max"), limit);
    // 500m: 50 ms of every 100 ms.
    assert_eq!(read(&cdir, "cpu.max"), "50000 100000");
    assert_eq!(unit_prop(&scope, "CPUQuotaPerSecUSec"), "500ms");
    // The kubelet sends a hugepage limit for every page size the kernel has (0 here):
    // systemd has no property for them, and enables no hugetlb controller for a
    // delegated scope, so crustd must have enabled it above the scope to write them.
    if read(std::path::Path::new("/sys/fs/cgroup"), "cgroup.controllers")
        .split_whitespace()
        .any(|c| c == "hugetlb")
    {
        let maxes: Vec<String> = std::fs::read_dir(&cdir)
            .unwrap()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| n.starts_with("hugetlb.") && n.ends_with(".max"))
            .collect();
        assert!(
            !maxes.is_empty(),
            "no hugetlb controller in {scope} (cgroup.controllers: {})",
            read(&cdir, "cgroup.controllers")
        );
        for f in &maxes {
            assert_eq!(read(&cdir, f), "0", "{scope}'s {f}");
        }
    }
    // The pod-level limit is the kubelet's, on its slice: the sum of the limits.
    assert_eq!(unit_prop(&slice, "MemoryMax"), limit, "{slice}'s MemoryMax");
    let klog = k.log();
    assert!(
        klog.contains("Using cgroup driver setting received from the CRI runtime")
            && klog.contains("cgroupDriver=\"systemd\""),
        "the kubelet did not take the systemd driver from crustd's RuntimeConfig"
    );

    // The manifest gone: the kubelet stops the pod, stops its slice, and its container
    // GC removes the container and the sandbox.
    std::fs::remove_file(&manifest).unwrap();
    let removed_at = Instant::now();
    let deadline = removed_at + KUBELET_POD_GONE;
    let pause_dir = fs()
        .dir(
            "",
            &CgroupPath::new(&format!("{slice_path}/{pause_scope}")).unwrap(),
        )
        .unwrap();
    let slice_dir = fs()
        .dir("", &CgroupPath::new(&slice_path).unwrap())
        .unwrap();
    let mut stopped = None;
    loop {
        let pods = sandboxes_of(&mut e.c, &run).await;
        let ctrs = list_containers(&mut e.c).await;
        let units_gone = !active(&scope)
            && !active(&pause_scope)
            && !active(&slice)
            && !cdir.exists()
            && !pause_dir.exists()
            && !slice_dir.exists();
        if stopped.is_none()
            && pods
                .iter()
                .all(|p| p.state == PodSandboxState::SandboxNotready as i32)
        {
            stopped = Some(removed_at.elapsed());
        }
        if pods.is_empty() && ctrs.is_empty() && units_gone {
            break;
        }
        let last = format!(
            "sandboxes {pods:?}, containers {ctrs:?}, units: {scope} {}, {pause_scope} {}, \
             {slice} {}",
            active(&scope),
            active(&pause_scope),
            active(&slice)
        );
        still_waiting(
            &mut k,
            deadline,
            "the kubelet to stop and remove the pod",
            &last,
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let gone = removed_at.elapsed();
    let st = k.stop();
    assert!(st.is_some(), "the kubelet was not running at the end");
    eprintln!(
        "kubelet: sandbox Ready after {sandbox_up:?}, container running after {running:?}; \
         manifest removed: pod stopped after {stopped:?}, removed with its units after \
         {gone:?}; the kubelet ended {st:?}; {:?} in all",
        t0.elapsed()
    );
}

/// The crustlet, standalone (a static pod from a manifest folder, no apiserver), on
/// crustd with the systemd driver and no `--cgroup-driver`: it takes the driver from
/// crustd's RuntimeConfig, as the kubelet's `KubeletCgroupDriverFromCRI` does (with
/// cgroupfs parents crustd would refuse every pod). It makes `kubepods.slice` and the
/// QoS slices (BestEffort at weight 1), and the pod's own
/// `kubepods-burstable-pod<uid>.slice` with the pod's limits as unit properties and in
/// its files; the sandbox's `cgroup_parent` is that slice's path, as the kubelet sends
/// it, and the pause's and the container's scopes are in it. With the manifest gone the
/// crustlet stops and removes the pod and stops its slice.
#[tokio::test]
#[ignore = "needs systemd as PID 1: runs in hack/vm-test's systemd boot"]
async fn the_crustlet_with_the_systemd_driver_runs_a_static_pod() {
    let _kubepods = KUBEPODS.lock().await;
    let _slices = KubepodsSlices;
    let mut e = setup().await;
    let dir = crust_e2e::TempDir::new("crustlet");
    let (manifests, manifest, run) = static_pod(&dir, "sysd-crustlet");
    let p = |rel: &str| dir.path().join(rel).display().to_string();
    let args = [
        format!("--pod-logs-dir={}", p("logs")),
        // The VM's small disks must not put the node under pressure.
        "--eviction-hard=memory.available<1Mi,nodefs.available<1%,nodefs.inodesFree<1%,imagefs.available<1%".into(),
        "--image-gc-high-threshold=100".into(),
        "--image-gc-low-threshold=99".into(),
    ];
    let mut k = Kubelet::spawn(
        "crustlet",
        &crust_e2e::bin("crustlet"),
        dir,
        &e.d,
        &manifests,
        args,
    );

    let deadline = Instant::now() + KUBELET_POD_UP;
    let sandbox = ready_sandbox(&mut e, &mut k, &run, deadline).await;
    let ctr = running_container(&mut e, &mut k, &sandbox.id, deadline).await;
    let klog = k.log();
    assert!(
        klog.contains("cgroup driver systemd (from the runtime)"),
        "the crustlet did not take the driver from crustd's RuntimeConfig"
    );
    let (slice, slice_path, info) = pod_slice(&mut e, &sandbox, "crustlet").await;
    for unit in [
        "kubepods.slice",
        "kubepods-burstable.slice",
        "kubepods-besteffort.slice",
    ] {
        assert!(active(unit), "{unit} is not active");
    }
    assert_eq!(unit_prop("kubepods-besteffort.slice", "CPUWeight"), "1");
    // The pod's limits: the sum of its containers', as the kubelet sets them.
    let limit = (64u64 << 20).to_string();
    assert_eq!(unit_prop(&slice, "MemoryMax"), limit, "{slice}'s MemoryMax");
    assert_eq!(unit_prop(&slice, "CPUQuotaPerSecUSec"), "500ms");
    let slice_dir = fs()
        .dir("", &CgroupPath::new(&slice_path).unwrap())
        .unwrap();
    assert_eq!(read(&slice_dir, "memory.max"), limit);
    assert_eq!(read(&slice_dir, "cpu.max"), "50000 100000");
    let pause_scope = format!("crust-{}.scope", sandbox.id);
    assert_eq!(
        cgroup_of(info["pid"].as_i64().expect("the pause's pid")),
        format!("{slice_path}/{pause_scope}")
    );
    let (_, cinfo) = container_status(&mut e.c, &ctr.id).await.unwrap();
    let scope = format!("crust-{}.scope", ctr.id);
    assert_eq!(
        cgroup_of(cinfo["pid"].as_i64().expect("the container's pid")),
        format!("{slice_path}/{scope}")
    );
    assert_eq!(unit_prop(&scope, "Slice"), slice);

    // The manifest gone: the pod is stopped and removed, and its slice stopped.
    std::fs::remove_file(&manifest).unwrap();
    let deadline = Instant::now() + KUBELET_POD_GONE;
    loop {
        let pods = sandboxes_of(&mut e.c, &run).await;
        if pods.is_empty() && !active(&slice) && !slice_dir.exists() {
            break;
        }
        let last = format!(
            "sandboxes {pods:?}; {slice} active: {}, its cgroup there: {}",
            active(&slice),
            slice_dir.exists()
        );
        still_waiting(&mut k, deadline, "the crustlet to remove the pod", &last);
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    assert!(
        k.stop().is_some(),
        "the crustlet was not running at the end"
    );
}

/// The kubelet's AppArmor annotation, end to end, under the real kubelet v1.28 and the
/// crustlet (standalone, a static pod): a container annotated
/// `localhost/crust-test-deny-write` runs under that profile (its init and an exec:
/// writes refused), one without an annotation under crust's default profile, and the
/// pause unconfined. In the systemd boot, where systemd mounts securityfs and Debian's
/// kernel has AppArmor on (`CRUST_APPARMOR_VM=1`).
#[tokio::test]
#[ignore = "needs systemd as PID 1: runs in hack/vm-test's systemd boot"]
async fn the_apparmor_annotation_confines_under_the_kubelet_and_the_crustlet() {
    assert!(
        std::env::var("CRUST_APPARMOR_VM").is_ok_and(|v| v == "1"),
        "AppArmor is not on in this boot (CRUST_APPARMOR_VM)"
    );
    let kubelet_bin = crust_e2e::cluster::kube_bin("kubelet").expect("CRUST_KUBE_BIN's kubelet");
    let _kubepods = KUBEPODS.lock().await;
    let _slices = KubepodsSlices;
    let mut e = setup().await;
    let mut parser = std::process::Command::new("apparmor_parser")
        .args(["-r", "-K"])
        .stdin(std::process::Stdio::piped())
        .spawn()
        .expect("apparmor_parser");
    std::io::Write::write_all(
        &mut parser.stdin.take().unwrap(),
        b"#include <tunables/global>\nprofile crust-test-deny-write flags=(attach_disconnected) {\n  #include <abstractions/base>\n  file,\n  deny /** w,\n}\n",
    )
    .unwrap();
    assert!(parser.wait().unwrap().success(), "loading the test profile");

    for agent in ["kubelet", "crustlet"] {
        let dir = crust_e2e::TempDir::new(agent);
        let manifests = dir.path().join("manifests");
        std::fs::create_dir(&manifests).unwrap();
        let run = crust_e2e::unique("aa");
        let manifest = manifests.join("aa.yaml");
        std::fs::write(
            &manifest,
            format!(
                "apiVersion: v1
kind: Pod
metadata:
  name: aa-{agent}
  namespace: default
  labels:
    crust.test/run: {run}
  annotations:
    container.apparmor.security.beta.kubernetes.io/denied: localhost/crust-test-deny-write
spec:
  hostNetwork: true
  terminationGracePeriodSeconds: 1
  containers:
  - name: denied
    image: {IMAGE}
    imagePullPolicy: Never
    command: [sleep, \"1000\"]
  - name: plain
    image: {IMAGE}
    imagePullPolicy: Never
    command: [sleep, \"1000\"]
"
            ),
        )
        .unwrap();
        let p = |rel: &str| dir.path().join(rel).display().to_string();
        let no_pressure = "--eviction-hard=memory.available<1Mi,nodefs.available<1%,nodefs.inodesFree<1%,imagefs.available<1%";
        let (bin, args): (std::path::PathBuf, Vec<String>) = if agent == "kubelet" {
            (
                kubelet_bin.clone(),
                vec![
                    format!("--resolv-conf={}", p("resolv.conf")),
                    format!("--volume-plugin-dir={}", p("volume-plugins")),
                    "--cgroup-driver=systemd".into(),
                    "--feature-gates=KubeletCgroupDriverFromCRI=true".into(),
                    "--fail-swap-on=false".into(),
                    "--read-only-port=0".into(),
                    no_pressure.into(),
                    "--eviction-minimum-reclaim=".into(),
                    "--image-gc-high-threshold=100".into(),
                    "--image-gc-low-threshold=99".into(),
                    "--file-check-frequency=5s".into(),
                ],
            )
        } else {
            (
                crust_e2e::bin("crustlet"),
                vec![
                    format!("--pod-logs-dir={}", p("logs")),
                    no_pressure.into(),
                    "--image-gc-high-threshold=100".into(),
                    "--image-gc-low-threshold=99".into(),
                ],
            )
        };
        std::fs::write(dir.path().join("resolv.conf"), "nameserver 127.0.0.1\n").unwrap();
        let mut k = Kubelet::spawn(
            if agent == "kubelet" {
                "kubelet"
            } else {
                "crustlet"
            },
            &bin,
            dir,
            &e.d,
            &manifests,
            args,
        );
        let deadline = Instant::now() + KUBELET_POD_UP;
        let sandbox = ready_sandbox(&mut e, &mut k, &run, deadline).await;
        let containers = poll_until(&mut k, deadline, "both containers to run", async || {
            let list = list_containers(&mut e.c).await;
            let running: Vec<Container> = list
                .into_iter()
                .filter(|c| {
                    c.pod_sandbox_id == sandbox.id
                        && c.state == ContainerState::ContainerRunning as i32
                })
                .collect();
            if running.len() == 2 {
                Ok(running)
            } else {
                Err(format!("{running:?}"))
            }
        })
        .await;
        let attr = |pid: i64| {
            std::fs::read_to_string(format!("/proc/{pid}/attr/current"))
                .unwrap()
                .trim_end_matches(['\n', '\0'])
                .to_string()
        };
        for c in &containers {
            let name = c.metadata.as_ref().unwrap().name.clone();
            let (_, info) = container_status(&mut e.c, &c.id).await.unwrap();
            let want = if name == "denied" {
                "crust-test-deny-write (enforce)"
            } else {
                "crust-default (enforce)"
            };
            assert_eq!(attr(info["pid"].as_i64().unwrap()), want, "{agent}: {name}");
            let r = exec_sync(&mut e.c, &c.id, &["touch", "/tmp/y"], 10)
                .await
                .unwrap();
            assert_eq!(r.exit_code != 0, name == "denied", "{agent}: {name}: {r:?}");
        }
        let st =
            e.c.pod_sandbox_status(PodSandboxStatusRequest {
                pod_sandbox_id: sandbox.id.clone(),
                verbose: true,
            })
            .await
            .unwrap()
            .into_inner();
        let pause = verbose_info(&st.info)["pid"]
            .as_i64()
            .expect("the pause's pid");
        assert_eq!(attr(pause), "unconfined", "{agent}: the pause");

        std::fs::remove_file(&manifest).unwrap();
        let deadline = Instant::now() + KUBELET_POD_GONE;
        poll_until(&mut k, deadline, "the pod to be removed", async || {
            let pods = sandboxes_of(&mut e.c, &run).await;
            if pods.is_empty() {
                Ok(())
            } else {
                Err(format!("{pods:?}"))
            }
        })
        .await;
        assert!(k.stop().is_some(), "the {agent} was not running at the end");
    }
}
