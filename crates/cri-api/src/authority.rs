//! Lets a CRI server take the HTTP/2 `:authority` that gRPC clients send over a unix
//! socket, whatever it is.
//!
//! grpc-go clients that dial a socket path (the kubelet before v1.30, and the releases
//! around it) send that path as `:authority`, and grpc's C core (Python's `grpcio`,
//! among others) sends it percent-encoded. The HTTP/2 server under tonic (`h2`) parses
//! `:authority` as a URI authority and answers a request whose authority is not one
//! with RST_STREAM(PROTOCOL_ERROR), so those clients cannot make a single call. gRPC
//! servers in Go (containerd, CRI-O) do not look at it. On a unix socket the authority
//! carries no meaning at all.
//!
//! [`AuthorityFix`] sits between the socket and the HTTP/2 server and reads what the
//! client sends. Everything but header blocks passes through untouched. Header blocks
//! are decoded (HPACK keeps a table that spans the connection, so every block must be
//! read to keep it in step); while every `:authority` is one `h2` accepts, the
//! client's own bytes are passed on. From the first block whose authority it would
//! refuse, that authority is replaced by `localhost`, and that block and every later
//! one on the connection are written anew as literals that do not use the dynamic
//! table (the server's table then no longer follows the client's, and need not).
//!
//! The cost: one HPACK decode per request on every connection, and one encode per
//! request on the connections that needed the fix; docs/crustd.md gives the measurement.

use std::io;
use std::pin::Pin;
use std::task::{ready, Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tonic::codegen::http::uri::Authority;
use tonic::transport::server::Connected;

use crate::hpack;

/// What an authority the server refuses is replaced with.
pub const REPLACEMENT: &str = "localhost";

const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
const HEADERS: u8 = 0x1;
const CONTINUATION: u8 = 0x9;
const END_STREAM: u8 = 0x1;
const END_HEADERS: u8 = 0x4;
const PADDED: u8 = 0x8;
const PRIORITY: u8 = 0x20;
/// The smallest SETTINGS_MAX_FRAME_SIZE a peer may set, so always within the server's.
const FRAME_MAX: usize = 16_384;
/// A header block larger than this closes the connection instead of growing memory.
const BLOCK_MAX: usize = 1 << 20;
/// The server's SETTINGS_HEADER_TABLE_SIZE: tonic leaves h2's default.
const TABLE_SIZE: usize = 4096;

/// A header block being collected from HEADERS and CONTINUATION frames.
struct Pending {
    stream: u32,
    end_stream: bool,
    priority: Option<[u8; 5]>,
    block: Vec<u8>,
    /// The frames as the client sent them, passed on when nothing needs changing.
    frames: Vec<u8>,
}

#[derive(PartialEq, Eq, Debug)]
enum Mode {
    /// Waiting for the client's connection preface.
    Preface,
    Frames,
    /// Not HTTP/2 with prior knowledge: nothing to do, the server will refuse it.
    Passthrough,
}

/// The client-to-server half: bytes in, bytes for the server out.
pub struct Transcoder {
    mode: Mode,
    buf: Vec<u8>,
    /// Payload bytes of the current frame still to pass on as they are.
    copy_left: usize,
    pending: Option<Pending>,
    decoder: hpack::Decoder,
    rewriting: bool,
}

impl Default for Transcoder {
    fn default() -> Self {
        Transcoder {
            mode: Mode::Preface,
            buf: Vec::new(),
            copy_left: 0,
            pending: None,
            decoder: hpack::Decoder::new(TABLE_SIZE),
            rewriting: false,
        }
    }
}

fn invalid(msg: impl Into<String>) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, msg.into())
}

/// Whether `h2` takes this `:authority` (it parses it as a URI authority).
pub fn acceptable(authority: &[u8]) -> bool {
    Authority::try_from(authority).is_ok()
}

impl Transcoder {
    /// True once this connection's header blocks are being written anew.
    pub fn rewriting(&self) -> bool {
        self.rewriting
    }

