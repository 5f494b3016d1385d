//! End-to-end tests of the container monitor (`crust-monitor`, installed through
//! `container::monitor::install`), started the way the executor starts it: a process
//! whose one child is the "container", which then `exec`s the monitor. Here that
//! process is `sh -c 'CHILD >&5 2>&6 & exec crust-monitor ...'`, with the pipes' read
//! ends on fds 3 and 4 and their write ends (the container's stdout and stderr) on 5
//! and 6; the background child of `sh` is the monitor's child after the exec.
//!
//! Nothing here needs root. Every monitor is killed by a guard, also when a test
//! panics, and the "container" processes wait on a `go` file the guard creates, so
//! none is left behind.

use container::monitor::{self, ExitRecord};
use crust_e2e::TempDir;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

// ---------------------------------------------------------------------------------------
// Helpers

/// How long any wait of these tests may take before it is a failure.
const TIMEOUT: Duration = Duration::from_secs(10);

/// A pipe, both ends close-on-exec: (read, write).
fn pipe() -> (OwnedFd, OwnedFd) {
    let mut fds = [0; 2];
    // SAFETY: pipe2 writes two fds into the array.
    let rc = unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) };
    assert_eq!(rc, 0, "pipe2: {}", std::io::Error::last_os_error());
    // SAFETY: the kernel just gave us these fds.
    unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) }
}

/// A pty: (master, slave), both close-on-exec.
fn pty() -> (OwnedFd, OwnedFd) {
    // SAFETY: plain libc calls on an fd we own; ptsname_r writes into `name`.
    unsafe {
        let m = libc::posix_openpt(libc::O_RDWR | libc::O_NOCTTY | libc::O_CLOEXEC);
        assert!(m >= 0, "posix_openpt: {}", std::io::Error::last_os_error());
        let master = OwnedFd::from_raw_fd(m);
        assert_eq!(libc::grantpt(m), 0);
        assert_eq!(libc::unlockpt(m), 0);
        let mut name = [0 as libc::c_char; 64];
        assert_eq!(libc::ptsname_r(m, name.as_mut_ptr(), name.len()), 0);
        let s = libc::open(
            name.as_ptr(),
            libc::O_RDWR | libc::O_NOCTTY | libc::O_CLOEXEC,
        );
        assert!(
            s >= 0,
            "open pty slave: {}",
            std::io::Error::last_os_error()
        );
        (master, OwnedFd::from_raw_fd(s))
    }
}

/// One monitor under test, with the paths it was given. Drop kills it and lets the
/// "container" go.
struct Monitor {
    process: Child,
    dir: PathBuf,
    exit: PathBuf,
    log: PathBuf,
    go: PathBuf,
    started: SystemTime,
}

impl Monitor {
    fn pid(&self) -> i32 {
        self.process.id() as i32
    }

    fn signal(&self, sig: libc::c_int) {
        // SAFETY: kill on the pid of our own child, which is not reaped yet.
        assert_eq!(unsafe { libc::kill(self.pid(), sig) }, 0);
    }

    fn alive(&mut self) -> bool {
        self.process.try_wait().unwrap().is_none()
    }

    /// Lets a child waiting on `go` (see `WAIT_GO`) carry on.
    fn go(&self) {
        std::fs::write(&self.go, b"").unwrap();
    }

    /// Waits for the monitor to exit; checks the exit file is complete and alone.
    fn wait(&mut self) -> (ExitStatus, ExitRecord) {
        let deadline = Instant::now() + TIMEOUT;
        let status = loop {
            if let Some(s) = self.process.try_wait().unwrap() {
                break s;
            }
            assert!(Instant::now() < deadline, "monitor still running");
            std::thread::sleep(Duration::from_millis(5));
        };
        let record = monitor::read_exit(&self.exit)
            .unwrap()
            .expect("no exit record");
        let mut tmp = self.exit.clone().into_os_string();
        tmp.push(".tmp");
        assert!(!Path::new(&tmp).exists(), "temp exit record left behind");
        (status, record)
    }

