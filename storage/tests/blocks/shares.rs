//! Windows that cut into a block: its hours reused, kept sums of share sets, function filters over the unfiltered sums of each chunk.

use std::collections::BTreeMap;
use std::sync::atomic::Ordering;

use profiledb_storage::{GroupByQuery, GroupKey, Querier, QueryLimits};

use super::*;

/// A window sliding through a day block reads the block's whole hours, and whole
/// ten-minute chunks of the hours it cuts, from the result cache; only the ragged
/// ten minutes at its start are computed: merges and group-bys equal the reference
/// at every position, and later positions find their chunks cached.
#[test]
fn windows_cutting_into_a_block_reuse_its_hours() {
    let (_dir, store, reference) = day_of_two_services();
    let q = Querier::new(&store, 64 << 20, QueryLimits::default());
    let t = TenantId::default();
    let sel = Selector::default();
    let by_leaf = GroupByQuery {
        keys: vec![GroupKey::Label("service_name".into()), GroupKey::Function],
        ..Default::default()
    };
    let hits = || q.stats().partial_hits.load(Ordering::Relaxed);
    let misses = || q.stats().partial_misses.load(Ordering::Relaxed);
    for (i, start) in [
        D + 2 * HOUR,
        D + 2 * HOUR + 1_000,
        D + 2 * HOUR + 39 * 60_000,
        D + 2 * HOUR + 41 * 60_000,
        D + 3 * HOUR,
    ]
    .into_iter()
    .enumerate()
    {
        let end = D + 20 * HOUR + 30 * 60_000;
        let range = TimeRange::new(start, end);
        let (h0, m0) = (hits(), misses());
        let tree = q.merge_tree(&t, &sel, range).expect("merge");
        assert_eq!(tree.folded(), reference.folded(|_| true, start, end), "{i}");
        // Hours 3..20 are whole in every window, hour 2 only in the first; the
        // window's last half hour is three ten-minute chunks. The second window
        // starts one step into hour 2: its other five chunks are new; the third
        // and fourth find the chunks of 2:40 and 2:50 cached.
        let want = [
            (0, 18 + 3),
            (17 + 3, 5),
            (17 + 3 + 2, 0),
            (17 + 3 + 1, 0),
            (17 + 3, 0),
        ];
        assert_eq!((hits() - h0, misses() - m0), want[i], "{i}");

        let groups = q.group_by(&t, &sel, range, &by_leaf).expect("group-by");
        let got: BTreeMap<Vec<String>, i64> = groups.rows.into_iter().collect();
        assert_eq!(got, day_rows(start, end, |_| true), "{i}");
    }
}

/// Windows whose start moves within one ten-minute chunk read the same cached
/// shares: their sum is computed on the first two asks and kept from the second,
/// so the third reads it, and every answer equals the reference.
#[test]
fn a_share_set_asked_again_reads_its_kept_sum() {
    let (_dir, store, reference) = day_of_two_services();
    let q = Querier::new(&store, 64 << 20, QueryLimits::default());
    let (t, sel) = (TenantId::default(), Selector::default());
    let hits = || q.stats().share_sum_hits.load(Ordering::Relaxed);
    let misses = || q.stats().share_sum_misses.load(Ordering::Relaxed);
    let end = D + 20 * HOUR + 30 * 60_000;
    for (i, want) in [(0, 1), (0, 1), (1, 0), (1, 0)].into_iter().enumerate() {
        let start = D + 2 * HOUR + 1_000 * (i as i64 + 1);
        let (h0, m0) = (hits(), misses());
        let tree = q
            .merge_tree(&t, &sel, TimeRange::new(start, end))
            .expect("merge");
        assert_eq!(tree.folded(), reference.folded(|_| true, start, end), "{i}");
        assert_eq!((hits() - h0, misses() - m0), want, "{i}");
    }
    // Chunks without samples add nothing, so a start moved past 2:10 still asks
    // the same set; past 2:40, whose chunk holds a sample, it asks another.
    let start = D + 2 * HOUR + 10 * 60_000 + 1_000;
    let h0 = hits();
    let tree = q
        .merge_tree(&t, &sel, TimeRange::new(start, end))
        .expect("merge");
    assert_eq!(tree.folded(), reference.folded(|_| true, start, end));
    assert_eq!(hits() - h0, 1);
    let start = D + 2 * HOUR + 41 * 60_000;
    let m0 = misses();
    let tree = q
        .merge_tree(&t, &sel, TimeRange::new(start, end))
        .expect("merge");
    assert_eq!(tree.folded(), reference.folded(|_| true, start, end));
    assert_eq!(misses() - m0, 1);
}

