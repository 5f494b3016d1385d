//! Containers end to end through CRI against `crustd`: a busybox-static image imported
//! into the daemon's image store, pods on crust's bridge, containers made by crust's own
//! executor under its monitor.
//!
//! By topic, in containers/: `process`, `resources`, `mounts`, `metrics` and `apparmor`; the
//! lifecycle, bad input and deadline tests are here.

#[path = "containers/apparmor.rs"]
mod apparmor;
#[path = "containers/metrics.rs"]
mod metrics;
#[path = "containers/mounts.rs"]
mod mounts;
#[path = "containers/process.rs"]
mod process;
#[path = "containers/resources.rs"]
mod resources;

use cri_api::*;
use crust_e2e::cri::*;
use crust_e2e::require_root;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};
use tonic::Code;

fn root() -> bool {
    require_root(&["ip", "nsenter", "nft", "busybox"])
}

/// Run to completion: state changes, exit code and reason, the CRI log with stdout,
/// stderr and a long line split into partials, then removal without a trace.
#[tokio::test]
async fn run_exit_code_logs_and_remove() {
    if !root() {
        return;
    }
    let mut e = setup().await;
    let pod = e.pod("logs").await;
    let before = e.d.leftovers();
    let id = e
        .create(
            &pod,
            ctr(
                "c",
                &[
                    "sh",
                    "-c",
                    "echo hello; echo oops >&2; head -c 40000 /dev/zero | tr '\\0' x; echo; printf tail; exit 3",
                ],
            ),
        )
        .await;
    let (s, info) = e.status(&id).await;
    assert_eq!(s.state, ContainerState::ContainerCreated as i32);
    assert!(info["pid"].as_i64().unwrap() > 0, "{info}");
    assert_eq!(s.image.as_ref().unwrap().image, IMAGE);
    assert!(s.image_id.starts_with("sha256:"), "{}", s.image_id);
    assert!(s.image_ref.contains("sha256:"), "{}", s.image_ref);
    // The log file is there as soon as CreateContainer returns.
    assert!(Path::new(&s.log_path).is_file(), "{}", s.log_path);
    e.start(&id).await;
    let s = e.wait_exited(&id).await;
    assert_eq!(s.exit_code, 3);
    assert_eq!(s.reason, "Error");
    assert!(s.started_at > 0 && s.finished_at >= s.started_at);
    let log = PathBuf::from(&s.log_path);
    assert_eq!(log, e.logs.path().join("logs/c/0.log"));
    let lines = log_lines(&log);
    assert!(
        lines
            .iter()
            .any(|l| l.1 == "stdout" && l.2 == "F" && l.3 == "hello"),
        "{lines:?}"
    );
    assert!(
        lines
            .iter()
            .any(|l| l.1 == "stderr" && l.2 == "F" && l.3 == "oops"),
        "{lines:?}"
    );
    for l in &lines {
        assert!(l.0.ends_with('Z') && l.0.contains('T'), "time {:?}", l.0);
    }
    // The long line: partials then a full record, reassembling to 40000 x's.
    let xs: Vec<_> = lines.iter().filter(|l| l.3.starts_with('x')).collect();
    assert!(xs.len() >= 3, "{xs:?}");
    assert!(xs[..xs.len() - 1].iter().all(|l| l.2 == "P"));
    assert_eq!(xs.last().unwrap().2, "F");
    assert_eq!(xs.iter().map(|l| l.3.len()).sum::<usize>(), 40000);
    assert!(
        // `printf tail` at the exit: no newline, so a partial record (containerd's rule).
        lines.iter().any(|l| l.2 == "P" && l.3 == "tail"),
        "{lines:?}"
    );

    // Lists and filters.
    let list =
        e.c.list_containers(ListContainersRequest {
            filter: Some(ContainerFilter {
                pod_sandbox_id: pod.0.clone(),
                state: Some(ContainerStateValue {
                    state: ContainerState::ContainerExited as i32,
                }),
                ..Default::default()
            }),
        })
        .await
        .unwrap()
        .into_inner()
        .containers;
    assert_eq!(list.len(), 1);
    assert_eq!(list[0].id, id);
    let none =
        e.c.list_containers(ListContainersRequest {
            filter: Some(ContainerFilter {
                state: Some(ContainerStateValue {
                    state: ContainerState::ContainerRunning as i32,
                }),
                ..Default::default()
            }),
        })
        .await
        .unwrap()
        .into_inner()
        .containers;
    assert!(none.is_empty());

    e.remove(&id).await;
    e.remove(&id).await; // idempotent
    assert_code(
        e.c.container_status(ContainerStatusRequest {
            container_id: id.clone(),
            verbose: false,
        })
        .await,
        Code::NotFound,
        "status of a removed container",
    );
    assert!(
        container_dirs(&e.d).is_empty(),
        "{:?}",
        container_dirs(&e.d)
    );
    assert_eq!(snapshots(&e.d), 0);
    assert_eq!(e.d.leftovers(), before);
}

