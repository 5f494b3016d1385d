//! The one HTTP(S) GET the crustlet sends into pods, for `httpGet` probes and `httpGet`
//! lifecycle hooks (postStart, preStop) alike, as the kubelet's prober and hook runner
//! send theirs (`pkg/probe/http`, `pkg/kubelet/lifecycle/handlers.go`):
//!
//! - the URL from the action: its scheme, its host or else the pod's IP, the port, the
//!   path (a `/` put in front when it has none);
//! - the action's headers, over a `User-Agent` of `kube-probe/1.28` or
//!   `kube-lifecycle/1.28` and an `Accept` of `*/*` (an empty `Accept` sends none); a
//!   `Host` header names the host the request is for, not the one it is sent to;
//! - HTTPS without checking the server's certificate (containers serve self-signed
//!   ones; the kubelet sets `InsecureSkipVerify`); the handshake's signature is still
//!   checked against the certificate's key;
//! - redirects followed while they stay on the first request's host, at most 10; a
//!   redirect elsewhere is the answer;
//! - for hooks only, an HTTPS request a plain-HTTP server answered is sent again over
//!   HTTP, without its `Authorization` header.
//!
//! HTTP/1.1 through hyper's client connection, TLS through rustls: the crates the
//! crustlet already serves with; one connection per request, closed after the answer's
//! head (the body is not needed).

use crate::server::tls;
use bytes::Bytes;
use http_body_util::Empty;
use k8s_openapi::api::core::v1::HTTPGetAction;
use rustls::pki_types::ServerName;
use std::sync::{Arc, OnceLock};
use tokio::io::{AsyncRead, AsyncWrite};

/// Who sends the request: it names the `User-Agent`, and only hooks fall back to HTTP.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Purpose {
    Probe,
    Lifecycle,
}

/// One GET: where to, and what it says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Get {
    pub https: bool,
    /// The host the connection goes to (an IPv6 address without brackets).
    pub host: String,
    pub port: u16,
    /// Path and query, starting with `/`.
    pub target: String,
    /// The `Host` header's value, when the action's headers give one.
    pub host_header: Option<String>,
    /// Every other header, in the action's order.
    pub headers: Vec<(String, String)>,
    pub purpose: Purpose,
}

/// What answered: the final status, and whether it is a redirect not followed (then
/// with its body, which the kubelet's warning quotes).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reply {
    pub status: u16,
    pub redirect_not_followed: bool,
    pub body: String,
}

const MAX_REDIRECTS: usize = 10;

/// How much of an answer's body is read, as the kubelet's prober reads it (10 KiB).
const MAX_BODY: usize = 10 << 10;

impl Get {
    /// The request for `action`, its port resolved to `port`; the pod's IP when the
    /// action names no host.
    pub fn new(action: &HTTPGetAction, port: u16, pod_ip: &str, purpose: Purpose) -> Get {
        let host = action
            .host
            .clone()
            .filter(|h| !h.is_empty())
            .unwrap_or_else(|| pod_ip.to_string());
        let path = action.path.clone().unwrap_or_default();
        let target = if path.starts_with('/') {
            path
        } else {
            format!("/{path}")
        };
        let given: Vec<(String, String)> = action
            .http_headers
            .iter()
            .flatten()
            .map(|h| (h.name.clone(), h.value.clone()))
            .collect();
        let named = |n: &str| given.iter().find(|(k, _)| k.eq_ignore_ascii_case(n));
        let mut headers: Vec<(String, String)> = given
            .iter()
            .filter(|(k, _)| !k.eq_ignore_ascii_case("host"))
            .cloned()
            .collect();
        if named("user-agent").is_none() {
            let agent = match purpose {
                Purpose::Probe => "kube-probe/1.28",
                Purpose::Lifecycle => "kube-lifecycle/1.28",
            };
            headers.push(("User-Agent".into(), agent.into()));
        }
        match named("accept") {
            None => headers.push(("Accept".into(), "*/*".into())),
            Some((_, v)) if v.is_empty() => {
                headers.retain(|(k, _)| !k.eq_ignore_ascii_case("accept"))
            }
            Some(_) => {}
        }
        Get {
            https: action
                .scheme
                .as_deref()
                .is_some_and(|s| s.eq_ignore_ascii_case("https")),
            host,
            port,
            target,
            host_header: named("host")
                .map(|(_, v)| v.clone())
                .filter(|v| !v.is_empty()),
            headers,
            purpose,
        }
    }

