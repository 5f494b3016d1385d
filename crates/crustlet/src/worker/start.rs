//! Containers started: init containers in order, then the app containers (restarted
//! as the restart policy says, with back-off) and ephemeral ones; each made with its
//! mounts and then its postStart hook run.

use super::probe;
use super::{Backoff, Instance, Worker};
use crate::spec::{self, ContainerInputs, VolumePaths};
use cri_api as cri;
use k8s_openapi::api::core::v1::{Container, Pod, PodSpec};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// An init container that keeps running beside the app containers (a sidecar).
pub fn is_sidecar(c: &Container) -> bool {
    c.restart_policy.as_deref() == Some("Always")
}

/// Whether the pod's spec no longer describes the running instance: the image is the
/// one field of a container the apiserver lets change.
fn changed(c: &Container, i: &Instance) -> bool {
    i.status
        .annotations
        .get(spec::CONTAINER_HASH)
        .is_some_and(|h| *h != spec::container_hash(c))
}

/// The attempt after the newest `<attempt>.log` in the container's log folder: a
/// container made again in a new sandbox goes on counting its restarts, as with the
/// kubelet (which looks at the same files when the runtime has forgotten).
fn attempt_from_logs(dir: &std::path::Path) -> u32 {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return 0;
    };
    rd.flatten()
        .filter_map(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            let n = name.split_once(".log")?.0.to_string();
            n.parse::<u32>().ok()
        })
        .max()
        .map_or(0, |n| n + 1)
}

impl Worker {
    /// Init containers, in order: each must exit 0 before the next starts; a sidecar
    /// (`restartPolicy: Always`) must be started, and is restarted whenever it exits.
    /// Once an app container exists the pod was initialized: init containers are not
    /// run again, only sidecars kept up. Whether the pod is initialized.
    pub(super) async fn init_containers(
        &mut self,
        pod: &Pod,
        spec: &PodSpec,
        policy: &str,
        instances: &HashMap<String, Vec<Instance>>,
    ) -> bool {
        let was_initialized = spec
            .containers
            .iter()
            .any(|c| instances.contains_key(&c.name));
        let mut initialized = true;
        for c in spec.init_containers.iter().flatten() {
            let latest = instances.get(&c.name).and_then(|v| v.first()).cloned();
            if is_sidecar(c) {
                match latest {
                    Some(i) if i.running() => {
                        self.probe(pod, c, &i).await;
                        if self.started(c, &i) || was_initialized {
                            continue;
                        }
                    }
                    Some(i) if i.exited() => self.restart(pod, c, Some(&i)).await,
                    Some(i) if i.state == cri::ContainerState::ContainerCreated as i32 => {
                        self.start_created(&i).await
                    }
                    Some(_) => {}
                    None => self.start(pod, c, None).await,
                }
                if was_initialized {
                    continue;
                }
                initialized = false;
                break;
            }
            if was_initialized {
                continue;
            }
            match latest {
                Some(i) if i.exited() && i.status.exit_code == 0 => continue,
                Some(i)
                    if i.running() || i.state == cri::ContainerState::ContainerCreated as i32 =>
                {
                    initialized = false;
                    break;
                }
                Some(i) if i.exited() => {
                    initialized = false;
                    if policy == "Never" {
                        self.finished = Some("Failed".into());
                    } else {
                        self.restart(pod, c, Some(&i)).await;
                    }
                    break;
                }
                _ => {
                    initialized = false;
                    self.start(pod, c, None).await;
                    break;
                }
            }
        }
        initialized
    }

