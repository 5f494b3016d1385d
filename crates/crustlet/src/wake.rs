//! Waking a pod's worker when its containers change, from the runtime's event stream
//! (CRI `GetContainerEvents`, which the kubelet's evented PLEG reads).
//!
//! Without it a worker can only learn that a container exited by asking, and asking
//! every second costs the node a List and a status per container for every pod, most of
//! them unchanged (on a node of 250 idle pods, 250 syncs a second). While the stream is
//! up, a worker whose pod is settled sleeps until an event about its pod, its pod's
//! change in the apiserver, or its own next deadline (a probe, a back-off, the active
//! deadline, the volumes' refresh), and at most [`SETTLED`]; while it is down (a runtime
//! without events, such as containerd 1.6, or crustd restarting) every worker asks every
//! second, as before. A stream that comes (back) up wakes every worker once: what
//! happened while nobody listened is seen by that sync.

use cri_api as cri;
use parking_lot::Mutex;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::Notify;

/// How often a worker syncs while the runtime's events cannot wake it.
pub const POLL: Duration = Duration::from_secs(1);
/// The longest a settled worker sleeps with the events up, the kubelet's own sync period
/// (`--sync-frequency`, 1 min): a safety net, as the events cover what changes in the
/// runtime (a container's exit, and on crustd a pause's death too; a lost event on a
/// lagging stream wakes every worker).
pub const SETTLED: Duration = Duration::from_secs(60);

/// The workers' wake-ups, by pod uid.
#[derive(Default)]
pub struct Wakers {
    by_uid: Mutex<HashMap<String, Arc<Notify>>>,
    live: AtomicBool,
}

impl Wakers {
    /// The wake-up of the worker of pod `uid` (one per pod: a second worker of the same
    /// pod, after the first ended, gets the same one).
    pub fn register(&self, uid: &str) -> Arc<Notify> {
        self.by_uid
            .lock()
            .entry(uid.to_string())
            .or_default()
            .clone()
    }

    pub fn unregister(&self, uid: &str) {
        self.by_uid.lock().remove(uid);
    }

    /// Whether the runtime's events reach the workers now.
    pub fn live(&self) -> bool {
        self.live.load(Ordering::Relaxed)
    }

    pub fn wake(&self, uid: &str) {
        if let Some(n) = self.by_uid.lock().get(uid) {
            // A permit is kept when the worker is busy: it syncs once more after.
            n.notify_one();
        }
    }

    fn wake_all(&self) {
        for n in self.by_uid.lock().values() {
            n.notify_one();
        }
    }

    fn set_live(&self, live: bool) {
        self.live.store(live, Ordering::Relaxed);
        // Up: what happened before is seen now. Down: every worker back to polling.
        self.wake_all();
    }
}

/// Follows the runtime's event stream for the life of the crustlet, reconnecting.
pub async fn follow(
    wakers: Arc<Wakers>,
    runtime: cri::RuntimeServiceClient<tonic::transport::Channel>,
) {
    let mut delay = Duration::from_secs(1);
    loop {
        let mut rt = runtime.clone();
        match rt
            .get_container_events(cri::GetEventsRequest::default())
            .await
        {
            Ok(resp) => {
                let mut stream = resp.into_inner();
                wakers.set_live(true);
                tracing::debug!("following the runtime's container events");
                delay = Duration::from_secs(1);
                while let Ok(Some(ev)) = stream.message().await {
                    if let Some(uid) = ev
                        .pod_sandbox_status
                        .as_ref()
                        .and_then(|s| s.metadata.as_ref())
                        .map(|m| m.uid.as_str())
                    {
                        wakers.wake(uid);
                    }
                }
                wakers.set_live(false);
                tracing::debug!("the runtime's container events ended; workers poll");
            }
            Err(s) => {
                if wakers.live() {
                    wakers.set_live(false);
                }
                // A runtime without events is asked again now and then (it may be
                // upgraded under the crustlet); one restarting, sooner.
                delay = if s.code() == tonic::Code::Unimplemented {
                    Duration::from_secs(60)
                } else {
                    (delay * 2).min(Duration::from_secs(30))
                };
                tracing::debug!("the runtime's container events: {}", s.message());
            }
        }
        tokio::time::sleep(delay).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_wake_while_busy_is_kept_for_the_next_wait() {
        let w = Wakers::default();
        let n = w.register("u1");
        w.wake("u1");
        // The worker was not waiting: the permit waits for it.
        tokio::time::timeout(Duration::from_millis(100), n.notified())
            .await
            .expect("woken");
        // One permit, not one per event.
        w.wake("u1");
        w.wake("u1");
        n.notified().await;
        assert!(
            tokio::time::timeout(Duration::from_millis(50), n.notified())
                .await
                .is_err()
        );
    }

    #[tokio::test]
    async fn going_live_or_down_wakes_everyone() {
        let w = Wakers::default();
        let (a, b) = (w.register("a"), w.register("b"));
        assert!(!w.live());
        w.set_live(true);
        assert!(w.live());
        for n in [&a, &b] {
            tokio::time::timeout(Duration::from_millis(100), n.notified())
                .await
                .expect("woken");
        }
        w.unregister("a");
        w.wake("a");
        assert!(
            tokio::time::timeout(Duration::from_millis(50), a.notified())
                .await
                .is_err()
        );
    }
}
