//! Kubernetes' exec and attach protocol over SPDY (`remotecommand`): which streams the
//! client opens, and how the result comes back.
//!
//! The client asks for stdin, stdout, stderr and a tty in the query string and opens one
//! SPDY stream per channel, each named by its `streamtype` header: `error` always,
//! `stdin`/`stdout`/`stderr` as asked (no `stderr` with a tty: it is merged), and with
//! v3+ and a tty `resize` (JSON `{"Width":W,"Height":H}` objects, one per change). The
//! server accepts each; when the command ends it closes stdout and stderr and writes the
//! outcome on `error`: in v4 a `metav1.Status` (Success, or Failure with reason
//! NonZeroExitCode and the code as cause), before v4 a plain message and nothing on
//! success.

use crate::spdy::{Session, Stream, Writer};
use crate::ws;
use bytes::Bytes;
use std::io;
use std::time::Duration;

/// A channel the client writes (stdin, resize), over either transport.
pub enum Input {
    Spdy(Stream),
    Ws(tokio::sync::mpsc::Receiver<Bytes>),
}

impl Input {
    /// The next chunk; None at its end (or the connection's).
    pub async fn read(&mut self) -> Option<Bytes> {
        match self {
            Input::Spdy(s) => s.read().await,
            Input::Ws(r) => r.recv().await,
        }
    }
}

/// A channel the server writes (stdout, stderr, error), over either transport.
#[derive(Clone)]
pub enum Output {
    Spdy(Writer),
    Ws(ws::ChannelWriter),
}

impl Output {
    /// Sends `data`, waiting while the connection has its budget queued.
    pub async fn write(&self, data: &[u8]) -> io::Result<()> {
        match self {
            Output::Spdy(w) => w.write(data).await,
            Output::Ws(w) => w.write(data).await,
        }
    }

    /// A short message at once (a status, an error).
    pub fn write_now(&self, data: &[u8]) -> io::Result<()> {
        match self {
            Output::Spdy(w) => w.write_now(data),
            Output::Ws(w) => w.write_now(data),
        }
    }

    pub fn close(&self) -> io::Result<()> {
        match self {
            Output::Spdy(w) => w.close(),
            Output::Ws(w) => w.close(),
        }
    }
}

enum Conn {
    Spdy(Session),
    Ws(ws::Conn),
}

/// Protocol versions we speak, preferred first (the `X-Stream-Protocol-Version` values).
pub const PROTOCOLS: &[&str] = &[
    "v4.channel.k8s.io",
    "v3.channel.k8s.io",
    "v2.channel.k8s.io",
    "channel.k8s.io",
];

/// What the client asked for.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Options {
    pub stdin: bool,
    pub stdout: bool,
    pub stderr: bool,
    pub tty: bool,
}

impl Options {
    /// From the request's query string (`stdin=1&stdout=true&tty=0...`). The CRI request
    /// already fixed these for exec and attach; the query must agree, as the kubelet's
    /// server checks too.
    pub fn from_query(q: &str) -> Options {
        let mut o = Options::default();
        for (k, v) in q.split('&').filter_map(|kv| kv.split_once('=')) {
            let on = matches!(v, "1" | "true" | "True" | "TRUE");
            match k {
                "stdin" | "input" => o.stdin = on,
                "stdout" | "output" => o.stdout = on,
                "stderr" | "error" => o.stderr = on,
                "tty" => o.tty = on,
                _ => {}
            }
        }
        o
    }
}

/// The channels of one exec or attach, as the client opened them.
pub struct Streams {
    pub protocol: &'static str,
    pub stdin: Option<Input>,
    pub stdout: Option<Output>,
    pub stderr: Option<Output>,
    pub resize: Option<Input>,
    error: Output,
    // Kept so the connection lives as long as the streams are in use.
    conn: Conn,
}

/// A terminal size change.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Deserialize)]
pub struct Size {
    #[serde(rename = "Width")]
    pub width: u16,
    #[serde(rename = "Height")]
    pub height: u16,
}

