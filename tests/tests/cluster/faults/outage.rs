//! The control plane gone for a minute (an upgrade of the apiserver), on both nodes at
//! once: the one apiserver serves them both.

use super::*;

/// How long the apiserver is down: longer than the controller-manager's 40 s grace for
/// a node's Lease, as an upgrade of the control plane takes.
const OUTAGE: Duration = Duration::from_secs(60);

/// What a side had before the outage.
struct Before<'a> {
    run: (String, u64),
    exits: String,
    never: String,
    live: String,
    syns: Option<SynCount<'a>>,
    cpu: f64,
}

/// `f` on each side still in the check (its state `Ok`), both at once; a panic is that
/// side's failure. `None` for a side already out.
fn on_both<'a, T: Send>(
    sides: &[Side<'a>; 2],
    st: &[Result<Before<'a>, String>],
    f: fn(&Side, &Before) -> T,
) -> Vec<Option<Result<T, String>>> {
    std::thread::scope(|sc| {
        let hs: Vec<_> = sides
            .iter()
            .zip(st.iter())
            .map(|(side, b)| {
                sc.spawn(move || match b {
                    Ok(b) => Some(attempt(|| f(side, b))),
                    Err(_) => None,
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    })
}

fn attempt<T>(f: impl FnOnce() -> T) -> Result<T, String> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).map_err(|e| panic_text(&*e))
}

/// The running containers of pod `name` on this side's runtime.
fn running_ids(side: &Side, name: &str) -> Vec<String> {
    let pod = format!("io.kubernetes.pod.name={name}");
    let ns = format!("io.kubernetes.pod.namespace={}", side.ns);
    let v = side.crictl_json(&["ps", "-o", "json", "--label", &pod, "--label", &ns]);
    v["containers"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|c| c["id"].as_str().map(str::to_string))
        .collect()
}

fn lease(side: &Side) -> String {
    let out = run_timeout(
        &mut side.c.kubectl(&[
            "-n",
            "kube-node-lease",
            "get",
            "lease",
            side.node,
            "-o",
            "jsonpath={.spec.renewTime}",
        ]),
        Duration::from_secs(10),
    );
    s(&out.stdout).trim().to_string()
}

/// Now, as the Lease's renewTime writes it to the second (`2026-11-30T19:12:03`).
fn utc_now() -> String {
    let out = Command::new("date")
        .args(["-u", "+%Y-%m-%dT%H:%M:%S"])
        .output()
        .expect("date");
    s(&out.stdout).trim().to_string()
}

fn restarts(p: &Value) -> u64 {
    main_status(p)["restartCount"].as_u64().unwrap_or(0)
}

/// Pods of every kind a node looks after, running; then, just before the outage, a
/// deletion asked (of a container that ignores SIGTERM: it ends only at its 20 s
/// grace, in the outage) and a new pod.
fn prepare<'a>(side: &Side<'a>) -> Before<'a> {
    let mut live = side.pod("o-live", "exec sleep 3600");
    live["spec"]["containers"][0]["livenessProbe"] = json!({
        "exec": {"command": ["sh", "-c", "test ! -e /tmp/bad"]},
        "periodSeconds": 2,
        "failureThreshold": 1,
    });
    let mut never = side.pod("o-never", "until test -e /tmp/go; do sleep 0.2; done");
    never["spec"]["restartPolicy"] = json!("Never");
    let mut doomed = side.pod("o-doomed", "trap '' TERM; sleep 3600 & wait; sleep 3600");
    doomed["spec"]["terminationGracePeriodSeconds"] = json!(20);
    side.apply(vec![
        side.pod("o-run", "exec sleep 3600"),
        side.pod(
            "o-exits",
            "until test -e /tmp/go; do sleep 0.2; done; exit 3",
        ),
        never,
        live,
        doomed,
    ]);
    let run = side.wait_running("o-run");
    let before = Before {
        run: (container_id(&run), restarts(&run)),
        exits: container_id(&side.wait_running("o-exits")),
        never: container_id(&side.wait_running("o-never")),
        live: container_id(&side.wait_running("o-live")),
        syns: None,
        cpu: 0.0,
    };
    side.wait_running("o-doomed");
    side.ok(&["delete", "pod", "o-doomed", "--wait=false"]);
    side.apply(vec![side.pod("o-new", "exec sleep 3600")]);
    before
}

/// In the outage: the node looks after its pods by itself (a container that exits is
/// started again, a failing liveness probe restarts its container, the pod that ran to
/// its end stays ended, the deletion asked before goes on).
fn during(side: &Side, b: &Before) -> String {
    for id in [&b.exits, &b.never] {
        assert!(
            run_timeout(&mut side.crictl(&["exec", id, "touch", "/tmp/go"]), T)
                .status
                .success(),
            "{}: exec in {id}",
            side.name
        );
    }
    assert!(
        run_timeout(&mut side.crictl(&["exec", &b.live, "touch", "/tmp/bad"]), T)
            .status
            .success(),
        "{}: exec in o-live",
        side.name
    );
    let t = Instant::now();
    wait_for(
        &format!(
            "{}: the node looking after its pods without the apiserver",
            side.name
        ),
        Duration::from_secs(45),
        |last| {
            let exits = running_ids(side, "o-exits");
            let live = running_ids(side, "o-live");
            let never = running_ids(side, "o-never");
            let doomed = running_ids(side, "o-doomed");
            *last = format!(
                "o-exits {exits:?}, o-live {live:?}, o-never {never:?}, o-doomed {doomed:?}"
            );
            (exits.len() == 1
                && exits[0] != b.exits
                && live.len() == 1
                && live[0] != b.live
                && never.is_empty()
                && doomed.is_empty())
            .then_some(())
        },
    );
    assert_eq!(
        running_ids(side, "o-run"),
        std::slice::from_ref(&b.run.0),
        "{}: o-run",
        side.name
    );
    format!("{:.0} s", t.elapsed().as_secs_f64())
}

/// Once it is back: what happened in the outage is in the API, the deletion finished,
/// the new pod runs once, the pod from before was never restarted.
fn after(side: &Side, b: &Before) {
    let p = side.wait_pod("o-exits", "restarted after exiting 3", |p| {
        running(p) && restarts(p) >= 1 && main_status(p)["lastState"]["terminated"]["exitCode"] == 3
    });
    assert_ne!(container_id(&p), b.exits, "{}", side.name);
    side.wait_pod("o-live", "restarted by its liveness probe", |p| {
        running(p) && restarts(p) >= 1
    });
    let p = side.wait_pod("o-never", "Succeeded", |p| {
        p["status"]["phase"] == "Succeeded"
    });
    assert_eq!(
        main_status(&p)["state"]["terminated"]["exitCode"],
        0,
        "{}",
        side.name
    );
    side.wait_gone("o-doomed");
    side.wait_running("o-new");
    let p = side.wait_pod("o-run", "Ready", |p| {
        running(p)
            && p["status"]["conditions"]
                .as_array()
                .into_iter()
                .flatten()
                .any(|c| c["type"] == "Ready" && c["status"] == "True")
    });
    assert_eq!(
        (container_id(&p), restarts(&p)),
        b.run,
        "{}: o-run restarted",
        side.name
    );
    wait_for(
        &format!("{}: o-doomed gone from the runtime", side.name),
        T,
        |last| {
            let rt = side.runtime_pods();
            *last = format!("{rt:?}");
            (!rt.contains_key("o-doomed")
                && rt
                    .get("o-new")
                    .is_some_and(|p| p.sandboxes == 1 && p.containers.len() == 1))
            .then_some(())
        },
    );
}

/// The kube-apiserver stopped for a minute while pods run, one is being deleted and
/// one was just created; started again. Checks what each node does by itself in the
/// outage, how hard its agent knocks at the closed port (connections it opens, CPU),
/// how soon its Lease resumes and whether the Node went NotReady, and that every
/// status and deletion it could not send arrives after.
pub(crate) fn apiserver_outage(sides: [Side; 2]) -> Vec<(Side, String)> {
    let c = sides[0].c;
    let mut st: Vec<Result<Before<'_>, String>> =
        sides.iter().map(|side| attempt(|| prepare(side))).collect();
    for (side, b) in sides.iter().zip(st.iter_mut()) {
        if let Ok(before) = b {
            match attempt(|| SynCount::start(side)) {
                Ok(n) => before.syns = Some(n),
                Err(e) => *b = Err(e),
            }
        }
    }
    // The deletion and the new pod reach the agents' watches.
    std::thread::sleep(Duration::from_secs(3));
    c.stop_apiserver();
    let down = Instant::now();
    for (side, b) in sides.iter().zip(st.iter_mut()) {
        if let Ok(b) = b {
            b.cpu = side.agent_pid().and_then(cpu_seconds).unwrap_or(0.0);
        }
    }
    let mut syns0 = [0u64; 2];
    for (i, b) in st.iter().enumerate() {
        if let Ok(Before { syns: Some(n), .. }) = b {
            syns0[i] = n.read();
        }
    }
    let results = on_both(&sides, &st, during);
    for (i, r) in results.into_iter().enumerate() {
        match r {
            Some(Ok(took)) => figure(
                &sides[i],
                "apiserver_outage",
                format!("without the apiserver: restarts, probe, deletion done in {took}"),
            ),
            Some(Err(e)) => st[i] = Err(e),
            None => {}
        }
    }
    std::thread::sleep(OUTAGE.saturating_sub(down.elapsed()));
    let outage = down.elapsed().as_secs_f64();
    let mut hot = vec![];
    for (i, (side, b)) in sides.iter().zip(st.iter()).enumerate() {
        if let Ok(b) = b {
            let cpu = side.agent_pid().and_then(cpu_seconds).unwrap_or(0.0) - b.cpu;
            let syns = b.syns.as_ref().map(|n| n.read().saturating_sub(syns0[i]));
            figure(
                side,
                "apiserver_outage",
                format!(
                    "in {outage:.0} s down: the agent opened {} connections to the apiserver, used {cpu:.2} s CPU",
                    syns.map_or("?".into(), |n| n.to_string())
                ),
            );
            if side.crust {
                // The kubelet opens some 175 (its watches, Lease, node status, status
                // manager and events backing off); a status retried every second per
                // pod made the crustlet's 277, and a hot loop would be thousands.
                if let Some(n) = syns {
                    if n > 200 {
                        hot.push((i, format!("{n} connections in {outage:.0} s: no back-off")));
                    }
                }
            }
        }
    }
    for (i, e) in hot {
        st[i] = Err(e);
    }
    c.start_apiserver();
    let up = Instant::now();
    let up_utc = utc_now();
    // The Lease and the Ready condition, both nodes, every second for 40 s.
    let mut renewed: [Option<f64>; 2] = [None; 2];
    let mut not_ready = [0u32; 2];
    while up.elapsed() < Duration::from_secs(40) {
        for (i, (side, b)) in sides.iter().zip(st.iter()).enumerate() {
            if b.is_err() {
                continue;
            }
            if renewed[i].is_none() {
                // RFC 3339 in UTC, to the second: compared as text.
                let l = lease(side);
                if l.len() >= 19 && l[..19] >= up_utc[..] {
                    renewed[i] = Some(up.elapsed().as_secs_f64());
                }
            }
            let r = side.ready();
            if !r.is_empty() && r != "True" {
                not_ready[i] += 1;
            }
        }
        std::thread::sleep(Duration::from_secs(1));
    }
    for (i, side) in sides.iter().enumerate() {
        if st[i].is_err() {
            continue;
        }
        figure(
            side,
            "apiserver_outage",
            format!(
                "Lease renewed {} after the apiserver was back; the Node seen not Ready {} times in the 40 s after",
                renewed[i].map_or("not within 40 s".into(), |t| format!("{t:.0} s")),
                not_ready[i]
            ),
        );
        if renewed[i].is_none() {
            st[i] = Err("the Lease not renewed within 40 s of the apiserver's return".into());
        }
    }
    for (i, r) in on_both(&sides, &st, after).into_iter().enumerate() {
        if let Some(Err(e)) = r {
            st[i] = Err(e);
        }
    }
    sides
        .into_iter()
        .zip(st)
        .filter_map(|(side, b)| b.err().map(|e| (side, e)))
        .collect()
}

/// Counts the TCP connections a node agent opens to the apiserver's port (its SYNs),
/// with an iptables rule matching its cgroup v2 path: the agent is moved into a group
/// of its own on the unified hierarchy (which has no controllers on a hybrid host, so
/// nothing about the agent changes but its path). The rule has no target: it counts.
pub(crate) struct SynCount<'a> {
    c: &'a Cluster,
    group: std::path::PathBuf,
    rule: Vec<String>,
}

