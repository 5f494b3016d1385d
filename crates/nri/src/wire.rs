//! One NRI plugin's connection: NRI's multiplexer over the unix socket, and ttrpc on
//! the two logical connections it carries.
//!
//! The multiplexer's frame is an 8-byte header, the logical connection's id and the
//! payload's length (both u32, big-endian), then the payload. Connection 1 carries the
//! plugin's service (crustd calls it: Configure, Synchronize, the events), connection 2
//! the runtime's (the plugin calls RegisterPlugin and UpdateContainers). Opening and
//! closing a logical connection sends nothing; each is a byte stream of its own, in
//! which a ttrpc message may span frames.
//!
//! A ttrpc message is a 10-byte header (payload length u32, stream id u32, both
//! big-endian, type u8: 1 request, 2 response; flags u8) and a protobuf `Request` or
//! `Response`. Calls are unary; a client's stream ids are odd and increase.
//!
//! Frames are written at most 4096 bytes of payload each and never span two ttrpc
//! messages: Go's multiplexer hands one whole frame to each read, and NRI's ttrpc reads
//! through a 4096-byte buffer, so a larger frame would break the Go side.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use prost::Message;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::sync::{mpsc, oneshot};

use super::api::{RpcStatus, TtrpcRequest, TtrpcResponse};

/// The logical connection of the plugin's service (crustd is its client).
pub const PLUGIN_CONN: u32 = 1;
/// The logical connection of the runtime's service (crustd serves it).
pub const RUNTIME_CONN: u32 = 2;
const MUX_HEADER: usize = 8;
const TTRPC_HEADER: usize = 10;
/// The most a frame carries (see the module doc).
const MAX_FRAME: usize = 4096;
/// ttrpc's limit on a message's payload.
pub const MAX_MESSAGE: usize = 4 << 20;
const TYPE_REQUEST: u8 = 1;
const TYPE_RESPONSE: u8 = 2;

/// gRPC status codes ttrpc answers with.
pub mod code {
    pub const UNKNOWN: i32 = 2;
    pub const INVALID_ARGUMENT: i32 = 3;
    pub const UNIMPLEMENTED: i32 = 12;
}

/// Why a call to the plugin failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CallError {
    /// The connection is gone.
    Closed,
    /// No answer within the time given.
    Timeout,
    /// The plugin answered with an error status.
    Status(i32, String),
}

impl CallError {
    /// What NRI counts as fatal for the plugin (it is closed, the operation goes on):
    /// a lost connection or no answer in time. A status is the plugin's answer.
    pub fn fatal(&self) -> bool {
        matches!(self, CallError::Closed | CallError::Timeout)
    }
}

impl std::fmt::Display for CallError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CallError::Closed => f.write_str("connection closed"),
            CallError::Timeout => f.write_str("no answer in time"),
            CallError::Status(c, m) => write!(f, "{m} (code {c})"),
        }
    }
}

/// A request the plugin made on the runtime's service, with where the answer goes.
pub struct Incoming {
    pub request: TtrpcRequest,
    pub reply: oneshot::Sender<TtrpcResponse>,
}

type Pending = parking_lot::Mutex<HashMap<u32, oneshot::Sender<TtrpcResponse>>>;

/// One side's connection: the runtime's to a plugin, or a plugin's to the runtime.
pub struct Conn {
    /// The logical connection this side calls on, and the one it serves.
    calls_on: u32,
    serves_on: u32,
    writer: tokio::sync::Mutex<Box<dyn AsyncWrite + Send + Unpin>>,
    pending: Pending,
    next_stream: AtomicU32,
    closed: AtomicBool,
}

impl Conn {
    /// The runtime's side of a plugin's connection: the plugin's calls on the
    /// runtime's service arrive on the receiver (which ends when the connection does).
    pub fn start<S>(stream: S) -> (Arc<Conn>, mpsc::UnboundedReceiver<Incoming>)
    where
        S: AsyncRead + AsyncWrite + Send + 'static,
    {
        Conn::start_as(stream, PLUGIN_CONN, RUNTIME_CONN)
    }

    /// A plugin's side: it calls the runtime's service (RegisterPlugin), and the
    /// runtime's calls on the plugin's service arrive on the receiver.
    pub fn start_plugin<S>(stream: S) -> (Arc<Conn>, mpsc::UnboundedReceiver<Incoming>)
    where
        S: AsyncRead + AsyncWrite + Send + 'static,
    {
        Conn::start_as(stream, RUNTIME_CONN, PLUGIN_CONN)
    }

