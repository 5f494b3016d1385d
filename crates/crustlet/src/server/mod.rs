//! The crustlet's HTTPS server: what the apiserver, kubectl (through the apiserver) and
//! metrics-server ask a node for, on `--port` (10250).
//!
//! | path | what | authorized as |
//! | --- | --- | --- |
//! | `/healthz` | `ok` | nodes/proxy |
//! | `/pods` | the pods this node runs (PodList) | nodes/proxy |
//! | `/containerLogs/<ns>/<pod>/<container>` | a container's log ([`logs`]) | nodes/proxy |
//! | `/exec`, `/attach`, `/run` `/<ns>/<pod>[/<uid>]/<container>` | a runtime stream ([`stream`]) | nodes/proxy |
//! | `/portForward/<ns>/<pod>[/<uid>]` | the same for ports | nodes/proxy |
//! | `/stats/summary` | the Summary ([`stats`]) | nodes/stats |
//! | `/metrics/resource`, `/metrics` | Prometheus text ([`metrics`]) | nodes/metrics |
//!
//! Every request is authenticated and authorized first ([`auth`]); 401 and 403 as the
//! kubelet answers them. `--read-only-port`, when set, serves `/healthz`, `/pods`,
//! `/stats` and `/metrics` over plain HTTP to anyone, as the kubelet's does.

pub mod auth;
pub mod logs;
pub mod metrics;
pub mod stats;
pub mod stream;
pub mod tls;

use crate::config::ServerConfig;
use crate::Ctx;
use bytes::Bytes;
use http_body_util::{combinators::BoxBody, BodyExt, Full, StreamBody};
use hyper::body::Frame;
use hyper::{Method, Request, Response, StatusCode};
use k8s_openapi::api::core::v1::Pod;
use parking_lot::Mutex;
use std::collections::BTreeMap;
use std::sync::Arc;

type Body = BoxBody<Bytes, std::io::Error>;

/// What the pod workers tell the server: the pods as last synced (with the status they
/// computed), and counters for `/metrics`.
#[derive(Default)]
pub struct Seen {
    /// The worker's own pod (shared, not copied) and its status, put together only
    /// when `/pods` is asked for: workers report every second, `/pods` is read seldom.
    pods: Mutex<BTreeMap<String, (Arc<Pod>, k8s_openapi::api::core::v1::PodStatus)>>,
    /// The claimed volumes each pod's worker mounted that are measured (by pod uid).
    measured: Mutex<BTreeMap<String, Vec<crate::inputs::Measured>>>,
    pub metrics: metrics::Own,
}

impl Seen {
    /// The pod with the status its worker computed.
    pub fn pod(&self, pod: &Arc<Pod>, status: &k8s_openapi::api::core::v1::PodStatus) {
        let uid = crate::spec::uid(pod);
        let mut pods = self.pods.lock();
        let same = pods
            .get(uid)
            .is_some_and(|(p, st)| Arc::ptr_eq(p, pod) && st == status);
        if !same {
            pods.insert(uid.to_string(), (pod.clone(), status.clone()));
        }
    }

    /// The pods still running or starting (neither finished nor being deleted), for the
    /// eviction manager.
    pub fn running(&self) -> Vec<Arc<Pod>> {
        self.pods
            .lock()
            .values()
            .filter(|(p, st)| {
                p.metadata.deletion_timestamp.is_none()
                    && !matches!(st.phase.as_deref(), Some("Succeeded" | "Failed"))
            })
            .map(|(p, _)| p.clone())
            .collect()
    }

    /// The pod's worker is done with it.
    /// The pod's measured claimed volumes, as its worker last made its volumes.
    pub fn measured(&self, uid: &str, measured: &[crate::inputs::Measured]) {
        let mut all = self.measured.lock();
        if measured.is_empty() {
            all.remove(uid);
        } else if all.get(uid).is_none_or(|m| m != measured) {
            all.insert(uid.to_string(), measured.to_vec());
        }
    }

    /// Every pod's measured claimed volumes, by pod uid.
    pub fn all_measured(&self) -> BTreeMap<String, Vec<crate::inputs::Measured>> {
        self.measured.lock().clone()
    }

    pub fn gone(&self, uid: &str) {
        self.measured.lock().remove(uid);
        self.pods.lock().remove(uid);
        self.metrics.forget_pod(uid);
    }

    fn list(&self) -> Vec<Pod> {
        let pods = self.pods.lock();
        pods.values()
            .map(|(pod, status)| {
                let mut p = Pod::clone(pod);
                p.status = Some(status.clone());
                p.metadata.managed_fields = None;
                p
            })
            .collect()
    }
}

/// Where a request goes.
#[derive(Debug, PartialEq, Eq)]
pub enum Route {
    Healthz,
    Pods,
    ContainerLogs {
        ns: String,
        pod: String,
        container: String,
    },
    /// `exec`, `attach` or `run`.
    Command {
        kind: &'static str,
        ns: String,
        pod: String,
        uid: Option<String>,
        container: String,
    },
    PortForward {
        ns: String,
        pod: String,
        uid: Option<String>,
    },
    Summary,
    ResourceMetrics,
    Metrics,
    /// `/metrics/probes`: the probes' results.
    ProbeMetrics,
    /// `/metrics/cadvisor`: the containers' usage in cAdvisor's names.
    CadvisorMetrics,
    /// `/configz`: the settings in force, as a KubeletConfiguration.
    Configz,
    /// `/logs/<path>`: the node's `/var/log`.
    NodeLogs(String),
    /// 400 with this message.
    Bad(String),
    NotFound,
}

