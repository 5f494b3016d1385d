//! Who may ask a node's server what: requests made straight to the three nodes' servers
//! (the kubelet's at `<node ip>:10250`, the crustlet's on crustd at `:10251`, the one on
//! containerd at `:10252`), all three serving as kubeadm has a kubelet serve
//! (`--anonymous-auth=false`, the cluster's CA as `--client-ca-file`, bearer tokens
//! through TokenReview, `--authorization-mode=Webhook`) under an apiserver with
//! `Node,RBAC`. Each request goes to all three, with curl in the node namespace; the
//! crustlets must answer with the kubelet's status code and body.
//!
//! The credentials: none, a token the apiserver does not know, a certificate of another
//! CA, a ServiceAccount with no rights, one bound to `get` on `nodes/stats` and
//! `nodes/metrics`, a client certificate of the cluster's CA for a user with no rights
//! and for a group with the stats role, and the apiserver's own client certificate
//! (`system:kubelet-api-admin`). The apiserver's path (`kubectl logs`, `exec`, ...) is
//! the other checks'.

use super::{apply, kubectl, ok, run_timeout, s, Cluster, T};
use crust_e2e::cluster::{CONTAINERD_NODE, CRUSTLET_NODE, NODE};
use serde_json::json;
use std::path::PathBuf;
use std::process::Command;

const NS: &str = "crust-auth";
/// The ClusterRole that lets read a node's stats and metrics (and nothing else).
const STATS_ROLE: &str = "crust-auth-stats";
/// The group a client certificate's O puts its user in, bound to [`STATS_ROLE`].
const STATS_GROUP: &str = "crust-auth:stats-readers";

/// What a request carries to prove who sends it.
enum Cred {
    None,
    Token(String),
    /// A client certificate and its key.
    Cert(PathBuf, PathBuf),
}

/// A request made to each server.
struct Req {
    method: &'static str,
    path: &'static str,
}

const fn get(path: &'static str) -> Req {
    Req {
        method: "GET",
        path,
    }
}

/// Paths the kubelet v1.28 does not serve (`/spec/` went with its cAdvisor JSON
/// endpoints): a 404 before authentication, whoever asks.
const UNSERVED: &[&str] = &["/spec/", "/no/such/path"];

/// A path of each subresource a node's server maps requests onto (`stats`, `metrics`,
/// `log`, `proxy`), the verbs of GET and POST, and paths no one serves.
const EVERY_KIND: &[Req] = &[
    get("/pods"),
    get("/healthz"),
    get("/stats/summary"),
    get("/metrics/resource"),
    get("/metrics"),
    get("/logs/"),
    get("/configz"),
    get("/spec/"),
    get("/no/such/path"),
    get("/containerLogs/crust-auth/none/main"),
    Req {
        method: "POST",
        path: "/exec/crust-auth/none/main?command=true&output=1",
    },
];

/// The three servers: (node, address).
fn servers(c: &Cluster) -> [(&'static str, String); 3] {
    [
        (NODE, format!("{}:10250", c.ip)),
        (CRUSTLET_NODE, format!("{}:10251", c.crustlet_ip)),
        (CONTAINERD_NODE, format!("{}:10252", c.containerd_ip)),
    ]
}

/// `req` to `addr` with curl in the node namespace: (status, content type, body);
/// status 0 when no HTTP answer came (a refused TLS handshake, say).
fn request(c: &Cluster, addr: &str, req: &Req, cred: &Cred) -> (u16, String, String) {
    let mut cmd = c.net_cmd("curl");
    cmd.args(["-sk", "--max-time", "20", "-X", req.method])
        .args(["-o", "-", "-w", "\n%{content_type}\n%{http_code}"]);
    match cred {
        Cred::None => {}
        Cred::Token(t) => {
            cmd.arg("-H").arg(format!("Authorization: Bearer {t}"));
        }
        Cred::Cert(cert, key) => {
            cmd.arg("--cert").arg(cert).arg("--key").arg(key);
        }
    }
    cmd.arg(format!("https://{addr}{}", req.path));
    let out = run_timeout(&mut cmd, T);
    let text = s(&out.stdout);
    let (rest, code) = text.rsplit_once('\n').unwrap_or(("", &text));
    let (body, content_type) = rest.rsplit_once('\n').unwrap_or(("", rest));
    (
        code.trim().parse().unwrap_or(0),
        content_type.to_string(),
        body.to_string(),
    )
}

/// Sends each of `reqs` with `cred` to the three servers; panics, naming every
/// difference at once, unless each server answers `want(req)` ([`UNSERVED`] paths 404)
/// and the crustlets' refusals have the kubelet's body and content type.
fn expect(c: &Cluster, what: &str, cred: &Cred, reqs: &[Req], want: impl Fn(&Req) -> u16) {
    let servers = servers(c);
    let mut wrong = Vec::new();
    for req in reqs {
        let mut kubelet_body = String::new();
        for (node, addr) in &servers {
            let (code, content_type, body) = request(c, addr, req, cred);
            let body = format!("{content_type}: {body}");
            let want = if UNSERVED.contains(&req.path) {
                404
            } else {
                want(req)
            };
            if code != want {
                wrong.push(format!(
                    "{node}: {} {} gave {code}, not {want}: {:.300}",
                    req.method, req.path, body
                ));
                continue;
            }
            if code < 400 {
                continue;
            }
            if *node == NODE {
                kubelet_body = body;
            } else if body != kubelet_body {
                wrong.push(format!(
                    "{node}: {} {} said {body:?}, the kubelet {kubelet_body:?}",
                    req.method, req.path
                ));
            }
        }
    }
    assert!(wrong.is_empty(), "{what}:\n{}", wrong.join("\n"));
}

/// The suite's namespace, a ServiceAccount `name` in it (bound to [`STATS_ROLE`] with
/// `stats`), and a token of it.
fn service_account(c: &Cluster, name: &str, stats: bool) -> String {
    // Two checks may make it at once: one of them is told it exists.
    let out = run_timeout(&mut c.kubectl(&["create", "namespace", NS]), T);
    assert!(
        out.status.success() || s(&out.stderr).contains("AlreadyExists"),
        "{}",
        s(&out.stderr)
    );
    apply(
        c,
        json!({"apiVersion": "v1", "kind": "ServiceAccount",
               "metadata": {"name": name, "namespace": NS}}),
    );
    if stats {
        stats_role(c);
        apply(
            c,
            json!({
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": "ClusterRoleBinding",
                "metadata": {"name": format!("crust-auth-{name}")},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io",
                            "kind": "ClusterRole", "name": STATS_ROLE},
                "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": NS}],
            }),
        );
    }
    kubectl(c, &["create", "token", name, "-n", NS, "--duration=1h"])
        .trim()
        .to_string()
}

