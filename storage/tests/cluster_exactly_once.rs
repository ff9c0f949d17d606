//! The issue #50 double count, in one process over an in-memory bucket: a
//! writer whose pass stops right after its writes were acknowledged (before it
//! drops its local copy), reopened only after the compactor merged that segment
//! and garbage collection deleted it and forgot its key. The writer uploads its
//! local copy again under the same key; the index must still count it once.
//! The oracle is the sum of the values written.

mod support;

use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::Duration;

use object_store::memory::InMemory;
use profiledb_storage::{
    Acked, Bucket, ClusterError, Fault, FaultAction, FaultPoint, Store, TimeRange,
};
use support::roles::{self, batch_at, local, querier, total_in, uploader, uploader_with, wait};

const T0: i64 = 1_700_000_000_000;

fn objects(bucket: &Bucket) -> Vec<String> {
    bucket
        .list("tenants/")
        .unwrap()
        .into_iter()
        .map(|o| o.key)
        .filter(|k| k.contains("/segments/"))
        .collect()
}

#[test]
fn an_upload_retried_after_its_merge_and_garbage_collection_is_counted_once() {
    let bucket = Bucket::from_store(Arc::new(InMemory::new()), "x");
    let dir = tempfile::tempdir().unwrap();
    let wdir = dir.path().join("w");

    // Two uploads of one partition: the first goes through whole; the second
    // pass stops after its writes were acknowledged (the crash of the issue).
    let store = Arc::new(Store::open(&wdir, local()).unwrap());
    let up = uploader(&store, &bucket);
    let first = store.write(batch_at(T0, 1, 1)).unwrap();
    up.upload_now().unwrap();
    assert_eq!(up.wait_uploaded(first, Duration::ZERO), Acked::Bucket);
    drop(up);
    let crash = Fault::new(FaultPoint::WriterAfterAck, 1, FaultAction::Fail);
    let up = uploader_with(&store, &bucket, Some(crash));
    let second = store.write(batch_at(T0 + 1000, 2, 10)).unwrap();
    assert!(
        matches!(
            up.upload_now(),
            Err(ClusterError::Fault {
                point: "writer-after-ack"
            })
        ),
        "the fault stops the pass"
    );
    assert_eq!(up.wait_uploaded(second, Duration::ZERO), Acked::Bucket);
    assert_eq!(
        store.segments().len(),
        1,
        "the acknowledged copy stays local"
    );
    drop(up);
    Arc::try_unwrap(store)
        .ok()
        .expect("no other handle")
        .close_without_flush();

    // The compactor merges both and, with no grace, deletes and forgets the
    // sources: no list of the index names the second upload's key any more.
    let before = objects(&bucket);
    assert_eq!(before.len(), 2);
    let c = roles::compactor(&bucket, Vec::new(), Duration::ZERO, None);
    wait("the merge and the collection of its sources", || {
        let idx = bucket.load_index("anonymous").unwrap();
        c.stats().merges.load(Relaxed) == 1
            && idx.retired.is_empty()
            && before.iter().all(|k| !idx.knows(k))
    });
    drop(c);
    assert!(before.iter().all(|k| !objects(&bucket).contains(k)));

    // The writer comes back: its WAL and local copy say the second write is not
    // known to be in the bucket, so it uploads it again, same key, same number.
    let store = Arc::new(Store::open(&wdir, local()).unwrap());
    let up = uploader(&store, &bucket);
    up.upload_now().unwrap();
    assert!(
        objects(&bucket).iter().any(|k| before.contains(k)),
        "the retry re-uploaded the object"
    );
    let idx = bucket.load_index("anonymous").unwrap();
    assert_eq!(idx.segments.len(), 1, "{idx:?}");
    let (qstore, _m) = querier(
        &bucket,
        &dir.path().join("q"),
        Duration::from_millis(20),
        1 << 30,
    );
    assert_eq!(total_in(&qstore, TimeRange::all()), 1 + 10);

    // The refused copy is an orphan, collected like any other.
    let c = roles::compactor(&bucket, Vec::new(), Duration::ZERO, None);
    wait("the orphan to be collected", || objects(&bucket).len() == 1);
    drop(c);
    assert_eq!(total_in(&qstore, TimeRange::all()), 1 + 10);
}

/// Every writer fault point, in process: the pass stops there, the writer is
/// reopened from its disk, and the bucket holds each write once.
#[test]
fn a_writer_stopped_at_any_step_uploads_each_write_once() {
    for (i, point) in [
        FaultPoint::WriterAfterUpload,
        FaultPoint::WriterAfterIndex,
        FaultPoint::WriterAfterAck,
        FaultPoint::WriterAfterForget,
    ]
    .into_iter()
    .enumerate()
    {
        let bucket = Bucket::from_store(Arc::new(InMemory::new()), "x");
        let dir = tempfile::tempdir().unwrap();
        let wdir = dir.path().join("w");
        let store = Arc::new(Store::open(&wdir, local()).unwrap());
        let up = uploader_with(
            &store,
            &bucket,
            Some(Fault::new(point, 1, FaultAction::Fail)),
        );
        for k in 0..3 {
            store
                .write(batch_at(T0 + k * 1000, k, 1 << (k + 4 * i as i64)))
                .unwrap();
        }
        assert!(
            matches!(up.upload_now(), Err(ClusterError::Fault { point: p }) if p == point.name()),
            "{point:?}"
        );
        drop(up);
        Arc::try_unwrap(store)
            .ok()
            .expect("no other handle")
            .close_without_flush();
        let store = Arc::new(Store::open(&wdir, local()).unwrap());
        let up = uploader(&store, &bucket);
        up.upload_now().unwrap();
        up.upload_now().unwrap();
        let want: i64 = (0..3).map(|k| 1i64 << (k + 4 * i as i64)).sum();
        let (qstore, _m) = querier(
            &bucket,
            &dir.path().join("q"),
            Duration::from_millis(20),
            1 << 30,
        );
        assert_eq!(total_in(&qstore, TimeRange::all()), want, "{point:?}");
    }
}
