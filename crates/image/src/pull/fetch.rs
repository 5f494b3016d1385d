//! Getting an image's manifests and blobs from one registry host, for every host with
//! crust's own small client on reqwest. A registry client crate did not fit: the one
//! crust used (oci-client) builds its own HTTP client, so it could not send hosts.toml
//! `header` entries with every request to a host (an API key a mirror wants, a tenant
//! id; containerd sends them, the host's token service included) and read a manifest's
//! body whole whatever its length; crust needed a client of its own for those hosts
//! anyway, and two HTTP stacks with two token caches for one pull were one too many. The
//! part of the distribution API a pull needs is small:
//!
//! ```text
//!   GET /v2/<repo>/manifests/<tag|digest>   GET /v2/<repo>/blobs/<digest>
//!     └─ 401 + WWW-Authenticate ─┬─ Basic ──> again with the caller's user:password
//!                                └─ Bearer realm,service ──> GET realm?service&scope
//!                                   =repository:<repo>:pull (user:password if given)
//!                                   ──> token ──> again with it
//! ```
//! The `Authorization` that worked is kept for the rest of the pull, so a pull meets the
//! challenge once, not once per blob; a token that expires mid-pull meets a new 401 and
//! is fetched again. Blobs are checked against their digest as they stream and against
//! their descriptor's size (a `Content-Length` or a body of another length is refused;
//! nothing past the size is passed on), so a hostile or broken host cannot make crust
//! store or unpack what the manifest did not name. Manifests stop at the size an index
//! gives or at 4 MiB. Every read waits at most the store's stall timeout for the host's
//! next bytes.

use super::hosts::Endpoint;
use super::token;
use crate::digest;
use crate::error::{Error, ErrorKind, Result};
use crate::manifest::ACCEPTED;
use crate::Named;
use bytes::Bytes;
use futures::stream::BoxStream;
use futures::StreamExt;
use reqwest::header::{
    HeaderMap, HeaderName, HeaderValue, ACCEPT, AUTHORIZATION, WWW_AUTHENTICATE,
};
use reqwest::StatusCode;
use sha2::{Digest as _, Sha256};
use std::time::Duration;

/// containerd's limit (`MaxManifestSize`): manifests are held in memory, and a hostile
/// host must not make the daemon hold gigabytes.
const MAX_MANIFEST: usize = 4 << 20;
/// Configs are held in memory too; real ones are a few KiB.
const MAX_CONFIG: usize = 16 << 20;

/// A layer's bytes as they arrive. An error ends it: DataLoss when the content did not
/// match its digest, Unavailable when the download broke off.
pub(crate) type LayerStream = BoxStream<'static, Result<Bytes>>;

/// What a pull offers a host to prove who it is: the CRI's credentials, reduced by
/// `registry_auth` (mod.rs) to one of the forms a registry takes.
#[derive(Clone, PartialEq)]
pub(crate) enum RegistryAuth {
    Anonymous,
    /// User and password: sent as HTTP basic auth, or to the token service for a token.
    Basic(String, String),
    /// A token the caller already has, sent as it is.
    Bearer(String),
}

/// Without the secrets: credentials must not reach a log through a `{:?}`.
impl std::fmt::Debug for RegistryAuth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RegistryAuth::Anonymous => write!(f, "Anonymous"),
            RegistryAuth::Basic(u, _) => write!(f, "Basic({u:?}, <password>)"),
            RegistryAuth::Bearer(_) => write!(f, "Bearer(<token>)"),
        }
    }
}

/// How one pull talks to one host about one repository.
pub(crate) struct Fetcher {
    http: reqwest::Client,
    /// `scheme://host/v2/<repository>`: what every URL of the pull starts with.
    base: String,
    /// `?ns=<registry>` when the host is a mirror, so one mirror can serve several
    /// registries (containerd's convention); else empty.
    ns: String,
    /// For the token's scope.
    repository: String,
    /// `host[:port]`, for messages.
    host: String,
    /// The host's hosts.toml `header`, for every request.
    headers: HeaderMap,
    auth: RegistryAuth,
    /// What the host took last (or the caller's bearer token): later requests of the
    /// pull send it at once instead of meeting the challenge again.
    authz: parking_lot::Mutex<Option<Authz>>,
    /// The read timeout, for the message of a stalled download.
    stall: Duration,
}

/// Whether `ep` serves `registry`'s images under another name, as a mirror does.
/// Docker Hub's own API host is not a mirror of `docker.io`.
fn is_mirror(ep: &Endpoint, registry: &str) -> bool {
    ep.host != registry && !(registry == "docker.io" && ep.host == "registry-1.docker.io")
}

impl Fetcher {
    /// `stall`: how long a read may wait for the host's next bytes (headers or body)
    /// before the fetch fails; a big layer may take long, a stalled one not.
    pub(crate) fn new(
        ep: &Endpoint,
        named: &Named,
        auth: &RegistryAuth,
        stall: Duration,
    ) -> Result<Fetcher> {
        let http = token::client_builder(ep)?
            // Per read, not per request: a big layer may take long, a stalled one not.
            .read_timeout(stall)
            .build()
            .map_err(|e| Error::Internal(format!("registry host {}: http client: {e}", ep.host)))?;
        let authz = match auth {
            RegistryAuth::Bearer(t) => Some(Authz::Bearer(bearer(t, &ep.host)?)),
            _ => None,
        };
        let ns = if is_mirror(ep, named.registry()) {
            format!("?ns={}", named.registry())
        } else {
            String::new()
        };
        Ok(Fetcher {
            http,
            base: format!("{}://{}/v2/{}", ep.scheme, ep.host, named.repository()),
            ns,
            repository: named.repository().to_string(),
            host: ep.host.clone(),
            headers: header_map(ep)?,
            auth: auth.clone(),
            authz: parking_lot::Mutex::new(authz),
            stall,
        })
    }

