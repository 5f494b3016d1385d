//! What a pod needs from outside itself before its containers can be made: its volumes
//! as folders on the node (emptyDir, hostPath, configMap, secret, downwardAPI, projected
//! with service-account tokens), the values of its containers' environment, and the
//! credentials of its imagePullSecrets. ConfigMaps, Secrets and tokens come from the
//! apiserver; a static pod without one can use emptyDir and hostPath only.
//!
//! Files of configMap, secret, downwardAPI and projected volumes are written as the
//! kubelet writes them: into a fresh `..<stamp>` folder, then `..data` is switched to it
//! by a rename and each top-level name is a symlink through `..data`, so a container
//! never sees half an update.

pub mod tmpfs;

use crate::spec;
use base64::Engine as _;
use k8s_openapi::api::authentication::v1::{BoundObjectReference, TokenRequest, TokenRequestSpec};
use k8s_openapi::api::core::v1::{
    ConfigMap, Container, DownwardAPIVolumeFile, EnvVar, EnvVarSource, KeyToPath, Pod,
    ResourceFieldSelector, ResourceRequirements, Secret, ServiceAccount, Volume,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use kube::api::{Api, PostParams};
use std::collections::{BTreeMap, HashMap};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

/// A reason the pod cannot run yet, shown in its status and events.
#[derive(Debug, thiserror::Error)]
pub enum InputError {
    #[error("{0}")]
    Invalid(String),
    #[error("{0}")]
    Missing(String),
    #[error("apiserver: {0}")]
    Api(String),
}

impl InputError {
    /// The container waiting reason the kubelet shows for it.
    pub fn reason(&self) -> &'static str {
        // The kubelet shows every failure to gather a container's inputs alike.
        "CreateContainerConfigError"
    }
}

fn api_err(e: kube::Error) -> InputError {
    InputError::Api(e.to_string())
}

/// The pod's volumes as made: each one's folder (or file, for a hostPath file), by name.
#[derive(Clone, Debug, Default)]
pub struct Volumes {
    pub dirs: HashMap<String, PathBuf>,
    /// The claimed volumes the kubelet measures for `/stats/summary` and its
    /// `kubelet_volume_stats_*` metrics: those of local PersistentVolumes (its local
    /// plugin reports the statfs of the volume's path; a hostPath one reports nothing).
    pub measured: Vec<Measured>,
}

/// A claimed volume whose use is reported under its claim's name.
#[derive(Clone, Debug, PartialEq)]
pub struct Measured {
    /// The pod's namespace, the claim's.
    pub namespace: String,
    /// The pod's name for the volume.
    pub volume: String,
    /// The claim, in the pod's namespace (an ephemeral volume's is `<pod>-<volume>`).
    pub claim: String,
    pub path: PathBuf,
}

pub struct Inputs<'a> {
    pub client: Option<&'a kube::Client>,
    pub services: Option<&'a crate::services::Services>,
    pub pod: &'a Pod,
    pub pod_dir: PathBuf,
    pub node_name: &'a str,
    pub node_ip: &'a str,
}

