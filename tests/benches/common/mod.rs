//! What the side-by-side benchmarks (`sandbox`, `container`) share: memory and latency
//! figures; the CRI call wrapper, the pod network's conflist, OCI archives for containerd
//! and containerd 1.6 + runc running offline in a node namespace of its own are
//! `crust_e2e::containerd`'s (the seccomp suite uses them too), re-exported here.
//! Each bench includes this with `mod common;` and uses part of it.
#![allow(dead_code)]

pub use crust_e2e::containerd::*;
use std::process::Command;
use std::time::Duration;

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
