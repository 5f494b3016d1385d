//! `portmap`: a pod's host ports, chained after `bridge`. See the crate docs and README.

fn main() {
    cni::skeleton::main(&cni_plugins::portmap::Portmap)
}
