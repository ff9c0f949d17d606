use super::*;
use crate::dict::{DictBuilder, LocationRec};
use crate::model::Labels;
use proptest::prelude::*;
use std::collections::BTreeMap;

fn meta(id: u64) -> SegmentMeta {
    SegmentMeta {
        level: 2,
        max_lsn: 77,
        created_ms: 5,
        sources: vec![3, 4],
        ..SegmentMeta::for_test(id, 3_600_000, 3_600_000)
    }
}

proptest! {
    /// Rows written are exactly the rows read back (after summing duplicates and
    /// dropping zeros), with the precomputed totals and footer agreeing.
    #[test]
    fn segment_round_trips(
        rows in prop::collection::vec((0u8..40, 0u32..360, 0u8..10, -5i64..1000), 0..400),
        window in (0u32..400, 0u32..400),
    ) {
        let mut b = DictBuilder::new();
        let stacks: Vec<u32> = (0..10u64).map(|i| {
            let f = b.function(&format!("f{i}"), "x.go");
            let l = b.location(LocationRec { function: Some(f), mapping: None, address: i, line: 1 });
            let root = b.location(LocationRec { function: None, mapping: None, address: 0xdead, line: 0 });
            b.stack(&[root, l])
        }).collect();
        // Two label values per name give the label index postings to compare.
        let labels_of = |s: u8| Labels::new([
            ("__profile_type__", "a:b:c:d:e"),
            ("s", &*s.to_string()),
            ("zone", if s.is_multiple_of(2) { "even" } else { "odd" }),
        ]);
        let mut want: BTreeMap<(Labels, u32, u32), i64> = BTreeMap::new();
        let mut series: BTreeMap<u8, Vec<Row>> = BTreeMap::new();
        for (s, t, st, v) in &rows {
            series.entry(*s).or_default().push(Row { t: *t, stack: stacks[*st as usize], value: *v });
            let l = labels_of(*s);
            // Keyed by the leaf's address (the stack's index): the writer
            // renumbers stack nodes.
            *want.entry((l, *t, u32::from(*st))).or_default() += v;
        }
        want.retain(|_, v| *v != 0);
        let input = SegmentInput {
            meta: meta(9),
            dict: std::borrow::Cow::Owned(b.finish()),
            series: series.into_iter().map(|(s, r)| (labels_of(s), r)).collect(),
        };
        let dir = tempfile::tempdir().unwrap();
        let written = write_segment(dir.path(), input, 3).unwrap();
        let file = SegmentFile::open(&dir.path().join(&written.file)).unwrap();
        prop_assert_eq!(file.meta.rows, want.len() as u64);
        prop_assert_eq!(file.meta.sources.clone(), vec![3, 4]);
        prop_assert_eq!(file.meta.max_lsn, 77);
        let seg = file.load().unwrap();
        // Rows name stacks by the leaf's address (the writer renumbers nodes).
        let address = |st: u32| {
            let leaf = seg.dict().unwrap().node_locations[st as usize];
            seg.dict().unwrap().locations[leaf as usize].address as u32
        };
        // The summary, from its four sections alone, answers exactly as the
        // whole segment does.
        let summary = file.load_summary().unwrap();
        prop_assert_eq!(&summary.series, &seg.series);
        prop_assert_eq!(&summary.index, &seg.index);
        for sid in 0..seg.series.len() as u32 {
            prop_assert_eq!(summary.series_totals(sid), seg.series_totals(sid));
        }
        let mut got: BTreeMap<(Labels, u32, u32), i64> = BTreeMap::new();
        let mut totals: BTreeMap<(Labels, u32), i64> = BTreeMap::new();
        for (sid, labels) in seg.series.iter().enumerate() {
            seg.for_each_row(sid as u32, |t, st, v| { got.insert((labels.clone(), t, address(st)), v); }).unwrap();
            for &(t, v) in seg.series_totals(sid as u32) {
                totals.insert((labels.clone(), t), v);
            }
        }
        prop_assert_eq!(&got, &want);
        let mut want_totals: BTreeMap<(Labels, u32), i64> = BTreeMap::new();
        for ((l, t, _), v) in &want {
            *want_totals.entry((l.clone(), *t)).or_default() += v;
        }
        prop_assert_eq!(totals, want_totals);
        prop_assert_eq!(seg.meta.value_total, want.values().sum::<i64>());
        // A window of steps reads exactly the rows inside it, through both the
        // callback and the column slices.
        let (lo, hi) = window;
        for (sid, labels) in seg.series.iter().enumerate() {
            let want_win: BTreeMap<(u32, u32), i64> = want
                .iter()
                .filter(|((l, t, _), _)| l == labels && *t >= lo && *t < hi)
                .map(|((_, t, st), v)| ((*t, *st), *v))
                .collect();
            let mut got_win = BTreeMap::new();
            seg.for_each_row_in(sid as u32, lo, hi, |t, st, v| { got_win.insert((t, address(st)), v); }).unwrap();
            prop_assert_eq!(&got_win, &want_win);
            let (stacks, values) = seg.row_slices(sid as u32, lo, hi).unwrap().unwrap();
            let mut from_slices: Vec<(u32, i64)> = stacks.iter().map(|&st| address(st)).zip(values.iter().copied()).collect();
            let mut expected: Vec<(u32, i64)> = want_win.iter().map(|((_, st), v)| (*st, *v)).collect();
            from_slices.sort_unstable();
            expected.sort_unstable();
            prop_assert_eq!(from_slices, expected);
        }
    }
}

