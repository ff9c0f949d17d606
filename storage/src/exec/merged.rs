//! A merge result kept in frame-tree space: self values by frame-tree id (gid).
//!
//! A merge sums values by gid (see [`super::frames`]); turning that into a
//! [`CallTree`] costs a hash insert per node of the merged tree, many times the
//! `max_nodes` a flame graph draws. The
//! flame graph, the diff flame graph and the diff statistics are therefore computed
//! straight from the gid sums, laid onto the selection's [`Skeleton`] (the touched
//! part of the frame tree, cut into chains), where the drawn nodes are decided per
//! chain (see [`super::skeleton_shape`]) and only they get child lists.
//! Outputs that need every stack (pprof, folded text, trees) still convert with
//! [`Merged::to_tree`].

use std::sync::Arc;

use parking_lot::RwLock;
use rustc_hash::FxHashMap;

use super::diff::{diff_stats_by_name, DiffEntry, DiffStats};
use super::drawn::Drawn;
use super::flamegraph::{flamegraph_diff, FlameGraph, FlameGraphDiff};
use super::frames::{FrameTree, ROOT_GID};
use super::shape::Shape;
use super::skeleton::Skeleton;
use super::skeleton_shape;
use super::tree::CallTree;
use crate::error::{QueryError, Result};

/// Self values by gid of one frame tree, sorted by gid, without zeros.
#[derive(Clone)]
pub struct Merged {
    frames: Arc<RwLock<FrameTree>>,
    pairs: Arc<Vec<(u32, i64)>>,
    /// Most call-tree nodes [`Merged::to_tree_checked`] builds (0 = unbounded): the
    /// query's memory budget, set by the engine that ran the merge.
    max_tree_nodes: usize,
    /// The frames to draw on (see [`super::skeleton`]); built per drawing when unset.
    skeleton: Option<Arc<Skeleton>>,
}

impl std::fmt::Debug for Merged {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Merged")
            .field("pairs", &self.pairs.len())
            .field("total", &self.total())
            .finish()
    }
}

impl Merged {
    /// `pairs` must be sorted by gid and hold no zeros (what a merge's drain and
    /// [`add_sorted`] give). Shared, so a cached part is used without a copy.
    pub fn new(frames: Arc<RwLock<FrameTree>>, pairs: Arc<Vec<(u32, i64)>>) -> Self {
        debug_assert!(pairs.windows(2).all(|w| w[0].0 < w[1].0));
        debug_assert!(pairs.iter().all(|p| p.1 != 0));
        Merged {
            frames,
            pairs,
            max_tree_nodes: 0,
            skeleton: None,
        }
    }

    /// Bounds the call trees built from this merge (0 = unbounded).
    pub fn with_tree_limit(mut self, max_tree_nodes: usize) -> Self {
        self.max_tree_nodes = max_tree_nodes;
        self
    }

    /// Sum of all values.
    pub fn total(&self) -> i64 {
        self.pairs
            .iter()
            .fold(0i64, |a, &(_, v)| a.saturating_add(v))
    }

    /// The whole merged call tree (totals computed).
    pub fn to_tree(&self) -> CallTree {
        let mut t = CallTree::from_frames(&self.frames.read(), &self.pairs);
        t.finalize();
        t
    }

    /// [`Merged::to_tree`] within the query's memory budget: a tree of more nodes
    /// than the engine allows is refused with a query-limit error.
    pub fn to_tree_checked(&self) -> Result<CallTree, QueryError> {
        let tree = self.to_tree();
        let max = self.max_tree_nodes;
        if max > 0 && tree.nodes().len() > max {
            return Err(QueryError::tree_too_large(max));
        }
        Ok(tree)
    }

    /// The flame graph, truncated to at most `max_nodes` nodes (0 = all); the same
    /// layout as [`flamegraph`] of [`Merged::to_tree`].
    pub fn flamegraph(&self, max_nodes: usize) -> FlameGraph {
        let tree = self.frames.read();
        drawn(&tree, self.skeleton.as_ref(), [&self.pairs[..]], max_nodes).flamegraph(&*tree)
    }

    /// Pyroscope's serialized tree (`PROFILE_FORMAT_TREE`), truncated like the flame
    /// graph.
    pub fn tree_bytes(&self, max_nodes: usize) -> Vec<u8> {
        let tree = self.frames.read();
        drawn(&tree, self.skeleton.as_ref(), [&self.pairs[..]], max_nodes).tree_bytes(&*tree)
    }

    /// Draws on `skeleton` (a cached one of this selection; grown for this
    /// drawing only if it lacks some frame).
    pub(crate) fn with_skeleton(mut self, skeleton: Arc<Skeleton>) -> Self {
        self.skeleton = Some(skeleton);
        self
    }

    /// The gid sums, sorted by gid.
    pub(crate) fn pairs(&self) -> &[(u32, i64)] {
        &self.pairs
    }

    /// Self value per function name (what [`super::diff::self_by_name`] gives for the tree).
    pub fn self_by_name(&self) -> FxHashMap<String, i64> {
        let tree = self.frames.read();
        by_name(&tree, &self.pairs)
            .into_iter()
            .map(|(k, v)| (k.to_string(), v))
            .collect()
    }
}

