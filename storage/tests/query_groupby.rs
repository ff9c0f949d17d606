//! Group-by, cached merges and query limits straight on a store: the head path and
//! the segment path (function regexes through the tantivy index) must agree.

mod common;

use std::sync::atomic::Ordering;

use common::{build_batch, test_config, TFrame, TSample, CPU};
use profiledb_storage::{GroupByQuery, GroupKey};
use profiledb_storage::{Querier, QueryError, QueryLimits};
use profiledb_storage::{Selector, StorageError, Store, TenantId, TimeRange};
use regex::Regex;

fn sample(svc: &str, stack: &[&str], value: i64) -> TSample {
    TSample {
        labels: vec![
            ("__profile_type__".into(), CPU.into()),
            ("service_name".into(), svc.into()),
        ],
        ts: 1_000,
        stack: stack.iter().map(|f| TFrame::Func(f.to_string())).collect(),
        value,
    }
}

fn rows(acc: &profiledb_storage::GroupAcc) -> Vec<(Vec<String>, i64)> {
    acc.sorted(0)
}

#[test]
fn group_by_head_and_segments_agree() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), test_config()).unwrap();
    let t = TenantId::default();
    let mut samples = vec![
        sample("api", &["main", "serve", "hash"], 5),
        sample("api", &["main", "serve"], 2),
        sample("db", &["main", "compact", "hash"], 3),
        sample("db", &["main", "idle"], 7),
    ];
    let mut addr = sample("db", &["main"], 4);
    addr.stack.push(TFrame::Addr(0x10));
    samples.push(addr);
    store.write(build_batch(&t, &samples)).unwrap();
    let engine = Querier::new(&store, 256 << 20, QueryLimits::default());
    let sel = Selector::parse(&format!("{CPU}{{}}")).unwrap();
    let range = TimeRange::new(0, 10_000);
    let q = GroupByQuery {
        keys: vec![
            GroupKey::Label("service_name".into()),
            GroupKey::FunctionTotal,
        ],
        include: Some(Regex::new("^(hash|idle)$").unwrap()),
        exclude: Some(Regex::new("compact").unwrap()),
        max_groups: 0,
    };
    let head = engine.group_by(&t, &sel, range, &q).unwrap();
    let want = vec![
        (vec!["db".to_string(), "idle".to_string()], 7),
        (vec!["db".to_string(), "main".to_string()], 7),
        (vec!["api".to_string(), "hash".to_string()], 5),
        (vec!["api".to_string(), "main".to_string()], 5),
        (vec!["api".to_string(), "serve".to_string()], 5),
    ];
    assert_eq!(rows(&head), want);
    assert_eq!(head.total, 12);

    store.flush().unwrap();
    assert!(!store.segments().is_empty());
    let seg = engine.group_by(&t, &sel, range, &q).unwrap();
    assert_eq!(rows(&seg), want);
    assert!(engine.stats().fn_index_builds.load(Ordering::Relaxed) >= 1);
    // Cached the second time, same answer.
    let hits = engine.stats().hits.load(Ordering::Relaxed);
    assert_eq!(rows(&engine.group_by(&t, &sel, range, &q).unwrap()), want);
    assert_eq!(engine.stats().hits.load(Ordering::Relaxed), hits + 1);

    // binary: the mapping file of the leaf (the test batches map every frame to libx).
    let q = GroupByQuery {
        keys: vec![GroupKey::Binary],
        ..Default::default()
    };
    let b = engine.group_by(&t, &sel, range, &q).unwrap();
    assert_eq!(rows(&b), vec![(vec!["/usr/lib/libx.so".to_string()], 21)]);
}

#[test]
fn limits_refuse_large_queries() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), test_config()).unwrap();
    let t = TenantId::default();
    store
        .write(build_batch(
            &t,
            &[sample("api", &["a", "b", "c"], 1), sample("api", &["d"], 1)],
        ))
        .unwrap();
    let engine = Querier::new(
        &store,
        1 << 20,
        QueryLimits {
            max_tree_nodes: 3,
            max_groups: 1,
            ..QueryLimits::default()
        },
    );
    let sel = Selector::default();
    let range = TimeRange::new(0, 10_000);
    let e = engine.merge_tree(&t, &sel, range).unwrap_err();
    assert!(
        matches!(e, StorageError::Query(QueryError::TooLarge { .. })),
        "{e}"
    );
    // In frame-tree space the merge fits (two stacks); the whole call tree that
    // pprof and SVG need (five nodes) does not.
    let merged = engine.merge_flamegraph(&t, &sel, range).unwrap();
    assert_eq!(merged.total(), 2);
    let e = merged.to_tree_checked().unwrap_err();
    assert!(
        matches!(e, StorageError::Query(QueryError::TooLarge { .. })),
        "{e}"
    );
    let q = GroupByQuery {
        keys: vec![GroupKey::Function],
        ..Default::default()
    };
    let e = engine.group_by(&t, &sel, range, &q).unwrap_err();
    assert!(
        matches!(e, StorageError::Query(QueryError::TooLarge { .. })),
        "{e}"
    );
    let quick = Querier::new(
        &store,
        1 << 20,
        QueryLimits {
            timeout: std::time::Duration::ZERO,
            ..QueryLimits::default()
        },
    );
    std::thread::sleep(std::time::Duration::from_millis(2));
    let e = quick.merge_tree(&t, &sel, range).unwrap_err();
    assert!(e.to_string().contains("timed out"), "{e}");
}
