//! The crustlet's HTTPS server through the apiserver, with the real kubectl: `logs`
//! (its options), `exec` (output, exit codes, stdin, a terminal), `attach`,
//! `port-forward`, `cp`, `debug` with an ephemeral container, and `get --raw
//! .../proxy/stats/summary` and `.../proxy/metrics/resource`, on the crustlet's nodes
//! (crustd's and containerd's), as the kubelet checks do on the kubelet's.

use super::*;
use crate::{http_get, shell_words, wait_served, with_input, Killed, Terminal};
use std::io::{BufRead, Read};
use std::process::Stdio;

on_both! {
    server_logs => crustlet_server_logs, containerd_server_logs;
    server_exec => crustlet_server_exec, containerd_server_exec;
    server_attach => crustlet_server_attach, containerd_server_attach;
    server_port_forward => crustlet_server_port_forward, containerd_server_port_forward;
    server_cp => crustlet_server_cp, containerd_server_cp;
    server_debug => crustlet_server_debug, containerd_server_debug;
    server_stats => crustlet_server_stats, containerd_server_stats;
}

fn kubectl_out(c: &Crustlet, args: &[&str]) -> std::process::Output {
    let mut full = vec!["-n", c.ns];
    full.extend_from_slice(args);
    run_timeout(&mut c.kubectl(&full), T)
}

fn server_logs(c: &Crustlet) {
    apply(
        c,
        pod(
            c,
            "srv-logger",
            "echo line-one; echo line-two; sleep 1; echo line-three",
            |p| {
                p["spec"]["restartPolicy"] = json!("Never");
            },
        ),
    );
    wait_pod(c, "srv-logger", "Succeeded", T, |p| {
        p["status"]["phase"] == "Succeeded"
    });
    assert_eq!(
        kubectl(c, &["logs", "srv-logger"]),
        "line-one\nline-two\nline-three\n"
    );
    assert_eq!(
        kubectl(c, &["logs", "srv-logger", "--tail=1"]),
        "line-three\n"
    );
    assert_eq!(
        kubectl(c, &["logs", "srv-logger", "--limit-bytes=6"]),
        "line-o"
    );
    assert_eq!(
        kubectl(c, &["logs", "srv-logger", "--since=1h"])
            .lines()
            .count(),
        3
    );
    let stamped = kubectl(c, &["logs", "srv-logger", "--timestamps", "--tail=1"]);
    let (ts, rest) = stamped.split_once(' ').unwrap();
    assert_eq!(rest, "line-three\n");
    assert!(ts.ends_with('Z') && ts.len() == 30, "{ts}");
    let out = kubectl_out(c, &["logs", "srv-logger", "--previous"]);
    assert!(!out.status.success(), "no previous: {}", s(&out.stdout));

    // --previous after a restart.
    let script = "n=$(cat /data/n 2>/dev/null || echo 0); n=$((n+1)); echo $n > /data/n; \
                  echo attempt-$n; if [ $n -ge 2 ]; then exec sleep 3600; fi; exit 1";
    apply(
        c,
        pod(c, "srv-previous", script, |p| {
            p["spec"]["volumes"] = json!([{"name": "data", "emptyDir": {}}]);
            p["spec"]["containers"][0]["volumeMounts"] =
                json!([{"name": "data", "mountPath": "/data"}]);
        }),
    );
    wait_pod(
        c,
        "srv-previous",
        "restarted and running",
        Duration::from_secs(90),
        |p| running(p) && status_of(p, "main").is_some_and(|s| s["restartCount"] == 1),
    );
    assert_eq!(
        kubectl(c, &["logs", "srv-previous", "--previous"]),
        "attempt-1\n"
    );
    assert_eq!(kubectl(c, &["logs", "srv-previous"]), "attempt-2\n");

    // -f: lines keep coming, in order.
    run_pod(
        c,
        pod(
            c,
            "srv-follower",
            "i=0; while true; do echo tick-$i; i=$((i+1)); sleep 0.2; done",
            |_| {},
        ),
    );
    let mut child = Killed(
        c.kubectl(&["-n", c.ns, "logs", "-f", "srv-follower"])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let stdout = child.0.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stdout)
            .lines()
            .map_while(Result::ok)
        {
            if tx.send(line).is_err() {
                return;
            }
        }
    });
    // The first line may take a while on a loaded node; after it, 10 s without one is
    // a stalled stream (as `logs_follow` in kubelet.rs).
    let start = Instant::now();
    let mut seen = Vec::new();
    while seen.len() < 30 && start.elapsed() < 2 * T {
        let wait = if seen.is_empty() {
            T
        } else {
            Duration::from_secs(10)
        };
        match rx.recv_timeout(wait) {
            Ok(l) => seen.push(l),
            Err(_) => break,
        }
    }
    drop(child);
    assert!(seen.len() >= 30, "kubectl logs -f stalled after {seen:?}");
    let first: u32 = seen[0].trim_start_matches("tick-").parse().unwrap();
    let last: u32 = seen[29].trim_start_matches("tick-").parse().unwrap();
    assert_eq!(last, first + 29, "{seen:?}");
}

