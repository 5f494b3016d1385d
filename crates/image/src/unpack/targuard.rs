//! A reader between a layer's decompressor and `tar::Archive` that refuses oversized
//! extension entries before the tar crate reads them.
//!
//! The tar crate reads a GNU long name or long link (`L`, `K`) and a pax header (`x`,
//! and `g` when asked) whole into memory, however large its header says it is: a
//! gzip layer of a few megabytes of zeros can declare a 600 MiB long name and make
//! the unpacker allocate all of it. Go's `archive/tar` (containerd's, Docker's)
//! refuses such entries over 1 MiB; so does this guard, which follows the archive's
//! framing block by block as the bytes go through (the header, the pax `size` that
//! overrides the next entry's, the extension blocks of an old GNU sparse file, the
//! data rounded up to 512) and fails the read that completes a header it refuses.
//! It never changes the bytes, so the layer's digest is the same with or without it.

use std::io::{self, Read};

const BLOCK: u64 = 512;

/// The largest GNU long name, long link or pax header accepted (Go's archive/tar
/// limit, so the same layers pass as with containerd).
pub const MAX_SPECIAL: u64 = 1 << 20;

/// The error a refused extension entry ends the stream with; `unpack` tells it from a
/// corrupt stream by this type.
#[derive(Debug)]
pub struct TooLarge {
    pub kind: &'static str,
    pub size: u64,
}

impl std::fmt::Display for TooLarge {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "a {} of {} bytes (at most {} accepted)",
            self.kind, self.size, MAX_SPECIAL
        )
    }
}

impl std::error::Error for TooLarge {}

enum State {
    /// Collecting a 512-byte header.
    Header,
    /// Collecting an old GNU sparse file's extension block; the data (`size`) follows.
    SparseExt { size: u64 },
    /// Passing `left` bytes of data and padding; a pax header's data (its first `keep`
    /// bytes, at most `MAX_SPECIAL`) is kept to read the `size` it sets for the next
    /// entry.
    Data {
        left: u64,
        keep: u64,
        pax: Option<Vec<u8>>,
    },
    /// Past the end-of-archive block: the tar crate reads no further headers.
    Done,
}

pub struct Guard<R> {
    inner: R,
    state: State,
    block: Vec<u8>,
    /// The `size` a pax header set for the next entry that is not an extension.
    pax_size: Option<u64>,
}

impl<R: Read> Guard<R> {
    pub fn new(inner: R) -> Self {
        Guard {
            inner,
            state: State::Header,
            block: Vec::with_capacity(BLOCK as usize),
            pax_size: None,
        }
    }

    pub fn into_inner(self) -> R {
        self.inner
    }

    fn feed(&mut self, mut buf: &[u8]) -> io::Result<()> {
        while !buf.is_empty() {
            match &mut self.state {
                State::Done => return Ok(()),
                State::Data { left, keep, pax } => {
                    let n = (*left).min(buf.len() as u64) as usize;
                    if let Some(p) = pax {
                        let k = (*keep).min(n as u64) as usize;
                        p.extend_from_slice(&buf[..k]);
                        *keep -= k as u64;
                    }
                    *left -= n as u64;
                    buf = &buf[n..];
                    if *left == 0 {
                        if let Some(p) = pax.take() {
                            self.pax_size = pax_size(&p);
                        }
                        self.state = State::Header;
                    }
                }
                State::Header | State::SparseExt { .. } => {
                    let n = (BLOCK as usize - self.block.len()).min(buf.len());
                    self.block.extend_from_slice(&buf[..n]);
                    buf = &buf[n..];
                    if self.block.len() == BLOCK as usize {
                        self.state = self.next_state()?;
                        self.block.clear();
                    }
                }
            }
        }
        Ok(())
    }

    /// What follows the full block in `self.block`.
    fn next_state(&mut self) -> io::Result<State> {
        if let State::SparseExt { size } = self.state {
            // `isextended` of an extension block is its byte 504.
            return Ok(if self.block[504] != 0 {
                State::SparseExt { size }
            } else {
                data(size, None)
            });
        }
        if self.block.iter().all(|b| *b == 0) {
            return Ok(State::Done);
        }
        let h = tar::Header::from_byte_slice(&self.block);
        let recognized = h.as_gnu().is_some() || h.as_ustar().is_some();
        let kind = h.entry_type();
        // A header the tar crate cannot read fails there; stop following.
        let Ok(mut size) = h.entry_size() else {
            return Ok(State::Done);
        };
        let special = match kind {
            tar::EntryType::GNULongName => Some("GNU long name"),
            tar::EntryType::GNULongLink => Some("GNU long link"),
            tar::EntryType::XHeader => Some("pax header"),
            tar::EntryType::XGlobalHeader => Some("pax global header"),
            _ => None,
        };
        if let Some(kind) = special {
            if size > MAX_SPECIAL {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    TooLarge { kind, size },
                ));
            }
            // An `x` the tar crate does not take as pax (no ustar or GNU magic) is a
            // plain entry to it, and sets nothing.
            let pax =
                (kind == "pax header" && recognized).then(|| Vec::with_capacity(size as usize));
            // The tar crate hands a `g`, and an `L`, `K` or `x` it does not recognize,
            // to the caller as an entry of its own: a pending pax `size` is spent on
            // it without changing its length.
            if kind == "pax global header" || !recognized {
                self.pax_size = None;
            }
            return Ok(data(size, pax));
        }
        if let Some(s) = self.pax_size.take() {
            size = s;
        }
        if kind == tar::EntryType::GNUSparse {
            if let Some(gnu) = h.as_gnu() {
                if gnu.is_extended() {
                    return Ok(State::SparseExt { size });
                }
            }
        }
        Ok(data(size, None))
    }
}

/// The `size` record of a pax header, read as the tar crate reads it: the first
/// `size` key, nothing if a record before it or its value cannot be read.
fn pax_size(pax: &[u8]) -> Option<u64> {
    for ext in tar::PaxExtensions::new(pax) {
        let ext = ext.ok()?;
        if ext.key() != Ok("size") {
            continue;
        }
        return ext.value().ok()?.parse().ok();
    }
    None
}

/// The data of an entry of `size` bytes with its padding to the next block.
fn data(size: u64, pax: Option<Vec<u8>>) -> State {
    let left = size.saturating_add(BLOCK - 1) & !(BLOCK - 1);
    if left == 0 {
        // No data (an empty pax header sets nothing): the next header follows.
        return State::Header;
    }
    State::Data {
        left,
        keep: size,
        pax,
    }
}

impl<R: Read> Read for Guard<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.feed(&buf[..n])?;
        Ok(n)
    }
}
