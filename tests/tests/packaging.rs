//! The node install (packaging/, hack/install, hack/uninstall; issue 15): the `.deb`
//! that `cargo deb -p crustd` makes, installed for real with `dpkg -i` (then removed
//! and purged) in a throwaway root, an overlay of the host's own `/` whose writes land
//! in a tmpfs, so dpkg runs with its real database and maintainer scripts and the
//! host is never changed; `systemd-analyze verify` on the installed units (it needs
//! no running systemd); and `hack/install DESTDIR=...` followed by `hack/uninstall`.
//!
//! The package is made from the debug binaries `cargo build` already left in the
//! target dir (`--no-build`, a target dir of hard links whose `release/` holds
//! them), not from a release build of the workspace, which would cost CI many
//! minutes on two cores: what is checked here is the package's layout, modes,
//! conffiles and maintainer scripts, which do not depend on the profile.

use crust_e2e::{bin_dir, require_root, run, unique, TempDir};
use std::collections::BTreeMap;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;

/// Every file the package and hack/install put on a node, with its mode.
const FIXED_FILES: &[(&str, u32)] = &[
    ("usr/bin/crustd", 0o755),
    ("usr/bin/crustctl", 0o755),
    ("usr/bin/crustlet", 0o755),
    ("opt/cni/bin/bridge", 0o755),
    ("opt/cni/bin/host-local", 0o755),
    ("opt/cni/bin/portmap", 0o755),
    ("usr/lib/systemd/system/crustd.service", 0o644),
    ("usr/lib/systemd/system/crustlet.service", 0o644),
    ("etc/crust/config.toml", 0o644),
    ("etc/crust/crustlet.toml", 0o644),
    ("etc/crictl.yaml", 0o644),
    ("etc/cni/net.d/10-crust.conflist", 0o644),
    ("usr/share/doc/crust/README.md", 0o644),
];

/// Every file installed: the fixed ones and the docs the README links to.
fn files() -> Vec<(String, u32)> {
    let mut v: Vec<(String, u32)> = FIXED_FILES
        .iter()
        .map(|(f, m)| (f.to_string(), *m))
        .collect();
    let docs = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs");
    for e in std::fs::read_dir(docs).unwrap().flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        if name.ends_with(".md") {
            v.push((format!("usr/share/doc/crust/docs/{name}"), 0o644));
        }
    }
    v
}

/// The configuration files: dpkg conffiles, kept by `dpkg -r` and hack/uninstall
/// when edited.
const CONFFILES: &[&str] = &[
    "etc/crust/config.toml",
    "etc/crust/crustlet.toml",
    "etc/crictl.yaml",
    "etc/cni/net.d/10-crust.conflist",
];

const BINARIES: &[&str] = &[
    "crustd",
    "crustctl",
    "crustlet",
    "bridge",
    "host-local",
    "portmap",
];

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

/// A directory removed on drop (the fake target dir lives beside the real one, so
/// the binaries can be hard-linked rather than copied).
struct Scratch(PathBuf);

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Makes the .deb from the debug binaries; returns its path (inside the scratch dir).
fn build_deb(scratch: &Path) -> PathBuf {
    let release = scratch.join("release");
    std::fs::create_dir_all(&release).unwrap();
    for b in BINARIES {
        let src = bin_dir().join(b);
        assert!(src.is_file(), "{} not built", src.display());
        if std::fs::hard_link(&src, release.join(b)).is_err() {
            std::fs::copy(&src, release.join(b)).unwrap();
        }
    }
    let deb = scratch.join("crust.deb");
    let mut cmd = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()));
    // Nothing of this test's own cargo environment may reach cargo-deb.
    for (k, _) in std::env::vars() {
        if k.starts_with("CARGO_") && k != "CARGO_HOME" {
            cmd.env_remove(k);
        }
    }
    // gzip through the system's tool: cargo-deb's own compressor takes minutes on
    // the unoptimized-size debug binaries.
    cmd.current_dir(workspace())
        .env("CARGO_TARGET_DIR", scratch)
        .args(["deb", "-p", "crustd", "--no-build", "--locked", "--fast"])
        .args(["-Z", "gz", "--compress-system", "-o"])
        .arg(&deb);
    let out = run(&mut cmd);
    assert!(
        out.status.success() && deb.is_file(),
        "cargo deb failed: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    deb
}

