//! libseccomp (the node's `libseccomp.so.2`, loaded at run time: no build dependency)
//! compiling an OCI `linux.seccomp` the way runc does, so that crust's own compiler can
//! be checked against it profile by profile. What runc does before handing the filter to
//! libseccomp, mirrored here: the default action and every rule's action with `errnoRet`
//! (EPERM when absent), each listed architecture added, a rule whose action is the
//! default skipped, a name libseccomp cannot resolve skipped, a rule whose checks name
//! one argument twice split into one rule per check. And runc's own stub in front of
//! libseccomp's filter, applied to the verdicts ([`Runc::verdict`]): ENOSYS for a
//! number above the highest one the profile names on the call's ABI, unless the
//! default is ALLOW, LOG or TRACE.

use std::ffi::{c_char, c_int, c_uint, c_void, CString};

/// `struct scmp_arg_cmp` (seccomp.h).
#[repr(C)]
struct ArgCmp {
    arg: c_uint,
    op: c_uint,
    datum_a: u64,
    datum_b: u64,
}

type Init = unsafe extern "C" fn(u32) -> *mut c_void;
type Release = unsafe extern "C" fn(*mut c_void);
type ArchAdd = unsafe extern "C" fn(*mut c_void, u32) -> c_int;
type AttrSet = unsafe extern "C" fn(*mut c_void, c_uint, u32) -> c_int;
type ResolveName = unsafe extern "C" fn(*const c_char) -> c_int;
type ResolveNameArch = unsafe extern "C" fn(u32, *const c_char) -> c_int;
type ResolveNumArch = unsafe extern "C" fn(u32, c_int) -> *mut c_char;
type RuleAddArray = unsafe extern "C" fn(*mut c_void, u32, c_int, c_uint, *const ArgCmp) -> c_int;
type ExportBpf = unsafe extern "C" fn(*mut c_void, c_int) -> c_int;
type Version = unsafe extern "C" fn() -> *const [c_uint; 3];

/// `SCMP_FLTATR_ACT_BADARCH`, `SCMP_FLTATR_CTL_NNP`.
const ATTR_ACT_BADARCH: c_uint = 2;
const ATTR_CTL_NNP: c_uint = 3;
/// `__NR_SCMP_ERROR`: a name libseccomp does not know.
const NR_ERROR: c_int = -1;

pub const SCMP_ARCH_X86_64: u32 = 0xc000_003e;
pub const SCMP_ARCH_X86: u32 = 0x4000_0003;
pub const SCMP_ARCH_X32: u32 = 0x4000_003e;

/// The library's entry points.
pub struct Lib {
    init: Init,
    release: Release,
    arch_add: ArchAdd,
    attr_set: AttrSet,
    resolve_name: ResolveName,
    resolve_name_arch: ResolveNameArch,
    resolve_num_arch: ResolveNumArch,
    rule_add_array: RuleAddArray,
    export_bpf: ExportBpf,
    /// `major.minor.micro`.
    pub version: String,
}

