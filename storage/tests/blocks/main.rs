//! Day blocks on one node: once a UTC day has been over for the block delay,
//! compaction merges its hour segments into one segment spanning the day (and
//! once a week is over, its days into a wide block; once four weeks and the
//! week after them are over, their weeks into a wider block). The answers stay exact, a
//! WAL replay after the block does not apply its records twice, late hours merge
//! into the block, and no block forms over unflushed data.

#[path = "../common/mod.rs"]
mod common;

use common::*;
use profiledb_storage::{
    BlockPolicy, SegmentMeta, Selector, Store, StoreConfig, TenantId, TimeRange,
};

mod shares;

const HOUR: i64 = 3_600_000;
const DAY: i64 = 24 * HOUR;
/// A UTC midnight.
const D: i64 = 1_600_000_000_000 / DAY * DAY;
/// When the default block delay (2 h) has passed for day `D`.
const DUE: i64 = D + DAY + 2 * HOUR;

fn sample(ts: i64, service: &str, leaf: &str, value: i64) -> TSample {
    TSample {
        labels: vec![("service_name".into(), service.into())],
        ts,
        stack: vec![TFrame::Func("main".into()), TFrame::Func(leaf.into())],
        value,
    }
}

fn write(store: &Store, reference: &mut Reference, samples: &[TSample]) {
    store
        .write(build_batch(&TenantId::default(), samples))
        .expect("write");
    reference.add(samples, test_config().step_ms);
}

fn segments(store: &Store) -> Vec<(i64, i64)> {
    let mut s: Vec<(i64, i64)> = store
        .segments()
        .iter()
        .map(|m: &SegmentMeta| (m.partition_start_ms, m.partition_ms))
        .collect();
    s.sort_unstable();
    s
}

/// The (start, width) of each segment of `tenant`, in order.
fn segments_of(store: &Store, tenant: &TenantId) -> Vec<(i64, i64)> {
    let mut s: Vec<(i64, i64)> = store
        .segments()
        .iter()
        .filter(|m| m.tenant == *tenant)
        .map(|m| (m.partition_start_ms, m.partition_ms))
        .collect();
    s.sort_unstable();
    s
}

/// Each `(ts, leaf)` written as one flushed write to the default tenant (value 3,
/// into `reference`) and to `other` (value 5).
fn write_flushed(
    store: &Store,
    reference: &mut Reference,
    other: &TenantId,
    written: &[(i64, &str)],
) {
    for &(ts, leaf) in written {
        write(store, reference, &[sample(ts, "a", leaf, 3)]);
        store
            .write(build_batch(other, &[sample(ts, "a", leaf, 5)]))
            .unwrap();
        store.flush().unwrap();
    }
}

/// Every window the tests read: each hour written, ranges cutting into steps and
/// hours, the whole day, and everything.
fn windows() -> Vec<(i64, i64)> {
    vec![
        (D, D + HOUR),
        (D + 5 * HOUR, D + 6 * HOUR),
        (D + 23 * HOUR, D + DAY),
        (D + 5 * HOUR + 10_000, D + 23 * HOUR + 30_000),
        (D, D + DAY),
        (i64::MIN / 4, i64::MAX / 4),
    ]
}

/// The merged flame graph of every window equals the reference's.
fn check(store: &Store, reference: &Reference, when: &str) {
    check_in(store, reference, when, &windows());
}

/// The merged flame graph of each of `windows` equals the reference's.
fn check_in(store: &Store, reference: &Reference, when: &str, windows: &[(i64, i64)]) {
    for &(start, end) in windows {
        let tree = querier(store)
            .merge_tree(
                &TenantId::default(),
                &Selector::default(),
                TimeRange::new(start, end),
            )
            .expect("merge");
        assert_eq!(
            tree.folded(),
            reference.folded(|_| true, start, end),
            "{when}: [{start}, {end})"
        );
    }
}

/// Copies the files of `from` into `to` (replacing same-named ones).
fn copy_files(from: &std::path::Path, to: &std::path::Path) {
    for e in std::fs::read_dir(from).unwrap() {
        let p = e.unwrap().path();
        if p.is_file() {
            std::fs::copy(&p, to.join(p.file_name().unwrap())).unwrap();
        }
    }
}

/// The tests' store: no downsampling, so blocks keep the written step.
fn config() -> StoreConfig {
    StoreConfig {
        downsample: Vec::new(),
        ..test_config()
    }
}

fn compact(store: &Store, now: i64) {
    let r = store.compact_at(None, None, now, &|_| {}).expect("compact");
    assert!(r.skipped.is_empty(), "{:?}", r.skipped);
}

