//! A whole plugin invocation: `CNI_ARGS` (the input's first line) and the configuration
//! on stdin (the rest), through the skeleton's dispatch into the bridge's and
//! host-local's readers of both, as the runtime (or anyone who can run a plugin) sends them.
#![no_main]

use cni::skeleton::{dispatch, Args, Plugin};
use cni::{AddResult, CniResult};
use cni_plugins::bridge::config::BridgeConf;
use cni_plugins::host_local::config::IpamConfig;
use libfuzzer_sys::fuzz_target;

/// Reads what the real plugins read, creates nothing.
struct Parsers;

impl Parsers {
    fn read(&self, args: &Args) -> CniResult<AddResult> {
        let _ = args.known_args_only(&["IP", "MAC", "K8S_POD_NAME"]);
        let _ = args.arg("IP");
        if let Ok(b) = BridgeConf::parse(&args.stdin) {
            let _ = b.requested_mac(&args.args);
        }
        let _ = IpamConfig::parse(&args.stdin, &args.args);
        Ok(args.conf.prev_result()?.unwrap_or_default())
    }
}

impl Plugin for Parsers {
    fn add(&self, args: &Args) -> CniResult<AddResult> {
        self.read(args)
    }
    fn del(&self, args: &Args) -> CniResult<()> {
        self.read(args).map(|_| ())
    }
    fn check(&self, args: &Args) -> CniResult<()> {
        self.read(args).map(|_| ())
    }
    fn status(&self, args: &Args) -> CniResult<()> {
        self.read(args).map(|_| ())
    }
    fn gc(&self, args: &Args) -> CniResult<()> {
        self.read(args).map(|_| ())
    }
}

fuzz_target!(|data: &[u8]| {
    let (line, stdin) = match data.iter().position(|&b| b == b'\n') {
        Some(i) => (&data[..i], &data[i + 1..]),
        None => (data, &[][..]),
    };
    let cni_args = String::from_utf8_lossy(line).into_owned();
    let _ = cni::skeleton::parse_cni_args(&cni_args);
    let command = ["ADD", "DEL", "CHECK", "STATUS", "GC"][stdin.len() % 5];
    let env = |k: &str| -> Option<String> {
        Some(match k {
            "CNI_COMMAND" => command.to_string(),
            "CNI_CONTAINERID" => "fuzz".to_string(),
            "CNI_NETNS" => "/var/run/netns/fuzz".to_string(),
            "CNI_IFNAME" => "eth0".to_string(),
            "CNI_PATH" => "/nonexistent".to_string(),
            "CNI_ARGS" => cni_args.clone(),
            _ => return None,
        })
    };
    let _ = dispatch(&Parsers, &env, stdin);
});
