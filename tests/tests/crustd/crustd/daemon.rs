//! crustd as a process: restart after SIGKILL and what it recovers (dead pauses,
//! half-made sandboxes), a second daemon on the same dirs, and its config file.

use super::*;

/// Runs the crustd binary to completion (it is expected to exit soon); kills it after
/// 10 s and fails if it did not.
fn crustd_exits(args: &[&str]) -> Output {
    let mut child = Command::new(crust_e2e::bin("crustd"))
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawning crustd");
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if child.try_wait().unwrap().is_some() {
            return child.wait_with_output().unwrap();
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let out = child.wait_with_output().unwrap();
            panic!(
                "crustd {args:?} kept running: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// After SIGKILL of crustd and a restart, every sandbox comes back with the same id,
/// state, IPs, labels and annotations, the pods still reach each other (they never
/// stopped), the stale socket is replaced, and stop and remove then clean up fully.
#[tokio::test]
async fn restart_after_sigkill_gives_the_same_answers() {
    if !root() {
        return;
    }
    let mut d = Crustd::start();
    let mut c = d.client().await;
    let empty = d.leftovers();
    let mut cfg = pod_config("r1", "uid-r1");
    cfg.annotations.insert("note".into(), "kept".into());
    let a = run(&mut c, cfg).await;
    let b = run(&mut c, pod_config("r2", "uid-r2")).await;
    let e = run(&mut c, pod_config("r3", "uid-r3")).await;
    stop(&mut c, &e).await;
    let pauses = d.leftovers().pauses;
    let mut before = Vec::new();
    for id in [&a, &b, &e] {
        before.push(status(&mut c, id).await);
    }
    let listed = list(&mut c, None).await;
    drop(c);

    d.kill9();
    assert!(d.socket.exists(), "SIGKILL should leave the socket file");
    assert!(std::os::unix::net::UnixStream::connect(&d.socket).is_err());
    assert_eq!(d.leftovers().pauses, pauses, "pods must outlive crustd");
    d.spawn();
    assert!(
        d.log_text().contains("stale socket"),
        "no word of the stale socket in the log"
    );
    let mut c = d.client().await;
    for (id, (old, old_info)) in [&a, &b, &e].into_iter().zip(&before) {
        let (new, info) = status(&mut c, id).await;
        assert_eq!(&new, old, "status of {id} changed across the restart");
        assert_eq!(info["pid"], old_info["pid"]);
        assert_eq!(info["config"], old_info["config"]);
    }
    assert_eq!(list(&mut c, None).await, listed);
    assert_eq!(d.leftovers().pauses, pauses);
    let (ip_b, _) = ips(&mut c, &b).await;
    let (ip_a, _) = ips(&mut c, &a).await;
    assert!(ping(&d, &a, &ip_b), "a cannot reach b after the restart");
    assert!(ping(&d, &b, &ip_a), "b cannot reach a after the restart");
    // Names are still reserved after the restart.
    assert_code(
        try_run(&mut c, Some(pod_config("r1", "uid-r1")), "").await,
        Code::AlreadyExists,
        "a recovered pod's name",
    );

    for id in [&a, &b, &e] {
        stop(&mut c, id).await;
        assert_eq!(state(&mut c, id).await, PodSandboxState::SandboxNotready);
        remove(&mut c, id).await;
    }
    assert_nothing_left(&d, &empty, "stop and remove after a restart");
}

/// Waits for the CONTAINER_STOPPED_EVENT of sandbox `id` on `events`, whose pod status
/// must say NOTREADY.
async fn sandbox_stopped_event(events: &mut tonic::Streaming<ContainerEventResponse>, id: &str) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let ev = tokio::time::timeout_at(deadline, events.message())
            .await
            .unwrap_or_else(|_| panic!("no stopped event for sandbox {id}"))
            .expect("the event stream")
            .expect("an event");
        if ev.container_id == id
            && ev.container_event_type == ContainerEventType::ContainerStoppedEvent as i32
        {
            let s = ev.pod_sandbox_status.expect("the sandbox's status");
            assert_eq!(s.state, PodSandboxState::SandboxNotready as i32);
            return;
        }
    }
}

/// Kills the pause `pid` of a sandbox the test made and waits until it is gone.
fn kill_pause(pid: i32) {
    // SAFETY: killing the pause process of a sandbox this test made.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGKILL) }, 0);
    assert!(wait_gone(pid));
}

/// A sandbox whose pause process was killed reports NOTREADY (and no pid), and its
/// death is an event (the agent need not poll), also after a restart of crustd; stop
/// and remove still clean up its network and pins.
#[tokio::test]
async fn dead_pause_is_notready_also_after_restart() {
    if !root() {
        return;
    }
    let mut d = Crustd::start();
    let mut c = d.client().await;
    let empty = d.leftovers();
    let id = run(&mut c, pod_config("mortal", "uid-mortal")).await;
    let later = run(&mut c, pod_config("later", "uid-later")).await;
    let pid = pause_pid(&mut c, &id).await;
    let mut events = c
        .get_container_events(GetEventsRequest {})
        .await
        .expect("GetContainerEvents")
        .into_inner();
    kill_pause(pid);
    sandbox_stopped_event(&mut events, &id).await;
    assert_eq!(state(&mut c, &id).await, PodSandboxState::SandboxNotready);
    assert_eq!(status(&mut c, &id).await.1["pid"], 0);
    let notready = list_ids(
        &mut c,
        PodSandboxFilter {
            state: Some(PodSandboxStateValue {
                state: PodSandboxState::SandboxNotready as i32,
            }),
            ..Default::default()
        },
    )
    .await;
    assert_eq!(notready, vec![id.clone()]);
    drop(c);

    d.kill9();
    d.spawn();
    let mut c = d.client().await;
    assert_eq!(state(&mut c, &id).await, PodSandboxState::SandboxNotready);
    // A pause that dies after the restart: the recovered sandbox is watched too.
    assert_eq!(state(&mut c, &later).await, PodSandboxState::SandboxReady);
    let mut events = c
        .get_container_events(GetEventsRequest {})
        .await
        .expect("GetContainerEvents")
        .into_inner();
    kill_pause(pause_pid(&mut c, &later).await);
    sandbox_stopped_event(&mut events, &later).await;
    assert_eq!(
        state(&mut c, &later).await,
        PodSandboxState::SandboxNotready
    );
    stop(&mut c, &later).await;
    remove(&mut c, &later).await;
    // The namespace outlived the pause through its pin; stop tears the network down.
    assert_eq!(d.leftovers().veths.len(), 1);
    stop(&mut c, &id).await;
    assert!(d.leftovers().veths.is_empty());
    remove(&mut c, &id).await;
    assert_nothing_left(&d, &empty, "a pod whose pause died");
}

/// A sandbox left `creating` by a crash (here: a real one whose record is set back to
/// `creating` while crustd is down) is rolled back at start: no pause, pin, veth,
/// reserved IP, cgroup or record remains, and its name can be used again.
#[tokio::test]
async fn half_made_sandbox_is_rolled_back_at_start() {
    if !root() {
        return;
    }
    let mut d = Crustd::start();
    let mut c = d.client().await;
    let empty = d.leftovers();
    let keep = run(&mut c, pod_config("keep", "uid-keep")).await;
    let with_keep = d.leftovers();
    let id = run(&mut c, pod_config("half", "uid-half")).await;
    let pid = pause_pid(&mut c, &id).await;
    drop(c);
    d.kill9();

    let path = d.pod_file(&id, "record.json");
    let mut rec: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    assert_eq!(rec["state"], "ready", "record layout changed: {rec}");
    rec["state"] = "creating".into();
    std::fs::write(&path, serde_json::to_vec_pretty(&rec).unwrap()).unwrap();

    d.spawn();
    let mut c = d.client().await;
    assert!(
        wait_gone(pid),
        "the half-made pod's pause survived recovery"
    );
    assert_code(
        try_status(&mut c, &id).await,
        Code::NotFound,
        "rolled back pod",
    );
    assert_nothing_left(&d, &with_keep, "recovery of a half-made sandbox");
    assert_eq!(state(&mut c, &keep).await, PodSandboxState::SandboxReady);
    let again = run(&mut c, pod_config("half", "uid-half")).await;
    stop(&mut c, &again).await;
    remove(&mut c, &again).await;
    remove(&mut c, &keep).await;
    assert_nothing_left(&d, &empty, "the rest");
}

/// A second crustd on the same state (or root) dir refuses to start, exits non-zero
/// and says why, naming the dir; the first one keeps serving.
#[tokio::test]
async fn second_crustd_on_the_same_dirs_refuses_to_start() {
    if !root() {
        return;
    }
    let d = Crustd::start();
    let other_root = TempDir::new("cr2");
    let other_state = TempDir::new("cs2");
    let cfg = other_root.path().join("empty.toml");
    std::fs::write(&cfg, "").unwrap();
    let common = |root: &Path, state: &Path| -> Vec<String> {
        vec![
            "--config".into(),
            cfg.display().to_string(),
            "--root".into(),
            root.display().to_string(),
            "--state".into(),
            state.display().to_string(),
            "--cni-conf-dir".into(),
            d.conf_dir.path().display().to_string(),
            "--cgroup-root".into(),
            format!("{}-second", d.cgroup_root),
            "--cgroup-nested".into(),
        ]
    };
    for (root, state, dir) in [
        (other_root.path(), d.state.path(), d.state.path()),
        (d.root.path(), other_state.path(), d.root.path()),
    ] {
        let args = common(root, state);
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let out = crustd_exits(&args);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "second crustd started: {err}");
        assert!(
            err.contains("another crustd is already running")
                && err.contains(&dir.display().to_string()),
            "unclear refusal: {err}"
        );
    }
    assert!(d.socket.exists());
    let mut c = d.client().await;
    c.version(VersionRequest::default()).await.unwrap();
    assert!(d.log_text().lines().count() > 0);
}

