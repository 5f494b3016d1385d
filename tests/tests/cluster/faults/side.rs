//! The suite's view of a node (`Side`: the crustlet on crustd, or the kubelet on
//! containerd), what it reads of the pods and processes, and the figures it prints.

use super::*;

/// One node as the checks see it: the crustlet on crustd, or the kubelet on containerd.
#[derive(Clone, Copy)]
pub(crate) struct Side<'a> {
    pub(crate) c: &'a Cluster,
    /// Who runs the node, for the figures: `crustlet+crustd`, `kubelet+containerd`.
    pub(crate) name: &'static str,
    pub(crate) node: &'static str,
    /// The namespace of this side's pods.
    pub(crate) ns: &'static str,
    pub(crate) crust: bool,
}

impl<'a> Side<'a> {
    pub(crate) fn crust(c: &'a Cluster) -> Self {
        Side {
            c,
            name: "crustlet+crustd",
            node: CRUSTLET_NODE,
            ns: "faults-crust",
            crust: true,
        }
    }

    pub(crate) fn incumbent(c: &'a Cluster) -> Self {
        Side {
            c,
            name: "kubelet+containerd",
            node: NODE,
            ns: "faults-ctrd",
            crust: false,
        }
    }

    pub(crate) fn kubectl(&self, args: &[&str]) -> Command {
        let mut cmd = self.c.kubectl(&["-n", self.ns]);
        cmd.args(args);
        cmd
    }

    pub(crate) fn ok(&self, args: &[&str]) -> String {
        let out = run_timeout(&mut self.kubectl(args), T);
        assert!(
            out.status.success(),
            "{}: kubectl {args:?} ({}): {}{}",
            self.name,
            out.status,
            // (a flooding container's log is not a message)
            crust_e2e::tail(&s(&out.stdout), 5),
            crust_e2e::tail(&s(&out.stderr), 5)
        );
        s(&out.stdout)
    }

    pub(crate) fn apply(&self, objs: Vec<Value>) {
        let list = json!({"apiVersion": "v1", "kind": "List", "items": objs});
        let path = self
            .c
            .path(&format!("{}.json", crust_e2e::unique("faults-obj")));
        std::fs::write(&path, list.to_string()).unwrap();
        self.ok(&["apply", "-f", path.to_str().unwrap()]);
    }

    /// `crictl` against this node's runtime.
    pub(crate) fn crictl(&self, args: &[&str]) -> Command {
        if self.crust {
            self.c.crustlet_crictl(args)
        } else {
            self.c.crictl(args)
        }
    }

    pub(crate) fn crictl_json(&self, args: &[&str]) -> Value {
        let out = run_timeout(&mut self.crictl(args), T);
        assert!(
            out.status.success(),
            "{}: crictl {args:?}: {}",
            self.name,
            s(&out.stderr)
        );
        serde_json::from_slice(&out.stdout).unwrap()
    }

    pub(crate) fn agent_pid(&self) -> Option<u32> {
        if self.crust {
            self.c.crustlet_pid()
        } else {
            self.c.kubelet_pid()
        }
    }

    pub(crate) fn runtime_pid(&self) -> Option<u32> {
        if self.crust {
            self.c.crustlet_crustd_pid()
        } else {
            self.c.containerd_pid()
        }
    }

    pub(crate) fn kill_agent(&self) {
        if self.crust {
            self.c.kill_crustlet()
        } else {
            self.c.kill_kubelet()
        }
    }

    pub(crate) fn start_agent(&self) {
        if self.crust {
            self.c.start_crustlet()
        } else {
            self.c.start_kubelet()
        }
    }

    pub(crate) fn kill_runtime(&self) {
        if self.crust {
            self.c.kill_crustlet_crustd()
        } else {
            self.c.kill_containerd()
        }
    }

    pub(crate) fn start_runtime(&self) {
        if self.crust {
            self.c.start_crustlet_crustd()
        } else {
            self.c.start_containerd()
        }
    }