impl Route {
    /// Whether the read-only port serves it.
    fn read_only(&self) -> bool {
        matches!(
            self,
            Route::Healthz
                | Route::Pods
                | Route::Summary
                | Route::ResourceMetrics
                | Route::Metrics
                | Route::ProbeMetrics
                | Route::CadvisorMetrics
        )
    }
}

/// The crustlet's settings in the shape of the kubelet's `/configz`: a
/// KubeletConfiguration (the fields the crustlet has) under `kubeletconfig`.
fn configz(cfg: &crate::config::Config, sc: &crate::config::ServerConfig) -> serde_json::Value {
    use crate::node::status::Limit;
    let limit = |l: Limit| match l {
        Limit::Amount(a) => a.to_string(),
        Limit::Percent(p) => format!("{p}%"),
    };
    let e = &cfg.eviction_hard;
    let mut v = serde_json::json!({
        "enableServer": sc.port != 0,
        "staticPodPath": cfg.pod_manifest_path,
        "address": sc.address,
        "port": sc.port,
        "readOnlyPort": sc.read_only_port,
        "tlsCertFile": sc.tls_cert_file,
        "tlsPrivateKeyFile": sc.tls_private_key_file,
        "authentication": {
            "x509": {"clientCAFile": sc.client_ca_file},
            "webhook": {"enabled": sc.token_webhook},
            "anonymous": {"enabled": sc.anonymous_auth},
        },
        "authorization": {"mode": format!("{:?}", sc.authorization_mode)},
        "clusterDomain": cfg.cluster_domain,
        "clusterDNS": cfg.cluster_dns,
        "maxPods": cfg.max_pods,
        "allowedUnsafeSysctls": cfg.allowed_unsafe_sysctls,
        "cgroupRoot": cfg.cgroup_root,
        "cgroupsPerQOS": true,
        "cgroupDriver": cfg.driver().name(),
        "imageGCHighThresholdPercent": cfg.image_gc_high,
        "imageGCLowThresholdPercent": cfg.image_gc_low,
        "imageMinimumGCAge": go_duration_text(cfg.image_minimum_gc_age),
        "oomScoreAdj": cfg.oom_score_adj,
        "evictionHard": {
            "memory.available": limit(e.memory_available),
            "nodefs.available": limit(e.nodefs_available),
            "nodefs.inodesFree": limit(e.nodefs_inodes_free),
            "pid.available": limit(e.pid_available),
        },
        "containerLogMaxSize": sc.log_max_size.to_string(),
        "containerLogMaxFiles": sc.log_max_files,
        "containerRuntimeEndpoint": format!("unix://{}", cfg.runtime_socket.display()),
        "registerNode": cfg.register_node,
        "nodeStatusUpdateFrequency": "10s",
        "nodeLeaseDurationSeconds": 40,
    });
    // The kubelet leaves out what is empty, zero or unset (Go's omitempty).
    fn prune(v: &mut serde_json::Value) {
        if let Some(o) = v.as_object_mut() {
            o.values_mut().for_each(prune);
            o.retain(|_, x| {
                !(x.is_null()
                    || x.as_str() == Some("")
                    || x.as_u64() == Some(0)
                    || x.as_array().is_some_and(|a| a.is_empty())
                    || x.as_object().is_some_and(|o| o.is_empty()))
            });
        }
    }
    prune(&mut v);
    serde_json::json!({ "kubeletconfig": v })
}

/// `/logs/<rel>` under `base`: a file's bytes, or a folder's listing as links (what
/// `kubectl get --raw .../proxy/logs/` shows from a kubelet). Nothing outside `base`.
fn node_log(base: &std::path::Path, rel: &str) -> Response<Body> {
    if rel.split('/').any(|p| p == "..") {
        return text(400, "invalid path");
    }
    let path = base.join(rel.trim_start_matches('/'));
    let resolved = match std::fs::canonicalize(&path) {
        Ok(p) => p,
        Err(_) => return text(404, "404 page not found"),
    };
    let root = std::fs::canonicalize(base).unwrap_or_else(|_| base.to_path_buf());
    if !resolved.starts_with(&root) {
        return text(404, "404 page not found");
    }
    if resolved.is_dir() {
        let mut names: Vec<String> = std::fs::read_dir(&resolved)
            .map(|r| {
                r.flatten()
                    .map(|e| {
                        let n = e.file_name().to_string_lossy().into_owned();
                        if e.path().is_dir() {
                            n + "/"
                        } else {
                            n
                        }
                    })
                    .collect()
            })
            .unwrap_or_default();
        names.sort();
        // As Go's file server lists a folder (the kubelet's /logs is one).
        let mut html = String::from(
            "<!doctype html>\n<meta name=\"viewport\" content=\"width=device-width\">\n<pre>\n",
        );
        for n in names {
            let href = n.replace('"', "%22");
            let shown = n
                .replace('&', "&amp;")
                .replace('<', "&lt;")
                .replace('>', "&gt;");
            html.push_str(&format!("<a href=\"{href}\">{shown}</a>\n"));
        }
        html.push_str("</pre>\n");
        return full(200, "text/html; charset=utf-8", html);
    }
    let (f, len) = match std::fs::File::open(&resolved).and_then(|f| {
        let len = f.metadata()?.len();
        Ok((f, len))
    }) {
        Ok(x) => x,
        Err(e) => return text(403, format!("{e}")),
    };
    let mut r = Response::new(file_body(f, len));
    let h = r.headers_mut();
    h.insert(
        hyper::header::CONTENT_TYPE,
        "text/plain; charset=utf-8".parse().unwrap(),
    );
    h.insert(hyper::header::CONTENT_LENGTH, len.into());
    r
}

