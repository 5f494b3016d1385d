//! Root tests that need systemd as PID 1, for crustd's systemd cgroup driver: systemd's
//! D-Bus API on the system bus (and its private socket, /run/systemd/private), and a
//! cgroup v2 tree systemd owns.
//!
//! This project's machines do not boot systemd, so every test here is `#[ignore]`d;
//! `hack/vm-test` runs them with `--include-ignored` in its second boot, where the
//! host's systemd is PID 1 with only the system bus started (dbus-daemon on
//! /run/dbus/system_bus_socket) and the suite runs in a service with `Delegate=yes`
//! (its cgroup, `/system.slice/crust-vm-suites.service`, is the test process's own),
//! with `CRUST_SYSTEMD_VM=1` and `CRUST_CGROUP_V2_VM=1` set. The smoke test comes first:
//! when it fails, the boot is at fault, not the driver.

use crust_e2e::{proc_cgroup, require_root, run, unique};
use std::process::Command;
use std::time::{Duration, Instant};

/// `busctl --system ARGS`, through dbus-daemon as the driver's D-Bus client goes;
/// panics with busctl's error unless it succeeds, returns its output.
fn busctl(args: &[&str]) -> String {
    let out = run(Command::new("busctl").arg("--system").args(args));
    assert!(
        out.status.success(),
        "busctl --system {args:?}: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// The string in a busctl answer such as `s "252"` or `o "/org/..."`.
fn quoted(answer: &str) -> &str {
    answer
        .split_once('"')
        .and_then(|(_, rest)| rest.rsplit_once('"'))
        .map(|(s, _)| s)
        .unwrap_or_else(|| panic!("no quoted string in busctl's answer {answer:?}"))
}

/// The boot itself: systemd is PID 1 and answers on the system bus and on its private
/// socket, and this process sits in its service's cgroup, delegated to it.
#[test]
#[ignore = "needs systemd as PID 1: runs in hack/vm-test's systemd boot"]
fn smoke_systemd_is_pid1_answers_on_the_bus_and_delegates_our_cgroup() {
    if !require_root(&["busctl", "systemctl"]) {
        return;
    }
    let comm = std::fs::read_to_string("/proc/1/comm").expect("read /proc/1/comm");
    assert_eq!(
        comm.trim_end(),
        "systemd",
        "PID 1 is not systemd: these tests run in hack/vm-test's systemd boot"
    );

    // systemd takes its bus name once dbus.service is up; hack/vm/init waits for that
    // before the suites start, so this only guards against running elsewhere.
    let ping = [
        "call",
        "org.freedesktop.systemd1",
        "/org/freedesktop/systemd1",
        "org.freedesktop.DBus.Peer",
        "Ping",
    ];
    let deadline = Instant::now() + Duration::from_secs(30);
    while !run(Command::new("busctl").arg("--system").args(ping))
        .status
        .success()
        && Instant::now() < deadline
    {
        std::thread::sleep(Duration::from_millis(500));
    }
    busctl(&ping);
    let version = busctl(&[
        "get-property",
        "org.freedesktop.systemd1",
        "/org/freedesktop/systemd1",
        "org.freedesktop.systemd1.Manager",
        "Version",
    ]);
    assert!(
        !quoted(&version).is_empty(),
        "systemd's Version: {version:?}"
    );

    // Our cgroup, as the kernel says, is our service's, as systemd says over the bus.
    let cgroup = proc_cgroup("self", "").expect("no 0:: line in /proc/self/cgroup");
    let unit = cgroup.rsplit('/').next().unwrap_or_default();
    assert!(
        unit.ends_with(".service"),
        "the test process is in {cgroup}, not a service's cgroup"
    );
    let pid = std::process::id().to_string();
    let object = busctl(&[
        "call",
        "org.freedesktop.systemd1",
        "/org/freedesktop/systemd1",
        "org.freedesktop.systemd1.Manager",
        "GetUnitByPID",
        "u",
        &pid,
    ]);
    let object = quoted(&object);
    let property = |name: &str| {
        busctl(&[
            "get-property",
            "org.freedesktop.systemd1",
            object,
            "org.freedesktop.systemd1.Service",
            name,
        ])
    };
    assert_eq!(quoted(&property("ControlGroup")), cgroup, "unit {object}");
    assert_eq!(property("Delegate"), "b true", "unit {object}");

    // The same through systemd's private socket (systemctl as root uses it), the
    // driver's fallback when the system bus is not there.
    let out = run(Command::new("systemctl").args(["show", "-P", "Delegate", unit]));
    assert!(out.status.success(), "systemctl show {unit}: {out:?}");
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "yes");

    // Delegated: the cgroup is ours to make children in (and remove them).
    let child = format!("/sys/fs/cgroup{cgroup}/{}", unique("sd"));
    std::fs::create_dir(&child).unwrap_or_else(|e| panic!("mkdir {child}: {e}"));
    let made = std::path::Path::new(&child).join("cgroup.procs").is_file();
    std::fs::remove_dir(&child).unwrap_or_else(|e| panic!("rmdir {child}: {e}"));
    assert!(made, "{child} is no cgroup (no cgroup.procs)");
}
