//! Segment lifecycle on a store: compaction and downsampling keep every answer
//! (merge totals per stack, group-by rows, series totals at the coarse step),
//! retention removes whole segments, and queries plus ingest keep working while
//! compaction runs.

mod common;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::*;
use profiledb_storage::{
    now_ms, DownsampleRule, Labels, Selector, Store, StoreConfig, TenantId, TimeRange,
};
use profiledb_storage::{GroupByQuery, GroupKey};
use profiledb_storage::{Querier, QueryLimits};
use proptest::prelude::*;

const HOUR: i64 = 3_600_000;
const DAY: i64 = 24 * HOUR;
/// An hour boundary in September 2020.
const BASE: i64 = 1_600_002_000_000 - 1_600_002_000_000 % HOUR;

fn cfg(downsample: Vec<DownsampleRule>) -> StoreConfig {
    StoreConfig {
        downsample,
        ..test_config()
    }
}

#[derive(Debug, PartialEq)]
struct Answers {
    folded: BTreeMap<String, i64>,
    folded_svc1: BTreeMap<String, i64>,
    groups: Vec<(Vec<String>, i64)>,
    totals: BTreeMap<Labels, BTreeMap<i64, i64>>,
}

fn answers(store: &Store, t: &TenantId, range: TimeRange) -> Answers {
    let engine = querier(store);
    let all = Selector::default();
    let svc1 = Selector::parse("{service_name=\"svc1\"}").unwrap();
    let q = GroupByQuery {
        keys: vec![
            GroupKey::Label("service_name".into()),
            GroupKey::FunctionTotal,
        ],
        ..Default::default()
    };
    Answers {
        folded: querier(store).merge_tree(t, &all, range).unwrap().folded(),
        folded_svc1: querier(store).merge_tree(t, &svc1, range).unwrap().folded(),
        groups: engine.group_by(t, &all, range, &q).unwrap().sorted(0),
        totals: querier(store).series_totals(t, &all, range).unwrap(),
    }
}

fn rebucket(
    totals: &BTreeMap<Labels, BTreeMap<i64, i64>>,
    step: i64,
) -> BTreeMap<Labels, BTreeMap<i64, i64>> {
    totals
        .iter()
        .map(|(l, pts)| {
            let mut m: BTreeMap<i64, i64> = BTreeMap::new();
            for (t, v) in pts {
                *m.entry(t.div_euclid(step) * step).or_default() += v;
            }
            m.retain(|_, v| *v != 0);
            (l.clone(), m)
        })
        .collect()
}

fn sample(series: u8, ts: i64, stack: u8, value: i64) -> TSample {
    let funcs = ["main", "serve", "hash", "parse", "gc", "idle"];
    let mut frames = vec![TFrame::Func("main".into())];
    for k in 0..(stack % 4) {
        frames.push(TFrame::Func(
            funcs[((stack / 4 + k) as usize) % funcs.len()].into(),
        ));
    }
    if stack.is_multiple_of(3) {
        frames.push(TFrame::Addr(0x40 + u64::from(stack)));
    }
    TSample {
        labels: vec![
            ("service_name".into(), format!("svc{}", series % 3)),
            ("pod".into(), format!("p{series}")),
        ],
        ts,
        stack: frames,
        value,
    }
}

/// High-water mark of the process's resident set (Linux), for the figures.
fn peak_rss() -> String {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmHWM:"))
                .map(|l| l.trim_start_matches("VmHWM:").trim().to_string())
        })
        .unwrap_or_else(|| "n/a".into())
}

