//! A batch's WAL record: its postcard encoding, written into a buffer sized once.
//!
//! A push's record is hundreds of KB, and growing the buffer by doubling copied it
//! again and again, so it is sized first. `postcard::experimental::serialized_size`
//! sized it by running the whole serializer once to count. [`encoded_len`] adds up
//! the varints' lengths directly
//! (docs/perf-log/2026-11-27-round-20-empty-memcmp-batches-freed.md). A test holds
//! it to postcard's own output
//! length; a wrong length would cost the buffer a regrowth, never a wrong record.

use crate::codec::{uvarint_len as varint, zigzag};
use crate::model::{Batch, Location, Sample};

/// Bytes of a signed integer: zigzag, then a varint, as postcard writes it.
fn signed(v: i64) -> usize {
    varint(zigzag(v))
}

fn string(s: &str) -> usize {
    varint(s.len() as u64) + s.len()
}

fn option(v: Option<u32>) -> usize {
    1 + v.map_or(0, |x| varint(u64::from(x)))
}

fn location(l: &Location) -> usize {
    option(l.function) + option(l.mapping) + varint(l.address) + varint(u64::from(l.line))
}

fn sample(s: &Sample, stack: u32) -> usize {
    signed(s.timestamp_ms) + varint(u64::from(stack)) + signed(s.value)
}

fn seq<T>(items: &[T], each: impl Fn(&T) -> usize) -> usize {
    varint(items.len() as u64) + items.iter().map(each).sum::<usize>()
}

/// The length of `batch`'s postcard encoding, from its fields' values.
pub(super) fn encoded_len(batch: &Batch) -> usize {
    let syms = &batch.symbols;
    let stacks = &batch.stacks;
    // Stacks are stored flat: offsets (one more than the stacks, none when
    // empty), then every stack's locations.
    let offsets: usize = if stacks.is_empty() {
        varint(0)
    } else {
        let mut end = 0u64;
        let mut n = varint(stacks.len() as u64 + 1) + varint(0);
        for st in stacks.iter() {
            end += st.len() as u64;
            n += varint(end);
        }
        n
    };
    let frames = varint(stacks.frame_count() as u64)
        + stacks
            .iter()
            .flatten()
            .map(|&l| varint(u64::from(l)))
            .sum::<usize>();
    FULL_RECORD.len()
        + seq(&syms.mappings, |m| {
            string(&m.file)
                + string(&m.build_id)
                + varint(m.start)
                + varint(m.limit)
                + varint(m.offset)
        })
        + seq(&syms.functions, |f| string(&f.name) + string(&f.file))
        + seq(&syms.locations, location)
        + offsets
        + frames
        + body_len(batch, Some)
}

/// The length of the postcard encoding of `batch`'s tenant and series, each
/// sample's stack written as `stack(index)` (an id record's body, `symlog.rs`).
pub(super) fn body_len(batch: &Batch, stack: impl Fn(u32) -> Option<u32>) -> usize {
    string(batch.tenant.as_str())
        + seq(&batch.series, |s| {
            varint(s.labels.len() as u64)
                + s.labels
                    .iter()
                    .map(|(k, v)| string(k) + string(v))
                    .sum::<usize>()
                + seq(&s.samples, |x| {
                    sample(x, stack(x.stack).unwrap_or(crate::intern::NOT_INTERNED))
                })
        })
}

/// The first bytes of a full record since mappings carry their address range
/// (segment format 7). A full record of earlier versions is a bare postcard
/// `Batch` of the older shape ([`legacy`]), starting with its tenant's length,
/// which is never 0.
pub(super) const FULL_RECORD: [u8; 2] = [0, 3];

/// `batch` as a WAL record.
pub(super) fn encode(batch: &Batch) -> postcard::Result<Vec<u8>> {
    let mut out = Vec::with_capacity(encoded_len(batch));
    out.extend_from_slice(&FULL_RECORD);
    postcard::to_extend(batch, out)
}

/// A full record's batch: after [`FULL_RECORD`], or an older bare one.
pub(super) fn decode(payload: &[u8]) -> postcard::Result<Batch> {
    match payload.strip_prefix(&FULL_RECORD[..]) {
        Some(rest) => postcard::from_bytes(rest),
        None => postcard::from_bytes::<legacy::Batch>(payload).map(Batch::from),
    }
}

/// The batch as WALs before segment format 7 wrote it: mappings without their
/// address range. Replay reads it into today's batch with a range of zeros.
pub(super) mod legacy {
    use serde::Deserialize;

    use crate::model::{Function, Location, Mapping, SeriesSamples, Stacks, Symbols, TenantId};

    #[derive(Deserialize)]
    pub struct MappingV1 {
        pub file: String,
        pub build_id: String,
    }

    impl From<MappingV1> for Mapping {
        fn from(m: MappingV1) -> Mapping {
            Mapping {
                file: m.file,
                build_id: m.build_id,
                ..Mapping::default()
            }
        }
    }

    #[derive(Deserialize)]
    struct SymbolsV1 {
        mappings: Vec<MappingV1>,
        functions: Vec<Function>,
        locations: Vec<Location>,
    }

    #[derive(Deserialize)]
    pub struct Batch {
        tenant: TenantId,
        symbols: SymbolsV1,
        stacks: Stacks,
        series: Vec<SeriesSamples>,
    }

