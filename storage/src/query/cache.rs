//! The query engine state kept beside a store: a byte-bounded result cache, the
//! per-segment function-name indexes, and the query limits.
//!
//! Only the part of a result computed from immutable segments is cached, keyed by
//! the query and by `Store::segments_version()`; the head part is always computed
//! live and merged in. A version change (flush, compaction, retention, quarantine)
//! makes every older key unreachable, and the byte bound evicts them.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::groupby::{FrameGroups, GroupAcc};
use crate::error::{Result, StorageError};
use crate::fnindex::FnIndex;

/// A cached segment-part result.
#[derive(Clone, Debug)]
pub enum Cached {
    Groups(GroupAcc),
    /// A finished response body (the server caches whole answers that came from
    /// immutable segments only).
    Body(Arc<[u8]>),
    /// A merge in frame-tree space: `(frame id, value)` pairs sorted by id; one
    /// segment's (see [`QueryEngine::partial`]) or a query's segment part.
    MergePart(Arc<Vec<(u32, i64)>>),
    /// One segment's part of a group-by over frame ids.
    GroupPart(Arc<FrameGroups>),
}

impl Cached {
    fn approx_bytes(&self) -> usize {
        match self {
            Cached::Groups(g) => g.approx_bytes(),
            Cached::Body(b) => b.len() + 64,
            Cached::MergePart(p) => p.len() * 16 + 64,
            Cached::GroupPart(g) => g.approx_bytes(),
        }
    }
}

#[derive(Clone)]
struct ResultWeight;

impl quick_cache::Weighter<String, Arc<Cached>> for ResultWeight {
    fn weight(&self, k: &String, v: &Arc<Cached>) -> u64 {
        (k.len() + v.approx_bytes()) as u64
    }
}

#[derive(Clone)]
struct IndexWeight;

impl quick_cache::Weighter<u64, Arc<FnIndex>> for IndexWeight {
    fn weight(&self, _: &u64, v: &Arc<FnIndex>) -> u64 {
        v.approx_bytes() as u64
    }
}

/// A cache of large items in one shard: quick_cache splits a sharded cache's budget
/// per shard and refuses any item over a shard's hot area, so a few items of tens
/// to hundreds of MB (decoded segments, function indexes) were never kept.
pub(crate) fn one_shard_cache<V: Clone, W: quick_cache::Weighter<u64, V> + Clone>(
    bytes: u64,
    weighter: W,
) -> quick_cache::sync::Cache<u64, V, W> {
    let items = (bytes / (16 << 20)).clamp(16, 100_000) as usize;
    let options = quick_cache::OptionsBuilder::new()
        .shards(1)
        .estimated_items_capacity(items)
        .weight_capacity(bytes)
        .build();
    match options {
        Ok(o) => quick_cache::sync::Cache::with_options(
            o,
            weighter,
            Default::default(),
            Default::default(),
        ),
        // Not reached (every option is set); a cache of the default shape still works.
        Err(_) => quick_cache::sync::Cache::with_weighter(items, bytes, weighter),
    }
}

/// Limits every query runs under.
#[derive(Clone, Debug)]
pub struct QueryLimits {
    /// Wall-clock budget of one query.
    pub timeout: Duration,
    /// Most nodes a merged call tree may have (memory budget of merges).
    pub max_tree_nodes: usize,
    /// Most distinct rows a group-by may hold (memory budget of group-bys).
    pub max_groups: usize,
}

impl Default for QueryLimits {
    fn default() -> Self {
        QueryLimits {
            timeout: Duration::from_secs(60),
            max_tree_nodes: 4_000_000,
            max_groups: 1_000_000,
        }
    }
}

/// When a query must give up; checked between sources and inside long loops.
#[derive(Clone, Copy, Debug)]
pub struct Deadline(Instant);

/// The message prefix of a timed-out query (servers map it to 503).
pub const TIMEOUT_PREFIX: &str = "query timed out";

impl Deadline {
    pub fn after(d: Duration) -> Self {
        Deadline(Instant::now() + d)
    }

    pub fn check(&self) -> Result<()> {
        if Instant::now() > self.0 {
            Err(StorageError::QueryLimit(format!(
                "{TIMEOUT_PREFIX}: narrow the time range or the selector"
            )))
        } else {
            Ok(())
        }
    }
}

/// Cache statistics for `/metrics`.
#[derive(Debug, Default)]
pub struct CacheStats {
    pub hits: AtomicU64,
    pub misses: AtomicU64,
    pub fn_index_builds: AtomicU64,
    /// Whole answers served from / missing in the cache (see [`Cached::Body`]).
    pub body_hits: AtomicU64,
    pub body_misses: AtomicU64,
    /// Per-segment parts of merges and group-bys reused / computed.
    pub partial_hits: AtomicU64,
    pub partial_misses: AtomicU64,
}

