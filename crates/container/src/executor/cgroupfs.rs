//! What a spec's `cgroup` mount becomes inside the container. Planned from the host's
//! cgroup mounts ([`host`]: `/proc/self/mountinfo`, read by the creating process and
//! kept while `/sys/fs/cgroup` looks the same) and the init's `/proc/self/cgroup` (read
//! by the init, so a cgroup it was placed in before it was cloned counts); the planning
//! itself is pure, so it is unit-tested.
//!
//! - A unified (v2-only) host, `/sys/fs/cgroup` itself a `cgroup2` mount: with a cgroup
//!   namespace of its own the container mounts `cgroup2` (the kernel roots it at the
//!   namespace's cgroup); without one, its own cgroup directory is bind-mounted there
//!   (what runc does), so it never sees its siblings.
//! - A v1 or hybrid host: a `tmpfs` at the target, and in it one directory per
//!   hierarchy mounted under `/sys/fs/cgroup` on the host, named the same (`cpu`,
//!   `memory`, `systemd`, `unified`, ...): a `cgroup`/`cgroup2` mount of that hierarchy
//!   with a new cgroup namespace, else a bind of the container's own cgroup directory
//!   in it. The host's symlinks there (`cpu -> cpu,cpuacct`) are copied.
//!
//! The spec mount's flags (`ro`, `nosuid`, ...) go on every one of those; the tmpfs is
//! made read-only after it is filled. Hosts that mount their hierarchies elsewhere than
//! `/sys/fs/cgroup` get an empty tmpfs.

use parking_lot::Mutex;
use std::ffi::OsString;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

const CGROUP_ROOT: &str = "/sys/fs/cgroup";

/// A cgroup file system mounted on the host.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Hierarchy {
    pub mount_point: PathBuf,
    /// The mount's root inside the hierarchy (mountinfo field 4), usually `/`.
    pub root: String,
    /// `cgroup` or `cgroup2`.
    pub fstype: String,
    /// The super options (`rw,cpu,cpuacct`, `rw,name=systemd`).
    pub super_options: Vec<String>,
}

/// One step of the plan, relative to the mount's target.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Step {
    /// A `tmpfs` on the target itself, to hold the v1 hierarchies.
    Tmpfs,
    /// Mount a cgroup file system at `name` (`None`: the target itself).
    Mount {
        name: Option<OsString>,
        fstype: String,
        data: String,
    },
    /// Bind `source` (a host path) at `name` (`None`: the target itself).
    Bind {
        name: Option<OsString>,
        source: PathBuf,
    },
    /// A symlink `name -> target` in the tmpfs.
    Symlink { name: OsString, target: PathBuf },
}

