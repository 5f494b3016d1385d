//! The crate's one error type: every cgroupfs failure names the operation and the file.

use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

/// What was being done to a file when it failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    Read,
    Write,
    Mkdir,
    Rmdir,
    Spawn,
}

impl fmt::Display for Op {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Op::Read => "read",
            Op::Write => "write",
            Op::Mkdir => "mkdir",
            Op::Rmdir => "rmdir",
            Op::Spawn => "spawn",
        })
    }
}

#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A file operation on cgroupfs or procfs failed.
    #[error("{op} {}: {source}", path.display())]
    Io {
        op: Op,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// A cgroup path that cannot name a cgroup (`..`, `.`, NUL or newline in a name).
    #[error("invalid cgroup path {path:?}: {reason}")]
    InvalidPath { path: String, reason: &'static str },
    /// A line of `/proc/self/mountinfo` or `/proc/PID/cgroup` that does not parse.
    #[error("parse {}: {reason}: {line:?}", path.display())]
    Parse {
        path: PathBuf,
        line: String,
        reason: &'static str,
    },
    /// Neither a cgroup v2 hierarchy with controllers nor any v1 controller is mounted.
    #[error("no cgroup controllers mounted according to {}", path.display())]
    NoControllers { path: PathBuf },
    /// `/proc/PID/cgroup` has no line for the controller (nor a `0::` line).
    #[error("no cgroup of controller {controller:?} in {}", path.display())]
    NoCgroupFor { controller: String, path: PathBuf },
    /// `rmdir` kept failing with EBUSY: processes or child cgroups are still inside.
    #[error("rmdir {}: cgroup still busy after {waited:?}", path.display())]
    Busy { path: PathBuf, waited: Duration },
    /// Processes survived SIGKILL (or `cgroup.kill`) for the whole timeout.
    #[error("kill all in {}: pids {pids:?} still present after {waited:?}", path.display())]
    KillTimeout {
        path: PathBuf,
        pids: Vec<i32>,
        waited: Duration,
    },
    /// Sending SIGKILL failed with something other than ESRCH.
    #[error("kill pid {pid} of {}: {source}", path.display())]
    Signal {
        pid: i32,
        path: PathBuf,
        #[source]
        source: nix::Error,
    },
    /// `remove` and `kill_all` refuse the hierarchy's root cgroup.
    #[error("{op}: refusing to act on the root cgroup of the hierarchy")]
    RootCgroup { op: &'static str },
    /// Writing a limit to a control file failed.
    #[error("set {} to {value:?}: {source}", path.display())]
    Set {
        path: PathBuf,
        value: String,
        #[source]
        source: std::io::Error,
    },
    /// A limit the kernel refuses or a cgroup cannot run with (a memory limit below the
    /// cgroup's usage or below [`crate::MIN_MEMORY_LIMIT`], swap below memory, ...),
    /// named by the control file it is for.
    #[error("set {} to {value}: {reason}", path.display())]
    Limit {
        path: PathBuf,
        value: String,
        reason: String,
    },
    /// A limit or operation needs a controller the cgroup does not have (v1: not mounted;
    /// v2: a `unified` key on v1, ...).
    #[error("cgroup {cgroup}: {reason}")]
    Unsupported { cgroup: String, reason: String },
    /// systemd (the systemd driver) could not be reached or refused a unit.
    #[error("systemd: {op}: {reason}")]
    Systemd { op: String, reason: String },
    /// A freeze did not complete in time (the cgroup was thawed again).
    #[error("freeze {}: not frozen after {waited:?} (state {state:?})", path.display())]
    FreezeTimeout {
        path: PathBuf,
        state: String,
        waited: Duration,
    },
}

impl Error {
    /// A failed write of `value` to the control file `path`.
    pub(crate) fn set(path: impl Into<PathBuf>, value: &str, source: std::io::Error) -> Self {
        Error::Set {
            path: path.into(),
            value: value.to_string(),
            source,
        }
    }

    pub(crate) fn io(op: Op, path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        Error::Io {
            op,
            path: path.into(),
            source,
        }
    }

    /// The errno of an `Io` error, if any.
    pub fn errno(&self) -> Option<i32> {
        match self {
            Error::Io { source, .. } | Error::Set { source, .. } => source.raw_os_error(),
            _ => None,
        }
    }

    /// True for an `Io` error whose file or directory does not exist.
    pub fn is_not_found(&self) -> bool {
        matches!(self, Error::Io { source, .. } | Error::Set { source, .. }
            if source.kind() == std::io::ErrorKind::NotFound)
    }
}

pub type Result<T> = std::result::Result<T, Error>;
