//! The part of a frame tree that a selection's merges touch, kept between queries.
//!
//! Drawing a merge needs its nodes as a parent array with every parent before its
//! children. Gathering them from the gid sums means climbing from each summed frame
//! through the frame tree, which holds every service of the tenant: random reads
//! into a tree of millions of nodes for the 150 k a service touches, on every query.
//! A selection touches much the same frames from one query to the next, so that
//! parent array is kept (per selector and frame-tree generation, see the querier's
//! cache) and a query only lays its values onto it. A skeleton may hold more nodes
//! than a query touches (every range asked so far); those nodes get zero and are
//! never drawn.
//!
//! The nodes are held in gid order. A frame's parent has a smaller gid, so that
//! order has every parent before its children. Membership is a bitset over the
//! tree's gids, and a node's local id is its gid's rank in it: a query finds each
//! of its frames in constant time.
//!
//! The skeleton also holds its *chains*: maximal paths whose nodes, but the last,
//! have one child. Stacks are deep and mostly unshared below a few branch points
//! (tens of nodes a stack), and along a chain a node's
//! total changes only where a self value sits; so a flame graph is decided per
//! chain (see [`super::skeleton_shape`]), not per node.

use super::drawn::Names;
use super::frames::{FrameTree, ROOT_GID};
use super::shape::Nodes;

/// The ancestors-or-self of a set of frames, in gid order (local id 0 is the root).
#[derive(Debug)]
pub struct Skeleton {
    generation: u64,
    /// Bit `g` is set when frame `g` is a node.
    members: Vec<u64>,
    /// Nodes before each word of `members`: with it, a gid's rank (its local id).
    before: Vec<u32>,
    /// Local id of each node's parent (the root's is 0).
    parents: Vec<u32>,
    /// Frame-name id of each node, read once here instead of from the big tree on
    /// every query.
    names: Vec<u32>,
    chains: Chains,
}

/// The chains of a skeleton. A node's *slot* is its place in `nodes`, where each
/// chain's nodes are consecutive, top first; chains are numbered in the gid order
/// of their tops, so a chain comes after the chain holding its top's parent.
#[derive(Debug, Default)]
pub(crate) struct Chains {
    /// Local ids, chain by chain.
    pub nodes: Vec<u32>,
    /// The slot of each local id.
    pub slot: Vec<u32>,
    /// Where each chain starts in `nodes`, and the end (one more entry than chains).
    pub start: Vec<u32>,
    /// The chain holding each chain's top's parent (chain 0, the root's, is its own).
    pub parent: Vec<u32>,
    /// Each chain's child chains: `child[child_start[c]..child_start[c + 1]]`.
    pub child_start: Vec<u32>,
    pub child: Vec<u32>,
}

impl Chains {
    /// The chains of a parent array with every parent before its children.
    fn of(parents: &[u32]) -> Chains {
        let n = parents.len();
        let (mut kids, mut only) = (vec![0u32; n], vec![0u32; n]);
        for (i, &p) in parents.iter().enumerate().skip(1) {
            kids[p as usize] += 1;
            only[p as usize] = i as u32;
        }
        let mut c = Chains {
            slot: vec![0; n],
            ..Chains::default()
        };
        let mut chain_of = vec![0u32; n];
        for top in 0..n {
            if top != 0 && kids[parents[top] as usize] == 1 {
                continue;
            }
            let id = c.start.len() as u32;
            c.start.push(c.nodes.len() as u32);
            c.parent.push(if top == 0 {
                0
            } else {
                chain_of[parents[top] as usize]
            });
            let mut x = top;
            loop {
                c.slot[x] = c.nodes.len() as u32;
                chain_of[x] = id;
                c.nodes.push(x as u32);
                if kids[x] != 1 {
                    break;
                }
                x = only[x] as usize;
            }
        }
        c.start.push(c.nodes.len() as u32);
        let chains = c.parent.len();
        let mut count = vec![0u32; chains + 1];
        for &p in c.parent.iter().skip(1) {
            count[p as usize + 1] += 1;
        }
        for i in 1..=chains {
            count[i] += count[i - 1];
        }
        c.child_start = count.clone();
        c.child = vec![0; chains.saturating_sub(1)];
        for (id, &p) in c.parent.iter().enumerate().skip(1) {
            let at = &mut count[p as usize];
            c.child[*at as usize] = id as u32;
            *at += 1;
        }
        c
    }

    /// Number of chains.
    pub fn len(&self) -> usize {
        self.parent.len()
    }

    /// Nodes in chain `c`.
    pub fn chain_len(&self, c: usize) -> u32 {
        self.start[c + 1] - self.start[c]
    }

    /// The child chains of chain `c`.
    pub fn children(&self, c: usize) -> &[u32] {
        &self.child[self.child_start[c] as usize..self.child_start[c + 1] as usize]
    }
}

