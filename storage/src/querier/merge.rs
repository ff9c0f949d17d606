//! Merges: the selected samples summed into one profile, drawn as a flame graph,
//! a call tree (pprof, folded, SVG) or the two sides of a diff.
//!
//! A merge sums values by frame-tree id on the scan threads (see
//! `crate::query::frames`), caching each segment's share when the range covers its
//! whole partition (each whole hour of a block and each whole ten-minute chunk of a
//! partition the range cuts into, see `crate::query::shares`), and the query's whole
//! segment part per segments version.

use std::sync::Arc;

use parking_lot::RwLock;

use super::cache::{CacheKey, Cached, Selection};
use super::Querier;
use crate::error::{QueryError, Result};
use crate::model::TenantId;
use crate::query::diff::{DiffEntry, DiffStats};
use crate::query::flamegraph::FlameGraphDiff;
use crate::query::frames::FrameTree;
use crate::query::merged::{add_sorted, diff_stats_merged, flamegraph_diff_merged, Merged};
use crate::query::skeleton::Skeleton;
use crate::query::{join, merge_frames, shares, CallTree, Scratch, TimeRange};
use crate::selector::Selector;
use crate::store::Scope;

/// Both sides of a diff and what was computed from them.
#[derive(Clone, Debug)]
pub struct DiffResult {
    /// The base selection's merge.
    pub base: Merged,
    /// The compared selection's merge.
    pub compare: Merged,
    /// Both merges drawn as one Pyroscope diff flame graph.
    pub flamegraph: FlameGraphDiff,
    /// The entries whose share moved most.
    pub top: Vec<DiffEntry>,
    /// GWP stability figures of the two sides.
    pub stats: DiffStats,
}

impl Querier {
    /// The merge of `sel` over `range`, kept in frame-tree space: what a flame graph
    /// is drawn from (and, through [`Merged::to_tree_checked`], any other view).
    pub fn merge_flamegraph(
        &self,
        tenant: &TenantId,
        sel: &Selector,
        range: TimeRange,
    ) -> Result<Merged> {
        let frames = self.store.frames().for_query();
        let m = self.merge_in(tenant, sel, range, &frames)?;
        let skel = self.skeleton(tenant, sel, &frames, &[m.pairs()]);
        Ok(m.with_skeleton(skel))
    }

    /// The merge of `sel` over `range` as a whole call tree (pprof, folded text,
    /// trees), within the query's node budget.
    pub fn merge_tree(
        &self,
        tenant: &TenantId,
        sel: &Selector,
        range: TimeRange,
    ) -> Result<CallTree> {
        self.merge_flamegraph(tenant, sel, range)?.to_tree_checked()
    }

    /// The merges of two selections in one frame tree, so they compare by frame
    /// (the sides of a diff). They run at once: the two windows often read
    /// different segments.
    pub fn diff_sides(
        &self,
        tenant: &TenantId,
        base: (&Selector, TimeRange),
        compare: (&Selector, TimeRange),
    ) -> Result<(Merged, Merged)> {
        let frames = self.store.frames().for_query();
        let (b, c) = join(
            || self.merge_in(tenant, base.0, base.1, &frames),
            || self.merge_in(tenant, compare.0, compare.1, &frames),
        );
        let (b, c) = (b?, c?);
        // Two sides of one selector (a diff of two ranges) share one skeleton.
        if base.0 == compare.0 {
            let skel = self.skeleton(tenant, base.0, &frames, &[b.pairs(), c.pairs()]);
            return Ok((b.with_skeleton(skel.clone()), c.with_skeleton(skel)));
        }
        let sb = self.skeleton(tenant, base.0, &frames, &[b.pairs()]);
        let sc = self.skeleton(tenant, compare.0, &frames, &[c.pairs()]);
        Ok((b.with_skeleton(sb), c.with_skeleton(sc)))
    }

    /// The cached skeleton of `sel`'s merges, grown to hold `sides` when it
    /// lacks some of their frames (see `crate::query::skeleton`).
    fn skeleton(
        &self,
        tenant: &TenantId,
        sel: &Selector,
        frames: &RwLock<FrameTree>,
        sides: &[&[(u32, i64)]],
    ) -> Arc<Skeleton> {
        let tree = frames.read();
        let key = CacheKey::Skeleton {
            tenant: tenant.clone(),
            selector: sel.to_string(),
            generation: tree.generation(),
        };
        self.cache.skeleton(key, &tree, sides)
    }

    /// Diff of two selections: diff flame graph (at most `max_nodes` drawn), the
    /// `top` entries whose share moved most, and GWP statistics.
    pub fn diff(
        &self,
        tenant: &TenantId,
        base: (&Selector, TimeRange),
        compare: (&Selector, TimeRange),
        top: usize,
        max_nodes: usize,
    ) -> Result<DiffResult> {
        let (b, c) = self.diff_sides(tenant, base, compare)?;
        // The drawing and the per-name statistics read the sides only: at once.
        let (flamegraph, statistics) = join(
            || Ok(flamegraph_diff_merged(&b, &c, max_nodes)),
            || Ok(diff_stats_merged(&b, &c, top)),
        );
        let (flamegraph, (top, stats)) = (flamegraph?, statistics?);
        Ok(DiffResult {
            base: b,
            compare: c,
            flamegraph,
            top,
            stats,
        })
    }

    /// The merge of `sel` over `range` in frame tree `frames` (one tree for every
    /// side of a diff), through the result cache and limits.
    fn merge_in(
        &self,
        tenant: &TenantId,
        sel: &Selector,
        range: TimeRange,
        frames: &Arc<RwLock<FrameTree>>,
    ) -> Result<Merged> {
        let deadline = self.deadline();
        let check = || deadline.check();
        let generation = frames.read().generation();
        let query = Selection::new(tenant, sel, range);
        let max_nodes = self.limits.max_tree_nodes;
        let pairs = self.cached_split(
            |version| CacheKey::Merge {
                query: query.clone(),
                generation,
                version,
            },
            |scope| {
                self.merge_pairs(&query, sel, scope, frames, max_nodes, &check)
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
        Ok(Merged::new(frames.clone(), pairs).with_tree_limit(max_nodes))
    }

    /// Merges the selected samples of `scope` by frame-tree id on the scan threads.
    /// Returns `(gid, self value)` sorted by gid. `max_nodes` (0 = unbounded) is the
    /// memory budget; `check` is called before each source (deadlines).
    fn merge_pairs(
        &self,
        query: &Selection,
        sel: &Selector,
        scope: Scope,
        frames: &Arc<RwLock<FrameTree>>,
        max_nodes: usize,
        check: &(dyn Fn() -> Result<()> + Sync),
    ) -> Result<Vec<(u32, i64)>> {
        let range = query.range;
        let generation = frames.read().generation();
        let accs =
            self.store
                .scan_scoped(&query.tenant, range, scope, Scratch::take, |s, src| {
                    check()?;
                    let shares = shares(src, range);
                    for &sub in &shares.fresh {
                        merge_frames(src, sel, sub, frames, s)?;
                    }
                    for &(share, sub) in &shares.cached {
                        let key = CacheKey::SegmentMerge {
                            share,
                            generation,
                            tenant: query.tenant.clone(),
                            selector: query.selector.clone(),
                        };
                        let c = self.cache.partial(key, || {
                            // This share alone, in the spare accumulator.
                            std::mem::swap(&mut s.gids, &mut s.spare);
                            let r = merge_frames(src, sel, sub, frames, s);
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
            return Err(QueryError::tree_too_large(max_nodes).into());
        }
        Ok(pairs)
    }
}
