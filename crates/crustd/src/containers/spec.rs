//! CRI → OCI: a ContainerConfig, its sandbox and its image become the OCI runtime spec
//! written into the container's bundle. The spec is built as JSON and parsed into
//! `oci_spec`'s types, so what lands in `config.json` is exactly what the executor (or
//! `runc`/`crun` for another handler) reads.
//!
//! Kubernetes' rules, as containerd and CRI-O apply them:
//! - command: `command` replaces the image's Entrypoint and then `args` replace its
//!   Cmd; `args` alone keep the Entrypoint and replace Cmd.
//! - env: `HOSTNAME`, then the image's, then the config's, a later key replacing an
//!   earlier one in place.
//! - user: `run_as_user`/`run_as_username`/`run_as_group` over the image's `User`;
//!   names and the primary group come from the image's `/etc/passwd` and `/etc/group`.
//! - capabilities: the default set containerd and CRI-O grant, plus `add`, minus
//!   `drop` (`ALL` allowed in both); everything for a privileged container.

use crate::cri::error::{Error, Result};
use crate::sandboxes::store::SandboxRecord;
use cri_api::{
    ContainerConfig, LinuxContainerResources, LinuxContainerSecurityContext, MountPropagation,
    NamespaceMode, SupplementalGroupsPolicy,
};
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// The capabilities a container gets unless told otherwise (containerd's and CRI-O's
/// default set).
pub const DEFAULT_CAPS: [&str; 14] = [
    "CAP_CHOWN",
    "CAP_DAC_OVERRIDE",
    "CAP_FSETID",
    "CAP_FOWNER",
    "CAP_MKNOD",
    "CAP_NET_RAW",
    "CAP_SETGID",
    "CAP_SETUID",
    "CAP_SETFCAP",
    "CAP_SETPCAP",
    "CAP_NET_BIND_SERVICE",
    "CAP_SYS_CHROOT",
    "CAP_KILL",
    "CAP_AUDIT_WRITE",
];

/// Paths hidden from a non-privileged container when the kubelet sends none.
pub const DEFAULT_MASKED: [&str; 11] = [
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
];

/// Paths made read-only for a non-privileged container when the kubelet sends none.
pub const DEFAULT_READONLY: [&str; 5] = [
    "/proc/bus",
    "/proc/fs",
    "/proc/irq",
    "/proc/sys",
    "/proc/sysrq-trigger",
];

/// Every capability crustd itself may grant (its bounding set), for privileged
/// containers and `ALL`, as containerd's "all current capabilities": a capability the
/// node's bounding set lacks (`CAP_SYS_RESOURCE` on some machines) cannot be given.
fn all_caps() -> Vec<String> {
    let mut v: Vec<String> = caps::read(None, caps::CapSet::Bounding)
        .or_else(|_| caps::runtime::procfs_all_supported(None))
        .unwrap_or_else(|_| caps::all())
        .into_iter()
        .map(|c| c.to_string())
        .collect();
    v.sort();
    v
}

/// Every capability the kernel knows, to tell an unknown name from one crustd lacks.
fn known_caps() -> Vec<String> {
    caps::runtime::procfs_all_supported(None)
        .unwrap_or_else(|_| caps::all())
        .into_iter()
        .map(|c| c.to_string())
        .collect()
}

/// What the image contributes.
#[derive(Debug, Clone, Default)]
pub struct ImageInfo {
    pub entrypoint: Vec<String>,
    pub cmd: Vec<String>,
    pub env: Vec<String>,
    pub working_dir: String,
    pub user: String,
    /// The read-only layers, top first, to read `/etc/passwd` and `/etc/group` from.
    pub layers: Vec<PathBuf>,
}

/// Everything the spec needs besides the ContainerConfig.
pub struct SpecInput<'a> {
    pub id: &'a str,
    pub sandbox: &'a SandboxRecord,
    /// The sandbox's hostname, hosts and resolv.conf files.
    pub pod_dir: &'a Path,
    pub hostname: String,
    pub image: &'a ImageInfo,
    pub cgroup: Option<&'a str>,
    /// A new cgroup namespace (the unified hierarchy; containerd does the same).
    pub cgroupns: bool,
    /// `/proc/<init>/ns/pid` of the target container, for `NamespaceMode::Target`.
    pub target_pid_ns: Option<PathBuf>,
    /// The OCI mounts (without destination) of the image volumes, by index in
    /// `cfg.mounts` (see image_volume.rs).
    pub image_volumes: std::collections::HashMap<usize, Value>,
    /// Whether the sandbox's runtime handler makes recursive read-only mounts (what
    /// RuntimeStatus reports for it).
    pub recursive_read_only: bool,
    /// The pod's user namespace maps, when it has a user namespace of its own (its pin
    /// is `user` among the sandbox's).
    pub userns: Option<crate::sandboxes::userns::PodMaps>,
    /// The AppArmor profile the container and its execs run under (apparmor.rs).
    pub apparmor: Option<String>,
}

