//! Pod sandboxes, in the order of a pod's life: `run` (RunPodSandbox: the pause
//! process holding the pod's namespaces, their pins in `podns`, the network through
//! CNI in `network`, the pod's hostname/hosts/resolv.conf in `pod_files`), `status`,
//! `stop` and removal, the pod's user namespace (`userns`), whether its pause lives
//! (`liveness`: a pidfd per pause), the records that make them survive a restart
//! (`store`) and the check of those records at start-up (`recovery`). Processes, namespaces and cgroups
//! are made through the `container` and `cgroups` crates, never here directly.

pub mod liveness;
pub mod network;
pub mod pod_files;
pub mod podns;
pub mod recovery;
pub mod run;
pub mod status;
pub mod stop;
pub mod store;
pub mod userns;