proptest! {
    /// Series that repeat another's rows at another scale (as the sample types
    /// of one pprof do) read back exactly, in whatever order their chunks are
    /// first decoded, and are stored once.
    #[test]
    fn repeated_series_read_back_exact_in_any_order(
        bases in prop::collection::vec(
            prop::collection::btree_map((0u32..30, 0usize..4), 1i64..50, 1..20), 1..4),
        picks in prop::collection::vec((0usize..8, 1i64..4), 1..60),
        reverse in any::<bool>(),
    ) {
        let mut b = DictBuilder::new();
        let stacks: Vec<u32> = (0..4u8).map(|i| b.letter_stack(&[0, i + 1], 1)).collect();
        // Pick (k, m): base k times m when k is a base, else rows of its own.
        let want: Vec<Vec<(u32, usize, i64)>> = picks
            .iter()
            .enumerate()
            .map(|(i, &(k, m))| match bases.get(k) {
                Some(base) => base.iter().map(|(&(t, st), &v)| (t, st, v * m * 1000)).collect(),
                None => vec![(i as u32, k % 4, m + i as i64)],
            })
            .collect();
        let input = SegmentInput {
            meta: meta(9),
            dict: std::borrow::Cow::Owned(b.finish()),
            series: want
                .iter()
                .enumerate()
                .map(|(i, rows)| (
                    Labels::new([("__profile_type__", "a:b:c:d:e"), ("s", &*format!("{i:03}"))]),
                    rows.iter().map(|&(t, st, value)| Row { t, stack: stacks[st], value }).collect(),
                ))
                .collect(),
        };
        let dir = tempfile::tempdir().unwrap();
        let file = written_as(dir.path(), "r.seg", input, FORMAT_VERSION);
        let seg = file.load().unwrap();
        let leaf_letter = |node: u32| {
            let loc = seg.dict().unwrap().node_locations[node as usize];
            let f = seg.dict().unwrap().locations[loc as usize].function.unwrap();
            seg.dict().unwrap().strings[seg.dict().unwrap().functions[f as usize].name as usize].clone()
        };
        let mut order: Vec<usize> = (0..want.len()).collect();
        if reverse {
            order.reverse();
        }
        for i in order {
            let mut got = Vec::new();
            seg.for_each_row(i as u32, |t, st, v| got.push((t, leaf_letter(st), v))).unwrap();
            let expected: Vec<(u32, String, i64)> = want[i]
                .iter()
                .map(|&(t, st, v)| (t, ((b'b' + st as u8) as char).to_string(), v))
                .collect();
            // Steps in order; within a step, stacks in stored order (by rank
            // when the segment ranks them).
            prop_assert!(got.windows(2).all(|w| w[0].0 <= w[1].0), "series {}", i);
            got.sort();
            prop_assert_eq!(got, expected, "series {}", i);
        }
        // Each distinct row set is stored once: the stack ids column holds no
        // more rows than the distinct series have.
        fn gcd(a: i64, b: i64) -> i64 { if b == 0 { a } else { gcd(b, a % b) } }
        let distinct: std::collections::BTreeSet<Vec<(u32, usize, i64)>> = want
            .iter()
            .map(|rows| {
                let g = rows.iter().fold(0, |g, r| gcd(g, r.2));
                rows.iter().map(|&(t, st, v)| (t, st, v / g)).collect()
            })
            .collect();
        let stored_rows: usize = distinct.iter().map(Vec::len).sum();
        let stack_bytes = file
            .sections()
            .iter()
            .find(|s| s.kind == SectionKind::StackIds)
            .unwrap()
            .raw_bytes;
        prop_assert!(stack_bytes as usize <= stored_rows, "{} bytes for {} rows", stack_bytes, stored_rows);
    }
}

