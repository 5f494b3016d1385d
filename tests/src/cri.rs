//! CRI helpers for the container tests: a crustd with a busybox-static image in its
//! store, pods with a log directory, containers configured the way the kubelet does,
//! and readers of what they leave (CRI log lines, bundles, snapshots).

use crate::crustd::Crustd;
use crate::{which, TempDir};
use cri_api::*;
use image::layout::{write_oci_layout, Compression, LayerBuilder, LayoutEntry, LayoutImage};
use std::path::Path;
use std::time::{Duration, Instant};
use tonic::transport::Channel;
use tonic::Code;

pub type Client = RuntimeServiceClient<Channel>;

/// The image [`import_busybox`] imports (`busybox:e2e` resolves to it).
pub const IMAGE: &str = "docker.io/library/busybox:e2e";

/// The applets the image links to `/bin/busybox`.
pub const APPLETS: &[&str] = &[
    "sh", "echo", "cat", "ls", "sleep", "id", "head", "tr", "touch", "grep", "pwd", "tty", "true",
    "printf", "dd", "wc", "seq", "kill", "mkdir", "unshare", "httpd", "stty", "tar", "cmp",
];

/// RunPodSandbox of `cfg` on the default handler, its error left to the caller (for
/// tests where a refusal is one of the outcomes).
pub async fn run_pod(c: &mut Client, cfg: &PodSandboxConfig) -> Result<String, tonic::Status> {
    c.run_pod_sandbox(RunPodSandboxRequest {
        config: Some(cfg.clone()),
        runtime_handler: String::new(),
    })
    .await
    .map(|r| r.into_inner().pod_sandbox_id)
}

/// A pod's config as the kubelet sends it: `name` in `namespace`, uid `uid-NAME`, its
/// container logs under `logs/NAME`.
pub fn pod_config(name: &str, namespace: &str, logs: &Path) -> PodSandboxConfig {
    PodSandboxConfig {
        metadata: Some(PodSandboxMetadata {
            name: name.into(),
            uid: format!("uid-{name}"),
            namespace: namespace.into(),
            attempt: 0,
        }),
        hostname: name.into(),
        log_directory: logs.join(name).display().to_string(),
        linux: Some(LinuxPodSandboxConfig::default()),
        ..Default::default()
    }
}

/// CreateContainer of `cfg` in pod `pod` (made from `sandbox`); the error is the
/// caller's, as for the other RPC wrappers below.
pub async fn create_container(
    c: &mut Client,
    pod: &str,
    sandbox: &PodSandboxConfig,
    cfg: ContainerConfig,
) -> Result<String, tonic::Status> {
    c.create_container(CreateContainerRequest {
        pod_sandbox_id: pod.into(),
        config: Some(cfg),
        sandbox_config: Some(sandbox.clone()),
    })
    .await
    .map(|r| r.into_inner().container_id)
}

pub async fn start_container(c: &mut Client, id: &str) -> Result<(), tonic::Status> {
    c.start_container(StartContainerRequest {
        container_id: id.into(),
    })
    .await
    .map(drop)
}

pub async fn stop_container(c: &mut Client, id: &str, timeout: i64) -> Result<(), tonic::Status> {
    c.stop_container(StopContainerRequest {
        container_id: id.into(),
        timeout,
    })
    .await
    .map(drop)
}

pub async fn remove_container(c: &mut Client, id: &str) -> Result<(), tonic::Status> {
    c.remove_container(RemoveContainerRequest {
        container_id: id.into(),
    })
    .await
    .map(drop)
}

pub async fn stop_pod(c: &mut Client, id: &str) -> Result<(), tonic::Status> {
    c.stop_pod_sandbox(StopPodSandboxRequest {
        pod_sandbox_id: id.into(),
    })
    .await
    .map(drop)
}

pub async fn remove_pod(c: &mut Client, id: &str) -> Result<(), tonic::Status> {
    c.remove_pod_sandbox(RemovePodSandboxRequest {
        pod_sandbox_id: id.into(),
    })
    .await
    .map(drop)
}

/// Every pod ListPodSandbox lists, unfiltered.
pub async fn list_pods(c: &mut Client) -> Vec<PodSandbox> {
    c.list_pod_sandbox(ListPodSandboxRequest::default())
        .await
        .expect("ListPodSandbox")
        .into_inner()
        .items
}

/// Every container ListContainers lists, unfiltered.
pub async fn list_containers(c: &mut Client) -> Vec<Container> {
    c.list_containers(ListContainersRequest::default())
        .await
        .expect("ListContainers")
        .into_inner()
        .containers
}

