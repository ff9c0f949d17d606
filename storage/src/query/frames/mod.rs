//! The frame tree shared by every source of a store: one node per distinct path of
//! frame *names* from the root, with a global id (`gid`).
//!
//! Each segment's stack tree is keyed by location (function, line, address), so two
//! segments, or two lines of one function, give different nodes for what a flame
//! graph shows as one frame. Merging used to rebuild the name-level tree from every
//! segment's location-level nodes on every query (tens of thousands of hash lookups
//! per segment). Instead, each loaded segment remembers, per stack node, its gid in
//! this shared tree, filled in the first time a query touches the node. A merge then
//! costs one array lookup per distinct stack of the selected rows, sums values per
//! gid, and builds its call tree once at the end.
//!
//! The tree only grows; once it passes [`Frames::max_nodes`] a query starts a fresh
//! one (a new generation). Queries in flight keep the tree they started with, and
//! segment memos of an older generation are rebuilt on their next use.

use std::borrow::Cow;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use parking_lot::{Mutex, RwLock};
use profiledb_symbolize::Symbolizer;

use super::child_map::ChildMap;
use super::drawn::Names;
use super::interner::Interner;
use crate::dict::Dict;
pub use crate::segment::{GidMemo, GidSlots};

mod resolve;
mod symbolic;
#[cfg(test)]
pub(crate) use resolve::add_pairs;
pub use resolve::{resolve_segment, NodeMemo};
pub use symbolic::location_frames;

/// Display name of a frame: the function name, or for unsymbolized frames the
/// binary and file offset, so they stay distinguishable and can be symbolized
/// later; with `symbols`, the innermost function the debug file names there.
pub fn frame_name<'a>(dict: &'a Dict, loc: u32, symbols: Option<&Symbolizer>) -> Cow<'a, str> {
    location_frames(dict, loc, symbols)
        .pop()
        .map_or("[unknown]".into(), |f| f.name)
}

/// Marks a frame key ([`FrameTree::name_of_node`]) that is a chain of inlined
/// frames (an index into `FrameTree::chains`) rather than one name id.
const CHAIN: u32 = 1 << 31;

/// The root's gid.
pub const ROOT_GID: u32 = 0;

/// Name-level frame tree. gid 0 is the root; a node's parent always has a smaller gid.
pub struct FrameTree {
    generation: u64,
    parents: Vec<u32>,
    names: Vec<u32>,
    children: ChildMap,
    name_strs: Interner,
    /// Names frames kept as addresses; the tree is replaced when its generation moves.
    symbols: Option<Arc<Symbolizer>>,
    symbols_generation: u64,
    /// Name ids of the frames one address stands for when calls were inlined
    /// there, outermost first (see [`CHAIN`]).
    chains: Vec<Box<[u32]>>,
}

impl FrameTree {
    fn new(generation: u64) -> Self {
        Self::with_symbols(generation, None)
    }

    fn with_symbols(generation: u64, symbols: Option<Arc<Symbolizer>>) -> Self {
        FrameTree {
            generation,
            symbols_generation: symbols.as_ref().map_or(0, |s| s.generation()),
            symbols,
            chains: Vec::new(),
            parents: vec![ROOT_GID],
            names: vec![0],
            children: ChildMap::default(),
            // The root's name is 0, as `CallTree::new` interns it.
            name_strs: {
                let mut n = Interner::default();
                n.intern("total");
                n
            },
        }
    }

    pub fn generation(&self) -> u64 {
        self.generation
    }

    pub fn len(&self) -> usize {
        self.parents.len()
    }

    pub fn is_empty(&self) -> bool {
        self.parents.len() <= 1
    }

    /// Parent gid (the root is its own parent).
    pub fn parent(&self, gid: u32) -> u32 {
        self.parents.get(gid as usize).copied().unwrap_or(ROOT_GID)
    }

    /// Walks from `gid` towards the root until `known` gives a value, and returns
    /// it (`None` when even the root is unknown). `path` receives the ids passed,
    /// leaf first. Parents have smaller ids, so the walk ends.
    pub fn climb_until<T>(
        &self,
        gid: u32,
        path: &mut Vec<u32>,
        mut known: impl FnMut(u32) -> Option<T>,
    ) -> Option<T> {
        path.clear();
        let mut g = gid;
        loop {
            if let Some(v) = known(g) {
                return Some(v);
            }
            if g == ROOT_GID {
                return None;
            }
            path.push(g);
            let p = self.parent(g);
            g = if p < g { p } else { ROOT_GID };
        }
    }

