//! Merges: the selected samples summed into one profile, drawn as a flame graph,
//! a call tree (pprof, folded, SVG) or the two sides of a diff.
//!
//! A merge sums values by frame-tree id on the scan threads (see
//! `crate::exec::frames`), caching each segment's share when the range covers its
//! whole partition (each whole hour of a block and each whole ten-minute chunk of a
//! partition the range cuts into, see `crate::exec::shares`), the sum of those
//! shares by the set of them (a window moving by less than ten minutes asks the
//! same set), and the query's whole segment part per segments version.

use std::sync::Arc;

use parking_lot::RwLock;

use super::cache::{CacheKey, Cached, Selection};
use super::Querier;
use crate::error::{QueryError, Result};
use crate::exec::diff::{DiffEntry, DiffStats};
use crate::exec::flamegraph::FlameGraphDiff;
use crate::exec::frames::FrameTree;
use crate::exec::merged::{add_sorted, diff_stats_merged, flamegraph_diff_merged, Merged};
use crate::exec::skeleton::Skeleton;
use crate::exec::{join, merge_frames, shares, CallTree, Scratch, Share, TimeRange};
use crate::model::TenantId;
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
    ) -> Result<Merged, QueryError> {
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
    ) -> Result<CallTree, QueryError> {
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
    ) -> Result<(Merged, Merged), QueryError> {
        let frames = self.store.frames().for_query();
        // The base side runs on the asking thread, which starts at once (a pool
        // thread may first have to be woken). Which side is slower depends on the
        // ranges; when one stays put across requests while the other moves (the
        // bench's halves: the base range's start moves), the fixed one is cached.
        let (c, b) = join(
            || self.merge_in(tenant, compare.0, compare.1, &frames),
            || self.merge_in(tenant, base.0, base.1, &frames),
        );
        let (b, c) = (b?, c?);
        Ok(self.with_skeletons(tenant, (base.0, compare.0), &frames, b, c))
    }

    /// The two sides of a diff on their skeletons: one skeleton when they share
    /// a selector (a diff of two ranges).
    pub(super) fn with_skeletons(
        &self,
        tenant: &TenantId,
        (base, compare): (&Selector, &Selector),
        frames: &RwLock<FrameTree>,
        b: Merged,
        c: Merged,
    ) -> (Merged, Merged) {
        if base == compare {
            let skel = self.skeleton(tenant, base, frames, &[b.pairs(), c.pairs()]);
            return (b.with_skeleton(skel.clone()), c.with_skeleton(skel));
        }
        let sb = self.skeleton(tenant, base, frames, &[b.pairs()]);
        let sc = self.skeleton(tenant, compare, frames, &[c.pairs()]);
        (b.with_skeleton(sb), c.with_skeleton(sc))
    }

    /// The cached skeleton of `sel`'s merges, grown to hold `sides` when it
    /// lacks some of their frames (see `crate::exec::skeleton`).
    pub(super) fn skeleton(
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
    ) -> Result<DiffResult, QueryError> {
        let (b, c) = self.diff_sides(tenant, base, compare)?;
        Ok(diff_result(b, c, top, max_nodes)?)
    }

    /// The merge of `sel` over `range` in frame tree `frames` (one tree for every
    /// side of a diff), through the result cache and limits.
    pub(super) fn merge_in(
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
        let init = || MergeAcc {
            scratch: Scratch::take(),
            shares: Vec::new(),
        };
        let accs = self
            .store
            .scan_scoped(&query.tenant, range, scope, init, |acc, src| {
                check()?;
                let s = &mut acc.scratch;
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
                        acc.shares.push((share, pairs.clone()));
                    }
                }
                Ok(())
            })?;
        let mut fresh: Vec<Vec<(u32, i64)>> = Vec::new();
        let mut cached: Vec<SharePart> = Vec::new();
        for mut acc in accs {
            let mut part = Vec::new();
            acc.scratch.gids.drain(&mut part);
            if !part.is_empty() {
                fresh.push(part);
            }
            cached.append(&mut acc.shares);
            acc.scratch.give_back();
        }
        let cached = self.share_sum(query, generation, frames, cached);
        // The ragged ends added to the (shared) sum of the cached shares.
        let pairs = match fresh.split_first() {
            None => (*cached).clone(),
            Some((first, rest)) => rest
                .iter()
                .fold(add_sorted(&cached, first), |a, b| add_sorted(&a, b)),
        };
        if max_nodes > 0 && pairs.len() > max_nodes {
            return Err(QueryError::tree_too_large(max_nodes).into());
        }
        Ok(pairs)
    }
}

