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

use super::child_map::ChildMap;
use super::drawn::Names;
use super::interner::Interner;
use super::scratch::Memo;
use crate::dict::Dict;
pub use crate::segment::{GidMemo, GidSlots};

/// Display name of a frame: the function name, or for unsymbolized frames the
/// binary and address, so they stay distinguishable and can be symbolized later.
pub fn frame_name(dict: &Dict, loc: u32) -> Cow<'_, str> {
    let Some(l) = dict.locations.get(loc as usize) else {
        return "[unknown]".into();
    };
    if let Some(f) = l.function.and_then(|f| dict.functions.get(f as usize)) {
        let name = dict.str(f.name);
        if !name.is_empty() {
            return name.into();
        }
    }
    let binary = l
        .mapping
        .and_then(|m| dict.mappings.get(m as usize))
        .map(|m| dict.str(m.file))
        .map(|f| f.rsplit('/').next().unwrap_or(f))
        .unwrap_or("");
    match (binary.is_empty(), l.address) {
        (true, 0) => "[unknown]".into(),
        (true, a) => format!("0x{a:x}").into(),
        (false, a) => format!("{binary}+0x{a:x}").into(),
    }
}

/// The root's gid.
pub const ROOT_GID: u32 = 0;

/// Name-level frame tree. gid 0 is the root; a node's parent always has a smaller gid.
pub struct FrameTree {
    generation: u64,
    parents: Vec<u32>,
    names: Vec<u32>,
    children: ChildMap,
    name_strs: Interner,
}

