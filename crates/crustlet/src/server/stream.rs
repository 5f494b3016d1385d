//! `/exec`, `/attach`, `/portForward` and `/run`: the runtime does the streaming. The
//! crustlet asks it for a URL (CRI Exec, Attach, PortForward) and proxies the client's
//! upgrade there, whatever the protocol (SPDY/3.1 or WebSocket): the request goes on
//! with its method and headers, the runtime's 101 comes back, and the two connections
//! are spliced. The kubelet does the same (its "redirect container streaming" off).
//!
//! Pods and containers are found in the runtime by the labels the crustlet gave them,
//! so a request needs nothing but the runtime.

use crate::cri::Cri;
use cri_api as cri;
use std::collections::HashMap;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// A container instance of a pod, as the runtime knows it.
#[derive(Debug, Clone)]
pub struct Instance {
    pub id: String,
    pub created_at: i64,
    pub running: bool,
}

/// Why a pod or container could not be used: (HTTP status, message).
pub type Failure = (u16, String);

/// The pod's sandboxes, newest first, by namespace and name (and uid when the path
/// has one).
pub async fn sandboxes(
    cri: &Cri,
    ns: &str,
    pod: &str,
    uid: Option<&str>,
) -> Result<Vec<cri::PodSandbox>, Failure> {
    let mut labels = HashMap::from([
        (crate::spec::POD_NAMESPACE.to_string(), ns.to_string()),
        (crate::spec::POD_NAME.to_string(), pod.to_string()),
    ]);
    if let Some(u) = uid {
        labels.insert(crate::spec::POD_UID.to_string(), u.to_string());
    }
    let mut rt = cri.runtime.clone();
    let mut items = rt
        .list_pod_sandbox(cri::ListPodSandboxRequest {
            filter: Some(cri::PodSandboxFilter {
                label_selector: labels,
                ..Default::default()
            }),
        })
        .await
        .map_err(|s| (503, format!("the runtime: {}", s.message())))?
        .into_inner()
        .items;
    if items.is_empty() {
        return Err((404, format!("pod {ns}/{pod} does not exist")));
    }
    items.sort_by_key(|s| std::cmp::Reverse(s.created_at));
    Ok(items)
}

/// The instances of container `name` of the pod, newest first.
pub async fn instances(
    cri: &Cri,
    ns: &str,
    pod: &str,
    uid: Option<&str>,
    name: &str,
) -> Result<Vec<Instance>, Failure> {
    let sbs = sandboxes(cri, ns, pod, uid).await?;
    let mut rt = cri.runtime.clone();
    let mut out = vec![];
    for sb in &sbs {
        let list = rt
            .list_containers(cri::ListContainersRequest {
                filter: Some(cri::ContainerFilter {
                    pod_sandbox_id: sb.id.clone(),
                    label_selector: HashMap::from([(
                        crate::spec::CONTAINER_NAME.to_string(),
                        name.to_string(),
                    )]),
                    ..Default::default()
                }),
            })
            .await
            .map_err(|s| (503, format!("the runtime: {}", s.message())))?
            .into_inner()
            .containers;
        out.extend(list.into_iter().map(|c| Instance {
            running: c.state == cri::ContainerState::ContainerRunning as i32,
            id: c.id,
            created_at: c.created_at,
        }));
    }
    if out.is_empty() {
        return Err((
            404,
            format!("container {name:?} not found in pod {ns}/{pod}"),
        ));
    }
    out.sort_by_key(|i| std::cmp::Reverse(i.created_at));
    Ok(out)
}

/// The running instance of a container, for exec and attach.
pub async fn running(
    cri: &Cri,
    ns: &str,
    pod: &str,
    uid: Option<&str>,
    name: &str,
) -> Result<Instance, Failure> {
    instances(cri, ns, pod, uid, name)
        .await?
        .into_iter()
        .find(|i| i.running)
        .ok_or_else(|| {
            (
                400,
                format!("container {name:?} in pod {ns}/{pod} is not running"),
            )
        })
}