pub struct QueryEngine {
    results: quick_cache::sync::Cache<String, Arc<Cached>, ResultWeight>,
    fn_indexes: quick_cache::sync::Cache<u64, Arc<FnIndex>, IndexWeight>,
    pub stats: Arc<CacheStats>,
    pub limits: QueryLimits,
    /// `cache_bytes == 0`: every query is computed (cold benchmarks, debugging).
    results_enabled: bool,
}

impl QueryEngine {
    /// `cache_bytes` bounds the result cache (0 disables it); the function indexes
    /// get a quarter more (at least 1 MiB).
    pub fn new(cache_bytes: u64, limits: QueryLimits) -> Self {
        Self::with_stats(cache_bytes, limits, Arc::default())
    }

    /// Like [`QueryEngine::new`], counting into shared `stats` (e.g. process metrics).
    pub fn with_stats(cache_bytes: u64, limits: QueryLimits, stats: Arc<CacheStats>) -> Self {
        let bytes = cache_bytes.max(1 << 20);
        QueryEngine {
            results: quick_cache::sync::Cache::with_weighter(
                (bytes / 4096).clamp(64, 1_000_000) as usize,
                bytes,
                ResultWeight,
            ),
            fn_indexes: one_shard_cache((bytes / 4).max(1 << 20), IndexWeight),
            stats,
            limits,
            results_enabled: cache_bytes > 0,
        }
    }

    pub fn deadline(&self) -> Deadline {
        Deadline::after(self.limits.timeout)
    }

    pub fn get(&self, key: &str) -> Option<Arc<Cached>> {
        let v = if self.results_enabled {
            self.results.get(key)
        } else {
            None
        };
        let c = if v.is_some() {
            &self.stats.hits
        } else {
            &self.stats.misses
        };
        c.fetch_add(1, Ordering::Relaxed);
        v
    }

    pub fn insert(&self, key: String, v: Arc<Cached>) {
        if self.results_enabled {
            self.results.insert(key, v);
        }
    }

    /// A cached response body; counted apart from the segment-part lookups.
    pub fn get_body(&self, key: &str) -> Option<Arc<[u8]>> {
        let v = if self.results_enabled {
            self.results.get(key).and_then(|c| match &*c {
                Cached::Body(b) => Some(b.clone()),
                _ => None,
            })
        } else {
            None
        };
        let c = if v.is_some() {
            &self.stats.body_hits
        } else {
            &self.stats.body_misses
        };
        c.fetch_add(1, Ordering::Relaxed);
        v
    }

    /// A per-segment partial result: `compute` runs on a miss and its result is kept.
    /// Segments are immutable, so a key naming the segment id, the frame-tree
    /// generation and the selection of a query covering the whole partition stays
    /// valid for as long as the segment lives; entries of deleted segments are simply never asked
    /// for again and age out under the byte bound. A query whose window moves (a
    /// dashboard refreshing "last 24 h") recomputes only the partitions at its edges.
    pub fn partial(
        &self,
        key: String,
        compute: impl FnOnce() -> Result<Cached>,
    ) -> Result<Arc<Cached>> {
        if self.results_enabled {
            if let Some(v) = self.results.get(&key) {
                self.stats.partial_hits.fetch_add(1, Ordering::Relaxed);
                return Ok(v);
            }
        }
        self.stats.partial_misses.fetch_add(1, Ordering::Relaxed);
        let v = Arc::new(compute()?);
        if self.results_enabled {
            self.results.insert(key, v.clone());
        }
        Ok(v)
    }

    /// Bytes held by cached results.
    pub fn cached_bytes(&self) -> u64 {
        self.results.weight()
    }

    pub fn cached_entries(&self) -> usize {
        self.results.len()
    }

    /// The function index of segment `id`, built from `dict` on first use.
    pub fn fn_index(&self, id: u64, dict: &crate::dict::Dict) -> Result<Arc<FnIndex>> {
        if let Some(i) = self.fn_indexes.get(&id) {
            return Ok(i);
        }
        let idx = Arc::new(FnIndex::build(dict)?);
        self.stats.fn_index_builds.fetch_add(1, Ordering::Relaxed);
        self.fn_indexes.insert(id, idx.clone());
        Ok(idx)
    }
}

impl Default for QueryEngine {
    fn default() -> Self {
        QueryEngine::new(256 << 20, QueryLimits::default())
    }
}
