//! pprof bytes written straight from the fleet's tables, without building the
//! message structs first.
//!
//! The load generator shares the machine with the server it measures: building a
//! `prost` `Profile` (a `Vec` per sample, per location, per line) and encoding it
//! cost 2 µs per pushed value, over a quarter of the ingest run's CPU. The bytes written
//! here are the ones `prost` writes for the same profile (fields in tag order,
//! zero values left out), which a test checks.

/// A message under construction: its fields are appended to `buf`.
#[derive(Default)]
pub struct Message {
    pub buf: Vec<u8>,
}

fn varint(buf: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        buf.push((v as u8) | 0x80);
        v >>= 7;
    }
    buf.push(v as u8);
}

fn varint_len(v: u64) -> usize {
    // Seven bits a byte; 0 still takes one.
    (64 - (v | 1).leading_zeros() as usize).div_ceil(7)
}

impl Message {
    pub fn clear(&mut self) {
        self.buf.clear();
    }

    /// A varint field (uint64, or int64 cast), left out when 0 as proto3 does.
    pub fn uint(&mut self, field: u32, v: u64) -> &mut Self {
        if v != 0 {
            varint(&mut self.buf, u64::from(field << 3));
            varint(&mut self.buf, v);
        }
        self
    }

    pub fn int(&mut self, field: u32, v: i64) -> &mut Self {
        self.uint(field, v as u64)
    }

    /// A length-delimited field (bytes, string, sub-message), written even
    /// when empty (a repeated element, such as the string table's first "").
    pub fn bytes(&mut self, field: u32, b: &[u8]) -> &mut Self {
        varint(&mut self.buf, u64::from(field << 3 | 2));
        varint(&mut self.buf, b.len() as u64);
        self.buf.extend_from_slice(b);
        self
    }

    /// A packed repeated varint field, left out when empty.
    pub fn packed(&mut self, field: u32, values: impl Iterator<Item = u64> + Clone) -> &mut Self {
        let len: usize = values.clone().map(varint_len).sum();
        if len > 0 {
            varint(&mut self.buf, u64::from(field << 3 | 2));
            varint(&mut self.buf, len as u64);
            for v in values {
                varint(&mut self.buf, v);
            }
        }
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn varint_lengths_match_the_encoding() {
        for v in [
            0,
            1,
            127,
            128,
            16_383,
            16_384,
            u64::from(u32::MAX),
            u64::MAX,
        ] {
            let mut b = Vec::new();
            varint(&mut b, v);
            assert_eq!(b.len(), varint_len(v), "{v}");
        }
    }
}
