//! Root tests of the OCI executor (`container::executor`): a busybox-static rootfs and
//! an OCI spec become a process with the create/start split. Exit codes and output,
//! the gate, env/cwd/user/umask, namespaces new and joined, /proc in a new PID
//! namespace, read-only root, masked and read-only paths, capabilities,
//! no_new_privs, the fds a container sees, errors that name the failing step, a
//! symlinked mount target that must not escape the rootfs, and kill.
//!
//! Every container is force-deleted (killed and reaped) by a guard, every temp dir and
//! netns removed by theirs, also when a test panics. Containers get new network
//! namespaces (or one the test made), so nothing here touches the host's network.

use std::os::fd::AsRawFd;
use std::os::unix::fs::MetadataExt;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use container::executor::oci_spec::runtime::{
    Capability, LinuxCapabilitiesBuilder, LinuxDeviceBuilder, LinuxDeviceType, LinuxNamespace,
    LinuxNamespaceBuilder, LinuxNamespaceType, MountBuilder, Spec,
};
use container::executor::RootfsMount;
use container::executor::{self, Container, Status};
use container::pause::{self, PauseSpec};
use crust_e2e::bundle::{bind, Bundle, Guard};
use crust_e2e::{require_root, unique, Netns};

// ---------------------------------------------------------------------------------------
// Helpers

fn ns(typ: LinuxNamespaceType, path: Option<&Path>) -> LinuxNamespace {
    let b = LinuxNamespaceBuilder::default().typ(typ);
    match path {
        Some(p) => b.path(p).build().unwrap(),
        None => b.build().unwrap(),
    }
}

fn set_namespaces(spec: &mut Spec, namespaces: Vec<LinuxNamespace>) {
    let mut linux = spec.linux().clone().unwrap();
    linux.set_namespaces(Some(namespaces));
    spec.set_linux(Some(linux));
}

/// A line of /proc/self/status as the container printed it, without the key.
fn status_line<'a>(out: &'a str, key: &str) -> &'a str {
    out.lines()
        .find_map(|l| l.strip_prefix(key)?.strip_prefix(':'))
        .unwrap_or_else(|| panic!("no {key} in {out}"))
        .trim()
}

// ---------------------------------------------------------------------------------------
// Tests

#[test]
fn exit_code_stdout_and_stderr() {
    if !require_root(&["busybox"]) {
        return;
    }
    let b = Bundle::new("exec-exit");
    let (status, out, err) = b.run(b.spec(&["/bin/sh", "-c", "echo hello; echo oops >&2; exit 7"]));
    assert_eq!(status.code(), Some(7));
    assert_eq!(out, "hello\n");
    assert_eq!(err, "oops\n");
    // The PATH of the spec's env finds a bare name.
    let (status, _, _) = b.run(b.spec(&["true"]));
    assert_eq!(status.code(), Some(0));
}

#[test]
fn create_waits_at_the_gate_until_start() {
    if !require_root(&["busybox"]) {
        return;
    }
    let b = Bundle::new("exec-gate");
    let marker = b.out().join("marker");
    let (id, mut g) = b.create(b.spec(&["/bin/sh", "-c", "echo started > /out/marker"]));
    let c = g.get().clone();
    assert_eq!(c.status(), Status::Created);
    assert!(c.alive(), "the init exists after create");
    std::thread::sleep(Duration::from_millis(200));
    assert!(!marker.exists(), "the command ran before start");
    assert_eq!(c.status(), Status::Created);

    // Another process would load the container from its state dir and start it.
    let mut loaded = Container::load(&b.state_dir(&id)).unwrap();
    assert_eq!(loaded, c);
    loaded.start().unwrap();
    assert!(loaded.started.is_some());
    let msg = loaded.start().unwrap_err().to_string();
    assert!(msg.contains("cannot start"), "{msg}");
    let status = g.get().wait().unwrap();
    assert_eq!(status.code(), Some(0));
    assert_eq!(std::fs::read_to_string(&marker).unwrap(), "started\n");
    assert_eq!(c.status(), Status::Stopped);

    let state_dir = b.state_dir(&id);
    g.0.take().unwrap().delete(false).unwrap();
    assert!(!state_dir.exists());
}

#[test]
fn env_cwd_user_groups_and_umask() {
    if !require_root(&["busybox"]) {
        return;
    }
    let b = Bundle::new("exec-user");
    let mut spec = b.spec(&[
        "/bin/sh",
        "-c",
        "echo $FOO; pwd; id -u; id -g; id -G; umask; touch /out/made",
    ]);
    let mut p = spec.process().clone().unwrap();
    let mut env = p.env().clone().unwrap();
    env.push("FOO=bar baz".into());
    p.set_env(Some(env));
    p.set_cwd("/work/dir".into());
    let mut user = p.user().clone();
    user.set_uid(1000);
    user.set_gid(1001);
    user.set_additional_gids(Some(vec![5, 27]));
    user.set_umask(Some(0o077));
    p.set_user(user);
    spec.set_process(Some(p));
    let out = b.sh(spec);
    assert_eq!(
        out.lines().collect::<Vec<_>>(),
        ["bar baz", "/work/dir", "1000", "1001", "1001 5 27", "0077"]
    );
    let made = std::fs::metadata(b.out().join("made")).unwrap();
    assert_eq!(made.mode() & 0o777, 0o600, "umask 077 applied");
    assert_eq!((made.uid(), made.gid()), (1000, 1001));
    // The missing cwd was created in the rootfs.
    assert!(b.rootfs().join("work/dir").is_dir());
}

