//! What both binaries of this crate (`crust-pause`, `crust-monitor`) share in place of
//! a libc: the ELF entry point, raw x86_64 `syscall`s, the few memory functions the
//! compiler may call on its own, and the panic handler.
//!
//! The crate root of each binary defines `extern "C" fn start(sp: *const usize) -> !`,
//! which `_start` below calls with the initial stack pointer.

// Each binary uses a subset of the numbers and helpers.
#![allow(dead_code)]

use core::arch::{asm, global_asm};

// The entry point, the numbers and the `syscall` instructions below are x86_64's.
#[cfg(not(target_arch = "x86_64"))]
compile_error!("crust-pause has no port to this target_arch: sys.rs is x86_64's");

pub const SYS_READ: usize = 0;
pub const SYS_WRITE: usize = 1;
pub const SYS_OPEN: usize = 2;
pub const SYS_CLOSE: usize = 3;
pub const SYS_POLL: usize = 7;
pub const SYS_PREAD64: usize = 17;
pub const SYS_RT_SIGACTION: usize = 13;
pub const SYS_RT_SIGPROCMASK: usize = 14;
pub const SYS_WRITEV: usize = 20;
pub const SYS_DUP2: usize = 33;
pub const SYS_CLONE: usize = 56;
pub const SYS_WAIT4: usize = 61;
pub const SYS_KILL: usize = 62;
pub const SYS_FCNTL: usize = 72;
pub const SYS_FSYNC: usize = 74;
pub const SYS_CHDIR: usize = 80;
pub const SYS_RENAME: usize = 82;
pub const SYS_UNLINK: usize = 87;
pub const SYS_SETSID: usize = 112;
pub const SYS_RT_SIGTIMEDWAIT: usize = 128;
pub const SYS_PIVOT_ROOT: usize = 155;
pub const SYS_MOUNT: usize = 165;
pub const SYS_UMOUNT2: usize = 166;
pub const SYS_CLOCK_GETTIME: usize = 228;
pub const SYS_EXIT_GROUP: usize = 231;
pub const SYS_UNSHARE: usize = 272;
pub const SYS_SETNS: usize = 308;
pub const SYS_SIGNALFD4: usize = 289;
pub const SYS_RECVFROM: usize = 45;
pub const SYS_SENDMSG: usize = 46;
pub const SYS_RECVMSG: usize = 47;
pub const SYS_ACCEPT4: usize = 288;
pub const SYS_OPENAT: usize = 257;
pub const SYS_CLONE3: usize = 435;

pub const SIGHUP: usize = 1;
pub const SIGINT: usize = 2;
pub const SIGKILL: usize = 9;
pub const SIGUSR1: usize = 10;
pub const SIGTERM: usize = 15;
pub const SIGCHLD: usize = 17;

pub const EINTR: isize = 4;
pub const E2BIG: isize = 7;
pub const EINVAL: isize = 22;
pub const ENOSYS: isize = 38;
pub const EIO: isize = 5;
pub const EAGAIN: isize = 11;
pub const ECHILD: isize = 10;

pub const SIG_BLOCK: usize = 0;
/// `rt_sigaction`'s handler value for the default action.
pub const SIG_DFL: usize = 0;
pub const WNOHANG: usize = 1;
/// wait4's pid -1.
pub const ANY_CHILD: usize = usize::MAX;

pub const O_RDONLY: usize = 0;
pub const O_WRONLY: usize = 1;
pub const O_RDWR: usize = 2;
pub const O_CREAT: usize = 0o100;
pub const O_TRUNC: usize = 0o1000;
pub const O_APPEND: usize = 0o2000;
pub const O_NONBLOCK: usize = 0o4000;
pub const O_DIRECTORY: usize = 0o200000;
pub const O_NOFOLLOW: usize = 0o400000;
pub const O_CLOEXEC: usize = 0o2000000;

/// `unshare` flag: a new mount namespace.
pub const CLONE_NEWNS: usize = 0x2_0000;

/// `mount` flags.
pub const MS_RDONLY: usize = 0x1;
pub const MS_NOSUID: usize = 0x2;
pub const MS_NODEV: usize = 0x4;
pub const MS_NOEXEC: usize = 0x8;
pub const MS_REC: usize = 0x4000;
pub const MS_PRIVATE: usize = 1 << 18;
/// `umount2` flag: detach now, free when no longer busy.
pub const MNT_DETACH: usize = 0x2;

pub const F_GETFL: usize = 3;
pub const F_SETFL: usize = 4;

pub const MSG_DONTWAIT: usize = 0x40;
pub const MSG_NOSIGNAL: usize = 0x4000;
pub const MSG_CMSG_CLOEXEC: usize = 0x4000_0000;
pub const SOL_SOCKET: i32 = 1;
pub const SCM_RIGHTS: i32 = 1;

pub const POLLIN: i16 = 0x1;
pub const POLLPRI: i16 = 0x2;
pub const POLLOUT: i16 = 0x4;
pub const POLLERR: i16 = 0x8;
pub const POLLHUP: i16 = 0x10;
pub const POLLNVAL: i16 = 0x20;

pub const CLOCK_REALTIME: usize = 0;