    /// `kind` (`manifests` or `blobs`) `reference` (a tag or a digest) of the repository.
    fn url(&self, kind: &str, reference: &str) -> String {
        format!("{}/{kind}/{reference}{}", self.base, self.ns)
    }

    /// The manifest or index `reference` (a tag or a digest) names, as sent.
    /// `size`, when a descriptor gave one (an index's child): the length it must have;
    /// without one, at most containerd's 4 MiB.
    pub(crate) async fn manifest(
        &self,
        reference: &str,
        size: Option<u64>,
        what: &str,
    ) -> Result<Bytes> {
        let res = self
            .get(
                &self.url("manifests", reference),
                Some(&ACCEPTED.join(", ")),
                what,
            )
            .await?;
        if let Some(size) = size {
            check_length(res.content_length(), size, what)?;
        }
        let data = match size {
            // Nothing past the descriptor's size is read.
            Some(size) if size <= MAX_MANIFEST as u64 => {
                read_limited(res, size as usize, self.stall, what)
                    .await
                    .map_err(|e| match e.kind() {
                        ErrorKind::InvalidArgument => {
                            size_mismatch(what, size, &format!("got more than {size}"))
                        }
                        _ => e,
                    })?
            }
            _ => read_limited(res, MAX_MANIFEST, self.stall, what).await?,
        };
        if let Some(size) = size {
            if data.len() as u64 != size {
                return Err(size_mismatch(what, size, &format!("got {}", data.len())));
            }
        }
        Ok(Bytes::from(data))
    }

    /// A small blob (the config), whole, of exactly `size` bytes (its descriptor's).
    pub(crate) async fn blob(&self, digest: &str, size: u64, what: &str) -> Result<Vec<u8>> {
        if size > MAX_CONFIG as u64 {
            return Err(Error::InvalidArgument(format!(
                "{what}: {size} bytes, more than the {MAX_CONFIG} a config may have"
            )));
        }
        let mut s = self.layer(digest, size, what).await?;
        let mut out = Vec::with_capacity(size as usize);
        while let Some(chunk) = s.next().await {
            out.extend_from_slice(&chunk.map_err(|e| e.context(what))?);
        }
        Ok(out)
    }

    /// A blob streamed, checked against its descriptor's digest and `size`: refused at
    /// once when the host announces another length, ended with DataLoss once more than
    /// `size` bytes arrive or when it ends short (nothing past `size` is passed on).
    pub(crate) async fn layer(&self, digest: &str, size: u64, what: &str) -> Result<LayerStream> {
        let res = self.get(&self.url("blobs", digest), None, what).await?;
        check_length(res.content_length(), size, what)?;
        Ok(sized(verified(res, digest.to_string(), self.stall), size))
    }
}

/// The error of content whose length is not its descriptor's: DataLoss, as a digest
/// mismatch is.
fn size_mismatch(what: &str, size: u64, got: &str) -> Error {
    let what = if what.is_empty() {
        String::new()
    } else {
        format!("{what}: ")
    };
    Error::DataLoss(format!(
        "{what}size mismatch: the descriptor says {size} bytes, {got}"
    ))
}

/// A `Content-Length` other than the descriptor's size is refused before a byte is read.
fn check_length(len: Option<u64>, size: u64, what: &str) -> Result<()> {
    match len {
        Some(n) if n != size => Err(size_mismatch(
            what,
            size,
            &format!("the registry announces {n} (Content-Length)"),
        )),
        _ => Ok(()),
    }
}

/// `inner`, ended with DataLoss once more than `size` bytes arrive (the chunk that
/// passes it is not passed on) or when it ends before `size`. A digest mismatch of a
/// body of the wrong length is reported as the size mismatch it is.
fn sized(inner: LayerStream, size: u64) -> LayerStream {
    struct St {
        inner: LayerStream,
        n: u64,
        done: bool,
    }
    let st = St {
        inner,
        n: 0,
        done: false,
    };
    futures::stream::unfold(st, move |mut st| async move {
        if st.done {
            return None;
        }
        match st.inner.next().await {
            Some(Ok(b)) => {
                st.n += b.len() as u64;
                if st.n > size {
                    st.done = true;
                    let e = size_mismatch("", size, &format!("got more than {size}"));
                    return Some((Err(e), st));
                }
                Some((Ok(b), st))
            }
            Some(Err(e)) => {
                st.done = true;
                let e = if e.kind() == ErrorKind::DataLoss && st.n != size {
                    size_mismatch("", size, &format!("got {}", st.n))
                } else {
                    e
                };
                Some((Err(e), st))
            }
            None if st.n != size => {
                st.done = true;
                Some((Err(size_mismatch("", size, &format!("got {}", st.n))), st))
            }
            None => None,
        }
    })
    .boxed()
}