/// A diff drawn from its two sides: the drawing and the per-name statistics
/// read the sides only, so they run at once. The drawing, the longer of the
/// two, runs on the asking thread, which starts at once; a pool thread may
/// first have to be woken.
pub(super) fn diff_result(
    b: Merged,
    c: Merged,
    top: usize,
    max_nodes: usize,
) -> Result<DiffResult> {
    let (statistics, flamegraph) = join(
        || Ok(diff_stats_merged(&b, &c, top)),
        || Ok(flamegraph_diff_merged(&b, &c, max_nodes)),
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

/// Above this many shares a sum is made in a dense accumulator rather than by
/// merging the sorted lists pairwise (which costs their lengths per level).
const SORTED_SUM_MAX: usize = 8;

/// A cached share of a merge and its `(gid, value)` pairs.
type SharePart = (Share, Arc<Vec<(u32, i64)>>);

/// A scan thread's merge: its accumulator, and the cached shares it read.
struct MergeAcc {
    scratch: Scratch,
    shares: Vec<SharePart>,
}

impl Querier {
    /// The sum of a merge's cached shares, itself cached by the set of shares.
    ///
    /// Summing a day's shares (a dozen lists of thousands of frames) was most of
    /// an uncached 1-day diff's side
    /// (docs/perf-log/2026-11-26-round-08-sums-of-cached-shares.md). A sliding window, or
    /// a diff side whose start moves by milliseconds, asks the same set again until
    /// an edge crosses a ten-minute chunk; then only the ragged ends are summed
    /// per query.
    fn share_sum(
        &self,
        query: &Selection,
        generation: u64,
        frames: &RwLock<FrameTree>,
        mut shares: Vec<SharePart>,
    ) -> Arc<Vec<(u32, i64)>> {
        // An empty share adds nothing, whichever set it is in.
        shares.retain(|s| !s.1.is_empty());
        match shares.len() {
            0 => return Arc::default(),
            1 => return shares[0].1.clone(),
            _ => {}
        }
        shares.sort_unstable_by_key(|s| s.0);
        let key = CacheKey::ShareSum {
            shares: shares.iter().map(|s| s.0).collect(),
            generation,
            tenant: query.tenant.clone(),
            selector: query.selector.clone(),
        };
        self.cache.share_sum(key, || {
            let lists: Vec<Arc<Vec<(u32, i64)>>> = shares.into_iter().map(|s| s.1).collect();
            sum_lists(lists, frames)
        })
    }
}

/// The sum of gid-sorted lists: merged pairwise in a balanced order when they
/// are few, else added up in a dense accumulator.
fn sum_lists(mut lists: Vec<Arc<Vec<(u32, i64)>>>, frames: &RwLock<FrameTree>) -> Vec<(u32, i64)> {
    if lists.len() > SORTED_SUM_MAX {
        let mut s = Scratch::take();
        s.gids.prepare(frames.read().len());
        for l in &lists {
            for &(g, v) in l.iter() {
                s.gids.add(g, v);
            }
        }
        let mut out = Vec::new();
        s.gids.drain(&mut out);
        s.give_back();
        return out;
    }
    while lists.len() > 1 {
        let mut next = Vec::with_capacity(lists.len().div_ceil(2));
        let mut it = lists.into_iter();
        while let Some(a) = it.next() {
            next.push(match it.next() {
                Some(b) => Arc::new(add_sorted(&a, &b)),
                None => a,
            });
        }
        lists = next;
    }
    lists
        .pop()
        .map(|l| Arc::try_unwrap(l).unwrap_or_else(|shared| (*shared).clone()))
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::exec::frames::Frames;
    use proptest::prelude::*;
    use std::collections::BTreeMap;

    proptest! {
        /// Few lists are merged, many are added up densely: both give the sum by
        /// gid, sorted, without the gids whose values cancel.
        #[test]
        fn lists_sum_by_gid(
            lists in prop::collection::vec(
                prop::collection::btree_map(1u32..64, -3i64..4, 0..20),
                0..14,
            ),
        ) {
            let frames = Frames::new(1 << 20).for_query();
            {
                let mut t = frames.write();
                for i in 0..64 {
                    t.child_named(0, &format!("f{i}"));
                }
            }
            let mut want: BTreeMap<u32, i64> = BTreeMap::new();
            for l in &lists {
                for (&g, &v) in l {
                    *want.entry(g).or_default() += v;
                }
            }
            let want: Vec<(u32, i64)> = want.into_iter().filter(|e| e.1 != 0).collect();
            let lists: Vec<Arc<Vec<(u32, i64)>>> = lists
                .into_iter()
                .map(|l| Arc::new(l.into_iter().filter(|e| e.1 != 0).collect()))
                .collect();
            prop_assert_eq!(sum_lists(lists, &frames), want);
        }
    }
}