#[test]
fn hostname_in_a_new_uts_namespace() {
    if !require_root(&["busybox"]) {
        return;
    }
    let b = Bundle::new("exec-uts");
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap();
    let mut spec = b.spec(&["/bin/hostname"]);
    spec.set_hostname(Some("crust-box".into()));
    assert_eq!(b.sh(spec), "crust-box\n");
    assert_eq!(
        std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap(),
        host
    );
}

#[test]
fn joins_an_existing_network_namespace() {
    if !require_root(&["busybox", "ip"]) {
        return;
    }
    let b = Bundle::new("exec-netns");
    let netns = Netns::new("exn");
    let ino = std::fs::metadata(netns.path()).unwrap().ino();
    let mut spec = b.spec(&["/bin/readlink", "/proc/self/ns/net"]);
    set_namespaces(
        &mut spec,
        vec![
            ns(LinuxNamespaceType::Pid, None),
            ns(LinuxNamespaceType::Network, Some(&netns.path())),
            ns(LinuxNamespaceType::Ipc, None),
            ns(LinuxNamespaceType::Uts, None),
            ns(LinuxNamespaceType::Mount, None),
        ],
    );
    assert_eq!(b.sh(spec), format!("net:[{ino}]\n"));
}

/// Stops the pause on drop.
struct PauseGuard(container::Pause);

impl Drop for PauseGuard {
    fn drop(&mut self) {
        let _ = self.0.stop(Duration::from_secs(2));
    }
}

#[test]
fn joins_a_pods_namespaces_including_pid() {
    if !require_root(&["busybox"]) {
        return;
    }
    let b = Bundle::new("exec-pod");
    let binary = pause::install(&b.tmp.path().join("bin")).unwrap();
    let pod = PauseGuard(
        pause::spawn(&PauseSpec {
            binary,
            hostname: Some("the-pod".into()),
            new_net: true,
            new_ipc: true,
            new_uts: true,
            new_pid: true,
            ..Default::default()
        })
        .unwrap(),
    );
    let ns_path = |kind: &str| PathBuf::from(format!("/proc/{}/ns/{kind}", pod.0.pid));
    let mut spec = b.spec(&[
        "/bin/sh",
        "-c",
        "cat /proc/1/comm; hostname; echo $$; \
         for n in net ipc uts pid; do readlink /proc/self/ns/$n; done",
    ]);
    // The pod's hostname wins: the spec's is not set in a joined UTS namespace.
    spec.set_hostname(Some("ignored".into()));
    set_namespaces(
        &mut spec,
        vec![
            ns(LinuxNamespaceType::Network, Some(&ns_path("net"))),
            ns(LinuxNamespaceType::Ipc, Some(&ns_path("ipc"))),
            ns(LinuxNamespaceType::Uts, Some(&ns_path("uts"))),
            ns(LinuxNamespaceType::Pid, Some(&ns_path("pid"))),
            ns(LinuxNamespaceType::Mount, None),
        ],
    );
    let out = b.sh(spec);
    let lines: Vec<&str> = out.lines().collect();
    // /proc is the pod's PID namespace: its pid 1 is the pause.
    assert_eq!(lines[..2], ["crust-pause", "the-pod"], "{out}");
    assert_ne!(
        lines[2], "1",
        "the container is not the namespace's init: {out}"
    );
    for (i, kind) in ["net", "ipc", "uts", "pid"].into_iter().enumerate() {
        let want = std::fs::read_link(ns_path(kind)).unwrap();
        assert_eq!(lines[3 + i], want.to_str().unwrap(), "{kind}: {out}");
    }
}

#[test]
fn rootfs_from_an_overlay_mounted_in_the_container() {
    if !require_root(&["busybox"]) {
        return;
    }
    let b = Bundle::new("exec-ovl");
    let (upper, work) = (b.tmp.path().join("upper"), b.tmp.path().join("work"));
    std::fs::create_dir_all(&upper).unwrap();
    std::fs::create_dir_all(&work).unwrap();
    let mut spec = b.spec(&["/bin/sh", "-c", "echo new > /written; cat /written"]);
    spec.set_root(Some(
        container::executor::oci_spec::runtime::RootBuilder::default()
            .path("rootfs")
            .readonly(false)
            .build()
            .unwrap(),
    ));
    let id = unique("ovl");
    let mut opts = b.opts(&id, spec);
    opts.rootfs_mount = Some(RootfsMount {
        fstype: "overlay".into(),
        source: "overlay".into(),
        options: vec![format!(
            "lowerdir={},upperdir={},workdir={}",
            b.rootfs().display(),
            upper.display(),
            work.display()
        )],
    });
    let mut g = Guard(Some(executor::create(opts).unwrap()));
    g.get().start().unwrap();
    assert_eq!(g.get().wait().unwrap().code(), Some(0));
    assert_eq!(
        std::fs::read_to_string(upper.join("written")).unwrap(),
        "new\n"
    );
    assert!(
        !b.rootfs().join("written").exists(),
        "the lower layer was written"
    );
    // The overlay lived in the container's mount namespace only.
    let mounts = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    assert!(!mounts.contains(&upper.display().to_string()), "{mounts}");
}

#[test]
fn proc_shows_only_the_containers_pid_namespace() {
    if !require_root(&["busybox"]) {
        return;
    }
    let b = Bundle::new("exec-pid");
    let out = b.sh(b.spec(&[
        "/bin/sh",
        "-c",
        "echo $$; cat /proc/1/comm; ls /proc | grep -c '^[0-9]'",
    ]));
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines[..2], ["1", "sh"], "{out}");
    // sh itself, ls and grep: nothing of the host's.
    let n: u32 = lines[2].parse().unwrap();
    assert!((2..=3).contains(&n), "{n} processes in /proc: {out}");
}

