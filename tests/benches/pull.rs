//! PullImage of a ~100 MB multi-layer image from a local registry: `crustd` against
//! containerd 1.6 (its CRI plugin, overlayfs snapshotter) on the same machine in one
//! run, through the same CRI client. Run as root through `hack/bench.d/pull`, or
//! `cargo bench -p crust-e2e --bench pull`. `BENCH_ROUNDS` pulls per daemon (default 3);
//! `BENCH_VERBOSE=1` also prints crustd's per-layer timings; `BENCH_SIDES=crust` leaves
//! containerd out (to look at crustd alone).
//!
//! Both daemons and a `docker-registry` run in one node network namespace the bench
//! makes (crustd's, from the test harness); the registry holds one image of five gzip
//! layers of about 20 MB each (many small files of text-like data, so compression and
//! per-file work both count), pushed with `skopeo`. A round, for each daemon in turn:
//! `sync` (so neither pays for the other's writeback), reset the daemon's peak RSS (`/proc/PID/clear_refs`), PullImage, read the peak
//! (`VmHWM`), RemoveImage, and wait until the layers are really gone from the disk
//! (containerd deletes snapshot directories in the background). The daemons' order
//! alternates from round to round, so neither always pulls right after the other's
//! removal. Both image stores (crustd's `--root`, containerd's root) are temp dirs on the
//! same filesystem (`$TMPDIR`, see `hack/bench.d/pull`); both volatile states (crustd's
//! `--state`, containerd's `state`) on a tmpfs each, as `/run` is on a node. Reported:
//! the median wall time of PullImage as the client sees it, and the median peak RSS of
//! the daemon during the pull (and its RSS before), with crust/containerd ratios.

use cri_api::*;
use crust_e2e::crustd::{Crustd, Options};
use crust_e2e::registry::Registry;
use crust_e2e::{enter_netns, require_root, which, TempDir};
use image::layout::{write_oci_layout, Compression, LayerBuilder, LayoutEntry, LayoutImage};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const LAYERS: usize = 5;
const LAYER_BYTES: usize = 20 << 20;
const FILE_BYTES: usize = 16 << 10;

/// Text-like, compressible about 3:1 with gzip: words from a small vocabulary.
fn layer(seed: u64) -> Vec<u8> {
    const WORDS: &[&str] = &[
        "container",
        "runtime",
        "kubelet",
        "layer",
        "overlay",
        "digest",
        "manifest",
        "pod",
        "sandbox",
        "namespace",
        "cgroup",
        "registry",
        "mirror",
        "snapshot",
        "crust",
        "the",
        "of",
        "and",
        "a",
        "to",
        "in",
        "is",
        "for",
        "on",
        "with",
        "node",
        "image",
        "pull",
    ];
    let mut x = seed | 1;
    let mut next = || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    let mut b = LayerBuilder::new().dir(&format!("data{seed}"), 0o755);
    let mut total = 0;
    let mut i = 0;
    while total < LAYER_BYTES {
        let mut f = String::with_capacity(FILE_BYTES + 16);
        while f.len() < FILE_BYTES {
            let n = next();
            f.push_str(WORDS[(n % WORDS.len() as u64) as usize]);
            f.push(if n % 11 == 0 { '\n' } else { ' ' });
            if n % 97 == 0 {
                f.push_str(&format!("{:x} ", n));
            }
        }
        b = b.file(
            &format!("data{seed}/d{}/f{i}.txt", i / 100),
            f.as_bytes(),
            0o644,
        );
        total += f.len();
        i += 1;
    }
    b.finish()
}

/// Peak RSS since the last reset, and RSS now (KiB).
fn hwm(pid: u32) -> (u64, u64) {
    let text = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let f = |k: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(k))
            .and_then(|v| v.split_whitespace().next())
            .and_then(|v| v.parse().ok())
            .unwrap_or(0)
    };
    (f("VmHWM:"), f("VmRSS:"))
}

fn reset_hwm(pid: u32) {
    let _ = std::fs::write(format!("/proc/{pid}/clear_refs"), "5");
}

struct Containerd {
    dir: TempDir,
    /// containerd's state, on a tmpfs as crustd's `--state` is (kept until the drop).
    _run: TempDir,
    socket: PathBuf,
    child: Child,
}

