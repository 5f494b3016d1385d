//! What the side-by-side benchmarks (`sandbox`, `container`, `runtime`) share: memory and
//! latency figures, a phase runner, and the busybox image with an OCI archive of it for
//! containerd; the CRI call wrapper, the pod network's conflist, the pause image and
//! containerd 1.6 + runc running offline in a node namespace of its own are
//! `crust_e2e::containerd`'s (the seccomp suite uses them too), re-exported here.
//! Each bench includes this with `mod common;` and uses part of it.
#![allow(dead_code)]

pub use crust_e2e::containerd::*;
use crust_e2e::which;
use image::layout::{write_oci_layout, Compression, LayerBuilder, LayoutEntry, LayoutImage};
use std::collections::HashMap;
use std::future::Future;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

// ---------------------------------------------------------------------------------
// Measurements

#[derive(Default, Clone, Copy)]
pub struct Mem {
    pub rss: u64,
    pub pss: u64,
}

impl std::ops::Add for Mem {
    type Output = Mem;
    fn add(self, o: Mem) -> Mem {
        Mem {
            rss: self.rss + o.rss,
            pss: self.pss + o.pss,
        }
    }
}

/// VmRSS (`/proc/PID/status`) and Pss (`/proc/PID/smaps_rollup`) of a process, in KiB.
pub fn mem_of(pid: i32) -> Option<Mem> {
    let field = |file: &str, key: &str| -> Option<u64> {
        let text = std::fs::read_to_string(format!("/proc/{pid}/{file}")).ok()?;
        text.lines()
            .find_map(|l| l.strip_prefix(key))
            .and_then(|v| v.split_whitespace().next())
            .and_then(|v| v.parse().ok())
    };
    Some(Mem {
        rss: field("status", "VmRSS:")?,
        pss: field("smaps_rollup", "Pss:")?,
    })
}

pub fn ppid_of(pid: i32) -> Option<i32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let after = stat.rsplit_once(')')?.1;
    after.split_whitespace().nth(1)?.parse().ok()
}

pub fn comm_of(pid: i32) -> String {
    std::fs::read_to_string(format!("/proc/{pid}/comm"))
        .unwrap_or_default()
        .trim()
        .to_string()
}

/// Median of per-pod memory figures.
pub fn median_mem(v: &[Mem]) -> Mem {
    if v.is_empty() {
        return Mem::default();
    }
    let med = |f: &dyn Fn(&Mem) -> u64| {
        let mut s: Vec<u64> = v.iter().map(f).collect();
        s.sort_unstable();
        s[s.len() / 2]
    };
    Mem {
        rss: med(&|m| m.rss),
        pss: med(&|m| m.pss),
    }
}

pub fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

pub fn pct(v: &[Duration], p: f64) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    let mut s: Vec<f64> = v.iter().map(|d| ms(*d)).collect();
    s.sort_by(|a, b| a.partial_cmp(b).unwrap());
    s[((s.len() as f64 - 1.0) * p).round() as usize]
}

/// The masked and read-only paths the kubelet v1.28 sends in every container's security
/// context (its defaults), so both runtimes are asked for the same.
pub const KUBELET_MASKED_PATHS: [&str; 10] = [
    "/proc/asound",
    "/proc/acpi",
    "/proc/kcore",
    "/proc/keys",
    "/proc/latency_stats",
    "/proc/timer_list",
    "/proc/timer_stats",
    "/proc/sched_debug",
    "/proc/scsi",
    "/sys/firmware",
];
pub const KUBELET_READONLY_PATHS: [&str; 5] = [
    "/proc/bus",
    "/proc/fs",
    "/proc/irq",
    "/proc/sys",
    "/proc/sysrq-trigger",
];

/// Word `word` of the first line a tool prints (its version), or `?`.
pub fn tool_version(cmd: &[&str], word: usize) -> String {
    let out = crust_e2e::run(Command::new(cmd[0]).args(&cmd[1..]));
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .next()
        .and_then(|l| l.split_whitespace().nth(word))
        .unwrap_or("?")
        .to_string()
}

// ---------------------------------------------------------------------------------
// The busybox-static image (`container`, `runtime`)

pub const IMAGE: &str = "localhost/crust-bench/busybox:1";
pub const APPLETS: &[&str] = &["true", "sh", "sleep"];

