//! emptyDir volumes of `medium: Memory`: a tmpfs mounted at the volume's folder under
//! the pod's, as big as the kubelet v1.28 makes it (SizeMemoryBackedVolumes, on by
//! default); and, when a pod goes, every mount under its folder undone before the folder
//! is removed (or the removal would empty the tmpfs and leave it mounted).
//!
//! Setting a volume up is repeatable: a tmpfs already at the folder (the once-a-minute
//! refresh of the pod's volumes, a restarted crustlet adopting its pods) is kept, with
//! what the containers wrote to it, and not mounted over.

use crate::quantity;
use k8s_openapi::api::core::v1::{EmptyDirVolumeSource, Pod};
use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

/// The mounts of the crustlet's mount namespace (the thread's: the same for every
/// thread of the crustlet, and a test may give one thread a namespace of its own).
const MOUNTINFO: &str = "/proc/thread-self/mountinfo";

/// The size of the tmpfs of a Memory emptyDir of `pod`, in bytes: the node's allocatable
/// memory, or the pod's memory limit when it has one and that is no more, or the
/// volume's `sizeLimit` when that is no more than either. None: no size at all (the
/// kernel's default, half the RAM), when nothing is known.
pub fn size(ed: &EmptyDirVolumeSource, pod: &Pod, allocatable: i64) -> Option<i64> {
    let mut size = allocatable;
    // The memory limit of the pod's cgroup, when it has one.
    if let Some(l) = crate::spec::pod_limits(pod).ok().and_then(|p| p.memory) {
        if l > 0 && l <= size {
            size = l;
        }
    }
    if let Some(l) = ed.size_limit.as_ref().and_then(|q| quantity::value(q).ok()) {
        if l > 0 && l <= size {
            size = l;
        }
    }
    (size > 0).then_some(size)
}

/// One line of a mountinfo file: the mount point (its escapes undone) and the type.
fn parse_mountinfo_line(line: &str) -> Option<(PathBuf, &str)> {
    let (pre, post) = line.split_once(" - ")?;
    let point = pre.split(' ').nth(4)?;
    let fstype = post.split(' ').next()?;
    Some((PathBuf::from(unescape(point)), fstype))
}

/// Undoes the kernel's `\ooo` escapes of space, tab, newline and backslash.
fn unescape(s: &str) -> std::ffi::OsString {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let octal = b
            .get(i + 1..i + 4)
            .and_then(|d| std::str::from_utf8(d).ok())
            .filter(|d| d.bytes().all(|c| (b'0'..=b'7').contains(&c)))
            .and_then(|d| u8::from_str_radix(d, 8).ok());
        if let (b'\\', Some(n)) = (b[i], octal) {
            out.push(n);
            i += 4;
            continue;
        }
        out.push(b[i]);
        i += 1;
    }
    std::os::unix::ffi::OsStringExt::from_vec(out)
}

/// Every mount point with its type, in the order they were mounted.
fn mounts() -> Vec<(PathBuf, String)> {
    std::fs::read_to_string(MOUNTINFO)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| parse_mountinfo_line(l).map(|(p, t)| (p, t.to_string())))
        .collect()
}

fn cstr(p: &Path) -> std::io::Result<CString> {
    CString::new(p.as_os_str().as_bytes())
        .map_err(|_| std::io::Error::new(std::io::ErrorKind::InvalidInput, "a NUL in the path"))
}

/// Makes `dir` a tmpfs of `size` bytes (world-writable, as the kubelet's), unless it is
/// one already.
pub fn set_up(dir: &Path, size: Option<i64>) -> std::io::Result<()> {
    std::fs::create_dir_all(dir)?;
    let real = std::fs::canonicalize(dir)?;
    if mounts().iter().any(|(p, t)| *p == real && t == "tmpfs") {
        return Ok(());
    }
    std::fs::set_permissions(&real, std::fs::Permissions::from_mode(0o777))?;
    let target = cstr(&real)?;
    let data = CString::new(size.map(|s| format!("size={s}")).unwrap_or_default())
        .expect("no NUL in a number");
    // SAFETY: NUL-terminated strings that outlive the call.
    let rc = unsafe {
        libc::mount(
            c"tmpfs".as_ptr(),
            target.as_ptr(),
            c"tmpfs".as_ptr(),
            0,
            data.as_ptr().cast(),
        )
    };
    if rc != 0 {
        let e = std::io::Error::last_os_error();
        return Err(std::io::Error::new(e.kind(), format!("mount tmpfs: {e}")));
    }
    Ok(())
}

