//! Group-by, cached merges and query limits straight on a store: the head path and
//! the segment path (function regexes through the function-name index) must agree.

mod common;

use std::sync::atomic::Ordering;

use common::{build_batch, test_config, TFrame, TSample, CPU};
use profiledb_storage::{GroupByQuery, GroupKey};
use profiledb_storage::{Querier, QueryError, QueryLimits};
use profiledb_storage::{Selector, Store, TenantId, TimeRange};
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

/// Two services' stacks: two through `main;serve`, one through `compact`, one on `idle`.
fn api_and_db() -> Vec<TSample> {
    vec![
        sample("api", &["main", "serve", "hash"], 5),
        sample("api", &["main", "serve"], 2),
        sample("db", &["main", "compact", "hash"], 3),
        sample("db", &["main", "idle"], 7),
    ]
}

fn rows(acc: &profiledb_storage::GroupAcc) -> Vec<(Vec<String>, i64)> {
    acc.sorted(0)
}

#[test]
fn group_by_head_and_segments_agree() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), test_config()).unwrap();
    let t = TenantId::default();
    let mut samples = api_and_db();
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
    // Kept from its second ask on (its key holds the exact range), then a hit
    // with the same answer.
    let hits = engine.stats().hits.load(Ordering::Relaxed);
    assert_eq!(rows(&engine.group_by(&t, &sel, range, &q).unwrap()), want);
    assert_eq!(engine.stats().hits.load(Ordering::Relaxed), hits);
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

/// Group-by keys, include and exclude regexes, and the rows they must give.
type Case = (
    Vec<GroupKey>,
    Option<&'static str>,
    Option<&'static str>,
    Vec<(Vec<String>, i64)>,
);

/// Leaf-function and label-only group-bys (answered from leaf names, with no
/// frame path resolved) give the same rows from the head and from segments: a
/// recursive stack counts under its leaf, a frame without a function under its
/// binary and address, and filters look at every frame of a stack.
#[test]
fn leaf_function_and_label_group_bys_agree_on_head_and_segments() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), test_config()).unwrap();
    let t = TenantId::default();
    let mut samples = api_and_db();
    samples.push(sample("db", &["main", "hash", "main"], 4));
    let mut addr = sample("api", &["main", "hash"], 6);
    addr.stack.push(TFrame::Addr(0x10));
    samples.push(addr);
    store.write(build_batch(&t, &samples)).unwrap();
    let engine = Querier::new(&store, 0, QueryLimits::default());
    let sel = Selector::parse(&format!("{CPU}{{}}")).unwrap();
    let range = TimeRange::new(0, 10_000);
    let svc = || GroupKey::Label("service_name".into());
    let s = |k: &[&str], v: i64| (k.iter().map(|x| x.to_string()).collect::<Vec<_>>(), v);
    let cases: Vec<Case> = vec![
        (
            vec![svc(), GroupKey::Function],
            None,
            None,
            vec![
                s(&["db", "idle"], 7),
                s(&["api", "libx.so+0x10"], 6),
                s(&["api", "hash"], 5),
                s(&["db", "main"], 4),
                s(&["db", "hash"], 3),
                s(&["api", "serve"], 2),
            ],
        ),
        (
            vec![svc(), GroupKey::Function],
            Some("^hash$"),
            None,
            vec![
                s(&["api", "libx.so+0x10"], 6),
                s(&["api", "hash"], 5),
                s(&["db", "main"], 4),
                s(&["db", "hash"], 3),
            ],
        ),
        (
            vec![GroupKey::Function],
            None,
            Some("idle|compact"),
            vec![
                s(&["hash"], 5),
                s(&["libx.so+0x10"], 6),
                s(&["main"], 4),
                s(&["serve"], 2),
            ],
        ),
        (
            vec![svc()],
            Some("hash"),
            None,
            vec![s(&["api"], 11), s(&["db"], 7)],
        ),
    ];
    let ask = |keys: &[GroupKey], inc: Option<&str>, exc: Option<&str>| {
        let q = GroupByQuery {
            keys: keys.to_vec(),
            include: inc.map(|r| Regex::new(r).unwrap()),
            exclude: exc.map(|r| Regex::new(r).unwrap()),
            max_groups: 0,
        };
        engine.group_by(&t, &sel, range, &q).unwrap()
    };
    let sorted = |mut v: Vec<(Vec<String>, i64)>| {
        v.sort();
        v
    };
    for (keys, inc, exc, want) in &cases {
        let got = ask(keys, *inc, *exc);
        assert_eq!(
            sorted(rows(&got)),
            sorted(want.clone()),
            "head: {keys:?} {inc:?} {exc:?}"
        );
        assert_eq!(got.total, want.iter().map(|r| r.1).sum::<i64>());
    }
    store.flush().unwrap();
    assert!(!store.segments().is_empty());
    for (keys, inc, exc, want) in &cases {
        // Twice: the second ask of a filter reads the segment's cached parts.
        for _ in 0..2 {
            let got = ask(keys, *inc, *exc);
            assert_eq!(
                sorted(rows(&got)),
                sorted(want.clone()),
                "segments: {keys:?} {inc:?} {exc:?}"
            );
        }
    }
}

