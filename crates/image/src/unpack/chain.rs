//! A layer on its parents: where a lower layer has a symlink in place of a folder a
//! layer only implies (a base with `bin -> usr/bin`, then a layer whose tar holds
//! `bin/x` but no `bin/` entry), the layer's content belongs where the symlink leads,
//! as a layer applied onto the root the layers below make (the image spec's changeset
//! applied to a root filesystem; containerd's native snapshotter, tar itself). Unpacked
//! alone, the layer has a real `bin/` that would hide the base's symlink in the
//! overlay (and with it every program in `/usr/bin` reached as `/bin/...`).
//!
//! containerd's overlayfs snapshotter, its default, does not do this: it applies each
//! layer into that layer's own folder, following only the layer's own symlinks, so the
//! implied `bin/` hides the base's symlink there. crust keeps the image working
//! instead; `usrmerge_layers_against_containerd` (tests/tests/crustd/images/layers.rs)
//! compares both snapshotters on the same layers and lists where overlayfs differs.
//!
//! Layers are unpacked alone and in parallel, keyed by their diff id, and shared by
//! every image that has them; the unpacker notes the folders it had to imply
//! (`implied/<hex>`). When an image is recorded, each layer's implied folders
//! are resolved through the layers below it (symlinks followed with the image's root
//! as `/`, whiteouts and opaque folders respected). A layer whose folders all resolve
//! to themselves (nearly every one) is used as it is; one that needs moving gets a copy
//! keyed by its chain id (which names the layer together with everything below it):
//! hard links to the same files, its implied folders moved where they resolve, the
//! folders made on the way carrying the metadata of the lower folder they stand for
//! (as overlayfs's copy-up would). The image record keeps the keys of the folders it
//! mounts (`Record::layer_keys`).

use crate::error::{Error, IoContext, Result};
use crate::unpack::{cpath, set_mtime, set_xattr, MAX_LINKS};
use crate::{digest, fsutil, ImageStore};
use std::collections::{BTreeSet, VecDeque};
use std::ffi::OsString;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Component, Path, PathBuf};

/// The OCI chain id of a layer whose parent's chain id is `parent` (`None` for the
/// bottom layer, whose chain id is its diff id).
pub(crate) fn chain_id(parent: Option<&str>, diff_id: &str) -> String {
    match parent {
        None => diff_id.to_string(),
        Some(p) => digest::of(format!("{p} {diff_id}").as_bytes()),
    }
}

/// Where the implied folders of the layer `diff_id` are noted (absent: none).
pub(crate) fn implied_file(root: &Path, diff_id: &str) -> Result<PathBuf> {
    Ok(root.join("implied").join(digest::hex_of(diff_id)?))
}

/// Notes a layer's implied folders (nothing when there are none).
pub(crate) fn write_implied(file: &Path, implied: &[PathBuf]) -> Result<()> {
    if implied.is_empty() {
        return Ok(());
    }
    let list: Vec<String> = implied
        .iter()
        .map(|p| p.to_string_lossy().into_owned())
        .collect();
    let data = serde_json::to_vec(&list)
        .map_err(|e| Error::Internal(format!("encoding implied folders: {e}")))?;
    if let Some(d) = file.parent() {
        std::fs::create_dir_all(d).ctx(format!("creating {}", d.display()))?;
    }
    fsutil::write_atomic(file, &data)
}

fn read_implied(file: &Path) -> BTreeSet<PathBuf> {
    std::fs::read(file)
        .ok()
        .and_then(|b| serde_json::from_slice::<Vec<String>>(&b).ok())
        .unwrap_or_default()
        .into_iter()
        .map(PathBuf::from)
        .collect()
}

/// What a path component is in one layer folder.
enum Kind {
    Missing,
    Dir {
        opaque: bool,
    },
    Symlink(PathBuf),
    /// A whiteout (0/0 character device): nothing below it either.
    Whiteout,
    Other,
}

