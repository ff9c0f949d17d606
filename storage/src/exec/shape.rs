//! Which nodes of a tree a flame graph draws, decided node by node: every node's
//! total is computed and the `max_nodes`-th largest is the threshold. Used for call
//! trees; a merge in frame-tree space decides per chain instead
//! ([`super::skeleton_shape`]), which gives the same [`Drawn`].

use std::collections::BinaryHeap;

use super::drawn::{Drawn, DrawnNode, Names};
use super::tree::CallTree;

/// What the selection needs of a tree: nodes `0..len` with the root at 0 and every
/// parent before its children, and frame names by id.
pub(crate) trait Nodes: Names {
    fn len(&self) -> usize;
    fn parent(&self, node: usize) -> usize;
    /// Equal ids mean equal names.
    fn name_id(&self, node: usize) -> u32;
}

impl Names for CallTree {
    fn name_of_id(&self, id: u32) -> &str {
        self.name(id)
    }
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
}

/// A tree with `K` value columns per node (1 for a flame graph, 2 for a diff).
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

    /// What decides whether a node is drawn: its total over all columns.
    fn weight(&self, node: usize) -> i64 {
        self.totals[node].iter().sum()
    }

    /// The smallest weight drawn: the `max_nodes`-th largest (0 = draw everything).
    /// Nodes of weight zero are never drawn and do not count.
    fn min_value(&self, max_nodes: usize) -> i64 {
        if max_nodes == 0 || self.totals.len() <= max_nodes {
            return 0;
        }
        let mut heap: BinaryHeap<std::cmp::Reverse<i64>> = BinaryHeap::with_capacity(max_nodes);
        for i in 0..self.totals.len() {
            let w = self.weight(i);
            if w == 0 {
                continue;
            }
            if heap.len() < max_nodes {
                heap.push(std::cmp::Reverse(w));
            } else if heap.peek().is_some_and(|m| w > m.0) {
                heap.pop();
                heap.push(std::cmp::Reverse(w));
            }
        }
        if heap.len() < max_nodes {
            return 0;
        }
        heap.peek().map_or(0, |m| m.0)
    }

    /// The nodes drawn under `max_nodes`: each drawn node's drawn children sorted by
    /// name, and the sum of its children below the threshold (its `other`). Only
    /// drawn nodes get child lists, so the cost beyond one pass over the tree is in
    /// the order of `max_nodes`.
    pub(crate) fn drawn(&self, max_nodes: usize) -> Drawn<K> {
        let min_value = self.min_value(max_nodes);
        let n = self.totals.len().min(self.tree.len());
        let mut d = Drawn { nodes: Vec::new() };
        if n == 0 {
            return d;
        }
        // `slot[node]` is the node's index in `d.nodes` (u32::MAX: not drawn). A
        // drawn node's parent is drawn too: its weight is at least the child's.
        let mut slot = vec![u32::MAX; n];
        slot[0] = 0;
        d.nodes
            .push(DrawnNode::new(self.totals[0], self.selfs[0], 0));
        for i in 1..n {
            let w = self.weight(i);
            if w == 0 {
                continue;
            }
            let Some(&ps) = slot.get(self.tree.parent(i)) else {
                continue;
            };
            if ps == u32::MAX {
                continue;
            }
            if w >= min_value {
                slot[i] = d.nodes.len() as u32;
                d.nodes[ps as usize].children.push(slot[i]);
                let name = self.tree.name_id(i);
                d.nodes
                    .push(DrawnNode::new(self.totals[i], self.selfs[i], name));
            } else {
                d.nodes[ps as usize].add_other(self.totals[i]);
            }
        }
        d.sort_children(self.tree);
        d.bound(max_nodes);
        d
    }
}
