//! The writer role: one thread that owns the WAL's append side and the head.
//!
//! Callers check and encode their batch, give its stacks their store-wide ids
//! (`crate::intern`), and hand it over a bounded channel with a callback. The writer
//! puts before each record the symbol definitions its WAL file lacks (`symlog.rs`:
//! only the writer knows the order records reach the file), group-commits the
//! queued batches to the WAL (one write, one fsync), applies them to the head and
//! only then acknowledges. Between groups it seals head partitions
//! that are due and passes them to the flusher.
//!
//! The WAL lock is held across commit *and* apply (the flusher takes it to
//! truncate), so a committed-but-unapplied record can never be truncated away.

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crossbeam::channel::{Receiver, RecvTimeoutError, Sender};
use parking_lot::RwLock;
use tracing::error;

use super::flusher::FlushMsg;
use super::record;
use super::state::{PartitionRef, State};
use super::symlog::Defined;
use super::{now_ms, Inner};
use crate::config::{FsyncPolicy, StoreConfig};
use crate::error::{Result, StorageError, WriteError};
use crate::head::HeadPartition;
use crate::intern::Interned;
use crate::model::{Batch, InvalidBatch, TenantId};
use crate::stats::inc;
use crate::wal::{Wal, RECORD_HEADER_BYTES};

/// Called by the writer with a write's outcome (its WAL sequence number once the
/// batch is durable and applied, or why it was not stored) and what the write no
/// longer needs.
pub type WriteCallback = Box<dyn FnOnce(Result<u64, WriteError>, WriteRemains) + Send>;

/// A write's batch, stack ids and WAL record, handed back once it is answered.
/// Dropping it frees them. A caller that built the batch on another thread than
/// the writer's can drop it there: mimalloc frees a block on the thread that
/// allocated it with no atomic operation, while a free from another thread goes
/// through the block's page and the owner collects it later. Freeing a push's
/// thousands of strings on the writer thread cost the writer, which every write
/// waits on, and the decoders their collection
/// (docs/perf-log/2026-11-27-round-20-empty-memcmp-batches-freed.md).
#[derive(Default)]
pub struct WriteRemains {
    _batch: Option<Batch>,
    _interned: Interned,
    _payload: Option<Record>,
}

/// A batch's WAL record, encoded on the caller's thread.
pub(super) enum Record {
    /// The whole batch (`record.rs`).
    Full(Vec<u8>),
    /// The body of an id record; the writer puts the definitions it needs before
    /// it (`symlog.rs`).
    Ids(Vec<u8>),
}

/// A batch on its way to the WAL and the head.
pub(super) struct PendingWrite {
    pub batch: Batch,
    /// The batch's stack ids, given on the caller's thread.
    pub interned: Interned,
    /// The WAL record.
    pub payload: Record,
    pub done: WriteCallback,
}

impl Record {
    fn len(&self) -> usize {
        match self {
            Record::Full(b) | Record::Ids(b) => b.len(),
        }
    }
}

/// Queues `w`'s record at `lsn` in WAL file `file`, with the definitions its ids
/// need there; returns the bytes queued, or `None` when nothing could be queued
/// (the write must then be refused, not acknowledged).
fn append(
    wal: &mut Wal,
    defined: &mut Defined,
    file: u64,
    lsn: u64,
    w: &PendingWrite,
) -> Option<u64> {
    let parts = match &w.payload {
        Record::Full(full) => {
            wal.append(lsn, full);
            full.len()
        }
        Record::Ids(body) => match defined.prefix(file, &w.batch, &w.interned) {
            Some(prefix) => {
                wal.append_parts(lsn, &[&prefix, body]);
                prefix.len() + body.len()
            }
            // Not reached while the interner gives complete ids, which the body
            // was only encoded for; the full record is always right.
            None => {
                let full = record::encode(&w.batch)
                    .inspect_err(|e| error!(error = %e, "WAL record cannot be encoded"))
                    .ok()?;
                wal.append(lsn, &full);
                full.len()
            }
        },
    };
    Some(parts as u64 + RECORD_HEADER_BYTES)
}

/// What the writer thread is asked to do.
pub(super) enum WriterMsg {
    Write(Box<PendingWrite>),
    Flush(Sender<Result<()>>),
    Shutdown,
    /// Stop without sealing anything: the head is left to WAL replay.
    Abort,
}

impl Inner {
    fn apply(&self, lsn: u64, batch: &Batch, interned: &Interned) -> u64 {
        apply_batch(&self.state, &self.cfg, lsn, batch, Some(interned), None)
    }

    fn head_bytes(&self) -> (usize, usize) {
        let st = self.state.read();
        let head = st.head.values().map(|p| p.read().approx_bytes()).sum();
        let flushing = st.flushing.iter().map(|p| p.read().approx_bytes()).sum();
        (head, flushing)
    }