/// What a remote command asks for: the kubelet's query names (`input`, `output`,
/// `error`, `tty`, `command`) and the long ones, "1" or "true".
#[derive(Debug, Default, PartialEq)]
pub struct Command {
    pub cmd: Vec<String>,
    pub stdin: bool,
    pub stdout: bool,
    pub stderr: bool,
    pub tty: bool,
}

pub fn command(q: &[(String, String)]) -> Command {
    let on = |names: &[&str]| {
        q.iter()
            .any(|(k, v)| names.contains(&k.as_str()) && super::logs::parse_bool(v) == Some(true))
    };
    Command {
        cmd: q
            .iter()
            .filter(|(k, _)| k == "command")
            .map(|(_, v)| v.clone())
            .collect(),
        stdin: on(&["input", "stdin"]),
        stdout: on(&["output", "stdout"]),
        stderr: on(&["error", "stderr"]),
        tty: on(&["tty"]),
    }
}

/// The runtime's streaming URL for an exec or attach.
pub async fn exec_url(cri: &Cri, id: &str, c: &Command, attach: bool) -> Result<String, Failure> {
    if !c.stdin && !c.stdout && !c.stderr {
        return Err((
            400,
            "you must specify at least 1 of stdin, stdout, stderr".into(),
        ));
    }
    if !attach && c.cmd.is_empty() {
        return Err((400, "you must specify a command".into()));
    }
    let mut rt = cri.runtime.clone();
    let res = if attach {
        rt.attach(cri::AttachRequest {
            container_id: id.into(),
            stdin: c.stdin,
            tty: c.tty,
            stdout: c.stdout,
            stderr: c.stderr,
        })
        .await
        .map(|r| r.into_inner().url)
    } else {
        rt.exec(cri::ExecRequest {
            container_id: id.into(),
            cmd: c.cmd.clone(),
            tty: c.tty,
            stdin: c.stdin,
            stdout: c.stdout,
            stderr: c.stderr,
        })
        .await
        .map(|r| r.into_inner().url)
    };
    res.map_err(|s| (500, s.message().to_string()))
}

/// The runtime's streaming URL for port forwarding into the pod's sandbox (the ports
/// come in the streams' headers).
pub async fn port_forward_url(cri: &Cri, sandbox: &str) -> Result<String, Failure> {
    let mut rt = cri.runtime.clone();
    rt.port_forward(cri::PortForwardRequest {
        pod_sandbox_id: sandbox.into(),
        port: vec![],
    })
    .await
    .map(|r| r.into_inner().url)
    .map_err(|s| (500, s.message().to_string()))
}

/// `/run`: the command (split on spaces, as the kubelet splits it) run to its end; its
/// output, stdout then stderr.
pub async fn run(cri: &Cri, id: &str, cmd: &str) -> Result<Vec<u8>, Failure> {
    let mut rt = cri.runtime.clone();
    let r = rt
        .exec_sync(cri::ExecSyncRequest {
            container_id: id.into(),
            cmd: cmd.split(' ').map(str::to_string).collect(),
            timeout: 0,
        })
        .await
        .map_err(|s| (500, s.message().to_string()))?
        .into_inner();
    let mut out = r.stdout;
    out.extend_from_slice(&r.stderr);
    Ok(out)
}

/// What the runtime answered an upgrade: its status line's code and headers, and the
/// connection to splice on a 101 (or the body of a refusal).
pub struct Upstream {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub conn: tokio::net::TcpStream,
    pub body: Vec<u8>,
}

