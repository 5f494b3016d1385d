//! The runtime side: load network configuration lists from a folder and run their
//! plugin chain for ADD, CHECK, DEL, STATUS and GC, as libcni does for containerd.
//!
//! Results of ADD are cached on disk (one file per network, container and interface)
//! because DEL and CHECK must hand plugins the `prevResult` of the ADD they undo or
//! verify, possibly after the runtime restarted.

use crate::error::{code, CniError, CniResult};
use crate::invoke::{self, InvokeEnv};
use crate::result::AddResult;
use crate::types::{decode, Attachment, NetConfList, VALID_ATTACHMENTS};
use crate::version::{self, Version};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use std::path::{Path, PathBuf};

/// A loaded configuration list, with the version it will run at.
#[derive(Debug, Clone)]
pub struct NetworkList {
    pub name: String,
    pub cni_version: String,
    pub disable_check: bool,
    pub disable_gc: bool,
    pub plugins: Vec<Map<String, Value>>,
    pub source: PathBuf,
}

impl NetworkList {
    /// Parses `.conflist` bytes, or a single-plugin `.conf`/`.json` wrapped as a list.
    pub fn parse(bytes: &[u8], source: &Path) -> CniResult<NetworkList> {
        let v: Value = decode(
            bytes,
            &format!("network configuration {}", source.display()),
        )?;
        let is_list = v.get("plugins").is_some();
        let list: NetConfList = if is_list {
            serde_json::from_value(v).map_err(|e| {
                CniError::decode(format!("failed to decode {}: {e}", source.display()))
            })?
        } else {
            let obj = v
                .as_object()
                .ok_or_else(|| {
                    CniError::decode(format!("{}: expected a JSON object", source.display()))
                })?
                .clone();
            NetConfList {
                cni_version: obj
                    .get("cniVersion")
                    .and_then(Value::as_str)
                    .unwrap_or("")
                    .to_string(),
                cni_versions: vec![],
                name: obj
                    .get("name")
                    .and_then(Value::as_str)
                    .unwrap_or("")
                    .to_string(),
                disable_check: false,
                disable_gc: false,
                plugins: vec![obj],
            }
        };
        let cni_version = pick_version(&list)
            .map_err(|e| e.context(format!("network configuration {}", source.display())))?;
        if list.name.is_empty() {
            return Err(CniError::config(format!(
                "{}: network has no name",
                source.display()
            )));
        }
        if list.plugins.is_empty() {
            return Err(CniError::config(format!(
                "{}: network {:?} has no plugins",
                source.display(),
                list.name
            )));
        }
        for (i, p) in list.plugins.iter().enumerate() {
            if p.get("type")
                .and_then(Value::as_str)
                .unwrap_or("")
                .is_empty()
            {
                return Err(CniError::config(format!(
                    "{}: plugin {i} of network {:?} has no type",
                    source.display(),
                    list.name
                )));
            }
        }
        Ok(NetworkList {
            name: list.name,
            cni_version,
            disable_check: list.disable_check,
            disable_gc: list.disable_gc,
            plugins: list.plugins,
            source: source.to_path_buf(),
        })
    }

    pub fn load(path: &Path) -> CniResult<NetworkList> {
        let bytes = std::fs::read(path)
            .map_err(|e| CniError::io(format!("reading {}: {e}", path.display())))?;
        Self::parse(&bytes, path)
    }

    fn version(&self) -> Version {
        Version::parse(&self.cni_version).unwrap_or(Version(0, 0, 0))
    }
}

/// `cniVersions` (1.1.0) lists choices: the highest crust supports wins; else `cniVersion`.
fn pick_version(list: &NetConfList) -> CniResult<String> {
    if !list.cni_versions.is_empty() {
        let mut ok: Vec<&String> = list
            .cni_versions
            .iter()
            .filter(|v| version::SUPPORTED.contains(&v.as_str()))
            .collect();
        ok.sort_by(|a, b| version::compare(a, b));
        return ok.last().map(|v| v.to_string()).ok_or_else(|| {
            CniError::new(
                code::INCOMPATIBLE_VERSION,
                format!("none of cniVersions {:?} is supported", list.cni_versions),
            )
        });
    }
    if list.cni_version.is_empty() {
        return Err(CniError::config("no cniVersion"));
    }
    version::check_supported(&list.cni_version)?;
    Ok(list.cni_version.clone())
}

