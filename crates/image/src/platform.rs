//! The node's platform as OCI names it, and which entry of an index fits it.
//!
//! The platform is derived from the host, as containerd's `platforms.DefaultSpec()`
//! does: the OS is linux, the architecture is this build's (`std::env::consts::ARCH`)
//! under Go's name (`GOARCH`), which is what indexes carry, and the variant is the one
//! OCI gives that architecture: arm64 is always v8; 32-bit arm takes its version from
//! `/proc/cpuinfo` (the CPU the images will run on).
//!
//! Entries are compared after containerd's normalization (an arm64 entry without a
//! variant is v8, an arm one is v7). An entry fits when its OS and architecture are
//! the node's and its variant is the node's; on 32-bit arm, a lower version fits too
//! (a v7 node runs v6 and v5 images), ranked after the exact one. Among entries that
//! fit equally, the index's order decides.

use crate::manifest::Platform;
use std::fmt;
use std::sync::OnceLock;

/// A platform a node runs images of.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NodePlatform {
    pub os: &'static str,
    pub architecture: &'static str,
    pub variant: Option<&'static str>,
}

impl fmt::Display for NodePlatform {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.os, self.architecture)?;
        if let Some(v) = self.variant {
            write!(f, "/{v}")?;
        }
        Ok(())
    }
}

/// OCI's (Go's) name of a Rust target architecture and the variant OCI gives it.
/// `arm_variant` is used for 32-bit arm only; architectures Go has no other name for
/// keep Rust's.
/// The crustlet's node labels take the same names from its own copy
/// (`node::host::go_arch`): it does not depend on this crate.
pub fn oci_arch(
    rust_arch: &'static str,
    little_endian: bool,
    arm_variant: &'static str,
) -> (&'static str, Option<&'static str>) {
    match rust_arch {
        "x86_64" => ("amd64", None),
        "x86" => ("386", None),
        "aarch64" => ("arm64", Some("v8")),
        "arm" => ("arm", Some(arm_variant)),
        "powerpc64" if little_endian => ("ppc64le", None),
        "powerpc64" => ("ppc64", None),
        "s390x" => ("s390x", None),
        "riscv64" => ("riscv64", None),
        "loongarch64" => ("loong64", None),
        other => (other, None),
    }
}

/// The variant of a 32-bit arm CPU from `/proc/cpuinfo`'s `CPU architecture` line
/// (containerd's reading of it). A 32-bit process on an ARMv8 CPU runs arm/v7 images;
/// without the line, v7, the variant an arm entry without one means.
pub fn arm_variant(cpuinfo: &str) -> &'static str {
    let arch = cpuinfo.lines().find_map(|l| {
        let (k, v) = l.split_once(':')?;
        (k.trim() == "CPU architecture").then(|| v.trim().to_ascii_lowercase())
    });
    match arch.as_deref() {
        Some("6" | "6tej") => "v6",
        Some("5" | "5t" | "5te" | "5tej") => "v5",
        _ => "v7",
    }
}

/// This node's platform.
pub fn node() -> NodePlatform {
    static NODE: OnceLock<NodePlatform> = OnceLock::new();
    *NODE.get_or_init(|| {
        let arm = match std::env::consts::ARCH {
            "arm" => arm_variant(&std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default()),
            _ => "v7",
        };
        let (architecture, variant) =
            oci_arch(std::env::consts::ARCH, cfg!(target_endian = "little"), arm);
        NodePlatform {
            os: "linux",
            architecture,
            variant,
        }
    })
}

/// The variant an entry of `arch` means when it names none (or an empty one).
fn normalized<'a>(arch: &str, variant: Option<&'a str>) -> Option<&'a str> {
    match (arch, variant.filter(|v| !v.is_empty())) {
        ("arm64", None) => Some("v8"),
        ("arm", None) => Some("v7"),
        (_, v) => v,
    }
}

/// The version number of an arm variant (`v7` → 7).
fn arm_version(v: &str) -> Option<u32> {
    v.strip_prefix('v')?.parse().ok()
}

impl NodePlatform {
    /// How well an entry's platform fits this node: 0 is an exact fit, higher is a
    /// lesser one (an older arm version), `None` does not run here.
    pub fn rank(&self, p: &Platform) -> Option<u32> {
        if p.os != self.os || p.architecture != self.architecture {
            return None;
        }
        let have = normalized(self.architecture, self.variant);
        let entry = normalized(&p.architecture, p.variant.as_deref());
        if have == entry {
            return Some(0);
        }
        match (self.architecture, have, entry) {
            ("arm", Some(have), Some(entry)) => {
                let (have, entry) = (arm_version(have)?, arm_version(entry)?);
                (entry < have).then(|| have - entry)
            }
            _ => None,
        }
    }

