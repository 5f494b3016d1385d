//! Resource exhaustion (issue 14): a full image store or state filesystem (ENOSPC)
//! gives a clear error, the daemon keeps serving, nothing half-written is taken as
//! whole, and once space is back the same calls succeed.
//!
//! Each filesystem is a tmpfs of a few MiB mounted over crustd's own dir (the daemon is
//! restarted onto it), unmounted by a guard even when the test fails.

use cri_api::*;
use crust_e2e::cri::{self, Env};
use crust_e2e::crustd::{dir_names, Crustd};
use crust_e2e::registry::Registry;
use crust_e2e::{require_root, run, TempDir};
use image::layout::LayerBuilder;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;
use tonic::Code;

const TOOLS: &[&str] = &["docker-registry", "skopeo", "busybox"];

/// A size-limited tmpfs mounted on `path` (which must exist), lazily unmounted on drop;
/// then `path` and `also` are removed (the daemon's temp dirs could not remove
/// themselves while it was mounted).
struct Tmpfs(PathBuf, Option<PathBuf>);

impl Tmpfs {
    fn mount(path: &Path, opts: &str) -> Tmpfs {
        let out = run(Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("mode=0755,{opts}"), "tmpfs"])
            .arg(path));
        assert!(
            out.status.success(),
            "mount tmpfs on {}: {}",
            path.display(),
            String::from_utf8_lossy(&out.stderr)
        );
        Tmpfs(path.to_path_buf(), None)
    }

    fn remount(&self, opts: &str) {
        let out = run(Command::new("mount")
            .args(["-o", &format!("remount,{opts}")])
            .arg(&self.0));
        assert!(
            out.status.success(),
            "remount {}: {}",
            self.0.display(),
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = run(Command::new("umount").arg("-l").arg(&self.0));
        for p in std::iter::once(&self.0).chain(&self.1) {
            let _ = std::fs::remove_dir_all(p);
        }
    }
}

/// Restarts `d` with a tmpfs (`opts`, e.g. `size=16m`) over `dir` of its own: the
/// store or state it starts with there is empty.
fn restart_on_tmpfs(d: &mut Crustd, dir: &Path, opts: &str) -> Tmpfs {
    d.terminate();
    let fs = Tmpfs::mount(dir, opts);
    d.spawn();
    fs
}

/// `n` bytes nothing compresses (xorshift).
fn noise(n: usize, seed: u64) -> Vec<u8> {
    let mut v = vec![0u8; n];
    let mut x: u64 = 0x2545f4914f6cdd1d ^ seed;
    for b in v.iter_mut() {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        *b = x as u8;
    }
    v
}

/// Pushes an image of the one layer `layer` as `repo_tag`.
fn push(reg: &Registry, work: &Path, repo_tag: &str, layer: LayerBuilder) {
    let dir = work.join(repo_tag.replace(['/', ':'], "_"));
    cri::layout_of(&dir, repo_tag, layer);
    reg.push(&dir, "e2e", repo_tag);
}

async fn pull(d: &Crustd, name: &str) -> Result<String, tonic::Status> {
    d.images()
        .await
        .pull_image(PullImageRequest {
            image: Some(ImageSpec {
                image: name.into(),
                ..Default::default()
            }),
            ..Default::default()
        })
        .await
        .map(|r| r.into_inner().image_ref)
}

async fn image_tags(d: &Crustd) -> Vec<String> {
    d.images()
        .await
        .list_images(ListImagesRequest::default())
        .await
        .expect("ListImages")
        .into_inner()
        .images
        .into_iter()
        .flat_map(|i| i.repo_tags)
        .collect()
}

/// 40 ExecSync of `true` at once in container `id`: each must end within a minute,
/// in success or an error; the errors.
async fn exec_burst(c: &cri::Client, id: &str, limit: &str) -> Vec<tonic::Status> {
    let mut execs = Vec::new();
    for _ in 0..40 {
        let (mut c, id) = (c.clone(), id.to_string());
        execs.push(tokio::spawn(async move {
            tokio::time::timeout(
                Duration::from_secs(60),
                cri::exec_sync(&mut c, &id, &["true"], 30),
            )
            .await
        }));
    }
    let mut failed = Vec::new();
    for t in execs {
        match t.await.unwrap() {
            Err(_) => panic!("ExecSync hung at the {limit} limit"),
            Ok(Ok(r)) if r.exit_code == 0 => {}
            Ok(Ok(r)) => panic!("exec of `true` at the {limit} limit: {r:?}"),
            Ok(Err(s)) => failed.push(s),
        }
    }
    failed
}

