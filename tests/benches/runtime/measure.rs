//! The measurement: one pod's way up and down, call by call, in phases; the memory with
//! the pods up; crustd's CNI ADD from its phases; the server-side times from the logs.

use super::*;

// ---------------------------------------------------------------------------------
// One pod's way up and down

#[derive(Default, Clone)]
pub(crate) struct Times {
    pub(crate) run: Vec<Duration>,
    pub(crate) create: Vec<Duration>,
    pub(crate) start: Vec<Duration>,
    pub(crate) create_start: Vec<Duration>,
    pub(crate) exec: Vec<Duration>,
    pub(crate) stop: Vec<Duration>,
    pub(crate) remove: Vec<Duration>,
    pub(crate) wall: Duration,
    pub(crate) pods: usize,
    /// Server side, from the daemon's log over the phase: the calls of `SERVER_RPCS`.
    pub(crate) server: HashMap<&'static str, Vec<Duration>>,
}

/// The calls timed server side too, in the table's order.
pub(crate) const SERVER_RPCS: [&str; 6] = [
    "RunPodSandbox",
    "CreateContainer",
    "StartContainer",
    "ExecSync",
    "StopPodSandbox",
    "RemovePodSandbox",
];

pub(crate) struct Up {
    pub(crate) id: String,
    pub(crate) uid: String,
}

async fn up(row: &Row, node: &Node, name: &str, times: &Mutex<Times>) -> Result<Up, String> {
    let uid = format!("{:08x}-bench-{name}", crc(name));
    make_pod_cgroup(row, &uid)?;
    let files = pod_files(row, name, &uid);
    let config = pod_config(row, name, &uid, &files);
    let mut c = row.client.clone();
    let t0 = Instant::now();
    let id = rpc(
        "RunPodSandbox",
        c.run_pod_sandbox(RunPodSandboxRequest {
            config: Some(config.clone()),
            runtime_handler: String::new(),
        }),
    )
    .await?
    .pod_sandbox_id;
    let t1 = Instant::now();
    if let Some(ids) = &row.pod_ids {
        ids.lock().unwrap().push(id.clone());
    }
    let ctr = rpc(
        "CreateContainer",
        c.create_container(CreateContainerRequest {
            pod_sandbox_id: id.clone(),
            config: Some(container_config(node, name, &uid, &files)),
            sandbox_config: Some(config),
        }),
    )
    .await?
    .container_id;
    let t2 = Instant::now();
    rpc(
        "StartContainer",
        c.start_container(StartContainerRequest {
            container_id: ctr.clone(),
        }),
    )
    .await?;
    let t3 = Instant::now();
    let r = rpc(
        "ExecSync",
        c.exec_sync(ExecSyncRequest {
            container_id: ctr,
            cmd: vec!["true".into()],
            timeout: 10,
        }),
    )
    .await?;
    let t4 = Instant::now();
    if r.exit_code != 0 {
        return Err(format!("ExecSync true in {name} exited {}", r.exit_code));
    }
    let mut t = times.lock().unwrap();
    t.run.push(t1 - t0);
    t.create.push(t2 - t1);
    t.start.push(t3 - t2);
    t.create_start.push(t3 - t1);
    t.exec.push(t4 - t3);
    Ok(Up { id, uid })
}

async fn down(row: &Row, pod: &Up, times: &Mutex<Times>) -> Result<(), String> {
    let mut c = row.client.clone();
    let t0 = Instant::now();
    rpc(
        "StopPodSandbox",
        c.stop_pod_sandbox(StopPodSandboxRequest {
            pod_sandbox_id: pod.id.clone(),
        }),
    )
    .await?;
    let t1 = Instant::now();
    rpc(
        "RemovePodSandbox",
        c.remove_pod_sandbox(RemovePodSandboxRequest {
            pod_sandbox_id: pod.id.clone(),
        }),
    )
    .await?;
    let t2 = Instant::now();
    remove_cgroup(&row.cgroups, &pod_cgroup(row, &pod.uid));
    let _ = std::fs::remove_dir_all(row.kubelet.join(&pod.uid));
    let mut t = times.lock().unwrap();
    t.stop.push(t1 - t0);
    t.remove.push(t2 - t1);
    Ok(())
}

