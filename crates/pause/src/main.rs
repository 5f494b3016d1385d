//! `crust-pause`: the process that holds a pod sandbox's namespaces.
//!
//! It has to be tiny (one per pod; the upstream C pause takes 700 KiB resident, this one
//! about 12 KiB), so it is `no_std`, links no libc and talks to the kernel through raw
//! x86_64 `syscall`s. It is built by `crates/container/build.rs` with
//! `-C link-arg=-nostartfiles -C link-arg=-static -C relocation-model=static`, so the
//! `_start` below is the ELF entry point.
//!
//! Behaviour:
//! - every signal is blocked and then taken synchronously with `rt_sigtimedwait`:
//!   SIGCHLD reaps every exited child (as PID 1 of a pod's PID namespace it inherits the
//!   orphans), SIGTERM and SIGINT exit 0, anything else is ignored. Blocked signals that
//!   are waited for are delivered even to the init of a PID namespace, which the kernel
//!   otherwise shields from every signal it has no handler for.
//! - `crust-pause fork`: forks; the parent prints the child's pid and `\n` on stdout and
//!   exits 0; the child points fds 0, 1 and 2 at `/dev/null` (closing the launcher's
//!   pipe) and runs the loop above. The pause is thus reparented away from whoever
//!   started it, and when the launcher was started after `unshare(CLONE_NEWPID)` the
//!   child is PID 1 of the new PID namespace.
//! - no argument: runs the loop in place. Anything else: usage on stderr, exit 2.

#![no_std]
#![no_main]

use core::arch::{asm, global_asm};

const SYS_WRITE: usize = 1;
const SYS_OPEN: usize = 2;
const SYS_CLOSE: usize = 3;
const SYS_RT_SIGPROCMASK: usize = 14;
const SYS_DUP2: usize = 33;
const SYS_CLONE: usize = 56;
const SYS_WAIT4: usize = 61;
const SYS_KILL: usize = 62;
const SYS_RT_SIGTIMEDWAIT: usize = 128;
const SYS_EXIT_GROUP: usize = 231;

const SIGINT: usize = 2;
const SIGKILL: usize = 9;
const SIGTERM: usize = 15;
const SIGCHLD: usize = 17;

const SIG_BLOCK: usize = 0;
const WNOHANG: usize = 1;
/// wait4's pid -1.
const ANY_CHILD: usize = usize::MAX;
const O_RDWR: usize = 2;
const O_CLOEXEC: usize = 0o2000000;
/// The kernel's sigset_t: 64 signals, one bit each.
const SIGSET_SIZE: usize = 8;

// The ELF entry point. The kernel leaves `rsp` pointing at argc, then argv[], NULL,
// envp[], NULL, auxv, and 16-byte aligned. `start` gets that pointer as its first
// argument; after `call` pushes the return address the stack is at 8 mod 16, as the
// SysV ABI expects at a function's entry. `start` never returns (`ud2` if it did).
global_asm!(
    ".globl _start",
    ".type _start,@function",
    "_start:",
    "xor ebp, ebp",
    "mov rdi, rsp",
    "and rsp, -16",
    "call {start}",
    "ud2",
    start = sym start,
);

/// Raw `syscall` with up to five arguments; returns the kernel's value (negative errno
/// on failure).
#[inline(always)]
unsafe fn syscall5(n: usize, a1: usize, a2: usize, a3: usize, a4: usize, a5: usize) -> isize {
    let ret: isize;
    asm!(
        "syscall",
        inlateout("rax") n as isize => ret,
        in("rdi") a1,
        in("rsi") a2,
        in("rdx") a3,
        in("r10") a4,
        in("r8") a5,
        lateout("rcx") _,
        lateout("r11") _,
        options(nostack),
    );
    ret
}

#[inline(always)]
fn syscall(n: usize, a1: usize, a2: usize, a3: usize, a4: usize) -> isize {
    // SAFETY: every call site passes arguments valid for that syscall (pointers to live
    // locals or null); the syscalls used here touch no memory of ours beyond those.
    unsafe { syscall5(n, a1, a2, a3, a4, 0) }
}

fn exit(code: usize) -> ! {
    loop {
        syscall(SYS_EXIT_GROUP, code, 0, 0, 0);
    }
}

/// Writes all of `buf` to `fd`; false on any error.
fn write_all(fd: usize, mut buf: &[u8]) -> bool {
    while !buf.is_empty() {
        let n = syscall(SYS_WRITE, fd, buf.as_ptr() as usize, buf.len(), 0);
        if n == -4 {
            continue; // EINTR
        }
        if n <= 0 {
            return false;
        }
        buf = &buf[n as usize..];
    }
    true
}

/// True when the NUL-terminated string at `p` equals `want` (which ends in NUL).
///
/// # Safety
/// `p` must point to a NUL-terminated string.
unsafe fn c_str_eq(p: *const u8, want: &[u8]) -> bool {
    for (i, &w) in want.iter().enumerate() {
        if *p.add(i) != w {
            return false;
        }
    }
    true
}

extern "C" fn start(sp: *const usize) -> ! {
    // SAFETY: `sp` is the initial stack pointer the kernel set up: argc, then argc
    // pointers to NUL-terminated strings.
    let (argc, arg1) = unsafe {
        let argc = *sp;
        let arg1 = if argc >= 2 {
            *sp.add(2) as *const u8
        } else {
            core::ptr::null()
        };
        (argc, arg1)
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
        if unsafe { c_str_eq(arg1, b"fork\0") } {
            fork_and_detach();
        } else {
            write_all(2, b"usage: crust-pause [fork]\n");
            exit(2);
        }
    }
    wait_loop(&all)
}

/// Forks; the parent reports the child's pid and exits, the child returns with its
/// standard fds on /dev/null.
fn fork_and_detach() {
    // clone(SIGCHLD) with no new stack is fork(): the child continues on a copy of ours.
    let pid = syscall(SYS_CLONE, SIGCHLD, 0, 0, 0);
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
            syscall(SYS_CLOSE, fd as usize, 0, 0, 0);
        }
    } else {
        // Still let go of the launcher's pipe.
        for target in 0..3 {
            syscall(SYS_CLOSE, target, 0, 0, 0);
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

#[panic_handler]
fn panic(_: &core::panic::PanicInfo) -> ! {
    exit(127)
}
