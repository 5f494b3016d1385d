//! Failpoints for the CNI crash suite (tests/tests/cni/cni_crash.rs), in debug builds
//! only: with `CRUST_CNI_FAILPOINT=<plugin>.<verb>.<step>` in its environment (read
//! once), a plugin kills itself with SIGKILL the moment it passes that step, so none of
//! its own rollback runs, as in a crash. `failpoint!("bridge.add.after_veth")` marks a
//! step; the finisher child (see finish.rs), which may not allocate, asks `armed("..")`
//! before the fork and kills itself with a bare `kill`. The steps are listed once, in
//! `failpoint_steps.rs`. In a release build the macro expands to nothing, `armed` is
//! always false and the variable is never read.
//!
//! bridge hands its environment to the IPAM plugin it runs, so a `host_local.*` step
//! set for bridge kills the host-local child, not bridge.

include!("failpoint_steps.rs");

macro_rules! step_names {
    ($($plugin:ident { $($verb:ident { $($step:ident),* $(,)? })* })*) => {
        /// Every step, `plugin.verb.step`, in the order of the list.
        pub const STEPS: &[&str] = &[$($($(
            concat!(stringify!($plugin), ".", stringify!($verb), ".", stringify!($step)),
        )*)*)*];
    };
}
cni_failpoint_steps!(step_names);

/// The environment variable naming the step to die at.
pub const ENV: &str = "CRUST_CNI_FAILPOINT";

/// The step the environment names, if any (debug builds only).
#[cfg(debug_assertions)]
fn wanted() -> Option<&'static str> {
    static WANTED: std::sync::OnceLock<Option<String>> = std::sync::OnceLock::new();
    WANTED
        .get_or_init(|| {
            let w = std::env::var(ENV).ok().filter(|s| !s.is_empty());
            if let Some(w) = &w {
                if !STEPS.contains(&w.as_str()) {
                    eprintln!("{ENV}={w} names no known failpoint");
                }
            }
            w
        })
        .as_deref()
}

/// Whether the environment names `step`; for code that cannot call `hit` (the
/// finisher child after the fork).
pub fn armed(step: &str) -> bool {
    #[cfg(debug_assertions)]
    return wanted() == Some(step);
    #[cfg(not(debug_assertions))]
    {
        let _ = step;
        false
    }
}

/// Dies here (SIGKILL to the plugin itself) when `step` is the one the environment names.
#[cfg(debug_assertions)]
pub fn hit(step: &str) {
    if wanted() == Some(step) {
        // Straight to stderr, unbuffered: the crash suite looks for it.
        eprintln!("failpoint {step}: SIGKILL");
        die();
    }
}

/// SIGKILL to this process: nothing runs after it. Async-signal-safe.
pub fn die() {
    // SAFETY: signalling ourselves.
    unsafe { libc::kill(libc::getpid(), libc::SIGKILL) };
}

/// `failpoint!("plugin.verb.step")`: the plugin dies here when `CRUST_CNI_FAILPOINT`
/// names the step (debug builds; nothing in release builds).
macro_rules! failpoint {
    ($step:literal) => {
        #[cfg(debug_assertions)]
        $crate::failpoint::hit($step);
    };
}
pub(crate) use failpoint;

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    /// Every `failpoint!("..")` and `armed("..")` in the source, with its file.
    fn marks(dir: &Path, out: &mut Vec<(String, String)>) {
        for e in std::fs::read_dir(dir).unwrap().flatten() {
            let p = e.path();
            if p.is_dir() {
                marks(&p, out);
                continue;
            }
            if p.extension().is_none_or(|x| x != "rs") || p.ends_with("src/failpoint.rs") {
                continue;
            }
            let text = std::fs::read_to_string(&p).unwrap();
            for pat in ["failpoint!(\"", "armed(\""] {
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
        let mut found = vec![];
        marks(
            &Path::new(env!("CARGO_MANIFEST_DIR")).join("src"),
            &mut found,
        );
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

    #[test]
    fn names_are_plugin_verb_step() {
        for s in STEPS {
            assert_eq!(s.split('.').count(), 3, "{s}");
        }
        assert!(!armed("bridge.add.after_veth") || std::env::var(ENV).is_ok());
    }
}
