//! The server side of SPDY/3.1, as far as Kubernetes' streaming uses it: the peer opens
//! streams (SYN_STREAM with headers), each answered with a SYN_REPLY, and data flows
//! both ways on each until FIN or RST_STREAM. kubectl, crictl and the kubelet all speak
//! it through the same Go library; the exec and attach protocol (remotecommand.rs) and
//! port-forward's (crustd's port_forward.rs) sit on top.
//!
//! ```text
//! control: 1 | version 3 (15) | type (16) | flags (8) | length (24) | data
//! data:    0 | stream id (31)             | flags (8) | length (24) | data
//! ```
//! Header blocks are one zlib stream per direction for the whole session, flushed at
//! each block, and the peer's is compressed against the fixed dictionary of the SPDY/3
//! specification (`dictionary()`); ours is sent without one (a zlib stream that names
//! no dictionary needs none to inflate).
//!
//! Flow control: the peer's data is acknowledged with WINDOW_UPDATE as it is consumed,
//! so a peer that honours windows is paced by our reader. Our own sends do not wait
//! for the peer's window: the Go implementation every Kubernetes client uses neither
//! enforces its receive window nor sends updates for it, so waiting would stall any
//! output over 64 KiB. They wait for the connection instead (outq.rs): at most 4 MiB of
//! data is queued ahead of the socket, so a fast producer (`cat /dev/zero`) and a slow
//! client cost a bounded amount of memory, and the producer is paced by the client.

use crate::outq::OutQueue;
use bytes::Bytes;
use parking_lot::Mutex;
use std::collections::HashMap;
use std::io;
use std::sync::{Arc, OnceLock};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite};
use tokio::sync::mpsc;

const VERSION: u16 = 3;
const SYN_STREAM: u16 = 1;
const SYN_REPLY: u16 = 2;
const RST_STREAM: u16 = 3;
const SETTINGS: u16 = 4;
const PING: u16 = 6;
const GOAWAY: u16 = 7;
const HEADERS: u16 = 8;
const WINDOW_UPDATE: u16 = 9;
const FLAG_FIN: u8 = 0x01;
/// RST_STREAM status: PROTOCOL_ERROR, CANCEL.
pub const RST_PROTOCOL_ERROR: u32 = 1;
pub const RST_CANCEL: u32 = 5;
/// Chunks of the peer's data a stream holds before its reader takes them.
const INBOX: usize = 64;
/// A frame larger than this is a broken or hostile peer (SPDY's own limit is 16 MiB).
const MAX_FRAME: usize = 1 << 20;

/// The header compression dictionary of the SPDY/3 specification (section 2.6.10.1):
/// length-prefixed header names and values, then a run of common strings. Built from
/// its parts rather than pasted as bytes; its zlib id is 0xe3c6a7c2 (checked in tests).
pub fn dictionary() -> &'static [u8] {
    static DICT: OnceLock<Vec<u8>> = OnceLock::new();
    DICT.get_or_init(|| {
        const WORDS: &[&str] = &[
            "options", "head", "post", "put", "delete", "trace", "accept",
            "accept-charset", "accept-encoding", "accept-language", "accept-ranges", "age",
            "allow", "authorization", "cache-control", "connection", "content-base",
            "content-encoding", "content-language", "content-length", "content-location",
            "content-md5", "content-range", "content-type", "date", "etag", "expect",
            "expires", "from", "host", "if-match", "if-modified-since", "if-none-match",
            "if-range", "if-unmodified-since", "last-modified", "location", "max-forwards",
            "pragma", "proxy-authenticate", "proxy-authorization", "range", "referer",
            "retry-after", "server", "te", "trailer", "transfer-encoding", "upgrade",
            "user-agent", "vary", "via", "warning", "www-authenticate", "method", "get",
            "status", "200 OK", "version", "HTTP/1.1", "url", "public", "set-cookie",
            "keep-alive", "origin",
        ];
        const TAIL: &str = concat!(
            "100101201202205206300302303304305306307402405406407408409410411412413414415416417502504505",
            "203 Non-Authoritative Information204 No Content301 Moved Permanently400 Bad Request",
            "401 Unauthorized403 Forbidden404 Not Found500 Internal Server Error501 Not Implemented",
            "503 Service UnavailableJan Feb Mar Apr May Jun Jul Aug Sept Oct Nov Dec 00:00:00 ",
            "Mon, Tue, Wed, Thu, Fri, Sat, Sun, GMTchunked,text/html,image/png,image/jpg,image/gif,",
            "application/xml,application/xhtml+xml,text/plain,text/javascript,publicprivatemax-age=",
            "gzip,deflate,sdchcharset=utf-8charset=iso-8859-1,utf-,*,enq=0.",
        );
        let mut d = Vec::with_capacity(1423);
        for w in WORDS {
            d.extend_from_slice(&(w.len() as u32).to_be_bytes());
            d.extend_from_slice(w.as_bytes());
        }
        d.extend_from_slice(TAIL.as_bytes());
        d
    })
}