/// The bytes a log file reads when opened.
const FILE_CHUNK: usize = 64 * 1024;

/// A file's first `len` bytes (its size when opened: a log still growing is served as
/// it was, as Go's file server does) as a body read [`FILE_CHUNK`] at a time, so a large
/// log costs the crustlet a buffer, not its size.
fn file_body(f: std::fs::File, len: u64) -> Body {
    use tokio::io::AsyncReadExt;
    let f = Some(tokio::fs::File::from_std(f).take(len));
    let chunks = futures::stream::unfold(f, |f| async move {
        let mut f = f?;
        let mut buf = vec![0u8; FILE_CHUNK];
        match f.read(&mut buf).await {
            Ok(0) => None,
            Ok(n) => {
                buf.truncate(n);
                Some((Ok(Frame::data(Bytes::from(buf))), Some(f)))
            }
            Err(e) => Some((Err(e), None)),
        }
    });
    BodyExt::boxed(StreamBody::new(chunks))
}

/// `%XX` decoding of a path segment or query value (`+` a space in queries).
pub fn decode(s: &str, plus: bool) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'%' if i + 2 < b.len() => {
                let hex = |c: u8| (c as char).to_digit(16);
                match (hex(b[i + 1]), hex(b[i + 2])) {
                    (Some(h), Some(l)) => {
                        out.push((h * 16 + l) as u8);
                        i += 3;
                        continue;
                    }
                    _ => out.push(b'%'),
                }
            }
            b'+' if plus => out.push(b' '),
            c => out.push(c),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

pub fn query(q: Option<&str>) -> Vec<(String, String)> {
    q.unwrap_or("")
        .split('&')
        .filter(|kv| !kv.is_empty())
        .map(|kv| match kv.split_once('=') {
            Some((k, v)) => (decode(k, true), decode(v, true)),
            None => (decode(kv, true), String::new()),
        })
        .collect()
}

pub fn route(path: &str) -> Route {
    let segs: Vec<String> = path
        .trim_start_matches('/')
        .split('/')
        .map(|s| decode(s, false))
        .collect();
    let s: Vec<&str> = segs.iter().map(String::as_str).collect();
    let own = |x: &str| x.to_string();
    match s.as_slice() {
        ["healthz", ..] => Route::Healthz,
        ["pods"] | ["pods", ""] => Route::Pods,
        ["containerLogs", ns, pod, container] if !container.is_empty() => Route::ContainerLogs {
            ns: own(ns),
            pod: own(pod),
            container: own(container),
        },
        ["containerLogs", ..] => {
            Route::Bad("expected /containerLogs/<namespace>/<pod>/<container>".into())
        }
        [kind @ ("exec" | "attach" | "run"), ns, pod, rest @ ..]
            if (1..=2).contains(&rest.len()) =>
        {
            let kind = match *kind {
                "exec" => "exec",
                "attach" => "attach",
                _ => "run",
            };
            let (uid, container) = match rest {
                [c] => (None, own(c)),
                [u, c] => (Some(own(u)), own(c)),
                _ => unreachable!(),
            };
            Route::Command {
                kind,
                ns: own(ns),
                pod: own(pod),
                uid,
                container,
            }
        }
        ["portForward", ns, pod] => Route::PortForward {
            ns: own(ns),
            pod: own(pod),
            uid: None,
        },
        ["portForward", ns, pod, uid] => Route::PortForward {
            ns: own(ns),
            pod: own(pod),
            uid: Some(own(uid)),
        },
        ["stats", "summary"] | ["stats", "summary", ""] => Route::Summary,
        ["metrics", "resource"] => Route::ResourceMetrics,
        ["metrics", "probes"] => Route::ProbeMetrics,
        ["metrics", "cadvisor"] => Route::CadvisorMetrics,
        ["metrics"] => Route::Metrics,
        ["configz"] => Route::Configz,
        ["logs", rest @ ..] => Route::NodeLogs(rest.join("/")),
        _ => Route::NotFound,
    }
}

struct Server {
    ctx: Arc<Ctx>,
    auth: auth::Auth,
    sampler: stats::CpuSampler,
    /// What `/configz` answers (the settings do not change while it runs).
    configz: serde_json::Value,
}

fn full(status: u16, content_type: &str, body: impl Into<Bytes>) -> Response<Body> {
    let mut r = Response::new(
        Full::new(body.into())
            .map_err(|never| match never {})
            .boxed(),
    );
    *r.status_mut() = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    if let Ok(v) = content_type.parse() {
        r.headers_mut().insert(hyper::header::CONTENT_TYPE, v);
    }
    r
}

fn text(status: u16, msg: impl Into<String>) -> Response<Body> {
    let mut m = msg.into();
    if !m.ends_with('\n') {
        m.push('\n');
    }
    full(status, "text/plain; charset=utf-8", m)
}

fn json(v: &impl serde::Serialize) -> Response<Body> {
    full(
        200,
        "application/json",
        serde_json::to_vec(v).unwrap_or_default(),
    )
}

