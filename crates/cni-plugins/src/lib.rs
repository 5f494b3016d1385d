//! crust's CNI plugins, `bridge`, `host-local` and `portmap`, as a library their thin binaries call.

pub mod arp;
pub mod bridge;
pub mod failpoint;
pub mod finish;
pub mod host_local;
pub mod ip;
pub mod masq;
pub mod netlink;
pub mod netns;
pub mod nft;
pub mod portmap;
pub mod rawnl;
