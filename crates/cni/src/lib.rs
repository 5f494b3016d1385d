//! CNI for crust: the spec's types (spec 1.1.0, results back to 0.3.0), the skeleton
//! the `bridge` and `host-local` plugins are built on, and the runtime side that runs a
//! chain of plugins from `/etc/cni/net.d` for `crustd` or any other Rust runtime.

pub mod error;
pub mod invoke;
pub mod result;
pub mod runtime;
pub mod skeleton;
pub mod types;
pub mod version;

pub use error::{code, CniError, CniResult};
pub use result::{AddResult, Dns, Interface, IpConfig, Route};
pub use types::NetConf;
