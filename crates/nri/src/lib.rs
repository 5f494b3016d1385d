//! NRI (the Node Resource Interface of github.com/containerd/nri, as NRI v0.12 speaks
//! it) on the wire: its messages ([`api`]) and one connection's multiplexer and ttrpc
//! ([`wire`]), from either side: crustd is the runtime, a plugin (such as
//! `examples/localtime.rs`) the other end, its first steps in [`plugin`].

pub mod api;
pub mod plugin;
pub mod wire;
