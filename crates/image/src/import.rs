//! Offline import: an OCI image layout (a directory, or a tar of one) or a
//! `docker save` archive. Names come from `io.containerd.image.name`, from an
//! `org.opencontainers.image.ref.name` that is a full reference (has a `/`), or from
//! the docker archive's `RepoTags`; images without any are imported unnamed (by id).

use crate::error::{Error, IoContext, Result};
use crate::manifest::{ConfigBlob, Descriptor, Manifest};
use crate::{digest, fsutil, Image, ImageStore, Named, Record};
use serde::Deserialize;
use std::path::{Path, PathBuf};

const NAME_CONTAINERD: &str = "io.containerd.image.name";
const NAME_OCI: &str = "org.opencontainers.image.ref.name";

#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
struct DockerEntry {
    config: String,
    #[serde(default)]
    repo_tags: Option<Vec<String>>,
    layers: Vec<String>,
}

impl ImageStore {
    /// Imports every image of an OCI layout (directory or tar, possibly compressed) or
    /// docker archive at `path`.
    pub fn import(&self, path: &Path) -> Result<Vec<Image>> {
        let what = path.display().to_string();
        let meta =
            std::fs::metadata(path).map_err(|e| Error::NotFound(format!("import {what}: {e}")))?;
        if meta.is_dir() {
            return self.import_dir(path, &what);
        }
        let tmp = self.tmp_path("import");
        std::fs::create_dir(&tmp).ctx(format!("creating {}", tmp.display()))?;
        let res = (|| {
            let f = std::fs::File::open(path).ctx(format!("opening {what}"))?;
            let r = crate::unpack::decompressor(f)
                .map_err(|e| Error::InvalidArgument(format!("import {what}: {e}")))?;
            let mut ar = tar::Archive::new(crate::unpack::targuard::Guard::new(r));
            // The tar crate's unpack refuses entries that would land outside `tmp`.
            ar.unpack(&tmp).map_err(|e| {
                Error::InvalidArgument(format!("import {what}: not a readable tar: {e}"))
            })?;
            self.import_dir(&tmp, &what)
        })();
        let _ = fsutil::remove_all(&tmp);
        res
    }

    fn import_dir(&self, dir: &Path, what: &str) -> Result<Vec<Image>> {
        if dir.join("manifest.json").is_file() {
            return self.import_docker(dir, what);
        }
        if !dir.join("index.json").is_file() {
            return Err(Error::InvalidArgument(format!(
                "import {what}: neither an OCI layout (index.json) nor a docker archive (manifest.json)"
            )));
        }
        let data = read(&dir.join("index.json"), what)?;
        let index = Manifest::parse(&data, &format!("import {what}: index.json"))?;
        let mut out = Vec::new();
        for entry in index.manifests.clone().unwrap_or_default() {
            let name = entry_name(&entry);
            let mut blobs = vec![];
            let mut desc = entry.clone();
            let mut m = self.layout_manifest(dir, &desc, what, &mut blobs)?;
            if m.is_index() {
                desc = m
                    .pick_platform(&format!("import {what}: {}", entry.digest))?
                    .clone();
                m = self.layout_manifest(dir, &desc, what, &mut blobs)?;
                if m.is_index() {
                    return Err(Error::InvalidArgument(format!(
                        "import {what}: nested index {} is not supported",
                        desc.digest
                    )));
                }
            }
            let mut repo_digests = vec![];
            let mut repo_tags = vec![];
            if let Some(n) = &name {
                repo_digests.push(format!("{}@{}", n.name(), entry.digest));
                repo_tags.extend(n.tagged());
            }
            out.push(self.import_image(
                dir,
                &m,
                &desc.digest,
                blobs,
                repo_tags,
                repo_digests,
                what,
            )?);
        }
        Ok(out)
    }

    /// Reads and verifies one manifest (or index) of a layout, keeping it in the store.
    fn layout_manifest(
        &self,
        dir: &Path,
        desc: &Descriptor,
        what: &str,
        blobs: &mut Vec<String>,
    ) -> Result<Manifest> {
        let w = format!("import {what}: manifest {}", desc.digest);
        let data = read_sized(&layout_blob(dir, &desc.digest)?, desc, &w, what)?;
        self.put_blob(&desc.digest, &data, &w)?;
        blobs.push(desc.digest.clone());
        Manifest::parse(&data, &w)
    }

    #[allow(clippy::too_many_arguments)]
    fn import_image(
        &self,
        dir: &Path,
        m: &Manifest,
        manifest_digest: &str,
        mut blobs: Vec<String>,
        repo_tags: Vec<String>,
        repo_digests: Vec<String>,
        what: &str,
    ) -> Result<Image> {
        let cdesc = m.config.as_ref().unwrap();
        let w = format!("import {what}: config {}", cdesc.digest);
        let cdata = read_sized(&layout_blob(dir, &cdesc.digest)?, cdesc, &w, what)?;
        self.put_blob(&cdesc.digest, &cdata, &w)?;
        blobs.push(cdesc.digest.clone());
        let config = ConfigBlob::parse(&cdata, &w)?;
        if config.rootfs.diff_ids.len() != m.layers.len() {
            return Err(Error::InvalidArgument(format!(
                "import {what}: manifest {manifest_digest} has {} layers, its config {} diff ids",
                m.layers.len(),
                config.rootfs.diff_ids.len()
            )));
        }
        let mut hold = self.hold(&blobs);
        for (l, diff_id) in m.layers.iter().zip(&config.rootfs.diff_ids) {
            hold.add(diff_id);
            let f = std::fs::File::open(layout_blob(dir, &l.digest)?).map_err(|e| {
                Error::InvalidArgument(format!("import {what}: layer {}: {e}", l.digest))
            })?;
            let len = f.metadata().map(|m| m.len()).map_err(|e| {
                Error::InvalidArgument(format!("import {what}: layer {}: {e}", l.digest))
            })?;
            check_size(len, l.size, &format!("import {what}: layer {}", l.digest))?;
            self.unpack_layer(
                // Never past the descriptor's size, should the file grow meanwhile.
                std::io::Read::take(f, l.size),
                Some(&l.digest),
                diff_id,
                &format!("{} of {what}", l.digest),
            )?;
        }
        let size = cdesc.size + m.layers.iter().map(|l| l.size).sum::<u64>();
        let rec = Record {
            image: Image {
                id: format!("sha256:{}", digest::hex_of(&cdesc.digest)?),
                repo_tags,
                repo_digests,
                size,
                config: config.image_config(),
                pinned: false,
            },
            manifest: manifest_digest.to_string(),
            blobs,
            layers: config.rootfs.diff_ids.clone(),
            layer_keys: vec![],
        };
        let img = self.commit(rec)?;
        tracing::info!(image = %img.id, tags = ?img.repo_tags, "image imported from {what}");
        Ok(img)
    }

