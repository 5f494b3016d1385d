//! The streaming server the kubelet sends `kubectl exec/attach/port-forward` to: the
//! one-time URLs Exec, Attach and PortForward hand out, SPDY and WebSocket upgrades
//! (`server`), and the pod-side end of a port forward (`port_forward`). Exec and attach
//! sessions are run by `containers::exec` and `containers::exec::attach`.

pub mod port_forward;
pub mod server;