/// A name's short hash, for a uid that looks like one.
fn crc(s: &str) -> u32 {
    s.bytes()
        .fold(2166136261u32, |h, b| (h ^ b as u32).wrapping_mul(16777619))
}

/// `names` up with `par` in flight; the pods in the order of `names`.
pub(crate) async fn up_all(
    row: &Arc<Row>,
    node: &Arc<Node>,
    names: Vec<String>,
    par: usize,
    times: &Arc<Mutex<Times>>,
) -> Result<Vec<Up>, String> {
    let n = names.len();
    let out: Arc<Mutex<Vec<Option<Up>>>> = Arc::new(Mutex::new((0..n).map(|_| None).collect()));
    let (r, nd, t, o, names) = (
        row.clone(),
        node.clone(),
        times.clone(),
        out.clone(),
        Arc::new(names),
    );
    let (_, wall) = phase(n, par, move |i| {
        let (r, nd, t, o, names) = (r.clone(), nd.clone(), t.clone(), o.clone(), names.clone());
        async move {
            let pod = up(&r, &nd, &names[i], &t).await?;
            o.lock().unwrap()[i] = Some(pod);
            Ok(Duration::ZERO)
        }
    })
    .await?;
    times.lock().unwrap().wall += wall;
    let pods = std::mem::take(&mut *out.lock().unwrap());
    Ok(pods.into_iter().flatten().collect())
}

pub(crate) async fn down_all(
    row: &Arc<Row>,
    pods: Vec<Up>,
    par: usize,
    times: &Arc<Mutex<Times>>,
) -> Result<(), String> {
    let n = pods.len();
    let (r, t, pods) = (row.clone(), times.clone(), Arc::new(pods));
    let (_, wall) = phase(n, par, move |i| {
        let (r, t, pods) = (r.clone(), t.clone(), pods.clone());
        async move {
            down(&r, &pods[i], &t).await?;
            Ok(Duration::ZERO)
        }
    })
    .await?;
    let mut t = times.lock().unwrap();
    t.wall += wall;
    t.pods += n;
    Ok(())
}

// ---------------------------------------------------------------------------------
// Memory

#[derive(Default, Clone, Copy)]
pub(crate) struct PodMem {
    pub(crate) daemon: Mem,
    /// Median per pod: pause + the container's monitor, or shim + pause.
    pub(crate) per_pod: Mem,
    /// Distinct per-pod processes seen (shims or monitors) and pods.
    pub(crate) parents: usize,
    pub(crate) pods: usize,
}

pub(crate) async fn measure(row: &Row, pods: &[Up]) -> Result<PodMem, String> {
    // Let the processes settle (a shim's or monitor's first page faults).
    tokio::time::sleep(Duration::from_millis(500)).await;
    let mut c = row.client.clone();
    let mut per_pod = Vec::new();
    let mut parents_seen = BTreeSet::new();
    for p in pods {
        let st = rpc(
            "PodSandboxStatus",
            c.pod_sandbox_status(PodSandboxStatusRequest {
                pod_sandbox_id: p.id.clone(),
                verbose: true,
            }),
        )
        .await?;
        let pause = info_pid(&st.info, &format!("sandbox {}", p.id))?;
        let mut procs = BTreeSet::from([pause]);
        if let Some(pp) = ppid_of(pause).filter(|pp| comm_of(*pp).starts_with("containerd-shim")) {
            procs.insert(pp);
            parents_seen.insert(pp);
        }
        let list = rpc(
            "ListContainers",
            c.list_containers(ListContainersRequest {
                filter: Some(ContainerFilter {
                    pod_sandbox_id: p.id.clone(),
                    ..Default::default()
                }),
            }),
        )
        .await?;
        for ctr in list.containers {
            let st = rpc(
                "ContainerStatus",
                c.container_status(ContainerStatusRequest {
                    container_id: ctr.id.clone(),
                    verbose: true,
                }),
            )
            .await?;
            let pid = info_pid(&st.info, &format!("container {}", ctr.id))?;
            let parent = ppid_of(pid).ok_or_else(|| format!("no parent of {pid}"))?;
            if parent != row.daemon_pid {
                procs.insert(parent);
                parents_seen.insert(parent);
            }
        }
        let m = procs
            .iter()
            .map(|p| mem_of(*p).ok_or_else(|| format!("process {p} is gone")))
            .try_fold(Mem::default(), |a, m| m.map(|m| a + m))?;
        per_pod.push(m);
    }
    Ok(PodMem {
        daemon: mem_of(row.daemon_pid).unwrap_or_default(),
        per_pod: median_mem(&per_pod),
        parents: parents_seen.len(),
        pods: pods.len(),
    })
}

