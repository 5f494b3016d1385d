//! Which cgroup layout the host has, from `/proc/self/mountinfo`.
//!
//! - cgroup v2 ("unified"): `/sys/fs/cgroup` is a cgroup2 mount with controllers.
//! - cgroup v1: a `cgroup` mount per controller or co-mounted group (`cpu,cpuacct`);
//!   a cgroup2 mount elsewhere (systemd's hybrid `/sys/fs/cgroup/unified`, which may hold
//!   a controller or two such as `hugetlb`) is the hybrid mount, never the unified host.
//! - no v1 controller at all but a cgroup2 mount with controllers somewhere else: v2 there.

use crate::error::{Error, Result};
use crate::path::CgroupPath;
use crate::{v1, v2, Hierarchy};
use std::path::{Path, PathBuf};

/// One line of mountinfo, the fields detection needs.
#[derive(Debug)]
struct Mount {
    root: String,
    mount_point: PathBuf,
    fstype: String,
    super_options: String,
}

fn parse(text: &str, file: &Path) -> Result<Vec<Mount>> {
    let mut mounts = Vec::new();
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        let fields: Vec<&str> = line.split(' ').collect();
        let sep = fields.iter().position(|f| *f == "-");
        let m = match sep {
            Some(sep) if sep >= 6 && fields.len() >= sep + 4 => Mount {
                root: unescape(fields[3]),
                mount_point: PathBuf::from(unescape(fields[4])),
                fstype: fields[sep + 1].to_string(),
                super_options: fields[sep + 3].to_string(),
            },
            _ => {
                return Err(Error::Parse {
                    path: file.to_path_buf(),
                    line: line.to_string(),
                    reason: "not a mountinfo line",
                })
            }
        };
        mounts.push(m);
    }
    Ok(mounts)
}