fn args(cfg: &ContainerConfig, img: &ImageInfo) -> Result<Vec<String>> {
    let mut out: Vec<String> = if !cfg.command.is_empty() {
        cfg.command.iter().chain(cfg.args.iter()).cloned().collect()
    } else if !cfg.args.is_empty() {
        img.entrypoint
            .iter()
            .chain(cfg.args.iter())
            .cloned()
            .collect()
    } else {
        img.entrypoint
            .iter()
            .chain(img.cmd.iter())
            .cloned()
            .collect()
    };
    if out.is_empty() {
        return Err(Error::InvalidArgument(
            "no command specified: the config has no command or args and the image no Entrypoint or Cmd"
                .into(),
        ));
    }
    if out[0].is_empty() {
        out[0] = "/".into(); // never executable: fails at create with a clear step
    }
    Ok(out)
}

fn env(cfg: &ContainerConfig, img: &ImageInfo, hostname: &str) -> Vec<String> {
    let mut out: Vec<(String, String)> = vec![];
    let mut set = |k: &str, v: &str| match out.iter_mut().find(|(kk, _)| kk == k) {
        Some(e) => e.1 = v.to_string(),
        None => out.push((k.to_string(), v.to_string())),
    };
    set("HOSTNAME", hostname);
    for e in &img.env {
        let (k, v) = e.split_once('=').unwrap_or((e.as_str(), ""));
        set(k, v);
    }
    for kv in &cfg.envs {
        set(&kv.key, &kv.value);
    }
    if !out.iter().any(|(k, _)| k == "PATH") {
        out.insert(
            0,
            (
                "PATH".into(),
                "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin".into(),
            ),
        );
    }
    out.into_iter().map(|(k, v)| format!("{k}={v}")).collect()
}

/// A file of the image (`etc/passwd`), from the topmost layer that has it. Symlinks
/// are not followed: a layer's `/etc/passwd` pointing at the host's would otherwise
/// be read here, on the host.
fn image_file(layers: &[PathBuf], rel: &str) -> Option<String> {
    for l in layers {
        let mut p = l.clone();
        let mut ok = true;
        for part in rel.split('/') {
            p.push(part);
            match std::fs::symlink_metadata(&p) {
                Ok(m) if m.file_type().is_symlink() => {
                    ok = false;
                    break;
                }
                Ok(_) => {}
                Err(_) => {
                    ok = false;
                    break;
                }
            }
        }
        if ok {
            if let Ok(s) = std::fs::read_to_string(&p) {
                return Some(s);
            }
        }
    }
    None
}

/// passwd entries: name, uid, gid.
fn passwd(layers: &[PathBuf]) -> Vec<(String, u32, u32)> {
    image_file(layers, "etc/passwd")
        .unwrap_or_default()
        .lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split(':').collect();
            (f.len() >= 4)
                .then(|| Some((f[0].to_string(), f[2].parse().ok()?, f[3].parse().ok()?)))?
        })
        .collect()
}

/// group entries: name, gid, members.
fn groups(layers: &[PathBuf]) -> Vec<(String, u32, Vec<String>)> {
    image_file(layers, "etc/group")
        .unwrap_or_default()
        .lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split(':').collect();
            if f.len() < 3 {
                return None;
            }
            let members = f
                .get(3)
                .map(|m| {
                    m.split(',')
                        .filter(|s| !s.is_empty())
                        .map(String::from)
                        .collect()
                })
                .unwrap_or_default();
            Some((f[0].to_string(), f[2].parse().ok()?, members))
        })
        .collect()
}