fn per_partition_segments(store: &Store) -> BTreeMap<i64, usize> {
    let mut m = BTreeMap::new();
    for s in store.segments() {
        *m.entry(s.partition_start_ms).or_insert(0) += 1;
    }
    m
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 6, ..ProptestConfig::default() })]

    /// Random data over many partitions, flushed in several rounds (several segments
    /// per partition): answers are identical after compaction, and after
    /// downsampling identical except series totals, which equal the originals
    /// re-bucketed to the coarse step.
    #[test]
    fn compaction_and_downsampling_keep_answers(
        rows in prop::collection::vec((0u8..5, 0i64..(8 * HOUR), 0u8..16, 1i64..1000), 1..300),
        rounds in 1usize..4,
    ) {
        let dir = tempfile::tempdir().unwrap();
        let t = TenantId::default();
        let range = TimeRange::all();
        let before;
        {
            let store = Store::open(dir.path(), cfg(vec![])).unwrap();
            let chunk = rows.len().div_ceil(rounds);
            for part in rows.chunks(chunk) {
                let samples: Vec<TSample> =
                    part.iter().map(|&(s, dt, st, v)| sample(s, BASE + dt, st, v)).collect();
                store.write(build_batch(&t, &samples)).unwrap();
                store.flush().unwrap();
            }
            before = answers(&store, &t, range);
            let n_before = store.segments().len();
            let r = store.compact(None, None, &|_| {}).unwrap();
            prop_assert!(r.skipped.is_empty(), "{:?}", r.skipped);
            prop_assert_eq!(r.segments_before, n_before);
            prop_assert!(per_partition_segments(&store).values().all(|&n| n == 1));
            prop_assert_eq!(&answers(&store, &t, range), &before);
            assert_files_are_live(&store);
            // Nothing left to do: a second run is a no-op.
            let again = store.compact(None, None, &|_| {}).unwrap();
            prop_assert!(again.compacted.is_empty(), "second run compacted {:?}", again.compacted);
        }
        // Downsample to 1 minute, then to 1 hour (default rules, simulated clocks).
        // A rule's age counts from the end of the block the data is kept in: the
        // data's four weeks (the epoch's), a wider block by then.
        let data_end = BASE + 9 * HOUR;
        let block_end = data_end.div_euclid(28 * DAY) * 28 * DAY + 28 * DAY;
        let mut prev = None;
        for (now, step) in [(block_end + 8 * DAY, 60_000), (block_end + 31 * DAY, HOUR)] {
            let store = Store::open(dir.path(), cfg(DownsampleRule::defaults())).unwrap();
            prop_assert_eq!(&answers(&store, &t, range), prev.as_ref().unwrap_or(&before), "reopened");
            let r = store.compact_at(None, None, now, &|_| {}).unwrap();
            prop_assert!(r.skipped.is_empty(), "{:?}", r.skipped);
            prop_assert!(store.segments().iter().all(|s| s.step_ms == step));
            let after = answers(&store, &t, range);
            prop_assert_eq!(&after.folded, &before.folded);
            prop_assert_eq!(&after.folded_svc1, &before.folded_svc1);
            prop_assert_eq!(&after.groups, &before.groups);
            prop_assert_eq!(&after.totals, &rebucket(&before.totals, step));
            assert_files_are_live(&store);
            prev = Some(after);
        }
    }
}

#[test]
fn retention_deletes_old_segments_everywhere() {
    let dir = tempfile::tempdir().unwrap();
    let now = now_ms();
    let (t, other) = (TenantId::new("acme").unwrap(), TenantId::default());
    let old: Vec<TSample> = (0..20)
        .map(|i| sample(i, now - 10 * DAY + i64::from(i) * HOUR, i, 10))
        .collect();
    let new: Vec<TSample> = (0..5)
        .map(|i| sample(i, now - 2 * HOUR - i64::from(i) * 60_000, i, 1))
        .collect();
    let all = Selector::default();
    let range = TimeRange::all();
    {
        let store = Store::open(dir.path(), cfg(vec![])).unwrap();
        let engine = Querier::new(&store, 256 << 20, QueryLimits::default());
        for tenant in [&t, &other] {
            store.write(build_batch(tenant, &old)).unwrap();
            store.write(build_batch(tenant, &new)).unwrap();
        }
        store.flush().unwrap();
        let v0 = store.segments_version();
        let cached = engine.merge_tree(&t, &all, range).unwrap();
        assert_eq!(cached.total(), 200 + 5);
        let n0 = store.segments().len();
        let s = store
            .set_retention(&t, Some(Duration::from_secs(7 * 86_400)))
            .unwrap();
        assert_eq!(s.max_age_ms, Some(7 * DAY));
        let r = store.apply_retention().unwrap();
        assert_eq!(r.deleted.len(), 20, "one segment per old hour");
        assert_eq!(r.segments_after, n0 - 20);
        assert!(r.bytes_deleted > 0);
        assert!(store.segments_version() > v0);
        // Queries (cached or not) see only the newer data.
        assert_eq!(engine.merge_tree(&t, &all, range).unwrap().total(), 5);
        assert_eq!(
            querier(&store).merge_tree(&t, &all, range).unwrap().total(),
            5
        );
        assert_eq!(
            querier(&store)
                .merge_tree(&other, &all, range)
                .unwrap()
                .total(),
            205
        );
        assert_files_are_live(&store);
        // Idempotent.
        assert!(store.apply_retention().unwrap().deleted.is_empty());
    }
    // Gone from the catalog too, and the setting persists.
    let store = Store::open(dir.path(), cfg(vec![])).unwrap();
    assert_eq!(store.tenant_settings(&t).unwrap().max_age_ms, Some(7 * DAY));
    assert_eq!(
        querier(&store).merge_tree(&t, &all, range).unwrap().total(),
        5
    );
    assert_eq!(store.stats().segments_adopted.load(Ordering::Relaxed), 0);
    assert!(store
        .segments()
        .iter()
        .filter(|s| s.tenant == t)
        .all(|s| s.max_time_ms > now - 7 * DAY));
    // Clearing keeps everything from now on.
    store.set_retention(&t, None).unwrap();
    assert_eq!(store.tenant_settings(&t).unwrap().max_age_ms, None);
}

