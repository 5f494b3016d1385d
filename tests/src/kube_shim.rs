//! Just enough of an API server and a kubelet for `kubectl exec`, `attach` and
//! `port-forward` to reach crustd's streaming server as they do on a cluster.
//!
//! kubectl asks this server (on 127.0.0.1 of the test's own namespace) for discovery and
//! the pod, then upgrades `.../pods/<name>/exec|attach|portforward` to SPDY. Like the
//! kubelet, the shim turns that request into the CRI call (Exec, Attach, PortForward),
//! and proxies the upgrade to the URL crustd returns: it sends the same upgrade there
//! (from inside crustd's node namespace, where that URL is reachable), relays the 101,
//! and splices the two connections. kubectl is thus a real client of crust's streaming
//! server through the path a kubelet takes.

use bytes::Bytes;
use cri_api::*;
use http_body_util::Full;
use hyper::{Request, Response, StatusCode};
use std::collections::BTreeMap;
use std::convert::Infallible;
use std::path::PathBuf;
use std::process::Command;
use std::sync::Arc;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// A pod as kubectl is to see it: its sandbox and containers (name → id, with stdin
/// and tty as configured).
#[derive(Clone, Default)]
pub struct Pod {
    pub sandbox: String,
    pub containers: BTreeMap<String, (String, bool, bool)>,
}

pub struct Shim {
    pub port: u16,
    home: crate::TempDir,
    kubectl: String,
    ctx: Arc<Ctx>,
    /// Dropping it stops the shim's runtime, which runs on a thread of its own (the
    /// tests themselves run on tokio).
    _stop: std::sync::mpsc::Sender<()>,
}

/// kubectl: on PATH or the Google Cloud SDK's.
pub fn kubectl() -> Option<String> {
    ["kubectl", "/usr/lib/google-cloud-sdk/bin/kubectl"]
        .into_iter()
        .find(|k| {
            Command::new(k)
                .args(["version", "--client"])
                .output()
                .is_ok_and(|o| o.status.success())
        })
        .map(str::to_string)
}

struct Ctx {
    socket: PathBuf,
    node: PathBuf,
    pod: Pod,
    /// Upgrades to WebSocket the shim passed on.
    websockets: std::sync::atomic::AtomicUsize,
}

fn json(v: serde_json::Value) -> Response<Full<Bytes>> {
    let mut r = Response::new(Full::new(Bytes::from(v.to_string())));
    r.headers_mut()
        .insert("content-type", "application/json".parse().unwrap());
    r
}

fn text(status: StatusCode, m: String) -> Response<Full<Bytes>> {
    let mut r = Response::new(Full::new(Bytes::from(m)));
    *r.status_mut() = status;
    r
}

fn decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' && i + 2 < b.len() {
            if let Ok(v) = u8::from_str_radix(&s[i + 1..i + 3], 16) {
                out.push(v);
                i += 3;
                continue;
            }
        }
        out.push(if b[i] == b'+' { b' ' } else { b[i] });
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn query(q: &str) -> Vec<(String, String)> {
    q.split('&')
        .filter_map(|kv| kv.split_once('='))
        .map(|(k, v)| (k.to_string(), decode(v)))
        .collect()
}

fn flag(q: &[(String, String)], k: &str) -> bool {
    q.iter()
        .any(|(a, v)| a == k && matches!(v.as_str(), "1" | "true"))
}

impl Shim {
    /// Serves kubectl for `pod` of the crustd at `socket` (in node namespace `node`).
    pub fn start(socket: PathBuf, node: PathBuf, pod: Pod) -> Shim {
        let kubectl = kubectl().expect("kubectl");
        let (stop, stopped) = std::sync::mpsc::channel::<()>();
        let (port_tx, port_rx) = std::sync::mpsc::channel();
        let ctx = Arc::new(Ctx {
            socket,
            node,
            pod,
            websockets: Default::default(),
        });
        let shared = ctx.clone();
        std::thread::spawn(move || {
            let rt = tokio::runtime::Runtime::new().unwrap();
            let listener = rt
                .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
                .unwrap();
            port_tx.send(listener.local_addr().unwrap().port()).unwrap();
            rt.spawn(serve(listener, ctx));
            let _ = stopped.recv();
        });
        let port = port_rx.recv().unwrap();
        Shim {
            port,
            home: crate::TempDir::new("kubectl-home"),
            kubectl,
            ctx: shared,
            _stop: stop,
        }
    }

    /// How many upgrades to WebSocket went through.
    pub fn websockets(&self) -> usize {
        self.ctx
            .websockets
            .load(std::sync::atomic::Ordering::Relaxed)
    }

