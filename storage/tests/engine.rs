//! End-to-end properties of the engine on real files: random batches written through
//! the head, flushed, reopened and queried must equal an independent aggregation.

mod common;

use common::*;
use profiledb_storage::{
    Labels, MatchOp, Matcher, QueryPlan, ScopePlan, Selector, Store, StoreConfig, TenantId,
    TimeRange, WriteError,
};
use proptest::prelude::*;

const H: i64 = 3_600_000;
const T0: i64 = 1_700_000_000_000 / H * H;

fn sample_strategy() -> impl Strategy<Value = TSample> {
    (
        0u8..3,                                               // service
        0u8..2,                                               // env
        0i64..(3 * H),                                        // time offset: three partitions
        prop::collection::vec((0u8..6, any::<bool>()), 0..6), // stack
        -3i64..50,                                            // value (zero and negatives included)
    )
        .prop_map(|(svc, env, dt, stack, value)| TSample {
            labels: vec![
                ("service_name".into(), format!("svc{svc}")),
                ("env".into(), ["prod", "dev"][env as usize].into()),
            ],
            ts: T0 + dt,
            stack: stack
                .into_iter()
                .map(|(f, sym)| {
                    if sym {
                        TFrame::Func(format!("fn{f}"))
                    } else {
                        TFrame::Addr(0x100 + u64::from(f))
                    }
                })
                .collect(),
            value,
        })
}

