//! GWP-style group-by: pick keys among the label names and the stack-derived
//! dimensions, filter on the rest, project and sum.
//!
//! Stack-derived keys: `function` (the leaf frame, i.e. self value), `function_total`
//! (every distinct frame of the stack, so a function is counted once per stack that
//! contains it, however often it recurses), and `binary` (the mapping file of the
//! leaf). Function filters are resolved to function ids once per source (through the
//! tantivy index for segments), then to a per-stack-node flag in one forward pass over
//! the stack tree, so no frame is matched against a regex per row.

use parking_lot::RwLock;
use regex::Regex;
use roaring::RoaringBitmap;
use rustc_hash::FxHashMap;

use super::frames::frame_name;
use super::frames::{FrameTree, ROOT_GID};
use super::interner::Interner;
use super::scratch::{Memo, Scratch};
use super::{node_values, selection, Source, TimeRange};
use crate::dict::{Dict, NO_PARENT};
use crate::error::{QueryError, Result, StorageError};
use crate::selector::Selector;

/// Group-by key: the leaf function of a stack (self value).
pub const KEY_FUNCTION: &str = "function";
/// Group-by key: every function on a stack (inclusive value).
pub const KEY_FUNCTION_TOTAL: &str = "function_total";
/// Group-by key: the binary (mapping file) of a stack's leaf.
pub const KEY_BINARY: &str = "binary";

/// One dimension a group-by projects onto.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum GroupKey {
    /// A series label, by name.
    Label(String),
    /// The leaf function (self value).
    Function,
    /// Every function on the stack (inclusive value).
    FunctionTotal,
    /// The binary of the leaf frame.
    Binary,
}

impl GroupKey {
    /// `function`, `function_total`, `binary`, or else a label name.
    pub fn parse(s: &str) -> GroupKey {
        match s {
            KEY_FUNCTION => GroupKey::Function,
            KEY_FUNCTION_TOTAL => GroupKey::FunctionTotal,
            KEY_BINARY => GroupKey::Binary,
            other => GroupKey::Label(other.to_string()),
        }
    }

    /// The key as written in a request.
    pub fn name(&self) -> &str {
        match self {
            GroupKey::Label(l) => l,
            GroupKey::Function => KEY_FUNCTION,
            GroupKey::FunctionTotal => KEY_FUNCTION_TOTAL,
            GroupKey::Binary => KEY_BINARY,
        }
    }

    fn is_stack_derived(&self) -> bool {
        !matches!(self, GroupKey::Label(_))
    }
}

/// A group-by query (besides the selector and range).
#[derive(Clone, Debug, Default)]
pub struct GroupByQuery {
    /// The dimensions rows are keyed by, in order.
    pub keys: Vec<GroupKey>,
    /// Keep only stacks with a frame whose function name matches.
    pub include: Option<Regex>,
    /// Drop stacks with a frame whose function name matches.
    pub exclude: Option<Regex>,
    /// Most distinct groups one query may hold before it is refused.
    pub max_groups: usize,
}

impl GroupByQuery {
    /// The label-name keys, in key order.
    fn label_keys(&self) -> Vec<&str> {
        self.keys
            .iter()
            .filter_map(|k| match k {
                GroupKey::Label(l) => Some(l.as_str()),
                _ => None,
            })
            .collect()
    }
}

/// Rows keyed by the key values, plus the total of the samples that passed the filters.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct GroupAcc {
    /// Sum per combination of key values (in key order).
    pub rows: FxHashMap<Vec<String>, i64>,
    /// Sum of every sample that passed the filters.
    pub total: i64,
}

impl GroupAcc {
    /// Adds `other`'s rows and total.
    pub fn merge(&mut self, other: &GroupAcc) {
        self.total = self.total.saturating_add(other.total);
        for (k, v) in &other.rows {
            let e = self.rows.entry(k.clone()).or_insert(0);
            *e = e.saturating_add(*v);
        }
    }

    /// Approximate heap bytes (the cache's weight).
    pub fn approx_bytes(&self) -> usize {
        self.rows
            .keys()
            .map(|k| 48 + k.iter().map(|s| s.len() + 24).sum::<usize>())
            .sum::<usize>()
            + 64
    }

    /// Rows sorted by value descending (ties by key), at most `limit` (0 = all).
    pub fn sorted(&self, limit: usize) -> Vec<(Vec<String>, i64)> {
        let mut rows: Vec<(Vec<String>, i64)> =
            self.rows.iter().map(|(k, v)| (k.clone(), *v)).collect();
        rows.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
        if limit > 0 {
            rows.truncate(limit);
        }
        rows
    }
}