/// The hierarchies the host mounts under /sys/fs/cgroup, sorted (symlinks included).
fn host_cgroup_entries() -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir("/sys/fs/cgroup")
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

#[test]
fn dev_and_cgroup_mounts() {
    if !require_root(&["busybox"]) {
        return;
    }
    let b = Bundle::new("exec-dev");
    let script = "for d in null zero full random urandom tty pts/ptmx; do \
                    [ -c /dev/$d ] || echo no-$d; done; \
                  for l in ptmx fd stdin stdout stderr; do readlink /dev/$l; done; \
                  [ -d /dev/shm ] && [ -d /dev/mqueue ] && echo dirs; \
                  echo x > /dev/null && echo null-writable; \
                  ls -ln /dev/custom/null2; \
                  echo cgroup: $(ls /sys/fs/cgroup); \
                  [ -e /sys/fs/cgroup/memory/memory.limit_in_bytes ] \
                    || [ -e /sys/fs/cgroup/cgroup.controllers ] && echo cgroup-files; \
                  touch /sys/fs/cgroup/x 2>&1; touch /sys/x 2>&1; true";
    // v1 (these machines): the container sees a tmpfs with the host's hierarchies.
    let v1 = Path::new("/sys/fs/cgroup/memory").is_dir();
    let host = host_cgroup_entries().join(" ");
    let expect = |out: &str| {
        let mut lines: Vec<&str> = out.lines().collect();
        assert_eq!(lines.len(), 12, "{out}");
        let dev: Vec<&str> = lines.remove(7).split_whitespace().collect();
        // A spec device: char 1:3, mode 0600, owned by 1000:1001.
        assert_eq!(
            dev[..6],
            ["crw-------", "1", "1000", "1001", "1,", "3"],
            "{out}"
        );
        assert_eq!(
            lines[..7],
            [
                "pts/ptmx",
                "/proc/self/fd",
                "/proc/self/fd/0",
                "/proc/self/fd/1",
                "/proc/self/fd/2",
                "dirs",
                "null-writable"
            ],
            "{out}"
        );
        if v1 {
            assert_eq!(lines[7], format!("cgroup: {host}"), "{out}");
        }
        assert_eq!(lines[8], "cgroup-files", "{out}");
        for l in &lines[9..] {
            assert!(l.contains("Read-only file system"), "{out}");
        }
    };
    let with_device = |mut spec: Spec| {
        let mut linux = spec.linux().clone().unwrap();
        linux.set_devices(Some(vec![LinuxDeviceBuilder::default()
            .path("/dev/custom/null2")
            .typ(LinuxDeviceType::C)
            .major(1)
            .minor(3)
            .file_mode(0o600u32)
            .uid(1000u32)
            .gid(1001u32)
            .build()
            .unwrap()]));
        spec.set_linux(Some(linux));
        spec
    };
    // The default spec: a cgroup namespace of its own, each hierarchy mounted.
    expect(&b.sh(with_device(b.spec(&["/bin/sh", "-c", script]))));
    // Without one: the container's own cgroup directories, bound read-only.
    let mut spec = with_device(b.spec(&["/bin/sh", "-c", script]));
    set_namespaces(
        &mut spec,
        vec![
            ns(LinuxNamespaceType::Pid, None),
            ns(LinuxNamespaceType::Network, None),
            ns(LinuxNamespaceType::Mount, None),
        ],
    );
    expect(&b.sh(spec));
}

#[test]
fn read_only_root_masked_and_read_only_paths() {
    if !require_root(&["busybox"]) {
        return;
    }
    let b = Bundle::new("exec-ro");
    std::fs::write(b.rootfs().join("secret"), "s3cret\n").unwrap();
    std::fs::create_dir_all(b.rootfs().join("secretdir")).unwrap();
    std::fs::write(b.rootfs().join("secretdir/file"), "x").unwrap();
    let mut spec = b.spec(&[
        "/bin/sh",
        "-c",
        "touch /x 2>&1 && echo root-writable; \
         cat /proc/kcore | wc -c; cat /secret | wc -c; ls /secretdir | wc -l; \
         touch /data/x 2>&1 && echo data-writable; \
         touch /scratch/x && echo scratch-writable",
    ]);
    let tmpfs = |dest: &str| {
        MountBuilder::default()
            .destination(dest)
            .typ("tmpfs")
            .source("tmpfs")
            .options(vec!["nosuid".to_string(), "nodev".to_string()])
            .build()
            .unwrap()
    };
    let mut mounts = spec.mounts().clone().unwrap();
    mounts.push(tmpfs("/data"));
    mounts.push(tmpfs("/scratch"));
    spec.set_mounts(Some(mounts));
    let mut linux = spec.linux().clone().unwrap();
    let mut masked = linux.masked_paths().clone().unwrap();
    masked.extend(["/secret".to_string(), "/secretdir".to_string()]);
    linux.set_masked_paths(Some(masked));
    let mut ro = linux.readonly_paths().clone().unwrap();
    ro.push("/data".into());
    linux.set_readonly_paths(Some(ro));
    spec.set_linux(Some(linux));
    assert!(spec.root().as_ref().unwrap().readonly().unwrap());

    let out = b.sh(spec);
    let lines: Vec<&str> = out.lines().collect();
    assert!(lines[0].contains("Read-only file system"), "{out}");
    assert_eq!(
        lines[1..4],
        ["0", "0", "0"],
        "masked paths are empty: {out}"
    );
    assert!(lines[4].contains("Read-only file system"), "{out}");
    assert_eq!(lines[5], "scratch-writable", "{out}");
    assert!(!b.rootfs().join("x").exists());
}

