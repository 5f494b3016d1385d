//! Seccomp end to end through CRI against `crustd`: the built-in `RuntimeDefault`
//! profile refuses what containerd's default refuses (new user namespaces through
//! `unshare`) while ordinary commands run, in the container and in `ExecSync`; a
//! `Localhost` profile file (OCI or Docker format, by `localhost_ref` or the
//! deprecated `seccomp_profile_path`) is enforced; a missing profile file is
//! `InvalidArgument` and leaves nothing behind; a 32-bit (i386) binary runs under
//! `RuntimeDefault`, which holds on its ABI too. And `RuntimeDefault` against
//! containerd's default, syscall by syscall: the filter each runtime installed in a
//! running container, read back with ptrace and evaluated for every call number. And
//! every profile the suites run, crust's filter against the one libseccomp (what runc,
//! crun and youki compile with) makes of the same spec, on every ABI.

#[path = "seccomp/filters.rs"]
mod filters;
#[path = "seccomp/libseccomp.rs"]
mod libseccomp;

use cri_api::*;
use crust_e2e::containerd::Containerd;
use crust_e2e::cri::{busybox_layout, container_dirs, sc, setup, Client, Env, IMAGE};
use crust_e2e::{require_root, TempDir};
use filters::{Data, Names, AUDIT_ARCH_AARCH64, AUDIT_ARCH_I386, AUDIT_ARCH_X86_64};
use std::collections::{BTreeMap, BTreeSet};
use tonic::Code;

fn root() -> bool {
    require_root(&["ip", "nsenter", "nft", "busybox"])
}

/// Creates and starts a container, waits for it to exit; its exit code and log text.
async fn run(e: &mut Env, pod: &(String, PodSandboxConfig), cfg: ContainerConfig) -> (i32, String) {
    let id = e.create(pod, cfg).await;
    e.start(&id).await;
    let s = e.wait_exited(&id).await;
    let log = std::fs::read_to_string(&s.log_path).unwrap_or_default();
    (s.exit_code, log)
}

async fn exec(e: &mut Env, id: &str, cmd: &[&str]) -> ExecSyncResponse {
    e.exec(id, cmd, 10).await.expect("ExecSync")
}

fn ctr(name: &str, cmd: &[&str], seccomp: Option<SecurityProfile>) -> ContainerConfig {
    let mut c = crust_e2e::cri::ctr(name, cmd);
    sc(&mut c).seccomp = seccomp;
    c
}

