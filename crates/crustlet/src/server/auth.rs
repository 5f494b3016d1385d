//! Who a request comes from, and whether they may: the kubelet's delegated
//! authentication and authorization.
//!
//! Authentication, in the kubelet's order: a client certificate verified against
//! `--client-ca-file` (CN the user, O the groups), else a bearer token checked through
//! the apiserver's TokenReview (`--authentication-token-webhook`), else anonymous
//! (`system:anonymous`, group `system:unauthenticated`) when `--anonymous-auth` allows.
//! A bearer token the apiserver rejects, or a client certificate the CA did not sign
//! (without a token that names someone), is a 401 even with anonymous requests allowed
//! (the kubelet fails on that error rather than falling through to anonymous).
//!
//! Authorization: `AlwaysAllow`, or `Webhook`, a SubjectAccessReview of the request as
//! the kubelet maps it onto the Node: resource `nodes`, name the node, verb from the
//! method, and subresource `stats`, `metrics`, `log` or `spec` by path, `proxy` for the
//! rest (exec, logs of containers, pods, healthz). Answers are cached as the kubelet's
//! defaults say: tokens 2 minutes, allowed 5 minutes, denied 30 seconds.

use k8s_openapi::api::authentication::v1::{TokenReview, TokenReviewSpec};
use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec,
};
use kube::api::{Api, PostParams};
use parking_lot::Mutex;
use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, Instant};

#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub struct User {
    pub name: String,
    pub uid: String,
    pub groups: Vec<String>,
    pub extra: BTreeMap<String, Vec<String>>,
}

impl User {
    pub fn anonymous() -> User {
        User {
            name: "system:anonymous".into(),
            groups: vec!["system:unauthenticated".into()],
            ..Default::default()
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    AlwaysAllow,
    Webhook,
}

impl std::str::FromStr for Mode {
    type Err = String;
    fn from_str(s: &str) -> Result<Mode, String> {
        match s {
            "AlwaysAllow" => Ok(Mode::AlwaysAllow),
            "Webhook" => Ok(Mode::Webhook),
            _ => Err(format!(
                "--authorization-mode {s:?}: AlwaysAllow or Webhook"
            )),
        }
    }
}

/// What the kubelet asks the authorizer about a request.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Attributes {
    pub verb: &'static str,
    pub subresource: &'static str,
}

/// The kubelet's mapping of a request onto `nodes/<subresource>`.
pub fn attributes(method: &hyper::Method, path: &str) -> Attributes {
    let verb = match *method {
        hyper::Method::POST => "create",
        hyper::Method::PUT => "update",
        hyper::Method::PATCH => "patch",
        hyper::Method::DELETE => "delete",
        _ => "get",
    };
    let under = |p: &str| path == p || path.starts_with(&format!("{p}/"));
    let subresource = if under("/stats") {
        "stats"
    } else if under("/metrics") {
        "metrics"
    } else if under("/logs") {
        "log"
    } else if under("/spec") {
        "spec"
    } else {
        "proxy"
    };
    Attributes { verb, subresource }
}

/// Why a request is refused.
#[derive(Debug, PartialEq, Eq)]
pub enum Refusal {
    /// 401: no one we know.
    Unauthenticated,
    /// 403, with the kubelet's message.
    Forbidden(String),
}

pub struct Auth {
    pub anonymous: bool,
    pub token_webhook: bool,
    pub mode: Mode,
    pub node: String,
    client: Option<kube::Client>,
    tokens: Mutex<HashMap<String, (Option<User>, Instant)>>,
    decisions: Mutex<HashMap<(User, Attributes), (bool, Instant)>>,
}

const TOKEN_TTL: Duration = Duration::from_secs(120);
const ALLOWED_TTL: Duration = Duration::from_secs(300);
const DENIED_TTL: Duration = Duration::from_secs(30);

impl Auth {
    pub fn new(
        anonymous: bool,
        token_webhook: bool,
        mode: Mode,
        node: String,
        client: Option<kube::Client>,
    ) -> Auth {
        Auth {
            anonymous,
            token_webhook,
            mode,
            node,
            client,
            tokens: Default::default(),
            decisions: Default::default(),
        }
    }

