//! Reading JFR's primitive encodings from a byte slice, bounds-checked.
//!
//! JFR integers are LEB128 varints when the chunk's "compressed integers" feature
//! bit is set (async-profiler and JDK 11+ always set it) and big-endian otherwise;
//! a varint's ninth byte carries a full 8 bits.

use super::error::JfrError;

/// A position in a chunk's bytes.
#[derive(Clone, Copy)]
pub struct Cursor<'a> {
    data: &'a [u8],
    pos: usize,
    compressed: bool,
}

/// How a string is stored (the first byte of every string value).
pub enum JString<'a> {
    /// Encoding 0.
    Null,
    /// Encoding 1, or a zero-length literal.
    Empty,
    /// Encoding 2: an index into the `java.lang.String` constant pool.
    Pool(u64),
    /// Encoding 3: UTF-8 bytes.
    Utf8(&'a [u8]),
    /// Encoding 4: UTF-16 code units as varints, decoded.
    Chars(String),
    /// Encoding 5: Latin-1 bytes.
    Latin1(&'a [u8]),
}

impl<'a> Cursor<'a> {
    /// A cursor at `pos` in `data`.
    pub fn new(data: &'a [u8], pos: usize, compressed: bool) -> Self {
        Cursor {
            data,
            pos,
            compressed,
        }
    }

    /// The current byte offset.
    pub fn pos(&self) -> usize {
        self.pos
    }

    /// Bytes left after the cursor.
    pub fn remaining(&self) -> usize {
        self.data.len().saturating_sub(self.pos)
    }

    fn truncated(&self, what: &'static str) -> JfrError {
        JfrError::Truncated { at: self.pos, what }
    }

    /// Takes `n` raw bytes.
    pub fn bytes(&mut self, n: usize, what: &'static str) -> Result<&'a [u8], JfrError> {
        let end = self
            .pos
            .checked_add(n)
            .filter(|&e| e <= self.data.len())
            .ok_or_else(|| self.truncated(what))?;
        let out = &self.data[self.pos..end];
        self.pos = end;
        Ok(out)
    }

    /// One raw byte (JFR `byte` and `boolean`).
    pub fn u8(&mut self, what: &'static str) -> Result<u8, JfrError> {
        Ok(self.bytes(1, what)?[0])
    }

    fn fixed(&mut self, n: usize, what: &'static str) -> Result<u64, JfrError> {
        let b = self.bytes(n, what)?;
        Ok(b.iter().fold(0u64, |acc, &x| (acc << 8) | u64::from(x)))
    }

    /// An unsigned LEB128 varint of at most 9 bytes.
    pub fn varint(&mut self, what: &'static str) -> Result<u64, JfrError> {
        let mut v = 0u64;
        for i in 0..9 {
            let b = self.u8(what)?;
            if i == 8 {
                return Ok(v | (u64::from(b) << 56));
            }
            v |= u64::from(b & 0x7f) << (7 * i);
            if b < 0x80 {
                return Ok(v);
            }
        }
        Ok(v)
    }

    /// A JFR integer of `width` bytes: varint when compressed, else big-endian.
    pub fn int(&mut self, width: usize, what: &'static str) -> Result<u64, JfrError> {
        if self.compressed {
            self.varint(what)
        } else {
            self.fixed(width, what)
        }
    }

    /// A `long`.
    pub fn long(&mut self, what: &'static str) -> Result<u64, JfrError> {
        self.int(8, what)
    }

    /// An `int` used as a count or index, capped by what the remaining bytes could
    /// hold (every counted item takes at least `min_item_bytes`).
    pub fn count(&mut self, min_item_bytes: usize, what: &'static str) -> Result<usize, JfrError> {
        let n = self.int(4, what)?;
        let cap = self.remaining() / min_item_bytes.max(1);
        match usize::try_from(n) {
            Ok(n) if n <= cap => Ok(n),
            _ => Err(JfrError::malformed(format!(
                "{what}: count {n} exceeds the {} bytes left",
                self.remaining()
            ))),
        }
    }

    /// A 4-byte big-endian float or 8-byte double, as raw bits.
    pub fn float_bits(&mut self, width: usize, what: &'static str) -> Result<u64, JfrError> {
        self.fixed(width, what)
    }

    /// A string value in any of JFR's encodings.
    pub fn string(&mut self, what: &'static str) -> Result<JString<'a>, JfrError> {
        match self.u8(what)? {
            0 => Ok(JString::Null),
            1 => Ok(JString::Empty),
            2 => Ok(JString::Pool(self.long(what)?)),
            3 => {
                let n = self.count(1, what)?;
                Ok(JString::Utf8(self.bytes(n, what)?))
            }
            4 => {
                let n = self.count(1, what)?;
                let mut units = Vec::with_capacity(n);
                for _ in 0..n {
                    units.push(self.int(2, what)? as u16);
                }
                Ok(JString::Chars(String::from_utf16_lossy(&units)))
            }
            5 => {
                let n = self.count(1, what)?;
                Ok(JString::Latin1(self.bytes(n, what)?))
            }
            other => Err(JfrError::malformed(format!(
                "{what}: unknown string encoding {other} at byte {}",
                self.pos - 1
            ))),
        }
    }
}

impl JString<'_> {
    /// The literal text, or `None` for null and pool references.
    pub fn literal(self) -> Option<String> {
        match self {
            JString::Null | JString::Pool(_) => None,
            JString::Empty => Some(String::new()),
            JString::Utf8(b) => Some(String::from_utf8_lossy(b).into_owned()),
            JString::Chars(s) => Some(s),
            JString::Latin1(b) => Some(b.iter().map(|&c| char::from(c)).collect()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn varints_and_fixed_ints() {
        let data = [
            0x96, 0x01, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
        ];
        let mut c = Cursor::new(&data, 0, true);
        assert_eq!(c.varint("x").unwrap(), 150);
        assert_eq!(c.varint("x").unwrap(), u64::MAX);
        let mut c = Cursor::new(&[0, 0, 1, 2], 0, false);
        assert_eq!(c.int(4, "x").unwrap(), 258);
        let err = Cursor::new(&[0x80], 0, true).varint("size").unwrap_err();
        assert_eq!(
            err,
            JfrError::Truncated {
                at: 1,
                what: "size"
            }
        );
    }

    #[test]
    fn strings_in_every_encoding() {
        let data = [
            0, 1, 2, 7, 3, 2, b'h', b'i', 4, 2, 0x68, 0xe9, 0x01, 5, 1, 0xe9, 9,
        ];
        let mut c = Cursor::new(&data, 0, true);
        assert_eq!(c.string("s").unwrap().literal(), None);
        assert_eq!(c.string("s").unwrap().literal().as_deref(), Some(""));
        assert!(matches!(c.string("s").unwrap(), JString::Pool(7)));
        assert_eq!(c.string("s").unwrap().literal().as_deref(), Some("hi"));
        assert_eq!(c.string("s").unwrap().literal().as_deref(), Some("hé"));
        assert_eq!(c.string("s").unwrap().literal().as_deref(), Some("é"));
        assert!(matches!(c.string("s"), Err(JfrError::Malformed(_))));
    }

    #[test]
    fn counts_are_capped_by_the_bytes_left() {
        let mut c = Cursor::new(&[0xff, 0xff, 0x03, 1, 2], 0, true);
        assert!(matches!(c.count(1, "n"), Err(JfrError::Malformed(_))));
    }
}