impl Inputs<'_> {
    fn ns(&self) -> &str {
        spec::namespace(self.pod)
    }

    fn client(&self, what: &str) -> Result<&kube::Client, InputError> {
        self.client.ok_or_else(|| {
            InputError::Invalid(format!("{what} needs an apiserver (this is a static pod)"))
        })
    }

    async fn config_map(
        &self,
        name: &str,
        optional: bool,
    ) -> Result<Option<ConfigMap>, InputError> {
        let api: Api<ConfigMap> = Api::namespaced(self.client("a configMap")?.clone(), self.ns());
        match api.get_opt(name).await.map_err(api_err)? {
            Some(c) => Ok(Some(c)),
            None if optional => Ok(None),
            None => Err(InputError::Missing(format!("configmap {name:?} not found"))),
        }
    }

    async fn secret(&self, name: &str, optional: bool) -> Result<Option<Secret>, InputError> {
        let api: Api<Secret> = Api::namespaced(self.client("a secret")?.clone(), self.ns());
        match api.get_opt(name).await.map_err(api_err)? {
            Some(s) => Ok(Some(s)),
            None if optional => Ok(None),
            None => Err(InputError::Missing(format!("secret {name:?} not found"))),
        }
    }

    /// Makes or refreshes every volume of the pod. A claimed volume already found (in
    /// `before`, the last result) is kept as it is: the kubelet mounts a claim's volume
    /// once, and neither asks for the claim again nor walks the volume for the fsGroup
    /// again while the pod runs.
    pub async fn volumes(&self, before: Option<&Volumes>) -> Result<Volumes, InputError> {
        let mut out = Volumes::default();
        for v in spec::spec(self.pod).volumes.iter().flatten() {
            let claim = v
                .persistent_volume_claim
                .as_ref()
                .map(|c| c.claim_name.clone())
                .or_else(|| {
                    // The claim the ephemeral volume controller makes from the template.
                    v.ephemeral
                        .as_ref()
                        .map(|_| format!("{}-{}", spec::name(self.pod), v.name))
                });
            let Some(claim) = claim else {
                out.dirs.insert(v.name.clone(), self.volume(v).await?);
                continue;
            };
            if let Some(d) = before.and_then(|b| b.dirs.get(&v.name)) {
                let measured = before.into_iter().flat_map(|b| &b.measured);
                out.measured
                    .extend(measured.filter(|m| m.volume == v.name).cloned());
                out.dirs.insert(v.name.clone(), d.clone());
                continue;
            }
            let read_only = v
                .persistent_volume_claim
                .as_ref()
                .and_then(|c| c.read_only)
                .unwrap_or(false);
            let (dir, local) = self
                .claimed(&claim, read_only, v.ephemeral.is_some())
                .await?;
            if local {
                out.measured.push(Measured {
                    namespace: self.ns().to_string(),
                    volume: v.name.clone(),
                    claim,
                    path: dir.clone(),
                });
            }
            out.dirs.insert(v.name.clone(), dir);
        }
        Ok(out)
    }

    /// A volume that no claim names.
    async fn volume(&self, v: &Volume) -> Result<PathBuf, InputError> {
        let dir = |plugin: &str| self.pod_dir.join("volumes").join(plugin).join(&v.name);
        let io = |p: &Path, e: std::io::Error| InputError::Invalid(format!("{}: {e}", p.display()));
        if let Some(ed) = &v.empty_dir {
            let d = dir("kubernetes.io~empty-dir");
            // World-writable, as the kubelet makes them, so any user in the pod can
            // write (a tmpfs as mounted: sticky too); with an fsGroup, the group's and
            // setgid, so what the pod writes there is the group's too (the kubelet's
            // volume ownership).
            let mut mode = 0o777;
            if ed.medium.as_deref() == Some("Memory") {
                let size = tmpfs::size(ed, self.pod, crate::node::memory_allocatable());
                tmpfs::set_up(&d, size).map_err(|e| io(&d, e))?;
                mode = 0o1777;
            } else {
                std::fs::create_dir_all(&d).map_err(|e| io(&d, e))?;
            }
            let fs_group = spec::spec(self.pod)
                .security_context
                .as_ref()
                .and_then(|s| s.fs_group)
                .and_then(|g| u32::try_from(g).ok());
            if let Some(gid) = fs_group {
                std::os::unix::fs::lchown(&d, None, Some(gid)).map_err(|e| io(&d, e))?;
                mode |= 0o2000;
            }
            std::fs::set_permissions(&d, std::fs::Permissions::from_mode(mode))
                .map_err(|e| io(&d, e))?;
            return Ok(d);
        }
        if let Some(h) = &v.host_path {
            return host_path(h);
        }
        let files = if let Some(c) = &v.config_map {
            let mode = c.default_mode.unwrap_or(0o644);
            match self
                .config_map(&c.name, c.optional.unwrap_or(false))
                .await?
            {
                Some(cm) => key_files(config_map_data(&cm), c.items.as_deref(), mode, &c.name)?,
                None => vec![],
            }
        } else if let Some(s) = &v.secret {
            let name = s.secret_name.clone().unwrap_or_default();
            let mode = s.default_mode.unwrap_or(0o644);
            match self.secret(&name, s.optional.unwrap_or(false)).await? {
                Some(sec) => key_files(secret_data(&sec), s.items.as_deref(), mode, &name)?,
                None => vec![],
            }
        } else if let Some(d) = &v.downward_api {
            let mode = d.default_mode.unwrap_or(0o644);
            self.downward_files(d.items.as_deref().unwrap_or_default(), mode)
                .await?
        } else if let Some(p) = &v.projected {
            self.projected(p).await?
        } else {
            return Err(InputError::Invalid(format!(
                "volume {:?}: only emptyDir, hostPath, persistentVolumeClaim and ephemeral (of hostPath and local volumes), configMap, secret, downwardAPI and projected volumes are supported",
                v.name
            )));
        };
        let plugin = if v.config_map.is_some() {
            "kubernetes.io~configmap"
        } else if v.secret.is_some() {
            "kubernetes.io~secret"
        } else if v.downward_api.is_some() {
            "kubernetes.io~downward-api"
        } else {
            "kubernetes.io~projected"
        };
        let d = dir(plugin);
        let fs_group = spec::spec(self.pod)
            .security_context
            .as_ref()
            .and_then(|s| s.fs_group);
        write_atomically(&d, &files, fs_group).map_err(|e| io(&d, e))?;
        Ok(d)
    }

    /// The folder of the PersistentVolume bound to a claim, found as the kubelet's volume
    /// manager finds it (the claim bound and not being deleted, the volume bound to it)
    /// and with its errors. Volumes the node has without a driver: `hostPath` (checked
    /// as a hostPath volume) and `local` (a path on the node, which gets the pod's
    /// fsGroup as the kubelet's local plugin gives it, unless mounted read-only).
    /// Others need an attacher or a CSI driver, which crust does not have.
    /// An `ephemeral` volume's claim must be the pod's own (its controller owner), as
    /// the kubelet checks: a claim of that name made otherwise is not the pod's volume.
    /// The flag: the volume is `local` (which the kubelet measures; not a hostPath one).
    async fn claimed(
        &self,
        claim_name: &str,
        read_only: bool,
        ephemeral: bool,
    ) -> Result<(PathBuf, bool), InputError> {
        use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim};
        let client = self.client("a persistentVolumeClaim")?.clone();
        let ns = self.ns();
        let claim = format!("{ns}/{claim_name}");
        let pvc = Api::<PersistentVolumeClaim>::namespaced(client.clone(), ns)
            .get_opt(claim_name)
            .await
            .map_err(|e| {
                InputError::Api(format!(
                    "error processing PVC {claim}: failed to fetch PVC from API server: {e}"
                ))
            })?
            .ok_or_else(|| {
                InputError::Missing(format!(
                    "error processing PVC {claim}: failed to fetch PVC from API server: \
                     persistentvolumeclaims {claim_name:?} not found"
                ))
            })?;
        let pod_uid = self.pod.metadata.uid.as_deref();
        if ephemeral
            && !pvc.metadata.owner_references.iter().flatten().any(|o| {
                o.controller == Some(true) && o.kind == "Pod" && Some(o.uid.as_str()) == pod_uid
            })
        {
            return Err(InputError::Invalid(format!(
                "PVC {claim} was not created for pod {ns}/{} (pod is not owner)",
                spec::name(self.pod)
            )));
        }
        if pvc.metadata.deletion_timestamp.is_some() {
            return Err(InputError::Invalid(format!(
                "error processing PVC {claim}: PVC is being deleted"
            )));
        }
        let phase = pvc
            .status
            .as_ref()
            .and_then(|s| s.phase.clone())
            .unwrap_or_default();
        let pv_name = pvc
            .spec
            .as_ref()
            .and_then(|s| s.volume_name.clone())
            .unwrap_or_default();
        if phase != "Bound" {
            return Err(InputError::Missing(format!(
                "error processing PVC {claim}: PVC is not bound"
            )));
        }
        if pv_name.is_empty() {
            return Err(InputError::Missing(format!(
                "error processing PVC {claim}: PVC has empty pvc.Spec.VolumeName"
            )));
        }
        let pv = Api::<PersistentVolume>::all(client)
            .get_opt(&pv_name)
            .await
            .map_err(|e| {
                InputError::Api(format!(
                    "error processing PVC {claim}: failed to fetch PV {pv_name} from API server: {e}"
                ))
            })?
            .ok_or_else(|| {
                InputError::Missing(format!(
                    "error processing PVC {claim}: failed to fetch PV {pv_name} from API \
                     server: persistentvolumes {pv_name:?} not found"
                ))
            })?;
        let spec = pv.spec.unwrap_or_default();
        match spec
            .claim_ref
            .as_ref()
            .map(|r| r.uid.as_deref().unwrap_or(""))
        {
            None => {
                return Err(InputError::Invalid(format!(
                    "error processing PVC {claim}: found PV object {pv_name} but it has a nil \
                     pv.Spec.ClaimRef indicating it is not yet bound to the claim"
                )))
            }
            Some(uid) if Some(uid) != pvc.metadata.uid.as_deref() => {
                return Err(InputError::Invalid(format!(
                    "error processing PVC {claim}: found PV object {pv_name} but its \
                     pv.Spec.ClaimRef.UID ({uid}) does not point to claim.UID ({})",
                    pvc.metadata.uid.as_deref().unwrap_or("")
                )))
            }
            Some(_) => {}
        }
        if spec.volume_mode.as_deref() == Some("Block") {
            return Err(InputError::Invalid(format!(
                "PV {pv_name:?}: volumeMode Block is not supported by crust; use Filesystem"
            )));
        }
        if let Some(h) = &spec.host_path {
            let source = k8s_openapi::api::core::v1::HostPathVolumeSource {
                path: h.path.clone(),
                type_: h.type_.clone(),
            };
            return Ok((host_path(&source)?, false));
        }
        let Some(local) = &spec.local else {
            return Err(InputError::Invalid(format!(
                "PV {pv_name:?}: only hostPath and local PersistentVolumes can be mounted by \
                 crust (others need an attacher or a CSI driver)"
            )));
        };
        let p = PathBuf::from(&local.path);
        let meta = std::fs::metadata(&p).map_err(|e| {
            InputError::Invalid(format!(
                "MountVolume.NewMounter initialization failed for volume {pv_name:?} : path {:?} \
                 does not exist: {e}",
                local.path
            ))
        })?;
        let fs_group = spec::spec(self.pod)
            .security_context
            .as_ref()
            .and_then(|s| Some((s.fs_group?, s.fs_group_change_policy.clone())));
        if let (Some((gid, policy)), true, false) = (fs_group, meta.is_dir(), read_only) {
            let gid = u32::try_from(gid)
                .map_err(|_| InputError::Invalid(format!("fsGroup {gid} out of range")))?;
            let root_done = {
                use std::os::unix::fs::MetadataExt;
                meta.gid() == gid
                    && meta.mode() & 0o7777 == group_mode(meta.mode() & 0o7777, true, true)
            };
            // OnRootMismatch: the walk only when the root is not as it would leave it.
            if !(policy.as_deref() == Some("OnRootMismatch") && root_done) {
                own_by_group(&p, gid, true)
                    .map_err(|e| InputError::Invalid(format!("fsGroup on {}: {e}", p.display())))?;
            }
        }
        Ok((p, true))
    }

    async fn projected(
        &self,
        p: &k8s_openapi::api::core::v1::ProjectedVolumeSource,
    ) -> Result<Vec<(String, Vec<u8>, i32)>, InputError> {
        let mode = p.default_mode.unwrap_or(0o644);
        let mut out = vec![];
        for s in p.sources.iter().flatten() {
            if let Some(t) = &s.service_account_token {
                let token = self.token(t.audience.clone(), t.expiration_seconds).await?;
                out.push((t.path.clone(), token.into_bytes(), mode));
            }
            if let Some(c) = &s.config_map {
                if let Some(cm) = self
                    .config_map(&c.name, c.optional.unwrap_or(false))
                    .await?
                {
                    out.extend(key_files(
                        config_map_data(&cm),
                        c.items.as_deref(),
                        mode,
                        &c.name,
                    )?);
                }
            }
            if let Some(c) = &s.secret {
                if let Some(sec) = self.secret(&c.name, c.optional.unwrap_or(false)).await? {
                    out.extend(key_files(
                        secret_data(&sec),
                        c.items.as_deref(),
                        mode,
                        &c.name,
                    )?);
                }
            }
            if let Some(d) = &s.downward_api {
                out.extend(
                    self.downward_files(d.items.as_deref().unwrap_or_default(), mode)
                        .await?,
                );
            }
        }
        Ok(out)
    }

    /// The files of a downwardAPI volume or projected source: each item's field of the pod
    /// or resource of a container it names. An item with neither gives no file, as the
    /// kubelet's.
    async fn downward_files(
        &self,
        items: &[DownwardAPIVolumeFile],
        mode: i32,
    ) -> Result<Vec<(String, Vec<u8>, i32)>, InputError> {
        let alloc = self
            .allocatable(items.iter().any(|i| i.resource_field_ref.is_some()))
            .await;
        let mut out = vec![];
        for item in items {
            let value = if let Some(f) = &item.field_ref {
                self.field(&f.field_path)?
            } else if let Some(r) = &item.resource_field_ref {
                self.resource_field(r, None, &alloc)?
            } else {
                continue;
            };
            out.push((
                item.path.clone(),
                value.into_bytes(),
                item.mode.unwrap_or(mode),
            ));
        }
        Ok(out)
    }

    /// The node's allocatable (see [`crate::node::allocatable`]), the default limits of
    /// the downward API; read off the runtime's threads, and only when `needed`.
    async fn allocatable(&self, needed: bool) -> BTreeMap<String, Quantity> {
        if !needed {
            return BTreeMap::new();
        }
        let dir = self.pod_dir.clone();
        tokio::task::spawn_blocking(move || crate::node::allocatable(&dir))
            .await
            .unwrap_or_default()
    }

    /// A `resourceFieldRef`'s value: of the container it names (the pod's containers,
    /// then its init containers), else of `own`, the container of an env var (a volume's
    /// ref must name one).
    fn resource_field(
        &self,
        r: &ResourceFieldSelector,
        own: Option<&Container>,
        allocatable: &BTreeMap<String, Quantity>,
    ) -> Result<String, InputError> {
        let c = match r.container_name.as_deref().filter(|n| !n.is_empty()) {
            Some(name) => self
                .pod
                .spec
                .iter()
                .flat_map(|s| {
                    s.containers
                        .iter()
                        .chain(s.init_containers.iter().flatten())
                })
                .find(|c| c.name == name)
                .ok_or_else(|| {
                    InputError::Invalid(format!(
                        "resourceFieldRef {:?}: container {name:?} not found",
                        r.resource
                    ))
                })?,
            None => own.ok_or_else(|| {
                InputError::Invalid(format!(
                    "resourceFieldRef {:?}: a volume's must name its containerName",
                    r.resource
                ))
            })?,
        };
        resource_field_value(
            &r.resource,
            c.resources.as_ref(),
            allocatable,
            r.divisor.as_ref(),
        )
    }

    /// A token of the pod's service account bound to the pod (TokenRequest).
    async fn token(
        &self,
        audience: Option<String>,
        expiration: Option<i64>,
    ) -> Result<String, InputError> {
        let sa = spec::spec(self.pod)
            .service_account_name
            .clone()
            .unwrap_or_else(|| "default".into());
        let api: Api<ServiceAccount> =
            Api::namespaced(self.client("a service account token")?.clone(), self.ns());
        let req = TokenRequest {
            spec: TokenRequestSpec {
                audiences: audience.into_iter().collect(),
                expiration_seconds: Some(expiration.unwrap_or(3600)),
                bound_object_ref: Some(BoundObjectReference {
                    api_version: Some("v1".into()),
                    kind: Some("Pod".into()),
                    name: Some(spec::name(self.pod).into()),
                    uid: Some(spec::uid(self.pod).into()),
                }),
            },
            ..Default::default()
        };
        let r: TokenRequest = api
            .create_subresource("token", &sa, &PostParams::default(), &req)
            .await
            .map_err(api_err)?;
        r.status
            .map(|s| s.token)
            .ok_or_else(|| InputError::Api(format!("no token for service account {sa:?}")))
    }

    /// A downward API field of the pod.
    fn field(&self, path: &str) -> Result<String, InputError> {
        let m = &self.pod.metadata;
        let kv = |map: Option<&BTreeMap<String, String>>| {
            map.map(|m| m.iter().map(|(k, v)| format!("{k}={v:?}\n")).collect())
                .unwrap_or_default()
        };
        let status = self.pod.status.clone().unwrap_or_default();
        let spec = spec::spec(self.pod);
        Ok(match path {
            "metadata.name" => spec::name(self.pod).into(),
            "metadata.namespace" => spec::namespace(self.pod).into(),
            "metadata.uid" => spec::uid(self.pod).into(),
            "metadata.labels" => kv(m.labels.as_ref()),
            "metadata.annotations" => kv(m.annotations.as_ref()),
            "spec.nodeName" => spec
                .node_name
                .clone()
                .unwrap_or_else(|| self.node_name.into()),
            "spec.serviceAccountName" => spec.service_account_name.clone().unwrap_or_default(),
            "status.hostIP" => status.host_ip.unwrap_or_else(|| self.node_ip.into()),
            "status.podIP" => status.pod_ip.unwrap_or_default(),
            p => {
                if let Some(k) = p
                    .strip_prefix("metadata.labels['")
                    .and_then(|k| k.strip_suffix("']"))
                {
                    m.labels
                        .as_ref()
                        .and_then(|l| l.get(k))
                        .cloned()
                        .unwrap_or_default()
                } else if let Some(k) = p
                    .strip_prefix("metadata.annotations['")
                    .and_then(|k| k.strip_suffix("']"))
                {
                    m.annotations
                        .as_ref()
                        .and_then(|l| l.get(k))
                        .cloned()
                        .unwrap_or_default()
                } else {
                    return Err(InputError::Invalid(format!(
                        "fieldRef {p:?} is not supported"
                    )));
                }
            }
        })
    }

    /// The container's environment: `envFrom` first, then `env` (later wins), with
    /// `$(VAR)` references expanded as the kubelet expands them.
    pub async fn env(
        &self,
        c: &Container,
        pod_ip: &str,
    ) -> Result<Vec<cri_api::KeyValue>, InputError> {
        // The Services' variables: `$(VAR)` may name them, and a container's own
        // variable of the same name wins.
        let links = spec::spec(self.pod).enable_service_links.unwrap_or(true);
        let services = match self.services {
            Some(s) => s.env(self.ns(), links).await.map_err(InputError::Missing)?,
            None => vec![],
        };
        let alloc = self
            .allocatable(c.env.iter().flatten().any(|e| {
                e.value_from
                    .as_ref()
                    .is_some_and(|s| s.resource_field_ref.is_some())
            }))
            .await;
        let mut vars: Vec<(String, String)> = vec![];
        let set = |k: String, v: String, vars: &mut Vec<(String, String)>| {
            vars.retain(|(n, _)| *n != k);
            vars.push((k, v));
        };
        for from in c.env_from.iter().flatten() {
            let prefix = from.prefix.clone().unwrap_or_default();
            let data = if let Some(r) = &from.config_map_ref {
                self.config_map(&r.name, r.optional.unwrap_or(false))
                    .await?
                    .map(|c| config_map_data(&c))
            } else if let Some(r) = &from.secret_ref {
                self.secret(&r.name, r.optional.unwrap_or(false))
                    .await?
                    .map(|s| secret_data(&s))
            } else {
                None
            };
            for (k, v) in data.unwrap_or_default() {
                set(
                    format!("{prefix}{k}"),
                    String::from_utf8_lossy(&v).into_owned(),
                    &mut vars,
                );
            }
        }
        for EnvVar {
            name,
            value,
            value_from,
        } in c.env.iter().flatten().cloned()
        {
            let v = match value_from {
                None => {
                    let known: Vec<(String, String)> =
                        services.iter().chain(vars.iter()).cloned().collect();
                    expand(&value.unwrap_or_default(), &known)
                }
                Some(src) => match self.env_source(c, &src, pod_ip, &alloc).await? {
                    Some(v) => v,
                    None => continue,
                },
            };
            set(name, v, &mut vars);
        }
        for (k, v) in services {
            if !vars.iter().any(|(n, _)| *n == k) {
                vars.push((k, v));
            }
        }
        Ok(vars
            .into_iter()
            .map(|(key, value)| cri_api::KeyValue { key, value })
            .collect())
    }

    async fn env_source(
        &self,
        c: &Container,
        src: &EnvVarSource,
        pod_ip: &str,
        allocatable: &BTreeMap<String, Quantity>,
    ) -> Result<Option<String>, InputError> {
        if let Some(f) = &src.field_ref {
            if f.field_path == "status.podIP" || f.field_path == "status.podIPs" {
                return Ok(Some(pod_ip.into()));
            }
            return self.field(&f.field_path).map(Some);
        }
        if let Some(r) = &src.config_map_key_ref {
            let optional = r.optional.unwrap_or(false);
            let Some(cm) = self.config_map(&r.name, optional).await? else {
                return Ok(None);
            };
            return match config_map_data(&cm).remove(&r.key) {
                Some(v) => Ok(Some(String::from_utf8_lossy(&v).into_owned())),
                None if optional => Ok(None),
                None => Err(InputError::Missing(format!(
                    "configmap {:?} has no key {:?}",
                    r.name, r.key
                ))),
            };
        }
        if let Some(r) = &src.secret_key_ref {
            let optional = r.optional.unwrap_or(false);
            let Some(s) = self.secret(&r.name, optional).await? else {
                return Ok(None);
            };
            return match secret_data(&s).remove(&r.key) {
                Some(v) => Ok(Some(String::from_utf8_lossy(&v).into_owned())),
                None if optional => Ok(None),
                None => Err(InputError::Missing(format!(
                    "secret {:?} has no key {:?}",
                    r.name, r.key
                ))),
            };
        }
        if let Some(r) = &src.resource_field_ref {
            return self.resource_field(r, Some(c), allocatable).map(Some);
        }
        Ok(None)
    }

    /// Registry credentials from the pod's imagePullSecrets, for `image`'s registry.
    pub async fn pull_auth(&self, image: &str) -> Result<Option<cri_api::AuthConfig>, InputError> {
        let registry = registry_of(image);
        for r in spec::spec(self.pod).image_pull_secrets.iter().flatten() {
            let Some(sec) = self.secret(&r.name, true).await? else {
                continue;
            };
            let data = secret_data(&sec);
            let json = data
                .get(".dockerconfigjson")
                .or_else(|| data.get(".dockercfg"))
                .cloned()
                .unwrap_or_default();
            if let Some(a) = auth_for(&json, &registry) {
                return Ok(Some(a));
            }
        }
        Ok(None)
    }
}