    /// `kubectl --server <shim>` with the WebSocket transports on (kubectl 1.30+ tries
    /// them first and falls back to SPDY).
    pub fn kubectl_ws(&self) -> Command {
        let mut c = self.kubectl();
        c.env("KUBECTL_REMOTE_COMMAND_WEBSOCKETS", "true");
        c
    }

    /// `kubectl --server <shim> ARGS`, SPDY only (the websocket transports off), with
    /// a home of its own.
    pub fn kubectl(&self) -> Command {
        let mut c = Command::new(&self.kubectl);
        c.env("HOME", self.home.path())
            .env("KUBECTL_REMOTE_COMMAND_WEBSOCKETS", "false")
            .env("KUBECTL_PORT_FORWARD_WEBSOCKETS", "false")
            .args(["--server", &format!("http://127.0.0.1:{}", self.port)]);
        c
    }
}

async fn serve(listener: tokio::net::TcpListener, ctx: Arc<Ctx>) {
    loop {
        let Ok((sock, _)) = listener.accept().await else {
            continue;
        };
        let ctx = ctx.clone();
        tokio::spawn(async move {
            let svc = hyper::service::service_fn(move |r| handle(ctx.clone(), r));
            let _ = hyper::server::conn::http1::Builder::new()
                .serve_connection(hyper_util::rt::TokioIo::new(sock), svc)
                .with_upgrades()
                .await;
        });
    }
}

async fn handle(
    ctx: Arc<Ctx>,
    req: Request<hyper::body::Incoming>,
) -> Result<Response<Full<Bytes>>, Infallible> {
    let path = req.uri().path().to_string();
    let q = query(req.uri().query().unwrap_or(""));
    let containers: Vec<serde_json::Value> = ctx
        .pod
        .containers
        .iter()
        .map(|(n, (_, stdin, tty))| {
            serde_json::json!({"name": n, "image": "busybox", "stdin": stdin, "tty": tty})
        })
        .collect();
    let statuses: Vec<serde_json::Value> = ctx
        .pod
        .containers
        .keys()
        .map(|n| serde_json::json!({"name": n, "ready": true, "restartCount": 0, "image": "busybox", "imageID": "", "state": {"running": {}}}))
        .collect();
    Ok(match path.as_str() {
        "/api" => json(
            serde_json::json!({"kind": "APIVersions", "versions": ["v1"],
            "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": "127.0.0.1"}]}),
        ),
        "/apis" => {
            json(serde_json::json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": []}))
        }
        "/api/v1" => json(
            serde_json::json!({"kind": "APIResourceList", "groupVersion": "v1", "resources": [
            {"name": "pods", "singularName": "pod", "namespaced": true, "kind": "Pod", "verbs": ["get", "list"], "shortNames": ["po"]},
            {"name": "pods/exec", "singularName": "", "namespaced": true, "kind": "PodExecOptions", "verbs": ["create", "get"]},
            {"name": "pods/attach", "singularName": "", "namespaced": true, "kind": "PodAttachOptions", "verbs": ["create", "get"]},
            {"name": "pods/portforward", "singularName": "", "namespaced": true, "kind": "PodPortForwardOptions", "verbs": ["create", "get"]}]}),
        ),
        "/api/v1/namespaces/default/pods/p" => {
            json(serde_json::json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "p", "namespace": "default", "uid": "u1"},
            "spec": {"containers": containers},
            "status": {"phase": "Running", "containerStatuses": statuses}}))
        }
        "/api/v1/namespaces/default/pods/p/exec"
        | "/api/v1/namespaces/default/pods/p/attach"
        | "/api/v1/namespaces/default/pods/p/portforward" => match cri_url(&ctx, &path, &q).await {
            Ok(url) => proxy(ctx, req, url).await,
            Err(e) => text(StatusCode::INTERNAL_SERVER_ERROR, e),
        },
        _ => text(StatusCode::NOT_FOUND, format!("{path}: not found")),
    })
}

