//! The cluster roles over one in-memory bucket, in one process: a writer's
//! uploader, a querier's mirror and a compactor. A writer that crashes (no flush)
//! and reopens uploads what its WAL held exactly once; the mirror serves every
//! write, and the same totals after the compactor merged the segments and
//! downsampled them (the data is old enough for the 1-hour rule).

mod support;

use std::sync::Arc;
use std::time::Duration;

use object_store::memory::InMemory;
use profiledb_storage::{Acked, Batch, Bucket, Compactor, DownsampleRule, Store, TimeRange};
use support::roles::{self, batch_at, local, querier, total_in, uploader, wait};

const T0: i64 = 1_700_000_000_000;

/// One sample of `value` on main → f`i` at `T0 + i` seconds.
fn batch(i: i64, value: i64) -> Batch {
    batch_at(T0 + i * 1000, i, value)
}

fn total(store: &Store) -> i64 {
    total_in(store, TimeRange::all())
}

fn compactor(bucket: &Bucket, downsample: Vec<DownsampleRule>) -> Compactor {
    roles::compactor(bucket, downsample, Duration::from_secs(3600), None)
}

#[test]
fn writer_crash_uploads_once_and_mirror_and_compactor_keep_totals() {
    let bucket = Bucket::from_store(Arc::new(InMemory::new()), "c");
    let dir = tempfile::tempdir().unwrap();

    // Uploaded: 1..=3. Then 4 and 5 are acknowledged (WAL) and the writer dies.
    let store = Arc::new(Store::open(dir.path().join("w"), local()).unwrap());
    let up = uploader(&store, &bucket);
    let mut last = 0;
    for i in 1..=3 {
        last = store.write(batch(i, i)).unwrap();
    }
    up.upload_now().unwrap();
    assert_eq!(up.wait_uploaded(last, Duration::ZERO), Acked::Bucket);
    assert_eq!(store.replay_floor(), last);
    // Local copies wholly under the floor are gone: the bucket holds them.
    assert!(store.segments().is_empty());
    let crashed = store.write(batch(4, 4)).unwrap();
    store.write(batch(5, 5)).unwrap();
    // (Not `wait_uploaded`: a waiting write starts a pass, which would upload them.)
    assert!(
        up.stats()
            .watermark
            .load(std::sync::atomic::Ordering::Relaxed)
            < crashed
    );
    drop(up);
    Arc::try_unwrap(store)
        .ok()
        .expect("no other handle")
        .close_without_flush();

    // Reopened: replay skips 1..=3 (in the bucket), applies 4 and 5 once.
    let store = Arc::new(Store::open(dir.path().join("w"), local()).unwrap());
    assert_eq!(total(&store), 4 + 5);
    let up = uploader(&store, &bucket);
    up.upload_now().unwrap();
    up.upload_now().unwrap();
    let n = bucket.load_index("anonymous").unwrap().segments.len();

    // A querier mirrors the bucket: every write, once.
    // A disk budget smaller than two segments: every query past the first refetches.
    let (qstore, mirror) = querier(&bucket, &dir.path().join("q"), Duration::from_millis(20), 1);
    assert_eq!(total(&qstore), 1 + 2 + 3 + 4 + 5);
    assert_eq!(qstore.segments().len(), n);
    // The 1-byte disk budget keeps only the body fetched last: the others were
    // evicted and fetched again when the query needed them.
    let s = mirror.stats();
    use std::sync::atomic::Ordering::Relaxed;
    assert!(s.downloads.load(Relaxed) >= n as u64, "{s:?}");
    assert!(s.evictions.load(Relaxed) >= n as u64 - 1, "{s:?}");
    let on_disk = std::fs::read_dir(dir.path().join("q/objects"))
        .unwrap()
        .filter(|e| {
            e.as_ref()
                .unwrap()
                .path()
                .extension()
                .is_some_and(|x| x == "seg")
        })
        .count();
    assert_eq!(on_disk, 1);

    // The compactor merges the partition's segments into one; same total. The
    // data is from 2023: past the 30-day rule, so the merge is also rewritten at
    // 1-hour steps, into the block of its day.
    let compactor = compactor(&bucket, DownsampleRule::defaults());
    wait("a merge", || {
        compactor
            .stats()
            .merges
            .load(std::sync::atomic::Ordering::Relaxed)
            > 0
    });
    wait("the mirror to swap the merge in", || {
        qstore.segments().len() == 1
    });
    assert_eq!(total(&qstore), 1 + 2 + 3 + 4 + 5);
    let idx = bucket.load_index("anonymous").unwrap();
    assert_eq!(idx.segments.len(), 1);
    assert_eq!(idx.segments[0].level, 1);
    assert_eq!(idx.segments[0].step_ms, 3_600_000);
    assert_eq!(idx.segments[0].width_ms, 86_400_000);
    assert_eq!(idx.retired.len(), n);
}

