//! The merged call tree every query output (flame graph, pprof, folded) is rendered
//! from. Nodes are keyed by `(parent, frame name)`, so the same function reached
//! through the same path merges across series, segments and the head.

use rustc_hash::FxHashMap;

use super::frames::{FrameTree, ROOT_GID};
use crate::dict::NO_PARENT;

/// Index of the root node (named `total`).
pub const ROOT: u32 = 0;

/// One node of a [`CallTree`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TreeNode {
    /// The parent node (`u32::MAX` for the root).
    pub parent: u32,
    /// The frame name's id (see [`CallTree::name`]).
    pub name: u32,
    /// Value of the samples whose stack ends here.
    pub self_value: i64,
    /// `self_value` plus every descendant's (after [`CallTree::finalize`]).
    pub total: i64,
}

/// A merged call tree: nodes keyed by `(parent, frame name)` from a `total` root.
#[derive(Clone, Debug)]
pub struct CallTree {
    names: Vec<String>,
    name_ids: FxHashMap<String, u32>,
    nodes: Vec<TreeNode>,
    children: FxHashMap<(u32, u32), u32>,
    totals_valid: bool,
    /// Whether `name_ids` and `children` are up to date. Trees built in bulk by
    /// [`CallTree::from_frames`] are mostly only rendered, so their lookup maps are
    /// built on first need.
    indexed: bool,
}

impl Default for CallTree {
    fn default() -> Self {
        Self::new()
    }
}

impl PartialEq for CallTree {
    fn eq(&self, other: &Self) -> bool {
        self.folded() == other.folded()
    }
}

impl CallTree {
    /// An empty tree (just the root).
    pub fn new() -> Self {
        let mut t = CallTree {
            names: Vec::new(),
            name_ids: FxHashMap::default(),
            nodes: Vec::new(),
            children: FxHashMap::default(),
            totals_valid: true,
            indexed: true,
        };
        let root = t.intern("total");
        t.nodes.push(TreeNode {
            parent: NO_PARENT,
            name: root,
            self_value: 0,
            total: 0,
        });
        t
    }

    fn ensure_index(&mut self) {
        if self.indexed {
            return;
        }
        self.name_ids.clear();
        for (i, n) in self.names.iter().enumerate() {
            self.name_ids.entry(n.clone()).or_insert(i as u32);
        }
        self.children.clear();
        for (i, n) in self.nodes.iter().enumerate().skip(1) {
            self.children.insert((n.parent, n.name), i as u32);
        }
        self.indexed = true;
    }

    /// A tree of `pairs` (`(gid, self value)` of `frames`, any order).
    pub fn from_frames(frames: &FrameTree, pairs: &[(u32, i64)]) -> CallTree {
        let mut t = CallTree::new();
        t.indexed = false;
        let mut node_of: FxHashMap<u32, u32> = FxHashMap::default();
        node_of.insert(ROOT_GID, ROOT);
        let mut name_of: FxHashMap<u32, u32> = FxHashMap::default();
        name_of.insert(0, 0);
        let mut path = Vec::new();
        for &(gid, v) in pairs {
            if v == 0 {
                continue;
            }
            // The root maps to ROOT, so the climb always ends on a known node.
            let mut parent = frames
                .climb_until(gid, &mut path, |g| node_of.get(&g).copied())
                .unwrap_or(ROOT);
            for &g in path.iter().rev() {
                let gname = frames.name_of(g);
                let name = *name_of.entry(gname).or_insert_with(|| {
                    t.names.push(frames.name(gname).to_string());
                    (t.names.len() - 1) as u32
                });
                t.nodes.push(TreeNode {
                    parent,
                    name,
                    self_value: 0,
                    total: 0,
                });
                parent = (t.nodes.len() - 1) as u32;
                node_of.insert(g, parent);
            }
            if let Some(n) = t.nodes.get_mut(parent as usize) {
                n.self_value = n.self_value.saturating_add(v);
            }
            t.totals_valid = false;
        }
        t
    }

    /// The id of frame name `name`, added if new.
    pub fn intern(&mut self, name: &str) -> u32 {
        self.ensure_index();
        if let Some(&id) = self.name_ids.get(name) {
            return id;
        }
        let id = self.names.len() as u32;
        self.names.push(name.to_string());
        self.name_ids.insert(name.to_string(), id);
        id
    }

    /// The child of `parent` named `name`, added if new.
    pub fn child(&mut self, parent: u32, name: u32) -> u32 {
        self.ensure_index();
        *self.children.entry((parent, name)).or_insert_with(|| {
            self.nodes.push(TreeNode {
                parent,
                name,
                self_value: 0,
                total: 0,
            });
            (self.nodes.len() - 1) as u32
        })
    }

