//! The store: the roles that write, flush, keep and scan a tenant's data.
//!
//! Laid out by role, as Prometheus lays out its head (`head.go`, `head_append.go`,
//! `head_read.go`, `head_wal.go`); each role's file says which thread runs it and
//! what it owns:
//!
//! | file          | thread                        | owns                                         |
//! |---------------|-------------------------------|----------------------------------------------|
//! | `recovery.rs` | caller of [`Store::open`]     | directory lock, catalog reconcile, WAL replay |
//! | `writer.rs`   | `profiledb-writer`            | WAL appends and group commit, head apply, sealing |
//! | `flusher.rs`  | `profiledb-flusher`           | segment writes from sealed partitions, WAL truncation |
//! | `segments.rs` | `profiledb-warmup`, queries   | decoded-segment and summary caches, quarantine, deferred deletes |
//! | `lifecycle/`  | `profiledb-compactor`, admin  | compaction plan and merge, downsampling, retention |
//! | `scan.rs`     | query threads                 | snapshots and parallel scans                  |
//! | `external.rs` | cluster uploader and mirror   | replay floor, segments whose home is a bucket |
//!
//! The write path and the read path share only `state.rs`: the head partitions and
//! the live segment set under one lock (plus `segments_version`, bumped whenever
//! that set changes). Queries themselves live in [`crate::Querier`].
//!
//! Crash safety rests on three rules: a segment is renamed into place only after it
//! is fsynced; its catalog entry is written only after that; a WAL file is deleted
//! only when every record in it is below the lowest LSN still held by the head. A
//! segment records the highest LSN it covers for its partition, so replay never
//! applies a sample twice.

mod external;
pub use external::{Fetch, Fetcher};
mod flusher;
mod lifecycle;
mod record;
mod recovery;
mod scan;
mod segments;
pub(crate) mod state;
mod symlog;
mod writer;

use std::collections::BTreeSet;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{SystemTime, UNIX_EPOCH};

use crossbeam::channel::{self, Receiver, Sender, TrySendError};
use parking_lot::{Mutex, RwLock};
use tracing::error;

#[cfg(test)]
pub(crate) use lifecycle::{plan_compaction, CompactionScope};
pub use lifecycle::{
    CompactProgress, CompactReport, CompactedPartition, RetentionReport, SkippedPartition,
};
pub(crate) use scan::{Scope, StoreReader};

use crate::catalog::Catalog;
use crate::config::StoreConfig;
use crate::error::{IoContext, OpenError, Result, StorageError, WriteError};
use crate::exec::frames::Frames;
use crate::intern::StackInterner;
use crate::model::{Batch, InvalidBatch, TenantId};
use crate::segment::SegmentMeta;
use crate::stats::{inc, Gauges, StoreStats};
use crate::wal::{ReplayProgress, Wal};
use segments::{SegmentCache, SummaryCache};
use state::{SegmentHandle, State};
use writer::{PendingWrite, Record, WriterMsg};
pub use writer::{WriteCallback, WriteRemains};