impl Containerd {
    fn start(node: &Path, registry: &str) -> Result<Containerd, String> {
        for t in ["containerd", "ctr"] {
            if which(t).is_none() {
                return Err(format!("`{t}` not found (apt-get install -y containerd)"));
            }
        }
        let dir = TempDir::new("bpc");
        let run = TempDir::tmpfs("bpr");
        let d = dir.path().display();
        let certs = dir.path().join("certs.d").join(registry);
        std::fs::create_dir_all(&certs).unwrap();
        std::fs::write(
            certs.join("hosts.toml"),
            format!("server = \"http://{registry}\"\n"),
        )
        .unwrap();
        let socket = dir.path().join("containerd.sock");
        let config = format!(
            r#"version = 2
root = "{d}/root"
state = "{run}/state"
disabled_plugins = ["io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs",
  "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.zfs"]
[grpc]
  address = "{sock}"
[ttrpc]
  address = "{sock}.ttrpc"
[plugins."io.containerd.grpc.v1.cri"]
  disable_tcp_service = true
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
  [plugins."io.containerd.grpc.v1.cri".cni]
    conf_dir = "{d}/net.d"
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
  [plugins."io.containerd.grpc.v1.cri".registry]
    config_path = "{d}/certs.d"
"#,
            sock = socket.display(),
            run = run.path().display()
        );
        std::fs::write(dir.path().join("config.toml"), config).unwrap();
        let log = std::fs::File::create(dir.path().join("containerd.log")).unwrap();
        let mut cmd = Command::new("containerd");
        cmd.arg("--config")
            .arg(dir.path().join("config.toml"))
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log);
        let child = std::thread::scope(|s| {
            s.spawn(|| {
                enter_netns(node);
                cmd.spawn()
            })
            .join()
            .unwrap()
        })
        .map_err(|e| format!("spawning containerd: {e}"))?;
        let c = Containerd {
            dir,
            _run: run,
            socket,
            child,
        };
        let deadline = Instant::now() + Duration::from_secs(30);
        while std::os::unix::net::UnixStream::connect(&c.socket).is_err() {
            if Instant::now() > deadline {
                return Err(format!(
                    "containerd did not serve within 30 s: {}",
                    std::fs::read_to_string(c.dir.path().join("containerd.log"))
                        .unwrap_or_default()
                ));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        Ok(c)
    }
}

impl Drop for Containerd {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        // overlayfs snapshots are not mounted by a pull; the temp dir goes with `dir`.
    }
}

struct Side {
    name: &'static str,
    socket: PathBuf,
    pid: u32,
    /// Empty once the daemon has really deleted what RemoveImage removed (containerd
    /// removes snapshot directories in the background).
    settle: PathBuf,
    walls: Vec<Duration>,
    peaks: Vec<u64>,
    before: Vec<u64>,
}

