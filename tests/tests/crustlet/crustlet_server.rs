//! The crustlet's HTTPS server without an apiserver: a static pod on a crustd, and the
//! server asked directly with curl (from inside crustd's node namespace, where the
//! crustlet runs so that crustd's streaming URLs are reachable): healthz, pods,
//! container logs with their options and rotation, exec and run through the runtime's
//! streaming server, the stats summary with numbers that move, the resource metrics;
//! then the 401 and 403 of a server that wants client certificates.

use crust_e2e::cri::import_busybox;
use crust_e2e::crustd::Crustd;
use crust_e2e::{bin, require_root, TempDir};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const NODE: &str = "n1";

struct Crustlet {
    child: Child,
    netns: std::path::PathBuf,
    manifests: TempDir,
    root: TempDir,
    logs: TempDir,
}

impl Crustlet {
    fn start(d: &Crustd, extra: &[&str]) -> Crustlet {
        let manifests = TempDir::new("sm");
        let root = TempDir::new("sr");
        let logs = TempDir::new("sp");
        let log = std::fs::File::create(root.path().join("crustlet.log")).unwrap();
        let child = Command::new("nsenter")
            .arg(format!("--net={}", d.node.path().display()))
            .arg(bin("crustlet"))
            .arg(format!(
                "--pod-manifest-path={}",
                manifests.path().display()
            ))
            .arg(format!("--hostname-override={NODE}"))
            .arg(format!(
                "--container-runtime-endpoint=unix://{}",
                d.socket.display()
            ))
            .arg(format!("--root-dir={}", root.path().join("root").display()))
            .arg(format!("--pod-logs-dir={}", logs.path().display()))
            .args(["--address=127.0.0.1", "--v=4"])
            .args(extra)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("starting crustlet");
        Crustlet {
            child,
            netns: d.node.path(),
            manifests,
            root,
            logs,
        }
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.root.path().join("crustlet.log")).unwrap_or_default()
    }

    /// `curl` in the node namespace against `https://127.0.0.1:10250<path>`: (status,
    /// body).
    fn curl(&self, path: &str, args: &[&str]) -> (u16, Vec<u8>) {
        let out = Command::new("nsenter")
            .arg(format!("--net={}", self.netns.display()))
            .args([
                "curl",
                "-sk",
                "--max-time",
                "20",
                "-o",
                "-",
                "-w",
                "\n%{http_code}",
            ])
            .args(args)
            .arg(format!("https://127.0.0.1:10250{path}"))
            .output()
            .unwrap();
        let mut body = out.stdout;
        let nl = body.iter().rposition(|b| *b == b'\n').unwrap_or(0);
        let code = String::from_utf8_lossy(&body[nl..])
            .trim()
            .parse()
            .unwrap_or(0);
        body.truncate(nl);
        (code, body)
    }

    fn get(&self, path: &str) -> (u16, String) {
        let (c, b) = self.curl(path, &[]);
        (c, String::from_utf8_lossy(&b).into_owned())
    }

    fn ok(&self, path: &str) -> String {
        let (c, b) = self.get(path);
        assert_eq!(c, 200, "{path}: {b}\ncrustlet log:\n{}", self.log());
        b
    }

    fn json(&self, path: &str) -> serde_json::Value {
        serde_json::from_str(&self.ok(path)).unwrap()
    }

    fn wait_for<T>(&self, what: &str, limit: Duration, mut f: impl FnMut() -> Option<T>) -> T {
        let start = Instant::now();
        loop {
            if let Some(v) = f() {
                return v;
            }
            assert!(
                start.elapsed() < limit,
                "timed out waiting for {what}; crustlet log:\n{}",
                self.log()
            );
            std::thread::sleep(Duration::from_millis(300));
        }
    }
}

