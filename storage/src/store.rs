//! The store: ties the WAL, head, flusher, segments and catalog together.
//!
//! Threads: callers encode their batch and hand it to the single **writer** thread
//! through a bounded channel. The writer group-commits queued batches to the WAL
//! (one write, one fsync), applies them to the head and only then acknowledges. It
//! also seals head partitions that are due and passes them to the **flusher**
//! thread, which writes segments and truncates the WAL. Queries take a snapshot of
//! the head partitions and segments and scan them on scoped threads.
//!
//! Crash safety rests on three rules: a segment is renamed into place only after it
//! is fsynced; its catalog entry is written only after that; a WAL file is deleted
//! only when every record in it is below the lowest LSN still held by the head. A
//! segment records the highest LSN it covers for its partition, so replay never
//! applies a sample twice.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fs::{self, File, OpenOptions};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use crossbeam::channel::{self, Receiver, RecvTimeoutError, Sender, TrySendError};
use parking_lot::{Mutex, RwLock};
use tracing::{error, info, warn};

use crate::catalog::Catalog;
use crate::compact::{
    self, CompactProgress, CompactReport, CompactedPartition, Merger, RetentionReport,
    SkippedPartition, TenantSettings,
};
use crate::config::{FsyncPolicy, StoreConfig};
use crate::error::{IoContext, Result, StorageError};
use crate::head::HeadPartition;
use crate::model::{Batch, Labels, TenantId, PROFILE_TYPE_LABEL};
use crate::query::{self, CallTree, Source, TimeRange};
use crate::segment::{self, LoadedSegment, SegmentFile, SegmentMeta};
use crate::selector::Selector;
use crate::stats::{inc, Gauges, StoreStats};
use crate::wal::Wal;

type PartitionRef = Arc<RwLock<HeadPartition>>;

/// A segment known to the store.
#[derive(Debug)]
pub struct SegmentHandle {
    pub meta: SegmentMeta,
    file: SegmentFile,
}

#[derive(Default)]
struct State {
    head: BTreeMap<(TenantId, i64), PartitionRef>,
    /// Sealed partitions being written; still visible to queries.
    flushing: Vec<PartitionRef>,
    segments: BTreeMap<u64, Arc<SegmentHandle>>,
}

enum WriterMsg {
    Write {
        batch: Batch,
        payload: Vec<u8>,
        reply: Sender<Result<u64>>,
    },
    Flush(Sender<Result<()>>),
    Shutdown,
    /// Stop without sealing anything: the head is left to WAL replay.
    Abort,
}

enum FlushMsg {
    Job(PartitionRef),
    Barrier(Sender<Result<()>>),
}

#[derive(Clone)]
struct SegmentWeighter;

impl quick_cache::Weighter<u64, Arc<LoadedSegment>> for SegmentWeighter {
    fn weight(&self, _: &u64, v: &Arc<LoadedSegment>) -> u64 {
        v.approx_bytes().max(1) as u64
    }
}

type SegmentCache = quick_cache::sync::Cache<u64, Arc<LoadedSegment>, SegmentWeighter>;

/// The decoded-segment cache: one shard. A decoded segment is tens to hundreds of
/// MB, and a sharded cache gives each shard a fraction of the budget and refuses
/// items larger than a shard's hot area: the biggest (newest, densest) segment was
/// then read from disk on every query while the cache sat half empty. Lookups are
/// one per segment per query, so a single lock costs nothing measurable.
fn segment_cache(bytes: u64) -> SegmentCache {
    crate::query::cache::one_shard_cache(bytes, SegmentWeighter)
}

struct Inner {
    dir: PathBuf,
    cfg: StoreConfig,
    state: RwLock<State>,
    catalog: Catalog,
    /// Held by the writer across commit *and* apply, and by the flusher while it
    /// truncates, so a committed-but-unapplied record can never be truncated away.
    wal: Mutex<Wal>,
    next_lsn: AtomicU64,
    next_segment_id: AtomicU64,
    /// Bumped whenever the set of live segments changes (flush, quarantine, and later
    /// compaction and retention), so result caches know their entries went stale.
    segments_version: AtomicU64,
    /// Name-level frame tree shared by all queries (see [`query::frames`]).
    frames: query::frames::Frames,
    cache: SegmentCache,
    stats: StoreStats,
    closed: AtomicBool,
    /// The after-open warm-up of the segment cache is still decoding.
    warming: AtomicBool,
    /// Serializes compaction, downsampling and retention with each other.
    lifecycle: Mutex<()>,
    /// Segments out of the live set whose files are still read by a query; deleted
    /// as soon as nothing references them (their catalog entries are gone already).
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
    pub fn open(dir: impl AsRef<Path>, cfg: StoreConfig) -> Result<Store> {
        cfg.validate()?;
        let dir = dir.as_ref().to_path_buf();
        fs::create_dir_all(&dir).at(&dir)?;
        let lock_path = dir.join("LOCK");
        let lock = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&lock_path)
            .at(&lock_path)?;
        match lock.try_lock() {
            Ok(()) => {}
            Err(std::fs::TryLockError::WouldBlock) => return Err(StorageError::Locked(dir)),
            Err(std::fs::TryLockError::Error(e)) => return Err(StorageError::io(lock_path, e)),
        }

        let (catalog, rebuilt) = Catalog::open(&dir.join("catalog"))?;
        if rebuilt {
            warn!("catalog rebuilt from segment files");
        }
        let stats = StoreStats::default();
        let segments = reconcile(&dir, &catalog, &stats)?;

