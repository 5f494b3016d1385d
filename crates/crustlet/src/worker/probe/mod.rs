//! Liveness, readiness and startup probes: exec (through CRI ExecSync), HTTP GET, TCP
//! and gRPC (`grpc.health.v1.Health/Check`), run from the node against the pod's IP as
//! the kubelet runs them, with the probe's delay, period, timeout and thresholds.

mod http_get;

use crate::cri::Cri;
use k8s_openapi::api::core::v1::{Container, LifecycleHandler, Pod, Probe};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use std::time::{Duration, Instant};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    Success,
    Failure,
}

/// One probe of one container instance: when it runs next and its run of results.
#[derive(Debug)]
pub struct State {
    pub next: Instant,
    successes: i32,
    failures: i32,
    /// The probe's verdict once a threshold was crossed (None: none yet).
    pub verdict: Option<Outcome>,
    pub last_message: String,
}

impl State {
    pub fn new(p: &Probe, started: Instant) -> State {
        State {
            next: started + Duration::from_secs(p.initial_delay_seconds.unwrap_or(0).max(0) as u64),
            successes: 0,
            failures: 0,
            verdict: None,
            last_message: String::new(),
        }
    }

    /// Counts a result against the thresholds; returns the verdict when it changes.
    pub fn record(&mut self, p: &Probe, r: Outcome, message: String) -> Option<Outcome> {
        self.next =
            Instant::now() + Duration::from_secs(p.period_seconds.unwrap_or(10).max(1) as u64);
        self.last_message = message;
        match r {
            Outcome::Success => {
                self.successes += 1;
                self.failures = 0;
                if self.successes >= p.success_threshold.unwrap_or(1).max(1)
                    && self.verdict != Some(Outcome::Success)
                {
                    self.verdict = Some(Outcome::Success);
                    return self.verdict;
                }
            }
            Outcome::Failure => {
                self.failures += 1;
                self.successes = 0;
                if self.failures >= p.failure_threshold.unwrap_or(3).max(1)
                    && self.verdict != Some(Outcome::Failure)
                {
                    self.verdict = Some(Outcome::Failure);
                    return self.verdict;
                }
            }
        }
        None
    }
}

/// A named port of the container, or a number.
fn port(c: &Container, p: &IntOrString) -> Result<u16, String> {
    match p {
        IntOrString::Int(n) => u16::try_from(*n).map_err(|_| format!("port {n} out of range")),
        IntOrString::String(name) => {
            if let Ok(n) = name.parse::<u16>() {
                return Ok(n);
            }
            c.ports
                .iter()
                .flatten()
                .find(|x| x.name.as_deref() == Some(name))
                .and_then(|x| u16::try_from(x.container_port).ok())
                .ok_or_else(|| format!("container has no port named {name:?}"))
        }
    }
}

/// Runs `p` once against the container `id` of `c`, reachable at `ip`: the outcome, its
/// message, and whether the success comes with the kubelet's warning (an HTTP
/// redirect to another host, not followed).
pub async fn run(
    cri: &Cri,
    p: &Probe,
    c: &Container,
    id: &str,
    ip: &str,
) -> (Outcome, String, bool) {
    let mut warning = false;
    let timeout = Duration::from_secs(p.timeout_seconds.unwrap_or(1).max(1) as u64);
    let r = if let Some(e) = &p.exec {
        exec(cri, id, e.command.clone().unwrap_or_default(), timeout).await
    } else if let Some(h) = &p.http_get {
        match port(c, &h.port) {
            Ok(port) => {
                let g = http_get::Get::new(h, port, ip, http_get::Purpose::Probe);
                tokio::time::timeout(timeout, http_probe(&g))
                    .await
                    .unwrap_or_else(|_| {
                        Err(format!(
                            "Get {:?}: context deadline exceeded (Client.Timeout exceeded while awaiting headers)",
                            g.url()
                        ))
                    })
                    .map(|(m, w)| {
                        warning = w;
                        m
                    })
            }
            Err(e) => Err(e),
        }
    } else if let Some(t) = &p.tcp_socket {
        match port(c, &t.port) {
            Ok(port) => {
                let host = t
                    .host
                    .clone()
                    .filter(|h| !h.is_empty())
                    .unwrap_or_else(|| ip.to_string());
                match tokio::time::timeout(
                    timeout,
                    tokio::net::TcpStream::connect((host.as_str(), port)),
                )
                .await
                {
                    Ok(Ok(_)) => Ok(String::new()),
                    Ok(Err(e)) => Err(format!("dial tcp {host}:{port}: {e}")),
                    Err(_) => Err(format!("dial tcp {host}:{port}: timeout")),
                }
            }
            Err(e) => Err(e),
        }
    } else if let Some(g) = &p.grpc {
        match u16::try_from(g.port) {
            Ok(port) => grpc_check(ip, port, g.service.as_deref().unwrap_or(""), timeout).await,
            Err(_) => Err(format!("port {} out of range", g.port)),
        }
    } else {
        Err("probe has no handler (exec, httpGet, tcpSocket or grpc)".into())
    };
    match r {
        Ok(m) => (Outcome::Success, m, warning),
        Err(m) => (Outcome::Failure, m, false),
    }
}

