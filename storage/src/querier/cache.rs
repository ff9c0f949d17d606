//! The querier's caches: query results over immutable segments (bounded by bytes)
//! and the per-segment function-name indexes.
//!
//! Only the part of a result computed from immutable segments is cached, keyed by
//! the query and by `Store::segments_version()`; the head part is always computed
//! live and merged in. A version change (flush, compaction, retention, quarantine)
//! makes every older key unreachable, and the byte bound evicts them.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use super::second_ask::AskedBefore;

use crate::cache::one_shard_cache;
use crate::dict::Dict;
use crate::error::Result;
use crate::exec::frames::FrameTree;
use crate::exec::grouping::{FrameGroups, GroupAcc, GroupByQuery, GroupKey, GroupNodes};
use crate::exec::skeleton::Skeleton;
use crate::exec::{Share, TimeRange};
use crate::fnindex::FnIndex;
use crate::model::TenantId;
use crate::selector::Selector;

/// What a query asked for: tenant, selector (in its canonical text) and range.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(crate) struct Selection {
    pub tenant: TenantId,
    pub selector: String,
    pub range: TimeRange,
}

impl Selection {
    pub fn new(tenant: &TenantId, sel: &Selector, range: TimeRange) -> Self {
        Selection {
            tenant: tenant.clone(),
            selector: sel.to_string(),
            range,
        }
    }

    fn approx_bytes(&self) -> usize {
        self.tenant.as_str().len() + self.selector.len() + 16
    }
}

/// The part of a group-by that shapes its rows (its keys and function filters).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(crate) struct GroupSpec {
    keys: Vec<GroupKey>,
    include: Option<String>,
    exclude: Option<String>,
}

impl GroupSpec {
    pub fn of(q: &GroupByQuery) -> Self {
        GroupSpec {
            keys: q.keys.clone(),
            include: q.include.as_ref().map(|r| r.as_str().to_owned()),
            exclude: q.exclude.as_ref().map(|r| r.as_str().to_owned()),
        }
    }

    fn approx_bytes(&self) -> usize {
        self.keys.len() * 32
            + self.include.as_ref().map_or(0, String::len)
            + self.exclude.as_ref().map_or(0, String::len)
    }
}

/// The key of a cached result.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(crate) enum CacheKey {
    /// A merge's segment part in frame-tree `generation`, valid while the live
    /// segment set is at `version`.
    Merge {
        query: Selection,
        generation: u64,
        version: u64,
    },
    /// A group-by's segment part, valid while the segment set is at `version`.
    GroupBy {
        query: Selection,
        spec: GroupSpec,
        version: u64,
    },
    /// One segment's share of a merge: its whole partition, or one hour of a block
    /// (see `exec::shares`). Valid as long as the segment lives, whatever the range.
    SegmentMerge {
        share: Share,
        generation: u64,
        tenant: TenantId,
        selector: String,
    },
    /// The sum of several segment shares of a merge (their keys sorted): what a
    /// window asks again while its edges move within the same ten minutes, or a
    /// diff's side whose start moves by a few milliseconds.
    ShareSum {
        shares: Vec<Share>,
        generation: u64,
        tenant: TenantId,
        selector: String,
    },
    /// One segment's share of a group-by over frame ids, like [`CacheKey::SegmentMerge`].
    SegmentGroupBy {
        share: Share,
        generation: u64,
        tenant: TenantId,
        selector: String,
        spec: GroupSpec,
    },
    /// One segment share's sums per label group and stack node, before any
    /// function filter (see `GroupNodes`): shared by the filtered group-bys of
    /// every filter with the same selector and label keys.
    SegmentGroupNodes {
        share: Share,
        tenant: TenantId,
        selector: String,
        label_keys: Vec<String>,
    },
    /// The frames a selector's merges touched in frame-tree `generation`, whatever
    /// their range (see `exec::skeleton`).
    Skeleton {
        tenant: TenantId,
        selector: String,
        generation: u64,
    },
}