    /// A pod of one container `main` running `script` on this side's node.
    pub(crate) fn pod(&self, name: &str, script: &str) -> Value {
        json!({
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name, "namespace": self.ns, "labels": {"suite": "faults"}},
            "spec": {
                "nodeName": self.node,
                "terminationGracePeriodSeconds": 2,
                "tolerations": [{"key": CRUSTLET_TAINT, "operator": "Exists"}],
                "containers": [{
                    "name": "main",
                    "image": self.c.image,
                    "imagePullPolicy": "IfNotPresent",
                    "command": ["sh", "-c", script],
                }],
            }
        })
    }

    pub(crate) fn get_pod(&self, name: &str) -> Option<Value> {
        let out = run_timeout(&mut self.kubectl(&["get", "pod", name, "-o", "json"]), T);
        out.status
            .success()
            .then(|| serde_json::from_slice(&out.stdout).ok())
            .flatten()
    }

    /// Waits for pod `name` to satisfy `pred`; panics with its last status and events.
    pub(crate) fn wait_pod(&self, name: &str, what: &str, pred: impl Fn(&Value) -> bool) -> Value {
        self.c
            .wait_pod(self.ns, name, T, pred)
            .unwrap_or_else(|last| {
                let ev = run_timeout(
                    &mut self.kubectl(&[
                        "get",
                        "events",
                        "--field-selector",
                        &format!("involvedObject.name={name}"),
                    ]),
                    T,
                );
                panic!(
                    "{}: pod {name} not {what} after {T:?}; last seen: {}\nevents:\n{}",
                    self.name,
                    last.map(|p| p["status"].to_string()).unwrap_or_default(),
                    s(&ev.stdout)
                )
            })
    }

    pub(crate) fn wait_running(&self, name: &str) -> Value {
        self.wait_pod(name, "Running", running)
    }

    pub(crate) fn wait_gone(&self, name: &str) {
        wait_for(&format!("{}: pod {name} deleted", self.name), T, |_| {
            self.get_pod(name).is_none().then_some(())
        });
    }

    /// The Node's Ready status (`True`, `False`, `Unknown`), or "" if it cannot be read.
    pub(crate) fn ready(&self) -> String {
        self.condition("Ready")
    }

    /// The status of the Node's condition `kind` (`Ready`, `DiskPressure`...), or "".
    pub(crate) fn condition(&self, kind: &str) -> String {
        let path = format!(r#"jsonpath={{.status.conditions[?(@.type=="{kind}")].status}}"#);
        let out = run_timeout(
            &mut self.c.kubectl(&["get", "node", self.node, "-o", &path]),
            Duration::from_secs(20),
        );
        s(&out.stdout).trim().to_string()
    }

    /// This side's pods as its runtime has them, by pod name: sandboxes (any state),
    /// of them ready, and containers named `main` (any state).
    pub(crate) fn runtime_pods(&self) -> BTreeMap<String, RuntimePod> {
        let label = format!("io.kubernetes.pod.namespace={}", self.ns);
        let mut out: BTreeMap<String, RuntimePod> = BTreeMap::new();
        let pods = self.crictl_json(&["pods", "-o", "json", "--label", &label]);
        for p in pods["items"].as_array().into_iter().flatten() {
            let name = p["metadata"]["name"].as_str().unwrap_or_default();
            let e = out.entry(name.to_string()).or_default();
            e.sandboxes += 1;
            if p["state"] == "SANDBOX_READY" {
                e.ready += 1;
            }
        }
        let ctrs = self.crictl_json(&["ps", "-a", "-o", "json", "--label", &label]);
        for c in ctrs["containers"].as_array().into_iter().flatten() {
            let pod = c["labels"]["io.kubernetes.pod.name"]
                .as_str()
                .unwrap_or_default();
            let e = out.entry(pod.to_string()).or_default();
            e.containers
                .push(c["id"].as_str().unwrap_or_default().to_string());
        }
        out
    }
}

