//! The flusher role: one thread that turns sealed head partitions into segments.
//!
//! For each partition: encode, write durably (tmp, fsync, rename, fsync of the
//! directory), insert into the catalog, swap into the live set in place of the
//! partition (one state change, so queries see it exactly once), then truncate the
//! WAL below the lowest LSN the head still holds.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use crossbeam::channel::{Receiver, Sender};
use tracing::{error, warn};

use super::state::{PartitionRef, SegmentHandle};
use super::{now_ms, Inner};
use crate::error::{Result, StorageError};
use crate::segment::{self, SegmentFile};
use crate::stats::inc;

/// What the flusher thread is handed by the writer.
pub(super) enum FlushMsg {
    /// A sealed partition to write.
    Job(PartitionRef),
    /// Answered once every job queued before it is done.
    Barrier(Sender<Result<()>>),
}

/// What encoding a partition holds beside it, per aggregated row: the 16-byte row
/// copied for sorting and about 8 bytes of column buffers (times, stack ids,
/// values) before compression.
const ENCODE_BYTES_PER_ROW: usize = 24;

impl Inner {
    pub(super) fn flusher_loop(self: Arc<Self>, rx: Receiver<FlushMsg>) {
        let mut failed: Option<String> = None;
        for msg in rx.iter() {
            match msg {
                FlushMsg::Barrier(reply) => {
                    // Records that carried no samples (all zero values) create no
                    // partition, so no flush would ever truncate them away.
                    if failed.is_none() {
                        if let Err(e) = self.truncate_wal() {
                            failed = Some(e.to_string());
                        }
                    }
                    let _ = reply.send(match failed.take() {
                        None => Ok(()),
                        Some(e) => Err(StorageError::Io {
                            path: self.dir.clone(),
                            source: std::io::Error::other(format!("flush failed: {e}")),
                        }),
                    });
                }
                FlushMsg::Job(part) => {
                    let mut attempt = 0;
                    let mut flushed = None;
                    loop {
                        match self.flush_partition(&part) {
                            Ok(h) => {
                                flushed = h;
                                break;
                            }
                            Err(e) => {
                                attempt += 1;
                                inc(&self.stats.flush_errors, 1);
                                error!(error = %e, attempt, "segment flush failed; data stays in the WAL");
                                if attempt >= 3 || self.closed.load(Ordering::SeqCst) {
                                    failed = Some(e.to_string());
                                    break;
                                }
                                std::thread::sleep(Duration::from_millis(200 * attempt));
                            }
                        }
                    }
                    // Decoded once the partition is freed (this was its last holder
                    // but for a query still reading it), so a partition and its
                    // decoded segment are not both in memory. The queries that read
                    // it first (it is the newest data) usually find it decoded.
                    drop(part);
                    if let (Some(h), true) = (flushed, self.cfg.warm_segment_cache) {
                        if let Err(e) = self.load(&h) {
                            warn!(segment = h.meta.id, error = %e, "decoding a flushed segment failed");
                        }
                    }
                }
            }
        }
    }

    /// Writes `part` as a segment and makes it live in its place; the new segment,
    /// if it held anything, to warm.
    fn flush_partition(&self, part: &PartitionRef) -> Result<Option<Arc<SegmentHandle>>> {
        // A sealed partition takes no more writes, so holding its read lock while
        // encoding blocks only nothing: queries read it meanwhile, and the encoder
        // borrows its dictionary instead of copying it.
        let written = {
            let p = part.read();
            if p.is_empty() {
                None
            } else {
                let id = self.next_segment_id.fetch_add(1, Ordering::SeqCst);
                self.flush_bytes
                    .store((p.rows() * ENCODE_BYTES_PER_ROW) as u64, Ordering::Relaxed);
                let written = segment::write_segment(
                    &self.dir,
                    p.to_segment_input(id, now_ms()),
                    self.cfg.zstd_level,
                );
                self.flush_bytes.store(0, Ordering::Relaxed);
                Some(written?)
            }
        };
        let handle = match written {
            Some(meta) => {
                let file = SegmentFile::open(&self.dir.join(&meta.file))?;
                self.catalog.insert(&meta)?;
                self.catalog.flush()?;
                inc(&self.stats.segments_flushed, 1);
                Some(Arc::new(SegmentHandle { meta, file }))
            }
            None => None,
        };
        {
            let mut st = self.state.write();
            st.flushing.retain(|p| !Arc::ptr_eq(p, part));
            if let Some(h) = &handle {
                st.segments.insert(h.meta.id, h.clone());
                self.segments_version.fetch_add(1, Ordering::SeqCst);
                if self.cfg.open_merge_segments >= 2 {
                    // Full means a nudge is already pending: one is enough.
                    let _ = self.flushed.0.try_send(());
                }
            }
            let head: usize = st.partitions().map(|p| p.read().approx_bytes()).sum();
            self.head_bytes.store(head as u64, Ordering::Relaxed);
        }
        // The segment is live now: a failed truncation must not make the caller retry
        // the flush (that would store the partition twice). The WAL is truncated again
        // after the next flush, and replay skips what segments already hold.
        if let Err(e) = self.truncate_wal() {
            error!(error = %e, "WAL truncation failed; it is retried after the next flush");
        }
        Ok(handle)
    }

    pub(super) fn truncate_wal(&self) -> Result<()> {
        let mut wal = self.wal.lock();
        let min_needed = {
            let st = self.state.read();
            st.partitions()
                .map(|p| p.read().min_lsn)
                .filter(|&l| l > 0)
                .min()
                .unwrap_or_else(|| self.next_lsn.load(Ordering::SeqCst))
        };
        let removed = wal.truncate_before(min_needed)?;
        self.wal_bytes
            .store(wal.retained_bytes(), Ordering::Relaxed);
        inc(&self.stats.wal_removed_bytes, removed.bytes);
        inc(&self.stats.wal_removed_files, removed.files as u64);
        Ok(())
    }
}
