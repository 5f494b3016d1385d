//! The systemd cgroup driver's half that talks to systemd: slice names, the D-Bus calls
//! that make and stop units, and limits as unit properties.
//!
//! On a node where systemd manages the cgroup tree (the kubelet's and containerd's
//! `SystemdCgroup = true`), cgroups are not made with `mkdir`: each one is a unit, so
//! that systemd knows it, never migrates or removes it behind the runtime's back, and
//! sets the same limits again when it re-applies its own. The kubelet names a pod's
//! cgroup as a slice (`kubepods-burstable-pod<uid>.slice`, whose dashes are its
//! ancestry: `/kubepods.slice/kubepods-burstable.slice/...`), and each process group
//! below it is a transient *scope* made over D-Bus with the processes it starts with.
//!
//! A scope cannot be made empty: systemd refuses a scope without a process and stops
//! it when its last process is gone. Every limit is sent as a property where systemd
//! has one (and written to the cgroup files as well by the caller, for those it has
//! none for and for the exact values). Scopes are made with `Delegate=yes`: systemd then
//! enables every controller for them and leaves what is below to the runtime.
//!
//! The connection is the system bus (`/run/dbus/system_bus_socket`), or systemd's own
//! private socket (`/run/systemd/private`, root only) on a node without a bus daemon.
//! Every call waits for its job to finish (the `JobRemoved` signal), so that when a
//! call returns the cgroup exists (or is gone).

use crate::error::{Error, Result};
use crate::path::CgroupPath;
use crate::resources::Resources;
use crate::stats::Stats;
use crate::{CgroupManager, Hierarchy, Version};
use parking_lot::Mutex;
use std::collections::HashMap;
use std::path::PathBuf;
use std::time::Duration;
use zbus::zvariant::{OwnedObjectPath, Value};

const DEST: &str = "org.freedesktop.systemd1";
const PATH: &str = "/org/freedesktop/systemd1";
const MANAGER: &str = "org.freedesktop.systemd1.Manager";
const SYSTEM_BUS: &str = "/run/dbus/system_bus_socket";
const PRIVATE: &str = "/run/systemd/private";

/// How long a unit's job may take: systemd answers in milliseconds, unless it is
/// stuck; a call then fails instead of hanging an RPC.
const JOB_TIMEOUT: Duration = Duration::from_secs(30);

/// The cgroup of the slice `name` (`a-b-c.slice` is `/a.slice/a-b.slice/a-b-c.slice`,
/// `-.slice` the root), checked as systemd checks slice names: no empty part between
/// dashes, none at the ends, nothing but a unit name.
pub fn expand_slice(name: &str) -> Result<CgroupPath> {
    let bad = |reason| Error::InvalidPath {
        path: name.to_string(),
        reason,
    };
    let Some(stem) = name.strip_suffix(".slice") else {
        return Err(bad("a systemd slice name ends in .slice"));
    };
    if stem == "-" {
        return Ok(CgroupPath::root());
    }
    if stem.is_empty() || stem.starts_with('-') || stem.ends_with('-') || stem.contains("--") {
        return Err(bad(
            "a slice name has no empty part between, before or after its dashes",
        ));
    }
    if !valid_unit_chars(stem) {
        return Err(bad(
            "a unit name has only letters, digits and `:_.\\-` in it",
        ));
    }
    let mut path = CgroupPath::root();
    let mut prefix = String::new();
    for part in stem.split('-') {
        if !prefix.is_empty() {
            prefix.push('-');
        }
        prefix.push_str(part);
        path = path.join(&format!("{prefix}.slice"))?;
    }
    Ok(path)
}

/// Whether `s` has only the characters systemd allows in a unit name (before its
/// type suffix), and is not too long for one.
fn valid_unit_chars(s: &str) -> bool {
    s.len() <= 240
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b":_.\\-@".contains(&b))
}

/// The unit whose cgroup `path` is (its last name, a `.scope` or `.slice`), if any.
pub fn unit_of(path: &CgroupPath) -> Option<&str> {
    path.name()
        .filter(|n| n.ends_with(".scope") || n.ends_with(".slice"))
}

/// A unit property as StartTransientUnit and SetUnitProperties take it.
pub type Property = (&'static str, Value<'static>);

