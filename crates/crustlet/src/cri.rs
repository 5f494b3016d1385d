//! The runtime, as the crustlet reaches it: CRI v1 over the endpoint's unix socket.
//! The channel reconnects by itself when the runtime comes back after a restart.

use cri_api::{ImageServiceClient, RuntimeServiceClient};
use std::path::Path;
use tonic::transport::Channel;

#[derive(Clone)]
pub struct Cri {
    pub runtime: RuntimeServiceClient<Channel>,
    pub images: ImageServiceClient<Channel>,
}

impl Cri {
    /// A channel that dials `socket` on first use and again after each failure, so the
    /// crustlet can start before its runtime and outlive the runtime's restarts.
    pub fn lazy(socket: &Path) -> Cri {
        let path = socket.to_path_buf();
        let channel = tonic::transport::Endpoint::from_static("http://localhost")
            .connect_timeout(std::time::Duration::from_secs(5))
            .connect_with_connector_lazy(tower::service_fn(move |_: tonic::transport::Uri| {
                let path = path.clone();
                async move {
                    Ok::<_, std::io::Error>(hyper_util::rt::TokioIo::new(
                        tokio::net::UnixStream::connect(path).await?,
                    ))
                }
            }));
        // Image lists and pulls of big images go past tonic's 4 MiB default.
        Cri {
            runtime: RuntimeServiceClient::new(channel.clone()).max_decoding_message_size(64 << 20),
            images: ImageServiceClient::new(channel).max_decoding_message_size(64 << 20),
        }
    }
}

impl Cri {
    /// Stops a sandbox and its containers, best effort (it may be gone already).
    pub async fn stop_sandbox(&self, id: &str) {
        let _ = self
            .runtime
            .clone()
            .stop_pod_sandbox(cri_api::StopPodSandboxRequest {
                pod_sandbox_id: id.to_string(),
            })
            .await;
    }

    /// Stops and removes a sandbox: the runtime removes its containers with it, and
    /// either call succeeds for a sandbox that is gone already (NotFound counts as
    /// done). An error means the runtime could not be asked (it is down, say): the
    /// sandbox may still run, and the caller must try again rather than forget it.
    pub async fn remove_sandbox(&self, id: &str) -> Result<(), tonic::Status> {
        let gone = |r: Result<(), tonic::Status>| match r {
            Err(e) if e.code() != tonic::Code::NotFound => Err(e),
            _ => Ok(()),
        };
        let mut rt = self.runtime.clone();
        gone(
            rt.stop_pod_sandbox(cri_api::StopPodSandboxRequest {
                pod_sandbox_id: id.to_string(),
            })
            .await
            .map(drop),
        )?;
        gone(
            rt.remove_pod_sandbox(cri_api::RemovePodSandboxRequest {
                pod_sandbox_id: id.to_string(),
            })
            .await
            .map(drop),
        )
    }
}
