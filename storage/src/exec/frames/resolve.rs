//! Resolving a source's stack nodes to frame ids: path by path for the head
//! (through a per-query memo), by depth for an immutable segment (through its
//! persistent memo), and a whole segment at once for the warm-up.

use parking_lot::RwLock;

use super::{location_frames, FrameTree, GidMemo, GidSlots, CHAIN, ROOT_GID};
use crate::dict::Dict;
use crate::error::Result;
use crate::exec::scratch::{Memo, NodeValues, Scratch};

impl FrameTree {
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
            let key = self.name_of_node(dict, n, names);
            gid = self.child_frame(gid, key);
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
                let key = frame_names[j as usize];
                if let Some(pg) = parent_gid(todo[j as usize]).filter(|_| key & CHAIN == 0) {
                    self.children.prefetch(pg, key);
                }
            }
            let n = todo[i as usize];
            let found = parent_gid(n).and_then(|pg| self.get_frame(pg, frame_names[i as usize]));
            if let Some(gid) = found {
                slots.set(n, gid);
            }
        }
        for (&n, &name) in todo.iter().zip(&frame_names) {
            if slots.get(n).is_none() {
                // The parent came earlier in id order: it has its gid by now.
                let gid = self.child_frame(parent_gid(n).unwrap_or(ROOT_GID), name);
                slots.set(n, gid);
            }
        }
    }

    /// The slot of location `loc`'s frame name in a name memo: its function's id
    /// when the function has a name, else past the functions, by location.
    fn name_key(dict: &Dict, loc: u32) -> u32 {
        let named_by = dict
            .locations
            .get(loc as usize)
            .and_then(|l| l.function)
            .filter(|&f| {
                dict.functions
                    .get(f as usize)
                    .is_some_and(|f| !dict.str(f.name).is_empty())
            });
        match named_by {
            Some(f) => f,
            None => (dict.functions.len() as u32).saturating_add(loc),
        }
    }

    /// The frame key of stack node `n`: its interned frame name, or a chain of
    /// them ([`CHAIN`]) for an address the symbolizer expands into inlined
    /// frames. Memoised in `names` per function where the frame is named by it
    /// (many locations, one per line or address, share a function), else per
    /// location.
    fn name_of_node(&mut self, dict: &Dict, n: u32, names: &mut Memo) -> u32 {
        let loc = dict.node_locations.get(n as usize).copied().unwrap_or(0);
        let key = Self::name_key(dict, loc);
        if let Some(id) = names.get(key) {
            return id;
        }
        let frames = location_frames(dict, loc, self.symbols.as_deref());
        let ids: Vec<u32> = frames
            .iter()
            .map(|f| self.name_strs.intern(&f.name))
            .collect();
        let id = match ids.as_slice() {
            [one] => *one,
            _ if self.chains.len() < CHAIN as usize => {
                self.chains.push(ids.into_boxed_slice());
                CHAIN | (self.chains.len() - 1) as u32
            }
            // Past two billion chains: the innermost frame alone.
            _ => ids.last().copied().unwrap_or(0),
        };
        names.set(key, id);
        id
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

/// Adds `(stack node, value)` pairs of `dict` to `out` (dense by gid), resolving
/// nodes through `slots` (an immutable segment's persistent memo) or, for the
/// mutable head, through the per-query `scratch` memo.
#[allow(clippy::too_many_arguments)]
pub fn add_pairs<'d>(
    tree: &RwLock<FrameTree>,
    dict: impl FnOnce() -> Result<&'d Dict>,
    slots: Option<&GidSlots>,
    pairs: &[(u32, i64)],
    out: &mut NodeValues,
    node_memo: &mut Memo,
    names: &mut Memo,
    depth: &mut Memo,
    path: &mut Vec<u32>,
) -> Result<()> {
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
        return Ok(());
    }
    // Only nodes not resolved before need the tables (a segment decodes them
    // on first use).
    let dict = dict()?;
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
    Ok(())
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
    scratch: &mut Scratch,
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

impl Scratch {
    /// Adds `self.pairs` (sums per stack node of the source whose tables `dict`
    /// gives, only asked for when a node is not resolved yet) to `self.gids`, by
    /// frame id.
    pub fn pairs_to_frames<'d>(
        &mut self,
        tree: &RwLock<FrameTree>,
        dict: impl FnOnce() -> Result<&'d Dict>,
        slots: Option<&GidSlots>,
    ) -> Result<()> {
        let pairs = std::mem::take(&mut self.pairs);
        let mut path = std::mem::take(&mut self.path);
        let r = add_pairs(
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
        r
    }

    /// Replaces each `(stack node, value)` of `pairs` with `(name id of the node's
    /// frame, value)`: what a group-by on the leaf function needs, without the
    /// frame path. A node resolved into the frame tree already (`slots`) is
    /// named by its frame; the others through the source's tables (`dict`, only
    /// asked for then), memoised per function for the rest of the source.
    pub fn pairs_to_names<'d>(
        &mut self,
        tree: &RwLock<FrameTree>,
        dict: impl FnOnce() -> Result<&'d Dict>,
        slots: Option<&GidSlots>,
    ) -> Result<()> {
        let mut unnamed: Vec<usize> = Vec::new();
        match slots {
            Some(s) => {
                let t = tree.read();
                for (i, p) in self.pairs.iter_mut().enumerate() {
                    match s.get(p.0) {
                        Some(g) => p.0 = t.name_of(g),
                        None => unnamed.push(i),
                    }
                }
            }
            None => unnamed.extend(0..self.pairs.len()),
        }
        if unnamed.is_empty() {
            return Ok(());
        }
        let dict = dict()?;
        self.names
            .prepare(dict.functions.len() + dict.locations.len());
        // A source's functions are named once; later calls only read the memo.
        let mut t = None;
        for i in unnamed {
            let Some(p) = self.pairs.get_mut(i) else {
                continue;
            };
            let loc = dict.node_locations.get(p.0 as usize).copied().unwrap_or(0);
            let key = match self.names.get(FrameTree::name_key(dict, loc)) {
                Some(id) => id,
                None => {
                    t.get_or_insert_with(|| tree.write())
                        .name_of_node(dict, p.0, &mut self.names)
                }
            };
            p.0 = if key & CHAIN == 0 {
                key
            } else {
                match &t {
                    Some(w) => w.innermost(key),
                    None => tree.read().innermost(key),
                }
            };
        }
        Ok(())
    }
}