    /// The app containers of an initialized pod: started, probed, and restarted as the
    /// pod's restart policy says; then its ephemeral containers (kubectl debug), started
    /// once and never restarted.
    pub(super) async fn app_containers(
        &mut self,
        pod: &Pod,
        spec: &PodSpec,
        policy: &str,
        instances: &HashMap<String, Vec<Instance>>,
    ) {
        for c in &spec.containers {
            let latest = instances.get(&c.name).and_then(|v| v.first()).cloned();
            match latest {
                None => self.start(pod, c, None).await,
                Some(i) if i.running() && changed(c, &i) => {
                    // A new image (`kubectl set image`): the kubelet kills the
                    // container and starts it again at once, whatever the policy.
                    self.event(
                        pod,
                        false,
                        "Killing",
                        format!("Container {} definition changed, will be restarted", c.name),
                    );
                    self.stop(pod, c, &i, None).await;
                    self.restart_backoff.remove(&c.name);
                    self.start(pod, c, Some(&i)).await;
                }
                Some(i) if i.running() => self.probe(pod, c, &i).await,
                Some(i) if i.exited() => {
                    let restart = match policy {
                        "Never" => false,
                        "OnFailure" => i.status.exit_code != 0,
                        _ => true,
                    };
                    if restart {
                        self.restart(pod, c, Some(&i)).await;
                    }
                }
                Some(i) if i.state == cri::ContainerState::ContainerCreated as i32 => {
                    self.start_created(&i).await
                }
                Some(_) => {}
            }
        }
        for c in super::ephemeral::containers(pod) {
            if !instances.contains_key(&c.name) {
                self.start(pod, &c, None).await;
            }
        }
    }

    /// Restarts an exited container when its back-off allows.
    async fn restart(&mut self, pod: &Pod, c: &Container, prev: Option<&Instance>) {
        let b = self.restart_backoff.get(&c.name).cloned();
        match &b {
            // It ran for 10 minutes: the back-off starts over, as the kubelet's does.
            Some(_)
                if prev.is_some_and(|p| {
                    p.status.finished_at - p.status.started_at > 600_000_000_000
                }) =>
            {
                self.restart_backoff.remove(&c.name);
            }
            Some(b) if Instant::now() < b.until => {
                let msg = format!(
                    "back-off {}s restarting failed container={} pod={}_{}({})",
                    b.delay.as_secs(),
                    c.name,
                    spec::name(pod),
                    spec::namespace(pod),
                    spec::uid(pod)
                );
                if self.waiting.get(&c.name).map(|w| w.0.as_str()) != Some("CrashLoopBackOff") {
                    self.event(
                        pod,
                        true,
                        "BackOff",
                        format!(
                            "Back-off restarting failed container {} in pod {}",
                            c.name,
                            spec::key(pod)
                        ),
                    );
                }
                self.waiting
                    .insert(c.name.clone(), ("CrashLoopBackOff".into(), msg));
                return;
            }
            _ => {}
        }
        let next = Backoff::next(self.restart_backoff.get(&c.name));
        self.restart_backoff.insert(c.name.clone(), next);
        self.start(pod, c, prev).await;
    }

    /// Pulls the image as the policy says, then creates and starts the container.
    async fn start(&mut self, pod: &Pod, c: &Container, prev: Option<&Instance>) {
        let Some(sandbox) = self.sandbox.as_ref() else {
            return;
        };
        let (sandbox_id, sandbox_config, pod_ip) = (
            sandbox.id.clone(),
            sandbox.config.clone(),
            sandbox.ip.clone(),
        );
        let attempt = match prev.or_else(|| self.carried.get(&c.name)) {
            Some(p) => p.attempt + 1,
            None => match self.uncreated.get(&c.name) {
                Some(a) => *a,
                None => attempt_from_logs(&Path::new(&sandbox_config.log_directory).join(&c.name)),
            },
        };
        let image = match self.ensure_image(pod, c).await {
            Some(i) => i,
            None => return,
        };
        if let Err(msg) = self.verify_run_as_non_root(pod, c, &image).await {
            self.failed(pod, &c.name, "CreateContainerConfigError", msg);
            return;
        }
        let inputs = self.inputs(pod);
        let envs = match inputs.env(c, &pod_ip).await {
            Ok(e) => e,
            Err(e) => {
                self.failed(pod, &c.name, e.reason(), e.to_string());
                return;
            }
        };
        let Some(mounts) = self.mounts(pod, c, attempt, &envs) else {
            return;
        };
        let config = match spec::container_config(
            pod,
            c,
            ContainerInputs {
                attempt,
                envs,
                mounts,
                image: image.clone(),
                node_memory: self.ctx.node_memory,
            },
        ) {
            Ok(cfg) => cfg,
            Err(e) => {
                self.failed(pod, &c.name, "CreateContainerConfigError", e);
                return;
            }
        };
        let config =
            super::ephemeral::target(&self.ctx.cri, &sandbox_id, pod, &c.name, config).await;
        self.uncreated.insert(c.name.clone(), attempt);
        let Some(id) = self
            .create_and_start(pod, c, sandbox_id, sandbox_config, config)
            .await
        else {
            return;
        };
        self.waiting.remove(&c.name);
        if c.lifecycle.as_ref().is_some_and(|l| l.post_start.is_some()) {
            let had_slot = self.lend_start_slot();
            self.post_start(pod, c, &id, &pod_ip).await;
            self.take_start_slot(had_slot).await;
        }
    }

