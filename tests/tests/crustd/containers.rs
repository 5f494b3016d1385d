//! Containers end to end through CRI against `crustd`: a busybox-static image imported
//! into the daemon's image store, pods on crust's bridge, containers made by crust's own
//! executor under its monitor.

use cri_api::*;
use crust_e2e::cri::*;
use crust_e2e::crustd::Crustd;
use crust_e2e::registry::Registry;
use crust_e2e::{parent_of, require_root, which, TempDir};
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

/// Limits: a memory limit that ends in OOMKilled; UpdateContainerResources reaches the
/// cgroup; the container and its execs live in the container's cgroup.
#[tokio::test]
async fn resources_oom_and_update() {
    if !root() {
        return;
    }
    let mut e = setup().await;
    let pod = e.pod("respod").await;
    let mut cfg = memory_hog("hog");
    res(&mut cfg).memory_swap_limit_in_bytes = 16 << 20;
    let id = e.create(&pod, cfg).await;
    e.start(&id).await;
    let s = e.wait_exited(&id).await;
    assert_eq!(s.reason, "OOMKilled", "{s:?}");
    assert_ne!(s.exit_code, 0);

    let mut cfg = ctr("sleeper", &["sleep", "1000"]);
    res(&mut cfg).memory_limit_in_bytes = 64 << 20;
    let id2 = e.create(&pod, cfg).await;
    e.start(&id2).await;
    let (_, info) = e.status(&id2).await;
    let cg = info["cgroup"].as_str().unwrap().to_string();
    let h = e.d.cgroups();
    use cgroups::CgroupManager;
    let path = cgroups::CgroupPath::new(&cg).unwrap();
    let mem = h.dir("memory", &path).unwrap();
    let limit_file = if mem.join("memory.max").exists() {
        "memory.max"
    } else {
        "memory.limit_in_bytes"
    };
    assert_eq!(
        std::fs::read_to_string(mem.join(limit_file))
            .unwrap()
            .trim(),
        (64u64 << 20).to_string()
    );
    // containerd's layout: the container's cgroup beside the pause's, both under the
    // pod-level cgroup, which holds no process itself (cgroup v2 allows controllers
    // for children only to a cgroup without processes).
    let sb =
        e.c.pod_sandbox_status(PodSandboxStatusRequest {
            pod_sandbox_id: pod.0.clone(),
            verbose: true,
        })
        .await
        .unwrap()
        .into_inner();
    let sb_info: serde_json::Value = serde_json::from_str(&sb.info["info"]).unwrap();
    let sb_cg = cgroups::CgroupPath::new(sb_info["cgroupPath"].as_str().unwrap()).unwrap();
    assert_eq!(path.parent(), sb_cg.parent(), "{path} beside {sb_cg}");
    for dir in h.dirs(&sb_cg.parent().unwrap()) {
        let procs = std::fs::read_to_string(dir.join("cgroup.procs")).unwrap();
        assert_eq!(procs.trim(), "", "{}", dir.display());
    }
    // The init runs in the container's cgroup, in every hierarchy (each v1
    // controller's and the cgroup2 one), and nothing else does.
    let pid = info["pid"].as_i64().unwrap();
    let dirs = h.dirs(&path);
    assert!(!dirs.is_empty());
    for dir in &dirs {
        let procs = std::fs::read_to_string(dir.join("cgroup.procs")).unwrap();
        assert_eq!(procs.trim(), pid.to_string(), "{}", dir.display());
    }
    // An exec joins the container's cgroup too. On v1 /proc/self/cgroup names it. On
    // v2 the container has a cgroup namespace rooted at its cgroup: there the exec is
    // in the init's namespace and reads `0::/`, its root (from any other cgroup it
    // would read a path, `/..` and up for one outside).
    let r = e
        .exec(
            &id2,
            &[
                "sh",
                "-c",
                "cat /proc/self/cgroup; ls -l /proc/self/ns/cgroup",
            ],
            5,
        )
        .await
        .unwrap();
    let text = String::from_utf8_lossy(&r.stdout).to_string();
    match h.version() {
        cgroups::Version::V1 => assert!(text.contains(&id2), "{text}"),
        cgroups::Version::V2 => {
            let init_ns = std::fs::read_link(format!("/proc/{pid}/ns/cgroup")).unwrap();
            let mut lines = text.lines();
            assert_eq!(lines.next(), Some("0::/"), "{text}");
            assert!(
                lines
                    .next()
                    .is_some_and(|l| l.ends_with(&*init_ns.to_string_lossy())),
                "{text} (the init's is {})",
                init_ns.display()
            );
        }
    }

    e.c.update_container_resources(UpdateContainerResourcesRequest {
        container_id: id2.clone(),
        linux: Some(LinuxContainerResources {
            memory_limit_in_bytes: 128 << 20,
            ..Default::default()
        }),
        ..Default::default()
    })
    .await
    .unwrap();
    assert_eq!(
        std::fs::read_to_string(mem.join(limit_file))
            .unwrap()
            .trim(),
        (128u64 << 20).to_string()
    );
    let (s, _) = e.status(&id2).await;
    assert_eq!(
        s.resources.unwrap().linux.unwrap().memory_limit_in_bytes,
        128 << 20
    );

    // Stats, as the kubelet's summary API reads them.
    let st =
        e.c.container_stats(ContainerStatsRequest {
            container_id: id2.clone(),
        })
        .await
        .unwrap()
        .into_inner()
        .stats
        .unwrap();
    assert_eq!(st.attributes.unwrap().id, id2);
    assert!(st.cpu.unwrap().usage_core_nano_seconds.unwrap().value > 0);
    assert!(st.memory.unwrap().usage_bytes.unwrap().value > 0);
    assert!(st.writable_layer.is_some());
    let list =
        e.c.list_container_stats(ListContainerStatsRequest {
            filter: Some(ContainerStatsFilter {
                pod_sandbox_id: pod.0.clone(),
                ..Default::default()
            }),
        })
        .await
        .unwrap()
        .into_inner()
        .stats;
    assert_eq!(list.len(), 1, "only the running container has stats");
    let ps =
        e.c.list_pod_sandbox_stats(ListPodSandboxStatsRequest { filter: None })
            .await
            .unwrap()
            .into_inner()
            .stats;
    assert_eq!(ps.len(), 1);
    let linux = ps[0].linux.clone().unwrap();
    assert_eq!(linux.containers.len(), 1);
    let net = linux.network.unwrap();
    assert_eq!(net.default_interface.unwrap().name, "eth0");
    assert!(linux.process.unwrap().process_count.unwrap().value >= 2);

    // A root container has the default capability set in effect (containerd's and
    // CRI-O's 14: CHOWN, DAC_OVERRIDE, FSETID, FOWNER, MKNOD, NET_RAW, SETGID, SETUID,
    // SETFCAP, SETPCAP, NET_BIND_SERVICE, SYS_CHROOT, KILL, AUDIT_WRITE).
    let r = e
        .exec(&id2, &["grep", "CapEff", "/proc/self/status"], 5)
        .await
        .unwrap();
    assert_eq!(
        String::from_utf8_lossy(&r.stdout).trim(),
        "CapEff:\t00000000a80425fb"
    );

    // The update shows in behaviour too: under a 16 MiB limit, what fit in 128 MiB
    // is OOM-killed. (Given a minute: under hack/vm-test's emulation the shell takes
    // some 20 s to build the string.)
    let grow = [
        "sh",
        "-c",
        "x=$(head -c 24000000 /dev/zero | tr '\\0' a); echo ok",
    ];
    let r = e.exec(&id2, &grow, 60).await.unwrap();
    assert_eq!(
        (r.exit_code, String::from_utf8_lossy(&r.stdout).trim()),
        (0, "ok")
    );
    e.c.update_container_resources(UpdateContainerResourcesRequest {
        container_id: id2.clone(),
        linux: Some(LinuxContainerResources {
            memory_limit_in_bytes: 16 << 20,
            ..Default::default()
        }),
        ..Default::default()
    })
    .await
    .unwrap();
    let r = e.exec(&id2, &grow, 60).await.unwrap();
    assert_ne!(r.exit_code, 0, "{r:?}");
    assert!(!String::from_utf8_lossy(&r.stdout).contains("ok"), "{r:?}");

    e.remove(&id2).await;
    e.remove(&id).await;
    assert!(container_dirs(&e.d).is_empty());
}

