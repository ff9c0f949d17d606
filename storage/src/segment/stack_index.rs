//! Stack nodes by function, and each node's subtree as a range of node ids.
//!
//! The segment writer numbers a stack tree depth first (`tree_order`), so the
//! stacks under a node are the ids `[node, end)`. "Stacks with a frame of function
//! f" is then the union of the subtrees of f's nodes: a few ranges, found through
//! a function → nodes list instead of a pass over every node per query. A group-by
//! with a function filter costs what the matching nodes cost, not the tree.
//!
//! Built on the first query that needs it, from the dictionary alone. A tree that
//! is not in depth-first order (a version-1 file) has no index; callers fall back
//! to walking ancestors.

use std::ops::Range;

use roaring::RoaringBitmap;

use crate::dict::{Dict, NO_PARENT};

/// Subtree ends and the nodes of each function, of one depth-first stack tree.
#[derive(Debug)]
pub struct StackIndex {
    /// `ends[n]`: one past the last node of `n`'s subtree.
    ends: Vec<u32>,
    /// Nodes of function `f`: `nodes[starts[f]..starts[f + 1]]`, ascending.
    starts: Vec<u32>,
    nodes: Vec<u32>,
}

impl StackIndex {
    /// Bytes one index takes per stack node and per function (the cache's weight is
    /// reserved for it before it is built).
    pub const BYTES_PER_NODE: usize = 8;
    pub const BYTES_PER_FUNCTION: usize = 4;

    /// The index of `dict`'s tree, or `None` when its nodes are not in depth-first
    /// order (some subtree is not one contiguous range of ids).
    pub fn build(dict: &Dict) -> Option<StackIndex> {
        let n = dict.node_count();
        let n32 = u32::try_from(n).ok()?;
        // One pass in id order with the path from the root to the previous node:
        // the tree is depth first iff every node's parent is on that path (a parent
        // that was left already would have its subtree in two pieces). Nodes popped
        // off the path end where the next node begins. Only `ends` is per node: a
        // first filtered query builds this for every segment it reads, and each
        // fresh page it touches costs as much as the work.
        let mut ends = vec![n32; n];
        let mut path: Vec<u32> = Vec::new();
        for (i, &p) in dict.parents.iter().enumerate() {
            let i = i as u32;
            let keep = if p == NO_PARENT {
                0
            } else {
                path.iter().rposition(|&a| a == p)? + 1
            };
            for &closed in &path[keep..] {
                ends[closed as usize] = i;
            }
            path.truncate(keep);
            path.push(i);
        }

        let function_of = |node: usize| -> Option<usize> {
            let loc = *dict.node_locations.get(node)?;
            let f = dict.locations.get(loc as usize)?.function?;
            Some(f as usize)
        };
        let functions = dict.functions.len();
        let mut starts = vec![0u32; functions + 1];
        for f in (0..n).filter_map(function_of) {
            if let Some(s) = starts.get_mut(f + 1) {
                *s += 1;
            }
        }
        for f in 0..functions {
            starts[f + 1] += starts[f];
        }
        let mut fill = starts.clone();
        let mut nodes = vec![0u32; starts[functions] as usize];
        for node in 0..n {
            if let Some(slot) = function_of(node).and_then(|f| fill.get_mut(f)) {
                nodes[*slot as usize] = node as u32;
                *slot += 1;
            }
        }
        Some(StackIndex {
            ends,
            starts,
            nodes,
        })
    }

    /// Stack nodes in the tree.
    pub fn node_count(&self) -> u32 {
        self.ends.len() as u32
    }

    /// The nodes with a frame of one of `functions` on their path from the root:
    /// sorted, disjoint ranges of node ids.
    pub fn under(&self, functions: &RoaringBitmap) -> Vec<Range<u32>> {
        let mut roots: Vec<u32> = Vec::new();
        for f in functions.iter() {
            let f = f as usize;
            if let (Some(&a), Some(&b)) = (self.starts.get(f), self.starts.get(f + 1)) {
                roots.extend_from_slice(self.nodes.get(a as usize..b as usize).unwrap_or(&[]));
            }
        }
        roots.sort_unstable();
        // Subtrees nest or are disjoint: a root inside the previous range is covered.
        let mut out: Vec<Range<u32>> = Vec::new();
        for r in roots {
            if out.last().is_some_and(|last| r < last.end) {
                continue;
            }
            if let Some(&end) = self.ends.get(r as usize) {
                out.push(r..end);
            }
        }
        out
    }
}

