//! Unpacking one layer (a tar, gzip- or zstd-compressed or plain) into a directory in
//! overlayfs's format: a `.wh.NAME` whiteout becomes a 0/0 character device `NAME`,
//! `.wh..wh..opq` becomes the `trusted.overlay.opaque=y` xattr on its directory. Modes,
//! owners, mtimes, xattrs, hard links, symlinks and device nodes are kept.
//!
//! No entry lands outside the root: `..` that would climb above it is refused and
//! absolute names are taken relative to the root. A parent that is a symlink of the
//! layer is followed as if the layer's root were `/` (an absolute target starts at
//! the root, `..` stops there), one component at a time and never by the kernel, as
//! containerd applies a layer onto its parents: `bin -> usr/bin` then `bin/x` puts `x`
//! in `usr/bin`. The entry itself is never followed; hard links must point inside.
//!
//! Parents a layer needs but never names are made (0755, root) and reported as
//! *implied*: where a lower layer has a symlink in their place (a later layer's
//! `bin/x` over a base's `bin -> usr/bin`), what they hold belongs where the symlink
//! leads, which only the image's layers below can tell (see `chain`).
//!
//! Between the decompressor and the tar reader, `targuard` refuses oversized extension
//! entries before the tar crate reads them whole.

pub(crate) mod chain;
pub(crate) mod targuard;

use crate::digest::HashReader;
use crate::error::{Error, Result};
use std::ffi::CString;
use std::io::{BufRead, BufReader, Read};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Component, Path, PathBuf};
use targuard::{Guard, TooLarge};

const WHITEOUT: &str = ".wh.";
const OPAQUE: &str = ".wh..wh..opq";

/// What unpacking a layer found.
#[derive(Debug)]
pub struct Unpacked {
    /// sha256 of the uncompressed tar: the layer's diff id.
    pub diff_id: String,
    pub uncompressed_size: u64,
    /// Folders made because an entry needed them, never named by the layer itself,
    /// relative to the root, sorted.
    pub implied: Vec<PathBuf>,
}

/// How many symlinks one path may go through (the kernel's limit too).
pub(crate) const MAX_LINKS: usize = 40;

/// Compression of a layer stream, told by its first bytes.
pub fn decompressor<'a, R: Read + 'a>(r: R) -> std::io::Result<Box<dyn Read + 'a>> {
    let mut br = BufReader::with_capacity(256 * 1024, r);
    let head = br.fill_buf()?;
    Ok(if head.starts_with(&[0x1f, 0x8b]) {
        Box::new(flate2::bufread::MultiGzDecoder::new(br))
    } else if head.starts_with(&[0x28, 0xb5, 0x2f, 0xfd]) {
        Box::new(zstd::stream::read::Decoder::with_buffer(br)?)
    } else {
        Box::new(br)
    })
}

