//! A container flooding its log.

use super::*;

/// A container writing its log as fast as it can for 25 s, with both agents rotating at
/// 1 MiB keeping 3 files: the log stays bounded (at most 3 files once rotated), `kubectl
/// logs` and `logs -f` keep working through the rotations, and the CPU and memory of the
/// runtime's process for the container (crust's monitor, containerd's shim), of the
/// runtime and of the agent are measured, with how long another pod takes to start.
pub(crate) fn log_flood(side: &Side) {
    // A quiet pod's start, then one during the flood.
    let quiet_start = time_pod_start(side, "lf-quiet");
    let line = "flood ".repeat(16);
    side.apply(vec![side.pod("lf-flood", &format!("exec yes '{line}'"))]);
    let p = side.wait_running("lf-flood");
    let id = container_id(&p);
    let info = side.crictl_json(&["inspect", &id]);
    let pid = info["info"]["pid"].as_u64().expect("the container's pid") as u32;
    let log_path = info["status"]["logPath"].as_str().unwrap().to_string();
    let monitor = parent_of(pid).expect("the container's parent");
    let agent = side.agent_pid().unwrap();
    let runtime = side.runtime_pid().unwrap();
    // The log as the node sees it (the agents run in the node's mount namespace).
    let log = std::path::PathBuf::from(format!("/proc/{agent}/root{log_path}"));
    let dir = log.parent().unwrap().to_path_buf();
    let cpu0 = [monitor, runtime, agent].map(|p| cpu_seconds(p).unwrap_or(0.0));
    // Who writes the log file: crust's monitor itself; under containerd, the shim
    // copies the container's output into a FIFO that containerd writes to the file.
    let writer = if side.crust { monitor } else { runtime };
    let written0 = written(writer);

    // `kubectl logs -f` through the flood: bytes read, and when the last came.
    let follow_bytes = Arc::new(AtomicU64::new(0));
    let mut follow = side
        .kubectl(&["logs", "-f", "lf-flood", "--tail=1"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let reader = {
        let mut out = follow.stdout.take().unwrap();
        let n = follow_bytes.clone();
        std::thread::spawn(move || {
            let mut buf = vec![0u8; 1 << 16];
            while let Ok(k) = out.read(&mut buf) {
                if k == 0 {
                    break;
                }
                n.fetch_add(k as u64, Ordering::Relaxed);
            }
        })
    };
    let t = Instant::now();
    let mut max_bytes = 0u64;
    let mut max_files = 0usize;
    let mut rotations_seen = std::collections::BTreeSet::new();
    let mut during_start = None;
    let mut anon_max = [0u64; 3];
    while t.elapsed() < Duration::from_secs(25) {
        let mut bytes = 0;
        let mut files = 0;
        for e in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
            files += 1;
            bytes += e.metadata().map(|m| m.len()).unwrap_or(0);
            let n = e.file_name().to_string_lossy().into_owned();
            if n != "0.log" {
                rotations_seen.insert(n);
            }
        }
        max_bytes = max_bytes.max(bytes);
        max_files = max_files.max(files);
        for (m, p) in anon_max.iter_mut().zip([monitor, runtime, agent]) {
            *m = (*m).max(anon_kib(p));
        }
        if during_start.is_none() && t.elapsed() > Duration::from_secs(8) {
            during_start = Some(time_pod_start(side, "lf-during"));
        }
        std::thread::sleep(Duration::from_millis(500));
    }
    let cpu1 = [monitor, runtime, agent].map(|p| cpu_seconds(p).unwrap_or(0.0));
    let logged = written(writer).saturating_sub(written0) as f64 / (1u64 << 20) as f64;
    let secs = t.elapsed().as_secs_f64();
    let followed_then = follow_bytes.load(Ordering::Relaxed);
    std::thread::sleep(Duration::from_secs(2));
    let followed_now = follow_bytes.load(Ordering::Relaxed);
    let _ = follow.kill();
    let _ = follow.wait();
    let _ = reader.join();

    // Still rotating: at most LOG_MAX_FILES files (a rotation may be mid-way: the next
    // `N.log` made before the oldest goes), and `kubectl logs` reads the newest lines.
    assert!(
        rotations_seen.len() >= 2,
        "{}: the log was not rotated: {rotations_seen:?}",
        side.name
    );
    let files_now = std::fs::read_dir(&dir).map(|r| r.count()).unwrap_or(0);
    assert!(
        files_now <= LOG_MAX_FILES + 1,
        "{}: {files_now} files in {}",
        side.name,
        dir.display()
    );
    assert!(
        followed_now > followed_then,
        "{}: kubectl logs -f stopped after {followed_then} bytes",
        side.name
    );
    let tail = side.ok(&["logs", "lf-flood", "--tail=2"]);
    assert!(tail.contains("flood flood"), "{}: {tail:?}", side.name);
    assert!(
        running(&side.get_pod("lf-flood").unwrap()),
        "{}: the flooding pod stopped",
        side.name
    );
    let cpu: Vec<String> = cpu0
        .iter()
        .zip(cpu1)
        .map(|(a, b)| format!("{:.0}%", (b - a) / secs * 100.0))
        .collect();
    let cpu_total: f64 = cpu0.iter().zip(cpu1).map(|(a, b)| b - a).sum();
    figure(
        side,
        "log_flood",
        format!(
            "{logged:.0} MiB logged in {secs:.0} s, {:.2} CPU s per 100 MiB (monitor+runtime+agent: {}); {:.0} MiB followed by logs -f; log dir at most {:.1} MiB in {max_files} files ({} rotated files seen); anon KiB {}/{}/{}; another pod starts in {quiet_start:.1} s quiet, {:.1} s during",
            cpu_total / logged.max(1.0) * 100.0,
            cpu.join("/"),
            followed_now as f64 / (1 << 20) as f64,
            max_bytes as f64 / (1 << 20) as f64,
            rotations_seen.len(),
            anon_max[0],
            anon_max[1],
            anon_max[2],
            during_start.unwrap_or(0.0),
        ),
    );
}

/// Seconds from the apply of a sleeping pod `name` to its Running status in the API.
pub(crate) fn time_pod_start(side: &Side, name: &str) -> f64 {
    let t = Instant::now();
    side.apply(vec![side.pod(name, "exec sleep 3600")]);
    side.wait_running(name);
    t.elapsed().as_secs_f64()
}

/// The pods' log directory full (a 512 KiB filesystem, below the rotation size): the
/// container writing its log keeps running (its output is still read, so it never
/// blocks on a full pipe), the runtime and the agent keep running, and `kubectl logs`
/// still answers with what was kept.
pub(crate) fn log_dir_full(side: &Side) {
    let dir = if side.crust {
        side.c.path("crustlet-pods").display().to_string()
    } else {
        "/var/log/pods".to_string()
    };
    let fs = NodeTmpfs::mount(side, &dir, "512k");
    let line = "0123456789".repeat(10);
    side.apply(vec![side.pod(
        "lfull",
        &format!(
            "i=0; while true; do i=$((i+1)); echo $i > /tmp/n.t; mv /tmp/n.t /tmp/n; echo \"$i {line}\"; done"
        ),
    )]);
    let p = side.wait_running("lfull");
    let id = container_id(&p);
    let info = side.crictl_json(&["inspect", &id]);
    let log_path = info["status"]["logPath"].as_str().unwrap().to_string();
    let agent = side.agent_pid().unwrap();
    let log = format!("/proc/{agent}/root{log_path}");
    // Full: the log stops growing.
    let mut last = 0;
    wait_for(&format!("{}: the log filesystem full", side.name), T, |l| {
        let n = std::fs::metadata(&log).map_or(0, |m| m.len());
        *l = format!("{n} bytes");
        let full = n > 256 << 10 && n == last;
        last = n;
        std::thread::sleep(Duration::from_millis(500));
        full.then_some(())
    });
    // The count as the container last wrote it (renamed into place: never empty).
    let count = || -> u64 {
        let mut last = String::new();
        for _ in 0..10 {
            let out = run_timeout(&mut side.crictl(&["exec", &id, "cat", "/tmp/n"]), T);
            if let Ok(n) = s(&out.stdout).trim().parse() {
                return n;
            }
            last = format!("{}{}", s(&out.stdout), s(&out.stderr));
            std::thread::sleep(Duration::from_millis(100));
        }
        panic!("{}: reading the container's count: {last}", side.name)
    };
    let n0 = count();
    std::thread::sleep(Duration::from_secs(3));
    let n1 = count();
    assert!(
        n1 > n0,
        "{}: the container stopped writing with its log full ({n0} then {n1} lines)",
        side.name
    );
    let p = side.get_pod("lfull").expect("lfull");
    assert!(running(&p), "{}: {}", side.name, p["status"]);
    assert!(
        side.agent_pid().is_some_and(|p| cpu_seconds(p).is_some())
            && side.runtime_pid().is_some_and(|p| cpu_seconds(p).is_some()),
        "{}: the agent or the runtime died",
        side.name
    );
    let out = run_timeout(&mut side.kubectl(&["logs", "lfull", "--tail=2"]), T);
    assert!(
        // The last record may be cut where the filesystem filled.
        out.status.success() && (1..=2).contains(&s(&out.stdout).lines().count()),
        "{}: kubectl logs --tail=2 with the log full: {}{}",
        side.name,
        s(&out.stdout),
        s(&out.stderr)
    );
    figure(
        side,
        "log_dir_full",
        format!(
            "log stopped at {} KiB; the container wrote on ({} lines in 3 s)",
            last >> 10,
            n1 - n0
        ),
    );
    side.ok(&["delete", "pod", "lfull", "--wait=false"]);
    side.wait_gone("lfull");
    drop(fs);
}