    /// The log's records, once `pred` holds for them (or panics after TIMEOUT).
    fn log_until(&self, what: &str, pred: impl Fn(&[Rec]) -> bool) -> Vec<Rec> {
        let deadline = Instant::now() + TIMEOUT;
        loop {
            // Only whole records: one may be half written as we read.
            let mut bytes = std::fs::read(&self.log).unwrap_or_default();
            bytes.truncate(bytes.iter().rposition(|&b| b == b'\n').map_or(0, |i| i + 1));
            let recs = records(&bytes);
            if pred(&recs) {
                return recs;
            }
            assert!(Instant::now() < deadline, "log never had {what}: {recs:?}");
            std::thread::sleep(Duration::from_millis(5));
        }
    }
}

impl Drop for Monitor {
    fn drop(&mut self) {
        let _ = std::fs::write(&self.go, b"");
        if self.alive() {
            let _ = self.process.kill();
            let _ = self.process.wait();
        }
    }
}

/// The monitor, installed once for all the tests of this process before any of them
/// spawns anything: a write fd of a binary being installed that leaks into a process
/// another test thread forks at that moment makes `exec` of it fail with ETXTBSY.
fn binary() -> &'static Path {
    static BINARY: OnceLock<PathBuf> = OnceLock::new();
    BINARY.get_or_init(|| {
        let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("monitor-test-bin");
        // In hack/vm-test's VM the build tree is the host's, mounted read-only: there
        // the binary goes to the VM's own temp dir (the suite used to pass there only
        // when a host run had installed it first).
        monitor::install(&dir)
            .or_else(|_| monitor::install(&std::env::temp_dir().join("crust-monitor-test-bin")))
            .expect("install monitor")
    })
}

/// Shell words that make a child wait until the test calls [`Monitor::go`], or until
/// the test's temp dir is gone: a child that outlives its monitor (a daemonised
/// grandchild) must not wait forever when the go file went with the dir before the
/// child looked.
const WAIT_GO: &str = "while [ ! -e \"$GO\" ] && [ -d \"${GO%/*}\" ]; do sleep 0.01; done";

/// Starts `sh -c 'SCRIPT'` with `fds` on 3, 4, ... and `$GO` set; SCRIPT ends in
/// `exec "$0" "$@"`, which runs the monitor with `-e DIR/exit` and `args`.
fn spawn(tmp: &TempDir, script: &str, fds: Vec<OwnedFd>, args: &[&str]) -> Monitor {
    spawn_as(tmp, script, fds, args, false)
}

/// [`spawn`], and with `subreaper` the monitor is a child subreaper (as under an
/// external OCI runtime), so orphans of the container become its children.
fn spawn_as(
    tmp: &TempDir,
    script: &str,
    fds: Vec<OwnedFd>,
    args: &[&str],
    subreaper: bool,
) -> Monitor {
    let dir = tmp.path().to_path_buf();
    let binary = binary();
    let exit = dir.join("exit");
    let log = dir.join("container.log");
    let go = dir.join("go");
    let _ = std::fs::remove_file(&go);
    let mut cmd = Command::new("sh");
    cmd.arg("-c")
        .arg(script)
        .arg(binary)
        .arg("-e")
        .arg(&exit)
        .args(args)
        .env("GO", &go)
        .env("LOG", &log)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    let raw: Vec<RawFd> = fds.iter().map(|f| f.as_raw_fd()).collect();
    // SAFETY: between fork and exec the closure only calls prctl, fcntl and dup2, which
    // are async-signal-safe, on fds that stay open in the parent until after the spawn.
    unsafe {
        cmd.pre_exec(move || {
            if subreaper && libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            // Out of the way of 3, 4, ... first (the originals may sit there), then in
            // place; dup2 clears close-on-exec on the copies only.
            let mut high = [0; 8];
            for (i, &fd) in raw.iter().enumerate() {
                high[i] = libc::fcntl(fd, libc::F_DUPFD_CLOEXEC, 100);
                if high[i] < 0 {
                    return Err(std::io::Error::last_os_error());
                }
            }
            for (i, &fd) in high[..raw.len()].iter().enumerate() {
                if libc::dup2(fd, 3 + i as RawFd) < 0 {
                    return Err(std::io::Error::last_os_error());
                }
            }
            Ok(())
        });
    }
    let started = SystemTime::now();
    let process = cmd.spawn().expect("spawn sh");
    drop(fds);
    Monitor {
        process,
        dir,
        exit,
        log,
        go,
        started,
    }
}