/// A segment with many rows per stack names its stacks by rank, each
/// service's apart (version 5), and is smaller for it than with one ranking
/// for the segment (version 4) or node ids (version 3); too few rows per
/// stack keep node ids. All read back the same rows, though the two
/// services' series sample alike and store the same ranks: none is taken
/// for a repeat of the other service's.
#[test]
fn many_rows_per_stack_are_stored_by_rank_per_service() {
    const PER_SERVICE: u32 = 15;
    let mut b = DictBuilder::new();
    // 200 stacks per service, the services' apart.
    let stacks: Vec<Vec<u32>> = (0..2u8)
        .map(|k| {
            (0..200u8)
                .map(|i| b.letter_stack(&[k, 2 + i % 7, 9 + i % 5, 14 + i / 4, 70 + i % 13], 1))
                .collect()
        })
        .collect();
    let dict = b.finish();
    // Each step draws a few stacks, popular ones often; series `s` of one
    // service draws as series `s` of the other.
    let rows_of = |s: u32, steps: u32| -> Vec<Row> {
        let own = &stacks[(s / PER_SERVICE) as usize];
        (0..steps)
            .flat_map(|t| {
                let mut x = ((s % PER_SERVICE) * 7919 + t * 104_729) | 1;
                let mut picked: Vec<u32> = (0..12)
                    .map(|_| {
                        x ^= x << 13;
                        x ^= x >> 17;
                        x ^= x << 5;
                        // Squared: small indices much more often.
                        let u = f64::from(x % 1000) / 1000.0;
                        own[(u * u * 200.0) as usize]
                    })
                    .collect();
                picked.sort_unstable();
                picked.dedup();
                picked.into_iter().map(move |stack| Row {
                    t,
                    stack,
                    value: i64::from(t % 3 + 1),
                })
            })
            .collect()
    };
    // With `twice`, each series again as a second profile type whose values
    // are 10 times the first's (as CPU samples and nanoseconds).
    let input = |steps: u32, twice: bool| SegmentInput {
        meta: meta(4),
        dict: std::borrow::Cow::Owned(dict.clone()),
        series: (0..2 * PER_SERVICE)
            .flat_map(|s| {
                let service = if s < PER_SERVICE { "a" } else { "b" };
                let types: &[(&str, i64)] = if twice {
                    &[("a:b:c:d:e", 1), ("f:g:h:i:j", 10)]
                } else {
                    &[("a:b:c:d:e", 1)]
                };
                types.iter().map(move |&(ty, times)| {
                    let mut rows = rows_of(s, steps);
                    rows.iter_mut().for_each(|r| r.value *= times);
                    (
                        Labels::new([
                            ("__profile_type__", ty),
                            ("service_name", service),
                            ("s", &*format!("{:02}", s % PER_SERVICE)),
                        ]),
                        rows,
                    )
                })
            })
            .collect(),
    };
    let dir = tempfile::tempdir().unwrap();
    let has_ranks = |f: &SegmentFile| {
        f.sections()
            .iter()
            .any(|s| s.kind == SectionKind::StackRanks)
    };
    let stack_bytes = |f: &SegmentFile| {
        f.sections()
            .iter()
            .filter(|s| matches!(s.kind, SectionKind::StackIds | SectionKind::StackRanks))
            .map(|s| s.stored_bytes)
            .sum::<u64>()
    };
    let rows = |f: &SegmentFile| {
        let seg = f.load().unwrap();
        let mut all = Vec::new();
        for sid in 0..seg.series.len() as u32 {
            // The whole stack: the services' leaves are alike.
            seg.for_each_row(sid, |t, st, v| {
                all.push((sid, t, seg.dict().unwrap().stack(st), v))
            })
            .unwrap();
        }
        all.sort_unstable();
        all
    };
    let v5 = written_as(dir.path(), "v5.seg", input(60, false), FORMAT_VERSION);
    let v4 = written_as(dir.path(), "v4.seg", input(60, false), 4);
    let v3 = written_as(dir.path(), "v3.seg", input(60, false), 3);
    assert!(has_ranks(&v5) && has_ranks(&v4) && !has_ranks(&v3));
    assert_eq!(rows(&v5), rows(&v3));
    assert_eq!(rows(&v4), rows(&v3));
    let bytes = [&v5, &v4, &v3].map(stack_bytes);
    assert!(bytes[0] < bytes[1] && bytes[1] < bytes[2], "{bytes:?}");
    v5.verify().unwrap();
    // The second profile type repeats the first's rows: no more row bytes,
    // though the two types are ranked apart.
    let twice = written_as(dir.path(), "twice.seg", input(60, true), FORMAT_VERSION);
    let raw = |f: &SegmentFile, kind| {
        f.sections()
            .iter()
            .find(|s| s.kind == kind)
            .map_or(0, |s| s.raw_bytes)
    };
    for kind in [
        SectionKind::Times,
        SectionKind::StackIds,
        SectionKind::Values,
    ] {
        assert_eq!(raw(&twice, kind), raw(&v5, kind), "{kind:?}");
    }
    let (once_rows, twice_rows) = (rows(&v5), rows(&twice));
    assert_eq!(twice_rows.len(), 2 * once_rows.len());
    // Series `s + 30` is series `s` again, as the second type: values × 10.
    let second: Vec<_> = twice_rows
        .iter()
        .filter(|r| r.0 >= 2 * PER_SERVICE)
        .map(|(sid, t, stack, v)| (sid - 2 * PER_SERVICE, *t, stack.clone(), v / 10))
        .collect();
    assert_eq!(second, once_rows);
    // One step per series: about as many rows as stacks, no table.
    let sparse = written_as(dir.path(), "sparse.seg", input(1, false), FORMAT_VERSION);
    assert!(!has_ranks(&sparse));
    let want: usize = (0..2 * PER_SERVICE).map(|s| rows_of(s, 1).len()).sum();
    assert_eq!(rows(&sparse).len(), want);
}