/// The grace period, in seconds, of a container the crustlet kills while its pod runs,
/// as the kubelet's `setTerminationGracePeriod` and `killContainer` pick it: the pod's
/// deletion grace period when it is being deleted; else, for a container that failed
/// the liveness or startup probe `failed`, that probe's `terminationGracePeriodSeconds`
/// when set; else the pod's (30 s if unset); never less than 2 s.
pub fn kill_grace(pod: &Pod, failed: Option<&Probe>) -> i64 {
    let grace = pod
        .metadata
        .deletion_grace_period_seconds
        .or_else(|| failed.and_then(|p| p.termination_grace_period_seconds))
        .or(pod
            .spec
            .as_ref()
            .and_then(|s| s.termination_grace_period_seconds))
        .unwrap_or(30);
    grace.max(2)
}

/// Runs a lifecycle hook (postStart, preStop): exec, HTTP GET or a sleep, within `limit`.
pub async fn hook(
    cri: &Cri,
    h: &LifecycleHandler,
    c: &Container,
    id: &str,
    ip: &str,
    limit: Duration,
) -> Result<(), String> {
    let work = async {
        if let Some(e) = &h.exec {
            exec(cri, id, e.command.clone().unwrap_or_default(), limit)
                .await
                .map(|_| ())
        } else if let Some(g) = &h.http_get {
            // The answer's status does not matter: a hook fails only when no answer
            // comes, as the kubelet's.
            let g = http_get::Get::new(g, port(c, &g.port)?, ip, http_get::Purpose::Lifecycle);
            http_get::send(&g).await.map(|_| ())
        } else if let Some(s) = &h.sleep {
            tokio::time::sleep(Duration::from_secs(s.seconds.max(0) as u64)).await;
            Ok(())
        } else {
            Err("hook has no handler".into())
        }
    };
    tokio::time::timeout(limit, work)
        .await
        .unwrap_or_else(|_| Err(format!("hook did not finish within {limit:?}")))
}

async fn exec(cri: &Cri, id: &str, cmd: Vec<String>, timeout: Duration) -> Result<String, String> {
    let mut rt = cri.runtime.clone();
    let r = rt
        .exec_sync(cri_api::ExecSyncRequest {
            container_id: id.to_string(),
            cmd,
            timeout: timeout.as_secs() as i64,
        })
        .await
        .map_err(|e| format!("exec: {}", e.message()))?
        .into_inner();
    let out = String::from_utf8_lossy(&[r.stdout, r.stderr].concat()).into_owned();
    if r.exit_code == 0 {
        Ok(out)
    } else {
        Err(format!("command exited {}: {}", r.exit_code, out.trim()))
    }
}

/// An HTTP(S) probe: 200–399 is a success, as the kubelet counts it (a redirect to
/// another host is not followed, and a success with a warning quoting its body).
async fn http_probe(g: &http_get::Get) -> Result<(String, bool), String> {
    let r = http_get::send(g).await?;
    match r.status {
        200..=399 if r.redirect_not_followed => Ok((
            format!("Probe terminated redirects, Response body: {}", r.body),
            true,
        )),
        200..=399 => Ok((String::new(), false)),
        code => Err(format!("HTTP probe failed with statuscode: {code}")),
    }
}