/// Binds the ports and serves until the process ends; log rotation and the node's CPU
/// sampling run beside it.
pub async fn start(ctx: Arc<Ctx>, sc: ServerConfig) -> anyhow::Result<()> {
    let ips: Vec<String> = vec![ctx.node_ip.clone()];
    let server = Arc::new(Server {
        auth: auth::Auth::new(
            sc.anonymous_auth,
            sc.token_webhook,
            sc.authorization_mode,
            ctx.cfg.node_name.clone(),
            ctx.client.clone(),
        ),
        sampler: Default::default(),
        configz: configz(&ctx.cfg, &sc),
        ctx: ctx.clone(),
    });
    if sc.port != 0 {
        let (cert, key) = tls::serving_files(
            sc.tls_cert_file.as_deref(),
            sc.tls_private_key_file.as_deref(),
            &ctx.cfg.cert_dir,
            &ctx.cfg.node_name,
            &ips,
        )?;
        let (tls_cfg, verifier) = tls::server_config(&cert, &key, sc.client_ca_file.as_deref())?;
        let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(tls_cfg));
        tokio::spawn(listen(
            join(&sc.address, sc.port),
            Some((acceptor, verifier)),
            server.clone(),
        ));
    }
    if sc.read_only_port != 0 {
        tokio::spawn(listen(
            join(&sc.address, sc.read_only_port),
            None,
            server.clone(),
        ));
    }
    tokio::spawn(logs::rotate_loop(
        ctx.cri.clone(),
        sc.log_max_size,
        sc.log_max_files,
    ));
    // A CPU sample every 10 s, so the node's usageNanoCores has a recent base.
    let s = server.clone();
    tokio::spawn(async move {
        loop {
            s.sampler.sample();
            tokio::time::sleep(std::time::Duration::from_secs(10)).await;
        }
    });
    Ok(())
}

/// Binds `addr` and serves it. A port another process holds is an error in the log,
/// and the node goes on without the server: its pods matter more than its logs. (No
/// retries: a crustlet that took the port back the moment a kubelet beside it
/// restarted would keep that kubelet from starting.)
/// The TLS acceptor, and the verifier of client certificates (with a client CA file).
type Tls = (tokio_rustls::TlsAcceptor, Option<tls::ClientVerifier>);

async fn listen(addr: String, tls: Option<Tls>, server: Arc<Server>) {
    let what = if tls.is_some() {
        "HTTPS"
    } else {
        "read-only HTTP"
    };
    match tokio::net::TcpListener::bind(&addr).await {
        Ok(l) => {
            tracing::info!(%addr, "serving {what}");
            serve(l, tls, server).await
        }
        Err(e) => tracing::error!(%addr, "cannot listen for {what}: {e}; no server"),
    }
}

fn join(address: &str, port: u16) -> String {
    if address.contains(':') && !address.starts_with('[') {
        format!("[{address}]:{port}")
    } else {
        format!("{address}:{port}")
    }
}

async fn serve(listener: tokio::net::TcpListener, tls: Option<Tls>, server: Arc<Server>) {
    loop {
        let (sock, peer) = match listener.accept().await {
            Ok(x) => x,
            Err(e) => {
                tracing::warn!("accept: {e}");
                tokio::time::sleep(std::time::Duration::from_millis(100)).await;
                continue;
            }
        };
        let server = server.clone();
        let tls = tls.clone();
        tokio::spawn(async move {
            let secure = tls.is_some();
            let builder = hyper::server::conn::http1::Builder::new();
            match tls {
                Some((acceptor, verifier)) => {
                    let stream = match tokio::time::timeout(
                        std::time::Duration::from_secs(10),
                        acceptor.accept(sock),
                    )
                    .await
                    {
                        Ok(Ok(s)) => s,
                        Ok(Err(e)) => {
                            tracing::debug!(%peer, "TLS handshake: {e}");
                            return;
                        }
                        Err(_) => return,
                    };
                    let user =
                        tls::client_user(verifier.as_ref(), stream.get_ref().1.peer_certificates());
                    let user = Arc::new(user);
                    let svc = hyper::service::service_fn(move |r| {
                        let (server, user) = (server.clone(), user.clone());
                        async move {
                            Ok::<_, std::convert::Infallible>(
                                server
                                    .handle(r, secure, user.as_ref().as_ref().map(|u| u.as_ref()))
                                    .await,
                            )
                        }
                    });
                    if stream.get_ref().1.alpn_protocol() == Some(b"h2") {
                        let _ = hyper::server::conn::http2::Builder::new(
                            hyper_util::rt::TokioExecutor::new(),
                        )
                        .serve_connection(hyper_util::rt::TokioIo::new(stream), svc)
                        .await;
                        return;
                    }
                    let _ = builder
                        .serve_connection(hyper_util::rt::TokioIo::new(stream), svc)
                        .with_upgrades()
                        .await;
                }
                None => {
                    let svc = hyper::service::service_fn(move |r| {
                        let server = server.clone();
                        async move {
                            Ok::<_, std::convert::Infallible>(server.handle(r, secure, None).await)
                        }
                    });
                    let _ = builder
                        .serve_connection(hyper_util::rt::TokioIo::new(sock), svc)
                        .with_upgrades()
                        .await;
                }
            }
        });
    }
}

impl Server {
    async fn handle(
        &self,
        req: Request<hyper::body::Incoming>,
        secure: bool,
        cert_user: Option<Result<&(String, Vec<String>), &()>>,
    ) -> Response<Body> {
        let path = req.uri().path().to_string();
        let r = self.respond(req, secure, cert_user).await;
        self.ctx.seen.metrics.request(&path, r.status().as_u16());
        r
    }

