//! Races (issue 14): calls on one container or one sandbox started together (behind a
//! barrier), a few rounds each. Every call must end in a defined state — success, or a
//! gRPC status with a sensible code, never `Unknown` (a panic in a handler) and never
//! a hang (each race and each check runs under a timeout that fails the test) — the
//! daemon must still serve (a new pod runs a container that execs), and after removal
//! nothing may be left: record, pin, mount, veth, reserved IP, cgroup, pause or
//! monitor process, container folder, snapshot ([`Crustd::assert_clean`], the crash
//! suite's checks).

use cri_api::*;
use crust_e2e::cri::{ctr, res, run_pod, Client, Env};
use crust_e2e::crustd::{Crustd, Leftovers};
use crust_e2e::require_root;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;
use tonic::Code;

/// Longer than any call here may take: a call still running then is a deadlock.
const LIMIT: Duration = Duration::from_secs(60);

fn ready() -> bool {
    require_root(&["ip", "nsenter", "nft", "busybox"])
}

type Call<T> = Pin<Box<dyn Future<Output = T> + Send>>;
/// A call tagged with its name (see [`named`]).
type Named<T> = Call<(String, Result<T, tonic::Status>)>;

/// Runs `calls` on their own tasks, released together by a barrier; their results in
/// order. Fails the test when one panics or when they are not all done within LIMIT.
async fn together<T: Send + 'static>(what: &str, calls: Vec<Call<T>>) -> Vec<T> {
    let barrier = Arc::new(tokio::sync::Barrier::new(calls.len()));
    let tasks: Vec<_> = calls
        .into_iter()
        .map(|call| {
            let b = barrier.clone();
            tokio::spawn(async move {
                b.wait().await;
                call.await
            })
        })
        .collect();
    let all = async {
        let mut out = Vec::new();
        for t in tasks {
            out.push(t.await.expect("a racing call panicked"));
        }
        out
    };
    tokio::time::timeout(LIMIT, all)
        .await
        .unwrap_or_else(|_| panic!("{what}: the calls did not all end within {LIMIT:?}"))
}

/// One call under LIMIT.
async fn within<T>(what: &str, f: impl Future<Output = T>) -> T {
    tokio::time::timeout(LIMIT, f)
        .await
        .unwrap_or_else(|_| panic!("{what}: no answer within {LIMIT:?}"))
}

/// A call's result is defined: success, or one of the `allowed` codes with a message.
fn defined<T: std::fmt::Debug>(what: &str, r: &Result<T, tonic::Status>, allowed: &[Code]) {
    if let Err(s) = r {
        assert!(
            allowed.contains(&s.code()),
            "{what}: {:?} {:?} (allowed: success or {allowed:?})",
            s.code(),
            s.message()
        );
        assert!(
            !s.message().is_empty(),
            "{what}: an error without a message"
        );
    }
}

/// A container that runs until killed and ignores SIGTERM, so a stop with a grace
/// period waits it out before SIGKILL.
fn sleeper(name: &str) -> ContainerConfig {
    ctr(name, &["sh", "-c", "trap '' TERM; exec sleep 1000"])
}

async fn create(
    mut c: Client,
    pod: (String, PodSandboxConfig),
    cfg: ContainerConfig,
) -> Result<String, tonic::Status> {
    c.create_container(CreateContainerRequest {
        pod_sandbox_id: pod.0,
        config: Some(cfg),
        sandbox_config: Some(pod.1),
    })
    .await
    .map(|r| r.into_inner().container_id)
}

async fn stop(mut c: Client, id: String, timeout: i64) -> Result<(), tonic::Status> {
    c.stop_container(StopContainerRequest {
        container_id: id,
        timeout,
    })
    .await
    .map(drop)
}

async fn remove(mut c: Client, id: String) -> Result<(), tonic::Status> {
    c.remove_container(RemoveContainerRequest { container_id: id })
        .await
        .map(drop)
}

async fn stop_pod(mut c: Client, id: String) -> Result<(), tonic::Status> {
    c.stop_pod_sandbox(StopPodSandboxRequest { pod_sandbox_id: id })
        .await
        .map(drop)
}