/// uid, gid, additional gids.
fn user(cfg: &ContainerConfig, img: &ImageInfo) -> Result<(u32, u32, Vec<u32>)> {
    let sc = cfg
        .linux
        .as_ref()
        .and_then(|l| l.security_context.clone())
        .unwrap_or_default();
    // A group alone would run as the image's user with another group, which nobody
    // asked for; containerd refuses it too.
    if let (Some(g), None, "") = (
        &sc.run_as_group,
        &sc.run_as_user,
        sc.run_as_username.as_str(),
    ) {
        return Err(Error::InvalidArgument(format!(
            "run_as_group {} is set without run_as_user or run_as_username",
            g.value
        )));
    }
    let pw = passwd(&img.layers);
    let gr = groups(&img.layers);
    let by_name = |n: &str| pw.iter().find(|(name, _, _)| name == n).cloned();
    let (uid, mut gid, mut name): (u32, Option<u32>, Option<String>);
    if let Some(u) = &sc.run_as_user {
        if u.value < 0 || u.value > u32::MAX as i64 {
            return Err(Error::InvalidArgument(format!(
                "run_as_user {} is out of range",
                u.value
            )));
        }
        uid = u.value as u32;
        gid = None;
        name = None;
    } else if !sc.run_as_username.is_empty() {
        let (n, u, g) = by_name(&sc.run_as_username).ok_or_else(|| {
            Error::InvalidArgument(format!(
                "user {:?} is not in the image's /etc/passwd",
                sc.run_as_username
            ))
        })?;
        uid = u;
        gid = Some(g);
        name = Some(n);
    } else {
        (uid, gid, name) = image_user(img, &pw, &gr)?;
    }
    if name.is_none() {
        if let Some((n, _, g)) = pw.iter().find(|(_, u, _)| *u == uid) {
            name = Some(n.clone());
            if gid.is_none() {
                gid = Some(*g);
            }
        }
    }
    if let Some(g) = &sc.run_as_group {
        if g.value < 0 || g.value > u32::MAX as i64 {
            return Err(Error::InvalidArgument(format!(
                "run_as_group {} is out of range",
                g.value
            )));
        }
        gid = Some(g.value as u32);
    }
    let gid = gid.unwrap_or(0);
    let extra = supplementary_groups(&sc, gid, name.as_deref(), &gr)?;
    Ok((uid, gid, extra))
}

/// The image's `User` (`uid`, `name`, `uid:gid`, `name:group`), resolved in its own
/// passwd and group files: uid, gid if it says, the user's name if known.
fn image_user(
    img: &ImageInfo,
    pw: &[(String, u32, u32)],
    gr: &[(String, u32, Vec<String>)],
) -> Result<(u32, Option<u32>, Option<String>)> {
    let by_name = |n: &str| pw.iter().find(|(name, _, _)| name == n).cloned();
    let (mut uid, mut gid, mut name): (u32, Option<u32>, Option<String>);
    uid = 0;
    gid = None;
    name = None;
    let spec = img.user.trim();
    if !spec.is_empty() {
        let (u, g) = match spec.split_once(':') {
            Some((u, g)) => (u, Some(g)),
            None => (spec, None),
        };
        match u.parse::<u32>() {
            Ok(n) => uid = n,
            Err(_) => {
                let (n, u, g) = by_name(u).ok_or_else(|| {
                    Error::InvalidArgument(format!(
                        "the image's user {u:?} is not in its /etc/passwd"
                    ))
                })?;
                uid = u;
                gid = Some(g);
                name = Some(n);
            }
        }
        if let Some(g) = g {
            gid = Some(match g.parse::<u32>() {
                Ok(n) => n,
                Err(_) => gr
                    .iter()
                    .find(|(n, _, _)| n == g)
                    .map(|(_, id, _)| *id)
                    .ok_or_else(|| {
                        Error::InvalidArgument(format!(
                            "the image's group {g:?} is not in its /etc/group"
                        ))
                    })?,
            });
        }
    }
    Ok((uid, gid, name))
}

/// The additional groups: the primary one, then (unless the policy is Strict) those the
/// image's /etc/group gives the user, then the request's.
fn supplementary_groups(
    sc: &LinuxContainerSecurityContext,
    gid: u32,
    name: Option<&str>,
    gr: &[(String, u32, Vec<String>)],
) -> Result<Vec<u32>> {
    // The primary group is a supplementary one too, as containerd and CRI-O make it
    // (and as ContainerStatus.user reports it). Merge (the default) adds the groups the
    // image's /etc/group gives the user; Strict only what the config names.
    let strict = match SupplementalGroupsPolicy::try_from(sc.supplemental_groups_policy) {
        Ok(SupplementalGroupsPolicy::Merge) => false,
        Ok(SupplementalGroupsPolicy::Strict) => true,
        Err(_) => {
            return Err(Error::InvalidArgument(format!(
                "supplemental_groups_policy {} is unknown",
                sc.supplemental_groups_policy
            )))
        }
    };
    let mut extra: Vec<u32> = vec![gid];
    if let (Some(n), false) = (name, strict) {
        for (_, id, members) in gr {
            if members.iter().any(|m| m == n) && !extra.contains(id) {
                extra.push(*id);
            }
        }
    }
    for g in &sc.supplemental_groups {
        if *g < 0 || *g > u32::MAX as i64 {
            return Err(Error::InvalidArgument(format!(
                "supplemental group {g} is out of range"
            )));
        }
        if !extra.contains(&(*g as u32)) {
            extra.push(*g as u32);
        }
    }
    Ok(extra)
}

