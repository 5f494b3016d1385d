//! hugetlb: a limit per hugepage size (v1 `hugetlb.<size>.limit_in_bytes`, v2
//! `hugetlb.<size>.max`), and the reservation limit beside it when the kernel has one
//! (`.rsvd.`, 5.7+), so reserved-but-unfaulted pages count too.

use crate::error::{Error, Result};
use crate::fs;
use crate::resources::Resources;
use std::path::Path;

/// The suffix of the limit file: `limit_in_bytes` (v1) or `max` (v2).
pub(crate) const V1: &str = "limit_in_bytes";
pub(crate) const V2: &str = "max";

pub(crate) fn apply(dir: &Path, r: &Resources, suffix: &str) -> Result<()> {
    for (size, limit) in &r.hugepage_limits {
        let file = dir.join(format!("hugetlb.{size}.{suffix}"));
        if size.is_empty() || size.contains(['/', '.', '\0']) {
            return Err(Error::Limit {
                path: file,
                value: limit.to_string(),
                reason: format!("{size:?} is not a hugepage size such as 2MB or 1GB"),
            });
        }
        fs::set(&file, &limit.to_string())?;
        let rsvd = dir.join(format!("hugetlb.{size}.rsvd.{suffix}"));
        if rsvd.exists() {
            fs::set(&rsvd, &limit.to_string())?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fs::testutil::Tree;

    #[test]
    fn per_size_files() {
        let t = Tree::new();
        t.write("h/hugetlb.1GB.rsvd.max", "max\n");
        let r = Resources {
            hugepage_limits: [("2MB".to_string(), 4 << 20), ("1GB".to_string(), 1 << 30)].into(),
            ..Default::default()
        };
        apply(&t.path("h"), &r, V2).unwrap();
        assert_eq!(
            t.writes(),
            [
                "h/hugetlb.1GB.max=1073741824",
                "h/hugetlb.1GB.rsvd.max=1073741824",
                "h/hugetlb.2MB.max=4194304"
            ]
        );
        apply(&t.path("h"), &r, V1).unwrap();
        assert_eq!(
            t.writes(),
            [
                "h/hugetlb.1GB.limit_in_bytes=1073741824",
                "h/hugetlb.2MB.limit_in_bytes=4194304"
            ]
        );
        let bad = Resources {
            hugepage_limits: [("../x".to_string(), 1)].into(),
            ..Default::default()
        };
        let e = apply(&t.path("h"), &bad, V2).unwrap_err();
        assert!(e.to_string().contains("not a hugepage size"), "{e}");
    }
}
