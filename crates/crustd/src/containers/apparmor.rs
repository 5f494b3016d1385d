//! AppArmor for containers and their execs: which profile a container runs under,
//! and crust's own default profile.
//!
//! | CRI (`apparmor` wins over the deprecated `apparmor_profile`) | host with AppArmor | host without |
//! | --- | --- | --- |
//! | unset, `""` | [`DEFAULT_PROFILE`] (none when privileged) | none |
//! | `RuntimeDefault`, `runtime/default` | [`DEFAULT_PROFILE`] (none when privileged) | refused |
//! | `Unconfined`, `unconfined` | none | none |
//! | `Localhost` + `localhost_ref`, `localhost/NAME` | `NAME`, if loaded, else refused | refused |
//!
//! This is containerd's behaviour: on a host with AppArmor a container the kubelet says
//! nothing about is confined by the runtime's default profile (the kubelet sends no
//! profile unless the pod asks for one), a privileged one is not (it may do anything
//! anyway, and the default profile would break what it is privileged for), and a host
//! without AppArmor refuses every profile but `unconfined` rather than run the
//! container less confined than asked. `localhost_ref` may carry the `localhost/`
//! prefix of the deprecated string (critest sends it so); it is taken off.
//!
//! The profile is the OCI spec's `process.apparmorProfile`; the executor has the kernel
//! apply it at the container's `execve` and at each exec's (`container::executor`,
//! `init::apparmor`), so crustd, the monitor and the pause stay unconfined.
//!
//! "The host has AppArmor" means what the kubelet and containerd check: the module's
//! `enabled` parameter is `Y`, and securityfs is mounted (`/sys/kernel/security/apparmor`
//! is where profiles are loaded and listed). It is read once at start.
//!
//! ## The default profile
//! [`DEFAULT_PROFILE`] is loaded with `apparmor_parser -r` (replace: a crustd of a newer
//! version brings its profile's changes to running containers too) once per start, in
//! the background, and on first use if that failed. Loaded profiles stay in the kernel
//! when crustd exits, so containers keep their confinement across a restart.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use cri_api::security_profile::ProfileType;
use cri_api::LinuxContainerSecurityContext;
use parking_lot::Mutex;

use crate::cri::error::{Error, Result};

/// The name of crust's default profile in the kernel.
pub const DEFAULT_PROFILE: &str = "crust-default";