/// The usual setup: `child`'s stdout and stderr are pipes the monitor reads as `-o 3
/// -r 4`, and it logs to `$LOG`.
fn start(tmp: &TempDir, child: &str, extra: &[&str]) -> Monitor {
    let (out_r, out_w) = pipe();
    let (err_r, err_w) = pipe();
    let script =
        format!("{{ {child}\n}} >&5 2>&6 3<&- 4<&- 5>&- 6>&- &\nexec 5>&- 6>&- \"$0\" \"$@\"");
    let tmp_log = tmp.path().join("container.log");
    let mut args = vec!["-l", tmp_log.to_str().unwrap(), "-o", "3", "-r", "4"];
    args.extend_from_slice(extra);
    spawn(tmp, &script, vec![out_r, err_r, out_w, err_w], &args)
}

/// One record of a CRI log file.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Rec {
    time_ns: i64,
    stream: String,
    tag: char,
    text: String,
}

/// Parses a CRI log file, checking the format of every record strictly.
fn records(bytes: &[u8]) -> Vec<Rec> {
    let s = std::str::from_utf8(bytes).expect("log is not UTF-8");
    if s.is_empty() {
        return Vec::new();
    }
    assert!(s.ends_with('\n'), "log does not end with a newline: {s:?}");
    s[..s.len() - 1]
        .split('\n')
        .map(|line| {
            let mut f = line.splitn(4, ' ');
            let (time, stream, tag, text) = (
                f.next().unwrap(),
                f.next().expect("no stream"),
                f.next().expect("no tag"),
                f.next().expect("no text"),
            );
            assert!(
                stream == "stdout" || stream == "stderr",
                "stream {stream:?} in {line:?}"
            );
            assert!(tag == "F" || tag == "P", "tag {tag:?} in {line:?}");
            Rec {
                time_ns: parse_rfc3339_nano(time),
                stream: stream.to_string(),
                tag: tag.chars().next().unwrap(),
                text: text.to_string(),
            }
        })
        .collect()
}

