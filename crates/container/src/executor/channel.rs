//! The typed messages between the main process (the caller of
//! [`create`](super::create)), the intermediate process and the container's init,
//! over one `SOCK_SEQPACKET` socket pair made before the first fork. Seqpacket keeps
//! message boundaries, so each `send` is one message and a short read is a protocol
//! error, not a partial message.
//!
//! ```text
//!   intermediate ── InitPid(pid) ──────────────▶ main     (then exits 0)
//!   init ◀───────── Go ───────────────────────── main     (the init sets up meanwhile)
//!   init ────────── Hooks ─────────────────────▶ main     (only when the spec has
//!   init ◀───────── HooksDone ────────────────── main      prestart/createRuntime hooks)
//!   init ────────── Ready ─────────────────────▶ main     (then waits on the start gate)
//!   either ──────── Failed { step, errno, .. } ──▶ main   (then exits 1)
//! ```
//!
//! `Go` orders the conversation: nothing of the init's can arrive before the init's
//! pid, so the main process always knows whom to reap. The init does its setup (all
//! inside its own namespaces) without waiting, and waits for `Go` only to report
//! how it went. The main process owns one
//! end, the two children share the other (the intermediate only sends; the init
//! receives `Go` (and `HooksDone` after asking with `Hooks`), otherwise only sends). The encoding is a tag byte and fixed
//! little-endian fields, so the children need no serializer, just a small buffer.

use std::fmt;
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, OwnedFd};

/// The largest message: tag, step, errno, path length, and a path and a detail of at
/// most [`MAX_PATH`] bytes each.
pub(crate) const MAX_MESSAGE: usize = 1 + 1 + 4 + 2 + 2 * MAX_PATH;
/// Paths and details in [`Message::Failed`] are cut to this many bytes.
pub(crate) const MAX_PATH: usize = 2048;

/// The longest prefix of `s` of at most `MAX_PATH` bytes that ends on a char boundary.
fn cut(s: &str) -> &str {
    let mut n = s.len().min(MAX_PATH);
    while !s.is_char_boundary(n) {
        n -= 1;
    }
    &s[..n]
}

const TAG_INIT_PID: u8 = 1;
const TAG_READY: u8 = 2;
const TAG_FAILED: u8 = 3;
const TAG_GO: u8 = 4;
const TAG_HOOKS: u8 = 5;
const TAG_HOOKS_DONE: u8 = 6;

/// What failed while creating a container, named in its error. Steps of the main
/// process come first, then the intermediate's, then the init's in the order it
/// runs them (see `init.rs`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum Step {
    // Main process (the caller of create).
    StateDir = 1,
    Mkfifo,
    OpenStdio,
    OpenNamespace,
    Socketpair,
    Fork,
    /// The intermediate or the init exited without reporting, or a message made no
    /// sense: `path` says what was expected and what came.
    Protocol,
    Timeout,
    WriteState,
    // Intermediate process.
    Setns = 20,
    Clone,
    /// Joining the container's cgroup (writing `cgroup.procs`).
    Cgroup,
    /// The monitor process could not be started.
    Monitor,
    // Init, in order.
    Setsid = 40,
    Stdio,
    Terminal,
    RootfsPropagation,
    MountRootfs,
    OpenRootfs,
    MountTarget,
    Mount,
    MountCgroup,
    Device,
    DevSymlink,
    OomScoreAdj,
    PivotRoot,
    Sysctl,
    MaskPath,
    ReadonlyPath,
    ReadonlyRoot,
    Hostname,
    Domainname,
    Rlimit,
    /// Installing the seccomp filter: here without `noNewPrivileges`, else after the
    /// start gate, right before `execve` (a failure there is on the container's stderr).
    Seccomp,
    CapBounding,
    Setgroups,
    Setgid,
    Setuid,
    Capabilities,
    NoNewPrivs,
    Cwd,
    Executable,
    Ready,
    /// Asking for the AppArmor profile the process gets at `execve` (after the values
    /// above, so their numbers stay as they were).
    AppArmor = 80,
    /// Running the spec's OCI hooks: `prestart`/`createRuntime` in the caller,
    /// `createContainer` in the init (`path` names the list, the detail the hook).
    Hook,
}