    /// Moves due partitions from the head to the flushing list and returns them.
    fn seal(&self, all: bool) -> Vec<PartitionRef> {
        let now = now_ms();
        let grace = self.cfg.flush_grace;
        let grace_ms = grace.as_millis() as i64;
        let mut st = self.state.write();
        let mut due: Vec<(TenantId, i64)> = st
            .head
            .iter()
            .filter(|(_, p)| {
                let p = p.read();
                all || (self.cfg.background_flush
                    && now >= p.end_ms().saturating_add(grace_ms)
                    && p.last_write.elapsed() >= grace)
            })
            .map(|(k, _)| k.clone())
            .collect();
        let mut sizes: Vec<((TenantId, i64), usize)> = st
            .head
            .iter()
            .filter(|(k, _)| !due.contains(k))
            .map(|(k, p)| (k.clone(), p.read().approx_bytes()))
            .collect();
        let mut total: usize = sizes.iter().map(|s| s.1).sum();
        let seal = self.cfg.head_seal_bytes();
        if total > seal {
            // Past the open share: flush the largest partitions until back under
            // 3/4 of it.
            sizes.sort_by_key(|s| std::cmp::Reverse(s.1));
            for (k, sz) in sizes {
                if total <= seal / 4 * 3 {
                    break;
                }
                total -= sz;
                due.push(k);
                inc(&self.stats.early_flushes_head, 1);
            }
        }
        if due.is_empty() && st.flushing.is_empty() {
            if let Some(k) = self.pinning_wal(&st) {
                due.push(k);
                inc(&self.stats.early_flushes_wal, 1);
            }
        }
        let mut out = Vec::with_capacity(due.len());
        for k in due {
            if let Some(p) = st.head.remove(&k) {
                st.flushing.push(p.clone());
                out.push(p);
            }
        }
        out
    }

    /// The open partition holding the oldest WAL record, when the WAL files have
    /// outgrown the head budget. A batch in the WAL can weigh more than in the
    /// head (a full record repeats its symbols, an id record its labels), so
    /// without this an hour's partition that never reaches the head budget would
    /// keep every WAL file of the hour, and a replay after a crash would read all
    /// of them. Flushing it lets the flusher delete
    /// the files before the next-oldest record. Not while a flush is running: that
    /// one may already be the partition pinning the WAL.
    fn pinning_wal(&self, st: &State) -> Option<(TenantId, i64)> {
        if self.wal_bytes.load(Ordering::Relaxed) <= self.cfg.head_max_bytes as u64 {
            return None;
        }
        st.head
            .iter()
            .map(|(k, p)| (p.read().min_lsn, k))
            .filter(|(lsn, _)| *lsn > 0)
            .min_by_key(|(lsn, _)| *lsn)
            .map(|(_, k)| k.clone())
    }