/// Everything the roles share, each field annotated with the role that owns it.
struct Inner {
    dir: PathBuf,
    cfg: StoreConfig,
    /// Shared by every role: the head and the live segment set.
    state: RwLock<State>,
    catalog: Catalog,
    /// Writer: held across commit *and* apply, and by the flusher while it
    /// truncates, so a committed-but-unapplied record can never be truncated away.
    wal: Mutex<Wal>,
    /// Writer: the next WAL sequence number.
    next_lsn: AtomicU64,
    /// Records at or below it are durable elsewhere (see `external.rs`).
    replay_floor: AtomicU64,
    /// Writer and flusher: bytes in the WAL files, kept outside the WAL lock so
    /// gauges and the writer's early-flush check never wait for a commit.
    wal_bytes: AtomicU64,
    /// Writer: capacity of the WAL's group-commit buffer.
    wal_buffer_bytes: AtomicU64,
    /// Writer and flusher: head bytes (open and flushing partitions) as last
    /// measured, for ingest back-pressure without taking the state lock.
    head_bytes: AtomicU64,
    /// Lifecycle: bytes the running compaction holds (the merge so far and the
    /// source being added), bounded by `compaction_max_bytes`.
    compaction_bytes: AtomicU64,
    /// Lifecycle: symbol base files on disk and their bytes, as of the last
    /// collection (`lifecycle/bases.rs`).
    base_files: AtomicU64,
    base_bytes: AtomicU64,
    /// Flusher: estimated bytes of the encode under way (rows copied for sorting
    /// and the column buffers), beside the partition it reads.
    flush_bytes: AtomicU64,
    /// Flusher and lifecycle: ids of new segments.
    next_segment_id: AtomicU64,
    /// Bumped whenever the set of live segments changes (flush, quarantine,
    /// compaction, retention), so result caches know their entries went stale.
    segments_version: AtomicU64,
    /// Queries: the name-level frame tree (see [`crate::exec::frames`]). Kept by the
    /// store because loaded segments memoize their node → frame ids for it.
    frames: Frames,
    /// Writes: store-wide stack ids, given on the writing threads so the writer
    /// maps stacks by id (see [`crate::intern`]).
    interner: StackInterner,
    /// Segments: the decoded-segment cache.
    cache: SegmentCache,
    /// Segments: summaries (labels and totals) of segments not decoded whole.
    summaries: SummaryCache,
    /// Segments: brings back external segment files evicted from disk.
    fetcher: std::sync::OnceLock<external::Fetcher>,
    stats: StoreStats,
    closed: AtomicBool,
    /// Segments: the after-open warm-up of the cache is still decoding.
    warming: AtomicBool,
    /// Segments: the warm-up is past the segments holding the last day (or
    /// there is no warm-up): what a first query over recent data needs is
    /// decoded, resolved and its scratch mapped in.
    recent_warm: AtomicBool,
    /// Queries: scans running now; the warm-up waits while any runs, so a query
    /// right after a restart has the CPUs (and the memory bandwidth) to itself.
    scans: AtomicUsize,
    /// Lifecycle: serializes compaction, downsampling and retention.
    lifecycle: Mutex<()>,
    /// Flusher → lifecycle: a segment landed (at most one pending), so the
    /// compactor looks for open partitions with a tier to merge.
    flushed: (Sender<()>, Receiver<()>),
    /// Segments: handles out of the live set whose files are still read by a query;
    /// deleted as soon as nothing references them (their catalog entries are gone).
    retired: Mutex<Vec<Arc<SegmentHandle>>>,
    _lock: File,
}

/// The storage engine. Cheap to share behind an `Arc`; all methods take `&self`.
pub struct Store {
    inner: Arc<Inner>,
    tx: Sender<WriterMsg>,
    threads: Mutex<Vec<JoinHandle<()>>>,
    /// Dropping it stops the background compactor.
    stop_compactor: Mutex<Option<Sender<()>>>,
}

/// Milliseconds since the Unix epoch.
pub fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

impl Store {
    /// Opens (or creates) the store in `dir`: takes the directory lock, reconciles
    /// the catalog with the segment files, replays the WAL and starts the writer and
    /// flusher threads.
    pub fn open(dir: impl AsRef<Path>, cfg: StoreConfig) -> Result<Store, OpenError> {
        Self::open_with_progress(dir, cfg, &ReplayProgress::default())
    }

