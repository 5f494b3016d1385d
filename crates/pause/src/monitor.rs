//! `crust-monitor`: the parent of one container's init. It copies the container's
//! stdout and stderr into the CRI log file, reaps the init, and leaves an exit record
//! for `crustd`, which may have been restarted (or be down) in the meantime.
//!
//! # Why `no_std`
//! There is one monitor per container, alive as long as the container, so its cost is
//! paid on every node many times over: containerd's shim takes 13 MiB resident per pod.
//! Like `crust-pause` it links no libc, allocates nothing and talks to the kernel
//! through raw `syscall`s (`sys.rs`): all its memory is a few static buffers (a line
//! buffer of 16 KiB + 1 per stream, 4 KiB for a file, 4 KiB for a path), pages of which
//! the kernel only makes resident once touched. It is built with `crust-pause` by
//! `crates/container/build.rs` and embedded in `container::monitor`. The logic that
//! needs no syscalls (arguments, log record format, line cutting, exit record) is in
//! `monitor_core.rs`, which `crates/container` also compiles to unit-test it. The
//! streams' way into the CRI log is `monitor_output.rs`, the attach clients
//! `monitor_attach.rs`; this file has the start, the loop, the reaping and the exit
//! record.
//!
//! # How it starts: the fd and argument contract
//! A process forked from `crustd` joins the pod's namespaces and clones the container's
//! init (or, when it must join a mount namespace, forks an intermediate that clones the
//! init with CLONE_PARENT, and reaps it), then `execve`s this binary. So the monitor
//! starts with exactly one child, the init
//! (waiting on its start gate, running, or already dead), fds 0, 1 and 2 on
//! `/dev/null`, and the fds below open by number:
//!
//! ```text
//! crust-monitor -e EXIT_FILE [-l LOG_PATH] [-o FD] [-r FD] [-t FD] [-i FD] [-m OOM_FILE]
//!               [-p PID] [-A FD] [-s keep|once]
//!   -e  where the exit record goes (written as EXIT_FILE.tmp, fsynced, renamed)
//!   -l  the CRI log file, opened O_WRONLY|O_APPEND|O_CREAT|O_CLOEXEC|O_NOFOLLOW, mode 0640;
//!       without it the streams are read and their output dropped
//!   -o  read end of the container's stdout pipe          (records named "stdout")
//!   -r  read end of the container's stderr pipe          (records named "stderr")
//!   -t  a pty master, instead of -o (records named "stdout"; EIO once the slave is
//!       closed is its end of file)
//!   -i  the write end of the container's stdin pipe (input from attach clients)
//!   -A  a listening SOCK_SEQPACKET unix socket for attach clients (see Attach)
//!   -s  keep|once: attach clients' input reaches the container (the -i pipe, or the
//!       pty master of a tty container); with once, the first client to end its
//!       input ends the container's stdin (CRI stdin_once)
//!   -m  cgroup v2 memory.events or v1 memory.oom_control: its `oom_kill N` line is read
//!       at start and after the exit; a larger N marks the exit as an OOM kill
//!   -p  the init's pid; without it, the one child listed in /proc/thread-self/children
//!       at start (or, failing that, the first child reaped)
//! ```
//! Knowing the init matters when the monitor is a child subreaper (as it is under an
//! external OCI runtime, see `container::executor::oci_runtime`): orphans may then be
//! re-parented to it, and it reaps them without taking their exit for the init's.
//! Every option takes its value in the next argument. A bad command line: a message on
//! stderr, exit 2.
//!
//! # Behaviour
//! ```text
//!  start: setsid, block every signal, signalfd, read OOM counter, open log, wait4 once
//!    │                         (SIGCHLD may have come and gone before the exec)
//!    ▼
//!  loop: poll(signalfd, streams, attach) ◀─────────────────────────────┐
//!    ├─ stream readable  → read, to attach clients, cut into records,  │
//!    │                     one writev each ───────────────────────────┤
//!    ├─ attach           → accept; client input → container stdin ────┤
//!    ├─ stream EOF/error → last unfinished line as P, close; the child│
//!    │                     may still run, so keep waiting for it ─────┤
//!    ├─ SIGUSR1          → close the log, open LOG_PATH again ────────┤
//!    ├─ SIGTERM/INT/HUP, others → ignored (crustd signals the container)
//!    └─ SIGCHLD → wait4(-1, WNOHANG) until 0: init still running ─────┘
//!                 (other children: reaped, ignored)
//!                                     init gone (or no child: ECHILD)
//!                                       ▼
//!  finish: time of reap; drain the streams without waiting for EOF (a daemonised
//!          grandchild may hold them forever); unfinished lines as P; OOM counter;
//!          exit record to EXIT_FILE.tmp, fsync, rename, fsync the directory; exit 0
//!          (1 when the record could not be written)
//! ```
//! Log records are CRI's format, `<RFC3339Nano UTC> <stdout|stderr> <F|P> <text>\n`,
//! each written by one `writev` to the O_APPEND file, so records of the two streams
//! never interleave inside a line. A line longer than 16 KiB becomes `P` records of
//! 16 KiB and a final `F`. Only a newline makes an `F`: a line cut by the end of its
//! stream (`echo -n DONE`), or still unfinished when the child is gone, is written as
//! a `P`, as containerd does, so that readers (the kubelet's, which adds a newline
//! after `F` text only) give back exactly what the container wrote. Errors writing the log are ignored: the container must never
//! block on its output, so the streams are always read (a LOG_PATH that cannot be
//! opened drops the output until a SIGUSR1 opens it). Each record carries the time its
//! bytes were read, so output still in a pipe at the exit is stamped after the reap.
//!
//! # Attach
//! Clients of the `-A` socket (at most 4 at once) get every chunk of output as it is
//! read, one message each: a tag byte (1 stdout, 2 stderr; a pty is stdout) and the
//! bytes; nothing from before they came. A client that cannot take a message at once
//! is dropped, so a stalled terminal never stalls the container. What a client sends
//! goes to the container's stdin with `-s` (at most 4 KiB pending; while it is, no
//! client is read), and is dropped without. A client's end of input (shutdown or
//! close) with `-s once` closes the stdin pipe (EOF for the container) or, for a pty,
//! sends ^D; later input is dropped.
//!
//! The exit record, one line of JSON:
//! `{"pid":123,"exit_code":0,"signal":0,"finished_ns":1700000000000000000,"oom_killed":false}`
//! with exit_code 128 + signal for a child killed by a signal, and pid 0, exit_code 255
//! when there was no child at all.

