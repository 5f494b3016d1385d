//! The same exec and attach channels over WebSocket (RFC 6455), as newer clients speak
//! them (`v5.channel.k8s.io` down to `channel.k8s.io`): one binary message per piece of
//! data, its first byte the channel (0 stdin, 1 stdout, 2 stderr, 3 error, 4 resize).
//! v5 adds a close signal, `[255, channel]`, with which a client ends its stdin.
//!
//! As Kubernetes' own server does, an empty message on the first channel the server
//! writes (stdout) tells the client the connection is ready. Output waits for the socket
//! with the same budget as SPDY (outq.rs).

use crate::outq::OutQueue;
use bytes::Bytes;
use http_body_util::Full;
use hyper::header::{HeaderValue, CONNECTION, UPGRADE};
use hyper::{Request, Response, StatusCode};
use std::io;
use std::sync::{Arc, Mutex};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::sync::mpsc;

/// The subprotocols served, preferred first.
pub const PROTOCOLS: &[&str] = &[
    "v5.channel.k8s.io",
    "v4.channel.k8s.io",
    "v3.channel.k8s.io",
    "v2.channel.k8s.io",
    "channel.k8s.io",
];

const MAX_MESSAGE: usize = 16 << 20;
const CLOSE_SIGNAL: u8 = 255;
const OP_CONT: u8 = 0;
const OP_BINARY: u8 = 2;
const OP_TEXT: u8 = 1;
const OP_CLOSE: u8 = 8;
const OP_PING: u8 = 9;
const OP_PONG: u8 = 10;

/// Whether the request asks to switch to WebSocket.
pub fn wants_websocket<B>(req: &Request<B>) -> bool {
    req.headers()
        .get(UPGRADE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.eq_ignore_ascii_case("websocket"))
        && req.headers().contains_key("sec-websocket-key")
}

type Answer = Response<Full<Bytes>>;