/// Every non-directory under `root`, relative, with its mode bits (symlinks: 0).
fn tree(root: &Path) -> BTreeMap<String, u32> {
    fn walk(root: &Path, d: &Path, out: &mut BTreeMap<String, u32>) {
        let Ok(rd) = std::fs::read_dir(d) else { return };
        for e in rd.flatten() {
            let p = e.path();
            let m = std::fs::symlink_metadata(&p).unwrap();
            let rel = p.strip_prefix(root).unwrap().to_string_lossy().into_owned();
            if m.is_dir() {
                walk(root, &p, out);
            } else if m.file_type().is_symlink() {
                out.insert(rel, 0);
            } else {
                out.insert(rel, m.permissions().mode() & 0o7777);
            }
        }
    }
    let mut out = BTreeMap::new();
    walk(root, root, &mut out);
    out
}

/// Files of ours (the package's, its enable link, its systemd state) among `t`.
fn ours(t: &BTreeMap<String, u32>) -> Vec<String> {
    t.keys()
        .filter(|k| {
            files().iter().any(|(f, _)| k.starts_with(f.as_str()))
                || k.contains("crustd.service")
                || k.contains("crustlet.service")
                || k.starts_with("usr/share/crust")
        })
        .cloned()
        .collect()
}

fn sh_ok(script: &str) -> String {
    let out = run(Command::new("sh").args(["-c", script]));
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "{script}\nfailed:\n{text}");
    text
}

