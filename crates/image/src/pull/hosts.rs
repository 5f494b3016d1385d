//! Registry hosts, configured as containerd does: `<dir>/<registry>/hosts.toml` (or
//! `<dir>/_default/hosts.toml`) with an optional `server` and `[host."URL"]` mirrors
//! tried first, in file order, each with `capabilities`, `skip_verify`, `ca` and
//! `header`. Without a file the registry itself is the one host: HTTPS, or plain HTTP
//! for `localhost`, `127.0.0.1` and `[::1]`.

use crate::error::{Error, Result};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// One place to fetch from.
#[derive(Debug, Clone, PartialEq)]
pub struct Endpoint {
    /// `http` or `https`.
    pub scheme: String,
    /// `host[:port]`.
    pub host: String,
    pub pull: bool,
    pub resolve: bool,
    pub skip_verify: bool,
    pub ca: Vec<PathBuf>,
    pub headers: BTreeMap<String, Vec<String>>,
}

impl Endpoint {
    /// The PEM files of hosts.toml `ca`, read (an error names the host and file), with
    /// their paths: every HTTP client for this host trusts them.
    pub(crate) fn ca_pems(&self) -> crate::error::Result<Vec<(&PathBuf, Vec<u8>)>> {
        self.ca
            .iter()
            .map(|p| {
                std::fs::read(p).map(|pem| (p, pem)).map_err(|e| {
                    crate::error::Error::Internal(format!(
                        "registry host {}: ca {}: {e}",
                        self.host,
                        p.display()
                    ))
                })
            })
            .collect()
    }
}

#[derive(Debug, Default, serde::Deserialize)]
struct HostsFile {
    server: Option<String>,
    #[serde(flatten)]
    server_opts: HostOpts,
    #[serde(default)]
    host: toml::Table,
}

#[derive(Debug, Default, serde::Deserialize)]
struct HostOpts {
    capabilities: Option<Vec<String>>,
    skip_verify: Option<bool>,
    ca: Option<StringOrList>,
    header: Option<BTreeMap<String, StringOrList>>,
    #[allow(dead_code)]
    override_path: Option<bool>,
    #[allow(dead_code)]
    client: Option<toml::Value>,
    #[allow(dead_code)]
    dial_timeout: Option<String>,
}

#[derive(Debug, Clone, serde::Deserialize)]
#[serde(untagged)]
enum StringOrList {
    One(String),
    Many(Vec<String>),
}

impl StringOrList {
    fn list(&self) -> Vec<String> {
        match self {
            StringOrList::One(s) => vec![s.clone()],
            StringOrList::Many(v) => v.clone(),
        }
    }
}

fn is_local(host: &str) -> bool {
    let h = host
        .rsplit_once(':')
        .map(|(h, p)| {
            if p.bytes().all(|b| b.is_ascii_digit()) {
                h
            } else {
                host
            }
        })
        .unwrap_or(host);
    matches!(h, "localhost" | "127.0.0.1" | "[::1]" | "::1")
}

/// The default host of a registry.
fn default_server(registry: &str) -> String {
    if registry == "docker.io" {
        "https://registry-1.docker.io".into()
    } else if is_local(registry) {
        format!("http://{registry}")
    } else {
        format!("https://{registry}")
    }
}

fn endpoint(url: &str, o: &HostOpts, base: &Path, file: &Path) -> Result<Endpoint> {
    let bad = |m: &str| Error::InvalidArgument(format!("{}: host {url:?}: {m}", file.display()));
    let (scheme, rest) = match url.split_once("://") {
        Some((s, r)) => (s.to_string(), r),
        None => ("https".to_string(), url),
    };
    if scheme != "http" && scheme != "https" {
        return Err(bad("scheme must be http or https"));
    }
    let host = rest.split('/').next().unwrap_or("").to_string();
    if host.is_empty() {
        return Err(bad("no host"));
    }
    let path = rest[host.len()..].trim_matches('/');
    if !path.is_empty() && path != "v2" {
        return Err(bad("a path other than /v2 is not supported"));
    }
    let caps = o
        .capabilities
        .clone()
        .unwrap_or_else(|| vec!["pull".into(), "resolve".into()]);
    Ok(Endpoint {
        scheme,
        host,
        pull: caps.iter().any(|c| c == "pull"),
        resolve: caps.iter().any(|c| c == "resolve"),
        skip_verify: o.skip_verify.unwrap_or(false),
        ca: o
            .ca
            .as_ref()
            .map(|c| c.list().into_iter().map(|p| base.join(p)).collect())
            .unwrap_or_default(),
        headers: o
            .header
            .as_ref()
            .map(|h| h.iter().map(|(k, v)| (k.clone(), v.list())).collect())
            .unwrap_or_default(),
    })
}

