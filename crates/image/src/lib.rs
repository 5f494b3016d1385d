//! crust's image store: a content-addressed store of manifests and configs, layers
//! unpacked once each and shared by every image that has them, a small index of image
//! names, and overlay snapshots for container root filesystems.
//!
//! ```text
//! <root>/
//!   lock                   flock held for every change of images.json or snapshots/
//!   images.json            the image records (id, names, layers, config), atomically rewritten
//!   blobs/sha256/<hex>     indexes, manifests and configs, verified against their digest
//!   layers/<diff id hex>/  one unpacked layer in overlayfs form (whiteouts as 0/0 devices)
//!   layers/<chain id hex>/ a layer applied over its parents' symlinks, where that
//!                          moves folders it implies (see `unpack::chain`)
//!   implied/<diff id hex>  the folders a layer implies without naming them (JSON)
//!   snapshots/<key>/       snapshot.json (its layers), upper/, work/ for one container
//!   tmp/                   unpacks and downloads in progress (<pid>-..., removed if the pid died)
//! ```
//!
//! A pull or import becomes visible only when its record is written, after every layer
//! is in place; anything interrupted before that stays in `tmp/` and is cleaned. A
//! layer or blob is removed (garbage-collected) when no image record and no snapshot
//! refers to it.
//!
//! The store's records, names and garbage collection are here; registry pulls are in
//! `pull` (with its hosts, tokens and registry client), layer unpacking in `unpack` (with
//! the tar guard and `chain`, a layer over its parents' symlinks), container snapshots
//! in `snapshot`, offline imports in `import`, and the writing of test images in
//! `layout`.

mod digest;
mod error;
mod fsutil;
mod import;
pub mod layout;
/// Index, manifest and config parsing; public for fuzzing (`fuzz/`) and other callers.
pub mod manifest;
/// The node's platform and which index entry fits it.
pub mod platform;
mod pull;
mod reference;
mod snapshot;
pub mod unpack;

/// `hosts.toml` reading; public for fuzzing (`fuzz/`) and other callers of its parser.
pub use pull::hosts;

pub use error::{Error, ErrorKind, Result};
pub use reference::Named;
pub use snapshot::Snapshot;

use error::IoContext;
use parking_lot::Mutex;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, HashMap, HashSet};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// An image as the CRI sees it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Image {
    /// `sha256:<config digest>`.
    pub id: String,
    pub repo_tags: Vec<String>,
    pub repo_digests: Vec<String>,
    /// Bytes of content (compressed layers and config), as registries count it.
    pub size: u64,
    pub config: ImageConfig,
    pub pinned: bool,
}

/// What of the image config a runtime needs to start a container.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ImageConfig {
    pub entrypoint: Vec<String>,
    pub cmd: Vec<String>,
    pub env: Vec<String>,
    pub working_dir: String,
    pub user: String,
    pub stop_signal: String,
    pub labels: BTreeMap<String, String>,
}

/// Registry credentials, as a PullImageRequest carries them.
#[derive(Clone, Default)]
pub struct Auth {
    pub username: String,
    pub password: String,
    /// base64 of `username:password`.
    pub auth: String,
    pub identity_token: String,
    pub registry_token: String,
}

impl std::fmt::Debug for Auth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Auth")
            .field("username", &self.username)
            .finish_non_exhaustive()
    }
}

/// Space used on a filesystem.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Usage {
    pub bytes: u64,
    pub inodes: u64,
    pub mountpoint: PathBuf,
}

/// One image record on disk.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub(crate) struct Record {
    #[serde(flatten)]
    pub image: Image,
    /// The platform manifest's digest.
    pub manifest: String,
    /// Blobs this image keeps in `blobs/` (index, manifest, config).
    pub blobs: Vec<String>,
    /// Layer diff ids, bottom first.
    pub layers: Vec<String>,
    /// The folders (`layers/<hex>`) the image mounts, bottom first, where one differs
    /// from its diff id: a layer applied over its parents' symlinks (see `unpack::chain`).
    /// Empty: the diff ids.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub layer_keys: Vec<String>,
}

impl Record {
    /// The keys of the layer folders the image mounts, bottom first.
    pub(crate) fn keys(&self) -> &[String] {
        if self.layer_keys.len() == self.layers.len() {
            &self.layer_keys
        } else {
            &self.layers
        }
    }
}

#[derive(Default, Serialize, Deserialize)]
struct IndexFile {
    version: u32,
    images: Vec<Record>,
}

const INDEX_VERSION: u32 = 1;

