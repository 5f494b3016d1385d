//! GetContainerEvents: a stream of container lifecycle events, for `crictl events` and
//! the kubelet's evented PLEG, which reacts to them instead of relisting every second.
//!
//! Each event carries, as containerd's do, the status of the pod and of every container
//! in it. The container the event is about is described as it was at the event (its
//! record is at hand then); the others and the pod are read under their locks, which
//! the operation that caused the event may still hold, so they are read by one task
//! that turns the queue, in order, into full events for every subscriber, and show them
//! as they are when the event is published. Sandboxes have events too, under their own id.
//! A subscriber that falls more than `BACKLOG` events behind has its stream ended with
//! RESOURCE_EXHAUSTED, so that it subscribes again and looks at everything (the kubelet
//! relists, the crustlet wakes every worker) rather than go on without the events it
//! missed; nothing waits for a slow subscriber.

use crate::containers::store::ContainerRecord;
use crate::daemon::Crust;
use cri_api::{ContainerEventResponse, ContainerEventType, ContainerFilter, ContainerStatus};
use parking_lot::Mutex;
use std::sync::Arc;
use tokio::sync::{broadcast, mpsc};

const BACKLOG: usize = 1024;

struct Queued {
    id: String,
    pod: String,
    kind: ContainerEventType,
    at: i64,
    /// The container's own status, taken when the event happened.
    own: Option<ContainerStatus>,
}

pub struct Events {
    queue: mpsc::UnboundedSender<Queued>,
    pending: Mutex<Option<mpsc::UnboundedReceiver<Queued>>>,
    out: broadcast::Sender<ContainerEventResponse>,
}

impl Default for Events {
    fn default() -> Self {
        let (queue, rx) = mpsc::unbounded_channel();
        let (out, _) = broadcast::channel(BACKLOG);
        Events {
            queue,
            pending: Mutex::new(Some(rx)),
            out,
        }
    }
}

impl Events {
    /// Queues an event of sandbox `id`, or of a container that no longer has a status
    /// (deleted), in pod `pod`.
    pub fn emit(&self, id: &str, pod: &str, kind: ContainerEventType) {
        self.queue(id, pod, kind, None);
    }

    /// Queues an event of the container `rec` (whose lock the caller holds), with its
    /// status as it is now: by the time the event is published it may have moved on
    /// (exited, been removed). Only taken when someone listens.
    pub fn emit_container(&self, crust: &Crust, rec: &ContainerRecord, kind: ContainerEventType) {
        let own = (self.out.receiver_count() > 0)
            .then(|| crate::containers::status::cri_status(crust, rec, false).0);
        self.queue(&rec.id, &rec.sandbox_id, kind, own);
    }

    fn queue(&self, id: &str, pod: &str, kind: ContainerEventType, own: Option<ContainerStatus>) {
        let _ = self.queue.send(Queued {
            id: id.to_string(),
            pod: pod.to_string(),
            kind,
            at: crate::daemon::util::now_ns(),
            own,
        });
    }

    pub fn subscribe(&self) -> broadcast::Receiver<ContainerEventResponse> {
        self.out.subscribe()
    }
}

/// Starts the task that completes and publishes queued events.
pub fn start(crust: Arc<Crust>) {
    let Some(mut rx) = crust.events.pending.lock().take() else {
        return;
    };
    tokio::spawn(async move {
        while let Some(q) = rx.recv().await {
            // Without subscribers the statuses need not be read at all.
            if crust.events.out.receiver_count() == 0 {
                continue;
            }
            let pod_status = crate::sandboxes::status::status(crust.clone(), &q.pod, false)
                .await
                .ok()
                .map(|(s, _)| s);
            let mut statuses = Vec::new();
            let filter = ContainerFilter {
                pod_sandbox_id: q.pod.clone(),
                ..Default::default()
            };
            if let Ok(list) = crate::containers::status::list(crust.clone(), Some(filter)).await {
                for c in list {
                    if let Ok(r) =
                        crate::containers::status::status(crust.clone(), &c.id, false).await
                    {
                        statuses.extend(r.status);
                    }
                }
            }
            if let Some(own) = q.own {
                statuses.retain(|s| s.id != own.id);
                statuses.push(own);
            }
            let _ = crust.events.out.send(ContainerEventResponse {
                container_id: q.id,
                container_event_type: q.kind as i32,
                created_at: q.at,
                pod_sandbox_status: pod_status,
                containers_statuses: statuses,
            });
        }
    });
}
