//! An exec'd process's stdio on crustd's side: its output read from a pipe or a pty
//! master, its input written to one, both through epoll (tokio's `AsyncFd`).
//!
//! Output ends at its end of file (EIO from a pty master once the last holder of the
//! terminal is gone), or, once the process has exited, when nothing more is buffered and
//! nothing has come for [`DRAIN_IDLE`]: a background child that inherited the pipe or
//! the terminal must not hold the call open. What the process wrote before it exited is
//! read whatever the machine's load: the reader is told of the exit and then reads what
//! is buffered before any clock counts. (A fixed wait for the readers, as before, lost
//! a tty exec's last line on a loaded CI machine when the reader's wake-up came late.)

use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::time::Duration;
use tokio::io::unix::AsyncFd;
use tokio::io::Interest;
use tokio::sync::watch;
use tokio::time::Instant;

/// How long output is still awaited after the process exited while none comes.
const DRAIN_IDLE: Duration = Duration::from_millis(500);

/// The most output is read after the process exited, however much a background child
/// goes on writing.
const DRAIN_MAX: Duration = Duration::from_secs(5);

/// Tells the readers of one process's output that it has exited. Dropped unsent (an
/// error on the way), it tells them too.
pub(crate) struct Exited(watch::Sender<bool>);

impl Exited {
    pub fn new() -> (Exited, watch::Receiver<bool>) {
        let (tx, rx) = watch::channel(false);
        (Exited(tx), rx)
    }

    pub fn send(self) {
        let _ = self.0.send(true);
    }
}

/// Sets or clears O_NONBLOCK on an fd's open file (shared with its dups).
pub(crate) fn set_nonblocking(fd: impl AsFd, on: bool) {
    use nix::fcntl::{fcntl, FcntlArg, OFlag};
    let Ok(flags) = fcntl(&fd, FcntlArg::F_GETFL) else {
        return;
    };
    let mut flags = OFlag::from_bits_truncate(flags);
    flags.set(OFlag::O_NONBLOCK, on);
    let _ = fcntl(&fd, FcntlArg::F_SETFL(flags));
}

/// One process's output stream, read as it comes.
pub(crate) struct OutputReader {
    afd: AsyncFd<OwnedFd>,
    exited: watch::Receiver<bool>,
    /// Once the process has exited: until when idleness is waited out, and the end.
    ends: Option<(Instant, Instant)>,
}

enum Woken {
    Readable,
    Exited,
    Idle,
    Broken,
}

impl OutputReader {
    pub fn new(fd: OwnedFd, exited: watch::Receiver<bool>) -> io::Result<OutputReader> {
        set_nonblocking(&fd, true);
        // SAFETY: an OwnedFd: it stays open, the same fd, for the AsyncFd's life.
        let afd = unsafe { AsyncFd::register_with_interest(fd, Interest::READABLE)? };
        Ok(OutputReader {
            afd,
            exited,
            ends: None,
        })
    }

    /// The next chunk's length in `buf`; None at the output's end.
    pub async fn read(&mut self, buf: &mut [u8]) -> Option<usize> {
        loop {
            if let Some((_, end)) = self.ends {
                if Instant::now() >= end {
                    return None;
                }
            }
            match nix::unistd::read(self.afd.get_ref(), buf) {
                Ok(0) => return None,
                Ok(n) => {
                    if let Some((idle, _)) = &mut self.ends {
                        *idle = Instant::now() + DRAIN_IDLE;
                    }
                    return Some(n);
                }
                Err(nix::errno::Errno::EAGAIN) => {}
                Err(nix::errno::Errno::EINTR) => continue,
                // EIO: a pty master whose terminal has no holder left.
                Err(_) => return None,
            }
            // Nothing buffered: wait for more, for the exit, or out the idle time. The
            // readiness is cleared before the next read, so data that comes in between
            // wakes the following wait.
            let woken = match self.ends {
                None => tokio::select! {
                    g = self.afd.readable() => g.map(|mut g| g.clear_ready()).map_or(Woken::Broken, |_| Woken::Readable),
                    _ = self.exited.wait_for(|x| *x) => Woken::Exited,
                },
                Some((idle, _)) => tokio::select! {
                    g = self.afd.readable() => g.map(|mut g| g.clear_ready()).map_or(Woken::Broken, |_| Woken::Readable),
                    _ = tokio::time::sleep_until(idle) => Woken::Idle,
                },
            };
            match woken {
                Woken::Readable => {}
                Woken::Exited => {
                    let now = Instant::now();
                    self.ends = Some((now + DRAIN_IDLE, now + DRAIN_MAX));
                }
                Woken::Idle | Woken::Broken => return None,
            }
        }
    }
}

/// All of a process's output on `fd`, up to `max` bytes kept (the rest read and dropped).
pub(crate) async fn read_all(fd: OwnedFd, exited: watch::Receiver<bool>, max: usize) -> Vec<u8> {
    let Ok(mut r) = OutputReader::new(fd, exited) else {
        return vec![];
    };
    let mut out = Vec::new();
    let mut buf = vec![0u8; 64 << 10];
    while let Some(n) = r.read(&mut buf).await {
        let room = max.saturating_sub(out.len());
        out.extend_from_slice(&buf[..n.min(room)]);
    }
    out
}