/// UpdateContainerResources end to end, as a kubelet resizing a pod sends it: CPU shares
/// and quota, cpuset, memory, hugepage limits (for every page size, where the node has
/// the hugetlb controller) and on cgroup v2 the `unified` map, each in the container's
/// cgroup files of the version the node has, at create and again after the update; the
/// container's status reports the update. On v1 a `unified` key is refused as
/// InvalidArgument (v1 has no such files) and changes nothing.
#[tokio::test]
async fn update_container_resources_reaches_the_cgroup() {
    use cgroups::CgroupManager;
    if !root() {
        return;
    }
    let mut e = setup().await;
    let pod = e.pod("resize").await;
    let h = e.d.cgroups();
    let v2 = h.version() == cgroups::Version::V2;
    let sizes = if hugetlb_missing(&e).is_none() {
        hugepage_sizes()
    } else {
        vec![]
    };
    let huge = |pages: u64| -> Vec<HugepageLimit> {
        sizes
            .iter()
            .map(|s| HugepageLimit {
                page_size: s.clone(),
                limit: pages * page_bytes(s),
            })
            .collect()
    };
    let unified = |pairs: &[(&str, &str)]| -> std::collections::HashMap<String, String> {
        if !v2 {
            return Default::default();
        }
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    };
    let mut cfg = ctr("resized", &["sleep", "1000"]);
    *res(&mut cfg) = LinuxContainerResources {
        cpu_shares: 512,
        cpu_period: 100_000,
        cpu_quota: 50_000,
        cpuset_cpus: "0".into(),
        cpuset_mems: "0".into(),
        memory_limit_in_bytes: 64 << 20,
        hugepage_limits: huge(0),
        unified: unified(&[("pids.max", "40")]),
        ..Default::default()
    };
    let id = e.create(&pod, cfg).await;
    e.start(&id).await;
    let (_, info) = e.status(&id).await;
    let cg = cgroups::CgroupPath::new(info["cgroup"].as_str().unwrap()).unwrap();
    // A control file of the container's cgroup: `v1` in `controller`'s hierarchy on
    // v1, `v2` in the one hierarchy on v2.
    let read = |controller: &str, v1: &str, v2_file: &str| -> String {
        let dir = h
            .dir(controller, &cg)
            .unwrap_or_else(|| panic!("no {controller} cgroup for {cg}"));
        let f = dir.join(if v2 { v2_file } else { v1 });
        std::fs::read_to_string(&f)
            .unwrap_or_else(|e| panic!("{}: {e}", f.display()))
            .trim()
            .to_string()
    };
    let check = |shares: u64, quota: &str, cpus: &str, memory: u64, pages: u64, pids: &str| {
        if v2 {
            let weight = 1 + ((shares - 2) * 9999) / (262_144 - 2);
            assert_eq!(read("cpu", "", "cpu.weight"), weight.to_string());
            assert_eq!(read("cpu", "", "cpu.max"), format!("{quota} 100000"));
            assert_eq!(read("pids", "", "pids.max"), pids);
        } else {
            assert_eq!(read("cpu", "cpu.shares", ""), shares.to_string());
            assert_eq!(read("cpu", "cpu.cfs_quota_us", ""), quota);
            assert_eq!(read("cpu", "cpu.cfs_period_us", ""), "100000");
        }
        assert_eq!(read("cpuset", "cpuset.cpus", "cpuset.cpus"), cpus);
        assert_eq!(read("cpuset", "cpuset.mems", "cpuset.mems"), "0");
        assert_eq!(
            read("memory", "memory.limit_in_bytes", "memory.max"),
            memory.to_string()
        );
        for s in &sizes {
            let v1 = format!("hugetlb.{s}.limit_in_bytes");
            let v2_file = format!("hugetlb.{s}.max");
            assert_eq!(
                read("hugetlb", &v1, &v2_file),
                (pages * page_bytes(s)).to_string(),
                "{s}"
            );
        }
    };
    check(512, "50000", "0", 64 << 20, 0, "40");

    // Every CPU the pod-level cgroup may use (two or more here, so the set grows).
    let pod_dir = h.dir("cpuset", &cg.parent().unwrap()).unwrap();
    let all_cpus = std::fs::read_to_string(pod_dir.join(if v2 {
        "cpuset.cpus.effective"
    } else {
        "cpuset.effective_cpus"
    }))
    .unwrap()
    .trim()
    .to_string();
    let update = LinuxContainerResources {
        cpu_shares: 1024,
        cpu_period: 100_000,
        cpu_quota: 150_000,
        cpuset_cpus: all_cpus.clone(),
        cpuset_mems: "0".into(),
        memory_limit_in_bytes: 96 << 20,
        hugepage_limits: huge(2),
        unified: unified(&[("pids.max", "50"), ("memory.high", "83886080")]),
        ..Default::default()
    };
    e.c.update_container_resources(UpdateContainerResourcesRequest {
        container_id: id.clone(),
        linux: Some(update.clone()),
        ..Default::default()
    })
    .await
    .unwrap();
    check(1024, "150000", &all_cpus, 96 << 20, 2, "50");
    if v2 {
        assert_eq!(read("memory", "", "memory.high"), "83886080");
    }
    let (s, _) = e.status(&id).await;
    let got = s.resources.unwrap().linux.unwrap();
    assert_eq!(
        (got.cpu_shares, got.cpu_quota, got.memory_limit_in_bytes),
        (1024, 150_000, 96 << 20)
    );
    assert_eq!(got.cpuset_cpus, all_cpus);

    if !v2 {
        let err =
            e.c.update_container_resources(UpdateContainerResourcesRequest {
                container_id: id.clone(),
                linux: Some(LinuxContainerResources {
                    memory_limit_in_bytes: 32 << 20,
                    unified: [("memory.high".to_string(), "1".to_string())].into(),
                    ..Default::default()
                }),
                ..Default::default()
            })
            .await
            .unwrap_err();
        assert_eq!(err.code(), Code::InvalidArgument, "{err:?}");
        assert!(err.message().contains("needs cgroup v2"), "{err:?}");
        check(1024, "150000", &all_cpus, 96 << 20, 2, "");
    }
    let (s, _) = e.status(&id).await;
    assert_eq!(s.state, ContainerState::ContainerRunning as i32, "{s:?}");
    e.remove(&id).await;
}

/// Bytes in a hugepage of `size` as the kubelet names it (`2MB`, `1GB`, `64KB`).
fn page_bytes(size: &str) -> u64 {
    let (n, unit) = size.split_at(size.len() - 2);
    let n: u64 = n.parse().unwrap();
    n << match unit {
        "KB" => 10,
        "MB" => 20,
        "GB" => 30,
        _ => panic!("page size {size}"),
    }
}