impl FrameTree {
    fn new(generation: u64) -> Self {
        FrameTree {
            generation,
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

    /// The child of `parent` named `name`, created when missing (tests build
    /// trees by name with it).
    #[cfg(test)]
    pub(crate) fn child_named(&mut self, parent: u32, name: &str) -> u32 {
        let id = self.name_strs.intern(name);
        self.child(parent, id)
    }

    /// The gid of `dict`'s stack node `node`, creating it and any missing ancestors.
    /// `memo` maps already-resolved nodes of this dictionary to their gids.
    fn resolve(
        &mut self,
        dict: &Dict,
        node: u32,
        memo: &mut dyn NodeMemo,
        names: &mut Memo,
        path: &mut Vec<u32>,
    ) -> u32 {
        let mut gid = dict
            .climb_until(node, path, |n| memo.get(n))
            .unwrap_or(ROOT_GID);
        for &n in path.iter().rev() {
            let name = self.name_of_node(dict, n, names);
            gid = self.child(gid, name);
            memo.set(n, gid);
        }
        gid
    }

    /// Resolves `nodes` of an immutable segment, and every ancestor of theirs not
    /// resolved yet, into `slots`.
    ///
    /// A child's key in the child map holds its parent's gid, so resolving path by
    /// path waits for one cache miss after another: the map holds every frame of
    /// the tenant (millions), and a new service's first merge over a day resolved
    /// about a million nodes that way, two thirds of its time. Here it is two
    /// passes:
    /// - the frames that exist already are looked up shallowest first: the nodes
    ///   of one depth do not depend on each other, so their lookups are prefetched
    ///   a few nodes ahead and overlap;
    /// - the frames that do not exist yet are created in node order, which is
    ///   depth first: a chain of new frames gets consecutive gids, as path-by-path
    ///   resolution gave them (drawing relies on it: a flame graph's chains are in
    ///   gid order, see `skeleton_shape::by_slot`, and a diff spent a sixth more
    ///   time sorting when they were numbered by depth). These inserts need no
    ///   earlier load to compute their keys, so they overlap too.
    ///
    /// `depth` and `todo` are scratch: `depth` must be clean (it is left clean) and
    /// hold a slot per stack node.
    fn resolve_by_depth(
        &mut self,
        dict: &Dict,
        nodes: impl Iterator<Item = u32>,
        slots: &GidSlots,
        names: &mut Memo,
        depth: &mut Memo,
        todo: &mut Vec<u32>,
    ) {
        let parent = |n: u32| match dict.parents.get(n as usize) {
            Some(&p) if p < n => Some(p),
            _ => None,
        };
        todo.clear();
        for node in nodes {
            let mut n = node;
            while slots.get(n).is_none() && depth.get(n).is_none() {
                depth.set(n, 0);
                todo.push(n);
                match parent(n) {
                    Some(p) => n = p,
                    None => break,
                }
            }
        }
        // Parents have smaller ids: in id order a node's depth follows its parent's.
        todo.sort_unstable();
        let mut per_depth: Vec<u32> = Vec::new();
        for &n in todo.iter() {
            let d = parent(n).and_then(|p| depth.get(p)).map_or(0, |d| d + 1);
            depth.set(n, d);
            if per_depth.len() <= d as usize {
                per_depth.resize(d as usize + 1, 0);
            }
            per_depth[d as usize] += 1;
        }
        // Positions in `todo`, shallowest first (a counting sort by depth; ids
        // ascend within a depth).
        let mut at: Vec<usize> = per_depth
            .iter()
            .scan(0usize, |sum, &c| {
                let start = *sum;
                *sum += c as usize;
                Some(start)
            })
            .collect();
        let mut by_depth = vec![0u32; todo.len()];
        for (i, &n) in todo.iter().enumerate() {
            let d = depth.get(n).unwrap_or(0) as usize;
            by_depth[at[d]] = i as u32;
            at[d] += 1;
        }
        depth.reset();
        // Names first (they may intern), so that keys can be computed ahead.
        let frame_names: Vec<u32> = todo
            .iter()
            .map(|&n| self.name_of_node(dict, n, names))
            .collect();
        // The parent's gid, `None` while the parent is a frame still to create.
        let parent_gid = |n: u32| match parent(n) {
            Some(p) => slots.get(p),
            None => Some(ROOT_GID),
        };
        const AHEAD: usize = 8;
        for (k, &i) in by_depth.iter().enumerate() {
            if let Some(&j) = by_depth.get(k + AHEAD) {
                if let Some(pg) = parent_gid(todo[j as usize]) {
                    self.children.prefetch(pg, frame_names[j as usize]);
                }
            }
            let n = todo[i as usize];
            let found = parent_gid(n).and_then(|pg| self.children.get(pg, frame_names[i as usize]));
            if let Some(gid) = found {
                slots.set(n, gid);
            }
        }
        for (&n, &name) in todo.iter().zip(&frame_names) {
            if slots.get(n).is_none() {
                // The parent came earlier in id order: it has its gid by now.
                let gid = self.child(parent_gid(n).unwrap_or(ROOT_GID), name);
                slots.set(n, gid);
            }
        }
    }

    /// The interned frame name of stack node `n`, memoised in `names` per function
    /// where the frame is named by it (many locations, one per line or address,
    /// share a function), else per location.
    fn name_of_node(&mut self, dict: &Dict, n: u32, names: &mut Memo) -> u32 {
        let loc = dict.node_locations.get(n as usize).copied().unwrap_or(0);
        let named_by = dict
            .locations
            .get(loc as usize)
            .and_then(|l| l.function)
            .filter(|&f| {
                dict.functions
                    .get(f as usize)
                    .is_some_and(|f| !dict.str(f.name).is_empty())
            });
        let key = match named_by {
            Some(f) => f,
            None => (dict.functions.len() as u32).saturating_add(loc),
        };
        match names.get(key) {
            Some(id) => id,
            None => {
                let id = self.name_strs.intern(&frame_name(dict, loc));
                names.set(key, id);
                id
            }
        }
    }
}

impl Names for FrameTree {
    fn name_of_id(&self, id: u32) -> &str {
        self.name(id)
    }
}

/// Where a source keeps its node → gid mapping.
pub trait NodeMemo {
    fn get(&self, node: u32) -> Option<u32>;
    fn set(&mut self, node: u32, gid: u32);
}

impl NodeMemo for Memo {
    fn get(&self, node: u32) -> Option<u32> {
        Memo::get(self, node)
    }
    fn set(&mut self, node: u32, gid: u32) {
        Memo::set(self, node, gid)
    }
}

impl NodeMemo for &GidSlots {
    fn get(&self, node: u32) -> Option<u32> {
        GidSlots::get(self, node)
    }
    fn set(&mut self, node: u32, gid: u32) {
        GidSlots::set(self, node, gid)
    }
}

/// The store's current frame tree.
pub struct Frames {
    current: Mutex<Arc<RwLock<FrameTree>>>,
    next_generation: AtomicU64,
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
            current: Mutex::new(Arc::new(RwLock::new(FrameTree::new(1)))),
            next_generation: AtomicU64::new(2),
            max_nodes,
        }
    }

    /// Approximate bytes of the current tree (older generations live only as long as
    /// the queries that still use them).
    pub fn approx_bytes(&self) -> usize {
        let cur = self.current.lock().clone();
        let bytes = cur.read().approx_bytes();
        bytes
    }

    /// The tree a query uses from start to end (replaced first if it grew too big).
    pub fn for_query(&self) -> Arc<RwLock<FrameTree>> {
        let mut cur = self.current.lock();
        if cur.read().len() > self.max_nodes {
            let g = self.next_generation.fetch_add(1, Ordering::Relaxed);
            *cur = Arc::new(RwLock::new(FrameTree::new(g)));
        }
        cur.clone()
    }
}

