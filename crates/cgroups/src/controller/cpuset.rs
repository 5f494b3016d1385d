//! cpuset: the CPUs and memory nodes a cgroup may use (the same files on v1 and v2).

use crate::error::Result;
use crate::fs;
use crate::resources::Resources;
use std::path::Path;

/// `cpuset.cpus`, then `cpuset.mems`. Each must be a subset of the parent's; the kernel
/// refuses anything else (EINVAL, or ENOSPC on v1 when the set would leave tasks with
/// nothing), naming the file.
pub(crate) fn apply(dir: &Path, r: &Resources) -> Result<()> {
    if let Some(cpus) = &r.cpuset_cpus {
        fs::set(&dir.join("cpuset.cpus"), cpus)?;
    }
    if let Some(mems) = &r.cpuset_mems {
        fs::set(&dir.join("cpuset.mems"), mems)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fs::testutil::Tree;

    #[test]
    fn cpus_then_mems() {
        let t = Tree::new();
        t.mkdir("c");
        let r = Resources {
            cpuset_cpus: Some("0-1".into()),
            cpuset_mems: Some("0".into()),
            ..Default::default()
        };
        apply(&t.path("c"), &r).unwrap();
        assert_eq!(t.writes(), ["c/cpuset.cpus=0-1", "c/cpuset.mems=0"]);
    }
}
