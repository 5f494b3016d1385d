//! The streaming server: where the URLs of Exec, Attach and PortForward lead.
//!
//! The CRI hands the kubelet (or crictl) a URL; the client, or the kubelet on behalf of
//! `kubectl exec`, then upgrades an HTTP request to it to SPDY/3.1 and speaks
//! Kubernetes' remotecommand or portforward protocol (crates/streaming). Each URL holds
//! a single-use token naming the request it was made for, valid for a minute as in the
//! kubelet's own streaming server; what the stream may do was decided by the RPC, never
//! by the query string.
//!
//! It listens on TCP (`stream_server_address`, `stream_server_port`; loopback and a
//! free port by default, as containerd does), since the kubelet proxies to it over HTTP.

use crate::cri::error::{Error, Result};
use crate::daemon::Crust;
use bytes::Bytes;
use http_body_util::Full;
use hyper::{Request, Response, StatusCode};
use parking_lot::Mutex;
use std::collections::HashMap;
use std::convert::Infallible;
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};
use streaming::http;
use streaming::remotecommand::{self, Options, Streams};
use streaming::spdy::Session;

/// How long a URL may wait for its client.
const TOKEN_TTL: Duration = Duration::from_secs(60);
/// How long a client may take to open its streams once upgraded.
const STREAMS_TIMEOUT: Duration = Duration::from_secs(30);

/// A request waiting for its client.
pub enum Pending {
    Exec(cri_api::ExecRequest),
    Attach(cri_api::AttachRequest),
    PortForward(cri_api::PortForwardRequest),
}

impl Pending {
    /// The channels an exec or attach asked for; None for a port forward.
    fn options(&self) -> Option<Options> {
        let (stdin, stdout, stderr, tty) = match self {
            Pending::Exec(r) => (r.stdin, r.stdout, r.stderr, r.tty),
            Pending::Attach(r) => (r.stdin, r.stdout, r.stderr, r.tty),
            Pending::PortForward(_) => return None,
        };
        Some(Options {
            stdin,
            stdout,
            stderr,
            tty,
        })
    }

    fn kind(&self) -> &'static str {
        match self {
            Pending::Exec(_) => "exec",
            Pending::Attach(_) => "attach",
            Pending::PortForward(_) => "portforward",
        }
    }
}

/// The server's address and its pending requests.
#[derive(Default)]
pub struct StreamServer {
    base: OnceLock<String>,
    pending: Mutex<HashMap<String, (Instant, Pending)>>,
}

impl StreamServer {
    /// Registers `p` and returns the URL its client is to use.
    pub fn url_for(&self, p: Pending) -> Result<String> {
        let base = self.base.get().ok_or_else(|| {
            Error::FailedPrecondition("the streaming server is not running".into())
        })?;
        let token = crate::daemon::util::new_id()[..32].to_string();
        let url = format!("{base}/{}/{token}", p.kind());
        let mut m = self.pending.lock();
        m.retain(|_, (at, _)| at.elapsed() < TOKEN_TTL);
        m.insert(token, (Instant::now(), p));
        Ok(url)
    }

    fn take(&self, kind: &str, token: &str) -> Option<Pending> {
        let mut m = self.pending.lock();
        m.retain(|_, (at, _)| at.elapsed() < TOKEN_TTL);
        match m.get(token) {
            Some((_, p)) if p.kind() == kind => m.remove(token).map(|(_, p)| p),
            _ => None,
        }
    }
}

