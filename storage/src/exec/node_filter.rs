//! Function filters on stack nodes: which stacks of one source have a frame whose
//! function matches the include regex, and none matching the exclude one.
//!
//! Two strategies, one answer:
//! - **Ranges.** A segment's tree is numbered depth first, so the stacks under a
//!   matching frame are a range of node ids ([`StackIndex`]). The filter is a few
//!   ranges found from the matching functions' nodes, then a bit per node that
//!   rows are tested against before they are summed. A filter costs what the
//!   matching functions cost, plus a bit per node.
//! - **Flags.** Other trees (the head, version-1 files) get a flag per node:
//!   memoised climbs for the first nodes, then one forward pass over the tree.

use std::ops::Range;

use regex::Regex;
use roaring::RoaringBitmap;

use super::scratch::{Memo, Scratch};
use super::{node_values, node_values_where, Source};
use crate::dict::Dict;
use crate::error::Result;
use crate::segment::{subtract_ranges, StackIndex};

/// Bit set in a filter memo entry when some frame on the path root..=node matches
/// the include set.
const HAS_INCLUDED: u32 = 1;
/// Likewise for the exclude set.
const HAS_EXCLUDED: u32 = 2;

/// Past one looked-up node for this many nodes of the dictionary, one forward pass
/// over the whole stack tree costs less than climbing from each node: the climb's
/// memo and parent lookups land at random in arrays of the tree's size (cache
/// misses), the pass reads them in order into a byte per node.
const DENSE_AFTER: usize = 128;

/// The function filters of one source.
pub(super) enum NodeFilter {
    /// No function filter: every node passes.
    All,
    /// No stack of the source passes (an include set that matches nothing there).
    Nothing,
    /// The nodes that pass, a bit each (from ranges of a depth-first tree).
    Ranges(NodeBits),
    Flags(Flags),
}

impl NodeFilter {
    /// The filter of `src` for the optional include and exclude regexes; `resolve`
    /// maps a regex to the matching function ids of `src`'s dictionary.
    pub(super) fn new(
        src: &dyn Source,
        include: Option<&Regex>,
        exclude: Option<&Regex>,
        resolve: &dyn Fn(&dyn Source, &Regex) -> Result<RoaringBitmap>,
    ) -> Result<NodeFilter> {
        if include.is_none() && exclude.is_none() {
            return Ok(NodeFilter::All);
        }
        let (inc, exc) = (
            include.map(|re| resolve(src, re)).transpose()?,
            exclude.map(|re| resolve(src, re)).transpose()?,
        );
        if let Some(index) = src.stack_index() {
            let ranges = ranges(index, inc.as_ref(), exc.as_ref());
            return Ok(NodeFilter::of_ranges(&ranges, index.node_count()));
        }
        Ok(NodeFilter::Flags(Flags::new(
            src.dict()?,
            inc.as_ref(),
            exc.as_ref(),
        )))
    }

    fn of_ranges(ranges: &[Range<u32>], nodes: u32) -> NodeFilter {
        if ranges.is_empty() {
            NodeFilter::Nothing
        } else {
            NodeFilter::Ranges(NodeBits::of(ranges, nodes))
        }
    }

    /// Whether no stack can pass: the source's rows need not be read at all.
    pub(super) fn passes_nothing(&self) -> bool {
        matches!(self, NodeFilter::Nothing)
    }

    /// Sums the rows of `series` in steps `[lo, hi)` whose stack passes, per stack
    /// node, into `scratch.pairs` (what [`node_values`] gives, filtered). With
    /// ranges, rows are tested against a bit per node before they are summed, so
    /// a selective filter sums and sorts only what it keeps.
    pub(super) fn node_values(
        &mut self,
        src: &dyn Source,
        series: &RoaringBitmap,
        lo: u32,
        hi: u32,
        scratch: &mut Scratch,
    ) -> Result<()> {
        match self {
            NodeFilter::All => node_values(src, series, lo, hi, scratch),
            NodeFilter::Nothing => {
                scratch.pairs.clear();
                Ok(())
            }
            NodeFilter::Ranges(bits) => {
                node_values_where(src, series, lo, hi, scratch, |n| bits.contains(n))
            }
            NodeFilter::Flags(_) => {
                node_values(src, series, lo, hi, scratch)?;
                self.retain_pairs(src, scratch)
            }
        }
    }

