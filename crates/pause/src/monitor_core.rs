//! The pure part of `crust-monitor`: argument parsing, CRI log record headers (Go's
//! RFC3339Nano time), cutting a stream into full and partial records, the `oom_kill`
//! counter, wait statuses and the exit record's JSON.
//!
//! No syscalls and only `core`, so the same file is compiled twice: into the `no_std`
//! monitor (`monitor.rs`), and by `crates/container` as a `#[cfg(test)]` module, where
//! the tests at the bottom of this file run under `cargo test -p container`.

use core::ffi::CStr;

/// The longest text of one CRI log record (containerd's default `max_container_log_line_size`).
/// A longer line is cut into partial (`P`) records of this size and a final full (`F`) one
/// (a final `P` when the stream ends before its newline, see [`next_record`]).
pub const MAX_LINE: usize = 16 * 1024;

/// Room for any time [`format_time`] writes (a 12-digit year at most, from an `i64`).
pub const TIME_MAX: usize = 48;

/// Room for any record header [`header`] writes: time, stream name, tag and spaces.
pub const HEADER_MAX: usize = TIME_MAX + 16;

/// Room for any exit record [`format_exit`] writes.
pub const EXIT_MAX: usize = 160;

// ---------------------------------------------------------------------------------------
// Arguments

/// The command line, as documented in `monitor.rs`. Paths stay the NUL-terminated
/// strings of argv, so they can be passed to `open` as they are.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Args<'a> {
    pub exit_file: &'a CStr,
    pub log_path: Option<&'a CStr>,
    pub stdout_fd: Option<i32>,
    pub stderr_fd: Option<i32>,
    pub tty_fd: Option<i32>,
    /// A unix socket over which the container's init sends a pty master (SCM_RIGHTS),
    /// read as `stdout` once it came.
    pub tty_socket: Option<i32>,
    pub stdin_fd: Option<i32>,
    pub oom_file: Option<&'a CStr>,
    /// The container init's pid, when the caller knows it.
    pub init_pid: Option<i32>,
    /// A listening `SOCK_SEQPACKET` unix socket for attach clients.
    pub attach_fd: Option<i32>,
    /// Whether attach clients' input reaches the container (the `-i` pipe, or the pty
    /// master of a tty container), and whether the first client to detach closes it.
    pub stdin: StdinMode,
}

/// `-s`: what attach clients may do with the container's stdin.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StdinMode {
    /// Their input is dropped (the container has no stdin).
    None,
    /// Their input reaches the container; stdin stays open between clients.
    Keep,
    /// As `Keep` until the first client detaches, which closes the container's stdin
    /// (CRI `stdin_once`).
    Once,
}

/// Why a command line was refused: a message and the argument it is about (may be empty).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ArgError<'a> {
    pub message: &'static str,
    pub arg: &'a [u8],
}

pub const USAGE: &[u8] = b"usage: crust-monitor -e EXIT_FILE [-l LOG_PATH] [-o FD] [-r FD] \
[-t FD] [-T FD] [-i FD] [-m OOM_EVENTS_FILE] [-p PID] [-A FD] [-s keep|once]\n";

