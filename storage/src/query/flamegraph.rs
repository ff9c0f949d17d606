//! Pyroscope's flame graph layout (`querier.v1.FlameGraph` / `FlameGraphDiff`).
//!
//! `names[0]` is `"total"`. `levels[d]` lists the nodes at depth `d` ordered by x, each
//! as `[x_delta, total, self, name]` (or, for a diff, `[xL, totalL, selfL, xR, totalR,
//! selfR, name]`), where `x_delta` is the distance from the end of the previous node of
//! the same level. A node's children start at `x + self` — self time is drawn on the
//! left — and are sorted by name. Nodes below the `max_nodes` threshold are folded
//! into one `other` child per parent, appended after the sorted children, exactly as
//! Pyroscope lays them out; the golden fixture test checks this.

use std::collections::BinaryHeap;

use rustc_hash::FxHashMap;

use super::tree::{CallTree, ROOT};
use crate::codec::{put_uvarint, Reader};

/// Name of the node that collects children below the `max_nodes` threshold.
pub const OTHER: &str = "other";

/// A flame graph in Pyroscope's `levels` layout.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FlameGraph {
    /// Frame names; the layout refers to them by index.
    pub names: Vec<String>,
    /// Per depth, `[x offset, total, self, name index]` per drawn node (offsets
    /// relative to the previous node of the level).
    pub levels: Vec<Vec<i64>>,
    /// Value of the root.
    pub total: i64,
    /// Largest self value of a drawn node.
    pub max_self: i64,
}

/// A diff flame graph in Pyroscope's `FlameGraphDiff` layout.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FlameGraphDiff {
    /// Frame names; the layout refers to them by index.
    pub names: Vec<String>,
    /// Per depth, `[left offset, left total, left self, right offset, right total,
    /// right self, name index]` per drawn node.
    pub levels: Vec<Vec<i64>>,
    /// Value of both roots together.
    pub total: i64,
    /// Largest self value of a drawn node, either side.
    pub max_self: i64,
    /// Value of the base (left) side.
    pub left_ticks: i64,
    /// Value of the compared (right) side.
    pub right_ticks: i64,
}

/// What the layout needs of a tree: nodes `0..len` with the root at 0 and every
/// parent before its children, and frame names by id. Implemented by [`CallTree`]
/// and by the compact view of a merge in frame-tree space ([`super::merged`]).
pub(crate) trait Nodes {
    fn len(&self) -> usize;
    fn parent(&self, node: usize) -> usize;
    /// Equal ids mean equal names.
    fn name_id(&self, node: usize) -> u32;
    fn name_of_id(&self, id: u32) -> &str;
}

impl Nodes for CallTree {
    fn len(&self) -> usize {
        self.nodes().len()
    }
    fn parent(&self, node: usize) -> usize {
        self.nodes()[node].parent as usize
    }
    fn name_id(&self, node: usize) -> u32 {
        self.nodes()[node].name
    }
    fn name_of_id(&self, id: u32) -> &str {
        self.name(id)
    }
}

/// What [`Shape::drawn`] keeps: `slot[node]` indexes `children` and `others` for
/// drawn nodes (`u32::MAX` for the rest).
struct Drawn<const K: usize> {
    slot: Vec<u32>,
    children: Vec<Vec<u32>>,
    others: Vec<Option<[i64; K]>>,
}

/// A tree shape with `K` value columns per node (1 for a flame graph, 2 for a diff).
pub(crate) struct Shape<'a, N: Nodes, const K: usize> {
    tree: &'a N,
    selfs: Vec<[i64; K]>,
    totals: Vec<[i64; K]>,
}

impl<'a, N: Nodes, const K: usize> Shape<'a, N, K> {
    pub(crate) fn new(tree: &'a N, selfs: Vec<[i64; K]>) -> Self {
        let mut totals = selfs.clone();
        for i in (1..tree.len().min(totals.len())).rev() {
            let p = tree.parent(i);
            if p < i {
                let child = totals[i];
                for (t, c) in totals[p].iter_mut().zip(child) {
                    *t = t.saturating_add(c);
                }
            }
        }
        Shape {
            tree,
            selfs,
            totals,
        }
    }

    pub(crate) fn root_totals(&self) -> [i64; K] {
        self.totals.first().copied().unwrap_or([0; K])
    }