    /// Tells the filter that [`NodeFilter::retain_pairs`] is about to be asked
    /// about `lookups` stack nodes of `src` in all, so that it chooses between
    /// climbing from each node and one pass over the tree on the whole count, not
    /// on the first call's share of it (the first groups of a cold group-by then
    /// climbed from thousands of nodes each, into a memo of 4 bytes a tree node).
    pub(super) fn expect_lookups(&mut self, src: &dyn Source, lookups: usize) -> Result<()> {
        if let NodeFilter::Flags(flags) = self {
            flags.observe(src.dict()?, lookups);
        }
        Ok(())
    }

    /// Keeps the `(node, value)` pairs in `scratch.pairs` whose stack passes: the
    /// filter applied to sums computed without it (a cached unfiltered share, see
    /// `GroupNodes`), which costs a test per distinct stack instead of one per row.
    pub(super) fn retain_pairs(&mut self, src: &dyn Source, scratch: &mut Scratch) -> Result<()> {
        match self {
            NodeFilter::All => {}
            NodeFilter::Nothing => scratch.pairs.clear(),
            NodeFilter::Ranges(bits) => scratch.pairs.retain(|&(n, _)| bits.contains(n)),
            NodeFilter::Flags(flags) => {
                let dict = src.dict()?;
                flags.observe(dict, scratch.pairs.len());
                let (memo, path) = (&mut scratch.keep, &mut scratch.path);
                memo.prepare(dict.node_count());
                scratch
                    .pairs
                    .retain(|&(node, _)| flags.keeps(dict, node, memo, path));
            }
        }
        Ok(())
    }
}

/// One bit per stack node: the nodes a [`NodeFilter::Ranges`] keeps.
pub(super) struct NodeBits(Vec<u64>);

impl NodeBits {
    fn of(ranges: &[Range<u32>], nodes: u32) -> NodeBits {
        let mut words = vec![0u64; (nodes as usize).div_ceil(64)];
        for r in ranges {
            let (mut a, b) = (r.start as usize, (r.end.min(nodes)) as usize);
            // A word at a time: the part of [a, b) in word a / 64.
            while a < b {
                let (w, lo) = (a / 64, a % 64);
                let hi = (b - w * 64).min(64);
                let mask = if hi - lo == 64 {
                    u64::MAX
                } else {
                    ((1u64 << (hi - lo)) - 1) << lo
                };
                if let Some(word) = words.get_mut(w) {
                    *word |= mask;
                }
                a = w * 64 + hi;
            }
        }
        NodeBits(words)
    }

    #[inline]
    fn contains(&self, node: u32) -> bool {
        self.0
            .get(node as usize / 64)
            .is_some_and(|w| w & (1 << (node % 64)) != 0)
    }
}

/// The nodes under an included function and under no excluded one.
fn ranges(
    index: &StackIndex,
    include: Option<&RoaringBitmap>,
    exclude: Option<&RoaringBitmap>,
) -> Vec<Range<u32>> {
    let kept = match include {
        Some(f) => index.under(f),
        None => std::iter::once(0..index.node_count()).collect(),
    };
    match exclude {
        Some(f) if !kept.is_empty() => subtract_ranges(&kept, &index.under(f)),
        _ => kept,
    }
}

/// A filter by flags per node (trees not in depth-first order).
pub(super) struct Flags {
    /// `HAS_INCLUDED` / `HAS_EXCLUDED` per function id of the source's dictionary
    /// (a flat array: the climb checks every ancestor of every stack it sees).
    functions: Vec<u8>,
    include: bool,
    /// The flags of every stack node, once the query has seen enough of them (see
    /// [`Flags::observe`]); empty until then.
    dense: Vec<u8>,
    /// Stack nodes looked up so far in this source.
    seen: usize,
}

