//! The container's output on its way to the CRI log: each stream (a pipe or a pty
//! master) read without blocking, every chunk handed to the attach clients, cut into
//! records (`monitor_core::next_record`) and written to the log file with one `writev`
//! each (see the monitor's doc for the format).

use crate::monitor_attach::{Attach, ATTACH_STDERR, ATTACH_STDOUT};
use crate::monitor_core::{header, next_record, Args, HEADER_MAX, MAX_LINE};
use crate::sys::{
    close, syscall, write_all, EAGAIN, EINTR, F_GETFL, F_SETFL, O_APPEND, O_CLOEXEC, O_CREAT,
    O_NOFOLLOW, O_NONBLOCK, O_WRONLY, POLLIN, SYS_FCNTL, SYS_OPEN, SYS_READ, SYS_WRITEV,
};
use crate::{now, IoVec, PollFd};
use core::ffi::CStr;

/// A stream's line buffer: one more byte than the longest record, so that a full buffer
/// without a newline is always a partial record to cut.
pub(crate) const LINE_BUF: usize = MAX_LINE + 1;

/// One of the container's output streams.
pub(crate) struct Stream {
    /// The fd, or -1 once closed (poll skips negative fds).
    pub(crate) fd: i32,
    name: &'static [u8],
    /// Its tag in messages to attach clients.
    id: u8,
    buf: &'static mut [u8; LINE_BUF],
    /// Bytes read but not yet written as a record: `buf[..len]`, at most MAX_LINE.
    len: usize,
}

/// The CRI log file (or none: output is dropped).
pub(crate) struct Log {
    pub(crate) path: Option<&'static CStr>,
    pub(crate) fd: i32,
}

impl Stream {
    /// The container's streams, each with its line buffer, as the arguments give them;
    /// the pty's stays closed (-1) until its master comes (`-t`, or by the tty socket).
    pub(crate) fn all(
        args: &Args<'static>,
        lines: &'static mut [[u8; LINE_BUF]; 3],
    ) -> [Stream; 3] {
        let [out_buf, err_buf, tty_buf] = lines;
        [
            Stream::new(args.stdout_fd, b"stdout", ATTACH_STDOUT, out_buf),
            Stream::new(args.stderr_fd, b"stderr", ATTACH_STDERR, err_buf),
            // A pty master: EIO once its slave is closed is its end, as for any error.
            Stream::new(args.tty_fd, b"stdout", ATTACH_STDOUT, tty_buf),
        ]
    }

    pub(crate) fn new(
        fd: Option<i32>,
        name: &'static [u8],
        id: u8,
        buf: &'static mut [u8; LINE_BUF],
    ) -> Stream {
        let mut s = Stream {
            fd: -1,
            name,
            id,
            buf,
            len: 0,
        };
        // Non-blocking, so that draining after the exit never waits.
        if let Some(fd) = fd.filter(|fd| set_nonblocking(*fd)) {
            s.fd = fd;
        }
        s
    }

    /// Takes `fd` as this stream's source (non-blocking, like those given at start).
    pub(crate) fn adopt(&mut self, fd: i32) {
        set_nonblocking(fd);
        self.fd = fd;
    }

    pub(crate) fn poll_fd(&self) -> PollFd {
        PollFd {
            fd: self.fd,
            events: POLLIN,
            revents: 0,
        }
    }

    /// Up to `reads` reads, until the pipe is empty; writes every record they complete
    /// and hands each chunk to the attach clients. At the end of the stream (or on an
    /// error) the rest is written (a `P` record: it has no newline) and the fd closed.
    pub(crate) fn pump(&mut self, log: &Log, reads: usize, attach: &mut Attach) {
        let mut done = 0;
        while self.fd >= 0 && done < reads {
            let room = &mut self.buf[self.len..];
            let n = syscall(
                SYS_READ,
                self.fd as usize,
                room.as_mut_ptr() as usize,
                room.len(),
                0,
            );
            if n == -EINTR {
                continue;
            }
            if n == -EAGAIN {
                return;
            }
            done += 1;
            // 0 is the end of a pipe; EIO that of a pty master whose slave is closed;
            // any other error ends the stream too rather than spinning on it.
            let eof = n <= 0;
            if n > 0 {
                attach.broadcast(self.id, &self.buf[self.len..self.len + n as usize]);
                self.len += n as usize;
            }
            self.write_records(log, eof);
            if eof {
                close(self.fd as usize);
                self.fd = -1;
            }
        }
    }