/// A verbose ContainerStatus: the status and the parsed `info` (pid, monitorPid, ...).
pub async fn container_status(
    c: &mut Client,
    id: &str,
) -> Result<(ContainerStatus, serde_json::Value), tonic::Status> {
    let r = c
        .container_status(ContainerStatusRequest {
            container_id: id.into(),
            verbose: true,
        })
        .await?
        .into_inner();
    Ok((r.status.unwrap(), verbose_info(&r.info)))
}

/// The `info` entry of a verbose status parsed (the runtime's own JSON), or null.
pub fn verbose_info(info: &std::collections::HashMap<String, String>) -> serde_json::Value {
    info.get("info")
        .map(|s| serde_json::from_str(s).expect("verbose info is JSON"))
        .unwrap_or_default()
}

/// A pod's PodSandboxStatus, not verbose.
pub async fn pod_status(c: &mut Client, id: &str) -> Result<PodSandboxStatus, tonic::Status> {
    Ok(c.pod_sandbox_status(PodSandboxStatusRequest {
        pod_sandbox_id: id.into(),
        verbose: false,
    })
    .await?
    .into_inner()
    .status
    .unwrap())
}

pub async fn exec_sync(
    c: &mut Client,
    id: &str,
    cmd: &[&str],
    timeout: i64,
) -> Result<ExecSyncResponse, tonic::Status> {
    c.exec_sync(ExecSyncRequest {
        container_id: id.into(),
        cmd: cmd.iter().map(|s| s.to_string()).collect(),
        timeout,
    })
    .await
    .map(|r| r.into_inner())
}

/// Runs `true` in a running container (ExecSync, `timeout` seconds): it is whole and
/// usable, not only listed.
pub async fn exec_true(c: &mut Client, id: &str, timeout: i64, what: &str) {
    let r = exec_sync(c, id, &["true"], timeout)
        .await
        .unwrap_or_else(|e| panic!("{what}: ExecSync in {id}: {e:?}"));
    assert_eq!(r.exit_code, 0, "{what}: `true` in {id}: {r:?}");
}

/// Imports the busybox image into the daemon's store (the store is shared on disk).
pub fn import_busybox(d: &Crustd) {
    let t = TempDir::new("layout");
    busybox_layout(t.path(), IMAGE);
    let store = image::ImageStore::open(d.root.path().join("images"), None).unwrap();
    store.import(t.path()).expect("importing busybox");
}

/// Writes the busybox image as an OCI layout in `dir`, ref name `e2e`, with
/// `image_name` as the name an import gives it.
pub fn busybox_layout(dir: &Path, image_name: &str) {
    layout_of(dir, image_name, busybox_layer());
}

/// The busybox image's one layer, for tests that make images of their own from it (more
/// applets, symlinks): `/bin/busybox` with [`APPLETS`], `/etc/passwd` and `/etc/group`,
/// `/data` and `/tmp`.
pub fn busybox_layer() -> LayerBuilder {
    busybox_base(
        b"root:x:0:0:root:/root:/bin/sh\nuser:x:1000:1000::/home/user:/bin/sh\n",
        b"root:x:0:\nuser:x:1000:\nextra:x:2000:user\n",
        APPLETS,
    )
    .dir("data", 0o755)
}

/// The node's static busybox as a layer: `/bin/busybox` with `applets` linked to it,
/// `/etc/passwd` and `/etc/group` as given, and `/tmp`.
pub fn busybox_base(passwd: &[u8], group: &[u8], applets: &[&str]) -> LayerBuilder {
    let bb = which("busybox").expect("busybox");
    let mut l = LayerBuilder::new()
        .dir("bin", 0o755)
        .file_from("bin/busybox", &bb, 0o755)
        .dir("etc", 0o755)
        .file("etc/passwd", passwd, 0o644)
        .file("etc/group", group, 0o644)
        .dir("tmp", 0o1777);
    for a in applets {
        l = l.symlink(&format!("bin/{a}"), "busybox");
    }
    l
}

/// Writes an image of the one layer `layer` (the busybox image's config: `sh`,
/// `PATH=/bin`) as an OCI layout in `dir`, ref name `e2e`, named `image_name`.
pub fn layout_of(dir: &Path, image_name: &str, layer: LayerBuilder) {
    let mut img = LayoutImage::new(vec![(layer.finish(), Compression::Gzip)]);
    img.config.cmd = vec!["/bin/sh".into()];
    img.config.env = vec!["PATH=/bin".into(), "FROM_IMAGE=yes".into()];
    write_oci_layout(
        dir,
        &[LayoutEntry {
            ref_name: Some("e2e".into()),
            image_name: Some(image_name.into()),
            platforms: vec![img],
        }],
    );
}

