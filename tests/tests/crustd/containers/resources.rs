//! Resources: a memory limit and OOM, UpdateContainerResources in the cgroup, the pod's
//! pids limit, and the kubelet's hugepage limits with and without the hugetlb controller.

use super::*;
use crust_e2e::crustd::Crustd;
use crust_e2e::which;

/// ListPodSandboxStats, all of them.
async fn pod_stats(e: &mut Env) -> Vec<PodSandboxStats> {
    e.c.list_pod_sandbox_stats(ListPodSandboxStatsRequest { filter: None })
        .await
        .unwrap()
        .into_inner()
        .stats
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
    // The pod's containers come with its status, as containerd 1.7 sends them (the
    // kubelet's EventedPLEG reads a pod's containers from there alone).
    let mut in_status: Vec<(String, i32)> = sb
        .containers_statuses
        .iter()
        .map(|c| (c.id.clone(), c.state))
        .collect();
    in_status.sort();
    let mut expected = vec![
        (id.clone(), ContainerState::ContainerExited as i32),
        (id2.clone(), ContainerState::ContainerRunning as i32),
    ];
    expected.sort();
    assert_eq!(in_status, expected);
    assert!(sb.containers_statuses.iter().all(|c| c.image.is_some()));
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
    let ps = pod_stats(&mut e).await;
    assert_eq!(ps.len(), 1);
    let linux = ps[0].linux.clone().unwrap();
    assert_eq!(linux.containers.len(), 1);
    let net = linux.network.unwrap();
    assert_eq!(net.default_interface.unwrap().name, "eth0");
    assert!(linux.process.unwrap().process_count.unwrap().value >= 2);
    // With only `lo` left in the pod's namespace (as while StopPodSandbox's CNI DEL runs
    // beside the pause's end), there are no network stats rather than stats without a
    // default interface: the kubelet dereferences that one unchecked, and crashed on it.
    let out = std::process::Command::new("nsenter")
        .arg(format!("--net={}", e.d.pin(&pod.0, "net").display()))
        .args(["ip", "link", "del", "eth0"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let ps = pod_stats(&mut e).await;
    let linux = ps[0].linux.clone().unwrap();
    assert_eq!(linux.network, None);
    assert!(linux.memory.is_some());

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
