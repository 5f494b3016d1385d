//! `crustlet`: a thin kubelet. It registers its Node, takes the pods bound to it from
//! the apiserver (and static pods from a folder of manifests), and runs each through
//! any CRI runtime (crustd by default), reporting their status back. See the README.

mod cgroup;
mod config;
mod cri;
mod events;
mod eviction;
mod gc;
mod inputs;
mod node;
mod pod_logs;
mod pods;
mod quantity;
mod routes;
mod server;
mod services;
mod spec;
mod wake;
mod worker;

use clap::Parser;
use k8s_openapi::api::core::v1::Pod;
use std::sync::Arc;

/// What every pod worker shares.
pub struct Ctx {
    pub cfg: Arc<config::Config>,
    pub cri: cri::Cri,
    pub client: Option<kube::Client>,
    /// The cluster's Services, for the containers' service variables.
    pub services: Option<services::Services>,
    pub node_ip: String,
    pub node_memory: i64,
    recorder: Option<Arc<events::Recorder>>,
    /// The pods as their workers last synced them, and counters, for the HTTPS server.
    pub seen: server::Seen,
    /// The host ports of the admitted pods (admission's port check).
    pub ports: worker::admit::HostPorts,
    /// The workers' wake-ups from the runtime's container events.
    pub wakers: Arc<wake::Wakers>,
    /// The slots of pods being started (`--max-parallel-pod-starts`).
    pub starts: Arc<tokio::sync::Semaphore>,
    /// Pods the eviction manager has told their workers to end.
    pub evictions: eviction::Evictions,
    /// When each image was last in use, for image garbage collection.
    pub image_usage: gc::Usage,
}

impl Ctx {
    /// Posts an event about `pod` in the background (an apiserver that is slow or gone
    /// must not hold a pod worker up).
    pub fn event(&self, pod: &Pod, warning: bool, reason: &str, note: String) {
        tracing::debug!(pod = %spec::key(pod), reason, "{note}");
        let Some(rec) = self.recorder.clone() else {
            return;
        };
        let mut reference = kube::Resource::object_ref(pod, &());
        // Events of static pods go to their mirror pods, which have other uids.
        if self.source(pod) == "file" {
            reference.uid = None;
        }
        let note: String = note.chars().take(1024).collect();
        let reason = reason.to_string();
        tokio::spawn(async move {
            if let Err(e) = rec.publish(&reference, warning, &reason, &note).await {
                tracing::debug!("event: {e}");
            }
        });
    }

    /// `api` or `file` (a static pod).
    pub fn source(&self, pod: &Pod) -> &'static str {
        let file = pod
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(pods::SOURCE))
            .is_some_and(|s| s == "file");
        if file {
            "file"
        } else {
            "api"
        }
    }
}