#[derive(Default, Debug)]
pub(crate) struct RuntimePod {
    pub(crate) sandboxes: usize,
    pub(crate) ready: usize,
    pub(crate) containers: Vec<String>,
}

pub(crate) fn running(p: &Value) -> bool {
    p["status"]["phase"] == "Running"
        && p["status"]["containerStatuses"]
            .as_array()
            .is_some_and(|a| a.iter().all(|s| s["state"]["running"].is_object()))
}

pub(crate) fn main_status(p: &Value) -> Value {
    p["status"]["containerStatuses"]
        .as_array()
        .and_then(|a| a.iter().find(|s| s["name"] == "main"))
        .cloned()
        .unwrap_or(Value::Null)
}

/// The runtime's id of pod `p`'s `main` (without `<runtime>://`).
pub(crate) fn container_id(p: &Value) -> String {
    let raw = main_status(p)["containerID"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    raw.split_once("://")
        .map(|(_, id)| id.to_string())
        .unwrap_or(raw)
}

/// CPU seconds process `pid` has used (user + system), or None once it is gone.
pub(crate) fn cpu_seconds(pid: u32) -> Option<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The fields after the command (which may hold spaces) in its parentheses.
    let rest = &stat[stat.rfind(')')? + 2..];
    let f: Vec<&str> = rest.split(' ').collect();
    let ticks: u64 = f.get(11)?.parse::<u64>().ok()? + f.get(12)?.parse::<u64>().ok()?;
    // SAFETY: sysconf reads a constant of the system; no memory is passed.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as f64;
    Some(ticks as f64 / hz)
}

/// The anonymous memory of process `pid` in KiB (`RssAnon`), or 0.
pub(crate) fn anon_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("RssAnon:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

/// Bytes process `pid` has written through write(2) and its kin (`wchar`), or 0.
pub(crate) fn written(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/io"))
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("wchar:"))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0)
}

pub(crate) fn parent_of(pid: u32) -> Option<u32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = &stat[stat.rfind(')')? + 2..];
    rest.split(' ').nth(1)?.parse().ok()
}

/// What a check prints, per side, in the summary table.
/// A tmpfs mounted over a directory in the node's mount namespace, lazily unmounted
/// when dropped (files still open in it go with it).
pub(crate) struct NodeTmpfs<'a> {
    side: &'a Side<'a>,
    dir: String,
}

impl<'a> NodeTmpfs<'a> {
    pub(crate) fn mount(side: &'a Side<'a>, dir: &str, size: &str) -> Self {
        let ok = side
            .c
            .node_cmd("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs", dir])
            .status()
            .is_ok_and(|s| s.success());
        assert!(ok, "{}: mounting a tmpfs over {dir}", side.name);
        NodeTmpfs {
            side,
            dir: dir.to_string(),
        }
    }
}

impl Drop for NodeTmpfs<'_> {
    fn drop(&mut self) {
        let _ = self
            .side
            .c
            .node_cmd("umount")
            .args(["-l", &self.dir])
            .status();
    }
}

/// The IPs host-local holds reserved for this side's pod network: its files in the
/// network's data dir (the same plugin on both sides).
pub(crate) fn reserved_ips(side: &Side) -> std::collections::BTreeSet<String> {
    let dir = side.c.path(if side.crust {
        "crustlet-ipam/crust-let"
    } else {
        "ctrd-ipam/crust-ctrd"
    });
    std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.parse::<std::net::Ipv4Addr>().is_ok())
        .collect()
}

pub(crate) static FIGURES: Mutex<Vec<String>> = Mutex::new(Vec::new());

pub(crate) fn figure(side: &Side, check: &str, what: String) {
    let line = format!("{check:<24} {:<20} {what}", side.name);
    println!("  {line}");
    FIGURES.lock().unwrap().push(line);
}