impl Lib {
    pub fn open() -> Result<Lib, String> {
        let name = CString::new("libseccomp.so.2").unwrap();
        // SAFETY: dlopen of a system library by name; the handle is kept for the life
        // of the process (never dlclosed), so the symbols below stay valid.
        let h = unsafe { libc::dlopen(name.as_ptr(), libc::RTLD_NOW) };
        if h.is_null() {
            return Err("dlopen libseccomp.so.2 failed (Debian's libseccomp2)".into());
        }
        let sym = |s: &str| -> Result<*mut c_void, String> {
            let c = CString::new(s).unwrap();
            // SAFETY: h is a live handle; c a NUL-terminated name.
            let p = unsafe { libc::dlsym(h, c.as_ptr()) };
            if p.is_null() {
                Err(format!("libseccomp has no {s}"))
            } else {
                Ok(p)
            }
        };
        // SAFETY: (each transmute) the symbol is the libseccomp function of that name,
        // whose C prototype (seccomp.h, libseccomp 2.x) the type above spells.
        unsafe {
            let version: Version = std::mem::transmute(sym("seccomp_version")?);
            let v = *version();
            Ok(Lib {
                init: std::mem::transmute::<*mut c_void, Init>(sym("seccomp_init")?),
                release: std::mem::transmute::<*mut c_void, Release>(sym("seccomp_release")?),
                arch_add: std::mem::transmute::<*mut c_void, ArchAdd>(sym("seccomp_arch_add")?),
                attr_set: std::mem::transmute::<*mut c_void, AttrSet>(sym("seccomp_attr_set")?),
                resolve_name: std::mem::transmute::<*mut c_void, ResolveName>(sym(
                    "seccomp_syscall_resolve_name",
                )?),
                resolve_name_arch: std::mem::transmute::<*mut c_void, ResolveNameArch>(sym(
                    "seccomp_syscall_resolve_name_arch",
                )?),
                resolve_num_arch: std::mem::transmute::<*mut c_void, ResolveNumArch>(sym(
                    "seccomp_syscall_resolve_num_arch",
                )?),
                rule_add_array: std::mem::transmute::<*mut c_void, RuleAddArray>(sym(
                    "seccomp_rule_add_array",
                )?),
                export_bpf: std::mem::transmute::<*mut c_void, ExportBpf>(sym(
                    "seccomp_export_bpf",
                )?),
                version: format!("{}.{}.{}", v[0], v[1], v[2]),
            })
        }
    }

    /// Whether libseccomp has a name for the call numbered `nr` of `audit_arch`
    /// (x32's by the x32 bit of the number).
    pub fn names(&self, audit_arch: u32, nr: u32) -> bool {
        let arch = match audit_arch {
            SCMP_ARCH_X86_64 if nr & 0x4000_0000 != 0 => SCMP_ARCH_X32,
            a => a,
        };
        // SAFETY: a pure lookup; the name returned is malloc'd and freed here.
        unsafe {
            let p = (self.resolve_num_arch)(arch, nr as c_int);
            let known = !p.is_null();
            libc::free(p.cast());
            known
        }
    }

    /// The number of `name` on the ABI `arch` (an `SCMP_ARCH_*` token) by libseccomp's
    /// tables (x32's with the x32 bit), if it knows one.
    pub fn nr_on(&self, arch: u32, name: &str) -> Option<u32> {
        let c = CString::new(name).unwrap();
        // SAFETY: a pure lookup on a NUL-terminated name.
        let nr = unsafe { (self.resolve_name_arch)(arch, c.as_ptr()) };
        u32::try_from(nr).ok()
    }

    /// The classic-BPF program libseccomp makes of `seccomp` (an OCI `linux.seccomp`),
    /// with `bad_arch` for a call of an architecture the profile does not list.
    pub fn compile(
        &self,
        seccomp: &serde_json::Value,
        bad_arch: u32,
    ) -> Result<Vec<libc::sock_filter>, String> {
        let default = action(
            seccomp["defaultAction"].as_str().unwrap_or_default(),
            seccomp["defaultErrnoRet"].as_u64(),
        )?;
        // SAFETY: seccomp_init allocates a context, released below on every path.
        let ctx = unsafe { (self.init)(default) };
        if ctx.is_null() {
            return Err(format!("seccomp_init({default:#x}) failed"));
        }
        let r = self.fill(ctx, seccomp, default, bad_arch);
        // SAFETY: ctx came from seccomp_init and is released once.
        unsafe { (self.release)(ctx) };
        r
    }