/// Adds `(stack node, value)` pairs of `dict` to `out` (dense by gid), resolving
/// nodes through `slots` (an immutable segment's persistent memo) or, for the
/// mutable head, through the per-query `scratch` memo.
#[allow(clippy::too_many_arguments)]
pub fn add_pairs(
    tree: &RwLock<FrameTree>,
    dict: &Dict,
    slots: Option<&GidSlots>,
    pairs: &[(u32, i64)],
    out: &mut super::scratch::NodeValues,
    node_memo: &mut Memo,
    names: &mut Memo,
    depth: &mut Memo,
    path: &mut Vec<u32>,
) {
    let mut missing: Vec<(u32, i64)> = Vec::new();
    match slots {
        Some(s) => {
            out.prepare(tree.read().len());
            for &(node, v) in pairs {
                match s.get(node) {
                    Some(g) => out.add_growing(g, v, || tree.read().len()),
                    None => missing.push((node, v)),
                }
            }
        }
        None => missing.extend_from_slice(pairs),
    }
    if missing.is_empty() {
        return;
    }
    let mut t = tree.write();
    names.prepare(dict.functions.len() + dict.locations.len());
    match slots {
        Some(s) => {
            depth.prepare(dict.node_count());
            t.resolve_by_depth(dict, missing.iter().map(|&(n, _)| n), s, names, depth, path);
            out.prepare(t.len());
            for &(node, v) in &missing {
                // Resolved above; a node a corrupt tree left out counts at the root.
                out.add(s.get(node).unwrap_or(ROOT_GID), v);
            }
        }
        None => {
            node_memo.prepare(dict.node_count());
            for &(node, v) in &missing {
                let g = t.resolve(dict, node, node_memo, names, path);
                out.prepare(t.len());
                out.add(g, v);
            }
        }
    }
}

/// Resolves every stack node of an immutable segment into `tree`, a batch of
/// nodes per hold of the write lock, so queries waiting for the lock wait for one
/// batch. `pause` runs between batches (the warm-up yields to queries there).
/// Stops once the tree holds `max_frames` nodes: a tree past [`Frames::max_nodes`]
/// is replaced by the next query, and everything resolved into it is lost.
/// Returns the nodes resolved.
pub fn resolve_segment(
    tree: &RwLock<FrameTree>,
    dict: &Dict,
    memo: &GidMemo,
    scratch: &mut super::scratch::Scratch,
    max_frames: usize,
    mut pause: impl FnMut(),
) -> usize {
    const BATCH: usize = 1 << 13;
    let nodes = dict.node_count();
    let mut path = std::mem::take(&mut scratch.path);
    let mut done = 0;
    for start in (0..nodes).step_by(BATCH) {
        pause();
        let mut t = tree.write();
        if t.len() >= max_frames {
            break;
        }
        let slots = memo.slots(t.generation(), nodes);
        scratch
            .names
            .prepare(dict.functions.len() + dict.locations.len());
        scratch.depth.prepare(nodes);
        let end = (start + BATCH).min(nodes) as u32;
        t.resolve_by_depth(
            dict,
            start as u32..end,
            &slots,
            &mut scratch.names,
            &mut scratch.depth,
            &mut path,
        );
        done += path.len();
    }
    scratch.names.reset();
    scratch.path = path;
    done
}

impl super::scratch::Scratch {
    /// Adds `self.pairs` (sums per stack node of `dict`) to `self.gids`, by frame id.
    pub fn pairs_to_frames(
        &mut self,
        tree: &RwLock<FrameTree>,
        dict: &Dict,
        slots: Option<&GidSlots>,
    ) {
        let pairs = std::mem::take(&mut self.pairs);
        let mut path = std::mem::take(&mut self.path);
        add_pairs(
            tree,
            dict,
            slots,
            &pairs,
            &mut self.gids,
            &mut self.nodes,
            &mut self.names,
            &mut self.depth,
            &mut path,
        );
        self.pairs = pairs;
        self.path = path;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dict::{DictBuilder, LocationRec};
    use crate::query::scratch::NodeValues;
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
                d,
                Some(&slots),
                pairs,
                &mut out,
                &mut nodes,
                &mut names,
                &mut depth,
                &mut path,
            );
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
                                    d,
                                    Some(&slots),
                                    chunk,
                                    &mut out,
                                    &mut nodes,
                                    &mut names,
                                    &mut Memo::default(),
                                    &mut path,
                                );
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
        let mapping = Some(b.mapping("/usr/lib/libx.so", ""));
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
                &d,
                Some(&slots),
                std::slice::from_ref(p),
                &mut out,
                &mut nodes,
                &mut names,
                &mut depth,
                &mut path,
            );
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
}
