//! The nodes a flame graph draws, and Pyroscope's layouts of them.
//!
//! Which nodes are drawn (the `max_nodes` threshold) is decided elsewhere, per
//! node of a call tree ([`super::shape`]) or per chain of a merge's skeleton
//! ([`super::skeleton_shape`]); both hand over a [`Drawn`], and the layouts here
//! turn it into Pyroscope's `levels`, diff `levels` and serialized tree.

use rustc_hash::FxHashMap;

use super::flamegraph::{FlameGraph, FlameGraphDiff, OTHER};
use crate::codec::put_uvarint;

/// Frame names by id (equal ids, equal names).
pub(crate) trait Names {
    fn name_of_id(&self, id: u32) -> &str;
}

/// One drawn node: its values per column (1 for a flame graph, 2 for a diff).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct DrawnNode<const K: usize> {
    pub total: [i64; K],
    pub selfv: [i64; K],
    /// Frame-name id (unused for the root).
    pub name: u32,
    /// Drawn children, as indexes into [`Drawn::nodes`], sorted by name.
    pub children: Vec<u32>,
    /// The sum of the children below the threshold, drawn as one `other` child.
    pub other: Option<[i64; K]>,
}

impl<const K: usize> DrawnNode<K> {
    pub fn new(total: [i64; K], selfv: [i64; K], name: u32) -> Self {
        DrawnNode {
            total,
            selfv,
            name,
            children: Vec::new(),
            other: None,
        }
    }

    /// Adds a child below the threshold to this node's `other`.
    pub fn add_other(&mut self, total: [i64; K]) {
        let sum = self.other.get_or_insert([0; K]);
        for (s, t) in sum.iter_mut().zip(total) {
            *s += t;
        }
    }
}

/// The drawn nodes of a tree; node 0 is the root.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Drawn<const K: usize> {
    pub nodes: Vec<DrawnNode<K>>,
}

impl<const K: usize> Drawn<K> {
    /// Sorts every node's children by name (Pyroscope's order).
    pub fn sort_children(&mut self, names: &impl Names) {
        let Drawn { nodes } = self;
        let name_of = |nodes: &[DrawnNode<K>], i: u32| nodes[i as usize].name;
        for i in 0..nodes.len() {
            if nodes[i].children.len() > 1 {
                let mut c = std::mem::take(&mut nodes[i].children);
                c.sort_by(|&a, &b| {
                    names
                        .name_of_id(name_of(nodes, a))
                        .cmp(names.name_of_id(name_of(nodes, b)))
                });
                nodes[i].children = c;
            }
        }
    }

    /// Makes `max_nodes` (0 = no bound) a hard bound on the nodes answered, the
    /// root and every `other` node counted.
    ///
    /// The threshold rule (Pyroscope's: every node whose total is at least the
    /// `max_nodes`-th largest, each parent's other children folded into one
    /// `other`) answers more nodes than asked when totals tie and with the `other`
    /// nodes. Here the drawn nodes are then taken largest total first (ties:
    /// shallower first, then left to right) for as long as the answer, with the
    /// `other` nodes it then needs, stays within `max_nodes`; what a parent loses
    /// goes to its `other`, so every total stays as it was. The bound is at least
    /// 2: the root and one `other` holding everything below it. Call after
    /// [`Drawn::sort_children`].
    pub fn bound(&mut self, max_nodes: usize) {
        let max_nodes = if max_nodes == 0 { 0 } else { max_nodes.max(2) };
        let n = self.nodes.len();
        let has_other = |d: &DrawnNode<K>| d.other.is_some() || !d.children.is_empty();
        let full: usize = n + self.nodes.iter().filter(|d| d.other.is_some()).count();
        if max_nodes == 0 || n == 0 || full <= max_nodes {
            return;
        }
        // Breadth-first order (the layout's): the tie-break, parents before children.
        let mut order: Vec<u32> = Vec::with_capacity(n);
        let mut parent = vec![u32::MAX; n];
        order.push(0);
        let mut at = 0;
        while at < order.len() {
            let i = order[at] as usize;
            for &c in &self.nodes[i].children {
                parent[c as usize] = i as u32;
                order.push(c);
            }
            at += 1;
        }
        let rank: Vec<u32> = {
            let mut r = vec![0u32; n];
            for (k, &i) in order.iter().enumerate() {
                r[i as usize] = k as u32;
            }
            r
        };
        let weight = |d: &DrawnNode<K>| d.total.iter().sum::<i64>();
        order.sort_by(|&a, &b| {
            weight(&self.nodes[b as usize])
                .cmp(&weight(&self.nodes[a as usize]))
                .then(rank[a as usize].cmp(&rank[b as usize]))
        });
        let mut kept = vec![false; n];
        kept[0] = true;
        // Children of each kept node not kept yet.
        let mut missing: Vec<usize> = self.nodes.iter().map(|d| d.children.len()).collect();
        let mut count = 1 + usize::from(has_other(&self.nodes[0]));
        for &i in order.iter().filter(|&&i| i != 0) {
            let i = i as usize;
            let p = parent[i] as usize;
            if p == u32::MAX as usize || !kept[p] {
                continue;
            }
            let own_other = usize::from(has_other(&self.nodes[i]));
            let parent_other_gone = usize::from(missing[p] == 1 && self.nodes[p].other.is_none());
            let next = count + 1 + own_other - parent_other_gone;
            if next > max_nodes {
                break;
            }
            count = next;
            kept[i] = true;
            missing[p] -= 1;
        }
        // Renumber the kept nodes (parents stay before children) and fold the rest.
        let mut slot = vec![u32::MAX; n];
        let mut out: Vec<DrawnNode<K>> = Vec::with_capacity(count);
        for i in 0..n {
            if kept[i] {
                slot[i] = out.len() as u32;
                let d = &self.nodes[i];
                out.push(DrawnNode {
                    total: d.total,
                    selfv: d.selfv,
                    name: d.name,
                    children: Vec::new(),
                    other: d.other,
                });
            }
        }
        for i in 0..n {
            if !kept[i] {
                continue;
            }
            let me = slot[i] as usize;
            for &c in &self.nodes[i].children {
                match slot[c as usize] {
                    u32::MAX => out[me].add_other(self.nodes[c as usize].total),
                    s => out[me].children.push(s),
                }
            }
        }
        self.nodes = out;
    }