/// Unpacks the (possibly compressed) layer `r` into `root`, which must exist and be empty.
/// `what` names the layer in errors.
pub fn unpack(r: impl Read, root: &Path, what: &str) -> Result<Unpacked> {
    let bad = |m: String| Error::InvalidArgument(format!("layer {what}: {m}"));
    let corrupt = |e: std::io::Error| read_err(what, e);
    let hr = HashReader::new(decompressor(r).map_err(corrupt)?);
    let mut ar = tar::Archive::new(Guard::new(hr));
    let mut dirs: Vec<(PathBuf, u64)> = Vec::new();
    let mut implied = std::collections::BTreeSet::new();
    let mut buf = vec![0u8; 128 << 10];
    {
        let entries = ar.entries().map_err(corrupt)?;
        for entry in entries {
            let mut entry = entry.map_err(corrupt)?;
            let raw = entry.path().map_err(corrupt)?.into_owned();
            let rel = clean(&raw).map_err(|m| bad(format!("{}: {m}", raw.display())))?;
            let Some(rel) = rel else {
                root_entry(&entry, root, what)?;
                continue;
            };
            let (parent, name) = match rel.parent() {
                Some(p) => (p.to_path_buf(), rel.file_name().unwrap().to_owned()),
                None => (PathBuf::new(), rel.as_os_str().to_owned()),
            };
            let prel = resolve(root, &parent, Some(&mut implied))
                .map_err(|m| bad(format!("{}: {m}", raw.display())))?;
            let pdir = root.join(&prel);
            let name_s = name.to_string_lossy();
            if name_s == OPAQUE {
                // An opaque folder is the layer's own statement, not a by-product.
                implied.remove(&prel);
            }
            if whiteout(&pdir, &name_s, what)? {
                continue;
            }
            let path = pdir.join(&name);
            let h = entry.header().clone();
            let kind = h.entry_type();
            let mode = h.mode().map_err(corrupt)? & 0o7777;
            let uid = h.uid().map_err(corrupt)? as u32;
            let gid = h.gid().map_err(corrupt)? as u32;
            let mtime = h.mtime().unwrap_or(0) as i64;
            use tar::EntryType as T;
            match kind {
                T::Directory => {
                    match std::fs::symlink_metadata(&path) {
                        Ok(m) if m.is_dir() => {}
                        Ok(_) => {
                            remove_existing(&path).map_err(|e| io_err(what, &path, e))?;
                            std::fs::create_dir(&path).map_err(|e| io_err(what, &path, e))?;
                        }
                        Err(_) => std::fs::create_dir(&path).map_err(|e| io_err(what, &path, e))?,
                    }
                    implied.remove(&prel.join(&name));
                    dirs.push((path.clone(), mtime as u64));
                }
                T::Regular | T::Continuous | T::GNUSparse => {
                    remove_existing(&path).map_err(|e| io_err(what, &path, e))?;
                    let mut f = std::fs::OpenOptions::new()
                        .write(true)
                        .create_new(true)
                        .custom_flags(libc::O_NOFOLLOW)
                        .mode(0o600)
                        .open(&path)
                        .map_err(|e| io_err(what, &path, e))?;
                    copy_entry(&mut entry, &mut f, &mut buf, what, &path)?;
                }
                T::Symlink => {
                    let target = entry
                        .link_name()
                        .map_err(corrupt)?
                        .ok_or_else(|| bad(format!("{}: symlink without target", raw.display())))?
                        .into_owned();
                    remove_existing(&path).map_err(|e| io_err(what, &path, e))?;
                    std::os::unix::fs::symlink(&target, &path)
                        .map_err(|e| io_err(what, &path, e))?;
                }
                T::Link => {
                    hard_link(&entry, &raw, root, &path, what)?;
                    continue; // the link shares the target's metadata
                }
                T::Char | T::Block | T::Fifo => {
                    let fmt = match kind {
                        T::Char => libc::S_IFCHR,
                        T::Block => libc::S_IFBLK,
                        _ => libc::S_IFIFO,
                    };
                    let major = h.device_major().ok().flatten().unwrap_or(0);
                    let minor = h.device_minor().ok().flatten().unwrap_or(0);
                    remove_existing(&path).map_err(|e| io_err(what, &path, e))?;
                    mknod(&path, fmt | 0o600, libc::makedev(major, minor))
                        .map_err(|e| io_err(what, &path, e))?;
                }
                T::XGlobalHeader | T::XHeader | T::GNULongName | T::GNULongLink => continue,
                other => {
                    return Err(bad(format!(
                        "{}: unsupported entry type {other:?}",
                        raw.display()
                    )));
                }
            }
            set_metadata(&mut entry, &path, kind, (uid, gid, mode, mtime), what)?;
        }
    }
    // Directory times last: creating their entries changed them.
    for (d, t) in dirs.iter().rev() {
        set_mtime(d, *t as i64);
    }
    let (diff_id, uncompressed_size) = ar.into_inner().into_inner().finish().map_err(corrupt)?;
    Ok(Unpacked {
        diff_id,
        uncompressed_size,
        implied: implied.into_iter().collect(),
    })
}