impl Drop for Crustlet {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn root() -> bool {
    require_root(&["ip", "nsenter", "nft", "busybox", "curl", "openssl"])
}

const POD: &str = r#"
apiVersion: v1
kind: Pod
metadata: {name: web}
spec:
  containers:
  - name: fixed
    image: busybox:e2e
    imagePullPolicy: IfNotPresent
    command: ["sh", "-c", "for i in 1 2 3 4 5; do echo line $i; done; exec sleep 1000"]
  - name: busy
    image: busybox:e2e
    imagePullPolicy: IfNotPresent
    command: ["sh", "-c", "n=0; while true; do n=$((n+1)); i=0; while [ $i -lt 3000 ]; do i=$((i+1)); done; echo tick-$n-padding-padding-padding-padding-padding-padding-padding-padding; sleep 0.1; done"]
  - name: flaky
    image: busybox:e2e
    imagePullPolicy: IfNotPresent
    command: ["sh", "-c", "echo run-$(cat /proc/sys/kernel/random/uuid); sleep 2; exit 1"]
"#;

/// The websocket frames of a server (unmasked): (channel, data) of each binary one.
fn frames(mut b: &[u8]) -> Vec<(u8, Vec<u8>)> {
    let mut out = vec![];
    while b.len() >= 2 {
        let op = b[0] & 0x0f;
        let (len, head) = match b[1] & 0x7f {
            126 => (u16::from_be_bytes([b[2], b[3]]) as usize, 4),
            127 => (
                u64::from_be_bytes(b[2..10].try_into().unwrap()) as usize,
                10,
            ),
            n => (n as usize, 2),
        };
        if b.len() < head + len {
            break;
        }
        let payload = &b[head..head + len];
        if op == 2 && !payload.is_empty() {
            out.push((payload[0], payload[1..].to_vec()));
        }
        b = &b[head + len..];
    }
    out
}

fn pod_status<'a>(pods: &'a serde_json::Value, container: &str) -> Option<&'a serde_json::Value> {
    pods["items"]
        .as_array()?
        .iter()
        .find(|p| p["metadata"]["name"] == format!("web-{NODE}"))?["status"]["containerStatuses"]
        .as_array()?
        .iter()
        .find(|c| c["name"] == container)
}

fn cpu_of(summary: &serde_json::Value, container: &str) -> Option<u64> {
    summary["pods"]
        .as_array()?
        .iter()
        .find(|p| p["podRef"]["name"] == format!("web-{NODE}"))?["containers"]
        .as_array()?
        .iter()
        .find(|c| c["name"] == container)?["cpu"]["usageCoreNanoSeconds"]
        .as_u64()
}

