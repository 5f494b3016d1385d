//! The same exec and attach channels over WebSocket (RFC 6455), as newer clients speak
//! them (`v5.channel.k8s.io` down to `channel.k8s.io`): one binary message per piece of
//! data, its first byte the channel (0 stdin, 1 stdout, 2 stderr, 3 error, 4 resize).
//! v5 adds a close signal, `[255, channel]`, with which a client ends its stdin.
//!
//! As Kubernetes' own server does, an empty message on the first channel the server
//! writes (stdout) tells the client the connection is ready. Output waits for the socket
//! with the same budget as SPDY (outq.rs).
//!
//! What the client sends is held to RFC 6455 ([`Checker`]): its frames masked, no
//! reserved bits or opcodes (no extension is negotiated), control frames whole and at
//! most 125 bytes, continuations only inside a fragmented message, text valid UTF-8,
//! close codes ones a peer may send. Anything else ends the connection with a close
//! frame saying why (1002, 1007, or 1009 for a message over [`MAX_MESSAGE`]), as the
//! RFC asks of an endpoint that receives it, rather than being read on a guess.

use crate::outq::OutQueue;
use bytes::Bytes;
use http_body_util::Full;
use hyper::header::{HeaderValue, CONNECTION, UPGRADE};
use hyper::{Request, Response, StatusCode};
use parking_lot::Mutex;
use std::io;
use std::sync::Arc;
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

/// What writing after the close frame gets.
fn closed() -> io::Error {
    io::Error::new(io::ErrorKind::BrokenPipe, "websocket closed")
}

struct Shared {
    out: OutQueue,
    inputs: Mutex<[Option<mpsc::Sender<Bytes>>; 5]>,
    /// A close frame has been queued: nothing may follow it (RFC 6455 5.5.1).
    closed: std::sync::atomic::AtomicBool,
}

impl Shared {
    fn is_closed(&self) -> bool {
        self.closed.load(std::sync::atomic::Ordering::Acquire)
    }

    fn send(&self, f: Vec<u8>) -> io::Result<()> {
        if self.is_closed() {
            return Err(closed());
        }
        self.out.send(f)
    }

    /// Queues the close frame `f`, unless one is already: the first close is the last
    /// frame sent.
    fn send_close(&self, f: Vec<u8>) {
        if !self.closed.swap(true, std::sync::atomic::Ordering::AcqRel) {
            let _ = self.out.send(f);
        }
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
            if self.shared.is_closed() {
                return Err(closed());
            }
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
            closed: Default::default(),
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
            *sh.inputs.lock() = Default::default();
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
        self.shared
            .send_close(frame(OP_CLOSE, &1000u16.to_be_bytes()));
    }
}

/// One frame from the client: FIN, opcode and the unmasked payload.
struct Frame {
    fin: bool,
    op: u8,
    payload: Vec<u8>,
}

/// How a client broke RFC 6455: the close code the connection ends with, and why.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Violation {
    code: u16,
    why: &'static str,
}

/// 1002: a frame or message the protocol does not allow.
const PROTOCOL_ERROR: u16 = 1002;
/// 1007: text (a text message, a close reason) that is not UTF-8.
const INVALID_DATA: u16 = 1007;
/// 1009: a message over [`MAX_MESSAGE`].
const TOO_BIG: u16 = 1009;

impl Violation {
    fn protocol(why: &'static str) -> Violation {
        Violation {
            code: PROTOCOL_ERROR,
            why,
        }
    }

    fn invalid_text(why: &'static str) -> Violation {
        Violation {
            code: INVALID_DATA,
            why,
        }
    }

    const TOO_BIG: Violation = Violation {
        code: TOO_BIG,
        why: "message too large",
    };

    /// The close frame that ends the connection: the code, and why as its reason.
    fn close_frame(&self) -> Vec<u8> {
        let mut p = self.code.to_be_bytes().to_vec();
        p.extend_from_slice(self.why.as_bytes());
        frame(OP_CLOSE, &p)
    }
}

