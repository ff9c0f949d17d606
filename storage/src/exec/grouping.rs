//! GWP-style group-by: pick keys among the label names and the stack-derived
//! dimensions, filter on the rest, project and sum.
//!
//! Stack-derived keys: `function` (the leaf frame, i.e. self value), `function_total`
//! (every distinct frame of the stack, so a function is counted once per stack that
//! contains it, however often it recurses), and `binary` (the mapping file of the
//! leaf). Function filters are resolved to function ids once per source (through the
//! function-name index for segments), then to a per-stack-node flag in one forward pass over
//! the stack tree, so no frame is matched against a regex per row.

use parking_lot::RwLock;
use regex::Regex;
use roaring::RoaringBitmap;
use rustc_hash::FxHashMap;

use super::frames::{frame_name, location_frames};
use super::frames::{FrameTree, GidSlots, ROOT_GID};
use super::interner::Interner;
use super::node_filter::NodeFilter;
use super::scratch::Scratch;
use super::{node_values, selection, Source, TimeRange};
use crate::dict::{Dict, NO_PARENT};
use crate::error::{QueryError, Result, StorageError};
use crate::index::LabelIndex;
use crate::model::Labels;
use crate::selector::Selector;
use profiledb_symbolize::Symbolizer;

/// Group-by key: the leaf function of a stack (self value).
pub const KEY_FUNCTION: &str = "function";
/// Group-by key: every function on a stack (inclusive value).
pub const KEY_FUNCTION_TOTAL: &str = "function_total";
/// Group-by key: the binary (mapping file) of a stack's leaf.
pub const KEY_BINARY: &str = "binary";
/// Group-by key: the source line of a stack's leaf, `file:line`.
pub const KEY_LINE: &str = "line";

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
    /// The leaf frame's `file:line` (its innermost frame's, where calls were
    /// inlined; the frame's name when it has no file).
    Line,
}