#[test]
fn the_server_answers_what_kubectl_and_metrics_server_ask() {
    if !root() {
        return;
    }
    let d = Crustd::start();
    import_busybox(&d);
    let cl = Crustlet::start(
        &d,
        &[
            "--container-log-max-size=2Ki",
            "--container-log-max-files=3",
            "--read-only-port=10255",
        ],
    );
    std::fs::write(cl.manifests.path().join("web.yaml"), POD).unwrap();
    cl.wait_for("healthz", Duration::from_secs(30), || {
        (cl.get("/healthz") == (200, "ok\n".into())).then_some(())
    });
    // The pod, as its worker last synced it.
    cl.wait_for("the pod to run", Duration::from_secs(60), || {
        let pods = cl.json("/pods");
        assert_eq!(pods["kind"], "PodList");
        ["fixed", "busy"]
            .iter()
            .all(|c| pod_status(&pods, c).is_some_and(|s| s["state"]["running"].is_object()))
            .then_some(())
    });
    let (_, b) = cl.get("/healthz/ping");
    assert_eq!(b, "ok\n");

    // Logs and their options.
    let logs = |q: &str| cl.ok(&format!("/containerLogs/default/web-{NODE}/fixed{q}"));
    cl.wait_for("fixed's log", Duration::from_secs(20), || {
        logs("").contains("line 5").then_some(())
    });
    assert_eq!(logs(""), "line 1\nline 2\nline 3\nline 4\nline 5\n");
    assert_eq!(logs("?tailLines=2"), "line 4\nline 5\n");
    assert_eq!(logs("?limitBytes=9"), "line 1\nli");
    assert_eq!(logs("?sinceSeconds=3600"), logs(""));
    assert_eq!(logs("?sinceTime=2099-01-01T00:00:00Z"), "");
    let stamped = logs("?timestamps=true&tailLines=1");
    let (ts, rest) = stamped.split_once(' ').unwrap();
    assert_eq!(rest, "line 5\n");
    assert!(
        ts.len() == 30 && ts.ends_with('Z') && ts.as_bytes()[19] == b'.',
        "RFC 3339 with nanoseconds: {ts}"
    );
    let (c, b) = cl.get(&format!(
        "/containerLogs/default/web-{NODE}/fixed?previous=true"
    ));
    assert_eq!(c, 400, "{b}");
    let (c, b) = cl.get(&format!("/containerLogs/default/web-{NODE}/nope"));
    assert_eq!(c, 404, "{b}");
    let (c, _) = cl.get(&format!(
        "/containerLogs/default/web-{NODE}/fixed?tailLines=-1"
    ));
    assert_eq!(c, 400);
    let (c, _) = cl.get("/containerLogs/default/nope/fixed");
    assert_eq!(c, 404);

    // follow: output goes on while the container runs...
    let (c, b) = cl.curl(
        &format!("/containerLogs/default/web-{NODE}/busy?follow=true&tailLines=1"),
        &["--max-time", "3"],
    );
    let ticks = String::from_utf8_lossy(&b).matches("tick-").count();
    assert!(c == 0 || c == 200, "{c}");
    assert!(ticks >= 5, "followed {ticks} ticks in 3 s");
    // ...and ends when it exits; previous is the run before.
    let first = cl.wait_for("flaky to restart", Duration::from_secs(60), || {
        let pods = cl.json("/pods");
        let restarted =
            pod_status(&pods, "flaky").is_some_and(|s| s["restartCount"].as_u64() >= Some(1));
        restarted.then(|| logs("").len())
    });
    let _ = first;
    let flaky = |q: &str| cl.ok(&format!("/containerLogs/default/web-{NODE}/flaky{q}"));
    cl.wait_for("the second run's log", Duration::from_secs(20), || {
        flaky("").starts_with("run-").then_some(())
    });
    let (prev, cur) = (flaky("?previous=true"), flaky(""));
    assert!(prev.starts_with("run-") && prev != cur, "{prev:?} {cur:?}");
    let t = Instant::now();
    let (c, _) = cl.curl(
        &format!("/containerLogs/default/web-{NODE}/flaky?follow=true"),
        &["--max-time", "15"],
    );
    assert_eq!(c, 200, "follow ended with the container");
    assert!(t.elapsed() < Duration::from_secs(14));

    // Rotation: busy writes ~100 bytes every 0.1 s; at 2Ki it is rotated (every 10 s),
    // at most 3 files kept, and reads go through the rotated ones.
    let dir = std::fs::read_dir(cl.logs.path())
        .unwrap()
        .flatten()
        .find(|e| {
            e.file_name()
                .to_string_lossy()
                .starts_with(&format!("default_web-{NODE}_"))
        })
        .unwrap()
        .path()
        .join("busy");
    cl.wait_for("two rotations", Duration::from_secs(40), || {
        let n = std::fs::read_dir(&dir).unwrap().count();
        let rotated = std::fs::read_dir(&dir)
            .unwrap()
            .flatten()
            .filter(|e| e.file_name().to_string_lossy().starts_with("0.log."))
            .count();
        (rotated >= 2 && n <= 3).then_some(())
    });
    let all = cl.ok(&format!("/containerLogs/default/web-{NODE}/busy"));
    let cur_len = std::fs::read_to_string(dir.join("0.log"))
        .unwrap()
        .lines()
        .count();
    assert!(
        all.lines().count() > cur_len,
        "the rotated files are read too: {} lines, {cur_len} in 0.log",
        all.lines().count()
    );

    // exec through the runtime's streaming server, over WebSocket.
    let (c, b) = cl.curl(
        &format!("/exec/default/web-{NODE}/fixed?command=sh&command=-c&command=echo%20hi;echo%20oops%3E%262;exit%203&output=1&error=1"),
        &[
            "--http1.1",
            "-H", "Connection: Upgrade",
            "-H", "Upgrade: websocket",
            "-H", "Sec-WebSocket-Version: 13",
            "-H", "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==",
            "-H", "Sec-WebSocket-Protocol: v4.channel.k8s.io",
        ],
    );
    assert_eq!(c, 101, "{}", String::from_utf8_lossy(&b));
    let f = frames(&b);
    let chan = |n: u8| {
        f.iter()
            .filter(|(c, _)| *c == n)
            .map(|(_, d)| String::from_utf8_lossy(d).into_owned())
            .collect::<String>()
    };
    assert_eq!(chan(1), "hi\n", "{f:?}");
    assert_eq!(chan(2), "oops\n", "{f:?}");
    let status: serde_json::Value = serde_json::from_str(&chan(3)).unwrap();
    assert_eq!(status["reason"], "NonZeroExitCode", "{status}");
    assert_eq!(status["details"]["causes"][0]["message"], "3", "{status}");
    // Not an upgrade: refused.
    let (c, _) = cl.get(&format!(
        "/exec/default/web-{NODE}/fixed?command=true&output=1"
    ));
    assert_eq!(c, 400);
    // /run: the command's output.
    let (c, b) = cl.curl(
        &format!("/run/default/web-{NODE}/fixed?cmd=echo%20ran"),
        &["-X", "POST"],
    );
    assert_eq!((c, String::from_utf8_lossy(&b).as_ref()), (200, "ran\n"));

    // The summary: node and pod readings, and busy's CPU moving.
    let s1 = cl.json("/stats/summary");
    assert_eq!(s1["node"]["nodeName"], NODE);
    for p in [
        "/node/cpu/usageCoreNanoSeconds",
        "/node/memory/workingSetBytes",
        "/node/fs/capacityBytes",
        "/node/runtime/imageFs/capacityBytes",
    ] {
        assert!(
            s1.pointer(p)
                .and_then(|v| v.as_u64())
                .is_some_and(|v| v > 0),
            "{p}: {s1}"
        );
    }
    let pod = s1["pods"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["podRef"]["name"] == format!("web-{NODE}"))
        .unwrap()
        .clone();
    assert_eq!(pod["podRef"]["namespace"], "default");
    assert!(pod["memory"]["workingSetBytes"].as_u64() > Some(0), "{pod}");
    assert!(
        pod["network"]["interfaces"]
            .as_array()
            .is_some_and(|i| !i.is_empty()),
        "{pod}"
    );
    assert!(pod["containers"][0]["logs"]["usedBytes"].is_u64(), "{pod}");
    let c1 = cpu_of(&s1, "busy").expect("busy's cpu");
    std::thread::sleep(Duration::from_secs(2));
    let s2 = cl.json("/stats/summary");
    let c2 = cpu_of(&s2, "busy").unwrap();
    assert!(c2 > c1, "busy's CPU time moves: {c1} then {c2}");
    assert!(
        s2["node"]["cpu"]["usageNanoCores"].as_u64().is_some(),
        "a rate once two samples are in: {}",
        s2["node"]
    );
    let only = cl.json("/stats/summary?only_cpu_and_memory=true");
    assert!(only["node"].get("fs").is_none() && only["node"]["cpu"].is_object());

    let m = cl.ok("/metrics/resource");
    for want in [
        format!("container_cpu_usage_seconds_total{{container=\"busy\",namespace=\"default\",pod=\"web-{NODE}\"}}"),
        format!("pod_memory_working_set_bytes{{namespace=\"default\",pod=\"web-{NODE}\"}}"),
        "node_cpu_usage_seconds_total ".into(),
        "node_memory_working_set_bytes ".into(),
        "scrape_error 0".into(),
    ] {
        assert!(m.lines().any(|l| l.starts_with(&want)), "{want} missing:\n{m}");
    }
    let own = cl.ok("/metrics");
    assert!(own.contains("kubelet_running_pods 1\n"), "{own}");
    assert!(
        own.contains("crustlet_http_requests_total{code=\"200\",path=\"containerLogs\"}"),
        "{own}"
    );
    let (c, _) = cl.get("/nope");
    assert_eq!(c, 404);
    // The read-only port: plain HTTP, no authentication, no logs or exec.
    let plain = |path: &str| {
        let out = Command::new("nsenter")
            .arg(format!("--net={}", cl.netns.display()))
            .args(["curl", "-s", "-o", "/dev/null", "-w", "%{http_code}"])
            .arg(format!("http://127.0.0.1:10255{path}"))
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    assert_eq!(plain("/healthz"), "200");
    assert_eq!(plain("/stats/summary"), "200");
    assert_eq!(
        plain(&format!("/containerLogs/default/web-{NODE}/fixed")),
        "404"
    );
    // The self-signed certificate is in --cert-dir (the root dir's pki), for the node.
    let cert = cl.root.path().join("root/pki/kubelet.crt");
    let text = Command::new("openssl")
        .args(["x509", "-noout", "-text", "-in"])
        .arg(&cert)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(
        text.contains("DNS:n1") && text.contains("IP Address:127.0.0.1"),
        "{text}"
    );
}

/// A CA and a client certificate for `cn` in group `o`, made with openssl.
fn client_pki(dir: &Path, cn: &str, o: &str) {
    let run = |args: &[&str]| {
        let out = Command::new("openssl")
            .current_dir(dir)
            .args(args)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "openssl {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    run(&[
        "req",
        "-x509",
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:P-256",
        "-nodes",
        "-keyout",
        "ca.key",
        "-out",
        "ca.pem",
        "-days",
        "2",
        "-subj",
        "/CN=test-ca",
    ]);
    run(&[
        "req",
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:P-256",
        "-nodes",
        "-keyout",
        "client.key",
        "-out",
        "client.csr",
        "-subj",
        &format!("/O={o}/CN={cn}"),
    ]);
    // Extensions make it X.509 v3, which webpki insists on.
    std::fs::write(
        dir.join("ext.cnf"),
        "keyUsage=digitalSignature\nextendedKeyUsage=clientAuth\n",
    )
    .unwrap();
    run(&[
        "x509",
        "-req",
        "-in",
        "client.csr",
        "-CA",
        "ca.pem",
        "-CAkey",
        "ca.key",
        "-CAcreateserial",
        "-out",
        "client.pem",
        "-days",
        "2",
        "-extfile",
        "ext.cnf",
    ]);
    // One the CA did not sign.
    run(&[
        "req",
        "-x509",
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:P-256",
        "-nodes",
        "-keyout",
        "other.key",
        "-out",
        "other.pem",
        "-days",
        "2",
        "-subj",
        &format!("/CN={cn}"),
    ]);
}