/// Nanoseconds since the epoch of a time as Go's `time.RFC3339Nano` writes it in UTC
/// (`2026-11-23T12:34:56.123456789Z`, no trailing zeros in the fraction); panics on
/// anything else.
fn parse_rfc3339_nano(t: &str) -> i64 {
    let bad = || panic!("not an RFC3339Nano UTC time: {t:?}");
    let b = t.as_bytes();
    if b.len() < 20 || !t.ends_with('Z') {
        bad();
    }
    for (i, &c) in b[..19].iter().enumerate() {
        let ok = match i {
            4 | 7 => c == b'-',
            10 => c == b'T',
            13 | 16 => c == b':',
            _ => c.is_ascii_digit(),
        };
        if !ok {
            bad();
        }
    }
    let num = |r: std::ops::Range<usize>| t[r].parse::<i64>().unwrap();
    let (y, mo, d) = (num(0..4), num(5..7), num(8..10));
    let (h, mi, s) = (num(11..13), num(14..16), num(17..19));
    assert!((1..=12).contains(&mo) && (1..=31).contains(&d) && h < 24 && mi < 60 && s < 60);
    let frac = &t[19..t.len() - 1];
    let nanos = if frac.is_empty() {
        0
    } else {
        let digits = frac.strip_prefix('.').unwrap_or_else(bad);
        if digits.is_empty()
            || digits.len() > 9
            || digits.ends_with('0')
            || !digits.bytes().all(|c| c.is_ascii_digit())
        {
            bad();
        }
        format!("{digits:0<9}").parse::<i64>().unwrap()
    };
    // Days from 1970-01-01 to y-mo-d (proleptic Gregorian, years counted from March).
    let (y, m) = if mo <= 2 {
        (y - 1, mo + 9)
    } else {
        (y, mo - 3)
    };
    let era = y.div_euclid(400);
    let yoe = y.rem_euclid(400);
    let doy = (153 * m + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    (days * 86_400 + h * 3600 + mi * 60 + s) * 1_000_000_000 + nanos
}

fn ns(t: SystemTime) -> i64 {
    t.duration_since(UNIX_EPOCH).unwrap().as_nanos() as i64
}

/// `VmRSS` of a process in KiB.
fn rss_kib(pid: i32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let v = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .expect("no VmRSS");
    v.trim().trim_end_matches("kB").trim().parse().unwrap()
}

/// The file names in a directory, sorted.
fn names(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

fn texts(recs: &[Rec], stream: &str) -> Vec<(char, String)> {
    recs.iter()
        .filter(|r| r.stream == stream)
        .map(|r| (r.tag, r.text.clone()))
        .collect()
}

// ---------------------------------------------------------------------------------------
// Tests

#[test]
fn stdout_and_stderr_become_cri_records_and_exit_0_is_recorded() {
    let tmp = TempDir::new("mon");
    let mut m = start(
        &tmp,
        "echo 'hello world'; echo oops >&2; echo; echo '  two  spaces '",
        &[],
    );
    let (status, rec) = m.wait();
    let end = SystemTime::now();
    assert!(status.success(), "monitor {status}");
    assert_eq!((rec.exit_code, rec.signal, rec.oom_killed), (0, 0, false));
    assert!(rec.pid > 0 && rec.pid != m.pid(), "pid {}", rec.pid);
    assert!(
        (ns(m.started)..=ns(end)).contains(&rec.finished_ns),
        "finished_ns {} not while the test ran",
        rec.finished_ns
    );

    let recs = records(&std::fs::read(&m.log).unwrap());
    assert_eq!(
        texts(&recs, "stdout"),
        [
            ('F', "hello world".into()),
            ('F', String::new()),
            ('F', "  two  spaces ".into())
        ]
    );
    assert_eq!(texts(&recs, "stderr"), [('F', "oops".into())]);
    // Output still in the pipe at the exit is read (and stamped) after the reap.
    for r in &recs {
        assert!(
            (ns(m.started)..=ns(end)).contains(&r.time_ns),
            "record time {} not while the test ran: {r:?}",
            r.time_ns
        );
    }
    assert_eq!(names(&m.dir), ["container.log", "exit"]);
    // The log file's mode: 0640 less the umask (which never takes owner bits).
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(&m.log).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode & !0o640, 0, "log mode {mode:o}");
    assert_eq!(mode & 0o600, 0o600, "log mode {mode:o}");
}

#[test]
fn exit_code_3() {
    let tmp = TempDir::new("mon");
    let mut m = start(&tmp, "exit 3", &[]);
    let (status, rec) = m.wait();
    assert!(status.success());
    assert_eq!((rec.exit_code, rec.signal, rec.oom_killed), (3, 0, false));
    assert_eq!(std::fs::read(&m.log).unwrap(), b"");
}

#[test]
fn death_by_sigkill_is_137_and_signal_9() {
    let tmp = TempDir::new("mon");
    let mut m = start(&tmp, "echo before; exec sh -c 'kill -KILL $$'", &[]);
    let (_, rec) = m.wait();
    assert_eq!((rec.exit_code, rec.signal), (137, 9));
    let recs = records(&std::fs::read(&m.log).unwrap());
    assert_eq!(texts(&recs, "stdout"), [('F', "before".into())]);
}

#[test]
fn a_40k_line_is_two_partials_and_a_full_record() {
    let tmp = TempDir::new("mon");
    // 40 KiB of a, ..., z repeated, then a newline and one more line.
    let mut m = start(
        &tmp,
        "i=0; while [ $i -lt 1575 ]; do printf abcdefghijklmnopqrstuvwxyz; i=$((i+1)); done; \
         printf abcdefghij; echo; echo after",
        &[],
    );
    let (_, rec) = m.wait();
    assert_eq!(rec.exit_code, 0);
    let recs = records(&std::fs::read(&m.log).unwrap());
    let out = texts(&recs, "stdout");
    let tags: String = out.iter().map(|r| r.0).collect();
    assert_eq!(
        tags,
        "PPFF",
        "{:?}",
        out.iter().map(|r| (r.0, r.1.len())).collect::<Vec<_>>()
    );
    assert_eq!(out[0].1.len(), 16 * 1024);
    assert_eq!(out[1].1.len(), 16 * 1024);
    let line: String = out[..3].iter().map(|r| r.1.as_str()).collect();
    let want: String = "abcdefghijklmnopqrstuvwxyz"
        .chars()
        .cycle()
        .take(40 * 1024)
        .collect();
    assert_eq!(line.len(), 40 * 1024);
    assert!(line == want, "the pieces do not make the line");
    assert_eq!(out[3], ('F', "after".into()));
}

/// A line the stream's end cuts before its newline is a `P` record, as containerd
/// writes it: the kubelet gives `echo -n DONE` back as `DONE`, without a newline.
#[test]
fn an_unterminated_last_line_is_a_partial_record() {
    let tmp = TempDir::new("mon");
    let mut m = start(&tmp, "printf 'one\\ntwo'; printf 'e1\\ne2' >&2", &[]);
    m.wait();
    let recs = records(&std::fs::read(&m.log).unwrap());
    assert_eq!(
        texts(&recs, "stdout"),
        [('F', "one".into()), ('P', "two".into())]
    );
    assert_eq!(
        texts(&recs, "stderr"),
        [('F', "e1".into()), ('P', "e2".into())]
    );
}

/// ReopenContainerLog: the kubelet renames the file, crustd sends SIGUSR1 and waits for
/// the path to exist again.
#[test]
fn sigusr1_reopens_the_log_after_a_rename() {
    let tmp = TempDir::new("mon");
    let mut m = start(
        &tmp,
        &format!("echo first; {WAIT_GO}; echo second >&2; echo third"),
        &[],
    );
    m.log_until("first", |r| r.iter().any(|r| r.text == "first"));
    let old = tmp.path().join("container.log.1");
    std::fs::rename(&m.log, &old).unwrap();
    m.signal(libc::SIGUSR1);
    let deadline = Instant::now() + TIMEOUT;
    while !m.log.exists() {
        assert!(Instant::now() < deadline, "log not reopened");
        std::thread::sleep(Duration::from_millis(2));
    }
    m.go();
    let (status, rec) = m.wait();
    assert!(status.success());
    assert_eq!(rec.exit_code, 0);
    let before = records(&std::fs::read(&old).unwrap());
    let after = records(&std::fs::read(&m.log).unwrap());
    assert_eq!(texts(&before, "stdout"), [('F', "first".into())]);
    assert_eq!(texts(&before, "stderr"), []);
    assert_eq!(texts(&after, "stdout"), [('F', "third".into())]);
    assert_eq!(texts(&after, "stderr"), [('F', "second".into())]);
}

/// crustd stops containers by signalling them; the monitor outlives such signals.
#[test]
fn sigterm_sigint_and_sighup_to_the_monitor_are_ignored() {
    let tmp = TempDir::new("mon");
    let mut m = start(&tmp, &format!("echo ready; {WAIT_GO}; exit 7"), &[]);
    m.log_until("ready", |r| !r.is_empty());
    for sig in [libc::SIGTERM, libc::SIGINT, libc::SIGHUP] {
        m.signal(sig);
    }
    std::thread::sleep(Duration::from_millis(200));
    assert!(m.alive(), "the monitor died of a signal it should ignore");
    assert!(!m.exit.exists());
    m.go();
    let (status, rec) = m.wait();
    assert!(status.success());
    assert_eq!(rec.exit_code, 7);
}

#[test]
fn the_monitor_stays_small_and_in_its_own_session() {
    let tmp = TempDir::new("mon");
    let mut m = start(
        &tmp,
        &format!(
            "i=0; while [ $i -lt 2000 ]; do echo \"line $i of some output\"; i=$((i+1)); done; \
             echo ready >&2; {WAIT_GO}"
        ),
        &[],
    );
    m.log_until("ready", |r| r.iter().any(|r| r.text == "ready"));
    let rss = rss_kib(m.pid());
    println!("monitor VmRSS: {rss} KiB");
    assert!(rss < 200, "monitor VmRSS {rss} KiB");
    // SAFETY: getsid has no preconditions.
    let sid = unsafe { libc::getsid(m.pid()) };
    assert_eq!(sid, m.pid(), "the monitor leads its own session");
    m.go();
    let (_, rec) = m.wait();
    assert_eq!(rec.exit_code, 0);
    let recs = records(&std::fs::read(&m.log).unwrap());
    assert_eq!(texts(&recs, "stdout").len(), 2000);
}

/// `-m` names memory.events (v2) or memory.oom_control (v1); its `oom_kill` counter
/// growing while the container ran means the container was OOM killed.
#[test]
fn a_grown_oom_kill_counter_means_oom_killed() {
    for (grow, content) in [
        (
            true,
            "low 0\nhigh 0\nmax 0\noom 0\noom_kill {}\noom_group_kill 0\n",
        ),
        (false, "oom_kill_disable 0\nunder_oom 0\noom_kill {}\n"),
    ] {
        let tmp = TempDir::new("mon");
        let events = tmp.path().join("memory.events");
        std::fs::write(&events, content.replace("{}", "0")).unwrap();
        let mut m = start(
            &tmp,
            &format!("echo ready; {WAIT_GO}; exec sh -c 'kill -KILL $$'"),
            &["-m", events.to_str().unwrap()],
        );
        m.log_until("ready", |r| !r.is_empty());
        if grow {
            std::fs::write(&events, content.replace("{}", "1")).unwrap();
        }
        m.go();
        let (_, rec) = m.wait();
        assert_eq!((rec.exit_code, rec.signal), (137, 9));
        assert_eq!(rec.oom_killed, grow, "{content:?}");
    }
}

#[test]
fn no_child_is_exit_code_255() {
    let tmp = TempDir::new("mon");
    let mut m = spawn(&tmp, "exec \"$0\" \"$@\"", vec![], &[]);
    let (status, rec) = m.wait();
    assert!(status.success());
    assert_eq!(
        (rec.pid, rec.exit_code, rec.signal, rec.oom_killed),
        (0, 255, 0, false)
    );
    assert_eq!(names(&m.dir), ["exit"]);
}

/// A daemonised grandchild keeps the pipe open: the record must not wait for its EOF.
#[test]
fn the_record_does_not_wait_for_a_grandchild_holding_the_pipes() {
    let tmp = TempDir::new("mon");
    let mut m = start(
        &tmp,
        &format!("({WAIT_GO}) & echo done; printf unfinished; exit 4"),
        &[],
    );
    let (_, rec) = m.wait();
    assert_eq!(rec.exit_code, 4);
    let recs = records(&std::fs::read(&m.log).unwrap());
    // The line the exit left without its newline is cut there: a partial record.
    assert_eq!(
        texts(&recs, "stdout"),
        [('F', "done".into()), ('P', "unfinished".into())]
    );
}

/// Without `-l` the output is read and dropped; the child never blocks on it.
#[test]
fn without_a_log_output_is_drained_and_dropped() {
    let tmp = TempDir::new("mon");
    let (out_r, out_w) = pipe();
    // 1 MiB: far more than a pipe holds.
    let script = "{ head -c 1048576 /dev/zero; exit 5\n} >&4 3<&- 4>&- &\nexec 4>&- \"$0\" \"$@\"";
    let mut m = spawn(&tmp, script, vec![out_r, out_w], &["-o", "3"]);
    let (_, rec) = m.wait();
    assert_eq!(rec.exit_code, 5);
    assert_eq!(names(&m.dir), ["exit"]);
}

/// A tty container: its output is a pty master (`-t`), read as stdout.
#[test]
fn a_pty_master_is_read_as_stdout() {
    let tmp = TempDir::new("mon");
    let (master, slave) = pty();
    let log = tmp.path().join("container.log");
    let script = "{ echo on a tty; exit 6\n} >&4 2>&4 3<&- 4>&- &\nexec 4>&- \"$0\" \"$@\"";
    let mut m = spawn(
        &tmp,
        script,
        vec![master, slave],
        &["-t", "3", "-l", log.to_str().unwrap()],
    );
    let (_, rec) = m.wait();
    assert_eq!(rec.exit_code, 6);
    let recs = records(&std::fs::read(&m.log).unwrap());
    // The tty's line discipline turns "\n" into "\r\n".
    assert_eq!(texts(&recs, "stdout"), [('F', "on a tty\r".into())]);
}

#[test]
fn bad_arguments_exit_2() {
    let tmp = TempDir::new("mon");
    let binary = binary();
    for args in [
        &[][..],
        &["-l", "/tmp/x"][..],
        &["-e"][..],
        &["-e", "x", "-o", "three"][..],
        &["-e", "x", "-z", "1"][..],
        &["-e", "x", "-o", "3", "-t", "4"][..],
    ] {
        let out = Command::new(binary)
            .args(args)
            .stdin(Stdio::null())
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.starts_with("crust-monitor: "), "{args:?}: {err}");
        assert!(err.contains("usage: crust-monitor -e EXIT_FILE"), "{err}");
    }
    assert!(!tmp.path().join("x").exists());
}

