//! memory: the limit and memory+swap (v1) or swap (v2) limit; usage, working set and
//! OOM kills.
//!
//! v1 keeps `memory.limit_in_bytes <= memory.memsw.limit_in_bytes` at every moment, so
//! the order of the two writes depends on the direction: raising writes memory+swap
//! first, lowering writes memory first. v1 also refuses a limit below what the cgroup
//! uses and cannot reclaim (EBUSY); v2 takes any value and OOM-kills instead. Both get
//! [`MIN_MEMORY_LIMIT`] as a floor, so a tiny limit is an error on both.

use crate::error::{Error, Result};
use crate::fs::{self, Keyed};
use crate::resources::{Resources, MIN_MEMORY_LIMIT};
use crate::stats::MemoryStats;
use std::path::Path;

const V1_LIMIT: &str = "memory.limit_in_bytes";
const V1_MEMSW: &str = "memory.memsw.limit_in_bytes";
const V2_MAX: &str = "memory.max";
const V2_SWAP: &str = "memory.swap.max";

pub(crate) fn apply_v1(dir: &Path, r: &Resources) -> Result<()> {
    let mem_file = dir.join(V1_LIMIT);
    let memsw_file = dir.join(V1_MEMSW);
    check(&mem_file, &memsw_file, r)?;
    let accounting = memsw_file.exists();
    let mut memsw = r.memory_swap_limit;
    if !accounting {
        if let Some(s) = memsw.take() {
            no_swap_accounting(&memsw_file, s, r.memory_limit);
        }
    }
    // Unlimited memory with memory+swap not named: unlimited memory+swap too, else the
    // kernel refuses a memory limit above the memory+swap limit in place.
    if accounting && memsw.is_none() && r.memory_limit.is_some_and(|m| m < 0) {
        memsw = Some(-1);
    }
    match (r.memory_limit, memsw) {
        (Some(m), Some(s)) => {
            let current = fs::read_limit(&mem_file)?;
            let raising = s < 0 || current.is_some_and(|c| c < s as u64);
            if raising {
                set_v1(dir, &memsw_file, s)?;
                set_v1(dir, &mem_file, m)
            } else {
                set_v1(dir, &mem_file, m)?;
                set_v1(dir, &memsw_file, s)
            }
        }
        (Some(m), None) => set_v1(dir, &mem_file, m),
        (None, Some(s)) => set_v1(dir, &memsw_file, s),
        (None, None) => Ok(()),
    }
}

/// Writes a v1 limit (−1 for unlimited); EBUSY, the kernel failing to reclaim below
/// the new limit, becomes [`below_usage`].
fn set_v1(dir: &Path, file: &Path, n: i64) -> Result<()> {
    let value = if n < 0 {
        "-1".to_string()
    } else {
        n.to_string()
    };
    match fs::set(file, &value) {
        Err(e) if e.errno() == Some(libc::EBUSY) => Err(below_usage(dir, file, value)),
        r => r,
    }
}

/// The error for a v1 limit the kernel refused with EBUSY, with the usage it is below.
fn below_usage(dir: &Path, file: &Path, value: String) -> Error {
    let usage_file = if file.ends_with(V1_MEMSW) {
        "memory.memsw.usage_in_bytes"
    } else {
        "memory.usage_in_bytes"
    };
    let usage = fs::read_u64(&dir.join(usage_file))
        .map_or_else(|_| "more".to_string(), |u| format!("{u} bytes"));
    Error::Limit {
        path: file.to_path_buf(),
        value,
        reason: format!(
            "below what the cgroup uses ({usage}) and the kernel cannot reclaim (EBUSY)"
        ),
    }
}