#[test]
fn capabilities_and_no_new_privs() {
    if !require_root(&["busybox"]) {
        return;
    }
    let b = Bundle::new("exec-caps");
    let script = &["/bin/grep", "-E", "^(Cap|NoNewPrivs)", "/proc/self/status"];
    let set = |caps: &[Capability]| {
        caps.iter()
            .copied()
            .collect::<std::collections::HashSet<_>>()
    };
    let three = set(&[Capability::Chown, Capability::Kill, Capability::NetRaw]);

    // Root with a reduced set: effective = permitted = bounding = the three.
    let mut spec = b.spec(script);
    let mut p = spec.process().clone().unwrap();
    p.set_capabilities(Some(
        LinuxCapabilitiesBuilder::default()
            .bounding(three.clone())
            .effective(three.clone())
            .permitted(three.clone())
            .inheritable(set(&[]))
            .ambient(set(&[]))
            .build()
            .unwrap(),
    ));
    spec.set_process(Some(p));
    let out = b.sh(spec);
    // CHOWN (0), KILL (5), NET_RAW (13).
    assert_eq!(status_line(&out, "CapEff"), "0000000000002021", "{out}");
    assert_eq!(status_line(&out, "CapPrm"), "0000000000002021", "{out}");
    assert_eq!(status_line(&out, "CapBnd"), "0000000000002021", "{out}");
    assert_eq!(status_line(&out, "CapInh"), "0000000000000000", "{out}");
    assert_eq!(status_line(&out, "NoNewPrivs"), "1", "{out}");

    // A non-root user keeps only what is ambient; no_new_privs off.
    let mut spec = b.spec(script);
    let mut p = spec.process().clone().unwrap();
    let raw = set(&[Capability::NetRaw]);
    p.set_capabilities(Some(
        LinuxCapabilitiesBuilder::default()
            .bounding(three.clone())
            .effective(raw.clone())
            .permitted(raw.clone())
            .inheritable(raw.clone())
            .ambient(raw.clone())
            .build()
            .unwrap(),
    ));
    p.set_no_new_privileges(Some(false));
    let mut user = p.user().clone();
    user.set_uid(1000);
    user.set_gid(1000);
    p.set_user(user);
    spec.set_process(Some(p));
    let out = b.sh(spec);
    assert_eq!(status_line(&out, "CapEff"), "0000000000002000", "{out}");
    assert_eq!(status_line(&out, "CapAmb"), "0000000000002000", "{out}");
    assert_eq!(status_line(&out, "CapBnd"), "0000000000002021", "{out}");
    assert_eq!(status_line(&out, "NoNewPrivs"), "0", "{out}");
}

#[test]
fn only_fds_0_1_2_reach_the_container() {
    if !require_root(&["busybox"]) {
        return;
    }
    let b = Bundle::new("exec-fds");
    // A descriptor of the test process without close-on-exec: it must not leak.
    let f = std::fs::File::open("/etc/hostname").unwrap();
    // SAFETY: dup of an fd we own; closed below.
    let leaked = unsafe { libc::dup(f.as_raw_fd()) };
    assert!(leaked > 2);
    let out = b.sh(b.spec(&["/bin/ls", "-l", "/proc/self/fd"]));
    // SAFETY: closing the fd we made.
    unsafe { libc::close(leaked) };
    // `ls -l` lines: mode, links, uid, gid, size, month, day, time, name[ -> target].
    let fds: Vec<(&str, Option<&str>)> = out
        .lines()
        .filter(|l| l.starts_with('l'))
        .map(|l| {
            let name_and_target = l.split_whitespace().skip(8).collect::<Vec<_>>();
            (name_and_target[0], name_and_target.get(2).copied())
        })
        .collect();
    let names: Vec<&str> = fds.iter().map(|(n, _)| *n).collect();
    // 0, 1, 2, and 3: ls's own handle on the directory it lists (closed again by the
    // time ls reads the links, so shown without a target, or as that directory).
    assert_eq!(names, ["0", "1", "2", "3"], "{out}");
    assert_eq!(fds[0].1, Some("/dev/null"), "{out}");
    assert!(fds[1].1.unwrap().ends_with(".stdout"), "{out}");
    assert!(fds[2].1.unwrap().ends_with(".stderr"), "{out}");
    assert!(
        fds[3]
            .1
            .is_none_or(|t| t.starts_with("/proc/") && t.ends_with("/fd")),
        "{out}"
    );
}