#[derive(Clone)]
enum Authz {
    /// The caller's user and password.
    Basic,
    Bearer(HeaderValue),
}

/// What to do about a 401.
#[derive(Debug, PartialEq)]
enum Answer {
    /// Again, with the caller's user and password.
    Basic,
    /// Again, with a token from this realm.
    Token {
        realm: String,
        service: Option<String>,
    },
    /// Nothing more to try: the 401 is the answer.
    GiveUp,
}

/// The answer to the challenges of a 401 (every `WWW-Authenticate` of it) with `auth`.
fn answer(challenges: &[&str], auth: &RegistryAuth) -> Answer {
    // A caller's bearer token was sent as it is; the host refused it.
    if matches!(auth, RegistryAuth::Bearer(_)) {
        return Answer::GiveUp;
    }
    if let Some((realm, service)) = challenges.iter().find_map(|c| token::bearer_challenge(c)) {
        return Answer::Token { realm, service };
    }
    let basic = challenges.iter().any(|c| {
        let scheme = c.trim_start().split(' ').next().unwrap_or("");
        scheme.eq_ignore_ascii_case("basic")
    });
    match auth {
        RegistryAuth::Basic(..) if basic => Answer::Basic,
        _ => Answer::GiveUp,
    }
}

/// hosts.toml `header` as request headers, every value of a list its own line.
pub(crate) fn header_map(ep: &Endpoint) -> Result<HeaderMap> {
    let mut map = HeaderMap::new();
    for (k, values) in &ep.headers {
        let name = HeaderName::from_bytes(k.as_bytes()).map_err(|e| {
            Error::InvalidArgument(format!("registry host {}: header {k:?}: {e}", ep.host))
        })?;
        for v in values {
            let value = HeaderValue::from_str(v).map_err(|e| {
                Error::InvalidArgument(format!(
                    "registry host {}: header {k:?}: value {v:?}: {e}",
                    ep.host
                ))
            })?;
            map.append(name.clone(), value);
        }
    }
    Ok(map)
}

impl Fetcher {
    /// A successful GET of `url`, through the 401 challenge if the host makes one.
    async fn get(&self, url: &str, accept: Option<&str>, what: &str) -> Result<reqwest::Response> {
        let mut challenged = false;
        loop {
            let authz = self.authz.lock().clone();
            let mut req = self.http.get(url);
            if let Some(a) = accept {
                req = req.header(ACCEPT, a);
            }
            match (authz, &self.auth) {
                (Some(Authz::Bearer(a)), _) => req = req.header(AUTHORIZATION, a),
                (Some(Authz::Basic), RegistryAuth::Basic(u, p)) => req = req.basic_auth(u, Some(p)),
                _ => {}
            }
            // Last, so a header the operator configured wins over crust's.
            let res = req
                .headers(self.headers.clone())
                .send()
                .await
                .map_err(|e| Error::Unavailable(format!("{what}: GET {url}: {}", chain(&e))))?;
            if res.status().is_success() {
                return Ok(res);
            }
            if res.status() == StatusCode::UNAUTHORIZED && !challenged {
                challenged = true;
                let challenges: Vec<&str> = res
                    .headers()
                    .get_all(WWW_AUTHENTICATE)
                    .iter()
                    .filter_map(|v| v.to_str().ok())
                    .collect();
                let next = match answer(&challenges, &self.auth) {
                    Answer::Basic => Some(Authz::Basic),
                    Answer::Token { realm, service } => {
                        let t = self.token(&realm, service.as_deref(), what).await?;
                        Some(Authz::Bearer(bearer(&t, &self.host)?))
                    }
                    Answer::GiveUp => None,
                };
                if let Some(a) = next {
                    *self.authz.lock() = Some(a);
                    continue;
                }
            }
            let status = res.status();
            let body = read_limited(res, 64 << 10, self.stall, what)
                .await
                .unwrap_or_default();
            return Err(status_error(status, &body, &format!("{what}: GET {url}")));
        }
    }

    /// A pull token for the repository from the realm of a `Bearer` challenge.
    async fn token(&self, realm: &str, service: Option<&str>, what: &str) -> Result<String> {
        let scope = format!("repository:{}:pull", self.repository);
        let mut q = vec![];
        if let Some(s) = service {
            q.push(("service", s));
        }
        q.push(("scope", scope.as_str()));
        let sep = if realm.contains('?') { '&' } else { '?' };
        let url = format!("{realm}{sep}{}", token::form_encode(&q));
        // The host's headers go to its token service too, as containerd sends them.
        let mut req = self.http.get(&url);
        if let RegistryAuth::Basic(u, p) = &self.auth {
            req = req.basic_auth(u, Some(p));
        }
        let ctx = format!("{what}: token service {realm}");
        let res = req
            .headers(self.headers.clone())
            .send()
            .await
            .map_err(|e| Error::Unavailable(format!("{ctx}: {}", chain(&e))))?;
        let status = res.status();
        let body = read_limited(res, 1 << 20, self.stall, &ctx).await?;
        if !status.is_success() {
            return Err(status_error(status, &body, &ctx));
        }
        let v: serde_json::Value = serde_json::from_slice(&body)
            .map_err(|e| Error::Unavailable(format!("{ctx}: not a token response: {e}")))?;
        v["token"]
            .as_str()
            .or_else(|| v["access_token"].as_str())
            .filter(|t| !t.is_empty())
            .map(str::to_string)
            .ok_or_else(|| Error::Unavailable(format!("{ctx}: no token in its answer")))
    }
}