pub(crate) fn apply_v2(dir: &Path, r: &Resources) -> Result<()> {
    let max_file = dir.join(V2_MAX);
    let swap_file = dir.join(V2_SWAP);
    check(&max_file, &swap_file, r)?;
    let swap = match (r.memory_limit, r.memory_swap_limit) {
        // As on v1: unlimited memory with swap not named is unlimited swap too.
        (Some(m), None) if m < 0 => Some("max".to_string()),
        (_, None) => None,
        (_, Some(s)) if s < 0 => Some("max".to_string()),
        (Some(m), Some(s)) if m >= 0 => Some((s - m).to_string()),
        (_, Some(s)) => {
            return Err(Error::Limit {
                path: swap_file,
                value: s.to_string(),
                reason: "a memory+swap limit needs a memory limit".into(),
            })
        }
    };
    if let Some(swap) = swap {
        if swap_file.exists() {
            fs::set(&swap_file, &swap)?;
        } else if let Some(s) = r.memory_swap_limit {
            no_swap_accounting(&swap_file, s, r.memory_limit);
        }
    }
    if let Some(m) = r.memory_limit {
        let value = if m < 0 {
            "max".to_string()
        } else {
            m.to_string()
        };
        fs::set(&max_file, &value)?;
    }
    Ok(())
}

/// The floor, and memory+swap not below memory; errors name the file each is for.
fn check(mem_file: &Path, swap_file: &Path, r: &Resources) -> Result<()> {
    let floor = |file: &Path, n: Option<i64>, what: &str| match n {
        Some(n) if (0..MIN_MEMORY_LIMIT).contains(&n) => Err(Error::Limit {
            path: file.to_path_buf(),
            value: n.to_string(),
            reason: format!(
                "{what} below the minimum of {MIN_MEMORY_LIMIT} bytes ({} MiB)",
                MIN_MEMORY_LIMIT >> 20
            ),
        }),
        _ => Ok(()),
    };
    floor(mem_file, r.memory_limit, "memory limit")?;
    floor(swap_file, r.memory_swap_limit, "memory+swap limit")?;
    match (r.memory_limit, r.memory_swap_limit) {
        (Some(m), Some(s)) if s >= 0 && (m < 0 || s < m) => Err(Error::Limit {
            path: swap_file.to_path_buf(),
            value: s.to_string(),
            reason: format!("the memory+swap limit is below the memory limit {m}"),
        }),
        _ => Ok(()),
    }
}

/// A kernel without swap accounting cannot take a swap limit: it is skipped, with a
/// warning when it would have limited something (memory+swap above the memory limit
/// means swap is allowed, and that is not enforced; equal means no swap, which a
/// host without swap accounting typically also has no swap for).
fn no_swap_accounting(file: &Path, memsw: i64, memory: Option<i64>) {
    if memsw >= 0 && Some(memsw) != memory {
        tracing::warn!(file = %file.display(), memsw, "no swap accounting in this kernel: swap limit not applied");
    } else {
        tracing::debug!(file = %file.display(), "no swap accounting in this kernel");
    }
}

pub(crate) fn stats_v1(dir: &Path) -> Result<MemoryStats> {
    let usage = fs::read_u64(&dir.join("memory.usage_in_bytes"))?;
    let stat = Keyed::read_opt(&dir.join("memory.stat"))?;
    let memsw = fs::read_u64_opt(&dir.join("memory.memsw.usage_in_bytes"))?;
    Ok(MemoryStats {
        usage,
        working_set: usage.saturating_sub(stat.get("total_inactive_file")),
        rss: stat.get("total_rss"),
        cache: stat.get("total_cache"),
        swap: memsw.map_or(0, |m| m.saturating_sub(usage)),
        limit: fs::read_limit(&dir.join(V1_LIMIT))?,
        page_faults: stat.get("total_pgfault"),
        major_page_faults: stat.get("total_pgmajfault"),
        oom_kills: oom_kills_v1(dir)?,
        mapped_file: stat.get("total_mapped_file"),
        active_file: stat.get("total_active_file"),
        inactive_file: stat.get("total_inactive_file"),
        kernel: fs::read_u64_opt(&dir.join("memory.kmem.usage_in_bytes"))?.unwrap_or(0),
        max_usage: fs::read_u64_opt(&dir.join("memory.max_usage_in_bytes"))?.unwrap_or(usage),
        failcnt: fs::read_u64_opt(&dir.join("memory.failcnt"))?.unwrap_or(0),
    })
}

