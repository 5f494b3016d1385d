//! Attach's stream: the client's stdin, stdout and stderr joined to a running
//! container's through its monitor's attach socket (container::monitor), which sends
//! each piece of output tagged with its stream and takes input for the container's
//! stdin. The attach ends when the container's output ends (it exited) or the client
//! leaves; the container is not affected either way.

use crate::daemon::Crust;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::fs::OpenOptionsExt;
use std::sync::Arc;
use streaming::remotecommand::Streams;
use tokio::io::unix::AsyncFd;
use tokio::io::Interest;

pub async fn attach_stream(crust: Arc<Crust>, req: cri_api::AttachRequest, mut streams: Streams) {
    let res = attach(&crust, &req, &mut streams).await;
    if let Err(e) = &res {
        tracing::debug!(container = %req.container_id, "attach failed: {e}");
    }
    streams.finish(res.map(|()| 0));
}

async fn attach(
    crust: &Crust,
    req: &cri_api::AttachRequest,
    streams: &mut Streams,
) -> Result<(), String> {
    let c = crust
        .containers
        .get(&req.container_id)
        .map_err(|e| e.to_string())?;
    // The monitor's attach socket is in crust's state dir of the container, or in the
    // bundle when an OCI runtime runs it (the runtime owns the state dir then).
    let (runtime, pid) = {
        let rec = c.rec.lock().await;
        (rec.runtime.clone(), rec.pid)
    };
    let dir = if !runtime.is_empty() && crust.oci_runtimes.contains_key(&runtime) {
        crust.containers.bundle(&c.id)
    } else {
        crust.containers.exec_state(&c.id)
    };
    let sock = container::monitor::connect_attach(&dir)
        .map_err(|e| format!("attaching to {}: {e}", c.id))?;
    set_nonblocking(&sock);
    // SAFETY: an OwnedFd: it stays open, the same fd, for the AsyncFd's life.
    let sock = Arc::new(
        unsafe { AsyncFd::register_with_interest(sock, Interest::READABLE | Interest::WRITABLE) }
            .map_err(|e| e.to_string())?,
    );
    // A tty attach's sizes go to the container's terminal. The monitor holds the pty's
    // master, but the size can be set on the slave just as well: the init's stdin,
    // reopened through /proc. The client sends its size first thing; it is applied
    // (waited for briefly) before any input is passed on, so what the input sets off
    // in the container already sees the client's size.
    if let Some(mut r) = streams.resize.take() {
        let tty = req.tty.then(|| init_tty(pid)).flatten();
        let mut buf = Vec::new();
        if let Some(t) = &tty {
            if let Some(sz) = crate::containers::exec::first_size(Some(&mut r), &mut buf).await {
                crate::containers::exec::set_size(t, sz);
            }
        }
        tokio::spawn(async move {
            while let Some(sz) = streaming::remotecommand::next_size(&mut r, &mut buf).await {
                if let Some(t) = &tty {
                    crate::containers::exec::set_size(t, sz);
                }
            }
        });
    }
    if let Some(mut input) = streams.stdin.take() {
        let s = sock.clone();
        tokio::spawn(async move {
            while let Some(b) = input.read().await {
                for chunk in b.chunks(16 << 10) {
                    if send(&s, chunk).await.is_err() {
                        return;
                    }
                }
            }
            // The client's input ended: so does ours (stdin_once closes the container's).
            // SAFETY: shutdown on a socket we hold.
            unsafe { libc::shutdown(s.get_ref().as_raw_fd(), libc::SHUT_WR) };
        });
    }
    let mut buf = vec![0u8; 64 << 10];
    loop {
        let n = tokio::select! {
            n = recv(&sock, &mut buf) => n,
            _ = streams.closed() => return Ok(()),
        };
        let n = match n {
            Ok(0) | Err(_) => return Ok(()),
            Ok(n) => n,
        };
        let to = match buf[0] {
            container::monitor::ATTACH_STDERR if !req.tty => streams.stderr.as_ref(),
            _ => streams.stdout.as_ref(),
        };
        if let Some(w) = to {
            if w.write(&buf[1..n]).await.is_err() {
                return Ok(());
            }
        }
    }
}

/// The container's terminal: its init's stdin, when it is one (whoever made the pty,
/// crust's executor or an OCI runtime).
fn init_tty(pid: i32) -> Option<OwnedFd> {
    if pid <= 0 {
        return None;
    }
    let f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .custom_flags(libc::O_NOCTTY | libc::O_CLOEXEC)
        .open(format!("/proc/{pid}/fd/0"))
        .ok()?;
    // SAFETY: isatty on a descriptor we hold.
    (unsafe { libc::isatty(f.as_raw_fd()) } == 1).then(|| f.into())
}

fn set_nonblocking(fd: &OwnedFd) {
    // SAFETY: fcntl flag change on a descriptor we own.
    unsafe {
        let fl = libc::fcntl(fd.as_raw_fd(), libc::F_GETFL);
        libc::fcntl(fd.as_raw_fd(), libc::F_SETFL, fl | libc::O_NONBLOCK);
    }
}

async fn recv(sock: &AsyncFd<OwnedFd>, buf: &mut [u8]) -> std::io::Result<usize> {
    loop {
        let mut g = sock.readable().await?;
        match g.try_io(|s| {
            // SAFETY: recv into a buffer valid for its length.
            let n = unsafe { libc::recv(s.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len(), 0) };
            if n < 0 {
                Err(std::io::Error::last_os_error())
            } else {
                Ok(n as usize)
            }
        }) {
            Ok(r) => return r,
            Err(_would_block) => continue,
        }
    }
}

async fn send(sock: &AsyncFd<OwnedFd>, data: &[u8]) -> std::io::Result<()> {
    loop {
        let mut g = sock.writable().await?;
        match g.try_io(|s| {
            // SAFETY: send from a buffer valid for its length.
            let n = unsafe {
                libc::send(
                    s.as_raw_fd(),
                    data.as_ptr().cast(),
                    data.len(),
                    libc::MSG_NOSIGNAL,
                )
            };
            if n < 0 {
                Err(std::io::Error::last_os_error())
            } else {
                Ok(())
            }
        }) {
            Ok(r) => return r,
            Err(_would_block) => continue,
        }
    }
}
