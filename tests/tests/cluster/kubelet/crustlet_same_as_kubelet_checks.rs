//! The same pods on the kubelet's node and on the crustlet's, compared: their status and
//! events, the files and environment the node makes for them, and host port admission.

use super::*;
use crate::{pod_events, wait_event};

// ---- the same pod on both nodes ------------------------------------------------------

/// What a node makes of a pod, with what depends on timing or the node taken out.
fn digest(p: &Value, events: &[String]) -> Value {
    let (name, uid) = (
        p["metadata"]["name"].as_str().unwrap_or("-"),
        p["metadata"]["uid"].as_str().unwrap_or("-"),
    );
    let ctr = |s: &Value| {
        let state = |st: &Value| {
            let (kind, v) = st
                .as_object()
                .and_then(|o| o.iter().next())
                .map(|(k, v)| (k.clone(), v.clone()))
                .unwrap_or_default();
            // Messages name the pod, which differs by node, and a crash loop's back-off
            // depends on when it is looked at.
            let message = v["message"]
                .as_str()
                .map(|m| {
                    let m = m.replace(name, "POD").replace(uid, "UID");
                    let m = match m.strip_prefix("back-off ") {
                        Some(rest) => format!(
                            "back-off Ns{}",
                            rest.trim_start_matches(|c: char| c.is_ascii_digit())
                                .trim_start_matches('s')
                        ),
                        None => m,
                    };
                    json!(m)
                })
                .unwrap_or(Value::Null);
            json!({"kind": kind, "reason": v["reason"], "exitCode": v["exitCode"], "message": message})
        };
        json!({
            "name": s["name"],
            "state": state(&s["state"]),
            "lastState": state(&s["lastState"]),
            // A crash loop's count depends on when it is looked at.
            "restarted": s["restartCount"].as_u64().unwrap_or(0) > 0,
            "ready": s["ready"],
            "started": s["started"],
        })
    };
    let list = |k: &str| -> Vec<Value> {
        p["status"][k]
            .as_array()
            .map(|a| a.iter().map(ctr).collect())
            .unwrap_or_default()
    };
    // PodReadyToStartContainers is the crustlet's own addition: the kubelet v1.28 has it
    // behind a feature gate that is off (on from v1.29).
    let mut conds: Vec<Value> = p["status"]["conditions"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter(|c| c["type"] != "PodReadyToStartContainers")
                .map(|c| json!({"type": c["type"], "status": c["status"], "reason": c["reason"], "message": c["message"]}))
                .collect()
        })
        .unwrap_or_default();
    conds.sort_by_key(|c| c["type"].as_str().unwrap_or("").to_string());
    json!({
        "phase": p["status"]["phase"],
        "qosClass": p["status"]["qosClass"],
        "conditions": conds,
        "initContainerStatuses": list("initContainerStatuses"),
        "containerStatuses": list("containerStatuses"),
        // Pulling only when the image was not there yet: which pod of the suite pulled
        // it first is a race on either node.
        // FailedMount neither: under Node,RBAC a token or ConfigMap of a pod just bound
        // is now and then refused until the Node authorizer's graph has the pod (a
        // retry mounts it), on either node.
        "events": events
            .iter()
            .filter(|e| *e != "Pulling" && *e != "FailedMount")
            .collect::<Vec<_>>(),
    })
}