    pub fn name_of(&self, gid: u32) -> u32 {
        self.names.get(gid as usize).copied().unwrap_or(0)
    }

    pub fn name(&self, name: u32) -> &str {
        self.name_strs.get(name)
    }

    /// The id of name `s`, if some frame has it.
    pub fn name_id(&self, s: &str) -> Option<u32> {
        self.name_strs.id(s)
    }

    /// Approximate heap bytes: the node columns, the child map (key, value and
    /// control byte per slot) and the interned names.
    pub fn approx_bytes(&self) -> usize {
        (self.parents.capacity() + self.names.capacity()) * 4
            + self.children.bytes()
            + self.name_strs.approx_bytes()
    }

    fn child(&mut self, parent: u32, name: u32) -> u32 {
        let next = self.parents.len() as u32;
        let (gid, inserted) = self.children.get_or_insert(parent, name, next);
        if inserted {
            self.parents.push(parent);
            self.names.push(name);
        }
        gid
    }

    /// The frame below `parent` for frame key `key`: one child, or a chain of
    /// them for an address whose calls were inlined. Created when missing.
    fn child_frame(&mut self, parent: u32, key: u32) -> u32 {
        if key & CHAIN == 0 {
            return self.child(parent, key);
        }
        let chain = self.chains[(key & !CHAIN) as usize].clone();
        chain.iter().fold(parent, |p, &name| self.child(p, name))
    }

    /// The frame below `parent` for frame key `key`, if it exists.
    fn get_frame(&self, parent: u32, key: u32) -> Option<u32> {
        if key & CHAIN == 0 {
            return self.children.get(parent, key);
        }
        let chain = self.chains.get((key & !CHAIN) as usize)?;
        chain
            .iter()
            .try_fold(parent, |p, &name| self.children.get(p, name))
    }

    /// The name id a frame key ends on: its innermost frame's.
    fn innermost(&self, key: u32) -> u32 {
        if key & CHAIN == 0 {
            return key;
        }
        self.chains
            .get((key & !CHAIN) as usize)
            .and_then(|c| c.last().copied())
            .unwrap_or(0)
    }

    /// The symbolizer this tree names frames with.
    pub fn symbols(&self) -> Option<&Symbolizer> {
        self.symbols.as_deref()
    }

    /// The child of `parent` named `name`, created when missing (tests build
    /// trees by name with it, and a querier adds a peer's partial merge, which
    /// names its frames, with it).
    pub(crate) fn child_named(&mut self, parent: u32, name: &str) -> u32 {
        let id = self.name_strs.intern(name);
        self.child(parent, id)
    }
}

impl Names for FrameTree {
    fn name_of_id(&self, id: u32) -> &str {
        self.name(id)
    }
}

/// Generations are unique in the process, not per store: segments on one symbol
/// base share a memo of frame ids through the base, and bases are loaded once per
/// process (`segment/base.rs`), so two stores' trees must never share a number.
static NEXT_GENERATION: AtomicU64 = AtomicU64::new(1);

fn fresh_generation() -> u64 {
    NEXT_GENERATION.fetch_add(1, Ordering::Relaxed)
}

/// The store's current frame tree.
pub struct Frames {
    current: Mutex<Arc<RwLock<FrameTree>>>,
    symbols: RwLock<Option<Arc<Symbolizer>>>,
    /// Above this many nodes the next query starts a fresh tree.
    pub max_nodes: usize,
}

impl Default for Frames {
    fn default() -> Self {
        Frames::new(4_000_000)
    }
}

impl Frames {
    pub fn new(max_nodes: usize) -> Self {
        Frames {
            current: Mutex::new(Arc::new(RwLock::new(FrameTree::new(fresh_generation())))),
            symbols: RwLock::new(None),
            max_nodes,
        }
    }

    /// Names frames kept as addresses with `symbols` from the next query on.
    pub fn set_symbolizer(&self, symbols: Arc<Symbolizer>) {
        *self.symbols.write() = Some(symbols);
    }