#[test]
fn a_past_day_becomes_one_block_and_a_replay_does_not_apply_it_again() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = config();
    let saved_wal = tempfile::tempdir().unwrap();
    let mut reference = Reference::default();
    {
        let store = Store::open(dir.path(), cfg.clone()).unwrap();
        write(&store, &mut reference, &[sample(D + 1_000, "a", "read", 3)]);
        write(
            &store,
            &mut reference,
            &[
                sample(D + 5 * HOUR + 12_000, "a", "parse", 5),
                sample(D + 5 * HOUR + 31_000, "b", "parse", 7),
            ],
        );
        store.flush().unwrap();
        // A second segment in hour 5, and the day's last hour.
        write(
            &store,
            &mut reference,
            &[
                sample(D + 5 * HOUR + 12_000, "a", "parse", 11),
                sample(D + 23 * HOUR + 59 * 60_000, "b", "write", 13),
            ],
        );
        // The WAL as it is before the flush deletes it: restored below, as if
        // that deletion had failed (it is retried after the next flush) and the
        // process had then died.
        copy_files(&dir.path().join("wal"), saved_wal.path());
        store.flush().unwrap();
        check(&store, &reference, "hours");

        // Before the day's delay: its first six hours are a part block (due
        // since D + 8 h); the last six hours' part is not due yet either.
        compact(&store, DUE - 1);
        assert_eq!(segments(&store), [(D, 6 * HOUR), (D + 23 * HOUR, HOUR)]);
        check(&store, &reference, "part block");
        compact(&store, DUE);
        assert_eq!(segments(&store), [(D, DAY)]);
        let block = &store.segments()[0];
        assert_eq!(
            (block.min_time_ms, block.max_time_ms),
            (D, D + 23 * HOUR + 59 * 60_000)
        );
        check(&store, &reference, "block");
    }
    // Every record is back in the WAL: replayed into the head, they would count
    // twice. A block covers all its hours.
    copy_files(saved_wal.path(), &dir.path().join("wal"));
    let store = Store::open(dir.path(), cfg.clone()).unwrap();
    check(&store, &reference, "reopened");
    store.flush().unwrap();
    assert_eq!(segments(&store), [(D, DAY)]);

    // A late write lands in its hour, then is merged into the block (block first).
    write(
        &store,
        &mut reference,
        &[sample(D + 7 * HOUR, "c", "late", 17)],
    );
    store.flush().unwrap();
    assert_eq!(segments(&store), [(D, DAY), (D + 7 * HOUR, HOUR)]);
    check(&store, &reference, "late hour beside the block");
    compact(&store, DUE + HOUR);
    assert_eq!(segments(&store), [(D, DAY)]);
    check(&store, &reference, "late hour merged");
    drop(store);
    let store = Store::open(dir.path(), cfg).unwrap();
    check(&store, &reference, "reopened after the late merge");
}

/// A store with `blocks` holding one segment in each of hours 1 and 2 of day `D`.
fn two_hours(blocks: BlockPolicy) -> (tempfile::TempDir, Store, Reference) {
    let dir = tempfile::tempdir().unwrap();
    let cfg = StoreConfig { blocks, ..config() };
    let store = Store::open(dir.path(), cfg).unwrap();
    let mut reference = Reference::default();
    write(&store, &mut reference, &[sample(D + HOUR, "a", "x", 1)]);
    store.flush().unwrap();
    write(&store, &mut reference, &[sample(D + 2 * HOUR, "a", "y", 2)]);
    store.flush().unwrap();
    (dir, store, reference)
}

#[test]
fn no_block_forms_over_a_head_partition_of_its_day() {
    let (_dir, store, mut reference) = two_hours(BlockPolicy::default());
    // Unflushed data in hour 9 of the day: its records may have LSNs below the
    // block's, so the block waits.
    write(&store, &mut reference, &[sample(D + 9 * HOUR, "a", "z", 4)]);
    compact(&store, DUE);
    assert_eq!(segments(&store), [(D + HOUR, HOUR), (D + 2 * HOUR, HOUR)]);
    check(&store, &reference, "head in the day");
    store.flush().unwrap();
    compact(&store, DUE);
    assert_eq!(segments(&store), [(D, DAY)]);
    check(&store, &reference, "after the flush");
}