fn profile(t: security_profile::ProfileType, localhost_ref: &str) -> Option<SecurityProfile> {
    Some(SecurityProfile {
        profile_type: t as i32,
        localhost_ref: localhost_ref.into(),
    })
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// `unshare -U` (a new user namespace, which needs no capability) works unconfined
/// and is refused by the default profile, in the container and in ExecSync; ordinary
/// commands run.
#[tokio::test]
async fn runtime_default_refuses_unshare_and_runs_the_rest() {
    if !root() {
        return;
    }
    use security_profile::ProfileType as T;
    let mut e = setup().await;
    let pod = e.pod("scdefault").await;
    let script = "echo hello; grep Seccomp: /proc/self/status; unshare -U true; echo rc=$?";

    let (code, log) = run(
        &mut e,
        &pod,
        ctr("free", &["sh", "-c", script], profile(T::Unconfined, "")),
    )
    .await;
    assert_eq!(code, 0, "{log}");
    assert!(log.contains("Seccomp:\t0") && log.contains("rc=0"), "{log}");

    let (code, log) = run(
        &mut e,
        &pod,
        ctr(
            "dflt",
            &["sh", "-c", script],
            profile(T::RuntimeDefault, ""),
        ),
    )
    .await;
    assert_eq!(code, 0, "{log}");
    assert!(log.contains("hello"), "{log}");
    assert!(log.contains("Seccomp:\t2"), "{log}");
    assert!(
        log.contains("Operation not permitted") && log.contains("rc=1"),
        "{log}"
    );

    // ExecSync gets the container's filter.
    let id = e
        .try_create(
            &pod,
            ctr("long", &["sleep", "300"], profile(T::RuntimeDefault, "")),
        )
        .await
        .expect("CreateContainer");
    e.start(&id).await;
    let r = exec(&mut e, &id, &["echo", "ok"]).await;
    assert_eq!((r.exit_code, text(&r.stdout)), (0, "ok\n".into()));
    let r = exec(&mut e, &id, &["grep", "Seccomp:", "/proc/self/status"]).await;
    assert_eq!(text(&r.stdout), "Seccomp:\t2\n");
    let r = exec(&mut e, &id, &["unshare", "-U", "true"]).await;
    assert_ne!(r.exit_code, 0);
    assert!(text(&r.stderr).contains("Operation not permitted"), "{r:?}");
}

/// A static i386 ELF, assembled by hand (no multilib toolchain needed): `int 0x80`
/// `write(1, "hello32\n")`, then `unshare(CLONE_NEWUSER)` and, if that returns
/// `-EPERM`, `write(1, "denied\n")`; `exit_group(0)`.
#[rustfmt::skip]
const HELLO32: &[u8] = &[
    // ELF header: ELFCLASS32, little-endian, ET_EXEC, EM_386, entry 0x08048054,
    // one program header at 52.
    0x7f, b'E', b'L', b'F', 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0,
    2, 0, 3, 0, 1, 0, 0, 0, 0x54, 0x80, 0x04, 0x08, 52, 0, 0, 0,
    0, 0, 0, 0, 0, 0, 0, 0, 52, 0, 32, 0, 1, 0, 40, 0, 0, 0, 0, 0,
    // PT_LOAD of the whole file (169 bytes) at 0x08048000, R+X.
    1, 0, 0, 0, 0, 0, 0, 0, 0x00, 0x80, 0x04, 0x08, 0x00, 0x80, 0x04, 0x08,
    169, 0, 0, 0, 169, 0, 0, 0, 5, 0, 0, 0, 0x00, 0x10, 0, 0,
    // mov eax, 4 (write); mov ebx, 1; mov ecx, 0x0804809a; mov edx, 8; int 0x80
    0xb8, 4, 0, 0, 0, 0xbb, 1, 0, 0, 0, 0xb9, 0x9a, 0x80, 0x04, 0x08,
    0xba, 8, 0, 0, 0, 0xcd, 0x80,
    // mov eax, 310 (unshare); mov ebx, 0x10000000 (CLONE_NEWUSER); int 0x80
    0xb8, 0x36, 0x01, 0, 0, 0xbb, 0, 0, 0, 0x10, 0xcd, 0x80,
    // cmp eax, -1 (-EPERM); jne +22
    0x83, 0xf8, 0xff, 0x75, 0x16,
    // mov eax, 4; mov ebx, 1; mov ecx, 0x080480a2; mov edx, 7; int 0x80
    0xb8, 4, 0, 0, 0, 0xbb, 1, 0, 0, 0, 0xb9, 0xa2, 0x80, 0x04, 0x08,
    0xba, 7, 0, 0, 0, 0xcd, 0x80,
    // mov eax, 252 (exit_group); xor ebx, ebx; int 0x80
    0xb8, 0xfc, 0, 0, 0, 0x31, 0xdb, 0xcd, 0x80,
    b'h', b'e', b'l', b'l', b'o', b'3', b'2', b'\n',
    b'd', b'e', b'n', b'i', b'e', b'd', b'\n',
];

/// A 32-bit (i386) binary runs under RuntimeDefault, which lists `SCMP_ARCH_X86` as
/// containerd's default does, and the profile holds on its ABI too: its `unshare` of a
/// user namespace is refused with EPERM (not killed, not allowed).
#[tokio::test]
async fn runtime_default_runs_an_i386_binary_and_refuses_its_unshare() {
    if !root() {
        return;
    }
    assert_eq!(HELLO32.len(), 169);
    let dir = TempDir::new("hello32");
    let bin = dir.path().join("hello32");
    crust_e2e::write_executable(&bin, HELLO32);
    let mut e = setup().await;
    let pod = e.pod("sc32").await;
    let mut cfg = ctr(
        "i386",
        &["/hello32"],
        profile(security_profile::ProfileType::RuntimeDefault, ""),
    );
    cfg.mounts.push(Mount {
        container_path: "/hello32".into(),
        host_path: bin.display().to_string(),
        readonly: true,
        ..Default::default()
    });
    let (code, log) = run(&mut e, &pod, cfg).await;
    assert_eq!(code, 0, "{log}");
    assert!(log.contains("hello32") && log.contains("denied"), "{log}");
}

/// A profile file on the node: OCI format by `localhost_ref`, Docker format by the
/// deprecated `seccomp_profile_path`.
#[tokio::test]
async fn localhost_profiles_are_enforced() {
    if !root() {
        return;
    }
    let mut e = setup().await;
    let pod = e.pod("sclocal").await;
    let dir = TempDir::new("profiles");
    let oci = dir.path().join("no-mkdir.json");
    std::fs::write(
        &oci,
        r#"{"defaultAction": "SCMP_ACT_ALLOW",
            "syscalls": [{"names": ["mkdir", "mkdirat"], "action": "SCMP_ACT_ERRNO"}]}"#,
    )
    .unwrap();
    let docker = dir.path().join("docker.json");
    std::fs::write(
        &docker,
        r#"{"defaultAction": "SCMP_ACT_ALLOW",
            "archMap": [{"architecture": "SCMP_ARCH_X86_64", "subArchitectures": ["SCMP_ARCH_X86"]}],
            "syscalls": [{"name": "mkdir", "action": "SCMP_ACT_ERRNO", "args": []},
                         {"name": "mkdirat", "action": "SCMP_ACT_ERRNO", "comment": "busybox may use either"}]}"#,
    )
    .unwrap();
    let script = "echo start; mkdir /tmp/d; echo rc=$?";

    let cfg = ctr(
        "oci",
        &["sh", "-c", script],
        profile(
            security_profile::ProfileType::Localhost,
            oci.to_str().unwrap(),
        ),
    );
    let (code, log) = run(&mut e, &pod, cfg).await;
    assert_eq!(code, 0, "{log}");
    assert!(log.contains("start") && log.contains("rc=1"), "{log}");
    assert!(log.contains("Operation not permitted"), "{log}");

    let mut cfg = ctr("docker", &["sh", "-c", script], None);
    #[allow(deprecated)]
    {
        cfg.linux
            .as_mut()
            .unwrap()
            .security_context
            .as_mut()
            .unwrap()
            .seccomp_profile_path = format!("localhost/{}", docker.display());
    }
    let (code, log) = run(&mut e, &pod, cfg).await;
    assert_eq!(code, 0, "{log}");
    assert!(
        log.contains("rc=1") && log.contains("Operation not permitted"),
        "{log}"
    );
}

