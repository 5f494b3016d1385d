//! Container records and the in-memory store in front of them.
//!
//! A record lives at `<root>/containers/<id>/record.json` beside the container's OCI
//! bundle (`config.json`, the empty `rootfs` mount point), and reaches disk before the
//! RPC that changed it reports success. The executor's state dir (init pid, start
//! gate) and the monitor's exit record are volatile, under `<state>/containers/<id>`.
//!
//! ```text
//!  CreateContainer            StartContainer          the process exits (monitor's record)
//!  creating ──all done──► created ──────────► running ─────────────────────► exited
//!     │ a step failed        │ StopContainer / the init died before start      ▲
//!     ▼ (rolled back)        └─────────────────────────────────────────────────┘
//!   (gone)                              RemoveContainer from any state ──► (gone)
//! ```

use crate::cri::error::{Error, Result};
use crate::daemon::util;
use parking_lot::RwLock;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::Arc;

pub const RECORD_VERSION: u32 = 1;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ContainerState {
    Creating,
    Created,
    Running,
    Exited,
}

impl ContainerState {
    pub fn cri(self) -> cri_api::ContainerState {
        match self {
            ContainerState::Creating => cri_api::ContainerState::ContainerUnknown,
            ContainerState::Created => cri_api::ContainerState::ContainerCreated,
            ContainerState::Running => cri_api::ContainerState::ContainerRunning,
            ContainerState::Exited => cri_api::ContainerState::ContainerExited,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ContainerRecord {
    pub version: u32,
    pub id: String,
    pub sandbox_id: String,
    pub state: ContainerState,
    /// `metadata.name` and `metadata.attempt`.
    pub name: String,
    pub attempt: u32,
    /// The key reserved in the name registrar (see [`name_key`]).
    pub name_key: String,
    pub labels: BTreeMap<String, String>,
    pub annotations: BTreeMap<String, String>,
    /// The image as the request named it, and the image id it resolved to.
    pub image: String,
    pub image_id: String,
    /// A repo tag (or digest) of the image, for `ContainerStatus.image_ref`'s neighbours.
    pub image_name: String,
    pub created_at: i64,
    #[serde(default)]
    pub started_at: i64,
    #[serde(default)]
    pub finished_at: i64,
    #[serde(default)]
    pub exit_code: i32,
    #[serde(default)]
    pub reason: String,
    #[serde(default)]
    pub message: String,
    /// The host path of the CRI log (sandbox `log_directory` + `log_path`), if any.
    pub log_path: Option<PathBuf>,
    /// The ContainerConfig as protobuf bytes in hex.
    pub config_pb: util::HexBytes,
    /// The resources now in force (UpdateContainerResources replaces them), protobuf hex.
    #[serde(default)]
    pub resources_pb: util::HexBytes,
    /// The container's cgroup path (under the pod's).
    pub cgroup: Option<String>,
    /// A snapshot of the image is the root file system (keyed by the container id).
    pub snapshot: bool,
    /// The init, and the monitor that is its parent.
    #[serde(default)]
    pub pid: i32,
    #[serde(default)]
    pub monitor_pid: i32,
    #[serde(default)]
    pub monitor_start_time: u64,
    /// The image's stop signal (`SIGTERM` when it names none).
    pub stop_signal: String,
    /// The init's start time (`/proc/PID/stat`), to tell it from a reused pid.
    #[serde(default)]
    pub pid_start_time: u64,
    /// The runtime handler whose external OCI runtime runs the container; empty for
    /// crust's own executor.
    #[serde(default)]
    pub runtime: String,
    /// The root file system is mounted on the host at `<bundle>/rootfs` (external
    /// runtimes only; crust's executor mounts it inside the container).
    #[serde(default)]
    pub rootfs_mounted: bool,
    /// The process's user as the bundle's spec has it, for ContainerStatus without
    /// reading the spec back on every call; None in records written before it was kept
    /// (the spec is read then).
    #[serde(default)]
    pub user: Option<RunAs>,
    /// The bundle's spec has `poststart` or `poststop` hooks for crustd to run (crust's
    /// own executor only; an external runtime runs its own): the spec is read back
    /// only then.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub oci_hooks: bool,
}

/// uid, gid and additional gids of a container's process.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunAs {
    pub uid: i64,
    pub gid: i64,
    pub groups: Vec<i64>,
}

impl ContainerRecord {
    pub fn config(&self) -> Option<cri_api::ContainerConfig> {
        use prost::Message;
        cri_api::ContainerConfig::decode(self.config_pb.0.as_slice()).ok()
    }

    pub fn resources(&self) -> Option<cri_api::LinuxContainerResources> {
        use prost::Message;
        if self.resources_pb.0.is_empty() {
            return None;
        }
        cri_api::LinuxContainerResources::decode(self.resources_pb.0.as_slice()).ok()
    }
}

/// containerd's container name: `<container>_<pod>_<namespace>_<pod uid>_<attempt>`.
pub fn name_key(name: &str, pod: &str, namespace: &str, uid: &str, attempt: u32) -> String {
    format!("{name}_{pod}_{namespace}_{uid}_{attempt}")
}

pub struct Container {
    pub id: String,
    pub sandbox_id: String,
    pub rec: crate::daemon::record::Record<ContainerRecord>,
    /// A task waits on the monitor's pidfd and folds its exit into the record when it
    /// comes: the record is then current by itself, and reads need not look at the exit
    /// record or `/proc` (see `lifecycle::watch`).
    pub watched: std::sync::atomic::AtomicBool,
}

/// Writes `rec` to `path` durably (temp file, fsync, rename): [`Containers::save`],
/// also from a thread that holds no `Containers` (the executor's `on_init` hook).
pub fn write_record(path: &std::path::Path, rec: &ContainerRecord) -> Result<()> {
    let bytes = serde_json::to_vec_pretty(rec).map_err(Error::internal)?;
    util::write_atomic(path, &bytes)
        .map_err(|e| Error::Internal(format!("saving container record {}: {e}", rec.id)))
}

pub struct Containers {
    dir: PathBuf,
    state_dir: PathBuf,
    map: RwLock<HashMap<String, Arc<Container>>>,
    names: crate::sandboxes::store::Names,
}

impl Containers {
    pub fn new(dir: PathBuf, state_dir: PathBuf) -> Self {
        Containers {
            dir,
            state_dir,
            map: RwLock::new(HashMap::new()),
            names: Default::default(),
        }
    }

    /// The persistent folder: record and OCI bundle.
    pub fn bundle(&self, id: &str) -> PathBuf {
        self.dir.join(id)
    }

    /// The OCI spec of a container's bundle, as CreateContainer wrote it.
    pub fn read_spec(&self, id: &str) -> Result<oci_spec::runtime::Spec> {
        let bytes = std::fs::read(self.bundle(id).join("config.json"))
            .map_err(|e| Error::Internal(format!("reading the spec of {id}: {e}")))?;
        serde_json::from_slice(&bytes)
            .map_err(|e| Error::Internal(format!("parsing the spec of {id}: {e}")))
    }

    /// The executor's state dir (volatile).
    pub fn exec_state(&self, id: &str) -> PathBuf {
        self.state_dir.join(id)
    }

    /// The monitor's exit record: beside, not in, the executor's state dir, which the
    /// executor creates itself and removes on delete.
    pub fn exit_file(&self, id: &str) -> PathBuf {
        self.state_dir.join(format!("{id}.exit"))
    }

    pub fn load_records(&self) -> Vec<std::result::Result<ContainerRecord, String>> {
        let Ok(rd) = std::fs::read_dir(&self.dir) else {
            return vec![];
        };
        let mut out = Vec::new();
        for e in rd.flatten() {
            let p = e.path().join("record.json");
            match std::fs::read(&p) {
                Ok(b) => out.push(
                    serde_json::from_slice::<ContainerRecord>(&b)
                        .map_err(|err| format!("{}: {err}", p.display())),
                ),
                Err(err) => out.push(Err(format!("{}: {err}", p.display()))),
            }
        }
        out
    }

    /// Writes the record without syncing it: for the `creating` record, which only
    /// tells a restarted crustd what to roll back. A node crash may lose it; the
    /// sweep at start (`recovery::recover`) removes what it would have named.
    pub fn save_unsynced(&self, rec: &ContainerRecord) -> Result<()> {
        let bytes = serde_json::to_vec_pretty(rec).map_err(Error::internal)?;
        util::write_replace(&self.record_path(&rec.id), &bytes)
            .map_err(|e| Error::Internal(format!("saving container record {}: {e}", rec.id)))
    }

    /// Container folders without a readable record (a create cut off by a crash
    /// before its first record reached the disk).
    pub fn orphan_dirs(&self) -> Vec<PathBuf> {
        let Ok(rd) = std::fs::read_dir(&self.dir) else {
            return vec![];
        };
        rd.flatten()
            .map(|e| e.path())
            .filter(|p| p.is_dir() && !p.join("record.json").exists())
            .collect()
    }

    pub fn save(&self, rec: &ContainerRecord) -> Result<()> {
        write_record(&self.record_path(&rec.id), rec)
    }

    /// Where [`Containers::save`] keeps a container's record.
    pub fn record_path(&self, id: &str) -> PathBuf {
        self.bundle(id).join("record.json")
    }

    /// Removes the record, the bundle and the volatile files.
    pub fn delete_files(&self, id: &str) -> Result<()> {
        for p in [self.exec_state(id), self.bundle(id)] {
            match std::fs::remove_dir_all(&p) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(Error::Internal(format!("removing {}: {e}", p.display()))),
            }
        }
        match std::fs::remove_file(self.exit_file(id)) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(Error::Internal(format!(
                "removing exit record of {id}: {e}"
            ))),
        }
    }

    pub fn reserve_name(&self, key: &str, id: &str) -> Result<()> {
        self.names.reserve("container", key, id)
    }

    pub fn release_name(&self, key: &str, id: &str) {
        self.names.release(key, id)
    }

    pub fn insert(&self, rec: ContainerRecord) -> Arc<Container> {
        let c = Arc::new(Container {
            id: rec.id.clone(),
            sandbox_id: rec.sandbox_id.clone(),
            rec: crate::daemon::record::Record::new(rec),
            watched: Default::default(),
        });
        self.map.write().insert(c.id.clone(), c.clone());
        c
    }

    pub fn remove(&self, id: &str) {
        self.map.write().remove(id);
    }

    /// By full id or a unique prefix of one.
    pub fn get(&self, id: &str) -> Result<Arc<Container>> {
        crate::sandboxes::store::by_id_or_prefix(&self.map.read(), "container", id)
    }

    pub fn list(&self) -> Vec<Arc<Container>> {
        self.map.read().values().cloned().collect()
    }

    pub fn of_sandbox(&self, sandbox_id: &str) -> Vec<Arc<Container>> {
        self.map
            .read()
            .values()
            .filter(|c| c.sandbox_id == sandbox_id)
            .cloned()
            .collect()
    }
}
