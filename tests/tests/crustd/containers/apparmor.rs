//! AppArmor: the profile a container and its execs run under, on a host with AppArmor
//! (hack/vm-test's first boot mounts securityfs, and Debian's kernel has AppArmor on,
//! so this runs for real there, with `CRUST_APPARMOR_VM=1` insisting on it) and on one
//! without (this host's kernel: every profile but `unconfined` refused, as containerd
//! refuses them).

use super::*;
use std::io::Write;
use std::process::{Command, Stdio};

/// What crustd reads: the module enabled, securityfs mounted, and a parser to load its
/// default profile with.
fn host_has_apparmor() -> bool {
    std::fs::read_to_string("/sys/module/apparmor/parameters/enabled")
        .is_ok_and(|s| s.starts_with('Y'))
        && Path::new("/sys/kernel/security/apparmor/profiles").exists()
        && Command::new("apparmor_parser")
            .arg("--version")
            .output()
            .is_ok_and(|o| o.status.success())
}

fn profile(t: security_profile::ProfileType, r: &str) -> Option<SecurityProfile> {
    Some(SecurityProfile {
        profile_type: t as i32,
        localhost_ref: r.into(),
    })
}

/// Loads (or replaces) profiles with `apparmor_parser -r`.
fn load(text: &str) {
    let mut p = Command::new("apparmor_parser")
        .args(["-r", "-K"])
        .stdin(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("apparmor_parser");
    p.stdin.take().unwrap().write_all(text.as_bytes()).unwrap();
    let out = p.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "apparmor_parser: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

async fn attr_of_exec(e: &mut Env, id: &str) -> String {
    let r = e
        .exec(id, &["cat", "/proc/self/attr/current"], 10)
        .await
        .expect("ExecSync");
    assert_eq!(r.exit_code, 0, "{r:?}");
    String::from_utf8_lossy(&r.stdout).trim().to_string()
}

fn attr_of_pid(pid: i64) -> String {
    std::fs::read_to_string(format!("/proc/{pid}/attr/current"))
        .unwrap()
        .trim_end_matches(['\n', '\0'])
        .to_string()
}

#[tokio::test]
async fn apparmor_profiles_confine_containers_and_execs() {
    if !root() {
        return;
    }
    let in_vm = std::env::var("CRUST_APPARMOR_VM").is_ok_and(|v| v == "1");
    let has = host_has_apparmor();
    assert!(
        has || !in_vm,
        "CRUST_APPARMOR_VM=1 but the host has no AppArmor crustd can use"
    );
    let mut e = setup().await;
    let status = e.runtime_status_verbose().await;
    let aa: serde_json::Value = serde_json::from_str(&status.info["apparmor"]).unwrap();
    assert_eq!(aa["enabled"], has, "{aa}");
    let pod = e.pod("aa").await;
    let before = e.d.leftovers();

    if !has {
        // A host without AppArmor: nothing asked runs unconfined, `unconfined` too;
        // anything else is refused at create, before anything is made.
        assert!(aa["reason"].is_string(), "{aa}");
        for (name, field, string) in [
            ("nothing", None, ""),
            ("unconfined", None, "unconfined"),
            (
                "unconfined-field",
                profile(security_profile::ProfileType::Unconfined, ""),
                "",
            ),
        ] {
            let mut cfg = ctr(name, &["true"]);
            sc(&mut cfg).apparmor = field;
            #[allow(deprecated)]
            {
                sc(&mut cfg).apparmor_profile = string.into();
            }
            let id = e.create(&pod, cfg).await;
            e.start(&id).await;
            assert_eq!(e.wait_exited(&id).await.exit_code, 0, "{name}");
            e.remove(&id).await;
        }
        for (name, field, string) in [
            (
                "default-field",
                profile(security_profile::ProfileType::RuntimeDefault, ""),
                "",
            ),
            ("default-string", None, "runtime/default"),
            ("localhost", None, "localhost/some-profile"),
        ] {
            let mut cfg = ctr(name, &["true"]);
            sc(&mut cfg).apparmor = field;
            #[allow(deprecated)]
            {
                sc(&mut cfg).apparmor_profile = string.into();
            }
            let r = e.try_create(&pod, cfg).await;
            assert_code(r, Code::InvalidArgument, name);
        }
        assert_eq!(e.d.leftovers(), before);
        e.remove_pod(&pod.0).await;
        return;
    }

    // A host with AppArmor: crust's default profile for a container nobody asked a
    // profile for, at its init and at its execs.
    assert_eq!(aa["defaultProfile"], "crust-default", "{aa}");
    let id = e.create(&pod, ctr("default", &["sleep", "3600"])).await;
    e.start(&id).await;
    let (pid, monitor) = e.pids(&id).await;
    assert_eq!(attr_of_pid(pid), "crust-default (enforce)");
    assert_eq!(attr_of_exec(&mut e, &id).await, "crust-default (enforce)");
    // crustd, the container's monitor and the pause stay unconfined.
    assert_eq!(attr_of_pid(monitor), "unconfined");
    assert_eq!(attr_of_pid(i64::from(std::process::id())), "unconfined");
    // What the profile denies even where capabilities would allow: a mount (with
    // CAP_SYS_ADMIN granted and no seccomp profile) and the kernel's sysrq trigger.
    let r = e
        .exec(
            &id,
            &[
                "sh",
                "-c",
                "echo h > /proc/sysrq-trigger && echo sysrq-written; mkdir -p /mnt/t; mount -t tmpfs t /mnt/t && echo mounted; true",
            ],
            10,
        )
        .await
        .unwrap();
    let out = String::from_utf8_lossy(&r.stdout).to_string();
    assert!(!out.contains("sysrq-written"), "{r:?}");
    assert!(!out.contains("mounted"), "{r:?}");
    e.remove_pod(&pod.0).await;

    // CAP_SYS_ADMIN, the same mount: denied under runtime/default (the profile, not
    // the capability), allowed unconfined.
    let pod = e.pod("aa-mount").await;
    for (name, field, string, may_mount) in [
        (
            "default-field",
            profile(security_profile::ProfileType::RuntimeDefault, ""),
            "",
            false,
        ),
        ("default-string", None, "runtime/default", false),
        (
            "unconfined",
            profile(security_profile::ProfileType::Unconfined, ""),
            "runtime/default",
            true,
        ),
    ] {
        let mut cfg = ctr(
            name,
            &[
                "sh",
                "-c",
                "cat /proc/self/attr/current; mkdir -p /mnt/t; mount -t tmpfs t /mnt/t",
            ],
        );
        sc(&mut cfg).apparmor = field;
        #[allow(deprecated)]
        {
            sc(&mut cfg).apparmor_profile = string.into();
        }
        sc(&mut cfg).capabilities = Some(Capability {
            add_capabilities: vec!["CAP_SYS_ADMIN".into()],
            ..Default::default()
        });
        let id = e.create(&pod, cfg).await;
        e.start(&id).await;
        let s = e.wait_exited(&id).await;
        let log = std::fs::read_to_string(&s.log_path).unwrap_or_default();
        assert_eq!(s.exit_code == 0, may_mount, "{name}: {s:?}\n{log}");
        let want = if may_mount {
            "unconfined"
        } else {
            "crust-default (enforce)"
        };
        assert!(log.contains(want), "{name}: {log}");
    }
    // A privileged container gets no default profile.
    let mut cfg = ctr("privileged", &["cat", "/proc/self/attr/current"]);
    sc(&mut cfg).privileged = true;
    let id = e.create(&pod, cfg).await;
    e.start(&id).await;
    let s = e.wait_exited(&id).await;
    let log = std::fs::read_to_string(&s.log_path).unwrap_or_default();
    assert!(log.contains("unconfined"), "{log}");
    e.remove_pod(&pod.0).await;

    // A localhost profile: loaded, it confines init and execs (writes denied); not
    // loaded, the create fails with nothing made. Both CRI fields, the structured one
    // winning.
    load(
        "#include <tunables/global>\nprofile crust-test-deny-write flags=(attach_disconnected) {\n  #include <abstractions/base>\n  file,\n  deny /** w,\n}\n",
    );
    let pod = e.pod("aa-local").await;
    let mut cfg = ctr(
        "denied",
        &["sh", "-c", "touch /tmp/x || exit 7; sleep 3600"],
    );
    sc(&mut cfg).apparmor = profile(
        security_profile::ProfileType::Localhost,
        "localhost/crust-test-deny-write",
    );
    #[allow(deprecated)]
    {
        sc(&mut cfg).apparmor_profile = "localhost/not-loaded".into();
    }
    let id = e.create(&pod, cfg).await;
    e.start(&id).await;
    assert_eq!(e.wait_exited(&id).await.exit_code, 7);
    let mut cfg = ctr("denied-exec", &["sleep", "3600"]);
    #[allow(deprecated)]
    {
        sc(&mut cfg).apparmor_profile = "localhost/crust-test-deny-write".into();
    }
    let id = e.create(&pod, cfg).await;
    e.start(&id).await;
    assert_eq!(
        attr_of_exec(&mut e, &id).await,
        "crust-test-deny-write (enforce)"
    );
    let r = e.exec(&id, &["touch", "/tmp/y"], 10).await.unwrap();
    assert_ne!(r.exit_code, 0, "{r:?}");
    e.remove_pod(&pod.0).await;

    let pod = e.pod("aa-unloaded").await;
    let before_unloaded = e.d.leftovers();
    for (field, string) in [
        (
            profile(
                security_profile::ProfileType::Localhost,
                "localhost/not-loaded",
            ),
            "",
        ),
        (None, "localhost/not-loaded"),
    ] {
        let mut cfg = ctr("unloaded", &["true"]);
        sc(&mut cfg).apparmor = field;
        #[allow(deprecated)]
        {
            sc(&mut cfg).apparmor_profile = string.into();
        }
        let r = e.try_create(&pod, cfg).await;
        let err = r.expect_err("an unloaded profile");
        assert_eq!(err.code(), Code::FailedPrecondition, "{err:?}");
        assert!(err.message().contains("not-loaded"), "{err:?}");
    }
    assert_eq!(e.d.leftovers(), before_unloaded);
    e.remove_pod(&pod.0).await;
}
