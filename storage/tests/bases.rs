//! Symbol bases on one node: day blocks of a tenant share one base holding
//! their stack tree; answers stay exact across compaction and reopen; a block
//! whose base is gone is quarantined, not served; bases nothing names are
//! deleted (at open, after compaction, after retention).

mod common;

use std::sync::atomic::Ordering;
use std::time::Duration;

use common::*;
use profiledb_storage::{SegmentMeta, Selector, Store, StoreConfig, TenantId, TimeRange};

const HOUR: i64 = 3_600_000;
const DAY: i64 = 24 * HOUR;
/// A UTC midnight.
const D: i64 = 1_600_000_000_000 / DAY * DAY;

fn config() -> StoreConfig {
    StoreConfig {
        downsample: Vec::new(),
        ..test_config()
    }
}

/// Forty stacks three frames deep (plus `extra` on day 1), in two hours of
/// each of days 0 and 1, flushed hour by hour.
fn write_days(store: &Store, reference: &mut Reference) {
    for day in 0..2i64 {
        for hour in [3i64, 17] {
            let ts = D + day * DAY + hour * HOUR;
            let mut samples: Vec<TSample> = (0..40)
                .map(|i| TSample {
                    labels: vec![("service_name".into(), "api".into())],
                    ts,
                    stack: ["main", &format!("handler_{}", i % 7), &format!("leaf_{i}")]
                        .map(|f| TFrame::Func(f.into()))
                        .to_vec(),
                    value: i + 1 + hour,
                })
                .collect();
            if day == 1 {
                samples.push(TSample {
                    labels: vec![("service_name".into(), "api".into())],
                    ts,
                    stack: vec![TFrame::Func("main".into()), TFrame::Func("extra".into())],
                    value: 1000,
                });
            }
            store
                .write(build_batch(&TenantId::default(), &samples))
                .unwrap();
            reference.add(&samples, test_config().step_ms);
            store.flush().unwrap();
        }
    }
}

fn check(store: &Store, reference: &Reference, when: &str) {
    for (start, end) in [(D, D + DAY), (D + DAY, D + 2 * DAY), (D, D + 2 * DAY)] {
        let tree = querier(store)
            .merge_tree(
                &TenantId::default(),
                &Selector::default(),
                TimeRange::new(start, end),
            )
            .unwrap();
        assert_eq!(
            tree.folded(),
            reference.folded(|_| true, start, end),
            "{when}: [{start}, {end})"
        );
    }
}

fn blocks(store: &Store) -> Vec<SegmentMeta> {
    let mut s = store.segments();
    s.sort_by_key(|m| m.partition_start_ms);
    s
}

/// Two day blocks written on one base: the first cut it, the second reads on it.
fn two_day_blocks(dir: &std::path::Path) -> (Store, Reference) {
    let store = Store::open(dir, config()).unwrap();
    let mut reference = Reference::default();
    write_days(&store, &mut reference);
    store
        .compact_at(None, None, D + 2 * DAY + 3 * HOUR, &|_| {})
        .unwrap();
    (store, reference)
}

#[test]
fn a_tenants_day_blocks_share_one_base_and_answer_exactly_after_a_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let (store, reference) = two_day_blocks(dir.path());
    let b = blocks(&store);
    assert_eq!(
        b.iter()
            .map(|m| (m.partition_start_ms, m.partition_ms))
            .collect::<Vec<_>>(),
        [(D, DAY), (D + DAY, DAY)]
    );
    let base = b[0].base.expect("the first block cut a base");
    assert_eq!(b[1].base, Some(base), "the second block reads on it");
    assert_files_are_live(&store);
    let g = store.gauges();
    assert_eq!(g.symbol_bases, 1);
    assert!(g.symbol_base_bytes > 0);
    check(&store, &reference, "compacted");
    drop(store);

    let store = Store::open(dir.path(), config()).unwrap();
    check(&store, &reference, "reopened");
    assert_files_are_live(&store);
    // Every segment verifies, the base included.
    assert!(store.verify_segments().is_empty());
}

#[test]
fn a_block_whose_base_is_gone_is_quarantined_and_a_base_nothing_names_is_deleted() {
    let dir = tempfile::tempdir().unwrap();
    let (store, _) = two_day_blocks(dir.path());
    let base = blocks(&store)[0].base.unwrap();
    drop(store);
    let bases = dir.path().join("segments/anonymous/bases");
    let path = bases.join(format!("{:016x}.base", base.id));
    // A base no segment names, as a crash between a base and its block leaves.
    let orphan = bases.join(format!("{:016x}.base", base.id + 1000));
    std::fs::copy(&path, &orphan).unwrap();
    let store = Store::open(dir.path(), config()).unwrap();
    assert!(!orphan.exists(), "a base nothing names is deleted at open");
    assert!(path.exists());
    assert_eq!(store.segments().len(), 2);
    drop(store);

    std::fs::remove_file(&path).unwrap();
    let store = Store::open(dir.path(), config()).unwrap();
    assert_eq!(
        store.stats().segments_quarantined.load(Ordering::Relaxed),
        2
    );
    assert!(store.segments().is_empty(), "neither block is served");
    assert_eq!(
        std::fs::read_dir(dir.path().join("quarantine"))
            .unwrap()
            .count(),
        2
    );
}

#[test]
fn retention_deleting_every_block_on_a_base_deletes_the_base() {
    let dir = tempfile::tempdir().unwrap();
    let (store, _) = two_day_blocks(dir.path());
    let bases = dir.path().join("segments/anonymous/bases");
    assert_eq!(std::fs::read_dir(&bases).unwrap().count(), 1);
    store
        .set_retention(&TenantId::default(), Some(Duration::from_secs(3600)))
        .unwrap();
    let r = store.apply_retention_at(D + 10 * DAY).unwrap();
    assert_eq!(r.deleted.len(), 2);
    assert_eq!(std::fs::read_dir(&bases).unwrap().count(), 0);
    assert_eq!(store.gauges().symbol_bases, 0);
    assert_files_are_live(&store);
}
