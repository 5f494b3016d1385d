//! `crustlet`: a thin kubelet. It registers its Node, takes the pods bound to it from
//! the apiserver (and static pods from a folder of manifests), and runs each through
//! any CRI runtime (crustd by default), reporting their status back. See the README.

mod admit;
mod cgroup;
mod config;
mod cri;
mod ephemeral;
mod events;
mod gc;
mod http_get;
mod inputs;
mod node;
mod pods;
mod probe;
mod quantity;
mod routes;
mod server;
mod services;
mod spec;
mod tmpfs;
mod worker;

use clap::Parser;
use k8s_openapi::api::core::v1::Pod;
use std::sync::Arc;

/// What every pod worker shares.
pub struct Ctx {
    pub cfg: Arc<config::Config>,
    pub cri: cri::Cri,
    pub client: Option<kube::Client>,
    /// The cluster's Services, for the containers' service variables.
    pub services: Option<services::Services>,
    pub node_ip: String,
    pub node_memory: i64,
    recorder: Option<Arc<events::Recorder>>,
    /// The pods as their workers last synced them, and counters, for the HTTPS server.
    pub seen: server::Seen,
    /// The host ports of the admitted pods (admission's port check).
    pub ports: admit::HostPorts,
}

impl Ctx {
    /// Posts an event about `pod` in the background (an apiserver that is slow or gone
    /// must not hold a pod worker up).
    pub fn event(&self, pod: &Pod, warning: bool, reason: &str, note: String) {
        tracing::debug!(pod = %spec::key(pod), reason, "{note}");
        let Some(rec) = self.recorder.clone() else {
            return;
        };
        let mut reference = kube::Resource::object_ref(pod, &());
        // Events of static pods go to their mirror pods, which have other uids.
        if self.source(pod) == "file" {
            reference.uid = None;
        }
        let note: String = note.chars().take(1024).collect();
        let reason = reason.to_string();
        tokio::spawn(async move {
            if let Err(e) = rec.publish(&reference, warning, &reason, &note).await {
                tracing::debug!("event: {e}");
            }
        });
    }

    /// `api` or `file` (a static pod).
    pub fn source(&self, pod: &Pod) -> &'static str {
        let file = pod
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(pods::SOURCE))
            .is_some_and(|s| s == "file");
        if file {
            "file"
        } else {
            "api"
        }
    }
}