/// A segment's function-name index is built once, and its bytes count in what the
/// querier reports holding (its share of `--query-cache-mb`) even when results
/// are not cached.
#[test]
fn function_indexes_are_built_once_and_weighed() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), test_config()).unwrap();
    let t = TenantId::default();
    let samples = vec![
        sample("api", &["main", "serve", "deflate_slow"], 5),
        sample("api", &["main", "serve"], 2),
        sample("db", &["main", "inflate"], 3),
    ];
    store.write(build_batch(&t, &samples)).unwrap();
    store.flush().unwrap();
    let engine = Querier::new(&store, 0, QueryLimits::default());
    let sel = Selector::parse(&format!("{CPU}{{}}")).unwrap();
    let q = GroupByQuery {
        keys: vec![GroupKey::Label("service_name".into())],
        include: Some(Regex::new("deflate|^inflate$").unwrap()),
        exclude: None,
        max_groups: 0,
    };
    assert_eq!(engine.cached_bytes(), 0);
    for _ in 0..2 {
        let acc = engine
            .group_by(&t, &sel, TimeRange::new(0, 10_000), &q)
            .unwrap();
        assert_eq!(
            rows(&acc),
            vec![(vec!["api".to_string()], 5), (vec!["db".to_string()], 3)]
        );
        assert_eq!(engine.stats().fn_index_builds.load(Ordering::Relaxed), 1);
    }
    assert!(engine.cached_bytes() > 0, "the index is weighed");
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
    assert!(matches!(e, QueryError::TooLarge { .. }), "{e}");
    // In frame-tree space the merge fits (two stacks); the whole call tree that
    // pprof and SVG need (five nodes) does not.
    let merged = engine.merge_flamegraph(&t, &sel, range).unwrap();
    assert_eq!(merged.total(), 2);
    let e = merged.to_tree_checked().unwrap_err();
    assert!(matches!(e, QueryError::TooLarge { .. }), "{e}");
    let q = GroupByQuery {
        keys: vec![GroupKey::Function],
        ..Default::default()
    };
    let e = engine.group_by(&t, &sel, range, &q).unwrap_err();
    assert!(matches!(e, QueryError::TooLarge { .. }), "{e}");
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

mod filters {
    use super::*;
    use proptest::prelude::*;
    use std::collections::BTreeMap;

    const NAMES: [&str; 5] = ["main", "serve", "hash", "idle", "compact"];

