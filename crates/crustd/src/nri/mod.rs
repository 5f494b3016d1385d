//! NRI, the Node Resource Interface (github.com/containerd/nri, protocol as NRI v0.12
//! speaks it, which containerd 1.7/2.x and CRI-O run): external plugins connect to
//! crustd's socket (`/var/run/nri/nri.sock`), or crustd starts the pre-installed ones of
//! its plugin folder, and each is told of the pods' and containers' lifecycle, in the
//! order of its index, and may adjust a container as it is created.
//!
//! Off unless the configuration's `[nri] enable` (or `crustd --nri`) turns it on, as in
//! containerd.
//!
//! ```text
//!  plugin connects ──RegisterPlugin(name, idx)──▶ crustd          (within registration_timeout)
//!          ◀──Configure(config, runtime, timeouts)── events it wants
//!          ◀──Synchronize(every pod and container)──
//!          ◀──RunPodSandbox, CreateContainer (adjustments), StartContainer, ...──
//! ```
//!
//! Events go through one queue ([`Nri::emit`]), one at a time, to each subscribed
//! plugin in index order (compared as strings, as NRI does). What a plugin sees is
//! consistent: a new plugin's Synchronize is a queue item too, and lists the pods and
//! containers as the events before it left them (this module keeps that picture from
//! the events themselves, seeded at start from crustd's stores), so a container made
//! while a plugin joins is either in its Synchronize or comes to it as CreateContainer,
//! never neither nor both. Each pod and container gets StopPodSandbox/StopContainer
//! and RemovePodSandbox/RemoveContainer exactly once, and a Stop before its Remove
//! (a container that exits on its own is reported when crustd learns of its exit).
//!
//! A plugin that does not answer within `request_timeout`, or whose connection is
//! gone, is closed and the operation goes on without it (NRI's rule); any other error
//! it answers fails the operation that asked (RunPodSandbox, CreateContainer,
//! StartContainer, UpdateContainerResources), which is rolled back. Notifications
//! (Post*, Stop*, Remove*) are not waited for by the CRI call.
//!
//! Adjustments applied at CreateContainer (merged over the plugins in order, each
//! seeing the container as the ones before left it; two plugins setting the same key
//! fail the create, as NRI's ownership rules say): annotations, environment, mounts,
//! args, devices, rlimits, `oom_score_adj`, and the CPU, memory, pids and unified
//! cgroup resources, and OCI hooks (appended, plugin after plugin). CDI devices, the
//! cgroups path and the newer Linux fields are refused by name.

mod config;
pub mod convert;
pub use config::NriConfig;
pub use nri::{api, wire};

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use tokio::sync::{mpsc, oneshot};

use api::*;
use wire::{CallError, Conn};

/// How long a new plugin's Synchronize may take: longer than a request, since it
/// carries every pod and container and a plugin may set itself up in it.
const SYNC_TIMEOUT: Duration = Duration::from_secs(30);

/// A registered plugin.
struct Plugin {
    name: String,
    idx: String,
    events: i32,
    conn: Arc<Conn>,
    /// The pre-installed plugin's process, killed when it is closed.
    child: Mutex<Option<tokio::process::Child>>,
}

impl Plugin {
    fn id(&self) -> String {
        format!("{}-{}", self.idx, self.name)
    }

    async fn close(&self, why: &str) {
        tracing::warn!(plugin = %self.id(), reason = why, "closing NRI plugin");
        self.conn.close().await;
        if let Some(mut c) = self.child.lock().take() {
            let _ = c.start_kill();
        }
    }
}

/// What an event's plugins decided.
#[derive(Debug, Default)]
pub struct Outcome {
    /// CreateContainer: the adjustments of every plugin, merged.
    pub adjust: Option<ContainerAdjustment>,
}

struct EventJob {
    ev: Event,
    pod: PodSandbox,
    container: Option<Container>,
    resources: Option<LinuxResources>,
    reply: Option<oneshot::Sender<Result<Outcome, String>>>,
}

enum Job {
    Event(Box<EventJob>),
    Join {
        plugin: Arc<Plugin>,
        done: oneshot::Sender<()>,
    },
}

/// What the plugins have been told exists.
#[derive(Default)]
struct Known {
    pods: HashMap<String, PodSandbox>,
    containers: HashMap<String, Container>,
}

/// crustd's side of NRI.
pub struct Nri {
    cfg: NriConfig,
    runtime_version: String,
    queue: mpsc::UnboundedSender<Job>,
    /// Ids whose Stop event was queued (so it goes once), and whose Remove was.
    stopped: Mutex<HashSet<String>>,
    /// Containers whose CreateContainer was queued: a create rolled back after it owes
    /// the plugins its Stop and Remove.
    created: Mutex<HashSet<String>>,
    /// Plugins applying resource updates they ask for (UpdateContainers) go through
    /// this: crustd's own update of a container's resources.
    updater: Mutex<Option<Updater>>,
}

/// Applies a plugin's unsolicited update of a container's resources.
pub type Updater = Arc<
    dyn Fn(String, LinuxResources) -> futures_lite::BoxFuture<Result<(), String>> + Send + Sync,
>;

mod futures_lite {
    pub type BoxFuture<T> = std::pin::Pin<Box<dyn std::future::Future<Output = T> + Send>>;
}