/// A missing profile: InvalidArgument naming the path, and no container, snapshot
/// or sandbox resource left.
#[tokio::test]
async fn a_missing_localhost_profile_is_invalid_argument() {
    if !root() {
        return;
    }
    let mut e = setup().await;
    let pod = e.pod("scmissing").await;
    let before = e.d.leftovers();
    let missing = "/nonexistent/crust-seccomp/profile.json";
    let r = e
        .try_create(
            &pod,
            ctr(
                "c",
                &["true"],
                profile(security_profile::ProfileType::Localhost, missing),
            ),
        )
        .await;
    let s = r.expect_err("a missing profile must fail");
    assert_eq!(s.code(), Code::InvalidArgument, "{}", s.message());
    assert!(s.message().contains(missing), "{}", s.message());
    assert!(
        container_dirs(&e.d).is_empty(),
        "{:?}",
        container_dirs(&e.d)
    );
    let snapshots = std::fs::read_dir(e.d.root.path().join("images/snapshots"))
        .map(|r| r.count())
        .unwrap_or(0);
    assert_eq!(snapshots, 0);
    assert_eq!(e.d.leftovers(), before);
}

/// The capability variants compared: CRI's `add_capabilities` on the default set.
const VARIANTS: &[&[&str]] = &[
    &[],
    &["SYS_PTRACE"],
    &["SYS_ADMIN"],
    &["SYS_NICE", "SYS_TIME"],
];

/// A difference from containerd 1.6's default (the one installed here) kept on purpose
/// (on x86_64, x32 and i386 alike: crust compiles the profile for the three ABIs),
/// most of them where crust follows containerd's later defaults: the probes it covers,
/// what crust and containerd answer there (when each is one answer). Each
/// entry must still be needed: one no probe uses fails the test.
struct Known {
    why: &'static str,
    covers: fn(&Data, &Names) -> bool,
    crust: Option<&'static str>,
    containerd: Option<&'static str>,
}

const KNOWN: &[Known] = &[
    Known {
        why: "a foreign arch (unreachable on x86_64): crust kills the process, runc's \
              libseccomp the thread",
        covers: |d, _| d.arch == AUDIT_ARCH_AARCH64,
        crust: Some("KILL_PROCESS"),
        containerd: Some("KILL_THREAD"),
    },
    Known {
        why: "io_uring: refused as containerd >= 2.0 does",
        covers: |d, n| {
            ["io_uring_setup", "io_uring_enter", "io_uring_register"]
                .iter()
                .any(|c| n.is(d, c))
        },
        crust: Some("ERRNO(EPERM)"),
        containerd: Some("ALLOW"),
    },
    Known {
        why: "socket(AF_VSOCK): refused as containerd >= 1.7 does",
        // Only the low half counts on i386 and x32.
        covers: |d, n| {
            n.is(d, "socket") && (d.args[0] == 40 || (bits32(d) && d.args[0] as u32 == 40))
        },
        crust: Some("ERRNO(EPERM)"),
        containerd: Some("ALLOW"),
    },
    Known {
        why: "name_to_handle_at, process_vm_readv/writev: allowed to all as containerd >= 1.7 does",
        covers: |d, n| {
            ["name_to_handle_at", "process_vm_readv", "process_vm_writev"]
                .iter()
                .any(|c| n.is(d, c))
        },
        crust: Some("ALLOW"),
        containerd: Some("ERRNO(EPERM)"),
    },
    Known {
        why: "set_mempolicy_home_node is newer than containerd 1.6's list: runc answers ENOSYS \
              above the highest number its profile names",
        covers: |d, n| n.is(d, "set_mempolicy_home_node"),
        crust: Some("ERRNO(EPERM)"),
        containerd: Some("ERRNO(ENOSYS)"),
    },
    Known {
        why: "set_mempolicy_home_node with CAP_SYS_NICE (see above; on x32, whose numbers in \
              containerd's list go higher, runc answers the default EPERM)",
        covers: |d, n| n.is(d, "set_mempolicy_home_node"),
        crust: Some("ALLOW"),
        containerd: None,
    },
    Known {
        why: "calls newer than containerd 1.6's list (Linux 6.5 to 6.10): crust's \
              RuntimeDefault allows cachestat, fchmodat2, futex_wake/wait/requeue, \
              map_shadow_stack and mseal as containerd's later defaults do (and so answers \
              the default, not ENOSYS, to the numbers between them); containerd 1.6's runc \
              answers ENOSYS above the highest number its profile names (EPERM on x32)",
        covers: |d, _| (451..=462).contains(&(d.nr & !filters::X32_SYSCALL_BIT)),
        crust: None,
        containerd: None,
    },
];

