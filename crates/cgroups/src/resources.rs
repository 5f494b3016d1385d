//! The limits a cgroup gets, in the kernel's own units and independent of CRI and OCI
//! types, and the conversions between v1 and v2 where the two differ.
//!
//! `None` leaves a control file alone, so an update (`UpdateContainerResources`) writes
//! only what it names. Which file each field becomes:
//!
//! | field                | v1                                         | v2                         |
//! |----------------------|--------------------------------------------|----------------------------|
//! | `cpu_shares`/`weight`| `cpu.shares`                               | `cpu.weight`               |
//! | `cpu_quota`/`period` | `cpu.cfs_quota_us`, `cpu.cfs_period_us`    | `cpu.max`                  |
//! | `cpuset_*`           | `cpuset.cpus`, `cpuset.mems`               | the same                   |
//! | `memory_limit`       | `memory.limit_in_bytes`                    | `memory.max`               |
//! | `memory_swap_limit`  | `memory.memsw.limit_in_bytes`              | `memory.swap.max` (swap = memory+swap − memory) |
//! | `pids_limit`         | `pids.max`                                 | `pids.max`                 |
//! | `hugepage_limits`    | `hugetlb.<size>.limit_in_bytes`            | `hugetlb.<size>.max`       |
//! | `unified`            | refused                                    | each file as given, last   |

use std::collections::BTreeMap;

/// The smallest memory limit (and memory+swap limit) `apply` accepts: below it a
/// container cannot even start (v1 refuses limits below the usage with EBUSY, v2 takes
/// any value and OOM-kills). The same floor Docker applies.
pub const MIN_MEMORY_LIMIT: i64 = 6 * 1024 * 1024;

/// The cgroup v1 `cpu.shares` range; the kernel clamps other values into it.
pub const MIN_SHARES: u64 = 2;
pub const MAX_SHARES: u64 = 262_144;
/// The cgroup v2 `cpu.weight` range.
pub const MIN_WEIGHT: u64 = 1;
pub const MAX_WEIGHT: u64 = 10_000;

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Resources {
    /// CPU shares (v1 `cpu.shares`, 2–262144; the kubelet's unit). On v2 converted to a
    /// weight by [`shares_to_weight`] unless `cpu_weight` is set.
    pub cpu_shares: Option<u64>,
    /// CPU weight (v2 `cpu.weight`, 1–10000). On v1 converted to shares by
    /// [`weight_to_shares`] unless `cpu_shares` is set.
    pub cpu_weight: Option<u64>,
    /// CFS quota in microseconds per period; zero or negative is unlimited.
    pub cpu_quota: Option<i64>,
    /// CFS period in microseconds.
    pub cpu_period: Option<u64>,
    /// The CPUs the cgroup may run on, in the kernel's list format (`0-2,7`).
    pub cpuset_cpus: Option<String>,
    /// The memory nodes the cgroup may allocate from (`0`).
    pub cpuset_mems: Option<String>,
    /// Memory limit in bytes; negative is unlimited. At least [`MIN_MEMORY_LIMIT`].
    pub memory_limit: Option<i64>,
    /// Memory plus swap in bytes (OCI's `memory.swap`, CRI's `memory_swap_limit_in_bytes`);
    /// negative is unlimited. Not below `memory_limit`. Skipped (with a warning when it
    /// would limit) on a kernel without swap accounting.
    pub memory_swap_limit: Option<i64>,
    /// Maximum number of tasks; zero or negative is unlimited.
    pub pids_limit: Option<i64>,
    /// Hugepage size as the kernel names it (`2MB`, `1GB`) → limit in bytes.
    pub hugepage_limits: BTreeMap<String, u64>,
    /// v2 only: control file name → value, written after everything above so it
    /// overrides it (OCI's `linux.resources.unified`, CRI's `unified`).
    pub unified: BTreeMap<String, String>,
}

impl Resources {
    pub(crate) fn has_cpu(&self) -> bool {
        self.cpu_shares.is_some()
            || self.cpu_weight.is_some()
            || self.cpu_quota.is_some()
            || self.cpu_period.is_some()
    }

