//! ADD and DEL of crust's `bridge` + `host-local` against the reference plugins, on the
//! same machine in one run, with `ipMasq` on. Run as root through `hack/bench-cni`
//! (which builds the release binaries first), or `cargo bench -p crust-e2e --bench cni`.
//!
//! Each implementation gets its own node namespace, bridge, pod namespace and data
//! dir; rounds alternate between the two so drift in the machine hits both alike.

use crust_e2e::{attachment_env, bin_dir, reference_plugin, require_root, Cni, Netns, TempDir};
use std::path::Path;
use std::time::{Duration, Instant};

struct Side {
    name: &'static str,
    dir: std::path::PathBuf,
    node: Netns,
    pod: Netns,
    data: TempDir,
    add: Vec<Duration>,
    del: Vec<Duration>,
}

fn conf(data: &Path) -> String {
    format!(
        r#"{{"cniVersion":"1.0.0","name":"bench","type":"bridge","bridge":"cni0","isGateway":true,"ipMasq":true,
            "ipam":{{"type":"host-local","dataDir":"{}","ranges":[[{{"subnet":"10.77.0.0/16"}}]],"routes":[{{"dst":"0.0.0.0/0"}}]}}}}"#,
        data.display()
    )
}

fn timed(side: &Side, verb: &str, id: &str) -> Duration {
    let cni = attachment_env(
        Cni::new(side.dir.join("bridge"), Some(&side.node)),
        id,
        &side.pod.path().to_string_lossy(),
        "eth0",
        &side.dir,
    );
    let c = conf(side.data.path());
    let t = Instant::now();
    let out = cni.call(verb, &c);
    let d = t.elapsed();
    assert_eq!(
        out.code, 0,
        "{} {verb} failed: {}{}",
        side.name, out.stdout, out.stderr
    );
    d
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

fn pct(v: &[Duration], p: f64) -> f64 {
    let mut s: Vec<f64> = v.iter().map(|d| ms(*d)).collect();
    s.sort_by(|a, b| a.partial_cmp(b).unwrap());
    s[((s.len() as f64 - 1.0) * p).round() as usize]
}

fn main() {
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    if !require_root(&["ip", "nft", "iptables"]) {
        return;
    }
    let Some(reference) = reference_plugin("bridge") else {
        return;
    };
    let n: usize = std::env::var("BENCH_N")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(50);
    let mk = |name, dir: std::path::PathBuf| Side {
        name,
        dir,
        node: Netns::new("bn"),
        pod: Netns::new("bp"),
        data: TempDir::new("bench"),
        add: vec![],
        del: vec![],
    };
    let mut sides = [
        mk("reference", reference.parent().unwrap().to_path_buf()),
        mk("crust", bin_dir()),
    ];
    // Warm up: create the bridges and page in the binaries.
    for s in &sides {
        timed(s, "ADD", "warm");
        timed(s, "DEL", "warm");
    }
    for i in 0..n {
        for s in sides.iter_mut() {
            let id = format!("bench{i}");
            let a = timed(s, "ADD", &id);
            let d = timed(s, "DEL", &id);
            s.add.push(a);
            s.del.push(d);
        }
    }
    println!("bridge + host-local, ipMasq on, {n} rounds (ms)");
    println!(
        "{:<10} {:>10} {:>10} {:>10} {:>10} {:>12}",
        "", "ADD p50", "ADD p95", "DEL p50", "DEL p95", "ADD+DEL p50"
    );
    for s in &sides {
        let both: Vec<Duration> = s.add.iter().zip(&s.del).map(|(a, d)| *a + *d).collect();
        println!(
            "{:<10} {:>10.1} {:>10.1} {:>10.1} {:>10.1} {:>12.1}",
            s.name,
            pct(&s.add, 0.5),
            pct(&s.add, 0.95),
            pct(&s.del, 0.5),
            pct(&s.del, 0.95),
            pct(&both, 0.5)
        );
    }
    let ratio = |f: &dyn Fn(&Side) -> f64| f(&sides[1]) / f(&sides[0]);
    let both = |s: &Side| {
        pct(
            &s.add
                .iter()
                .zip(&s.del)
                .map(|(a, d)| *a + *d)
                .collect::<Vec<_>>(),
            0.5,
        )
    };
    println!(
        "crust/reference: ADD {:.2}  DEL {:.2}  ADD+DEL {:.2}  (target: ADD+DEL <= 0.20)",
        ratio(&|s| pct(&s.add, 0.5)),
        ratio(&|s| pct(&s.del, 0.5)),
        ratio(&both)
    );
}
