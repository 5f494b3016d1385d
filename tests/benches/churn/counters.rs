//! What the churn benchmark counts of a stack before and after its run (processes,
//! fds, threads, mounts, cgroups, veths, reserved IPs, entries under its dirs), and the
//! table it prints of them.

use super::*;

#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Kind {
    /// Memory, KiB: may grow by [`NOISE_KIB`].
    Kib,
    /// Must come back exactly.
    Count,
}

pub(super) struct Counter {
    /// No comma: it is a CSV field.
    pub(super) name: String,
    pub(super) value: u64,
    pub(super) kind: Kind,
    /// What the count is made of (fds by kind, threads by name), printed when it grew.
    pub(super) detail: String,
}

/// A field of `/proc/<pid>/<file>` (`Rss:`, `Threads:`): its first number.
pub(super) fn proc_field(pid: u32, file: &str, key: &str) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/{file}"))
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix(key))
        .and_then(|r| r.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .unwrap_or(0)
}

/// RSS, anonymous memory, open fds and threads of process `pid`, as counters named
/// after `who`.
pub(super) fn process(out: &mut Vec<Counter>, who: &str, pid: u32) {
    let fds = std::fs::read_dir(format!("/proc/{pid}/fd"))
        .map(|r| r.count() as u64)
        .unwrap_or(0);
    for (what, value, kind) in [
        (
            "RSS KiB",
            proc_field(pid, "smaps_rollup", "Rss:"),
            Kind::Kib,
        ),
        (
            "anonymous KiB",
            proc_field(pid, "smaps_rollup", "Anonymous:"),
            Kind::Kib,
        ),
        ("open fds", fds, Kind::Count),
        (
            "threads",
            proc_field(pid, "status", "Threads:"),
            Kind::Count,
        ),
    ] {
        let detail = match what {
            "open fds" => tally(fd_kinds(pid)),
            "threads" => tally(thread_names(pid)),
            _ => String::new(),
        };
        out.push(Counter {
            name: format!("{who} {what}"),
            value,
            kind,
            detail,
        });
    }
}

/// What each open fd of `pid` is: a path's dir, or the kind of a socket, pipe or anon
/// inode (`socket`, `anon_inode:[eventpoll]`).
pub(super) fn fd_kinds(pid: u32) -> Vec<String> {
    let Ok(rd) = std::fs::read_dir(format!("/proc/{pid}/fd")) else {
        return vec![];
    };
    let sockets = sockets(pid);
    rd.flatten()
        .filter_map(|e| std::fs::read_link(e.path()).ok())
        .map(|t| {
            let t = t.to_string_lossy().into_owned();
            if let Some(inode) = t.strip_prefix("socket:[").and_then(|r| r.strip_suffix(']')) {
                return sockets
                    .get(inode)
                    .cloned()
                    .unwrap_or_else(|| "socket".into());
            }
            match t.split_once(':') {
                Some((kind, _)) if !t.starts_with('/') && kind != "anon_inode" => kind.into(),
                _ if t.starts_with('/') => Path::new(&t)
                    .parent()
                    .map_or(t.clone(), |p| p.display().to_string()),
                _ => t,
            }
        })
        .collect()
}

/// The sockets of `pid`'s network namespace by inode: `tcp to port 6443`, `tcp from
/// port 10250` (a listener's or a served connection's), `unix /path`.
pub(super) fn sockets(pid: u32) -> HashMap<String, String> {
    let mut m = HashMap::new();
    for f in ["tcp", "tcp6"] {
        let text = std::fs::read_to_string(format!("/proc/{pid}/net/{f}")).unwrap_or_default();
        for l in text.lines().skip(1) {
            let w: Vec<&str> = l.split_whitespace().collect();
            let port = |a: &str| {
                a.rsplit_once(':')
                    .and_then(|(_, p)| u16::from_str_radix(p, 16).ok())
                    .unwrap_or(0)
            };
            let (Some(local), Some(remote), Some(inode)) = (w.get(1), w.get(2), w.get(9)) else {
                continue;
            };
            // A client's local port is ephemeral: name it by its peer's.
            let what = if port(local) >= 32768 {
                format!("tcp to port {}", port(remote))
            } else {
                format!("tcp from port {}", port(local))
            };
            m.insert(inode.to_string(), what);
        }
    }
    let text = std::fs::read_to_string(format!("/proc/{pid}/net/unix")).unwrap_or_default();
    for l in text.lines().skip(1) {
        let w: Vec<&str> = l.split_whitespace().collect();
        if let Some(inode) = w.get(6) {
            let path = w.get(7).map_or("(unnamed)".to_string(), |p| p.to_string());
            m.insert(inode.to_string(), format!("unix {path}"));
        }
    }
    m
}