#![no_std]
#![no_main]

mod monitor_attach;
mod monitor_core;
mod monitor_output;
mod sys;

use core::cell::UnsafeCell;
use core::ffi::{c_char, CStr};

use monitor_attach::{Attach, INPUT_BUF};
use monitor_core::{
    exit_from_status, format_exit, only_pid, parse_args, parse_oom_kill, Args, Exit, EXIT_MAX,
    USAGE,
};
use monitor_output::{Log, Stream, LINE_BUF};
use sys::{
    close, exit, syscall, syscall_5, write_all, ANY_CHILD, CLOCK_REALTIME, ECHILD, EINTR,
    MSG_CMSG_CLOEXEC, O_CLOEXEC, O_CREAT, O_DIRECTORY, O_RDONLY, O_TRUNC, O_WRONLY, POLLERR,
    POLLHUP, POLLIN, POLLNVAL, POLLOUT, POLLPRI, SCM_RIGHTS, SFD_CLOEXEC, SFD_NONBLOCK, SIGCHLD,
    SIGINFO_SIZE, SIGSET_SIZE, SIGUSR1, SIG_BLOCK, SIG_DFL, SOL_SOCKET, SYS_CLOCK_GETTIME,
    SYS_FSYNC, SYS_OPEN, SYS_POLL, SYS_PREAD64, SYS_READ, SYS_RECVMSG, SYS_RENAME,
    SYS_RT_SIGACTION, SYS_RT_SIGPROCMASK, SYS_SETSID, SYS_SIGNALFD4, SYS_UNLINK, SYS_WAIT4,
    WNOHANG,
};

/// For the `-m` file; `memory.events` is about 80 bytes.
const FILE_BUF: usize = 4096;
/// For `EXIT_FILE.tmp` and EXIT_FILE's directory (PATH_MAX is 4096 with its NUL).
const PATH_BUF: usize = 4096 + 8;
/// How many reads a stream gets when the child is gone: enough to empty a pipe's
/// buffer many times, bounded so a grandchild that keeps writing cannot hold the
/// exit record back.
const DRAIN_READS: usize = 64;

/// Every static buffer. All zeros, so it lives in `.bss`: nothing in the binary, and
/// no page resident before it is touched.
struct Buffers {
    lines: [[u8; LINE_BUF]; 3],
    file: [u8; FILE_BUF],
    path: [u8; PATH_BUF],
    input: [u8; INPUT_BUF],
}

