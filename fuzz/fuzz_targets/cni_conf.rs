//! A network configuration as crustd reads it from `/etc/cni/net.d` and as the `bridge`
//! and `host-local` plugins read it from stdin (with `prevResult`).
#![no_main]

use cni_plugins::bridge::config::BridgeConf;
use cni_plugins::host_local::config::IpamConfig;
use libfuzzer_sys::fuzz_target;
use std::path::Path;

fuzz_target!(|data: &[u8]| {
    let _ = cni::runtime::NetworkList::parse(data, Path::new("fuzz.conflist"));
    if let Ok(conf) = cni::NetConf::parse(data) {
        let _ = conf.validate();
        let _ = conf.prev_result();
    }
    if let Ok(b) = BridgeConf::parse(data) {
        let _ = b.vlan();
        let _ = b.requested_mac(&[]);
    }
    let _ = IpamConfig::parse(data, &[]);
});
