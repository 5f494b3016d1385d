//! Root tests of seccomp in the OCI executor (`container::executor`): a spec's
//! `linux.seccomp` compiled by crust and installed in the container's init and in an
//! exec'd process. A denied call fails with the rule's errno, an argument-conditioned
//! rule tells calls apart, `KILL_PROCESS` ends the container with SIGSYS, a filter goes
//! in without `noNewPrivileges` and without `CAP_SYS_ADMIN` in the container, and a
//! spec the executor cannot honour fails before any process is made.
//!
//! Containers are force-deleted by a guard, temp dirs removed by theirs; every
//! container has a new network namespace.

use std::os::unix::process::ExitStatusExt;

use container::executor::oci_spec::runtime::{
    LinuxSeccomp, LinuxSeccompAction, LinuxSeccompArgBuilder, LinuxSeccompBuilder,
    LinuxSeccompOperator, LinuxSyscall, LinuxSyscallBuilder, Spec,
};
use container::executor::{self, CreateOpts, ExecOpts, Stdio};
use crust_e2e::bundle::Bundle;
use crust_e2e::{require_root, unique};

/// The shared bundle's spec (three capabilities, none of them `CAP_SYS_ADMIN`;
/// no_new_privs) running `args` under `seccomp`.
fn spec(b: &Bundle, args: &[&str], seccomp: LinuxSeccomp) -> Spec {
    let mut spec = b.spec(args);
    let mut linux = spec.linux().clone().unwrap();
    linux.set_seccomp(Some(seccomp));
    spec.set_linux(Some(linux));
    spec
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
    let spec = spec(
        &b,
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
    let spec = spec(
        &b,
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
    let spec = spec(
        &b,
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
    let mut spec = spec(&b,
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
        let mut spec = spec(&b, &["/bin/sleep", "60"], seccomp);
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
                cgroup_dirs: vec![],
                controlling_tty: false,
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
    let spec = spec(
        &b,
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
