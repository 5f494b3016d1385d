//! `crustd images`: the image store without the daemon, for offline nodes and
//! operators. It opens the store directly; running beside a daemon is safe (the store
//! locks its index on disk).

use crate::daemon::config;
use clap::{Args, Subcommand};
use std::path::{Path, PathBuf};

#[derive(Args, Debug)]
pub struct ImagesArgs {
    /// Persistent state dir (the store is `<root>/images`); default from the config.
    #[arg(long)]
    root: Option<PathBuf>,
    #[command(subcommand)]
    what: ImagesCmd,
}

#[derive(Subcommand, Debug)]
enum ImagesCmd {
    /// Load an OCI image layout (directory or tar) or a `docker save` archive.
    Import { file: PathBuf },
    /// List images: id, size, names.
    Ls {
        /// Only ids.
        #[arg(short, long)]
        quiet: bool,
    },
    /// Remove images by name, id or id prefix (absent ones are fine).
    Rm {
        #[arg(required = true)]
        refs: Vec<String>,
    },
    /// Pull an image from its registry (hosts.toml from --registry-config-dir apply).
    Pull {
        reference: String,
        /// `user:password` for the registry.
        #[arg(long)]
        creds: Option<String>,
    },
}

pub fn main(
    config_file: &Path,
    explicit: bool,
    registry_dir: Option<PathBuf>,
    args: ImagesArgs,
) -> std::process::ExitCode {
    match run(config_file, explicit, registry_dir, args) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("crustd images: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

fn run(
    config_file: &Path,
    explicit: bool,
    registry_dir: Option<PathBuf>,
    args: ImagesArgs,
) -> anyhow::Result<()> {
    let mut cfg = config::Config::load(config_file, explicit)?;
    cfg.apply(config::Overrides {
        root: args.root,
        registry_config_dir: registry_dir,
        ..Default::default()
    })?;
    let store = image::ImageStore::open(cfg.root.join("images"), cfg.registry_config_dir())?;
    match args.what {
        ImagesCmd::Import { file } => {
            for img in store.import(&file)? {
                println!("{} {}", img.id, names(&img));
            }
        }
        ImagesCmd::Ls { quiet } => {
            if !quiet {
                println!("{:<20} {:>10}  NAMES", "IMAGE ID", "SIZE");
            }
            for img in store.list() {
                let short = img.id.trim_start_matches("sha256:");
                if quiet {
                    println!("{}", img.id);
                } else {
                    println!(
                        "{:<20} {:>10}  {}",
                        &short[..13.min(short.len())],
                        human(img.size),
                        names(&img)
                    );
                }
            }
        }
        ImagesCmd::Rm { refs } => {
            for r in refs {
                match store.resolve(&r) {
                    Some(img) => {
                        store.remove(&img.id)?;
                        println!("removed {} {}", img.id, names(&img));
                    }
                    None => eprintln!("{r}: no such image"),
                }
            }
        }
        ImagesCmd::Pull { reference, creds } => {
            let auth = creds.map(|c| {
                let (u, p) = c.split_once(':').unwrap_or((&c, ""));
                image::Auth {
                    username: u.to_string(),
                    password: p.to_string(),
                    ..Default::default()
                }
            });
            let rt = tokio::runtime::Builder::new_multi_thread()
                .enable_all()
                .build()?;
            let img = rt.block_on(store.pull(&reference, auth))?;
            println!("{} {}", img.id, names(&img));
        }
    }
    Ok(())
}

fn names(img: &image::Image) -> String {
    if img.repo_tags.is_empty() {
        img.repo_digests.join(" ")
    } else {
        img.repo_tags.join(" ")
    }
}

fn human(n: u64) -> String {
    match n {
        n if n >= 1 << 30 => format!("{:.1} GiB", n as f64 / (1u64 << 30) as f64),
        n if n >= 1 << 20 => format!("{:.1} MiB", n as f64 / (1u64 << 20) as f64),
        n if n >= 1 << 10 => format!("{:.1} KiB", n as f64 / 1024.0),
        n => format!("{n} B"),
    }
}