    fn root_totals(&self) -> [i64; K] {
        self.nodes.first().map_or([0; K], |r| r.total)
    }

    /// Pyroscope's levels: breadth first, children sorted by name after their
    /// parent's self, each parent's below-threshold children summed into one `other`.
    fn layout(&self, names: &impl Names) -> (Vec<String>, Vec<Vec<i64>>, i64) {
        let mut out_names: Vec<String> = vec!["total".to_string()];
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
        let mut current: Vec<(Item<K>, [i64; K])> = if self.nodes.is_empty() {
            Vec::new()
        } else {
            vec![(Item::Node(0), [0; K])]
        };
        while !current.is_empty() {
            let mut values: Vec<i64> = Vec::with_capacity(current.len() * (3 * K + 1));
            let mut prev_end = [0i64; K];
            let mut next: Vec<(Item<K>, [i64; K])> = Vec::new();
            for &(item, x) in &current {
                let (total, selfv, name) = match item {
                    Item::Node(n) => {
                        let node = &self.nodes[n as usize];
                        let name = if n == 0 {
                            0
                        } else {
                            *name_idx.entry(node.name).or_insert_with(|| {
                                out_names.push(names.name_of_id(node.name).to_string());
                                (out_names.len() - 1) as i64
                            })
                        };
                        (node.total, node.selfv, name)
                    }
                    Item::Other(v) => {
                        let name = *other_idx.get_or_insert_with(|| {
                            out_names.push(OTHER.to_string());
                            (out_names.len() - 1) as i64
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
                let node = &self.nodes[n as usize];
                let mut cx = [0i64; K];
                for k in 0..K {
                    cx[k] = x[k] + selfv[k];
                }
                for &c in &node.children {
                    next.push((Item::Node(c), cx));
                    for (x, t) in cx.iter_mut().zip(self.nodes[c as usize].total) {
                        *x += t;
                    }
                }
                if let Some(other) = node.other {
                    next.push((Item::Other(other), cx));
                }
            }
            levels.push(values);
            current = next;
        }
        (out_names, levels, max_self)
    }
}

impl Drawn<1> {
    /// Pyroscope's flame graph of the drawn nodes.
    pub fn flamegraph(&self, names: &impl Names) -> FlameGraph {
        let total = self.root_totals()[0];
        let (names, levels, max_self) = self.layout(names);
        FlameGraph {
            names,
            levels,
            total,
            max_self,
        }
    }

    /// Pyroscope's serialized tree (`querier.v1` `PROFILE_FORMAT_TREE`): nodes in
    /// depth-first pre-order from a virtual root named "", each as
    /// `uvarint(name length) name uvarint(self) uvarint(child count)`; children
    /// below the threshold are one `other` leaf.
    pub fn tree_bytes(&self, names: &impl Names) -> Vec<u8> {
        let mut out = Vec::new();
        if self.root_totals()[0] == 0 {
            return out;
        }
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
                    let node = &self.nodes[n as usize];
                    let other = node.other.map(|o| o[0]).filter(|&o| o > 0);
                    let count = node.children.len() + usize::from(other.is_some());
                    let (name, self_value) = if n == 0 {
                        // The virtual root: unnamed, and stacks never end on it.
                        ("", 0)
                    } else {
                        (names.name_of_id(node.name), node.selfv[0])
                    };
                    put(&mut out, name, self_value, count);
                    // Pushed in reverse, so children come out in name order.
                    if let Some(o) = other {
                        stack.push(Next::Other(o));
                    }
                    stack.extend(node.children.iter().rev().map(|&c| Next::Node(c)));
                }
            }
        }
        out
    }
}

impl Drawn<2> {
    /// Pyroscope's diff flame graph of the drawn nodes (left = base, right = compare).
    pub fn flamegraph_diff(&self, names: &impl Names) -> FlameGraphDiff {
        let [l, r] = self.root_totals();
        let (names, levels, max_self) = self.layout(names);
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
