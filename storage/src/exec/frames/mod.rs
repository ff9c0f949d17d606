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
mod tests;
