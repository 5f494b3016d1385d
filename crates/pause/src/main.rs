//! `crust-pause`: the process that holds a pod sandbox's namespaces.
//!
//! It has to be tiny (one per pod; the upstream C pause takes 700 KiB resident, this one
//! about 12 KiB), so it is `no_std`, links no libc and talks to the kernel through raw
//! x86_64 `syscall`s (`sys.rs`, shared with `crust-monitor`). It is built by
//! `crates/container/build.rs` with
//! `-C link-arg=-nostartfiles -C link-arg=-static -C relocation-model=static`, so the
//! `_start` in `sys.rs` is the ELF entry point and calls [`start`] here.
//!
//! Behaviour:
//! - every signal is blocked and then taken synchronously with `rt_sigtimedwait`:
//!   SIGCHLD reaps every exited child (as PID 1 of a pod's PID namespace it inherits the
//!   orphans), SIGTERM and SIGINT exit 0, anything else is ignored. Blocked signals that
//!   are waited for are delivered even to the init of a PID namespace, which the kernel
//!   otherwise shields from every signal it has no handler for.
//! - `crust-pause fork [--keep-root | --mount-ns NSFD] [FD]`: unless `--keep-root`, the
//!   launcher first moves into an empty root (see below), or joins the mount namespace
//!   NSFD, one crustd made so once for all pauses; then it forks; the parent prints the
//!   child's pid and `\n` on stdout and exits 0; with FD (a cgroup2 directory) the
//!   child is cloned into that cgroup (`CLONE_INTO_CGROUP`: no global cgroup lock,
//!   unlike a write of its pid to `cgroup.procs`; kernels before 5.7 get the launcher
//!   moved there first instead); the child points fds 0, 1 and 2 at `/dev/null`
//!   (opened by the launcher, closing its pipe) and runs the loop above. The pause is thus reparented away from whoever
//!   started it, and when the launcher was started after `unshare(CLONE_NEWPID)` the
//!   child is PID 1 of the new PID namespace.
//! - the empty root: the pause is PID 1 of a pod sharing its PID namespace, so a
//!   container that may ptrace it (`CAP_SYS_PTRACE`) can open `/proc/1/root` and
//!   `/proc/1/cwd`. They lead to an empty read-only tmpfs, the only mount of the
//!   pause's own mount namespace, and `..` from there is that tmpfs again: nothing of
//!   the host's. The launcher makes it before it forks, so the pause never has the
//!   host's root, and its pid is only printed after. A step that fails makes the
//!   launcher print `-ERRNO\n` and exit with the step's number (`STEP_*` here and in
//!   `crates/container/src/pause.rs`).
//! - no argument: runs the loop in place. Anything else: usage on stderr, exit 2.

#![no_std]
#![no_main]

mod sys;

use sys::{
    c_str_eq, close, exit, syscall, syscall_5, write_all, ANY_CHILD, CLONE_NEWNS, E2BIG, EINVAL,
    ENOSYS, MNT_DETACH, MS_NODEV, MS_NOEXEC, MS_NOSUID, MS_PRIVATE, MS_RDONLY, MS_REC, O_CLOEXEC,
    O_RDWR, O_WRONLY, SIGCHLD, SIGINT, SIGKILL, SIGSET_SIZE, SIGTERM, SIG_BLOCK, SYS_CHDIR,
    SYS_CLONE, SYS_CLONE3, SYS_DUP2, SYS_KILL, SYS_MOUNT, SYS_OPEN, SYS_OPENAT, SYS_PIVOT_ROOT,
    SYS_RT_SIGPROCMASK, SYS_RT_SIGTIMEDWAIT, SYS_SETNS, SYS_UMOUNT2, SYS_UNSHARE, SYS_WAIT4, SYS_WRITE,
    WNOHANG,
};