/// Hours of a day long over are merged into one block spanning the day: one
/// object in the index, the querier's answers per hour unchanged.
#[test]
fn a_past_day_becomes_one_block_with_the_same_answers() {
    const HOUR: i64 = 3_600_000;
    const DAY: i64 = 86_400_000;
    let day = T0.div_euclid(DAY) * DAY;
    let bucket = Bucket::from_store(Arc::new(InMemory::new()), "b");
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(Store::open(dir.path().join("w"), local()).unwrap());
    let up = uploader(&store, &bucket);
    // Three hours, two uploads in the first (two segments of one partition), and
    // the last step of the day.
    let writes = [
        (day + 5_000, 1, 1),
        (day + 15_000, 2, 10),
        (day + 7 * HOUR + 30_000, 3, 100),
        (day + DAY - 10_000, 4, 1000),
    ];
    for (at, i, v) in writes {
        let lsn = store.write(batch_at(at, i, v)).unwrap();
        up.upload_now().unwrap();
        assert_eq!(up.wait_uploaded(lsn, Duration::ZERO), Acked::Bucket);
    }
    let before = bucket.load_index("anonymous").unwrap();
    assert_eq!(before.segments.len(), 4);

    let (qstore, _mirror) = querier(
        &bucket,
        &dir.path().join("q"),
        Duration::from_millis(20),
        1 << 30,
    );
    let hours = [
        TimeRange::new(day, day + HOUR),
        TimeRange::new(day + 7 * HOUR, day + 8 * HOUR),
        TimeRange::new(day + DAY - HOUR, day + DAY),
        TimeRange::new(day + 10_000, day + DAY - 10_000),
        TimeRange::new(day, day + DAY),
    ];
    let want = [11, 100, 1000, 110, 1111];
    for (r, w) in hours.iter().zip(want) {
        assert_eq!(total_in(&qstore, *r), w, "{r:?} before the block");
    }

    // No downsampling: the block keeps the 10 s steps.
    let c = compactor(&bucket, Vec::new());
    wait("the block", || {
        let idx = bucket.load_index("anonymous").unwrap();
        idx.segments.len() == 1 && idx.segments[0].width_ms == DAY
    });
    let idx = bucket.load_index("anonymous").unwrap();
    let block = &idx.segments[0];
    assert_eq!(
        (block.partition_ms, block.step_ms, block.level),
        (day, 10_000, 1)
    );
    assert_eq!((block.min_ms, block.max_ms), (day, day + DAY));
    assert_eq!(idx.retired.len(), 4);
    assert_eq!(
        c.stats().merges.load(std::sync::atomic::Ordering::Relaxed),
        1
    );
    wait("the mirror to swap the block in", || {
        qstore.segments().len() == 1
    });
    assert_eq!(qstore.segments()[0].partition_ms, DAY);
    for (r, w) in hours.iter().zip(want) {
        assert_eq!(total_in(&qstore, *r), w, "{r:?} from the block");
    }
}