/// Bit set in a filter memo entry when some frame on the path root..=node matches
/// the include set.
const HAS_INCLUDED: u32 = 1;
/// Likewise for the exclude set.
const HAS_EXCLUDED: u32 = 2;

/// The function filters of one source, resolved to flags per function id.
struct NodeFilter {
    /// `HAS_INCLUDED` / `HAS_EXCLUDED` per function id of the source's dictionary
    /// (a flat array: the climb checks every ancestor of every stack it sees).
    functions: Vec<u8>,
    include: bool,
    exclude: bool,
    /// The flags of every stack node, once the query has seen enough of them (see
    /// [`NodeFilter::observe`]); empty until then.
    dense: Vec<u8>,
    /// Stack nodes looked up so far in this source.
    seen: usize,
}

/// Past one looked-up node for this many nodes of the dictionary, one forward pass
/// over the whole stack tree costs less than climbing from each node: the climb's
/// memo and parent lookups land at random in arrays of the tree's size (cache
/// misses), the pass reads them in order into a byte per node.
const DENSE_AFTER: usize = 128;

impl NodeFilter {
    fn new(
        src: &dyn Source,
        q: &GroupByQuery,
        resolve: &dyn Fn(&dyn Source, &Regex) -> Result<RoaringBitmap>,
    ) -> Result<NodeFilter> {
        let mut f = NodeFilter {
            functions: Vec::new(),
            include: q.include.is_some(),
            exclude: q.exclude.is_some(),
            dense: Vec::new(),
            seen: 0,
        };
        if f.is_noop() {
            return Ok(f);
        }
        f.functions = vec![0; src.dict().functions.len()];
        for (re, flag) in [(&q.include, HAS_INCLUDED), (&q.exclude, HAS_EXCLUDED)] {
            let Some(re) = re else { continue };
            for id in resolve(src, re)?.iter() {
                if let Some(slot) = f.functions.get_mut(id as usize) {
                    *slot |= flag as u8;
                }
            }
        }
        Ok(f)
    }

    fn is_noop(&self) -> bool {
        !self.include && !self.exclude
    }