/// Undoes mountinfo's octal escapes (`\040` for a space, ...).
fn unescape(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let octal = (b[i] == b'\\' && i + 3 < b.len())
            .then(|| &b[i + 1..i + 4])
            .filter(|d| d.iter().all(|c| (b'0'..=b'7').contains(c)))
            .map(|d| d.iter().fold(0u32, |n, c| n * 8 + u32::from(c - b'0')))
            .and_then(|n| u8::try_from(n).ok());
        if let Some(c) = octal {
            out.push(c);
            i += 4;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn base_of(m: &Mount) -> CgroupPath {
    CgroupPath::new(&m.root).unwrap_or_default()
}

fn has_controllers(dir: &Path) -> bool {
    std::fs::read_to_string(dir.join("cgroup.controllers"))
        .map(|s| !s.trim().is_empty())
        .unwrap_or(false)
}

/// The hierarchy described by `mountinfo` (the text of `file`), where `cgroup_dir` is
/// where a unified host mounts cgroup2 (`/sys/fs/cgroup`).
pub(crate) fn detect(mountinfo: &str, file: &Path, cgroup_dir: &Path) -> Result<Hierarchy> {
    let mounts = parse(mountinfo, file)?;
    let cgroup2: Vec<&Mount> = mounts.iter().filter(|m| m.fstype == "cgroup2").collect();
    if let Some(m) = cgroup2.iter().find(|m| m.mount_point == cgroup_dir) {
        if has_controllers(&m.mount_point) {
            return Ok(Hierarchy::V2(v2::Manager::new(
                m.mount_point.clone(),
                base_of(m),
            )));
        }
    }
    // v1: mounts under `cgroup_dir` first, so a bind mount elsewhere never wins.
    let under = |m: &&Mount| m.mount_point.starts_with(cgroup_dir);
    let v1_mounts = mounts.iter().filter(|m| m.fstype == "cgroup");
    let ordered = v1_mounts
        .clone()
        .filter(under)
        .chain(v1_mounts.filter(|m| !under(m)));
    let mut roots: Vec<v1::Root> = Vec::new();
    for m in ordered {
        let controllers: Vec<String> = m
            .super_options
            .split(',')
            .filter(|o| v1::CONTROLLERS.contains(o))
            .map(str::to_string)
            .collect();
        let taken = roots
            .iter()
            .any(|r| r.controllers.iter().any(|c| controllers.contains(c)));
        if controllers.is_empty() || taken {
            continue;
        }
        roots.push(v1::Root {
            controllers,
            dir: m.mount_point.clone(),
            base: base_of(m),
        });
    }
    if !roots.is_empty() {
        let hybrid = cgroup2
            .iter()
            .find(|m| under(m))
            .or(cgroup2.first())
            .map(|m| v1::Root {
                controllers: vec![],
                dir: m.mount_point.clone(),
                base: base_of(m),
            });
        return Ok(Hierarchy::V1(v1::Manager::new(roots, hybrid)));
    }
    if let Some(m) = cgroup2.iter().find(|m| has_controllers(&m.mount_point)) {
        return Ok(Hierarchy::V2(v2::Manager::new(
            m.mount_point.clone(),
            base_of(m),
        )));
    }
    Err(Error::NoControllers {
        path: file.to_path_buf(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fs::testutil::Tree;
    use crate::{CgroupManager, Version};

    fn line(id: u32, root: &str, mp: &Path, fstype: &str, opts: &str) -> String {
        let mp = mp.display().to_string().replace(' ', "\\040");
        format!("{id} 31 0:{id} {root} {mp} rw,relatime shared:{id} - {fstype} {fstype} {opts}\n")
    }

    /// This machine's layout: v1 controllers (cpu and cpuacct apart), a hybrid cgroup2
    /// mount with only hugetlb, and a named systemd hierarchy.
    fn this_machine(t: &Tree) -> String {
        let mut s = String::from("22 27 0:21 / /proc rw,relatime - proc proc rw\n");
        s += &line(31, "/", &t.0, "tmpfs", "rw,mode=755");
        for (i, c) in [
            "cpu", "cpuacct", "cpuset", "memory", "devices", "freezer", "blkio", "pids",
        ]
        .iter()
        .enumerate()
        {
            s += &line(32 + i as u32, "/", &t.path(c), "cgroup", &format!("rw,{c}"));
        }
        s += &line(40, "/", &t.path("systemd"), "cgroup", "rw,name=systemd");
        s += &line(41, "/", &t.path("unified"), "cgroup2", "rw");
        t.write("unified/cgroup.controllers", "hugetlb\n");
        s
    }

    #[test]
    fn hybrid_host_is_v1() {
        let t = Tree::new();
        let h = detect(&this_machine(&t), Path::new("mountinfo"), &t.0).unwrap();
        assert_eq!(h.version(), Version::V1);
        let Hierarchy::V1(m) = &h else { unreachable!() };
        let names: Vec<_> = m.roots().iter().map(|r| r.controllers.join(",")).collect();
        assert_eq!(
            names,
            ["cpu", "cpuacct", "cpuset", "memory", "devices", "freezer", "blkio", "pids"]
        );
        assert_eq!(m.hybrid().unwrap().dir, t.path("unified"));
        let pod = CgroupPath::new("/a").unwrap();
        assert_eq!(h.dir("memory", &pod), Some(t.path("memory/a")));
        assert_eq!(h.dir("name=systemd", &pod), None);
    }

    #[test]
    fn comounted_cpu_cpuacct_and_duplicates() {
        let t = Tree::new();
        let mut s = line(32, "/", &t.path("cpu,cpuacct"), "cgroup", "rw,cpu,cpuacct");
        // A bind mount of the same hierarchy elsewhere, listed first: ignored.
        s = line(
            30,
            "/",
            Path::new("/elsewhere/cpu"),
            "cgroup",
            "rw,cpu,cpuacct",
        ) + &s;
        s += &line(33, "/kube", &t.path("memory"), "cgroup", "rw,memory");
        s += &line(
            34,
            "/",
            &t.path("net_cls,net_prio"),
            "cgroup",
            "rw,net_cls,net_prio",
        );
        let h = detect(&s, Path::new("mountinfo"), &t.0).unwrap();
        let Hierarchy::V1(m) = &h else {
            panic!("{h:?}")
        };
        assert_eq!(m.roots().len(), 2);
        assert_eq!(m.roots()[0].controllers, ["cpu", "cpuacct"]);
        assert_eq!(m.roots()[0].dir, t.path("cpu,cpuacct"));
        assert_eq!(m.roots()[1].base.to_string(), "/kube");
        assert!(m.hybrid().is_none());
    }

    #[test]
    fn unified_host_is_v2() {
        let t = Tree::new();
        t.write("cgroup.controllers", "cpuset cpu io memory hugetlb pids\n");
        let s = line(30, "/", &t.0, "cgroup2", "rw,nsdelegate");
        let h = detect(&s, Path::new("mountinfo"), &t.0).unwrap();
        assert_eq!(h.version(), Version::V2);
        assert_eq!(h.dirs(&CgroupPath::new("/a").unwrap()), vec![t.path("a")]);
    }

    #[test]
    fn unified_without_controllers_and_no_v1_is_an_error() {
        let t = Tree::new();
        t.write("cgroup.controllers", "\n");
        let s = line(30, "/", &t.0, "cgroup2", "rw");
        let e = detect(&s, Path::new("/proc/self/mountinfo"), &t.0).unwrap_err();
        assert_eq!(
            e.to_string(),
            "no cgroup controllers mounted according to /proc/self/mountinfo"
        );
    }

    #[test]
    fn escapes_and_bad_lines() {
        assert_eq!(unescape("/a\\040b\\134c"), "/a b\\c");
        assert_eq!(unescape("/a\\04"), "/a\\04");
        let t = Tree::new();
        let dir = t.path("with space");
        let s = line(33, "/", &dir, "cgroup", "rw,memory");
        let h = detect(&s, Path::new("m"), &t.0).unwrap();
        assert_eq!(h.dir("memory", &CgroupPath::root()), Some(dir));
        let e = detect("1 2 3\n", Path::new("/proc/self/mountinfo"), &t.0).unwrap_err();
        assert!(
            e.to_string().starts_with("parse /proc/self/mountinfo: "),
            "{e}"
        );
    }
}
