//! The bucket's index log, leases and garbage collection, each checked twice: on
//! `object_store`'s in-memory store, and over the real S3 protocol against a moto
//! server process (skipped with a message where moto is absent, failed with
//! PROFILEDB_REQUIRE_EXTERNAL=1). The local-file store is checked for what it
//! can and cannot do.

mod support;

use std::sync::Arc;
use std::time::Duration;

use object_store::memory::InMemory;
use profiledb_storage::{AppendHint, Bucket, BucketConfig, BucketError, TenantView};
use support::entries::{entry, entry_seq};
use support::moto::MotoServer;
use support::roles::buckets;

fn keys(b: &Bucket, tenant: &str) -> Vec<String> {
    let mut k: Vec<String> = b
        .load_index(tenant)
        .unwrap()
        .segments
        .into_iter()
        .map(|e| e.key)
        .collect();
    k.sort();
    k
}

#[test]
fn retried_uploads_add_nothing_and_readers_catch_up_with_new_entries_only() {
    for (b, _s3) in buckets("idem") {
        let mut hint = AppendHint::default();
        assert!(b.tenants().unwrap().is_empty());
        assert_eq!(b.load_index("t").unwrap().generation, 0);
        let g1 = b
            .add_segments(
                "t",
                vec![entry_seq("a", Some(1)), entry_seq("b", Some(2))],
                &mut hint,
            )
            .unwrap();
        assert_eq!(g1, 1);
        let mut view = TenantView::new("t");
        assert!(b.sync(&mut view).unwrap());
        // Unchanged: nothing new to fold.
        assert!(!b.sync(&mut view).unwrap());
        // A retried upload is a new entry in the log, and adds nothing.
        b.add_segments("t", vec![entry_seq("a", Some(1))], &mut hint)
            .unwrap();
        assert_eq!(keys(&b, "t"), ["a", "b"]);
        assert_eq!(b.tenants().unwrap(), ["t"]);
        let g3 = b
            .add_segments("t", vec![entry_seq("c", Some(3))], &mut hint)
            .unwrap();
        assert_eq!(g3, 3);
        assert!(b.sync(&mut view).unwrap());
        assert_eq!(view.index, b.load_index("t").unwrap());
        assert_eq!(view.index.generation, 3);
        assert_eq!(view.index.writers["w"], 3);
        // A second writer, not told where the log is, appends after it.
        let g4 = b
            .add_segments("t", vec![entry("d")], &mut AppendHint::default())
            .unwrap();
        assert_eq!(g4, 4);
    }
}

#[test]
fn replace_is_atomic_and_void_once_a_source_is_gone() {
    for (b, _s3) in buckets("replace") {
        let mut hint = AppendHint::default();
        b.add_segments("t", vec![entry("a"), entry("b"), entry("c")], &mut hint)
            .unwrap();
        let mut view = TenantView::new("t");
        b.sync(&mut view).unwrap();
        b.replace_segments(&mut view, &["a".into(), "b".into()], vec![entry("m1")], 100)
            .unwrap();
        assert_eq!(keys(&b, "t"), ["c", "m1"]);
        assert_eq!(
            view.index
                .retired
                .iter()
                .map(|r| (r.key.as_str(), r.retired_ms))
                .collect::<Vec<_>>(),
            [("a", 100), ("b", 100)]
        );
        // A second compactor merging "b" and "c" lost the race: its change is
        // void at its place in the log.
        let mut stale = TenantView::new("t");
        b.sync(&mut stale).unwrap();
        let err = b
            .replace_segments(
                &mut stale,
                &["b".into(), "c".into()],
                vec![entry("m2")],
                200,
            )
            .unwrap_err();
        assert!(
            matches!(err, BucketError::SourcesGone { ref key } if key == "b"),
            "{err}"
        );
        assert_eq!(keys(&b, "t"), ["c", "m1"]);
        // A retired key is never re-added by a retried upload.
        b.add_segments("t", vec![entry("a")], &mut hint).unwrap();
        assert_eq!(keys(&b, "t"), ["c", "m1"]);
        // Quarantine and retention move entries out of the live set.
        assert!(b
            .quarantine_segment(&mut view, "c", "checksum mismatch", 300)
            .unwrap());
        // A second node meeting the same bad object finds it already out.
        assert!(!b
            .quarantine_segment(&mut stale, "c", "object missing", 301)
            .unwrap());
        assert_eq!(
            b.retire_segments(&mut view, &["m1".into()], 400).unwrap(),
            1
        );
        let idx = b.load_index("t").unwrap();
        assert!(idx.segments.is_empty());
        assert_eq!(idx.quarantined.len(), 1);
        assert_eq!(idx.quarantined[0].reason, "checksum mismatch");
        assert_eq!(idx.retired.len(), 3);
    }
}

