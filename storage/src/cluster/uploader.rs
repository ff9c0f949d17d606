//! The writer's uploader: makes a writer's acknowledged samples durable in the
//! bucket within one interval.
//!
//! Every pass: flush the head into local segments, note the head's floor LSN (every
//! record below it is now in a segment), give each new segment its upload
//! sequence number (durable before the upload: `seqs.rs`), upload every segment
//! not yet uploaded and add it to its tenant's index (one log entry per tenant),
//! then raise the store's replay floor to just below that LSN and drop the local
//! copies wholly under it. A crash anywhere in between repeats work but never
//! loses or doubles it: the WAL still holds what is above the floor, local
//! segments not yet dropped are uploaded again under the same object name and
//! sequence number, and the index refuses a number its writer's mark has passed,
//! even long after the object was merged and deleted.
//!
//! With `ack = bucket` a write is acknowledged once the watermark (the floor
//! published after a complete pass) reaches its LSN: the writer's disk can then be
//! lost without losing it. A waiting write starts a pass at once instead of at the
//! next interval, so the wait is about one pass (flush, PUT, log append). A pass
//! that fails (the store unreachable) answers the writes waiting on it at once:
//! they are in the WAL and upload later, which is what their answer says.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};
use tracing::{info, warn};

use super::entry::{entry_for, object_name};
use super::error::ClusterError;
use super::fault::{reached, Fault, FaultPoint};
use super::health::{Health, Turn};
use super::seqs::UploadSeqs;
use super::Worker;
use crate::bucket::{index_key, segment_key, AppendHint, Bucket, BucketError, SegmentEntry};
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
    /// A fault point armed for tests.
    pub fault: Option<Fault>,
}

/// How a waiting write ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Acked {
    /// Its record is in the bucket.
    Bucket,
    /// It is in the local WAL only: the wait timed out, or an upload pass failed
    /// while it waited (the store unreachable). It uploads later.
    Local,
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

/// The watermark, and how many passes failed: a waiter returns once either
/// moves past what it saw.
#[derive(Default)]
struct Progress {
    watermark: u64,
    failures: u64,
}

struct Shared {
    store: Arc<Store>,
    bucket: Bucket,
    cfg: UploaderConfig,
    /// Local segment ids already in the bucket (this process's run).
    uploaded: Mutex<BTreeSet<u64>>,
    /// Upload sequence numbers, on disk; also the lock of one pass at a time
    /// (the loop, `upload_now`, `stop`).
    seqs: Mutex<UploadSeqs>,
    /// Where this writer appends to each tenant's log.
    hints: Mutex<BTreeMap<String, AppendHint>>,
    progress: Mutex<Progress>,
    advanced: Condvar,
    health: Health,
    stats: UploaderStats,
}

/// The running uploader of one writer.
pub struct Uploader {
    shared: Arc<Shared>,
    worker: Mutex<Option<Worker>>,
}