/// A container's resource as the downward API gives it (a `resourceFieldRef`'s value),
/// by the kubelet's rules (`ExtractContainerResourceValue` after
/// `MergeContainerResourceLimits`):
/// - `resource` is `limits.` or `requests.` and then `cpu`, `memory`,
///   `ephemeral-storage` or `hugepages-<size>`;
/// - a cpu, memory or ephemeral-storage limit that is absent or zero is the node's
///   `allocatable` one (hugepages are never overcommitted, so they have none); any other
///   amount absent is 0;
/// - the amount is divided by `divisor` (absent or zero: `1`) and rounded up, cpu in
///   millicores on both sides (so `1m` gives millicores), the rest in whole units.
pub fn resource_field_value(
    resource: &str,
    resources: Option<&ResourceRequirements>,
    allocatable: &BTreeMap<String, Quantity>,
    divisor: Option<&Quantity>,
) -> Result<String, InputError> {
    let unsupported = || {
        InputError::Invalid(format!(
            "resourceFieldRef: unsupported container resource {resource:?}"
        ))
    };
    let (list, name, limit) = match resource.split_once('.') {
        Some(("limits", n)) => (resources.and_then(|r| r.limits.as_ref()), n, true),
        Some(("requests", n)) => (resources.and_then(|r| r.requests.as_ref()), n, false),
        _ => return Err(unsupported()),
    };
    let defaulted = matches!(name, "cpu" | "memory" | "ephemeral-storage");
    if !defaulted && !name.starts_with("hugepages-") {
        return Err(unsupported());
    }
    let units = |q: &Quantity| {
        if name == "cpu" {
            crate::quantity::milli(q)
        } else {
            crate::quantity::value(q)
        }
        .map_err(|e| InputError::Invalid(format!("resourceFieldRef {resource:?}: {e}")))
    };
    // Both round a fraction up, so only a zero amount reads as 0.
    let mut amount = list.and_then(|l| l.get(name)).map(units).transpose()?;
    if limit && defaulted && amount.unwrap_or(0) == 0 {
        if let Some(a) = allocatable.get(name) {
            amount = Some(units(a)?);
        }
    }
    let divisor = match divisor.map(units).transpose()? {
        None | Some(0) if name == "cpu" => 1000,
        None | Some(0) => 1,
        Some(d) if d > 0 => d,
        Some(_) => {
            return Err(InputError::Invalid(format!(
                "resourceFieldRef {resource:?}: the divisor must be positive"
            )))
        }
    };
    Ok(ceil_div(amount.unwrap_or(0), divisor).to_string())
}

