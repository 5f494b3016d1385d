//! The pod network through CNI: readiness from the conf dir, the rendered template,
//! plugin failures and their rollback, hostPort through portmap, and reads while a CNI
//! DEL is in flight (fake plugins in a temp bin dir).

use super::*;

/// Status says RuntimeReady, and NetworkReady false with a reason while the CNI conf
/// dir is empty; RunPodSandbox then fails with FailedPrecondition and leaves nothing.
/// Once a config appears NetworkReady turns true without a restart and pods run.
/// RuntimeConfig reports the cgroupfs driver.
#[tokio::test]
async fn network_readiness_follows_the_conf_dir() {
    if !root() {
        return;
    }
    let d = Crustd::start_with(Options {
        cni_conf: false,
        ..Default::default()
    });
    let mut c = d.client().await;
    let cond = |r: &StatusResponse, t: &str| {
        r.status
            .as_ref()
            .unwrap()
            .conditions
            .iter()
            .find(|x| x.r#type == t)
            .cloned()
            .unwrap_or_else(|| panic!("no {t} condition in {r:?}"))
    };
    let r = c
        .status(StatusRequest { verbose: true })
        .await
        .unwrap()
        .into_inner();
    assert!(cond(&r, "RuntimeReady").status);
    let n = cond(&r, "NetworkReady");
    assert!(!n.status);
    assert!(!n.reason.is_empty() && !n.message.is_empty(), "{n:?}");
    assert!(
        n.message.contains(&d.conf_dir.path().display().to_string()),
        "the message should name the conf dir: {n:?}"
    );
    let cfg: serde_json::Value = serde_json::from_str(&r.info["config"]).unwrap();
    assert_eq!(cfg["cgroupDriver"], "cgroupfs");

    let rc = c
        .runtime_config(RuntimeConfigRequest {})
        .await
        .unwrap()
        .into_inner();
    assert_eq!(
        rc.linux.unwrap().cgroup_driver,
        CgroupDriver::Cgroupfs as i32
    );

    let empty = d.leftovers();
    assert_code(
        try_run(&mut c, Some(pod_config("early", "uid-early")), "").await,
        Code::FailedPrecondition,
        "RunPodSandbox without a CNI config",
    );
    assert_nothing_left(&d, &empty, "RunPodSandbox without a CNI config");
    assert!(list(&mut c, None).await.is_empty());

    d.write_cni_conf();
    let r = c
        .status(StatusRequest { verbose: false })
        .await
        .unwrap()
        .into_inner();
    let n = cond(&r, "NetworkReady");
    assert!(n.status, "{n:?}");
    assert!(cond(&r, "RuntimeReady").status);
    let id = run(&mut c, pod_config("early", "uid-early")).await;
    assert_eq!(state(&mut c, &id).await, PodSandboxState::SandboxReady);
}

/// With `cni.conf_template` in the config file, UpdateRuntimeConfig renders the
/// kubelet's pod CIDRs (dual-stack) into a conflist in the conf dir; NetworkReady
/// turns true and pods get addresses from those ranges. A bad CIDR is InvalidArgument.
#[tokio::test]
async fn update_runtime_config_renders_the_template() {
    if !root() {
        return;
    }
    let tmpl_dir = TempDir::new("ct");
    let tmpl = tmpl_dir.path().join("template.json");
    let d = Crustd::start_with_config(
        Options {
            cni_conf: false,
            ..Default::default()
        },
        &format!("[cni]\nconf_template = \"{}\"\n", tmpl.display()),
    );
    std::fs::write(
        &tmpl,
        format!(
            r#"{{"cniVersion": "1.0.0", "name": "crust-e2e", "plugins": [{{"type": "bridge", "bridge": "{}", "isGateway": true,
              "ipam": {{"type": "host-local", "dataDir": "{}", "ranges": [{{{{.PodCIDRRanges}}}}], "routes": [{{{{.Routes}}}}]}}}}]}}"#,
            d.bridge,
            d.ipam_data.path().display()
        ),
    )
    .unwrap();
    let mut c = d.client().await;
    let net_ready = |r: StatusResponse| {
        r.status
            .unwrap()
            .conditions
            .iter()
            .find(|x| x.r#type == "NetworkReady")
            .unwrap()
            .status
    };
    assert!(!net_ready(
        c.status(StatusRequest::default())
            .await
            .unwrap()
            .into_inner()
    ));
    let update = |cidr: &str| UpdateRuntimeConfigRequest {
        runtime_config: Some(RuntimeConfig {
            network_config: Some(NetworkConfig {
                pod_cidr: cidr.into(),
            }),
        }),
    };
    assert_code(
        c.update_runtime_config(update("10.77.0.0/33")).await,
        Code::InvalidArgument,
        "a bad pod CIDR",
    );
    // Empty: nothing to do.
    c.update_runtime_config(update("")).await.unwrap();
    assert!(crust_e2e::run(Command::new("ls").arg(d.conf_dir.path()))
        .stdout
        .is_empty());

    c.update_runtime_config(update("10.77.0.0/24,fd00:77::/64"))
        .await
        .unwrap();
    let written = d.conf_dir.path().join("10-crust.conflist");
    let conf: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&written).unwrap()).unwrap();
    let ipam = &conf["plugins"][0]["ipam"];
    assert_eq!(ipam["ranges"][0][0]["subnet"], "10.77.0.0/24", "{conf}");
    assert_eq!(ipam["ranges"][1][0]["subnet"], "fd00:77::/64", "{conf}");
    assert_eq!(ipam["routes"][0]["dst"], "0.0.0.0/0");
    assert_eq!(ipam["routes"][1]["dst"], "::/0");
    assert!(net_ready(
        c.status(StatusRequest::default())
            .await
            .unwrap()
            .into_inner()
    ));

    let id = run(&mut c, pod_config("cidr", "uid-cidr")).await;
    let (ip, more) = ips(&mut c, &id).await;
    assert!(ip.starts_with("10.77.0."), "{ip}");
    assert!(
        more.len() == 1 && more[0].starts_with("fd00:77:"),
        "{more:?}"
    );
}