/// The peer's header blocks: one zlib stream over the session, each block ending on a
/// sync flush. Inflated as a stream into a 32 KiB circular window (deflate's own
/// window size) that starts out holding the dictionary, so references into the
/// dictionary resolve as zlib's `inflateSetDictionary` would make them; the session may
/// carry any number of blocks (a port-forward opens two streams per connection).
struct Inflater {
    r: Box<miniz_oxide::inflate::core::DecompressorOxide>,
    window: Vec<u8>,
    pos: usize,
    /// Bytes of the zlib header still to skip (None before the first block).
    header: Option<usize>,
}

impl Default for Inflater {
    fn default() -> Self {
        Inflater {
            r: Box::default(),
            window: vec![0u8; WINDOW],
            pos: 0,
            header: None,
        }
    }
}

/// Deflate's window; miniz_oxide's circular output buffer must be this big.
const WINDOW: usize = 32 * 1024;
/// One header block may not inflate to more than this.
const MAX_BLOCK: usize = 1 << 20;

impl Inflater {
    fn block(&mut self, mut input: &[u8]) -> io::Result<Vec<u8>> {
        use miniz_oxide::inflate::core::{decompress, inflate_flags};
        use miniz_oxide::inflate::TINFLStatus;
        let bad =
            |m: &str| io::Error::new(io::ErrorKind::InvalidData, format!("spdy headers: {m}"));
        if self.header.is_none() {
            // CMF, FLG, and the dictionary id when FLG says there is one.
            let flg = *input.get(1).ok_or_else(|| bad("truncated zlib header"))?;
            self.header = Some(if flg & 0x20 != 0 { 6 } else { 2 });
            let d = dictionary();
            self.window[..d.len()].copy_from_slice(d);
            self.pos = d.len();
        }
        let skip = self.header.unwrap_or(0).min(input.len());
        input = &input[skip..];
        self.header = Some(self.header.unwrap_or(0) - skip);
        let mut out = Vec::new();
        loop {
            let (st, n_in, n_out) = decompress(
                &mut self.r,
                input,
                &mut self.window,
                self.pos,
                inflate_flags::TINFL_FLAG_HAS_MORE_INPUT,
            );
            out.extend_from_slice(&self.window[self.pos..self.pos + n_out]);
            self.pos = (self.pos + n_out) % WINDOW;
            input = &input[n_in..];
            if out.len() > MAX_BLOCK {
                return Err(bad("header block too large"));
            }
            match st {
                TINFLStatus::HasMoreOutput => continue,
                TINFLStatus::NeedsMoreInput | TINFLStatus::Done => return Ok(out),
                e => return Err(bad(&format!("inflate: {e:?}"))),
            }
        }
    }
}