/// Binds the listener and serves in the background.
pub async fn start(crust: Arc<Crust>) -> anyhow::Result<()> {
    let addr = format!(
        "{}:{}",
        crust.cfg.stream_server_address, crust.cfg.stream_server_port
    );
    let addr = if crust.cfg.stream_server_address.contains(':') {
        format!(
            "[{}]:{}",
            crust.cfg.stream_server_address, crust.cfg.stream_server_port
        )
    } else {
        addr
    };
    let listener = tokio::net::TcpListener::bind(&addr)
        .await
        .map_err(|e| anyhow::anyhow!("binding the streaming server to {addr}: {e}"))?;
    let local = listener.local_addr()?;
    let _ = crust.streams.base.set(format!("http://{local}"));
    tracing::info!(address = %local, "streaming server listening");
    tokio::spawn(async move {
        loop {
            let Ok((sock, _)) = listener.accept().await else {
                continue;
            };
            let c = crust.clone();
            tokio::spawn(async move {
                let svc = hyper::service::service_fn(move |req| handle(c.clone(), req));
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(hyper_util::rt::TokioIo::new(sock), svc)
                    .with_upgrades()
                    .await;
            });
        }
    });
    Ok(())
}

async fn handle(
    crust: Arc<Crust>,
    mut req: Request<hyper::body::Incoming>,
) -> std::result::Result<Response<Full<Bytes>>, Infallible> {
    let path = req.uri().path().to_string();
    let mut parts = path.trim_start_matches('/').splitn(2, '/');
    let (kind, token) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
    let Some(pending) = crust.streams.take(kind, token) else {
        return Ok(http::text(
            StatusCode::NOT_FOUND,
            format!("{path}: no such stream (unknown or expired URL)"),
        ));
    };
    let websocket = streaming::ws::wants_websocket(&req);
    if !websocket && !http::wants_spdy(&req) {
        return Ok(http::text(
            StatusCode::BAD_REQUEST,
            "this URL takes an upgrade to SPDY/3.1 or WebSocket",
        ));
    }
    let opts = pending.options();
    let (protocol, answer) = if websocket {
        // A port forward over WebSocket is SPDY tunneled through it.
        let ours = match opts {
            None => &[streaming::ws::TUNNELED_PORTFORWARD][..],
            Some(_) => streaming::ws::PROTOCOLS,
        };
        match streaming::ws::accept(&req, ours) {
            Ok(x) => x,
            Err(r) => return Ok(*r),
        }
    } else {
        let ours = match opts {
            None => crate::streaming::port_forward::PROTOCOLS,
            Some(_) => remotecommand::PROTOCOLS,
        };
        match http::negotiate(&req, ours) {
            Ok(p) => (p, http::switching(p)),
            Err(r) => return Ok(*r),
        }
    };
    let upgrade = hyper::upgrade::on(&mut req);
    let idle = Duration::from_secs(crust.cfg.stream_idle_timeout_seconds);
    tokio::spawn(async move {
        let io = match upgrade.await {
            Ok(u) => streaming::idle::Idle::new(hyper_util::rt::TokioIo::new(u), idle),
            Err(e) => {
                tracing::debug!("streaming upgrade failed: {e}");
                return;
            }
        };
        let streams = match (websocket, opts, &pending) {
            (true, Some(opts), _) => Streams::websocket(io, protocol, opts),
            (true, None, Pending::PortForward(r)) => {
                let session = Session::server(streaming::ws::tunnel(io));
                return crate::streaming::port_forward::serve(crust, r.clone(), session).await;
            }
            (false, _, Pending::PortForward(r)) => {
                let r = r.clone();
                return crate::streaming::port_forward::serve(crust, r, Session::server(io)).await;
            }
            (false, Some(opts), _) => {
                let session = Session::server(io);
                match Streams::accept(session, protocol, opts, STREAMS_TIMEOUT).await {
                    Ok(s) => s,
                    Err(e) => {
                        tracing::debug!("{} streams: {e}", pending.kind());
                        return;
                    }
                }
            }
            _ => return,
        };
        match pending {
            Pending::Exec(r) => crate::containers::exec::exec_stream(crust, r, streams).await,
            Pending::Attach(r) => {
                crate::containers::exec::attach::attach_stream(crust, r, streams).await
            }
            Pending::PortForward(_) => {}
        }
    });
    Ok(answer)
}

