//! crustd under gRPC clients that are not Rust: Python's `grpcio` (grpc's C core) over
//! `unix:` targets, sending the `:authority` values real clients send on a unix socket.
//! The real kubelet (grpc-go) is the kubelet suite's.

use crust_e2e::crustd::Crustd;
use crust_e2e::require_root;
use std::path::Path;
use std::process::Command;

/// True when grpcio imports; in CI a missing grpcio fails (hack/deps installs it).
fn grpcio() -> bool {
    if !require_root(&["python3"]) {
        return false;
    }
    let ok = Command::new("python3")
        .args(["-c", "import grpc"])
        .status()
        .is_ok_and(|s| s.success());
    if !ok {
        let msg = "the grpcio test needs Python's grpcio (python3 -m pip install grpcio)";
        assert!(!crust_e2e::ci(), "{msg}; CI must run it");
        crust_e2e::say_skipped(msg);
    }
    ok
}

fn call(target: &str, authority: Option<&str>) -> serde_json::Value {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("clients/grpcio_cri.py");
    let mut cmd = Command::new("python3");
    cmd.arg(script).arg(target);
    if let Some(a) = authority {
        cmd.args(["--authority", a]);
    }
    let out = cmd.output().expect("running python3");
    assert!(
        out.status.success(),
        "grpcio client to {target} with authority {authority:?} failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("the client's JSON")
}

/// Unary and server-streaming calls succeed (and a NotFound stays NotFound) whatever
/// `:authority` the client sends: grpcio's own (the percent-encoded socket path), the
/// socket path as the kubelet v1.28 sends it, `localhost` as crictl does, and odd ones.
#[test]
fn grpcio_calls_over_unix_targets_with_any_authority() {
    if !grpcio() {
        return;
    }
    let d = Crustd::start();
    let sock = d.socket.to_str().unwrap().to_string();
    let targets = [format!("unix:{sock}"), format!("unix://{sock}")];
    let authorities = [
        None,
        Some(sock.as_str()),
        Some("localhost"),
        Some("unix:///run/containerd/containerd.sock"),
        Some("weird value with spaces"),
    ];
    for target in &targets {
        for authority in authorities {
            let r = call(target, authority);
            let what = format!("{target} with authority {authority:?}: {r}");
            assert_eq!(r["version"]["runtime_name"], "crust", "{what}");
            assert_eq!(r["version"]["runtime_api_version"], "v1", "{what}");
            assert_eq!(r["second_call"], "crust", "{what}");
            assert_eq!(r["status_error"], "NOT_FOUND", "{what}");
            assert_eq!(r["events_stream"], "open", "{what}");
        }
    }
}
