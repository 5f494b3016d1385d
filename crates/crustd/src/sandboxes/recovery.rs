//! Start-up: reload every sandbox record and check it against the world before the
//! socket opens. Half-made sandboxes (`creating`) are rolled back; a ready sandbox
//! whose pause is gone reports NOTREADY; unreadable records are reported and left for
//! an operator, never silently dropped.

use crate::daemon::Crust;
use crate::sandboxes::run;
use crate::sandboxes::store::SandboxState;

pub fn recover(crust: &Crust) {
    for loaded in crust.store.load_records() {
        let mut rec = match loaded {
            Ok(r) => r,
            Err(e) => {
                tracing::error!(error = %e, "unreadable sandbox record left in place");
                continue;
            }
        };
        if rec.state == SandboxState::Creating {
            tracing::warn!(sandbox = %rec.id, "rolling back a sandbox left half made");
            if let Err(e) = run::teardown(crust, &mut rec) {
                // Keep it, marked not ready, so RemovePodSandbox can finish the job.
                tracing::error!(sandbox = %rec.id, error = %e, "rollback incomplete; keeping the sandbox as NOTREADY");
                rec.state = SandboxState::NotReady;
                let _ = crust.store.save(&rec);
            } else {
                continue;
            }
        }
        if rec.state == SandboxState::Ready {
            let alive = rec
                .pause
                .map(|p| container::pause::alive(p.pid, p.start_time))
                .unwrap_or(false);
            if !alive {
                tracing::warn!(sandbox = %rec.id, "pause process is gone; sandbox is not ready");
            }
        }
        if let Err(e) = crust.store.reserve_name(&rec.name_key(), &rec.id) {
            tracing::error!(sandbox = %rec.id, error = %e, "two sandboxes hold one name");
        }
        tracing::info!(sandbox = %rec.id, name = %rec.name, namespace = %rec.namespace, state = ?rec.state, "recovered sandbox");
        crust.store.insert(rec);
    }
}