    /// Takes what the client sent and appends to `out` what the server is to read.
    /// Incomplete frames wait in the transcoder for the next call.
    pub fn feed(&mut self, data: &[u8], out: &mut Vec<u8>) -> io::Result<()> {
        if self.mode == Mode::Passthrough {
            out.extend_from_slice(data);
            return Ok(());
        }
        // A payload to pass on, with nothing waiting before it: no copy into `buf`.
        let mut data = data;
        if self.buf.is_empty() && self.copy_left > 0 {
            let n = self.copy_left.min(data.len());
            out.extend_from_slice(&data[..n]);
            self.copy_left -= n;
            data = &data[n..];
        }
        self.buf.extend_from_slice(data);
        let mut at = 0;
        let r = self.process(&mut at, out);
        self.buf.drain(..at);
        r
    }

    fn process(&mut self, at: &mut usize, out: &mut Vec<u8>) -> io::Result<()> {
        loop {
            let b = &self.buf[*at..];
            match self.mode {
                Mode::Passthrough => {
                    out.extend_from_slice(b);
                    *at = self.buf.len();
                    return Ok(());
                }
                Mode::Preface => {
                    let n = b.len().min(PREFACE.len());
                    if b[..n] != PREFACE[..n] {
                        self.mode = Mode::Passthrough;
                        continue;
                    }
                    if n < PREFACE.len() {
                        return Ok(());
                    }
                    out.extend_from_slice(PREFACE);
                    *at += PREFACE.len();
                    self.mode = Mode::Frames;
                }
                Mode::Frames if self.copy_left > 0 => {
                    let n = self.copy_left.min(b.len());
                    out.extend_from_slice(&b[..n]);
                    *at += n;
                    self.copy_left -= n;
                    if self.copy_left > 0 {
                        return Ok(());
                    }
                }
                Mode::Frames => {
                    if b.len() < 9 {
                        return Ok(());
                    }
                    let len = u32::from_be_bytes([0, b[0], b[1], b[2]]) as usize;
                    let (kind, flags) = (b[3], b[4]);
                    let stream = u32::from_be_bytes([b[5], b[6], b[7], b[8]]) & 0x7fff_ffff;
                    if kind != HEADERS && kind != CONTINUATION {
                        if self.pending.is_some() {
                            return Err(invalid(
                                "http/2: a frame between HEADERS and its CONTINUATION",
                            ));
                        }
                        out.extend_from_slice(&b[..9]);
                        *at += 9;
                        self.copy_left = len;
                        continue;
                    }
                    let held = self.pending.as_ref().map_or(0, |p| p.frames.len());
                    if held + 9 + len > BLOCK_MAX {
                        return Err(invalid(format!(
                            "http/2: header block over {BLOCK_MAX} bytes"
                        )));
                    }
                    if b.len() < 9 + len {
                        return Ok(());
                    }
                    let frame = b[..9 + len].to_vec();
                    *at += 9 + len;
                    self.frame(kind, flags, stream, &frame, out)?;
                }
            }
        }
    }

    fn frame(
        &mut self,
        kind: u8,
        flags: u8,
        stream: u32,
        frame: &[u8],
        out: &mut Vec<u8>,
    ) -> io::Result<()> {
        let mut payload = &frame[9..];
        if kind == HEADERS {
            if self.pending.is_some() {
                return Err(invalid("http/2: HEADERS before the last block ended"));
            }
            if flags & PADDED != 0 {
                let (&pad, rest) = payload
                    .split_first()
                    .ok_or_else(|| invalid("http/2: padded HEADERS without a pad length"))?;
                if pad as usize > rest.len() {
                    return Err(invalid("http/2: HEADERS padding longer than the frame"));
                }
                payload = &rest[..rest.len() - pad as usize];
            }
            let priority = if flags & PRIORITY != 0 {
                if payload.len() < 5 {
                    return Err(invalid("http/2: HEADERS too short for its priority"));
                }
                let p: [u8; 5] = payload[..5].try_into().expect("5 bytes");
                payload = &payload[5..];
                Some(p)
            } else {
                None
            };
            self.pending = Some(Pending {
                stream,
                end_stream: flags & END_STREAM != 0,
                priority,
                block: payload.to_vec(),
                frames: frame.to_vec(),
            });
        } else {
            let p = match self.pending.as_mut() {
                Some(p) if p.stream == stream => p,
                _ => return Err(invalid("http/2: CONTINUATION without its HEADERS")),
            };
            p.block.extend_from_slice(payload);
            p.frames.extend_from_slice(frame);
        }
        if flags & END_HEADERS != 0 {
            let p = self.pending.take().expect("a pending block");
            self.finish(p, out)?;
        }
        Ok(())
    }