fn kind(p: &Path) -> Kind {
    match std::fs::symlink_metadata(p) {
        Err(_) => Kind::Missing,
        Ok(m) if m.file_type().is_symlink() => match std::fs::read_link(p) {
            Ok(t) => Kind::Symlink(t),
            Err(_) => Kind::Other,
        },
        Ok(m) if m.is_dir() => Kind::Dir {
            opaque: get_xattr(p, "trusted.overlay.opaque").as_deref() == Some(b"y"),
        },
        Ok(m) => {
            use std::os::unix::fs::FileTypeExt;
            if m.file_type().is_char_device() && m.rdev() == 0 {
                Kind::Whiteout
            } else {
                Kind::Other
            }
        }
    }
}

/// Where the implied folder `rel` of `layer` resolves in the image: its components
/// looked up in the layer (its own folders, explicit ones hiding what is below) and
/// then in `lowers` (top first), a lower symlink followed with the root as `/`.
/// `None` when a non-folder decides (the layer's own entry, a lower file): nothing to
/// move then, the layer's folder hides it as before.
fn resolve_over(
    layer: &Path,
    implied: &BTreeSet<PathBuf>,
    lowers: &[PathBuf],
    rel: &Path,
) -> Option<PathBuf> {
    let mut todo: VecDeque<OsString> = comps(rel);
    let mut cur = PathBuf::new();
    // Lowers still visible below `cur` (an opaque folder hides those under it), and
    // whether the layer itself has a folder at `cur`.
    let mut visible = lowers.len();
    let mut in_layer = true;
    let mut links = 0;
    while let Some(c) = todo.pop_front() {
        if c == ".." {
            cur.pop();
            // Start over from the root for what is left: visibility depends on the way.
            let mut again = comps(&cur);
            again.extend(todo.drain(..));
            todo = again;
            cur = PathBuf::new();
            visible = lowers.len();
            in_layer = true;
            continue;
        }
        if c == "." || c.is_empty() {
            continue;
        }
        let next = cur.join(&c);
        if in_layer {
            match kind(&layer.join(&next)) {
                Kind::Dir { opaque } if !implied.contains(&next) => {
                    cur = next;
                    if opaque {
                        visible = 0;
                    }
                    continue;
                }
                Kind::Dir { .. } => {}
                Kind::Missing => in_layer = false,
                _ => return None,
            }
        }
        let mut found = None;
        for (k, l) in lowers[..visible].iter().enumerate() {
            match kind(&l.join(&next)) {
                Kind::Missing => continue,
                other => {
                    found = Some((k, other));
                    break;
                }
            }
        }
        match found {
            Some((_, Kind::Symlink(target))) => {
                links += 1;
                if links > MAX_LINKS {
                    return None;
                }
                let mut again = if target.is_absolute() {
                    VecDeque::new()
                } else {
                    comps(&cur)
                };
                again.extend(comps(&target));
                again.extend(todo.drain(..));
                todo = again;
                cur = PathBuf::new();
                visible = lowers.len();
                in_layer = true;
            }
            Some((k, Kind::Dir { opaque })) => {
                cur = next;
                if opaque {
                    visible = k + 1;
                }
            }
            Some((_, Kind::Other)) => return None,
            // Whited out or nowhere below: a new folder from here on.
            Some((_, Kind::Whiteout)) | Some((_, Kind::Missing)) | None => {
                cur = next;
                visible = 0;
            }
        }
    }
    Some(cur)
}

fn comps(p: &Path) -> VecDeque<OsString> {
    p.components()
        .filter_map(|c| match c {
            Component::Normal(n) => Some(n.to_owned()),
            Component::ParentDir => Some(OsString::from("..")),
            _ => None,
        })
        .collect()
}

/// The moves (implied folder → where it resolves) `layer` needs over `lowers`, to be
/// made in order: each names its folder where the moves before it put it.
pub(crate) fn moves(
    layer: &Path,
    implied: &BTreeSet<PathBuf>,
    lowers: &[PathBuf],
) -> Vec<(PathBuf, PathBuf)> {
    let mut out: Vec<(PathBuf, PathBuf)> = Vec::new();
    // Shallow first: a folder under one that moved went along with it, and moves again
    // when a lower symlink there leads elsewhere (`bin -> usr/bin`, `usr/bin/sub -> ..`).
    let mut dirs: Vec<&PathBuf> = implied.iter().collect();
    dirs.sort_by_key(|d| d.components().count());
    for d in dirs {
        let mut now = d.clone();
        for (from, to) in &out {
            if let Ok(rest) = now.strip_prefix(from) {
                now = to.join(rest);
            }
        }
        // Where it is already, or into itself (only through a loop): left alone.
        if let Some(to) = resolve_over(layer, implied, lowers, d) {
            if !to.starts_with(&now) {
                out.push((now, to));
            }
        }
    }
    out
}

