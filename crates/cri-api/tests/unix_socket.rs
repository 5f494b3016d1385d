//! A tonic server on a unix socket answers a client made with `connect_unix`.

use std::path::{Path, PathBuf};
use std::pin::Pin;

use cri_api::*;
use tokio::net::UnixListener;
use tokio_stream::wrappers::UnixListenerStream;
use tokio_stream::Stream;
use tonic::{Request, Response, Status};

/// A runtime that only answers `Version`; every other RPC is unimplemented.
struct VersionOnly;

/// Implements `RuntimeService` for `$ty`: `version` answers as runtime "test", and
/// every listed unary RPC (and the event stream) returns `Status::unimplemented`.
macro_rules! version_only_runtime {
    ($ty:ty { $($method:ident($req:ident) -> $resp:ident;)* }) => {
        #[tonic::async_trait]
        impl RuntimeService for $ty {
            type GetContainerEventsStream =
                Pin<Box<dyn Stream<Item = Result<ContainerEventResponse, Status>> + Send>>;

            async fn version(
                &self,
                request: Request<VersionRequest>,
            ) -> Result<Response<VersionResponse>, Status> {
                Ok(Response::new(VersionResponse {
                    version: request.into_inner().version,
                    runtime_name: "test".into(),
                    runtime_version: "0.0.1".into(),
                    runtime_api_version: "v1".into(),
                }))
            }

            async fn get_container_events(
                &self,
                _request: Request<GetEventsRequest>,
            ) -> Result<Response<Self::GetContainerEventsStream>, Status> {
                Err(Status::unimplemented("get_container_events"))
            }

            $(
                async fn $method(
                    &self,
                    _request: Request<$req>,
                ) -> Result<Response<$resp>, Status> {
                    Err(Status::unimplemented(stringify!($method)))
                }
            )*
        }
    };
}

version_only_runtime!(VersionOnly {
    run_pod_sandbox(RunPodSandboxRequest) -> RunPodSandboxResponse;
    stop_pod_sandbox(StopPodSandboxRequest) -> StopPodSandboxResponse;
    remove_pod_sandbox(RemovePodSandboxRequest) -> RemovePodSandboxResponse;
    pod_sandbox_status(PodSandboxStatusRequest) -> PodSandboxStatusResponse;
    list_pod_sandbox(ListPodSandboxRequest) -> ListPodSandboxResponse;
    create_container(CreateContainerRequest) -> CreateContainerResponse;
    start_container(StartContainerRequest) -> StartContainerResponse;
    stop_container(StopContainerRequest) -> StopContainerResponse;
    remove_container(RemoveContainerRequest) -> RemoveContainerResponse;
    list_containers(ListContainersRequest) -> ListContainersResponse;
    container_status(ContainerStatusRequest) -> ContainerStatusResponse;
    update_container_resources(UpdateContainerResourcesRequest) -> UpdateContainerResourcesResponse;
    reopen_container_log(ReopenContainerLogRequest) -> ReopenContainerLogResponse;
    exec_sync(ExecSyncRequest) -> ExecSyncResponse;
    exec(ExecRequest) -> ExecResponse;
    attach(AttachRequest) -> AttachResponse;
    port_forward(PortForwardRequest) -> PortForwardResponse;
    container_stats(ContainerStatsRequest) -> ContainerStatsResponse;
    list_container_stats(ListContainerStatsRequest) -> ListContainerStatsResponse;
    pod_sandbox_stats(PodSandboxStatsRequest) -> PodSandboxStatsResponse;
    list_pod_sandbox_stats(ListPodSandboxStatsRequest) -> ListPodSandboxStatsResponse;
    update_runtime_config(UpdateRuntimeConfigRequest) -> UpdateRuntimeConfigResponse;
    status(StatusRequest) -> StatusResponse;
    checkpoint_container(CheckpointContainerRequest) -> CheckpointContainerResponse;
    list_metric_descriptors(ListMetricDescriptorsRequest) -> ListMetricDescriptorsResponse;
    list_pod_sandbox_metrics(ListPodSandboxMetricsRequest) -> ListPodSandboxMetricsResponse;
    runtime_config(RuntimeConfigRequest) -> RuntimeConfigResponse;
});

/// A fresh directory under the system temp dir, removed on drop (even if the test panics).
struct TempDir(PathBuf);

impl TempDir {
    fn new(tag: &str) -> Self {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .expect("clock after 1970")
            .subsec_nanos();
        let path =
            std::env::temp_dir().join(format!("cri-api-{tag}-{}-{nanos}", std::process::id()));
        std::fs::create_dir(&path).expect("create temp dir");
        TempDir(path)
    }

    fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

#[tokio::test]
async fn version_over_unix_socket() {
    let dir = TempDir::new("version");
    let socket = dir.path().join("runtime.sock");
    let incoming = UnixListenerStream::new(UnixListener::bind(&socket).expect("bind socket"));

    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(RuntimeServiceServer::new(VersionOnly))
            .serve_with_incoming_shutdown(incoming, async {
                let _ = stop_rx.await;
            }),
    );

    let channel = connect_unix(&socket).await.expect("connect to socket");
    let mut client = RuntimeServiceClient::new(channel);

    let answer = client
        .version(VersionRequest {
            version: "v1".into(),
        })
        .await
        .expect("version call")
        .into_inner();
    assert_eq!(answer.runtime_name, "test");
    assert_eq!(answer.runtime_api_version, "v1");
    assert_eq!(answer.version, "v1");

    let status = client
        .list_containers(ListContainersRequest::default())
        .await
        .expect_err("list_containers is not implemented by the double");
    assert_eq!(status.code(), tonic::Code::Unimplemented);

    // The image service is not served on this socket at all.
    let mut images = ImageServiceClient::new(connect_unix(&socket).await.expect("connect"));
    let status = images
        .list_images(ListImagesRequest::default())
        .await
        .expect_err("no image service");
    assert_eq!(status.code(), tonic::Code::Unimplemented);

    drop(client);
    drop(images);
    stop_tx.send(()).expect("server still running");
    server
        .await
        .expect("server task")
        .expect("server shut down cleanly");
}

#[tokio::test]
async fn connect_unix_reports_a_missing_socket() {
    let dir = TempDir::new("missing");
    let result = connect_unix(dir.path().join("absent.sock")).await;
    assert!(result.is_err(), "connecting to a missing socket must fail");
}
