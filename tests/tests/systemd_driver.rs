//! crustd with `cgroup.driver = "systemd"`, end to end through CRI on a node where
//! systemd is PID 1 and manages cgroup v2 (hack/vm-test's systemd boot; these machines
//! have no systemd running, hence `#[ignore]` here and `--include-ignored` there).
//!
//! What a kubelet with `--cgroup-driver=systemd` sees: RuntimeConfig says SYSTEMD; a
//! pod's `cgroup_parent` is the slice the kubelet made; the pause and each container
//! are a transient scope `crust-<id>.scope` in it, with their limits as unit
//! properties and in the cgroup files; the units go with the pod and containers; a
//! crustd killed and started again finds them all; an OOM kill is reported although
//! systemd removes an emptied scope at once.

use cgroups::systemd::{expand_slice, Systemd};
use cgroups::{CgroupManager, CgroupPath, Hierarchy};
use cri_api::*;
use crust_e2e::cri::*;
use crust_e2e::crustd::{Crustd, Options};
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
    for parent in ["/kubepods/burstable/pod1", "kubepods--x.slice"] {
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
    let mut e = setup().await;
    let slice = kubelet_slice("rst");
    let pod = e
        .pod_with("rst", |c| {
            c.linux.as_mut().unwrap().cgroup_parent = slice.clone();
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
    let mut cfg = ctr(
        "hog",
        &[
            "sh",
            "-c",
            "x=$(head -c 200000000 /dev/zero | tr '\\0' a); echo done",
        ],
    );
    res(&mut cfg).memory_limit_in_bytes = 16 << 20;
    let id = e.create(&pod, cfg).await;
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
