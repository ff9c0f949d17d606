//! The WAL is bounded by the head budget: once its files pass `head_max_bytes`, the
//! partition holding the oldest record is flushed early (its hour still open), the
//! files before the segment's LSN are deleted, and a replay after a crash restores
//! exactly what was acknowledged — nothing lost, nothing counted twice.

mod common;

use std::collections::BTreeSet;
use std::path::Path;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use common::*;
use profiledb_storage::{ReplayProgress, Store, StoreConfig, TenantId};

/// Big enough that the head (its open share is half of this) never fills: every
/// early flush here is one the WAL triggers.
const HEAD_BUDGET: usize = 1 << 20;

fn config() -> StoreConfig {
    StoreConfig {
        head_max_bytes: HEAD_BUDGET,
        fsync: profiledb_storage::FsyncPolicy::Never,
        // Full WAL records, which repeat every stack's names: the WAL outgrows the
        // head. (With the interner on, records name stacks by id, and the WAL of
        // this workload grows slower than its head.)
        stack_interner_bytes: 0,
        ..test_config()
    }
}

/// Batch `i`: one series, 30 samples over the same 30 stacks as every other batch,
/// all in one open partition. The head stores those stacks once; full WAL records
/// repeat them in every record, so it outgrows the head long before the head reaches its
/// budget — the steady state of a service whose stacks do not change.
fn batch_samples(i: u64) -> Vec<TSample> {
    let ts = 1_700_000_000_000i64 + (i as i64 % 300) * 1_000;
    (0..30)
        .map(|j| TSample {
            labels: vec![
                ("batch".into(), i.to_string()),
                ("service_name".into(), "svc".into()),
            ],
            ts,
            stack: (0..12)
                .map(|d| TFrame::Func(format!("pkg{d}.function_with_a_rather_long_name_{j}_{d}")))
                .collect(),
            value: (i as i64 % 7) + j + 1,
        })
        .collect()
}

fn expected(i: u64) -> i64 {
    batch_samples(i).iter().map(|s| s.value).sum()
}

/// `(first LSN in the file name, bytes)` of every WAL file, in order.
fn wal_files(dir: &Path) -> Vec<(u64, u64)> {
    let mut files: Vec<(u64, u64)> = std::fs::read_dir(dir.join("wal"))
        .unwrap()
        .map(|e| e.unwrap())
        .filter_map(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            let lsn = name.strip_suffix(".wal")?.parse().ok()?;
            Some((lsn, e.metadata().unwrap().len()))
        })
        .collect();
    files.sort();
    files
}

#[test]
fn early_flush_deletes_the_wal_before_its_lsn_and_replay_is_exact() {
    let tmp = tempfile::tempdir().unwrap();
    let tenant = TenantId::default();
    let store = Store::open(tmp.path(), config()).unwrap();
    let mut acked = BTreeSet::new();
    let mut written = 0u64;
    let mut i = 0u64;
    // Write until the WAL has triggered early flushes more than once, so files were
    // both written and deleted while the partition stayed open.
    while store.stats().early_flushes_wal.load(Ordering::Relaxed) < 3 {
        assert!(i < 20_000, "the WAL never triggered an early flush");
        let batch = build_batch(&tenant, &batch_samples(i));
        store.write(batch).unwrap();
        written += 1;
        acked.insert(i);
        i += 1;
    }
    // Wait for the flusher to finish the last sealed partition (not a timing
    // assertion: the deadline only turns a hang into a failure).
    let deadline = Instant::now() + Duration::from_secs(60);
    while store.stats().segments_flushed.load(Ordering::Relaxed) < 3 {
        assert!(Instant::now() < deadline, "flushes did not finish");
        std::thread::sleep(Duration::from_millis(10));
    }
    assert!(store.stats().wal_removed_files.load(Ordering::Relaxed) > 0);
    let segments = store.segments();
    // Every segment is of the one open partition: they are early flushes.
    assert!(segments.len() >= 3);
    assert!(segments
        .iter()
        .all(|m| m.partition_start_ms == segments[0].partition_start_ms));
    store.close_without_flush();

    // The files before the newest segment's LSN are gone: only the file straddling
    // it may hold older records.
    let covered = segments.iter().map(|m| m.max_lsn).max().unwrap();
    let files = wal_files(tmp.path());
    assert!(
        files.iter().skip(1).all(|&(first, _)| first > covered),
        "WAL files {files:?} still hold records at or below LSN {covered}"
    );
    // What a replay reads stays near the head budget: the budget, plus the file
    // being written when it was passed (a quarter of the budget) and one group.
    let wal_bytes: u64 = files.iter().map(|f| f.1).sum();
    assert!(
        wal_bytes <= (HEAD_BUDGET + HEAD_BUDGET / 4) as u64 + (64 << 10),
        "WAL holds {wal_bytes} bytes for a head budget of {HEAD_BUDGET}"
    );

    let progress = ReplayProgress::default();
    let store = Store::open_with_progress(tmp.path(), config(), &progress).unwrap();
    assert_eq!(progress.bytes(), (wal_bytes, wal_bytes));
    let stored = check_acknowledged(&store, &acked, written, expected);
    assert_eq!(stored as u64, written);
    store.close_without_flush();
}

/// With the interner on, records name stacks by id and define each id once per
/// WAL file. Flushes delete the files that first defined this workload's stacks
/// while later records keep using them: a replay after a crash must still read
/// every record of the files left (each file defines what it uses).
#[test]
fn id_records_replay_after_the_files_that_first_defined_their_stacks_are_deleted() {
    let tmp = tempfile::tempdir().unwrap();
    let tenant = TenantId::default();
    let cfg = StoreConfig {
        stack_interner_bytes: 64 << 20,
        ..config()
    };
    let store = Store::open(tmp.path(), cfg.clone()).unwrap();
    let mut acked = BTreeSet::new();
    let removed = || store.stats().wal_removed_files.load(Ordering::Relaxed);
    let mut i = 0u64;
    // Until files were deleted twice, then as many batches again.
    let mut stop = None;
    while stop.is_none_or(|s| i < s) {
        assert!(i < 50_000, "no WAL file was ever deleted");
        store
            .write(build_batch(&tenant, &batch_samples(i)))
            .unwrap();
        acked.insert(i);
        i += 1;
        if stop.is_none() && removed() >= 2 {
            stop = Some(2 * i);
        }
    }
    let deadline = Instant::now() + Duration::from_secs(60);
    while store.stats().segments_flushed.load(Ordering::Relaxed)
        < store.stats().early_flushes_head.load(Ordering::Relaxed)
            + store.stats().early_flushes_wal.load(Ordering::Relaxed)
    {
        assert!(Instant::now() < deadline, "flushes did not finish");
        std::thread::sleep(Duration::from_millis(10));
    }
    store.close_without_flush();
    let files = wal_files(tmp.path());
    assert!(
        files.first().is_some_and(|&(first, _)| first > 1),
        "the first WAL files were deleted: {files:?}"
    );

    let store = Store::open(tmp.path(), cfg).unwrap();
    assert!(store.stats().wal_replayed_records.load(Ordering::Relaxed) > 0);
    let stored = check_acknowledged(&store, &acked, i, expected);
    assert_eq!(stored as u64, i);
    store.close_without_flush();
}