impl Skeleton {
    /// The nodes of `base` (a skeleton of the same tree, grown by this call) and the
    /// ancestors-or-self of every frame summed in `sides`.
    pub fn build(tree: &FrameTree, base: Option<&Skeleton>, sides: &[&[(u32, i64)]]) -> Skeleton {
        let n = tree.len();
        let mut bits = vec![0u64; n.div_ceil(64).max(1)];
        let is_set = |bits: &[u64], g: u32| bits[g as usize / 64] & (1 << (g % 64)) != 0;
        bits[0] |= 1; // The root.
        if let Some(b) = base.filter(|b| b.generation == tree.generation()) {
            // The tree only grows within a generation: the old bits are a prefix.
            for (w, &word) in bits.iter_mut().zip(&b.members) {
                *w |= word;
            }
        }
        for side in sides {
            for &(gid, v) in side.iter() {
                let mut g = gid;
                if v == 0 || g as usize >= n {
                    continue;
                }
                while !is_set(&bits, g) {
                    bits[g as usize / 64] |= 1 << (g % 64);
                    let p = tree.parent(g);
                    g = if p < g { p } else { ROOT_GID };
                }
            }
        }
        // The local id of a marked gid is its rank among the marked bits.
        let mut before = Vec::with_capacity(bits.len());
        let mut gids = Vec::new();
        let mut count = 0u32;
        for (w, &word) in bits.iter().enumerate() {
            before.push(count);
            count += word.count_ones();
            let mut x = word;
            while x != 0 {
                gids.push(w as u32 * 64 + x.trailing_zeros());
                x &= x - 1;
            }
        }
        let mut skel = Skeleton {
            generation: tree.generation(),
            members: bits,
            before,
            parents: Vec::new(),
            names: Vec::new(),
            chains: Chains::default(),
        };
        skel.parents = gids
            .iter()
            .map(|&g| match g {
                ROOT_GID => 0,
                g => skel.local(tree.parent(g)).unwrap_or(0) as u32,
            })
            .collect();
        skel.names = gids.iter().map(|&g| tree.name_of(g)).collect();
        skel.chains = Chains::of(&skel.parents);
        skel
    }

    /// The frame-tree generation whose gids these are.
    pub fn generation(&self) -> u64 {
        self.generation
    }

    /// Nodes held.
    pub fn len(&self) -> usize {
        self.parents.len()
    }

    /// What the skeleton costs in memory (the cache's weight).
    pub fn approx_bytes(&self) -> usize {
        self.members.len() * 12 + self.len() * 16 + self.chains.len() * 16 + 64
    }

    pub(crate) fn chains(&self) -> &Chains {
        &self.chains
    }

    /// Frame-name id of local node `local`.
    pub(crate) fn name_id(&self, local: u32) -> u32 {
        self.names.get(local as usize).copied().unwrap_or(0)
    }

    /// The local id of frame `gid`, if it is a node.
    #[inline]
    pub(crate) fn local(&self, gid: u32) -> Option<usize> {
        let (w, b) = (gid as usize / 64, gid % 64);
        let word = *self.members.get(w)?;
        if word & (1 << b) == 0 {
            return None;
        }
        let below = (word & ((1u64 << b) - 1)).count_ones();
        Some((self.before[w] + below) as usize)
    }

    /// Whether every frame summed in `pairs` is a node.
    pub fn covers(&self, pairs: &[(u32, i64)]) -> bool {
        self.walk(pairs, |_, _| {})
    }

    /// Adds `pairs` to column `k` of `selfs` (one row per node).
    /// `false` when some frame is not a node (its value is left out).
    pub fn add<const K: usize>(
        &self,
        pairs: &[(u32, i64)],
        k: usize,
        selfs: &mut [[i64; K]],
    ) -> bool {
        self.walk(pairs, |local, v| {
            if let Some(row) = selfs.get_mut(local) {
                row[k] = row[k].saturating_add(v);
            }
        })
    }

    /// `f(local id, value)` for each pair: `false` when some frame is not a node.
    fn walk(&self, pairs: &[(u32, i64)], mut f: impl FnMut(usize, i64)) -> bool {
        let mut all = true;
        for &(g, v) in pairs.iter().filter(|p| p.1 != 0) {
            match self.local(g) {
                Some(i) => f(i, v),
                None => all = false,
            }
        }
        all
    }

    /// Frame-tree ids of the nodes, by local id.
    #[cfg(test)]
    fn gids(&self) -> Vec<u32> {
        let mut out = Vec::with_capacity(self.len());
        for (w, &word) in self.members.iter().enumerate() {
            let mut x = word;
            while x != 0 {
                out.push(w as u32 * 64 + x.trailing_zeros());
                x &= x - 1;
            }
        }
        out
    }

    /// The skeleton read with the names of `tree` (the tree it was built from).
    pub(crate) fn view<'a>(&'a self, tree: &'a FrameTree) -> SkeletonNodes<'a> {
        SkeletonNodes { skel: self, tree }
    }
}

/// A [`Skeleton`] as the tree a flame graph is laid out from.
pub(crate) struct SkeletonNodes<'a> {
    skel: &'a Skeleton,
    tree: &'a FrameTree,
}