/// Until the day is due, its six-hour parts become part blocks as each has been
/// over for the delay; a late hour merges into its part block, and the day block
/// takes the part blocks and hours alike.
#[test]
fn the_parts_of_a_day_become_part_blocks_before_the_day_block() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = config();
    let store = Store::open(dir.path(), cfg.clone()).unwrap();
    let mut reference = Reference::default();
    for (h, leaf) in [(1, "a1"), (2, "a2"), (7, "a7"), (13, "a13")] {
        write(
            &store,
            &mut reference,
            &[sample(D + h * HOUR + 5_000, "a", leaf, h + 1)],
        );
        store.flush().unwrap();
    }
    let hours = [
        (D + HOUR, HOUR),
        (D + 2 * HOUR, HOUR),
        (D + 7 * HOUR, HOUR),
        (D + 13 * HOUR, HOUR),
    ];
    compact(&store, D + 8 * HOUR - 1);
    assert_eq!(segments(&store), hours);
    compact(&store, D + 8 * HOUR);
    assert_eq!(
        segments(&store),
        [(D, 6 * HOUR), (D + 7 * HOUR, HOUR), (D + 13 * HOUR, HOUR)]
    );
    check(&store, &reference, "first part block");
    // A late hour of the first part merges into its part block.
    write(
        &store,
        &mut reference,
        &[sample(D + 3 * HOUR, "b", "late", 17)],
    );
    store.flush().unwrap();
    assert_eq!(segments(&store).len(), 4);
    // Hour 7's part is due too, but a lone hour is not rewritten into one.
    compact(&store, D + 14 * HOUR);
    assert_eq!(
        segments(&store),
        [(D, 6 * HOUR), (D + 7 * HOUR, HOUR), (D + 13 * HOUR, HOUR)]
    );
    check(&store, &reference, "late hour in its part block");
    drop(store);
    let store = Store::open(dir.path(), cfg).unwrap();
    check(&store, &reference, "reopened");
    compact(&store, DUE);
    assert_eq!(segments(&store), [(D, DAY)]);
    check(&store, &reference, "day block from parts");
}

/// Once the week of two day blocks and the day after it are over for the delay,
/// they become one wide block; the next week's hour stays apart, a late hour of
/// the week merges into the wide block, and a tenant kept for two weeks only
/// keeps its day blocks.
#[test]
fn the_days_of_a_week_become_one_wide_block_once_it_is_over() {
    // The week of `D` (the epoch's weekday, Thursday, three days before `D`).
    const WEEK: i64 = 7 * DAY;
    let w = D.div_euclid(WEEK) * WEEK;
    assert_eq!(w, D - 3 * DAY);
    let next = w + WEEK;
    let dir = tempfile::tempdir().unwrap();
    let cfg = config();
    let store = Store::open(dir.path(), cfg.clone()).unwrap();
    let short = TenantId::new("short").unwrap();
    store
        .set_retention(&short, Some(std::time::Duration::from_secs(14 * 86_400)))
        .unwrap();
    let mut reference = Reference::default();
    // Two hours a day, so each day is a block before its week is (a lone hour
    // is not rewritten into one).
    let written = [
        (D + 5 * HOUR, "d0"),
        (D + 7 * HOUR, "d0b"),
        (D + DAY + 9 * HOUR, "d1"),
        (D + DAY + 10 * HOUR, "d1b"),
        (next + HOUR + 10_000, "n0"),
    ];
    write_flushed(&store, &mut reference, &short, &written);
    let of = |tenant: &TenantId| segments_of(&store, tenant);
    let t = TenantId::default();
    // Due once the day after the week is over for the delay too.
    let due = next + DAY + 2 * HOUR;
    let days = [(D, DAY), (D + DAY, DAY), (next + HOUR, HOUR)];
    compact(&store, due - 1);
    assert_eq!(of(&t), days);
    compact(&store, due);
    assert_eq!(of(&t), [(w, WEEK), (next + HOUR, HOUR)]);
    assert_eq!(of(&short), days, "two weeks' retention: no wide blocks");
    check(&store, &reference, "wide block");
    // A late hour of the week lands in its hour, then in the wide block.
    write(
        &store,
        &mut reference,
        &[sample(w + 6 * DAY + 3 * HOUR, "b", "late", 11)],
    );
    store.flush().unwrap();
    assert_eq!(of(&t).len(), 3);
    compact(&store, due + HOUR);
    assert_eq!(of(&t), [(w, WEEK), (next + HOUR, HOUR)]);
    drop(store);
    let store = Store::open(dir.path(), cfg).unwrap();
    check(&store, &reference, "late hour in the wide block, reopened");
    check_in(
        &store,
        &reference,
        "the week, and a window cutting through it",
        &[(w, next), (D + DAY + 9 * HOUR, next + 2 * HOUR)],
    );
}

