//! The streaming reader against prost: same accepted inputs, same values, same batches.

use bytes::Bytes;
use proptest::prelude::*;
use prost::encoding::{encode_key, encode_varint, WireType};
use prost::Message;

use super::*;
use crate::error::IngestError;
use crate::pprof::{decode_pprof, profile_to_batch, PprofOptions};
use crate::proto::pprof::{Function, Label, Line, Location, Mapping, Sample, ValueType};

/// Both decoders on the same bytes: both fail, or both succeed with the same view.
fn assert_same(buf: &[u8]) -> Result<(), TestCaseError> {
    let fast = RawProfile::parse(buf);
    match Profile::decode(buf) {
        Ok(p) => prop_assert_eq!(fast, Ok(RawProfile::from_prost(&p))),
        Err(e) => prop_assert!(fast.is_err(), "prost refused ({e}) but parse accepted"),
    }
    Ok(())
}

fn outcome(
    r: Result<profiledb_model::Batch, IngestError>,
) -> Result<profiledb_model::Batch, String> {
    r.map_err(|e| e.to_string())
}

fn key(tag: u32, wt: WireType, out: &mut Vec<u8>) {
    encode_key(tag, wt, out);
}

fn len_field(tag: u32, body: &[u8], out: &mut Vec<u8>) {
    key(tag, WireType::LengthDelimited, out);
    encode_varint(body.len() as u64, out);
    out.extend_from_slice(body);
}

fn varint_field(tag: u32, v: u64, out: &mut Vec<u8>) {
    key(tag, WireType::Varint, out);
    encode_varint(v, out);
}

fn strings(list: &[&str], out: &mut Vec<u8>) {
    for s in list {
        len_field(6, s.as_bytes(), out);
    }
}