    fn start_as<S>(
        stream: S,
        calls_on: u32,
        serves_on: u32,
    ) -> (Arc<Conn>, mpsc::UnboundedReceiver<Incoming>)
    where
        S: AsyncRead + AsyncWrite + Send + 'static,
    {
        let (r, w) = tokio::io::split(stream);
        let conn = Arc::new(Conn {
            calls_on,
            serves_on,
            writer: tokio::sync::Mutex::new(Box::new(w)),
            pending: Default::default(),
            next_stream: AtomicU32::new(1),
            closed: AtomicBool::new(false),
        });
        let (tx, rx) = mpsc::unbounded_channel();
        let c = conn.clone();
        tokio::spawn(async move {
            if let Err(e) = c.read_loop(r, tx).await {
                tracing::debug!(error = %e, "NRI plugin connection ended");
            }
            c.mark_closed();
        });
        (conn, rx)
    }

    fn mark_closed(&self) {
        self.closed.store(true, Ordering::SeqCst);
        self.pending.lock().clear();
    }

    pub fn is_closed(&self) -> bool {
        self.closed.load(Ordering::SeqCst)
    }

    /// Closes the connection (the plugin sees EOF).
    pub async fn close(&self) {
        let mut w = self.writer.lock().await;
        let _ = w.shutdown().await;
        drop(w);
        self.mark_closed();
    }

    /// Calls `method` of the other side's `service` with `req`, waiting at most
    /// `timeout` (which the other side also gets, as ttrpc's `timeout_nano`).
    pub async fn call<Req: Message, Resp: Message + Default>(
        &self,
        service: &str,
        method: &str,
        req: &Req,
        timeout: Duration,
    ) -> Result<Resp, CallError> {
        if self.is_closed() {
            return Err(CallError::Closed);
        }
        let stream = self.next_stream.fetch_add(2, Ordering::SeqCst);
        let envelope = TtrpcRequest {
            service: service.into(),
            method: method.into(),
            payload: req.encode_to_vec(),
            timeout_nano: timeout.as_nanos().min(i64::MAX as u128) as i64,
            metadata: vec![],
        };
        let (tx, rx) = oneshot::channel();
        self.pending.lock().insert(stream, tx);
        if self
            .send(
                self.calls_on,
                stream,
                TYPE_REQUEST,
                &envelope.encode_to_vec(),
            )
            .await
            .is_err()
        {
            self.pending.lock().remove(&stream);
            return Err(CallError::Closed);
        }
        let answer = match tokio::time::timeout(timeout, rx).await {
            Err(_) => {
                self.pending.lock().remove(&stream);
                return Err(CallError::Timeout);
            }
            Ok(Err(_)) => return Err(CallError::Closed),
            Ok(Ok(a)) => a,
        };
        match answer.status {
            Some(s) if s.code != 0 => Err(CallError::Status(s.code, s.message)),
            _ => Resp::decode(answer.payload.as_slice()).map_err(|e| {
                CallError::Status(
                    code::UNKNOWN,
                    format!("undecodable answer to {method}: {e}"),
                )
            }),
        }
    }

    /// One ttrpc message on logical connection `conn`, in frames of at most
    /// [`MAX_FRAME`] bytes, written together.
    async fn send(&self, conn: u32, stream: u32, kind: u8, payload: &[u8]) -> std::io::Result<()> {
        let mut msg = Vec::with_capacity(TTRPC_HEADER + payload.len());
        msg.extend_from_slice(&(payload.len() as u32).to_be_bytes());
        msg.extend_from_slice(&stream.to_be_bytes());
        msg.push(kind);
        msg.push(0);
        msg.extend_from_slice(payload);
        let mut out = Vec::with_capacity(msg.len() + MUX_HEADER * (msg.len() / MAX_FRAME + 1));
        for chunk in msg.chunks(MAX_FRAME) {
            out.extend_from_slice(&conn.to_be_bytes());
            out.extend_from_slice(&(chunk.len() as u32).to_be_bytes());
            out.extend_from_slice(chunk);
        }
        let mut w = self.writer.lock().await;
        w.write_all(&out).await?;
        w.flush().await
    }

