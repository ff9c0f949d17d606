//! Opening a store: the directory lock, the catalog reconciled with the segment
//! files (the files are the truth), and the WAL replayed into the head.
//!
//! Runs once, before any role's thread starts; everything it builds is handed to
//! the store (`mod.rs`).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fs::{self, File, OpenOptions};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use parking_lot::RwLock;
use tracing::{error, info, warn};

use super::now_ms;
use super::state::{SegmentHandle, State};
use super::symlog::{RecordError, Resolver};
use super::writer::apply_batch;
use crate::catalog::Catalog;
use crate::config::StoreConfig;
use crate::error::{IoContext, Result, StorageError};
use crate::model::TenantId;
use crate::segment::{self, SegmentFile, SegmentMeta};
use crate::stats::{inc, StoreStats};
use crate::wal::{ReplayProgress, Wal};

/// Head partitions one segment is taken to cover at most when the WAL is replayed
/// (a block of 24 one-hour partitions covers 24).
const MAX_PARTITIONS_PER_SEGMENT: usize = 1 << 16;

/// What opening found and rebuilt.
pub(super) struct Recovered {
    pub lock: File,
    pub catalog: Catalog,
    pub state: State,
    pub wal: Wal,
    pub next_lsn: u64,
    pub replay_floor: u64,
    pub next_segment_id: u64,
    pub stats: StoreStats,
}

/// Takes the lock of `dir`, reconciles the catalog and replays the WAL.
pub(super) fn recover(
    dir: &Path,
    cfg: &StoreConfig,
    progress: &ReplayProgress,
) -> Result<Recovered> {
    fs::create_dir_all(dir).at(dir)?;
    let lock = lock_dir(dir)?;
    let (catalog, rebuilt) = Catalog::open(&dir.join("catalog"))?;
    if rebuilt {
        warn!("catalog rebuilt from segment files");
    }
    let stats = StoreStats::default();
    let segments = reconcile(dir, &catalog, &stats)?;

    // Highest LSN already in a segment, per tenant and head partition. A block
    // (wider than a head partition) covers every partition in it: compaction forms
    // one only when none of them held unflushed data, so each record of theirs
    // at or below its max_lsn is in a segment.
    let mut flushed: HashMap<(TenantId, i64), u64> = HashMap::new();
    let mut max_seg_lsn = 0;
    let mut max_id = 0;
    for h in segments.values() {
        let m = &h.meta;
        let mut p = cfg.partition_of(m.partition_start_ms);
        // At least the first partition; at most a few years of them, whatever a
        // footer claims.
        for _ in 0..MAX_PARTITIONS_PER_SEGMENT {
            let e = flushed.entry((m.tenant.clone(), p)).or_insert(0);
            *e = (*e).max(m.max_lsn);
            p = p.saturating_add(cfg.partition_ms);
            if p >= m.partition_end_ms() {
                break;
            }
        }
        max_seg_lsn = max_seg_lsn.max(m.max_lsn);
        // Bases take their ids from the same sequence.
        max_id = max_id.max(m.id).max(m.base.map_or(0, |b| b.id));
    }

    // Records at or below the floor are in segments stored elsewhere (a bucket).
    let replay_floor = super::external::read_replay_floor(dir)?;
    let state = RwLock::new(State {
        segments,
        ..Default::default()
    });
    let mut replay_err = 0u64;
    // Reads every record, even those already in segments: a later record of the
    // same file may use their definitions.
    let mut resolver = Resolver::default();
    let (wal, report) = Wal::open(
        &dir.join("wal"),
        cfg.wal_rotate_bytes(),
        progress,
        |lsn, payload, first_in_file| {
            let batch = resolver
                .decode(payload, first_in_file)
                .and_then(|(b, ids)| {
                    b.validate()
                        .map(|()| (b, ids))
                        .map_err(RecordError::Invalid)
                });
            match batch {
                Ok(_) if lsn <= replay_floor => {}
                Ok((batch, ids)) => {
                    apply_batch(&state, cfg, lsn, &batch, ids.as_ref(), Some(&flushed));
                }
                Err(e) => {
                    replay_err += 1;
                    error!(lsn, error = %e, "undecodable WAL record skipped");
                }
            }
        },
    )?;
    inc(&stats.wal_replayed_records, report.records);
    inc(&stats.wal_truncated_bytes, report.truncated_bytes);
    let state = state.into_inner();
    info!(
        dir = %dir.display(),
        segments = state.segments.len(),
        replayed_records = report.records,
        skipped_records = replay_err,
        "store open"
    );
    Ok(Recovered {
        lock,
        catalog,
        state,
        wal,
        next_lsn: report.last_lsn.max(max_seg_lsn).max(replay_floor) + 1,
        replay_floor,
        next_segment_id: (max_id + 1).max(super::external::read_next_segment_id(dir)?),
        stats,
    })
}

/// One process per data directory: the lock is held as long as the file is open.
fn lock_dir(dir: &Path) -> Result<File> {
    let lock_path = dir.join("LOCK");
    let lock = OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&lock_path)
        .at(&lock_path)?;
    match lock.try_lock() {
        Ok(()) => Ok(lock),
        Err(std::fs::TryLockError::WouldBlock) => Err(StorageError::Locked(dir.to_path_buf())),
        Err(std::fs::TryLockError::Error(e)) => Err(StorageError::io(lock_path, e)),
    }
}