impl Step {
    const ALL: [Step; 45] = [
        Step::StateDir,
        Step::Mkfifo,
        Step::OpenStdio,
        Step::OpenNamespace,
        Step::Socketpair,
        Step::Fork,
        Step::Protocol,
        Step::Timeout,
        Step::WriteState,
        Step::Setns,
        Step::Clone,
        Step::Cgroup,
        Step::Monitor,
        Step::Setsid,
        Step::Stdio,
        Step::Terminal,
        Step::RootfsPropagation,
        Step::MountRootfs,
        Step::OpenRootfs,
        Step::MountTarget,
        Step::Mount,
        Step::MountCgroup,
        Step::Device,
        Step::DevSymlink,
        Step::OomScoreAdj,
        Step::PivotRoot,
        Step::Sysctl,
        Step::MaskPath,
        Step::ReadonlyPath,
        Step::ReadonlyRoot,
        Step::Hostname,
        Step::Domainname,
        Step::Rlimit,
        Step::Seccomp,
        Step::CapBounding,
        Step::Setgroups,
        Step::Setgid,
        Step::Setuid,
        Step::Capabilities,
        Step::NoNewPrivs,
        Step::Cwd,
        Step::Executable,
        Step::Ready,
        Step::AppArmor,
        Step::Hook,
    ];

    fn from_u8(b: u8) -> Option<Step> {
        Step::ALL.into_iter().find(|s| *s as u8 == b)
    }

    /// The lowercase name used in error messages.
    pub fn name(self) -> &'static str {
        match self {
            Step::StateDir => "create state dir",
            Step::Mkfifo => "make start gate fifo",
            Step::OpenStdio => "open stdio",
            Step::OpenNamespace => "open namespace",
            Step::Socketpair => "socketpair",
            Step::Fork => "fork intermediate process",
            Step::Protocol => "protocol",
            Step::Timeout => "timeout",
            Step::WriteState => "write state",
            Step::Setns => "join namespace",
            Step::Clone => "clone init",
            Step::Cgroup => "join cgroup",
            Step::Monitor => "start monitor",
            Step::Setsid => "setsid",
            Step::Stdio => "set up stdio",
            Step::Terminal => "set controlling terminal",
            Step::RootfsPropagation => "set rootfs propagation",
            Step::MountRootfs => "mount rootfs",
            Step::OpenRootfs => "open rootfs",
            Step::MountTarget => "resolve mount target",
            Step::Mount => "mount",
            Step::MountCgroup => "mount cgroup",
            Step::Device => "create device",
            Step::DevSymlink => "create /dev symlink",
            Step::OomScoreAdj => "set oom_score_adj",
            Step::PivotRoot => "pivot_root",
            Step::Sysctl => "set sysctl",
            Step::MaskPath => "mask path",
            Step::ReadonlyPath => "make path read-only",
            Step::ReadonlyRoot => "make root read-only",
            Step::Hostname => "sethostname",
            Step::Domainname => "setdomainname",
            Step::Rlimit => "setrlimit",
            Step::Seccomp => "install seccomp filter",
            Step::CapBounding => "drop bounding capabilities",
            Step::Setgroups => "setgroups",
            Step::Setgid => "setgid",
            Step::Setuid => "setuid",
            Step::Capabilities => "set capabilities",
            Step::NoNewPrivs => "set no_new_privs",
            Step::Cwd => "chdir",
            Step::Executable => "find executable",
            Step::Ready => "report ready",
            Step::AppArmor => "set apparmor profile",
            Step::Hook => "run hooks",
        }
    }
}

impl fmt::Display for Step {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// One message from a child to the main process.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Message {
    /// From the intermediate: the init's pid, in the main process's PID namespace.
    InitPid(i32),
    /// From main to the init: go ahead with the setup.
    Go,
    /// From the init: everything up to `execve` is done; it now waits on the gate.
    Ready,
    /// From the init: its mounts are made, it waits for the caller's `prestart` and
    /// `createRuntime` hooks.
    Hooks,
    /// From main to the init: those hooks ran; go on.
    HooksDone,
    /// From either: `step` failed on `path` (may be empty) with `errno`, or, when
    /// the error was not an errno (`errno` 0), with the message `detail`.
    Failed {
        step: Step,
        errno: i32,
        path: String,
        detail: String,
    },
}