    /// Counts `nodes` more lookups to come; once they pass 1/[`DENSE_AFTER`] of the
    /// stack tree, computes every node's flags in one pass (parents come before
    /// their children, so each node ORs its own function's flags into its parent's).
    fn observe(&mut self, dict: &Dict, nodes: usize) {
        if self.is_noop() || !self.dense.is_empty() {
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

/// The selected series of `src` grouped by their values of the label keys (an empty
/// string where a series lacks a key), in order of first appearance.
fn by_label_values(
    src: &dyn Source,
    series: &RoaringBitmap,
    label_keys: &[&str],
) -> Vec<(Vec<String>, RoaringBitmap)> {
    let mut groups: Vec<(Vec<String>, RoaringBitmap)> = Vec::new();
    let mut ids: FxHashMap<Vec<String>, usize> = FxHashMap::default();
    for sid in series.iter() {
        let labels = src.labels(sid);
        let lv: Vec<String> = label_keys
            .iter()
            .map(|name| labels.and_then(|l| l.get(name)).unwrap_or("").to_string())
            .collect();
        let g = *ids.entry(lv.clone()).or_insert_with(|| {
            groups.push((lv, RoaringBitmap::new()));
            groups.len() - 1
        });
        groups[g].1.insert(sid);
    }
    groups
}

fn binary_name(dict: &Dict, loc: u32) -> &str {
    dict.locations
        .get(loc as usize)
        .and_then(|l| l.mapping)
        .and_then(|m| dict.mappings.get(m as usize))
        .map(|m| dict.str(m.file))
        .unwrap_or_default()
}

/// Adds the group-by rows of `src` to `acc`. `resolve` maps a function regex to the
/// matching function ids of `src`'s dictionary.
#[allow(clippy::too_many_arguments)]
pub fn group_into(
    src: &dyn Source,
    sel: &Selector,
    range: TimeRange,
    q: &GroupByQuery,
    resolve: &dyn Fn(&dyn Source, &Regex) -> Result<RoaringBitmap>,
    acc: &mut GroupAcc,
    scratch: &mut Scratch,
) -> Result<()> {
    let Some((series, lo, hi)) = selection(src, sel, range) else {
        return Ok(());
    };
    let dict = src.dict();
    let label_keys = q.label_keys();
    let stack_keys = q.keys.iter().any(GroupKey::is_stack_derived);
    let mut filter = NodeFilter::new(src, q, resolve)?;

    let groups = by_label_values(src, &series, &label_keys);

    scratch.keep.prepare(dict.node_count());
    scratch.names.prepare(dict.locations.len());
    scratch.nodes.prepare(dict.locations.len());
    // Strings of this source's stack-derived key values, each interned once.
    let mut names = Interner::default();
    // Per (group, stack-derived key ids): the summed value. Label keys are implied by
    // the group.
    let mut rows: FxHashMap<(usize, Vec<u32>), i64> = FxHashMap::default();
    let mut pairs = std::mem::take(&mut scratch.pairs);
    let mut path = std::mem::take(&mut scratch.path);
    let mut choices: Vec<Vec<u32>> = Vec::with_capacity(q.keys.len());
    let mut frames: Vec<u32> = Vec::new();
    let result = (|| -> Result<()> {
        for (g, (_, members)) in groups.iter().enumerate() {
            node_values(src, members, lo, hi, scratch)?;
            std::mem::swap(&mut pairs, &mut scratch.pairs);
            filter.observe(dict, pairs.len());
            for &(node, v) in &pairs {
                if !filter.is_noop() && !filter.keeps(dict, node, &mut scratch.keep, &mut path) {
                    continue;
                }
                acc.total = acc.total.saturating_add(v);
                if !stack_keys {
                    let e = rows.entry((g, Vec::new())).or_insert(0);
                    *e = e.saturating_add(v);
                    continue;
                }
                choices.clear();
                for k in &q.keys {
                    let leaf_loc = dict.node_locations.get(node as usize).copied().unwrap_or(0);
                    match k {
                        GroupKey::Label(_) => {}
                        GroupKey::Function => {
                            let id = match scratch.names.get(leaf_loc) {
                                Some(id) => id,
                                None => {
                                    let id = names.intern(&frame_name(dict, leaf_loc));
                                    scratch.names.set(leaf_loc, id);
                                    id
                                }
                            };
                            choices.push(vec![id]);
                        }
                        GroupKey::Binary => {
                            let id = match scratch.nodes.get(leaf_loc) {
                                Some(id) => id,
                                None => {
                                    let id = names.intern(binary_name(dict, leaf_loc));
                                    scratch.nodes.set(leaf_loc, id);
                                    id
                                }
                            };
                            choices.push(vec![id]);
                        }
                        GroupKey::FunctionTotal => {
                            frames.clear();
                            let mut n = node;
                            loop {
                                let loc = dict.node_locations.get(n as usize).copied().unwrap_or(0);
                                let id = match scratch.names.get(loc) {
                                    Some(id) => id,
                                    None => {
                                        let id = names.intern(&frame_name(dict, loc));
                                        scratch.names.set(loc, id);
                                        id
                                    }
                                };
                                if !frames.contains(&id) {
                                    frames.push(id);
                                }
                                match dict.parents.get(n as usize) {
                                    Some(&p) if p != NO_PARENT && p < n => n = p,
                                    _ => break,
                                }
                            }
                            choices.push(frames.clone());
                        }
                    }
                }
                // Rows are the cartesian product of the choices (only `function_total`
                // offers more than one).
                for_each_product(&choices, |key| {
                    let e = rows.entry((g, key)).or_insert(0);
                    *e = e.saturating_add(v);
                });
                if q.max_groups > 0 && rows.len() > q.max_groups {
                    return Err(too_many_groups(q.max_groups));
                }
            }
        }
        Ok(())
    })();
    scratch.pairs = pairs;
    scratch.path = path;
    scratch.end_source();
    result?;

    // Back to strings, in key order.
    for ((g, ids), v) in rows {
        let label_vals = &groups[g].0;
        let (mut li, mut si) = (0, 0);
        let key: Vec<String> = q
            .keys
            .iter()
            .map(|k| {
                if k.is_stack_derived() {
                    si += 1;
                    ids.get(si - 1)
                        .map(|&id| names.get(id).to_string())
                        .unwrap_or_default()
                } else {
                    li += 1;
                    label_vals.get(li - 1).cloned().unwrap_or_default()
                }
            })
            .collect();
        let e = acc.rows.entry(key).or_insert(0);
        *e = e.saturating_add(v);
    }
    if q.max_groups > 0 && acc.rows.len() > q.max_groups {
        return Err(too_many_groups(q.max_groups));
    }
    Ok(())
}

/// Calls `f` with every key of the cartesian product of `choices` (one value per
/// key position). Nothing when some position has no choice.
fn for_each_product<T: Clone>(choices: &[Vec<T>], mut f: impl FnMut(Vec<T>)) {
    if choices.iter().any(Vec::is_empty) {
        return;
    }
    let mut idx = vec![0usize; choices.len()];
    loop {
        f(idx
            .iter()
            .zip(choices)
            .map(|(&i, c)| c[i].clone())
            .collect());
        // Advance the odometer; done when it wraps around.
        let mut d = choices.len();
        loop {
            if d == 0 {
                return;
            }
            d -= 1;
            idx[d] += 1;
            if idx[d] < choices[d].len() {
                break;
            }
            idx[d] = 0;
        }
    }
}

fn too_many_groups(max: usize) -> StorageError {
    QueryError::too_many_groups(max).into()
}

/// A thread's group-by over frame-tree ids (see [`super::frames`]): sums per
/// (label group, frame) across every source the thread scanned, converted to rows
/// once per query by [`FrameGroups::into_rows`].
#[derive(Default, Debug, Clone)]
pub struct FrameGroups {
    groups: Vec<Vec<String>>,
    group_ids: FxHashMap<Vec<String>, u32>,
    /// `(group, gid)` → sum; gid is the root when no key is stack-derived.
    values: FxHashMap<(u32, u32), i64>,
    pub total: i64,
}

/// Whether a query can run over frame ids: `binary` needs each leaf's mapping,
/// which is per location, not per frame name.
pub fn frames_can_group(q: &GroupByQuery) -> bool {
    !q.keys.contains(&GroupKey::Binary)
}

impl FrameGroups {
    pub fn approx_bytes(&self) -> usize {
        self.values.len() * 24
            + self
                .groups
                .iter()
                .map(|g| 48 + g.iter().map(|s| s.len() + 24).sum::<usize>())
                .sum::<usize>()
            + 128
    }

    /// Keeps only what [`FrameGroups::add`] reads (a cached per-segment part).
    pub fn shrink_for_cache(&mut self) {
        self.group_ids = FxHashMap::default();
    }

    /// The id of the group with label values `lv`, created on first sight.
    fn group_id(&mut self, lv: &[String]) -> u32 {
        if let Some(&g) = self.group_ids.get(lv) {
            return g;
        }
        let g = self.groups.len() as u32;
        self.groups.push(lv.to_vec());
        self.group_ids.insert(lv.to_vec(), g);
        g
    }

    /// Adds another accumulator's sums (a cached per-segment part) to this one.
    pub fn add(&mut self, other: &FrameGroups) {
        self.total = self.total.saturating_add(other.total);
        let map: Vec<u32> = other.groups.iter().map(|lv| self.group_id(lv)).collect();
        for (&(g, gid), &v) in &other.values {
            let g = map.get(g as usize).copied().unwrap_or(0);
            let e = self.values.entry((g, gid)).or_insert(0);
            *e = e.saturating_add(v);
        }
    }

    /// Rows of all threads' accumulators, keyed by strings in `q.keys` order.
    pub fn into_rows(
        accs: Vec<FrameGroups>,
        tree: &FrameTree,
        q: &GroupByQuery,
    ) -> Result<GroupAcc> {
        let mut out = GroupAcc::default();
        let stack_keys = q.keys.iter().any(GroupKey::is_stack_derived);
        let mut path_names: FxHashMap<u32, Vec<u32>> = FxHashMap::default();
        for acc in accs {
            out.total = out.total.saturating_add(acc.total);
            for ((g, gid), v) in acc.values {
                // With stack keys every value sits on a frame; the root has no name.
                if stack_keys && gid == ROOT_GID {
                    continue;
                }
                let labels = acc.groups.get(g as usize).map_or(&[][..], |l| &l[..]);
                let mut choices: Vec<Vec<String>> = Vec::with_capacity(q.keys.len());
                let mut li = 0;
                for k in &q.keys {
                    match k {
                        GroupKey::Label(_) => {
                            choices.push(vec![labels.get(li).cloned().unwrap_or_default()]);
                            li += 1;
                        }
                        GroupKey::Function | GroupKey::Binary => {
                            choices.push(vec![tree.name(tree.name_of(gid)).to_string()]);
                        }
                        GroupKey::FunctionTotal => {
                            let names = path_names.entry(gid).or_insert_with(|| {
                                let mut names = Vec::new();
                                let mut g = gid;
                                while g != ROOT_GID {
                                    let n = tree.name_of(g);
                                    if !names.contains(&n) {
                                        names.push(n);
                                    }
                                    let p = tree.parent(g);
                                    g = if p < g { p } else { ROOT_GID };
                                }
                                names
                            });
                            choices.push(names.iter().map(|&n| tree.name(n).to_string()).collect());
                        }
                    }
                }
                for_each_product(&choices, |key| {
                    let e = out.rows.entry(key).or_insert(0);
                    *e = e.saturating_add(v);
                });
                if q.max_groups > 0 && out.rows.len() > q.max_groups {
                    return Err(too_many_groups(q.max_groups));
                }
            }
        }
        Ok(out)
    }
}

/// Adds `src`'s selected samples to `acc` by (label group, frame id).
#[allow(clippy::too_many_arguments)]
pub fn group_frames(
    src: &dyn Source,
    sel: &Selector,
    range: TimeRange,
    q: &GroupByQuery,
    resolve: &dyn Fn(&dyn Source, &Regex) -> Result<RoaringBitmap>,
    tree: &RwLock<FrameTree>,
    acc: &mut FrameGroups,
    scratch: &mut Scratch,
) -> Result<()> {
    let Some((series, lo, hi)) = selection(src, sel, range) else {
        return Ok(());
    };
    let dict = src.dict();
    let label_keys = q.label_keys();
    let stack_keys = q.keys.iter().any(GroupKey::is_stack_derived);

    // Series grouped by their values of the label keys, as the accumulator's ids.
    let members: Vec<(u32, RoaringBitmap)> = by_label_values(src, &series, &label_keys)
        .into_iter()
        .map(|(lv, set)| (acc.group_id(&lv), set))
        .collect();

    // The function filters are applied to this source's stack nodes before they
    // are resolved to frame ids: only the stacks a filtered query keeps are added to
    // the frame tree (the first query after a restart resolves far fewer).
    let mut filter = NodeFilter::new(src, q, resolve)?;
    let generation = tree.read().generation();
    let slots = src
        .gid_memo()
        .map(|m| m.slots(generation, dict.node_count()));
    let mut per_group: Vec<(u32, Vec<(u32, i64)>)> = Vec::with_capacity(members.len());
    let mut gid_pairs = Vec::new();
    let mut path = std::mem::take(&mut scratch.path);
    scratch.keep.prepare(dict.node_count());
    let result = (|| -> Result<()> {
        for (g, set) in &members {
            node_values(src, set, lo, hi, scratch)?;
            if !filter.is_noop() {
                filter.observe(dict, scratch.pairs.len());
                let keep = &mut scratch.keep;
                scratch
                    .pairs
                    .retain(|&(node, _)| filter.keeps(dict, node, keep, &mut path));
            }
            scratch.path = std::mem::take(&mut path);
            scratch.pairs_to_frames(tree, dict, slots.as_deref());
            path = std::mem::take(&mut scratch.path);
            scratch.gids.drain(&mut gid_pairs);
            per_group.push((*g, std::mem::take(&mut gid_pairs)));
        }
        Ok(())
    })();
    scratch.path = path;
    scratch.end_source();
    result?;

    for (g, pairs) in per_group {
        for (gid, v) in pairs {
            acc.total = acc.total.saturating_add(v);
            let key = (g, if stack_keys { gid } else { ROOT_GID });
            let e = acc.values.entry(key).or_insert(0);
            *e = e.saturating_add(v);
        }
    }
    if q.max_groups > 0 && acc.values.len() > q.max_groups.saturating_mul(64) {
        return Err(too_many_groups(q.max_groups));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dict::{DictBuilder, LocationRec};
    use proptest::prelude::*;

    proptest! {
        /// The dense pass gives every node the flags the memoised climb gives it.
        #[test]
        fn dense_flags_equal_the_climb(
            stacks in prop::collection::vec(prop::collection::vec(0u32..12, 1..8), 1..40),
            included in prop::collection::vec(any::<bool>(), 12),
            excluded in prop::collection::vec(any::<bool>(), 12),
        ) {
            let mut b = DictBuilder::new();
            let locs: Vec<u32> = (0..12)
                .map(|i| {
                    let f = b.function(&format!("f{i}"), "file.c");
                    b.location(LocationRec { function: Some(f), mapping: None, address: 0, line: 0 })
                })
                .collect();
            for s in &stacks {
                let path: Vec<u32> = s.iter().map(|&i| locs[i as usize]).collect();
                b.stack(&path);
            }
            let dict = b.finish();
            let functions: Vec<u8> = (0..dict.functions.len())
                .map(|i| {
                    (if included[i] { HAS_INCLUDED as u8 } else { 0 })
                        | (if excluded[i] { HAS_EXCLUDED as u8 } else { 0 })
                })
                .collect();
            let filter = || NodeFilter {
                functions: functions.clone(),
                include: true,
                exclude: true,
                dense: Vec::new(),
                seen: 0,
            };
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
    }
}
