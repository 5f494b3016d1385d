//! Image references: `busybox` is `docker.io/library/busybox:latest`, as everywhere.
//!
//! The grammar is the distribution project's (`reference/regexp.go`), which Docker,
//! containerd and the kubelet share, so a name means the same here as in a pod spec:
//!
//! ```text
//! reference  := name [ ":" tag ] [ "@" digest ]
//! name       := [ domain "/" ] path { "/" path }
//! domain     := host [ ":" port ]          host: dot-separated labels, or [IPv6]
//! path       := [a-z0-9]+ { ( "." | "_" | "__" | "-"+ ) [a-z0-9]+ }
//! tag        := [A-Za-z0-9_] [A-Za-z0-9_.-]{0,127}
//! ```
//! The first component is the domain only if it looks like one (a `.` or `:`, or
//! `localhost`); otherwise the image is on Docker Hub, `docker.io`, where a one-component
//! path lives under `library/`. `index.docker.io` is Docker Hub's old name for the same.
//! Only `sha256` digests are taken: the store keeps nothing else.
//!
//! Written here, not taken from oci-spec's `distribution` module (a regex engine for one
//! small grammar): the registry client is crust's own too (`pull::fetch`).

use crate::error::{Error, Result};

/// Docker Hub, as references name it.
const DOCKER_HUB: &str = "docker.io";
/// The distribution spec's limit on a repository's length.
const MAX_REPOSITORY: usize = 255;
const MAX_TAG: usize = 128;

/// A parsed, normalised reference.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Named {
    registry: String,
    repository: String,
    /// `latest` when the reference has neither tag nor digest.
    tag: Option<String>,
    digest: Option<String>,
}

impl Named {
    /// A reference as a user writes it, normalised; anything outside the grammar is
    /// InvalidArgument, naming the reference and what is wrong with it.
    pub fn parse(s: &str) -> Result<Named> {
        if s.is_empty() {
            return Err(Error::InvalidArgument("empty image reference".into()));
        }
        let bad = |why: String| Error::InvalidArgument(format!("image reference {s:?}: {why}"));
        let (rest, digest) = match s.split_once('@') {
            Some((rest, d)) => {
                crate::digest::hex_of(d)
                    .map_err(|e| e.context(format!("image reference {s:?}")))?;
                (rest, Some(d.to_string()))
            }
            None => (s, None),
        };
        // A `:` after the last `/` starts the tag; one before it is a port.
        let last = rest.rfind('/').map_or(0, |i| i + 1);
        let (name, tag) = match rest[last..].find(':') {
            Some(i) => (&rest[..last + i], Some(&rest[last + i + 1..])),
            None => (rest, None),
        };
        if let Some(t) = tag {
            if !is_tag(t) {
                return Err(bad(format!("invalid tag {t:?}")));
            }
        }
        let (registry, repository) = match name.split_once('/') {
            Some((first, path)) if first.contains(['.', ':']) || first == "localhost" => {
                if !is_domain(first) {
                    return Err(bad(format!("invalid registry host {first:?}")));
                }
                (first, path.to_string())
            }
            _ => (DOCKER_HUB, name.to_string()),
        };
        let registry = if registry == "index.docker.io" {
            DOCKER_HUB
        } else {
            registry
        };
        let repository = if registry == DOCKER_HUB && !repository.contains('/') {
            format!("library/{repository}")
        } else {
            repository
        };
        for c in repository.split('/') {
            if c.is_empty() {
                return Err(bad("empty repository name component".into()));
            }
            if !is_path_component(c) {
                return Err(bad(if is_path_component(&c.to_ascii_lowercase()) {
                    "repository name must be lowercase".into()
                } else {
                    format!("invalid repository name component {c:?}")
                }));
            }
        }
        if repository.len() > MAX_REPOSITORY {
            return Err(bad(format!(
                "repository name longer than {MAX_REPOSITORY} characters"
            )));
        }
        let tag = match (tag, &digest) {
            (Some(t), _) => Some(t.to_string()),
            (None, None) => Some("latest".to_string()),
            (None, Some(_)) => None,
        };
        Ok(Named {
            registry: registry.to_string(),
            repository,
            tag,
            digest,
        })
    }

    /// `registry/repository`.
    pub fn name(&self) -> String {
        format!("{}/{}", self.registry, self.repository)
    }

    /// `registry/repository:tag`, when the reference has a tag (or no digest: `latest`).
    pub fn tagged(&self) -> Option<String> {
        self.tag.as_ref().map(|t| format!("{}:{t}", self.name()))
    }

    pub fn digest(&self) -> Option<&str> {
        self.digest.as_deref()
    }

    pub fn tag(&self) -> Option<&str> {
        self.tag.as_deref()
    }

    /// `docker.io` for Docker Hub, else the host (and port) the reference names.
    pub fn registry(&self) -> &str {
        &self.registry
    }

