//! The pod's namespaces: a hostNetwork pod, the PID and IPC modes, and what the pod
//! sees inside (hostname, DNS, hosts file, sysctls).

use super::*;

/// A hostNetwork pod (network NODE) gets no CNI call: no IP, no veth, no reserved
/// address, no net or UTS pin; its pause runs in the node's network namespace, and
/// the pod is READY with an empty network status.
#[tokio::test]
async fn host_network_pod_gets_no_cni() {
    if !root() {
        return;
    }
    let d = Crustd::start();
    let mut c = d.client().await;
    let empty = d.leftovers();
    let id = run(
        &mut c,
        pod_with_modes(
            "hostnet",
            NamespaceMode::Node,
            NamespaceMode::Pod,
            NamespaceMode::Pod,
        ),
    )
    .await;
    let (s, info) = status(&mut c, &id).await;
    assert_eq!(s.state, PodSandboxState::SandboxReady as i32);
    let net = s.network.unwrap_or_default();
    assert!(
        net.ip.is_empty() && net.additional_ips.is_empty(),
        "{net:?}"
    );
    assert_eq!(
        s.linux
            .unwrap()
            .namespaces
            .unwrap()
            .options
            .unwrap()
            .network,
        NamespaceMode::Node as i32
    );
    let l = d.leftovers();
    assert!(l.veths.is_empty(), "{l:?}");
    assert!(l.ip_files.is_empty(), "{l:?}");
    assert_eq!(l.masq_rules, 0);
    assert!(!d.pin(&id, "net").exists() && !d.pin(&id, "uts").exists());
    assert!(d.pin(&id, "ipc").exists() && d.pin(&id, "pid").exists());
    assert_eq!(info["netns"], "", "{info}");
    let pid = info["pid"].as_i64().unwrap() as i32;
    assert_eq!(proc_ns(pid, "net"), ns_ino(&d.node.path()));
    assert_ne!(
        proc_ns(pid, "ipc"),
        proc_ns(std::process::id() as i32, "ipc")
    );

    stop(&mut c, &id).await;
    assert!(wait_gone(pid));
    remove(&mut c, &id).await;
    assert_nothing_left(&d, &empty, "a hostNetwork pod");
}

/// PID and IPC NODE put the pause in the node's PID and IPC namespaces (no pins for
/// them); PID POD gives the pod its own PID namespace with the pause as its PID 1.
#[tokio::test]
async fn pid_and_ipc_namespace_modes() {
    if !root() {
        return;
    }
    let d = Crustd::start();
    let mut c = d.client().await;
    let me = std::process::id() as i32;

    let host = run(
        &mut c,
        pod_with_modes(
            "hostpid",
            NamespaceMode::Pod,
            NamespaceMode::Node,
            NamespaceMode::Node,
        ),
    )
    .await;
    let pid = pause_pid(&mut c, &host).await;
    assert_eq!(proc_ns(pid, "pid"), proc_ns(me, "pid"));
    assert_eq!(proc_ns(pid, "ipc"), proc_ns(me, "ipc"));
    assert_ne!(proc_ns(pid, "net"), ns_ino(&d.node.path()));
    assert!(!d.pin(&host, "pid").exists() && !d.pin(&host, "ipc").exists());
    assert!(d.pin(&host, "net").exists() && d.pin(&host, "uts").exists());
    let st = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let nspid = st.lines().find(|l| l.starts_with("NSpid:")).unwrap();
    assert_eq!(
        nspid.split_whitespace().count(),
        2,
        "host PID pause must have one pid: {nspid}"
    );

    let own = run(
        &mut c,
        pod_with_modes(
            "podpid",
            NamespaceMode::Pod,
            NamespaceMode::Pod,
            NamespaceMode::Pod,
        ),
    )
    .await;
    let pid = pause_pid(&mut c, &own).await;
    assert_ne!(proc_ns(pid, "pid"), proc_ns(me, "pid"));
    assert_ne!(proc_ns(pid, "ipc"), proc_ns(me, "ipc"));
    assert_eq!(
        ns_ino(&d.pin(&own, "pid")),
        proc_ns(pid, "pid_for_children")
    );
    assert_eq!(ns_ino(&d.pin(&own, "ipc")), proc_ns(pid, "ipc"));
    let st = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let nspid = st.lines().find(|l| l.starts_with("NSpid:")).unwrap();
    assert_eq!(
        nspid.split_whitespace().last(),
        Some("1"),
        "the pause is not PID 1 of its namespace: {nspid}"
    );
    for id in [host, own] {
        stop(&mut c, &id).await;
        remove(&mut c, &id).await;
    }
    assert!(d.leftovers().pauses.is_empty());
}

