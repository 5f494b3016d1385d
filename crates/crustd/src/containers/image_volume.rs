//! Image volumes: a CRI Mount with `image` set (Kubernetes' `image` volume source)
//! mounts that image's file system, whole or one directory of it (`image_sub_path`),
//! read-only at a path in the container.
//!
//! Each is a snapshot of the image keyed `<container>.iv<N>`, so its layers outlive a
//! RemoveImage for as long as the container lives, as the container's own root file
//! system does; it goes with the container. The mount is an overlay of the layers with
//! no upper layer (read-only by construction; executables stay executable), or a
//! read-only bind when only one layer has the directory.

use crate::cri::error::{Error, Result};
use crate::daemon::Crust;
use cri_api::Mount;
use serde_json::{json, Value};
use std::path::{Component, Path, PathBuf};

const KEY_INFIX: &str = ".iv";

/// The snapshot key of the `n`th mount of `container`.
fn key(container: &str, n: usize) -> String {
    format!("{container}{KEY_INFIX}{n}")
}

/// The container a snapshot key belongs to: an image volume's owner, else the key.
pub fn owner(key: &str) -> &str {
    key.split_once(KEY_INFIX).map_or(key, |(c, _)| c)
}

/// Whether `m` asks for an image volume.
pub fn wanted(m: &Mount) -> bool {
    m.image.as_ref().is_some_and(|i| !i.image.is_empty())
}

/// Prepares image volume `m`, the `n`th mount of `container`: its snapshot, and the OCI
/// mount (without `destination`) that shows it. Refuses, before making anything, a
/// mount that is not read-only (Kubernetes only makes read-only ones; the CRI says a
/// runtime should refuse others), one with a host path too, and a sub path that is not
/// a plain relative path; the sub path must be a directory of the image.
pub fn prepare(crust: &Crust, container: &str, n: usize, m: &Mount) -> Result<Value> {
    let image = m.image.as_ref().map(|i| i.image.as_str()).unwrap_or("");
    let what = || format!("image volume {image:?} at {}", m.container_path);
    if !m.host_path.is_empty() {
        return Err(Error::InvalidArgument(format!(
            "{}: a mount has a host_path or an image, not both",
            what()
        )));
    }
    if !m.readonly {
        return Err(Error::InvalidArgument(format!(
            "{}: image volumes are read-only; set readonly",
            what()
        )));
    }
    let sub = Path::new(&m.image_sub_path);
    if !sub
        .components()
        .all(|c| matches!(c, Component::Normal(_) | Component::CurDir))
    {
        return Err(Error::InvalidArgument(format!(
            "{}: image_sub_path {:?} must be a relative path without '..'",
            what(),
            m.image_sub_path
        )));
    }
    let key = key(container, n);
    let snap = crust
        .images
        .prepare_snapshot(&key, image)
        .map_err(|e| match e {
            image::Error::NotFound(_) => Error::NotFound(format!("{}: image not found", what())),
            e => Error::Internal(format!("{}: {e}", what())),
        })?;
    let dirs = if m.image_sub_path.is_empty() {
        snap.lowerdirs.clone()
    } else {
        let d = sub_dirs(&snap.lowerdirs, sub);
        if d.is_empty() {
            let _ = crust.images.remove_snapshot(&key);
            return Err(Error::InvalidArgument(format!(
                "{}: image_sub_path {:?} is not a directory of the image",
                what(),
                m.image_sub_path
            )));
        }
        d
    };
    Ok(match dirs.as_slice() {
        [one] => json!({"type": "bind", "source": one, "options": ["rbind", "rprivate", "ro"]}),
        many => {
            let lower: Vec<String> = many.iter().map(|d| d.display().to_string()).collect();
            json!({
                "type": "overlay",
                "source": "overlay",
                "options": ["ro", format!("lowerdir={}", lower.join(":"))]
            })
        }
    })
}

/// Removes the image volumes' snapshots of `container`.
pub fn remove_all(crust: &Crust, container: &str) -> Result<()> {
    for k in crust.images.snapshots() {
        if k != container && owner(&k) == container {
            crust.images.remove_snapshot(&k).map_err(|e| {
                Error::Internal(format!("removing image volume {k} of {container}: {e}"))
            })?;
        }
    }
    Ok(())
}

/// The directories that make up `sub` in the union of `layers` (top first), top first:
/// each layer's `sub` while it is a directory there, down to the first layer that
/// deletes it (a whiteout), replaces a part of it with something that is no directory,
/// or makes it (or a directory above it) opaque. Empty when `sub` is not a directory
/// of the union.
fn sub_dirs(layers: &[PathBuf], sub: &Path) -> Vec<PathBuf> {
    let parts: Vec<&std::ffi::OsStr> = sub
        .components()
        .filter_map(|c| match c {
            Component::Normal(p) => Some(p),
            _ => None,
        })
        .collect();
    let mut out = Vec::new();
    'layers: for layer in layers {
        let mut p = layer.clone();
        let mut opaque = false;
        for part in &parts {
            p.push(part);
            let Ok(meta) = std::fs::symlink_metadata(&p) else {
                // Nothing here in this layer: the layers below decide.
                continue 'layers;
            };
            if !meta.is_dir() {
                // A whiteout (a 0/0 character device) deletes it, and anything else
                // that is no directory hides the lower layers' directories as well.
                break 'layers;
            }
            opaque |= image::unpack::is_opaque(&p);
        }
        out.push(p);
        if opaque {
            break;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_name_their_container() {
        assert_eq!(owner(&key("abc", 2)), "abc");
        assert_eq!(owner("abc"), "abc");
    }

    #[test]
    fn sub_dirs_follow_the_union() {
        let t = std::env::temp_dir().join(format!("crust-iv-{}", std::process::id()));
        let l = |n: &str| t.join(n);
        for d in ["top/etc", "mid/etc/x", "low/etc", "low2/etc"] {
            std::fs::create_dir_all(t.join(d)).unwrap();
        }
        // "mid2" has a file where the others have a directory.
        std::fs::create_dir_all(l("mid2")).unwrap();
        std::fs::write(l("mid2/etc"), b"").unwrap();
        let got = sub_dirs(&[l("top"), l("none"), l("mid"), l("low")], Path::new("etc"));
        assert_eq!(got, [l("top/etc"), l("mid/etc"), l("low/etc")]);
        let got = sub_dirs(&[l("top"), l("mid2"), l("low")], Path::new("etc"));
        assert_eq!(got, [l("top/etc")]);
        assert_eq!(
            sub_dirs(&[l("top"), l("mid")], Path::new("etc/x")),
            [l("mid/etc/x")]
        );
        assert!(sub_dirs(&[l("top"), l("low")], Path::new("nope")).is_empty());
        let _ = std::fs::remove_dir_all(&t);
    }
}