struct Static(UnsafeCell<Buffers>);

// SAFETY: the monitor has one thread, and `start` takes the only reference.
unsafe impl Sync for Static {}

static BUFFERS: Static = Static(UnsafeCell::new(Buffers {
    lines: [[0; LINE_BUF]; 3],
    file: [0; FILE_BUF],
    path: [0; PATH_BUF],
    input: [0; INPUT_BUF],
}));

#[repr(C)]
struct PollFd {
    fd: i32,
    events: i16,
    revents: i16,
}

#[repr(C)]
struct IoVec {
    base: *const u8,
    len: usize,
}

/// `struct sigaction` as the kernel takes it.
#[repr(C)]
struct SigAction {
    handler: usize,
    flags: u64,
    restorer: usize,
    mask: u64,
}

extern "C" fn start(sp: *const usize) -> ! {
    detach_and_block_signals();
    let args = args_or_exit(sp);
    let sfd = signalfd_or_exit();

    // SAFETY: the only reference to the buffers, taken once; one thread.
    let bufs = unsafe { &mut *BUFFERS.0.get() };
    let Buffers {
        lines,
        file,
        path,
        input,
    } = bufs;
    let mut streams = Stream::all(&args, lines);
    let mut attach = Attach::new(&args, input);
    let mut oom = Oom::open(args.oom_file, file);
    let init = args.init_pid.or_else(|| {
        let n = read_file(c"/proc/thread-self/children", file);
        only_pid(&file[..n])
    });
    let mut log = Log {
        path: args.log_path,
        fd: -1,
    };
    log.open();

    // The child may have exited before SIGCHLD was blocked, or before the exec while
    // the signal was ignored by default: look once before waiting for the signal.
    let mut check_child = true;
    let mut tty_socket: i32 = args.tty_socket.unwrap_or(-1);
    loop {
        if check_child {
            check_child = false;
            if let Some(child) = reap(init) {
                finish(
                    &args,
                    child,
                    &mut streams,
                    &log,
                    &mut attach,
                    &mut oom,
                    file,
                    path,
                );
            }
        }
        let mut fds = poll_fds(sfd, &streams, &attach, tty_socket, oom.fd);
        let n = syscall(
            SYS_POLL,
            fds.as_mut_ptr() as usize,
            fds.len(),
            usize::MAX,
            0,
        );
        if n < 0 {
            continue; // EINTR (after SIGSTOP/SIGCONT, say)
        }
        if tty_socket >= 0 && fds[4].revents != 0 {
            tty_socket = adopt_tty(tty_socket, &mut streams[2]);
        }
        if fds[11].revents != 0 {
            oom.refresh(file);
        }
        serve_io(&fds, &mut streams, &log, &mut attach);
        if fds[0].revents != 0 && read_signals(sfd, &mut log) {
            check_child = true;
        }
    }
}

/// Every signal, as a mask for `rt_sigprocmask` and `signalfd4`.
const ALL_SIGNALS: u64 = !0;

/// Its own session first: the daemon's process group may be killed as a whole. Then
/// every signal blocked, so none can kill the monitor by its default action (the ones
/// that matter are read from a signalfd), and SIGCHLD back to its default: SIG_IGN
/// survives execve and would make the kernel reap the child itself, losing its status.
fn detach_and_block_signals() {
    syscall(SYS_SETSID, 0, 0, 0, 0);
    let all: u64 = ALL_SIGNALS;
    syscall(
        SYS_RT_SIGPROCMASK,
        SIG_BLOCK,
        &all as *const u64 as usize,
        0,
        SIGSET_SIZE,
    );
    let dfl = SigAction {
        handler: SIG_DFL,
        flags: 0,
        restorer: 0,
        mask: 0,
    };
    syscall(
        SYS_RT_SIGACTION,
        SIGCHLD,
        &dfl as *const SigAction as usize,
        0,
        SIGSET_SIZE,
    );
}

/// The command line from the initial stack; a bad one is the caller's mistake, told on
/// stderr with the usage, exit 2 (see the module's doc for the contract).
fn args_or_exit(sp: *const usize) -> Args<'static> {
    // SAFETY: `sp` is the initial stack pointer the kernel set up: argc, then argc
    // pointers to NUL-terminated strings that live as long as the process.
    let args = unsafe {
        let argc = *sp;
        let argv = sp.add(1) as *const *const c_char;
        parse_args((1..argc).map(|i| CStr::from_ptr(*argv.add(i))))
    };
    match args {
        Ok(a) => a,
        Err(e) => {
            write_all(2, b"crust-monitor: ");
            write_all(2, e.message.as_bytes());
            write_all(2, e.arg);
            write_all(2, b"\n");
            write_all(2, USAGE);
            exit(2);
        }
    }
}

