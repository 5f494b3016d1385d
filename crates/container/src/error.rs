//! The crate's one error type. Messages are lowercase and name the path, pid or step
//! involved, so a caller can log them as they are.

use std::io;
use std::path::PathBuf;
use std::time::Duration;

use crate::executor::{Status, Step};
use crate::ns::NsKind;

pub type Result<T, E = Error> = std::result::Result<T, E>;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Writing an embedded binary (`binary` is `pause` or `monitor`) to disk failed.
    #[error("install {binary} binary at {path}: {source}")]
    InstallBinary {
        binary: &'static str,
        path: PathBuf,
        #[source]
        source: io::Error,
    },

    /// A monitor's exit record exists but cannot be read.
    #[error("read exit record {path}: {source}")]
    ReadExit {
        path: PathBuf,
        #[source]
        source: io::Error,
    },

    /// A monitor's exit record is not the JSON the monitor writes.
    #[error("parse exit record {path}: {source}")]
    ParseExit {
        path: PathBuf,
        #[source]
        source: serde_json::Error,
    },

    /// A uid or gid map the kernel would refuse; caught before anything is made.
    #[error("invalid id mapping: {reason}")]
    InvalidIdMapping { reason: String },

    /// Making a pod's user namespace failed at `step` (`unshare`, `write uid_map`...).
    #[error("user namespace: {step}: {source}")]
    UserNamespace {
        step: &'static str,
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
    /// (`unshare`, `sethostname`, `setsid`), `exec` (a missing binary, say), or the
    /// launcher's step into the pause's empty root (`pivot_root`, say).
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

    /// Entering the namespace pinned at `path` failed.
    #[error("enter namespace {path}: {source}")]
    EnterNamespace {
        path: PathBuf,
        #[source]
        source: io::Error,
    },

    /// Setting `lo` up in a pod's network namespace failed.
    #[error("set lo up in {netns}: {source}")]
    LoopbackUp {
        netns: PathBuf,
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

    /// A container spec the executor cannot run; caught before any process is made.
    #[error("container {id}: invalid spec: {reason}")]
    InvalidSpec { id: String, reason: String },

    /// Creating a container failed at `step` (in the caller, the intermediate process
    /// or the container's init, before the start gate) on `path` (may be empty).
    #[error("create container {id}: {step}{}: {source}", with_space(path))]
    Create {
        id: String,
        step: Step,
        path: String,
        #[source]
        source: io::Error,
    },

    /// Loading, starting, signalling or deleting a created container failed at `step`.
    #[error("container {id}: {step} {}: {source}", path.display())]
    Container {
        id: String,
        step: &'static str,
        path: PathBuf,
        #[source]
        source: io::Error,
    },

    /// The container is not in a state that allows `op`.
    #[error("container {id} is {status}: cannot {op}")]
    ContainerState {
        id: String,
        status: Status,
        op: &'static str,
    },
}

/// `" path"`, or nothing for an empty path.
fn with_space(path: &str) -> String {
    if path.is_empty() {
        String::new()
    } else {
        format!(" {path}")
    }
}
