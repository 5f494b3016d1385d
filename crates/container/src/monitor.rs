//! The container monitor ("shim"): the parent of a container's init, which writes the
//! container's stdout and stderr to its CRI log file and records how it exited. The
//! binary is `crust-monitor` from `crates/pause` (`no_std`, static, tens of KiB
//! resident), embedded here by `build.rs` and written to disk by [`install`]; its
//! command line and behaviour are documented in `crates/pause/src/monitor.rs`.
//!
//! When the container's init is gone the monitor writes an exit record, one line of
//! JSON, durably (temp file, fsync, rename), so [`read_exit`] sees either no file or a
//! whole record, also after a restart of `crustd`:
//!
//! ```text
//! {"pid":123,"exit_code":0,"signal":0,"finished_ns":1700000000000000000,"oom_killed":false}
//! ```

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::path::{Path, PathBuf};

use crate::embedded;
use crate::error::{Error, Result};

/// The monitor binary built from `crates/pause`.
pub const BINARY: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/crust-monitor"));

/// The name [`install`] gives it.
pub const FILE_NAME: &str = "crust-monitor";

/// Writes the embedded monitor binary to `dir/crust-monitor` (mode 0755), creating
/// `dir`, unless an identical file with that mode is already there; returns its path.
/// Like [`crate::pause::install`], it replaces an old file by a rename, so running
/// monitors keep theirs.
pub fn install(dir: &Path) -> Result<PathBuf> {
    embedded::install(dir, FILE_NAME, BINARY, "monitor")
}

/// The attach socket's name in a container's state dir.
pub const ATTACH_SOCKET: &str = "attach";

/// The first byte of each message from the attach socket: the stream of the bytes after it.
pub const ATTACH_STDOUT: u8 = 1;
pub const ATTACH_STDERR: u8 = 2;

