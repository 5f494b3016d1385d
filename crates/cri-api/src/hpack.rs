//! Just enough HPACK (RFC 7541) to read a client's header blocks and write them again:
//! a decoder that keeps the client's dynamic table in step, and an encoder that writes
//! every field as a literal that never touches the dynamic table, so what it writes can
//! be handed to any decoder at any point of a connection.
//!
//! Only the authority fix in [`crate::authority`] uses it; it is not a general codec.

use std::collections::VecDeque;
use std::sync::OnceLock;

/// Why a header block could not be read. The connection is then closed, as the HTTP/2
/// server would close it with COMPRESSION_ERROR.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum Error {
    #[error("hpack: header block ends inside a field")]
    Truncated,
    #[error("hpack: integer too large")]
    IntegerOverflow,
    #[error("hpack: index {0} is in neither the static nor the dynamic table")]
    BadIndex(usize),
    #[error("hpack: invalid huffman string")]
    Huffman,
    #[error("hpack: table size update to {0} above the limit {1}")]
    TableSize(usize, usize),
    #[error("hpack: table size update after the first field of a block")]
    LateSizeUpdate,
}

/// One decoded field. `never_indexed` keeps the client's "never index" wish (RFC 7541
/// 6.2.3) so a re-encoding does not lose it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Field {
    pub name: Vec<u8>,
    pub value: Vec<u8>,
    pub never_indexed: bool,
}

/// The decoder side of one connection: the dynamic table the client's encoder builds.
pub struct Decoder {
    table: VecDeque<(Vec<u8>, Vec<u8>)>,
    size: usize,
    max: usize,
    /// What the server allows (SETTINGS_HEADER_TABLE_SIZE it advertised).
    limit: usize,
}

impl Decoder {
    /// `limit` is the server's SETTINGS_HEADER_TABLE_SIZE: 4096 unless it said otherwise.
    pub fn new(limit: usize) -> Decoder {
        Decoder {
            table: VecDeque::new(),
            size: 0,
            max: limit,
            limit,
        }
    }

    /// Decodes one complete header block.
    pub fn decode(&mut self, mut b: &[u8]) -> Result<Vec<Field>, Error> {
        let mut out = Vec::new();
        while let Some(&first) = b.first() {
            if first & 0x80 != 0 {
                // Indexed field.
                let i = integer(&mut b, 7)?;
                let (n, v) = self.get(i)?;
                out.push(Field {
                    name: n.to_vec(),
                    value: v.to_vec(),
                    never_indexed: false,
                });
            } else if first & 0x40 != 0 {
                // Literal with incremental indexing.
                let (name, value) = self.literal(&mut b, 6)?;
                self.insert(name.clone(), value.clone());
                out.push(Field {
                    name,
                    value,
                    never_indexed: false,
                });
            } else if first & 0x20 != 0 {
                if !out.is_empty() {
                    return Err(Error::LateSizeUpdate);
                }
                let n = integer(&mut b, 5)?;
                if n > self.limit {
                    return Err(Error::TableSize(n, self.limit));
                }
                self.max = n;
                self.evict();
            } else {
                // Literal without indexing (0000) or never indexed (0001).
                let never_indexed = first & 0x10 != 0;
                let (name, value) = self.literal(&mut b, 4)?;
                out.push(Field {
                    name,
                    value,
                    never_indexed,
                });
            }
        }
        Ok(out)
    }

    fn literal(&self, b: &mut &[u8], prefix: u8) -> Result<(Vec<u8>, Vec<u8>), Error> {
        let i = integer(b, prefix)?;
        let name = if i == 0 {
            string(b)?
        } else {
            self.get(i)?.0.to_vec()
        };
        Ok((name, string(b)?))
    }

    fn get(&self, i: usize) -> Result<(&[u8], &[u8]), Error> {
        match i {
            0 => Err(Error::BadIndex(0)),
            1..=61 => {
                let (n, v) = STATIC[i - 1];
                Ok((n.as_bytes(), v.as_bytes()))
            }
            _ => self
                .table
                .get(i - 62)
                .map(|(n, v)| (n.as_slice(), v.as_slice()))
                .ok_or(Error::BadIndex(i)),
        }
    }

    fn insert(&mut self, name: Vec<u8>, value: Vec<u8>) {
        let size = entry_size(&name, &value);
        self.table.push_front((name, value));
        self.size += size;
        // An entry larger than the table empties it and is not kept (RFC 7541 4.4).
        self.evict();
    }