fn sleeper(c: &Crustlet, name: &str) -> Value {
    run_pod(c, pod(c, name, "exec sleep 3600", |_| {}))
}

fn server_exec(c: &Crustlet) {
    sleeper(c, "srv-exec");
    let out = kubectl_out(
        c,
        &[
            "exec",
            "srv-exec",
            "--",
            "sh",
            "-c",
            "echo to-out; echo to-err >&2; exit 7",
        ],
    );
    assert_eq!(s(&out.stdout), "to-out\n", "{}", s(&out.stderr));
    assert!(s(&out.stderr).contains("to-err"), "{}", s(&out.stderr));
    assert_eq!(out.status.code(), Some(7), "{}", s(&out.stderr));
    let out = with_input(
        c.kubectl(&[
            "-n",
            c.ns,
            "exec",
            "-i",
            "srv-exec",
            "--",
            "sh",
            "-c",
            "tr a-z A-Z",
        ]),
        b"shout\n",
    );
    assert_eq!(s(&out.stdout), "SHOUT\n", "{}", s(&out.stderr));
    assert_eq!(out.status.code(), Some(0));
    let out = kubectl_out(c, &["exec", "srv-exec", "--", "/no/such"]);
    assert!(!out.status.success());
    // A terminal: its size and input reach the command. (containerd applies the first
    // resize only after the process started: `stty size` waits a moment for it.)
    let k = c.kubectl(&[
        "-n",
        c.ns,
        "exec",
        "-it",
        "srv-exec",
        "--",
        "sh",
        "-c",
        "tty >/dev/null && echo is-a-tty; sleep 1; stty size; read l; echo got=$l; exit 3",
    ]);
    let mut t = Terminal::spawn(&format!("stty cols 91 rows 33; exec {}", shell_words(&k)));
    t.wait_for("33 91");
    t.type_in(b"typed\n");
    t.close_input();
    t.wait_for("got=typed");
    let (code, out, err) = t.finish();
    assert!(out.contains("is-a-tty"), "{out}{err}");
    assert_eq!(code, Some(3), "{out}{err}");
}

fn server_attach(c: &Crustlet) {
    run_pod(
        c,
        pod(
            c,
            "srv-attach",
            "echo ready; while read l; do echo got:$l; done; echo bye",
            |p| {
                p["spec"]["restartPolicy"] = json!("Never");
                p["spec"]["containers"][0]["stdin"] = json!(true);
                p["spec"]["containers"][0]["stdinOnce"] = json!(true);
            },
        ),
    );
    let out = with_input(
        c.kubectl(&["-n", c.ns, "attach", "-i", "srv-attach", "-c", "main"]),
        b"hello\n",
    );
    assert!(
        s(&out.stdout).contains("got:hello"),
        "{}{}",
        s(&out.stdout),
        s(&out.stderr)
    );
    wait_pod(c, "srv-attach", "Succeeded", T, |p| {
        p["status"]["phase"] == "Succeeded"
    });
    assert_eq!(
        kubectl(c, &["logs", "srv-attach"]),
        "ready\ngot:hello\nbye\n"
    );
}

fn server_port_forward(c: &Crustlet) {
    run_pod(
        c,
        pod(c, "srv-pf", "mkdir -p /www; echo hello from the crustlet > /www/index.html; exec httpd -f -p 8080 -h /www", |_| {}),
    );
    // A local port of its own per node: the checks run side by side.
    let local = if c.runtime == "crust" { 18181 } else { 18182 };
    let mut child = Killed(
        c.kubectl(&[
            "-n",
            c.ns,
            "port-forward",
            "pod/srv-pf",
            &format!("{local}:8080"),
        ])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap(),
    );
    let mut stdout = std::io::BufReader::new(child.0.stdout.take().unwrap());
    let mut line = String::new();
    let _ = stdout.read_line(&mut line);
    std::thread::spawn(move || {
        let mut sink = String::new();
        let _ = stdout.read_to_string(&mut sink);
    });
    assert!(
        line.contains(&format!("Forwarding from 127.0.0.1:{local}")),
        "port-forward said {line:?}"
    );
    wait_served(c, &format!("127.0.0.1:{local}"), "hello from the crustlet");
    for _ in 0..3 {
        let body = http_get(c, &format!("127.0.0.1:{local}"), "/").unwrap();
        assert!(body.contains("hello from the crustlet"), "{body}");
    }
}

