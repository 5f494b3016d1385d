//! Kubernetes CRI v1 (`runtime.v1`) gRPC bindings, client and server.
//!
//! This crate exists so that the workspace has exactly one generated copy of the
//! Container Runtime Interface: `crustd` implements the server traits, `crustlet` uses
//! the clients, and tests use both, all against the same types. The code is generated
//! at build time from `proto/api.proto` (whose header pins the upstream version) with
//! `tonic-prost-build` and a vendored `protoc`.
//!
//! The generated items live in [`runtime::v1`] and are also re-exported at the crate
//! root, so `cri_api::RunPodSandboxRequest` and `cri_api::RuntimeServiceClient` both work.
//! [`connect_unix`] opens a client channel to a runtime's unix socket, the usual CRI
//! transport.

use std::path::Path;

use hyper_util::rt::TokioIo;
use tokio::net::UnixStream;
use tonic::transport::{Channel, Endpoint, Uri};
use tower::service_fn;

pub mod authority;
mod hpack;

/// Generated code, in a module tree that mirrors the protobuf package names.
pub mod runtime {
    /// The CRI v1 API: package `runtime.v1`.
    #[allow(clippy::all, clippy::pedantic, missing_docs, rustdoc::all)]
    pub mod v1 {
        tonic::include_proto!("runtime.v1");
    }
}

pub use runtime::v1::*;

pub use runtime::v1::image_service_client::ImageServiceClient;
pub use runtime::v1::image_service_server::{ImageService, ImageServiceServer};
pub use runtime::v1::runtime_service_client::RuntimeServiceClient;
pub use runtime::v1::runtime_service_server::{RuntimeService, RuntimeServiceServer};

/// Placeholder URI for channels whose real transport is a unix socket: tonic needs an
/// `http` URI to build an [`Endpoint`], but the connector ignores it.
const UNIX_DUMMY_URI: &str = "http://[::]:50051";

/// Connects a gRPC [`Channel`] to a server listening on the unix socket at `path`
/// (for example `/run/crust/crust.sock`).
///
/// The connection is made eagerly, so an absent or refusing socket is reported here.
/// If the channel later reconnects, it dials the same path again.
pub async fn connect_unix(path: impl AsRef<Path>) -> Result<Channel, tonic::transport::Error> {
    let path = path.as_ref().to_path_buf();
    Endpoint::from_static(UNIX_DUMMY_URI)
        .connect_with_connector(service_fn(move |_: Uri| {
            let path = path.clone();
            async move { Ok::<_, std::io::Error>(TokioIo::new(UnixStream::connect(path).await?)) }
        }))
        .await
}
