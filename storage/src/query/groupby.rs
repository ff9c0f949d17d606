//! GWP-style group-by: pick keys among the label names and the stack-derived
//! dimensions, filter on the rest, project and sum.
//!
//! Stack-derived keys: `function` (the leaf frame, i.e. self value), `function_total`
//! (every distinct frame of the stack, so a function is counted once per stack that
//! contains it, however often it recurses), and `binary` (the mapping file of the
//! leaf). Function filters are resolved to function ids once per source (through the
//! tantivy index for segments), then to a per-stack-node flag in one forward pass over
//! the stack tree, so no frame is matched against a regex per row.

use regex::Regex;
use roaring::RoaringBitmap;
use rustc_hash::FxHashMap;

use super::{steps, Source, TimeRange};
use crate::dict::{Dict, NO_PARENT};
use crate::error::{Result, StorageError};
use crate::selector::Selector;

pub const KEY_FUNCTION: &str = "function";
pub const KEY_FUNCTION_TOTAL: &str = "function_total";
pub const KEY_BINARY: &str = "binary";

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum GroupKey {
    Label(String),
    Function,
    FunctionTotal,
    Binary,
}

impl GroupKey {
    pub fn parse(s: &str) -> GroupKey {
        match s {
            KEY_FUNCTION => GroupKey::Function,
            KEY_FUNCTION_TOTAL => GroupKey::FunctionTotal,
            KEY_BINARY => GroupKey::Binary,
            other => GroupKey::Label(other.to_string()),
        }
    }

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
    pub keys: Vec<GroupKey>,
    /// Keep only stacks with a frame whose function name matches.
    pub include: Option<Regex>,
    /// Drop stacks with a frame whose function name matches.
    pub exclude: Option<Regex>,
    /// Most distinct groups one query may hold before it is refused.
    pub max_groups: usize,
}

impl GroupByQuery {
    /// A cache key part describing the query.
    pub fn fingerprint(&self) -> String {
        let keys: Vec<&str> = self.keys.iter().map(|k| k.name()).collect();
        format!(
            "keys={:?};inc={:?};exc={:?}",
            keys,
            self.include.as_ref().map(|r| r.as_str()),
            self.exclude.as_ref().map(|r| r.as_str())
        )
    }
}

/// Rows keyed by the key values, plus the total of the samples that passed the filters.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct GroupAcc {
    pub rows: FxHashMap<Vec<String>, i64>,
    pub total: i64,
}

