use proptest::prelude::*;

use super::*;
use crate::intern::StackInterner;
use crate::model::Labels;

/// A batch whose stacks are function names, root first, every frame in `lib.so`;
/// the symbol tables list the functions in the order first seen, so one stack has
/// different indices in batches that list other stacks first.
fn batch(stacks: &[&[&str]], value: i64) -> Batch {
    let mut b = Batch::new(TenantId::default());
    b.symbols.mappings.push(Mapping {
        file: "lib.so".into(),
        build_id: "abc".into(),
        start: 0x40_0000,
        limit: 0x50_0000,
        offset: 0x1000,
    });
    let mut samples = Vec::new();
    for st in stacks {
        let mut path = Vec::new();
        for &name in *st {
            let f = match b.symbols.functions.iter().position(|f| f.name == name) {
                Some(f) => f,
                None => {
                    b.symbols.functions.push(Function {
                        name: name.into(),
                        file: format!("{name}.rs").into(),
                    });
                    b.symbols.locations.push(Location {
                        function: Some(b.symbols.functions.len() as u32 - 1),
                        mapping: Some(0),
                        address: 0x1000 + name.len() as u64,
                        line: 7,
                    });
                    b.symbols.functions.len() - 1
                }
            };
            path.push(f as u32);
        }
        let stack = b.stacks.push(&path);
        samples.push(Sample {
            timestamp_ms: 1_700_000_000_000,
            stack,
            value: value + i64::from(stack),
        });
    }
    b.series.push(SeriesSamples {
        labels: Labels::new([("__profile_type__", "cpu:a:b:c:d"), ("service_name", "s")]),
        samples,
    });
    b
}

/// Every sample as (labels, (function, file, mapping, build id, address, line)
/// per frame root first, value, time): what a batch means, whatever its indices.
type Frame = (String, String, String, String, u64, u32);
fn flat(b: &Batch) -> Vec<(String, Vec<Frame>, i64, i64)> {
    let mut out: Vec<_> = b
        .series
        .iter()
        .flat_map(|s| {
            s.samples.iter().map(|x| {
                let frames = b
                    .stacks
                    .get(x.stack)
                    .unwrap()
                    .iter()
                    .map(|&l| {
                        let loc = b.symbols.locations[l as usize];
                        let f = &b.symbols.functions[loc.function.unwrap() as usize];
                        let m = &b.symbols.mappings[loc.mapping.unwrap() as usize];
                        let (name, file) = (f.name.to_string(), f.file.to_string());
                        // The mapping with its range: replay must keep both.
                        let mfile =
                            format!("{}@{:x}-{:x}+{:x}", m.file, m.start, m.limit, m.offset);
                        let build = m.build_id.clone();
                        (name, file, mfile, build, loc.address, loc.line)
                    })
                    .collect();
                (format!("{:?}", s.labels), frames, x.value, x.timestamp_ms)
            })
        })
        .collect();
    out.sort();
    out
}

/// `b`'s id record for WAL file `file`, as the writer appends it.
fn record(interner: &StackInterner, defined: &mut Defined, file: u64, b: &Batch) -> Vec<u8> {
    let ids = interner.intern(b);
    record_with(defined, file, b, &ids)
}

fn record_with(defined: &mut Defined, file: u64, b: &Batch, ids: &Interned) -> Vec<u8> {
    let body = encode_body(b, ids).unwrap().unwrap();
    let mut out = defined.prefix(file, b, ids).unwrap();
    out.extend_from_slice(&body);
    out
}

const MAIN_A_B: &[&str] = &["main", "a", "b"];
const MAIN_C: &[&str] = &["main", "c"];
const MAIN_A_B_D: &[&str] = &["main", "a", "b", "d"];

#[test]
fn records_read_back_as_their_batches_with_each_id_defined_once_per_file() {
    let interner = StackInterner::new(64 << 20);
    let mut defined = Defined::default();
    let b1 = batch(&[MAIN_A_B, MAIN_C], 10);
    let b2 = batch(&[MAIN_C, MAIN_A_B_D], 20);
    // (file, batch): b1 twice in file 1, then again in file 2.
    let plan = [(1, &b1), (1, &b2), (1, &b1), (2, &b1), (2, &b2)];
    let records: Vec<Vec<u8>> = plan
        .iter()
        .map(|&(file, b)| record(&interner, &mut defined, file, b))
        .collect();
    let bodies: Vec<usize> = plan
        .iter()
        .map(|(_, b)| {
            let ids = interner.intern(b);
            encode_body(b, &ids).unwrap().unwrap().len()
        })
        .collect();
    let prefix = |i: usize| records[i].len() - bodies[i];
    // Nothing is defined twice in a file: b1's repeat in file 1 defines nothing
    // (marker, generation 0 and four empty lists), and b2 only what b1 lacked.
    assert_eq!(prefix(2), 2 + 1 + 4);
    assert!(prefix(1) < prefix(0), "{} vs {}", prefix(1), prefix(0));
    // A new file defines everything again: the same bytes as the first time.
    assert_eq!(records[3], records[0]);
    assert_eq!(prefix(4), prefix(1));

    let mut r = Resolver::default();
    for (i, (&(file, b), rec)) in plan.iter().zip(&records).enumerate() {
        let first = i == 0 || plan[i - 1].0 != file;
        let got = r.decode(rec, first).unwrap().0;
        assert_eq!(got.validate(), Ok(()));
        assert_eq!(flat(&got), flat(b), "record {i}");
    }
    // The batch comes with its stacks' ids, in a generation live ids never have,
    // and a new one at each file.
    let ids = |rec: &[u8]| Resolver::default().decode(rec, true).unwrap().1.unwrap();
    let first = ids(&records[0]);
    assert!(first.generation >= REPLAY_GENERATIONS);
    assert_eq!(first.stacks, interner.intern(&b1).stacks);
    let mut r = Resolver::default();
    let g0 = r.decode(&records[0], true).unwrap().1.unwrap().generation;
    let g1 = r.decode(&records[1], false).unwrap().1.unwrap().generation;
    let g2 = r.decode(&records[3], true).unwrap().1.unwrap().generation;
    assert_eq!(g0, g1);
    assert_ne!(g1, g2);
    // File 2 alone (file 1 deleted) reads back whole.
    let mut r = Resolver::default();
    assert_eq!(flat(&r.decode(&records[3], true).unwrap().0), flat(&b1));
    assert_eq!(flat(&r.decode(&records[4], false).unwrap().0), flat(&b2));
    // A record whose ids an earlier record of its file defined does not read
    // without it, and says which id is missing.
    let err = Resolver::default().decode(&records[1], true).unwrap_err();
    assert!(
        matches!(err, RecordError::Undefined { kind: "stack", .. }),
        "{err}"
    );
}