/// Moves a damaged segment file into `quarantine/` for inspection.
pub(super) fn move_to_quarantine(dir: &Path, file: &Path) -> Result<()> {
    let qdir = dir.join("quarantine");
    fs::create_dir_all(&qdir).at(&qdir)?;
    let name = file
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "segment".into());
    let dest = qdir.join(format!("{}.{name}", now_ms()));
    fs::rename(file, &dest).at(&dest)?;
    Ok(())
}

/// Makes the catalog and the segment files agree, trusting the files.
fn reconcile(
    dir: &Path,
    catalog: &Catalog,
    stats: &StoreStats,
) -> Result<BTreeMap<u64, Arc<SegmentHandle>>> {
    let root = dir.join("segments");
    fs::create_dir_all(&root).at(&root)?;
    let mut on_disk: HashMap<u64, PathBuf> = HashMap::new();
    for tdir in fs::read_dir(&root).at(&root)? {
        let tdir = tdir.at(&root)?.path();
        if !tdir.is_dir() {
            continue;
        }
        for f in fs::read_dir(&tdir).at(&tdir)? {
            let path = f.at(&tdir)?.path();
            let name = path
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default();
            if name == segment::BASES_DIR {
                // Symbol bases: collected once the store is open.
                continue;
            }
            if name.ends_with(".tmp") {
                info!(file = %path.display(), "removing unfinished segment file");
                fs::remove_file(&path).at(&path)?;
            } else if let Some(id) = segment::id_from_file_name(&name) {
                on_disk.insert(id, path);
            } else {
                warn!(file = %path.display(), "ignoring unknown file in the segments directory");
            }
        }
    }

    let relative = |p: &Path| {
        p.strip_prefix(dir)
            .unwrap_or(p)
            .to_string_lossy()
            .into_owned()
    };
    let mut handles: BTreeMap<u64, Arc<SegmentHandle>> = BTreeMap::new();
    let mut open_file = |id: u64, path: &Path, known: Option<&SegmentMeta>| {
        match SegmentFile::open(path) {
            Ok(file) if file.meta.id == id => {
                let mut meta = file.meta.clone();
                meta.file = relative(path);
                if known != Some(&meta) {
                    if known.is_none() {
                        inc(&stats.segments_adopted, 1);
                        warn!(segment = id, file = %path.display(), "segment file had no catalog entry; adopted");
                    }
                    catalog.insert(&meta)?;
                }
                handles.insert(id, Arc::new(SegmentHandle { meta, file }));
            }
            // A downgrade: the segments of the newer release stay where they are,
            // and the store does not open until it runs again.
            Err(e @ StorageError::UnsupportedVersion { .. }) => return Err(e),
            Ok(_) | Err(_) => {
                let why = SegmentFile::open(path).err().map_or_else(
                    || "id in footer disagrees with the file name".to_string(),
                    |e| e.to_string(),
                );
                inc(&stats.segments_quarantined, 1);
                error!(segment = id, file = %path.display(), error = %why, "segment fails verification at open; quarantined");
                if known.is_some() {
                    catalog.remove(id)?;
                }
                move_to_quarantine(dir, path)?;
            }
        }
        Ok::<(), StorageError>(())
    };
    for meta in catalog.segments()? {
        match on_disk.remove(&meta.id) {
            Some(path) => open_file(meta.id, &path, Some(&meta))?,
            None => {
                inc(&stats.segments_missing, 1);
                error!(segment = meta.id, file = %meta.file, "segment listed in the catalog is missing on disk; dropping the entry");
                catalog.remove(meta.id)?;
            }
        }
    }
    for (id, path) in on_disk {
        open_file(id, &path, None)?;
    }

    // A compaction that crashed after writing its output but before deleting its
    // inputs leaves both: the output wins.
    let replaced: BTreeSet<u64> = handles
        .values()
        .flat_map(|h| h.meta.sources.iter().copied())
        .collect();
    for id in replaced {
        if let Some(h) = handles.remove(&id) {
            info!(segment = id, "removing segment replaced by a compacted one");
            catalog.remove(id)?;
            fs::remove_file(&h.file.path).at(&h.file.path)?;
        }
    }
    // A segment whose symbol base is gone cannot be decoded: isolated now, not
    // at the first query that reads it.
    let baseless: Vec<u64> = handles
        .values()
        .filter(|h| {
            h.meta
                .base
                .is_some_and(|b| !segment::base_path(&h.file.path, b.id).exists())
        })
        .map(|h| h.meta.id)
        .collect();
    for id in baseless {
        if let Some(h) = handles.remove(&id) {
            inc(&stats.segments_quarantined, 1);
            error!(segment = id, file = %h.file.path.display(), "the symbol base this segment was written on is missing; quarantined");
            catalog.remove(id)?;
            move_to_quarantine(dir, &h.file.path)?;
        }
    }
    catalog.flush()?;
    Ok(handles)
}