/// Undoes mountinfo's octal escapes (`\040` for a space).
fn unescape(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\'
            && i + 3 < b.len()
            && b[i + 1..i + 4].iter().all(|c| (b'0'..=b'7').contains(c))
        {
            let d = |j: usize| u32::from(b[i + j] - b'0');
            out.push((d(1) * 64 + d(2) * 8 + d(3)) as u8);
            i += 4;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The cgroup mounts at or directly under `/sys/fs/cgroup`.
pub(crate) fn hierarchies(mountinfo: &str) -> Vec<Hierarchy> {
    let mut out = vec![];
    for line in mountinfo.lines() {
        let Some((pre, post)) = line.split_once(" - ") else {
            continue;
        };
        let pre: Vec<&str> = pre.split(' ').collect();
        let post: Vec<&str> = post.split(' ').collect();
        if pre.len() < 5 || post.len() < 3 {
            continue;
        }
        let fstype = post[0];
        if fstype != "cgroup" && fstype != "cgroup2" {
            continue;
        }
        let mount_point = PathBuf::from(unescape(pre[4]));
        if mount_point != Path::new(CGROUP_ROOT)
            && mount_point.parent() != Some(Path::new(CGROUP_ROOT))
        {
            continue;
        }
        // A later mount on the same point hides the earlier one.
        out.retain(|h: &Hierarchy| h.mount_point != mount_point);
        out.push(Hierarchy {
            mount_point,
            root: unescape(pre[3]),
            fstype: fstype.to_string(),
            super_options: post[2].split(',').map(str::to_string).collect(),
        });
    }
    out
}

/// The process's cgroup in `h`, from `/proc/PID/cgroup` text: the `0::` line for
/// cgroup2, else the v1 line whose controllers (or `name=`) the mount carries.
pub(crate) fn own_cgroup(proc_cgroup: &str, h: &Hierarchy) -> Option<String> {
    for line in proc_cgroup.lines() {
        let mut f = line.splitn(3, ':');
        let (Some(_), Some(ctrls), Some(path)) = (f.next(), f.next(), f.next()) else {
            continue;
        };
        let matches = if h.fstype == "cgroup2" {
            ctrls.is_empty()
        } else {
            !ctrls.is_empty()
                && ctrls
                    .split(',')
                    .all(|c| h.super_options.iter().any(|o| o == c))
        };
        if matches {
            return Some(path.to_string());
        }
    }
    None
}

/// The host directory of the process's cgroup in `h`.
fn own_dir(proc_cgroup: &str, h: &Hierarchy) -> Option<PathBuf> {
    let own = own_cgroup(proc_cgroup, h)?;
    let root = h.root.trim_end_matches('/');
    let rel = own.strip_prefix(root).unwrap_or("");
    if !rel.is_empty() && !rel.starts_with('/') {
        // `/foo` is not under `/fo`.
        return Some(h.mount_point.clone());
    }
    Some(h.mount_point.join(rel.trim_start_matches('/')))
}

/// The controllers (and `name=`) a v1 hierarchy is mounted with, as mount data.
fn v1_data(h: &Hierarchy, proc_cgroup: &str) -> String {
    let listed: Vec<String> = proc_cgroup
        .lines()
        .filter_map(|l| l.split(':').nth(1).map(str::to_string))
        .flat_map(|c| c.split(',').map(str::to_string).collect::<Vec<_>>())
        .collect();
    let mut opts: Vec<&str> = h
        .super_options
        .iter()
        .map(String::as_str)
        .filter(|o| o.starts_with("name=") || listed.iter().any(|l| l == o))
        .collect();
    if opts.iter().all(|o| o.starts_with("name=")) {
        opts.insert(0, "none");
    }
    opts.join(",")
}

/// The host's cgroup mounts at or under `/sys/fs/cgroup` and the symlinks there
/// (name, target), what a container's `cgroup` mount is planned from.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Host {
    pub hierarchies: Vec<Hierarchy>,
    pub links: Vec<(OsString, PathBuf)>,
}

/// What [`host`] last read, and the look of `/sys/fs/cgroup` it was read under.
static HOST: Mutex<Option<(Vec<Entry>, Arc<Host>)>> = Mutex::new(None);

/// One entry of `/sys/fs/cgroup` (the directory itself first, named ""): its name,
/// the device of what is mounted there, and a symlink's target.
type Entry = (OsString, u64, Option<PathBuf>);

/// The host's cgroup mounts, read from `/proc/self/mountinfo` once and kept while the
/// entries of `/sys/fs/cgroup` (names, devices, link targets) stay the same: a
/// hierarchy mounted or unmounted there changes an entry's device or the list. The
/// mountinfo grows with every mount on the node (each pod's namespace pins, its
/// `/dev/shm`), so reading it in every container's init made each create cost more on
/// a fuller node; the entries are a dozen `stat`s.
pub(crate) fn host() -> std::io::Result<Arc<Host>> {
    let look = entries(Path::new(CGROUP_ROOT));
    let mut cached = HOST.lock();
    if let Some((seen, h)) = cached.as_ref() {
        if *seen == look {
            return Ok(h.clone());
        }
    }
    let mountinfo = std::fs::read_to_string("/proc/self/mountinfo")?;
    let links = look
        .iter()
        .filter_map(|(n, _, t)| Some((n.clone(), t.clone()?)))
        .collect();
    let h = Arc::new(Host {
        hierarchies: hierarchies(&mountinfo),
        links,
    });
    *cached = Some((look, h.clone()));
    Ok(h)
}

/// `dir` and its entries as [`Entry`]s, sorted; empty when `dir` cannot be read.
fn entries(dir: &Path) -> Vec<Entry> {
    let Ok(top) = std::fs::metadata(dir) else {
        return vec![];
    };
    let mut v = vec![(OsString::new(), top.dev(), None)];
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let Ok(ft) = e.file_type() else { continue };
        if ft.is_symlink() {
            v.push((e.file_name(), 0, std::fs::read_link(e.path()).ok()));
        } else if let Ok(m) = std::fs::metadata(e.path()) {
            v.push((e.file_name(), m.dev(), None));
        }
    }
    v.sort();
    v
}