/// One block of a day: hour `h` holds a sample of service `a` at its first step
/// (leaf `read`, `parse` or `write` by turns, value `h + 1`) and one of `b` 40
/// minutes in (leaf `parse`, value `100 (h + 1)`).
fn day_of_two_services() -> (tempfile::TempDir, Store, Reference) {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), test_config()).unwrap();
    let mut reference = Reference::default();
    for h in 0..24 {
        let samples = day_samples(h).map(|(ts, svc, leaf, v)| sample(ts, svc, leaf, v));
        write(&store, &mut reference, &samples);
    }
    store.flush().unwrap();
    compact(&store, DUE);
    assert_eq!(segments(&store), [(D, DAY)]);
    (dir, store, reference)
}

fn day_samples(h: i64) -> [(i64, &'static str, &'static str, i64); 2] {
    let leaf = ["read", "parse", "write"][h as usize % 3];
    [
        (D + h * HOUR + 10_000, "a", leaf, h + 1),
        (D + h * HOUR + 40 * 60_000, "b", "parse", 100 * (h + 1)),
    ]
}

/// The rows of a (service, leaf) group-by of [`day_of_two_services`] over
/// `[start, end)`, of the leaves `keep` keeps. The samples lie on step starts, so a
/// step is in the window when its sample is.
fn day_rows(start: i64, end: i64, keep: impl Fn(&str) -> bool) -> BTreeMap<Vec<String>, i64> {
    let mut want: BTreeMap<Vec<String>, i64> = BTreeMap::new();
    for h in 0..24i64 {
        for (ts, svc, leaf, v) in day_samples(h) {
            if ts >= start && ts < end && keep(leaf) {
                *want
                    .entry(vec![svc.to_string(), leaf.to_string()])
                    .or_default() += v;
            }
        }
    }
    want
}

/// A function filter never asked before reads each cached chunk's unfiltered sums
/// (kept from the first filtered query) instead of the chunk's rows, and its own
/// per-chunk parts are kept only from its second run on: answers equal the
/// reference, and the hit and miss counters show what each run read and kept.
#[test]
fn a_new_function_filter_reuses_the_unfiltered_sums_of_each_chunk() {
    let (_dir, store, _reference) = day_of_two_services();
    let q = Querier::new(&store, 64 << 20, QueryLimits::default());
    let (t, sel) = (TenantId::default(), Selector::default());
    let hits = || q.stats().partial_hits.load(Ordering::Relaxed);
    let misses = || q.stats().partial_misses.load(Ordering::Relaxed);
    let start = D + 2 * HOUR;
    // 18 whole hours and 3 ten-minute chunks; a later end adds a ragged step with
    // no sample (a different query, the same chunks).
    let end = |i: i64| D + 20 * HOUR + 30 * 60_000 + i;
    let chunks = 18 + 3;
    let filtered = |re: &str| GroupByQuery {
        keys: vec![GroupKey::Label("service_name".into()), GroupKey::Function],
        include: Some(regex::Regex::new(re).unwrap()),
        ..Default::default()
    };
    /// A group-by with filter `re` ending `end(i)`, the leaves it keeps, and the
    /// part hits and misses it should count.
    struct Run {
        re: &'static str,
        i: i64,
        keep: fn(&str) -> bool,
        want: (u64, u64),
    }
    let runs = [
        // First filter: each chunk's unfiltered sums computed and kept.
        Run {
            re: "^parse$",
            i: 0,
            keep: |l| l == "parse",
            want: (0, chunks),
        },
        // A new filter: the kept sums, nothing computed from rows or kept.
        Run {
            re: "^(read|write)$",
            i: 0,
            keep: |l| l != "parse",
            want: (chunks, 0),
        },
        // Its second run: its per-chunk parts are computed from the sums and kept.
        Run {
            re: "^(read|write)$",
            i: 1,
            keep: |l| l != "parse",
            want: (chunks, chunks),
        },
        // Its third: those parts.
        Run {
            re: "^(read|write)$",
            i: 2,
            keep: |l| l != "parse",
            want: (chunks, 0),
        },
        // Matching no function of the block: no sums read.
        Run {
            re: "^zzz$",
            i: 0,
            keep: |_| false,
            want: (0, 0),
        },
    ];
    for Run { re, i, keep, want } in runs {
        let (h0, m0) = (hits(), misses());
        let range = TimeRange::new(start, end(i));
        let groups = q
            .group_by(&t, &sel, range, &filtered(re))
            .expect("group-by");
        let got: BTreeMap<Vec<String>, i64> = groups.rows.into_iter().collect();
        assert_eq!(got, day_rows(start, end(i), keep), "{re} {i}");
        assert_eq!((hits() - h0, misses() - m0), want, "{re} {i}");
    }
}