/// The names of `pid`'s threads.
pub(super) fn thread_names(pid: u32) -> Vec<String> {
    let Ok(rd) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return vec![];
    };
    rd.flatten()
        .filter_map(|e| std::fs::read_to_string(e.path().join("comm")).ok())
        .map(|n| n.trim().to_string())
        .collect()
}

/// `3 socket, 1 pipe`: how many of each.
pub(super) fn tally(items: Vec<String>) -> String {
    let mut m: std::collections::BTreeMap<String, usize> = Default::default();
    for i in items {
        *m.entry(i).or_default() += 1;
    }
    let v: Vec<String> = m.iter().map(|(k, n)| format!("{n} {k}")).collect();
    v.join(", ")
}

/// Files, dirs and links at or below `dir` (links not followed; the host's view: what
/// the node namespace mounts there is not seen, its mounts are counted apart).
pub(super) fn entries(dir: &Path) -> u64 {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return 0;
    };
    rd.flatten()
        .map(|e| {
            let sub = e.file_type().is_ok_and(|t| t.is_dir());
            1 + if sub { entries(&e.path()) } else { 0 }
        })
        .sum()
}

/// Files named after an IP address at or below `dir`: host-local's reservations.
pub(super) fn reserved_ips(dir: &Path) -> u64 {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return 0;
    };
    rd.flatten()
        .map(|e| {
            if e.file_type().is_ok_and(|t| t.is_dir()) {
                reserved_ips(&e.path())
            } else {
                u64::from(
                    e.file_name()
                        .to_string_lossy()
                        .parse::<std::net::IpAddr>()
                        .is_ok(),
                )
            }
        })
        .sum()
}

/// The node namespace's mounts (read through a process there): all, and those whose
/// mount point starts with one of `prefixes`.
pub(super) fn mounts(pid: u32, prefixes: &[String]) -> (u64, u64) {
    let text = std::fs::read_to_string(format!("/proc/{pid}/mountinfo")).unwrap_or_default();
    let mut own = 0;
    let all = text
        .lines()
        .inspect(|l| {
            let point = l.split_whitespace().nth(4).unwrap_or("");
            if prefixes.iter().any(|p| point.starts_with(p.as_str())) {
                own += 1;
            }
        })
        .count();
    (all as u64, own)
}

/// Lines `ip -n <node> -o link show ARGS` prints (0 when it fails: no bridge yet).
pub(super) fn links(c: &Cluster, args: &[&str]) -> u64 {
    let out = run_timeout(
        Command::new("ip")
            .args(["-n", &c.node.name, "-o", "link", "show"])
            .args(args),
        Duration::from_secs(20),
    );
    if !out.status.success() {
        return 0;
    }
    String::from_utf8_lossy(&out.stdout).lines().count() as u64
}

/// Every counter of `stack`, read now.
pub(super) fn counters(c: &Cluster, stack: Stack) -> Vec<Counter> {
    let mut out = Vec::new();
    let count = |out: &mut Vec<Counter>, name: &str, value: u64| {
        out.push(Counter {
            name: name.to_string(),
            value,
            kind: Kind::Count,
            detail: String::new(),
        })
    };
    let p = |r: &str| c.path(r);
    let (runtime_pid, bridge, cgroup_root, ipam, dirs, prefixes);
    if stack == CRUST {
        let state = p("crustlet-crust-state").display().to_string();
        runtime_pid = c.crustlet_crustd_pid().expect("the crustlet's crustd");
        process(&mut out, "crustd", runtime_pid);
        count(
            &mut out,
            "crust-monitor processes",
            pids_of("crust-monitor", &state).len() as u64,
        );
        process(&mut out, "crustlet", c.crustlet_pid().expect("crustlet"));
        bridge = "crustlet0";
        cgroup_root = &c.crustlet_cgroup_root;
        ipam = p("crustlet-ipam");
        dirs = vec![
            "crustlet-crust-state",
            "crustlet-crust-root",
            "crustlet-root",
            "crustlet-pods",
        ];
        prefixes = vec![p("crustlet-").display().to_string()];
    } else {
        let sock = c.containerd_socket.display().to_string();
        runtime_pid = c.containerd_pid().expect("containerd");
        process(&mut out, "containerd", runtime_pid);
        let shims = pids_of("containerd-shim-runc-v2", &sock);
        count(&mut out, "shim processes", shims.len() as u64);
        process(&mut out, "kubelet", c.kubelet_pid().expect("kubelet"));
        bridge = "ctrd0";
        cgroup_root = &c.cgroup_root;
        ipam = p("ctrd-ipam");
        dirs = vec![
            "ctrd-root",
            "ctrd-state",
            "ctrd-runc",
            "ctrd-run",
            "mnt/kubelet",
            "mnt/pods",
            "mnt/containers",
        ];
        // containerd's pods' network namespaces are bind mounts in /var/run/netns.
        prefixes = [
            "/var/lib/kubelet",
            "/run/containerd",
            "/var/run/netns",
            "/run/netns",
        ]
        .iter()
        .map(|s| s.to_string())
        .chain([p("ctrd-").display().to_string()])
        .collect();
    }
    let (all, own) = mounts(runtime_pid, &prefixes);
    count(&mut out, "mounts in the node namespace", all);
    count(&mut out, "mounts under the stack's dirs", own);
    count(
        &mut out,
        "cgroups below the cgroup root",
        c.cgroups_below(cgroup_root).len() as u64,
    );
    count(
        &mut out,
        &format!("veths on {bridge}"),
        links(c, &["master", bridge]),
    );
    count(
        &mut out,
        "veths in the node namespace",
        links(c, &["type", "veth"]),
    );
    count(&mut out, "reserved IPs", reserved_ips(&ipam));
    for d in dirs {
        count(&mut out, &format!("entries under {d}"), entries(&p(d)));
    }
    out
}

