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
//! - `crust-pause fork [FD]`: forks; the parent prints the child's pid and `\n` on stdout and
//!   exits 0; with FD (a cgroup2 directory) the child is cloned into that cgroup
//!   (`CLONE_INTO_CGROUP`: no global cgroup lock, unlike a write of its pid to
//!   `cgroup.procs`; kernels before 5.7 get the launcher moved there first instead); the child points fds 0, 1 and 2 at `/dev/null` (closing the launcher's
//!   pipe) and runs the loop above. The pause is thus reparented away from whoever
//!   started it, and when the launcher was started after `unshare(CLONE_NEWPID)` the
//!   child is PID 1 of the new PID namespace.
//! - no argument: runs the loop in place. Anything else: usage on stderr, exit 2.

#![no_std]
#![no_main]

mod sys;

use sys::{
    c_str_eq, close, exit, syscall, write_all, ANY_CHILD, E2BIG, EINVAL, ENOSYS, O_CLOEXEC, O_RDWR,
    O_WRONLY, SIGCHLD, SIGINT, SIGKILL, SIGSET_SIZE, SIGTERM, SIG_BLOCK, SYS_CLONE, SYS_CLONE3,
    SYS_DUP2, SYS_KILL, SYS_OPEN, SYS_OPENAT, SYS_RT_SIGPROCMASK, SYS_RT_SIGTIMEDWAIT, SYS_WAIT4,
    SYS_WRITE, WNOHANG,
};

extern "C" fn start(sp: *const usize) -> ! {
    // SAFETY: `sp` is the initial stack pointer the kernel set up: argc, then argc
    // pointers to NUL-terminated strings.
    let (argc, arg1, arg2) = unsafe {
        let argc = *sp;
        let arg = |i: usize| {
            if argc > i {
                *sp.add(1 + i) as *const u8
            } else {
                core::ptr::null()
            }
        };
        (argc, arg(1), arg(2))
    };

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
        // SAFETY: argv[1] exists and is NUL-terminated.
        // SAFETY: argv[2], when there, is NUL-terminated too.
        let cgroup = if arg2.is_null() {
            Some(None)
        } else {
            unsafe { parse_fd(arg2) }.map(Some)
        };
        match cgroup {
            // SAFETY: argv[1] exists and is NUL-terminated.
            Some(cgroup) if argc <= 3 && unsafe { c_str_eq(arg1, b"fork\0") } => {
                fork_and_detach(cgroup)
            }
            _ => {
                write_all(2, b"usage: crust-pause [fork [CGROUP2_DIR_FD]]\n");
                exit(2);
            }
        }
    }
    wait_loop(&all)
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

/// Forks; the parent reports the child's pid and exits, the child returns with its
/// standard fds on /dev/null.
fn fork_and_detach(cgroup: Option<usize>) {
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
        let line = format_pid(pid as usize, &mut buf);
        if write_all(1, line) {
            exit(0);
        }
        // Nobody will learn the child's pid: don't leave it running.
        syscall(SYS_KILL, pid as usize, SIGKILL, 0, 0);
        exit(1);
    }
    let fd = syscall(
        SYS_OPEN,
        c"/dev/null".as_ptr() as usize,
        O_RDWR | O_CLOEXEC,
        0,
        0,
    );
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

/// `pid` in decimal followed by '\n', in the tail of `buf`.
fn format_pid(mut pid: usize, buf: &mut [u8; 24]) -> &[u8] {
    let mut i = buf.len() - 1;
    buf[i] = b'\n';
    loop {
        i -= 1;
        buf[i] = b'0' + (pid % 10) as u8;
        pid /= 10;
        if pid == 0 {
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