/// The unit properties for `r` on a hierarchy of `version`, as systemd names them.
/// Limits systemd has no property for (hugepages, swap, `unified`) are not here: the
/// caller writes them to the cgroup files.
pub fn properties(r: &Resources, version: Version) -> Vec<Property> {
    let mut p: Vec<Property> = Vec::new();
    match version {
        Version::V2 => {
            if let Some(w) = r.v2_weight() {
                p.push(("CPUWeight", Value::U64(w)));
            }
        }
        Version::V1 => {
            if let Some(s) = r.v1_shares() {
                p.push(("CPUShares", Value::U64(s)));
            }
        }
    }
    if let Some(period) = r.cpu_period.filter(|p| *p > 0) {
        p.push(("CPUQuotaPeriodUSec", Value::U64(period)));
    }
    if let Some(quota) = r.cpu_quota {
        p.push((
            "CPUQuotaPerSecUSec",
            Value::U64(quota_per_sec(quota, r.cpu_period)),
        ));
    }
    if let Some(m) = r.memory_limit {
        let v = if m > 0 { m as u64 } else { u64::MAX };
        let name = match version {
            Version::V2 => "MemoryMax",
            Version::V1 => "MemoryLimit",
        };
        p.push((name, Value::U64(v)));
    }
    if let Some(n) = r.pids_limit {
        p.push((
            "TasksMax",
            Value::U64(if n > 0 { n as u64 } else { u64::MAX }),
        ));
    }
    if version == Version::V2 {
        if let Some(mask) = r.cpuset_cpus.as_deref().and_then(cpu_list_mask) {
            p.push(("AllowedCPUs", Value::from(mask)));
        }
        if let Some(mask) = r.cpuset_mems.as_deref().and_then(cpu_list_mask) {
            p.push(("AllowedMemoryNodes", Value::from(mask)));
        }
    }
    p
}

/// A CFS quota as systemd's `CPUQuotaPerSecUSec`: CPU time per second of wall time,
/// which systemd keeps to whole 10 ms (rounded up here, so that systemd never allows
/// less than asked; the caller writes the exact quota to `cpu.max` too). Unlimited
/// is `u64::MAX`.
fn quota_per_sec(quota: i64, period: Option<u64>) -> u64 {
    if quota <= 0 {
        return u64::MAX;
    }
    let period = period.filter(|p| *p > 0).unwrap_or(100_000);
    let per_sec = (quota as u64).saturating_mul(1_000_000) / period;
    per_sec.div_ceil(10_000) * 10_000
}

/// A kernel list (`0-2,7`) as the bitmask systemd's `AllowedCPUs` takes (bit N of
/// byte N/8 for CPU N). `None` for a list that does not parse (the cgroup file write
/// then reports it).
fn cpu_list_mask(list: &str) -> Option<Vec<u8>> {
    let mut mask = Vec::new();
    for part in list.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let (lo, hi) = match part.split_once('-') {
            Some((a, b)) => (a.parse::<usize>().ok()?, b.parse::<usize>().ok()?),
            None => {
                let n = part.parse::<usize>().ok()?;
                (n, n)
            }
        };
        if lo > hi || hi >= 1 << 16 {
            return None;
        }
        for n in lo..=hi {
            if mask.len() <= n / 8 {
                mask.resize(n / 8 + 1, 0);
            }
            mask[n / 8] |= 1 << (n % 8);
        }
    }
    (!mask.is_empty()).then_some(mask)
}

/// A connection to systemd's manager.
pub struct Systemd {
    /// The calls are blocking (the cgroup drivers are), the connection async: a small
    /// runtime of its own drives it, so callers on any thread may block on it.
    rt: Option<tokio::runtime::Runtime>,
    conn: zbus::Connection,
    /// Where it connected, for messages.
    via: &'static str,
}

impl std::fmt::Debug for Systemd {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Systemd({})", self.via)
    }
}

/// A runtime may be dropped anywhere, also in async code (where a blocking drop is
/// refused): its tasks (the connection's reader) are left to end in the background.
impl Drop for Systemd {
    fn drop(&mut self) {
        if let Some(rt) = self.rt.take() {
            rt.shutdown_background();
        }
    }
}