    fn finish(&mut self, p: Pending, out: &mut Vec<u8>) -> io::Result<()> {
        let mut fields = self
            .decoder
            .decode(&p.block)
            .map_err(|e| invalid(e.to_string()))?;
        let mut changed = false;
        for f in fields.iter_mut().filter(|f| f.name == b":authority") {
            if !acceptable(&f.value) {
                f.value = REPLACEMENT.as_bytes().to_vec();
                changed = true;
            }
        }
        if !changed && !self.rewriting {
            out.extend_from_slice(&p.frames);
            return Ok(());
        }
        self.rewriting = true;
        let mut block = Vec::with_capacity(p.block.len() + 64);
        hpack::encode(&fields, &mut block);
        write_frames(&p, &block, out);
        Ok(())
    }
}

/// HEADERS with the block (and the client's priority), then CONTINUATIONs as needed.
fn write_frames(p: &Pending, block: &[u8], out: &mut Vec<u8>) {
    let prio = p.priority.map_or(0, |_| 5);
    let first = block.len().min(FRAME_MAX - prio);
    let mut flags = if p.end_stream { END_STREAM } else { 0 };
    if p.priority.is_some() {
        flags |= PRIORITY;
    }
    let mut rest = &block[first..];
    if rest.is_empty() {
        flags |= END_HEADERS;
    }
    frame_header(out, prio + first, HEADERS, flags, p.stream);
    if let Some(pr) = p.priority {
        out.extend_from_slice(&pr);
    }
    out.extend_from_slice(&block[..first]);
    while !rest.is_empty() {
        let n = rest.len().min(FRAME_MAX);
        let flags = if n == rest.len() { END_HEADERS } else { 0 };
        frame_header(out, n, CONTINUATION, flags, p.stream);
        out.extend_from_slice(&rest[..n]);
        rest = &rest[n..];
    }
}

fn frame_header(out: &mut Vec<u8>, len: usize, kind: u8, flags: u8, stream: u32) {
    out.extend_from_slice(&(len as u32).to_be_bytes()[1..]);
    out.push(kind);
    out.push(flags);
    out.extend_from_slice(&stream.to_be_bytes());
}

/// A server-side connection whose incoming bytes go through a [`Transcoder`]; writes
/// go straight to the socket.
pub struct AuthorityFix<S> {
    inner: S,
    transcoder: Transcoder,
    out: Vec<u8>,
    out_at: usize,
    scratch: Box<[u8]>,
    eof: bool,
}

impl<S> AuthorityFix<S> {
    pub fn new(inner: S) -> Self {
        AuthorityFix {
            inner,
            transcoder: Transcoder::default(),
            out: Vec::new(),
            out_at: 0,
            scratch: vec![0; FRAME_MAX].into_boxed_slice(),
            eof: false,
        }
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for AuthorityFix<S> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let me = self.get_mut();
        loop {
            if me.out_at < me.out.len() {
                let n = buf.remaining().min(me.out.len() - me.out_at);
                buf.put_slice(&me.out[me.out_at..me.out_at + n]);
                me.out_at += n;
                if me.out_at == me.out.len() {
                    me.out.clear();
                    me.out_at = 0;
                }
                return Poll::Ready(Ok(()));
            }
            if me.eof {
                return Poll::Ready(Ok(()));
            }
            let mut rb = ReadBuf::new(&mut me.scratch);
            ready!(Pin::new(&mut me.inner).poll_read(cx, &mut rb))?;
            if rb.filled().is_empty() {
                me.eof = true;
                continue;
            }
            me.transcoder.feed(rb.filled(), &mut me.out)?;
        }
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for AuthorityFix<S> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().inner).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
    }
}

impl<S: Connected> Connected for AuthorityFix<S> {
    type ConnectInfo = S::ConnectInfo;