/// The kubelet's pod-level pids limit (`pids.max` of the pod's cgroup_parent) holds
/// for the containers: a shell that starts 40 sleepers gets only as many processes as
/// the limit leaves.
#[tokio::test]
async fn pids_limit_of_the_pod_cgroup() {
    use cgroups::CgroupManager;
    if !root() {
        return;
    }
    let mut e = setup().await;
    let parent = "kubepods/podpids";
    let h = e.d.cgroups();
    let parent_path = cgroups::CgroupPath::new(&format!("{}/{parent}", e.d.cgroup_root)).unwrap();
    h.create(&parent_path).unwrap();
    h.apply(
        &parent_path,
        &cgroups::Resources {
            pids_limit: Some(10),
            ..Default::default()
        },
    )
    .unwrap();
    let pod = e
        .pod_with("pids", |c| {
            c.linux.as_mut().unwrap().cgroup_parent = parent.into();
        })
        .await;
    let c = e
        .create(
            &pod,
            ctr(
                "forker",
                &[
                    "sh",
                    "-c",
                    "i=0; while [ $i -lt 40 ]; do sleep 30 & i=$((i+1)); echo $i; done",
                ],
            ),
        )
        .await;
    e.start(&c).await;
    let s = e.wait_exited(&c).await;
    let lines = log_lines(Path::new(&s.log_path));
    // The shell counts every sleeper it started (`echo` needs no fork) until a fork
    // fails, which ends it with an error.
    let started = lines
        .iter()
        .filter(|l| l.1 == "stdout")
        .filter_map(|l| l.3.trim().parse::<usize>().ok())
        .max()
        .unwrap_or(0);
    assert!(
        (1..10).contains(&started),
        "{started} sleepers under pids.max 10: {lines:?}"
    );
    assert_ne!(s.exit_code, 0, "{s:?}");
    assert!(
        lines
            .iter()
            .any(|l| l.1 == "stderr" && l.3.contains("fork")),
        "{lines:?}"
    );
    e.remove(&c).await;
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

/// Containers of a pod share its /dev/shm (as they share its IPC namespace); the
/// tmpfs is gone after StopPodSandbox.
#[tokio::test]
async fn pod_shares_dev_shm() {
    if !root() {
        return;
    }
    let mut e = setup().await;
    let pod = e.pod("shm").await;
    let a = e
        .create(
            &pod,
            ctr(
                "writer",
                &[
                    "sh",
                    "-c",
                    "echo shared > /dev/shm/note; grep shm /proc/self/mountinfo >&2",
                ],
            ),
        )
        .await;
    e.start(&a).await;
    let sa = e.wait_exited(&a).await;
    assert_eq!(sa.exit_code, 0);
    eprintln!("{:?}", log_lines(Path::new(&sa.log_path)));
    let b = e
        .create(&pod, ctr("reader", &["cat", "/dev/shm/note"]))
        .await;
    e.start(&b).await;
    let s = e.wait_exited(&b).await;
    let lines = log_lines(Path::new(&s.log_path));
    assert_eq!(s.exit_code, 0, "{lines:?} {}", e.d.log_text());
    assert!(lines.iter().any(|l| l.3 == "shared"), "{lines:?}");
    e.stop_pod(&pod.0).await;
    assert!(e.d.mounts().is_empty(), "{:?}", e.d.mounts());
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

/// Mount propagation: a mount made on the host under a HostToContainer (rslave) mount
/// after the container started shows inside it; under a private one it does not; and
/// a Bidirectional (rshared) mount of a privileged container shows a mount made
/// inside on the host.
#[tokio::test]
async fn mount_propagation() {
    if !root() {
        return;
    }
    let mut e = setup().await;
    let pod = e.pod("prop").await;
    let host = TempDir::new("prop");
    let src = host.path().join("src");
    std::fs::create_dir_all(src.join("late")).unwrap();
    let sh = |args: &[&str]| {
        let st = std::process::Command::new(args[0])
            .args(&args[1..])
            .status()
            .unwrap();
        assert!(st.success(), "{args:?}");
    };
    // A shared mount point, as the kubelet's pod volumes dir is on a systemd host.
    let src_s = src.display().to_string();
    let mut guard = HostMounts(vec![]);
    sh(&["mount", "--bind", &src_s, &src_s]);
    guard.0.push(src.clone());
    sh(&["mount", "--make-shared", &src_s]);

    let mut cfg = ctr("c", &["sleep", "1000"]);
    for (dest, prop) in [
        ("/slave", MountPropagation::PropagationHostToContainer),
        ("/private", MountPropagation::PropagationPrivate),
    ] {
        cfg.mounts.push(Mount {
            container_path: dest.into(),
            host_path: src_s.clone(),
            propagation: prop as i32,
            ..Default::default()
        });
    }
    let id = e.create(&pod, cfg).await;
    e.start(&id).await;

    let late = src.join("late");
    sh(&[
        "mount",
        "-t",
        "tmpfs",
        "-o",
        "size=1m",
        "late",
        &late.display().to_string(),
    ]);
    guard.0.push(late.clone());
    std::fs::write(late.join("marker"), "propagated").unwrap();
    let out = |r: ExecSyncResponse| String::from_utf8_lossy(&r.stdout).trim().to_string();
    let r = e
        .exec(&id, &["cat", "/slave/late/marker"], 10)
        .await
        .unwrap();
    assert_eq!(
        out(r),
        "propagated",
        "HostToContainer sees later host mounts"
    );
    let r = e.exec(&id, &["ls", "/private/late"], 10).await.unwrap();
    assert_eq!(out(r), "", "a private mount does not");
    e.remove(&id).await;

    // Bidirectional: a privileged container's mount reaches the host.
    let mut cfg = ctr("b", &["sh", "-c", "mkdir -p /shared/inner && busybox mount -t tmpfs inner /shared/inner && echo x > /shared/inner/f && sleep 1000"]);
    cfg.mounts.push(Mount {
        container_path: "/shared".into(),
        host_path: src_s.clone(),
        propagation: MountPropagation::PropagationBidirectional as i32,
        ..Default::default()
    });
    sc(&mut cfg).privileged = true;
    let id = e.create(&pod, cfg).await;
    e.start(&id).await;
    let inner = src.join("inner");
    let deadline = Instant::now() + Duration::from_secs(10);
    while !inner.join("f").exists() {
        assert!(
            Instant::now() < deadline,
            "the container's mount did not reach the host"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    guard.0.push(inner);
    e.remove(&id).await;
}

/// Recursive read-only mounts (the kubelet's `recursiveReadOnly: Enabled`), as the
/// conformance suite checks them: Status says the handler makes them; a mount of a
/// directory with a tmpfs inside is read-only in the tmpfs too, while a plain read-only
/// mount leaves the tmpfs writable; one that is not read-only, or not private, is
/// refused and leaves nothing.
#[tokio::test]
async fn recursive_read_only_mounts() {
    if !root() {
        return;
    }
    let mut e = setup().await;
    assert!(e.handler_features("").await.recursive_read_only_mounts);

    let pod = e.pod("rro").await;
    let host = TempDir::new("rro");
    let tmpfs = host.path().join("tmpfs");
    std::fs::create_dir_all(&tmpfs).unwrap();
    let st = std::process::Command::new("mount")
        .args(["-t", "tmpfs", "-o", "size=1m", "rro"])
        .arg(&tmpfs)
        .status()
        .unwrap();
    assert!(st.success());
    let _guard = HostMounts(vec![tmpfs.clone()]);
    let mount = |recursive: bool, readonly: bool, prop: MountPropagation| Mount {
        container_path: "/mnt".into(),
        host_path: host.path().display().to_string(),
        readonly,
        recursive_read_only: recursive,
        propagation: prop as i32,
        ..Default::default()
    };
    let touch = |e: &mut Env, id: String, file: &'static str| {
        let c = e.c.clone();
        async move {
            let mut c = c;
            c.exec_sync(ExecSyncRequest {
                container_id: id,
                cmd: vec!["sh".into(), "-c".into(), format!("touch {file} 2>&1")],
                timeout: 10,
            })
            .await
            .unwrap()
            .into_inner()
        }
    };

    let mut cfg = ctr("rro", &["sleep", "1000"]);
    cfg.mounts = vec![mount(true, true, MountPropagation::PropagationPrivate)];
    let id = e.create(&pod, cfg).await;
    e.start(&id).await;
    let r = touch(&mut e, id.clone(), "/mnt/tmpfs/foo").await;
    assert_ne!(r.exit_code, 0, "{r:?}");
    assert!(
        String::from_utf8_lossy(&r.stdout).contains("Read-only file system"),
        "{r:?}"
    );
    let r = touch(&mut e, id.clone(), "/mnt/top").await;
    assert_ne!(r.exit_code, 0, "{r:?}");
    e.remove(&id).await;

    let mut cfg = ctr("ro", &["sleep", "1000"]);
    cfg.mounts = vec![mount(false, true, MountPropagation::PropagationPrivate)];
    let id = e.create(&pod, cfg).await;
    e.start(&id).await;
    let r = touch(&mut e, id.clone(), "/mnt/tmpfs/file").await;
    assert_eq!(
        r.exit_code, 0,
        "a plain read-only mount is not recursive: {r:?}"
    );
    let r = touch(&mut e, id.clone(), "/mnt/top").await;
    assert_ne!(r.exit_code, 0, "{r:?}");
    e.remove(&id).await;

    let before = e.d.leftovers();
    for (what, m) in [
        (
            "recursive read-only, not read-only",
            mount(true, false, MountPropagation::PropagationPrivate),
        ),
        (
            "recursive read-only, host to container",
            mount(true, true, MountPropagation::PropagationHostToContainer),
        ),
        (
            "recursive read-only, bidirectional",
            mount(true, true, MountPropagation::PropagationBidirectional),
        ),
    ] {
        let mut cfg = ctr("bad", &["sleep", "1000"]);
        cfg.mounts = vec![m];
        assert_code(e.try_create(&pod, cfg).await, Code::InvalidArgument, what);
    }
    assert_eq!(snapshots(&e.d), 0);
    assert_eq!(e.d.leftovers(), before);
}

/// Imports `docker.io/library/vol:e2e` (see [`write_volume_layout`]).
fn import_volume_image(d: &Crustd) {
    let t = TempDir::new("layout");
    write_volume_layout(t.path());
    let store = image::ImageStore::open(d.root.path().join("images"), None).unwrap();
    store.import(t.path()).expect("importing vol:e2e");
}

/// Writes the OCI layout of `docker.io/library/vol:e2e` (ref name `e2e`) into `dir`,
/// three layers: the bottom one with files, a directory the middle one deletes
/// (whiteout) and one it makes opaque, and a busybox to run from the volume; the top
/// one overrides a file.
fn write_volume_layout(dir: &Path) {
    use image::layout::{write_oci_layout, Compression, LayerBuilder, LayoutEntry, LayoutImage};
    let bb = which("busybox").expect("busybox");
    let low = LayerBuilder::new()
        .dir("data", 0o755)
        .file("data/a", b"a1", 0o644)
        .dir("etc", 0o755)
        .file("etc/conf", b"base", 0o644)
        .dir("gone", 0o755)
        .file("gone/x", b"x", 0o644)
        .dir("opq", 0o755)
        .file("opq/old", b"old", 0o644)
        .dir("tools", 0o755)
        .file_from("tools/busybox", &bb, 0o755)
        .finish();
    let mid = LayerBuilder::new()
        .dir("data", 0o755)
        .file("data/b", b"b2", 0o644)
        .whiteout("gone")
        .dir("opq", 0o755)
        .opaque("opq")
        .file("opq/new", b"new", 0o644)
        .finish();
    let top = LayerBuilder::new()
        .dir("etc", 0o755)
        .file("etc/conf", b"top", 0o644)
        .finish();
    let img = LayoutImage::new(vec![
        (low, Compression::Gzip),
        (mid, Compression::Gzip),
        (top, Compression::None),
    ]);
    write_oci_layout(
        dir,
        &[LayoutEntry {
            ref_name: Some("e2e".into()),
            image_name: Some("docker.io/library/vol:e2e".into()),
            platforms: vec![img],
        }],
    );
}

fn image_mount(path: &str, sub: &str, readonly: bool) -> Mount {
    Mount {
        container_path: path.into(),
        readonly,
        image: Some(ImageSpec {
            image: "vol:e2e".into(),
            ..Default::default()
        }),
        image_sub_path: sub.into(),
        ..Default::default()
    }
}

/// An image volume's mount in ContainerStatus names its image by the id PullImage
/// answered (what the kubelet passes as the mount's image), not by a repo digest: the
/// CRI conformance suite's image volume spec compares the two, and containerd fills
/// it with the same config digest. The image here is pulled from a registry, so it has
/// a repo digest that differs from the id; the name holds after the image is removed.
#[tokio::test]
async fn image_volume_status_names_the_image_by_the_id_pull_gave() {
    if !require_root(&[
        "ip",
        "nsenter",
        "nft",
        "busybox",
        "skopeo",
        "docker-registry",
    ]) {
        return;
    }
    let mut e = setup().await;
    let reg = Registry::start_with(None, Some(&e.d.node));
    let t = TempDir::new("layout");
    write_volume_layout(t.path());
    reg.push(t.path(), "e2e", "vol/pulled:v1");
    let name = reg.name("vol/pulled:v1");
    let spec = |image: &str| ImageSpec {
        image: image.into(),
        ..Default::default()
    };
    let mut images = e.d.images().await;
    let pulled = images
        .pull_image(PullImageRequest {
            image: Some(spec(&name)),
            ..Default::default()
        })
        .await
        .expect("PullImage")
        .into_inner()
        .image_ref;
    let img = images
        .image_status(ImageStatusRequest {
            image: Some(spec(&name)),
            verbose: false,
        })
        .await
        .unwrap()
        .into_inner()
        .image
        .expect("the pulled image is there");
    assert_eq!(img.id, pulled);
    assert!(
        img.repo_digests.iter().all(|d| *d != pulled) && !img.repo_digests.is_empty(),
        "a pulled image has a repo digest other than its id: {:?}",
        img.repo_digests
    );

    let pod = e.pod("ivref").await;
    let mut cfg = ctr("c", &["sleep", "1000"]);
    cfg.mounts = vec![Mount {
        container_path: "/vol".into(),
        readonly: true,
        image: Some(ImageSpec {
            image: pulled.clone(),
            user_specified_image: name.clone(),
            ..Default::default()
        }),
        ..Default::default()
    }];
    let id = e.create(&pod, cfg).await;
    let refs = |st: &ContainerStatus| -> Vec<String> {
        st.mounts
            .iter()
            .filter_map(|m| m.image.as_ref().map(|i| i.image_ref.clone()))
            .collect()
    };
    let (st, _) = e.status(&id).await;
    assert_eq!(refs(&st), vec![pulled.clone()], "{:?}", st.mounts);

    images
        .remove_image(RemoveImageRequest {
            image: Some(spec(&name)),
        })
        .await
        .unwrap();
    let (st, _) = e.status(&id).await;
    assert_eq!(
        refs(&st),
        vec![pulled],
        "the image removed: {:?}",
        st.mounts
    );
    e.remove(&id).await;
}

/// Image volumes (a Mount with `image`): the image's file system as its layers make it
/// (an override, a whiteout, an opaque directory), read-only but executable, whole or
/// one directory of it (`image_sub_path`, from several layers or one); kept while the
/// container lives even when the image is removed; gone with the container. Refused
/// up front, leaving nothing: a writable one, a sub path that is no directory of the
/// image or climbs out, an unknown image.
#[tokio::test]
async fn image_volumes_mount_an_image_read_only() {
    if !root() {
        return;
    }
    let mut e = setup().await;
    import_volume_image(&e.d);
    let pod = e.pod("imgvol").await;
    let before = snapshots(&e.d);
    let mut cfg = ctr("c", &["sleep", "1000"]);
    cfg.mounts = vec![
        image_mount("/vol", "", true),
        image_mount("/sub", "data", true),
        image_mount("/opq", "./opq", true),
    ];
    let id = e.create(&pod, cfg).await;
    e.start(&id).await;
    let out = |r: Result<ExecSyncResponse, tonic::Status>| {
        let r = r.expect("ExecSync");
        (
            r.exit_code,
            String::from_utf8_lossy(&r.stdout).trim().to_string(),
        )
    };
    let check = [
        ("cat /vol/etc/conf", "top"),
        ("ls /vol", "data etc opq tools"),
        ("cat /vol/data/a /vol/data/b", "a1b2"),
        ("ls /vol/opq", "new"),
        ("cat /sub/a /sub/b", "a1b2"),
        ("ls /opq", "new"),
        (
            "/vol/tools/busybox echo ran from the volume",
            "ran from the volume",
        ),
    ];
    for (cmd, want) in check {
        let (code, got) = out(e
            .exec(&id, &["sh", "-c", &format!("{cmd} | tr '\\n' ' '")], 10)
            .await);
        assert_eq!((code, got.trim()), (0, want), "{cmd}");
    }
    for dir in ["/vol", "/sub", "/opq"] {
        let (code, _) = out(e
            .exec(&id, &["touch", &format!("{dir}/new-file")], 10)
            .await);
        assert_ne!(code, 0, "{dir} is writable");
    }
    assert_eq!(
        snapshots(&e.d),
        before + 4,
        "the root and three image volumes"
    );
    // Each image volume's mount in the status names the image it shows by its id
    // (see image_volume_status_names_the_image_by_the_id_pull_gave).
    let mut images = e.d.images().await;
    let img = images
        .image_status(ImageStatusRequest {
            image: Some(ImageSpec {
                image: "vol:e2e".into(),
                ..Default::default()
            }),
            verbose: false,
        })
        .await
        .unwrap()
        .into_inner()
        .image
        .expect("vol:e2e is there");
    let want = img.id.clone();
    let refs = |st: &ContainerStatus| -> Vec<String> {
        st.mounts
            .iter()
            .map(|m| {
                m.image
                    .as_ref()
                    .map(|i| i.image_ref.clone())
                    .unwrap_or_default()
            })
            .collect()
    };
    let (st, _) = e.status(&id).await;
    assert_eq!(refs(&st), vec![want.clone(); 3], "{:?}", st.mounts);

    // The image goes; the volumes stay whole while the container lives.
    images
        .remove_image(RemoveImageRequest {
            image: Some(ImageSpec {
                image: "vol:e2e".into(),
                ..Default::default()
            }),
        })
        .await
        .unwrap();
    let (_, got) = out(e.exec(&id, &["cat", "/vol/etc/conf", "/sub/b"], 10).await);
    assert_eq!(got, "topb2");
    let (st, _) = e.status(&id).await;
    assert_eq!(
        refs(&st),
        vec![want; 3],
        "the image removed: {:?}",
        st.mounts
    );
    e.remove(&id).await;
    assert_eq!(snapshots(&e.d), before);

    import_volume_image(&e.d);
    for (m, code, what) in [
        (
            image_mount("/v", "", false),
            Code::InvalidArgument,
            "writable",
        ),
        (
            image_mount("/v", "nope", true),
            Code::InvalidArgument,
            "missing sub path",
        ),
        (
            image_mount("/v", "etc/conf", true),
            Code::InvalidArgument,
            "a file as sub path",
        ),
        (
            image_mount("/v", "gone", true),
            Code::InvalidArgument,
            "a deleted sub path",
        ),
        (
            image_mount("/v", "../etc", true),
            Code::InvalidArgument,
            "climbing out",
        ),
        (
            Mount {
                image: Some(ImageSpec {
                    image: "no/such:image".into(),
                    ..Default::default()
                }),
                ..image_mount("/v", "", true)
            },
            Code::NotFound,
            "unknown image",
        ),
    ] {
        let mut cfg = ctr("bad", &["true"]);
        cfg.mounts = vec![image_mount("/ok", "", true), m];
        assert_code(e.try_create(&pod, cfg).await, code, what);
        assert_eq!(snapshots(&e.d), before, "{what} left a snapshot");
    }
}

/// The hugepage sizes the kernel has, named as the kubelet names them (`2MB`, `1GB`).
fn hugepage_sizes() -> Vec<String> {
    let mut out: Vec<String> = std::fs::read_dir("/sys/kernel/mm/hugepages")
        .map(|r| {
            r.flatten()
                .filter_map(|e| {
                    let name = e.file_name().to_string_lossy().into_owned();
                    let kb: u64 = name
                        .strip_prefix("hugepages-")?
                        .strip_suffix("kB")?
                        .parse()
                        .ok()?;
                    Some(if kb % (1 << 20) == 0 {
                        format!("{}GB", kb >> 20)
                    } else if kb % 1024 == 0 {
                        format!("{}MB", kb >> 10)
                    } else {
                        format!("{kb}KB")
                    })
                })
                .collect()
        })
        .unwrap_or_default();
    out.sort();
    out
}

/// What a kubelet v1.28 sends for a Guaranteed container on a cgroup v1 node: CPU
/// shares, the CFS period with a quota, a memory limit with memory+swap equal to it
/// (no swap), the Guaranteed class's oom_score_adj (which these machines cannot lower
/// to), and a hugepage limit of 0 for every page size the kernel has.
fn kubelet_resources() -> LinuxContainerResources {
    LinuxContainerResources {
        cpu_period: 100_000,
        cpu_quota: 50_000,
        cpu_shares: 512,
        memory_limit_in_bytes: 64 << 20,
        memory_swap_limit_in_bytes: 64 << 20,
        oom_score_adj: -997,
        hugepage_limits: hugepage_sizes()
            .into_iter()
            .map(|page_size| HugepageLimit {
                page_size,
                limit: 0,
            })
            .collect(),
        ..Default::default()
    }
}

/// crustd's verbose Status `info.cgroups.hugetlb`.
async fn hugetlb_status(e: &mut Env) -> serde_json::Value {
    let st =
        e.c.status(StatusRequest { verbose: true })
            .await
            .unwrap()
            .into_inner();
    let info: serde_json::Value = serde_json::from_str(&st.info["cgroups"]).unwrap();
    info["hugetlb"].clone()
}

/// The hugetlb limit file for `size` in the container's cgroup, if the cgroup has one.
fn hugetlb_file(e: &Env, info: &serde_json::Value, size: &str) -> Option<PathBuf> {
    use cgroups::CgroupManager;
    let h = e.d.cgroups();
    let cg = cgroups::CgroupPath::new(info["cgroup"].as_str().unwrap()).unwrap();
    [
        h.dir("hugetlb", &cg)
            .map(|d| d.join(format!("hugetlb.{size}.limit_in_bytes"))),
        h.dir("", &cg)
            .map(|d| d.join(format!("hugetlb.{size}.max"))),
    ]
    .into_iter()
    .flatten()
    .find(|f| f.exists())
}

/// Whether pods under this daemon get a hugetlb controller (these machines: no, it is
/// only on the cgroup2 mount and not enabled below its root).
fn hugetlb_missing(e: &Env) -> Option<String> {
    use cgroups::CgroupManager;
    let root = cgroups::CgroupPath::new(&e.d.cgroup_root).unwrap();
    e.d.cgroups().hugetlb_unavailable(&root)
}

/// A container with what a real kubelet sends (hugepage limits for every page size
/// included) runs on this node, in crust's executor and in runc: where the node has
/// no hugetlb controller the limits are left out, which crustd says once at start
/// (not per container) and in verbose Status; where it has one they are in the cgroup.
#[tokio::test]
async fn kubelet_resources_with_hugepage_limits_run() {
    if !require_root(&["ip", "nsenter", "nft", "busybox", "runc"]) {
        return;
    }
    let runc = which("runc").unwrap();
    let d = Crustd::start_with_config(
        Default::default(),
        &format!("[oci_runtimes]\nrunc = {:?}\n", runc.display().to_string()),
    );
    let mut e = Env::with(d).await;
    let missing = hugetlb_missing(&e);
    eprintln!(
        "hugetlb on this node: {missing:?}; page sizes {:?}",
        hugepage_sizes()
    );
    let hs = hugetlb_status(&mut e).await;
    assert_eq!(hs["controller"], missing.is_none(), "{hs}");
    assert_eq!(hs["reason"].as_str().map(str::to_string), missing, "{hs}");
    assert_eq!(hs["requireHugetlb"], false, "{hs}");
    let expected = if missing.is_some() {
        "not applied"
    } else {
        "applied"
    };
    assert_eq!(hs["hugepageLimits"], expected, "{hs}");

    let mut ids = vec![];
    for handler in ["", "runc"] {
        let name = format!("kres{handler}");
        let pod = e.pod_on(&name, handler, |_| {}).await;
        for n in 0..2 {
            let mut cfg = ctr(&format!("c{n}"), &["sleep", "1000"]);
            *res(&mut cfg) = kubelet_resources();
            let id = e.create(&pod, cfg).await;
            e.start(&id).await;
            let (s, info) = e.status(&id).await;
            assert_eq!(s.state, ContainerState::ContainerRunning as i32, "{s:?}");
            // The limits that apply are in the cgroup.
            use cgroups::CgroupManager;
            let cg = cgroups::CgroupPath::new(info["cgroup"].as_str().unwrap()).unwrap();
            let h = e.d.cgroups();
            let mem = h.dir("memory", &cg).unwrap();
            let limit = ["memory.max", "memory.limit_in_bytes"]
                .iter()
                .map(|f| mem.join(f))
                .find(|f| f.exists())
                .unwrap();
            assert_eq!(
                std::fs::read_to_string(&limit).unwrap().trim(),
                (64u64 << 20).to_string(),
                "{handler}"
            );
            for size in hugepage_sizes() {
                let file = hugetlb_file(&e, &info, &size);
                match &missing {
                    None => assert_eq!(
                        std::fs::read_to_string(file.unwrap()).unwrap().trim(),
                        "0",
                        "{size}"
                    ),
                    Some(_) => assert_eq!(file, None, "{size}"),
                }
            }
            ids.push(id);
        }
    }
    // An update carrying them too (the kubelet resizing a pod) succeeds.
    e.c.update_container_resources(UpdateContainerResourcesRequest {
        container_id: ids[0].clone(),
        linux: Some(LinuxContainerResources {
            memory_limit_in_bytes: 96 << 20,
            memory_swap_limit_in_bytes: 96 << 20,
            ..kubelet_resources()
        }),
        ..Default::default()
    })
    .await
    .unwrap();
    // Said once, at start: not once per container.
    let log = e.d.log_text();
    let said = log.matches("no usable hugetlb cgroup controller").count();
    assert_eq!(said, usize::from(missing.is_some()), "{log}");
    for id in ids {
        e.remove(&id).await;
    }
    assert!(container_dirs(&e.d).is_empty());
}

/// `cgroup.require_hugetlb = true`: where the node has no hugetlb controller, a
/// container with hugepage limits (create or update) is refused with an error naming
/// the key, and nothing is left; one without them runs. Where the node has the
/// controller, the limits are applied as without the key.
#[tokio::test]
async fn require_hugetlb_refuses_hugepage_limits_it_cannot_apply() {
    if !root() {
        return;
    }
    let d = Crustd::start_with_config(Default::default(), "[cgroup]\nrequire_hugetlb = true\n");
    let mut e = Env::with(d).await;
    let missing = hugetlb_missing(&e);
    let hs = hugetlb_status(&mut e).await;
    assert_eq!(hs["requireHugetlb"], true, "{hs}");
    let pod = e.pod("reqhuge").await;
    let mut cfg = ctr("hp", &["sleep", "1000"]);
    *res(&mut cfg) = kubelet_resources();
    if hugepage_sizes().is_empty() {
        eprintln!("no hugepage sizes in this kernel: nothing to refuse");
        return;
    }
    let Some(why) = missing else {
        // The controller is there: applied, as without the key.
        assert_eq!(hs["hugepageLimits"], "applied", "{hs}");
        let id = e.create(&pod, cfg).await;
        let (_, info) = e.status(&id).await;
        let file = hugetlb_file(&e, &info, &hugepage_sizes()[0]).unwrap();
        assert_eq!(std::fs::read_to_string(file).unwrap().trim(), "0");
        e.remove(&id).await;
        return;
    };
    assert_eq!(
        hs["hugepageLimits"], "refused (cgroup.require_hugetlb)",
        "{hs}"
    );
    let log = e.d.log_text();
    assert!(
        log.contains(
            "cgroup.require_hugetlb is set: containers with hugepage limits will be refused"
        ),
        "{log}"
    );
    let err = e.try_create(&pod, cfg).await.unwrap_err();
    assert_eq!(err.code(), Code::FailedPrecondition, "{err:?}");
    let msg = err.message();
    assert!(msg.contains("cgroup.require_hugetlb is set"), "{msg}");
    assert!(msg.contains("need the hugetlb cgroup controller"), "{msg}");
    assert!(msg.contains(&why), "{msg}");
    assert!(container_dirs(&e.d).is_empty(), "nothing left");

    // Without hugepage limits: runs; an update adding them is refused the same way.
    let mut cfg = ctr("plain", &["sleep", "1000"]);
    *res(&mut cfg) = LinuxContainerResources {
        hugepage_limits: vec![],
        ..kubelet_resources()
    };
    let id = e.create(&pod, cfg).await;
    e.start(&id).await;
    let err =
        e.c.update_container_resources(UpdateContainerResourcesRequest {
            container_id: id.clone(),
            linux: Some(kubelet_resources()),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::FailedPrecondition, "{err:?}");
    assert!(err.message().contains("cgroup.require_hugetlb"), "{err:?}");
    let (s, _) = e.status(&id).await;
    assert_eq!(s.state, ContainerState::ContainerRunning as i32);
    e.remove(&id).await;
}

/// The pod's metrics by ListPodSandboxMetrics, `None` when it has none.
/// Pings the pod network's gateway `count` times from pod `pod`'s network namespace:
/// traffic both ways on its eth0.
fn ping_gateway(e: &Env, pod: &str, count: u32) {
    let gateway = format!("10.{}.0.1", e.d.opts.subnet);
    let pin = e.d.pin(pod, "net");
    let out = crust_e2e::run(std::process::Command::new("nsenter").args([
        &format!("--net={}", pin.display()),
        "ping",
        "-c",
        &count.to_string(),
        "-i",
        "0.2",
        "-W",
        "2",
        &gateway,
    ]));
    assert!(out.status.success(), "ping {gateway}: {out:?}");
}

async fn pod_metrics(e: &mut Env, pod: &str) -> Option<PodSandboxMetrics> {
    e.c.list_pod_sandbox_metrics(ListPodSandboxMetricsRequest {})
        .await
        .expect("ListPodSandboxMetrics")
        .into_inner()
        .pod_metrics
        .into_iter()
        .find(|p| p.pod_sandbox_id == pod)
}

/// The value of the metric `name` whose label values end with `extra`.
fn metric(ms: &[Metric], name: &str, extra: &[&str]) -> Option<u64> {
    let extra: Vec<String> = extra.iter().map(|s| s.to_string()).collect();
    ms.iter()
        .find(|m| m.name == name && m.label_values.ends_with(&extra))
        .map(|m| m.value.unwrap().value)
}

/// Polls the pod's metrics until `f` finds what it wants in them (or 120 s pass: a
/// VM emulating its CPUs is slow).
async fn metrics_until<T>(
    e: &mut Env,
    pod: &str,
    what: &str,
    f: impl Fn(&PodSandboxMetrics) -> Option<T>,
) -> T {
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let m = pod_metrics(e, pod).await;
        if let Some(v) = m.as_ref().and_then(&f) {
            return v;
        }
        assert!(Instant::now() < deadline, "{what}: never so in {m:?}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// ListMetricDescriptors and ListPodSandboxMetrics as the kubelet reads them with
/// PodAndContainerStatsFromCRI: a container with critest's resources that fills 48 MiB
/// of the pod's /dev/shm and then spins shows CPU seconds that rise from one call to
/// the next, throttling, and a working set above 48 MiB; the pod's eth0 counts a ping
/// to the bridge's gateway both ways; every metric has a descriptor and as many label
/// values as it has keys, the labels say pod, namespace, container, id and image;
/// critest's metrics spec would find what it wants; an exited container and a stopped
/// pod have none.
#[tokio::test]
async fn metrics_of_a_busy_container_and_its_pod() {
    if !root() {
        return;
    }
    let mut e = setup().await;
    let pod = e.pod("metered").await;
    let mut cfg = ctr(
        "burner",
        &[
            "sh",
            "-c",
            "head -c 50331648 /dev/zero > /dev/shm/fill && while :; do :; done",
        ],
    );
    // critest's resources for its metrics spec: a fifth of a CPU, 64 MiB.
    *res(&mut cfg) = LinuxContainerResources {
        cpu_period: 100_000,
        cpu_quota: 20_000,
        cpu_shares: 1024,
        memory_limit_in_bytes: 64 << 20,
        memory_swap_limit_in_bytes: 64 << 20,
        ..Default::default()
    };
    let id = e.create(&pod, cfg).await;
    e.start(&id).await;
    let done = e.create(&pod, ctr("done", &["true"])).await;
    e.start(&done).await;
    e.wait_exited(&done).await;

    let descs: std::collections::HashMap<String, MetricDescriptor> =
        e.c.list_metric_descriptors(ListMetricDescriptorsRequest {})
            .await
            .expect("ListMetricDescriptors")
            .into_inner()
            .descriptors
            .into_iter()
            .map(|d| (d.name.clone(), d))
            .collect();
    for name in [
        "container_cpu_usage_seconds_total",
        "container_memory_working_set_bytes",
        "container_network_receive_bytes_total",
        "container_fs_usage_bytes",
    ] {
        assert!(descs.contains_key(name), "no descriptor for {name}");
    }

    // CPU time is in whole seconds: wait for the first, then for one more.
    let cpu = |p: &PodSandboxMetrics| {
        let c = p.container_metrics.iter().find(|c| c.container_id == id)?;
        metric(&c.metrics, "container_cpu_usage_seconds_total", &[]).filter(|&v| v > 0)
    };
    let first = metrics_until(&mut e, &pod.0, "cpu usage above 0", cpu).await;
    let second = metrics_until(&mut e, &pod.0, "cpu usage rising", |p| {
        cpu(p).filter(|&v| v > first)
    })
    .await;
    assert!(second > first);
    // At a fifth of a CPU (and in an emulated VM) the fill may still be going on.
    metrics_until(&mut e, &pod.0, "working set above 48 MiB", |p| {
        let c = p.container_metrics.iter().find(|c| c.container_id == id)?;
        metric(&c.metrics, "container_memory_working_set_bytes", &[]).filter(|&v| v > 48 << 20)
    })
    .await;

    // Traffic on eth0: pings from the pod to the bridge's gateway, and back.
    let before = pod_metrics(&mut e, &pod.0).await.unwrap();
    let net = |p: &PodSandboxMetrics, name: &str| {
        metric(&p.metrics, name, &["eth0"]).unwrap_or_else(|| panic!("no {name}: {p:?}"))
    };
    ping_gateway(&e, &pod.0, 3);
    let p = pod_metrics(&mut e, &pod.0).await.unwrap();
    for (name, least) in [
        ("container_network_transmit_bytes_total", 3 * 84),
        ("container_network_receive_bytes_total", 3 * 84),
        ("container_network_transmit_packets_total", 3),
        ("container_network_receive_packets_total", 3),
    ] {
        let (b, a) = (net(&before, name), net(&p, name));
        assert!(a >= b + least, "{name}: {b} then {a}");
    }
    assert_eq!(
        metric(
            &p.metrics,
            "container_network_receive_errors_total",
            &["eth0"]
        ),
        Some(0)
    );
    assert!(
        p.metrics.iter().all(|m| m.label_values[..5]
            == ["metered", "default", "", pod.0.as_str(), ""]
            && m.label_values[5] != "lo"),
        "{:?}",
        p.metrics
    );

    // The kubelet drops a metric without a descriptor or with a label count its
    // descriptor does not have.
    for m in p
        .metrics
        .iter()
        .chain(p.container_metrics.iter().flat_map(|c| &c.metrics))
    {
        let d = descs
            .get(&m.name)
            .unwrap_or_else(|| panic!("{} has no descriptor", m.name));
        assert_eq!(m.label_values.len(), d.label_keys.len(), "{m:?} {d:?}");
    }

    // Only the running container; its labels, memory, limits, processes, layer.
    let ids: Vec<&str> = p
        .container_metrics
        .iter()
        .map(|c| c.container_id.as_str())
        .collect();
    assert_eq!(ids, [id.as_str()], "the exited container has no metrics");
    let c = &p.container_metrics[0].metrics;
    for m in c {
        assert_eq!(
            m.label_values[..5],
            ["metered", "default", "burner", id.as_str(), "busybox:e2e"],
            "{}",
            m.name
        );
    }
    let v = |name: &str| metric(c, name, &[]).unwrap_or_else(|| panic!("no {name}: {c:?}"));
    assert!(
        v("container_memory_working_set_bytes") > 48 << 20,
        "{}",
        v("container_memory_working_set_bytes")
    );
    assert!(v("container_memory_usage_bytes") >= v("container_memory_working_set_bytes"));
    assert!(v("container_memory_max_usage_bytes") >= v("container_memory_usage_bytes"));
    assert_eq!(v("container_spec_memory_limit_bytes"), 64 << 20);
    assert_eq!(v("container_spec_memory_swap_limit_bytes"), 64 << 20);
    assert_eq!(v("container_spec_cpu_period"), 100_000);
    assert_eq!(v("container_spec_cpu_quota"), 20_000);
    assert_eq!(v("container_spec_cpu_shares"), 1024);
    // Spinning at a fifth of a CPU: throttled in most periods.
    assert!(v("container_cpu_cfs_periods_total") > 0);
    assert!(v("container_cpu_cfs_throttled_periods_total") > 0);
    assert!(v("container_processes") >= 1 && v("container_threads") >= 1);
    assert!(v("container_file_descriptors") >= 3);
    assert_eq!(v("container_oom_events_total"), 0);
    let started = v("container_start_time_seconds");
    assert!(started > 1_600_000_000 && v("container_last_seen") >= started);
    assert!(
        c.iter().any(|m| m.name == "container_fs_usage_bytes"),
        "{c:?}"
    );
    assert!(
        metric(c, "container_ulimits_soft", &["RLIMIT_NOFILE"]).is_some_and(|n| n > 0),
        "{c:?}"
    );

    // critest's metrics spec (cri-tools pkg/validate/pod.go): these names have values
    // (the rest of its list it takes as optional or not yet implemented by every
    // runtime), and so does every descriptor the runtime gave but those.
    let sent: std::collections::HashSet<&str> = p
        .metrics
        .iter()
        .chain(p.container_metrics.iter().flat_map(|c| &c.metrics))
        .map(|m| m.name.as_str())
        .collect();
    let critest_wants = [
        "container_cpu_cfs_periods_total",
        "container_cpu_cfs_throttled_periods_total",
        "container_cpu_cfs_throttled_seconds_total",
        "container_cpu_system_seconds_total",
        "container_cpu_usage_seconds_total",
        "container_cpu_user_seconds_total",
        "container_file_descriptors",
        "container_fs_inodes_free",
        "container_fs_inodes_total",
        "container_fs_limit_bytes",
        "container_fs_usage_bytes",
        "container_last_seen",
        "container_memory_cache",
        "container_memory_failcnt",
        "container_memory_failures_total",
        "container_memory_kernel_usage",
        "container_memory_mapped_file",
        "container_memory_max_usage_bytes",
        "container_memory_rss",
        "container_memory_swap",
        "container_memory_usage_bytes",
        "container_memory_working_set_bytes",
        "container_network_receive_bytes_total",
        "container_network_receive_errors_total",
        "container_network_receive_packets_dropped_total",
        "container_network_receive_packets_total",
        "container_network_transmit_bytes_total",
        "container_network_transmit_errors_total",
        "container_network_transmit_packets_dropped_total",
        "container_network_transmit_packets_total",
        "container_oom_events_total",
        "container_processes",
        "container_sockets",
        "container_spec_cpu_period",
        "container_spec_cpu_shares",
        "container_spec_memory_limit_bytes",
        "container_spec_memory_swap_limit_bytes",
        "container_start_time_seconds",
        "container_threads",
        "container_threads_max",
    ];
    let critest_optional = [
        "container_blkio_device_usage_total",
        "container_fs_reads_bytes_total",
        "container_fs_reads_total",
        "container_fs_writes_bytes_total",
        "container_fs_writes_total",
        "container_ulimits_soft",
    ];
    for name in critest_wants {
        assert!(descs.contains_key(name), "no descriptor for {name}");
        assert!(sent.contains(name), "no value for {name}");
    }
    for (name, d) in &descs {
        assert!(!d.help.is_empty() && !d.label_keys.is_empty(), "{d:?}");
        assert!(
            sent.contains(name.as_str()) || critest_optional.contains(&name.as_str()),
            "a descriptor without values: {name}"
        );
    }

    e.stop_pod(&pod.0).await;
    assert!(
        pod_metrics(&mut e, &pod.0).await.is_none(),
        "a stopped pod has no metrics"
    );
}

/// The real crictl (cri-tools, `$CRUST_KUBE_BIN` or where `hack/deps` unpacks it), or
/// `None` after saying loudly that the test is skipped (under `CI=true`, a failure).
fn crictl() -> Option<PathBuf> {
    if let Some(p) = crust_e2e::cluster::kube_bin("crictl") {
        return Some(p);
    }
    let msg = "test needs crictl (hack/deps unpacks it into target/kube-bin)";
    if crust_e2e::ci() {
        panic!("{msg}; CI must run every root test");
    }
    crust_e2e::say_skipped(msg);
    None
}

/// `crictl <args> -o json` against the daemon's socket, parsed.
fn crictl_json(crictl: &Path, d: &Crustd, args: &[&str]) -> serde_json::Value {
    let ep = format!("unix://{}", d.socket.display());
    let out = crust_e2e::run(
        std::process::Command::new(crictl)
            .args(["--runtime-endpoint", &ep, "--image-endpoint", &ep])
            .args(["--timeout", "20s"])
            .args(args)
            .args(["-o", "json"])
            // No config file: the endpoints are all it needs.
            .env("CRI_CONFIG_FILE", "/dev/null"),
    );
    assert!(
        out.status.success(),
        "crictl {args:?}: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "crictl {args:?}: {e}: {}",
            String::from_utf8_lossy(&out.stdout)
        )
    })
}

/// A metric of crictl's JSON (protojson: camelCase names, the type by name, 64-bit
/// integers as strings): its type, label values and value.
fn crictl_metric(m: &serde_json::Value) -> (String, Vec<String>, u64) {
    let labels = m["labelValues"]
        .as_array()
        .unwrap_or_else(|| panic!("no labelValues: {m}"))
        .iter()
        .map(|v| v.as_str().unwrap().to_string())
        .collect();
    let value = m["value"]["value"]
        .as_str()
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no value: {m}"));
    (m["metricType"].as_str().unwrap().to_string(), labels, value)
}

/// ListMetricDescriptors and ListPodSandboxMetrics through the real crictl
/// (`metricdescs`, `metricsp`, as JSON): the descriptors of the container's CPU seconds
/// and working set and of the pod's network have the label keys crust sends; a
/// container limited to half a CPU that fills 8 MiB of the pod's /dev/shm and spins
/// shows a counter of CPU seconds that reaches 1 and a working set gauge above 8 MiB,
/// labelled with its pod, namespace, name, id and image; the pod's eth0 counts a ping
/// to the bridge's gateway in both directions, labelled with the pod and its interface.
#[tokio::test]
async fn metrics_through_crictl() {
    if !root() {
        return;
    }
    let Some(crictl) = crictl() else {
        return;
    };
    let mut e = setup().await;
    let pod = e.pod("crictl-metered").await;
    let mut cfg = ctr(
        "spinner",
        &[
            "sh",
            "-c",
            "head -c 8388608 /dev/zero > /dev/shm/fill && while :; do :; done",
        ],
    );
    *res(&mut cfg) = LinuxContainerResources {
        cpu_period: 100_000,
        cpu_quota: 50_000,
        ..Default::default()
    };
    let id = e.create(&pod, cfg).await;
    e.start(&id).await;

    let descs = crictl_json(&crictl, &e.d, &["metricdescs"]);
    let keys = |name: &str| -> Vec<String> {
        let d = descs["descriptors"]
            .as_array()
            .unwrap_or_else(|| panic!("no descriptors: {descs}"))
            .iter()
            .find(|d| d["name"] == name)
            .unwrap_or_else(|| panic!("no descriptor {name}: {descs}"));
        assert!(!d["help"].as_str().unwrap_or_default().is_empty(), "{d}");
        serde_json::from_value(d["labelKeys"].clone()).unwrap()
    };
    let base = ["pod", "namespace", "container", "id", "image"];
    assert_eq!(keys("container_cpu_usage_seconds_total"), base);
    assert_eq!(keys("container_memory_working_set_bytes"), base);
    for name in [
        "container_network_receive_bytes_total",
        "container_network_transmit_bytes_total",
        "container_network_receive_packets_total",
        "container_network_transmit_packets_total",
    ] {
        assert_eq!(keys(name), [&base[..], &["interface"]].concat(), "{name}");
    }

    // The pod's entry of `crictl metricsp`, and in it the metric `name` of the
    // container (`Some(id)`) or of the pod itself (`None`).
    let pod_entry = || {
        let all = crictl_json(&crictl, &e.d, &["metricsp"]);
        all["podMetrics"]
            .as_array()
            .unwrap_or_else(|| panic!("no podMetrics: {all}"))
            .iter()
            .find(|p| p["podSandboxId"] == pod.0.as_str())
            .cloned()
            .unwrap_or_else(|| panic!("no metrics of pod {}: {all}", pod.0))
    };
    let find = |p: &serde_json::Value, ctr: Option<&str>, name: &str| {
        let metrics = match ctr {
            None => &p["metrics"],
            Some(id) => &p["containerMetrics"]
                .as_array()
                .unwrap()
                .iter()
                .find(|c| c["containerId"] == id)
                .unwrap_or_else(|| panic!("no metrics of container {id}: {p}"))["metrics"],
        };
        metrics
            .as_array()
            .unwrap()
            .iter()
            .filter(|m| m["name"] == name)
            .map(crictl_metric)
            .collect::<Vec<_>>()
    };
    let deadline = Instant::now() + Duration::from_secs(120);
    let p = loop {
        let p = pod_entry();
        let cpu = find(&p, Some(&id), "container_cpu_usage_seconds_total");
        let mem = find(&p, Some(&id), "container_memory_working_set_bytes");
        if cpu.first().is_some_and(|m| m.2 >= 1) && mem.first().is_some_and(|m| m.2 > 8 << 20) {
            break p;
        }
        assert!(
            Instant::now() < deadline,
            "CPU seconds 1 and working set above 8 MiB: never so in {cpu:?} {mem:?}"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    let labels = [
        "crictl-metered",
        "default",
        "spinner",
        id.as_str(),
        "busybox:e2e",
    ];
    for (name, kind) in [
        ("container_cpu_usage_seconds_total", "COUNTER"),
        ("container_memory_working_set_bytes", "GAUGE"),
    ] {
        let found = find(&p, Some(&id), name);
        assert_eq!(found.len(), 1, "{name}: {found:?}");
        assert_eq!(found[0].0, kind, "{name}");
        assert_eq!(found[0].1, labels, "{name}");
    }
    // Half a CPU: no more CPU seconds than wall seconds the test took.
    let cpu = find(&p, Some(&id), "container_cpu_usage_seconds_total")[0].2;
    assert!(cpu <= 120, "{cpu}");

    // Pings from the pod to the bridge's gateway, and back.
    let net = |p: &serde_json::Value, name: &str| {
        let found = find(p, None, name);
        let eth0: Vec<_> = found.iter().filter(|m| m.1[5] == "eth0").collect();
        assert_eq!(eth0.len(), 1, "{name}: {found:?}");
        assert_eq!(eth0[0].0, "COUNTER", "{name}");
        assert_eq!(
            eth0[0].1,
            ["crictl-metered", "default", "", pod.0.as_str(), "", "eth0"],
            "{name}"
        );
        eth0[0].2
    };
    let before = pod_entry();
    ping_gateway(&e, &pod.0, 2);
    let after = pod_entry();
    for (name, least) in [
        ("container_network_transmit_bytes_total", 2 * 84),
        ("container_network_receive_bytes_total", 2 * 84),
        ("container_network_transmit_packets_total", 2),
        ("container_network_receive_packets_total", 2),
    ] {
        let (b, a) = (net(&before, name), net(&after, name));
        assert!(a >= b + least, "{name}: {b} then {a}");
    }
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

    let list = "cat /proc/[0-9]*/cmdline | tr '\\0' ' '";
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let r = e
            .exec(&id, &["sh", "-c", list], 10)
            .await
            .expect("ExecSync");
        let procs = String::from_utf8_lossy(&r.stdout).to_string();
        if !procs.contains("sleep 1000") {
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
