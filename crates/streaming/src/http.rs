//! The HTTP/1.1 side of a streaming request: negotiating the SPDY upgrade and the
//! stream protocol version, as the kubelet's and containerd's streaming servers do.

use bytes::Bytes;
use http_body_util::Full;
use hyper::header::{HeaderValue, CONNECTION, UPGRADE};
use hyper::{Request, Response, StatusCode};

pub const PROTOCOL_HEADER: &str = "X-Stream-Protocol-Version";

/// A response with a plain-text body.
pub fn text(status: StatusCode, msg: impl Into<String>) -> Response<Full<Bytes>> {
    let mut r = Response::new(Full::new(Bytes::from(msg.into())));
    *r.status_mut() = status;
    r.headers_mut()
        .insert("content-type", HeaderValue::from_static("text/plain"));
    r
}

/// Whether the request asks to switch to SPDY/3.1.
pub fn wants_spdy<B>(req: &Request<B>) -> bool {
    let has = |name, want: &str| {
        req.headers().get_all(name).iter().any(|v| {
            v.to_str()
                .unwrap_or("")
                .split(',')
                .any(|p| p.trim().eq_ignore_ascii_case(want))
        })
    };
    has(CONNECTION, "upgrade") && has(UPGRADE, "spdy/3.1")
}

/// Picks the stream protocol: the first of `ours` the client offers. A client that
/// names none gets the oldest (as the Kubernetes handshake does); one that names only
/// others is refused with the lists (the 403 to answer with).
pub fn negotiate<B>(
    req: &Request<B>,
    ours: &[&'static str],
) -> Result<&'static str, Box<Response<Full<Bytes>>>> {
    let offered: Vec<String> = req
        .headers()
        .get_all(PROTOCOL_HEADER)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(|p| p.trim().to_string())
        .filter(|p| !p.is_empty())
        .collect();
    if offered.is_empty() {
        return Ok(ours[ours.len() - 1]);
    }
    ours.iter()
        .find(|p| offered.iter().any(|o| o == *p))
        .copied()
        .ok_or_else(|| {
            Box::new(text(
                StatusCode::FORBIDDEN,
                format!(
                    "unable to upgrade: unable to negotiate protocol: client supports {offered:?}, server accepts {ours:?}"
                ),
            ))
        })
}

/// The 101 answer switching to SPDY/3.1 with `protocol`.
pub fn switching(protocol: &str) -> Response<Full<Bytes>> {
    let mut r = Response::new(Full::new(Bytes::new()));
    *r.status_mut() = StatusCode::SWITCHING_PROTOCOLS;
    let h = r.headers_mut();
    h.insert(CONNECTION, HeaderValue::from_static("Upgrade"));
    h.insert(UPGRADE, HeaderValue::from_static("SPDY/3.1"));
    if let Ok(v) = HeaderValue::from_str(protocol) {
        h.insert(PROTOCOL_HEADER, v);
    }
    r
}
