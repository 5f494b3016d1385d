//! CRI seccomp profiles → the OCI spec's `linux.seccomp`.
//!
//! | CRI | profile |
//! | --- | --- |
//! | `seccomp` unset and `seccomp_profile_path` empty | none (unconfined, as containerd's default) |
//! | `Unconfined`, `unconfined` | none |
//! | `RuntimeDefault`, `runtime/default`, `docker/default` | [`runtime_default`] |
//! | `Localhost` + `localhost_ref`, `localhost/<absolute path>` | the JSON file at that path |
//!
//! A privileged container gets no profile at all (the caller does not ask).
//!
//! ## The built-in default
//! In effect the profile containerd and CRI-O ship (moby's default): an allow-list
//! with `ERRNO(EPERM)` for the rest, `socket` without `AF_VSOCK`, `personality` only
//! with the harmless personas, `clone` without namespace flags, `clone3` answering
//! `ENOSYS` (so libc falls back to `clone`, whose flags the filter can see), and the
//! calls a capability guards (`mount`, `unshare`, `setns`, `sethostname` for
//! `CAP_SYS_ADMIN`, `reboot` for `CAP_SYS_BOOT`, ...) only when the container is
//! granted that capability. The capability set is the one `container_spec` gives
//! (the default set, CRI's `add_capabilities`/`drop_capabilities`); the kernel still
//! checks the capability itself, the profile only stops refusing the call.
//! It lists the three x86 ABIs (`SCMP_ARCH_X86_64`, `SCMP_ARCH_X86`,
//! `SCMP_ARCH_X32`), as containerd's default does on amd64: the executor compiles the
//! rules for each with that ABI's numbers (a name an ABI lacks is skipped there), so
//! 32-bit binaries run; the i386-only names (`mmap2`, `fstat64`, `socketcall`, ...)
//! are in the list for them (see `container::executor`'s `seccomp.rs`).
//!
//! ## Localhost files
//! The OCI `linux.seccomp` format, or Docker's profile format (which containerd also
//! accepts): `syscalls[].name` beside `names`, `archMap` instead of `architectures`,
//! and entries with `includes`/`excludes` (`caps`, `arches`, `minKernel`) kept or
//! dropped for this container, as Docker and containerd do. A missing, unreadable or
//! malformed file is `InvalidArgument` naming the path.

use std::collections::BTreeSet;
use std::path::Path;

use serde_json::{json, Map, Value};

use crate::containers::spec::DEFAULT_CAPS;
use crate::cri::error::{Error, Result};
use cri_api::security_profile::ProfileType;
use cri_api::LinuxContainerSecurityContext;

/// The `linux.seccomp` object for a container's security context, or `None` for
/// unconfined.
#[allow(deprecated)] // seccomp_profile_path: still sent by older kubelets
pub fn linux_seccomp(sc: &LinuxContainerSecurityContext) -> Result<Option<Value>> {
    let caps = granted_caps(sc);
    if let Some(p) = &sc.seccomp {
        return match ProfileType::try_from(p.profile_type) {
            Ok(ProfileType::RuntimeDefault) => Ok(Some(runtime_default(&caps))),
            Ok(ProfileType::Unconfined) => Ok(None),
            Ok(ProfileType::Localhost) => localhost(&p.localhost_ref, &caps).map(Some),
            Err(_) => Err(Error::InvalidArgument(format!(
                "unknown seccomp profile type {}",
                p.profile_type
            ))),
        };
    }
    match sc.seccomp_profile_path.as_str() {
        "" | "unconfined" => Ok(None),
        "runtime/default" | "docker/default" => Ok(Some(runtime_default(&caps))),
        p => match p.strip_prefix("localhost/") {
            Some(path) => localhost(path, &caps).map(Some),
            None => Err(Error::InvalidArgument(format!(
                "unknown seccomp profile {p:?} (want runtime/default, unconfined or localhost/<path>)"
            ))),
        },
    }
}

