//! The plugin side of the protocol: read `CNI_*` variables and stdin, call the plugin's
//! verb, print a result or an error, pick the exit code.
//!
//! The environment, stdin and stdout are injected so dispatch is tested without
//! processes; `main` wires them to the real ones.

use crate::error::{code, CniError, CniResult};
use crate::result::AddResult;
use crate::types::NetConf;
use crate::version::{self, Version, VersionInfo};
use std::io::{Read, Write};
use std::path::PathBuf;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Command {
    Add,
    Del,
    Check,
    Version,
    Status,
    Gc,
}

impl Command {
    pub fn parse(s: &str) -> Option<Command> {
        Some(match s {
            "ADD" => Command::Add,
            "DEL" => Command::Del,
            "CHECK" => Command::Check,
            "VERSION" => Command::Version,
            "STATUS" => Command::Status,
            "GC" => Command::Gc,
            _ => return None,
        })
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Command::Add => "ADD",
            Command::Del => "DEL",
            Command::Check => "CHECK",
            Command::Version => "VERSION",
            Command::Status => "STATUS",
            Command::Gc => "GC",
        }
    }

    /// Which variables the spec requires for this verb: (container id, netns, ifname).
    fn requires(self) -> (bool, bool, bool) {
        match self {
            Command::Add | Command::Check => (true, true, true),
            Command::Del => (true, false, true),
            Command::Version | Command::Status | Command::Gc => (false, false, false),
        }
    }
}

/// Everything a verb gets: the environment, decoded, and the raw configuration.
#[derive(Debug, Clone)]
pub struct Args {
    pub command: Command,
    pub container_id: String,
    pub netns: String,
    pub ifname: String,
    /// `CNI_ARGS` as `key=value` pairs, in order.
    pub args: Vec<(String, String)>,
    pub path: Vec<PathBuf>,
    /// The bytes of stdin, passed on unchanged when delegating to IPAM.
    pub stdin: Vec<u8>,
    pub conf: NetConf,
}

impl Args {
    /// Refuses `CNI_ARGS` keys the plugin does not know (`known`), unless the runtime
    /// set `IgnoreUnknown` (`1` or `true`), as the reference plugins do: runtimes pass
    /// `IgnoreUnknown=1` with their `K8S_POD_*` keys, and a misspelt `IP=` request is
    /// refused instead of silently giving some other address.
    pub fn known_args_only(&self, known: &[&str]) -> CniResult<()> {
        let ignore = self
            .arg("IgnoreUnknown")
            .is_some_and(|v| v == "1" || v.eq_ignore_ascii_case("true"));
        let unknown: Vec<String> = self
            .args
            .iter()
            .filter(|(k, _)| k != "IgnoreUnknown" && !known.contains(&k.as_str()))
            .map(|(k, v)| format!("{k}={v}"))
            .collect();
        if ignore || unknown.is_empty() {
            return Ok(());
        }
        // 999, as the reference plugins' types.LoadArgs failing in their cmdAdd.
        Err(CniError::internal(format!(
            "CNI_ARGS: unknown args {unknown:?} (set IgnoreUnknown=1 to pass them)"
        )))
    }

    pub fn arg(&self, key: &str) -> Option<&str> {
        self.args
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }
}

/// A CNI plugin: one method per verb. VERSION is answered by the skeleton.
pub trait Plugin {
    fn add(&self, args: &Args) -> CniResult<AddResult>;
    fn del(&self, args: &Args) -> CniResult<()>;
    fn check(&self, args: &Args) -> CniResult<()>;
    fn status(&self, args: &Args) -> CniResult<()>;
    fn gc(&self, args: &Args) -> CniResult<()>;
}

/// Parses `CNI_ARGS` (`K=V;K2=V2`); a pair without `=` is an error (999, as the reference plugins say).
pub fn parse_cni_args(s: &str) -> CniResult<Vec<(String, String)>> {
    let mut out = Vec::new();
    for pair in s.split(';').filter(|p| !p.is_empty()) {
        match pair.split_once('=') {
            Some((k, v)) if !k.is_empty() => out.push((k.to_string(), v.to_string())),
            _ => {
                // The reference plugins parse CNI_ARGS themselves and fail with 999.
                return Err(CniError::internal(format!(
                    "CNI_ARGS: invalid pair {pair:?}, expected KEY=VALUE"
                )));
            }
        }
    }
    Ok(out)
}

/// The inverse of [`parse_cni_args`]: pairs back into a `CNI_ARGS` value.
pub fn format_cni_args(pairs: &[(String, String)]) -> String {
    pairs
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join(";")
}

