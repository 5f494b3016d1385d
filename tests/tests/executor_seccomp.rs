//! Root tests of seccomp in the OCI executor (`container::executor`): a spec's
//! `linux.seccomp` compiled by crust and installed in the container's init and in an
//! exec'd process. A denied call fails with the rule's errno, an argument-conditioned
//! rule tells calls apart, `KILL_PROCESS` ends the container with SIGSYS, a filter goes
//! in without `noNewPrivileges` and without `CAP_SYS_ADMIN` in the container, and a
//! spec the executor cannot honour fails before any process is made.
//!
//! Containers are force-deleted by a guard, temp dirs removed by theirs; every
//! container has a new network namespace.

use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::ExitStatus;

use container::executor::oci_spec::runtime::{
    LinuxSeccomp, LinuxSeccompAction, LinuxSeccompArgBuilder, LinuxSeccompBuilder,
    LinuxSeccompOperator, LinuxSyscall, LinuxSyscallBuilder, Mount, MountBuilder, Spec,
};
use container::executor::{self, Container, CreateOpts, ExecOpts, Stdio};
use crust_e2e::{busybox_rootfs, require_root, unique, TempDir};

const APPLETS: &[&str] = &[
    "sh", "cat", "echo", "mkdir", "grep", "kill", "true", "sleep",
];

/// Force-deletes the container on drop.
struct Guard(Option<Container>);

impl Drop for Guard {
    fn drop(&mut self) {
        if let Some(c) = self.0.take() {
            let _ = c.delete(true);
        }
    }
}

/// A busybox bundle with an `out` dir bound read-write at `/out`.
struct Bundle {
    tmp: TempDir,
}

impl Bundle {
    fn new(tag: &str) -> Bundle {
        let tmp = TempDir::new(tag);
        busybox_rootfs(&tmp.path().join("bundle/rootfs"), APPLETS);
        let out = tmp.path().join("out");
        std::fs::create_dir_all(&out).unwrap();
        std::fs::set_permissions(&out, std::fs::Permissions::from_mode(0o777)).unwrap();
        Bundle { tmp }
    }

    fn dir(&self) -> PathBuf {
        self.tmp.path().join("bundle")
    }

    fn out(&self) -> PathBuf {
        self.tmp.path().join("out")
    }

    /// The default spec (three capabilities, none of them `CAP_SYS_ADMIN`;
    /// no_new_privs) running `args` under `seccomp`.
    fn spec(&self, args: &[&str], seccomp: LinuxSeccomp) -> Spec {
        let mut spec = Spec::default();
        spec.set_hostname(None);
        let mut p = spec.process().clone().unwrap();
        p.set_args(Some(args.iter().map(|s| s.to_string()).collect()));
        spec.set_process(Some(p));
        let mut mounts = spec.mounts().clone().unwrap();
        mounts.push(bind(&self.out(), "/out"));
        spec.set_mounts(Some(mounts));
        let mut linux = spec.linux().clone().unwrap();
        linux.set_seccomp(Some(seccomp));
        spec.set_linux(Some(linux));
        spec
    }

    fn create(&self, spec: Spec) -> (String, Guard) {
        let id = unique("sc");
        let mut o = CreateOpts::new(
            &id,
            self.dir(),
            spec,
            self.tmp.path().join("state").join(&id),
        );
        o.stdout = Stdio::File(self.out().join(format!("{id}.stdout")));
        o.stderr = Stdio::File(self.out().join(format!("{id}.stderr")));
        let c = executor::create(o).expect("create");
        (id, Guard(Some(c)))
    }

    fn read(&self, id: &str, ext: &str) -> String {
        std::fs::read_to_string(self.out().join(format!("{id}.{ext}"))).unwrap_or_default()
    }

    /// Creates, starts and waits for the container: exit status, stdout, stderr.
    fn run(&self, spec: Spec) -> (ExitStatus, String, String) {
        let (id, mut g) = self.create(spec);
        let c = g.0.as_mut().unwrap();
        c.start().expect("start");
        let status = c.wait().expect("wait");
        (status, self.read(&id, "stdout"), self.read(&id, "stderr"))
    }
}