/// A plugin script for a temp CNI bin dir: ADD fails with a CNI error when
/// `fail_add`, every other command succeeds silently (DEL must, to tear down).
fn fake_plugin(dir: &Path, name: &str, fail_add: bool) {
    let add = if fail_add {
        "echo '{\"cniVersion\": \"1.0.0\", \"code\": 11, \"msg\": \"injected ADD failure\"}'; exit 1"
    } else {
        "cat >/dev/null; echo '{\"cniVersion\": \"1.0.0\"}'; exit 0"
    };
    write_plugin(
        dir,
        name,
        &format!(
            "#!/bin/sh\nif [ \"$CNI_COMMAND\" = ADD ]; then {add}; fi\ncat >/dev/null\nexit 0\n"
        ),
    );
}

/// Writes `script` as the executable plugin `name` of a temp CNI bin dir.
fn write_plugin(dir: &Path, name: &str, script: &str) {
    crust_e2e::write_executable(&dir.join(name), script);
}

/// A crustd that finds CNI plugins in `bin_dir` too (the test's fake ones), besides
/// the workspace's built plugins.
fn crustd_with_cni_bin(bin_dir: &Path) -> Crustd {
    Crustd::start_with(Options {
        extra_args: vec!["--cni-bin-dir".into(), bin_dir.display().to_string()],
        ..Default::default()
    })
}

/// Writes the daemon's conflist with `plugin` chained after its own plugins.
fn chain_plugin(d: &Crustd, plugin: serde_json::Value) {
    let mut conf = d.cni_conf();
    conf["plugins"].as_array_mut().unwrap().push(plugin);
    std::fs::write(d.conf_dir.path().join("10-e2e.conflist"), conf.to_string()).unwrap();
}