/// The kernel's sigset_t: 64 signals, one bit each.
pub const SIGSET_SIZE: usize = 8;
/// `signalfd4` flags (the same bits as O_NONBLOCK and O_CLOEXEC).
pub const SFD_NONBLOCK: usize = O_NONBLOCK;
pub const SFD_CLOEXEC: usize = O_CLOEXEC;
/// `struct signalfd_siginfo` is 128 bytes; `ssi_signo` (u32) comes first.
pub const SIGINFO_SIZE: usize = 128;

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
    start = sym crate::start,
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
pub fn syscall(n: usize, a1: usize, a2: usize, a3: usize, a4: usize) -> isize {
    // SAFETY: every call site passes arguments valid for that syscall (pointers to live
    // locals, statics or argv strings, or null); the syscalls used here touch no memory
    // of ours beyond those.
    unsafe { syscall5(n, a1, a2, a3, a4, 0) }
}

/// [`syscall`] with a fifth argument (`mount`'s data).
#[inline(always)]
pub fn syscall_5(n: usize, a1: usize, a2: usize, a3: usize, a4: usize, a5: usize) -> isize {
    // SAFETY: as for `syscall`.
    unsafe { syscall5(n, a1, a2, a3, a4, a5) }
}

pub fn exit(code: usize) -> ! {
    loop {
        syscall(SYS_EXIT_GROUP, code, 0, 0, 0);
    }
}

/// Writes all of `buf` to `fd`; false on any error.
pub fn write_all(fd: usize, mut buf: &[u8]) -> bool {
    while !buf.is_empty() {
        let n = syscall(SYS_WRITE, fd, buf.as_ptr() as usize, buf.len(), 0);
        if n == -EINTR {
            continue;
        }
        if n <= 0 {
            return false;
        }
        buf = &buf[n as usize..];
    }
    true
}

/// Closes `fd`, ignoring errors (after close the fd is gone even on EINTR).
pub fn close(fd: usize) {
    syscall(SYS_CLOSE, fd, 0, 0, 0);
}

/// True when the NUL-terminated string at `p` equals `want` (which ends in NUL).
///
/// # Safety
/// `p` must point to a NUL-terminated string.
pub unsafe fn c_str_eq(p: *const u8, want: &[u8]) -> bool {
    for (i, &w) in want.iter().enumerate() {
        if *p.add(i) != w {
            return false;
        }
    }
    true
}

// The memory functions rustc and LLVM call on their own (for copies, moves and zeroing
// of arrays, slice comparisons, `CStr::from_ptr`). Without libc nothing else provides
// them. The copies and fills are `rep movsb`/`rep stosb`; the byte loops read through
// `read_volatile`, so LLVM cannot turn them back into calls to themselves.

/// # Safety
/// The C contract: `n` bytes at `src` readable, at `dst` writable, no overlap.
#[no_mangle]
pub unsafe extern "C" fn memcpy(dst: *mut u8, src: *const u8, n: usize) -> *mut u8 {
    asm!(
        "rep movsb",
        inout("rcx") n => _,
        inout("rdi") dst => _,
        inout("rsi") src => _,
        options(nostack, preserves_flags),
    );
    dst
}

/// # Safety
/// The C contract: `n` bytes at `src` readable, at `dst` writable; they may overlap.
#[no_mangle]
pub unsafe extern "C" fn memmove(dst: *mut u8, src: *const u8, n: usize) -> *mut u8 {
    if (dst as usize).wrapping_sub(src as usize) >= n {
        // dst before src, or no overlap: a forward copy never reads a byte it wrote.
        return memcpy(dst, src, n);
    }
    if n == 0 {
        return dst;
    }
    // dst inside [src, src + n): copy backwards, from the last byte down.
    asm!(
        "std",
        "rep movsb",
        "cld",
        inout("rcx") n => _,
        inout("rdi") dst.add(n - 1) => _,
        inout("rsi") src.add(n - 1) => _,
        options(nostack),
    );
    dst
}

/// # Safety
/// The C contract: `n` bytes at `dst` writable.
#[no_mangle]
pub unsafe extern "C" fn memset(dst: *mut u8, c: i32, n: usize) -> *mut u8 {
    asm!(
        "rep stosb",
        inout("rcx") n => _,
        inout("rdi") dst => _,
        in("al") c as u8,
        options(nostack, preserves_flags),
    );
    dst
}

/// # Safety
/// The C contract: `n` bytes readable at `a` and at `b`.
#[no_mangle]
pub unsafe extern "C" fn memcmp(a: *const u8, b: *const u8, n: usize) -> i32 {
    for i in 0..n {
        let x = core::ptr::read_volatile(a.add(i));
        let y = core::ptr::read_volatile(b.add(i));
        if x != y {
            return x as i32 - y as i32;
        }
    }
    0
}

/// # Safety
/// As for [`memcmp`].
#[no_mangle]
pub unsafe extern "C" fn bcmp(a: *const u8, b: *const u8, n: usize) -> i32 {
    memcmp(a, b, n)
}

/// # Safety
/// `s` must point to a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn strlen(s: *const u8) -> usize {
    let mut n = 0;
    while core::ptr::read_volatile(s.add(n)) != 0 {
        n += 1;
    }
    n
}

#[panic_handler]
fn panic(_: &core::panic::PanicInfo) -> ! {
    exit(127)
}
