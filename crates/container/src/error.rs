//! The crate's one error type. Messages are lowercase and name the path, pid or step
//! involved, so a caller can log them as they are.

use std::io;
use std::path::PathBuf;
use std::time::Duration;

use crate::ns::NsKind;

pub type Result<T, E = Error> = std::result::Result<T, E>;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Writing the embedded pause binary to disk failed.
    #[error("install pause binary at {path}: {source}")]
    InstallPause {
        path: PathBuf,
        #[source]
        source: io::Error,
    },

    /// A pod hostname the kernel would refuse; caught before forking.
    #[error("invalid pod hostname {hostname:?}: {reason}")]
    InvalidHostname {
        hostname: String,
        reason: &'static str,
    },

    /// Starting the launcher failed. `step` is what failed in the forked child
    /// (`unshare`, `sethostname`, `setsid`) or `exec` (a missing binary, say).
    #[error("spawn pause {binary}: {step}: {source}")]
    SpawnPause {
        binary: PathBuf,
        step: &'static str,
        #[source]
        source: io::Error,
    },

    /// The launcher ran but did not exit 0 with a pid on its stdout.
    #[error("pause launcher {binary}: {reason}")]
    PauseLauncher { binary: PathBuf, reason: String },

    /// The launcher reported a pid but no such live process exists.
    #[error("pause {pid} is gone right after it started")]
    PauseVanished { pid: i32 },

    /// Sending a signal to the pause failed for a reason other than it being gone.
    #[error("signal pause {pid}: {source}")]
    SignalPause {
        pid: i32,
        #[source]
        source: io::Error,
    },

    /// The pause outlived SIGKILL by `waited`.
    #[error("pause {pid} still alive {waited:?} after SIGKILL")]
    PauseUnkillable { pid: i32, waited: Duration },

    /// Pinning a namespace failed at `step`.
    #[error("pin {kind} namespace of pid {pid} at {target}: {step}: {source}")]
    Pin {
        pid: i32,
        kind: NsKind,
        target: PathBuf,
        step: &'static str,
        #[source]
        source: io::Error,
    },

    /// Removing a namespace pin failed at `step`.
    #[error("unpin namespace at {target}: {step}: {source}")]
    Unpin {
        target: PathBuf,
        step: &'static str,
        #[source]
        source: io::Error,
    },
}
