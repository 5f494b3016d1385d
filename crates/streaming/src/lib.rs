//! Kubernetes' streaming protocols, server side: what a kubelet, `kubectl` and `crictl`
//! speak to the URL a runtime returns from Exec, Attach and PortForward.

pub mod http;
pub mod idle;
mod outq;
pub mod remotecommand;
pub mod spdy;
pub mod ws;
