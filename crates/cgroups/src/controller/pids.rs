//! pids: the task limit and count.

use super::positive_or_max;
use crate::error::Result;
use crate::fs;
use crate::resources::Resources;
use crate::stats::PidsStats;
use std::path::Path;

/// `pids.max` (the same file on v1 and v2); zero or negative is `max`.
pub(crate) fn apply(dir: &Path, r: &Resources) -> Result<()> {
    match r.pids_limit {
        Some(n) => fs::set(&dir.join("pids.max"), &positive_or_max(n)),
        None => Ok(()),
    }
}

/// `pids.current` and `pids.max`; zero when the cgroup has no pids controller.
pub(crate) fn stats(dir: &Path) -> Result<PidsStats> {
    let Some(current) = fs::read_u64_opt(&dir.join("pids.current"))? else {
        return Ok(PidsStats::default());
    };
    Ok(PidsStats {
        current,
        limit: fs::read_limit(&dir.join("pids.max"))?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fs::testutil::Tree;

    #[test]
    fn limit_and_stats() {
        let t = Tree::new();
        t.mkdir("p");
        let d = t.path("p");
        for (n, want) in [(5, "5"), (0, "max"), (-1, "max")] {
            let r = Resources {
                pids_limit: Some(n),
                ..Default::default()
            };
            apply(&d, &r).unwrap();
            assert_eq!(t.read("p/pids.max"), want);
        }
        apply(&d, &Resources::default()).unwrap();
        assert_eq!(
            t.writes(),
            ["p/pids.max=5", "p/pids.max=max", "p/pids.max=max"]
        );
        t.write("p/pids.current", "3\n");
        t.write("p/pids.max", "10\n");
        let s = stats(&d).unwrap();
        assert_eq!((s.current, s.limit), (3, Some(10)));
        t.write("p/pids.max", "max\n");
        assert_eq!(stats(&d).unwrap().limit, None);
        assert_eq!(stats(&t.path("none")).unwrap(), PidsStats::default());
    }
}
