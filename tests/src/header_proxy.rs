//! A reverse proxy for one test, on the host's 127.0.0.1 in front of a registry, that
//! lets through only requests carrying one header with one value (as a mirror that
//! wants an API key does) and answers any other 403; it counts both kinds.
//!
//! Each request let through goes to the registry on a connection of its own, asking
//! `Connection: close`, and the registry's answer comes back byte for byte as it
//! arrives (status, headers such as `Content-Type` and `Docker-Content-Digest`, a
//! chunked or sized body); then the client's connection is closed too, as that answer
//! says. `Host` is passed on unchanged, so any absolute `Location` the registry makes
//! points at the proxy, and relative ones resolve against it. Requests with a body
//! other than `Content-Length` (a chunked upload) are not supported: pushes go to the
//! registry directly. One thread per connection.

use std::io::{BufReader, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

pub struct HeaderProxy {
    /// `127.0.0.1:PORT`.
    pub addr: String,
    counts: Arc<Counts>,
}

#[derive(Default)]
struct Counts {
    with: AtomicUsize,
    without: AtomicUsize,
    /// Request lines of the refused requests, for failure messages.
    refused: Mutex<Vec<String>>,
}

impl HeaderProxy {
    /// In front of `upstream` (`127.0.0.1:PORT`), wanting `name: value` (one of the
    /// header's lines, when it has several).
    pub fn start(upstream: &str, name: &str, value: &str) -> HeaderProxy {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let counts = Arc::new(Counts::default());
        let (c, up) = (counts.clone(), upstream.to_string());
        let (name, value) = (name.to_ascii_lowercase(), value.to_string());
        std::thread::spawn(move || {
            for conn in listener.incoming().flatten() {
                let (c, up, name, value) = (c.clone(), up.clone(), name.clone(), value.clone());
                std::thread::spawn(move || serve(conn, &up, &name, &value, &c));
            }
        });
        HeaderProxy { addr, counts }
    }

    /// Requests that carried the header (and went to the registry).
    pub fn with_header(&self) -> usize {
        self.counts.with.load(Ordering::SeqCst)
    }

    /// Requests that lacked it (and got 403).
    pub fn without_header(&self) -> usize {
        self.counts.without.load(Ordering::SeqCst)
    }

    /// The request lines of those.
    pub fn refused(&self) -> Vec<String> {
        self.counts.refused.lock().unwrap().clone()
    }
}

fn serve(conn: TcpStream, upstream: &str, name: &str, value: &str, counts: &Counts) {
    let mut w = conn.try_clone().unwrap();
    let mut r = BufReader::new(conn);
    let Some(crate::HttpRequest {
        line,
        headers,
        body,
    }) = crate::HttpRequest::read(&mut r)
    else {
        return;
    };
    let allowed = headers
        .iter()
        .any(|(k, v)| k.eq_ignore_ascii_case(name) && v == value);
    if !allowed {
        counts.without.fetch_add(1, Ordering::SeqCst);
        counts
            .refused
            .lock()
            .unwrap()
            .push(line.trim_end().to_string());
        let msg = format!("this mirror wants the header {name}\n");
        let _ = write!(
            w,
            "HTTP/1.1 403 Forbidden\r\nContent-Type: text/plain\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{msg}",
            msg.len()
        );
        return;
    }
    counts.with.fetch_add(1, Ordering::SeqCst);
    let Ok(mut up) = TcpStream::connect(upstream) else {
        let _ = w.write_all(
            b"HTTP/1.1 502 Bad Gateway\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
        );
        return;
    };
    let mut req = line;
    for (k, v) in &headers {
        let hop = ["connection", "keep-alive", "proxy-connection"];
        if !hop.iter().any(|h| k.eq_ignore_ascii_case(h)) {
            req.push_str(&format!("{k}: {v}\r\n"));
        }
    }
    req.push_str("Connection: close\r\n\r\n");
    if up.write_all(req.as_bytes()).is_err() || up.write_all(&body).is_err() {
        return;
    }
    let _ = std::io::copy(&mut up, &mut w);
}