/// Config files in `dir` in the order the kubelet and containerd consider them.
pub fn conf_files(dir: &Path) -> CniResult<Vec<PathBuf>> {
    let rd = std::fs::read_dir(dir)
        .map_err(|e| CniError::io(format!("reading CNI config dir {}: {e}", dir.display())))?;
    let mut files: Vec<PathBuf> = rd
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            p.is_file()
                && matches!(
                    p.extension().and_then(|e| e.to_str()),
                    Some("conf") | Some("conflist") | Some("json")
                )
        })
        .collect();
    files.sort();
    Ok(files)
}

/// The first valid configuration in lexical order, or `None` if the folder holds none.
/// Invalid files are skipped, as containerd does, so one bad file cannot take the node down.
/// A file that cannot be read now (EMFILE at the fd limit, EIO) is an error, not an
/// invalid file: skipping it reported "no network config" on a node at its limits.
pub fn load_first(dir: &Path) -> CniResult<Option<NetworkList>> {
    for f in conf_files(dir)? {
        let bytes = match std::fs::read(&f) {
            Ok(b) => b,
            // Removed since it was listed.
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(e) => return Err(CniError::io(format!("reading {}: {e}", f.display()))),
        };
        if let Ok(l) = NetworkList::parse(&bytes, &f) {
            return Ok(Some(l));
        }
    }
    Ok(None)
}

/// Per-attachment input from the runtime.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct RuntimeConf {
    #[serde(rename = "containerId")]
    pub container_id: String,
    pub netns: String,
    #[serde(rename = "ifName")]
    pub ifname: String,
    /// Go into `CNI_ARGS` (e.g. `K8S_POD_NAME`).
    #[serde(rename = "cniArgs", default)]
    pub args: Vec<(String, String)>,
    /// Capability arguments (`portMappings`, `bandwidth`, `ips`, `mac`, ...), handed to
    /// each plugin that declares the capability, under `runtimeConfig`.
    #[serde(rename = "capabilityArgs", default)]
    pub capability_args: Map<String, Value>,
}

#[derive(Debug, Serialize, Deserialize)]
struct CacheEntry {
    kind: String,
    #[serde(rename = "networkName")]
    network_name: String,
    #[serde(flatten)]
    rt: RuntimeConf,
    result: Value,
}

const CACHE_KIND: &str = "crustCniCacheV1";

/// Runs plugin chains. `plugin_dirs` is `CNI_PATH`; `cache_dir` keeps ADD results.
#[derive(Debug, Clone)]
pub struct CniRuntime {
    pub plugin_dirs: Vec<PathBuf>,
    pub cache_dir: PathBuf,
}

impl CniRuntime {
    pub fn new(plugin_dirs: Vec<PathBuf>, cache_dir: PathBuf) -> Self {
        CniRuntime {
            plugin_dirs,
            cache_dir,
        }
    }

    fn env(&self, rt: &RuntimeConf) -> InvokeEnv {
        InvokeEnv {
            container_id: rt.container_id.clone(),
            netns: rt.netns.clone(),
            ifname: rt.ifname.clone(),
            args: crate::skeleton::format_cni_args(&rt.args),
            path: self.plugin_dirs.clone(),
        }
    }

