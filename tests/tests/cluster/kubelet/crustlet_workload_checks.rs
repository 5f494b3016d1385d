//! The crustlet's Jobs and Deployments, what its pods are given (volumes, env, images and
//! errors in them) and their resources (requests and limits in cgroups, QoS cgroups as
//! the kubelet's), on its nodes.

use super::*;

on_both! {
    volumes_and_env => crustlet_volumes_and_env, containerd_volumes_and_env;
}

// ---- controllers ----------------------------------------------------------------------

pub fn crustlet_job_to_completion(c: &Cluster) {
    let c = &Crustlet::on_crustd(c);
    let mut template = json!({
        "spec": {
            "restartPolicy": "Never",
            "containers": [container("main", &c.image, "echo job-done")],
        }
    });
    place(&mut template["spec"], CRUSTLET_NODE);
    apply(
        c,
        json!({
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": {"name": "job", "namespace": NS},
            "spec": {"completions": 2, "parallelism": 2, "backoffLimit": 0, "template": template}
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
    let pods: Value = serde_json::from_str(&kubectl(
        c,
        &["get", "pods", "-l", "job-name=job", "-o", "json"],
    ))
    .unwrap();
    for p in pods["items"].as_array().unwrap() {
        assert_eq!(p["spec"]["nodeName"], CRUSTLET_NODE);
        assert_eq!(p["status"]["phase"], "Succeeded");
        assert_eq!(log_of(c, p, "main", 0), "job-done\n");
    }
}

pub fn crustlet_deployment_scaled_up_and_down(c: &Cluster) {
    let c = &Crustlet::on_crustd(c);
    let mut template = json!({
        "metadata": {"labels": {"app": "scaler"}},
        "spec": {
            "terminationGracePeriodSeconds": 1,
            "containers": [container("main", &c.image, "exec sleep 3600")],
        }
    });
    place(&mut template["spec"], CRUSTLET_NODE);
    apply(
        c,
        json!({
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": "scaler", "namespace": NS},
            "spec": {
                "replicas": 1,
                "selector": {"matchLabels": {"app": "scaler"}},
                "template": template,
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
                && items
                    .iter()
                    .all(|p| running(p) && p["spec"]["nodeName"] == CRUSTLET_NODE))
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

// ---- inputs: volumes, env, images -----------------------------------------------------

fn volumes_and_env(c: &Crustlet) {
    apply(
        c,
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cfg", "namespace": c.ns},
               "data": {"greeting": "hello-config"}}),
    );
    apply(
        c,
        json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "sec", "namespace": c.ns},
               "stringData": {"password": "s3cret"}}),
    );
    let sa = "/var/run/secrets/kubernetes.io/serviceaccount";
    let script = format!(
        "echo cfg=$(cat /etc/cfg/greeting); echo sec=$(cat /etc/sec/password); \
         echo tok=$(cat /var/run/tok/token); echo satok=$(cat {sa}/token); \
         echo sans=$(cat {sa}/namespace); echo saca=$(head -1 {sa}/ca.crt); \
         echo env=$GREETING/$PASSWORD/$EXPANDED/$POD_NAME/$NODE_NAME/$POD_IP/$HOST_IP; \
         touch /etc/sec/x 2>/dev/null && echo sec=writable; echo done; exec sleep 3600"
    );
    let p = run_pod(
        c,
        pod(c, "vols", &script, |p| {
            p["spec"]["volumes"] = json!([
                {"name": "cfg", "configMap": {"name": "cfg"}},
                {"name": "sec", "secret": {"secretName": "sec"}},
                {"name": "tok", "projected": {"sources": [
                    {"serviceAccountToken": {"path": "token", "audience": "crust-test", "expirationSeconds": 3600}}
                ]}},
            ]);
            let m = &mut p["spec"]["containers"][0];
            m["volumeMounts"] = json!([
                {"name": "cfg", "mountPath": "/etc/cfg"},
                {"name": "sec", "mountPath": "/etc/sec"},
                {"name": "tok", "mountPath": "/var/run/tok"},
            ]);
            m["env"] = json!([
                {"name": "GREETING", "valueFrom": {"configMapKeyRef": {"name": "cfg", "key": "greeting"}}},
                {"name": "PASSWORD", "valueFrom": {"secretKeyRef": {"name": "sec", "key": "password"}}},
                {"name": "EXPANDED", "value": "[$(GREETING)]"},
                {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
                {"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
                {"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
                {"name": "HOST_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.hostIP"}}},
            ]);
        }),
    );
    let log = wait_log(c, &p, "main", "done");
    let line = |k: &str| {
        log.lines()
            .find_map(|l| l.strip_prefix(&format!("{k}=")))
            .unwrap_or_else(|| panic!("no {k}= in {log}"))
            .to_string()
    };
    assert_eq!(line("cfg"), "hello-config", "{log}");
    assert_eq!(line("sec"), "s3cret", "{log}");
    let claims = crate::jwt_claims(&line("tok"));
    assert_eq!(claims["aud"], json!(["crust-test"]), "{claims}");
    assert_eq!(claims["kubernetes.io"]["pod"]["name"], "vols", "{claims}");
    let claims = crate::jwt_claims(&line("satok"));
    assert_eq!(
        claims["sub"],
        format!("system:serviceaccount:{}:default", c.ns),
        "{claims}"
    );
    assert_eq!(line("sans"), c.ns);
    assert_eq!(line("saca"), "-----BEGIN CERTIFICATE-----");
    let ip = p["status"]["podIP"].as_str().unwrap();
    assert_eq!(
        line("env"),
        format!(
            "hello-config/s3cret/[hello-config]/vols/{}/{ip}/{}",
            c.node, c.ip
        )
    );
    assert!(
        !log.contains("sec=writable"),
        "the secret volume is writable"
    );
}

pub fn crustlet_image_and_config_errors(c: &Cluster) {
    let c = &Crustlet::on_crustd(c);
    let missing = c.image.replace("busybox:1", "no-such-image:1");
    apply(
        c,
        pod(c, "noimage", "true", |p| {
            p["spec"]["containers"][0]["image"] = json!(missing);
        }),
    );
    apply(
        c,
        pod(c, "neverpull", "true", |p| {
            p["spec"]["containers"][0]["image"] = json!(missing);
            p["spec"]["containers"][0]["imagePullPolicy"] = json!("Never");
        }),
    );
    apply(
        c,
        pod(c, "noconfig", "exec sleep 3600", |p| {
            p["spec"]["containers"][0]["env"] = json!([
                {"name": "X", "valueFrom": {"configMapKeyRef": {"name": "no-such-config", "key": "k"}}},
            ]);
        }),
    );
    let reason = |p: &Value| {
        status_of(p, "main")
            .and_then(|s| s["state"]["waiting"]["reason"].as_str())
            .unwrap_or("")
            .to_string()
    };
    // ErrImagePull (for about a second, so it is seen or not), then ImagePullBackOff,
    // with the failed pull in an event.
    wait_pod(
        c,
        "noimage",
        "ImagePullBackOff",
        Duration::from_secs(60),
        |p| reason(p) == "ImagePullBackOff",
    );
    let sel = "involvedObject.name=noimage";
    let ev = kubectl(c, &["get", "events", "--field-selector", sel, "-o", "json"]);
    assert!(ev.contains("Failed to pull image"), "{ev}");
    let p = wait_pod(c, "neverpull", "ErrImageNeverPull", T, |p| {
        reason(p) == "ErrImageNeverPull"
    });
    assert_eq!(p["status"]["phase"], "Pending");
    let p = wait_pod(c, "noconfig", "CreateContainerConfigError", T, |p| {
        reason(p) == "CreateContainerConfigError"
    });
    let msg = status_of(&p, "main").unwrap()["state"]["waiting"]["message"].to_string();
    assert!(msg.contains("no-such-config"), "{msg}");
    let events = event_reasons(c, "noimage");
    for r in ["Pulling", "Failed", "BackOff"] {
        assert!(events.iter().any(|e| e == r), "no {r}: {events:?}");
    }
    // The other pods carry on: one started beside them runs.
    run_pod(c, pod(c, "beside", "exec sleep 3600", |_| {}));
    // The ConfigMap appears: the waiting pod starts.
    apply(
        c,
        json!({"apiVersion": "v1", "kind": "ConfigMap",
               "metadata": {"name": "no-such-config", "namespace": NS}, "data": {"k": "v"}}),
    );
    wait_pod(
        c,
        "noconfig",
        "running once its ConfigMap exists",
        T,
        running,
    );
}

// ---- resources ------------------------------------------------------------------------

fn read_trim(p: &std::path::Path) -> String {
    crate::read_trim(p)
}

pub fn crustlet_requests_and_limits_in_cgroups(c: &Cluster) {
    let c = &Crustlet::on_crustd(c);
    let p = run_pod(
        c,
        pod(c, "res", "exec sleep 3600", |p| {
            p["spec"]["containers"][0]["resources"] = json!({
                "requests": {"cpu": "100m", "memory": "32Mi"},
                "limits": {"cpu": "200m", "memory": "64Mi"},
            });
        }),
    );
    assert_eq!(p["status"]["qosClass"], "Burstable");
    let root = &c.crustlet_cgroup_root;
    let id = container_id(&p, "main");
    let uid = p["metadata"]["uid"].as_str().unwrap();
    let mem = c
        .cgroup_dir_named_under(root, "memory", &id)
        .unwrap_or_else(|| panic!("no memory cgroup named {id} under {root}"));
    let want = format!("{root}/kubepods/burstable/pod{uid}/{id}");
    assert!(
        mem.to_string_lossy().ends_with(&want),
        "{} is not at {want}",
        mem.display()
    );
    assert_eq!(read_trim(&mem.join("memory.limit_in_bytes")), "67108864");
    let cpu = c
        .cgroup_dir_named_under(root, "cpu", &id)
        .expect("cpu cgroup");
    assert_eq!(read_trim(&cpu.join("cpu.cfs_quota_us")), "20000");
    assert_eq!(read_trim(&cpu.join("cpu.cfs_period_us")), "100000");
    assert_eq!(read_trim(&cpu.join("cpu.shares")), "102");
    assert!(!read_trim(&mem.join("cgroup.procs")).is_empty());
    // A pod without requests is BestEffort, in its own class's cgroup.
    let p = run_pod(c, pod(c, "besteffort", "exec sleep 3600", |_| {}));
    assert_eq!(p["status"]["qosClass"], "BestEffort");
    let id = container_id(&p, "main");
    let uid = p["metadata"]["uid"].as_str().unwrap();
    let cpu = c
        .cgroup_dir_named_under(root, "cpu", &id)
        .expect("cpu cgroup");
    assert!(
        cpu.to_string_lossy()
            .ends_with(&format!("{root}/kubepods/besteffort/pod{uid}/{id}")),
        "{}",
        cpu.display()
    );
    assert_eq!(read_trim(&cpu.join("cpu.shares")), "2");
    assert_eq!(read_trim(&cpu.join("cpu.cfs_quota_us")), "-1");
    let pod_cpu = cpu.parent().unwrap();
    assert_eq!(read_trim(&pod_cpu.join("cpu.shares")), "2");
    assert_eq!(read_trim(&pod_cpu.join("cpu.cfs_quota_us")), "-1");
    assert_eq!(
        read_trim(&pod_cpu.parent().unwrap().join("cpu.shares")),
        "2"
    );

    // The pod cgroups' own limits, the same as the kubelet's for the same pods.
    type Case = (&'static str, Value);
    let cases: Vec<Case> = vec![
        (
            "guaranteed",
            json!([
                {"requests": {"cpu": "250m", "memory": "48Mi"}, "limits": {"cpu": "250m", "memory": "48Mi"}},
                {"requests": {"cpu": "100m", "memory": "16Mi"}, "limits": {"cpu": "100m", "memory": "16Mi"}},
            ]),
        ),
        (
            "limited",
            json!([{"requests": {"cpu": "100m", "memory": "32Mi"}, "limits": {"cpu": "300m", "memory": "96Mi"}}]),
        ),
        (
            "unlimited",
            json!([
                {"requests": {"cpu": "100m", "memory": "32Mi"}, "limits": {"cpu": "300m", "memory": "96Mi"}},
                {"requests": {"cpu": "50m"}},
            ]),
        ),
    ];
    let files = [
        ("cpu", "cpu.shares"),
        ("cpu", "cpu.cfs_quota_us"),
        ("cpu", "cpu.cfs_period_us"),
        ("memory", "memory.limit_in_bytes"),
    ];
    let mut seen: Vec<Vec<String>> = vec![];
    for (name, res) in &cases {
        for (node, root, tag) in [
            // The kubelet's own (the Crustlet's field of that name is the crustlet's).
            (NODE, &std::ops::Deref::deref(c).cgroup_root, "k"),
            (CRUSTLET_NODE, &c.crustlet_cgroup_root, "c"),
        ] {
            let pn = format!("podres-{name}-{tag}");
            let mut p = pod_on(c, node, &pn, "exec sleep 3600", |_| {});
            let one = p["spec"]["containers"][0].clone();
            let mut all = vec![];
            for (i, r) in res.as_array().unwrap().iter().enumerate() {
                let mut x = one.clone();
                x["name"] = json!(format!("c{i}"));
                x["resources"] = r.clone();
                all.push(x);
            }
            p["spec"]["containers"] = json!(all);
            let p = run_pod(c, p);
            let sid = status_of(&p, "c0").unwrap()["containerID"]
                .as_str()
                .unwrap();
            let id = sid.split_once("://").unwrap().1;
            let mut got = vec![name.to_string()];
            for (ctl, file) in files {
                let dir = c
                    .cgroup_dir_named_under(root, ctl, id)
                    .unwrap_or_else(|| panic!("{pn}: no {ctl} cgroup {id} under {root}"));
                got.push(format!(
                    "{file}={}",
                    read_trim(&dir.parent().unwrap().join(file))
                ));
            }
            seen.push(got);
        }
        let crustlet = seen.pop().unwrap();
        let kubelet = seen.pop().unwrap();
        assert_eq!(
            crustlet, kubelet,
            "the pod cgroup differs from the kubelet's"
        );
        seen.push(crustlet);
    }
    assert_eq!(
        seen[0][1..],
        [
            "cpu.shares=358",
            "cpu.cfs_quota_us=35000",
            "cpu.cfs_period_us=100000",
            "memory.limit_in_bytes=67108864"
        ],
        "guaranteed"
    );
    assert_eq!(seen[2][2], "cpu.cfs_quota_us=-1", "one container unlimited");
    for (name, _) in &cases {
        for tag in ["k", "c"] {
            kubectl(
                c,
                &[
                    "delete",
                    "pod",
                    &format!("podres-{name}-{tag}"),
                    "--wait=false",
                ],
            );
        }
    }
}

/// A CPU quantity in millicores (`250m`, `1`, `0.5`).
fn milli(q: &Value) -> i64 {
    let s = q
        .as_str()
        .map(str::to_string)
        .unwrap_or_else(|| q.to_string());
    match s.strip_suffix('m') {
        Some(m) => m.parse().unwrap(),
        None => (s.parse::<f64>().unwrap() * 1000.0).round() as i64,
    }
}

/// The CPU pod `p` requests, millicores, as the kubelet adds it up: the app containers
/// and sidecars, or an init container with the sidecars before it if more; the overhead.
fn pod_cpu_request(p: &Value) -> i64 {
    let req = |c: &Value| {
        let r = &c["resources"];
        let q = if r["requests"]["cpu"].is_null() {
            &r["limits"]["cpu"]
        } else {
            &r["requests"]["cpu"]
        };
        if q.is_null() {
            0
        } else {
            milli(q)
        }
    };
    let list = |k: &str| p["spec"][k].as_array().cloned().unwrap_or_default();
    let mut sum: i64 = list("containers").iter().map(req).sum();
    let (mut sidecars, mut init) = (0, 0);
    for c in list("initContainers") {
        if c["restartPolicy"] == "Always" {
            sum += req(&c);
            sidecars += req(&c);
            init = init.max(sidecars);
        } else {
            init = init.max(req(&c) + sidecars);
        }
    }
    let overhead = &p["spec"]["overhead"]["cpu"];
    sum.max(init)
        + if overhead.is_null() {
            0
        } else {
            milli(overhead)
        }
}

/// The node-level pod cgroups, the same as the real kubelet's on the same machine:
/// `kubepods` with the node's CPUs as shares, its memory and its task limit, BestEffort at
/// 2 shares; and on each node, Burstable at the shares of the CPU that node's active
/// Burstable pods request in all (from the apiserver's pods, so the same rule is checked
/// on the kubelet).
pub fn crustlet_qos_cgroups_as_kubelet(c: &Cluster) {
    let c = &Crustlet::on_crustd(c);
    let kubelet_root = &std::ops::Deref::deref(c).cgroup_root;
    let roots = [
        (NODE, kubelet_root, "k"),
        (CRUSTLET_NODE, &c.crustlet_cgroup_root, "c"),
    ];
    for (node, _, tag) in roots {
        let p = pod_on(c, node, &format!("qos-{tag}"), "exec sleep 3600", |p| {
            p["spec"]["containers"][0]["resources"] = json!({"requests": {"cpu": "300m"}});
        });
        run_pod(c, p);
    }
    let read = |root: &str, ctl: &str, rel: &str, file: &str| {
        let dir = c
            .cgroup_dir_named_under(root, ctl, "kubepods")
            .unwrap_or_else(|| panic!("no {ctl} cgroup kubepods under {root}"));
        read_trim(&dir.join(rel).join(file))
    };
    for (ctl, rel, file) in [
        ("cpu", "", "cpu.shares"),
        ("memory", "", "memory.limit_in_bytes"),
        ("pids", "", "pids.max"),
        ("cpu", "besteffort", "cpu.shares"),
    ] {
        assert_eq!(
            read(&c.crustlet_cgroup_root, ctl, rel, file),
            read(kubelet_root, ctl, rel, file),
            "kubepods/{rel}/{file} differs from the kubelet's"
        );
    }
    assert_eq!(read(kubelet_root, "cpu", "besteffort", "cpu.shares"), "2");
    for (node, root, _) in roots {
        // The kubelet writes the class's share when a pod starts and every minute.
        wait_for(
            &format!("{node}'s kubepods/burstable to weigh its pods' CPU requests"),
            Duration::from_secs(150),
            |last| {
                let out = ok(c.kubectl(&[
                    "get",
                    "pods",
                    "-A",
                    "--field-selector",
                    &format!("spec.nodeName={node}"),
                    "-o",
                    "json",
                ]));
                let pods: Value = serde_json::from_str(&out).ok()?;
                let milli: i64 = pods["items"]
                    .as_array()?
                    .iter()
                    .filter(|p| {
                        p["metadata"]["deletionTimestamp"].is_null()
                            && p["status"]["qosClass"] == "Burstable"
                            && !matches!(
                                p["status"]["phase"].as_str(),
                                Some("Succeeded" | "Failed")
                            )
                    })
                    .map(pod_cpu_request)
                    .sum();
                let want = (milli * 1024 / 1000).clamp(2, 262_144).to_string();
                let got = read(root, "cpu", "burstable", "cpu.shares");
                *last = format!("cpu.shares {got}, the pods' {milli}m make {want}");
                (got == want).then_some(())
            },
        );
    }
    for tag in ["k", "c"] {
        kubectl(c, &["delete", "pod", &format!("qos-{tag}"), "--wait=false"]);
    }
}