impl CacheKey {
    fn approx_bytes(&self) -> usize {
        64 + match self {
            CacheKey::Merge { query, .. } => query.approx_bytes(),
            CacheKey::GroupBy { query, spec, .. } => query.approx_bytes() + spec.approx_bytes(),
            CacheKey::SegmentMerge {
                tenant, selector, ..
            } => tenant.as_str().len() + selector.len(),
            CacheKey::ShareSum {
                shares,
                tenant,
                selector,
                ..
            } => {
                shares.len() * std::mem::size_of::<Share>() + tenant.as_str().len() + selector.len()
            }
            CacheKey::SegmentGroupBy {
                tenant,
                selector,
                spec,
                ..
            } => tenant.as_str().len() + selector.len() + spec.approx_bytes(),
            CacheKey::SegmentGroupNodes {
                tenant,
                selector,
                label_keys,
                ..
            } => {
                tenant.as_str().len()
                    + selector.len()
                    + label_keys.iter().map(|k| k.len() + 24).sum::<usize>()
            }
            CacheKey::Skeleton {
                tenant, selector, ..
            } => tenant.as_str().len() + selector.len(),
        }
    }
}

/// A cached result.
#[derive(Clone, Debug)]
pub(crate) enum Cached {
    Groups(GroupAcc),
    /// A merge in frame-tree space: `(frame id, value)` pairs sorted by id; one
    /// segment's (see [`QueryCache::partial`]) or a query's segment part.
    MergePart(Arc<Vec<(u32, i64)>>),
    /// One segment's part of a group-by over frame ids.
    GroupPart(Arc<FrameGroups>),
    /// One segment share's unfiltered sums by label group and stack node.
    GroupNodes(Arc<GroupNodes>),
    /// The frames a selector's merges touched, in drawing order.
    Skeleton(Arc<Skeleton>),
}

impl Cached {
    fn approx_bytes(&self) -> usize {
        match self {
            Cached::Groups(g) => g.approx_bytes(),
            Cached::MergePart(p) => p.len() * 16 + 64,
            Cached::GroupPart(g) => g.approx_bytes(),
            Cached::GroupNodes(g) => g.approx_bytes(),
            Cached::Skeleton(s) => s.approx_bytes(),
        }
    }
}

#[derive(Clone)]
struct ResultWeight;

impl quick_cache::Weighter<CacheKey, Arc<Cached>> for ResultWeight {
    fn weight(&self, k: &CacheKey, v: &Arc<Cached>) -> u64 {
        (k.approx_bytes() + v.approx_bytes()) as u64
    }
}

#[derive(Clone)]
struct IndexWeight;

impl quick_cache::Weighter<u64, Arc<FnIndex>> for IndexWeight {
    fn weight(&self, _: &u64, v: &Arc<FnIndex>) -> u64 {
        v.approx_bytes() as u64
    }
}

/// Cache statistics for `/metrics`.
#[derive(Debug, Default)]
pub struct CacheStats {
    /// Queries whose segment part came from the cache.
    pub hits: AtomicU64,
    /// Queries whose segment part was computed.
    pub misses: AtomicU64,
    /// Function-name indexes built.
    pub fn_index_builds: AtomicU64,
    /// Per-segment parts of merges and group-bys reused.
    pub partial_hits: AtomicU64,
    /// Per-segment parts of merges and group-bys computed.
    pub partial_misses: AtomicU64,
    /// Skeletons of merged frames built or grown (see `exec::skeleton`).
    pub skeleton_builds: AtomicU64,
    /// Sums of a merge's cached shares reused (see `Querier::share_sum`).
    pub share_sum_hits: AtomicU64,
    /// Sums of a merge's cached shares computed.
    pub share_sum_misses: AtomicU64,
}

/// The result cache and the function indexes.
pub(crate) struct QueryCache {
    results: quick_cache::sync::Cache<CacheKey, Arc<Cached>, ResultWeight>,
    fn_indexes: quick_cache::sync::Cache<u64, Arc<FnIndex>, IndexWeight>,
    pub stats: Arc<CacheStats>,
    /// `cache_bytes == 0`: every query is computed (cold benchmarks, debugging).
    results_enabled: bool,
    /// What was asked recently (see [`QueryCache::asked_before`]).
    asked: AskedBefore,
}