/// A reader polling the exit file (as crustd's recovery may) sees no file or a whole
/// record, never a part of one.
#[test]
fn the_exit_record_appears_whole() {
    let tmp = TempDir::new("mon");
    let mut m = start(&tmp, &format!("echo ready; {WAIT_GO}; exit 9"), &[]);
    m.log_until("ready", |r| !r.is_empty());
    let path = m.exit.clone();
    let reader = std::thread::spawn(move || {
        let deadline = Instant::now() + TIMEOUT;
        let mut misses = 0u64;
        loop {
            match monitor::read_exit(&path) {
                Ok(Some(rec)) => return (rec, misses),
                Ok(None) => misses += 1,
                Err(e) => panic!("a reader saw a partial exit record: {e}"),
            }
            assert!(Instant::now() < deadline, "no exit record");
        }
    });
    std::thread::sleep(Duration::from_millis(20));
    m.go();
    let (seen, misses) = reader.join().unwrap();
    assert!(misses > 0, "the record was there before the child exited");
    let (_, rec) = m.wait();
    assert_eq!(seen, rec);
    assert_eq!(rec.exit_code, 9);
}

/// Starts the monitor directly, after the forked child of `Command` (which becomes the
/// monitor) forked a "container" that sleeps `delay` and exits with `code`. With
/// `zombie`, the exec waits until that child has exited (unreaped), so its SIGCHLD
/// came and went before the monitor ran; with `ignore`, SIGCHLD is SIG_IGN across the
/// exec, which would let the kernel reap the child unless the monitor undoes it.
fn spawn_forked(tmp: &TempDir, delay: Duration, code: i32, zombie: bool, ignore: bool) -> Monitor {
    let dir = tmp.path().to_path_buf();
    let exit = dir.join("exit");
    let mut cmd = Command::new(binary());
    cmd.arg("-e")
        .arg(&exit)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    let ts = libc::timespec {
        tv_sec: delay.as_secs() as libc::time_t,
        tv_nsec: delay.subsec_nanos() as libc::c_long,
    };
    // SAFETY: between fork and exec the closure calls only async-signal-safe functions
    // (signal, fork, nanosleep, _exit, waitid) on values prepared before the fork.
    unsafe {
        cmd.pre_exec(move || {
            if ignore {
                libc::signal(libc::SIGCHLD, libc::SIG_IGN);
            }
            let pid = libc::fork();
            if pid < 0 {
                return Err(std::io::Error::last_os_error());
            }
            if pid == 0 {
                libc::nanosleep(&ts, std::ptr::null_mut());
                libc::_exit(code);
            }
            if zombie {
                let mut si: libc::siginfo_t = std::mem::zeroed();
                libc::waitid(
                    libc::P_PID,
                    pid as libc::id_t,
                    &mut si,
                    libc::WEXITED | libc::WNOWAIT,
                );
            }
            Ok(())
        });
    }
    let started = SystemTime::now();
    let process = cmd.spawn().expect("spawn monitor");
    Monitor {
        process,
        go: dir.join("go"),
        log: dir.join("container.log"),
        exit,
        dir,
        started,
    }
}

