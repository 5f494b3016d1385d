//! Root tests of the pod sandbox's pause process and namespace pins
//! (`container::pause`, `container::ns`), as `crustd`'s RunPodSandbox uses them: a pause
//! in new net/IPC/UTS/PID namespaces with the pod's hostname, on an empty read-only root
//! of its own (nothing of the host's behind `/proc/PID/root`), its namespaces pinned by
//! bind mounts that outlive it, orphans of the pod reaped by it as PID 1, and stop and
//! unpin that can be repeated.
//!
//! Every pause is stopped and every pin removed by guards, also when a test panics. The
//! pause's network namespace is new and empty, so nothing here touches the host's.

use container::ns::{self, NsKind};
use container::pause::{self, Pause, PauseSpec};
use crust_e2e::{require_root, run, unique, TempDir};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

// ---------------------------------------------------------------------------------------
// Helpers

/// Stops the pause on drop.
struct Running(Pause);

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.stop(Duration::from_secs(2));
    }
}

/// Removes a pin on drop (before the TempDir holding it, which it must be declared after).
struct Pinned(PathBuf);

impl Drop for Pinned {
    fn drop(&mut self) {
        let _ = ns::unpin(&self.0);
    }
}

fn spawn(tmp: &TempDir, spec: PauseSpec) -> Running {
    let binary = pause::install(&tmp.path().join("bin")).expect("install pause");
    Running(pause::spawn(&PauseSpec { binary, ..spec }).expect("spawn pause"))
}

/// A line of `/proc/PID/status` without its `Key:` prefix, trimmed.
fn status_field(pid: i32, key: &str) -> String {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_else(|e| panic!("/proc/{pid}/status: {e}"));
    status
        .lines()
        .find_map(|l| l.strip_prefix(key)?.strip_prefix(':'))
        .unwrap_or_else(|| panic!("no {key} in /proc/{pid}/status"))
        .trim()
        .to_string()
}

/// `VmRSS` of a process in KiB.
fn rss_kib(pid: i32) -> u64 {
    let v = status_field(pid, "VmRSS");
    v.trim_end_matches("kB").trim().parse().unwrap()
}

/// The namespace a process is in, as `/proc/PID/ns/KIND` names it (`net:[4026531840]`).
fn ns_id(pid: &str, kind: NsKind) -> String {
    let p = format!("/proc/{pid}/ns/{}", kind.proc_name());
    std::fs::read_link(&p)
        .unwrap_or_else(|e| panic!("readlink {p}: {e}"))
        .to_string_lossy()
        .into_owned()
}

/// (pid, state) of every process whose parent is `parent`.
fn children_of(parent: i32) -> Vec<(i32, char)> {
    let mut v = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        let Some(rest) = stat.rfind(')').map(|i| &stat[i + 1..]) else {
            continue;
        };
        let mut f = rest.split_ascii_whitespace();
        let state = f.next().and_then(|s| s.chars().next()).unwrap_or('?');
        if f.next().and_then(|p| p.parse().ok()) == Some(parent) {
            v.push((pid, state));
        }
    }
    v
}