async fn remove_pod(mut c: Client, id: String) -> Result<(), tonic::Status> {
    c.remove_pod_sandbox(RemovePodSandboxRequest { pod_sandbox_id: id })
        .await
        .map(drop)
}

async fn exec_sync(
    mut c: Client,
    id: String,
    cmd: &[&str],
    timeout: i64,
) -> Result<ExecSyncResponse, tonic::Status> {
    c.exec_sync(ExecSyncRequest {
        container_id: id,
        cmd: cmd.iter().map(|s| s.to_string()).collect(),
        timeout,
    })
    .await
    .map(|r| r.into_inner())
}

/// A delay before a racing call, so the rounds of a race land at different points of
/// the other calls.
async fn after_ms(ms: u64) {
    if ms > 0 {
        tokio::time::sleep(Duration::from_millis(ms)).await;
    }
}

/// A running container `name` in `pod`.
async fn running(env: &mut Env, pod: &(String, PodSandboxConfig), name: &str) -> String {
    let id = within("CreateContainer", env.create(pod, sleeper(name))).await;
    within("StartContainer", env.start(&id)).await;
    id
}

async fn container_gone(c: &mut Client, id: &str, what: &str) {
    let r = within(
        "ContainerStatus",
        c.container_status(ContainerStatusRequest {
            container_id: id.into(),
            verbose: false,
        }),
    )
    .await;
    assert_eq!(
        r.as_ref().map_err(|s| s.code()).err(),
        Some(Code::NotFound),
        "{what}: container {id} is still there: {r:?}"
    );
}

async fn containers_of(c: &mut Client, pod: &str) -> Vec<Container> {
    within(
        "ListContainers",
        c.list_containers(ListContainersRequest {
            filter: Some(ContainerFilter {
                pod_sandbox_id: pod.into(),
                ..Default::default()
            }),
        }),
    )
    .await
    .expect("ListContainers")
    .into_inner()
    .containers
}

/// The daemon still serves: a new pod runs a container that execs, and goes again.
async fn still_healthy(env: &mut Env, what: &str) {
    let name = format!("healthy-{}", crust_e2e::unique(""));
    let pod = within("RunPodSandbox", env.pod(&name)).await;
    let id = running(env, &pod, "probe").await;
    let r = within("ExecSync", env.exec(&id, &["echo", "alive"], 10))
        .await
        .unwrap_or_else(|e| panic!("{what}: ExecSync in a new pod after the race: {e:?}"));
    assert_eq!(
        (r.exit_code, r.stdout.as_slice()),
        (0, &b"alive\n"[..]),
        "{what}: {r:?}"
    );
    let c = env.c.clone();
    within("StopPodSandbox", stop_pod(c.clone(), pod.0.clone()))
        .await
        .expect("StopPodSandbox");
    within("RemovePodSandbox", remove_pod(c, pod.0))
        .await
        .expect("RemovePodSandbox");
}

/// Health, then every pod removed through the CRI, then nothing left.
async fn finish(mut env: Env, empty: &Leftovers, what: &str) {
    still_healthy(&mut env, what).await;
    let pods = within(
        "ListPodSandbox",
        env.c.list_pod_sandbox(ListPodSandboxRequest::default()),
    )
    .await
    .expect("ListPodSandbox")
    .into_inner()
    .items;
    for p in pods {
        within("StopPodSandbox", stop_pod(env.c.clone(), p.id.clone()))
            .await
            .expect("StopPodSandbox");
        within("RemovePodSandbox", remove_pod(env.c.clone(), p.id))
            .await
            .expect("RemovePodSandbox");
    }
    env.d.assert_clean(empty, what);
}

async fn setup() -> (Env, Leftovers) {
    let d = Crustd::start();
    let empty = d.leftovers();
    (Env::with(d).await, empty)
}