/// Sends the client's request (method, headers but Host and the body's) to `url` and
/// reads the answer's head, leaving everything after it on the connection.
pub async fn upgrade_upstream(
    method: &hyper::Method,
    headers: &hyper::HeaderMap,
    url: &str,
) -> Result<Upstream, String> {
    let rest = url
        .strip_prefix("http://")
        .ok_or_else(|| format!("the runtime's URL {url:?} is not http://"))?;
    let (hostport, path) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
    let path = if path.is_empty() { "/" } else { path };
    let mut back = tokio::net::TcpStream::connect(hostport)
        .await
        .map_err(|e| format!("connecting to the runtime's streaming server {hostport}: {e}"))?;
    let mut head = format!("{method} {path} HTTP/1.1\r\nHost: {hostport}\r\n");
    for (k, v) in headers {
        if k == "host" || k == "content-length" || k == "transfer-encoding" {
            continue;
        }
        head.push_str(&format!("{k}: {}\r\n", v.to_str().unwrap_or("")));
    }
    if method != hyper::Method::GET {
        head.push_str("Content-Length: 0\r\n");
    }
    head.push_str("\r\n");
    back.write_all(head.as_bytes())
        .await
        .map_err(|e| format!("writing to the runtime: {e}"))?;
    // The head byte by byte, so that nothing after it is taken off the connection.
    let mut resp = Vec::new();
    while !resp.ends_with(b"\r\n\r\n") {
        let mut b = [0u8; 1];
        match back.read(&mut b).await {
            Ok(1) => resp.push(b[0]),
            _ => return Err("the runtime closed the connection".into()),
        }
        if resp.len() > 64 << 10 {
            return Err("the runtime's answer has no end of head".into());
        }
    }
    let text = String::from_utf8_lossy(&resp).into_owned();
    let status = text
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(502);
    let headers: Vec<(String, String)> = text
        .lines()
        .skip(1)
        .filter_map(|l| {
            let (k, v) = l.split_once(':')?;
            Some((k.trim().to_ascii_lowercase(), v.trim().to_string()))
        })
        .collect();
    let mut body = vec![];
    if status != 101 {
        let _ = tokio::time::timeout(
            std::time::Duration::from_secs(2),
            back.read_to_end(&mut body),
        )
        .await;
    }
    Ok(Upstream {
        status,
        headers,
        conn: back,
        body,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn remote_command_options_by_either_name() {
        let q: Vec<(String, String)> = [
            ("command", "sh"),
            ("command", "-c"),
            ("command", "echo hi"),
            ("input", "1"),
            ("output", "1"),
            ("stderr", "true"),
            ("tty", "0"),
        ]
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        assert_eq!(
            command(&q),
            Command {
                cmd: vec!["sh".into(), "-c".into(), "echo hi".into()],
                stdin: true,
                stdout: true,
                stderr: true,
                tty: false,
            }
        );
    }

    #[tokio::test]
    async fn an_upgrade_goes_on_with_its_headers_and_the_rest_stays_on_the_connection() {
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = l.local_addr().unwrap().port();
        let server = tokio::spawn(async move {
            let (mut s, _) = l.accept().await.unwrap();
            let mut buf = vec![0u8; 4096];
            let mut got = vec![];
            while !got.ends_with(b"\r\n\r\n") {
                let n = s.read(&mut buf).await.unwrap();
                got.extend_from_slice(&buf[..n]);
            }
            s.write_all(b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: SPDY/3.1\r\nX-Stream-Protocol-Version: v4.channel.k8s.io\r\n\r\nafter")
                .await
                .unwrap();
            String::from_utf8(got).unwrap()
        });
        let mut h = hyper::HeaderMap::new();
        h.insert("upgrade", "SPDY/3.1".parse().unwrap());
        h.insert(
            "x-stream-protocol-version",
            "v4.channel.k8s.io".parse().unwrap(),
        );
        h.insert("host", "node:10250".parse().unwrap());
        let mut up = upgrade_upstream(
            &hyper::Method::POST,
            &h,
            &format!("http://127.0.0.1:{port}/exec/tok"),
        )
        .await
        .unwrap();
        assert_eq!(up.status, 101);
        assert!(up.headers.contains(&(
            "x-stream-protocol-version".into(),
            "v4.channel.k8s.io".into()
        )));
        let mut rest = [0u8; 5];
        up.conn.read_exact(&mut rest).await.unwrap();
        assert_eq!(&rest, b"after");
        let req = server.await.unwrap();
        assert!(req.starts_with("POST /exec/tok HTTP/1.1\r\n"), "{req}");
        assert!(
            req.contains(&format!("Host: 127.0.0.1:{port}\r\n")),
            "{req}"
        );
        assert!(req.contains("upgrade: SPDY/3.1\r\n"), "{req}");
        assert!(req.contains("Content-Length: 0\r\n"), "{req}");
        assert!(!req.contains("node:10250"), "{req}");
    }
}
