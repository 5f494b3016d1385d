//! Durable writes and disk usage.

use crate::error::{IoContext, Result};
use std::io::Write;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

static COUNTER: AtomicU64 = AtomicU64::new(0);

/// A name for a temp entry, unique in this process; it starts with the pid so that a
/// later process can tell a dead writer's leftovers (see [`clean_tmp`]).
pub fn tmp_name(tag: &str) -> String {
    let n = COUNTER.fetch_add(1, Ordering::SeqCst);
    format!("{}-{n}-{tag}", std::process::id())
}

/// Writes `data` to `path` durably: temp file in the same dir, fsync, rename, fsync dir.
pub fn write_atomic(path: &Path, data: &[u8]) -> Result<()> {
    let dir = path.parent().unwrap_or(Path::new("."));
    let tmp = dir.join(format!(".{}", tmp_name("tmp")));
    let r = (|| {
        let mut f = std::fs::File::create(&tmp)?;
        f.write_all(data)?;
        f.sync_all()?;
        std::fs::rename(&tmp, path)?;
        sync_dir(dir)
    })();
    if r.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    r.ctx(format!("writing {}", path.display()))
}

pub fn sync_dir(dir: &Path) -> std::io::Result<()> {
    std::fs::File::open(dir)?.sync_all()
}

/// Removes a file or a whole tree; absent is fine.
pub fn remove_all(p: &Path) -> std::io::Result<()> {
    match std::fs::symlink_metadata(p) {
        Ok(m) if m.is_dir() => std::fs::remove_dir_all(p),
        Ok(_) => std::fs::remove_file(p),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e),
    }
}

/// Removes entries of `dir` left by processes that are gone (names from [`tmp_name`]).
pub fn clean_tmp(dir: &Path) {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return;
    };
    for e in rd.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        let pid = name.trim_start_matches('.').split('-').next().unwrap_or("");
        let alive = pid
            .parse::<u32>()
            .map(|p| Path::new(&format!("/proc/{p}")).exists())
            .unwrap_or(false);
        if !alive {
            let _ = remove_all(&e.path());
        }
    }
}

/// Bytes (allocated blocks) and inodes used under `p`, each hard-linked inode once.
pub fn usage(p: &Path) -> (u64, u64) {
    let mut seen = std::collections::HashSet::new();
    let mut bytes = 0;
    let mut inodes = 0;
    let mut stack: Vec<PathBuf> = vec![p.to_path_buf()];
    while let Some(p) = stack.pop() {
        let Ok(m) = std::fs::symlink_metadata(&p) else {
            continue;
        };
        if m.nlink() > 1 && !m.is_dir() && !seen.insert((m.dev(), m.ino())) {
            continue;
        }
        bytes += m.blocks() * 512;
        inodes += 1;
        if m.is_dir() {
            if let Ok(rd) = std::fs::read_dir(&p) {
                stack.extend(rd.flatten().map(|e| e.path()));
            }
        }
    }
    (bytes, inodes)
}