/// Three StopContainer (grace 0, 1 and 2 s) and three RemoveContainer of one running
/// container at once: all succeed (both are idempotent in the CRI), the container is
/// gone, and its name is free again (the next round takes it).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn stop_and_remove_one_container() {
    if !ready() {
        return;
    }
    let (mut env, empty) = setup().await;
    let pod = within("RunPodSandbox", env.pod("stoprm")).await;
    for round in 0..3 {
        let what = format!("round {round}");
        let id = running(&mut env, &pod, "c").await;
        let c = &env.c;
        let calls: Vec<Named<()>> = vec![
            Box::pin(named("StopContainer 0", stop(c.clone(), id.clone(), 0))),
            Box::pin(named("RemoveContainer", remove(c.clone(), id.clone()))),
            Box::pin(named("StopContainer 1", stop(c.clone(), id.clone(), 1))),
            Box::pin(named("RemoveContainer", remove(c.clone(), id.clone()))),
            Box::pin(named("StopContainer 2", stop(c.clone(), id.clone(), 2))),
            Box::pin(named("RemoveContainer", remove(c.clone(), id.clone()))),
        ];
        for (call, r) in together(&what, calls).await {
            defined(&format!("{what}: {call}"), &r, &[]);
        }
        container_gone(&mut env.c, &id, &what).await;
        assert!(containers_of(&mut env.c, &pod.0).await.is_empty());
    }
    finish(env, &empty, "stop_and_remove_one_container").await;
}

/// Six StopPodSandbox and three RemovePodSandbox of one pod with a running container
/// (one of each at once, the others 5 to 60 ms later, into the others' work): all succeed, the pod and its container are gone with everything they had
/// (checked after each round), and the pod's name is free again.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn stop_and_remove_one_sandbox() {
    if !ready() {
        return;
    }
    let (mut env, empty) = setup().await;
    for round in 0..3 {
        let what = format!("round {round}");
        let pod = within("RunPodSandbox", env.pod("sbrace")).await;
        let ctr_id = running(&mut env, &pod, "c").await;
        let c = &env.c;
        let mut calls: Vec<Named<()>> = vec![];
        // Stops spread over the removals' work (a stop that looked the pod up before a
        // removal took it, and ran after it, once saved its record back).
        for delay in [0u64, 5, 10, 20, 35, 60] {
            let (c, id) = (c.clone(), pod.0.clone());
            calls.push(Box::pin(named("StopPodSandbox", async move {
                after_ms(delay).await;
                stop_pod(c, id).await
            })));
        }
        for delay in [0u64, 20, 60] {
            let (c, id) = (c.clone(), pod.0.clone());
            calls.push(Box::pin(named("RemovePodSandbox", async move {
                after_ms(delay).await;
                remove_pod(c, id).await
            })));
        }
        for (call, r) in together(&what, calls).await {
            defined(&format!("{what}: {call}"), &r, &[]);
        }
        let st = within(
            "PodSandboxStatus",
            env.c.pod_sandbox_status(PodSandboxStatusRequest {
                pod_sandbox_id: pod.0.clone(),
                verbose: false,
            }),
        )
        .await;
        assert_eq!(
            st.as_ref().map_err(|s| s.code()).err(),
            Some(Code::NotFound),
            "{what}: the pod is still there: {st:?}"
        );
        container_gone(&mut env.c, &ctr_id, &what).await;
        env.d.assert_clean(&empty, &what);
    }
    finish(env, &empty, "stop_and_remove_one_sandbox").await;
}

