//! Pulling from a registry, with crust's own registry client (fetch.rs) for every host.
//!
//! ```text
//! reference ──> hosts (mirrors first, then the server)
//!   per host: manifest or index ──(index: linux/amd64)──> manifest ──> config
//!             └─> layers not yet in the store, 3 at a time: download ─stream─> unpack
//!                 into tmp/ (compressed digest and diff id checked) ──rename──> layers/
//!   all layers in place ──> record written (the image is now visible)
//! ```
//! Two pulls of one reference share one lock: the second waits and then finds every
//! layer there. Two images sharing a layer share its per-layer lock.
//!
//! The hosts to try come from `hosts` (hosts.toml), a CRI identity token is traded for
//! an access token in `token`, and `fetch` speaks to each host, its `header` entries,
//! TLS settings and credential challenges included.

mod fetch;
pub mod hosts;
mod token;

use crate::error::{Error, ErrorKind, Result};
use crate::manifest::{ConfigBlob, Descriptor, Manifest};
use crate::{digest, Auth, Image, ImageStore, Named, Record};
use fetch::{Fetcher, RegistryAuth};
use futures::StreamExt;
use hosts::Endpoint;
use std::io::Read;

/// Layers fetched at once per pull.
const PARALLEL_LAYERS: usize = 3;

impl ImageStore {
    /// Pulls `reference` (normalised: `busybox` is `docker.io/library/busybox:latest`)
    /// for linux/amd64 and returns the image, recorded under that name.
    pub async fn pull(&self, reference: &str, auth: Option<Auth>) -> Result<Image> {
        let res = self.pull_named(reference, auth).await.map_err(|e| {
            // Name the store a node operator has to free.
            if e.kind() == ErrorKind::ResourceExhausted {
                e.context(format!(
                    "no space left in the image store {}",
                    self.root.display()
                ))
            } else {
                e
            }
        });
        // Give the download and unpack buffers back to the system: a daemon pulls
        // rarely and should not keep a pull's peak resident.
        #[cfg(all(target_os = "linux", target_env = "gnu"))]
        // SAFETY: malloc_trim has no preconditions.
        unsafe {
            libc::malloc_trim(0);
        }
        res
    }

    async fn pull_named(&self, reference: &str, auth: Option<Auth>) -> Result<Image> {
        let named = Named::parse(reference)?;
        let what = named.to_string();
        let lock = Self::lock_key(&self.pulls, &what);
        let _g = lock.lock().await;
        let auth = auth.unwrap_or_default();
        // A refresh token alone is traded for an access token per host (see token.rs).
        let identity = (auth.registry_token.is_empty()
            && auth.username.is_empty()
            && auth.password.is_empty()
            && auth.auth.is_empty()
            && !auth.identity_token.is_empty())
        .then(|| auth.identity_token.clone());
        let auth = registry_auth(auth, &what)?;
        let eps = hosts::endpoints(self.hosts_dir.as_deref(), named.registry())
            .map_err(|e| e.context(format!("pulling image {what}")))?;
        let mut errs: Vec<(String, Error)> = Vec::new();
        for ep in eps
            .iter()
            .filter(|e| e.pull && (e.resolve || named.digest().is_some()))
        {
            let ep_auth = match &identity {
                Some(refresh) => match token::access_token(ep, named.repository(), refresh).await {
                    Ok(access) => RegistryAuth::Bearer(access),
                    Err(e) => {
                        tracing::warn!(reference = %what, host = %ep.host, "identity token: {e}");
                        errs.push((format!("{}://{}", ep.scheme, ep.host), e));
                        continue;
                    }
                },
                None => auth.clone(),
            };
            match self.pull_from(ep, &named, &ep_auth).await {
                Ok(img) => {
                    tracing::info!(image = %img.id, reference = %what, host = %ep.host, "image pulled");
                    return Ok(img);
                }
                Err(e) => {
                    tracing::warn!(reference = %what, host = %ep.host, "pull failed: {e}");
                    errs.push((format!("{}://{}", ep.scheme, ep.host), e));
                }
            }
        }
        match errs.len() {
            0 => Err(Error::FailedPrecondition(format!(
                "pulling image {what}: no host configured for {} may resolve it",
                named.registry()
            ))),
            1 => Err(errs
                .pop()
                .unwrap()
                .1
                .context(format!("pulling image {what}"))),
            _ => {
                let msg: Vec<String> = errs.iter().map(|(h, e)| format!("{h}: {e}")).collect();
                let last = errs.pop().unwrap().1;
                Err(with_kind(
                    last.kind(),
                    format!("pulling image {what}: {}", msg.join("; ")),
                ))
            }
        }
    }