#[test]
fn errors_name_the_step_and_leave_nothing() {
    if !require_root(&["busybox"]) {
        return;
    }
    let b = Bundle::new("exec-err");

    let id = unique("bad");
    let begun = Instant::now();
    let e = executor::create(b.opts(&id, b.spec(&["/bin/nope", "x"]))).unwrap_err();
    let msg = e.to_string();
    assert!(
        begun.elapsed() < Duration::from_secs(5),
        "{:?}",
        begun.elapsed()
    );
    assert_eq!(
        msg,
        format!("create container {id}: find executable /bin/nope: No such file or directory (os error 2)")
    );
    assert!(!b.state_dir(&id).exists());

    let id = unique("bad");
    let mut spec = b.spec(&["/bin/true"]);
    let mut mounts = spec.mounts().clone().unwrap();
    mounts.push(bind(
        Path::new("/nonexistent-crust-source"),
        "/data",
        &["rbind"],
    ));
    spec.set_mounts(Some(mounts));
    let msg = executor::create(b.opts(&id, spec)).unwrap_err().to_string();
    assert_eq!(
        msg,
        format!(
            "create container {id}: mount /data (bind source /nonexistent-crust-source): \
             No such file or directory (os error 2)"
        )
    );
    assert!(!b.state_dir(&id).exists());

    // A non-executable file is refused too, with its own errno.
    std::fs::write(b.rootfs().join("bin/plain"), "#!/bin/sh\n").unwrap();
    let id = unique("bad");
    let msg = executor::create(b.opts(&id, b.spec(&["/bin/plain"])))
        .unwrap_err()
        .to_string();
    assert!(
        msg.ends_with("find executable /bin/plain: Permission denied (os error 13)"),
        "{msg}"
    );

    // A namespace path that does not exist fails before any fork.
    let id = unique("bad");
    let mut spec = b.spec(&["/bin/true"]);
    set_namespaces(
        &mut spec,
        vec![ns(
            LinuxNamespaceType::Network,
            Some(Path::new("/run/netns/crust-missing")),
        )],
    );
    let msg = executor::create(b.opts(&id, spec)).unwrap_err().to_string();
    assert!(
        msg.contains("open namespace /run/netns/crust-missing: No such file"),
        "{msg}"
    );
    assert!(!b.state_dir(&id).exists());
}

#[test]
fn a_symlinked_mount_target_stays_in_the_rootfs() {
    if !require_root(&["busybox"]) {
        return;
    }
    let b = Bundle::new("exec-escape");
    std::os::unix::fs::symlink("/etc", b.rootfs().join("escape")).unwrap();
    std::os::unix::fs::symlink("../../../../../etc", b.rootfs().join("escape2")).unwrap();
    let data = b.tmp.path().join("data");
    std::fs::create_dir_all(&data).unwrap();
    std::fs::write(data.join("hello"), "inside\n").unwrap();
    let name = unique("crust-escape-");
    let host_etc = Path::new("/etc").join(&name);
    let before: Vec<_> = std::fs::read_dir("/etc")
        .unwrap()
        .flatten()
        .map(|e| e.file_name())
        .collect();

    let mut spec = b.spec(&[
        "/bin/sh",
        "-c",
        &format!("cat /etc/{name}/hello /etc/{name}2/hello"),
    ]);
    let mut mounts = spec.mounts().clone().unwrap();
    mounts.push(bind(&data, &format!("/escape/{name}"), &["rbind", "ro"]));
    mounts.push(bind(&data, &format!("/escape2/{name}2"), &["rbind", "ro"]));
    spec.set_mounts(Some(mounts));
    assert_eq!(b.sh(spec), "inside\ninside\n");

    assert!(
        !host_etc.exists(),
        "{} was created on the host",
        host_etc.display()
    );
    let after: Vec<_> = std::fs::read_dir("/etc")
        .unwrap()
        .flatten()
        .map(|e| e.file_name())
        .collect();
    assert_eq!(before, after, "the host's /etc changed");
    assert!(b.rootfs().join("etc").join(&name).is_dir());
}

#[test]
fn kill_a_running_container() {
    if !require_root(&["busybox"]) {
        return;
    }
    let b = Bundle::new("exec-kill");
    // In a new PID namespace `sleep` is pid 1: only SIGKILL reaches it from outside.
    let (_, mut g) = b.create(b.spec(&["/bin/sleep", "100"]));
    g.get().start().unwrap();
    assert_eq!(g.get().status(), Status::Running);
    assert!(g.get().kill(libc::SIGKILL).unwrap());
    let status = g.get().wait().unwrap();
    assert_eq!(status.signal(), Some(libc::SIGKILL));
    assert_eq!(g.get().status(), Status::Stopped);
    assert!(
        !g.get().kill(libc::SIGKILL).unwrap(),
        "gone: nothing to signal"
    );

    // In the host's PID namespace SIGTERM is enough.
    let mut spec = b.spec(&["/bin/sleep", "100"]);
    set_namespaces(
        &mut spec,
        vec![
            ns(LinuxNamespaceType::Network, None),
            ns(LinuxNamespaceType::Ipc, None),
            ns(LinuxNamespaceType::Mount, None),
        ],
    );
    let (_, mut g) = b.create(spec);
    g.get().start().unwrap();
    assert!(g.get().kill(libc::SIGTERM).unwrap());
    assert_eq!(g.get().wait().unwrap().signal(), Some(libc::SIGTERM));

    // Force-deleting a created (never started) container kills its init.
    let (id, mut g) = b.create(b.spec(&["/bin/sleep", "100"]));
    let pid = g.get().pid;
    g.0.take().unwrap().delete(true).unwrap();
    assert!(
        !Path::new(&format!("/proc/{pid}")).exists(),
        "init {pid} still there"
    );
    assert!(!b.state_dir(&id).exists());
}

