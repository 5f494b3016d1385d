//! cpu (and v1 cpuacct): shares or weight, CFS quota and period; CPU time and throttling.

use super::positive_or_max;
use crate::error::{Error, Result};
use crate::fs::{self, Keyed};
use crate::resources::{Resources, MAX_SHARES, MAX_WEIGHT, MIN_SHARES, MIN_WEIGHT};
use crate::stats::CpuStats;
use std::path::Path;

/// v1: `cpu.shares` (read back: the kernel clamps silently), then `cpu.cfs_period_us`
/// and `cpu.cfs_quota_us` (−1 for unlimited). When the new period with the old quota
/// breaks the hierarchy's bandwidth constraints (EINVAL), the quota goes first.
pub(crate) fn apply_v1(dir: &Path, r: &Resources) -> Result<()> {
    if let Some(shares) = r.v1_shares() {
        let file = dir.join("cpu.shares");
        fs::set(&file, &shares.to_string())?;
        let got = fs::read_u64(&file)?;
        if got != shares {
            return Err(Error::Limit {
                path: file,
                value: shares.to_string(),
                reason: format!(
                    "the kernel made it {got}: shares must be within {MIN_SHARES}-{MAX_SHARES}"
                ),
            });
        }
    }
    let quota_file = dir.join("cpu.cfs_quota_us");
    let quota = r
        .cpu_quota
        .map(|q| if q > 0 { q.to_string() } else { "-1".into() });
    if let Some(period) = r.cpu_period {
        let period_file = dir.join("cpu.cfs_period_us");
        match fs::set(&period_file, &period.to_string()) {
            Ok(()) => {}
            Err(e) if e.errno() == Some(libc::EINVAL) => {
                let Some(q) = &quota else { return Err(e) };
                fs::set(&quota_file, q)?;
                return fs::set(&period_file, &period.to_string());
            }
            Err(e) => return Err(e),
        }
    }
    if let Some(q) = quota {
        fs::set(&quota_file, &q)?;
    }
    Ok(())
}

/// v2: `cpu.weight`, then `cpu.max` as `QUOTA PERIOD` (`max` for unlimited; when only the
/// period is given, the quota the cgroup has is kept).
pub(crate) fn apply_v2(dir: &Path, r: &Resources) -> Result<()> {
    if let Some(weight) = r.v2_weight() {
        let file = dir.join("cpu.weight");
        if !(MIN_WEIGHT..=MAX_WEIGHT).contains(&weight) {
            return Err(Error::Limit {
                path: file,
                value: weight.to_string(),
                reason: format!("the weight must be within {MIN_WEIGHT}-{MAX_WEIGHT}"),
            });
        }
        fs::set(&file, &weight.to_string())?;
    }
    if r.cpu_quota.is_some() || r.cpu_period.is_some() {
        let file = dir.join("cpu.max");
        let quota = match r.cpu_quota {
            Some(q) => positive_or_max(q),
            None => fs::read_opt(&file)?
                .and_then(|s| s.split_whitespace().next().map(str::to_string))
                .unwrap_or_else(|| "max".into()),
        };
        let value = match r.cpu_period {
            Some(p) => format!("{quota} {p}"),
            None => quota,
        };
        fs::set(&file, &value)?;
    }
    Ok(())
}

/// v1: usage from `cpuacct` (user/system in ns from `cpuacct.usage_user`/`_sys`, else
/// `cpuacct.stat` in clock ticks), throttling from `cpu.stat`.
pub(crate) fn stats_v1(cpu: Option<&Path>, cpuacct: Option<&Path>) -> Result<CpuStats> {
    let mut s = CpuStats::default();
    if let Some(d) = cpuacct {
        s.usage_ns = fs::read_u64(&d.join("cpuacct.usage"))?;
        let user = fs::read_u64_opt(&d.join("cpuacct.usage_user"))?;
        let sys = fs::read_u64_opt(&d.join("cpuacct.usage_sys"))?;
        (s.user_ns, s.system_ns) = match (user, sys) {
            (Some(u), Some(y)) => (u, y),
            _ => {
                let k = Keyed::read_opt(&d.join("cpuacct.stat"))?;
                let tick = 1_000_000_000 / clock_ticks_per_second();
                (k.get("user") * tick, k.get("system") * tick)
            }
        };
    }
    if let Some(d) = cpu {
        let k = Keyed::read_opt(&d.join("cpu.stat"))?;
        s.periods = k.get("nr_periods");
        s.throttled_periods = k.get("nr_throttled");
        s.throttled_ns = k.get("throttled_time");
    }
    Ok(s)
}