/// What crust's default profile allows and denies. Everything a container's
/// capabilities, seccomp filter and read-only `/proc/sys` and `/sys` mounts allow, less
/// what would reach beyond the container even where those were loosened (a
/// capability added, a privileged-looking mount): no mounts, no writes to the kernel's
/// settings in `/proc` and `/sys` but the container's own (its processes'
/// `/proc/PID`, the IPC namespace's `kernel.shm*`, `kernel.msg*`, `kernel.sem*`, and
/// the cgroup tree), no `sysrq-trigger`, no `kcore`, no firmware, power capping
/// (energy counters, a side channel) or securityfs at all. Signals and ptrace only
/// among the container's own processes and from unconfined ones (crustd, the monitor:
/// StopContainer's signals) or an external OCI runtime's.
const PROFILE_RULES: &str = r#"
  network,
  capability,
  file,
  umount,

  signal (receive) peer=unconfined,
  signal (receive) peer={runc,crun},
  signal (send,receive) peer=@NAME@,
  ptrace (trace,read,tracedby,readby) peer=@NAME@,

  deny mount,

  # /proc: a process's own files (/proc/PID/...) and the IPC namespace's limits only.
  deny @{PROC}/* w,
  deny @{PROC}/{[^0-9s]*,[0-9]*[^0-9]*,s,s[^y]*,sy,sy[^s]*,sys?*}/** w,
  deny @{PROC}/sys/[^k]** w,
  deny @{PROC}/sys/kernel/{[^ms]*,m,m[^s]*,ms,ms[^g]*,s,s[^eh]*,se,se[^m]*,sh,sh[^m]*}{,/**} w,
  deny @{PROC}/sysrq-trigger rwklx,
  deny @{PROC}/kcore rwklx,

  # /sys: nothing written but the cgroup tree; firmware, power capping and
  # securityfs not even read.
  deny /sys/[^f]*/** wklx,
  deny /sys/f[^s]*/** wklx,
  deny /sys/fs/[^c]*/** wklx,
  deny /sys/fs/c[^g]*/** wklx,
  deny /sys/fs/cg[^r]*/** wklx,
  deny /sys/firmware/** rwklx,
  deny /sys/devices/virtual/powercap/** rwklx,
  deny /sys/kernel/security/** rwklx,
"#;

/// The default profile's text, as `apparmor_parser` reads it.
pub fn default_profile_text() -> String {
    format!(
        "#include <tunables/global>\n\nprofile {name} flags=(attach_disconnected,mediate_deleted) {{\n  #include <abstractions/base>\n{rules}}}\n",
        name = DEFAULT_PROFILE,
        rules = PROFILE_RULES.replace("@NAME@", DEFAULT_PROFILE),
    )
}

/// The host's AppArmor, as crustd found it at start.
pub struct AppArmor {
    enabled: bool,
    /// `/sys/kernel/security/apparmor`.
    securityfs: PathBuf,
    parser: PathBuf,
    /// Whether [`DEFAULT_PROFILE`] has been loaded by this crustd.
    default_loaded: Mutex<bool>,
    not_in_use: Option<String>,
}

/// What a container asked for, both CRI fields read.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Asked {
    Nothing,
    RuntimeDefault,
    Unconfined,
    Localhost(String),
}

impl AppArmor {
    /// The host's AppArmor at the usual paths, with `apparmor_parser` from `PATH` (or
    /// `/sbin`, `/usr/sbin`, where Debian has it).
    pub fn detect() -> AppArmor {
        let path = std::env::var_os("PATH").unwrap_or_default();
        let parser = std::env::split_paths(&path)
            .chain([PathBuf::from("/usr/sbin"), PathBuf::from("/sbin")])
            .map(|d| d.join("apparmor_parser"))
            .find(|p| p.is_file());
        AppArmor::at(
            Path::new("/sys/module/apparmor/parameters/enabled"),
            Path::new("/sys/kernel/security/apparmor"),
            parser,
        )
    }

    /// The host's AppArmor as the files given say (tests point them elsewhere). A
    /// kernel with AppArmor but no `apparmor_parser` to load the default profile with
    /// counts as without (as containerd counts it), unless the profile is loaded already.
    pub fn at(enabled_param: &Path, securityfs: &Path, parser: Option<PathBuf>) -> AppArmor {
        let kernel = std::fs::read_to_string(enabled_param)
            .map(|s| s.starts_with('Y'))
            .unwrap_or(false);
        let mounted = securityfs.join("profiles").exists();
        let mut aa = AppArmor {
            enabled: kernel && mounted,
            securityfs: securityfs.to_path_buf(),
            parser: parser.clone().unwrap_or_else(|| "apparmor_parser".into()),
            default_loaded: Mutex::new(false),
            not_in_use: None,
        };
        aa.not_in_use = match (kernel, mounted, &parser) {
            (false, _, _) => Some("the kernel's AppArmor is not enabled".into()),
            (true, false, _) => Some(format!(
                "securityfs is not mounted ({} is missing)",
                securityfs.display()
            )),
            (true, true, Some(_)) => None,
            (true, true, None) => {
                if aa.loaded(DEFAULT_PROFILE).unwrap_or(false) {
                    *aa.default_loaded.lock() = true;
                    None
                } else {
                    Some(format!("no apparmor_parser to load {DEFAULT_PROFILE} with (Debian's `apparmor` package)"))
                }
            }
        };
        aa.enabled = aa.not_in_use.is_none();
        aa
    }

    /// The configuration's `disable_apparmor`: AppArmor counted out whatever the host.
    pub fn disabled_by_config(mut self) -> AppArmor {
        self.enabled = false;
        self.not_in_use = Some("disable_apparmor is set in crustd's configuration".into());
        self
    }

    /// Why containers are not confined here (`None`: they are), for the log and Status.
    pub fn not_in_use(&self) -> Option<&str> {
        self.not_in_use.as_deref()
    }

    pub fn enabled(&self) -> bool {
        self.enabled
    }

    /// Whether this crustd has loaded its default profile (Status says it).
    pub fn default_loaded(&self) -> bool {
        *self.default_loaded.lock()
    }

    /// The profile the container runs under (`process.apparmorProfile`), `None` for
    /// none; loads the default profile when it is the one and not loaded yet.
    #[allow(deprecated)] // apparmor_profile: what kubelets before 1.30 send
    pub fn profile_for(
        &self,
        sc: &LinuxContainerSecurityContext,
        privileged: bool,
    ) -> Result<Option<String>> {
        let asked = asked(sc)?;
        if !self.enabled {
            return match asked {
                Asked::Nothing | Asked::Unconfined => Ok(None),
                other => Err(Error::InvalidArgument(format!(
                    "AppArmor profile {} asked for, but AppArmor is not enabled on this host",
                    describe(&other)
                ))),
            };
        }
        match asked {
            Asked::Unconfined => Ok(None),
            Asked::Nothing | Asked::RuntimeDefault if privileged => Ok(None),
            Asked::Nothing | Asked::RuntimeDefault => {
                self.ensure_default()?;
                Ok(Some(DEFAULT_PROFILE.to_string()))
            }
            Asked::Localhost(name) => {
                if self.loaded(&name)? {
                    Ok(Some(name))
                } else {
                    Err(Error::FailedPrecondition(format!(
                        "AppArmor profile \"{name}\" is not loaded on this node (not in {})",
                        self.securityfs.join("profiles").display()
                    )))
                }
            }
        }
    }

    /// Loads the default profile unless this crustd already has: at start (in the
    /// background) and on first use.
    pub fn ensure_default(&self) -> Result<()> {
        let mut loaded = self.default_loaded.lock();
        if *loaded {
            return Ok(());
        }
        let text = default_profile_text();
        // -r: load, or replace a profile of that name; -K: no cache (the text is
        // crustd's, not a file the cache could key on).
        let mut child = Command::new(&self.parser)
            .args(["-r", "-K"])
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| {
                Error::FailedPrecondition(format!(
                    "loading the AppArmor profile {DEFAULT_PROFILE}: cannot run {} ({e}; Debian's `apparmor` package has it)",
                    self.parser.display()
                ))
            })?;
        let wrote = child
            .stdin
            .take()
            .map(|mut i| i.write_all(text.as_bytes()))
            .transpose();
        let out = child
            .wait_with_output()
            .map_err(|e| Error::Internal(format!("waiting for apparmor_parser: {e}")))?;
        if !out.status.success() || wrote.is_err() {
            return Err(Error::FailedPrecondition(format!(
                "loading the AppArmor profile {DEFAULT_PROFILE}: apparmor_parser {}: {}",
                out.status,
                String::from_utf8_lossy(&out.stderr).trim()
            )));
        }
        tracing::info!(profile = DEFAULT_PROFILE, "AppArmor profile loaded");
        *loaded = true;
        Ok(())
    }

    /// Whether a profile of that name is loaded (a line `NAME (MODE)` of `profiles`).
    fn loaded(&self, name: &str) -> Result<bool> {
        let path = self.securityfs.join("profiles");
        let text = std::fs::read_to_string(&path)
            .map_err(|e| Error::Internal(format!("reading {}: {e}", path.display())))?;
        let found = loaded_names(&text).any(|n| n == name);
        Ok(found)
    }
}

/// The names in `/sys/kernel/security/apparmor/profiles`: `NAME (MODE)` per line.
fn loaded_names(text: &str) -> impl Iterator<Item = &str> {
    text.lines()
        .filter_map(|l| l.rsplit_once(" (").map(|(name, _)| name))
}

#[allow(deprecated)]
fn asked(sc: &LinuxContainerSecurityContext) -> Result<Asked> {
    if let Some(p) = &sc.apparmor {
        if p.profile_type != ProfileType::Localhost as i32 && !p.localhost_ref.is_empty() {
            return Err(Error::InvalidArgument(format!(
                "AppArmor localhost_ref {:?} is only for a Localhost profile",
                p.localhost_ref
            )));
        }
        return match ProfileType::try_from(p.profile_type) {
            Ok(ProfileType::RuntimeDefault) => Ok(Asked::RuntimeDefault),
            Ok(ProfileType::Unconfined) => Ok(Asked::Unconfined),
            Ok(ProfileType::Localhost) => localhost(&p.localhost_ref),
            Err(_) => Err(Error::InvalidArgument(format!(
                "unknown AppArmor profile type {}",
                p.profile_type
            ))),
        };
    }
    match sc.apparmor_profile.as_str() {
        "" => Ok(Asked::Nothing),
        "runtime/default" | "docker/default" => Ok(Asked::RuntimeDefault),
        "unconfined" => Ok(Asked::Unconfined),
        p => match p.strip_prefix("localhost/") {
            Some(name) => localhost(name),
            None => Err(Error::InvalidArgument(format!(
                "unknown AppArmor profile {p:?} (want runtime/default, unconfined or localhost/<name>)"
            ))),
        },
    }
}

fn localhost(reference: &str) -> Result<Asked> {
    let name = reference.strip_prefix("localhost/").unwrap_or(reference);
    if name.trim().is_empty() || name.contains(['\0', '\n']) {
        return Err(Error::InvalidArgument(format!(
            "AppArmor localhost profile {reference:?} is not a profile name"
        )));
    }
    Ok(Asked::Localhost(name.to_string()))
}

fn describe(a: &Asked) -> String {
    match a {
        Asked::Nothing => "(none)".into(),
        Asked::RuntimeDefault => "runtime/default".into(),
        Asked::Unconfined => "unconfined".into(),
        Asked::Localhost(n) => format!("localhost/{n}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use cri_api::SecurityProfile;

    /// A scratch directory, removed when dropped.
    struct Scratch(PathBuf);
    impl Scratch {
        fn new() -> Scratch {
            use std::sync::atomic::{AtomicUsize, Ordering};
            static N: AtomicUsize = AtomicUsize::new(0);
            let p = std::env::temp_dir().join(format!(
                "crustd-apparmor-{}-{}",
                std::process::id(),
                N.fetch_add(1, Ordering::Relaxed)
            ));
            std::fs::create_dir_all(&p).unwrap();
            Scratch(p)
        }
        fn path(&self) -> &Path {
            &self.0
        }
    }
    impl Drop for Scratch {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    struct Host {
        _dir: Scratch,
        aa: AppArmor,
        log: PathBuf,
    }

    /// A host whose `enabled` parameter says `enabled`, with securityfs listing
    /// `profiles`, and an `apparmor_parser` that records its arguments and input.
    fn host(enabled: bool, profiles: &str, parser_ok: bool) -> Host {
        let dir = Scratch::new();
        let param = dir.path().join("enabled");
        std::fs::write(&param, if enabled { "Y\n" } else { "N\n" }).unwrap();
        let sfs = dir.path().join("apparmor");
        std::fs::create_dir(&sfs).unwrap();
        std::fs::write(sfs.join("profiles"), profiles).unwrap();
        let log = dir.path().join("parser.log");
        let parser = dir.path().join("apparmor_parser");
        // Written by `sh`, never through a write fd of this process: one open here
        // while another test thread forks lives on in that child until it execs, and
        // running the parser meanwhile fails with ETXTBSY (seen in CI).
        let body = format!(
            "#!/bin/sh\necho \"$@\" >>{log}\ncat >>{log}\n{}\n",
            if parser_ok {
                "exit 0"
            } else {
                "echo 'syntax error' >&2; exit 1"
            },
            log = log.display()
        );
        let mut sh = Command::new("sh")
            .args(["-c", "cat >\"$0\" && chmod 755 \"$0\""])
            .arg(&parser)
            .stdin(Stdio::piped())
            .spawn()
            .unwrap();
        sh.stdin.take().unwrap().write_all(body.as_bytes()).unwrap();
        assert!(sh.wait().unwrap().success());
        let aa = AppArmor::at(&param, &sfs, Some(parser));
        Host { _dir: dir, aa, log }
    }

    fn deprecated(s: &str) -> LinuxContainerSecurityContext {
        #[allow(deprecated)]
        LinuxContainerSecurityContext {
            apparmor_profile: s.into(),
            ..Default::default()
        }
    }

    fn field(t: ProfileType, r: &str) -> LinuxContainerSecurityContext {
        LinuxContainerSecurityContext {
            apparmor: Some(SecurityProfile {
                profile_type: t as i32,
                localhost_ref: r.into(),
            }),
            ..Default::default()
        }
    }

    #[test]
    fn a_host_with_apparmor_confines_by_default_and_loads_the_profile_once() {
        let h = host(true, "other (enforce)\n", true);
        assert!(h.aa.enabled());
        for sc in [
            deprecated(""),
            deprecated("runtime/default"),
            field(ProfileType::RuntimeDefault, ""),
        ] {
            assert_eq!(
                h.aa.profile_for(&sc, false).unwrap().as_deref(),
                Some(DEFAULT_PROFILE)
            );
        }
        let log = std::fs::read_to_string(&h.log).unwrap();
        assert_eq!(log.matches("-r -K").count(), 1, "{log}");
        assert!(
            log.contains(&format!("profile {DEFAULT_PROFILE} ")),
            "{log}"
        );
        assert!(h.aa.default_loaded());
        // Privileged: no default; unconfined: none.
        assert_eq!(h.aa.profile_for(&deprecated(""), true).unwrap(), None);
        assert_eq!(
            h.aa.profile_for(&field(ProfileType::RuntimeDefault, ""), true)
                .unwrap(),
            None
        );
        assert_eq!(
            h.aa.profile_for(&deprecated("unconfined"), false).unwrap(),
            None
        );
    }

    #[test]
    fn localhost_profiles_must_be_loaded_and_the_new_field_wins() {
        let h = host(
            true,
            "cri-validate-apparmor-test-deny-write (enforce)\nwith space (complain)\n",
            true,
        );
        // The prefix in localhost_ref is taken off, as critest sends it.
        let sc = field(
            ProfileType::Localhost,
            "localhost/cri-validate-apparmor-test-deny-write",
        );
        assert_eq!(
            h.aa.profile_for(&sc, false).unwrap().as_deref(),
            Some("cri-validate-apparmor-test-deny-write")
        );
        // Applied to privileged containers too: it was asked for by name.
        assert!(h.aa.profile_for(&sc, true).unwrap().is_some());
        assert_eq!(
            h.aa.profile_for(&deprecated("localhost/with space"), false)
                .unwrap()
                .as_deref(),
            Some("with space")
        );
        let err =
            h.aa.profile_for(&deprecated("localhost/non-existent-profile"), false)
                .unwrap_err();
        assert!(
            matches!(err, Error::FailedPrecondition(ref m) if m.contains("\"non-existent-profile\" is not loaded")),
            "{err:?}"
        );
        // Both fields: the structured one decides.
        #[allow(deprecated)]
        let both = LinuxContainerSecurityContext {
            apparmor_profile: "localhost/non-existent-profile".into(),
            apparmor: Some(SecurityProfile {
                profile_type: ProfileType::Localhost as i32,
                localhost_ref: "localhost/cri-validate-apparmor-test-deny-write".into(),
            }),
            ..Default::default()
        };
        assert!(h.aa.profile_for(&both, false).is_ok());
        // Nothing was loaded for them.
        assert!(!h.log.exists());
    }

    #[test]
    fn bad_names_are_invalid_arguments() {
        let h = host(true, "", true);
        for sc in [
            deprecated("docker-default"),
            deprecated("localhost/"),
            field(ProfileType::Localhost, ""),
            field(ProfileType::Localhost, "a\nb"),
            field(ProfileType::RuntimeDefault, "localhost/x"),
        ] {
            let err = h.aa.profile_for(&sc, false).unwrap_err();
            assert!(matches!(err, Error::InvalidArgument(_)), "{sc:?}: {err:?}");
        }
    }

    #[test]
    fn a_host_without_apparmor_refuses_every_profile_but_unconfined() {
        let h = host(false, "", true);
        assert!(!h.aa.enabled());
        assert_eq!(h.aa.profile_for(&deprecated(""), false).unwrap(), None);
        assert_eq!(
            h.aa.profile_for(&field(ProfileType::Unconfined, ""), false)
                .unwrap(),
            None
        );
        for sc in [
            deprecated("runtime/default"),
            deprecated("localhost/x"),
            field(ProfileType::RuntimeDefault, ""),
        ] {
            let err = h.aa.profile_for(&sc, false).unwrap_err();
            assert!(
                matches!(err, Error::InvalidArgument(ref m) if m.contains("not enabled on this host")),
                "{err:?}"
            );
        }
        // securityfs not mounted: the same as disabled.
        let dir = Scratch::new();
        std::fs::write(dir.path().join("enabled"), "Y\n").unwrap();
        let aa = AppArmor::at(
            &dir.path().join("enabled"),
            &dir.path().join("nowhere"),
            Some("apparmor_parser".into()),
        );
        assert!(!aa.enabled());
        assert!(aa.not_in_use().unwrap().contains("securityfs"));
        // No parser and the profile not loaded: not in use; loaded already: in use.
        let sfs = dir.path().join("apparmor");
        std::fs::create_dir(&sfs).unwrap();
        std::fs::write(sfs.join("profiles"), "other (enforce)\n").unwrap();
        let aa = AppArmor::at(&dir.path().join("enabled"), &sfs, None);
        assert!(aa.not_in_use().unwrap().contains("apparmor_parser"));
        std::fs::write(
            sfs.join("profiles"),
            format!("{DEFAULT_PROFILE} (enforce)\n"),
        )
        .unwrap();
        let aa = AppArmor::at(&dir.path().join("enabled"), &sfs, None);
        assert!(aa.enabled() && aa.default_loaded());
        assert_eq!(
            aa.profile_for(&deprecated(""), false).unwrap().as_deref(),
            Some(DEFAULT_PROFILE)
        );
    }

    #[test]
    fn a_failed_load_is_an_error_and_is_tried_again() {
        let h = host(true, "", false);
        let err = h.aa.profile_for(&deprecated(""), false).unwrap_err();
        assert!(
            matches!(err, Error::FailedPrecondition(ref m) if m.contains("syntax error")),
            "{err:?}"
        );
        assert!(!h.aa.default_loaded());
        let _ = h.aa.profile_for(&deprecated(""), false);
        let log = std::fs::read_to_string(&h.log).unwrap();
        assert_eq!(log.matches("-r -K").count(), 2, "{log}");
    }

    /// The profile parses, where the parser is installed (hack/deps installs it; it
    /// parses without AppArmor in the kernel with -Q).
    #[test]
    fn the_default_profile_parses() {
        let Ok(mut child) = Command::new("apparmor_parser")
            .args(["-Q", "-K"])
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
        else {
            assert!(
                std::env::var_os("CI").is_none(),
                "apparmor_parser missing in CI (hack/deps installs it)"
            );
            return;
        };
        child
            .stdin
            .take()
            .unwrap()
            .write_all(default_profile_text().as_bytes())
            .unwrap();
        let out = child.wait_with_output().unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}