/// Runs `f` on `rt` and waits for it. A thread that drives another runtime's tasks
/// must not block in it (tokio refuses a nested `block_on`): from there the wait
/// happens on a thread of its own, and where none can be had (a pid limit) the call
/// fails instead of panicking.
fn run_on<F>(rt: &tokio::runtime::Runtime, f: F) -> F::Output
where
    F: std::future::Future + Send,
    F::Output: Send + Unspawned,
{
    if tokio::runtime::Handle::try_current().is_err() {
        return rt.block_on(f);
    }
    std::thread::scope(
        |s| match std::thread::Builder::new().spawn_scoped(s, || rt.block_on(f)) {
            Ok(h) => h.join().unwrap_or_else(|p| std::panic::resume_unwind(p)),
            Err(e) => F::Output::unspawned(e),
        },
    )
}

/// A result that can say no thread could be spawned for the call.
trait Unspawned {
    fn unspawned(e: std::io::Error) -> Self;
}

impl<T> Unspawned for zbus::Result<T> {
    fn unspawned(e: std::io::Error) -> Self {
        Err(zbus::Error::InputOutput(std::sync::Arc::new(e)))
    }
}

impl<T> Unspawned for Result<T> {
    fn unspawned(e: std::io::Error) -> Self {
        Err(Error::Systemd {
            op: "starting a thread for the D-Bus call".into(),
            reason: e.to_string(),
        })
    }
}

impl<T> Unspawned for std::result::Result<T, String> {
    fn unspawned(e: std::io::Error) -> Self {
        Err(format!("starting a thread for the D-Bus call: {e}"))
    }
}

fn dbus_err(op: impl Into<String>) -> impl FnOnce(zbus::Error) -> Error {
    let op = op.into();
    move |e| Error::Systemd {
        op,
        reason: e.to_string(),
    }
}

/// The D-Bus error name of a failed method call, if it is one.
fn error_name(e: &zbus::Error) -> Option<String> {
    match e {
        zbus::Error::MethodError(name, _, _) => Some(name.to_string()),
        _ => None,
    }
}

impl Systemd {
    /// Runs `f` on the connection's runtime and waits for it (see [`run_on`]).
    fn block_on<F>(&self, f: F) -> F::Output
    where
        F: std::future::Future + Send,
        F::Output: Send + Unspawned,
    {
        run_on(self.rt(), f)
    }

    fn rt(&self) -> &tokio::runtime::Runtime {
        self.rt.as_ref().expect("the runtime lives until drop")
    }

    /// Connects to systemd (the system bus, else its private socket) and asks for its
    /// signals. Fails with a message naming both places when neither answers.
    pub fn connect() -> Result<Systemd> {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("crust-systemd")
            .enable_io()
            .enable_time()
            .build()
            .map_err(|e| Error::Systemd {
                op: "starting the D-Bus runtime".into(),
                reason: e.to_string(),
            })?;
        let (conn, via) = run_on(&rt, async {
            let bus = async {
                let c =
                    zbus::connection::Builder::address(format!("unix:path={SYSTEM_BUS}").as_str())?
                        .build()
                        .await?;
                Ok::<_, zbus::Error>(c)
            };
            let bus_err = match tokio::time::timeout(Duration::from_secs(10), bus).await {
                Ok(Ok(c)) => return Ok((c, SYSTEM_BUS)),
                Ok(Err(e)) => e.to_string(),
                Err(_) => "timed out".to_string(),
            };
            let private = async {
                let c =
                    zbus::connection::Builder::address(format!("unix:path={PRIVATE}").as_str())?
                        .p2p()
                        .build()
                        .await?;
                Ok::<_, zbus::Error>(c)
            };
            match tokio::time::timeout(Duration::from_secs(10), private).await {
                Ok(Ok(c)) => Ok((c, PRIVATE)),
                Ok(Err(e)) => Err(format!("{SYSTEM_BUS}: {bus_err}; {PRIVATE}: {e}")),
                Err(_) => Err(format!("{SYSTEM_BUS}: {bus_err}; {PRIVATE}: timed out")),
            }
        })
        .map_err(|reason| Error::Systemd {
            op: "connecting to systemd".into(),
            reason,
        })?;
        let s = Systemd {
            rt: Some(rt),
            conn,
            via,
        };
        // Signals (JobRemoved) go only to subscribed clients.
        s.block_on(s.call("Subscribe", &()))
            .map_err(dbus_err(format!("Subscribe over {via}")))?;
        Ok(s)
    }

    /// systemd's version (the manager's `Version` property), e.g. `252.39-1~deb12u2`.
    pub fn version(&self) -> Result<String> {
        self.block_on(async {
            let reply = self
                .conn
                .call_method(
                    Some(DEST),
                    PATH,
                    Some("org.freedesktop.DBus.Properties"),
                    "Get",
                    &(MANAGER, "Version"),
                )
                .await?;
            let v: zbus::zvariant::OwnedValue = reply.body().deserialize()?;
            Ok::<_, zbus::Error>(String::try_from(v).unwrap_or_default())
        })
        .map_err(dbus_err("reading systemd's version"))
    }

