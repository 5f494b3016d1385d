//! A process named by pid *and* start time (`/proc/PID/stat` field 22): the pause, a
//! container's init, its monitor. A pid alone can be reused; the pair cannot, so every
//! check and every signal here goes through it.

use std::fs;
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};

/// The parts of `/proc/PID/stat` crust needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Stat {
    pub state: char,
    pub start_time: u64,
}

impl Stat {
    /// A zombie (or a task being torn down) is gone for our purposes: it runs nothing
    /// and holds no namespace; only its parent's wait is missing.
    pub fn is_dead(&self) -> bool {
        matches!(self.state, 'Z' | 'X' | 'x')
    }
}

/// Parses `/proc/PID/stat`. The command name (field 2) is in parentheses and may hold
/// spaces and parentheses itself, so fields are counted from the last `)`.
pub(crate) fn parse_stat(s: &str) -> Option<Stat> {
    let rest = &s[s.rfind(')')? + 1..];
    let mut fields = rest.split_ascii_whitespace();
    // Fields 3 (state) to 22 (starttime).
    let state = fields.next()?.chars().next()?;
    let start_time = fields.nth(22 - 4)?.parse().ok()?;
    Some(Stat { state, start_time })
}

pub(crate) fn read_stat(pid: i32) -> Option<Stat> {
    if pid <= 0 {
        return None;
    }
    parse_stat(&fs::read_to_string(format!("/proc/{pid}/stat")).ok()?)
}

/// The start time of process `pid`, zombie or not; `None` when there is none.
pub fn start_time(pid: i32) -> Option<u64> {
    read_stat(pid).map(|s| s.start_time)
}

/// True when process `pid` exists, started at `start_time`, and is not a zombie.
/// A pid of 0 or below is never alive (so it can never reach `kill`).
///
/// Only a missing `/proc/PID` says a process is gone: a read that fails otherwise
/// (EMFILE or ENFILE at the fd limit, ENOMEM) tells nothing, and the process is taken
/// as alive. Taking it for gone marked a running container exited and killed what was
/// left in its cgroup (issue 14).
pub fn alive(pid: i32, start_time: u64) -> bool {
    if pid <= 0 {
        return false;
    }
    match fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(s) => parse_stat(&s).is_some_and(|s| s.start_time == start_time && !s.is_dead()),
        Err(e) => !gone(&e),
    }
}

/// A pidfd of process `pid`: a handle that names this process for good, however soon
/// its pid is reused.
pub fn pidfd_open(pid: i32) -> io::Result<OwnedFd> {
    // SAFETY: pidfd_open takes a pid and flags and returns a new fd or -1.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: the kernel just gave us this fd; nobody else owns it.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as i32) })
}

/// A pidfd of `pid`, an unreaped child of ours that must be waited on through it.
/// Without one (EMFILE at the fd limit) the child is killed and reaped here: left
/// running, its zombie would stay in its PID namespace, and when that is a pod's, the
/// pod's pause (the namespace's init) would never finish dying on StopPodSandbox
/// ("still alive after SIGKILL": an init's exit waits for every process of its
/// namespace to be reaped).
pub fn pidfd_or_reap(pid: i32) -> io::Result<OwnedFd> {
    let fd = pidfd_open(pid);
    if fd.is_err() && pid > 0 {
        // SAFETY: our own unreaped child: its pid cannot name another process yet.
        unsafe {
            libc::kill(pid, libc::SIGKILL);
            libc::waitpid(pid, std::ptr::null_mut(), 0);
        }
    }
    fd
}

/// Whether an error of pidfd_open, pidfd_send_signal or kill says the process is gone:
/// ESRCH, or ENOENT, which a 6.18 kernel gave for a pause already reaped.
pub fn gone(e: &io::Error) -> bool {
    matches!(e.raw_os_error(), Some(libc::ESRCH | libc::ENOENT))
}