/// Queries and ingest during repeated compactions: a query's total always lies
/// between what was acknowledged before it started and what was acknowledged (or in
/// flight) when it ended — nothing duplicated, nothing missing.
#[test]
fn queries_and_ingest_during_compaction() {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(Store::open(dir.path(), cfg(vec![])).unwrap());
    let t = TenantId::default();
    let acked = Arc::new(AtomicI64::new(0));
    let started = Arc::new(AtomicI64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    fn batch(i: i64) -> Vec<TSample> {
        (0..30)
            .map(|j| {
                sample(
                    (i % 5) as u8,
                    BASE + (i * 7 + j) * 97 % 43_200 * 1000,
                    j as u8,
                    1 + j,
                )
            })
            .collect()
    }
    fn batch_total(i: i64) -> i64 {
        batch(i).iter().map(|s| s.value).sum()
    }

    let writer = {
        let (store, t, acked, started, stop) = (
            store.clone(),
            t.clone(),
            acked.clone(),
            started.clone(),
            stop.clone(),
        );
        std::thread::spawn(move || {
            let mut i = 0;
            while !stop.load(Ordering::SeqCst) {
                started.fetch_add(batch_total(i), Ordering::SeqCst);
                store.write(build_batch(&t, &batch(i))).unwrap();
                acked.fetch_add(batch_total(i), Ordering::SeqCst);
                if i % 4 == 3 {
                    store.flush().unwrap();
                }
                i += 1;
            }
        })
    };
    let querier = {
        let (store, t, acked, started, stop) = (
            store.clone(),
            t.clone(),
            acked.clone(),
            started.clone(),
            stop.clone(),
        );
        std::thread::spawn(move || {
            let mut n = 0;
            while !stop.load(Ordering::SeqCst) {
                let lo = acked.load(Ordering::SeqCst);
                let got = querier(&store)
                    .merge_tree(&t, &Selector::default(), TimeRange::all())
                    .unwrap()
                    .total();
                let hi = started.load(Ordering::SeqCst);
                assert!(lo <= got && got <= hi, "query saw {got}, acked {lo}..{hi}");
                let totals: i64 = querier(&store)
                    .series_totals(&t, &Selector::default(), TimeRange::all())
                    .unwrap()
                    .values()
                    .flat_map(|m| m.values())
                    .sum();
                let hi2 = started.load(Ordering::SeqCst);
                assert!(
                    lo <= totals && totals <= hi2,
                    "totals {totals}, acked {lo}..{hi2}"
                );
                n += 1;
            }
            n
        })
    };
    let deadline = Instant::now() + Duration::from_secs(6);
    let mut compactions = 0;
    while Instant::now() < deadline {
        let r = store.compact(None, None, &|_| {}).unwrap();
        assert!(r.skipped.is_empty(), "{:?}", r.skipped);
        compactions += r.compacted.len();
        std::thread::sleep(Duration::from_millis(20));
    }
    stop.store(true, Ordering::SeqCst);
    writer.join().unwrap();
    let queries = querier.join().unwrap();
    store.flush().unwrap();
    store.compact(None, None, &|_| {}).unwrap();
    let total = common::querier(&store)
        .merge_tree(&t, &Selector::default(), TimeRange::all())
        .unwrap()
        .total();
    assert_eq!(total, acked.load(Ordering::SeqCst));
    assert_files_are_live(&store);
    eprintln!("concurrency: {compactions} partition compactions, {queries} query rounds");
    assert!(compactions > 0 && queries > 0);
}

/// Bytes on disk for a generated fleet over 7 simulated days, before and after
/// compaction and after downsampling. Prints the figures (run with --nocapture).
#[test]
fn fleet_bytes_before_and_after() {
    let dir = tempfile::tempdir().unwrap();
    let t = TenantId::default();
    let days = 7i64;
    let (hosts, per_step) = (12u8, 4i64);
    let mut expect = 0i64;
    let before = {
        let store = Store::open(
            dir.path(),
            StoreConfig {
                fsync: profiledb_storage::FsyncPolicy::Never,
                ..cfg(vec![])
            },
        )
        .unwrap();
        // 20 simulated minutes per batch, flushes after the 2nd and 3rd of each hour:
        // two level-0 segments per hourly partition.
        for chunk in 0..(days * 24 * 3) {
            let start = BASE + chunk * 20 * 60_000;
            let mut samples = Vec::new();
            for step in 0..(20 * 6) {
                let ts = start + step * 10_000;
                for k in 0..per_step {
                    let h = ((step + k) % i64::from(hosts)) as u8;
                    let v = 1 + (step * 31 + k * 7) % 97;
                    samples.push(sample(h, ts, ((step * 5 + k) % 64) as u8, v));
                    expect += v;
                }
            }
            store.write(build_batch(&t, &samples)).unwrap();
            if chunk % 3 != 0 {
                store.flush().unwrap();
            }
        }
        store.flush().unwrap();
        let segs = store.segments();
        let bytes: u64 = segs.iter().map(|s| s.size_bytes).sum();
        // CPU only: decode, merge and encode every partition without any I/O sync.
        let cpu = Instant::now();
        let mut parts: BTreeMap<i64, Vec<&profiledb_storage::SegmentMeta>> = BTreeMap::new();
        for m in &segs {
            parts.entry(m.partition_start_ms).or_default().push(m);
        }
        let mut encoded = 0u64;
        for ms in parts.values() {
            let mut merger = profiledb_storage::Merger::new(profiledb_storage::OutputFrame {
                start_ms: ms[0].partition_start_ms,
                width_ms: ms[0].partition_ms,
                step_ms: 10_000,
            });
            for m in ms {
                let f = profiledb_storage::SegmentFile::open(&dir.path().join(&m.file)).unwrap();
                merger.add(&f.load().unwrap()).unwrap();
            }
            let mut meta = ms[0].clone();
            meta.sources = Vec::new();
            let (b, _) = profiledb_storage::encode_segment(merger.finish(meta), 3).unwrap();
            encoded += b.len() as u64;
        }
        let cpu_secs = cpu.elapsed().as_secs_f64();
        eprintln!(
            "fleet merge+encode without I/O: {bytes} -> {encoded} bytes in {cpu_secs:.2} s, {:.2} MB/s of input",
            bytes as f64 / 1e6 / cpu_secs
        );
        let started = Instant::now();
        let r = store.compact(None, None, &|_| {}).unwrap();
        let secs = started.elapsed().as_secs_f64();
        assert!(r.skipped.is_empty());
        assert_eq!(
            querier(&store)
                .merge_tree(&t, &Selector::default(), TimeRange::all())
                .unwrap()
                .total(),
            expect
        );
        eprintln!(
            "fleet 7 days: {} segments, {} bytes -> compaction: {} segments, {} bytes ({:.1}%), {:.2} s, {:.2} MB/s of input, peak RSS {}",
            segs.len(),
            bytes,
            r.segments_after,
            r.bytes_after,
            100.0 * r.bytes_after as f64 / bytes as f64,
            secs,
            bytes as f64 / 1e6 / secs,
            peak_rss(),
        );
        r.bytes_after
    };
    let data_end = BASE + days * DAY;
    for (now, label) in [(data_end + 8 * DAY, "60 s"), (data_end + 31 * DAY, "1 h")] {
        let store = Store::open(dir.path(), cfg(DownsampleRule::defaults())).unwrap();
        let r = store.compact_at(None, None, now, &|_| {}).unwrap();
        assert_eq!(
            querier(&store)
                .merge_tree(&t, &Selector::default(), TimeRange::all())
                .unwrap()
                .total(),
            expect
        );
        eprintln!(
            "fleet downsampled to {label}: {} bytes ({:.1}% of compacted), {} ms",
            r.bytes_after,
            100.0 * r.bytes_after as f64 / before as f64,
            r.elapsed_ms
        );
    }
}