async fn round(side: &mut Side, reference: &str) -> Result<(), String> {
    let ch = cri_api::connect_unix(&side.socket)
        .await
        .map_err(|e| e.to_string())?;
    let mut c = ImageServiceClient::new(ch);
    let spec = Some(ImageSpec {
        image: reference.to_string(),
        ..Default::default()
    });
    // Neither daemon pays for the other's writeback.
    let _ = Command::new("sync").status();
    reset_hwm(side.pid);
    let (_, rss_before) = hwm(side.pid);
    let t = Instant::now();
    c.pull_image(PullImageRequest {
        image: spec.clone(),
        ..Default::default()
    })
    .await
    .map_err(|e| format!("{} PullImage: {e:?}", side.name))?;
    let wall = t.elapsed();
    let (peak, _) = hwm(side.pid);
    c.remove_image(RemoveImageRequest { image: spec })
        .await
        .map_err(|e| format!("{} RemoveImage: {e:?}", side.name))?;
    let deadline = Instant::now() + Duration::from_secs(120);
    while std::fs::read_dir(&side.settle)
        .map(|r| r.count())
        .unwrap_or(0)
        > 0
    {
        if Instant::now() > deadline {
            return Err(format!(
                "{}: {} not emptied after RemoveImage",
                side.name,
                side.settle.display()
            ));
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    side.walls.push(wall);
    side.peaks.push(peak);
    side.before.push(rss_before);
    println!(
        "  {:<10} pull {:>8.0} ms   peak RSS {:>7} KiB (before {:>7} KiB)",
        side.name,
        wall.as_secs_f64() * 1000.0,
        peak,
        rss_before
    );
    Ok(())
}

fn median<T: Copy + PartialOrd>(v: &[T]) -> T {
    let mut s = v.to_vec();
    s.sort_by(|a, b| a.partial_cmp(b).unwrap());
    s[s.len() / 2]
}

fn main() {
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    if !require_root(&["docker-registry", "skopeo", "nsenter"]) {
        return;
    }
    let rounds: usize = std::env::var("BENCH_ROUNDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(3);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    let crust = Crustd::start_with(Options {
        cni_conf: false,
        subnet: 92,
        extra_args: vec![],
        state_on_tmpfs: true,
        ..Default::default()
    });
    let reg = Registry::start_with(None, Some(&crust.node));

    let work = TempDir::new("bpl");
    let t = Instant::now();
    let layers: Vec<(Vec<u8>, Compression)> = (0..LAYERS as u64)
        .map(|i| (layer(i + 1), Compression::Gzip))
        .collect();
    let raw: usize = layers.iter().map(|l| l.0.len()).sum();
    let mut img = LayoutImage::new(layers);
    img.config.cmd = vec!["/bin/sh".into()];
    write_oci_layout(
        &work.path().join("layout"),
        &[LayoutEntry {
            ref_name: Some("img".into()),
            image_name: None,
            platforms: vec![img],
        }],
    );
    reg.push(&work.path().join("layout"), "img", "bench/big:v1");
    let reference = reg.name("bench/big:v1");
    let blobs: u64 = std::fs::read_dir(work.path().join("layout/blobs/sha256"))
        .unwrap()
        .flatten()
        .map(|e| e.metadata().unwrap().len())
        .sum();
    println!(
        "image {reference}: {LAYERS} gzip layers, {:.0} MB uncompressed, {:.0} MB compressed, {} files of {} KiB (built and pushed in {:.1} s)",
        raw as f64 / 1e6,
        blobs as f64 / 1e6,
        raw / FILE_BYTES,
        FILE_BYTES >> 10,
        t.elapsed().as_secs_f64()
    );
    drop(work);

    let mut sides = vec![Side {
        name: "crust",
        socket: crust.socket.clone(),
        pid: crust.pid().unwrap(),
        settle: crust.root.path().join("images/layers"),
        walls: vec![],
        peaks: vec![],
        before: vec![],
    }];
    let only_crust = std::env::var("BENCH_SIDES").is_ok_and(|v| v == "crust");
    let containerd = match Containerd::start(&crust.node.path(), &reg.addr) {
        _ if only_crust => None,
        Ok(c) => Some(c),
        Err(e) => {
            println!("\n!!!!! containerd SKIPPED: {e}\n!!!!! measuring crustd alone\n");
            None
        }
    };
    if let Some(c) = &containerd {
        sides.push(Side {
            name: "containerd",
            socket: c.socket.clone(),
            pid: c.child.id(),
            settle: c
                .dir
                .path()
                .join("root/io.containerd.snapshotter.v1.overlayfs/snapshots"),
            walls: vec![],
            peaks: vec![],
            before: vec![],
        });
        println!(
            "containerd: {}",
            String::from_utf8_lossy(
                &Command::new("containerd")
                    .arg("--version")
                    .output()
                    .unwrap()
                    .stdout
            )
            .trim()
        );
    }
    for r in 0..rounds {
        println!("round {}", r + 1);
        // Order alternated: crust first in odd rounds, containerd first in even ones.
        let n = sides.len();
        for k in 0..n {
            let s = &mut sides[if r % 2 == 0 { k } else { n - 1 - k }];
            if let Err(e) = rt.block_on(round(s, &reference)) {
                panic!("{e}\n{}", crust.log_text());
            }
        }
    }
    println!("\nmedian of {rounds} pulls:");
    for s in &sides {
        println!(
            "  {:<10} wall {:>8.0} ms   peak RSS {:>7} KiB   RSS before {:>7} KiB",
            s.name,
            median(&s.walls).as_secs_f64() * 1000.0,
            median(&s.peaks),
            median(&s.before)
        );
    }
    if std::env::var_os("BENCH_VERBOSE").is_some() {
        println!("\ncrustd's log of the pulls:");
        for l in crust
            .log_text()
            .lines()
            .filter(|l| l.contains("layer") || l.contains("PullImage"))
        {
            println!("  {l}");
        }
    }
    if sides.len() == 2 {
        let (c, d) = (&sides[0], &sides[1]);
        println!(
            "crust/containerd: wall time {:.2}  peak RSS {:.2}  (below 1: crust is faster / smaller)",
            median(&c.walls).as_secs_f64() / median(&d.walls).as_secs_f64(),
            median(&c.peaks) as f64 / median(&d.peaks) as f64
        );
    }
}
