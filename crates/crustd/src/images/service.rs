//! The CRI ImageService over crust's image store (`crates/image`).
//!
//! Image errors become gRPC codes here, in one place: NotFound (unknown image, tag or
//! repository), InvalidArgument (bad reference, hostile or malformed content),
//! Unauthenticated (credentials refused or missing), Unavailable (registry down),
//! FailedPrecondition (no manifest for this platform), DataLoss (digest mismatch,
//! truncated layer), ResourceExhausted (the image store's filesystem is full),
//! Internal (the node).

use crate::cri::service::Service;
use cri_api::*;
use std::collections::HashMap;
use std::time::Instant;
use tonic::{Code, Request, Response, Status};

fn status(e: image::Error) -> Status {
    use image::ErrorKind as K;
    let code = match e.kind() {
        K::NotFound => Code::NotFound,
        K::InvalidArgument => Code::InvalidArgument,
        K::AlreadyExists => Code::AlreadyExists,
        K::Unauthenticated => Code::Unauthenticated,
        K::Unavailable => Code::Unavailable,
        K::FailedPrecondition => Code::FailedPrecondition,
        K::DataLoss => Code::DataLoss,
        K::ResourceExhausted => Code::ResourceExhausted,
        K::Internal => Code::Internal,
    };
    Status::new(code, e.to_string())
}

/// Logs one finished image RPC, as the runtime RPCs are logged.
fn done<T>(
    rpc: &str,
    what: &str,
    start: Instant,
    r: Result<T, Status>,
) -> Result<Response<T>, Status> {
    let ms = start.elapsed().as_secs_f64() * 1000.0;
    match r {
        Ok(v) => {
            tracing::debug!(rpc, image = what, ms, "ok");
            Ok(Response::new(v))
        }
        Err(e) => {
            tracing::debug!(rpc, image = what, ms, error = %e.message(), "failed");
            if e.code() == Code::Internal {
                tracing::warn!(rpc, image = what, error = %e.message(), "RPC failed");
            }
            Err(e)
        }
    }
}

fn spec_image(s: &Option<ImageSpec>) -> Result<String, Status> {
    match s.as_ref().map(|s| s.image.trim()) {
        Some(i) if !i.is_empty() => Ok(i.to_string()),
        _ => Err(Status::invalid_argument(
            "image spec with an image reference is required",
        )),
    }
}

/// The CRI's view of an image: the config's user as uid when numeric, else username.
fn cri_image(i: &image::Image) -> Image {
    let user = i.config.user.split(':').next().unwrap_or("");
    let (uid, username) = match user.parse::<i64>() {
        Ok(n) => (Some(Int64Value { value: n }), String::new()),
        // Unset: neither, as containerd answers (the kubelet then assumes root).
        Err(_) if user.is_empty() => (None, String::new()),
        Err(_) => (None, user.to_string()),
    };
    Image {
        id: i.id.clone(),
        repo_tags: i.repo_tags.clone(),
        repo_digests: i.repo_digests.clone(),
        size: i.size,
        uid,
        username,
        spec: Some(ImageSpec {
            image: i.id.clone(),
            ..Default::default()
        }),
        pinned: i.pinned,
    }
}

fn auth(a: Option<AuthConfig>) -> Option<image::Auth> {
    a.map(|a| image::Auth {
        username: a.username,
        password: a.password,
        auth: a.auth,
        identity_token: a.identity_token,
        registry_token: a.registry_token,
    })
}

impl Service {
    /// `verbose` info: the image config as the runtime uses it, the layer directories
    /// and the image's config blob, shaped after containerd's `info` key.
    fn image_info(&self, img: &image::Image) -> HashMap<String, String> {
        let store = &self.crust.images;
        let config_blob: serde_json::Value = std::fs::read(
            store
                .root()
                .join("blobs/sha256")
                .join(img.id.trim_start_matches("sha256:")),
        )
        .ok()
        .and_then(|b| serde_json::from_slice(&b).ok())
        .unwrap_or(serde_json::Value::Null);
        let info = serde_json::json!({
            "id": img.id,
            "repoTags": img.repo_tags,
            "repoDigests": img.repo_digests,
            "size": img.size,
            "pinned": img.pinned,
            "config": img.config,
            "layers": store.layer_dirs(&img.id).unwrap_or_default(),
            "imageSpec": config_blob,
        });
        HashMap::from([("info".to_string(), info.to_string())])
    }
}