impl std::fmt::Display for Violation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "websocket protocol violation ({}): {}",
            self.code, self.why
        )
    }
}

impl std::error::Error for Violation {}

impl From<Violation> for io::Error {
    fn from(v: Violation) -> io::Error {
        io::Error::new(io::ErrorKind::InvalidData, v)
    }
}

/// The violation an error of [`read_frame`] or [`Checker`] carries, if it is one.
fn violation(e: &io::Error) -> Option<Violation> {
    e.get_ref()?.downcast_ref::<Violation>().copied()
}

/// Reads one frame, its header checked ([`check_header`]); None at the connection's end.
async fn read_frame<R: AsyncRead + Unpin>(rd: &mut R) -> io::Result<Option<Frame>> {
    let mut h = [0u8; 2];
    match rd.read_exact(&mut h).await {
        Ok(_) => {}
        Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => return Ok(None),
        Err(e) => return Err(e),
    }
    check_header(h)?;
    let (fin, op) = (h[0] & 0x80 != 0, h[0] & 0x0f);
    let len = match h[1] & 0x7f {
        126 => {
            let mut b = [0u8; 2];
            rd.read_exact(&mut b).await?;
            u16::from_be_bytes(b) as u64
        }
        127 => {
            let mut b = [0u8; 8];
            rd.read_exact(&mut b).await?;
            let n = u64::from_be_bytes(b);
            if n >> 63 != 0 {
                return Err(Violation::protocol("64-bit length with its top bit set").into());
            }
            n
        }
        n => n as u64,
    };
    if len > MAX_MESSAGE as u64 {
        return Err(Violation::TOO_BIG.into());
    }
    let mut mask = [0u8; 4];
    rd.read_exact(&mut mask).await?;
    let mut payload = vec![0u8; len as usize];
    rd.read_exact(&mut payload).await?;
    for (i, b) in payload.iter_mut().enumerate() {
        *b ^= mask[i % 4];
    }
    Ok(Some(Frame { fin, op, payload }))
}

/// What a frame's first two bytes may say: no reserved bit (no extension is
/// negotiated), a defined opcode, the mask every client frame carries, and for a
/// control frame FIN and at most 125 bytes.
fn check_header(h: [u8; 2]) -> Result<(), Violation> {
    let (fin, op, masked, len7) = (h[0] & 0x80 != 0, h[0] & 0x0f, h[1] & 0x80 != 0, h[1] & 0x7f);
    if h[0] & 0x70 != 0 {
        return Err(Violation::protocol("reserved bits set"));
    }
    if !matches!(
        op,
        OP_CONT | OP_TEXT | OP_BINARY | OP_CLOSE | OP_PING | OP_PONG
    ) {
        return Err(Violation::protocol("reserved opcode"));
    }
    if !masked {
        return Err(Violation::protocol("client frame not masked"));
    }
    if op & 0x08 != 0 {
        if !fin {
            return Err(Violation::protocol("fragmented control frame"));
        }
        if len7 > 125 {
            return Err(Violation::protocol("control frame over 125 bytes"));
        }
    }
    Ok(())
}

/// The order of a client's frames: a continuation only inside a fragmented message, no
/// new message before the last one's final frame, a text message valid UTF-8 once
/// whole, a close frame's code one a peer may send and its reason UTF-8.
#[derive(Default)]
struct Checker {
    /// Inside a fragmented message: whether it is text, and the text so far.
    open: Option<Option<Vec<u8>>>,
}