    fn authority(&self) -> String {
        if self.host.contains(':') {
            format!("[{}]:{}", self.host, self.port)
        } else {
            format!("{}:{}", self.host, self.port)
        }
    }

    /// The URL, for messages.
    pub fn url(&self) -> String {
        let scheme = if self.https { "https" } else { "http" };
        format!("{scheme}://{}{}", self.authority(), self.target)
    }

    /// Where a redirect's `Location` leads from here, as Go's client resolves it; the
    /// `Host` header is kept only for a relative location.
    fn redirect(&self, location: &str) -> Option<Get> {
        let mut next = self.clone();
        let absolute = if location.starts_with("//") {
            Some(format!(
                "{}:{location}",
                if self.https { "https" } else { "http" }
            ))
        } else if location.split_once("://").is_some_and(|(scheme, _)| {
            !scheme.is_empty()
                && scheme
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || "+-.".contains(c))
        }) {
            Some(location.to_string())
        } else {
            None
        };
        if let Some(abs) = absolute {
            let uri: hyper::Uri = abs.parse().ok()?;
            next.https = match uri.scheme_str()? {
                s if s.eq_ignore_ascii_case("https") => true,
                s if s.eq_ignore_ascii_case("http") => false,
                _ => return None,
            };
            let host = uri.host()?;
            next.host = host
                .trim_start_matches('[')
                .trim_end_matches(']')
                .to_string();
            next.port = uri.port_u16().unwrap_or(if next.https { 443 } else { 80 });
            next.target = uri
                .path_and_query()
                .map(|p| p.as_str().to_string())
                .filter(|p| p.starts_with('/'))
                .unwrap_or_else(|| "/".into());
            next.host_header = None;
            return Some(next);
        }
        let path = self.target.split('?').next().unwrap_or("/");
        next.target = if location.starts_with('/') {
            location.to_string()
        } else if location.starts_with('?') {
            format!("{path}{location}")
        } else {
            let dir = &path[..path.rfind('/').map_or(0, |i| i + 1)];
            format!("{dir}{location}")
        };
        Some(next)
    }

    fn request(&self) -> Result<hyper::Request<Empty<Bytes>>, String> {
        let host = self.host_header.clone().unwrap_or_else(|| self.authority());
        let mut b = hyper::Request::get(self.target.as_str()).header(hyper::header::HOST, host);
        for (k, v) in &self.headers {
            b = b.header(k.as_str(), v.as_str());
        }
        b.header(hyper::header::CONNECTION, "close")
            .body(Empty::new())
            .map_err(|e| format!("Get {:?}: {e}", self.url()))
    }
}

/// Sends `g`, following redirects on its host; the final answer's status. For a hook,
/// an HTTPS request answered in plain HTTP is sent again over HTTP.
pub async fn send(g: &Get) -> Result<Reply, String> {
    let mut cur = g.clone();
    for _ in 0..=MAX_REDIRECTS {
        let (status, location, body) = match once(&cur).await {
            Err(Failure::HttpResponseToHttps(e))
                if cur.https && cur.purpose == Purpose::Lifecycle =>
            {
                tracing::debug!(url = %cur.url(), "HTTPS hook got an HTTP response ({e}), retrying with HTTP");
                cur.https = false;
                cur.headers
                    .retain(|(k, _)| !k.eq_ignore_ascii_case("authorization"));
                once(&cur).await.map_err(Failure::into_message)?
            }
            r => r.map_err(Failure::into_message)?,
        };
        let Some(location) = location.filter(|_| (300..400).contains(&status)) else {
            return Ok(Reply {
                status,
                redirect_not_followed: false,
                body: String::new(),
            });
        };
        match cur.redirect(&location) {
            Some(next) if next.host.eq_ignore_ascii_case(&g.host) => cur = next,
            _ => {
                return Ok(Reply {
                    status,
                    redirect_not_followed: true,
                    body,
                })
            }
        }
    }
    Err(format!(
        "Get {:?}: stopped after {MAX_REDIRECTS} redirects",
        g.url()
    ))
}