fn normalize_cap(c: &str) -> String {
    let up = c.to_ascii_uppercase();
    if up == "ALL" || up.starts_with("CAP_") {
        up
    } else {
        format!("CAP_{up}")
    }
}

fn capabilities(cfg: &ContainerConfig, privileged: bool) -> Result<Vec<String>> {
    if privileged {
        return Ok(all_caps());
    }
    let c = cfg
        .linux
        .as_ref()
        .and_then(|l| l.security_context.as_ref())
        .and_then(|s| s.capabilities.clone())
        .unwrap_or_default();
    let known = known_caps();
    let grantable = all_caps();
    let add: Vec<String> = c
        .add_capabilities
        .iter()
        .map(|s| normalize_cap(s))
        .collect();
    let drop: Vec<String> = c
        .drop_capabilities
        .iter()
        .map(|s| normalize_cap(s))
        .collect();
    for cap in add.iter().chain(drop.iter()) {
        if cap != "ALL" && !known.contains(cap) && cap.parse::<caps::Capability>().is_err() {
            return Err(Error::InvalidArgument(format!(
                "unknown capability {cap:?}"
            )));
        }
    }
    let mut set: Vec<String> = if add.iter().any(|c| c == "ALL") {
        grantable.clone()
    } else {
        DEFAULT_CAPS.iter().map(|s| s.to_string()).collect()
    };
    if drop.iter().any(|c| c == "ALL") {
        set.clear();
    }
    set.retain(|c| !drop.contains(c));
    for a in add.iter().filter(|a| *a != "ALL") {
        if !set.contains(a) {
            set.push(a.clone());
        }
    }
    Ok(set)
}

/// A recursive read-only mount (the kubelet's `recursiveReadOnly: Enabled`) is read-only
/// all the way down, so it cannot also be writable, nor receive mounts from the host
/// that would then be read-only too: refused, as containerd does, and refused where
/// the runtime cannot make one rather than quietly made writable below.
fn recursive_read_only_allowed(m: &cri_api::Mount, supported: bool) -> Result<()> {
    let refuse = |why: &str| {
        Err(Error::InvalidArgument(format!(
            "recursive read-only mount of {} at {}: {why}",
            m.host_path, m.container_path
        )))
    };
    if !supported {
        return refuse("the runtime handler cannot make recursive read-only mounts");
    }
    if !m.readonly {
        return refuse("the mount is not read-only");
    }
    if MountPropagation::try_from(m.propagation) != Ok(MountPropagation::PropagationPrivate) {
        return refuse("its propagation is not private");
    }
    Ok(())
}

fn propagation(p: i32) -> &'static str {
    match MountPropagation::try_from(p).unwrap_or(MountPropagation::PropagationPrivate) {
        MountPropagation::PropagationPrivate => "rprivate",
        MountPropagation::PropagationHostToContainer => "rslave",
        MountPropagation::PropagationBidirectional => "rshared",
    }
}

/// The OCI `linux.resources` for a CRI resources message (informational in the
/// bundle: crustd writes the cgroup itself).
pub fn oci_resources(r: &LinuxContainerResources) -> Value {
    let mut cpu = serde_json::Map::new();
    if r.cpu_shares > 0 {
        cpu.insert("shares".into(), json!(r.cpu_shares));
    }
    if r.cpu_quota != 0 {
        cpu.insert("quota".into(), json!(r.cpu_quota));
    }
    if r.cpu_period > 0 {
        cpu.insert("period".into(), json!(r.cpu_period));
    }
    if !r.cpuset_cpus.is_empty() {
        cpu.insert("cpus".into(), json!(r.cpuset_cpus));
    }
    if !r.cpuset_mems.is_empty() {
        cpu.insert("mems".into(), json!(r.cpuset_mems));
    }
    let mut mem = serde_json::Map::new();
    if r.memory_limit_in_bytes > 0 {
        mem.insert("limit".into(), json!(r.memory_limit_in_bytes));
    }
    if r.memory_swap_limit_in_bytes > 0 {
        mem.insert("swap".into(), json!(r.memory_swap_limit_in_bytes));
    }
    let mut out = serde_json::Map::new();
    if !cpu.is_empty() {
        out.insert("cpu".into(), Value::Object(cpu));
    }
    if !mem.is_empty() {
        out.insert("memory".into(), Value::Object(mem));
    }
    if !r.unified.is_empty() {
        out.insert("unified".into(), json!(r.unified));
    }
    Value::Object(out)
}