#[test]
fn unpacked_repeated_fields_merged_period_type_and_unknown_fields() {
    let mut buf = Vec::new();
    strings(&["", "cpu", "nanoseconds", "f"], &mut buf);
    let mut vt = Vec::new();
    varint_field(1, 1, &mut vt);
    varint_field(2, 2, &mut vt);
    len_field(1, &vt, &mut buf);
    // period_type in two parts: merged, not replaced.
    let mut a = Vec::new();
    varint_field(1, 1, &mut a);
    len_field(11, &a, &mut buf);
    let mut b = Vec::new();
    varint_field(2, 2, &mut b);
    len_field(11, &b, &mut buf);
    // Sample with unpacked ids and values, an unknown fixed32, fixed64 and a group.
    let mut s = Vec::new();
    varint_field(1, 7, &mut s);
    key(9, WireType::ThirtyTwoBit, &mut s);
    s.extend_from_slice(&[1, 2, 3, 4]);
    varint_field(1, 7, &mut s);
    varint_field(2, 5, &mut s);
    key(10, WireType::SixtyFourBit, &mut s);
    s.extend_from_slice(&[0; 8]);
    key(11, WireType::StartGroup, &mut s);
    varint_field(1, 3, &mut s);
    key(11, WireType::EndGroup, &mut s);
    len_field(2, &s, &mut buf);
    // Location with two lines, the id set twice (last wins).
    let mut loc = Vec::new();
    varint_field(1, 3, &mut loc);
    varint_field(1, 7, &mut loc);
    let mut line = Vec::new();
    varint_field(1, 1, &mut line);
    varint_field(2, 12, &mut line);
    len_field(4, &line, &mut loc);
    len_field(4, &line, &mut loc);
    len_field(4, &loc, &mut buf);
    let mut f = Vec::new();
    varint_field(1, 1, &mut f);
    varint_field(2, 3, &mut f);
    len_field(5, &f, &mut buf);
    // Unpacked comments and an unknown length-delimited field.
    varint_field(13, 1, &mut buf);
    varint_field(13, 2, &mut buf);
    len_field(99, b"whatever", &mut buf);

    assert_same(&buf).unwrap();
    let raw = RawProfile::parse(&buf).unwrap();
    assert_eq!(raw.period_type, Some(RawValueType { r#type: 1, unit: 2 }));
    assert_eq!(raw.sample(0), (&[7u64, 7][..], &[5i64][..], &[][..]));
    assert_eq!(raw.locations[0].id, 7);
    assert_eq!(raw.location_lines(&raw.locations[0]).len(), 2);
    let opts = PprofOptions::default();
    let batch = decode_pprof(&buf, &opts).unwrap();
    assert_eq!(batch.sample_count(), 1);
    assert_eq!(
        batch,
        profile_to_batch(&Profile::decode(&buf[..]).unwrap(), &opts).unwrap()
    );
}

#[test]
fn malformed_inputs_are_refused_like_prost() {
    let cases: Vec<Vec<u8>> = vec![
        // Tag 0.
        vec![0x00, 0x01],
        // Wire types 6 and 7.
        vec![0x0e],
        vec![0x0f],
        // Known varint field with a length-delimited wire type.
        vec![(9 << 3) | 2, 0],
        // Message field with a varint wire type.
        vec![(2 << 3), 1],
        // Ten-byte varint whose last byte is 2, and one with a last byte of 1 (valid).
        vec![
            9 << 3,
            0xff,
            0xff,
            0xff,
            0xff,
            0xff,
            0xff,
            0xff,
            0xff,
            0xff,
            0x02,
        ],
        vec![
            9 << 3,
            0xff,
            0xff,
            0xff,
            0xff,
            0xff,
            0xff,
            0xff,
            0xff,
            0xff,
            0x01,
        ],
        // Eleven-byte varint.
        vec![
            9 << 3,
            0x80,
            0x80,
            0x80,
            0x80,
            0x80,
            0x80,
            0x80,
            0x80,
            0x80,
            0x80,
            0x00,
        ],
        // Truncated varint, truncated length, length past the end.
        vec![9 << 3, 0x80],
        vec![(6 << 3) | 2],
        vec![(6 << 3) | 2, 5, b'a'],
        // Key above u32::MAX.
        vec![0x80, 0x80, 0x80, 0x80, 0x10],
        // End group without a start, mismatched end group, unterminated group.
        vec![(20 << 3) | 4],
        vec![(20 << 3) | 3, (21 << 3) | 4],
        vec![(20 << 3) | 3],
        // Sample whose packed ids end mid-varint.
        vec![(2 << 3) | 2, 3, (1 << 3) | 2, 1, 0x80],
        // Fixed32 past the end.
        vec![(20 << 3) | 5, 1, 2],
    ];
    for c in cases {
        assert_same(&c).unwrap_or_else(|e| panic!("{c:?}: {e}"));
        let opts = PprofOptions::default();
        let got = decode_pprof(&c, &opts);
        if let Err(e) = &got {
            if Profile::decode(&c[..]).is_err() {
                assert!(
                    matches!(
                        e,
                        IngestError::Protobuf {
                            what: "pprof Profile",
                            ..
                        }
                    ),
                    "{e:?}"
                );
            }
        }
    }
}

#[test]
fn group_nesting_hits_the_same_recursion_limit() {
    for depth in [50usize, 97, 98, 99, 100, 101, 150] {
        // Groups nested `depth` deep at the top level...
        let mut top = Vec::new();
        for _ in 0..depth {
            key(20, WireType::StartGroup, &mut top);
        }
        for _ in 0..depth {
            key(20, WireType::EndGroup, &mut top);
        }
        assert_same(&top).unwrap_or_else(|e| panic!("top {depth}: {e}"));
        // ...and inside a Line inside a Location.
        let mut line = Vec::new();
        varint_field(1, 1, &mut line);
        line.extend_from_slice(&top);
        let mut loc = Vec::new();
        varint_field(1, 1, &mut loc);
        len_field(4, &line, &mut loc);
        let mut buf = Vec::new();
        len_field(4, &loc, &mut buf);
        assert_same(&buf).unwrap_or_else(|e| panic!("nested {depth}: {e}"));
    }
}

/// Small random profiles whose ids and string indices are often wrong on purpose.
fn arb_profile() -> impl Strategy<Value = Profile> {
    let n_strings = 1usize..12;
    n_strings.prop_flat_map(|n| {
        let idx = move || prop_oneof![8 => 0..n as i64, 1 => -2i64..30];
        let id = || prop_oneof![8 => 1u64..6, 1 => Just(0u64), 1 => any::<u64>()];
        let table = prop::collection::vec(
            prop_oneof![Just("".to_string()), "[a-z_]{1,6}", Just("a:b".to_string())],
            n - 1,
        );
        let vt = (idx(), idx()).prop_map(|(t, u)| ValueType { r#type: t, unit: u });
        let label = (idx(), idx(), -3i64..3).prop_map(|(key, str, num)| Label {
            key,
            str,
            num,
            num_unit: 0,
        });
        let sample = (
            prop::collection::vec(id(), 0..5),
            prop::collection::vec(prop_oneof![Just(0i64), any::<i64>(), -9i64..9], 0..4),
            prop::collection::vec(label, 0..3),
        )
            .prop_map(|(location_id, value, label)| Sample {
                location_id,
                value,
                label,
            });
        let mapping = (id(), idx(), idx()).prop_map(|(id, filename, build_id)| Mapping {
            id,
            filename,
            build_id,
            memory_start: id,
            has_functions: true,
            ..Default::default()
        });
        let line = (id(), -2i64..100).prop_map(|(function_id, line)| Line {
            function_id,
            line,
            column: 1,
        });
        let location = (
            id(),
            prop_oneof![Just(0u64), 1u64..4],
            any::<u64>(),
            prop::collection::vec(line, 0..3),
        )
            .prop_map(|(id, mapping_id, address, line)| Location {
                id,
                mapping_id,
                address,
                line,
                is_folded: false,
            });
        let function =
            (id(), idx(), idx(), idx()).prop_map(|(id, name, system_name, filename)| Function {
                id,
                name,
                system_name,
                filename,
                start_line: 3,
            });
        (
            table,
            prop::collection::vec(vt.clone(), 1..4),
            prop::option::of(vt),
            prop::collection::vec(sample, 0..12),
            prop::collection::vec(mapping, 0..3),
            prop::collection::vec(location, 0..6),
            prop::collection::vec(function, 0..6),
            (any::<i64>(), -5i64..20_000_000),
        )
            .prop_map(
                |(
                    table,
                    sample_type,
                    period_type,
                    sample,
                    mapping,
                    location,
                    function,
                    (t, period),
                )| {
                    let mut string_table = vec![Bytes::new()];
                    string_table.extend(table.into_iter().map(Bytes::from));
                    Profile {
                        sample_type,
                        sample,
                        mapping,
                        location,
                        function,
                        string_table,
                        time_nanos: t,
                        period_type,
                        period,
                        comment: vec![1, 2],
                        ..Default::default()
                    }
                },
            )
    })
}

fn opts() -> PprofOptions {
    PprofOptions {
        fallback_time_ms: 42,
        ..PprofOptions::default()
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn fast_path_and_prost_path_give_identical_batches(profile in arb_profile()) {
        let bytes = profile.encode_to_vec();
        assert_same(&bytes)?;
        let fast = outcome(decode_pprof(&bytes, &opts()));
        let slow = outcome(profile_to_batch(&Profile::decode(&bytes[..]).unwrap(), &opts()));
        prop_assert_eq!(fast, slow);
    }

    #[test]
    fn mutated_bytes_are_accepted_or_refused_like_prost(
        profile in arb_profile(),
        edits in prop::collection::vec((any::<prop::sample::Index>(), any::<u8>(), 0u8..3), 1..4),
    ) {
        let mut bytes = profile.encode_to_vec();
        for (at, byte, op) in edits {
            if bytes.is_empty() {
                break;
            }
            let i = at.index(bytes.len());
            match op {
                0 => bytes[i] = byte,
                1 => bytes.truncate(i),
                _ => bytes.insert(i, byte),
            }
        }
        assert_same(&bytes)?;
        let fast = outcome(decode_pprof(&bytes, &opts()));
        let slow = match Profile::decode(&bytes[..]) {
            Ok(p) => outcome(profile_to_batch(&p, &opts())),
            Err(e) => Err(IngestError::Protobuf { what: "pprof Profile", source: e }.to_string()),
        };
        prop_assert_eq!(fast, slow);
    }
}
