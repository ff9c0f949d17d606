//! The pipeline's back-pressure and durability contract, against a real store.

use std::sync::Arc;

use bytes::Bytes;
use profiledb::pipeline::{Job, Payload, Pipeline, PipelineConfig, PipelineError};
use profiledb_ingest::{IngestParams, Limits};
use profiledb_storage::{
    now_ms, Querier, QueryLimits, Selector, Store, StoreConfig, TenantId, TimeRange,
};

fn job(i: usize, now: i64) -> Job {
    let params = IngestParams::from_query("name=bp.cpu", now, &Limits::default()).unwrap();
    // Enough lines that decoding takes real time, so the queue fills.
    let body: String = (0..2000).map(|k| format!("main;job{i};f{k} 1\n")).collect();
    Job {
        tenant: TenantId::default(),
        payload: Payload::Raw {
            params,
            body: Bytes::from(body),
        },
        received_ms: now,
    }
}

#[test]
fn full_queue_refuses_at_once_and_accepted_jobs_are_stored() {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(Store::open(dir.path(), StoreConfig::default()).unwrap());
    let pipeline = Pipeline::start(
        store.clone(),
        PipelineConfig {
            workers: 1,
            queue: 1,
            ..Default::default()
        },
    );
    let now = now_ms();
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let mut accepted = Vec::new();
    let mut busy = 0;
    for i in 0..200 {
        match pipeline.try_submit(job(i, now)) {
            Ok(rx) => accepted.push(rx),
            Err(PipelineError::Busy) => busy += 1,
            Err(e) => panic!("unexpected {e}"),
        }
    }
    assert!(busy > 0, "a queue of one with one worker never filled");
    let mut stored = 0;
    for rx in accepted.drain(..) {
        let s = rt.block_on(rx).unwrap().unwrap();
        stored += s.samples;
    }
    assert_eq!(stored % 2000, 0);
    // The memory share comes back once the writer has handed each batch back
    // and the worker has freed it, with no next upload to wake the worker.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while pipeline.inflight_bytes() != 0 {
        assert!(
            std::time::Instant::now() < deadline,
            "{} bytes still reserved after every answer",
            pipeline.inflight_bytes()
        );
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    // Every acknowledged job is in the store (2000 stacks of 1 sample × 1e7 ns each).
    let tree = Querier::new(&store, 0, QueryLimits::default())
        .merge_tree(&TenantId::default(), &Selector::default(), TimeRange::all())
        .unwrap();
    assert_eq!(tree.total(), stored as i64 * 10_000_000);
    assert_eq!(
        pipeline
            .stats()
            .rejected_busy
            .load(std::sync::atomic::Ordering::Relaxed),
        busy
    );
}

#[test]
fn future_samples_are_refused_with_the_limit_in_the_message() {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(Store::open(dir.path(), StoreConfig::default()).unwrap());
    let pipeline = Pipeline::start(store.clone(), PipelineConfig::default());
    let now = now_ms();
    let params =
        IngestParams::from_query("name=f.cpu&from=now%2B1h", now, &Limits::default()).unwrap();
    let rx = pipeline
        .try_submit(Job {
            tenant: TenantId::default(),
            payload: Payload::Raw {
                params,
                body: Bytes::from_static(b"a;b 1\n"),
            },
            received_ms: now,
        })
        .unwrap();
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let err = rt.block_on(rx).unwrap().unwrap_err();
    assert!(matches!(err, PipelineError::Timestamp(_)), "{err}");
    assert!(err.to_string().contains("max_future_skew"), "{err}");
    assert!(Querier::new(&store, 0, QueryLimits::default())
        .merge_tree(&TenantId::default(), &Selector::default(), TimeRange::all())
        .unwrap()
        .is_empty());
}
