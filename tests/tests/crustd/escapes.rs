//! Container escapes (issue 14): each test tries, from inside a non-privileged
//! container, a way out that runtimes have had, and fails if it leads anywhere on the
//! host.
//!
//! - `/proc/<pid>/exe`, `root` and `cwd` of every process that joins the container
//!   (ExecSync's helper before its `execve`, a new container's init in the pod's PID
//!   namespace, the pause) must not open a host file (CVE-2019-5736): a spy in the
//!   container (this test binary, run in the container with the host's C library in
//!   its image) watches `/proc` while execs run, and crust's binaries are unchanged
//!   after.
//! - No descriptor of crust's is left to the container's init or an exec'd process,
//!   and a `workingDir` of `/proc/self/fd/N` does not lead out (CVE-2024-21626).
//! - No symlink leads out of the root: an image whose symlinks point at `/` and at
//!   `../../..` is used for volume paths, `workingDir` and image volume sub paths; a
//!   log path with `..` or a planted symlink does not write outside the log directory.
//! - `/proc/sys`, `/sys` and the read-only paths cannot be written, the masked paths
//!   read nothing.

use cri_api::*;
use crust_e2e::cri::{self, busybox_layer, ctr, sc, Env};
use crust_e2e::crustd::Crustd;
use crust_e2e::{require_root, unique, TempDir};
use std::collections::BTreeMap;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};
use tonic::Code;

/// The image of these tests: busybox with more applets, the C library the spy needs,
/// and symlinks that point out of any root they are followed from.
const IMAGE: &str = "docker.io/library/escapes:e2e";

/// Applets beyond [`cri::APPLETS`].
const MORE_APPLETS: &[&str] = &["readlink", "stat", "mount", "cut", "sha256sum", "test"];

/// The symlinks of [`IMAGE`]: to the root, and up past any root.
const LINKS: &[(&str, &str)] = &[
    ("hostroot", "/"),
    ("up", "../../../../../../../../.."),
    ("data/up", "../../../../../../../../.."),
];

/// Where the spy binary (this test executable) is mounted in the container.
const SPY: &str = "/spy";

/// The spy's environment variable: where it writes what it found, in the container.
const SPY_ENV: &str = "CRUST_ESCAPES_SPY";

/// The spy's environment variable: the devices of the host's file systems.
const HOST_DEVS_ENV: &str = "CRUST_ESCAPES_HOST_DEVS";

fn ready() -> bool {
    require_root(&["ip", "nsenter", "nft", "busybox", "ldd"])
}

/// The shared libraries this test executable needs (from `ldd`), to put in the image.
fn libraries() -> Vec<PathBuf> {
    let exe = std::env::current_exe().unwrap();
    let out = crust_e2e::sh(&["ldd", exe.to_str().unwrap()]);
    out.lines()
        .filter_map(|l| {
            l.split_whitespace()
                .find(|w| w.starts_with('/'))
                .map(PathBuf::from)
        })
        .collect()
}

fn escape_layer() -> image::layout::LayerBuilder {
    let mut l = busybox_layer();
    for a in MORE_APPLETS {
        l = l.symlink(&format!("bin/{a}"), "busybox");
    }
    for (path, target) in LINKS {
        l = l.symlink(path, target);
    }
    // The spy's C library, at the paths the executable names (the loader's too).
    let mut dirs = std::collections::BTreeSet::new();
    for lib in libraries() {
        let rel = lib.strip_prefix("/").unwrap();
        for d in rel.ancestors().skip(1) {
            if !d.as_os_str().is_empty() {
                dirs.insert(d.to_path_buf());
            }
        }
    }
    for d in &dirs {
        l = l.dir(d.to_str().unwrap(), 0o755);
    }
    for lib in libraries() {
        let real = std::fs::canonicalize(&lib).unwrap();
        l = l.file_from(
            lib.strip_prefix("/").unwrap().to_str().unwrap(),
            &real,
            0o755,
        );
    }
    l
}

async fn setup() -> Env {
    let env = Env::with(Crustd::start()).await;
    cri::import_layer(&env.d, IMAGE, escape_layer());
    env
}

/// A container of [`IMAGE`] running `cmd`.
fn esc(name: &str, cmd: &[&str]) -> ContainerConfig {
    let mut c = ctr(name, cmd);
    c.image = Some(ImageSpec {
        image: IMAGE.into(),
        ..Default::default()
    });
    c
}

