//! The segments role: the decoded-segment cache, its warm-up thread, the summary
//! cache (labels and per-step totals, for queries needing nothing else),
//! quarantine of damaged files, and the deferred deletion of replaced ones.
//!
//! The live set itself is shared state (`state.rs`); this role owns what is derived
//! from it: decoded segments and summaries (by id), the list of retired handles
//! whose files a query still reads, and the warm-up flag.

use std::fs;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tracing::{error, info, warn};

use super::recovery::move_to_quarantine;
use super::state::SegmentHandle;
use super::{Inner, Store};
use crate::cache::one_shard_cache;
use crate::durable::sync_dir;
use crate::error::{Result, StorageError};
use crate::exec::SummarySource;
use crate::segment::{LoadedSegment, SegmentSummary};
use crate::stats::inc;

/// The warm-up resolves the stack nodes of the segments holding data of this
/// last stretch (before the newest sample) into the frame tree.
const RESOLVE_WINDOW_MS: i64 = 24 * 3600 * 1000;

#[derive(Clone)]
pub(super) struct SegmentWeighter;

impl quick_cache::Weighter<u64, Arc<LoadedSegment>> for SegmentWeighter {
    fn weight(&self, _: &u64, v: &Arc<LoadedSegment>) -> u64 {
        v.approx_bytes().max(1) as u64
    }
}

pub(super) type SegmentCache = quick_cache::sync::Cache<u64, Arc<LoadedSegment>, SegmentWeighter>;

#[derive(Clone)]
pub(super) struct SummaryWeighter;

impl quick_cache::Weighter<u64, Arc<SegmentSummary>> for SummaryWeighter {
    fn weight(&self, _: &u64, v: &Arc<SegmentSummary>) -> u64 {
        v.approx_bytes().max(1) as u64
    }
}

pub(super) type SummaryCache = quick_cache::sync::Cache<u64, Arc<SegmentSummary>, SummaryWeighter>;

/// The summary cache gets 1/this of the segment-cache budget, taken out of it so
/// the two stay within the configured bound. A summary is a few percent of its
/// decoded segment, so this share holds the labels and totals of many more
/// segments than the decoded cache holds, and costs the decoded cache little.
const SUMMARY_SHARE: u64 = 16;

/// The decoded-segment cache: one shard. A decoded segment is tens to hundreds of
/// MB, and a sharded cache gives each shard a fraction of the budget and refuses
/// items larger than a shard's hot area: the biggest (newest, densest) segment was
/// then read from disk on every query while the cache sat half empty. Lookups are
/// one per segment per query, so a single lock costs nothing measurable.
///
/// The summary cache beside it shares `bytes`.
pub(super) fn segment_caches(bytes: u64) -> (SegmentCache, SummaryCache) {
    let summaries = bytes / SUMMARY_SHARE;
    (
        one_shard_cache(bytes - summaries, SegmentWeighter),
        one_shard_cache(summaries, SummaryWeighter),
    )
}

/// What a query answered from labels and totals reads of a segment: the decoded
/// segment when it is cached anyway, else its summary.
pub(super) enum SummaryRef {
    Full(Arc<LoadedSegment>),
    Summary(Arc<SegmentSummary>),
}

impl SummaryRef {
    pub(super) fn source(&self) -> &dyn SummarySource {
        match self {
            SummaryRef::Full(seg) => &**seg,
            SummaryRef::Summary(s) => &**s,
        }
    }
}

impl Store {
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
}