    async fn pull_from(&self, ep: &Endpoint, named: &Named, auth: &RegistryAuth) -> Result<Image> {
        let fetcher = Fetcher::new(ep, named, auth, self.stall)?;
        // By digest when the reference has one: a tag beside it is only a name.
        let first = named.digest().or(named.tag()).unwrap_or("latest");
        // Its size is not known (a tag, or a digest alone): at most 4 MiB.
        let data = fetcher.manifest(first, None, "manifest").await?;
        let top = digest::of(&data);
        if let Some(want) = named.digest() {
            if want != top {
                return Err(Error::DataLoss(format!(
                    "manifest digest mismatch: asked for {want}, got {top}"
                )));
            }
        }
        let mut blobs = vec![top.clone()];
        let mut hold = self.hold(&blobs);
        self.put_blob(&top, &data, "manifest")?;
        let mut m = Manifest::parse(&data, "manifest")?;
        let mut mdigest = top.clone();
        if m.is_index() {
            let d = m.pick_platform("index")?.clone();
            let data = fetcher
                .manifest(&d.digest, Some(d.size), &format!("manifest {}", d.digest))
                .await?;
            hold.add(&d.digest);
            self.put_blob(&d.digest, &data, &format!("manifest {}", d.digest))?;
            m = Manifest::parse(&data, &format!("manifest {}", d.digest))?;
            if m.is_index() {
                return Err(Error::InvalidArgument(format!(
                    "manifest {} is a nested index",
                    d.digest
                )));
            }
            blobs.push(d.digest.clone());
            mdigest = d.digest;
        }
        let cdesc = m.config.clone().unwrap();
        digest::hex_of(&cdesc.digest)?;
        let cdata = fetcher
            .blob(
                &cdesc.digest,
                cdesc.size,
                &format!("config {}", cdesc.digest),
            )
            .await?;
        hold.add(&cdesc.digest);
        self.put_blob(&cdesc.digest, &cdata, &format!("config {}", cdesc.digest))?;
        blobs.push(cdesc.digest.clone());
        self.failpoint("pull_image.after_blobs");
        let config = ConfigBlob::parse(&cdata, &format!("config {}", cdesc.digest))?;
        config.check_platform(&format!("config {}", cdesc.digest))?;
        if config.rootfs.diff_ids.len() != m.layers.len() {
            return Err(Error::InvalidArgument(format!(
                "manifest {mdigest} has {} layers but its config {} diff ids",
                m.layers.len(),
                config.rootfs.diff_ids.len()
            )));
        }
        for d in &config.rootfs.diff_ids {
            digest::hex_of(d)?;
            hold.add(d);
        }
        let jobs: Vec<(Descriptor, String)> = m
            .layers
            .iter()
            .cloned()
            .zip(config.rootfs.diff_ids.iter().cloned())
            .collect();
        let fetcher = &fetcher;
        let results: Vec<Result<()>> = futures::stream::iter(jobs)
            .map(move |(l, d)| async move { self.fetch_layer(fetcher, &l, &d).await })
            .buffer_unordered(PARALLEL_LAYERS)
            .collect()
            .await;
        for res in results {
            res?;
        }
        self.failpoint("pull_image.after_layers");
        let size = cdesc.size + m.layers.iter().map(|l| l.size).sum::<u64>();
        let mut repo_tags = vec![];
        repo_tags.extend(named.tagged());
        let rec = Record {
            image: Image {
                id: format!("sha256:{}", digest::hex_of(&cdesc.digest)?),
                repo_tags,
                repo_digests: vec![format!("{}@{top}", named.name())],
                size,
                config: config.image_config(),
                pinned: false,
            },
            manifest: mdigest,
            blobs,
            layers: config.rootfs.diff_ids.clone(),
            layer_keys: vec![],
        };
        let image = self.commit(rec)?;
        self.failpoint("pull_image.after_record");
        Ok(image)
    }

