//! Faults from outside the runtime, on the crustlet on crustd and on the real kubelet on
//! containerd side by side in one cluster (the incumbent is the bar): the node agent
//! SIGKILLed in the middle of a burst of creations and deletions, the runtime SIGKILLed
//! the same way, a container that outgrows its memory limit, a node under memory
//! pressure, and a container flooding its log. Each check runs its scenario on both nodes,
//! prints what it measured for each, and asserts what a node operator relies on: on
//! crust, failing the suite; on the incumbent, printed beside crust's figures.
//!
//! Its own harness (`harness = false`), one cluster for every check; without root or
//! the tools it skips loudly, except under `CI=true`, where that is a failure. Arguments
//! that do not start with `-` filter checks by name.

#[path = "faults/burst.rs"]
mod burst;
#[path = "faults/disk.rs"]
mod disk;
#[path = "faults/logs.rs"]
mod logs;
#[path = "faults/memory.rs"]
mod memory;
#[path = "faults/outage.rs"]
mod outage;
#[path = "faults/reboot.rs"]
mod reboot;
#[path = "faults/side.rs"]
mod side;

use burst::*;
use crust_e2e::cluster::{
    run_timeout, wait_for, Cluster, ContainerdFor, Options, CRUSTLET_NODE, CRUSTLET_TAINT, NODE,
};
use disk::*;
use logs::*;
use memory::*;
use outage::*;
use reboot::*;
use serde_json::{json, Value};
use side::*;
use std::collections::BTreeMap;
use std::io::Read;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// How long a check waits for a pod or a command (two cores, two nodes, one control
/// plane: behaviour is checked here, times are printed, not asserted).
pub(crate) const T: Duration = Duration::from_secs(120);

/// The log rotation both agents run with: small, so that a flooding container rotates
/// many times in the check's seconds.
pub(crate) const LOG_MAX_FILES: usize = 3;
pub(crate) const AGENT_ARGS: &[&str] = &[
    "--container-log-max-size=1Mi",
    "--container-log-max-files=3",
];

pub(crate) fn s(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

enum Kind {
    /// A scenario run on each side: at the same time (faults that do not measure CPU),
    /// or one side after the other.
    Each { f: fn(&Side), together: bool },
    /// A fault of the whole cluster (the apiserver they share): the check runs both
    /// sides itself and returns each side's failure.
    Both(fn([Side; 2]) -> Vec<(Side, String)>),
}

struct Check {
    name: &'static str,
    kind: Kind,
}

fn panic_text(e: &(dyn std::any::Any + Send)) -> String {
    e.downcast_ref::<String>()
        .cloned()
        .or_else(|| e.downcast_ref::<&str>().map(|s| s.to_string()))
        .unwrap_or_else(|| "panic".into())
}

fn run_check(c: &Cluster, ch: &Check) -> Vec<String> {
    let sides = [Side::crust(c), Side::incumbent(c)];
    let mut failures = vec![];
    let judge = |side: &Side, msg: String| -> Option<String> {
        if side.crust {
            Some(format!("{}: {msg}", side.name))
        } else {
            let short: String = msg.chars().take(600).collect();
            figure(side, ch.name, format!("does not meet the check: {short}"));
            None
        }
    };
    let (f, together) = match ch.kind {
        Kind::Each { f, together } => (f, together),
        Kind::Both(f) => {
            for side in sides {
                cleanup(&side);
            }
            for (side, msg) in f(sides) {
                failures.extend(judge(&side, msg));
            }
            return failures;
        }
    };
    // The incumbent's behaviour is the bar, not the test's subject: where it does not
    // do what the check asks of crust, that is printed beside crust's figures (and
    // written up in docs/fault-tests.md), not failed.
    let one = |side: Side| {
        let e = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            // Whatever a check before this one left.
            cleanup(&side);
            f(&side)
        }))
        .err()?;
        judge(&side, panic_text(&*e))
    };
    if together {
        std::thread::scope(|sc| {
            let hs: Vec<_> = sides
                .iter()
                .map(|side| sc.spawn(move || one(*side)))
                .collect();
            for h in hs {
                failures.extend(h.join().unwrap());
            }
        });
    } else {
        for side in sides {
            failures.extend(one(side));
        }
    }
    failures
}

