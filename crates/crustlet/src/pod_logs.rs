//! The pods' log directories, `<pod-logs-dir>/<namespace>_<name>_<uid>`, where the
//! runtime writes each container's CRI log: removed with the pod, as the kubelet's
//! container GC removes a deleted pod's. Nothing else does: RemovePodSandbox leaves
//! them to the kubelet (crustd and containerd alike), so every pod that came and went
//! would leave its directory, a directory per container and its log (the churn
//! benchmark, tests/benches/churn.rs, counted three entries per pod).

use std::collections::HashSet;
use std::path::Path;
use std::time::SystemTime;

/// The pod uid a log directory's name ends with (namespaces and pod names are DNS
/// names: no `_` in them).
fn uid_of(name: &str) -> Option<&str> {
    name.rsplit_once('_')
        .map(|(_, uid)| uid)
        .filter(|uid| !uid.is_empty())
}

/// Removes the pod's log directory `dir` (`spec::log_directory`) with the logs in it;
/// best effort, as the pod is going.
pub fn remove(dir: &Path) {
    if let Err(e) = std::fs::remove_dir_all(dir) {
        if e.kind() != std::io::ErrorKind::NotFound {
            tracing::warn!(dir = %dir.display(), "removing a pod's logs: {e}");
        }
    }
}

/// Removes every log directory under `logs_dir` of a pod not in `known` (uids): those
/// of pods deleted while the crustlet was down, or left by a crustlet that stopped
/// between removing a pod's sandbox and its logs. A directory changed at or after
/// `started` (the crustlet's start) stays: it is a pod's that came after `known` was
/// listed.
pub fn remove_unknown(logs_dir: &Path, known: &HashSet<String>, started: SystemTime) {
    let Ok(rd) = std::fs::read_dir(logs_dir) else {
        return;
    };
    for e in rd.flatten() {
        if !e.file_type().is_ok_and(|t| t.is_dir()) {
            continue;
        }
        let old = e
            .metadata()
            .and_then(|m| m.modified())
            .is_ok_and(|t| t < started);
        if !old {
            continue;
        }
        let name = e.file_name();
        let gone = name
            .to_str()
            .and_then(uid_of)
            .is_some_and(|uid| !known.contains(uid));
        if gone {
            tracing::info!(dir = %e.path().display(), "removing the logs of a pod that no longer exists");
            remove(&e.path());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uid_is_what_follows_the_last_underscore() {
        assert_eq!(uid_of("default_web-1_0b1c-22"), Some("0b1c-22"));
        assert_eq!(uid_of("kube-system_dns_u"), Some("u"));
        assert_eq!(uid_of("nounderscore"), None);
        assert_eq!(uid_of("ns_name_"), None);
    }

    #[test]
    fn removes_a_pods_logs_and_only_unknown_pods_in_a_sweep() {
        let d = std::env::temp_dir().join(format!("crustlet-pod-logs-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        for pod in ["ns_a_u1", "ns_b_u2", "ns_c_u3"] {
            std::fs::create_dir_all(d.join(pod).join("main")).unwrap();
            std::fs::write(d.join(pod).join("main/0.log"), "x\n").unwrap();
        }
        // Not a pod's: a file, and a dir without a uid.
        std::fs::write(d.join("note_x_y"), "").unwrap();
        std::fs::create_dir_all(d.join("other")).unwrap();

        remove(&d.join("ns_a_u1"));
        remove(&d.join("ns_a_u1"));
        let known: HashSet<String> = ["u2".to_string()].into();
        // Changed since the start: a pod's that came after the list.
        remove_unknown(&d, &known, SystemTime::UNIX_EPOCH);
        assert!(d.join("ns_c_u3").is_dir());
        let later = SystemTime::now() + std::time::Duration::from_secs(60);
        remove_unknown(&d, &known, later);
        let mut left: Vec<String> = std::fs::read_dir(&d)
            .unwrap()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        left.sort();
        assert_eq!(left, ["note_x_y", "ns_b_u2", "other"]);
        std::fs::remove_dir_all(&d).ok();
    }
}