/// `crustd config default` prints every key, and what it prints is a valid config
/// file; a config file with an unknown key or a bad value stops crustd at start,
/// naming the key; an explicit config file that does not exist is an error too.
#[tokio::test]
async fn config_defaults_and_unknown_keys() {
    if !root() {
        return;
    }
    let out = crustd_exits(&["config", "default"]);
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    let mut section = String::new();
    let mut keys = Vec::new();
    for l in text.lines().map(str::trim) {
        if l.starts_with('[') {
            section = l.trim_matches(|c| c == '[' || c == ']').to_string() + ".";
        } else if let Some((k, _)) = l.split_once(" = ") {
            keys.push(format!("{section}{k}"));
        }
    }
    for k in [
        "root",
        "state",
        "socket",
        "log_level",
        "pause_dir",
        "stop_timeout_seconds",
        "runtime_handlers",
        "cgroup.driver",
        "cgroup.root",
        "cgroup.nested",
        "cni.conf_dir",
        "cni.bin_dirs",
        "cni.conf_template",
        "cni.ifname",
    ] {
        assert!(keys.iter().any(|x| x == k), "{k} missing from:\n{text}");
    }
    assert!(
        text.contains("root = \"/var/lib/crust\"")
            && text.contains("conf_dir = \"/etc/cni/net.d\""),
        "{text}"
    );

    // The printed defaults are a config crustd accepts (flags override the paths).
    let d = Crustd::start_with_config(Options::default(), &text);
    let mut c = d.client().await;
    let id = run(&mut c, pod_config("defaults", "uid-defaults")).await;
    assert_eq!(state(&mut c, &id).await, PodSandboxState::SandboxReady);

    let dir = TempDir::new("cf");
    let mut bad = vec![
        ("bogus_key = true\n", "bogus_key"),
        ("[cni]\nconfdir = \"/x\"\n", "confdir"),
        ("stop_timeout_seconds = \"ten\"\n", "stop_timeout_seconds"),
        ("[cgroup]\ndriver = \"cgroupv3\"\n", "cgroup.driver"),
        // systemd names cgroups from the top: no nesting, no other root.
        (
            "[cgroup]\ndriver = \"systemd\"\nnested = true\n",
            "cgroup.nested",
        ),
        (
            "[cgroup]\ndriver = \"systemd\"\nroot = \"/x\"\n",
            "cgroup.root",
        ),
    ];
    // The systemd driver on a node without systemd (these machines, and the cgroup v2
    // VM) fails start-up, saying so.
    let systemd_runs = std::fs::read_to_string("/proc/1/comm").is_ok_and(|c| c.trim() == "systemd");
    if !systemd_runs {
        bad.push((
            "[cgroup]\ndriver = \"systemd\"\n",
            "systemd cannot be reached",
        ));
    }
    for (toml, key) in bad {
        let cfg = dir.path().join("config.toml");
        std::fs::write(&cfg, toml).unwrap();
        let out = crustd_exits(&[
            "--config",
            &cfg.display().to_string(),
            "--root",
            &dir.path().join("root").display().to_string(),
            "--state",
            &dir.path().join("state").display().to_string(),
        ]);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "crustd accepted {toml:?}");
        assert!(
            err.contains(key),
            "error for {toml:?} does not name {key}: {err}"
        );
        assert!(!dir.path().join("state").join("crust.sock").exists());
    }
    let missing = dir.path().join("missing.toml");
    let out = crustd_exits(&[
        "--config",
        &missing.display().to_string(),
        "--root",
        &dir.path().join("root").display().to_string(),
        "--state",
        &dir.path().join("state").display().to_string(),
    ]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("missing.toml"));
}