fn stats_role(c: &Cluster) {
    apply(
        c,
        json!({
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRole",
            "metadata": {"name": STATS_ROLE},
            "rules": [{"apiGroups": [""], "resources": ["nodes/stats", "nodes/metrics"],
                       "verbs": ["get"]}],
        }),
    );
}

/// No credentials, a token no one issued, a certificate of a CA the nodes do not
/// trust: 401 everywhere.
pub fn crustlet_auth_unauthenticated(c: &Cluster) {
    expect(c, "no credentials", &Cred::None, EVERY_KIND, |_| 401);
    expect(
        c,
        "a token the apiserver does not know",
        &Cred::Token("not-a-token".into()),
        EVERY_KIND,
        |_| 401,
    );
    // A CA of its own, and a user of it.
    let dir = c.path("pki/other-ca");
    std::fs::create_dir_all(&dir).unwrap();
    let script = format!(
        "set -e; cd {}
openssl req -x509 -newkey rsa:2048 -nodes -keyout ca.key -out ca.pem -days 1 -subj /CN=other-ca 2>/dev/null
openssl req -newkey rsa:2048 -nodes -keyout user.key -out user.csr -subj /CN=admin/O=system:masters 2>/dev/null
printf 'extendedKeyUsage=clientAuth\\n' > ext.cnf
openssl x509 -req -in user.csr -CA ca.pem -CAkey ca.key -set_serial 7 -out user.pem -days 1 -extfile ext.cnf 2>/dev/null",
        dir.display()
    );
    ok({
        let mut sh = Command::new("sh");
        sh.args(["-c", &script]);
        sh
    });
    expect(
        c,
        "a client certificate of another CA",
        &Cred::Cert(dir.join("user.pem"), dir.join("user.key")),
        &[get("/pods"), get("/stats/summary")],
        |_| 401,
    );
}

/// A ServiceAccount with no rights, and a client certificate of the cluster's CA for a
/// user with none: 403 for everything, with the kubelet's message.
pub fn crustlet_auth_no_rights(c: &Cluster) {
    let token = service_account(c, "nobody", false);
    expect(
        c,
        "a ServiceAccount with no rights",
        &Cred::Token(token),
        EVERY_KIND,
        |_| 403,
    );
    let (cert, key) = c.client_cert("auth-nobody", "crust-auth-nobody", &["crust-auth:nobodies"]);
    expect(
        c,
        "a client certificate of a user with no rights",
        &Cred::Cert(cert, key),
        EVERY_KIND,
        |_| 403,
    );
}

/// `get` on `nodes/stats` and `nodes/metrics`, for a ServiceAccount and for a client
/// certificate's group: the stats and metrics, nothing else.
pub fn crustlet_auth_stats_only(c: &Cluster) {
    let allowed = |r: &Req| {
        if r.method == "GET" && (r.path.starts_with("/stats/") || r.path.starts_with("/metrics")) {
            200
        } else {
            403
        }
    };
    let reqs = &[
        get("/stats/summary"),
        get("/metrics/resource"),
        get("/metrics"),
        get("/pods"),
        get("/logs/"),
        get("/healthz"),
        get("/containerLogs/crust-auth/none/main"),
        Req {
            method: "POST",
            path: "/stats/summary",
        },
    ];
    let token = service_account(c, "stats-reader", true);
    expect(
        c,
        "a ServiceAccount allowed nodes/stats and nodes/metrics",
        &Cred::Token(token),
        reqs,
        allowed,
    );
    apply(
        c,
        json!({
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding",
            "metadata": {"name": "crust-auth-stats-group"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io",
                        "kind": "ClusterRole", "name": STATS_ROLE},
            "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group",
                          "name": STATS_GROUP}],
        }),
    );
    let (cert, key) = c.client_cert("auth-stats", "crust-auth-reader", &[STATS_GROUP]);
    expect(
        c,
        "a client certificate in a group allowed nodes/stats and nodes/metrics",
        &Cred::Cert(cert, key),
        reqs,
        allowed,
    );
}

/// The apiserver's own client certificate (`system:kubelet-api-admin`) may do all.
pub fn crustlet_auth_apiserver_client(c: &Cluster) {
    let cred = Cred::Cert(
        c.path("pki/kubelet-client.pem"),
        c.path("pki/kubelet-client.key"),
    );
    expect(
        c,
        "the apiserver's client certificate",
        &cred,
        &[
            get("/pods"),
            get("/healthz"),
            get("/stats/summary"),
            get("/metrics/resource"),
            get("/logs/"),
        ],
        |_| 200,
    );
}
