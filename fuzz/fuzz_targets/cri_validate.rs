//! CRI requests as the kubelet (or anyone who can reach the socket) sends them: the
//! protobuf decode, then crustd's checks of what it names (label and annotation keys).
//! crustd is a binary crate: its `cri::validate` and `cri::error` are compiled in here
//! from its own source.
#![no_main]

#[allow(dead_code)]
#[path = "../../crates/crustd/src/cri/error.rs"]
pub mod cri_error;
#[allow(dead_code)]
#[path = "../../crates/crustd/src/cri/validate.rs"]
pub mod cri_validate;
/// Their paths as crustd names them.
mod cri {
    pub use super::cri_error as error;
    pub use super::cri_validate as validate;
}

use cri_api::{CreateContainerRequest, RunPodSandboxRequest, UpdateContainerResourcesRequest};
use libfuzzer_sys::fuzz_target;
use prost::Message;

fuzz_target!(|data: &[u8]| {
    if let Ok(s) = std::str::from_utf8(data) {
        let _ = cri::validate::qualified_name(s);
    }
    if let Ok(req) = RunPodSandboxRequest::decode(data) {
        if let Some(cfg) = req.config {
            let _ = cri::validate::labels("label", cfg.labels.keys());
            let _ = cri::validate::labels("annotation", cfg.annotations.keys());
        }
    }
    if let Ok(req) = CreateContainerRequest::decode(data) {
        if let Some(cfg) = req.config {
            let _ = cri::validate::labels("label", cfg.labels.keys());
            let _ = cri::validate::labels("annotation", cfg.annotations.keys());
        }
        if let Some(cfg) = req.sandbox_config {
            let _ = cri::validate::labels("label", cfg.labels.keys());
        }
    }
    let _ = UpdateContainerResourcesRequest::decode(data);
});