impl GroupKey {
    /// `function`, `function_total`, `binary`, `line`, or else a label name.
    pub fn parse(s: &str) -> GroupKey {
        match s {
            KEY_FUNCTION => GroupKey::Function,
            KEY_FUNCTION_TOTAL => GroupKey::FunctionTotal,
            KEY_BINARY => GroupKey::Binary,
            KEY_LINE => GroupKey::Line,
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
            GroupKey::Line => KEY_LINE,
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
    pub(crate) fn label_keys(&self) -> Vec<&str> {
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

/// The selected series of `src` grouped by their values of the label keys (an empty
/// string where a series lacks a key).
///
/// Split key by key through the label index (a bitmap intersection per group and
/// value) rather than by looking up every series' labels: a segment holds a
/// thousand series of a fleet but a key has a few values. A key with more values
/// than there are selected series is looked up per series instead.
fn by_label_values(
    src: &dyn Source,
    series: &RoaringBitmap,
    label_keys: &[&str],
) -> Vec<(Vec<String>, RoaringBitmap)> {
    split_by_index(src.index(), series, label_keys)
        .unwrap_or_else(|| split_per_series(|s| src.labels(s), series, label_keys))
}

/// `None` when a key has more values than `series` has members.
fn split_by_index(
    index: &LabelIndex,
    series: &RoaringBitmap,
    label_keys: &[&str],
) -> Option<Vec<(Vec<String>, RoaringBitmap)>> {
    let mut groups = Vec::new();
    if !series.is_empty() {
        groups.push((Vec::new(), series.clone()));
    }
    for name in label_keys {
        let values: Vec<(&str, &RoaringBitmap)> = index.values(name).collect();
        if values.len() as u64 > series.len() {
            return None;
        }
        let mut next = Vec::with_capacity(groups.len() * (values.len() + 1));
        for (key, set) in groups {
            let mut rest = set.clone();
            let mut blank: Option<RoaringBitmap> = None;
            for &(value, postings) in &values {
                let part = &set & postings;
                if part.is_empty() {
                    continue;
                }
                rest -= &part;
                if value.is_empty() {
                    blank = Some(part);
                    continue;
                }
                let mut k = key.clone();
                k.push(value.to_string());
                next.push((k, part));
            }
            // A series without the key groups with those whose value is empty.
            let blank = match blank {
                Some(b) => b | rest,
                None => rest,
            };
            if !blank.is_empty() {
                let mut k = key;
                k.push(String::new());
                next.push((k, blank));
            }
        }
        groups = next;
    }
    Some(groups)
}

fn split_per_series<'a>(
    labels: impl Fn(u32) -> Option<&'a Labels>,
    series: &RoaringBitmap,
    label_keys: &[&str],
) -> Vec<(Vec<String>, RoaringBitmap)> {
    let mut groups: Vec<(Vec<String>, RoaringBitmap)> = Vec::new();
    let mut ids: FxHashMap<Vec<String>, usize> = FxHashMap::default();
    for sid in series.iter() {
        let labels = labels(sid);
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
    symbols: Option<&Symbolizer>,
) -> Result<()> {
    let Some((series, lo, hi)) = selection(src, sel, range) else {
        return Ok(());
    };
    let dict = src.dict()?;
    let label_keys = q.label_keys();
    let stack_keys = q.keys.iter().any(GroupKey::is_stack_derived);
    let mut filter = NodeFilter::new(src, q.include.as_ref(), q.exclude.as_ref(), resolve)?;
    if filter.passes_nothing() {
        return Ok(());
    }

    let groups = by_label_values(src, &series, &label_keys);

    scratch.names.prepare(dict.locations.len());
    scratch.nodes.prepare(dict.locations.len());
    // Strings of this source's stack-derived key values, each interned once.
    let mut names = Interner::default();
    // Per (group, stack-derived key ids): the summed value. Label keys are implied by
    // the group.
    let mut rows: FxHashMap<(usize, Vec<u32>), i64> = FxHashMap::default();
    let mut pairs = std::mem::take(&mut scratch.pairs);
    let mut choices: Vec<Vec<u32>> = Vec::with_capacity(q.keys.len());
    let mut frames: Vec<u32> = Vec::new();
    let result = (|| -> Result<()> {
        for (g, (_, members)) in groups.iter().enumerate() {
            filter.node_values(src, members, lo, hi, scratch)?;
            std::mem::swap(&mut pairs, &mut scratch.pairs);
            for &(node, v) in &pairs {
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
                                    let id = names.intern(&frame_name(dict, leaf_loc, symbols));
                                    scratch.names.set(leaf_loc, id);
                                    id
                                }
                            };
                            choices.push(vec![id]);
                        }
                        GroupKey::Line => {
                            let frames = location_frames(dict, leaf_loc, symbols);
                            let line = frames.last().map_or_else(String::new, |f| {
                                if f.file.is_empty() {
                                    f.name.to_string()
                                } else {
                                    format!("{}:{}", f.file, f.line)
                                }
                            });
                            choices.push(vec![names.intern(&line)]);
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
                                        let id = names.intern(&frame_name(dict, loc, symbols));
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

/// A thread's group-by over the frame tree (see [`super::frames`]): sums per
/// (label group, stack key) across every source the thread scanned, converted to
/// rows once per query by [`FrameGroups::into_rows`].
#[derive(Default, Debug, Clone)]
pub struct FrameGroups {
    groups: Vec<Vec<String>>,
    group_ids: FxHashMap<Vec<String>, u32>,
    /// `(group, key)` → sum; the key is what the query's [`StackKey`] says: a
    /// frame id, a frame name id, or the root when no key is stack-derived.
    values: FxHashMap<(u32, u32), i64>,
    pub total: i64,
}

/// Whether a query can run over frame ids: `binary` needs each leaf's mapping,
/// which is per location, not per frame name.
pub fn frames_can_group(q: &GroupByQuery) -> bool {
    !q.keys.contains(&GroupKey::Binary) && !q.keys.contains(&GroupKey::Line)
}

/// What a frame group-by keeps of a stack, and so what the second half of a
/// [`FrameGroups`] key is. Only `function_total` needs a stack's whole path of
/// names; a leaf function needs the leaf's name alone, which is one lookup per
/// distinct function, where a path is one frame-tree lookup per stack node (most
/// of the first query's CPU after a restart, before the warm-up resolved the day).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum StackKey {
    /// Label keys only: every value is keyed by [`ROOT_GID`].
    None,
    /// The leaf's frame name: keys are name ids of the query's frame tree.
    Leaf,
    /// The frame path: keys are frame-tree ids.
    Path,
}

impl StackKey {
    fn of(q: &GroupByQuery) -> StackKey {
        if q.keys.contains(&GroupKey::FunctionTotal) {
            StackKey::Path
        } else if q.keys.iter().any(GroupKey::is_stack_derived) {
            StackKey::Leaf
        } else {
            StackKey::None
        }
    }
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
        let stack_key = StackKey::of(q);
        let mut path_names: FxHashMap<u32, Vec<u32>> = FxHashMap::default();
        for acc in accs {
            out.total = out.total.saturating_add(acc.total);
            for ((g, gid), v) in acc.values {
                // With path keys every value sits on a frame; the root has no name.
                if stack_key == StackKey::Path && gid == ROOT_GID {
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
                        GroupKey::Function | GroupKey::Binary | GroupKey::Line => {
                            let name = match stack_key {
                                StackKey::Leaf => gid,
                                _ => tree.name_of(gid),
                            };
                            choices.push(vec![tree.name(name).to_string()]);
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

/// What grouping one source needs whatever step range is read: its selected
/// series split by label group, and the function filter over its stack nodes.
/// Built once per source and query, so a block read as several hours (see
/// `exec::shares`) resolves its filter and splits its series once.
pub struct SourceGroups {
    /// Label values of each group and its series.
    members: Vec<(Vec<String>, RoaringBitmap)>,
    filter: NodeFilter,
    stack_key: StackKey,
    max_groups: usize,
}

impl SourceGroups {
    /// `None` when `sel` selects no series of `src` or the filter keeps none of
    /// its stacks.
    pub fn new(
        src: &dyn Source,
        sel: &Selector,
        q: &GroupByQuery,
        resolve: &dyn Fn(&dyn Source, &Regex) -> Result<RoaringBitmap>,
    ) -> Result<Option<SourceGroups>> {
        let series = src.index().select(&sel.matchers);
        if series.is_empty() {
            return Ok(None);
        }
        // The function filters are applied to this source's stack nodes before
        // they are resolved to frame ids: only the stacks a filtered query keeps
        // are added to the frame tree (the first query after a restart resolves
        // far fewer).
        let filter = NodeFilter::new(src, q.include.as_ref(), q.exclude.as_ref(), resolve)?;
        if filter.passes_nothing() {
            return Ok(None);
        }
        Ok(Some(SourceGroups {
            members: by_label_values(src, &series, &q.label_keys()),
            filter,
            stack_key: StackKey::of(q),
            max_groups: q.max_groups,
        }))
    }

    /// Whether a function filter is set: only then is [`SourceGroups::nodes`] worth
    /// caching apart from the filtered part.
    pub fn filtered(&self) -> bool {
        !matches!(self.filter, NodeFilter::All)
    }

    /// The samples of `src` in steps `[lo, hi)` per label group and stack node,
    /// without the function filter (see [`GroupNodes`]).
    pub fn nodes(
        &self,
        src: &dyn Source,
        (lo, hi): (u32, u32),
        scratch: &mut Scratch,
    ) -> Result<GroupNodes> {
        let mut groups = Vec::with_capacity(self.members.len());
        let result = (|| -> Result<()> {
            for (values, set) in &self.members {
                node_values(src, set, lo, hi, scratch)?;
                if !scratch.pairs.is_empty() {
                    groups.push((values.clone(), scratch.pairs.clone()));
                }
            }
            Ok(())
        })();
        scratch.end_source();
        result?;
        Ok(GroupNodes { groups })
    }

    /// Adds the samples of `src` in steps `[lo, hi)` to `acc` by (label group,
    /// frame id).
    pub fn add(
        &mut self,
        src: &dyn Source,
        (lo, hi): (u32, u32),
        tree: &RwLock<FrameTree>,
        acc: &mut FrameGroups,
        scratch: &mut Scratch,
    ) -> Result<()> {
        if lo >= hi {
            return Ok(());
        }
        let to_frames = ToFrames::new(src, tree);
        let result = (|| -> Result<()> {
            for (values, set) in &self.members {
                self.filter.node_values(src, set, lo, hi, scratch)?;
                let g = acc.group_id(values);
                self.sum_frames(g, &to_frames, tree, acc, scratch)?;
            }
            Ok(())
        })();
        scratch.end_source();
        result?;
        self.check_groups(acc)
    }

    /// Adds a share's unfiltered sums to `acc` through this query's function
    /// filter: the same sums [`SourceGroups::add`] gives for the share's steps.
    pub fn add_nodes(
        &mut self,
        src: &dyn Source,
        nodes: &GroupNodes,
        tree: &RwLock<FrameTree>,
        acc: &mut FrameGroups,
        scratch: &mut Scratch,
    ) -> Result<()> {
        let to_frames = ToFrames::new(src, tree);
        let lookups = nodes.groups.iter().map(|(_, pairs)| pairs.len()).sum();
        let result = (|| -> Result<()> {
            self.filter.expect_lookups(src, lookups)?;
            for (values, pairs) in &nodes.groups {
                scratch.pairs.clear();
                scratch.pairs.extend_from_slice(pairs);
                self.filter.retain_pairs(src, scratch)?;
                let g = acc.group_id(values);
                self.sum_frames(g, &to_frames, tree, acc, scratch)?;
            }
            Ok(())
        })();
        scratch.end_source();
        result?;
        self.check_groups(acc)
    }

    /// Adds `scratch.pairs` (stack node sums of group `g`) to `acc` by frame id.
    fn sum_frames(
        &self,
        g: u32,
        to_frames: &ToFrames<'_>,
        tree: &RwLock<FrameTree>,
        acc: &mut FrameGroups,
        scratch: &mut Scratch,
    ) -> Result<()> {
        let (src, slots) = (to_frames.src, to_frames.slots.as_deref());
        match self.stack_key {
            StackKey::Path => {
                scratch.pairs_to_frames(tree, || src.dict(), slots)?;
                // The node pairs are spent: their buffer takes the frame pairs.
                scratch.gids.drain(&mut scratch.pairs);
            }
            StackKey::Leaf => scratch.pairs_to_names(tree, || src.dict(), slots)?,
            StackKey::None => {}
        }
        acc.values.reserve(scratch.pairs.len());
        for &(key, v) in &scratch.pairs {
            acc.total = acc.total.saturating_add(v);
            let key = (
                g,
                if self.stack_key == StackKey::None {
                    ROOT_GID
                } else {
                    key
                },
            );
            let e = acc.values.entry(key).or_insert(0);
            *e = e.saturating_add(v);
        }
        Ok(())
    }

    fn check_groups(&self, acc: &FrameGroups) -> Result<()> {
        if self.max_groups > 0 && acc.values.len() > self.max_groups.saturating_mul(64) {
            return Err(too_many_groups(self.max_groups));
        }
        Ok(())
    }
}

/// What turns one source's `(stack node, value)` sums into frame ids: its memo,
/// and its tables for the nodes the memo lacks.
struct ToFrames<'s> {
    src: &'s dyn Source,
    slots: Option<std::sync::Arc<GidSlots>>,
}

impl<'s> ToFrames<'s> {
    fn new(src: &'s dyn Source, tree: &RwLock<FrameTree>) -> Self {
        let generation = tree.read().generation();
        ToFrames {
            src,
            slots: src
                .gid_memo()
                .map(|m| m.slots(generation, src.node_count())),
        }
    }
}

/// One source's samples in a step range, summed per stack node for each label group
/// of a selection, with no function filter. A filtered group-by caches this per
/// segment share beside its own filtered part: a filter never asked before is then
/// applied to each distinct stack of the share (thousands) instead of to each row
/// (millions), and only the first filter after a segment appears reads its rows.
#[derive(Debug, Default)]
pub struct GroupNodes {
    /// Label values, and `(stack node, value)` sorted by node, without zeros.
    groups: Vec<(Vec<String>, NodeSums)>,
}

/// `(stack node, value)` pairs of one source.
type NodeSums = Vec<(u32, i64)>;

impl GroupNodes {
    pub fn approx_bytes(&self) -> usize {
        self.groups
            .iter()
            .map(|(lv, p)| 64 + lv.iter().map(|s| s.len() + 24).sum::<usize>() + p.len() * 16)
            .sum::<usize>()
            + 64
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// Splitting through the label index gives the groups the per-series
        /// lookup gives (series lacking a key, or with an empty value, together).
        #[test]
        fn index_split_equals_per_series(
            sets in prop::collection::vec(prop::collection::vec((0u8..3, 0u8..4), 0..4), 1..30),
            keys in prop::collection::vec(0u8..4, 0..3),
            selected in prop::collection::vec(any::<bool>(), 30),
        ) {
            let name = |n: u8| format!("k{n}");
            // Value 0 is the empty string.
            let value = |v: u8| if v == 0 { String::new() } else { format!("v{v}") };
            let mut index = LabelIndex::default();
            let mut labels = Vec::new();
            for (sid, set) in sets.iter().enumerate() {
                let pairs: std::collections::BTreeMap<String, String> =
                    set.iter().map(|&(n, v)| (name(n), value(v))).collect();
                index.add_series(sid as u32);
                for (n, v) in &pairs {
                    index.add(sid as u32, n, v);
                }
                labels.push(Labels::new(pairs));
            }
            let series: RoaringBitmap = (0..sets.len() as u32)
                .filter(|&s| selected[s as usize])
                .collect();
            let keys: Vec<String> = keys.iter().map(|&k| name(k)).collect();
            let keys: Vec<&str> = keys.iter().map(String::as_str).collect();
            let canon = |g: Vec<(Vec<String>, RoaringBitmap)>| {
                let mut m: std::collections::BTreeMap<Vec<String>, Vec<u32>> = Default::default();
                for (k, set) in g {
                    m.entry(k).or_default().extend(set.iter());
                }
                for v in m.values_mut() {
                    v.sort_unstable();
                }
                m
            };
            let want = canon(split_per_series(|s| labels.get(s as usize), &series, &keys));
            match split_by_index(&index, &series, &keys) {
                Some(got) => prop_assert_eq!(canon(got), want),
                // Only a key with more values than selected series falls back.
                None => prop_assert!(keys
                    .iter()
                    .any(|k| index.values(k).count() as u64 > series.len())),
            }
        }
    }
}
