//! Which cgroup a process is in, from `/proc/PID/cgroup`: one `ID:CONTROLLERS:PATH` line
//! per v1 hierarchy (`4:memory:/a`, `2:cpu,cpuacct:/a`) and a `0::PATH` line for the
//! unified (v2) hierarchy, which on a hybrid host holds the controllers v1 lacks.

use crate::error::{Error, Result};
use crate::path::CgroupPath;
use std::path::{Path, PathBuf};

/// The cgroup of the calling process for `controller` (`"memory"`, `"cpu"`,
/// `"name=systemd"`, ...): the v1 hierarchy's line that lists it, else the unified
/// hierarchy's `0::` line (a cgroup v2 host, or a controller such as `hugetlb` that a
/// hybrid host has on its cgroup2 mount). `""` asks for the `0::` line itself.
pub fn own_cgroup(controller: &str) -> Result<CgroupPath> {
    cgroup_in_file(Path::new("/proc/self/cgroup"), controller)
}

/// Like [`own_cgroup`], for the process `pid`.
pub fn cgroup_of(pid: i32, controller: &str) -> Result<CgroupPath> {
    cgroup_in_file(&PathBuf::from(format!("/proc/{pid}/cgroup")), controller)
}

fn cgroup_in_file(file: &Path, controller: &str) -> Result<CgroupPath> {
    let text = std::fs::read_to_string(file).map_err(|e| Error::io(crate::Op::Read, file, e))?;
    cgroup_in_text(&text, file, controller)
}

/// The cgroup for `controller` in the text of a `/proc/PID/cgroup` file (`file` only
/// names it in errors).
pub fn cgroup_in_text(text: &str, file: &Path, controller: &str) -> Result<CgroupPath> {
    let mut unified = None;
    for line in text.lines().filter(|l| !l.is_empty()) {
        let mut parts = line.splitn(3, ':');
        let (Some(id), Some(controllers), Some(path)) = (parts.next(), parts.next(), parts.next())
        else {
            return Err(Error::Parse {
                path: file.to_path_buf(),
                line: line.to_string(),
                reason: "expected ID:CONTROLLERS:PATH",
            });
        };
        let parse = || {
            CgroupPath::new(path).map_err(|_| Error::Parse {
                path: file.to_path_buf(),
                line: line.to_string(),
                reason: "cgroup path outside this process's cgroup namespace",
            })
        };
        if id == "0" && controllers.is_empty() {
            unified = Some(parse()?);
        } else if !controller.is_empty() && controllers.split(',').any(|c| c == controller) {
            return parse();
        }
    }
    unified.ok_or_else(|| Error::NoCgroupFor {
        controller: controller.to_string(),
        path: file.to_path_buf(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const HYBRID: &str = "9:name=systemd:/\n8:pids:/p\n4:memory:/process_api/c107\n\
                          2:cpu,cpuacct:/c\n0::/u\n";

    fn get(text: &str, c: &str) -> Result<String> {
        cgroup_in_text(text, Path::new("/proc/self/cgroup"), c).map(|p| p.to_string())
    }

    #[test]
    fn v1_lines_by_controller() {
        assert_eq!(get(HYBRID, "memory").unwrap(), "/process_api/c107");
        assert_eq!(get(HYBRID, "cpu").unwrap(), "/c");
        assert_eq!(get(HYBRID, "cpuacct").unwrap(), "/c");
        assert_eq!(get(HYBRID, "pids").unwrap(), "/p");
        assert_eq!(get(HYBRID, "name=systemd").unwrap(), "/");
        // Not on v1: the unified line (hugetlb lives there on a hybrid host).
        assert_eq!(get(HYBRID, "hugetlb").unwrap(), "/u");
        assert_eq!(get(HYBRID, "").unwrap(), "/u");
    }

    #[test]
    fn v2_and_missing() {
        assert_eq!(
            get("0::/user.slice/x.scope\n", "memory").unwrap(),
            "/user.slice/x.scope"
        );
        let e = get("4:memory:/m\n", "pids").unwrap_err();
        assert!(matches!(e, Error::NoCgroupFor { .. }), "{e}");
        assert_eq!(
            e.to_string(),
            "no cgroup of controller \"pids\" in /proc/self/cgroup"
        );
        assert!(matches!(
            get("garbage\n", "memory"),
            Err(Error::Parse { .. })
        ));
        assert!(matches!(
            get("0::/../x\n", "memory"),
            Err(Error::Parse { .. })
        ));
    }
}
