//! The writer's uploader: makes a writer's acknowledged samples durable in the
//! bucket within one interval.
//!
//! Every pass: flush the head into local segments, note the head's floor LSN (every
//! record below it is now in a segment), upload every segment not yet uploaded and
//! add it to its tenant's index, then raise the store's replay floor to just below
//! that LSN and drop the local copies wholly under it. A crash anywhere in between
//! repeats work but never loses or doubles it: the WAL still holds what is above
//! the floor, local segments not yet dropped are uploaded again under the same
//! object name, and the index ignores an entry it already has.
//!
//! With `ack = bucket` a write is acknowledged once the watermark (the floor
//! published after a complete pass) reaches its LSN: the writer's disk can then be
//! lost without losing it. A waiting write starts a pass at once instead of at the
//! next interval, so the wait is about one pass (flush, PUT, index CAS).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};
use tracing::{info, warn};

use super::entry::{entry_for, object_name};
use super::Worker;
use crate::bucket::{index_key, segment_key, Bucket, BucketError, SegmentEntry};
use crate::error::{IoContext, Result};
use crate::segment::SegmentFile;
use crate::store::Store;

/// A tenant name no tenant can have (ids are alphanumeric with `-_.`), whose
/// index the health probe asks for.
const PROBE_TENANT: &str = "~probe";

/// How a writer uploads.
#[derive(Clone, Debug)]
pub struct UploaderConfig {
    /// The writer's name in object keys and index entries; unique per writer
    /// (kept in its data directory).
    pub writer_id: String,
    /// How often the head is flushed and uploaded (seconds, not an hour: fresh
    /// data is queryable from the bucket after about this long).
    pub interval: Duration,
}

/// Counters of the uploader for `/metrics`.
#[derive(Debug, Default)]
pub struct UploaderStats {
    /// Segments uploaded.
    pub segments: AtomicU64,
    /// Bytes uploaded.
    pub bytes: AtomicU64,
    /// Passes run by the loop, failed or not.
    pub passes: AtomicU64,
    /// Passes that failed (the bucket unreachable, mostly); retried next interval.
    pub errors: AtomicU64,
    /// Local segments waiting for upload at the end of the last pass.
    pub pending: AtomicU64,
    /// The highest LSN known to be durable in the bucket.
    pub watermark: AtomicU64,
}

struct Shared {
    store: Arc<Store>,
    bucket: Bucket,
    cfg: UploaderConfig,
    /// Local segment ids already in the bucket (this process's run).
    uploaded: Mutex<BTreeSet<u64>>,
    /// One pass at a time (the loop, `upload_now`, `stop`).
    passing: Mutex<()>,
    watermark: Mutex<u64>,
    advanced: Condvar,
    healthy: AtomicBool,
    last_error: Mutex<Option<String>>,
    stats: UploaderStats,
}

/// The running uploader of one writer.
pub struct Uploader {
    shared: Arc<Shared>,
    worker: Mutex<Option<Worker>>,
}

impl Uploader {
    /// Starts the upload loop over `store` (opened on the writer's data directory).
    pub fn start(store: Arc<Store>, bucket: Bucket, cfg: UploaderConfig) -> Result<Uploader> {
        let floor = store.replay_floor();
        let shared = Arc::new(Shared {
            store,
            bucket,
            cfg,
            uploaded: Mutex::new(BTreeSet::new()),
            passing: Mutex::new(()),
            watermark: Mutex::new(floor),
            advanced: Condvar::new(),
            healthy: AtomicBool::new(true),
            last_error: Mutex::new(None),
            stats: UploaderStats::default(),
        });
        shared.stats.watermark.store(floor, Ordering::Relaxed);
        let worker = {
            let shared = shared.clone();
            let dir = shared.store.dir().to_path_buf();
            Worker::spawn("profiledb-uploader", shared.cfg.interval, move || {
                shared.pass_logged();
                true
            })
            .at(dir)?
        };
        Ok(Uploader {
            shared,
            worker: Mutex::new(Some(worker)),
        })
    }

    /// Waits until the record `lsn` is durable in the bucket; false on timeout
    /// (it is then durable in the local WAL and will be uploaded).
    pub fn wait_uploaded(&self, lsn: u64, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        if *self.shared.watermark.lock() >= lsn {
            return true;
        }
        // Someone waits: start a pass now rather than at the next interval. Passes
        // run back to back while writes wait, so a pass is the batching window, as
        // a group commit is for the WAL.
        if let Some(w) = self.worker.lock().as_ref() {
            w.kick();
        }
        let mut w = self.shared.watermark.lock();
        while *w < lsn {
            if self
                .shared
                .advanced
                .wait_until(&mut w, deadline)
                .timed_out()
            {
                return *w >= lsn;
            }
        }
        true
    }

