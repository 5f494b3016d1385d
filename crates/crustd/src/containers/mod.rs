//! Containers in a sandbox: `ops` (Create, Start, Stop, Remove, UpdateContainerResources,
//! ContainerStatus), the OCI spec a request becomes (`spec`, with the RuntimeDefault
//! seccomp profile in `seccomp` and image volumes in `image_volume`), `exec` (its
//! process's stdio in `exec_io`) and `attach` for the streaming server, `stats` and the
//! lifecycle `events` stream, and the container records (`store`). The container
//! processes themselves are the `container` crate's (executor, monitor); this module
//! decides what to ask of it.
//! `metrics` answers the CRI metrics RPCs with cAdvisor's metrics, whose names, help
//! and labels are in `metric_descriptors`.

pub mod attach;
pub mod events;
pub mod exec;
pub mod exec_io;
pub mod image_volume;
pub mod metric_descriptors;
pub mod metrics;
pub mod ops;
pub mod seccomp;
pub mod spec;
pub mod stats;
pub mod store;
