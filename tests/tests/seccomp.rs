//! Seccomp end to end through CRI against `crustd`: the built-in `RuntimeDefault`
//! profile refuses what containerd's default refuses (new user namespaces through
//! `unshare`) while ordinary commands run, in the container and in `ExecSync`; a
//! `Localhost` profile file (OCI or Docker format, by `localhost_ref` or the
//! deprecated `seccomp_profile_path`) is enforced; a missing profile file is
//! `InvalidArgument` and leaves nothing behind.

use cri_api::*;
use crust_e2e::crustd::Crustd;
use crust_e2e::{require_root, which, TempDir};
use image::layout::{write_oci_layout, Compression, LayerBuilder, LayoutEntry, LayoutImage};
use std::time::{Duration, Instant};
use tonic::transport::Channel;
use tonic::Code;

type Client = RuntimeServiceClient<Channel>;

const IMAGE: &str = "docker.io/library/busybox:seccomp";

const APPLETS: &[&str] = &[
    "sh", "echo", "cat", "grep", "sleep", "mkdir", "unshare", "true",
];

fn root() -> bool {
    require_root(&["ip", "nsenter", "nft", "busybox"])
}

/// Imports a busybox image with the applets above into the daemon's store.
fn import_busybox(d: &Crustd) {
    let bb = which("busybox").expect("busybox");
    let mut l = LayerBuilder::new()
        .dir("bin", 0o755)
        .file_from("bin/busybox", &bb, 0o755)
        .dir("etc", 0o755)
        .file("etc/passwd", b"root:x:0:0:root:/root:/bin/sh\n", 0o644)
        .file("etc/group", b"root:x:0:\n", 0o644)
        .dir("tmp", 0o1777);
    for a in APPLETS {
        l = l.symlink(&format!("bin/{a}"), "busybox");
    }
    let mut img = LayoutImage::new(vec![(l.finish(), Compression::Gzip)]);
    img.config.cmd = vec!["/bin/sh".into()];
    img.config.env = vec!["PATH=/bin".into()];
    let t = TempDir::new("layout");
    write_oci_layout(
        t.path(),
        &[LayoutEntry {
            ref_name: Some("seccomp".into()),
            image_name: Some(IMAGE.into()),
            platforms: vec![img],
        }],
    );
    let store = image::ImageStore::open(d.root.path().join("images"), None).unwrap();
    store.import(t.path()).expect("importing busybox");
}

struct Env {
    d: Crustd,
    c: Client,
    logs: TempDir,
}

async fn setup() -> Env {
    let d = Crustd::start();
    import_busybox(&d);
    let c = d.client().await;
    Env {
        d,
        c,
        logs: TempDir::new("logs"),
    }
}

impl Env {
    async fn pod(&mut self, name: &str) -> (String, PodSandboxConfig) {
        let cfg = PodSandboxConfig {
            metadata: Some(PodSandboxMetadata {
                name: name.into(),
                uid: format!("uid-{name}"),
                namespace: "default".into(),
                attempt: 0,
            }),
            hostname: name.into(),
            log_directory: self.logs.path().join(name).display().to_string(),
            linux: Some(LinuxPodSandboxConfig::default()),
            ..Default::default()
        };
        let id = self
            .c
            .run_pod_sandbox(RunPodSandboxRequest {
                config: Some(cfg.clone()),
                runtime_handler: String::new(),
            })
            .await
            .expect("RunPodSandbox")
            .into_inner()
            .pod_sandbox_id;
        (id, cfg)
    }

    async fn try_create(
        &mut self,
        pod: &(String, PodSandboxConfig),
        cfg: ContainerConfig,
    ) -> Result<String, tonic::Status> {
        self.c
            .create_container(CreateContainerRequest {
                pod_sandbox_id: pod.0.clone(),
                config: Some(cfg),
                sandbox_config: Some(pod.1.clone()),
            })
            .await
            .map(|r| r.into_inner().container_id)
    }

    async fn start(&mut self, id: &str) {
        self.c
            .start_container(StartContainerRequest {
                container_id: id.into(),
            })
            .await
            .expect("StartContainer");
    }