/// v2: `cpu.stat`, which every cgroup has (the cpu controller only adds throttling).
pub(crate) fn stats_v2(dir: &Path) -> Result<CpuStats> {
    let k = Keyed::parse(&fs::read(&dir.join("cpu.stat"))?);
    Ok(CpuStats {
        usage_ns: k.get("usage_usec") * 1000,
        user_ns: k.get("user_usec") * 1000,
        system_ns: k.get("system_usec") * 1000,
        periods: k.get("nr_periods"),
        throttled_periods: k.get("nr_throttled"),
        throttled_ns: k.get("throttled_usec") * 1000,
    })
}

/// `USER_HZ`, the unit of `cpuacct.stat` (100 on every Linux architecture crust runs on).
fn clock_ticks_per_second() -> u64 {
    // SAFETY: sysconf has no preconditions.
    let n = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    u64::try_from(n).ok().filter(|&n| n > 0).unwrap_or(100)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fs::testutil::Tree;

    fn cpu(shares: Option<u64>, quota: Option<i64>, period: Option<u64>) -> Resources {
        Resources {
            cpu_shares: shares,
            cpu_quota: quota,
            cpu_period: period,
            ..Default::default()
        }
    }

    #[test]
    fn v1_files() {
        let t = Tree::new();
        let d = t.path("c");
        t.mkdir("c");
        apply_v1(&d, &cpu(Some(512), Some(50_000), Some(100_000))).unwrap();
        assert_eq!(t.read("c/cpu.shares"), "512");
        assert_eq!(t.read("c/cpu.cfs_quota_us"), "50000");
        assert_eq!(t.read("c/cpu.cfs_period_us"), "100000");
        apply_v1(&d, &cpu(None, Some(-1), None)).unwrap();
        assert_eq!(t.read("c/cpu.cfs_quota_us"), "-1");
        apply_v1(&d, &cpu(None, Some(0), None)).unwrap();
        assert_eq!(t.read("c/cpu.cfs_quota_us"), "-1");
        assert_eq!(t.read("c/cpu.shares"), "512", "left alone");
        // A weight alone becomes shares.
        let r = Resources {
            cpu_weight: Some(39),
            ..Default::default()
        };
        apply_v1(&d, &r).unwrap();
        assert_eq!(t.read("c/cpu.shares"), "999");
    }

    #[test]
    fn v2_files() {
        let t = Tree::new();
        t.mkdir("c");
        let d = t.path("c");
        apply_v2(&d, &cpu(Some(512), Some(50_000), Some(100_000))).unwrap();
        assert_eq!(t.read("c/cpu.weight"), "20");
        assert_eq!(t.read("c/cpu.max"), "50000 100000");
        apply_v2(&d, &cpu(Some(1024), Some(-1), None)).unwrap();
        assert_eq!(t.read("c/cpu.weight"), "39");
        assert_eq!(t.read("c/cpu.max"), "max");
        // Only the period: the quota in place is kept.
        t.write("c/cpu.max", "20000 100000\n");
        apply_v2(&d, &cpu(None, None, Some(50_000))).unwrap();
        assert_eq!(t.read("c/cpu.max"), "20000 50000");
        let r = Resources {
            cpu_weight: Some(20_000),
            ..Default::default()
        };
        let e = apply_v2(&d, &r).unwrap_err();
        assert!(e.to_string().contains("cpu.weight to 20000"), "{e}");
    }

    #[test]
    fn stats_from_files() {
        let t = Tree::new();
        t.write("acct/cpuacct.usage", "123456789\n");
        t.write("acct/cpuacct.stat", "user 5\nsystem 2\n");
        t.write(
            "cpu/cpu.stat",
            "nr_periods 10\nnr_throttled 4\nthrottled_time 5000\n",
        );
        let s = stats_v1(Some(&t.path("cpu")), Some(&t.path("acct"))).unwrap();
        assert_eq!(s.usage_ns, 123_456_789);
        let tick = 1_000_000_000 / clock_ticks_per_second();
        assert_eq!((s.user_ns, s.system_ns), (5 * tick, 2 * tick));
        assert_eq!(
            (s.periods, s.throttled_periods, s.throttled_ns),
            (10, 4, 5000)
        );
        t.write("acct/cpuacct.usage_user", "100\n");
        t.write("acct/cpuacct.usage_sys", "20\n");
        let s = stats_v1(None, Some(&t.path("acct"))).unwrap();
        assert_eq!((s.user_ns, s.system_ns, s.periods), (100, 20, 0));

        t.write(
            "v2/cpu.stat",
            "usage_usec 1500\nuser_usec 1000\nsystem_usec 500\nnr_periods 3\n\
             nr_throttled 1\nthrottled_usec 7\n",
        );
        let s = stats_v2(&t.path("v2")).unwrap();
        assert_eq!(
            s,
            CpuStats {
                usage_ns: 1_500_000,
                user_ns: 1_000_000,
                system_ns: 500_000,
                periods: 3,
                throttled_periods: 1,
                throttled_ns: 7000,
            }
        );
        assert!(stats_v2(&t.path("gone")).is_err());
    }
}