    fn evict(&mut self) {
        while self.size > self.max {
            match self.table.pop_back() {
                Some((n, v)) => self.size -= entry_size(&n, &v),
                None => break,
            }
        }
    }
}

fn entry_size(n: &[u8], v: &[u8]) -> usize {
    n.len() + v.len() + 32
}

/// Writes `fields` as literals without indexing (never indexed where the client asked),
/// names by static index where the static table has them, strings as they are.
pub fn encode(fields: &[Field], out: &mut Vec<u8>) {
    for f in fields {
        let flag = if f.never_indexed { 0x10 } else { 0x00 };
        match STATIC
            .iter()
            .position(|(n, _)| n.as_bytes() == f.name.as_slice())
        {
            Some(i) => put_integer(out, flag, 4, i + 1),
            None => {
                out.push(flag);
                put_string(out, &f.name);
            }
        }
        put_string(out, &f.value);
    }
}

fn put_string(out: &mut Vec<u8>, s: &[u8]) {
    put_integer(out, 0x00, 7, s.len());
    out.extend_from_slice(s);
}

/// RFC 7541 5.1: an integer with an N-bit prefix, the first byte's other bits `flags`.
fn put_integer(out: &mut Vec<u8>, flags: u8, prefix: u8, mut n: usize) {
    let max = (1usize << prefix) - 1;
    if n < max {
        out.push(flags | n as u8);
        return;
    }
    out.push(flags | max as u8);
    n -= max;
    while n >= 128 {
        out.push((n % 128) as u8 | 0x80);
        n /= 128;
    }
    out.push(n as u8);
}

fn integer(b: &mut &[u8], prefix: u8) -> Result<usize, Error> {
    let max = (1usize << prefix) - 1;
    let (&first, rest) = b.split_first().ok_or(Error::Truncated)?;
    *b = rest;
    let mut n = (first as usize) & max;
    if n < max {
        return Ok(n);
    }
    let mut shift = 0u32;
    loop {
        let (&byte, rest) = b.split_first().ok_or(Error::Truncated)?;
        *b = rest;
        // Nothing sane needs more than 4 continuation bytes (2^28).
        if shift > 21 {
            return Err(Error::IntegerOverflow);
        }
        n += ((byte & 0x7f) as usize) << shift;
        shift += 7;
        if byte & 0x80 == 0 {
            return Ok(n);
        }
    }
}

fn string(b: &mut &[u8]) -> Result<Vec<u8>, Error> {
    let huffman = b.first().ok_or(Error::Truncated)? & 0x80 != 0;
    let len = integer(b, 7)?;
    if b.len() < len {
        return Err(Error::Truncated);
    }
    let (s, rest) = b.split_at(len);
    *b = rest;
    if huffman {
        huffman_decode(s)
    } else {
        Ok(s.to_vec())
    }
}

/// The code is canonical (codes of one length are consecutive, shorter codes sort
/// first), so a symbol is found from the first code and the count of each length.
struct Canonical {
    /// Per length 0..=30: (first code, index into `symbols` of its first symbol, count).
    lengths: [(u32, usize, usize); 31],
    symbols: Vec<u16>,
}

fn canonical() -> &'static Canonical {
    static C: OnceLock<Canonical> = OnceLock::new();
    C.get_or_init(|| {
        let mut symbols: Vec<u16> = (0..257).collect();
        symbols.sort_by_key(|&s| (HUFFMAN[s as usize].1, s));
        let mut lengths = [(0u32, 0usize, 0usize); 31];
        for (i, &s) in symbols.iter().enumerate() {
            let (code, len) = HUFFMAN[s as usize];
            let l = &mut lengths[len as usize];
            if l.2 == 0 {
                *l = (code, i, 0);
            }
            l.2 += 1;
        }
        Canonical { lengths, symbols }
    })
}

fn huffman_decode(s: &[u8]) -> Result<Vec<u8>, Error> {
    let c = canonical();
    let mut out = Vec::with_capacity(s.len() * 8 / 5);
    let (mut code, mut len) = (0u32, 0usize);
    for &byte in s {
        for bit in (0..8).rev() {
            code = (code << 1) | ((byte >> bit) & 1) as u32;
            len += 1;
            let (first, at, count) = c.lengths[len];
            if count > 0 && code >= first && ((code - first) as usize) < count {
                let sym = c.symbols[at + (code - first) as usize];
                if sym == 256 {
                    return Err(Error::Huffman);
                }
                out.push(sym as u8);
                code = 0;
                len = 0;
            } else if len >= 30 {
                return Err(Error::Huffman);
            }
        }
    }
    // Padding: at most 7 bits, all ones (the EOS code's prefix).
    if len > 7 || code != (1 << len) - 1 {
        return Err(Error::Huffman);
    }
    Ok(out)
}