/// The .deb builds; `dpkg -i` puts every file where it belongs with its mode, the
/// configuration as conffiles, crustd enabled and crustlet not, nothing started;
/// `systemd-analyze verify` accepts the installed units; `dpkg -r` leaves only the
/// conffiles; `dpkg -P` leaves nothing of ours.
#[test]
fn deb_installs_removes_and_purges_in_a_throwaway_root() {
    let tools = [
        "cargo-deb",
        "dpkg",
        "dpkg-deb",
        "unshare",
        "chroot",
        "systemd-analyze",
        "gzip",
    ];
    if !require_root(&tools) {
        return;
    }
    let scratch = Scratch(bin_dir().parent().unwrap().join(unique("pkg-test-")));
    let deb = build_deb(&scratch.0);

    // The control side: name, conffiles, scripts that enable crustd and start nothing.
    let control = scratch.0.join("control");
    sh_ok(&format!(
        "dpkg-deb -e {} {}",
        deb.display(),
        control.display()
    ));
    let conffiles = std::fs::read_to_string(control.join("conffiles")).unwrap();
    let mut listed: Vec<&str> = conffiles.lines().collect();
    listed.sort();
    let mut want: Vec<String> = CONFFILES.iter().map(|c| format!("/{c}")).collect();
    want.sort();
    assert_eq!(listed, want, "conffiles");
    let postinst = std::fs::read_to_string(control.join("postinst")).unwrap();
    assert!(
        postinst.contains("deb-systemd-helper enable crustd.service"),
        "{postinst}"
    );
    for verb in ["start", "restart "] {
        assert!(
            !postinst.contains(&format!("deb-systemd-invoke {verb}")),
            "postinst starts a unit:\n{postinst}"
        );
    }

    // dpkg for real, in an overlay of the host's root written to a tmpfs.
    let upper = TempDir::tmpfs("pku");
    let (u, w, m) = (
        upper.path().join("u"),
        upper.path().join("w"),
        upper.path().join("m"),
    );
    let snap = |name: &str| upper.path().join(name);
    let script = format!(
        r#"set -e
mount --make-rprivate /
mkdir -p {u} {w} {m} {installed} {removed} {purged}
mount -t overlay overlay -o lowerdir=/,upperdir={u},workdir={w} {m}
mount -t proc proc {m}/proc
mount --rbind /dev {m}/dev
chroot {m} dpkg -i {deb} >&2
chroot {m} systemd-analyze verify crustd.service crustlet.service > {out}/verify.log 2>&1 || echo "verify failed: $?" >> {out}/verify.log
chroot {m} systemctl is-enabled crustd.service crustlet.service > {out}/enabled.log 2>&1 || true
chroot {m} crustd config default > {out}/default.toml
cp -a {u}/. {installed}/
chroot {m} dpkg -r crust >&2
cp -a {u}/. {removed}/
chroot {m} dpkg -P crust >&2
cp -a {u}/. {purged}/
"#,
        u = u.display(),
        w = w.display(),
        m = m.display(),
        deb = deb.display(),
        out = upper.path().display(),
        installed = snap("installed").display(),
        removed = snap("removed").display(),
        purged = snap("purged").display(),
    );
    let out = run(Command::new("unshare").args(["-m", "sh", "-c", &script]));
    assert!(
        out.status.success(),
        "dpkg in the throwaway root failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );

    let installed = tree(&snap("installed"));
    for (f, mode) in files() {
        assert_eq!(
            installed.get(&f),
            Some(&mode),
            "{f} after dpkg -i (mode {mode:o}); installed: {installed:#?}"
        );
    }
    let verify = std::fs::read_to_string(upper.path().join("verify.log")).unwrap();
    assert!(
        verify.trim().is_empty(),
        "systemd-analyze verify:\n{verify}"
    );
    let enabled = std::fs::read_to_string(upper.path().join("enabled.log")).unwrap();
    assert_eq!(
        enabled.lines().collect::<Vec<_>>(),
        ["enabled", "disabled"],
        "crustd enabled, crustlet not"
    );
    assert!(
        installed.contains_key("etc/systemd/system/multi-user.target.wants/crustd.service"),
        "{installed:#?}"
    );
    // The installed crustd runs and knows its defaults.
    let default = std::fs::read_to_string(upper.path().join("default.toml")).unwrap();
    assert!(default.contains("root = \"/var/lib/crust\""), "{default}");

    // Removed: the conffiles stay (as dpkg keeps them), and so does crustd's
    // enablement (the wants link and deb-systemd-helper's record of it) and the
    // units' masks (links to /dev/null), which debhelper's scripts keep until a
    // purge, for a reinstall; the rest is gone.
    let removed = tree(&snap("removed"));
    let mut left = ours(&removed);
    left.retain(|f| {
        !f.starts_with("var/lib/systemd/deb-systemd-helper")
            && f != "etc/systemd/system/multi-user.target.wants/crustd.service"
            && f != "etc/systemd/system/crustd.service"
            && f != "etc/systemd/system/crustlet.service"
    });
    let mut want: Vec<String> = CONFFILES.iter().map(|c| c.to_string()).collect();
    want.sort();
    assert_eq!(left, want, "left after dpkg -r");

    // Purged: nothing of ours.
    let purged = tree(&snap("purged"));
    assert_eq!(ours(&purged), Vec::<String>::new(), "left after dpkg -P");
}

/// hack/install puts the same files in the same places with the same modes (and
/// enables crustd with --enable); hack/uninstall takes them all away but an edited
/// configuration file and the state under /var/lib/crust, and --purge the edited
/// file too.
#[test]
fn hack_install_and_uninstall_under_destdir() {
    let dest = TempDir::new("pki");
    let install = |extra: &[&str]| {
        let out = run(Command::new(workspace().join("hack/install"))
            .arg(format!("DESTDIR={}", dest.path().display()))
            .arg(format!("BIN_DIR={}", bin_dir().display()))
            .arg("--no-build")
            .args(extra));
        assert!(
            out.status.success(),
            "hack/install: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    let uninstall = |extra: &[&str]| {
        let out = run(Command::new(workspace().join("hack/uninstall"))
            .arg(format!("DESTDIR={}", dest.path().display()))
            .args(extra));
        assert!(
            out.status.success(),
            "hack/uninstall: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    for b in BINARIES {
        assert!(bin_dir().join(b).is_file(), "{b} not built");
    }
    install(&["--enable"]);
    let t = tree(dest.path());
    let mut want: BTreeMap<String, u32> = files().into_iter().collect();
    want.insert("usr/share/crust/installed".into(), 0o644);
    want.insert(
        "etc/systemd/system/multi-user.target.wants/crustd.service".into(),
        0,
    );
    assert_eq!(t, want, "hack/install's files");
    for (f, _) in files() {
        if let Some(src) = f
            .strip_prefix("usr/bin/")
            .or(f.strip_prefix("opt/cni/bin/"))
        {
            let a = std::fs::read(dest.path().join(&f)).unwrap();
            assert!(a == std::fs::read(bin_dir().join(src)).unwrap(), "{f}");
        }
    }

    // The operator edits the config, and the node has state.
    let cfg = dest.path().join("etc/crust/config.toml");
    let edited = format!(
        "{}log_level = \"debug\"\n",
        std::fs::read_to_string(&cfg).unwrap()
    )
    .replace("log_level = \"info\"\n", "");
    std::fs::write(&cfg, &edited).unwrap();
    let state = dest.path().join("var/lib/crust/images.json");
    std::fs::create_dir_all(state.parent().unwrap()).unwrap();
    std::fs::write(&state, "{}").unwrap();

    // A second install keeps the edited file and puts the new one beside it.
    install(&[]);
    assert_eq!(std::fs::read_to_string(&cfg).unwrap(), edited);
    assert!(dest
        .path()
        .join("etc/crust/config.toml.crust-new")
        .is_file());

    let said = uninstall(&[]);
    assert!(said.contains("kept /etc/crust/config.toml"), "{said}");
    let left: Vec<String> = tree(dest.path()).into_keys().collect();
    assert_eq!(
        left,
        ["etc/crust/config.toml", "var/lib/crust/images.json"],
        "left after hack/uninstall"
    );

    install(&[]);
    uninstall(&["--purge"]);
    let left: Vec<String> = tree(dest.path()).into_keys().collect();
    assert_eq!(left, ["var/lib/crust/images.json"], "left after --purge");
}

/// packaging/crust/config.toml is `crustd config default` with only the extra CNI
/// plugin folder: regenerate it from that output when a key is added.
#[test]
fn packaged_config_is_crustd_config_default() {
    let crustd = bin_dir().join("crustd");
    assert!(crustd.is_file(), "crustd not built");
    let out = run(Command::new(&crustd).args(["config", "default"]));
    assert!(out.status.success());
    let keys = |text: &str| -> Vec<String> {
        text.lines()
            .filter(|l| !l.trim().is_empty() && !l.starts_with('#'))
            .map(str::to_string)
            .collect()
    };
    let default = keys(&String::from_utf8_lossy(&out.stdout));
    let packaged =
        keys(&std::fs::read_to_string(workspace().join("packaging/crust/config.toml")).unwrap());
    let expected: Vec<String> = default
        .iter()
        .map(|l| {
            if l == "bin_dirs = [\"/opt/cni/bin\"]" {
                "bin_dirs = [\"/opt/cni/bin\", \"/usr/lib/cni\"]".to_string()
            } else {
                l.clone()
            }
        })
        .collect();
    assert_eq!(
        packaged, expected,
        "packaging/crust/config.toml is not `crustd config default` (plus /usr/lib/cni)"
    );
}
