//! The queue of frames to a connection, shared by the SPDY and WebSocket sessions: one
//! task writes them in order; data waits while `BUDGET` KiB are already queued ahead of
//! the socket, so a fast producer and a slow client cost a bounded amount of memory.
//! The task ends when every sender is gone, the connection breaks, or the session's
//! reader ended (the peer left or idled out): what is queued goes out first, then the
//! connection is shut, and writers still waiting for budget fail.

use std::io;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::sync::{mpsc, watch, Semaphore};

/// KiB of data queued ahead of the socket, at most, per connection.
pub(crate) const BUDGET: usize = 4096;

pub(crate) struct OutQueue {
    tx: mpsc::UnboundedSender<(Vec<u8>, u32)>,
    budget: Arc<Semaphore>,
}

fn closed() -> io::Error {
    io::Error::new(io::ErrorKind::BrokenPipe, "streaming connection closed")
}

impl OutQueue {
    /// Starts the writer on `wr`; `reader_done` turns true when the reader has ended,
    /// `peer_gone` when the peer has closed its side (or [`LINGER`] passed waiting for
    /// it): only then is our side shut.
    pub(crate) fn start<W>(
        mut wr: W,
        mut reader_done: watch::Receiver<bool>,
        mut peer_gone: watch::Receiver<bool>,
    ) -> OutQueue
    where
        W: AsyncWrite + Unpin + Send + 'static,
    {
        let (tx, mut rx) = mpsc::unbounded_channel::<(Vec<u8>, u32)>();
        let budget = Arc::new(Semaphore::new(BUDGET));
        let b = budget.clone();
        tokio::spawn(async move {
            loop {
                let ended = async {
                    let _ = reader_done.wait_for(|d| *d).await;
                };
                let next = tokio::select! {
                    f = rx.recv() => f,
                    _ = ended => {
                        while let Ok((f, _)) = rx.try_recv() {
                            if wr.write_all(&f).await.is_err() {
                                break;
                            }
                        }
                        None
                    }
                };
                let Some((f, kib)) = next else {
                    break;
                };
                if wr.write_all(&f).await.is_err() {
                    break;
                }
                b.add_permits(kib as usize);
                // Coalesce what is queued, then push it out.
                let mut broken = false;
                while let Ok((f, kib)) = rx.try_recv() {
                    if wr.write_all(&f).await.is_err() {
                        broken = true;
                        break;
                    }
                    b.add_permits(kib as usize);
                }
                if broken || wr.flush().await.is_err() {
                    break;
                }
            }
            b.close();
            // Our last frames are out; the peer closes first. Ending our side at once
            // raced what the peer still sent (flow-control updates, a last keystroke):
            // a proxy between us (the kubelet's, then the apiserver's) that closes
            // with such bytes unread resets its other connection, and the side
            // receiving the reset drops what it had not yet read: the end of the
            // output and the exit status. A client closes once it has the status.
            let _ = wr.flush().await;
            let _ = tokio::time::timeout(LINGER, peer_gone.wait_for(|g| *g)).await;
            let _ = wr.shutdown().await;
        });
        OutQueue { tx, budget }
    }

    /// Queues a frame at once, outside the budget (control frames, short messages).
    pub(crate) fn send(&self, frame: Vec<u8>) -> io::Result<()> {
        self.tx.send((frame, 0)).map_err(|_| closed())
    }

    /// Queues a frame carrying `payload` bytes of data, once the budget has room.
    pub(crate) async fn send_data(&self, frame: Vec<u8>, payload: usize) -> io::Result<()> {
        let kib = payload.div_ceil(1024) as u32;
        self.budget
            .acquire_many(kib)
            .await
            .map_err(|_| closed())?
            .forget();
        self.tx.send((frame, kib)).map_err(|_| closed())
    }
}

/// How long a connection we have finished with is read, at most, for the peer to close.
const LINGER: Duration = Duration::from_secs(5);

/// Reads and drops what the peer still sends on a connection we have finished with,
/// until it closes its side (or [`LINGER`] passes), while the writer sends what is
/// queued and then its end of file. Closing a socket with bytes unread makes the kernel
/// send a reset instead; a proxy in between (the kubelet's or the apiserver's, which
/// tears down both sides when either direction fails) could see the reset before it
/// has passed on our last frames, and the client would lose the end of the output and
/// the exit status: a `kubectl exec -it` whose input crossed the command's exit ended
/// with neither, and exit code 0.
pub(crate) async fn linger<R: AsyncRead + Unpin>(rd: &mut R) {
    let mut buf = vec![0u8; 4096];
    let _ = tokio::time::timeout(LINGER, async {
        while let Ok(1..) = rd.read(&mut buf).await {}
    })
    .await;
}