    async fn read_loop<R: AsyncRead + Unpin>(
        self: &Arc<Self>,
        mut r: R,
        incoming: mpsc::UnboundedSender<Incoming>,
    ) -> std::io::Result<()> {
        // Each logical connection is a byte stream of its own.
        let mut streams: HashMap<u32, Vec<u8>> = HashMap::new();
        let mut header = [0u8; MUX_HEADER];
        loop {
            r.read_exact(&mut header).await?;
            let conn = u32::from_be_bytes(header[0..4].try_into().unwrap());
            let len = u32::from_be_bytes(header[4..8].try_into().unwrap()) as usize;
            if len > MAX_MESSAGE + TTRPC_HEADER {
                return Err(std::io::Error::other(format!(
                    "multiplexer frame of {len} bytes"
                )));
            }
            let mut payload = vec![0u8; len];
            r.read_exact(&mut payload).await?;
            if conn != PLUGIN_CONN && conn != RUNTIME_CONN {
                continue; // a connection nobody opened: dropped, as NRI drops it
            }
            let buf = streams.entry(conn).or_default();
            buf.extend_from_slice(&payload);
            while let Some((stream, kind, body)) = take_message(buf)? {
                match kind {
                    TYPE_RESPONSE if conn == self.calls_on => {
                        let resp = TtrpcResponse::decode(body.as_slice())
                            .map_err(|e| std::io::Error::other(format!("ttrpc response: {e}")))?;
                        if let Some(tx) = self.pending.lock().remove(&stream) {
                            let _ = tx.send(resp);
                        }
                    }
                    TYPE_REQUEST if conn == self.serves_on => {
                        let (tx, rx) = oneshot::channel();
                        let request = match TtrpcRequest::decode(body.as_slice()) {
                            Ok(r) => r,
                            Err(e) => {
                                let _ = tx.send(status(
                                    code::INVALID_ARGUMENT,
                                    &format!("ttrpc request: {e}"),
                                ));
                                self.spawn_reply(stream, rx);
                                continue;
                            }
                        };
                        if incoming.send(Incoming { request, reply: tx }).is_ok() {
                            self.spawn_reply(stream, rx);
                        }
                    }
                    _ => {} // data frames, or a type on the wrong side: not NRI's
                }
            }
        }
    }

    /// Sends the answer to the other side's call `stream` once it is made.
    fn spawn_reply(self: &Arc<Self>, stream: u32, rx: oneshot::Receiver<TtrpcResponse>) {
        let c = self.clone();
        tokio::spawn(async move {
            let resp = rx
                .await
                .unwrap_or_else(|_| status(code::UNKNOWN, "runtime went away"));
            let _ = c
                .send(c.serves_on, stream, TYPE_RESPONSE, &resp.encode_to_vec())
                .await;
        });
    }
}

/// An error answer.
pub fn status(code: i32, message: &str) -> TtrpcResponse {
    TtrpcResponse {
        status: Some(RpcStatus {
            code,
            message: message.into(),
        }),
        payload: vec![],
    }
}

/// A successful answer carrying `m`.
pub fn ok(m: &impl Message) -> TtrpcResponse {
    TtrpcResponse {
        status: Some(RpcStatus::default()),
        payload: m.encode_to_vec(),
    }
}

/// The first whole ttrpc message of `buf`, taken off it: (stream, type, payload).
fn take_message(buf: &mut Vec<u8>) -> std::io::Result<Option<(u32, u8, Vec<u8>)>> {
    if buf.len() < TTRPC_HEADER {
        return Ok(None);
    }
    let len = u32::from_be_bytes(buf[0..4].try_into().unwrap()) as usize;
    if len > MAX_MESSAGE {
        return Err(std::io::Error::other(format!(
            "ttrpc message of {len} bytes (at most {MAX_MESSAGE})"
        )));
    }
    if buf.len() < TTRPC_HEADER + len {
        return Ok(None);
    }
    let stream = u32::from_be_bytes(buf[4..8].try_into().unwrap());
    let kind = buf[8];
    let body = buf[TTRPC_HEADER..TTRPC_HEADER + len].to_vec();
    buf.drain(..TTRPC_HEADER + len);
    Ok(Some((stream, kind, body)))
}

#[cfg(test)]
mod tests {
    use super::super::api::*;
    use super::*;

