//! The output: markdown tables of latency, server-side times and memory.

use super::*;

// ---------------------------------------------------------------------------------
// Output

pub(crate) struct Report {
    pub(crate) md: String,
}

impl Report {
    pub(crate) fn line(&mut self, s: impl AsRef<str>) {
        println!("{}", s.as_ref());
        self.md.push_str(s.as_ref());
        self.md.push('\n');
    }
}

pub(crate) fn p50(v: &[Duration]) -> f64 {
    pct(v, 0.5)
}

fn cell(v: &[Duration]) -> String {
    format!("{:.1} / {:.1}", pct(v, 0.5), pct(v, 0.95))
}

const LABELS: [(&str, &str); 3] = [
    ("containerd", "containerd + runc, reference plugins"),
    ("crust", "crustd, reference plugins"),
    ("crust-own", "crustd, crust's plugins"),
];

fn label(name: &str) -> &'static str {
    LABELS
        .iter()
        .find(|l| l.0 == name)
        .map(|l| l.1)
        .unwrap_or("?")
}

pub(crate) fn latency_table(r: &mut Report, mode: &str, res: &[(&'static str, Times)]) {
    r.line("");
    r.line(format!(
        "Latency, {mode}, ms p50 / p95 as the client sees each call ({} pods per configuration):",
        res.first().map(|x| x.1.pods).unwrap_or(0)
    ));
    r.line("");
    r.line("| | RunPodSandbox | CreateContainer | StartContainer | Create+Start | ExecSync | StopPodSandbox | RemovePodSandbox | pods/s |");
    r.line("| --- | --- | --- | --- | --- | --- | --- | --- | --- |");
    for (name, t) in res {
        r.line(format!(
            "| {} | {} | {} | {} | {} | {} | {} | {} | {:.1} |",
            label(name),
            cell(&t.run),
            cell(&t.create),
            cell(&t.start),
            cell(&t.create_start),
            cell(&t.exec),
            cell(&t.stop),
            cell(&t.remove),
            t.pods as f64 / t.wall.as_secs_f64()
        ));
    }
    let get = |n: &str| res.iter().find(|x| x.0 == n).map(|x| &x.1);
    let Some(d) = get("containerd") else { return };
    for name in ["crust", "crust-own"] {
        let Some(c) = get(name) else { continue };
        let q = |f: fn(&Times) -> &Vec<Duration>| p50(f(c)) / p50(f(d));
        r.line(format!(
            "| ratio {name}/containerd (p50) | {:.2} | {:.2} | {:.2} | {:.2} | {:.2} | {:.2} | {:.2} | {:.1}x |",
            q(|t| &t.run),
            q(|t| &t.create),
            q(|t| &t.start),
            q(|t| &t.create_start),
            q(|t| &t.exec),
            q(|t| &t.stop),
            q(|t| &t.remove),
            (c.pods as f64 / c.wall.as_secs_f64()) / (d.pods as f64 / d.wall.as_secs_f64()),
        ));
    }
    server_table(r, mode, res);
}

/// The same calls server side, from each daemon's log (see the top of the file).
fn server_table(r: &mut Report, mode: &str, res: &[(&'static str, Times)]) {
    let none = Vec::new();
    let of =
        |t: &'_ Times, rpc: &str| -> Vec<Duration> { t.server.get(rpc).unwrap_or(&none).clone() };
    r.line("");
    r.line(format!(
        "Latency, {mode}, ms p50 / p95 server side (crustd: its per-RPC debug lines; containerd: its CRI start and end lines paired), calls found in the log:"
    ));
    r.line("");
    r.line(format!("| | {} |", SERVER_RPCS.join(" | ")));
    r.line(format!("| --- |{}", " --- |".repeat(SERVER_RPCS.len())));
    for (name, t) in res {
        let cells: Vec<String> = SERVER_RPCS
            .iter()
            .map(|rpc| {
                let v = of(t, rpc);
                if v.is_empty() {
                    "-".to_string()
                } else {
                    format!("{} ({})", cell(&v), v.len())
                }
            })
            .collect();
        r.line(format!("| {} | {} |", label(name), cells.join(" | ")));
    }
    let get = |n: &str| res.iter().find(|x| x.0 == n).map(|x| &x.1);
    let Some(d) = get("containerd") else { return };
    for name in ["crust", "crust-own"] {
        let Some(c) = get(name) else { continue };
        let cells: Vec<String> = SERVER_RPCS
            .iter()
            .map(|rpc| format!("{:.2}", p50(&of(c, rpc)) / p50(&of(d, rpc))))
            .collect();
        r.line(format!(
            "| ratio {name}/containerd (p50) | {} |",
            cells.join(" | ")
        ));
    }
}

pub(crate) fn memory_table(r: &mut Report, mems: &[(&'static str, PodMem, Option<PodMem>)]) {
    r.line("");
    r.line("Memory, KiB: per pod the median of (pause + container monitor) or (shim + pause); each daemon's own:");
    r.line("");
    r.line("| | per pod RSS | per pod PSS | daemon RSS / PSS, N pods | daemon RSS / PSS, MANY pods | shims or monitors |");
    r.line("| --- | --- | --- | --- | --- | --- |");
    for (name, m, many) in mems {
        let many_cell = many
            .map(|x| format!("{} / {} ({} pods)", x.daemon.rss, x.daemon.pss, x.pods))
            .unwrap_or_else(|| "-".into());
        r.line(format!(
            "| {} | {} | {} | {} / {} ({} pods) | {many_cell} | {} for {} pods |",
            label(name),
            m.per_pod.rss,
            m.per_pod.pss,
            m.daemon.rss,
            m.daemon.pss,
            m.pods,
            m.parents,
            m.pods
        ));
    }
}

/// crustd's own account of each call, step by step (its debug phase lines), p50 of each
/// step's own time: where each remaining millisecond goes.
pub(crate) fn phase_table(r: &mut Report, mode: &str, res: &[(&'static str, Phases)]) {
    r.line("");
    r.line(format!(
        "crustd's phases, {mode}, ms p50 of each step's own time (steps in order; the first from the call's start):"
    ));
    for (i, kind) in PHASE_LINES.iter().enumerate() {
        let Some((_, steps)) = res.first().map(|(_, p)| &p[i]) else {
            continue;
        };
        if steps.is_empty() {
            continue;
        }
        r.line("");
        r.line(format!(
            "| {kind} | {} | calls |",
            steps
                .iter()
                .map(|(n, _)| n.trim_start_matches("t_").to_string())
                .collect::<Vec<_>>()
                .join(" | ")
        ));
        r.line(format!("| --- |{} --- |", " --- |".repeat(steps.len())));
        for (name, phases) in res {
            let mine = &phases[i].1;
            let cells: Vec<String> = steps
                .iter()
                .map(|(step, _)| match mine.iter().find(|(n, _)| n == step) {
                    Some((_, v)) if !v.is_empty() => {
                        let mut v = v.clone();
                        v.sort_by(|a, b| a.total_cmp(b));
                        format!("{:.2}", v[v.len() / 2])
                    }
                    _ => "-".into(),
                })
                .collect();
            let calls = mine.first().map_or(0, |(_, v)| v.len());
            r.line(format!(
                "| {} | {} | {calls} |",
                label(name),
                cells.join(" | ")
            ));
        }
    }
}
