//! Liveness, readiness and startup probes: exec (through CRI ExecSync), HTTP GET and
//! TCP, run from the node against the pod's IP as the kubelet runs them, with the
//! probe's delay, period, timeout and thresholds.

use crate::cri::Cri;
use k8s_openapi::api::core::v1::{Container, LifecycleHandler, Probe};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

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

/// Runs `p` once against the container `id` of `c`, reachable at `ip`.
pub async fn run(cri: &Cri, p: &Probe, c: &Container, id: &str, ip: &str) -> (Outcome, String) {
    let timeout = Duration::from_secs(p.timeout_seconds.unwrap_or(1).max(1) as u64);
    let r = if let Some(e) = &p.exec {
        exec(cri, id, e.command.clone().unwrap_or_default(), timeout).await
    } else if let Some(h) = &p.http_get {
        match port(c, &h.port) {
            Ok(port) => {
                let host = h
                    .host
                    .clone()
                    .filter(|h| !h.is_empty())
                    .unwrap_or_else(|| ip.to_string());
                let path = h.path.clone().unwrap_or_else(|| "/".into());
                let headers: Vec<(String, String)> = h
                    .http_headers
                    .iter()
                    .flatten()
                    .map(|x| (x.name.clone(), x.value.clone()))
                    .collect();
                tokio::time::timeout(timeout, http_get(&host, port, &path, &headers))
                    .await
                    .unwrap_or_else(|_| Err(format!("timeout after {timeout:?}")))
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
    } else {
        Err("probe has no handler (exec, httpGet or tcpSocket)".into())
    };
    match r {
        Ok(m) => (Outcome::Success, m),
        Err(m) => (Outcome::Failure, m),
    }
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
            let port = port(c, &g.port)?;
            let host = g
                .host
                .clone()
                .filter(|h| !h.is_empty())
                .unwrap_or_else(|| ip.to_string());
            let path = g.path.clone().unwrap_or_else(|| "/".into());
            http_get(&host, port, &path, &[]).await.map(|_| ())
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

/// An HTTP/1.1 GET; 200–399 is a success, as the kubelet counts it.
async fn http_get(
    host: &str,
    port: u16,
    path: &str,
    headers: &[(String, String)],
) -> Result<String, String> {
    let mut s = tokio::net::TcpStream::connect((host, port))
        .await
        .map_err(|e| format!("Get \"http://{host}:{port}{path}\": {e}"))?;
    let mut req = format!("GET {path} HTTP/1.1\r\nHost: {host}:{port}\r\nUser-Agent: kube-probe/1.28\r\nAccept: */*\r\nConnection: close\r\n");
    for (k, v) in headers {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    req.push_str("\r\n");
    s.write_all(req.as_bytes())
        .await
        .map_err(|e| e.to_string())?;
    let mut buf = vec![0u8; 1024];
    let mut n = 0;
    while n < buf.len() {
        let k = s.read(&mut buf[n..]).await.map_err(|e| e.to_string())?;
        if k == 0 {
            break;
        }
        n += k;
        if buf[..n].windows(2).any(|w| w == b"\r\n") {
            break;
        }
    }
    let line = String::from_utf8_lossy(&buf[..n]);
    let code: u16 = line
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .ok_or_else(|| {
            format!(
                "not an HTTP response: {:?}",
                line.lines().next().unwrap_or("")
            )
        })?;
    if (200..400).contains(&code) {
        Ok(String::new())
    } else {
        Err(format!("HTTP probe failed with statuscode: {code}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
        assert!(http_get("127.0.0.1", port_no, "/healthz", &[])
            .await
            .is_ok());
        let e = http_get("127.0.0.1", port_no, "/", &[]).await.unwrap_err();
        assert!(e.contains("500"), "{e}");
        let c: Container = serde_json::from_value(
            serde_json::json!({"name": "c", "ports": [{"name": "web", "containerPort": 8080}]}),
        )
        .unwrap();
        assert_eq!(port(&c, &IntOrString::String("web".into())), Ok(8080));
        assert_eq!(port(&c, &IntOrString::Int(81)), Ok(81));
        assert!(port(&c, &IntOrString::String("nope".into())).is_err());
    }
}