impl Checker {
    /// Checks `f`; for a data frame, whether it ends its message.
    fn data(&mut self, f: &Frame) -> Result<bool, Violation> {
        let text = match (f.op, &mut self.open) {
            (OP_CONT, None) => return Err(Violation::protocol("continuation outside a message")),
            (OP_CONT, Some(text)) => {
                if let Some(t) = text {
                    t.extend_from_slice(&f.payload);
                }
                text.take()
            }
            (_, Some(_)) => return Err(Violation::protocol("new message inside a fragmented one")),
            (op, None) => (op == OP_TEXT).then(|| f.payload.clone()),
        };
        if !f.fin {
            self.open = Some(text);
            return Ok(false);
        }
        self.open = None;
        if text.is_some_and(|t| std::str::from_utf8(&t).is_err()) {
            return Err(Violation::invalid_text("text message not UTF-8"));
        }
        Ok(true)
    }

    /// Checks a close frame's payload; the code to answer it with (1000 for none).
    fn close(p: &[u8]) -> Result<u16, Violation> {
        let Some((code, reason)) = p.split_first_chunk::<2>() else {
            return match p.len() {
                0 => Ok(1000),
                _ => Err(Violation::protocol("close frame of one byte")),
            };
        };
        let code = u16::from_be_bytes(*code);
        // RFC 6455 7.4 and IANA's registry: 1004-1006 and 1015 are never sent, below
        // 1000 and 1016-2999 are not assigned, 5000 and up do not exist.
        if !matches!(code, 1000..=1003 | 1007..=1014 | 3000..=4999) {
            return Err(Violation::protocol("close code a peer may not send"));
        }
        if std::str::from_utf8(reason).is_err() {
            return Err(Violation::invalid_text("close reason not UTF-8"));
        }
        Ok(code)
    }
}

async fn read_loop<R: AsyncRead + Unpin>(rd: &mut R, sh: &Arc<Shared>) -> io::Result<()> {
    let r = read_messages(rd, sh).await;
    if let Some(v) = r.as_ref().err().and_then(violation) {
        sh.send_close(v.close_frame());
    }
    r
}