    /// Downloads one layer and unpacks it as it arrives, unless the store has it.
    async fn fetch_layer(&self, fetcher: &Fetcher, l: &Descriptor, diff_id: &str) -> Result<()> {
        digest::hex_of(&l.digest)?;
        let lock = Self::lock_key(&self.layer_locks, diff_id);
        let _g = lock.lock().await;
        if self.layer_dir(diff_id)?.is_dir() {
            return Ok(());
        }
        let started = std::time::Instant::now();
        let mut stream = fetcher
            .layer(&l.digest, l.size, &format!("layer {}", l.digest))
            .await?;
        let (tx, rx) = tokio::sync::mpsc::channel::<std::io::Result<bytes::Bytes>>(8);
        let root = self.root.clone();
        let (dg, di) = (l.digest.clone(), diff_id.to_string());
        let unpacker = tokio::task::spawn_blocking(move || {
            let reader = ChanReader {
                rx,
                cur: bytes::Bytes::new(),
            };
            // The compressed digest is checked by the fetcher's stream (a mismatch ends it
            // with DataLoss, see below); the diff id is checked here.
            crate::unpack_layer_at(&root, reader, None, &di, &dg)
        });
        let mut net_err = None;
        while let Some(chunk) = stream.next().await {
            let failed = chunk
                .as_ref()
                .err()
                .map(|e| (e.kind() == ErrorKind::DataLoss, e.to_string()));
            let chunk = chunk.map_err(|e| std::io::Error::other(e.to_string()));
            if tx.send(chunk).await.is_err() {
                break; // the unpacker stopped: its error says why
            }
            if let Some((mismatch, e)) = failed {
                if mismatch {
                    let _ = unpacker.await;
                    return Err(Error::DataLoss(format!("layer {}: {e}", l.digest)));
                }
                net_err = Some(e);
                break;
            }
        }
        drop(tx);
        let res = unpacker
            .await
            .map_err(|e| Error::Internal(format!("layer {}: unpack task: {e}", l.digest)))?;
        if let (Err(_), Some(e)) = (&res, net_err) {
            return Err(Error::Unavailable(format!(
                "layer {}: download interrupted: {e}",
                l.digest
            )));
        }
        if res.is_ok() {
            tracing::debug!(layer = %l.digest, size = l.size, ms = started.elapsed().as_millis() as u64, "layer fetched");
        }
        res
    }
}

/// A blocking reader over chunks sent by the download task.
struct ChanReader {
    rx: tokio::sync::mpsc::Receiver<std::io::Result<bytes::Bytes>>,
    cur: bytes::Bytes,
}

impl Read for ChanReader {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        while self.cur.is_empty() {
            match self.rx.blocking_recv() {
                Some(Ok(b)) => self.cur = b,
                Some(Err(e)) => return Err(e),
                None => return Ok(0),
            }
        }
        let n = buf.len().min(self.cur.len());
        buf[..n].copy_from_slice(&self.cur.split_to(n));
        Ok(n)
    }
}