/// Builds the spec. Bind sources that do not exist are created as directories, as
/// containerd does for a `hostPath` the kubelet did not make.
pub fn build(cfg: &ContainerConfig, input: &SpecInput) -> Result<oci_spec::runtime::Spec> {
    let img = input.image;
    let sb = input.sandbox;
    let linux = cfg.linux.clone().unwrap_or_default();
    let sc = linux.security_context.clone().unwrap_or_default();
    let privileged = sc.privileged;
    let args = args(cfg, img)?;
    let env = env(cfg, img, &input.hostname);
    let (uid, gid, additional) = user(cfg, img)?;
    let caps = capabilities(cfg, privileged)?;
    let cwd = working_dir(cfg, img)?;

    let (mounts, rootfs_propagation) = mounts(cfg, input, &sc)?;

    let namespaces = namespaces(input, &sc)?;

    let (masked, readonly) = masked_and_readonly(&sc);

    let devices = devices(cfg)?;

    let resources = linux.resources.clone().unwrap_or_default();
    let annotations = annotations(cfg, sb);

    let mut process = json!({
        "terminal": cfg.tty,
        "user": {"uid": uid, "gid": gid, "additionalGids": additional},
        "args": args,
        "env": env,
        "cwd": cwd,
        "capabilities": {"bounding": caps, "effective": caps, "permitted": caps},
        "noNewPrivileges": sc.no_new_privs,
    });
    if resources.oom_score_adj != 0 {
        process["oomScoreAdj"] = json!(resources.oom_score_adj);
    }
    if let Some(profile) = &input.apparmor {
        process["apparmorProfile"] = json!(profile);
    }
    let mut linux_v = json!({
        "namespaces": namespaces,
        "maskedPaths": masked,
        "readonlyPaths": readonly,
        "rootfsPropagation": rootfs_propagation,
        "resources": oci_resources(&resources),
        "devices": devices,
    });
    if let Some(cg) = input.cgroup {
        linux_v["cgroupsPath"] = json!(cg);
    }
    if let Some(m) = &input.userns {
        linux_v["uidMappings"] = json!([oci_map(&m.uid)]);
        linux_v["gidMappings"] = json!([oci_map(&m.gid)]);
    }
    if !privileged {
        if let Some(s) = crate::containers::seccomp::linux_seccomp(&sc)? {
            linux_v["seccomp"] = s;
        }
    }
    let spec = json!({
        "ociVersion": "1.0.2",
        "process": process,
        "root": {"path": "rootfs", "readonly": sc.readonly_rootfs},
        "mounts": mounts,
        "annotations": annotations,
        "linux": linux_v,
    });
    serde_json::from_value(spec)
        .map_err(|e| Error::Internal(format!("building the OCI spec of {}: {e}", input.id)))
}

/// One line of an OCI id map.
fn oci_map(m: &container::userns::IdMap) -> Value {
    json!({"containerID": m.container_id, "hostID": m.host_id, "size": m.size})
}

/// The process's working directory: the request's, else the image's, else `/`.
fn working_dir(cfg: &ContainerConfig, img: &ImageInfo) -> Result<String> {
    let cwd = if !cfg.working_dir.is_empty() {
        cfg.working_dir.clone()
    } else if !img.working_dir.is_empty() {
        img.working_dir.clone()
    } else {
        "/".to_string()
    };
    if !cwd.starts_with('/') {
        return Err(Error::InvalidArgument(format!(
            "working_dir {cwd:?} is not absolute"
        )));
    }
    Ok(cwd)
}

