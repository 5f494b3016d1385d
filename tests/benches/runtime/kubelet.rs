//! The node as the kubelet sees it, the requests it sends for a Burstable pod, and its
//! cgroups: kubepods/burstable and the pod cgroup.

use super::*;

// ---------------------------------------------------------------------------------
// The node as the kubelet sees it

/// What the kubelet reads off the node once.
pub(crate) struct Node {
    /// Page sizes for hugepage limits, empty when no hugetlb controller is there.
    pub(crate) hugepage_sizes: Vec<String>,
    /// cgroup v1 memory has `memsw`: the kubelet sets the swap limit to the memory limit.
    pub(crate) memsw: bool,
    pub(crate) oom_score_adj: i64,
}

impl Node {
    pub(crate) fn read() -> Node {
        let mem_total = std::fs::read_to_string("/proc/meminfo")
            .unwrap_or_default()
            .lines()
            .find_map(|l| l.strip_prefix("MemTotal:"))
            .and_then(|v| v.split_whitespace().next()?.parse::<i64>().ok())
            .unwrap_or(1 << 24)
            * 1024;
        // The kubelet's GetContainerOOMScoreAdjust for Burstable.
        let oom = (1000 - (1000 * MEMORY_REQUEST) / mem_total).clamp(3, 999);
        let v2_root = std::fs::read_to_string("/sys/fs/cgroup/cgroup.controllers").ok();
        let hugetlb = Path::new("/sys/fs/cgroup/hugetlb").is_dir()
            || v2_root.is_some_and(|c| c.split_whitespace().any(|w| w == "hugetlb"));
        let hugepage_sizes = if hugetlb {
            crust_e2e::crustd::dir_names(Path::new("/sys/kernel/mm/hugepages"))
                .iter()
                .filter_map(|d| {
                    d.strip_prefix("hugepages-")?
                        .strip_suffix("kB")?
                        .parse::<u64>()
                        .ok()
                })
                .map(|kb| match kb {
                    k if k >= 1 << 20 => format!("{}GB", k >> 20),
                    k if k >= 1 << 10 => format!("{}MB", k >> 10),
                    k => format!("{k}KB"),
                })
                .collect()
        } else {
            vec![]
        };
        Node {
            hugepage_sizes,
            memsw: Path::new("/sys/fs/cgroup/memory/memory.memsw.limit_in_bytes").exists(),
            oom_score_adj: oom,
        }
    }
}

/// One pod's host side, as the kubelet lays it out.
pub(crate) struct PodFiles {
    log_dir: PathBuf,
    hosts: PathBuf,
    term_log: PathBuf,
    token_dir: PathBuf,
}

pub(crate) fn pod_files(row: &Row, name: &str, uid: &str) -> PodFiles {
    let pod = row.kubelet.join(uid);
    let log_dir = row.logs.join(format!("bench_{name}_{uid}"));
    let term_dir = pod.join("containers/app");
    let token_dir = pod.join("volumes/kubernetes.io~projected/kube-api-access-bench");
    let data = token_dir.join("..2026_01_01_00_00_00.000000001");
    for d in [&log_dir, &term_dir, &data] {
        std::fs::create_dir_all(d).unwrap();
    }
    let hosts = pod.join("etc-hosts");
    std::fs::write(
        &hosts,
        format!(
            "# Kubernetes-managed hosts file.\n127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n\
             fe00::0\tip6-localnet\nfe00::0\tip6-mcastprefix\nfe00::1\tip6-allnodes\nfe00::2\tip6-allrouters\n\
             10.0.0.1\t{name}\n"
        ),
    )
    .unwrap();
    let term_log = term_dir.join("0a1b2c3d");
    std::fs::write(&term_log, b"").unwrap();
    std::fs::write(data.join("token"), "eyJhbGciOiJSUzI1NiJ9.bench.signature").unwrap();
    std::fs::write(
        data.join("ca.crt"),
        "-----BEGIN CERTIFICATE-----\n-----END CERTIFICATE-----\n",
    )
    .unwrap();
    std::fs::write(data.join("namespace"), "bench").unwrap();
    std::os::unix::fs::symlink("..2026_01_01_00_00_00.000000001", token_dir.join("..data"))
        .unwrap();
    for f in ["token", "ca.crt", "namespace"] {
        std::os::unix::fs::symlink(format!("..data/{f}"), token_dir.join(f)).unwrap();
    }
    PodFiles {
        log_dir,
        hosts,
        term_log,
        token_dir,
    }
}

