//! CRI seccomp profiles → the OCI spec's `linux.seccomp`.

use crate::error::Result;
use cri_api::LinuxContainerSecurityContext;

/// The `linux.seccomp` object for a container's security context, or `None` for
/// unconfined. (To be filled in: RuntimeDefault, Localhost, the deprecated
/// `seccomp_profile_path` forms.)
pub fn linux_seccomp(_sc: &LinuxContainerSecurityContext) -> Result<Option<serde_json::Value>> {
    Ok(None)
}