/// Headers as the peer sent them: names lowercase (SPDY requires it), values as given
/// (several values of one name are NUL-separated in SPDY and come here as one string
/// each).
pub type Headers = Vec<(String, String)>;

fn parse_headers(b: &[u8]) -> io::Result<Headers> {
    let bad = || io::Error::new(io::ErrorKind::InvalidData, "spdy: malformed header block");
    let mut p = 0usize;
    let u32_at = |p: &mut usize| -> io::Result<usize> {
        let v = b.get(*p..*p + 4).ok_or_else(bad)?;
        *p += 4;
        Ok(u32::from_be_bytes(v.try_into().unwrap()) as usize)
    };
    let n = u32_at(&mut p)?;
    let mut out = Vec::new();
    for _ in 0..n.min(1024) {
        let l = u32_at(&mut p)?;
        let name = b.get(p..p + l).ok_or_else(bad)?;
        p += l;
        let l = u32_at(&mut p)?;
        let value = b.get(p..p + l).ok_or_else(bad)?;
        p += l;
        let name = String::from_utf8_lossy(name).to_ascii_lowercase();
        for v in value.split(|c| *c == 0) {
            out.push((name.clone(), String::from_utf8_lossy(v).into_owned()));
        }
    }
    Ok(out)
}

fn encode_headers(h: &[(&str, &str)]) -> Vec<u8> {
    let mut b = Vec::new();
    b.extend_from_slice(&(h.len() as u32).to_be_bytes());
    for (k, v) in h {
        let k = k.to_ascii_lowercase();
        b.extend_from_slice(&(k.len() as u32).to_be_bytes());
        b.extend_from_slice(k.as_bytes());
        b.extend_from_slice(&(v.len() as u32).to_be_bytes());
        b.extend_from_slice(v.as_bytes());
    }
    b
}

fn control(kind: u16, flags: u8, data: &[u8]) -> Vec<u8> {
    let mut f = Vec::with_capacity(8 + data.len());
    f.extend_from_slice(&(0x8000 | VERSION).to_be_bytes());
    f.extend_from_slice(&kind.to_be_bytes());
    f.push(flags);
    f.extend_from_slice(&(data.len() as u32).to_be_bytes()[1..]);
    f.extend_from_slice(data);
    f
}

fn data_frame(id: u32, flags: u8, data: &[u8]) -> Vec<u8> {
    let mut f = Vec::with_capacity(8 + data.len());
    f.extend_from_slice(&(id & 0x7fff_ffff).to_be_bytes());
    f.push(flags);
    f.extend_from_slice(&(data.len() as u32).to_be_bytes()[1..]);
    f.extend_from_slice(data);
    f
}

/// What the session's tasks share: the outgoing frame queue, our header compressor
/// (frames leave in the order they were compressed, so it is held while queueing), and
/// the open streams' inboxes.
struct Shared {
    out: OutQueue,
    deflate: Mutex<flate2::Compress>,
    inboxes: Mutex<HashMap<u32, mpsc::Sender<Bytes>>>,
}

impl Shared {
    fn send(&self, frame: Vec<u8>) -> io::Result<()> {
        self.out.send(frame)
    }

    fn reply(&self, id: u32, headers: &[(&str, &str)], fin: bool) -> io::Result<()> {
        let raw = encode_headers(headers);
        let mut z = self.deflate.lock();
        let mut block = Vec::with_capacity(raw.len() + 64);
        z.compress_vec(&raw, &mut block, flate2::FlushCompress::Sync)
            .map_err(io::Error::other)?;
        while block.len() == block.capacity() {
            block.reserve(256);
            z.compress_vec(&[], &mut block, flate2::FlushCompress::Sync)
                .map_err(io::Error::other)?;
        }
        let mut data = (id & 0x7fff_ffff).to_be_bytes().to_vec();
        data.extend_from_slice(&block);
        self.send(control(SYN_REPLY, if fin { FLAG_FIN } else { 0 }, &data))
    }
}

