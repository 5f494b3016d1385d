//! Image references: `busybox` is `docker.io/library/busybox:latest`, as everywhere.

use crate::error::{Error, Result};
use oci_client::Reference;

/// A parsed, normalised reference.
#[derive(Debug, Clone)]
pub struct Named {
    pub inner: Reference,
}

impl Named {
    pub fn parse(s: &str) -> Result<Named> {
        if s.is_empty() {
            return Err(Error::InvalidArgument("empty image reference".into()));
        }
        let inner: Reference = s
            .parse()
            .map_err(|e| Error::InvalidArgument(format!("image reference {s:?}: {e}")))?;
        if let Some(d) = inner.digest() {
            crate::digest::hex_of(d).map_err(|e| e.context(format!("image reference {s:?}")))?;
        }
        Ok(Named { inner })
    }

    /// `registry/repository`.
    pub fn name(&self) -> String {
        format!("{}/{}", self.inner.registry(), self.inner.repository())
    }

    /// `registry/repository:tag`, when the reference has a tag (or no digest: `latest`).
    pub fn tagged(&self) -> Option<String> {
        match (self.inner.tag(), self.inner.digest()) {
            (Some(t), _) => Some(format!("{}:{t}", self.name())),
            (None, None) => Some(format!("{}:latest", self.name())),
            (None, Some(_)) => None,
        }
    }

    pub fn digest(&self) -> Option<&str> {
        self.inner.digest()
    }

    pub fn registry(&self) -> &str {
        self.inner.registry()
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn normalises() {
        let n = Named::parse("busybox").unwrap();
        assert_eq!(n.tagged().unwrap(), "docker.io/library/busybox:latest");
        let n = Named::parse("127.0.0.1:5000/a/b:v1").unwrap();
        assert_eq!(n.name(), "127.0.0.1:5000/a/b");
        assert_eq!(n.tagged().unwrap(), "127.0.0.1:5000/a/b:v1");
        let d = format!("sha256:{}", "a".repeat(64));
        let n = Named::parse(&format!("registry.k8s.io/pause@{d}")).unwrap();
        assert_eq!(n.tagged(), None);
        assert_eq!(n.to_string(), format!("registry.k8s.io/pause@{d}"));
        assert!(Named::parse("Bad Name").is_err());
        assert!(Named::parse("").is_err());
    }
}
