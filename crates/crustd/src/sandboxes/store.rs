//! Sandbox records and the in-memory store in front of them.
//!
//! A record reaches disk (`<root>/sandboxes/<id>/record.json`, written atomically)
//! before the RPC that changed it reports success, so a restarted daemon serves the
//! same answers. RPCs on one sandbox are serialized by its mutex; different sandboxes
//! proceed in parallel. Names are reserved in a registrar so two concurrent
//! RunPodSandbox calls for one pod cannot both win.
//!
//! ```text
//!  RunPodSandbox                    StopPodSandbox                RemovePodSandbox
//!  creating ──all steps done──► ready ──────────────► notready ───────────────────► (gone)
//!     │                           │ pause died           ▲
//!     │ any step failed           └──────────────────────┘
//!     ▼ (rolled back; also on restart)
//!   (gone)
//! ```

use crate::cri::error::{Error, Result};
use crate::daemon::util;
use parking_lot::{Mutex, RwLock};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::Arc;

pub const RECORD_VERSION: u32 = 1;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SandboxState {
    Creating,
    Ready,
    NotReady,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct PauseRef {
    pub pid: i32,
    pub start_time: u64,
}

/// The network attachment, recorded before CNI ADD runs: CNI may allocate even when
/// it fails, so teardown must know what to undo.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NetworkRef {
    /// The configuration list ADD ran with, kept so DEL runs the same chain even if
    /// the folder changed since.
    pub conf_path: PathBuf,
    pub conf: String,
    pub args: Vec<(String, String)>,
    pub capability_args: serde_json::Map<String, serde_json::Value>,
    pub ifname: String,
    /// The CNI result JSON, for the verbose status.
    #[serde(default)]
    pub result: Option<util::RawJson>,
    /// DEL succeeded; nothing left to tear down.
    #[serde(default)]
    pub torn_down: bool,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SandboxRecord {
    pub version: u32,
    pub id: String,
    pub state: SandboxState,
    pub name: String,
    pub namespace: String,
    pub uid: String,
    pub attempt: u32,
    pub labels: BTreeMap<String, String>,
    pub annotations: BTreeMap<String, String>,
    pub runtime_handler: String,
    pub created_at: i64,
    /// The PodSandboxConfig as protobuf bytes in hex: the whole request survives
    /// restarts without a second schema to keep in step.
    pub config_pb: util::HexBytes,
    pub host_network: bool,
    pub host_pid: bool,
    pub host_ipc: bool,
    pub pause: Option<PauseRef>,
    /// Namespace pins (bind mounts) by kind name: "net", "ipc", "uts", "pid".
    pub pins: BTreeMap<String, PathBuf>,
    pub network: Option<NetworkRef>,
    /// Primary address first, as PodSandboxStatus reports them.
    pub ips: Vec<String>,
    pub cgroup: Option<String>,
    /// The pod's `/dev/shm` tmpfs, shared by containers in the pod's IPC namespace.
    #[serde(default)]
    pub shm: Option<PathBuf>,
}

impl SandboxRecord {
    pub fn name_key(&self) -> String {
        name_key(&self.name, &self.namespace, &self.uid, self.attempt)
    }

    pub fn netns(&self) -> Option<&Path> {
        self.pins.get("net").map(PathBuf::as_path)
    }

    pub fn config(&self) -> Option<cri_api::PodSandboxConfig> {
        use prost::Message;
        cri_api::PodSandboxConfig::decode(self.config_pb.0.as_slice()).ok()
    }
}

/// containerd's reservation key: `<name>_<namespace>_<uid>_<attempt>`.
pub fn name_key(name: &str, namespace: &str, uid: &str, attempt: u32) -> String {
    format!("{name}_{namespace}_{uid}_{attempt}")
}

pub struct Sandbox {
    pub id: String,
    pub rec: crate::daemon::record::Record<SandboxRecord>,
    /// Whether its pause runs, as its pidfd tells (`liveness`).
    pub liveness: crate::sandboxes::liveness::Liveness,
}

pub struct Store {
    dir: PathBuf,
    map: RwLock<HashMap<String, Arc<Sandbox>>>,
    names: Names,
}

impl Store {
    pub fn new(dir: PathBuf) -> Self {
        Store {
            dir,
            map: RwLock::new(HashMap::new()),
            names: Names::default(),
        }
    }

    pub fn record_path(&self, id: &str) -> PathBuf {
        self.dir.join(id).join("record.json")
    }

    /// Files of a sandbox (hostname, hosts, resolv.conf) live beside its record.
    pub fn sandbox_dir(&self, id: &str) -> PathBuf {
        self.dir.join(id)
    }

    /// Every readable record on disk; unreadable ones are reported and skipped.
    pub fn load_records(&self) -> Vec<std::result::Result<SandboxRecord, String>> {
        let Ok(rd) = std::fs::read_dir(&self.dir) else {
            return vec![];
        };
        let mut out = Vec::new();
        for e in rd.flatten() {
            let p = e.path().join("record.json");
            match std::fs::read(&p) {
                Ok(b) => out.push(
                    serde_json::from_slice::<SandboxRecord>(&b)
                        .map_err(|err| format!("{}: {err}", p.display())),
                ),
                Err(err) => out.push(Err(format!("{}: {err}", p.display()))),
            }
        }
        out
    }

    pub fn save(&self, rec: &SandboxRecord) -> Result<()> {
        let bytes = serde_json::to_vec_pretty(rec).map_err(Error::internal)?;
        util::write_atomic(&self.record_path(&rec.id), &bytes)
            .map_err(|e| Error::Internal(format!("saving sandbox record {}: {e}", rec.id)))
    }

    /// Saves a step of RunPodSandbox's progress atomically (temp, rename) but without
    /// waiting for the disk: a daemon killed now finds it (the page cache survives a
    /// process), and what the step made (a process, a mount in /run, a cgroup) would
    /// not survive a power loss either. Before something that outlives a reboot (an IP
    /// reserved on disk by CNI), [`Store::save`] is used.
    pub fn save_progress(&self, rec: &SandboxRecord) -> Result<()> {
        let bytes = serde_json::to_vec_pretty(rec).map_err(Error::internal)?;
        util::write_replace(&self.record_path(&rec.id), &bytes)
            .map_err(|e| Error::Internal(format!("saving sandbox record {}: {e}", rec.id)))
    }

    /// Removes the record and everything beside it.
    pub fn delete_files(&self, id: &str) -> Result<()> {
        match std::fs::remove_dir_all(self.sandbox_dir(id)) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(Error::Internal(format!(
                "removing {}: {e}",
                self.sandbox_dir(id).display()
            ))),
        }
    }

    /// Reserves a pod's name for `id`, failing as containerd does when it is taken.
    pub fn reserve_name(&self, key: &str, id: &str) -> Result<()> {
        self.names.reserve("sandbox", key, id)
    }

    pub fn release_name(&self, key: &str, id: &str) {
        self.names.release(key, id)
    }

    pub fn insert(&self, rec: SandboxRecord) -> Arc<Sandbox> {
        let sb = Arc::new(Sandbox {
            id: rec.id.clone(),
            rec: crate::daemon::record::Record::new(rec),
            liveness: Default::default(),
        });
        self.map.write().insert(sb.id.clone(), sb.clone());
        sb
    }

    pub fn remove(&self, id: &str) {
        self.map.write().remove(id);
    }

    /// By full id or a unique prefix of one.
    pub fn get(&self, id: &str) -> Result<Arc<Sandbox>> {
        by_id_or_prefix(&self.map.read(), "sandbox", id)
    }

    pub fn list(&self) -> Vec<Arc<Sandbox>> {
        self.map.read().values().cloned().collect()
    }
}

