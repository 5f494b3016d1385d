//! A container's old instances removed once they are of no more use.

use super::{Instance, Worker};
use cri_api as cri;
use std::collections::HashMap;

impl Worker {
    /// Keeps each container's newest two instances (the previous one for `--previous`).
    pub(super) async fn collect_garbage(&mut self, instances: &HashMap<String, Vec<Instance>>) {
        for v in instances.values() {
            for old in v.iter().skip(2).filter(|i| i.exited()) {
                let _ = self
                    .cri()
                    .runtime
                    .remove_container(cri::RemoveContainerRequest {
                        container_id: old.id.clone(),
                    })
                    .await;
                self.probes.remove(&old.id);
            }
        }
        let live: Vec<&String> = instances.values().flatten().map(|i| &i.id).collect();
        self.probes.retain(|id, _| live.contains(&id));
    }
}