#[test]
fn a_change_of_generation_defines_everything_again_on_both_sides() {
    // A budget of one byte: every batch after the first starts a generation.
    let interner = StackInterner::new(1);
    let b1 = batch(&[MAIN_A_B, MAIN_C], 1);
    let b2 = batch(&[MAIN_A_B_D], 2);
    let ids: Vec<(&Batch, Interned)> = [&b1, &b2, &b1]
        .into_iter()
        .map(|b| (b, interner.intern(b)))
        .collect();
    let generations: Vec<u64> = ids.iter().map(|(_, i)| i.generation).collect();
    assert_eq!(generations, vec![0, 1, 2]);
    // Written out of generation order, as the decoders may hand them over: the
    // oldest generation last.
    let order = [1, 2, 0];
    let mut defined = Defined::default();
    let records: Vec<Vec<u8>> = order
        .iter()
        .map(|&k| record_with(&mut defined, 1, ids[k].0, &ids[k].1))
        .collect();
    let mut r = Resolver::default();
    for (&k, rec) in order.iter().zip(&records) {
        assert_eq!(flat(&r.decode(rec, k == 1).unwrap().0), flat(ids[k].0));
    }
}

#[test]
fn full_records_still_read_and_only_complete_ids_make_an_id_record() {
    let b = batch(&[MAIN_A_B, MAIN_C], 5);
    let full = record::encode(&b).unwrap();
    assert_eq!(
        Resolver::default().decode(&full, true).unwrap(),
        (b.clone(), None)
    );
    // Interning off: no ids, so no id record.
    let off = StackInterner::new(0).intern(&b);
    assert!(encode_body(&b, &off).is_none());
    let err = Resolver::default().decode(&[0, 9, 1, 2], true).unwrap_err();
    assert!(matches!(err, RecordError::Kind(9)), "{err}");
}

/// An id record as WALs before format 7 wrote it (`0x00 0x01`, mappings as file
/// and build id only) still replays, its mappings with ranges of zeros.
#[test]
fn id_records_of_the_older_shape_still_replay() {
    let b = batch(&[MAIN_A_B, MAIN_C], 5);
    let ids = StackInterner::new(64 << 20).intern(&b);
    let today = record_with(&mut Defined::default(), 1, &b, &ids);
    let body = encode_body(&b, &ids).unwrap().unwrap();
    // Today's definitions, mappings rewritten as they were.
    let (defs, _) =
        postcard::take_from_bytes::<Defs<'_, MappingDef<'_>>>(&today[ID_RECORD.len()..]).unwrap();
    let old = Defs {
        generation: defs.generation,
        functions: defs.functions,
        mappings: defs
            .mappings
            .into_iter()
            .map(|m| NamesDef {
                id: m.id,
                a: m.file,
                b: m.build_id,
            })
            .collect::<Vec<_>>(),
        locations: defs.locations,
        stacks: defs.stacks,
    };
    let mut payload = postcard::to_extend(&old, ID_RECORD_V1.to_vec()).unwrap();
    payload.extend_from_slice(&body);
    let (got, _) = Resolver::default().decode(&payload, true).unwrap();
    let mut want = b.clone();
    for m in &mut want.symbols.mappings {
        (m.start, m.limit, m.offset) = (0, 0, 0);
    }
    assert_eq!(flat(&got), flat(&want));
    assert_eq!(got.symbols.mappings[0].file, "lib.so");
    assert_eq!(got.symbols.mappings[0].start, 0);
    // Today's record keeps the ranges.
    let (now, _) = Resolver::default().decode(&today, true).unwrap();
    assert_eq!(now.symbols.mappings[0].start, 0x40_0000);
    assert_eq!(now.symbols.mappings[0].offset, 0x1000);
}

proptest! {
    /// Damaged bytes (the checksum passed, so only through a bug) are an error,
    /// never a panic or a huge allocation.
    #[test]
    fn any_bytes_decode_or_fail_cleanly(
        bytes in prop::collection::vec(any::<u8>(), 0..200),
        id_record in any::<bool>(),
    ) {
        let mut payload = if id_record { ID_RECORD.to_vec() } else { Vec::new() };
        payload.extend_from_slice(&bytes);
        let _ = Resolver::default().decode(&payload, true);
    }
}
