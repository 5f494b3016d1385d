//! From an OCI runtime spec to a [`Plan`]: everything the intermediate process and the
//! init need, validated and converted (flags, C strings, capability sets) in the main
//! process before it forks. The children then only execute the plan, so a spec the
//! executor cannot honour fails here with `InvalidSpec`, without a process made, and
//! the code after the fork parses nothing.

use std::collections::HashSet;
use std::ffi::CString;
use std::path::{Component, Path, PathBuf};

use nix::mount::MsFlags;
use oci_spec::runtime::{
    Capability as OciCap, LinuxDeviceType, LinuxNamespaceType, PosixRlimitType, Spec,
};

use super::RootfsMount;
use crate::error::{Error, Result};

/// The `PATH` searched for `args[0]` when the spec's env has none (runc's default).
pub(crate) const DEFAULT_PATH: &str =
    "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// Linux's limit on a host name (`HOST_NAME_MAX`) and on a NIS domain name.
const HOST_NAME_MAX: usize = 64;

/// A namespace the container gets: a new one (cloned) or an existing one joined by path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Namespace {
    pub kind: LinuxNamespaceType,
    /// `CLONE_NEW*`.
    pub flag: libc::c_int,
    pub path: Option<PathBuf>,
}

/// How a spec mount is made.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum MountKind {
    /// A bind mount of a host path (already made absolute against the bundle).
    Bind { source: PathBuf, recursive: bool },
    /// `cgroup` or `cgroup2`: see `cgroupfs.rs`.
    Cgroup,
    /// Any other file system: `mount(source, target, fstype, flags, data)`.
    Fs { fstype: String, source: String },
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct MountPlan {
    /// Absolute, inside the container.
    pub destination: PathBuf,
    pub kind: MountKind,
    /// Flags from the options (`ro`, `nosuid`, ...), without `MS_BIND`, `MS_REC` and
    /// the propagation flags.
    pub flags: MsFlags,
    /// Applied one by one after the mount (`rslave`, `private`, ...).
    pub propagation: Vec<MsFlags>,
    /// The options that are not flags (`mode=755`, `size=65536k`), comma-joined.
    pub data: String,
    /// `MOUNT_ATTR_*` bits the recursive options (`rro`, `rnosuid`, ...) set and clear
    /// on the mount and every mount below it, with `mount_setattr` once the mount and
    /// its propagation are in place.
    pub attr_set: u64,
    pub attr_clr: u64,
    /// A bind id-mapped with the container's user namespace (`idmap`, or `ridmap`
    /// for every mount below too: `Some(true)`), so files keep their owners inside.
    pub idmap: Option<bool>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct DevicePlan {
    /// Absolute, inside the container (`/dev/null`).
    pub path: PathBuf,
    /// `S_IFCHR`, `S_IFBLK` or `S_IFIFO`.
    pub kind: libc::mode_t,
    pub major: u32,
    pub minor: u32,
    pub mode: libc::mode_t,
    pub uid: u32,
    pub gid: u32,
}

/// The five capability sets; `None` in the plan leaves the caller's as they are.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(crate) struct CapsPlan {
    pub bounding: caps::CapsHashSet,
    pub effective: caps::CapsHashSet,
    pub inheritable: caps::CapsHashSet,
    pub permitted: caps::CapsHashSet,
    pub ambient: caps::CapsHashSet,
}

#[derive(Debug, Clone)]
pub(crate) struct Plan {
    pub id: String,
    /// Canonical absolute host path of the root file system.
    pub rootfs: PathBuf,
    pub rootfs_mount: Option<RootfsMountPlan>,
    pub readonly_root: bool,
    /// Applied to `/` (recursively) first: `MS_SLAVE` unless the spec says otherwise.
    pub rootfs_propagation: MsFlags,
    pub namespaces: Vec<Namespace>,
    pub mounts: Vec<MountPlan>,
    /// Whether `/dev` gets the default devices and symlinks (not when `/dev` is a bind).
    pub setup_dev: bool,
    /// A read-only `/dev` is mounted read-write, populated, then remounted read-only.
    pub dev_readonly: bool,
    pub devices: Vec<DevicePlan>,
    pub masked_paths: Vec<PathBuf>,
    pub readonly_paths: Vec<PathBuf>,
    pub sysctl: Vec<(PathBuf, String)>,
    pub hostname: Option<String>,
    pub domainname: Option<String>,
    pub rlimits: Vec<(libc::c_int, u64, u64)>,
    pub oom_score_adj: Option<i32>,
    pub uid: u32,
    pub gid: u32,
    pub additional_gids: Vec<u32>,
    pub umask: libc::mode_t,
    pub caps: Option<CapsPlan>,
    pub no_new_privileges: bool,
    /// `process.apparmorProfile`: the profile the process is confined in from its
    /// `execve` on (see `init::apparmor`).
    pub apparmor: Option<CString>,
    /// `linux.seccomp`, compiled (see `seccomp.rs`).
    pub seccomp: Option<super::seccomp::Filter>,
    pub cwd: PathBuf,
    /// `process.terminal`: stdin is a pty slave that becomes the controlling terminal.
    pub terminal: bool,
    pub args: Vec<CString>,
    pub env: Vec<CString>,
    /// `PATH` from `env`, searched for `args[0]` when it has no slash.
    pub path_env: String,
    /// The host's cgroup mounts, when a mount is of type `cgroup` (read by the
    /// creating process, see [`super::cgroupfs::host`]).
    pub cgroup_host: Option<std::sync::Arc<super::cgroupfs::Host>>,
    /// The spec's OCI hooks but `poststart` and `poststop` (the caller's to run at
    /// start and delete), prepared for the fork (see `hooks.rs`): only `create` plans
    /// them (an exec runs none, and an exec's spec is the container's, hooks and all).
    pub hooks: super::hooks::Plan,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct RootfsMountPlan {
    pub fstype: String,
    pub source: String,
    pub flags: MsFlags,
    pub data: String,
    /// An overlay whose `lowerdir`s are each id-mapped with the container's user
    /// namespace before the overlay is mounted (the `idmap` option).
    pub idmap_layers: bool,
}

impl Plan {
    /// The flags for `clone`: every namespace without a path, and always a new mount
    /// namespace.
    pub fn clone_flags(&self) -> libc::c_int {
        self.namespaces
            .iter()
            .filter(|n| n.path.is_none())
            .fold(libc::CLONE_NEWNS, |f, n| f | n.flag)
    }