/// The hosts to try for `registry`, in order: mirrors first, the server last.
pub fn endpoints(dir: Option<&Path>, registry: &str) -> Result<Vec<Endpoint>> {
    let file = dir.and_then(|d| {
        [
            registry.to_string(),
            registry.replace(':', "_"),
            "_default".to_string(),
        ]
        .into_iter()
        .map(|n| d.join(n).join("hosts.toml"))
        .find(|p| p.is_file())
    });
    let Some(file) = file else {
        return Ok(vec![endpoint(
            &default_server(registry),
            &HostOpts::default(),
            Path::new("/"),
            Path::new("-"),
        )?]);
    };
    let text = std::fs::read_to_string(&file)
        .map_err(|e| Error::Internal(format!("reading {}: {e}", file.display())))?;
    parse(&text, registry, &file)
}

/// The endpoints `text` (the `hosts.toml` at `file`) names for `registry`, mirrors first.
/// Public for fuzzing and for callers that have the file's text already.
pub fn parse(text: &str, registry: &str, file: &Path) -> Result<Vec<Endpoint>> {
    let base = file.parent().unwrap_or(Path::new("/"));
    let hf: HostsFile = toml::from_str(text).map_err(|e| {
        Error::InvalidArgument(format!("{}: {}", file.display(), e.to_string().trim_end()))
    })?;
    let mut out = Vec::new();
    // `toml::Table` keeps the file's order (toml's preserve_order is not guaranteed),
    // so re-read the keys' order from the text.
    let mut keys: Vec<(usize, &String)> = hf
        .host
        .keys()
        .map(|k| (text.find(&format!("\"{k}\"")).unwrap_or(usize::MAX), k))
        .collect();
    keys.sort();
    for (_, k) in keys {
        let v = hf.host.get(k).unwrap().clone();
        let o: HostOpts = v
            .try_into()
            .map_err(|e| Error::InvalidArgument(format!("{}: host {k:?}: {e}", file.display())))?;
        out.push(endpoint(k, &o, base, file)?);
    }
    let server = hf
        .server
        .clone()
        .unwrap_or_else(|| default_server(registry));
    out.push(endpoint(&server, &hf.server_opts, base, file)?);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults() {
        let e = endpoints(None, "127.0.0.1:5000").unwrap();
        assert_eq!(e.len(), 1);
        assert_eq!(
            (e[0].scheme.as_str(), e[0].host.as_str()),
            ("http", "127.0.0.1:5000")
        );
        let e = endpoints(None, "docker.io").unwrap();
        assert_eq!(
            (e[0].scheme.as_str(), e[0].host.as_str()),
            ("https", "registry-1.docker.io")
        );
        assert_eq!(endpoints(None, "quay.io").unwrap()[0].scheme, "https");
    }

    #[test]
    fn mirrors_in_order() {
        let t = r#"
server = "https://registry.k8s.io"
[host."http://127.0.0.1:5001"]
  capabilities = ["pull", "resolve"]
[host."https://mirror.example:8443/v2"]
  capabilities = ["pull"]
  skip_verify = true
  ca = "ca.pem"
  [host."https://mirror.example:8443/v2".header]
    x-token = "abc"
"#;
        let e = parse(
            t,
            "registry.k8s.io",
            Path::new("/etc/crust/certs.d/registry.k8s.io/hosts.toml"),
        )
        .unwrap();
        assert_eq!(e.len(), 3);
        assert_eq!(e[0].host, "127.0.0.1:5001");
        assert_eq!(e[0].scheme, "http");
        assert!(e[0].resolve);
        assert_eq!(e[1].host, "mirror.example:8443");
        assert!(!e[1].resolve && e[1].pull && e[1].skip_verify);
        assert_eq!(
            e[1].ca,
            vec![PathBuf::from("/etc/crust/certs.d/registry.k8s.io/ca.pem")]
        );
        assert_eq!(e[1].headers["x-token"], vec!["abc"]);
        assert_eq!(e[2].host, "registry.k8s.io");
        assert!(parse("server = 1", "x", Path::new("f")).is_err());
    }
}