    /// The path within the registry (`library/busybox`).
    pub fn repository(&self) -> &str {
        &self.repository
    }
}

impl std::fmt::Display for Named {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match (self.tagged(), self.digest()) {
            (Some(t), Some(d)) => write!(f, "{t}@{d}"),
            (Some(t), None) => write!(f, "{t}"),
            (None, Some(d)) => write!(f, "{}@{d}", self.name()),
            (None, None) => write!(f, "{}", self.name()),
        }
    }
}

fn is_alnum_lower(b: u8) -> bool {
    b.is_ascii_lowercase() || b.is_ascii_digit()
}

/// Lowercase letters and digits in runs, joined by `.`, `_`, `__` or any number of `-`.
fn is_path_component(c: &str) -> bool {
    let b = c.as_bytes();
    if !b.first().copied().is_some_and(is_alnum_lower)
        || !b.last().copied().is_some_and(is_alnum_lower)
    {
        return false;
    }
    let mut i = 0;
    while i < b.len() {
        if is_alnum_lower(b[i]) {
            i += 1;
            continue;
        }
        let start = i;
        while i < b.len() && !is_alnum_lower(b[i]) {
            i += 1;
        }
        let sep = &c[start..i];
        if !(sep == "." || sep == "_" || sep == "__" || sep.bytes().all(|x| x == b'-')) {
            return false;
        }
    }
    true
}

/// `host[:port]`: DNS labels (letters, digits, inner `-`) joined by `.`, or an IPv6
/// address in brackets.
fn is_domain(d: &str) -> bool {
    let (host, port) = if let Some(v6) = d.strip_prefix('[') {
        let Some((addr, after)) = v6.split_once(']') else {
            return false;
        };
        if addr.parse::<std::net::Ipv6Addr>().is_err() {
            return false;
        }
        match after {
            "" => return true,
            _ => match after.strip_prefix(':') {
                Some(p) => ("", Some(p)),
                None => return false,
            },
        }
    } else {
        match d.split_once(':') {
            Some((h, p)) => (h, Some(p)),
            None => (d, None),
        }
    };
    if let Some(p) = port {
        if p.is_empty() || !p.bytes().all(|b| b.is_ascii_digit()) {
            return false;
        }
    }
    if d.starts_with('[') {
        return true;
    }
    !host.is_empty()
        && host.split('.').all(|l| {
            let b = l.as_bytes();
            !b.is_empty()
                && b[0].is_ascii_alphanumeric()
                && b[b.len() - 1].is_ascii_alphanumeric()
                && b.iter().all(|&x| x.is_ascii_alphanumeric() || x == b'-')
        })
}