    /// Like [`Store::open`], reporting the WAL replay's progress into `progress`
    /// as it goes (a server answers `/ready` from it meanwhile).
    pub fn open_with_progress(
        dir: impl AsRef<Path>,
        cfg: StoreConfig,
        progress: &ReplayProgress,
    ) -> Result<Store, OpenError> {
        cfg.validate()?;
        let dir = dir.as_ref().to_path_buf();
        let r = recovery::recover(&dir, &cfg, progress)?;
        let head_bytes: u64 = r
            .state
            .partitions()
            .map(|p| p.read().approx_bytes() as u64)
            .sum();
        let (cache, summaries) = segments::segment_caches(cfg.segment_cache_bytes);
        let inner = Inner {
            wal_bytes: AtomicU64::new(r.wal.retained_bytes()),
            wal_buffer_bytes: AtomicU64::new(0),
            head_bytes: AtomicU64::new(head_bytes),
            compaction_bytes: AtomicU64::new(0),
            base_files: AtomicU64::new(0),
            base_bytes: AtomicU64::new(0),
            flush_bytes: AtomicU64::new(0),
            dir: dir.clone(),
            state: RwLock::new(r.state),
            catalog: r.catalog,
            wal: Mutex::new(r.wal),
            next_lsn: AtomicU64::new(r.next_lsn),
            replay_floor: AtomicU64::new(r.replay_floor),
            next_segment_id: AtomicU64::new(r.next_segment_id),
            segments_version: AtomicU64::new(1),
            frames: Frames::new(cfg.frame_tree_max_nodes),
            interner: StackInterner::new(cfg.stack_interner_bytes),
            cache,
            summaries,
            fetcher: std::sync::OnceLock::new(),
            stats: r.stats,
            closed: AtomicBool::new(false),
            warming: AtomicBool::new(cfg.warm_segment_cache),
            recent_warm: AtomicBool::new(!cfg.warm_segment_cache),
            scans: AtomicUsize::new(0),
            lifecycle: Mutex::new(()),
            flushed: channel::bounded(1),
            retired: Mutex::new(Vec::new()),
            cfg,
            _lock: r.lock,
        };
        // Bases nothing names (a crash between a base and its segment) go now;
        // those the newest blocks name are read now, not by the first query.
        inner.collect_bases()?;
        inner.preload_bases();
        let inner = Arc::new(inner);
        let (tx, rx) = channel::bounded(inner.cfg.write_queue);
        let (ftx, frx) = channel::unbounded();
        let w = {
            let inner = inner.clone();
            std::thread::Builder::new()
                .name("profiledb-writer".into())
                .spawn(move || inner.writer_loop(rx, ftx))
                .at(&dir)?
        };
        let f = {
            let inner = inner.clone();
            std::thread::Builder::new()
                .name("profiledb-flusher".into())
                .spawn(move || inner.flusher_loop(frx))
                .at(&dir)?
        };
        let mut threads = vec![w, f];
        if inner.cfg.warm_segment_cache {
            // The query pool's threads too, before `/ready`: a first query asked
            // right away would otherwise start them itself.
            crate::exec::pool::start();
            let inner = inner.clone();
            threads.push(
                std::thread::Builder::new()
                    .name("profiledb-warmup".into())
                    .spawn(move || inner.warm_up())
                    .at(&dir)?,
            );
        }
        let mut stop_compactor = None;
        if inner.cfg.background_flush
            && inner.cfg.background_compaction
            && !inner.cfg.compaction_interval.is_zero()
        {
            let (stx, srx) = channel::bounded::<()>(1);
            let inner = inner.clone();
            threads.push(
                std::thread::Builder::new()
                    .name("profiledb-compactor".into())
                    .spawn(move || inner.compactor_loop(srx))
                    .at(&dir)?,
            );
            stop_compactor = Some(stx);
        }
        Ok(Store {
            inner,
            tx,
            threads: Mutex::new(threads),
            stop_compactor: Mutex::new(stop_compactor),
        })
    }

    /// The configuration the store was opened with.
    pub fn config(&self) -> &StoreConfig {
        &self.inner.cfg
    }

    /// The metadata catalog (the server keeps its alert rules and states there).
    pub fn catalog(&self) -> &Catalog {
        &self.inner.catalog
    }

    /// The data directory.
    pub fn dir(&self) -> &Path {
        &self.inner.dir
    }

