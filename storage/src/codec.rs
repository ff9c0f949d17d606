//! Byte-level encoding shared by segments and the WAL: LEB128 varints, zigzag, and a
//! bounds-checked reader.
//!
//! Everything read from disk goes through [`Reader`], which returns errors instead of
//! panicking, so a corrupt file can never take the process down.

use crate::error::{Result, StorageError};

pub fn put_uvarint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// Bytes [`put_uvarint`] writes for `v`: seven bits a byte, and 0 takes one.
pub fn uvarint_len(v: u64) -> usize {
    (64 - (v | 1).leading_zeros() as usize).div_ceil(7)
}

pub fn zigzag(v: i64) -> u64 {
    ((v << 1) ^ (v >> 63)) as u64
}

pub fn unzigzag(v: u64) -> i64 {
    ((v >> 1) as i64) ^ -((v & 1) as i64)
}

pub fn put_ivarint(out: &mut Vec<u8>, v: i64) {
    put_uvarint(out, zigzag(v))
}

pub fn put_bytes(out: &mut Vec<u8>, b: &[u8]) {
    put_uvarint(out, b.len() as u64);
    out.extend_from_slice(b);
}

/// A cursor over untrusted bytes. `what` names the structure being decoded so errors
/// say where the damage is.
pub struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
    what: &'static str,
}

impl<'a> Reader<'a> {
    pub fn new(buf: &'a [u8], what: &'static str) -> Self {
        Reader { buf, pos: 0, what }
    }

    #[cold]
    fn corrupt(&self, why: &str) -> StorageError {
        StorageError::Corrupt(format!("{}: {why} at byte {}", self.what, self.pos))
    }

    /// Whether every byte has been read.
    pub fn is_empty(&self) -> bool {
        self.pos >= self.buf.len()
    }

    /// Bytes read so far.
    pub fn position(&self) -> usize {
        self.pos
    }

    pub fn seek(&mut self, pos: usize) -> Result<()> {
        if pos > self.buf.len() {
            return Err(self.corrupt("seek past end"));
        }
        self.pos = pos;
        Ok(())
    }

    // Inlined: decoding a segment's rows and stack tree is a loop of these, and
    // decoding varints, a call each, was a fifth of a first query after a restart.
    #[inline]
    pub fn uvarint(&mut self) -> Result<u64> {
        // Most varints are one byte: stack-tree distances, step and stack deltas.
        if let Some(&b) = self.buf.get(self.pos) {
            if b < 0x80 {
                self.pos += 1;
                return Ok(u64::from(b));
            }
        }
        self.uvarint_slow()
    }

    /// A varint of two bytes or more. With ten bytes left (the longest varint)
    /// the bytes are read from a fixed-size window without a bounds check each; a
    /// first query after a restart decodes millions of these (values, totals).
    #[inline(never)]
    fn uvarint_slow(&mut self) -> Result<u64> {
        let window = self
            .pos
            .checked_add(10)
            .and_then(|end| self.buf.get(self.pos..end));
        let Some(window) = window.and_then(|w| <&[u8; 10]>::try_from(w).ok()) else {
            return self.uvarint_bytewise();
        };
        let mut v: u64 = 0;
        for (i, &b) in window.iter().enumerate() {
            v |= u64::from(b & 0x7f) << (7 * i);
            if b < 0x80 {
                if i == 9 && b > 1 {
                    return Err(self.corrupt("varint overflows u64"));
                }
                self.pos += i + 1;
                return Ok(v);
            }
        }
        Err(self.corrupt("varint too long"))
    }

    /// A varint read a byte at a time: near the end of the buffer, and the
    /// reference the windowed read is tested against.
    fn uvarint_bytewise(&mut self) -> Result<u64> {
        let mut v: u64 = 0;
        let mut shift = 0u32;
        loop {
            let Some(&b) = self.buf.get(self.pos) else {
                return Err(self.corrupt("truncated varint"));
            };
            self.pos += 1;
            if shift == 63 && b > 1 {
                return Err(self.corrupt("varint overflows u64"));
            }
            v |= u64::from(b & 0x7f) << shift;
            if b < 0x80 {
                return Ok(v);
            }
            shift += 7;
            if shift > 63 {
                return Err(self.corrupt("varint too long"));
            }
        }
    }

    #[inline]
    pub fn ivarint(&mut self) -> Result<i64> {
        Ok(unzigzag(self.uvarint()?))
    }

    /// A varint that must fit in u32 (ids and counts).
    #[inline]
    pub fn u32v(&mut self) -> Result<u32> {
        let v = self.uvarint()?;
        u32::try_from(v).map_err(|_| self.corrupt("value does not fit in u32"))
    }