fn check(store: &Store, tenant: &TenantId, reference: &Reference) {
    let windows = [
        (i64::MIN, i64::MAX),
        (T0, T0 + H),
        (T0 + H / 2, T0 + 2 * H + 123_456),
        (T0 + 2 * H, T0 + 3 * H),
    ];
    let selectors = [
        Selector::default(),
        Selector::new(vec![
            Matcher::new("service_name", MatchOp::Eq, "svc1").unwrap()
        ]),
        Selector::new(vec![
            Matcher::new("service_name", MatchOp::Re, "svc[02]").unwrap(),
            Matcher::new("env", MatchOp::Ne, "dev").unwrap(),
        ]),
    ];
    for (start, end) in windows {
        let range = TimeRange::new(start, end);
        for sel in &selectors {
            let keep = |l: &Labels| sel.matches(|k| l.get(k));
            let tree = querier(store).merge_tree(tenant, sel, range).unwrap();
            assert_eq!(
                tree.folded(),
                reference.folded(keep, start, end),
                "merge {sel} [{start},{end})"
            );
            let want_total: i64 = reference.folded(keep, start, end).values().sum();
            assert_eq!(tree.total(), want_total);
            let totals = querier(store).series_totals(tenant, sel, range).unwrap();
            let mut totals = totals;
            for m in totals.values_mut() {
                m.retain(|_, v| *v != 0);
            }
            totals.retain(|_, m| !m.is_empty());
            assert_eq!(
                totals,
                reference.series_totals(keep, start, end),
                "series totals {sel}"
            );
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    #[test]
    fn head_flush_reopen_equals_reference(
        batches in prop::collection::vec(prop::collection::vec(sample_strategy(), 1..30), 1..8),
        flush_after in prop::collection::vec(any::<bool>(), 8),
        // Stack interner: off, starting over on every batch, or roomy.
        interner in prop_oneof![Just(0usize), Just(1usize), Just(64usize << 20)],
    ) {
        let dir = tempfile::tempdir().unwrap();
        let tenant = TenantId::new("t1").unwrap();
        let other = TenantId::new("t2").unwrap();
        let mut reference = Reference::default();
        {
            let cfg = StoreConfig { stack_interner_bytes: interner, ..test_config() };
            let store = Store::open(dir.path(), cfg).unwrap();
            for (i, b) in batches.iter().enumerate() {
                store.write(build_batch(&tenant, b)).unwrap();
                // The same data under another tenant must never leak into t1.
                store.write(build_batch(&other, &b[..1])).unwrap();
                reference.add(b, 10_000);
                if flush_after[i] {
                    store.flush().unwrap();
                }
            }
            // Mixed head + segments.
            check(&store, &tenant, &reference);
            store.close_without_flush();
        }
        // Reopen replays the WAL on top of the segments without double counting.
        let store = Store::open(dir.path(), test_config()).unwrap();
        check(&store, &tenant, &reference);
        store.flush().unwrap();
        check(&store, &tenant, &reference);
        drop(store);
        let store = Store::open(dir.path(), test_config()).unwrap();
        check(&store, &tenant, &reference);
        prop_assert_eq!(store.stats().wal_replayed_records.load(std::sync::atomic::Ordering::Relaxed), 0);
    }
}

/// `submit` answers through its callback: from the writer once the batch is
/// stored and visible to queries, at once when it is refused; the caller is never
/// held while the writer commits.
#[test]
fn submit_answers_once_stored_or_refused() {
    let dir = tempfile::tempdir().unwrap();
    let tenant = TenantId::default();
    let store = Store::open(dir.path(), test_config()).unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    let mut reference = Reference::default();
    for i in 0..20i64 {
        let samples = [TSample {
            labels: vec![("service_name".into(), format!("svc{}", i % 3))],
            ts: T0 + i * 60_000,
            stack: vec![
                TFrame::Func("main".into()),
                TFrame::Func(format!("f{}", i % 4)),
            ],
            value: i + 1,
        }];
        reference.add(&samples, 10_000);
        let tx = tx.clone();
        store.submit(
            build_batch(&tenant, &samples),
            Box::new(move |r, _| tx.send(r).unwrap()),
        );
    }
    let lsns: Vec<u64> = (0..20).map(|_| rx.recv().unwrap().unwrap()).collect();
    assert_eq!(lsns, (1..=20).collect::<Vec<u64>>());
    check(&store, &tenant, &reference);

    let mut bad = build_batch(&tenant, &[]);
    bad.series.push(profiledb_storage::SeriesSamples {
        labels: Labels::new([("service_name", "x")]),
        samples: Vec::new(),
    });
    store.submit(bad, Box::new(move |r, _| tx.send(r).unwrap()));
    match rx.recv().unwrap() {
        Err(WriteError::Invalid(m)) => assert!(m.0.contains("__profile_type__"), "{m}"),
        other => panic!("expected a refusal, got {other:?}"),
    }
    check(&store, &tenant, &reference);
}

#[test]
fn label_discovery_and_exact_values() {
    let dir = tempfile::tempdir().unwrap();
    let tenant = TenantId::default();
    let store = Store::open(dir.path(), test_config()).unwrap();
    let mk = |svc: &str, host: &str, ts: i64, stack: &[&str], v: i64| TSample {
        labels: vec![
            ("service_name".into(), svc.into()),
            ("host".into(), host.into()),
        ],
        ts,
        stack: stack.iter().map(|s| TFrame::Func(s.to_string())).collect(),
        value: v,
    };
    store
        .write(build_batch(
            &tenant,
            &[
                mk("api", "a", T0 + 1_000, &["main", "serve", "parse"], 5),
                mk("api", "a", T0 + 9_000, &["main", "serve", "parse"], 2),
                mk("api", "b", T0 + 20_000, &["main", "serve"], 3),
                mk("db", "a", T0 + 30_000, &["main", "query"], 11),
            ],
        ))
        .unwrap();
    store.flush().unwrap();
    store
        .write(build_batch(
            &tenant,
            &[mk("db", "c", T0 + H + 5, &["main", "query"], 1)],
        ))
        .unwrap();
    let all = TimeRange::all();
    let sel = Selector::parse(r#"{service_name="api"}"#).unwrap();
    let tree = querier(&store).merge_tree(&tenant, &sel, all).unwrap();
    assert_eq!(tree.to_folded_text(), "main;serve 3\nmain;serve;parse 7\n");

    // The plan of a query: api's two series each have one profile (10 s steps: the
    // samples at +1 s and +9 s share one) in the flushed segment; the head partition
    // of the next hour overlaps the window but holds only db.
    let plan = querier(&store).plan(&tenant, &sel, all).unwrap();
    let seg_bytes: u64 = store.segments().iter().map(|m| m.size_bytes).sum();
    assert!(seg_bytes > 0);
    let segments = ScopePlan {
        sources: 1,
        series: 2,
        profiles: 2,
        bytes: seg_bytes,
    };
    let head = ScopePlan {
        sources: 1,
        series: 0,
        profiles: 0,
        bytes: 0,
    };
    assert_eq!(
        plan,
        QueryPlan {
            head,
            segments,
            series: 2
        }
    );
    let plan = querier(&store)
        .plan(&tenant, &Selector::default(), all)
        .unwrap();
    assert_eq!((plan.segments.series, plan.segments.profiles), (3, 3));
    assert_eq!((plan.head.series, plan.head.profiles), (1, 1));
    assert_eq!(plan.series, 4);
    // A window before any data reads nothing.
    let before = TimeRange::new(T0 - H, T0);
    assert_eq!(
        querier(&store).plan(&tenant, &sel, before).unwrap(),
        QueryPlan::default()
    );
    assert_eq!(tree.total(), 10);

    assert_eq!(
        querier(&store)
            .label_names(&tenant, &Selector::default(), all)
            .unwrap(),
        vec!["__profile_type__", "host", "service_name"]
    );
    assert_eq!(
        querier(&store)
            .label_values(
                &tenant,
                "host",
                &Selector::parse(r#"{service_name="db"}"#).unwrap(),
                all
            )
            .unwrap(),
        vec!["a", "c"]
    );
    // Time pruning: the head partition of the second hour is the only one with host c.
    assert_eq!(
        querier(&store)
            .label_values(
                &tenant,
                "host",
                &Selector::default(),
                TimeRange::new(T0 + H, T0 + 2 * H)
            )
            .unwrap(),
        vec!["c"]
    );
    assert_eq!(
        querier(&store).profile_types(&tenant, all).unwrap(),
        vec![CPU]
    );
    assert_eq!(
        querier(&store)
            .series(&tenant, &Selector::default(), all)
            .unwrap()
            .len(),
        4
    );
    let totals = querier(&store).series_totals(&tenant, &sel, all).unwrap();
    let host_a: Vec<(i64, i64)> = totals
        .iter()
        .find(|(l, _)| l.get("host") == Some("a"))
        .unwrap()
        .1
        .iter()
        .map(|(t, v)| (*t, *v))
        .collect();
    // Both samples of host a fall in the first 10 s step.
    assert_eq!(host_a, vec![(T0, 7)]);
    // Another tenant sees nothing.
    let other = TenantId::new("other").unwrap();
    assert!(querier(&store)
        .merge_tree(&other, &Selector::default(), all)
        .unwrap()
        .is_empty());
}

#[test]
fn invalid_batches_are_refused_and_nothing_changes() {
    let dir = tempfile::tempdir().unwrap();
    let tenant = TenantId::default();
    let store = Store::open(dir.path(), test_config()).unwrap();
    let good = build_batch(
        &tenant,
        &[TSample {
            labels: vec![],
            ts: T0,
            stack: vec![TFrame::Func("a".into())],
            value: 4,
        }],
    );
    store.write(good.clone()).unwrap();
    let mut bad = good.clone();
    bad.series[0].samples[0].stack = 99;
    let err = store.write(bad).unwrap_err();
    assert!(err.to_string().contains("missing stack"), "{err}");
    let tree = querier(&store)
        .merge_tree(&tenant, &Selector::default(), TimeRange::all())
        .unwrap();
    assert_eq!(tree.total(), 4);
}

#[test]
fn second_open_of_a_directory_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let _store = Store::open(dir.path(), test_config()).unwrap();
    let err = Store::open(dir.path(), test_config())
        .err()
        .expect("second open must fail");
    assert!(err.to_string().contains("in use"), "{err}");
}

#[test]
fn head_memory_bound_forces_flushes() {
    let dir = tempfile::tempdir().unwrap();
    let tenant = TenantId::default();
    let cfg = profiledb_storage::StoreConfig {
        head_max_bytes: 64 << 10,
        ..test_config()
    };
    let store = Store::open(dir.path(), cfg).unwrap();
    let mut reference = Reference::default();
    for i in 0..40 {
        let samples: Vec<TSample> = (0..50)
            .map(|j| TSample {
                labels: vec![("service_name".into(), format!("s{}", j % 5))],
                ts: T0 + (i * 50 + j) * 1000,
                stack: vec![TFrame::Func(format!("f{i}")), TFrame::Func(format!("g{j}"))],
                value: 1 + j,
            })
            .collect();
        store.write(build_batch(&tenant, &samples)).unwrap();
        reference.add(&samples, 10_000);
        // Open and flushing partitions together stay within the budget, but for
        // the one group the writer applies after checking it. That group can
        // weigh more than 16 KiB here (the head was 16.5 KiB over the budget once
        // in 40 runs when this allowed 16), so it allows 24 KiB; without the
        // bound the head reaches 226 KiB.
        let g = store.gauges();
        assert!(
            g.head_bytes <= (64 << 10) + (24 << 10),
            "head over budget after batch {i}: {g:?}"
        );
    }
    let g = store.gauges();
    assert!(g.segments > 0, "the head bound never flushed: {g:?}");
    let tree = querier(&store)
        .merge_tree(&tenant, &Selector::default(), TimeRange::all())
        .unwrap();
    assert_eq!(
        tree.folded(),
        reference.folded(|_| true, i64::MIN, i64::MAX)
    );
}

/// A batch spanning two partitions, one flushed by the background clock and one not:
/// after a crash, replay must add only the unflushed partition's samples.
#[test]
fn replay_skips_partitions_already_in_segments() {
    let dir = tempfile::tempdir().unwrap();
    let tenant = TenantId::default();
    let cfg = profiledb_storage::StoreConfig {
        background_flush: true,
        flush_grace: std::time::Duration::ZERO,
        ..test_config()
    };
    let now = profiledb_storage::now_ms();
    let sample = |ts: i64, f: &str, v: i64| TSample {
        labels: vec![],
        ts,
        stack: vec![TFrame::Func(f.into())],
        value: v,
    };
    let store = Store::open(dir.path(), cfg).unwrap();
    store
        .write(build_batch(
            &tenant,
            &[sample(now - 3 * H, "old", 5), sample(now, "new", 7)],
        ))
        .unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while store.gauges().segments == 0 {
        assert!(
            std::time::Instant::now() < deadline,
            "past partition never flushed"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    assert_eq!(store.gauges().head_partitions, 1);
    store.close_without_flush();
    let store = Store::open(dir.path(), test_config()).unwrap();
    let tree = querier(&store)
        .merge_tree(&tenant, &Selector::default(), TimeRange::all())
        .unwrap();
    assert_eq!(tree.to_folded_text(), "new 7\nold 5\n");
}