/// The same pods on the kubelet's node and on the crustlet's: once each has settled
/// (the condition of the case), what they show must be the same.
pub fn crustlet_same_as_kubelet(c: &Cluster) {
    let c = &Crustlet::on_crustd(c);
    type Settled = fn(&Value) -> bool;
    type Case = (&'static str, &'static str, fn(&mut Value), Settled);
    let cases: Vec<Case> = vec![
        (
            "crash",
            "echo crashing; exit 3",
            |_| {},
            |p| {
                status_of(p, "main").is_some_and(|s| {
                    s["state"]["waiting"]["reason"] == "CrashLoopBackOff"
                        && s["restartCount"].as_u64() >= Some(1)
                })
            },
        ),
        (
            "never",
            "exit 4",
            |p| p["spec"]["restartPolicy"] = json!("Never"),
            |p| p["status"]["phase"] == "Failed",
        ),
        (
            "onfailure",
            "exit 0",
            |p| p["spec"]["restartPolicy"] = json!("OnFailure"),
            |p| p["status"]["phase"] == "Succeeded",
        ),
        (
            "init",
            "exec sleep 3600",
            |p| {
                let img = p["spec"]["containers"][0]["image"].clone();
                let mut i = container("setup", "", "echo setup");
                i["image"] = img;
                p["spec"]["initContainers"] = json!([i]);
            },
            running,
        ),
        (
            "initfail",
            "exec sleep 3600",
            |p| {
                let img = p["spec"]["containers"][0]["image"].clone();
                let mut i = container("setup", "", "exit 1");
                i["image"] = img;
                p["spec"]["initContainers"] = json!([i]);
                p["spec"]["restartPolicy"] = json!("Never");
            },
            |p| p["status"]["phase"] == "Failed",
        ),
        (
            "notready",
            "exec sleep 3600",
            |p| {
                p["spec"]["containers"][0]["readinessProbe"] =
                    json!({"exec": {"command": ["false"]}, "periodSeconds": 1});
            },
            |p| {
                running(p)
                    && status_of(p, "main").is_some_and(|s| s["started"] == true)
                    && condition(p, "Ready").is_some_and(|c| c["status"] == "False")
            },
        ),
        (
            "termmsg",
            "echo bye > /dev/termination-log; exit 1",
            |p| p["spec"]["restartPolicy"] = json!("Never"),
            |p| p["status"]["phase"] == "Failed",
        ),
        (
            "fallback",
            "echo first; echo last words; exit 2",
            |p| {
                p["spec"]["restartPolicy"] = json!("Never");
                p["spec"]["containers"][0]["terminationMessagePolicy"] =
                    json!("FallbackToLogsOnError");
            },
            |p| p["status"]["phase"] == "Failed",
        ),
        // The conformance test's `/bin/echo -n DONE; /bin/false`: the last line has no
        // newline (a `P` record), and the message is `DONE`, without one.
        (
            "fallbackpartial",
            "echo -n DONE; exit 1",
            |p| {
                p["spec"]["restartPolicy"] = json!("Never");
                p["spec"]["containers"][0]["terminationMessagePolicy"] =
                    json!("FallbackToLogsOnError");
            },
            |p| p["status"]["phase"] == "Failed",
        ),
        // The conformance test "as non-root user and at a non-default path": the file
        // must be writable by uid 1000, in a folder the image does not have.
        (
            "termnonroot",
            "echo -n DONE > /tmp/dev/termination-log",
            |p| {
                p["spec"]["restartPolicy"] = json!("Never");
                let c = &mut p["spec"]["containers"][0];
                c["securityContext"] = json!({"runAsUser": 1000});
                c["terminationMessagePath"] = json!("/tmp/dev/termination-log");
            },
            |p| p["status"]["phase"] == "Succeeded",
        ),
        (
            "sidecar",
            "exec sleep 3600",
            |p| {
                let img = p["spec"]["containers"][0]["image"].clone();
                let mut i = container("side", "", "exec sleep 3600");
                i["image"] = img;
                i["restartPolicy"] = json!("Always");
                let mut j = container("setup", "", "echo setup");
                j["image"] = i["image"].clone();
                p["spec"]["initContainers"] = json!([i, j]);
            },
            |p| {
                running(p)
                    && condition(p, "Ready").is_some_and(|c| c["status"] == "True")
                    && p["status"]["initContainerStatuses"][0]["started"] == true
            },
        ),
        (
            "noconfig",
            "exec sleep 3600",
            |p| {
                p["spec"]["containers"][0]["env"] = json!([
                    {"name": "X", "valueFrom": {"configMapKeyRef": {"name": "cmp-missing", "key": "k"}}},
                ]);
            },
            |p| {
                status_of(p, "main").is_some_and(|s| {
                    s["state"]["waiting"]["reason"] == "CreateContainerConfigError"
                })
            },
        ),
    ];
    let nodes = [(NODE, "k"), (CRUSTLET_NODE, "c")];
    for (name, script, change, _) in &cases {
        for (n, tag) in nodes {
            let mut p = pod_on(c, n, &format!("cmp-{name}-{tag}"), script, change);
            p["metadata"]["labels"]["cmp"] = json!("1");
            apply(c, p);
        }
    }
    let mut diffs = vec![];
    for (name, _, _, settled) in &cases {
        let mut got = vec![];
        for (_, tag) in nodes {
            let pn = format!("cmp-{name}-{tag}");
            let p = wait_pod(c, &pn, "settled", Duration::from_secs(90), settled);
            got.push((pn, p));
        }
        // A little longer, for the last events (and for anything that would still
        // change); a pod that moved on (a crash loop restarting) is taken as it settled.
        std::thread::sleep(Duration::from_secs(2));
        let mut d = vec![];
        for (pn, p) in got {
            let now = get(c, "pod", &pn).filter(settled).unwrap_or(p);
            d.push(digest(&now, &event_reasons(c, &pn)));
        }
        if d[0] != d[1] {
            diffs.push(format!(
                "{name}:\n  kubelet:  {}\n  crustlet: {}",
                d[0], d[1]
            ));
        }
        // The termination message as Kubernetes documents it, not only alike.
        let want = match *name {
            "termmsg" => Some("bye\n"),
            "fallback" => Some("first\nlast words\n"),
            "fallbackpartial" | "termnonroot" => Some("DONE"),
            _ => None,
        };
        if let Some(want) = want {
            let got = &d[1]["containerStatuses"][0]["state"]["message"];
            assert_eq!(got, want, "{name}: the termination message");
        }
    }
    kubectl(c, &["delete", "pods", "-l", "cmp=1", "--wait=true"]);
    assert!(
        diffs.is_empty(),
        "the crustlet differs from the kubelet:\n{}",
        diffs.join("\n")
    );
}