/// Once four epoch weeks and the week after them are over for the delay, their
/// week blocks become one wider block; the next four weeks' hour stays apart,
/// and a tenant kept for eight weeks only keeps its week blocks.
#[test]
fn the_weeks_of_four_become_one_wider_block_once_they_and_the_next_are_over() {
    const WEEK: i64 = 7 * DAY;
    const WIDER: i64 = 4 * WEEK;
    let b = D.div_euclid(WIDER) * WIDER;
    let (w1, w3, next) = (b, b + 2 * WEEK, b + WIDER);
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), config()).unwrap();
    let short = TenantId::new("short").unwrap();
    store
        .set_retention(&short, Some(std::time::Duration::from_secs(56 * 86_400)))
        .unwrap();
    let mut reference = Reference::default();
    // Two hours in two days of two weeks, so each week is a block of its own
    // first (a lone hour is not rewritten into one).
    let written = [
        (w1 + 5 * HOUR, "w1"),
        (w1 + DAY + 5 * HOUR, "w1b"),
        (w3 + 9 * HOUR, "w3"),
        (w3 + 2 * DAY + 9 * HOUR, "w3b"),
        (next + HOUR + 10_000, "n0"),
    ];
    write_flushed(&store, &mut reference, &short, &written);
    let of = |tenant: &TenantId| segments_of(&store, tenant);
    let t = TenantId::default();
    let weeks = [(w1, WEEK), (w3, WEEK), (next + HOUR, HOUR)];
    // The last week is over (and a day after it): weeks, not yet the wider block.
    compact(&store, w3 + WEEK + DAY + 2 * HOUR);
    assert_eq!(of(&t), weeks);
    let due = next + WEEK + 2 * HOUR;
    compact(&store, due - 1);
    assert_eq!(of(&t), weeks);
    compact(&store, due);
    assert_eq!(of(&t), [(b, WIDER), (next + HOUR, HOUR)]);
    assert_eq!(of(&short), weeks, "eight weeks' retention: no wider blocks");
    drop(store);
    let store = Store::open(dir.path(), config()).unwrap();
    check_in(
        &store,
        &reference,
        "the wider block, reopened, and windows cutting through it",
        &[
            (b, next),
            (w1 + DAY, w3 + 3 * DAY),
            (w3, next + 2 * HOUR),
            (i64::MIN / 4, i64::MAX / 4),
            // Holding all of the block's data though not all of it (read as the
            // whole block), and ending right at its last sample (not).
            (w1 + HOUR, w3 + 3 * DAY),
            (w1 + HOUR, w3 + 2 * DAY + 9 * HOUR),
        ],
    );
}

/// A merge holds its output and one source at a time, not every source: twelve
/// hours with the same 1,500 stacks, each decoding to its own copy of them,
/// merge into a day block under a budget half their decoded sum (the merged
/// output keeps the stacks once).
#[test]
fn a_merge_holds_one_source_at_a_time() {
    let dir = tempfile::tempdir().unwrap();
    let mut reference = Reference::default();
    let hour = |h: i64| -> Vec<TSample> {
        (0..1500)
            .map(|i| {
                let name = format!("fleet::service::module_{}::handler_number_{i}", i % 7);
                sample(D + h * HOUR + 10_000, "a", &name, i + 1)
            })
            .collect()
    };
    let decoded_sum = {
        let store = Store::open(dir.path(), config()).unwrap();
        for h in 0..12 {
            write(&store, &mut reference, &hour(h));
            store.flush().unwrap();
        }
        assert_eq!(segments(&store).len(), 12);
        // Every hour decoded into the segment cache: their summed weight.
        check(&store, &reference, "hours");
        store.gauges().segment_cache_bytes
    };
    let with_budget = |bytes: u64| {
        let cfg = StoreConfig {
            compaction_max_bytes: bytes,
            ..config()
        };
        Store::open(dir.path(), cfg).unwrap()
    };
    // A budget under one hour's decoded size is still refused: hours kept.
    {
        let store = with_budget(decoded_sum / 24);
        let r = store.compact_at(None, None, DUE, &|_| {}).unwrap();
        assert_eq!(r.skipped.len(), 1, "{r:?}");
        assert_eq!(segments(&store).len(), 12);
    }
    let store = with_budget(decoded_sum / 2);
    compact(&store, DUE);
    assert_eq!(segments(&store), [(D, DAY)]);
    check(&store, &reference, "block under half the decoded sum");
}

#[test]
fn blocks_can_be_turned_off() {
    let (_dir, store, reference) = two_hours(BlockPolicy::OFF);
    compact(&store, DUE + DAY);
    assert_eq!(segments(&store), [(D + HOUR, HOUR), (D + 2 * HOUR, HOUR)]);
    check(&store, &reference, "no blocks");
}