#[tonic::async_trait]
impl ImageService for Service {
    async fn list_images(
        &self,
        r: Request<ListImagesRequest>,
    ) -> std::result::Result<Response<ListImagesResponse>, Status> {
        let t = Instant::now();
        let filter = r
            .into_inner()
            .filter
            .and_then(|f| f.image)
            .map(|s| s.image)
            .filter(|s| !s.is_empty());
        let images = match &filter {
            // A filter names one image, the way ImageStatus does.
            Some(f) => self.crust.images.resolve(f).iter().map(cri_image).collect(),
            None => self.crust.images.list().iter().map(cri_image).collect(),
        };
        done(
            "ListImages",
            filter.as_deref().unwrap_or(""),
            t,
            Ok(ListImagesResponse { images }),
        )
    }

    async fn image_status(
        &self,
        r: Request<ImageStatusRequest>,
    ) -> std::result::Result<Response<ImageStatusResponse>, Status> {
        let t = Instant::now();
        let req = r.into_inner();
        let res = spec_image(&req.image).map(|name| {
            // The CRI reports an absent image as an empty status, not an error.
            match self.crust.images.resolve(&name) {
                Some(img) => ImageStatusResponse {
                    image: Some(cri_image(&img)),
                    info: if req.verbose {
                        self.image_info(&img)
                    } else {
                        Default::default()
                    },
                },
                None => ImageStatusResponse {
                    image: None,
                    info: Default::default(),
                },
            }
        });
        let what = req.image.as_ref().map(|s| s.image.as_str()).unwrap_or("");
        done("ImageStatus", what, t, res)
    }

    async fn pull_image(
        &self,
        r: Request<PullImageRequest>,
    ) -> std::result::Result<Response<PullImageResponse>, Status> {
        let t = Instant::now();
        let req = r.into_inner();
        let name = match spec_image(&req.image) {
            Ok(n) => n,
            Err(e) => return done("PullImage", "", t, Err(e)),
        };
        let store = self.crust.images.clone();
        let (n, a) = (name.clone(), auth(req.auth));
        // On a task of its own: a kubelet that gives up does not waste the download;
        // its retry finds the image (or joins the pull still running).
        let res = match tokio::spawn(async move { store.pull(&n, a).await }).await {
            Ok(Ok(img)) => Ok(PullImageResponse { image_ref: img.id }),
            Ok(Err(e)) => Err(status(e)),
            Err(e) => Err(Status::internal(format!("pulling image {name}: {e}"))),
        };
        done("PullImage", &name, t, res)
    }

    async fn remove_image(
        &self,
        r: Request<RemoveImageRequest>,
    ) -> std::result::Result<Response<RemoveImageResponse>, Status> {
        let t = Instant::now();
        let req = r.into_inner();
        // Removing an image that is not there succeeds, as the CRI asks. Containers
        // made from it keep their layers (their snapshots hold them), as in containerd.
        let res = spec_image(&req.image).and_then(|name| {
            self.crust
                .images
                .remove(&name)
                .map(|()| RemoveImageResponse {})
                .map_err(status)
        });
        let what = req.image.as_ref().map(|s| s.image.as_str()).unwrap_or("");
        done("RemoveImage", what, t, res)
    }

    async fn image_fs_info(
        &self,
        _r: Request<ImageFsInfoRequest>,
    ) -> std::result::Result<Response<ImageFsInfoResponse>, Status> {
        let t = Instant::now();
        let store = self.crust.images.clone();
        // Walking the store can take a while on a big node: off the async workers.
        let res = match tokio::task::spawn_blocking(move || store.usage()).await {
            Ok(Ok((images, snapshots))) => {
                let now = crate::daemon::util::now_ns();
                let fs = |u: image::Usage| FilesystemUsage {
                    timestamp: now,
                    fs_id: Some(FilesystemIdentifier {
                        mountpoint: u.mountpoint.display().to_string(),
                    }),
                    used_bytes: Some(UInt64Value { value: u.bytes }),
                    inodes_used: Some(UInt64Value { value: u.inodes }),
                };
                Ok(ImageFsInfoResponse {
                    image_filesystems: vec![fs(images)],
                    container_filesystems: vec![fs(snapshots)],
                })
            }
            Ok(Err(e)) => Err(status(e)),
            Err(e) => Err(Status::internal(format!("image fs usage: {e}"))),
        };
        done("ImageFsInfo", "", t, res)
    }
}