#[derive(Default)]
struct Cache {
    /// (dev, inode, mtime ns) of images.json when `records` were read.
    stamp: Option<(u64, u64, i64)>,
    records: Vec<Record>,
}

pub struct ImageStore {
    root: PathBuf,
    hosts_dir: Option<PathBuf>,
    cache: Mutex<Cache>,
    /// One lock per reference being pulled: a second pull waits, then finds it done.
    pulls: Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>,
    /// One lock per layer being fetched, shared by pulls of different images.
    layer_locks: Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>,
    /// Digests and diff ids an unfinished pull or import has stored but not yet recorded:
    /// the garbage collector leaves them alone.
    active: Mutex<HashMap<String, usize>>,
    /// Called after each step of a pull that makes something, with the step's name
    /// (crustd's failpoints, in its debug builds).
    failpoint_hook: Option<fn(&str)>,
    /// How long a pull waits for a registry's next bytes before it fails.
    stall: std::time::Duration,
}

impl ImageStore {
    /// Opens (creating) the store at `root`. `hosts_dir` is a containerd-style
    /// `certs.d` directory (`<host>/hosts.toml`), if the node has one.
    pub fn open(root: PathBuf, hosts_dir: Option<PathBuf>) -> Result<ImageStore> {
        for d in ["blobs/sha256", "layers", "snapshots", "tmp"] {
            let p = root.join(d);
            std::fs::create_dir_all(&p).ctx(format!("creating {}", p.display()))?;
        }
        // The one TLS backend of the registry client; a second install is harmless.
        let _ = rustls::crypto::ring::default_provider().install_default();
        fsutil::clean_tmp(&root.join("tmp"));
        let store = ImageStore {
            root,
            hosts_dir,
            cache: Mutex::new(Cache::default()),
            pulls: Mutex::new(HashMap::new()),
            layer_locks: Mutex::new(HashMap::new()),
            active: Mutex::new(HashMap::new()),
            failpoint_hook: None,
            stall: std::time::Duration::from_secs(60),
        };
        store.records()?;
        Ok(store)
    }

    /// Sets how long a pull waits for a registry's next bytes (response headers or
    /// body) before it fails with Unavailable; 60 s unless set.
    pub fn set_stall_timeout(&mut self, d: std::time::Duration) {
        self.stall = d;
    }

    /// Sets the hook a pull calls after each step that makes something (crustd's
    /// failpoints: see its `daemon/failpoint.rs`).
    pub fn set_failpoint_hook(&mut self, hook: Option<fn(&str)>) {
        self.failpoint_hook = hook;
    }

