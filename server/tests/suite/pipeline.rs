//! The pipeline's back-pressure and durability contract, against a real store.

use std::sync::Arc;

use bytes::Bytes;
use profiledb::pipeline::{Job, Payload, Pipeline, PipelineConfig, PipelineError};
use profiledb_ingest::{IngestParams, Limits, PushEncoding};
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

/// A pipeline over a fresh store in a temporary directory.
fn started(config: PipelineConfig) -> (tempfile::TempDir, Arc<Store>, Pipeline) {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(Store::open(dir.path(), StoreConfig::default()).unwrap());
    let pipeline = Pipeline::start(store.clone(), config);
    (dir, store, pipeline)
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap()
}

/// Waits until every upload's memory share is back: the writer has handed each
/// batch back and its worker has freed it (with no next upload to wake it).
fn wait_until_freed(pipeline: &Pipeline) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while pipeline.inflight_bytes() != 0 {
        assert!(
            std::time::Instant::now() < deadline,
            "{} bytes still reserved after every answer",
            pipeline.inflight_bytes()
        );
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
}

#[test]
fn full_queue_refuses_at_once_and_accepted_jobs_are_stored() {
    let (_dir, store, pipeline) = started(PipelineConfig {
        workers: 1,
        queue: 1,
        ..Default::default()
    });
    let now = now_ms();
    let rt = runtime();
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
    wait_until_freed(&pipeline);
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
    let (_dir, store, pipeline) = started(PipelineConfig::default());
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
    let err = runtime().block_on(rx).unwrap().unwrap_err();
    assert!(matches!(err, PipelineError::Timestamp(_)), "{err}");
    assert!(err.to_string().contains("max_future_skew"), "{err}");
    assert!(Querier::new(&store, 0, QueryLimits::default())
        .merge_tree(&TenantId::default(), &Selector::default(), TimeRange::all())
        .unwrap()
        .is_empty());
}

/// A Push body holding one pprof profile: `main → work` with 3 samples, both
/// functions in `main.go`.
fn push_body(now: i64) -> Bytes {
    use profiledb_ingest::proto::pprof;
    use profiledb_ingest::proto::push::v1 as pushpb;
    use profiledb_ingest::proto::types::v1 as typespb;
    use prost::Message;
    let strings = ["", "samples", "count", "main", "work", "main.go"];
    let profile = pprof::Profile {
        sample_type: vec![pprof::ValueType { r#type: 1, unit: 2 }],
        function: vec![
            pprof::Function {
                id: 1,
                name: 3,
                filename: 5,
                ..Default::default()
            },
            pprof::Function {
                id: 2,
                name: 4,
                filename: 5,
                ..Default::default()
            },
        ],
        location: (1..=2)
            .map(|id| pprof::Location {
                id,
                line: vec![pprof::Line {
                    function_id: id,
                    line: 1,
                    ..Default::default()
                }],
                ..Default::default()
            })
            .collect(),
        sample: vec![pprof::Sample {
            location_id: vec![2, 1],
            value: vec![3],
            ..Default::default()
        }],
        string_table: strings
            .iter()
            .map(|s| Bytes::from_static(s.as_bytes()))
            .collect(),
        time_nanos: now * 1_000_000,
        ..Default::default()
    };
    let req = pushpb::PushRequest {
        series: vec![pushpb::RawProfileSeries {
            labels: vec![typespb::LabelPair {
                name: "service_name".into(),
                value: "svc".into(),
            }],
            samples: vec![pushpb::RawSample {
                raw_profile: profile.encode_to_vec().into(),
                id: String::new(),
            }],
        }],
    };
    Bytes::from(req.encode_to_vec())
}

#[test]
fn a_stored_push_leaves_no_reference_to_its_body() {
    // The batch's function names are slices of the push body while it is decoded
    // and written (`profiledb_model::Name`). Once the upload is answered and its
    // batch freed, nothing the store keeps (dictionaries, the interner, the
    // function index) may still hold the body: each would pin a whole upload for
    // a name.
    let (_dir, store, pipeline) = started(PipelineConfig::default());
    let now = now_ms();
    let body = push_body(now);
    let rx = pipeline
        .try_submit(Job {
            tenant: TenantId::default(),
            payload: Payload::Push {
                encoding: PushEncoding::Proto,
                body: body.clone(),
            },
            received_ms: now,
        })
        .unwrap();
    let stored = runtime().block_on(rx).unwrap().unwrap();
    assert_eq!(stored.samples, 1);
    wait_until_freed(&pipeline);
    assert!(body.is_unique(), "the store kept a slice of the push body");
    let tree = Querier::new(&store, 0, QueryLimits::default())
        .merge_tree(&TenantId::default(), &Selector::default(), TimeRange::all())
        .unwrap();
    assert_eq!(tree.total(), 3);
}
