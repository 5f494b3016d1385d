//! Closing a streaming connection nothing has crossed for a while, in either direction
//! (containerd's `stream_idle_timeout`, 4 hours by default): an exec whose client
//! vanished without a FIN, or a port forward left open, does not hold its process and
//! tasks forever. A wrapper around the connection: reads fail with `TimedOut` once it
//! has been idle that long, which ends the session like a hang-up.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::{Instant, Sleep};

pub struct Idle<IO> {
    io: IO,
    timeout: Duration,
    start: Instant,
    /// Milliseconds after `start` of the last byte read or written.
    last: Arc<AtomicU64>,
    timer: Pin<Box<Sleep>>,
}

impl<IO> Idle<IO> {
    /// `timeout` zero: never.
    pub fn new(io: IO, timeout: Duration) -> Idle<IO> {
        let start = Instant::now();
        let timeout = if timeout.is_zero() {
            Duration::from_secs(100 * 365 * 24 * 3600)
        } else {
            timeout
        };
        Idle {
            io,
            timeout,
            start,
            last: Arc::new(AtomicU64::new(0)),
            timer: Box::pin(tokio::time::sleep(timeout)),
        }
    }

    fn touch(&self) {
        self.last
            .store(self.start.elapsed().as_millis() as u64, Ordering::Relaxed);
    }
}

impl<IO: AsyncRead + Unpin> AsyncRead for Idle<IO> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        match Pin::new(&mut self.io).poll_read(cx, buf) {
            Poll::Ready(r) => {
                if buf.filled().len() > before {
                    self.touch();
                }
                return Poll::Ready(r);
            }
            Poll::Pending => {}
        }
        loop {
            if self.timer.as_mut().poll(cx).is_pending() {
                return Poll::Pending;
            }
            let deadline = self.start
                + Duration::from_millis(self.last.load(Ordering::Relaxed))
                + self.timeout;
            if Instant::now() >= deadline {
                return Poll::Ready(Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    "streaming connection idle too long",
                )));
            }
            self.timer.as_mut().reset(deadline);
        }
    }
}

impl<IO: AsyncWrite + Unpin> AsyncWrite for Idle<IO> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        data: &[u8],
    ) -> Poll<io::Result<usize>> {
        let r = Pin::new(&mut self.io).poll_write(cx, data);
        if let Poll::Ready(Ok(n)) = &r {
            if *n > 0 {
                self.touch();
            }
        }
        r
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    #[tokio::test(start_paused = true)]
    async fn reads_end_after_the_idle_time_and_traffic_defers_it() {
        let (a, mut b) = tokio::io::duplex(1024);
        let mut idle = Idle::new(a, Duration::from_millis(300));
        let t = Instant::now();
        // Traffic every 100 ms for 600 ms keeps it open.
        let writer = tokio::spawn(async move {
            for _ in 0..6 {
                tokio::time::sleep(Duration::from_millis(100)).await;
                b.write_all(b"x").await.unwrap();
            }
            b
        });
        let mut buf = [0u8; 16];
        for _ in 0..6 {
            assert_eq!(idle.read(&mut buf).await.unwrap(), 1);
        }
        let _b = writer.await.unwrap();
        // Then silence: the read fails after about 300 ms.
        let e = idle.read(&mut buf).await.unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::TimedOut);
        assert!(
            t.elapsed() >= Duration::from_millis(850),
            "{:?}",
            t.elapsed()
        );
    }
}