    /// The container's mounts: its volumes, the file for its termination message and
    /// the kubelet's /etc/hosts; none when they cannot be had (the reason is in its
    /// waiting state).
    fn mounts(
        &mut self,
        pod: &Pod,
        c: &Container,
        attempt: u32,
        envs: &[cri::KeyValue],
    ) -> Option<Vec<cri::Mount>> {
        let dirs = self
            .volumes
            .as_ref()
            .map(|(v, _)| v.dirs.clone())
            .unwrap_or_default();
        let read_only = spec::read_only_volumes(pod);
        let paths = VolumePaths {
            dirs: &dirs,
            read_only: &read_only,
        };
        let mut mounts = match paths.mounts(c, envs) {
            Ok(m) => m,
            Err(e) => {
                self.failed(pod, &c.name, "CreateContainerConfigError", e);
                return None;
            }
        };
        // The termination message file, written by the container, read at its exit.
        let term = self.termination_file(pod, &c.name, attempt);
        if let Some(dir) = term.parent() {
            let _ = std::fs::create_dir_all(dir);
        }
        let made = std::fs::write(&term, b"");
        if let Err(e) = &made {
            // The container still runs, but its termination message cannot be read.
            tracing::warn!(pod = %spec::key(pod), container = %c.name,
                "termination message file {}: {e}", term.display());
        }
        if made.is_ok() {
            // Writable by whatever user the container runs as: 0666 whatever the
            // umask, as the kubelet makes it (`makeMounts`).
            use std::os::unix::fs::PermissionsExt;
            let _ = std::fs::set_permissions(&term, std::fs::Permissions::from_mode(0o666));
            mounts.push(cri::Mount {
                container_path: c
                    .termination_message_path
                    .clone()
                    .unwrap_or_else(|| "/dev/termination-log".into()),
                host_path: term.to_string_lossy().into_owned(),
                ..Default::default()
            });
        }
        // The kubelet's /etc/hosts, unless the container mounts its own.
        let own_hosts = c
            .volume_mounts
            .iter()
            .flatten()
            .any(|m| m.mount_path == "/etc/hosts");
        if !own_hosts {
            match self.hosts_mount(pod) {
                Ok(m) => mounts.push(m),
                Err(msg) => {
                    self.failed(pod, &c.name, "CreateContainerConfigError", msg);
                    return None;
                }
            }
        }
        Some(mounts)
    }

    /// The pod's /etc/hosts, written afresh for each container started, as the
    /// kubelet's.
    fn hosts_mount(&self, pod: &Pod) -> Result<cri::Mount, String> {
        let ips = self
            .sandbox
            .as_ref()
            .map(|s| s.ips.clone())
            .unwrap_or_default();
        // The node's own file only matters to a pod on the node's network.
        let node_hosts = if spec::spec(pod).host_network == Some(true) {
            std::fs::read_to_string("/etc/hosts").unwrap_or_default()
        } else {
            String::new()
        };
        let file = self.ctx.cfg.pod_dir(spec::uid(pod)).join("etc-hosts");
        let text = spec::hosts_file(&self.ctx.cfg, pod, &ips, &node_hosts);
        match std::fs::write(&file, text) {
            Ok(()) => Ok(cri::Mount {
                container_path: "/etc/hosts".into(),
                host_path: file.to_string_lossy().into_owned(),
                ..Default::default()
            }),
            Err(e) => Err(format!("writing {}: {e}", file.display())),
        }
    }

