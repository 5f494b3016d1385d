//! crust's CNI plugins, `bridge` and `host-local`, as a library their thin binaries call.

pub mod host_local;
pub mod ip;
