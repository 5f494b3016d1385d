//! A client of a container monitor's attach socket (`container::monitor::connect_attach`):
//! messages are a stream tag byte (1 stdout, 2 stderr) and the bytes.

use std::os::fd::{AsRawFd, OwnedFd};
use std::time::{Duration, Instant};

/// Messages (tag, text) until `pred` holds for all received so far; panics after 10 s
/// or when the socket closes first, naming `what`.
pub fn recv_until(
    sock: &OwnedFd,
    what: &str,
    pred: impl Fn(&[(u8, String)]) -> bool,
) -> Vec<(u8, String)> {
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut got: Vec<(u8, String)> = vec![];
    while !pred(&got) {
        assert!(
            Instant::now() < deadline,
            "attach never got {what}: {got:?}"
        );
        let mut pfd = libc::pollfd {
            fd: sock.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: poll on one pollfd we own.
        if unsafe { libc::poll(&mut pfd, 1, 50) } <= 0 {
            continue;
        }
        let mut buf = [0u8; 65536];
        // SAFETY: recv into a buffer we own.
        let n = unsafe { libc::recv(sock.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len(), 0) };
        assert!(n > 0, "attach socket closed before {what}: {got:?}");
        let n = n as usize;
        got.push((buf[0], String::from_utf8_lossy(&buf[1..n]).into_owned()));
    }
    got
}

/// All the text of stream `tag` in `msgs`.
pub fn text(msgs: &[(u8, String)], tag: u8) -> String {
    msgs.iter()
        .filter(|m| m.0 == tag)
        .map(|m| m.1.as_str())
        .collect()
}

/// One message of input.
pub fn send(sock: &OwnedFd, data: &[u8]) {
    // SAFETY: send from a buffer we own on a socket we own.
    let n = unsafe { libc::send(sock.as_raw_fd(), data.as_ptr().cast(), data.len(), 0) };
    assert_eq!(
        n,
        data.len() as isize,
        "{}",
        std::io::Error::last_os_error()
    );
}

/// Ends this client's input (`stdin_once` then closes the container's stdin).
pub fn shut_input(sock: &OwnedFd) {
    assert_eq!(
        // SAFETY: shutdown of a socket we own, open for the borrow's length.
        unsafe { libc::shutdown(sock.as_raw_fd(), libc::SHUT_WR) },
        0
    );
}