/// A call on a 32-bit ABI (i386, x32), whose arguments are compared on their low half.
fn bits32(d: &Data) -> bool {
    d.arch == AUDIT_ARCH_I386
        || (d.arch == AUDIT_ARCH_X86_64 && d.nr & filters::X32_SYSCALL_BIT != 0)
}

/// The calls asked: every number on x86_64, x32 and i386 (and one foreign arch) with
/// all arguments zero and all ones, and the argument rules of the default profiles:
/// `clone` flags, `personality` personas, `socket` families.
fn probes(names: &Names) -> Vec<Data> {
    let mut v = vec![];
    for arch in [AUDIT_ARCH_X86_64, AUDIT_ARCH_I386, AUDIT_ARCH_AARCH64] {
        for nr in (0..1024).chain([0x3fff_ffff, 0x7fff_ffff, 0x8000_0000, u32::MAX]) {
            v.push(Data::new(arch, nr, [0; 6]));
            v.push(Data::new(arch, nr, [u64::MAX; 6]));
        }
    }
    for nr in 0..1024 {
        for args in [[0; 6], [u64::MAX; 6]] {
            v.push(Data::new(
                AUDIT_ARCH_X86_64,
                nr | filters::X32_SYSCALL_BIT,
                args,
            ));
        }
    }
    // On each ABI, by its number for the call.
    let arg0 = |name: &str, values: &[u64], v: &mut Vec<Data>| {
        for (abi, arch) in [
            ("x86_64", AUDIT_ARCH_X86_64),
            ("x32", AUDIT_ARCH_X86_64),
            ("i386", AUDIT_ARCH_I386),
        ] {
            let Some(nr) = names.nr_on(abi, name) else {
                continue;
            };
            for a in values {
                v.push(Data::new(arch, nr, [*a, 0, 0, 0, 0, 0]));
            }
        }
    };
    // clone: each namespace flag alone, a thread's and a fork's flags, the high half.
    let mut clone = vec![17, 0x003d_0f00, 0x1_0000_0000, 0x1_0000_0011];
    clone.extend((0..32).map(|b| 1u64 << b));
    arg0("clone", &clone, &mut v);
    arg0("clone3", &[0x10, 0x58], &mut v);
    arg0(
        "personality",
        &[
            0,
            8,
            0x2_0000,
            0x2_0008,
            0xffff_ffff,
            1,
            0x40_0000,
            0x1_0000_0000,
            0x1_0000_0008,
        ],
        &mut v,
    );
    arg0(
        "socket",
        &[
            1,
            2,
            10,
            16,
            17,
            38,
            40,
            41,
            44,
            45,
            0x1_0000_0028,
            0x28_0000_0002,
        ],
        &mut v,
    );
    v.sort();
    v.dedup();
    v
}

/// Runs `sleep` with RuntimeDefault and `caps` added in `pod` on a daemon; its pid.
async fn sleeper(
    c: &mut Client,
    pod: &(String, PodSandboxConfig),
    name: &str,
    caps: &[&str],
) -> i32 {
    let rd = profile(security_profile::ProfileType::RuntimeDefault, "");
    sleeper_with(c, pod, name, rd, caps).await.0
}

