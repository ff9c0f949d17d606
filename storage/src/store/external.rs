//! Segments whose durable home is elsewhere (an object store), for the cluster roles.
//!
//! Two hooks, one per side of the bucket:
//! - **Writer side.** Once every segment holding a WAL record is uploaded, the
//!   record no longer needs the WAL or the local segment. The *replay floor* says
//!   so durably: replay skips every record at or below it, and local segments whose
//!   records all sit at or below it may be forgotten (files deleted), so a restart
//!   never re-applies (and re-uploads) samples the bucket already holds.
//! - **Querier side.** Segments downloaded from the bucket are attached to the live
//!   set, and ones the bucket index dropped (compacted, expired, quarantined) are
//!   detached, in one state change so a query sees sources or their merge, never
//!   both and never neither. They are not in the catalog: the bucket index is
//!   their catalog, and the download directory is only a cache.

use std::fs;
use std::path::Path;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use super::state::SegmentHandle;
use super::Store;
use crate::durable::write_file;
use crate::error::{Result, StorageError};
use crate::segment::{SegmentFile, SegmentSummary};

/// The file holding the replay floor (decimal LSN).
const FLOOR_FILE: &str = "REPLAY_FLOOR";
/// The file holding the lowest segment id not yet given out, once segments were
/// forgotten: their ids must never be reused, since their copies elsewhere are
/// named after them.
const NEXT_ID_FILE: &str = "NEXT_SEGMENT_ID";

/// A number kept in a file of `dir`, 0 when the file does not exist.
fn read_number(dir: &Path, name: &str) -> Result<u64> {
    let path = dir.join(name);
    match fs::read_to_string(&path) {
        Ok(s) => s
            .trim()
            .parse()
            .map_err(|_| StorageError::Corrupt(format!("{}: not a number: {s:?}", path.display()))),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(0),
        Err(e) => Err(StorageError::io(path, e)),
    }
}

/// Writes `value` to a file of `dir` durably (written, fsynced, renamed).
fn write_number(dir: &Path, name: &str, value: u64) -> Result<()> {
    write_file(&dir.join(name), value.to_string().as_bytes())
}

/// The replay floor stored in `dir`, 0 when none was ever set.
pub(super) fn read_replay_floor(dir: &Path) -> Result<u64> {
    read_number(dir, FLOOR_FILE)
}

/// The lowest segment id that may be given out in `dir`, 0 when unconstrained.
pub(super) fn read_next_segment_id(dir: &Path) -> Result<u64> {
    read_number(dir, NEXT_ID_FILE)
}

impl Store {
    /// Every WAL record below this LSN is in a segment (none is only in the head).
    /// Read it *before* listing segments to upload: the records below it were
    /// flushed, and a flush makes its segment live before it drops the partition.
    pub fn head_floor_lsn(&self) -> u64 {
        let st = self.inner.state.read();
        st.partitions()
            .map(|p| p.read().min_lsn)
            .filter(|&l| l > 0)
            .min()
            .unwrap_or_else(|| self.inner.next_lsn.load(Ordering::SeqCst))
    }

    /// The replay floor: records at or below it are durable elsewhere.
    pub fn replay_floor(&self) -> u64 {
        self.inner.replay_floor.load(Ordering::SeqCst)
    }

    /// Raises the replay floor to `lsn` durably (written, fsynced, renamed); a lower
    /// value is ignored. The caller promises every record at or below `lsn` is in
    /// segments stored elsewhere.
    pub fn raise_replay_floor(&self, lsn: u64) -> Result<()> {
        if lsn <= self.replay_floor() {
            return Ok(());
        }
        write_number(&self.inner.dir, FLOOR_FILE, lsn)?;
        self.inner.replay_floor.fetch_max(lsn, Ordering::SeqCst);
        Ok(())
    }

    /// Drops the local copies of segments stored elsewhere: out of the live set,
    /// the catalog and the disk. Only segments entirely at or below the replay
    /// floor are dropped (replay would re-create the others' samples); returns the
    /// ids dropped.
    pub fn forget_segments(&self, ids: &[u64]) -> Result<Vec<u64>> {
        let floor = self.replay_floor();
        let removed: Vec<Arc<SegmentHandle>> = {
            let mut st = self.inner.state.write();
            let due: Vec<u64> = ids
                .iter()
                .copied()
                .filter(|id| st.segments.get(id).is_some_and(|h| h.meta.max_lsn <= floor))
                .collect();
            let removed: Vec<_> = due.iter().filter_map(|id| st.segments.remove(id)).collect();
            if !removed.is_empty() {
                self.inner.segments_version.fetch_add(1, Ordering::SeqCst);
            }
            removed
        };
        let dropped = removed.iter().map(|h| h.meta.id).collect();
        if !removed.is_empty() {
            // Before any file goes: a restart must not name a new segment after a
            // forgotten one.
            let next = self.inner.next_segment_id.load(Ordering::SeqCst);
            write_number(&self.inner.dir, NEXT_ID_FILE, next)?;
        }
        self.inner.retire(removed)?;
        Ok(dropped)
    }

    /// Attaches segments stored outside the data directory and detaches the live
    /// segments `remove`, in one change of the live set. `add` are opened (footer
    /// checked) by the caller; their bytes need not be on disk yet: a load that
    /// finds a file missing asks the fetcher ([`Store::set_fetcher`]) for it.
    /// Returns the local ids given to `add`, in order. Detached segments' files are
    /// deleted once no query reads them.
    pub fn swap_external(&self, add: Vec<SegmentFile>, remove: &[u64]) -> Result<Vec<u64>> {
        let handles: Vec<Arc<SegmentHandle>> = add
            .into_iter()
            .map(|mut file| {
                // Ids from other writers collide; caches and memos key on the id,
                // so the file's own metadata (what loading yields) gets the local one.
                file.meta.id = self.inner.next_segment_id.fetch_add(1, Ordering::SeqCst);
                let mut meta = file.meta.clone();
                meta.file = file.path.to_string_lossy().into_owned();
                Arc::new(SegmentHandle { meta, file })
            })
            .collect();
        let ids: Vec<u64> = handles.iter().map(|h| h.meta.id).collect();
        let removed: Vec<Arc<SegmentHandle>> = {
            let mut st = self.inner.state.write();
            let removed: Vec<_> = remove
                .iter()
                .filter_map(|id| st.segments.remove(id))
                .collect();
            for h in handles {
                st.segments.insert(h.meta.id, h);
            }
            self.inner.segments_version.fetch_add(1, Ordering::SeqCst);
            removed
        };
        self.inner.retire(removed)?;
        Ok(ids)
    }

    /// Sets what brings back an external segment's bytes when a load finds its
    /// file missing (evicted from a bounded disk cache, or never downloaded).
    pub fn set_fetcher(&self, fetch: Fetcher) {
        let _ = self.inner.fetcher.set(fetch);
    }
}

/// Reads external segments from where they live (see [`Store::set_fetcher`]).
/// Both reads verify what they return (section checksums) and take a damaged
/// object out of service at its source before failing with a corruption error.
pub trait Fetch: Send + Sync {
    /// The whole file at `path`: the fetcher may keep a copy there.
    fn body(&self, path: &Path) -> Result<Vec<u8>>;
    /// The summary of `file` (whose bytes would be at `file.path`), read with
    /// ranged reads of the sections it needs (see `SegmentFile::summary_reads`).
    fn summary(&self, file: &SegmentFile) -> Result<SegmentSummary>;
}

/// The store's fetcher, shared with its owner.
pub type Fetcher = Arc<dyn Fetch>;