    /// The request's user: from its verified client certificate, its bearer token, or
    /// anonymous. `cert_user` is the user of the connection's client certificate, an
    /// error when the client CA did not sign it: then only a token may name the user
    /// (the kubelet fails such a request with a 401, anonymous allowed or not).
    pub async fn authenticate(
        &self,
        cert_user: Option<Result<&(String, Vec<String>), &()>>,
        authorization: Option<&str>,
    ) -> Result<User, Refusal> {
        let bad_cert = matches!(cert_user, Some(Err(_)));
        if let Some(Ok((name, groups))) = cert_user {
            let mut groups = groups.clone();
            groups.push("system:authenticated".into());
            return Ok(User {
                name: name.clone(),
                groups,
                ..Default::default()
            });
        }
        let token = authorization
            .and_then(|h| h.strip_prefix("Bearer "))
            .map(str::trim)
            .filter(|t| !t.is_empty());
        if let (Some(token), true) = (token, self.token_webhook) {
            return match self.review_token(token).await {
                Some(u) => Ok(u),
                None => Err(Refusal::Unauthenticated),
            };
        }
        if self.anonymous && !bad_cert {
            Ok(User::anonymous())
        } else {
            Err(Refusal::Unauthenticated)
        }
    }

    async fn review_token(&self, token: &str) -> Option<User> {
        if let Some((u, at)) = self.tokens.lock().get(token) {
            if at.elapsed() < TOKEN_TTL {
                return u.clone();
            }
        }
        let client = self.client.clone()?;
        let api: Api<TokenReview> = Api::all(client);
        let review = TokenReview {
            spec: TokenReviewSpec {
                token: Some(token.to_string()),
                audiences: None,
            },
            ..Default::default()
        };
        let user = match api.create(&PostParams::default(), &review).await {
            Ok(r) => r.status.filter(|s| s.authenticated == Some(true)).map(|s| {
                let u = s.user.unwrap_or_default();
                User {
                    name: u.username.unwrap_or_default(),
                    uid: u.uid.unwrap_or_default(),
                    groups: u.groups.unwrap_or_default(),
                    extra: u.extra.unwrap_or_default(),
                }
            }),
            Err(e) => {
                // Not cached: the apiserver may be back for the next request.
                tracing::warn!("TokenReview: {e}");
                return None;
            }
        };
        let mut cache = self.tokens.lock();
        cache.retain(|_, (_, at)| at.elapsed() < TOKEN_TTL);
        cache.insert(token.to_string(), (user.clone(), Instant::now()));
        user
    }

    /// Whether `user` may do `attrs` on this node.
    pub async fn authorize(&self, user: &User, attrs: &Attributes) -> Result<(), Refusal> {
        let allowed = match self.mode {
            Mode::AlwaysAllow => true,
            Mode::Webhook => self.review_access(user, attrs).await,
        };
        if allowed {
            Ok(())
        } else {
            Err(Refusal::Forbidden(format!(
                "Forbidden (user={}, verb={}, resource=nodes, subresource={})",
                user.name, attrs.verb, attrs.subresource
            )))
        }
    }