impl Names for SkeletonNodes<'_> {
    fn name_of_id(&self, id: u32) -> &str {
        self.tree.name(id)
    }
}

impl Nodes for SkeletonNodes<'_> {
    fn len(&self) -> usize {
        self.skel.len()
    }
    fn parent(&self, node: usize) -> usize {
        self.skel.parents[node] as usize
    }
    fn name_id(&self, node: usize) -> u32 {
        self.skel.names[node]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::exec::frames::Frames;
    use proptest::prelude::*;

    /// A frame tree of `paths` (each a list of name ids from the root); returns
    /// the leaf gid of each path.
    fn tree_of(paths: &[Vec<u8>]) -> (std::sync::Arc<parking_lot::RwLock<FrameTree>>, Vec<u32>) {
        let frames = Frames::new(1 << 20).for_query();
        let mut leaves = Vec::new();
        {
            let mut t = frames.write();
            for p in paths {
                let mut g = ROOT_GID;
                for &n in p {
                    g = t.child_named(g, &((b'a' + n) as char).to_string());
                }
                leaves.push(g);
            }
        }
        (frames, leaves)
    }

    /// Ancestors-or-self of `gids` by walking the tree: the reference set.
    fn closure(tree: &FrameTree, gids: &[u32]) -> Vec<u32> {
        let mut s = std::collections::BTreeSet::from([ROOT_GID]);
        for &g in gids {
            let mut g = g;
            while s.insert(g) {
                g = tree.parent(g);
            }
        }
        s.into_iter().collect()
    }

    #[test]
    fn nodes_in_gid_order_with_local_parents() {
        let (frames, leaves) = tree_of(&[vec![0, 1, 2], vec![0, 3], vec![4]]);
        let t = frames.read();
        // gids: a=1, b=2, c=3, d=4, e=5. Sum only c and e.
        let sk = Skeleton::build(&t, None, &[&[(leaves[0], 5), (leaves[2], 1)]]);
        assert_eq!(sk.gids(), vec![0, 1, 2, 3, 5]);
        assert_eq!(sk.parents, vec![0, 0, 1, 2, 0]);
        let v = sk.view(&t);
        let names: Vec<&str> = (0..v.len()).map(|i| v.name_of_id(v.name_id(i))).collect();
        assert_eq!(names, vec!["total", "a", "b", "c", "e"]);
        // d is not a node; growing the skeleton by it keeps the others.
        assert!(!sk.covers(&[(leaves[1], 2)]));
        let grown = Skeleton::build(&t, Some(&sk), &[&[(leaves[1], 2)]]);
        assert_eq!(grown.gids(), vec![0, 1, 2, 3, 4, 5]);
        assert_eq!(grown.parents, vec![0, 0, 1, 2, 1, 0]);
        let mut selfs = vec![[0i64; 2]; grown.len()];
        assert!(grown.add(&[(2, 7), (4, 2)], 0, &mut selfs));
        assert!(grown.add(&[(5, 3)], 1, &mut selfs));
        assert_eq!(selfs, vec![[0, 0], [0, 0], [7, 0], [0, 0], [2, 0], [0, 3]]);
    }

    proptest! {
        /// A skeleton holds exactly the ancestors-or-self of what it was built from,
        /// each node's parent is its frame's parent, and it covers exactly the
        /// pairs whose frames it holds.
        #[test]
        fn holds_exactly_the_ancestors(
            paths in prop::collection::vec(prop::collection::vec(0u8..4, 1..6), 1..30),
            first in prop::collection::vec(any::<prop::sample::Index>(), 0..10),
            second in prop::collection::vec(any::<prop::sample::Index>(), 0..10),
        ) {
            let (frames, _) = tree_of(&paths);
            let t = frames.read();
            let pick = |ix: &[prop::sample::Index]| {
                let mut g: Vec<u32> = ix.iter().map(|i| i.index(t.len()) as u32).collect();
                g.sort_unstable();
                g.dedup();
                g
            };
            let (a, b) = (pick(&first), pick(&second));
            let pairs = |g: &[u32]| g.iter().map(|&g| (g, 1i64)).collect::<Vec<_>>();
            let sk = Skeleton::build(&t, None, &[&pairs(&a)]);
            prop_assert_eq!(&sk.gids(), &closure(&t, &a));
            let grown = Skeleton::build(&t, Some(&sk), &[&pairs(&b)]);
            let both: Vec<u32> = a.iter().chain(&b).copied().collect();
            let grown_gids = grown.gids();
            prop_assert_eq!(&grown_gids, &closure(&t, &both));
            for (i, &g) in grown_gids.iter().enumerate().skip(1) {
                prop_assert_eq!(grown_gids[grown.parents[i] as usize], t.parent(g));
            }
            let held = b.iter().all(|g| sk.gids().binary_search(g).is_ok());
            prop_assert_eq!(sk.covers(&pairs(&b)), held);
        }
    }
}