/// Parses the arguments after argv[0]. Every option takes a value in the next argument.
pub fn parse_args<'a>(mut args: impl Iterator<Item = &'a CStr>) -> Result<Args<'a>, ArgError<'a>> {
    let mut exit_file = None;
    let mut out = Args {
        exit_file: c"",
        log_path: None,
        stdout_fd: None,
        stderr_fd: None,
        tty_fd: None,
        tty_socket: None,
        stdin_fd: None,
        oom_file: None,
        init_pid: None,
        attach_fd: None,
        stdin: StdinMode::None,
    };
    while let Some(opt) = args.next() {
        let opt = opt.to_bytes();
        let Some(value) = args.next() else {
            return Err(ArgError {
                message: "missing value after ",
                arg: opt,
            });
        };
        let fd = || {
            parse_fd(value.to_bytes()).ok_or(ArgError {
                message: "not a file descriptor: ",
                arg: value.to_bytes(),
            })
        };
        let path = || {
            if value.is_empty() {
                Err(ArgError {
                    message: "empty path after ",
                    arg: opt,
                })
            } else {
                Ok(value)
            }
        };
        match opt {
            b"-e" => exit_file = Some(path()?),
            b"-l" => out.log_path = Some(path()?),
            b"-m" => out.oom_file = Some(path()?),
            b"-o" => out.stdout_fd = Some(fd()?),
            b"-r" => out.stderr_fd = Some(fd()?),
            b"-t" => out.tty_fd = Some(fd()?),
            b"-T" => out.tty_socket = Some(fd()?),
            b"-i" => out.stdin_fd = Some(fd()?),
            b"-A" => out.attach_fd = Some(fd()?),
            b"-s" => {
                out.stdin = match value.to_bytes() {
                    b"keep" => StdinMode::Keep,
                    b"once" => StdinMode::Once,
                    other => {
                        return Err(ArgError {
                            message: "not keep or once: ",
                            arg: other,
                        })
                    }
                }
            }
            b"-p" => {
                out.init_pid = Some(parse_fd(value.to_bytes()).filter(|&p| p > 0).ok_or(
                    ArgError {
                        message: "not a pid: ",
                        arg: value.to_bytes(),
                    },
                )?)
            }
            _ => {
                return Err(ArgError {
                    message: "unknown option ",
                    arg: opt,
                })
            }
        }
    }
    if (out.tty_fd.is_some() || out.tty_socket.is_some()) && out.stdout_fd.is_some()
        || (out.tty_fd.is_some() && out.tty_socket.is_some())
    {
        return Err(ArgError {
            message: "-t and -o both name the stdout stream",
            arg: b"",
        });
    }
    out.exit_file = exit_file.ok_or(ArgError {
        message: "missing -e EXIT_FILE",
        arg: b"",
    })?;
    Ok(out)
}

/// A decimal fd number: digits only, at most `i32::MAX`.
pub fn parse_fd(s: &[u8]) -> Option<i32> {
    if s.is_empty() || s.len() > 10 {
        return None;
    }
    let mut v: u64 = 0;
    for &b in s {
        if !b.is_ascii_digit() {
            return None;
        }
        v = v * 10 + (b - b'0') as u64;
    }
    i32::try_from(v).ok()
}

/// The one pid in a `/proc/PID/task/TID/children` file (pids separated by spaces);
/// `None` when it lists none or several.
pub fn only_pid(content: &[u8]) -> Option<i32> {
    let mut pids = content
        .split(|b| b.is_ascii_whitespace())
        .filter(|w| !w.is_empty());
    let first = parse_fd(pids.next()?).filter(|&p| p > 0)?;
    match pids.next() {
        None => Some(first),
        Some(_) => None,
    }
}

// ---------------------------------------------------------------------------------------
// CRI log records

/// Writes `v` in decimal at `out[pos..]`, zero-padded to `width` digits; returns the
/// position after it. `out` must have room (callers size their buffers for `u64::MAX`).
fn put_uint(out: &mut [u8], mut pos: usize, v: u64, width: usize) -> usize {
    let mut digits = [0u8; 20];
    let mut n = 0;
    let mut v = v;
    loop {
        digits[n] = b'0' + (v % 10) as u8;
        n += 1;
        v /= 10;
        if v == 0 {
            break;
        }
    }
    for _ in n..width {
        out[pos] = b'0';
        pos += 1;
    }
    for i in (0..n).rev() {
        out[pos] = digits[i];
        pos += 1;
    }
    pos
}

/// Like [`put_uint`] for a signed value, with a leading `-` when negative.
fn put_int(out: &mut [u8], mut pos: usize, v: i64) -> usize {
    if v < 0 {
        out[pos] = b'-';
        pos += 1;
    }
    put_uint(out, pos, v.unsigned_abs(), 1)
}

fn put(out: &mut [u8], pos: usize, s: &[u8]) -> usize {
    out[pos..pos + s.len()].copy_from_slice(s);
    pos + s.len()
}

