//! The image a container is made from: pulled as its pull policy says, with the
//! kubelet's back-off and events.

use super::{Backoff, Worker};
use cri_api as cri;
use k8s_openapi::api::core::v1::{Container, Pod};
use std::time::Instant;

impl Worker {
    /// The runtime's ImageStatus of `image` (None: it does not have it).
    pub(super) async fn image_status(
        &self,
        image: &str,
    ) -> Result<Option<cri::Image>, tonic::Status> {
        let r = self
            .cri()
            .images
            .image_status(cri::ImageStatusRequest {
                image: Some(cri::ImageSpec {
                    image: image.to_string(),
                    ..Default::default()
                }),
                verbose: false,
            })
            .await?;
        Ok(r.into_inner().image)
    }

    /// The image reference to create the container from, after a pull if the policy
    /// asks; None while it cannot be had (ErrImagePull, then ImagePullBackOff).
    pub(super) async fn ensure_image(&mut self, pod: &Pod, c: &Container) -> Option<String> {
        let image = c.image.clone().unwrap_or_default();
        if image.is_empty() {
            self.waiting.insert(
                c.name.clone(),
                ("InvalidImageName".into(), "container has no image".into()),
            );
            return None;
        }
        let tag_latest = {
            let last = image.rsplit('/').next().unwrap_or(&image);
            !last.contains(':') && !image.contains('@') || last.ends_with(":latest")
        };
        let policy = c.image_pull_policy.clone().unwrap_or_else(|| {
            if tag_latest {
                "Always".into()
            } else {
                "IfNotPresent".into()
            }
        });
        let mut images = self.cri().images;
        let present = self.image_status(&image).await.ok().flatten().is_some();
        if present && policy != "Always" {
            // The kubelet says so every time it creates a container from it.
            self.event(
                pod,
                false,
                "Pulled",
                format!("Container image {image:?} already present on machine"),
            );
            return Some(image);
        }
        if policy == "Never" {
            let msg = format!("Container image {image:?} is not present with pull policy of Never");
            self.waiting
                .insert(c.name.clone(), ("ErrImageNeverPull".into(), msg.clone()));
            self.event(pod, true, "ErrImageNeverPull", msg);
            return None;
        }
        if let Some(b) = self.pull_backoff.get(&c.name) {
            if Instant::now() < b.until {
                let msg = format!("Back-off pulling image {image:?}");
                if self.waiting.get(&c.name).map(|w| w.0.as_str()) != Some("ImagePullBackOff") {
                    self.event(pod, false, "BackOff", msg.clone());
                }
                self.waiting
                    .insert(c.name.clone(), ("ImagePullBackOff".into(), msg));
                return None;
            }
        }
        let auth = self.inputs(pod).pull_auth(&image).await.ok().flatten();
        self.event(pod, false, "Pulling", format!("Pulling image {image:?}"));
        let started = Instant::now();
        let had_slot = self.lend_start_slot();
        let r = images
            .pull_image(cri::PullImageRequest {
                image: Some(cri::ImageSpec {
                    image: image.clone(),
                    ..Default::default()
                }),
                auth,
                sandbox_config: self.sandbox.as_ref().map(|s| s.config.clone()),
            })
            .await;
        self.take_start_slot(had_slot).await;
        match r {
            Ok(_) => {
                self.pull_backoff.remove(&c.name);
                self.event(
                    pod,
                    false,
                    "Pulled",
                    format!(
                        "Successfully pulled image {image:?} in {:.3}s",
                        started.elapsed().as_secs_f64()
                    ),
                );
                Some(image)
            }
            Err(e) => {
                let msg = format!("Failed to pull image {image:?}: {}", e.message());
                self.event(pod, true, "Failed", msg.clone());
                self.pull_backoff.insert(
                    c.name.clone(),
                    Backoff::next(self.pull_backoff.get(&c.name)),
                );
                self.waiting
                    .insert(c.name.clone(), ("ErrImagePull".into(), msg));
                None
            }
        }
    }
}