    /// Checks a batch, gives its stacks their ids and encodes its WAL record: on
    /// the caller's thread, since the writer is one thread. The message answers
    /// through `done`; on `Err` nothing was queued and `done` is handed back.
    fn prepare(
        &self,
        batch: Batch,
        done: WriteCallback,
    ) -> std::result::Result<WriterMsg, (WriteError, WriteCallback)> {
        let checked = if self.inner.closed.load(Ordering::SeqCst) {
            Err(WriteError::Closed)
        } else {
            batch.validate().map_err(WriteError::Invalid)
        };
        if let Err(e) = checked {
            return Err((e, done));
        }
        let interned = self.inner.interner.intern(&batch);
        // By ids when every stack has one; in full otherwise (interning off, or a
        // hash collision).
        let payload = match symlog::encode_body(&batch, &interned) {
            Some(body) => body.map(Record::Ids),
            None => record::encode(&batch).map(Record::Full),
        };
        match payload {
            Err(e) => Err((
                WriteError::Invalid(InvalidBatch(format!("batch cannot be encoded: {e}"))),
                done,
            )),
            Ok(payload) => Ok(WriterMsg::Write(Box::new(PendingWrite {
                interned,
                batch,
                payload,
                done,
            }))),
        }
    }

    /// Writes a batch and returns its WAL sequence number once it is durable (per the
    /// fsync policy) and visible to queries. Blocks while the writer queue is full.
    pub fn write(&self, batch: Batch) -> Result<u64, WriteError> {
        let (reply, rx) = channel::bounded(1);
        self.submit(
            batch,
            Box::new(move |r, _| {
                let _ = reply.send(r);
            }),
        );
        rx.recv().map_err(|_| WriteError::Closed)?
    }

    /// Hands a batch to the writer and returns at once (blocking only while the
    /// writer queue is full). `done` gets what [`Store::write`] would have
    /// returned, from the writer thread once the batch is durable and visible, or
    /// from this thread when the batch is refused before it is queued. A caller
    /// that answers many uploads can then decode the next one while the writer
    /// commits this one, instead of waiting for every fsync.
    pub fn submit(&self, batch: Batch, done: WriteCallback) {
        match self.prepare(batch, done) {
            Ok(msg) => {
                if let Err(channel::SendError(WriterMsg::Write(w))) = self.tx.send(msg) {
                    (w.done)(Err(WriteError::Closed), WriteRemains::default());
                }
            }
            Err((e, done)) => done(Err(e), WriteRemains::default()),
        }
    }

    /// Like [`Store::write`] but fails with [`WriteError::Busy`] instead of waiting
    /// when the writer queue is full, so a server can answer 429.
    pub fn try_write(&self, batch: Batch) -> Result<u64, WriteError> {
        let (reply, rx) = channel::bounded(1);
        let done: WriteCallback = Box::new(move |r, _| {
            let _ = reply.send(r);
        });
        let msg = self.prepare(batch, done).map_err(|(e, _)| e)?;
        match self.tx.try_send(msg) {
            Ok(()) => {}
            Err(TrySendError::Full(_)) => {
                inc(&self.inner.stats.writes_rejected_busy, 1);
                return Err(WriteError::Busy);
            }
            Err(TrySendError::Disconnected(_)) => return Err(WriteError::Closed),
        }
        rx.recv().map_err(|_| WriteError::Closed)?
    }

    /// Flushes every head partition into segments and truncates the WAL.
    pub fn flush(&self) -> Result<()> {
        let (reply, rx) = channel::bounded(1);
        self.tx
            .send(WriterMsg::Flush(reply))
            .map_err(|_| StorageError::Closed)?;
        rx.recv().map_err(|_| StorageError::Closed)?
    }

    /// Flushes the head and stops the background threads. Writes after this fail
    /// with [`StorageError::Closed`]. Called by `Drop` too.
    pub fn shutdown(&self) -> Result<()> {
        let threads: Vec<_> = std::mem::take(&mut *self.threads.lock());
        if threads.is_empty() {
            return Ok(());
        }
        drop(self.stop_compactor.lock().take());
        let flushed = self.flush();
        self.inner.closed.store(true, Ordering::SeqCst);
        let _ = self.tx.send(WriterMsg::Shutdown);
        for t in threads {
            let _ = t.join();
        }
        self.inner.catalog.flush()?;
        flushed
    }