impl GroupAcc {
    pub fn merge(&mut self, other: &GroupAcc) {
        self.total = self.total.saturating_add(other.total);
        for (k, v) in &other.rows {
            let e = self.rows.entry(k.clone()).or_insert(0);
            *e = e.saturating_add(*v);
        }
    }

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

/// Which stack nodes survive the function filters, or `None` when there are none.
pub fn node_filter(
    dict: &Dict,
    include: Option<&RoaringBitmap>,
    exclude: Option<&RoaringBitmap>,
) -> Option<Vec<bool>> {
    if include.is_none() && exclude.is_none() {
        return None;
    }
    let loc_flags = |fns: &RoaringBitmap| -> Vec<bool> {
        dict.locations
            .iter()
            .map(|l| l.function.is_some_and(|f| fns.contains(f)))
            .collect()
    };
    // contains[i]: some frame on the path root..=i matches.
    let contains = |fns: &RoaringBitmap| -> Vec<bool> {
        let lf = loc_flags(fns);
        let n = dict.node_count();
        let mut out = vec![false; n];
        for i in 0..n {
            let own = lf
                .get(dict.node_locations[i] as usize)
                .copied()
                .unwrap_or(false);
            let p = dict.parents[i];
            out[i] = own || (p != NO_PARENT && out.get(p as usize).copied().unwrap_or(false));
        }
        out
    };
    let inc = include.map(contains);
    let exc = exclude.map(contains);
    let n = dict.node_count();
    Some(
        (0..n)
            .map(|i| inc.as_ref().is_none_or(|v| v[i]) && !exc.as_ref().is_some_and(|v| v[i]))
            .collect(),
    )
}

fn binary_name(dict: &Dict, loc: u32) -> String {
    dict.locations
        .get(loc as usize)
        .and_then(|l| l.mapping)
        .and_then(|m| dict.mappings.get(m as usize))
        .map(|m| dict.str(m.file).to_string())
        .unwrap_or_default()
}

/// Adds the group-by rows of `src` to `acc`. `resolve` maps a function regex to the
/// matching function ids of `src`'s dictionary.
pub fn group_into(
    src: &dyn Source,
    sel: &Selector,
    range: TimeRange,
    q: &GroupByQuery,
    resolve: &dyn Fn(&dyn Source, &Regex) -> Result<RoaringBitmap>,
    acc: &mut GroupAcc,
) -> Result<()> {
    let series = src.index().select(&sel.matchers);
    if series.is_empty() {
        return Ok(());
    }
    let (lo, hi) = steps(src, range);
    if lo >= hi {
        return Ok(());
    }
    let dict = src.dict();
    let label_keys: Vec<(usize, &str)> = q
        .keys
        .iter()
        .enumerate()
        .filter_map(|(i, k)| match k {
            GroupKey::Label(l) => Some((i, l.as_str())),
            _ => None,
        })
        .collect();
    let stack_keys = q.keys.iter().any(GroupKey::is_stack_derived);

    let include = match &q.include {
        Some(re) => Some(resolve(src, re)?),
        None => None,
    };
    let exclude = match &q.exclude {
        Some(re) => Some(resolve(src, re)?),
        None => None,
    };
    let filter = node_filter(dict, include.as_ref(), exclude.as_ref());

    // Label groups of this source, then values per (label group, stack node).
    let mut groups: Vec<Vec<String>> = Vec::new();
    let mut group_ids: FxHashMap<Vec<String>, u32> = FxHashMap::default();
    let mut values: FxHashMap<(u32, u32), i64> = FxHashMap::default();
    for sid in series.iter() {
        let labels = src.labels(sid);
        let lv: Vec<String> = label_keys
            .iter()
            .map(|(_, name)| labels.and_then(|l| l.get(name)).unwrap_or("").to_string())
            .collect();
        let g = match group_ids.get(&lv) {
            Some(&g) => g,
            None => {
                let g = groups.len() as u32;
                group_ids.insert(lv.clone(), g);
                groups.push(lv);
                g
            }
        };
        let keep = filter.as_deref();
        src.for_each_row(sid, &mut |t, node, v| {
            if t < lo || t >= hi || v == 0 {
                return;
            }
            if let Some(k) = keep {
                if !k.get(node as usize).copied().unwrap_or(false) {
                    return;
                }
            }
            // Without stack keys every node of a group collapses into one row.
            let node = if stack_keys { node } else { 0 };
            let e = values.entry((g, node)).or_insert(0);
            *e = e.saturating_add(v);
        })?;
    }

    let mut leaf_names: FxHashMap<u32, String> = FxHashMap::default();
    let mut leaf_bins: FxHashMap<u32, String> = FxHashMap::default();
    let mut frame_names: FxHashMap<u32, String> = FxHashMap::default();
    let name_of = |cache: &mut FxHashMap<u32, String>, loc: u32| -> String {
        cache
            .entry(loc)
            .or_insert_with(|| super::tree::frame_name(dict, loc))
            .clone()
    };
    for (&(g, node), &v) in &values {
        acc.total = acc.total.saturating_add(v);
        // Candidate values for each key; the rows are their cartesian product.
        let mut choices: Vec<Vec<String>> = Vec::with_capacity(q.keys.len());
        let label_vals = &groups[g as usize];
        let mut li = 0;
        for k in &q.keys {
            match k {
                GroupKey::Label(_) => {
                    choices.push(vec![label_vals[li].clone()]);
                    li += 1;
                }
                GroupKey::Function => {
                    let loc = dict.node_locations.get(node as usize).copied().unwrap_or(0);
                    choices.push(vec![name_of(&mut leaf_names, loc)]);
                }
                GroupKey::Binary => {
                    let loc = dict.node_locations.get(node as usize).copied().unwrap_or(0);
                    let b = leaf_bins
                        .entry(loc)
                        .or_insert_with(|| binary_name(dict, loc))
                        .clone();
                    choices.push(vec![b]);
                }
                GroupKey::FunctionTotal => {
                    let mut names: Vec<String> = Vec::new();
                    for loc in dict.stack(node) {
                        let n = name_of(&mut frame_names, loc);
                        if !names.contains(&n) {
                            names.push(n);
                        }
                    }
                    choices.push(names);
                }
            }
        }
        let mut idx = vec![0usize; choices.len()];
        if choices.iter().any(|c| c.is_empty()) {
            continue;
        }
        loop {
            let key: Vec<String> = idx
                .iter()
                .zip(&choices)
                .map(|(&i, c)| c[i].clone())
                .collect();
            let e = acc.rows.entry(key).or_insert(0);
            *e = e.saturating_add(v);
            // Advance the odometer.
            let mut d = choices.len();
            loop {
                if d == 0 {
                    break;
                }
                d -= 1;
                idx[d] += 1;
                if idx[d] < choices[d].len() {
                    break;
                }
                idx[d] = 0;
                if d == 0 {
                    d = usize::MAX;
                    break;
                }
            }
            if d == usize::MAX || choices.is_empty() {
                break;
            }
        }
        if q.max_groups > 0 && acc.rows.len() > q.max_groups {
            return Err(StorageError::QueryLimit(format!(
                "the group-by produces more than {} groups; add filters or fewer keys",
                q.max_groups
            )));
        }
    }
    Ok(())
}
