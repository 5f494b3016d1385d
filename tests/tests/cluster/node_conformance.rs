//! Kubernetes' own node conformance suite: the `[NodeConformance]` specs of `e2e.test`
//! v1.28.7 (../shared/tools/kubernetes-e2e-v1.28.7), run by its ginkgo against one node
//! of the kubelet suite's cluster (tests/src/cluster/) at a time: the crustlet on
//! crustd, then the real kubelet on crustd. The node under test is the cluster's only
//! Node while its suite runs (the other agent is stopped and its Node deleted), so
//! every pod the specs make lands on it. `registry.k8s.io` is mirrored by the cluster's registry,
//! which holds the offline stand-ins of the e2e images, so the specs pull the upstream
//! names unchanged.
//!
//! A spec that cannot pass on this machine for anyone (the real kubelet on containerd
//! fails it too) is named, with why, in `tests/conformance/<suite>.expected`; nothing
//! else is skipped. Every other spec must pass, and a listed spec that passes fails the
//! run too, so the list only shrinks. Each run's JUnit report is kept in
//! `target/conformance/<suite>-<node>/junit_01.xml`.
//!
//! Its own harness (`harness = false`): it prints one line per node under test and
//! libtest's summary line, and exits non-zero when a node failed. Environment:
//! - `CRUST_CONFORMANCE_NODES`: a comma list of `crustlet` (the crustlet on crustd),
//!   `kubelet` (the real kubelet on crustd) and `containerd` (the real kubelet on
//!   Debian's containerd + runc: the bar; it takes the kubelet's node, so not with
//!   `kubelet`). Default `crustlet,kubelet`.
//! - `CRUST_CONFORMANCE_SUITE`: `node-conformance` (default: focus `[NodeConformance]`)
//!   or `conformance` (focus `[Conformance]` on the one node, with kube-proxy in the
//!   node's namespace for Services; hack/conformance runs it, too long for every CI run).
//!   `node-extended`: upstream's `[sig-node]` specs in neither and the in-tree volume
//!   specs of hostPath and emptyDir volumes ([`EXTENDED`]; `hack/conformance extended`).
//! - `CRUST_CONFORMANCE_FOCUS`: a further regular expression the specs must match (to
//!   run a few while working on them; the expected-failure check then covers those).
//! - `CRUST_CONFORMANCE_PROCS`: ginkgo's parallel processes (default 12: most specs wait).
//! - `CRUST_CONFORMANCE_HOLD`: keeps the cluster up after the runs until
//!   `<cluster dir>/release` exists (it prints the kubectl command to use).
//! - `CRUST_CONFORMANCE_FLEET=N`: each node of `CRUST_CONFORMANCE_NODES` becomes a fleet
//!   of N nodes of its own (tests/src/fleet.rs, one after the other): `crustlet` N crust
//!   nodes (crustd, the crustlet with `--pod-routes`, kube-proxy), `containerd` N nodes of
//!   the real kubelet on containerd (the bar); `kubelet` has no fleet. The expected
//!   failures are then `tests/conformance/<suite>-fleet.expected`.
//!
//! Binaries: the Kubernetes ones as the kubelet suite finds them; `e2e.test` and ginkgo
//! from `$CRUST_E2E_BIN`, else `target/e2e-bin` (hack/deps unpacks them there). Without
//! root or them it skips loudly, except under `CI=true`, where that is a failure.

use crust_e2e::cluster::{run_timeout, Cluster, ContainerdFor, Options, CRUSTLET_NODE, NODE};
use crust_e2e::conformance::{
    failure_messages, judge, parse_expected, parse_junit, parse_kubelet_only, skip_regex, Outcome,
};
use crust_e2e::fleet::{Flavour, Fleet};
use crust_e2e::tail;
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// What a run leaves out, as upstream's node conformance instructions say (the same
/// for `[Conformance]`: its serial and slow specs want a cluster to themselves).
const SKIP: &str = r"\[Slow\]|\[Serial\]|\[Disruptive\]|\[Flaky\]|\[Feature:";