/// Copies a file's content out of the layer: a read error is the layer's (see
/// [`read_err`]), a write error the node's (ENOSPC: RESOURCE_EXHAUSTED, not DATA_LOSS).
fn copy_entry(
    r: &mut impl Read,
    f: &mut std::fs::File,
    buf: &mut [u8],
    what: &str,
    path: &Path,
) -> Result<()> {
    use std::io::Write;
    loop {
        let n = match r.read(buf) {
            Ok(0) => return Ok(()),
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(read_err(what, e)),
        };
        f.write_all(&buf[..n]).map_err(|e| io_err(what, path, e))?;
    }
}

/// A layer that could not be read: corrupt (DATA_LOSS), or refused by the guard for an
/// oversized extension entry (INVALID_ARGUMENT: retrying the pull cannot help).
fn read_err(what: &str, e: std::io::Error) -> Error {
    match e.get_ref().and_then(|i| i.downcast_ref::<TooLarge>()) {
        Some(t) => Error::InvalidArgument(format!("layer {what}: refused: {t}")),
        None => Error::DataLoss(format!("layer {what}: reading: {e}")),
    }
}

/// The root itself (`./`): its mode and owner become the container's `/`.
fn root_entry<R: Read>(entry: &tar::Entry<'_, R>, root: &Path, what: &str) -> Result<()> {
    let corrupt = |e: std::io::Error| Error::DataLoss(format!("layer {what}: reading: {e}"));
    if entry.header().entry_type() == tar::EntryType::Directory {
        let h = entry.header();
        let mode = h.mode().map_err(corrupt)? & 0o7777;
        let (uid, gid) = (
            h.uid().map_err(corrupt)? as u32,
            h.gid().map_err(corrupt)? as u32,
        );
        std::os::unix::fs::lchown(root, Some(uid), Some(gid)).map_err(|e| io_err(what, root, e))?;
        std::fs::set_permissions(root, std::fs::Permissions::from_mode(mode))
            .map_err(|e| io_err(what, root, e))?;
    }
    Ok(())
}

/// An overlay's marks for what a layer removes: the opaque marker (the folder hides the
/// layers below) and `.wh.<name>` (a whiteout device). Whether `name` was one.
fn whiteout(pdir: &Path, name_s: &str, what: &str) -> Result<bool> {
    if name_s == OPAQUE {
        set_xattr(pdir, "trusted.overlay.opaque", b"y")
            .map_err(|e| Error::io(format!("layer {what}: opaque {}", pdir.display()), e))?;
        return Ok(true);
    }
    if let Some(hidden) = name_s.strip_prefix(WHITEOUT) {
        if hidden.starts_with(".wh.") || hidden.is_empty() || hidden == "." || hidden == ".." {
            return Ok(true); // aufs bookkeeping (.wh..wh.plnk and the like)
        }
        let p = pdir.join(hidden);
        remove_existing(&p).map_err(|e| io_err(what, &p, e))?;
        mknod(&p, libc::S_IFCHR, 0).map_err(|e| io_err(what, &p, e))?;
        return Ok(true);
    }
    Ok(false)
}