async fn running(env: &mut Env, pod: &(String, PodSandboxConfig), cfg: ContainerConfig) -> String {
    let id = env.create(pod, cfg).await;
    env.start(&id).await;
    id
}

/// ExecSync that must exit 0; its stdout.
async fn out(env: &mut Env, id: &str, cmd: &[&str]) -> String {
    let r = env.exec(id, cmd, 20).await.expect("ExecSync");
    assert_eq!(
        r.exit_code,
        0,
        "{cmd:?}: {}{}",
        String::from_utf8_lossy(&r.stdout),
        String::from_utf8_lossy(&r.stderr)
    );
    String::from_utf8_lossy(&r.stdout).into_owned()
}

/// A shell script's stdout, whatever it exits with.
async fn script(env: &mut Env, id: &str, text: &str) -> String {
    let r = env
        .exec(id, &["sh", "-c", text], 20)
        .await
        .expect("ExecSync");
    String::from_utf8_lossy(&r.stdout).into_owned() + &String::from_utf8_lossy(&r.stderr)
}

fn digest(p: &Path) -> Vec<u8> {
    let b = std::fs::read(p).unwrap_or_else(|e| panic!("reading {}: {e}", p.display()));
    image::layout::digest(&b).into_bytes()
}

async fn remove_pod(env: &mut Env, id: &str) {
    env.c
        .stop_pod_sandbox(StopPodSandboxRequest {
            pod_sandbox_id: id.into(),
        })
        .await
        .expect("StopPodSandbox");
    env.c
        .remove_pod_sandbox(RemovePodSandboxRequest {
            pod_sandbox_id: id.into(),
        })
        .await
        .expect("RemovePodSandbox");
}

// ---------------------------------------------------------------------------------
// CVE-2019-5736: /proc/<pid>/exe of a process that joins the container.

/// The spy: run inside a container (`/spy spy --exact`) with [`SPY_ENV`] naming its
/// report file and [`HOST_DEVS_ENV`] the devices of the host's file systems, it
/// watches `/proc` until `<report>.stop` exists. For every process it has not seen it
/// opens `exe`, `root`, `cwd`, `root/..` and `cwd/..` through `/proc/<pid>/`: what
/// opens must not be on one of the host's file systems (a container's root, its files
/// and directories are on its overlay or its tmpfs). It also tries `exe` for writing
/// (never truncating). One line per finding: `ESCAPE <pid> <what> <link>` and `WRITABLE <pid> <link>` (the
/// test fails on any), `refused <pid> <what> <errno>`, `own <pid> <what> <link>`.
#[test]
fn spy() {
    let Some(report) = std::env::var_os(SPY_ENV) else {
        return;
    };
    use std::io::Write;
    let host_devs: Vec<u64> = std::env::var(HOST_DEVS_ENV)
        .unwrap()
        .split(',')
        .map(|d| d.parse().unwrap())
        .collect();
    let report = PathBuf::from(report);
    let stop = report.with_extension("stop");
    let mut f = std::fs::File::create(&report).unwrap();
    let me = std::process::id();
    let mut seen = std::collections::HashSet::new();
    while !stop.exists() {
        let Ok(rd) = std::fs::read_dir("/proc") else {
            continue;
        };
        for e in rd.flatten() {
            let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else {
                continue;
            };
            if pid == me || !seen.insert(pid) {
                continue;
            }
            let _ = writeln!(f, "{}", spy_on(pid, &host_devs).join("\n"));
        }
    }
    let _ = writeln!(f, "done");
}

