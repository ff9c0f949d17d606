//! The querier: every query the engine answers, over a [`Store`]'s snapshots.
//!
//! It owns what queries need beyond the data: the result cache and the function
//! indexes (`cache.rs`, keyed by [`CacheKey`]s, never by strings), and the limits
//! (`limits.rs`). Queries are named for what they answer: label discovery and
//! totals here, [`Querier::merge_flamegraph`] / [`Querier::merge_tree`] /
//! [`Querier::diff`] in `merge.rs`, [`Querier::group_by`] in `group_by.rs`, the
//! fleet analyses ([`Querier::fleet_hottest`], [`Querier::noise_model`]) in `fleet.rs`.
//!
//! The path of a query runs one way: querier → `Store::scan_scoped` (snapshot,
//! parallel scan) → `crate::exec` (per-source algorithms) → back up as a value.
//! Queries answered from labels and per-step totals (label discovery, series,
//! totals, time series, plans) scan with `scan_summaries` instead: a segment not
//! decoded already is read as its summary, never as stacks and rows.
//!
//! Cached queries compute the immutable-segment part once per `segments_version()`
//! and the head part live. The version is read before the segment scan and again
//! after the head scan: a flush between the two could move a partition from the head
//! to a segment while neither scan saw it (or both did), so a changed version
//! discards the split result and recomputes over everything, uncached.

mod cache;
mod fleet;
mod group_by;
mod limits;
mod lines;
mod merge;
mod partial;
mod plan;
mod second_ask;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

pub use cache::CacheStats;
pub use limits::QueryLimits;
pub use merge::DiffResult;
pub use partial::{merge_series, LocalPart, NamedTree, SourceSpan, SplitSide};
pub use plan::{QueryPlan, ScopePlan};
pub use second_ask::AskedBefore;

use crate::error::{QueryError, Result};
use crate::exec::timeseries::{SeriesGroups, SeriesPoints};
use crate::exec::{self, TimeRange};
use crate::model::{Labels, TenantId, PROFILE_TYPE_LABEL};
use crate::selector::Selector;
use crate::store::{Scope, Store, StoreReader};
use cache::{CacheKey, Cached, QueryCache};
use limits::Deadline;

/// Answers queries over one store, with a result cache and limits.
pub struct Querier {
    store: StoreReader,
    cache: QueryCache,
    limits: QueryLimits,
}

impl Querier {
    /// A querier over `store` whose result cache holds up to `cache_bytes` (0
    /// disables it: every query is computed). It reads the store's data for as long
    /// as it lives, even after the store is shut down.
    pub fn new(store: &Store, cache_bytes: u64, limits: QueryLimits) -> Self {
        Self::with_stats(store, cache_bytes, limits, Arc::default())
    }

    /// Like [`Querier::new`], counting into shared `stats` (e.g. process metrics).
    pub fn with_stats(
        store: &Store,
        cache_bytes: u64,
        limits: QueryLimits,
        stats: Arc<CacheStats>,
    ) -> Self {
        Querier {
            store: store.reader(),
            cache: QueryCache::new(cache_bytes, stats),
            limits,
        }
    }

    /// The limits every query runs under.
    pub fn limits(&self) -> &QueryLimits {
        &self.limits
    }

    /// Cache hit and miss counters.
    pub fn stats(&self) -> &CacheStats {
        &self.cache.stats
    }

    /// Bytes held by cached results and function indexes.
    pub fn cached_bytes(&self) -> u64 {
        self.cache.cached_bytes()
    }

    /// Cached results.
    pub fn cached_entries(&self) -> usize {
        self.cache.cached_entries()
    }

    fn deadline(&self) -> Deadline {
        Deadline::after(self.limits.timeout)
    }

    /// Label sets of the selected series with data in `range`.
    pub fn series(
        &self,
        tenant: &TenantId,
        sel: &Selector,
        range: TimeRange,
    ) -> Result<Vec<Labels>, QueryError> {
        Ok(self.distinct(tenant, range, |o, src| {
            exec::series_into(src, sel, range, o)
        })?)
    }