/// crustd killed while containers run: they keep running, and after a restart their
/// state and later exit are reported; the log survives rotation by ReopenContainerLog.
#[tokio::test]
async fn containers_survive_crustd_restart_and_logs_reopen() {
    if !root() {
        return;
    }
    let mut e = setup().await;
    let pod = e.pod("surv").await;
    let id = e
        .create(
            &pod,
            ctr(
                "c",
                &[
                    "sh",
                    "-c",
                    "i=0; while true; do echo line$i; i=$((i+1)); sleep 0.1; done",
                ],
            ),
        )
        .await;
    e.start(&id).await;
    let (_, info) = e.status(&id).await;
    let pid = info["pid"].as_i64().unwrap() as i32;

    e.d.kill9();
    std::thread::sleep(Duration::from_millis(300));
    assert!(
        Path::new(&format!("/proc/{pid}")).exists(),
        "container died with crustd"
    );
    // What a create cut off by a node crash could leave: a folder without its (unsynced)
    // record, and a snapshot nobody names. The restart sweeps both.
    let orphan = e.d.root.path().join("containers").join("0123orphan");
    std::fs::create_dir_all(orphan.join("rootfs")).unwrap();
    let store = image::ImageStore::open(e.d.root.path().join("images"), None).unwrap();
    store.prepare_snapshot("0123orphan", IMAGE).unwrap();
    e.d.spawn();
    e.c = e.d.client().await;
    let (s, _) = e.status(&id).await;
    assert_eq!(s.state, ContainerState::ContainerRunning as i32);
    assert!(!orphan.exists(), "the orphaned container folder is swept");
    assert!(
        store.snapshot("0123orphan").is_none(),
        "the orphaned snapshot is swept"
    );
    assert!(
        store.snapshot(&id).is_some(),
        "the running container's snapshot stays"
    );

    // Rotation: rename the log, reopen, new lines go to a new file.
    let log = PathBuf::from(&s.log_path);
    let rotated = log.with_extension("log.1");
    std::fs::rename(&log, &rotated).unwrap();
    e.c.reopen_container_log(ReopenContainerLogRequest {
        container_id: id.clone(),
    })
    .await
    .unwrap();
    wait_log(&log, "line in the reopened log", |t| t.starts_with("line")).await;
    assert!(log_lines(&rotated).iter().any(|l| l.3.starts_with("line")));

    // The exit after the restart is seen.
    // SAFETY: signalling the container's init (a test process's grandchild).
    unsafe { libc::kill(pid, libc::SIGKILL) };
    let s = e.wait_exited(&id).await;
    assert_eq!(s.exit_code, 137);
    assert_code(
        e.c.reopen_container_log(ReopenContainerLogRequest {
            container_id: id.clone(),
        })
        .await,
        Code::FailedPrecondition,
        "reopen of an exited container",
    );
    // RemovePodSandbox takes its containers along.
    e.remove_pod(&pod.0).await;
    assert!(container_dirs(&e.d).is_empty());
}

