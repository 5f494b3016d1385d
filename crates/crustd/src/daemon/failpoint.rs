//! Failpoints for the crash suite (tests/tests/faults/crash.rs), in debug builds only:
//! with `CRUST_FAILPOINT=<step>` in its environment (read once), crustd kills itself with
//! SIGKILL the moment it passes that step, so nothing of its own cleanup runs, as in
//! a crash. `failpoint!("run_sandbox.after_pause")` marks a step; the steps are listed
//! once, in `failpoint_steps.rs`. In a release build the macro expands to nothing and
//! the variable is never read.

include!("failpoint_steps.rs");

macro_rules! step_names {
    ($($rpc:ident { $($step:ident),* $(,)? })*) => {
        /// Every step, `rpc.step`, in the order of the list.
        #[cfg_attr(not(debug_assertions), allow(dead_code))]
        pub const STEPS: &[&str] = &[$($(concat!(stringify!($rpc), ".", stringify!($step)),)*)*];
    };
}
failpoint_steps!(step_names);

/// The environment variable naming the step to die at.
#[cfg_attr(not(debug_assertions), allow(dead_code))]
pub const ENV: &str = "CRUST_FAILPOINT";

/// Dies here (SIGKILL to crustd itself) when `step` is the one the environment names.
#[cfg(debug_assertions)]
pub fn hit(step: &str) {
    static WANTED: std::sync::OnceLock<Option<String>> = std::sync::OnceLock::new();
    let wanted = WANTED.get_or_init(|| {
        let w = std::env::var(ENV).ok().filter(|s| !s.is_empty());
        if let Some(w) = &w {
            if STEPS.contains(&w.as_str()) {
                tracing::warn!(step = %w, "failpoint armed: crustd kills itself after this step");
            } else {
                tracing::error!(step = %w, "{ENV} names no known failpoint");
            }
        }
        w
    });
    if wanted.as_deref() == Some(step) {
        // Straight to stderr (the log), unbuffered: the crash suite looks for it.
        eprintln!("crustd: failpoint {step}: SIGKILL");
        // SAFETY: signalling ourselves; nothing runs after it.
        unsafe { libc::kill(libc::getpid(), libc::SIGKILL) };
    }
}

/// Reads the variable now (at start), so a bad name is reported before any RPC.
pub fn init() {
    #[cfg(debug_assertions)]
    hit("");
}

/// `failpoint!("rpc.step")`: crustd dies here when `CRUST_FAILPOINT` names the step
/// (debug builds; nothing in release builds).
macro_rules! failpoint {
    ($step:literal) => {
        #[cfg(debug_assertions)]
        $crate::daemon::failpoint::hit($step);
    };
}
pub(crate) use failpoint;

/// The hook the image store calls at its own steps (PullImage's).
pub fn image_hook() -> Option<fn(&str)> {
    #[cfg(debug_assertions)]
    return Some(hit);
    #[cfg(not(debug_assertions))]
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    /// Every `failpoint!("..")` (and the image store's `failpoint("..")`) in the
    /// source, with the file it is in.
    fn marks(dir: &Path, out: &mut Vec<(String, String)>) {
        for e in std::fs::read_dir(dir).unwrap().flatten() {
            let p = e.path();
            if p.is_dir() {
                marks(&p, out);
                continue;
            }
            if p.extension().is_none_or(|x| x != "rs") || p.ends_with("daemon/failpoint.rs") {
                continue;
            }
            let text = std::fs::read_to_string(&p).unwrap();
            for pat in ["failpoint!(\"", ".failpoint(\""] {
                for (i, _) in text.match_indices(pat) {
                    let rest = &text[i + pat.len()..];
                    let name = &rest[..rest.find('"').unwrap()];
                    out.push((name.to_string(), p.display().to_string()));
                }
            }
        }
    }

    /// The list and the marks in the source agree: each step marked exactly once,
    /// nothing marked that the list lacks.
    #[test]
    fn every_step_is_marked_once() {
        let here = Path::new(env!("CARGO_MANIFEST_DIR"));
        let mut found = vec![];
        marks(&here.join("src"), &mut found);
        marks(&here.join("../image/src"), &mut found);
        for step in STEPS {
            let at: Vec<_> = found.iter().filter(|(n, _)| n == step).collect();
            assert_eq!(
                at.len(),
                1,
                "step {step} is marked {} times: {at:?}",
                at.len()
            );
        }
        for (name, file) in &found {
            assert!(
                STEPS.contains(&name.as_str()),
                "{file} marks {name}, which the list lacks"
            );
        }
        let mut sorted = STEPS.to_vec();
        sorted.sort();
        sorted.dedup();
        assert_eq!(sorted.len(), STEPS.len(), "a step listed twice");
    }
}