enum Failure {
    HttpResponseToHttps(String),
    Other(String),
}

impl Failure {
    fn into_message(self) -> String {
        match self {
            Failure::HttpResponseToHttps(m) | Failure::Other(m) => m,
        }
    }
}

/// One request on one connection: the status and `Location` of the answer, and the
/// start of a redirect's body.
async fn once(g: &Get) -> Result<(u16, Option<String>, String), Failure> {
    let url = g.url();
    let fail = |e: &dyn std::fmt::Display| Failure::Other(format!("Get {url:?}: {e}"));
    let req = g.request().map_err(Failure::Other)?;
    let tcp = tokio::net::TcpStream::connect((g.host.as_str(), g.port))
        .await
        .map_err(|e| fail(&format!("dial tcp {}: {e}", g.authority())))?;
    if !g.https {
        return exchange(tcp, req).await.map_err(|e| fail(&e));
    }
    let name = ServerName::try_from(g.host.clone()).map_err(|e| fail(&e))?;
    let tls = match tokio_rustls::TlsConnector::from(client_config())
        .connect(name, tcp)
        .await
    {
        Ok(s) => s,
        Err(e) => {
            let plain = matches!(
                e.get_ref().and_then(|i| i.downcast_ref::<rustls::Error>()),
                Some(rustls::Error::InvalidMessage(
                    rustls::InvalidMessage::InvalidContentType
                ))
            );
            return Err(if plain {
                Failure::HttpResponseToHttps(format!(
                    "Get {url:?}: http: server gave HTTP response to HTTPS client"
                ))
            } else {
                fail(&e)
            });
        }
    };
    exchange(tls, req).await.map_err(|e| fail(&e))
}

async fn exchange<S>(
    io: S,
    req: hyper::Request<Empty<Bytes>>,
) -> Result<(u16, Option<String>, String), hyper::Error>
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let (mut tx, conn) =
        hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(io)).await?;
    let mut conn = std::pin::pin!(conn);
    let mut send = std::pin::pin!(tx.send_request(req));
    let resp = tokio::select! {
        r = &mut send => r?,
        // The connection ended first: its error, or else the request's own verdict.
        r = &mut conn => {
            r?;
            send.await?
        }
    };
    let location = resp
        .headers()
        .get(hyper::header::LOCATION)
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    let status = resp.status().as_u16();
    if !(300..400).contains(&status) {
        return Ok((status, location, String::new()));
    }
    // A redirect's body, read while the connection is driven (it carries the body).
    let mut body = std::pin::pin!(read_at_most(resp.into_body()));
    let mut conn_done = false;
    let body = loop {
        tokio::select! {
            b = &mut body => break b,
            r = &mut conn, if !conn_done => {
                r?;
                conn_done = true;
            }
        }
    };
    Ok((status, location, body))
}

/// The first [`MAX_BODY`] bytes of a body, as text; what a failed read left out is
/// left out (the body only goes into a message).
async fn read_at_most(mut b: hyper::body::Incoming) -> String {
    use http_body_util::BodyExt;
    let mut out = Vec::new();
    while out.len() < MAX_BODY {
        match b.frame().await {
            Some(Ok(f)) => {
                if let Ok(data) = f.into_data() {
                    out.extend_from_slice(&data);
                }
            }
            _ => break,
        }
    }
    out.truncate(MAX_BODY);
    String::from_utf8_lossy(&out).into_owned()
}