/// A stream the peer opened.
pub struct Stream {
    pub id: u32,
    pub headers: Headers,
    inbox: mpsc::Receiver<Bytes>,
    shared: Arc<Shared>,
}

impl Stream {
    /// The first value of header `name` (lowercase).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }

    /// Accepts the stream (SYN_REPLY without headers).
    pub fn reply(&self) -> io::Result<()> {
        self.shared.reply(self.id, &[], false)
    }

    /// The next chunk the peer sent; None at its FIN (or reset, or the session's end).
    /// Each chunk is acknowledged to the peer's flow control as it is taken.
    pub async fn read(&mut self) -> Option<Bytes> {
        let b = self.inbox.recv().await?;
        let n = b.len() as u32;
        if n > 0 {
            for id in [self.id, 0] {
                let mut d = id.to_be_bytes().to_vec();
                d.extend_from_slice(&n.to_be_bytes());
                let _ = self.shared.send(control(WINDOW_UPDATE, 0, &d));
            }
        }
        Some(b)
    }

    /// A handle to write to the stream, independent of reading.
    pub fn writer(&self) -> Writer {
        Writer {
            id: self.id,
            shared: self.shared.clone(),
        }
    }
}

/// The sending half of a stream.
#[derive(Clone)]
pub struct Writer {
    id: u32,
    shared: Arc<Shared>,
}

impl Writer {
    /// Sends `data`, waiting while the session already has its budget queued.
    pub async fn write(&self, data: &[u8]) -> io::Result<()> {
        for chunk in data.chunks(32 * 1024) {
            self.shared
                .out
                .send_data(data_frame(self.id, 0, chunk), chunk.len())
                .await?;
        }
        Ok(())
    }

    /// Sends a short message at once, outside the budget (a status, an error).
    pub fn write_now(&self, data: &[u8]) -> io::Result<()> {
        self.shared.send(data_frame(self.id, 0, data))
    }

    /// Our end of the stream: an empty DATA frame with FIN.
    pub fn close(&self) -> io::Result<()> {
        self.shared.send(data_frame(self.id, FLAG_FIN, &[]))
    }

    pub fn reset(&self, status: u32) -> io::Result<()> {
        let mut d = self.id.to_be_bytes().to_vec();
        d.extend_from_slice(&status.to_be_bytes());
        self.shared.send(control(RST_STREAM, 0, &d))
    }
}

/// A running session: streams the peer opens arrive on `accept`.
pub struct Session {
    incoming: mpsc::UnboundedReceiver<Stream>,
    shared: Arc<Shared>,
    done: tokio::sync::watch::Receiver<bool>,
    /// Dropped with the session: the reader stops even if the peer never hangs up, and
    /// once the last stream handle is gone the connection is flushed and shut.
    _stop: tokio::sync::oneshot::Sender<()>,
}

impl Session {
    /// Serves SPDY/3.1 on `io` (a connection already upgraded).
    pub fn server<IO>(io: IO) -> Session
    where
        IO: AsyncRead + AsyncWrite + Send + 'static,
    {
        let (mut rd, wr) = tokio::io::split(io);
        let (in_tx, in_rx) = mpsc::unbounded_channel();
        let (done_tx, done_rx) = tokio::sync::watch::channel(false);
        let (gone_tx, gone_rx) = tokio::sync::watch::channel(false);
        let shared = Arc::new(Shared {
            out: OutQueue::start(wr, done_rx.clone(), gone_rx),
            deflate: Mutex::new(flate2::Compress::new(flate2::Compression::default(), true)),
            inboxes: Mutex::new(HashMap::new()),
        });
        let sh = shared.clone();
        let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
        tokio::spawn(async move {
            let stopped = tokio::select! {
                res = read_loop(&mut rd, &sh, &in_tx) => {
                    if let Err(e) = res {
                        tracing::debug!("spdy session ended: {e}");
                    }
                    false
                }
                _ = stop_rx => true,
            };
            // The peer is gone, or we are done: every stream sees its end.
            sh.inboxes.lock().clear();
            let _ = done_tx.send(true);
            if stopped {
                crate::outq::linger(&mut rd).await;
            }
            let _ = gone_tx.send(true);
        });
        Session {
            incoming: in_rx,
            shared,
            done: done_rx,
            _stop: stop_tx,
        }
    }