// What failed on the way into the empty root: the launcher's exit status, named by
// `step_name` in crates/container/src/pause.rs (1 to 5 are the forked child's steps
// there; 1 and 2 as exit statuses are this file's own fork failure and usage).
/// `unshare(CLONE_NEWNS)`.
const STEP_MOUNT_NS: usize = 6;
/// Every mount made private, so nothing done here propagates to the host.
const STEP_PRIVATE: usize = 7;
/// The tmpfs mounted.
const STEP_TMPFS: usize = 8;
/// Into it, and `pivot_root`.
const STEP_PIVOT_ROOT: usize = 9;
/// The host's root (now stacked on the tmpfs) detached.
const STEP_DETACH: usize = 10;
/// `setns` into the shared empty-root mount namespace (`--mount-ns FD`).
const STEP_JOIN_MOUNT_NS: usize = 11;

/// An existing directory of the host the tmpfs is mounted on, in the launcher's own
/// mount namespace: `/proc` is there wherever crustd runs.
const MOUNT_POINT: &core::ffi::CStr = c"/proc";

extern "C" fn start(sp: *const usize) -> ! {
    // SAFETY: `sp` is the initial stack pointer the kernel set up: argc, then argc
    // pointers to NUL-terminated strings.
    let argc = unsafe { *sp };
    // SAFETY: as above; only called for `i` below argc.
    let arg = |i: usize| unsafe { *sp.add(1 + i) as *const u8 };

    // Block first, so neither the parent nor the child can be killed by a signal's
    // default action once we are past this line.
    let all: u64 = !0;
    syscall(
        SYS_RT_SIGPROCMASK,
        SIG_BLOCK,
        &all as *const u64 as usize,
        0,
        SIGSET_SIZE,
    );

    if argc >= 2 {
        // SAFETY: argv[1] to argv[argc - 1] exist and are NUL-terminated.
        match unsafe { fork_args(argc, arg) } {
            Some((root, cgroup)) => fork_and_detach(root, cgroup),
            None => {
                write_all(
                    2,
                    b"usage: crust-pause [fork [--keep-root | --mount-ns FD] [CGROUP2_DIR_FD]]\n",
                );
                exit(2);
            }
        }
    }
    wait_loop(&all)
}

/// Where the pause's root is.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Root {
    /// A mount namespace of its own on an empty tmpfs ([`enter_empty_root`]).
    Empty,
    /// The launcher's (`--keep-root`).
    Keep,
    /// The mount namespace behind this fd, already an empty root (`--mount-ns FD`).
    Join(usize),
}

/// `fork [--keep-root | --mount-ns FD] [CGROUP2_FD]` as (root, CGROUP2_FD); `None` for
/// anything else.
///
/// # Safety
/// `arg(i)` is a NUL-terminated string for every `i` below `argc`.
unsafe fn fork_args(
    argc: usize,
    arg: impl Fn(usize) -> *const u8,
) -> Option<(Root, Option<usize>)> {
    if argc > 5 || !c_str_eq(arg(1), b"fork\0") {
        return None;
    }
    let (mut root, mut cgroup) = (Root::Empty, None);
    let mut i = 2;
    while i < argc {
        let a = arg(i);
        let first = root == Root::Empty && cgroup.is_none();
        if first && c_str_eq(a, b"--keep-root\0") {
            root = Root::Keep;
        } else if first && c_str_eq(a, b"--mount-ns\0") && i + 1 < argc {
            i += 1;
            root = Root::Join(parse_fd(arg(i))?);
        } else if cgroup.is_none() {
            cgroup = Some(parse_fd(a)?);
        } else {
            return None;
        }
        i += 1;
    }
    Some((root, cgroup))
}

/// A decimal fd number; `None` for anything else.
///
/// # Safety
/// `p` points to a NUL-terminated string.
unsafe fn parse_fd(mut p: *const u8) -> Option<usize> {
    let mut n: usize = 0;
    let mut digits = 0;
    loop {
        let c = *p;
        if c == 0 {
            break;
        }
        if !c.is_ascii_digit() || digits == 9 {
            return None;
        }
        n = n * 10 + (c - b'0') as usize;
        digits += 1;
        p = p.add(1);
    }
    (digits > 0).then_some(n)
}