/// `CAP_*` names the container will have: the default set with CRI's drops and adds
/// applied (`ALL` in either), as `container_spec` computes it.
fn granted_caps(sc: &LinuxContainerSecurityContext) -> BTreeSet<String> {
    let norm = |c: &String| {
        let up = c.to_ascii_uppercase();
        if up == "ALL" || up.starts_with("CAP_") {
            up
        } else {
            format!("CAP_{up}")
        }
    };
    let c = sc.capabilities.clone().unwrap_or_default();
    let add: Vec<String> = c.add_capabilities.iter().map(norm).collect();
    let drop: Vec<String> = c.drop_capabilities.iter().map(norm).collect();
    let mut set: BTreeSet<String> = if add.iter().any(|a| a == "ALL") {
        caps::all().into_iter().map(|c| c.to_string()).collect()
    } else {
        DEFAULT_CAPS.iter().map(|s| s.to_string()).collect()
    };
    if drop.iter().any(|d| d == "ALL") {
        set.clear();
    }
    set.retain(|c| !drop.contains(c));
    set.extend(add.into_iter().filter(|a| a != "ALL"));
    set
}

/// Allowed for every container: the calls of ordinary programs (files, memory,
/// processes without new namespaces, signals, time, sockets, IPC, scheduling).
#[rustfmt::skip]
const ALLOWED: &[&str] = &[
    // files and directories
    "access", "chdir", "chmod", "chown", "close", "close_range", "copy_file_range", "creat",
    "dup", "dup2", "dup3", "faccessat", "faccessat2", "fadvise64", "fallocate", "fchdir",
    "fchmod", "fchmodat", "fchmodat2", "fchown", "fchownat", "fcntl", "fdatasync", "flock",
    "fstat", "fstatfs", "fsync", "ftruncate", "futimesat", "getcwd", "getdents", "getdents64",
    "lchown", "link", "linkat", "lseek", "lstat", "mkdir", "mkdirat", "mknod", "mknodat",
    "name_to_handle_at", "newfstatat", "open", "openat", "openat2", "pread64", "preadv",
    "preadv2", "pwrite64", "pwritev", "pwritev2", "read", "readahead", "readlink",
    "readlinkat", "readv", "rename", "renameat", "renameat2", "rmdir", "sendfile", "splice",
    "stat", "statfs", "statx", "symlink", "symlinkat", "sync", "sync_file_range", "syncfs",
    "tee", "truncate", "umask", "unlink", "unlinkat", "utime", "utimensat", "utimes",
    "vmsplice", "write", "writev",
    // extended attributes
    "fgetxattr", "flistxattr", "fremovexattr", "fsetxattr", "getxattr", "lgetxattr",
    "listxattr", "llistxattr", "lremovexattr", "lsetxattr", "removexattr", "setxattr",
    // polling, events, notification
    "epoll_create", "epoll_create1", "epoll_ctl", "epoll_ctl_old", "epoll_pwait",
    "epoll_pwait2", "epoll_wait", "epoll_wait_old", "eventfd", "eventfd2", "fanotify_mark",
    "inotify_add_watch", "inotify_init", "inotify_init1", "inotify_rm_watch", "pause", "poll",
    "ppoll", "pselect6", "select", "signalfd", "signalfd4", "timerfd_create",
    "timerfd_gettime", "timerfd_settime",
    // async I/O
    "io_cancel", "io_destroy", "io_getevents", "io_pgetevents", "io_setup", "io_submit",
    "ioprio_get", "ioprio_set",
    // memory
    "brk", "madvise", "map_shadow_stack", "membarrier", "memfd_create", "memfd_secret",
    "mincore", "mlock", "mlock2", "mlockall", "mmap", "mprotect", "mremap", "mseal", "msync",
    "munlock", "munlockall", "munmap", "pkey_alloc", "pkey_free", "pkey_mprotect",
    "remap_file_pages",
    // processes, threads, credentials
    "arch_prctl", "capget", "capset", "execve", "execveat", "exit", "exit_group", "fork",
    "futex", "futex_requeue", "futex_wait", "futex_waitv", "futex_wake", "get_robust_list",
    "get_thread_area", "getcpu", "getegid", "geteuid", "getgid", "getgroups", "getpgid",
    "getpgrp", "getpid", "getppid", "getpriority", "getresgid", "getresuid", "getrlimit",
    "getrusage", "getsid", "gettid", "getuid", "ioctl", "kill", "modify_ldt", "pidfd_open",
    "pidfd_send_signal", "pipe", "pipe2", "prctl", "prlimit64", "process_mrelease", "ptrace",
    "process_vm_readv", "process_vm_writev", "restart_syscall", "rseq", "seccomp",
    "set_robust_list", "set_thread_area", "set_tid_address", "setfsgid", "setfsuid", "setgid",
    "setgroups", "setpgid", "setpriority", "setregid", "setresgid", "setresuid", "setreuid",
    "setrlimit", "setsid", "setuid", "tgkill", "tkill", "vfork", "wait4", "waitid",
    "landlock_add_rule", "landlock_create_ruleset", "landlock_restrict_self",
    // signals
    "rt_sigaction", "rt_sigpending", "rt_sigprocmask", "rt_sigqueueinfo", "rt_sigreturn",
    "rt_sigsuspend", "rt_sigtimedwait", "rt_tgsigqueueinfo", "sigaltstack",
    // time
    "adjtimex", "alarm", "clock_adjtime", "clock_getres", "clock_gettime", "clock_nanosleep",
    "getitimer", "gettimeofday", "nanosleep", "setitimer", "time", "timer_create",
    "timer_delete", "timer_getoverrun", "timer_gettime", "timer_settime", "times",
    // scheduling, system information
    "getrandom", "sched_get_priority_max", "sched_get_priority_min", "sched_getaffinity",
    "sched_getattr", "sched_getparam", "sched_getscheduler", "sched_rr_get_interval",
    "sched_setaffinity", "sched_setattr", "sched_setparam", "sched_setscheduler",
    "sched_yield", "sysinfo", "uname", "cachestat",
    // sockets (`socket` itself below)
    "accept", "accept4", "bind", "connect", "getpeername", "getsockname", "getsockopt",
    "listen", "recvfrom", "recvmmsg", "recvmsg", "sendmmsg", "sendmsg", "sendto", "setsockopt",
    "shutdown", "socketpair",
    // System V and POSIX IPC
    "mq_getsetattr", "mq_notify", "mq_open", "mq_timedreceive", "mq_timedsend", "mq_unlink",
    "msgctl", "msgget", "msgrcv", "msgsnd", "semctl", "semget", "semop", "semtimedop", "shmat",
    "shmctl", "shmdt", "shmget",
    // The same calls under their i386 names (`int 0x80`: 16-bit-uid and 32-bit-offset
    // era variants, time64 variants, the socketcall and ipc multiplexers); x86_64 and
    // x32 have none of these, so they only count in the i386 section.
    "_llseek", "_newselect", "chown32", "clock_adjtime64", "clock_getres_time64",
    "clock_gettime64", "clock_nanosleep_time64", "fadvise64_64", "fchown32", "fcntl64",
    "fstat64", "fstatat64", "fstatfs64", "ftruncate64", "futex_time64", "getegid32",
    "geteuid32", "getgid32", "getgroups32", "getresgid32", "getresuid32", "getuid32",
    "io_pgetevents_time64", "ipc", "lchown32", "lstat64", "mmap2", "mq_timedreceive_time64",
    "mq_timedsend_time64", "ppoll_time64", "pselect6_time64", "recvmmsg_time64",
    "rt_sigtimedwait_time64", "sched_rr_get_interval_time64", "semtimedop_time64",
    "sendfile64", "setfsgid32", "setfsuid32", "setgid32", "setgroups32", "setregid32",
    "setresgid32", "setresuid32", "setreuid32", "setuid32", "sigprocmask", "sigreturn",
    "socketcall", "stat64", "statfs64", "timer_gettime64", "timer_settime64",
    "timerfd_gettime64", "timerfd_settime64", "truncate64", "ugetrlimit", "utimensat_time64",
    "waitpid",
];