/// The CRI call a kubelet makes for this request: the streaming URL.
async fn cri_url(ctx: &Ctx, path: &str, q: &[(String, String)]) -> Result<String, String> {
    let ch = cri_api::connect_unix(&ctx.socket)
        .await
        .map_err(|e| e.to_string())?;
    let mut c = RuntimeServiceClient::new(ch);
    let container = q
        .iter()
        .find(|(k, _)| k == "container")
        .map(|(_, v)| v.clone())
        .or_else(|| ctx.pod.containers.keys().next().cloned())
        .unwrap_or_default();
    let cid = ctx
        .pod
        .containers
        .get(&container)
        .map(|c| c.0.clone())
        .unwrap_or_default();
    let res = if path.ends_with("/exec") {
        c.exec(ExecRequest {
            container_id: cid,
            cmd: q
                .iter()
                .filter(|(k, _)| k == "command")
                .map(|(_, v)| v.clone())
                .collect(),
            tty: flag(q, "tty"),
            stdin: flag(q, "stdin"),
            stdout: flag(q, "stdout"),
            stderr: flag(q, "stderr"),
        })
        .await
        .map(|r| r.into_inner().url)
    } else if path.ends_with("/attach") {
        c.attach(AttachRequest {
            container_id: cid,
            tty: flag(q, "tty"),
            stdin: flag(q, "stdin"),
            stdout: flag(q, "stdout"),
            stderr: flag(q, "stderr"),
        })
        .await
        .map(|r| r.into_inner().url)
    } else {
        c.port_forward(PortForwardRequest {
            pod_sandbox_id: ctx.pod.sandbox.clone(),
            port: vec![],
        })
        .await
        .map(|r| r.into_inner().url)
    };
    res.map_err(|s| format!("{:?}: {}", s.code(), s.message()))
}

/// Sends kubectl's upgrade on to `url` and splices the connections on a 101.
async fn proxy(
    ctx: Arc<Ctx>,
    mut req: Request<hyper::body::Incoming>,
    url: String,
) -> Response<Full<Bytes>> {
    let rest = url.trim_start_matches("http://");
    let (hostport, path) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
    let hp = hostport.to_string();
    let node = ctx.node.clone();
    let conn = tokio::task::spawn_blocking(move || {
        std::thread::scope(|s| {
            s.spawn(|| {
                crate::enter_netns(&node);
                std::net::TcpStream::connect(&hp)
            })
            .join()
            .unwrap()
        })
    })
    .await
    .unwrap();
    let conn = match conn {
        Ok(c) => c,
        Err(e) => return text(StatusCode::BAD_GATEWAY, format!("connecting to {url}: {e}")),
    };
    conn.set_nonblocking(true).unwrap();
    let mut back = tokio::net::TcpStream::from_std(conn).unwrap();
    // The client's request as it came (a kubelet's proxy passes the upgrade through):
    // its method, and every header but Host and the body's.
    let mut head = format!("{} {path} HTTP/1.1\r\nHost: {hostport}\r\n", req.method());
    for (k, v) in req.headers() {
        if k == "host" || k == "content-length" || k == "transfer-encoding" {
            continue;
        }
        head.push_str(&format!("{k}: {}\r\n", v.to_str().unwrap_or("")));
    }
    if req.method() != hyper::Method::GET {
        head.push_str("Content-Length: 0\r\n");
    }
    head.push_str("\r\n");
    if back.write_all(head.as_bytes()).await.is_err() {
        return text(StatusCode::BAD_GATEWAY, "writing upstream".into());
    }
    // The answer's head, byte by byte, so nothing after it is consumed here.
    let mut resp = Vec::new();
    while !resp.ends_with(b"\r\n\r\n") {
        let mut b = [0u8; 1];
        match back.read(&mut b).await {
            Ok(1) => resp.push(b[0]),
            _ => return text(StatusCode::BAD_GATEWAY, "upstream closed".into()),
        }
    }
    let resp = String::from_utf8_lossy(&resp).into_owned();
    let status: u16 = resp
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(502);
    if status != 101 {
        let mut body = Vec::new();
        let _ = tokio::time::timeout(
            std::time::Duration::from_secs(2),
            back.read_to_end(&mut body),
        )
        .await;
        return text(
            StatusCode::from_u16(status).unwrap_or(StatusCode::BAD_GATEWAY),
            String::from_utf8_lossy(&body).into_owned(),
        );
    }
    let headers: Vec<(String, String)> = resp
        .lines()
        .skip(1)
        .filter_map(|l| {
            let (k, v) = l.split_once(':')?;
            Some((k.trim().to_ascii_lowercase(), v.trim().to_string()))
        })
        .collect();
    if headers
        .iter()
        .any(|(k, v)| k == "upgrade" && v.eq_ignore_ascii_case("websocket"))
    {
        ctx.websockets
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }
    let up = hyper::upgrade::on(&mut req);
    tokio::spawn(async move {
        if let Ok(u) = up.await {
            let mut front = hyper_util::rt::TokioIo::new(u);
            let _ = tokio::io::copy_bidirectional(&mut front, &mut back).await;
        }
    });
    let mut r = Response::new(Full::new(Bytes::new()));
    *r.status_mut() = StatusCode::SWITCHING_PROTOCOLS;
    for (k, v) in headers {
        if k == "content-length" || k == "date" {
            continue;
        }
        if let (Ok(k), Ok(v)) = (
            hyper::header::HeaderName::from_bytes(k.as_bytes()),
            hyper::header::HeaderValue::from_str(&v),
        ) {
            r.headers_mut().append(k, v);
        }
    }
    r
}