impl Streams {
    /// Waits (up to `timeout`) for the streams `opts` calls for, accepting each.
    pub async fn accept(
        mut session: Session,
        protocol: &'static str,
        opts: Options,
        timeout: Duration,
    ) -> io::Result<Streams> {
        let v3 = matches!(protocol, "v4.channel.k8s.io" | "v3.channel.k8s.io");
        let want_stderr = opts.stderr && !opts.tty;
        let want_resize = opts.tty && v3;
        let (mut error, mut stdin, mut stdout, mut stderr, mut resize) =
            (None, None, None, None, None);
        let complete = |e: &Option<Writer>,
                        i: &Option<Stream>,
                        o: &Option<Writer>,
                        r: &Option<Writer>,
                        z: &Option<Stream>| {
            e.is_some()
                && (i.is_some() || !opts.stdin)
                && (o.is_some() || !opts.stdout)
                && (r.is_some() || !want_stderr)
                && (z.is_some() || !want_resize)
        };
        let deadline = tokio::time::Instant::now() + timeout;
        while !complete(&error, &stdin, &stdout, &stderr, &resize) {
            let s = tokio::time::timeout_at(deadline, session.accept())
                .await
                .map_err(|_| {
                    io::Error::new(
                        io::ErrorKind::TimedOut,
                        "timed out waiting for the client to open its streams",
                    )
                })?
                .ok_or_else(|| {
                    io::Error::new(
                        io::ErrorKind::UnexpectedEof,
                        "the client left before opening its streams",
                    )
                })?;
            s.reply()?;
            match s.header("streamtype").unwrap_or("") {
                "error" => error = Some(s.writer()),
                "stdin" => stdin = Some(s),
                "stdout" => stdout = Some(s.writer()),
                "stderr" => stderr = Some(s.writer()),
                "resize" => resize = Some(s),
                _ => {}
            }
            // The write-only streams are kept open through their writer; the stream
            // object itself (its inbox) is not needed.
        }
        Ok(Streams {
            protocol,
            stdin: stdin.map(Input::Spdy),
            stdout: stdout.map(Output::Spdy),
            stderr: stderr.map(Output::Spdy),
            resize: resize.map(Input::Spdy),
            error: Output::Spdy(error.expect("complete")),
            conn: Conn::Spdy(session),
        })
    }

    /// The channels of a WebSocket connection (`protocol` one of [`ws::PROTOCOLS`]):
    /// they exist from the start, as `opts` says.
    pub fn websocket<IO>(io: IO, protocol: &'static str, opts: Options) -> Streams
    where
        IO: tokio::io::AsyncRead + tokio::io::AsyncWrite + Send + 'static,
    {
        let mut c = ws::Conn::server(io, protocol);
        let stdin = if opts.stdin { c.take_input(0) } else { None };
        let resize = if opts.tty { c.take_input(4) } else { None };
        Streams {
            protocol,
            stdin: stdin.map(Input::Ws),
            stdout: opts.stdout.then(|| Output::Ws(c.writer(1))),
            stderr: (opts.stderr && !opts.tty).then(|| Output::Ws(c.writer(2))),
            resize: resize.map(Input::Ws),
            error: Output::Ws(c.writer(3)),
            conn: Conn::Ws(c),
        }
    }

    /// Resolves when the client's side of the connection has ended.
    pub async fn closed(&self) {
        match &self.conn {
            Conn::Spdy(s) => s.closed().await,
            Conn::Ws(c) => c.closed().await,
        }
    }

    /// Reports how the command ended and closes every stream: `Ok(code)` for an exit
    /// code, `Err(message)` when it could not run.
    pub fn finish(self, outcome: Result<i32, String>) {
        for w in [&self.stdout, &self.stderr].into_iter().flatten() {
            let _ = w.close();
        }
        let v4 = matches!(self.protocol, "v4.channel.k8s.io" | "v5.channel.k8s.io");
        let msg = match (&outcome, v4) {
            (Ok(0), true) => Some(r#"{"metadata":{},"status":"Success"}"#.to_string()),
            (Ok(0), false) => None,
            (Ok(code), true) => Some(
                serde_json::json!({
                    "metadata": {},
                    "status": "Failure",
                    "message": format!("command terminated with non-zero exit code: exit status {code}"),
                    "reason": "NonZeroExitCode",
                    "details": {"causes": [{"reason": "ExitCode", "message": code.to_string()}]},
                })
                .to_string(),
            ),
            (Ok(code), false) => Some(format!(
                "command terminated with non-zero exit code: exit status {code}"
            )),
            (Err(m), true) => Some(
                serde_json::json!({"metadata": {}, "status": "Failure", "message": m}).to_string(),
            ),
            (Err(m), false) => Some(m.clone()),
        };
        if let Some(m) = msg {
            let _ = self.error.write_now(m.as_bytes());
        }
        let _ = self.error.close();
        match &self.conn {
            Conn::Spdy(s) => s.goaway(),
            Conn::Ws(c) => c.close(),
        }
    }
}

/// Reads the resize stream: each terminal size the client reports.
pub async fn next_size(resize: &mut Input, buf: &mut Vec<u8>) -> Option<Size> {
    loop {
        // A complete JSON object at the front of the buffer?
        let mut it = serde_json::Deserializer::from_slice(buf).into_iter::<Size>();
        match it.next() {
            Some(Ok(size)) => {
                let used = it.byte_offset();
                buf.drain(..used);
                return Some(size);
            }
            Some(Err(e)) if e.is_eof() => {}
            Some(Err(_)) => {
                buf.clear();
            }
            None => {}
        }
        buf.extend_from_slice(&resize.read().await?);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn options_from_the_query() {
        let o = Options::from_query("command=sh&stdin=1&stdout=true&stderr=0&tty=true");
        assert_eq!(
            o,
            Options {
                stdin: true,
                stdout: true,
                stderr: false,
                tty: true
            }
        );
        assert_eq!(Options::from_query(""), Options::default());
    }
}