fn main() {
    let signals = crust_e2e::block_signals();
    let filters: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with('-'))
        .collect();
    let tools = [
        "ip",
        "nsenter",
        "unshare",
        "busybox",
        "docker-registry",
        "skopeo",
        "openssl",
        "iptables",
        "containerd",
        "containerd-shim-runc-v2",
        "runc",
    ];
    let (bins, portmap_dir) = crust_e2e::cluster::suite_needs("faults suite", &tools);
    let all = [
        Check {
            name: "apiserver_outage",
            kind: Kind::Both(apiserver_outage),
        },
        Check {
            name: "agent_killed_mid_burst",
            kind: Kind::Each {
                f: agent_killed_mid_burst,
                together: true,
            },
        },
        Check {
            name: "runtime_killed_mid_burst",
            kind: Kind::Each {
                f: runtime_killed_mid_burst,
                together: true,
            },
        },
        Check {
            name: "reboot",
            kind: Kind::Each {
                f: reboot,
                together: true,
            },
        },
        Check {
            name: "image_store_full",
            kind: Kind::Each {
                f: image_store_full,
                together: true,
            },
        },
        Check {
            name: "log_dir_full",
            kind: Kind::Each {
                f: log_dir_full,
                together: true,
            },
        },
        Check {
            name: "oom_killed",
            kind: Kind::Each {
                f: oom_killed,
                together: true,
            },
        },
        Check {
            name: "memory_pressure_eviction",
            kind: Kind::Each {
                f: memory_pressure_eviction,
                together: false,
            },
        },
        Check {
            name: "disk_pressure_eviction",
            kind: Kind::Each {
                f: disk_pressure_eviction,
                together: false,
            },
        },
        Check {
            name: "log_flood",
            kind: Kind::Each {
                f: log_flood,
                together: false,
            },
        },
    ];
    let checks: Vec<&Check> = all
        .iter()
        .filter(|ch| filters.is_empty() || filters.iter().any(|f| ch.name.contains(f.as_str())))
        .collect();
    println!(
        "\nrunning {} tests (one cluster: the crustlet on crustd and the kubelet on containerd)",
        checks.len()
    );
    std::panic::set_hook(Box::new(|_| {}));
    let started = Instant::now();
    let cluster = std::panic::catch_unwind(|| {
        Cluster::start_with(
            bins,
            crust_e2e::bin("crustd"),
            vec![crust_e2e::bin_dir(), portmap_dir],
            Options {
                containerd: Some(ContainerdFor::Kubelet),
                crustd_log: Some("info"),
                agent_args: AGENT_ARGS,
                ..Options::default()
            },
        )
    });
    let mut failed: Vec<(&str, String)> = vec![];
    let mut passed = 0;
    match cluster {
        Err(e) => {
            println!("test cluster_start ... FAILED");
            failed.push(("cluster_start", panic_text(&*e)));
        }
        Ok(cluster) => {
            let cluster = Arc::new(cluster);
            Cluster::teardown_on_signal(&cluster, signals, "faults suite");
            println!("cluster up in {:.1}s", started.elapsed().as_secs_f32());
            let setup = std::panic::catch_unwind(|| {
                cluster.wait_node_ready(T);
                for side in [Side::crust(&cluster), Side::incumbent(&cluster)] {
                    let _ = run_timeout(&mut cluster.kubectl(&["create", "namespace", side.ns]), T);
                    wait_for(
                        &format!("the default ServiceAccount of {}", side.ns),
                        T,
                        |_| {
                            run_timeout(&mut side.kubectl(&["get", "serviceaccount", "default"]), T)
                                .status
                                .success()
                                .then_some(())
                        },
                    );
                    wait_for(&format!("{} Ready", side.node), T, |last| {
                        *last = side.ready();
                        (*last == "True").then_some(())
                    });
                }
            });
            if let Err(e) = setup {
                println!("test setup ... FAILED");
                failed.push(("setup", panic_text(&*e)));
            } else {
                for ch in &checks {
                    let t = Instant::now();
                    println!("test {} ...", ch.name);
                    let f = run_check(&cluster, ch);
                    if f.is_empty() {
                        println!(
                            "test {} ... ok ({:.1}s)",
                            ch.name,
                            t.elapsed().as_secs_f32()
                        );
                        passed += 1;
                    } else {
                        println!("test {} ... FAILED", ch.name);
                        failed.push((ch.name, f.join("\n")));
                    }
                }
            }
            if !failed.is_empty() {
                for name in ["crustlet", "crustlet-crustd", "kubelet", "containerd"] {
                    println!(
                        "---- the last of {name}'s log ----\n{}",
                        crust_e2e::tail(&cluster.log(name), 25)
                    );
                }
            }
            cluster.teardown();
        }
    }
    println!("\nwhat each fault measured:");
    for l in FIGURES.lock().unwrap().iter() {
        println!("  {l}");
    }
    if !failed.is_empty() {
        println!("\nfailures:\n");
        for (name, msg) in &failed {
            println!("---- {name} ----\n{msg}\n");
        }
    }
    println!(
        "\ntest result: {}. {passed} passed; {} failed; 0 ignored; 0 measured; {} filtered out; finished in {:.2}s\n",
        if failed.is_empty() { "ok" } else { "FAILED" },
        failed.len(),
        all.len() - checks.len(),
        started.elapsed().as_secs_f32()
    );
    std::process::exit(if failed.is_empty() { 0 } else { 101 });
}