fn server_cp(c: &Crustlet) {
    sleeper(c, "srv-cp");
    let local = c.path(&format!("{}-cp-in.bin", c.log_name));
    let data: Vec<u8> = (0..300_000u32).map(|i| (i * 7 % 251) as u8).collect();
    std::fs::write(&local, &data).unwrap();
    let remote = format!("{}/srv-cp:/tmp/in.bin", c.ns);
    kubectl(c, &["cp", local.to_str().unwrap(), &remote]);
    let sum = kubectl(c, &["exec", "srv-cp", "--", "wc", "-c", "/tmp/in.bin"]);
    assert!(sum.starts_with("300000 "), "{sum}");
    let back = c.path(&format!("{}-cp-out.bin", c.log_name));
    kubectl(c, &["cp", &remote, back.to_str().unwrap()]);
    assert!(
        std::fs::read(&back).unwrap() == data,
        "the copy came back different"
    );
}

fn server_debug(c: &Crustlet) {
    run_pod(c, pod(c, "srv-debug", "exec sleep 3601", |_| {}));
    kubectl(
        c,
        &[
            "debug",
            "srv-debug",
            &format!("--image={}", c.image),
            "--target=main",
            "-c",
            "dbg",
            "--",
            "sh",
            "-c",
            "ps -o pid,args; exit 5",
        ],
    );
    let p = wait_pod(c, "srv-debug", "the debugger ran", T, |p| {
        p["status"]["ephemeralContainerStatuses"]
            .as_array()
            .and_then(|a| a.iter().find(|s| s["name"] == "dbg"))
            .is_some_and(|s| s["state"]["terminated"].is_object())
    });
    let st = p["status"]["ephemeralContainerStatuses"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["name"] == "dbg")
        .unwrap()
        .clone();
    assert_eq!(st["state"]["terminated"]["exitCode"], 5, "{st}");
    assert!(running(&p), "the pod runs on: {}", p["status"]);
    let log = kubectl(c, &["logs", "srv-debug", "-c", "dbg"]);
    assert!(log.contains("sleep 3601"), "the target's processes: {log}");
}

fn server_stats(c: &Crustlet) {
    run_pod(
        c,
        pod(
            c,
            "srv-stats",
            "while true; do i=0; while [ $i -lt 2000 ]; do i=$((i+1)); done; sleep 0.2; done",
            |_| {},
        ),
    );
    let path = format!("/api/v1/nodes/{}/proxy/stats/summary", c.node);
    let cpu = || {
        wait_for("the pod's stats", Duration::from_secs(90), |last| {
            let out = run_timeout(&mut c.kubectl(&["get", "--raw", &path]), T);
            *last = s(&out.stdout) + &s(&out.stderr);
            let v: Value = serde_json::from_slice(&out.stdout).ok()?;
            let p = v["pods"]
                .as_array()?
                .iter()
                .find(|p| p["podRef"]["name"] == "srv-stats" && p["podRef"]["namespace"] == c.ns)?
                .clone();
            let ctr = p["containers"]
                .as_array()?
                .iter()
                .find(|c| c["name"] == "main")?
                .clone();
            let ws = ctr["memory"]["workingSetBytes"].as_u64()?;
            let n = ctr["cpu"]["usageCoreNanoSeconds"].as_u64()?;
            (ws > 0 && v["node"]["memory"]["workingSetBytes"].as_u64() > Some(0)).then_some(n)
        })
    };
    let a = cpu();
    std::thread::sleep(Duration::from_secs(2));
    let b = cpu();
    assert!(b > a, "the container's CPU time moves: {a} then {b}");
    let m = kubectl(
        c,
        &[
            "get",
            "--raw",
            &format!("/api/v1/nodes/{}/proxy/metrics/resource", c.node),
        ],
    );
    let want = format!(
        "container_cpu_usage_seconds_total{{container=\"main\",namespace=\"{}\",pod=\"srv-stats\"}}",
        c.ns
    );
    assert!(
        m.lines().any(|l| l.starts_with(&want)),
        "{want} missing:\n{m}"
    );
    assert!(m.contains("\nscrape_error 0\n"), "{m}");
}