#[test]
fn client_certificates_401_and_403() {
    if !root() {
        return;
    }
    let d = Crustd::start();
    let pki = TempDir::new("spki");
    client_pki(pki.path(), "alice", "ops");
    let ca = format!("--client-ca-file={}", pki.path().join("ca.pem").display());
    let cert = pki.path().join("client.pem").display().to_string();
    let key = pki.path().join("client.key").display().to_string();
    let with_cert = ["--cert", &cert, "--key", &key];

    // Anonymous off, AlwaysAllow: a certificate is a user, nothing else is.
    let cl = Crustlet::start(&d, &[&ca, "--anonymous-auth=false"]);
    cl.wait_for("the server", Duration::from_secs(30), || {
        (cl.curl("/healthz", &with_cert).0 == 200).then_some(())
    });
    // The kubelet's bodies end without a newline.
    assert_eq!(cl.get("/healthz"), (401, "Unauthorized".into()));
    assert_eq!(
        cl.curl("/healthz", &["-H", "Authorization: Bearer x"]).0,
        401
    );
    assert_eq!(cl.curl("/stats/summary", &with_cert).0, 200);
    // A certificate from another CA is no one: 401, as the kubelet answers it (the
    // handshake takes it; it is checked with the request).
    let other = pki.path().join("other.pem").display().to_string();
    let okey = pki.path().join("other.key").display().to_string();
    assert_eq!(
        cl.curl("/healthz", &["--cert", &other, "--key", &okey]).0,
        401
    );
    drop(cl);

    // Webhook authorization without an apiserver to ask: everyone is refused, with the
    // kubelet's message naming the user and the node subresource.
    let cl = Crustlet::start(&d, &[&ca, "--authorization-mode=Webhook"]);
    cl.wait_for("the server", Duration::from_secs(30), || {
        (cl.get("/healthz").0 != 0).then_some(())
    });
    let (c, b) = cl.curl("/stats/summary", &with_cert);
    assert_eq!(
        (c, String::from_utf8_lossy(&b).as_ref()),
        (
            403,
            "Forbidden (user=alice, verb=get, resource=nodes, subresource=stats)"
        )
    );
    assert_eq!(
        cl.get("/metrics"),
        (
            403,
            "Forbidden (user=system:anonymous, verb=get, resource=nodes, subresource=metrics)"
                .into()
        )
    );
    let (c, b) = cl.curl("/exec/default/p/c", &["-X", "POST"]);
    assert_eq!(c, 403, "{}", String::from_utf8_lossy(&b));
    assert!(String::from_utf8_lossy(&b).contains("verb=create, resource=nodes, subresource=proxy"));
}