/// The daemon still answers: Version and ListPodSandbox.
async fn assert_serving(d: &Crustd, what: &str) {
    let mut c = d.client().await;
    let v = c
        .version(VersionRequest::default())
        .await
        .unwrap_or_else(|e| panic!("{what}: Version: {e:?}"))
        .into_inner();
    assert_eq!(v.runtime_name, "crust", "{what}: {v:?}");
    c.list_pod_sandbox(ListPodSandboxRequest::default())
        .await
        .unwrap_or_else(|e| panic!("{what}: ListPodSandbox: {e:?}"));
}

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap()
}

/// Runs `f` to its end within `secs`: a hang fails the test.
fn bounded<T>(secs: u64, f: impl std::future::Future<Output = T>) -> T {
    rt().block_on(async {
        tokio::time::timeout(Duration::from_secs(secs), f)
            .await
            .expect("the test hung")
    })
}

/// A pull of an image larger than the store's filesystem fails with RESOURCE_EXHAUSTED
/// naming the store, records nothing and leaves no half-unpacked layer (the pull
/// removes its temp dir at once); the daemon keeps serving, a small image still pulls
/// and runs, and once the filesystem is bigger the same pull succeeds.
#[test]
fn full_image_store() {
    if !require_root(TOOLS) {
        return;
    }
    let t = TempDir::new("exh");
    let mut d = Crustd::start();
    let store = d.root.path().join("images");
    let mut fs = restart_on_tmpfs(&mut d, &store, "size=16m");
    fs.1 = Some(d.root.path().to_path_buf());
    let reg = Registry::start_with(None, Some(&d.node));
    push(
        &reg,
        t.path(),
        "exh/big:v1",
        LayerBuilder::new().file("noise", &noise(24 << 20, 1), 0o644),
    );
    push(&reg, t.path(), "exh/small:v1", cri::busybox_layer());
    let (big, small) = (reg.name("exh/big:v1"), reg.name("exh/small:v1"));
    let grow = &fs;
    let d = bounded(300, async move {
        let layers = dir_names(&store.join("layers"));
        let e = pull(&d, &big).await.unwrap_err();
        assert_eq!(e.code(), Code::ResourceExhausted, "{e:?}");
        let m = e.message();
        assert!(m.to_lowercase().contains("no space left"), "{m}");
        assert!(m.contains(&store.display().to_string()), "{m}");
        assert!(m.contains(&big), "{m}");
        // Nothing of it taken as whole, nothing half-written left.
        assert!(!image_tags(&d).await.contains(&big), "failed pull listed");
        let st = d
            .images()
            .await
            .image_status(ImageStatusRequest {
                image: Some(ImageSpec {
                    image: big.clone(),
                    ..Default::default()
                }),
                verbose: false,
            })
            .await
            .expect("ImageStatus")
            .into_inner();
        assert!(st.image.is_none(), "failed pull has a status: {st:?}");
        assert_eq!(dir_names(&store.join("tmp")), Vec::<String>::new());
        assert_eq!(dir_names(&store.join("layers")), layers, "layer left");
        assert_serving(&d, "after the failed pull").await;

        // A small image still pulls, and a container runs from it.
        let small_ref = pull(&d, &small).await.expect("small pull");
        assert!(image_tags(&d).await.contains(&small));
        let mut e = Env {
            c: d.client().await,
            d,
            logs: TempDir::new("logs"),
        };
        let pod = e.pod("exh").await;
        let mut cfg = cri::ctr("app", &["sh", "-c", "echo ran"]);
        cfg.image = Some(ImageSpec {
            image: small.clone(),
            ..Default::default()
        });
        let id = e.create(&pod, cfg).await;
        e.start(&id).await;
        let s = e.wait_exited(&id).await;
        assert_eq!(s.exit_code, 0, "{s:?}");
        assert_eq!(s.image_id, small_ref);
        e.remove(&id).await;
        e.remove_pod(&pod.0).await;

        // Space back: the big pull succeeds and is whole.
        grow.remount("size=64m");
        let r = pull(&e.d, &big).await.expect("big pull after growing");
        assert!(r.starts_with("sha256:"), "{r}");
        assert!(image_tags(&e.d).await.contains(&big));
        assert_eq!(dir_names(&store.join("tmp")), Vec::<String>::new());
        e.d
    });
    // The daemon goes before its store's filesystem.
    drop(d);
    drop(fs);
}

