//! Crash at every step (issue 14): for each failpoint of crustd (the list in
//! crates/crustd/src/daemon/failpoint_steps.rs, one test per step, named
//! `rpc::step`), a daemon started with `CRUST_FAILPOINT=rpc.step` is driven into that
//! RPC and dies there by SIGKILL; restarted on the same dirs without the failpoint, it
//! must show what was acknowledged before whole and usable (a READY pod has its IP and
//! runs a new container; a created container starts; a running one execs), and what
//! the cut RPC touched either whole and usable as well, or rolled back, or cleanly
//! NOTREADY / exited. Then everything is removed through the CRI, and nothing may be
//! left: no record, pin, mount, veth, reserved IP, cgroup, pause or monitor process,
//! container folder, snapshot, or (after RemoveImage) layer or blob.

use cri_api::*;
use crust_e2e::cri::{
    self, busybox_layout, create_container, ctr, import_busybox, list_containers, list_pods,
    pod_status, remove_container, remove_pod, run_pod, start_container, stop_container, stop_pod,
    Client, IMAGE,
};
use crust_e2e::crustd::{dir_names, Crustd, Options};
use crust_e2e::registry::Registry;
use crust_e2e::{require_root, TempDir};
use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::time::Duration;

include!("../../../crates/crustd/src/daemon/failpoint_steps.rs");

macro_rules! crash_tests {
    ($($rpc:ident { $($step:ident),* $(,)? })*) => {
        $(mod $rpc {
            $(
                #[tokio::test]
                async fn $step() {
                    super::crash_at(concat!(stringify!($rpc), ".", stringify!($step))).await;
                }
            )*
        })*
    };
}
failpoint_steps!(crash_tests);

/// What the test made before the RPC that dies, and what that RPC was about.
#[derive(Default)]
struct Made {
    /// An acknowledged pod, and its config.
    pod: Option<(String, PodSandboxConfig)>,
    /// An acknowledged container in it.
    container: Option<String>,
    /// The image containers are made from (the pulled one in PullImage's tests).
    image: String,
}

/// A pod of this suite, in namespace `crash`.
fn pod_config(name: &str, logs: &Path) -> PodSandboxConfig {
    cri::pod_config(name, "crash", logs)
}

/// A container that runs until killed, from `image`: it ignores the stop signal, so a
/// StopContainer cut after sending it leaves it running.
fn sleeper(name: &str, image: &str) -> ContainerConfig {
    let mut c = ctr(name, &["sh", "-c", "trap '' TERM; exec sleep 1000"]);
    c.image = Some(ImageSpec {
        image: image.into(),
        ..Default::default()
    });
    c
}

async fn create(
    c: &mut Client,
    pod: &(String, PodSandboxConfig),
    cfg: ContainerConfig,
) -> Result<String, tonic::Status> {
    create_container(c, &pod.0, &pod.1, cfg).await
}

/// Runs `true` in a running container: it is whole and usable.
async fn exec_true(c: &mut Client, id: &str, what: &str) {
    cri::exec_true(c, id, 10, what).await
}

/// Everything the step's RPC needs made first, through a daemon that has the failpoint
/// set (none of these calls passes it).
async fn prepare(
    rpc: &str,
    d: &Crustd,
    c: &mut Client,
    logs: &Path,
    reg: Option<&Registry>,
) -> Made {
    let mut m = Made {
        image: IMAGE.to_string(),
        ..Default::default()
    };
    match reg {
        Some(reg) => m.image = reg.name("crash/busybox:v1"),
        None => import_busybox(d),
    }
    if matches!(rpc, "run_sandbox" | "pull_image") {
        return m;
    }
    let cfg = pod_config("acked", logs);
    let id = run_pod(c, &cfg).await.expect("RunPodSandbox");
    let pod = (id, cfg);
    if rpc != "create_container" {
        let ctr = create(c, &pod, sleeper("acked", &m.image))
            .await
            .expect("CreateContainer");
        if rpc != "start_container" {
            start_container(c, &ctr).await.expect("StartContainer");
        }
        if matches!(rpc, "remove_container" | "remove_sandbox") {
            stop_container(c, &ctr, 0).await.expect("StopContainer");
        }
        if rpc == "remove_sandbox" {
            stop_pod(c, &pod.0).await.expect("StopPodSandbox");
        }
        m.container = Some(ctr);
    }
    m.pod = Some(pod);
    m
}

