//! pprof bytes written straight from the fleet's tables, without building the
//! message structs first.
//!
//! The load generator shares the machine with the server it measures: building a
//! `prost` `Profile` (a `Vec` per sample, per location, per line) and encoding it
//! cost 2 µs per pushed value, over a quarter of the ingest run's CPU. The bytes written
//! here are the ones `prost` writes for the same profile (fields in tag order,
//! zero values left out), which a test checks.
//!
//! A profile is kept in [`Parts`] (its tables are built side by side) until it is
//! written into the push body ([`Message::series`]): joining the parts into a
//! profile and then encoding the `PushRequest` around it copied every pushed byte
//! twice more.

use profiledb_proto::types::v1::LabelPair;

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

    /// A string field, left out when empty as proto3 does.
    pub fn string(&mut self, field: u32, s: &str) -> &mut Self {
        if !s.is_empty() {
            self.bytes(field, s.as_bytes());
        }
        self
    }

    /// The header of a length-delimited field of `len` bytes, which the caller
    /// writes next.
    pub fn header(&mut self, field: u32, len: usize) -> &mut Self {
        varint(&mut self.buf, u64::from(field << 3 | 2));
        varint(&mut self.buf, len as u64);
        self
    }

    /// A push's `RawProfileSeries` (field 1 of `PushRequest`): `labels`, then one
    /// `RawSample` whose `raw_profile` is `profile`, copied here from its parts.
    pub fn series(&mut self, labels: &[LabelPair], profile: &Parts) -> &mut Self {
        let (series_len, sample_len, profile_len) = series_lens(labels, profile);
        self.buf.reserve(field_len(1, series_len));
        self.header(1, series_len);
        for l in labels {
            self.header(1, pair_len(l))
                .string(1, &l.name)
                .string(2, &l.value);
        }
        self.header(2, sample_len);
        if profile_len > 0 {
            self.header(1, profile_len);
            profile.write_to(&mut self.buf);
        }
        self
    }

    /// Bytes [`Message::series`] writes for `labels` and `profile`: a caller
    /// writing several reserves their sum once, not growing the body as it goes.
    pub fn series_len(labels: &[LabelPair], profile: &Parts) -> usize {
        field_len(1, series_lens(labels, profile).0)
    }

    /// A packed repeated varint field, left out when empty; `len` is its
    /// payload's length ([`payload_len`]), which the caller counts once for this
    /// and for the enclosing record's length.
    pub fn packed(
        &mut self,
        field: u32,
        len: usize,
        values: impl Iterator<Item = u64>,
    ) -> &mut Self {
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

/// Bytes of a length-delimited field of `len` bytes, header included.
pub fn field_len(field: u32, len: usize) -> usize {
    varint_len(u64::from(field << 3 | 2)) + varint_len(len as u64) + len
}

/// A repeated string's entry (written even when empty), as its own bytes.
pub fn string_field(field: u32, s: &str) -> Vec<u8> {
    let mut m = Message::default();
    m.bytes(field, s.as_bytes());
    m.buf
}

/// Bytes of a varint field as [`Message::uint`] writes it (none for 0).
pub fn uint_len(field: u32, v: u64) -> usize {
    if v == 0 {
        0
    } else {
        varint_len(u64::from(field << 3)) + varint_len(v)
    }
}

/// Bytes of a packed field's payload: its values as varints.
pub fn payload_len(values: impl Iterator<Item = u64>) -> usize {
    values.map(varint_len).sum()
}

/// Bytes of a length-delimited field that is left out when empty (a packed field
/// as [`Message::packed`] writes it, a string as [`Message::string`] does).
pub fn optional_len(field: u32, len: usize) -> usize {
    if len == 0 {
        0
    } else {
        field_len(field, len)
    }
}

/// A message as consecutive pieces, each already encoded.
#[derive(Default)]
pub struct Parts(pub Vec<Vec<u8>>);

fn pair_len(l: &LabelPair) -> usize {
    optional_len(1, l.name.len()) + optional_len(2, l.value.len())
}

/// A `RawProfileSeries`' payload length, its `RawSample`'s and the profile's.
fn series_lens(labels: &[LabelPair], profile: &Parts) -> (usize, usize, usize) {
    // RawProfileSeries { labels = 1, samples = 2 }, LabelPair { name = 1,
    // value = 2 }, RawSample { raw_profile = 1 }.
    let profile_len = profile.len();
    let sample_len = optional_len(1, profile_len);
    let series_len = labels
        .iter()
        .map(|l| field_len(1, pair_len(l)))
        .sum::<usize>()
        + field_len(2, sample_len);
    (series_len, sample_len, profile_len)
}

impl Parts {
    pub fn len(&self) -> usize {
        self.0.iter().map(Vec::len).sum()
    }

    pub fn write_to(&self, out: &mut Vec<u8>) {
        out.reserve(self.len());
        for p in &self.0 {
            out.extend_from_slice(p);
        }
    }

    pub fn to_vec(&self) -> Vec<u8> {
        let mut out = Vec::new();
        self.write_to(&mut out);
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn field_lengths_match_what_is_written() {
        for v in [0u64, 1, 300, u64::MAX] {
            let mut m = Message::default();
            m.uint(3, v);
            assert_eq!(m.buf.len(), uint_len(3, v), "{v}");
        }
        for values in [vec![], vec![0u64], vec![1, 200, 70_000]] {
            let mut m = Message::default();
            let payload = payload_len(values.iter().copied());
            m.packed(17, payload, values.iter().copied());
            assert_eq!(m.buf.len(), optional_len(17, payload), "{values:?}");
        }
        let mut m = Message::default();
        m.bytes(200, &[7; 130]);
        assert_eq!(m.buf.len(), field_len(200, 130));
        for s in ["", "x"] {
            let mut m = Message::default();
            m.string(2, s);
            assert_eq!(m.buf.len(), optional_len(2, s.len()), "{s:?}");
        }
    }

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
