//! Builds `crates/pause` (its own workspace, `no_std`, static, no start files) with a
//! nested cargo and copies its binaries to `$OUT_DIR/crust-pause` and
//! `$OUT_DIR/crust-monitor`, where `src/pause.rs` and `src/monitor.rs` embed them with
//! `include_bytes!`. The nested build gets a clean environment: what the
//! outer cargo exports to build scripts (encoded rustflags, wrappers such as clippy's,
//! profile overrides, a shared target dir) would otherwise leak into it.

use std::env;
use std::ffi::OsString;
use std::path::PathBuf;
use std::process::Command;

/// The flags that make `_start` the entry point and the binaries static and position
/// dependent (see crates/pause/src/sys.rs). `-z norelro`: no loader ever write-protects
/// a RELRO segment in a binary without libc, and with one the kernel zero-fills the
/// rest of the page after its few GOT bytes: a dirty page in every pod's monitor. Without
/// it the GOT shares its page with the start of `.bss`, which is dirtied anyway.
const PAUSE_RUSTFLAGS: &str = "-C link-arg=-nostartfiles -C link-arg=-static \
    -C link-arg=-Wl,-z,norelro -C relocation-model=static";

/// The target arches crates/pause has an entry point and syscall numbers for (its
/// `sys.rs`); the executor's seccomp tables are per arch too (`src/executor/syscalls/`).
const PAUSE_ARCHES: &[&str] = &["x86_64"];

/// The binaries of crates/pause, each copied to `$OUT_DIR` under its own name.
const BINARIES: [&str; 2] = ["crust-pause", "crust-monitor"];

fn main() {
    let manifest_dir =
        PathBuf::from(env::var_os("CARGO_MANIFEST_DIR").expect("CARGO_MANIFEST_DIR"));
    let pause_dir = manifest_dir.join("../pause");
    let manifest = pause_dir.join("Cargo.toml");
    for p in ["Cargo.toml", "Cargo.lock", "src"] {
        println!("cargo:rerun-if-changed={}", pause_dir.join(p).display());
    }

    let arch = env::var("CARGO_CFG_TARGET_ARCH").unwrap_or_default();
    let os = env::var("CARGO_CFG_TARGET_OS").unwrap_or_default();
    if !PAUSE_ARCHES.contains(&arch.as_str()) || os != "linux" {
        panic!(
            "crust-pause has no port to {arch} {os} (it has {PAUSE_ARCHES:?} on linux): \
             crates/pause/src/sys.rs holds its entry point and raw syscalls per target_arch"
        );
    }
    let target = env::var("TARGET").expect("TARGET");
    let out_dir = PathBuf::from(env::var_os("OUT_DIR").expect("OUT_DIR"));
    let target_dir = out_dir.join("pause-target");

    let cargo = env::var_os("CARGO").unwrap_or_else(|| OsString::from("cargo"));
    let mut cmd = Command::new(cargo);
    cmd.args([
        "build",
        "--release",
        "--locked",
        "--offline",
        "--target",
        &target,
    ])
    .arg("--manifest-path")
    .arg(&manifest)
    .arg("--target-dir")
    .arg(&target_dir)
    .current_dir(&pause_dir);
    for (key, _) in env::vars_os() {
        let Some(key) = key.to_str() else { continue };
        if key.starts_with("CARGO_PROFILE_")
            || key.starts_with("CARGO_BUILD_")
            || key.starts_with("CARGO_TARGET_")
            || matches!(
                key,
                "RUSTFLAGS"
                    | "CARGO_ENCODED_RUSTFLAGS"
                    | "RUSTC_WRAPPER"
                    | "RUSTC_WORKSPACE_WRAPPER"
                    | "CARGO_INCREMENTAL"
            )
        {
            cmd.env_remove(key);
        }
    }
    cmd.env("RUSTFLAGS", PAUSE_RUSTFLAGS);

    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("running cargo to build {}: {e}", manifest.display()));
    if !out.status.success() {
        panic!(
            "building {} failed ({}):\n{}{}",
            manifest.display(),
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    for name in BINARIES {
        let built = target_dir.join(&target).join("release").join(name);
        let dest = out_dir.join(name);
        std::fs::copy(&built, &dest)
            .unwrap_or_else(|e| panic!("copying {} to {}: {e}", built.display(), dest.display()));
    }
}
