//! PortForward's stream: Kubernetes' `portforward.k8s.io` protocol over SPDY. For each
//! forwarded connection the client opens two streams, `error` then `data`, both naming
//! the pod port and a request id; crust connects to that port on the pod's loopback,
//! from inside the pod's network namespace, and copies bytes both ways until the pod
//! closes its side (then both streams close, which is what ends the client's local
//! connection). A connection that cannot be made is reported on its error stream; the
//! session goes on.

use crate::daemon::Crust;
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;
use streaming::spdy::{Session, Stream, Writer};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

pub const PROTOCOLS: &[&str] = &["portforward.k8s.io"];

/// Serves one port-forward session until the client leaves.
pub async fn serve(crust: Arc<Crust>, req: cri_api::PortForwardRequest, mut session: Session) {
    let netns: Option<PathBuf> = match crust.store.get(&req.pod_sandbox_id) {
        Ok(sb) => {
            let rec = sb.rec.lock().await;
            if rec.host_network {
                None
            } else {
                rec.netns().map(|p| p.to_path_buf())
            }
        }
        Err(_) => None,
    };
    // Error streams by request id, waiting for their data stream.
    let mut errors: HashMap<String, Writer> = HashMap::new();
    while let Some(s) = session.accept().await {
        if s.reply().is_err() {
            break;
        }
        let id = s
            .header("requestid")
            .map(str::to_string)
            .unwrap_or_default();
        match s.header("streamtype") {
            Some("error") => {
                errors.insert(id, s.writer());
                // Only written to: its inbox is not needed.
            }
            Some("data") => {
                let err = errors.remove(&id);
                let port = s.header("port").and_then(|p| p.parse::<u16>().ok());
                let netns = netns.clone();
                let pod = req.pod_sandbox_id.clone();
                tokio::spawn(async move {
                    let Some(port) = port else {
                        if let Some(e) = err {
                            let _ = e.write_now(b"a port forward stream needs a valid port header");
                            let _ = e.close();
                        }
                        return;
                    };
                    if let Err(m) = forward(s, netns, port).await {
                        tracing::debug!(pod = %pod, port, "port forward: {m}");
                        if let Some(e) = &err {
                            let _ = e.write_now(
                                format!("error forwarding port {port} to pod {pod}: {m}")
                                    .as_bytes(),
                            );
                        }
                    }
                    if let Some(e) = err {
                        let _ = e.close();
                    }
                });
            }
            _ => {
                let _ = s.writer().reset(streaming::spdy::RST_PROTOCOL_ERROR);
            }
        }
    }
}

/// Connects to `port` on the pod's loopback (in `netns`, or the node's for a
/// hostNetwork pod).
fn connect(netns: Option<PathBuf>, port: u16) -> Result<std::net::TcpStream, String> {
    let dial = move || {
        std::net::TcpStream::connect(("127.0.0.1", port))
            .or_else(|_| std::net::TcpStream::connect(("::1", port)))
    };
    let res = match netns {
        None => dial(),
        Some(ns) => crate::sandboxes::podns::in_ns(&ns, container::ns::NsKind::Net, dial)
            .map_err(|e| e.to_string())?,
    };
    res.map_err(|e| format!("connecting to localhost:{port} in the pod: {e}"))
}

async fn forward(mut data: Stream, netns: Option<PathBuf>, port: u16) -> Result<(), String> {
    let tcp = tokio::task::spawn_blocking(move || connect(netns, port))
        .await
        .map_err(|e| e.to_string())??;
    tcp.set_nonblocking(true).map_err(|e| e.to_string())?;
    let tcp = tokio::net::TcpStream::from_std(tcp).map_err(|e| e.to_string())?;
    let (mut rd, mut wr) = tcp.into_split();
    let out = data.writer();
    let up = tokio::spawn(async move {
        let mut buf = vec![0u8; 32 << 10];
        loop {
            match rd.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    if out.write(&buf[..n]).await.is_err() {
                        break;
                    }
                }
            }
        }
        let _ = out.close();
    });
    let mut up = up;
    let client = async {
        while let Some(b) = data.read().await {
            if wr.write_all(&b).await.is_err() {
                break;
            }
        }
        let _ = wr.shutdown().await;
    };
    tokio::select! {
        // The client is done sending: the pod's answer still comes back.
        _ = client => {
            let _ = up.await;
        }
        // The pod closed its side: the connection is over (as containerd ends it). The
        // client waits for the error stream to close before it closes its own end, so
        // waiting for its data here would hold both sides open for ever.
        _ = &mut up => {}
    }
    Ok(())
}
