//! Freezing a cgroup: v1 `freezer.state` (`THAWED` → `FREEZING` → `FROZEN`), v2
//! `cgroup.freeze`, whose completion `cgroup.events` shows as `frozen 1`. A freeze is
//! only done when the kernel says every task is frozen, so both poll.

use crate::error::{Error, Result};
use crate::fs;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// How long [`crate::CgroupManager::freeze`] waits for every task to be frozen.
pub(crate) const FREEZE_TIMEOUT: Duration = Duration::from_secs(5);

/// A cgroup's freezer.
pub(crate) enum Freezer {
    /// The cgroup's directory in the v1 `freezer` hierarchy (`freezer.state`).
    V1(PathBuf),
    /// The cgroup's v2 directory (`cgroup.freeze`, `cgroup.events`).
    V2(PathBuf),
}

impl Freezer {
    pub(crate) fn dir(&self) -> &Path {
        match self {
            Freezer::V1(d) | Freezer::V2(d) => d,
        }
    }

    /// Asks for a freeze and waits up to `timeout` for it to complete. `Ok(false)` when
    /// it did not (the cgroup is left freezing); a missing state file counts as done.
    pub(crate) fn freeze_within(&self, timeout: Duration) -> Result<bool> {
        let start = Instant::now();
        let mut delay = Duration::from_millis(1);
        if let Freezer::V2(d) = self {
            fs::write(&d.join("cgroup.freeze"), "1")?;
        }
        loop {
            // v1: writing FROZEN again retries the tasks a freeze missed (runc does too).
            if let Freezer::V1(d) = self {
                fs::write(&d.join("freezer.state"), "FROZEN")?;
            }
            match self.state()? {
                None => return Ok(true),
                Some((_, true)) => return Ok(true),
                Some(_) if start.elapsed() >= timeout => return Ok(false),
                Some(_) => {}
            }
            std::thread::sleep(delay);
            delay = (delay * 2).min(Duration::from_millis(10));
        }
    }

    /// Freezes, waiting up to `timeout`; when that is not enough, thaws again and fails
    /// with [`Error::FreezeTimeout`].
    pub(crate) fn freeze(&self, timeout: Duration) -> Result<()> {
        let start = Instant::now();
        if self.freeze_within(timeout)? {
            return Ok(());
        }
        let state = self.state()?.map(|(s, _)| s).unwrap_or_default();
        self.thaw()?;
        Err(Error::FreezeTimeout {
            path: self.dir().to_path_buf(),
            state,
            waited: start.elapsed(),
        })
    }

    pub(crate) fn thaw(&self) -> Result<()> {
        match self {
            Freezer::V1(d) => fs::write(&d.join("freezer.state"), "THAWED"),
            Freezer::V2(d) => fs::write(&d.join("cgroup.freeze"), "0"),
        }
    }

    /// The state as the kernel shows it and whether that is frozen; `None` without a
    /// state file.
    fn state(&self) -> Result<Option<(String, bool)>> {
        Ok(match self {
            Freezer::V1(d) => fs::read_opt(&d.join("freezer.state"))?.map(|s| {
                let s = s.trim().to_string();
                let frozen = s == "FROZEN";
                (s, frozen)
            }),
            Freezer::V2(d) => fs::read_opt(&d.join("cgroup.events"))?.map(|s| {
                let line = s.lines().find(|l| l.starts_with("frozen "));
                let line = line.unwrap_or("frozen ?").trim().to_string();
                let frozen = line == "frozen 1";
                (line, frozen)
            }),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fs::testutil::Tree;

    #[test]
    fn v1_freeze_and_thaw() {
        let t = Tree::new();
        t.mkdir("f");
        let f = Freezer::V1(t.path("f"));
        f.freeze(FREEZE_TIMEOUT).unwrap();
        assert_eq!(t.read("f/freezer.state"), "FROZEN");
        f.thaw().unwrap();
        assert_eq!(t.read("f/freezer.state"), "THAWED");
    }

    #[test]
    fn v2_waits_for_frozen_and_times_out_thawed() {
        let t = Tree::new();
        t.write("f/cgroup.events", "populated 1\nfrozen 1\n");
        let f = Freezer::V2(t.path("f"));
        f.freeze(FREEZE_TIMEOUT).unwrap();
        assert_eq!(t.read("f/cgroup.freeze"), "1");
        f.thaw().unwrap();
        assert_eq!(t.read("f/cgroup.freeze"), "0");

        // The kernel never reports frozen: an error naming the cgroup, and thawed.
        t.write("f/cgroup.events", "populated 1\nfrozen 0\n");
        let e = f.freeze(Duration::from_millis(30)).unwrap_err();
        assert!(matches!(e, Error::FreezeTimeout { .. }), "{e}");
        let msg = e.to_string();
        assert!(
            msg.starts_with(&format!("freeze {}: ", t.path("f").display())),
            "{msg}"
        );
        assert!(msg.contains("\"frozen 0\""), "{msg}");
        assert_eq!(t.read("f/cgroup.freeze"), "0");
        assert!(!f.freeze_within(Duration::from_millis(5)).unwrap());
    }

    #[test]
    fn missing_cgroup_is_an_error() {
        let t = Tree::new();
        let e = Freezer::V2(t.path("gone"))
            .freeze(FREEZE_TIMEOUT)
            .unwrap_err();
        assert!(e.is_not_found(), "{e}");
        let e = Freezer::V1(t.path("gone")).thaw().unwrap_err();
        assert!(e.is_not_found(), "{e}");
    }
}