    /// Label names present on the selected series with data in `range`.
    pub fn label_names(
        &self,
        tenant: &TenantId,
        sel: &Selector,
        range: TimeRange,
    ) -> Result<Vec<String>, QueryError> {
        Ok(self.distinct(tenant, range, |o, src| {
            exec::label_names_into(src, sel, range, o)
        })?)
    }

    /// Values of label `name` on the selected series with data in `range`.
    pub fn label_values(
        &self,
        tenant: &TenantId,
        name: &str,
        sel: &Selector,
        range: TimeRange,
    ) -> Result<Vec<String>, QueryError> {
        Ok(self.distinct(tenant, range, |o, src| {
            exec::label_values_into(src, name, sel, range, o)
        })?)
    }

    /// Profile type ids with data in `range`.
    pub fn profile_types(
        &self,
        tenant: &TenantId,
        range: TimeRange,
    ) -> Result<Vec<String>, QueryError> {
        self.label_values(tenant, PROFILE_TYPE_LABEL, &Selector::default(), range)
    }

    /// The union, sorted, of what `f` collects from every source.
    fn distinct<T: Ord + Send>(
        &self,
        tenant: &TenantId,
        range: TimeRange,
        f: impl Fn(&mut BTreeSet<T>, &dyn exec::SummarySource) -> Result<()> + Sync,
    ) -> Result<Vec<T>> {
        let sets = self
            .store
            .scan_summaries(tenant, range, Scope::All, BTreeSet::new, f)?;
        Ok(sets
            .into_iter()
            .flatten()
            .collect::<BTreeSet<_>>()
            .into_iter()
            .collect())
    }

    /// Totals per series per storage step, from the precomputed per-step totals.
    pub fn series_totals(
        &self,
        tenant: &TenantId,
        sel: &Selector,
        range: TimeRange,
    ) -> Result<BTreeMap<Labels, BTreeMap<i64, i64>>, QueryError> {
        let maps =
            self.store
                .scan_summaries(tenant, range, Scope::All, BTreeMap::new, |o, src| {
                    exec::step_totals_into(src, sel, range, o)
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

    /// Totals per `step_ms` over `range`, grouped by `group_by` labels, top `limit`.
    pub fn time_series(
        &self,
        tenant: &TenantId,
        sel: &Selector,
        range: TimeRange,
        group_by: &[String],
        step_ms: i64,
        limit: usize,
    ) -> Result<Vec<SeriesPoints>, QueryError> {
        let accs = self.store.scan_summaries(
            tenant,
            range,
            Scope::All,
            || SeriesGroups::new(range, step_ms),
            |acc, src| acc.add_source(src, sel, range, group_by),
        )?;
        Ok(SeriesGroups::finish(accs, limit))
    }

    /// Runs `compute` split into a cached segment part and a live head part.
    /// `key` names the segment part at a segments version.
    fn cached_split<T>(
        &self,
        key: impl Fn(u64) -> CacheKey,
        compute: impl Fn(Scope) -> Result<T>,
        to_cached: impl Fn(&T) -> Cached,
        from_cached: impl Fn(&Cached) -> Option<T>,
        merge: impl Fn(&mut T, T),
    ) -> Result<T> {
        let v1 = self.store.segments_version();
        let key = key(v1);
        let (mut seg, fresh) = match self.cache.get(&key).and_then(|c| from_cached(&c)) {
            Some(t) => (t, false),
            None => (compute(Scope::Segments)?, true),
        };
        let head = compute(Scope::Head)?;
        if self.store.segments_version() != v1 {
            return compute(Scope::All);
        }
        // Keyed by the query's exact range: kept from its second ask on.
        if fresh && self.cache.asked_before(&key) {
            self.cache.insert(key, Arc::new(to_cached(&seg)));
        }
        merge(&mut seg, head);
        Ok(seg)
    }
}
