//! A created container as the state dir records it, and what can be done with it from
//! any process: start, signal, inspect, delete (and wait, from the init's parent).
//!
//! `state.json` is written to a temp file, fsynced and renamed, with a `version`. The
//! status is derived, not stored: the init alive (pid and start time) with the gate
//! fifo present is `created`, alive without it `running`, else `stopped`.

use std::fmt;
use std::fs::{self, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::ExitStatus;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

use super::{GATE, STATE};
use crate::error::{Error, Result};

const VERSION: u32 = 1;

/// How long [`Container::delete`] waits for a killed init to go.
const KILL_WAIT: Duration = Duration::from_secs(5);

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Status {
    /// The init waits on the gate.
    Created,
    /// Started: the container's command runs.
    Running,
    /// The init is gone (or a zombie).
    Stopped,
}

impl fmt::Display for Status {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Status::Created => "created",
            Status::Running => "running",
            Status::Stopped => "stopped",
        })
    }
}

/// A container [`create`](super::create) made, or [`Container::load`] read back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Container {
    pub id: String,
    pub state_dir: PathBuf,
    /// The init's pid in the PID namespace of whoever called `create`.
    pub pid: i32,
    /// The init's start time (clock ticks after boot, `/proc/PID/stat` field 22):
    /// with the pid, it names the process even after the pid is reused.
    pub start_time: u64,
    pub bundle: PathBuf,
    /// The root file system's host path.
    pub rootfs: PathBuf,
    pub created: SystemTime,
    pub started: Option<SystemTime>,
    /// The monitor's pid when one is the init's parent (see `MonitorOpts`).
    pub monitor: Option<i32>,
}

#[derive(Debug, Serialize, Deserialize)]
struct Record {
    version: u32,
    id: String,
    pid: i32,
    start_time: u64,
    bundle: PathBuf,
    rootfs: PathBuf,
    created_unix_nanos: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    started_unix_nanos: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    monitor: Option<i32>,
}

fn nanos(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0)
}

fn time(n: u64) -> SystemTime {
    UNIX_EPOCH + Duration::from_nanos(n)
}

pub(crate) use crate::proc::start_time;

impl Container {
    fn err(&self, step: &'static str, path: &Path, source: io::Error) -> Error {
        Error::Container {
            id: self.id.clone(),
            step,
            path: path.to_path_buf(),
            source,
        }
    }

    fn state_err(&self, op: &'static str) -> Error {
        Error::ContainerState {
            id: self.id.clone(),
            status: self.status(),
            op,
        }
    }