/// Calls allowed only with a capability, by the capability.
#[rustfmt::skip]
const BY_CAPABILITY: &[(&str, &[&str])] = &[
    ("CAP_SYS_ADMIN", &[
        "bpf", "clone3", "fanotify_init", "fsconfig", "fsmount", "fsopen", "fspick",
        "lookup_dcookie", "mount", "mount_setattr", "move_mount", "open_tree", "perf_event_open",
        "quotactl", "quotactl_fd", "setdomainname", "sethostname", "setns", "syslog", "umount",
        "umount2", "unshare",
    ]),
    ("CAP_SYS_BOOT", &["reboot"]),
    ("CAP_SYS_CHROOT", &["chroot"]),
    ("CAP_SYS_MODULE", &["delete_module", "finit_module", "init_module"]),
    ("CAP_SYS_PACCT", &["acct"]),
    ("CAP_SYS_PTRACE", &["kcmp", "pidfd_getfd", "process_madvise"]),
    ("CAP_SYS_RAWIO", &["ioperm", "iopl"]),
    ("CAP_SYS_TIME", &["clock_settime", "clock_settime64", "settimeofday", "stime"]),
    ("CAP_SYS_TTY_CONFIG", &["vhangup"]),
    ("CAP_SYS_NICE", &["get_mempolicy", "mbind", "set_mempolicy", "set_mempolicy_home_node"]),
    ("CAP_SYSLOG", &["syslog"]),
    ("CAP_BPF", &["bpf"]),
    ("CAP_PERFMON", &["perf_event_open"]),
    ("CAP_DAC_READ_SEARCH", &["open_by_handle_at"]),
];

