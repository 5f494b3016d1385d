//! Overlay snapshots: an image's layers read-only below, a writable upper per
//! container, keyed by the container id. A snapshot records its layers, so they
//! outlive the image's removal until the snapshot goes.

use crate::error::{Error, IoContext, Result};
use crate::{fsutil, ImageStore};
use serde::{Deserialize, Serialize};
use std::path::PathBuf;

/// Where a container's root filesystem comes from; mount it as
/// `mount -t overlay overlay -o <overlay_options().join(",")> <rootfs>`.
#[derive(Clone, Debug, PartialEq)]
pub struct Snapshot {
    /// Read-only layers, top first.
    pub lowerdirs: Vec<PathBuf>,
    pub upperdir: PathBuf,
    pub workdir: PathBuf,
}

impl Snapshot {
    pub fn overlay_options(&self) -> Vec<String> {
        let lower: Vec<String> = self
            .lowerdirs
            .iter()
            .map(|p| p.display().to_string())
            .collect();
        vec![
            format!("lowerdir={}", lower.join(":")),
            format!("upperdir={}", self.upperdir.display()),
            format!("workdir={}", self.workdir.display()),
        ]
    }
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub(crate) struct SnapshotRecord {
    pub version: u32,
    pub key: String,
    pub image_id: String,
    /// Diff ids, bottom first.
    pub layers: Vec<String>,
}

fn valid_key(key: &str) -> Result<()> {
    if key.is_empty()
        || key.len() > 128
        || key.starts_with('.')
        || !key
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_' || b == b'.')
    {
        return Err(Error::InvalidArgument(format!(
            "snapshot key {key:?}: use letters, digits, '-', '_' and '.' (not first)"
        )));
    }
    Ok(())
}

impl ImageStore {
    fn snapshot_dir(&self, key: &str) -> PathBuf {
        self.root.join("snapshots").join(key)
    }

    fn snapshot_of(&self, rec: &SnapshotRecord) -> Result<Snapshot> {
        let dir = self.snapshot_dir(&rec.key);
        let mut lowerdirs = rec
            .layers
            .iter()
            .rev()
            .map(|d| self.layer_dir(d))
            .collect::<Result<Vec<_>>>()?;
        if lowerdirs.is_empty() {
            // overlayfs wants one lower layer; an image without layers gets an empty one.
            lowerdirs.push(dir.join("empty"));
        }
        Ok(Snapshot {
            lowerdirs,
            upperdir: dir.join("upper"),
            workdir: dir.join("work"),
        })
    }

    /// Makes (or returns, when it exists for the same image) the snapshot `key` of the
    /// image `image` (an id or any reference [`ImageStore::resolve`] takes).
    pub fn prepare_snapshot(&self, key: &str, image: &str) -> Result<Snapshot> {
        valid_key(key)?;
        let _l = self.lock()?;
        let recs = self.records()?;
        let i = crate::find(&recs, image)
            .ok_or_else(|| Error::NotFound(format!("image {image:?} not found")))?;
        let img = &recs[i];
        let dir = self.snapshot_dir(key);
        if let Some(old) = self.read_snapshot(key) {
            if old.image_id == img.image.id {
                return self.snapshot_of(&old);
            }
            return Err(Error::AlreadyExists(format!(
                "snapshot {key} exists for image {}",
                old.image_id
            )));
        }
        for d in img.keys() {
            if !self.layer_dir(d)?.is_dir() {
                return Err(Error::Internal(format!(
                    "image {}: layer {d} is missing from the store; remove and pull the image again",
                    img.image.id
                )));
            }
        }
        let rec = SnapshotRecord {
            version: 1,
            key: key.to_string(),
            image_id: img.image.id.clone(),
            layers: img.keys().to_vec(),
        };
        let tmp = self.tmp_path("snapshot");
        let res = (|| {
            for d in ["upper", "work", "empty"] {
                std::fs::create_dir_all(tmp.join(d)).ctx(format!("creating {}", tmp.display()))?;
            }
            let data = serde_json::to_vec_pretty(&rec)
                .map_err(|e| Error::Internal(format!("encoding snapshot {key}: {e}")))?;
            // Not synced: a snapshot lives no longer than its container, whose record
            // the runtime syncs after this; at start the runtime removes snapshots no
            // record names, and the page cache outlives the runtime's own crashes.
            // (Each fsync here cost milliseconds of every container start.)
            std::fs::write(tmp.join("snapshot.json"), &data)
                .ctx(format!("writing {}/snapshot.json", tmp.display()))?;
            std::fs::rename(&tmp, &dir).ctx(format!("creating {}", dir.display()))
        })();
        if res.is_err() {
            let _ = fsutil::remove_all(&tmp);
        }
        res?;
        self.snapshot_of(&rec)
    }

    /// The snapshot `key`, if it exists.
    pub fn snapshot(&self, key: &str) -> Option<Snapshot> {
        valid_key(key).ok()?;
        self.snapshot_of(&self.read_snapshot(key)?).ok()
    }

    /// Keys of every snapshot (for recovery: the caller removes those it has no container for).
    pub fn snapshots(&self) -> Vec<String> {
        self.snapshot_records().into_iter().map(|s| s.key).collect()
    }

    /// Removes the snapshot `key` (its writable layer and what only it kept alive).
    /// The caller unmounts it first. Absent is fine.
    pub fn remove_snapshot(&self, key: &str) -> Result<()> {
        valid_key(key)?;
        {
            let _l = self.lock()?;
            let dir = self.snapshot_dir(key);
            if !dir.exists() {
                return Ok(());
            }
            let gone = self.tmp_path("snapshot-rm");
            std::fs::rename(&dir, &gone).ctx(format!("removing {}", dir.display()))?;
            fsutil::remove_all(&gone).ctx(format!("removing {}", gone.display()))?;
        }
        self.gc()
    }

    fn read_snapshot(&self, key: &str) -> Option<SnapshotRecord> {
        let data = std::fs::read(self.snapshot_dir(key).join("snapshot.json")).ok()?;
        serde_json::from_slice(&data).ok()
    }

    pub(crate) fn snapshot_records(&self) -> Vec<SnapshotRecord> {
        let Ok(rd) = std::fs::read_dir(self.root.join("snapshots")) else {
            return vec![];
        };
        rd.flatten()
            .filter_map(|e| self.read_snapshot(&e.file_name().to_string_lossy()))
            .collect()
    }
}
