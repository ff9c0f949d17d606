//! A querier answers label and time-series queries from segment summaries: the
//! few sections holding labels and per-step totals, read with ranged GETs, never
//! the objects' bodies (the disk budget here holds none). A merge still needs the
//! rows, so it downloads the bodies, and answers exactly.

mod support;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::Duration;

use object_store::memory::InMemory;
use profiledb_storage::{
    Acked, Batch, Bucket, Labels, Mirror, Querier, QueryLimits, Sample, Selector, SeriesSamples,
    Store, TenantId, TimeRange, PROFILE_TYPE_LABEL,
};
use support::roles::{self, local, uploader};

/// Half past an hour: the 50 minutes of samples span two partitions, so two
/// segments, each well over the 64 KiB a querier reads to find a footer (a
/// smaller object comes whole with it).
const T0: i64 = 1_700_001_000_000;
const SERVICES: u64 = 8;
const STEPS: i64 = 300;
const STACKS: u64 = 40;

/// Sample values that compress like real ones (badly), so the rows are the bulk
/// of every object, as they are in production.
fn noise(x: u64) -> i64 {
    let mut z = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    ((z ^ (z >> 31)) % 1_000_000) as i64 + 1
}

/// One service's samples: every 10 s step, each of the stacks main → g`j` → h`k`.
fn batch(service: u64) -> (Batch, Vec<(i64, i64)>) {
    let mut b = Batch::new(TenantId::default());
    let loc = |b: &mut Batch, name: String| roles::frame(b, name, "x.go");
    let main = loc(&mut b, "main".into());
    let stacks: Vec<u32> = (0..STACKS)
        .map(|s| {
            let g = loc(&mut b, format!("g{}", s % 8));
            let h = loc(&mut b, format!("h{s}"));
            b.stacks.push(&[main, g, h])
        })
        .collect();
    let mut samples = Vec::new();
    let mut points = Vec::new();
    for i in 0..STEPS {
        let t = T0 + i * 10_000;
        let mut step_total = 0;
        for (s, &stack) in stacks.iter().enumerate() {
            let value = noise((service << 40) | ((i as u64) << 16) | s as u64);
            step_total += value;
            samples.push(Sample {
                timestamp_ms: t,
                stack,
                value,
            });
        }
        points.push((t, step_total));
    }
    b.series.push(SeriesSamples {
        labels: Labels::new([
            (
                PROFILE_TYPE_LABEL,
                "process_cpu:cpu:nanoseconds:cpu:nanoseconds",
            ),
            ("service_name", format!("svc{service}").as_str()),
        ]),
        samples,
    });
    (b, points)
}

/// Expected answers: per service, its `(10 s step, total)` points.
type Want = BTreeMap<String, Vec<(i64, i64)>>;

/// Every service's samples uploaded to `bucket` by a writer in `dir`.
fn upload(bucket: &Bucket, dir: &std::path::Path) -> Want {
    let store = Arc::new(Store::open(dir.join("w"), local()).unwrap());
    let up = uploader(&store, bucket);
    let mut want = Want::new();
    let mut last = 0;
    for s in 0..SERVICES {
        let (b, points) = batch(s);
        last = store.write(b).unwrap();
        want.insert(format!("svc{s}"), points);
    }
    up.upload_now().unwrap();
    assert_eq!(up.wait_uploaded(last, Duration::ZERO), Acked::Bucket);
    want
}

/// A querier in `dir` that keeps no body on disk and never syncs on its own.
fn querier(bucket: &Bucket, dir: &std::path::Path) -> (Arc<Store>, Mirror) {
    roles::querier(bucket, &dir.join("q"), Duration::from_secs(3600), 1)
}

