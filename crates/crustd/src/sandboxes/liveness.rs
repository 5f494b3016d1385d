//! Whether a sandbox's pause lives, known from a pidfd rather than read from `/proc`.
//!
//! Every PodSandboxStatus and ListPodSandbox reports a ready sandbox whose pause died as
//! NOTREADY. Reading `/proc/<pid>/stat` for that on each call is what an idle node pays
//! for every pod on every relist; instead a task per sandbox waits (without a thread)
//! on the pause's pidfd, and when the pause ends marks the sandbox and queues a
//! `CONTAINER_STOPPED_EVENT` for it (as containerd does when a sandbox's task exits), so
//! an agent following the events learns of it at once instead of at its next relist
//! (one ended by StopPodSandbox has its event from there).
//! A sandbox whose pause could not be watched (no pidfd: the fd limit) is read from
//! `/proc` as before.

use crate::daemon::Crust;
use crate::sandboxes::store::{PauseRef, Sandbox, SandboxState};
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::Arc;

// 0: not watched (the default).
const RUNNING: u8 = 1;
const EXITED: u8 = 2;

/// What the watch knows of a sandbox's pause.
#[derive(Default)]
pub struct Liveness(AtomicU8);

impl Liveness {
    /// Whether the pause `p` runs: from the watch, or from `/proc` when unwatched.
    pub fn alive(&self, p: PauseRef) -> bool {
        match self.0.load(Ordering::Acquire) {
            RUNNING => true,
            EXITED => false,
            _ => container::pause::alive(p.pid, p.start_time),
        }
    }
}

/// Starts watching the pause of `sb` (a sandbox just made ready, or recovered ready).
pub fn watch(crust: Arc<Crust>, sb: Arc<Sandbox>) {
    let Some(p) = sb.rec.view().pause else {
        return;
    };
    let Ok(fd) = container::proc::pidfd_open(p.pid) else {
        return;
    };
    // Checked after opening: the pidfd is the pause's, not a reused pid's. One already
    // gone is left to the `/proc` reading, which says so.
    if !container::pause::alive(p.pid, p.start_time) {
        return;
    }
    tokio::spawn(async move {
        // SAFETY: an OwnedFd: it stays open, the same fd, for the AsyncFd's life.
        let afd = unsafe {
            tokio::io::unix::AsyncFd::register_with_interest(fd, tokio::io::Interest::READABLE)
        };
        let Ok(afd) = afd else {
            return;
        };
        sb.liveness.0.store(RUNNING, Ordering::Release);
        // (Not crustd's to reap: the launcher's exit handed the pause on.)
        let _ = afd.readable().await;
        sb.liveness.0.store(EXITED, Ordering::Release);
        // A pause that StopPodSandbox ended has its event from there: stop holds the
        // record until it is saved not ready.
        let ready = sb.rec.lock().await.state == SandboxState::Ready;
        if ready && crust.store.get(&sb.id).is_ok() {
            crust.events.emit(
                &sb.id,
                &sb.id,
                cri_api::ContainerEventType::ContainerStoppedEvent,
            );
        }
    });
}

/// Watches every recovered sandbox whose pause runs.
pub fn watch_all(crust: &Arc<Crust>) {
    for sb in crust.store.list() {
        watch(crust.clone(), sb);
    }
}
