//! The cgroup path model: a cgroup is named by a path relative to the root of the
//! hierarchy (or, on v1, of every hierarchy), like the kubelet's cgroupfs
//! `cgroup_parent` `/kubepods/burstable/pod123` plus a child for the sandbox. The same
//! path names the cgroup's directory under each hierarchy root.

use crate::error::{Error, Result};
use std::fmt;
use std::path::{Path, PathBuf};
use std::str::FromStr;

/// A normalised cgroup path: absolute, no empty, `.` or `..` components. `"/"` is the
/// root of the hierarchy. Relative input (`a/b`) is taken as relative to the root.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct CgroupPath {
    components: Vec<String>,
}

impl CgroupPath {
    /// The root cgroup, `/`.
    pub fn root() -> Self {
        CgroupPath::default()
    }

    /// Parses `s`, collapsing repeated and trailing slashes.
    pub fn new(s: &str) -> Result<Self> {
        let mut components = Vec::new();
        for c in s.split('/').filter(|c| !c.is_empty()) {
            check_component(s, c)?;
            components.push(c.to_string());
        }
        Ok(CgroupPath { components })
    }

    /// This path with `child` (one name or a relative path `a/b`) appended.
    pub fn join(&self, child: &str) -> Result<Self> {
        let mut p = self.clone();
        p.components.extend(CgroupPath::new(child)?.components);
        Ok(p)
    }

    pub fn is_root(&self) -> bool {
        self.components.is_empty()
    }

    /// The names from the root down.
    pub fn components(&self) -> impl Iterator<Item = &str> + '_ {
        self.components.iter().map(String::as_str)
    }

    /// How many names deep the path is (0 for the root).
    pub fn depth(&self) -> usize {
        self.components.len()
    }

    /// The last name, `None` for the root.
    pub fn name(&self) -> Option<&str> {
        self.components.last().map(String::as_str)
    }

    /// The parent cgroup, `None` for the root.
    pub fn parent(&self) -> Option<CgroupPath> {
        let mut p = self.clone();
        p.components.pop()?;
        Some(p)
    }

    /// The path with the leading `prefix` removed, if it starts with it.
    pub fn strip_prefix(&self, prefix: &CgroupPath) -> Option<CgroupPath> {
        self.components
            .strip_prefix(prefix.components.as_slice())
            .map(|rest| CgroupPath {
                components: rest.to_vec(),
            })
    }

    /// `other` appended below this path.
    pub fn append(&self, other: &CgroupPath) -> CgroupPath {
        let mut p = self.clone();
        p.components.extend(other.components.iter().cloned());
        p
    }

    /// The directory of this cgroup in the hierarchy whose root directory is `root`.
    pub fn dir_under(&self, root: &Path) -> PathBuf {
        let mut d = root.to_path_buf();
        d.extend(&self.components);
        d
    }

    /// The directories of the root and every ancestor down to this cgroup itself, in
    /// order: `root`, `root/a`, `root/a/b`.
    pub fn dirs_from_root(&self, root: &Path) -> Vec<PathBuf> {
        let mut d = root.to_path_buf();
        let mut v = vec![d.clone()];
        for c in &self.components {
            d.push(c);
            v.push(d.clone());
        }
        v
    }
}

fn check_component(path: &str, c: &str) -> Result<()> {
    let reason = if c == "." || c == ".." {
        "`.` and `..` are not allowed"
    } else if c.contains('\0') || c.contains('\n') {
        "NUL and newline are not allowed in a name"
    } else {
        return Ok(());
    };
    Err(Error::InvalidPath {
        path: path.to_string(),
        reason,
    })
}

impl fmt::Display for CgroupPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.components.is_empty() {
            return f.write_str("/");
        }
        for c in &self.components {
            write!(f, "/{c}")?;
        }
        Ok(())
    }
}

impl FromStr for CgroupPath {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        CgroupPath::new(s)
    }
}

impl TryFrom<&str> for CgroupPath {
    type Error = Error;
    fn try_from(s: &str) -> Result<Self> {
        CgroupPath::new(s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn normalises() {
        let p = CgroupPath::new("//kubepods/burstable//pod123/").unwrap();
        assert_eq!(p.to_string(), "/kubepods/burstable/pod123");
        assert_eq!(
            CgroupPath::new("kubepods/x").unwrap().to_string(),
            "/kubepods/x"
        );
        assert_eq!(CgroupPath::new("/").unwrap(), CgroupPath::root());
        assert_eq!(CgroupPath::new("").unwrap().to_string(), "/");
        assert!(CgroupPath::root().is_root());
        assert_eq!(p.depth(), 3);
        assert_eq!(p.name(), Some("pod123"));
        assert_eq!(p.parent().unwrap().to_string(), "/kubepods/burstable");
        assert_eq!(CgroupPath::root().parent(), None);
    }

    #[test]
    fn rejects_escapes() {
        for bad in ["/a/../b", "..", "/a/./b", "/a\nb", "a\0"] {
            let e = CgroupPath::new(bad).unwrap_err();
            assert!(matches!(e, Error::InvalidPath { .. }), "{bad:?}: {e}");
            assert!(e.to_string().starts_with("invalid cgroup path"), "{e}");
        }
        assert!(CgroupPath::root().join("../x").is_err());
    }

    #[test]
    fn join_strip_and_dirs() {
        let parent = CgroupPath::new("/kubepods/burstable/pod123").unwrap();
        let p = parent.join("abc").unwrap();
        assert_eq!(p.to_string(), "/kubepods/burstable/pod123/abc");
        assert_eq!(parent.join("x/y").unwrap().depth(), 5);
        assert_eq!(
            p.strip_prefix(&CgroupPath::new("/kubepods").unwrap())
                .unwrap()
                .to_string(),
            "/burstable/pod123/abc"
        );
        assert_eq!(p.strip_prefix(&CgroupPath::new("/other").unwrap()), None);
        assert_eq!(
            CgroupPath::new("/a").unwrap().append(&p).to_string(),
            "/a/kubepods/burstable/pod123/abc"
        );
        assert_eq!(
            p.dir_under(Path::new("/sys/fs/cgroup/memory")),
            PathBuf::from("/sys/fs/cgroup/memory/kubepods/burstable/pod123/abc")
        );
        let dirs = CgroupPath::new("/a/b")
            .unwrap()
            .dirs_from_root(Path::new("/r"));
        assert_eq!(
            dirs,
            vec![
                PathBuf::from("/r"),
                PathBuf::from("/r/a"),
                PathBuf::from("/r/a/b")
            ]
        );
    }
}
