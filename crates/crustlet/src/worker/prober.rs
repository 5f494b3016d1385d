//! The worker's probes (the kubelet's prober manager): which of a container's probes
//! are due, their verdicts, and the kill a failed liveness or startup probe brings.

use super::probe;
use super::{Instance, Worker};
use crate::Ctx;
use k8s_openapi::api::core::v1::{Container, Pod, Probe};
use std::time::Instant;

pub(super) struct Probes {
    pub(super) liveness: Option<probe::State>,
    pub(super) readiness: Option<probe::State>,
    pub(super) startup: Option<probe::State>,
}

impl Worker {
    /// Running, and past its startup probe if it has one.
    pub(super) fn started(&self, c: &Container, i: &Instance) -> bool {
        i.running()
            && (c.startup_probe.is_none()
                || self
                    .probes
                    .get(&i.id)
                    .and_then(|p| p.startup.as_ref())
                    .is_some_and(|s| s.verdict == Some(probe::Outcome::Success)))
    }

    /// Runs the container's due probes; a failed liveness or startup probe kills it
    /// (the restart policy then decides).
    pub(super) async fn probe(&mut self, pod: &Pod, c: &Container, i: &Instance) {
        let started = Instant::now();
        let ps = self.probes.entry(i.id.clone()).or_insert_with(|| Probes {
            liveness: c
                .liveness_probe
                .as_ref()
                .map(|p| probe::State::new(p, started)),
            readiness: c
                .readiness_probe
                .as_ref()
                .map(|p| probe::State::new(p, started)),
            startup: c
                .startup_probe
                .as_ref()
                .map(|p| probe::State::new(p, started)),
        });
        let ip = self
            .sandbox
            .as_ref()
            .map(|s| s.ip.clone())
            .unwrap_or_default();
        let target = Target {
            ctx: &self.ctx,
            pod,
            c,
            id: &i.id,
            ip: &ip,
        };
        let mut kill = None;
        let mut events = vec![];
        let startup_done = ps
            .startup
            .as_ref()
            .is_none_or(|s| s.verdict == Some(probe::Outcome::Success));
        let due = |s: &Option<probe::State>| s.as_ref().is_some_and(|s| Instant::now() >= s.next);
        if !startup_done && due(&ps.startup) {
            let p = c.startup_probe.as_ref().expect("startup probe");
            let st = ps.startup.as_mut().expect("state");
            let (failed, verdict) = target.once("Startup", p, st).await;
            events.extend(failed);
            if verdict == Some(probe::Outcome::Failure) {
                kill = Some(("failed startup probe", p));
            }
        }
        if startup_done {
            for (which, probe_spec) in [
                ("Liveness", &c.liveness_probe),
                ("Readiness", &c.readiness_probe),
            ] {
                let Some(p) = probe_spec else { continue };
                let st = if which == "Liveness" {
                    &mut ps.liveness
                } else {
                    &mut ps.readiness
                };
                if !due(st) {
                    continue;
                }
                let st = st.as_mut().expect("state");
                let (failed, verdict) = target.once(which, p, st).await;
                events.extend(failed);
                if verdict == Some(probe::Outcome::Failure) && which == "Liveness" {
                    kill = Some(("failed liveness probe", p));
                }
            }
        }
        for (reason, e) in events {
            self.event(pod, true, reason, e);
        }
        if let Some((why, failed)) = kill {
            self.event(
                pod,
                false,
                "Killing",
                format!("Container {} {why}, will be restarted", c.name),
            );
            self.stop(pod, c, i, Some(failed)).await;
        }
    }
}

/// The container instance a round of probes runs against, and the pod its metrics are
/// counted for.
struct Target<'a> {
    ctx: &'a Ctx,
    pod: &'a Pod,
    c: &'a Container,
    id: &'a str,
    ip: &'a str,
}

impl Target<'_> {
    /// One run of a due probe, counted where the kubelet counts it: in the prober's
    /// duration metric and against the probe's thresholds. Startup, liveness and
    /// readiness differ only in what their verdict brings, so that stays with the
    /// caller, who gets the event the run asks for (reason and message: `Unhealthy`
    /// for a failed run, `ProbeWarning` for a success with a warning, as the kubelet's
    /// prober) and the verdict (when it changed).
    async fn once(
        &self,
        which: &'static str,
        p: &Probe,
        st: &mut probe::State,
    ) -> (Option<(&'static str, String)>, Option<probe::Outcome>) {
        let took = Instant::now();
        let (r, m, warning) = probe::run(&self.ctx.cri, p, self.c, self.id, self.ip).await;
        let ok = r == probe::Outcome::Success;
        self.ctx
            .seen
            .metrics
            .probe(self.pod, &self.c.name, which, ok, took.elapsed());
        let event = if !ok {
            Some(("Unhealthy", format!("{which} probe failed: {m}")))
        } else if warning {
            Some(("ProbeWarning", format!("{which} probe warning: {m}")))
        } else {
            None
        };
        (event, st.record(p, r, m))
    }
}