impl QueryCache {
    /// `cache_bytes` bounds the result cache and the function indexes together
    /// (an eighth for the indexes, at least 1 MiB); 0 disables results.
    pub fn new(cache_bytes: u64, stats: Arc<CacheStats>) -> Self {
        let indexes = (cache_bytes / 8).max(1 << 20);
        let bytes = cache_bytes.saturating_sub(indexes).max(1 << 20);
        QueryCache {
            results: quick_cache::sync::Cache::with_weighter(
                (bytes / 4096).clamp(64, 1_000_000) as usize,
                bytes,
                ResultWeight,
            ),
            fn_indexes: one_shard_cache(indexes, IndexWeight),
            stats,
            results_enabled: cache_bytes > 0,
            asked: AskedBefore::default(),
        }
    }

    /// Whether `key` was asked recently, remembering it: the admission rule
    /// (see `second_ask.rs`) of per-segment parts that depend on a function filter
    /// and of whole-range parts, whose keys hold a query's exact range.
    pub fn asked_before(&self, key: &impl std::hash::Hash) -> bool {
        self.asked.asked_before(key)
    }

    /// A query's cached segment part, counted as a hit or a miss.
    pub fn get(&self, key: &CacheKey) -> Option<Arc<Cached>> {
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

    pub fn insert(&self, key: CacheKey, v: Arc<Cached>) {
        if self.results_enabled {
            self.results.insert(key, v);
        }
    }

    /// A per-segment partial result: `compute` runs on a miss and its result is kept.
    /// Segments are immutable, so a key naming the segment id, the frame-tree
    /// generation and the selection of a query covering the whole partition stays
    /// valid for as long as the segment lives; entries of deleted segments are simply
    /// never asked for again and age out under the byte bound. A query whose window
    /// moves (a dashboard refreshing "last 24 h") recomputes only the partitions at
    /// its edges.
    pub fn partial(
        &self,
        key: CacheKey,
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

    /// The sum of a merge's cached shares (a [`CacheKey::ShareSum`]): `compute`
    /// runs on a miss. Kept from its second ask on, since a share set asked once
    /// (one no window repeats) would only take room.
    pub fn share_sum(
        &self,
        key: CacheKey,
        compute: impl FnOnce() -> Vec<(u32, i64)>,
    ) -> Arc<Vec<(u32, i64)>> {
        if self.results_enabled {
            if let Some(Cached::MergePart(p)) = self.results.get(&key).as_deref() {
                self.stats.share_sum_hits.fetch_add(1, Ordering::Relaxed);
                return p.clone();
            }
        }
        self.stats.share_sum_misses.fetch_add(1, Ordering::Relaxed);
        let v = Arc::new(compute());
        if self.results_enabled && self.asked.asked_before(&key) {
            self.results
                .insert(key, Arc::new(Cached::MergePart(v.clone())));
        }
        v
    }

    /// The skeleton kept under `key` when it holds every frame summed in `sides`;
    /// else one grown from it for them, and kept in its place.
    pub fn skeleton(
        &self,
        key: CacheKey,
        tree: &FrameTree,
        sides: &[&[(u32, i64)]],
    ) -> Arc<Skeleton> {
        let old = match self.results.get(&key).as_deref() {
            Some(Cached::Skeleton(s)) if s.generation() == tree.generation() => Some(s.clone()),
            _ => None,
        };
        if let Some(s) = old.as_ref().filter(|s| sides.iter().all(|p| s.covers(p))) {
            return s.clone();
        }
        self.stats.skeleton_builds.fetch_add(1, Ordering::Relaxed);
        let s = Arc::new(Skeleton::build(tree, old.as_deref(), sides));
        if self.results_enabled {
            self.results
                .insert(key, Arc::new(Cached::Skeleton(s.clone())));
        }
        s
    }

    /// Bytes held by cached results and function indexes.
    pub fn cached_bytes(&self) -> u64 {
        self.results.weight() + self.fn_indexes.weight()
    }

    /// Cached results.
    pub fn cached_entries(&self) -> usize {
        self.results.len()
    }

    /// The function index of segment `id`, built from `dict` on first use.
    pub fn fn_index(&self, id: u64, dict: &Dict) -> Arc<FnIndex> {
        if let Some(i) = self.fn_indexes.get(&id) {
            return i;
        }
        let idx = Arc::new(FnIndex::build(dict));
        self.stats.fn_index_builds.fetch_add(1, Ordering::Relaxed);
        self.fn_indexes.insert(id, idx.clone());
        idx
    }
}