impl Nri {
    /// Starts NRI: the event queue, the socket (unless `disable_connections`), the
    /// pre-installed plugins. `pods` and `containers` are what exists now.
    pub fn start(
        cfg: NriConfig,
        pods: Vec<PodSandbox>,
        containers: Vec<Container>,
    ) -> anyhow::Result<Arc<Nri>> {
        let (tx, rx) = mpsc::unbounded_channel();
        let nri = Arc::new(Nri {
            cfg: cfg.clone(),
            runtime_version: env!("CARGO_PKG_VERSION").to_string(),
            queue: tx,
            stopped: Default::default(),
            created: Default::default(),
            updater: Default::default(),
        });
        let known = Known {
            pods: pods.into_iter().map(|p| (p.id.clone(), p)).collect(),
            containers: containers.into_iter().map(|c| (c.id.clone(), c)).collect(),
        };
        {
            let mut stopped = nri.stopped.lock();
            for c in known.containers.values() {
                if c.state == state::STOPPED {
                    stopped.insert(format!("c/{}", c.id));
                }
            }
        }
        tokio::spawn(worker(nri.cfg.clone(), rx, known));
        if !cfg.disable_connections {
            let path = &cfg.socket_path;
            if let Some(dir) = path.parent() {
                std::fs::create_dir_all(dir)
                    .map_err(|e| anyhow::anyhow!("NRI: creating {}: {e}", dir.display()))?;
            }
            let _ = std::fs::remove_file(path);
            let listener = tokio::net::UnixListener::bind(path)
                .map_err(|e| anyhow::anyhow!("NRI: listening on {}: {e}", path.display()))?;
            use std::os::unix::fs::PermissionsExt;
            let _ = std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600));
            tracing::info!(socket = %path.display(), "NRI: plugins may connect");
            let n = nri.clone();
            tokio::spawn(async move {
                loop {
                    match listener.accept().await {
                        Ok((s, _)) => {
                            let n = n.clone();
                            tokio::spawn(async move { n.serve(s, None, None).await });
                        }
                        Err(e) => {
                            tracing::warn!(error = %e, "NRI: accepting a plugin");
                            tokio::time::sleep(Duration::from_millis(100)).await;
                        }
                    }
                }
            });
        }
        nri.clone().launch_preinstalled();
        Ok(nri)
    }

    /// Sets how a plugin's UpdateContainers is applied.
    pub fn set_updater(&self, u: Updater) {
        *self.updater.lock() = Some(u);
    }

    fn request_timeout(&self) -> Duration {
        Duration::from_millis(self.cfg.plugin_request_timeout_ms.max(1))
    }

    /// Queues `ev`; with `wait`, returns what the plugins decided (an error one of
    /// them answered fails the caller's operation).
    pub async fn emit(
        &self,
        ev: Event,
        pod: PodSandbox,
        container: Option<Container>,
        resources: Option<LinuxResources>,
    ) -> Result<Outcome, String> {
        let (tx, rx) = oneshot::channel();
        if !self.first_time(ev, &pod, container.as_ref()) {
            return Ok(Outcome::default());
        }
        if let (Event::CreateContainer, Some(c)) = (ev, &container) {
            self.created.lock().insert(c.id.clone());
        }
        let _ = self.queue.send(Job::Event(Box::new(EventJob {
            ev,
            pod,
            container,
            resources,
            reply: Some(tx),
        })));
        rx.await.unwrap_or_else(|_| Ok(Outcome::default()))
    }

    /// Queues `ev` without waiting (a notification).
    pub fn notify(&self, ev: Event, pod: PodSandbox, container: Option<Container>) {
        if !self.first_time(ev, &pod, container.as_ref()) {
            return;
        }
        let _ = self.queue.send(Job::Event(Box::new(EventJob {
            ev,
            pod,
            container,
            resources: None,
            reply: None,
        })));
    }

    /// Stop and Remove events go once per pod and container, a Stop before its
    /// Remove: false for a repeat; a Remove without its Stop queues the Stop first.
    fn first_time(&self, ev: Event, pod: &PodSandbox, c: Option<&Container>) -> bool {
        let key = match (ev, c) {
            (Event::StopContainer | Event::RemoveContainer, Some(c)) => format!("c/{}", c.id),
            (Event::StopPodSandbox | Event::RemovePodSandbox, _) => format!("p/{}", pod.id),
            _ => return true,
        };
        let mut stopped = self.stopped.lock();
        match ev {
            Event::StopContainer | Event::StopPodSandbox => stopped.insert(key),
            _ => {
                let removed = format!("{key}/removed");
                if stopped.contains(&removed) {
                    return false;
                }
                if stopped.insert(key) {
                    // Its Stop first.
                    let stop = if c.is_some() {
                        Event::StopContainer
                    } else {
                        Event::StopPodSandbox
                    };
                    let _ = self.queue.send(Job::Event(Box::new(EventJob {
                        ev: stop,
                        pod: pod.clone(),
                        container: c.cloned(),
                        resources: None,
                        reply: None,
                    })));
                }
                stopped.insert(removed);
                true
            }
        }
    }

    /// One plugin's connection, external (`child` None) or pre-installed (its
    /// process, and the name and index its file gives).
    async fn serve<S>(
        self: Arc<Self>,
        stream: S,
        child: Option<tokio::process::Child>,
        named: Option<(String, String, String)>,
    ) where
        S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Send + 'static,
    {
        let (conn, mut incoming) = Conn::start(stream);
        let reg_timeout = Duration::from_millis(self.cfg.plugin_registration_timeout_ms.max(1));
        // RegisterPlugin first, within the registration timeout.
        let registered = tokio::time::timeout(reg_timeout, async {
            while let Some(inc) = incoming.recv().await {
                if inc.request.method == "RegisterPlugin" && inc.request.service == RUNTIME_SERVICE
                {
                    let req = match <RegisterPluginRequest as prost::Message>::decode(
                        inc.request.payload.as_slice(),
                    ) {
                        Ok(r) => r,
                        Err(e) => {
                            let _ = inc.reply.send(wire::status(
                                wire::code::INVALID_ARGUMENT,
                                &format!("RegisterPlugin: {e}"),
                            ));
                            continue;
                        }
                    };
                    if let Err(why) = valid_plugin(&req.plugin_name, &req.plugin_idx) {
                        let _ = inc
                            .reply
                            .send(wire::status(wire::code::INVALID_ARGUMENT, &why));
                        return None;
                    }
                    let _ = inc.reply.send(wire::ok(&Empty {}));
                    return Some(req);
                }
                let _ = inc.reply.send(wire::status(
                    wire::code::UNIMPLEMENTED,
                    "register the plugin first",
                ));
            }
            None
        })
        .await;
        let Ok(Some(req)) = registered else {
            tracing::warn!("NRI: a plugin did not register in time; closed");
            conn.close().await;
            return;
        };
        let (name, idx, config) = match named {
            Some(n) => n,
            None => (
                req.plugin_name.clone(),
                req.plugin_idx.clone(),
                String::new(),
            ),
        };
        let configure = ConfigureRequest {
            config,
            runtime_name: "crust".into(),
            runtime_version: self.runtime_version.clone(),
            registration_timeout: self.cfg.plugin_registration_timeout_ms as i64,
            request_timeout: self.cfg.plugin_request_timeout_ms as i64,
            nri_version: "v0.12.1".into(),
        };
        let events = match conn
            .call::<_, ConfigureResponse>(
                PLUGIN_SERVICE,
                "Configure",
                &configure,
                self.request_timeout(),
            )
            .await
        {
            Ok(r) if r.events == 0 => VALID_EVENTS,
            Ok(r) if r.events & !VALID_EVENTS != 0 => {
                tracing::warn!(plugin = %format!("{idx}-{name}"), events = r.events, "NRI: invalid plugin events; closed");
                conn.close().await;
                return;
            }
            Ok(r) => r.events,
            Err(e) => {
                tracing::warn!(plugin = %format!("{idx}-{name}"), error = %e, "NRI: configuring the plugin failed; closed");
                conn.close().await;
                return;
            }
        };
        let plugin = Arc::new(Plugin {
            name,
            idx,
            events,
            conn: conn.clone(),
            child: Mutex::new(child),
        });
        tracing::info!(plugin = %plugin.id(), events = format!("{events:#x}"), "NRI plugin registered");
        // Synchronize and joining the list: a queue item, so it is in order with the
        // events.
        let (done, joined) = oneshot::channel();
        let _ = self.queue.send(Job::Join {
            plugin: plugin.clone(),
            done,
        });
        let _ = joined.await;
        // The runtime's service for the rest of the connection.
        while let Some(inc) = incoming.recv().await {
            let resp = self.runtime_call(&inc.request).await;
            let _ = inc.reply.send(resp);
        }
    }

    /// A call of the plugin's on the runtime's service after registration.
    async fn runtime_call(&self, req: &TtrpcRequest) -> TtrpcResponse {
        if req.service != RUNTIME_SERVICE {
            return wire::status(
                wire::code::UNIMPLEMENTED,
                &format!("service {}", req.service),
            );
        }
        match req.method.as_str() {
            "RegisterPlugin" => {
                wire::status(wire::code::INVALID_ARGUMENT, "plugin already registered")
            }
            "UpdateContainers" => {
                let Ok(r) =
                    <UpdateContainersRequest as prost::Message>::decode(req.payload.as_slice())
                else {
                    return wire::status(
                        wire::code::INVALID_ARGUMENT,
                        "UpdateContainers: bad request",
                    );
                };
                let updater = self.updater.lock().clone();
                let mut failed = vec![];
                for u in r.update {
                    let res = match (&updater, u.linux.as_ref().and_then(|l| l.resources.clone())) {
                        (Some(f), Some(res)) => f(u.container_id.clone(), res).await,
                        (None, _) => Err("no updater".into()),
                        (_, None) => Ok(()),
                    };
                    if let Err(e) = res {
                        tracing::warn!(container = %u.container_id, error = %e, "NRI: a plugin's update failed");
                        failed.push(u);
                    }
                }
                wire::ok(&UpdateContainersResponse { failed })
            }
            m => wire::status(wire::code::UNIMPLEMENTED, &format!("method {m}")),
        }
    }

    /// Starts the executables `NN-name` of the plugin folder, each on one end of a
    /// socket pair (fd 3 of the plugin, named by `NRI_PLUGIN_SOCKET`), with its
    /// configuration file's text.
    fn launch_preinstalled(self: Arc<Self>) {
        let dir = &self.cfg.plugin_path;
        let Ok(entries) = std::fs::read_dir(dir) else {
            return;
        };
        let mut found = vec![];
        for e in entries.flatten() {
            let path = e.path();
            let Ok(meta) = std::fs::metadata(&path) else {
                continue;
            };
            use std::os::unix::fs::PermissionsExt;
            if !meta.is_file() || meta.permissions().mode() & 0o111 == 0 {
                continue;
            }
            let file = e.file_name().to_string_lossy().to_string();
            match file.split_once('-') {
                Some((idx, name))
                    if idx.len() == 2
                        && idx.bytes().all(|b| b.is_ascii_digit())
                        && !name.is_empty() =>
                {
                    found.push((idx.to_string(), name.to_string(), path))
                }
                _ => {
                    tracing::warn!(file = %path.display(), "NRI: a plugin's file must be named NN-name; not started")
                }
            }
        }
        found.sort();
        for (idx, name, path) in found {
            let conf_dir = &self.cfg.plugin_config_path;
            let config = [format!("{idx}-{name}.conf"), format!("{name}.conf")]
                .iter()
                .find_map(|f| std::fs::read_to_string(conf_dir.join(f)).ok())
                .unwrap_or_default();
            match spawn_plugin(&path, &idx, &name) {
                Ok((child, stream)) => {
                    let n = self.clone();
                    tokio::spawn(async move {
                        n.serve(stream, Some(child), Some((name, idx, config)))
                            .await
                    });
                }
                Err(e) => {
                    tracing::warn!(plugin = %path.display(), error = %e, "NRI: starting a plugin")
                }
            }
        }
    }
}