/// What the containers of a pod see of the node's making, the same on both nodes: the
/// `/etc/hosts` the kubelet writes (hostname, subdomain, hostAliases, the node's file
/// on its network), the hostname (setHostnameAsFQDN), the Services' variables
/// (`enableServiceLinks`) and `$(VAR)` in env and args.
pub fn crustlet_pod_files_as_kubelet(c: &Cluster) {
    let c = &Crustlet::on_crustd(c);
    apply(
        c,
        json!({
            "apiVersion": "v1", "kind": "Service",
            "metadata": {"name": "cmp-svc", "namespace": c.ns},
            "spec": {"ports": [
                {"name": "web", "port": 80, "targetPort": 8080},
                {"name": "dns", "port": 53, "protocol": "UDP"},
            ]},
        }),
    );
    let script = "echo \"arg0=$0\"; cat /etc/hosts; echo \"hostname=$(hostname)\"; \
                  env | grep -E '^(KUBERNETES_|CMP_SVC_|X=|Y=)' | sort; \
                  for d in /vol /mem; do [ -d $d ] || continue; touch $d/f; \
                  set -- $(ls -ldn $d); echo \"$d=$1 $4\"; \
                  set -- $(ls -ln $d/f); echo \"$d/f=$1 $4\"; done; \
                  [ -d /sub ] && touch /sub/mark && ls /vol/*/mark; \
                  echo done; exec sleep 3600";
    type Case = (&'static str, fn(&mut Value));
    let cases: Vec<Case> = vec![
        ("names", |p| {
            p["spec"]["hostname"] = json!("h1");
            p["spec"]["subdomain"] = json!("sub");
            p["spec"]["hostAliases"] = json!([{"ip": "10.9.9.9", "hostnames": ["a.example", "b"]}]);
        }),
        ("fqdn", |p| {
            p["spec"]["subdomain"] = json!("sub");
            p["spec"]["setHostnameAsFQDN"] = json!(true);
            p["spec"]["enableServiceLinks"] = json!(false);
        }),
        ("hostnet", |p| {
            p["spec"]["hostNetwork"] = json!(true);
            p["spec"]["hostAliases"] = json!([{"ip": "10.9.9.8", "hostnames": ["c"]}]);
        }),
        // emptyDirs of an fsGroup pod: the group's and setgid, and so what is written.
        ("fsgroup", |p| {
            p["spec"]["securityContext"] = json!({"fsGroup": 1234});
            p["spec"]["volumes"] = json!([
                {"name": "vol", "emptyDir": {}},
                {"name": "mem", "emptyDir": {"medium": "Memory"}},
            ]);
            // And a subPathExpr from the container's variables (X, set below).
            p["spec"]["containers"][0]["volumeMounts"] = json!([
                {"name": "vol", "mountPath": "/vol"},
                {"name": "mem", "mountPath": "/mem"},
                {"name": "vol", "mountPath": "/sub", "subPathExpr": "sub-$(X)"},
            ]);
        }),
    ];
    let nodes = [(NODE, "k"), (CRUSTLET_NODE, "c")];
    for (name, change) in &cases {
        for (n, tag) in nodes {
            let mut p = pod_on(c, n, &format!("pf-{name}-{tag}"), script, change);
            p["metadata"]["labels"]["pf"] = json!("1");
            p["spec"]["containers"][0]["command"]
                .as_array_mut()
                .unwrap()
                .push(json!("$(Y)"));
            p["spec"]["containers"][0]["env"] = json!([
                {"name": "X", "value": "$(CMP_SVC_SERVICE_HOST)-x"},
                {"name": "Y", "value": "y:$(X):$(NOPE)"},
            ]);
            apply(c, p);
        }
    }
    let mut diffs = vec![];
    let mut seen = vec![];
    for (name, _) in &cases {
        let mut got = vec![];
        for (_, tag) in nodes {
            let pn = format!("pf-{name}-{tag}");
            let p = wait_pod(c, &pn, "Running", Duration::from_secs(90), running);
            let out = wait_for(&format!("{pn}'s output"), T, |last| {
                let o = run_timeout(&mut c.kubectl(&["-n", c.ns, "logs", &pn]), T);
                *last = s(&o.stdout) + &s(&o.stderr);
                let text = s(&o.stdout);
                text.contains("\ndone\n").then_some(text)
            });
            // What differs by node: the pod's name and address.
            let ip = p["status"]["podIP"].as_str().unwrap_or("-").to_string();
            got.push(out.replace(&pn, "POD").replace(&ip, "POD_IP"));
        }
        if got[0] != got[1] {
            diffs.push(format!(
                "{name}:\n--- kubelet:\n{}--- crustlet:\n{}",
                got[0], got[1]
            ));
        }
        seen.push(got.pop().unwrap());
    }
    kubectl(c, &["delete", "pods", "-l", "pf=1", "--wait=false"]);
    kubectl(c, &["delete", "service", "cmp-svc"]);
    assert!(
        diffs.is_empty(),
        "the crustlet differs from the kubelet:\n{}",
        diffs.join("\n")
    );
    // And what both show is what Kubernetes documents.
    let names = &seen[0];
    for want in [
        "POD_IP\th1.sub.crustlet.svc.cluster.local\th1\n",
        "# Entries added by HostAliases.\n10.9.9.9\ta.example\tb\n",
        "hostname=h1\n",
        "KUBERNETES_SERVICE_PORT=443\n",
        "CMP_SVC_SERVICE_PORT_WEB=80\n",
        "CMP_SVC_PORT_53_UDP_PROTO=udp\n",
    ] {
        assert!(names.contains(want), "no {want:?} in:\n{names}");
    }
    let svc_ip = names
        .lines()
        .find_map(|l| l.strip_prefix("CMP_SVC_SERVICE_HOST="))
        .expect("the service's variables");
    assert!(
        names.contains(&format!("arg0=y:{svc_ip}-x:$(NOPE)\n")),
        "{names}"
    );
    let svc_ip = seen[0]
        .lines()
        .find_map(|l| l.strip_prefix("CMP_SVC_SERVICE_HOST="))
        .unwrap_or("-")
        .to_string();
    let sub_mark = format!("/vol/sub-{svc_ip}-x/mark\n");
    for want in [
        sub_mark.as_str(),
        "/vol=drwxrwsrwx 1234\n",
        "/vol/f=-rw-r--r-- 1234\n",
        "/mem=drwxrwsrwt 1234\n",
        "/mem/f=-rw-r--r-- 1234\n",
    ] {
        assert!(seen[3].contains(want), "no {want:?} in:\n{}", seen[3]);
    }
    let fqdn = &seen[1];
    assert!(
        fqdn.contains("hostname=POD.sub.crustlet.svc.cluster.local\n"),
        "{fqdn}"
    );
    assert!(
        !fqdn.lines().any(|l| l.starts_with("CMP_SVC_")),
        "enableServiceLinks: false\n{fqdn}"
    );
    assert!(fqdn.contains("KUBERNETES_SERVICE_HOST="), "{fqdn}");
    assert!(
        seen[2].starts_with("arg0=")
            && seen[2].contains("# Kubernetes-managed hosts file (host network).\n"),
        "{}",
        seen[2]
    );
}

/// A pod bound to a node by name (past the scheduler) whose host port another pod of
/// the node holds is refused, as the kubelet's port predicate refuses it (Failed,
/// `NodePorts`, nothing run), on the kubelet's node and the crustlet's alike; once the
/// holder is gone the same port is taken again. (A StatefulSet recreates such a pod:
/// `[Conformance]` "Should recreate evicted statefulset".)
pub fn crustlet_host_port_admission(c: &Cluster) {
    let cl = &Crustlet::on_crustd(c);
    let mut seen = vec![];
    for (node, tag, port) in [(NODE, "k", 18285), (CRUSTLET_NODE, "c", 18286)] {
        let bound = |name: &str| {
            let mut p = pod_on(cl, node, name, "exec sleep 3600", |p| {
                p["spec"]["containers"][0]["ports"] =
                    json!([{"containerPort": 8080, "hostPort": port}]);
            });
            p["spec"]["nodeName"] = json!(node);
            p
        };
        let holder = format!("hpa-holder-{tag}");
        apply(c, bound(&holder));
        wait_pod(cl, &holder, "Running", Duration::from_secs(90), running);
        let second = format!("hpa-second-{tag}");
        apply(c, bound(&second));
        let p = wait_pod(cl, &second, "refused", Duration::from_secs(60), |p| {
            p["status"]["phase"] == "Failed"
        });
        assert!(
            p["status"]["containerStatuses"]
                .as_array()
                .is_none_or(|s| s.iter().all(|s| s["state"]["running"].is_null())),
            "{node}: the refused pod ran: {:#}",
            p["status"]
        );
        seen.push((
            p["status"]["reason"].clone(),
            p["status"]["message"].clone(),
        ));
        kubectl(cl, &["delete", "pod", &holder, &second, "--wait=true"]);
        let third = format!("hpa-third-{tag}");
        apply(c, bound(&third));
        wait_pod(cl, &third, "Running", Duration::from_secs(90), running);
        kubectl(cl, &["delete", "pod", &third, "--wait=false"]);
    }
    assert_eq!(seen[0], seen[1], "kubelet, then crustlet");
    assert_eq!(seen[1].0, "NodePorts");
}

/// AppArmor on a node whose kernel has it off (this host's): a pod whose annotation asks
/// for `runtime/default` is held by the kubelet v1.28's soft admission — Pending, reason
/// `AppArmor`, "Cannot enforce AppArmor: AppArmor is not enabled on the host", its
/// container waiting `Blocked`, nothing run — on the kubelet's node and the crustlet's
/// alike; one that asks for `unconfined` runs on both. Neither node's Ready message says
/// "AppArmor enabled". (With AppArmor on, hack/vm-test's systemd boot runs both agents
/// with a localhost profile.)
pub fn crustlet_apparmor_admission(c: &Cluster) {
    let cl = &Crustlet::on_crustd(c);
    let mut seen = vec![];
    for (node, tag) in [(NODE, "k"), (CRUSTLET_NODE, "c")] {
        // The annotation names the container, `c`.
        let annotated = |name: &str, profile: &str| {
            pod_on(cl, node, name, "exec sleep 3600", |p| {
                p["metadata"]["annotations"] =
                    json!({"container.apparmor.security.beta.kubernetes.io/c": profile});
                p["spec"]["containers"][0]["name"] = json!("c");
            })
        };
        let held = format!("aa-held-{tag}");
        apply(c, annotated(&held, "runtime/default"));
        let p = wait_pod(cl, &held, "held", Duration::from_secs(60), |p| {
            p["status"]["reason"] == "AppArmor"
        });
        let st = &p["status"];
        assert_eq!(st["phase"], "Pending", "{node}: {st:#}");
        let waiting = st["containerStatuses"][0]["state"]["waiting"]["reason"].clone();
        assert!(
            st["containerStatuses"][0]["state"]["running"].is_null(),
            "{node}: ran: {st:#}"
        );
        seen.push((st["reason"].clone(), st["message"].clone(), waiting));
        let free = format!("aa-unconfined-{tag}");
        apply(c, annotated(&free, "unconfined"));
        wait_pod(cl, &free, "Running", Duration::from_secs(90), running);
        let ready = kubectl(
            cl,
            &[
                "get",
                "node",
                node,
                "-o",
                "jsonpath={.status.conditions[?(@.type==\"Ready\")].message}",
            ],
        );
        assert_eq!(ready.trim(), "kubelet is posting ready status", "{node}");
        kubectl(cl, &["delete", "pod", &held, &free, "--wait=false"]);
    }
    assert_eq!(seen[0], seen[1], "kubelet, then crustlet");
    assert_eq!(seen[1].0, "AppArmor");
    assert_eq!(
        seen[1].1,
        "Cannot enforce AppArmor: AppArmor is not enabled on the host"
    );
    assert_eq!(seen[1].2, "Blocked");
}

/// PersistentVolumeClaims of the volumes a node mounts without a driver, on the
/// kubelet's node and the crustlet's alike: a `hostPath` and a `local` PersistentVolume
/// (what local-path provisioners make), bound to their claims by the controller
/// manager; the local one gets the pod's fsGroup (group-writable, setgid), the hostPath
/// one does not, and a claim the pod takes `readOnly` is mounted read-only; an `ephemeral`
/// volume's claim (made for the pod by the controller manager) binds a third. Then, on the
/// crustlet alone (the kubelet says only that it timed out, after two minutes): a pod
/// bound past the scheduler to a claim that is not bound waits in ContainerCreating with
/// a FailedMount event saying so, and runs once a volume is bound to the claim.
pub fn crustlet_claimed_volumes_as_kubelet(c: &Cluster) {
    let c = &Crustlet::on_crustd(c);
    let script = "touch /host/h /local/l /eph/e; \
                  for f in /host /local /host/h /local/l /local/seed /eph /eph/e; do \
                  set -- $(ls -ldn $f); echo \"$f=$1 $4\"; done; \
                  touch /ro/x 2>/dev/null && echo ro=writable || echo ro=refused; \
                  echo done; exec sleep 3600";
    let nodes = [(NODE, "k"), (CRUSTLET_NODE, "c")];
    let pv = |name: &str, node: &str, class: &str, source: Value| {
        let mut v = json!({
            "apiVersion": "v1", "kind": "PersistentVolume",
            "metadata": {"name": name, "labels": {"pvc-check": "1"}},
            "spec": {
                "capacity": {"storage": "1Gi"},
                "accessModes": ["ReadWriteOnce"],
                "persistentVolumeReclaimPolicy": "Retain",
                "storageClassName": class,
                "nodeAffinity": {"required": {"nodeSelectorTerms": [{"matchExpressions": [
                    {"key": "kubernetes.io/hostname", "operator": "In", "values": [node]}]}]}},
            },
        });
        for (k, val) in source.as_object().unwrap() {
            v["spec"][k] = val.clone();
        }
        v
    };
    let pvc = |name: &str, volume: Option<&str>| {
        let mut v = json!({
            "apiVersion": "v1", "kind": "PersistentVolumeClaim",
            "metadata": {"name": name, "namespace": c.ns, "labels": {"pvc-check": "1"}},
            "spec": {
                "accessModes": ["ReadWriteOnce"],
                "storageClassName": "crust-manual",
                "resources": {"requests": {"storage": "1Gi"}},
            },
        });
        if let Some(volume) = volume {
            v["spec"]["volumeName"] = json!(volume);
        }
        v
    };
    for (n, tag) in nodes {
        let base = c.path(&format!("{}-pvc-{tag}", c.ns));
        let manual = "crust-manual";
        for (kind, source) in [
            (
                "host",
                json!({"hostPath": {"path": base.join("host"), "type": "Directory"}}),
            ),
            ("local", json!({"local": {"path": base.join("local")}})),
            // A claim of its own: the kubelet never starts a pod naming one claim twice.
            ("ro", json!({"hostPath": {"path": base.join("ro")}})),
        ] {
            std::fs::create_dir_all(base.join(kind)).unwrap();
            let name = format!("{}-{kind}-{tag}", c.ns);
            apply(c, pv(&name, n, manual, source));
            apply(c, pvc(&format!("{kind}-{tag}"), Some(&name)));
        }
        std::fs::write(base.join("local/seed"), "seed").unwrap();
        // For the ephemeral volume's claim, made with the pod.
        std::fs::create_dir_all(base.join("eph")).unwrap();
        let eph_pv = format!("{}-eph-{tag}", c.ns);
        let eph_source = json!({"local": {"path": base.join("eph")}});
        apply(c, pv(&eph_pv, n, &format!("crust-eph-{tag}"), eph_source));
    }
    // Bound by the controller manager before the pods come: the kubelet's first look at
    // an unbound claim costs it minutes.
    let bound = |want: usize| {
        wait_for(&format!("{want} claims bound"), T, |last| {
            let o = run_timeout(
                &mut c.kubectl(&["-n", c.ns, "get", "pv,pvc", "-l", "pvc-check=1"]),
                T,
            );
            *last = s(&o.stdout) + &s(&o.stderr);
            let n = last.lines().filter(|l| l.contains(" Bound ")).count();
            // Each claim and its volume.
            (n >= 2 * want).then_some(())
        })
    };
    bound(6);
    for (n, tag) in nodes {
        let p = pod_on(c, n, &format!("pvc-{tag}"), script, |p| {
            p["spec"]["nodeName"] = json!(n);
            p["spec"]["securityContext"] = json!({"fsGroup": 1234});
            p["spec"]["volumes"] = json!([
                {"name": "host", "persistentVolumeClaim": {"claimName": format!("host-{tag}")}},
                {"name": "local", "persistentVolumeClaim": {"claimName": format!("local-{tag}")}},
                {"name": "ro", "persistentVolumeClaim":
                    {"claimName": format!("ro-{tag}"), "readOnly": true}},
                {"name": "eph", "ephemeral": {"volumeClaimTemplate": {
                    "metadata": {"labels": {"pvc-check": "1"}},
                    "spec": {
                        "accessModes": ["ReadWriteOnce"],
                        "storageClassName": format!("crust-eph-{tag}"),
                        "resources": {"requests": {"storage": "1Gi"}},
                    },
                }}},
            ]);
            p["spec"]["containers"][0]["volumeMounts"] = json!([
                {"name": "host", "mountPath": "/host"},
                {"name": "local", "mountPath": "/local"},
                {"name": "ro", "mountPath": "/ro"},
                {"name": "eph", "mountPath": "/eph"},
            ]);
        });
        apply(c, p);
    }
    let mut got = vec![];
    for (_, tag) in nodes {
        let pn = format!("pvc-{tag}");
        wait_pod(c, &pn, "Running", Duration::from_secs(90), running);
        got.push(wait_for(&format!("{pn}'s output"), T, |last| {
            let o = run_timeout(&mut c.kubectl(&["-n", c.ns, "logs", &pn]), T);
            *last = s(&o.stdout) + &s(&o.stderr) + &pod_events(c, c.ns, &pn);
            let text = s(&o.stdout);
            text.contains("\ndone\n").then_some(text)
        }));
    }
    assert_eq!(
        got[0], got[1],
        "the crustlet differs from the kubelet (kubelet first)"
    );
    for want in [
        "/host=drwxr-xr-x 0\n",
        "/local=drwxrwsr-x 1234\n",
        "/local/l=-rw-r--r-- 1234\n",
        "/local/seed=-rw-rw-r-- 1234\n",
        "/eph=drwxrwsr-x 1234\n",
        "/eph/e=-rw-r--r-- 1234\n",
        "ro=refused\n",
    ] {
        assert!(got[1].contains(want), "no {want:?} in:\n{}", got[1]);
    }

    // What each agent reports of the claimed volumes: the local ones (the kubelet's
    // local plugin measures the volume's filesystem; a hostPath one reports nothing),
    // under the pod's volume name and the claim, in /stats/summary and /metrics. The
    // kubelet measures a new pod's volumes within its minute-long stats period.
    let raw = |node: &str, path: &str| {
        let o = run_timeout(
            &mut c.kubectl(&["get", "--raw", &format!("/api/v1/nodes/{node}/proxy{path}")]),
            T,
        );
        s(&o.stdout) + &s(&o.stderr)
    };
    let claims_seen = |node: &str, tag: &str| {
        let pod = format!("pvc-{tag}");
        let plain = |claim: &str| claim.replace(&format!("-{tag}"), "-X");
        wait_for(
            &format!("{node}'s claimed volumes in its summary and metrics"),
            Duration::from_secs(150),
            |last| {
                let summary = raw(node, "/stats/summary");
                let metrics = raw(node, "/metrics");
                *last = summary.clone();
                let v: Value = serde_json::from_str(&summary).ok()?;
                let p = v["pods"]
                    .as_array()?
                    .iter()
                    .find(|p| p["podRef"]["name"] == pod.as_str())?;
                let mut vols: Vec<String> = p["volume"]
                    .as_array()?
                    .iter()
                    .filter(|v| v["pvcRef"].is_object())
                    .map(|v| {
                        let fields = ["capacityBytes", "availableBytes", "usedBytes", "inodes"]
                            .iter()
                            .filter(|f| v[**f].as_u64().is_some_and(|n| n > 0))
                            .count();
                        format!(
                            "{} claim={} ns={} fields={fields}",
                            v["name"].as_str().unwrap_or(""),
                            plain(v["pvcRef"]["name"].as_str().unwrap_or("")),
                            v["pvcRef"]["namespace"] == c.ns,
                        )
                    })
                    .collect();
                vols.sort();
                let mut series: Vec<String> = metrics
                    .lines()
                    .filter(|l| l.starts_with("kubelet_volume_stats_"))
                    .filter(|l| l.contains(&format!("namespace=\"{}\"", c.ns)))
                    .filter_map(|l| {
                        let (family, rest) = l.split_once('{')?;
                        let claim = rest.split("persistentvolumeclaim=\"").nth(1)?;
                        Some(format!("{family} {}", plain(claim.split('"').next()?)))
                    })
                    .collect();
                series.sort();
                // Both claims' series (the kubelet's collector reads the same cache).
                (vols.len() >= 2 && series.iter().filter(|l| l.contains("used_bytes")).count() >= 2)
                    .then_some((vols, series))
            },
        )
    };
    let k = claims_seen(NODE, "k");
    let cl = claims_seen(CRUSTLET_NODE, "c");
    assert_eq!(
        k, cl,
        "the crustlet's claimed volume stats differ (kubelet first)"
    );
    assert_eq!(
        cl.0,
        [
            "eph claim=pvc-X-eph ns=true fields=4",
            "local claim=local-X ns=true fields=4"
        ],
        "{cl:?}"
    );

    // A claim not bound yet: the pod waits, and runs once it is.
    apply(c, pvc("late", None));
    let late_pv = format!("{}-late", c.ns);
    let late_dir = c.path(&format!("{}-pvc-late", c.ns));
    std::fs::create_dir_all(&late_dir).unwrap();
    let p = pod_on(
        c,
        CRUSTLET_NODE,
        "pvc-late",
        "echo done; exec sleep 3600",
        |p| {
            p["spec"]["nodeName"] = json!(CRUSTLET_NODE);
            p["spec"]["volumes"] =
                json!([{"name": "data", "persistentVolumeClaim": {"claimName": "late"}}]);
            p["spec"]["containers"][0]["volumeMounts"] =
                json!([{"name": "data", "mountPath": "/data"}]);
        },
    );
    apply(c, p);
    wait_event(
        c,
        "pvc-late",
        "FailedMount",
        &format!("error processing PVC {}/late: PVC is not bound", c.ns),
    );
    let p = wait_pod(c, "pvc-late", "waiting", T, |p| {
        p["status"]["containerStatuses"][0]["state"]["waiting"]["reason"] == "ContainerCreating"
    });
    assert_eq!(p["status"]["phase"], "Pending", "{p:#}");
    let late_source = json!({"local": {"path": late_dir}});
    let mut v = pv(&late_pv, CRUSTLET_NODE, "crust-manual", late_source);
    v["spec"]["claimRef"] = json!({"namespace": c.ns, "name": "late"});
    apply(c, v);
    wait_pod(c, "pvc-late", "Running", Duration::from_secs(90), running);

    // A volume that needs a driver the node lacks (NFS): refused by name, not mounted.
    let nfs_pv = format!("{}-nfs", c.ns);
    let nfs_source = json!({"nfs": {"server": "127.0.0.1", "path": "/nowhere"}});
    apply(c, pv(&nfs_pv, CRUSTLET_NODE, "crust-manual", nfs_source));
    apply(c, pvc("nfs", Some(&nfs_pv)));
    // Every claim so far: three per node, two ephemeral, the late one and this.
    bound(10);
    let p = pod_on(c, CRUSTLET_NODE, "pvc-nfs", "exec sleep 3600", |p| {
        p["spec"]["nodeName"] = json!(CRUSTLET_NODE);
        p["spec"]["volumes"] =
            json!([{"name": "data", "persistentVolumeClaim": {"claimName": "nfs"}}]);
        p["spec"]["containers"][0]["volumeMounts"] =
            json!([{"name": "data", "mountPath": "/data"}]);
    });
    apply(c, p);
    wait_event(
        c,
        "pvc-nfs",
        "FailedMount",
        &format!(
            "PV \"{nfs_pv}\": only hostPath and local PersistentVolumes can be mounted by \
             crust (others need an attacher or a CSI driver)"
        ),
    );

    kubectl(
        c,
        &[
            "delete",
            "pods",
            "pvc-k",
            "pvc-c",
            "pvc-late",
            "pvc-nfs",
            "--wait=true",
        ],
    );
    kubectl(c, &["delete", "pvc", "-l", "pvc-check=1", "--wait=false"]);
    kubectl(c, &["delete", "pv", "-l", "pvc-check=1", "--wait=false"]);
}
