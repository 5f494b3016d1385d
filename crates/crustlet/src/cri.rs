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