/// A plugin's name and index as NRI v0.12 accepts them.
fn valid_plugin(name: &str, idx: &str) -> Result<(), String> {
    if idx.len() != 2 || !idx.bytes().all(|b| b.is_ascii_digit()) {
        return Err(format!("invalid plugin index {idx:?}, must be 2 digits"));
    }
    if name.is_empty() {
        return Err("invalid plugin name \"\"".into());
    }
    if let Some(c) = name
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || "_.+-".contains(*c)))
    {
        return Err(format!(
            "invalid plugin name {name:?}: contains invalid character {c:?}"
        ));
    }
    Ok(())
}

/// Starts a pre-installed plugin: its end of a socket pair as fd 3, and only NRI's
/// three variables in its environment.
fn spawn_plugin(
    path: &std::path::Path,
    idx: &str,
    name: &str,
) -> std::io::Result<(tokio::process::Child, tokio::net::UnixStream)> {
    let (ours, theirs) = std::os::unix::net::UnixStream::pair()?;
    use std::os::fd::IntoRawFd;
    let fd = theirs.into_raw_fd();
    let mut cmd = tokio::process::Command::new(path);
    cmd.env_clear()
        .env("NRI_PLUGIN_NAME", name)
        .env("NRI_PLUGIN_IDX", idx)
        .env("NRI_PLUGIN_SOCKET", "3")
        .stdin(std::process::Stdio::null())
        .kill_on_drop(true);
    // SAFETY: between fork and exec only dup2 (async-signal-safe) on fds we own.
    unsafe {
        cmd.pre_exec(move || {
            if libc::dup2(fd, 3) < 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let child = cmd.spawn();
    // SAFETY: our copy of the plugin's end, not used again.
    unsafe { libc::close(fd) };
    let child = child?;
    ours.set_nonblocking(true)?;
    Ok((child, tokio::net::UnixStream::from_std(ours)?))
}

/// The queue's consumer: one event (or one new plugin's Synchronize) at a time.
async fn worker(cfg: NriConfig, mut rx: mpsc::UnboundedReceiver<Job>, mut known: Known) {
    let timeout = Duration::from_millis(cfg.plugin_request_timeout_ms.max(1));
    let mut plugins: Vec<Arc<Plugin>> = vec![];
    while let Some(job) = rx.recv().await {
        plugins.retain(|p| !p.conn.is_closed());
        match job {
            Job::Join { plugin, done } => {
                let req = SynchronizeRequest {
                    pods: known.pods.values().cloned().collect(),
                    containers: known.containers.values().cloned().collect(),
                    more: false,
                };
                match plugin
                    .conn
                    .call::<_, SynchronizeResponse>(
                        PLUGIN_SERVICE,
                        "Synchronize",
                        &req,
                        SYNC_TIMEOUT,
                    )
                    .await
                {
                    Ok(_) => {
                        plugins.push(plugin);
                        // Index order, as strings; a stable sort keeps joins' order for ties.
                        plugins.sort_by(|a, b| a.idx.cmp(&b.idx));
                    }
                    Err(e) => plugin.close(&format!("Synchronize: {e}")).await,
                }
                let _ = done.send(());
            }
            Job::Event(job) => {
                let EventJob {
                    ev,
                    mut pod,
                    container,
                    resources,
                    reply,
                } = *job;
                // A pod named by its id alone (a container's exit, seen without the
                // pod's lock): as the plugins were told of it.
                if pod.name.is_empty() {
                    if let Some(p) = known.pods.get(&pod.id) {
                        pod = p.clone();
                    }
                }
                let r = dispatch(&plugins, timeout, ev, &pod, container.clone(), resources).await;
                if r.is_ok() {
                    learn(&mut known, ev, &pod, container.as_ref());
                }
                if let Some(tx) = reply {
                    let _ = tx.send(r);
                }
            }
        }
    }
}

/// Keeps the picture a new plugin's Synchronize gets up to date with an event.
fn learn(known: &mut Known, ev: Event, pod: &PodSandbox, c: Option<&Container>) {
    match (ev, c) {
        (Event::RunPodSandbox, _) => {
            known.pods.insert(pod.id.clone(), pod.clone());
        }
        (Event::RemovePodSandbox, _) => {
            known.pods.remove(&pod.id);
        }
        (Event::RemoveContainer, Some(c)) => {
            known.containers.remove(&c.id);
        }
        (
            Event::CreateContainer
            | Event::StartContainer
            | Event::PostStartContainer
            | Event::StopContainer,
            Some(c),
        ) => {
            let mut c = c.clone();
            c.state = match ev {
                Event::CreateContainer => state::CREATED,
                Event::StopContainer => state::STOPPED,
                _ => state::RUNNING,
            };
            known.containers.insert(c.id.clone(), c);
        }
        _ => {}
    }
}

/// One event through the subscribed plugins, in order.
async fn dispatch(
    plugins: &[Arc<Plugin>],
    timeout: Duration,
    ev: Event,
    pod: &PodSandbox,
    mut container: Option<Container>,
    resources: Option<LinuxResources>,
) -> Result<Outcome, String> {
    let mut merged = Merge::default();
    for p in plugins.iter().filter(|p| p.events & ev.bit() != 0) {
        if p.conn.is_closed() {
            continue;
        }
        let r: Result<(), CallError> = match ev {
            Event::CreateContainer => {
                let req = ContainerRequest {
                    pod: Some(pod.clone()),
                    container: container.clone(),
                };
                match p
                    .conn
                    .call::<_, CreateContainerResponse>(PLUGIN_SERVICE, ev.method(), &req, timeout)
                    .await
                {
                    Ok(resp) => match resp.adjust {
                        Some(a) => merged.add(&p.id(), &a).map(|()| {
                            if let Some(c) = container.as_mut() {
                                apply_to_container(c, &a);
                            }
                        }),
                        None => Ok(()),
                    },
                    Err(e) => Err(e),
                }
            }
            Event::UpdateContainer => {
                let req = UpdateContainerRequest {
                    pod: Some(pod.clone()),
                    container: container.clone(),
                    linux_resources: resources.clone(),
                };
                p.conn
                    .call::<_, UpdateContainerResponse>(PLUGIN_SERVICE, ev.method(), &req, timeout)
                    .await
                    .map(|_| ())
            }
            Event::StopContainer => {
                let req = ContainerRequest {
                    pod: Some(pod.clone()),
                    container: container.clone(),
                };
                p.conn
                    .call::<_, StopContainerResponse>(PLUGIN_SERVICE, ev.method(), &req, timeout)
                    .await
                    .map(|_| ())
            }
            _ => {
                let r = if container.is_some() {
                    let req = ContainerRequest {
                        pod: Some(pod.clone()),
                        container: container.clone(),
                    };
                    p.conn
                        .call::<_, Empty>(PLUGIN_SERVICE, ev.method(), &req, timeout)
                        .await
                } else {
                    let req = PodRequest {
                        pod: Some(pod.clone()),
                    };
                    p.conn
                        .call::<_, Empty>(PLUGIN_SERVICE, ev.method(), &req, timeout)
                        .await
                };
                match r {
                    // A plugin of NRI before v0.12: the same as a StateChange.
                    Err(CallError::Status(wire::code::UNIMPLEMENTED, _)) => {
                        let req = StateChangeEvent {
                            event: ev as i32,
                            pod: Some(pod.clone()),
                            container: container.clone(),
                        };
                        p.conn
                            .call::<_, Empty>(PLUGIN_SERVICE, "StateChange", &req, timeout)
                            .await
                            .map(|_| ())
                    }
                    r => r.map(|_| ()),
                }
            }
        };
        match r {
            Ok(()) => {}
            Err(e) if e.fatal() => p.close(&format!("{}: {e}", ev.method())).await,
            Err(e) => return Err(format!("NRI plugin {} failed {}: {e}", p.id(), ev.method())),
        }
    }
    Ok(Outcome {
        adjust: merged.result(),
    })
}

/// The adjustments of the plugins of one CreateContainer, merged, with who set what.
#[derive(Default)]
struct Merge {
    adjust: Option<ContainerAdjustment>,
    owners: HashMap<String, String>,
}

impl Merge {
    fn claim(&mut self, plugin: &str, what: String) -> Result<(), String> {
        match self.owners.get(&what) {
            Some(other) if other != plugin => Err(format!(
                "plugins {plugin:?} and {other:?} both tried to set {what}"
            )),
            _ => {
                self.owners.insert(what, plugin.to_string());
                Ok(())
            }
        }
    }

    fn add(&mut self, plugin: &str, a: &ContainerAdjustment) -> Result<(), CallError> {
        refuse_unsupported(a).map_err(|m| {
            CallError::Status(
                wire::code::INVALID_ARGUMENT,
                format!("plugin {plugin}: {m}"),
            )
        })?;
        let into_err = |m: String| CallError::Status(wire::code::INVALID_ARGUMENT, m);
        let mut claims = vec![];
        claims.extend(
            a.annotations
                .keys()
                .map(|k| format!("Annotations {}", k.trim_start_matches('-'))),
        );
        claims.extend(
            a.env
                .iter()
                .map(|kv| format!("Env {}", kv.key.trim_start_matches('-'))),
        );
        claims.extend(
            a.mounts
                .iter()
                .map(|m| format!("Mounts {}", m.destination.trim_start_matches('-'))),
        );
        if !a.args.is_empty() {
            claims.push("Args ".into());
        }
        claims.extend(a.rlimits.iter().map(|r| format!("Rlimits {}", r.r#type)));
        if let Some(l) = &a.linux {
            if l.oom_score_adj.is_some() {
                claims.push("OomScoreAdj ".into());
            }
            claims.extend(
                l.devices
                    .iter()
                    .map(|d| format!("Devices {}", d.path.trim_start_matches('-'))),
            );
            if let Some(r) = &l.resources {
                claims.extend(resource_fields(r));
            }
        }
        for c in claims {
            self.claim(plugin, c).map_err(into_err)?;
        }
        let m = self.adjust.get_or_insert_with(Default::default);
        m.annotations.extend(a.annotations.clone());
        m.env.extend(a.env.clone());
        m.mounts.extend(a.mounts.clone());
        if !a.args.is_empty() {
            m.args = a.args.clone();
        }
        m.rlimits.extend(a.rlimits.clone());
        // Hooks are not owned: each plugin's are appended after the earlier ones'.
        if let Some(h) = a.hooks.as_ref().filter(|h| !h.is_empty()) {
            m.hooks.get_or_insert_with(Default::default).append(h);
        }
        if let Some(l) = &a.linux {
            let ml = m.linux.get_or_insert_with(Default::default);
            if l.oom_score_adj.is_some() {
                ml.oom_score_adj = l.oom_score_adj;
            }
            ml.devices.extend(l.devices.clone());
            if let Some(r) = &l.resources {
                merge_resources(ml.resources.get_or_insert_with(Default::default), r);
            }
        }
        Ok(())
    }

    fn result(self) -> Option<ContainerAdjustment> {
        self.adjust
    }
}

/// The resource fields an adjustment sets, as ownership names them.
fn resource_fields(r: &LinuxResources) -> Vec<String> {
    let mut v = vec![];
    if let Some(m) = &r.memory {
        if m.limit.is_some() {
            v.push("MemLimit ".into());
        }
        if m.swap.is_some() {
            v.push("MemSwapLimit ".into());
        }
    }
    if let Some(c) = &r.cpu {
        if c.shares.is_some() {
            v.push("CPUShares ".into());
        }
        if c.quota.is_some() {
            v.push("CPUQuota ".into());
        }
        if c.period.is_some() {
            v.push("CPUPeriod ".into());
        }
        if !c.cpus.is_empty() {
            v.push("CPUSetCPUs ".into());
        }
        if !c.mems.is_empty() {
            v.push("CPUSetMems ".into());
        }
    }
    if r.pids.is_some() {
        v.push("PidsLimit ".into());
    }
    v.extend(r.unified.keys().map(|k| format!("CgroupsUnified {k}")));
    v
}

fn merge_resources(into: &mut LinuxResources, r: &LinuxResources) {
    if let Some(m) = &r.memory {
        let im = into.memory.get_or_insert_with(Default::default);
        if m.limit.is_some() {
            im.limit = m.limit;
        }
        if m.swap.is_some() {
            im.swap = m.swap;
        }
    }
    if let Some(c) = &r.cpu {
        let ic = into.cpu.get_or_insert_with(Default::default);
        if c.shares.is_some() {
            ic.shares = c.shares;
        }
        if c.quota.is_some() {
            ic.quota = c.quota;
        }
        if c.period.is_some() {
            ic.period = c.period;
        }
        if !c.cpus.is_empty() {
            ic.cpus = c.cpus.clone();
        }
        if !c.mems.is_empty() {
            ic.mems = c.mems.clone();
        }
    }
    if r.pids.is_some() {
        into.pids = r.pids;
    }
    into.unified.extend(r.unified.clone());
}

/// What crust does not apply from an adjustment, refused by name rather than dropped.
fn refuse_unsupported(a: &ContainerAdjustment) -> Result<(), String> {
    let mut no = vec![];
    if !a.cdi_devices.is_empty() {
        no.push("CDI devices");
    }
    if let Some(l) = &a.linux {
        if !l.cgroups_path.is_empty() {
            no.push("the cgroups path");
        }
        if l.io_priority.is_some() {
            no.push("the I/O priority");
        }
        if l.seccomp_policy.is_some() {
            no.push("a seccomp policy");
        }
        if !l.namespaces.is_empty() {
            no.push("namespaces");
        }
        if !l.sysctl.is_empty() {
            no.push("sysctls");
        }
        if !l.net_devices.is_empty() {
            no.push("network devices");
        }
        if l.scheduler.is_some() {
            no.push("the scheduler");
        }
        if l.rdt.is_some() {
            no.push("RDT");
        }
        if l.memory_policy.is_some() {
            no.push("the memory policy");
        }
        if let Some(r) = &l.resources {
            if !r.hugepage_limits.is_empty() {
                no.push("hugepage limits");
            }
            if r.blockio_class.is_some() || r.rdt_class.is_some() {
                no.push("block I/O and RDT classes");
            }
            if !r.devices.is_empty() {
                no.push("device cgroup rules");
            }
        }
    }
    if no.is_empty() {
        Ok(())
    } else {
        Err(format!(
            "crust does not apply NRI adjustments of {}",
            no.join(", ")
        ))
    }
}

/// The container as a later plugin sees it, an earlier one's adjustment applied.
fn apply_to_container(c: &mut Container, a: &ContainerAdjustment) {
    for (k, v) in &a.annotations {
        match k.strip_prefix('-') {
            Some(k) => {
                c.annotations.remove(k);
            }
            None => {
                c.annotations.insert(k.clone(), v.clone());
            }
        }
    }
    adjust_env(&mut c.env, &a.env);
    for m in &a.mounts {
        let dest = m.destination.trim_start_matches('-');
        c.mounts.retain(|x| x.destination != dest);
        if !m.destination.starts_with('-') {
            c.mounts.push(m.clone());
        }
    }
    if let Some(args) = adjusted_args(a) {
        c.args = args;
    }
}

/// `NAME=value` entries with an adjustment's variables set (`-NAME`: taken out).
fn adjust_env(env: &mut Vec<String>, kvs: &[KeyValue]) {
    for kv in kvs {
        let name = kv.key.trim_start_matches('-');
        env.retain(|e| e.split_once('=').map_or(e.as_str(), |(n, _)| n) != name);
        if !kv.key.starts_with('-') {
            env.push(format!("{}={}", kv.key, kv.value));
        }
    }
}

/// The args an adjustment sets, if any (a first `""` only marks "replace all").
fn adjusted_args(a: &ContainerAdjustment) -> Option<Vec<String>> {
    match a.args.split_first() {
        None => None,
        Some((first, rest)) if first.is_empty() => Some(rest.to_vec()),
        Some(_) => Some(a.args.clone()),
    }
}

/// Applies the merged adjustment to a container's OCI spec (as JSON).
pub fn apply_to_spec(spec: &mut serde_json::Value, a: &ContainerAdjustment) {
    use serde_json::json;
    for (k, v) in &a.annotations {
        let ann = spec["annotations"].as_object_mut();
        match (k.strip_prefix('-'), ann) {
            (Some(k), Some(ann)) => {
                ann.remove(k);
            }
            (None, Some(ann)) => {
                ann.insert(k.clone(), json!(v));
            }
            (None, None) => spec["annotations"] = json!({k: v}),
            (Some(_), None) => {}
        }
    }
    if !a.env.is_empty() {
        let mut env: Vec<String> = spec["process"]["env"]
            .as_array()
            .map(|a| {
                a.iter()
                    .filter_map(|e| e.as_str().map(String::from))
                    .collect()
            })
            .unwrap_or_default();
        adjust_env(&mut env, &a.env);
        spec["process"]["env"] = json!(env);
    }
    if !a.mounts.is_empty() {
        let mut mounts = spec["mounts"].as_array().cloned().unwrap_or_default();
        for m in &a.mounts {
            let dest = m.destination.trim_start_matches('-');
            mounts.retain(|x| x["destination"] != dest);
            if !m.destination.starts_with('-') {
                mounts.push(json!({
                    "destination": m.destination,
                    "type": if m.r#type.is_empty() { "bind" } else { m.r#type.as_str() },
                    "source": m.source,
                    "options": m.options,
                }));
            }
        }
        spec["mounts"] = json!(mounts);
    }
    if let Some(args) = adjusted_args(a) {
        spec["process"]["args"] = json!(args);
    }
    if let Some(h) = &a.hooks {
        for (name, list) in h.lists() {
            if list.is_empty() {
                continue;
            }
            let mut all = spec["hooks"][name].as_array().cloned().unwrap_or_default();
            for hook in list {
                let mut v = json!({ "path": hook.path });
                if !hook.args.is_empty() {
                    v["args"] = json!(hook.args);
                }
                if !hook.env.is_empty() {
                    v["env"] = json!(hook.env);
                }
                if let Some(t) = hook.timeout {
                    v["timeout"] = json!(t.value);
                }
                all.push(v);
            }
            spec["hooks"][name] = json!(all);
        }
    }
    if !a.rlimits.is_empty() {
        let mut rl = spec["process"]["rlimits"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        for r in &a.rlimits {
            rl.retain(|x| x["type"] != r.r#type.as_str());
            rl.push(json!({"type": r.r#type, "hard": r.hard, "soft": r.soft}));
        }
        spec["process"]["rlimits"] = json!(rl);
    }
    if let Some(l) = &a.linux {
        if let Some(o) = l.oom_score_adj {
            spec["process"]["oomScoreAdj"] = json!(o.value);
        }
        if !l.devices.is_empty() {
            let mut devices = spec["linux"]["devices"]
                .as_array()
                .cloned()
                .unwrap_or_default();
            for d in &l.devices {
                let path = d.path.trim_start_matches('-');
                devices.retain(|x| x["path"] != path);
                if !d.path.starts_with('-') {
                    let mut v = json!({
                        "path": d.path, "type": d.r#type, "major": d.major, "minor": d.minor,
                    });
                    if let Some(m) = d.file_mode {
                        v["fileMode"] = json!(m.value);
                    }
                    if let Some(u) = d.uid {
                        v["uid"] = json!(u.value);
                    }
                    if let Some(g) = d.gid {
                        v["gid"] = json!(g.value);
                    }
                    devices.push(v);
                }
            }
            spec["linux"]["devices"] = json!(devices);
        }
        if let Some(r) = &l.resources {
            let res = &mut spec["linux"]["resources"];
            if let Some(m) = &r.memory {
                if let Some(v) = m.limit {
                    res["memory"]["limit"] = json!(v.value);
                }
                if let Some(v) = m.swap {
                    res["memory"]["swap"] = json!(v.value);
                }
            }
            if let Some(c) = &r.cpu {
                if let Some(v) = c.shares {
                    res["cpu"]["shares"] = json!(v.value);
                }
                if let Some(v) = c.quota {
                    res["cpu"]["quota"] = json!(v.value);
                }
                if let Some(v) = c.period {
                    res["cpu"]["period"] = json!(v.value);
                }
                if !c.cpus.is_empty() {
                    res["cpu"]["cpus"] = json!(c.cpus);
                }
                if !c.mems.is_empty() {
                    res["cpu"]["mems"] = json!(c.mems);
                }
            }
            if let Some(p) = r.pids {
                res["pids"]["limit"] = json!(p.limit);
            }
            for (k, v) in &r.unified {
                res["unified"][k] = json!(v);
            }
        }
    }
}

impl Nri {
    /// After a RemovePodSandbox or RemoveContainer: its bookkeeping goes (ids are
    /// never reused, so this only keeps the set small).
    pub fn removed(&self, kind: char, id: &str) {
        let key = format!("{kind}/{id}");
        let mut stopped = self.stopped.lock();
        stopped.remove(&key);
        stopped.remove(&format!("{key}/removed"));
        drop(stopped);
        if kind == 'c' {
            self.created.lock().remove(id);
        }
    }

    /// Whether the plugins were asked to create container `id` (and it is not removed).
    pub fn was_created(&self, id: &str) -> bool {
        self.created.lock().contains(id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(k: &str, v: &str) -> KeyValue {
        KeyValue {
            key: k.into(),
            value: v.into(),
        }
    }

    #[test]
    fn adjustments_merge_in_order_and_a_key_two_plugins_set_fails() {
        let mut m = Merge::default();
        let a = ContainerAdjustment {
            env: vec![env("A", "1")],
            annotations: [("x".to_string(), "1".to_string())].into(),
            ..Default::default()
        };
        let b = ContainerAdjustment {
            env: vec![env("B", "2")],
            rlimits: vec![PosixRlimit {
                r#type: "RLIMIT_NOFILE".into(),
                hard: 4096,
                soft: 1024,
            }],
            args: vec!["".into(), "sleep".into(), "1".into()],
            linux: Some(LinuxContainerAdjustment {
                oom_score_adj: Some(OptionalInt { value: 500 }),
                devices: vec![LinuxDevice {
                    path: "/dev/fuse".into(),
                    r#type: "c".into(),
                    major: 10,
                    minor: 229,
                    file_mode: Some(OptionalUInt32 { value: 0o666 }),
                    ..Default::default()
                }],
                resources: Some(LinuxResources {
                    memory: Some(LinuxMemory {
                        limit: Some(OptionalInt64 { value: 64 << 20 }),
                        swap: None,
                    }),
                    ..Default::default()
                }),
                ..Default::default()
            }),
            ..Default::default()
        };
        m.add("10-a", &a).unwrap();
        m.add("20-b", &b).unwrap();
        // A third setting what the first did: refused, naming both.
        let c = ContainerAdjustment {
            env: vec![env("A", "3")],
            ..Default::default()
        };
        let e = m.add("30-c", &c).unwrap_err();
        assert_eq!(
            e,
            CallError::Status(
                wire::code::INVALID_ARGUMENT,
                "plugins \"30-c\" and \"10-a\" both tried to set Env A".into()
            )
        );
        let merged = m.result().unwrap();
        let mut spec = serde_json::json!({
            "process": {"args": ["true"], "env": ["A=0", "PATH=/bin"]},
            "mounts": [{"destination": "/data", "type": "bind", "source": "/x", "options": ["rbind"]}],
            "annotations": {"keep": "1"},
            "linux": {"resources": {}},
        });
        apply_to_spec(&mut spec, &merged);
        assert_eq!(
            spec["process"]["env"],
            serde_json::json!(["PATH=/bin", "A=1", "B=2"])
        );
        assert_eq!(spec["process"]["args"], serde_json::json!(["sleep", "1"]));
        assert_eq!(spec["process"]["oomScoreAdj"], 500);
        assert_eq!(
            spec["process"]["rlimits"],
            serde_json::json!([{"type": "RLIMIT_NOFILE", "hard": 4096, "soft": 1024}])
        );
        assert_eq!(spec["linux"]["resources"]["memory"]["limit"], 64 << 20);
        assert_eq!(
            spec["linux"]["devices"],
            serde_json::json!([{"path": "/dev/fuse", "type": "c", "major": 10, "minor": 229, "fileMode": 0o666}])
        );
        assert_eq!(
            spec["annotations"],
            serde_json::json!({"keep": "1", "x": "1"})
        );
        // Removal markers: `-KEY` takes an entry out.
        let rm = ContainerAdjustment {
            env: vec![env("-PATH", "")],
            annotations: [("-keep".to_string(), String::new())].into(),
            mounts: vec![Mount {
                destination: "-/data".into(),
                ..Default::default()
            }],
            ..Default::default()
        };
        apply_to_spec(&mut spec, &rm);
        assert_eq!(spec["process"]["env"], serde_json::json!(["A=1", "B=2"]));
        assert_eq!(spec["mounts"], serde_json::json!([]));
        assert_eq!(spec["annotations"], serde_json::json!({"x": "1"}));
    }

    #[test]
    fn hooks_of_plugins_are_appended_in_order_to_the_spec() {
        use crate::nri::api::{Hook, Hooks, OptionalInt};
        let hook = |p: &str| Hook {
            path: p.into(),
            ..Default::default()
        };
        let a = ContainerAdjustment {
            hooks: Some(Hooks {
                create_runtime: vec![Hook {
                    path: "/usr/bin/a".into(),
                    args: vec!["a".into(), "x".into()],
                    env: vec!["K=v".into()],
                    timeout: Some(OptionalInt { value: 5 }),
                }],
                poststop: vec![hook("/usr/bin/a-stop")],
                ..Default::default()
            }),
            ..Default::default()
        };
        let b = ContainerAdjustment {
            hooks: Some(Hooks {
                create_runtime: vec![hook("/usr/bin/b")],
                ..Default::default()
            }),
            ..Default::default()
        };
        let mut m = Merge::default();
        m.add("10-a", &a).unwrap();
        m.add("20-b", &b).unwrap();
        let merged = m.result().unwrap();
        let mut spec = serde_json::json!({"ociVersion": "1.1.0",
            "hooks": {"createRuntime": [{"path": "/own"}]}});
        apply_to_spec(&mut spec, &merged);
        assert_eq!(
            spec["hooks"],
            serde_json::json!({
                "createRuntime": [
                    {"path": "/own"},
                    {"path": "/usr/bin/a", "args": ["a", "x"], "env": ["K=v"], "timeout": 5},
                    {"path": "/usr/bin/b"},
                ],
                "poststop": [{"path": "/usr/bin/a-stop"}],
            })
        );
        let parsed: oci_spec::runtime::Spec = serde_json::from_value(spec).unwrap();
        assert_eq!(
            container::executor::hooks::of(
                &parsed,
                container::executor::hooks::HookKind::CreateRuntime
            )
            .len(),
            3
        );
    }

    #[test]
    fn what_crust_does_not_apply_is_refused_by_name() {
        let a = ContainerAdjustment {
            cdi_devices: vec![vec![0x0a, 0x00]],
            linux: Some(LinuxContainerAdjustment {
                cgroups_path: "/x".into(),
                ..Default::default()
            }),
            ..Default::default()
        };
        let e = Merge::default().add("10-a", &a).unwrap_err();
        let CallError::Status(_, m) = e else { panic!() };
        assert!(
            m.contains("CDI devices") && m.contains("the cgroups path"),
            "{m}"
        );
        // Decoded from the wire, unknown to crust's structs or not, a CDI device is seen.
        use prost::Message;
        let wire = ContainerAdjustment {
            cdi_devices: vec![vec![0x0a, 0x02, 0x0a, 0x00]],
            ..Default::default()
        }
        .encode_to_vec();
        let back = ContainerAdjustment::decode(wire.as_slice()).unwrap();
        assert!(refuse_unsupported(&back).is_err());
    }

    #[test]
    fn plugin_names_and_indexes_as_nri_accepts_them() {
        assert!(valid_plugin("cri-test-nri-pod-lifecycle", "00").is_ok());
        assert!(valid_plugin("a.b+c_d", "99").is_ok());
        assert!(valid_plugin("x", "1").is_err());
        assert!(valid_plugin("x", "1a").is_err());
        assert!(valid_plugin("", "10").is_err());
        assert!(valid_plugin("a b", "10").is_err());
    }

    #[tokio::test]
    async fn stop_and_remove_go_once_and_a_remove_brings_its_stop_first() {
        let (tx, mut rx) = mpsc::unbounded_channel();
        let nri = Nri {
            cfg: NriConfig::default(),
            runtime_version: String::new(),
            queue: tx,
            stopped: Default::default(),
            created: Default::default(),
            updater: Default::default(),
        };
        let pod = PodSandbox {
            id: "p".into(),
            ..Default::default()
        };
        let c = Container {
            id: "c".into(),
            ..Default::default()
        };
        nri.notify(Event::RemoveContainer, pod.clone(), Some(c.clone()));
        nri.notify(Event::StopContainer, pod.clone(), Some(c.clone()));
        nri.notify(Event::RemoveContainer, pod.clone(), Some(c.clone()));
        nri.notify(Event::StopPodSandbox, pod.clone(), None);
        nri.notify(Event::StopPodSandbox, pod.clone(), None);
        nri.notify(Event::RemovePodSandbox, pod.clone(), None);
        drop(nri);
        let mut seen = vec![];
        while let Some(Job::Event(job)) = rx.recv().await {
            seen.push(job.ev);
        }
        assert_eq!(
            seen,
            [
                Event::StopContainer,
                Event::RemoveContainer,
                Event::StopPodSandbox,
                Event::RemovePodSandbox
            ]
        );
    }
}