        // Highest LSN already in a segment, per tenant and partition.
        let mut flushed: HashMap<(TenantId, i64), u64> = HashMap::new();
        let mut max_seg_lsn = 0;
        let mut max_id = 0;
        for h in segments.values() {
            let e = flushed
                .entry((h.meta.tenant.clone(), h.meta.partition_start_ms))
                .or_insert(0);
            *e = (*e).max(h.meta.max_lsn);
            max_seg_lsn = max_seg_lsn.max(h.meta.max_lsn);
            max_id = max_id.max(h.meta.id);
        }

        let state = RwLock::new(State {
            segments,
            ..Default::default()
        });
        let mut replay_err = 0u64;
        let (wal, report) = Wal::open(&dir.join("wal"), cfg.wal_file_bytes, |lsn, payload| {
            match postcard::from_bytes::<Batch>(payload) {
                Ok(batch) if batch.validate().is_ok() => {
                    apply_batch(&state, &cfg, lsn, &batch, Some(&flushed));
                }
                _ => {
                    replay_err += 1;
                    error!(lsn, "undecodable WAL record skipped");
                }
            }
        })?;
        inc(&stats.wal_replayed_records, report.records);
        inc(&stats.wal_truncated_bytes, report.truncated_bytes);
        let inner = Inner {
            dir: dir.clone(),
            state,
            catalog,
            wal: Mutex::new(wal),
            next_lsn: AtomicU64::new(report.last_lsn.max(max_seg_lsn) + 1),
            next_segment_id: AtomicU64::new(max_id + 1),
            segments_version: AtomicU64::new(1),
            frames: Default::default(),
            cache: segment_cache(cfg.segment_cache_bytes),
            stats,
            closed: AtomicBool::new(false),
            warming: AtomicBool::new(cfg.warm_segment_cache),
            lifecycle: Mutex::new(()),
            retired: Mutex::new(Vec::new()),
            cfg,
            _lock: lock,
        };
        info!(
            dir = %dir.display(),
            segments = inner.state.read().segments.len(),
            replayed_records = report.records,
            skipped_records = replay_err,
            "store open"
        );

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

    pub fn config(&self) -> &StoreConfig {
        &self.inner.cfg
    }

    /// The metadata catalog (the server keeps its alert rules and states there).
    pub fn catalog(&self) -> &Catalog {
        &self.inner.catalog
    }

    pub fn dir(&self) -> &Path {
        &self.inner.dir
    }

    fn prepare(&self, batch: Batch) -> Result<(WriterMsg, Receiver<Result<u64>>)> {
        if self.inner.closed.load(Ordering::SeqCst) {
            return Err(StorageError::Closed);
        }
        batch.validate().map_err(StorageError::Invalid)?;
        let payload = postcard::to_allocvec(&batch)
            .map_err(|e| StorageError::Invalid(format!("batch cannot be encoded: {e}")))?;
        let (reply, rx) = channel::bounded(1);
        Ok((
            WriterMsg::Write {
                batch,
                payload,
                reply,
            },
            rx,
        ))
    }

    /// Writes a batch and returns its WAL sequence number once it is durable (per the
    /// fsync policy) and visible to queries. Blocks while the writer queue is full.
    pub fn write(&self, batch: Batch) -> Result<u64> {
        let (msg, rx) = self.prepare(batch)?;
        self.tx.send(msg).map_err(|_| StorageError::Closed)?;
        rx.recv().map_err(|_| StorageError::Closed)?
    }