impl Uploader {
    /// Starts the upload loop over `store` (opened on the writer's data directory).
    pub fn start(
        store: Arc<Store>,
        bucket: Bucket,
        cfg: UploaderConfig,
    ) -> Result<Uploader, ClusterError> {
        let floor = store.replay_floor();
        let seqs = UploadSeqs::open(store.dir())?;
        let shared = Arc::new(Shared {
            store,
            bucket,
            cfg,
            uploaded: Mutex::new(BTreeSet::new()),
            seqs: Mutex::new(seqs),
            hints: Mutex::new(BTreeMap::new()),
            progress: Mutex::new(Progress {
                watermark: floor,
                failures: 0,
            }),
            advanced: Condvar::new(),
            health: Health::default(),
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

    /// Waits until the record `lsn` is durable in the bucket, at most
    /// `timeout`; [`Acked::Local`] when it timed out or a pass failed meanwhile
    /// (it is then durable in the local WAL and will be uploaded).
    pub fn wait_uploaded(&self, lsn: u64, timeout: Duration) -> Acked {
        let deadline = Instant::now() + timeout;
        let failures = {
            let p = self.shared.progress.lock();
            if p.watermark >= lsn {
                return Acked::Bucket;
            }
            p.failures
        };
        // Someone waits: start a pass now rather than at the next interval. Passes
        // run back to back while writes wait, so a pass is the batching window, as
        // a group commit is for the WAL.
        if let Some(w) = self.worker.lock().as_ref() {
            w.kick();
        }
        let mut p = self.shared.progress.lock();
        while p.watermark < lsn {
            if p.failures != failures
                || self
                    .shared
                    .advanced
                    .wait_until(&mut p, deadline)
                    .timed_out()
            {
                break;
            }
        }
        if p.watermark >= lsn {
            Acked::Bucket
        } else {
            Acked::Local
        }
    }

    /// False after a pass failed (the bucket unreachable), until one succeeds.
    pub fn healthy(&self) -> bool {
        self.shared.health.healthy()
    }

    /// Why the last pass failed, if it did.
    pub fn last_error(&self) -> Option<String> {
        self.shared.health.last_error()
    }

    /// The uploader's standing with the bucket.
    pub fn health(&self) -> &Health {
        &self.shared.health
    }

    /// Counters for `/metrics`.
    pub fn stats(&self) -> &UploaderStats {
        &self.shared.stats
    }

    /// Runs one pass now (tests and shutdown).
    pub fn upload_now(&self) -> Result<(), ClusterError> {
        Ok(self.shared.pass()?)
    }

    /// Stops the loop after a last pass, so a clean shutdown leaves nothing behind.
    pub fn stop(&self) -> Result<(), ClusterError> {
        if let Some(mut w) = self.worker.lock().take() {
            w.stop();
            return Ok(self.shared.pass()?);
        }
        Ok(())
    }
}

impl Shared {
    fn pass_logged(&self) {
        let outcome = self.pass();
        self.stats.passes.fetch_add(1, Ordering::Relaxed);
        match (self.health.record(&outcome), &outcome) {
            (Turn::Recovered, _) => {
                info!(bucket = %self.bucket.describe(), "bucket reachable again; uploads resumed");
            }
            (Turn::Failed, Err(e)) => {
                warn!(error = %e, bucket = %self.bucket.describe(), "upload failed; data stays in the local WAL and segments and is retried");
            }
            _ => {}
        }
        if outcome.is_err() {
            self.stats.errors.fetch_add(1, Ordering::Relaxed);
            // Writes waiting on this pass are answered now, not at their
            // timeout: they are in the WAL, and the store may be out long.
            self.progress.lock().failures += 1;
            self.advanced.notify_all();
        }
    }

    fn pass(&self) -> Result<()> {
        let mut seqs = self.seqs.lock();
        let store = &self.store;
        store.flush()?;
        // Read before listing: every record below it is in a segment listed next.
        let floor = store.head_floor_lsn();
        let local = store.segments();
        let uploaded = self.uploaded.lock().clone();
        let pending: Vec<_> = local
            .into_iter()
            .filter(|m| !uploaded.contains(&m.id))
            .collect();
        // Numbered before anything leaves the disk, so a retry after a crash
        // carries the same numbers.
        let ids: Vec<u64> = pending.iter().map(|m| m.id).collect();
        let present: Vec<u64> = store.segments().iter().map(|m| m.id).collect();
        seqs.assign(&ids, &present)?;
        // Fault points are steps of an upload: a pass with nothing to upload
        // does not reach them.
        let step = |point| match pending.is_empty() {
            true => Ok(()),
            false => reached(&self.cfg.fault, point),
        };
        let mut fresh: BTreeMap<String, Vec<SegmentEntry>> = BTreeMap::new();
        for mut meta in pending.iter().cloned() {
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
            let mut entry = entry_for(&key, &meta, &seg, &self.cfg.writer_id);
            entry.seq = seqs.get(meta.id);
            fresh.entry(tenant).or_default().push(entry);
        }
        self.stats
            .pending
            .store(pending.len() as u64, Ordering::Relaxed);
        step(FaultPoint::WriterAfterUpload)?;
        if pending.is_empty() {
            // Nothing to upload still tells whether the bucket answers, so an
            // `--ack bucket` writer refuses writes at once while it does not.
            match self.bucket.head(&index_key(PROBE_TENANT)) {
                Ok(_) | Err(BucketError::NotFound { .. }) => {}
                Err(e) => return Err(e.into()),
            }
        }
        // One log entry per tenant per pass, its uploads in number order.
        for (tenant, mut entries) in fresh {
            entries.sort_by_key(|e| e.seq);
            let mut hints = self.hints.lock();
            let hint = hints.entry(tenant.clone()).or_default();
            self.bucket.add_segments(&tenant, entries, hint)?;
        }
        step(FaultPoint::WriterAfterIndex)?;
        self.stats
            .segments
            .fetch_add(pending.len() as u64, Ordering::Relaxed);
        self.uploaded.lock().extend(ids);
        self.stats.pending.store(0, Ordering::Relaxed);

        let durable = floor.saturating_sub(1);
        store.raise_replay_floor(durable)?;
        {
            let mut p = self.progress.lock();
            if durable > p.watermark {
                p.watermark = durable;
                self.advanced.notify_all();
            }
        }
        self.stats.watermark.store(durable, Ordering::Relaxed);
        step(FaultPoint::WriterAfterAck)?;
        let ids: Vec<u64> = self.uploaded.lock().iter().copied().collect();
        let dropped = store.forget_segments(&ids)?;
        let mut uploaded = self.uploaded.lock();
        for id in dropped {
            uploaded.remove(&id);
        }
        drop(uploaded);
        step(FaultPoint::WriterAfterForget)?;
        Ok(())
    }
}