/// Writes the busybox-static image as an OCI layout at `dir`, named [`IMAGE`].
pub fn busybox_layout(dir: &Path) {
    let bb = which("busybox").expect("busybox on PATH (apt-get install -y busybox-static)");
    let mut l = LayerBuilder::new()
        .dir("bin", 0o755)
        .file_from("bin/busybox", &bb, 0o755)
        .dir("etc", 0o755)
        .file("etc/passwd", b"root:x:0:0:root:/root:/bin/sh\n", 0o644)
        .file("etc/group", b"root:x:0:\n", 0o644)
        .dir("dev", 0o755)
        .dir("proc", 0o755)
        .dir("sys", 0o755)
        .dir("tmp", 0o1777);
    for a in APPLETS {
        l = l.symlink(&format!("bin/{a}"), "busybox");
    }
    let mut img = LayoutImage::new(vec![(l.finish(), Compression::Gzip)]);
    img.config.cmd = vec!["/bin/sh".into()];
    img.config.env = vec!["PATH=/bin".into()];
    img.config.working_dir = "/".into();
    write_oci_layout(
        dir,
        &[LayoutEntry {
            ref_name: Some("1".into()),
            image_name: Some(IMAGE.into()),
            platforms: vec![img],
        }],
    );
}

/// An OCI archive (the layout's files in a tar) at `out`, for `ctr images import`.
pub fn layout_archive(layout: &Path, out: &Path) -> PathBuf {
    let mut b = tar::Builder::new(std::fs::File::create(out).unwrap());
    b.mode(tar::HeaderMode::Deterministic);
    b.append_path_with_name(layout.join("oci-layout"), "oci-layout")
        .unwrap();
    b.append_path_with_name(layout.join("index.json"), "index.json")
        .unwrap();
    let blobs = layout.join("blobs/sha256");
    let mut names: Vec<_> = std::fs::read_dir(&blobs)
        .unwrap()
        .flatten()
        .map(|e| e.file_name())
        .collect();
    names.sort();
    for n in names {
        let name = format!("blobs/sha256/{}", n.to_string_lossy());
        b.append_path_with_name(blobs.join(&n), name).unwrap();
    }
    b.into_inner().unwrap();
    out.to_path_buf()
}

// ---------------------------------------------------------------------------------
// CRI helpers

/// `.info.pid` of a verbose status's `info` JSON, the same for both daemons.
pub fn info_pid(info: &HashMap<String, String>, what: &str) -> Result<i32, String> {
    let text = info
        .get("info")
        .ok_or_else(|| format!("no verbose info for {what}"))?;
    let v: serde_json::Value =
        serde_json::from_str(text).map_err(|e| format!("verbose info of {what}: {e}"))?;
    v["pid"]
        .as_i64()
        .filter(|p| *p > 0)
        .map(|p| p as i32)
        .ok_or_else(|| format!("no pid in the verbose info of {what}: {text}"))
}

/// Runs `f(0..n)` with `par` calls in flight; returns every call's duration and the
/// phase's wall time.
pub async fn phase<F, Fut>(n: usize, par: usize, f: F) -> Result<(Vec<Duration>, Duration), String>
where
    F: Fn(usize) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<Duration, String>> + Send + 'static,
{
    let f = Arc::new(f);
    let next = Arc::new(AtomicUsize::new(0));
    let t = Instant::now();
    let workers: Vec<_> = (0..par)
        .map(|_| {
            let (f, next) = (f.clone(), next.clone());
            tokio::spawn(async move {
                let mut out = Vec::new();
                loop {
                    let i = next.fetch_add(1, Ordering::SeqCst);
                    if i >= n {
                        return Ok::<_, String>(out);
                    }
                    out.push(f(i).await?);
                }
            })
        })
        .collect();
    let mut all = Vec::with_capacity(n);
    let mut first_err = None;
    for w in workers {
        match w.await {
            Ok(Ok(v)) => all.extend(v),
            Ok(Err(e)) => {
                first_err.get_or_insert(e);
            }
            Err(e) => {
                first_err.get_or_insert(format!("worker panicked: {e}"));
            }
        }
    }
    match first_err {
        Some(e) => Err(e),
        None => Ok((all, t.elapsed())),
    }
}