/// The RPC the failpoint is in.
async fn call(
    rpc: &str,
    d: &Crustd,
    c: &mut Client,
    m: &Made,
    logs: &Path,
) -> Result<(), tonic::Status> {
    let pod = m.pod.as_ref();
    let ctr = m.container.as_deref().unwrap_or_default();
    match rpc {
        "run_sandbox" => run_pod(c, &pod_config("cut", logs)).await.map(drop),
        "create_container" => create(c, pod.unwrap(), sleeper("cut", &m.image))
            .await
            .map(drop),
        "start_container" => start_container(c, ctr).await,
        // A grace period, so the stop signal goes first.
        "stop_container" => stop_container(c, ctr, 1).await,
        "remove_container" => remove_container(c, ctr).await,
        "stop_sandbox" => stop_pod(c, &pod.unwrap().0).await,
        "remove_sandbox" => remove_pod(c, &pod.unwrap().0).await,
        "pull_image" => d
            .images()
            .await
            .pull_image(PullImageRequest {
                image: Some(ImageSpec {
                    image: m.image.clone(),
                    ..Default::default()
                }),
                ..Default::default()
            })
            .await
            .map(drop),
        other => panic!("no scenario for RPC {other}"),
    }
}

/// After the restart: what was acknowledged is whole and usable; what the cut RPC
/// touched is whole and usable, rolled back, or cleanly NOTREADY / exited.
async fn check(rpc: &str, step: &str, d: &Crustd, c: &mut Client, m: &Made, logs: &Path) {
    let listed = list_pods(c).await;
    let ctrs = list_containers(c).await;
    // What came back, for the reader of a failure (and of --nocapture).
    let mut seen = vec![];
    for p in &listed {
        let name = p
            .metadata
            .as_ref()
            .map(|m| m.name.clone())
            .unwrap_or_default();
        seen.push(format!(
            "pod {name} {:?}",
            PodSandboxState::try_from(p.state)
        ));
    }
    for x in &ctrs {
        let st = c
            .container_status(ContainerStatusRequest {
                container_id: x.id.clone(),
                verbose: false,
            })
            .await
            .expect("ContainerStatus")
            .into_inner()
            .status
            .unwrap();
        let name = x
            .metadata
            .as_ref()
            .map(|m| m.name.clone())
            .unwrap_or_default();
        seen.push(format!(
            "container {name} {:?} {:?} {}",
            ContainerState::try_from(st.state),
            st.reason,
            st.exit_code
        ));
    }
    let images = d
        .images()
        .await
        .list_images(ListImagesRequest::default())
        .await
        .expect("ListImages")
        .into_inner()
        .images;
    seen.extend(images.iter().map(|i| format!("image {:?}", i.repo_tags)));
    eprintln!("{step}: after the restart: {seen:?}");
    // The acknowledged objects are there, unless the cut RPC was removing them.
    if let Some((pod, _)) = &m.pod {
        let found = listed.iter().find(|p| &p.id == pod);
        if rpc != "remove_sandbox" {
            let p = found.unwrap_or_else(|| panic!("{step}: the acknowledged pod is gone"));
            if matches!(
                rpc,
                "create_container" | "start_container" | "stop_container" | "remove_container"
            ) {
                assert_eq!(
                    p.state,
                    PodSandboxState::SandboxReady as i32,
                    "{step}: the acknowledged pod is not ready"
                );
            }
        } else if let Some(p) = found {
            assert_eq!(
                p.state,
                PodSandboxState::SandboxNotready as i32,
                "{step}: a stopped pod came back ready"
            );
        }
    }
    if let Some(id) = &m.container {
        let found = ctrs.iter().find(|x| &x.id == id);
        if !matches!(rpc, "remove_container" | "remove_sandbox") {
            assert!(
                found.is_some(),
                "{step}: the acknowledged container is gone"
            );
        }
        if matches!(rpc, "remove_container" | "remove_sandbox" | "stop_sandbox") {
            if let Some(x) = found {
                assert_eq!(
                    x.state,
                    ContainerState::ContainerExited as i32,
                    "{step}: a stopped container is not exited"
                );
            }
        }
    }
    // What the cut RPC was making is whole, or gone with its name free again: the
    // kubelet retries with the same name and must not find it taken by a husk.
    let cut_name = |m: Option<&ContainerMetadata>| m.is_some_and(|m| m.name == "cut");
    match rpc {
        "run_sandbox" => {
            let cut = listed
                .iter()
                .any(|p| p.metadata.as_ref().unwrap().name == "cut");
            if !cut {
                run_pod(c, &pod_config("cut", logs))
                    .await
                    .unwrap_or_else(|e| panic!("{step}: the rolled-back pod's name: {e:?}"));
            }
        }
        "create_container" => match ctrs.iter().find(|x| cut_name(x.metadata.as_ref())) {
            Some(x) => assert_eq!(
                x.state,
                ContainerState::ContainerCreated as i32,
                "{step}: the cut container is neither whole nor rolled back"
            ),
            None => {
                create(c, m.pod.as_ref().unwrap(), sleeper("cut", &m.image))
                    .await
                    .unwrap_or_else(|e| panic!("{step}: the rolled-back container's name: {e:?}"));
            }
        },
        _ => {}
    }
    // Every pod: READY ones have their address and the network behind it, and run a
    // new container; NOTREADY ones are left for the cleanup.
    for p in &listed {
        assert!(
            p.state == PodSandboxState::SandboxReady as i32
                || p.state == PodSandboxState::SandboxNotready as i32,
            "{step}: pod {} in state {}",
            p.id,
            p.state
        );
        if p.state != PodSandboxState::SandboxReady as i32 {
            continue;
        }
        let st = pod_status(c, &p.id).await.expect("PodSandboxStatus");
        let ip = st
            .network
            .as_ref()
            .map(|n| n.ip.clone())
            .unwrap_or_default();
        d.assert_ready_pod_whole(&d.leftovers(), &p.id, &[&ip], step);
        let name = p.metadata.as_ref().unwrap().name.clone();
        let pod = (p.id.clone(), pod_config(&name, logs));
        let probe = create(c, &pod, sleeper("probe", &m.image))
            .await
            .unwrap_or_else(|e| panic!("{step}: CreateContainer in ready pod {}: {e:?}", p.id));
        start_container(c, &probe)
            .await
            .unwrap_or_else(|e| panic!("{step}: StartContainer in ready pod {}: {e:?}", p.id));
        exec_true(c, &probe, step).await;
    }
    // Every container: a created one starts, a running one execs.
    for x in &ctrs {
        match ContainerState::try_from(x.state).unwrap() {
            ContainerState::ContainerCreated => {
                start_container(c, &x.id).await.unwrap_or_else(|e| {
                    panic!("{step}: a created container does not start: {e:?}")
                });
                exec_true(c, &x.id, step).await;
            }
            ContainerState::ContainerRunning => exec_true(c, &x.id, step).await,
            ContainerState::ContainerExited => {}
            s => panic!("{step}: container {} in state {s:?}", x.id),
        }
    }
    // A pulled image is whole: a container from it runs.
    if rpc == "pull_image" {
        let found = d
            .images()
            .await
            .image_status(ImageStatusRequest {
                image: Some(ImageSpec {
                    image: m.image.clone(),
                    ..Default::default()
                }),
                verbose: false,
            })
            .await
            .expect("ImageStatus")
            .into_inner()
            .image;
        if found.is_some() {
            let cfg = pod_config("puller", logs);
            let id = run_pod(c, &cfg).await.expect("RunPodSandbox");
            let x = create(c, &(id, cfg), sleeper("pulled", &m.image))
                .await
                .unwrap_or_else(|e| panic!("{step}: a container from the pulled image: {e:?}"));
            start_container(c, &x).await.expect("StartContainer");
            exec_true(c, &x, step).await;
        }
    }
}