/// Runs `sleep` with `seccomp` and `caps` added in `pod` on a daemon: its pid and the
/// runtime spec's `linux.seccomp` the daemon made of the profile (from the verbose
/// status, which carries the spec on crustd as on containerd).
async fn sleeper_with(
    c: &mut Client,
    pod: &(String, PodSandboxConfig),
    name: &str,
    seccomp: Option<SecurityProfile>,
    caps: &[&str],
) -> (i32, serde_json::Value) {
    let mut cfg = ctr(name, &["sleep", "3600"], seccomp);
    sc(&mut cfg).capabilities = Some(Capability {
        add_capabilities: caps.iter().map(|c| c.to_string()).collect(),
        ..Default::default()
    });
    let id = c
        .create_container(CreateContainerRequest {
            pod_sandbox_id: pod.0.clone(),
            config: Some(cfg),
            sandbox_config: Some(pod.1.clone()),
        })
        .await
        .unwrap_or_else(|s| panic!("CreateContainer {name}: {s:?}"))
        .into_inner()
        .container_id;
    c.start_container(StartContainerRequest {
        container_id: id.clone(),
    })
    .await
    .unwrap_or_else(|s| panic!("StartContainer {name}: {s:?}"));
    let st = c
        .container_status(ContainerStatusRequest {
            container_id: id,
            verbose: true,
        })
        .await
        .expect("ContainerStatus")
        .into_inner();
    let info: serde_json::Value = serde_json::from_str(&st.info["info"]).unwrap();
    let pid = info["pid"].as_i64().unwrap_or(0) as i32;
    assert!(pid > 0, "no pid for {name}: {info}");
    (pid, info["runtimeSpec"]["linux"]["seccomp"].clone())
}

/// A pod on a daemon: the same config for both, containerd's under its cgroup parent.
async fn pod(
    c: &mut Client,
    name: &str,
    logs: &TempDir,
    parent: &str,
) -> (String, PodSandboxConfig) {
    let cfg = PodSandboxConfig {
        metadata: Some(PodSandboxMetadata {
            name: name.into(),
            uid: format!("uid-{name}"),
            namespace: "default".into(),
            attempt: 0,
        }),
        hostname: name.into(),
        log_directory: logs.path().join(name).display().to_string(),
        linux: Some(LinuxPodSandboxConfig {
            cgroup_parent: parent.into(),
            ..Default::default()
        }),
        ..Default::default()
    };
    let id = crust_e2e::cri::run_pod(c, &cfg)
        .await
        .unwrap_or_else(|s| panic!("RunPodSandbox {name}: {s:?}"));
    (id, cfg)
}

/// The filters of `pid`, which must be exactly one.
fn the_filter(pid: i32, who: &str) -> Vec<Vec<libc::sock_filter>> {
    let f = filters::filters_of(pid).unwrap_or_else(|e| panic!("{who}: {e}"));
    assert_eq!(f.len(), 1, "{who}: {} filters", f.len());
    f
}

/// containerd 1.6 + runc and crustd each run `sleep` with RuntimeDefault (the default
/// capabilities, and variants with more); the filter each installed is read back with
/// ptrace and both are evaluated for every call number on x86_64, x32 and i386 and for
/// the argument rules. Every verdict must be the same, but for [`KNOWN`].
#[tokio::test]
async fn runtime_default_matches_containerds_syscall_by_syscall() {
    let tools = ["ip", "nsenter", "nft", "busybox", "tar"];
    let ctrd_tools = ["containerd", "ctr", "runc", "containerd-shim-runc-v2"];
    if !require_root(&[&tools[..], &ctrd_tools[..]].concat()) {
        return;
    }
    let names = Names::load();
    let images = TempDir::new("scimages");
    let layout = images.path().join("layout");
    busybox_layout(&layout, IMAGE);
    let archive = images.path().join("busybox.tar");
    crust_e2e::sh(&[
        "tar",
        "-C",
        &layout.to_string_lossy(),
        "-cf",
        &archive.to_string_lossy(),
        "oci-layout",
        "index.json",
        "blobs",
    ]);
    let mut ctrd = Containerd::new(97);
    ctrd.start(&[(archive, IMAGE.into())])
        .await
        .unwrap_or_else(|e| panic!("containerd: {e}"));
    let mut cc: Client = RuntimeServiceClient::new(
        cri_api::connect_unix(&ctrd.socket)
            .await
            .expect("containerd's socket"),
    );
    let ctrd_logs = TempDir::new("sclogs");
    let parent = ctrd.cgroup_parent.clone();
    let ctrd_pod = pod(&mut cc, "sccompare", &ctrd_logs, &parent).await;
    ctrd.pod_ids.lock().unwrap().push(ctrd_pod.0.clone());
    let mut e = setup().await;
    let logs = TempDir::new("sclogs");
    let crust_pod = pod(&mut e.c, "sccompare", &logs, "").await;

    let probes = probes(&names);
    let mut unexplained = vec![];
    let mut used: BTreeMap<&str, usize> = BTreeMap::new();
    let mut same = 0;
    for (i, caps) in VARIANTS.iter().enumerate() {
        let name = format!("v{i}");
        let crust = the_filter(sleeper(&mut e.c, &crust_pod, &name, caps).await, "crust");
        let theirs = the_filter(sleeper(&mut cc, &ctrd_pod, &name, caps).await, "containerd");
        let mut seen = BTreeSet::new();
        for d in &probes {
            let (a, b) = (
                filters::show(filters::verdict(&crust, d)),
                filters::show(filters::verdict(&theirs, d)),
            );
            if a == b {
                same += 1;
                continue;
            }
            let known = KNOWN.iter().find(|k| {
                (k.covers)(d, &names)
                    && k.crust.is_none_or(|c| c == a)
                    && k.containerd.is_none_or(|c| c == b)
            });
            match known {
                Some(k) => *used.entry(k.why).or_default() += 1,
                None => {
                    // One line per call and verdict pair, not per argument pattern.
                    if seen.insert((d.arch, d.nr, a.clone(), b.clone())) {
                        unexplained.push(format!(
                            "caps +{caps:?} arch {:#x} {} args[0] {:#x}: crust {a}, containerd {b}",
                            d.arch,
                            names.of(d),
                            d.args[0]
                        ));
                    }
                }
            }
        }
    }
    eprintln!(
        "{} probes x {} variants: {same} the same; known differences: {used:?}",
        probes.len(),
        VARIANTS.len()
    );
    let whys = KNOWN.iter().map(|k| k.why);
    assert_explained(&unexplained, "containerd's default", &used, whys);
}