async fn read_messages<R: AsyncRead + Unpin>(rd: &mut R, sh: &Arc<Shared>) -> io::Result<()> {
    let mut message: Vec<u8> = Vec::new();
    let mut checker = Checker::default();
    loop {
        let Some(f) = read_frame(rd).await? else {
            return Ok(());
        };
        match f.op {
            OP_PING => {
                let _ = sh.send(frame(OP_PONG, &f.payload));
                continue;
            }
            OP_PONG => continue,
            OP_CLOSE => {
                let code = Checker::close(&f.payload)?;
                sh.send_close(frame(OP_CLOSE, &code.to_be_bytes()));
                return Ok(());
            }
            _ => {}
        }
        let whole = checker.data(&f)?;
        if message.len() + f.payload.len() > MAX_MESSAGE {
            return Err(Violation::TOO_BIG.into());
        }
        message.extend_from_slice(&f.payload);
        if !whole {
            continue;
        }
        let m = std::mem::take(&mut message);
        let Some((&ch, data)) = m.split_first() else {
            continue;
        };
        if ch == CLOSE_SIGNAL {
            // The client ends one of its channels (its stdin).
            if let Some(&c) = data.first() {
                if let Some(slot) = sh.inputs.lock().get_mut(c as usize) {
                    *slot = None;
                }
            }
            continue;
        }
        let tx = sh.inputs.lock().get(ch as usize).and_then(|s| s.clone());
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
            // Nothing may follow a close frame (RFC 6455 5.5.1).
            if f.first().is_some_and(|b| b & 0x0f == OP_CLOSE) {
                break;
            }
        }
        let _ = wr.shutdown().await;
    });
    let ctl = tx.clone();
    tokio::spawn(async move {
        let mut checker = Checker::default();
        loop {
            let f = match read_frame(&mut rd).await {
                Ok(Some(f)) => f,
                Ok(None) => break,
                Err(e) => {
                    if let Some(v) = violation(&e) {
                        let _ = ctl.send(v.close_frame()).await;
                    }
                    break;
                }
            };
            let answer = match f.op {
                OP_PING => Ok(Some(frame(OP_PONG, &f.payload))),
                OP_PONG => Ok(None),
                OP_CLOSE => match Checker::close(&f.payload) {
                    Ok(code) => {
                        let _ = ctl.send(frame(OP_CLOSE, &code.to_be_bytes())).await;
                        break;
                    }
                    Err(v) => Err(v),
                },
                _ => checker.data(&f).map(|_| None),
            };
            match answer {
                Err(v) => {
                    let _ = ctl.send(v.close_frame()).await;
                    break;
                }
                Ok(Some(pong)) => {
                    let _ = ctl.send(pong).await;
                }
                Ok(None) if f.op & 0x08 == 0 && bwr.write_all(&f.payload).await.is_err() => break,
                Ok(None) => {}
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

    /// A client frame: first byte `b0` (FIN, RSV, opcode), `payload`, masked or not.
    fn client(b0: u8, payload: &[u8], masked: bool) -> Vec<u8> {
        let mask = [0x37, 0xfa, 0x21, 0x3d];
        let mut f = vec![b0];
        let m = if masked { 0x80 } else { 0 };
        match payload.len() {
            n if n < 126 => f.push(m | n as u8),
            n if n <= 0xffff => {
                f.push(m | 126);
                f.extend_from_slice(&(n as u16).to_be_bytes());
            }
            n => {
                f.push(m | 127);
                f.extend_from_slice(&(n as u64).to_be_bytes());
            }
        }
        if masked {
            f.extend_from_slice(&mask);
            f.extend(payload.iter().enumerate().map(|(i, b)| b ^ mask[i % 4]));
        } else {
            f.extend_from_slice(payload);
        }
        f
    }

    fn close_payload(code: u16, reason: &[u8]) -> Vec<u8> {
        let mut p = code.to_be_bytes().to_vec();
        p.extend_from_slice(reason);
        p
    }

    /// The server's frames (opcode, payload) in answer to `input`, read until it ends the
    /// connection, and what stdin received. The client does not hang up first: a server
    /// that does not end the connection on its own fails the test.
    async fn serve(input: Vec<u8>) -> (Vec<(u8, Vec<u8>)>, Vec<u8>) {
        let (mut client, server) = tokio::io::duplex(1 << 20);
        let mut conn = Conn::server(server, "v5.channel.k8s.io");
        let mut stdin = conn.take_input(0).unwrap();
        let got = tokio::spawn(async move {
            let mut all = vec![];
            while let Some(b) = stdin.recv().await {
                all.extend_from_slice(&b);
            }
            all
        });
        client.write_all(&input).await.unwrap();
        let mut out = vec![];
        tokio::time::timeout(std::time::Duration::from_secs(10), async {
            let _ = client.read_to_end(&mut out).await;
        })
        .await
        .expect("the server did not end the connection");
        drop(conn);
        let stdin = got.await.unwrap();
        let mut frames = vec![];
        let mut rest = &out[..];
        while rest.len() >= 2 {
            let (op, n) = (rest[0] & 0x0f, (rest[1] & 0x7f) as usize);
            assert!(n < 126, "short frames only here");
            frames.push((op, rest[2..2 + n].to_vec()));
            rest = &rest[2 + n..];
        }
        (frames, stdin)
    }

    /// The connection's last frame is a close with `code`.
    async fn closes_with(input: Vec<u8>, code: u16) {
        let (frames, _) = serve(input.clone()).await;
        let (op, p) = frames.last().expect("no frame at all");
        assert_eq!(*op, OP_CLOSE, "{frames:?} for {input:x?}");
        assert_eq!(
            u16::from_be_bytes([p[0], p[1]]),
            code,
            "{:?}",
            String::from_utf8_lossy(&p[2..])
        );
        let closes = frames.iter().filter(|(op, _)| *op == OP_CLOSE).count();
        assert_eq!(closes, 1, "one close frame, the last: {frames:?}");
    }

    #[tokio::test]
    async fn frames_against_the_rfc_end_the_connection_with_why() {
        let stdin = |d: &[u8]| [&[0u8][..], d].concat();
        let cases: Vec<(&str, Vec<u8>, u16)> = vec![
            ("unmasked", client(0x82, &stdin(b"x"), false), 1002),
            ("RSV1 set", client(0xc2, &stdin(b"x"), true), 1002),
            ("RSV3 set", client(0x92, &stdin(b"x"), true), 1002),
            ("reserved data opcode", client(0x83, b"x", true), 1002),
            ("reserved control opcode", client(0x8b, b"", true), 1002),
            ("ping of 126 bytes", client(0x89, &[7; 126], true), 1002),
            ("fragmented ping", client(0x09, b"p", true), 1002),
            ("continuation first", client(0x80, b"x", true), 1002),
            (
                "a new message inside a fragmented one",
                [client(0x02, &[0], true), client(0x82, b"x", true)].concat(),
                1002,
            ),
            ("close of one byte", client(0x88, &[3], true), 1002),
            (
                "close reason not UTF-8",
                client(0x88, &close_payload(1000, &[0xff, 0xfe]), true),
                1007,
            ),
            ("text not UTF-8", client(0x81, &[0, 0xc3, 0x28], true), 1007),
            (
                "text not UTF-8 across fragments",
                [
                    client(0x01, &[0, 0xe2], true),
                    client(0x80, &[0x28, 0xa1], true),
                ]
                .concat(),
                1007,
            ),
        ];
        for (what, input, code) in cases {
            eprintln!("{what}");
            closes_with(input, code).await;
        }
        // Codes a peer may not send: unassigned, or only ever reported locally.
        for bad in [999u16, 1004, 1005, 1006, 1015, 2000, 5000] {
            eprintln!("close {bad}");
            closes_with(client(0x88, &close_payload(bad, b""), true), 1002).await;
        }
        // A 64-bit length with its top bit set, and one over the message limit.
        let mut huge = vec![0x82, 0x80 | 127];
        huge.extend_from_slice(&(1u64 << 63).to_be_bytes());
        huge.extend_from_slice(&[0; 4]);
        closes_with(huge, 1002).await;
        let mut big = vec![0x82, 0x80 | 127];
        big.extend_from_slice(&((MAX_MESSAGE as u64) + 1).to_be_bytes());
        big.extend_from_slice(&[0; 4]);
        closes_with(big, 1009).await;
    }

    #[tokio::test]
    async fn a_close_a_peer_may_send_is_answered_with_its_code() {
        for code in [1000u16, 1001, 1011, 1014, 3000, 4999] {
            closes_with(
                client(0x88, &close_payload(code, "bye ✓".as_bytes()), true),
                code,
            )
            .await;
        }
        // No code at all: 1000.
        closes_with(client(0x88, b"", true), 1000).await;
    }

    #[tokio::test]
    async fn fragments_and_control_frames_between_them_make_one_message() {
        let input = [
            client(0x02, &[0, b'a'], true),
            client(0x89, b"hi", true),
            client(0x00, b"b", true),
            client(0x80, b"c", true),
            client(0x81, &[0, 0xe2, 0x9c, 0x93], true),
            client(0x88, &close_payload(1000, b""), true),
        ]
        .concat();
        let (frames, stdin) = serve(input).await;
        assert_eq!(stdin, "abc✓".as_bytes());
        assert!(frames.contains(&(OP_PONG, b"hi".to_vec())), "{frames:?}");
        assert_eq!(frames.last(), Some(&(OP_CLOSE, vec![3, 232])));
    }

    #[test]
    fn frames_by_size() {
        assert_eq!(frame(OP_BINARY, &[1, 2]), vec![0x82, 2, 1, 2]);
        assert_eq!(&frame(OP_BINARY, &[0; 200])[..4], &[0x82, 126, 0, 200]);
        assert_eq!(&frame(OP_BINARY, &vec![0; 70000])[..2], &[0x82, 127]);
    }
}