/// Container ids are restricted as in libcni so they are safe in file names.
pub fn validate_container_id(id: &str) -> CniResult<()> {
    let ok = !id.is_empty()
        && id.as_bytes()[0].is_ascii_alphanumeric()
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'.' || b == b'-');
    if ok {
        Ok(())
    } else {
        Err(CniError::env(format!(
            "invalid CNI_CONTAINERID {id:?}: must start with a letter or digit and hold only letters, digits, '_', '.', '-'"
        )))
    }
}

/// Linux interface names: 1 to 15 bytes, not `.` or `..`, no `/`, `:` or whitespace.
pub fn validate_ifname(name: &str) -> CniResult<()> {
    let why = if name.is_empty() {
        Some("is empty")
    } else if name.len() > 15 {
        Some("is longer than 15 characters")
    } else if name == "." || name == ".." {
        Some("is not a valid name")
    } else if name
        .chars()
        .any(|c| c == '/' || c == ':' || c.is_whitespace())
    {
        Some("contains '/', ':' or whitespace")
    } else {
        None
    };
    match why {
        None => Ok(()),
        Some(w) => Err(CniError::env(format!("invalid CNI_IFNAME {name:?}: {w}"))),
    }
}

/// What `run` decided: text for stdout and the exit code.
pub struct Outcome {
    pub stdout: String,
    pub exit_code: i32,
}

/// Runs one invocation. `env` looks up a variable.
pub fn dispatch(
    plugin: &dyn Plugin,
    env: &dyn Fn(&str) -> Option<String>,
    stdin: &[u8],
) -> Outcome {
    let mut version_hint = String::new();
    match dispatch_inner(plugin, env, stdin, &mut version_hint) {
        Ok(stdout) => Outcome {
            stdout,
            exit_code: 0,
        },
        Err(mut e) => {
            if e.cni_version.is_empty() {
                e.cni_version = if version_hint.is_empty() {
                    version::CURRENT.to_string()
                } else {
                    version_hint
                };
            }
            let stdout = serde_json::to_string_pretty(&e).unwrap_or_else(|_| e.msg.clone());
            Outcome {
                stdout,
                exit_code: 1,
            }
        }
    }
}

fn dispatch_inner(
    plugin: &dyn Plugin,
    env: &dyn Fn(&str) -> Option<String>,
    stdin: &[u8],
    version_hint: &mut String,
) -> CniResult<String> {
    let var = |k: &str| env(k).unwrap_or_default();
    let cmd_s = var("CNI_COMMAND");
    if cmd_s.is_empty() {
        return Err(CniError::env("CNI_COMMAND is not set"));
    }
    let command = Command::parse(&cmd_s)
        .ok_or_else(|| CniError::env(format!("unknown CNI_COMMAND {cmd_s:?}")))?;

    if command == Command::Version {
        return serde_json::to_string(&VersionInfo::ours())
            .map_err(|e| CniError::internal(e.to_string()));
    }

    // Tell the error printer the config's version as early as we can read it.
    if let Ok(v) = serde_json::from_slice::<serde_json::Value>(stdin) {
        if let Some(s) = v.get("cniVersion").and_then(|s| s.as_str()) {
            if version::SUPPORTED.contains(&s) {
                *version_hint = s.to_string();
            }
        }
    }
    let conf = NetConf::parse(stdin).map_err(plugin_decode_error(stdin))?;

    let (need_id, need_netns, need_ifname) = command.requires();
    let container_id = var("CNI_CONTAINERID");
    let netns = var("CNI_NETNS");
    let ifname = var("CNI_IFNAME");
    let path_s = var("CNI_PATH");
    let mut missing = Vec::new();
    if need_id && container_id.is_empty() {
        missing.push("CNI_CONTAINERID");
    }
    if need_netns && netns.is_empty() {
        missing.push("CNI_NETNS");
    }
    if need_ifname && ifname.is_empty() {
        missing.push("CNI_IFNAME");
    }
    if path_s.is_empty() && command != Command::Status {
        missing.push("CNI_PATH");
    }
    if !missing.is_empty() {
        return Err(CniError::env(format!(
            "required environment variables missing: {}",
            missing.join(", ")
        )));
    }
    if need_id {
        validate_container_id(&container_id)?;
    }
    if need_ifname {
        validate_ifname(&ifname)?;
    }
    if matches!(command, Command::Status | Command::Gc)
        && Version::parse(&conf.cni_version)? < Version(1, 1, 0)
    {
        return Err(CniError::new(
            code::INCOMPATIBLE_VERSION,
            format!(
                "config version {} does not allow {}",
                conf.cni_version,
                command.as_str()
            ),
        ));
    }
    if command == Command::Check && Version::parse(&conf.cni_version)? < Version(0, 4, 0) {
        return Err(CniError::new(
            code::INCOMPATIBLE_VERSION,
            format!("config version {} does not allow CHECK", conf.cni_version),
        ));
    }
    let args = Args {
        command,
        container_id,
        netns,
        ifname,
        args: parse_cni_args(&var("CNI_ARGS"))?,
        path: std::env::split_paths(&path_s)
            .filter(|p| !p.as_os_str().is_empty())
            .collect(),
        stdin: stdin.to_vec(),
        conf,
    };
    match command {
        Command::Add => {
            let result = plugin.add(&args)?;
            result.to_json(&args.conf.cni_version)
        }
        Command::Del => plugin.del(&args).map(|_| String::new()),
        Command::Check => plugin.check(&args).map(|_| String::new()),
        Command::Status => plugin.status(&args).map(|_| String::new()),
        Command::Gc => plugin.gc(&args).map(|_| String::new()),
        Command::Version => unreachable!("answered above"),
    }
}