/// RemovePodSandbox while CreateContainer runs in that pod (two creates; the removal
/// starts 0 to 60 ms into them): each create succeeds or is refused (the pod is not
/// ready, or gone), the removal succeeds, and no container outlives its pod — one made
/// just before the removal took the pod goes with it.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn remove_sandbox_during_create() {
    if !ready() {
        return;
    }
    let (mut env, empty) = setup().await;
    for (round, delay) in [0u64, 10, 25, 40, 60].into_iter().enumerate() {
        let what = format!("round {round} (removal after {delay} ms)");
        let pod = within("RunPodSandbox", env.pod("crrace")).await;
        let c = &env.c;
        let refused = [Code::FailedPrecondition, Code::NotFound];
        let calls: Vec<Named<String>> = vec![
            Box::pin(named(
                "CreateContainer a",
                create(c.clone(), pod.clone(), sleeper("a")),
            )),
            Box::pin(named(
                "CreateContainer b",
                create(c.clone(), pod.clone(), sleeper("b")),
            )),
            Box::pin({
                let (c, id) = (c.clone(), pod.0.clone());
                named("RemovePodSandbox", async move {
                    after_ms(delay).await;
                    remove_pod(c, id).await.map(|()| String::new())
                })
            }),
        ];
        let results = together(&what, calls).await;
        for (call, r) in &results {
            let allowed: &[Code] = if call.starts_with("Create") {
                &refused
            } else {
                &[]
            };
            defined(&format!("{what}: {call}"), r, allowed);
        }
        for (_, r) in results.iter().take(2) {
            if let Ok(id) = r {
                container_gone(&mut env.c, id, &what).await;
            }
        }
        assert!(
            containers_of(&mut env.c, &pod.0).await.is_empty(),
            "{what}: containers outlived their pod"
        );
        env.d.assert_clean(&empty, &what);
    }
    finish(env, &empty, "remove_sandbox_during_create").await;
}

/// ExecSync (a quick `echo` and a `sleep` that is cut) and Exec (the streaming URL)
/// while RemoveContainer runs (starting 0 to 40 ms in): an exec either runs (`echo`
/// answers its line), ends with the container (a non-zero exit code), or is refused
/// because the container is not running or gone; the URL is handed out or refused the
/// same way; the removal succeeds and the execs leave nothing in the container's cgroup.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn exec_during_remove() {
    if !ready() {
        return;
    }
    let (mut env, empty) = setup().await;
    let pod = within("RunPodSandbox", env.pod("exrace")).await;
    let refused = [Code::FailedPrecondition, Code::NotFound];
    for (round, delay) in [0u64, 5, 15, 40].into_iter().enumerate() {
        let what = format!("round {round} (removal after {delay} ms)");
        let id = running(&mut env, &pod, "c").await;
        let c = &env.c;
        let mut calls: Vec<Named<Option<ExecSyncResponse>>> = vec![];
        for i in 0..4 {
            let (c, id) = (c.clone(), id.clone());
            calls.push(Box::pin(named("ExecSync echo", async move {
                let line = format!("exec-{i}");
                exec_sync(c, id, &["echo", &line], 10).await.map(Some)
            })));
        }
        calls.push(Box::pin(named("ExecSync sleep", {
            let (c, id) = (c.clone(), id.clone());
            async move { exec_sync(c, id, &["sleep", "5"], 10).await.map(Some) }
        })));
        for _ in 0..2 {
            let (mut c, id) = (c.clone(), id.clone());
            calls.push(Box::pin(named("Exec", async move {
                c.exec(ExecRequest {
                    container_id: id,
                    cmd: vec!["echo".into(), "streamed".into()],
                    stdout: true,
                    ..Default::default()
                })
                .await
                .map(|r| {
                    assert!(r.get_ref().url.starts_with("http://"), "{r:?}");
                    None
                })
            })));
        }
        {
            let (c, id) = (c.clone(), id.clone());
            calls.push(Box::pin(named("RemoveContainer", async move {
                after_ms(delay).await;
                remove(c, id).await.map(|()| None)
            })));
        }
        let mut n = 0;
        for (call, r) in together(&what, calls).await {
            let allowed: &[Code] = if call == "RemoveContainer" {
                &[]
            } else {
                &refused
            };
            defined(&format!("{what}: {call}"), &r, allowed);
            if let (true, Ok(Some(resp))) = (call == "ExecSync echo", &r) {
                if resp.exit_code == 0 {
                    let out = String::from_utf8_lossy(&resp.stdout);
                    assert!(
                        out.starts_with("exec-") && out.ends_with('\n'),
                        "{what}: {resp:?}"
                    );
                    n += 1;
                }
            }
        }
        eprintln!("{what}: {n} of 4 echo execs ran");
        container_gone(&mut env.c, &id, &what).await;
    }
    finish(env, &empty, "exec_during_remove").await;
}