/// The proleptic Gregorian (year, month 1-12, day 1-31) of a count of days since
/// 1970-01-01 (negative before it). Eras of 400 years (146097 days) repeat exactly;
/// inside an era, years are counted from March so that the leap day ends the year.
pub fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468; // days since 0000-03-01
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097); // day of era, 0..=146096
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365; // 0..=399
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100); // day of the March year, 0..=365
    let mp = (5 * doy + 2) / 153; // month from March, 0..=11
    let day = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let month = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

/// Formats a CLOCK_REALTIME time as Go's `time.RFC3339Nano` does in UTC:
/// `2026-11-23T12:34:56.123456789Z`, the fraction's trailing zeros trimmed and the dot
/// dropped when it is zero. Returns the length written to `out`.
pub fn format_time(sec: i64, nsec: u32, out: &mut [u8; TIME_MAX]) -> usize {
    let days = sec.div_euclid(86_400);
    let secs = sec.rem_euclid(86_400) as u64;
    let (year, month, day) = civil_from_days(days);
    let mut p = 0;
    if year < 0 {
        p = put(out, p, b"-");
    }
    p = put_uint(out, p, year.unsigned_abs(), 4);
    p = put(out, p, b"-");
    p = put_uint(out, p, month as u64, 2);
    p = put(out, p, b"-");
    p = put_uint(out, p, day as u64, 2);
    p = put(out, p, b"T");
    p = put_uint(out, p, secs / 3600, 2);
    p = put(out, p, b":");
    p = put_uint(out, p, secs / 60 % 60, 2);
    p = put(out, p, b":");
    p = put_uint(out, p, secs % 60, 2);
    let mut frac = nsec.min(999_999_999);
    if frac != 0 {
        let mut width = 9;
        while frac.is_multiple_of(10) {
            frac /= 10;
            width -= 1;
        }
        p = put(out, p, b".");
        p = put_uint(out, p, frac as u64, width);
    }
    put(out, p, b"Z")
}

/// `<time> <stream> <F|P> `: everything of a record before its text. Returns the length.
pub fn header(sec: i64, nsec: u32, stream: &[u8], full: bool, out: &mut [u8; HEADER_MAX]) -> usize {
    let mut time = [0u8; TIME_MAX];
    let n = format_time(sec, nsec, &mut time);
    let mut p = put(out, 0, &time[..n]);
    p = put(out, p, b" ");
    p = put(out, p, &stream[..stream.len().min(8)]);
    put(out, p, if full { b" F " } else { b" P " })
}

/// The next record at the start of a stream's pending bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Record {
    /// `F` (a line with its newline, or the last piece of one) rather than `P`.
    pub full: bool,
    /// The record's text is `pending[..len]` (never with the `\n`).
    pub len: usize,
    /// How many pending bytes the record uses up (the text and its `\n`, if any).
    pub consumed: usize,
}

/// Cuts the next record off `pending`: a line ending in `\n` within [`MAX_LINE`] bytes
/// is an `F`; without one, [`MAX_LINE`] bytes are a `P` once more than that is pending.
/// `eof`: no more bytes will come (the stream ended, or the monitor stops reading it),
/// so what is left is written now, as a `P`: only a newline makes an `F`. That is
/// containerd's rule, and what lets a reader give back `echo -n DONE` as `DONE`, not
/// `DONE\n` (the kubelet adds a newline after `F` text only). `None`: wait for more.
pub fn next_record(pending: &[u8], eof: bool) -> Option<Record> {
    let window = &pending[..pending.len().min(MAX_LINE + 1)];
    if let Some(i) = window.iter().position(|&b| b == b'\n') {
        return Some(Record {
            full: true,
            len: i,
            consumed: i + 1,
        });
    }
    if pending.len() > MAX_LINE {
        return Some(Record {
            full: false,
            len: MAX_LINE,
            consumed: MAX_LINE,
        });
    }
    if eof && !pending.is_empty() {
        return Some(Record {
            full: false,
            len: pending.len(),
            consumed: pending.len(),
        });
    }
    None
}

// ---------------------------------------------------------------------------------------
// OOM counter, wait status, exit record

