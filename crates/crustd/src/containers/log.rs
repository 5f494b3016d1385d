//! The container's CRI log: its host path under the pod's log directory, checked and
//! with its folders made ([`log_file`]), the file there when CreateContainer returns
//! ([`touch_log`]), and ReopenContainerLog (the monitor opens it anew).

use crate::containers::lifecycle::{monitor_alive, refresh};
use crate::containers::store::{ContainerRecord, ContainerState};
use crate::cri::error::{Error, Result};
use crate::daemon::Crust;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The host path of a container's CRI log, `log_path` under the pod's `log_directory`,
/// with its folders made. The log is written by the monitor as root, so it must stay
/// in the log directory: a `log_path` that is absolute or has `..` is refused (the
/// kubelet sends `<container>/<attempt>.log`; `join` would put an absolute one anywhere
/// and `..` leads out), and so is a folder on the way that is a symlink (one planted by
/// whatever can write the pod's log folder, say a container with it as a volume). The
/// file itself is opened with `O_NOFOLLOW` by [`touch_log`] and the monitor.
pub(super) fn log_file(log_directory: &Path, log_path: &str) -> Result<std::path::PathBuf> {
    use std::path::Component;
    let rel = Path::new(log_path);
    if !rel
        .components()
        .all(|c| matches!(c, Component::Normal(_) | Component::CurDir))
    {
        return Err(Error::InvalidArgument(format!(
            "log_path {log_path:?} must be a relative path without '..'"
        )));
    }
    std::fs::create_dir_all(log_directory).map_err(|e| {
        Error::InvalidArgument(format!("log directory {}: {e}", log_directory.display()))
    })?;
    let mut dir = log_directory.to_path_buf();
    for c in rel.parent().into_iter().flat_map(|p| p.components()) {
        dir.push(c);
        match std::fs::symlink_metadata(&dir) {
            Ok(m) if m.file_type().is_symlink() => {
                return Err(Error::InvalidArgument(format!(
                    "log_path {log_path:?}: {} is a symlink",
                    dir.display()
                )))
            }
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                std::fs::create_dir(&dir).map_err(|e| {
                    Error::InvalidArgument(format!("log directory {}: {e}", dir.display()))
                })?;
            }
            Err(e) => {
                return Err(Error::InvalidArgument(format!(
                    "log directory {}: {e}",
                    dir.display()
                )))
            }
        }
    }
    Ok(log_directory.join(rel))
}

/// Makes sure the CRI log file exists when CreateContainer returns. The monitor opens
/// it too, but on its own time: a client that reads the log right after
/// StartContainer (the conformance suite's log tests do) must find the file.
pub(super) fn touch_log(rec: &ContainerRecord) -> Result<()> {
    use std::os::unix::fs::OpenOptionsExt;
    let Some(p) = &rec.log_path else {
        return Ok(());
    };
    std::fs::OpenOptions::new()
        .append(true)
        .create(true)
        .mode(0o640)
        // Not through a symlink put in its place (see `log_file`).
        .custom_flags(libc::O_NOFOLLOW)
        .open(p)
        .map(drop)
        .map_err(|e| match e.raw_os_error() {
            Some(libc::ELOOP) => {
                Error::InvalidArgument(format!("the log file {} is a symlink", p.display()))
            }
            _ => Error::Internal(format!("creating the log file {}: {e}", p.display())),
        })
}

pub async fn reopen_log(crust: Arc<Crust>, id: &str) -> Result<()> {
    let c = crust.containers.get(id)?;
    let mut rec = c.rec.lock().await;
    refresh(&crust, &mut rec);
    if rec.state != ContainerState::Running {
        return Err(Error::FailedPrecondition(format!(
            "container {} is not running",
            rec.id
        )));
    }
    let Some(log) = rec.log_path.clone() else {
        return Ok(());
    };
    if !monitor_alive(&rec) {
        return Err(Error::FailedPrecondition(format!(
            "container {} is not running",
            rec.id
        )));
    }
    // SAFETY: a signal to the monitor whose start time was just checked.
    unsafe { libc::kill(rec.monitor_pid, libc::SIGUSR1) };
    let deadline = Instant::now() + Duration::from_secs(5);
    while !log.exists() {
        if Instant::now() >= deadline || !monitor_alive(&rec) {
            return Err(Error::Internal(format!(
                "the monitor of {} did not reopen {}",
                rec.id,
                log.display()
            )));
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A log path stays in the log directory: `..`, absolute paths and a symlinked
    /// folder on the way are refused; folders are made.
    #[test]
    fn log_file_stays_in_the_log_directory() {
        let t = std::env::temp_dir().join(format!("crustd-logfile-{}", std::process::id()));
        let logs = t.join("pod");
        assert_eq!(log_file(&logs, "c/0.log").unwrap(), logs.join("c/0.log"));
        assert!(logs.join("c").is_dir());
        for bad in ["../x.log", "c/../../x.log", "/etc/x.log"] {
            let e = log_file(&logs, bad).unwrap_err();
            assert!(matches!(e, Error::InvalidArgument(_)), "{bad}: {e:?}");
        }
        std::os::unix::fs::symlink(&t, logs.join("link")).unwrap();
        let e = log_file(&logs, "link/0.log").unwrap_err();
        assert!(matches!(e, Error::InvalidArgument(_)), "{e:?}");
        std::fs::remove_dir_all(&t).unwrap();
    }
}
