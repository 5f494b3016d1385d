//! What a container's process sees and runs: its environment and ExecSync, supplemental
//! groups, the pod's shared PID namespace, and all that under a runc runtime handler.

use super::*;
use crust_e2e::crustd::Crustd;
use crust_e2e::{parent_of, which, TempDir};

/// What the process sees: env, user and groups, cwd, capabilities, fds, a read-only
/// root, bind mounts read-write and read-only, the pod's hostname; through ExecSync.
#[tokio::test]
async fn process_environment_and_exec_sync() {
    if !root() {
        return;
    }
    let mut e = setup().await;
    let pod = e.pod("envpod").await;
    let host = TempDir::new("hostdir");
    std::fs::write(host.path().join("f"), "from host").unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(host.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
    let mut cfg = ctr(
        "c",
        &[
            "sh",
            "-c",
            "trap 'exit 5' TERM; while true; do sleep 0.1; done",
        ],
    );
    cfg.envs = vec![KeyValue {
        key: "FOO".into(),
        value: "bar".into(),
    }];
    cfg.working_dir = "/data".into();
    cfg.mounts = vec![
        Mount {
            container_path: "/data/rw".into(),
            host_path: host.path().display().to_string(),
            ..Default::default()
        },
        Mount {
            container_path: "/data/ro".into(),
            host_path: host.path().display().to_string(),
            readonly: true,
            ..Default::default()
        },
    ];
    // As the kubelet mounts the termination message file.
    let term = host.path().join("termination-log");
    std::fs::write(&term, "").unwrap();
    std::fs::set_permissions(&term, std::fs::Permissions::from_mode(0o666)).unwrap();
    cfg.mounts.push(Mount {
        container_path: "/dev/termination-log".into(),
        host_path: term.display().to_string(),
        ..Default::default()
    });
    cfg.annotations.insert(
        "io.kubernetes.container.terminationMessagePath".into(),
        "/dev/termination-log".into(),
    );
    sc(&mut cfg).run_as_user = Some(Int64Value { value: 1000 });
    sc(&mut cfg).readonly_rootfs = true;
    // As the kubelet asks for a pod without shareProcessNamespace: the init is PID 1.
    sc(&mut cfg).namespace_options = Some(NamespaceOption {
        pid: NamespaceMode::Container as i32,
        ..Default::default()
    });
    sc(&mut cfg).capabilities = Some(Capability {
        drop_capabilities: vec!["ALL".into()],
        add_capabilities: vec!["NET_BIND_SERVICE".into()],
        ..Default::default()
    });
    let id = e.create(&pod, cfg).await;
    e.start(&id).await;

    let out = |r: ExecSyncResponse| String::from_utf8_lossy(&r.stdout).trim().to_string();
    let r = e
        .exec(
            &id,
            &[
                "sh",
                "-c",
                "echo $FOO $FROM_IMAGE $HOSTNAME; pwd; id -u; id -g; id -G",
            ],
            10,
        )
        .await
        .unwrap();
    assert_eq!(r.exit_code, 0, "{r:?}");
    assert_eq!(out(r), "bar yes envpod\n/data\n1000\n1000\n1000 2000");
    // The identity of the first process, as ContainerStatus.user reports it: the
    // primary group among the supplementary ones, with the image's /etc/group (Merge).
    let (s, _) = e.status(&id).await;
    let user = s.user.and_then(|u| u.linux).expect("ContainerStatus.user");
    let mut groups = user.supplemental_groups.clone();
    groups.sort();
    assert_eq!((user.uid, user.gid, groups), (1000, 1000, vec![1000, 2000]));
    // The init's capabilities: bounding has exactly NET_BIND_SERVICE (bit 10).
    let r = e
        .exec(&id, &["grep", "CapBnd", "/proc/1/status"], 10)
        .await
        .unwrap();
    assert_eq!(out(r), "CapBnd:\t0000000000000400");
    let r = e
        .exec(&id, &["cat", "/data/ro/f", "/data/rw/f"], 10)
        .await
        .unwrap();
    assert_eq!(out(r), "from hostfrom host");
    let r = e.exec(&id, &["touch", "/data/rw/new"], 10).await.unwrap();
    assert_eq!(r.exit_code, 0, "{r:?}");
    assert!(host.path().join("new").exists());
    let r = e.exec(&id, &["touch", "/data/ro/new2"], 10).await.unwrap();
    assert_ne!(r.exit_code, 0);
    let r = e.exec(&id, &["touch", "/newfile"], 10).await.unwrap();
    assert_ne!(r.exit_code, 0, "the root is read-only");
    // Only 0, 1, 2 (and ls's own directory fd) in a process of the container.
    let r = e.exec(&id, &["ls", "/proc/1/fd"], 10).await.unwrap();
    assert_eq!(out(r), "0\n1\n2");
    let r = e.exec(&id, &["cat", "/etc/hostname"], 10).await.unwrap();
    assert_eq!(out(r), "envpod");
    let r = e
        .exec(&id, &["sh", "-c", "echo bye > /dev/termination-log"], 10)
        .await
        .unwrap();
    assert_eq!(r.exit_code, 0, "{r:?}");
    assert_eq!(std::fs::read_to_string(&term).unwrap(), "bye\n");

    // Exit code and stderr; a missing command; the timeout.
    let r = e
        .exec(&id, &["sh", "-c", "echo err >&2; exit 7"], 10)
        .await
        .unwrap();
    assert_eq!(r.exit_code, 7);
    assert_eq!(String::from_utf8_lossy(&r.stderr), "err\n");
    assert!(e.exec(&id, &["/no/such/binary"], 10).await.is_err());
    let t = Instant::now();
    assert_code(
        e.exec(&id, &["sleep", "30"], 1).await,
        Code::DeadlineExceeded,
        "exec timeout",
    );
    assert!(t.elapsed() < Duration::from_secs(10));

    // Stop: SIGTERM reaches the init, which traps it and exits 5.
    e.stop(&id, 5).await;
    let s = e.wait_exited(&id).await;
    assert_eq!(s.exit_code, 5, "{s:?}");
    // The kubelet reads the termination message file itself and puts it after the
    // runtime's message: a runtime that copied it there would show it twice.
    assert_eq!(s.message, "", "no message of the runtime's own");
    stop_container(&mut e.c, &id, 5)
        .await
        .expect("stop is idempotent");
    assert_code(
        e.exec(&id, &["true"], 1).await,
        Code::FailedPrecondition,
        "exec in an exited container",
    );
    e.remove(&id).await;
}

/// SupplementalGroupsPolicy: Merge adds the groups the image's /etc/group gives the
/// user to the configured ones, Strict only the configured ones; the init, an exec and
/// ContainerStatus.user agree; Status says the policy is supported (the kubelet refuses
/// Strict pods on a node whose runtime does not say so).
#[tokio::test]
async fn supplemental_groups_policy() {
    if !root() {
        return;
    }
    let mut e = setup().await;
    let status = e.runtime_status().await;
    assert!(
        status.features.unwrap().supplemental_groups_policy,
        "Status does not report SupplementalGroupsPolicy"
    );
    let pod = e.pod("groups").await;
    for (policy, want) in [
        (SupplementalGroupsPolicy::Merge, vec![1000, 1234, 2000]),
        (SupplementalGroupsPolicy::Strict, vec![1000, 1234]),
    ] {
        let mut cfg = ctr(
            &format!("{policy:?}").to_lowercase(),
            &["sh", "-c", "id -G; sleep 1000"],
        );
        sc(&mut cfg).run_as_user = Some(Int64Value { value: 1000 });
        sc(&mut cfg).supplemental_groups = vec![1234];
        sc(&mut cfg).supplemental_groups_policy = policy as i32;
        let id = e.create(&pod, cfg).await;
        e.start(&id).await;
        let (s, _) = e.status(&id).await;
        let user = s.user.and_then(|u| u.linux).expect("ContainerStatus.user");
        let mut groups = user.supplemental_groups.clone();
        groups.sort();
        assert_eq!(
            (user.uid, user.gid, &groups),
            (1000, 1000, &want),
            "{policy:?}"
        );
        let line = want
            .iter()
            .map(|g| g.to_string())
            .collect::<Vec<_>>()
            .join(" ");
        let r = e.exec(&id, &["id", "-G"], 10).await.unwrap();
        assert_eq!(
            String::from_utf8_lossy(&r.stdout).trim(),
            line,
            "{policy:?} exec"
        );
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let lines = log_lines(Path::new(&s.log_path));
            if let Some(l) = lines.iter().find(|l| l.1 == "stdout") {
                assert_eq!(l.3, line, "{policy:?} init");
                break;
            }
            assert!(Instant::now() < deadline, "no output from {policy:?}");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        e.remove(&id).await;
    }
    let mut cfg = ctr("bad", &["true"]);
    sc(&mut cfg).supplemental_groups_policy = 7;
    assert_code(
        e.try_create(&pod, cfg).await,
        Code::InvalidArgument,
        "an unknown supplemental_groups_policy",
    );
}

/// `shareProcessNamespace`: with PID mode POD the container joins the pod's PID
/// namespace, whose PID 1 is the pause, and a second container sees the first's
/// processes; it still runs under its monitor and its exit is recorded. The second
/// gives no namespace options at all, which is the CRI's default, POD, as containerd
/// and the conformance suite read it.
#[tokio::test]
async fn shared_pod_pid_namespace() {
    if !root() {
        return;
    }
    let mut e = setup().await;
    let ns = NamespaceOption {
        pid: NamespaceMode::Pod as i32,
        ..Default::default()
    };
    let pod = e
        .pod_with("sharedpid", |c| {
            c.linux.as_mut().unwrap().security_context = Some(LinuxSandboxSecurityContext {
                namespace_options: Some(ns.clone()),
                ..Default::default()
            });
        })
        .await;
    let mut first = ctr("sleeper", &["sleep", "300"]);
    sc(&mut first).namespace_options = Some(ns.clone());
    let a = e.create(&pod, first).await;
    e.start(&a).await;
    let mut second = ctr(
        "looker",
        &[
            "sh",
            "-c",
            "cat /proc/1/cmdline | tr '\\0' ' '; echo; ps -o comm | grep -c sleep",
        ],
    );
    assert!(sc(&mut second).namespace_options.is_none());
    let b = e.create(&pod, second).await;
    e.start(&b).await;
    let s = e.wait_exited(&b).await;
    assert_eq!(s.exit_code, 0, "{s:?}");
    let lines: Vec<String> = log_lines(Path::new(&s.log_path))
        .into_iter()
        .filter(|l| l.1 == "stdout")
        .map(|l| l.3)
        .collect();
    assert!(
        lines[0].contains("crust-pause"),
        "PID 1 is not the pause: {lines:?}"
    );
    assert_eq!(
        lines[1].trim(),
        "1",
        "the sleeper of the other container: {lines:?}"
    );

    // What an init leaves behind in the shared namespace dies with it, as with
    // containerd: it would otherwise run on, unseen, until RemoveContainer.
    let leaver = e
        .create(&pod, ctr("leaver", &["sh", "-c", "sleep 301 & echo left"]))
        .await;
    e.start(&leaver).await;
    let s = e.wait_exited(&leaver).await;
    assert_eq!(s.exit_code, 0, "{s:?}");
    let r = e
        .exec(&a, &["sh", "-c", "ps -o args | grep -c '[s]leep 301'"], 10)
        .await
        .unwrap();
    assert_eq!(
        String::from_utf8_lossy(&r.stdout).trim(),
        "0",
        "the exited container's background sleep still runs: {r:?}"
    );
    e.remove(&leaver).await;
    e.remove(&b).await;
    e.remove(&a).await;
}

/// A runtime handler backed by runc: the same bundle, the same monitor, logs, exit
/// codes, ExecSync, stop and removal without a trace.
#[tokio::test]
async fn runc_runtime_handler() {
    if !require_root(&["ip", "nsenter", "nft", "busybox", "runc"]) {
        return;
    }
    let runc = which("runc").unwrap();
    let d = Crustd::start_with_config(
        Default::default(),
        &format!("[oci_runtimes]\nrunc = {:?}\n", runc.display().to_string()),
    );
    let mut e = Env::with(d).await;
    let pod = e.pod_on("runcpod", "runc", |_| {}).await;
    let before = e.d.leftovers();
    let id = e
        .create(
            &pod,
            ctr(
                "once",
                &["sh", "-c", "echo via runc; cat /etc/hostname; exit 4"],
            ),
        )
        .await;
    e.start(&id).await;
    let s = e.wait_exited(&id).await;
    assert_eq!(s.exit_code, 4, "{s:?}");
    let lines = log_lines(Path::new(&s.log_path));
    assert!(lines.iter().any(|l| l.3 == "via runc"), "{lines:?}");
    assert!(lines.iter().any(|l| l.3 == "runcpod"), "{lines:?}");
    e.remove(&id).await;

    // runc says (`runc features`) it makes recursive read-only mounts: Status passes
    // that on, and the `rro` option reaches it.
    assert!(e.handler_features("runc").await.recursive_read_only_mounts);
    let host = TempDir::new("runcrro");
    let inner = host.path().join("tmpfs");
    std::fs::create_dir_all(&inner).unwrap();
    let st = std::process::Command::new("mount")
        .args(["-t", "tmpfs", "-o", "size=1m", "runcrro"])
        .arg(&inner)
        .status()
        .unwrap();
    assert!(st.success());
    let _guard = HostMounts(vec![inner]);
    let mut cfg = ctr("rro", &["sh", "-c", "touch /mnt/tmpfs/x 2>&1"]);
    cfg.mounts = vec![Mount {
        container_path: "/mnt".into(),
        host_path: host.path().display().to_string(),
        readonly: true,
        recursive_read_only: true,
        ..Default::default()
    }];
    let id = e.create(&pod, cfg).await;
    e.start(&id).await;
    let s = e.wait_exited(&id).await;
    assert_ne!(s.exit_code, 0, "{s:?}");
    let lines = log_lines(Path::new(&s.log_path));
    assert!(
        lines.iter().any(|l| l.3.contains("Read-only file system")),
        "{lines:?}"
    );
    e.remove(&id).await;

    let id = e
        .create(
            &pod,
            ctr(
                "svc",
                &[
                    "sh",
                    "-c",
                    "trap 'exit 6' TERM; while true; do sleep 0.1; done",
                ],
            ),
        )
        .await;
    e.start(&id).await;
    let (pid, monitor) = e.pids(&id).await;
    assert_eq!(
        parent_of(pid),
        monitor,
        "the monitor is the parent of runc's container"
    );
    let r = e
        .exec(&id, &["sh", "-c", "echo out; echo err >&2; exit 3"], 10)
        .await
        .unwrap();
    assert_eq!(
        (r.exit_code, &r.stdout[..], &r.stderr[..]),
        (3, &b"out\n"[..], &b"err\n"[..])
    );
    assert_code(
        e.exec(&id, &["sleep", "30"], 1).await,
        Code::DeadlineExceeded,
        "runc exec timeout",
    );
    e.stop(&id, 5).await;
    assert_eq!(e.wait_exited(&id).await.exit_code, 6);
    e.remove(&id).await;
    assert!(container_dirs(&e.d).is_empty());
    assert_eq!(e.d.leftovers(), before);
    assert!(e.d.mounts().iter().all(|m| !m.contains("rootfs")));
}
