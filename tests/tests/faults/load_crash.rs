//! Under load (issue 14): crustd killed with SIGKILL while a burst of pods is being made
//! beside a hundred running ones, a container that exits while crustd is down, and a
//! container whose monitor is killed. The crash suite (crash.rs) cuts one RPC at each
//! step with nothing else going on; here the cut falls wherever twenty concurrent RPCs
//! happen to be, on a daemon with a hundred pods to recover, which is how a node loses
//! its runtime in practice. What was acknowledged must come back whole and usable; what
//! was cut must be whole, rolled back with its name free, or cleanly NOTREADY, never
//! half made; and after everything is removed through the CRI nothing may be left
//! ([`Crustd::assert_clean`], the crash suite's check). A container's exit must never
//! go unseen: not when crustd was down as it happened (the monitor's exit record), and
//! not when the monitor itself died (reported exited, reason `Unknown`, exit code 255,
//! as containerd reports a task whose shim died).

use cri_api::*;
use crust_e2e::cri::{
    self, container_status, create_container, ctr, import_busybox, list_containers, list_pods,
    log_lines, pod_status, remove_container, remove_pod, run_pod, start_container, stop_container,
    stop_pod, Client, Env,
};
use crust_e2e::crustd::{Crustd, Leftovers};
use crust_e2e::{parent_of, require_root, TempDir};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::future::Future;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::SeqCst};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

fn root() -> bool {
    require_root(&["ip", "nsenter", "nft", "busybox"])
}

/// Pods running before the burst: enough that recovery and the burst contend with a
/// node's worth of state, few enough for a 2-core CI machine.
const BASE: usize = 100;
/// Pods made at once while crustd is killed.
const BURST: usize = 20;
/// How many RPCs the base pods and the clean-up keep in flight (the kubelet's pod
/// workers run in parallel too, but not a hundred at once on two cores).
const WIDTH: usize = 10;
/// crustd is killed once this many of the burst's containers have started: late enough
/// that acknowledged pods exist to check, early enough that most of the burst is still
/// in flight.
const KILL_AFTER: usize = 3;

fn now_ns() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_nanos() as i64
}

/// A pod of this suite, in namespace `load`.
fn pod_config(name: &str, logs: &Path) -> PodSandboxConfig {
    cri::pod_config(name, "load", logs)
}

/// A container that runs until stopped.
fn sleeper(name: &str) -> ContainerConfig {
    ctr(name, &["sleep", "3600"])
}

/// Runs `true` in a running container: it is whole and usable, not only listed.
async fn exec_true(c: &mut Client, id: &str, what: &str) {
    cri::exec_true(c, id, 30, what).await
}

/// Runs `job(i)` for every `i` in `0..n`, at most `width` at a time, and returns the
/// results in the order of `i`. A panic in a job is the test's panic.
async fn bounded<T, F, Fut>(n: usize, width: usize, job: F) -> Vec<T>
where
    T: Send + 'static,
    F: Fn(usize) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = T> + Send + 'static,
{
    let job = Arc::new(job);
    let next = Arc::new(AtomicUsize::new(0));
    let workers: Vec<_> = (0..width.min(n))
        .map(|_| {
            let (job, next) = (job.clone(), next.clone());
            tokio::spawn(async move {
                let mut done = Vec::new();
                loop {
                    let i = next.fetch_add(1, SeqCst);
                    if i >= n {
                        return done;
                    }
                    done.push((i, job(i).await));
                }
            })
        })
        .collect();
    let mut all = Vec::new();
    for w in workers {
        match w.await {
            Ok(done) => all.extend(done),
            Err(e) => std::panic::resume_unwind(e.into_panic()),
        }
    }
    all.sort_by_key(|(i, _)| *i);
    all.into_iter().map(|(_, t)| t).collect()
}

/// How far one pod of the burst got: what its client saw acknowledged.
#[derive(Debug, Default)]
struct Burst {
    name: String,
    /// RunPodSandbox answered with this id.
    pod: Option<String>,
    /// CreateContainer answered with this id.
    ctr: Option<String>,
    /// StartContainer answered.
    started: bool,
    /// The call that failed, and whether it failed before crustd was killed (which
    /// would be a failure under load, not the crash this test makes).
    error: Option<(String, bool)>,
}