/// The `N` of the `oom_kill N` line of cgroup v2's `memory.events` or v1's
/// `memory.oom_control` (not `oom_kill_disable` nor `oom_group_kill`).
pub fn parse_oom_kill(content: &[u8]) -> Option<u64> {
    for line in content.split(|&b| b == b'\n') {
        let Some(rest) = line.strip_prefix(b"oom_kill ") else {
            continue;
        };
        let rest = rest.trim_ascii();
        if rest.is_empty() || rest.len() > 19 || !rest.iter().all(u8::is_ascii_digit) {
            return None;
        }
        return Some(rest.iter().fold(0, |v, &b| v * 10 + (b - b'0') as u64));
    }
    None
}

/// (exit_code, signal) of a `wait4` status: the exit status and 0, or 128 + the signal
/// and the signal for a process killed by one.
pub fn exit_from_status(status: i32) -> (i32, i32) {
    let sig = status & 0x7f;
    if sig == 0 {
        ((status >> 8) & 0xff, 0)
    } else {
        (128 + sig, sig)
    }
}

/// What the monitor records when its child is gone; `crustd` reads it back as
/// `container::monitor::ExitRecord`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Exit {
    pub pid: i32,
    pub exit_code: i32,
    pub signal: i32,
    pub finished_ns: i64,
    pub oom_killed: bool,
}