    /// The bytes a Go NRI stub sends to register (from the protocol's description):
    /// one frame on connection 2, a ttrpc request on stream 1.
    #[test]
    fn a_register_request_reads_as_the_go_stub_writes_it() {
        let req = RegisterPluginRequest {
            plugin_name: "test".into(),
            plugin_idx: "10".into(),
            nri_version: String::new(),
        };
        let envelope = TtrpcRequest {
            service: RUNTIME_SERVICE.into(),
            method: "RegisterPlugin".into(),
            payload: req.encode_to_vec(),
            timeout_nano: 5_000_000_000,
            metadata: vec![],
        }
        .encode_to_vec();
        let mut frame = vec![0, 0, 0, 2];
        frame.extend_from_slice(&((envelope.len() + 10) as u32).to_be_bytes());
        frame.extend_from_slice(&(envelope.len() as u32).to_be_bytes());
        frame.extend_from_slice(&[0, 0, 0, 1, 1, 0]);
        frame.extend_from_slice(&envelope);
        assert_eq!(&frame[..8], &[0, 0, 0, 2, 0, 0, 0, 0x4a]);
        assert_eq!(&frame[8..18], &[0, 0, 0, 0x40, 0, 0, 0, 1, 1, 0]);

        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async {
            let (ours, mut theirs) = tokio::io::duplex(1 << 16);
            let (_conn, mut rx) = Conn::start(ours);
            // Split across writes anywhere: a byte stream per logical connection.
            let (a, b) = frame.split_at(13);
            theirs.write_all(a).await.unwrap();
            theirs.flush().await.unwrap();
            theirs.write_all(b).await.unwrap();
            let inc = rx.recv().await.unwrap();
            assert_eq!(inc.request.method, "RegisterPlugin");
            let got = RegisterPluginRequest::decode(inc.request.payload.as_slice()).unwrap();
            assert_eq!(got, req);
            inc.reply.send(ok(&Empty {})).unwrap();
            // The answer: connection 2, stream 1, a response, an OK status.
            let mut hdr = [0u8; 18];
            theirs.read_exact(&mut hdr).await.unwrap();
            assert_eq!(&hdr[0..4], &[0, 0, 0, 2]);
            assert_eq!(&hdr[12..18], &[0, 0, 0, 1, 2, 0]);
        });
    }

    /// A call on connection 1, its answer in two frames, an error status, a call
    /// nobody answers (time-out) and a large request cut into frames of at most 4096.
    #[test]
    fn calls_answers_errors_and_timeouts() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async {
            let (ours, theirs) = tokio::io::duplex(1 << 20);
            let (conn, _rx) = Conn::start(ours);
            let (mut tr, mut tw) = tokio::io::split(theirs);
            // The plugin's side: read the frames of one request, answer as told.
            let plugin = tokio::spawn(async move {
                let mut frames = vec![];
                let mut answers = 0;
                let mut buf: Vec<u8> = vec![];
                loop {
                    let mut h = [0u8; 8];
                    if tr.read_exact(&mut h).await.is_err() {
                        return frames;
                    }
                    let n = u32::from_be_bytes(h[4..8].try_into().unwrap()) as usize;
                    frames.push(n);
                    let mut p = vec![0u8; n];
                    tr.read_exact(&mut p).await.unwrap();
                    assert_eq!(&h[0..4], &[0, 0, 0, 1]);
                    buf.extend_from_slice(&p);
                    while let Some((stream, kind, body)) = take_message(&mut buf).unwrap() {
                        assert_eq!(kind, 1);
                        assert_eq!(stream % 2, 1, "client streams are odd");
                        let req = TtrpcRequest::decode(body.as_slice()).unwrap();
                        answers += 1;
                        let resp = match req.method.as_str() {
                            "Configure" => ok(&ConfigureResponse { events: 0x62f }),
                            "Shutdown" => continue, // never answered
                            _ => status(code::UNIMPLEMENTED, "method nope"),
                        }
                        .encode_to_vec();
                        let mut msg = (resp.len() as u32).to_be_bytes().to_vec();
                        msg.extend_from_slice(&stream.to_be_bytes());
                        msg.extend_from_slice(&[2, 0]);
                        msg.extend_from_slice(&resp);
                        let (x, y) = msg.split_at(7);
                        for part in [x, y] {
                            let mut f = vec![0, 0, 0, 1];
                            f.extend_from_slice(&(part.len() as u32).to_be_bytes());
                            f.extend_from_slice(part);
                            tw.write_all(&f).await.unwrap();
                        }
                        let _ = answers;
                    }
                }
            });
            let t = Duration::from_secs(5);
            let r: ConfigureResponse = conn
                .call(PLUGIN_SERVICE, "Configure", &ConfigureRequest::default(), t)
                .await
                .unwrap();
            assert_eq!(r.events, 0x62f);
            let e = conn
                .call::<_, Empty>(PLUGIN_SERVICE, "RunPodSandbox", &PodRequest::default(), t)
                .await
                .unwrap_err();
            assert_eq!(
                e,
                CallError::Status(code::UNIMPLEMENTED, "method nope".into())
            );
            let e = conn
                .call::<_, Empty>(
                    PLUGIN_SERVICE,
                    "Shutdown",
                    &Empty {},
                    Duration::from_millis(100),
                )
                .await
                .unwrap_err();
            assert_eq!(e, CallError::Timeout);
            let big = SynchronizeRequest {
                pods: (0..200)
                    .map(|i| PodSandbox {
                        id: format!("{i:064}"),
                        ..Default::default()
                    })
                    .collect(),
                ..Default::default()
            };
            let _ = conn
                .call::<_, SynchronizeResponse>(PLUGIN_SERVICE, "Synchronize", &big, t)
                .await
                .unwrap_err();
            conn.close().await;
            let frames = plugin.await.unwrap();
            assert!(frames.iter().all(|n| *n <= 4096), "{frames:?}");
            assert!(frames.len() >= 7, "{frames:?}");
            assert!(conn.is_closed());
            assert_eq!(
                conn.call::<_, Empty>(PLUGIN_SERVICE, "X", &Empty {}, t)
                    .await
                    .unwrap_err(),
                CallError::Closed
            );
        });
    }
}