/// Sorted, disjoint ranges of `a` that are not in `b` (both sorted and disjoint).
pub fn subtract(a: &[Range<u32>], b: &[Range<u32>]) -> Vec<Range<u32>> {
    let mut out = Vec::new();
    let mut j = 0;
    for r in a {
        let mut start = r.start;
        while j < b.len() && b[j].end <= start {
            j += 1;
        }
        let mut k = j;
        while start < r.end {
            match b.get(k) {
                Some(x) if x.start < r.end => {
                    if x.start > start {
                        out.push(start..x.start);
                    }
                    start = start.max(x.end);
                    k += 1;
                }
                _ => {
                    out.push(start..r.end);
                    break;
                }
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dict::{DictBuilder, LocationRec};
    use proptest::prelude::*;

    /// A dict whose stacks are the given function-name paths, renumbered depth
    /// first as the segment writer does.
    fn depth_first(stacks: &[Vec<u8>]) -> Dict {
        let mut b = DictBuilder::new();
        for names in stacks {
            b.letter_stack(names, 0);
        }
        crate::segment::depth_first_for_tests(&b.finish())
    }

    /// Nodes whose path from the root has a frame of `functions`, by climbing.
    fn by_climbing(dict: &Dict, functions: &RoaringBitmap) -> Vec<u32> {
        (0..dict.node_count() as u32)
            .filter(|&leaf| {
                dict.stack(leaf).iter().any(|&loc| {
                    dict.locations[loc as usize]
                        .function
                        .is_some_and(|f| functions.contains(f))
                })
            })
            .collect()
    }

    fn flatten(ranges: &[Range<u32>]) -> Vec<u32> {
        ranges.iter().flat_map(|r| r.clone()).collect()
    }

    #[test]
    fn not_depth_first_has_no_index() {
        // Node 2 is a child of 0, but node 1 (a child of 0 too) has child 3 after it:
        // 1's subtree {1, 3} is not contiguous.
        let d = Dict {
            strings: vec![String::new()],
            mappings: vec![],
            functions: vec![],
            locations: vec![LocationRec {
                function: None,
                mapping: None,
                address: 0,
                line: 0,
            }],
            parents: vec![NO_PARENT, 0, 0, 1],
            node_locations: vec![0; 4],
        };
        assert!(StackIndex::build(&d).is_none());
        let ok = Dict {
            parents: vec![NO_PARENT, 0, 1, 0],
            ..d
        };
        let idx = StackIndex::build(&ok).unwrap();
        assert_eq!(idx.ends, vec![4, 3, 3, 4]);
    }

    #[test]
    #[allow(clippy::single_range_in_vec_init)]
    fn subtract_by_hand() {
        assert_eq!(subtract(&[0..10], &[2..3, 5..7]), vec![0..2, 3..5, 7..10]);
        assert_eq!(subtract(&[0..4, 6..9], &[3..7]), vec![0..3, 7..9]);
        assert_eq!(subtract(&[1..2], &[]), vec![1..2]);
        assert_eq!(subtract(&[1..5], &[0..9]), Vec::<Range<u32>>::new());
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(128))]

        /// The ranges hold exactly the nodes some frame of which has one of the
        /// functions, and they are sorted and disjoint.
        #[test]
        fn under_equals_climbing(
            stacks in prop::collection::vec(prop::collection::vec(0u8..6, 1..7), 1..30),
            fs in prop::collection::btree_set(0u32..6, 0..3),
        ) {
            let dict = depth_first(&stacks);
            let idx = StackIndex::build(&dict).expect("the writer's order is depth first");
            let functions: RoaringBitmap = fs.into_iter().collect();
            let ranges = idx.under(&functions);
            prop_assert!(ranges.windows(2).all(|w| w[0].end <= w[1].start));
            prop_assert_eq!(flatten(&ranges), by_climbing(&dict, &functions));
        }

        #[test]
        fn subtract_is_set_difference(
            a in prop::collection::btree_set(0u32..40, 0..30),
            b in prop::collection::btree_set(0u32..40, 0..30),
        ) {
            let ranges = |s: &std::collections::BTreeSet<u32>| -> Vec<Range<u32>> {
                let mut out: Vec<Range<u32>> = Vec::new();
                for &x in s {
                    match out.last_mut() {
                        Some(r) if r.end == x => r.end += 1,
                        _ => out.push(x..x + 1),
                    }
                }
                out
            };
            let want: Vec<u32> = a.difference(&b).copied().collect();
            prop_assert_eq!(flatten(&subtract(&ranges(&a), &ranges(&b))), want);
        }
    }
}