impl Flags {
    fn new(dict: &Dict, include: Option<&RoaringBitmap>, exclude: Option<&RoaringBitmap>) -> Flags {
        let mut functions = vec![0u8; dict.functions.len()];
        for (set, flag) in [(include, HAS_INCLUDED), (exclude, HAS_EXCLUDED)] {
            for id in set.into_iter().flat_map(|s| s.iter()) {
                if let Some(slot) = functions.get_mut(id as usize) {
                    *slot |= flag as u8;
                }
            }
        }
        Flags {
            functions,
            include: include.is_some(),
            dense: Vec::new(),
            seen: 0,
        }
    }

    /// Counts `nodes` more lookups to come; once they pass 1/[`DENSE_AFTER`] of the
    /// stack tree, computes every node's flags in one pass (parents come before
    /// their children, so each node ORs its own function's flags into its parent's).
    fn observe(&mut self, dict: &Dict, nodes: usize) {
        if !self.dense.is_empty() {
            return;
        }
        self.seen = self.seen.saturating_add(nodes);
        let n = dict.node_count();
        if self.seen.saturating_mul(DENSE_AFTER) < n {
            return;
        }
        let own: Vec<u8> = dict
            .locations
            .iter()
            .map(|l| {
                l.function
                    .and_then(|f| self.functions.get(f as usize))
                    .copied()
                    .unwrap_or(0)
            })
            .collect();
        let mut dense: Vec<u8> = Vec::with_capacity(n);
        for (&loc, &p) in dict.node_locations.iter().zip(&dict.parents) {
            let mine = own.get(loc as usize).copied().unwrap_or(0);
            // A parent id is below its child's (checked on decode), so it is set.
            let inherited = dense.get(p as usize).copied().unwrap_or(0);
            dense.push(mine | inherited);
        }
        dense.resize(n, 0);
        self.dense = dense;
    }

    /// Whether samples of stack node `node` pass. Before the dense pass, visits only
    /// `node`'s ancestors not yet memoised in `memo`, so a query pays for the stacks
    /// it touches.
    fn keeps(&self, dict: &Dict, node: u32, memo: &mut Memo, path: &mut Vec<u32>) -> bool {
        let flags = match self.dense.get(node as usize) {
            Some(&f) => u32::from(f),
            None => self.flags(dict, node, memo, path),
        };
        (!self.include || flags & HAS_INCLUDED != 0) && flags & HAS_EXCLUDED == 0
    }

