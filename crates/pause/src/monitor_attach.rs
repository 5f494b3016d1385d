//! Attach clients on the `-A` socket: every chunk of output sent to each as it is read,
//! their input passed to the container's stdin (see the monitor's doc, Attach).

use crate::monitor_core::{Args, StdinMode};
use crate::monitor_output::{nonblocking, Stream};
use crate::sys::{
    close, syscall, write_all, EAGAIN, EINTR, MSG_DONTWAIT, MSG_NOSIGNAL, O_CLOEXEC, O_NONBLOCK,
    POLLERR, POLLHUP, POLLIN, POLLNVAL, SYS_ACCEPT4, SYS_RECVFROM, SYS_SENDMSG, SYS_WRITE,
};
use crate::{IoVec, MsgHdr, PollFd};

/// Attach clients at once; more are turned away.
pub(crate) const MAX_CLIENTS: usize = 4;
/// Input from attach clients on its way to the container's stdin.
pub(crate) const INPUT_BUF: usize = 4096;
/// The first byte of each message to an attach client: which stream the rest is from.
pub(crate) const ATTACH_STDOUT: u8 = 1;
pub(crate) const ATTACH_STDERR: u8 = 2;

/// Attach clients: they get every chunk of output as it is read (a `SOCK_SEQPACKET`
/// message: the stream's tag byte, then the bytes) and may send input for the
/// container's stdin. A client that cannot take a message at once is dropped: the
/// container never waits for an attached terminal, as it never waits for the log.
pub(crate) struct Attach {
    /// The listening socket, or -1.
    pub(crate) listen: i32,
    /// Client fds (-1: a free slot) and whether each still sends input.
    clients: [(i32, bool); MAX_CLIENTS],
    mode: StdinMode,
    /// The stdin pipe's write end (`-i`), or -1; a tty container's input goes to its
    /// pty master instead.
    stdin: i32,
    tty: bool,
    /// Input read from a client and not yet taken by the container: `input[start..end]`.
    input: &'static mut [u8; INPUT_BUF],
    pub(crate) start: usize,
    pub(crate) end: usize,
}

impl Attach {
    /// No client yet; the stdin pipe made non-blocking, so that input the container
    /// does not take never stalls the monitor.
    pub(crate) fn new(args: &Args<'static>, input: &'static mut [u8; INPUT_BUF]) -> Attach {
        Attach {
            listen: args.attach_fd.unwrap_or(-1),
            clients: [(-1, false); MAX_CLIENTS],
            mode: args.stdin,
            stdin: args.stdin_fd.map(nonblocking).unwrap_or(-1),
            tty: args.tty_fd.is_some() || args.tty_socket.is_some(),
            input,
            start: 0,
            end: 0,
        }
    }

    /// Where client input goes now: the pty master of a tty container, else the stdin
    /// pipe; -1 when it goes nowhere (no stdin, or closed by `stdin_once`).
    pub(crate) fn target(&self, tty: &Stream) -> i32 {
        match self.mode {
            StdinMode::None => -1,
            _ if self.tty => tty.fd,
            _ => self.stdin,
        }
    }

    /// Client `i`'s poll entry: its input is read only while none is pending.
    pub(crate) fn poll_fd(&self, i: usize, pending: bool) -> PollFd {
        let (fd, reading) = self.clients[i];
        PollFd {
            fd,
            events: if reading && !pending { POLLIN } else { 0 },
            revents: 0,
        }
    }

    pub(crate) fn accept(&mut self) {
        let fd = syscall(
            SYS_ACCEPT4,
            self.listen as usize,
            0,
            0,
            O_NONBLOCK | O_CLOEXEC,
        );
        if fd < 0 {
            return;
        }
        match self.clients.iter_mut().find(|c| c.0 < 0) {
            Some(slot) => *slot = (fd as i32, true),
            None => close(fd as usize),
        }
    }

    pub(crate) fn drop_client(&mut self, i: usize) {
        if self.clients[i].0 >= 0 {
            close(self.clients[i].0 as usize);
        }
        self.clients[i] = (-1, false);
    }

    /// One message to every client: `id` and the bytes.
    pub(crate) fn broadcast(&mut self, id: u8, data: &[u8]) {
        for i in 0..MAX_CLIENTS {
            let fd = self.clients[i].0;
            if fd < 0 {
                continue;
            }
            let tag = [id];
            let mut iov = [
                IoVec {
                    base: tag.as_ptr(),
                    len: 1,
                },
                IoVec {
                    base: data.as_ptr(),
                    len: data.len(),
                },
            ];
            let msg = MsgHdr {
                name: 0,
                namelen: 0,
                iov: iov.as_mut_ptr(),
                iovlen: 2,
                control: core::ptr::null_mut(),
                controllen: 0,
                flags: 0,
            };
            let sent = loop {
                let n = syscall(
                    SYS_SENDMSG,
                    fd as usize,
                    &msg as *const MsgHdr as usize,
                    MSG_DONTWAIT | MSG_NOSIGNAL,
                    0,
                );
                if n != -EINTR {
                    break n;
                }
            };
            if sent < 0 {
                // Gone, or too slow to take the output as it comes.
                self.drop_client(i);
            }
        }
    }

    /// Client `i` is readable (or hung up): its input, its end of input, or its end.
    pub(crate) fn receive(&mut self, i: usize, revents: i16, tty: &Stream) {
        let (fd, reading) = self.clients[i];
        if !reading || revents & (POLLERR | POLLNVAL) != 0 {
            // Only output goes to it now; a hang-up means it is gone.
            if revents & (POLLHUP | POLLERR | POLLNVAL) != 0 {
                self.drop_client(i);
            }
            return;
        }
        let n = loop {
            let n = syscall(
                SYS_RECVFROM,
                fd as usize,
                self.input.as_mut_ptr() as usize,
                INPUT_BUF,
                MSG_DONTWAIT,
            );
            if n != -EINTR {
                break n;
            }
        };
        if n == -EAGAIN {
            return;
        }
        if n > 0 {
            if self.target(tty) >= 0 {
                self.start = 0;
                self.end = n as usize;
                self.feed(tty);
            }
            return;
        }
        // End of this client's input (it shut its sending side down, or left).
        if n == 0 {
            self.clients[i].1 = false;
        } else {
            self.drop_client(i);
        }
        if self.mode == StdinMode::Once {
            self.close_stdin(tty);
        }
    }

    /// Writes pending input into the container's stdin, as much as it takes now.
    pub(crate) fn feed(&mut self, tty: &Stream) {
        let target = self.target(tty);
        while self.start < self.end {
            if target < 0 {
                self.start = self.end;
                return;
            }
            let n = syscall(
                SYS_WRITE,
                target as usize,
                self.input[self.start..].as_ptr() as usize,
                self.end - self.start,
                0,
            );
            if n == -EINTR {
                continue;
            }
            if n == -EAGAIN {
                return;
            }
            if n <= 0 {
                // The container closed its stdin: nothing more will go in.
                self.start = self.end;
                return;
            }
            self.start += n as usize;
        }
    }

    /// `stdin_once`: the first client is done, so is the container's stdin: the pipe
    /// is closed (EOF for the reader); a pty gets ^D, the terminal's end of input.
    pub(crate) fn close_stdin(&mut self, tty: &Stream) {
        self.feed(tty);
        if self.tty {
            if tty.fd >= 0 {
                write_all(tty.fd as usize, &[4]);
            }
        } else if self.stdin >= 0 {
            close(self.stdin as usize);
            self.stdin = -1;
        }
        self.mode = StdinMode::None;
    }
}
