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

/// Writes `data` in one `write(2)`, as cgroupfs files want. A missing file is ENOENT
/// (cgroupfs cannot create files: `O_CREAT` would make it EACCES); only the unit tests'
/// fake trees create it.
pub(crate) fn write(path: &Path, data: &str) -> Result<()> {
    open_for_write(path)
        .and_then(|mut f| f.write_all(data.as_bytes()))
        .map_err(|e| Error::io(Op::Write, path, e))
}

fn open_for_write(path: &Path) -> std::io::Result<std::fs::File> {
    std::fs::OpenOptions::new()
        .write(true)
        .create(cfg!(test))
        .truncate(cfg!(test))
        .open(path)
}

/// Writes the limit `value` to the control file `path` (like [`write`]); a failure is
/// [`Error::Set`], naming the file and the value.
pub(crate) fn set(path: &Path, value: &str) -> Result<()> {
    tracing::debug!(file = %path.display(), value, "cgroup limit");
    #[cfg(test)]
    testutil::record(path, value);
    open_for_write(path)
        .and_then(|mut f| f.write_all(value.as_bytes()))
        .map_err(|e| Error::set(path, value, e))
}

/// A file holding one number (`memory.usage_in_bytes`); `max` (v2) is `None`, as is a
/// v1 "unlimited" value (at least 2^62: the kernel shows its page counter maximum).
pub(crate) fn read_limit(path: &Path) -> Result<Option<u64>> {
    let text = read(path)?;
    let t = text.trim();
    if t == "max" || t == "-1" {
        return Ok(None);
    }
    let n = parse_u64(path, t)?;
    Ok((n < 1 << 62).then_some(n))
}

/// A file holding one number.
pub(crate) fn read_u64(path: &Path) -> Result<u64> {
    parse_u64(path, read(path)?.trim())
}

/// Like [`read_u64`], `None` when the file does not exist.
pub(crate) fn read_u64_opt(path: &Path) -> Result<Option<u64>> {
    read_opt(path)?
        .map(|t| parse_u64(path, t.trim()))
        .transpose()
}

fn parse_u64(path: &Path, s: &str) -> Result<u64> {
    s.parse().map_err(|_| Error::Parse {
        path: path.to_path_buf(),
        line: s.to_string(),
        reason: "expected a number",
    })
}

/// A flat keyed file (`memory.stat`, `cpu.stat`, `memory.events`, `memory.oom_control`):
/// `key value` lines. Lines whose value is not a number are skipped.
#[derive(Debug, Default)]
pub(crate) struct Keyed(Vec<(String, u64)>);

impl Keyed {
    pub(crate) fn parse(text: &str) -> Keyed {
        let pairs = text.lines().filter_map(|l| {
            let (k, v) = l.trim().split_once(char::is_whitespace)?;
            Some((k.to_string(), v.trim().parse().ok()?))
        });
        Keyed(pairs.collect())
    }

    /// The file `path` parsed; empty when it does not exist.
    pub(crate) fn read_opt(path: &Path) -> Result<Keyed> {
        Ok(read_opt(path)?
            .map(|t| Keyed::parse(&t))
            .unwrap_or_default())
    }

    /// The value of `key`, 0 when the file has no such line.
    pub(crate) fn get(&self, key: &str) -> u64 {
        self.0.iter().find(|(k, _)| k == key).map_or(0, |(_, v)| *v)
    }

    /// Whether the file has a line for `key`.
    pub(crate) fn has(&self, key: &str) -> bool {
        self.0.iter().any(|(k, _)| k == key)
    }
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

/// Whether the `cgroup.controllers` or `cgroup.subtree_control` file `file` names
/// `controller`; `None` when the file cannot be read (the cgroup does not exist).
pub(crate) fn lists_controller(file: &Path, controller: &str) -> Option<bool> {
    let text = std::fs::read_to_string(file).ok()?;
    Some(controller_set(&text).iter().any(|c| c == controller))
}

/// `dir`, or its nearest ancestor that exists, not going above `root`.
pub(crate) fn nearest_existing(dir: &Path, root: &Path) -> PathBuf {
    let mut d = dir;
    while !d.is_dir() && d != root {
        match d.parent() {
            Some(p) if p.starts_with(root) => d = p,
            _ => break,
        }
    }
    d.to_path_buf()
}

#[cfg(test)]
pub(crate) mod testutil {
    use std::cell::RefCell;
    use std::path::{Path, PathBuf};
    use std::sync::atomic::{AtomicU32, Ordering};

    static N: AtomicU32 = AtomicU32::new(0);

    thread_local! {
        /// Every [`super::set`] of this thread (each test runs on its own thread).
        static WRITES: RefCell<Vec<(PathBuf, String)>> = const { RefCell::new(Vec::new()) };
    }

    pub(super) fn record(path: &Path, value: &str) {
        WRITES.with(|w| w.borrow_mut().push((path.to_path_buf(), value.to_string())));
    }

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
        /// The limits this thread wrote since the last call, in order, as
        /// `"path/relative/to/tree=value"`.
        pub fn writes(&self) -> Vec<String> {
            WRITES
                .with(|w| w.borrow_mut().drain(..).collect::<Vec<_>>())
                .into_iter()
                .map(|(p, v)| {
                    let rel = p.strip_prefix(&self.0).unwrap_or(&p).display().to_string();
                    format!("{rel}={v}")
                })
                .collect()
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
    fn numbers_and_keyed_files() {
        let t = Tree::new();
        t.write("max", "max\n");
        t.write("v1max", "9223372036854771712\n");
        t.write("n", "4096\n");
        t.write("bad", "x\n");
        assert_eq!(read_limit(&t.path("max")).unwrap(), None);
        assert_eq!(read_limit(&t.path("v1max")).unwrap(), None);
        assert_eq!(read_limit(&t.path("n")).unwrap(), Some(4096));
        assert_eq!(read_u64(&t.path("n")).unwrap(), 4096);
        assert_eq!(read_u64_opt(&t.path("none")).unwrap(), None);
        let e = read_u64(&t.path("bad")).unwrap_err();
        assert!(e.to_string().contains("bad"), "{e}");
        let k = Keyed::parse("oom_kill_disable 0\nunder_oom 0\noom_kill 3\nodd x\n");
        assert_eq!(k.get("oom_kill"), 3);
        assert_eq!(k.get("missing"), 0);
        assert_eq!(k.get("odd"), 0);
        set(&t.path("n"), "8192").unwrap();
        assert_eq!(t.read("n"), "8192");
        let e = set(&t.path("nodir/f"), "1").unwrap_err();
        assert!(e.to_string().starts_with("set "), "{e}");
        assert!(e.to_string().contains("nodir/f to \"1\""), "{e}");
    }

    #[test]
    fn controller_sets() {
        assert_eq!(controller_set("cpu io\n"), vec!["cpu", "io"]);
        assert_eq!(controller_set("+cpu +memory"), vec!["cpu", "memory"]);
        assert!(controller_set("\n").is_empty());
    }
}
