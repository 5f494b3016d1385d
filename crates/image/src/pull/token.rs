//! The CRI `identity_token`: an OAuth2 refresh token (what `docker login` keeps as
//! `identitytoken` for registries such as Azure's), traded at the registry's token
//! service for an access token, which the pull then sends as a bearer token. It is a
//! step before the pull, once per host (a POST, where the pull's own challenges are
//! answered with GETs), so it lives apart from the fetcher, which is handed its result.
//!
//! The flow (the distribution spec's token authentication with OAuth2):
//! ```text
//!   GET  <registry>/v2/            → 401, WWW-Authenticate: Bearer realm=R,service=S
//!   POST R  grant_type=refresh_token&refresh_token=T&service=S
//!           &scope=repository:<repo>:pull&client_id=crust
//!                                  → 200 {"access_token": A, ...}
//! ```

use std::time::Duration;

use super::hosts::Endpoint;
use crate::error::{Error, Result};

/// The OAuth2 client id crust gives the token service.
const CLIENT_ID: &str = "crust";

/// How crust's requests introduce themselves, so a registry's operator can tell them
/// apart in its logs.
pub(crate) const USER_AGENT: &str = concat!("crust/", env!("CARGO_PKG_VERSION"));

/// An access token for pulling `repository` from `ep`, for the refresh token `refresh`.
pub(crate) async fn access_token(ep: &Endpoint, repository: &str, refresh: &str) -> Result<String> {
    let client = http_client(ep)?;
    // hosts.toml `header` goes with every request to the host, these too.
    let headers = super::fetch::header_map(ep)?;
    let probe = format!("{}://{}/v2/", ep.scheme, ep.host);
    let res = client
        .get(&probe)
        .headers(headers.clone())
        .send()
        .await
        .map_err(|e| Error::Unavailable(format!("{probe}: {e}")))?;
    let header = res
        .headers()
        .get(reqwest::header::WWW_AUTHENTICATE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_string();
    let (realm, service) = bearer_challenge(&header).ok_or_else(|| {
        Error::Unauthenticated(format!(
            "{probe} asks for no bearer token ({}{header}), so an identity token cannot be used",
            res.status()
        ))
    })?;
    let scope = format!("repository:{repository}:pull");
    let mut form = vec![
        ("grant_type", "refresh_token"),
        ("refresh_token", refresh),
        ("scope", scope.as_str()),
        ("client_id", CLIENT_ID),
    ];
    if let Some(s) = &service {
        form.push(("service", s.as_str()));
    }
    let res = client
        .post(&realm)
        .header(
            reqwest::header::CONTENT_TYPE,
            "application/x-www-form-urlencoded",
        )
        .body(form_encode(&form))
        .headers(headers)
        .send()
        .await
        .map_err(|e| Error::Unavailable(format!("token service {realm}: {e}")))?;
    let status = res.status();
    let body = res
        .bytes()
        .await
        .map_err(|e| Error::Unavailable(format!("token service {realm}: {e}")))?;
    if !status.is_success() {
        return Err(Error::Unauthenticated(format!(
            "token service {realm} refused the identity token: {status}"
        )));
    }
    let v: serde_json::Value = serde_json::from_slice(&body).map_err(|e| {
        Error::Unavailable(format!("token service {realm}: not a token response: {e}"))
    })?;
    v["access_token"]
        .as_str()
        .or_else(|| v["token"].as_str())
        .filter(|t| !t.is_empty())
        .map(str::to_string)
        .ok_or_else(|| {
            Error::Unavailable(format!(
                "token service {realm}: no access_token in its answer"
            ))
        })
}

/// A client for the token exchange: a few small requests, so one deadline for each.
fn http_client(ep: &Endpoint) -> Result<reqwest::Client> {
    client_builder(ep)?
        .timeout(Duration::from_secs(60))
        .build()
        .map_err(|e| Error::Internal(format!("registry host {}: http client: {e}", ep.host)))
}

/// What every HTTP client crust makes for a registry host shares: the host's TLS
/// settings (hosts.toml `ca`, `skip_verify`), so no request to it trusts less or more
/// than configured.
pub(crate) fn client_builder(ep: &Endpoint) -> Result<reqwest::ClientBuilder> {
    let mut b = reqwest::Client::builder()
        .connect_timeout(Duration::from_secs(10))
        .user_agent(USER_AGENT)
        .danger_accept_invalid_certs(ep.skip_verify);
    for (p, pem) in ep.ca_pems()? {
        let cert = reqwest::Certificate::from_pem(&pem).map_err(|e| {
            Error::InvalidArgument(format!(
                "registry host {}: ca {}: {e}",
                ep.host,
                p.display()
            ))
        })?;
        b = b.add_root_certificate(cert);
    }
    Ok(b)
}

/// `realm` and `service` of a `Bearer` challenge (RFC 6750 auth-params).
pub(crate) fn bearer_challenge(h: &str) -> Option<(String, Option<String>)> {
    let rest = h.trim();
    let (scheme, params) = rest.split_once(' ')?;
    if !scheme.eq_ignore_ascii_case("bearer") {
        return None;
    }
    let mut realm = None;
    let mut service = None;
    let mut s = params.trim();
    while !s.is_empty() {
        let (key, after) = s.split_once('=')?;
        let key = key.trim().to_ascii_lowercase();
        let after = after.trim_start();
        let (value, next) = if let Some(q) = after.strip_prefix('"') {
            let end = q.find('"')?;
            (q[..end].to_string(), &q[end + 1..])
        } else {
            let end = after.find(',').unwrap_or(after.len());
            (after[..end].trim().to_string(), &after[end..])
        };
        match key.as_str() {
            "realm" => realm = Some(value),
            "service" => service = Some(value),
            _ => {}
        }
        s = next.trim_start().trim_start_matches(',').trim_start();
    }
    Some((realm?, service))
}

/// `application/x-www-form-urlencoded`.
pub(crate) fn form_encode(pairs: &[(&str, &str)]) -> String {
    let enc = |s: &str| {
        let mut out = String::new();
        for b in s.bytes() {
            match b {
                b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => {
                    out.push(b as char)
                }
                b' ' => out.push('+'),
                _ => out.push_str(&format!("%{b:02X}")),
            }
        }
        out
    };
    pairs
        .iter()
        .map(|(k, v)| format!("{}={}", enc(k), enc(v)))
        .collect::<Vec<_>>()
        .join("&")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn challenges() {
        assert_eq!(
            bearer_challenge(
                r#"Bearer realm="https://auth.example/token",service="registry.example",scope="repository:a/b:pull""#
            ),
            Some((
                "https://auth.example/token".into(),
                Some("registry.example".into())
            ))
        );
        assert_eq!(
            bearer_challenge("bearer realm=http://127.0.0.1:5/t"),
            Some(("http://127.0.0.1:5/t".into(), None))
        );
        assert_eq!(bearer_challenge(r#"Basic realm="x""#), None);
        assert_eq!(bearer_challenge(r#"Bearer service="s""#), None);
        assert_eq!(bearer_challenge(""), None);
    }

    #[test]
    fn form() {
        assert_eq!(
            form_encode(&[("scope", "repository:a/b:pull"), ("t", "x y&z=")]),
            "scope=repository%3Aa%2Fb%3Apull&t=x+y%26z%3D"
        );
    }
}