    /// CreateContainer then StartContainer, each with the kubelet's event; the new
    /// container's id, or none when either failed (the reason is in its waiting
    /// state).
    async fn create_and_start(
        &mut self,
        pod: &Pod,
        c: &Container,
        sandbox_id: String,
        sandbox_config: cri::PodSandboxConfig,
        config: cri::ContainerConfig,
    ) -> Option<String> {
        let mut rt = self.cri().runtime;
        let created = rt
            .create_container(cri::CreateContainerRequest {
                pod_sandbox_id: sandbox_id,
                config: Some(config),
                sandbox_config: Some(sandbox_config),
            })
            .await;
        let id = match created {
            Ok(r) => {
                self.uncreated.remove(&c.name);
                r.into_inner().container_id
            }
            Err(e) => {
                let msg = e.message().to_string();
                self.failed(pod, &c.name, "CreateContainerError", msg);
                return None;
            }
        };
        self.event(
            pod,
            false,
            "Created",
            format!("Created container {}", c.name),
        );
        if let Err(e) = rt
            .start_container(cri::StartContainerRequest {
                container_id: id.clone(),
            })
            .await
        {
            let msg = e.message().to_string();
            self.failed(pod, &c.name, "RunContainerError", msg);
            return None;
        }
        self.event(
            pod,
            false,
            "Started",
            format!("Started container {}", c.name),
        );
        Some(id)
    }

    /// Runs the container's postStart hook, if it has one. A failed hook kills the
    /// container; the restart policy decides what comes next.
    async fn post_start(&self, pod: &Pod, c: &Container, id: &str, pod_ip: &str) {
        let Some(h) = c.lifecycle.as_ref().and_then(|l| l.post_start.as_ref()) else {
            return;
        };
        let grace = spec::spec(pod)
            .termination_grace_period_seconds
            .unwrap_or(30);
        let limit = Duration::from_secs(grace.max(2) as u64);
        if let Err(e) = probe::hook(&self.ctx.cri, h, c, id, pod_ip, limit).await {
            self.event(
                pod,
                true,
                "FailedPostStartHook",
                format!("PostStartHook failed: {e}"),
            );
            let _ = self
                .cri()
                .runtime
                .stop_container(cri::StopContainerRequest {
                    container_id: id.to_string(),
                    timeout: 0,
                })
                .await;
        }
    }

    /// A container made but never started (a crash between the two calls).
    async fn start_created(&self, i: &Instance) {
        let _ = self
            .cri()
            .runtime
            .start_container(cri::StartContainerRequest {
                container_id: i.id.clone(),
            })
            .await;
    }

    /// A container that could not be made or started: the kubelet's `Failed` event
    /// ("Error: ...") and the waiting reason its status shows until the next try.
    /// `runAsNonRoot`, which no runtime checks (the CRI has no such field): the
    /// kubelet's verifyRunAsNonRoot before each create, with the image's user from
    /// ImageStatus when the pod names none.
    async fn verify_run_as_non_root(
        &self,
        pod: &Pod,
        c: &Container,
        image: &str,
    ) -> Result<(), String> {
        let (non_root, run_as_user) = effective_non_root(pod, c);
        if !non_root || run_as_user.is_some() {
            return run_as_non_root(pod, c, None);
        }
        let status = self
            .image_status(image)
            .await
            .map_err(|e| format!("ImageStatus failed: {}", e.message()))?;
        let user = status.map(|i| (i.uid.map(|u| u.value), i.username));
        run_as_non_root(pod, c, Some(user.unwrap_or_default()))
    }

    fn failed(&mut self, pod: &Pod, name: &str, reason: &str, msg: String) {
        self.event(pod, true, "Failed", format!("Error: {msg}"));
        self.waiting
            .insert(name.to_string(), (reason.to_string(), msg));
    }

    pub(super) fn termination_file(&self, pod: &Pod, name: &str, attempt: u32) -> PathBuf {
        self.ctx
            .cfg
            .pod_dir(spec::uid(pod))
            .join("containers")
            .join(name)
            .join(format!("{attempt}-termination-log"))
    }
}

/// The container's `runAsNonRoot` and `runAsUser`, each its own or else the pod's.
fn effective_non_root(pod: &Pod, c: &Container) -> (bool, Option<i64>) {
    let csc = c.security_context.as_ref();
    let psc = spec::spec(pod).security_context.as_ref();
    let non_root = csc
        .and_then(|s| s.run_as_non_root)
        .or_else(|| psc.and_then(|s| s.run_as_non_root))
        .unwrap_or(false);
    let user = csc
        .and_then(|s| s.run_as_user)
        .or_else(|| psc.and_then(|s| s.run_as_user));
    (non_root, user)
}