/// Stops and removes every container, then every pod, through the CRI, `WIDTH` at a
/// time, as the kubelet tears a node's pods down.
async fn remove_everything(c: &Client, what: &'static str) {
    let mut c1 = c.clone();
    let ctrs: Arc<Vec<String>> = Arc::new(
        list_containers(&mut c1)
            .await
            .into_iter()
            .map(|x| x.id)
            .collect(),
    );
    let n = ctrs.len();
    let c2 = c.clone();
    bounded(n, WIDTH, move |i| {
        let (mut c, id) = (c2.clone(), ctrs[i].clone());
        async move {
            stop_container(&mut c, &id, 0)
                .await
                .unwrap_or_else(|e| panic!("{what}: StopContainer {id}: {e:?}"));
            remove_container(&mut c, &id)
                .await
                .unwrap_or_else(|e| panic!("{what}: RemoveContainer {id}: {e:?}"));
        }
    })
    .await;
    let ids: Arc<Vec<String>> =
        Arc::new(list_pods(&mut c1).await.into_iter().map(|p| p.id).collect());
    let n = ids.len();
    let c2 = c.clone();
    bounded(n, WIDTH, move |i| {
        let (mut c, id) = (c2.clone(), ids[i].clone());
        async move {
            stop_pod(&mut c, &id)
                .await
                .unwrap_or_else(|e| panic!("{what}: StopPodSandbox {id}: {e:?}"));
            remove_pod(&mut c, &id)
                .await
                .unwrap_or_else(|e| panic!("{what}: RemovePodSandbox {id}: {e:?}"));
        }
    })
    .await;
    assert!(list_pods(&mut c1).await.is_empty(), "{what}: pods left");
    assert!(
        list_containers(&mut c1).await.is_empty(),
        "{what}: containers left"
    );
}

