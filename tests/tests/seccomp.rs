//! Seccomp end to end through CRI against `crustd`: the built-in `RuntimeDefault`
//! profile refuses what containerd's default refuses (new user namespaces through
//! `unshare`) while ordinary commands run, in the container and in `ExecSync`; a
//! `Localhost` profile file (OCI or Docker format, by `localhost_ref` or the
//! deprecated `seccomp_profile_path`) is enforced; a missing profile file is
//! `InvalidArgument` and leaves nothing behind.

use cri_api::*;
use crust_e2e::cri::{container_dirs, sc, setup, Env};
use crust_e2e::{require_root, TempDir};
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