#[test]
fn querier_answers_labels_and_time_series_from_section_reads() {
    let bucket = Bucket::from_store(Arc::new(InMemory::new()), "c");
    let dir = tempfile::tempdir().unwrap();
    let want = upload(&bucket, dir.path());
    let index = bucket.load_index("anonymous").unwrap();
    assert_eq!(index.segments.len(), 2, "{:?}", index.segments);
    let object_bytes: u64 = index.segments.iter().map(|e| e.bytes).sum();

    let (qstore, mirror) = querier(&bucket, dir.path());
    // Attaching read the footers; every object is big enough to leave the body.
    let sizes: Vec<u64> = index.segments.iter().map(|e| e.bytes).collect();
    assert_eq!(mirror.stats().downloads.load(Relaxed), 0, "{sizes:?}");
    let before = bucket.stats();
    let q = Querier::new(&qstore, 0, QueryLimits::default());
    let tenant = TenantId::default();

    let services = q
        .label_values(
            &tenant,
            "service_name",
            &Selector::default(),
            TimeRange::all(),
        )
        .unwrap();
    assert_eq!(services, want.keys().cloned().collect::<Vec<_>>());
    let names: BTreeSet<String> = q
        .label_names(&tenant, &Selector::default(), TimeRange::all())
        .unwrap()
        .into_iter()
        .collect();
    assert!(names.contains("service_name"), "{names:?}");

    // Time series by service at the storage step: exactly the samples' totals.
    let series = q
        .time_series(
            &tenant,
            &Selector::default(),
            TimeRange::new(T0 - 3_600_000, T0 + 7_200_000),
            &["service_name".to_string()],
            10_000,
            0,
        )
        .unwrap();
    let got: BTreeMap<String, Vec<(i64, i64)>> = series
        .into_iter()
        .map(|s| (s.labels[0].1.clone(), s.points))
        .collect();
    assert_eq!(got, want);
    let totals = q
        .series_totals(
            &tenant,
            &Selector::parse(r#"{service_name="svc3"}"#).unwrap(),
            TimeRange::all(),
        )
        .unwrap();
    let svc3: Vec<(i64, i64)> = totals.values().flatten().map(|(t, v)| (*t, *v)).collect();
    assert_eq!(&svc3, &want["svc3"]);

    // Only ranged GETs of the summary sections: no body, far fewer bytes than
    // the objects hold.
    let after = bucket.stats();
    let m = mirror.stats();
    assert_eq!(m.downloads.load(Relaxed), 0, "{m:?}");
    assert_eq!(m.summaries.load(Relaxed), 2, "{m:?}");
    assert_eq!(after.gets, before.gets, "{after:?}");
    let ranged = after.range_gets - before.range_gets;
    assert!(
        ranged > 0 && ranged == m.section_reads.load(Relaxed),
        "{after:?} {m:?}"
    );
    let read = after.bytes_read - before.bytes_read;
    assert!(
        read * 4 < object_bytes,
        "{read} bytes read of {object_bytes} in the objects"
    );
    // The summaries stay cached: asking again reads nothing.
    q.label_values(
        &tenant,
        "service_name",
        &Selector::default(),
        TimeRange::all(),
    )
    .unwrap();
    assert_eq!(bucket.stats().bytes_read, after.bytes_read);
    assert!(qstore.gauges().summary_cache_bytes > 0);

    // A merge needs the rows: the bodies are downloaded, and the sum is exact.
    let merged = q
        .merge_tree(&tenant, &Selector::default(), TimeRange::all())
        .unwrap()
        .total();
    let all: i64 = want.values().flatten().map(|p| p.1).sum();
    assert_eq!(merged, all);
    assert_eq!(mirror.stats().downloads.load(Relaxed), 2);
    assert!(bucket.stats().gets > after.gets);
}

/// Two segments uploaded to a fresh bucket, the first one's object rewritten by
/// `damage`; returns the bucket, the uploads' directory, the uploaded samples
/// and the rewritten object's key.
fn uploaded_with_first_object(
    damage: impl FnOnce(&mut Vec<u8>),
) -> (Bucket, tempfile::TempDir, Want, String) {
    let bucket = Bucket::from_store(Arc::new(InMemory::new()), "c");
    let dir = tempfile::tempdir().unwrap();
    let want = upload(&bucket, dir.path());
    let index = bucket.load_index("anonymous").unwrap();
    let key = index.segments[0].key.clone();
    let mut bytes = bucket.get(&key).unwrap().to_vec();
    damage(&mut bytes);
    bucket.put(&key, bytes.into()).unwrap();
    (bucket, dir, want, key)
}

/// The service names a querier over `qstore` answers with.
fn services(qstore: &Store) -> Vec<String> {
    Querier::new(qstore, 0, QueryLimits::default())
        .label_values(
            &TenantId::default(),
            "service_name",
            &Selector::default(),
            TimeRange::all(),
        )
        .unwrap()
}

#[test]
fn a_damaged_summary_section_quarantines_the_object() {
    // The byte before the footer is the last section's: SeriesTotals, a summary
    // section. The footer (which attaching checks) stays intact.
    let (bucket, dir, want, key) = uploaded_with_first_object(|bytes| {
        let trailer = bytes.len() - 28;
        let footer_offset = u64::from_le_bytes(bytes[trailer..trailer + 8].try_into().unwrap());
        bytes[footer_offset as usize - 1] ^= 0x55;
    });
    let (qstore, mirror) = querier(&bucket, dir.path());
    // The other segment still answers (every service has samples in both).
    assert_eq!(services(&qstore), want.keys().cloned().collect::<Vec<_>>());
    assert_eq!(mirror.stats().quarantined.load(Relaxed), 1);
    assert_eq!(mirror.stats().downloads.load(Relaxed), 0);
    let index = bucket.load_index("anonymous").unwrap();
    assert_eq!(index.segments.len(), 1);
    assert_eq!(index.quarantined.len(), 1);
    assert_eq!(index.quarantined[0].key, key);
    assert_eq!(qstore.segments().len(), 1);
}

/// An object in a segment format version newer than the querier reads (a
/// querier not upgraded yet) is neither served nor quarantined: the others are
/// served, and the bucket index still lists it for the queriers that read it.
#[test]
fn a_newer_format_version_is_skipped_not_quarantined() {
    // The trailer's version (docs/format.md): 12 bytes from the end.
    let (bucket, dir, want, _) = uploaded_with_first_object(|bytes| {
        let at = bytes.len() - 12;
        let version = u16::from_le_bytes([bytes[at], bytes[at + 1]]);
        bytes[at..at + 2].copy_from_slice(&(version + 1).to_le_bytes());
    });
    let (qstore, mirror) = querier(&bucket, dir.path());
    assert_eq!(services(&qstore), want.keys().cloned().collect::<Vec<_>>());
    assert_eq!(qstore.segments().len(), 1);
    assert_eq!(mirror.stats().quarantined.load(Relaxed), 0);
    let index = bucket.load_index("anonymous").unwrap();
    assert_eq!(index.segments.len(), 2);
    assert!(index.quarantined.is_empty());
}
