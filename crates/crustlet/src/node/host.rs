//! What the node reads from its host: CPUs, memory, the root dir's filesystem, pids,
//! hugepages, its address and the facts of `nodeInfo`. Readings that fail are logged by
//! the caller and left out, so one unreadable file does not stop the status loop.

use std::io;
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};

/// One look at the host's resources, taken every status period.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Readings {
    /// Online CPUs (the kubelet counts cores the kernel runs, not the process's affinity).
    pub cpus: u32,
    /// MemTotal, bytes.
    pub mem_total: u64,
    /// MemAvailable, bytes (absent on kernels before 3.14).
    pub mem_available: Option<u64>,
    /// Hugepages reserved per page size: (`2Mi`, bytes reserved in total).
    pub hugepages: Vec<(String, u64)>,
    /// The root dir's filesystem (absent if even `/` cannot be statted).
    pub fs: Option<FsStats>,
    /// (the most tasks the kernel allows, tasks now).
    pub pids: Option<(u64, u64)>,
    /// Why AppArmor cannot confine containers here (`None`: it can), see [`apparmor`].
    pub apparmor: Option<String>,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FsStats {
    pub capacity: u64,
    pub available: u64,
    pub inodes: u64,
    pub inodes_free: u64,
}

/// Everything at once; `root_dir` is where the crustlet keeps pods' volumes (nodefs).
pub fn readings(root_dir: &Path) -> Readings {
    let (mem_total, mem_available) = match memory() {
        Ok(m) => m,
        Err(e) => {
            tracing::warn!("reading /proc/meminfo: {e}");
            (0, None)
        }
    };
    let fs = match fs_stats(root_dir) {
        Ok(s) => Some(s),
        Err(e) => {
            tracing::warn!("statvfs of {}: {e}", root_dir.display());
            None
        }
    };
    let pids = match pids() {
        Ok(p) => Some(p),
        Err(e) => {
            tracing::warn!("reading pid usage: {e}");
            None
        }
    };
    Readings {
        cpus: online_cpus(),
        mem_total,
        mem_available,
        hugepages: hugepages(Path::new("/sys/kernel/mm/hugepages")),
        fs,
        pids,
        apparmor: apparmor().err(),
    }
}

/// Whether the host can confine containers with AppArmor, as the kubelet's validator
/// asks (v1.28, `pkg/security/apparmor`): the module enabled and securityfs mounted
/// (where profiles are loaded). The error is the kubelet's words.
pub fn apparmor() -> Result<(), String> {
    let enabled = std::fs::read_to_string("/sys/module/apparmor/parameters/enabled")
        .is_ok_and(|s| s.starts_with('Y'));
    if !enabled || !Path::new("/sys/kernel/security/apparmor").is_dir() {
        return Err("AppArmor is not enabled on the host".into());
    }
    Ok(())
}

/// CPUs online now (sysconf), at least 1.
pub fn online_cpus() -> u32 {
    // SAFETY: sysconf has no preconditions.
    let n = unsafe { libc::sysconf(libc::_SC_NPROCESSORS_ONLN) };
    n.max(1) as u32
}

/// (MemTotal, MemAvailable) in bytes.
pub fn memory() -> io::Result<(u64, Option<u64>)> {
    use procfs::Current;
    let m = procfs::Meminfo::current().map_err(io::Error::other)?;
    Ok((m.mem_total, m.mem_available))
}

/// statvfs of `path`, or of its nearest existing parent: the root dir may not exist yet
/// on the first start, and the filesystem it will be made on is the one that counts.
pub fn fs_stats(path: &Path) -> io::Result<FsStats> {
    let target = nearest_existing(path);
    let c = std::ffi::CString::new(target.as_os_str().as_encoded_bytes())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "NUL in path"))?;
    // SAFETY: statvfs is plain integers, for which all zeroes is a valid value.
    let mut s: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: c is a valid C string and s a valid out pointer.
    if unsafe { libc::statvfs(c.as_ptr(), &mut s) } != 0 {
        return Err(io::Error::last_os_error());
    }
    let frsize = s.f_frsize as u64;
    Ok(FsStats {
        capacity: s.f_blocks as u64 * frsize,
        available: s.f_bavail as u64 * frsize,
        inodes: s.f_files as u64,
        inodes_free: s.f_ffree as u64,
    })
}

/// `path` itself if it exists, else the first ancestor that does (`/` at worst).
pub fn nearest_existing(path: &Path) -> PathBuf {
    let mut p = path;
    loop {
        if p.exists() {
            return p.to_path_buf();
        }
        match p.parent() {
            Some(parent) if !parent.as_os_str().is_empty() => p = parent,
            _ => return PathBuf::from("/"),
        }
    }
}