    /// False after a pass failed (the bucket unreachable), until one succeeds.
    pub fn healthy(&self) -> bool {
        self.shared.healthy.load(Ordering::Relaxed)
    }

    /// Why the last pass failed, if it did.
    pub fn last_error(&self) -> Option<String> {
        self.shared.last_error.lock().clone()
    }

    /// Counters for `/metrics`.
    pub fn stats(&self) -> &UploaderStats {
        &self.shared.stats
    }

    /// Runs one pass now (tests and shutdown).
    pub fn upload_now(&self) -> Result<()> {
        self.shared.pass()
    }

    /// Stops the loop after a last pass, so a clean shutdown leaves nothing behind.
    pub fn stop(&self) -> Result<()> {
        if let Some(mut w) = self.worker.lock().take() {
            w.stop();
            return self.shared.pass();
        }
        Ok(())
    }
}

impl Shared {
    fn pass_logged(&self) {
        let outcome = self.pass();
        self.stats.passes.fetch_add(1, Ordering::Relaxed);
        match outcome {
            Ok(()) => {
                if !self.healthy.swap(true, Ordering::Relaxed) {
                    info!(bucket = %self.bucket.describe(), "bucket reachable again; uploads resumed");
                }
                *self.last_error.lock() = None;
            }
            Err(e) => {
                self.stats.errors.fetch_add(1, Ordering::Relaxed);
                if self.healthy.swap(false, Ordering::Relaxed) {
                    warn!(error = %e, bucket = %self.bucket.describe(), "upload failed; data stays in the local WAL and segments and is retried");
                }
                *self.last_error.lock() = Some(e.to_string());
            }
        }
    }

    fn pass(&self) -> Result<()> {
        let _one = self.passing.lock();
        let store = &self.store;
        store.flush()?;
        // Read before listing: every record below it is in a segment listed next.
        let floor = store.head_floor_lsn();
        let mut fresh: BTreeMap<String, Vec<SegmentEntry>> = BTreeMap::new();
        let mut fresh_ids = Vec::new();
        {
            let uploaded = self.uploaded.lock().clone();
            for mut meta in store.segments() {
                if uploaded.contains(&meta.id) {
                    continue;
                }
                let path = store.dir().join(&meta.file);
                if let Some(b) = meta.base {
                    // Queriers fetch no bases: a writer's store writes none
                    // (`StoreConfig::symbol_bases` off), and one that did is refused.
                    return Err(crate::StorageError::Invalid(format!(
                        "{} was written on symbol base {}; the bucket takes self-contained segments only (run the writer with symbol bases off)",
                        path.display(),
                        b.id
                    )));
                }
                let bytes = std::fs::read(&path).at(&path)?;
                // Labels are all the entry needs: the summary sections, not the rows.
                let seg = SegmentFile::open(&path)?.load_summary()?;
                let tenant = meta.tenant.as_str().to_string();
                let key = segment_key(&tenant, &object_name(&self.cfg.writer_id, meta.id));
                let len = bytes.len() as u64;
                // The index tells queriers the object's size for their ranged reads.
                meta.size_bytes = len;
                self.bucket.put(&key, bytes.into())?;
                self.stats.bytes.fetch_add(len, Ordering::Relaxed);
                fresh.entry(tenant).or_default().push(entry_for(
                    &key,
                    &meta,
                    &seg,
                    &self.cfg.writer_id,
                ));
                fresh_ids.push(meta.id);
            }
        }
        self.stats
            .pending
            .store(fresh_ids.len() as u64, Ordering::Relaxed);
        if fresh_ids.is_empty() {
            // Nothing to upload still tells whether the bucket answers, so an
            // `--ack bucket` writer refuses writes at once while it does not.
            match self.bucket.head(&index_key(PROBE_TENANT)) {
                Ok(_) | Err(BucketError::NotFound { .. }) => {}
                Err(e) => return Err(e.into()),
            }
        }
        // One compare-and-swap per tenant per pass, not per segment.
        for (tenant, entries) in fresh {
            self.bucket.add_segments(&tenant, entries)?;
        }
        self.stats
            .segments
            .fetch_add(fresh_ids.len() as u64, Ordering::Relaxed);
        self.uploaded.lock().extend(fresh_ids);
        self.stats.pending.store(0, Ordering::Relaxed);

        let durable = floor.saturating_sub(1);
        store.raise_replay_floor(durable)?;
        {
            let mut w = self.watermark.lock();
            if durable > *w {
                *w = durable;
                self.advanced.notify_all();
            }
        }
        self.stats.watermark.store(durable, Ordering::Relaxed);
        let ids: Vec<u64> = self.uploaded.lock().iter().copied().collect();
        let dropped = store.forget_segments(&ids)?;
        let mut uploaded = self.uploaded.lock();
        for id in dropped {
            uploaded.remove(&id);
        }
        Ok(())
    }
}
