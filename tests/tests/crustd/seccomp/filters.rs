//! Reading a running process's seccomp filters (ptrace, `PTRACE_SECCOMP_GET_FILTER`) and
//! evaluating them: a classic-BPF interpreter over `struct seccomp_data`, the verdict
//! the kernel would take over all filters, and the x86_64/i386 syscall names from the
//! kernel headers for messages.

use std::collections::BTreeMap;

pub const AUDIT_ARCH_X86_64: u32 = 0xc000_003e;
pub const AUDIT_ARCH_I386: u32 = 0x4000_0003;
pub const AUDIT_ARCH_AARCH64: u32 = 0xc000_00b7;
pub const X32_SYSCALL_BIT: u32 = 0x4000_0000;
/// `<linux/ptrace.h>`; not in the libc crate.
const PTRACE_SECCOMP_GET_FILTER: libc::c_uint = 0x420c;

/// One `struct seccomp_data`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Data {
    pub nr: u32,
    pub arch: u32,
    pub ip: u64,
    pub args: [u64; 6],
}

impl Data {
    pub fn new(arch: u32, nr: u32, args: [u64; 6]) -> Data {
        Data {
            nr,
            arch,
            ip: 0x7f00_0000_1000,
            args,
        }
    }

    /// The 64 bytes the filter loads from, in this machine's (little-endian) order.
    fn bytes(&self) -> [u8; 64] {
        let mut b = [0u8; 64];
        b[0..4].copy_from_slice(&self.nr.to_le_bytes());
        b[4..8].copy_from_slice(&self.arch.to_le_bytes());
        b[8..16].copy_from_slice(&self.ip.to_le_bytes());
        for (i, a) in self.args.iter().enumerate() {
            b[16 + 8 * i..24 + 8 * i].copy_from_slice(&a.to_le_bytes());
        }
        b
    }
}

/// Every filter installed on `pid`, most recent first (index 0, as the kernel numbers
/// them): seizes the process, interrupts it, reads, detaches. Runs on a thread of its
/// own, since ptrace belongs to the thread that attached.
pub fn filters_of(pid: i32) -> Result<Vec<Vec<libc::sock_filter>>, String> {
    wait_execed(pid)?;
    std::thread::spawn(move || read_filters(pid))
        .join()
        .unwrap()
}

