//! A pod's user namespace (`hostUsers: false`), as the kubelet asks for it in
//! `NamespaceOption.userns_options`, checked with containerd's rules:
//!
//! - no options, or mode NODE without mappings: the host's user namespace;
//! - mode NODE with mappings: refused;
//! - mode POD: exactly one uid and one gid mapping, each mapping container id 0 (the
//!   image's root) and of non-zero length; the pod gets a user namespace of its own;
//! - modes CONTAINER and TARGET: refused (the CRI defines neither for users).
//!
//! The namespace is made by `container::userns`, entered by the pause, which makes the
//! pod's other namespaces inside it, and pinned as `user` beside them; containers join
//! it by that pin and get id-mapped layers and (where the kubelet asks) binds.

use crate::cri::error::{Error, Result};
use container::userns::IdMap;
use cri_api::{IdMapping, NamespaceMode, NamespaceOption, UserNamespace};

/// A pod's maps: one line each, container id 0 first.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PodMaps {
    pub uid: IdMap,
    pub gid: IdMap,
}

impl PodMaps {
    /// The host uid and gid of the container's root.
    pub fn host_root(&self) -> (u32, u32) {
        (self.uid.host_id, self.gid.host_id)
    }
}

fn mode_name(mode: i32) -> String {
    NamespaceMode::try_from(mode)
        .map(|m| m.as_str_name().to_string())
        .unwrap_or_else(|_| format!("{mode}"))
}

fn one(what: &str, maps: &[IdMapping]) -> Result<IdMap> {
    let [m] = maps else {
        return Err(Error::InvalidArgument(format!(
            "user namespace mode POD needs exactly one {what} mapping, got {}",
            maps.len()
        )));
    };
    let m = IdMap {
        container_id: m.container_id,
        host_id: m.host_id,
        size: m.length,
    };
    if m.container_id != 0 {
        return Err(Error::InvalidArgument(format!(
            "{what} mapping {m}: container id 0 must be mapped (the mapping starts at {})",
            m.container_id
        )));
    }
    container::userns::check(what, &[m]).map_err(|e| Error::InvalidArgument(e.to_string()))?;
    Ok(m)
}

/// The maps of a pod that gets its own user namespace, `None` for one on the host's;
/// an invalid request is `InvalidArgument` naming what is wrong.
pub fn pod_maps(opts: Option<&UserNamespace>) -> Result<Option<PodMaps>> {
    let Some(u) = opts else { return Ok(None) };
    match NamespaceMode::try_from(u.mode) {
        Ok(NamespaceMode::Node) => {
            if !u.uids.is_empty() || !u.gids.is_empty() {
                return Err(Error::InvalidArgument(format!(
                    "user namespace mode NODE takes no mappings, got {} uid and {} gid mappings",
                    u.uids.len(),
                    u.gids.len()
                )));
            }
            Ok(None)
        }
        Ok(NamespaceMode::Pod) => Ok(Some(PodMaps {
            uid: one("uid", &u.uids)?,
            gid: one("gid", &u.gids)?,
        })),
        _ => Err(Error::InvalidArgument(format!(
            "user namespace mode {} is not supported: only POD and NODE are",
            mode_name(u.mode)
        ))),
    }
}

/// The pod's maps from its namespace options.
pub fn of_options(ns: Option<&NamespaceOption>) -> Result<Option<PodMaps>> {
    pod_maps(ns.and_then(|n| n.userns_options.as_ref()))
}

/// A container's user namespace options must be its pod's, when it sends any (what
/// containerd checks): a container cannot leave or change the pod's namespace.
pub fn check_container(
    pod: Option<&UserNamespace>,
    container: Option<&UserNamespace>,
) -> Result<()> {
    let Some(c) = container else { return Ok(()) };
    let same = match pod {
        Some(p) => p == c,
        // A pod without options is on the host's: NODE without mappings says the same.
        None => c.mode == NamespaceMode::Node as i32 && c.uids.is_empty() && c.gids.is_empty(),
    };
    if same {
        Ok(())
    } else {
        Err(Error::InvalidArgument(
            "the container's user namespace options differ from its pod sandbox's".into(),
        ))
    }
}