    /// One plugin's stdin: its own keys plus the list's name and version, the previous
    /// result, and the capability arguments it asked for.
    fn plugin_conf(
        &self,
        net: &NetworkList,
        plugin: &Map<String, Value>,
        rt: Option<&RuntimeConf>,
        prev: Option<&Value>,
    ) -> Map<String, Value> {
        let mut conf = plugin.clone();
        conf.insert("name".into(), Value::String(net.name.clone()));
        conf.insert("cniVersion".into(), Value::String(net.cni_version.clone()));
        if let Some(p) = prev {
            conf.insert("prevResult".into(), p.clone());
        }
        if let Some(rt) = rt {
            let mut rc = Map::new();
            if let Some(Value::Object(caps)) = plugin.get("capabilities") {
                for (cap, on) in caps {
                    if on.as_bool() == Some(true) {
                        if let Some(v) = rt.capability_args.get(cap) {
                            rc.insert(cap.clone(), v.clone());
                        }
                    }
                }
            }
            if !rc.is_empty() {
                conf.insert("runtimeConfig".into(), Value::Object(rc));
            } else {
                conf.remove("runtimeConfig");
            }
        }
        conf
    }

    fn plugin_type(plugin: &Map<String, Value>) -> &str {
        plugin.get("type").and_then(Value::as_str).unwrap_or("")
    }

    /// ADD through the chain; the last plugin's result is cached and returned. On
    /// failure nothing is undone here: the caller runs DEL, which every plugin must
    /// tolerate for half-made attachments.
    pub fn add(&self, net: &NetworkList, rt: &RuntimeConf) -> CniResult<AddResult> {
        let env = self.env(rt);
        let mut prev: Option<Value> = None;
        for plugin in &net.plugins {
            let conf = self.plugin_conf(net, plugin, Some(rt), prev.as_ref());
            let bytes = serde_json::to_vec(&conf).map_err(|e| CniError::internal(e.to_string()))?;
            let path = invoke::find_plugin(Self::plugin_type(plugin), &self.plugin_dirs)?;
            let out = invoke::exec(&path, "ADD", &env, &bytes)?;
            let v: Value = decode(
                &out,
                &format!("result of plugin {}", Self::plugin_type(plugin)),
            )?;
            prev = Some(v);
        }
        let v = prev.unwrap_or(Value::Null);
        let result = AddResult::from_value(v.clone())?;
        self.write_cache(net, rt, &v)?;
        Ok(result)
    }

