//! Tier merges of open partitions: early flushes of a busy hour gather into a few
//! segments of rising level, answers unchanged, closed partitions left to the
//! whole-partition compaction.

mod common;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use common::*;
use profiledb_storage::{Selector, Store, StoreConfig, TenantId, TimeRange};

const HOUR: i64 = 3_600_000;
/// An hour boundary; "now" is ten minutes into it.
const OPEN: i64 = 1_600_002_000_000 - 1_600_002_000_000 % HOUR;
const NOW: i64 = OPEN + 600_000;

fn sample(hour_start: i64, i: i64) -> TSample {
    TSample {
        labels: vec![("service_name".into(), format!("svc{}", i % 2))],
        ts: hour_start + i * 10_000,
        stack: vec![
            TFrame::Func("main".into()),
            TFrame::Func(format!("work{}", i % 5)),
        ],
        value: 100 + i,
    }
}

/// Writes one batch into the hour and flushes it as a segment of its own.
fn flush_one(store: &Store, hour_start: i64, i: i64) -> i64 {
    let s = sample(hour_start, i);
    let v = s.value;
    store
        .write(build_batch(&TenantId::default(), &[s]))
        .expect("write");
    store.flush().expect("flush");
    v
}

/// Levels of the live segments of the partition starting at `start`, sorted.
fn levels(store: &Store, start: i64) -> Vec<u32> {
    let mut l: Vec<u32> = store
        .segments()
        .into_iter()
        .filter(|m| m.partition_start_ms == start)
        .map(|m| m.level)
        .collect();
    l.sort_unstable();
    l
}

fn total(store: &Store) -> i64 {
    querier(store)
        .series_totals(&TenantId::default(), &Selector::default(), TimeRange::all())
        .expect("totals")
        .values()
        .flat_map(|pts| pts.values())
        .sum()
}

#[test]
fn open_partition_merges_in_tiers_and_answers_stay() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(
        dir.path(),
        StoreConfig {
            open_merge_segments: 3,
            ..test_config()
        },
    )
    .unwrap();
    let closed = OPEN - 3 * HOUR;
    let mut want = 0;
    // Three segments of a closed hour: not the open merge's business.
    for i in 0..3 {
        want += flush_one(&store, closed, i);
    }
    let before = querier(&store)
        .merge_tree(&TenantId::default(), &Selector::default(), TimeRange::all())
        .unwrap()
        .folded();
    let mut expected_levels: BTreeMap<i64, Vec<u32>> = BTreeMap::new();
    expected_levels.insert(1, vec![0]);
    expected_levels.insert(2, vec![0, 0]);
    expected_levels.insert(3, vec![1]);
    expected_levels.insert(4, vec![0, 1]);
    expected_levels.insert(5, vec![0, 0, 1]);
    expected_levels.insert(6, vec![1, 1]);
    expected_levels.insert(8, vec![0, 0, 1, 1]);
    // The third tier-1 segment completes a tier too: the cascade ends at level 2.
    expected_levels.insert(9, vec![2]);
    expected_levels.insert(10, vec![0, 2]);
    let mut reports = 0;
    for n in 1..=10 {
        want += flush_one(&store, OPEN, n);
        let r = store.merge_open_partitions_at(NOW).unwrap();
        assert!(r.skipped.is_empty(), "{:?}", r.skipped);
        reports += r.compacted.len();
        if let Some(l) = expected_levels.get(&n) {
            assert_eq!(&levels(&store, OPEN), l, "after flush {n}");
        }
        assert_eq!(
            levels(&store, closed),
            vec![0, 0, 0],
            "closed hour untouched"
        );
        assert_eq!(total(&store), want, "after flush {n}");
    }
    // Merges at flushes 3, 6, 9 (level 0 → 1) and 9 (level 1 → 2).
    assert_eq!(reports, 4);
    // The merged hour answers exactly what its flushes answered, plus nothing else.
    let after = querier(&store)
        .merge_tree(&TenantId::default(), &Selector::default(), TimeRange::all())
        .unwrap()
        .folded();
    let added: i64 = after.values().sum::<i64>() - before.values().sum::<i64>();
    assert_eq!(added, (1..=10).map(|i| 100 + i).sum::<i64>());
    assert_eq!(after["main;work1"], before["main;work1"] + 101 + 106);

    // Once the hour is past the grace, the whole-partition compaction takes all of it.
    let r = store
        .compact_at(None, None, OPEN + 2 * HOUR, &|_| {})
        .unwrap();
    assert_eq!(r.compacted.len(), 2);
    assert_eq!(levels(&store, OPEN), vec![3]);
    // The closed hour (10:00 UTC) went into its part block (06:00 to 12:00),
    // due since 14:00.
    assert_eq!(levels(&store, closed), Vec::<u32>::new());
    assert_eq!(levels(&store, closed - 4 * HOUR), vec![1]);
    assert_eq!(total(&store), want);

    // Reopened: the merged segments are what the catalog holds, and replay adds
    // nothing twice.
    drop(store);
    let store = Store::open(dir.path(), test_config()).unwrap();
    assert_eq!(levels(&store, OPEN), vec![3]);
    assert_eq!(total(&store), want);
}

#[test]
fn background_compactor_merges_after_flushes() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(
        dir.path(),
        StoreConfig {
            background_flush: true,
            background_compaction: true,
            // Only the flush nudges can explain a merge within this test.
            compaction_interval: Duration::from_secs(3600),
            open_merge_segments: 2,
            ..test_config()
        },
    )
    .unwrap();
    let hour = profiledb_storage::now_ms().div_euclid(HOUR) * HOUR;
    let mut want = 0;
    for i in 0..6 {
        want += flush_one(&store, hour, i);
    }
    // Which tiers form depends on how the merges interleave with the flushes; what
    // must hold once the compactor is idle is the tier invariant: no level keeps two
    // segments (so 6 flushes end as at most 3 segments).
    let settled = |l: &[u32]| l.windows(2).all(|w| w[0] != w[1]);
    let deadline = Instant::now() + Duration::from_secs(60);
    while !settled(&levels(&store, hour)) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    let l = levels(&store, hour);
    assert!(settled(&l), "levels {l:?}");
    assert!(l.len() <= 3, "levels {l:?}");
    assert_eq!(total(&store), want);
    let compacted = store
        .stats()
        .partitions_compacted
        .load(std::sync::atomic::Ordering::Relaxed);
    assert!(compacted >= 1, "{compacted}");
}

#[test]
fn tiers_over_the_size_bound_wait_for_the_hour_to_close() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(
        dir.path(),
        StoreConfig {
            open_merge_segments: 2,
            // Smaller than any segment: every tier is over it.
            open_merge_max_bytes: 1,
            ..test_config()
        },
    )
    .unwrap();
    let mut want = 0;
    for n in 0..4 {
        want += flush_one(&store, OPEN, n);
    }
    let r = store.merge_open_partitions_at(NOW).unwrap();
    assert!(r.compacted.is_empty() && r.skipped.is_empty());
    assert_eq!(levels(&store, OPEN), vec![0, 0, 0, 0]);
    let r = store
        .compact_at(None, None, OPEN + 2 * HOUR, &|_| {})
        .unwrap();
    assert_eq!(r.compacted.len(), 1);
    assert_eq!(levels(&store, OPEN), vec![1]);
    assert_eq!(total(&store), want);
}