    /// A count of items that each occupy at least `min_item_bytes`; rejecting counts the
    /// remaining bytes cannot hold keeps a corrupt count from driving a huge allocation.
    pub fn count(&mut self, min_item_bytes: usize) -> Result<usize> {
        let n = self.uvarint()?;
        let remaining = (self.buf.len() - self.pos) as u64;
        if n.saturating_mul(min_item_bytes.max(1) as u64) > remaining {
            return Err(self.corrupt("count larger than the data"));
        }
        Ok(n as usize)
    }

    pub fn bytes(&mut self, len: usize) -> Result<&'a [u8]> {
        let end = self
            .pos
            .checked_add(len)
            .filter(|&e| e <= self.buf.len())
            .ok_or_else(|| self.corrupt("truncated bytes"))?;
        let s = &self.buf[self.pos..end];
        self.pos = end;
        Ok(s)
    }

    pub fn len_prefixed(&mut self) -> Result<&'a [u8]> {
        let n = self.uvarint()?;
        let n = usize::try_from(n).map_err(|_| self.corrupt("length overflow"))?;
        self.bytes(n)
    }

    pub fn str(&mut self) -> Result<&'a str> {
        let b = self.len_prefixed()?;
        std::str::from_utf8(b).map_err(|_| self.corrupt("invalid UTF-8"))
    }

    pub fn u8(&mut self) -> Result<u8> {
        Ok(self.bytes(1)?[0])
    }

    pub fn u16_le(&mut self) -> Result<u16> {
        let b = self.bytes(2)?;
        Ok(u16::from_le_bytes([b[0], b[1]]))
    }

    pub fn u32_le(&mut self) -> Result<u32> {
        let b = self.bytes(4)?;
        Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }

    pub fn u64_le(&mut self) -> Result<u64> {
        let b = self.bytes(8)?;
        let mut a = [0u8; 8];
        a.copy_from_slice(b);
        Ok(u64::from_le_bytes(a))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn varint_known_bytes() {
        let mut out = Vec::new();
        put_uvarint(&mut out, 300);
        assert_eq!(out, [0xac, 0x02]);
        out.clear();
        put_ivarint(&mut out, -1);
        assert_eq!(out, [0x01]);
    }

    #[test]
    fn reader_rejects_truncation_and_overflow() {
        assert!(Reader::new(&[0x80], "t").uvarint().is_err());
        assert!(Reader::new(&[0xff; 11], "t").uvarint().is_err());
        // The tenth byte holds the top bit only: 1 fits, 2 overflows, with bytes
        // after it (the windowed read) and without (the bytewise one).
        for tail in [&[][..], &[0, 0, 0][..]] {
            let mut max = vec![0xff; 9];
            max.push(0x01);
            max.extend_from_slice(tail);
            assert_eq!(Reader::new(&max, "t").uvarint().unwrap(), u64::MAX);
            max[9] = 0x02;
            assert!(Reader::new(&max, "t").uvarint().is_err());
        }
        assert!(Reader::new(&[5, b'a'], "t").str().is_err());
        assert!(Reader::new(&[0xff, 0xff, 0xff, 0xff, 0x0f], "t")
            .count(1)
            .is_err());
    }

    proptest! {
        #[test]
        fn varints_round_trip(u in any::<u64>(), i in any::<i64>(), s in ".{0,20}") {
            let mut out = Vec::new();
            put_uvarint(&mut out, u);
            put_ivarint(&mut out, i);
            put_bytes(&mut out, s.as_bytes());
            let mut r = Reader::new(&out, "t");
            prop_assert_eq!(r.uvarint().unwrap(), u);
            prop_assert_eq!(r.ivarint().unwrap(), i);
            prop_assert_eq!(r.str().unwrap(), s.as_str());
            prop_assert!(r.is_empty());
        }

        /// The windowed read and the bytewise one agree on any bytes, valid or
        /// not: the value, where the cursor ends, or that both fail.
        #[test]
        fn windowed_varints_read_as_bytewise(
            bytes in prop::collection::vec(
                prop_oneof![any::<u8>(), 0x80u8..=0xff, Just(0x01u8), Just(0x02u8)],
                0..24,
            ),
            at in 0usize..12,
        ) {
            let at = at.min(bytes.len());
            let (mut a, mut b) = (Reader::new(&bytes, "t"), Reader::new(&bytes, "t"));
            a.seek(at).unwrap();
            b.seek(at).unwrap();
            let (va, vb) = (a.uvarint_slow().ok(), b.uvarint_bytewise().ok());
            prop_assert_eq!(va, vb);
            if va.is_some() {
                prop_assert_eq!(a.pos, b.pos);
            }
        }
    }
}
