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

mod frame_groups;
#[cfg(test)]
mod tests;

pub use frame_groups::{frames_can_group, FrameGroups, GroupNodes, SourceGroups};

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