/// A CNI failure during RunPodSandbox is an error and rolls everything back, also what
/// a plugin earlier in the chain made (bridge's veth and address): an exhausted address
/// range, and a plugin that fails its ADD. No pause, pin, veth, address, masquerade
/// rule, cgroup or record is left, and the pod's name can be used again.
#[tokio::test]
async fn cni_failure_rolls_back() {
    if !root() {
        return;
    }
    let fake_bin = TempDir::new("cf");
    fake_plugin(fake_bin.path(), "failpoint", true);
    let d = crustd_with_cni_bin(fake_bin.path());
    let mut c = d.client().await;
    let empty = d.leftovers();
    let conf_path = d.conf_dir.path().join("10-e2e.conflist");

    // One address only: the first pod takes it, the second finds none.
    let mut conf = d.cni_conf();
    conf["plugins"][0]["ipam"]["ranges"] = serde_json::json!([[{
        "subnet": "10.66.0.0/24", "rangeStart": "10.66.0.10", "rangeEnd": "10.66.0.10"
    }]]);
    std::fs::write(&conf_path, conf.to_string()).unwrap();
    let first = run(&mut c, pod_config("first", "uid-first")).await;
    assert_eq!(ips(&mut c, &first).await.0, "10.66.0.10");
    let with_first = d.leftovers();
    let r = try_run(&mut c, Some(pod_config("second", "uid-second")), "").await;
    let err = r.expect_err("RunPodSandbox with no address left succeeded");
    assert!(err.message().contains("CNI"), "{err:?}");
    assert_nothing_left(&d, &with_first, "an IPAM failure");
    assert_eq!(list(&mut c, None).await.len(), 1);

    // The bridge sets the pod up, then the next plugin fails its ADD.
    chain_plugin(&d, serde_json::json!({"type": "failpoint"}));
    let r = try_run(&mut c, Some(pod_config("second", "uid-second")), "").await;
    let err = r.expect_err("RunPodSandbox with a failing plugin succeeded");
    assert!(err.message().contains("injected ADD failure"), "{err:?}");
    assert_nothing_left(&d, &with_first, "a failing plugin after the bridge");
    assert_eq!(list(&mut c, None).await.len(), 1);

    // Fixed: the same pod runs, and `first` is still fine.
    d.write_cni_conf();
    let second = run(&mut c, pod_config("second", "uid-second")).await;
    let (ip2, _) = ips(&mut c, &second).await;
    assert!(ping(&d, &first, &ip2));
    for id in [first, second] {
        stop(&mut c, &id).await;
        remove(&mut c, &id).await;
    }
    assert_nothing_left(&d, &empty, "the pods after the failures");
}

/// A plugin that is not installed fails the ADD, and the rollback's DEL cannot run
/// either (DEL walks the chain in reverse and stops at the missing plugin, so the
/// bridge's veth and address stay). The half-made sandbox is then not forgotten: it
/// is listed NOTREADY with its pause gone, and once the plugin is installed
/// RemovePodSandbox tears the network down and leaves nothing.
#[tokio::test]
async fn missing_plugin_keeps_the_sandbox_until_remove_succeeds() {
    if !root() {
        return;
    }
    let fake_bin = TempDir::new("cm");
    let d = crustd_with_cni_bin(fake_bin.path());
    let mut c = d.client().await;
    let empty = d.leftovers();
    chain_plugin(&d, serde_json::json!({"type": "late-plugin"}));

    let r = try_run(&mut c, Some(pod_config("late", "uid-late")), "").await;
    let err = r.expect_err("RunPodSandbox with a missing plugin succeeded");
    assert!(err.message().contains("late-plugin"), "{err:?}");
    let items = list(&mut c, None).await;
    assert_eq!(items.len(), 1, "the half-made sandbox was forgotten");
    let id = items[0].id.clone();
    assert_eq!(items[0].state, PodSandboxState::SandboxNotready as i32);
    assert!(d.leftovers().pauses.is_empty(), "pause left running");
    assert_code(
        c.remove_pod_sandbox(RemovePodSandboxRequest {
            pod_sandbox_id: id.clone(),
        })
        .await,
        Code::Internal,
        "RemovePodSandbox while DEL cannot run",
    );
    assert!(!d.leftovers().ip_files.is_empty());

    fake_plugin(fake_bin.path(), "late-plugin", false);
    remove(&mut c, &id).await;
    assert_nothing_left(&d, &empty, "the sandbox once its plugin was installed");
    assert!(list(&mut c, None).await.is_empty());
    d.write_cni_conf();
    let again = run(&mut c, pod_config("late", "uid-late")).await;
    assert_eq!(state(&mut c, &again).await, PodSandboxState::SandboxReady);
}

/// A pod's `hostPort` through a chain of crust's bridge and the reference `portmap`
/// plugin (a node that keeps the portmap its Kubernetes install left): the port mapping
/// of the sandbox config reaches portmap as its `portMappings` capability, a connection
/// to the node's port lands in the pod, and StopPodSandbox runs DEL down the chain so
/// portmap's rules go with the pod.
#[tokio::test]
async fn host_port_through_the_reference_portmap_plugin() {
    host_port_through(false).await
}

/// The same through crust's own `portmap` (the conflist crust installs), whose rules
/// are nftables ones.
#[tokio::test]
async fn host_port_through_crusts_portmap_plugin() {
    host_port_through(true).await
}