/// The first lower folder at `rel`, whose metadata a folder made in its place takes.
fn lower_dir(lowers: &[PathBuf], rel: &Path) -> Option<PathBuf> {
    lowers
        .iter()
        .map(|l| l.join(rel))
        .find(|p| std::fs::symlink_metadata(p).is_ok_and(|m| m.is_dir()))
}

/// Gives `dst` the mode, owner, extended attributes and times of the folder `src`.
fn copy_dir_meta(src: &Path, dst: &Path) -> std::io::Result<()> {
    let m = std::fs::symlink_metadata(src)?;
    std::os::unix::fs::lchown(dst, Some(m.uid()), Some(m.gid()))?;
    std::fs::set_permissions(dst, std::fs::Permissions::from_mode(m.mode() & 0o7777))?;
    for name in list_xattrs(src) {
        if let Some(v) = get_xattr(src, &name) {
            let _ = set_xattr(dst, &name, &v);
        }
    }
    set_mtime(dst, m.mtime());
    Ok(())
}

/// A copy of the layer folder `src` at `dst` (which must not exist): folders made anew
/// with the same metadata, everything else hard-linked (layers are never written).
fn link_copy(src: &Path, dst: &Path) -> std::io::Result<()> {
    std::fs::create_dir(dst)?;
    for e in std::fs::read_dir(src)? {
        let e = e?;
        let (from, to) = (e.path(), dst.join(e.file_name()));
        if e.file_type()?.is_dir() {
            link_copy(&from, &to)?;
        } else {
            std::fs::hard_link(&from, &to)?;
        }
    }
    copy_dir_meta(src, dst)
}

/// Moves the folder `from` into `to` (both under one layer copy): renamed when `to`
/// is free, else merged entry by entry (what `from` has wins).
fn merge_into(from: &Path, to: &Path) -> std::io::Result<()> {
    if std::fs::symlink_metadata(to).is_err() {
        return std::fs::rename(from, to);
    }
    for e in std::fs::read_dir(from)? {
        let e = e?;
        let dest = to.join(e.file_name());
        let both_dirs =
            e.file_type()?.is_dir() && std::fs::symlink_metadata(&dest).is_ok_and(|m| m.is_dir());
        if both_dirs {
            merge_into(&e.path(), &dest)?;
        } else {
            fsutil::remove_all(&dest)?;
            std::fs::rename(e.path(), &dest)?;
        }
    }
    fsutil::remove_all(from)
}

/// Applies `moves` to the layer copy `copy`; folders made on the way to a target take
/// the metadata of the lower folder they stand for.
fn apply_moves(copy: &Path, moves: &[(PathBuf, PathBuf)], lowers: &[PathBuf]) -> Result<()> {
    for (from, to) in moves {
        let ctx = || format!("moving {} to {}", from.display(), to.display());
        let mut p = PathBuf::new();
        let mut blocked = false;
        for c in to.parent().unwrap_or(Path::new("")).components() {
            p.push(c);
            let abs = copy.join(&p);
            match std::fs::symlink_metadata(&abs) {
                Ok(m) if m.is_dir() => {}
                Ok(_) => {
                    blocked = true;
                    break;
                }
                Err(_) => {
                    std::fs::create_dir(&abs).ctx(ctx())?;
                    match lower_dir(lowers, &p) {
                        Some(l) => copy_dir_meta(&l, &abs).ctx(ctx())?,
                        None => {
                            std::fs::set_permissions(&abs, std::fs::Permissions::from_mode(0o755))
                                .ctx(ctx())?
                        }
                    }
                }
            }
        }
        if blocked {
            // The layer has a file on the way: it hides the lower symlink anyway.
            tracing::debug!(from = %from.display(), to = %to.display(), "implied folder left in place");
            continue;
        }
        let (mut src, dst) = (copy.join(from), copy.join(to));
        if std::fs::symlink_metadata(&src).is_err() {
            continue; // under a folder whose move was blocked
        }
        if from.starts_with(to) {
            // Up to a folder that holds it (`up -> ..`): out of there first.
            let staged = (0..)
                .map(|n| copy.join(format!(".crust-move-{n}")))
                .find(|p| std::fs::symlink_metadata(p).is_err())
                .unwrap();
            std::fs::rename(&src, &staged).ctx(ctx())?;
            src = staged;
        }
        let fresh = std::fs::symlink_metadata(&dst).is_err();
        merge_into(&src, &dst).ctx(ctx())?;
        if fresh {
            if let Some(l) = lower_dir(lowers, to) {
                copy_dir_meta(&l, &dst).ctx(ctx())?;
            }
        }
    }
    Ok(())
}

