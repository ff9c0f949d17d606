//! Damaged objects of every kind, met by a fresh querier and by a compactor, on
//! the in-memory store and over the real S3 protocol (moto: a range past an
//! object's end is its HTTP 416). Each damaged object is quarantined once and
//! counted, the querier still becomes ready and serves the rest, and the
//! compactor takes every damaged source of a merge out in one pass. The oracle
//! is the values written, less those of the damaged objects.

mod support;

use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::Duration;

use profiledb_storage::{Acked, Batch, Bucket, Sample, Store, TenantId, TimeRange};
use support::roles::{self, buckets, demo_series, frame, local, total_in, uploader, wait};

const T0: i64 = 1_700_000_000_000;

/// `n` samples of `value` each on distinct stacks main → <random name>, at
/// `at_ms`: with `n` in the thousands the segment is well over 64 KiB, the
/// tail a querier reads first.
fn wide_batch(at_ms: i64, seed: u64, n: usize, value: i64) -> Batch {
    let mut b = Batch::new(TenantId::default());
    let mut x = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    let main = frame(&mut b, "main".into(), "");
    let mut samples = Vec::with_capacity(n);
    for _ in 0..n {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let leaf = frame(&mut b, format!("f{x:016x}{:016x}", x.rotate_left(29)), "");
        let stack = b.stacks.push(&[main, leaf]);
        samples.push(Sample {
            timestamp_ms: at_ms,
            stack,
            value,
        });
    }
    b.series.push(demo_series(samples));
    b
}

/// Writes one segment per value in `values` (one upload each) into `bucket`;
/// their object keys, in order.
fn upload_each(bucket: &Bucket, dir: &std::path::Path, values: &[i64], n: usize) -> Vec<String> {
    let store = Arc::new(Store::open(dir, local()).unwrap());
    let up = uploader(&store, bucket);
    let mut keys = Vec::new();
    for (i, v) in values.iter().enumerate() {
        let lsn = store
            .write(wide_batch(T0 + i as i64 * 1000, i as u64 + 1, n, *v))
            .unwrap();
        up.upload_now().unwrap();
        assert_eq!(up.wait_uploaded(lsn, Duration::ZERO), Acked::Bucket);
        let idx = bucket.load_index("anonymous").unwrap();
        let newest = idx.segments.last().unwrap().key.clone();
        keys.push(newest);
    }
    keys
}

fn flip(bucket: &Bucket, key: &str, at: impl Fn(usize) -> usize) {
    let mut b = bucket.get(key).unwrap().to_vec();
    let i = at(b.len());
    b[i] ^= 0xff;
    bucket.put(key, b.into()).unwrap();
}

#[test]
fn a_fresh_querier_quarantines_every_kind_of_damage_and_serves_the_rest() {
    for (bucket, _s3) in buckets("querier-damage") {
        let dir = tempfile::tempdir().unwrap();
        // 4000 stacks a segment: well over 64 KiB.
        let values = [1, 10, 100, 1000, 10_000, 100_000, 1_000_000];
        let keys = upload_each(&bucket, &dir.path().join("w"), &values, 4000);
        let size = bucket.head(&keys[0]).unwrap().size;
        assert!(size > 64 << 10, "{size}");
        // Truncated to half (a range past the end: 416), the head's magic
        // broken, the footer's checksum broken, deleted, emptied, a body
        // section's checksum broken; the last one is intact.
        let half = bucket.get(&keys[0]).unwrap();
        bucket.put(&keys[0], half.slice(..half.len() / 2)).unwrap();
        flip(&bucket, &keys[1], |_| 0);
        flip(&bucket, &keys[2], |len| len - 30);
        bucket.delete(&keys[3]).unwrap();
        bucket.put(&keys[4], bytes::Bytes::new()).unwrap();
        flip(&bucket, &keys[5], |len| len / 3);

        let (qstore, mirror) = roles::querier(
            &bucket,
            &dir.path().join("q"),
            Duration::from_millis(50),
            1 << 30,
        );
        assert!(
            mirror.synced() && mirror.healthy(),
            "{:?}",
            mirror.last_error()
        );
        // Found at the first sync: the five whose head or footer is unusable.
        assert_eq!(mirror.stats().quarantined.load(Relaxed), 5);
        // A body section is only checked when a query needs the rows.
        let total = total_in(&qstore, TimeRange::all());
        assert_eq!(total, 4000 * 1_000_000);
        wait("the body's damage to reach the index", || {
            bucket.load_index("anonymous").unwrap().quarantined.len() == 6
        });
        assert_eq!(mirror.stats().quarantined.load(Relaxed), 6);
        let idx = bucket.load_index("anonymous").unwrap();
        let mut bad: Vec<&str> = idx.quarantined.iter().map(|q| q.key.as_str()).collect();
        bad.sort();
        let mut want: Vec<&str> = keys[..6].iter().map(String::as_str).collect();
        want.sort();
        assert_eq!(bad, want);
        assert!(mirror.healthy(), "{:?}", mirror.last_error());
        assert_eq!(total_in(&qstore, TimeRange::all()), 4000 * 1_000_000);
    }
}

#[test]
fn a_compactor_quarantines_every_damaged_source_in_one_pass() {
    for (bucket, _s3) in buckets("compactor-damage") {
        let dir = tempfile::tempdir().unwrap();
        let keys = upload_each(&bucket, &dir.path().join("w"), &[1, 10, 100, 1000], 50);
        bucket.delete(&keys[0]).unwrap();
        flip(&bucket, &keys[2], |len| len / 2);
        // One pass only (the next is an hour away): both go in it.
        let c = roles::compactor_every(
            &bucket,
            Vec::new(),
            Duration::from_secs(3600),
            None,
            Duration::from_secs(3600),
        );
        wait("both damaged sources to be quarantined", || {
            c.stats().quarantined.load(Relaxed) == 2
        });
        assert_eq!(c.stats().merges.load(Relaxed), 0);
        drop(c);
        // The next pass merges the rest.
        let c = roles::compactor(&bucket, Vec::new(), Duration::from_secs(3600), None);
        wait("the rest to be merged", || {
            c.stats().merges.load(Relaxed) == 1
        });
        assert_eq!(c.stats().merged_sources.load(Relaxed), 2);
        let (qstore, _m) = roles::querier(
            &bucket,
            &dir.path().join("q"),
            Duration::from_millis(50),
            1 << 30,
        );
        assert_eq!(total_in(&qstore, TimeRange::all()), 50 * (10 + 1000));
    }
}