    /// What decides whether a node is drawn: its total over all columns.
    fn weight(&self, node: usize) -> i64 {
        self.totals[node].iter().sum()
    }

    /// The smallest weight drawn: the `max_nodes`-th largest (0 = draw everything).
    fn min_value(&self, max_nodes: usize) -> i64 {
        let n = self.totals.len();
        if max_nodes == 0 || n <= max_nodes {
            return 0;
        }
        let mut heap: BinaryHeap<std::cmp::Reverse<i64>> = BinaryHeap::with_capacity(max_nodes);
        for i in 0..n {
            let w = self.weight(i);
            if heap.len() < max_nodes {
                heap.push(std::cmp::Reverse(w));
            } else if heap.peek().is_some_and(|m| w > m.0) {
                heap.pop();
                heap.push(std::cmp::Reverse(w));
            }
        }
        heap.peek().map_or(0, |m| m.0)
    }

    /// Pyroscope's levels: breadth first, children sorted by name after their
    /// parent's self, each parent's below-threshold children summed into one `other`.
    /// Only drawn nodes get child lists, so the cost beyond one pass over the tree
    /// is in the order of `max_nodes`.
    /// The nodes drawn under `max_nodes`: each drawn node's drawn children sorted by
    /// name, and the sum of its children below the threshold (its `other`). Only
    /// drawn nodes get child lists, so the cost beyond one pass over the tree is in
    /// the order of `max_nodes`.
    fn drawn(&self, max_nodes: usize) -> Drawn<K> {
        let min_value = self.min_value(max_nodes);
        let n = self.totals.len().min(self.tree.len());
        // A drawn node's parent is drawn too: its weight is at least the child's.
        let mut d = Drawn {
            slot: vec![u32::MAX; n],
            children: vec![Vec::new()],
            others: vec![None],
        };
        if n > 0 {
            d.slot[0] = 0;
        }
        for i in 1..n {
            let w = self.weight(i);
            if w == 0 {
                continue;
            }
            let Some(&ps) = d.slot.get(self.tree.parent(i)) else {
                continue;
            };
            if ps == u32::MAX {
                continue;
            }
            if w >= min_value {
                d.slot[i] = d.children.len() as u32;
                d.children.push(Vec::new());
                d.others.push(None);
                d.children[ps as usize].push(i as u32);
            } else {
                let sum = d.others[ps as usize].get_or_insert([0; K]);
                for (s, t) in sum.iter_mut().zip(self.totals[i]) {
                    *s += t;
                }
            }
        }
        let name = |node: u32| self.tree.name_of_id(self.tree.name_id(node as usize));
        for c in d.children.iter_mut().filter(|c| c.len() > 1) {
            c.sort_by(|a, b| name(*a).cmp(name(*b)));
        }
        d
    }

    /// Pyroscope's levels: breadth first, children sorted by name after their
    /// parent's self, each parent's below-threshold children summed into one `other`.
    pub(crate) fn layout(&self, max_nodes: usize) -> (Vec<String>, Vec<Vec<i64>>, i64) {
        let n = self.totals.len().min(self.tree.len());
        let Drawn {
            slot,
            children,
            others,
        } = self.drawn(max_nodes);
        let mut names: Vec<String> = vec!["total".to_string()];
        let mut name_idx: FxHashMap<u32, i64> = FxHashMap::default();
        let mut other_idx: Option<i64> = None;
        let mut max_self = 0i64;

        #[derive(Clone, Copy)]
        enum Item<const K: usize> {
            Node(u32),
            Other([i64; K]),
        }
        let mut levels: Vec<Vec<i64>> = Vec::new();
        // (item, absolute x per column)
        let mut current: Vec<(Item<K>, [i64; K])> = vec![(Item::Node(0), [0; K])];
        while !current.is_empty() && n > 0 {
            let mut values: Vec<i64> = Vec::with_capacity(current.len() * (3 * K + 1));
            let mut prev_end = [0i64; K];
            let mut next: Vec<(Item<K>, [i64; K])> = Vec::new();
            for &(item, x) in &current {
                let (total, selfv, name) = match item {
                    Item::Node(n) => {
                        let name = if n == 0 {
                            0
                        } else {
                            let tn = self.tree.name_id(n as usize);
                            *name_idx.entry(tn).or_insert_with(|| {
                                names.push(self.tree.name_of_id(tn).to_string());
                                (names.len() - 1) as i64
                            })
                        };
                        (self.totals[n as usize], self.selfs[n as usize], name)
                    }
                    Item::Other(v) => {
                        let name = *other_idx.get_or_insert_with(|| {
                            names.push(OTHER.to_string());
                            (names.len() - 1) as i64
                        });
                        (v, v, name)
                    }
                };
                for k in 0..K {
                    values.push(x[k] - prev_end[k]);
                    values.push(total[k]);
                    values.push(selfv[k]);
                    prev_end[k] = x[k] + total[k];
                    max_self = max_self.max(selfv[k]);
                }
                values.push(name);
                let Item::Node(n) = item else { continue };
                let s = slot[n as usize] as usize;
                let mut cx = [0i64; K];
                for k in 0..K {
                    cx[k] = x[k] + selfv[k];
                }
                for &c in &children[s] {
                    next.push((Item::Node(c), cx));
                    for (x, t) in cx.iter_mut().zip(self.totals[c as usize]) {
                        *x += t;
                    }
                }
                if let Some(other) = others[s] {
                    next.push((Item::Other(other), cx));
                }
            }
            levels.push(values);
            current = next;
        }
        (names, levels, max_self)
    }