    pub(crate) fn has_cpuset(&self) -> bool {
        self.cpuset_cpus.is_some() || self.cpuset_mems.is_some()
    }

    pub(crate) fn has_memory(&self) -> bool {
        self.memory_limit.is_some() || self.memory_swap_limit.is_some()
    }

    /// The v1 `cpu.shares` value: `cpu_shares`, else `cpu_weight` converted.
    pub(crate) fn v1_shares(&self) -> Option<u64> {
        self.cpu_shares
            .or_else(|| self.cpu_weight.map(weight_to_shares))
    }

    /// The v2 `cpu.weight` value: `cpu_weight`, else `cpu_shares` converted.
    pub(crate) fn v2_weight(&self) -> Option<u64> {
        self.cpu_weight
            .or_else(|| self.cpu_shares.map(shares_to_weight))
    }
}

/// v1 CPU shares → v2 CPU weight, as Kubernetes and runc convert:
/// `weight = 1 + ((shares - 2) * 9999) / 262142`, so 2 → 1, 1024 → 39, 262144 → 10000.
/// Shares outside 2–262144 are clamped first, as the v1 kernel does.
pub fn shares_to_weight(shares: u64) -> u64 {
    let shares = shares.clamp(MIN_SHARES, MAX_SHARES);
    1 + ((shares - MIN_SHARES) * 9999) / (MAX_SHARES - MIN_SHARES)
}

/// v2 CPU weight → v1 CPU shares, the inverse of [`shares_to_weight`]:
/// `shares = 2 + ⌈((weight - 1) * 262142) / 9999⌉`, rounded up so that converting back
/// gives the same weight.
pub fn weight_to_shares(weight: u64) -> u64 {
    let weight = weight.clamp(MIN_WEIGHT, MAX_WEIGHT);
    MIN_SHARES + ((weight - MIN_WEIGHT) * (MAX_SHARES - MIN_SHARES)).div_ceil(9999)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shares_to_weight_as_kubernetes() {
        // Values Kubernetes documents / runc's tests check.
        assert_eq!(shares_to_weight(2), 1);
        assert_eq!(shares_to_weight(1024), 39);
        assert_eq!(shares_to_weight(512), 20);
        assert_eq!(shares_to_weight(102), 4);
        assert_eq!(shares_to_weight(262_144), 10_000);
        // Clamped like the v1 kernel clamps.
        assert_eq!(shares_to_weight(0), 1);
        assert_eq!(shares_to_weight(1), 1);
        assert_eq!(shares_to_weight(1 << 40), 10_000);
    }

    #[test]
    fn weight_to_shares_inverts() {
        assert_eq!(weight_to_shares(1), 2);
        assert_eq!(weight_to_shares(10_000), 262_144);
        assert_eq!(weight_to_shares(0), 2);
        for shares in [2, 100, 1024, 5000, 262_144] {
            let back = weight_to_shares(shares_to_weight(shares));
            // One weight step is ~26 shares.
            assert!(back.abs_diff(shares) <= 27, "{shares} -> {back}");
        }
        for weight in [1, 39, 100, 9999, 10_000] {
            assert_eq!(
                shares_to_weight(weight_to_shares(weight)),
                weight,
                "{weight}"
            );
        }
    }

    #[test]
    fn shares_and_weight_preference() {
        let r = Resources {
            cpu_shares: Some(1024),
            ..Default::default()
        };
        assert_eq!((r.v1_shares(), r.v2_weight()), (Some(1024), Some(39)));
        let r = Resources {
            cpu_shares: Some(1024),
            cpu_weight: Some(100),
            ..Default::default()
        };
        assert_eq!((r.v1_shares(), r.v2_weight()), (Some(1024), Some(100)));
        let r = Resources {
            cpu_weight: Some(100),
            ..Default::default()
        };
        assert_eq!(r.v1_shares(), Some(2598));
        assert!(r.has_cpu() && !r.has_memory() && !r.has_cpuset());
        assert!(!Resources::default().has_cpu());
    }
}
