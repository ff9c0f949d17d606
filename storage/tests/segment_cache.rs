//! The decoded-segment cache is warm without queries: a flushed segment is decoded
//! as it is written, and after a restart the newest segments are decoded in the
//! background. Queries then read them from memory, and answers are unchanged.

mod common;

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use common::{build_batch, querier, test_config, TFrame, TSample};
use profiledb_storage::{Selector, Store, StoreConfig, TenantId, TimeRange};

const HOUR: i64 = 3_600_000;

fn samples(partition: i64) -> Vec<TSample> {
    (0..50)
        .map(|i| TSample {
            labels: vec![("service_name".into(), format!("svc{}", i % 3))],
            ts: partition * HOUR + i * 1000,
            stack: vec![
                TFrame::Func("main".into()),
                TFrame::Func(format!("work{}", i % 7)),
            ],
            value: i + 1,
        })
        .collect()
}

fn misses(store: &Store) -> u64 {
    store.stats().segment_cache_misses.load(Ordering::Relaxed)
}

/// Waits (polling, no timing assertion) until `cond` holds; fails after 60 s.
fn eventually(what: &str, cond: impl Fn() -> bool) {
    let t = Instant::now();
    while !cond() {
        assert!(t.elapsed() < Duration::from_secs(60), "never: {what}");
        std::thread::sleep(Duration::from_millis(5));
    }
}

#[test]
fn flushed_and_restarted_segments_are_decoded_before_queries() {
    let dir = tempfile::tempdir().unwrap();
    let tenant = TenantId::new("t").unwrap();
    let cfg = StoreConfig {
        warm_segment_cache: true,
        ..test_config()
    };
    let all = TimeRange::new(0, 10 * HOUR);
    let want = {
        let store = Store::open(dir.path(), cfg.clone()).unwrap();
        for p in 0..3 {
            store.write(build_batch(&tenant, &samples(p))).unwrap();
        }
        store.flush().unwrap();
        assert_eq!(store.gauges().segments, 3);
        // Each flushed segment was decoded as it was written: the query reads none.
        let before = misses(&store);
        let tree = querier(&store)
            .merge_tree(&tenant, &Selector::default(), all)
            .unwrap();
        assert_eq!(misses(&store), before);
        drop(store);
        tree.folded()
    };
    assert_eq!(want.values().sum::<i64>(), 3 * (1..=50).sum::<i64>());

    // After a restart the warm-up decodes all three (they fit in half the budget).
    let store = Store::open(dir.path(), cfg).unwrap();
    eventually("three segments warmed", || misses(&store) == 3);
    let tree = querier(&store)
        .merge_tree(&tenant, &Selector::default(), all)
        .unwrap();
    assert_eq!(tree.folded(), want);
    assert_eq!(misses(&store), 3, "the query found every segment decoded");
    drop(store);

    // Off: nothing is decoded until a query needs it.
    let store = Store::open(
        dir.path(),
        StoreConfig {
            warm_segment_cache: false,
            ..test_config()
        },
    )
    .unwrap();
    std::thread::sleep(Duration::from_millis(50));
    assert_eq!(misses(&store), 0);
    let tree = querier(&store)
        .merge_tree(&tenant, &Selector::default(), all)
        .unwrap();
    assert_eq!(tree.folded(), want);
    assert_eq!(misses(&store), 3);
}