fn main() -> std::process::ExitCode {
    server::metrics::note_start();
    let flags = config::Flags::parse();
    let (cfg, server_cfg) = match config::Config::resolve_all(flags) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("crustlet: {e:#}");
            return std::process::ExitCode::from(2);
        }
    };
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::new(&cfg.log_filter))
        .with_writer(std::io::stderr)
        .init();
    limit_malloc_arenas();
    set_oom_score_adj(cfg.oom_score_adj);
    // One thread: the crustlet waits on the apiserver and the runtime, and a thread per
    // core (tokio's default) would cost a node of 64 cores 64 stacks and their caches
    // for nothing. What can take long off it goes to tokio's blocking threads, which
    // exist only while needed: the disk usage walks of /stats/summary, the node's
    // readings, cgroup removal, log follows.
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("tokio runtime");
    match rt.block_on(run(Arc::new(cfg), server_cfg)) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            tracing::error!("{e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

/// How many requests to the apiserver wait for their response headers at once. The
/// client speaks HTTP/1.1, one request per connection: without a bound, a node full of
/// pods starting at once opens a connection (with its TLS state and buffers, some
/// 40 KiB) per pod worker writing a status, and malloc keeps the memory after they
/// close. A watch holds its slot only until its response starts streaming.
const API_CONCURRENCY: usize = 16;

/// glibc gives each thread that allocates its own heap ("arena", up to 8 per core),
/// each keeping its own free memory (a second arena held 1.8 MiB with 30 pods); the
/// crustlet allocates little and seldom from several threads at once, so all of its
/// threads share the one heap.
fn limit_malloc_arenas() {
    // SAFETY: mallopt only sets a malloc parameter; called before any thread starts.
    unsafe { libc::mallopt(libc::M_ARENA_MAX, 1) };
}

/// Sets the crustlet's own `oom_score_adj`, so that under memory pressure the kernel
/// takes a pod's process before the agent that would evict it. Lowering it needs
/// CAP_SYS_RESOURCE; without it (a container, a sandbox whose bounding set lacks it) the
/// crustlet runs on with what it inherited, as the kubelet does, and says so.
fn set_oom_score_adj(want: i32) {
    if let Err(e) = std::fs::write("/proc/self/oom_score_adj", want.to_string()) {
        let now = std::fs::read_to_string("/proc/self/oom_score_adj").unwrap_or_default();
        tracing::warn!(
            want,
            now = now.trim(),
            error = %e,
            "could not set the crustlet's oom_score_adj; the OOM killer may take it before the pods"
        );
    }
}

/// Hands the memory malloc keeps free back to the kernel every 30 s (by itself glibc
/// returns only free memory at the top of a heap): what a burst of pods or an `exec`
/// allocated does not stay resident while the node is quiet.
async fn trim_malloc() {
    let mut tick = tokio::time::interval(std::time::Duration::from_secs(30));
    loop {
        tick.tick().await;
        // SAFETY: malloc_trim has no preconditions.
        unsafe { libc::malloc_trim(0) };
    }
}

async fn run(cfg: Arc<config::Config>, server_cfg: config::ServerConfig) -> anyhow::Result<()> {
    node::status::set_thresholds(cfg.eviction_hard);
    tokio::spawn(trim_malloc());
    let cri = cri::Cri::lazy(&cfg.runtime_socket);
    let client = match &cfg.kubeconfig {
        Some(path) => {
            let kc = kube::config::Kubeconfig::read_from(path)?;
            let c = kube::Config::from_custom_kubeconfig(kc, &Default::default()).await?;
            Some(
                kube::client::ClientBuilder::try_from(c)?
                    .with_layer(&tower::limit::ConcurrencyLimitLayer::new(API_CONCURRENCY))
                    .build(),
            )
        }
        None => None,
    };
    std::fs::create_dir_all(cfg.root_dir.join("pods"))?;
    // The Node's InternalIP, which is also every pod's hostIP.
    let node_ip = node::node_ip(&cfg).unwrap_or_else(|| "127.0.0.1".into());
    let recorder = client
        .clone()
        .map(|c| Arc::new(events::Recorder::new(c, cfg.node_name.clone())));
    node::KUBELET_PORT.store(
        i32::from(server_cfg.port),
        std::sync::atomic::Ordering::Relaxed,
    );
    if let Some(client) = client.clone() {
        if cfg.pod_routes {
            routes::start(client.clone(), cfg.node_name.clone());
        }
        tokio::spawn(node::run(cfg.clone(), client, cri.clone()));
    }
    tracing::info!(node = %cfg.node_name, runtime = %cfg.runtime_socket.display(), "crustlet starting");
    {
        // The cgroup driver and the node's pod cgroups, as soon as the runtime answers.
        let (cfg, cri) = (cfg.clone(), cri.clone());
        tokio::spawn(async move {
            while let Err(e) = cgroup::ready(&cfg, &cri).await {
                tracing::debug!("{e}");
                tokio::time::sleep(std::time::Duration::from_secs(1)).await;
            }
        });
    }
    let wakers = Arc::new(wake::Wakers::default());
    tokio::spawn(wake::follow(wakers.clone(), cri.runtime.clone()));
    let ctx = Arc::new(Ctx {
        cfg: cfg.clone(),
        cri,
        services: client.clone().map(services::Services::start),
        client,
        node_ip,
        node_memory: node::memory_capacity(),
        recorder,
        seen: Default::default(),
        ports: Default::default(),
        wakers,
        starts: Arc::new(tokio::sync::Semaphore::new(cfg.max_parallel_pod_starts)),
        evictions: Default::default(),
        image_usage: Default::default(),
    });
    server::start(ctx.clone(), server_cfg).await?;
    // SIGTERM and SIGINT end the crustlet; its pods keep running in the runtime and are
    // adopted by the next start, as the kubelet's are.
    use tokio::signal::unix::{signal, SignalKind};
    let mut term = signal(SignalKind::terminate())?;
    let mut int = signal(SignalKind::interrupt())?;
    let mut pods = tokio::spawn(pods::run(ctx.clone()));
    tokio::spawn(eviction::run(ctx.clone()));
    let mut gc = tokio::spawn(gc::run(ctx));
    tokio::select! {
        // (Neither ends but by a panic, which ends the crustlet as it did on this thread.)
        r = &mut pods => r.map_err(|e| anyhow::anyhow!("the pods' loop: {e}"))?,
        r = &mut gc => r.map_err(|e| anyhow::anyhow!("the garbage collector: {e}"))?,
        _ = term.recv() => tracing::info!("SIGTERM: stopping; pods keep running"),
        _ = int.recv() => tracing::info!("SIGINT: stopping; pods keep running"),
    }
    Ok(())
}