    pub(crate) fn failpoint(&self, step: &str) {
        if let Some(h) = self.failpoint_hook {
            h(step);
        }
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Every image, in a stable order (by first name, then id).
    pub fn list(&self) -> Vec<Image> {
        let mut v: Vec<Image> = self
            .records()
            .unwrap_or_default()
            .into_iter()
            .map(|r| r.image)
            .collect();
        v.sort_by(|a, b| (a.repo_tags.first(), &a.id).cmp(&(b.repo_tags.first(), &b.id)));
        v
    }

    /// Finds an image by `name[:tag]`, `name@sha256:..`, its id `sha256:..`, the bare
    /// hex id, or a unique prefix of it. Short names are normalised.
    pub fn resolve(&self, reference: &str) -> Option<Image> {
        let recs = self.records().ok()?;
        find(&recs, reference).map(|i| recs[i].image.clone())
    }

    /// The layer directories of an image, bottom first (for tools and tests).
    pub fn layer_dirs(&self, reference: &str) -> Option<Vec<PathBuf>> {
        let recs = self.records().ok()?;
        let i = find(&recs, reference)?;
        recs[i]
            .keys()
            .iter()
            .map(|d| self.layer_dir(d).ok())
            .collect()
    }

    /// Removes an image and all its names (as CRI RemoveImage does). Snapshots made
    /// from it keep their layers. Absent is fine.
    pub fn remove(&self, reference: &str) -> Result<()> {
        {
            let _l = self.lock()?;
            let mut recs = self.records()?;
            let Some(i) = find(&recs, reference) else {
                return Ok(());
            };
            let r = recs.remove(i);
            self.save(recs)?;
            tracing::info!(image = %r.image.id, tags = ?r.image.repo_tags, "image removed");
        }
        self.gc()
    }

    /// Marks an image pinned (never removed by the kubelet's image GC), e.g. the pause image.
    pub fn set_pinned(&self, reference: &str, pinned: bool) -> Result<()> {
        let _l = self.lock()?;
        let mut recs = self.records()?;
        let i = find(&recs, reference)
            .ok_or_else(|| Error::NotFound(format!("image {reference:?} not found")))?;
        recs[i].image.pinned = pinned;
        self.save(recs)
    }

    /// Space used by images (blobs and layers) and by snapshots (writable layers).
    pub fn usage(&self) -> Result<(Usage, Usage)> {
        let (b1, i1) = fsutil::usage(&self.root.join("blobs"));
        let (b2, i2) = fsutil::usage(&self.root.join("layers"));
        let (b3, i3) = fsutil::usage(&self.root.join("snapshots"));
        Ok((
            Usage {
                bytes: b1 + b2,
                inodes: i1 + i2,
                mountpoint: self.root.clone(),
            },
            Usage {
                bytes: b3,
                inodes: i3,
                mountpoint: self.root.join("snapshots"),
            },
        ))
    }

    // ----- records -----

    fn index_path(&self) -> PathBuf {
        self.root.join("images.json")
    }

    /// The records, re-read when another process (or handle) rewrote the file.
    pub(crate) fn records(&self) -> Result<Vec<Record>> {
        let p = self.index_path();
        let stamp = match std::fs::metadata(&p) {
            Ok(m) => Some((m.dev(), m.ino(), m.mtime() * 1_000_000_000 + m.mtime_nsec())),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
            Err(e) => return Err(Error::io(format!("reading {}", p.display()), e)),
        };
        let mut c = self.cache.lock();
        if c.stamp != stamp || stamp.is_none() {
            c.records = match stamp {
                None => vec![],
                Some(_) => {
                    let data = std::fs::read(&p).ctx(format!("reading {}", p.display()))?;
                    let f: IndexFile = serde_json::from_slice(&data).map_err(|e| {
                        Error::Internal(format!("image index {} is corrupt: {e}", p.display()))
                    })?;
                    f.images
                }
            };
            c.stamp = stamp;
        }
        Ok(c.records.clone())
    }

    fn save(&self, images: Vec<Record>) -> Result<()> {
        let data = serde_json::to_vec_pretty(&IndexFile {
            version: INDEX_VERSION,
            images,
        })
        .map_err(|e| Error::Internal(format!("encoding the image index: {e}")))?;
        fsutil::write_atomic(&self.index_path(), &data)
    }

    /// The store-wide lock (an flock, so `crustd images` run beside the daemon is safe).
    pub(crate) fn lock(&self) -> Result<nix::fcntl::Flock<std::fs::File>> {
        let p = self.root.join("lock");
        let f = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&p)
            .ctx(format!("opening {}", p.display()))?;
        nix::fcntl::Flock::lock(f, nix::fcntl::FlockArg::LockExclusive)
            .map_err(|(_, e)| Error::Internal(format!("locking {}: {e}", p.display())))
    }

    /// Records a pulled or imported image. Its names move to it from any other image.
    pub(crate) fn commit(&self, mut rec: Record) -> Result<Image> {
        // Under the lock: a layer copy made for this image is not garbage until the
        // record names it.
        let _l = self.lock()?;
        let keys = self.layer_keys(&rec.layers)?;
        rec.layer_keys = if keys == rec.layers { vec![] } else { keys };
        // Layers and blobs reach the disk before the record naming them: one syncfs
        // for the whole pull, cheaper than an fsync per unpacked file.
        syncfs(&self.root).ctx(format!("syncing {}", self.root.display()))?;
        for d in rec.keys() {
            let p = self.layer_dir(d)?;
            if !p.is_dir() {
                return Err(Error::Unavailable(format!(
                    "image {}: layer {d} vanished before the image was recorded; pull again",
                    rec.image.id
                )));
            }
        }
        let mut recs = self.records()?;
        for r in recs.iter_mut().filter(|r| r.image.id != rec.image.id) {
            r.image
                .repo_tags
                .retain(|t| !rec.image.repo_tags.contains(t));
            r.image
                .repo_digests
                .retain(|t| !rec.image.repo_digests.contains(t));
        }
        let image = match recs.iter_mut().find(|r| r.image.id == rec.image.id) {
            Some(old) => {
                for t in &rec.image.repo_tags {
                    if !old.image.repo_tags.contains(t) {
                        old.image.repo_tags.push(t.clone());
                    }
                }
                for t in &rec.image.repo_digests {
                    if !old.image.repo_digests.contains(t) {
                        old.image.repo_digests.push(t.clone());
                    }
                }
                for b in &rec.blobs {
                    if !old.blobs.contains(b) {
                        old.blobs.push(b.clone());
                    }
                }
                old.image.clone()
            }
            None => {
                recs.push(rec.clone());
                rec.image.clone()
            }
        };
        self.save(recs)?;
        Ok(image)
    }

