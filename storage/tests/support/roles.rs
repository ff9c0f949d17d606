//! The cluster roles as the storage tests start them: a writer's store and
//! uploader, a querier's store and mirror, over one bucket, each waited for until
//! it has done its first pass.

#![allow(dead_code)]

use std::path::Path;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::Duration;

use profiledb_storage::{
    Bucket, Mirror, MirrorConfig, Store, StoreConfig, Uploader, UploaderConfig,
};

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
    let up = Uploader::start(
        store.clone(),
        bucket.clone(),
        UploaderConfig {
            writer_id: "w1".into(),
            interval: Duration::from_secs(3600),
            fault: None,
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