/// Imports an image of the one layer `layer` (see [`layout_of`]) into the daemon's
/// store as `image_name`.
pub fn import_layer(d: &Crustd, image_name: &str, layer: LayerBuilder) {
    let t = TempDir::new("layout");
    layout_of(t.path(), image_name, layer);
    let store = image::ImageStore::open(d.root.path().join("images"), None).unwrap();
    store
        .import(t.path())
        .unwrap_or_else(|e| panic!("importing {image_name}: {e}"));
}

/// A crustd with the busybox image, a CRI client, and a folder for pod logs.
pub struct Env {
    pub d: Crustd,
    pub c: Client,
    pub logs: TempDir,
}

/// A crustd started with every default and the busybox image imported.
pub async fn setup() -> Env {
    Env::with(Crustd::start()).await
}

impl Env {
    /// Around a crustd already started; imports the busybox image.
    pub async fn with(d: Crustd) -> Env {
        import_busybox(&d);
        let c = d.client().await;
        Env {
            d,
            c,
            logs: TempDir::new("logs"),
        }
    }

    pub async fn pod(&mut self, name: &str) -> (String, PodSandboxConfig) {
        self.pod_with(name, |_| {}).await
    }

    /// [`Env::pod`] with the config changed by `change` first.
    pub async fn pod_with(
        &mut self,
        name: &str,
        change: impl FnOnce(&mut PodSandboxConfig),
    ) -> (String, PodSandboxConfig) {
        self.pod_on(name, "", change).await
    }

    /// [`Env::pod_with`] for runtime handler `handler`.
    pub async fn pod_on(
        &mut self,
        name: &str,
        handler: &str,
        change: impl FnOnce(&mut PodSandboxConfig),
    ) -> (String, PodSandboxConfig) {
        let mut cfg = pod_config(name, "default", self.logs.path());
        change(&mut cfg);
        let id = self
            .c
            .run_pod_sandbox(RunPodSandboxRequest {
                config: Some(cfg.clone()),
                runtime_handler: handler.into(),
            })
            .await
            .expect("RunPodSandbox")
            .into_inner()
            .pod_sandbox_id;
        (id, cfg)
    }

    pub async fn try_create(
        &mut self,
        pod: &(String, PodSandboxConfig),
        cfg: ContainerConfig,
    ) -> Result<String, tonic::Status> {
        create_container(&mut self.c, &pod.0, &pod.1, cfg).await
    }

    pub async fn create(
        &mut self,
        pod: &(String, PodSandboxConfig),
        cfg: ContainerConfig,
    ) -> String {
        self.try_create(pod, cfg).await.expect("CreateContainer")
    }

    pub async fn start(&mut self, id: &str) {
        start_container(&mut self.c, id)
            .await
            .expect("StartContainer");
    }

    /// StopContainer with a grace period of `timeout` seconds.
    pub async fn stop(&mut self, id: &str, timeout: i64) {
        stop_container(&mut self.c, id, timeout)
            .await
            .expect("StopContainer");
    }

    /// The runtime's Status (features, handlers, conditions).
    pub async fn runtime_status(&mut self) -> StatusResponse {
        self.c
            .status(StatusRequest::default())
            .await
            .expect("Status")
            .into_inner()
    }

    /// The runtime's verbose Status (with its `info` map).
    pub async fn runtime_status_verbose(&mut self) -> StatusResponse {
        self.c
            .status(StatusRequest { verbose: true })
            .await
            .expect("Status")
            .into_inner()
    }

    /// The features a runtime handler reports.
    pub async fn handler_features(&mut self, handler: &str) -> RuntimeHandlerFeatures {
        let st = self.runtime_status().await;
        st.runtime_handlers
            .iter()
            .find(|h| h.name == handler)
            .and_then(|h| h.features)
            .unwrap_or_else(|| panic!("no features for handler {handler:?}: {st:?}"))
    }

    pub async fn status(&mut self, id: &str) -> (ContainerStatus, serde_json::Value) {
        container_status(&mut self.c, id)
            .await
            .expect("ContainerStatus")
    }