/// `AF_VSOCK`: host↔guest sockets, refused to containers.
const AF_VSOCK: u64 = 40;
/// `CLONE_NEWNS | CLONE_NEWCGROUP | CLONE_NEWUTS | CLONE_NEWIPC | CLONE_NEWUSER |
/// CLONE_NEWPID | CLONE_NEWNET`: the namespace flags `clone` may not carry.
const CLONE_NAMESPACES: u64 = 0x7e02_0000;
/// Personas `personality` may set: Linux, `UNAME26`, `ADDR_NO_RANDOMIZE`, both,
/// and the query `0xffffffff`.
const PERSONAS: [u64; 5] = [0x0, 0x8, 0x2_0000, 0x2_0008, 0xffff_ffff];

/// The built-in default profile for a container with the capabilities `caps`.
pub fn runtime_default(caps: &BTreeSet<String>) -> Value {
    let allow = |names: Vec<&str>| json!({"names": names, "action": "SCMP_ACT_ALLOW"});
    let mut syscalls = vec![allow(ALLOWED.to_vec())];
    syscalls.push(json!({
        "names": ["socket"],
        "action": "SCMP_ACT_ALLOW",
        "args": [{"index": 0, "value": AF_VSOCK, "op": "SCMP_CMP_NE"}],
    }));
    // Several checks of one argument: any of them (see the executor's seccomp.rs).
    syscalls.push(json!({
        "names": ["personality"],
        "action": "SCMP_ACT_ALLOW",
        "args": PERSONAS
            .iter()
            .map(|p| json!({"index": 0, "value": p, "op": "SCMP_CMP_EQ"}))
            .collect::<Vec<_>>(),
    }));
    let mut gated: BTreeSet<&str> = BTreeSet::new();
    for (cap, names) in BY_CAPABILITY {
        if caps.contains(*cap) {
            gated.extend(names.iter());
        }
    }
    if caps.contains("CAP_SYS_ADMIN") {
        gated.insert("clone");
    } else {
        syscalls.push(json!({
            "names": ["clone"],
            "action": "SCMP_ACT_ALLOW",
            "args": [{"index": 0, "value": CLONE_NAMESPACES, "valueTwo": 0, "op": "SCMP_CMP_MASKED_EQ"}],
        }));
        // clone3 passes its flags in memory the filter cannot read: ENOSYS makes libc
        // use clone.
        syscalls.push(json!({
            "names": ["clone3"],
            "action": "SCMP_ACT_ERRNO",
            "errnoRet": libc::ENOSYS,
        }));
    }
    if !gated.is_empty() {
        syscalls.push(allow(gated.into_iter().collect()));
    }
    json!({
        "defaultAction": "SCMP_ACT_ERRNO",
        "defaultErrnoRet": libc::EPERM,
        // As containerd's default: every ABI of the kernel (on amd64 32-bit (i386) and
        // x32 binaries) gets the same rules by its own numbers.
        "architectures": container::executor::seccomp_arches(),
        "syscalls": syscalls,
    })
}

/// Whether a Docker profile's `arches` entry names this node's architecture: by Go's
/// name (`amd64`, what Docker compares with), Rust's (`x86_64`) or libseccomp's
/// (`SCMP_ARCH_X86_64`, the native ABI's).
fn is_node_arch(a: &str) -> bool {
    a == image::platform::node().architecture
        || a == std::env::consts::ARCH
        || container::executor::seccomp_arches()
            .first()
            .is_some_and(|n| json!(n) == a)
}

