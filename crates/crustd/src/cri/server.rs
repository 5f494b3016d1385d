//! Start-up and serving: the lock that keeps a second daemon off the same state, the
//! socket, recovery before the first RPC, and a clean stop on SIGTERM/SIGINT (pods and
//! their pause processes keep running).

use crate::cri::service::Service;
use crate::daemon::Crust;
use anyhow::Context;
use cri_api::{ImageServiceServer, RuntimeServiceServer};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::io::AsRawFd;
use std::sync::Arc;

/// Holds `crustd.lock` in a state folder for the daemon's lifetime.
pub struct Lock(#[allow(dead_code)] std::fs::File);

/// Locks `dir` (the persistent root and the volatile state each get one), so two
/// daemons never share records or pins.
pub fn lock(dir: &std::path::Path, what: &str) -> anyhow::Result<Lock> {
    let state = dir;
    std::fs::create_dir_all(state).with_context(|| format!("creating {}", state.display()))?;
    let path = state.join("crustd.lock");
    let f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(&path)
        .with_context(|| format!("opening {}", path.display()))?;
    // SAFETY: flock on a descriptor we own.
    if unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } != 0 {
        let holder = std::fs::read_to_string(&path).unwrap_or_default();
        anyhow::bail!(
            "another crustd is already running with {what} dir {} (pid {}); stop it or use another --{what}",
            state.display(),
            holder.trim()
        );
    }
    f.set_len(0).ok();
    std::fs::write(&path, format!("{}\n", std::process::id())).ok();
    Ok(Lock(f))
}

pub async fn serve(crust: Crust) -> anyhow::Result<()> {
    let crust = Arc::new(crust);
    crate::containers::events::start(crust.clone());
    {
        let c = crust.clone();
        tokio::task::spawn_blocking(move || {
            crate::sandboxes::recovery::recover(&c);
            crate::containers::recovery::recover(&c);
            crate::containers::recovery::sweep_snapshots(&c);
        })
        .await?;
        crate::containers::recovery::watch_all(&crust);
        crate::sandboxes::liveness::watch_all(&crust);
    }
    // After recovery: NRI's plugins are told of the pods and containers as they are.
    crate::nri::convert::start(&crust)?;
    // Pods do not depend on it: without it, only Exec, Attach and PortForward fail.
    if let Err(e) = crate::streaming::server::start(crust.clone()).await {
        tracing::error!("{e:#}; Exec, Attach and PortForward will fail");
    }
    let socket = crust.cfg.socket_path();
    if let Some(dir) = socket.parent() {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    // We hold the lock, so a socket file left here is from a daemon that died.
    match std::fs::remove_file(&socket) {
        Ok(()) => tracing::info!(socket = %socket.display(), "replaced a stale socket"),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => {
            return Err(e).with_context(|| format!("removing stale socket {}", socket.display()))
        }
    }
    let listener = tokio::net::UnixListener::bind(&socket)
        .with_context(|| format!("binding {}", socket.display()))?;
    std::fs::set_permissions(&socket, std::fs::Permissions::from_mode(0o660))?;
    // Every connection through the authority fix: the kubelet before v1.30 and grpc's
    // C core send `:authority` values the HTTP/2 server would refuse (see the module).
    let incoming = tokio_stream::StreamExt::map(
        tokio_stream::wrappers::UnixListenerStream::new(listener),
        |conn| conn.map(cri_api::authority::AuthorityFix::new),
    );
    let svc = Service {
        crust: crust.clone(),
    };
    tracing::info!(socket = %socket.display(), "crustd serving CRI v1");
    tonic::transport::Server::builder()
        .layer(crate::cri::deadline::DeadlineLayer)
        .add_service(RuntimeServiceServer::new(svc.clone()))
        .add_service(ImageServiceServer::new(svc))
        .serve_with_incoming_shutdown(incoming, shutdown())
        .await
        .context("serving")?;
    let _ = std::fs::remove_file(&socket);
    tracing::info!("crustd stopped; pods keep running");
    Ok(())
}

async fn shutdown() {
    use tokio::signal::unix::{signal, SignalKind};
    let mut term = signal(SignalKind::terminate()).expect("SIGTERM handler");
    let mut int = signal(SignalKind::interrupt()).expect("SIGINT handler");
    tokio::select! {
        _ = term.recv() => {}
        _ = int.recv() => {}
    }
}