/// Self values summed per frame name.
fn by_name<'t>(tree: &'t FrameTree, pairs: &[(u32, i64)]) -> FxHashMap<&'t str, i64> {
    let mut ids: FxHashMap<u32, i64> = FxHashMap::default();
    for &(g, v) in pairs {
        if g != ROOT_GID {
            let e = ids.entry(tree.name_of(g)).or_insert(0);
            *e = e.saturating_add(v);
        }
    }
    // Names are interned: one id per distinct string.
    ids.into_iter()
        .filter(|&(_, v)| v != 0)
        .map(|(id, v)| (tree.name(id), v))
        .collect()
}

/// Pyroscope's diff flame graph (left = base, right = compare).
pub fn flamegraph_diff_merged(base: &Merged, compare: &Merged, max_nodes: usize) -> FlameGraphDiff {
    if !Arc::ptr_eq(&base.frames, &compare.frames) {
        return flamegraph_diff(&base.to_tree(), &compare.to_tree(), max_nodes);
    }
    let tree = base.frames.read();
    let given = base.skeleton.as_ref().or(compare.skeleton.as_ref());
    drawn(
        &tree,
        given,
        [&base.pairs[..], &compare.pairs[..]],
        max_nodes,
    )
    .flamegraph_diff(&*tree)
}

/// Top movers and GWP statistics of a diff (see [`super::diff::diff_stats`]).
pub fn diff_stats_merged(base: &Merged, compare: &Merged, k: usize) -> (Vec<DiffEntry>, DiffStats) {
    if !Arc::ptr_eq(&base.frames, &compare.frames) {
        let (b, c) = (base.to_tree(), compare.to_tree());
        return super::diff::diff_stats(&b, &c, k);
    }
    let tree = base.frames.read();
    diff_stats_by_name(
        &by_name(&tree, &base.pairs),
        &by_name(&tree, &compare.pairs),
        k,
    )
}

/// The nodes drawn of `sides` under `max_nodes`, decided on the chains of `given`
/// when it holds every frame they sum, else of a skeleton grown from it (or built)
/// for them; per node when a value is negative.
fn drawn<const K: usize>(
    tree: &FrameTree,
    given: Option<&Arc<Skeleton>>,
    sides: [&[(u32, i64)]; K],
    max_nodes: usize,
) -> Drawn<K> {
    let given = given.filter(|s| s.generation() == tree.generation());
    if let Some(d) = given.and_then(|s| skeleton_shape::drawn(s, tree, sides, max_nodes)) {
        return d;
    }
    let skel = match given {
        Some(s) if sides.iter().all(|p| s.covers(p)) => s.clone(),
        _ => Arc::new(Skeleton::build(tree, given.map(|s| &**s), &sides)),
    };
    if let Some(d) = skeleton_shape::drawn(&skel, tree, sides, max_nodes) {
        return d;
    }
    let mut selfs = vec![[0; K]; skel.len()];
    for (k, side) in sides.iter().enumerate() {
        skel.add(side, k, &mut selfs);
    }
    Shape::new(&skel.view(tree), selfs).drawn(max_nodes)
}