    /// The pid of a started container's init and of its monitor, from its verbose
    /// status.
    pub async fn pids(&mut self, id: &str) -> (i64, i64) {
        let (_, info) = self.status(id).await;
        (
            info["pid"].as_i64().unwrap(),
            info["monitorPid"].as_i64().unwrap(),
        )
    }

    pub async fn wait_exited(&mut self, id: &str) -> ContainerStatus {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let (s, _) = self.status(id).await;
            if s.state == ContainerState::ContainerExited as i32 {
                return s;
            }
            assert!(Instant::now() < deadline, "{id} did not exit: {s:?}");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    pub async fn exec(
        &mut self,
        id: &str,
        cmd: &[&str],
        timeout: i64,
    ) -> Result<ExecSyncResponse, tonic::Status> {
        exec_sync(&mut self.c, id, cmd, timeout).await
    }

    pub async fn remove(&mut self, id: &str) {
        remove_container(&mut self.c, id)
            .await
            .expect("RemoveContainer");
    }

    pub async fn stop_pod(&mut self, id: &str) {
        stop_pod(&mut self.c, id).await.expect("StopPodSandbox");
    }

    /// StopPodSandbox, then RemovePodSandbox (which takes the pod's containers along).
    pub async fn remove_pod(&mut self, id: &str) {
        self.stop_pod(id).await;
        remove_pod(&mut self.c, id).await.expect("RemovePodSandbox");
    }
}

/// A container that grows past its 16 MiB memory limit at once: the OOM killer's.
pub fn memory_hog(name: &str) -> ContainerConfig {
    let mut cfg = ctr(
        name,
        &[
            "sh",
            "-c",
            "x=$(head -c 200000000 /dev/zero | tr '\\0' a); echo done",
        ],
    );
    res(&mut cfg).memory_limit_in_bytes = 16 << 20;
    cfg
}

pub fn ctr(name: &str, cmd: &[&str]) -> ContainerConfig {
    ContainerConfig {
        metadata: Some(ContainerMetadata {
            name: name.into(),
            attempt: 0,
        }),
        image: Some(ImageSpec {
            image: "busybox:e2e".into(),
            ..Default::default()
        }),
        command: cmd.iter().map(|s| s.to_string()).collect(),
        log_path: format!("{name}/0.log"),
        linux: Some(LinuxContainerConfig::default()),
        ..Default::default()
    }
}

pub fn sc(c: &mut ContainerConfig) -> &mut LinuxContainerSecurityContext {
    c.linux
        .get_or_insert_with(Default::default)
        .security_context
        .get_or_insert_with(Default::default)
}

pub fn res(c: &mut ContainerConfig) -> &mut LinuxContainerResources {
    c.linux
        .get_or_insert_with(Default::default)
        .resources
        .get_or_insert_with(Default::default)
}

/// One parsed CRI log line: time, stream, tag, text.
pub fn log_lines(path: &Path) -> Vec<(String, String, String, String)> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(|l| {
            let mut it = l.splitn(4, ' ');
            let t = it.next().unwrap().to_string();
            let s = it.next().unwrap_or("").to_string();
            let tag = it.next().unwrap_or("").to_string();
            let text = it.next().unwrap_or("").to_string();
            (t, s, tag, text)
        })
        .collect()
}

/// Waits, 10 s at most, until the CRI log at `path` has a line whose text `f` accepts
/// (a container saying it got somewhere); returns the lines then.
pub async fn wait_log(
    path: &Path,
    what: &str,
    f: impl Fn(&str) -> bool,
) -> Vec<(String, String, String, String)> {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let lines = log_lines(path);
        if lines.iter().any(|l| f(&l.3)) {
            return lines;
        }
        assert!(
            Instant::now() < deadline,
            "no {what} in {}: {lines:?}",
            path.display()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

pub fn assert_code<T: std::fmt::Debug>(r: Result<T, tonic::Status>, code: Code, what: &str) {
    match r {
        Ok(v) => panic!("{what}: succeeded ({v:?}) but should fail with {code:?}"),
        Err(s) => {
            assert_eq!(s.code(), code, "{what}: {}", s.message());
            assert!(!s.message().is_empty(), "{what}: error without a message");
        }
    }
}

pub fn container_dirs(d: &Crustd) -> Vec<String> {
    std::fs::read_dir(d.root.path().join("containers"))
        .map(|r| {
            r.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default()
}

pub fn snapshots(d: &Crustd) -> usize {
    std::fs::read_dir(d.root.path().join("images/snapshots"))
        .map(|r| r.count())
        .unwrap_or(0)
}
