//! The Kubernetes binaries a cluster suite runs, where they are found, and how a suite
//! that cannot run ends (a failure under `CI=true`, else a loud skip).

use crate::which;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The Kubernetes binaries the cluster runs.
#[derive(Clone)]
pub struct KubeBins {
    pub kubelet: PathBuf,
    pub apiserver: PathBuf,
    pub controller_manager: PathBuf,
    pub scheduler: PathBuf,
    pub kubectl: PathBuf,
    pub crictl: PathBuf,
    pub etcd: PathBuf,
    pub kube_proxy: PathBuf,
}

/// Where `hack/deps` unpacks the Kubernetes binaries (`<workspace>/target/kube-bin`).
pub fn default_kube_bin_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/kube-bin")
}

/// `name` from `$CRUST_KUBE_BIN`, else from where `hack/deps` unpacks them, else from
/// `PATH` (a kubectl there must be v1.2x or later: Debian's 1.20 is too old).
pub fn kube_bin(name: &str) -> Option<PathBuf> {
    if let Some(d) = std::env::var_os("CRUST_KUBE_BIN") {
        let p = PathBuf::from(d).join(name);
        return p.is_file().then_some(p);
    }
    let p = default_kube_bin_dir().join(name);
    if p.is_file() {
        return Some(p);
    }
    let p = which(name)?;
    if name == "kubectl" {
        let out = Command::new(&p)
            .args(["version", "--client", "-o", "json"])
            .output()
            .ok()?;
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).ok()?;
        let minor: u32 = v["clientVersion"]["minor"]
            .as_str()?
            .trim_end_matches('+')
            .parse()
            .ok()?;
        if minor < 26 {
            return None;
        }
    }
    Some(p)
}

/// Ends a cluster suite (its own harness) that cannot run: under `CI=true` a failure,
/// else a loud `SKIPPED` and libtest's summary with the suite ignored.
pub fn skip_suite(suite: &str, why: String) -> ! {
    if crate::ci() {
        eprintln!("{suite}: {why}; CI must run it");
        std::process::exit(1);
    }
    crate::say_skipped(&format!("{suite}: {why}"));
    println!("test result: ok. 0 passed; 0 failed; 1 ignored; 0 measured; 0 filtered out");
    std::process::exit(0);
}

/// What every cluster suite needs before it starts: root, `tools` on `PATH`, the
/// Kubernetes binaries and the reference plugins (their folder is returned: containerd's
/// node runs them, crustd's nodes look there after crust's own);
/// else [`skip_suite`].
pub fn suite_needs(suite: &str, tools: &[&str]) -> (KubeBins, PathBuf) {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        skip_suite(suite, "needs root".into());
    }
    let missing: Vec<&str> = tools
        .iter()
        .copied()
        .filter(|t| which(t).is_none())
        .collect();
    if !missing.is_empty() {
        skip_suite(
            suite,
            format!("needs {} (hack/deps installs them)", missing.join(", ")),
        );
    }
    let bins = kube_bins().unwrap_or_else(|m| {
        skip_suite(
            suite,
            format!(
                "no {} in $CRUST_KUBE_BIN, {} or PATH (hack/deps unpacks them)",
                m.join(", "),
                default_kube_bin_dir().display()
            ),
        )
    });
    let Some(portmap) = crate::reference_plugin("portmap") else {
        skip_suite(suite, "no reference portmap plugin".into())
    };
    (bins, portmap.parent().unwrap().to_path_buf())
}

/// The binaries, or what is missing.
pub fn kube_bins() -> Result<KubeBins, Vec<String>> {
    let mut missing = Vec::new();
    let mut get = |n: &str| {
        kube_bin(n).unwrap_or_else(|| {
            missing.push(n.to_string());
            PathBuf::new()
        })
    };
    let bins = KubeBins {
        kubelet: get("kubelet"),
        apiserver: get("kube-apiserver"),
        controller_manager: get("kube-controller-manager"),
        scheduler: get("kube-scheduler"),
        kubectl: get("kubectl"),
        crictl: get("crictl"),
        kube_proxy: get("kube-proxy"),
        etcd: which("etcd").unwrap_or_else(|| {
            missing.push("etcd (apt-get install etcd-server)".into());
            PathBuf::new()
        }),
    };
    if missing.is_empty() {
        Ok(bins)
    } else {
        Err(missing)
    }
}