/// One series per value list, all on one stack, rows at steps 0, 1, 2, ...
fn scaled_input(values: &[&[i64]]) -> SegmentInput<'static> {
    let (b, stack) = DictBuilder::with_one_stack();
    SegmentInput {
        meta: meta(5),
        dict: std::borrow::Cow::Owned(b.finish()),
        series: values
            .iter()
            .enumerate()
            .map(|(s, vs)| {
                let rows = vs
                    .iter()
                    .enumerate()
                    .map(|(t, &value)| Row {
                        t: t as u32,
                        stack,
                        value,
                    })
                    .collect();
                (
                    Labels::new([("__profile_type__", "a:b:c:d:e"), ("s", &*s.to_string())]),
                    rows,
                )
            })
            .collect(),
    }
}

fn rows_of(file: &SegmentFile) -> Vec<Vec<i64>> {
    let seg = file.load().unwrap();
    (0..seg.series.len() as u32)
        .map(|s| {
            let mut out = Vec::new();
            seg.for_each_row(s, |_, _, v| out.push(v)).unwrap();
            out
        })
        .collect()
}

fn written_as(
    dir: &std::path::Path,
    name: &str,
    input: SegmentInput<'_>,
    version: u16,
) -> SegmentFile {
    let bytes = writer::encode_segment_as(input, 3, version, writer::BaseChoice::None)
        .unwrap()
        .bytes;
    let path = dir.join(name);
    std::fs::write(&path, bytes).unwrap();
    SegmentFile::open(&path).unwrap()
}

#[test]
fn values_are_stored_divided_by_their_series_scale_and_read_back_exact() {
    let dir = tempfile::tempdir().unwrap();
    // CPU nanoseconds at 100 Hz; a series with a negative value; one whose
    // values share no factor; i64::MIN with a power of two (scale 2^40) and
    // alone (its magnitude, 2^63, is no i64: scale 1).
    let values: [&[i64]; 5] = [
        &[10_000_000, 30_000_000, 2_550_000_000],
        &[-6, 9, 300],
        &[7, 10],
        &[i64::MIN, 1 << 40],
        &[i64::MIN],
    ];
    let v2 = written_as(dir.path(), "v2.seg", scaled_input(&values), FORMAT_VERSION);
    assert_eq!(rows_of(&v2), values.map(<[i64]>::to_vec));
    let v1 = written_as(dir.path(), "v1.seg", scaled_input(&values), 1);
    assert_eq!(rows_of(&v1), values.map(<[i64]>::to_vec));
    // Scaled, the nanoseconds need one byte each instead of four or five.
    let values_bytes = |f: &SegmentFile| {
        f.sections()
            .iter()
            .find(|s| s.kind == SectionKind::Values)
            .unwrap()
            .raw_bytes
    };
    assert!(
        values_bytes(&v2) + 8 <= values_bytes(&v1),
        "{} vs {}",
        values_bytes(&v2),
        values_bytes(&v1)
    );
}