/// `a / b` rounded up, for `b > 0`.
fn ceil_div(a: i64, b: i64) -> i64 {
    a / b + i64::from(a % b > 0)
}

fn config_map_data(cm: &ConfigMap) -> BTreeMap<String, Vec<u8>> {
    let mut out: BTreeMap<String, Vec<u8>> = cm
        .data
        .clone()
        .unwrap_or_default()
        .into_iter()
        .map(|(k, v)| (k, v.into_bytes()))
        .collect();
    out.extend(
        cm.binary_data
            .clone()
            .unwrap_or_default()
            .into_iter()
            .map(|(k, v)| (k, v.0)),
    );
    out
}

fn secret_data(s: &Secret) -> BTreeMap<String, Vec<u8>> {
    let mut out: BTreeMap<String, Vec<u8>> = s
        .data
        .clone()
        .unwrap_or_default()
        .into_iter()
        .map(|(k, v)| (k, v.0))
        .collect();
    out.extend(
        s.string_data
            .clone()
            .unwrap_or_default()
            .into_iter()
            .map(|(k, v)| (k, v.into_bytes())),
    );
    out
}

/// The files of a configMap or secret: every key, or the listed items at their paths.
fn key_files(
    mut data: BTreeMap<String, Vec<u8>>,
    items: Option<&[KeyToPath]>,
    mode: i32,
    source: &str,
) -> Result<Vec<(String, Vec<u8>, i32)>, InputError> {
    match items {
        None => Ok(data.into_iter().map(|(k, v)| (k, v, mode)).collect()),
        Some(items) => items
            .iter()
            .map(|i| match data.remove(&i.key) {
                Some(v) => Ok((i.path.clone(), v, i.mode.unwrap_or(mode))),
                None => Err(InputError::Missing(format!(
                    "{source:?} has no key {:?}",
                    i.key
                ))),
            })
            .collect(),
    }
}