/// RFC 7541 Appendix B: the Huffman code of each symbol (0..=255, 256 = EOS) as
/// (code, length in bits).
const HUFFMAN: [(u32, u8); 257] = [
    (0x1ff8, 13),
    (0x7fffd8, 23),
    (0xfffffe2, 28),
    (0xfffffe3, 28),
    (0xfffffe4, 28),
    (0xfffffe5, 28),
    (0xfffffe6, 28),
    (0xfffffe7, 28),
    (0xfffffe8, 28),
    (0xffffea, 24),
    (0x3ffffffc, 30),
    (0xfffffe9, 28),
    (0xfffffea, 28),
    (0x3ffffffd, 30),
    (0xfffffeb, 28),
    (0xfffffec, 28),
    (0xfffffed, 28),
    (0xfffffee, 28),
    (0xfffffef, 28),
    (0xffffff0, 28),
    (0xffffff1, 28),
    (0xffffff2, 28),
    (0x3ffffffe, 30),
    (0xffffff3, 28),
    (0xffffff4, 28),
    (0xffffff5, 28),
    (0xffffff6, 28),
    (0xffffff7, 28),
    (0xffffff8, 28),
    (0xffffff9, 28),
    (0xffffffa, 28),
    (0xffffffb, 28),
    (0x14, 6),
    (0x3f8, 10),
    (0x3f9, 10),
    (0xffa, 12),
    (0x1ff9, 13),
    (0x15, 6),
    (0xf8, 8),
    (0x7fa, 11),
    (0x3fa, 10),
    (0x3fb, 10),
    (0xf9, 8),
    (0x7fb, 11),
    (0xfa, 8),
    (0x16, 6),
    (0x17, 6),
    (0x18, 6),
    (0x0, 5),
    (0x1, 5),
    (0x2, 5),
    (0x19, 6),
    (0x1a, 6),
    (0x1b, 6),
    (0x1c, 6),
    (0x1d, 6),
    (0x1e, 6),
    (0x1f, 6),
    (0x5c, 7),
    (0xfb, 8),
    (0x7ffc, 15),
    (0x20, 6),
    (0xffb, 12),
    (0x3fc, 10),
    (0x1ffa, 13),
    (0x21, 6),
    (0x5d, 7),
    (0x5e, 7),
    (0x5f, 7),
    (0x60, 7),
    (0x61, 7),
    (0x62, 7),
    (0x63, 7),
    (0x64, 7),
    (0x65, 7),
    (0x66, 7),
    (0x67, 7),
    (0x68, 7),
    (0x69, 7),
    (0x6a, 7),
    (0x6b, 7),
    (0x6c, 7),
    (0x6d, 7),
    (0x6e, 7),
    (0x6f, 7),
    (0x70, 7),
    (0x71, 7),
    (0x72, 7),
    (0xfc, 8),
    (0x73, 7),
    (0xfd, 8),
    (0x1ffb, 13),
    (0x7fff0, 19),
    (0x1ffc, 13),
    (0x3ffc, 14),
    (0x22, 6),
    (0x7ffd, 15),
    (0x3, 5),
    (0x23, 6),
    (0x4, 5),
    (0x24, 6),
    (0x5, 5),
    (0x25, 6),
    (0x26, 6),
    (0x27, 6),
    (0x6, 5),
    (0x74, 7),
    (0x75, 7),
    (0x28, 6),
    (0x29, 6),
    (0x2a, 6),
    (0x7, 5),
    (0x2b, 6),
    (0x76, 7),
    (0x2c, 6),
    (0x8, 5),
    (0x9, 5),
    (0x2d, 6),
    (0x77, 7),
    (0x78, 7),
    (0x79, 7),
    (0x7a, 7),
    (0x7b, 7),
    (0x7ffe, 15),
    (0x7fc, 11),
    (0x3ffd, 14),
    (0x1ffd, 13),
    (0xffffffc, 28),
    (0xfffe6, 20),
    (0x3fffd2, 22),
    (0xfffe7, 20),
    (0xfffe8, 20),
    (0x3fffd3, 22),
    (0x3fffd4, 22),
    (0x3fffd5, 22),
    (0x7fffd9, 23),
    (0x3fffd6, 22),
    (0x7fffda, 23),
    (0x7fffdb, 23),
    (0x7fffdc, 23),
    (0x7fffdd, 23),
    (0x7fffde, 23),
    (0xffffeb, 24),
    (0x7fffdf, 23),
    (0xffffec, 24),
    (0xffffed, 24),
    (0x3fffd7, 22),
    (0x7fffe0, 23),
    (0xffffee, 24),
    (0x7fffe1, 23),
    (0x7fffe2, 23),
    (0x7fffe3, 23),
    (0x7fffe4, 23),
    (0x1fffdc, 21),
    (0x3fffd8, 22),
    (0x7fffe5, 23),
    (0x3fffd9, 22),
    (0x7fffe6, 23),
    (0x7fffe7, 23),
    (0xffffef, 24),
    (0x3fffda, 22),
    (0x1fffdd, 21),
    (0xfffe9, 20),
    (0x3fffdb, 22),
    (0x3fffdc, 22),
    (0x7fffe8, 23),
    (0x7fffe9, 23),
    (0x1fffde, 21),
    (0x7fffea, 23),
    (0x3fffdd, 22),
    (0x3fffde, 22),
    (0xfffff0, 24),
    (0x1fffdf, 21),
    (0x3fffdf, 22),
    (0x7fffeb, 23),
    (0x7fffec, 23),
    (0x1fffe0, 21),
    (0x1fffe1, 21),
    (0x3fffe0, 22),
    (0x1fffe2, 21),
    (0x7fffed, 23),
    (0x3fffe1, 22),
    (0x7fffee, 23),
    (0x7fffef, 23),
    (0xfffea, 20),
    (0x3fffe2, 22),
    (0x3fffe3, 22),
    (0x3fffe4, 22),
    (0x7ffff0, 23),
    (0x3fffe5, 22),
    (0x3fffe6, 22),
    (0x7ffff1, 23),
    (0x3ffffe0, 26),
    (0x3ffffe1, 26),
    (0xfffeb, 20),
    (0x7fff1, 19),
    (0x3fffe7, 22),
    (0x7ffff2, 23),
    (0x3fffe8, 22),
    (0x1ffffec, 25),
    (0x3ffffe2, 26),
    (0x3ffffe3, 26),
    (0x3ffffe4, 26),
    (0x7ffffde, 27),
    (0x7ffffdf, 27),
    (0x3ffffe5, 26),
    (0xfffff1, 24),
    (0x1ffffed, 25),
    (0x7fff2, 19),
    (0x1fffe3, 21),
    (0x3ffffe6, 26),
    (0x7ffffe0, 27),
    (0x7ffffe1, 27),
    (0x3ffffe7, 26),
    (0x7ffffe2, 27),
    (0xfffff2, 24),
    (0x1fffe4, 21),
    (0x1fffe5, 21),
    (0x3ffffe8, 26),
    (0x3ffffe9, 26),
    (0xffffffd, 28),
    (0x7ffffe3, 27),
    (0x7ffffe4, 27),
    (0x7ffffe5, 27),
    (0xfffec, 20),
    (0xfffff3, 24),
    (0xfffed, 20),
    (0x1fffe6, 21),
    (0x3fffe9, 22),
    (0x1fffe7, 21),
    (0x1fffe8, 21),
    (0x7ffff3, 23),
    (0x3fffea, 22),
    (0x3fffeb, 22),
    (0x1ffffee, 25),
    (0x1ffffef, 25),
    (0xfffff4, 24),
    (0xfffff5, 24),
    (0x3ffffea, 26),
    (0x7ffff4, 23),
    (0x3ffffeb, 26),
    (0x7ffffe6, 27),
    (0x3ffffec, 26),
    (0x3ffffed, 26),
    (0x7ffffe7, 27),
    (0x7ffffe8, 27),
    (0x7ffffe9, 27),
    (0x7ffffea, 27),
    (0x7ffffeb, 27),
    (0xffffffe, 28),
    (0x7ffffec, 27),
    (0x7ffffed, 27),
    (0x7ffffee, 27),
    (0x7ffffef, 27),
    (0x7fffff0, 27),
    (0x3ffffee, 26),
    (0x3fffffff, 30),
];