    async fn respond(
        &self,
        req: Request<hyper::body::Incoming>,
        secure: bool,
        cert_user: Option<Result<&(String, Vec<String>), &()>>,
    ) -> Response<Body> {
        let path = req.uri().path().to_string();
        let route = route(&path);
        // A path the kubelet does not serve is a 404 before anyone is asked who they are,
        // as the kubelet's router answers it.
        if matches!(route, Route::NotFound) {
            return text(404, "404 page not found");
        }
        if let Some(refused) = self.refusal(&req, &route, &path, secure, cert_user).await {
            return refused;
        }
        let q = query(req.uri().query());
        match route {
            Route::Healthz => text(200, "ok"),
            Route::Pods => {
                let list = serde_json::json!({
                    "kind": "PodList", "apiVersion": "v1", "metadata": {},
                    "items": self.ctx.seen.list(),
                });
                json(&list)
            }
            Route::ContainerLogs { ns, pod, container } => {
                self.container_logs(&ns, &pod, &container, &q).await
            }
            Route::Command {
                kind: "run",
                ns,
                pod,
                uid,
                container,
            } => {
                self.run(req.method(), &ns, &pod, uid.as_deref(), &container, &q)
                    .await
            }
            Route::Command {
                kind,
                ns,
                pod,
                uid,
                container,
            } => {
                let url = self
                    .exec_url(kind, &ns, &pod, uid.as_deref(), &container, &q)
                    .await;
                upgrade(req, url).await
            }
            Route::PortForward { ns, pod, uid } => {
                let url = self.port_forward_url(&ns, &pod, uid.as_deref()).await;
                upgrade(req, url).await
            }
            Route::Summary => self.summary(&q).await,
            Route::ResourceMetrics => self.resource_metrics().await,
            Route::Metrics => {
                let pods = self.running_pods().await;
                let measured = self.ctx.seen.all_measured();
                // statfs of each claimed volume, off the runtime's threads.
                let volumes = tokio::task::spawn_blocking(move || {
                    let t = stats::now();
                    let all = measured.values().flatten();
                    all.filter_map(|m| stats::claimed_volume_stats(m, &t))
                        .collect::<Vec<_>>()
                })
                .await
                .unwrap_or_default();
                full(
                    200,
                    "text/plain; version=0.0.4; charset=utf-8",
                    self.ctx.seen.metrics.render(pods.0, &pods.1, &volumes),
                )
            }
            Route::ProbeMetrics => full(
                200,
                "text/plain; version=0.0.4; charset=utf-8",
                self.ctx.seen.metrics.render_probes(),
            ),
            Route::CadvisorMetrics => self.cadvisor_metrics().await,
            Route::Configz => json(&self.configz),
            Route::NodeLogs(rel) => node_log(std::path::Path::new("/var/log"), &rel),
            Route::Bad(m) => text(400, m),
            Route::NotFound => text(404, "404 page not found"),
        }
    }

    /// The answer to a request that may not go on, if this one may not: on the secure
    /// port whoever cannot be authenticated (401) or is not authorized (403); on the
    /// read-only port any path it does not serve (404).
    async fn refusal(
        &self,
        req: &Request<hyper::body::Incoming>,
        route: &Route,
        path: &str,
        secure: bool,
        cert_user: Option<Result<&(String, Vec<String>), &()>>,
    ) -> Option<Response<Body>> {
        tracing::debug!(method = %req.method(), uri = %req.uri(), version = ?req.version(), "request");
        if secure {
            let authz = req
                .headers()
                .get(hyper::header::AUTHORIZATION)
                .and_then(|v| v.to_str().ok());
            let user = match self.auth.authenticate(cert_user, authz).await {
                Ok(u) => u,
                // The kubelet's word, without a newline.
                Err(_) => return Some(full(401, "text/plain; charset=utf-8", "Unauthorized")),
            };
            let attrs = auth::attributes(req.method(), path);
            if let Err(auth::Refusal::Forbidden(m)) = self.auth.authorize(&user, &attrs).await {
                tracing::debug!(user = %user.name, %path, "{m}");
                return Some(full(403, "text/plain; charset=utf-8", m));
            }
        } else if !route.read_only() {
            return Some(text(404, "404 page not found"));
        }
        None
    }

    /// `/run`: the command's output, run to its end in the running container.
    async fn run(
        &self,
        method: &Method,
        ns: &str,
        pod: &str,
        uid: Option<&str>,
        container: &str,
        q: &[(String, String)],
    ) -> Response<Body> {
        if method != Method::POST {
            return text(405, "/run takes POST");
        }
        let cmd = q
            .iter()
            .find(|(k, _)| k == "cmd")
            .map(|(_, v)| v.clone())
            .unwrap_or_default();
        if cmd.is_empty() {
            return text(400, "missing cmd");
        }
        let out = match stream::running(&self.ctx.cri, ns, pod, uid, container).await {
            Ok(i) => stream::run(&self.ctx.cri, &i.id, &cmd).await,
            Err(e) => Err(e),
        };
        match out {
            Ok(o) => full(200, "text/plain; charset=utf-8", o),
            Err((code, m)) => text(code, m),
        }
    }

    /// `/exec` and `/attach`: the runtime's stream URL for the running container.
    async fn exec_url(
        &self,
        kind: &str,
        ns: &str,
        pod: &str,
        uid: Option<&str>,
        container: &str,
        q: &[(String, String)],
    ) -> Result<String, stream::Failure> {
        let i = stream::running(&self.ctx.cri, ns, pod, uid, container).await?;
        stream::exec_url(&self.ctx.cri, &i.id, &stream::command(q), kind == "attach").await
    }