/// The container's mounts (the kernel filesystems, `/dev/shm`, the pod's hostname,
/// hosts and resolv.conf unless the request mounts its own, then the request's and
/// image volumes) and the rootfs propagation its bind mounts need.
fn mounts(
    cfg: &ContainerConfig,
    input: &SpecInput,
    sc: &LinuxContainerSecurityContext,
) -> Result<(Vec<Value>, &'static str)> {
    let sb = input.sandbox;
    let privileged = sc.privileged;
    let mut mounts: Vec<Value> = vec![
        json!({"destination": "/proc", "type": "proc", "source": "proc", "options": ["nosuid", "noexec", "nodev"]}),
        json!({"destination": "/dev", "type": "tmpfs", "source": "tmpfs", "options": ["nosuid", "strictatime", "mode=755", "size=65536k"]}),
        json!({"destination": "/dev/pts", "type": "devpts", "source": "devpts", "options": ["nosuid", "noexec", "newinstance", "ptmxmode=0666", "mode=0620", "gid=5"]}),
        json!({"destination": "/dev/mqueue", "type": "mqueue", "source": "mqueue", "options": ["nosuid", "noexec", "nodev"]}),
        json!({"destination": "/sys", "type": "sysfs", "source": "sysfs", "options": ["nosuid", "noexec", "nodev", if privileged { "rw" } else { "ro" }]}),
        json!({"destination": "/sys/fs/cgroup", "type": "cgroup", "source": "cgroup", "options": ["nosuid", "noexec", "nodev", "relatime", if privileged { "rw" } else { "ro" }]}),
    ];
    // /dev/shm: the pod's (shared with every container in the pod's IPC namespace),
    // the host's for a hostIPC pod, else one of the container's own.
    match (&sb.shm, sb.host_ipc) {
        (Some(shm), _) => mounts.push(json!({"destination": "/dev/shm", "type": "bind", "source": shm, "options": ["rbind", "rprivate", "nosuid", "noexec", "nodev", "rw"]})),
        (None, true) => mounts.push(json!({"destination": "/dev/shm", "type": "bind", "source": "/dev/shm", "options": ["rbind", "rprivate", "nosuid", "noexec", "nodev", "rw"]})),
        (None, false) => mounts.push(json!({"destination": "/dev/shm", "type": "tmpfs", "source": "shm", "options": ["nosuid", "noexec", "nodev", "mode=1777", "size=65536k"]})),
    }
    let user_dests: Vec<&str> = cfg
        .mounts
        .iter()
        .map(|m| m.container_path.as_str())
        .collect();
    for (dest, file) in [
        ("/etc/hostname", "hostname"),
        ("/etc/hosts", "hosts"),
        ("/etc/resolv.conf", "resolv.conf"),
    ] {
        let src = input.pod_dir.join(file);
        if src.exists() && !user_dests.contains(&dest) {
            let ro = if sc.readonly_rootfs { "ro" } else { "rw" };
            mounts.push(json!({"destination": dest, "type": "bind", "source": src, "options": ["rbind", "rprivate", ro]}));
        }
    }
    let mut rootfs_propagation = "rprivate";
    for (i, m) in cfg.mounts.iter().enumerate() {
        if m.container_path.is_empty() || !m.container_path.starts_with('/') {
            return Err(Error::InvalidArgument(format!(
                "mount container_path {:?} is not absolute",
                m.container_path
            )));
        }
        if let Some(v) = input.image_volumes.get(&i) {
            let mut v = v.clone();
            v["destination"] = json!(m.container_path);
            mounts.push(v);
            continue;
        }
        if m.host_path.is_empty() || !m.host_path.starts_with('/') {
            return Err(Error::InvalidArgument(format!(
                "mount host_path {:?} (for {}) is not absolute",
                m.host_path, m.container_path
            )));
        }
        if m.recursive_read_only {
            recursive_read_only_allowed(m, input.recursive_read_only)?;
        }
        let src = Path::new(&m.host_path);
        if std::fs::symlink_metadata(src).is_err() {
            std::fs::create_dir_all(src).map_err(|e| {
                Error::InvalidArgument(format!(
                    "mount source {} for {}: {e}",
                    m.host_path, m.container_path
                ))
            })?;
        }
        let prop = propagation(m.propagation);
        match prop {
            "rshared" => rootfs_propagation = "rshared",
            "rslave" if rootfs_propagation != "rshared" => rootfs_propagation = "rslave",
            _ => {}
        }
        let ro = if m.readonly { "ro" } else { "rw" };
        let mut options = vec!["rbind", prop, ro];
        if m.recursive_read_only {
            options.push("rro");
        }
        let mut mount = json!({"destination": m.container_path, "type": "bind", "source": m.host_path, "options": options});
        // The kubelet asks for an id-mapped volume with the pod's maps: the executor
        // maps it with the pod's user namespace.
        if crate::sandboxes::userns::mount_mapped(m, input.userns.as_ref())? {
            if let Some(u) = &input.userns {
                mount["uidMappings"] = json!([oci_map(&u.uid)]);
                mount["gidMappings"] = json!([oci_map(&u.gid)]);
            }
        }
        mounts.push(mount);
    }
    Ok((mounts, rootfs_propagation))
}