    /// Creates and starts a container, waits for it to exit; its status and log text.
    async fn run(
        &mut self,
        pod: &(String, PodSandboxConfig),
        cfg: ContainerConfig,
    ) -> (i32, String) {
        let id = self.try_create(pod, cfg).await.expect("CreateContainer");
        self.start(&id).await;
        let deadline = Instant::now() + Duration::from_secs(20);
        let s = loop {
            let s = self
                .c
                .container_status(ContainerStatusRequest {
                    container_id: id.clone(),
                    verbose: false,
                })
                .await
                .expect("ContainerStatus")
                .into_inner()
                .status
                .unwrap();
            if s.state == ContainerState::ContainerExited as i32 {
                break s;
            }
            assert!(Instant::now() < deadline, "{id} did not exit: {s:?}");
            tokio::time::sleep(Duration::from_millis(20)).await;
        };
        let log = std::fs::read_to_string(&s.log_path).unwrap_or_default();
        (s.exit_code, log)
    }

    async fn exec(&mut self, id: &str, cmd: &[&str]) -> ExecSyncResponse {
        self.c
            .exec_sync(ExecSyncRequest {
                container_id: id.into(),
                cmd: cmd.iter().map(|s| s.to_string()).collect(),
                timeout: 10,
            })
            .await
            .expect("ExecSync")
            .into_inner()
    }
}

fn ctr(name: &str, cmd: &[&str], seccomp: Option<SecurityProfile>) -> ContainerConfig {
    ContainerConfig {
        metadata: Some(ContainerMetadata {
            name: name.into(),
            attempt: 0,
        }),
        image: Some(ImageSpec {
            image: IMAGE.into(),
            ..Default::default()
        }),
        command: cmd.iter().map(|s| s.to_string()).collect(),
        log_path: format!("{name}/0.log"),
        linux: Some(LinuxContainerConfig {
            security_context: Some(LinuxContainerSecurityContext {
                seccomp,
                ..Default::default()
            }),
            ..Default::default()
        }),
        ..Default::default()
    }
}