/// Specs of the `node-extended` suite that the node conformance suite runs too, on every
/// CI run: each found a difference between the crustlet and the kubelet once (port
/// 10250 through the apiserver's proxy, runAsNonRoot, a probe's redirect elsewhere,
/// local storage eviction).
const NODE_CONFORMANCE_TOO: &[&str] = &[
    r"\[sig-node\] Security Context When creating a container with runAsNonRoot should not run with an explicit root user ID",
    r"\[sig-node\] Security Context When creating a container with runAsNonRoot should not run without a specified user ID",
    r"\[sig-node\] Probing container should \*not\* be restarted with a non-local redirect http liveness probe",
    r"\[sig-node\] Pods Extended Pod Container lifecycle evicted pods should be terminal",
    r"\[sig-node\] Pods Extended Delete Grace Period should be submitted and removed",
];

/// The `node-extended` suite: upstream's node specs that neither conformance suite
/// runs (probes, security contexts, termination, leases, RuntimeClass...) and the
/// in-tree volume specs of the volumes a node serves without a storage driver (hostPath,
/// emptyDir). Not the local PersistentVolume ones: each prepares its directory through
/// `nsenter --mount=/rootfs/proc/1/ns/mnt` in a privileged pod, and these machines'
/// PID 1 refuses that even to root on the host (the kubelet suite's claimed-volume
/// check covers local volumes instead).
const EXTENDED: &str = r"\[sig-node\]|\[Driver: (hostPath|hostPathSymlink|emptydir)\]";

/// A node under test: who drives which runtime.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Target {
    Crustlet,
    Kubelet,
    Containerd,
}

impl Target {
    fn parse(s: &str) -> Option<Target> {
        match s.trim() {
            "crustlet" => Some(Target::Crustlet),
            "kubelet" => Some(Target::Kubelet),
            "containerd" => Some(Target::Containerd),
            _ => None,
        }
    }
    fn name(self) -> &'static str {
        match self {
            Target::Crustlet => "crustlet",
            Target::Kubelet => "kubelet",
            Target::Containerd => "containerd",
        }
    }
    fn describe(self) -> &'static str {
        match self {
            Target::Crustlet => "the crustlet on crustd",
            Target::Kubelet => "the real kubelet on crustd",
            Target::Containerd => "the real kubelet on containerd",
        }
    }
    /// The Node object of this target in the cluster.
    fn node(self) -> &'static str {
        match self {
            Target::Crustlet => CRUSTLET_NODE,
            Target::Kubelet | Target::Containerd => NODE,
        }
    }
}