/// The plan for one `cgroup` mount over the host's hierarchies `hs`. `links` are the
/// symlinks in the host's `/sys/fs/cgroup` (name, target).
pub(crate) fn plan(
    hs: &[Hierarchy],
    proc_cgroup: &str,
    new_cgroup_ns: bool,
    links: &[(OsString, PathBuf)],
) -> Vec<Step> {
    if let Some(h) = hs.iter().find(|h| h.mount_point == Path::new(CGROUP_ROOT)) {
        if h.fstype == "cgroup2" {
            if new_cgroup_ns {
                return vec![Step::Mount {
                    name: None,
                    fstype: "cgroup2".into(),
                    data: String::new(),
                }];
            }
            return own_dir(proc_cgroup, h)
                .map(|source| Step::Bind { name: None, source })
                .into_iter()
                .collect();
        }
    }
    let mut steps = vec![Step::Tmpfs];
    for h in hs
        .iter()
        .filter(|h| h.mount_point != Path::new(CGROUP_ROOT))
    {
        let Some(name) = h.mount_point.file_name().map(|n| n.to_os_string()) else {
            continue;
        };
        if new_cgroup_ns {
            let data = if h.fstype == "cgroup2" {
                String::new()
            } else {
                v1_data(h, proc_cgroup)
            };
            steps.push(Step::Mount {
                name: Some(name),
                fstype: h.fstype.clone(),
                data,
            });
        } else if let Some(source) = own_dir(proc_cgroup, h) {
            steps.push(Step::Bind {
                name: Some(name),
                source,
            });
        }
    }
    for (name, target) in links {
        steps.push(Step::Symlink {
            name: name.clone(),
            target: target.clone(),
        });
    }
    steps
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What the cache is keyed on changes when an entry comes, goes or points
    /// elsewhere, and not otherwise.
    #[test]
    fn the_look_of_the_cgroup_dir_tells_a_change() {
        let d = std::env::temp_dir().join(format!("crust-cgroupfs-{}", std::process::id()));
        std::fs::create_dir_all(d.join("cpu,cpuacct")).unwrap();
        std::os::unix::fs::symlink("cpu,cpuacct", d.join("cpu")).unwrap();
        let first = entries(&d);
        assert_eq!(first, entries(&d));
        assert!(first
            .iter()
            .any(|(n, _, t)| n == "cpu" && t.as_deref() == Some(Path::new("cpu,cpuacct"))));
        std::fs::create_dir(d.join("net_cls")).unwrap();
        let second = entries(&d);
        assert_ne!(first, second);
        std::fs::remove_file(d.join("cpu")).unwrap();
        std::os::unix::fs::symlink("cpu,cpuacct,x", d.join("cpu")).unwrap();
        assert_ne!(second, entries(&d));
        std::fs::remove_dir_all(&d).unwrap();
        assert!(entries(&d).is_empty());
    }

    /// The same host read twice is the same one, not read again.
    #[test]
    fn the_host_is_read_once_while_nothing_changes() {
        let (Ok(a), Ok(b)) = (host(), host()) else {
            panic!("no /proc/self/mountinfo");
        };
        assert!(Arc::ptr_eq(&a, &b));
    }

    /// This machine's layout: v1 controllers, a cgroup2 with only hugetlb at `unified`.
    const HYBRID: &str = "\
23 1 0:21 / /sys rw,nosuid - sysfs sysfs rw
31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
32 31 0:29 / /sys/fs/cgroup/cpu,cpuacct rw,relatime - cgroup cgroup rw,cpu,cpuacct
35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory
40 31 0:37 / /sys/fs/cgroup/systemd rw,relatime - cgroup cgroup rw,xattr,name=systemd
41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
50 1 0:40 / /mnt/other\\040dir rw - cgroup cgroup rw,pids
";
    const HYBRID_CGROUP: &str = "\
9:name=systemd:/
4:memory:/pods/c1
2:cpu,cpuacct:/pods
1:pids:/
0::/
";

    #[test]
    fn parses_the_hierarchies_under_sys_fs_cgroup() {
        let hs = hierarchies(HYBRID);
        let points: Vec<_> = hs.iter().map(|h| h.mount_point.clone()).collect();
        assert_eq!(
            points,
            [
                "/sys/fs/cgroup/cpu,cpuacct",
                "/sys/fs/cgroup/memory",
                "/sys/fs/cgroup/systemd",
                "/sys/fs/cgroup/unified"
            ]
            .map(PathBuf::from)
        );
        assert_eq!(
            own_cgroup(HYBRID_CGROUP, &hs[1]).as_deref(),
            Some("/pods/c1")
        );
        assert_eq!(own_cgroup(HYBRID_CGROUP, &hs[3]).as_deref(), Some("/"));
        assert_eq!(unescape("/a\\040b"), "/a b");
    }

    #[test]
    fn v1_without_cgroup_ns_binds_own_dirs() {
        let links = [(OsString::from("cpu"), PathBuf::from("cpu,cpuacct"))];
        let steps = plan(&hierarchies(HYBRID), HYBRID_CGROUP, false, &links);
        assert_eq!(
            steps,
            [
                Step::Tmpfs,
                Step::Bind {
                    name: Some("cpu,cpuacct".into()),
                    source: "/sys/fs/cgroup/cpu,cpuacct/pods".into()
                },
                Step::Bind {
                    name: Some("memory".into()),
                    source: "/sys/fs/cgroup/memory/pods/c1".into()
                },
                Step::Bind {
                    name: Some("systemd".into()),
                    source: "/sys/fs/cgroup/systemd/".into()
                },
                Step::Bind {
                    name: Some("unified".into()),
                    source: "/sys/fs/cgroup/unified/".into()
                },
                Step::Symlink {
                    name: "cpu".into(),
                    target: "cpu,cpuacct".into()
                },
            ]
        );
    }

    #[test]
    fn v1_with_cgroup_ns_mounts_each_hierarchy() {
        let steps = plan(&hierarchies(HYBRID), HYBRID_CGROUP, true, &[]);
        let data: Vec<_> = steps
            .iter()
            .filter_map(|s| match s {
                Step::Mount { name, fstype, data } => {
                    Some((name.clone().unwrap(), fstype.as_str(), data.as_str()))
                }
                _ => None,
            })
            .collect();
        assert_eq!(
            data,
            [
                ("cpu,cpuacct".into(), "cgroup", "cpu,cpuacct"),
                ("memory".into(), "cgroup", "memory"),
                ("systemd".into(), "cgroup", "none,name=systemd"),
                ("unified".into(), "cgroup2", ""),
            ]
        );
    }

    #[test]
    fn unified_host() {
        let mi = "30 23 0:26 / /sys/fs/cgroup rw,nosuid - cgroup2 cgroup2 rw,nsdelegate\n";
        let cg = "0::/kubepods/pod1/c1\n";
        assert_eq!(
            plan(&hierarchies(mi), cg, true, &[]),
            [Step::Mount {
                name: None,
                fstype: "cgroup2".into(),
                data: String::new()
            }]
        );
        assert_eq!(
            plan(&hierarchies(mi), cg, false, &[]),
            [Step::Bind {
                name: None,
                source: "/sys/fs/cgroup/kubepods/pod1/c1".into()
            }]
        );
        // A host whose cgroup2 mount is rooted below the hierarchy's root.
        let mi = "30 23 0:26 /kubepods /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n";
        assert_eq!(
            plan(&hierarchies(mi), cg, false, &[]),
            [Step::Bind {
                name: None,
                source: "/sys/fs/cgroup/pod1/c1".into()
            }]
        );
    }
}