fn profile(t: security_profile::ProfileType, localhost_ref: &str) -> Option<SecurityProfile> {
    Some(SecurityProfile {
        profile_type: t as i32,
        localhost_ref: localhost_ref.into(),
    })
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn container_dirs(d: &Crustd) -> Vec<String> {
    std::fs::read_dir(d.root.path().join("containers"))
        .map(|r| {
            r.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default()
}

/// `unshare -U` (a new user namespace, which needs no capability) works unconfined
/// and is refused by the default profile, in the container and in ExecSync; ordinary
/// commands run.
#[tokio::test]
async fn runtime_default_refuses_unshare_and_runs_the_rest() {
    if !root() {
        return;
    }
    use security_profile::ProfileType as T;
    let mut e = setup().await;
    let pod = e.pod("scdefault").await;
    let script = "echo hello; grep Seccomp: /proc/self/status; unshare -U true; echo rc=$?";

    let (code, log) = e
        .run(
            &pod,
            ctr("free", &["sh", "-c", script], profile(T::Unconfined, "")),
        )
        .await;
    assert_eq!(code, 0, "{log}");
    assert!(log.contains("Seccomp:\t0") && log.contains("rc=0"), "{log}");

    let (code, log) = e
        .run(
            &pod,
            ctr(
                "dflt",
                &["sh", "-c", script],
                profile(T::RuntimeDefault, ""),
            ),
        )
        .await;
    assert_eq!(code, 0, "{log}");
    assert!(log.contains("hello"), "{log}");
    assert!(log.contains("Seccomp:\t2"), "{log}");
    assert!(
        log.contains("Operation not permitted") && log.contains("rc=1"),
        "{log}"
    );

    // ExecSync gets the container's filter.
    let id = e
        .try_create(
            &pod,
            ctr("long", &["sleep", "300"], profile(T::RuntimeDefault, "")),
        )
        .await
        .expect("CreateContainer");
    e.start(&id).await;
    let r = e.exec(&id, &["echo", "ok"]).await;
    assert_eq!((r.exit_code, text(&r.stdout)), (0, "ok\n".into()));
    let r = e
        .exec(&id, &["grep", "Seccomp:", "/proc/self/status"])
        .await;
    assert_eq!(text(&r.stdout), "Seccomp:\t2\n");
    let r = e.exec(&id, &["unshare", "-U", "true"]).await;
    assert_ne!(r.exit_code, 0);
    assert!(text(&r.stderr).contains("Operation not permitted"), "{r:?}");
}

/// A profile file on the node: OCI format by `localhost_ref`, Docker format by the
/// deprecated `seccomp_profile_path`.
#[tokio::test]
async fn localhost_profiles_are_enforced() {
    if !root() {
        return;
    }
    let mut e = setup().await;
    let pod = e.pod("sclocal").await;
    let dir = TempDir::new("profiles");
    let oci = dir.path().join("no-mkdir.json");
    std::fs::write(
        &oci,
        r#"{"defaultAction": "SCMP_ACT_ALLOW",
            "syscalls": [{"names": ["mkdir", "mkdirat"], "action": "SCMP_ACT_ERRNO"}]}"#,
    )
    .unwrap();
    let docker = dir.path().join("docker.json");
    std::fs::write(
        &docker,
        r#"{"defaultAction": "SCMP_ACT_ALLOW",
            "archMap": [{"architecture": "SCMP_ARCH_X86_64", "subArchitectures": ["SCMP_ARCH_X86"]}],
            "syscalls": [{"name": "mkdir", "action": "SCMP_ACT_ERRNO", "args": []},
                         {"name": "mkdirat", "action": "SCMP_ACT_ERRNO", "comment": "busybox may use either"}]}"#,
    )
    .unwrap();
    let script = "echo start; mkdir /tmp/d; echo rc=$?";

    let cfg = ctr(
        "oci",
        &["sh", "-c", script],
        profile(
            security_profile::ProfileType::Localhost,
            oci.to_str().unwrap(),
        ),
    );
    let (code, log) = e.run(&pod, cfg).await;
    assert_eq!(code, 0, "{log}");
    assert!(log.contains("start") && log.contains("rc=1"), "{log}");
    assert!(log.contains("Operation not permitted"), "{log}");

    let mut cfg = ctr("docker", &["sh", "-c", script], None);
    #[allow(deprecated)]
    {
        cfg.linux
            .as_mut()
            .unwrap()
            .security_context
            .as_mut()
            .unwrap()
            .seccomp_profile_path = format!("localhost/{}", docker.display());
    }
    let (code, log) = e.run(&pod, cfg).await;
    assert_eq!(code, 0, "{log}");
    assert!(
        log.contains("rc=1") && log.contains("Operation not permitted"),
        "{log}"
    );
}

/// A missing profile: InvalidArgument naming the path, and no container, snapshot
/// or sandbox resource left.
#[tokio::test]
async fn a_missing_localhost_profile_is_invalid_argument() {
    if !root() {
        return;
    }
    let mut e = setup().await;
    let pod = e.pod("scmissing").await;
    let before = e.d.leftovers();
    let missing = "/nonexistent/crust-seccomp/profile.json";
    let r = e
        .try_create(
            &pod,
            ctr(
                "c",
                &["true"],
                profile(security_profile::ProfileType::Localhost, missing),
            ),
        )
        .await;
    let s = r.expect_err("a missing profile must fail");
    assert_eq!(s.code(), Code::InvalidArgument, "{}", s.message());
    assert!(s.message().contains(missing), "{}", s.message());
    assert!(
        container_dirs(&e.d).is_empty(),
        "{:?}",
        container_dirs(&e.d)
    );
    let snapshots = std::fs::read_dir(e.d.root.path().join("images/snapshots"))
        .map(|r| r.count())
        .unwrap_or(0);
    assert_eq!(snapshots, 0);
    assert_eq!(e.d.leftovers(), before);
}