/// How long after the last pod is gone a count may take to come back: the crustlet's
/// API client keeps an idle connection for 90 s (hyper's pool; the kubelet's Go client
/// multiplexes one HTTP/2 connection instead), the kubelet removes a deleted pod's logs
/// in its once-a-minute garbage collection.
pub(super) const SETTLE_MAX: Duration = Duration::from_secs(150);

/// The counters of `stack` once its counts are back where `before` has them: read
/// `settle` after the last pod was gone, then every 5 s until they are or
/// [`SETTLE_MAX`] has passed (memory is not waited for). The counters, and how long
/// after the last pod they were read.
pub(super) fn settled(
    c: &Cluster,
    stack: Stack,
    before: &[Counter],
    settle: Duration,
) -> (Vec<Counter>, Duration) {
    let start = Instant::now();
    std::thread::sleep(settle);
    loop {
        let now = counters(c, stack);
        let back = before
            .iter()
            .zip(&now)
            .all(|(b, a)| b.kind != Kind::Count || a.value <= b.value);
        if back || start.elapsed() >= SETTLE_MAX.max(settle) {
            return (now, start.elapsed());
        }
        std::thread::sleep(Duration::from_secs(5));
    }
}

pub(super) fn show(v: u64, kind: Kind) -> String {
    match kind {
        Kind::Kib => format!("{:.1} MiB", v as f64 / 1024.0),
        Kind::Count => v.to_string(),
    }
}

pub(super) fn show_delta(before: u64, after: u64, kind: Kind) -> String {
    let d = after as i64 - before as i64;
    match kind {
        Kind::Kib => format!("{:+.1} MiB", d as f64 / 1024.0),
        Kind::Count => format!("{d:+}"),
    }
}

/// Prints the table of `stack`'s counters; the lines of those that grew beyond what is
/// allowed (for a checked stack).
pub(super) fn table(stack: Stack, before: &[Counter], after: &[Counter]) -> Vec<String> {
    println!(
        "\n{}: counters before the run and after it, everything deleted",
        stack.title
    );
    println!("| counter | before | after | delta |");
    println!("| --- | --- | --- | --- |");
    let mut grew = vec![];
    for (b, a) in before.iter().zip(after) {
        println!(
            "| {} | {} | {} | {} |",
            b.name.trim_end_matches(" KiB"),
            show(b.value, b.kind),
            show(a.value, a.kind),
            show_delta(b.value, a.value, a.kind)
        );
        let allowed = match b.kind {
            Kind::Kib => NOISE_KIB,
            Kind::Count => 0,
        };
        if stack.checked && a.value > b.value + allowed {
            grew.push(format!(
                "{}: {}: {} -> {} ({})",
                stack.title,
                b.name.trim_end_matches(" KiB"),
                show(b.value, b.kind),
                show(a.value, a.kind),
                show_delta(b.value, a.value, a.kind)
            ));
            if !a.detail.is_empty() {
                grew.push(format!(
                    "    before: {}\n    after:  {}",
                    b.detail, a.detail
                ));
            }
        }
    }
    grew
}