    /// DEL through the chain in reverse with the cached result; the cache entry goes
    /// when every plugin succeeded. Repeating it is harmless.
    pub fn del(&self, net: &NetworkList, rt: &RuntimeConf) -> CniResult<()> {
        let env = self.env(rt);
        let cached = self.read_cache(net, rt);
        let prev = if net.version() >= Version(0, 4, 0) {
            cached.as_ref().map(|c| &c.result)
        } else {
            None
        };
        for plugin in net.plugins.iter().rev() {
            let conf = self.plugin_conf(net, plugin, Some(rt), prev);
            let bytes = serde_json::to_vec(&conf).map_err(|e| CniError::internal(e.to_string()))?;
            let path = invoke::find_plugin(Self::plugin_type(plugin), &self.plugin_dirs)?;
            invoke::exec(&path, "DEL", &env, &bytes)?;
        }
        let f = self.cache_path(net, rt);
        match std::fs::remove_file(&f) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(CniError::io(format!("removing {}: {e}", f.display()))),
        }
    }

    /// CHECK through the chain with the cached result (0.4.0 and later).
    pub fn check(&self, net: &NetworkList, rt: &RuntimeConf) -> CniResult<()> {
        if net.version() < Version(0, 4, 0) || net.disable_check {
            return Ok(());
        }
        let cached = self.read_cache(net, rt).ok_or_else(|| {
            CniError::new(
                code::UNKNOWN_CONTAINER,
                format!(
                    "no cached result for {} on network {}",
                    rt.container_id, net.name
                ),
            )
        })?;
        let env = self.env(rt);
        for plugin in &net.plugins {
            let conf = self.plugin_conf(net, plugin, Some(rt), Some(&cached.result));
            let bytes = serde_json::to_vec(&conf).map_err(|e| CniError::internal(e.to_string()))?;
            let path = invoke::find_plugin(Self::plugin_type(plugin), &self.plugin_dirs)?;
            invoke::exec(&path, "CHECK", &env, &bytes)?;
        }
        Ok(())
    }

    /// STATUS of every plugin (1.1.0 lists only; older ones are assumed ready).
    pub fn status(&self, net: &NetworkList) -> CniResult<()> {
        if net.version() < Version(1, 1, 0) {
            for plugin in &net.plugins {
                invoke::find_plugin(Self::plugin_type(plugin), &self.plugin_dirs)?;
            }
            return Ok(());
        }
        let env = InvokeEnv {
            path: self.plugin_dirs.clone(),
            ..Default::default()
        };
        for plugin in &net.plugins {
            let conf = self.plugin_conf(net, plugin, None, None);
            let bytes = serde_json::to_vec(&conf).map_err(|e| CniError::internal(e.to_string()))?;
            let path = invoke::find_plugin(Self::plugin_type(plugin), &self.plugin_dirs)?;
            invoke::exec(&path, "STATUS", &env, &bytes)?;
        }
        Ok(())
    }

    /// GC: drop cached results of attachments not in `valid`, then (1.1.0) tell every
    /// plugin which attachments to keep.
    pub fn gc(&self, net: &NetworkList, valid: &[Attachment]) -> CniResult<()> {
        for entry in self.cached_entries(net) {
            let keep = valid
                .iter()
                .any(|a| a.container_id == entry.rt.container_id && a.ifname == entry.rt.ifname);
            if !keep {
                let _ = std::fs::remove_file(self.cache_path(net, &entry.rt));
            }
        }
        if net.version() < Version(1, 1, 0) || net.disable_gc {
            return Ok(());
        }
        let env = InvokeEnv {
            path: self.plugin_dirs.clone(),
            ..Default::default()
        };
        let valid_v = serde_json::to_value(valid).map_err(|e| CniError::internal(e.to_string()))?;
        for plugin in &net.plugins {
            let mut conf = self.plugin_conf(net, plugin, None, None);
            conf.insert(VALID_ATTACHMENTS.into(), valid_v.clone());
            let bytes = serde_json::to_vec(&conf).map_err(|e| CniError::internal(e.to_string()))?;
            let path = invoke::find_plugin(Self::plugin_type(plugin), &self.plugin_dirs)?;
            invoke::exec(&path, "GC", &env, &bytes)?;
        }
        Ok(())
    }

    /// The result ADD returned for this attachment, if it is still cached.
    pub fn cached_result(&self, net: &NetworkList, rt: &RuntimeConf) -> Option<AddResult> {
        self.read_cache(net, rt)
            .and_then(|c| AddResult::from_value(c.result).ok())
    }

    fn cache_path(&self, net: &NetworkList, rt: &RuntimeConf) -> PathBuf {
        self.cache_dir
            .join("results")
            .join(format!("{}-{}-{}", net.name, rt.container_id, rt.ifname))
    }

    fn read_cache(&self, net: &NetworkList, rt: &RuntimeConf) -> Option<CacheEntry> {
        let bytes = std::fs::read(self.cache_path(net, rt)).ok()?;
        serde_json::from_slice::<CacheEntry>(&bytes)
            .ok()
            .filter(|c| c.kind == CACHE_KIND)
    }

    fn cached_entries(&self, net: &NetworkList) -> Vec<CacheEntry> {
        let dir = self.cache_dir.join("results");
        let prefix = format!("{}-", net.name);
        let Ok(rd) = std::fs::read_dir(&dir) else {
            return vec![];
        };
        rd.filter_map(|e| e.ok())
            .filter(|e| e.file_name().to_string_lossy().starts_with(&prefix))
            .filter_map(|e| std::fs::read(e.path()).ok())
            .filter_map(|b| serde_json::from_slice::<CacheEntry>(&b).ok())
            .filter(|c| c.kind == CACHE_KIND && c.network_name == net.name)
            .collect()
    }

    fn write_cache(&self, net: &NetworkList, rt: &RuntimeConf, result: &Value) -> CniResult<()> {
        let entry = CacheEntry {
            kind: CACHE_KIND.into(),
            network_name: net.name.clone(),
            rt: rt.clone(),
            result: result.clone(),
        };
        let bytes = serde_json::to_vec(&entry).map_err(|e| CniError::internal(e.to_string()))?;
        write_atomic(&self.cache_path(net, rt), &bytes)
    }
}

