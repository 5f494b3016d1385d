//! Container logs: reading the CRI log files for `/containerLogs`, and rotating them.
//!
//! A CRI log line is `<RFC3339Nano> <stdout|stderr> <P|F> <text>\n`; `P` marks a piece
//! of a line without its newline: one cut because it is long, whose end comes in a
//! later `F` line of the same stream, or the last text of a stream that ended before a
//! newline (`echo -n DONE`). As in the kubelet's reader (`pkg/kubelet/kuberuntime/logs`),
//! only an `F` record's text is followed by a newline; a `P` record's is given as it
//! is. Pieces are joined into the line the container wrote, stamped with its first
//! piece's time; pieces no `F` follows (yet) go out without a newline when the reader
//! is at the end of the log (the kubelet writes every record as it comes).
//!
//! Rotation is the kubelet's: when a running container's `N.log` reaches
//! `--container-log-max-size`, it is renamed `N.log.<YYYYMMDD-HHMMSS>` and the runtime
//! is told to open a new `N.log` (`ReopenContainerLog`); the oldest rotated files go so
//! that at most `--container-log-max-files` remain with the current one, and every
//! rotated file but the newest is gzipped (in the background: see [`rotate`]). Reads
//! (tail, since, previous) go through the uncompressed rotated file too, not only the
//! current one.

use bytes::Bytes;
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use std::io::{BufRead, Read, Seek};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// `/containerLogs` query options (the apiserver's PodLogOptions).
#[derive(Debug, Default, PartialEq)]
pub struct Options {
    pub follow: bool,
    pub previous: bool,
    pub timestamps: bool,
    /// The last this many lines.
    pub tail: Option<usize>,
    /// Lines written at or after this time.
    pub since: Option<Timestamp>,
    /// At most this many bytes of output.
    pub limit: Option<u64>,
}

/// Go's strconv.ParseBool, which the kubelet's query decoding uses.
pub fn parse_bool(v: &str) -> Option<bool> {
    match v {
        "1" | "t" | "T" | "true" | "TRUE" | "True" => Some(true),
        "0" | "f" | "F" | "false" | "FALSE" | "False" | "" => Some(false),
        _ => None,
    }
}

impl Options {
    /// From the query; an error is the message of a 400.
    pub fn parse(q: &[(String, String)], now: Timestamp) -> Result<Options, String> {
        let mut o = Options::default();
        let mut since_seconds = None;
        for (k, v) in q {
            let bool_of =
                |v: &str| parse_bool(v).ok_or_else(|| format!("{k}: {v:?} is not a boolean"));
            let int_of = |v: &str| {
                v.parse::<i64>()
                    .map_err(|_| format!("{k}: {v:?} is not an integer"))
            };
            match k.as_str() {
                "follow" => o.follow = bool_of(v)?,
                "previous" => o.previous = bool_of(v)?,
                "timestamps" => o.timestamps = bool_of(v)?,
                "tailLines" => {
                    let n = int_of(v)?;
                    if n < 0 {
                        return Err("tailLines: must be greater than or equal to 0".into());
                    }
                    o.tail = Some(n as usize);
                }
                "limitBytes" => {
                    let n = int_of(v)?;
                    if n < 1 {
                        return Err("limitBytes: must be greater than 0".into());
                    }
                    o.limit = Some(n as u64);
                }
                "sinceSeconds" => {
                    let n = int_of(v)?;
                    if n < 1 {
                        return Err("sinceSeconds: must be greater than 0".into());
                    }
                    since_seconds = Some(n);
                }
                "sinceTime" => {
                    o.since = Some(
                        v.parse::<Timestamp>()
                            .map_err(|e| format!("sinceTime: {v:?}: {e}"))?,
                    )
                }
                _ => {}
            }
        }
        if let Some(s) = since_seconds {
            if o.since.is_some() {
                return Err("at most one of sinceTime or sinceSeconds may be specified".into());
            }
            o.since = Some(now - SignedDuration::from_secs(s));
        }
        Ok(o)
    }
}

/// One line the container wrote (its pieces joined), or the pieces of one so far.
#[derive(Debug, PartialEq)]
pub struct Line {
    pub time: Timestamp,
    pub stream: String,
    /// The text, with its newline when the container wrote one (an `F` record ended it).
    pub text: Vec<u8>,
}

/// A CRI log line: (time, stream, complete, text without the newline).
pub fn parse_cri(line: &[u8]) -> Option<(Timestamp, &str, bool, &[u8])> {
    let line = line.strip_suffix(b"\n").unwrap_or(line);
    let mut parts = line.splitn(4, |b| *b == b' ');
    let time = std::str::from_utf8(parts.next()?).ok()?.parse().ok()?;
    let stream = std::str::from_utf8(parts.next()?).ok()?;
    let tag = parts.next()?;
    let text = parts.next().unwrap_or(b"");
    // Tags are `:`-separated; the first says partial or full.
    let complete = tag.split(|b| *b == b':').next() != Some(b"P");
    Some((time, stream, complete, text))
}

/// Joins the pieces (`P` records) of one stream and the `F` record that ends them into
/// the container's line.
#[derive(Default)]
pub struct Joiner {
    pending: Option<Line>,
}