fn bind(source: &Path, dest: &str) -> Mount {
    MountBuilder::default()
        .destination(dest)
        .typ("bind")
        .source(source)
        .options(vec!["rbind".to_string(), "rw".to_string()])
        .build()
        .unwrap()
}

fn rule(names: &[&str], action: LinuxSeccompAction) -> LinuxSyscall {
    LinuxSyscallBuilder::default()
        .names(names.iter().map(|s| s.to_string()).collect::<Vec<_>>())
        .action(action)
        .build()
        .unwrap()
}

fn profile(default: LinuxSeccompAction, rules: Vec<LinuxSyscall>) -> LinuxSeccomp {
    LinuxSeccompBuilder::default()
        .default_action(default)
        .syscalls(rules)
        .build()
        .unwrap()
}

/// Allow everything but `mkdir`/`mkdirat`, which get `action`.
fn deny_mkdir(action: LinuxSeccompAction) -> LinuxSeccomp {
    profile(
        LinuxSeccompAction::ScmpActAllow,
        vec![rule(&["mkdir", "mkdirat"], action)],
    )
}

#[test]
fn a_denied_syscall_fails_with_eperm_and_others_work() {
    if !require_root(&["busybox"]) {
        return;
    }
    let b = Bundle::new("sc-errno");
    let spec = b.spec(
        &[
            "/bin/sh",
            "-c",
            "echo before; mkdir /out/made; echo rc=$?; grep Seccomp: /proc/self/status",
        ],
        deny_mkdir(LinuxSeccompAction::ScmpActErrno),
    );
    let (status, out, err) = b.run(spec);
    assert_eq!(status.code(), Some(0), "stdout: {out}\nstderr: {err}");
    assert!(out.starts_with("before\nrc=1\n"), "{out}");
    // Mode 2: a filter.
    assert!(out.contains("Seccomp:\t2"), "{out}");
    assert!(err.contains("Operation not permitted"), "{err}");
    assert!(!b.out().join("made").exists());
}

#[test]
fn an_argument_conditioned_rule_denies_only_matching_calls() {
    if !require_root(&["busybox"]) {
        return;
    }
    let b = Bundle::new("sc-args");
    // kill(pid, SIGUSR1) is refused with EACCES; kill(pid, 0) is not. (Unfiltered,
    // both succeed: the shell is its PID namespace's init, which drops the signal.)
    let mut r = rule(&["kill"], LinuxSeccompAction::ScmpActErrno);
    r.set_errno_ret(Some(libc::EACCES as u32));
    r.set_args(Some(vec![LinuxSeccompArgBuilder::default()
        .index(1usize)
        .value(libc::SIGUSR1 as u64)
        .op(LinuxSeccompOperator::ScmpCmpEq)
        .build()
        .unwrap()]));
    let spec = b.spec(
        &[
            "/bin/sh",
            "-c",
            "kill -0 $$ && echo zero-ok; kill -USR1 $$ || echo usr1-refused; echo alive",
        ],
        profile(LinuxSeccompAction::ScmpActAllow, vec![r]),
    );
    let (status, out, err) = b.run(spec);
    assert_eq!(status.code(), Some(0), "stdout: {out}\nstderr: {err}");
    assert_eq!(out, "zero-ok\nusr1-refused\nalive\n", "stderr: {err}");
    assert!(err.contains("Permission denied"), "{err}");
}

#[test]
fn kill_process_ends_the_container_with_sigsys() {
    if !require_root(&["busybox"]) {
        return;
    }
    let b = Bundle::new("sc-kill");
    let spec = b.spec(
        &["/bin/mkdir", "/out/made"],
        deny_mkdir(LinuxSeccompAction::ScmpActKillProcess),
    );
    let (status, out, err) = b.run(spec);
    assert_eq!(
        status.signal(),
        Some(libc::SIGSYS),
        "{status:?} stdout: {out}\nstderr: {err}"
    );
    assert!(!b.out().join("made").exists());
}

