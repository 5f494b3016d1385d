//! Writing layers and OCI image layouts: for tests (here and end to end) and for
//! building small images without other tools.

use crate::digest;
use crate::ImageConfig;
use serde_json::json;
use std::io::Write;
use std::path::Path;

/// How a layer blob is compressed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Compression {
    None,
    Gzip,
    Zstd,
}

/// Builds an (uncompressed) layer tar.
pub struct LayerBuilder {
    b: tar::Builder<Vec<u8>>,
}

impl Default for LayerBuilder {
    fn default() -> Self {
        Self::new()
    }
}

impl LayerBuilder {
    pub fn new() -> Self {
        let mut b = tar::Builder::new(Vec::new());
        b.mode(tar::HeaderMode::Complete);
        LayerBuilder { b }
    }

    fn header(kind: tar::EntryType, mode: u32, size: u64) -> tar::Header {
        let mut h = tar::Header::new_gnu();
        h.set_entry_type(kind);
        h.set_mode(mode);
        h.set_size(size);
        h.set_mtime(1_700_000_000);
        h.set_uid(0);
        h.set_gid(0);
        h
    }

    pub fn dir(mut self, path: &str, mode: u32) -> Self {
        let mut h = Self::header(tar::EntryType::Directory, mode, 0);
        self.b
            .append_data(&mut h, path, std::io::empty())
            .expect("tar dir");
        self
    }

    pub fn file(self, path: &str, data: &[u8], mode: u32) -> Self {
        self.file_owned(path, data, mode, 0, 0)
    }

    pub fn file_owned(mut self, path: &str, data: &[u8], mode: u32, uid: u64, gid: u64) -> Self {
        let mut h = Self::header(tar::EntryType::Regular, mode, data.len() as u64);
        h.set_uid(uid);
        h.set_gid(gid);
        self.b.append_data(&mut h, path, data).expect("tar file");
        self
    }

    /// A file with extended attributes (PAX `SCHILY.xattr.*` records).
    pub fn file_xattr(mut self, path: &str, data: &[u8], attr: &str, value: &[u8]) -> Self {
        let key = format!("SCHILY.xattr.{attr}");
        self.b
            .append_pax_extensions([(key.as_str(), value)])
            .expect("pax");
        self.file_inner(path, data)
    }

    fn file_inner(mut self, path: &str, data: &[u8]) -> Self {
        let mut h = Self::header(tar::EntryType::Regular, 0o644, data.len() as u64);
        self.b.append_data(&mut h, path, data).expect("tar file");
        self
    }

    pub fn symlink(mut self, path: &str, target: &str) -> Self {
        let mut h = Self::header(tar::EntryType::Symlink, 0o777, 0);
        self.b
            .append_link(&mut h, path, target)
            .expect("tar symlink");
        self
    }

    pub fn hardlink(mut self, path: &str, target: &str) -> Self {
        let mut h = Self::header(tar::EntryType::Link, 0o644, 0);
        self.b
            .append_link(&mut h, path, target)
            .expect("tar hardlink");
        self
    }

    pub fn char_device(mut self, path: &str, major: u32, minor: u32) -> Self {
        let mut h = Self::header(tar::EntryType::Char, 0o666, 0);
        h.set_device_major(major).unwrap();
        h.set_device_minor(minor).unwrap();
        self.b
            .append_data(&mut h, path, std::io::empty())
            .expect("tar dev");
        self
    }

    pub fn fifo(mut self, path: &str) -> Self {
        let mut h = Self::header(tar::EntryType::Fifo, 0o644, 0);
        self.b
            .append_data(&mut h, path, std::io::empty())
            .expect("tar fifo");
        self
    }

    /// A whiteout hiding `path` of the layers below.
    pub fn whiteout(self, path: &str) -> Self {
        let (dir, name) = path.rsplit_once('/').unwrap_or(("", path));
        let wh = if dir.is_empty() {
            format!(".wh.{name}")
        } else {
            format!("{dir}/.wh.{name}")
        };
        self.file(&wh, b"", 0o644)
    }

    /// Marks `dir` opaque: nothing of the layers below shows through it.
    pub fn opaque(self, dir: &str) -> Self {
        self.file(
            &format!("{}/.wh..wh..opq", dir.trim_end_matches('/')),
            b"",
            0o644,
        )
    }

    /// An entry with a name written verbatim (no checks): for hostile layers.
    pub fn raw(mut self, kind: tar::EntryType, name: &str, link: &str, data: &[u8]) -> Self {
        let mut h = Self::header(kind, 0o644, data.len() as u64);
        {
            let old = h.as_old_mut();
            old.name[..name.len()].copy_from_slice(name.as_bytes());
            old.linkname[..link.len()].copy_from_slice(link.as_bytes());
        }
        h.set_cksum();
        self.b.append(&h, data).expect("tar raw");
        self
    }

    /// A file whose content is read from `src` (a busybox binary, say).
    pub fn file_from(self, path: &str, src: &Path, mode: u32) -> Self {
        let data = std::fs::read(src).unwrap_or_else(|e| panic!("{}: {e}", src.display()));
        self.file(path, &data, mode)
    }

    pub fn finish(self) -> Vec<u8> {
        self.b.into_inner().expect("tar finish")
    }
}

/// Compresses a layer tar.
pub fn compress(tar: &[u8], c: Compression) -> Vec<u8> {
    match c {
        Compression::None => tar.to_vec(),
        Compression::Gzip => {
            let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
            e.write_all(tar).unwrap();
            e.finish().unwrap()
        }
        Compression::Zstd => zstd::stream::encode_all(tar, 3).unwrap(),
    }
}