    /// The best-fitting of `platforms` (the first of equals), by position.
    pub fn choose<'a>(&self, platforms: impl IntoIterator<Item = &'a Platform>) -> Option<usize> {
        let mut best: Option<(u32, usize)> = None;
        for (i, p) in platforms.into_iter().enumerate() {
            if let Some(r) = self.rank(p) {
                if best.is_none_or(|(b, _)| r < b) {
                    best = Some((r, i));
                }
            }
        }
        best.map(|(_, i)| i)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(arch: &str, variant: Option<&str>) -> Platform {
        Platform {
            os: "linux".into(),
            architecture: arch.into(),
            variant: variant.map(Into::into),
        }
    }

    fn node_of(architecture: &'static str, variant: Option<&'static str>) -> NodePlatform {
        NodePlatform {
            os: "linux",
            architecture,
            variant,
        }
    }

    #[test]
    fn rust_arch_to_oci() {
        for (rust, le, want) in [
            ("x86_64", true, ("amd64", None)),
            ("x86", true, ("386", None)),
            ("aarch64", true, ("arm64", Some("v8"))),
            ("arm", true, ("arm", Some("v7"))),
            ("powerpc64", true, ("ppc64le", None)),
            ("powerpc64", false, ("ppc64", None)),
            ("s390x", false, ("s390x", None)),
            ("riscv64", true, ("riscv64", None)),
            ("loongarch64", true, ("loong64", None)),
            ("sparc64", false, ("sparc64", None)),
        ] {
            assert_eq!(oci_arch(rust, le, "v7"), want, "{rust}");
        }
        assert_eq!(oci_arch("arm", true, "v6"), ("arm", Some("v6")));
    }

    #[test]
    fn arm_variant_from_cpuinfo() {
        let info = |a: &str| {
            format!("processor\t: 0\nmodel name\t: ARMv7 Processor rev 4 (v7l)\nCPU architecture: {a}\nCPU variant\t: 0x0\n")
        };
        assert_eq!(arm_variant(&info("7")), "v7");
        assert_eq!(arm_variant(&info("8")), "v7");
        assert_eq!(arm_variant(&info("6TEJ")), "v6");
        assert_eq!(arm_variant(&info("5TE")), "v5");
        assert_eq!(arm_variant(""), "v7");
    }

    #[cfg(target_arch = "x86_64")]
    #[test]
    fn this_node_is_linux_amd64() {
        assert_eq!(node(), node_of("amd64", None));
        assert_eq!(node().to_string(), "linux/amd64");
    }

    #[test]
    fn amd64_takes_its_own_and_no_variant() {
        let n = node_of("amd64", None);
        let idx = [
            p("arm64", Some("v8")),
            p("amd64", Some("v3")),
            p("amd64", None),
        ];
        assert_eq!(n.choose(&idx), Some(2));
        assert_eq!(n.choose(&idx[..2]), None);
        let mut windows = p("amd64", None);
        windows.os = "windows".into();
        assert_eq!(n.choose(&[windows]), None);
    }

    #[test]
    fn arm64_v8_is_optional() {
        let n = node_of("arm64", Some("v8"));
        assert_eq!(n.rank(&p("arm64", None)), Some(0));
        assert_eq!(n.rank(&p("arm64", Some("v8"))), Some(0));
        assert_eq!(n.rank(&p("arm64", Some(""))), Some(0));
        assert_eq!(n.rank(&p("arm", Some("v7"))), None);
        assert_eq!(n.rank(&p("arm64", Some("v9"))), None);
        // Equals: the index's order decides.
        let idx = [
            p("amd64", None),
            p("arm", Some("v7")),
            p("arm64", Some("v8")),
            p("arm64", None),
        ];
        assert_eq!(n.choose(&idx), Some(2));
        assert_eq!(n.to_string(), "linux/arm64/v8");
    }

    #[test]
    fn arm_prefers_its_version_then_older_ones() {
        let v7 = node_of("arm", Some("v7"));
        let idx = [
            p("arm", Some("v5")),
            p("arm", Some("v6")),
            p("arm", Some("v7")),
            p("arm64", None),
        ];
        assert_eq!(v7.choose(&idx), Some(2));
        assert_eq!(v7.choose(&idx[..2]), Some(1));
        // An arm entry without a variant is v7.
        assert_eq!(v7.rank(&p("arm", None)), Some(0));
        let v6 = node_of("arm", Some("v6"));
        assert_eq!(v6.rank(&p("arm", None)), None);
        assert_eq!(v6.choose(&idx), Some(1));
        assert_eq!(v6.rank(&p("arm", Some("v8"))), None);
    }
}