    /// Whether the container gets a namespace of its own of this kind.
    pub fn is_new(&self, kind: LinuxNamespaceType) -> bool {
        kind == LinuxNamespaceType::Mount
            || self
                .namespaces
                .iter()
                .any(|n| n.kind == kind && n.path.is_none())
    }
}

/// What an fstab-style option does.
enum Opt {
    Set(MsFlags),
    Clear(MsFlags),
    Propagation(MsFlags),
    Bind(bool),
    Ignore,
}

fn option(o: &str) -> Option<Opt> {
    use MsFlags as F;
    Some(match o {
        "async" => Opt::Clear(F::MS_SYNCHRONOUS),
        "atime" => Opt::Clear(F::MS_NOATIME),
        "bind" => Opt::Bind(false),
        "rbind" => Opt::Bind(true),
        "defaults" | "remount" => Opt::Ignore,
        "dev" => Opt::Clear(F::MS_NODEV),
        "diratime" => Opt::Clear(F::MS_NODIRATIME),
        "dirsync" => Opt::Set(F::MS_DIRSYNC),
        "exec" => Opt::Clear(F::MS_NOEXEC),
        "mand" => Opt::Set(F::MS_MANDLOCK),
        "noatime" => Opt::Set(F::MS_NOATIME),
        "nodev" => Opt::Set(F::MS_NODEV),
        "nodiratime" => Opt::Set(F::MS_NODIRATIME),
        "noexec" => Opt::Set(F::MS_NOEXEC),
        "nomand" => Opt::Clear(F::MS_MANDLOCK),
        "norelatime" => Opt::Clear(F::MS_RELATIME),
        "nostrictatime" => Opt::Clear(F::MS_STRICTATIME),
        "nosuid" => Opt::Set(F::MS_NOSUID),
        "nosymfollow" => Opt::Set(F::from_bits_retain(libc::MS_NOSYMFOLLOW)),
        "relatime" => Opt::Set(F::MS_RELATIME),
        "ro" => Opt::Set(F::MS_RDONLY),
        "rw" => Opt::Clear(F::MS_RDONLY),
        "silent" => Opt::Set(F::MS_SILENT),
        "strictatime" => Opt::Set(F::MS_STRICTATIME),
        "suid" => Opt::Clear(F::MS_NOSUID),
        "sync" => Opt::Set(F::MS_SYNCHRONOUS),
        "private" => Opt::Propagation(F::MS_PRIVATE),
        "rprivate" => Opt::Propagation(F::MS_PRIVATE | F::MS_REC),
        "shared" => Opt::Propagation(F::MS_SHARED),
        "rshared" => Opt::Propagation(F::MS_SHARED | F::MS_REC),
        "slave" => Opt::Propagation(F::MS_SLAVE),
        "rslave" => Opt::Propagation(F::MS_SLAVE | F::MS_REC),
        "unbindable" => Opt::Propagation(F::MS_UNBINDABLE),
        "runbindable" => Opt::Propagation(F::MS_UNBINDABLE | F::MS_REC),
        _ => return None,
    })
}

/// Options the executor refuses rather than silently ignores.
const UNSUPPORTED_OPTIONS: [&str; 1] = ["tmpcopyup"];

/// The recursive flag options: (name, `MOUNT_ATTR_*` bit, whether it sets the bit).
const RECURSIVE_FLAG_OPTIONS: [(&str, u64, bool); 8] = [
    ("rro", MOUNT_ATTR_RDONLY, true),
    ("rrw", MOUNT_ATTR_RDONLY, false),
    ("rnosuid", MOUNT_ATTR_NOSUID, true),
    ("rsuid", MOUNT_ATTR_NOSUID, false),
    ("rnodev", MOUNT_ATTR_NODEV, true),
    ("rdev", MOUNT_ATTR_NODEV, false),
    ("rnoexec", MOUNT_ATTR_NOEXEC, true),
    ("rexec", MOUNT_ATTR_NOEXEC, false),
];
pub(crate) const MOUNT_ATTR_RDONLY: u64 = 0x1;
pub(crate) const MOUNT_ATTR_NOSUID: u64 = 0x2;
pub(crate) const MOUNT_ATTR_NODEV: u64 = 0x4;
pub(crate) const MOUNT_ATTR_NOEXEC: u64 = 0x8;

struct Options {
    flags: MsFlags,
    propagation: Vec<MsFlags>,
    bind: Option<bool>,
    data: Vec<String>,
    attr_set: u64,
    attr_clr: u64,
    idmap: Option<bool>,
}

fn parse_options(opts: &[String]) -> std::result::Result<Options, String> {
    let mut o = Options {
        flags: MsFlags::empty(),
        propagation: vec![],
        bind: None,
        data: vec![],
        attr_set: 0,
        attr_clr: 0,
        idmap: None,
    };
    for s in opts {
        if UNSUPPORTED_OPTIONS.contains(&s.as_str()) {
            return Err(format!("mount option {s:?} is not supported"));
        }
        if s == "idmap" || s == "ridmap" {
            o.idmap = Some(s == "ridmap");
            continue;
        }
        if let Some(&(_, bit, set)) = RECURSIVE_FLAG_OPTIONS.iter().find(|(n, ..)| n == s) {
            // The later option wins, as with the plain flags.
            if set {
                o.attr_set |= bit;
                o.attr_clr &= !bit;
            } else {
                o.attr_clr |= bit;
                o.attr_set &= !bit;
            }
            continue;
        }
        match option(s) {
            Some(Opt::Set(f)) => o.flags |= f,
            Some(Opt::Clear(f)) => o.flags &= !f,
            Some(Opt::Propagation(f)) => o.propagation.push(f),
            Some(Opt::Bind(rec)) => o.bind = Some(rec || o.bind == Some(true)),
            Some(Opt::Ignore) => {}
            None => o.data.push(s.clone()),
        }
    }
    Ok(o)
}

/// A path in the container: absolute, no `..` needed to be meaningful (`..` is allowed:
/// resolution inside the root keeps it there).
fn container_path(p: &Path, what: &str) -> std::result::Result<PathBuf, String> {
    if !p.is_absolute() {
        return Err(format!("{what} {} is not absolute", p.display()));
    }
    if p.components().any(|c| matches!(c, Component::Prefix(_))) {
        return Err(format!("{what} {} is not a Linux path", p.display()));
    }
    Ok(p.to_path_buf())
}

fn cstring(s: &str, what: &str) -> std::result::Result<CString, String> {
    CString::new(s).map_err(|_| format!("{what} {s:?} contains a NUL byte"))
}

fn rlimit_resource(t: PosixRlimitType) -> libc::c_int {
    use PosixRlimitType as T;
    (match t {
        T::RlimitCpu => libc::RLIMIT_CPU,
        T::RlimitFsize => libc::RLIMIT_FSIZE,
        T::RlimitData => libc::RLIMIT_DATA,
        T::RlimitStack => libc::RLIMIT_STACK,
        T::RlimitCore => libc::RLIMIT_CORE,
        T::RlimitRss => libc::RLIMIT_RSS,
        T::RlimitNproc => libc::RLIMIT_NPROC,
        T::RlimitNofile => libc::RLIMIT_NOFILE,
        T::RlimitMemlock => libc::RLIMIT_MEMLOCK,
        T::RlimitAs => libc::RLIMIT_AS,
        T::RlimitLocks => libc::RLIMIT_LOCKS,
        T::RlimitSigpending => libc::RLIMIT_SIGPENDING,
        T::RlimitMsgqueue => libc::RLIMIT_MSGQUEUE,
        T::RlimitNice => libc::RLIMIT_NICE,
        T::RlimitRtprio => libc::RLIMIT_RTPRIO,
        T::RlimitRttime => libc::RLIMIT_RTTIME,
    }) as libc::c_int
}

/// The `caps` crate's name for an OCI capability (`CAP_` + the OCI name).
pub(crate) fn capability(c: &OciCap) -> std::result::Result<caps::Capability, String> {
    let name = format!("CAP_{c}");
    name.parse()
        .map_err(|_| format!("capability {name} is unknown to this build"))
}

fn cap_set(
    set: &Option<oci_spec::runtime::Capabilities>,
) -> std::result::Result<caps::CapsHashSet, String> {
    let mut out = caps::CapsHashSet::new();
    for c in set.iter().flatten() {
        out.insert(capability(c)?);
    }
    Ok(out)
}

/// The devices every container gets in `/dev` (unless the spec lists the same path).
pub(crate) fn default_devices() -> Vec<DevicePlan> {
    [
        ("/dev/null", 1, 3),
        ("/dev/zero", 1, 5),
        ("/dev/full", 1, 7),
        ("/dev/random", 1, 8),
        ("/dev/urandom", 1, 9),
        ("/dev/tty", 5, 0),
    ]
    .into_iter()
    .map(|(path, major, minor)| DevicePlan {
        path: path.into(),
        kind: libc::S_IFCHR,
        major,
        minor,
        mode: 0o666,
        uid: 0,
        gid: 0,
    })
    .collect()
}

/// Validates `spec` and turns it into a plan. `bundle` anchors the relative root path
/// and relative bind sources.
pub(crate) fn plan(
    id: &str,
    bundle: &Path,
    spec: &Spec,
    rootfs_mount: Option<&RootfsMount>,
) -> Result<Plan> {
    plan_inner(id, bundle, spec, rootfs_mount).map_err(|reason| Error::InvalidSpec {
        id: id.to_string(),
        reason,
    })
}

fn plan_inner(
    id: &str,
    bundle: &Path,
    spec: &Spec,
    rootfs_mount: Option<&RootfsMount>,
) -> std::result::Result<Plan, String> {
    check_id(id)?;
    let root = spec.root().as_ref().ok_or("no root")?;
    let rootfs = plan_rootfs(bundle, root)?;
    let rootfs_mount = rootfs_mount.map(plan_rootfs_mount).transpose()?;

    let process = spec.process().as_ref().ok_or("no process")?;
    let linux = spec.linux().clone().unwrap_or_default();

    let namespaces = plan_namespaces(&linux)?;
    let (mounts, setup_dev, dev_readonly) = plan_mounts(spec, bundle)?;
    let userns = namespaces
        .iter()
        .any(|n| n.kind == LinuxNamespaceType::User);
    check_idmap(&mounts, rootfs_mount.as_ref(), userns)?;
    let devices = plan_devices_owned(&linux, setup_dev, userns)?;
    let masked_paths = container_paths(linux.masked_paths(), "masked path")?;
    let readonly_paths = container_paths(linux.readonly_paths(), "readonly path")?;
    let sysctl = plan_sysctl(&linux)?;
    let rootfs_propagation = rootfs_propagation(&linux)?;

    let own_uts = namespaces
        .iter()
        .any(|n| n.kind == LinuxNamespaceType::Uts && n.path.is_none());
    let hostname = plan_name(spec.hostname(), "hostname", own_uts)?;
    let domainname = plan_name(spec.domainname(), "domainname", own_uts)?;

    let rlimits = plan_rlimits(process)?;
    let caps = plan_caps(process)?;
    let seccomp = plan_seccomp(&linux)?;
    let command = plan_command(process)?;

    let cgroup_host = if mounts.iter().any(|m| matches!(m.kind, MountKind::Cgroup)) {
        Some(super::cgroupfs::host().map_err(|e| format!("reading /proc/self/mountinfo: {e}"))?)
    } else {
        None
    };
    let user = process.user();
    Ok(Plan {
        id: id.to_string(),
        rootfs,
        rootfs_mount,
        readonly_root: root.readonly().unwrap_or(false),
        rootfs_propagation,
        mounts,
        setup_dev,
        dev_readonly,
        devices,
        masked_paths,
        readonly_paths,
        sysctl,
        hostname,
        domainname,
        rlimits,
        oom_score_adj: process.oom_score_adj(),
        uid: user.uid(),
        gid: user.gid(),
        additional_gids: user.additional_gids().clone().unwrap_or_default(),
        umask: user.umask().unwrap_or(0o022) as libc::mode_t & 0o777,
        caps,
        no_new_privileges: process.no_new_privileges().unwrap_or(false),
        apparmor: plan_apparmor(process)?,
        seccomp,
        cwd: command.cwd,
        terminal: process.terminal() == Some(true),
        args: command.args,
        env: command.env,
        path_env: command.path_env,
        namespaces,
        cgroup_host,
        hooks: Default::default(),
    })
}

/// `process.apparmorProfile`, checked to be a name the kernel can take in one
/// `exec NAME` write (no NUL, no line break, not blank).
fn plan_apparmor(process: &oci_spec::runtime::Process) -> Str<Option<CString>> {
    let Some(name) = process.apparmor_profile() else {
        return Ok(None);
    };
    if name.is_empty() {
        return Ok(None);
    }
    if name.trim().is_empty() || name.contains(['\0', '\n']) {
        return Err(format!("apparmorProfile {name:?} is not a profile name"));
    }
    CString::new(name.as_str())
        .map(Some)
        .map_err(|_| format!("apparmorProfile {name:?} is not a profile name"))
}

/// Refused early: an id that is not a plain file name would reach outside any
/// directory it is joined to.
fn check_id(id: &str) -> Str<()> {
    if id.is_empty() || id.contains('/') || id.contains('\0') || id == "." || id == ".." {
        return Err(format!("container id {id:?} is not a file name"));
    }
    Ok(())
}

/// The root file system's canonical host path (relative to the bundle), so that what
/// is mounted later under it cannot be redirected by a symlink in the path.
fn plan_rootfs(bundle: &Path, root: &oci_spec::runtime::Root) -> Str<PathBuf> {
    let rootfs = bundle.join(root.path());
    let rootfs = std::fs::canonicalize(&rootfs)
        .map_err(|e| format!("root path {}: {e}", rootfs.display()))?;
    if !rootfs.is_dir() {
        return Err(format!("root path {} is not a directory", rootfs.display()));
    }
    Ok(rootfs)
}

/// An id-mapped mount maps with the container's user namespace: without one there is
/// nothing to map with.
fn check_idmap(
    mounts: &[MountPlan],
    rootfs_mount: Option<&RootfsMountPlan>,
    userns: bool,
) -> Str<()> {
    let idmapped =
        mounts.iter().any(|m| m.idmap.is_some()) || rootfs_mount.is_some_and(|m| m.idmap_layers);
    if idmapped && !userns {
        return Err("id-mapped mounts need a user namespace to map with".into());
    }
    Ok(())
}

/// [`plan_devices`], owned as the container sees them: the nodes are made by the
/// caller's root before the init enters the user namespace, so in one their owners
/// are given as the host ids the maps make of them.
fn plan_devices_owned(
    linux: &oci_spec::runtime::Linux,
    setup_dev: bool,
    userns: bool,
) -> Str<Vec<DevicePlan>> {
    let mut devices = plan_devices(linux, setup_dev)?;
    if userns {
        for d in &mut devices {
            d.uid = to_host(linux.uid_mappings(), d.uid);
            d.gid = to_host(linux.gid_mappings(), d.gid);
        }
    }
    Ok(devices)
}

/// Masked or read-only paths, each checked to be a path inside the container.
fn container_paths(v: &Option<Vec<String>>, what: &str) -> Str<Vec<PathBuf>> {
    v.iter()
        .flatten()
        .map(|p| container_path(Path::new(p), what))
        .collect::<std::result::Result<Vec<_>, _>>()
}

/// The hostname or domainname to set: only in a UTS namespace of the container's own
/// (`own_uts`); one joined by path (the pod's) already has the pod's name, and the
/// host's must never be renamed. A bad name is refused either way.
fn plan_name(name: &Option<String>, what: &str, own_uts: bool) -> Str<Option<String>> {
    match name.as_deref() {
        None | Some("") => Ok(None),
        Some(h) if h.len() > HOST_NAME_MAX || h.contains('\0') => Err(format!(
            "{what} {h:?} is longer than 64 bytes or contains NUL"
        )),
        Some(h) => Ok(own_uts.then(|| h.to_string())),
    }
}

/// What the init execs, where, with which environment.
struct CommandPlan {
    args: Vec<CString>,
    env: Vec<CString>,
    path_env: String,
    cwd: PathBuf,
}

/// The process's args, env and cwd, converted now so that the init, past the fork,
/// has nothing left to check or allocate; `PATH` taken from the env for the search
/// of `args[0]`.
fn plan_command(process: &oci_spec::runtime::Process) -> Str<CommandPlan> {
    let args: Vec<String> = process.args().clone().unwrap_or_default();
    if args.is_empty() || args[0].is_empty() {
        return Err("process.args is empty".into());
    }
    let env: Vec<String> = process.env().clone().unwrap_or_default();
    let path_env = env
        .iter()
        .rev()
        .find_map(|e| e.strip_prefix("PATH="))
        .unwrap_or(DEFAULT_PATH)
        .to_string();
    let cwd = process.cwd();
    if !cwd.is_absolute() {
        return Err(format!("process.cwd {} is not absolute", cwd.display()));
    }
    Ok(CommandPlan {
        args: args
            .iter()
            .map(|a| cstring(a, "argument"))
            .collect::<std::result::Result<_, _>>()?,
        env: env
            .iter()
            .map(|e| cstring(e, "environment entry"))
            .collect::<std::result::Result<_, _>>()?,
        path_env,
        cwd: cwd.clone(),
    })
}

/// The propagation of the root: the spec's, else rslave.
fn rootfs_propagation(linux: &oci_spec::runtime::Linux) -> Str<MsFlags> {
    Ok(match linux.rootfs_propagation().as_deref() {
        None | Some("") => MsFlags::MS_SLAVE | MsFlags::MS_REC,
        Some(p) => match option(p) {
            Some(Opt::Propagation(f)) => f,
            _ => return Err(format!("rootfsPropagation {p:?} is not a propagation mode")),
        },
    })
}

/// The capability sets, when the spec has any.
fn plan_caps(process: &oci_spec::runtime::Process) -> Str<Option<CapsPlan>> {
    Ok(match process.capabilities() {
        None => None,
        Some(c) => Some(CapsPlan {
            bounding: cap_set(c.bounding())?,
            effective: cap_set(c.effective())?,
            inheritable: cap_set(c.inheritable())?,
            permitted: cap_set(c.permitted())?,
            ambient: cap_set(c.ambient())?,
        }),
    })
}

/// The seccomp filter compiled, when the spec has one.
fn plan_seccomp(linux: &oci_spec::runtime::Linux) -> Str<Option<super::seccomp::Filter>> {
    Ok(match linux.seccomp() {
        None => None,
        Some(s) => {
            let f = compiled(s)?;
            super::seccomp::check_flags(f.flags)?;
            Some(f)
        }
    })
}

/// The profiles compiled last, newest first: nearly every container of a node has the
/// same one (the runtime's default), and compiling it (a few hundred rules) was a
/// tenth of each ExecSync and of each create.
static COMPILED: parking_lot::Mutex<
    Vec<(oci_spec::runtime::LinuxSeccomp, super::seccomp::Filter)>,
> = parking_lot::Mutex::new(Vec::new());

/// How many profiles [`COMPILED`] keeps.
const COMPILED_KEPT: usize = 8;

/// `s` compiled, from [`COMPILED`] when it is there (equal, rule for rule).
fn compiled(s: &oci_spec::runtime::LinuxSeccomp) -> Str<super::seccomp::Filter> {
    let mut kept = COMPILED.lock();
    if let Some(i) = kept.iter().position(|(k, _)| k == s) {
        let hit = kept.remove(i);
        let f = hit.1.clone();
        kept.insert(0, hit);
        return Ok(f);
    }
    drop(kept);
    let f = super::seccomp::compile(s)?;
    let mut kept = COMPILED.lock();
    kept.insert(0, (s.clone(), f.clone()));
    kept.truncate(COMPILED_KEPT);
    Ok(f)
}

/// The mount of the root file system itself (an overlay), its options parsed.
fn plan_rootfs_mount(m: &RootfsMount) -> Str<RootfsMountPlan> {
    let o = parse_options(&m.options)?;
    if o.bind.is_some() || !o.propagation.is_empty() {
        return Err("the rootfs mount takes neither bind nor propagation options".into());
    }
    if o.idmap == Some(true) {
        return Err("the rootfs mount takes idmap, not ridmap".into());
    }
    if o.idmap.is_some() && m.fstype != "overlay" {
        return Err(format!(
            "the rootfs mount's idmap option is for an overlay's layers, not {}",
            m.fstype
        ));
    }
    Ok(RootfsMountPlan {
        fstype: m.fstype.clone(),
        source: m.source.clone(),
        flags: o.flags,
        data: o.data.join(","),
        idmap_layers: o.idmap.is_some(),
    })
}

/// The host id of container id `id` by the spec's map (the overflow id 65534 when it
/// maps none, as the kernel shows an unmapped one; `id` itself without a map).
fn to_host(maps: &Option<Vec<oci_spec::runtime::LinuxIdMapping>>, id: u32) -> u32 {
    let Some(maps) = maps else { return id };
    maps.iter()
        .find_map(|m| {
            let off = id.checked_sub(m.container_id())?;
            (off < m.size()).then(|| m.host_id() + off)
        })
        .unwrap_or(65534)
}

/// The `lowerdir`s of overlay mount data (`lowerdir=a:b,upperdir=...`), with `\\:`
/// and `\\,` unescaped as overlayfs does.
pub(crate) fn overlay_lowerdirs(data: &str) -> Vec<PathBuf> {
    let mut dirs = vec![];
    let mut field = String::new();
    let mut chars = data.chars();
    let mut in_lower = None::<Vec<PathBuf>>;
    let mut flush =
        |field: &mut String, end_of_option: bool, in_lower: &mut Option<Vec<PathBuf>>| {
            if let Some(v) = in_lower.as_mut() {
                v.push(PathBuf::from(std::mem::take(field)));
                if end_of_option {
                    dirs.append(v);
                    *in_lower = None;
                }
            } else {
                field.clear();
            }
        };
    while let Some(c) = chars.next() {
        match c {
            '\\' => field.extend(chars.next()),
            ',' => flush(&mut field, true, &mut in_lower),
            ':' if in_lower.is_some() => flush(&mut field, false, &mut in_lower),
            '=' if in_lower.is_none() && field == "lowerdir" => {
                field.clear();
                in_lower = Some(vec![]);
            }
            c => field.push(c),
        }
    }
    flush(&mut field, true, &mut in_lower);
    dirs
}

/// The namespaces to make or join (by path), each kind once; no user or time namespace.
fn plan_namespaces(linux: &oci_spec::runtime::Linux) -> Str<Vec<Namespace>> {
    let mut namespaces: Vec<Namespace> = vec![];
    for ns in linux.namespaces().iter().flatten() {
        let kind = ns.typ();
        let flag = match kind {
            LinuxNamespaceType::Mount => libc::CLONE_NEWNS,
            LinuxNamespaceType::Cgroup => libc::CLONE_NEWCGROUP,
            LinuxNamespaceType::Uts => libc::CLONE_NEWUTS,
            LinuxNamespaceType::Ipc => libc::CLONE_NEWIPC,
            LinuxNamespaceType::Pid => libc::CLONE_NEWPID,
            LinuxNamespaceType::Network => libc::CLONE_NEWNET,
            LinuxNamespaceType::User => libc::CLONE_NEWUSER,
            LinuxNamespaceType::Time => return Err("time namespaces are not supported".into()),
        };
        if namespaces.iter().any(|n| n.kind == kind) {
            return Err(format!("namespace {kind} listed twice"));
        }
        let path = match ns.path() {
            Some(p) if !p.as_os_str().is_empty() => {
                if !p.is_absolute() {
                    return Err(format!(
                        "{kind} namespace path {} is not absolute",
                        p.display()
                    ));
                }
                Some(p.clone())
            }
            _ => None,
        };
        if kind == LinuxNamespaceType::User && path.is_none() {
            return Err(
                "a new user namespace is not supported: join one by path (the pod's, whose maps its maker wrote)"
                    .into(),
            );
        }
        namespaces.push(Namespace { kind, flag, path });
    }
    Ok(namespaces)
}

/// The spec's mounts, in order; whether `/dev` is the executor's to populate (no bind
/// mount over it) and whether it is to end read-only.
fn plan_mounts(spec: &Spec, bundle: &Path) -> Str<(Vec<MountPlan>, bool, bool)> {
    let mut mounts = vec![];
    let mut setup_dev = true;
    let mut dev_readonly = false;
    for m in spec.mounts().iter().flatten() {
        let destination = container_path(m.destination(), "mount destination")?;
        let opts = parse_options(m.options().as_deref().unwrap_or(&[]))
            .map_err(|e| format!("mount {}: {e}", destination.display()))?;
        let mut idmap = opts.idmap;
        if m.uid_mappings().is_some() || m.gid_mappings().is_some() {
            let linux = spec.linux().clone().unwrap_or_default();
            if m.uid_mappings() != linux.uid_mappings() || m.gid_mappings() != linux.gid_mappings()
            {
                return Err(format!(
                    "mount {}: id mappings other than the container's are not supported",
                    destination.display()
                ));
            }
            idmap.get_or_insert(false);
        }
        let typ = m.typ().as_deref().unwrap_or("");
        let mut flags = opts.flags;
        let kind = if typ == "bind" || opts.bind.is_some() {
            let source = m
                .source()
                .as_ref()
                .ok_or_else(|| format!("bind mount {} has no source", destination.display()))?;
            let source = if source.is_absolute() {
                source.clone()
            } else {
                bundle.join(source)
            };
            if destination == Path::new("/dev") {
                setup_dev = false;
            }
            MountKind::Bind {
                source,
                recursive: opts.bind.unwrap_or(false),
            }
        } else if idmap.is_some() {
            return Err(format!(
                "mount {}: only a bind mount can be id-mapped",
                destination.display()
            ));
        } else if typ == "cgroup" || typ == "cgroup2" {
            MountKind::Cgroup
        } else if typ.is_empty() {
            return Err(format!("mount {} has no type", destination.display()));
        } else {
            if destination == Path::new("/dev") && flags.contains(MsFlags::MS_RDONLY) {
                dev_readonly = true;
                flags.remove(MsFlags::MS_RDONLY);
            }
            MountKind::Fs {
                fstype: typ.to_string(),
                source: m
                    .source()
                    .as_ref()
                    .map(|s| s.to_string_lossy().into_owned())
                    .unwrap_or_else(|| typ.to_string()),
            }
        };
        mounts.push(MountPlan {
            destination,
            kind,
            flags,
            propagation: opts.propagation,
            data: opts.data.join(","),
            attr_set: opts.attr_set,
            attr_clr: opts.attr_clr,
            idmap,
        });
    }
    Ok((mounts, setup_dev, dev_readonly))
}

/// The spec's devices, plus the defaults when /dev is ours to populate.
fn plan_devices(linux: &oci_spec::runtime::Linux, setup_dev: bool) -> Str<Vec<DevicePlan>> {
    let mut devices = vec![];
    for d in linux.devices().iter().flatten() {
        let path = container_path(d.path(), "device path")?;
        let kind = match d.typ() {
            LinuxDeviceType::C | LinuxDeviceType::U => libc::S_IFCHR,
            LinuxDeviceType::B => libc::S_IFBLK,
            LinuxDeviceType::P => libc::S_IFIFO,
            LinuxDeviceType::A => {
                return Err(format!(
                    "device {}: type \"a\" is not a node",
                    path.display()
                ))
            }
        };
        let num = |v: i64, what: &str| {
            u32::try_from(v).map_err(|_| format!("device {}: bad {what} {v}", path.display()))
        };
        devices.push(DevicePlan {
            kind,
            major: num(d.major(), "major")?,
            minor: num(d.minor(), "minor")?,
            mode: d.file_mode().unwrap_or(0o666) & 0o7777,
            uid: d.uid().unwrap_or(0),
            gid: d.gid().unwrap_or(0),
            path,
        });
    }
    if setup_dev {
        let listed: HashSet<PathBuf> = devices.iter().map(|d| d.path.clone()).collect();
        let defaults = default_devices()
            .into_iter()
            .filter(|d| !listed.contains(&d.path));
        devices = defaults.chain(devices).collect();
    }
    Ok(devices)
}

/// Each sysctl as its file under `/proc/sys` and the value, sorted.
fn plan_sysctl(linux: &oci_spec::runtime::Linux) -> Str<Vec<(PathBuf, String)>> {
    let mut sysctl = vec![];
    for (k, v) in linux.sysctl().iter().flatten() {
        if k.is_empty() || k.contains('/') || k.split('.').any(|c| c.is_empty() || c == "..") {
            return Err(format!("sysctl {k:?} is not a sysctl name"));
        }
        sysctl.push((Path::new("/proc/sys").join(k.replace('.', "/")), v.clone()));
    }
    sysctl.sort();
    Ok(sysctl)
}

/// The process's rlimits, each soft limit no higher than its hard one.
fn plan_rlimits(process: &oci_spec::runtime::Process) -> Str<Vec<(i32, u64, u64)>> {
    let mut rlimits = vec![];
    for r in process.rlimits().iter().flatten() {
        if r.soft() > r.hard() {
            return Err(format!(
                "rlimit {}: soft {} above hard {}",
                r.typ(),
                r.soft(),
                r.hard()
            ));
        }
        rlimits.push((rlimit_resource(r.typ()), r.soft(), r.hard()));
    }
    Ok(rlimits)
}

/// Planning errors are reasons, wrapped into `Error::InvalidSpec` by [`plan`].
type Str<T> = std::result::Result<T, String>;

#[cfg(test)]
mod tests {
    use super::*;
    use oci_spec::runtime::{
        LinuxBuilder, LinuxCapabilitiesBuilder, LinuxNamespaceBuilder, MountBuilder,
        ProcessBuilder, RootBuilder,
    };

