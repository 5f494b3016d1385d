//! ADD and DEL of crust's `bridge` + `host-local` against the reference plugins, on the
//! same machine in one run, with `ipMasq` on. Run as root through `hack/bench.d/cni`
//! (which builds the release binaries first), or `cargo bench -p crust-e2e --bench cni`.
//!
//! Each implementation gets its own node namespace, bridge, pod namespace and data
//! dir; rounds alternate between the two so drift in the machine hits both alike.
//!
//! Each call is timed twice: as the caller (the runtime) sees it, until the plugin
//! exits; and with the finisher's wait, until every process it left behind has exited
//! too. crust's bridge leaves the kernel's slow tail of ADD (closing the netfilter
//! socket) and of DEL (the veth's `RTM_DELLINK`) to a detached child, the finisher
//! (crates/cni-plugins/src/finish.rs); the reference plugins leave nothing, so for them
//! both times are the same call. The bench is a child subreaper, so the finisher, an
//! orphan, is re-parented to it and reaped here; the next call starts only after it,
//! so no call overlaps the previous one's kernel work.

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
    /// The same calls until their finishers (if any) had exited.
    add_fin: Vec<Duration>,
    del_fin: Vec<Duration>,
}

fn conf(data: &Path) -> String {
    format!(
        r#"{{"cniVersion":"1.0.0","name":"bench","type":"bridge","bridge":"cni0","isGateway":true,"ipMasq":true,
            "ipam":{{"type":"host-local","dataDir":"{}","ranges":[[{{"subnet":"10.77.0.0/16"}}]],"routes":[{{"dst":"0.0.0.0/0"}}]}}}}"#,
        data.display()
    )
}

/// Reaps every child left: orphans of a plugin (the finisher), re-parented to the
/// bench because it is a subreaper. Returns when there is none.
fn reap_orphans() {
    loop {
        // SAFETY: waits for any child, with no status pointer to write.
        let r = unsafe { libc::waitpid(-1, std::ptr::null_mut(), 0) };
        if r < 0 && std::io::Error::last_os_error().raw_os_error() != Some(libc::EINTR) {
            return;
        }
    }
}

/// The call as the caller sees it, and until its finisher had exited.
fn timed(side: &Side, verb: &str, id: &str) -> (Duration, Duration) {
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
    reap_orphans();
    let fin = t.elapsed();
    assert_eq!(
        out.code, 0,
        "{} {verb} failed: {}{}",
        side.name, out.stdout, out.stderr
    );
    (d, fin)
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
    // The finishers, orphaned when their plugin exits, come to us (see reap_orphans).
    assert_eq!(
        // SAFETY: integer arguments only.
        unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) },
        0,
        "PR_SET_CHILD_SUBREAPER"
    );
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
        add_fin: vec![],
        del_fin: vec![],
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
            let (a, af) = timed(s, "ADD", &id);
            let (d, df) = timed(s, "DEL", &id);
            s.add.push(a);
            s.del.push(d);
            s.add_fin.push(af);
            s.del_fin.push(df);
        }
    }
    println!("bridge + host-local, ipMasq on, {n} rounds (ms); +fin: until the plugin's finisher had exited too");
    println!(
        "{:<10} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9} {:>11} {:>11}",
        "",
        "ADD p50",
        "ADD p95",
        "+fin p50",
        "+fin p95",
        "DEL p50",
        "DEL p95",
        "+fin p50",
        "+fin p95",
        "ADD+DEL p50",
        "+fin p50"
    );
    let sum = |a: &[Duration], d: &[Duration]| -> Vec<Duration> {
        a.iter().zip(d).map(|(a, d)| *a + *d).collect()
    };
    for s in &sides {
        println!(
            "{:<10} {:>9.1} {:>9.1} {:>9.1} {:>9.1} {:>9.1} {:>9.1} {:>9.1} {:>9.1} {:>11.1} {:>11.1}",
            s.name,
            pct(&s.add, 0.5),
            pct(&s.add, 0.95),
            pct(&s.add_fin, 0.5),
            pct(&s.add_fin, 0.95),
            pct(&s.del, 0.5),
            pct(&s.del, 0.95),
            pct(&s.del_fin, 0.5),
            pct(&s.del_fin, 0.95),
            pct(&sum(&s.add, &s.del), 0.5),
            pct(&sum(&s.add_fin, &s.del_fin), 0.5)
        );
    }
    let ratio = |f: &dyn Fn(&Side) -> f64| f(&sides[1]) / f(&sides[0]);
    println!(
        "crust/reference, as the caller sees it: ADD {:.2}  DEL {:.2}  ADD+DEL {:.2}  (target: ADD+DEL <= 0.20)",
        ratio(&|s| pct(&s.add, 0.5)),
        ratio(&|s| pct(&s.del, 0.5)),
        ratio(&|s| pct(&sum(&s.add, &s.del), 0.5))
    );
    println!(
        "crust/reference, with the finisher's wait: ADD {:.2}  DEL {:.2}  ADD+DEL {:.2}",
        ratio(&|s| pct(&s.add_fin, 0.5)),
        ratio(&|s| pct(&s.del_fin, 0.5)),
        ratio(&|s| pct(&sum(&s.add_fin, &s.del_fin), 0.5))
    );
}