    // ----- content -----

    pub(crate) fn blob_path(&self, digest: &str) -> Result<PathBuf> {
        Ok(self.root.join("blobs/sha256").join(digest::hex_of(digest)?))
    }

    pub(crate) fn layer_dir(&self, diff_id: &str) -> Result<PathBuf> {
        Ok(self.root.join("layers").join(digest::hex_of(diff_id)?))
    }

    pub(crate) fn tmp_path(&self, tag: &str) -> PathBuf {
        self.root.join("tmp").join(fsutil::tmp_name(tag))
    }

    /// Stores a small blob (manifest, config) after checking its digest.
    pub(crate) fn put_blob(&self, digest: &str, data: &[u8], what: &str) -> Result<()> {
        digest::verify(data, digest, what)?;
        let p = self.blob_path(digest)?;
        if p.exists() {
            return Ok(());
        }
        fsutil::write_atomic(&p, data)
    }

    /// Unpacks one layer from `r` (compressed or not) unless the store has it, checking
    /// the uncompressed content against `diff_id` and, when given, the compressed
    /// content against `digest`. The layer appears whole or not at all.
    pub(crate) fn unpack_layer(
        &self,
        r: impl std::io::Read,
        digest: Option<&str>,
        diff_id: &str,
        what: &str,
    ) -> Result<()> {
        unpack_layer_at(&self.root, r, digest, diff_id, what)
    }

    /// Protects content from the garbage collector while a pull or import works.
    pub(crate) fn hold(&self, keys: &[String]) -> Hold<'_> {
        let mut a = self.active.lock();
        for k in keys {
            *a.entry(k.clone()).or_default() += 1;
        }
        Hold {
            store: self,
            keys: keys.to_vec(),
        }
    }

    /// Removes layers and blobs that no image, snapshot or unfinished pull refers to.
    /// The daemon runs it once at start: a layer is durable only once an image record
    /// names it, so one left unnamed by a crash (or power loss) is not trusted.
    pub fn gc(&self) -> Result<()> {
        let _l = self.lock()?;
        let mut keep: HashSet<String> = HashSet::new();
        for r in self.records()? {
            keep.extend(
                r.layers
                    .iter()
                    .chain(&r.layer_keys)
                    .filter_map(|d| digest::hex_of(d).ok().map(str::to_string)),
            );
            keep.extend(
                r.blobs
                    .iter()
                    .filter_map(|d| digest::hex_of(d).ok().map(str::to_string)),
            );
        }
        for s in self.snapshot_records() {
            keep.extend(
                s.layers
                    .iter()
                    .filter_map(|d| digest::hex_of(d).ok().map(str::to_string)),
            );
        }
        for k in self.active.lock().keys() {
            if let Ok(h) = digest::hex_of(k) {
                keep.insert(h.to_string());
            }
        }
        // The notes of implied folders go with their layers.
        if let Ok(rd) = std::fs::read_dir(self.root.join("implied")) {
            for e in rd.flatten() {
                if !keep.contains(&*e.file_name().to_string_lossy()) {
                    let _ = std::fs::remove_file(e.path());
                }
            }
        }
        for dir in ["layers", "blobs/sha256"] {
            let d = self.root.join(dir);
            let Ok(rd) = std::fs::read_dir(&d) else {
                continue;
            };
            for e in rd.flatten() {
                let name = e.file_name().to_string_lossy().into_owned();
                if name.starts_with('.') || keep.contains(&name) {
                    continue;
                }
                // Renamed away first, so a half-removed layer is never used.
                let gone = self.tmp_path("gc");
                if std::fs::rename(e.path(), &gone).is_ok() {
                    if let Err(err) = fsutil::remove_all(&gone) {
                        tracing::warn!("removing unused {}: {err}", e.path().display());
                    }
                    tracing::debug!("removed unused {dir}/{name}");
                }
            }
        }
        Ok(())
    }

    pub(crate) fn lock_key(
        map: &Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>,
        key: &str,
    ) -> Arc<tokio::sync::Mutex<()>> {
        let mut m = map.lock();
        // Forget locks nobody holds any more.
        m.retain(|_, v| Arc::strong_count(v) > 1);
        m.entry(key.to_string()).or_default().clone()
    }
}

pub(crate) struct Hold<'a> {
    store: &'a ImageStore,
    keys: Vec<String>,
}