/// Four RunPodSandbox with the same name, namespace, uid and attempt at once: the CRI
/// has names unique, so exactly one wins, the others get AlreadyExists naming the
/// reservation ("name ... is reserved for ...", as containerd's registrar says; its
/// code there is FailedPrecondition, a conflict), and they leave nothing behind.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn same_name_sandboxes() {
    if !ready() {
        return;
    }
    let (mut env, empty) = setup().await;
    for round in 0..3 {
        let what = format!("round {round}");
        let cfg = PodSandboxConfig {
            metadata: Some(PodSandboxMetadata {
                name: "twin".into(),
                uid: "uid-twin".into(),
                namespace: "races".into(),
                attempt: 0,
            }),
            hostname: "twin".into(),
            log_directory: env.logs.path().join("twin").display().to_string(),
            linux: Some(LinuxPodSandboxConfig::default()),
            ..Default::default()
        };
        let calls: Vec<Call<Result<String, tonic::Status>>> = (0..4)
            .map(|_| {
                let (mut c, cfg) = (env.c.clone(), cfg.clone());
                Box::pin(async move { run_pod(&mut c, &cfg).await }) as Call<_>
            })
            .collect();
        let results = together(&what, calls).await;
        let won: Vec<&String> = results.iter().filter_map(|r| r.as_ref().ok()).collect();
        assert_eq!(won.len(), 1, "{what}: not exactly one winner: {results:?}");
        for r in &results {
            if let Err(s) = r {
                assert_eq!(s.code(), Code::AlreadyExists, "{what}: {s:?}");
                assert!(
                    s.message().contains("is reserved for") && s.message().contains(won[0]),
                    "{what}: the refusal does not name the winner: {s:?}"
                );
            }
        }
        let pods = within(
            "ListPodSandbox",
            env.c.list_pod_sandbox(ListPodSandboxRequest::default()),
        )
        .await
        .expect("ListPodSandbox")
        .into_inner()
        .items;
        assert_eq!(
            pods.iter().map(|p| &p.id).collect::<Vec<_>>(),
            won,
            "{what}: the pods listed"
        );
        // The winner is whole: it runs a container.
        let pod = (won[0].clone(), cfg.clone());
        let id = running(&mut env, &pod, "c").await;
        let r = within("ExecSync", env.exec(&id, &["true"], 10))
            .await
            .expect("ExecSync");
        assert_eq!(r.exit_code, 0, "{what}: {r:?}");
        within("StopPodSandbox", stop_pod(env.c.clone(), pod.0.clone()))
            .await
            .expect("StopPodSandbox");
        within("RemovePodSandbox", remove_pod(env.c.clone(), pod.0))
            .await
            .expect("RemovePodSandbox");
        env.d.assert_clean(&empty, &what);
    }
    finish(env, &empty, "same_name_sandboxes").await;
}