    pub fn symbolizer(&self) -> Option<Arc<Symbolizer>> {
        self.symbols.read().clone()
    }

    /// The symbolizer's generation (0 without one): goes up when a debug file
    /// arrives, and with it every name derived from frames kept as addresses.
    pub fn symbols_generation(&self) -> u64 {
        self.symbols.read().as_ref().map_or(0, |s| s.generation())
    }

    /// Approximate bytes of the current tree (older generations live only as long as
    /// the queries that still use them).
    pub fn approx_bytes(&self) -> usize {
        let cur = self.current.lock().clone();
        let bytes = cur.read().approx_bytes();
        bytes
    }

    /// Frames in the current tree (without replacing it when it is too big).
    pub fn len(&self) -> usize {
        let cur = self.current.lock().clone();
        let len = cur.read().len();
        len
    }

    /// The tree a query uses from start to end (replaced first if it grew too big).
    ///
    /// A debug file that arrived since the tree was started (the symbolizer's
    /// generation moved) starts a fresh tree too: frames it named by address may
    /// have names now, and every memo and cached result keyed by the old tree's
    /// generation goes with it.
    pub fn for_query(&self) -> Arc<RwLock<FrameTree>> {
        let symbols = self.symbolizer();
        let sym_gen = symbols.as_ref().map_or(0, |s| s.generation());
        let mut cur = self.current.lock();
        let stale = {
            let t = cur.read();
            t.len() > self.max_nodes
                || t.symbols_generation != sym_gen
                || t.symbols.is_some() != symbols.is_some()
        };
        if stale {
            *cur = Arc::new(RwLock::new(FrameTree::with_symbols(
                fresh_generation(),
                symbols,
            )));
        }
        cur.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dict::{DictBuilder, LocationRec};
    use crate::query::scratch::{Memo, NodeValues, Scratch};
    use crate::query::CallTree;

    /// A dictionary of root-first stacks of `(function, line)`, returning it and
    /// each stack's leaf node.
    fn dict(stacks: &[&[(&str, u32)]]) -> (Dict, Vec<u32>) {
        let mut b = DictBuilder::new();
        let mut leaves = Vec::new();
        for st in stacks {
            let locs: Vec<u32> = st
                .iter()
                .map(|&(f, line)| {
                    let function = Some(b.function(f, "x.rs"));
                    b.location(LocationRec {
                        function,
                        mapping: None,
                        address: 0,
                        line,
                    })
                })
                .collect();
            leaves.push(b.stack(&locs));
        }
        (b.finish(), leaves)
    }

    /// A source of a test merge: its dictionary, memo and `(node, value)` pairs.
    type TestSource<'a> = (&'a Dict, &'a GidMemo, Vec<(u32, i64)>);

    fn merged(frames: &Frames, sources: &[TestSource<'_>]) -> CallTree {
        let tree = frames.for_query();
        let mut out = NodeValues::default();
        let (mut nodes, mut names, mut path) = (Memo::default(), Memo::default(), Vec::new());
        let mut depth = Memo::default();
        for (d, memo, pairs) in sources {
            let gen = tree.read().generation();
            let slots = memo.slots(gen, d.node_count());
            add_pairs(
                &tree,
                || Ok(d),
                Some(&slots),
                pairs,
                &mut out,
                &mut nodes,
                &mut names,
                &mut depth,
                &mut path,
            )
            .unwrap();
            nodes.reset();
            names.reset();
        }
        let mut pairs = Vec::new();
        out.drain(&mut pairs);
        let mut t = CallTree::from_frames(&tree.read(), &pairs);
        t.finalize();
        t
    }

    /// Threads merging the same segment at once into one tree (the two sides of a
    /// diff, the scan threads) read frame ids that other threads put in the
    /// segment's memo while they ran, beyond the size their accumulator was
    /// prepared for: no value may be dropped. (It once was: a cold diff came out
    /// short by a few samples.)
    #[test]
    fn concurrent_merges_of_one_segment_lose_no_value() {
        let names: Vec<String> = (0..64).map(|i| format!("f{i}")).collect();
        let stacks: Vec<Vec<(&str, u32)>> = (0..3000u32)
            .map(|i| {
                (0..6)
                    .map(|d| {
                        (
                            names[((i >> (d * 2)) as usize + d as usize) % 64].as_str(),
                            d,
                        )
                    })
                    .collect()
            })
            .collect();
        let refs: Vec<&[(&str, u32)]> = stacks.iter().map(Vec::as_slice).collect();
        let (d, leaves) = dict(&refs);
        let pairs: Vec<(u32, i64)> = leaves.iter().map(|&l| (l, 1)).collect();
        let want: i64 = leaves.len() as i64;
        for round in 0..20 {
            // A fresh memo and tree every round: every node is resolved while the
            // other threads read the memo.
            let (memo, frames) = (GidMemo::default(), Frames::default());
            let tree = frames.for_query();
            let totals: Vec<i64> = std::thread::scope(|scope| {
                let handles: Vec<_> = (0..4)
                    .map(|t| {
                        let (tree, d, memo) = (&tree, &d, &memo);
                        // Two threads walk the stacks from each of two starting
                        // points: each reads the memo where the other is resolving.
                        let mut mine = pairs.clone();
                        mine.rotate_left(t % 2 * pairs.len() / 2);
                        scope.spawn(move || {
                            let mut out = NodeValues::default();
                            let (mut nodes, mut names, mut path) =
                                (Memo::default(), Memo::default(), Vec::new());
                            let gen = tree.read().generation();
                            let slots = memo.slots(gen, d.node_count());
                            for chunk in mine.chunks(256) {
                                add_pairs(
                                    tree,
                                    || Ok(d),
                                    Some(&slots),
                                    chunk,
                                    &mut out,
                                    &mut nodes,
                                    &mut names,
                                    &mut Memo::default(),
                                    &mut path,
                                )
                                .unwrap();
                            }
                            let mut got = Vec::new();
                            out.drain(&mut got);
                            got.iter().map(|p| p.1).sum::<i64>()
                        })
                    })
                    .collect();
                handles.into_iter().map(|h| h.join().unwrap()).collect()
            });
            assert_eq!(totals, vec![want; 4], "round {round}");
        }
    }

    #[test]
    fn lines_and_segments_merge_by_frame_name() {
        // Two lines of `b` and two dictionaries: one flame graph frame each.
        let (d1, l1) = dict(&[&[("main", 1), ("b", 10)], &[("main", 1), ("b", 11)]]);
        let (d2, l2) = dict(&[&[("main", 7), ("b", 3)], &[("main", 7), ("c", 4)]]);
        let (m1, m2) = (GidMemo::default(), GidMemo::default());
        let frames = Frames::default();
        let sources = [
            (&d1, &m1, vec![(l1[0], 2), (l1[1], 3)]),
            (&d2, &m2, vec![(l2[0], 5), (l2[1], 7)]),
        ];
        for _ in 0..2 {
            // The second round is served from the segments' memos.
            let t = merged(&frames, &sources);
            let f = t.folded();
            assert_eq!(f.len(), 2);
            assert_eq!(f["main;b"], 10);
            assert_eq!(f["main;c"], 7);
            assert_eq!(t.total(), 17);
        }
        assert_eq!(frames.for_query().read().len(), 4, "root, main, b, c");
    }

    #[test]
    fn a_full_tree_starts_a_new_generation_with_the_same_answers() {
        let (d, l) = dict(&[&[("a", 1), ("b", 1), ("c", 1)], &[("a", 1), ("d", 1)]]);
        let memo = GidMemo::default();
        let frames = Frames::new(3);
        let pairs = vec![(l[0], 4), (l[1], 1)];
        let first = merged(&frames, &[(&d, &memo, pairs.clone())]);
        let g1 = frames.for_query().read().generation();
        let second = merged(&frames, &[(&d, &memo, pairs)]);
        let g2 = frames.for_query().read().generation();
        assert!(g2 > g1, "the tree passed 3 nodes: a new generation");
        assert_eq!(first.folded(), second.folded());
        assert_eq!(second.folded()["a;b;c"], 4);
    }

    #[test]
    fn tree_from_frames_still_merges_and_interns() {
        let (d, l) = dict(&[&[("main", 1), ("x", 2)]]);
        let memo = GidMemo::default();
        let frames = Frames::default();
        let mut t = merged(&frames, &[(&d, &memo, vec![(l[0], 3)])]);
        // The lookup maps of a bulk-built tree are built on first need.
        t.add_stack(&["main", "x"], 1);
        t.add_stack(&["main", "y"], 2);
        t.finalize();
        assert_eq!(t.folded()["main;x"], 4);
        assert_eq!(t.folded()["main;y"], 2);
        assert_eq!(t.nodes().len(), 4);
    }

    #[test]
    fn unnamed_functions_stay_apart_by_address() {
        let mut b = DictBuilder::new();
        let mapping = Some(b.mapping("/usr/lib/libx.so", "", Default::default()));
        let function = Some(b.function("", "x.rs"));
        let at = |b: &mut DictBuilder, address| {
            b.location(LocationRec {
                function,
                mapping,
                address,
                line: 0,
            })
        };
        let (l1, l2) = (at(&mut b, 0x10), at(&mut b, 0x20));
        let (a, c) = (b.stack(&[l1]), b.stack(&[l2]));
        let d = b.finish();
        let memo = GidMemo::default();
        let t = merged(&Frames::default(), &[(&d, &memo, vec![(a, 1), (c, 2)])]);
        let f = t.folded();
        assert_eq!(f["libx.so+0x10"], 1);
        assert_eq!(f["libx.so+0x20"], 2);
    }

    /// A segment resolved whole gives every node the gid a query resolving its
    /// stacks one by one gives, in batches that stop at the frame bound.
    #[test]
    fn a_segment_resolved_whole_matches_one_resolved_by_queries() {
        let (d, leaves) = dict(&[
            &[("main", 1), ("a", 2), ("b", 3)],
            &[("main", 1), ("a", 4), ("c", 5)],
            &[("main", 2), ("d", 6)],
            &[("x", 1)],
        ]);
        let by_query = Frames::new(1 << 20).for_query();
        let q_memo = GidMemo::default();
        let pairs: Vec<(u32, i64)> = leaves.iter().map(|&l| (l, 1)).collect();
        let mut out = NodeValues::default();
        let (mut nodes, mut names, mut depth, mut path) = (
            Memo::default(),
            Memo::default(),
            Memo::default(),
            Vec::new(),
        );
        for p in &pairs {
            let gen = by_query.read().generation();
            let slots = q_memo.slots(gen, d.node_count());
            add_pairs(
                &by_query,
                || Ok(&d),
                Some(&slots),
                std::slice::from_ref(p),
                &mut out,
                &mut nodes,
                &mut names,
                &mut depth,
                &mut path,
            )
            .unwrap();
        }
        let whole = Frames::new(1 << 20).for_query();
        let w_memo = GidMemo::default();
        let mut scratch = crate::query::scratch::Scratch::default();
        let resolved = resolve_segment(&whole, &d, &w_memo, &mut scratch, usize::MAX, || {});
        assert_eq!(resolved, d.node_count());
        assert_eq!(whole.read().len(), by_query.read().len());
        let name_path = |tree: &RwLock<FrameTree>, mut g: u32| {
            let t = tree.read();
            let mut names = Vec::new();
            while g != ROOT_GID {
                names.push(t.name(t.name_of(g)).to_string());
                g = t.parent(g);
            }
            names
        };
        let (qs, ws) = (
            q_memo.slots(by_query.read().generation(), d.node_count()),
            w_memo.slots(whole.read().generation(), d.node_count()),
        );
        for n in 0..d.node_count() as u32 {
            let (q, w) = (qs.get(n).unwrap(), ws.get(n).unwrap());
            assert_eq!(name_path(&by_query, q), name_path(&whole, w), "node {n}");
        }

        // Bounded: no batch starts once the tree holds `max_frames` nodes.
        let bounded = Frames::new(1 << 20).for_query();
        let b_memo = GidMemo::default();
        assert_eq!(
            resolve_segment(&bounded, &d, &b_memo, &mut scratch, 1, || {}),
            0
        );
        assert_eq!(bounded.read().len(), 1);
    }

    /// A leaf-function group-by names each stack by its leaf's frame name: one id
    /// for every line of a function, the binary and address for a frame without
    /// one, and no frame added to the tree (the path is never resolved).
    #[test]
    fn pairs_to_names_names_leaves_without_resolving_paths() {
        let mut b = DictBuilder::new();
        let loc = |b: &mut DictBuilder, f: Option<&str>, line: u32, address: u64| {
            let function = f.map(|f| b.function(f, "x.rs"));
            let mapping = Some(b.mapping("/usr/lib/liby.so", "", Default::default()));
            b.location(LocationRec {
                function,
                mapping,
                address,
                line,
            })
        };
        let (main, hash3, hash9) = (
            loc(&mut b, Some("main"), 1, 0),
            loc(&mut b, Some("hash"), 3, 0),
            loc(&mut b, Some("hash"), 9, 0),
        );
        let bare = loc(&mut b, None, 0, 0x2a);
        let leaves = [
            b.stack(&[main, hash3]),
            b.stack(&[main, hash9]),
            b.stack(&[hash3, main]),
            b.stack(&[main, bare]),
        ];
        let d = b.finish();
        let tree = Frames::default().for_query();
        let mut scratch = Scratch {
            pairs: leaves
                .iter()
                .zip([5, 7, 11, 13])
                .map(|(&n, v)| (n, v))
                .collect(),
            ..Scratch::default()
        };
        scratch.pairs_to_names(&tree, || Ok(&d), None).unwrap();
        let t = tree.read();
        let named: Vec<(&str, i64)> = scratch
            .pairs
            .iter()
            .map(|&(id, v)| (t.name(id), v))
            .collect();
        assert_eq!(
            named,
            vec![("hash", 5), ("hash", 7), ("main", 11), ("liby.so+0x2a", 13)]
        );
        assert_eq!(
            scratch.pairs[0].0, scratch.pairs[1].0,
            "one id per function"
        );
        assert_eq!(t.len(), 1, "only the root: no frame path was resolved");
        let hash = scratch.pairs[0].0;
        drop(t);
        // Later pairs of the same source are named from the memo, alike.
        scratch.pairs = vec![(leaves[1], 1), (leaves[2], 2)];
        scratch.pairs_to_names(&tree, || Ok(&d), None).unwrap();
        assert_eq!(scratch.pairs[0], (hash, 1));
        assert_eq!(tree.read().name(scratch.pairs[1].0), "main");
    }

    /// Nodes resolved into the frame tree already are named and merged without
    /// the source's tables (a segment decodes them on first use); a node that
    /// is not asks for them, and their error is the caller's.
    #[test]
    fn resolved_nodes_need_no_tables() {
        let mut b = DictBuilder::new();
        let leaves = [b.letter_stack(&[0, 1], 1), b.letter_stack(&[0, 2], 1)];
        let d = b.finish();
        let tree = Frames::default().for_query();
        let memo = GidMemo::default();
        let slots = memo.slots(tree.read().generation(), d.node_count());
        let mut scratch = Scratch {
            pairs: vec![(leaves[0], 3), (leaves[1], 4)],
            ..Scratch::default()
        };
        scratch
            .pairs_to_frames(&tree, || Ok(&d), Some(&slots))
            .unwrap();
        let no_tables = || -> crate::error::Result<&Dict> {
            Err(crate::StorageError::Corrupt("tables asked for".into()))
        };
        let mut first = Vec::new();
        scratch.gids.drain(&mut first);
        scratch.pairs = vec![(leaves[1], 4), (leaves[0], 3)];
        scratch
            .pairs_to_frames(&tree, no_tables, Some(&slots))
            .unwrap();
        let mut again = Vec::new();
        scratch.gids.drain(&mut again);
        assert_eq!(again, first);
        scratch.pairs = vec![(leaves[0], 3)];
        scratch
            .pairs_to_names(&tree, no_tables, Some(&slots))
            .unwrap();
        assert_eq!(tree.read().name(scratch.pairs[0].0), "b");
        // An unresolved node needs them.
        let other = GidMemo::default();
        let fresh = other.slots(tree.read().generation(), d.node_count());
        scratch.pairs = vec![(leaves[0], 3)];
        assert!(scratch
            .pairs_to_names(&tree, no_tables, Some(&fresh))
            .is_err());
        scratch.pairs = vec![(leaves[0], 3)];
        assert!(scratch
            .pairs_to_frames(&tree, no_tables, Some(&fresh))
            .is_err());
    }
}