/// An ephemeral container (what `kubectl debug --target` adds; a static pod can carry
/// one from its file) starts in the running pod, sees its target's processes, runs
/// once and is reported in `ephemeralContainerStatuses`, never restarted.
#[test]
fn ephemeral_containers_run_once_in_their_targets_pid_namespace() {
    if !root() {
        return;
    }
    let d = Crustd::start();
    import_busybox(&d);
    let cl = Crustlet::start(&d, &[]);
    cl.wait_for("healthz", Duration::from_secs(30), || {
        (cl.get("/healthz").0 == 200).then_some(())
    });
    std::fs::write(
        cl.manifests.path().join("dbg.yaml"),
        r#"
apiVersion: v1
kind: Pod
metadata: {name: dbg}
spec:
  containers:
  - name: app
    image: busybox:e2e
    imagePullPolicy: IfNotPresent
    command: ["sh", "-c", "exec sleep 1001"]
  ephemeralContainers:
  - name: debugger
    image: busybox:e2e
    imagePullPolicy: IfNotPresent
    targetContainerName: app
    command: ["sh", "-c", "busybox ps -o pid,args; exit 4"]
"#,
    )
    .unwrap();
    let status = |pods: &serde_json::Value| -> Option<serde_json::Value> {
        pods["items"]
            .as_array()?
            .iter()
            .find(|p| p["metadata"]["name"] == format!("dbg-{NODE}"))?["status"]
            ["ephemeralContainerStatuses"]
            .as_array()?
            .iter()
            .find(|c| c["name"] == "debugger")
            .cloned()
    };
    let st = cl.wait_for(
        "the debugger to run and end",
        Duration::from_secs(60),
        || status(&cl.json("/pods")).filter(|s| s["state"]["terminated"].is_object()),
    );
    assert_eq!(st["state"]["terminated"]["exitCode"], 4, "{st}");
    assert_eq!(st["ready"], false);
    let log = cl.ok(&format!("/containerLogs/default/dbg-{NODE}/debugger"));
    assert!(
        log.contains("sleep 1001"),
        "the target's processes are visible: {log}"
    );
    // Never restarted: not by the sync that saw it end, nor by two more of the pod's
    // worker (the only pod here, so the node's sync count is its own).
    let syncs = || -> f64 {
        let m = cl.ok("/metrics");
        m.lines()
            .find_map(|l| l.strip_prefix("crustlet_pod_sync_duration_seconds_count "))
            .unwrap_or_else(|| panic!("no sync count in /metrics:\n{m}"))
            .parse()
            .unwrap()
    };
    let seen = syncs();
    cl.wait_for("two more syncs of the pod", Duration::from_secs(30), || {
        (syncs() >= seen + 2.0).then_some(())
    });
    let st = status(&cl.json("/pods")).unwrap();
    assert_eq!(st["restartCount"], 0, "never restarted: {st}");
    assert!(st["state"]["terminated"].is_object(), "{st}");
}
