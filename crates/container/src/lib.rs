//! `container`: from an OCI spec to a process — namespaces, mounts, and (so far) the
//! pod sandbox's pause process and the bind mounts that pin its namespaces, and the
//! container monitor that owns a container's output and exit status.
//!
//! `crustd` makes no namespace or mount syscalls itself (see DESIGN.md); it calls this
//! crate. The crate knows nothing of CRI.

mod cgroup_join;
mod embedded;
pub mod error;
pub mod executor;
pub mod monitor;
pub mod ns;
pub mod pause;
pub mod proc;
pub mod userns;

pub use error::{Error, Result};
pub use ns::NsKind;
pub use pause::{Pause, PauseSpec};