/// The kernel's `struct clone_args` up to `cgroup` (CLONE_ARGS_SIZE_VER2).
#[repr(C)]
struct CloneArgs {
    flags: u64,
    pidfd: u64,
    child_tid: u64,
    parent_tid: u64,
    exit_signal: u64,
    stack: u64,
    stack_size: u64,
    tls: u64,
    set_tid: u64,
    set_tid_size: u64,
    cgroup: u64,
}

const CLONE_INTO_CGROUP: u64 = 0x2_0000_0000;

/// fork(), into the cgroup2 directory `cgroup` when given.
fn fork_into(cgroup: Option<usize>) -> isize {
    if let Some(fd) = cgroup {
        let args = CloneArgs {
            flags: CLONE_INTO_CGROUP,
            pidfd: 0,
            child_tid: 0,
            parent_tid: 0,
            exit_signal: SIGCHLD as u64,
            stack: 0,
            stack_size: 0,
            tls: 0,
            set_tid: 0,
            set_tid_size: 0,
            cgroup: fd as u64,
        };
        let pid = syscall(
            SYS_CLONE3,
            &args as *const CloneArgs as usize,
            core::mem::size_of::<CloneArgs>(),
            0,
            0,
        );
        if pid >= 0 || !matches!(-pid, E2BIG | EINVAL | ENOSYS) {
            return pid;
        }
        // No CLONE_INTO_CGROUP here: move this process, and so the child, the slow way.
        let procs = syscall(
            SYS_OPENAT,
            fd,
            c"cgroup.procs".as_ptr() as usize,
            O_WRONLY | O_CLOEXEC,
            0,
        );
        if procs < 0 {
            return procs;
        }
        let rc = syscall(SYS_WRITE, procs as usize, b"0".as_ptr() as usize, 1, 0);
        close(procs as usize);
        if rc != 1 {
            return if rc < 0 { rc } else { -EINVAL };
        }
    }
    // clone(SIGCHLD) with no new stack is fork(): the child continues on a copy of ours.
    syscall(SYS_CLONE, SIGCHLD, 0, 0, 0)
}

/// Into the empty root unless `keep_root`, then forks; the parent reports the child's
/// pid and exits, the child returns with its standard fds on /dev/null.
fn fork_and_detach(root: Root, cgroup: Option<usize>) {
    // Opened while the host's /dev is there; the child's 0, 1 and 2.
    let null = syscall(
        SYS_OPEN,
        c"/dev/null".as_ptr() as usize,
        O_RDWR | O_CLOEXEC,
        0,
        0,
    );
    let entered = match root {
        Root::Keep => Ok(()),
        Root::Empty => enter_empty_root(),
        Root::Join(fd) => join_mount_ns(fd),
    };
    if let Err((step, errno)) = entered {
        let mut buf = [0u8; 24];
        let line = decimal_line(errno, &mut buf);
        write_all(1, b"-");
        write_all(1, line);
        exit(step);
    }
    let pid = fork_into(cgroup);
    if let Some(fd) = cgroup {
        close(fd);
    }
    if pid < 0 {
        write_all(2, b"crust-pause: fork failed\n");
        exit(1);
    }
    if pid > 0 {
        let mut buf = [0u8; 24];
        let line = decimal_line(pid as usize, &mut buf);
        if write_all(1, line) {
            exit(0);
        }
        // Nobody will learn the child's pid: don't leave it running.
        syscall(SYS_KILL, pid as usize, SIGKILL, 0, 0);
        exit(1);
    }
    let fd = null;
    if fd >= 0 {
        for target in 0..3 {
            syscall(SYS_DUP2, fd as usize, target, 0, 0);
        }
        if fd > 2 {
            close(fd as usize);
        }
    } else {
        // Still let go of the launcher's pipe.
        for target in 0..3 {
            close(target);
        }
    }
}