/// A hard link to a file this layer already made (never out of the root, never to a
/// folder).
fn hard_link<R: Read>(
    entry: &tar::Entry<'_, R>,
    raw: &Path,
    root: &Path,
    path: &Path,
    what: &str,
) -> Result<()> {
    let bad = |m: String| Error::InvalidArgument(format!("layer {what}: {m}"));
    let corrupt = |e: std::io::Error| Error::DataLoss(format!("layer {what}: reading: {e}"));
    let target = entry
        .link_name()
        .map_err(corrupt)?
        .ok_or_else(|| bad(format!("{}: hard link without target", raw.display())))?
        .into_owned();
    let trel = clean(&target)
        .map_err(|m| {
            bad(format!(
                "{}: link to {}: {m}",
                raw.display(),
                target.display()
            ))
        })?
        .ok_or_else(|| bad(format!("{}: hard link to the root", raw.display())))?;
    let tparent = resolve(root, trel.parent().unwrap_or(Path::new("")), None).map_err(|m| {
        bad(format!(
            "{}: link to {}: {m}",
            raw.display(),
            target.display()
        ))
    })?;
    let src = root
        .join(tparent)
        .join(trel.file_name().unwrap_or_default());
    match std::fs::symlink_metadata(&src) {
        Ok(m) if !m.is_dir() => {}
        _ => {
            return Err(bad(format!(
                "{}: hard link to {} which is not a file of this layer",
                raw.display(),
                target.display()
            )))
        }
    }
    if src.as_path() != path {
        remove_existing(path).map_err(|e| io_err(what, path, e))?;
        std::fs::hard_link(&src, path).map_err(|e| io_err(what, path, e))?;
    }
    Ok(())
}

/// Owner, mode (not a symlink's), extended attributes and modification time (a
/// folder's is set at the end, after its entries) of an unpacked entry.
fn set_metadata<R: Read>(
    entry: &mut tar::Entry<'_, R>,
    path: &Path,
    kind: tar::EntryType,
    (uid, gid, mode, mtime): (u32, u32, u32, i64),
    what: &str,
) -> Result<()> {
    use tar::EntryType as T;
    std::os::unix::fs::lchown(path, Some(uid), Some(gid)).map_err(|e| io_err(what, path, e))?;
    if kind != T::Symlink {
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))
            .map_err(|e| io_err(what, path, e))?;
    }
    if let Ok(Some(exts)) = entry.pax_extensions() {
        for ext in exts.flatten() {
            let Ok(key) = ext.key() else { continue };
            if let Some(attr) = key.strip_prefix("SCHILY.xattr.") {
                if let Err(e) = set_xattr(path, attr, ext.value_bytes()) {
                    tracing::warn!(layer = what, path = %path.display(), attr, "xattr not kept: {e}");
                }
            }
        }
    }
    if kind != T::Directory {
        set_mtime(path, mtime);
    }
    Ok(())
}

fn io_err(what: &str, p: &Path, e: std::io::Error) -> Error {
    Error::io(format!("layer {what}: {}", p.display()), e)
}

/// Makes an entry's name relative to the root: drops `/` and `.`, resolves `..`
/// lexically and refuses one that would climb above the root. `None` is the root.
pub fn clean(p: &Path) -> std::result::Result<Option<PathBuf>, String> {
    let mut out = PathBuf::new();
    for c in p.components() {
        match c {
            Component::RootDir | Component::CurDir | Component::Prefix(_) => {}
            Component::ParentDir => {
                if !out.pop() {
                    return Err("path escapes the layer root".into());
                }
            }
            Component::Normal(n) => out.push(n),
        }
    }
    Ok(if out.as_os_str().is_empty() {
        None
    } else {
        Some(out)
    })
}