/// Runs a command and returns its stdout, panicking with its output on failure.
fn output(cmd: &mut Command) -> String {
    let out = run(cmd);
    assert!(
        out.status.success(),
        "{cmd:?} failed: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Interface names `ip` sees in the network namespace pinned at `pin`.
fn links_in(pin: &Path) -> Vec<String> {
    let out = output(
        Command::new("nsenter")
            .arg(format!("--net={}", pin.display()))
            .args(["ip", "-j", "link", "show"]),
    );
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    v.as_array()
        .unwrap()
        .iter()
        .map(|l| l["ifname"].as_str().unwrap().to_string())
        .collect()
}

/// The pause's root and cwd: an empty read-only tmpfs that is the only mount of its
/// own mount namespace, and `..` from either leads back to it; nothing of the host's
/// for a container process that may open `/proc/1/root` (CAP_SYS_PTRACE).
fn assert_empty_root(pid: i32) {
    use std::os::unix::fs::MetadataExt;
    let meta = |p: &str| std::fs::metadata(p).unwrap_or_else(|e| panic!("{p}: {e}"));
    let root = meta(&format!("/proc/{pid}/root"));
    assert_ne!(
        root.dev(),
        meta("/").dev(),
        "the pause's root is the host's"
    );
    for p in ["root", "cwd", "root/..", "root/../..", "cwd/.."] {
        let p = format!("/proc/{pid}/{p}");
        let m = meta(&p);
        assert_eq!((m.dev(), m.ino()), (root.dev(), root.ino()), "{p}");
        let names: Vec<_> = std::fs::read_dir(&p).unwrap().flatten().collect();
        assert!(names.is_empty(), "{p} lists {names:?}");
    }
    let mountinfo = std::fs::read_to_string(format!("/proc/{pid}/mountinfo")).unwrap();
    let mounts: Vec<&str> = mountinfo.lines().collect();
    assert_eq!(mounts.len(), 1, "the pause's mounts: {mountinfo}");
    let w: Vec<&str> = mounts[0].split_whitespace().collect();
    assert_eq!((w[3], w[4]), ("/", "/"), "{mountinfo}");
    assert!(w[5].starts_with("ro,"), "{mountinfo}");
    assert!(mounts[0].contains(" - tmpfs "), "{mountinfo}");
    let err = std::fs::File::create(format!("/proc/{pid}/root/x")).unwrap_err();
    assert_eq!(err.raw_os_error(), Some(libc::EROFS), "{err}");
    let mnt = |p: String| std::fs::read_link(p).unwrap();
    assert_ne!(
        mnt(format!("/proc/{pid}/ns/mnt")),
        mnt("/proc/self/ns/mnt".into())
    );
}

/// A pod's user namespace as `container::userns` makes it: 65536 ids from container 0,
/// mapped to `uid` and `gid` on the host.
fn pod_userns(uid: u32, gid: u32) -> std::os::fd::OwnedFd {
    use container::userns::IdMap;
    let map = |h| IdMap {
        container_id: 0,
        host_id: h,
        size: 65536,
    };
    container::userns::create(&[map(uid)], &[map(gid)]).expect("userns")
}

fn pod_spec(hostname: &str) -> PauseSpec {
    PauseSpec {
        binary: PathBuf::new(),
        hostname: Some(hostname.to_string()),
        new_net: true,
        new_ipc: true,
        new_uts: true,
        new_pid: true,
        cgroup_dirs: vec![],
        userns_fd: None,
        keep_root: false,
        mount_ns: None,
    }
}

// ---------------------------------------------------------------------------------------
// Tests

/// RunPodSandbox's path through this crate, then StopPodSandbox and RemovePodSandbox.
#[test]
fn pod_pause_holds_new_namespaces_and_pins_outlive_it() {
    if !require_root(&["ip", "nsenter"]) {
        return;
    }
    let tmp = TempDir::new("pause");
    let hostname = unique("pod-");
    let running = spawn(&tmp, pod_spec(&hostname));
    let p = running.0;
    let pid = p.pid.to_string();
    assert!(p.alive());
    assert!(pause::alive(p.pid, p.start_time));

    for kind in NsKind::ALL {
        assert_ne!(ns_id(&pid, kind), ns_id("self", kind), "{kind} namespace");
    }
    let seen = output(Command::new("nsenter").args(["--uts", "--target", &pid, "hostname"]));
    assert_eq!(seen.trim(), hostname);
    let nspid = status_field(p.pid, "NSpid");
    assert!(
        nspid.ends_with("\t1"),
        "NSpid {nspid:?}: not PID 1 of its namespace"
    );
    assert_ne!(
        status_field(p.pid, "PPid"),
        std::process::id().to_string(),
        "the launcher must have let the pause go"
    );
    assert_empty_root(p.pid);
    let rss = rss_kib(p.pid);
    println!("pause VmRSS: {rss} KiB");
    eprintln!("pause VmRSS: {rss} KiB");
    assert!(rss < 512, "pause VmRSS {rss} KiB");

    // Pins, named as crustd names them.
    let pins = tmp.path().join("pins");
    let net = Pinned(pins.join("net"));
    let uts = Pinned(pins.join("uts"));
    let ipc = Pinned(pins.join("ipc"));
    let pidns = Pinned(pins.join("pid"));
    for (kind, pin) in [
        (NsKind::Net, &net),
        (NsKind::Uts, &uts),
        (NsKind::Ipc, &ipc),
        (NsKind::Pid, &pidns),
    ] {
        ns::pin(p.pid, kind, &pin.0).unwrap();
        assert!(ns::is_pinned(&pin.0), "{kind}");
    }
    let again = ns::pin(p.pid, NsKind::Net, &net.0).unwrap_err().to_string();
    assert!(again.contains(&net.0.display().to_string()), "{again}");
    assert_eq!(links_in(&net.0), ["lo"]);

    // StopPodSandbox: the pause goes; the pins keep the namespaces.
    p.stop(Duration::from_secs(5)).unwrap();
    assert!(!p.alive());
    pause::stop(p.pid, p.start_time, Duration::from_secs(1)).expect("stop of a dead pause");
    for pin in [&net, &uts, &ipc, &pidns] {
        assert!(
            ns::is_pinned(&pin.0),
            "{} gone with the pause",
            pin.0.display()
        );
    }
    assert_eq!(links_in(&net.0), ["lo"]);
    let seen = output(
        Command::new("nsenter")
            .arg(format!("--uts={}", uts.0.display()))
            .arg("hostname"),
    );
    assert_eq!(seen.trim(), hostname);

    // RemovePodSandbox, twice.
    for pin in [&net, &uts, &ipc, &pidns] {
        ns::unpin(&pin.0).unwrap();
        assert!(!ns::is_pinned(&pin.0));
        assert!(!pin.0.exists());
        ns::unpin(&pin.0).unwrap();
    }
}

/// As PID 1 of the pod's PID namespace the pause inherits the pod's orphans and must
/// reap them, or they stay zombies until the sandbox goes.
#[test]
fn pod_pause_reaps_orphans_of_its_pid_namespace() {
    if !require_root(&["ip", "nsenter", "sh", "sleep"]) {
        return;
    }
    let tmp = TempDir::new("pausereap");
    let running = spawn(&tmp, pod_spec(&unique("pod-")));
    let p = running.0;
    assert!(children_of(p.pid).is_empty());

    // sh starts a background sleep and exits: the sleep is orphaned and reparented to
    // the namespace's init, the pause. Two of them, since one SIGCHLD may stand for both.
    // Their stdout is not nsenter's pipe, or reading it would wait until they exit.
    let out = output(Command::new("nsenter").args([
        "--target",
        &p.pid.to_string(),
        "--pid",
        "--",
        "sh",
        "-c",
        "exec </dev/null; sleep 1 >/dev/null 2>&1 & sleep 1.2 >/dev/null 2>&1 & echo $!",
    ]));
    assert_eq!(
        out.trim().parse::<i32>().ok().map(|n| n > 1),
        Some(true),
        "{out}"
    );
    let orphans = children_of(p.pid);
    assert_eq!(orphans.len(), 2, "orphans under the pause: {orphans:?}");

    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let left = children_of(p.pid);
        if left.is_empty() {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "children of the pause not reaped: {left:?}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(p.alive(), "reaping must not end the pause");
    p.stop(Duration::from_secs(5)).unwrap();
    assert!(!p.alive());
}

/// `hostPID: true` pods: no PID namespace of their own; the rest stays.
#[test]
fn pause_in_the_host_pid_namespace() {
    if !require_root(&["ip", "nsenter"]) {
        return;
    }
    let tmp = TempDir::new("pausehostpid");
    let hostname = unique("pod-");
    let running = spawn(
        &tmp,
        PauseSpec {
            new_pid: false,
            ..pod_spec(&hostname)
        },
    );
    let p = running.0;
    let pid = p.pid.to_string();
    assert!(p.alive());
    assert_eq!(ns_id(&pid, NsKind::Pid), ns_id("self", NsKind::Pid));
    assert_ne!(ns_id(&pid, NsKind::Net), ns_id("self", NsKind::Net));
    assert_eq!(status_field(p.pid, "NSpid"), pid, "one PID namespace, ours");
    assert_empty_root(p.pid);
    assert_ne!(status_field(p.pid, "PPid"), std::process::id().to_string());
    let seen = output(Command::new("nsenter").args(["--uts", "--target", &pid, "hostname"]));
    assert_eq!(seen.trim(), hostname);

    let net = Pinned(tmp.path().join("net"));
    ns::pin(p.pid, NsKind::Net, &net.0).unwrap();
    assert_eq!(links_in(&net.0), ["lo"]);
    p.stop(Duration::from_secs(5)).unwrap();
    assert!(!p.alive());
    assert!(ns::is_pinned(&net.0));
    ns::unpin(&net.0).unwrap();
    ns::unpin(&net.0).unwrap();
    assert!(!net.0.exists());
}

/// A hostNetwork pod's hostname must not rename the node: without a new UTS namespace
/// the hostname is ignored.
#[test]
fn hostname_without_new_uts_namespace_is_ignored() {
    if !require_root(&["ip"]) {
        return;
    }
    let tmp = TempDir::new("pausehostuts");
    let before = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap();
    let running = spawn(
        &tmp,
        PauseSpec {
            new_uts: false,
            ..pod_spec(&unique("pod-"))
        },
    );
    let pid = running.0.pid.to_string();
    assert_eq!(ns_id(&pid, NsKind::Uts), ns_id("self", NsKind::Uts));
    let after = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap();
    if after != before {
        // Put the node's name back before failing.
        let _ = std::fs::write("/proc/sys/kernel/hostname", before.trim_end());
    }
    assert_eq!(after, before, "the pause renamed the node");
}

/// As crustd starts pauses: every pod's pause joins the one empty-root mount namespace
/// `empty_root_ns` made (the pause that made it is gone), instead of copying the
/// host's mount table each time; a user-namespaced pod's pause still makes its own;
/// an fd that is not a mount namespace fails the spawn with the step named.
#[test]
fn pauses_share_one_empty_root_mount_namespace() {
    if !require_root(&[]) {
        return;
    }
    let tmp = TempDir::new("pause-shared-root");
    let binary = pause::install(&tmp.path().join("bin")).expect("install pause");
    let ns = pause::empty_root_ns(&binary).expect("the shared empty root");
    let raw = std::os::fd::AsRawFd::as_raw_fd(&ns);
    let shared = std::fs::read_link(format!("/proc/self/fd/{raw}")).unwrap();
    let with_ns = |hostname: &str| PauseSpec {
        mount_ns: Some(raw),
        ..pod_spec(hostname)
    };
    let a = spawn(&tmp, with_ns("pod-a"));
    let b = spawn(&tmp, with_ns("pod-b"));
    for p in [a.0.pid, b.0.pid] {
        assert_empty_root(p);
        assert_eq!(
            std::fs::read_link(format!("/proc/{p}/ns/mnt")).unwrap(),
            shared
        );
    }
    assert_ne!(
        ns_id(&a.0.pid.to_string(), NsKind::Net),
        ns_id(&b.0.pid.to_string(), NsKind::Net)
    );

    let userns = pod_userns(310000, 410000);
    let u = spawn(
        &tmp,
        PauseSpec {
            userns_fd: Some(std::os::fd::AsRawFd::as_raw_fd(&userns)),
            ..with_ns("userns-pod")
        },
    );
    assert_empty_root(u.0.pid);
    assert_ne!(
        std::fs::read_link(format!("/proc/{}/ns/mnt", u.0.pid)).unwrap(),
        shared
    );

    // A network namespace's fd where a mount namespace's belongs.
    let net = std::fs::File::open("/proc/self/ns/net").unwrap();
    let err = pause::spawn(&PauseSpec {
        binary,
        mount_ns: Some(std::os::fd::AsRawFd::as_raw_fd(&net)),
        ..pod_spec("pod-c")
    })
    .unwrap_err()
    .to_string();
    assert!(err.contains("join the empty-root mount namespace"), "{err}");
}

#[test]
fn spawn_of_a_missing_binary_names_it() {
    if !require_root(&["ip"]) {
        return;
    }
    let tmp = TempDir::new("pausemissing");
    let binary = tmp.path().join("no-such-pause");
    let err = pause::spawn(&PauseSpec {
        binary: binary.clone(),
        ..pod_spec("pod")
    })
    .unwrap_err()
    .to_string();
    assert!(err.contains(&binary.display().to_string()), "{err}");
    assert!(err.contains("exec"), "{err}");
}

/// A pod with its own user namespace (`hostUsers: false`): the pause enters the
/// namespace `container::userns` made, as its root (the mapped host ids), before it
/// makes the pod's namespaces, which that namespace then owns; pinned, it outlives the
/// pause like the others.
#[test]
fn pause_in_a_user_namespace() {
    if !require_root(&[]) {
        return;
    }
    let tmp = TempDir::new("pause-userns");
    let userns = pod_userns(300000, 400000);
    let p = spawn(
        &tmp,
        PauseSpec {
            userns_fd: Some(std::os::fd::AsRawFd::as_raw_fd(&userns)),
            ..pod_spec("userns-pod")
        },
    );
    let pid = p.0.pid;
    assert_eq!(status_field(pid, "Uid"), "300000\t300000\t300000\t300000");
    assert_eq!(status_field(pid, "Gid"), "400000\t400000\t400000\t400000");
    assert_eq!(status_field(pid, "Groups"), "");
    let uid_map = std::fs::read_to_string(format!("/proc/{pid}/uid_map")).unwrap();
    assert_eq!(
        uid_map.split_whitespace().collect::<Vec<_>>(),
        ["0", "300000", "65536"]
    );
    let link = |p: String| std::fs::read_link(p).unwrap();
    assert_ne!(
        link(format!("/proc/{pid}/ns/user")),
        link("/proc/self/ns/user".into())
    );
    assert_ne!(
        link(format!("/proc/{pid}/ns/net")),
        link("/proc/self/ns/net".into())
    );
    // The pod's hostname was set in the UTS namespace the user namespace owns.
    let out = run(Command::new("nsenter")
        .arg("-t")
        .arg(pid.to_string())
        .args(["-u", "hostname"]));
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "userns-pod");
    // Its mount namespace, made as the user namespace's root, is on the empty root too.
    assert_empty_root(pid);

    let pin = tmp.path().join("pins/user");
    let _pinned = Pinned(pin.clone());
    ns::pin(pid, NsKind::User, &pin).expect("pin the user namespace");
    p.0.stop(Duration::from_secs(2)).unwrap();
    assert!(ns::is_pinned(&pin));
    ns::unpin(&pin).unwrap();
    assert!(!pin.exists());
}