/// What [`spy`] finds of one process.
fn spy_on(pid: u32, host_devs: &[u64]) -> Vec<String> {
    let mut lines = vec![];
    let base = PathBuf::from(format!("/proc/{pid}"));
    for what in ["exe", "root", "cwd", "root/..", "cwd/.."] {
        let p = base.join(what);
        let link = std::fs::read_link(base.join(what.trim_end_matches("/..")))
            .map(|l| l.display().to_string())
            .unwrap_or_else(|e| format!("({e})"));
        // Opened (the exploit holds such an fd), then asked where it is.
        let opened = if what == "exe" {
            std::fs::File::open(&p).and_then(|f| f.metadata())
        } else {
            std::fs::metadata(&p)
        };
        match opened {
            Err(e) => lines.push(format!(
                "refused {pid} {what} {}",
                e.raw_os_error().unwrap_or(0)
            )),
            Ok(m) if host_devs.contains(&m.dev()) => {
                lines.push(format!("ESCAPE {pid} {what} {link}"))
            }
            Ok(_) => lines.push(format!("own {pid} {what} {link}")),
        }
    }
    // O_WRONLY without O_TRUNC or O_CREAT: opening changes nothing, and nothing is
    // written through it.
    if std::fs::OpenOptions::new()
        .write(true)
        .open(base.join("exe"))
        .is_ok()
    {
        lines.push(format!("WRITABLE {pid}"));
    }
    lines
}

/// The devices of the host's file systems a container must not reach: the host's
/// `/`, and where crust's binaries, its root and state dirs and the test's temp dirs
/// are.
fn host_devs(d: &Crustd) -> String {
    let mut devs: Vec<u64> = [
        PathBuf::from("/"),
        crust_e2e::bin("crustd"),
        d.root.path().to_path_buf(),
        d.state.path().to_path_buf(),
        d.pause_bin(),
        std::env::temp_dir(),
    ]
    .iter()
    .map(|p| std::fs::metadata(p).unwrap().dev())
    .collect();
    devs.sort();
    devs.dedup();
    devs.iter()
        .map(|d| d.to_string())
        .collect::<Vec<_>>()
        .join(",")
}

/// The spy's container: this test executable bind-mounted at [`SPY`], run as the spy.
fn spy_container(d: &Crustd, name: &str, report: &str) -> ContainerConfig {
    let exe = std::env::current_exe().unwrap();
    // It stays up after the spy is done, for its report to be read.
    let spy = format!("{SPY} spy --exact --nocapture --test-threads=1; exec sleep 1000");
    let mut c = esc(name, &["sh", "-c", &spy]);
    c.envs = vec![
        KeyValue {
            key: SPY_ENV.into(),
            value: report.into(),
        },
        KeyValue {
            key: HOST_DEVS_ENV.into(),
            value: host_devs(d),
        },
    ];
    c.mounts = vec![Mount {
        container_path: SPY.into(),
        host_path: exe.display().to_string(),
        readonly: true,
        ..Default::default()
    }];
    c
}

