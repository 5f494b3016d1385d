//! Killing every process of a cgroup: `cgroup.kill` on v2 when the kernel has it (5.14+),
//! else SIGKILL to every pid in `cgroup.procs` until none is left, with the cgroup frozen
//! while the pids are read and signalled so nothing forks in between (v1 `freezer`, v2
//! `cgroup.freeze`), when a freezer is there.

use crate::error::{Error, Result};
use crate::freezer::Freezer;
use crate::fs;
use nix::errno::Errno;
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// How long `kill_all` waits for the processes to be gone.
pub(crate) const KILL_TIMEOUT: Duration = Duration::from_secs(5);
/// How long to wait for a freeze to complete before signalling anyway.
const FREEZE_TIMEOUT: Duration = Duration::from_secs(1);

/// Thaws on drop, so a frozen cgroup never stays frozen (a v1 frozen task cannot die).
struct Thaw<'a>(&'a Freezer);

impl Drop for Thaw<'_> {
    fn drop(&mut self) {
        if let Err(e) = self.0.thaw() {
            tracing::warn!(error = %e, "thawing cgroup");
        }
    }
}

/// SIGKILLs every pid in the `cgroup.procs` of `dirs` (one cgroup's directories in each
/// hierarchy) until all are empty or gone. `name` is the directory errors name.
pub(crate) fn kill_loop(name: &Path, dirs: &[PathBuf], freezer: Option<Freezer>) -> Result<()> {
    let start = Instant::now();
    let mut delay = Duration::from_millis(1);
    loop {
        let thaw = match &freezer {
            Some(f) => match f.freeze_within(FREEZE_TIMEOUT) {
                Ok(true) => Some(Thaw(f)),
                Ok(false) => {
                    tracing::warn!(dir = %f.dir().display(), "cgroup not frozen in time, killing anyway");
                    Some(Thaw(f))
                }
                Err(e) if e.is_not_found() => None,
                Err(e) => {
                    tracing::warn!(error = %e, "freezing cgroup, killing without");
                    None
                }
            },
            None => None,
        };
        let pids = fs::union_procs(dirs)?;
        if pids.is_empty() {
            return Ok(());
        }
        for &pid in &pids {
            match kill(Pid::from_raw(pid), Signal::SIGKILL) {
                Ok(()) | Err(Errno::ESRCH) => {}
                Err(source) => {
                    return Err(Error::Signal {
                        pid,
                        path: name.to_path_buf(),
                        source,
                    })
                }
            }
        }
        drop(thaw);
        let waited = start.elapsed();
        if waited >= KILL_TIMEOUT {
            return Err(Error::KillTimeout {
                path: name.to_path_buf(),
                pids,
                waited,
            });
        }
        std::thread::sleep(delay);
        delay = (delay * 2).min(Duration::from_millis(50));
    }
}

/// v2: writes `cgroup.kill` when the kernel has it and waits for `cgroup.procs` to
/// empty; else the signal loop with `cgroup.freeze`.
pub(crate) fn kill_v2(dir: &Path) -> Result<()> {
    let kill_file = dir.join("cgroup.kill");
    if !kill_file.exists() {
        let freezer = dir
            .join("cgroup.freeze")
            .exists()
            .then(|| Freezer::V2(dir.to_path_buf()));
        return kill_loop(dir, &[dir.to_path_buf()], freezer);
    }
    match fs::write(&kill_file, "1") {
        Err(e) if e.is_not_found() => return Ok(()),
        r => r?,
    }
    let start = Instant::now();
    loop {
        let pids = fs::read_procs(dir)?.unwrap_or_default();
        if pids.is_empty() {
            return Ok(());
        }
        let waited = start.elapsed();
        if waited >= KILL_TIMEOUT {
            return Err(Error::KillTimeout {
                path: dir.to_path_buf(),
                pids,
                waited,
            });
        }
        std::thread::sleep(Duration::from_millis(2));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fs::testutil::Tree;

    #[test]
    fn empty_cgroup_freezes_and_thaws() {
        let t = Tree::new();
        t.write("freezer/pod/cgroup.procs", "");
        t.write("memory/pod/cgroup.procs", "");
        let dirs = [t.path("freezer/pod"), t.path("memory/pod")];
        kill_loop(&dirs[0], &dirs, Some(Freezer::V1(dirs[0].clone()))).unwrap();
        assert_eq!(t.read("freezer/pod/freezer.state"), "THAWED");
    }

    #[test]
    fn missing_cgroup_is_fine() {
        let t = Tree::new();
        let d = t.path("gone");
        kill_loop(&d, std::slice::from_ref(&d), Some(Freezer::V1(d.clone()))).unwrap();
        kill_v2(&d).unwrap();
    }

    /// A real child listed in a fake `cgroup.procs` is SIGKILLed; a thread that reaps it
    /// then empties the file, as the kernel would.
    #[test]
    fn signals_listed_pids() {
        let t = Tree::new();
        let child = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .unwrap();
        let pid = child.id() as i32;
        t.write("memory/pod/cgroup.procs", &format!("{pid}\n"));
        t.write("pids/pod/cgroup.procs", &format!("{pid}\n"));
        let dirs = [t.path("memory/pod"), t.path("pids/pod")];
        let reaper = {
            let dirs = dirs.clone();
            let mut child = child;
            std::thread::spawn(move || {
                let status = child.wait().unwrap();
                for d in &dirs {
                    std::fs::write(d.join("cgroup.procs"), "").unwrap();
                }
                status
            })
        };
        kill_loop(&dirs[0], &dirs, None).unwrap();
        let status = reaper.join().unwrap();
        use std::os::unix::process::ExitStatusExt;
        assert_eq!(status.signal(), Some(libc::SIGKILL));
    }

    #[test]
    fn v2_writes_cgroup_kill() {
        let t = Tree::new();
        t.write("pod/cgroup.kill", "");
        t.write("pod/cgroup.procs", "");
        kill_v2(&t.path("pod")).unwrap();
        assert_eq!(t.read("pod/cgroup.kill"), "1");
    }

    #[test]
    fn v2_without_cgroup_kill_uses_freeze() {
        let t = Tree::new();
        t.write("pod/cgroup.freeze", "0");
        t.write("pod/cgroup.events", "populated 0\nfrozen 1\n");
        t.write("pod/cgroup.procs", "");
        kill_v2(&t.path("pod")).unwrap();
        assert_eq!(t.read("pod/cgroup.freeze"), "0");
        assert!(!t.exists("pod/cgroup.kill"));
    }
}