/// Temp file and rename: a reader sees the old content or the new, never a part.
///
/// Not fsynced: the cache outlives a runtime's restart in the page cache, and after a
/// machine's crash an entry lost (or left empty) costs nothing, since the attachments
/// it describes went with the machine and DEL without a cached result is the case
/// every plugin already handles (libcni does not sync its cache either). The two
/// fsyncs were a millisecond or more of every pod's start on a disk.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> CniResult<()> {
    use std::io::Write;
    let dir = path
        .parent()
        .ok_or_else(|| CniError::io(format!("{} has no parent", path.display())))?;
    std::fs::create_dir_all(dir)
        .map_err(|e| CniError::io(format!("creating {}: {e}", dir.display())))?;
    let tmp = dir.join(format!(
        ".{}.tmp{}",
        path.file_name().unwrap_or_default().to_string_lossy(),
        std::process::id()
    ));
    let res = (|| -> std::io::Result<()> {
        let mut f = std::fs::File::create(&tmp)?;
        f.write_all(bytes)?;
        std::fs::rename(&tmp, path)
    })();
    res.map_err(|e| {
        let _ = std::fs::remove_file(&tmp);
        CniError::io(format!("writing {}: {e}", path.display()))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    struct Tmp(PathBuf);
    impl Drop for Tmp {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
    fn tmp(name: &str) -> Tmp {
        let d = std::env::temp_dir().join(format!("cni-rt-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        Tmp(d)
    }

    /// A plugin that logs its verb and stdin, and prints its prevResult (or a fixed one).
    fn recorder(dir: &Path, name: &str) {
        let log = dir.join("log");
        let body = format!(
            "#!/bin/sh\nin=$(cat)\necho \"{name} $CNI_COMMAND $CNI_ARGS $in\" >> {log}\n\
             if [ \"$CNI_COMMAND\" = ADD ]; then echo '{{\"cniVersion\":\"1.0.0\",\"ips\":[{{\"address\":\"10.9.0.2/24\"}}]}}'; fi\n",
            log = log.display()
        );
        let p = dir.join(name);
        std::fs::write(&p, body).unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
    }

    #[test]
    fn loads_first_valid_config_in_lexical_order() {
        let t = tmp("load");
        std::fs::write(t.0.join("00-bad.conflist"), "{").unwrap();
        std::fs::write(
            t.0.join("20-b.conflist"),
            r#"{"cniVersion":"1.0.0","name":"b","plugins":[{"type":"x"}]}"#,
        )
        .unwrap();
        std::fs::write(
            t.0.join("10-a.conf"),
            r#"{"cniVersion":"0.4.0","name":"a","type":"bridge"}"#,
        )
        .unwrap();
        std::fs::write(t.0.join("05-ignored.txt"), "x").unwrap();
        let l = load_first(&t.0).unwrap().unwrap();
        assert_eq!(l.name, "a");
        assert_eq!(l.plugins.len(), 1);
        assert_eq!(l.cni_version, "0.4.0");
        assert!(load_first(&t.0.join("none")).is_err());
    }

    #[test]
    fn picks_highest_supported_of_cni_versions() {
        let l = NetworkList::parse(
            br#"{"cniVersions":["0.4.0","1.1.0","9.0.0"],"cniVersion":"0.3.1","name":"n","plugins":[{"type":"x"}]}"#,
            Path::new("x"),
        )
        .unwrap();
        assert_eq!(l.cni_version, "1.1.0");
        let e = NetworkList::parse(
            br#"{"cniVersion":"1.0.0","name":"n","plugins":[{}]}"#,
            Path::new("x"),
        )
        .unwrap_err();
        assert_eq!(e.code, code::INVALID_NETWORK_CONFIG);
    }

    #[test]
    fn chain_passes_prev_result_capabilities_and_cache() {
        let t = tmp("chain");
        recorder(&t.0, "first");
        recorder(&t.0, "second");
        let net = NetworkList::parse(
            br#"{"cniVersion":"1.0.0","name":"net1","plugins":[{"type":"first","capabilities":{"portMappings":true}},{"type":"second"}]}"#,
            Path::new("x"),
        )
        .unwrap();
        let rt_ = CniRuntime::new(vec![t.0.clone()], t.0.join("cache"));
        let mut caps = Map::new();
        caps.insert(
            "portMappings".into(),
            serde_json::json!([{"hostPort":8080,"containerPort":80,"protocol":"tcp"}]),
        );
        caps.insert("bandwidth".into(), serde_json::json!({"ingressRate":1}));
        let rc = RuntimeConf {
            container_id: "c1".into(),
            netns: "/run/netns/x".into(),
            ifname: "eth0".into(),
            args: vec![("K8S_POD_NAME".into(), "p".into())],
            capability_args: caps,
        };
        let r = rt_.add(&net, &rc).unwrap();
        assert_eq!(r.ips[0].address.to_string(), "10.9.0.2/24");
        assert!(rt_.cached_result(&net, &rc).is_some());
        rt_.check(&net, &rc).unwrap();
        rt_.del(&net, &rc).unwrap();
        assert!(rt_.cached_result(&net, &rc).is_none());
        rt_.del(&net, &rc).unwrap();

        let log = std::fs::read_to_string(t.0.join("log")).unwrap();
        let lines: Vec<&str> = log.lines().collect();
        assert!(
            lines[0].starts_with("first ADD K8S_POD_NAME=p "),
            "{}",
            lines[0]
        );
        assert!(
            lines[0].contains("\"runtimeConfig\":{\"portMappings\""),
            "{}",
            lines[0]
        );
        assert!(
            !lines[0].contains("bandwidth"),
            "undeclared capability leaked: {}",
            lines[0]
        );
        assert!(!lines[0].contains("prevResult"));
        assert!(
            lines[1].starts_with("second ADD") && lines[1].contains("prevResult"),
            "{}",
            lines[1]
        );
        assert!(!lines[1].contains("runtimeConfig"));
        assert!(lines[2].starts_with("first CHECK") && lines[2].contains("10.9.0.2/24"));
        assert!(
            lines[4].starts_with("second DEL") && lines[4].contains("prevResult"),
            "{}",
            lines[4]
        );
        assert!(lines[5].starts_with("first DEL"));
        assert!(
            !lines[7].contains("prevResult"),
            "second DEL has no cache: {}",
            lines[7]
        );
    }

    #[test]
    fn gc_and_status_need_110_and_prune_cache() {
        let t = tmp("gc");
        recorder(&t.0, "p");
        let net = NetworkList::parse(
            br#"{"cniVersion":"1.1.0","name":"g","plugins":[{"type":"p"}]}"#,
            Path::new("x"),
        )
        .unwrap();
        let rt_ = CniRuntime::new(vec![t.0.clone()], t.0.join("cache"));
        let a = RuntimeConf {
            container_id: "a".into(),
            ifname: "eth0".into(),
            netns: "/x".into(),
            ..Default::default()
        };
        let b = RuntimeConf {
            container_id: "b".into(),
            ..a.clone()
        };
        rt_.add(&net, &a).unwrap();
        rt_.add(&net, &b).unwrap();
        rt_.gc(
            &net,
            &[Attachment {
                container_id: "a".into(),
                ifname: "eth0".into(),
            }],
        )
        .unwrap();
        assert!(rt_.cached_result(&net, &a).is_some());
        assert!(rt_.cached_result(&net, &b).is_none());
        rt_.status(&net).unwrap();
        let log = std::fs::read_to_string(t.0.join("log")).unwrap();
        assert!(
            log.contains("p GC")
                && log.contains(
                    r#""cni.dev/valid-attachments":[{"containerID":"a","ifname":"eth0"}]"#
                ),
            "{log}"
        );
        assert!(log.contains("p STATUS"));
    }
}