impl Joiner {
    /// Takes one CRI line; gives what it completes, in the log's order: pieces of the
    /// other stream, which this record shows unfinished (that stream's line was cut
    /// there), as they are; then, for an `F` record, its line with a newline.
    pub fn push(&mut self, raw: &[u8]) -> impl Iterator<Item = Line> {
        let Some((time, stream, complete, text)) = parse_cri(raw) else {
            return [None, None].into_iter().flatten();
        };
        let cut = self.pending.take_if(|l| l.stream != stream);
        let line = self.pending.get_or_insert_with(|| Line {
            time,
            stream: stream.to_string(),
            text: vec![],
        });
        line.text.extend_from_slice(text);
        let done = if complete {
            line.text.push(b'\n');
            self.pending.take()
        } else {
            None
        };
        [cut, done].into_iter().flatten()
    }

    /// The pieces taken since the last complete line, as they are (no newline: none
    /// came): for a reader at the end of the log, where the kubelet's would have
    /// written them too.
    pub fn flush(&mut self) -> Option<Line> {
        self.pending.take()
    }
}

/// The termination message of a failed container whose policy is
/// `FallbackToLogsOnError`, as the kubelet's `readLastStringFromContainerLogs` makes it:
/// the container's last `lines` lines (both streams), of which the last `limit` bytes
/// (the kubelet writes them through a ring buffer). A line without its newline
/// (`echo -n DONE`, a `P` record) stays without one.
pub fn tail_text(path: &Path, lines: usize, limit: usize) -> String {
    // Only the end of the file is read: a log can be gigabytes.
    let (_, from) = tail_start(&[path.to_path_buf()], lines);
    let mut raw = vec![];
    if let Ok(mut f) = std::fs::File::open(path) {
        if f.seek(std::io::SeekFrom::Start(from)).is_ok() {
            let _ = f.read_to_end(&mut raw);
        }
    }
    let mut joiner = Joiner::default();
    let mut all: Vec<Vec<u8>> = raw
        .split_inclusive(|b| *b == b'\n')
        .flat_map(|l| joiner.push(l))
        .map(|l| l.text)
        .collect();
    all.extend(joiner.flush().map(|l| l.text));
    let mut out: Vec<u8> = all[all.len().saturating_sub(lines)..].concat();
    out.drain(..out.len().saturating_sub(limit));
    String::from_utf8_lossy(&out).into_owned()
}

/// The time as the kubelet prints it with `timestamps`: RFC 3339 with nine fractional
/// digits.
pub fn format_time(t: Timestamp) -> String {
    format!(
        "{}.{:09}Z",
        t.strftime("%Y-%m-%dT%H:%M:%S"),
        t.subsec_nanosecond()
    )
}

/// The log files of a container, oldest first: the rotated `N.log.<stamp>` files, then
/// `N.log` itself.
pub fn files_of(current: &Path) -> Vec<PathBuf> {
    // Compressed ones are kept for the node's operator, not read back.
    let mut out: Vec<PathBuf> = rotated(current)
        .into_iter()
        .filter(|p| p.extension().is_none_or(|e| e != "gz"))
        .collect();
    out.push(current.to_path_buf());
    out
}

/// The rotated files of `current`, oldest first (their stamps sort by time).
pub fn rotated(current: &Path) -> Vec<PathBuf> {
    let (Some(dir), Some(name)) = (current.parent(), current.file_name()) else {
        return vec![];
    };
    let prefix = format!("{}.", name.to_string_lossy());
    let mut out: Vec<PathBuf> = std::fs::read_dir(dir)
        .map(|r| {
            r.flatten()
                .filter(|e| {
                    let n = e.file_name().to_string_lossy().into_owned();
                    n.strip_prefix(&prefix)
                        .is_some_and(|s| !s.is_empty() && !s.ends_with(".tmp"))
                })
                .map(|e| e.path())
                .collect()
        })
        .unwrap_or_default();
    out.sort();
    out
}

/// Where the output starts for the last `n` lines: (file index, byte offset). Files
/// are read from their end backwards, a block at a time, only as far as the lines
/// asked for go: a flooding container's log may be gigabytes and still growing.
fn tail_start(files: &[PathBuf], n: usize) -> (usize, u64) {
    if n == 0 {
        let last = files.len().saturating_sub(1);
        let len = std::fs::metadata(&files[last]).map_or(0, |m| m.len());
        return (last, len);
    }
    let mut wanted = n;
    for (i, f) in files.iter().enumerate().rev() {
        // A record starts a line (as `Joiner` cuts them) unless the record before it
        // was a piece of the same stream; so each record is judged once the one
        // before it is read. `next`: the record after the one read now (offset,
        // stream); `found`: where the `wanted`-th line from the end starts.
        let mut next: Option<(u64, String)> = None;
        let mut found = None;
        records_backwards(f, |off, raw| {
            let Some((_, stream, complete, _)) = parse_cri(raw) else {
                return true;
            };
            if let Some((at, s)) = next.take() {
                if complete || s != stream {
                    wanted -= 1;
                    if wanted == 0 {
                        found = Some(at);
                        return false;
                    }
                }
            }
            next = Some((off, stream.to_string()));
            true
        });
        if let Some(at) = found {
            return (i, at);
        }
        // The file's first record: it goes on with a line the previous file left
        // unfinished, or starts one.
        if let Some((at, s)) = next {
            let open = if i == 0 {
                None
            } else {
                unfinished_stream(&files[i - 1])
            };
            if open.as_deref() != Some(s.as_str()) {
                wanted -= 1;
                if wanted == 0 {
                    return (i, at);
                }
            }
        }
    }
    (0, 0)
}