/// A tty container gets a terminal of its own devpts; its output is logged like any
/// other.
#[tokio::test]
async fn tty_container() {
    if !root() {
        return;
    }
    let mut e = setup().await;
    let pod = e.pod("ttypod").await;
    let mut cfg = ctr(
        "t",
        &[
            "sh",
            "-c",
            "[ -t 0 ] && [ -t 1 ] && echo terminal; echo done",
        ],
    );
    cfg.tty = true;
    let id = e.create(&pod, cfg).await;
    e.start(&id).await;
    let s = e.wait_exited(&id).await;
    assert_eq!(s.exit_code, 0);
    let lines = log_lines(Path::new(&s.log_path));
    assert!(
        lines
            .iter()
            .any(|l| l.1 == "stdout" && l.3.trim_end() == "terminal"),
        "{lines:?}"
    );
    e.remove(&id).await;
}

/// `stdin` keeps the container's stdin open for a later attach (the monitor's attach
/// socket in the container's state dir); with `stdin_once` the first client to end
/// its input ends the container's. A tty container takes input through its pty.
#[tokio::test]
async fn stdin_attach_and_stdin_once() {
    use container::monitor::ATTACH_STDOUT as OUT;
    use crust_e2e::attach::{recv_until, send, shut_input, text};
    if !root() {
        return;
    }
    let mut e = setup().await;
    let pod = e.pod("stdinpod").await;
    let mut cfg = ctr("cat", &["sh", "-c", "cat; echo eof"]);
    cfg.stdin = true;
    cfg.stdin_once = true;
    let id = e.create(&pod, cfg).await;
    e.start(&id).await;
    let dir = e.d.state.path().join("containers").join(&id);
    let client = container::monitor::connect_attach(&dir).unwrap();
    send(&client, b"hi\n");
    recv_until(&client, "the echo", |m| text(m, OUT) == "hi\n");
    shut_input(&client);
    recv_until(&client, "eof", |m| text(m, OUT) == "eof\n");
    let s = e.wait_exited(&id).await;
    assert_eq!(s.exit_code, 0, "{s:?}");
    e.remove(&id).await;

    let mut cfg = ctr("tty", &["sh", "-c", "read x; echo got $x"]);
    cfg.tty = true;
    cfg.stdin = true;
    let id = e.create(&pod, cfg).await;
    e.start(&id).await;
    let dir = e.d.state.path().join("containers").join(&id);
    let client = container::monitor::connect_attach(&dir).unwrap();
    send(&client, b"abc\n");
    recv_until(&client, "the answer", |m| text(m, OUT).contains("got abc"));
    let s = e.wait_exited(&id).await;
    assert_eq!(s.exit_code, 0, "{s:?}");
    e.remove(&id).await;
}

/// StopContainer's grace period does not hold the container up for anyone else: while
/// a container that outlives SIGTERM waits out its 10 s, ListContainers and
/// ContainerStatus answer (as the kubelet's relist every second needs), and show it
/// running; then SIGKILL ends it.
#[tokio::test]
async fn stop_grace_period_leaves_lists_and_status_free() {
    if !root() {
        return;
    }
    let mut e = setup().await;
    let pod = e.pod("grace").await;
    let id = e
        .create(
            &pod,
            ctr(
                "stubborn",
                &[
                    "sh",
                    "-c",
                    // SIGTERM is logged, and ends nothing.
                    "trap 'echo got-term' TERM; echo trapped; while true; do sleep 0.1; done",
                ],
            ),
        )
        .await;
    e.start(&id).await;
    // SIGTERM before the trap is set would end it at once (seen in CI on a busy
    // machine): stop only once it says the trap is in place.
    let (s, _) = e.status(&id).await;
    let log = PathBuf::from(&s.log_path);
    wait_log(&log, "'trapped'", |t| t == "trapped").await;
    let mut c = e.c.clone();
    let stop_id = id.clone();
    let stopping = tokio::spawn(async move {
        c.stop_container(StopContainerRequest {
            container_id: stop_id,
            timeout: 10,
        })
        .await
    });
    // The stop is under way once the container got its SIGTERM.
    wait_log(&log, "'got-term'", |t| t == "got-term").await;
    let listed =
        e.c.list_containers(ListContainersRequest { filter: None })
            .await
            .unwrap()
            .into_inner()
            .containers;
    let (s, _) = e.status(&id).await;
    assert!(
        !stopping.is_finished(),
        "the stop ended before the list and status came back"
    );
    assert!(listed.iter().any(|c| c.id == id), "{listed:?}");
    assert_eq!(s.state, ContainerState::ContainerRunning as i32, "{s:?}");
    stopping.await.unwrap().unwrap();
    let (s, _) = e.status(&id).await;
    assert_eq!(s.state, ContainerState::ContainerExited as i32, "{s:?}");
    assert_eq!(s.exit_code, 137, "{s:?}");
    e.remove(&id).await;
}