/// One image (one platform) to write.
#[derive(Clone, Debug)]
pub struct LayoutImage {
    /// Uncompressed layer tars, bottom first, and how to compress each.
    pub layers: Vec<(Vec<u8>, Compression)>,
    pub config: ImageConfig,
    pub os: String,
    pub architecture: String,
    /// Docker schema 2 media types instead of OCI's.
    pub docker: bool,
}

impl LayoutImage {
    pub fn new(layers: Vec<(Vec<u8>, Compression)>) -> Self {
        LayoutImage {
            layers,
            config: ImageConfig::default(),
            os: "linux".into(),
            architecture: crate::platform::node().architecture.into(),
            docker: false,
        }
    }
}

/// One entry of a layout's index.json: one image, or several platforms under an index.
#[derive(Clone, Debug)]
pub struct LayoutEntry {
    /// `org.opencontainers.image.ref.name` (what `skopeo copy oci:DIR:REF` selects).
    pub ref_name: Option<String>,
    /// `io.containerd.image.name` (the name `import` gives the image).
    pub image_name: Option<String>,
    pub platforms: Vec<LayoutImage>,
}

fn put(dir: &Path, data: &[u8]) -> String {
    let d = digest::of(data);
    let p = dir
        .join("blobs/sha256")
        .join(d.trim_start_matches("sha256:"));
    std::fs::write(p, data).expect("write blob");
    d
}

/// Writes the manifest (and config and layers) of one image; returns its descriptor.
fn write_image(dir: &Path, img: &LayoutImage) -> serde_json::Value {
    let (mt_manifest, mt_config, mt_layer) = if img.docker {
        (
            "application/vnd.docker.distribution.manifest.v2+json",
            "application/vnd.docker.container.image.v1+json",
            "application/vnd.docker.image.rootfs.diff.tar.gzip",
        )
    } else {
        (
            "application/vnd.oci.image.manifest.v1+json",
            "application/vnd.oci.image.config.v1+json",
            "application/vnd.oci.image.layer.v1.tar",
        )
    };
    let mut layers = vec![];
    let mut diff_ids = vec![];
    for (tar, c) in &img.layers {
        diff_ids.push(digest::of(tar));
        let blob = compress(tar, *c);
        let suffix = match (img.docker, c) {
            (true, _) => "",
            (false, Compression::None) => "",
            (false, Compression::Gzip) => "+gzip",
            (false, Compression::Zstd) => "+zstd",
        };
        layers.push(json!({"mediaType": format!("{mt_layer}{suffix}"), "digest": put(dir, &blob), "size": blob.len()}));
    }
    let c = &img.config;
    let config = json!({
        "architecture": img.architecture, "os": img.os,
        "config": {"Entrypoint": c.entrypoint, "Cmd": c.cmd, "Env": c.env, "WorkingDir": c.working_dir,
                   "User": c.user, "StopSignal": c.stop_signal, "Labels": c.labels},
        "rootfs": {"type": "layers", "diff_ids": diff_ids},
    });
    let config = serde_json::to_vec(&config).unwrap();
    let manifest = json!({
        "schemaVersion": 2, "mediaType": mt_manifest,
        "config": {"mediaType": mt_config, "digest": put(dir, &config), "size": config.len()},
        "layers": layers,
    });
    let manifest = serde_json::to_vec(&manifest).unwrap();
    json!({"mediaType": mt_manifest, "digest": put(dir, &manifest), "size": manifest.len(),
           "platform": {"os": img.os, "architecture": img.architecture}})
}

/// Writes an OCI image layout at `dir` (created) with the given entries.
pub fn write_oci_layout(dir: &Path, entries: &[LayoutEntry]) {
    std::fs::create_dir_all(dir.join("blobs/sha256")).expect("layout dir");
    std::fs::write(dir.join("oci-layout"), br#"{"imageLayoutVersion":"1.0.0"}"#).unwrap();
    let mut manifests = vec![];
    for e in entries {
        let mut desc = if e.platforms.len() == 1 {
            write_image(dir, &e.platforms[0])
        } else {
            let ms: Vec<_> = e.platforms.iter().map(|p| write_image(dir, p)).collect();
            let index = json!({"schemaVersion": 2, "mediaType": "application/vnd.oci.image.index.v1+json", "manifests": ms});
            let index = serde_json::to_vec(&index).unwrap();
            json!({"mediaType": "application/vnd.oci.image.index.v1+json", "digest": put(dir, &index), "size": index.len()})
        };
        let mut ann = serde_json::Map::new();
        if let Some(r) = &e.ref_name {
            ann.insert("org.opencontainers.image.ref.name".into(), r.clone().into());
        }
        if let Some(n) = &e.image_name {
            ann.insert("io.containerd.image.name".into(), n.clone().into());
        }
        if !ann.is_empty() {
            desc["annotations"] = ann.into();
        }
        manifests.push(desc);
    }
    let index = json!({"schemaVersion": 2, "mediaType": "application/vnd.oci.image.index.v1+json", "manifests": manifests});
    std::fs::write(
        dir.join("index.json"),
        serde_json::to_vec_pretty(&index).unwrap(),
    )
    .unwrap();
}

/// The `sha256:` digest of `data`, as manifests name blobs.
pub fn digest(data: &[u8]) -> String {
    digest::of(data)
}