/// The two messages of the gRPC health checking protocol (package `grpc.health.v1`) a
/// probe needs, written out instead of generated from its `.proto`.
pub mod health {
    pub const CHECK: &str = "/grpc.health.v1.Health/Check";

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct HealthCheckRequest {
        #[prost(string, tag = "1")]
        pub service: String,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct HealthCheckResponse {
        #[prost(enumeration = "ServingStatus", tag = "1")]
        pub status: i32,
    }

    #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, prost::Enumeration)]
    #[repr(i32)]
    pub enum ServingStatus {
        Unknown = 0,
        Serving = 1,
        NotServing = 2,
        ServiceUnknown = 3,
    }

    /// The status as the protocol names it (`NOT_SERVING`); a number it does not know.
    pub fn status_name(status: i32) -> String {
        match ServingStatus::try_from(status) {
            Ok(ServingStatus::Unknown) => "UNKNOWN".into(),
            Ok(ServingStatus::Serving) => "SERVING".into(),
            Ok(ServingStatus::NotServing) => "NOT_SERVING".into(),
            Ok(ServingStatus::ServiceUnknown) => "SERVICE_UNKNOWN".into(),
            Err(_) => status.to_string(),
        }
    }
}

/// A gRPC health check of `service` at `host:port` over plain-text HTTP/2, all of it
/// within `timeout`; SERVING is a success. The messages are the kubelet's. As the
/// kubelet's blocking dial, a refused connection is tried again until the time is up.
async fn grpc_check(
    host: &str,
    port: u16,
    service: &str,
    timeout: Duration,
) -> Result<String, String> {
    use health::{HealthCheckRequest, HealthCheckResponse, ServingStatus};
    let deadline = tokio::time::Instant::now() + timeout;
    let addr = if host.contains(':') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    };
    let secs = timeout.as_secs();
    let endpoint = tonic::transport::Endpoint::from_shared(format!("http://{addr}"))
        .map_err(|e| format!("error: failed to connect service at {addr:?}: {e}"))?
        .user_agent("kube-probe/1.28")
        .map_err(|e| e.to_string())?;
    let channel = loop {
        let refused = match tokio::time::timeout_at(deadline, endpoint.connect()).await {
            Ok(Ok(ch)) => break ch,
            Ok(Err(e)) => e,
            Err(_) => {
                return Err(format!(
                    "timeout: failed to connect service {addr:?} within {secs}s: context deadline exceeded"
                ))
            }
        };
        tracing::trace!(%addr, "grpc probe: {refused}");
        tokio::time::sleep_until(
            deadline.min(tokio::time::Instant::now() + Duration::from_millis(200)),
        )
        .await;
    };
    let mut client = tonic::client::Grpc::new(channel);
    let call = async {
        client
            .ready()
            .await
            .map_err(|e| tonic::Status::unavailable(e.to_string()))?;
        client
            .unary(
                tonic::Request::new(HealthCheckRequest {
                    service: service.to_string(),
                }),
                tonic::codegen::http::uri::PathAndQuery::from_static(health::CHECK),
                tonic_prost::ProstCodec::<HealthCheckRequest, HealthCheckResponse>::default(),
            )
            .await
    };
    let slow = || format!("timeout: health rpc did not complete within {secs}s");
    match tokio::time::timeout_at(deadline, call).await {
        Err(_) => Err(slow()),
        Ok(Err(s)) => Err(match s.code() {
            tonic::Code::Unimplemented => format!(
                "error: this server does not implement the grpc health protocol (grpc.health.v1.Health): {}",
                s.message()
            ),
            tonic::Code::DeadlineExceeded => slow(),
            code => format!(
                "error: health rpc probe failed: rpc error: code = {code:?} desc = {}",
                s.message()
            ),
        }),
        Ok(Ok(r)) if r.get_ref().status == ServingStatus::Serving as i32 => {
            Ok("service healthy".into())
        }
        Ok(Ok(r)) => Err(format!(
            "service unhealthy (responded with {:?})",
            health::status_name(r.get_ref().status)
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::HTTPGetAction;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    #[test]
    fn thresholds() {
        let p = Probe {
            failure_threshold: Some(2),
            success_threshold: Some(1),
            ..Default::default()
        };
        let mut s = State::new(&p, Instant::now());
        assert_eq!(
            s.record(&p, Outcome::Success, String::new()),
            Some(Outcome::Success)
        );
        assert_eq!(s.record(&p, Outcome::Failure, String::new()), None);
        assert_eq!(
            s.record(&p, Outcome::Failure, String::new()),
            Some(Outcome::Failure)
        );
        assert_eq!(
            s.record(&p, Outcome::Failure, String::new()),
            None,
            "reported once"
        );
        assert_eq!(
            s.record(&p, Outcome::Success, String::new()),
            Some(Outcome::Success)
        );
    }

    #[test]
    fn a_failed_probe_kills_with_its_own_grace_period() {
        let pod = |v: serde_json::Value| serde_json::from_value::<Pod>(v).unwrap();
        let probe = |grace: Option<i64>| Probe {
            termination_grace_period_seconds: grace,
            ..Default::default()
        };
        let running = pod(
            serde_json::json!({"spec": {"containers": [], "terminationGracePeriodSeconds": 600}}),
        );
        assert_eq!(kill_grace(&running, None), 600);
        assert_eq!(kill_grace(&running, Some(&probe(None))), 600);
        assert_eq!(kill_grace(&running, Some(&probe(Some(5)))), 5);
        assert_eq!(
            kill_grace(&running, Some(&probe(Some(0)))),
            2,
            "at least 2 s"
        );
        let deleting = pod(serde_json::json!({
            "metadata": {"deletionGracePeriodSeconds": 10},
            "spec": {"containers": [], "terminationGracePeriodSeconds": 600},
        }));
        assert_eq!(kill_grace(&deleting, Some(&probe(Some(5)))), 10);
        let unset = pod(serde_json::json!({"spec": {"containers": []}}));
        assert_eq!(kill_grace(&unset, None), 30);
    }

    #[tokio::test]
    async fn http_and_named_ports() {
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port_no = l.local_addr().unwrap().port();
        tokio::spawn(async move {
            for code in ["200 OK", "500 Internal Server Error"] {
                let (mut s, _) = l.accept().await.unwrap();
                let mut b = [0u8; 512];
                let _ = s.read(&mut b).await;
                s.write_all(format!("HTTP/1.1 {code}\r\nContent-Length: 0\r\n\r\n").as_bytes())
                    .await
                    .unwrap();
            }
        });
        let get = |path: &str| {
            let a = HTTPGetAction {
                path: Some(path.into()),
                ..Default::default()
            };
            http_get::Get::new(&a, port_no, "127.0.0.1", http_get::Purpose::Probe)
        };
        assert_eq!(
            http_probe(&get("/healthz")).await,
            Ok((String::new(), false))
        );
        let e = http_probe(&get("/")).await.unwrap_err();
        assert_eq!(e, "HTTP probe failed with statuscode: 500");
        let c: Container = serde_json::from_value(
            serde_json::json!({"name": "c", "ports": [{"name": "web", "containerPort": 8080}]}),
        )
        .unwrap();
        assert_eq!(port(&c, &IntOrString::String("web".into())), Ok(8080));
        assert_eq!(port(&c, &IntOrString::Int(81)), Ok(81));
        assert!(port(&c, &IntOrString::String("nope".into())).is_err());
    }

    /// A gRPC health server for the tests: each service name has a status (an unknown
    /// name gets NOT_FOUND, as grpc-go's health server answers); `slow` answers late.
    #[derive(Clone)]
    struct HealthServer {
        statuses: std::sync::Arc<HashMap<String, health::ServingStatus>>,
        slow: Duration,
    }

    use std::collections::HashMap;
    use tonic::codegen::{http, BoxFuture, Service};

    impl tonic::server::NamedService for HealthServer {
        const NAME: &'static str = "grpc.health.v1.Health";
    }

    impl tonic::server::UnaryService<health::HealthCheckRequest> for HealthServer {
        type Response = health::HealthCheckResponse;
        type Future = BoxFuture<tonic::Response<Self::Response>, tonic::Status>;
        fn call(&mut self, req: tonic::Request<health::HealthCheckRequest>) -> Self::Future {
            let me = self.clone();
            Box::pin(async move {
                tokio::time::sleep(me.slow).await;
                match me.statuses.get(&req.get_ref().service) {
                    Some(s) => Ok(tonic::Response::new(health::HealthCheckResponse {
                        status: *s as i32,
                    })),
                    None => Err(tonic::Status::not_found("unknown service")),
                }
            })
        }
    }

    impl Service<http::Request<tonic::body::Body>> for HealthServer {
        type Response = http::Response<tonic::body::Body>;
        type Error = std::convert::Infallible;
        type Future = BoxFuture<Self::Response, Self::Error>;
        fn poll_ready(
            &mut self,
            _: &mut std::task::Context<'_>,
        ) -> std::task::Poll<Result<(), Self::Error>> {
            std::task::Poll::Ready(Ok(()))
        }
        fn call(&mut self, req: http::Request<tonic::body::Body>) -> Self::Future {
            let me = self.clone();
            Box::pin(async move {
                if req.uri().path() != health::CHECK {
                    return Ok(tonic::Status::unimplemented("").into_http());
                }
                let mut grpc = tonic::server::Grpc::new(tonic_prost::ProstCodec::default());
                Ok(grpc.unary(me, req).await)
            })
        }
    }

    /// Serves `h` on a port of 127.0.0.1 in the background; the port.
    async fn serve(h: HealthServer) -> u16 {
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = l.local_addr().unwrap().port();
        tokio::spawn(
            tonic::transport::Server::builder()
                .add_service(h)
                .serve_with_incoming(tonic::transport::server::TcpIncoming::from(l)),
        );
        port
    }

    #[tokio::test]
    async fn grpc_health_checks() {
        use health::ServingStatus::*;
        let statuses: HashMap<String, health::ServingStatus> = [
            ("".to_string(), Serving),
            ("web".to_string(), Serving),
            ("db".to_string(), NotServing),
        ]
        .into();
        let statuses = std::sync::Arc::new(statuses);
        let t = Duration::from_secs(1);
        let port = serve(HealthServer {
            statuses: statuses.clone(),
            slow: Duration::ZERO,
        })
        .await;
        assert_eq!(
            grpc_check("127.0.0.1", port, "", t).await,
            Ok("service healthy".into())
        );
        assert!(grpc_check("127.0.0.1", port, "web", t).await.is_ok());
        assert_eq!(
            grpc_check("127.0.0.1", port, "db", t).await,
            Err(r#"service unhealthy (responded with "NOT_SERVING")"#.into())
        );
        let e = grpc_check("127.0.0.1", port, "nope", t).await.unwrap_err();
        assert_eq!(
            e,
            "error: health rpc probe failed: rpc error: code = NotFound desc = unknown service"
        );

        // Nothing listening: tried until the time is up, as the kubelet's dial.
        let closed = {
            let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            l.local_addr().unwrap().port()
        };
        let started = Instant::now();
        let e = grpc_check("127.0.0.1", closed, "", t).await.unwrap_err();
        assert_eq!(
            e,
            format!("timeout: failed to connect service \"127.0.0.1:{closed}\" within 1s: context deadline exceeded")
        );
        assert!(
            started.elapsed() >= t,
            "gave up after {:?}",
            started.elapsed()
        );

        // An answer later than the probe's timeout.
        let slow = serve(HealthServer {
            statuses,
            slow: Duration::from_secs(3),
        })
        .await;
        let started = Instant::now();
        let e = grpc_check("127.0.0.1", slow, "", t).await.unwrap_err();
        assert_eq!(e, "timeout: health rpc did not complete within 1s");
        assert!(
            started.elapsed() < Duration::from_secs(2),
            "{:?}",
            started.elapsed()
        );

        // Through `run`, as the worker runs it: the port is the probe's, the host the
        // pod's IP (no runtime is needed).
        let cri = Cri::lazy(std::path::Path::new("/nonexistent/cri.sock"));
        let c = Container::default();
        let probe = |v: serde_json::Value| serde_json::from_value::<Probe>(v).unwrap();
        let p = probe(serde_json::json!({"grpc": {"port": port, "service": "db"}}));
        let (r, m, _) = run(&cri, &p, &c, "", "127.0.0.1").await;
        assert_eq!(r, Outcome::Failure, "{m}");
        let p = probe(serde_json::json!({"grpc": {"port": port}}));
        assert_eq!(run(&cri, &p, &c, "", "127.0.0.1").await.0, Outcome::Success);
    }
}