/// The profiles compared with libseccomp besides RuntimeDefault: a Localhost OCI
/// deny-list, a Docker-format one, every operator and action on three ABIs, and a
/// KILL_PROCESS-default allow-list (RuntimeDefault's own list, written as a file).
fn local_profiles(runtime_default: &serde_json::Value) -> Vec<(&'static str, serde_json::Value)> {
    use serde_json::json;
    let mut kill_default = runtime_default.clone();
    kill_default["defaultAction"] = json!("SCMP_ACT_KILL_PROCESS");
    kill_default
        .as_object_mut()
        .unwrap()
        .remove("defaultErrnoRet");
    let e = |names: &[&str], action: &str, args: serde_json::Value| json!({"names": names, "action": action, "args": args});
    let arg = |index: u64, value: u64, op: &str| json!({"index": index, "value": value, "op": op});
    let mut mknodat = e(
        &["mknodat"],
        "SCMP_ACT_KILL_PROCESS",
        json!([{"index": 2, "value": 0o170000, "valueTwo": 0o020000, "op": "SCMP_CMP_MASKED_EQ"}]),
    );
    mknodat["errnoRet"] = json!(5);
    let mut trace = e(&["mbind", "acct"], "SCMP_ACT_TRACE", json!([]));
    trace["errnoRet"] = json!(22);
    let operators = vec![
        e(
            &["kcmp"],
            "SCMP_ACT_ERRNO",
            json!([arg(0, 5, "SCMP_CMP_EQ"), arg(1, 7, "SCMP_CMP_NE")]),
        ),
        mknodat,
        e(
            &["fchownat"],
            "SCMP_ACT_TRAP",
            json!([
                arg(2, 1000, "SCMP_CMP_GT"),
                arg(3, 0xffff_ffff_0000_0001, "SCMP_CMP_LE")
            ]),
        ),
        e(
            &["setpriority"],
            "SCMP_ACT_ERRNO",
            json!([
                arg(2, 5, "SCMP_CMP_LT"),
                arg(2, 0x1_0000_0000, "SCMP_CMP_GE")
            ]),
        ),
        e(
            &["ioprio_set"],
            "SCMP_ACT_LOG",
            json!([arg(0, 3, "SCMP_CMP_GE")]),
        ),
        trace,
        e(
            &["personality"],
            "SCMP_ACT_ERRNO",
            json!([arg(0, 0xffff_ffff, "SCMP_CMP_EQ")]),
        ),
        e(
            &["uselib", "mmap2", "no_such_syscall"],
            "SCMP_ACT_KILL_THREAD",
            json!([]),
        ),
        e(&["vhangup"], "SCMP_ACT_ALLOW", json!([])),
        e(
            &["swapon"],
            "SCMP_ACT_ERRNO",
            json!([arg(1, 0x8000, "SCMP_CMP_MASKED_EQ")]),
        ),
    ];
    vec![
        (
            "no-mkdir",
            json!({"defaultAction": "SCMP_ACT_ALLOW",
                   "syscalls": [{"names": ["mkdir", "mkdirat"], "action": "SCMP_ACT_ERRNO"}]}),
        ),
        (
            "docker",
            json!({"defaultAction": "SCMP_ACT_ALLOW",
                   "archMap": [{"architecture": "SCMP_ARCH_X86_64",
                                "subArchitectures": ["SCMP_ARCH_X86", "SCMP_ARCH_X32"]}],
                   "syscalls": [{"name": "mkdir", "action": "SCMP_ACT_ERRNO", "args": []},
                                {"name": "mkdirat", "action": "SCMP_ACT_KILL_PROCESS"}]}),
        ),
        (
            "operators",
            json!({"defaultAction": "SCMP_ACT_ALLOW",
                   "architectures": ["SCMP_ARCH_X86_64", "SCMP_ARCH_X86", "SCMP_ARCH_X32"],
                   "syscalls": operators}),
        ),
        ("kill-default", kill_default),
    ]
}