/// A hundred running pods (each a sandbox and a running `sleep`), then twenty
/// RunPodSandbox + CreateContainer + StartContainer at once, and crustd killed with
/// SIGKILL once the first few of those have started: the crash lands wherever the
/// other RPCs are. Restarted on the same dirs, crustd must show every acknowledged pod
/// READY and every acknowledged container usable (a running one execs `true`, a
/// created one starts), and what was cut whole or rolled back with its name free again
/// (the kubelet retries under the same name), or NOTREADY: never a READY pod without
/// its address, reservation or namespace, never a container in the `creating` limbo,
/// no pause or monitor process that no pod or container owns, no address reserved for
/// no pod. Then everything goes through the CRI and nothing may be left.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn kill_during_a_burst() {
    if !root() {
        return;
    }
    let what = "kill_during_a_burst";
    let t0 = Instant::now();
    let mut d = Crustd::start();
    import_busybox(&d);
    let logs = TempDir::new("lcl");
    let logs_dir: Arc<PathBuf> = Arc::new(logs.path().to_path_buf());
    let empty = d.leftovers();
    let c = d.client().await;

    let base: Vec<(String, String)> = {
        let (c, logs) = (c.clone(), logs_dir.clone());
        bounded(BASE, WIDTH, move |i| {
            let (mut c, logs) = (c.clone(), logs.clone());
            async move {
                let name = format!("base{i}");
                let cfg = pod_config(&name, &logs);
                let pod = run_pod(&mut c, &cfg)
                    .await
                    .unwrap_or_else(|e| panic!("RunPodSandbox {name}: {e:?}"));
                let id = create_container(&mut c, &pod, &cfg, sleeper(&name))
                    .await
                    .unwrap_or_else(|e| panic!("CreateContainer in {name}: {e:?}"));
                start_container(&mut c, &id)
                    .await
                    .unwrap_or_else(|e| panic!("StartContainer in {name}: {e:?}"));
                (pod, id)
            }
        })
        .await
    };
    eprintln!(
        "{what}: {BASE} pods running after {:.1} s",
        t0.elapsed().as_secs_f64()
    );

    // The burst. Each pod's client notes what was answered; the kill comes from here,
    // after KILL_AFTER containers of the burst have started.
    let killed = Arc::new(AtomicBool::new(false));
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<()>();
    let burst: Vec<_> = (0..BURST)
        .map(|i| {
            let (mut c, tx, killed, logs) =
                (c.clone(), tx.clone(), killed.clone(), logs_dir.clone());
            tokio::spawn(async move {
                let mut b = Burst {
                    name: format!("burst{i}"),
                    ..Default::default()
                };
                let cfg = pod_config(&b.name, &logs);
                let r = async {
                    let pod = run_pod(&mut c, &cfg)
                        .await
                        .map_err(|e| ("RunPodSandbox", e))?;
                    b.pod = Some(pod.clone());
                    let id = create_container(&mut c, &pod, &cfg, sleeper(&b.name))
                        .await
                        .map_err(|e| ("CreateContainer", e))?;
                    b.ctr = Some(id.clone());
                    start_container(&mut c, &id)
                        .await
                        .map_err(|e| ("StartContainer", e))?;
                    b.started = true;
                    let _ = tx.send(());
                    Ok::<(), (&str, tonic::Status)>(())
                }
                .await;
                if let Err((rpc, e)) = r {
                    b.error = Some((format!("{rpc}: {e:?}"), !killed.load(SeqCst)));
                }
                b
            })
        })
        .collect();
    drop(tx);
    let mut started = 0;
    while started < KILL_AFTER {
        match tokio::time::timeout(Duration::from_secs(120), rx.recv()).await {
            Ok(Some(())) => started += 1,
            // Every burst task ended: the checks below say how.
            Ok(None) => break,
            Err(_) => panic!("{what}: not {KILL_AFTER} of the burst started within 120 s"),
        }
    }
    killed.store(true, SeqCst);
    d.kill9();
    let killed_at = t0.elapsed();
    let mut burst_done = Vec::new();
    for b in burst {
        let b = tokio::time::timeout(Duration::from_secs(60), b)
            .await
            .unwrap_or_else(|_| panic!("{what}: a burst client hangs after the kill"))
            .expect("burst task");
        burst_done.push(b);
    }
    let burst = burst_done;
    for b in &burst {
        if let Some((e, true)) = &b.error {
            panic!("{what}: {} failed before the kill: {e}", b.name);
        }
    }
    let tally = |f: &dyn Fn(&Burst) -> bool| burst.iter().filter(|b| f(b)).count();
    let (acked_pods, acked_ctrs, acked_starts) = (
        tally(&|b| b.pod.is_some()),
        tally(&|b| b.ctr.is_some()),
        tally(&|b| b.started),
    );
    eprintln!(
        "{what}: killed at {:.1} s; of the burst of {BURST}, acknowledged: {acked_pods} pods, \
         {acked_ctrs} containers created, {acked_starts} started",
        killed_at.as_secs_f64()
    );
    assert!(
        acked_starts >= KILL_AFTER.min(BURST),
        "{what}: the burst never got going: {burst:#?}"
    );
    assert!(
        acked_starts < BURST,
        "{what}: the kill came after the whole burst was done: it cut nothing"
    );

    let t_restart = Instant::now();
    d.spawn();
    let mut c = d.client().await;
    let listed = list_pods(&mut c).await;
    let ctrs = list_containers(&mut c).await;
    eprintln!(
        "{what}: restarted and listing in {:.1} s: {} pods, {} containers",
        t_restart.elapsed().as_secs_f64(),
        listed.len(),
        ctrs.len()
    );
    let pod_by_id: HashMap<&str, &PodSandbox> = listed.iter().map(|p| (p.id.as_str(), p)).collect();
    let ctr_by_id: HashMap<&str, &Container> = ctrs.iter().map(|x| (x.id.as_str(), x)).collect();
    let ready = |p: &PodSandbox| p.state == PodSandboxState::SandboxReady as i32;

    // No pod or container in between states.
    for p in &listed {
        assert!(
            ready(p) || p.state == PodSandboxState::SandboxNotready as i32,
            "{what}: pod {} in state {}",
            p.id,
            p.state
        );
    }
    for x in &ctrs {
        let s = ContainerState::try_from(x.state).unwrap();
        assert!(
            matches!(
                s,
                ContainerState::ContainerCreated
                    | ContainerState::ContainerRunning
                    | ContainerState::ContainerExited
            ),
            "{what}: container {} in state {s:?}",
            x.id
        );
        let p = pod_by_id
            .get(x.pod_sandbox_id.as_str())
            .unwrap_or_else(|| panic!("{what}: container {} of a pod not listed", x.id));
        assert!(
            ready(p) || s != ContainerState::ContainerRunning,
            "{what}: container {} runs in NOTREADY pod {}",
            x.id,
            p.id
        );
    }

    // The hundred pods never noticed: READY, and their containers run and exec.
    for (pod, id) in &base {
        let p = pod_by_id
            .get(pod.as_str())
            .unwrap_or_else(|| panic!("{what}: base pod {pod} is gone"));
        assert!(ready(p), "{what}: base pod {pod} is not READY: {p:?}");
        let x = ctr_by_id
            .get(id.as_str())
            .unwrap_or_else(|| panic!("{what}: base container {id} is gone"));
        assert_eq!(
            x.state,
            ContainerState::ContainerRunning as i32,
            "{what}: base container {id} is not RUNNING"
        );
    }
    {
        let base = Arc::new(base.clone());
        let c = c.clone();
        bounded(base.len(), WIDTH, move |i| {
            let (mut c, base) = (c.clone(), base.clone());
            async move { exec_true(&mut c, &base[i].1, "a base container after the restart").await }
        })
        .await;
    }

    // Every READY pod is whole: its address, reserved in host-local's store, and its
    // pinned network namespace. Every reserved address belongs to a listed pod.
    let left = d.leftovers();
    let mut pod_ips = BTreeSet::new();
    let mut ready_count = 0;
    for p in &listed {
        let st = pod_status(&mut c, &p.id)
            .await
            .unwrap_or_else(|e| panic!("{what}: PodSandboxStatus {}: {e:?}", p.id));
        let net = st.network.clone().unwrap_or_default();
        pod_ips.insert(net.ip.clone());
        pod_ips.extend(net.additional_ips.iter().map(|i| i.ip.clone()));
        if !ready(p) {
            continue;
        }
        ready_count += 1;
        let ips: Vec<&str> = std::iter::once(&net.ip)
            .chain(net.additional_ips.iter().map(|i| &i.ip))
            .map(|ip| ip.as_str())
            .collect();
        d.assert_ready_pod_whole(&left, &p.id, &ips, what);
    }
    let stray: Vec<_> = left
        .ip_files
        .iter()
        .filter(|f| !pod_ips.contains(*f))
        .collect();
    assert!(
        stray.is_empty(),
        "{what}: addresses reserved for no listed pod: {stray:?}"
    );
    assert_eq!(
        left.pauses.len(),
        ready_count,
        "{what}: pause processes against READY pods"
    );
    let live = ctrs
        .iter()
        .filter(|x| {
            x.state == ContainerState::ContainerCreated as i32
                || x.state == ContainerState::ContainerRunning as i32
        })
        .count();
    assert_eq!(
        d.monitor_pids().len(),
        live,
        "{what}: monitor processes against created and running containers"
    );

    // The burst: what was acknowledged is back and usable; what was cut is whole or
    // rolled back, its name free again.
    let mut outcome: BTreeMap<&str, usize> = BTreeMap::new();
    let in_pod = |pod: &str, name: &str| {
        ctrs.iter()
            .find(|x| {
                x.pod_sandbox_id == pod && x.metadata.as_ref().is_some_and(|m| m.name == name)
            })
            .cloned()
    };
    for b in &burst {
        let cfg = pod_config(&b.name, &logs_dir);
        let found = listed
            .iter()
            .find(|p| p.metadata.as_ref().is_some_and(|m| m.name == b.name));
        let pod = match (&b.pod, found) {
            (Some(id), Some(p)) => {
                assert_eq!(&p.id, id, "{what}: {} came back under another id", b.name);
                assert!(ready(p), "{what}: acknowledged pod {} is not READY", b.name);
                id.clone()
            }
            (Some(id), None) => panic!("{what}: acknowledged pod {} ({id}) is gone", b.name),
            (None, Some(p)) if ready(p) => {
                *outcome.entry("cut pod whole").or_default() += 1;
                p.id.clone()
            }
            (None, Some(p)) => {
                // NOTREADY, with no container made in it: left for the clean-up.
                *outcome.entry("cut pod NOTREADY").or_default() += 1;
                assert!(
                    in_pod(&p.id, &b.name).is_none(),
                    "{what}: a container in unacknowledged pod {}",
                    b.name
                );
                continue;
            }
            (None, None) => {
                *outcome.entry("cut pod rolled back").or_default() += 1;
                run_pod(&mut c, &cfg).await.unwrap_or_else(|e| {
                    panic!("{what}: the rolled-back pod {}'s name: {e:?}", b.name)
                })
            }
        };
        let x = in_pod(&pod, &b.name);
        let id = match (&b.ctr, x) {
            (Some(id), Some(x)) => {
                assert_eq!(&x.id, id, "{what}: {}'s container under another id", b.name);
                if b.started {
                    assert_eq!(
                        x.state,
                        ContainerState::ContainerRunning as i32,
                        "{what}: acknowledged start of {}'s container: not RUNNING",
                        b.name
                    );
                    *outcome.entry("started").or_default() += 1;
                } else {
                    // Created, or running when the cut StartContainer had opened the gate.
                    *outcome
                        .entry(if x.state == ContainerState::ContainerRunning as i32 {
                            "cut start whole"
                        } else {
                            "created, start cut before the gate"
                        })
                        .or_default() += 1;
                }
                x.id
            }
            (Some(id), None) => panic!("{what}: acknowledged container {id} of {} is gone", b.name),
            (None, Some(x)) => {
                *outcome.entry("cut create whole").or_default() += 1;
                assert_eq!(
                    x.state,
                    ContainerState::ContainerCreated as i32,
                    "{what}: the cut container of {} is neither whole nor rolled back",
                    b.name
                );
                x.id
            }
            (None, None) => {
                if b.pod.is_some() {
                    *outcome.entry("cut create rolled back").or_default() += 1;
                }
                create_container(&mut c, &pod, &cfg, sleeper(&b.name))
                    .await
                    .unwrap_or_else(|e| {
                        panic!("{what}: a container named {} in its pod: {e:?}", b.name)
                    })
            }
        };
        let (st, _) = container_status(&mut c, &id)
            .await
            .unwrap_or_else(|e| panic!("ContainerStatus {id}: {e:?}"));
        if st.state == ContainerState::ContainerCreated as i32 {
            start_container(&mut c, &id)
                .await
                .unwrap_or_else(|e| panic!("{what}: {}'s created container: {e:?}", b.name));
        }
        exec_true(&mut c, &id, what).await;
    }
    eprintln!("{what}: the burst after the restart: {outcome:?}");

    remove_everything(&c, what).await;
    d.assert_clean(&empty, what);
    eprintln!("{what}: done in {:.1} s", t0.elapsed().as_secs_f64());
}

