//! The Node: registration, the Lease, and status (placeholder: being written).

use crate::config::Config;
use crate::cri::Cri;
use std::sync::Arc;

/// Registers the Node, then keeps its Lease and status fresh until the process ends.
pub async fn run(_cfg: Arc<Config>, _client: kube::Client, _cri: Cri) {}

/// The node's memory capacity in bytes (MemTotal).
pub fn memory_capacity() -> i64 {
    0
}