/// (the most tasks the kernel gives out, tasks now), as the kubelet's `pid.available`
/// counts: the smaller of `pid_max` and `threads-max`, against the task count of
/// /proc/loadavg (threads, since every thread takes a pid).
pub fn pids() -> io::Result<(u64, u64)> {
    use procfs::Current;
    let pid_max = procfs::sys::kernel::pid_max().map_err(io::Error::other)? as u64;
    let max = match procfs::sys::kernel::threads_max() {
        Ok(t) => pid_max.min(t as u64),
        Err(_) => pid_max,
    };
    let now = procfs::LoadAverage::current()
        .map_err(io::Error::other)?
        .max as u64;
    Ok((max, now))
}

/// Hugepages reserved, per size, from `dir` (`/sys/kernel/mm/hugepages`): every size the
/// kernel offers is listed, with 0 bytes when none are reserved, as the kubelet reports
/// `hugepages-2Mi: 0`.
pub fn hugepages(dir: &Path) -> Vec<(String, u64)> {
    let mut out = Vec::new();
    let Ok(entries) = std::fs::read_dir(dir) else {
        return out;
    };
    for e in entries.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        let Some(kb) = name
            .strip_prefix("hugepages-")
            .and_then(|s| s.strip_suffix("kB"))
            .and_then(|s| s.parse::<u64>().ok())
        else {
            continue;
        };
        let pages = std::fs::read_to_string(e.path().join("nr_hugepages"))
            .ok()
            .and_then(|s| s.trim().parse::<u64>().ok())
            .unwrap_or(0);
        out.push((super::status::binary_si(kb * 1024), pages * kb * 1024));
    }
    out.sort();
    out
}

/// Go's name for an architecture (`GOARCH`), which is what Kubernetes labels and
/// `nodeInfo.architecture` carry: images' manifests lists and node selectors use it.
/// The `image` crate has the same table with OCI's variants beside it
/// (`platform::oci_arch`, which lacks the little-endian mips names), but the crustlet
/// does not depend on `image`, which would bring the registry client in for one match:
/// an architecture added here goes there too.
pub fn go_arch(rust_arch: &str, little_endian: bool) -> &str {
    match rust_arch {
        "x86_64" => "amd64",
        "x86" => "386",
        "aarch64" => "arm64",
        "arm" => "arm",
        "powerpc64" if little_endian => "ppc64le",
        "powerpc64" => "ppc64",
        "s390x" => "s390x",
        "riscv64" => "riscv64",
        "loongarch64" => "loong64",
        "mips64" if little_endian => "mips64le",
        "mips" if little_endian => "mipsle",
        other => other,
    }
}

/// This build's `GOARCH`.
pub fn arch() -> &'static str {
    go_arch(std::env::consts::ARCH, cfg!(target_endian = "little"))
}

/// An IPv4 address of an interface, as getifaddrs lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IfAddr {
    pub iface: String,
    pub ip: Ipv4Addr,
    pub up: bool,
    pub loopback: bool,
}

/// The node's InternalIP when none is configured: an address of the interface that
/// carries the default route (the kubelet's choice when the hostname does not resolve),
/// else the first usable address of an up interface. Loopback and link-local addresses
/// are never chosen: no other node or pod could reach them.
pub fn choose_ip(addrs: &[IfAddr], default_ifaces: &[String]) -> Option<Ipv4Addr> {
    let usable = |a: &&IfAddr| {
        a.up && !a.loopback
            && !a.ip.is_loopback()
            && !a.ip.is_link_local()
            && !a.ip.is_unspecified()
    };
    for iface in default_ifaces {
        if let Some(a) = addrs.iter().filter(usable).find(|a| &a.iface == iface) {
            return Some(a.ip);
        }
    }
    addrs.iter().find(usable).map(|a| a.ip)
}

/// The host's IPv4 addresses (getifaddrs).
pub fn ipv4_addrs() -> io::Result<Vec<IfAddr>> {
    let mut head: *mut libc::ifaddrs = std::ptr::null_mut();
    // SAFETY: head is a valid out pointer; freed below with freeifaddrs.
    if unsafe { libc::getifaddrs(&mut head) } != 0 {
        return Err(io::Error::last_os_error());
    }
    let mut out = Vec::new();
    let mut cur = head;
    while !cur.is_null() {
        // SAFETY: cur is a node of the list getifaddrs returned, alive until freeifaddrs.
        let ifa = unsafe { &*cur };
        cur = ifa.ifa_next;
        if ifa.ifa_addr.is_null() {
            continue;
        }
        // SAFETY: ifa_addr is non-null and points at a sockaddr of at least sa_family.
        if unsafe { (*ifa.ifa_addr).sa_family } as i32 != libc::AF_INET {
            continue;
        }
        // SAFETY: an AF_INET address is a sockaddr_in.
        let sin = unsafe { &*(ifa.ifa_addr as *const libc::sockaddr_in) };
        let ip = Ipv4Addr::from(u32::from_be(sin.sin_addr.s_addr));
        // SAFETY: ifa_name is a NUL-terminated string owned by the list.
        let iface = unsafe { std::ffi::CStr::from_ptr(ifa.ifa_name) }
            .to_string_lossy()
            .into_owned();
        let flags = ifa.ifa_flags as i32;
        out.push(IfAddr {
            iface,
            ip,
            up: flags & libc::IFF_UP != 0,
            loopback: flags & libc::IFF_LOOPBACK != 0,
        });
    }
    // SAFETY: head came from getifaddrs and is freed once.
    unsafe { libc::freeifaddrs(head) };
    Ok(out)
}