/// The pod sees its own hostname in its UTS namespace; its resolv.conf comes from
/// `dns_config` (or is the node's when none is given); its hosts file names it on its
/// IP; its sysctls are set inside its network and IPC namespaces and not on the node.
#[tokio::test]
async fn pod_sees_hostname_dns_hosts_and_sysctls() {
    if !root() {
        return;
    }
    let d = Crustd::start();
    let mut c = d.client().await;
    let mut cfg = pod_config("dns-pod", "uid-dns");
    cfg.hostname = "my-host-0".into();
    cfg.dns_config = Some(DnsConfig {
        servers: vec!["10.96.0.10".into(), "10.96.0.11".into()],
        searches: vec!["ns.svc.cluster.local".into(), "svc.cluster.local".into()],
        options: vec!["ndots:5".into(), "edns0".into()],
    });
    cfg.linux.as_mut().unwrap().sysctls = HashMap::from([
        (
            "net.ipv4.ip_unprivileged_port_start".to_string(),
            "80".to_string(),
        ),
        ("kernel.shm_rmid_forced".to_string(), "1".to_string()),
    ]);
    let id = run(&mut c, cfg).await;

    assert_eq!(
        in_pod("--uts", &d.pin(&id, "uts"), &["hostname"]),
        "my-host-0"
    );
    let node_hostname = crust_e2e::sh(&["hostname"]);
    assert_ne!(node_hostname.trim(), "my-host-0", "the node was renamed");
    assert_eq!(
        std::fs::read_to_string(d.pod_file(&id, "hostname")).unwrap(),
        "my-host-0\n"
    );

    let resolv = std::fs::read_to_string(d.pod_file(&id, "resolv.conf")).unwrap();
    let lines: Vec<&str> = resolv.lines().collect();
    assert!(
        lines.contains(&"search ns.svc.cluster.local svc.cluster.local"),
        "{resolv}"
    );
    assert!(lines.contains(&"nameserver 10.96.0.10"), "{resolv}");
    assert!(lines.contains(&"nameserver 10.96.0.11"), "{resolv}");
    assert!(lines.contains(&"options ndots:5 edns0"), "{resolv}");

    let (ip, _) = ips(&mut c, &id).await;
    let hosts = std::fs::read_to_string(d.pod_file(&id, "hosts")).unwrap();
    assert!(
        hosts
            .lines()
            .any(|l| l.split_whitespace().collect::<Vec<_>>() == [ip.as_str(), "my-host-0"]),
        "hosts file lacks `{ip} my-host-0`:\n{hosts}"
    );
    assert!(hosts.lines().any(|l| l.starts_with("127.0.0.1")), "{hosts}");

    let port_start = "/proc/sys/net/ipv4/ip_unprivileged_port_start";
    assert_eq!(
        in_pod("--net", &d.pin(&id, "net"), &["cat", port_start]),
        "80"
    );
    assert_eq!(
        in_pod(
            "--ipc",
            &d.pin(&id, "ipc"),
            &["cat", "/proc/sys/kernel/shm_rmid_forced"]
        ),
        "1"
    );
    // Not on the node (its own namespaces are untouched).
    assert_eq!(
        d.node.sh(&["cat", port_start]).trim(),
        "1024",
        "the node's sysctl changed"
    );
    assert_eq!(
        std::fs::read_to_string("/proc/sys/kernel/shm_rmid_forced")
            .unwrap()
            .trim(),
        "0",
        "the host's IPC sysctl changed"
    );

    // Without a DNS config the pod gets the node's resolv.conf (kubelet's `Default`).
    let plain = run(&mut c, pod_config("plain", "uid-plain")).await;
    assert_eq!(
        std::fs::read_to_string(d.pod_file(&plain, "resolv.conf")).unwrap(),
        std::fs::read_to_string("/etc/resolv.conf").unwrap_or_default()
    );
    assert_eq!(
        in_pod("--uts", &d.pin(&plain, "uts"), &["hostname"]),
        "plain"
    );
}