/// Resolves the folder `rel` under `root` as the layer sees it, one component at a
/// time: a symlink is followed with `root` as `/` (an absolute target starts over at
/// the root, `..` stops at it), so nothing outside `root` is ever reached. A missing
/// folder is made (0755, root-owned, as tar does for implied folders) and added to
/// `implied` when that is given; without it a missing folder is an error. Returns the
/// folder's resolved path relative to `root`.
pub(crate) fn resolve(
    root: &Path,
    rel: &Path,
    mut implied: Option<&mut std::collections::BTreeSet<PathBuf>>,
) -> std::result::Result<PathBuf, String> {
    let mut cur = PathBuf::new();
    let mut todo: std::collections::VecDeque<std::ffi::OsString> =
        rel.components().map(|c| c.as_os_str().to_owned()).collect();
    let mut links = 0;
    while let Some(c) = todo.pop_front() {
        match Path::new(&c).components().next() {
            None | Some(Component::CurDir) | Some(Component::RootDir) => continue,
            Some(Component::ParentDir) => {
                cur.pop();
                continue;
            }
            _ => {}
        }
        let next = cur.join(&c);
        let abs = root.join(&next);
        match std::fs::symlink_metadata(&abs) {
            Ok(m) if m.file_type().is_symlink() => {
                links += 1;
                if links > MAX_LINKS {
                    return Err(format!(
                        "parent {}: too many levels of symlinks",
                        next.display()
                    ));
                }
                let target = std::fs::read_link(&abs)
                    .map_err(|e| format!("reading symlink {}: {e}", next.display()))?;
                if target.is_absolute() {
                    cur = PathBuf::new();
                }
                for t in target.components().rev() {
                    todo.push_front(t.as_os_str().to_owned());
                }
            }
            Ok(m) if m.is_dir() => cur = next,
            Ok(_) => return Err(format!("parent {} is not a directory", next.display())),
            Err(_) => {
                let Some(implied) = implied.as_deref_mut() else {
                    return Err(format!("{} does not exist in this layer", next.display()));
                };
                std::fs::create_dir(&abs)
                    .map_err(|e| format!("creating {}: {e}", abs.display()))?;
                let _ = std::fs::set_permissions(&abs, std::fs::Permissions::from_mode(0o755));
                implied.insert(next.clone());
                cur = next;
            }
        }
    }
    Ok(cur)
}

/// Makes room for a new entry: a later entry of a layer replaces an earlier one.
fn remove_existing(p: &Path) -> std::io::Result<()> {
    crate::fsutil::remove_all(p)
}

pub(crate) fn cpath(p: &Path) -> std::io::Result<CString> {
    CString::new(p.as_os_str().as_bytes())
        .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidInput, e))
}

fn mknod(p: &Path, mode: libc::mode_t, dev: libc::dev_t) -> std::io::Result<()> {
    let c = cpath(p)?;
    // SAFETY: c is a valid NUL-terminated path.
    if unsafe { libc::mknod(c.as_ptr(), mode, dev) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

pub(crate) fn set_xattr(p: &Path, name: &str, value: &[u8]) -> std::io::Result<()> {
    let c = cpath(p)?;
    let n =
        CString::new(name).map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidInput, e))?;
    // SAFETY: valid C strings and a buffer of the given length.
    let r = unsafe {
        libc::lsetxattr(
            c.as_ptr(),
            n.as_ptr(),
            value.as_ptr().cast(),
            value.len(),
            0,
        )
    };
    if r != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

pub(crate) fn set_mtime(p: &Path, secs: i64) {
    let Ok(c) = cpath(p) else { return };
    let ts = [
        libc::timespec {
            tv_sec: secs,
            tv_nsec: 0,
        },
        libc::timespec {
            tv_sec: secs,
            tv_nsec: 0,
        },
    ];
    // SAFETY: valid path and two timespecs.
    unsafe {
        libc::utimensat(
            libc::AT_FDCWD,
            c.as_ptr(),
            ts.as_ptr(),
            libc::AT_SYMLINK_NOFOLLOW,
        )
    };
}

/// Reads the `trusted.overlay.opaque` xattr (for tests and checks).
pub fn is_opaque(p: &Path) -> bool {
    let Ok(c) = cpath(p) else { return false };
    let mut buf = [0u8; 4];
    // SAFETY: valid path, name and buffer.
    let n = unsafe {
        libc::lgetxattr(
            c.as_ptr(),
            c"trusted.overlay.opaque".as_ptr(),
            buf.as_mut_ptr().cast(),
            buf.len(),
        )
    };
    n == 1 && buf[0] == b'y'
}

#[cfg(test)]
mod tests;