/// Checks which streams a request asks for, as containerd and the kubelet do.
fn check_streams(stdin: bool, stdout: bool, stderr: bool, tty: bool) -> Result<()> {
    if !stdin && !stdout && !stderr {
        return Err(Error::InvalidArgument(
            "one of stdin, stdout, or stderr must be set".into(),
        ));
    }
    if tty && stderr {
        return Err(Error::InvalidArgument(
            "tty and stderr cannot both be true: a terminal merges them".into(),
        ));
    }
    Ok(())
}

/// The running container `id`, or why a stream to it cannot be had.
async fn running(crust: &Crust, id: &str) -> Result<String> {
    let c = crust.containers.get(id)?;
    let mut rec = c.rec.lock().await;
    crate::containers::lifecycle::refresh(crust, &mut rec);
    if rec.state != crate::containers::store::ContainerState::Running {
        return Err(Error::FailedPrecondition(format!(
            "container {} is not running ({:?})",
            rec.id, rec.state
        )));
    }
    Ok(rec.id.clone())
}

/// The Exec RPC: a URL for the client to stream the command through.
pub async fn exec(crust: &Crust, mut req: cri_api::ExecRequest) -> Result<String> {
    if req.cmd.is_empty() {
        return Err(Error::InvalidArgument("cmd is empty".into()));
    }
    check_streams(req.stdin, req.stdout, req.stderr, req.tty)?;
    req.container_id = running(crust, &req.container_id).await?;
    crust.streams.url_for(Pending::Exec(req))
}

/// The Attach RPC.
pub async fn attach(crust: &Crust, mut req: cri_api::AttachRequest) -> Result<String> {
    check_streams(req.stdin, req.stdout, req.stderr, req.tty)?;
    req.container_id = running(crust, &req.container_id).await?;
    crust.streams.url_for(Pending::Attach(req))
}

/// The PortForward RPC: the pod must be ready (its network namespace is what the
/// connections go into).
pub async fn port_forward(crust: &Crust, mut req: cri_api::PortForwardRequest) -> Result<String> {
    let sb = crust.store.get(&req.pod_sandbox_id)?;
    let rec = sb.rec.lock().await;
    if rec.state != crate::sandboxes::store::SandboxState::Ready {
        return Err(Error::FailedPrecondition(format!(
            "pod sandbox {} is not ready",
            rec.id
        )));
    }
    if let Some(p) = req.port.iter().find(|p| !(1..=65535).contains(*p)) {
        return Err(Error::InvalidArgument(format!(
            "port {p} is not a TCP port"
        )));
    }
    req.pod_sandbox_id = rec.id.clone();
    drop(rec);
    crust.streams.url_for(Pending::PortForward(req))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_are_single_use_and_of_their_kind() {
        let s = StreamServer::default();
        assert!(
            s.url_for(Pending::Exec(Default::default())).is_err(),
            "no URL before the server listens"
        );
        s.base.set("http://127.0.0.1:9".into()).unwrap();
        let url = s.url_for(Pending::Exec(Default::default())).unwrap();
        let token = url.rsplit('/').next().unwrap().to_string();
        assert!(url.starts_with("http://127.0.0.1:9/exec/"), "{url}");
        assert_eq!(token.len(), 32);
        assert!(s.take("attach", &token).is_none(), "another kind's token");
        assert!(s.take("exec", &token).is_some());
        assert!(s.take("exec", &token).is_none(), "used twice");
        let url2 = s.url_for(Pending::PortForward(Default::default())).unwrap();
        assert!(url2.contains("/portforward/"));
        // Expired tokens go.
        s.pending
            .lock()
            .values_mut()
            .for_each(|(at, _)| *at = Instant::now() - TOKEN_TTL - Duration::from_secs(1));
        assert!(s
            .take("portforward", url2.rsplit('/').next().unwrap())
            .is_none());
    }
}
