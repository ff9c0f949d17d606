//! What a query split across queriers needs of the engine (the coordinator is the
//! server's `cluster/split/`): the sources a range reads, to cut it into parts
//! of about equal bytes, and partial merges that travel between queriers.
//!
//! A part is a sub-range of the query's range. A source's steps are selected by
//! where they start (`segment::step_range`), so sub-ranges that tile a range
//! select every step of it exactly once, wherever the cuts fall: the sums of the
//! parts are the sum of the whole. Frame ids belong to one querier's frame tree,
//! so a partial merge travels as a tree of frame *names* ([`NamedTree`]) and is
//! added into the receiving querier's tree by name.

use std::collections::BTreeMap;
use std::sync::Arc;

use parking_lot::RwLock;
use rustc_hash::FxHashMap;
use serde::{Deserialize, Serialize};

use super::merge::{diff_result, DiffResult};
use super::Querier;
use crate::error::{QueryError, Result, StorageError};
use crate::exec::frames::{FrameTree, ROOT_GID};
use crate::exec::merged::{add_sorted, Merged};
use crate::exec::timeseries::{top_series, SeriesPoints};
use crate::exec::TimeRange;
use crate::model::TenantId;
use crate::selector::Selector;
use crate::store::Scope;

/// One source a query over a range reads: its partition's span and stored bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct SourceSpan {
    /// Start of the source's partition (ms).
    pub start_ms: i64,
    /// End of the source's partition (ms, exclusive).
    pub end_ms: i64,
    /// Stored bytes (0 for the head).
    pub bytes: u64,
    /// A head partition: memory of this process, which no other querier holds.
    pub head: bool,
}

/// A merge as a tree of frame names: node 0 is the root, every other node's
/// parent comes before it. What one querier's merge is in another's frame tree.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct NamedTree {
    /// Parent index per node (the root is its own).
    pub parents: Vec<u32>,
    /// Frame name per node (empty for the root).
    pub names: Vec<String>,
    /// Self value per node.
    pub values: Vec<i64>,
}

impl NamedTree {
    /// The nodes of `pairs` (gid, self value) and their ancestors in `tree`.
    fn of(tree: &FrameTree, pairs: &[(u32, i64)]) -> Self {
        let mut t = NamedTree {
            parents: vec![0],
            names: vec![String::new()],
            values: vec![0],
        };
        let mut index: FxHashMap<u32, u32> = FxHashMap::default();
        index.insert(ROOT_GID, 0);
        let mut path = Vec::new();
        for &(gid, v) in pairs {
            let mut at = tree
                .climb_until(gid, &mut path, |g| index.get(&g).copied())
                .unwrap_or(0);
            // `path` is leaf first: add its nodes root side first.
            for &g in path.iter().rev() {
                let i = t.names.len() as u32;
                t.parents.push(at);
                t.names.push(tree.name(tree.name_of(g)).to_string());
                t.values.push(0);
                index.insert(g, i);
                at = i;
            }
            t.values[at as usize] += v;
        }
        t
    }

    /// Refuses a tree whose columns disagree or whose parents do not come first
    /// (a peer's answer is input).
    pub fn check(&self) -> Result<()> {
        let n = self.parents.len();
        if n == 0 || self.names.len() != n || self.values.len() != n {
            return Err(StorageError::Invalid(
                "a partial merge's columns differ in length".into(),
            ));
        }
        if self
            .parents
            .iter()
            .enumerate()
            .skip(1)
            .any(|(i, &p)| p as usize >= i)
        {
            return Err(StorageError::Invalid(
                "a partial merge names a parent after its child".into(),
            ));
        }
        Ok(())
    }

    /// Adds the tree into `tree` by name, as `(gid, value)` pairs sorted by gid.
    fn to_pairs(&self, tree: &mut FrameTree) -> Result<Vec<(u32, i64)>> {
        self.check()?;
        let mut gids = vec![ROOT_GID; self.names.len()];
        let mut sums: BTreeMap<u32, i64> = BTreeMap::new();
        for i in 1..self.names.len() {
            let g = tree.child_named(gids[self.parents[i] as usize], &self.names[i]);
            gids[i] = g;
            if self.values[i] != 0 {
                *sums.entry(g).or_insert(0) += self.values[i];
            }
        }
        Ok(sums.into_iter().filter(|p| p.1 != 0).collect())
    }

