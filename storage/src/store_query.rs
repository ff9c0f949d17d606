//! Query methods of [`Store`] built on [`Store::scan_scoped`]: cached merges,
//! group-by, time series and diffs.
//!
//! Cached queries compute the immutable-segment part once per `segments_version()`
//! and the head part live. The version is read before the segment scan and again after
//! the head scan: a flush between the two could move a partition from the head to a
//! segment while neither scan saw it (or both did), so a changed version discards the
//! split result and recomputes over everything, uncached.

use std::sync::Arc;

use parking_lot::RwLock;
use regex::Regex;
use roaring::RoaringBitmap;

use crate::error::{Result, StorageError};
use crate::fnindex::scan_functions;
use crate::model::TenantId;
use crate::query::cache::{Cached, Deadline, QueryEngine};
use crate::query::diff::{DiffEntry, DiffStats};
use crate::query::flamegraph::FlameGraphDiff;
use crate::query::frames::FrameTree;
use crate::query::groupby::{
    frames_can_group, group_frames, group_into, FrameGroups, GroupAcc, GroupByQuery,
};
use crate::query::merged::{
    add_sorted, diff_stats_merged, flamegraph_diff_merged, tree_too_large, Merged,
};
use crate::query::timeseries::{SeriesGroups, SeriesPoints};
use crate::query::{merge_frames, partial_key, CallTree, Scratch, Source, TimeRange};
use crate::selector::Selector;
use crate::store::{Scope, Store};

/// Both sides of a diff and what was computed from them.
#[derive(Clone, Debug)]
pub struct DiffResult {
    pub base: Merged,
    pub compare: Merged,
    pub flamegraph: FlameGraphDiff,
    pub top: Vec<DiffEntry>,
    pub stats: DiffStats,
}

fn key(kind: &str, tenant: &TenantId, sel: &Selector, range: TimeRange, extra: &str) -> String {
    format!(
        "{kind}\u{0}{tenant}\u{0}{sel}\u{0}{}..{}\u{0}{extra}",
        range.start_ms, range.end_ms
    )
}

impl Store {
    /// Runs `compute` split into a cached segment part and a live head part.
    fn cached_split<T>(
        &self,
        engine: &QueryEngine,
        base_key: String,
        compute: impl Fn(Scope) -> Result<T>,
        to_cached: impl Fn(&T) -> Cached,
        from_cached: impl Fn(&Cached) -> Option<T>,
        merge: impl Fn(&mut T, T),
    ) -> Result<T> {
        let v1 = self.segments_version();
        let key = format!("{base_key}\u{0}v{v1}");
        let (mut seg, fresh) = match engine.get(&key).and_then(|c| from_cached(&c)) {
            Some(t) => (t, false),
            None => (compute(Scope::Segments)?, true),
        };
        let head = compute(Scope::Head)?;
        if self.segments_version() != v1 {
            return compute(Scope::All);
        }
        if fresh {
            engine.insert(key, Arc::new(to_cached(&seg)));
        }
        merge(&mut seg, head);
        Ok(seg)
    }

    /// Merges the selected samples of `scope` by frame-tree id on the scan threads.
    /// Returns `(gid, self value)` sorted by gid. `max_nodes` (0 = unbounded) is the
    /// memory budget; `check` is called before each source (deadlines).
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn merge_frames_scope(
        &self,
        tenant: &TenantId,
        sel: &Selector,
        range: TimeRange,
        scope: Scope,
        frames: &Arc<RwLock<FrameTree>>,
        max_nodes: usize,
        check: &(dyn Fn() -> Result<()> + Sync),
        partials: Option<&QueryEngine>,
    ) -> Result<Vec<(u32, i64)>> {
        let generation = frames.read().generation();
        let accs = self.scan_scoped(tenant, range, scope, Scratch::take, |s, src| {
            check()?;
            let (Some(engine), Some(part)) = (partials, partial_key(src, range)) else {
                return merge_frames(src, sel, range, frames, s);
            };
            let key = format!("frames\u{0}{generation}\u{0}{part}\u{0}{tenant}\u{0}{sel}");
            let c = engine.partial(key, || {
                // This source alone, in the spare accumulator.
                std::mem::swap(&mut s.gids, &mut s.spare);
                let r = merge_frames(src, sel, range, frames, s);
                let mut pairs = Vec::new();
                s.gids.drain(&mut pairs);
                std::mem::swap(&mut s.gids, &mut s.spare);
                r.map(|()| Cached::MergePart(Arc::new(pairs)))
            })?;
            if let Cached::MergePart(pairs) = &*c {
                s.gids.prepare(frames.read().len());
                for &(g, v) in pairs.iter() {
                    s.gids.add(g, v);
                }
            }
            Ok(())
        })?;
        let mut parts: Vec<Vec<(u32, i64)>> = Vec::with_capacity(accs.len());
        for mut s in accs {
            let mut part = Vec::new();
            s.gids.drain(&mut part);
            parts.push(part);
            s.give_back();
        }
        // Threads' sums of the same gid are combined.
        let pairs = parts
            .into_iter()
            .reduce(|a, b| add_sorted(&a, &b))
            .unwrap_or_default();
        if max_nodes > 0 && pairs.len() > max_nodes {
            return Err(tree_too_large(max_nodes));
        }
        Ok(pairs)
    }