/// Sends `signal` to the process behind `pidfd` (ESRCH once it is gone).
pub fn pidfd_signal(pidfd: BorrowedFd<'_>, signal: i32) -> io::Result<()> {
    // SAFETY: pidfd_send_signal on a valid fd, no siginfo, no flags.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_pidfd_send_signal,
            pidfd.as_raw_fd(),
            signal,
            std::ptr::null::<libc::siginfo_t>(),
            0,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Reaps the caller's child behind `pidfd` (waiting for it unless `nohang`): its exit
/// code as shells and containerd report it (the status, or 128 + the signal), `None`
/// when there was nothing to reap.
pub fn pidfd_reap(pidfd: BorrowedFd<'_>, nohang: bool) -> Option<i32> {
    let flags = libc::WEXITED | if nohang { libc::WNOHANG } else { 0 };
    // SAFETY: waitid on a pidfd into a zeroed siginfo we own.
    unsafe {
        let mut info: libc::siginfo_t = std::mem::zeroed();
        if libc::waitid(
            libc::P_PIDFD,
            pidfd.as_raw_fd() as libc::id_t,
            &mut info,
            flags,
        ) != 0
        {
            return None;
        }
        if info.si_pid() == 0 {
            return None;
        }
        let status = info.si_status();
        Some(match info.si_code {
            libc::CLD_EXITED => status,
            _ => 128 + status,
        })
    }
}

/// Sends `signal` to the process `pid` started at `start_time`; false when it was gone
/// already. Through a pidfd opened *before* the start time is checked, so a pid reused
/// in between is never signalled.
pub fn signal(pid: i32, start_time: u64, signal: i32) -> io::Result<bool> {
    if pid <= 0 {
        return Ok(false);
    }
    let pidfd = match pidfd_open(pid) {
        Ok(fd) => fd,
        Err(e) if gone(&e) => return Ok(false),
        Err(e) => return Err(e),
    };
    if !alive(pid, start_time) {
        return Ok(false);
    }
    match pidfd_signal(pidfd.as_fd(), signal) {
        Ok(()) => Ok(true),
        Err(e) if gone(&e) => Ok(false),
        Err(e) => Err(e),
    }
}

/// Whether a signal sent now to `pid` would be thrown away: the process is the init
/// of a PID namespace of its own (the last `NSpid` is 1) and has no handler for
/// `signal` (`SigCgt`). The kernel discards such a signal whoever sends it (SIGKILL and
/// SIGSTOP excepted), even when it was blocked at the time; so a stop signal sent to a
/// container's init before the program installed its handler (a stop right after the
/// start) is lost, not late. `None`: the process cannot be read (gone).
pub fn drops_signal(pid: i32, signal: i32) -> Option<bool> {
    if signal == libc::SIGKILL || signal == libc::SIGSTOP || !(1..=64).contains(&signal) {
        return Some(false);
    }
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    Some(status_drops_signal(&status, signal))
}

fn status_drops_signal(status: &str, signal: i32) -> bool {
    let field = |k: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(k))
            .map(str::trim)
    };
    let ns_init = field("NSpid:")
        .and_then(|v| v.split_whitespace().last())
        .is_some_and(|last| last == "1");
    let caught = field("SigCgt:")
        .and_then(|v| u64::from_str_radix(v, 16).ok())
        .is_some_and(|mask| mask & (1u64 << (signal - 1)) != 0);
    ns_init && !caught
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_namespace_init_without_a_handler_drops_the_signal() {
        let st = |nspid: &str, cgt: &str| format!("Name:\tx\nNSpid:\t{nspid}\nSigCgt:\t{cgt}\n");
        // SIGTERM is 15: bit 14 (0x4000).
        assert!(status_drops_signal(
            &st("4242\t1", "0000000000000000"),
            libc::SIGTERM
        ));
        assert!(!status_drops_signal(
            &st("4242\t1", "0000000000004000"),
            libc::SIGTERM
        ));
        assert!(!status_drops_signal(
            &st("4242\t7", "0000000000000000"),
            libc::SIGTERM
        ));
        assert!(!status_drops_signal(
            &st("4242", "0000000000000000"),
            libc::SIGTERM
        ));
        assert_eq!(
            drops_signal(std::process::id() as i32, libc::SIGKILL),
            Some(false)
        );
        assert_eq!(drops_signal(1 << 23, libc::SIGTERM), None);
    }

    #[test]
    fn parse_stat_counts_fields_after_the_last_paren() {
        let line = "4242 (we ird) (name) S 1 4242 4242 0 -1 4194560 95 0 0 0 0 0 0 0 \
                    20 0 1 0 987654 1585152 3 18446744073709551615 1 1 0 0 0 0 \
                    4294967295 0 0 0 0 0 17 1 0 0 0 0 0\n";
        assert_eq!(
            parse_stat(line),
            Some(Stat {
                state: 'S',
                start_time: 987654
            })
        );
        assert_eq!(parse_stat("12 (x) Z 1"), None);
        assert_eq!(parse_stat("garbage"), None);
    }

    #[test]
    fn alive_checks_start_time_and_refuses_non_positive_pids() {
        let me = std::process::id() as i32;
        let st = start_time(me).unwrap();
        assert!(alive(me, st));
        assert!(!alive(me, st + 1), "another start time is another process");
        assert!(!alive(0, 0));
        assert!(!alive(-1, st));
        assert!(!alive(1 << 23, 0));
        // Signal 0: a check that reaches only the process meant.
        assert!(signal(me, st, 0).unwrap());
        assert!(!signal(me, st + 1, 0).unwrap());
        assert!(!signal(0, 0, 0).unwrap());
    }
}
