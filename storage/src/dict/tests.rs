use super::*;
use proptest::prelude::*;

fn round_trip(d: &Dict) -> Dict {
    decode(
        &encode_string_table(&d.strings, &[]),
        &encode_mappings(d),
        &encode_functions(d),
        &encode_locations(d),
        &encode_stacks(&d.parents, &d.node_locations),
    )
    .unwrap()
}

#[test]
fn the_empty_string_keeps_one_id_wherever_it_is_interned() {
    // Not first: a builder on a dict whose empty string is not string 0.
    let mut b = DictBuilder::default();
    assert_eq!((b.intern("a"), b.intern(""), b.intern("b")), (0, 1, 2));
    assert_eq!((b.intern(""), b.intern("a")), (1, 0));
    let f = b.function("f", "");
    let m = b.mapping("", "", MappingRange::default());
    assert_eq!(b.dict().strings, ["a", "", "b", "f"]);
    let mut c = DictBuilder::from_dict(b.finish());
    assert_eq!((c.intern(""), c.intern("f"), c.intern("new")), (1, 3, 4));
    assert_eq!(
        (
            c.function("f", ""),
            c.mapping("", "", MappingRange::default())
        ),
        (f, m)
    );
    assert_eq!(c.dict().strings.len(), 5);
}

#[test]
fn shared_prefixes_are_stored_once() {
    let mut b = DictBuilder::new();
    let f: Vec<u32> = ["main", "run", "a", "b"]
        .iter()
        .map(|n| {
            let f = b.function(n, "x.rs");
            b.location(LocationRec {
                function: Some(f),
                mapping: None,
                address: 0,
                line: 1,
            })
        })
        .collect();
    let s1 = b.stack(&[f[0], f[1], f[2]]);
    let s2 = b.stack(&[f[0], f[1], f[3]]);
    let s3 = b.stack(&[f[0], f[1], f[2]]);
    assert_eq!(s1, s3);
    assert_ne!(s1, s2);
    assert_eq!(b.dict().node_count(), 4);
    let d = b.finish();
    assert_eq!(d.stack(s2), vec![f[0], f[1], f[3]]);
    assert_eq!(round_trip(&d), d);
}

/// A Mappings section as formats before 7 wrote it (names only) decodes with
/// ranges of zeros; today's keeps each mapping's range.
#[test]
fn mappings_of_older_formats_decode_without_ranges() {
    let mut b = DictBuilder::new();
    let range = MappingRange {
        start: 0x5555_5555_4000,
        limit: 0x5555_5556_0000,
        offset: 0x1000,
    };
    let m = b.mapping("/bin/app", "abcd", range);
    let d = b.finish();
    let encoded = encode_mappings(&d);
    let strings = encode_string_table(&d.strings, &[]);
    let (f, l, st) = (
        encode_functions(&d),
        encode_locations(&d),
        encode_stacks(&[], &[]),
    );
    let today = decode(&strings, &encoded, &f, &l, &st).unwrap();
    assert_eq!(today.mappings[m as usize].range, range);
    let mut old = Vec::new();
    put_uvarint(&mut old, 1);
    put_uvarint(&mut old, u64::from(d.mappings[0].file));
    put_uvarint(&mut old, u64::from(d.mappings[0].build_id));
    let before = decode(&strings, &old, &f, &l, &st).unwrap();
    assert_eq!(before.mappings[0].range, MappingRange::default());
    assert_eq!(before.str(before.mappings[0].build_id), "abcd");
    let cut = &encoded[..encoded.len() - 1];
    assert!(
        decode(&strings, cut, &f, &l, &st).is_err(),
        "a ranges column cut short"
    );
}

#[test]
fn decode_rejects_dangling_references() {
    let mut b = DictBuilder::new();
    let loc = b.location(LocationRec {
        function: None,
        mapping: None,
        address: 7,
        line: 0,
    });
    b.stack(&[loc]);
    let d = b.finish();
    let bad_stacks = {
        let mut out = Vec::new();
        put_uvarint(&mut out, 1);
        put_uvarint(&mut out, 0);
        put_uvarint(&mut out, 5);
        out
    };
    let err = decode(
        &encode_string_table(&d.strings, &[]),
        &encode_mappings(&d),
        &encode_functions(&d),
        &encode_locations(&d),
        &bad_stacks,
    )
    .unwrap_err();
    assert!(err.is_corruption(), "{err}");
}

proptest! {
    #[test]
    fn dict_round_trips(stacks in prop::collection::vec(prop::collection::vec(0u8..12, 0..12), 0..40)) {
        let mut b = DictBuilder::new();
        let m = b.mapping("/bin/app", "abcd", MappingRange { start: 0x400000, limit: 0x500000, offset: stacks.len() as u64 });
        let mut ids = Vec::new();
        for s in &stacks {
            let locs: Vec<u32> = s.iter().map(|&x| {
                let f = b.function(&format!("fn{x}"), "f.rs");
                b.location(LocationRec { function: Some(f), mapping: Some(m), address: u64::from(x) * 16, line: u32::from(x) })
            }).collect();
            ids.push((b.stack(&locs), locs));
        }
        let d = b.finish();
        let back = round_trip(&d);
        prop_assert_eq!(&back, &d);
        for (leaf, locs) in ids {
            if !locs.is_empty() {
                prop_assert_eq!(back.stack(leaf), locs);
            }
        }
    }
}