    fn fill(
        &self,
        ctx: *mut c_void,
        seccomp: &serde_json::Value,
        default: u32,
        bad_arch: u32,
    ) -> Result<Vec<libc::sock_filter>, String> {
        let check = |what: &str, rc: c_int| match rc {
            0 => Ok(()),
            e => Err(format!("{what}: {}", std::io::Error::from_raw_os_error(-e))),
        };
        // SAFETY: (every call on ctx below) ctx is a live context from seccomp_init;
        // pointers passed are to locals that outlive the call.
        unsafe {
            check(
                "bad arch action",
                (self.attr_set)(ctx, ATTR_ACT_BADARCH, bad_arch),
            )?;
            check("no_new_privs off", (self.attr_set)(ctx, ATTR_CTL_NNP, 0))?;
            for a in seccomp["architectures"].as_array().into_iter().flatten() {
                let token = match a.as_str().unwrap_or_default() {
                    "SCMP_ARCH_X86_64" => SCMP_ARCH_X86_64,
                    "SCMP_ARCH_X86" => SCMP_ARCH_X86,
                    "SCMP_ARCH_X32" => SCMP_ARCH_X32,
                    other => return Err(format!("an architecture this test lacks: {other}")),
                };
                let rc = (self.arch_add)(ctx, token);
                if rc != -libc::EEXIST {
                    check(&format!("arch {token:#x}"), rc)?;
                }
            }
            for s in seccomp["syscalls"].as_array().into_iter().flatten() {
                let act = action(
                    s["action"].as_str().unwrap_or_default(),
                    s["errnoRet"].as_u64(),
                )?;
                if act == default {
                    continue;
                }
                let mut conds = vec![];
                let mut per_index = [0usize; 6];
                for a in s["args"].as_array().into_iter().flatten() {
                    let index = a["index"].as_u64().unwrap_or(0) as usize;
                    per_index[index] += 1;
                    conds.push(ArgCmp {
                        arg: index as c_uint,
                        op: op(a["op"].as_str().unwrap_or_default())?,
                        datum_a: a["value"].as_u64().unwrap_or(0),
                        datum_b: a["valueTwo"].as_u64().unwrap_or(0),
                    });
                }
                let rules: Vec<&[ArgCmp]> = if per_index.iter().any(|n| *n > 1) {
                    conds.chunks(1).collect()
                } else {
                    vec![&conds[..]]
                };
                for name in s["names"].as_array().into_iter().flatten() {
                    let name = name.as_str().unwrap_or_default();
                    let c = CString::new(name).unwrap();
                    let nr = (self.resolve_name)(c.as_ptr());
                    if nr == NR_ERROR {
                        continue;
                    }
                    for r in &rules {
                        let rc = (self.rule_add_array)(ctx, act, nr, r.len() as c_uint, r.as_ptr());
                        check(&format!("rule on {name}"), rc)?;
                    }
                }
            }
            let fd = libc::memfd_create(c"libseccomp-bpf".as_ptr(), 0);
            if fd < 0 {
                return Err(format!("memfd_create: {}", std::io::Error::last_os_error()));
            }
            let file = <std::fs::File as std::os::fd::FromRawFd>::from_raw_fd(fd);
            check("seccomp_export_bpf", (self.export_bpf)(ctx, fd))?;
            let bytes = std::fs::read(format!("/proc/self/fd/{fd}"))
                .map_err(|e| format!("reading the exported program: {e}"))?;
            drop(file);
            Ok(bytes
                .chunks_exact(8)
                .map(|i| libc::sock_filter {
                    code: u16::from_ne_bytes([i[0], i[1]]),
                    jt: i[2],
                    jf: i[3],
                    k: u32::from_ne_bytes([i[4], i[5], i[6], i[7]]),
                })
                .collect())
        }
    }
}

/// A profile as runc installs it: libseccomp's program behind runc's ENOSYS stub.
pub struct Runc {
    pub program: Vec<libc::sock_filter>,
    /// The highest number the profile names, by ABI (`SCMP_ARCH_*`), listed ABIs only.
    last: Vec<(u32, u32)>,
    stub: bool,
}

