//! One file per controller: how [`crate::Resources`] become its control files and how
//! its statistics are read, v1 and v2 side by side. The managers ([`crate::v1`],
//! [`crate::v2`]) find the directories and call these in order.

pub(crate) mod cpu;
pub(crate) mod cpuset;
pub(crate) mod hugetlb;
pub(crate) mod io;
pub(crate) mod memory;
pub(crate) mod pids;

/// The value for a limit where zero or negative means unlimited (v2 and `pids.max`:
/// `max`).
pub(crate) fn positive_or_max(n: i64) -> String {
    if n > 0 {
        n.to_string()
    } else {
        "max".to_string()
    }
}