/// The subprotocol (the first of ours the client offers) and the 101 answer, or the
/// refusal to send.
pub fn accept<B>(
    req: &Request<B>,
    ours: &[&'static str],
) -> Result<(&'static str, Answer), Box<Answer>> {
    let key = req
        .headers()
        .get("sec-websocket-key")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    let offered: Vec<String> = req
        .headers()
        .get_all("sec-websocket-protocol")
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(|p| p.trim().to_string())
        .collect();
    let Some(protocol) = ours.iter().find(|p| offered.iter().any(|o| o == *p)) else {
        return Err(Box::new(crate::http::text(
            StatusCode::BAD_REQUEST,
            format!(
                "unable to upgrade: no websocket subprotocol in common: client offers {offered:?}, server accepts {ours:?}"
            ),
        )));
    };
    let mut r = Response::new(Full::new(Bytes::new()));
    *r.status_mut() = StatusCode::SWITCHING_PROTOCOLS;
    let h = r.headers_mut();
    h.insert(CONNECTION, HeaderValue::from_static("Upgrade"));
    h.insert(UPGRADE, HeaderValue::from_static("websocket"));
    h.insert(
        "sec-websocket-accept",
        HeaderValue::from_str(&accept_key(key)).expect("base64"),
    );
    h.insert("sec-websocket-protocol", HeaderValue::from_static(protocol));
    Ok((protocol, r))
}

/// `Sec-WebSocket-Accept`: base64 of the SHA-1 of the key and RFC 6455's GUID.
fn accept_key(key: &str) -> String {
    let mut s = key.as_bytes().to_vec();
    s.extend_from_slice(b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11");
    base64(&sha1(&s))
}

fn base64(b: &[u8]) -> String {
    const A: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::new();
    for c in b.chunks(3) {
        let n = (c[0] as u32) << 16
            | (*c.get(1).unwrap_or(&0) as u32) << 8
            | *c.get(2).unwrap_or(&0) as u32;
        for i in 0..4 {
            if i <= c.len() {
                out.push(A[(n >> (18 - 6 * i) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

/// SHA-1 (FIPS 180-4), only for the handshake's accept key.
fn sha1(msg: &[u8]) -> [u8; 20] {
    let mut h: [u32; 5] = [0x67452301, 0xEFCDAB89, 0x98BADCFE, 0x10325476, 0xC3D2E1F0];
    let mut m = msg.to_vec();
    m.push(0x80);
    while m.len() % 64 != 56 {
        m.push(0);
    }
    m.extend_from_slice(&((msg.len() as u64) * 8).to_be_bytes());
    for block in m.chunks(64) {
        let mut w = [0u32; 80];
        for i in 0..16 {
            w[i] = u32::from_be_bytes(block[4 * i..4 * i + 4].try_into().unwrap());
        }
        for i in 16..80 {
            w[i] = (w[i - 3] ^ w[i - 8] ^ w[i - 14] ^ w[i - 16]).rotate_left(1);
        }
        let [mut a, mut b, mut c, mut d, mut e] = h;
        for (i, wi) in w.iter().enumerate() {
            let (f, k) = match i {
                0..=19 => ((b & c) | (!b & d), 0x5A827999),
                20..=39 => (b ^ c ^ d, 0x6ED9EBA1),
                40..=59 => ((b & c) | (b & d) | (c & d), 0x8F1BBCDC),
                _ => (b ^ c ^ d, 0xCA62C1D6),
            };
            let t = a
                .rotate_left(5)
                .wrapping_add(f)
                .wrapping_add(e)
                .wrapping_add(k)
                .wrapping_add(*wi);
            e = d;
            d = c;
            c = b.rotate_left(30);
            b = a;
            a = t;
        }
        for (x, y) in h.iter_mut().zip([a, b, c, d, e]) {
            *x = x.wrapping_add(y);
        }
    }
    let mut out = [0u8; 20];
    for (i, x) in h.iter().enumerate() {
        out[4 * i..4 * i + 4].copy_from_slice(&x.to_be_bytes());
    }
    out
}

fn frame(op: u8, payload: &[u8]) -> Vec<u8> {
    let mut f = vec![0x80 | op];
    match payload.len() {
        n if n < 126 => f.push(n as u8),
        n if n <= 0xffff => {
            f.push(126);
            f.extend_from_slice(&(n as u16).to_be_bytes());
        }
        n => {
            f.push(127);
            f.extend_from_slice(&(n as u64).to_be_bytes());
        }
    }
    f.extend_from_slice(payload);
    f
}

struct Shared {
    out: OutQueue,
    inputs: Mutex<[Option<mpsc::Sender<Bytes>>; 5]>,
}

impl Shared {
    fn send(&self, f: Vec<u8>) -> io::Result<()> {
        self.out.send(f)
    }
}

/// A channel the server writes (stdout, stderr, error).
#[derive(Clone)]
pub struct ChannelWriter {
    ch: u8,
    v5: bool,
    shared: Arc<Shared>,
}

impl ChannelWriter {
    pub async fn write(&self, data: &[u8]) -> io::Result<()> {
        for chunk in data.chunks(32 * 1024) {
            let mut p = Vec::with_capacity(chunk.len() + 1);
            p.push(self.ch);
            p.extend_from_slice(chunk);
            self.shared
                .out
                .send_data(frame(OP_BINARY, &p), chunk.len())
                .await?;
        }
        Ok(())
    }

    pub fn write_now(&self, data: &[u8]) -> io::Result<()> {
        let mut p = vec![self.ch];
        p.extend_from_slice(data);
        self.shared.send(frame(OP_BINARY, &p))
    }

    /// v5 tells the client the channel ended; older versions have no way to.
    pub fn close(&self) -> io::Result<()> {
        if self.v5 {
            self.shared
                .send(frame(OP_BINARY, &[CLOSE_SIGNAL, self.ch]))?;
        }
        Ok(())
    }
}

/// A WebSocket connection carrying the channels.
pub struct Conn {
    shared: Arc<Shared>,
    pub v5: bool,
    done: tokio::sync::watch::Receiver<bool>,
    inputs: Vec<Option<mpsc::Receiver<Bytes>>>,
    _stop: tokio::sync::oneshot::Sender<()>,
}

impl Conn {
    pub fn server<IO>(io: IO, protocol: &str) -> Conn
    where
        IO: AsyncRead + AsyncWrite + Send + 'static,
    {
        let (mut rd, wr) = tokio::io::split(io);
        let (done_tx, done_rx) = tokio::sync::watch::channel(false);
        let (gone_tx, gone_rx) = tokio::sync::watch::channel(false);
        let mut senders: [Option<mpsc::Sender<Bytes>>; 5] = Default::default();
        let mut inputs = Vec::new();
        for (i, s) in senders.iter_mut().enumerate() {
            // Only stdin (0) and resize (4) carry data from the client.
            if i == 0 || i == 4 {
                let (tx, rx) = mpsc::channel(64);
                *s = Some(tx);
                inputs.push(Some(rx));
            } else {
                inputs.push(None);
            }
        }
        let shared = Arc::new(Shared {
            out: OutQueue::start(wr, done_rx.clone(), gone_rx),
            inputs: Mutex::new(senders),
        });
        let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
        let sh = shared.clone();
        tokio::spawn(async move {
            let stopped = tokio::select! {
                r = read_loop(&mut rd, &sh) => {
                    if let Err(e) = r {
                        tracing::debug!("websocket ended: {e}");
                    }
                    false
                }
                _ = stop_rx => true,
            };
            *sh.inputs.lock().unwrap() = Default::default();
            let _ = done_tx.send(true);
            if stopped {
                crate::outq::linger(&mut rd).await;
            }
            let _ = gone_tx.send(true);
        });
        let conn = Conn {
            shared,
            v5: protocol == "v5.channel.k8s.io",
            done: done_rx,
            inputs,
            _stop: stop_tx,
        };
        // Ready: an empty message on stdout, as Kubernetes' server sends.
        let _ = conn.writer(1).write_now(&[]);
        conn
    }

    pub fn writer(&self, ch: u8) -> ChannelWriter {
        ChannelWriter {
            ch,
            v5: self.v5,
            shared: self.shared.clone(),
        }
    }

    /// The client's data on channel `ch` (0 stdin, 4 resize), once.
    pub fn take_input(&mut self, ch: usize) -> Option<mpsc::Receiver<Bytes>> {
        self.inputs.get_mut(ch).and_then(Option::take)
    }

    pub async fn closed(&self) {
        let mut d = self.done.clone();
        while !*d.borrow() {
            if d.changed().await.is_err() {
                return;
            }
        }
    }

    /// A normal close (1000).
    pub fn close(&self) {
        let _ = self.shared.send(frame(OP_CLOSE, &1000u16.to_be_bytes()));
    }
}

/// One frame: FIN, opcode and the unmasked payload; None at the connection's end.
async fn read_frame<R: AsyncRead + Unpin>(rd: &mut R) -> io::Result<Option<(bool, u8, Vec<u8>)>> {
    let mut h = [0u8; 2];
    match rd.read_exact(&mut h).await {
        Ok(_) => {}
        Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => return Ok(None),
        Err(e) => return Err(e),
    }
    let (fin, op, masked) = (h[0] & 0x80 != 0, h[0] & 0x0f, h[1] & 0x80 != 0);
    let len = match h[1] & 0x7f {
        126 => {
            let mut b = [0u8; 2];
            rd.read_exact(&mut b).await?;
            u16::from_be_bytes(b) as usize
        }
        127 => {
            let mut b = [0u8; 8];
            rd.read_exact(&mut b).await?;
            u64::from_be_bytes(b) as usize
        }
        n => n as usize,
    };
    if len > MAX_MESSAGE {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            "websocket message too large",
        ));
    }
    let mut mask = [0u8; 4];
    if masked {
        rd.read_exact(&mut mask).await?;
    }
    let mut p = vec![0u8; len];
    rd.read_exact(&mut p).await?;
    if masked {
        for (i, b) in p.iter_mut().enumerate() {
            *b ^= mask[i % 4];
        }
    }
    Ok(Some((fin, op, p)))
}

async fn read_loop<R: AsyncRead + Unpin>(rd: &mut R, sh: &Arc<Shared>) -> io::Result<()> {
    let mut message: Vec<u8> = Vec::new();
    loop {
        let Some((fin, op, p)) = read_frame(rd).await? else {
            return Ok(());
        };
        if message.len() + p.len() > MAX_MESSAGE {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                "websocket message too large",
            ));
        }
        match op {
            OP_PING => {
                let _ = sh.send(frame(OP_PONG, &p));
                continue;
            }
            OP_PONG => continue,
            OP_CLOSE => {
                let _ = sh.send(frame(OP_CLOSE, &p[..p.len().min(2)]));
                return Ok(());
            }
            OP_BINARY | OP_TEXT | OP_CONT => message.extend_from_slice(&p),
            _ => {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    "websocket: unknown opcode",
                ))
            }
        }
        if !fin {
            continue;
        }
        let m = std::mem::take(&mut message);
        let Some((&ch, data)) = m.split_first() else {
            continue;
        };
        if ch == CLOSE_SIGNAL {
            // The client ends one of its channels (its stdin).
            if let Some(&c) = data.first() {
                if let Some(slot) = sh.inputs.lock().unwrap().get_mut(c as usize) {
                    *slot = None;
                }
            }
            continue;
        }
        let tx = sh
            .inputs
            .lock()
            .unwrap()
            .get(ch as usize)
            .and_then(|s| s.clone());
        if let (Some(tx), false) = (tx, data.is_empty()) {
            let _ = tx.send(Bytes::copy_from_slice(data)).await;
        }
    }
}

/// The subprotocol of SPDY tunneled through WebSocket, which kubectl's and crictl's
/// WebSocket port-forward speak: the connection's binary messages carry SPDY's bytes.
pub const TUNNELED_PORTFORWARD: &str = "SPDY/3.1+portforward.k8s.io";

/// The byte stream a WebSocket connection carries in its binary messages, for SPDY to
/// run over (pings answered here, a close ends it).
pub fn tunnel<IO>(io: IO) -> tokio::io::DuplexStream
where
    IO: AsyncRead + AsyncWrite + Send + 'static,
{
    let (ours, theirs) = tokio::io::duplex(256 * 1024);
    let (mut rd, mut wr) = tokio::io::split(io);
    let (mut brd, mut bwr) = tokio::io::split(ours);
    let (tx, mut rx) = mpsc::channel::<Vec<u8>>(16);
    tokio::spawn(async move {
        while let Some(f) = rx.recv().await {
            if wr.write_all(&f).await.is_err() || wr.flush().await.is_err() {
                break;
            }
        }
        let _ = wr.shutdown().await;
    });
    let ctl = tx.clone();
    tokio::spawn(async move {
        while let Ok(Some((_, op, p))) = read_frame(&mut rd).await {
            match op {
                OP_BINARY | OP_CONT | OP_TEXT if bwr.write_all(&p).await.is_err() => break,
                OP_BINARY | OP_CONT | OP_TEXT => {}
                OP_PING => {
                    let _ = ctl.send(frame(OP_PONG, &p)).await;
                }
                OP_CLOSE => {
                    let _ = ctl.send(frame(OP_CLOSE, &p[..p.len().min(2)])).await;
                    break;
                }
                _ => {}
            }
        }
        let _ = bwr.shutdown().await;
    });
    tokio::spawn(async move {
        let mut buf = vec![0u8; 32 * 1024];
        loop {
            match brd.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    if tx.send(frame(OP_BINARY, &buf[..n])).await.is_err() {
                        break;
                    }
                }
            }
        }
        let _ = tx.send(frame(OP_CLOSE, &1000u16.to_be_bytes())).await;
    });
    theirs
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accept_key_of_the_rfc_example() {
        // RFC 6455, section 1.3.
        assert_eq!(
            accept_key("dGhlIHNhbXBsZSBub25jZQ=="),
            "s3pPLMBiTxaQ9kYGzzhZRbK+xOo="
        );
        assert_eq!(base64(b"ab"), "YWI=");
        assert_eq!(base64(b"a"), "YQ==");
    }

    #[test]
    fn frames_by_size() {
        assert_eq!(frame(OP_BINARY, &[1, 2]), vec![0x82, 2, 1, 2]);
        assert_eq!(&frame(OP_BINARY, &[0; 200])[..4], &[0x82, 126, 0, 200]);
        assert_eq!(&frame(OP_BINARY, &vec![0; 70000])[..2], &[0x82, 127]);
    }
}