/// `$(NAME)` becomes the value of an earlier variable; `$$(NAME)` stays `$(NAME)`;
/// an unknown name is left as written.
pub fn expand(s: &str, vars: &[(String, String)]) -> String {
    let mut out = String::new();
    let mut rest = s;
    while let Some(i) = rest.find('$') {
        out.push_str(&rest[..i]);
        let after = &rest[i + 1..];
        if let Some(a) = after.strip_prefix('$') {
            out.push('$');
            rest = a;
        } else if let Some(body) = after.strip_prefix('(') {
            match body.find(')') {
                Some(end) => {
                    let name = &body[..end];
                    match vars.iter().rev().find(|(n, _)| n == name) {
                        Some((_, v)) => out.push_str(v),
                        None => {
                            out.push_str("$(");
                            out.push_str(name);
                            out.push(')');
                        }
                    }
                    rest = &body[end + 1..];
                }
                None => {
                    out.push_str(&rest[i..]);
                    rest = "";
                }
            }
        } else {
            out.push('$');
            rest = after;
        }
    }
    out.push_str(rest);
    out
}

/// Writes `files` (relative path, content, mode) under `dir` atomically, as described
/// at the top of this module; with the pod's `fs_group`, the volume's files and
/// folders are given to that group first (see [`own_by_group`]).
pub fn write_atomically(
    dir: &Path,
    files: &[(String, Vec<u8>, i32)],
    fs_group: Option<i64>,
) -> std::io::Result<()> {
    for (p, _, _) in files {
        if p.is_empty()
            || p.starts_with('/')
            || p.split('/').any(|c| c == ".." || c.starts_with(".."))
        {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                format!("file path {p:?} must be relative and stay inside the volume"),
            ));
        }
    }
    std::fs::create_dir_all(dir)?;
    // As the kubelet's atomic writer: what is there already is not written again. A
    // restarted crustlet, which has no memory of what it wrote, then leaves a running
    // container's volume as it was (same `..data`, same generation), as the kubelet does.
    if holds_exactly(dir, files) {
        if let Some(gid) = fs_group.and_then(|g| u32::try_from(g).ok()) {
            own_by_group(dir, gid, false)?;
        }
        return Ok(());
    }
    let stamp = format!(
        "..{}",
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default()
            .as_nanos()
    );
    let new = dir.join(&stamp);
    std::fs::create_dir(&new)?;
    for (p, content, mode) in files {
        let f = new.join(p);
        if let Some(parent) = f.parent() {
            std::fs::create_dir_all(parent)?;
        }
        std::fs::write(&f, content)?;
        std::fs::set_permissions(&f, std::fs::Permissions::from_mode(*mode as u32 & 0o7777))?;
    }
    // Before the switch, as the kubelet's atomic writer runs its `setPerms`, so the
    // container never sees the new files with the wrong owner.
    if let Some(gid) = fs_group.and_then(|g| u32::try_from(g).ok()) {
        own_by_group(dir, gid, false)?;
    }
    let tmp = dir.join("..data_tmp");
    let _ = std::fs::remove_file(&tmp);
    std::os::unix::fs::symlink(&stamp, &tmp)?;
    let old = std::fs::read_link(dir.join("..data")).ok();
    std::fs::rename(&tmp, dir.join("..data"))?;
    let tops: std::collections::BTreeSet<&str> = files
        .iter()
        .map(|(p, _, _)| p.split('/').next().unwrap_or(p))
        .collect();
    for top in &tops {
        let link = dir.join(top);
        if std::fs::symlink_metadata(&link).is_err() {
            std::os::unix::fs::symlink(Path::new("..data").join(top), &link)?;
        }
    }
    // Links of names no longer there, and the previous contents.
    for e in std::fs::read_dir(dir)?.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        if !name.starts_with("..") && !tops.contains(name.as_str()) {
            let _ = std::fs::remove_file(e.path());
        }
    }
    if let Some(old) = old.filter(|o| o != Path::new(&stamp)) {
        let _ = std::fs::remove_dir_all(dir.join(old));
    }
    Ok(())
}