/// Everything removed through the CRI, as the kubelet would: containers stopped and
/// removed, pods stopped and removed, images removed.
async fn clean_up(step: &str, d: &Crustd, c: &mut Client) {
    for x in list_containers(c).await {
        stop_container(c, &x.id, 0)
            .await
            .unwrap_or_else(|e| panic!("{step}: StopContainer {}: {e:?}", x.id));
        remove_container(c, &x.id)
            .await
            .unwrap_or_else(|e| panic!("{step}: RemoveContainer {}: {e:?}", x.id));
    }
    for p in list_pods(c).await {
        stop_pod(c, &p.id)
            .await
            .unwrap_or_else(|e| panic!("{step}: StopPodSandbox {}: {e:?}", p.id));
        remove_pod(c, &p.id)
            .await
            .unwrap_or_else(|e| panic!("{step}: RemovePodSandbox {}: {e:?}", p.id));
    }
    let mut images = d.images().await;
    let list = images
        .list_images(ListImagesRequest::default())
        .await
        .expect("ListImages")
        .into_inner()
        .images;
    for i in list {
        images
            .remove_image(RemoveImageRequest {
                image: Some(ImageSpec {
                    image: i.id.clone(),
                    ..Default::default()
                }),
            })
            .await
            .unwrap_or_else(|e| panic!("{step}: RemoveImage {}: {e:?}", i.id));
    }
}