/// The init is born in the cgroups the caller names, in every hierarchy (each v1
/// controller's by writing itself to `tasks`, the cgroup2 one by `CLONE_INTO_CGROUP`),
/// and the cgroup namespace it makes afterwards is rooted there: `/proc/self/cgroup`
/// shows `/` everywhere. An exec lands in the same cgroups and namespace.
#[test]
fn born_in_its_cgroups_with_a_cgroup_namespace_rooted_there() {
    use cgroups::CgroupManager;
    if !require_root(&["busybox"]) {
        return;
    }
    let h = cgroups::Hierarchy::detect()
        .and_then(|h| h.nested_in_own_cgroup())
        .unwrap();
    let path = cgroups::CgroupPath::new(&format!("/{}", unique("crust-e2e-cg"))).unwrap();
    h.create(&path).unwrap();
    struct CgGuard<'a>(&'a cgroups::Hierarchy, &'a cgroups::CgroupPath);
    impl Drop for CgGuard<'_> {
        fn drop(&mut self) {
            let _ = self.0.kill_all(self.1);
            let _ = self.0.remove(self.1);
        }
    }
    let _cg = CgGuard(&h, &path);
    let dirs = h.dirs(&path);

    let b = Bundle::new("exec-cgroup");
    // The default spec has a cgroup namespace of its own.
    let spec = b.spec(&["/bin/sh", "-c", "cat /proc/self/cgroup; sleep 30"]);
    let id = unique("ctr");
    let mut opts = b.opts(&id, spec.clone());
    opts.cgroup_dirs = dirs.clone();
    let mut g = Guard(Some(executor::create(opts).expect("create")));
    let pid = g.get().pid;
    // Already there while it waits at the gate, and alone.
    for dir in &dirs {
        let procs = std::fs::read_to_string(dir.join("cgroup.procs")).unwrap();
        assert_eq!(procs.trim(), pid.to_string(), "{}", dir.display());
    }
    g.get().start().unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    let out = loop {
        let out = b.read(&id, "stdout");
        if out.lines().count() >= dirs.len() || Instant::now() > deadline {
            break out;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let lines: Vec<&str> = out.lines().collect();
    assert!(lines.len() >= dirs.len(), "{out}");
    assert!(lines.iter().all(|l| l.ends_with(":/")), "{out}");

    let mut exec_spec = spec;
    let mut p = exec_spec.process().clone().unwrap();
    p.set_args(Some(vec!["cat".into(), "/proc/self/cgroup".into()]));
    exec_spec.set_process(Some(p));
    let exec_pid = executor::exec(
        g.get(),
        executor::ExecOpts {
            spec: exec_spec,
            stdin: executor::Stdio::Null,
            stdout: executor::Stdio::File(b.out().join("exec.stdout")),
            stderr: executor::Stdio::File(b.out().join("exec.stderr")),
            cgroup_dirs: dirs.clone(),
            controlling_tty: false,
        },
    )
    .expect("exec");
    let mut status = 0;
    // SAFETY: our own child.
    unsafe { libc::waitpid(exec_pid, &mut status, 0) };
    let out = b.read("exec", "stdout");
    assert!(
        libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
        "{out} {}",
        b.read("exec", "stderr")
    );
    assert_eq!(out.lines().count(), lines.len(), "{out}");
    assert!(out.lines().all(|l| l.ends_with(":/")), "{out}");
}

/// An exec that fails before `execve` (a missing binary) leaves no zombie behind, even
/// when the process reports its failure before the intermediate reported its pid: an
/// unreaped process in the container's PID namespace would keep the init from ever
/// finishing its exit. Then the container dies of SIGKILL as usual.
#[test]
fn failed_execs_leave_no_zombie_and_the_container_still_dies() {
    if !require_root(&["busybox"]) {
        return;
    }
    let b = Bundle::new("exec-fail");
    let spec = b.spec(&["/bin/sh", "-c", "sleep 600"]);
    let (_, mut g) = b.create(spec.clone());
    g.get().start().unwrap();
    let init = g.get().pid;
    let ns = std::fs::read_link(format!("/proc/{init}/ns/pid")).unwrap();
    let me = std::process::id().to_string();
    // Busy CPUs make the race likely: the process failing before its intermediate,
    // descheduled between clone and report, sends the pid.
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let hogs: Vec<_> = (0..4)
        .map(|_| {
            let stop = stop.clone();
            std::thread::spawn(move || {
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    std::hint::spin_loop();
                }
            })
        })
        .collect();
    struct Stop(std::sync::Arc<std::sync::atomic::AtomicBool>);
    impl Drop for Stop {
        fn drop(&mut self) {
            self.0.store(true, std::sync::atomic::Ordering::Relaxed);
        }
    }
    let stopper = Stop(stop);
    for i in 0..100 {
        let mut s = spec.clone();
        let mut p = s.process().clone().unwrap();
        p.set_args(Some(vec!["/no/such/binary".into()]));
        s.set_process(Some(p));
        let e = executor::exec(
            g.get(),
            executor::ExecOpts {
                spec: s,
                stdin: executor::Stdio::Null,
                stdout: executor::Stdio::Null,
                stderr: executor::Stdio::Null,
                cgroup_dirs: vec![],
                controlling_tty: false,
            },
        )
        .unwrap_err();
        assert!(e.to_string().contains("/no/such/binary"), "{e}");
        // No child of ours but the init is left in the container's PID namespace.
        let ours: Vec<String> = std::fs::read_dir("/proc")
            .unwrap()
            .flatten()
            .filter_map(|d| d.file_name().to_str().map(str::to_string))
            .filter(|p| p.parse::<i32>().is_ok_and(|p| p != init))
            .filter(|p| {
                std::fs::read_link(format!("/proc/{p}/ns/pid"))
                    .ok()
                    .as_ref()
                    == Some(&ns)
                    && std::fs::read_to_string(format!("/proc/{p}/stat"))
                        .map(|st| {
                            st.rsplit(')')
                                .next()
                                .unwrap_or("")
                                .split_whitespace()
                                .nth(1)
                                == Some(me.as_str())
                        })
                        .unwrap_or(false)
            })
            .collect();
        assert!(ours.is_empty(), "exec {i} left {ours:?} behind");
    }
    drop(stopper);
    for h in hogs {
        h.join().unwrap();
    }
    assert!(g.get().kill(libc::SIGKILL).unwrap());
    let status = g.get().wait().unwrap();
    assert_eq!(status.signal(), Some(libc::SIGKILL));
}