/// A stop signal that reaches a container's init before its `execve` acts on it as on
/// the command: critest stops a container as soon as StartContainer returns, while the
/// init may still be on its way from the start gate to `execve`. The init once ran
/// crustd's own SIGTERM handler there (inherited over the fork), which swallowed the
/// signal, and the container ran on until the grace period's SIGKILL. Here the signal
/// comes while the init waits at the gate, which stands for that whole stretch.
#[tokio::test]
async fn a_stop_signal_before_the_exec_is_not_lost() {
    if !root() {
        return;
    }
    let mut e = setup().await;
    let pod = e.pod("early-term").await;
    let id = e.create(&pod, ctr("early", &["sleep", "1000"])).await;
    let (pid, _) = e.pids(&id).await;
    // In the pod's shared PID namespace the init is not that namespace's init, which
    // a signal without a handler would not reach at all.
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let nspid = status.lines().find(|l| l.starts_with("NSpid:")).unwrap();
    assert_ne!(nspid.split_whitespace().last(), Some("1"), "{nspid}");
    // SAFETY: a signal to the container's init, a process this test made.
    assert_eq!(unsafe { libc::kill(pid as i32, libc::SIGTERM) }, 0);
    e.start(&id).await;
    let s = e.wait_exited(&id).await;
    assert_eq!(s.exit_code, 128 + libc::SIGTERM, "{s:?}");
    e.remove(&id).await;
}

/// A stop signal that a container's init drops (the init of its own PID namespace
/// has no handler for it yet: critest stops a container as soon as it started) is sent
/// again once the program installed its handler, instead of the grace period ending in
/// SIGKILL: the trap's `exit 0` is the container's end, not 137.
#[tokio::test]
async fn a_stop_signal_dropped_before_the_handler_is_sent_again() {
    if !root() {
        return;
    }
    let mut e = setup().await;
    let pod = e.pod("late-trap").await;
    let mut c = ctr(
        "late",
        &[
            "sh",
            "-c",
            "sleep 2; trap 'exit 0' TERM; echo trapped; while true; do sleep 0.1; done",
        ],
    );
    sc(&mut c).namespace_options = Some(NamespaceOption {
        pid: NamespaceMode::Container as i32,
        ..Default::default()
    });
    let id = e.create(&pod, c).await;
    e.start(&id).await;
    let (pid, _) = e.pids(&id).await;
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let nspid = status.lines().find(|l| l.starts_with("NSpid:")).unwrap();
    assert_eq!(nspid.split_whitespace().last(), Some("1"), "{nspid}");
    e.stop(&id, 60).await;
    let (s, _) = e.status(&id).await;
    let log = std::fs::read_to_string(&s.log_path).unwrap_or_default();
    assert_eq!(s.exit_code, 0, "{s:?} {log}");
    assert!(log.contains("trapped"), "{log}");
    e.remove(&id).await;
}