    /// Writes what is still pending (the child is gone): a line without its newline,
    /// so a `P` record, like the rest of a stream at its end.
    pub(crate) fn flush(&mut self, log: &Log) {
        self.write_records(log, true);
    }

    /// Writes every record `buf[..len]` holds (with `eof`, also the unterminated rest)
    /// and moves what is left to the front.
    pub(crate) fn write_records(&mut self, log: &Log, eof: bool) {
        let (sec, nsec) = now();
        let mut start = 0;
        while let Some(r) = next_record(&self.buf[start..self.len], eof) {
            log.write(
                sec,
                nsec,
                self.name,
                r.full,
                &self.buf[start..start + r.len],
            );
            start += r.consumed;
        }
        if start > 0 {
            self.buf.copy_within(start..self.len, 0);
            self.len -= start;
        }
    }
}

/// `fd` made non-blocking (the monitor must never wait on the container).
pub(crate) fn nonblocking(fd: i32) -> i32 {
    set_nonblocking(fd);
    fd
}

/// Sets O_NONBLOCK on `fd`; false when `fd` is not an open descriptor.
pub(crate) fn set_nonblocking(fd: i32) -> bool {
    let flags = syscall(SYS_FCNTL, fd as usize, F_GETFL, 0, 0);
    if flags < 0 {
        return false;
    }
    syscall(
        SYS_FCNTL,
        fd as usize,
        F_SETFL,
        flags as usize | O_NONBLOCK,
        0,
    );
    true
}

impl Log {
    pub(crate) fn open(&mut self) {
        if let Some(p) = self.path {
            // O_NOFOLLOW: a symlink put in the log's place (by whatever can write the
            // pod's log folder: a container with it as a volume) is not followed to a
            // host file; the records are dropped instead.
            let fd = syscall(
                SYS_OPEN,
                p.as_ptr() as usize,
                O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC | O_NOFOLLOW,
                0o640,
                0,
            );
            self.fd = if fd >= 0 { fd as i32 } else { -1 };
        }
    }

    /// SIGUSR1: the kubelet renamed the file away; the next records go to a new one.
    pub(crate) fn reopen(&mut self) {
        if self.fd >= 0 {
            close(self.fd as usize);
            self.fd = -1;
        }
        self.open();
    }

    /// One record, written with one `writev`; errors are ignored.
    pub(crate) fn write(&self, sec: i64, nsec: u32, stream: &[u8], full: bool, text: &[u8]) {
        if self.fd < 0 {
            return;
        }
        let mut head = [0u8; HEADER_MAX];
        let n = header(sec, nsec, stream, full, &mut head);
        let parts: [&[u8]; 3] = [&head[..n], text, b"\n"];
        let iov = parts.map(|p| IoVec {
            base: p.as_ptr(),
            len: p.len(),
        });
        let total = n + text.len() + 1;
        let mut written = loop {
            let w = syscall(SYS_WRITEV, self.fd as usize, iov.as_ptr() as usize, 3, 0);
            if w != -EINTR {
                break w;
            }
        };
        if written < 0 || written as usize >= total {
            return;
        }
        // A short write (a full disk, say): finish the record if the file takes it.
        for p in parts {
            let skip = (written as usize).min(p.len());
            written -= skip as isize;
            if !write_all(self.fd as usize, &p[skip..]) {
                return;
            }
        }
    }
}
