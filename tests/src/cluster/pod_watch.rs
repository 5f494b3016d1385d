//! Every pod of a test cluster as one `kubectl get pods --watch` reports it, for checks
//! that wait on a pod's state.
//!
//! A check that polls with `kubectl get` every few hundred milliseconds starts a Go
//! process, a TLS handshake and an apiserver request each time; with the kubelet suite's
//! ninety-odd checks waiting side by side that was over a thousand kubectl processes in
//! its first two minutes, a third of the CPU of a two-core machine, and the pods they
//! waited for started that much later (past a minute, at times). One watch serves them
//! all instead; a wait confirms what the watch showed with one `kubectl get` before it
//! returns, so it never returns an older pod of the same name whose deletion the watch
//! had not shown yet.

use serde_json::Value;
use std::collections::HashMap;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

#[derive(Default)]
struct State {
    /// `<namespace>/<name>` → the pod as last reported.
    pods: HashMap<String, Value>,
    /// The running `kubectl get --watch`.
    child: Option<Child>,
    stopped: bool,
}

pub struct PodWatch {
    state: Mutex<State>,
    changed: Condvar,
}

impl PodWatch {
    /// Starts watching; `kubectl` makes the command (the kubectl binary with its
    /// kubeconfig, in the cluster's network namespace) given the arguments. A watch that
    /// ends (the apiserver restarted, or closed it after its request timeout) is started
    /// again, its pods listed anew.
    pub fn start(kubectl: impl Fn(&[&str]) -> Command + Send + 'static) -> Arc<PodWatch> {
        let w = Arc::new(PodWatch {
            state: Mutex::new(State::default()),
            changed: Condvar::new(),
        });
        let me = w.clone();
        std::thread::spawn(move || me.run(kubectl));
        w
    }

    fn run(&self, kubectl: impl Fn(&[&str]) -> Command) {
        let args = [
            "get",
            "pods",
            "--all-namespaces",
            "--watch",
            "--output-watch-events",
            "-o",
            "json",
        ];
        loop {
            let child = kubectl(&args)
                .stdin(Stdio::null())
                .stdout(Stdio::piped())
                .stderr(Stdio::null())
                .spawn();
            let stdout = {
                let mut st = self.state.lock().unwrap();
                if st.stopped {
                    if let Ok(mut c) = child {
                        let _ = c.kill();
                        let _ = c.wait();
                    }
                    return;
                }
                // The new watch lists every pod again: one deleted in between must go.
                st.pods.clear();
                match child {
                    Ok(mut c) => {
                        let out = c.stdout.take();
                        st.child = Some(c);
                        out
                    }
                    Err(_) => None,
                }
            };
            if let Some(out) = stdout {
                let events = serde_json::Deserializer::from_reader(std::io::BufReader::new(out))
                    .into_iter::<Value>();
                for ev in events {
                    let Ok(ev) = ev else { break };
                    self.apply(&ev);
                }
            }
            {
                let mut st = self.state.lock().unwrap();
                if let Some(mut c) = st.child.take() {
                    let _ = c.kill();
                    let _ = c.wait();
                }
                if st.stopped {
                    return;
                }
            }
            std::thread::sleep(Duration::from_millis(500));
        }
    }

    fn apply(&self, ev: &Value) {
        let obj = &ev["object"];
        let key = format!(
            "{}/{}",
            obj["metadata"]["namespace"].as_str().unwrap_or_default(),
            obj["metadata"]["name"].as_str().unwrap_or_default()
        );
        let mut st = self.state.lock().unwrap();
        match ev["type"].as_str() {
            Some("ADDED" | "MODIFIED") => {
                st.pods.insert(key, obj.clone());
            }
            Some("DELETED") => {
                st.pods.remove(&key);
            }
            _ => return,
        }
        drop(st);
        self.changed.notify_all();
    }

    /// Waits until the pod `ns/name` satisfies `pred` as the watch reports it and as
    /// `confirm` (a fresh read of it) returns it, for at most `limit`: the pod `confirm`
    /// returned, or the last the watch showed (if any) when time ran out.
    pub fn wait(
        &self,
        ns: &str,
        name: &str,
        limit: Duration,
        pred: impl Fn(&Value) -> bool,
        confirm: impl Fn() -> Option<Value>,
    ) -> Result<Value, Option<Value>> {
        let key = format!("{ns}/{name}");
        let deadline = Instant::now() + limit;
        let mut st = self.state.lock().unwrap();
        loop {
            let seen = st.pods.get(&key).cloned();
            if seen.as_ref().is_some_and(&pred) {
                drop(st);
                if let Some(p) = confirm().filter(&pred) {
                    return Ok(p);
                }
                st = self.state.lock().unwrap();
            }
            let now = Instant::now();
            if now >= deadline {
                return Err(st.pods.get(&key).cloned());
            }
            // Woken by any pod's change; a second at most, so a confirmation that
            // failed is tried again even when nothing changes.
            let wait = (deadline - now).min(Duration::from_secs(1));
            st = self.changed.wait_timeout(st, wait).unwrap().0;
        }
    }

    /// Ends the watch for good.
    pub fn stop(&self) {
        let mut st = self.state.lock().unwrap();
        st.stopped = true;
        if let Some(c) = st.child.as_mut() {
            let _ = c.kill();
        }
    }
}
