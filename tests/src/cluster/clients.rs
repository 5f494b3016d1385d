//! Clients of the cluster: kubectl as the admin, crictl against each runtime, the wait
//! for a pod's state through one shared watch ([`super::pod_watch`]), and a reader of
//! `kubectl --watch` events.

use super::process::run_timeout;
use super::Cluster;
use std::process::Command;
use std::time::Duration;

impl Cluster {
    /// `kubectl --kubeconfig <admin> ARGS` in the node namespace.
    pub fn kubectl(&self, args: &[&str]) -> Command {
        let mut c = self.net_cmd(&self.bins.kubectl);
        c.arg(format!(
            "--kubeconfig={}",
            self.path("admin.kubeconfig").display()
        ))
        .args(args);
        c
    }

    /// Waits until the pod `ns/name` satisfies `pred`, for at most `limit`, through one
    /// watch of every pod that all waits share (see [`super::pod_watch`]): the pod, or
    /// the last state of it seen when time ran out.
    pub fn wait_pod(
        &self,
        ns: &str,
        name: &str,
        limit: Duration,
        pred: impl Fn(&serde_json::Value) -> bool,
    ) -> Result<serde_json::Value, Option<serde_json::Value>> {
        let watch = self.pod_watch.get_or_init(|| {
            let (netns, kubectl) = (self.node.path().to_path_buf(), self.bins.kubectl.clone());
            let kubeconfig = format!("--kubeconfig={}", self.path("admin.kubeconfig").display());
            super::pod_watch::PodWatch::start(move |args| {
                let mut c = Command::new("nsenter");
                c.arg(format!("--net={}", netns.display()))
                    .arg("--")
                    .arg(&kubectl)
                    .arg(&kubeconfig)
                    .args(args);
                c
            })
        });
        watch.wait(ns, name, limit, pred, || {
            let out = run_timeout(
                &mut self.kubectl(&["-n", ns, "get", "pod", name, "-o", "json"]),
                Duration::from_secs(60),
            );
            out.status
                .success()
                .then(|| serde_json::from_slice(&out.stdout).ok())
                .flatten()
        })
    }

    /// `crictl` against crustd's socket, in the node's namespaces.
    pub fn crictl(&self, args: &[&str]) -> Command {
        let mut c = self.node_cmd(&self.bins.crictl);
        let ep = format!("unix://{}", self.socket.display());
        c.arg("--runtime-endpoint")
            .arg(&ep)
            .arg("--image-endpoint")
            .arg(&ep)
            .args(["--timeout", "20s"])
            .args(args);
        c
    }

    /// `crictl` against the crustlet's crustd.
    pub fn crustlet_crictl(&self, args: &[&str]) -> Command {
        let mut c = self.node_cmd(&self.bins.crictl);
        let ep = format!("unix://{}", self.crustlet_socket.display());
        c.arg("--runtime-endpoint")
            .arg(&ep)
            .arg("--image-endpoint")
            .arg(&ep)
            .args(["--timeout", "20s"])
            .args(args);
        c
    }

    /// `crictl` against containerd.
    pub fn containerd_crictl(&self, args: &[&str]) -> Command {
        let mut c = self.node_cmd(&self.bins.crictl);
        let ep = format!("unix://{}", self.containerd_socket.display());
        c.arg("--runtime-endpoint")
            .arg(&ep)
            .arg("--image-endpoint")
            .arg(&ep)
            .args(["--timeout", "20s"])
            .args(args);
        c
    }
}

/// Runs `kubectl ... get KIND --watch --output-watch-events -o json` (`cmd`, built by
/// the caller) and hands each event to `on` as it arrives: its type (`ADDED`,
/// `MODIFIED`, `DELETED`), the object, and the instant it was read (the benches time
/// pods by it). The watch ends when the child is killed.
pub fn watch_events(
    mut cmd: Command,
    mut on: impl FnMut(&str, &serde_json::Value, std::time::Instant) + Send + 'static,
) -> std::process::Child {
    let mut child = cmd
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("kubectl watch");
    let out = child.stdout.take().expect("piped stdout");
    std::thread::spawn(move || {
        let stream = serde_json::Deserializer::from_reader(std::io::BufReader::new(out));
        for ev in stream.into_iter::<serde_json::Value>() {
            let Ok(ev) = ev else { return };
            let now = std::time::Instant::now();
            on(ev["type"].as_str().unwrap_or_default(), &ev["object"], now);
        }
    });
    child
}

/// Runs `cmd` (a kubectl built by the caller) with `stdin` (a JSON object, for `apply -f
/// -`) and panics with its stderr unless it succeeds: the benches' creates and scales.
pub fn run_ok(mut cmd: Command, stdin: Option<&serde_json::Value>) {
    use std::io::Write;
    use std::process::Stdio;
    let what = format!("{cmd:?}");
    let mut child = cmd
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("{what}: {e}"));
    let mut input = child.stdin.take().expect("piped stdin");
    if let Some(v) = stdin {
        input.write_all(v.to_string().as_bytes()).unwrap();
    }
    drop(input);
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "{what}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}
