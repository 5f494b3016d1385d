//! The CRI surface: the gRPC server on the socket (`server`) with the client's deadline
//! answered as gRPC servers in Go answer it (`deadline`), the RuntimeService and
//! ImageService handlers that log each call and turn errors into status codes
//! (`service`, `error`), the checks every request goes through first (`validate`),
//! and labels as records keep them and the CRI carries and selects them (`labels`). Handlers hand the work to `sandboxes`, `containers`, `streaming`,
//! `images` and `daemon::runtime_info`; nothing here touches the node itself.

pub mod deadline;
pub mod error;
pub mod labels;
pub mod server;
pub mod service;
pub mod validate;