/// Sums two gid-sorted pair lists (a merge-join; zeros dropped).
pub fn add_sorted(a: &[(u32, i64)], b: &[(u32, i64)]) -> Vec<(u32, i64)> {
    let mut out = Vec::with_capacity(a.len() + b.len());
    let (mut i, mut j) = (0, 0);
    while i < a.len() || j < b.len() {
        let next = match (a.get(i), b.get(j)) {
            (Some(&x), Some(&y)) if x.0 == y.0 => {
                i += 1;
                j += 1;
                (x.0, x.1.saturating_add(y.1))
            }
            (Some(&x), Some(&y)) if x.0 < y.0 => {
                i += 1;
                x
            }
            (Some(&x), None) => {
                i += 1;
                x
            }
            (_, Some(&y)) => {
                j += 1;
                y
            }
            (None, None) => break,
        };
        if next.1 != 0 {
            out.push(next);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dict::DictBuilder;
    use crate::exec::diff::diff_stats;
    use crate::exec::flamegraph::flamegraph;
    use crate::exec::frames::{add_pairs, Frames, GidMemo};
    use crate::exec::scratch::{Memo, NodeValues};
    use proptest::prelude::*;

    type Stacks = Vec<(Vec<u8>, u32, i64)>;

    /// One side's stacks (frame names `a`.., a line per stack so locations differ)
    /// merged into `frames` the way a segment scan does.
    fn side(frames: &Arc<RwLock<FrameTree>>, stacks: &Stacks) -> Merged {
        let mut b = DictBuilder::new();
        let mut pairs = Vec::new();
        for (names, line, v) in stacks {
            pairs.push((b.letter_stack(names, *line), *v));
        }
        let dict = b.finish();
        let memo = GidMemo::default();
        let slots = memo.slots(frames.read().generation(), dict.node_count());
        let mut out = NodeValues::default();
        let (mut nodes, mut names, mut path) = (Memo::default(), Memo::default(), Vec::new());
        add_pairs(
            frames,
            || Ok(&dict),
            Some(&slots),
            &pairs,
            &mut out,
            &mut nodes,
            &mut names,
            &mut Memo::default(),
            &mut path,
        )
        .unwrap();
        let mut merged = Vec::new();
        out.drain(&mut merged);
        Merged::new(frames.clone(), Arc::new(merged))
    }

    /// The same stacks added to a call tree by name: the independent reference.
    fn reference(stacks: &Stacks) -> CallTree {
        let mut t = CallTree::new();
        for (names, _, v) in stacks {
            let names: Vec<String> = names
                .iter()
                .map(|&n| ((b'a' + n) as char).to_string())
                .collect();
            t.add_stack(&names, *v);
        }
        t.finalize();
        t
    }

    fn stacks() -> impl Strategy<Value = Stacks> {
        prop::collection::vec(
            (prop::collection::vec(0u8..5, 1..6), 0u32..3, 1i64..50),
            0..40,
        )
    }

    #[test]
    fn flame_graph_by_hand() {
        let frames = Frames::new(1 << 20).for_query();
        let s: Stacks = vec![
            (vec![0, 1], 1, 3),
            (vec![0, 1], 2, 2),
            (vec![0], 1, 1),
            (vec![2], 1, 4),
        ];
        let m = side(&frames, &s);
        assert_eq!(m.total(), 10);
        let fg = m.flamegraph(0);
        // total, then c (4) and a (6, self 1), then a's child b (5).
        assert_eq!(fg.names, vec!["total", "a", "c", "b"]);
        assert_eq!(
            fg.levels,
            vec![
                vec![0, 10, 0, 0],
                vec![0, 6, 1, 1, 0, 4, 4, 2],
                vec![1, 5, 5, 3],
            ]
        );
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]

        /// Flame graphs, diff flame graphs and diff statistics computed in frame-tree
        /// space equal those of the call trees (and the call tree equals the one
        /// built by name from the raw stacks).
        #[test]
        fn frame_space_equals_call_trees(a in stacks(), b in stacks(), mn in 0usize..12) {
            let frames = Frames::new(1 << 20).for_query();
            let (ma, mb) = (side(&frames, &a), side(&frames, &b));
            let (ta, tb) = (ma.to_tree(), mb.to_tree());
            prop_assert_eq!(ta.folded(), reference(&a).folded());
            prop_assert_eq!(ma.flamegraph(mn), flamegraph(&reference(&a), mn));
            prop_assert_eq!(
                ma.tree_bytes(mn),
                crate::exec::flamegraph::tree_bytes(&reference(&a), mn)
            );
            prop_assert_eq!(
                flamegraph_diff_merged(&ma, &mb, mn),
                flamegraph_diff(&ta, &tb, mn)
            );
            // Drawn on a skeleton holding more frames than one side touches, and
            // on one lacking the other side's frames (grown for the drawing).
            let both = Arc::new(Skeleton::build(&frames.read(), None, &[&mb.pairs, &ma.pairs]));
            prop_assert_eq!(
                ma.clone().with_skeleton(both.clone()).flamegraph(mn),
                flamegraph(&reference(&a), mn)
            );
            let only_a = Arc::new(Skeleton::build(&frames.read(), None, &[&ma.pairs]));
            prop_assert_eq!(
                mb.clone().with_skeleton(only_a.clone()).tree_bytes(mn),
                crate::exec::flamegraph::tree_bytes(&reference(&b), mn)
            );
            prop_assert_eq!(
                flamegraph_diff_merged(
                    &ma.clone().with_skeleton(only_a),
                    &mb.clone().with_skeleton(both),
                    mn
                ),
                flamegraph_diff(&ta, &tb, mn)
            );
            let (top, stats) = diff_stats_merged(&ma, &mb, 3);
            let (top_ref, stats_ref) = diff_stats(&ta, &tb, 3);
            prop_assert_eq!(top, top_ref);
            prop_assert_eq!(
                (stats.samples_base, stats.samples_compare),
                (stats_ref.samples_base, stats_ref.samples_compare)
            );
            prop_assert!((stats.manhattan - stats_ref.manhattan).abs() < 1e-9);
            prop_assert!((stats.entropy_base - stats_ref.entropy_base).abs() < 1e-9);
            prop_assert!((stats.entropy_compare - stats_ref.entropy_compare).abs() < 1e-9);
            prop_assert_eq!(ma.self_by_name(), crate::exec::diff::self_by_name(&ta));
        }

        #[test]
        fn add_sorted_sums_by_key(
            a in prop::collection::btree_map(0u32..50, -5i64..5, 0..30),
            b in prop::collection::btree_map(0u32..50, -5i64..5, 0..30),
        ) {
            let (va, vb): (Vec<_>, Vec<_>) = (a.clone().into_iter().collect(), b.clone().into_iter().collect());
            let mut want = a;
            for (k, v) in b {
                *want.entry(k).or_insert(0) += v;
            }
            let want: Vec<(u32, i64)> = want.into_iter().filter(|p| p.1 != 0).collect();
            prop_assert_eq!(add_sorted(&va, &vb), want);
        }
    }
}
