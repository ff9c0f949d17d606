//! Damaged files on disk: corrupt segments are reported and quarantined, a torn WAL
//! tail is dropped, and everything else keeps serving. The catalog is reconciled with
//! the files after files go missing or the catalog itself is lost.

mod common;

use std::fs;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;

use common::*;
use profiledb_storage::{Selector, Store, TenantId, TimeRange};

const H: i64 = 3_600_000;
const T0: i64 = 1_700_000_000_000 / H * H;

fn one(ts: i64, f: &str, v: i64) -> Vec<TSample> {
    vec![TSample {
        labels: vec![("service_name".into(), "api".into())],
        ts,
        stack: vec![TFrame::Func("main".into()), TFrame::Func(f.into())],
        value: v,
    }]
}

fn segment_path(dir: &Path, store_dir_meta: &profiledb_storage::SegmentMeta) -> PathBuf {
    dir.join(&store_dir_meta.file)
}

fn flip(path: &Path, offset_from_start: Option<usize>, offset_from_end: Option<usize>) {
    let mut data = fs::read(path).unwrap();
    let i = match (offset_from_start, offset_from_end) {
        (Some(s), _) => s,
        (_, Some(e)) => data.len() - e,
        _ => unreachable!(),
    };
    data[i] ^= 0x5a;
    fs::write(path, data).unwrap();
}

fn folded(store: &Store) -> String {
    querier(store)
        .merge_tree(&TenantId::default(), &Selector::default(), TimeRange::all())
        .unwrap()
        .to_folded_text()
}

#[test]
fn corrupt_segments_and_wal_tail_are_isolated() {
    let dir = tempfile::tempdir().unwrap();
    let t = TenantId::default();
    let store = Store::open(dir.path(), test_config()).unwrap();
    for (i, f) in ["p1", "p2", "p3"].iter().enumerate() {
        store
            .write(build_batch(&t, &one(T0 + i as i64 * H, f, 10 + i as i64)))
            .unwrap();
    }
    store.flush().unwrap();
    let segs = store.segments();
    assert_eq!(segs.len(), 3);
    store
        .write(build_batch(&t, &one(T0 + 3 * H, "walB", 4)))
        .unwrap();
    store
        .write(build_batch(&t, &one(T0 + 3 * H, "walC", 5)))
        .unwrap();
    assert_eq!(
        folded(&store),
        "main;p1 10\nmain;p2 11\nmain;p3 12\nmain;walB 4\nmain;walC 5\n"
    );
    store.close_without_flush();

    // p2: a byte inside a data section (caught when the segment is loaded);
    // p3: a byte of the footer (caught at open); the WAL: the last record's tail.
    flip(&segment_path(dir.path(), &segs[1]), Some(20), None);
    flip(&segment_path(dir.path(), &segs[2]), None, Some(40));
    let wal = fs::read_dir(dir.path().join("wal"))
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .path();
    flip(&wal, None, Some(1));

    let store = Store::open(dir.path(), test_config()).unwrap();
    let st = store.stats();
    assert_eq!(
        st.segments_quarantined.load(Ordering::Relaxed),
        1,
        "footer damage is found at open"
    );
    assert!(st.wal_truncated_bytes.load(Ordering::Relaxed) > 0);
    // p2 is quarantined on first load; p1 and the intact WAL record still serve.
    assert_eq!(folded(&store), "main;p1 10\nmain;walB 4\n");
    assert_eq!(st.segments_quarantined.load(Ordering::Relaxed), 2);
    assert_eq!(store.segments().len(), 1);
    assert_eq!(
        fs::read_dir(dir.path().join("quarantine")).unwrap().count(),
        2
    );
    // Serving continues: new writes work and survive a restart.
    store
        .write(build_batch(&t, &one(T0 + 5, "later", 1)))
        .unwrap();
    drop(store);
    let store = Store::open(dir.path(), test_config()).unwrap();
    assert_eq!(folded(&store), "main;later 1\nmain;p1 10\nmain;walB 4\n");
    assert_eq!(
        store.stats().segments_quarantined.load(Ordering::Relaxed),
        0
    );
}