impl Hold<'_> {
    pub fn add(&mut self, key: &str) {
        *self.store.active.lock().entry(key.to_string()).or_default() += 1;
        self.keys.push(key.to_string());
    }
}

impl Drop for Hold<'_> {
    fn drop(&mut self) {
        let mut a = self.store.active.lock();
        for k in &self.keys {
            if let Some(n) = a.get_mut(k) {
                *n -= 1;
                if *n == 0 {
                    a.remove(k);
                }
            }
        }
    }
}

/// [`ImageStore::unpack_layer`] for a store at `root` (usable from a blocking task).
pub(crate) fn unpack_layer_at(
    root: &Path,
    r: impl std::io::Read,
    digest: Option<&str>,
    diff_id: &str,
    what: &str,
) -> Result<()> {
    let dest = root.join("layers").join(digest::hex_of(diff_id)?);
    if dest.is_dir() {
        return Ok(());
    }
    let tmp = root.join("tmp").join(fsutil::tmp_name("layer"));
    std::fs::create_dir(&tmp).ctx(format!("creating {}", tmp.display()))?;
    // A layer's root is the container's "/": 0755 whatever crustd's umask, unless the
    // layer says otherwise with a "./" entry.
    std::fs::set_permissions(&tmp, std::os::unix::fs::PermissionsExt::from_mode(0o755))
        .ctx(format!("chmod {}", tmp.display()))?;
    let res = (|| {
        let mut hr = digest::HashReader::new(r);
        let u = unpack::unpack(&mut hr, &tmp, what)?;
        let (got, _) = hr
            .finish()
            .map_err(|e| Error::DataLoss(format!("layer {what}: reading: {e}")))?;
        if let Some(want) = digest {
            if got != want {
                return Err(Error::DataLoss(format!(
                    "layer {what}: digest mismatch: expected {want}, got {got}"
                )));
            }
        }
        if u.diff_id != diff_id {
            return Err(Error::DataLoss(format!(
                "layer {what}: uncompressed digest mismatch: the config says {diff_id}, the content is {}",
                u.diff_id
            )));
        }
        // Noted before the layer appears, so a layer never lacks its note.
        unpack::chain::write_implied(&unpack::chain::implied_file(root, diff_id)?, &u.implied)?;
        // Made durable by the syncfs of the commit that records an image using it.
        match std::fs::rename(&tmp, &dest) {
            Ok(()) => {}
            // Another pull of the same layer won.
            Err(_) if dest.is_dir() => fsutil::remove_all(&tmp).ctx("removing a temp layer")?,
            Err(e) => return Err(Error::io(format!("storing layer {diff_id}"), e)),
        }
        tracing::debug!(
            layer = diff_id,
            size = u.uncompressed_size,
            "layer unpacked"
        );
        Ok(())
    })();
    if res.is_err() {
        let _ = fsutil::remove_all(&tmp);
    }
    res
}

fn syncfs(p: &Path) -> std::io::Result<()> {
    use std::os::fd::AsRawFd;
    let f = std::fs::File::open(p)?;
    // SAFETY: a valid open fd.
    if unsafe { libc::syncfs(f.as_raw_fd()) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// Index of the record `reference` names.
fn find(recs: &[Record], reference: &str) -> Option<usize> {
    let r = reference.trim();
    if r.is_empty() {
        return None;
    }
    // A full id, with or without its algorithm.
    let bare = r.strip_prefix("sha256:").unwrap_or(r);
    if bare.len() == 64 && digest::is_hex(bare) {
        if let Some(i) = recs
            .iter()
            .position(|x| x.image.id == format!("sha256:{bare}"))
        {
            return Some(i);
        }
    }
    // A name.
    if let Ok(n) = Named::parse(r) {
        if let Some(d) = n.digest() {
            let want = format!("{}@{d}", n.name());
            if let Some(i) = recs
                .iter()
                .position(|x| x.image.repo_digests.contains(&want))
            {
                return Some(i);
            }
        } else if let Some(t) = n.tagged() {
            if let Some(i) = recs.iter().position(|x| x.image.repo_tags.contains(&t)) {
                return Some(i);
            }
        }
    }
    // A unique id prefix.
    if digest::is_hex(bare) && bare.len() < 64 {
        let hits: Vec<usize> = recs
            .iter()
            .enumerate()
            .filter(|(_, x)| {
                x.image
                    .id
                    .strip_prefix("sha256:")
                    .unwrap_or("")
                    .starts_with(bare)
            })
            .map(|(i, _)| i)
            .collect();
        if hits.len() == 1 {
            return Some(hits[0]);
        }
    }
    None
}

#[cfg(test)]
mod tests;