    /// `/portForward`: the runtime's stream URL for the pod's ready sandbox.
    async fn port_forward_url(
        &self,
        ns: &str,
        pod: &str,
        uid: Option<&str>,
    ) -> Result<String, stream::Failure> {
        let sbs = stream::sandboxes(&self.ctx.cri, ns, pod, uid).await?;
        match sbs
            .iter()
            .find(|s| s.state == cri_api::PodSandboxState::SandboxReady as i32)
        {
            Some(sb) => stream::port_forward_url(&self.ctx.cri, &sb.id).await,
            None => Err((400, format!("pod {ns}/{pod} is not running"))),
        }
    }

    /// `/stats/summary`, whole or (`only_cpu_and_memory`) as metrics-server asks.
    async fn summary(&self, q: &[(String, String)]) -> Response<Body> {
        let only = q
            .iter()
            .any(|(k, v)| k == "only_cpu_and_memory" && logs::parse_bool(v) == Some(true));
        match stats::summary(&self.ctx, &self.sampler, only).await {
            Ok(s) => json(&s),
            Err(e) => text(500, format!("{e:#}")),
        }
    }

    /// `/metrics/resource`: answered even when the runtime is not, with what is known.
    async fn resource_metrics(&self) -> Response<Body> {
        let s = stats::summary(&self.ctx, &self.sampler, true).await;
        if let Err(e) = &s {
            tracing::warn!("resource metrics: {e:#}");
        }
        full(
            200,
            "text/plain; version=0.0.4; charset=utf-8",
            metrics::resource(s.ok().as_ref()),
        )
    }

    /// `/metrics/cadvisor`: answered even when the runtime is not, with what is known.
    async fn cadvisor_metrics(&self) -> Response<Body> {
        let s = stats::summary(&self.ctx, &self.sampler, false).await;
        if let Err(e) = &s {
            tracing::warn!("cadvisor metrics: {e:#}");
        }
        full(
            200,
            "text/plain; version=0.0.4; charset=utf-8",
            metrics::cadvisor(s.ok().as_ref()),
        )
    }

    /// Pods with a ready sandbox, and containers by state, in the runtime.
    async fn running_pods(&self) -> (usize, Vec<(String, usize)>) {
        let mut rt = self.ctx.cri.runtime.clone();
        let pods = rt
            .list_pod_sandbox(cri_api::ListPodSandboxRequest { filter: None })
            .await
            .map(|r| {
                r.into_inner()
                    .items
                    .iter()
                    .filter(|s| s.state == cri_api::PodSandboxState::SandboxReady as i32)
                    .count()
            })
            .unwrap_or(0);
        let mut by_state: BTreeMap<String, usize> = BTreeMap::new();
        if let Ok(r) = rt
            .list_containers(cri_api::ListContainersRequest { filter: None })
            .await
        {
            for c in r.into_inner().containers {
                let s = match cri_api::ContainerState::try_from(c.state) {
                    Ok(cri_api::ContainerState::ContainerCreated) => "created",
                    Ok(cri_api::ContainerState::ContainerRunning) => "running",
                    Ok(cri_api::ContainerState::ContainerExited) => "exited",
                    _ => "unknown",
                };
                *by_state.entry(s.to_string()).or_default() += 1;
            }
        }
        (pods, by_state.into_iter().collect())
    }

    async fn container_logs(
        &self,
        ns: &str,
        pod: &str,
        container: &str,
        q: &[(String, String)],
    ) -> Response<Body> {
        let opts = match logs::Options::parse(q, k8s_openapi::jiff::Timestamp::now()) {
            Ok(o) => o,
            Err(m) => return text(400, m),
        };
        let instances = match stream::instances(&self.ctx.cri, ns, pod, None, container).await {
            Ok(i) => i,
            Err((code, m)) => return text(code, m),
        };
        let inst = if opts.previous {
            match instances.get(1) {
                Some(i) => i.clone(),
                None => {
                    return text(
                        400,
                        format!(
                            "previous terminated container {container:?} in pod {pod:?} not found"
                        ),
                    )
                }
            }
        } else {
            instances[0].clone()
        };
        let mut rt = self.ctx.cri.runtime.clone();
        let status = rt
            .container_status(cri_api::ContainerStatusRequest {
                container_id: inst.id.clone(),
                verbose: false,
            })
            .await
            .ok()
            .and_then(|r| r.into_inner().status);
        let path = match status
            .as_ref()
            .map(|s| s.log_path.clone())
            .filter(|p| !p.is_empty())
        {
            Some(p) => std::path::PathBuf::from(p),
            None => {
                return text(
                    404,
                    format!("container {container:?} in pod {pod:?} has no log"),
                )
            }
        };
        let (tx, rx) = tokio::sync::mpsc::channel::<Bytes>(16);
        let cri = self.ctx.cri.clone();
        let id = inst.id.clone();
        let follow_running = !opts.previous;
        let handle = tokio::runtime::Handle::current();
        tokio::task::spawn_blocking(move || {
            let running = || {
                follow_running
                    && handle.block_on(async {
                        let mut rt = cri.runtime.clone();
                        rt.container_status(cri_api::ContainerStatusRequest {
                            container_id: id.clone(),
                            verbose: false,
                        })
                        .await
                        .ok()
                        .and_then(|r| r.into_inner().status)
                        .is_some_and(|s| {
                            s.state == cri_api::ContainerState::ContainerRunning as i32
                        })
                    })
            };
            logs::copy(logs::files_of(&path), &opts, &tx, running);
        });
        let body = StreamBody::new(futures::stream::unfold(rx, |mut rx| async move {
            rx.recv()
                .await
                .map(|b| (Ok::<_, std::io::Error>(Frame::data(b)), rx))
        }));
        let mut r = Response::new(BodyExt::boxed(body));
        r.headers_mut()
            .insert(hyper::header::CONTENT_TYPE, "text/plain".parse().unwrap());
        r
    }
}