impl Inner {
    /// The decoded segment behind `h`, from the cache or read now. Concurrent
    /// loads of one segment (two queries, or a query and the warm-up) wait for a
    /// single read.
    pub(super) fn load(&self, h: &SegmentHandle) -> Result<Option<Arc<LoadedSegment>>> {
        let mut read = false;
        let loaded = self.cache.get_or_insert_with(&h.meta.id, || {
            read = true;
            match (h.file.load(), self.fetcher.get()) {
                // An external segment evicted from the disk cache: fetch, retry.
                (Err(StorageError::Io { source, .. }), Some(fetch))
                    if source.kind() == std::io::ErrorKind::NotFound =>
                {
                    // The fetched bytes, not the file: another fetch may evict it.
                    h.file.load_from(fetch.body(&h.file.path)?).map(Arc::new)
                }
                (loaded, _) => loaded.map(Arc::new),
            }
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

    /// What a query needing only labels and totals reads of `h` (see
    /// [`SummaryRef`]): the summary comes from the summary cache, else from the
    /// local file's summary sections, else from the fetcher's ranged reads.
    /// `None` when the segment turned out to be damaged (it is quarantined).
    pub(super) fn summary(&self, h: &SegmentHandle) -> Result<Option<SummaryRef>> {
        if let Some(seg) = self.cache.get(&h.meta.id) {
            inc(&self.stats.segment_cache_hits, 1);
            return Ok(Some(SummaryRef::Full(seg)));
        }
        let mut read = false;
        let loaded = self.summaries.get_or_insert_with(&h.meta.id, || {
            read = true;
            match (h.file.load_summary(), self.fetcher.get()) {
                (Err(StorageError::Io { source, .. }), Some(fetch))
                    if source.kind() == std::io::ErrorKind::NotFound =>
                {
                    fetch.summary(&h.file).map(Arc::new)
                }
                (loaded, _) => loaded.map(Arc::new),
            }
        });
        inc(
            if read {
                &self.stats.summary_cache_misses
            } else {
                &self.stats.summary_cache_hits
            },
            1,
        );
        match loaded {
            Ok(s) => Ok(Some(SummaryRef::Summary(s))),
            Err(e) if e.is_corruption() => {
                self.quarantine(h, &e);
                Ok(None)
            }
            Err(e) => Err(e),
        }
    }

    /// Takes a damaged segment out of service: out of the live set, the catalog and
    /// the cache, and its file into `quarantine/` for inspection.
    pub(super) fn quarantine(&self, h: &SegmentHandle, why: &StorageError) {
        let removed = self.state.write().segments.remove(&h.meta.id).is_some();
        if !removed {
            return;
        }
        self.segments_version.fetch_add(1, Ordering::SeqCst);
        self.cache.remove(&h.meta.id);
        self.summaries.remove(&h.meta.id);
        inc(&self.stats.segments_quarantined, 1);
        if self.fetcher.get().is_some() {
            // A bucket segment: the fetcher has quarantined it in the bucket's
            // index (and said so); the local copy is only a cache, deleted when
            // found damaged, so there is nothing here to move.
            let _ = std::fs::remove_file(&h.file.path);
            return;
        }
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

    /// Decodes the newest segments into the cache after open, up to half its budget,
    /// so the first queries after a restart find recent data ready. Pauses between
    /// segments while a query scans; stops early when the store closes.
    pub(super) fn warm_up(&self) {
        // Ids, not handles: a segment compacted away meanwhile is skipped, and its
        // file is not kept alive by this thread.
        let mut ids: Vec<(i64, u64, i64)> = self
            .state
            .read()
            .segments
            .values()
            .map(|h| (h.meta.partition_start_ms, h.meta.id, h.meta.max_time_ms))
            .collect();
        ids.sort_unstable_by(|a, b| b.cmp(a));
        let newest = ids.iter().map(|&(_, _, max)| max).max().unwrap_or(0);
        let t = std::time::Instant::now();
        let (mut loaded, mut resolved) = (0usize, 0usize);
        // Queries first: a query right after a restart decodes what it needs
        // itself, and shares the CPUs with no one.
        let yield_to_queries = || {
            while self.scans.load(Ordering::SeqCst) > 0 && !self.closed.load(Ordering::SeqCst) {
                std::thread::sleep(Duration::from_millis(5));
            }
        };
        let recent = |max_time: i64| max_time > newest - RESOLVE_WINDOW_MS;
        let mut recent_left = ids.iter().filter(|&&(_, _, max)| recent(max)).count();
        // Once the last day is done, the query threads' scratch is mapped in and
        // the store says so (`/ready` waits for it); older segments follow.
        let recent_done = |recent_left: usize| {
            if recent_left == 0 && !self.recent_warm.load(Ordering::Acquire) {
                self.prefault_query_scratch();
                self.recent_warm.store(true, Ordering::Release);
                info!(
                    ms = t.elapsed().as_millis() as u64,
                    "segment cache warm for the last day"
                );
            }
        };
        recent_done(recent_left);
        let mut scratch = crate::exec::scratch::Scratch::take();
        for (_, id, max_time) in ids {
            if recent(max_time) {
                recent_left -= 1;
            }
            yield_to_queries();
            if self.closed.load(Ordering::SeqCst)
                || self.cache.weight() >= self.cfg.segment_cache_bytes / 2
            {
                break;
            }
            let Some(h) = self.state.read().segments.get(&id).cloned() else {
                continue;
            };
            match self.load(&h) {
                Ok(Some(seg)) => {
                    loaded += 1;
                    if recent(max_time) {
                        if let Err(e) = seg.decode_rows(yield_to_queries) {
                            warn!(segment = h.meta.id, error = %e, "warming the segment cache");
                        }
                        let tree = self.frames.for_query();
                        match seg.dict() {
                            Ok(dict) => {
                                resolved += crate::exec::frames::resolve_segment(
                                    &tree,
                                    dict,
                                    &seg.gids,
                                    &mut scratch,
                                    self.frames.max_nodes / 2,
                                    yield_to_queries,
                                )
                            }
                            Err(e) => {
                                warn!(segment = h.meta.id, error = %e, "warming the segment cache")
                            }
                        }
                    }
                }
                Ok(None) => {}
                Err(e) => warn!(segment = h.meta.id, error = %e, "warming the segment cache"),
            }
            recent_done(recent_left);
        }
        scratch.give_back();
        // Stopped early at the budget, or the day's segments were compacted away
        // meanwhile: nothing more will be warmed for queries, so say so now. A
        // closing store maps no scratch, but `/ready` must not wait on it either.
        if !self.closed.load(Ordering::SeqCst) {
            recent_done(0);
        }
        self.recent_warm.store(true, Ordering::Release);
        self.warming.store(false, Ordering::Relaxed);
        info!(
            segments = loaded,
            bytes = self.cache.weight(),
            frames_resolved = resolved,
            frame_tree_nodes = self.frames.len(),
            ms = t.elapsed().as_millis() as u64,
            "segment cache warmed"
        );
    }

    /// Gives the query pool one scratch space per scan thread, sized for the
    /// largest cached segment and the frame tree and mapped in, and starts the
    /// pool's threads: what the first queries after a restart would otherwise
    /// fault in themselves.
    fn prefault_query_scratch(&self) {
        let (mut nodes, mut names) = (0, 0);
        for (_, seg) in self.cache.iter() {
            nodes = nodes.max(seg.node_count());
            names = names.max(seg.name_slots());
        }
        let frames = self.frames.len();
        let spaces: Vec<_> = (0..self.cfg.threads())
            .map(|_| {
                let mut s = crate::exec::scratch::Scratch::take();
                s.prefault(nodes, frames, names);
                s
            })
            .collect();
        spaces.into_iter().for_each(|s| s.give_back());
        crate::exec::pool::start();
    }

    pub(super) fn live_totals(&self) -> (usize, u64) {
        let st = self.state.read();
        (
            st.segments.len(),
            st.segments.values().map(|h| h.meta.size_bytes).sum(),
        )
    }

    /// Deletes segments already taken out of the live set: catalog entries now, files
    /// once no query still holds them (waiting a little, then deferring).
    pub(super) fn retire(&self, handles: Vec<Arc<SegmentHandle>>) -> Result<()> {
        for h in &handles {
            self.cache.remove(&h.meta.id);
            self.summaries.remove(&h.meta.id);
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
    pub(super) fn reap_retired(&self) {
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
}

fn delete_segment_file(inner: &Inner, h: &SegmentHandle) -> Result<()> {
    inner.cache.remove(&h.meta.id);
    inner.summaries.remove(&h.meta.id);
    match fs::remove_file(&h.file.path) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(StorageError::io(&h.file.path, e)),
    }
    if let Some(parent) = h.file.path.parent() {
        sync_dir(parent)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::Ordering;
    use std::time::Duration;

    use crate::model::{
        Batch, Function, Labels, Location, Sample, SeriesSamples, TenantId, PROFILE_TYPE_LABEL,
    };
    use crate::{Store, StoreConfig};

    /// One sample in each of `hours` hours of a day, one series.
    fn hours_of_samples(hours: i64) -> Batch {
        let mut batch = Batch::new(TenantId::default());
        batch.symbols.functions.push(Function {
            name: "main".into(),
            file: Default::default(),
        });
        batch.symbols.locations.push(Location {
            function: Some(0),
            mapping: None,
            address: 0,
            line: 0,
        });
        let stack = batch.stacks.push(&[0]);
        batch.series.push(SeriesSamples {
            labels: Labels::new([(PROFILE_TYPE_LABEL, "a:b:c:d:e")]),
            samples: (0..hours)
                .map(|h| Sample {
                    timestamp_ms: 1_700_000_000_000 + h * 3_600_000,
                    stack,
                    value: h + 1,
                })
                .collect(),
        });
        batch
    }

    /// A store in a fresh directory holding `batch`, flushed, whose warm-up the
    /// test runs itself (none runs at open, none on flush).
    fn flushed_without_warm_up(batch: Batch) -> (tempfile::TempDir, Store) {
        let dir = tempfile::tempdir().unwrap();
        let cfg = StoreConfig {
            background_flush: false,
            warm_segment_cache: false,
            ..StoreConfig::default()
        };
        let store = Store::open(dir.path(), cfg).unwrap();
        store.write(batch).unwrap();
        store.flush().unwrap();
        (dir, store)
    }

    /// `hours` hours of one series, a stack of its own each hour (`main;fN`).
    fn hours_of_stacks(hours: i64) -> Batch {
        let mut batch = hours_of_samples(hours);
        for (h, sample) in batch.series[0].samples.iter_mut().enumerate() {
            batch.symbols.functions.push(Function {
                name: format!("f{h}").into(),
                file: Default::default(),
            });
            batch.symbols.locations.push(Location {
                function: Some(h as u32 + 1),
                mapping: None,
                address: 0,
                line: 0,
            });
            sample.stack = batch.stacks.push(&[0, h as u32 + 1]);
        }
        batch
    }

    /// The warm-up resolves every stack node of the segments holding the last
    /// day into the frame tree, and no older one; merges answer the same with
    /// and without it, and find those segments' nodes resolved (the tree does not
    /// grow).
    #[test]
    fn the_warm_up_resolves_the_last_day_into_the_frame_tree() {
        use crate::exec::TimeRange;
        use crate::{Querier, QueryLimits, Selector};

        let hours = 30;
        let merged = |warm: bool| {
            let (_dir, store) = flushed_without_warm_up(hours_of_stacks(hours));
            let inner = store.inner.clone();
            inner.cache.clear();
            if warm {
                inner.warm_up();
                let tree = inner.frames.for_query();
                let (generation, nodes) = (tree.read().generation(), tree.read().len());
                let newest = 1_700_000_000_000 + (hours - 1) * 3_600_000;
                let segments: Vec<_> = inner.state.read().segments.values().cloned().collect();
                assert_eq!(segments.len(), hours as usize);
                for h in segments {
                    let seg = inner.cache.get(&h.meta.id).expect("warmed");
                    let slots = seg.gids.slots(generation, seg.node_count());
                    let resolved = (0..seg.node_count() as u32)
                        .filter(|&n| slots.get(n).is_some())
                        .count();
                    let recent = h.meta.max_time_ms > newest - super::RESOLVE_WINDOW_MS;
                    let want = if recent { seg.node_count() } else { 0 };
                    assert_eq!(resolved, want, "segment at {}", h.meta.min_time_ms);
                }
                // root, main, and f0..f29 for the 24 recent hours (+1: the
                // window's edge hour holds data of its own end).
                assert!(nodes > 24, "{nodes} frames");
                let q = Querier::new(&store, 64 << 20, QueryLimits::default());
                let last_day = TimeRange {
                    start_ms: newest - 23 * 3_600_000,
                    end_ms: newest + 1,
                };
                let sel = Selector::parse("{}").unwrap();
                q.merge_tree(&TenantId::default(), &sel, last_day).unwrap();
                assert_eq!(
                    inner.frames.for_query().read().len(),
                    nodes,
                    "a merge of the warmed day added frames"
                );
            }
            let q = Querier::new(&store, 64 << 20, QueryLimits::default());
            let all = TimeRange {
                start_ms: 0,
                end_ms: i64::MAX,
            };
            let tree = q
                .merge_tree(&TenantId::default(), &Selector::parse("{}").unwrap(), all)
                .unwrap();
            tree.folded()
        };
        let (cold, warm) = (merged(false), merged(true));
        assert_eq!(cold, warm);
        assert_eq!(cold.get("main;f29"), Some(&30), "{cold:?}");
        assert_eq!(cold.len(), hours as usize);
    }

    /// The warm-up decodes nothing while a scan runs, and everything once none does;
    /// the store says recent data is warm only then.
    #[test]
    fn the_warm_up_waits_while_a_scan_runs() {
        let (_dir, store) = flushed_without_warm_up(hours_of_samples(3));
        let inner = store.inner.clone();
        assert_eq!(
            inner.cache.weight(),
            0,
            "nothing decoded before the warm-up"
        );
        assert!(
            store.recent_data_warm(),
            "no warm-up configured: nothing to wait for"
        );
        // As a store opened with its warm-up.
        inner.recent_warm.store(false, Ordering::SeqCst);

        inner.scans.fetch_add(1, Ordering::SeqCst);
        let warming = {
            let inner = inner.clone();
            std::thread::spawn(move || inner.warm_up())
        };
        std::thread::sleep(Duration::from_millis(200));
        assert_eq!(inner.cache.weight(), 0, "the warm-up decoded during a scan");
        assert!(!warming.is_finished());
        assert!(!store.recent_data_warm());

        inner.scans.fetch_sub(1, Ordering::SeqCst);
        warming.join().unwrap();
        assert!(store.recent_data_warm());
        assert_eq!(
            inner.cache.len(),
            3,
            "every segment decoded once the scan ended"
        );
    }

    /// Scan threads take a query's segments largest first, whatever their ids:
    /// the last hour, newest and often biggest, is not left to one thread at the
    /// end.
    #[test]
    fn scans_take_the_largest_segments_first() {
        let mut batch = hours_of_stacks(3);
        // The newest hour gets 300 stacks of its own: the largest segment.
        let last = batch.series[0].samples[2];
        for k in 0..300u32 {
            batch.symbols.functions.push(Function {
                name: format!("wide{k}").into(),
                file: Default::default(),
            });
            batch.symbols.locations.push(Location {
                function: Some(batch.symbols.functions.len() as u32 - 1),
                mapping: None,
                address: 0,
                line: 0,
            });
            let loc = batch.symbols.locations.len() as u32 - 1;
            let stack = batch.stacks.push(&[0, loc]);
            batch.series[0]
                .samples
                .push(crate::model::Sample { stack, ..last });
        }
        let (_dir, store) = flushed_without_warm_up(batch);
        let order: Vec<(u64, u64)> = store
            .inner
            .snapshot(
                &TenantId::default(),
                crate::exec::TimeRange::new(0, i64::MAX),
                crate::store::Scope::All,
            )
            .iter()
            .map(|i| match i {
                crate::store::scan::Item::Segment(h) => (h.meta.id, h.meta.size_bytes),
                crate::store::scan::Item::Head(_) => panic!("the head was flushed"),
            })
            .collect();
        assert_eq!(order.len(), 3);
        assert!(order.windows(2).all(|w| w[0].1 >= w[1].1), "{order:?}");
        let newest = order.iter().map(|o| o.0).max();
        assert_eq!(Some(order[0].0), newest, "{order:?}");
    }
}