/// Into the mount namespace behind `fd`, which crustd made once with
/// [`enter_empty_root`] (a launcher of its own, killed after): its root and cwd become
/// that namespace's empty tmpfs, without copying the host's mount table (a copy and a
/// detach of every mount, 2 to 3 ms at 70 pods' mounts, more with each pod).
fn join_mount_ns(fd: usize) -> Result<(), (usize, usize)> {
    let rc = syscall(SYS_SETNS, fd, CLONE_NEWNS, 0, 0);
    close(fd);
    if rc < 0 {
        return Err((STEP_JOIN_MOUNT_NS, -rc as usize));
    }
    Ok(())
}

/// A mount namespace of this process's own whose only mount is an empty read-only
/// tmpfs, which is also its root and cwd; the pause forked after inherits all three.
/// Err: the step that failed and its errno.
///
/// The namespace starts as a copy of the host's mount table (the kernel has no other
/// way); every copied mount is made private, so what follows does not propagate back,
/// the tmpfs goes on [`MOUNT_POINT`], `pivot_root(".", ".")` stacks the old root on top
/// of it, and one lazy unmount drops the whole copy (and with it the references it held
/// to other pods' namespace pins). In a pod's user namespace all of this is allowed to
/// its root, the launcher: the namespace it makes is that user namespace's.
fn enter_empty_root() -> Result<(), (usize, usize)> {
    let check = |step: usize, rc: isize| {
        if rc < 0 {
            Err((step, -rc as usize))
        } else {
            Ok(())
        }
    };
    let dot = c".".as_ptr() as usize;
    check(STEP_MOUNT_NS, syscall(SYS_UNSHARE, CLONE_NEWNS, 0, 0, 0))?;
    let root = c"/".as_ptr() as usize;
    check(
        STEP_PRIVATE,
        syscall_5(SYS_MOUNT, 0, root, 0, MS_REC | MS_PRIVATE, 0),
    )?;
    // Read-only from the start: pivot_root needs no directory in it.
    let flags = MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC;
    check(
        STEP_TMPFS,
        syscall_5(
            SYS_MOUNT,
            c"tmpfs".as_ptr() as usize,
            MOUNT_POINT.as_ptr() as usize,
            c"tmpfs".as_ptr() as usize,
            flags,
            c"mode=0555,size=4k,nr_inodes=1".as_ptr() as usize,
        ),
    )?;
    check(
        STEP_PIVOT_ROOT,
        syscall(SYS_CHDIR, MOUNT_POINT.as_ptr() as usize, 0, 0, 0),
    )?;
    check(STEP_PIVOT_ROOT, syscall(SYS_PIVOT_ROOT, dot, dot, 0, 0))?;
    // "." now finds the old root on top of the tmpfs.
    check(STEP_DETACH, syscall(SYS_UMOUNT2, dot, MNT_DETACH, 0, 0))?;
    check(STEP_DETACH, syscall(SYS_CHDIR, root, 0, 0, 0))
}

/// `n` in decimal followed by '\n', in the tail of `buf`.
fn decimal_line(mut n: usize, buf: &mut [u8; 24]) -> &[u8] {
    let mut i = buf.len() - 1;
    buf[i] = b'\n';
    loop {
        i -= 1;
        buf[i] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    &buf[i..]
}

fn wait_loop(set: &u64) -> ! {
    loop {
        let sig = syscall(
            SYS_RT_SIGTIMEDWAIT,
            set as *const u64 as usize,
            0,
            0,
            SIGSET_SIZE,
        );
        match sig {
            s if s == SIGCHLD as isize => reap(),
            s if s == SIGTERM as isize || s == SIGINT as isize => exit(0),
            _ => {} // other signals, EINTR (e.g. after SIGSTOP/SIGCONT)
        }
    }
}

/// Reaps every child that has exited; SIGCHLD is not queued, so one signal may stand
/// for many children.
fn reap() {
    while syscall(SYS_WAIT4, ANY_CHILD, 0, WNOHANG, 0) > 0 {}
}