    /// Reads a container back from its state dir.
    pub fn load(state_dir: &Path) -> Result<Container> {
        let id = state_dir
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let path = state_dir.join(STATE);
        let err = |source| Error::Container {
            id: id.clone(),
            step: "read state",
            path: path.clone(),
            source,
        };
        let text = fs::read(&path).map_err(err)?;
        let r: Record = serde_json::from_slice(&text)
            .map_err(|e| err(io::Error::new(io::ErrorKind::InvalidData, e)))?;
        if r.version != VERSION {
            return Err(err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("version {} is not {VERSION}", r.version),
            )));
        }
        Ok(Container {
            id: r.id,
            state_dir: state_dir.to_path_buf(),
            pid: r.pid,
            start_time: r.start_time,
            bundle: r.bundle,
            rootfs: r.rootfs,
            created: time(r.created_unix_nanos),
            started: r.started_unix_nanos.map(time),
            monitor: r.monitor,
        })
    }

    /// Writes `state.json`: temp file, fsync, rename.
    pub(crate) fn save(&self) -> io::Result<()> {
        let r = Record {
            version: VERSION,
            id: self.id.clone(),
            pid: self.pid,
            start_time: self.start_time,
            bundle: self.bundle.clone(),
            rootfs: self.rootfs.clone(),
            created_unix_nanos: nanos(self.created),
            started_unix_nanos: self.started.map(nanos),
            monitor: self.monitor,
        };
        let tmp = self.state_dir.join(format!(".{STATE}.tmp"));
        let write = || -> io::Result<()> {
            let mut f = OpenOptions::new()
                .write(true)
                .create(true)
                .truncate(true)
                .mode(0o600)
                .open(&tmp)?;
            f.write_all(&serde_json::to_vec(&r)?)?;
            f.sync_all()?;
            fs::rename(&tmp, self.state_dir.join(STATE))
        };
        write().inspect_err(|_| {
            let _ = fs::remove_file(&tmp);
        })
    }

    /// True while the init (this pid with this start time) exists and is no zombie.
    pub fn alive(&self) -> bool {
        crate::proc::alive(self.pid, self.start_time)
    }

    /// `created` while the init waits at the gate: the gate is there and has a reader
    /// (the init holds it until `execve`, which closes it). A gate left without a
    /// reader means the init went through: a [`Container::start`] wrote its byte and
    /// was cut off (its process killed) before it removed the gate, so the container
    /// runs. Taking it for `created` left it there for good: every start then finds
    /// no reader (`ENXIO`) and fails.
    pub fn status(&self) -> Status {
        if !self.alive() {
            Status::Stopped
        } else if self.state_dir.join(GATE).exists() && !self.gate_passed() {
            Status::Created
        } else {
            Status::Running
        }
    }

    /// True when the gate FIFO has no reader any more (a non-blocking open for
    /// writing fails with `ENXIO`): the init is past it. Opening and closing a write
    /// end without writing is unseen by the init, which holds the FIFO read-write and
    /// so never reads an end of file.
    fn gate_passed(&self) -> bool {
        let r = OpenOptions::new()
            .write(true)
            .custom_flags(libc::O_NONBLOCK | libc::O_CLOEXEC)
            .open(self.state_dir.join(GATE));
        matches!(r, Err(e) if e.raw_os_error() == Some(libc::ENXIO))
    }

    /// Opens the gate: the init execs the container's command. Only from `created`.
    pub fn start(&mut self) -> Result<()> {
        if self.status() != Status::Created {
            return Err(self.state_err("start"));
        }
        let gate = self.state_dir.join(GATE);
        // Non-blocking: with the init gone there is no reader and this fails (ENXIO)
        // instead of waiting for one.
        let mut f = match OpenOptions::new()
            .write(true)
            .custom_flags(libc::O_NONBLOCK)
            .open(&gate)
        {
            Ok(f) => f,
            Err(e) if matches!(e.raw_os_error(), Some(libc::ENXIO) | Some(libc::ENOENT)) => {
                return Err(self.state_err("start"))
            }
            Err(e) => return Err(self.err("open gate", &gate, e)),
        };
        f.write_all(&[0])
            .map_err(|e| self.err("open gate", &gate, e))?;
        drop(f);
        match fs::remove_file(&gate) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(self.err("remove gate", &gate, e)),
        }
        self.started = Some(SystemTime::now());
        self.save()
            .map_err(|e| self.err("write state", &self.state_dir.join(STATE), e))?;
        tracing::debug!(id = self.id, pid = self.pid, "container started");
        Ok(())
    }

    /// Sends `signal` to the init; false when it was gone already. Through a pidfd
    /// opened before checking the start time, so a reused pid is never signalled.
    /// (A new PID namespace's init ignores signals it has no handler for, SIGKILL
    /// aside, as the kernel does for every namespace's pid 1.)
    pub fn kill(&self, signal: i32) -> Result<bool> {
        let err = |e| Error::Container {
            id: self.id.clone(),
            step: "signal",
            path: PathBuf::from(format!("/proc/{}", self.pid)),
            source: e,
        };
        crate::proc::signal(self.pid, self.start_time, signal).map_err(err)
    }

    /// Waits for the init to exit and reaps it. Only the process that called `create`
    /// is its parent; any other gets an error (ECHILD).
    pub fn wait(&self) -> Result<ExitStatus> {
        let err = |e| Error::Container {
            id: self.id.clone(),
            step: "wait",
            path: PathBuf::from(format!("/proc/{}", self.pid)),
            source: e,
        };
        if start_time(self.pid) != Some(self.start_time) {
            return Err(err(io::Error::from_raw_os_error(libc::ECHILD)));
        }
        loop {
            let mut st = 0;
            // SAFETY: waitpid on a pid whose start time we just checked.
            let rc = unsafe { libc::waitpid(self.pid, &mut st, 0) };
            if rc == self.pid {
                return Ok(ExitStatus::from_raw(st));
            }
            let e = io::Error::last_os_error();
            if e.raw_os_error() != Some(libc::EINTR) {
                return Err(err(e));
            }
        }
    }

    /// Removes the state dir. A container that is not stopped is refused, unless
    /// `force`: then its init is killed (SIGKILL) first. Reaps the init when this
    /// process is its parent. Unmounts nothing: the container's mounts die with its
    /// mount namespace.
    pub fn delete(self, force: bool) -> Result<()> {
        if self.alive() {
            if !force {
                return Err(self.state_err("delete"));
            }
            self.kill(libc::SIGKILL)?;
            let deadline = Instant::now() + KILL_WAIT;
            while self.alive() {
                if Instant::now() >= deadline {
                    return Err(self.err(
                        "kill",
                        Path::new(&format!("/proc/{}", self.pid)),
                        io::Error::from_raw_os_error(libc::ETIMEDOUT),
                    ));
                }
                std::thread::sleep(Duration::from_millis(2));
            }
        }
        if crate::proc::read_stat(self.pid)
            .is_some_and(|s| s.is_dead() && s.start_time == self.start_time)
        {
            // SAFETY: our zombie child (checked by start time) or not ours (ECHILD).
            unsafe { libc::waitpid(self.pid, std::ptr::null_mut(), libc::WNOHANG) };
        }
        match fs::remove_dir_all(&self.state_dir) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(self.err("remove state dir", &self.state_dir, e)),
        }
        tracing::debug!(id = self.id, "container deleted");
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tmp(tag: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("crust-state-unit-{tag}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&d);
        fs::create_dir_all(&d).unwrap();
        d
    }

    fn me(state_dir: PathBuf) -> Container {
        let pid = std::process::id() as i32;
        Container {
            id: "c1".into(),
            state_dir,
            pid,
            start_time: start_time(pid).unwrap(),
            bundle: "/b".into(),
            rootfs: "/b/rootfs".into(),
            created: time(1_700_000_000_123_456_789),
            started: None,
            monitor: None,
        }
    }

    #[test]
    fn state_round_trips_and_status_is_derived() {
        let d = tmp("roundtrip");
        let c = me(d.clone());
        c.save().unwrap();
        let back = Container::load(&d).unwrap();
        assert_eq!(back, c);
        // Alive (it is this test process) and no gate: running.
        assert_eq!(c.status(), Status::Running);
        fs::write(d.join(GATE), b"").unwrap();
        assert_eq!(c.status(), Status::Created);
        // A real gate: created while someone holds it to read (the init waiting),
        // running once nobody does (a start cut off after its write left it there).
        fs::remove_file(d.join(GATE)).unwrap();
        nix::unistd::mkfifo(
            &d.join(GATE),
            nix::sys::stat::Mode::from_bits_truncate(0o600),
        )
        .unwrap();
        let held = OpenOptions::new()
            .read(true)
            .write(true)
            .open(d.join(GATE))
            .unwrap();
        assert_eq!(c.status(), Status::Created);
        drop(held);
        assert_eq!(c.status(), Status::Running);
        let msg = c.clone().start().unwrap_err().to_string();
        assert_eq!(msg, "container c1 is running: cannot start");
        let other = Container {
            start_time: c.start_time + 1,
            ..c.clone()
        };
        assert_eq!(other.status(), Status::Stopped);
        assert!(
            !other.kill(0).unwrap(),
            "another start time is another process"
        );
        assert!(c.kill(0).unwrap());
        let e = other.clone().delete(false);
        assert!(e.is_ok(), "a stopped container deletes: {e:?}");
        assert!(!d.exists());
    }

    #[test]
    fn running_containers_are_not_deleted_or_started() {
        let d = tmp("refuse");
        let mut c = me(d.clone());
        c.save().unwrap();
        let msg = c.clone().delete(false).unwrap_err().to_string();
        assert_eq!(msg, "container c1 is running: cannot delete");
        let msg = c.start().unwrap_err().to_string();
        assert_eq!(msg, "container c1 is running: cannot start");
        fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn bad_state_files_name_the_path() {
        let d = tmp("bad");
        let msg = Container::load(&d).unwrap_err().to_string();
        assert!(msg.contains("read state") && msg.contains(STATE), "{msg}");
        fs::write(d.join(STATE), br#"{"version":9}"#).unwrap();
        assert!(Container::load(&d).is_err());
        fs::remove_dir_all(&d).unwrap();
    }
}