/// The namespaces: a mount namespace of its own, the pod's network, IPC and UTS, the
/// PID namespace as the request's mode says, and a cgroup namespace if configured.
fn namespaces(input: &SpecInput, sc: &LinuxContainerSecurityContext) -> Result<Vec<Value>> {
    let sb = input.sandbox;
    let privileged = sc.privileged;
    let mut namespaces: Vec<Value> = vec![json!({"type": "mount"})];
    for (kind, pin) in [
        ("user", "user"),
        ("network", "net"),
        ("ipc", "ipc"),
        ("uts", "uts"),
    ] {
        if let Some(p) = sb.pins.get(pin) {
            namespaces.push(json!({"type": kind, "path": p}));
        }
    }
    // No options at all mean the CRI's default, POD (the enum's zero), as containerd
    // and CRI-O read it: the container joins the pause's PID namespace.
    let pid_mode = sc
        .namespace_options
        .as_ref()
        .map(|n| n.pid)
        .unwrap_or(NamespaceMode::Pod as i32);
    match NamespaceMode::try_from(pid_mode).unwrap_or(NamespaceMode::Container) {
        NamespaceMode::Container => namespaces.push(json!({"type": "pid"})),
        NamespaceMode::Pod => match sb.pins.get("pid") {
            Some(p) => namespaces.push(json!({"type": "pid", "path": p})),
            // A hostPID pod: its containers share the host's.
            None if sb.host_pid => {}
            None => namespaces.push(json!({"type": "pid"})),
        },
        NamespaceMode::Node => {}
        NamespaceMode::Target => {
            let p = input.target_pid_ns.as_ref().ok_or_else(|| {
                Error::NotFound("the target container of the PID namespace is not running".into())
            })?;
            namespaces.push(json!({"type": "pid", "path": p}));
        }
    }
    if input.cgroupns && !privileged {
        namespaces.push(json!({"type": "cgroup"}));
    }
    Ok(namespaces)
}

/// Masked and read-only paths: the request's, the defaults when it sends none, none
/// for a privileged container.
fn masked_and_readonly(sc: &LinuxContainerSecurityContext) -> (Vec<String>, Vec<String>) {
    if sc.privileged {
        (vec![], vec![])
    } else {
        (
            if sc.masked_paths.is_empty() {
                DEFAULT_MASKED.iter().map(|s| s.to_string()).collect()
            } else {
                sc.masked_paths.clone()
            },
            if sc.readonly_paths.is_empty() {
                DEFAULT_READONLY.iter().map(|s| s.to_string()).collect()
            } else {
                sc.readonly_paths.clone()
            },
        )
    }
}

/// The request's devices, with the type and numbers of the host's device files.
fn devices(cfg: &ContainerConfig) -> Result<Vec<Value>> {
    let mut devices: Vec<Value> = vec![];
    for d in &cfg.devices {
        let meta = std::fs::metadata(&d.host_path)
            .map_err(|e| Error::InvalidArgument(format!("device {}: {e}", d.host_path)))?;
        use std::os::unix::fs::{FileTypeExt, MetadataExt};
        let kind = if meta.file_type().is_char_device() {
            "c"
        } else if meta.file_type().is_block_device() {
            "b"
        } else {
            return Err(Error::InvalidArgument(format!(
                "{} is not a device",
                d.host_path
            )));
        };
        let rdev = meta.rdev();
        devices.push(json!({
            "path": if d.container_path.is_empty() { &d.host_path } else { &d.container_path },
            "type": kind,
            "major": libc::major(rdev),
            "minor": libc::minor(rdev),
            "fileMode": meta.mode() & 0o777,
            "uid": 0, "gid": 0,
        }));
    }
    Ok(devices)
}

/// The request's annotations and containerd's `io.kubernetes.cri.*` ones.
fn annotations(cfg: &ContainerConfig, sb: &SandboxRecord) -> BTreeMap<String, String> {
    let mut annotations: BTreeMap<String, String> = cfg.annotations.clone().into_iter().collect();
    annotations.insert(
        "io.kubernetes.cri.container-type".into(),
        "container".into(),
    );
    annotations.insert("io.kubernetes.cri.sandbox-id".into(), sb.id.clone());
    annotations.insert("io.kubernetes.cri.sandbox-name".into(), sb.name.clone());
    annotations.insert(
        "io.kubernetes.cri.sandbox-namespace".into(),
        sb.namespace.clone(),
    );
    annotations.insert("io.kubernetes.cri.sandbox-uid".into(), sb.uid.clone());
    if let Some(md) = &cfg.metadata {
        annotations.insert("io.kubernetes.cri.container-name".into(), md.name.clone());
    }
    if let Some(i) = &cfg.image {
        annotations.insert("io.kubernetes.cri.image-name".into(), i.image.clone());
    }
    annotations
}

#[cfg(test)]
mod tests {
    use super::*;