/// Arguments that tell the checks of `seccomp`'s rules apart: for each rule with
/// checks, on each ABI the profile lists, its call with each check's value, the values
/// next to it, its high and low halves apart, and the masked patterns.
fn arg_probes(seccomp: &serde_json::Value, names: &Names) -> Vec<Data> {
    let listed = |a: &str| {
        seccomp["architectures"]
            .as_array()
            .is_some_and(|v| v.iter().any(|x| x == a))
    };
    let mut abis = vec![("x86_64", AUDIT_ARCH_X86_64)];
    if listed("SCMP_ARCH_X86") {
        abis.push(("i386", AUDIT_ARCH_I386));
    }
    if listed("SCMP_ARCH_X32") {
        abis.push(("x32", AUDIT_ARCH_X86_64));
    }
    let mut v = vec![];
    for s in seccomp["syscalls"].as_array().into_iter().flatten() {
        let Some(args) = s["args"].as_array().filter(|a| !a.is_empty()) else {
            continue;
        };
        // Per argument index, the values worth asking.
        let mut by_index: BTreeMap<usize, BTreeSet<u64>> = BTreeMap::new();
        for a in args {
            let i = a["index"].as_u64().unwrap_or(0) as usize;
            let (x, y) = (
                a["value"].as_u64().unwrap_or(0),
                a["valueTwo"].as_u64().unwrap_or(0),
            );
            let set = by_index.entry(i).or_default();
            for w in [
                0,
                u64::MAX,
                x,
                x.wrapping_sub(1),
                x.wrapping_add(1),
                x & 0xffff_ffff,
                x | 0xffff_ffff_0000_0000,
                x ^ 0x1_0000_0000,
                (x >> 32) << 32,
                y,
                y | !x,
                y ^ (x & x.wrapping_neg()),
            ] {
                set.insert(w);
            }
        }
        let indexes: Vec<(usize, Vec<u64>)> = by_index
            .into_iter()
            .map(|(i, s)| (i, s.into_iter().collect()))
            .collect();
        let mut combos: Vec<[u64; 6]> = vec![[0; 6]];
        for (i, values) in &indexes {
            combos = combos
                .iter()
                .flat_map(|c| {
                    values.iter().map(move |w| {
                        let mut c = *c;
                        c[*i] = *w;
                        c
                    })
                })
                .collect();
        }
        for name in s["names"].as_array().into_iter().flatten() {
            for (abi, arch) in &abis {
                let Some(nr) = names.nr_on(abi, name.as_str().unwrap_or_default()) else {
                    continue;
                };
                v.extend(combos.iter().map(|args| Data::new(*arch, nr, *args)));
            }
        }
    }
    v
}