    async fn call<B>(&self, method: &str, body: &B) -> zbus::Result<zbus::Message>
    where
        B: serde::Serialize + zbus::zvariant::DynamicType + Sync,
    {
        self.conn
            .call_method(Some(DEST), PATH, Some(MANAGER), method, body)
            .await
    }

    /// Calls a manager method that queues a job for `unit` and waits for the job's end:
    /// `Ok(true)` when it ended `done`, `Ok(false)` when `ok_errors` names the error
    /// the call failed with (no job then).
    fn job<B>(
        &self,
        what: &str,
        unit: &str,
        method: &str,
        body: &B,
        ok_errors: &[&str],
    ) -> Result<bool>
    where
        B: serde::Serialize + zbus::zvariant::DynamicType + Sync,
    {
        let op = format!("{what} {unit}");
        self.block_on(async {
            use futures::StreamExt;
            // Listening before the call: the job may end before its reply is read.
            let rule = zbus::MatchRule::builder()
                .msg_type(zbus::message::Type::Signal)
                .interface(MANAGER)
                .and_then(|b| b.member("JobRemoved"))
                .map_err(dbus_err(op.clone()))?
                .build();
            let mut removed = zbus::MessageStream::for_match_rule(rule, &self.conn, Some(256))
                .await
                .map_err(dbus_err(op.clone()))?;
            let job: OwnedObjectPath = match self.call(method, body).await {
                Ok(reply) => reply.body().deserialize().map_err(dbus_err(op.clone()))?,
                Err(e) => {
                    if error_name(&e).is_some_and(|n| ok_errors.contains(&n.as_str())) {
                        return Ok(false);
                    }
                    return Err(dbus_err(op.clone())(e));
                }
            };
            let wait = async {
                while let Some(msg) = removed.next().await {
                    let Ok(msg) = msg else { continue };
                    let Ok((_id, path, _unit, result)) =
                        msg.body()
                            .deserialize::<(u32, OwnedObjectPath, String, String)>()
                    else {
                        continue;
                    };
                    if path == job {
                        return Some(result);
                    }
                }
                None
            };
            match tokio::time::timeout(JOB_TIMEOUT, wait).await {
                Ok(Some(r)) if r == "done" => Ok(true),
                Ok(Some(r)) => Err(Error::Systemd {
                    op,
                    reason: format!("job ended {r:?} (systemctl status {unit})"),
                }),
                Ok(None) => Err(Error::Systemd {
                    op,
                    reason: "the connection to systemd closed".into(),
                }),
                Err(_) => Err(Error::Systemd {
                    op,
                    reason: format!("job not done after {JOB_TIMEOUT:?}"),
                }),
            }
        })
    }

    /// Starts the transient unit `name` with `props` and waits for its job; an error
    /// named in `ok_errors` is fine.
    fn start_transient(&self, name: &str, props: Vec<Property>, ok_errors: &[&str]) -> Result<()> {
        let aux: Vec<(&str, Vec<Property>)> = vec![];
        let what = format!("starting {}", name.rsplit('.').next().unwrap_or("unit"));
        self.job(
            &what,
            name,
            "StartTransientUnit",
            &(name, "replace", props, aux),
            ok_errors,
        )
        .map(drop)
    }

    /// Makes the transient slice `name` (its parent slices too, as systemd does for
    /// any slice). One that exists already is fine.
    pub fn start_slice(&self, name: &str, description: &str) -> Result<()> {
        let props: Vec<Property> = vec![
            ("Description", Value::from(description.to_string())),
            ("DefaultDependencies", Value::Bool(false)),
        ];
        self.start_transient(name, props, &["org.freedesktop.systemd1.UnitExists"])
    }