/// A host script for an OCI hook: writes its argument, its state (stdin), cwd, network
/// and PID namespace and user to `<out>/<name>`.
fn hook_script(b: &Bundle) -> PathBuf {
    let path = b.tmp.path().join("hook.sh");
    crust_e2e::write_executable(
        &path,
        "#!/bin/sh\n{ echo \"$1\"; cat; echo; pwd; readlink /proc/self/ns/net; \
         readlink /proc/self/ns/pid; id -u; echo \"$HOOK_ENV\"; } > \"$2\"\n",
    );
    path
}

fn oci_hook(path: &Path, args: &[&str], env: Option<&[&str]>) -> executor::oci_spec::runtime::Hook {
    let mut h = executor::oci_spec::runtime::HookBuilder::default()
        .path(path)
        .args(args.iter().map(|s| s.to_string()).collect::<Vec<_>>())
        .build()
        .unwrap();
    h.set_env(env.map(|e| e.iter().map(|s| s.to_string()).collect()));
    h
}

#[test]
fn oci_hooks_run_in_order_in_their_namespaces() {
    if !require_root(&["busybox"]) {
        return;
    }
    use executor::oci_spec::runtime::HooksBuilder;
    let b = Bundle::new("exec-hooks");
    let script = hook_script(&b);
    let s = script.to_str().unwrap();
    let out = |n: &str| b.out().join(n).display().to_string();
    // startContainer's path and files are the container's own.
    crust_e2e::write_executable(
        &b.rootfs().join("bin/hook"),
        "#!/bin/sh\n{ echo \"$1\"; cat; echo; pwd; readlink /proc/self/ns/net; \
         readlink /proc/self/ns/pid; id -u; echo \"$HOOK_ENV\"; } > /out/start\n",
    );
    #[allow(deprecated)]
    let hooks = HooksBuilder::default()
        .prestart(vec![oci_hook(
            &script,
            &[s, "prestart", &out("prestart")],
            None,
        )])
        .create_runtime(vec![oci_hook(
            &script,
            &[s, "createRuntime", &out("runtime")],
            Some(&["HOOK_ENV=own"]),
        )])
        .create_container(vec![oci_hook(
            &script,
            &[s, "createContainer", &out("create")],
            None,
        )])
        .start_container(vec![oci_hook(
            Path::new("/bin/hook"),
            &["hook", "startContainer"],
            None,
        )])
        .build()
        .unwrap();
    let mut spec = b.spec(&[
        "/bin/sh",
        "-c",
        "{ readlink /proc/self/ns/net; readlink /proc/self/ns/pid; } > /out/main",
    ]);
    spec.set_hooks(Some(hooks));
    spec.set_annotations(Some([("hook.test/a".to_string(), "b".to_string())].into()));
    let mut p = spec.process().clone().unwrap();
    let mut user = p.user().clone();
    user.set_uid(1000);
    p.set_user(user);
    let mut env = p.env().clone().unwrap();
    env.push("HOOK_ENV=container".into());
    p.set_env(Some(env));
    spec.set_process(Some(p));

    let (id, mut g) = b.create(spec);
    let init = g.get().pid;
    // Create ran the hooks up to createContainer, and none of start's.
    for f in ["prestart", "runtime", "create"] {
        assert!(b.out().join(f).exists(), "{f} hook did not run at create");
    }
    assert!(!b.out().join("start").exists());
    g.get().start().unwrap();
    assert_eq!(g.get().wait().unwrap().code(), Some(0));

    let read = |f: &str| -> Vec<String> {
        std::fs::read_to_string(b.out().join(f))
            .unwrap()
            .lines()
            .map(str::to_string)
            .collect()
    };
    let state = |l: &str| -> serde_json::Value { serde_json::from_str(l).unwrap() };
    let host_net = std::fs::read_link("/proc/self/ns/net").unwrap();
    let host_pid = std::fs::read_link("/proc/self/ns/pid").unwrap();
    let main = read("main");
    let (ctr_net, ctr_pid) = (main[0].as_str(), main[1].as_str());
    assert_ne!(ctr_net, host_net.to_str().unwrap());

    // prestart and createRuntime: the runtime's namespaces, the init's host pid.
    for (f, name) in [("prestart", "prestart"), ("runtime", "createRuntime")] {
        let l = read(f);
        assert_eq!(l[0], name);
        let st = state(&l[1]);
        assert_eq!(st["id"], id.as_str());
        assert_eq!(st["status"], "creating");
        assert_eq!(st["pid"], init);
        assert_eq!(st["bundle"], b.dir().to_str().unwrap());
        assert_eq!(st["annotations"]["hook.test/a"], "b");
        assert_eq!(
            l[3],
            host_net.to_str().unwrap(),
            "{name} in the host's netns"
        );
        assert_eq!(l[4], host_pid.to_str().unwrap());
        assert_eq!(l[5], "0");
    }
    // A hook's own env replaces the caller's; without one it gets the caller's.
    assert_eq!(read("runtime")[6], "own");
    assert_eq!(read("prestart")[6], "");

    // createContainer: the container's namespaces, its pid there, the rootfs as cwd.
    let l = read("create");
    assert_eq!(l[0], "createContainer");
    let st = state(&l[1]);
    assert_eq!(
        (st["status"].as_str(), st["pid"].as_i64()),
        (Some("creating"), Some(1))
    );
    assert_eq!(
        Path::new(&l[2]).canonicalize().unwrap(),
        b.rootfs().canonicalize().unwrap()
    );
    assert_eq!((l[3].as_str(), l[4].as_str()), (ctr_net, ctr_pid));
    assert_eq!(l[5], "0");

    // startContainer: in the container's root, as its user, with its env.
    let l = read("start");
    assert_eq!(l[0], "startContainer");
    let st = state(&l[1]);
    assert_eq!(
        (st["status"].as_str(), st["pid"].as_i64()),
        (Some("created"), Some(1))
    );
    assert_eq!((l[3].as_str(), l[4].as_str()), (ctr_net, ctr_pid));
    assert_eq!(l[5], "1000");
    assert_eq!(l[6], "container");
}