    /// Stops the background threads **without** flushing the head, as a crash would:
    /// everything acknowledged stays in the WAL and is replayed at the next open.
    /// Used by restart tests and for a fast exit.
    pub fn close_without_flush(self) {
        let threads: Vec<_> = std::mem::take(&mut *self.threads.lock());
        drop(self.stop_compactor.lock().take());
        self.inner.closed.store(true, Ordering::SeqCst);
        let _ = self.tx.send(WriterMsg::Abort);
        for t in threads {
            let _ = t.join();
        }
    }

    /// Counters for `/metrics`.
    pub fn stats(&self) -> &StoreStats {
        &self.inner.stats
    }

    /// Whether the warm-up after open is past the segments holding the last day
    /// of data (always, without a warm-up): a first query over recent data
    /// then finds its segments decoded and resolved. A server's `/ready` waits
    /// for it, as a load balancer should before sending queries.
    pub fn recent_data_warm(&self) -> bool {
        self.inner.recent_warm.load(Ordering::Acquire)
    }

    /// Current sizes of the head, the segments and the segment cache.
    pub fn gauges(&self) -> Gauges {
        let st = self.inner.state.read();
        let mut g = Gauges {
            segments: st.segments.len() as u64,
            segment_bytes: st.segments.values().map(|h| h.meta.size_bytes).sum(),
            segment_cache_bytes: self.inner.cache.weight(),
            summary_cache_bytes: self.inner.summaries.weight(),
            segment_cache_warming: u64::from(self.inner.warming.load(Ordering::Relaxed)),
            segment_cache_recent_warm: u64::from(self.recent_data_warm()),
            wal_bytes: self.inner.wal_bytes.load(Ordering::Relaxed),
            wal_buffer_bytes: self.inner.wal_buffer_bytes.load(Ordering::Relaxed),
            frame_tree_bytes: self.inner.frames.approx_bytes() as u64,
            query_scratch_bytes: crate::exec::scratch::Scratch::pooled_bytes(),
            stack_interner_bytes: self.inner.interner.approx_bytes(),
            stack_interner_stacks: self.inner.interner.stack_count(),
            stack_interner_resets: self.inner.interner.resets(),
            compaction_bytes: self.inner.compaction_bytes.load(Ordering::Relaxed),
            flush_bytes: self.inner.flush_bytes.load(Ordering::Relaxed),
            symbol_bases: self.inner.base_files.load(Ordering::Relaxed),
            symbol_base_bytes: self.inner.base_bytes.load(Ordering::Relaxed),
            symbol_base_cache_bytes: crate::segment::loaded_base_bytes(),
            ..Default::default()
        };
        for p in st.partitions() {
            let p = p.read();
            g.head_partitions += 1;
            g.head_bytes += p.approx_bytes() as u64;
            g.head_rows += p.rows() as u64;
            let (series, nodes, index, dict) = p.footprint();
            g.head_series += series as u64;
            g.head_stack_nodes += nodes as u64;
            g.head_index_bytes += index as u64;
            g.head_dictionary_bytes += dict as u64;
        }
        g
    }

    /// Head bytes (open and flushing partitions) as the writer last measured them;
    /// cheap enough to check on every upload.
    pub fn head_bytes(&self) -> u64 {
        self.inner.head_bytes.load(Ordering::Relaxed)
    }

    /// Metadata of every live segment, ordered by id.
    pub fn segments(&self) -> Vec<SegmentMeta> {
        self.inner
            .state
            .read()
            .segments
            .values()
            .map(|h| h.meta.clone())
            .collect()
    }

    /// A read-only handle for the querier.
    pub(crate) fn reader(&self) -> StoreReader {
        StoreReader(self.inner.clone())
    }

    /// Tenants with any data.
    pub fn tenants(&self) -> Vec<TenantId> {
        let st = self.inner.state.read();
        let mut set: BTreeSet<TenantId> = st.head.keys().map(|(t, _)| t.clone()).collect();
        set.extend(st.flushing.iter().map(|p| p.read().tenant.clone()));
        set.extend(st.segments.values().map(|h| h.meta.tenant.clone()));
        set.into_iter().collect()
    }
}

impl Drop for Store {
    fn drop(&mut self) {
        if let Err(e) = self.shutdown() {
            error!(error = %e, "store shutdown failed; the WAL keeps unflushed data");
        }
    }
}