    async fn review_access(&self, user: &User, attrs: &Attributes) -> bool {
        let key = (user.clone(), attrs.clone());
        if let Some((ok, at)) = self.decisions.lock().get(&key) {
            if at.elapsed() < if *ok { ALLOWED_TTL } else { DENIED_TTL } {
                return *ok;
            }
        }
        let Some(client) = self.client.clone() else {
            // Webhook mode without an apiserver allows no one.
            return false;
        };
        let api: Api<SubjectAccessReview> = Api::all(client);
        let sar = sar(user, attrs, &self.node);
        let ok = match api.create(&PostParams::default(), &sar).await {
            Ok(r) => r.status.is_some_and(|s| s.allowed),
            Err(e) => {
                tracing::warn!("SubjectAccessReview: {e}");
                return false;
            }
        };
        let mut cache = self.decisions.lock();
        cache.retain(|_, (ok, at)| at.elapsed() < if *ok { ALLOWED_TTL } else { DENIED_TTL });
        cache.insert(key, (ok, Instant::now()));
        ok
    }
}

/// The SubjectAccessReview the kubelet sends for a request.
pub fn sar(user: &User, attrs: &Attributes, node: &str) -> SubjectAccessReview {
    SubjectAccessReview {
        spec: SubjectAccessReviewSpec {
            user: Some(user.name.clone()),
            uid: (!user.uid.is_empty()).then(|| user.uid.clone()),
            groups: Some(user.groups.clone()),
            extra: (!user.extra.is_empty()).then(|| user.extra.clone()),
            resource_attributes: Some(ResourceAttributes {
                verb: Some(attrs.verb.into()),
                resource: Some("nodes".into()),
                subresource: Some(attrs.subresource.into()),
                name: Some(node.into()),
                version: Some("v1".into()),
                group: Some(String::new()),
                namespace: Some(String::new()),
                ..Default::default()
            }),
            ..Default::default()
        },
        ..Default::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use hyper::Method;

    #[test]
    fn paths_map_onto_node_subresources_as_the_kubelets() {
        let a = |m: Method, p: &str| {
            let x = attributes(&m, p);
            (x.verb, x.subresource)
        };
        assert_eq!(a(Method::GET, "/stats/summary"), ("get", "stats"));
        assert_eq!(a(Method::GET, "/stats"), ("get", "stats"));
        assert_eq!(a(Method::GET, "/statsx"), ("get", "proxy"));
        assert_eq!(a(Method::GET, "/metrics/resource"), ("get", "metrics"));
        assert_eq!(a(Method::GET, "/metrics"), ("get", "metrics"));
        assert_eq!(a(Method::GET, "/logs/syslog"), ("get", "log"));
        assert_eq!(a(Method::GET, "/containerLogs/ns/p/c"), ("get", "proxy"));
        assert_eq!(a(Method::POST, "/exec/ns/p/c"), ("create", "proxy"));
        assert_eq!(a(Method::GET, "/healthz"), ("get", "proxy"));
        assert_eq!(a(Method::GET, "/pods"), ("get", "proxy"));
        assert_eq!(a(Method::PUT, "/x"), ("update", "proxy"));
    }

    #[tokio::test]
    async fn who_a_request_is() {
        let auth = Auth::new(true, false, Mode::AlwaysAllow, "n1".into(), None);
        let cert = ("admin".to_string(), vec!["system:masters".to_string()]);
        let u = auth.authenticate(Some(Ok(&cert)), None).await.unwrap();
        assert_eq!(u.name, "admin");
        assert_eq!(u.groups, ["system:masters", "system:authenticated"]);
        assert_eq!(
            auth.authenticate(None, None).await.unwrap(),
            User::anonymous()
        );
        // A token without the token webhook is not looked at: anonymous.
        assert_eq!(
            auth.authenticate(None, Some("Bearer abc")).await.unwrap(),
            User::anonymous()
        );
        // A certificate the client CA did not sign: no one, also with anonymous allowed.
        assert_eq!(
            auth.authenticate(Some(Err(&())), None).await,
            Err(Refusal::Unauthenticated)
        );
        let strict = Auth::new(false, true, Mode::AlwaysAllow, "n1".into(), None);
        assert_eq!(
            strict.authenticate(None, None).await,
            Err(Refusal::Unauthenticated)
        );
        // A token no apiserver vouches for: 401, also with anonymous allowed.
        let tokens = Auth::new(true, true, Mode::AlwaysAllow, "n1".into(), None);
        assert_eq!(
            tokens.authenticate(None, Some("Bearer abc")).await,
            Err(Refusal::Unauthenticated)
        );
    }

    #[tokio::test]
    async fn what_a_user_may_do() {
        let u = User::anonymous();
        let get_stats = attributes(&Method::GET, "/stats/summary");
        let open = Auth::new(true, false, Mode::AlwaysAllow, "n1".into(), None);
        assert_eq!(open.authorize(&u, &get_stats).await, Ok(()));
        let webhook = Auth::new(true, false, Mode::Webhook, "n1".into(), None);
        assert_eq!(
            webhook.authorize(&u, &get_stats).await,
            Err(Refusal::Forbidden(
                "Forbidden (user=system:anonymous, verb=get, resource=nodes, subresource=stats)"
                    .into()
            ))
        );
    }

    #[test]
    fn the_access_review_names_the_node() {
        let u = User {
            name: "bob".into(),
            groups: vec!["g".into()],
            ..Default::default()
        };
        let v = serde_json::to_value(sar(
            &u,
            &attributes(&hyper::Method::POST, "/exec/a/b/c"),
            "n1",
        ))
        .unwrap();
        let ra = &v["spec"]["resourceAttributes"];
        assert_eq!(ra["resource"], "nodes");
        assert_eq!(ra["subresource"], "proxy");
        assert_eq!(ra["verb"], "create");
        assert_eq!(ra["name"], "n1");
        assert_eq!(v["spec"]["user"], "bob");
        assert_eq!(v["spec"]["groups"][0], "g");
        assert!(v["spec"].get("uid").is_none());
    }
}