    fn flags(&self, dict: &Dict, node: u32, memo: &mut Memo, path: &mut Vec<u32>) -> u32 {
        let mut flags = dict.climb_until(node, path, |n| memo.get(n)).unwrap_or(0);
        for &n in path.iter().rev() {
            let f = dict
                .node_locations
                .get(n as usize)
                .and_then(|&l| dict.locations.get(l as usize))
                .and_then(|l| l.function);
            if let Some(&bits) = f.and_then(|f| self.functions.get(f as usize)) {
                flags |= u32::from(bits);
            }
            memo.set(n, flags);
        }
        flags
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dict::{DictBuilder, LocationRec};
    use proptest::prelude::*;

    /// A dict of the given stacks over functions `f0..f11`, and the same tree
    /// renumbered depth first (what the segment writer stores).
    fn dicts(stacks: &[Vec<u32>]) -> (Dict, Dict) {
        let mut b = DictBuilder::new();
        let locs: Vec<u32> = (0..12)
            .map(|i| {
                let f = b.function(&format!("f{i}"), "file.c");
                b.location(LocationRec {
                    function: Some(f),
                    mapping: None,
                    address: 0,
                    line: 0,
                })
            })
            .collect();
        for s in stacks {
            let path: Vec<u32> = s.iter().map(|&i| locs[i as usize]).collect();
            b.stack(&path);
        }
        let dict = b.finish();
        let ordered = crate::segment::depth_first_for_tests(&dict);
        (dict, ordered)
    }

    fn set(flags: &[bool]) -> RoaringBitmap {
        (0..flags.len() as u32)
            .filter(|&i| flags[i as usize])
            .collect()
    }

    proptest! {
        /// The dense pass gives every node the flags the memoised climb gives it.
        #[test]
        fn dense_flags_equal_the_climb(
            stacks in prop::collection::vec(prop::collection::vec(0u32..12, 1..8), 1..40),
            included in prop::collection::vec(any::<bool>(), 12),
            excluded in prop::collection::vec(any::<bool>(), 12),
        ) {
            let (dict, _) = dicts(&stacks);
            let (inc, exc) = (set(&included), set(&excluded));
            let filter = || Flags::new(&dict, Some(&inc), Some(&exc));
            let (mut dense, mut climbing) = (filter(), filter());
            dense.observe(&dict, dict.node_count());
            prop_assert_eq!(dense.dense.len(), dict.node_count());
            climbing.observe(&dict, 0);
            prop_assert!(climbing.dense.is_empty());
            let (mut memo, mut path) = (Memo::default(), Vec::new());
            memo.prepare(dict.node_count());
            for node in 0..dict.node_count() as u32 {
                prop_assert_eq!(
                    u32::from(dense.dense[node as usize]),
                    climbing.flags(&dict, node, &mut memo, &mut path),
                    "node {}", node
                );
                prop_assert_eq!(
                    dense.keeps(&dict, node, &mut memo, &mut path),
                    climbing.keeps(&dict, node, &mut memo, &mut path)
                );
            }
        }

        /// On a depth-first tree the ranges (and their bits) keep exactly the nodes
        /// the flags keep, for include only, exclude only and both.
        #[test]
        fn ranges_keep_what_flags_keep(
            stacks in prop::collection::vec(prop::collection::vec(0u32..12, 1..8), 1..40),
            included in prop::collection::vec(any::<bool>(), 12),
            excluded in prop::collection::vec(any::<bool>(), 12),
            which in 0u8..3,
        ) {
            let (_, dict) = dicts(&stacks);
            let index = StackIndex::build(&dict).expect("depth first");
            let (inc, exc) = (set(&included), set(&excluded));
            let inc = (which != 1).then_some(&inc);
            let exc = (which != 0).then_some(&exc);
            let ranges = ranges(&index, inc, exc);
            prop_assert!(ranges.windows(2).all(|w| w[0].end <= w[1].start));
            let bits = NodeBits::of(&ranges, index.node_count());
            let flags = Flags::new(&dict, inc, exc);
            let (mut memo, mut path) = (Memo::default(), Vec::new());
            memo.prepare(dict.node_count());
            let mut kept = 0;
            for node in 0..dict.node_count() as u32 {
                let want = flags.keeps(&dict, node, &mut memo, &mut path);
                let in_ranges = ranges.iter().any(|r| r.contains(&node));
                prop_assert_eq!(in_ranges, want, "node {}", node);
                prop_assert_eq!(bits.contains(node), want, "node {}", node);
                kept += usize::from(want);
            }
            let filter = NodeFilter::of_ranges(&ranges, index.node_count());
            prop_assert_eq!(filter.passes_nothing(), kept == 0);
        }

        /// Bits of arbitrary ranges, across word boundaries.
        #[test]
        fn bits_of_ranges(cuts in prop::collection::btree_set(0u32..300, 0..12)) {
            let cuts: Vec<u32> = cuts.into_iter().collect();
            let ranges: Vec<Range<u32>> = cuts.chunks(2).filter(|c| c.len() == 2).map(|c| c[0]..c[1]).collect();
            let bits = NodeBits::of(&ranges, 300);
            for n in 0..320 {
                prop_assert_eq!(bits.contains(n), ranges.iter().any(|r| r.contains(&n)), "node {}", n);
            }
        }
    }
}