    /// A profile compiled again comes from the kept ones, the same filter as a fresh
    /// compile; a profile that differs in one name is its own; no more than
    /// `COMPILED_KEPT` are kept.
    #[test]
    fn seccomp_profiles_are_compiled_once_and_kept_few() {
        use oci_spec::runtime::{
            LinuxSeccompAction as A, LinuxSeccompBuilder, LinuxSyscallBuilder,
        };
        let profile = |name: &str| {
            LinuxSeccompBuilder::default()
                .default_action(A::ScmpActErrno)
                .syscalls(vec![LinuxSyscallBuilder::default()
                    .names(vec!["read".to_string(), name.to_string()])
                    .action(A::ScmpActAllow)
                    .build()
                    .unwrap()])
                .build()
                .unwrap()
        };
        let a = profile("write");
        let fresh = super::super::seccomp::compile(&a).unwrap();
        let kept =
            |p: &oci_spec::runtime::LinuxSeccomp| COMPILED.lock().iter().any(|(k, _)| k == p);
        assert_eq!(compiled(&a).unwrap(), fresh);
        assert!(kept(&a), "a compiled profile is kept");
        assert_eq!(compiled(&a).unwrap(), fresh);
        let b = profile("openat");
        assert_ne!(compiled(&b).unwrap(), fresh);
        for n in [
            "close", "mmap", "brk", "exit", "dup", "pipe", "poll", "kill", "getpid",
        ] {
            compiled(&profile(n)).unwrap();
        }
        assert!(COMPILED.lock().len() <= COMPILED_KEPT);
        assert_eq!(compiled(&a).unwrap(), fresh);
    }