fn kv(pairs: &[(&str, &str)]) -> HashMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

fn namespaces() -> NamespaceOption {
    NamespaceOption {
        network: NamespaceMode::Pod as i32,
        pid: NamespaceMode::Container as i32,
        ipc: NamespaceMode::Pod as i32,
        ..Default::default()
    }
}

fn runtime_default() -> SecurityProfile {
    SecurityProfile {
        profile_type: security_profile::ProfileType::RuntimeDefault as i32,
        ..Default::default()
    }
}

/// The pod-level resources the kubelet puts in the sandbox config (the sum of its
/// containers').
fn pod_resources() -> LinuxContainerResources {
    LinuxContainerResources {
        cpu_period: CPU_PERIOD,
        cpu_quota: CPU_LIMIT_MILLI * CPU_PERIOD / 1000,
        cpu_shares: CPU_REQUEST_MILLI * 1024 / 1000,
        memory_limit_in_bytes: MEMORY_LIMIT,
        ..Default::default()
    }
}

pub(crate) fn pod_config(row: &Row, name: &str, uid: &str, files: &PodFiles) -> PodSandboxConfig {
    PodSandboxConfig {
        metadata: Some(PodSandboxMetadata {
            name: name.into(),
            uid: uid.into(),
            namespace: "bench".into(),
            attempt: 0,
        }),
        hostname: name.into(),
        log_directory: files.log_dir.display().to_string(),
        dns_config: Some(DnsConfig {
            servers: vec!["10.96.0.10".into()],
            searches: vec![
                "bench.svc.cluster.local".into(),
                "svc.cluster.local".into(),
                "cluster.local".into(),
            ],
            options: vec!["ndots:5".into()],
        }),
        port_mappings: vec![],
        labels: kv(&[
            ("app", "bench"),
            ("io.kubernetes.pod.name", name),
            ("io.kubernetes.pod.namespace", "bench"),
            ("io.kubernetes.pod.uid", uid),
        ]),
        annotations: kv(&[
            (
                "kubernetes.io/config.seen",
                "2026-01-01T00:00:00.000000000Z",
            ),
            ("kubernetes.io/config.source", "api"),
        ]),
        linux: Some(LinuxPodSandboxConfig {
            cgroup_parent: format!("{}/pod{uid}", row.sent),
            security_context: Some(LinuxSandboxSecurityContext {
                namespace_options: Some(namespaces()),
                seccomp: Some(runtime_default()),
                ..Default::default()
            }),
            resources: Some(pod_resources()),
            ..Default::default()
        }),
        ..Default::default()
    }
}