    /// The next stream the peer opens; None once the connection is gone.
    pub async fn accept(&mut self) -> Option<Stream> {
        self.incoming.recv().await
    }

    /// Resolves when the peer's side of the connection has ended.
    pub async fn closed(&self) {
        let mut d = self.done.clone();
        while !*d.borrow() {
            if d.changed().await.is_err() {
                return;
            }
        }
    }

    /// Says goodbye (GOAWAY, last stream 0, status OK); the connection closes once
    /// every stream handle is dropped.
    pub fn goaway(&self) {
        let mut d = 0u32.to_be_bytes().to_vec();
        d.extend_from_slice(&0u32.to_be_bytes());
        let _ = self.shared.send(control(GOAWAY, 0, &d));
    }
}

async fn read_loop<R: AsyncRead + Unpin>(
    rd: &mut R,
    sh: &Arc<Shared>,
    incoming: &mpsc::UnboundedSender<Stream>,
) -> io::Result<()> {
    let mut inflater = Inflater::default();
    let mut head = [0u8; 8];
    loop {
        match rd.read_exact(&mut head).await {
            Ok(_) => {}
            Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => return Ok(()),
            Err(e) => return Err(e),
        }
        let flags = head[4];
        let len = u32::from_be_bytes([0, head[5], head[6], head[7]]) as usize;
        if len > MAX_FRAME {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                "spdy: frame too large",
            ));
        }
        let mut data = vec![0u8; len];
        rd.read_exact(&mut data).await?;
        if head[0] & 0x80 == 0 {
            // DATA
            let id = u32::from_be_bytes(head[0..4].try_into().unwrap()) & 0x7fff_ffff;
            let tx = sh.inboxes.lock().get(&id).cloned();
            if let (Some(tx), false) = (tx, data.is_empty()) {
                // Waits while the stream's reader is INBOX chunks behind: the peer is
                // then paced by TCP, as it ignores SPDY's windows.
                let _ = tx.send(Bytes::from(data)).await;
            }
            if flags & FLAG_FIN != 0 {
                sh.inboxes.lock().remove(&id);
            }
            continue;
        }
        let kind = u16::from_be_bytes([head[2], head[3]]);
        let id_at = |d: &[u8]| {
            d.get(0..4)
                .map(|b| u32::from_be_bytes(b.try_into().unwrap()) & 0x7fff_ffff)
        };
        match kind {
            SYN_STREAM => {
                let (Some(id), Some(block)) = (id_at(&data), data.get(10..)) else {
                    return Err(io::Error::new(
                        io::ErrorKind::InvalidData,
                        "spdy: short SYN_STREAM",
                    ));
                };
                let headers = parse_headers(&inflater.block(block)?)?;
                let (tx, rx) = mpsc::channel(INBOX);
                if flags & FLAG_FIN == 0 {
                    sh.inboxes.lock().insert(id, tx);
                }
                let s = Stream {
                    id,
                    headers,
                    inbox: rx,
                    shared: sh.clone(),
                };
                if incoming.send(s).is_err() {
                    // Nobody accepts streams any more: refuse it.
                    let mut d = id.to_be_bytes().to_vec();
                    d.extend_from_slice(&RST_CANCEL.to_be_bytes());
                    let _ = sh.send(control(RST_STREAM, 0, &d));
                }
            }
            HEADERS => {
                // Keep the inflater in step; the extra headers mean nothing to us.
                if let Some(block) = data.get(4..) {
                    inflater.block(block)?;
                }
            }
            RST_STREAM => {
                if let Some(id) = id_at(&data) {
                    sh.inboxes.lock().remove(&id);
                }
            }
            PING => {
                let _ = sh.send(control(PING, 0, &data));
            }
            GOAWAY => return Ok(()),
            SYN_REPLY | SETTINGS | WINDOW_UPDATE => {}
            _ => {} // unknown control frames are ignored, as the spec asks
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::AsyncWriteExt;

    #[test]
    fn dictionary_is_the_specs() {
        let d = dictionary();
        assert_eq!(d.len(), 1423);
        // zlib's id of a dictionary is its Adler-32.
        let (mut a, mut b) = (1u32, 0u32);
        for &x in d {
            a = (a + x as u32) % 65521;
            b = (b + a) % 65521;
        }
        assert_eq!((b << 16) | a, 0xe3c6_a7c2);
    }

    /// A peer's header blocks, deflated against the dictionary with sync flushes, come
    /// back one block at a time.
    #[test]
    fn inflates_blocks_compressed_against_the_dictionary() {
        // Deflated by Python's zlib with zdict=dictionary(), as Go's spdystream does.
        let blocks = [
            encode_headers(&[("streamtype", "error")]),
            encode_headers(&[("streamtype", "stdout"), ("x", "a\0b")]),
        ];
        let compressed = python_compress_with_dict(&blocks).expect("python3 with zlib");
        let mut inf = Inflater::default();
        let h1 = parse_headers(&inf.block(&compressed[0]).unwrap()).unwrap();
        assert_eq!(h1, vec![("streamtype".to_string(), "error".to_string())]);
        let h2 = parse_headers(&inf.block(&compressed[1]).unwrap()).unwrap();
        assert_eq!(h2[0].1, "stdout");
        assert_eq!(
            &h2[1..],
            &[("x".into(), "a".into()), ("x".into(), "b".into())]
        );
    }

    /// A long session: thousands of blocks, well past one window of history.
    #[test]
    fn inflates_a_long_session() {
        let blocks: Vec<Vec<u8>> = (0..3000)
            .map(|i| encode_headers(&[("streamtype", "data"), ("requestid", &i.to_string())]))
            .collect();
        let compressed = python_compress_with_dict(&blocks).expect("python3 with zlib");
        let mut inf = Inflater::default();
        for (i, c) in compressed.iter().enumerate() {
            let h = parse_headers(&inf.block(c).unwrap()).unwrap();
            assert_eq!(h[1].1, i.to_string());
        }
    }

    fn python_compress_with_dict(blocks: &[Vec<u8>]) -> Option<Vec<Vec<u8>>> {
        use std::io::Write;
        static N: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let dir = std::env::temp_dir().join(format!("spdy-dict-{}-{n}", std::process::id()));
        std::fs::create_dir_all(&dir).ok()?;
        std::fs::write(dir.join("dict"), dictionary()).ok()?;
        for (i, b) in blocks.iter().enumerate() {
            std::fs::write(dir.join(format!("b{i}")), b).ok()?;
        }
        let script = format!(
            "import zlib\nd=open('{0}/dict','rb').read()\nc=zlib.compressobj(zdict=d)\n\
             for i in range({1}):\n  o=c.compress(open('{0}/b%d'%i,'rb').read())+c.flush(zlib.Z_SYNC_FLUSH)\n  open('{0}/c%d'%i,'wb').write(o)\n",
            dir.display(),
            blocks.len()
        );
        let mut p = std::process::Command::new("python3")
            .stdin(std::process::Stdio::piped())
            .spawn()
            .ok()?;
        p.stdin.take()?.write_all(script.as_bytes()).ok()?;
        if !p.wait().ok()?.success() {
            return None;
        }
        let out = (0..blocks.len())
            .map(|i| std::fs::read(dir.join(format!("c{i}"))).ok())
            .collect();
        let _ = std::fs::remove_dir_all(&dir);
        out
    }

    /// A client that does not read holds back a fast writer at the budget, and the
    /// writer goes on as soon as the client reads.
    #[tokio::test]
    async fn output_waits_for_a_slow_client() {
        let (ours, mut theirs) = tokio::io::duplex(64 * 1024);
        let mut session = Session::server(ours);
        // The client opens stream 1 (headers deflated without a dictionary).
        let mut z = flate2::Compress::new(flate2::Compression::default(), true);
        let mut block = Vec::with_capacity(256);
        z.compress_vec(
            &encode_headers(&[("streamtype", "stdout")]),
            &mut block,
            flate2::FlushCompress::Sync,
        )
        .unwrap();
        let mut syn = 1u32.to_be_bytes().to_vec();
        syn.extend_from_slice(&[0, 0, 0, 0, 0, 0]);
        syn.extend_from_slice(&block);
        theirs
            .write_all(&control(SYN_STREAM, 0, &syn))
            .await
            .unwrap();
        let s = session.accept().await.unwrap();
        assert_eq!(s.header("streamtype"), Some("stdout"));
        let w = s.writer();
        let sent = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let total = 20 << 20;
        let counter = sent.clone();
        let writer = tokio::spawn(async move {
            let chunk = vec![b'x'; 32 << 10];
            while counter.load(std::sync::atomic::Ordering::Relaxed) < total {
                w.write(&chunk).await.unwrap();
                counter.fetch_add(chunk.len(), std::sync::atomic::Ordering::Relaxed);
            }
        });
        tokio::time::sleep(std::time::Duration::from_millis(300)).await;
        let held = sent.load(std::sync::atomic::Ordering::Relaxed);
        // The budget (4 MiB) and what the pipe holds; far from the 20 MiB written.
        assert!(
            held <= 8 << 20,
            "{held} bytes went ahead of a client that reads nothing"
        );
        // Reading lets it finish.
        let mut buf = vec![0u8; 1 << 20];
        let mut got = 0usize;
        while got < total {
            got += theirs.read(&mut buf).await.unwrap();
        }
        writer.await.unwrap();
    }

    /// A session we end is closed the way proxies in between need: what the peer still
    /// sends is read, not answered with a reset, and our end of file waits until the
    /// peer has closed its side (a client closes once it has the exit status); else a
    /// proxy that closes with the peer's last bytes unread resets its other side, and
    /// the client lost the end of an exec's output and its exit code.
    #[tokio::test]
    async fn ending_closes_without_a_reset() {
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let mut client = tokio::net::TcpStream::connect(l.local_addr().unwrap())
            .await
            .unwrap();
        let (sock, _) = l.accept().await.unwrap();
        drop(Session::server(sock));
        // The client goes on writing (its input crossed our end: a DATA frame of a
        // stream, as a client sends), and is not reset.
        let mut late = 1u32.to_be_bytes().to_vec();
        late.extend_from_slice(&[0, 0, 0, 4]);
        late.extend_from_slice(b"late");
        for _ in 0..5 {
            client.write_all(&late).await.unwrap();
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
        let mut buf = [0u8; 64];
        let early =
            tokio::time::timeout(std::time::Duration::from_millis(300), client.read(&mut buf))
                .await;
        assert!(
            early.is_err(),
            "our side ended before the client's: {early:?}"
        );
        client.shutdown().await.unwrap();
        let n = tokio::time::timeout(std::time::Duration::from_secs(4), client.read(&mut buf))
            .await
            .expect("end of file once the client closed")
            .unwrap();
        assert_eq!(n, 0);
    }

    #[test]
    fn header_blocks_round_trip() {
        let raw = encode_headers(&[("StreamType", "stdin"), ("port", "80")]);
        let h = parse_headers(&raw).unwrap();
        assert_eq!(h[0], ("streamtype".into(), "stdin".into()));
        assert_eq!(h[1], ("port".into(), "80".into()));
        assert!(parse_headers(&raw[..raw.len() - 1]).is_err());
    }
}