/// Fills `dir` to the last block and the last inode; returns the fillers' folder.
fn fill(dir: &Path) -> PathBuf {
    let fill = dir.join("filler");
    std::fs::create_dir(&fill).unwrap();
    let mut f = std::fs::File::create(fill.join("blocks")).unwrap();
    let chunk = vec![0xa5u8; 64 << 10];
    loop {
        match f.write(&chunk) {
            Ok(0) => break,
            Ok(_) => {}
            Err(e) if e.raw_os_error() == Some(libc::ENOSPC) => break,
            Err(e) => panic!("filling {}: {e}", dir.display()),
        }
    }
    // Then the small writes a page-sized block leaves room for, and the inodes.
    for i in 0.. {
        match std::fs::File::create(fill.join(format!("i{i}"))) {
            Ok(mut f) => {
                let _ = f.write(b"x");
            }
            Err(e) if e.raw_os_error() == Some(libc::ENOSPC) => break,
            Err(e) => panic!("filling {}: {e}", dir.display()),
        }
    }
    fill
}

/// An error that says what is full and where: RESOURCE_EXHAUSTED, "no space left" and
/// a path in `dir`.
fn assert_clear(err: &tonic::Status, dir: &Path, what: &str) {
    assert_eq!(err.code(), Code::ResourceExhausted, "{what}: {err:?}");
    let m = err.message();
    assert!(
        m.to_lowercase().contains("no space left") && m.contains(&dir.display().to_string()),
        "{what}: unclear error on a full filesystem: {err:?}"
    );
}

/// With crustd's state filesystem full, RunPodSandbox and CreateContainer fail with a
/// clear error and roll back what they made; the daemon keeps serving; once the
/// fillers are gone a pod runs.
#[test]
fn full_state_filesystem() {
    if !require_root(&["busybox"]) {
        return;
    }
    let mut d = Crustd::start();
    let state = d.state.path().to_path_buf();
    // Room for the daemon's socket and its pause and monitor binaries; few inodes, so
    // the fillers can take them all quickly.
    let fs = restart_on_tmpfs(&mut d, &state, "size=64m,nr_inodes=4096");
    let d = bounded(180, async move {
        let mut e = Env::with(d).await;
        let empty = e.d.leftovers();

        // RunPodSandbox on a full state filesystem.
        let filler = fill(&state);
        let cfg = cri::pod_config("full", "default", e.logs.path());
        let r = cri::run_pod(&mut e.c, &cfg).await;
        let err = r.expect_err("RunPodSandbox on a full state filesystem");
        assert_clear(&err, &state, "RunPodSandbox");
        assert_eq!(
            cri::list_pods(&mut e.c).await,
            Vec::<PodSandbox>::new(),
            "half-made pod listed"
        );
        assert_serving(&e.d, "after the failed RunPodSandbox").await;
        std::fs::remove_dir_all(&filler).unwrap();
        // The rollback left nothing (the fillers gone, as before it).
        assert_eq!(e.d.leftovers(), empty, "{}", e.d.log_text());

        // A pod made with room; CreateContainer in it once the filesystem is full.
        let pod = e.pod("full").await;
        let filler = fill(&state);
        let err = e
            .try_create(&pod, cri::ctr("app", &["sleep", "60"]))
            .await
            .expect_err("CreateContainer on a full state filesystem");
        assert_clear(&err, &state, "CreateContainer");
        assert_eq!(
            cri::list_containers(&mut e.c).await,
            Vec::<Container>::new(),
            "half-made container listed"
        );
        assert_eq!(cri::container_dirs(&e.d), Vec::<String>::new());
        assert_eq!(cri::snapshots(&e.d), 0, "snapshot left");
        assert_serving(&e.d, "after the failed CreateContainer").await;
        let st = cri::pod_status(&mut e.c, &pod.0).await.expect("PodStatus");
        assert_eq!(st.state, PodSandboxState::SandboxReady as i32, "{st:?}");

        // Room again: the same pod runs a container, and all goes away cleanly.
        std::fs::remove_dir_all(&filler).unwrap();
        let id = e.create(&pod, cri::ctr("app", &["sleep", "60"])).await;
        e.start(&id).await;
        cri::exec_true(&mut e.c, &id, 10, "after the fillers went").await;
        e.remove_pod(&pod.0).await;
        e.d.assert_clean(&empty, "full_state_filesystem");
        e.d
    });
    // The daemon goes before its state's filesystem.
    drop(d);
    drop(fs);
}