/// A loaded segment reads its rows from a mapping of its file: one deleted
/// (compaction, retention) or renamed (quarantine) after loading still reads
/// back every row, chunks decoded only afterwards included.
#[test]
fn a_loaded_segment_reads_its_rows_after_its_file_is_gone() {
    let dir = tempfile::tempdir().unwrap();
    let values: [&[i64]; 3] = [&[10, 20, 30], &[-6, 9], &[7]];
    let file = written_as(
        dir.path(),
        "gone.seg",
        scaled_input(&values),
        FORMAT_VERSION,
    );
    let seg = file.load().unwrap();
    std::fs::rename(&file.path, dir.path().join("moved.seg")).unwrap();
    std::fs::remove_file(dir.path().join("moved.seg")).unwrap();
    // Another file, which may take the blocks the deleted one had.
    std::fs::write(dir.path().join("other.seg"), vec![0xAB; 1 << 20]).unwrap();
    let rows: Vec<Vec<i64>> = (0..seg.series.len() as u32)
        .map(|s| {
            let mut out = Vec::new();
            seg.for_each_row(s, |_, _, v| out.push(v)).unwrap();
            out
        })
        .collect();
    assert_eq!(rows, values.map(<[i64]>::to_vec));
}

/// Series are written by profile type, then service, then the rest of their
/// labels, so a selector's series are neighbours (and share chunks of rows).
#[test]
fn series_are_ordered_by_profile_type_then_service() {
    let dir = tempfile::tempdir().unwrap();
    let mut input = scaled_input(&[&[1], &[2], &[3], &[4]]);
    let labels = [
        ("b:b:b:b:b", Some("api"), "h1"),
        ("a:a:a:a:a", Some("web"), "h0"),
        ("a:a:a:a:a", Some("api"), "h9"),
        ("a:a:a:a:a", None, "h5"),
    ];
    for ((l, _), (ty, svc, host)) in input.series.iter_mut().zip(labels) {
        *l = Labels::new([("__profile_type__", ty), ("host", host)]);
        if let Some(svc) = svc {
            l.set("service_name", svc);
        }
    }
    let file = written_as(dir.path(), "o.seg", input, FORMAT_VERSION);
    let seg = file.load().unwrap();
    let hosts: Vec<&str> = seg.series.iter().map(|l| l.get("host").unwrap()).collect();
    // Without a service first, then api before web; the other type last.
    assert_eq!(hosts, ["h5", "h9", "h0", "h1"]);
    assert_eq!(rows_of(&file), [vec![4], vec![3], vec![2], vec![1]]);
}

#[test]
fn a_version_this_build_does_not_know_is_refused_by_name() {
    let dir = tempfile::tempdir().unwrap();
    let input = scaled_input(&[&[1]]);
    let bytes = writer::encode_segment_as(input, 3, FORMAT_VERSION + 1, writer::BaseChoice::None)
        .unwrap()
        .bytes;
    let path = dir.path().join("future.seg");
    std::fs::write(&path, bytes).unwrap();
    match SegmentFile::open(&path) {
        Err(e @ crate::error::StorageError::UnsupportedVersion { version, .. }) => {
            assert_eq!(version, FORMAT_VERSION + 1);
            assert!(!e.is_corruption());
            assert!(e.to_string().contains("run a newer profiledb"), "{e}");
        }
        other => panic!("expected a version error, got {other:?}"),
    }
}

#[test]
fn file_names_round_trip() {
    assert_eq!(file_name(3_600_000, 255), "3600000-00000000000000ff.seg");
    assert_eq!(id_from_file_name("3600000-00000000000000ff.seg"), Some(255));
    assert_eq!(id_from_file_name("-5-0a.seg"), Some(10));
    assert_eq!(id_from_file_name("x.seg.tmp"), None);
}