/// Whether `dir`'s current contents (through `..data`) are exactly `files`: the same
/// paths, bytes and permission bits, nothing more, and each top-level link in place.
fn holds_exactly(dir: &Path, files: &[(String, Vec<u8>, i32)]) -> bool {
    let Ok(target) = std::fs::read_link(dir.join("..data")) else {
        return false;
    };
    let data = dir.join(target);
    let mut found = 0usize;
    let mut stack = vec![data.clone()];
    while let Some(d) = stack.pop() {
        let Ok(rd) = std::fs::read_dir(&d) else {
            return false;
        };
        for e in rd.flatten() {
            match e.file_type() {
                Ok(t) if t.is_dir() => stack.push(e.path()),
                Ok(t) if t.is_file() => found += 1,
                _ => return false,
            }
        }
    }
    if found != files.len() {
        return false;
    }
    files.iter().all(|(p, content, mode)| {
        let f = data.join(p);
        let top = dir.join(p.split('/').next().unwrap_or(p));
        std::fs::symlink_metadata(&top).is_ok_and(|m| m.file_type().is_symlink())
            && std::fs::metadata(&f)
                .is_ok_and(|m| m.permissions().mode() & 0o7777 == *mode as u32 & 0o7777)
            && std::fs::read(&f).is_ok_and(|c| c == *content)
    })
}

/// The mode the kubelet's `SetVolumeOwnership` gives a file or folder of a volume with
/// an fsGroup: readable by the group, writable too in a `writable` volume (configMap,
/// secret, downwardAPI and projected volumes are read-only), folders also searchable
/// and setgid.
fn group_mode(mode: u32, dir: bool, writable: bool) -> u32 {
    let rw = if writable { 0o660 } else { 0o440 };
    if dir {
        mode | rw | 0o110 | 0o2000
    } else {
        mode | rw
    }
}

/// Gives `path` and everything under it the group `gid` with [`group_mode`], as the
/// kubelet walks a volume; a symlink's own group only (its mode means nothing). As
/// with the kubelet, a file it cannot change is logged, not an error.
fn own_by_group(path: &Path, gid: u32, writable: bool) -> std::io::Result<()> {
    let meta = std::fs::symlink_metadata(path)?;
    if let Err(e) = std::os::unix::fs::lchown(path, None, Some(gid)) {
        tracing::warn!(path = %path.display(), "fsGroup {gid}: {e}");
    }
    if meta.file_type().is_symlink() {
        return Ok(());
    }
    let mode = group_mode(meta.permissions().mode() & 0o7777, meta.is_dir(), writable);
    if let Err(e) = std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)) {
        tracing::warn!(path = %path.display(), "fsGroup {gid}: {e}");
    }
    if meta.is_dir() {
        for e in std::fs::read_dir(path)? {
            own_by_group(&e?.path(), gid, writable)?;
        }
    }
    Ok(())
}

/// A hostPath volume's path, made or checked as its `type` says (the kubelet's checks).
fn host_path(h: &k8s_openapi::api::core::v1::HostPathVolumeSource) -> Result<PathBuf, InputError> {
    let p = PathBuf::from(&h.path);
    let io = |e: std::io::Error| InputError::Invalid(format!("{}: {e}", p.display()));
    let refused = |what: &str| {
        Err(InputError::Invalid(format!(
            "hostPath {}: {what}",
            p.display()
        )))
    };
    match h.type_.as_deref().unwrap_or("") {
        "DirectoryOrCreate" => std::fs::create_dir_all(&p).map_err(io)?,
        "FileOrCreate" if !p.exists() => std::fs::write(&p, b"").map_err(io)?,
        "Directory" if !p.is_dir() => return refused("not a directory"),
        "File" if !p.is_file() => return refused("not a file"),
        "Socket" | "CharDevice" | "BlockDevice" if !p.exists() => return refused("does not exist"),
        _ => {}
    }
    Ok(p)
}

/// The registry host of an image reference, as Docker names it.
pub fn registry_of(image: &str) -> String {
    match image.split_once('/') {
        Some((first, _)) if first.contains(['.', ':']) || first == "localhost" => first.to_string(),
        _ => "docker.io".to_string(),
    }
}