    fn connect_info(&self) -> Self::ConnectInfo {
        self.inner.connect_info()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hpack::tests::hex;

    /// Two requests as a grpc-go client that dialed a socket path sends them (its
    /// encoder indexes and Huffman-codes; the second block refers to the first's
    /// entries), the authority being `/run/crust/crust.sock`.
    const PATH_BLOCKS: [&str; 2] = [
        "8386449962cb6a49a92afdc2bedb6a49a92ee2d9dcc42b1c4b620c7abf418f62cb6a60965a84b04b2d425741c9d75f8b1d75d0620d263d4c4d65647a8b9acac8b4c7602bb6f2ecff4082497f864d833505b11f40899acac8b24d494f6a7f860befbef34cdb",
        "8386449862cb6a49a92afdc2bedb6a49a92ee2d9dcc42b1b9234da8fc3c2c1c0bf",
    ];

    fn frame(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
        let mut f = Vec::new();
        frame_header(&mut f, payload.len(), kind, flags, stream);
        f.extend_from_slice(payload);
        f
    }

    /// A connection: preface, SETTINGS, then per block a HEADERS (the first split
    /// into a padded, prioritised HEADERS and a CONTINUATION) and a DATA frame.
    fn connection(blocks: &[Vec<u8>]) -> Vec<u8> {
        let mut c = PREFACE.to_vec();
        c.extend(frame(0x4, 0, 0, &[0, 3, 0, 0, 0, 100]));
        for (i, b) in blocks.iter().enumerate() {
            let stream = 1 + 2 * i as u32;
            if i == 0 {
                let mut p = vec![2u8];
                p.extend_from_slice(&[0, 0, 0, 0, 16]);
                p.extend_from_slice(&b[..10]);
                p.extend_from_slice(&[0, 0]);
                c.extend(frame(HEADERS, PADDED | PRIORITY, stream, &p));
                c.extend(frame(CONTINUATION, END_HEADERS, stream, &b[10..]));
            } else {
                c.extend(frame(HEADERS, END_HEADERS, stream, b));
            }
            c.extend(frame(0x0, END_STREAM, stream, &[0, 0, 0, 0, 2, 0x0a, 0x00]));
        }
        c
    }

    /// Splits what the server reads into frames: (kind, flags, stream, payload).
    fn frames(mut b: &[u8]) -> Vec<(u8, u8, u32, Vec<u8>)> {
        // RFC 9113 3.4.
        let preface = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
        assert_eq!(&b[..preface.len()], preface);
        b = &b[preface.len()..];
        let mut out = Vec::new();
        while !b.is_empty() {
            let len = u32::from_be_bytes([0, b[0], b[1], b[2]]) as usize;
            let stream = u32::from_be_bytes([b[5], b[6], b[7], b[8]]);
            out.push((b[3], b[4], stream, b[9..9 + len].to_vec()));
            b = &b[9 + len..];
        }
        out
    }

    fn run(input: &[u8], chunk: usize) -> (Vec<u8>, bool) {
        let mut t = Transcoder::default();
        let mut out = Vec::new();
        for c in input.chunks(chunk) {
            t.feed(c, &mut out).unwrap();
        }
        (out, t.rewriting())
    }

    #[test]
    fn which_authorities_the_server_takes() {
        for ok in ["localhost", "127.0.0.1:10010", "[::1]:50051", "crust"] {
            assert!(acceptable(ok.as_bytes()), "{ok}");
        }
        for bad in [
            "/run/crust/crust.sock",
            "run%2Fcrust%2Fcrust.sock",
            "",
            "unix:///run/crust.sock",
            "a b",
        ] {
            assert!(!acceptable(bad.as_bytes()), "{bad}");
        }
    }

    #[test]
    fn a_socket_path_authority_becomes_localhost_in_every_later_block() {
        let blocks: Vec<Vec<u8>> = PATH_BLOCKS.iter().map(|b| hex(b)).collect();
        let input = connection(&blocks);
        for chunk in [1, 7, 4096] {
            let (out, rewriting) = run(&input, chunk);
            assert!(rewriting);
            let f = frames(&out);
            // SETTINGS (0x4), then HEADERS (0x1) + DATA (0x0) per request; the split block
            // is one frame now. Flags (RFC 9113 6.1, 6.2): END_STREAM 0x1, END_HEADERS 0x4,
            // PRIORITY 0x20.
            let kinds: Vec<u8> = f.iter().map(|x| x.0).collect();
            assert_eq!(kinds, [0x4, 0x1, 0x0, 0x1, 0x0], "chunk {chunk}");
            assert_eq!(f[0].3, [0, 3, 0, 0, 0, 100]);
            assert_eq!(f[1].1, 0x20 | 0x4);
            assert_eq!(&f[1].3[..5], &[0, 0, 0, 0, 16]);
            assert_eq!(f[3].1, 0x4);
            assert_eq!((f[2].1, f[2].2), (0x1, 1));
            assert_eq!(f[4].3, [0, 0, 0, 0, 2, 0x0a, 0x00]);
            // What the server decodes: the client's fields with the authority replaced.
            let mut server = hpack::Decoder::new(TABLE_SIZE);
            let mut client = hpack::Decoder::new(TABLE_SIZE);
            for (i, idx) in [1, 3].into_iter().enumerate() {
                let block = if idx == 1 { &f[1].3[5..] } else { &f[3].3[..] };
                let got = server.decode(block).unwrap();
                let mut want = client.decode(&blocks[i]).unwrap();
                want[3].value = b"localhost".to_vec();
                assert_eq!(got, want);
            }
        }
    }

    #[test]
    fn a_good_authority_passes_through_byte_for_byte() {
        // The same requests from a client that sends `localhost` (crictl, tonic).
        let mut enc = Vec::new();
        let fields = |path: &str| {
            vec![
                hpack::Field {
                    name: b":method".to_vec(),
                    value: b"POST".to_vec(),
                    never_indexed: false,
                },
                hpack::Field {
                    name: b":path".to_vec(),
                    value: path.as_bytes().to_vec(),
                    never_indexed: false,
                },
                hpack::Field {
                    name: b":authority".to_vec(),
                    value: b"localhost".to_vec(),
                    never_indexed: false,
                },
            ]
        };
        hpack::encode(&fields("/a"), &mut enc);
        let mut enc2 = Vec::new();
        hpack::encode(&fields("/b"), &mut enc2);
        let input = connection(&[enc, enc2]);
        for chunk in [1, 5, 100_000] {
            let (out, rewriting) = run(&input, chunk);
            assert!(!rewriting);
            assert_eq!(out, input);
        }
    }

    #[test]
    fn large_blocks_are_split_into_continuations() {
        let big = hpack::Field {
            name: b"x-big".to_vec(),
            value: vec![b'v'; 40_000],
            never_indexed: false,
        };
        let auth = hpack::Field {
            name: b":authority".to_vec(),
            value: b"/s".to_vec(),
            never_indexed: false,
        };
        let mut block = Vec::new();
        hpack::encode(&[auth, big.clone()], &mut block);
        let mut input = PREFACE.to_vec();
        // The client's frames may be as large as the server allows; ours stay at 16 KiB.
        input.extend(frame(HEADERS, END_HEADERS | END_STREAM, 1, &block));
        let (out, _) = run(&input, 1000);
        let f = frames(&out);
        let kinds: Vec<(u8, u8)> = f.iter().map(|x| (x.0, x.1)).collect();
        // HEADERS (0x1) with END_STREAM (0x1), CONTINUATION (0x9), the last with
        // END_HEADERS (0x4); none above SETTINGS_MAX_FRAME_SIZE's initial 16384.
        assert_eq!(kinds, [(0x1, 0x1), (0x9, 0), (0x9, 0x4)]);
        assert!(f.iter().all(|x| x.3.len() <= 16_384 && x.2 == 1));
        let all: Vec<u8> = f.iter().flat_map(|x| x.3.clone()).collect();
        let got = hpack::Decoder::new(TABLE_SIZE).decode(&all).unwrap();
        assert_eq!(got[0].value, b"localhost");
        assert_eq!(got[1], big);
    }

    #[test]
    fn not_http2_passes_through_and_broken_framing_is_an_error() {
        let (out, _) = run(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n", 3);
        assert_eq!(out, b"GET / HTTP/1.1\r\nHost: x\r\n\r\n");
        let mut t = Transcoder::default();
        let mut out = Vec::new();
        let mut input = PREFACE.to_vec();
        input.extend(frame(HEADERS, 0, 1, &[0x82]));
        input.extend(frame(0x0, 0, 1, &[]));
        assert!(t.feed(&input, &mut out).is_err());
        let mut t = Transcoder::default();
        let mut input = PREFACE.to_vec();
        input.extend(frame(CONTINUATION, END_HEADERS, 1, &[0x82]));
        assert!(t.feed(&input, &mut out).is_err());
        let mut t = Transcoder::default();
        let mut input = PREFACE.to_vec();
        input.extend(frame(HEADERS, END_HEADERS, 1, &[0xff, 0xff]));
        assert!(
            t.feed(&input, &mut out).is_err(),
            "a bad index closes the connection"
        );
    }
}