/// Every JSON path of `v` (array items folded into `[]`), for comparing shapes.
fn json_paths(v: &Value, at: String, out: &mut std::collections::BTreeSet<String>) {
    match v {
        Value::Object(m) => {
            for (k, x) in m {
                json_paths(x, format!("{at}.{k}"), out);
            }
        }
        Value::Array(a) => {
            for x in a {
                json_paths(x, format!("{at}[]"), out);
            }
        }
        _ => {
            out.insert(at);
        }
    }
}

/// What the crustlet's server answers is what the kubelet's answers on the same cluster:
/// the status of each endpoint through the apiserver's node proxy, the fields of
/// `/stats/summary` for the node and for a pod with a volume, the metric families of
/// `/metrics/resource`, and `/pods` listing the pod.
pub fn crustlet_server_same_as_kubelet(c: &Cluster) {
    let c = &Crustlet::on_crustd(c);
    let nodes = [(NODE, "k"), (CRUSTLET_NODE, "c")];
    for (n, tag) in nodes {
        let mut p = pod_on(
            c,
            n,
            &format!("srv-cmp-{tag}"),
            "echo hi > /data/f; exec sleep 3600",
            |_| {},
        );
        p["spec"]["volumes"] = json!([{"name": "data", "emptyDir": {}}]);
        p["spec"]["containers"][0]["volumeMounts"] =
            json!([{"name": "data", "mountPath": "/data"}]);
        apply(c, p);
    }
    for (_, tag) in nodes {
        wait_pod(c, &format!("srv-cmp-{tag}"), "Running", T, running);
    }
    let raw = |node: &str, path: &str| {
        let out = run_timeout(
            &mut c.kubectl(&["get", "--raw", &format!("/api/v1/nodes/{node}/proxy{path}")]),
            T,
        );
        (out.status.success(), s(&out.stdout), s(&out.stderr))
    };
    let mut diffs = vec![];
    for path in [
        "/healthz",
        "/pods",
        "/stats/summary",
        "/metrics",
        "/metrics/resource",
        "/metrics/probes",
        "/metrics/cadvisor",
        "/configz",
        "/logs/",
        "/spec/",
        "/containerLogs/crustlet/srv-cmp-X/main",
    ] {
        let got: Vec<bool> = nodes
            .iter()
            .map(|(n, tag)| raw(n, &path.replace("-X", &format!("-{tag}"))).0)
            .collect();
        if got[0] != got[1] {
            diffs.push(format!(
                "{path}: kubelet ok={}, crustlet ok={}",
                got[0], got[1]
            ));
        }
    }
    // The summary's fields, node and pod, once both have the pod's volume in it.
    let summary = |node: &str, tag: &str| {
        wait_for(
            &format!("{node}'s summary with the pod"),
            Duration::from_secs(90),
            |last| {
                let (_, out, err) = raw(node, "/stats/summary");
                *last = out.clone() + &err;
                let v: Value = serde_json::from_str(&out).ok()?;
                let pod = v["pods"]
                    .as_array()?
                    .iter()
                    .find(|p| p["podRef"]["name"] == format!("srv-cmp-{tag}").as_str())?
                    .clone();
                pod["volume"]
                    .as_array()
                    .is_some_and(|a| !a.is_empty())
                    .then_some(())?;
                pod["containers"][0]["rootfs"].is_object().then_some(())?;
                let mut node_paths = std::collections::BTreeSet::new();
                json_paths(&v["node"], "node".into(), &mut node_paths);
                let mut pod_paths = std::collections::BTreeSet::new();
                json_paths(&pod, "pod".into(), &mut pod_paths);
                Some((node_paths, pod_paths))
            },
        )
    };
    let k = summary(NODE, "k");
    let cl = summary(CRUSTLET_NODE, "c");
    for (what, a, b) in [("node", &k.0, &cl.0), ("pod", &k.1, &cl.1)] {
        let missing: Vec<&String> = a.difference(b).collect();
        if !missing.is_empty() {
            diffs.push(format!(
                "/stats/summary {what}: the crustlet lacks {missing:?}"
            ));
        }
    }
    let families = |node: &str, path: &str| -> std::collections::BTreeSet<String> {
        raw(node, path)
            .1
            .lines()
            .filter_map(|l| l.strip_prefix("# TYPE "))
            .filter_map(|l| l.split_whitespace().next().map(str::to_string))
            .collect()
    };
    // The kubelet's node has PodAndContainerStatsFromCRI on: its resource metrics then
    // come from ListPodSandboxStats, of which the kubelet v1.28 takes the pods' CPU and
    // memory only (ListPodCPUAndMemoryStats in pkg/kubelet/stats/cri_stats_provider.go
    // leaves the containers out), so its container families are missing there.
    let (fk, fc) = (
        families(NODE, "/metrics/resource"),
        families(CRUSTLET_NODE, "/metrics/resource"),
    );
    let per_container = [
        "container_cpu_usage_seconds_total",
        "container_memory_working_set_bytes",
        "container_start_time_seconds",
    ];
    let beyond: Vec<&String> = fc
        .difference(&fk)
        .filter(|f| !per_container.contains(&f.as_str()))
        .collect();
    if !fk.is_subset(&fc) || !beyond.is_empty() || per_container.iter().any(|f| !fc.contains(*f)) {
        diffs.push(format!(
            "/metrics/resource families: kubelet {fk:?}, crustlet {fc:?}"
        ));
    }
    // cAdvisor's families: the crustlet has the ones dashboards read, all of them the
    // kubelet's too.
    let (fk, fc) = (
        families(NODE, "/metrics/cadvisor"),
        families(CRUSTLET_NODE, "/metrics/cadvisor"),
    );
    let extra: Vec<&String> = fc.difference(&fk).collect();
    if !extra.is_empty() {
        diffs.push(format!(
            "/metrics/cadvisor: families the kubelet has not: {extra:?}"
        ));
    }
    for f in [
        "container_cpu_usage_seconds_total",
        "container_memory_working_set_bytes",
        "container_network_receive_bytes_total",
        "machine_cpu_cores",
    ] {
        if !fc.contains(f) {
            diffs.push(format!("/metrics/cadvisor: no {f}"));
        }
    }
    let (fk, fc) = (
        families(NODE, "/metrics/probes"),
        families(CRUSTLET_NODE, "/metrics/probes"),
    );
    // Whether prober_probe_total is there depends on the node's pods having probes.
    let known: std::collections::BTreeSet<String> = [
        "process_start_time_seconds",
        "prober_probe_total",
        "prober_probe_duration_seconds",
    ]
    .map(String::from)
    .into();
    if !fk.is_subset(&known) || !fc.is_subset(&known) || !fc.contains("process_start_time_seconds")
    {
        diffs.push(format!(
            "/metrics/probes families: kubelet {fk:?}, crustlet {fc:?}"
        ));
    }
    // /configz: every setting the crustlet reports is one the kubelet's has.
    let keys = |node: &str| -> std::collections::BTreeSet<String> {
        let v: Value = serde_json::from_str(&raw(node, "/configz").1).unwrap_or_default();
        v["kubeletconfig"]
            .as_object()
            .map(|o| o.keys().cloned().collect())
            .unwrap_or_default()
    };
    let (kk, kc) = (keys(NODE), keys(CRUSTLET_NODE));
    // The kubelet's node has no static pods, so its staticPodPath is left out.
    let extra: Vec<&String> = kc
        .difference(&kk)
        .filter(|k| *k != "staticPodPath")
        .collect();
    if kc.is_empty() || !extra.is_empty() {
        diffs.push(format!(
            "/configz: settings the kubelet has not: {extra:?} (crustlet: {kc:?})"
        ));
    }
    // /logs/: the same folder listed the same way.
    let (lk, lc) = (raw(NODE, "/logs/").1, raw(CRUSTLET_NODE, "/logs/").1);
    if lk != lc {
        diffs.push(format!("/logs/:\n--- kubelet:\n{lk}--- crustlet:\n{lc}"));
    }
    let pods: Value = serde_json::from_str(&raw(CRUSTLET_NODE, "/pods").1).unwrap();
    assert!(
        pods["items"]
            .as_array()
            .unwrap()
            .iter()
            .any(|p| p["metadata"]["name"] == "srv-cmp-c"),
        "/pods lists the pod"
    );
    for (_, tag) in nodes {
        kubectl(
            c,
            &["delete", "pod", &format!("srv-cmp-{tag}"), "--wait=false"],
        );
    }
    assert!(
        diffs.is_empty(),
        "the crustlet's server differs:\n{}",
        diffs.join("\n")
    );
}
