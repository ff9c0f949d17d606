//! The queries a split serves, each answering what the querier's own method
//! answers: split when [`Split`] says so, else asked of the querier directly.
//! Handlers call these instead of the querier's methods.

use std::collections::BTreeSet;
use std::sync::Arc;

use profiledb_storage::{
    merge_series, Budget, DiffResult, GroupAcc, GroupByQuery, LocalPart, Merged, NamedTree,
    Querier, QueryError, Selector, SeriesPoints, SplitSide, TenantId, TimeRange,
};

use super::wire::{answer, PartAnswer, PartKind};
use super::Split;
use crate::error::ApiError;
use crate::AppState;

/// The split of this process (`None` without a cluster querier).
pub fn of(state: &AppState) -> Option<Arc<Split>> {
    state.cluster.get().and_then(|c| c.split.clone())
}

/// Every part's answer, this querier's own first (computed as a peer's is).
fn run(
    split: Option<&Split>,
    q: &Querier,
    tenant: &TenantId,
    range: TimeRange,
    kind: PartKind,
) -> Result<Option<Vec<PartAnswer>>, ApiError> {
    let Some(s) = split else {
        return Ok(None);
    };
    let own = |r| answer(q, tenant, r, &kind);
    Ok(s.run(q, tenant, range, &kind, own)?
        .map(|(mine, mut theirs)| {
            theirs.insert(0, mine);
            theirs
        }))
}

/// A merge's parts: this querier's own in its frame tree, the others by name.
fn merge_parts(
    split: Option<&Split>,
    q: &Querier,
    tenant: &TenantId,
    sel: &Selector,
    range: TimeRange,
) -> Result<Option<(LocalPart, Vec<NamedTree>)>, ApiError> {
    let Some(s) = split else {
        return Ok(None);
    };
    let kind = PartKind::Merge {
        selector: sel.to_string(),
    };
    let own = |r| Ok(q.merge_part(tenant, sel, r)?);
    Ok(s.run(q, tenant, range, &kind, own)?.map(|(mine, theirs)| {
        let trees = theirs.into_iter().filter_map(PartAnswer::into_tree);
        (mine, trees.collect())
    }))
}

/// [`Querier::merge_flamegraph`].
pub fn merge_flamegraph(
    split: Option<&Split>,
    q: &Querier,
    tenant: &TenantId,
    sel: &Selector,
    range: TimeRange,
) -> Result<Merged, ApiError> {
    let Some((own, trees)) = merge_parts(split, q, tenant, sel, range)? else {
        return Ok(q.merge_flamegraph(tenant, sel, range)?);
    };
    let side = SplitSide {
        selector: sel,
        local: &[],
        own: Some(&own),
        remote: &trees,
    };
    Ok(q.merge_flamegraph_split(tenant, side)?)
}

/// [`Querier::diff`]: each side split on its own.
pub fn diff(
    split: Option<&Split>,
    q: &Querier,
    tenant: &TenantId,
    base: (&Selector, TimeRange),
    compare: (&Selector, TimeRange),
    top: usize,
    max_nodes: usize,
) -> Result<DiffResult, ApiError> {
    let side = |(sel, range)| merge_parts(split, q, tenant, sel, range);
    let (b, c) = (side(base)?, side(compare)?);
    if b.is_none() && c.is_none() {
        return Ok(q.diff(tenant, base, compare, top, max_nodes)?);
    }
    let (base_local, compare_local) = ([base.1], [compare.1]);
    let b_side = SplitSide {
        selector: base.0,
        local: if b.is_some() { &[] } else { &base_local },
        own: b.as_ref().map(|p| &p.0),
        remote: b.as_ref().map_or(&[], |p| &p.1),
    };
    let c_side = SplitSide {
        selector: compare.0,
        local: if c.is_some() { &[] } else { &compare_local },
        own: c.as_ref().map(|p| &p.0),
        remote: c.as_ref().map_or(&[], |p| &p.1),
    };
    Ok(q.diff_split(tenant, b_side, c_side, top, max_nodes)?)
}

/// [`Querier::group_by`].
pub fn group_by(
    split: Option<&Split>,
    q: &Querier,
    tenant: &TenantId,
    sel: &Selector,
    range: TimeRange,
    gq: &GroupByQuery,
) -> Result<GroupAcc, ApiError> {
    let Some(parts) = run(split, q, tenant, range, PartKind::group_by(sel, gq))? else {
        return Ok(q.group_by(tenant, sel, range, gq)?);
    };
    let mut acc = GroupAcc::default();
    for p in parts {
        p.add_groups(&mut acc);
    }
    let limit = match gq.max_groups {
        0 => q.limits().max_groups,
        n => n,
    };
    if limit > 0 && acc.rows.len() > limit {
        return Err(QueryError::TooLarge {
            budget: Budget::Groups,
            limit,
        }
        .into());
    }
    Ok(acc)
}

/// [`Querier::time_series`] (its arguments, after the split's).
#[allow(clippy::too_many_arguments)]
pub fn time_series(
    split: Option<&Split>,
    q: &Querier,
    tenant: &TenantId,
    sel: &Selector,
    range: TimeRange,
    group_by: &[String],
    step_ms: i64,
    limit: usize,
) -> Result<Vec<SeriesPoints>, ApiError> {
    let kind = PartKind::Series {
        selector: sel.to_string(),
        group_by: group_by.to_vec(),
        step_ms,
    };
    let Some(parts) = run(split, q, tenant, range, kind)? else {
        return Ok(q.time_series(tenant, sel, range, group_by, step_ms, limit)?);
    };
    let parts = parts.into_iter().map(PartAnswer::into_series).collect();
    Ok(merge_series(parts, limit))
}

/// [`Querier::label_names`] (`name` `None`) or [`Querier::label_values`].
pub fn labels(
    split: Option<&Split>,
    q: &Querier,
    tenant: &TenantId,
    name: Option<&str>,
    sel: &Selector,
    range: TimeRange,
) -> Result<Vec<String>, ApiError> {
    let selector = sel.to_string();
    let kind = match name {
        None => PartKind::LabelNames { selector },
        Some(n) => PartKind::LabelValues {
            selector,
            name: n.to_string(),
        },
    };
    let Some(parts) = run(split, q, tenant, range, kind)? else {
        return Ok(match name {
            None => q.label_names(tenant, sel, range)?,
            Some(n) => q.label_values(tenant, n, sel, range)?,
        });
    };
    let all: BTreeSet<String> = parts
        .into_iter()
        .flat_map(PartAnswer::into_strings)
        .collect();
    Ok(all.into_iter().collect())
}