    pub(crate) fn flamegraph(&self, max_nodes: usize) -> FlameGraph
    where
        N: Sized,
    {
        let total = self.root_totals()[0];
        let (names, levels, max_self) = self.layout(max_nodes);
        FlameGraph {
            names,
            levels,
            total,
            max_self,
        }
    }
}

impl<N: Nodes> Shape<'_, N, 1> {
    /// Pyroscope's serialized tree (`querier.v1` `PROFILE_FORMAT_TREE`): nodes in
    /// depth-first pre-order from a virtual root named "", each as
    /// `uvarint(name length) name uvarint(self) uvarint(child count)`, truncated
    /// like the flame graph (children below the threshold become one `other` leaf).
    pub(crate) fn tree_bytes(&self, max_nodes: usize) -> Vec<u8> {
        let mut out = Vec::new();
        if self.root_totals()[0] == 0 {
            return out;
        }
        let d = self.drawn(max_nodes);
        let put = |out: &mut Vec<u8>, name: &str, self_value: i64, children: usize| {
            put_uvarint(out, name.len() as u64);
            out.extend_from_slice(name.as_bytes());
            put_uvarint(out, self_value.max(0) as u64);
            put_uvarint(out, children as u64);
        };
        enum Next {
            Node(u32),
            Other(i64),
        }
        let mut stack = vec![Next::Node(0)];
        while let Some(next) = stack.pop() {
            match next {
                Next::Other(v) => put(&mut out, OTHER, v, 0),
                Next::Node(n) => {
                    let s = d.slot[n as usize] as usize;
                    let other = d.others[s].map(|o| o[0]).filter(|&o| o > 0);
                    let count = d.children[s].len() + usize::from(other.is_some());
                    let (name, self_value) = if n == 0 {
                        // The virtual root: unnamed, and stacks never end on it.
                        ("", 0)
                    } else {
                        (
                            self.tree.name_of_id(self.tree.name_id(n as usize)),
                            self.selfs[n as usize][0],
                        )
                    };
                    put(&mut out, name, self_value, count);
                    // Pushed in reverse, so children come out in name order.
                    if let Some(o) = other {
                        stack.push(Next::Other(o));
                    }
                    stack.extend(d.children[s].iter().rev().map(|&c| Next::Node(c)));
                }
            }
        }
        out
    }
}

/// [`Shape::tree_bytes`] of a call tree.
pub fn tree_bytes(tree: &CallTree, max_nodes: usize) -> Vec<u8> {
    let selfs: Vec<[i64; 1]> = tree.nodes().iter().map(|n| [n.self_value]).collect();
    Shape::new(tree, selfs).tree_bytes(max_nodes)
}

impl<N: Nodes> Shape<'_, N, 2> {
    pub(crate) fn flamegraph_diff(&self, max_nodes: usize) -> FlameGraphDiff {
        let [l, r] = self.root_totals();
        let (names, levels, max_self) = self.layout(max_nodes);
        FlameGraphDiff {
            names,
            levels,
            total: l.saturating_add(r),
            max_self,
            left_ticks: l,
            right_ticks: r,
        }
    }
}

