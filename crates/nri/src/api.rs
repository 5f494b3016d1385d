//! The NRI protocol's messages (package `nri.pkg.api.v1alpha1`, as NRI v0.12 speaks
//! it), written out with prost's derive from the protocol's field numbers: only what
//! crustd sends and reads. Fields crustd does not apply to a container are still read
//! (as raw bytes) so that an adjustment asking for them is refused, not dropped.

use std::collections::HashMap;

pub const RUNTIME_SERVICE: &str = "nri.pkg.api.v1alpha1.Runtime";
pub const PLUGIN_SERVICE: &str = "nri.pkg.api.v1alpha1.Plugin";

/// NRI's `Event`; a plugin's subscription mask has bit `1 << (event - 1)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[repr(i32)]
pub enum Event {
    RunPodSandbox = 1,
    StopPodSandbox = 2,
    RemovePodSandbox = 3,
    CreateContainer = 4,
    PostCreateContainer = 5,
    StartContainer = 6,
    PostStartContainer = 7,
    UpdateContainer = 8,
    PostUpdateContainer = 9,
    StopContainer = 10,
    RemoveContainer = 11,
}

/// Every event bit NRI v0.12 defines (through VALIDATE_CONTAINER_ADJUSTMENT, 14): a
/// mask with others is refused.
pub const VALID_EVENTS: i32 = (1 << 14) - 1;

impl Event {
    pub fn bit(self) -> i32 {
        1 << (self as i32 - 1)
    }

    /// The plugin method of its own for the event (NRI v0.12); older plugins get a
    /// `StateChange` instead.
    pub fn method(self) -> &'static str {
        match self {
            Event::RunPodSandbox => "RunPodSandbox",
            Event::StopPodSandbox => "StopPodSandbox",
            Event::RemovePodSandbox => "RemovePodSandbox",
            Event::CreateContainer => "CreateContainer",
            Event::PostCreateContainer => "PostCreateContainer",
            Event::StartContainer => "StartContainer",
            Event::PostStartContainer => "PostStartContainer",
            Event::UpdateContainer => "UpdateContainer",
            Event::PostUpdateContainer => "PostUpdateContainer",
            Event::StopContainer => "StopContainer",
            Event::RemoveContainer => "RemoveContainer",
        }
    }
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct Empty {}

