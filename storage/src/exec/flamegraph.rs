//! Pyroscope's flame graph layout (`querier.v1.FlameGraph` / `FlameGraphDiff`).
//!
//! `names[0]` is `"total"`. `levels[d]` lists the nodes at depth `d` ordered by x, each
//! as `[x_delta, total, self, name]` (or, for a diff, `[xL, totalL, selfL, xR, totalR,
//! selfR, name]`), where `x_delta` is the distance from the end of the previous node of
//! the same level. A node's children start at `x + self` — self time is drawn on the
//! left — and are sorted by name. Nodes below the `max_nodes` threshold are folded
//! into one `other` child per parent, appended after the sorted children, exactly as
//! Pyroscope lays them out; the golden fixture test checks this.

use super::shape::Shape;
use super::tree::{CallTree, ROOT};
use crate::codec::Reader;

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

/// Pyroscope's serialized tree of a call tree (see [`Drawn::tree_bytes`]),
/// truncated like the flame graph.
pub fn tree_bytes(tree: &CallTree, max_nodes: usize) -> Vec<u8> {
    let selfs: Vec<[i64; 1]> = tree.nodes().iter().map(|n| [n.self_value]).collect();
    Shape::new(tree, selfs).drawn(max_nodes).tree_bytes(tree)
}

/// The flame graph of `tree`, truncated to at most `max_nodes` nodes (0 = all).
pub fn flamegraph(tree: &CallTree, max_nodes: usize) -> FlameGraph {
    let selfs: Vec<[i64; 1]> = tree.nodes().iter().map(|n| [n.self_value]).collect();
    Shape::new(tree, selfs).drawn(max_nodes).flamegraph(tree)
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
    Shape::new(&u, selfs).drawn(max_nodes).flamegraph_diff(&u)
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
        // Truncated to 4 nodes (the virtual root, idle, main, other): `a` (2) and
        // `b` (3) make main's `other`.
        let t = tree_from_bytes(&tree_bytes(&sample(), 4))
            .expect("well-formed")
            .folded();
        assert_eq!(t.get("main;other"), Some(&5));
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
        // Totals: total 10, main 6, idle 4, b 3, a 2. Pyroscope's threshold for 4
        // nodes is 3, so `a` (2) becomes `other` after b, which answers 5 nodes
        // (with the `other`); the bound keeps 4: b joins `a` in main's `other`.
        let fg = flamegraph(&sample(), 4);
        assert_eq!(fg.names, vec!["total", "idle", "main", "other"]);
        assert_eq!(fg.levels[2], vec![5, 5, 5, 3]);
        // Two nodes at least: the root and one `other` under it.
        let fg = flamegraph(&sample(), 1);
        assert_eq!(fg.names, vec!["total", "other"]);
        assert_eq!(fg.levels, vec![vec![0, 10, 0, 0], vec![0, 10, 10, 1]]);
    }

    proptest::proptest! {
        /// `max_nodes` is a hard bound on the nodes answered, `other` nodes
        /// counted, and truncation never changes a total.
        #[test]
        fn max_nodes_bounds_the_answer(
            stacks in proptest::collection::vec(
                (proptest::collection::vec(0u8..4, 1..6), 1i64..5), 1..40),
            max_nodes in 1usize..40,
        ) {
            let mut t = CallTree::new();
            for (frames, v) in &stacks {
                let names: Vec<String> = frames.iter().map(|f| format!("f{f}")).collect();
                t.add_stack(&names, *v);
            }
            t.finalize();
            let full = flamegraph(&t, 0);
            let count = |fg: &FlameGraph| fg.levels.iter().map(|l| l.len() / 4).sum::<usize>();
            let fg = flamegraph(&t, max_nodes);
            proptest::prop_assert!(count(&fg) <= max_nodes.max(2), "{} > {max_nodes}", count(&fg));
            proptest::prop_assert_eq!(fg.total, full.total);
            if count(&full) <= max_nodes {
                proptest::prop_assert_eq!(&fg, &full);
            }
            // Every drawn node's children (and `other`) sum to its total less its self.
            let back = tree_from_levels(&fg.names, &fg.levels).expect("valid levels");
            proptest::prop_assert_eq!(back.total(), full.total);
            let bytes = tree_from_bytes(&tree_bytes(&t, max_nodes)).expect("well-formed");
            proptest::prop_assert_eq!(bytes.total(), full.total);
            proptest::prop_assert!(bytes.nodes().len() <= max_nodes.max(2));
        }
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