/// The flame graph of `tree`, truncated to about `max_nodes` nodes (0 = all).
pub fn flamegraph(tree: &CallTree, max_nodes: usize) -> FlameGraph {
    let selfs: Vec<[i64; 1]> = tree.nodes().iter().map(|n| [n.self_value]).collect();
    Shape::new(tree, selfs).flamegraph(max_nodes)
}

/// The union of two trees with both sides' self values per node.
pub fn union(left: &CallTree, right: &CallTree) -> (CallTree, Vec<[i64; 2]>) {
    let mut u = CallTree::new();
    let mut selfs: Vec<[i64; 2]> = vec![[0, 0]];
    for (side, t) in [left, right].into_iter().enumerate() {
        let mut mapped = vec![ROOT; t.nodes().len()];
        for (i, n) in t.nodes().iter().enumerate() {
            let node = if i == 0 {
                ROOT
            } else {
                let parent = mapped.get(n.parent as usize).copied().unwrap_or(ROOT);
                let name = u.intern(t.name(n.name));
                u.child(parent, name)
            };
            mapped[i] = node;
            let idx = node as usize;
            if selfs.len() <= idx {
                selfs.resize(idx + 1, [0, 0]);
            }
            selfs[idx][side] += n.self_value;
        }
    }
    (u, selfs)
}

/// Pyroscope's diff flame graph of two trees (left = base, right = compare).
pub fn flamegraph_diff(left: &CallTree, right: &CallTree, max_nodes: usize) -> FlameGraphDiff {
    let (u, selfs) = union(left, right);
    Shape::new(&u, selfs).flamegraph_diff(max_nodes)
}

/// Rebuilds a call tree from Pyroscope's serialized tree (inverse of [`tree_bytes`]
/// when nothing was truncated), read as Pyroscope's `UnmarshalTree` reads it: a stack
/// holding one parent entry per announced child. `None` when the bytes are malformed.
pub fn tree_from_bytes(b: &[u8]) -> Option<CallTree> {
    let mut tree = CallTree::new();
    let mut r = Reader::new(b, "serialized tree");
    // `None` marks the unnamed virtual root, which is read first.
    let mut parents: Vec<Option<u32>> = if b.is_empty() { Vec::new() } else { vec![None] };
    while let Some(parent) = parents.pop() {
        let name = r.str().ok()?;
        let self_value = i64::try_from(r.uvarint().ok()?).ok()?;
        let children = r.uvarint().ok()?;
        let node = match parent {
            None if name.is_empty() => ROOT,
            None => return None,
            Some(p) => {
                let id = tree.intern(name);
                tree.child(p, id)
            }
        };
        tree.add_self(node, self_value);
        // Every announced child takes at least three bytes: bounds the stack.
        if children > b.len() as u64 {
            return None;
        }
        parents.extend(std::iter::repeat_n(Some(node), children as usize));
    }
    if !r.is_empty() {
        return None;
    }
    tree.finalize();
    Some(tree)
}