    /// Makes the transient scope `name` in `slice` holding `pid`, delegated. When this
    /// returns, `pid` is in the scope's cgroup; limits come after ([`Manager`]'s
    /// `apply`), as for cgroupfs.
    pub fn start_scope(&self, name: &str, slice: &str, pid: u32, description: &str) -> Result<()> {
        let props: Vec<Property> = vec![
            ("Description", Value::from(description.to_string())),
            ("Slice", Value::from(slice.to_string())),
            ("PIDs", Value::from(vec![pid])),
            ("Delegate", Value::Bool(true)),
            ("DefaultDependencies", Value::Bool(false)),
            // A scope whose processes were killed may end "failed": collected anyway,
            // so that the name can be used again and nothing piles up.
            ("CollectMode", Value::from("inactive-or-failed".to_string())),
        ];
        self.start_transient(name, props, &[])
    }

    /// Stops the unit `name` and forgets a failed state; gone already is fine.
    pub fn stop(&self, name: &str) -> Result<()> {
        self.job(
            "stopping",
            name,
            "StopUnit",
            &(name, "replace"),
            &[
                "org.freedesktop.systemd1.NoSuchUnit",
                "org.freedesktop.DBus.Error.UnknownObject",
            ],
        )?;
        // Only a failed unit has something to reset; the error of one that is not is
        // expected and says nothing.
        let _ = self.block_on(self.call("ResetFailedUnit", &(name,)));
        Ok(())
    }

    /// Sets properties of the running unit `name` (runtime only, as a limit update).
    pub fn set_properties(&self, name: &str, props: Vec<Property>) -> Result<()> {
        if props.is_empty() {
            return Ok(());
        }
        self.block_on(self.call("SetUnitProperties", &(name, true, props)))
            .map(drop)
            .map_err(dbus_err(format!("setting properties of {name}")))
    }

    /// Whether the unit `name` is loaded and active (or activating).
    pub fn is_active(&self, name: &str) -> Result<bool> {
        self.block_on(async {
            let reply = match self.call("GetUnit", &(name,)).await {
                Ok(r) => r,
                Err(e)
                    if error_name(&e).as_deref() == Some("org.freedesktop.systemd1.NoSuchUnit") =>
                {
                    return Ok(false)
                }
                Err(e) => return Err(e),
            };
            let unit: OwnedObjectPath = reply.body().deserialize()?;
            let reply = self
                .conn
                .call_method(
                    Some(DEST),
                    unit.as_str(),
                    Some("org.freedesktop.DBus.Properties"),
                    "Get",
                    &("org.freedesktop.systemd1.Unit", "ActiveState"),
                )
                .await?;
            let v: zbus::zvariant::OwnedValue = reply.body().deserialize()?;
            let state = String::try_from(v).unwrap_or_default();
            Ok(state == "active" || state == "activating")
        })
        .map_err(dbus_err(format!("asking for unit {name}")))
    }
}

/// The systemd cgroup driver: cgroups as systemd units (a `.slice` path is a slice, a
/// `.scope` path a transient scope in the slice that is its parent), everything else
/// (processes, stats, kills, freezing, the files systemd has no property for) through
/// the cgroupfs hierarchy below them.
///
/// A scope needs a process to exist, and crust starts a container's or pause's process
/// right into an existing cgroup (see `container::cgroup_join`): `create` starts the
/// scope around a placeholder (a copy of `holder`, a program that only sleeps) and
/// keeps it until the caller's first process is in ([`CgroupManager::joined`]), or the
/// cgroup is killed and removed.
#[derive(Debug)]
pub struct Manager {
    fs: Hierarchy,
    systemd: Systemd,
    holder: PathBuf,
    holders: Mutex<HashMap<CgroupPath, std::process::Child>>,
}

impl Manager {
    /// The driver over the hierarchy `fs` (its root the host's: systemd names cgroups
    /// from the top) and the connection `systemd`; `holder` is the placeholder program.
    pub fn new(fs: Hierarchy, systemd: Systemd, holder: PathBuf) -> Manager {
        Manager {
            fs,
            systemd,
            holder,
            holders: Mutex::default(),
        }
    }

    pub fn systemd(&self) -> &Systemd {
        &self.systemd
    }

