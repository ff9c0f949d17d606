//! Flame graphs drawn on a selection's cached skeleton: every answer equals the
//! flame graph of the reference call tree (whole and truncated, merges and
//! diffs), a query whose frames the skeleton holds builds nothing, and new
//! stacks grow it.

mod common;

use std::sync::atomic::Ordering;

use common::*;
use profiledb_storage::{
    flamegraph, flamegraph_diff_merged, CallTree, Querier, QueryLimits, Selector, Store, TenantId,
    TimeRange,
};

const HOUR: i64 = 3_600_000;
const T0: i64 = 1_600_000_000_000 / HOUR * HOUR;

/// Deep stacks that share a trunk and split at a few points, with self values on
/// inner frames too (`main;a` and `main;a;b;c` both end stacks).
fn samples(service: &str, hour: i64, extra_leaf: Option<&str>) -> Vec<TSample> {
    let mut stacks: Vec<(Vec<String>, i64)> = Vec::new();
    for i in 0..12 {
        let mut s: Vec<String> = ["main", "a", "b", "c", "d"].map(String::from).to_vec();
        s.truncate(2 + i % 4);
        s.push(format!("f{}", i % 5));
        s.extend((0..i % 7).map(|j| format!("deep{j}")));
        stacks.push((s, 1 + i as i64 * (hour + 1)));
    }
    stacks.push((vec!["main".into(), "a".into()], 3));
    if let Some(leaf) = extra_leaf {
        stacks.push((vec!["main".into(), "new".into(), leaf.into()], 40));
    }
    stacks
        .into_iter()
        .enumerate()
        .map(|(i, (stack, value))| TSample {
            labels: vec![("service_name".into(), service.into())],
            ts: T0 + hour * HOUR + i as i64 * 1_000,
            stack: stack.into_iter().map(TFrame::Func).collect(),
            value,
        })
        .collect()
}

fn write(store: &Store, reference: &mut Reference, samples: &[TSample]) {
    store
        .write(build_batch(&TenantId::default(), samples))
        .expect("write");
    reference.add(samples, test_config().step_ms);
}

fn reference_tree(reference: &Reference, service: &str, range: TimeRange) -> CallTree {
    let keep = |l: &profiledb_storage::Labels| l.get("service_name") == Some(service);
    let mut t = CallTree::new();
    for (stack, v) in reference.folded(keep, range.start_ms, range.end_ms) {
        t.add_stack(&stack.split(';').collect::<Vec<_>>(), v);
    }
    t.finalize();
    t
}

fn builds(q: &Querier) -> u64 {
    q.stats().skeleton_builds.load(Ordering::Relaxed)
}

#[test]
fn flame_graphs_on_a_cached_skeleton_equal_the_reference() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), test_config()).unwrap();
    let mut reference = Reference::default();
    for h in 0..3 {
        write(&store, &mut reference, &samples("api", h, None));
        write(&store, &mut reference, &samples("db", h, Some("only-db")));
    }
    store.flush().unwrap();
    let q = Querier::new(&store, 64 << 20, QueryLimits::default());
    let tenant = TenantId::default();
    let api = Selector::parse(r#"{service_name="api"}"#).unwrap();
    let hour = |h: i64| TimeRange::new(T0 + h * HOUR, T0 + (h + 1) * HOUR);
    let all = TimeRange::new(T0, T0 + 3 * HOUR);
    let check = |reference: &Reference, range: TimeRange, when: &str| {
        let m = q.merge_flamegraph(&tenant, &api, range).expect("merge");
        let want = reference_tree(reference, "api", range);
        for max_nodes in [0, 3, 6, 1024] {
            assert_eq!(
                m.flamegraph(max_nodes),
                flamegraph(&want, max_nodes),
                "{when}, max_nodes {max_nodes}"
            );
        }
    };

    check(&reference, all, "first merge");
    assert_eq!(
        builds(&q),
        1,
        "the first merge of a selector builds its skeleton"
    );
    check(&reference, hour(1), "an hour within it");
    check(
        &reference,
        TimeRange::new(T0 + 30 * 60_000, T0 + 2 * HOUR),
        "a window cutting hours",
    );
    assert_eq!(builds(&q), 1, "frames the skeleton holds build nothing");

    // A diff of two hours of the selector: both sides on the one skeleton.
    let (b, c) = q
        .diff_sides(&tenant, (&api, hour(0)), (&api, hour(2)))
        .expect("diff");
    let want = profiledb_storage::flamegraph_diff(
        &reference_tree(&reference, "api", hour(0)),
        &reference_tree(&reference, "api", hour(2)),
        5,
    );
    assert_eq!(flamegraph_diff_merged(&b, &c, 5), want);
    assert_eq!(builds(&q), 1);

    // New frames (a stack only now seen for this service) grow the skeleton once.
    write(&store, &mut reference, &samples("api", 3, Some("late")));
    store.flush().unwrap();
    let later = TimeRange::new(T0, T0 + 4 * HOUR);
    check(&reference, later, "after new stacks");
    assert_eq!(builds(&q), 2);
    check(&reference, hour(3), "the new hour alone");
    assert_eq!(builds(&q), 2);

    // Another selector has its own skeleton; `db`'s frames are not in `api`'s.
    let db = Selector::parse(r#"{service_name="db"}"#).unwrap();
    let m = q.merge_flamegraph(&tenant, &db, all).expect("merge db");
    assert_eq!(
        m.flamegraph(0),
        flamegraph(&reference_tree(&reference, "db", all), 0)
    );
    assert_eq!(builds(&q), 3);
}