/// Lowers `pid`'s soft RLIMIT_NOFILE to `n` (the hard one stays: raising it back
/// would need CAP_SYS_RESOURCE); returns the old limit.
fn set_nofile(pid: i32, n: u64) -> libc::rlimit {
    let mut old = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: a valid pointer to an rlimit; the pid is our own child's.
    let r = unsafe { libc::prlimit(pid, libc::RLIMIT_NOFILE, std::ptr::null(), &mut old) };
    assert_eq!(r, 0, "prlimit: {}", std::io::Error::last_os_error());
    let new = libc::rlimit {
        rlim_cur: n,
        rlim_max: old.rlim_max,
    };
    // SAFETY: as above.
    let r = unsafe { libc::prlimit(pid, libc::RLIMIT_NOFILE, &new, std::ptr::null_mut()) };
    assert_eq!(r, 0, "prlimit: {}", std::io::Error::last_os_error());
    old
}

fn restore_nofile(pid: i32, old: libc::rlimit) {
    // SAFETY: as in set_nofile.
    let r = unsafe { libc::prlimit(pid, libc::RLIMIT_NOFILE, &old, std::ptr::null_mut()) };
    assert_eq!(r, 0, "prlimit: {}", std::io::Error::last_os_error());
}

fn open_fds(pid: i32) -> u64 {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .unwrap()
        .count() as u64
}

/// crustd at its fd limit (RLIMIT_NOFILE lowered to a few more than it holds) under a
/// burst of ExecSync: each call ends (no hang) with success or an error that names the
/// cause ("Too many open files"), the running container stays running (a /proc read
/// that failed with EMFILE once took it for exited and killed it), and once the burst
/// is over the daemon serves new connections and calls.
#[test]
fn fd_limit() {
    if !require_root(&["busybox"]) {
        return;
    }
    let d = bounded(240, async {
        let mut e = Env::with(Crustd::start()).await;
        let empty = e.d.leftovers();
        let pod = e.pod("fds").await;
        let id = e.create(&pod, cri::ctr("app", &["sleep", "600"])).await;
        e.start(&id).await;
        cri::exec_true(&mut e.c, &id, 10, "before the burst").await;
        let pid = e.d.pid().unwrap() as i32;
        let base = open_fds(pid);
        let old = set_nofile(pid, base + 32);

        let failed = exec_burst(&e.c, &id, "fd").await;
        assert!(
            e.d.running(),
            "crustd died at the fd limit:\n{}",
            e.d.log_text()
        );
        assert!(
            !failed.is_empty(),
            "nothing failed: the limit was not reached"
        );
        for s in &failed {
            let m = s.message().to_lowercase();
            assert!(
                m.contains("too many open files") || m.contains("emfile"),
                "unclear error at the fd limit: {s:?}"
            );
            assert_eq!(s.code(), Code::ResourceExhausted, "{s:?}");
        }

        let (st, _) = e.status(&id).await;
        assert_eq!(
            st.state,
            ContainerState::ContainerRunning as i32,
            "the container did not survive its daemon's fd limit: {st:?}"
        );
        // The burst over (the limit still low): new connections and calls are served.
        assert_serving(&e.d, "after the burst").await;
        cri::exec_true(&mut e.d.client().await, &id, 10, "after the burst").await;
        restore_nofile(pid, old);
        e.remove_pod(&pod.0).await;
        e.d.assert_clean(&empty, "fd_limit");
        e.d
    });
    drop(d);
}