/// `None` when the cgroup has no memory controller (not enabled by its parent).
pub(crate) fn stats_v2(dir: &Path) -> Result<Option<MemoryStats>> {
    let Some(usage) = fs::read_u64_opt(&dir.join("memory.current"))? else {
        return Ok(None);
    };
    let stat = Keyed::read_opt(&dir.join("memory.stat"))?;
    let kernel = if stat.has("kernel") {
        stat.get("kernel")
    } else {
        ["kernel_stack", "pagetables", "percpu", "vmalloc", "slab"]
            .iter()
            .map(|k| stat.get(k))
            .sum()
    };
    let events = Keyed::parse(&fs::read(&dir.join("memory.events"))?);
    Ok(Some(MemoryStats {
        usage,
        working_set: usage.saturating_sub(stat.get("inactive_file")),
        rss: stat.get("anon"),
        cache: stat.get("file"),
        swap: fs::read_u64_opt(&dir.join("memory.swap.current"))?.unwrap_or(0),
        limit: fs::read_limit(&dir.join(V2_MAX))?,
        page_faults: stat.get("pgfault"),
        major_page_faults: stat.get("pgmajfault"),
        oom_kills: events.get("oom_kill"),
        mapped_file: stat.get("file_mapped"),
        active_file: stat.get("active_file"),
        inactive_file: stat.get("inactive_file"),
        kernel,
        max_usage: fs::read_u64_opt(&dir.join("memory.peak"))?.unwrap_or(usage),
        failcnt: events.get("max"),
    }))
}

/// v1 `memory.oom_control`'s `oom_kill` (0 on kernels before 4.13, which lack it).
pub(crate) fn oom_kills_v1(dir: &Path) -> Result<u64> {
    Ok(Keyed::parse(&fs::read(&dir.join("memory.oom_control"))?).get("oom_kill"))
}