/// The CRI's credentials as the form the registry is offered: a token the caller has,
/// a user and password (given apart or as `auth`), or none.
fn registry_auth(a: Auth, what: &str) -> Result<RegistryAuth> {
    if !a.registry_token.is_empty() {
        return Ok(RegistryAuth::Bearer(a.registry_token));
    }
    if !a.username.is_empty() || !a.password.is_empty() {
        return Ok(RegistryAuth::Basic(a.username, a.password));
    }
    if !a.auth.is_empty() {
        let raw = base64_decode(a.auth.trim()).ok_or_else(|| {
            Error::InvalidArgument(format!("pulling image {what}: auth is not valid base64"))
        })?;
        let s = String::from_utf8(raw).map_err(|_| {
            Error::InvalidArgument(format!("pulling image {what}: auth is not UTF-8"))
        })?;
        let (u, p) = s.split_once(':').ok_or_else(|| {
            Error::InvalidArgument(format!(
                "pulling image {what}: auth is not base64 of user:password"
            ))
        })?;
        return Ok(RegistryAuth::Basic(u.to_string(), p.to_string()));
    }
    // An identity token alone is exchanged per host by the caller (token.rs).
    Ok(RegistryAuth::Anonymous)
}

fn base64_decode(s: &str) -> Option<Vec<u8>> {
    let val = |c: u8| -> Option<u32> {
        Some(match c {
            b'A'..=b'Z' => c - b'A',
            b'a'..=b'z' => c - b'a' + 26,
            b'0'..=b'9' => c - b'0' + 52,
            b'+' | b'-' => 62,
            b'/' | b'_' => 63,
            _ => return None,
        } as u32)
    };
    let s = s.trim_end_matches('=').as_bytes();
    let mut out = Vec::with_capacity(s.len() * 3 / 4);
    for chunk in s.chunks(4) {
        let mut acc = 0u32;
        for (i, &c) in chunk.iter().enumerate() {
            acc |= val(c)? << (18 - 6 * i);
        }
        let n = match chunk.len() {
            4 => 3,
            3 => 2,
            2 => 1,
            _ => return None,
        };
        for i in 0..n {
            out.push((acc >> (16 - 8 * i)) as u8);
        }
    }
    Some(out)
}

fn with_kind(k: ErrorKind, m: String) -> Error {
    match k {
        ErrorKind::NotFound => Error::NotFound(m),
        ErrorKind::InvalidArgument => Error::InvalidArgument(m),
        ErrorKind::AlreadyExists => Error::AlreadyExists(m),
        ErrorKind::Unauthenticated => Error::Unauthenticated(m),
        ErrorKind::Unavailable => Error::Unavailable(m),
        ErrorKind::FailedPrecondition => Error::FailedPrecondition(m),
        ErrorKind::DataLoss => Error::DataLoss(m),
        ErrorKind::ResourceExhausted => Error::ResourceExhausted(m),
        ErrorKind::Internal => Error::Internal(m),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// crustd's handlers run on tokio: the pull future must be Send.
    #[allow(dead_code)]
    fn pull_is_send(s: &ImageStore) {
        fn send<T: Send>(_: T) {}
        send(s.pull("x", None));
    }

    #[test]
    fn auth_forms() {
        let a = Auth {
            auth: "dXNlcjpwYXNz".into(),
            ..Default::default()
        };
        assert_eq!(
            registry_auth(a, "x").unwrap(),
            RegistryAuth::Basic("user".into(), "pass".into())
        );
        let a = Auth {
            registry_token: "t".into(),
            ..Default::default()
        };
        assert_eq!(
            registry_auth(a, "x").unwrap(),
            RegistryAuth::Bearer("t".into())
        );
        assert_eq!(
            registry_auth(Auth::default(), "x").unwrap(),
            RegistryAuth::Anonymous
        );
        let a = Auth {
            auth: "!!".into(),
            ..Default::default()
        };
        assert_eq!(
            registry_auth(a, "x").unwrap_err().kind(),
            ErrorKind::InvalidArgument
        );
        assert_eq!(base64_decode("YQ==").unwrap(), b"a");
        assert_eq!(base64_decode("YWI=").unwrap(), b"ab");
    }
}