    fn img(ep: &[&str], cmd: &[&str]) -> ImageInfo {
        ImageInfo {
            entrypoint: ep.iter().map(|s| s.to_string()).collect(),
            cmd: cmd.iter().map(|s| s.to_string()).collect(),
            ..Default::default()
        }
    }

    fn cfg(command: &[&str], a: &[&str]) -> ContainerConfig {
        ContainerConfig {
            command: command.iter().map(|s| s.to_string()).collect(),
            args: a.iter().map(|s| s.to_string()).collect(),
            ..Default::default()
        }
    }

    #[test]
    fn command_and_args_follow_kubernetes() {
        let i = img(&["/ep"], &["c1"]);
        assert_eq!(args(&cfg(&[], &[]), &i).unwrap(), ["/ep", "c1"]);
        assert_eq!(args(&cfg(&[], &["a"]), &i).unwrap(), ["/ep", "a"]);
        assert_eq!(args(&cfg(&["/x"], &[]), &i).unwrap(), ["/x"]);
        assert_eq!(args(&cfg(&["/x"], &["a"]), &i).unwrap(), ["/x", "a"]);
        assert!(matches!(
            args(&cfg(&[], &[]), &img(&[], &[])),
            Err(Error::InvalidArgument(_))
        ));
    }

    #[test]
    fn env_overrides_in_place() {
        let mut i = img(&[], &[]);
        i.env = vec!["PATH=/bin".into(), "A=1".into()];
        let mut c = cfg(&[], &[]);
        c.envs = vec![cri_api::KeyValue {
            key: "A".into(),
            value: "2".into(),
        }];
        assert_eq!(env(&c, &i, "h"), ["HOSTNAME=h", "PATH=/bin", "A=2"]);
    }

    #[test]
    fn caps_add_drop_all() {
        let mut c = cfg(&[], &[]);
        let mut d = capabilities(&c, false).unwrap();
        d.sort();
        // containerd's default set (oci.DefaultCapabilities), as CRI-O's.
        assert_eq!(
            d,
            [
                "CAP_AUDIT_WRITE",
                "CAP_CHOWN",
                "CAP_DAC_OVERRIDE",
                "CAP_FOWNER",
                "CAP_FSETID",
                "CAP_KILL",
                "CAP_MKNOD",
                "CAP_NET_BIND_SERVICE",
                "CAP_NET_RAW",
                "CAP_SETFCAP",
                "CAP_SETGID",
                "CAP_SETPCAP",
                "CAP_SETUID",
                "CAP_SYS_CHROOT",
            ]
        );
        c.linux = Some(cri_api::LinuxContainerConfig {
            security_context: Some(cri_api::LinuxContainerSecurityContext {
                capabilities: Some(cri_api::Capability {
                    add_capabilities: vec!["sys_admin".into()],
                    drop_capabilities: vec!["ALL".into()],
                    ..Default::default()
                }),
                ..Default::default()
            }),
            ..Default::default()
        });
        assert_eq!(capabilities(&c, false).unwrap(), ["CAP_SYS_ADMIN"]);
        c.linux
            .as_mut()
            .unwrap()
            .security_context
            .as_mut()
            .unwrap()
            .capabilities = Some(cri_api::Capability {
            add_capabilities: vec!["NOT_A_CAP".into()],
            ..Default::default()
        });
        assert!(capabilities(&c, false).is_err());
    }

    #[test]
    fn user_from_image_passwd() {
        let d = std::env::temp_dir().join(format!("crustd-spec-{}", std::process::id()));
        std::fs::create_dir_all(d.join("etc")).unwrap();
        std::fs::write(
            d.join("etc/passwd"),
            "root:x:0:0::/root:/bin/sh\nwww:x:33:44::/:/bin/sh\n",
        )
        .unwrap();
        std::fs::write(
            d.join("etc/group"),
            "root:x:0:\nweb:x:44:\nextra:x:70:www\n",
        )
        .unwrap();
        let mut i = img(&[], &[]);
        i.layers = vec![d.clone()];
        // The primary group is among the supplementary ones, as containerd has it.
        i.user = "www".into();
        assert_eq!(user(&cfg(&[], &[]), &i).unwrap(), (33, 44, vec![44, 70]));
        i.user = "33:web".into();
        assert_eq!(user(&cfg(&[], &[]), &i).unwrap(), (33, 44, vec![44, 70]));
        i.user = "nobody".into();
        assert!(user(&cfg(&[], &[]), &i).is_err());
        i.user = "1234".into();
        assert_eq!(user(&cfg(&[], &[]), &i).unwrap(), (1234, 0, vec![0]));
        let _ = std::fs::remove_dir_all(d);
    }
}