/// Bad input: the right code, a message, and nothing left behind.
#[tokio::test]
async fn bad_input_leaves_nothing() {
    if !root() {
        return;
    }
    let mut e = setup().await;
    let pod = e.pod("bad").await;
    let before = e.d.leftovers();
    let unknown = (String::from("0123456789abcdef"), pod.1.clone());
    assert_code(
        e.try_create(&unknown, ctr("c", &["true"])).await,
        Code::NotFound,
        "unknown sandbox",
    );
    let mut cfg = ctr("c", &["true"]);
    cfg.image = Some(ImageSpec {
        image: "no/such:image".into(),
        ..Default::default()
    });
    assert_code(
        e.try_create(&pod, cfg).await,
        Code::NotFound,
        "unknown image",
    );
    assert_code(
        e.try_create(&pod, ctr("c", &["/no/such/command"])).await,
        Code::InvalidArgument,
        "missing command",
    );
    let mut cfg = ctr("c", &["true"]);
    res(&mut cfg).memory_limit_in_bytes = 4096;
    assert_code(
        e.try_create(&pod, cfg).await,
        Code::InvalidArgument,
        "memory limit too low",
    );
    let mut cfg = ctr("c", &["true"]);
    sc(&mut cfg).run_as_group = Some(Int64Value { value: 1002 });
    assert_code(
        e.try_create(&pod, cfg).await,
        Code::InvalidArgument,
        "run_as_group without a user",
    );
    let mut cfg = ctr("c", &["true"]);
    cfg.metadata = None;
    assert_code(
        e.try_create(&pod, cfg).await,
        Code::InvalidArgument,
        "no metadata",
    );
    let mut cfg = ctr("c", &["true"]);
    cfg.mounts = vec![Mount {
        container_path: "/x".into(),
        host_path: "relative/path".into(),
        ..Default::default()
    }];
    assert_code(
        e.try_create(&pod, cfg).await,
        Code::InvalidArgument,
        "relative mount source",
    );
    assert!(
        container_dirs(&e.d).is_empty(),
        "{:?}",
        container_dirs(&e.d)
    );
    assert_eq!(snapshots(&e.d), 0);
    assert_eq!(e.d.leftovers(), before);

    // A duplicate name in one pod.
    let id = e.create(&pod, ctr("dup", &["true"])).await;
    assert_code(
        e.try_create(&pod, ctr("dup", &["true"])).await,
        Code::AlreadyExists,
        "duplicate name",
    );
    e.remove(&id).await;
    let id = e.create(&pod, ctr("dup", &["true"])).await;
    assert_code(
        e.c.start_container(StartContainerRequest {
            container_id: "ffffffffffff".into(),
        })
        .await,
        Code::NotFound,
        "start of an unknown container",
    );
    e.remove(&id).await;
}

/// The idempotent calls succeed for what does not exist (or no longer does), as the
/// CRI says and the conformance suite checks: StopContainer and RemoveContainer of an
/// unknown or removed container, StopPodSandbox and RemovePodSandbox of an unknown
/// sandbox, RemoveImage of an unknown image id, twice.
#[tokio::test]
async fn missing_objects_stop_and_remove_quietly() {
    if !root() {
        return;
    }
    let mut e = setup().await;
    let unknown = "5b1c0a2e-8f3d-4c55-9a7e-0d6f2b9c1e44".to_string();
    stop_container(&mut e.c, &unknown, 0)
        .await
        .expect("StopContainer of an unknown container");
    remove_container(&mut e.c, &unknown)
        .await
        .expect("RemoveContainer of an unknown container");
    stop_pod(&mut e.c, &unknown)
        .await
        .expect("StopPodSandbox of an unknown sandbox");
    remove_pod(&mut e.c, &unknown)
        .await
        .expect("RemovePodSandbox of an unknown sandbox");
    let pod = e.pod("idem").await;
    let id = e.create(&pod, ctr("c", &["sleep", "100"])).await;
    e.start(&id).await;
    for _ in 0..2 {
        stop_container(&mut e.c, &id, 0)
            .await
            .expect("StopContainer, again");
    }
    for _ in 0..2 {
        remove_container(&mut e.c, &id)
            .await
            .expect("RemoveContainer, again");
    }
    stop_container(&mut e.c, &id, 0)
        .await
        .expect("StopContainer of a removed container");
    let mut images = e.d.images().await;
    for _ in 0..2 {
        images
            .remove_image(RemoveImageRequest {
                image: Some(ImageSpec {
                    image: "0".repeat(64),
                    ..Default::default()
                }),
            })
            .await
            .expect("RemoveImage of an unknown id");
    }
}

/// Unmounts what a test mounted on the host, also when it fails.
struct HostMounts(Vec<PathBuf>);

impl Drop for HostMounts {
    fn drop(&mut self) {
        for m in self.0.iter().rev() {
            let _ = std::process::Command::new("umount")
                .arg("-l")
                .arg(m)
                .status();
        }
    }
}