/// crustd at a pid limit (moved into a pids cgroup allowing a few tasks more than it
/// has) under a burst of ExecSync and a RunPodSandbox: each call ends (no hang) with
/// success or an error that names the cause (EAGAIN, "Resource temporarily
/// unavailable"), the daemon does not die (crust's own helper threads are refused
/// too: the work runs in turn, no panic skips a rollback), the running container
/// stays running, a pod that could not be made is rolled back or NOTREADY and leaves
/// nothing once removed, and once the limit is lifted the same calls succeed.
#[test]
fn pid_limit() {
    use cgroups::CgroupManager;
    if !require_root(&["busybox"]) {
        return;
    }
    let d = bounded(240, async {
        let mut e = Env::with(Crustd::start()).await;
        let empty = e.d.leftovers();
        let pod = e.pod("pids").await;
        let id = e.create(&pod, cri::ctr("app", &["sleep", "600"])).await;
        e.start(&id).await;
        cri::exec_true(&mut e.c, &id, 10, "before the limit").await;
        let before_pod = e.d.leftovers();

        let h = cgroups::Hierarchy::detect()
            .unwrap()
            .nested_in_own_cgroup()
            .unwrap();
        let cg = cgroups::CgroupPath::new(&format!("/{}", crust_e2e::unique("pids-"))).unwrap();
        h.create(&cg).unwrap();
        let pid = e.d.pid().unwrap() as i32;
        let own = h.dir("pids", &cgroups::CgroupPath::root()).unwrap();
        let limited = h.dir("pids", &cg).unwrap();
        // Only the pids hierarchy (v1): crustd's other cgroups stay as they are.
        std::fs::write(limited.join("cgroup.procs"), pid.to_string()).unwrap();
        let tasks = std::fs::read_to_string(limited.join("pids.current"))
            .unwrap()
            .trim()
            .parse::<u64>()
            .unwrap();
        std::fs::write(limited.join("pids.max"), (tasks + 3).to_string()).unwrap();

        let failed = exec_burst(&e.c, &id, "pid").await;
        let run = tokio::time::timeout(
            Duration::from_secs(60),
            cri::run_pod(
                &mut e.c,
                &cri::pod_config("refused", "default", e.logs.path()),
            ),
        )
        .await
        .expect("RunPodSandbox hung at the pid limit");
        assert!(
            e.d.running(),
            "crustd died at the pid limit:\n{}",
            e.d.log_text()
        );
        assert!(
            !failed.is_empty(),
            "nothing failed: the limit was not reached"
        );
        let clear = |s: &tonic::Status| {
            let m = s.message().to_lowercase();
            // A panic's message may name the cause too; a panic skips rollbacks.
            (m.contains("resource temporarily unavailable") || m.contains("eagain"))
                && !m.contains("panicked")
                && s.code() == Code::ResourceExhausted
        };
        for s in &failed {
            assert!(clear(s), "unclear error at the pid limit: {s:?}");
        }
        eprintln!(
            "{} of 40 ExecSync refused, e.g. {:?}",
            failed.len(),
            failed[0]
        );
        match &run {
            Ok(id) => eprintln!("RunPodSandbox succeeded at the limit: {id}"),
            Err(s) => {
                eprintln!("RunPodSandbox at the limit: {s:?}");
                assert!(
                    clear(s),
                    "unclear RunPodSandbox error at the pid limit: {s:?}"
                )
            }
        }
        let (st, _) = e.status(&id).await;
        assert_eq!(
            st.state,
            ContainerState::ContainerRunning as i32,
            "the container did not survive its daemon's pid limit: {st:?}"
        );

        // The limit lifted: back where it was, and the same calls succeed.
        std::fs::write(own.join("cgroup.procs"), pid.to_string()).unwrap();
        h.remove(&cg).unwrap();
        assert_serving(&e.d, "after the limit").await;
        if run.is_err() {
            // Refused: rolled back, or (its rollback refused a process too: the CNI
            // DEL) kept as NOTREADY for the kubelet to remove, as containerd keeps it.
            for p in cri::list_pods(&mut e.c).await {
                if p.id != pod.0 {
                    assert_eq!(
                        p.state,
                        PodSandboxState::SandboxNotready as i32,
                        "a refused pod is listed as ready: {p:?}"
                    );
                    e.remove_pod(&p.id).await;
                }
            }
            assert_eq!(
                e.d.leftovers(),
                before_pod,
                "the refused pod left something"
            );
        }
        cri::exec_true(&mut e.c, &id, 10, "after the limit").await;
        let again = e.pod("again").await;
        e.remove_pod(&again.0).await;
        if let Ok(other) = run {
            e.remove_pod(&other).await;
        }
        e.remove_pod(&pod.0).await;
        e.d.assert_clean(&empty, "pid_limit");
        e.d
    });
    drop(d);
}