/// The signalfd the blocked signals are read from; without it the monitor could
/// never learn of the child's exit, so it gives up at once (exit 1).
fn signalfd_or_exit() -> isize {
    let all: u64 = ALL_SIGNALS;
    let sfd = syscall(
        SYS_SIGNALFD4,
        usize::MAX, // -1: a new signalfd
        &all as *const u64 as usize,
        SIGSET_SIZE,
        SFD_NONBLOCK | SFD_CLOEXEC,
    );
    if sfd < 0 {
        write_all(2, b"crust-monitor: signalfd failed\n");
        exit(1);
    }
    sfd
}

/// What one turn of the loop waits for, by index: 0 the signalfd, 1-3 the streams
/// (stdout, stderr, pty), 4 the socket the pty master comes by, 5 the attach socket,
/// 6 room in the container's stdin, 7.. the attach clients.
fn poll_fds(
    sfd: isize,
    streams: &[Stream; 3],
    attach: &Attach,
    tty_socket: i32,
    oom_fd: i32,
) -> [PollFd; 12] {
    let target = attach.target(&streams[2]);
    let pending = attach.start < attach.end;
    [
        PollFd {
            fd: sfd as i32,
            events: POLLIN,
            revents: 0,
        },
        streams[0].poll_fd(),
        streams[1].poll_fd(),
        streams[2].poll_fd(),
        PollFd {
            fd: tty_socket,
            events: POLLIN,
            revents: 0,
        },
        PollFd {
            fd: attach.listen,
            events: POLLIN,
            revents: 0,
        },
        // Input waiting for the container: poll for room in its stdin.
        PollFd {
            fd: if pending { target } else { -1 },
            events: POLLOUT,
            revents: 0,
        },
        attach.poll_fd(0, pending),
        attach.poll_fd(1, pending),
        attach.poll_fd(2, pending),
        attach.poll_fd(3, pending),
        // cgroup v2 `memory.events` changed (an OOM kill, among others).
        PollFd {
            fd: oom_fd,
            events: POLLPRI,
            revents: 0,
        },
    ]
}

/// The pty master from the init (or the init's end closed: no terminal). The socket
/// is done with either way; returns its new value, -1.
fn adopt_tty(tty_socket: i32, tty: &mut Stream) -> i32 {
    let master = recv_fd(tty_socket);
    close(tty_socket as usize);
    if master >= 0 {
        tty.adopt(master);
    }
    -1
}

/// The streams, the attach socket, the container's stdin and the attach clients, in
/// that order, as `poll` found them ready (`fds` from [`poll_fds`]).
fn serve_io(fds: &[PollFd; 12], streams: &mut [Stream; 3], log: &Log, attach: &mut Attach) {
    for (s, p) in streams.iter_mut().zip(&fds[1..4]) {
        if p.revents & (POLLIN | POLLHUP | POLLERR | POLLNVAL) != 0 {
            s.pump(log, 1, attach);
        }
    }
    if fds[5].revents != 0 {
        attach.accept();
    }
    if fds[6].revents != 0 {
        attach.feed(&streams[2]);
    }
    for (i, p) in fds[7..11].iter().enumerate() {
        if p.revents != 0 {
            attach.receive(i, p.revents, &streams[2]);
        }
    }
}

/// Empties the signalfd: SIGUSR1 reopens the log at once; true when a SIGCHLD came,
/// for the loop to reap. SIGTERM, SIGINT, SIGHUP and the rest are ignored: crustd
/// signals the container, never its monitor.
fn read_signals(sfd: isize, log: &mut Log) -> bool {
    let mut child = false;
    let mut info = [0u8; SIGINFO_SIZE * 8];
    loop {
        let n = syscall(
            SYS_READ,
            sfd as usize,
            info.as_mut_ptr() as usize,
            info.len(),
            0,
        );
        if n == -EINTR {
            continue;
        }
        if n <= 0 {
            break;
        }
        for si in info[..n as usize].chunks_exact(SIGINFO_SIZE) {
            let signo = u32::from_ne_bytes([si[0], si[1], si[2], si[3]]) as usize;
            match signo {
                SIGCHLD => child = true,
                SIGUSR1 => log.reopen(),
                _ => {} // SIGTERM, SIGINT, SIGHUP and the rest: ignored
            }
        }
    }
    child
}