/// The container may be dead before the monitor runs: no SIGCHLD will come.
#[test]
fn a_child_dead_before_the_monitor_started_is_recorded() {
    let tmp = TempDir::new("mon");
    let mut m = spawn_forked(&tmp, Duration::ZERO, 8, true, false);
    let (status, rec) = m.wait();
    assert!(status.success());
    assert_eq!((rec.exit_code, rec.signal), (8, 0));
    assert!(rec.pid > 0);
}

/// SIG_IGN for SIGCHLD survives execve; the monitor must restore the default or the
/// kernel reaps its child and the exit status is lost.
#[test]
fn an_inherited_sig_ign_for_sigchld_is_undone() {
    let tmp = TempDir::new("mon");
    let mut m = spawn_forked(&tmp, Duration::from_millis(300), 11, false, true);
    let (_, rec) = m.wait();
    assert_eq!((rec.exit_code, rec.signal), (11, 0));
}

/// As a subreaper the monitor adopts the container's orphans; one that dies first must
/// not be taken for the init. The init is named by `-p`, or found as the monitor's only
/// child at start.
#[test]
fn an_adopted_orphan_is_reaped_but_not_taken_for_the_init() {
    for with_pid in [true, false] {
        let tmp = TempDir::new("mon");
        let (out_r, out_w) = pipe();
        // Once the monitor runs (it has made the log), the init starts a shell that
        // leaves an orphan behind (exit 42 at once), and exits itself only when the
        // test says so. The monitor looks for its one child before making the log.
        let child = format!(
            "while [ ! -e \"$LOG\" ]; do sleep 0.01; done; sh -c '(exit 42) &'; echo ready; \
             {WAIT_GO}; exit 3"
        );
        let pid_arg = if with_pid { "-p \"$!\"" } else { "" };
        let script =
            format!("{{ {child}\n}} >&4 2>&4 3<&- 4>&- &\nexec 4>&- \"$0\" \"$@\" {pid_arg}");
        let log = tmp.path().join("container.log");
        let mut m = spawn_as(
            &tmp,
            &script,
            vec![out_r, out_w],
            &["-o", "3", "-l", log.to_str().unwrap()],
            true,
        );
        m.log_until("ready", |r| !r.is_empty());
        std::thread::sleep(Duration::from_millis(100));
        assert!(
            m.alive(),
            "the monitor took the orphan for the init (-p: {with_pid})"
        );
        assert!(!m.exit.exists());
        m.go();
        let (_, rec) = m.wait();
        assert_eq!(rec.exit_code, 3, "-p: {with_pid}");
    }
}