async fn crash_at(step: &str) {
    let pull = step.starts_with("pull_image.");
    let tools: &[&str] = if pull {
        &[
            "ip",
            "nsenter",
            "nft",
            "busybox",
            "docker-registry",
            "skopeo",
        ]
    } else {
        &["ip", "nsenter", "nft", "busybox"]
    };
    if !require_root(tools) {
        return;
    }
    let rpc = step.split('.').next().unwrap();
    let mut d = Crustd::start_with(Options {
        env: vec![("CRUST_FAILPOINT".into(), step.into())],
        ..Default::default()
    });
    let logs = TempDir::new("crl");
    let empty = d.leftovers();
    let reg = pull.then(|| {
        let reg = Registry::start_with(None, Some(&d.node));
        let layout = TempDir::new("crlay");
        busybox_layout(layout.path(), "crash/busybox:v1");
        reg.push(layout.path(), "e2e", "crash/busybox:v1");
        reg
    });
    let mut c = d.client().await;
    let made = prepare(rpc, &d, &mut c, logs.path(), reg.as_ref()).await;

    let res = call(rpc, &d, &mut c, &made, logs.path()).await;
    assert!(
        res.is_err(),
        "{step}: the RPC succeeded: the failpoint was not reached\n{}",
        d.log_text()
    );
    drop(c);
    let st = d
        .wait_exit(Duration::from_secs(10))
        .unwrap_or_else(|| panic!("{step}: crustd still runs after the RPC failed: {res:?}"));
    assert_eq!(
        st.signal(),
        Some(libc::SIGKILL),
        "{step}: crustd ended with {st}\n{}",
        d.log_text()
    );
    assert!(
        d.log_text().contains(&format!("failpoint {step}: SIGKILL")),
        "{step}: crustd died elsewhere\n{}",
        d.log_text()
    );

    d.opts.env.clear();
    d.spawn();
    let mut c = d.client().await;
    if std::env::var_os("CRUST_CRASH_LOG").is_some() {
        eprintln!("{step}: crustd's log:\n{}", d.log_text());
    }
    check(rpc, step, &d, &mut c, &made, logs.path()).await;
    clean_up(step, &d, &mut c).await;

    d.assert_clean(&empty, step);
    // What RemoveImage took: the image store's layers and blobs.
    let root = d.root.path();
    for dir in [
        root.join("images/layers"),
        root.join("images/blobs/sha256"),
        root.join("images/tmp"),
    ] {
        assert_eq!(
            dir_names(&dir),
            Vec::<String>::new(),
            "{step}: left in {}",
            dir.display()
        );
    }
}
