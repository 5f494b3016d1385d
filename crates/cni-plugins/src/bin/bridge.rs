//! `bridge`: a Linux bridge with a veth per attachment. See the crate docs and README.

fn main() {
    cni::skeleton::main(&cni_plugins::bridge::Bridge)
}