/// A CreateContainer whose caller is gone before it ends (its deadline passed, or a
/// kubelet restarted in the middle of the call) still ends as it would have: the
/// container is made and listed, or not made and its name free. It was once made,
/// its name reserved and nothing listing it, so that every retry of the kubelet's
/// failed on the name ("failed to reserve container name") for as long as crustd ran.
#[tokio::test]
async fn a_create_whose_caller_left_is_listed_or_undone() {
    if !root() {
        return;
    }
    let mut e = setup().await;
    let pod = e.pod("left").await;
    // crustd answers 5 ms before the deadline: past the call's start, well before a
    // debug build has made a container (tens of milliseconds).
    let (mut c, conn) = client_with_grpc_timeout(&e.d.socket, "10m").await;
    let err = c
        .create_container(CreateContainerRequest {
            pod_sandbox_id: pod.0.clone(),
            config: Some(ctr("c", &["sleep", "1000"])),
            sandbox_config: Some(pod.1.clone()),
        })
        .await
        .expect_err("past its deadline");
    assert_eq!(err.code(), Code::DeadlineExceeded, "{err:?}");
    drop(c);
    conn.await.unwrap().expect("the connection closes cleanly");
    // The call, wherever it was cut, has ended within this (a create takes well under
    // a second here, seconds under emulation).
    let deadline = Instant::now() + Duration::from_secs(20);
    let listed = loop {
        let listed: Vec<_> = list_containers(&mut e.c)
            .await
            .into_iter()
            .filter(|x| x.metadata.as_ref().is_some_and(|m| m.name == "c"))
            .collect();
        if !listed.is_empty() || Instant::now() > deadline {
            break listed;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    match listed.as_slice() {
        [made] => {
            // Made: it is a container like any other, and the name is taken by it.
            let again = e.try_create(&pod, ctr("c", &["sleep", "1000"])).await;
            let err = again.expect_err("the name is taken");
            assert!(err.message().contains(&made.id), "{err:?}");
            e.start(&made.id).await;
            e.stop(&made.id, 0).await;
            e.remove(&made.id).await;
        }
        [] => {}
        more => panic!("one call made {} containers", more.len()),
    }
    // Either way the name is free now.
    let id = e.create(&pod, ctr("c", &["sleep", "1000"])).await;
    e.remove(&id).await;
}

/// A CRI client that leaves its deadline to the server: tonic's generated client on a
/// bare HTTP/2 connection (hyper) to `socket` whose every request carries
/// `grpc-timeout: timeout`. (A tonic `Channel` enforces that header itself and answers
/// CANCELLED on its own when it passes, so it cannot tell what the server answered.)
/// Drop the client and await the connection's task before the daemon stops: it waits
/// for open connections.
async fn client_with_grpc_timeout(
    socket: &Path,
    timeout: &'static str,
) -> (
    RuntimeServiceClient<GrpcTimeoutConn>,
    tokio::task::JoinHandle<Result<(), hyper::Error>>,
) {
    let io = tokio::net::UnixStream::connect(socket)
        .await
        .expect("connecting");
    let (send, conn) = hyper::client::conn::http2::handshake(
        hyper_util::rt::TokioExecutor::new(),
        hyper_util::rt::TokioIo::new(io),
    )
    .await
    .expect("HTTP/2 handshake");
    let conn = tokio::spawn(conn);
    let client = RuntimeServiceClient::with_origin(
        GrpcTimeoutConn { send, timeout },
        "http://localhost".parse().unwrap(),
    );
    (client, conn)
}

#[derive(Clone)]
struct GrpcTimeoutConn {
    send: hyper::client::conn::http2::SendRequest<tonic::body::Body>,
    timeout: &'static str,
}

impl tonic::codegen::Service<tonic::codegen::http::Request<tonic::body::Body>> for GrpcTimeoutConn {
    type Response = tonic::codegen::http::Response<hyper::body::Incoming>;
    type Error = hyper::Error;
    type Future = std::pin::Pin<
        Box<dyn std::future::Future<Output = Result<Self::Response, hyper::Error>> + Send>,
    >;

    fn poll_ready(
        &mut self,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<(), hyper::Error>> {
        self.send.poll_ready(cx)
    }

    fn call(&mut self, mut req: tonic::codegen::http::Request<tonic::body::Body>) -> Self::Future {
        req.headers_mut()
            .insert("grpc-timeout", self.timeout.parse().unwrap());
        let fut = self.send.send_request(req);
        Box::pin(fut)
    }
}

/// A call that outlasts the client's deadline (`grpc-timeout`) ends with
/// DEADLINE_EXCEEDED, as gRPC servers in Go answer it and the conformance suite checks
/// ("public image should timeout if requested"), not with tonic's CANCELLED. The
/// daemon serves the container as before afterwards.
#[tokio::test]
async fn a_call_past_the_clients_deadline_is_deadline_exceeded() {
    if !root() {
        return;
    }
    let mut e = setup().await;
    let pod = e.pod("deadline").await;
    let id = e.create(&pod, ctr("c", &["sleep", "1000"])).await;
    e.start(&id).await;
    let (mut c, conn) = client_with_grpc_timeout(&e.d.socket, "300m").await;
    let t = Instant::now();
    let err = c
        .exec_sync(ExecSyncRequest {
            container_id: id.clone(),
            cmd: vec!["sleep".into(), "2".into()],
            timeout: 0,
        })
        .await
        .expect_err("past its deadline");
    drop(c);
    conn.await.unwrap().expect("the connection closes cleanly");
    assert_eq!(err.code(), Code::DeadlineExceeded, "{err:?}");
    assert!(t.elapsed() < Duration::from_secs(4), "{:?}", t.elapsed());
    let r = e
        .exec(&id, &["echo", "still here"], 10)
        .await
        .expect("ExecSync");
    assert_eq!(String::from_utf8_lossy(&r.stdout), "still here\n");
    e.stop(&id, 0).await;
    e.remove(&id).await;
}

/// An ExecSync whose call goes away before its command ends (here the client's
/// deadline passes) has the command killed and reaped, as containerd does when an
/// exec's context ends. Left running, then unreaped as crustd's child, it kept the
/// pod's PID namespace from ending: StopPodSandbox failed with "pause still alive 5s
/// after SIGKILL".
#[tokio::test]
async fn an_exec_sync_whose_call_went_away_is_killed_and_reaped() {
    if !root() {
        return;
    }
    let mut e = setup().await;
    let pod = e.pod("execgone").await;
    let id = e.create(&pod, ctr("c", &["sleep", "999"])).await;
    e.start(&id).await;
    let (mut c, conn) = client_with_grpc_timeout(&e.d.socket, "300m").await;
    let err = c
        .exec_sync(ExecSyncRequest {
            container_id: id.clone(),
            cmd: vec!["sleep".into(), "1000".into()],
            timeout: 0,
        })
        .await
        .expect_err("past its deadline");
    assert_eq!(err.code(), Code::DeadlineExceeded, "{err:?}");
    drop(c);
    conn.await.unwrap().expect("the connection closes cleanly");
    // Deadlines that end while the process is being started (a few ms here; under
    // emulation the 300 ms above did): whenever the call went away, its process goes.
    for ms in 1..=20 {
        let deadline: &'static str = format!("{ms}m").leak();
        let (mut c, conn) = client_with_grpc_timeout(&e.d.socket, deadline).await;
        let r = c
            .exec_sync(ExecSyncRequest {
                container_id: id.clone(),
                cmd: vec!["sleep".into(), "1001".into()],
                timeout: 0,
            })
            .await;
        assert!(r.is_err(), "a call of {deadline} returned {r:?}");
        drop(c);
        let _ = conn.await;
    }

    let list = "cat /proc/[0-9]*/cmdline | tr '\\0' ' '";
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let r = e
            .exec(&id, &["sh", "-c", list], 10)
            .await
            .expect("ExecSync");
        let procs = String::from_utf8_lossy(&r.stdout).to_string();
        if !procs.contains("sleep 1000") && !procs.contains("sleep 1001") {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the exec'd command still runs: {procs}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let t = Instant::now();
    e.stop_pod(&pod.0).await;
    assert!(t.elapsed() < Duration::from_secs(10), "{:?}", t.elapsed());
}
