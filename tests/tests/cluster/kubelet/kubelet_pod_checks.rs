//! The kubelet's checks of pods on its node: a pod running with its IP, `kubectl logs`,
//! `exec`, `attach`, `port-forward` and `cp`, Deployments and Jobs, init containers,
//! probes, and restart policies.

use super::{
    apply, container, get, http_get, kubectl, ok, pod, run_pod, run_timeout, running, s,
    shell_words, sleeper, status_of, wait_for, wait_pod, wait_served, with_input, Killed, Terminal,
    T,
};
use crust_e2e::cluster::Cluster;
use serde_json::{json, Value};
use std::io::{BufRead, Read};
use std::process::Stdio;
use std::time::{Duration, Instant};

// ---- a. the node, pods, logs and streaming --------------------------------------------

pub fn node_ready_with_crust_version(c: &Cluster) {
    let node = c.wait_node_ready(Duration::from_secs(120));
    let v = node["status"]["nodeInfo"]["containerRuntimeVersion"]
        .as_str()
        .unwrap_or_default();
    assert_eq!(v, format!("crust://{}", env!("CARGO_PKG_VERSION")));
    let addrs = node["status"]["addresses"].to_string();
    assert!(addrs.contains(&c.ip), "{addrs}");
}

pub fn pod_running_with_ip(c: &Cluster) {
    let p = run_pod(c, pod(c, "web", "exec httpd -f -p 8080 -h /www", |_| {}));
    let ip = p["status"]["podIP"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    assert!(
        ip.starts_with(&format!("10.{}.0.", c.subnet)),
        "pod IP {ip:?}"
    );
    let body = wait_for("the pod's web server", T, |last| {
        http_get(c, &format!("{ip}:8080"), "/")
            .map_err(|e| *last = e)
            .ok()
    });
    assert!(body.contains("hello from crust"), "{body}");
    // Under the kubelet, crustd has the pod's sandbox ready.
    let pods: Value =
        serde_json::from_str(&ok(c.crictl(&["pods", "--name", "web", "-o", "json"]))).unwrap();
    let items = pods["items"].as_array().unwrap();
    assert!(
        items.iter().any(|i| i["state"] == "SANDBOX_READY"),
        "{pods:#}"
    );
}

pub fn logs(c: &Cluster) {
    apply(
        c,
        pod(
            c,
            "logger",
            "echo line-one; echo to-stderr >&2; echo line-two; sleep 1; echo line-three",
            |p| {
                p["spec"]["restartPolicy"] = json!("Never");
            },
        ),
    );
    wait_pod(c, "logger", "Succeeded", 2 * T, |p| {
        p["status"]["phase"] == "Succeeded"
    });
    // stdout and stderr are two pipes: their lines come in order within each, and
    // what the pod wrote a second later comes after both.
    let out = kubectl(c, &["logs", "logger"]);
    let lines: Vec<&str> = out.lines().collect();
    let mut first_two = lines[..lines.len().min(3)].to_vec();
    first_two.retain(|l| *l != "to-stderr");
    assert_eq!(first_two, ["line-one", "line-two"], "{out}");
    assert!(lines.contains(&"to-stderr"), "{out}");
    assert_eq!(lines.len(), 4, "{out}");
    assert_eq!(lines[3], "line-three", "{out}");
    let out = kubectl(c, &["logs", "logger", "--tail=1"]);
    assert_eq!(out, "line-three\n");
}

pub fn logs_follow(c: &Cluster) {
    run_pod(
        c,
        pod(
            c,
            "follower",
            "i=0; while true; do echo tick-$i; i=$((i+1)); sleep 0.2; done",
            |_| {},
        ),
    );
    let mut child = Killed(
        c.kubectl(&["logs", "-f", "follower"])
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
    // Lines keep coming after what was there when kubectl started. The first may take
    // a while on a loaded node (kubectl, the apiserver's proxy, the kubelet's lookups);
    // after it, a pause of 10 s means the stream stalled.
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

pub fn logs_previous(c: &Cluster) {
    let script = "n=$(cat /data/n 2>/dev/null || echo 0); n=$((n+1)); echo $n > /data/n; \
                  echo attempt-$n; if [ $n -ge 2 ]; then exec sleep 3600; fi; exit 1";
    apply(
        c,
        pod(c, "previous", script, |p| {
            p["spec"]["volumes"] = json!([{"name": "data", "emptyDir": {}}]);
            p["spec"]["containers"][0]["volumeMounts"] =
                json!([{"name": "data", "mountPath": "/data"}]);
        }),
    );
    wait_pod(
        c,
        "previous",
        "restarted and running",
        Duration::from_secs(90),
        |p| running(p) && status_of(p, "main").is_some_and(|s| s["restartCount"] == 1),
    );
    assert_eq!(
        kubectl(c, &["logs", "previous", "--previous"]),
        "attempt-1\n"
    );
    assert_eq!(kubectl(c, &["logs", "previous"]), "attempt-2\n");
}

pub fn exec_output_and_exit_code(c: &Cluster) {
    sleeper(c, "exec");
    let out = run_timeout(
        &mut c.kubectl(&[
            "exec",
            "exec",
            "--",
            "sh",
            "-c",
            "echo to-out; echo to-err >&2; exit 7",
        ]),
        T,
    );
    assert_eq!(s(&out.stdout), "to-out\n", "{}", s(&out.stderr));
    assert!(s(&out.stderr).contains("to-err"), "{}", s(&out.stderr));
    assert_eq!(out.status.code(), Some(7), "{}", s(&out.stderr));
    // stdin reaches the command.
    let out = with_input(
        c.kubectl(&["exec", "-i", "exec", "--", "sh", "-c", "tr a-z A-Z"]),
        b"shout\n",
    );
    assert_eq!(s(&out.stdout), "SHOUT\n", "{}", s(&out.stderr));
    assert_eq!(out.status.code(), Some(0));
    // A command that does not exist.
    let out = run_timeout(&mut c.kubectl(&["exec", "exec", "--", "/no/such"]), T);
    assert!(!out.status.success());
}

pub fn exec_tty(c: &Cluster) {
    sleeper(c, "tty");
    let k = c.kubectl(&[
        "exec",
        "-it",
        "tty",
        "--",
        "sh",
        "-c",
        "tty >/dev/null && echo is-a-tty; echo term=$TERM; stty size; read l; echo got=$l; exit 3",
    ]);
    let mut t = Terminal::spawn(&format!("stty cols 91 rows 33; exec {}", shell_words(&k)));
    t.wait_for("33 91");
    t.type_in(b"typed\n");
    t.close_input();
    t.wait_for("got=typed");
    let (code, out, err) = t.finish();
    assert!(out.contains("is-a-tty"), "{out}{err}");
    assert!(out.contains("term=xterm"), "{out}{err}");
    assert_eq!(code, Some(3), "{out}{err}");
}

pub fn attach(c: &Cluster) {
    run_pod(
        c,
        pod(
            c,
            "attach",
            "echo ready; while read l; do echo got:$l; done; echo bye",
            |p| {
                p["spec"]["restartPolicy"] = json!("Never");
                p["spec"]["containers"][0]["stdin"] = json!(true);
                p["spec"]["containers"][0]["stdinOnce"] = json!(true);
            },
        ),
    );
    let out = with_input(
        c.kubectl(&["attach", "-i", "attach", "-c", "main"]),
        b"hello\n",
    );
    assert!(
        s(&out.stdout).contains("got:hello"),
        "{}{}",
        s(&out.stdout),
        s(&out.stderr)
    );
    // stdinOnce: the input ended with the one attach, and so did the shell.
    let p = wait_pod(c, "attach", "Succeeded", 2 * T, |p| {
        p["status"]["phase"] == "Succeeded"
    });
    assert_eq!(
        status_of(&p, "main").unwrap()["state"]["terminated"]["exitCode"],
        0
    );
    assert_eq!(kubectl(c, &["logs", "attach"]), "ready\ngot:hello\nbye\n");
}

pub fn port_forward(c: &Cluster) {
    run_pod(c, pod(c, "pf", "exec httpd -f -p 8080 -h /www", |_| {}));
    let mut child = Killed(
        c.kubectl(&["port-forward", "pod/pf", "18080:8080"])
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
        line.contains("Forwarding from 127.0.0.1:18080"),
        "port-forward said {line:?}"
    );
    wait_served(c, "127.0.0.1:18080", "hello from crust");
    // Each connection ends when the server closes it (read to the end, HTTP/1.0).
    for _ in 0..3 {
        let body = http_get(c, "127.0.0.1:18080", "/").unwrap();
        assert!(body.contains("hello from crust"), "{body}");
    }
}

pub fn cp(c: &Cluster) {
    sleeper(c, "cp");
    let local = c.path("cp-in.bin");
    let data: Vec<u8> = (0..300_000u32).map(|i| (i * 7 % 251) as u8).collect();
    std::fs::write(&local, &data).unwrap();
    kubectl(
        c,
        &["cp", local.to_str().unwrap(), "default/cp:/tmp/in.bin"],
    );
    let sum = kubectl(c, &["exec", "cp", "--", "wc", "-c", "/tmp/in.bin"]);
    assert!(sum.starts_with("300000 "), "{sum}");
    let back = c.path("cp-out.bin");
    kubectl(c, &["cp", "default/cp:/tmp/in.bin", back.to_str().unwrap()]);
    assert!(
        std::fs::read(&back).unwrap() == data,
        "the copy came back different"
    );
}

// ---- b. controllers, init containers, probes, restarts ---------------------------------

pub fn deployment_scaled_up_and_down(c: &Cluster) {
    apply(
        c,
        json!({
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": "scaler"},
            "spec": {
                "replicas": 1,
                "selector": {"matchLabels": {"app": "scaler"}},
                "template": {
                    "metadata": {"labels": {"app": "scaler"}},
                    "spec": {
                        "terminationGracePeriodSeconds": 1,
                        "containers": [container("main", &c.image, "exec sleep 3600")],
                    }
                }
            }
        }),
    );
    let ready = |n: u64| {
        move |last: &mut String| {
            let d = get(c, "deployment", "scaler")?;
            *last = d["status"].to_string();
            let pods: Value = serde_json::from_str(&kubectl(
                c,
                &["get", "pods", "-l", "app=scaler", "-o", "json"],
            ))
            .ok()?;
            let items = pods["items"].as_array()?;
            (d["status"]["readyReplicas"].as_u64() == Some(n)
                && d["status"]["replicas"].as_u64() == Some(n)
                && items.len() as u64 == n
                && items.iter().all(running))
            .then_some(())
        }
    };
    wait_for("1 replica", Duration::from_secs(90), ready(1));
    kubectl(c, &["scale", "deployment", "scaler", "--replicas=3"]);
    wait_for("3 replicas", Duration::from_secs(90), ready(3));
    kubectl(c, &["scale", "deployment", "scaler", "--replicas=1"]);
    wait_for("back to 1 replica", Duration::from_secs(90), ready(1));
    kubectl(c, &["delete", "deployment", "scaler", "--wait=true"]);
}

pub fn job_to_completion(c: &Cluster) {
    apply(
        c,
        json!({
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": {"name": "job"},
            "spec": {
                "completions": 2,
                "parallelism": 2,
                "backoffLimit": 0,
                "template": {
                    "spec": {
                        "restartPolicy": "Never",
                        "containers": [container("main", &c.image, "echo job-done")],
                    }
                }
            }
        }),
    );
    wait_for("the job to complete", Duration::from_secs(90), |last| {
        let j = get(c, "job", "job")?;
        *last = j["status"].to_string();
        let complete = j["status"]["conditions"]
            .as_array()?
            .iter()
            .any(|c| c["type"] == "Complete" && c["status"] == "True");
        (complete && j["status"]["succeeded"] == 2).then_some(())
    });
    assert_eq!(kubectl(c, &["logs", "job/job"]), "job-done\n");
}

pub fn init_containers_in_order(c: &Cluster) {
    let p = pod(c, "init", "cat /data/order; exec sleep 3600", |p| {
        p["spec"]["volumes"] = json!([{"name": "data", "emptyDir": {}}]);
        let mount = json!([{"name": "data", "mountPath": "/data"}]);
        let mut first = container("first", &c.image, "echo first >> /data/order; sleep 1");
        let mut second = container("second", &c.image, "echo second >> /data/order");
        first["volumeMounts"] = mount.clone();
        second["volumeMounts"] = mount.clone();
        p["spec"]["initContainers"] = json!([first, second]);
        p["spec"]["containers"][0]["volumeMounts"] = mount;
    });
    let p = run_pod(c, p);
    // Running says the main container was started, not that its `cat` has run yet.
    wait_for(
        "the main container's log",
        Duration::from_secs(30),
        |last| {
            *last = kubectl(c, &["logs", "init"]);
            (!last.is_empty()).then_some(())
        },
    );
    assert_eq!(kubectl(c, &["logs", "init"]), "first\nsecond\n");
    let inits = p["status"]["initContainerStatuses"].as_array().unwrap();
    assert_eq!(inits.len(), 2);
    for i in inits {
        assert_eq!(i["state"]["terminated"]["reason"], "Completed", "{i}");
        assert_eq!(i["state"]["terminated"]["exitCode"], 0, "{i}");
    }
    let t = |i: usize, k: &str| {
        inits[i]["state"]["terminated"][k]
            .as_str()
            .unwrap()
            .to_string()
    };
    assert!(t(1, "startedAt") >= t(0, "finishedAt"), "{inits:?}");
}

pub fn liveness_probe_exec(c: &Cluster) {
    let p = pod(
        c,
        "live",
        "touch /tmp/healthy; sleep 3; rm /tmp/healthy; exec sleep 3600",
        |p| {
            p["spec"]["containers"][0]["livenessProbe"] = json!({
                "exec": {"command": ["cat", "/tmp/healthy"]},
                "periodSeconds": 1,
                "failureThreshold": 2,
            });
        },
    );
    apply(c, p);
    let p = wait_pod(
        c,
        "live",
        "restarted by its liveness probe",
        Duration::from_secs(90),
        |p| status_of(p, "main").is_some_and(|s| s["restartCount"].as_u64() >= Some(1)),
    );
    let last = &status_of(&p, "main").unwrap()["lastState"]["terminated"];
    assert!(last.is_object(), "{p:#}");
    // Events are posted in the background: on a loaded apiserver they come late.
    wait_for("the Unhealthy event", T, |last| {
        let events = kubectl(
            c,
            &[
                "get",
                "events",
                "--field-selector",
                "involvedObject.name=live",
            ],
        );
        *last = events.clone();
        events.contains("Liveness probe failed").then_some(())
    });
}

pub fn readiness_probe_http(c: &Cluster) {
    let p = pod(c, "ready", "exec httpd -f -p 8080 -h /www", |p| {
        p["spec"]["containers"][0]["readinessProbe"] = json!({
            "httpGet": {"path": "/ready.html", "port": 8080},
            "periodSeconds": 1,
        });
    });
    apply(c, p);
    // Running but not ready while the page is missing (a few probes long), then ready
    // once it is there.
    wait_pod(c, "ready", "running, not ready", T, |p| {
        running(p) && status_of(p, "main").is_some_and(|s| s["ready"] == false)
    });
    std::thread::sleep(Duration::from_secs(3));
    let p = get(c, "pod", "ready").unwrap();
    assert_eq!(status_of(&p, "main").unwrap()["ready"], false, "{p:#}");
    kubectl(
        c,
        &[
            "exec",
            "ready",
            "--",
            "sh",
            "-c",
            "echo ok > /www/ready.html",
        ],
    );
    let p = wait_pod(c, "ready", "ready", T, |p| {
        status_of(p, "main").is_some_and(|s| s["ready"] == true)
    });
    assert_eq!(status_of(&p, "main").unwrap()["restartCount"], 0);
}

pub fn startup_probe_tcp(c: &Cluster) {
    // The port opens when the test says so; until then only the startup probe runs
    // (the liveness probe would restart the container at once).
    let script = "while [ ! -e /tmp/go ]; do sleep 0.2; done; exec httpd -f -p 8080 -h /www";
    let p = pod(c, "startup", script, |p| {
        p["spec"]["containers"][0]["startupProbe"] = json!({
            "tcpSocket": {"port": 8080},
            "periodSeconds": 1,
            "failureThreshold": 120,
        });
        p["spec"]["containers"][0]["livenessProbe"] = json!({
            "tcpSocket": {"port": 8080},
            "periodSeconds": 1,
            "failureThreshold": 1,
        });
    });
    apply(c, p);
    wait_pod(c, "startup", "running, not started", T, |p| {
        running(p) && status_of(p, "main").is_some_and(|s| s["started"] == false)
    });
    std::thread::sleep(Duration::from_secs(3));
    kubectl(c, &["exec", "startup", "--", "touch", "/tmp/go"]);
    let p = wait_pod(c, "startup", "started and ready", T, |p| {
        status_of(p, "main").is_some_and(|s| s["started"] == true && s["ready"] == true)
    });
    assert_eq!(status_of(&p, "main").unwrap()["restartCount"], 0, "{p:#}");
}

pub fn restart_policy_and_crash_loop(c: &Cluster) {
    apply(c, pod(c, "crash", "echo crashing; exit 3", |_| {}));
    apply(
        c,
        pod(c, "onfailure", "exit 0", |p| {
            p["spec"]["restartPolicy"] = json!("OnFailure")
        }),
    );
    apply(
        c,
        pod(c, "never", "exit 4", |p| {
            p["spec"]["restartPolicy"] = json!("Never")
        }),
    );
    let p = wait_pod(
        c,
        "crash",
        "in CrashLoopBackOff",
        Duration::from_secs(90),
        |p| {
            status_of(p, "main").is_some_and(|s| {
                s["state"]["waiting"]["reason"] == "CrashLoopBackOff"
                    && s["restartCount"].as_u64() >= Some(1)
            })
        },
    );
    let last = &status_of(&p, "main").unwrap()["lastState"]["terminated"];
    assert_eq!(last["exitCode"], 3, "{last}");
    assert_eq!(last["reason"], "Error", "{last}");
    let p = wait_pod(c, "onfailure", "Succeeded", 2 * T, |p| {
        p["status"]["phase"] == "Succeeded"
    });
    assert_eq!(status_of(&p, "main").unwrap()["restartCount"], 0);
    let p = wait_pod(c, "never", "Failed", T, |p| {
        p["status"]["phase"] == "Failed"
    });
    let st = status_of(&p, "main").unwrap();
    assert_eq!(st["restartCount"], 0);
    assert_eq!(st["state"]["terminated"]["exitCode"], 4, "{st}");
}