/// What `wait4` said of the child: its pid and status, or `None` for no child at all.
type Child = Option<(i32, i32)>;

/// Reaps every child that has exited. `Some` when the init is gone (reaped, or there
/// never was a child); `None` while it runs. Without a known init, the first child
/// reaped is taken for it.
fn reap(init: Option<i32>) -> Option<Child> {
    loop {
        let mut status: i32 = 0;
        let pid = syscall(
            SYS_WAIT4,
            ANY_CHILD,
            &mut status as *mut i32 as usize,
            WNOHANG,
            0,
        );
        match pid {
            p if p > 0 => {
                if init.is_none_or(|i| i == p as i32) {
                    return Some(Some((p as i32, status)));
                }
                // An orphan re-parented to us as a subreaper: reaped, nothing more.
            }
            0 => return None,
            e if e == -EINTR => continue,
            e if e == -ECHILD => return Some(None),
            _ => return Some(None),
        }
    }
}

/// The child is gone: last output, exit record, exit.
#[allow(clippy::too_many_arguments)]
fn finish(
    args: &Args<'static>,
    child: Child,
    streams: &mut [Stream; 3],
    log: &Log,
    attach: &mut Attach,
    oom: &mut Oom,
    file: &mut [u8; FILE_BUF],
    path: &mut [u8; PATH_BUF],
) -> ! {
    let finished_ns = {
        let (sec, nsec) = now();
        sec.saturating_mul(1_000_000_000)
            .saturating_add(i64::from(nsec))
    };
    for s in streams.iter_mut() {
        s.pump(log, DRAIN_READS, attach);
        s.flush(log);
    }
    oom.refresh(file);
    let oom_killed = oom.killed();
    let (pid, exit_code, signal) = match child {
        Some((pid, status)) => {
            let (code, sig) = exit_from_status(status);
            (pid, code, sig)
        }
        None => (0, 255, 0),
    };
    let record = Exit {
        pid,
        exit_code,
        signal,
        finished_ns,
        oom_killed,
    };
    if write_exit(args.exit_file, &record, path) {
        exit(0)
    }
    write_all(2, b"crust-monitor: cannot write the exit record\n");
    exit(1)
}

/// CLOCK_REALTIME as (seconds, nanoseconds).
fn now() -> (i64, u32) {
    let mut ts = [0i64; 2];
    syscall(
        SYS_CLOCK_GETTIME,
        CLOCK_REALTIME,
        ts.as_mut_ptr() as usize,
        0,
        0,
    );
    (ts[0], ts[1] as u32)
}

/// The `oom_kill` counter of the `-m` file, kept open and read again whenever the
/// kernel says it changed (cgroup v2 `memory.events` wakes `poll` with POLLPRI; v1's
/// file never does and is read at the end only). Read while the container runs, not
/// only after it exited: with the systemd driver the container's scope, and with it
/// the file, may be gone by the time the monitor has reaped the init.
struct Oom {
    fd: i32,
    before: Option<u64>,
    seen: Option<u64>,
}

impl Oom {
    fn open(path: Option<&CStr>, buf: &mut [u8; FILE_BUF]) -> Oom {
        let fd = path.map_or(-1, |p| {
            syscall(SYS_OPEN, p.as_ptr() as usize, O_RDONLY | O_CLOEXEC, 0, 0) as i32
        });
        let mut oom = Oom {
            fd: fd.max(-1),
            before: None,
            seen: None,
        };
        oom.refresh(buf);
        oom.before = oom.seen;
        oom
    }

    /// Reads the counter again (which also re-arms the kernel's change notice). A file
    /// that no longer reads (its cgroup removed) is closed and not polled any more.
    fn refresh(&mut self, buf: &mut [u8; FILE_BUF]) {
        if self.fd < 0 {
            return;
        }
        let mut len = 0;
        while len < buf.len() {
            let n = syscall_5(
                SYS_PREAD64,
                self.fd as usize,
                buf[len..].as_mut_ptr() as usize,
                buf.len() - len,
                len,
                0,
            );
            if n == -EINTR {
                continue;
            }
            if n < 0 {
                close(self.fd as usize);
                self.fd = -1;
                return;
            }
            if n == 0 {
                break;
            }
            len += n as usize;
        }
        if let Some(n) = parse_oom_kill(&buf[..len]) {
            self.seen = Some(self.seen.map_or(n, |s| s.max(n)));
        }
    }