    impl From<Batch> for crate::model::Batch {
        fn from(b: Batch) -> Self {
            crate::model::Batch {
                tenant: b.tenant,
                symbols: Symbols {
                    mappings: b.symbols.mappings.into_iter().map(Mapping::from).collect(),
                    functions: b.symbols.functions,
                    locations: b.symbols.locations,
                },
                stacks: b.stacks,
                series: b.series,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;
    use crate::model::{Function, Labels, Location, Mapping, Sample, SeriesSamples, TenantId};

    fn batch(
        names: Vec<(String, String)>,
        locations: Vec<(Option<u32>, Option<u32>, u64, u32)>,
        stacks: Vec<Vec<u32>>,
        samples: Vec<(i64, u32, i64)>,
    ) -> Batch {
        let mut b = Batch::new(TenantId::new("tenant-a").unwrap());
        for (a, c) in &names {
            b.symbols.functions.push(Function {
                name: a.clone().into(),
                file: c.clone().into(),
            });
            b.symbols.mappings.push(Mapping {
                file: c.clone(),
                build_id: a.clone(),
                start: a.len() as u64 * 0x1000,
                limit: u64::MAX - c.len() as u64,
                offset: 0x40,
            });
        }
        b.symbols.locations = locations
            .into_iter()
            .map(|(function, mapping, address, line)| Location {
                function,
                mapping,
                address,
                line,
            })
            .collect();
        for st in &stacks {
            b.stacks.push(st);
        }
        b.series.push(SeriesSamples {
            labels: Labels::new([("__profile_type__", "a:b:c:d:e"), ("service_name", "")]),
            samples: samples
                .into_iter()
                .map(|(timestamp_ms, stack, value)| Sample {
                    timestamp_ms,
                    stack,
                    value,
                })
                .collect(),
        });
        b
    }

    #[test]
    fn lengths_match_at_every_varint_width() {
        for (v, n) in [
            (0u64, 1),
            (127, 1),
            (128, 2),
            (16_383, 2),
            (16_384, 3),
            (u64::MAX, 10),
        ] {
            assert_eq!(varint(v), n, "{v}");
        }
        for (v, n) in [
            (0i64, 1),
            (-1, 1),
            (63, 1),
            (-64, 1),
            (64, 2),
            (i64::MIN, 10),
            (i64::MAX, 10),
        ] {
            assert_eq!(signed(v), n, "{v}");
        }
        let widest = batch(
            vec![("f".repeat(200), String::new())],
            vec![(Some(u32::MAX), None, u64::MAX, u32::MAX)],
            vec![vec![u32::MAX; 3], vec![]],
            vec![(i64::MIN, u32::MAX, i64::MAX)],
        );
        for b in [widest, Batch::default()] {
            assert_eq!(encode(&b).unwrap().len(), encoded_len(&b));
        }
    }

    /// A full record as WALs before format 7 wrote it (a bare postcard batch
    /// whose mappings have no range) still replays, with a range of zeros.
    #[test]
    fn a_full_record_of_the_older_shape_still_decodes() {
        #[derive(serde::Serialize)]
        struct OldMapping<'a> {
            file: &'a str,
            build_id: &'a str,
        }
        #[derive(serde::Serialize)]
        struct OldSymbols<'a> {
            mappings: Vec<OldMapping<'a>>,
            functions: &'a [Function],
            locations: &'a [Location],
        }
        let mut b = batch(
            vec![("main".into(), "/bin/app".into())],
            vec![(Some(0), Some(0), 0x401000, 12)],
            vec![vec![0]],
            vec![(1_700_000_000_000, 0, 5)],
        );
        for m in &mut b.symbols.mappings {
            (m.start, m.limit, m.offset) = (0, 0, 0);
        }
        let old = postcard::to_stdvec(&(
            &b.tenant,
            OldSymbols {
                mappings: b
                    .symbols
                    .mappings
                    .iter()
                    .map(|m| OldMapping {
                        file: &m.file,
                        build_id: &m.build_id,
                    })
                    .collect(),
                functions: &b.symbols.functions,
                locations: &b.symbols.locations,
            },
            &b.stacks,
            &b.series,
        ))
        .unwrap();
        assert_ne!(old[0], 0, "an old record starts with its tenant's length");
        assert_eq!(decode(&old).unwrap(), b);
    }

    proptest! {
        #[test]
        fn records_have_their_computed_length_and_decode_to_the_batch(
            names in prop::collection::vec((".{0,40}", ".{0,8}"), 0..20),
            locations in prop::collection::vec(
                (prop::option::of(any::<u32>()), prop::option::of(any::<u32>()), any::<u64>(), any::<u32>()),
                0..40,
            ),
            stacks in prop::collection::vec(prop::collection::vec(any::<u32>(), 0..30), 0..20),
            samples in prop::collection::vec((any::<i64>(), any::<u32>(), any::<i64>()), 0..50),
        ) {
            let b = batch(names, locations, stacks, samples);
            let record = encode(&b).unwrap();
            prop_assert_eq!(record.len(), encoded_len(&b));
            prop_assert_eq!(record.capacity(), record.len(), "one allocation, never grown");
            prop_assert_eq!(decode(&record).unwrap(), b);
        }
    }
}