/// UpdateContainerResources during StopContainer (grace 1 s, the container ignores
/// SIGTERM, so the stop waits it out and then kills): updates sent before, during the
/// grace period and after the kill each succeed or are refused as the container is no
/// longer running (FailedPrecondition); the stop succeeds, the container is exited and
/// its status readable, and what an accepted update wrote is in its status.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn update_during_stop() {
    if !ready() {
        return;
    }
    let (mut env, empty) = setup().await;
    let pod = within("RunPodSandbox", env.pod("uprace")).await;
    for round in 0..3 {
        let what = format!("round {round}");
        let id = running(&mut env, &pod, "c").await;
        let c = &env.c;
        let mut calls: Vec<Named<i64>> = vec![Box::pin(named("StopContainer", {
            let (c, id) = (c.clone(), id.clone());
            async move { stop(c, id, 1).await.map(|()| 0) }
        }))];
        for (i, delay) in [0u64, 3, 300, 900, 1100, 1500].into_iter().enumerate() {
            let (mut c, id) = (c.clone(), id.clone());
            // Distinct shares per update, to find which one the status shows.
            let shares = 512 + 2 * i as i64 + 100 * round;
            calls.push(Box::pin(named("UpdateContainerResources", async move {
                after_ms(delay).await;
                let mut cfg = ctr("x", &[]);
                res(&mut cfg).cpu_shares = shares;
                res(&mut cfg).memory_limit_in_bytes = 64 << 20;
                c.update_container_resources(UpdateContainerResourcesRequest {
                    container_id: id,
                    linux: cfg.linux.unwrap().resources,
                    ..Default::default()
                })
                .await
                .map(|_| shares)
            })));
        }
        let results = together(&what, calls).await;
        let mut accepted = vec![];
        for (call, r) in &results {
            let allowed: &[Code] = if call == "StopContainer" {
                &[]
            } else {
                &[Code::FailedPrecondition]
            };
            defined(&format!("{what}: {call}"), r, allowed);
            if let (true, Ok(shares)) = (call.starts_with("Update"), r) {
                accepted.push(*shares);
            }
        }
        let (st, _) = within("ContainerStatus", env.status(&id)).await;
        assert_eq!(
            st.state,
            ContainerState::ContainerExited as i32,
            "{what}: {st:?}"
        );
        if !accepted.is_empty() {
            let shown = st
                .resources
                .as_ref()
                .and_then(|r| r.linux.as_ref())
                .map(|l| l.cpu_shares)
                .unwrap_or_default();
            assert!(
                accepted.contains(&shown),
                "{what}: status shows shares {shown}, accepted {accepted:?}"
            );
        }
        eprintln!("{what}: updates accepted: {accepted:?}");
        within("RemoveContainer", remove(env.c.clone(), id))
            .await
            .expect("RemoveContainer");
    }
    finish(env, &empty, "update_during_stop").await;
}

/// 200 ExecSync at once on one container, each echoing its own line: each answers its
/// line with exit code 0, or fails with a clear code (no Unknown, no Internal, no
/// hang); and the container still execs afterwards.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn exec_sync_200_at_once() {
    if !ready() {
        return;
    }
    let (mut env, empty) = setup().await;
    let pod = within("RunPodSandbox", env.pod("ex200")).await;
    let id = running(&mut env, &pod, "c").await;
    // A few connections, as several kubelet probes would come.
    let mut clients = vec![];
    for _ in 0..4 {
        clients.push(env.d.client().await);
    }
    let calls: Vec<Call<(usize, Result<ExecSyncResponse, tonic::Status>)>> = (0..200)
        .map(|i| {
            let (c, id) = (clients[i % clients.len()].clone(), id.clone());
            Box::pin(async move {
                let line = format!("line-{i}");
                (i, exec_sync(c, id, &["echo", &line], 30).await)
            }) as Call<_>
        })
        .collect();
    let begun = std::time::Instant::now();
    let results = together("200 ExecSync", calls).await;
    let mut ok = 0;
    for (i, r) in &results {
        defined(
            &format!("ExecSync {i}"),
            r,
            &[
                Code::ResourceExhausted,
                Code::Unavailable,
                Code::DeadlineExceeded,
            ],
        );
        if let Ok(resp) = r {
            assert_eq!(
                (
                    resp.exit_code,
                    String::from_utf8_lossy(&resp.stdout).as_ref()
                ),
                (0, format!("line-{i}\n").as_str()),
                "ExecSync {i}: {resp:?}"
            );
            ok += 1;
        }
    }
    eprintln!("{ok} of 200 ExecSync answered in {:?}", begun.elapsed());
    let r = within("ExecSync", env.exec(&id, &["echo", "after"], 10))
        .await
        .expect("ExecSync after the 200");
    assert_eq!(r.stdout, b"after\n");
    finish(env, &empty, "exec_sync_200_at_once").await;
}

/// Tags a call's result with the call's name, for the failure message.
async fn named<F: Future>(name: &str, f: F) -> (String, F::Output) {
    (name.to_string(), f.await)
}