/// A crustd with the busybox image, what it leaves when empty, and one pod `name`.
async fn one_pod(name: &str) -> (Env, Leftovers, (String, PodSandboxConfig)) {
    let mut e = Env::with(Crustd::start()).await;
    let empty = e.d.leftovers();
    let pod = e.pod(name).await;
    (e, empty, pod)
}

/// Creates and starts `cfg` in `pod`: its id, its init's pid and its monitor's.
async fn run_in(
    e: &mut Env,
    pod: &(String, PodSandboxConfig),
    cfg: ContainerConfig,
) -> (String, i64, i64) {
    let id = e.create(pod, cfg).await;
    e.start(&id).await;
    let (pid, monitor) = e.pids(&id).await;
    (id, pid, monitor)
}

/// crustd started again on the same dirs (after `kill9`), and a client of it.
async fn restart(e: &mut Env) {
    e.d.spawn();
    e.c = e.d.client().await;
}

/// Removes the pod through the CRI; then nothing may be left of it.
async fn remove_pod_and_check(e: &mut Env, pod: &str, empty: &Leftovers, what: &str) {
    e.remove_pod(pod).await;
    e.d.assert_clean(empty, what);
}

/// How a container ended: state, exit code, reason.
fn exit_of(s: &ContainerStatus) -> (ContainerState, i32, &str) {
    (
        ContainerState::try_from(s.state).unwrap(),
        s.exit_code,
        &s.reason,
    )
}