#[test]
fn concurrent_writers_lose_no_entry() {
    for (b, _s3) in buckets("race") {
        let threads: Vec<_> = (0..4)
            .map(|w| {
                let b = b.clone();
                std::thread::spawn(move || {
                    let mut hint = AppendHint::default();
                    for i in 0..25 {
                        b.add_segments("t", vec![entry(&format!("w{w}-{i:02}"))], &mut hint)
                            .unwrap();
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        let idx = b.load_index("t").unwrap();
        assert_eq!(idx.segments.len(), 100);
        assert_eq!(idx.generation, 100);
    }
}

#[test]
fn one_lease_holder_at_a_time_and_expiry_hands_over() {
    for (b, _s3) in buckets("lease") {
        let ttl = Duration::from_secs(10);
        let mut a = b
            .try_lease("compact/t/0", "a", ttl, 1_000)
            .unwrap()
            .unwrap();
        assert!(b
            .try_lease("compact/t/0", "b", ttl, 5_000)
            .unwrap()
            .is_none());
        // Two racing takers of an expired lease: exactly one wins.
        let winners: Vec<bool> = ["b", "c"]
            .into_iter()
            .map(|o| {
                let b = b.clone();
                std::thread::spawn(move || {
                    b.try_lease("compact/t/0", o, ttl, 20_000)
                        .unwrap()
                        .is_some()
                })
            })
            .collect::<Vec<_>>()
            .into_iter()
            .map(|t| t.join().unwrap())
            .collect();
        assert_eq!(winners.iter().filter(|w| **w).count(), 1, "{winners:?}");
        // The first holder paused past expiry: its renewal is refused.
        assert!(!b.renew_lease(&mut a, ttl, 21_000).unwrap());
        // Released: free at once.
        let free = b.try_lease("compact/t/1", "d", ttl, 0).unwrap().unwrap();
        b.release_lease(free).unwrap();
        assert!(b.try_lease("compact/t/1", "e", ttl, 1).unwrap().is_some());
    }
}

#[test]
fn garbage_waits_for_the_grace_period() {
    for (b, _s3) in buckets("gc") {
        let seg = |k: &str| format!("tenants/t/segments/{k}.seg");
        for k in ["a", "b", "m", "orphan"] {
            b.put(&seg(k), bytes::Bytes::from_static(b"seg")).unwrap();
        }
        b.add_segments(
            "t",
            vec![entry(&seg("a")), entry(&seg("b"))],
            &mut AppendHint::default(),
        )
        .unwrap();
        let now = profiledb_storage::now_ms();
        let mut view = TenantView::new("t");
        b.sync(&mut view).unwrap();
        b.replace_segments(
            &mut view,
            &[seg("a"), seg("b")],
            vec![entry(&seg("m"))],
            now,
        )
        .unwrap();
        let grace = Duration::from_secs(60);
        // Within the grace period nothing goes.
        let r = b.collect_garbage(&mut view, grace, now + 1_000).unwrap();
        assert!(
            r.deleted_retired.is_empty() && r.deleted_orphans.is_empty(),
            "{r:?}"
        );
        assert_eq!(b.list("tenants/t/segments/").unwrap().len(), 4);
        // After it, the replaced sources and the orphan go; the live merge stays.
        let r = b.collect_garbage(&mut view, grace, now + 61_000).unwrap();
        assert_eq!(r.deleted_retired, [seg("a"), seg("b")]);
        assert_eq!(r.deleted_orphans, [seg("orphan")]);
        let left: Vec<String> = b
            .list("tenants/t/segments/")
            .unwrap()
            .into_iter()
            .map(|o| o.key)
            .collect();
        assert_eq!(left, [seg("m")]);
        assert!(b.load_index("t").unwrap().retired.is_empty());
        assert_eq!(b.get_range(&seg("m"), 1..3).unwrap().as_ref(), b"eg");
        assert!(matches!(
            b.get(&seg("a")),
            Err(BucketError::NotFound { .. })
        ));
    }
}

#[test]
fn an_unreachable_store_is_reported_as_such() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let cfg = BucketConfig {
        url: "s3://nowhere/p".into(),
        endpoint: Some(format!("http://127.0.0.1:{port}")),
        region: None,
        access_key_id: Some("k".into()),
        secret_access_key: Some("s".into()),
        allow_http: true,
        ..BucketConfig::new("memory://")
    };
    let b = Bucket::open(&cfg).unwrap();
    let err = b.load_index("t").unwrap_err();
    assert!(
        matches!(
            err,
            BucketError::Unreachable {
                why: profiledb_storage::Unreachable::Connect,
                ..
            }
        ),
        "{err:?}"
    );
    assert!(err.to_string().contains("unreachable"), "{err}");
    let bad = Bucket::open(&BucketConfig::new("file:///tmp/x")).unwrap_err();
    assert!(matches!(bad, BucketError::Config(_)), "{bad}");
}

/// `object_store`'s local-file store serves segment objects (whole, ranged,
/// listed, deleted) and the index log (create-if-absent), but has no
/// conditional update: taking over an expired lease is refused as unsupported,
/// by name, instead of passing for an unreachable store or overwriting blindly.
#[test]
fn a_local_file_store_serves_objects_and_the_log_but_cannot_hand_over_leases() {
    let dir = tempfile::tempdir().unwrap();
    let fs = object_store::local::LocalFileSystem::new_with_prefix(dir.path()).unwrap();
    let b = Bucket::from_store(Arc::new(fs), "p");
    let key = "tenants/t/segments/a.seg";
    b.put(key, bytes::Bytes::from_static(b"0123456789"))
        .unwrap();
    assert_eq!(&b.get(key).unwrap()[..], b"0123456789");
    assert_eq!(&b.get_range(key, 2..5).unwrap()[..], b"234");
    let listed: Vec<(String, u64)> = b
        .list("tenants/t/segments/")
        .unwrap()
        .into_iter()
        .map(|o| (o.key, o.size))
        .collect();
    assert_eq!(listed, [(key.to_string(), 10)]);

    let mut hint = AppendHint::default();
    b.add_segments("t", vec![entry("a")], &mut hint).unwrap();
    b.add_segments("t", vec![entry("b")], &mut hint).unwrap();
    assert_eq!(keys(&b, "t"), ["a", "b"]);
    let ttl = Duration::from_secs(1);
    assert!(b.try_lease("l", "x", ttl, 0).unwrap().is_some());
    let err = b.try_lease("l", "y", ttl, 10_000).unwrap_err();
    assert!(matches!(err, BucketError::Unsupported { .. }), "{err:?}");
    assert!(err.to_string().contains("conditional writes"), "{err}");

    b.delete(key).unwrap();
    assert!(matches!(b.get(key), Err(BucketError::NotFound { .. })));
}

/// The store contract the index and leases are built on: of writers racing to
/// replace one version of an object (leases), or to create one object (log
/// entries), exactly one succeeds. Checked on the raw stores, with
/// the racers released together, so a store (or test server) that checks the
/// version and writes in two steps shows here, not as a lost index entry.
#[test]
fn racing_conditional_puts_admit_exactly_one() {
    use object_store::{ObjectStore, PutMode, PutOptions, PutPayload, UpdateVersion};
    const RACERS: usize = 8;
    let mut stores: Vec<(Arc<dyn ObjectStore>, Option<MotoServer>)> =
        vec![(Arc::new(InMemory::new()), None)];
    if let Some(s3) = MotoServer::start() {
        let cfg = s3.config("contract");
        let store = object_store::aws::AmazonS3Builder::new()
            .with_bucket_name(support::moto::BUCKET)
            .with_region("us-east-1")
            .with_endpoint(cfg.endpoint.clone().unwrap())
            .with_allow_http(true)
            .with_access_key_id("test")
            .with_secret_access_key("test")
            .build()
            .unwrap();
        stores.push((Arc::new(store), Some(s3)));
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(RACERS)
        .enable_all()
        .build()
        .unwrap();
    for (store, _s3) in stores {
        let path = object_store::path::Path::from("contract/race");
        for round in 0..40 {
            let base = rt
                .block_on(store.put_opts(
                    &path,
                    PutPayload::from(format!("base {round}")),
                    PutOptions::default(),
                ))
                .unwrap();
            let barrier = Arc::new(tokio::sync::Barrier::new(RACERS));
            let racers: Vec<_> = (0..RACERS)
                .map(|i| {
                    let (store, barrier) = (store.clone(), barrier.clone());
                    // Odd rounds race to create a new object instead.
                    let path = if round % 2 == 0 {
                        path.clone()
                    } else {
                        object_store::path::Path::from(format!("contract/new-{round}"))
                    };
                    let version = UpdateVersion {
                        e_tag: base.e_tag.clone(),
                        version: None,
                    };
                    rt.spawn(async move {
                        barrier.wait().await;
                        let mode = if round % 2 == 0 {
                            PutMode::Update(version)
                        } else {
                            PutMode::Create
                        };
                        let opts = PutOptions {
                            mode,
                            ..PutOptions::default()
                        };
                        let body = PutPayload::from(format!("racer {i} of round {round}"));
                        match store.put_opts(&path, body, opts).await {
                            Ok(_) => true,
                            Err(object_store::Error::Precondition { .. })
                            | Err(object_store::Error::AlreadyExists { .. }) => false,
                            Err(e) => panic!("racer {i}: {e}"),
                        }
                    })
                })
                .collect();
            let won = racers
                .into_iter()
                .map(|r| rt.block_on(r).unwrap())
                .filter(|&won| won)
                .count();
            assert_eq!(won, 1, "{store}: round {round}");
        }
    }
}