/// A unix `SOCK_SEQPACKET` socket at `dir/name`, listening (`listen`) or connected.
/// Through `/proc/self/fd/N/name`, so a state dir deeper than `sun_path`'s 108 bytes
/// still works.
fn seqpacket(dir: &Path, name: &str, listen: bool) -> io::Result<OwnedFd> {
    let dirfd: OwnedFd = std::fs::File::open(dir)?.into();
    let path = format!("/proc/self/fd/{}/{name}", dirfd.as_raw_fd());
    // SAFETY: socket() with constant arguments; the fd is owned at once.
    let fd = unsafe { libc::socket(libc::AF_UNIX, libc::SOCK_SEQPACKET | libc::SOCK_CLOEXEC, 0) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: a fresh fd from the kernel.
    let sock = unsafe { OwnedFd::from_raw_fd(fd) };
    // SAFETY: a zeroed sockaddr_un is valid; the path (shorter than sun_path, checked)
    // is copied in with its NUL left in place.
    let rc = unsafe {
        let mut addr: libc::sockaddr_un = std::mem::zeroed();
        addr.sun_family = libc::AF_UNIX as libc::sa_family_t;
        if path.len() >= addr.sun_path.len() {
            return Err(io::Error::from_raw_os_error(libc::ENAMETOOLONG));
        }
        for (d, s) in addr.sun_path.iter_mut().zip(path.bytes()) {
            *d = s as libc::c_char;
        }
        let len = std::mem::size_of::<libc::sockaddr_un>() as libc::socklen_t;
        let a = &addr as *const libc::sockaddr_un as *const libc::sockaddr;
        if listen {
            libc::bind(fd, a, len)
        } else {
            libc::connect(fd, a, len)
        }
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    if listen {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600))?;
        // SAFETY: listen on the socket we own.
        if unsafe { libc::listen(fd, 4) } != 0 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(sock)
}

/// Makes the attach socket in `state_dir` (mode 0600) for a monitor to take (`-A`).
pub fn listen_attach(state_dir: &Path) -> io::Result<OwnedFd> {
    seqpacket(state_dir, ATTACH_SOCKET, true)
}

/// Connects to a container's attach socket in `state_dir`. Each message received is
/// [`ATTACH_STDOUT`] or [`ATTACH_STDERR`] and the bytes; each message sent is input
/// for the container's stdin (when it has one), and shutting down the sending side
/// ends this client's input (which closes the container's stdin with `stdin_once`).
pub fn connect_attach(state_dir: &Path) -> io::Result<OwnedFd> {
    seqpacket(state_dir, ATTACH_SOCKET, false)
}

/// How a container's init ended, as its monitor recorded it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Deserialize)]
pub struct ExitRecord {
    /// The init's pid (in the monitor's PID namespace); 0 when the monitor found no child.
    pub pid: i32,
    /// The exit status, or 128 + the signal that killed it; 255 when there was no child.
    pub exit_code: i32,
    /// The signal that killed it, or 0.
    pub signal: i32,
    /// CLOCK_REALTIME when the monitor reaped it, in nanoseconds since the epoch.
    pub finished_ns: i64,
    /// The `oom_kill` counter of the container's cgroup grew while it ran.
    pub oom_killed: bool,
}

/// Reads the exit record a monitor wrote at `path`; `None` while there is none (the
/// container still runs, or its monitor died before writing it).
pub fn read_exit(path: &Path) -> Result<Option<ExitRecord>> {
    let bytes = match std::fs::read(path) {
        Ok(b) => b,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(source) => {
            return Err(Error::ReadExit {
                path: path.to_path_buf(),
                source,
            })
        }
    };
    serde_json::from_slice(&bytes)
        .map(Some)
        .map_err(|source| Error::ParseExit {
            path: path.to_path_buf(),
            source,
        })
}

/// The monitor's pure logic, compiled here so `cargo test -p container` runs its tests.
/// (The binary's usage text and the like are unused here.)
#[cfg(test)]
#[path = "../../pause/src/monitor_core.rs"]
#[allow(dead_code)]
mod monitor_core;

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;
    use std::os::unix::fs::PermissionsExt;

    fn temp(tag: &str) -> PathBuf {
        let d =
            std::env::temp_dir().join(format!("crust-monitor-unit-{tag}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&d);
        fs::create_dir_all(&d).unwrap();
        d
    }

    /// The point of the no_std build: the embedded monitor stays small.
    #[test]
    fn embedded_binary_is_a_small_static_elf() {
        assert_eq!(&BINARY[..4], b"\x7fELF");
        assert!(BINARY.len() < 32 * 1024, "{} bytes", BINARY.len());
        // ET_EXEC: static and position dependent, no interpreter to load.
        assert_eq!(u16::from_le_bytes([BINARY[16], BINARY[17]]), 2);
    }

    #[test]
    fn install_writes_the_monitor() {
        let d = temp("install");
        let p = install(&d).unwrap();
        assert_eq!(p, d.join(FILE_NAME));
        assert_eq!(fs::read(&p).unwrap(), BINARY);
        assert_eq!(
            fs::metadata(&p).unwrap().permissions().mode() & 0o7777,
            0o755
        );
        assert_eq!(install(&d).unwrap(), p);

        let file = d.join(FILE_NAME).join("sub");
        let msg = install(&file).unwrap_err().to_string();
        assert!(
            msg.starts_with(&format!(
                "install monitor binary at {}",
                file.join(FILE_NAME).display()
            )),
            "{msg}"
        );
        fs::remove_dir_all(&d).unwrap();
    }

    /// What the monitor writes (`monitor_core::format_exit`) is what crustd reads.
    #[test]
    fn read_exit_parses_what_the_monitor_writes() {
        let d = temp("exit");
        let path = d.join("exit");
        assert_eq!(read_exit(&path).unwrap(), None);

        let exit = monitor_core::Exit {
            pid: 4242,
            exit_code: 137,
            signal: 9,
            finished_ns: 1_700_000_000_123_456_789,
            oom_killed: true,
        };
        let mut buf = [0u8; monitor_core::EXIT_MAX];
        let n = monitor_core::format_exit(&exit, &mut buf);
        fs::write(&path, &buf[..n]).unwrap();
        assert_eq!(
            read_exit(&path).unwrap(),
            Some(ExitRecord {
                pid: 4242,
                exit_code: 137,
                signal: 9,
                finished_ns: 1_700_000_000_123_456_789,
                oom_killed: true,
            })
        );

        fs::write(&path, b"{\"pid\":1").unwrap();
        let msg = read_exit(&path).unwrap_err().to_string();
        assert!(
            msg.starts_with(&format!("parse exit record {}: ", path.display())),
            "{msg}"
        );
        let msg = read_exit(&d).unwrap_err().to_string();
        assert!(
            msg.starts_with(&format!("read exit record {}: ", d.display())),
            "{msg}"
        );
        fs::remove_dir_all(&d).unwrap();
    }
}
