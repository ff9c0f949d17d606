//! The index log's checkpoints and pruning, the index of the release before the
//! log, and how a failed read is classified: an object that is damaged (missing,
//! shorter than asked, HTTP 416) apart from a store that does not answer
//! (refused, hung, reset mid-body), the latter through a real TCP proxy in
//! front of moto (skipped with a message where moto is absent, failed with
//! PROFILEDB_REQUIRE_EXTERNAL=1).

mod support;

use std::sync::Arc;
use std::time::Duration;

use object_store::memory::InMemory;
use profiledb_storage::{
    AppendHint, Bucket, BucketError, TenantIndex, TenantView, Unreachable, LOG_GRACE,
};
use support::entries::entry;
use support::moto::MotoServer;
use support::proxy::{FaultProxy, Mode};

fn log_objects(b: &Bucket) -> usize {
    b.list("tenants/t/index/log/").unwrap().len()
}

#[test]
fn checkpoints_let_readers_skip_the_log_and_pruning_changes_no_index() {
    let b = Bucket::from_store(Arc::new(InMemory::new()), "p");
    let mut hint = AppendHint::default();
    for i in 0..70 {
        b.add_segments("t", vec![entry(&format!("s{i:02}"))], &mut hint)
            .unwrap();
    }
    // A reader that stops following here.
    let mut early = TenantView::new("t");
    b.sync(&mut early).unwrap();
    let mut compactor = TenantView::new("t");
    b.sync(&mut compactor).unwrap();
    assert!(compactor.checkpoint_due(), "64 entries since none");
    let written = b.write_checkpoint(&mut compactor).unwrap();
    assert!(!compactor.checkpoint_due());
    // Within the grace period nothing is pruned: readers may be reading it.
    let now = profiledb_storage::now_ms();
    assert_eq!(b.prune_log("t", LOG_GRACE, now).unwrap(), 0);
    assert_eq!(log_objects(&b), 70);
    // After it, every entry the checkpoint covers goes.
    assert_eq!(
        b.prune_log("t", LOG_GRACE, now + 1 + LOG_GRACE.as_millis() as i64)
            .unwrap(),
        70
    );
    assert_eq!(log_objects(&b), 0);

    // Writers append after the checkpoint, whether they knew where the log
    // was or not.
    assert_eq!(
        b.add_segments("t", vec![entry("late")], &mut hint).unwrap(),
        71
    );
    assert_eq!(
        b.add_segments("t", vec![entry("later")], &mut AppendHint::default())
            .unwrap(),
        72
    );
    // A fresh reader reads the checkpoint and two entries.
    let read_before = b.stats().index_bytes_read;
    let fresh = b.load_index("t").unwrap();
    let read = b.stats().index_bytes_read - read_before;
    assert_eq!(fresh.segments.len(), 72);
    assert!(
        read < written + 2_000,
        "{read} bytes read for a {written}-byte checkpoint"
    );
    // The reader left behind finds its next entries gone and reloads: the
    // same index as the fresh one.
    b.sync(&mut early).unwrap();
    assert_eq!(early.index, fresh);
}

#[test]
fn an_index_from_before_the_log_is_read_and_continued() {
    let b = Bucket::from_store(Arc::new(InMemory::new()), "p");
    let legacy = TenantIndex {
        generation: 5,
        segments: vec![entry("a")],
        ..TenantIndex::default()
    };
    b.put(
        "tenants/t/index.json",
        serde_json::to_vec(&legacy).unwrap().into(),
    )
    .unwrap();
    assert_eq!(b.load_index("t").unwrap(), legacy);
    let g = b
        .add_segments("t", vec![entry("b")], &mut AppendHint::default())
        .unwrap();
    assert_eq!(g, 6);
    let idx = b.load_index("t").unwrap();
    let keys: Vec<&str> = idx.segments.iter().map(|e| e.key.as_str()).collect();
    assert_eq!(keys, ["a", "b"]);
}

/// A short, truncated or missing object is damage, on every store.
fn check_damage(b: &Bucket) {
    let key = "tenants/t/segments/x.seg";
    b.put(key, bytes::Bytes::from(vec![7u8; 100])).unwrap();
    let short = |r: Result<bytes::Bytes, BucketError>| match r {
        Err(e @ BucketError::Short { .. }) => assert!(e.is_damage()),
        other => panic!("{b:?}: expected a short object, got {other:?}"),
    };
    // Past the end (S3 answers 416), and partly past it.
    short(b.get_range(key, 200..300));
    short(b.get_range(key, 50..150));
    // Whole, but not the size the index says.
    short(b.get_sized(key, 200));
    assert_eq!(b.get_sized(key, 100).unwrap().len(), 100);
    let missing = b
        .get_range("tenants/t/segments/gone.seg", 0..10)
        .unwrap_err();
    assert!(
        matches!(missing, BucketError::NotFound { .. }) && missing.is_damage(),
        "{missing:?}"
    );
}

#[test]
fn damaged_objects_are_damage_and_a_store_that_does_not_answer_is_unreachable() {
    check_damage(&Bucket::from_store(Arc::new(InMemory::new()), "p"));
    let Some(s3) = MotoServer::start() else {
        return;
    };
    check_damage(&Bucket::open(&s3.config("damage")).unwrap());

    let proxy = FaultProxy::start(s3.port());
    let mut cfg = s3.config_through(&proxy.endpoint(), "faults");
    cfg.request_timeout = Duration::from_millis(400);
    cfg.retries = 0;
    let b = Bucket::open(&cfg).unwrap();
    let key = "tenants/t/segments/big.seg";
    let body: Vec<u8> = (0..200_000u32).map(|i| (i % 251) as u8).collect();
    b.put(key, body.clone().into()).unwrap();

    let why = |r: Result<bytes::Bytes, BucketError>| match r {
        Err(BucketError::Unreachable { why, .. }) => why,
        other => panic!("expected the store unreachable, got {other:?}"),
    };
    proxy.set(Mode::Refuse);
    // A pooled connection is cut first (a broken request); new ones are refused.
    why(b.get(key));
    assert_eq!(why(b.get(key)), Unreachable::Connect);
    proxy.set(Mode::Hang);
    assert_eq!(why(b.get_range(key, 0..10)), Unreachable::TimedOut);
    proxy.set(Mode::ResetAfter(50_000));
    let reset = why(b.get(key));
    assert!(
        matches!(reset, Unreachable::Broken | Unreachable::Connect),
        "{reset:?}"
    );
    // Slow but answering: not unreachable, whatever the body's length.
    proxy.set(Mode::Slow(400_000));
    assert_eq!(b.get(key).unwrap().as_ref(), body.as_slice());
    proxy.set(Mode::Pass);
    assert_eq!(b.get_range(key, 10..20).unwrap().as_ref(), &body[10..20]);
    // Nothing in this test was damage: no object was found short or missing.
    assert!(b.head(key).is_ok());
}