fn bearer(token: &str, host: &str) -> Result<HeaderValue> {
    let mut v = HeaderValue::try_from(format!("Bearer {token}")).map_err(|_| {
        Error::Unauthenticated(format!(
            "registry host {host}: the token is not a header value"
        ))
    })?;
    v.set_sensitive(true);
    Ok(v)
}

/// A reqwest error with its causes: its own message alone rarely says what went wrong
/// ("error sending request").
fn chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut cur = e.source();
    while let Some(c) = cur {
        let m = c.to_string();
        if !s.contains(&m) {
            s.push_str(": ");
            s.push_str(&m);
        }
        cur = c.source();
    }
    s
}

/// A download that broke off: Unavailable, saying so when the host sent nothing for
/// the read timeout (a stalled host, rather than one that closed the connection).
fn net_error(e: &(dyn std::error::Error + 'static), stall: Duration) -> Error {
    let mut cur = Some(e);
    while let Some(c) = cur {
        let timed_out = c
            .downcast_ref::<reqwest::Error>()
            .is_some_and(|r| r.is_timeout())
            || c.downcast_ref::<std::io::Error>()
                .is_some_and(|i| i.kind() == std::io::ErrorKind::TimedOut);
        if timed_out {
            return Error::Unavailable(format!(
                "the registry sent nothing for {:?}: stalled ({})",
                stall,
                chain(e)
            ));
        }
        cur = c.source();
    }
    Error::Unavailable(chain(e))
}

/// A whole body, refused once it passes `max`.
async fn read_limited(
    mut res: reqwest::Response,
    max: usize,
    stall: Duration,
    what: &str,
) -> Result<Vec<u8>> {
    let mut out = Vec::new();
    while let Some(b) = res
        .chunk()
        .await
        .map_err(|e| net_error(&e, stall).context(what))?
    {
        if out.len() + b.len() > max {
            return Err(Error::InvalidArgument(format!(
                "{what}: larger than {max} bytes"
            )));
        }
        out.extend_from_slice(&b);
    }
    Ok(out)
}

/// The body of `res`, hashed as it passes; a digest other than `want` ends it with
/// DataLoss instead of its end.
fn verified(res: reqwest::Response, want: String, stall: Duration) -> LayerStream {
    struct St {
        res: reqwest::Response,
        hasher: Sha256,
        want: String,
        done: bool,
    }
    let st = St {
        res,
        hasher: Sha256::new(),
        want,
        done: false,
    };
    futures::stream::unfold(st, move |mut st| async move {
        if st.done {
            return None;
        }
        match st.res.chunk().await {
            Ok(Some(b)) => {
                st.hasher.update(&b);
                Some((Ok(b), st))
            }
            Ok(None) => {
                st.done = true;
                let got = format!(
                    "sha256:{}",
                    digest::encode(&std::mem::take(&mut st.hasher).finalize())
                );
                if got == st.want {
                    None
                } else {
                    let e = format!("digest mismatch: expected {}, got {got}", st.want);
                    Some((Err(Error::DataLoss(e)), st))
                }
            }
            Err(e) => {
                st.done = true;
                Some((Err(net_error(&e, stall)), st))
            }
        }
    })
    .boxed()
}

/// An answer other than 2xx as an error of its kind: the distribution spec's error codes
/// first (registries differ in the status they send with them), else the status.
fn status_error(status: StatusCode, body: &[u8], what: &str) -> Error {
    #[derive(serde::Deserialize)]
    struct Envelope {
        errors: Vec<Item>,
    }
    #[derive(serde::Deserialize)]
    struct Item {
        code: String,
        #[serde(default)]
        message: String,
    }
    let (codes, detail) = match serde_json::from_slice::<Envelope>(body) {
        Ok(env) => {
            let detail: Vec<String> = env
                .errors
                .iter()
                .map(|i| format!("{} {}", i.code, i.message).trim().to_string())
                .collect();
            (
                env.errors.into_iter().map(|i| i.code).collect(),
                detail.join("; "),
            )
        }
        Err(_) => {
            let text = String::from_utf8_lossy(body);
            let text = text.trim();
            let cut = text
                .char_indices()
                .nth(200)
                .map(|(i, _)| i)
                .unwrap_or(text.len());
            (Vec::new(), text[..cut].to_string())
        }
    };
    let m = if detail.is_empty() {
        format!("{what}: {status}")
    } else {
        format!("{what}: {status}: {detail}")
    };
    let has = |want: &[&str]| {
        codes
            .iter()
            .any(|c: &String| want.iter().any(|w| c.eq_ignore_ascii_case(w)))
    };
    if has(&["UNAUTHORIZED", "DENIED"]) {
        Error::Unauthenticated(m)
    } else if has(&[
        "MANIFEST_UNKNOWN",
        "NAME_UNKNOWN",
        "BLOB_UNKNOWN",
        "NOT_FOUND",
    ]) {
        Error::NotFound(m)
    } else if has(&["TOOMANYREQUESTS"]) {
        Error::Unavailable(m)
    } else {
        match status.as_u16() {
            401 | 403 => Error::Unauthenticated(m),
            404 => Error::NotFound(m),
            429 => Error::Unavailable(m),
            400..=499 => Error::InvalidArgument(m),
            _ => Error::Unavailable(m),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use parking_lot::Mutex;
    use std::io::{BufRead, BufReader, Write};
    use std::sync::Arc;

    fn ep(host: &str, headers: &[(&str, &[&str])]) -> Endpoint {
        Endpoint {
            scheme: "http".into(),
            host: host.into(),
            pull: true,
            resolve: true,
            skip_verify: false,
            ca: vec![],
            headers: headers
                .iter()
                .map(|(k, v)| (k.to_string(), v.iter().map(|s| s.to_string()).collect()))
                .collect(),
        }
    }

    fn fetcher(e: &Endpoint, name: &str, auth: RegistryAuth) -> Fetcher {
        let _ = rustls::crypto::ring::default_provider().install_default();
        Fetcher::new(
            e,
            &Named::parse(name).unwrap(),
            &auth,
            Duration::from_secs(60),
        )
        .unwrap()
    }

    fn basic() -> RegistryAuth {
        RegistryAuth::Basic("u".into(), "p".into())
    }

    #[test]
    fn headers_every_value() {
        let m = header_map(&ep("h", &[("X-One", &["a"]), ("x-many", &["b", "c"])])).unwrap();
        assert_eq!(m.get("x-one").unwrap(), "a");
        let many: Vec<&str> = m
            .get_all("x-many")
            .iter()
            .map(|v| v.to_str().unwrap())
            .collect();
        assert_eq!(many, ["b", "c"]);
        let e = header_map(&ep("h", &[("bad name", &["a"])])).unwrap_err();
        assert_eq!(e.kind(), crate::ErrorKind::InvalidArgument);
        assert!(e.to_string().contains("bad name"), "{e}");
        let e = header_map(&ep("h", &[("x", &["a\nb"])])).unwrap_err();
        assert_eq!(e.kind(), crate::ErrorKind::InvalidArgument);
    }

    #[test]
    fn answers_to_challenges() {
        let anon = RegistryAuth::Anonymous;
        let tok = Answer::Token {
            realm: "https://auth/t".into(),
            service: Some("reg".into()),
        };
        let bearer_c = r#"Bearer realm="https://auth/t",service="reg",scope="repository:a:pull""#;
        assert_eq!(answer(&[bearer_c], &anon), tok);
        assert_eq!(answer(&[bearer_c], &basic()), tok);
        assert_eq!(answer(&[r#"Basic realm="x""#, bearer_c], &basic()), tok);
        assert_eq!(answer(&[r#"basic realm="x""#], &basic()), Answer::Basic);
        assert_eq!(answer(&[r#"Basic realm="x""#], &anon), Answer::GiveUp);
        assert_eq!(
            answer(&[bearer_c], &RegistryAuth::Bearer("t".into())),
            Answer::GiveUp
        );
        assert_eq!(answer(&[], &basic()), Answer::GiveUp);
    }

    #[test]
    fn credentials_stay_out_of_debug() {
        let s = format!(
            "{basic:?} {:?}",
            RegistryAuth::Bearer("t0ken".into()),
            basic = basic()
        );
        assert_eq!(s, r#"Basic("u", <password>) Bearer(<token>)"#);
    }

    /// The URLs of the distribution spec, on the host the endpoint names; a mirror is
    /// told the image's registry with `?ns=` (containerd's convention), Docker Hub's own
    /// API host is not a mirror of `docker.io`.
    #[test]
    fn urls() {
        let d = format!("sha256:{}", "a".repeat(64));
        let https = |host: &str| Endpoint {
            scheme: "https".into(),
            ..ep(host, &[])
        };
        let cases = [
            (
                https("webassembly.azurecr.io"),
                "webassembly.azurecr.io/hello-wasm:v1",
                "https://webassembly.azurecr.io/v2/hello-wasm/manifests/v1",
            ),
            (
                https("docker.mirror.io"),
                "webassembly.azurecr.io/hello-wasm:v1",
                "https://docker.mirror.io/v2/hello-wasm/manifests/v1?ns=webassembly.azurecr.io",
            ),
            (
                https("registry-1.docker.io"),
                "busybox",
                "https://registry-1.docker.io/v2/library/busybox/manifests/v1",
            ),
            (
                https("mirror.gcr.io"),
                "busybox",
                "https://mirror.gcr.io/v2/library/busybox/manifests/v1?ns=docker.io",
            ),
            (
                ep("127.0.0.1:5000", &[]),
                "127.0.0.1:5000/a/b:t",
                "http://127.0.0.1:5000/v2/a/b/manifests/v1",
            ),
            (
                ep("[::1]:5000", &[]),
                "[::1]:5000/a/b",
                "http://[::1]:5000/v2/a/b/manifests/v1",
            ),
        ];
        for (e, name, want) in cases {
            let f = fetcher(&e, name, RegistryAuth::Anonymous);
            assert_eq!(f.url("manifests", "v1"), want, "{name} from {}", e.host);
        }
        let f = fetcher(
            &https("docker.mirror.io"),
            "quay.io/a/b",
            RegistryAuth::Anonymous,
        );
        assert_eq!(
            f.url("blobs", &d),
            format!("https://docker.mirror.io/v2/a/b/blobs/{d}?ns=quay.io")
        );
    }

    #[test]
    fn statuses() {
        use crate::ErrorKind as K;
        let k = |s: u16, body: &str| {
            status_error(
                StatusCode::from_u16(s).unwrap(),
                body.as_bytes(),
                "manifest",
            )
            .kind()
        };
        assert_eq!(k(401, ""), K::Unauthenticated);
        assert_eq!(k(403, "no"), K::Unauthenticated);
        assert_eq!(k(404, ""), K::NotFound);
        assert_eq!(k(400, ""), K::InvalidArgument);
        assert_eq!(k(429, ""), K::Unavailable);
        assert_eq!(k(502, "<html>"), K::Unavailable);
        let env = r#"{"errors":[{"code":"MANIFEST_UNKNOWN","message":"manifest unknown"}]}"#;
        assert_eq!(k(404, env), K::NotFound);
        assert_eq!(k(400, env), K::NotFound);
        for code in ["NAME_UNKNOWN", "BLOB_UNKNOWN", "NOT_FOUND"] {
            let env = format!(r#"{{"errors":[{{"code":"{code}"}}]}}"#);
            assert_eq!(k(400, &env), K::NotFound, "{code}");
        }
        let denied = r#"{"errors":[{"code":"DENIED","message":"no"}]}"#;
        assert_eq!(k(400, denied), K::Unauthenticated);
        let unauthorized = r#"{"errors":[{"code":"UNAUTHORIZED"}]}"#;
        assert_eq!(k(400, unauthorized), K::Unauthenticated);
        let many = r#"{"errors":[{"code":"TOOMANYREQUESTS"}]}"#;
        assert_eq!(k(400, many), K::Unavailable);
        let other = r#"{"errors":[{"code":"MANIFEST_INVALID"}]}"#;
        assert_eq!(k(400, other), K::InvalidArgument);
        assert_eq!(k(500, other), K::Unavailable);
        let e = status_error(StatusCode::NOT_FOUND, env.as_bytes(), "manifest: GET u");
        assert_eq!(
            e.to_string(),
            "manifest: GET u: 404 Not Found: MANIFEST_UNKNOWN manifest unknown"
        );
    }

    /// What the scripted registry serves for the blob that does not match its digest.
    const BAD: &[u8] = b"not what the digest says";

    /// What the scripted registry saw of one request.
    #[derive(Debug, Clone)]
    struct Seen {
        target: String,
        headers: Vec<(String, String)>,
    }

    impl Seen {
        fn all(&self, name: &str) -> Vec<&str> {
            self.headers
                .iter()
                .filter(|(k, _)| k == name)
                .map(|(_, v)| v.as_str())
                .collect()
        }
    }

    /// What the scripted registry wants before it serves.
    #[derive(Clone, Copy)]
    enum Wants {
        /// `u:p` as HTTP basic auth.
        Basic,
        /// A bearer token from its own `/token` (which wants `u:p`), the one it issued
        /// last, good for `uses` requests: then it has expired.
        Bearer { uses: usize },
    }

    #[derive(Default)]
    struct Log {
        seen: Vec<Seen>,
        /// Tokens issued so far: the last is `tok<issued>`.
        issued: usize,
        /// Requests the last token served.
        used: usize,
    }

    impl Log {
        fn tokens(&self) -> Vec<&Seen> {
            self.seen
                .iter()
                .filter(|s| s.target.starts_with("/token?"))
                .collect()
        }
    }

    /// A registry on 127.0.0.1 that wants `wants`; it serves one manifest (repository
    /// `a/b`, tag `v1`), one good blob and one that does not match its digest.
    fn scripted_registry(
        wants: Wants,
        manifest: &'static [u8],
        good: (String, &'static [u8]),
        bad: String,
    ) -> (String, Arc<Mutex<Log>>) {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap().to_string();
        let log = Arc::new(Mutex::new(Log::default()));
        let (log2, addr2) = (log.clone(), addr.clone());
        std::thread::spawn(move || {
            for conn in l.incoming().flatten() {
                let (log, addr) = (log2.clone(), addr2.clone());
                let (good, bad) = (good.clone(), bad.clone());
                std::thread::spawn(move || {
                    let mut w = conn.try_clone().unwrap();
                    let mut r = BufReader::new(conn);
                    loop {
                        let mut line = String::new();
                        if r.read_line(&mut line).unwrap_or(0) == 0 {
                            return;
                        }
                        let target = line.split_whitespace().nth(1).unwrap_or("").to_string();
                        let mut headers = vec![];
                        loop {
                            let mut h = String::new();
                            r.read_line(&mut h).unwrap();
                            let h = h.trim_end();
                            if h.is_empty() {
                                break;
                            }
                            let (k, v) = h.split_once(':').unwrap();
                            headers.push((k.to_ascii_lowercase(), v.trim().to_string()));
                        }
                        let s = Seen { target, headers };
                        let mut log = log.lock();
                        log.seen.push(s.clone());
                        let authz = s.all("authorization");
                        // base64("u:p")
                        let user = authz == ["Basic dTpw"];
                        let refusal = match wants {
                            _ if s.target.starts_with("/token?") => None,
                            Wants::Basic if user => None,
                            Wants::Basic => Some("Basic realm=\"r\"".to_string()),
                            Wants::Bearer { uses } => {
                                let last = format!("Bearer tok{}", log.issued);
                                if log.issued > 0 && authz == [last.as_str()] && log.used < uses {
                                    log.used += 1;
                                    None
                                } else {
                                    Some(format!(
                                        "Bearer realm=\"http://{addr}/token\",service=\"svc\""
                                    ))
                                }
                            }
                        };
                        let (status, extra, body): (u16, String, Vec<u8>) = if let Some(c) = refusal
                        {
                            (
                                401,
                                format!("WWW-Authenticate: {c}\r\n"),
                                br#"{"errors":[{"code":"UNAUTHORIZED"}]}"#.to_vec(),
                            )
                        } else if s.target.starts_with("/token?") {
                            if user {
                                log.issued += 1;
                                log.used = 0;
                                let t = format!(r#"{{"token":"tok{}"}}"#, log.issued);
                                (200, String::new(), t.into_bytes())
                            } else {
                                (401, String::new(), vec![])
                            }
                        } else if s.target == "/v2/a/b/manifests/v1" {
                            (200, String::new(), manifest.to_vec())
                        } else if s.target == format!("/v2/a/b/blobs/{}", good.0) {
                            (200, String::new(), good.1.to_vec())
                        } else if s.target == format!("/v2/a/b/blobs/{bad}") {
                            (200, String::new(), BAD.to_vec())
                        } else {
                            (404, String::new(), vec![])
                        };
                        drop(log);
                        let head = format!(
                            "HTTP/1.1 {status} X\r\n{extra}Content-Length: {}\r\n\r\n",
                            body.len()
                        );
                        if w.write_all(head.as_bytes()).is_err() || w.write_all(&body).is_err() {
                            return;
                        }
                    }
                });
            }
        });
        (addr, log)
    }

    /// A layer's bytes, or the error that ended them.
    async fn drain(mut s: LayerStream) -> Result<Vec<u8>> {
        let mut got = vec![];
        while let Some(c) = s.next().await {
            got.extend_from_slice(&c?);
        }
        Ok(got)
    }

    /// A host with hosts.toml `header` that wants a bearer token: the headers go with
    /// every request (its token service's too), one challenge is met per pull, content
    /// is checked against its digest and size, and each way a pull can be refused has
    /// its kind.
    #[tokio::test]
    async fn sends_headers_and_answers_the_bearer_challenge() {
        let good: &'static [u8] = b"config bytes";
        let good_d = digest::of(good);
        let bad_d = digest::of(b"something else");
        let (addr, log) = scripted_registry(
            Wants::Bearer { uses: usize::MAX },
            b"{\"m\":1}",
            (good_d.clone(), good),
            bad_d.clone(),
        );
        let e = ep(&addr, &[("X-Key", &["k1", "k2"])]);
        let name = format!("{addr}/a/b:v1");
        let f = fetcher(&e, &name, basic());
        assert_eq!(
            &f.manifest("v1", None, "manifest").await.unwrap()[..],
            b"{\"m\":1}"
        );
        assert_eq!(
            f.blob(&good_d, good.len() as u64, "config").await.unwrap(),
            good
        );
        let s = f.layer(&good_d, good.len() as u64, "layer").await.unwrap();
        assert_eq!(drain(s).await.unwrap(), good);
        // Content that is not what its digest says: DataLoss, as a blob and as a stream.
        let err = f
            .blob(&bad_d, BAD.len() as u64, "config x")
            .await
            .unwrap_err();
        assert_eq!(err.kind(), crate::ErrorKind::DataLoss, "{err}");
        assert!(err.to_string().contains("digest mismatch"), "{err}");
        let s = f.layer(&bad_d, BAD.len() as u64, "layer").await.unwrap();
        let err = drain(s).await.unwrap_err();
        assert_eq!(err.kind(), crate::ErrorKind::DataLoss, "{err}");
        // A length other than the descriptor's: DataLoss before a byte is read.
        let err = match f.layer(&good_d, good.len() as u64 + 1, "layer x").await {
            Err(e) => e,
            Ok(_) => panic!("a layer of another length was taken"),
        };
        assert_eq!(err.kind(), crate::ErrorKind::DataLoss, "{err}");
        assert!(err.to_string().contains("size mismatch"), "{err}");
        let err = f.manifest("nope", None, "manifest").await.unwrap_err();
        assert_eq!(err.kind(), crate::ErrorKind::NotFound, "{err}");

        let seen = log.lock().seen.clone();
        for s in &seen {
            assert_eq!(s.all("x-key"), ["k1", "k2"], "{s:?}");
            assert!(s.all("user-agent")[0].starts_with("crust/"), "{s:?}");
        }
        // One challenge, one token for the whole pull.
        let tokens: Vec<&Seen> = seen
            .iter()
            .filter(|s| s.target.starts_with("/token?"))
            .collect();
        assert_eq!(tokens.len(), 1, "{seen:?}");
        assert_eq!(
            tokens[0].target,
            "/token?service=svc&scope=repository%3Aa%2Fb%3Apull"
        );
        assert_eq!(
            seen.iter()
                .filter(|s| s.all("authorization").is_empty())
                .count(),
            1,
            "{seen:?}"
        );
        assert_eq!(
            seen[0].all("accept")[0],
            "application/vnd.oci.image.index.v1+json, \
             application/vnd.oci.image.manifest.v1+json, \
             application/vnd.docker.distribution.manifest.list.v2+json, \
             application/vnd.docker.distribution.manifest.v2+json"
        );

        // Without credentials the token service refuses: Unauthenticated, naming it.
        let f = fetcher(&e, &name, RegistryAuth::Anonymous);
        let err = f.manifest("v1", None, "manifest").await.unwrap_err();
        assert_eq!(err.kind(), crate::ErrorKind::Unauthenticated, "{err}");
        assert!(err.to_string().contains("token service"), "{err}");
        // A caller's token is sent as it is; refused, it is not traded for another.
        let f = fetcher(&e, &name, RegistryAuth::Bearer("tok1".into()));
        f.manifest("v1", None, "manifest").await.unwrap();
        let f = fetcher(&e, &name, RegistryAuth::Bearer("old".into()));
        let before = log.lock().seen.len();
        let err = f.manifest("v1", None, "manifest").await.unwrap_err();
        assert_eq!(err.kind(), crate::ErrorKind::Unauthenticated, "{err}");
        assert_eq!(log.lock().seen.len(), before + 1);
    }

    /// A token that expires mid-pull meets a new 401 and is fetched again; a host that
    /// refuses even a fresh token is answered with Unauthenticated, not asked forever.
    #[tokio::test]
    async fn a_token_that_expires_mid_pull_is_fetched_again() {
        let good: &'static [u8] = b"layer bytes";
        let good_d = digest::of(good);
        let (addr, log) = scripted_registry(
            Wants::Bearer { uses: 2 },
            b"{}",
            (good_d.clone(), good),
            digest::of(b"x"),
        );
        let e = ep(&addr, &[]);
        let f = fetcher(&e, &format!("{addr}/a/b:v1"), basic());
        f.manifest("v1", None, "manifest").await.unwrap();
        f.blob(&good_d, good.len() as u64, "config").await.unwrap();
        // tok1 has served two requests: this one is refused, tok2 fetched, and it serves.
        let s = f.layer(&good_d, good.len() as u64, "layer").await.unwrap();
        assert_eq!(drain(s).await.unwrap(), good);
        {
            let l = log.lock();
            assert_eq!(l.issued, 2, "{:?}", l.seen);
            let last: Vec<&str> = l.seen[l.seen.len() - 3..]
                .iter()
                .map(|s| s.all("authorization").first().copied().unwrap_or(""))
                .collect();
            assert_eq!(last, ["Bearer tok1", "Basic dTpw", "Bearer tok2"]);
        }

        let (addr, log) = scripted_registry(
            Wants::Bearer { uses: 0 },
            b"{}",
            (good_d.clone(), good),
            digest::of(b"x"),
        );
        let f = fetcher(&ep(&addr, &[]), &format!("{addr}/a/b:v1"), basic());
        let err = f.manifest("v1", None, "manifest").await.unwrap_err();
        assert_eq!(err.kind(), crate::ErrorKind::Unauthenticated, "{err}");
        let l = log.lock();
        assert_eq!((l.seen.len(), l.issued), (3, 1), "{:?}", l.seen);
    }

    /// A host that wants HTTP basic auth, without hosts.toml `header`: the challenge is
    /// answered once with the caller's user and password, which then go with every
    /// request at once; no header of another host's is sent; without credentials or
    /// with wrong ones the pull is Unauthenticated.
    #[tokio::test]
    async fn answers_the_basic_challenge() {
        let good: &'static [u8] = b"blob";
        let good_d = digest::of(good);
        let (addr, log) = scripted_registry(
            Wants::Basic,
            b"{}",
            (good_d.clone(), good),
            digest::of(b"x"),
        );
        let e = ep(&addr, &[]);
        let name = format!("{addr}/a/b:v1");
        let f = fetcher(&e, &name, basic());
        f.manifest("v1", None, "manifest").await.unwrap();
        f.blob(&good_d, good.len() as u64, "config").await.unwrap();
        let s = f.layer(&good_d, good.len() as u64, "layer").await.unwrap();
        assert_eq!(drain(s).await.unwrap(), good);
        {
            let l = log.lock();
            let authz: Vec<&str> = l
                .seen
                .iter()
                .map(|s| s.all("authorization").first().copied().unwrap_or(""))
                .collect();
            assert_eq!(authz, ["", "Basic dTpw", "Basic dTpw", "Basic dTpw"]);
            assert!(l.seen.iter().all(|s| s.all("x-key").is_empty()));
            assert!(l.tokens().is_empty());
        }
        for auth in [
            RegistryAuth::Anonymous,
            RegistryAuth::Basic("u".into(), "wrong".into()),
        ] {
            let f = fetcher(&e, &name, auth.clone());
            let err = f.manifest("v1", None, "manifest").await.unwrap_err();
            assert_eq!(
                err.kind(),
                crate::ErrorKind::Unauthenticated,
                "{auth:?}: {err}"
            );
        }
    }
}