    /// Like [`Store::write`] but fails with [`StorageError::Busy`] instead of waiting
    /// when the writer queue is full, so a server can answer 429.
    pub fn try_write(&self, batch: Batch) -> Result<u64> {
        let (msg, rx) = self.prepare(batch)?;
        match self.tx.try_send(msg) {
            Ok(()) => {}
            Err(TrySendError::Full(_)) => {
                inc(&self.inner.stats.writes_rejected_busy, 1);
                return Err(StorageError::Busy);
            }
            Err(TrySendError::Disconnected(_)) => return Err(StorageError::Closed),
        }
        rx.recv().map_err(|_| StorageError::Closed)?
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

    pub fn stats(&self) -> &StoreStats {
        &self.inner.stats
    }

    pub fn gauges(&self) -> Gauges {
        let st = self.inner.state.read();
        let mut g = Gauges {
            segments: st.segments.len() as u64,
            segment_bytes: st.segments.values().map(|h| h.meta.size_bytes).sum(),
            segment_cache_bytes: self.inner.cache.weight(),
            segment_cache_warming: u64::from(self.inner.warming.load(Ordering::Relaxed)),
            ..Default::default()
        };
        for p in st.head.values().chain(st.flushing.iter()) {
            let p = p.read();
            g.head_partitions += 1;
            g.head_bytes += p.approx_bytes() as u64;
            g.head_rows += p.rows() as u64;
        }
        g
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

    // ---- lifecycle: compaction, downsampling, retention ---------------------------

    /// Merges the live segments of each tenant and time partition that has more than
    /// one (or whose data is old enough to be downsampled per the configured rules)
    /// into one segment, partition by partition. `tenant` and `range` restrict which
    /// partitions are considered. `progress` is called after each partition.
    /// Queries and writes continue meanwhile; each partition switches atomically.
    pub fn compact(
        &self,
        tenant: Option<&TenantId>,
        range: Option<TimeRange>,
        progress: &dyn Fn(&CompactProgress),
    ) -> Result<CompactReport> {
        self.inner.compact(tenant, range, false, now_ms(), progress)
    }

    /// Like [`Store::compact`] with an explicit clock for downsampling decisions.
    pub fn compact_at(
        &self,
        tenant: Option<&TenantId>,
        range: Option<TimeRange>,
        now_ms: i64,
        progress: &dyn Fn(&CompactProgress),
    ) -> Result<CompactReport> {
        self.inner.compact(tenant, range, false, now_ms, progress)
    }

    /// Sets (or with `None` clears) the maximum data age of `tenant`. Takes effect
    /// at the next retention run ([`Store::apply_retention`] or the background
    /// compactor).
    pub fn set_retention(
        &self,
        tenant: &TenantId,
        max_age: Option<Duration>,
    ) -> Result<TenantSettings> {
        let mut s = self.inner.catalog.tenant_settings(tenant)?;
        s.max_age_ms = max_age.map(compact::duration_ms);
        if s.max_age_ms.is_some_and(|a| a <= 0) {
            return Err(StorageError::Invalid("max_age must be positive".into()));
        }
        self.inner.catalog.set_tenant_settings(tenant, &s)?;
        Ok(s)
    }

    /// The stored settings of `tenant` (defaults: keep forever).
    pub fn tenant_settings(&self, tenant: &TenantId) -> Result<TenantSettings> {
        self.inner.catalog.tenant_settings(tenant)
    }

    /// Deletes every segment whose newest data is older than its tenant's maximum
    /// age, as whole files, from the catalog and the live set.
    pub fn apply_retention(&self) -> Result<RetentionReport> {
        self.inner.apply_retention(now_ms())
    }

    /// [`Store::apply_retention`] with an explicit clock.
    pub fn apply_retention_at(&self, now_ms: i64) -> Result<RetentionReport> {
        self.inner.apply_retention(now_ms)
    }

    /// Checks every section checksum of every segment; corrupt ones are quarantined.
    /// Returns the ids quarantined.
    pub fn verify_segments(&self) -> Vec<u64> {
        let handles: Vec<_> = self.inner.state.read().segments.values().cloned().collect();
        let mut bad = Vec::new();
        for h in handles {
            if let Err(e) = h.file.verify() {
                self.inner.quarantine(&h, &e);
                bad.push(h.meta.id);
            }
        }
        bad
    }

    // ---- queries ---------------------------------------------------------------

    /// Merges the selected samples of `range` into one call tree.
    pub fn merge(&self, tenant: &TenantId, sel: &Selector, range: TimeRange) -> Result<CallTree> {
        let frames = self.frames().for_query();
        let pairs =
            self.merge_frames_scope(tenant, sel, range, Scope::All, &frames, 0, &|| Ok(()), None)?;
        Ok(query::Merged::new(frames, Arc::new(pairs)).to_tree())
    }

    /// The store's shared frame tree (see [`query::frames`]).
    pub(crate) fn frames(&self) -> &query::frames::Frames {
        &self.inner.frames
    }

    /// Label sets of the selected series with data in `range`.
    pub fn series(
        &self,
        tenant: &TenantId,
        sel: &Selector,
        range: TimeRange,
    ) -> Result<Vec<Labels>> {
        let sets = self.inner.run(tenant, range, BTreeSet::new, |o, src| {
            query::series_into(src, sel, range, o)
        })?;
        Ok(sets
            .into_iter()
            .flatten()
            .collect::<BTreeSet<_>>()
            .into_iter()
            .collect())
    }

    pub fn label_names(
        &self,
        tenant: &TenantId,
        sel: &Selector,
        range: TimeRange,
    ) -> Result<Vec<String>> {
        let sets = self.inner.run(tenant, range, BTreeSet::new, |o, src| {
            query::label_names_into(src, sel, range, o)
        })?;
        Ok(sets
            .into_iter()
            .flatten()
            .collect::<BTreeSet<_>>()
            .into_iter()
            .collect())
    }

    pub fn label_values(
        &self,
        tenant: &TenantId,
        name: &str,
        sel: &Selector,
        range: TimeRange,
    ) -> Result<Vec<String>> {
        let sets = self.inner.run(tenant, range, BTreeSet::new, |o, src| {
            query::label_values_into(src, name, sel, range, o)
        })?;
        Ok(sets
            .into_iter()
            .flatten()
            .collect::<BTreeSet<_>>()
            .into_iter()
            .collect())
    }

    /// Profile type ids with data in `range`.
    pub fn profile_types(&self, tenant: &TenantId, range: TimeRange) -> Result<Vec<String>> {
        self.label_values(tenant, PROFILE_TYPE_LABEL, &Selector::default(), range)
    }

    /// Totals per series per storage step, from the precomputed per-step totals.
    pub fn series_totals(
        &self,
        tenant: &TenantId,
        sel: &Selector,
        range: TimeRange,
    ) -> Result<BTreeMap<Labels, BTreeMap<i64, i64>>> {
        let maps = self.inner.run(tenant, range, BTreeMap::new, |o, src| {
            query::step_totals_into(src, sel, range, o)
        })?;
        let mut out: BTreeMap<Labels, BTreeMap<i64, i64>> = BTreeMap::new();
        for m in maps {
            for (l, pts) in m {
                let e = out.entry(l).or_default();
                for (t, v) in pts {
                    *e.entry(t).or_insert(0) += v;
                }
            }
        }
        Ok(out)
    }

    /// Changes whenever the set of live segments changes. A result computed from
    /// segments only is still valid while this value is unchanged.
    pub fn segments_version(&self) -> u64 {
        self.inner.segments_version.load(Ordering::SeqCst)
    }

    /// `Some(segments_version)` when no head partition of `tenant` (nor one being
    /// flushed) overlaps any of `ranges`: an answer over them then comes from
    /// immutable segments alone and stays valid while that version is unchanged.
    /// Read under one lock, so a flush (which moves a partition and bumps the version
    /// under the write lock) is either wholly before or wholly after it.
    pub fn segments_only_version(&self, tenant: &TenantId, ranges: &[TimeRange]) -> Option<u64> {
        let st = self.inner.state.read();
        for p in st.head.values().chain(st.flushing.iter()) {
            let g = p.read();
            if &g.tenant == tenant && ranges.iter().any(|r| r.overlaps(g.start_ms, g.end_ms())) {
                return None;
            }
        }
        Some(self.segments_version())
    }

    /// Runs `f` over every data source (head partitions and segments) of `tenant`
    /// overlapping `range`, in parallel, each thread folding into its own
    /// accumulator from `init`. The building block of every query.
    pub fn scan<T: Send>(
        &self,
        tenant: &TenantId,
        range: TimeRange,
        init: impl Fn() -> T + Sync,
        f: impl Fn(&mut T, &dyn Source) -> Result<()> + Sync,
    ) -> Result<Vec<T>> {
        self.inner.run_scoped(tenant, range, Scope::All, init, f)
    }

    /// [`Store::scan`] restricted to the immutable segments or to the mutable head,
    /// so a cache can keep the segment part and compute the head part live.
    pub fn scan_scoped<T: Send>(
        &self,
        tenant: &TenantId,
        range: TimeRange,
        scope: Scope,
        init: impl Fn() -> T + Sync,
        f: impl Fn(&mut T, &dyn Source) -> Result<()> + Sync,
    ) -> Result<Vec<T>> {
        self.inner.run_scoped(tenant, range, scope, init, f)
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

/// Which sources a scan reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scope {
    All,
    /// Immutable segments only (cacheable while `segments_version` is unchanged).
    Segments,
    /// Head partitions, including those being flushed.
    Head,
}

enum Item {
    Head(PartitionRef),
    Segment(Arc<SegmentHandle>),
}

impl Inner {
    fn now_ms(&self) -> i64 {
        now_ms()
    }

    fn apply(&self, lsn: u64, batch: &Batch) -> u64 {
        apply_batch(&self.state, &self.cfg, lsn, batch, None)
    }

    fn head_bytes(&self) -> (usize, usize) {
        let st = self.state.read();
        let head = st.head.values().map(|p| p.read().approx_bytes()).sum();
        let flushing = st.flushing.iter().map(|p| p.read().approx_bytes()).sum();
        (head, flushing)
    }

    /// Moves due partitions from the head to the flushing list and returns them.
    fn seal(&self, all: bool) -> Vec<PartitionRef> {
        let now = self.now_ms();
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
        if total > self.cfg.head_max_bytes {
            // Over budget: flush the largest partitions until back under 3/4 of it.
            sizes.sort_by_key(|s| std::cmp::Reverse(s.1));
            for (k, sz) in sizes {
                if total <= self.cfg.head_max_bytes / 4 * 3 {
                    break;
                }
                total -= sz;
                due.push(k);
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

    fn writer_loop(self: Arc<Self>, rx: Receiver<WriterMsg>, ftx: Sender<FlushMsg>) {
        let tick = Duration::from_millis(500);
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
            // twice the budget, wait for the flusher instead of taking more input.
            loop {
                let (h, f) = self.head_bytes();
                if h + f <= self.cfg.head_max_bytes.saturating_mul(2) || f == 0 {
                    break;
                }
                std::thread::sleep(Duration::from_millis(5));
            }

            let mut group = vec![first];
            let mut bytes = 0usize;
            while group.len() < 512 && bytes < (32 << 20) {
                match rx.try_recv() {
                    Ok(m) => {
                        if let WriterMsg::Write { payload, .. } = &m {
                            bytes += payload.len();
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
                    WriterMsg::Write {
                        batch,
                        payload,
                        reply,
                    } => writes.push((batch, payload, reply)),
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
                for (_, payload, _) in &writes {
                    wal.append(lsn, payload);
                    wal_bytes += payload.len() as u64 + 16;
                    lsn += 1;
                }
                match wal.commit(first_lsn, sync) {
                    Ok(()) => {
                        self.next_lsn.store(lsn, Ordering::SeqCst);
                        inc(&self.stats.wal_bytes_written, wal_bytes);
                        if sync {
                            inc(&self.stats.wal_syncs, 1);
                            last_sync = Instant::now();
                        } else {
                            unsynced = self.cfg.fsync != FsyncPolicy::Never;
                        }
                        for (i, (batch, _, _)) in writes.iter().enumerate() {
                            self.apply(first_lsn + i as u64, batch);
                        }
                        drop(wal);
                        for (i, (batch, _, reply)) in writes.into_iter().enumerate() {
                            inc(&self.stats.samples_written, batch.sample_count() as u64);
                            inc(&self.stats.batches_written, 1);
                            let _ = reply.send(Ok(first_lsn + i as u64));
                        }
                    }
                    Err(e) => {
                        // The LSNs were not consumed; a later commit reuses them. The
                        // file may hold a partial write, which replay drops as a torn
                        // tail — but a later record could follow it, so rotate.
                        error!(error = %e, "WAL commit failed; rejecting the group");
                        drop(wal);
                        let msg = e.to_string();
                        for (_, _, reply) in writes {
                            let _ = reply.send(Err(StorageError::io(
                                self.dir.join("wal"),
                                std::io::Error::other(msg.clone()),
                            )));
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

    fn flusher_loop(self: Arc<Self>, rx: Receiver<FlushMsg>) {
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
                    loop {
                        match self.flush_partition(&part) {
                            Ok(()) => break,
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
                }
            }
        }
    }

    fn flush_partition(&self, part: &PartitionRef) -> Result<()> {
        let input = {
            let p = part.read();
            if p.is_empty() {
                None
            } else {
                let id = self.next_segment_id.fetch_add(1, Ordering::SeqCst);
                Some(p.to_segment_input(id, self.now_ms()))
            }
        };
        let handle = match input {
            Some(input) => {
                let meta = segment::write_segment(&self.dir, input, self.cfg.zstd_level)?;
                let file = SegmentFile::open(&self.dir.join(&meta.file))?;
                self.catalog.insert(&meta)?;
                self.catalog.flush()?;
                inc(&self.stats.segments_flushed, 1);
                Some(Arc::new(SegmentHandle { meta, file }))
            }
            None => None,
        };
        // Decoded before it goes live, so the queries that read it first (it is the
        // newest data) do not pay for the decoding.
        if let (Some(h), true) = (&handle, self.cfg.warm_segment_cache) {
            if let Err(e) = self.load(h) {
                warn!(segment = h.meta.id, error = %e, "decoding a flushed segment failed");
            }
        }
        {
            let mut st = self.state.write();
            st.flushing.retain(|p| !Arc::ptr_eq(p, part));
            if let Some(h) = handle {
                st.segments.insert(h.meta.id, h);
                self.segments_version.fetch_add(1, Ordering::SeqCst);
            }
        }
        // The segment is live now: a failed truncation must not make the caller retry
        // the flush (that would store the partition twice). The WAL is truncated again
        // after the next flush, and replay skips what segments already hold.
        if let Err(e) = self.truncate_wal() {
            error!(error = %e, "WAL truncation failed; it is retried after the next flush");
        }
        Ok(())
    }

    /// Decodes the newest segments into the cache after open, up to half its budget,
    /// so the first queries after a restart find recent data ready. Stops early when
    /// the store closes.
    fn warm_up(&self) {
        // Ids, not handles: a segment compacted away meanwhile is skipped, and its
        // file is not kept alive by this thread.
        let mut ids: Vec<(i64, u64)> = self
            .state
            .read()
            .segments
            .values()
            .map(|h| (h.meta.partition_start_ms, h.meta.id))
            .collect();
        ids.sort_unstable_by(|a, b| b.cmp(a));
        let t = std::time::Instant::now();
        let mut loaded = 0usize;
        for (_, id) in ids {
            if self.closed.load(Ordering::SeqCst)
                || self.cache.weight() >= self.cfg.segment_cache_bytes / 2
            {
                break;
            }
            let Some(h) = self.state.read().segments.get(&id).cloned() else {
                continue;
            };
            match self.load(&h) {
                Ok(_) => loaded += 1,
                Err(e) => warn!(segment = h.meta.id, error = %e, "warming the segment cache"),
            }
        }
        self.warming.store(false, Ordering::Relaxed);
        info!(
            segments = loaded,
            bytes = self.cache.weight(),
            ms = t.elapsed().as_millis() as u64,
            "segment cache warmed"
        );
    }

    fn live_totals(&self) -> (usize, u64) {
        let st = self.state.read();
        (
            st.segments.len(),
            st.segments.values().map(|h| h.meta.size_bytes).sum(),
        )
    }

    fn compactor_loop(self: Arc<Self>, stop: Receiver<()>) {
        loop {
            match stop.recv_timeout(self.cfg.compaction_interval) {
                Err(RecvTimeoutError::Timeout) => {}
                _ => return,
            }
            let now = self.now_ms();
            match self.apply_retention(now) {
                Ok(r) if !r.deleted.is_empty() => {
                    info!(
                        segments = r.deleted.len(),
                        bytes = r.bytes_deleted,
                        "retention deleted expired segments"
                    )
                }
                Ok(_) => {}
                Err(e) => error!(error = %e, "retention failed"),
            }
            match self.compact(None, None, true, now, &|_| {}) {
                Ok(r) => {
                    if !r.compacted.is_empty() {
                        info!(
                            partitions = r.compacted.len(),
                            bytes_before = r.bytes_before,
                            bytes_after = r.bytes_after,
                            elapsed_ms = r.elapsed_ms,
                            "background compaction done"
                        );
                    }
                    for s in r.skipped {
                        warn!(tenant = %s.tenant, partition = s.partition_start_ms, reason = %s.reason, "partition not compacted");
                    }
                }
                Err(e) => error!(error = %e, "background compaction failed"),
            }
        }
    }

    fn compact(
        &self,
        tenant: Option<&TenantId>,
        range: Option<TimeRange>,
        background: bool,
        now: i64,
        progress: &dyn Fn(&CompactProgress),
    ) -> Result<CompactReport> {
        let _guard = self.lifecycle.lock();
        let started = Instant::now();
        self.reap_retired();
        let (segments_before, bytes_before) = self.live_totals();
        let grace = compact::duration_ms(self.cfg.flush_grace);

        // Plan under the read lock: group live segments by tenant and partition.
        type Key = (TenantId, i64, i64);
        let mut groups: BTreeMap<Key, Vec<Arc<SegmentHandle>>> = BTreeMap::new();
        {
            let st = self.state.read();
            for h in st.segments.values() {
                let m = &h.meta;
                if tenant.is_some_and(|t| *t != m.tenant)
                    || range
                        .is_some_and(|r| !r.overlaps(m.partition_start_ms, m.partition_end_ms()))
                    || (background && m.partition_end_ms().saturating_add(grace) > now)
                {
                    continue;
                }
                groups
                    .entry((m.tenant.clone(), m.partition_start_ms, m.partition_ms))
                    .or_default()
                    .push(h.clone());
            }
        }
        let mut report = CompactReport {
            segments_before,
            bytes_before,
            ..Default::default()
        };
        let mut plan = Vec::new();
        for ((t, start, width), handles) in groups {
            let steps: Vec<i64> = handles.iter().map(|h| h.meta.step_ms).collect();
            match compact::output_step(start + width, width, &steps, &self.cfg.downsample, now) {
                None => report.skipped.push(SkippedPartition {
                    tenant: t,
                    partition_start_ms: start,
                    reason: format!("segments have incompatible steps {steps:?}"),
                }),
                Some(step) => {
                    if handles.len() > 1 || steps.iter().any(|&s| s != step) {
                        plan.push((t, start, handles, step));
                    }
                }
            }
        }
        let mut prog = CompactProgress {
            partitions_total: plan.len(),
            bytes_total: plan
                .iter()
                .flat_map(|p| p.2.iter())
                .map(|h| h.meta.size_bytes)
                .sum(),
            ..Default::default()
        };
        progress(&prog);
        for (t, start, handles, step) in plan {
            if self.closed.load(Ordering::SeqCst) {
                break;
            }
            let bytes: u64 = handles.iter().map(|h| h.meta.size_bytes).sum();
            match self.compact_partition(handles, step)? {
                Ok(done) => report.compacted.push(done),
                Err(reason) => report.skipped.push(SkippedPartition {
                    tenant: t,
                    partition_start_ms: start,
                    reason,
                }),
            }
            prog.partitions_done += 1;
            prog.bytes_done += bytes;
            progress(&prog);
        }
        let (segments_after, bytes_after) = self.live_totals();
        report.segments_after = segments_after;
        report.bytes_after = bytes_after;
        report.elapsed_ms = started.elapsed().as_millis() as u64;
        inc(
            &self.stats.partitions_compacted,
            report.compacted.len() as u64,
        );
        for c in &report.compacted {
            inc(&self.stats.segments_compacted_away, c.sources.len() as u64);
            inc(&self.stats.compaction_bytes_read, c.bytes_before);
            inc(&self.stats.compaction_bytes_written, c.bytes_after);
        }
        inc(
            &self.stats.compaction_skipped_partitions,
            report.skipped.len() as u64,
        );
        Ok(report)
    }

    /// Merges `handles` (one tenant and partition) into one segment at `step`.
    /// `Ok(Err(reason))` when the partition was left as it was.
    fn compact_partition(
        &self,
        handles: Vec<Arc<SegmentHandle>>,
        step: i64,
    ) -> Result<std::result::Result<CompactedPartition, String>> {
        let Some(first) = handles.first().map(|h| h.meta.clone()) else {
            return Ok(Err("no segments".into()));
        };
        let budget = self.cfg.compaction_max_bytes as usize;
        let mut merger = Merger::new(step);
        let mut decoded = 0usize;
        // The heavy part runs without any store lock: sources are immutable files.
        for h in &handles {
            let seg = match self.cache.get(&h.meta.id) {
                Some(s) => s,
                None => match h.file.load() {
                    Ok(s) => Arc::new(s),
                    Err(e) if e.is_corruption() => {
                        self.quarantine(h, &e);
                        return Ok(Err(format!(
                            "segment {} is corrupt and was quarantined",
                            h.meta.id
                        )));
                    }
                    Err(e) => return Err(e),
                },
            };
            decoded += seg.approx_bytes();
            if decoded + merger.approx_bytes() > budget {
                return Ok(Err(format!(
                    "decoded size of the partition exceeds the compaction memory budget ({budget} bytes)"
                )));
            }
            if let Err(e) = merger.add(&seg) {
                return Ok(Err(format!("segment {} cannot be merged: {e}", h.meta.id)));
            }
        }
        let mut sources: BTreeSet<u64> = BTreeSet::new();
        for h in &handles {
            sources.insert(h.meta.id);
            // Transitively: a source's own sources may linger as files whose
            // deletion was deferred; they must never be adopted again.
            sources.extend(h.meta.sources.iter().copied());
        }
        let meta = SegmentMeta {
            id: self.next_segment_id.fetch_add(1, Ordering::SeqCst),
            tenant: first.tenant.clone(),
            partition_start_ms: first.partition_start_ms,
            partition_ms: first.partition_ms,
            step_ms: step,
            min_time_ms: 0,
            max_time_ms: 0,
            level: handles.iter().map(|h| h.meta.level).max().unwrap_or(0) + 1,
            max_lsn: handles.iter().map(|h| h.meta.max_lsn).max().unwrap_or(0),
            series: 0,
            rows: 0,
            value_total: 0,
            created_ms: now_ms(),
            sources: sources.into_iter().collect(),
            file: String::new(),
            size_bytes: 0,
            checksum: 0,
        };
        let input = merger.finish(meta);
        let meta = segment::write_segment(&self.dir, input, self.cfg.zstd_level)?;
        let path = self.dir.join(&meta.file);
        let expected = handles
            .iter()
            .fold(0i64, |a, h| a.wrapping_add(h.meta.value_total));
        let undo = |why: String| -> Result<std::result::Result<CompactedPartition, String>> {
            // File first: a catalog entry without its file is dropped at open.
            fs::remove_file(&path).at(&path)?;
            self.catalog.remove(meta.id)?;
            self.catalog.flush()?;
            Ok(Err(why))
        };
        if meta.value_total != expected {
            return undo(format!(
                "merged value total {} differs from the sources' {expected}; sources kept",
                meta.value_total
            ));
        }
        let file = SegmentFile::open(&path)?;
        self.catalog.insert(&meta)?;
        self.catalog.flush()?;
        let new = Arc::new(SegmentHandle {
            meta: meta.clone(),
            file,
        });
        {
            let mut st = self.state.write();
            let intact = handles.iter().all(|h| {
                st.segments
                    .get(&h.meta.id)
                    .is_some_and(|x| Arc::ptr_eq(x, h))
            });
            if !intact {
                drop(st);
                return undo("sources changed during compaction; try again".into());
            }
            for h in &handles {
                st.segments.remove(&h.meta.id);
            }
            st.segments.insert(meta.id, new);
            self.segments_version.fetch_add(1, Ordering::SeqCst);
        }
        let done = CompactedPartition {
            tenant: meta.tenant.clone(),
            partition_start_ms: meta.partition_start_ms,
            sources: handles.iter().map(|h| h.meta.id).collect(),
            output: meta.id,
            level: meta.level,
            step_ms_before: handles.iter().map(|h| h.meta.step_ms).min().unwrap_or(step),
            step_ms_after: step,
            bytes_before: handles.iter().map(|h| h.meta.size_bytes).sum(),
            bytes_after: meta.size_bytes,
            rows_before: handles.iter().map(|h| h.meta.rows).sum(),
            rows_after: meta.rows,
        };
        self.retire(handles)?;
        Ok(Ok(done))
    }

    /// Deletes segments already taken out of the live set: catalog entries now, files
    /// once no query still holds them (waiting a little, then deferring).
    fn retire(&self, handles: Vec<Arc<SegmentHandle>>) -> Result<()> {
        for h in &handles {
            self.cache.remove(&h.meta.id);
            self.catalog.remove(h.meta.id)?;
        }
        self.catalog.flush()?;
        let deadline = Instant::now() + Duration::from_secs(10);
        let mut pending = handles;
        loop {
            let mut err = None;
            pending.retain(|h| {
                if Arc::strong_count(h) > 1 {
                    return true;
                }
                if let Err(e) = delete_segment_file(self, h) {
                    err = Some(e);
                }
                false
            });
            if let Some(e) = err {
                self.retired.lock().extend(pending);
                return Err(e);
            }
            if pending.is_empty() || Instant::now() >= deadline {
                break;
            }
            std::thread::sleep(Duration::from_millis(2));
        }
        if !pending.is_empty() {
            warn!(
                segments = pending.len(),
                "replaced segments still read by a query; deleting them later"
            );
            self.retired.lock().extend(pending);
        }
        Ok(())
    }

    /// Deletes deferred files that nothing references any more.
    fn reap_retired(&self) {
        let mut r = self.retired.lock();
        r.retain(|h| {
            if Arc::strong_count(h) > 1 {
                return true;
            }
            if let Err(e) = delete_segment_file(self, h) {
                warn!(error = %e, "could not delete a replaced segment file; reconcile removes it at open");
            }
            false
        });
    }

    fn apply_retention(&self, now: i64) -> Result<RetentionReport> {
        let _guard = self.lifecycle.lock();
        let started = Instant::now();
        self.reap_retired();
        let (segments_before, bytes_before) = self.live_totals();
        let limits: HashMap<TenantId, i64> = self
            .catalog
            .all_tenant_settings()?
            .into_iter()
            .filter_map(|(t, s)| s.max_age_ms.map(|a| (t, a)))
            .collect();
        let expired: Vec<Arc<SegmentHandle>> = {
            let mut st = self.state.write();
            let ids: Vec<u64> = st
                .segments
                .values()
                .filter(|h| {
                    limits
                        .get(&h.meta.tenant)
                        .is_some_and(|&age| h.meta.expired(age, now))
                })
                .map(|h| h.meta.id)
                .collect();
            let out: Vec<_> = ids.iter().filter_map(|id| st.segments.remove(id)).collect();
            if !out.is_empty() {
                self.segments_version.fetch_add(1, Ordering::SeqCst);
            }
            out
        };
        let deleted: Vec<u64> = expired.iter().map(|h| h.meta.id).collect();
        self.retire(expired)?;
        let (segments_after, bytes_after) = self.live_totals();
        let report = RetentionReport {
            deleted,
            bytes_deleted: bytes_before - bytes_after.min(bytes_before),
            segments_before,
            segments_after,
            elapsed_ms: started.elapsed().as_millis() as u64,
        };
        inc(
            &self.stats.retention_segments_deleted,
            report.deleted.len() as u64,
        );
        inc(&self.stats.retention_bytes_deleted, report.bytes_deleted);
        Ok(report)
    }

    fn truncate_wal(&self) -> Result<()> {
        let mut wal = self.wal.lock();
        let min_needed = {
            let st = self.state.read();
            st.head
                .values()
                .chain(st.flushing.iter())
                .map(|p| p.read().min_lsn)
                .filter(|&l| l > 0)
                .min()
                .unwrap_or_else(|| self.next_lsn.load(Ordering::SeqCst))
        };
        wal.truncate_before(min_needed)?;
        Ok(())
    }

    fn snapshot(&self, tenant: &TenantId, range: TimeRange) -> Vec<Item> {
        let st = self.state.read();
        let mut items = Vec::new();
        for p in st.head.values().chain(st.flushing.iter()) {
            let g = p.read();
            if &g.tenant == tenant && range.overlaps(g.start_ms, g.end_ms()) {
                items.push(Item::Head(p.clone()));
            }
        }
        for h in st.segments.values() {
            // A window starting inside a partition's last step touches the partition
            // but selects none of its steps (a dashboard's moving window almost always
            // does): leaving it out saves a load and a scan thread.
            let m = &h.meta;
            if &m.tenant != tenant || !m.overlaps(range.start_ms, range.end_ms) {
                continue;
            }
            let (lo, hi) = crate::segment::step_range(
                m.partition_start_ms,
                m.step_ms,
                range.start_ms,
                range.end_ms,
            );
            if lo < hi {
                items.push(Item::Segment(h.clone()));
            }
        }
        items
    }

    /// The decoded segment behind `h`, from the cache or read now. Concurrent
    /// loads of one segment (two queries, or a query and the warm-up) wait for a
    /// single read.
    fn load(&self, h: &SegmentHandle) -> Result<Option<Arc<LoadedSegment>>> {
        let mut read = false;
        let loaded = self.cache.get_or_insert_with(&h.meta.id, || {
            read = true;
            h.file.load().map(Arc::new)
        });
        inc(
            if read {
                &self.stats.segment_cache_misses
            } else {
                &self.stats.segment_cache_hits
            },
            1,
        );
        match loaded {
            Ok(seg) => Ok(Some(seg)),
            Err(e) if e.is_corruption() => {
                self.quarantine(h, &e);
                Ok(None)
            }
            Err(e) => Err(e),
        }
    }

    /// Takes a damaged segment out of service: out of the live set, the catalog and
    /// the cache, and its file into `quarantine/` for inspection.
    fn quarantine(&self, h: &SegmentHandle, why: &StorageError) {
        let removed = self.state.write().segments.remove(&h.meta.id).is_some();
        if !removed {
            return;
        }
        self.segments_version.fetch_add(1, Ordering::SeqCst);
        self.cache.remove(&h.meta.id);
        inc(&self.stats.segments_quarantined, 1);
        error!(segment = h.meta.id, file = %h.file.path.display(), error = %why, "corrupt segment quarantined; its data is no longer served");
        if let Err(e) = self
            .catalog
            .remove(h.meta.id)
            .and_then(|_| self.catalog.flush())
        {
            error!(error = %e, "could not remove quarantined segment from the catalog");
        }
        if let Err(e) = move_to_quarantine(&self.dir, &h.file.path) {
            error!(error = %e, "could not move corrupt segment to quarantine");
        }
    }

    fn run<T: Send>(
        &self,
        tenant: &TenantId,
        range: TimeRange,
        init: impl Fn() -> T + Sync,
        f: impl Fn(&mut T, &dyn Source) -> Result<()> + Sync,
    ) -> Result<Vec<T>> {
        self.run_scoped(tenant, range, Scope::All, init, f)
    }

    fn run_scoped<T: Send>(
        &self,
        tenant: &TenantId,
        range: TimeRange,
        scope: Scope,
        init: impl Fn() -> T + Sync,
        f: impl Fn(&mut T, &dyn Source) -> Result<()> + Sync,
    ) -> Result<Vec<T>> {
        inc(&self.stats.queries, 1);
        let mut items = self.snapshot(tenant, range);
        items.retain(|i| {
            matches!(
                (scope, i),
                (Scope::All, _)
                    | (Scope::Segments, Item::Segment(_))
                    | (Scope::Head, Item::Head(_))
            )
        });
        query::par_fold(&items, self.cfg.threads(), init, |acc, item| match item {
            Item::Head(p) => f(acc, &*p.read()),
            Item::Segment(h) => match self.load(h)? {
                Some(seg) => f(acc, &*seg),
                None => Ok(()),
            },
        })
    }
}

/// Applies `batch` to the head. With `skip`, samples of partitions whose
/// segments already cover `lsn` are left out (replay).
fn apply_batch(
    state: &RwLock<State>,
    cfg: &StoreConfig,
    lsn: u64,
    batch: &Batch,
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
        applied += part.write().apply(lsn, batch);
    }
    applied
}

fn delete_segment_file(inner: &Inner, h: &SegmentHandle) -> Result<()> {
    inner.cache.remove(&h.meta.id);
    match fs::remove_file(&h.file.path) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(StorageError::io(&h.file.path, e)),
    }
    if let Some(parent) = h.file.path.parent() {
        segment::sync_dir(parent)?;
    }
    Ok(())
}

fn move_to_quarantine(dir: &Path, file: &Path) -> Result<()> {
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
    catalog.flush()?;
    Ok(handles)
}

#[cfg(test)]
mod tests {
    use crate::query::cache::one_shard_cache;

    #[derive(Clone)]
    struct ValueIsWeight;

    impl quick_cache::Weighter<u64, u64> for ValueIsWeight {
        fn weight(&self, _: &u64, v: &u64) -> u64 {
            *v
        }
    }

    /// Segments of a few hundred MB must stay cached while the budget holds them: a
    /// cache sharded 8 ways refused any item over an eighth of the budget, so the
    /// largest segment was read from disk on every query.
    #[test]
    fn items_up_to_the_whole_budget_stay_cached() {
        const MB: u64 = 1 << 20;
        let cache = one_shard_cache(1024 * MB, ValueIsWeight);
        let sizes = [300 * MB, 300 * MB, 250 * MB, 10 * MB, 10 * MB];
        for (id, &w) in sizes.iter().enumerate() {
            cache.insert(id as u64, w);
        }
        for (id, &w) in sizes.iter().enumerate() {
            assert_eq!(cache.get(&(id as u64)), Some(w), "item {id} of {w} bytes");
        }
        assert_eq!(cache.weight(), sizes.iter().sum::<u64>());
        // Over budget, something is evicted and the weight stays within it.
        cache.insert(99, 400 * MB);
        assert!(cache.weight() <= 1024 * MB);
    }
}