    /// Sum of the self values.
    pub fn total(&self) -> i64 {
        self.values.iter().sum()
    }
}

/// This querier's own part of a split merge, kept in its frame tree (no trip
/// through names).
pub struct LocalPart {
    frames: Arc<RwLock<FrameTree>>,
    pairs: Arc<Vec<(u32, i64)>>,
}

/// One side of a split merge: the sub-ranges this querier reads itself, its own
/// part merged already, and the partial merges its peers sent for the others.
pub struct SplitSide<'a> {
    /// The side's selection.
    pub selector: &'a Selector,
    /// Sub-ranges merged by this querier.
    pub local: &'a [TimeRange],
    /// This querier's part, merged while the peers merged theirs.
    pub own: Option<&'a LocalPart>,
    /// Peers' merges of the other sub-ranges.
    pub remote: &'a [NamedTree],
}

impl Querier {
    /// The sources of `tenant` a query over `range` reads, as the store's scans
    /// choose them.
    pub fn source_spans(
        &self,
        tenant: &TenantId,
        range: TimeRange,
    ) -> Result<Vec<SourceSpan>, QueryError> {
        let parts =
            self.store
                .scan_summaries(tenant, range, Scope::All, Vec::new, |acc, src| {
                    let start_ms = src.partition_start();
                    let head = src.segment_id().is_none();
                    let steps = if head { 1 } else { src.partition_steps() };
                    acc.push(SourceSpan {
                        start_ms,
                        end_ms: start_ms
                            .saturating_add(src.step().saturating_mul(i64::from(steps))),
                        bytes: src.stored_bytes(),
                        head,
                    });
                    Ok(())
                })?;
        let mut spans: Vec<SourceSpan> = parts.into_iter().flatten().collect();
        spans.sort_unstable();
        Ok(spans)
    }

    /// The merge of `sel` over `range` as a tree of frame names: a part of a
    /// split merge, answered for another querier.
    pub fn merge_named(
        &self,
        tenant: &TenantId,
        sel: &Selector,
        range: TimeRange,
    ) -> Result<NamedTree, QueryError> {
        let frames = self.store.frames().for_query();
        let m = self.merge_in(tenant, sel, range, &frames)?;
        let tree = frames.read();
        Ok(NamedTree::of(&tree, m.pairs()))
    }

    /// The merge of `sel` over `range` as this querier's own part of a split
    /// merge.
    pub fn merge_part(
        &self,
        tenant: &TenantId,
        sel: &Selector,
        range: TimeRange,
    ) -> Result<LocalPart, QueryError> {
        let frames = self.store.frames().for_query();
        let m = self.merge_in(tenant, sel, range, &frames)?;
        let pairs = Arc::new(m.pairs().to_vec());
        Ok(LocalPart { frames, pairs })
    }

    /// A split merge put together: what [`Querier::merge_flamegraph`] answers
    /// over the union of the side's sub-ranges.
    pub fn merge_flamegraph_split(
        &self,
        tenant: &TenantId,
        side: SplitSide<'_>,
    ) -> Result<Merged, QueryError> {
        let frames = self.store.frames().for_query();
        let m = self.side_in(tenant, &side, &frames)?;
        let skel = self.skeleton(tenant, side.selector, &frames, &[m.pairs()]);
        Ok(m.with_skeleton(skel))
    }

    /// A split diff put together: what [`Querier::diff`] answers.
    pub fn diff_split(
        &self,
        tenant: &TenantId,
        base: SplitSide<'_>,
        compare: SplitSide<'_>,
        top: usize,
        max_nodes: usize,
    ) -> Result<DiffResult, QueryError> {
        let frames = self.store.frames().for_query();
        let b = self.side_in(tenant, &base, &frames)?;
        let c = self.side_in(tenant, &compare, &frames)?;
        let sels = (base.selector, compare.selector);
        let (b, c) = self.with_skeletons(tenant, sels, &frames, b, c);
        Ok(diff_result(b, c, top, max_nodes)?)
    }