fn main() -> std::process::ExitCode {
    server::metrics::note_start();
    let flags = config::Flags::parse();
    let (cfg, server_cfg) = match config::Config::resolve_all(flags) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("crustlet: {e:#}");
            return std::process::ExitCode::from(2);
        }
    };
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::new(&cfg.log_filter))
        .with_writer(std::io::stderr)
        .init();
    limit_malloc_arenas();
    // A worker per core, not one thread: a pod worker's file system calls and the
    // server's disk usage walks (/stats/summary) block the thread they run on.
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .on_thread_park(trim_idle_stack)
        .build()
        .expect("tokio runtime");
    match rt.block_on(run(Arc::new(cfg), server_cfg)) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            tracing::error!("{e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

/// glibc gives each thread that allocates its own heap ("arena", up to 8 per core),
/// each keeping its own free memory (a second arena held 1.8 MiB with 30 pods); the
/// crustlet allocates little and seldom from several threads at once, so all of its
/// threads share the one heap.
fn limit_malloc_arenas() {
    // SAFETY: mallopt only sets a malloc parameter; called before any thread starts.
    unsafe { libc::mallopt(libc::M_ARENA_MAX, 1) };
}

/// Hands the memory malloc keeps free back to the kernel every 30 s (by itself glibc
/// returns only free memory at the top of a heap): what a burst of pods or an `exec`
/// allocated does not stay resident while the node is quiet.
async fn trim_malloc() {
    let mut tick = tokio::time::interval(std::time::Duration::from_secs(30));
    loop {
        tick.tick().await;
        // SAFETY: malloc_trim has no preconditions.
        unsafe { libc::malloc_trim(0) };
    }
}

/// How long after its start the crustlet lets go of the pages of its executable: by then
/// the start (flags, kubeconfig, TLS, registration, the first list of pods and their
/// adoption) is over.
const START_SECS: u64 = 60;

/// Lets go of the executable's read-only pages (its code and constants) that the process
/// has mapped, so that what only the start used stops counting as the crustlet's memory;
/// what the node's round runs is mapped again at its first use, from the page cache (a
/// minor fault per 64 KiB, no disk read). Returns the bytes of mappings let go.
///
/// Why: the kernel maps a file's pages 64 KiB at a time around each page touched, and the
/// start touches far more than the round does: argument parsing, the kubeconfig's YAML,
/// TLS set-up and the first sync read constants from all over the 1.6 MB of read-only
/// data (22 of its 25 windows of 64 KiB, 1.3 MiB) and run code that never runs again.
/// Only read-only segments that are the file's own content are let go (`MADV_DONTNEED`
/// re-reads them as they were): the writable ones, and the relocated tables made
/// read-only after start (RELRO, inside a writable segment), are left alone. Once only,
/// `START_SECS` after start: the pages the round uses stay mapped for good.
fn release_read_only_segments() -> usize {
    /// Called for each loaded object, the executable first; stops after it.
    unsafe extern "C" fn each(
        info: *mut libc::dl_phdr_info,
        _size: libc::size_t,
        data: *mut libc::c_void,
    ) -> libc::c_int {
        // SAFETY: dl_iterate_phdr passes a valid info for the call's duration, whose
        // dlpi_phdr points at dlpi_phnum program headers; data is the usize below.
        let (info, released) = unsafe { (&*info, &mut *data.cast::<usize>()) };
        let phdrs = if info.dlpi_phdr.is_null() {
            &[][..]
        } else {
            // SAFETY: see above.
            unsafe { std::slice::from_raw_parts(info.dlpi_phdr, usize::from(info.dlpi_phnum)) }
        };
        let page = page_size() as u64;
        for ph in phdrs {
            if ph.p_type != libc::PT_LOAD || ph.p_flags & libc::PF_W != 0 || ph.p_memsz == 0 {
                continue;
            }
            let start = (info.dlpi_addr + ph.p_vaddr) & !(page - 1);
            let end = (info.dlpi_addr + ph.p_vaddr + ph.p_memsz).div_ceil(page) * page;
            // SAFETY: [start, end) is a read-only segment of the executable, mapped from
            // its file and never written (segments of different permissions never share
            // a page), so its pages read back as they are now; nothing is unmapped.
            let r = unsafe {
                libc::madvise(
                    start as *mut libc::c_void,
                    (end - start) as usize,
                    libc::MADV_DONTNEED,
                )
            };
            if r == 0 {
                *released += (end - start) as usize;
            }
        }
        1
    }
    let mut released = 0usize;
    // SAFETY: `each` only reads what it is given and writes the usize passed as data.
    unsafe { libc::dl_iterate_phdr(Some(each), (&raw mut released).cast()) };
    released
}

async fn run(cfg: Arc<config::Config>, server_cfg: config::ServerConfig) -> anyhow::Result<()> {
    node::status::set_thresholds(cfg.eviction_hard);
    tokio::spawn(trim_malloc());
    let cri = cri::Cri::lazy(&cfg.runtime_socket);
    let client = match &cfg.kubeconfig {
        Some(path) => {
            let kc = kube::config::Kubeconfig::read_from(path)?;
            let c = kube::Config::from_custom_kubeconfig(kc, &Default::default()).await?;
            Some(kube::Client::try_from(c)?)
        }
        None => None,
    };
    std::fs::create_dir_all(cfg.root_dir.join("pods"))?;
    // The Node's InternalIP, which is also every pod's hostIP.
    let node_ip = node::node_ip(&cfg).unwrap_or_else(|| "127.0.0.1".into());
    let recorder = client
        .clone()
        .map(|c| Arc::new(events::Recorder::new(c, cfg.node_name.clone())));
    node::KUBELET_PORT.store(
        i32::from(server_cfg.port),
        std::sync::atomic::Ordering::Relaxed,
    );
    if let Some(client) = client.clone() {
        if cfg.pod_routes {
            routes::start(client.clone(), cfg.node_name.clone());
        }
        tokio::spawn(node::run(cfg.clone(), client, cri.clone()));
    }
    tracing::info!(node = %cfg.node_name, runtime = %cfg.runtime_socket.display(), "crustlet starting");
    {
        // The cgroup driver and the node's pod cgroups, as soon as the runtime answers.
        let (cfg, cri) = (cfg.clone(), cri.clone());
        tokio::spawn(async move {
            while let Err(e) = cgroup::ready(&cfg, &cri).await {
                tracing::debug!("{e}");
                tokio::time::sleep(std::time::Duration::from_secs(1)).await;
            }
        });
    }
    let ctx = Arc::new(Ctx {
        cfg: cfg.clone(),
        cri,
        services: client.clone().map(services::Services::start),
        client,
        node_ip,
        node_memory: node::memory_capacity(),
        recorder,
        seen: Default::default(),
        ports: Default::default(),
    });
    server::start(ctx.clone(), server_cfg).await?;
    // SIGTERM and SIGINT end the crustlet; its pods keep running in the runtime and are
    // adopted by the next start, as the kubelet's are.
    use tokio::signal::unix::{signal, SignalKind};
    let mut term = signal(SignalKind::terminate())?;
    let mut int = signal(SignalKind::interrupt())?;
    // The pods' watch and the GC run on the runtime's workers, not on this (the main)
    // thread, whose stack then only ever holds the start's frames (let go below).
    let mut pods = tokio::spawn(pods::run(ctx.clone()));
    let mut gc = tokio::spawn(gc::run(ctx));
    // Once the start is over, on this thread: let go of what only the start used.
    let start_over = async {
        tokio::time::sleep(std::time::Duration::from_secs(START_SECS)).await;
        let kib = release_read_only_segments() / 1024;
        trim_stack();
        tracing::debug!("let go of the start's pages ({kib} KiB of read-only mappings)");
        std::future::pending::<()>().await
    };
    tokio::select! {
        // (Neither ends but by a panic, which ends the crustlet as it did on this thread.)
        r = &mut pods => r.map_err(|e| anyhow::anyhow!("the pods' loop: {e}"))?,
        r = &mut gc => r.map_err(|e| anyhow::anyhow!("the garbage collector: {e}"))?,
        _ = start_over => {}
        _ = term.recv() => tracing::info!("SIGTERM: stopping; pods keep running"),
        _ = int.recv() => tracing::info!("SIGINT: stopping; pods keep running"),
    }
    Ok(())
}

/// How often a runtime worker lets go of the unused part of its stack, at most.
const STACK_TRIM_SECS: u64 = 30;

/// Run by each runtime worker as it goes idle: at most every `STACK_TRIM_SECS`, lets
/// go of the part of its stack below the frames in use (`trim_stack`).
fn trim_idle_stack() {
    use std::cell::Cell;
    use std::time::{Duration, Instant};
    thread_local!(static LAST: Cell<Option<Instant>> = const { Cell::new(None) });
    let now = Instant::now();
    let due = LAST.with(|last| match last.get() {
        Some(t) if now.duration_since(t) < Duration::from_secs(STACK_TRIM_SECS) => false,
        _ => {
            last.set(Some(now));
            true
        }
    });
    if due {
        trim_stack();
    }
}

/// Lets go of the pages of the calling thread's stack below its current frame (less a
/// margin for the calls this makes), as Go's runtime shrinks its stacks.
///
/// Why: a thread's stack keeps every page its deepest call ever touched: reading a list
/// of pods with serde or the start's set-up goes 140-160 KiB deep, while an idle worker
/// needs a few KiB; the crustlet has three such stacks (0.5 MiB of its 3 MiB of
/// anonymous memory). Pages below the stack pointer hold only dead frames, so they can
/// go (`MADV_DONTNEED`: read again as zeros, should a deep call come back).
fn trim_stack() {
    /// Kept below the current frame: what this function's own calls (madvise) use.
    const MARGIN: usize = 16 * 1024;
    let here = std::hint::black_box(0u8);
    let sp = std::ptr::addr_of!(here) as u64;
    let Ok(maps) = procfs::process::Process::myself().and_then(|p| p.maps()) else {
        return;
    };
    // The mapping that holds this frame is this thread's stack.
    let Some(low) = maps.iter().find_map(|m| {
        let (low, high) = m.address;
        (low <= sp && sp < high).then_some(low as usize)
    }) else {
        return;
    };
    let end = (sp as usize & !(page_size() - 1)).saturating_sub(MARGIN);
    if end > low {
        // SAFETY: [low, end) is the part of this thread's own stack mapping below the
        // current frame and a margin: it holds no live frame, so its contents may go.
        unsafe { libc::madvise(low as *mut libc::c_void, end - low, libc::MADV_DONTNEED) };
    }
}

fn page_size() -> usize {
    // SAFETY: sysconf has no preconditions.
    match unsafe { libc::sysconf(libc::_SC_PAGESIZE) } {
        p if p > 0 => p as usize,
        _ => 4096,
    }
}

#[cfg(test)]
mod tests {
    use procfs::process::{MMPermissions, MMapPath, MemoryMap, Process};

    /// KiB resident in this process's mappings that `pick` takes.
    fn resident(pick: impl Fn(&MemoryMap) -> bool) -> u64 {
        let maps = Process::myself().unwrap().smaps().unwrap();
        let rss = |m: &MemoryMap| m.extension.map.get("Rss").copied().unwrap_or(0);
        maps.iter().filter(|m| pick(m)).map(rss).sum::<u64>() / 1024
    }

    /// KiB resident in this process's read-only mappings of its own executable.
    fn resident_read_only_exe() -> u64 {
        let exe = std::fs::read_link("/proc/self/exe").unwrap();
        resident(|m| {
            m.pathname == MMapPath::Path(exe.clone()) && !m.perms.contains(MMPermissions::WRITE)
        })
    }

    /// KiB resident of the mapping holding the caller's frame (its thread's stack).
    fn resident_stack() -> u64 {
        let here = std::hint::black_box(0u8);
        let sp = std::ptr::addr_of!(here) as u64;
        resident(|m| m.address.0 <= sp && sp < m.address.1)
    }

    /// Goes `depth` frames of 4 KiB deep, each writing its frame; the sum of what it wrote.
    fn deep(depth: u32) -> u64 {
        let mut frame = [0u8; 4096];
        frame[depth as usize % 4096] = depth as u8;
        let frame = std::hint::black_box(frame);
        let below = if depth == 0 { 0 } else { deep(depth - 1) };
        below + u64::from(frame[depth as usize % 4096])
    }

    #[test]
    fn an_idle_thread_lets_go_of_its_deep_stack_and_runs_on() {
        std::thread::Builder::new()
            .stack_size(2 << 20)
            .spawn(|| {
                let sum = deep(100);
                let before = resident_stack();
                assert!(
                    before >= 400,
                    "the deep call left only {before} KiB resident"
                );
                super::trim_stack();
                let after = resident_stack();
                assert!(
                    after <= 64,
                    "still {after} KiB of the stack resident (was {before})"
                );
                // What was let go comes back as a deep call needs it.
                assert_eq!(deep(100), sum);
            })
            .unwrap()
            .join()
            .unwrap();
    }

    #[test]
    fn the_start_pages_are_let_go_and_the_code_runs_on() {
        let before = resident_read_only_exe();
        assert!(
            before > 0,
            "no resident read-only mapping of the executable found"
        );
        let released = super::release_read_only_segments();
        assert!(
            released as u64 >= before * 1024,
            "released {released} bytes of {before} KiB"
        );
        let after = resident_read_only_exe();
        assert!(after < before, "still {after} KiB resident of {before}");
        // Code and constants read back as they were: formatting, parsing and the
        // crustlet's own code work on.
        use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
        let q = |s: &str| crate::quantity::milli(&Quantity(s.into())).unwrap();
        assert_eq!(q("1500m"), q("1.5"));
        assert_eq!(format!("{}", q("2Ki")), "2048000");
    }
}