#[test]
fn a_failing_hook_fails_its_step_and_leaves_nothing() {
    if !require_root(&["busybox"]) {
        return;
    }
    use executor::oci_spec::runtime::HooksBuilder;
    let b = Bundle::new("exec-hook-fail");
    let sh = Path::new("/bin/sh");
    let failing =
        |what: &str| oci_hook(sh, &["sh", "-c", &format!("echo {what} >&2; exit 3")], None);

    // createRuntime (run by the caller) and createContainer (by the init) fail create.
    let runtime = HooksBuilder::default()
        .create_runtime(vec![
            oci_hook(sh, &["sh", "-c", "true"], None),
            failing("nope"),
        ])
        .build()
        .unwrap();
    let create = HooksBuilder::default()
        .create_container(vec![failing("refused")])
        .build()
        .unwrap();
    for (hooks, want) in [
        (
            runtime,
            "run hooks: error running createRuntime hook #1: exit status 3, stdout: , stderr: nope",
        ),
        (
            create,
            "run hooks: error running createContainer hook #0: exit status 3, stdout: , stderr: refused",
        ),
    ] {
        let id = unique("hookfail");
        let mut spec = b.spec(&["/bin/true"]);
        spec.set_hooks(Some(hooks));
        let msg = executor::create(b.opts(&id, spec)).unwrap_err().to_string();
        assert_eq!(msg, format!("create container {id}: {want}"));
        assert!(!b.state_dir(&id).exists());
    }

    // A hook past its timeout is killed, and the create fails.
    let id = unique("hookslow");
    let mut slow = oci_hook(sh, &["sh", "-c", "sleep 60"], None);
    slow.set_timeout(Some(1));
    let mut spec = b.spec(&["/bin/true"]);
    spec.set_hooks(Some(
        HooksBuilder::default()
            .create_runtime(vec![slow])
            .build()
            .unwrap(),
    ));
    let begun = Instant::now();
    let msg = executor::create(b.opts(&id, spec)).unwrap_err().to_string();
    assert!(
        msg.ends_with("hook ran past specified timeout of 1.0s"),
        "{msg}"
    );
    assert!(begun.elapsed() < Duration::from_secs(30));

    // A spec with a relative hook path is refused before anything is made.
    let id = unique("hookrel");
    let mut spec = b.spec(&["/bin/true"]);
    spec.set_hooks(Some(
        HooksBuilder::default()
            .poststop(vec![oci_hook(Path::new("bin/true"), &["true"], None)])
            .build()
            .unwrap(),
    ));
    let msg = executor::create(b.opts(&id, spec)).unwrap_err().to_string();
    assert!(msg.contains("invalid spec: poststop hook #0"), "{msg}");

    // startContainer fails after the gate: the command never runs, the error is on
    // the container's stderr and the init exits 1.
    let mut spec = b.spec(&["/bin/sh", "-c", "touch /out/ran"]);
    spec.set_hooks(Some(
        HooksBuilder::default()
            .start_container(vec![oci_hook(
                Path::new("/bin/sh"),
                &["sh", "-c", "echo no >&2; exit 4"],
                None,
            )])
            .build()
            .unwrap(),
    ));
    let (status, _, err) = b.run(spec);
    assert_eq!(status.code(), Some(1));
    assert_eq!(
        err,
        "crust: error running startContainer hook #0: exit status 4, stdout: , stderr: no\n"
    );
    assert!(!b.out().join("ran").exists());
}

#[test]
fn a_create_container_hook_runs_in_the_containers_user_namespace() {
    if !require_root(&["busybox"]) {
        return;
    }
    use container::userns::IdMap;
    use executor::oci_spec::runtime::HooksBuilder;
    let b = Bundle::new("exec-hook-userns");
    let map = |h| IdMap {
        container_id: 0,
        host_id: h,
        size: 65536,
    };
    let userns = container::userns::create(&[map(320000)], &[map(420000)]).expect("userns");
    let path = PathBuf::from(format!("/proc/self/fd/{}", userns.as_raw_fd()));
    let out = b.out().join("uid_map");
    let mut spec = b.spec(&["/bin/true"]);
    let mut namespaces = spec.linux().clone().unwrap().namespaces().clone().unwrap();
    namespaces.push(ns(LinuxNamespaceType::User, Some(&path)));
    set_namespaces(&mut spec, namespaces);
    spec.set_hooks(Some(
        HooksBuilder::default()
            .create_container(vec![oci_hook(
                Path::new("/bin/sh"),
                &[
                    "sh",
                    "-c",
                    &format!("cat /proc/self/uid_map > {}", out.display()),
                ],
                None,
            )])
            .build()
            .unwrap(),
    ));
    let (_id, mut g) = b.create(spec);
    let map = std::fs::read_to_string(&out).unwrap();
    assert_eq!(
        map.split_whitespace().collect::<Vec<_>>(),
        ["0", "320000", "65536"],
        "{map}"
    );
    g.get().start().unwrap();
    g.get().wait().unwrap();
}