/// Credentials for `registry` in a docker config (`{"auths": {...}}` or the old flat
/// `.dockercfg` form).
fn auth_for(json: &[u8], registry: &str) -> Option<cri_api::AuthConfig> {
    let v: serde_json::Value = serde_json::from_slice(json).ok()?;
    let auths = v.get("auths").unwrap_or(&v).as_object()?;
    let strip = |s: &str| {
        s.trim_start_matches("https://")
            .trim_start_matches("http://")
            .split('/')
            .next()
            .unwrap_or("")
            .to_string()
    };
    let want = if registry == "docker.io" {
        "index.docker.io".to_string()
    } else {
        registry.to_string()
    };
    let (_, e) = auths
        .iter()
        .find(|(k, _)| strip(k) == registry || strip(k) == want)?;
    let s = |k: &str| e.get(k).and_then(|x| x.as_str()).unwrap_or("").to_string();
    let (mut username, mut password) = (s("username"), s("password"));
    if username.is_empty() {
        let decoded = base64::engine::general_purpose::STANDARD
            .decode(s("auth"))
            .ok()?;
        let text = String::from_utf8(decoded).ok()?;
        let (u, p) = text.split_once(':')?;
        (username, password) = (u.to_string(), p.to_string());
    }
    Some(cri_api::AuthConfig {
        username,
        password,
        server_address: registry.to_string(),
        ..Default::default()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn list(pairs: &[(&str, &str)]) -> Option<BTreeMap<String, Quantity>> {
        Some(
            pairs
                .iter()
                .map(|(k, v)| (k.to_string(), Quantity(v.to_string())))
                .collect(),
        )
    }

    #[test]
    fn resource_field_values_as_the_kubelets() {
        let set = ResourceRequirements {
            limits: list(&[
                ("cpu", "1250m"),
                ("memory", "64Mi"),
                ("ephemeral-storage", "1Gi"),
                ("hugepages-2Mi", "4Mi"),
            ]),
            requests: list(&[
                ("cpu", "250m"),
                ("memory", "32Mi"),
                ("ephemeral-storage", "500M"),
                ("hugepages-2Mi", "4Mi"),
            ]),
            ..Default::default()
        };
        let zero = ResourceRequirements {
            limits: list(&[("cpu", "0"), ("memory", "0")]),
            ..Default::default()
        };
        let alloc = list(&[
            ("cpu", "4"),
            ("memory", "8141344Ki"),
            ("ephemeral-storage", "90Gi"),
            ("hugepages-2Mi", "1Gi"),
        ])
        .unwrap();
        // (resource, the container's resources, divisor, value)
        let table: &[(&str, Option<&ResourceRequirements>, Option<&str>, &str)] = &[
            // cpu: whole cores rounded up, or millicores.
            ("limits.cpu", Some(&set), None, "2"),
            ("limits.cpu", Some(&set), Some("1"), "2"),
            ("limits.cpu", Some(&set), Some("1m"), "1250"),
            ("limits.cpu", Some(&set), Some("0"), "2"),
            ("requests.cpu", Some(&set), None, "1"),
            ("requests.cpu", Some(&set), Some("1m"), "250"),
            // memory: bytes, or units of a binary or decimal divisor, rounded up.
            ("limits.memory", Some(&set), None, "67108864"),
            ("limits.memory", Some(&set), Some("1"), "67108864"),
            ("limits.memory", Some(&set), Some("1m"), "67108864"),
            ("limits.memory", Some(&set), Some("1Ki"), "65536"),
            ("limits.memory", Some(&set), Some("1Mi"), "64"),
            ("limits.memory", Some(&set), Some("1Gi"), "1"),
            ("limits.memory", Some(&set), Some("1k"), "67109"),
            ("limits.memory", Some(&set), Some("1M"), "68"),
            ("limits.memory", Some(&set), Some("1G"), "1"),
            ("requests.memory", Some(&set), Some("1Mi"), "32"),
            // ephemeral-storage and hugepages alike.
            ("limits.ephemeral-storage", Some(&set), None, "1073741824"),
            ("limits.ephemeral-storage", Some(&set), Some("1Gi"), "1"),
            ("requests.ephemeral-storage", Some(&set), Some("1M"), "500"),
            ("requests.ephemeral-storage", Some(&set), Some("1Mi"), "477"),
            ("limits.hugepages-2Mi", Some(&set), Some("1Mi"), "4"),
            ("requests.hugepages-2Mi", Some(&set), None, "4194304"),
            // No limit, or a zero one: the node's allocatable; hugepages have no default.
            ("limits.cpu", None, None, "4"),
            ("limits.cpu", None, Some("1m"), "4000"),
            ("limits.cpu", Some(&zero), Some("1m"), "4000"),
            ("limits.memory", None, None, "8336736256"),
            ("limits.memory", Some(&zero), Some("1Mi"), "7951"),
            ("limits.ephemeral-storage", None, Some("1Gi"), "90"),
            ("limits.hugepages-2Mi", None, None, "0"),
            // No request: 0.
            ("requests.cpu", None, None, "0"),
            ("requests.memory", Some(&zero), None, "0"),
            ("requests.ephemeral-storage", None, None, "0"),
        ];
        for (resource, res, divisor, want) in table {
            let divisor = divisor.map(|d| Quantity(d.to_string()));
            let got = resource_field_value(resource, *res, &alloc, divisor.as_ref());
            assert_eq!(
                got.as_deref().ok(),
                Some(*want),
                "{resource} divisor {divisor:?}: {got:?}"
            );
        }
        // A node that could not read its memory gives no default.
        assert_eq!(
            resource_field_value("limits.memory", None, &BTreeMap::new(), None).unwrap(),
            "0"
        );
        let bad = ResourceRequirements {
            limits: list(&[("cpu", "12xyz")]),
            ..Default::default()
        };
        for (resource, res, divisor) in [
            ("limits.nvidia.com/gpu", None, None),
            ("limits.pods", None, None),
            ("spec.cpu", None, None),
            ("cpu", None, None),
            ("limits.cpu", Some(&bad), None),
            ("limits.cpu", None, Some("-1")),
            ("limits.memory", None, Some("1x")),
        ] {
            let divisor = divisor.map(|d| Quantity(d.to_string()));
            assert!(
                resource_field_value(resource, res, &alloc, divisor.as_ref()).is_err(),
                "{resource} {divisor:?}"
            );
        }
    }

    fn pod_of(spec: serde_json::Value) -> Pod {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": "p", "namespace": "ns", "uid": "u"},
            "spec": spec,
        }))
        .unwrap()
    }

    fn inputs(pod: &Pod) -> Inputs<'_> {
        Inputs {
            client: None,
            services: None,
            pod,
            pod_dir: std::env::temp_dir(),
            node_name: "n",
            node_ip: "192.0.2.1",
        }
    }

    #[test]
    fn a_resource_field_of_the_container_named_else_its_own() {
        let pod = pod_of(serde_json::json!({
            "containers": [{"name": "a", "resources": {"limits": {"cpu": "500m"}}}],
            "initContainers": [{"name": "i", "resources": {"requests": {"memory": "1Mi"}}}],
        }));
        let inp = inputs(&pod);
        let alloc = list(&[("cpu", "2")]).unwrap();
        let spec = pod.spec.as_ref().unwrap();
        let r = |resource: &str, container: Option<&str>| ResourceFieldSelector {
            resource: resource.into(),
            container_name: container.map(Into::into),
            divisor: Some(Quantity("1m".into())),
        };
        let own = Some(&spec.init_containers.as_ref().unwrap()[0]);
        let get = |sel: ResourceFieldSelector, own| inp.resource_field(&sel, own, &alloc);
        assert_eq!(get(r("limits.cpu", Some("a")), own).unwrap(), "500");
        assert_eq!(get(r("limits.cpu", Some("i")), None).unwrap(), "2000");
        assert_eq!(get(r("requests.memory", None), own).unwrap(), "1048576");
        assert_eq!(get(r("requests.memory", Some("")), own).unwrap(), "1048576");
        assert!(get(r("limits.cpu", Some("nope")), own).is_err());
        assert!(
            get(r("limits.cpu", None), None).is_err(),
            "a volume names it"
        );
    }

    #[tokio::test]
    async fn downward_files_of_fields_and_resources_with_the_nodes_defaults() {
        let pod = pod_of(serde_json::json!({
            "containers": [{"name": "a", "resources": {"limits": {"memory": "64Mi"}}}],
        }));
        let item = |path: &str, v: serde_json::Value| -> DownwardAPIVolumeFile {
            let mut v = v;
            v["path"] = path.into();
            serde_json::from_value(v).unwrap()
        };
        let items = [
            item(
                "name",
                serde_json::json!({"fieldRef": {"fieldPath": "metadata.name"}}),
            ),
            item(
                "mem",
                serde_json::json!({"resourceFieldRef":
                    {"containerName": "a", "resource": "limits.memory", "divisor": "1Mi"}}),
            ),
            item(
                "cpu",
                serde_json::json!({"mode": 0o400, "resourceFieldRef":
                    {"containerName": "a", "resource": "limits.cpu", "divisor": "1m"}}),
            ),
            item("neither", serde_json::json!({})),
        ];
        let files = inputs(&pod).downward_files(&items, 0o644).await.unwrap();
        let cpu = crate::node::cpu_capacity_milli().to_string().into_bytes();
        assert_eq!(
            files,
            vec![
                ("name".to_string(), b"p".to_vec(), 0o644),
                ("mem".to_string(), b"64".to_vec(), 0o644),
                ("cpu".to_string(), cpu, 0o400),
            ]
        );
    }

    #[test]
    fn variable_references_expand_as_the_kubelet_does() {
        let vars = vec![
            ("A".to_string(), "1".to_string()),
            ("B".to_string(), "x$(A)".to_string()),
        ];
        assert_eq!(expand("$(A)-$(B)", &vars), "1-x$(A)");
        assert_eq!(expand("$$(A) $(NOPE) $x $(", &vars), "$(A) $(NOPE) $x $(");
    }

    #[test]
    fn files_switch_atomically_and_old_names_go() {
        let d = std::env::temp_dir().join(format!("crustlet-atomic-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        write_atomically(
            &d,
            &[
                ("a".into(), b"1".to_vec(), 0o644),
                ("sub/b".into(), b"2".to_vec(), 0o600),
            ],
            None,
        )
        .unwrap();
        assert_eq!(std::fs::read(d.join("a")).unwrap(), b"1");
        assert_eq!(std::fs::read(d.join("sub/b")).unwrap(), b"2");
        let mode = std::fs::metadata(d.join("sub/b"))
            .unwrap()
            .permissions()
            .mode()
            & 0o777;
        assert_eq!(mode, 0o600);
        write_atomically(&d, &[("a".into(), b"new".to_vec(), 0o644)], None).unwrap();
        assert_eq!(std::fs::read(d.join("a")).unwrap(), b"new");
        assert!(!d.join("sub").exists());
        let stamps = std::fs::read_dir(&d)
            .unwrap()
            .flatten()
            .filter(|e| e.file_name().to_string_lossy().starts_with("..1"))
            .count();
        assert_eq!(stamps, 1, "the previous contents are removed");
        assert!(write_atomically(&d, &[("../x".into(), vec![], 0o644)], None).is_err());
        std::fs::remove_dir_all(&d).ok();
    }

    #[test]
    fn the_same_contents_are_not_written_again() {
        let d = std::env::temp_dir().join(format!("crustlet-same-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        let files = vec![
            ("a".to_string(), b"1".to_vec(), 0o644),
            ("sub/b".to_string(), b"2".to_vec(), 0o600),
        ];
        let data = || std::fs::read_link(d.join("..data")).unwrap();
        write_atomically(&d, &files, None).unwrap();
        let first = data();
        // What a restarted crustlet does: the same payload again keeps the generation.
        write_atomically(&d, &files, None).unwrap();
        assert_eq!(data(), first);
        // Any difference is a new generation: a byte, a mode, a file more or less.
        let mut changed = files.clone();
        changed[1].2 = 0o644;
        write_atomically(&d, &changed, None).unwrap();
        let second = data();
        assert_ne!(second, first);
        write_atomically(&d, &changed[..1], None).unwrap();
        assert_ne!(data(), second);
        let third = data();
        let mut more = changed.clone();
        more[0].1 = b"x".to_vec();
        write_atomically(&d, &more, None).unwrap();
        assert_ne!(data(), third);
        // A top-level link removed from under the volume is put back.
        let fourth = data();
        std::fs::remove_file(d.join("a")).unwrap();
        write_atomically(&d, &more, None).unwrap();
        assert_ne!(data(), fourth);
        assert_eq!(std::fs::read(d.join("a")).unwrap(), b"x");
        std::fs::remove_dir_all(&d).ok();
    }

    #[test]
    fn an_fs_group_gets_the_files_as_the_kubelet_gives_them() {
        // The e2e's defaultMode 0440 stays -r--r-----; the group may always read.
        assert_eq!(group_mode(0o440, false, false), 0o440);
        assert_eq!(group_mode(0o400, false, false), 0o440);
        assert_eq!(group_mode(0o644, false, false), 0o644);
        assert_eq!(group_mode(0o755, true, false), 0o2755);
        assert_eq!(group_mode(0o700, true, false), 0o2750);
        // A writable volume's (a local PersistentVolume's): the group may write.
        assert_eq!(group_mode(0o644, false, true), 0o664);
        assert_eq!(group_mode(0o755, true, true), 0o2775);
        assert_eq!(group_mode(0o700, true, true), 0o2770);

        // The group a folder we make gets (ours), which a test without root may give.
        use std::os::unix::fs::MetadataExt;
        let d = std::env::temp_dir().join(format!("crustlet-fsgroup-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        let gid = std::fs::metadata(&d).unwrap().gid();
        let files = [
            ("data-1".to_string(), b"value-1".to_vec(), 0o440),
            ("sub/b".into(), b"2".to_vec(), 0o400),
        ];
        write_atomically(&d, &files, Some(gid.into())).unwrap();
        for (path, mode) in [("data-1", 0o440), ("sub/b", 0o440)] {
            let m = std::fs::metadata(d.join(path)).unwrap();
            assert_eq!((m.mode() & 0o7777, m.gid()), (mode, gid), "{path}");
        }
        let sub = std::fs::metadata(d.join("sub")).unwrap();
        assert_eq!(sub.mode() & 0o2550, 0o2550, "{:o}", sub.mode());
        std::fs::remove_dir_all(&d).ok();
    }

    #[test]
    fn pull_credentials_from_docker_configs() {
        let cfg = br#"{"auths":{"https://reg.example:5000/v1/":{"auth":"dTpw"},"other":{"username":"a","password":"b"}}}"#;
        let a = auth_for(cfg, "reg.example:5000").unwrap();
        assert_eq!((a.username.as_str(), a.password.as_str()), ("u", "p"));
        assert!(auth_for(cfg, "docker.io").is_none());
        assert_eq!(registry_of("reg.example:5000/x/y:1"), "reg.example:5000");
        assert_eq!(registry_of("busybox"), "docker.io");
        assert_eq!(registry_of("library/busybox"), "docker.io");
        assert_eq!(registry_of("localhost/x"), "localhost");
    }
}