    /// `^(a|b)$` of the chosen names, `None` when none is chosen.
    fn regex_of(chosen: &[bool]) -> Option<Regex> {
        let names: Vec<&str> = NAMES
            .iter()
            .zip(chosen)
            .filter(|p| *p.1)
            .map(|p| *p.0)
            .collect();
        (!names.is_empty()).then(|| Regex::new(&format!("^({})$", names.join("|"))).unwrap())
    }

    /// The group-by computed from the samples themselves.
    fn expected(
        stacks: &[(bool, Vec<usize>, i64)],
        inc: &Option<Regex>,
        exc: &Option<Regex>,
        total_keys: bool,
    ) -> (Vec<(Vec<String>, i64)>, i64) {
        let mut rows: BTreeMap<Vec<String>, i64> = BTreeMap::new();
        let mut total = 0;
        for (db, stack, v) in stacks {
            let frames: Vec<&str> = stack.iter().map(|&i| NAMES[i]).collect();
            let any =
                |re: &Option<Regex>| re.as_ref().map(|r| frames.iter().any(|f| r.is_match(f)));
            if any(inc) == Some(false) || any(exc) == Some(true) {
                continue;
            }
            total += v;
            let svc = if *db { "db" } else { "api" }.to_string();
            let mut keyed: Vec<&str> = if total_keys {
                frames.clone()
            } else {
                frames.last().copied().into_iter().collect()
            };
            keyed.sort_unstable();
            keyed.dedup();
            for f in keyed {
                *rows.entry(vec![svc.clone(), f.to_string()]).or_insert(0) += v;
            }
        }
        let mut rows: Vec<(Vec<String>, i64)> = rows.into_iter().collect();
        rows.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
        (rows, total)
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(24))]

        /// Function filters give the same rows from the head (flags per node) and
        /// from a segment (depth-first ranges), and both equal the rows computed
        /// from the samples.
        #[test]
        fn head_and_segment_filters_equal_the_samples(
            stacks in prop::collection::vec(
                (any::<bool>(), prop::collection::vec(0usize..5, 1..5), 1i64..9), 1..25),
            include in prop::collection::vec(any::<bool>(), 5),
            exclude in prop::collection::vec(any::<bool>(), 5),
            total_keys in any::<bool>(),
        ) {
            let dir = tempfile::tempdir().unwrap();
            let store = Store::open(dir.path(), test_config()).unwrap();
            let t = TenantId::default();
            let samples: Vec<TSample> = stacks
                .iter()
                .map(|(db, s, v)| {
                    let frames: Vec<&str> = s.iter().map(|&i| NAMES[i]).collect();
                    sample(if *db { "db" } else { "api" }, &frames, *v)
                })
                .collect();
            store.write(build_batch(&t, &samples)).unwrap();
            let (inc, exc) = (regex_of(&include), regex_of(&exclude));
            let q = GroupByQuery {
                keys: vec![
                    GroupKey::Label("service_name".into()),
                    if total_keys { GroupKey::FunctionTotal } else { GroupKey::Function },
                ],
                include: inc.clone(),
                exclude: exc.clone(),
                max_groups: 0,
            };
            let sel = Selector::parse(&format!("{CPU}{{}}")).unwrap();
            let range = TimeRange::new(0, 10_000);
            let (want, total) = expected(&stacks, &inc, &exc, total_keys);
            let head = Querier::new(&store, 64 << 20, QueryLimits::default())
                .group_by(&t, &sel, range, &q)
                .unwrap();
            prop_assert_eq!(rows(&head), want.clone());
            prop_assert_eq!(head.total, total);
            store.flush().unwrap();
            // A segment's first filtered ask marks its nodes in one pass; from the
            // second on, its stack index gives ranges. Both must agree.
            for _ in 0..2 {
                let seg = Querier::new(&store, 64 << 20, QueryLimits::default())
                    .group_by(&t, &sel, range, &q)
                    .unwrap();
                prop_assert_eq!(rows(&seg), want.clone());
                prop_assert_eq!(seg.total, total);
            }
        }
    }
}