async fn host_port_through(ours: bool) {
    if !root() || !require_root(&["iptables", "nft"]) {
        return;
    }
    let Some(portmap) = crust_e2e::reference_plugin("portmap") else {
        return;
    };
    let reference_dir = portmap.parent().unwrap();
    // crustd takes the first plugin of each name: crust's bridge and host-local, then
    // either portmap, and the reference firewall and tuning.
    let plugins = TempDir::new("plugins");
    for p in ["bridge", "host-local", "portmap"] {
        let from = if p != "portmap" || ours {
            crust_e2e::bin(p)
        } else {
            portmap.clone()
        };
        std::os::unix::fs::symlink(from, plugins.path().join(p)).unwrap();
    }
    let subnet = if ours { 72 } else { 71 };
    let d = Crustd::start_with(Options {
        cni_conf: false,
        subnet,
        cni_bin_dirs: vec![plugins.path().to_path_buf(), reference_dir.to_path_buf()],
        ..Default::default()
    });
    let mut conf = d.cni_conf();
    let chain = conf["plugins"].as_array_mut().unwrap();
    chain.push(serde_json::json!({
        "type": "portmap",
        "capabilities": {"portMappings": true},
        "snat": true
    }));
    chain.push(serde_json::json!({"type": "firewall", "backend": "iptables"}));
    chain.push(serde_json::json!({
        "type": "tuning",
        "sysctl": {"net.ipv4.conf.eth0.arp_notify": "1"}
    }));
    std::fs::write(d.conf_dir.path().join("10-e2e.conflist"), conf.to_string()).unwrap();
    let mut c = d.client().await;
    let mut cfg = pod_config("web", "uid-web");
    cfg.port_mappings = vec![PortMapping {
        protocol: Protocol::Tcp as i32,
        container_port: 8080,
        host_port: 18080,
        host_ip: String::new(),
    }];
    let id = run(&mut c, cfg).await;
    let (ip, _) = ips(&mut c, &id).await;
    assert!(ip.starts_with(&format!("10.{subnet}.0.")), "{ip}");

    // A server on the pod's port 8080, inside the pod's network namespace.
    let pod_net = d.pin(&id, "net");
    let listener = std::thread::scope(|s| {
        s.spawn(|| {
            crust_e2e::enter_netns(&pod_net);
            std::net::TcpListener::bind("0.0.0.0:8080").unwrap()
        })
        .join()
        .unwrap()
    });
    std::thread::spawn(move || {
        for mut conn in listener.incoming().flatten() {
            let _ = std::io::Write::write_all(&mut conn, b"from the pod\n");
        }
    });
    // The node dials its own address on the host port (the bridge's gateway address),
    // and its loopback, as the conformance suite does (portmap's snat makes it work).
    let node = d.node.path();
    let dial = move |addr: String| {
        let node = node.clone();
        std::thread::spawn(move || {
            crust_e2e::enter_netns(&node);
            let addr = addr.parse().unwrap();
            let mut conn = std::net::TcpStream::connect_timeout(&addr, Duration::from_secs(3))
                .map_err(|e| e.to_string())?;
            conn.set_read_timeout(Some(Duration::from_secs(3))).unwrap();
            let mut got = String::new();
            std::io::Read::read_to_string(&mut conn, &mut got).map_err(|e| e.to_string())?;
            Ok::<String, String>(got)
        })
        .join()
        .unwrap()
    };
    let gw = format!("10.{subnet}.0.1:18080");
    assert_eq!(dial(gw.clone()).as_deref(), Ok("from the pod\n"));
    assert_eq!(
        dial("127.0.0.1:18080".into()).as_deref(),
        Ok("from the pod\n")
    );
    // crust's portmap keeps its rules in nftables, the reference 1.1.1 in iptables.
    let nat = || {
        if ours {
            let out =
                crust_e2e::run(
                    d.node
                        .cmd("nft")
                        .args(["list", "table", "ip", "cni_hostport"]),
                );
            String::from_utf8_lossy(&out.stdout).into_owned()
        } else {
            d.node.sh(&["iptables", "-t", "nat", "-S"])
        }
    };
    let rules = nat();
    assert!(rules.contains(&id), "portmap's rules name the pod: {rules}");
    // The plugins after portmap read the result it passed on: firewall admits the pod's
    // address, tuning finds the pod's interface.
    let filter = d.node.sh(&["iptables", "-S", "CNI-FORWARD"]);
    assert!(filter.contains(&ip), "firewall's rules: {filter}");
    let arp = in_pod(
        "--net",
        &pod_net,
        &["cat", "/proc/sys/net/ipv4/conf/eth0/arp_notify"],
    );
    assert_eq!(arp, "1", "tuning's sysctl in the pod");

    stop(&mut c, &id).await;
    let rules = nat();
    assert!(
        !rules.contains(&id),
        "portmap's rules outlived the pod: {rules}"
    );
    let filter = d.node.sh(&["iptables", "-S", "CNI-FORWARD"]);
    assert!(
        !filter.contains(&ip),
        "firewall's rules outlived the pod: {filter}"
    );
    assert!(dial(gw).is_err(), "the host port still reaches somewhere");
    remove(&mut c, &id).await;
}

