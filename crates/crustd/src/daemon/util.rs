//! Small helpers: ids, timestamps, atomic writes.

use std::io::Write;
use std::path::Path;

/// 64 random hex digits, the id format of CRI runtimes.
pub fn new_id() -> String {
    let mut b = [0u8; 32];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| std::io::Read::read_exact(&mut f, &mut b))
        .expect("reading /dev/urandom");
    hex(&b)
}

pub fn hex(b: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut s = String::with_capacity(b.len() * 2);
    for x in b {
        s.push(DIGITS[usize::from(x >> 4)] as char);
        s.push(DIGITS[usize::from(x & 15)] as char);
    }
    s
}

/// Bytes (a protobuf message) kept as bytes in memory and written as hex in a record
/// file: the hex string would take twice the memory in each of a node's records.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct HexBytes(pub Vec<u8>);

impl serde::Serialize for HexBytes {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&hex(&self.0))
    }
}

impl<'de> serde::Deserialize<'de> for HexBytes {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = <std::borrow::Cow<'de, str>>::deserialize(d)?;
        unhex(&s)
            .map(HexBytes)
            .ok_or_else(|| serde::de::Error::custom("not hex"))
    }
}

/// A JSON document kept as its text: written into a record file as JSON, not as a
/// string. A `serde_json::Value` of a CNI result (three interfaces, addresses, routes)
/// takes about 4 KiB of B-tree nodes for its 600 bytes of text, in every pod's record.
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
#[serde(transparent)]
pub struct RawJson(pub Box<serde_json::value::RawValue>);

impl RawJson {
    pub fn from_value(v: &impl serde::Serialize) -> Option<RawJson> {
        serde_json::value::to_raw_value(v).ok().map(RawJson)
    }
}

impl PartialEq for RawJson {
    fn eq(&self, other: &Self) -> bool {
        self.0.get() == other.0.get()
    }
}

impl Eq for RawJson {}

pub fn unhex(s: &str) -> Option<Vec<u8>> {
    if s.len() % 2 != 0 {
        return None;
    }
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).ok())
        .collect()
}

/// Nanoseconds since the epoch, the CRI's timestamp unit.
pub fn now_ns() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as i64)
        .unwrap_or(0)
}

/// Like [`write_atomic`] without waiting for the disk: readers see the old or the new
/// content, never a mix, and a daemon killed after it finds the new one (the page
/// cache survives a process), but a power loss may lose it. For what does not outlive
/// a reboot anyway, or is made again from a durable record.
pub fn write_replace(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    write_via_temp(path, bytes, false)
}

/// Temp file, fsync, rename, fsync the folder: a crash leaves the old content or the
/// new, never a torn file.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    write_via_temp(path, bytes, true)
}

/// Temp file beside `path`, then rename; with `sync`, the file before the rename and
/// the directory after it.
fn write_via_temp(path: &Path, bytes: &[u8], sync: bool) -> std::io::Result<()> {
    let dir = path
        .parent()
        .ok_or_else(|| std::io::Error::other(format!("{} has no parent", path.display())))?;
    std::fs::create_dir_all(dir)?;
    let tmp = dir.join(format!(
        ".{}.tmp",
        path.file_name().unwrap_or_default().to_string_lossy()
    ));
    let mut f = std::fs::File::create(&tmp)?;
    f.write_all(bytes)?;
    if sync {
        f.sync_all()?;
    }
    drop(f);
    std::fs::rename(&tmp, path)?;
    if sync {
        std::fs::File::open(dir)?.sync_all()?;
    }
    Ok(())
}

/// crustd's own `oom_score_adj` (0 when unreadable): the lowest a process it starts may
/// have without `CAP_SYS_RESOURCE`.
pub fn own_oom_score_adj() -> i64 {
    std::fs::read_to_string("/proc/self/oom_score_adj")
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(0)
}

/// Whether crustd's effective set has `CAP_SYS_RESOURCE`, which lowering an
/// `oom_score_adj` below its own needs (these machines' bounding set lacks it).
pub fn has_cap_sys_resource() -> bool {
    /// linux/capability.h
    const CAP_SYS_RESOURCE: u32 = 24;
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("CapEff:"))
        .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
        .is_some_and(|caps| caps & (1 << CAP_SYS_RESOURCE) != 0)
}

/// RFC 3339 with nanoseconds, for the verbose info maps.
pub fn rfc3339(ns: i64) -> String {
    let secs = ns.div_euclid(1_000_000_000);
    let nanos = ns.rem_euclid(1_000_000_000);
    let days = secs.div_euclid(86_400);
    let rem = secs.rem_euclid(86_400);
    let (y, m, d) = civil_from_days(days);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}.{nanos:09}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

/// Days since 1970-01-01 to (year, month, day), proleptic Gregorian.
fn civil_from_days(z: i64) -> (i64, i64, i64) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    (if m <= 2 { y + 1 } else { y }, m, d)
}

/// Runs `side` on a thread of its own while `main` runs here, and returns both
/// results. Where no thread can be had (the node's or crustd's pid limit reached),
/// `side` runs here first: the work is the same, only slower, and a failed spawn
/// never leaves an operation half done (a panic would skip its rollback).
pub fn beside<A: Send, B>(side: impl FnOnce() -> A + Send, main: impl FnOnce() -> B) -> (A, B) {
    // The thread takes `side` out of the cell; a thread that never started leaves it.
    let cell = parking_lot::Mutex::new(Some(side));
    std::thread::scope(|s| {
        let run = || {
            let f = cell.lock().take();
            f.map(|f| f())
        };
        match std::thread::Builder::new().spawn_scoped(s, run) {
            Ok(h) => {
                let b = main();
                let a = h.join().unwrap_or_else(|p| std::panic::resume_unwind(p));
                (a.expect("the thread ran `side`"), b)
            }
            Err(e) => {
                tracing::warn!(error = %e, "no thread to work beside: working in turn");
                let f = cell.lock().take();
                let a = f.expect("`side` not taken")();
                (a, main())
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_and_hex() {
        let a = new_id();
        assert_eq!(a.len(), 64);
        assert_ne!(a, new_id());
        assert_eq!(unhex(&hex(&[0, 255, 16])).unwrap(), vec![0, 255, 16]);
        assert!(unhex("abc").is_none());
        assert_eq!(hex(&[0, 255, 16, 0xab]), "00ff10ab");
    }

    #[test]
    fn protobuf_bytes_are_hex_in_a_record_file_as_before() {
        let b = HexBytes(vec![0x0a, 0x03, b'f', b'o', b'o']);
        let json = serde_json::to_string(&b).unwrap();
        assert_eq!(json, "\"0a03666f6f\"");
        assert_eq!(serde_json::from_str::<HexBytes>(&json).unwrap(), b);
        assert!(serde_json::from_str::<HexBytes>("\"0g\"").is_err());
    }

    #[test]
    fn timestamps() {
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00.000000000Z");
        assert_eq!(
            rfc3339(1_700_000_000_123_456_789),
            "2023-11-14T22:13:20.123456789Z"
        );
        assert_eq!(
            rfc3339(951_782_400_000_000_000),
            "2000-02-29T00:00:00.000000000Z"
        );
    }

    #[test]
    fn beside_runs_both_and_returns_both() {
        let (a, b) = super::beside(|| 1 + 1, || "main");
        assert_eq!((a, b), (2, "main"));
    }
}