    pub(super) fn writer_loop(self: Arc<Self>, rx: Receiver<WriterMsg>, ftx: Sender<FlushMsg>) {
        let tick = Duration::from_millis(500);
        let mut defined = Defined::default();
        let mut last_sync = Instant::now();
        let mut unsynced = false;
        loop {
            let first = match rx.recv_timeout(tick) {
                Ok(m) => m,
                Err(RecvTimeoutError::Timeout) => {
                    if unsynced {
                        if let Err(e) = self.wal.lock().sync() {
                            error!(error = %e, "WAL fsync failed");
                        }
                        unsynced = false;
                    }
                    for p in self.seal(false) {
                        let _ = ftx.send(FlushMsg::Job(p));
                    }
                    continue;
                }
                Err(RecvTimeoutError::Disconnected) => break,
            };
            // Back-pressure: while the head and the partitions being flushed exceed
            // the budget, wait for the flusher instead of taking more input.
            loop {
                let (h, f) = self.head_bytes();
                self.head_bytes.store((h + f) as u64, Ordering::Relaxed);
                if h + f <= self.cfg.head_max_bytes || f == 0 {
                    break;
                }
                std::thread::sleep(Duration::from_millis(5));
            }

            let mut group = vec![first];
            let mut bytes = 0usize;
            while group.len() < 512 && bytes < self.cfg.wal_buffer_bytes {
                match rx.try_recv() {
                    Ok(m) => {
                        if let WriterMsg::Write(w) = &m {
                            bytes += w.payload.len();
                        }
                        group.push(m);
                    }
                    Err(_) => break,
                }
            }

            let mut writes = Vec::new();
            let mut flushes = Vec::new();
            let mut shutdown = false;
            let mut abort = false;
            for m in group {
                match m {
                    WriterMsg::Write(w) => writes.push(*w),
                    WriterMsg::Flush(r) => flushes.push(r),
                    WriterMsg::Shutdown => shutdown = true,
                    WriterMsg::Abort => abort = true,
                }
            }
            if !writes.is_empty() {
                let sync = match self.cfg.fsync {
                    FsyncPolicy::Always => true,
                    FsyncPolicy::Interval { ms } => {
                        last_sync.elapsed() >= Duration::from_millis(ms)
                    }
                    FsyncPolicy::Never => false,
                };
                let mut wal = self.wal.lock();
                let first_lsn = self.next_lsn.load(Ordering::SeqCst);
                let mut lsn = first_lsn;
                let mut wal_bytes = 0;
                let file = wal.next_commit_file();
                // Writes whose record could not be encoded: their LSN stays unused.
                let mut unwritten = Vec::new();
                for (i, w) in writes.iter().enumerate() {
                    match append(&mut wal, &mut defined, file, lsn, w) {
                        Some(n) => wal_bytes += n,
                        None => unwritten.push(i),
                    }
                    lsn += 1;
                }
                let committed = wal.commit(first_lsn, sync);
                self.wal_bytes
                    .store(wal.retained_bytes(), Ordering::Relaxed);
                self.wal_buffer_bytes
                    .store(wal.buffer_capacity() as u64, Ordering::Relaxed);
                match committed {
                    Ok(()) => {
                        self.next_lsn.store(lsn, Ordering::SeqCst);
                        inc(&self.stats.wal_bytes_written, wal_bytes);
                        if sync {
                            inc(&self.stats.wal_syncs, 1);
                            last_sync = Instant::now();
                        } else {
                            unsynced = self.cfg.fsync != FsyncPolicy::Never;
                        }
                        for (i, w) in writes.iter().enumerate() {
                            if !unwritten.contains(&i) {
                                self.apply(first_lsn + i as u64, &w.batch, &w.interned);
                            }
                        }
                        drop(wal);
                        for (i, w) in writes.into_iter().enumerate() {
                            if unwritten.contains(&i) {
                                let e = WriteError::Invalid(InvalidBatch(
                                    "batch cannot be encoded".into(),
                                ));
                                (w.done)(Err(e), WriteRemains::default());
                                continue;
                            }
                            inc(&self.stats.samples_written, w.batch.sample_count() as u64);
                            inc(&self.stats.batches_written, 1);
                            let PendingWrite {
                                batch,
                                interned,
                                payload,
                                done,
                            } = w;
                            let spent = WriteRemains {
                                _batch: Some(batch),
                                _interned: interned,
                                _payload: Some(payload),
                            };
                            done(Ok(first_lsn + i as u64), spent);
                        }
                    }
                    Err(e) => {
                        // The LSNs were not consumed; a later commit reuses them. The
                        // file may hold a partial write, which replay drops as a torn
                        // tail — but a later record could follow it, so rotate.
                        error!(error = %e, "WAL commit failed; rejecting the group");
                        drop(wal);
                        // Its definitions may not be in the file.
                        defined.reset();
                        let msg = e.to_string();
                        for w in writes {
                            (w.done)(
                                Err(WriteError::Storage(StorageError::io(
                                    self.dir.join("wal"),
                                    std::io::Error::other(msg.clone()),
                                ))),
                                WriteRemains::default(),
                            );
                        }
                    }
                }
            }
            if abort {
                return;
            }
            let sealed = self.seal(!flushes.is_empty() || shutdown);
            for p in sealed {
                let _ = ftx.send(FlushMsg::Job(p));
            }
            for r in flushes {
                let _ = ftx.send(FlushMsg::Barrier(r));
            }
            if shutdown {
                break;
            }
        }
        // Dropping `ftx` lets the flusher finish its queue and exit.
    }
}

/// Applies `batch` to the head, with its stacks' interned ids when it has them.
/// With `skip`, samples of partitions whose segments already cover `lsn` are left
/// out (replay).
pub(super) fn apply_batch(
    state: &RwLock<State>,
    cfg: &StoreConfig,
    lsn: u64,
    batch: &Batch,
    interned: Option<&Interned>,
    skip: Option<&HashMap<(TenantId, i64), u64>>,
) -> u64 {
    let mut parts: Vec<i64> = Vec::new();
    let mut last = None;
    for s in &batch.series {
        for x in &s.samples {
            if x.value == 0 {
                continue;
            }
            let p = cfg.partition_of(x.timestamp_ms);
            if last != Some(p) && !parts.contains(&p) {
                parts.push(p);
            }
            last = Some(p);
        }
    }
    let mut applied = 0;
    for p in parts {
        let key = (batch.tenant.clone(), p);
        if skip.and_then(|m| m.get(&key)).is_some_and(|&f| f >= lsn) {
            continue;
        }
        let part = {
            let found = state.read().head.get(&key).cloned();
            match found {
                Some(x) => x,
                None => state
                    .write()
                    .head
                    .entry(key)
                    .or_insert_with(|| {
                        Arc::new(RwLock::new(HeadPartition::new(
                            batch.tenant.clone(),
                            p,
                            cfg.partition_ms,
                            cfg.step_ms,
                        )))
                    })
                    .clone(),
            }
        };
        applied += part.write().apply(lsn, batch, interned);
    }
    applied
}