    /// The local sub-ranges merged here plus the peers' trees added by name.
    fn side_in(
        &self,
        tenant: &TenantId,
        side: &SplitSide<'_>,
        frames: &Arc<RwLock<FrameTree>>,
    ) -> Result<Merged> {
        let max_nodes = self.limits.max_tree_nodes;
        let mut pairs: Vec<(u32, i64)> = Vec::new();
        for &r in side.local {
            let m = self.merge_in(tenant, side.selector, r, frames)?;
            pairs = add_sorted(&pairs, m.pairs());
        }
        if let Some(own) = side.own {
            if Arc::ptr_eq(&own.frames, frames) {
                pairs = add_sorted(&pairs, &own.pairs);
            } else {
                // The store started a fresh frame tree in between: by name.
                let named = NamedTree::of(&own.frames.read(), &own.pairs);
                pairs = add_sorted(&pairs, &named.to_pairs(&mut frames.write())?);
            }
        }
        for t in side.remote {
            let theirs = t.to_pairs(&mut frames.write())?;
            pairs = add_sorted(&pairs, &theirs);
        }
        if max_nodes > 0 && pairs.len() > max_nodes {
            return Err(QueryError::tree_too_large(max_nodes).into());
        }
        Ok(Merged::new(frames.clone(), Arc::new(pairs)).with_tree_limit(max_nodes))
    }
}

/// Time series of several parts summed by group and bucket, ordered and cut to
/// `limit` (0 = all) as [`Querier::time_series`] orders them. The parts must be
/// asked without a limit: a group small in each part can be large in the sum.
pub fn merge_series(parts: Vec<Vec<SeriesPoints>>, limit: usize) -> Vec<SeriesPoints> {
    let mut sums: BTreeMap<Vec<(String, String)>, BTreeMap<i64, i64>> = BTreeMap::new();
    for s in parts.into_iter().flatten() {
        let e = sums.entry(s.labels).or_default();
        for (t, v) in s.points {
            let p = e.entry(t).or_insert(0);
            *p = p.saturating_add(v);
        }
    }
    let mut out: Vec<SeriesPoints> = sums
        .into_iter()
        .map(|(labels, points)| SeriesPoints {
            labels,
            points: points.into_iter().collect(),
        })
        .collect();
    top_series(&mut out, limit);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::exec::frames::Frames;

    /// A merge named in one tree and added into another, whose ids differ,
    /// keeps every path's value.
    #[test]
    fn named_tree_moves_a_merge_between_frame_trees() {
        let (a, b) = (
            Frames::new(1 << 20).for_query(),
            Frames::new(1 << 20).for_query(),
        );
        let pairs = {
            let mut t = a.write();
            let m = t.child_named(0, "main");
            let x = t.child_named(m, "x");
            let y = t.child_named(x, "y");
            vec![(m, 1), (y, 5)]
        };
        let named = NamedTree::of(&a.read(), &pairs);
        assert_eq!(named.total(), 6);
        let mut tb = b.write();
        let other = tb.child_named(0, "other");
        let got = named.to_pairs(&mut tb).unwrap();
        let m = tb.child_named(0, "main");
        let x = tb.child_named(m, "x");
        let y = tb.child_named(x, "y");
        assert!(other < m);
        assert_eq!(got, vec![(m, 1), (y, 5)]);
        let bad = NamedTree {
            parents: vec![0, 2, 0],
            names: vec![String::new(), "a".into(), "b".into()],
            values: vec![0, 1, 1],
        };
        assert!(bad.to_pairs(&mut tb).is_err());
    }

    #[test]
    fn series_parts_sum_by_group_and_bucket() {
        let s = |l: &str, pts: &[(i64, i64)]| SeriesPoints {
            labels: vec![("service".into(), l.into())],
            points: pts.to_vec(),
        };
        let got = merge_series(
            vec![
                vec![s("a", &[(0, 1), (10, 2)]), s("b", &[(0, 5)])],
                vec![s("a", &[(10, 3), (20, 4)])],
            ],
            1,
        );
        assert_eq!(got, vec![s("a", &[(0, 1), (10, 5), (20, 4)])]);
    }
}