    /// Adds `v` to `node`'s self value.
    pub fn add_self(&mut self, node: u32, v: i64) {
        if let Some(n) = self.nodes.get_mut(node as usize) {
            n.self_value = n.self_value.saturating_add(v);
            self.totals_valid = false;
        }
    }

    /// Adds a root-first stack of frame names with `value`.
    pub fn add_stack<S: AsRef<str>>(&mut self, frames: &[S], value: i64) {
        let mut node = ROOT;
        for f in frames {
            let name = self.intern(f.as_ref());
            node = self.child(node, name);
        }
        self.add_self(node, value);
    }

    /// Merges `other` into `self`.
    pub fn merge(&mut self, other: &CallTree) {
        // Nothing to add (typically an empty head part): leave a bulk-built tree
        // without its lookup maps.
        if other.is_empty() {
            return;
        }
        // Each distinct name is hashed once, not once per node.
        let names: Vec<u32> = other.names.iter().map(|n| self.intern(n)).collect();
        let mut mapped = vec![ROOT; other.nodes.len()];
        for (i, n) in other.nodes.iter().enumerate().skip(1) {
            let parent = mapped[n.parent as usize];
            let name = names[n.name as usize];
            let node = self.child(parent, name);
            mapped[i] = node;
            if n.self_value != 0 {
                self.add_self(node, n.self_value);
            }
        }
        if other.nodes[0].self_value != 0 {
            self.add_self(ROOT, other.nodes[0].self_value);
        }
    }

    /// Recomputes inclusive totals (children always follow their parent).
    pub fn finalize(&mut self) {
        for n in self.nodes.iter_mut() {
            n.total = n.self_value;
        }
        for i in (1..self.nodes.len()).rev() {
            let (t, p) = (self.nodes[i].total, self.nodes[i].parent as usize);
            self.nodes[p].total = self.nodes[p].total.saturating_add(t);
        }
        self.totals_valid = true;
    }

    /// The nodes, parents before children.
    pub fn nodes(&self) -> &[TreeNode] {
        &self.nodes
    }

    /// The frame name of id `id`.
    pub fn name(&self, id: u32) -> &str {
        self.names.get(id as usize).map_or("", |s| s.as_str())
    }

    /// The frame name of `node`.
    pub fn node_name(&self, node: u32) -> &str {
        self.nodes
            .get(node as usize)
            .map_or("", |n| self.name(n.name))
    }

    /// Sum of all values.
    pub fn total(&self) -> i64 {
        if self.totals_valid {
            self.nodes[0].total
        } else {
            self.nodes.iter().map(|n| n.self_value).sum()
        }
    }

    /// True when no sample was added.
    pub fn is_empty(&self) -> bool {
        self.nodes.iter().all(|n| n.self_value == 0)
    }

    /// Root-first frame names of `node`.
    pub fn path(&self, node: u32) -> Vec<&str> {
        let mut out = Vec::new();
        let mut n = node;
        while n != ROOT && (n as usize) < self.nodes.len() {
            out.push(self.node_name(n));
            n = self.nodes[n as usize].parent;
        }
        out.reverse();
        out
    }

    /// Stacks with a self value, as `a;b;c → value`, sorted by stack.
    pub fn folded(&self) -> std::collections::BTreeMap<String, i64> {
        let mut out = std::collections::BTreeMap::new();
        for (i, n) in self.nodes.iter().enumerate() {
            if n.self_value != 0 {
                *out.entry(self.path(i as u32).join(";")).or_insert(0) += n.self_value;
            }
        }
        out
    }

    /// Folded text, one `stack value` line per stack.
    pub fn to_folded_text(&self) -> String {
        let mut s = String::new();
        for (k, v) in self.folded() {
            s.push_str(&k);
            s.push(' ');
            s.push_str(&v.to_string());
            s.push('\n');
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn totals_and_merge() {
        let mut a = CallTree::new();
        a.add_stack(&["main", "work"], 3);
        a.add_stack(&["main"], 1);
        let mut b = CallTree::new();
        b.add_stack(&["main", "work"], 2);
        b.add_stack(&["main", "idle"], 5);
        a.merge(&b);
        a.finalize();
        assert_eq!(a.total(), 11);
        let f = a.folded();
        assert_eq!(f["main;work"], 5);
        assert_eq!(f["main;idle"], 5);
        assert_eq!(f["main"], 1);
        let children = |p: u32| -> Vec<u32> {
            (1..a.nodes().len() as u32)
                .filter(|&i| a.nodes()[i as usize].parent == p)
                .collect()
        };
        let main = children(ROOT)[0];
        assert_eq!(a.nodes()[main as usize].total, 11);
        let mut names: Vec<&str> = children(main).iter().map(|&n| a.node_name(n)).collect();
        names.sort_unstable();
        assert_eq!(names, vec!["idle", "work"]);
    }
}