/// A profile file on the node: OCI or Docker format, checked and converted to OCI.
fn localhost(path: &str, caps: &BTreeSet<String>) -> Result<Value> {
    let bad = |what: String| Error::InvalidArgument(format!("seccomp profile {path}: {what}"));
    if !Path::new(path).is_absolute() {
        return Err(bad("not an absolute path".into()));
    }
    let text = std::fs::read_to_string(path).map_err(|e| bad(e.to_string()))?;
    let v: Value = serde_json::from_str(&text).map_err(|e| bad(e.to_string()))?;
    let v = from_docker(v, caps, &kernel_version()).map_err(bad)?;
    // What the executor will parse: refused here, with the path, rather than later.
    let s: oci_spec::runtime::LinuxSeccomp =
        serde_json::from_value(v).map_err(|e| bad(e.to_string()))?;
    serde_json::to_value(s).map_err(|e| bad(e.to_string()))
}

/// The running kernel's (major, minor), for `minKernel`.
fn kernel_version() -> (u32, u32) {
    let r = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    parse_version(r.trim()).unwrap_or((0, 0))
}

fn parse_version(s: &str) -> Option<(u32, u32)> {
    let mut it = s.split(['.', '-']);
    let major = it.next()?.parse().ok()?;
    let minor = it.next().and_then(|m| m.parse().ok()).unwrap_or(0);
    Some((major, minor))
}

/// Docker's profile format → OCI's (an OCI profile passes through unchanged).
fn from_docker(
    v: Value,
    caps: &BTreeSet<String>,
    kernel: &(u32, u32),
) -> std::result::Result<Value, String> {
    let Value::Object(mut m) = v else {
        return Err("not a JSON object".into());
    };
    if let Some(Value::Array(arch_map)) = m.remove("archMap") {
        if !m.contains_key("architectures") {
            let mut archs = vec![];
            for a in arch_map {
                archs.extend(a.get("architecture").cloned());
                if let Some(Value::Array(sub)) = a.get("subArchitectures") {
                    archs.extend(sub.iter().cloned());
                }
            }
            m.insert("architectures".into(), Value::Array(archs));
        }
    }
    if let Some(Value::Array(list)) = m.remove("syscalls") {
        let mut out = vec![];
        for s in list {
            let Value::Object(mut s) = s else {
                return Err("a syscalls entry is not an object".into());
            };
            let includes = s.remove("includes");
            let excludes = s.remove("excludes");
            s.remove("comment");
            if !applies(includes.as_ref(), caps, kernel, true)?
                || applies(excludes.as_ref(), caps, kernel, false)?
            {
                continue;
            }
            if let Some(name) = s.remove("name") {
                let names = s.entry("names").or_insert_with(|| Value::Array(vec![]));
                match names {
                    Value::Array(a) => a.push(name),
                    _ => return Err("syscalls[].names is not a list".into()),
                }
            }
            out.push(Value::Object(s));
        }
        m.insert("syscalls".into(), Value::Array(out));
    }
    Ok(Value::Object(m))
}