// ---------------------------------------------------------------------------------------
// Attach

use crust_e2e::attach::{recv_until as attach_until, send, shut_input};

/// A `cat` whose stdin is a pipe the monitor holds (`-i 8`), and the attach socket
/// (`-A 9`) with `-s MODE`.
fn start_attached(tmp: &TempDir, mode: &str) -> Monitor {
    let (out_r, out_w) = pipe();
    let (err_r, err_w) = pipe();
    let (in_r, in_w) = pipe();
    let listen = monitor::listen_attach(tmp.path()).unwrap();
    let script = "{ cat; echo done >&2; } <&7 >&5 2>&6 3<&- 4<&- 5>&- 6>&- 7<&- 8>&- 9>&- &\n\
                  exec 5>&- 6>&- 7<&- \"$0\" \"$@\"";
    let log = tmp.path().join("container.log");
    let args = [
        "-l",
        log.to_str().unwrap(),
        "-o",
        "3",
        "-r",
        "4",
        "-i",
        "8",
        "-A",
        "9",
        "-s",
        mode,
    ];
    spawn(
        tmp,
        script,
        vec![out_r, err_r, out_w, err_w, in_r, in_w, listen],
        &args,
    )
}

/// An attach client gets the container's output tagged by stream, its input reaches
/// the container's stdin, and with `stdin_once` ending its input closes that stdin
/// (the `cat` ends); the log has everything too.
#[test]
fn attach_output_input_and_stdin_once() {
    let tmp = TempDir::new("mon-attach");
    let mut m = start_attached(&tmp, "once");
    let client = monitor::connect_attach(tmp.path()).unwrap();
    send(&client, b"hello\n");
    attach_until(&client, "the echo", |g| {
        g.contains(&(monitor::ATTACH_STDOUT, "hello\n".into()))
    });
    shut_input(&client);
    attach_until(&client, "stderr after stdin closed", |g| {
        g.contains(&(monitor::ATTACH_STDERR, "done\n".into()))
    });
    let (status, record) = m.wait();
    assert!(status.success());
    assert_eq!(record.exit_code, 0);
    let recs = m.log_until("both streams", |r| r.len() >= 2);
    assert_eq!(texts(&recs, "stdout"), [('F', "hello".to_string())]);
    assert_eq!(texts(&recs, "stderr"), [('F', "done".to_string())]);
}

/// Without `stdin_once` a client that ends its input leaves the container's stdin
/// open for the next one.
#[test]
fn without_stdin_once_stdin_outlives_a_client() {
    let tmp = TempDir::new("mon-attach-keep");
    let mut m = start_attached(&tmp, "keep");
    let first = monitor::connect_attach(tmp.path()).unwrap();
    send(&first, b"one\n");
    attach_until(&first, "one", |g| g.contains(&(1, "one\n".into())));
    shut_input(&first);
    drop(first);
    std::thread::sleep(Duration::from_millis(200));
    assert!(m.alive(), "stdin was closed by a client leaving");
    assert!(!m.exit.exists());
    let second = monitor::connect_attach(tmp.path()).unwrap();
    send(&second, b"two\n");
    attach_until(&second, "two", |g| g.contains(&(1, "two\n".into())));
}