impl Runc {
    pub fn new(lib: &Lib, seccomp: &serde_json::Value) -> Result<Runc, String> {
        let program = lib.compile(seccomp, action("SCMP_ACT_KILL_PROCESS", None)?)?;
        let default = seccomp["defaultAction"].as_str().unwrap_or_default();
        let stub = !matches!(
            default,
            "SCMP_ACT_ALLOW" | "SCMP_ACT_LOG" | "SCMP_ACT_TRACE"
        );
        let mut arches = vec![SCMP_ARCH_X86_64];
        for a in seccomp["architectures"].as_array().into_iter().flatten() {
            match a.as_str().unwrap_or_default() {
                "SCMP_ARCH_X86" => arches.push(SCMP_ARCH_X86),
                "SCMP_ARCH_X32" => arches.push(SCMP_ARCH_X32),
                _ => {}
            }
        }
        let mut last = vec![];
        for arch in arches {
            let highest = seccomp["syscalls"]
                .as_array()
                .into_iter()
                .flatten()
                .flat_map(|s| s["names"].as_array().into_iter().flatten())
                .filter_map(|n| lib.nr_on(arch, n.as_str().unwrap_or_default()))
                .max();
            if let Some(h) = highest {
                last.push((arch, h));
            }
        }
        Ok(Runc {
            program,
            last,
            stub,
        })
    }

    /// The verdict on a call of `arch` (`AUDIT_ARCH_*`) numbered `nr`, given the
    /// libseccomp program's.
    pub fn verdict(&self, arch: u32, nr: u32, libseccomp: u32) -> u32 {
        let abi = match arch {
            SCMP_ARCH_X86 => SCMP_ARCH_X86,
            SCMP_ARCH_X86_64 if nr & 0x4000_0000 != 0 => SCMP_ARCH_X32,
            a => a,
        };
        let x32_listed = self.last.iter().any(|(a, _)| *a == SCMP_ARCH_X32);
        // Syscall -1 is x86_64's when x32 is unlisted: libseccomp's rules take it.
        let minus_one_native = abi == SCMP_ARCH_X32 && nr == u32::MAX && !x32_listed;
        match self.last.iter().find(|(a, _)| *a == abi) {
            Some((_, last)) if self.stub && nr > *last && !minus_one_native => {
                0x0005_0000 | libc::ENOSYS as u32
            }
            _ => libseccomp,
        }
    }
}

/// An OCI action as the kernel's return value (`SCMP_ACT_*`), `errnoRet` for ERRNO and
/// TRACE as runc takes it (EPERM when absent).
pub fn action(name: &str, errno_ret: Option<u64>) -> Result<u32, String> {
    let data = errno_ret.unwrap_or(libc::EPERM as u64) as u32 & 0xffff;
    Ok(match name {
        "SCMP_ACT_KILL" | "SCMP_ACT_KILL_THREAD" => 0,
        "SCMP_ACT_KILL_PROCESS" => 0x8000_0000,
        "SCMP_ACT_TRAP" => 0x0003_0000,
        "SCMP_ACT_ERRNO" => 0x0005_0000 | data,
        "SCMP_ACT_TRACE" => 0x7ff0_0000 | data,
        "SCMP_ACT_LOG" => 0x7ffc_0000,
        "SCMP_ACT_ALLOW" => 0x7fff_0000,
        other => return Err(format!("an action this test lacks: {other}")),
    })
}

/// `enum scmp_compare`.
fn op(name: &str) -> Result<c_uint, String> {
    Ok(match name {
        "SCMP_CMP_NE" => 1,
        "SCMP_CMP_LT" => 2,
        "SCMP_CMP_LE" => 3,
        "SCMP_CMP_EQ" => 4,
        "SCMP_CMP_GE" => 5,
        "SCMP_CMP_GT" => 6,
        "SCMP_CMP_MASKED_EQ" => 7,
        other => return Err(format!("an operator this test lacks: {other}")),
    })
}