/// The reference plugins' skeleton decodes only `cniVersion` and `name` (code 6 when
/// they are not JSON strings in an object); a wrong shape elsewhere (`ipam`, `args`,
/// `runtimeConfig`, ...) fails later, in the plugin's own loading, as a plain error:
/// 999. Ours decodes those fields up front, so its decoding failure takes the code
/// the reference would give.
fn plugin_decode_error(stdin: &[u8]) -> impl Fn(CniError) -> CniError + '_ {
    move |e| {
        #[derive(serde::Deserialize)]
        #[allow(dead_code)]
        struct Skel {
            #[serde(rename = "cniVersion", default)]
            cni_version: Option<String>,
            #[serde(default)]
            name: Option<String>,
        }
        let skel_ok = serde_json::from_slice::<Skel>(stdin).is_ok();
        if e.code == code::DECODING_FAILURE && skel_ok {
            CniError::new(code::INTERNAL, e.msg)
        } else {
            e
        }
    }
}

/// The whole `main` of a plugin binary.
pub fn main(plugin: &dyn Plugin) -> ! {
    let mut stdin = Vec::new();
    let cmd = std::env::var("CNI_COMMAND").unwrap_or_default();
    // VERSION may be run with no stdin at all; everything else must read it.
    if cmd != "VERSION" {
        if let Err(e) = std::io::stdin().read_to_end(&mut stdin) {
            let err = CniError::io(format!("reading stdin: {e}"));
            println!("{}", serde_json::to_string(&err).unwrap_or_default());
            std::process::exit(1);
        }
    }
    let out = dispatch(plugin, &|k| std::env::var(k).ok(), &stdin);
    let mut so = std::io::stdout().lock();
    if !out.stdout.is_empty() {
        let _ = writeln!(so, "{}", out.stdout);
    }
    let _ = so.flush();
    if out.exit_code != 0 {
        let _ = writeln!(std::io::stderr(), "{}", out.stdout);
    }
    std::process::exit(out.exit_code)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::RefCell;
    use std::collections::HashMap;

    #[derive(Default)]
    struct Fake {
        seen: RefCell<Vec<(Command, String, String)>>,
        fail: Option<CniError>,
    }

    impl Fake {
        fn record(&self, a: &Args) -> CniResult<()> {
            self.seen
                .borrow_mut()
                .push((a.command, a.container_id.clone(), a.ifname.clone()));
            match &self.fail {
                Some(e) => Err(e.clone()),
                None => Ok(()),
            }
        }
    }

    impl Plugin for Fake {
        fn add(&self, a: &Args) -> CniResult<AddResult> {
            self.record(a)?;
            Ok(AddResult {
                ips: vec![crate::result::IpConfig {
                    interface: None,
                    address: "10.0.0.2/24".parse().unwrap(),
                    gateway: None,
                }],
                ..Default::default()
            })
        }
        fn del(&self, a: &Args) -> CniResult<()> {
            self.record(a)
        }
        fn check(&self, a: &Args) -> CniResult<()> {
            self.record(a)
        }
        fn status(&self, a: &Args) -> CniResult<()> {
            self.record(a)
        }
        fn gc(&self, a: &Args) -> CniResult<()> {
            self.record(a)
        }
    }

    fn run(p: &Fake, env: &[(&str, &str)], stdin: &str) -> (Outcome, serde_json::Value) {
        let env: HashMap<String, String> = env
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        let out = dispatch(p, &|k| env.get(k).cloned(), stdin.as_bytes());
        let v = if out.stdout.is_empty() {
            serde_json::Value::Null
        } else {
            serde_json::from_str(&out.stdout).unwrap()
        };
        (out, v)
    }

    const CONF: &str = r#"{"cniVersion":"0.4.0","name":"n","type":"fake"}"#;
    const ADD: &[(&str, &str)] = &[
        ("CNI_COMMAND", "ADD"),
        ("CNI_CONTAINERID", "c1"),
        ("CNI_NETNS", "/x"),
        ("CNI_IFNAME", "eth0"),
        ("CNI_PATH", "/bin"),
    ];

    #[test]
    fn add_prints_result_in_config_version() {
        let p = Fake::default();
        let (out, v) = run(&p, ADD, CONF);
        assert_eq!(out.exit_code, 0);
        assert_eq!(v["cniVersion"], "0.4.0");
        assert_eq!(v["ips"][0]["version"], "4");
        assert_eq!(
            p.seen.borrow()[0],
            (Command::Add, "c1".into(), "eth0".into())
        );
    }

    #[test]
    fn version_needs_no_stdin() {
        let (out, v) = run(&Fake::default(), &[("CNI_COMMAND", "VERSION")], "");
        assert_eq!(out.exit_code, 0);
        assert_eq!(v["cniVersion"], "1.1.0");
        assert!(v["supportedVersions"]
            .as_array()
            .unwrap()
            .iter()
            .any(|x| x == "0.3.1"));
    }

    #[test]
    fn missing_and_bad_env_is_code_4() {
        let p = Fake::default();
        let (out, v) = run(&p, &[("CNI_COMMAND", "ADD"), ("CNI_PATH", "/bin")], CONF);
        assert_eq!(out.exit_code, 1);
        assert_eq!(v["code"], 4);
        assert_eq!(v["cniVersion"], "0.4.0");
        assert!(v["msg"].as_str().unwrap().contains("CNI_CONTAINERID"));
        let mut env = ADD.to_vec();
        env[3] = ("CNI_IFNAME", "a-very-long-ifname0");
        assert_eq!(run(&p, &env, CONF).1["code"], 4);
        env[3] = ("CNI_IFNAME", "eth0");
        env[1] = ("CNI_CONTAINERID", "../etc");
        assert_eq!(run(&p, &env, CONF).1["code"], 4);
        assert_eq!(run(&p, &[("CNI_COMMAND", "FROB")], CONF).1["code"], 4);
        assert!(
            p.seen.borrow().is_empty(),
            "plugin must not run on bad input"
        );
    }

    #[test]
    fn del_needs_no_netns() {
        let p = Fake::default();
        let (out, _) = run(
            &p,
            &[
                ("CNI_COMMAND", "DEL"),
                ("CNI_CONTAINERID", "c1"),
                ("CNI_IFNAME", "eth0"),
                ("CNI_PATH", "/bin"),
            ],
            CONF,
        );
        assert_eq!(out.exit_code, 0);
        assert!(out.stdout.is_empty());
    }

    #[test]
    fn bad_config_codes() {
        let p = Fake::default();
        assert_eq!(run(&p, ADD, "{").1["code"], 6);
        assert_eq!(
            run(&p, ADD, r#"{"cniVersion":"5.0.0","name":"n","type":"t"}"#).1["code"],
            1
        );
        assert_eq!(
            run(&p, ADD, r#"{"cniVersion":"1.0.0","type":"t"}"#).1["code"],
            7
        );
    }

    #[test]
    fn check_needs_040() {
        let p = Fake::default();
        let env = [
            ("CNI_COMMAND", "CHECK"),
            ("CNI_CONTAINERID", "c"),
            ("CNI_NETNS", "/x"),
            ("CNI_IFNAME", "eth0"),
            ("CNI_PATH", "/b"),
        ];
        assert_eq!(
            run(&p, &env, r#"{"cniVersion":"0.3.1","name":"n","type":"t"}"#).1["code"],
            1
        );
        assert_eq!(run(&p, &env, CONF).0.exit_code, 0);
    }

    #[test]
    fn status_and_gc_need_110() {
        let p = Fake::default();
        let env = [("CNI_COMMAND", "STATUS")];
        assert_eq!(run(&p, &env, CONF).1["code"], 1);
        let (out, _) = run(&p, &env, r#"{"cniVersion":"1.1.0","name":"n","type":"t"}"#);
        assert_eq!(out.exit_code, 0);
    }

    #[test]
    fn plugin_errors_pass_through() {
        let p = Fake {
            fail: Some(CniError::new(11, "busy")),
            ..Default::default()
        };
        let (out, v) = run(&p, ADD, CONF);
        assert_eq!(out.exit_code, 1);
        assert_eq!(v["code"], 11);
        assert_eq!(v["msg"], "busy");
    }

    #[test]
    fn cni_args_parse() {
        assert_eq!(
            parse_cni_args("IgnoreUnknown=1;IP=10.0.0.9").unwrap(),
            vec![
                ("IgnoreUnknown".into(), "1".into()),
                ("IP".into(), "10.0.0.9".into())
            ]
        );
        assert_eq!(parse_cni_args("novalue").unwrap_err().code, 999);
        assert!(parse_cni_args("").unwrap().is_empty());
        let pairs = parse_cni_args("A=1;B=x=y").unwrap();
        assert_eq!(format_cni_args(&pairs), "A=1;B=x=y");
    }
}
