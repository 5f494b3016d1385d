//! `host-local`: IPAM from node-local ranges. See the crate docs and README.

fn main() {
    cni::skeleton::main(&cni_plugins::host_local::HostLocal)
}