/// Without no_new_privs the kernel wants CAP_SYS_ADMIN for a filter, which this
/// container does not keep: the filter goes in before the capabilities are dropped.
#[test]
fn a_filter_installs_without_no_new_privs_or_cap_sys_admin() {
    if !require_root(&["busybox"]) {
        return;
    }
    let b = Bundle::new("sc-nonnp");
    let mut spec = b.spec(
        &[
            "/bin/sh",
            "-c",
            "grep -E '^(NoNewPrivs|Seccomp|CapEff):' /proc/self/status; mkdir /out/made; echo rc=$?",
        ],
        deny_mkdir(LinuxSeccompAction::ScmpActErrno),
    );
    let mut p = spec.process().clone().unwrap();
    p.set_no_new_privileges(Some(false));
    // Not root either: the user switch runs under the filter too.
    let mut user = p.user().clone();
    user.set_uid(1000);
    user.set_gid(1000);
    p.set_user(user);
    spec.set_process(Some(p));
    let (status, out, err) = b.run(spec);
    assert_eq!(status.code(), Some(0), "stdout: {out}\nstderr: {err}");
    assert!(out.contains("NoNewPrivs:\t0"), "{out}");
    assert!(out.contains("Seccomp:\t2"), "{out}");
    // CAP_SYS_ADMIN is bit 21: not in the effective set.
    let eff = out
        .lines()
        .find_map(|l| l.strip_prefix("CapEff:"))
        .map(|v| u64::from_str_radix(v.trim(), 16).unwrap())
        .unwrap();
    assert_eq!(eff & (1 << 21), 0, "{out}");
    assert!(out.contains("rc=1"), "{out}");
    assert!(err.contains("Operation not permitted"), "{err}");
}

/// A process exec'd into the running container gets the same filter.
#[test]
fn exec_installs_the_same_filter() {
    if !require_root(&["busybox"]) {
        return;
    }
    let b = Bundle::new("sc-exec");
    for nnp in [true, false] {
        let seccomp = deny_mkdir(LinuxSeccompAction::ScmpActErrno);
        let mut spec = b.spec(&["/bin/sleep", "60"], seccomp);
        let mut p = spec.process().clone().unwrap();
        p.set_no_new_privileges(Some(nnp));
        spec.set_process(Some(p.clone()));
        let (_, mut g) = b.create(spec.clone());
        let c = g.0.as_mut().unwrap();
        c.start().unwrap();
        p.set_args(Some(vec![
            "/bin/sh".into(),
            "-c".into(),
            "mkdir /out/by-exec; echo rc=$?".into(),
        ]));
        spec.set_process(Some(p));
        let tag = format!("exec-{nnp}");
        let pid = executor::exec(
            c,
            ExecOpts {
                spec,
                stdin: Stdio::Null,
                stdout: Stdio::File(b.out().join(format!("{tag}.stdout"))),
                stderr: Stdio::File(b.out().join(format!("{tag}.stderr"))),
                cgroup_procs: vec![],
            },
        )
        .expect("exec");
        let mut status = 0;
        // SAFETY: our own child.
        unsafe { libc::waitpid(pid, &mut status, 0) };
        let out = b.read(&tag, "stdout");
        let err = b.read(&tag, "stderr");
        assert!(
            libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
            "{status:#x}"
        );
        assert_eq!(out, "rc=1\n", "no_new_privs {nnp}: {err}");
        assert!(err.contains("Operation not permitted"), "{err}");
        assert!(!b.out().join("by-exec").exists());
    }
}

/// What the executor cannot honour is refused at create, with nothing left behind.
#[test]
fn an_unsupported_action_is_a_spec_error_before_any_process() {
    if !require_root(&["busybox"]) {
        return;
    }
    let b = Bundle::new("sc-notify");
    let spec = b.spec(
        &["/bin/true"],
        deny_mkdir(LinuxSeccompAction::ScmpActNotify),
    );
    let id = unique("sc");
    let state = b.tmp.path().join("state").join(&id);
    let e = executor::create(CreateOpts::new(&id, b.dir(), spec, &state)).unwrap_err();
    assert!(
        matches!(&e, container::Error::InvalidSpec { reason, .. } if reason.contains("SCMP_ACT_NOTIFY")),
        "{e}"
    );
    assert!(!state.exists());
}