// ---------------------------------------------------------------------------------
// crustd's "run phases" lines: the CNI ADD of each sandbox

/// A `Duration`'s Debug text (`12.3ms`, `950µs`, `1.2s`), in ms.
fn parse_debug_ms(s: &str) -> Option<f64> {
    let s = s.trim_matches(|c| c == '"' || c == ',');
    for (unit, f) in [
        ("ns", 1e-6),
        ("µs", 1e-3),
        ("us", 1e-3),
        ("ms", 1.0),
        ("s", 1000.0),
    ] {
        if let Some(v) = s.strip_suffix(unit) {
            return v.parse::<f64>().ok().map(|v| v * f);
        }
    }
    None
}

/// `s` without its terminal colour sequences (`ESC [ ... m`).
fn strip_ansi(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut it = s.chars();
    while let Some(c) = it.next() {
        if c == '\u{1b}' {
            for d in it.by_ref() {
                if d.is_ascii_alphabetic() {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

/// Median ADD (`t_cni - t_saved`) over the sandboxes `ids` in crustd's log, in ms.
pub(crate) fn cni_add_ms(log: &Path, ids: &BTreeSet<String>) -> Option<f64> {
    let text = strip_ansi(&std::fs::read_to_string(log).ok()?);
    let mut v: Vec<f64> = text
        .lines()
        .filter(|l| l.contains("run phases"))
        .filter_map(|l| {
            let field = |k: &str| {
                l.split_whitespace()
                    .find_map(|w| w.strip_prefix(&format!("{k}=")))
                    .map(|v| v.trim_matches('"').to_string())
            };
            let id = field("sandbox")?;
            if !ids.contains(&id) {
                return None;
            }
            Some(parse_debug_ms(&field("t_cni")?)? - parse_debug_ms(&field("t_saved")?)?)
        })
        .collect();
    if v.is_empty() {
        return None;
    }
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    Some(v[v.len() / 2])
}

// ---------------------------------------------------------------------------------
// Server-side times from the daemons' logs

/// The log's length now: where a phase's lines start.
pub(crate) fn log_len(log: Option<&Path>) -> u64 {
    log.and_then(|l| std::fs::metadata(l).ok())
        .map_or(0, |m| m.len())
}

/// The log's text from byte `from` on.
pub(crate) fn log_since(log: Option<&Path>, from: u64) -> String {
    let bytes = log.and_then(|l| std::fs::read(l).ok()).unwrap_or_default();
    strip_ansi(&String::from_utf8_lossy(
        bytes.get(from as usize..).unwrap_or_default(),
    ))
}

/// crustd's `ok rpc="X" id=.. ms=..` lines: each call's duration as the service timed it.
pub(crate) fn crustd_server_times(text: &str) -> HashMap<&'static str, Vec<Duration>> {
    let mut out: HashMap<&'static str, Vec<Duration>> = HashMap::new();
    for l in text.lines().filter(|l| l.contains(" ok ")) {
        let field = |k: &str| {
            l.split_whitespace()
                .find_map(|w| w.strip_prefix(&format!("{k}=")))
                .map(|v| v.trim_matches('"').to_string())
        };
        let (Some(rpc), Some(ms)) = (field("rpc"), field("ms")) else {
            continue;
        };
        let (Some(rpc), Ok(ms)) = (SERVER_RPCS.iter().find(|r| **r == rpc), ms.parse::<f64>())
        else {
            continue;
        };
        out.entry(*rpc)
            .or_default()
            .push(Duration::from_secs_f64(ms / 1000.0));
    }
    out
}

/// A logrus `time="2026-11-26T16:00:17.123456789Z"` as ms since the epoch (the zone is
/// ignored: every line of one log has the same).
fn logrus_ms(line: &str) -> Option<f64> {
    let t = line.split("time=\"").nth(1)?;
    let num = |a: usize, b: usize| t.get(a..b)?.parse::<i64>().ok();
    let (y, mo, d) = (num(0, 4)?, num(5, 7)?, num(8, 10)?);
    let (h, mi) = (num(11, 13)?, num(14, 16)?);
    let end = t[17..].find(|c: char| !(c.is_ascii_digit() || c == '.'))? + 17;
    let sec: f64 = t[17..end].parse().ok()?;
    // Days from the civil date (Howard Hinnant's days_from_civil).
    let y = if mo <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let doy = (153 * ((mo + 9) % 12) + 2) / 5 + d - 1;
    let days = era * 146097 + yoe * 365 + yoe / 4 - yoe / 100 + doy - 719468;
    Some(((days * 24 + h) * 60 + mi) as f64 * 60_000.0 + sec * 1000.0)
}

/// containerd's CRI start and end lines, paired by the call's key: the RPC name and
/// the sandbox metadata (RunPodSandbox), else the first quoted id of the message.
pub(crate) fn containerd_server_times(text: &str) -> HashMap<&'static str, Vec<Duration>> {
    let mut open: HashMap<(&'static str, String), f64> = HashMap::new();
    let mut out: HashMap<&'static str, Vec<Duration>> = HashMap::new();
    for l in text.lines() {
        let Some(msg) = l.split(" msg=\"").nth(1) else {
            continue;
        };
        let msg = msg.replace("\\\"", "\"");
        let Some(rpc) = SERVER_RPCS
            .iter()
            .find(|r| msg.starts_with(&format!("{r} ")))
        else {
            continue;
        };
        let key = if *rpc == "RunPodSandbox" {
            msg.split("Name:").nth(1).and_then(|m| m.split(',').next())
        } else {
            msg.split('"').nth(1)
        };
        let (Some(key), Some(t)) = (key, logrus_ms(l)) else {
            continue;
        };
        let key = (*rpc, key.to_string());
        if msg.contains(" returns ") {
            if let Some(t0) = open.remove(&key) {
                out.entry(*rpc)
                    .or_default()
                    .push(Duration::from_secs_f64((t - t0).max(0.0) / 1000.0));
            }
        } else if !msg.contains(" failed") {
            open.insert(key, t);
        }
    }
    out
}

/// crustd's phase lines (`run phases`, `create phases`, ...), each step's own time.
pub(crate) const PHASE_LINES: [&str; 8] = [
    "run phases",
    "create phases",
    "create steps",
    "exec phases",
    "exec steps",
    "stop phases",
    "stop work phases",
    "remove phases",
];

/// Per phase line: its steps in the order logged, and for each the step's own time in
/// ms (the cumulative `t_x` less the step before), one value per call.
pub(crate) type Phases = Vec<(&'static str, Vec<(String, Vec<f64>)>)>;

/// The phase lines of `text` (crustd's log at debug).
pub(crate) fn crustd_phases(text: &str) -> Phases {
    let mut out: Phases = PHASE_LINES.iter().map(|k| (*k, Vec::new())).collect();
    for l in text.lines() {
        let Some(slot) = out.iter_mut().find(|(k, _)| {
            l.split_once(k)
                .is_some_and(|(before, _)| before.is_empty() || before.ends_with(' '))
        }) else {
            continue;
        };
        let mut prev = 0.0;
        for w in l.split_whitespace() {
            let Some((name, v)) = w.split_once('=') else {
                continue;
            };
            if !name.starts_with("t_") {
                continue;
            }
            let Some(ms) = parse_debug_ms(v) else {
                continue;
            };
            let step = (ms - prev).max(0.0);
            prev = ms;
            match slot.1.iter_mut().find(|(n, _)| n == name) {
                Some((_, vs)) => vs.push(step),
                None => slot.1.push((name.to_string(), vec![step])),
            }
        }
    }
    out
}