/// Every profile the suites run (RuntimeDefault with each capability variant, Localhost
/// profiles in OCI and Docker format, every operator and action on the three x86 ABIs,
/// a KILL_PROCESS default) is compiled by crust and by libseccomp from the same spec
/// (the `linux.seccomp` crustd wrote, taken from its verbose status): crust's filter,
/// read back from the running container with ptrace, and libseccomp's (compiled here as
/// runc compiles it) must give the same verdict for every call number on x86_64, x32,
/// i386 and a foreign arch, and for every argument pattern that tells each rule's checks
/// apart, but for the differences [`LIBSECCOMP_KNOWN`] explains.
#[tokio::test]
async fn every_profile_gives_the_verdicts_of_libseccomps_filter() {
    if !root() {
        return;
    }
    let lib = libseccomp::Lib::open().unwrap_or_else(|e| panic!("{e}"));
    let names = Names::load();
    let mut e = setup().await;
    let logs = TempDir::new("sclogs");
    let pod = pod(&mut e.c, "sclibseccomp", &logs, "").await;
    let dir = TempDir::new("scprofiles");
    let mut specs = vec![];
    for (i, caps) in VARIANTS.iter().enumerate() {
        let rd = profile(security_profile::ProfileType::RuntimeDefault, "");
        let (pid, spec) = sleeper_with(&mut e.c, &pod, &format!("rd{i}"), rd, caps).await;
        specs.push((format!("RuntimeDefault +{caps:?}"), pid, spec));
    }
    let runtime_default = specs[0].2.clone();
    for (name, text) in local_profiles(&runtime_default) {
        let path = dir.path().join(format!("{name}.json"));
        std::fs::write(&path, text.to_string()).unwrap();
        let p = profile(
            security_profile::ProfileType::Localhost,
            path.to_str().unwrap(),
        );
        let (pid, spec) = sleeper_with(&mut e.c, &pod, name, p, &[]).await;
        specs.push((format!("Localhost {name}"), pid, spec));
    }

    let base = probes(&names);
    let mut unexplained = vec![];
    let mut used: BTreeMap<&str, usize> = BTreeMap::new();
    let mut same = 0;
    for (what, pid, spec) in &specs {
        assert!(spec.is_object(), "{what}: no linux.seccomp in the spec");
        let crust = &the_filter(*pid, what)[0];
        let runc =
            libseccomp::Runc::new(&lib, spec).unwrap_or_else(|e| panic!("{what}: libseccomp: {e}"));
        let mut seen = BTreeSet::new();
        let probes = base.iter().copied().chain(arg_probes(spec, &names));
        for d in probes {
            let a = filters::run(crust, &d);
            let b = runc.verdict(d.arch, d.nr, filters::run(&runc.program, &d));
            if a == b {
                same += 1;
                continue;
            }
            let c = Case {
                what,
                d: &d,
                lib: &lib,
                crust: a,
                runc: b,
            };
            match LIBSECCOMP_KNOWN.iter().find(|k| (k.covers)(&c)) {
                Some(k) => *used.entry(k.why).or_default() += 1,
                None => {
                    let (a, b) = (filters::show(a), filters::show(b));
                    if seen.insert((d.arch, d.nr, a.clone(), b.clone())) {
                        unexplained.push(format!(
                            "{what}: arch {:#x} {} args {:x?}: crust {a}, libseccomp {b}",
                            d.arch,
                            names.of(&d),
                            d.args
                        ));
                    }
                }
            }
        }
    }
    eprintln!(
        "libseccomp {}: {} profiles, {same} verdicts the same; known differences: {used:?}",
        lib.version,
        specs.len()
    );
    let whys = LIBSECCOMP_KNOWN.iter().map(|k| k.why);
    assert_explained(
        &unexplained,
        &format!("libseccomp {}", lib.version),
        &used,
        whys,
    );
}

/// No difference but the known ones, and each known one still seen (one no probe
/// uses any more is stale: the other side changed).
fn assert_explained<'a>(
    unexplained: &[String],
    other: &str,
    used: &BTreeMap<&str, usize>,
    whys: impl Iterator<Item = &'a str>,
) {
    assert!(
        unexplained.is_empty(),
        "{} differences from {other}:\n{}",
        unexplained.len(),
        unexplained.join("\n")
    );
    for why in whys {
        assert!(
            used.contains_key(why),
            "a known difference no longer seen: {why}"
        );
    }
}

/// One probe whose verdicts differ.
struct Case<'a> {
    what: &'a str,
    d: &'a Data,
    lib: &'a libseccomp::Lib,
    crust: u32,
    runc: u32,
}

impl Case<'_> {
    /// The call is one of those newer than libseccomp's tables that crust's have
    /// (Linux 6.7 to 6.17): libseccomp has no name for its number.
    fn newer_than_libseccomp(&self) -> bool {
        (457..=469).contains(&(self.d.nr & !filters::X32_SYSCALL_BIT))
            && !self.lib.names(self.d.arch, self.d.nr)
    }
}

/// A difference from libseccomp kept on purpose.
struct LibseccompKnown {
    why: &'static str,
    covers: fn(&Case) -> bool,
}

const LIBSECCOMP_KNOWN: &[LibseccompKnown] = &[
    LibseccompKnown {
        why: "a call newer than libseccomp 2.5's tables (mseal, statmount, ...): where a \
              profile names one (RuntimeDefault allows mseal, as containerd's current default \
              does), libseccomp skips the name, and runc's ENOSYS stub starts above the \
              highest call libseccomp could name; crust knows the calls up to Linux 6.17",
        covers: |c| c.newer_than_libseccomp(),
    },
    LibseccompKnown {
        why: "libseccomp 2.5.4 miscompiles two range checks on one 64-bit argument \
              (setpriority: arg2 < 5 or arg2 >= 2^32): its program compares the low half \
              with the high half's constant and denies 5, 6, ... that neither check holds \
              for (the kernel, running libseccomp's program, agrees with it); crust answers \
              by the arithmetic",
        covers: |c| {
            c.what == "Localhost operators"
                && c.d.arch == AUDIT_ARCH_X86_64
                && c.d.nr == 141
                && (5..1 << 32).contains(&c.d.args[2])
                && filters::show(c.crust) == "ALLOW"
                && filters::show(c.runc) == "ERRNO(EPERM)"
        },
    },
];
