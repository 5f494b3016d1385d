//! sha256 digests: parsing, hashing readers and writers.

use crate::error::{Error, Result};
use sha2::{Digest as _, Sha256};
use std::io::Read;

/// Checks `d` is `sha256:<64 lowercase hex>` and returns the hex part.
pub fn hex_of(d: &str) -> Result<&str> {
    let hex = d
        .strip_prefix("sha256:")
        .ok_or_else(|| Error::InvalidArgument(format!("digest {d:?}: only sha256 is supported")))?;
    if hex.len() != 64
        || !hex
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    {
        return Err(Error::InvalidArgument(format!(
            "digest {d:?}: not 64 lowercase hex digits"
        )));
    }
    Ok(hex)
}

pub fn is_hex(s: &str) -> bool {
    !s.is_empty()
        && s.bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

pub fn encode(bytes: &[u8]) -> String {
    const H: &[u8; 16] = b"0123456789abcdef";
    let mut s = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        s.push(H[(b >> 4) as usize] as char);
        s.push(H[(b & 15) as usize] as char);
    }
    s
}

pub fn of(data: &[u8]) -> String {
    format!("sha256:{}", encode(&Sha256::digest(data)))
}

/// Checks `data` has digest `want`.
pub fn verify(data: &[u8], want: &str, what: &str) -> Result<()> {
    let got = of(data);
    if got != want {
        return Err(Error::DataLoss(format!(
            "{what}: digest mismatch: expected {want}, got {got}"
        )));
    }
    Ok(())
}

/// A reader that hashes and counts what passes through it.
pub struct HashReader<R> {
    inner: R,
    hasher: Sha256,
    pub count: u64,
}

impl<R: Read> HashReader<R> {
    pub fn new(inner: R) -> Self {
        HashReader {
            inner,
            hasher: Sha256::new(),
            count: 0,
        }
    }

    /// Reads what is left (a tar's trailing padding) and returns the digest.
    pub fn finish(mut self) -> std::io::Result<(String, u64)> {
        std::io::copy(&mut self, &mut std::io::sink())?;
        Ok((
            format!("sha256:{}", encode(&self.hasher.finalize())),
            self.count,
        ))
    }
}

impl<R: Read> Read for HashReader<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.hasher.update(&buf[..n]);
        self.count += n as u64;
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn digests() {
        assert_eq!(
            of(b""),
            "sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
        );
        assert!(hex_of(&of(b"x")).is_ok());
        assert!(hex_of("sha512:00").is_err());
        assert!(hex_of("sha256:../../etc").is_err());
        let mut r = HashReader::new(&b"abc"[..]);
        let mut v = vec![];
        r.read_to_end(&mut v).unwrap();
        assert_eq!(r.finish().unwrap().0, of(b"abc"));
    }
}
