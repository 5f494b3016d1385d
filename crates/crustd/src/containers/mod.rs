//! Containers in a sandbox, one file per RPC or concern, in the order of a container's
//! life: `create` (CreateContainer; the container's cgroup in `cgroup`, its CRI log
//! and ReopenContainerLog in `log`), `lifecycle` (StartContainer, the exit its monitor
//! records, StopContainer, RemoveContainer), `status` (ContainerStatus,
//! ListContainers), `update` (UpdateContainerResources) and `recovery` (the
//! containers at start-up). The OCI spec a request becomes is `spec`, with the
//! RuntimeDefault seccomp profile in `seccomp`, the AppArmor profile in `apparmor` and
//! image volumes in `image_volume`;
//! `exec` runs ExecSync and the streaming server's exec (its process's stdio in
//! `exec::io`) and attach (`exec::attach`); `stats` and the lifecycle `events` stream;
//! the container records are `store`. The container processes themselves are the
//! `container` crate's (executor, monitor); this module decides what to ask of it.
//! `metrics` answers the CRI metrics RPCs with cAdvisor's metrics, whose names, help
//! and labels are in `metrics::descriptors`.

pub mod apparmor;
pub mod cgroup;
pub mod create;
pub mod events;
pub mod exec;
pub mod image_volume;
pub mod lifecycle;
pub mod log;
pub mod metrics;
pub mod recovery;
pub mod seccomp;
pub mod spec;
pub mod stats;
pub mod status;
pub mod store;
pub mod update;