impl Message {
    /// What the message is, for protocol errors.
    pub(crate) fn kind(&self) -> &'static str {
        match self {
            Message::InitPid(_) => "init pid",
            Message::Go => "go",
            Message::Ready => "ready",
            Message::Hooks => "hooks",
            Message::HooksDone => "hooks done",
            Message::Failed { .. } => "failure",
        }
    }

    /// Encodes into `buf` (at least [`MAX_MESSAGE`] bytes); returns the length.
    pub(crate) fn encode(&self, buf: &mut [u8; MAX_MESSAGE]) -> usize {
        match self {
            Message::InitPid(pid) => {
                buf[0] = TAG_INIT_PID;
                buf[1..5].copy_from_slice(&pid.to_le_bytes());
                5
            }
            Message::Ready => {
                buf[0] = TAG_READY;
                1
            }
            Message::Go => {
                buf[0] = TAG_GO;
                1
            }
            Message::Hooks => {
                buf[0] = TAG_HOOKS;
                1
            }
            Message::HooksDone => {
                buf[0] = TAG_HOOKS_DONE;
                1
            }
            Message::Failed {
                step,
                errno,
                path,
                detail,
            } => {
                buf[0] = TAG_FAILED;
                buf[1] = *step as u8;
                buf[2..6].copy_from_slice(&errno.to_le_bytes());
                let (path, detail) = (cut(path), cut(detail));
                buf[6..8].copy_from_slice(&(path.len() as u16).to_le_bytes());
                let d = 8 + path.len();
                buf[8..d].copy_from_slice(path.as_bytes());
                buf[d..d + detail.len()].copy_from_slice(detail.as_bytes());
                d + detail.len()
            }
        }
    }

    /// Decodes one message; the error says what was wrong with the bytes.
    pub(crate) fn decode(b: &[u8]) -> Result<Message, String> {
        match b.first() {
            Some(&TAG_INIT_PID) if b.len() == 5 => {
                let pid = i32::from_le_bytes(b[1..5].try_into().unwrap());
                Ok(Message::InitPid(pid))
            }
            Some(&TAG_READY) if b.len() == 1 => Ok(Message::Ready),
            Some(&TAG_GO) if b.len() == 1 => Ok(Message::Go),
            Some(&TAG_HOOKS) if b.len() == 1 => Ok(Message::Hooks),
            Some(&TAG_HOOKS_DONE) if b.len() == 1 => Ok(Message::HooksDone),
            Some(&TAG_FAILED) if b.len() >= 8 => {
                let step = Step::from_u8(b[1]).ok_or_else(|| format!("unknown step {}", b[1]))?;
                let errno = i32::from_le_bytes(b[2..6].try_into().unwrap());
                let n = usize::from(u16::from_le_bytes(b[6..8].try_into().unwrap()));
                if 8 + n > b.len() {
                    return Err(format!(
                        "bad failure message: path of {n} bytes in {}",
                        b.len()
                    ));
                }
                let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
                Ok(Message::Failed {
                    step,
                    errno,
                    path: text(&b[8..8 + n]),
                    detail: text(&b[8 + n..]),
                })
            }
            Some(tag) => Err(format!("bad message: tag {tag}, {} bytes", b.len())),
            None => Err("empty message".into()),
        }
    }
}

/// Makes the socket pair: (main's receiving end, children's sending end). Both are
/// close-on-exec, so the container's process never inherits either.
pub(crate) fn pair() -> io::Result<(OwnedFd, OwnedFd)> {
    use nix::sys::socket::{socketpair, AddressFamily, SockFlag, SockType};
    let (a, b) = socketpair(
        AddressFamily::Unix,
        SockType::SeqPacket,
        None,
        SockFlag::SOCK_CLOEXEC,
    )?;
    Ok((a, b))
}

/// Sends one message from a child. `MSG_NOSIGNAL`: a main process that went away must
/// not kill the child with SIGPIPE before it can exit on its own terms.
pub(crate) fn send(sock: BorrowedFd<'_>, msg: &Message) -> io::Result<()> {
    let mut buf = [0u8; MAX_MESSAGE];
    let n = msg.encode(&mut buf);
    // SAFETY: send on a socket fd we hold, from a buffer of at least n bytes.
    let rc = unsafe { libc::send(sock.as_raw_fd(), buf.as_ptr().cast(), n, libc::MSG_NOSIGNAL) };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// What [`recv`] found on the socket.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Received {
    Message(Message),
    /// Every sending end is closed.
    Eof,
    /// Nothing yet (only with `nonblocking`).
    Empty,
}

