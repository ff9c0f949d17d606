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
    seq(&syms.mappings, |m| string(&m.file) + string(&m.build_id))
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

/// `batch` as a WAL record.
pub(super) fn encode(batch: &Batch) -> postcard::Result<Vec<u8>> {
    postcard::to_extend(batch, Vec::with_capacity(encoded_len(batch)))
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
            prop_assert_eq!(postcard::from_bytes::<Batch>(&record).unwrap(), b);
        }
    }
}
