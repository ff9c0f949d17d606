//! The cluster roles as the storage tests start them: a writer's store and
//! uploader, a querier's store and mirror, over one bucket, each waited for until
//! it has done its first pass.

#![allow(dead_code)]

use std::path::Path;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::Duration;

use profiledb_storage::{
    Batch, BlockPolicy, Bucket, Compactor, CompactorConfig, DownsampleRule, Fault, Function,
    Labels, Location, MergePolicy, Mirror, MirrorConfig, Querier, QueryLimits, Sample, Selector,
    SeriesSamples, Store, StoreConfig, TenantId, TimeRange, Uploader, UploaderConfig,
    PROFILE_TYPE_LABEL,
};

/// Every bucket a test runs on: memory always, moto (`name` its prefix) when
/// it starts.
pub fn buckets(name: &str) -> Vec<(Bucket, Option<super::moto::MotoServer>)> {
    let memory: Arc<dyn object_store::ObjectStore> =
        Arc::new(object_store::memory::InMemory::new());
    let mut v = vec![(Bucket::from_store(memory, "p"), None)];
    if let Some(s3) = super::moto::MotoServer::start() {
        v.push((Bucket::open(&s3.config(name)).unwrap(), Some(s3)));
    }
    v
}

/// A store that compacts only when told to, so tests count segments exactly.
pub fn local() -> StoreConfig {
    StoreConfig {
        background_compaction: false,
        ..StoreConfig::default()
    }
}

/// Polls `f` every 20 ms for up to 6 s.
pub fn wait(what: &str, mut f: impl FnMut() -> bool) {
    for _ in 0..300 {
        if f() {
            return;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    panic!("timed out waiting for {what}");
}

/// The uploader of writer `w1` for `store`. Its loop runs a pass as it starts
/// and then sleeps an hour, so tests drive it with `upload_now`; returning after
/// that first pass means a late one cannot upload what a test writes next.
pub fn uploader(store: &Arc<Store>, bucket: &Bucket) -> Uploader {
    uploader_with(store, bucket, None)
}

/// [`uploader`] with a fault point armed.
pub fn uploader_with(store: &Arc<Store>, bucket: &Bucket, fault: Option<Fault>) -> Uploader {
    let up = Uploader::start(
        store.clone(),
        bucket.clone(),
        UploaderConfig {
            writer_id: "w1".into(),
            interval: Duration::from_secs(3600),
            fault,
        },
    )
    .unwrap();
    wait("the uploader's first pass", || {
        up.stats().passes.load(Relaxed) >= 1
    });
    up
}

/// A querier's store in `dir` following `bucket` every `interval`, keeping
/// `disk_budget_bytes` of bodies, once its first sync is done.
pub fn querier(
    bucket: &Bucket,
    dir: &Path,
    interval: Duration,
    disk_budget_bytes: u64,
) -> (Arc<Store>, Mirror) {
    // No warm-up: it starts with the store, empty, but a thread scheduled late on
    // a loaded machine would see what the first sync attached and download bodies
    // the tests count.
    let cfg = StoreConfig {
        warm_segment_cache: false,
        ..local()
    };
    let qstore = Arc::new(Store::open(dir, cfg).unwrap());
    let mirror = Mirror::start(
        qstore.clone(),
        bucket.clone(),
        MirrorConfig {
            interval,
            disk_budget_bytes,
        },
    )
    .unwrap();
    wait("the first sync", || mirror.synced());
    (qstore, mirror)
}

/// Adds function `name` (in `file`) and a location of it to `b`; the
/// location's index.
pub fn frame(b: &mut Batch, name: String, file: &str) -> u32 {
    b.symbols.functions.push(Function {
        name: name.into(),
        file: file.into(),
    });
    b.symbols.locations.push(Location {
        function: Some(b.symbols.functions.len() as u32 - 1),
        mapping: None,
        address: 0,
        line: 0,
    });
    b.symbols.locations.len() as u32 - 1
}

/// The CPU series of service `demo` holding `samples`.
pub fn demo_series(samples: Vec<Sample>) -> SeriesSamples {
    SeriesSamples {
        labels: Labels::new([
            (
                PROFILE_TYPE_LABEL,
                "process_cpu:cpu:nanoseconds:cpu:nanoseconds",
            ),
            ("service_name", "demo"),
        ]),
        samples,
    }
}

/// One sample of `value` on main → f`i` at `at_ms`.
pub fn batch_at(at_ms: i64, i: i64, value: i64) -> Batch {
    let mut b = Batch::new(TenantId::default());
    let main = frame(&mut b, "main".into(), "");
    let leaf = frame(&mut b, format!("f{i}"), "");
    let stack = b.stacks.push(&[main, leaf]);
    b.series.push(demo_series(vec![Sample {
        timestamp_ms: at_ms,
        stack,
        value,
    }]));
    b
}

/// The total of service `demo` in `range`, merged by a querier over `store`.
pub fn total_in(store: &Store, range: TimeRange) -> i64 {
    let q = Querier::new(store, 0, QueryLimits::default());
    let sel = Selector::parse(r#"{service_name="demo"}"#).unwrap();
    q.merge_tree(&TenantId::default(), &sel, range)
        .unwrap()
        .total()
}

/// A compactor over `bucket` passing every 20 ms, merging two segments and
/// more, with day blocks (not wide ones), garbage past `grace`, and `fault`.
pub fn compactor(
    bucket: &Bucket,
    downsample: Vec<DownsampleRule>,
    grace: Duration,
    fault: Option<Fault>,
) -> Compactor {
    compactor_every(bucket, downsample, grace, fault, Duration::from_millis(20))
}

/// [`compactor`] passing every `interval` (its first pass runs as it starts).
pub fn compactor_every(
    bucket: &Bucket,
    downsample: Vec<DownsampleRule>,
    grace: Duration,
    fault: Option<Fault>,
    interval: Duration,
) -> Compactor {
    Compactor::start(
        bucket.clone(),
        CompactorConfig {
            id: "c1".into(),
            interval,
            // Day blocks, as these tests check them: the 2023 data's weeks are
            // long over, and wide blocks would take the days (planned as in
            // `storage/src/cluster/plan.rs`'s tests, merged as a day is).
            policy: MergePolicy {
                min_segments: 2,
                blocks: BlockPolicy {
                    wide_width_ms: 0,
                    ..BlockPolicy::default()
                },
                ..MergePolicy::default()
            },
            lease_ttl: Duration::from_secs(30),
            grace,
            retention: None,
            downsample,
            zstd_level: 3,
            wide_zstd_level: 15,
            pause_before_swap: None,
            fault,
        },
    )
    .unwrap()
}