impl ImageStore {
    /// The key of each layer's folder for an image whose layers (all in the store)
    /// are `diff_ids`, bottom first: the diff id, or the chain id of a copy made here
    /// for a layer whose implied folders resolve elsewhere over its parents.
    pub(crate) fn layer_keys(&self, diff_ids: &[String]) -> Result<Vec<String>> {
        let mut keys: Vec<String> = Vec::with_capacity(diff_ids.len());
        let mut chain: Option<String> = None;
        for d in diff_ids {
            let id = chain_id(chain.as_deref(), d);
            chain = Some(id.clone());
            let implied = read_implied(&implied_file(&self.root, d)?);
            if implied.is_empty() || keys.is_empty() {
                keys.push(d.clone());
                continue;
            }
            let lowers = keys
                .iter()
                .rev()
                .map(|k| self.layer_dir(k))
                .collect::<Result<Vec<_>>>()?;
            let dir = self.layer_dir(d)?;
            let moves = moves(&dir, &implied, &lowers);
            if moves.is_empty() {
                keys.push(d.clone());
                continue;
            }
            let dest = self.layer_dir(&id)?;
            if !dest.is_dir() {
                let tmp = self.tmp_path("chain");
                let made = link_copy(&dir, &tmp)
                    .ctx(format!("copying layer {d}"))
                    .and_then(|()| apply_moves(&tmp, &moves, &lowers))
                    .and_then(|()| match std::fs::rename(&tmp, &dest) {
                        Ok(()) => Ok(()),
                        // Another pull of the same chain won.
                        Err(_) if dest.is_dir() => fsutil::remove_all(&tmp).ctx("removing a copy"),
                        Err(e) => Err(Error::io(format!("storing layer {id}"), e)),
                    });
                if made.is_err() {
                    let _ = fsutil::remove_all(&tmp);
                }
                made?;
                tracing::debug!(layer = %d, chain = %id, ?moves, "layer applied over its parents' symlinks");
            }
            keys.push(id);
        }
        Ok(keys)
    }
}

fn list_xattrs(p: &Path) -> Vec<String> {
    let Ok(c) = cpath(p) else { return vec![] };
    let mut buf = vec![0u8; 4096];
    // SAFETY: a valid path and a buffer of the given length.
    let n = unsafe { libc::llistxattr(c.as_ptr(), buf.as_mut_ptr().cast(), buf.len()) };
    if n <= 0 {
        return vec![];
    }
    buf[..n as usize]
        .split(|b| *b == 0)
        .filter(|s| !s.is_empty())
        .map(|s| String::from_utf8_lossy(s).into_owned())
        .collect()
}

fn get_xattr(p: &Path, name: &str) -> Option<Vec<u8>> {
    let c = cpath(p).ok()?;
    let n = std::ffi::CString::new(name).ok()?;
    let mut buf = vec![0u8; 4096];
    // SAFETY: valid C strings and a buffer of the given length.
    let r = unsafe { libc::lgetxattr(c.as_ptr(), n.as_ptr(), buf.as_mut_ptr().cast(), buf.len()) };
    if r < 0 {
        return None;
    }
    buf.truncate(r as usize);
    Some(buf)
}

#[cfg(test)]
#[path = "chain_tests.rs"]
mod tests;