impl<'a> SynCount<'a> {
    pub(crate) fn start(side: &Side<'a>) -> SynCount<'a> {
        let mount = cgroup2_mount().expect("a cgroup v2 hierarchy to count connections in");
        let name = format!("crust-{}", side.ns);
        let group = mount.join(&name);
        let _ = std::fs::create_dir(&group);
        let pid = side.agent_pid().expect("the agent runs");
        std::fs::write(group.join("cgroup.procs"), pid.to_string())
            .unwrap_or_else(|e| panic!("{}: moving the agent to {group:?}: {e}", side.name));
        let rule: Vec<String> = [
            "OUTPUT",
            "-p",
            "tcp",
            "--dport",
            "6443",
            "--tcp-flags",
            "SYN,ACK,FIN,RST",
            "SYN",
            "-m",
            "cgroup",
            "--path",
            &format!("/{name}"),
            "-m",
            "comment",
            "--comment",
            &name,
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        // The agents' network namespace: the node's.
        let ok = side
            .c
            .net_cmd("iptables")
            .args(["-w", "-I"])
            .args(&rule)
            .status()
            .is_ok_and(|s| s.success());
        assert!(ok, "{}: iptables cgroup match", side.name);
        SynCount {
            c: side.c,
            group,
            rule,
        }
    }

    pub(crate) fn read(&self) -> u64 {
        let out = self
            .c
            .net_cmd("iptables")
            .args(["-w", "-L", "OUTPUT", "-v", "-n", "-x"])
            .output()
            .expect("iptables");
        let comment = &self.rule[self.rule.len() - 1];
        s(&out.stdout)
            .lines()
            .find(|l| l.contains(&format!("/* {comment} */")))
            .and_then(|l| l.split_whitespace().next()?.parse().ok())
            .expect("the counting rule")
    }
}

impl Drop for SynCount<'_> {
    fn drop(&mut self) {
        let _ = self
            .c
            .net_cmd("iptables")
            .args(["-w", "-D"])
            .args(&self.rule)
            .status();
        if let Some(root) = self.group.parent() {
            let procs =
                std::fs::read_to_string(self.group.join("cgroup.procs")).unwrap_or_default();
            for pid in procs.lines() {
                let _ = std::fs::write(root.join("cgroup.procs"), pid);
            }
        }
        let _ = std::fs::remove_dir(&self.group);
    }
}

/// Where the cgroup v2 hierarchy is mounted (the unified tree of a hybrid host, or the
/// only one).
fn cgroup2_mount() -> Option<std::path::PathBuf> {
    let mounts = std::fs::read_to_string("/proc/self/mounts").ok()?;
    mounts.lines().find_map(|l| {
        let f: Vec<&str> = l.split_whitespace().collect();
        (f.len() > 2 && f[2] == "cgroup2").then(|| std::path::PathBuf::from(f[1]))
    })
}