fn is_tag(t: &str) -> bool {
    let b = t.as_bytes();
    !b.is_empty()
        && b.len() <= MAX_TAG
        && (b[0].is_ascii_alphanumeric() || b[0] == b'_')
        && b.iter()
            .all(|&x| x.is_ascii_alphanumeric() || matches!(x, b'_' | b'.' | b'-'))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ErrorKind;

    fn d(c: char) -> String {
        format!("sha256:{}", c.to_string().repeat(64))
    }

    #[test]
    fn normalises() {
        let n = Named::parse("busybox").unwrap();
        assert_eq!(n.tagged().unwrap(), "docker.io/library/busybox:latest");
        let n = Named::parse("127.0.0.1:5000/a/b:v1").unwrap();
        assert_eq!(n.name(), "127.0.0.1:5000/a/b");
        assert_eq!(n.tagged().unwrap(), "127.0.0.1:5000/a/b:v1");
        let d = d('a');
        let n = Named::parse(&format!("registry.k8s.io/pause@{d}")).unwrap();
        assert_eq!(n.tagged(), None);
        assert_eq!(n.to_string(), format!("registry.k8s.io/pause@{d}"));
        assert!(Named::parse("Bad Name").is_err());
        assert!(Named::parse("").is_err());
    }

    /// What each accepted form means: registry, repository, tag and digest (`-`: none;
    /// `D` stands for a sha256 digest).
    #[test]
    fn accepted() {
        let dg = d('a');
        let cases = [
            ("busybox", "docker.io library/busybox latest -"),
            ("busybox:1.36", "docker.io library/busybox 1.36 -"),
            ("library/busybox", "docker.io library/busybox latest -"),
            ("docker.io/busybox", "docker.io library/busybox latest -"),
            (
                "index.docker.io/busybox",
                "docker.io library/busybox latest -",
            ),
            ("index.docker.io/a/b:t", "docker.io a/b t -"),
            ("opensuse/leap:15.3", "docker.io opensuse/leap 15.3 -"),
            ("localhost/a", "localhost a latest -"),
            ("localhost:5000/a/b:t", "localhost:5000 a/b t -"),
            ("127.0.0.1:5000/a/b:v1", "127.0.0.1:5000 a/b v1 -"),
            ("[::1]:5000/a:t", "[::1]:5000 a t -"),
            ("[fe80::1]/a", "[fe80::1] a latest -"),
            ("Example.COM/a", "Example.COM a latest -"),
            // A one-component name with a `:` is a name and a tag, not a host.
            ("test.com:5000", "docker.io library/test.com 5000 -"),
            ("localhost:5000", "docker.io library/localhost 5000 -"),
            ("localhost", "docker.io library/localhost latest -"),
            (
                "lower:Upper_Tag-1.x",
                "docker.io library/lower Upper_Tag-1.x -",
            ),
            (
                "sub-dom1.foo.com/bar/baz/quux",
                "sub-dom1.foo.com bar/baz/quux latest -",
            ),
            (
                "b.gcr.io/x.example.com/app:x.example.com",
                "b.gcr.io x.example.com/app x.example.com -",
            ),
            (
                "xn--n3h.com/myimage:xn--n3h.com",
                "xn--n3h.com myimage xn--n3h.com -",
            ),
            ("a/b__c.d-e---f_g", "docker.io a/b__c.d-e---f_g latest -"),
            ("a/b@D", "docker.io a/b - D"),
            ("busybox@D", "docker.io library/busybox - D"),
            ("r.io/a/b:v2@D", "r.io a/b v2 D"),
            ("localhost:5000/a@D", "localhost:5000 a - D"),
        ];
        for (s, want) in cases {
            let s = s.replace("@D", &format!("@{dg}"));
            let n = Named::parse(&s).unwrap_or_else(|e| panic!("{s}: {e}"));
            let digest = n.digest().map(|x| if x == dg { "D" } else { x });
            let got = format!(
                "{} {} {} {}",
                n.registry(),
                n.repository(),
                n.tag().unwrap_or("-"),
                digest.unwrap_or("-")
            );
            assert_eq!(got, want, "{s}");
        }
    }

    /// Every refusal is InvalidArgument and names the reference and the reason.
    #[test]
    fn refused() {
        let long = format!("a/{}", "b".repeat(254));
        let long_tag = format!("a:{}", "t".repeat(129));
        let cases: Vec<(String, &str)> = vec![
            ("".into(), "empty image reference"),
            ("Busybox".into(), "must be lowercase"),
            ("example.com/Team/app".into(), "must be lowercase"),
            ("Team/app".into(), "must be lowercase"),
            ("Bad Name".into(), "invalid repository name component"),
            ("a//b".into(), "empty repository name component"),
            ("a/".into(), "empty repository name component"),
            ("/a".into(), "empty repository name component"),
            ("example.com/".into(), "empty repository name component"),
            ("a/-b".into(), "invalid repository name component"),
            ("a/b-".into(), "invalid repository name component"),
            ("a/b..c".into(), "invalid repository name component"),
            ("a/b___c".into(), "invalid repository name component"),
            ("a/b._c".into(), "invalid repository name component"),
            ("a:".into(), "invalid tag"),
            ("a:-t".into(), "invalid tag"),
            ("a:t/b".into(), "invalid registry host"),
            ("a:t:u".into(), "invalid tag"),
            (long_tag, "invalid tag"),
            ("a:tág".into(), "invalid tag"),
            (long, "longer than 255"),
            ("a_b.com/x".into(), "invalid registry host"),
            ("-a.com/x".into(), "invalid registry host"),
            ("a.com:/x".into(), "invalid registry host"),
            ("a.com:50x/x".into(), "invalid registry host"),
            ("a..com/x".into(), "invalid registry host"),
            ("[::1/x".into(), "invalid registry host"),
            ("[zz]:5000/x".into(), "invalid registry host"),
            ("a@".into(), "only sha256"),
            ("a@sha256:abc".into(), "not 64 lowercase hex"),
            (
                format!("a@sha256:{}", "A".repeat(64)),
                "not 64 lowercase hex",
            ),
            (format!("a@sha512:{}", "a".repeat(128)), "only sha256"),
            (format!("a@{}@{}", d('a'), d('b')), "not 64 lowercase hex"),
            (format!("@{}", d('a')), "empty repository name component"),
        ];
        for (s, why) in cases {
            let e = Named::parse(&s).expect_err(&s);
            assert_eq!(e.kind(), ErrorKind::InvalidArgument, "{s}: {e}");
            let m = e.to_string();
            assert!(m.contains(why), "{s}: {m}");
            if !s.is_empty() {
                assert!(m.contains(&format!("{s:?}")), "{s}: {m}");
            }
        }
    }

    #[test]
    fn displays_as_normalised() {
        let d = d('c');
        for (s, want) in [
            (
                "busybox".to_string(),
                "docker.io/library/busybox:latest".to_string(),
            ),
            (format!("a/b:t@{d}"), format!("docker.io/a/b:t@{d}")),
            (
                format!("index.docker.io/a/b@{d}"),
                format!("docker.io/a/b@{d}"),
            ),
        ] {
            assert_eq!(Named::parse(&s).unwrap().to_string(), want);
        }
    }
}