    /// The merge of `sel` over `range` in frame-tree space, through the engine's
    /// result cache and limits. `frames` is the tree of the query (one tree for
    /// every side of a diff).
    pub fn merge_in(
        &self,
        engine: &QueryEngine,
        tenant: &TenantId,
        sel: &Selector,
        range: TimeRange,
        frames: &Arc<RwLock<FrameTree>>,
    ) -> Result<Merged> {
        let deadline = engine.deadline();
        let check = || deadline.check();
        let generation = frames.read().generation();
        let pairs = self.cached_split(
            engine,
            key("merge", tenant, sel, range, &generation.to_string()),
            |scope| {
                self.merge_frames_scope(
                    tenant,
                    sel,
                    range,
                    scope,
                    frames,
                    engine.limits.max_tree_nodes,
                    &check,
                    Some(engine),
                )
                .map(Arc::new)
            },
            |p| Cached::MergePart(p.clone()),
            |c| match c {
                Cached::MergePart(p) => Some(p.clone()),
                _ => None,
            },
            |a, b| {
                if !b.is_empty() {
                    *a = Arc::new(add_sorted(a, &b));
                }
            },
        )?;
        Ok(Merged::new(frames.clone(), pairs).with_tree_limit(engine.limits.max_tree_nodes))
    }

    /// [`Store::merge_in`] with the store's current frame tree.
    pub fn merge_frames_cached(
        &self,
        engine: &QueryEngine,
        tenant: &TenantId,
        sel: &Selector,
        range: TimeRange,
    ) -> Result<Merged> {
        let frames = self.frames().for_query();
        self.merge_in(engine, tenant, sel, range, &frames)
    }

    /// The merges of two selections in one frame tree, so they compare by gid (the
    /// sides of a diff). They run at once: the two windows often read different
    /// segments.
    pub fn merge_both(
        &self,
        engine: &QueryEngine,
        tenant: &TenantId,
        base: (&Selector, TimeRange),
        compare: (&Selector, TimeRange),
    ) -> Result<(Merged, Merged)> {
        let frames = self.frames().for_query();
        let (b, c) = std::thread::scope(|scope| {
            let other = scope.spawn(|| self.merge_in(engine, tenant, base.0, base.1, &frames));
            let c = self.merge_in(engine, tenant, compare.0, compare.1, &frames);
            let b = other.join().unwrap_or_else(|_| {
                Err(StorageError::Invalid(
                    "the base side of the diff panicked".into(),
                ))
            });
            (b, c)
        });
        Ok((b?, c?))
    }

    /// [`Store::merge`] through the engine's result cache and limits, as a call tree.
    pub fn merge_cached(
        &self,
        engine: &QueryEngine,
        tenant: &TenantId,
        sel: &Selector,
        range: TimeRange,
    ) -> Result<CallTree> {
        self.merge_frames_cached(engine, tenant, sel, range)?
            .to_tree_checked()
    }