/// The upgrade proxied to the runtime's stream `url`, or why there is none.
async fn upgrade(
    req: Request<hyper::body::Incoming>,
    url: Result<String, stream::Failure>,
) -> Response<Body> {
    match url {
        Ok(u) => proxy_upgrade(req, &u).await,
        Err((code, m)) => text(code, m),
    }
}

/// Passes the client's upgrade to the runtime's URL; on its 101, splices the two.
async fn proxy_upgrade(mut req: Request<hyper::body::Incoming>, url: &str) -> Response<Body> {
    let upgrade = req
        .headers()
        .get(hyper::header::CONNECTION)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.to_ascii_lowercase().contains("upgrade"));
    if !upgrade {
        return text(400, "Upgrade request required");
    }
    let up = match stream::upgrade_upstream(req.method(), req.headers(), url).await {
        Ok(u) => u,
        Err(e) => return text(502, e),
    };
    if up.status != 101 {
        return full(up.status, "text/plain; charset=utf-8", up.body);
    }
    let on = hyper::upgrade::on(&mut req);
    let mut back = up.conn;
    tokio::spawn(async move {
        if let Ok(u) = on.await {
            let mut front = hyper_util::rt::TokioIo::new(u);
            let _ = tokio::io::copy_bidirectional(&mut front, &mut back).await;
        }
    });
    let mut r = full(101, "", Bytes::new());
    r.headers_mut().remove(hyper::header::CONTENT_TYPE);
    for (k, v) in up.headers {
        if k == "content-length" || k == "date" || k == "content-type" {
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

/// A duration as Go prints one (`2m0s`, `1h0m0s`, `30s`, `0s`), to the second.
fn go_duration_text(d: std::time::Duration) -> String {
    let t = d.as_secs();
    match (t / 3600, t / 60 % 60, t % 60) {
        (0, 0, s) => format!("{s}s"),
        (0, m, s) => format!("{m}m{s}s"),
        (h, m, s) => format!("{h}h{m}m{s}s"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn configz_names_the_allowed_unsafe_sysctls_only_when_there_are_some() {
        use clap::Parser;
        let resolve = |args: &[&str]| {
            let f = crate::config::Flags::try_parse_from(
                ["crustlet", "--kubeconfig=k"].iter().chain(args),
            )
            .unwrap();
            let (c, sc) = crate::config::Config::resolve_all(f).unwrap();
            configz(&c, &sc)
        };
        let v = resolve(&["--allowed-unsafe-sysctls=kernel.msg*,net.core.somaxconn"]);
        assert_eq!(
            v["kubeletconfig"]["allowedUnsafeSysctls"],
            serde_json::json!(["kernel.msg*", "net.core.somaxconn"])
        );
        let v = resolve(&[]);
        assert!(
            v["kubeletconfig"].get("allowedUnsafeSysctls").is_none(),
            "{v}"
        );
        assert_eq!(v["kubeletconfig"]["maxPods"], 110);
        assert_eq!(v["kubeletconfig"]["imageMinimumGCAge"], "2m0s");
        assert_eq!(v["kubeletconfig"]["oomScoreAdj"], -999);
    }

    #[test]
    fn seen_pods_are_listed_with_the_status_their_worker_computed() {
        use k8s_openapi::api::core::v1::PodStatus;
        use k8s_openapi::apimachinery::pkg::apis::meta::v1::ManagedFieldsEntry;
        let mut pod = Pod::default();
        pod.metadata.uid = Some("u1".into());
        pod.metadata.name = Some("p".into());
        pod.metadata.managed_fields = Some(vec![ManagedFieldsEntry::default()]);
        let pod = Arc::new(pod);
        let seen = Seen::default();
        let st = |phase: &str| PodStatus {
            phase: Some(phase.into()),
            ..Default::default()
        };
        seen.pod(&pod, &st("Pending"));
        seen.pod(&pod, &st("Running"));
        let l = seen.list();
        assert_eq!(l.len(), 1);
        assert_eq!(l[0].metadata.name.as_deref(), Some("p"));
        assert_eq!(
            l[0].status.as_ref().unwrap().phase.as_deref(),
            Some("Running")
        );
        assert!(l[0].metadata.managed_fields.is_none());
        // The worker's copy is shared, not changed.
        assert!(pod.status.is_none() && pod.metadata.managed_fields.is_some());
        // A new version of the pod takes the old one's place.
        let mut newer = Pod::clone(&pod);
        newer.metadata.name = Some("p2".into());
        seen.pod(&Arc::new(newer), &st("Running"));
        let l = seen.list();
        assert_eq!(l.len(), 1);
        assert_eq!(l[0].metadata.name.as_deref(), Some("p2"));
        seen.gone("u1");
        assert!(seen.list().is_empty());
    }

    /// A response's status and body, read whole.
    async fn read_body(r: Response<Body>) -> (u16, String) {
        let status = r.status().as_u16();
        let b = http_body_util::BodyExt::collect(r.into_body())
            .await
            .map(|c| c.to_bytes())
            .unwrap_or_default();
        (status, String::from_utf8_lossy(&b).into_owned())
    }

    #[tokio::test]
    async fn a_node_log_is_streamed_not_read_whole() {
        use std::io::Write;
        let d = tempfile_dir("big-log");
        let big: Vec<u8> = (0..5 * FILE_CHUNK + 123)
            .map(|i| b'a' + (i % 26) as u8)
            .collect();
        std::fs::write(d.join("big.log"), &big).unwrap();
        let r = node_log(&d, "big.log");
        assert_eq!(r.status(), 200);
        assert_eq!(
            r.headers()[hyper::header::CONTENT_LENGTH],
            big.len().to_string().as_str()
        );
        // Grown after it was opened: served as it was then.
        std::fs::OpenOptions::new()
            .append(true)
            .open(d.join("big.log"))
            .unwrap()
            .write_all(b"later\n")
            .unwrap();
        let mut body = r.into_body();
        let mut got = vec![];
        let mut frames = 0;
        while let Some(f) = body.frame().await {
            let data = f.unwrap().into_data().unwrap();
            assert!(data.len() <= FILE_CHUNK, "a frame of {} bytes", data.len());
            got.extend_from_slice(&data);
            frames += 1;
        }
        assert_eq!(got, big);
        assert!(frames >= 6, "{frames} frames");
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[tokio::test]
    async fn node_logs_stay_inside_their_folder() {
        let d = tempfile_dir("node-logs");
        std::fs::write(d.join("syslog"), "hello\n").unwrap();
        std::fs::create_dir(d.join("apt")).unwrap();
        std::os::unix::fs::symlink("/etc/hostname", d.join("escape")).unwrap();
        let body = |r: Response<Body>| read_body(r);
        assert_eq!(
            body(node_log(&d, "")).await,
            (
                200,
                "<!doctype html>\n<meta name=\"viewport\" content=\"width=device-width\">\n<pre>\n<a href=\"apt/\">apt/</a>\n<a href=\"escape\">escape</a>\n<a href=\"syslog\">syslog</a>\n</pre>\n".into()
            )
        );
        assert_eq!(body(node_log(&d, "syslog")).await, (200, "hello\n".into()));
        assert_eq!(
            body(node_log(&d, "escape")).await.0,
            404,
            "a link out of the folder"
        );
        assert_eq!(body(node_log(&d, "../etc/passwd")).await.0, 400);
        assert_eq!(body(node_log(&d, "nope")).await.0, 404);
        std::fs::remove_dir_all(&d).unwrap();
    }

    /// A fresh folder of the test `name`'s own (tests run side by side).
    fn tempfile_dir(name: &str) -> std::path::PathBuf {
        let d = std::env::temp_dir().join(format!("crustlet-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    #[test]
    fn routes() {
        let c = |kind, uid: Option<&str>| Route::Command {
            kind,
            ns: "default".into(),
            pod: "web".into(),
            uid: uid.map(str::to_string),
            container: "c".into(),
        };
        assert_eq!(route("/healthz"), Route::Healthz);
        assert_eq!(route("/healthz/ping"), Route::Healthz);
        assert_eq!(route("/pods"), Route::Pods);
        assert_eq!(route("/pods/"), Route::Pods);
        assert_eq!(
            route("/containerLogs/default/web/c"),
            Route::ContainerLogs {
                ns: "default".into(),
                pod: "web".into(),
                container: "c".into()
            }
        );
        assert!(matches!(route("/containerLogs/default/web"), Route::Bad(_)));
        assert!(matches!(
            route("/containerLogs/default/web/"),
            Route::Bad(_)
        ));
        assert_eq!(route("/exec/default/web/c"), c("exec", None));
        assert_eq!(route("/exec/default/web/u1/c"), c("exec", Some("u1")));
        assert_eq!(route("/attach/default/web/c"), c("attach", None));
        assert_eq!(route("/run/default/web/c"), c("run", None));
        assert_eq!(route("/exec/default/web"), Route::NotFound);
        assert_eq!(
            route("/portForward/default/web"),
            Route::PortForward {
                ns: "default".into(),
                pod: "web".into(),
                uid: None
            }
        );
        assert_eq!(
            route("/portForward/default/web/u1"),
            Route::PortForward {
                ns: "default".into(),
                pod: "web".into(),
                uid: Some("u1".into())
            }
        );
        assert_eq!(route("/stats/summary"), Route::Summary);
        assert_eq!(route("/metrics/resource"), Route::ResourceMetrics);
        assert_eq!(route("/metrics"), Route::Metrics);
        assert_eq!(route("/metrics/probes"), Route::ProbeMetrics);
        assert_eq!(route("/metrics/cadvisor"), Route::CadvisorMetrics);
        assert_eq!(route("/configz"), Route::Configz);
        assert_eq!(route("/logs/"), Route::NodeLogs("".into()));
        assert_eq!(route("/logs/a/b.log"), Route::NodeLogs("a/b.log".into()));
        assert_eq!(route("/"), Route::NotFound);
        assert_eq!(route("/spec"), Route::NotFound);
        assert!(Route::Summary.read_only() && !c("exec", None).read_only());
    }

    #[test]
    fn queries_are_decoded() {
        assert_eq!(
            query(Some(
                "command=sh&command=-c&command=echo%20a+b&input=1&flag"
            )),
            [
                ("command".to_string(), "sh".to_string()),
                ("command".into(), "-c".into()),
                ("command".into(), "echo a b".into()),
                ("input".into(), "1".into()),
                ("flag".into(), "".into()),
            ]
        );
        assert_eq!(decode("a%2Fb%zz%", false), "a/b%zz%");
        assert_eq!(decode("a+b", false), "a+b");
        assert_eq!(join("::", 1), "[::]:1");
        assert_eq!(join("0.0.0.0", 10250), "0.0.0.0:10250");
    }
}