    fn bundle(tag: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("crust-spec-unit-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(d.join("rootfs")).unwrap();
        d
    }

    fn ok(spec: &Spec, tag: &str) -> Plan {
        let b = bundle(tag);
        let p = plan("c1", &b, spec, None).unwrap();
        std::fs::remove_dir_all(&b).unwrap();
        p
    }

    fn err(spec: &Spec, tag: &str) -> String {
        let b = bundle(tag);
        let e = plan("c1", &b, spec, None).unwrap_err().to_string();
        std::fs::remove_dir_all(&b).unwrap();
        e
    }

    #[test]
    fn default_spec_plans() {
        let p = ok(&Spec::default(), "default");
        assert!(p.rootfs.ends_with("rootfs"));
        assert!(p.readonly_root);
        assert_eq!(p.rootfs_propagation, MsFlags::MS_SLAVE | MsFlags::MS_REC);
        let expect = libc::CLONE_NEWNS
            | libc::CLONE_NEWPID
            | libc::CLONE_NEWNET
            | libc::CLONE_NEWIPC
            | libc::CLONE_NEWUTS
            | libc::CLONE_NEWCGROUP;
        assert_eq!(p.clone_flags(), expect);
        assert_eq!(p.hostname.as_deref(), Some("youki"));
        assert!(p.setup_dev);
        assert_eq!(p.devices.len(), 6);
        let dev = p
            .mounts
            .iter()
            .find(|m| m.destination == Path::new("/dev"))
            .unwrap();
        assert_eq!(dev.flags, MsFlags::MS_NOSUID | MsFlags::MS_STRICTATIME);
        assert_eq!(dev.data, "mode=755,size=65536k");
        let sys = p
            .mounts
            .iter()
            .find(|m| m.destination == Path::new("/sys"))
            .unwrap();
        assert!(sys.flags.contains(MsFlags::MS_RDONLY));
        let cg = p
            .mounts
            .iter()
            .find(|m| m.destination == Path::new("/sys/fs/cgroup"))
            .unwrap();
        assert_eq!(cg.kind, MountKind::Cgroup);
        let caps = p.caps.unwrap();
        assert!(caps.bounding.contains(&caps::Capability::CAP_KILL));
        assert_eq!(caps.bounding.len(), 3);
        assert_eq!(p.umask, 0o022);
        assert!(p.no_new_privileges);
        // runc's default PATH, as it sets it when the spec's env has none.
        assert_eq!(
            p.path_env,
            "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
        );
        assert_eq!(
            p.rlimits,
            [(libc::RLIMIT_NOFILE as libc::c_int, 1024, 1024)]
        );
    }

    #[test]
    fn bind_options_and_joined_namespaces() {
        let mut spec = Spec::default();
        spec.set_mounts(Some(vec![MountBuilder::default()
            .destination("/data")
            .typ("bind")
            .source("vol")
            .options(vec![
                "rbind".into(),
                "ro".into(),
                "rslave".into(),
                "nosuid".into(),
            ])
            .build()
            .unwrap()]));
        let mut linux = spec.linux().clone().unwrap();
        linux.set_namespaces(Some(vec![
            LinuxNamespaceBuilder::default()
                .typ(LinuxNamespaceType::Network)
                .path("/run/netns/x")
                .build()
                .unwrap(),
            LinuxNamespaceBuilder::default()
                .typ(LinuxNamespaceType::Uts)
                .path("/run/uts/x")
                .build()
                .unwrap(),
        ]));
        spec.set_linux(Some(linux));
        let b = bundle("bind");
        let p = plan("c1", &b, &spec, None).unwrap();
        let m = &p.mounts[0];
        assert_eq!(
            m.kind,
            MountKind::Bind {
                source: b.join("vol"),
                recursive: true
            }
        );
        assert_eq!(m.flags, MsFlags::MS_RDONLY | MsFlags::MS_NOSUID);
        assert_eq!(m.propagation, [MsFlags::MS_SLAVE | MsFlags::MS_REC]);
        assert_eq!(p.clone_flags(), libc::CLONE_NEWNS);
        assert!(!p.is_new(LinuxNamespaceType::Network));
        assert!(p.is_new(LinuxNamespaceType::Mount));
        // A joined UTS namespace keeps its name.
        assert_eq!(p.hostname, None);
        // No /dev mount at all: the rootfs's /dev is populated, as runc does.
        assert!(p.setup_dev);
        std::fs::remove_dir_all(&b).unwrap();
    }

    #[test]
    fn refusals_name_the_cause() {
        let mut spec = Spec::default();
        spec.set_process(Some(
            ProcessBuilder::default()
                .args(Vec::<String>::new())
                .build()
                .unwrap(),
        ));
        assert!(err(&spec, "noargs").contains("process.args is empty"));

        let mut spec = Spec::default();
        spec.set_root(Some(
            RootBuilder::default().path("missing").build().unwrap(),
        ));
        let e = err(&spec, "noroot");
        assert!(e.contains("root path") && e.contains("missing"), "{e}");

        let mut spec = Spec::default();
        spec.set_linux(Some(
            LinuxBuilder::default()
                .namespaces(vec![LinuxNamespaceBuilder::default()
                    .typ(LinuxNamespaceType::User)
                    .build()
                    .unwrap()])
                .build()
                .unwrap(),
        ));
        assert!(err(&spec, "userns").contains("a new user namespace is not supported"));

        let mut spec = Spec::default();
        spec.set_mounts(Some(vec![MountBuilder::default()
            .destination("relative")
            .typ("tmpfs")
            .build()
            .unwrap()]));
        assert!(err(&spec, "reldest").contains("mount destination relative is not absolute"));

        let mut spec = Spec::default();
        spec.set_mounts(Some(vec![MountBuilder::default()
            .destination("/x")
            .typ("bind")
            .source("/y")
            .options(vec!["rro".into()])
            .build()
            .unwrap()]));
        let b = bundle("rro");
        let p = plan("c1", &b, &spec, None).unwrap();
        std::fs::remove_dir_all(&b).unwrap();
        assert_eq!(
            (p.mounts[0].attr_set, p.mounts[0].attr_clr),
            // <linux/mount.h>: MOUNT_ATTR_RDONLY 0x1, MOUNT_ATTR_NOSUID 0x2.
            (0x1, 0)
        );
        let mut spec = Spec::default();
        spec.set_mounts(Some(vec![MountBuilder::default()
            .destination("/x")
            .typ("bind")
            .source("/y")
            .options(vec!["rro".into(), "rnosuid".into(), "rrw".into()])
            .build()
            .unwrap()]));
        let b = bundle("rrw");
        let p = plan("c1", &b, &spec, None).unwrap();
        std::fs::remove_dir_all(&b).unwrap();
        assert_eq!((p.mounts[0].attr_set, p.mounts[0].attr_clr), (0x2, 0x1));

        assert!(plan("a/b", Path::new("/"), &Spec::default(), None)
            .unwrap_err()
            .to_string()
            .contains("is not a file name"));
    }

    #[test]
    fn capabilities_convert_to_the_caps_crate() {
        let mut spec = Spec::default();
        let mut process = spec.process().clone().unwrap();
        process.set_capabilities(Some(
            LinuxCapabilitiesBuilder::default()
                .bounding(
                    [OciCap::Chown, OciCap::NetRaw, OciCap::CheckpointRestore]
                        .into_iter()
                        .collect::<HashSet<_>>(),
                )
                .effective(HashSet::new())
                .build()
                .unwrap(),
        ));
        spec.set_process(Some(process));
        let caps = ok(&spec, "caps").caps.unwrap();
        assert_eq!(
            caps.bounding,
            [
                caps::Capability::CAP_CHOWN,
                caps::Capability::CAP_NET_RAW,
                caps::Capability::CAP_CHECKPOINT_RESTORE
            ]
            .into_iter()
            .collect()
        );
        assert!(caps.effective.is_empty());
    }

    #[test]
    fn seccomp_is_compiled_at_plan_time() {
        use oci_spec::runtime::{LinuxSeccompAction, LinuxSeccompBuilder, LinuxSyscallBuilder};
        let with = |action| {
            let mut spec = Spec::default();
            let mut linux = spec.linux().clone().unwrap();
            linux.set_seccomp(Some(
                LinuxSeccompBuilder::default()
                    .default_action(LinuxSeccompAction::ScmpActAllow)
                    .syscalls(vec![LinuxSyscallBuilder::default()
                        .names(vec!["mkdir".to_string()])
                        .action(action)
                        .build()
                        .unwrap()])
                    .build()
                    .unwrap(),
            ));
            spec.set_linux(Some(linux));
            spec
        };
        assert!(ok(&Spec::default(), "noseccomp").seccomp.is_none());
        let f = ok(&with(LinuxSeccompAction::ScmpActErrno), "seccomp").seccomp;
        assert!(f.unwrap().program.len() > 6);
        let e = err(&with(LinuxSeccompAction::ScmpActNotify), "notify");
        assert!(e.contains("SCMP_ACT_NOTIFY"), "{e}");
    }

    #[test]
    fn a_read_only_dev_is_populated_first() {
        let mut spec = Spec::default();
        let mut mounts = spec.mounts().clone().unwrap();
        for m in &mut mounts {
            if m.destination() == Path::new("/dev") {
                let mut o = m.options().clone().unwrap();
                o.push("ro".into());
                m.set_options(Some(o));
            }
        }
        spec.set_mounts(Some(mounts));
        let p = ok(&spec, "devro");
        assert!(p.dev_readonly);
        let dev = p
            .mounts
            .iter()
            .find(|m| m.destination == Path::new("/dev"))
            .unwrap();
        assert!(!dev.flags.contains(MsFlags::MS_RDONLY));
    }

    /// A joined user namespace: not cloned, device owners given as host ids, binds
    /// with `idmap`/`ridmap` or the container's own mappings id-mapped; id-mapping
    /// without a user namespace, of a non-bind or with other mappings is refused.
    #[test]
    fn user_namespace_plans() {
        use oci_spec::runtime::LinuxIdMappingBuilder;
        let map = |c: u32, h: u32, n: u32| {
            LinuxIdMappingBuilder::default()
                .container_id(c)
                .host_id(h)
                .size(n)
                .build()
                .unwrap()
        };
        let bind = |dest: &str, opts: &[&str]| {
            MountBuilder::default()
                .destination(dest)
                .typ("bind")
                .source("/y")
                .options(opts.iter().map(|o| o.to_string()).collect::<Vec<_>>())
                .build()
                .unwrap()
        };
        let with_userns = |mounts: Vec<oci_spec::runtime::Mount>| {
            let mut spec = Spec::default();
            let mut linux = spec.linux().clone().unwrap();
            let mut ns = linux.namespaces().clone().unwrap();
            ns.push(
                LinuxNamespaceBuilder::default()
                    .typ(LinuxNamespaceType::User)
                    .path("/proc/1/ns/user")
                    .build()
                    .unwrap(),
            );
            linux.set_namespaces(Some(ns));
            linux.set_uid_mappings(Some(vec![map(0, 100000, 65536)]));
            linux.set_gid_mappings(Some(vec![map(0, 200000, 65536)]));
            spec.set_linux(Some(linux));
            spec.set_mounts(Some(mounts));
            spec
        };
        let mut own = bind("/own", &["rbind"]);
        own.set_uid_mappings(Some(vec![map(0, 100000, 65536)]));
        own.set_gid_mappings(Some(vec![map(0, 200000, 65536)]));
        let spec = with_userns(vec![
            bind("/a", &["bind", "idmap"]),
            bind("/b", &["rbind", "ridmap"]),
            bind("/c", &["bind"]),
            own,
        ]);
        let p = ok(&spec, "userns-ok");
        assert_eq!(p.clone_flags() & libc::CLONE_NEWUSER, 0);
        let ns = p
            .namespaces
            .iter()
            .find(|n| n.kind == LinuxNamespaceType::User);
        assert_eq!(
            ns.unwrap().path.as_deref(),
            Some(Path::new("/proc/1/ns/user"))
        );
        let idmaps: Vec<_> = p.mounts.iter().map(|m| m.idmap).collect();
        assert_eq!(idmaps, [Some(false), Some(true), None, Some(false)]);
        let null = p.devices.iter().find(|d| d.path == Path::new("/dev/null"));
        assert_eq!(null.map(|d| (d.uid, d.gid)), Some((100000, 200000)));

        let mut other = bind("/o", &["bind"]);
        other.set_uid_mappings(Some(vec![map(0, 5000, 10)]));
        let e = err(&with_userns(vec![other]), "userns-other");
        assert!(e.contains("id mappings other than the container's"), "{e}");

        let mut spec = Spec::default();
        spec.set_mounts(Some(vec![bind("/a", &["idmap"])]));
        let e = err(&spec, "idmap-nouserns");
        assert!(e.contains("id-mapped mounts need a user namespace"), "{e}");

        let tmpfs = MountBuilder::default()
            .destination("/t")
            .typ("tmpfs")
            .options(vec!["idmap".to_string()])
            .build()
            .unwrap();
        let e = err(&with_userns(vec![tmpfs]), "idmap-tmpfs");
        assert!(e.contains("only a bind mount can be id-mapped"), "{e}");

        let rootfs = |opts: &[&str]| RootfsMount {
            fstype: "overlay".into(),
            source: "overlay".into(),
            options: opts.iter().map(|o| o.to_string()).collect(),
        };
        let b = bundle("idmap-rootfs");
        let r = rootfs(&["lowerdir=/l1:/l2", "upperdir=/u", "workdir=/w", "idmap"]);
        let p = plan("c1", &b, &with_userns(vec![]), Some(&r)).unwrap();
        let m = p.rootfs_mount.unwrap();
        assert!(m.idmap_layers);
        assert_eq!(m.data, "lowerdir=/l1:/l2,upperdir=/u,workdir=/w");
        let e = plan("c1", &b, &Spec::default(), Some(&r))
            .unwrap_err()
            .to_string();
        assert!(e.contains("id-mapped mounts need a user namespace"), "{e}");
        std::fs::remove_dir_all(&b).unwrap();
    }

    #[test]
    fn overlay_lowerdirs_are_split_and_unescaped() {
        assert_eq!(
            overlay_lowerdirs("lowerdir=/a:/b\\:c,upperdir=/u,workdir=/w"),
            [PathBuf::from("/a"), PathBuf::from("/b:c")]
        );
        assert_eq!(
            overlay_lowerdirs("upperdir=/u,lowerdir=/x\\,y"),
            [PathBuf::from("/x,y")]
        );
        assert!(overlay_lowerdirs("upperdir=/u").is_empty());
    }
}