/// Names reserved for ids (a pod's or a container's), so that two concurrent creates of
/// one name cannot both win, as containerd's name index does.
#[derive(Default)]
pub struct Names(Mutex<HashMap<String, String>>);

impl Names {
    /// Reserves `key` for `id` (again for the same id is fine); AlreadyExists when
    /// another id holds it.
    pub fn reserve(&self, what: &str, key: &str, id: &str) -> Result<()> {
        let mut names = self.0.lock();
        if let Some(owner) = names.get(key) {
            if owner != id {
                return Err(Error::AlreadyExists(format!(
                    "failed to reserve {what} name {key:?}: name {key:?} is reserved for {owner:?}"
                )));
            }
        }
        names.insert(key.to_string(), id.to_string());
        Ok(())
    }

    /// Releases `key` if `id` holds it.
    pub fn release(&self, key: &str, id: &str) {
        let mut names = self.0.lock();
        if names.get(key).map(|o| o == id).unwrap_or(false) {
            names.remove(key);
        }
    }
}

/// An entry by its full id or a unique prefix of one (as crictl and containerd accept).
pub fn by_id_or_prefix<T>(map: &HashMap<String, Arc<T>>, what: &str, id: &str) -> Result<Arc<T>> {
    if id.is_empty() {
        return Err(Error::InvalidArgument(format!("{what} id is empty")));
    }
    if let Some(v) = map.get(id) {
        return Ok(v.clone());
    }
    let mut hits = map.iter().filter(|(k, _)| k.starts_with(id));
    match (hits.next(), hits.next()) {
        (Some((_, v)), None) => Ok(v.clone()),
        (Some(_), Some(_)) => Err(Error::InvalidArgument(format!(
            "{what} id prefix {id:?} is ambiguous"
        ))),
        _ => Err(Error::NotFound(format!("{what} {id:?} not found"))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(id: &str) -> SandboxRecord {
        SandboxRecord {
            version: RECORD_VERSION,
            id: id.into(),
            state: SandboxState::Ready,
            name: "n".into(),
            namespace: "ns".into(),
            uid: "u".into(),
            attempt: 0,
            labels: BTreeMap::new(),
            annotations: BTreeMap::new(),
            runtime_handler: String::new(),
            created_at: 1,
            config_pb: util::HexBytes::default(),
            host_network: false,
            host_pid: false,
            host_ipc: false,
            pause: None,
            pins: BTreeMap::new(),
            network: None,
            ips: vec![],
            cgroup: None,
            shm: None,
        }
    }

    #[test]
    fn lookup_by_prefix_and_names() {
        let d = std::env::temp_dir().join(format!("crustd-store-{}", std::process::id()));
        let s = Store::new(d.clone());
        s.insert(rec("abcdef"));
        s.insert(rec("abc999"));
        assert_eq!(s.get("abcd").unwrap().id, "abcdef");
        assert!(matches!(s.get("abc"), Err(Error::InvalidArgument(_))));
        assert!(matches!(s.get("zz"), Err(Error::NotFound(_))));
        s.reserve_name("k", "abcdef").unwrap();
        s.reserve_name("k", "abcdef").unwrap();
        assert!(matches!(
            s.reserve_name("k", "abc999"),
            Err(Error::AlreadyExists(_))
        ));
        s.release_name("k", "abc999");
        assert!(s.reserve_name("k", "abc999").is_err());
        s.release_name("k", "abcdef");
        s.reserve_name("k", "abc999").unwrap();
        s.save(&rec("abcdef")).unwrap();
        let loaded = s.load_records();
        assert_eq!(loaded.len(), 1);
        assert_eq!(loaded[0].as_ref().unwrap(), &rec("abcdef"));
        s.delete_files("abcdef").unwrap();
        s.delete_files("abcdef").unwrap();
        let _ = std::fs::remove_dir_all(d);
    }

    /// A call that panics while it holds the store's lock or the names' (a bug) fails
    /// alone: the stores' locks are parking_lot's, which a panic does not poison, where
    /// std's would have made every later call panic on `unwrap`.
    #[test]
    fn a_panic_under_a_stores_lock_fails_that_call_alone() {
        let d = std::env::temp_dir().join(format!("crustd-store-poison-{}", std::process::id()));
        let s = Arc::new(Store::new(d.clone()));
        s.insert(rec("abcdef"));
        let s2 = s.clone();
        let r = std::thread::spawn(move || {
            let _map = s2.map.write();
            let _names = s2.names.0.lock();
            panic!("a bug while the locks are held");
        })
        .join();
        assert!(r.is_err());
        assert_eq!(s.get("abc").unwrap().id, "abcdef");
        s.insert(rec("abc999"));
        assert_eq!(s.list().len(), 2);
        s.reserve_name("k", "abcdef").unwrap();
        let _ = std::fs::remove_dir_all(d);
    }

    #[test]
    fn the_cni_result_is_kept_as_its_json_text_and_written_as_json() {
        let mut r = rec("abc");
        let result =
            serde_json::json!({"cniVersion": "1.0.0", "ips": [{"address": "10.0.0.2/24"}]});
        r.network = Some(NetworkRef {
            conf_path: "/etc/cni/net.d/10-x.conflist".into(),
            conf: "{}".into(),
            args: vec![],
            capability_args: Default::default(),
            ifname: "eth0".into(),
            result: util::RawJson::from_value(&result),
            torn_down: false,
        });
        let text = serde_json::to_value(&r).unwrap();
        // An object in the file, as records written before it was raw text.
        assert_eq!(text["network"]["result"], result);
        let back: SandboxRecord =
            serde_json::from_slice(&serde_json::to_vec(&text).unwrap()).unwrap();
        assert_eq!(back, r);
        let raw = back.network.unwrap().result.unwrap();
        assert_eq!(
            serde_json::from_str::<serde_json::Value>(raw.0.get()).unwrap(),
            result
        );
    }
}
