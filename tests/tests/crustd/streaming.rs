//! Exec, Attach and PortForward end to end with a real client: `kubectl` against a
//! shim that plays API server and kubelet (tests/src/kube_shim.rs), which makes the CRI
//! call and proxies kubectl's SPDY upgrade to the URL crustd returns — the path
//! `kubectl exec` takes on a cluster. Root: crustd runs pods. Also GetContainerEvents,
//! the other streaming RPC (a gRPC stream, no URL).

use cri_api::*;
use crust_e2e::cri::{ctr, setup, Env};
use crust_e2e::kube_shim::{Pod, Shim};
use crust_e2e::require_root;
use crust_e2e::terminal::{shell_words, Terminal};
use std::io::{Read, Write};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

fn root() -> bool {
    require_root(&["ip", "busybox"])
}

fn need_kubectl() -> bool {
    if crust_e2e::kube_shim::kubectl().is_some() {
        return true;
    }
    assert!(
        !crust_e2e::ci(),
        "kubectl is missing (.ci/run installs kubernetes-client)"
    );
    crust_e2e::say_skipped("no kubectl");
    false
}

fn run(mut c: Command, stdin: &[u8]) -> Output {
    c.stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = c.spawn().unwrap();
    child.stdin.take().unwrap().write_all(stdin).unwrap();
    child.wait_with_output().unwrap()
}