/// Rebuilds a call tree from a flame graph's levels (inverse of [`flamegraph`] when
/// nothing was truncated). Used to check layouts against third-party fixtures.
pub fn tree_from_levels(names: &[String], levels: &[Vec<i64>]) -> Option<CallTree> {
    let mut tree = CallTree::new();
    // Nodes of the previous level as (absolute x, total, self, tree node).
    let mut prev: Vec<(i64, i64, i64, u32)> = Vec::new();
    for (d, level) in levels.iter().enumerate() {
        if level.len() % 4 != 0 {
            return None;
        }
        let mut cur = Vec::with_capacity(level.len() / 4);
        let mut end = 0i64;
        for q in level.chunks_exact(4) {
            let (x, total, selfv) = (end + q[0], q[1], q[2]);
            end = x + total;
            let name = names.get(usize::try_from(q[3]).ok()?)?;
            let node = if d == 0 {
                ROOT
            } else {
                let parent = prev
                    .iter()
                    .find(|p| p.0 + p.2 <= x && x + total <= p.0 + p.1)?
                    .3;
                let id = tree.intern(name);
                tree.child(parent, id)
            };
            tree.add_self(node, selfv);
            cur.push((x, total, selfv, node));
        }
        prev = cur;
    }
    tree.finalize();
    Some(tree)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> CallTree {
        let mut t = CallTree::new();
        t.add_stack(&["main", "b"], 3);
        t.add_stack(&["main", "a"], 2);
        t.add_stack(&["main"], 1);
        t.add_stack(&["idle"], 4);
        t.finalize();
        t
    }

    #[test]
    fn levels_by_hand() {
        let fg = flamegraph(&sample(), 0);
        // Level 1 sorted by name: idle(4) then main(6). Level 2 under main (x=4):
        // main's self (1) comes first, so a starts at 5, b at 7.
        assert_eq!(fg.names, vec!["total", "idle", "main", "a", "b"]);
        assert_eq!(
            fg.levels,
            vec![
                vec![0, 10, 0, 0],
                vec![0, 4, 4, 1, 0, 6, 1, 2],
                vec![5, 2, 2, 3, 0, 3, 3, 4],
            ]
        );
        assert_eq!(fg.total, 10);
        assert_eq!(fg.max_self, 4);
        let back = tree_from_levels(&fg.names, &fg.levels).expect("valid levels");
        assert_eq!(back.folded(), sample().folded());
    }

    #[test]
    fn tree_bytes_by_hand_and_read_back() {
        let b = tree_bytes(&sample(), 0);
        // "" self 0, 2 children; idle (4, leaf); main (self 1, 2 children); a; b.
        let want: Vec<u8> = [
            &[0u8, 0, 2][..],
            &[4, b'i', b'd', b'l', b'e', 4, 0],
            &[4, b'm', b'a', b'i', b'n', 1, 2],
            &[1, b'a', 2, 0],
            &[1, b'b', 3, 0],
        ]
        .concat();
        assert_eq!(b, want);
        let back = tree_from_bytes(&b).expect("well-formed");
        assert_eq!(back.folded(), sample().folded());
        // Truncated to 4 nodes: `a` (2) joins main's `other`.
        let t = tree_from_bytes(&tree_bytes(&sample(), 4))
            .expect("well-formed")
            .folded();
        assert_eq!(t.get("main;other"), Some(&2));
        assert_eq!(t.get("main;a"), None);
        assert_eq!(t.values().sum::<i64>(), 10);
        assert!(tree_bytes(&CallTree::new(), 0).is_empty());
        // Malformed input is refused, not guessed at.
        let mut trailing = b.clone();
        trailing.push(0);
        assert!(tree_from_bytes(&trailing).is_none());
        assert!(tree_from_bytes(&b[..b.len() - 1]).is_none());
        assert!(tree_from_bytes(&[1, b'x', 0, 0]).is_none(), "a named root");
        assert!(
            tree_from_bytes(&[0, 0, 0xff, 0xff, 0x03]).is_none(),
            "too many children"
        );
        assert!(tree_from_bytes(&[]).is_some_and(|t| t.total() == 0));
    }

    #[test]
    fn truncation_folds_into_other() {
        // Totals: total 10, main 6, idle 4, b 3, a 2. With 4 nodes the threshold is 3,
        // so `a` (2) becomes `other` after b.
        let fg = flamegraph(&sample(), 4);
        assert_eq!(fg.names, vec!["total", "idle", "main", "b", "other"]);
        assert_eq!(fg.levels[2], vec![5, 3, 3, 3, 0, 2, 2, 4]);
    }

    #[test]
    fn diff_levels() {
        let mut l = CallTree::new();
        l.add_stack(&["main", "a"], 2);
        l.finalize();
        let mut r = CallTree::new();
        r.add_stack(&["main", "a"], 1);
        r.add_stack(&["main", "b"], 5);
        r.finalize();
        let d = flamegraph_diff(&l, &r, 0);
        assert_eq!(d.names, vec!["total", "main", "a", "b"]);
        assert_eq!(
            d.levels,
            vec![
                vec![0, 2, 0, 0, 6, 0, 0],
                vec![0, 2, 0, 0, 6, 0, 1],
                vec![0, 2, 2, 0, 1, 1, 2, 0, 0, 0, 0, 5, 5, 3],
            ]
        );
        assert_eq!(
            (d.total, d.left_ticks, d.right_ticks, d.max_self),
            (8, 2, 6, 5)
        );
    }
}