/// Runs the spy in a pod sharing its PID namespace (the CRI's default), then in that
/// pod 40 ExecSync and a second container, and checks what the spy saw. `caps` are
/// added to the spy's container. No process's `exe` may be opened for writing. With
/// `ptrace_inherent`, only the pause's (PID 1's) `root`, `cwd` and `..` from them must
/// not be the host's (and the spy must have opened them); the other findings are
/// printed, see [`proc_exe_of_joining_processes_with_sys_ptrace`]. Without, nothing
/// may be the host's.
async fn spy_on_joining(caps: &[&str], ptrace_inherent: bool) {
    let mut env = setup().await;
    let crust_bins = [
        crust_e2e::bin("crustd"),
        env.d.monitor_bin(),
        env.d.pause_bin(),
    ];
    let before: Vec<Vec<u8>> = crust_bins.iter().map(|p| digest(p)).collect();
    let pod = env.pod(&unique("spy")).await;
    let mut cfg = spy_container(&env.d, "spy", "/tmp/spy.report");
    sc(&mut cfg).capabilities = Some(Capability {
        add_capabilities: caps.iter().map(|c| c.to_string()).collect(),
        ..Default::default()
    });
    let spy = running(&mut env, &pod, cfg).await;
    // The spy has seen what ran before it (pause, itself) once its report has a line.
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        match env.exec(&spy, &["cat", "/tmp/spy.report"], 10).await {
            Ok(r) if !r.stdout.is_empty() => break,
            r => assert!(
                Instant::now() < deadline && r.is_ok(),
                "the spy wrote nothing: {r:?}; its log: {:?}",
                cri::log_lines(
                    &env.logs
                        .path()
                        .join(&pod.1.metadata.as_ref().unwrap().name)
                        .join("spy/0.log")
                )
            ),
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let target = running(&mut env, &pod, esc("target", &["sleep", "1000"])).await;
    for _ in 0..40 {
        for (id, name) in [(&target, "target"), (&spy, "spy")] {
            if let Err(e) = env.exec(id, &["true"], 10).await {
                let (st, _) = env.status(id).await;
                panic!(
                    "ExecSync in {name}: {e:?}; {st:?}; its log: {:?}",
                    cri::log_lines(
                        &env.logs
                            .path()
                            .join(&pod.1.metadata.as_ref().unwrap().name)
                            .join(format!("{name}/0.log"))
                    )
                );
            }
        }
    }
    let another = running(&mut env, &pod, esc("another", &["sleep", "1000"])).await;
    out(&mut env, &another, &["true"]).await;
    out(&mut env, &spy, &["touch", "/tmp/spy.stop"]).await;
    let deadline = Instant::now() + Duration::from_secs(20);
    let report = loop {
        let r = script(&mut env, &spy, "cat /tmp/spy.report").await;
        if r.lines().any(|l| l == "done") {
            break r;
        }
        assert!(Instant::now() < deadline, "the spy did not stop:\n{r}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let mut counts: BTreeMap<&str, usize> = BTreeMap::new();
    for l in report.lines() {
        *counts.entry(l.split(' ').next().unwrap()).or_default() += 1;
    }
    eprintln!("caps {caps:?}: the spy's findings by kind: {counts:?}");
    let pause_dirs = ["root", "cwd", "root/..", "cwd/.."];
    let checked = |l: &&str| {
        let w: Vec<&str> = l.split(' ').collect();
        match w[0] {
            "WRITABLE" => true,
            "ESCAPE" => !ptrace_inherent || (w[1] == "1" && pause_dirs.contains(&w[2])),
            _ => false,
        }
    };
    let bad: Vec<&str> = report.lines().filter(checked).collect();
    assert!(
        bad.is_empty(),
        "caps {caps:?}: a container process reached the host through /proc/<pid>:\n{}\n\nthe whole report:\n{report}",
        bad.join("\n")
    );
    if ptrace_inherent {
        // The spy could open the pause's root and cwd at all, and they were not the host's.
        // Under crust's default AppArmor profile (hack/vm-test's boot) it may not even
        // open them: the profile allows ptrace only among the container's own processes,
        // and the pause is unconfined.
        let apparmor = std::env::var("CRUST_APPARMOR_VM").is_ok_and(|v| v == "1");
        for what in pause_dirs {
            let (how, want) = if apparmor {
                ("get EACCES opening", format!("refused 1 {what} 13"))
            } else {
                ("open", format!("own 1 {what} "))
            };
            assert!(
                report.lines().any(|l| l.starts_with(&want)),
                "the spy did not {how} the pause's {what}:\n{report}"
            );
        }
        let inherent: Vec<&str> = report
            .lines()
            .filter(|l| l.starts_with("ESCAPE") && !checked(l))
            .collect();
        eprintln!(
            "caps {caps:?}: inherent to CAP_SYS_PTRACE, not asserted:\n{}",
            inherent.join("\n")
        );
    }
    // It saw the execs at all: one line per process at least.
    assert!(
        counts.values().sum::<usize>() > 80,
        "the spy saw too little:\n{report}"
    );
    let after: Vec<Vec<u8>> = crust_bins.iter().map(|p| digest(p)).collect();
    assert_eq!(before, after, "a crust binary changed: {crust_bins:?}");
    remove_pod(&mut env, &pod.0).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn proc_exe_of_joining_processes() {
    if !ready() {
        return;
    }
    spy_on_joining(&[], false).await;
}

/// The same with `CAP_SYS_PTRACE` (`kubectl debug --profile=general` adds it): being
/// non-dumpable or more privileged no longer hides a process then.
///
/// Asserted: with the pod's PID namespace shared, PID 1 is the pause, and its `root`
/// and `cwd`, and `..` from either, are an empty read-only tmpfs, the only mount of the
/// pause's own mount namespace: nothing of the host's. (They were the host's `/`, so
/// `/proc/1/root/` gave the container the host's whole file system, read-write; with
/// containerd + runc the pause is a container on its image's root.) No `exe` can be
/// opened for writing (ETXTBSY: each binary is running).
///
/// Not asserted, and printed: what a process that may ptrace can always see of a
/// process of its PID namespace in the moment before that process is the
/// container's, as with runc:
/// - an ExecSync's process is a copy of crustd until its `execve`, so its `exe` opens
///   the crustd binary (read-only);
/// - a new container's init, a copy of crustd too, has the host's root and cwd (and
///   `..` from them) until its `pivot_root`;
/// - the pause's `exe` opens `<state>/bin/crust-pause`, read-only.
///
/// The first two are inherent: a process that may ptrace may also attach to such a
/// process in that moment and run code of its choosing in it, on the host's root (runc
/// has the same window with its `runc init`); `CAP_SYS_PTRACE` in a pod that shares
/// its PID namespace is that much trust. The third gives a read of crust's own pause
/// binary, no write.
#[tokio::test(flavor = "multi_thread")]
async fn proc_exe_of_joining_processes_with_sys_ptrace() {
    if !ready() {
        return;
    }
    spy_on_joining(&["SYS_PTRACE"], true).await;
}

// ---------------------------------------------------------------------------------
// CVE-2024-21626: descriptors leaked into the container.

/// The fd numbers in a `ls -l /proc/<pid>/fd` listing (`... 3 -> /where`).
fn fds(listing: &str) -> Vec<String> {
    let mut v: Vec<String> = listing
        .lines()
        .filter_map(|l| {
            let w: Vec<&str> = l.split_whitespace().collect();
            let arrow = w.iter().position(|x| *x == "->")?;
            Some(w[arrow - 1].to_string())
        })
        .collect();
    v.sort();
    v
}

#[tokio::test(flavor = "multi_thread")]
async fn no_descriptor_leaks_into_init_or_exec() {
    if !ready() {
        return;
    }
    let mut env = setup().await;
    let pod = env.pod("fds").await;
    let mut cfg = esc("init", &["sleep", "1000"]);
    sc(&mut cfg).namespace_options = Some(NamespaceOption {
        pid: NamespaceMode::Container as i32,
        ..Default::default()
    });
    let id = running(&mut env, &pod, cfg).await;
    let want = vec!["0", "1", "2"];
    let init = out(&mut env, &id, &["ls", "-l", "/proc/1/fd"]).await;
    assert_eq!(fds(&init), want, "the init's fds: {init}");
    // From the host too, with where each leads.
    let (_, info) = env.status(&id).await;
    let pid = info["pid"].as_i64().expect("info.pid");
    let host: Vec<String> = std::fs::read_dir(format!("/proc/{pid}/fd"))
        .unwrap()
        .flatten()
        .map(|e| {
            format!(
                "{} -> {:?}",
                e.file_name().to_string_lossy(),
                std::fs::read_link(e.path()).ok()
            )
        })
        .collect();
    assert_eq!(host.len(), 3, "the init's fds seen from the host: {host:?}");
    // An exec'd shell, and a process it started (nothing of the shell's own either).
    let exec = out(&mut env, &id, &["sh", "-c", "ls -l /proc/$$/fd; true"]).await;
    assert_eq!(fds(&exec), want, "an exec'd process's fds: {exec}");
    // The shell gives a background job /dev/null as its stdin between fork and exec
    // (close, then open): a listing in that moment lacks fd 0. A leaked descriptor
    // stays, so the listing is taken again (for up to 2 s) until it is settled.
    let child = out(
        &mut env,
        &id,
        &[
            "sh",
            "-c",
            "sleep 5 & p=$!; for i in $(seq 20); do \
             [ \"$(ls /proc/$p/fd | tr '\\n' ' ')\" = '0 1 2 ' ] && break; sleep 0.1; done; \
             ls -l /proc/$p/fd; kill $p",
        ],
    )
    .await;
    assert_eq!(
        fds(&child),
        want,
        "an exec'd process's child's fds: {child}"
    );
    remove_pod(&mut env, &pod.0).await;
}

/// A `workingDir` of `/proc/self/fd/N` (the CVE's exploit: a directory fd of the
/// runtime's left open, so the cwd is on the host) is refused, or leads to a
/// directory inside the container.
#[tokio::test(flavor = "multi_thread")]
async fn working_dir_through_proc_self_fd() {
    if !ready() {
        return;
    }
    let mut env = setup().await;
    let pod = env.pod("cwdfd").await;
    for n in 3..=9 {
        let mut cfg = esc(
            &format!("cwd{n}"),
            // Up as far as it goes from the cwd, then list: the container's own root.
            &[
                "sh",
                "-c",
                "cd ../../../../../../../../..; ls -a; sleep 1000",
            ],
        );
        cfg.working_dir = format!("/proc/self/fd/{n}");
        match env.try_create(&pod, cfg).await {
            Err(s) => {
                assert_eq!(s.code(), Code::InvalidArgument, "fd {n}: {s:?}");
                eprintln!("fd {n}: refused: {}", s.message());
            }
            Ok(id) => {
                env.start(&id).await;
                let cwd = out(&mut env, &id, &["sh", "-c", "ls -a /proc/1/cwd/"]).await;
                let (_, info) = env.status(&id).await;
                let pid = info["pid"].as_i64().unwrap();
                let m = std::fs::metadata(format!("/proc/{pid}/cwd"));
                eprintln!("fd {n}: created; cwd lists {cwd:?}; from the host {m:?}");
                let log = env.logs.path().join("cwdfd").join(format!("cwd{n}/0.log"));
                let deadline = Instant::now() + Duration::from_secs(10);
                let listing = loop {
                    let l: Vec<String> = cri::log_lines(&log).into_iter().map(|l| l.3).collect();
                    if l.iter().any(|x| x == "bin") || Instant::now() > deadline {
                        break l;
                    }
                    tokio::time::sleep(Duration::from_millis(50)).await;
                };
                assert!(listing.iter().any(|x| x == "bin"), "fd {n}: {listing:?}");
                for host_only in ["usr", "boot", "home", "root", "work", "lib64"] {
                    assert!(
                        !listing.iter().any(|x| x == host_only),
                        "fd {n}: the cwd led to the host's root: {listing:?}"
                    );
                }
            }
        }
    }
    remove_pod(&mut env, &pod.0).await;
}

// ---------------------------------------------------------------------------------
// Symlinks out of the root.

/// Volume paths and `workingDir` through the image's symlinks to `/` and up past the
/// root land inside the container's root; nothing appears on the host.
#[tokio::test(flavor = "multi_thread")]
async fn symlinks_in_volume_paths_and_working_dir() {
    if !ready() {
        return;
    }
    let mut env = setup().await;
    let pod = env.pod("links").await;
    let vol = TempDir::new("vol");
    std::fs::write(vol.path().join("from-volume"), b"v").unwrap();
    let tag = unique("esc");
    // Each a path in the container through a symlink; on the host, where it would be
    // if the symlink were followed from the host's root.
    let paths: Vec<(String, PathBuf)> = LINKS
        .iter()
        .map(|(link, _)| {
            let name = format!("{tag}-{}", link.replace('/', "-"));
            (
                format!("/{link}/tmp/{name}"),
                PathBuf::from("/tmp").join(name),
            )
        })
        .collect();
    let mut cfg = esc("links", &["sleep", "1000"]);
    cfg.mounts = paths
        .iter()
        .map(|(p, _)| Mount {
            container_path: p.clone(),
            host_path: vol.path().display().to_string(),
            ..Default::default()
        })
        .collect();
    cfg.working_dir = format!("/up/tmp/{tag}-wd");
    let id = running(&mut env, &pod, cfg).await;
    for (p, host) in &paths {
        assert!(!host.exists(), "{p}: made {} on the host", host.display());
        let inside = format!("/tmp/{}", host.file_name().unwrap().to_string_lossy());
        let ls = out(&mut env, &id, &["ls", &inside]).await;
        assert_eq!(ls.trim(), "from-volume", "{p}: not mounted at {inside}");
    }
    let host_wd = PathBuf::from(format!("/tmp/{tag}-wd"));
    assert!(!host_wd.exists(), "workingDir made {}", host_wd.display());
    // The init's cwd, found in the pod's PID namespace by its command line.
    let wd = script(
        &mut env,
        &id,
        "for p in /proc/[0-9]*; do [ \"$(cat $p/cmdline | tr '\\0' ' ')\" = 'sleep 1000 ' ] && readlink $p/cwd; done",
    )
    .await;
    assert_eq!(wd.trim(), format!("/tmp/{tag}-wd"), "the init's cwd");
    remove_pod(&mut env, &pod.0).await;
}

/// A log path with `..` or an absolute one is refused or stays in the pod's log
/// directory; a log file that is a symlink (planted by whoever can write the log
/// directory) is not followed.
#[tokio::test(flavor = "multi_thread")]
async fn log_paths_stay_in_the_log_directory() {
    if !ready() {
        return;
    }
    let mut env = setup().await;
    let pod = env.pod("logs").await;
    let logdir = PathBuf::from(&pod.1.log_directory);
    let outside = TempDir::new("outside");
    let tag = unique("lg");
    // `..` up to the log folders' parent, and an absolute path.
    let up = logdir.join(format!("../../{tag}-up.log"));
    let abs = outside.path().join(format!("{tag}-abs.log"));
    for (n, (log_path, host)) in [
        (format!("../../{tag}-up.log"), up.clone()),
        (abs.display().to_string(), abs.clone()),
    ]
    .into_iter()
    .enumerate()
    {
        let mut cfg = esc(&format!("dots{n}"), &["echo", "escaped"]);
        cfg.log_path = log_path.clone();
        match env.try_create(&pod, cfg).await {
            Err(s) => assert_eq!(s.code(), Code::InvalidArgument, "{log_path}: {s:?}"),
            Ok(id) => {
                env.start(&id).await;
                env.wait_exited(&id).await;
                let (st, _) = env.status(&id).await;
                assert!(
                    Path::new(&st.log_path).starts_with(&logdir),
                    "{log_path}: logs to {}",
                    st.log_path
                );
            }
        }
        let host = host.canonicalize().unwrap_or(host);
        assert!(
            !host.exists(),
            "{log_path}: made {} outside the log directory",
            host.display()
        );
    }
    // A planted symlink as the log file, and as the container's log folder.
    let victim = outside.path().join("victim");
    std::fs::write(&victim, b"host file\n").unwrap();
    std::fs::create_dir_all(logdir.join("planted")).unwrap();
    std::os::unix::fs::symlink(&victim, logdir.join("planted/0.log")).unwrap();
    std::os::unix::fs::symlink(outside.path(), logdir.join("planteddir")).unwrap();
    for name in ["planted", "planteddir"] {
        let mut cfg = esc(name, &["echo", "escaped"]);
        cfg.log_path = format!("{name}/0.log");
        match env.try_create(&pod, cfg).await {
            Err(s) => eprintln!("{name}: refused: {s:?}"),
            Ok(id) => {
                if env
                    .c
                    .start_container(StartContainerRequest {
                        container_id: id.clone(),
                    })
                    .await
                    .is_ok()
                {
                    env.wait_exited(&id).await;
                }
            }
        }
    }
    assert_eq!(
        std::fs::read(&victim).unwrap(),
        b"host file\n",
        "the container's output went through a symlinked log file"
    );
    assert_eq!(
        crust_e2e::crustd::dir_names(outside.path()),
        vec!["victim".to_string()],
        "the log went through a symlinked log folder"
    );
    remove_pod(&mut env, &pod.0).await;
}

/// An image volume's sub path through a symlink of the image (to `/`, or up past the
/// root) is refused: it would be followed on the host, where the image's layers are.
#[tokio::test(flavor = "multi_thread")]
async fn image_volume_sub_path_through_symlinks() {
    if !ready() {
        return;
    }
    let mut env = setup().await;
    let pod = env.pod("ivsub").await;
    for (n, sub) in ["hostroot/etc", "up/etc", "data/up/etc", "hostroot", "up"]
        .into_iter()
        .enumerate()
    {
        let mut cfg = esc(&format!("iv{n}"), &["sleep", "1000"]);
        cfg.mounts = vec![Mount {
            container_path: "/iv".into(),
            image: Some(ImageSpec {
                image: IMAGE.into(),
                ..Default::default()
            }),
            image_sub_path: sub.into(),
            readonly: true,
            ..Default::default()
        }];
        match env.try_create(&pod, cfg).await {
            Err(s) => assert_eq!(s.code(), Code::InvalidArgument, "{sub}: {s:?}"),
            Ok(id) => {
                env.start(&id).await;
                let ls = out(&mut env, &id, &["ls", "-a", "/iv"]).await;
                panic!("image_sub_path {sub:?} was mounted: /iv has {ls:?}");
            }
        }
    }
    remove_pod(&mut env, &pod.0).await;
}

// ---------------------------------------------------------------------------------
// /proc/sys, /sys, masked and read-only paths.

#[tokio::test(flavor = "multi_thread")]
async fn proc_and_sys_are_protected() {
    if !ready() {
        return;
    }
    let mut env = setup().await;
    let pod = env.pod("procsys").await;
    let id = running(&mut env, &pod, esc("procsys", &["sleep", "1000"])).await;
    // Writes of the value already there: harmless should one get through.
    let write_back = |f: &str| format!("v=$(cat {f}) && echo \"$v\" > {f} && echo WROTE {f}");
    for f in [
        "/proc/sys/vm/swappiness",
        "/proc/sys/kernel/printk_ratelimit",
        "/proc/sys/net/ipv4/ip_forward",
        "/sys/module/printk/parameters/time",
        "/sys/kernel/mm/transparent_hugepage/enabled",
    ] {
        if !Path::new(f).exists() {
            continue;
        }
        let r = script(&mut env, &id, &write_back(f)).await;
        assert!(!r.contains("WROTE"), "{f} was written: {r}");
    }
    // Help on the kernel log is all 'h' does, should the write get through.
    if Path::new("/proc/sysrq-trigger").exists() {
        let r = script(&mut env, &id, "echo h > /proc/sysrq-trigger && echo WROTE").await;
        assert!(!r.contains("WROTE"), "/proc/sysrq-trigger was written: {r}");
    }
    for dir in ["/proc/sys", "/sys", "/proc/bus", "/proc/fs", "/proc/irq"] {
        let r = script(
            &mut env,
            &id,
            &format!("touch {dir}/crust-escape && echo WROTE"),
        )
        .await;
        assert!(!r.contains("WROTE"), "{dir} took a new file: {r}");
        let r = script(
            &mut env,
            &id,
            &format!("mount -o remount,rw {dir} && echo REMOUNTED"),
        )
        .await;
        assert!(!r.contains("REMOUNTED"), "{dir} remounted: {r}");
    }
    // Mount options: read-only.
    let mounts = out(&mut env, &id, &["cat", "/proc/self/mounts"]).await;
    for m in [
        "/sys",
        "/proc/sys",
        "/proc/sysrq-trigger",
        "/proc/bus",
        "/proc/fs",
    ] {
        if !Path::new(m).exists() {
            continue;
        }
        let opts = mounts
            .lines()
            .rfind(|l| l.split(' ').nth(1) == Some(m))
            .map(|l| l.split(' ').nth(3).unwrap().to_string())
            .unwrap_or_else(|| panic!("{m} is not a mount point:\n{mounts}"));
        assert!(opts.split(',').any(|o| o == "ro"), "{m} is mounted {opts}");
    }
    // Masked: files read nothing and are /dev/null, folders are empty and read-only.
    for f in crustd_masked() {
        let host = Path::new(f);
        if !host.exists() {
            continue;
        }
        if host.is_dir() {
            let ls = script(&mut env, &id, &format!("ls -A {f}")).await;
            assert_eq!(ls, "", "{f} is not masked: {ls}");
            let r = script(&mut env, &id, &format!("touch {f}/x && echo WROTE")).await;
            assert!(!r.contains("WROTE"), "{f} took a new file");
        } else {
            // Nothing read: the mask's /dev/null gives none; under crust's default
            // AppArmor profile (hack/vm-test's boot) `kcore` is not even opened.
            let n = script(&mut env, &id, &format!("head -c 64 {f} | wc -c")).await;
            assert_eq!(
                n.lines().next().unwrap_or_default().trim(),
                "0",
                "{f} reads something"
            );
            let dev = out(&mut env, &id, &["stat", "-L", "-c", "%t:%T", f]).await;
            assert_eq!(dev.trim(), "1:3", "{f} is not /dev/null");
        }
    }
    remove_pod(&mut env, &pod.0).await;
}

/// The paths crustd masks when the kubelet sends none (containerd's defaults).
fn crustd_masked() -> &'static [&'static str] {
    &[
        "/proc/acpi",
        "/proc/asound",
        "/proc/kcore",
        "/proc/keys",
        "/proc/latency_stats",
        "/proc/timer_list",
        "/proc/timer_stats",
        "/proc/sched_debug",
        "/proc/scsi",
        "/sys/firmware",
        "/sys/devices/virtual/powercap",
    ]
}