/// The kubelet relists every second (ListPodSandbox, then the statuses of the pods that
/// changed, one after another); a read that waited for an operation in flight on a pod
/// held the whole relist, and with it every pod's lifecycle on the node, for as long as
/// that operation took. Here a StopPodSandbox is parked in its CNI DEL (a plugin that
/// waits for a gate file) while it holds its pod: ListPodSandbox, PodSandboxStatus of
/// that pod and of another, ListContainers and the stats must all answer meanwhile
/// (each within 20 s: without the fix they waited for the gate, which never opens
/// before they answer). Then the gate opens and the stop finishes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reads_do_not_wait_for_an_operation_in_flight() {
    if !root() {
        return;
    }
    let fake_bin = TempDir::new("gate");
    let gate = fake_bin.path().join("open");
    let parked = fake_bin.path().join("parked");
    let script = format!(
        "#!/bin/sh\ncat >/dev/null\nif [ \"$CNI_COMMAND\" = ADD ]; then echo '{{\"cniVersion\": \"1.0.0\"}}'; exit 0; fi\n\
         if [ \"$CNI_COMMAND\" = DEL ]; then touch {parked}; while [ ! -e {gate} ]; do sleep 0.05; done; fi\nexit 0\n",
        parked = parked.display(),
        gate = gate.display()
    );
    write_plugin(fake_bin.path(), "gate", &script);
    let d = crustd_with_cni_bin(fake_bin.path());
    /// Opens the gate when the test ends, also by a failed assertion: dropped before
    /// the daemon, whose teardown would otherwise wait for the parked stop forever.
    struct OpenOnDrop(std::path::PathBuf);
    impl Drop for OpenOnDrop {
        fn drop(&mut self) {
            let _ = std::fs::write(&self.0, "");
        }
    }
    let _open = OpenOnDrop(gate.clone());
    let mut c = d.client().await;
    let empty = d.leftovers();
    chain_plugin(&d, serde_json::json!({"type": "gate"}));
    let held = run(&mut c, pod_config("held", "uid-held")).await;
    let other = run(&mut c, pod_config("other", "uid-other")).await;

    let mut c2 = d.client().await;
    let h = held.clone();
    let stopping = tokio::spawn(async move {
        c2.stop_pod_sandbox(StopPodSandboxRequest { pod_sandbox_id: h })
            .await
    });
    let begun = Instant::now();
    while !parked.exists() {
        assert!(
            begun.elapsed() < Duration::from_secs(60),
            "the StopPodSandbox never reached its CNI DEL"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    /// The answer of `read`, which must come within 20 s: `waited` says which read
    /// waited when it does not.
    async fn within<T>(read: impl std::future::Future<Output = T>, waited: &str) -> T {
        tokio::time::timeout(Duration::from_secs(20), read)
            .await
            .unwrap_or_else(|e| panic!("{waited}: {e:?}"))
    }
    let listed = within(
        list(&mut c, None),
        "ListPodSandbox waited for the StopPodSandbox in flight",
    )
    .await;
    let ids: Vec<&str> = listed.iter().map(|p| p.id.as_str()).collect();
    assert!(
        ids.contains(&held.as_str()) && ids.contains(&other.as_str()),
        "{ids:?}"
    );
    within(
        status(&mut c, &held),
        "PodSandboxStatus of the pod being stopped waited for the stop",
    )
    .await;
    let (st, _) = within(
        status(&mut c, &other),
        "PodSandboxStatus of another pod waited",
    )
    .await;
    assert_eq!(st.state, PodSandboxState::SandboxReady as i32);
    within(
        c.list_containers(ListContainersRequest { filter: None }),
        "ListContainers waited",
    )
    .await
    .expect("ListContainers");
    within(
        c.list_pod_sandbox_stats(ListPodSandboxStatsRequest { filter: None }),
        "ListPodSandboxStats waited",
    )
    .await
    .expect("ListPodSandboxStats");
    assert!(
        !stopping.is_finished(),
        "the stop did not wait for its gate"
    );

    std::fs::write(&gate, "").unwrap();
    stopping
        .await
        .unwrap()
        .expect("StopPodSandbox after the gate opened");
    assert_eq!(state(&mut c, &held).await, PodSandboxState::SandboxNotready);
    for id in [&held, &other] {
        stop(&mut c, id).await;
        remove(&mut c, id).await;
    }
    assert_nothing_left(&d, &empty, "the pods after the parked stop");
}