#[derive(Clone, PartialEq, prost::Message)]
pub struct RegisterPluginRequest {
    #[prost(string, tag = "1")]
    pub plugin_name: String,
    #[prost(string, tag = "2")]
    pub plugin_idx: String,
    #[prost(string, tag = "3")]
    pub nri_version: String,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct UpdateContainersRequest {
    #[prost(message, repeated, tag = "1")]
    pub update: Vec<ContainerUpdate>,
    #[prost(message, repeated, tag = "2")]
    pub evict: Vec<ContainerEviction>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct UpdateContainersResponse {
    #[prost(message, repeated, tag = "1")]
    pub failed: Vec<ContainerUpdate>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct ConfigureRequest {
    #[prost(string, tag = "1")]
    pub config: String,
    #[prost(string, tag = "2")]
    pub runtime_name: String,
    #[prost(string, tag = "3")]
    pub runtime_version: String,
    /// Milliseconds.
    #[prost(int64, tag = "4")]
    pub registration_timeout: i64,
    /// Milliseconds.
    #[prost(int64, tag = "5")]
    pub request_timeout: i64,
    #[prost(string, tag = "6")]
    pub nri_version: String,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct ConfigureResponse {
    #[prost(int32, tag = "2")]
    pub events: i32,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct SynchronizeRequest {
    #[prost(message, repeated, tag = "1")]
    pub pods: Vec<PodSandbox>,
    #[prost(message, repeated, tag = "2")]
    pub containers: Vec<Container>,
    #[prost(bool, tag = "3")]
    pub more: bool,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct SynchronizeResponse {
    #[prost(message, repeated, tag = "1")]
    pub update: Vec<ContainerUpdate>,
    #[prost(bool, tag = "2")]
    pub more: bool,
}

/// The request of the pod events (`RunPodSandbox`, `StopPodSandbox`,
/// `RemovePodSandbox`).
#[derive(Clone, PartialEq, prost::Message)]
pub struct PodRequest {
    #[prost(message, optional, tag = "1")]
    pub pod: Option<PodSandbox>,
}

/// The request of the container events (`CreateContainer`, `StartContainer`,
/// `StopContainer`, the `Post*` ones, `RemoveContainer`).
#[derive(Clone, PartialEq, prost::Message)]
pub struct ContainerRequest {
    #[prost(message, optional, tag = "1")]
    pub pod: Option<PodSandbox>,
    #[prost(message, optional, tag = "2")]
    pub container: Option<Container>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct UpdateContainerRequest {
    #[prost(message, optional, tag = "1")]
    pub pod: Option<PodSandbox>,
    #[prost(message, optional, tag = "2")]
    pub container: Option<Container>,
    #[prost(message, optional, tag = "3")]
    pub linux_resources: Option<LinuxResources>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct CreateContainerResponse {
    #[prost(message, optional, tag = "1")]
    pub adjust: Option<ContainerAdjustment>,
    #[prost(message, repeated, tag = "2")]
    pub update: Vec<ContainerUpdate>,
    #[prost(message, repeated, tag = "3")]
    pub evict: Vec<ContainerEviction>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct UpdateContainerResponse {
    #[prost(message, repeated, tag = "1")]
    pub update: Vec<ContainerUpdate>,
    #[prost(message, repeated, tag = "2")]
    pub evict: Vec<ContainerEviction>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct StopContainerResponse {
    #[prost(message, repeated, tag = "1")]
    pub update: Vec<ContainerUpdate>,
}

/// What plugins before NRI v0.12 get for every event but CreateContainer,
/// UpdateContainer and StopContainer.
#[derive(Clone, PartialEq, prost::Message)]
pub struct StateChangeEvent {
    #[prost(int32, tag = "1")]
    pub event: i32,
    #[prost(message, optional, tag = "2")]
    pub pod: Option<PodSandbox>,
    #[prost(message, optional, tag = "3")]
    pub container: Option<Container>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct PodSandbox {
    #[prost(string, tag = "1")]
    pub id: String,
    #[prost(string, tag = "2")]
    pub name: String,
    #[prost(string, tag = "3")]
    pub uid: String,
    #[prost(string, tag = "4")]
    pub namespace: String,
    #[prost(map = "string, string", tag = "5")]
    pub labels: HashMap<String, String>,
    #[prost(map = "string, string", tag = "6")]
    pub annotations: HashMap<String, String>,
    #[prost(string, tag = "7")]
    pub runtime_handler: String,
    #[prost(message, optional, tag = "8")]
    pub linux: Option<LinuxPodSandbox>,
    #[prost(uint32, tag = "9")]
    pub pid: u32,
    #[prost(string, repeated, tag = "10")]
    pub ips: Vec<String>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct LinuxPodSandbox {
    #[prost(string, tag = "3")]
    pub cgroup_parent: String,
    #[prost(string, tag = "4")]
    pub cgroups_path: String,
    #[prost(message, repeated, tag = "5")]
    pub namespaces: Vec<LinuxNamespace>,
}

/// NRI's `ContainerState`.
pub mod state {
    pub const CREATED: i32 = 1;
    pub const RUNNING: i32 = 3;
    pub const STOPPED: i32 = 4;
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct Container {
    #[prost(string, tag = "1")]
    pub id: String,
    #[prost(string, tag = "2")]
    pub pod_sandbox_id: String,
    #[prost(string, tag = "3")]
    pub name: String,
    #[prost(int32, tag = "4")]
    pub state: i32,
    #[prost(map = "string, string", tag = "5")]
    pub labels: HashMap<String, String>,
    #[prost(map = "string, string", tag = "6")]
    pub annotations: HashMap<String, String>,
    #[prost(string, repeated, tag = "7")]
    pub args: Vec<String>,
    /// `NAME=value`.
    #[prost(string, repeated, tag = "8")]
    pub env: Vec<String>,
    #[prost(message, repeated, tag = "9")]
    pub mounts: Vec<Mount>,
    #[prost(message, optional, tag = "11")]
    pub linux: Option<LinuxContainer>,
    #[prost(uint32, tag = "12")]
    pub pid: u32,
    #[prost(int64, tag = "14")]
    pub created_at: i64,
    #[prost(int64, tag = "15")]
    pub started_at: i64,
    #[prost(int64, tag = "16")]
    pub finished_at: i64,
    #[prost(int32, tag = "17")]
    pub exit_code: i32,
    #[prost(string, tag = "18")]
    pub status_reason: String,
    #[prost(string, tag = "19")]
    pub status_message: String,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct LinuxContainer {
    #[prost(message, repeated, tag = "1")]
    pub namespaces: Vec<LinuxNamespace>,
    #[prost(message, optional, tag = "3")]
    pub resources: Option<LinuxResources>,
    #[prost(message, optional, tag = "4")]
    pub oom_score_adj: Option<OptionalInt>,
    #[prost(string, tag = "5")]
    pub cgroups_path: String,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct LinuxNamespace {
    #[prost(string, tag = "1")]
    pub r#type: String,
    #[prost(string, tag = "2")]
    pub path: String,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct Mount {
    #[prost(string, tag = "1")]
    pub destination: String,
    #[prost(string, tag = "2")]
    pub r#type: String,
    #[prost(string, tag = "3")]
    pub source: String,
    #[prost(string, repeated, tag = "4")]
    pub options: Vec<String>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct KeyValue {
    #[prost(string, tag = "1")]
    pub key: String,
    #[prost(string, tag = "2")]
    pub value: String,
}

#[derive(Clone, Copy, PartialEq, prost::Message)]
pub struct OptionalInt {
    #[prost(int64, tag = "1")]
    pub value: i64,
}

#[derive(Clone, Copy, PartialEq, prost::Message)]
pub struct OptionalInt64 {
    #[prost(int64, tag = "1")]
    pub value: i64,
}

#[derive(Clone, Copy, PartialEq, prost::Message)]
pub struct OptionalUInt64 {
    #[prost(uint64, tag = "1")]
    pub value: u64,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct LinuxResources {
    #[prost(message, optional, tag = "1")]
    pub memory: Option<LinuxMemory>,
    #[prost(message, optional, tag = "2")]
    pub cpu: Option<LinuxCpu>,
    /// Read to refuse (hugepage limits, classes, devices are not applied from NRI).
    #[prost(bytes = "vec", repeated, tag = "3")]
    pub hugepage_limits: Vec<Vec<u8>>,
    #[prost(bytes = "vec", optional, tag = "4")]
    pub blockio_class: Option<Vec<u8>>,
    #[prost(bytes = "vec", optional, tag = "5")]
    pub rdt_class: Option<Vec<u8>>,
    #[prost(map = "string, string", tag = "6")]
    pub unified: HashMap<String, String>,
    #[prost(bytes = "vec", repeated, tag = "7")]
    pub devices: Vec<Vec<u8>>,
    #[prost(message, optional, tag = "8")]
    pub pids: Option<LinuxPids>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct LinuxMemory {
    #[prost(message, optional, tag = "1")]
    pub limit: Option<OptionalInt64>,
    #[prost(message, optional, tag = "3")]
    pub swap: Option<OptionalInt64>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct LinuxCpu {
    #[prost(message, optional, tag = "1")]
    pub shares: Option<OptionalUInt64>,
    #[prost(message, optional, tag = "2")]
    pub quota: Option<OptionalInt64>,
    #[prost(message, optional, tag = "3")]
    pub period: Option<OptionalUInt64>,
    #[prost(string, tag = "6")]
    pub cpus: String,
    #[prost(string, tag = "7")]
    pub mems: String,
}

#[derive(Clone, Copy, PartialEq, prost::Message)]
pub struct LinuxPids {
    #[prost(int64, tag = "1")]
    pub limit: i64,
}

/// A plugin's changes to a container being created. Fields crust does not apply are
/// kept as raw bytes, to be refused by name.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ContainerAdjustment {
    #[prost(map = "string, string", tag = "2")]
    pub annotations: HashMap<String, String>,
    #[prost(message, repeated, tag = "3")]
    pub mounts: Vec<Mount>,
    #[prost(message, repeated, tag = "4")]
    pub env: Vec<KeyValue>,
    #[prost(message, optional, tag = "5")]
    pub hooks: Option<Hooks>,
    #[prost(message, optional, tag = "6")]
    pub linux: Option<LinuxContainerAdjustment>,
    #[prost(message, repeated, tag = "7")]
    pub rlimits: Vec<PosixRlimit>,
    #[prost(bytes = "vec", repeated, tag = "8")]
    pub cdi_devices: Vec<Vec<u8>>,
    #[prost(string, repeated, tag = "9")]
    pub args: Vec<String>,
}

/// OCI hooks a plugin adds, per list of the runtime spec.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Hooks {
    #[prost(message, repeated, tag = "1")]
    pub prestart: Vec<Hook>,
    #[prost(message, repeated, tag = "2")]
    pub create_runtime: Vec<Hook>,
    #[prost(message, repeated, tag = "3")]
    pub create_container: Vec<Hook>,
    #[prost(message, repeated, tag = "4")]
    pub start_container: Vec<Hook>,
    #[prost(message, repeated, tag = "5")]
    pub poststart: Vec<Hook>,
    #[prost(message, repeated, tag = "6")]
    pub poststop: Vec<Hook>,
}

impl Hooks {
    /// The lists with the runtime spec's names, in its order.
    pub fn lists(&self) -> [(&'static str, &[Hook]); 6] {
        [
            ("prestart", &self.prestart),
            ("createRuntime", &self.create_runtime),
            ("createContainer", &self.create_container),
            ("startContainer", &self.start_container),
            ("poststart", &self.poststart),
            ("poststop", &self.poststop),
        ]
    }

    pub fn is_empty(&self) -> bool {
        self.lists().iter().all(|(_, l)| l.is_empty())
    }

    /// Appends `other`'s hooks after these, list by list (NRI's `Hooks.Append`).
    pub fn append(&mut self, other: &Hooks) {
        self.prestart.extend(other.prestart.iter().cloned());
        self.create_runtime
            .extend(other.create_runtime.iter().cloned());
        self.create_container
            .extend(other.create_container.iter().cloned());
        self.start_container
            .extend(other.start_container.iter().cloned());
        self.poststart.extend(other.poststart.iter().cloned());
        self.poststop.extend(other.poststop.iter().cloned());
    }
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct Hook {
    #[prost(string, tag = "1")]
    pub path: String,
    #[prost(string, repeated, tag = "2")]
    pub args: Vec<String>,
    #[prost(string, repeated, tag = "3")]
    pub env: Vec<String>,
    #[prost(message, optional, tag = "4")]
    pub timeout: Option<OptionalInt>,
}

/// `POSIXRlimit`: `RLIMIT_NOFILE` and the like.
#[derive(Clone, PartialEq, prost::Message)]
pub struct PosixRlimit {
    #[prost(string, tag = "1")]
    pub r#type: String,
    #[prost(uint64, tag = "2")]
    pub hard: u64,
    #[prost(uint64, tag = "3")]
    pub soft: u64,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct LinuxDevice {
    #[prost(string, tag = "1")]
    pub path: String,
    #[prost(string, tag = "2")]
    pub r#type: String,
    #[prost(int64, tag = "3")]
    pub major: i64,
    #[prost(int64, tag = "4")]
    pub minor: i64,
    #[prost(message, optional, tag = "5")]
    pub file_mode: Option<OptionalUInt32>,
    #[prost(message, optional, tag = "6")]
    pub uid: Option<OptionalUInt32>,
    #[prost(message, optional, tag = "7")]
    pub gid: Option<OptionalUInt32>,
}

#[derive(Clone, Copy, PartialEq, prost::Message)]
pub struct OptionalUInt32 {
    #[prost(uint32, tag = "1")]
    pub value: u32,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct LinuxContainerAdjustment {
    #[prost(message, repeated, tag = "1")]
    pub devices: Vec<LinuxDevice>,
    #[prost(message, optional, tag = "2")]
    pub resources: Option<LinuxResources>,
    #[prost(string, tag = "3")]
    pub cgroups_path: String,
    #[prost(message, optional, tag = "4")]
    pub oom_score_adj: Option<OptionalInt>,
    #[prost(bytes = "vec", optional, tag = "5")]
    pub io_priority: Option<Vec<u8>>,
    #[prost(bytes = "vec", optional, tag = "6")]
    pub seccomp_policy: Option<Vec<u8>>,
    #[prost(bytes = "vec", repeated, tag = "7")]
    pub namespaces: Vec<Vec<u8>>,
    #[prost(bytes = "vec", repeated, tag = "8")]
    pub sysctl: Vec<Vec<u8>>,
    #[prost(bytes = "vec", repeated, tag = "9")]
    pub net_devices: Vec<Vec<u8>>,
    #[prost(bytes = "vec", optional, tag = "10")]
    pub scheduler: Option<Vec<u8>>,
    #[prost(bytes = "vec", optional, tag = "11")]
    pub rdt: Option<Vec<u8>>,
    #[prost(bytes = "vec", optional, tag = "12")]
    pub memory_policy: Option<Vec<u8>>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct ContainerUpdate {
    #[prost(string, tag = "1")]
    pub container_id: String,
    #[prost(message, optional, tag = "2")]
    pub linux: Option<LinuxContainerUpdate>,
    #[prost(bool, tag = "3")]
    pub ignore_failure: bool,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct LinuxContainerUpdate {
    #[prost(message, optional, tag = "1")]
    pub resources: Option<LinuxResources>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct ContainerEviction {
    #[prost(string, tag = "1")]
    pub container_id: String,
    #[prost(string, tag = "2")]
    pub reason: String,
}

/// ttrpc's envelope of a call (package `ttrpc`).
#[derive(Clone, PartialEq, prost::Message)]
pub struct TtrpcRequest {
    #[prost(string, tag = "1")]
    pub service: String,
    #[prost(string, tag = "2")]
    pub method: String,
    #[prost(bytes = "vec", tag = "3")]
    pub payload: Vec<u8>,
    #[prost(int64, tag = "4")]
    pub timeout_nano: i64,
    #[prost(message, repeated, tag = "5")]
    pub metadata: Vec<KeyValue>,
}

/// ttrpc's envelope of an answer: a `google.rpc.Status` and the payload.
#[derive(Clone, PartialEq, prost::Message)]
pub struct TtrpcResponse {
    #[prost(message, optional, tag = "1")]
    pub status: Option<RpcStatus>,
    #[prost(bytes = "vec", tag = "2")]
    pub payload: Vec<u8>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct RpcStatus {
    #[prost(int32, tag = "1")]
    pub code: i32,
    #[prost(string, tag = "2")]
    pub message: String,
}