/// The kubelet's verifyRunAsNonRoot, in its words: with `runAsNonRoot`, a `runAsUser`
/// of 0 is refused; without a `runAsUser`, the image's user (`image_user`: ImageStatus's
/// uid and username) must be a numeric uid other than 0 (an image naming no user runs
/// as root).
fn run_as_non_root(
    pod: &Pod,
    c: &Container,
    image_user: Option<(Option<i64>, String)>,
) -> Result<(), String> {
    let (non_root, run_as_user) = effective_non_root(pod, c);
    if !non_root {
        return Ok(());
    }
    let who = format!(
        "(pod: \"{}_{}({})\", container: {})",
        spec::name(pod),
        spec::namespace(pod),
        spec::uid(pod),
        c.name
    );
    if let Some(u) = run_as_user {
        return match u {
            0 => Err(format!(
                "container's runAsUser breaks non-root policy {who}"
            )),
            _ => Ok(()),
        };
    }
    match image_user.unwrap_or_default() {
        (Some(0), _) => Err(format!(
            "container has runAsNonRoot and image will run as root {who}"
        )),
        (None, name) if !name.is_empty() => Err(format!(
            "container has runAsNonRoot and image has non-numeric user ({name}), cannot verify user is non-root {who}"
        )),
        (None, _) => Err(format!(
            "container has runAsNonRoot and image will run as root {who}"
        )),
        (Some(_), _) => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod(pod_sc: serde_json::Value, container_sc: serde_json::Value) -> (Pod, Container) {
        let p: Pod = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "p", "namespace": "ns", "uid": "u1"},
            "spec": {"securityContext": pod_sc, "containers": [
                {"name": "c", "image": "i", "securityContext": container_sc}]},
        }))
        .unwrap();
        let c = p.spec.as_ref().unwrap().containers[0].clone();
        (p, c)
    }

    /// The kubelet's verifyRunAsNonRoot: upstream's runAsNonRoot specs wait for its
    /// `Failed` event instead of a started container.
    #[test]
    fn run_as_non_root_as_the_kubelet() {
        let who = "(pod: \"p_ns(u1)\", container: c)";
        let check = |pod_sc, c_sc, image_user: Option<(Option<i64>, &str)>| {
            let (p, c) = pod(pod_sc, c_sc);
            let image_user = image_user.map(|(u, n)| (u, n.to_string()));
            run_as_non_root(&p, &c, image_user)
        };
        // Not asked: anything goes.
        assert_eq!(check(json!({}), json!({"runAsUser": 0}), None), Ok(()));
        // An explicit root uid, the container's or the pod's.
        let breaks = Err(format!(
            "container's runAsUser breaks non-root policy {who}"
        ));
        assert_eq!(
            check(
                json!({}),
                json!({"runAsNonRoot": true, "runAsUser": 0}),
                None
            ),
            breaks
        );
        assert_eq!(
            check(json!({"runAsUser": 0}), json!({"runAsNonRoot": true}), None),
            breaks
        );
        assert_eq!(
            check(
                json!({"runAsNonRoot": true}),
                json!({"runAsUser": 1000}),
                None
            ),
            Ok(())
        );
        // The container's false wins over the pod's true.
        assert_eq!(
            check(
                json!({"runAsNonRoot": true}),
                json!({"runAsNonRoot": false, "runAsUser": 0}),
                None
            ),
            Ok(())
        );
        // The image's user decides when no uid is given.
        let root = Err(format!(
            "container has runAsNonRoot and image will run as root {who}"
        ));
        let asked = json!({"runAsNonRoot": true});
        assert_eq!(check(json!({}), asked.clone(), Some((None, ""))), root);
        assert_eq!(check(json!({}), asked.clone(), Some((Some(0), ""))), root);
        assert_eq!(
            check(json!({}), asked.clone(), Some((Some(1234), ""))),
            Ok(())
        );
        assert_eq!(
            check(json!({}), asked, Some((None, "nobody"))),
            Err(format!(
                "container has runAsNonRoot and image has non-numeric user (nobody), cannot verify user is non-root {who}"
            ))
        );
    }
}
