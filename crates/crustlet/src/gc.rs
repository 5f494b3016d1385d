//! Image garbage collection, as the kubelet does it: when the image filesystem is
//! fuller than `--image-gc-high-threshold` percent, images no container uses are
//! removed, least recently used first, until it is down to `--image-gc-low-threshold`.
//! An image is kept for `--minimum-image-ttl-duration` (two minutes) after it was last
//! seen (just pulled, about to be used). Dead containers and sandboxes are collected by the pod workers.

use crate::node::host;
use crate::Ctx;
use std::collections::{HashMap, HashSet};
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// An image as the collector weighs it.
#[derive(Debug, Clone)]
pub struct Candidate {
    pub id: String,
    pub size: u64,
    pub last_used: Instant,
}

/// The images to remove to free `need` bytes: unused for at least `min_age`
/// (`--minimum-image-ttl-duration`), least recently used first. May free less than
/// asked when nothing else can go.
pub fn choose(
    mut unused: Vec<Candidate>,
    need: u64,
    now: Instant,
    min_age: Duration,
) -> Vec<String> {
    unused.retain(|c| now.duration_since(c.last_used) >= min_age);
    unused.sort_by_key(|c| c.last_used);
    let mut freed = 0;
    let mut out = vec![];
    for c in unused {
        if freed >= need {
            break;
        }
        freed += c.size;
        out.push(c.id);
    }
    out
}

/// When each image was last seen in use (or first seen), by image id: the collector's
/// memory, shared by its periodic passes and the eviction manager's reclaim.
#[derive(Default)]
pub struct Usage {
    last_used: tokio::sync::Mutex<HashMap<String, Instant>>,
}

/// Checks the image filesystem every 30 s for as long as the crustlet runs.
pub async fn run(ctx: Arc<Ctx>) {
    loop {
        tokio::time::sleep(Duration::from_secs(30)).await;
        if let Err(e) = pass(&ctx, false).await {
            tracing::debug!("image gc: {e:#}");
        }
    }
}

/// Under disk pressure, before a pod is evicted for it: every unused image older than
/// the minimum age goes, whatever the thresholds (the kubelet's `DeleteUnusedImages`).
/// Returns how many were removed.
pub async fn reclaim(ctx: &Ctx) -> anyhow::Result<usize> {
    pass(ctx, true).await
}

async fn pass(ctx: &Ctx, all: bool) -> anyhow::Result<usize> {
    let mut last_used = ctx.image_usage.last_used.lock().await;
    let mut images = ctx.cri.images.clone();
    let mut rt = ctx.cri.runtime.clone();
    let now = Instant::now();
    let in_use: HashSet<String> = rt
        .list_containers(cri_api::ListContainersRequest { filter: None })
        .await?
        .into_inner()
        .containers
        .into_iter()
        .flat_map(|c| [c.image_ref, c.image.map(|i| i.image).unwrap_or_default()])
        .collect();
    let list = images
        .list_images(cri_api::ListImagesRequest { filter: None })
        .await?
        .into_inner()
        .images;
    let mut unused = vec![];
    for img in &list {
        let used = in_use.contains(&img.id) || img.repo_tags.iter().any(|t| in_use.contains(t));
        if used {
            last_used.insert(img.id.clone(), now);
        }
        let seen = *last_used.entry(img.id.clone()).or_insert(now);
        if !used && !img.pinned {
            unused.push(Candidate {
                id: img.id.clone(),
                size: img.size,
                last_used: seen,
            });
        }
    }
    let ids: HashSet<&String> = list.iter().map(|i| &i.id).collect();
    last_used.retain(|id, _| ids.contains(id));

    let victims = if all {
        choose(unused, u64::MAX, now, ctx.cfg.image_minimum_gc_age)
    } else {
        let fs = images
            .image_fs_info(cri_api::ImageFsInfoRequest {})
            .await?
            .into_inner();
        let Some(mount) = fs
            .image_filesystems
            .first()
            .and_then(|f| f.fs_id.as_ref())
            .map(|f| f.mountpoint.clone())
        else {
            return Ok(0);
        };
        let st = host::fs_stats(Path::new(&mount))?;
        if st.capacity == 0 {
            return Ok(0);
        }
        let used = st.capacity - st.available;
        let (high, low) = (ctx.cfg.image_gc_high, ctx.cfg.image_gc_low);
        if used * 100 < st.capacity * high as u64 {
            return Ok(0);
        }
        let need = used.saturating_sub(st.capacity * low as u64 / 100);
        let victims = choose(unused, need, now, ctx.cfg.image_minimum_gc_age);
        tracing::info!(
            "image filesystem {mount} is {}% full (threshold {high}%): removing {} unused images",
            used * 100 / st.capacity,
            victims.len()
        );
        victims
    };
    let mut removed = 0;
    for id in victims {
        let r = images
            .remove_image(cri_api::RemoveImageRequest {
                image: Some(cri_api::ImageSpec {
                    image: id.clone(),
                    ..Default::default()
                }),
            })
            .await;
        match r {
            Ok(_) => {
                last_used.remove(&id);
                removed += 1;
            }
            Err(e) => tracing::warn!(image = %id, "image gc: {}", e.message()),
        }
    }
    Ok(removed)
}

#[cfg(test)]
mod tests {
    use super::*;

    const AGE: Duration = Duration::from_secs(120);

    #[test]
    fn least_recently_used_first_until_enough() {
        let now = Instant::now() + Duration::from_secs(1000);
        let c = |id: &str, size, ago| Candidate {
            id: id.into(),
            size,
            last_used: now - Duration::from_secs(ago),
        };
        let unused = vec![c("new", 100, 10), c("old", 50, 900), c("mid", 70, 500)];
        assert_eq!(choose(unused.clone(), 60, now, AGE), ["old", "mid"]);
        assert_eq!(choose(unused.clone(), 10, now, AGE), ["old"]);
        // The one seen 10 s ago is too young to go, whatever is asked.
        assert_eq!(choose(unused, 10_000, now, AGE), ["old", "mid"]);
    }
}
