//! What a cgroup has used, in the units the kubelet's CRI stats and metrics want
//! (nanoseconds, bytes, counts). Read by [`crate::CgroupManager::stats`]; a controller
//! the cgroup does not have leaves its part zero (or empty).

/// CPU time (v1 `cpuacct.usage`, `cpuacct.usage_user`/`_sys` or `cpuacct.stat`, and
/// `cpu.stat`; v2 `cpu.stat`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CpuStats {
    /// Total CPU time of every task, ever, in nanoseconds (v2: `usage_usec` × 1000).
    pub usage_ns: u64,
    pub user_ns: u64,
    pub system_ns: u64,
    /// CFS periods that have elapsed with a quota set, and in how many of them the
    /// cgroup was throttled, for how long in total.
    pub periods: u64,
    pub throttled_periods: u64,
    pub throttled_ns: u64,
}

/// Memory (v1 `memory.usage_in_bytes`, `memory.stat`, `memory.oom_control`; v2
/// `memory.current`, `memory.stat`, `memory.events`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MemoryStats {
    /// Bytes charged to the cgroup, page cache included.
    pub usage: u64,
    /// What the kubelet evicts and reports on: `usage` minus the inactive file cache
    /// (v1 `total_inactive_file`, v2 `inactive_file`), never below 0, as cadvisor
    /// computes it.
    pub working_set: u64,
    /// Anonymous memory (v1 `total_rss`, v2 `anon`).
    pub rss: u64,
    /// Page cache (v1 `total_cache`, v2 `file`).
    pub cache: u64,
    /// Swap in use (v1 `memsw.usage` − `usage`, v2 `memory.swap.current`).
    pub swap: u64,
    /// The memory limit, `None` when unlimited.
    pub limit: Option<u64>,
    pub page_faults: u64,
    pub major_page_faults: u64,
    /// Processes the OOM killer killed in this cgroup (v1 `memory.oom_control` `oom_kill`,
    /// kernel 4.13+; v2 `memory.events` `oom_kill`).
    pub oom_kills: u64,
    /// Page cache mapped into processes (v1 `total_mapped_file`, v2 `file_mapped`).
    pub mapped_file: u64,
    /// File cache on the active and the inactive list (v1 `total_active_file` and
    /// `total_inactive_file`, v2 `active_file` and `inactive_file`).
    pub active_file: u64,
    pub inactive_file: u64,
    /// Kernel memory charged to the cgroup (v1 `memory.kmem.usage_in_bytes`; v2
    /// `memory.stat`'s `kernel`, or on kernels without that line the sum of the parts
    /// the kernel's documentation lists for it: `kernel_stack`, `pagetables`, `percpu`,
    /// `vmalloc`, `slab`).
    pub kernel: u64,
    /// The highest usage seen (v1 `memory.max_usage_in_bytes`, v2 `memory.peak` of
    /// kernel 5.19+); `usage` where the kernel keeps no peak.
    pub max_usage: u64,
    /// How many times usage hit the limit (v1 `memory.failcnt`, v2 `memory.events`'s
    /// `max`, which runc and cAdvisor report as the same).
    pub failcnt: u64,
}

/// Tasks (`pids.current`, `pids.max`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PidsStats {
    pub current: u64,
    /// `None` when unlimited.
    pub limit: Option<u64>,
}

/// What the cgroup's tasks read from and wrote to one block device, since the cgroup
/// was made (v1 `blkio` `io_service_bytes_recursive` and `io_serviced_recursive`; v2
/// `io.stat`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DeviceIo {
    pub major: u64,
    pub minor: u64,
    pub read_bytes: u64,
    pub write_bytes: u64,
    /// Read and write operations.
    pub reads: u64,
    pub writes: u64,
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Stats {
    pub cpu: CpuStats,
    pub memory: MemoryStats,
    pub pids: PidsStats,
    /// One entry per device the cgroup did I/O on, by major and minor number.
    pub io: Vec<DeviceIo>,
}
