//! Checks on what the kubelet (or anyone else) sends, before anything is created.

use crate::cri::error::{Error, Result};

/// A Kubernetes qualified name (label and annotation keys): an optional DNS-subdomain
/// prefix and `/`, then 1 to 63 characters of `[A-Za-z0-9_.-]` starting and ending
/// with an alphanumeric.
pub fn qualified_name(key: &str) -> std::result::Result<(), String> {
    let (prefix, name) = match key.rsplit_once('/') {
        Some((p, n)) => (Some(p), n),
        None => (None, key),
    };
    if let Some(p) = prefix {
        let ok = !p.is_empty()
            && p.len() <= 253
            && p.split('.').all(|l| {
                !l.is_empty()
                    && l.len() <= 63
                    && l.bytes()
                        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
                    && !l.starts_with('-')
                    && !l.ends_with('-')
            });
        if !ok {
            return Err(format!("prefix {p:?} must be a lowercase DNS subdomain"));
        }
    }
    let b = name.as_bytes();
    if b.is_empty() || b.len() > 63 {
        return Err("name part must be 1 to 63 characters".into());
    }
    if !b[0].is_ascii_alphanumeric() || !b[b.len() - 1].is_ascii_alphanumeric() {
        return Err("name part must start and end with a letter or digit".into());
    }
    if !b
        .iter()
        .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'_' | b'.'))
    {
        return Err("name part may hold only letters, digits, '-', '_' and '.'".into());
    }
    Ok(())
}

pub fn labels<'a>(what: &str, keys: impl Iterator<Item = &'a String>) -> Result<()> {
    for k in keys {
        qualified_name(k)
            .map_err(|e| Error::InvalidArgument(format!("invalid {what} key {k:?}: {e}")))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn qualified_names() {
        for ok in [
            "app",
            "app.kubernetes.io/name",
            "io.kubernetes.pod.namespace",
            "a_b-c.d",
            "x/y",
        ] {
            assert!(qualified_name(ok).is_ok(), "{ok}");
        }
        for bad in [
            "",
            "-a",
            "a-",
            "a b",
            "/a",
            "A_B/c",
            "a/",
            &"x".repeat(64),
            "a//b",
            "a$b",
        ] {
            assert!(qualified_name(bad).is_err(), "{bad}");
        }
    }
}