/// The client's TLS: any server certificate (see the module doc), rustls' defaults else.
fn client_config() -> Arc<rustls::ClientConfig> {
    static CONFIG: OnceLock<Arc<rustls::ClientConfig>> = OnceLock::new();
    CONFIG
        .get_or_init(|| {
            let provider = tls::provider();
            let mut cfg = rustls::ClientConfig::builder_with_provider(provider.clone())
                .with_safe_default_protocol_versions()
                .expect("ring supports the default protocol versions")
                .dangerous()
                .with_custom_certificate_verifier(Arc::new(tls::AnyCert::new(provider, vec![])))
                .with_no_client_auth();
            cfg.alpn_protocols = vec![b"http/1.1".to_vec()];
            Arc::new(cfg)
        })
        .clone()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::server::tls;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::sync::mpsc;

    fn action(v: serde_json::Value) -> HTTPGetAction {
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn requests_as_the_kubelet_builds_them() {
        let a = action(serde_json::json!({
            "port": 8080, "path": "healthz",
            "httpHeaders": [
                {"name": "Host", "value": "example.com"},
                {"name": "accept", "value": ""},
                {"name": "X-Custom", "value": "1"},
                {"name": "X-Custom", "value": "2"},
            ],
        }));
        let g = Get::new(&a, 8080, "fd00::1", Purpose::Probe);
        assert_eq!(g.url(), "http://[fd00::1]:8080/healthz");
        assert_eq!(g.host_header.as_deref(), Some("example.com"));
        assert_eq!(
            g.headers,
            [
                ("X-Custom".to_string(), "1".to_string()),
                ("X-Custom".into(), "2".into()),
                ("User-Agent".into(), "kube-probe/1.28".into()),
            ],
            "no Host among them, the empty Accept dropped"
        );

        let a = action(serde_json::json!({
            "scheme": "HTTPS", "host": "10.0.0.9", "port": 443, "path": "/echo?msg=poststart",
            "httpHeaders": [{"name": "user-agent", "value": "mine"}],
        }));
        let g = Get::new(&a, 443, "10.0.0.1", Purpose::Lifecycle);
        assert_eq!(g.url(), "https://10.0.0.9:443/echo?msg=poststart");
        assert_eq!(g.host_header, None);
        assert_eq!(
            g.headers,
            [
                ("user-agent".to_string(), "mine".to_string()),
                ("Accept".into(), "*/*".into()),
            ]
        );
        let g = Get::new(
            &action(serde_json::json!({"port": 80})),
            80,
            "10.0.0.1",
            Purpose::Lifecycle,
        );
        assert_eq!(g.url(), "http://10.0.0.1:80/");
        assert!(g
            .headers
            .contains(&("User-Agent".into(), "kube-lifecycle/1.28".into())));
    }

    #[test]
    fn redirect_locations_resolve_as_go_resolves_them() {
        let a = action(serde_json::json!({
            "port": 8080, "path": "/a/b?x=1",
            "httpHeaders": [{"name": "Host", "value": "example.com"}],
        }));
        let g = Get::new(&a, 8080, "10.0.0.1", Purpose::Probe);
        let to = |loc: &str| g.redirect(loc).map(|n| (n.url(), n.host_header));
        let kept = Some("example.com".to_string());
        assert_eq!(
            to("/healthz"),
            Some(("http://10.0.0.1:8080/healthz".into(), kept.clone()))
        );
        assert_eq!(
            to("c?y"),
            Some(("http://10.0.0.1:8080/a/c?y".into(), kept.clone()))
        );
        assert_eq!(
            to("?y=2"),
            Some(("http://10.0.0.1:8080/a/b?y=2".into(), kept))
        );
        assert_eq!(
            to("https://10.0.0.1/x"),
            Some(("https://10.0.0.1:443/x".into(), None))
        );
        assert_eq!(
            to("//[fd00::2]:81"),
            Some(("http://[fd00::2]:81/".into(), None))
        );
        assert_eq!(to("ftp://10.0.0.1/"), None);
        assert_eq!(
            to("/go?to=http://elsewhere/"),
            Some((
                "http://10.0.0.1:8080/go?to=http://elsewhere/".into(),
                Some("example.com".into())
            ))
        );
    }

    /// Answers one connection per answer on 127.0.0.1 (over TLS with a self-signed
    /// certificate when `tls`); each request's head goes to the receiver.
    async fn serve(
        tls: bool,
        answers: Vec<&'static str>,
    ) -> (u16, mpsc::UnboundedReceiver<String>) {
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = l.local_addr().unwrap().port();
        let acceptor = tls.then(|| {
            let dir = std::env::temp_dir()
                .join(format!("crustlet-http-get-{}-{port}", std::process::id()));
            std::fs::create_dir_all(&dir).unwrap();
            let (cert, key) = tls::self_signed("localhost", &[]).unwrap();
            std::fs::write(dir.join("c.pem"), cert).unwrap();
            std::fs::write(dir.join("k.pem"), key).unwrap();
            let (cfg, _) =
                tls::server_config(&dir.join("c.pem"), &dir.join("k.pem"), None).unwrap();
            std::fs::remove_dir_all(&dir).ok();
            tokio_rustls::TlsAcceptor::from(Arc::new(cfg))
        });
        let (tx, rx) = mpsc::unbounded_channel();
        tokio::spawn(async move {
            for answer in answers {
                let (s, _) = l.accept().await.unwrap();
                let mut s: Box<dyn Stream> = match &acceptor {
                    Some(a) => Box::new(a.accept(s).await.unwrap()),
                    None => Box::new(s),
                };
                // The head, or whatever a client that is not speaking HTTP sent first.
                let mut head = vec![];
                let mut b = [0u8; 1024];
                while !head.windows(4).any(|w| w == b"\r\n\r\n") && head.first() != Some(&0x16) {
                    match s.read(&mut b).await {
                        Ok(0) | Err(_) => break,
                        Ok(n) => head.extend_from_slice(&b[..n]),
                    }
                }
                let _ = tx.send(String::from_utf8_lossy(&head).into_owned());
                // An answer's body follows its head's blank line.
                let (answer, body) = answer.split_once("\r\n\r\n").unwrap_or((answer, ""));
                let len = body.len();
                let reply = format!("HTTP/1.1 {answer}\r\nContent-Length: {len}\r\n\r\n{body}");
                let _ = s.write_all(reply.as_bytes()).await;
                let _ = s.shutdown().await;
            }
        });
        (port, rx)
    }

    trait Stream: AsyncRead + AsyncWrite + Unpin + Send {}
    impl<T: AsyncRead + AsyncWrite + Unpin + Send> Stream for T {}

    fn hook(v: serde_json::Value) -> k8s_openapi::api::core::v1::LifecycleHandler {
        serde_json::from_value(serde_json::json!({ "httpGet": v })).unwrap()
    }

    #[tokio::test]
    async fn https_hooks_and_probes_take_a_self_signed_certificate() {
        let (port, mut heads) = serve(
            true,
            vec![
                "200 OK",
                "500 Internal Server Error",
                "500 Internal Server Error",
            ],
        )
        .await;
        let cri = crate::cri::Cri::lazy(std::path::Path::new("/nonexistent/cri.sock"));
        let c = k8s_openapi::api::core::v1::Container::default();
        let limit = std::time::Duration::from_secs(5);
        let h = hook(serde_json::json!({
            "scheme": "HTTPS", "port": port, "path": "/echo?msg=poststart",
            "httpHeaders": [{"name": "X-Hook", "value": "post"}],
        }));
        crate::worker::probe::hook(&cri, &h, &c, "", "127.0.0.1", limit)
            .await
            .unwrap();
        let head = heads.recv().await.unwrap().to_ascii_lowercase();
        assert!(
            head.starts_with("get /echo?msg=poststart http/1.1\r\n"),
            "{head}"
        );
        for line in [
            &format!("host: 127.0.0.1:{port}\r\n"),
            "user-agent: kube-lifecycle/1.28\r\n",
            "accept: */*\r\n",
            "x-hook: post\r\n",
        ] {
            assert!(head.contains(line), "{line:?} in {head}");
        }
        // A hook's answer may say anything; a probe's must be 2xx or 3xx.
        crate::worker::probe::hook(&cri, &h, &c, "", "127.0.0.1", limit)
            .await
            .unwrap();
        heads.recv().await.unwrap();
        let p: k8s_openapi::api::core::v1::Probe = serde_json::from_value(
            serde_json::json!({"httpGet": {"scheme": "HTTPS", "port": port}}),
        )
        .unwrap();
        let (r, m, warning) = crate::worker::probe::run(&cri, &p, &c, "", "127.0.0.1").await;
        assert_eq!(
            (r, m.as_str(), warning),
            (
                crate::worker::probe::Outcome::Failure,
                "HTTP probe failed with statuscode: 500",
                false
            )
        );
    }

    #[tokio::test]
    async fn an_https_hook_a_plain_server_answers_is_sent_again_over_http() {
        let (port, mut heads) =
            serve(false, vec!["400 Bad Request", "200 OK", "400 Bad Request"]).await;
        let a = action(serde_json::json!({
            "scheme": "HTTPS", "port": port,
            "httpHeaders": [{"name": "Authorization", "value": "Bearer x"}],
        }));
        let g = Get::new(&a, port, "127.0.0.1", Purpose::Lifecycle);
        assert_eq!(send(&g).await.unwrap().status, 200);
        assert_eq!(
            heads.recv().await.unwrap().as_bytes()[0],
            0x16,
            "a TLS hello first"
        );
        let head = heads.recv().await.unwrap().to_ascii_lowercase();
        assert!(head.starts_with("get / http/1.1\r\n"), "{head}");
        assert!(!head.contains("authorization"), "{head}");
        // A probe does not fall back.
        let g = Get::new(&a, port, "127.0.0.1", Purpose::Probe);
        let e = send(&g).await.unwrap_err();
        assert_eq!(
            e,
            format!("Get \"https://127.0.0.1:{port}/\": http: server gave HTTP response to HTTPS client")
        );
    }

    #[tokio::test]
    async fn redirects_are_followed_on_the_same_host_only() {
        let (port, mut heads) = serve(
            false,
            vec![
                "302 Found\r\nLocation: /fail",
                "500 Internal Server Error",
                "302 Found\r\nLocation: http://elsewhere.invalid/\r\n\r\n<a href=\"http://elsewhere.invalid/\">Found</a>.\n\n",
            ],
        )
        .await;
        let a = action(serde_json::json!({"port": port, "path": "/redirect"}));
        let g = Get::new(&a, port, "127.0.0.1", Purpose::Probe);
        assert_eq!(
            send(&g).await,
            Ok(Reply {
                status: 500,
                redirect_not_followed: false,
                body: String::new(),
            })
        );
        assert!(heads.recv().await.unwrap().starts_with("GET /redirect "));
        assert!(heads.recv().await.unwrap().starts_with("GET /fail "));
        assert_eq!(
            send(&g).await,
            Ok(Reply {
                status: 302,
                redirect_not_followed: true,
                body: "<a href=\"http://elsewhere.invalid/\">Found</a>.\n\n".into(),
            })
        );
    }

    /// A redirect to another host is a success with the kubelet's warning, which quotes
    /// the answer's body (upstream's "non-local redirect" probe spec waits for it).
    #[tokio::test]
    async fn a_redirect_elsewhere_is_a_success_with_a_warning() {
        let body = "<a href=\"http://0.0.0.0/\">Found</a>.\n\n";
        let answer = "302 Found\r\nLocation: http://0.0.0.0/\r\n\r\n<a href=\"http://0.0.0.0/\">Found</a>.\n\n";
        let (port, _heads) = serve(false, vec![answer]).await;
        let p: k8s_openapi::api::core::v1::Probe = serde_json::from_value(
            serde_json::json!({"httpGet": {"port": port, "path": "/redirect"}}),
        )
        .unwrap();
        let cri = crate::cri::Cri::lazy(std::path::Path::new("/nonexistent/cri.sock"));
        let c = k8s_openapi::api::core::v1::Container::default();
        let (r, m, warning) = crate::worker::probe::run(&cri, &p, &c, "", "127.0.0.1").await;
        assert_eq!(r, crate::worker::probe::Outcome::Success);
        assert!(warning);
        assert_eq!(
            m,
            format!("Probe terminated redirects, Response body: {body}")
        );
    }
}