    /// The counter grew while the container ran.
    fn killed(&self) -> bool {
        match self.seen {
            Some(n) => n > self.before.unwrap_or(0),
            None => false,
        }
    }
}

/// Reads the start of a file into `buf`; returns the length (0 when it cannot be read).
fn read_file(path: &CStr, buf: &mut [u8; FILE_BUF]) -> usize {
    let fd = syscall(SYS_OPEN, path.as_ptr() as usize, O_RDONLY | O_CLOEXEC, 0, 0);
    if fd < 0 {
        return 0;
    }
    let mut len = 0;
    while len < buf.len() {
        let n = syscall(
            SYS_READ,
            fd as usize,
            buf[len..].as_mut_ptr() as usize,
            buf.len() - len,
            0,
        );
        if n == -EINTR {
            continue;
        }
        if n <= 0 {
            break;
        }
        len += n as usize;
    }
    close(fd as usize);
    len
}

/// Writes the record durably: `EXIT_FILE.tmp`, fsync, rename over EXIT_FILE, fsync of
/// the directory. A reader sees no file or the whole record, never a part of it.
fn write_exit(path: &CStr, record: &Exit, buf: &mut [u8; PATH_BUF]) -> bool {
    let p = path.to_bytes();
    const SUFFIX: &[u8] = b".tmp\0";
    if p.len() + SUFFIX.len() > buf.len() {
        return false;
    }
    buf[..p.len()].copy_from_slice(p);
    buf[p.len()..p.len() + SUFFIX.len()].copy_from_slice(SUFFIX);
    let tmp = buf.as_ptr() as usize;

    let mut json = [0u8; EXIT_MAX];
    let n = format_exit(record, &mut json);
    let fd = syscall(
        SYS_OPEN,
        tmp,
        O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC,
        0o644,
        0,
    );
    if fd < 0 {
        return false;
    }
    let ok = write_all(fd as usize, &json[..n]) && syscall(SYS_FSYNC, fd as usize, 0, 0, 0) == 0;
    close(fd as usize);
    if !ok || syscall(SYS_RENAME, tmp, path.as_ptr() as usize, 0, 0) != 0 {
        syscall(SYS_UNLINK, tmp, 0, 0, 0);
        return false;
    }

    // The rename reaches the disk with the directory.
    let dir_len = match p.iter().rposition(|&b| b == b'/') {
        Some(0) => 1,
        Some(i) => i,
        None => 0,
    };
    if dir_len == 0 {
        buf[..2].copy_from_slice(b".\0");
    } else {
        buf[dir_len] = 0; // buf still holds the path: cut it after the directory
    }
    let dfd = syscall(
        SYS_OPEN,
        buf.as_ptr() as usize,
        O_RDONLY | O_DIRECTORY | O_CLOEXEC,
        0,
        0,
    );
    if dfd >= 0 {
        syscall(SYS_FSYNC, dfd as usize, 0, 0, 0);
        close(dfd as usize);
    }
    true
}

/// `struct msghdr` of x86_64 Linux.
#[repr(C)]
struct MsgHdr {
    name: usize,
    namelen: u32,
    iov: *mut IoVec,
    iovlen: usize,
    control: *mut u8,
    controllen: usize,
    flags: i32,
}

/// Receives one fd sent with SCM_RIGHTS on `sock`; -1 on EOF or anything else.
fn recv_fd(sock: i32) -> i32 {
    let mut byte = [0u8; 1];
    let mut iov = IoVec {
        base: byte.as_mut_ptr() as *const u8,
        len: 1,
    };
    // cmsghdr (len: usize, level: i32, type: i32) and one int, 8-aligned.
    let mut control = [0u64; 4];
    let mut msg = MsgHdr {
        name: 0,
        namelen: 0,
        iov: &mut iov,
        iovlen: 1,
        control: control.as_mut_ptr() as *mut u8,
        controllen: core::mem::size_of_val(&control),
        flags: 0,
    };
    let n = loop {
        let n = syscall(
            SYS_RECVMSG,
            sock as usize,
            &mut msg as *mut MsgHdr as usize,
            MSG_CMSG_CLOEXEC,
            0,
        );
        if n != -EINTR {
            break n;
        }
    };
    if n <= 0 || msg.controllen < 20 {
        return -1;
    }
    let words = control;
    let level = (words[1] & 0xffff_ffff) as i32;
    let kind = (words[1] >> 32) as i32;
    if level != SOL_SOCKET || kind != SCM_RIGHTS {
        return -1;
    }
    (words[2] & 0xffff_ffff) as i32
}