/// Calls `each(offset, record)` for the complete records (ending in a newline) of the
/// log at `path`, last first, reading 64 KiB blocks from the end, until `each` says
/// false or the start of the file. What follows the last newline (a record being
/// written) is left out.
fn records_backwards(path: &Path, mut each: impl FnMut(u64, &[u8]) -> bool) {
    const BLOCK: u64 = 64 << 10;
    let Ok(mut f) = std::fs::File::open(path) else {
        return;
    };
    let mut pos = f.metadata().map_or(0, |m| m.len());
    // The file's bytes from `pos` on that are not given out yet.
    let mut buf: Vec<u8> = vec![];
    let mut trimmed = false;
    loop {
        if !trimmed {
            if let Some(last) = buf.iter().rposition(|b| *b == b'\n') {
                buf.truncate(last + 1);
                trimmed = true;
            }
        }
        // Give out every record whose start is in `buf` (after another newline).
        while trimmed && !buf.is_empty() {
            let body = &buf[..buf.len() - 1];
            match body.iter().rposition(|b| *b == b'\n') {
                Some(nl) => {
                    if !each(pos + nl as u64 + 1, &buf[nl + 1..]) {
                        return;
                    }
                    buf.truncate(nl + 1);
                }
                None if pos == 0 => {
                    each(0, &buf);
                    return;
                }
                None => break,
            }
        }
        if pos == 0 {
            return;
        }
        let from = pos.saturating_sub(BLOCK);
        let mut block = vec![0u8; (pos - from) as usize];
        if f.seek(std::io::SeekFrom::Start(from)).is_err() || f.read_exact(&mut block).is_err() {
            return;
        }
        block.extend_from_slice(&buf);
        buf = block;
        pos = from;
    }
}

/// The stream of a log file's last record when it is a piece (`P`), which the next
/// file may finish.
fn unfinished_stream(path: &Path) -> Option<String> {
    let mut f = std::fs::File::open(path).ok()?;
    let len = f.metadata().map_or(0, |m| m.len());
    let from = len.saturating_sub(64 << 10);
    let mut tail = vec![];
    f.seek(std::io::SeekFrom::Start(from)).ok()?;
    f.read_to_end(&mut tail).ok()?;
    let body = tail.strip_suffix(b"\n").unwrap_or(&tail);
    let last = body.rsplit(|b| *b == b'\n').next().unwrap_or(b"");
    let (_, stream, complete, _) = parse_cri(last)?;
    (!complete).then(|| stream.to_string())
}

/// The output of [`copy`]: lines gathered into chunks of up to 64 KiB (a channel send
/// per line cannot keep up with a container that floods its log), the rest sent when it
/// is dropped.
struct Emitter<'a> {
    opts: &'a Options,
    out: &'a tokio::sync::mpsc::Sender<Bytes>,
    /// Bytes the limit still allows.
    left: u64,
    pending: Vec<u8>,
}

impl Emitter<'_> {
    /// Takes a complete line; false once the output is done (limit, client gone).
    fn line(&mut self, line: Line) -> bool {
        if self.opts.since.is_some_and(|s| line.time < s) {
            return true;
        }
        let start = self.pending.len();
        if self.opts.timestamps {
            self.pending
                .extend_from_slice(format_time(line.time).as_bytes());
            self.pending.push(b' ');
        }
        self.pending.extend_from_slice(&line.text);
        let len = (self.pending.len() - start) as u64;
        let done = len >= self.left;
        self.pending.truncate(start + self.left.min(len) as usize);
        self.left -= self.left.min(len);
        if done {
            return false;
        }
        self.pending.len() < 64 << 10 || self.flush()
    }

    /// Sends what is gathered; false when the client is gone.
    fn flush(&mut self) -> bool {
        if self.pending.is_empty() {
            return !self.out.is_closed();
        }
        let chunk = Bytes::from(std::mem::take(&mut self.pending));
        self.out.blocking_send(chunk).is_ok()
    }
}

impl Drop for Emitter<'_> {
    fn drop(&mut self) {
        self.flush();
    }
}

