//! Writing the binaries embedded in this crate (`crust-pause`, `crust-monitor`, built
//! from `crates/pause` by `build.rs`) to disk, where they can be executed.

use std::fs::{self, OpenOptions, Permissions};
use std::io::{self, Write};
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};

use crate::error::{Error, Result};

static TMP_COUNTER: AtomicU32 = AtomicU32::new(0);

/// Writes `bytes` to `dir/file_name` (mode 0755), creating `dir`, unless an identical
/// file with that mode is already there; returns its path. `binary` names it in errors.
///
/// The write goes to a temp file in `dir` that is then renamed over the old one: a
/// process running from the old file keeps its inode (writing in place would fail with
/// ETXTBSY), and a crash never leaves a half-written binary at the final path.
pub(crate) fn install(
    dir: &Path,
    file_name: &str,
    bytes: &[u8],
    binary: &'static str,
) -> Result<PathBuf> {
    let path = dir.join(file_name);
    if is_installed(&path, bytes) {
        return Ok(path);
    }
    let err = |source| Error::InstallBinary {
        binary,
        path: path.clone(),
        source,
    };
    fs::create_dir_all(dir).map_err(err)?;
    let tmp = dir.join(format!(
        ".{file_name}.tmp.{}.{}",
        std::process::id(),
        TMP_COUNTER.fetch_add(1, Ordering::Relaxed)
    ));
    let write = || -> io::Result<()> {
        let mut f = OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o755)
            .open(&tmp)?;
        f.write_all(bytes)?;
        // The umask may have taken bits off the mode asked for at open.
        f.set_permissions(Permissions::from_mode(0o755))?;
        f.sync_all()?;
        fs::rename(&tmp, &path)
    };
    if let Err(e) = write() {
        let _ = fs::remove_file(&tmp);
        return Err(err(e));
    }
    tracing::debug!(path = %path.display(), bytes = bytes.len(), "{binary} binary installed");
    Ok(path)
}

fn is_installed(path: &Path, bytes: &[u8]) -> bool {
    match fs::metadata(path) {
        Ok(m)
            if m.is_file()
                && m.len() == bytes.len() as u64
                && m.permissions().mode() & 0o7777 == 0o755 =>
        {
            fs::read(path).map(|b| b == bytes).unwrap_or(false)
        }
        _ => false,
    }
}