/// The exit record as one line of JSON:
/// `{"pid":123,"exit_code":0,"signal":0,"finished_ns":1700000000000000000,"oom_killed":false}\n`.
pub fn format_exit(e: &Exit, out: &mut [u8; EXIT_MAX]) -> usize {
    let mut p = put(out, 0, b"{\"pid\":");
    p = put_int(out, p, e.pid.into());
    p = put(out, p, b",\"exit_code\":");
    p = put_int(out, p, e.exit_code.into());
    p = put(out, p, b",\"signal\":");
    p = put_int(out, p, e.signal.into());
    p = put(out, p, b",\"finished_ns\":");
    p = put_int(out, p, e.finished_ns);
    p = put(out, p, b",\"oom_killed\":");
    p = put(out, p, if e.oom_killed { b"true" } else { b"false" });
    put(out, p, b"}\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn time(sec: i64, nsec: u32) -> String {
        let mut b = [0u8; TIME_MAX];
        let n = format_time(sec, nsec, &mut b);
        String::from_utf8(b[..n].to_vec()).unwrap()
    }

    #[test]
    fn time_is_go_rfc3339nano() {
        assert_eq!(time(0, 0), "1970-01-01T00:00:00Z");
        assert_eq!(time(1_700_000_000, 0), "2023-11-14T22:13:20Z");
        assert_eq!(
            time(1_700_000_000, 123_456_789),
            "2023-11-14T22:13:20.123456789Z"
        );
        // Trailing zeros of the fraction go, the leading ones stay.
        assert_eq!(time(1_700_000_000, 120_000_000), "2023-11-14T22:13:20.12Z");
        assert_eq!(time(1_700_000_000, 1), "2023-11-14T22:13:20.000000001Z");
        assert_eq!(time(1_700_000_000, 500_000), "2023-11-14T22:13:20.0005Z");
        assert_eq!(time(253_402_300_799, 0), "9999-12-31T23:59:59Z");
        assert_eq!(time(-1, 0), "1969-12-31T23:59:59Z");
    }

    #[test]
    fn leap_years() {
        // 2000 is a leap year (divisible by 400), 2100 is not (by 100), 2024 is (by 4).
        assert_eq!(time(951_782_400, 0), "2000-02-29T00:00:00Z");
        assert_eq!(time(951_782_400 + 86_400, 0), "2000-03-01T00:00:00Z");
        assert_eq!(time(4_107_542_399, 0), "2100-02-28T23:59:59Z");
        assert_eq!(time(4_107_542_400, 0), "2100-03-01T00:00:00Z");
        assert_eq!(time(1_709_164_800, 0), "2024-02-29T00:00:00Z");
        assert_eq!(time(68_256_000, 0), "1972-03-01T00:00:00Z");
        assert_eq!(time(1_735_603_200, 0), "2024-12-31T00:00:00Z");
    }

    /// Against a plain day-by-day walk over the calendar, 1900 to 2500.
    #[test]
    fn civil_from_days_matches_a_naive_calendar() {
        let leap = |y: i64| (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
        let month_len = |y: i64, m: u32| match m {
            2 if leap(y) => 29,
            2 => 28,
            4 | 6 | 9 | 11 => 30,
            _ => 31,
        };
        // 1900-01-01 is 25567 days before the epoch.
        let (mut y, mut m, mut d) = (1900i64, 1u32, 1u32);
        for days in -25_567..(530 * 366) {
            assert_eq!(civil_from_days(days), (y, m, d), "day {days}");
            d += 1;
            if d > month_len(y, m) {
                d = 1;
                m += 1;
                if m > 12 {
                    m = 1;
                    y += 1;
                }
            }
        }
        assert!(y > 2500);
    }

    #[test]
    fn headers() {
        let mut b = [0u8; HEADER_MAX];
        let n = header(1_700_000_000, 5, b"stdout", true, &mut b);
        assert_eq!(&b[..n], b"2023-11-14T22:13:20.000000005Z stdout F ");
        let n = header(1_700_000_000, 0, b"stderr", false, &mut b);
        assert_eq!(&b[..n], b"2023-11-14T22:13:20Z stderr P ");
        // The widest time fits.
        let n = header(i64::MAX, 999_999_999, b"stderr", false, &mut b);
        assert!(n <= HEADER_MAX);
        let n = header(i64::MIN, 999_999_999, b"stderr", false, &mut b);
        assert!(n <= HEADER_MAX);
    }

    /// Runs `next_record` the way the monitor does: bytes arrive in chunks into a buffer
    /// of `MAX_LINE + 1`, records are cut, the rest moves to the front.
    fn split(input: &[u8], chunk: usize) -> Vec<(char, Vec<u8>)> {
        let mut out = Vec::new();
        let mut buf = vec![0u8; MAX_LINE + 1];
        let mut len = 0;
        let mut rest = input;
        loop {
            let eof = rest.is_empty();
            let n = chunk.min(rest.len()).min(buf.len() - len);
            buf[len..len + n].copy_from_slice(&rest[..n]);
            rest = &rest[n..];
            len += n;
            let mut start = 0;
            while let Some(r) = next_record(&buf[start..len], eof) {
                let tag = if r.full { 'F' } else { 'P' };
                out.push((tag, buf[start..start + r.len].to_vec()));
                start += r.consumed;
            }
            buf.copy_within(start..len, 0);
            len -= start;
            if eof {
                assert_eq!(len, 0);
                return out;
            }
        }
    }

    #[test]
    fn lines_are_full_records() {
        for chunk in [1, 3, 4096, 1 << 20] {
            assert_eq!(
                split(b"a\n\nbc\n", chunk),
                [('F', b"a".to_vec()), ('F', vec![]), ('F', b"bc".to_vec())]
            );
            assert_eq!(split(b"", chunk), []);
        }
    }

    /// `echo -n DONE`: a line the end of the stream cuts before its newline is a `P`,
    /// as containerd writes it, so that readers give back the text without a newline.
    #[test]
    fn an_unterminated_last_line_is_partial() {
        for chunk in [1, 3, 4096, 1 << 20] {
            assert_eq!(split(b"DONE", chunk), [('P', b"DONE".to_vec())]);
            assert_eq!(
                split(b"a\nbc", chunk),
                [('F', b"a".to_vec()), ('P', b"bc".to_vec())]
            );
            // A newline at the very end is a full line, and nothing follows it.
            assert_eq!(
                split(b"a\nbc\n", chunk),
                [('F', b"a".to_vec()), ('F', b"bc".to_vec())]
            );
        }
        // Without the end of the stream, an unterminated line waits for more.
        assert_eq!(next_record(b"DONE", false), None);
        assert_eq!(
            next_record(b"DONE", true),
            Some(Record {
                full: false,
                len: 4,
                consumed: 4,
            })
        );
        assert_eq!(next_record(b"", true), None);
    }

    #[test]
    fn long_lines_are_cut_into_partials() {
        let line: Vec<u8> = (0..40 * 1024).map(|i| b'a' + (i % 26) as u8).collect();
        let mut input = line.clone();
        input.extend_from_slice(b"\nnext\n");
        for chunk in [1000, 4096, MAX_LINE, 1 << 20] {
            let recs = split(&input, chunk);
            let tags: String = recs.iter().map(|r| r.0).collect();
            assert_eq!(tags, "PPFF", "chunk {chunk}");
            assert_eq!(recs[0].1.len(), MAX_LINE);
            assert_eq!(recs[1].1.len(), MAX_LINE);
            assert_eq!(recs[0..3].concat_text(), line);
            assert_eq!(recs[3].1, b"next");
        }
        // A line of exactly MAX_LINE is one record; one more byte makes a P and an F.
        let exact = vec![b'x'; MAX_LINE];
        assert_eq!(
            split(&[&exact[..], b"\n"].concat(), 4096),
            [('F', exact.clone())]
        );
        let over = vec![b'x'; MAX_LINE + 1];
        assert_eq!(
            split(&[&over[..], b"\n"].concat(), 4096),
            [('P', exact.clone()), ('F', b"x".to_vec())]
        );
        // Unterminated and long at the end of the stream: every piece is partial.
        assert_eq!(
            split(&over, 4096),
            [('P', exact.clone()), ('P', b"x".to_vec())]
        );
        assert_eq!(split(&exact, 4096), [('P', exact)]);
    }

    trait ConcatText {
        fn concat_text(&self) -> Vec<u8>;
    }
    impl ConcatText for [(char, Vec<u8>)] {
        fn concat_text(&self) -> Vec<u8> {
            self.iter().flat_map(|r| r.1.iter().copied()).collect()
        }
    }

    #[test]
    fn oom_kill_counter() {
        let v2 = b"low 0\nhigh 0\nmax 12\noom 3\noom_kill 2\noom_group_kill 1\n";
        assert_eq!(parse_oom_kill(v2), Some(2));
        let v1 = b"oom_kill_disable 0\nunder_oom 0\noom_kill 7\n";
        assert_eq!(parse_oom_kill(v1), Some(7));
        assert_eq!(parse_oom_kill(b"oom_kill 1"), Some(1));
        assert_eq!(
            parse_oom_kill(b"oom_kill_disable 0\noom_group_kill 4\n"),
            None
        );
        assert_eq!(parse_oom_kill(b"oom_kill x\n"), None);
        assert_eq!(parse_oom_kill(b""), None);
    }

    #[test]
    fn wait_statuses() {
        assert_eq!(exit_from_status(0), (0, 0));
        assert_eq!(exit_from_status(3 << 8), (3, 0));
        assert_eq!(exit_from_status(255 << 8), (255, 0));
        assert_eq!(exit_from_status(9), (137, 9));
        // Killed by SIGSEGV with a core dump (0x80).
        assert_eq!(exit_from_status(0x80 | 11), (139, 11));
    }

    #[test]
    fn exit_record_json() {
        let mut b = [0u8; EXIT_MAX];
        let e = Exit {
            pid: 123,
            exit_code: 0,
            signal: 0,
            finished_ns: 1_700_000_000_000_000_000,
            oom_killed: false,
        };
        let n = format_exit(&e, &mut b);
        assert_eq!(
            &b[..n],
            &b"{\"pid\":123,\"exit_code\":0,\"signal\":0,\"finished_ns\":1700000000000000000,\"oom_killed\":false}\n"[..]
        );
        let widest = Exit {
            pid: i32::MIN,
            exit_code: i32::MIN,
            signal: i32::MIN,
            finished_ns: i64::MIN,
            oom_killed: false,
        };
        let n = format_exit(&widest, &mut b);
        assert!(n < EXIT_MAX);
        let n = format_exit(
            &Exit {
                pid: 1,
                exit_code: 137,
                signal: 9,
                finished_ns: -5,
                oom_killed: true,
            },
            &mut b,
        );
        assert_eq!(
            &b[..n],
            &b"{\"pid\":1,\"exit_code\":137,\"signal\":9,\"finished_ns\":-5,\"oom_killed\":true}\n"
                [..]
        );
    }

    fn args<'a>(v: &'a [&'a CStr]) -> Result<Args<'a>, ArgError<'a>> {
        parse_args(v.iter().copied())
    }

    #[test]
    fn arguments() {
        let a = args(&[
            c"-e",
            c"/run/x/exit",
            c"-l",
            c"/log",
            c"-o",
            c"3",
            c"-r",
            c"4",
            c"-i",
            c"5",
            c"-m",
            c"/sys/fs/cgroup/x/memory.events",
        ])
        .unwrap();
        assert_eq!(a.exit_file, c"/run/x/exit");
        assert_eq!(a.log_path, Some(c"/log"));
        assert_eq!(
            (a.stdout_fd, a.stderr_fd, a.tty_fd, a.stdin_fd),
            (Some(3), Some(4), None, Some(5))
        );
        assert_eq!(a.oom_file, Some(c"/sys/fs/cgroup/x/memory.events"));

        assert_eq!(a.init_pid, None);
        assert_eq!((a.attach_fd, a.stdin), (None, StdinMode::None));

        let a = args(&[c"-e", c"e", c"-A", c"8", c"-s", c"once"]).unwrap();
        assert_eq!((a.attach_fd, a.stdin), (Some(8), StdinMode::Once));
        let a = args(&[c"-e", c"e", c"-s", c"keep"]).unwrap();
        assert_eq!(a.stdin, StdinMode::Keep);

        let a = args(&[c"-t", c"7", c"-e", c"e", c"-p", c"42"]).unwrap();
        assert_eq!((a.tty_fd, a.stdout_fd, a.log_path), (Some(7), None, None));
        assert_eq!(a.init_pid, Some(42));
        let a = args(&[c"-T", c"9", c"-e", c"e", c"-r", c"4"]).unwrap();
        assert_eq!(
            (a.tty_socket, a.tty_fd, a.stderr_fd),
            (Some(9), None, Some(4))
        );
        assert!(args(&[c"-T", c"9", c"-e", c"e", c"-o", c"3"]).is_err());
        assert!(args(&[c"-T", c"9", c"-e", c"e", c"-t", c"3"]).is_err());

        let err = |v: &[&CStr]| {
            let e = args(v).unwrap_err();
            (e.message, String::from_utf8(e.arg.to_vec()).unwrap())
        };
        assert_eq!(err(&[]), ("missing -e EXIT_FILE", String::new()));
        assert_eq!(err(&[c"-l", c"x"]), ("missing -e EXIT_FILE", String::new()));
        assert_eq!(err(&[c"-e"]), ("missing value after ", "-e".into()));
        assert_eq!(err(&[c"-e", c""]), ("empty path after ", "-e".into()));
        assert_eq!(err(&[c"-x", c"1"]), ("unknown option ", "-x".into()));
        assert_eq!(
            err(&[c"-e", c"e", c"-o", c"3x"]),
            ("not a file descriptor: ", "3x".into())
        );
        assert_eq!(
            err(&[c"-e", c"e", c"-o", c"-1"]),
            ("not a file descriptor: ", "-1".into())
        );
        assert_eq!(
            err(&[c"-e", c"e", c"-p", c"0"]),
            ("not a pid: ", "0".into())
        );
        assert_eq!(
            err(&[c"-e", c"e", c"-s", c"twice"]),
            ("not keep or once: ", "twice".into())
        );
        assert_eq!(
            err(&[c"-e", c"e", c"-o", c"3", c"-t", c"4"]).0,
            "-t and -o both name the stdout stream"
        );
    }

    #[test]
    fn only_child() {
        assert_eq!(only_pid(b"4242 "), Some(4242));
        assert_eq!(only_pid(b"4242"), Some(4242));
        assert_eq!(only_pid(b"4242 4243 "), None);
        assert_eq!(only_pid(b""), None);
        assert_eq!(only_pid(b"x "), None);
    }

    #[test]
    fn fds() {
        assert_eq!(parse_fd(b"0"), Some(0));
        assert_eq!(parse_fd(b"2147483647"), Some(i32::MAX));
        assert_eq!(parse_fd(b"2147483648"), None);
        assert_eq!(parse_fd(b"99999999999"), None);
        assert_eq!(parse_fd(b""), None);
        assert_eq!(parse_fd(b"+1"), None);
    }
}