/// Interfaces with an IPv4 default route, lowest metric first, from /proc/net/route's text.
pub fn default_route_ifaces(route_table: &str) -> Vec<String> {
    let mut routes: Vec<(u64, String)> = route_table
        .lines()
        .skip(1)
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            // Iface Destination Gateway Flags RefCnt Use Metric Mask ...
            if f.len() < 8 || f[1] != "00000000" || f[7] != "00000000" {
                return None;
            }
            Some((f[6].parse().unwrap_or(u64::MAX), f[0].to_string()))
        })
        .collect();
    routes.sort();
    routes.into_iter().map(|(_, i)| i).collect()
}

/// The InternalIP this host would get without `--node-ip`.
pub fn detect_ip() -> Option<Ipv4Addr> {
    let addrs = match ipv4_addrs() {
        Ok(a) => a,
        Err(e) => {
            tracing::warn!("getifaddrs: {e}");
            return None;
        }
    };
    let routes = std::fs::read_to_string("/proc/net/route").unwrap_or_default();
    choose_ip(&addrs, &default_route_ifaces(&routes))
}

/// The facts of `nodeInfo` the host gives (the runtime's and the crustlet's versions
/// are added by the caller).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SystemInfo {
    pub machine_id: String,
    pub system_uuid: String,
    pub boot_id: String,
    pub kernel_version: String,
    pub os_image: String,
}

pub fn system_info() -> SystemInfo {
    let first = |paths: &[&str]| {
        paths
            .iter()
            .find_map(|p| std::fs::read_to_string(p).ok())
            .map(|s| s.trim().to_string())
            .unwrap_or_default()
    };
    SystemInfo {
        // cAdvisor's sources, in its order.
        machine_id: first(&["/etc/machine-id", "/var/lib/dbus/machine-id"]),
        // Readable by root only; the kubelet reports it empty too when it cannot read it.
        system_uuid: first(&["/sys/class/dmi/id/product_uuid"]),
        boot_id: first(&["/proc/sys/kernel/random/boot_id"]),
        kernel_version: kernel_release(),
        os_image: std::fs::read_to_string("/etc/os-release")
            .ok()
            .and_then(|t| pretty_name(&t))
            .unwrap_or_else(|| "Linux".to_string()),
    }
}

/// uname's release (`6.1.0-18-amd64`).
pub fn kernel_release() -> String {
    // SAFETY: utsname is arrays of bytes, for which all zeroes is a valid value.
    let mut u: libc::utsname = unsafe { std::mem::zeroed() };
    // SAFETY: u is a valid out pointer.
    if unsafe { libc::uname(&mut u) } != 0 {
        return String::new();
    }
    // SAFETY: uname NUL-terminates release.
    unsafe { std::ffi::CStr::from_ptr(u.release.as_ptr()) }
        .to_string_lossy()
        .into_owned()
}