/// Whether a Docker `includes` (`all` true: every listed condition must hold) or
/// `excludes` (`all` false: any listed condition excludes) filter matches.
fn applies(
    f: Option<&Value>,
    caps: &BTreeSet<String>,
    kernel: &(u32, u32),
    all: bool,
) -> std::result::Result<bool, String> {
    let Some(f) = f else {
        return Ok(all);
    };
    let empty = Map::new();
    let f = f.as_object().unwrap_or(&empty);
    let strings = |k: &str| -> Vec<String> {
        f.get(k)
            .and_then(|v| v.as_array())
            .map(|a| {
                a.iter()
                    .filter_map(|s| s.as_str().map(|s| s.to_string()))
                    .collect()
            })
            .unwrap_or_default()
    };
    let mut conds: Vec<bool> = vec![];
    let want_caps = strings("caps");
    if !want_caps.is_empty() {
        let has = |c: &String| caps.contains(c);
        conds.push(if all {
            want_caps.iter().all(has)
        } else {
            want_caps.iter().any(has)
        });
    }
    let arches = strings("arches");
    if !arches.is_empty() {
        conds.push(arches.iter().any(|a| is_node_arch(a)));
    }
    if let Some(k) = f.get("minKernel").and_then(|v| v.as_str()) {
        if !k.is_empty() {
            let min = parse_version(k).ok_or_else(|| format!("bad minKernel {k:?}"))?;
            conds.push(*kernel >= min);
        }
    }
    Ok(if all {
        conds.iter().all(|c| *c)
    } else {
        !conds.is_empty() && conds.iter().any(|c| *c)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use cri_api::{Capability, SecurityProfile};

    #[allow(deprecated)]
    fn sc(profile: Option<(ProfileType, &str)>, path: &str) -> LinuxContainerSecurityContext {
        LinuxContainerSecurityContext {
            seccomp: profile.map(|(t, r)| SecurityProfile {
                profile_type: t as i32,
                localhost_ref: r.into(),
            }),
            seccomp_profile_path: path.into(),
            ..Default::default()
        }
    }

    fn names(v: &Value) -> BTreeSet<String> {
        v["syscalls"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|s| s["action"] == "SCMP_ACT_ALLOW" && s.get("args").is_none())
            .flat_map(|s| s["names"].as_array().unwrap().iter())
            .map(|n| n.as_str().unwrap().to_string())
            .collect()
    }

    fn tmp(name: &str, body: &str) -> std::path::PathBuf {
        let p = std::env::temp_dir().join(format!("crust-seccomp-{}-{name}", std::process::id()));
        std::fs::write(&p, body).unwrap();
        p
    }

    #[test]
    fn profile_kinds_and_deprecated_paths() {
        assert_eq!(linux_seccomp(&sc(None, "")).unwrap(), None);
        assert_eq!(linux_seccomp(&sc(None, "unconfined")).unwrap(), None);
        assert_eq!(
            linux_seccomp(&sc(Some((ProfileType::Unconfined, "")), "")).unwrap(),
            None
        );
        let d = linux_seccomp(&sc(Some((ProfileType::RuntimeDefault, "")), "")).unwrap();
        assert_eq!(d.as_ref().unwrap()["defaultAction"], "SCMP_ACT_ERRNO");
        assert_eq!(linux_seccomp(&sc(None, "runtime/default")).unwrap(), d);
        assert_eq!(linux_seccomp(&sc(None, "docker/default")).unwrap(), d);
        assert!(matches!(
            linux_seccomp(&sc(None, "bogus")),
            Err(Error::InvalidArgument(_))
        ));
        // The default parses as the executor's input.
        let _: oci_spec::runtime::LinuxSeccomp = serde_json::from_value(d.unwrap()).unwrap();
    }

    #[test]
    fn the_default_gates_calls_on_capabilities() {
        let plain = runtime_default(&granted_caps(&sc(None, "")));
        let n = names(&plain);
        assert!(n.contains("read") && n.contains("execve") && n.contains("chroot"));
        for denied in [
            "unshare",
            "mount",
            "setns",
            "sethostname",
            "reboot",
            "kexec_load",
        ] {
            assert!(!n.contains(denied), "{denied}");
        }
        assert!(plain.to_string().contains("SCMP_CMP_MASKED_EQ"));
        let mut admin = sc(None, "");
        admin.capabilities = Some(Capability {
            add_capabilities: vec!["sys_admin".into()],
            drop_capabilities: vec!["ALL".into()],
            ..Default::default()
        });
        let a = runtime_default(&granted_caps(&admin));
        let n = names(&a);
        assert!(n.contains("unshare") && n.contains("clone") && n.contains("clone3"));
        assert!(!n.contains("chroot"), "dropped with ALL");
    }

    /// The default compiles for the three ABIs within the kernel's 4096 instructions,
    /// with the default capabilities and with every capability (the longest).
    #[test]
    fn the_default_fits_in_a_bpf_program() {
        let mut all = sc(None, "");
        all.capabilities = Some(Capability {
            add_capabilities: vec!["ALL".into()],
            ..Default::default()
        });
        for ctx in [sc(None, ""), all] {
            let v = runtime_default(&granted_caps(&ctx));
            assert_eq!(
                v["architectures"],
                json!(["SCMP_ARCH_X86_64", "SCMP_ARCH_X86", "SCMP_ARCH_X32"])
            );
            let s: oci_spec::runtime::LinuxSeccomp = serde_json::from_value(v.clone()).unwrap();
            let n = container::executor::seccomp_program_len(&s).unwrap();
            let mut only64 = v;
            only64["architectures"] = json!(["SCMP_ARCH_X86_64"]);
            let s: oci_spec::runtime::LinuxSeccomp = serde_json::from_value(only64).unwrap();
            let n64 = container::executor::seccomp_program_len(&s).unwrap();
            eprintln!("RuntimeDefault: {n} BPF instructions ({n64} for x86_64 alone)");
            assert!(n < 3000 && n64 < n, "{n} {n64}");
        }
    }

    #[test]
    fn localhost_files_oci_and_docker() {
        let oci = tmp(
            "oci.json",
            r#"{"defaultAction":"SCMP_ACT_ALLOW","syscalls":[{"names":["mkdir","mkdirat"],"action":"SCMP_ACT_ERRNO"}]}"#,
        );
        let v = linux_seccomp(&sc(
            Some((ProfileType::Localhost, oci.to_str().unwrap())),
            "",
        ))
        .unwrap()
        .unwrap();
        assert_eq!(v["syscalls"][0]["names"], json!(["mkdir", "mkdirat"]));
        let via_path = linux_seccomp(&sc(None, &format!("localhost/{}", oci.display()))).unwrap();
        assert_eq!(via_path, Some(v));

        let docker = tmp(
            "docker.json",
            r#"{"defaultAction":"SCMP_ACT_ERRNO","archMap":[{"architecture":"SCMP_ARCH_X86_64","subArchitectures":["SCMP_ARCH_X86"]}],
                "syscalls":[{"name":"read","action":"SCMP_ACT_ALLOW","args":[]},
                            {"names":["mount"],"action":"SCMP_ACT_ALLOW","includes":{"caps":["CAP_SYS_ADMIN"]}},
                            {"names":["write"],"action":"SCMP_ACT_ALLOW","excludes":{"caps":["CAP_SYS_ADMIN"]},"comment":"x"},
                            {"names":["old"],"action":"SCMP_ACT_ALLOW","includes":{"minKernel":"99.0"}},
                            {"names":["amd"],"action":"SCMP_ACT_ALLOW","includes":{"arches":["amd64"]}}]}"#,
        );
        let v = linux_seccomp(&sc(
            Some((ProfileType::Localhost, docker.to_str().unwrap())),
            "",
        ))
        .unwrap()
        .unwrap();
        assert_eq!(
            v["architectures"],
            json!(["SCMP_ARCH_X86_64", "SCMP_ARCH_X86"])
        );
        let all: Vec<&Value> = v["syscalls"].as_array().unwrap().iter().collect();
        let names: Vec<String> = all
            .iter()
            .map(|s| s["names"][0].as_str().unwrap().to_string())
            .collect();
        assert_eq!(names, ["read", "write", "amd"]);

        for (name, body) in [
            ("bad.json", "{not json"),
            ("act.json", r#"{"defaultAction":"SCMP_ACT_NOPE"}"#),
            ("arr.json", "[]"),
        ] {
            let p = tmp(name, body);
            let e = linux_seccomp(&sc(Some((ProfileType::Localhost, p.to_str().unwrap())), ""))
                .unwrap_err();
            assert!(
                matches!(&e, Error::InvalidArgument(m) if m.contains(p.to_str().unwrap())),
                "{e}"
            );
            std::fs::remove_file(p).unwrap();
        }
        let e = linux_seccomp(&sc(
            Some((ProfileType::Localhost, "/no/such/profile.json")),
            "",
        ))
        .unwrap_err();
        assert!(matches!(&e, Error::InvalidArgument(m) if m.contains("/no/such/profile.json")));
        assert!(matches!(
            linux_seccomp(&sc(None, "localhost/relative.json")),
            Err(Error::InvalidArgument(_))
        ));
        std::fs::remove_file(oci).unwrap();
        std::fs::remove_file(docker).unwrap();
    }

    #[test]
    fn kernel_versions_parse() {
        assert_eq!(parse_version("6.18.44-fc-v669"), Some((6, 18)));
        assert_eq!(parse_version("4.8"), Some((4, 8)));
        assert_eq!(parse_version("x"), None);
    }
}
