//! io (v2) and blkio (v1): what the cgroup's tasks read and wrote, per block device.
//! crust sets no I/O limits; this is only read, for the CRI metrics.
//!
//! v1 keeps the counts in up to three sets of files, by who counted: the CFQ scheduler
//! (`blkio.io_service_bytes_recursive`, gone with CFQ in 5.0), BFQ (`blkio.bfq.*`, only
//! for devices BFQ schedules) and the throttling layer (`blkio.throttle.*`, every
//! device, as v2's `io.stat`). The throttling layer's are read when the kernel has
//! them, then BFQ's, then CFQ's.

use crate::error::Result;
use crate::fs;
use crate::stats::DeviceIo;
use std::collections::BTreeMap;
use std::path::Path;

const V1_PREFIXES: &[&str] = &["blkio.throttle.", "blkio.bfq.", "blkio."];

/// v1: bytes from `<prefix>io_service_bytes_recursive`, operations from
/// `<prefix>io_serviced_recursive`, of the first prefix whose files exist. Empty when the
/// cgroup has no blkio hierarchy files.
pub(crate) fn stats_v1(dir: &Path) -> Result<Vec<DeviceIo>> {
    for prefix in V1_PREFIXES {
        let Some(bytes) = fs::read_opt(&dir.join(format!("{prefix}io_service_bytes_recursive")))?
        else {
            continue;
        };
        let ops = fs::read_opt(&dir.join(format!("{prefix}io_serviced_recursive")))?;
        let mut devices = BTreeMap::new();
        for (major, minor, op, n) in v1_lines(&bytes) {
            let d = device(&mut devices, major, minor);
            match op {
                "Read" => d.read_bytes = n,
                "Write" => d.write_bytes = n,
                _ => {}
            }
        }
        for (major, minor, op, n) in v1_lines(ops.as_deref().unwrap_or("")) {
            let d = device(&mut devices, major, minor);
            match op {
                "Read" => d.reads = n,
                "Write" => d.writes = n,
                _ => {}
            }
        }
        return Ok(devices.into_values().collect());
    }
    Ok(vec![])
}

/// v2: `io.stat`'s `MAJ:MIN rbytes=N wbytes=N rios=N wios=N ...` lines; empty when the
/// cgroup has no io controller (no such file).
pub(crate) fn stats_v2(dir: &Path) -> Result<Vec<DeviceIo>> {
    let Some(text) = fs::read_opt(&dir.join("io.stat"))? else {
        return Ok(vec![]);
    };
    let mut devices = BTreeMap::new();
    for line in text.lines() {
        let mut fields = line.split_whitespace();
        let Some((major, minor)) = fields.next().and_then(major_minor) else {
            continue;
        };
        let d = device(&mut devices, major, minor);
        for kv in fields {
            let Some((k, v)) = kv.split_once('=') else {
                continue;
            };
            let Ok(n) = v.parse() else { continue };
            match k {
                "rbytes" => d.read_bytes = n,
                "wbytes" => d.write_bytes = n,
                "rios" => d.reads = n,
                "wios" => d.writes = n,
                _ => {}
            }
        }
    }
    Ok(devices.into_values().collect())
}

fn device(devices: &mut BTreeMap<(u64, u64), DeviceIo>, major: u64, minor: u64) -> &mut DeviceIo {
    devices.entry((major, minor)).or_insert_with(|| DeviceIo {
        major,
        minor,
        ..Default::default()
    })
}

fn major_minor(s: &str) -> Option<(u64, u64)> {
    let (a, b) = s.split_once(':')?;
    Some((a.parse().ok()?, b.parse().ok()?))
}

/// The `MAJ:MIN Op N` lines of a v1 blkio file (its last line, `Total N`, has no device).
fn v1_lines(text: &str) -> impl Iterator<Item = (u64, u64, &str, u64)> {
    text.lines().filter_map(|l| {
        let mut f = l.split_whitespace();
        let (major, minor) = major_minor(f.next()?)?;
        let op = f.next()?;
        Some((major, minor, op, f.next()?.parse().ok()?))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fs::testutil::Tree;

    fn dev(major: u64, minor: u64, rb: u64, wb: u64, r: u64, w: u64) -> DeviceIo {
        DeviceIo {
            major,
            minor,
            read_bytes: rb,
            write_bytes: wb,
            reads: r,
            writes: w,
        }
    }

    #[test]
    fn v1_prefers_the_throttling_layers_files() {
        let t = Tree::new();
        t.write(
            "b/blkio.throttle.io_service_bytes_recursive",
            "8:16 Read 4096\n8:16 Write 8192\n8:16 Sync 0\n8:16 Async 12288\n\
             8:16 Discard 0\n8:16 Total 12288\n8:0 Read 512\n8:0 Write 0\nTotal 12800\n",
        );
        t.write(
            "b/blkio.throttle.io_serviced_recursive",
            "8:16 Read 1\n8:16 Write 2\n8:16 Total 3\n8:0 Read 1\nTotal 4\n",
        );
        // BFQ's, with other numbers: not read while the throttling layer's are there.
        t.write("b/blkio.bfq.io_service_bytes_recursive", "8:0 Read 1\n");
        assert_eq!(
            stats_v1(&t.path("b")).unwrap(),
            [dev(8, 0, 512, 0, 1, 0), dev(8, 16, 4096, 8192, 1, 2)]
        );
        std::fs::remove_file(t.path("b/blkio.throttle.io_service_bytes_recursive")).unwrap();
        assert_eq!(stats_v1(&t.path("b")).unwrap(), [dev(8, 0, 1, 0, 0, 0)]);
        // No I/O yet, or no blkio files at all: nothing.
        t.write("e/blkio.throttle.io_service_bytes_recursive", "Total 0\n");
        assert_eq!(stats_v1(&t.path("e")).unwrap(), []);
        assert_eq!(stats_v1(&t.path("none")).unwrap(), []);
    }

    #[test]
    fn v2_io_stat() {
        let t = Tree::new();
        t.write(
            "c/io.stat",
            "259:0 rbytes=1048576 wbytes=4096 rios=20 wios=1 dbytes=0 dios=0\n\
             8:0 rbytes=512 wbytes=0 rios=1 wios=0 dbytes=0 dios=0\n",
        );
        assert_eq!(
            stats_v2(&t.path("c")).unwrap(),
            [dev(8, 0, 512, 0, 1, 0), dev(259, 0, 1_048_576, 4096, 20, 1)]
        );
        t.write("c/io.stat", "");
        assert_eq!(stats_v2(&t.path("c")).unwrap(), []);
        assert_eq!(stats_v2(&t.path("none")).unwrap(), []);
    }
}
