//! An OCI bundle of busybox-static for the executor's root tests: a rootfs, an `out`
//! dir bound read-write at `/out` for results, state dirs, and a guard that
//! force-deletes a container when a test ends, also by panic.

use crate::{busybox_rootfs, unique, TempDir};
use container::executor::oci_spec::runtime::{Mount, MountBuilder, Spec};
use container::executor::{self, Container, CreateOpts, Stdio};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::ExitStatus;

/// The applets every bundle links to `/bin/busybox`.
pub const APPLETS: &[&str] = &[
    "sh", "cat", "echo", "id", "ls", "hostname", "sleep", "grep", "touch", "readlink", "wc",
    "true", "mkdir", "kill",
];

/// Force-deletes the container on drop (kills, reaps, removes its state dir).
pub struct Guard(pub Option<Container>);

impl Guard {
    pub fn get(&mut self) -> &mut Container {
        self.0.as_mut().unwrap()
    }
}

impl Drop for Guard {
    fn drop(&mut self) {
        if let Some(c) = self.0.take() {
            let _ = c.delete(true);
        }
    }
}

/// A bundle with a busybox rootfs, an `out` dir for results (bind-mounted at `/out`
/// by the specs made here) and a state root, all in one temp dir.
pub struct Bundle {
    pub tmp: TempDir,
}

impl Bundle {
    pub fn new(tag: &str) -> Bundle {
        let tmp = TempDir::new(tag);
        busybox_rootfs(&tmp.path().join("bundle/rootfs"), APPLETS);
        let out = tmp.path().join("out");
        std::fs::create_dir_all(&out).unwrap();
        std::fs::set_permissions(&out, std::fs::Permissions::from_mode(0o777)).unwrap();
        Bundle { tmp }
    }

    pub fn dir(&self) -> PathBuf {
        self.tmp.path().join("bundle")
    }

    pub fn rootfs(&self) -> PathBuf {
        self.dir().join("rootfs")
    }

    pub fn out(&self) -> PathBuf {
        self.tmp.path().join("out")
    }

    pub fn state_dir(&self, id: &str) -> PathBuf {
        self.tmp.path().join("state").join(id)
    }

    /// The default spec (new pid/net/ipc/uts/mnt/cgroup namespaces, its mounts, masked
    /// and read-only paths, three capabilities, no_new_privs) running `args`, with
    /// `/out` bound read-write and no hostname.
    pub fn spec(&self, args: &[&str]) -> Spec {
        let mut spec = Spec::default();
        spec.set_hostname(None);
        let mut p = spec.process().clone().unwrap();
        p.set_args(Some(args.iter().map(|s| s.to_string()).collect()));
        spec.set_process(Some(p));
        let mut mounts = spec.mounts().clone().unwrap();
        mounts.push(bind(&self.out(), "/out", &["rbind", "rw"]));
        spec.set_mounts(Some(mounts));
        spec
    }

    pub fn opts(&self, id: &str, spec: Spec) -> CreateOpts {
        let mut o = CreateOpts::new(id, self.dir(), spec, self.state_dir(id));
        o.stdout = Stdio::File(self.out().join(format!("{id}.stdout")));
        o.stderr = Stdio::File(self.out().join(format!("{id}.stderr")));
        o
    }

    pub fn create(&self, spec: Spec) -> (String, Guard) {
        let id = unique("ctr");
        let c = executor::create(self.opts(&id, spec)).expect("create");
        (id, Guard(Some(c)))
    }

    /// What the container (or an exec tagged `id`) wrote to `<out>/<id>.<ext>`.
    pub fn read(&self, id: &str, ext: &str) -> String {
        std::fs::read_to_string(self.out().join(format!("{id}.{ext}"))).unwrap_or_default()
    }

    /// Creates, starts and waits for the container; its exit status, stdout, stderr.
    pub fn run(&self, spec: Spec) -> (ExitStatus, String, String) {
        let (id, mut g) = self.create(spec);
        g.get().start().expect("start");
        let status = g.get().wait().expect("wait");
        (status, self.read(&id, "stdout"), self.read(&id, "stderr"))
    }

    /// Runs `sh -c script` and returns stdout, asserting it exited 0.
    pub fn sh(&self, spec: Spec) -> String {
        let (status, out, err) = self.run(spec);
        assert_eq!(status.code(), Some(0), "stdout: {out}\nstderr: {err}");
        out
    }
}

pub fn bind(source: &Path, dest: &str, options: &[&str]) -> Mount {
    MountBuilder::default()
        .destination(dest)
        .typ("bind")
        .source(source)
        .options(options.iter().map(|s| s.to_string()).collect::<Vec<_>>())
        .build()
        .unwrap()
}
