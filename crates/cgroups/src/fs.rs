//! cgroupfs file helpers shared by the v1 and v2 managers; every error names its path.

use crate::error::{Error, Op, Result};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// How long `remove` retries an `rmdir` that fails with EBUSY (exiting tasks linger for
/// a moment after SIGKILL).
pub(crate) const RMDIR_BUSY_TIMEOUT: Duration = Duration::from_secs(1);

pub(crate) fn read(path: &Path) -> Result<String> {
    std::fs::read_to_string(path).map_err(|e| Error::io(Op::Read, path, e))
}

/// Reads a file, `None` when it does not exist.
pub(crate) fn read_opt(path: &Path) -> Result<Option<String>> {
    match std::fs::read_to_string(path) {
        Ok(s) => Ok(Some(s)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(Error::io(Op::Read, path, e)),
    }
}

/// Writes `data` in one `write(2)`, as cgroupfs files want. The file is created when
/// missing, which only happens in the fake trees of unit tests (cgroupfs files exist).
pub(crate) fn write(path: &Path, data: &str) -> Result<()> {
    std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .open(path)
        .and_then(|mut f| f.write_all(data.as_bytes()))
        .map_err(|e| Error::io(Op::Write, path, e))
}

/// `mkdir`; true when this call made the directory, false when it already existed.
pub(crate) fn mkdir(dir: &Path) -> Result<bool> {
    match std::fs::create_dir(dir) {
        Ok(()) => {
            tracing::debug!(dir = %dir.display(), "created cgroup");
            Ok(true)
        }
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(false),
        Err(e) => Err(Error::io(Op::Mkdir, dir, e)),
    }
}

/// `rmdir` of one cgroup directory: a missing one is fine, EBUSY is retried for
/// [`RMDIR_BUSY_TIMEOUT`] and then reported as [`Error::Busy`].
pub(crate) fn rmdir(dir: &Path) -> Result<()> {
    rmdir_until(dir, Instant::now(), Instant::now() + RMDIR_BUSY_TIMEOUT)
}

/// `rmdir`, retrying EBUSY until `deadline` (at least once); `start` is when the
/// caller began, for the error.
fn rmdir_until(dir: &Path, start: Instant, deadline: Instant) -> Result<()> {
    let mut delay = Duration::from_millis(1);
    loop {
        match std::fs::remove_dir(dir) {
            Ok(()) => {
                tracing::debug!(dir = %dir.display(), "removed cgroup");
                return Ok(());
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
            Err(e) if e.raw_os_error() == Some(libc::EBUSY) => {
                if Instant::now() >= deadline {
                    return Err(Error::Busy {
                        path: dir.to_path_buf(),
                        waited: start.elapsed(),
                    });
                }
                std::thread::sleep(delay);
                delay = (delay * 2).min(Duration::from_millis(50));
            }
            Err(e) => return Err(Error::io(Op::Rmdir, dir, e)),
        }
    }
}

/// The pids in `dir/cgroup.procs`; `None` when the cgroup does not exist.
pub(crate) fn read_procs(dir: &Path) -> Result<Option<Vec<i32>>> {
    let file = dir.join("cgroup.procs");
    let Some(text) = read_opt(&file)? else {
        return Ok(None);
    };
    text.split_whitespace()
        .map(|s| {
            s.parse::<i32>().map_err(|_| Error::Parse {
                path: file.clone(),
                line: s.to_string(),
                reason: "expected a pid",
            })
        })
        .collect::<Result<Vec<_>>>()
        .map(Some)
}

/// The union of the pids in the `cgroup.procs` of `dirs`, sorted (missing dirs skipped).
pub(crate) fn union_procs(dirs: &[PathBuf]) -> Result<Vec<i32>> {
    let mut all = Vec::new();
    for d in dirs {
        all.extend(read_procs(d)?.unwrap_or_default());
    }
    all.sort_unstable();
    all.dedup();
    Ok(all)
}

/// Writes `pid` to `cgroup.procs` of every dir.
pub(crate) fn add_process(dirs: &[PathBuf], pid: i32) -> Result<()> {
    for d in dirs {
        write(&d.join("cgroup.procs"), &pid.to_string())?;
    }
    Ok(())
}

/// `rmdir` of every dir, going on after a failure; returns the first error. The EBUSY
/// retries of all dirs share one [`RMDIR_BUSY_TIMEOUT`].
pub(crate) fn rmdir_all(dirs: &[PathBuf]) -> Result<()> {
    let start = Instant::now();
    let deadline = start + RMDIR_BUSY_TIMEOUT;
    let mut first = None;
    for d in dirs {
        if let Err(e) = rmdir_until(d, start, deadline) {
            tracing::warn!(error = %e, "removing cgroup");
            first.get_or_insert(e);
        }
    }
    first.map_or(Ok(()), Err)
}

/// The whitespace-separated names in a `cgroup.controllers` / `cgroup.subtree_control`
/// file, with any `+` prefix dropped (fake trees keep what was written).
pub(crate) fn controller_set(text: &str) -> Vec<String> {
    text.split_whitespace()
        .map(|c| c.trim_start_matches('+').to_string())
        .collect()
}

#[cfg(test)]
pub(crate) mod testutil {
    use std::path::PathBuf;
    use std::sync::atomic::{AtomicU32, Ordering};

    static N: AtomicU32 = AtomicU32::new(0);

    /// A fake cgroupfs tree in a temp dir, removed on drop.
    pub struct Tree(pub PathBuf);

    impl Tree {
        pub fn new() -> Tree {
            let n = N.fetch_add(1, Ordering::SeqCst);
            let p = std::env::temp_dir().join(format!("cgroups-unit-{}-{n}", std::process::id()));
            let _ = std::fs::remove_dir_all(&p);
            std::fs::create_dir_all(&p).unwrap();
            Tree(p)
        }
        pub fn path(&self, rel: &str) -> PathBuf {
            self.0.join(rel.trim_start_matches('/'))
        }
        pub fn write(&self, rel: &str, content: &str) {
            let p = self.path(rel);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(p, content).unwrap();
        }
        pub fn read(&self, rel: &str) -> String {
            let p = self.path(rel);
            std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
        }
        pub fn exists(&self, rel: &str) -> bool {
            self.path(rel).exists()
        }
        pub fn mkdir(&self, rel: &str) {
            std::fs::create_dir_all(self.path(rel)).unwrap();
        }
    }

    impl Drop for Tree {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    pub fn p(s: &str) -> crate::CgroupPath {
        crate::CgroupPath::new(s).unwrap()
    }
}

#[cfg(test)]
mod tests {
    use super::testutil::Tree;
    use super::*;

    #[test]
    fn procs_and_rmdir() {
        let t = Tree::new();
        t.write("a/cgroup.procs", "12\n7\n");
        t.write("b/cgroup.procs", "7\n9\n");
        let dirs = vec![t.path("a"), t.path("b"), t.path("missing")];
        assert_eq!(union_procs(&dirs).unwrap(), vec![7, 9, 12]);
        assert_eq!(read_procs(&t.path("missing")).unwrap(), None);
        t.write("c/cgroup.procs", "x\n");
        let e = read_procs(&t.path("c")).unwrap_err();
        assert!(e.to_string().contains("c/cgroup.procs"), "{e}");

        t.mkdir("empty");
        rmdir(&t.path("empty")).unwrap();
        rmdir(&t.path("empty")).unwrap();
        // A non-empty plain directory is ENOTEMPTY: an error naming the path, no retry.
        let e = rmdir(&t.path("a")).unwrap_err();
        assert!(e.to_string().starts_with("rmdir "), "{e}");
        assert!(
            e.to_string().contains(&t.path("a").display().to_string()),
            "{e}"
        );
    }

    #[test]
    fn controller_sets() {
        assert_eq!(controller_set("cpu io\n"), vec!["cpu", "io"]);
        assert_eq!(controller_set("+cpu +memory"), vec!["cpu", "memory"]);
        assert!(controller_set("\n").is_empty());
    }
}