    /// The slice name whose cgroup `path` is, checked against its expansion.
    fn slice_name<'a>(&self, path: &'a CgroupPath) -> Result<&'a str> {
        let name = path.name().unwrap_or("-.slice");
        match expand_slice(name) {
            Ok(p) if &p == path => Ok(name),
            _ => Err(Error::InvalidPath {
                path: path.to_string(),
                reason:
                    "not where the systemd slice it names lives (a-b.slice is /a.slice/a-b.slice)",
            }),
        }
    }

    fn release(&self, path: &CgroupPath) {
        let child = self.holders.lock().remove(path);
        if let Some(mut c) = child {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

impl CgroupManager for Manager {
    fn version(&self) -> Version {
        self.fs.version()
    }
    fn dirs(&self, path: &CgroupPath) -> Vec<PathBuf> {
        self.fs.dirs(path)
    }
    fn dir(&self, controller: &str, path: &CgroupPath) -> Option<PathBuf> {
        self.fs.dir(controller, path)
    }

    /// A slice: started (its parents with it). A scope: started in its parent slice
    /// around a placeholder process, unless it runs already.
    fn create(&self, path: &CgroupPath) -> Result<()> {
        let Some(name) = unit_of(path) else {
            return Err(Error::InvalidPath {
                path: path.to_string(),
                reason: "the systemd driver makes only slices (name.slice) and scopes (name.scope)",
            });
        };
        if name.ends_with(".slice") {
            self.slice_name(path)?;
            return self.systemd.start_slice(name, "crust pod");
        }
        let parent = path.parent().unwrap_or_default();
        let slice = self.slice_name(&parent)?;
        if !valid_unit_chars(name.trim_end_matches(".scope")) {
            return Err(Error::InvalidPath {
                path: path.to_string(),
                reason: "a unit name has only letters, digits and `:_.\\-` in it",
            });
        }
        if self.fs.exists(path) && self.systemd.is_active(name)? {
            return Ok(());
        }
        let child = std::process::Command::new(&self.holder)
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .map_err(|e| Error::io(crate::Op::Spawn, &self.holder, e))?;
        let pid = child.id();
        let mut child = Some(child);
        let started = self
            .systemd
            .start_scope(name, slice, pid, &format!("crust {name}"));
        if started.is_ok() {
            let old = self
                .holders
                .lock()
                .insert(path.clone(), child.take().expect("holder"));
            if let Some(mut old) = old {
                let _ = old.kill();
                let _ = old.wait();
            }
        }
        if let Some(mut c) = child {
            let _ = c.kill();
            let _ = c.wait();
        }
        // Delegate=yes has systemd enable only the controllers it knows (not hugetlb)
        // down to the scope, so the kubelet's hugepage limits would find no files
        // there. As runc does after starting a unit: the cgroupfs half enables in each
        // ancestor what is missing (the scope exists: nothing else changes). Not
        // fatal: a limit that then cannot be applied says so itself.
        if started.is_ok() && self.fs.version() == Version::V2 {
            if let Err(e) = self.fs.create(path) {
                tracing::warn!(error = %e, scope = name, "enabling controllers above the scope");
            }
        }
        started
    }

    fn joined(&self, path: &CgroupPath) {
        self.release(path);
    }

    fn add_process(&self, path: &CgroupPath, pid: i32) -> Result<()> {
        self.fs.add_process(path, pid)
    }
    fn procs(&self, path: &CgroupPath) -> Result<Vec<i32>> {
        self.fs.procs(path)
    }
    fn exists(&self, path: &CgroupPath) -> bool {
        self.fs.exists(path)
    }
    fn kill_all(&self, path: &CgroupPath) -> Result<()> {
        let r = self.fs.kill_all(path);
        self.release(path);
        r
    }

    /// Stops the unit (systemd removes its cgroup), then removes what may be left.
    fn remove(&self, path: &CgroupPath) -> Result<()> {
        self.release(path);
        if let Some(name) = unit_of(path) {
            self.systemd.stop(name)?;
        }
        self.fs.remove(path)
    }

    /// The limits as the unit's properties (so that systemd, when it sets its own
    /// again, sets these), then in the cgroup's files: the exact values, and those
    /// systemd has no property for.
    fn apply(&self, path: &CgroupPath, resources: &Resources) -> Result<()> {
        if let Some(name) = unit_of(path) {
            self.systemd
                .set_properties(name, properties(resources, self.fs.version()))?;
        }
        self.fs.apply(path, resources)
    }
    fn has_controller(&self, controller: &str, path: &CgroupPath) -> bool {
        self.fs.has_controller(controller, path)
    }
    fn hugetlb_unavailable(&self, below: &CgroupPath) -> Option<String> {
        self.fs.hugetlb_unavailable(below)
    }
    fn stats(&self, path: &CgroupPath) -> Result<Stats> {
        self.fs.stats(path)
    }
    fn oom_kills(&self, path: &CgroupPath) -> Result<u64> {
        self.fs.oom_kills(path)
    }
    fn freeze(&self, path: &CgroupPath) -> Result<()> {
        self.fs.freeze(path)
    }
    fn thaw(&self, path: &CgroupPath) -> Result<()> {
        self.fs.thaw(path)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slices_expand_to_their_ancestry() {
        let p = |s: &str| expand_slice(s).unwrap().to_string();
        assert_eq!(p("-.slice"), "/");
        assert_eq!(p("kubepods.slice"), "/kubepods.slice");
        assert_eq!(
            p("kubepods-burstable-pod6f1c_2a.slice"),
            "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod6f1c_2a.slice"
        );
        for bad in [
            "kubepods",
            "/kubepods.slice",
            "a--b.slice",
            "-a.slice",
            "a-.slice",
            ".slice",
            "a/b.slice",
            "kubepods/burstable",
        ] {
            let e = expand_slice(bad).unwrap_err();
            assert!(matches!(e, Error::InvalidPath { .. }), "{bad}: {e}");
        }
    }

    #[test]
    fn unit_of_names_scopes_and_slices_only() {
        let p = |s: &str| CgroupPath::new(s).unwrap();
        assert_eq!(unit_of(&p("/a.slice/crust-1.scope")), Some("crust-1.scope"));
        assert_eq!(unit_of(&p("/a.slice")), Some("a.slice"));
        assert_eq!(unit_of(&p("/kubepods/pod1/abc")), None);
    }

    #[test]
    fn limits_as_properties() {
        let r = Resources {
            cpu_shares: Some(1024),
            cpu_quota: Some(25_000),
            cpu_period: Some(100_000),
            memory_limit: Some(64 << 20),
            pids_limit: Some(0),
            cpuset_cpus: Some("0-1,9".into()),
            cpuset_mems: Some("0".into()),
            ..Default::default()
        };
        let v2 = properties(&r, Version::V2);
        let get = |props: &[Property], k: &str| {
            props
                .iter()
                .find(|(n, _)| *n == k)
                .map(|(_, v)| v.clone())
                .unwrap_or_else(|| panic!("no {k} in {props:?}"))
        };
        assert_eq!(get(&v2, "CPUWeight"), Value::U64(39));
        assert_eq!(get(&v2, "CPUQuotaPerSecUSec"), Value::U64(250_000));
        assert_eq!(get(&v2, "CPUQuotaPeriodUSec"), Value::U64(100_000));
        assert_eq!(get(&v2, "MemoryMax"), Value::U64(64 << 20));
        assert_eq!(get(&v2, "TasksMax"), Value::U64(u64::MAX));
        assert_eq!(get(&v2, "AllowedCPUs"), Value::from(vec![0b11u8, 0b10]));
        assert_eq!(get(&v2, "AllowedMemoryNodes"), Value::from(vec![1u8]));
        let v1 = properties(&r, Version::V1);
        assert_eq!(get(&v1, "CPUShares"), Value::U64(1024));
        assert_eq!(get(&v1, "MemoryLimit"), Value::U64(64 << 20));
        assert!(v1
            .iter()
            .all(|(n, _)| *n != "AllowedCPUs" && *n != "CPUWeight"));
        // Nothing asked, nothing set.
        assert!(properties(&Resources::default(), Version::V2).is_empty());
    }

    #[test]
    fn quota_rounds_up_to_whole_10ms() {
        assert_eq!(quota_per_sec(-1, None), u64::MAX);
        assert_eq!(quota_per_sec(0, Some(100_000)), u64::MAX);
        // 1 ms per 100 ms = 10 ms/s exactly.
        assert_eq!(quota_per_sec(1_000, Some(100_000)), 10_000);
        // 12.5 ms/s rounds up to 20 ms/s.
        assert_eq!(quota_per_sec(1_250, Some(100_000)), 20_000);
        // Default period 100 ms.
        assert_eq!(quota_per_sec(50_000, None), 500_000);
    }

    #[test]
    fn cpu_lists_become_masks() {
        assert_eq!(cpu_list_mask("0"), Some(vec![1]));
        assert_eq!(cpu_list_mask("0-7,8"), Some(vec![0xff, 1]));
        assert_eq!(cpu_list_mask(" 3 , 5-6 "), Some(vec![0b0110_1000]));
        assert_eq!(cpu_list_mask("x"), None);
        assert_eq!(cpu_list_mask("5-2"), None);
        assert_eq!(cpu_list_mask(""), None);
    }
}