/// Receives one message.
pub(crate) fn recv(sock: BorrowedFd<'_>, nonblocking: bool) -> io::Result<Received> {
    let mut buf = [0u8; MAX_MESSAGE + 1];
    let flags = if nonblocking { libc::MSG_DONTWAIT } else { 0 };
    loop {
        // SAFETY: recv into a buffer we own, of the length given.
        let rc = unsafe {
            libc::recv(
                sock.as_raw_fd(),
                buf.as_mut_ptr().cast(),
                buf.len(),
                flags | libc::MSG_CMSG_CLOEXEC,
            )
        };
        if rc < 0 {
            let e = io::Error::last_os_error();
            match e.raw_os_error() {
                Some(libc::EINTR) => continue,
                Some(libc::EAGAIN) if nonblocking => return Ok(Received::Empty),
                _ => return Err(e),
            }
        }
        if rc == 0 {
            return Ok(Received::Eof);
        }
        return Message::decode(&buf[..rc as usize])
            .map(Received::Message)
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsFd;

    #[test]
    fn messages_round_trip() {
        let msgs = [
            Message::InitPid(4242),
            Message::Go,
            Message::Ready,
            Message::Hooks,
            Message::HooksDone,
            Message::Failed {
                step: Step::Mount,
                errno: libc::ENOENT,
                path: "/proc".into(),
                detail: String::new(),
            },
            Message::Failed {
                step: Step::Capabilities,
                errno: 0,
                path: String::new(),
                detail: "capset failure".into(),
            },
        ];
        for m in msgs {
            let mut buf = [0u8; MAX_MESSAGE];
            let n = m.encode(&mut buf);
            assert_eq!(Message::decode(&buf[..n]).unwrap(), m);
        }
    }

    #[test]
    fn long_paths_are_cut_on_a_char_boundary() {
        let long = "é".repeat(MAX_PATH);
        let m = Message::Failed {
            step: Step::Mount,
            errno: 1,
            path: long.clone(),
            detail: long,
        };
        let mut buf = [0u8; MAX_MESSAGE];
        let n = m.encode(&mut buf);
        let Message::Failed { path, detail, .. } = Message::decode(&buf[..n]).unwrap() else {
            panic!()
        };
        for s in [path, detail] {
            assert_eq!(s.len(), MAX_PATH);
            assert!(s.chars().all(|c| c == 'é'));
        }
    }

    #[test]
    fn garbage_is_a_protocol_error() {
        assert!(Message::decode(&[]).is_err());
        assert!(Message::decode(&[TAG_INIT_PID, 1, 2]).is_err());
        assert!(Message::decode(&[TAG_READY, 0]).is_err());
        assert!(Message::decode(&[TAG_FAILED, 1, 0, 0, 0, 0, 9, 0]).is_err());
        assert!(Message::decode(&[TAG_FAILED, 255, 0, 0, 0, 0, 0, 0])
            .unwrap_err()
            .contains("unknown step 255"));
        assert!(Message::decode(&[99]).is_err());
    }

    #[test]
    fn every_step_has_a_unique_code_and_a_name() {
        let mut seen = std::collections::HashSet::new();
        for s in Step::ALL {
            assert_eq!(Step::from_u8(s as u8), Some(s));
            seen.insert(s as u8);
            assert!(!s.name().is_empty());
            assert_eq!(s.name(), s.name().to_lowercase());
        }
        assert_eq!(Step::from_u8(0), None);
    }

    #[test]
    fn send_and_recv_over_a_pair() {
        let (main, child) = pair().unwrap();
        assert_eq!(recv(main.as_fd(), true).unwrap(), Received::Empty);
        send(child.as_fd(), &Message::InitPid(7)).unwrap();
        send(child.as_fd(), &Message::Ready).unwrap();
        assert_eq!(
            recv(main.as_fd(), false).unwrap(),
            Received::Message(Message::InitPid(7))
        );
        assert_eq!(
            recv(main.as_fd(), true).unwrap(),
            Received::Message(Message::Ready)
        );
        drop(child);
        assert_eq!(recv(main.as_fd(), false).unwrap(), Received::Eof);
    }
}
