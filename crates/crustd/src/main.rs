//! `crustd`: the CRI v1 runtime server. See the README for flags and configuration.

mod containers;
mod cri;
mod daemon;
mod images;
mod nri;
mod sandboxes;
mod streaming;

use clap::{Parser, Subcommand};
use std::path::PathBuf;

#[derive(Parser, Debug)]
#[command(name = "crustd", version, about = "crust's CRI v1 runtime server")]
struct Cli {
    /// Configuration file.
    #[arg(long, default_value = daemon::config::DEFAULT_CONFIG)]
    config: PathBuf,
    /// Persistent state (sandbox records, pod files).
    #[arg(long)]
    root: Option<PathBuf>,
    /// Volatile state (socket, lock, namespace pins).
    #[arg(long)]
    state: Option<PathBuf>,
    /// The CRI socket (default: <state>/crust.sock).
    #[arg(long)]
    socket: Option<PathBuf>,
    /// Folder of CNI network configurations.
    #[arg(long)]
    cni_conf_dir: Option<PathBuf>,
    /// Folder of CNI plugins; repeat for several.
    #[arg(long)]
    cni_bin_dir: Vec<PathBuf>,
    /// Prefix for pod cgroups.
    #[arg(long)]
    cgroup_root: Option<String>,
    /// Make pod cgroups relative to crustd's own cgroup.
    #[arg(long)]
    cgroup_nested: bool,
    /// Log level or tracing filter.
    #[arg(long)]
    log_level: Option<String>,
    /// Registry hosts (containerd-style `<registry>/hosts.toml` files).
    #[arg(long)]
    registry_config_dir: Option<PathBuf>,
    /// Turn NRI on (plugins connect to [nri] socket_path, default /var/run/nri/nri.sock).
    #[arg(long)]
    nri: bool,
    #[command(subcommand)]
    command: Option<Cmd>,
}

#[derive(Subcommand, Debug)]
enum Cmd {
    /// Configuration helpers.
    Config {
        #[command(subcommand)]
        what: ConfigCmd,
    },
    /// Manage the image store directly (offline nodes, operators): import, ls, rm, pull.
    Images(images::cli::ImagesArgs),
}

#[derive(Subcommand, Debug)]
enum ConfigCmd {
    /// Print every key with its default value.
    Default,
}

fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    if let Some(Cmd::Config {
        what: ConfigCmd::Default,
    }) = cli.command
    {
        print!("{}", daemon::config::Config::default_toml());
        return std::process::ExitCode::SUCCESS;
    }
    if let Some(Cmd::Images(args)) = cli.command {
        let explicit = cli.config.as_os_str() != daemon::config::DEFAULT_CONFIG;
        return images::cli::main(&cli.config, explicit, cli.registry_config_dir, args);
    }
    match run(cli) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("crustd: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

fn run(cli: Cli) -> anyhow::Result<()> {
    let explicit = cli.config.as_os_str() != daemon::config::DEFAULT_CONFIG;
    let mut cfg = daemon::config::Config::load(&cli.config, explicit)?;
    cfg.apply(daemon::config::Overrides {
        root: cli.root,
        state: cli.state,
        socket: cli.socket,
        cni_conf_dir: cli.cni_conf_dir,
        cni_bin_dirs: cli.cni_bin_dir,
        cgroup_root: cli.cgroup_root,
        cgroup_nested: cli.cgroup_nested,
        log_level: cli.log_level,
        registry_config_dir: cli.registry_config_dir,
        nri: cli.nri,
    })?;
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::new(&cfg.log_level))
        .with_writer(std::io::stderr)
        .init();
    daemon::failpoint::init();
    set_oom_score_adj(cfg.oom_score_adj);
    let _locks = (
        cri::server::lock(&cfg.root, "root")?,
        cri::server::lock(&cfg.state, "state")?,
    );
    // SAFETY: mallopt only sets a malloc parameter; no other thread runs yet.
    unsafe { libc::mallopt(libc::M_ARENA_MAX, MALLOC_ARENAS) };
    let crust = daemon::Crust::new(cfg)?;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    rt.spawn(trim_malloc());
    rt.block_on(cri::server::serve(crust))
}

/// Sets crustd's own `oom_score_adj` when the configuration asks (0: as started). Lowering
/// it needs CAP_SYS_RESOURCE; without it crustd runs on with what it has and says so:
/// containers then cannot go below it either (see `containers::create`).
fn set_oom_score_adj(want: i32) {
    if want == 0 {
        return;
    }
    if let Err(e) = std::fs::write("/proc/self/oom_score_adj", want.to_string()) {
        tracing::warn!(
            want,
            now = daemon::util::own_oom_score_adj(),
            error = %e,
            "could not set crustd's oom_score_adj"
        );
    }
}

/// glibc gives each thread that allocates a heap of its own ("arena", up to 8 per
/// core), each keeping the memory freed in it: crustd's worker threads and the
/// blocking threads that start pods would each keep what a burst of pods left there
/// (some 100 KiB per pod on a node filled at once). Two arenas are enough for two
/// worker threads taking turns.
const MALLOC_ARENAS: libc::c_int = 2;

/// Hands the memory malloc keeps free back to the kernel every 30 s: by itself glibc
/// returns only free memory at the top of a heap, and what a burst of pods allocated
/// and freed would stay resident while the node is quiet.
async fn trim_malloc() {
    let mut tick = tokio::time::interval(std::time::Duration::from_secs(30));
    loop {
        tick.tick().await;
        // SAFETY: malloc_trim has no preconditions.
        unsafe { libc::malloc_trim(0) };
    }
}