/// The CRI mappings of a mount must be the pod's own (the only ones crust can id-map
/// with); `Ok(true)` when the mount asks for id-mapping.
pub fn mount_mapped(m: &cri_api::Mount, pod: Option<&PodMaps>) -> Result<bool> {
    if m.uid_mappings.is_empty() && m.gid_mappings.is_empty() {
        return Ok(false);
    }
    let same = |maps: &[IdMapping], want: &IdMap| matches!(maps, [x] if x.container_id == want.container_id && x.host_id == want.host_id && x.length == want.size);
    match pod {
        Some(p) if same(&m.uid_mappings, &p.uid) && same(&m.gid_mappings, &p.gid) => Ok(true),
        Some(_) => Err(Error::InvalidArgument(format!(
            "mount {}: id mappings other than the pod's user namespace's are not supported",
            m.container_path
        ))),
        None => Err(Error::InvalidArgument(format!(
            "mount {}: id mappings need a pod with its own user namespace",
            m.container_path
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map(c: u32, h: u32, n: u32) -> IdMapping {
        IdMapping {
            container_id: c,
            host_id: h,
            length: n,
        }
    }

    fn ns(mode: NamespaceMode, uids: Vec<IdMapping>, gids: Vec<IdMapping>) -> UserNamespace {
        UserNamespace {
            mode: mode as i32,
            uids,
            gids,
        }
    }

    fn refused(u: UserNamespace) -> String {
        match pod_maps(Some(&u)) {
            Err(Error::InvalidArgument(m)) => m,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn pod_mode_takes_one_mapping_of_root_each() {
        let u = ns(
            NamespaceMode::Pod,
            vec![map(0, 100000, 65536)],
            vec![map(0, 200000, 65536)],
        );
        let m = pod_maps(Some(&u)).unwrap().unwrap();
        assert_eq!(m.host_root(), (100000, 200000));
        assert_eq!(m.uid.size, 65536);

        let two = vec![map(0, 1000, 100000), map(0, 2000, 100000)];
        let e = refused(ns(NamespaceMode::Pod, two.clone(), two));
        assert_eq!(
            e,
            "user namespace mode POD needs exactly one uid mapping, got 2"
        );
        let e = refused(ns(NamespaceMode::Pod, vec![map(0, 1, 1)], vec![]));
        assert_eq!(
            e,
            "user namespace mode POD needs exactly one gid mapping, got 0"
        );
        let e = refused(ns(
            NamespaceMode::Pod,
            vec![map(1, 1000, 100000)],
            vec![map(1, 1000, 100000)],
        ));
        assert!(e.contains("container id 0 must be mapped"), "{e}");
        let e = refused(ns(
            NamespaceMode::Pod,
            vec![map(0, 1, 0)],
            vec![map(0, 1, 1)],
        ));
        assert!(e.contains("length 0"), "{e}");
        let e = refused(ns(
            NamespaceMode::Pod,
            vec![map(0, u32::MAX, 2)],
            vec![map(0, 1, 1)],
        ));
        assert!(e.contains("past 4294967295"), "{e}");
    }

    #[test]
    fn node_mode_and_no_options_are_the_hosts() {
        assert_eq!(pod_maps(None).unwrap(), None);
        assert_eq!(
            pod_maps(Some(&ns(NamespaceMode::Node, vec![], vec![]))).unwrap(),
            None
        );
        let e = refused(ns(NamespaceMode::Node, vec![map(0, 1, 1)], vec![]));
        assert_eq!(
            e,
            "user namespace mode NODE takes no mappings, got 1 uid and 0 gid mappings"
        );
    }

    #[test]
    fn container_and_target_modes_are_refused() {
        for (mode, name) in [
            (NamespaceMode::Container, "CONTAINER"),
            (NamespaceMode::Target, "TARGET"),
        ] {
            let e = refused(ns(mode, vec![], vec![]));
            assert_eq!(
                e,
                format!("user namespace mode {name} is not supported: only POD and NODE are")
            );
        }
    }

    #[test]
    fn containers_keep_their_pods_namespace() {
        let pod = ns(
            NamespaceMode::Pod,
            vec![map(0, 1000, 10)],
            vec![map(0, 1000, 10)],
        );
        check_container(Some(&pod), None).unwrap();
        check_container(Some(&pod), Some(&pod)).unwrap();
        check_container(None, Some(&ns(NamespaceMode::Node, vec![], vec![]))).unwrap();
        let other = ns(
            NamespaceMode::Pod,
            vec![map(0, 2000, 10)],
            vec![map(0, 2000, 10)],
        );
        assert!(check_container(Some(&pod), Some(&other)).is_err());
        assert!(check_container(None, Some(&pod)).is_err());
    }

    #[test]
    fn mounts_may_ask_for_the_pods_mappings_only() {
        let pod = PodMaps {
            uid: IdMap {
                container_id: 0,
                host_id: 1000,
                size: 10,
            },
            gid: IdMap {
                container_id: 0,
                host_id: 2000,
                size: 10,
            },
        };
        let mut m = cri_api::Mount {
            container_path: "/data".into(),
            ..Default::default()
        };
        assert!(!mount_mapped(&m, Some(&pod)).unwrap());
        m.uid_mappings = vec![map(0, 1000, 10)];
        m.gid_mappings = vec![map(0, 2000, 10)];
        assert!(mount_mapped(&m, Some(&pod)).unwrap());
        assert!(mount_mapped(&m, None).is_err());
        m.gid_mappings = vec![map(0, 3000, 10)];
        assert!(mount_mapped(&m, Some(&pod)).is_err());
    }
}