/// Waits until `pid` runs `sleep` alone: StartContainer may return while the runtime's
/// (multi-threaded) init is still in `execve`, and a thread seized then is gone after.
fn wait_execed(pid: i32) -> Result<(), String> {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default();
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
        if comm.trim() == "sleep" && status.lines().any(|l| l == "Threads:\t1") {
            return Ok(());
        }
        if std::time::Instant::now() > deadline {
            return Err(format!("{pid} does not run sleep alone: {comm:?}"));
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
}

fn errno() -> std::io::Error {
    std::io::Error::last_os_error()
}

fn read_filters(pid: i32) -> Result<Vec<Vec<libc::sock_filter>>, String> {
    let null = std::ptr::null_mut::<libc::c_void>();
    // SAFETY: ptrace requests on a process this test started (through a daemon); the
    // buffers handed to PTRACE_SECCOMP_GET_FILTER have room for the count it reported.
    unsafe {
        if libc::ptrace(libc::PTRACE_SEIZE, pid, null, null) != 0 {
            return Err(format!("PTRACE_SEIZE {pid}: {}", errno()));
        }
        let detach = || libc::ptrace(libc::PTRACE_DETACH, pid, null, null);
        if libc::ptrace(libc::PTRACE_INTERRUPT, pid, null, null) != 0 {
            let e = format!("PTRACE_INTERRUPT {pid}: {}", errno());
            detach();
            return Err(e);
        }
        // The stop, within a few seconds (never a hang if it does not come).
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        let mut status = 0;
        loop {
            match libc::waitpid(pid, &mut status, libc::__WALL | libc::WNOHANG) {
                0 if std::time::Instant::now() < deadline => {
                    std::thread::sleep(std::time::Duration::from_millis(10))
                }
                n if n == pid => break,
                _ => {
                    let e = format!("waitpid {pid}: no stop: {}", errno());
                    detach();
                    return Err(e);
                }
            }
        }
        let mut out = Vec::new();
        let mut err = None;
        for i in 0.. {
            let n = libc::ptrace(PTRACE_SECCOMP_GET_FILTER, pid, i as usize, null);
            if n < 0 {
                let e = errno();
                if e.raw_os_error() != Some(libc::ENOENT) {
                    err = Some(format!("PTRACE_SECCOMP_GET_FILTER {pid} #{i}: {e}"));
                }
                break;
            }
            let mut buf = vec![
                libc::sock_filter {
                    code: 0,
                    jt: 0,
                    jf: 0,
                    k: 0
                };
                n as usize
            ];
            let m = libc::ptrace(PTRACE_SECCOMP_GET_FILTER, pid, i as usize, buf.as_mut_ptr());
            if m != n {
                err = Some(format!("PTRACE_SECCOMP_GET_FILTER {pid} #{i}: {}", errno()));
                break;
            }
            out.push(buf);
        }
        if detach() != 0 {
            err.get_or_insert(format!("PTRACE_DETACH {pid}: {}", errno()));
        }
        match err {
            Some(e) => Err(e),
            None => Ok(out),
        }
    }
}

/// Runs one classic-BPF seccomp program on `d`: its return value. Panics on an
/// instruction seccomp does not accept, or on running off the end.
pub fn run(prog: &[libc::sock_filter], d: &Data) -> u32 {
    let bytes = d.bytes();
    let (mut a, mut x): (u32, u32) = (0, 0);
    let mut mem = [0u32; 16];
    let mut pc = 0usize;
    loop {
        let i = prog
            .get(pc)
            .unwrap_or_else(|| panic!("ran off the end at {pc}"));
        pc += 1;
        let k = i.k;
        let src = if i.code & 0x08 != 0 { x } else { k };
        match i.code {
            // BPF_LD|BPF_W|BPF_ABS
            0x20 => {
                let o = k as usize;
                assert!(o % 4 == 0 && o + 4 <= 64, "load at {o}");
                a = u32::from_le_bytes(bytes[o..o + 4].try_into().unwrap());
            }
            0x80 => a = 64,              // BPF_LD|BPF_W|BPF_LEN
            0x81 => x = 64,              // BPF_LDX|BPF_W|BPF_LEN
            0x00 => a = k,               // BPF_LD|BPF_IMM
            0x01 => x = k,               // BPF_LDX|BPF_IMM
            0x60 => a = mem[k as usize], // BPF_LD|BPF_MEM
            0x61 => x = mem[k as usize], // BPF_LDX|BPF_MEM
            0x02 => mem[k as usize] = a, // BPF_ST
            0x03 => mem[k as usize] = x, // BPF_STX
            0x07 => x = a,               // BPF_MISC|BPF_TAX
            0x87 => a = x,               // BPF_MISC|BPF_TXA
            0x06 => return k,            // BPF_RET|BPF_K
            0x16 => return a,            // BPF_RET|BPF_A
            c if c & 0x07 == 0x04 => {
                // BPF_ALU
                a = match c & 0xf0 {
                    0x00 => a.wrapping_add(src),
                    0x10 => a.wrapping_sub(src),
                    0x20 => a.wrapping_mul(src),
                    0x30 => a / src,
                    0x40 => a | src,
                    0x50 => a & src,
                    0x60 => a.checked_shl(src).unwrap_or(0),
                    0x70 => a.checked_shr(src).unwrap_or(0),
                    0x80 => a.wrapping_neg(),
                    0x90 => a % src,
                    0xa0 => a ^ src,
                    op => panic!("ALU op {op:#x}"),
                }
            }
            c if c & 0x07 == 0x05 => {
                // BPF_JMP
                let taken = match c & 0xf0 {
                    0x00 => {
                        pc += k as usize;
                        continue;
                    }
                    0x10 => a == src,
                    0x20 => a > src,
                    0x30 => a >= src,
                    0x40 => a & src != 0,
                    op => panic!("JMP op {op:#x}"),
                };
                pc += if taken { i.jt } else { i.jf } as usize;
            }
            c => panic!("instruction {c:#x} at {}", pc - 1),
        }
    }
}

/// What the kernel does with a call given all of a process's filters (most recent
/// first): the return value whose action comes first by precedence (the lowest action
/// as a signed number), the most recent filter's on a tie.
pub fn verdict(filters: &[Vec<libc::sock_filter>], d: &Data) -> u32 {
    let action = |r: u32| (r & 0xffff_0000) as i32;
    let mut best = libc::SECCOMP_RET_ALLOW;
    for (n, f) in filters.iter().enumerate() {
        let r = run(f, d);
        if n == 0 || action(r) < action(best) {
            best = r;
        }
    }
    best
}

/// A return value as `ALLOW`, `ERRNO(EPERM)`, `KILL_PROCESS`, ...
pub fn show(r: u32) -> String {
    let data = r & 0xffff;
    match r & 0xffff_0000 {
        0x8000_0000 => "KILL_PROCESS".into(),
        0x0000_0000 => "KILL_THREAD".into(),
        0x0003_0000 => format!("TRAP({data})"),
        0x0005_0000 => match data as i32 {
            libc::EPERM => "ERRNO(EPERM)".into(),
            libc::ENOSYS => "ERRNO(ENOSYS)".into(),
            e => format!("ERRNO({e})"),
        },
        0x7fc0_0000 => "USER_NOTIF".into(),
        0x7ff0_0000 => format!("TRACE({data})"),
        0x7ffc_0000 => "LOG".into(),
        0x7fff_0000 => "ALLOW".into(),
        a => format!("{a:#x}({data})"),
    }
}

/// Syscall numbers → names from the kernel headers (`linux-libc-dev`): `unistd_64.h`
/// for x86_64, `unistd_x32.h` for x32 (numbers with the x32 bit), `unistd_32.h` for
/// i386.
pub struct Names {
    pub x86_64: BTreeMap<u32, String>,
    pub x32: BTreeMap<u32, String>,
    pub i386: BTreeMap<u32, String>,
}

impl Names {
    pub fn load() -> Names {
        let read = |file: &str| -> BTreeMap<u32, String> {
            let path = format!("/usr/include/x86_64-linux-gnu/asm/{file}");
            let text = std::fs::read_to_string(&path)
                .unwrap_or_else(|e| panic!("{path}: {e} (apt-get install -y linux-libc-dev)"));
            text.lines()
                .filter_map(|l| {
                    let mut w = l.split_whitespace();
                    if w.next()? != "#define" {
                        return None;
                    }
                    let name = w.next()?;
                    let name = name
                        .strip_prefix("__NR_")
                        .or_else(|| name.strip_prefix("__NR_x32_"))?;
                    let n: u32 = match w.next()? {
                        // unistd_x32.h: `(__X32_SYSCALL_BIT + n)`
                        "(__X32_SYSCALL_BIT" if w.next()? == "+" => {
                            X32_SYSCALL_BIT | w.next()?.strip_suffix(')')?.parse::<u32>().ok()?
                        }
                        n => n.parse().ok()?,
                    };
                    Some((n, name.to_string()))
                })
                .collect()
        };
        Names {
            x86_64: read("unistd_64.h"),
            x32: read("unistd_x32.h"),
            i386: read("unistd_32.h"),
        }
    }

    /// The table of the ABI a call is on.
    fn table(&self, d: &Data) -> &BTreeMap<u32, String> {
        if d.arch == AUDIT_ARCH_I386 {
            &self.i386
        } else if d.nr & X32_SYSCALL_BIT != 0 {
            &self.x32
        } else {
            &self.x86_64
        }
    }

    /// `name(nr)` of a call on `arch`, or the number alone.
    pub fn of(&self, d: &Data) -> String {
        let x32 = if d.arch == AUDIT_ARCH_X86_64 && d.nr & X32_SYSCALL_BIT != 0 {
            "x32:"
        } else {
            ""
        };
        match self.table(d).get(&d.nr) {
            Some(n) => format!("{x32}{n}({:#x})", d.nr),
            None => format!("{x32}{:#x}", d.nr),
        }
    }

    /// Whether `d` is a call to `name` (on its own ABI).
    pub fn is(&self, d: &Data, name: &str) -> bool {
        self.table(d).get(&d.nr).is_some_and(|n| n == name)
    }

    /// The number of `name` on an ABI: `x86_64`, `x32` or `i386`; `None` if it has none.
    pub fn nr_on(&self, abi: &str, name: &str) -> Option<u32> {
        let t = match abi {
            "x86_64" => &self.x86_64,
            "x32" => &self.x32,
            "i386" => &self.i386,
            _ => panic!("no ABI {abi}"),
        };
        t.iter().find(|(_, n)| *n == name).map(|(nr, _)| *nr)
    }
}

#[test]
fn the_interpreter_runs_a_small_filter() {
    let f = |code, jt, jf, k| libc::sock_filter { code, jt, jf, k };
    // arch == x86_64 ? (nr == 2 ? ERRNO(1) : ALLOW) : KILL_PROCESS
    let prog = [
        f(0x20, 0, 0, 4),
        f(0x15, 1, 0, AUDIT_ARCH_X86_64),
        f(0x06, 0, 0, 0x8000_0000),
        f(0x20, 0, 0, 0),
        f(0x15, 0, 1, 2),
        f(0x06, 0, 0, 0x0005_0001),
        f(0x06, 0, 0, 0x7fff_0000),
    ];
    let d = |arch, nr| Data::new(arch, nr, [0; 6]);
    assert_eq!(show(run(&prog, &d(AUDIT_ARCH_X86_64, 2))), "ERRNO(EPERM)");
    assert_eq!(show(run(&prog, &d(AUDIT_ARCH_X86_64, 3))), "ALLOW");
    assert_eq!(show(run(&prog, &d(AUDIT_ARCH_I386, 2))), "KILL_PROCESS");
    // Two filters: the stricter action wins.
    let allow = vec![f(0x06, 0, 0, 0x7fff_0000)];
    let v = verdict(&[allow, prog.to_vec()], &d(AUDIT_ARCH_X86_64, 2));
    assert_eq!(show(v), "ERRNO(EPERM)");
}