/// RFC 7541 Appendix A: the static table, index 1 first.
const STATIC: [(&str, &str); 61] = [
    (":authority", ""),
    (":method", "GET"),
    (":method", "POST"),
    (":path", "/"),
    (":path", "/index.html"),
    (":scheme", "http"),
    (":scheme", "https"),
    (":status", "200"),
    (":status", "204"),
    (":status", "206"),
    (":status", "304"),
    (":status", "400"),
    (":status", "404"),
    (":status", "500"),
    ("accept-charset", ""),
    ("accept-encoding", "gzip, deflate"),
    ("accept-language", ""),
    ("accept-ranges", ""),
    ("accept", ""),
    ("access-control-allow-origin", ""),
    ("age", ""),
    ("allow", ""),
    ("authorization", ""),
    ("cache-control", ""),
    ("content-disposition", ""),
    ("content-encoding", ""),
    ("content-language", ""),
    ("content-length", ""),
    ("content-location", ""),
    ("content-range", ""),
    ("content-type", ""),
    ("cookie", ""),
    ("date", ""),
    ("etag", ""),
    ("expect", ""),
    ("expires", ""),
    ("from", ""),
    ("host", ""),
    ("if-match", ""),
    ("if-modified-since", ""),
    ("if-none-match", ""),
    ("if-range", ""),
    ("if-unmodified-since", ""),
    ("last-modified", ""),
    ("link", ""),
    ("location", ""),
    ("max-forwards", ""),
    ("proxy-authenticate", ""),
    ("proxy-authorization", ""),
    ("range", ""),
    ("referer", ""),
    ("refresh", ""),
    ("retry-after", ""),
    ("server", ""),
    ("set-cookie", ""),
    ("strict-transport-security", ""),
    ("transfer-encoding", ""),
    ("user-agent", ""),
    ("vary", ""),
    ("via", ""),
    ("www-authenticate", ""),
];

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// Bytes from hex digits, blanks and line breaks ignored (as the RFC prints them).
    pub(crate) fn hex(s: &str) -> Vec<u8> {
        let s: Vec<u8> = s.bytes().filter(|b| !b.is_ascii_whitespace()).collect();
        s.chunks(2)
            .map(|d| u8::from_str_radix(std::str::from_utf8(d).unwrap(), 16).unwrap())
            .collect()
    }

    fn pairs(fields: &[Field]) -> Vec<(String, String)> {
        fields
            .iter()
            .map(|f| {
                (
                    String::from_utf8(f.name.clone()).unwrap(),
                    String::from_utf8(f.value.clone()).unwrap(),
                )
            })
            .collect()
    }

    /// Three blocks as a Huffman-coding, indexing encoder writes a gRPC client's
    /// requests: the second refers to entries the first added, the third has a field
    /// marked never-indexed.
    #[test]
    fn decodes_a_connection_of_indexed_huffman_blocks() {
        let mut d = Decoder::new(4096);
        let b1 = d.decode(&hex("8386449962cb6a49a92afdc2bedb6a49a92ee2d9dcc42b1c4b620c7abf418f62cb6a60965a84b04b2d425741c9d75f8b1d75d0620d263d4c4d65647a8b9acac8b4c7602bb6f2ecff4082497f864d833505b11f40899acac8b24d494f6a7f860befbef34cdb")).unwrap();
        let want = [
            (":method", "POST"),
            (":scheme", "http"),
            (":path", "/runtime.v1.RuntimeService/Version"),
            (":authority", "/run/crust/crust.sock"),
            ("content-type", "application/grpc"),
            ("user-agent", "grpc-go/1.58.3"),
            ("te", "trailers"),
            ("grpc-timeout", "1999843u"),
        ];
        let want: Vec<(String, String)> = want
            .iter()
            .map(|(n, v)| (n.to_string(), v.to_string()))
            .collect();
        assert_eq!(pairs(&b1), want);
        let b2 = d
            .decode(&hex(
                "8386449862cb6a49a92afdc2bedb6a49a92ee2d9dcc42b1b9234da8fc3c2c1c0bf",
            ))
            .unwrap();
        let mut want2 = want.clone();
        want2[2].1 = "/runtime.v1.RuntimeService/Status".into();
        assert_eq!(pairs(&b2), want2);
        let b3 = d.decode(&hex("1086f2b20a4b0a9f854324b194ffc3")).unwrap();
        assert_eq!(
            pairs(&b3),
            vec![
                ("x-secret".into(), "s3cr3t".into()),
                (":authority".into(), "/run/crust/crust.sock".into())
            ]
        );
        assert!(b3[0].never_indexed && !b3[1].never_indexed);
    }

    /// The dynamic table as RFC 7541 Appendix C prints it after a block: (size, name,
    /// value) from index 1 (62) on, then the table's size.
    type Table<'a> = (&'a [(usize, &'a str, &'a str)], usize);

    fn assert_table(d: &Decoder, (entries, size): Table, what: &str) {
        let got: Vec<(usize, String, String)> = d
            .table
            .iter()
            .map(|(n, v)| {
                (
                    entry_size(n, v),
                    String::from_utf8(n.clone()).unwrap(),
                    String::from_utf8(v.clone()).unwrap(),
                )
            })
            .collect();
        let want: Vec<(usize, String, String)> = entries
            .iter()
            .map(|&(s, n, v)| (s, n.to_string(), v.to_string()))
            .collect();
        assert_eq!(got, want, "{what}: dynamic table");
        assert_eq!(d.size, size, "{what}: table size");
    }

    fn assert_fields(got: &[Field], want: &[(&str, &str)], what: &str) {
        let want: Vec<(String, String)> = want
            .iter()
            .map(|(n, v)| (n.to_string(), v.to_string()))
            .collect();
        assert_eq!(pairs(got), want, "{what}: header list");
    }

    /// RFC 7541 C.1: integers with 5- and 8-bit prefixes, written and read. The bits
    /// before a prefix are another field's: set on reading, they must not count.
    #[test]
    fn rfc7541_c1_integers() {
        for (n, prefix, bytes) in [
            (10, 5, &[0b000_01010][..]),
            (1337, 5, &[0b000_11111, 0b1001_1010, 0b0000_1010][..]),
            (42, 8, &[0b0010_1010][..]),
        ] {
            let mut out = Vec::new();
            put_integer(&mut out, 0, prefix, n);
            assert_eq!(out, bytes, "C.1: {n} on {prefix} bits");
            let mut tagged = bytes.to_vec();
            if prefix < 8 {
                tagged[0] |= 0xff << prefix;
            }
            let mut b = &tagged[..];
            assert_eq!(integer(&mut b, prefix), Ok(n), "C.1: {n} on {prefix} bits");
            assert!(b.is_empty());
        }
    }

    /// RFC 7541 C.2: the four representations one at a time, each on a fresh table.
    /// Our encoder writes only literals without indexing, so C.2.2 (not indexed) and
    /// C.2.3 (never indexed) are also written, to the RFC's very bytes.
    #[test]
    fn rfc7541_c2_field_representations() {
        // C.2.1 Literal Header Field with Indexing.
        let mut d = Decoder::new(4096);
        let b = hex("400a 6375 7374 6f6d 2d6b 6579 0d63 7573
                     746f 6d2d 6865 6164 6572");
        let f = d.decode(&b).unwrap();
        assert_fields(&f, &[("custom-key", "custom-header")], "C.2.1");
        assert!(!f[0].never_indexed);
        assert_table(&d, (&[(55, "custom-key", "custom-header")], 55), "C.2.1");

        // C.2.2 Literal Header Field without Indexing.
        let mut d = Decoder::new(4096);
        let b = hex("040c 2f73 616d 706c 652f 7061 7468");
        let f = d.decode(&b).unwrap();
        assert_fields(&f, &[(":path", "/sample/path")], "C.2.2");
        assert!(!f[0].never_indexed);
        assert_table(&d, (&[], 0), "C.2.2");
        let mut out = Vec::new();
        encode(&f, &mut out);
        assert_eq!(out, b, "C.2.2 written");

        // C.2.3 Literal Header Field Never Indexed.
        let mut d = Decoder::new(4096);
        let b = hex("1008 7061 7373 776f 7264 0673 6563 7265
                     74");
        let f = d.decode(&b).unwrap();
        assert_fields(&f, &[("password", "secret")], "C.2.3");
        assert!(f[0].never_indexed);
        assert_table(&d, (&[], 0), "C.2.3");
        let mut out = Vec::new();
        encode(&f, &mut out);
        assert_eq!(out, b, "C.2.3 written");

        // C.2.4 Indexed Header Field.
        let mut d = Decoder::new(4096);
        let f = d.decode(&hex("82")).unwrap();
        assert_fields(&f, &[(":method", "GET")], "C.2.4");
        assert_table(&d, (&[], 0), "C.2.4");
    }

    /// RFC 7541 C.3 and C.4: three requests on one connection, their literals plain
    /// (C.3) and Huffman-coded (C.4); the same header lists and dynamic tables.
    #[test]
    fn rfc7541_c3_c4_requests() {
        let lists: [&[(&str, &str)]; 3] = [
            &[
                (":method", "GET"),
                (":scheme", "http"),
                (":path", "/"),
                (":authority", "www.example.com"),
            ],
            &[
                (":method", "GET"),
                (":scheme", "http"),
                (":path", "/"),
                (":authority", "www.example.com"),
                ("cache-control", "no-cache"),
            ],
            &[
                (":method", "GET"),
                (":scheme", "https"),
                (":path", "/index.html"),
                (":authority", "www.example.com"),
                ("custom-key", "custom-value"),
            ],
        ];
        let tables: [Table; 3] = [
            (&[(57, ":authority", "www.example.com")], 57),
            (
                &[
                    (53, "cache-control", "no-cache"),
                    (57, ":authority", "www.example.com"),
                ],
                110,
            ),
            (
                &[
                    (54, "custom-key", "custom-value"),
                    (53, "cache-control", "no-cache"),
                    (57, ":authority", "www.example.com"),
                ],
                164,
            ),
        ];
        let c3 = [
            "8286 8441 0f77 7777 2e65 7861 6d70 6c65
             2e63 6f6d",
            "8286 84be 5808 6e6f 2d63 6163 6865",
            "8287 85bf 400a 6375 7374 6f6d 2d6b 6579
             0c63 7573 746f 6d2d 7661 6c75 65",
        ];
        let c4 = [
            "8286 8441 8cf1 e3c2 e5f2 3a6b a0ab 90f4
             ff",
            "8286 84be 5886 a8eb 1064 9cbf",
            "8287 85bf 4088 25a8 49e9 5ba9 7d7f 8925
             a849 e95b b8e8 b4bf",
        ];
        for (section, blocks) in [("C.3", c3), ("C.4", c4)] {
            let mut d = Decoder::new(4096);
            for (i, b) in blocks.iter().enumerate() {
                let what = format!("{section}.{}", i + 1);
                let f = d.decode(&hex(b)).unwrap();
                assert_fields(&f, lists[i], &what);
                assert_table(&d, tables[i], &what);
            }
        }
    }

    /// RFC 7541 C.5 and C.6: three responses with SETTINGS_HEADER_TABLE_SIZE 256, so
    /// entries are evicted; literals plain (C.5) and Huffman-coded (C.6), the same
    /// header lists and tables (eviction counts the decoded lengths).
    #[test]
    fn rfc7541_c5_c6_responses_with_eviction() {
        let cookie = "foo=ASDJKHQKBZXOQWEOPIUAXQWEOIU; max-age=3600; version=1";
        let lists: [&[(&str, &str)]; 3] = [
            &[
                (":status", "302"),
                ("cache-control", "private"),
                ("date", "Mon, 21 Oct 2013 20:13:21 GMT"),
                ("location", "https://www.example.com"),
            ],
            &[
                (":status", "307"),
                ("cache-control", "private"),
                ("date", "Mon, 21 Oct 2013 20:13:21 GMT"),
                ("location", "https://www.example.com"),
            ],
            &[
                (":status", "200"),
                ("cache-control", "private"),
                ("date", "Mon, 21 Oct 2013 20:13:22 GMT"),
                ("location", "https://www.example.com"),
                ("content-encoding", "gzip"),
                ("set-cookie", cookie),
            ],
        ];
        let tables: [Table; 3] = [
            (
                &[
                    (63, "location", "https://www.example.com"),
                    (65, "date", "Mon, 21 Oct 2013 20:13:21 GMT"),
                    (52, "cache-control", "private"),
                    (42, ":status", "302"),
                ],
                222,
            ),
            // ":status: 302" evicted to make room for ":status: 307".
            (
                &[
                    (42, ":status", "307"),
                    (63, "location", "https://www.example.com"),
                    (65, "date", "Mon, 21 Oct 2013 20:13:21 GMT"),
                    (52, "cache-control", "private"),
                ],
                222,
            ),
            // Four evictions while the third list is decoded.
            (
                &[
                    (98, "set-cookie", cookie),
                    (52, "content-encoding", "gzip"),
                    (65, "date", "Mon, 21 Oct 2013 20:13:22 GMT"),
                ],
                215,
            ),
        ];
        let c5 = [
            "4803 3330 3258 0770 7269 7661 7465 611d
             4d6f 6e2c 2032 3120 4f63 7420 3230 3133
             2032 303a 3133 3a32 3120 474d 546e 1768
             7474 7073 3a2f 2f77 7777 2e65 7861 6d70
             6c65 2e63 6f6d",
            "4803 3330 37c1 c0bf",
            "88c1 611d 4d6f 6e2c 2032 3120 4f63 7420
             3230 3133 2032 303a 3133 3a32 3220 474d
             54c0 5a04 677a 6970 7738 666f 6f3d 4153
             444a 4b48 514b 425a 584f 5157 454f 5049
             5541 5851 5745 4f49 553b 206d 6178 2d61
             6765 3d33 3630 303b 2076 6572 7369 6f6e
             3d31",
        ];
        let c6 = [
            "4882 6402 5885 aec3 771a 4b61 96d0 7abe
             9410 54d4 44a8 2005 9504 0b81 66e0 82a6
             2d1b ff6e 919d 29ad 1718 63c7 8f0b 97c8
             e9ae 82ae 43d3",
            "4883 640e ffc1 c0bf",
            "88c1 6196 d07a be94 1054 d444 a820 0595
             040b 8166 e084 a62d 1bff c05a 839b d9ab
             77ad 94e7 821d d7f2 e6c7 b335 dfdf cd5b
             3960 d5af 2708 7f36 72c1 ab27 0fb5 291f
             9587 3160 65c0 03ed 4ee5 b106 3d50 07",
        ];
        for (section, blocks) in [("C.5", c5), ("C.6", c6)] {
            let mut d = Decoder::new(256);
            for (i, b) in blocks.iter().enumerate() {
                let what = format!("{section}.{}", i + 1);
                let f = d.decode(&hex(b)).unwrap();
                assert_fields(&f, lists[i], &what);
                assert_table(&d, tables[i], &what);
            }
        }
    }

    #[test]
    fn every_huffman_code_decodes_to_its_symbol() {
        for (sym, &(code, len)) in HUFFMAN.iter().enumerate().take(256) {
            // The code, then ones to the byte boundary (EOS padding).
            let pad = (8 - len as usize % 8) % 8;
            let bits = ((code as u64) << pad) | ((1u64 << pad) - 1);
            let nbytes = (len as usize + pad) / 8;
            let bytes: Vec<u8> = (0..nbytes).rev().map(|i| (bits >> (i * 8)) as u8).collect();
            assert_eq!(huffman_decode(&bytes), Ok(vec![sym as u8]), "symbol {sym}");
        }
    }

    #[test]
    fn bad_huffman_padding_and_eos_are_refused() {
        // 'a' is 00011 (5 bits); padding with zeros is not EOS's prefix.
        assert_eq!(huffman_decode(&[0b0001_1000]), Err(Error::Huffman));
        assert_eq!(huffman_decode(&[0b0001_1111]), Ok(b"a".to_vec()));
        // A whole byte of padding is more than 7 bits.
        assert_eq!(huffman_decode(&[0b0001_1111, 0xff]), Err(Error::Huffman));
        // EOS itself (30 ones) inside a string.
        assert_eq!(
            huffman_decode(&[0xff, 0xff, 0xff, 0xff]),
            Err(Error::Huffman)
        );
    }

    #[test]
    fn table_size_updates_and_eviction() {
        let mut d = Decoder::new(4096);
        assert_eq!(
            d.decode(&[0x3f, 0xe2, 0x1f]),
            Err(Error::TableSize(4097, 4096))
        );
        // A literal with indexing (new name "a", value "b"), then a size update to 0
        // in the next block empties the table, so index 62 is gone.
        d.decode(&[0x40, 0x01, b'a', 0x01, b'b']).unwrap();
        assert_eq!(
            pairs(&d.decode(&[0xbe]).unwrap()),
            vec![("a".into(), "b".into())]
        );
        assert_eq!(d.decode(&[0x20, 0xbe]), Err(Error::BadIndex(62)));
        assert_eq!(d.decode(&[0x82, 0x20]), Err(Error::LateSizeUpdate));
        assert_eq!(d.decode(&[0x80]), Err(Error::BadIndex(0)));
        assert_eq!(d.decode(&[0x04, 0x03, b'a']), Err(Error::Truncated));
        assert_eq!(
            d.decode(&[0x7f, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01]),
            Err(Error::IntegerOverflow)
        );
    }

    #[test]
    fn encoded_blocks_decode_to_the_same_fields_without_touching_the_table() {
        let long = "x".repeat(300);
        let fields = vec![
            Field {
                name: b":authority".to_vec(),
                value: b"localhost".to_vec(),
                never_indexed: false,
            },
            Field {
                name: b"x-long".to_vec(),
                value: long.into_bytes(),
                never_indexed: false,
            },
            Field {
                name: b"authorization".to_vec(),
                value: b"secret".to_vec(),
                never_indexed: true,
            },
        ];
        let mut out = Vec::new();
        encode(&fields, &mut out);
        let mut d = Decoder::new(4096);
        assert_eq!(d.decode(&out).unwrap(), fields);
        assert!(d.table.is_empty());
    }
}