    fn import_docker(&self, dir: &Path, what: &str) -> Result<Vec<Image>> {
        let data = read(&dir.join("manifest.json"), what)?;
        let entries: Vec<DockerEntry> = serde_json::from_slice(&data)
            .map_err(|e| Error::InvalidArgument(format!("import {what}: manifest.json: {e}")))?;
        let mut out = vec![];
        for e in entries {
            let cpath = inside(dir, &e.config, what)?;
            let cdata = read(&cpath, what)?;
            let cdigest = digest::of(&cdata);
            let w = format!("import {what}: config {}", e.config);
            self.put_blob(&cdigest, &cdata, &w)?;
            let config = ConfigBlob::parse(&cdata, &w)?;
            if config.rootfs.diff_ids.len() != e.layers.len() {
                return Err(Error::InvalidArgument(format!(
                    "import {what}: {} lists {} layers, its config {} diff ids",
                    e.config,
                    e.layers.len(),
                    config.rootfs.diff_ids.len()
                )));
            }
            let mut hold = self.hold(std::slice::from_ref(&cdigest));
            let mut size = cdata.len() as u64;
            for (l, diff_id) in e.layers.iter().zip(&config.rootfs.diff_ids) {
                hold.add(diff_id);
                let lp = inside(dir, l, what)?;
                size += std::fs::metadata(&lp).map(|m| m.len()).unwrap_or(0);
                let f = std::fs::File::open(&lp).map_err(|err| {
                    Error::InvalidArgument(format!("import {what}: layer {l}: {err}"))
                })?;
                self.unpack_layer(f, None, diff_id, &format!("{l} of {what}"))?;
            }
            let mut tags = vec![];
            for t in e.repo_tags.unwrap_or_default() {
                if let Some(t) = Named::parse(&t).ok().and_then(|n| n.tagged()) {
                    tags.push(t);
                }
            }
            let rec = Record {
                image: Image {
                    id: cdigest.clone(),
                    repo_tags: tags,
                    repo_digests: vec![],
                    size,
                    config: config.image_config(),
                    pinned: false,
                },
                manifest: String::new(),
                blobs: vec![cdigest.clone()],
                layers: config.rootfs.diff_ids.clone(),
                layer_keys: vec![],
            };
            let img = self.commit(rec)?;
            tracing::info!(image = %img.id, tags = ?img.repo_tags, "image imported from {what}");
            out.push(img);
        }
        Ok(out)
    }
}

fn entry_name(d: &Descriptor) -> Option<Named> {
    let a = d.annotations.as_ref()?;
    if let Some(n) = a.get(NAME_CONTAINERD) {
        return Named::parse(n).ok();
    }
    a.get(NAME_OCI)
        .filter(|n| n.contains('/'))
        .and_then(|n| Named::parse(n).ok())
}

fn layout_blob(dir: &Path, d: &str) -> Result<PathBuf> {
    Ok(dir.join("blobs/sha256").join(digest::hex_of(d)?))
}

/// A path named by an archive, which must stay inside it.
fn inside(dir: &Path, rel: &str, what: &str) -> Result<PathBuf> {
    match crate::unpack::clean(Path::new(rel)) {
        Ok(Some(p)) => Ok(dir.join(p)),
        _ => Err(Error::InvalidArgument(format!(
            "import {what}: bad path {rel:?} in manifest.json"
        ))),
    }
}

/// A layout's blob of exactly `d.size` bytes: another length is refused (DataLoss, as
/// a digest mismatch) before the blob is read.
fn read_sized(p: &Path, d: &Descriptor, w: &str, what: &str) -> Result<Vec<u8>> {
    let meta = std::fs::metadata(p)
        .map_err(|e| Error::InvalidArgument(format!("import {what}: {}: {e}", p.display())))?;
    check_size(meta.len(), d.size, w)?;
    let data = read(p, what)?;
    check_size(data.len() as u64, d.size, w)?;
    Ok(data)
}

fn check_size(len: u64, size: u64, w: &str) -> Result<()> {
    if len == size {
        return Ok(());
    }
    Err(Error::DataLoss(format!(
        "{w}: size mismatch: the descriptor says {size} bytes, the blob has {len}"
    )))
}

fn read(p: &Path, what: &str) -> Result<Vec<u8>> {
    std::fs::read(p)
        .map_err(|e| Error::InvalidArgument(format!("import {what}: {}: {e}", p.display())))
}