    #[allow(clippy::too_many_arguments)]
    fn group_scope(
        &self,
        engine: &QueryEngine,
        deadline: Deadline,
        tenant: &TenantId,
        sel: &Selector,
        range: TimeRange,
        q: &GroupByQuery,
        scope: Scope,
    ) -> Result<GroupAcc> {
        let resolve = |src: &dyn Source, re: &Regex| -> Result<RoaringBitmap> {
            match src.segment_id() {
                Some(id) => engine.fn_index(id, src.dict())?.matching(src.dict(), re),
                None => Ok(scan_functions(src.dict(), re)),
            }
        };
        if frames_can_group(q) {
            let frames = self.frames().for_query();
            let generation = frames.read().generation();
            let accs = self.scan_scoped(
                tenant,
                range,
                scope,
                || (FrameGroups::default(), Scratch::take()),
                |(acc, s), src| {
                    deadline.check()?;
                    let Some(part) = partial_key(src, range) else {
                        return group_frames(src, sel, range, q, &resolve, &frames, acc, s);
                    };
                    let key = format!(
                        "groups\u{0}{generation}\u{0}{part}\u{0}{tenant}\u{0}{sel}\u{0}{}",
                        q.fingerprint()
                    );
                    let c = engine.partial(key, || {
                        let mut own = FrameGroups::default();
                        group_frames(src, sel, range, q, &resolve, &frames, &mut own, s)?;
                        own.shrink_for_cache();
                        Ok(Cached::GroupPart(Arc::new(own)))
                    })?;
                    if let Cached::GroupPart(g) = &*c {
                        acc.add(g);
                    }
                    Ok(())
                },
            )?;
            let accs: Vec<FrameGroups> = accs
                .into_iter()
                .map(|(a, s)| {
                    s.give_back();
                    a
                })
                .collect();
            return FrameGroups::into_rows(accs, &frames.read(), q);
        }
        let accs = self.scan_scoped(
            tenant,
            range,
            scope,
            || (GroupAcc::default(), Scratch::take()),
            |(acc, s), src| {
                deadline.check()?;
                group_into(src, sel, range, q, &resolve, acc, s)
            },
        )?;
        let mut out = GroupAcc::default();
        for (a, s) in accs {
            s.give_back();
            let a = &a;
            out.merge(a);
            if q.max_groups > 0 && out.rows.len() > q.max_groups {
                return Err(StorageError::QueryLimit(format!(
                    "the group-by produces more than {} groups; add filters or fewer keys",
                    q.max_groups
                )));
            }
        }
        Ok(out)
    }

    /// GWP group-by: rows keyed by `q.keys`, through the result cache.
    pub fn group_by(
        &self,
        engine: &QueryEngine,
        tenant: &TenantId,
        sel: &Selector,
        range: TimeRange,
        q: &GroupByQuery,
    ) -> Result<GroupAcc> {
        let deadline = engine.deadline();
        let mut q = q.clone();
        if q.max_groups == 0 {
            q.max_groups = engine.limits.max_groups;
        }
        self.cached_split(
            engine,
            key("group", tenant, sel, range, &q.fingerprint()),
            |scope| self.group_scope(engine, deadline, tenant, sel, range, &q, scope),
            |g| Cached::Groups(g.clone()),
            |c| match c {
                Cached::Groups(g) => Some(g.clone()),
                _ => None,
            },
            |a, b| a.merge(&b),
        )
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
    ) -> Result<Vec<SeriesPoints>> {
        let accs = self.scan(
            tenant,
            range,
            || SeriesGroups::new(range, step_ms),
            |acc, src| acc.add_source(src, sel, range, group_by),
        )?;
        Ok(SeriesGroups::finish(accs, limit))
    }

    /// Diff of two selections: diff flame graph, top movers and GWP statistics.
    #[allow(clippy::too_many_arguments)]
    pub fn diff(
        &self,
        engine: &QueryEngine,
        tenant: &TenantId,
        base: (&Selector, TimeRange),
        compare: (&Selector, TimeRange),
        top: usize,
        max_nodes: usize,
    ) -> Result<DiffResult> {
        let (b, c) = self.merge_both(engine, tenant, base, compare)?;
        let flamegraph = flamegraph_diff_merged(&b, &c, max_nodes);
        let (top, stats) = diff_stats_merged(&b, &c, top);
        Ok(DiffResult {
            base: b,
            compare: c,
            flamegraph,
            top,
            stats,
        })
    }
}
