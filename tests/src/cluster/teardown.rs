//! Dropping the cluster: the node agents, every pod through CRI (a dead runtime is
//! restarted for it), the runtimes, the control plane and the registry; then whatever is
//! left in the namespaces and cgroups the cluster made, those cgroups, the network
//! namespace and the temp dirs. The host directories its binds cover stay (see
//! `make_host_dirs`).

use super::process::run_timeout;
use super::{Cluster, ContainerdFor};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

impl Cluster {
    /// Stops and removes everything the cluster made: the kubelet, every pod through
    /// CRI, crustd, the control plane and the registry, then whatever is still in its
    /// namespaces or cgroups, those cgroups, the network namespace and the temp dirs.
    /// Runs once (on drop, or from a signal handler);
    /// a second caller waits for the first to finish.
    pub fn teardown(&self) {
        let mut done = self.torn_down.lock().unwrap();
        if *done {
            return;
        }
        *done = true;
        if let Some(w) = self.pod_watch.get() {
            w.stop();
        }
        self.stop_kubelet();
        self.stop_crustlet();
        self.stop_kube_proxy();
        if let Some(mut c) = self.containerd_crustlet.lock().unwrap().take() {
            let _ = c.kill();
            let _ = c.wait();
        }
        // Every pod through CRI while each crustd runs (restarted if it died).
        if self.holder_pid != 0 {
            let alive = |slot: &Mutex<Option<Child>>| {
                slot.lock()
                    .unwrap()
                    .as_mut()
                    .is_some_and(|c| c.try_wait().map(|s| s.is_none()).unwrap_or(false))
            };
            if !alive(&self.crustd) && self.opts.containerd != Some(ContainerdFor::Kubelet) {
                self.kill_crustd();
                let _ =
                    std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| self.start_crustd()));
            }
            if !alive(&self.crustlet_crustd) {
                self.kill_crustlet_crustd();
                let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                    self.start_crustlet_crustd()
                }));
            }
            let _ = run_timeout(
                &mut self.crictl(&["rmp", "-a", "-f"]),
                Duration::from_secs(90),
            );
            let _ = run_timeout(
                &mut self.crustlet_crictl(&["rmp", "-a", "-f"]),
                Duration::from_secs(90),
            );
            if self.opts.containerd == Some(ContainerdFor::Crustlet) && alive(&self.containerd) {
                let _ = run_timeout(
                    &mut self.containerd_crictl(&["rmp", "-a", "-f"]),
                    Duration::from_secs(90),
                );
            }
        }
        self.kill_crustd();
        self.kill_crustlet_crustd();
        // containerd: SIGTERM, then SIGKILL; its shims and pauses are in the mount
        // namespace, killed below.
        if let Some(mut c) = self.containerd.lock().unwrap().take() {
            crate::signal_child(&mut c, libc::SIGTERM);
            let deadline = Instant::now() + Duration::from_secs(5);
            while c.try_wait().ok().flatten().is_none() && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(50));
            }
            let _ = c.kill();
            let _ = c.wait();
        }
        self.stop_apiserver();
        for mut c in self.control.lock().unwrap().drain(..).rev() {
            let _ = c.kill();
            let _ = c.wait();
        }
        *self.registry.lock().unwrap() = None;
        // What is left: anything in the mount or network namespace, or the cgroups.
        let mnt = (self.holder_pid != 0)
            .then(|| std::fs::read_link(format!("/proc/{}/ns/mnt", self.holder_pid)).ok())
            .flatten();
        // `/run/netns/NAME` is the namespace's nsfs file: its inode names it.
        let net = std::fs::metadata(self.node.path()).ok().map(|m| {
            use std::os::unix::fs::MetadataExt;
            PathBuf::from(format!("net:[{}]", m.ino()))
        });
        for _ in 0..3 {
            for p in self.leftover_pids(mnt.as_ref(), net.as_ref()) {
                if p as u32 == self.holder_pid {
                    continue;
                }
                // SAFETY: killing what runs in namespaces and cgroups this cluster made.
                unsafe { libc::kill(p, libc::SIGKILL) };
            }
            std::thread::sleep(Duration::from_millis(200));
        }
        if let Some(mut h) = self.holder.lock().unwrap().take() {
            let _ = h.kill();
            let _ = h.wait();
        }
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            for d in self.cgroup_dirs() {
                let _ = std::fs::remove_dir(&d);
            }
            for d in self.made_cgroups.iter().rev() {
                let _ = std::fs::remove_dir(d);
            }
            let left =
                self.cgroup_dirs().len() + self.made_cgroups.iter().filter(|d| d.exists()).count();
            if left == 0 || Instant::now() > deadline {
                break;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        let _ = Command::new("ip")
            .args(["netns", "del", &self.node.name])
            .stderr(Stdio::null())
            .status();
        let _ = std::fs::remove_dir_all(self.dir.path());
    }

    /// Every process in the namespaces the cluster made, or in its cgroups.
    fn leftover_pids(&self, mnt: Option<&PathBuf>, net: Option<&PathBuf>) -> Vec<i32> {
        let me = std::process::id() as i32;
        let mut pids = std::collections::BTreeSet::new();
        for d in self.cgroup_dirs() {
            if let Ok(t) = std::fs::read_to_string(d.join("cgroup.procs")) {
                pids.extend(t.lines().filter_map(|l| l.trim().parse::<i32>().ok()));
            }
        }
        if let Ok(rd) = std::fs::read_dir("/proc") {
            for e in rd.flatten() {
                let Some(pid) = e.file_name().to_str().and_then(|n| n.parse::<i32>().ok()) else {
                    continue;
                };
                let ns = |kind: &str| std::fs::read_link(format!("/proc/{pid}/ns/{kind}")).ok();
                if (mnt.is_some() && ns("mnt").as_ref() == mnt)
                    || (net.is_some() && ns("net").as_ref() == net)
                {
                    pids.insert(pid);
                }
            }
        }
        pids.remove(&me);
        pids.into_iter().collect()
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        self.teardown();
    }
}