fn s(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// One ginkgo run: each spec's outcome, each failed one's message, and how long it took.
struct Run {
    outcomes: BTreeMap<String, Outcome>,
    messages: BTreeMap<String, String>,
    secs: f64,
}

/// Runs the suite against `target`'s node, or says why it could not run.
fn run_suite(
    c: &Cluster,
    target: Target,
    suite: &str,
    e2e_bin: &Path,
    not_run: Option<&str>,
) -> Result<Run, String> {
    only_node(c, target)?;
    run_ginkgo(
        c,
        &format!("{suite}-{}", target.name()),
        suite,
        e2e_bin,
        not_run,
    )
}

/// The test runner's own `/tmp` (a shell script run as `sh -c RUNNER_TMP GINKGO STAGE
/// DIR...  ARGS...`, in a private mount namespace): a fresh tmpfs, with each `DIR` that
/// lies under `/tmp` bound at its path in it, then GINKGO exec'd with ARGS. Upstream the
/// runner is not the node, and specs rely on it: HostPath's `BeforeEach` removes
/// `/tmp/test-file` on the runner while another HostPath spec's pod, on a node whose
/// `/tmp` it would share here, has written it and not yet read it back (the likely
/// cause of a CI run's one failure, "should support r/w" on the crustlet).
const RUNNER_TMP: &str = r#"set -e
ginkgo=$0 stage=$1; shift
mkdir -p "$stage"
mount -t tmpfs -o mode=1777 e2e-runner-tmp "$stage"
for d in "$1" "$2" "$3"; do
  case "$d" in
    /tmp/*) mkdir -p "$stage${d#/tmp}"; mount --bind "$d" "$stage${d#/tmp}" ;;
  esac
done
shift 3
mount --move "$stage" /tmp
exec "$ginkgo" "$@""#;

/// Runs `suite`'s specs with ginkgo against cluster `c` (its report under
/// `target/conformance/<report>`), or says why it could not run.
fn run_ginkgo(
    c: &Cluster,
    report: &str,
    suite: &str,
    e2e_bin: &Path,
    not_run: Option<&str>,
) -> Result<Run, String> {
    let report = workspace().join("target/conformance").join(report);
    let _ = std::fs::remove_dir_all(&report);
    std::fs::create_dir_all(&report).map_err(|e| e.to_string())?;
    let mut focus = match suite {
        "conformance" => r"\[Conformance\]".to_string(),
        "node-extended" => EXTENDED.to_string(),
        _ => format!(r"\[NodeConformance\]|{}", NODE_CONFORMANCE_TOO.join("|")),
    };
    if let Ok(f) = std::env::var("CRUST_CONFORMANCE_FOCUS") {
        focus = format!("({focus}).*({f})|({f}).*({focus})");
    }
    // What the other two suites run is not run again.
    let beyond = if suite == "node-extended" {
        r"|\[Conformance\]|\[NodeConformance\]"
    } else {
        ""
    };
    let procs = std::env::var("CRUST_CONFORMANCE_PROCS").unwrap_or_else(|_| "12".into());
    let mut cmd = c.net_cmd("unshare");
    cmd.args(["--mount", "--propagation", "private", "--", "sh", "-c"])
        .arg(RUNNER_TMP)
        .arg(e2e_bin.join("ginkgo"))
        .arg(report.join("tmp"))
        .arg(c.path(""))
        .arg(e2e_bin)
        .arg(c.bins.kubectl.parent().unwrap_or(Path::new("/")));
    cmd.arg(format!("--procs={procs}"))
        .arg(format!("--focus={focus}"))
        .arg(format!(
            "--skip={SKIP}{beyond}{}",
            not_run.map(|r| format!("|{r}")).unwrap_or_default()
        ))
        .args(["--timeout=2h", "--no-color"])
        .arg(e2e_bin.join("e2e.test"))
        .arg("--")
        .arg(format!(
            "--kubeconfig={}",
            c.path("admin.kubeconfig").display()
        ))
        .args(["--provider=skeleton", "--disable-log-dump"])
        .arg("--dump-logs-on-failure=false")
        .arg(format!("--report-dir={}", report.display()))
        .arg(format!("--kubectl-path={}", c.bins.kubectl.display()));
    let started = Instant::now();
    let out = run_timeout(&mut cmd, Duration::from_secs(75 * 60));
    let secs = started.elapsed().as_secs_f64();
    std::fs::write(
        report.join("ginkgo.log"),
        [&out.stdout[..], &out.stderr[..]].concat(),
    )
    .map_err(|e| e.to_string())?;
    let junit = std::fs::read_to_string(report.join("junit_01.xml")).map_err(|e| {
        format!(
            "no JUnit report ({e}); ginkgo exited {}: {}",
            out.status,
            tail(&s(&out.stdout), 40)
        )
    })?;
    Ok(Run {
        outcomes: parse_junit(&junit),
        messages: failure_messages(&junit),
        secs,
    })
}

/// Makes `target`'s node the cluster's only one: the other agent is stopped and its
/// Node deleted (a taint is not enough: some specs pick the first Linux node they
/// list, tainted or not), the target's agent started if it is not running, and its
/// Node Ready without a taint.
fn only_node(c: &Cluster, target: Target) -> Result<(), String> {
    let (other, stop_other): (&str, &dyn Fn()) = match target {
        Target::Crustlet => (NODE, &|| c.stop_kubelet()),
        Target::Kubelet | Target::Containerd => (CRUSTLET_NODE, &|| {
            c.stop_crustlet();
        }),
    };
    stop_other();
    let out = run_timeout(
        &mut c.kubectl(&["delete", "node", other, "--ignore-not-found"]),
        Duration::from_secs(60),
    );
    if !out.status.success() {
        return Err(format!("deleting the Node {other}: {}", s(&out.stderr)));
    }
    match target {
        // On the kubelet's port, which specs reach through the apiserver's proxy by
        // number (`<node>:10250`, as upstream's GetKubeletPods): the cluster runs it on
        // 10251 beside the kubelet, which is stopped now.
        Target::Crustlet => {
            c.stop_crustlet();
            c.start_crustlet_with(&["--port".into(), "10250".into()]);
        }
        Target::Kubelet | Target::Containerd if !c.kubelet_running() => c.start_kubelet(),
        _ => {}
    }
    let node = target.node();
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let out = run_timeout(
            &mut c.kubectl(&[
                "get",
                "node",
                node,
                "-o",
                "jsonpath={.status.conditions[?(@.type==\"Ready\")].status}",
            ]),
            Duration::from_secs(20),
        );
        if out.status.success() && s(&out.stdout).trim() == "True" {
            break;
        }
        if Instant::now() > deadline {
            return Err(format!(
                "the Node {node} was not Ready in 120 s: {}",
                s(&out.stderr)
            ));
        }
        std::thread::sleep(Duration::from_millis(500));
    }
    c.set_taint(node, false);
    if c.opts.kube_proxy {
        let ip = match target {
            Target::Crustlet => &c.crustlet_ip,
            Target::Kubelet | Target::Containerd => &c.ip,
        };
        c.start_kube_proxy(node, ip);
    }
    Ok(())
}

fn main() {
    // An interrupted suite (Ctrl-C, a CI timeout's SIGTERM) still tears its cluster down.
    let signals = crust_e2e::block_signals();
    let skip = |why: String| -> ! { crust_e2e::cluster::skip_suite("node conformance", why) };
    let suite =
        std::env::var("CRUST_CONFORMANCE_SUITE").unwrap_or_else(|_| "node-conformance".into());
    if !["node-conformance", "conformance", "node-extended"].contains(&suite.as_str()) {
        eprintln!(
            "CRUST_CONFORMANCE_SUITE: {suite:?} is none of node-conformance, conformance, node-extended"
        );
        std::process::exit(2);
    }
    let nodes =
        std::env::var("CRUST_CONFORMANCE_NODES").unwrap_or_else(|_| "crustlet,kubelet".into());
    let mut targets = vec![];
    for n in nodes.split(',').filter(|n| !n.trim().is_empty()) {
        match Target::parse(n) {
            Some(t) if !targets.contains(&t) => targets.push(t),
            Some(_) => {}
            None => {
                eprintln!(
                    "CRUST_CONFORMANCE_NODES: unknown node {n:?} (crustlet, kubelet, containerd)"
                );
                std::process::exit(2);
            }
        }
    }
    if targets.contains(&Target::Kubelet) && targets.contains(&Target::Containerd) {
        eprintln!("CRUST_CONFORMANCE_NODES: kubelet and containerd share the kubelet's node: one at a time");
        std::process::exit(2);
    }
    let mut tools = vec![
        "ip",
        "nsenter",
        "unshare",
        "busybox",
        "docker-registry",
        "skopeo",
        "openssl",
        "iptables",
        "xz",
    ];
    if targets.contains(&Target::Containerd) {
        tools.extend(["containerd", "containerd-shim-runc-v2", "runc"]);
    }
    let (bins, portmap_dir) = crust_e2e::cluster::suite_needs("node conformance", &tools);
    let tools_dir = workspace().join("../shared/tools/kubernetes-e2e-v1.28.7");
    let e2e_bin = std::env::var_os("CRUST_E2E_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| workspace().join("target/e2e-bin"));
    if !tools_dir.join("install").is_file() {
        skip(format!("no {}", tools_dir.display()));
    }
    let fleet_nodes: Option<usize> = std::env::var("CRUST_CONFORMANCE_FLEET").ok().map(|n| {
        n.parse()
            .ok()
            .filter(|n| (1..=10).contains(n))
            .unwrap_or_else(|| {
                eprintln!("CRUST_CONFORMANCE_FLEET: {n:?} is not a number of nodes (1-10)");
                std::process::exit(2);
            })
    });
    if fleet_nodes.is_some() && targets.contains(&Target::Kubelet) {
        eprintln!("CRUST_CONFORMANCE_FLEET: the fleets are crustlet (crust nodes) and containerd (kubelet nodes): no kubelet on crustd");
        std::process::exit(2);
    }
    let expected_file = workspace().join(match fleet_nodes {
        Some(_) => format!("tests/conformance/{suite}-fleet.expected"),
        None => format!("tests/conformance/{suite}.expected"),
    });
    let (expected, not_run) = match std::fs::read_to_string(&expected_file) {
        Ok(t) => ((parse_expected(&t), parse_kubelet_only(&t)), skip_regex(&t)),
        Err(e) => {
            eprintln!("{}: {e}", expected_file.display());
            std::process::exit(2);
        }
    };

    let started = Instant::now();
    if let Some(n) = fleet_nodes {
        let judged = Judged::new(&suite, &expected_file, expected);
        run_fleets(
            n,
            &targets,
            bins,
            portmap_dir,
            (&tools_dir, &e2e_bin),
            signals,
            judged,
            not_run.as_deref(),
            started,
        );
    }
    let opts = Options {
        containerd: targets
            .contains(&Target::Containerd)
            .then_some(ContainerdFor::Kubelet),
        // Services: what most of [Conformance] beyond the node's own specs uses (and a few
        // of node-extended's).
        kube_proxy: suite != "node-conformance",
        ..Options::default()
    };
    let cluster = std::panic::catch_unwind(|| {
        let c = Cluster::start_with(
            bins,
            crust_e2e::bin("crustd"),
            vec![crust_e2e::bin_dir(), portmap_dir],
            opts,
        );
        c.push_e2e_images(&tools_dir, &e2e_bin);
        c
    });
    let cluster = match cluster {
        Ok(c) => std::sync::Arc::new(c),
        Err(_) => {
            println!("test cluster_start ... FAILED");
            println!("\ntest result: FAILED. 0 passed; 1 failed; 0 ignored; 0 measured; 0 filtered out; finished in {:.2}s\n", started.elapsed().as_secs_f32());
            std::process::exit(101);
        }
    };
    Cluster::teardown_on_signal(&cluster, signals, "node conformance");
    println!("cluster up in {:.1}s", started.elapsed().as_secs_f32());

    let mut judged = Judged::new(&suite, &expected_file, expected);
    for t in &targets {
        let name = format!("{suite}_{}", t.name());
        let result = run_suite(&cluster, *t, &suite, &e2e_bin, not_run.as_deref());
        judged.record(&name, *t, t.describe(), result);
    }
    judged.report(&cluster);
    if std::env::var_os("CRUST_CONFORMANCE_HOLD").is_some() {
        cluster.hold();
    }
    cluster.teardown();
    judged.exit(started)
}

/// The runs judged against the expected failures, and the table of them.
struct Judged {
    suite: String,
    expected_file: PathBuf,
    expected: BTreeSet<String>,
    /// Expected failures of the real kubelet's runs only.
    kubelet_only: BTreeSet<String>,
    failures: Vec<(String, String)>,
    passed: usize,
    table: Vec<String>,
}

impl Judged {
    fn new(
        suite: &str,
        expected_file: &Path,
        (expected, kubelet_only): (BTreeSet<String>, BTreeSet<String>),
    ) -> Judged {
        Judged {
            suite: suite.to_string(),
            expected_file: expected_file.to_path_buf(),
            expected,
            kubelet_only,
            failures: vec![],
            passed: 0,
            table: vec![],
        }
    }

    /// One run (`name`, of `target` on `describe`): ok when exactly the expected specs
    /// failed (with the `kubelet only:` ones for the real kubelet's runs).
    fn record(&mut self, name: &str, target: Target, describe: &str, result: Result<Run, String>) {
        let Run {
            outcomes,
            messages,
            secs,
        } = match result {
            Err(why) => {
                println!("test {name} ... FAILED");
                self.failures.push((name.to_string(), why));
                return;
            }
            Ok(r) => r,
        };
        let count = |o: Outcome| outcomes.values().filter(|v| **v == o).count();
        let (p, f) = (count(Outcome::Passed), count(Outcome::Failed));
        self.table
            .push(format!("| {describe} | {p} | {f} | {secs:.0} |"));
        let expected = match target {
            Target::Crustlet => self.expected.clone(),
            Target::Kubelet | Target::Containerd => {
                self.expected.union(&self.kubelet_only).cloned().collect()
            }
        };
        let (unexpected, now_pass) = judge(&outcomes, &expected);
        if unexpected.is_empty() && now_pass.is_empty() {
            println!("test {name} ... ok ({p} passed, {f} failed as expected, {secs:.0} s)");
            self.passed += 1;
            return;
        }
        println!("test {name} ... FAILED");
        let mut why = format!(
            "{} on {describe}: {p} passed, {f} failed in {secs:.0} s\n",
            self.suite
        );
        for u in &unexpected {
            why.push_str(&format!("  failed: {u}\n"));
            // The first lines of why: ginkgo's [FAILED] line and where it failed.
            for l in messages.get(u).into_iter().flat_map(|m| m.lines()).take(12) {
                why.push_str(&format!("    {l}\n"));
            }
        }
        for n in &now_pass {
            why.push_str(&format!(
                "  passes, but {} lists it as failing: {n}\n",
                self.expected_file.display()
            ));
        }
        self.failures.push((name.to_string(), why));
    }

    /// Keeps `cluster`'s logs when a run failed (under `target/conformance/logs`, or
    /// `logs-<tag>` for one of several clusters).
    fn keep_logs(&self, cluster: &Cluster, tag: &str) {
        if self.failures.is_empty() {
            return;
        }
        let dest = workspace()
            .join("target/conformance")
            .join(if tag.is_empty() {
                "logs".to_string()
            } else {
                format!("logs-{tag}")
            });
        let _ = std::fs::remove_dir_all(&dest);
        let _ = std::fs::create_dir_all(&dest);
        if let Ok(rd) = std::fs::read_dir(cluster.path("logs")) {
            for e in rd.flatten() {
                let _ = std::fs::copy(e.path(), dest.join(e.file_name()));
            }
        }
    }

    /// The failures (with `cluster`'s logs kept) and the table.
    fn report(&self, cluster: &Cluster) {
        self.keep_logs(cluster, "");
        self.print();
    }

    fn print(&self) {
        if !self.failures.is_empty() {
            println!("\nfailures:\n");
            for (name, why) in &self.failures {
                println!("---- {name} ----\n{why}");
            }
            println!(
                "the clusters' logs are in {}/logs*, each run's ginkgo output and JUnit report in {}\n",
                workspace().join("target/conformance").display(),
                workspace().join("target/conformance").display()
            );
        }
        println!("\n| node | passed | failed | seconds |\n| --- | --- | --- | --- |");
        for row in &self.table {
            println!("{row}");
        }
    }

    /// libtest's summary line, and the exit code.
    fn exit(&self, started: Instant) -> ! {
        let failed = self.failures.len();
        println!(
            "\ntest result: {}. {} passed; {failed} failed; 0 ignored; 0 measured; 0 filtered out; finished in {:.2}s\n",
            if failed == 0 { "ok" } else { "FAILED" },
            self.passed,
            started.elapsed().as_secs_f32()
        );
        std::process::exit(if failed == 0 { 0 } else { 101 });
    }
}

/// Each target as a fleet of `n` nodes of its own, one after the other: the suite
/// against it, judged, then the fleet torn down.
#[allow(clippy::too_many_arguments)]
fn run_fleets(
    n: usize,
    targets: &[Target],
    bins: crust_e2e::cluster::KubeBins,
    portmap_dir: PathBuf,
    (tools_dir, e2e_bin): (&Path, &Path),
    signals: libc::sigset_t,
    mut judged: Judged,
    not_run: Option<&str>,
    started: Instant,
) -> ! {
    // One signal thread for every fleet: it tears down the one up at the time.
    let current: std::sync::Arc<std::sync::Mutex<Option<std::sync::Arc<Fleet>>>> =
        Default::default();
    {
        let current = current.clone();
        crust_e2e::on_signal(signals, "conformance", move || {
            let f = current.lock().unwrap().clone();
            if let Some(f) = f {
                f.teardown();
            }
        });
    }
    for t in targets {
        let flavour = match t {
            Target::Containerd => Flavour::Containerd,
            _ => Flavour::Crust,
        };
        let name = format!("{}_fleet_{}", judged.suite, t.name());
        let t0 = Instant::now();
        let fleet = std::panic::catch_unwind(|| {
            let f = Fleet::start_flavour(
                bins.clone(),
                crust_e2e::bin("crustd"),
                vec![crust_e2e::bin_dir(), portmap_dir.clone()],
                n,
                flavour,
            );
            f.cluster.push_e2e_images(tools_dir, e2e_bin);
            f
        });
        let Ok(fleet) = fleet else {
            judged.record(
                &name,
                *t,
                t.describe(),
                Err("the fleet did not start".into()),
            );
            continue;
        };
        let fleet = std::sync::Arc::new(fleet);
        *current.lock().unwrap() = Some(fleet.clone());
        println!(
            "{n} nodes of {} up in {:.1}s",
            t.describe(),
            t0.elapsed().as_secs_f32()
        );
        let result = run_ginkgo(
            &fleet.cluster,
            &format!("{}-fleet-{}", judged.suite, t.name()),
            &judged.suite.clone(),
            e2e_bin,
            not_run,
        );
        judged.record(&name, *t, &format!("{n} nodes: {}", t.describe()), result);
        judged.keep_logs(&fleet.cluster, &format!("fleet-{}", t.name()));
        if std::env::var_os("CRUST_CONFORMANCE_HOLD").is_some() {
            fleet.cluster.hold();
        }
        *current.lock().unwrap() = None;
        fleet.teardown();
    }
    judged.print();
    judged.exit(started)
}
