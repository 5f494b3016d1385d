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
        // Probes are of running instances only: an exited one's state would keep a due
        // time in the past, and the worker's sleep (`next_sync`) would come to nothing.
        let running: Vec<&String> = instances
            .values()
            .flatten()
            .filter(|i| i.running())
            .map(|i| &i.id)
            .collect();
        self.probes.retain(|id, _| running.contains(&id));
    }
}