/// Copies a process's output on `fd` to a client's stream until its end. A client that
/// goes away stops the copy, not the process.
pub(crate) async fn pump_out(
    fd: OwnedFd,
    exited: watch::Receiver<bool>,
    to: Option<streaming::remotecommand::Output>,
) {
    let Ok(mut r) = OutputReader::new(fd, exited) else {
        return;
    };
    let mut buf = vec![0u8; 32 << 10];
    while let Some(n) = r.read(&mut buf).await {
        if let Some(w) = &to {
            if w.write(&buf[..n]).await.is_err() {
                return;
            }
        }
    }
}

/// Copies the client's stdin stream into the process (a pipe, or a pty master shared
/// with the output's reader) until the client ends it or the process cannot take more.
pub(crate) async fn pump_in(mut from: streaming::remotecommand::Input, fd: OwnedFd) {
    set_nonblocking(&fd, true);
    // SAFETY: an OwnedFd: it stays open, the same fd, for the AsyncFd's life.
    let Ok(afd) = (unsafe { AsyncFd::register_with_interest(fd, Interest::WRITABLE) }) else {
        return;
    };
    while let Some(b) = from.read().await {
        let mut rest = &b[..];
        while !rest.is_empty() {
            let Ok(mut g) = afd.writable().await else {
                return;
            };
            match g.try_io(|f| nix::unistd::write(f.get_ref(), rest).map_err(io::Error::from)) {
                Ok(Ok(n)) => rest = &rest[n..],
                Ok(Err(_)) => return,
                Err(_would_block) => {}
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    fn pipe() -> (OwnedFd, std::fs::File) {
        let (r, w) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).unwrap();
        (r, std::fs::File::from(w))
    }

    #[tokio::test]
    async fn reads_to_end_of_file() {
        let (r, mut w) = pipe();
        let (_exited, rx) = Exited::new();
        let t = tokio::spawn(read_all(r, rx, 1 << 20));
        w.write_all(b"one ").unwrap();
        tokio::time::sleep(Duration::from_millis(50)).await;
        w.write_all(b"two").unwrap();
        drop(w);
        assert_eq!(t.await.unwrap(), b"one two");
    }

    /// A background child keeps the pipe open: what was written before the exit is read,
    /// even by a reader that comes late (a loaded machine), and the read ends once nothing
    /// more comes.
    #[tokio::test]
    async fn after_the_exit_reads_what_is_buffered_then_stops() {
        let (r, mut w) = pipe();
        let (exited, rx) = Exited::new();
        w.write_all(b"last words").unwrap();
        exited.send();
        tokio::time::sleep(DRAIN_IDLE * 2).await;
        let start = std::time::Instant::now();
        let out = read_all(r, rx, 1 << 20).await;
        assert_eq!(out, b"last words");
        let took = start.elapsed();
        assert!(took >= DRAIN_IDLE && took < DRAIN_MAX, "{took:?}");
        drop(w);
    }

    /// A background child that writes on and on: cut at DRAIN_MAX.
    #[tokio::test]
    async fn a_writer_that_goes_on_is_cut() {
        let (r, w) = pipe();
        let (exited, rx) = Exited::new();
        let writer = std::thread::spawn(move || {
            let mut w = w;
            let start = std::time::Instant::now();
            while start.elapsed() < DRAIN_MAX + Duration::from_secs(3) {
                if w.write_all(b"x").is_err() {
                    return;
                }
                std::thread::sleep(Duration::from_millis(50));
            }
        });
        exited.send();
        let start = std::time::Instant::now();
        let out = read_all(r, rx, 1 << 20).await;
        let took = start.elapsed();
        assert!(!out.is_empty());
        // Cut at DRAIN_MAX (sooner if the writer stalled past DRAIN_IDLE on a loaded
        // machine): what matters is that it ends.
        assert!(took < DRAIN_MAX + Duration::from_secs(2), "{took:?}");
        writer.join().unwrap();
    }

    /// A pty master reads what the terminal's last holder wrote, then ends (EIO).
    #[tokio::test]
    async fn pty_output_then_hangup() {
        let pty = nix::pty::openpty(None, None).unwrap();
        let (exited, rx) = Exited::new();
        let mut slave = std::fs::File::from(pty.slave);
        let t = tokio::spawn(read_all(pty.master, rx, 1 << 20));
        slave.write_all(b"got=typed\n").unwrap();
        drop(slave);
        exited.send();
        let out = t.await.unwrap();
        assert_eq!(String::from_utf8_lossy(&out), "got=typed\r\n");
    }

    /// Input goes through in order, also when it is more than a pipe holds at once.
    #[tokio::test]
    async fn input_is_written_whole() {
        let (r, w) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).unwrap();
        let (tx, rx) = tokio::sync::mpsc::channel(4);
        let input = streaming::remotecommand::Input::Ws(rx);
        let big = vec![7u8; 256 << 10];
        let pump = tokio::spawn(pump_in(input, w));
        tx.send(bytes::Bytes::from(big.clone())).await.unwrap();
        tx.send(bytes::Bytes::from_static(b"end")).await.unwrap();
        drop(tx);
        let got = tokio::task::spawn_blocking(move || {
            let mut v = Vec::new();
            std::io::Read::read_to_end(&mut std::fs::File::from(r), &mut v).unwrap();
            v
        });
        pump.await.unwrap();
        let got = got.await.unwrap();
        assert_eq!(got.len(), big.len() + 3);
        assert!(got.ends_with(b"end"));
    }
}
