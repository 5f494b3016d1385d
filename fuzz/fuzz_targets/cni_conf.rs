//! A network configuration as crustd reads it from `/etc/cni/net.d` and as the `bridge`,
//! `host-local` and `portmap` plugins read it from stdin (with `prevResult`).
#![no_main]

use cni_plugins::bridge::config::BridgeConf;
use cni_plugins::host_local::config::IpamConfig;
use cni_plugins::portmap::{container_ips, Conf as PortmapConf, PortMapConf};
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
    if let Ok(raw) = cni::types::decode::<PortMapConf>(data, "portmap configuration") {
        for nft_here in [true, false] {
            if let Ok(c) = PortmapConf::from_raw("net", raw.clone(), || nft_here) {
                let _ = (c.mappings_for(true).count(), c.mappings_for(false).count());
            }
        }
    }
    if let Ok(Some(prev)) = cni::NetConf::parse(data).and_then(|c| c.prev_result()) {
        let _ = container_ips(&prev, "eth0");
    }
});