/// PRETTY_NAME of an os-release file, its quotes taken off.
pub fn pretty_name(os_release: &str) -> Option<String> {
    os_release.lines().find_map(|l| {
        let v = l.trim().strip_prefix("PRETTY_NAME=")?;
        let v = v.trim();
        let v = v
            .strip_prefix('"')
            .and_then(|v| v.strip_suffix('"'))
            .or_else(|| v.strip_prefix('\'').and_then(|v| v.strip_suffix('\'')))
            .unwrap_or(v);
        Some(v.to_string())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arch_names_are_go_names() {
        assert_eq!(go_arch("x86_64", true), "amd64");
        assert_eq!(go_arch("aarch64", true), "arm64");
        assert_eq!(go_arch("powerpc64", true), "ppc64le");
        assert_eq!(go_arch("powerpc64", false), "ppc64");
        assert_eq!(go_arch("x86", true), "386");
        assert_eq!(go_arch("riscv64", true), "riscv64");
        assert!(["amd64", "arm64", "ppc64le", "s390x", "riscv64", "386", "arm"].contains(&arch()));
    }

    fn a(iface: &str, ip: [u8; 4], up: bool) -> IfAddr {
        IfAddr {
            iface: iface.into(),
            ip: Ipv4Addr::from(ip),
            up,
            loopback: iface == "lo",
        }
    }

    #[test]
    fn the_address_is_the_default_routes_else_the_first_usable() {
        let addrs = [
            a("lo", [127, 0, 0, 1], true),
            a("docker0", [172, 17, 0, 1], true),
            a("eth0", [169, 254, 3, 4], true),
            a("eth0", [10, 0, 0, 5], true),
            a("wlan0", [192, 168, 1, 9], false),
        ];
        assert_eq!(
            choose_ip(&addrs, &["eth0".into()]),
            Some(Ipv4Addr::new(10, 0, 0, 5))
        );
        // No default route: the first up, non-loopback, non-link-local one.
        assert_eq!(choose_ip(&addrs, &[]), Some(Ipv4Addr::new(172, 17, 0, 1)));
        // A default route through a down or address-less interface falls through.
        assert_eq!(
            choose_ip(&addrs, &["wlan0".into()]),
            Some(Ipv4Addr::new(172, 17, 0, 1))
        );
        assert_eq!(choose_ip(&addrs[..1], &[]), None);
    }

    #[test]
    fn default_routes_from_proc_net_route() {
        let t =
            "Iface\tDestination\tGateway \tFlags\tRefCnt\tUse\tMetric\tMask\t\tMTU\tWindow\tIRTT\n\
                 wlan0\t00000000\t0101A8C0\t0003\t0\t0\t600\t00000000\t0\t0\t0\n\
                 eth0\t00000000\t0100000A\t0003\t0\t0\t100\t00000000\t0\t0\t0\n\
                 eth0\t0000000A\t00000000\t0001\t0\t0\t100\t00FFFFFF\t0\t0\t0\n";
        assert_eq!(default_route_ifaces(t), ["eth0", "wlan0"]);
        assert!(default_route_ifaces("").is_empty());
    }

    #[test]
    fn this_hosts_addresses_are_listed() {
        let addrs = ipv4_addrs().unwrap();
        // Every network namespace has lo, with 127.0.0.1 once it is up.
        assert!(addrs.iter().all(|a| !a.iface.is_empty()));
        if let Some(ip) = detect_ip() {
            assert!(!ip.is_loopback() && !ip.is_link_local());
        }
    }

    #[test]
    fn pretty_name_unquoted() {
        let t = "NAME=\"Debian GNU/Linux\"\nPRETTY_NAME=\"Debian GNU/Linux 12 (bookworm)\"\nID=debian\n";
        assert_eq!(
            pretty_name(t).as_deref(),
            Some("Debian GNU/Linux 12 (bookworm)")
        );
        assert_eq!(
            pretty_name("PRETTY_NAME=Alpine\n").as_deref(),
            Some("Alpine")
        );
        assert_eq!(pretty_name("ID=x\n"), None);
    }

    #[test]
    fn readings_have_the_shape_of_a_node() {
        let dir = std::env::temp_dir().join(format!("crustlet-node-{}", std::process::id()));
        // Not made: the nearest existing parent (the temp dir) is statted instead.
        let r = readings(&dir.join("not/yet"));
        assert!(r.cpus >= 1);
        assert!(r.mem_total > 64 << 20, "{r:?}");
        assert!(r.mem_available.unwrap() <= r.mem_total);
        let fs = r.fs.unwrap();
        assert!(fs.capacity > 0 && fs.available <= fs.capacity, "{fs:?}");
        let (max, now) = r.pids.unwrap();
        assert!(max >= 301 && now >= 1 && now < max, "{max} {now}");
        assert_eq!(nearest_existing(&dir.join("a/b")), std::env::temp_dir());
        assert_eq!(
            nearest_existing(Path::new("relative/none")),
            PathBuf::from("/")
        );
        let s = system_info();
        assert!(!s.kernel_version.is_empty() && !s.os_image.is_empty());
        assert_eq!(s.boot_id.len(), 36, "{s:?}");
    }

    #[test]
    fn hugepages_every_size_with_what_is_reserved() {
        let dir = std::env::temp_dir().join(format!("crustlet-hp-{}", std::process::id()));
        std::fs::create_dir_all(dir.join("hugepages-2048kB")).unwrap();
        std::fs::create_dir_all(dir.join("hugepages-1048576kB")).unwrap();
        std::fs::write(dir.join("hugepages-2048kB/nr_hugepages"), "3\n").unwrap();
        std::fs::write(dir.join("hugepages-1048576kB/nr_hugepages"), "0\n").unwrap();
        assert_eq!(
            hugepages(&dir),
            [("1Gi".to_string(), 0), ("2Mi".to_string(), 3 * 2048 * 1024)]
        );
        std::fs::remove_dir_all(&dir).ok();
        assert!(hugepages(&dir).is_empty());
    }
}