#[test]
fn verify_finds_damage_without_a_query() {
    let dir = tempfile::tempdir().unwrap();
    let t = TenantId::default();
    let store = Store::open(dir.path(), test_config()).unwrap();
    store.write(build_batch(&t, &one(T0, "a", 1))).unwrap();
    store.write(build_batch(&t, &one(T0 + H, "b", 2))).unwrap();
    store.flush().unwrap();
    let segs = store.segments();
    flip(&segment_path(dir.path(), &segs[0]), Some(12), None);
    assert_eq!(store.verify_segments(), vec![segs[0].id]);
    assert_eq!(folded(&store), "main;b 2\n");
}

#[test]
fn catalog_and_files_are_reconciled() {
    let dir = tempfile::tempdir().unwrap();
    let t = TenantId::default();
    {
        let store = Store::open(dir.path(), test_config()).unwrap();
        for i in 0..3 {
            store
                .write(build_batch(&t, &one(T0 + i * H, &format!("f{i}"), 1 + i)))
                .unwrap();
        }
    } // drop flushes
      // Lose the catalog entirely: it is rebuilt from the segment footers.
    fs::remove_dir_all(dir.path().join("catalog")).unwrap();
    let segs = {
        let store = Store::open(dir.path(), test_config()).unwrap();
        assert_eq!(store.stats().segments_adopted.load(Ordering::Relaxed), 3);
        assert_eq!(folded(&store), "main;f0 1\nmain;f1 2\nmain;f2 3\n");
        store.segments()
    };
    // A missing file is dropped from the catalog and reported.
    fs::remove_file(dir.path().join(&segs[0].file)).unwrap();
    // A leftover temporary file from an interrupted flush is removed.
    let tmp = dir.path().join(&segs[1].file).with_extension("seg.tmp");
    fs::write(&tmp, b"partial").unwrap();
    let store = Store::open(dir.path(), test_config()).unwrap();
    assert_eq!(store.stats().segments_missing.load(Ordering::Relaxed), 1);
    assert!(!tmp.exists());
    assert_eq!(folded(&store), "main;f1 2\nmain;f2 3\n");
    assert_eq!(store.segments().len(), 2);
}

/// After a downgrade, a segment in a format version newer than the build reads is
/// not damage: the store refuses to open, saying so, and leaves the file where it
/// is (nothing quarantined); the release that wrote it opens the directory intact.
#[test]
fn a_newer_segment_version_refuses_to_open_and_is_left_alone() {
    let dir = tempfile::tempdir().unwrap();
    let t = TenantId::default();
    let meta = {
        let store = Store::open(dir.path(), test_config()).unwrap();
        store.write(build_batch(&t, &one(T0, "work", 7))).unwrap();
        store.flush().unwrap();
        store.segments()[0].clone()
    };
    let path = segment_path(dir.path(), &meta);
    // The version is the u16 at 12 bytes from the end (docs/format.md, Trailer);
    // no checksum covers the trailer.
    let original = fs::read(&path).unwrap();
    let mut newer = original.clone();
    let at = newer.len() - 12;
    let version = u16::from_le_bytes([newer[at], newer[at + 1]]);
    newer[at..at + 2].copy_from_slice(&(version + 1).to_le_bytes());
    fs::write(&path, &newer).unwrap();

    match Store::open(dir.path(), test_config()) {
        Err(profiledb_storage::OpenError::Storage(
            e @ profiledb_storage::StorageError::UnsupportedVersion { .. },
        )) => {
            assert!(!e.is_corruption());
            assert!(
                e.to_string().contains(&format!("version {}", version + 1)),
                "{e}"
            );
        }
        Err(e) => panic!("expected a version error, got {e}"),
        Ok(_) => panic!("a store holding a newer segment opened"),
    }
    assert_eq!(
        fs::read(&path).unwrap(),
        newer,
        "the file is left as it was"
    );
    let quarantined = fs::read_dir(dir.path().join("quarantine"))
        .map(|d| d.count())
        .unwrap_or(0);
    assert_eq!(quarantined, 0);

    fs::write(&path, &original).unwrap();
    let store = Store::open(dir.path(), test_config()).unwrap();
    assert_eq!(store.segments().len(), 1);
    assert_eq!(folded(&store), "main;work 7\n");
}