fn s(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

async fn shim_for(e: &Env, sandbox: &str, containers: &[(&str, &str, bool, bool)]) -> Shim {
    let pod = Pod {
        sandbox: sandbox.to_string(),
        containers: containers
            .iter()
            .map(|(n, id, stdin, tty)| (n.to_string(), (id.to_string(), *stdin, *tty)))
            .collect(),
    };
    Shim::start(e.d.socket.clone(), e.d.node.path(), pod)
}

/// `kubectl exec -i` (`k`, without its command) of `sh -c SCRIPT`, where the script
/// writes `to-err` to stderr: stdin reaches it, stdout and stderr come back apart, and
/// so does its exit code.
fn check_stdio(mut k: Command, script: &str, input: &str, want_out: &str, code: i32) {
    k.args(["-i", "--", "sh", "-c", script]);
    let out = run(k, input.as_bytes());
    assert_eq!(s(&out.stdout), want_out, "stderr: {}", s(&out.stderr));
    assert!(s(&out.stderr).contains("to-err"), "{}", s(&out.stderr));
    assert_eq!(out.status.code(), Some(code), "{}", s(&out.stderr));
}

/// `kubectl exec` (`k`, without its command) of a command printing `n` bytes `byte`:
/// all arrive (more than SPDY's 64 KiB window), and it exits 0.
fn check_big_output(mut k: Command, n: usize, byte: char) {
    k.args(["--", "sh", "-c"])
        .arg(format!("head -c {n} /dev/zero | tr '\\0' {byte}"));
    let out = run(k, b"");
    assert_eq!(out.status.code(), Some(0), "{}", s(&out.stderr));
    assert_eq!(out.stdout.len(), n);
    assert!(out.stdout.iter().all(|b| *b == byte as u8));
}

/// `kubectl exec -it` under `script`, which gives kubectl a `rows` x `cols` terminal
/// (kubectl only asks for a tty when its stdin is one): the command has a tty, of that
/// size, with `TERM=xterm`; what is typed reaches it; its exit code comes back.
fn check_tty_exec(kubectl: &Command, rows: u16, cols: u16) {
    let cmd = format!(
        "stty cols {cols} rows {rows}; exec {} exec -it p -c main -- sh -c 'tty >/dev/null && echo is-a-tty; echo term=$TERM; stty size; read l; echo got=$l; exit 3'",
        shell_words(kubectl)
    );
    let mut t = Terminal::spawn(&cmd);
    t.wait_for(&format!("{rows} {cols}"));
    t.type_in(b"typed\n");
    t.close_input();
    t.wait_for("got=typed");
    let (code, out, err) = t.finish();
    assert!(out.contains("is-a-tty"), "{out}{err}");
    assert!(out.contains("term=xterm"), "{out}{err}");
    assert_eq!(code, Some(3), "{out}{err}");
}

/// A client that leaves a tty exec hangs up its terminal: the shell it ran goes, with
/// what it `exec`ed.
async fn check_hang_up(e: &Env, shim: &Shim, id: &str) {
    let sleeping = || {
        let mut c = e.c.clone();
        let id = id.to_string();
        async move {
            let r = c
                .exec_sync(ExecSyncRequest {
                    container_id: id,
                    cmd: vec![
                        "sh".into(),
                        "-c".into(),
                        "cat /proc/[0-9]*/cmdline | tr '\\0' ' '".into(),
                    ],
                    timeout: 10,
                })
                .await
                .unwrap()
                .into_inner();
            s(&r.stdout).contains("sleep 997")
        }
    };
    let cmd = format!(
        "exec {} exec -it p -c main -- sh -c 'echo marker-shell-$$; exec sleep 997'",
        shell_words(&shim.kubectl())
    );
    let t = Terminal::spawn(&cmd);
    t.wait_for("marker-shell-");
    let deadline = Instant::now() + Duration::from_secs(30);
    while !sleeping().await {
        assert!(Instant::now() < deadline, "the exec never ran its sleep");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    t.hang_up();
    t.finish();
    let deadline = Instant::now() + Duration::from_secs(30);
    while sleeping().await {
        assert!(Instant::now() < deadline, "the exec outlived its client");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// `kubectl exec`: stdin in, stdout and stderr apart, the exit code out; output larger
/// than a SPDY window; a command that cannot run; a tty (through `script`, which gives
/// kubectl a terminal) sized as asked; and the Exec RPC's refusals.
#[tokio::test]
async fn kubectl_exec() {
    if !root() || !need_kubectl() {
        return;
    }
    let mut e = setup().await;
    let pod = e.pod("execpod").await;
    let id = e.create(&pod, ctr("main", &["sleep", "1000"])).await;
    e.start(&id).await;
    let shim = shim_for(&e, &pod.0, &[("main", &id, false, false)]).await;

    let mut k = shim.kubectl();
    k.args(["exec", "p", "-c", "main"]);
    check_stdio(
        k,
        "cat; echo to-err >&2; echo in-container=$FROM_IMAGE; exit 7",
        "hello through crust\n",
        "hello through crust\nin-container=yes\n",
        7,
    );
    let mut k = shim.kubectl();
    k.args(["exec", "p", "-c", "main"]);
    check_big_output(k, 500000, 'x');

    let mut k = shim.kubectl();
    k.args(["exec", "p", "-c", "main", "--", "/no/such/binary"]);
    let out = run(k, b"");
    assert_ne!(out.status.code(), Some(0));
    assert!(
        s(&out.stderr).contains("/no/such/binary"),
        "{}",
        s(&out.stderr)
    );

    check_hang_up(&e, &shim, &id).await;

    // `kubectl cp` is tar through exec: a MiB of noise in through stdin, back out through
    // stdout, byte for byte.
    let work = crust_e2e::TempDir::new("kcp");
    let data: Vec<u8> = (0..1u32 << 20)
        .map(|i| (i.wrapping_mul(2654435761) >> 13) as u8)
        .collect();
    std::fs::write(work.path().join("in.bin"), &data).unwrap();
    let mut k = shim.kubectl();
    k.current_dir(work.path())
        .args(["cp", "in.bin", "p:/tmp/in.bin", "-c", "main"]);
    let out = run(k, b"");
    assert_eq!(out.status.code(), Some(0), "{}", s(&out.stderr));
    let mut k = shim.kubectl();
    k.current_dir(work.path())
        .args(["cp", "p:/tmp/in.bin", "back.bin", "-c", "main"]);
    let out = run(k, b"");
    assert_eq!(out.status.code(), Some(0), "{}", s(&out.stderr));
    assert!(
        std::fs::read(work.path().join("back.bin")).unwrap() == data,
        "the round trip changed the file"
    );

    check_tty_exec(&shim.kubectl(), 33, 91);

    // The RPC refuses what cannot be streamed.
    let client = e.c.clone();
    let bad = |req: ExecRequest| {
        let mut c = client.clone();
        async move { c.exec(req).await.unwrap_err().code() }
    };
    let base = ExecRequest {
        container_id: id.clone(),
        cmd: vec!["true".into()],
        stdout: true,
        ..Default::default()
    };
    assert_eq!(
        bad(ExecRequest {
            cmd: vec![],
            ..base.clone()
        })
        .await,
        tonic::Code::InvalidArgument
    );
    assert_eq!(
        bad(ExecRequest {
            stdout: false,
            ..base.clone()
        })
        .await,
        tonic::Code::InvalidArgument
    );
    assert_eq!(
        bad(ExecRequest {
            tty: true,
            stderr: true,
            ..base.clone()
        })
        .await,
        tonic::Code::InvalidArgument
    );
    assert_eq!(
        bad(ExecRequest {
            container_id: "nope".into(),
            ..base.clone()
        })
        .await,
        tonic::Code::NotFound
    );
    let url = e.c.exec(base.clone()).await.unwrap().into_inner().url;
    assert!(url.starts_with("http://127.0.0.1:"), "{url}");
    e.stop(&id, 0).await;
    assert_eq!(bad(base).await, tonic::Code::FailedPrecondition);
}

/// `kubectl attach -i`: input reaches the container's stdin, its output comes back,
/// and the attach ends when the container exits.
#[tokio::test]
async fn kubectl_attach() {
    if !root() || !need_kubectl() {
        return;
    }
    let mut e = setup().await;
    let pod = e.pod("attachpod").await;
    let mut cfg = ctr(
        "reader",
        &[
            "sh",
            "-c",
            "echo started; while read l; do echo got-$l; [ $l = bye ] && exit 0; done",
        ],
    );
    cfg.stdin = true;
    let id = e.create(&pod, cfg).await;
    e.start(&id).await;
    let shim = shim_for(&e, &pod.0, &[("reader", &id, true, false)]).await;
    let mut k = shim.kubectl();
    k.args(["attach", "p", "-c", "reader", "-i"]);
    let out = run(k, b"one\ntwo\nbye\n");
    let stdout = s(&out.stdout);
    assert!(stdout.contains("got-one"), "{stdout}{}", s(&out.stderr));
    assert!(stdout.contains("got-two"), "{stdout}{}", s(&out.stderr));
    assert!(stdout.contains("got-bye"), "{stdout}{}", s(&out.stderr));
    let st = e.wait_exited(&id).await;
    assert_eq!(st.exit_code, 0);
    check_tty_attach(&mut e, &pod).await;

    // Attach to an exited container is refused by the RPC.
    let err =
        e.c.attach(AttachRequest {
            container_id: id.clone(),
            stdout: true,
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), tonic::Code::FailedPrecondition);
}

/// A tty container (with stdin): kubectl (given a 33x91 terminal by `script`) attaches
/// with -it, the container's terminal takes kubectl's size before the input arrives,
/// input reaches it, and what it prints is in its log as well.
async fn check_tty_attach(e: &mut Env, pod: &(String, PodSandboxConfig)) {
    let mut cfg = ctr(
        "term",
        &[
            "sh",
            "-c",
            "read -t 120 l; echo line=$l; stty size; sleep 1",
        ],
    );
    cfg.stdin = true;
    cfg.tty = true;
    let tid = e.create(pod, cfg).await;
    e.start(&tid).await;
    let shim = shim_for(e, &pod.0, &[("term", &tid, true, true)]).await;
    let cmd = format!(
        "stty cols 91 rows 33; exec {} attach -it p -c term",
        shell_words(&shim.kubectl())
    );
    let mut t = Terminal::spawn(&cmd);
    // Typed once kubectl is about to attach: the terminal holds it until kubectl reads.
    t.wait_for("If you don't see a command prompt");
    t.type_in(b"hello\n");
    t.close_input();
    t.wait_for("line=hello");
    let (_, text, err) = t.finish();
    assert_eq!(e.wait_exited(&tid).await.exit_code, 0);
    let log = std::path::Path::new(&pod.1.log_directory).join("term/0.log");
    let log = std::fs::read_to_string(&log).unwrap_or_default();
    assert!(log.contains("line=hello"), "{log}");
    // kubectl attach sends one size larger first, then the real one (to make a screen
    // program redraw); the first is applied before the input goes in, the second may
    // land just after the container asked.
    assert!(
        text.contains("33 91") || text.contains("34 92"),
        "{text}{err}\nlog:\n{log}"
    );
}

/// `kubectl port-forward`: a local port reaches a server listening on the pod's
/// loopback only (inside the pod's network namespace), twice over; a port nothing
/// listens on fails that connection without ending the session.
#[tokio::test]
async fn kubectl_port_forward() {
    if !root() || !need_kubectl() {
        return;
    }
    let mut e = setup().await;
    let pod = e.pod("pfpod").await;
    let id = e
        .create(
            &pod,
            ctr(
                "web",
                &["sh", "-c", "mkdir -p /tmp/www && echo hello-from-the-pod > /tmp/www/index.html && exec httpd -f -p 127.0.0.1:8080 -h /tmp/www"],
            ),
        )
        .await;
    e.start(&id).await;
    // Until httpd listens (1F90 = 8080, state 0A = LISTEN).
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let r =
            e.c.exec_sync(ExecSyncRequest {
                container_id: id.clone(),
                cmd: vec!["cat".into(), "/proc/net/tcp".into()],
                timeout: 5,
            })
            .await
            .unwrap()
            .into_inner();
        if s(&r.stdout).contains(":1F90 00000000:0000 0A") {
            break;
        }
        assert!(Instant::now() < deadline, "httpd never listened");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let shim = shim_for(&e, &pod.0, &[("web", &id, false, false)]).await;
    let mut k = shim.kubectl();
    k.args(["port-forward", "pod/p", ":8080", ":8081"]);
    let (mut child, ports) = forwarding(k, 2);
    for _ in 0..2 {
        let r = http_get(ports[0]);
        assert!(r.contains("hello-from-the-pod"), "{r}");
    }
    // Nothing listens on 8081: that connection fails, the session goes on.
    let r = http_get(ports[1]);
    assert!(!r.contains("hello"), "{r}");
    let r = http_get(ports[0]);
    assert!(r.contains("hello-from-the-pod"), "{r}");
    let _ = child.kill();
    let _ = child.wait();

    // The same over WebSocket: kubectl tunnels SPDY through it.
    let mut k = shim.kubectl();
    k.env("KUBECTL_PORT_FORWARD_WEBSOCKETS", "true")
        .args(["port-forward", "pod/p", ":8080"]);
    let (mut child, ports) = forwarding(k, 1);
    let r = http_get(ports[0]);
    assert!(r.contains("hello-from-the-pod"), "{r}");
    assert!(shim.websockets() >= 1, "kubectl fell back to SPDY");
    let _ = child.kill();
    let _ = child.wait();
}

/// GetContainerEvents: a subscriber sees each container's created, started, stopped
/// and deleted events in order, and the sandbox's own, each with the pod's status and
/// its containers' statuses as they were then.
#[tokio::test]
async fn container_events() {
    if !root() {
        return;
    }
    let mut e = setup().await;
    let mut events =
        e.c.get_container_events(GetEventsRequest {})
            .await
            .unwrap()
            .into_inner();
    let pod = e.pod("eventpod").await;
    // A container that exits on its own: its stopped event comes from the exit watcher,
    // with the exit code in its status.
    let quick = e.create(&pod, ctr("quick", &["sh", "-c", "exit 3"])).await;
    e.start(&quick).await;
    let mut seen: Vec<ContainerEventResponse> = vec![];
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    let stopped = loop {
        let ev = tokio::time::timeout_at(deadline, events.message())
            .await
            .expect("the exit's event in time")
            .unwrap()
            .unwrap();
        seen.push(ev.clone());
        if ev.container_id == quick
            && ev.container_event_type == ContainerEventType::ContainerStoppedEvent as i32
        {
            break ev;
        }
    };
    let st = stopped
        .containers_statuses
        .iter()
        .find(|s| s.id == quick)
        .expect("its status");
    assert_eq!(st.exit_code, 3);
    e.remove(&quick).await;
    let id = e.create(&pod, ctr("ev", &["sleep", "1000"])).await;
    e.start(&id).await;
    e.stop(&id, 0).await;
    e.remove(&id).await;
    e.remove_pod(&pod.0).await;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while seen.iter().filter(|ev| ev.container_id == pod.0).count() < 4 {
        let ev = tokio::time::timeout_at(deadline, events.message())
            .await
            .expect("events in time")
            .unwrap()
            .unwrap();
        seen.push(ev);
    }
    let kinds = |who: &str| -> Vec<i32> {
        seen.iter()
            .filter(|ev| ev.container_id == who)
            .map(|ev| ev.container_event_type)
            .collect()
    };
    use ContainerEventType as T;
    let all = [
        T::ContainerCreatedEvent as i32,
        T::ContainerStartedEvent as i32,
        T::ContainerStoppedEvent as i32,
        T::ContainerDeletedEvent as i32,
    ];
    assert_eq!(kinds(&pod.0), all, "the sandbox's events");
    assert_eq!(kinds(&id), all, "the container's events");
    let started = seen
        .iter()
        .find(|ev| ev.container_id == id && ev.container_event_type == all[1])
        .unwrap();
    assert_eq!(
        started.pod_sandbox_status.as_ref().map(|s| s.id.as_str()),
        Some(pod.0.as_str())
    );
    let me = started
        .containers_statuses
        .iter()
        .find(|s| s.id == id)
        .expect("the container's status in its started event");
    assert_eq!(me.state, ContainerState::ContainerRunning as i32);
    assert!(started.created_at > 0);
    let stopped = seen
        .iter()
        .find(|ev| ev.container_id == id && ev.container_event_type == all[2])
        .unwrap();
    let me = stopped
        .containers_statuses
        .iter()
        .find(|s| s.id == id)
        .expect("the container's status in its stopped event");
    assert_eq!(me.state, ContainerState::ContainerExited as i32);
}

/// The same exec and attach over WebSocket (`v5.channel.k8s.io`), which kubectl 1.30+
/// speaks first: stdin (and its end), stdout and stderr apart, the exit code, a tty
/// with the client's size, and attach; the shim counts that the upgrades really were
/// WebSocket ones (kubectl would fall back to SPDY silently).
#[tokio::test]
async fn kubectl_over_websocket() {
    if !root() || !need_kubectl() {
        return;
    }
    let mut e = setup().await;
    let pod = e.pod("wspod").await;
    let id = e.create(&pod, ctr("main", &["sleep", "1000"])).await;
    e.start(&id).await;
    let mut cfg = ctr(
        "reader",
        &[
            "sh",
            "-c",
            "while read l; do echo got-$l; [ $l = bye ] && exit 0; done",
        ],
    );
    cfg.stdin = true;
    let rid = e.create(&pod, cfg).await;
    e.start(&rid).await;
    let shim = shim_for(
        &e,
        &pod.0,
        &[("main", &id, false, false), ("reader", &rid, true, false)],
    )
    .await;

    let mut k = shim.kubectl_ws();
    k.args(["exec", "p", "-c", "main"]);
    check_stdio(
        k,
        "cat; echo to-err >&2; exit 5",
        "over a websocket\n",
        "over a websocket\n",
        5,
    );
    assert!(shim.websockets() >= 1, "kubectl fell back to SPDY");
    let mut k = shim.kubectl_ws();
    k.args(["exec", "p", "-c", "main"]);
    check_big_output(k, 300000, 'y');
    check_tty_exec(&shim.kubectl_ws(), 22, 77);

    let mut k = shim.kubectl_ws();
    k.args(["attach", "p", "-c", "reader", "-i"]);
    let out = run(k, b"one\nbye\n");
    assert!(
        s(&out.stdout).contains("got-one"),
        "{}{}",
        s(&out.stdout),
        s(&out.stderr)
    );
    assert!(
        s(&out.stdout).contains("got-bye"),
        "{}{}",
        s(&out.stdout),
        s(&out.stderr)
    );
    assert!(
        shim.websockets() >= 4,
        "{} websocket upgrades",
        shim.websockets()
    );
}

/// Starts `kubectl port-forward` (`k`) and returns it with its local ports, once it
/// says "Forwarding from 127.0.0.1:PORT" for each. The caller kills and reaps it.
#[allow(clippy::zombie_processes)]
fn forwarding(mut k: Command, want: usize) -> (std::process::Child, Vec<u16>) {
    k.stdout(Stdio::piped()).stderr(Stdio::piped());
    let mut child = k.spawn().unwrap();
    let mut so = child.stdout.take().unwrap();
    let mut seen = String::new();
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let mut b = [0u8; 256];
        let n = so.read(&mut b).unwrap_or(0);
        seen.push_str(&s(&b[..n]));
        let ports: Vec<u16> = seen
            .lines()
            .filter(|l| l.starts_with("Forwarding from 127.0.0.1:"))
            .filter_map(|l| l.split(':').nth(1)?.split(' ').next()?.parse().ok())
            .collect();
        if ports.len() == want {
            // kubectl says "Handling connection for ..." on each: keep reading, or it
            // fails writing that.
            std::thread::spawn(move || std::io::copy(&mut so, &mut std::io::sink()));
            return (child, ports);
        }
        if n == 0 || Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("kubectl said: {seen}");
        }
    }
}

fn http_get(port: u16) -> String {
    let mut c = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    c.write_all(b"GET /index.html HTTP/1.0\r\n\r\n").unwrap();
    let mut r = String::new();
    let _ = c.read_to_string(&mut r);
    r
}

/// Exec through a container an external OCI runtime runs (the `runc` handler): the
/// command goes through `runc exec`, with stdin, stdout, stderr and the exit code; and
/// with a tty, sized, typed into, and hung up by a client that leaves. A tty container
/// there gets its terminal from runc (through a console socket) and is attached to.
#[tokio::test]
async fn kubectl_exec_through_runc() {
    if !crust_e2e::require_root(&["ip", "nsenter", "busybox", "runc"]) || !need_kubectl() {
        return;
    }
    let runc = crust_e2e::which("runc").unwrap();
    let d = crust_e2e::crustd::Crustd::start_with_config(
        Default::default(),
        &format!("[oci_runtimes]\nrunc = {:?}\n", runc.display().to_string()),
    );
    let mut e = Env::with(d).await;
    let pod = e.pod_on("runcexec", "runc", |_| {}).await;
    let id = e.create(&pod, ctr("main", &["sleep", "1000"])).await;
    e.start(&id).await;
    let shim = shim_for(&e, &pod.0, &[("main", &id, false, false)]).await;
    let mut k = shim.kubectl();
    k.args(["exec", "p", "-c", "main"]);
    check_stdio(
        k,
        "cat; echo to-err >&2; exit 6",
        "through runc exec\n",
        "through runc exec\n",
        6,
    );
    check_tty_exec(&shim.kubectl(), 21, 83);
    check_hang_up(&e, &shim, &id).await;
    check_tty_attach(&mut e, &pod).await;
}

/// `stream_idle_timeout_seconds`: an exec nothing crosses for that long is cut off
/// (kubectl returns), while one that keeps talking is not.
#[tokio::test]
async fn idle_streams_are_closed() {
    if !root() || !need_kubectl() {
        return;
    }
    let d = crust_e2e::crustd::Crustd::start_with_config(
        Default::default(),
        "stream_idle_timeout_seconds = 2\n",
    );
    let mut e = Env::with(d).await;
    let pod = e.pod("idlepod").await;
    let id = e.create(&pod, ctr("main", &["sleep", "1000"])).await;
    e.start(&id).await;
    let shim = shim_for(&e, &pod.0, &[("main", &id, false, false)]).await;
    // Talks every half second for 4 s: not idle.
    let mut k = shim.kubectl();
    k.args(["exec", "p", "-c", "main", "--", "sh", "-c"])
        .arg("for i in 1 2 3 4 5 6 7 8; do echo tick; sleep 0.5; done");
    let out = run(k, b"");
    assert_eq!(out.status.code(), Some(0), "{}", s(&out.stderr));
    assert_eq!(s(&out.stdout).matches("tick").count(), 8);
    // Silent: cut off after about 2 s, long before the command's 1000.
    let t = Instant::now();
    let mut k = Command::new("timeout");
    k.arg("30").arg(shim.kubectl().get_program());
    for (key, v) in shim.kubectl().get_envs() {
        if let Some(v) = v {
            k.env(key, v);
        }
    }
    k.args(shim.kubectl().get_args())
        .args(["exec", "p", "-c", "main", "--", "sleep", "1000"]);
    let out = run(k, b"");
    assert_ne!(
        out.status.code(),
        Some(124),
        "not cut off: {}",
        s(&out.stderr)
    );
    assert!(t.elapsed() < Duration::from_secs(20), "{:?}", t.elapsed());
}