/// Writes the log to `out` as the options say, from `files` (oldest first, the last one
/// the file the runtime writes now). Without `follow` the current file is read as far
/// as it went when it was opened (a container writing faster than the reader reads
/// would otherwise keep the request open for ever); with `follow`, it waits for more
/// until `running` says the container ended (asked at most once a second) or the
/// client goes, and a rotation of the current file is followed into the new one.
pub fn copy(
    files: Vec<PathBuf>,
    opts: &Options,
    out: &tokio::sync::mpsc::Sender<Bytes>,
    mut running: impl FnMut() -> bool,
) {
    if files.is_empty() {
        return;
    }
    let (first, offset) = match opts.tail {
        Some(n) => tail_start(&files, n),
        None => (0, 0),
    };
    let mut joiner = Joiner::default();
    let mut emit = Emitter {
        opts,
        out,
        left: opts.limit.unwrap_or(u64::MAX),
        pending: Vec::with_capacity(64 << 10),
    };
    let last = files.len() - 1;
    for (i, path) in files.iter().enumerate().skip(first) {
        let Ok(mut f) = std::fs::File::open(path) else {
            continue;
        };
        if i == first && offset > 0 && f.seek(std::io::SeekFrom::Start(offset)).is_err() {
            continue;
        }
        if i < last {
            let mut r = std::io::BufReader::with_capacity(64 << 10, f);
            let mut raw = vec![];
            while r.read_until(b'\n', &mut raw).is_ok_and(|n| n > 0) {
                for l in joiner.push(&raw) {
                    if !emit.line(l) {
                        return;
                    }
                }
                raw.clear();
            }
            continue;
        }
        // The current file: to its end, then (following) whatever comes.
        let mut unread = if opts.follow {
            u64::MAX
        } else {
            let at = f.stream_position().unwrap_or(0);
            f.metadata().map_or(0, |m| m.len()).saturating_sub(at)
        };
        let mut partial: Vec<u8> = vec![];
        let mut checked = std::time::Instant::now();
        let mut chunk = vec![0u8; 64 << 10];
        loop {
            let want = chunk.len().min(unread.try_into().unwrap_or(usize::MAX));
            let n = if want == 0 {
                0
            } else {
                f.read(&mut chunk[..want]).unwrap_or(0)
            };
            if n > 0 {
                unread -= n as u64;
                partial.extend_from_slice(&chunk[..n]);
                let mut start = 0;
                while let Some(nl) = partial[start..].iter().position(|b| *b == b'\n') {
                    for l in joiner.push(&partial[start..start + nl + 1]) {
                        if !emit.line(l) {
                            return;
                        }
                    }
                    start += nl + 1;
                }
                partial.drain(..start);
                continue;
            }
            // At the end of what is written: pieces no `F` ended (yet) go out as they
            // are, as the kubelet's reader writes each record when it reads it. A
            // piece that comes later follows them as a line of its own.
            if let Some(l) = joiner.flush() {
                if !emit.line(l) {
                    return;
                }
            }
            if !opts.follow || !emit.flush() {
                return;
            }
            // Rotated: the name is a new file. What the old one still had is read
            // above; carry on in the new one.
            if replaced(&f, path) {
                if let Ok(nf) = std::fs::File::open(path) {
                    f = nf;
                    partial.clear();
                    continue;
                }
            }
            if checked.elapsed() >= Duration::from_secs(1) {
                checked = std::time::Instant::now();
                if !running() {
                    return;
                }
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

/// Whether `path` now names another file than the open `f`.
fn replaced(f: &std::fs::File, path: &Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    match (f.metadata(), std::fs::metadata(path)) {
        (Ok(a), Ok(b)) => a.ino() != b.ino() || a.dev() != b.dev(),
        _ => false,
    }
}

/// Parses `--container-log-max-size` (a quantity: `10Mi`, `500Ki`, `1G`, bytes).
pub fn parse_size(s: &str) -> Result<u64, String> {
    let q = k8s_openapi::apimachinery::pkg::api::resource::Quantity(s.to_string());
    match crate::quantity::value(&q) {
        Ok(v) if v > 0 => Ok(v as u64),
        _ => Err(format!(
            "--container-log-max-size {s:?}: not a positive size"
        )),
    }
}

/// The logs whose older rotated files are being compressed: one compression at a time
/// per log.
static COMPRESSING: std::sync::LazyLock<parking_lot::Mutex<std::collections::HashSet<PathBuf>>> =
    std::sync::LazyLock::new(Default::default);

/// Rotates one container's log if it has grown past `max_size`; true when it did.
///
/// The kubelet compresses the older rotated files first and renames the current one
/// after; here the current file is renamed (and the runtime told to reopen it) first,
/// and the compression runs in the background: gzip of a log a flooding container
/// filled for 10 s takes seconds, during which the file being written would grow on
/// unrotated, making the next one bigger still.
pub async fn rotate(
    cri: &crate::cri::Cri,
    id: &str,
    current: &Path,
    max_size: u64,
    max_files: usize,
) -> bool {
    let size = std::fs::metadata(current).map_or(0, |m| m.len());
    if size < max_size {
        return false;
    }
    let stamp = Timestamp::now().strftime("%Y%m%d-%H%M%S").to_string();
    let to = PathBuf::from(format!("{}.{stamp}", current.display()));
    if to.exists() || std::fs::rename(current, &to).is_err() {
        return false;
    }
    let mut rt = cri.runtime.clone();
    let reopened = rt
        .reopen_container_log(cri_api::ReopenContainerLogRequest {
            container_id: id.to_string(),
        })
        .await;
    if let Err(e) = reopened {
        // The runtime writes on into the renamed file: give it its name back, as the
        // kubelet does, so reads find it.
        tracing::warn!(container = id, "ReopenContainerLog: {}", e.message());
        let _ = std::fs::rename(&to, current);
        return false;
    }
    tracing::debug!(container = id, log = %current.display(), "log rotated");
    // At most `max_files` with the current one: the oldest rotated files go.
    let old = rotated(current);
    let keep = max_files.saturating_sub(1);
    for f in old.iter().take(old.len().saturating_sub(keep)) {
        let _ = std::fs::remove_file(f);
    }
    // As the kubelet: every rotated file but the newest is compressed.
    if COMPRESSING.lock().insert(current.to_path_buf()) {
        let current = current.to_path_buf();
        tokio::task::spawn_blocking(move || {
            let rotated = rotated(&current);
            let newest = rotated.last().cloned();
            for f in rotated {
                if Some(&f) == newest.as_ref() || f.extension().is_some_and(|e| e == "gz") {
                    continue;
                }
                if let Err(e) = compress(&f) {
                    tracing::warn!(log = %f.display(), "compressing a rotated log: {e}");
                }
            }
            COMPRESSING.lock().remove(&current);
        });
    }
    true
}

/// `f` gzipped to `f.gz` (through `f.gz.tmp`, so a reader never finds half of it),
/// then removed.
fn compress(f: &Path) -> std::io::Result<()> {
    let tmp = PathBuf::from(format!("{}.gz.tmp", f.display()));
    let write = || -> std::io::Result<()> {
        let mut r = std::fs::File::open(f)?;
        let out = std::fs::File::create(&tmp)?;
        let mut gz = flate2::write::GzEncoder::new(out, flate2::Compression::default());
        std::io::copy(&mut r, &mut gz)?;
        gz.finish()?.sync_all()
    };
    if let Err(e) = write() {
        // No half-written `.gz.tmp` left behind (a full disk, say).
        let _ = std::fs::remove_file(&tmp);
        return Err(e);
    }
    // Removed meanwhile (a newer rotation found it too old to keep): so is its copy.
    if !f.exists() {
        let _ = std::fs::remove_file(&tmp);
        return Ok(());
    }
    std::fs::rename(&tmp, format!("{}.gz", f.display()))?;
    std::fs::remove_file(f)
}

/// Rotates the logs of the running containers that grew too big. The kubelet looks every
/// 10 s, so a container writing 150 MB/s leaves gigabytes between two looks; here the
/// running containers are listed and their logs' sizes looked at every second (one
/// ListContainers, a `stat` each; ContainerStatus only for a container not seen before,
/// for its log path), which bounds a flooding log ten times closer.
pub async fn rotate_loop(cri: crate::cri::Cri, max_size: u64, max_files: usize) {
    let mut logs: std::collections::HashMap<String, PathBuf> = Default::default();
    loop {
        tokio::time::sleep(Duration::from_secs(1)).await;
        let Some(running) = running_containers(&cri).await else {
            continue;
        };
        logs.retain(|id, _| running.contains(id));
        for id in running {
            if let std::collections::hash_map::Entry::Vacant(e) = logs.entry(id) {
                if let Some(path) = log_path(&cri, e.key()).await {
                    e.insert(path);
                }
            }
        }
        for (id, path) in &logs {
            rotate(&cri, id, path, max_size, max_files).await;
        }
    }
}

/// The ids of the running containers of pods, or None if the runtime could not be
/// asked.
async fn running_containers(cri: &crate::cri::Cri) -> Option<Vec<String>> {
    let list = cri
        .runtime
        .clone()
        .list_containers(cri_api::ListContainersRequest {
            filter: Some(cri_api::ContainerFilter {
                state: Some(cri_api::ContainerStateValue {
                    state: cri_api::ContainerState::ContainerRunning as i32,
                }),
                ..Default::default()
            }),
        })
        .await
        .ok()?;
    Some(
        list.into_inner()
            .containers
            .into_iter()
            .filter(|c| c.labels.contains_key(crate::spec::POD_UID))
            .map(|c| c.id)
            .collect(),
    )
}

/// Container `id`'s log file, as its status says.
async fn log_path(cri: &crate::cri::Cri, id: &str) -> Option<PathBuf> {
    let st = cri
        .runtime
        .clone()
        .container_status(cri_api::ContainerStatusRequest {
            container_id: id.to_string(),
            verbose: false,
        })
        .await
        .ok()?;
    let path = st.into_inner().status.map(|s| s.log_path)?;
    (!path.is_empty()).then(|| PathBuf::from(path))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ts(s: &str) -> Timestamp {
        s.parse().unwrap()
    }

    #[test]
    fn options_from_the_query() {
        let q = |s: &[(&str, &str)]| {
            s.iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect::<Vec<_>>()
        };
        let now = ts("2024-05-01T10:00:00Z");
        let o = Options::parse(
            &q(&[
                ("follow", "true"),
                ("previous", "1"),
                ("timestamps", "True"),
                ("tailLines", "3"),
                ("limitBytes", "100"),
                ("sinceSeconds", "60"),
            ]),
            now,
        )
        .unwrap();
        assert_eq!(
            o,
            Options {
                follow: true,
                previous: true,
                timestamps: true,
                tail: Some(3),
                since: Some(ts("2024-05-01T09:59:00Z")),
                limit: Some(100),
            }
        );
        let o = Options::parse(&q(&[("sinceTime", "2024-05-01T09:00:00.5Z")]), now).unwrap();
        assert_eq!(o.since, Some(ts("2024-05-01T09:00:00.5Z")));
        for bad in [
            &[("tailLines", "-1")][..],
            &[("limitBytes", "0")],
            &[("follow", "yes")],
            &[("sinceSeconds", "1"), ("sinceTime", "2024-05-01T09:00:00Z")],
            &[("sinceTime", "yesterday")],
        ] {
            assert!(Options::parse(&q(bad), now).is_err(), "{bad:?}");
        }
    }

    /// What one record gives: the lines it completes.
    fn push(j: &mut Joiner, raw: &[u8]) -> Vec<Line> {
        j.push(raw).collect()
    }

    #[test]
    fn pieces_are_joined_into_lines() {
        let mut j = Joiner::default();
        assert_eq!(push(&mut j, b"2024-05-01T10:00:00.1Z stdout P hel"), []);
        assert_eq!(push(&mut j, b"2024-05-01T10:00:00.2Z stdout P lo "), []);
        let l = push(&mut j, b"2024-05-01T10:00:00.3Z stdout F world\n");
        assert_eq!(l.len(), 1);
        assert_eq!(l[0].text, b"hello world\n");
        assert_eq!(l[0].time, ts("2024-05-01T10:00:00.1Z"));
        let l = push(&mut j, b"2024-05-01T10:00:01Z stderr F\n");
        assert_eq!(
            (l[0].stream.as_str(), l[0].text.as_slice()),
            ("stderr", &b"\n"[..])
        );
        assert_eq!(push(&mut j, b"garbage"), []);
        assert_eq!(j.flush(), None);
        assert_eq!(
            format_time(ts("2024-05-01T10:00:00.1Z")),
            "2024-05-01T10:00:00.100000000Z"
        );
    }

    /// As the kubelet's reader: a `P` record's text has no newline after it, an `F`
    /// record's has one. `echo -n DONE` (one `P` record at the end of the stream) is
    /// `DONE`; pieces another stream's record interrupts go out as they are, first.
    #[test]
    fn partial_records_get_no_newline() {
        let mut j = Joiner::default();
        assert_eq!(push(&mut j, b"2024-05-01T10:00:00Z stdout P DONE\n"), []);
        let l = j.flush().unwrap();
        assert_eq!(
            (l.stream.as_str(), l.text.as_slice()),
            ("stdout", &b"DONE"[..])
        );
        assert_eq!(j.flush(), None);

        assert_eq!(push(&mut j, b"2024-05-01T10:00:01Z stdout P out\n"), []);
        let l = push(&mut j, b"2024-05-01T10:00:02Z stderr F err\n");
        let got: Vec<(&str, &[u8])> = l
            .iter()
            .map(|l| (l.stream.as_str(), l.text.as_slice()))
            .collect();
        assert_eq!(got, [("stdout", &b"out"[..]), ("stderr", &b"err\n"[..])]);
        assert_eq!(l[0].time, ts("2024-05-01T10:00:01Z"));
        assert_eq!(j.flush(), None);
    }

    fn temp_log(tag: &str, content: &str) -> (PathBuf, PathBuf) {
        let d = std::env::temp_dir().join(format!("crustlet-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        let f = d.join("0.log");
        std::fs::write(&f, content).unwrap();
        (d, f)
    }

    /// The termination message from the logs (FallbackToLogsOnError), as the kubelet
    /// makes it: `P` text as it is, a newline after `F` text only, the last bytes.
    #[test]
    fn tail_text_is_the_kubelet_termination_message() {
        // The conformance test's `/bin/echo -n DONE; /bin/false`.
        let (d, f) = temp_log("tt", "2024-05-01T10:00:00Z stdout P DONE\n");
        assert_eq!(tail_text(&f, 80, 2048), "DONE");
        std::fs::write(
            &f,
            "2024-05-01T10:00:00Z stdout F first\n\
             2024-05-01T10:00:01Z stderr F oops\n\
             2024-05-01T10:00:02Z stdout P last \n\
             2024-05-01T10:00:03Z stdout P words\n",
        )
        .unwrap();
        assert_eq!(tail_text(&f, 80, 2048), "first\noops\nlast words");
        assert_eq!(tail_text(&f, 2, 2048), "oops\nlast words");
        // The last `limit` bytes, as the kubelet's ring buffer keeps them.
        assert_eq!(tail_text(&f, 80, 7), "t words");
        // A long line cut into pieces and ended is one line, with its newline.
        std::fs::write(
            &f,
            "2024-05-01T10:00:00Z stdout P a\n2024-05-01T10:00:00Z stdout F b\n",
        )
        .unwrap();
        assert_eq!(tail_text(&f, 1, 2048), "ab\n");
        assert_eq!(tail_text(&d.join("missing"), 80, 2048), "");
        std::fs::remove_dir_all(&d).ok();
    }

    /// `kubectl logs` of a container whose last line had no newline: its text, without
    /// one, also with `tailLines` and while following.
    #[test]
    fn a_last_partial_record_is_read_without_a_newline() {
        let (d, f) = temp_log(
            "lp",
            "2024-05-01T10:00:00Z stdout F one\n2024-05-01T10:00:01Z stdout P DONE\n",
        );
        let files = files_of(&f);
        assert_eq!(read_all(files.clone(), &Options::default()), "one\nDONE");
        let tail = |n| Options {
            tail: Some(n),
            ..Default::default()
        };
        assert_eq!(read_all(files.clone(), &tail(1)), "DONE");
        assert_eq!(read_all(files.clone(), &tail(2)), "one\nDONE");
        let stamped = Options {
            timestamps: true,
            ..Default::default()
        };
        assert_eq!(
            read_all(files.clone(), &stamped),
            "2024-05-01T10:00:00.000000000Z one\n2024-05-01T10:00:01.000000000Z DONE"
        );
        let follow = Options {
            follow: true,
            ..Default::default()
        };
        assert_eq!(read_all(files.clone(), &follow), "one\nDONE");
        // Pieces of stdout that stderr's record interrupts, then an ended line: the
        // stdout line is not taken for a part of stderr's when counting lines.
        std::fs::write(
            &f,
            "2024-05-01T10:00:00Z stdout P out\n\
             2024-05-01T10:00:01Z stderr F err\n\
             2024-05-01T10:00:02Z stdout F next\n",
        )
        .unwrap();
        assert_eq!(read_all(files.clone(), &tail(2)), "err\nnext\n");
        assert_eq!(read_all(files.clone(), &tail(3)), "outerr\nnext\n");
        std::fs::remove_dir_all(&d).ok();
    }

    fn read_all(files: Vec<PathBuf>, o: &Options) -> String {
        let (tx, mut rx) = tokio::sync::mpsc::channel(1024);
        copy(files, o, &tx, || false);
        drop(tx);
        let mut s = String::new();
        while let Ok(b) = rx.try_recv() {
            s.push_str(&String::from_utf8_lossy(&b));
        }
        s
    }

    /// The forward reading `tail_start` stands for: every record's offset that starts a
    /// line, across the files in order.
    fn line_starts_forward(files: &[PathBuf]) -> Vec<(usize, u64)> {
        let mut out = vec![];
        let mut open: Option<String> = None;
        for (i, f) in files.iter().enumerate() {
            let data = std::fs::read(f).unwrap();
            let mut off = 0u64;
            for raw in data.split_inclusive(|b| *b == b'\n') {
                if !raw.ends_with(b"\n") {
                    break;
                }
                if let Some((_, stream, complete, _)) = parse_cri(raw) {
                    if open.as_deref() != Some(stream) {
                        out.push((i, off));
                    }
                    open = (!complete).then(|| stream.to_string());
                }
                off += raw.len() as u64;
            }
        }
        out
    }

    /// The tail read backwards in blocks finds where a forward reading would start the
    /// last n lines: pieces (`P`) of both streams, records longer than a block, a line
    /// going on in the next file, junk, and a record still being written at the end.
    #[test]
    fn tail_backwards_agrees_with_a_forward_reading() {
        let d = std::env::temp_dir().join(format!("crustlet-back-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        let mut seed = 7u64;
        let mut rnd = |n: u64| {
            seed = seed
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (seed >> 33) % n
        };
        let mut files = vec![];
        for k in 0..3 {
            let mut text = String::new();
            for j in 0..700 {
                let stream = if rnd(3) == 0 { "stderr" } else { "stdout" };
                let tag = if rnd(3) == 0 { "P" } else { "F" };
                let len = if rnd(50) == 0 {
                    70_000
                } else {
                    rnd(40) as usize
                };
                if rnd(100) == 0 {
                    text.push_str("not a record\n");
                }
                text.push_str(&format!(
                    "2024-05-01T10:00:{:02}Z {stream} {tag} {}\n",
                    j % 60,
                    "x".repeat(len)
                ));
            }
            if k == 2 {
                text.push_str("2024-05-01T10:00:00Z stdout F being writ");
            }
            let f = d.join(format!("0.log.{k}"));
            std::fs::write(&f, text).unwrap();
            files.push(f);
        }
        let starts = line_starts_forward(&files);
        for n in [
            1,
            2,
            5,
            100,
            699,
            700,
            701,
            1500,
            starts.len(),
            starts.len() + 1,
        ] {
            let want = if n > starts.len() {
                (0, 0)
            } else {
                starts[starts.len() - n]
            };
            assert_eq!(tail_start(&files, n), want, "last {n} lines");
        }
        std::fs::remove_dir_all(&d).ok();
    }

    /// Without follow, a log that grows faster than it is read is read as far as it
    /// went at the start: the request ends.
    #[test]
    fn a_read_without_follow_ends_while_the_log_grows() {
        let line = "2024-05-01T10:00:00Z stdout F flood flood flood flood\n";
        let (d, f) = temp_log("grow", &line.repeat(10_000));
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let writer = {
            let (f, stop) = (f.clone(), stop.clone());
            std::thread::spawn(move || {
                use std::io::Write;
                let mut w = std::fs::OpenOptions::new().append(true).open(f).unwrap();
                let block = line.repeat(1000);
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    w.write_all(block.as_bytes()).unwrap();
                }
            })
        };
        // A reader slower than the writer: the channel holds a little, and is drained
        // slowly.
        let (tx, mut rx) = tokio::sync::mpsc::channel::<Bytes>(2);
        let reader = std::thread::spawn(move || {
            let mut got = 0usize;
            while let Some(b) = rx.blocking_recv() {
                got += b.len();
                std::thread::sleep(Duration::from_millis(1));
            }
            got
        });
        // A read that never ends fails the test in a minute rather than hanging it.
        let (done_tx, done_rx) = std::sync::mpsc::channel();
        let file = f.clone();
        std::thread::spawn(move || {
            copy(vec![file], &Options::default(), &tx, || true);
            let _ = done_tx.send(());
        });
        let ended = done_rx.recv_timeout(Duration::from_secs(60));
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        assert!(ended.is_ok(), "the read without follow did not end");
        let got = reader.join().unwrap();
        writer.join().unwrap();
        // The lines there at the start at least, whole lines only.
        let text = "flood flood flood flood\n".len();
        assert!(got >= text * 10_000, "{got}");
        assert_eq!(got % text, 0, "{got}");
        std::fs::remove_dir_all(&d).ok();
    }

    #[test]
    fn tail_since_limit_and_timestamps_across_rotated_files() {
        let d = std::env::temp_dir().join(format!("crustlet-logs-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        let cur = d.join("0.log");
        std::fs::write(
            d.join("0.log.20240501-100000"),
            "2024-05-01T10:00:01Z stdout F one\n2024-05-01T10:00:02Z stdout P tw\n",
        )
        .unwrap();
        std::fs::write(
            &cur,
            "2024-05-01T10:00:03Z stdout F o\n2024-05-01T10:00:04Z stderr F three\n2024-05-01T10:00:05Z stdout F four\n2024-05-01T10:00:06Z stdout F fi",
        )
        .unwrap();
        std::fs::write(d.join("0.log.x.tmp"), "junk").unwrap();
        let files = files_of(&cur);
        assert_eq!(files.len(), 2, "{files:?}");
        let all = Options::default();
        assert_eq!(read_all(files.clone(), &all), "one\ntwo\nthree\nfour\n");
        let tail = |n| Options {
            tail: Some(n),
            ..Default::default()
        };
        assert_eq!(read_all(files.clone(), &tail(2)), "three\nfour\n");
        assert_eq!(read_all(files.clone(), &tail(3)), "two\nthree\nfour\n");
        assert_eq!(
            read_all(files.clone(), &tail(10)),
            "one\ntwo\nthree\nfour\n"
        );
        assert_eq!(read_all(files.clone(), &tail(0)), "");
        let since = Options {
            since: Some(ts("2024-05-01T10:00:03.5Z")),
            timestamps: true,
            ..Default::default()
        };
        assert_eq!(
            read_all(files.clone(), &since),
            "2024-05-01T10:00:04.000000000Z three\n2024-05-01T10:00:05.000000000Z four\n"
        );
        let limit = Options {
            limit: Some(6),
            ..Default::default()
        };
        assert_eq!(read_all(files.clone(), &limit), "one\ntw");
        std::fs::remove_dir_all(&d).ok();
    }

    #[test]
    fn older_rotated_logs_are_compressed_and_not_read_back() {
        let d = std::env::temp_dir().join(format!("crustlet-gz-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        let cur = d.join("0.log");
        std::fs::write(&cur, "now\n").unwrap();
        let old = d.join("0.log.20240101-000000");
        std::fs::write(&old, "old\n").unwrap();
        compress(&old).unwrap();
        assert!(!old.exists());
        let gz = d.join("0.log.20240101-000000.gz");
        let mut text = String::new();
        std::io::Read::read_to_string(
            &mut flate2::read::GzDecoder::new(std::fs::File::open(&gz).unwrap()),
            &mut text,
        )
        .unwrap();
        assert_eq!(text, "old\n");
        let newer = d.join("0.log.20240101-000001");
        std::fs::write(&newer, "newer\n").unwrap();
        assert_eq!(rotated(&cur), [gz, newer.clone()]);
        assert_eq!(files_of(&cur), [newer, cur]);
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn following_goes_on_into_a_rotated_file() {
        let d = std::env::temp_dir().join(format!("crustlet-logs-f-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        let cur = d.join("1.log");
        std::fs::write(&cur, "2024-05-01T10:00:01Z stdout F a\n").unwrap();
        let (tx, mut rx) = tokio::sync::mpsc::channel(16);
        let files = files_of(&cur);
        let c2 = cur.clone();
        let t = std::thread::spawn(move || {
            let o = Options {
                follow: true,
                ..Default::default()
            };
            let start = std::time::Instant::now();
            copy(files, &o, &tx, || start.elapsed() < Duration::from_secs(3));
        });
        std::thread::sleep(Duration::from_millis(300));
        use std::io::Write;
        let mut f = std::fs::OpenOptions::new().append(true).open(&c2).unwrap();
        f.write_all(b"2024-05-01T10:00:02Z stdout F b\n").unwrap();
        std::fs::rename(&c2, d.join("1.log.20240501-100002")).unwrap();
        std::fs::write(&c2, "2024-05-01T10:00:03Z stdout F c\n").unwrap();
        t.join().unwrap();
        let mut s = String::new();
        while let Ok(b) = rx.try_recv() {
            s.push_str(&String::from_utf8_lossy(&b));
        }
        assert_eq!(s, "a\nb\nc\n");
        assert_eq!(rotated(&c2).len(), 1);
        std::fs::remove_dir_all(&d).ok();
    }

    #[test]
    fn sizes() {
        assert_eq!(parse_size("10Mi"), Ok(10 << 20));
        assert_eq!(parse_size("1000"), Ok(1000));
        assert!(parse_size("-1").is_err());
        assert!(parse_size("ten").is_err());
    }
}