/// Unmounts everything mounted at or below `dir`, the deepest (and the latest) first,
/// then removes `dir` with what is left in it; best effort, as the pod is going.
pub fn remove_pod_dir(dir: &Path) {
    if let Ok(real) = std::fs::canonicalize(dir) {
        let mut points: Vec<PathBuf> = mounts()
            .into_iter()
            .map(|(p, _)| p)
            .filter(|p| p.starts_with(&real))
            .collect();
        points.reverse();
        // Stable: mounts stacked on one point stay latest first.
        points.sort_by_key(|p| std::cmp::Reverse(p.components().count()));
        for p in points {
            let Ok(target) = cstr(&p) else { continue };
            // SAFETY: a NUL-terminated path that outlives the calls.
            let mut rc = unsafe { libc::umount2(target.as_ptr(), 0) };
            if rc != 0 && std::io::Error::last_os_error().raw_os_error() == Some(libc::EBUSY) {
                // Still open somewhere: gone from the tree now, freed when let go.
                // SAFETY: as above.
                rc = unsafe { libc::umount2(target.as_ptr(), libc::MNT_DETACH) };
            }
            if rc != 0 {
                tracing::warn!(
                    mount = %p.display(),
                    "unmounting a pod's volume: {}",
                    std::io::Error::last_os_error()
                );
            }
        }
    }
    let _ = std::fs::remove_dir_all(dir);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(v: serde_json::Value) -> Pod {
        serde_json::from_value(serde_json::json!({ "spec": v })).unwrap()
    }

    fn ed(size_limit: Option<&str>) -> EmptyDirVolumeSource {
        serde_json::from_value(serde_json::json!({"medium": "Memory", "sizeLimit": size_limit}))
            .unwrap()
    }

    fn limited(name: &str, mem: Option<&str>) -> serde_json::Value {
        match mem {
            Some(m) => serde_json::json!({"name": name, "resources": {"limits": {"memory": m}}}),
            None => serde_json::json!({"name": name}),
        }
    }

    const GI: i64 = 1 << 30;
    const MI: i64 = 1 << 20;

    #[test]
    fn sizes_as_the_kubelet_picks_them() {
        let free = pod(serde_json::json!({"containers": [limited("a", None)]}));
        // Nothing but the node: its allocatable memory.
        assert_eq!(size(&ed(None), &free, 4 * GI), Some(4 * GI));
        // The volume's sizeLimit when it is smaller, else the node's.
        assert_eq!(size(&ed(Some("64Mi")), &free, 4 * GI), Some(64 * MI));
        assert_eq!(size(&ed(Some("8Gi")), &free, 4 * GI), Some(4 * GI));
        assert_eq!(size(&ed(Some("0")), &free, 4 * GI), Some(4 * GI));
        // Unknown allocatable and no limit: the kernel's default.
        assert_eq!(size(&ed(None), &free, 0), None);

        // Every container limited: their sum, and the sizeLimit only below it.
        let two = pod(serde_json::json!({"containers": [
            limited("a", Some("100Mi")), limited("b", Some("28Mi"))
        ]}));
        assert_eq!(size(&ed(None), &two, 4 * GI), Some(128 * MI));
        assert_eq!(size(&ed(Some("1Gi")), &two, 4 * GI), Some(128 * MI));
        assert_eq!(size(&ed(Some("16Mi")), &two, 4 * GI), Some(16 * MI));
        // A pod limit above the node's allocatable does not count.
        assert_eq!(size(&ed(None), &two, 64 * MI), Some(64 * MI));

        // One container without a limit: the pod has none.
        let some = pod(serde_json::json!({"containers": [
            limited("a", Some("100Mi")), limited("b", None)
        ]}));
        assert_eq!(size(&ed(None), &some, 4 * GI), Some(4 * GI));

        // The largest init container when it is above the sum; the overhead on top.
        let init = pod(serde_json::json!({
            "containers": [limited("a", Some("100Mi"))],
            "initContainers": [limited("i", Some("200Mi")), limited("j", Some("50Mi"))],
            "overhead": {"memory": "10Mi"},
        }));
        assert_eq!(size(&ed(None), &init, 4 * GI), Some(210 * MI));
    }

    #[test]
    fn mountinfo_lines() {
        let l = r"36 35 98:0 / /var/lib/x\040y rw,noatime master:1 - tmpfs tmpfs rw,size=8192k";
        assert_eq!(
            parse_mountinfo_line(l),
            Some((PathBuf::from("/var/lib/x y"), "tmpfs"))
        );
        let l = "22 1 8:1 / / rw shared:1 - ext4 /dev/sda1 rw";
        assert_eq!(parse_mountinfo_line(l), Some((PathBuf::from("/"), "ext4")));
        assert_eq!(parse_mountinfo_line("garbage"), None);
        assert_eq!(unescape(r"a\134b\011"), std::ffi::OsString::from("a\\b\t"));
        assert_eq!(unescape(r"trail\04"), std::ffi::OsString::from(r"trail\04"));
    }

    /// As root, in a mount namespace of a thread's own (private, so nothing reaches the
    /// host): set up twice is one tmpfs of the size asked; removal leaves no mount.
    #[test]
    fn one_tmpfs_however_often_set_up_and_none_after_removal() {
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } != 0 {
            eprintln!("skipped: needs root");
            return;
        }
        let dir = std::env::temp_dir().join(format!("crustlet-tmpfs-{}", std::process::id()));
        std::thread::spawn(move || {
            // SAFETY: affects this thread only; its namespace ends with it.
            unsafe {
                assert_eq!(libc::unshare(libc::CLONE_NEWNS), 0, "unshare");
                let rc = libc::mount(
                    std::ptr::null(),
                    c"/".as_ptr(),
                    std::ptr::null(),
                    libc::MS_REC | libc::MS_PRIVATE,
                    std::ptr::null(),
                );
                assert_eq!(rc, 0, "make / private");
            }
            let vol = dir.join("volumes/kubernetes.io~empty-dir/cache");
            let ours = |d: &Path| {
                let real = std::fs::canonicalize(d).unwrap_or(d.to_path_buf());
                std::fs::read_to_string(MOUNTINFO)
                    .unwrap()
                    .lines()
                    .filter(|l| parse_mountinfo_line(l).is_some_and(|(p, _)| p.starts_with(&real)))
                    .map(str::to_string)
                    .collect::<Vec<_>>()
            };
            set_up(&vol, Some(8 * MI)).unwrap();
            std::fs::write(vol.join("kept"), b"x").unwrap();
            set_up(&vol, Some(16 * MI)).unwrap();
            let m = ours(&dir);
            assert_eq!(m.len(), 1, "{m:#?}");
            assert!(
                m[0].contains(" - tmpfs ") && m[0].contains("size=8192k"),
                "{m:#?}"
            );
            assert!(vol.join("kept").exists(), "the tmpfs was mounted over");
            let mode = std::fs::metadata(&vol).unwrap().permissions().mode() & 0o7777;
            assert_eq!(mode & 0o777, 0o777, "{mode:o}");
            // A full tmpfs refuses more.
            let big = vec![0u8; 9 << 20];
            let e = std::fs::write(vol.join("big"), &big).unwrap_err();
            assert_eq!(e.raw_os_error(), Some(libc::ENOSPC), "{e}");
            // Every volume of the pod goes.
            set_up(&dir.join("volumes/kubernetes.io~empty-dir/other"), None).unwrap();
            remove_pod_dir(&dir);
            assert!(!dir.exists());
            assert_eq!(ours(&dir), Vec::<String>::new());
        })
        .join()
        .unwrap();
    }
}