/// SIGKILL to `pid`, which must exist.
fn kill9(pid: i64) {
    // SAFETY: kill has no memory effects; the callers name a process of their test.
    assert_eq!(unsafe { libc::kill(pid as i32, libc::SIGKILL) }, 0);
}

/// What `kill_during_a_burst` hits now and then, made certain: StartContainer cut
/// after the executor wrote the start byte into the gate FIFO and before it removed
/// the gate. The init has gone through the gate and runs the command, but the gate is
/// still there; crustd took that for `created` and every StartContainer after the
/// restart failed (`is created: cannot start`: the FIFO had no reader), so the kubelet
/// could neither start the container nor see it run. Here crustd is killed after
/// CreateContainer and the test writes the byte itself, as the cut start did.
#[tokio::test]
async fn start_cut_after_the_gate_opened_is_running() {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    if !root() {
        return;
    }
    let what = "start_cut_after_the_gate_opened_is_running";
    let (mut e, empty, pod) = one_pod("gate").await;
    let id = e.create(&pod, sleeper("gate")).await;
    e.d.kill9();
    let gate =
        e.d.state
            .path()
            .join("containers")
            .join(&id)
            .join("exec.fifo");
    let open = || {
        std::fs::OpenOptions::new()
            .write(true)
            .custom_flags(libc::O_NONBLOCK)
            .open(&gate)
    };
    open()
        .and_then(|mut f| f.write_all(&[0]))
        .unwrap_or_else(|e| panic!("{what}: the start byte into {}: {e}", gate.display()));
    // The init takes it and execs, which closes its end: the gate has no reader.
    let deadline = Instant::now() + Duration::from_secs(10);
    while open().is_ok() {
        assert!(
            Instant::now() < deadline,
            "{what}: the init never went through the gate"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    assert!(gate.exists());
    restart(&mut e).await;
    let (s, _) = e.status(&id).await;
    assert_eq!(
        s.state,
        ContainerState::ContainerRunning as i32,
        "{what}: a container whose start went through the gate: {s:?}"
    );
    assert!(s.started_at > 0, "{what}: no started_at: {s:?}");
    exec_true(&mut e.c, &id, what).await;

    e.stop(&id, 0).await;
    e.remove(&id).await;
    remove_pod_and_check(&mut e, &pod.0, &empty, what).await;
}

/// How a process is now: `None` when gone or a zombie (reaped or only waiting for
/// its parent's wait), else its `/proc/PID/stat` state letter.
fn proc_state(pid: i64) -> Option<char> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let state = s
        .rsplit_once(')')?
        .1
        .split_whitespace()
        .next()?
        .chars()
        .next()?;
    (!matches!(state, 'Z' | 'X' | 'x')).then_some(state)
}

/// Waits until process `pid` is gone (or a zombie); false after `timeout`.
fn wait_dead(pid: i64, timeout: Duration) -> bool {
    let deadline = Instant::now() + timeout;
    while proc_state(pid).is_some() {
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    true
}

/// A container that exits with code 7 while crustd is down (killed with SIGKILL) is
/// reported after the restart, at once, as the monitor recorded it: EXITED, exit code
/// 7, reason Error, finished within the time crustd was down, and the output it wrote
/// meanwhile is in its log. The kubelet restarts a pod's containers by that exit code
/// and time; a restart that took the exit for a crash (or missed it) would break
/// `restartPolicy: OnFailure` and the back-off.
#[tokio::test]
async fn exit_while_down_is_reported() {
    if !root() {
        return;
    }
    let what = "exit_while_down_is_reported";
    let (mut e, empty, pod) = one_pod("down").await;
    let (id, pid, monitor) = run_in(
        &mut e,
        &pod,
        ctr(
            "seven",
            &["sh", "-c", "echo before; sleep 2; echo after; exit 7"],
        ),
    )
    .await;
    let down_from = now_ns();
    e.d.kill9();
    assert!(
        proc_state(pid).is_some(),
        "{what}: the container ended before crustd was killed (or with it)"
    );
    // Its exit and then its monitor's, which writes the exit record before it goes.
    assert!(
        wait_dead(pid, Duration::from_secs(20)),
        "{what}: the container did not exit"
    );
    assert!(
        wait_dead(monitor, Duration::from_secs(20)),
        "{what}: the monitor did not exit after its container"
    );
    let down_to = now_ns();
    restart(&mut e).await;

    // The first answer after the restart already knows.
    let (s, _) = e.status(&id).await;
    assert_eq!(
        exit_of(&s),
        (ContainerState::ContainerExited, 7, "Error"),
        "{what}: {s:?}"
    );
    assert!(
        down_from <= s.finished_at && s.finished_at <= down_to,
        "{what}: finished_at {} is not within the down time {down_from}..{down_to}",
        s.finished_at
    );
    assert!(
        s.started_at < down_from,
        "{what}: started_at {} after crustd went down at {down_from}",
        s.started_at
    );
    let listed =
        e.c.list_containers(ListContainersRequest::default())
            .await
            .unwrap()
            .into_inner()
            .containers;
    assert_eq!(
        listed
            .iter()
            .map(|x| (&x.id[..], x.state))
            .collect::<Vec<_>>(),
        vec![(&id[..], ContainerState::ContainerExited as i32)],
        "{what}"
    );
    let text: Vec<String> = log_lines(Path::new(&s.log_path))
        .into_iter()
        .map(|l| l.3)
        .collect();
    assert_eq!(
        text,
        vec!["before", "after"],
        "{what}: the log, written on while crustd was down"
    );

    e.remove(&id).await;
    remove_pod_and_check(&mut e, &pod.0, &empty, what).await;
}

/// The monitor of a running container, killed with SIGKILL, leaves no exit record, and
/// the container's init loses the reader of its output. The container must not be
/// reported RUNNING forever (the kubelet would never restart it): it is EXITED with
/// exit code 255 and reason `Unknown` and a message saying why, as containerd reports
/// a task whose shim died, and nothing of it keeps running unseen. Both while crustd
/// runs (it waits on the monitor) and while it is down (recovery finds the monitor
/// gone). Then it is removed like any exited container and nothing is left.
#[tokio::test]
async fn killed_monitor_reports_exit_with_a_reason() {
    if !root() {
        return;
    }
    let what = "killed_monitor_reports_exit_with_a_reason";
    let (mut e, empty, pod) = one_pod("orphans").await;
    let mut procs = HashMap::new();
    for name in ["up", "down"] {
        let (id, pid, monitor) = run_in(&mut e, &pod, sleeper(name)).await;
        // The harness finds monitors by their executable: this is one of this daemon's,
        // and the parent of the container's init.
        assert!(
            e.d.monitor_pids().contains(&(monitor as i32)),
            "{what}: {monitor} is not running {}",
            e.d.monitor_bin().display()
        );
        assert_eq!(
            parent_of(pid),
            monitor,
            "{what}: the monitor is not the init's parent"
        );
        procs.insert(name, (id, pid, monitor));
    }

    let check = |s: &ContainerStatus, killed: i64, name: &str| {
        assert_eq!(
            exit_of(s),
            (ContainerState::ContainerExited, 255, "Unknown"),
            "{what}: {name}: {s:?}"
        );
        assert!(!s.message.is_empty(), "{what}: {name}: no message: {s:?}");
        assert!(
            killed <= s.finished_at && s.finished_at <= now_ns(),
            "{what}: {name}: finished_at {} before the monitor was killed at {killed}",
            s.finished_at
        );
    };

    // While crustd runs.
    let (id, pid, monitor) = procs["up"].clone();
    let killed = now_ns();
    // The monitor this test's crustd started (checked above).
    kill9(monitor);
    let s = e.wait_exited(&id).await;
    check(&s, killed, "monitor killed under a running crustd");
    assert!(
        wait_dead(pid, Duration::from_secs(10)),
        "{what}: the init of a container reported exited still runs"
    );

    // While crustd is down.
    let (id, pid, monitor) = procs["down"].clone();
    e.d.kill9();
    let killed = now_ns();
    kill9(monitor);
    assert!(wait_dead(monitor, Duration::from_secs(10)));
    assert!(
        proc_state(pid).is_some(),
        "{what}: the init died with its monitor: nothing left to find"
    );
    restart(&mut e).await;
    let (s, _) = e.status(&id).await;
    check(&s, killed, "monitor killed while crustd was down");
    assert!(
        wait_dead(pid, Duration::from_secs(10)),
        "{what}: the init of a container reported exited still runs after the restart"
    );

    // Exited containers remove like any other.
    for (id, _, _) in procs.values() {
        e.remove(id).await;
    }
    remove_pod_and_check(&mut e, &pod.0, &empty, what).await;
}