/// v2 `memory.events`'s `oom_kill` (this cgroup and its descendants).
pub(crate) fn oom_kills_v2(dir: &Path) -> Result<u64> {
    Ok(Keyed::parse(&fs::read(&dir.join("memory.events"))?).get("oom_kill"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fs::testutil::Tree;

    const MIB: i64 = 1 << 20;

    fn mem(limit: Option<i64>, memsw: Option<i64>) -> Resources {
        Resources {
            memory_limit: limit,
            memory_swap_limit: memsw,
            ..Default::default()
        }
    }

    /// A fake v1 memory cgroup with swap accounting and the given limits in place.
    fn v1(t: &Tree, limit: &str, memsw: &str) -> std::path::PathBuf {
        t.write("m/memory.limit_in_bytes", limit);
        t.write("m/memory.memsw.limit_in_bytes", memsw);
        t.writes();
        t.path("m")
    }

    const V1_MAX: &str = "9223372036854771712\n";

    #[test]
    fn v1_first_limit_writes_memory_then_memsw() {
        let t = Tree::new();
        let d = v1(&t, V1_MAX, V1_MAX);
        apply_v1(&d, &mem(Some(64 * MIB), Some(64 * MIB))).unwrap();
        assert_eq!(
            t.writes(),
            [
                "m/memory.limit_in_bytes=67108864",
                "m/memory.memsw.limit_in_bytes=67108864"
            ]
        );
    }

    #[test]
    fn v1_raising_writes_memsw_first() {
        let t = Tree::new();
        let d = v1(&t, "67108864\n", "67108864\n");
        apply_v1(&d, &mem(Some(128 * MIB), Some(256 * MIB))).unwrap();
        assert_eq!(
            t.writes(),
            [
                "m/memory.memsw.limit_in_bytes=268435456",
                "m/memory.limit_in_bytes=134217728"
            ]
        );
    }

    #[test]
    fn v1_lowering_writes_memory_first() {
        let t = Tree::new();
        let d = v1(&t, "134217728\n", "268435456\n");
        apply_v1(&d, &mem(Some(32 * MIB), Some(64 * MIB))).unwrap();
        assert_eq!(
            t.writes(),
            [
                "m/memory.limit_in_bytes=33554432",
                "m/memory.memsw.limit_in_bytes=67108864"
            ]
        );
    }

    #[test]
    fn v1_unlimited_takes_memsw_along() {
        let t = Tree::new();
        let d = v1(&t, "67108864\n", "67108864\n");
        apply_v1(&d, &mem(Some(-1), None)).unwrap();
        assert_eq!(
            t.writes(),
            [
                "m/memory.memsw.limit_in_bytes=-1",
                "m/memory.limit_in_bytes=-1"
            ]
        );
        apply_v1(&d, &mem(None, Some(-1))).unwrap();
        assert_eq!(t.writes(), ["m/memory.memsw.limit_in_bytes=-1"]);
    }

    #[test]
    fn v1_without_swap_accounting_skips_memsw() {
        let t = Tree::new();
        t.write("m/memory.limit_in_bytes", V1_MAX);
        t.writes();
        let d = t.path("m");
        apply_v1(&d, &mem(Some(64 * MIB), Some(128 * MIB))).unwrap();
        apply_v1(&d, &mem(Some(-1), None)).unwrap();
        assert_eq!(
            t.writes(),
            [
                "m/memory.limit_in_bytes=67108864",
                "m/memory.limit_in_bytes=-1"
            ]
        );
        assert!(!t.exists("m/memory.memsw.limit_in_bytes"));
    }

    #[test]
    fn tiny_and_inconsistent_limits_are_errors_naming_the_file() {
        let t = Tree::new();
        let d = v1(&t, V1_MAX, V1_MAX);
        let e = apply_v1(&d, &mem(Some(4096), None)).unwrap_err();
        assert!(matches!(e, Error::Limit { .. }), "{e}");
        assert_eq!(
            e.to_string(),
            format!(
                "set {} to 4096: memory limit below the minimum of 6291456 bytes (6 MiB)",
                d.join("memory.limit_in_bytes").display()
            )
        );
        let e = apply_v1(&d, &mem(Some(64 * MIB), Some(32 * MIB))).unwrap_err();
        assert!(
            e.to_string()
                .contains("memory.memsw.limit_in_bytes to 33554432"),
            "{e}"
        );
        let e = apply_v2(&d, &mem(Some(0), None)).unwrap_err();
        assert!(e.to_string().contains("memory.max to 0: "), "{e}");
        let e = apply_v2(&d, &mem(None, Some(64 * MIB))).unwrap_err();
        assert!(e.to_string().contains("needs a memory limit"), "{e}");
        assert_eq!(t.writes(), Vec::<String>::new(), "nothing written");
    }

    #[test]
    fn v1_ebusy_names_file_value_and_usage() {
        let t = Tree::new();
        t.write("m/memory.usage_in_bytes", "50000000\n");
        let file = t.path("m/memory.limit_in_bytes");
        let e = below_usage(&t.path("m"), &file, "8388608".into());
        assert_eq!(
            e.to_string(),
            format!(
                "set {} to 8388608: below what the cgroup uses (50000000 bytes) and the \
                 kernel cannot reclaim (EBUSY)",
                file.display()
            )
        );
    }

    #[test]
    fn v2_files() {
        let t = Tree::new();
        t.write("m/memory.max", "max\n");
        t.write("m/memory.swap.max", "max\n");
        t.writes();
        let d = t.path("m");
        apply_v2(&d, &mem(Some(64 * MIB), Some(96 * MIB))).unwrap();
        assert_eq!(
            t.writes(),
            ["m/memory.swap.max=33554432", "m/memory.max=67108864"]
        );
        apply_v2(&d, &mem(Some(64 * MIB), Some(64 * MIB))).unwrap();
        assert_eq!(t.writes(), ["m/memory.swap.max=0", "m/memory.max=67108864"]);
        apply_v2(&d, &mem(Some(-1), None)).unwrap();
        assert_eq!(t.writes(), ["m/memory.swap.max=max", "m/memory.max=max"]);
        apply_v2(&d, &mem(Some(64 * MIB), Some(-1))).unwrap();
        assert_eq!(
            t.writes(),
            ["m/memory.swap.max=max", "m/memory.max=67108864"]
        );
        apply_v2(&d, &mem(Some(64 * MIB), None)).unwrap();
        assert_eq!(t.writes(), ["m/memory.max=67108864"]);
        // No swap accounting: only memory.max.
        std::fs::remove_file(t.path("m/memory.swap.max")).unwrap();
        apply_v2(&d, &mem(Some(64 * MIB), Some(96 * MIB))).unwrap();
        assert_eq!(t.writes(), ["m/memory.max=67108864"]);
    }

    #[test]
    fn stats_and_working_set() {
        let t = Tree::new();
        t.write("v1/memory.usage_in_bytes", "10000000\n");
        t.write("v1/memory.memsw.usage_in_bytes", "10004096\n");
        t.write("v1/memory.limit_in_bytes", "33554432\n");
        t.write(
            "v1/memory.stat",
            "cache 1\nrss 2\ninactive_file 3\ntotal_cache 4000000\ntotal_rss 5000000\n\
             total_inactive_file 3000000\ntotal_active_file 1000000\n\
             total_mapped_file 250000\ntotal_pgfault 77\ntotal_pgmajfault 2\n",
        );
        t.write("v1/memory.kmem.usage_in_bytes", "300000\n");
        t.write("v1/memory.max_usage_in_bytes", "12000000\n");
        t.write("v1/memory.failcnt", "5\n");
        t.write(
            "v1/memory.oom_control",
            "oom_kill_disable 0\nunder_oom 0\noom_kill 1\n",
        );
        let s = stats_v1(&t.path("v1")).unwrap();
        assert_eq!(
            s,
            MemoryStats {
                usage: 10_000_000,
                working_set: 7_000_000,
                rss: 5_000_000,
                cache: 4_000_000,
                swap: 4096,
                limit: Some(33_554_432),
                page_faults: 77,
                major_page_faults: 2,
                oom_kills: 1,
                mapped_file: 250_000,
                active_file: 1_000_000,
                inactive_file: 3_000_000,
                kernel: 300_000,
                max_usage: 12_000_000,
                failcnt: 5,
            }
        );
        assert_eq!(oom_kills_v1(&t.path("v1")).unwrap(), 1);

        t.write("v2/memory.current", "1000\n");
        t.write("v2/memory.max", "max\n");
        t.write(
            "v2/memory.stat",
            "anon 600\nfile 400\ninactive_file 5000\npgfault 9\npgmajfault 1\n",
        );
        t.write(
            "v2/memory.events",
            "low 0\nhigh 0\nmax 12\noom 2\noom_kill 2\noom_group_kill 0\n",
        );
        let s = stats_v2(&t.path("v2")).unwrap().unwrap();
        // More inactive file cache than usage (hierarchical vs. local): never below 0.
        assert_eq!(
            (s.usage, s.working_set, s.rss, s.cache),
            (1000, 0, 600, 400)
        );
        assert_eq!((s.limit, s.oom_kills, s.swap), (None, 2, 0));
        assert_eq!((s.page_faults, s.major_page_faults), (9, 1));
        // No peak (before 5.19): the current usage; no `kernel` line: its parts.
        assert_eq!((s.max_usage, s.failcnt, s.kernel), (1000, 12, 0));
        assert_eq!(oom_kills_v2(&t.path("v2")).unwrap(), 2);
        t.write("v2/memory.peak", "4000\n");
        t.write(
            "v2/memory.stat",
            "anon 600\nfile 400\nactive_file 100\ninactive_file 300\nfile_mapped 50\n\
             kernel_stack 16\npagetables 8\npercpu 4\nvmalloc 2\nslab 1\nsock 64\n",
        );
        let s = stats_v2(&t.path("v2")).unwrap().unwrap();
        assert_eq!((s.max_usage, s.kernel, s.mapped_file), (4000, 31, 50));
        assert_eq!(
            (s.active_file, s.inactive_file, s.working_set),
            (100, 300, 700)
        );
        t.write("v2/memory.stat", "anon 600\nkernel 90\nkernel_stack 16\n");
        assert_eq!(stats_v2(&t.path("v2")).unwrap().unwrap().kernel, 90);
        assert_eq!(stats_v2(&t.path("nomem")).unwrap(), None);
        let e = oom_kills_v2(&t.path("nomem")).unwrap_err();
        assert!(e.to_string().contains("nomem/memory.events"), "{e}");
    }
}