pub(crate) fn container_config(
    node: &Node,
    name: &str,
    uid: &str,
    files: &PodFiles,
) -> ContainerConfig {
    let mount = |c: &str, h: &Path, ro: bool| Mount {
        container_path: c.into(),
        host_path: h.display().to_string(),
        readonly: ro,
        propagation: MountPropagation::PropagationPrivate as i32,
        ..Default::default()
    };
    let mut resources = pod_resources();
    resources.oom_score_adj = node.oom_score_adj;
    if node.memsw {
        resources.memory_swap_limit_in_bytes = MEMORY_LIMIT;
    }
    resources.hugepage_limits = node
        .hugepage_sizes
        .iter()
        .map(|s| HugepageLimit {
            page_size: s.clone(),
            limit: 0,
        })
        .collect();
    ContainerConfig {
        metadata: Some(ContainerMetadata {
            name: "app".into(),
            attempt: 0,
        }),
        image: Some(ImageSpec {
            image: IMAGE.into(),
            ..Default::default()
        }),
        command: vec!["/bin/sleep".into(), "3600".into()],
        envs: [
            ("KUBERNETES_SERVICE_HOST", "10.96.0.1"),
            ("KUBERNETES_SERVICE_PORT", "443"),
            ("KUBERNETES_SERVICE_PORT_HTTPS", "443"),
            ("KUBERNETES_PORT", "tcp://10.96.0.1:443"),
            ("KUBERNETES_PORT_443_TCP", "tcp://10.96.0.1:443"),
            ("KUBERNETES_PORT_443_TCP_PROTO", "tcp"),
            ("KUBERNETES_PORT_443_TCP_PORT", "443"),
            ("KUBERNETES_PORT_443_TCP_ADDR", "10.96.0.1"),
        ]
        .iter()
        .map(|(k, v)| KeyValue {
            key: k.to_string(),
            value: v.to_string(),
        })
        .collect(),
        mounts: vec![
            mount(
                "/var/run/secrets/kubernetes.io/serviceaccount",
                &files.token_dir,
                true,
            ),
            mount("/etc/hosts", &files.hosts, false),
            mount("/dev/termination-log", &files.term_log, false),
        ],
        labels: kv(&[
            ("io.kubernetes.container.name", "app"),
            ("io.kubernetes.pod.name", name),
            ("io.kubernetes.pod.namespace", "bench"),
            ("io.kubernetes.pod.uid", uid),
        ]),
        annotations: kv(&[
            ("io.kubernetes.container.hash", "5d3a1b2c"),
            ("io.kubernetes.container.restartCount", "0"),
            (
                "io.kubernetes.container.terminationMessagePath",
                "/dev/termination-log",
            ),
            ("io.kubernetes.container.terminationMessagePolicy", "File"),
            ("io.kubernetes.pod.terminationGracePeriod", "30"),
        ]),
        log_path: "app/0.log".into(),
        linux: Some(LinuxContainerConfig {
            resources: Some(resources),
            security_context: Some(LinuxContainerSecurityContext {
                namespace_options: Some(namespaces()),
                masked_paths: KUBELET_MASKED_PATHS.iter().map(|s| s.to_string()).collect(),
                readonly_paths: KUBELET_READONLY_PATHS
                    .iter()
                    .map(|s| s.to_string())
                    .collect(),
                seccomp: Some(runtime_default()),
                ..Default::default()
            }),
        }),
        ..Default::default()
    }
}

// ---------------------------------------------------------------------------------
// The kubelet's cgroups: kubepods/burstable, and a pod cgroup with the pod's limits

pub(crate) fn pod_cgroup(row: &Row, uid: &str) -> CgroupPath {
    CgroupPath::new(&format!("{}/pod{uid}", row.burstable)).unwrap()
}

pub(crate) fn make_pod_cgroup(row: &Row, uid: &str) -> Result<(), String> {
    let p = pod_cgroup(row, uid);
    row.cgroups
        .create(&p)
        .map_err(|e| format!("pod cgroup: {e}"))?;
    let r = pod_resources();
    // The v1 files as the kubelet writes them there, v2's (`cpu.weight` from the
    // shares, `cpu.max`, `memory.max`) through the cgroups crate, as the kubelet's
    // libcontainer converts them.
    row.cgroups
        .apply(
            &p,
            &cgroups::Resources {
                cpu_shares: Some(r.cpu_shares as u64),
                cpu_quota: Some(r.cpu_quota),
                cpu_period: Some(r.cpu_period as u64),
                memory_limit: Some(r.memory_limit_in_bytes),
                ..Default::default()
            },
        )
        .map_err(|e| format!("pod cgroup limits: {e}"))
}

/// The kubelet removes a pod's cgroup once its sandbox is gone.
pub(crate) fn remove_cgroup(h: &Hierarchy, p: &CgroupPath) {
    let mut dirs = h.dirs(p);
    let deadline = Instant::now() + Duration::from_secs(5);
    while !dirs.is_empty() && Instant::now() < deadline {
        dirs.retain(|d| d.exists() && std::fs::remove_dir(d).is_err());
        if !dirs.is_empty() {
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}
