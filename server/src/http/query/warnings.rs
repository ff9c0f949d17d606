//! Warnings beside an answer, as Prometheus' HTTP API gives them (`"warnings":
//! ["…"]`): the query ran, but names something the data does not have, so an
//! empty answer is explained instead of silent.
//!
//! A query's names are checked against the label index of its range: its profile
//! type, the label names and values its matchers require, the labels it groups
//! by, and a range that starts in the future. Each warning says what is unknown and
//! the nearest known names. Only label discovery is read (the index, never a
//! stack), so the check is cheap; an answer with data is only checked for what can
//! go wrong with data present (a `group_by` label on no series).

use profiledb_storage::{
    now_ms, MatchOp, Querier, Selector, TenantId, TimeRange, PROFILE_TYPE_LABEL,
};

use crate::error::ApiResult;

/// How many near names a warning offers.
const NEAREST: usize = 3;
/// Similarity (Jaro–Winkler, 0..1) from which a known name counts as near.
const NEAR: f64 = 0.7;

/// Up to [`NEAREST`] of `known` closest to `name`, closest first; the first few
/// known names when none is near.
fn nearest<'a>(name: &str, known: &'a [String]) -> (bool, Vec<&'a str>) {
    let mut scored: Vec<(f64, &str)> = known
        .iter()
        .map(|k| (strsim::jaro_winkler(name, k), k.as_str()))
        .filter(|(s, _)| *s >= NEAR)
        .collect();
    scored.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(b.1)));
    if scored.is_empty() {
        return (
            false,
            known.iter().take(NEAREST).map(String::as_str).collect(),
        );
    }
    (
        true,
        scored.into_iter().take(NEAREST).map(|(_, k)| k).collect(),
    )
}

/// `; did you mean "a", "b"?` or `; known: "a", "b"` (nothing when none is known).
fn suggestion(name: &str, known: &[String], what: &str) -> String {
    let (near, names) = nearest(name, known);
    if names.is_empty() {
        return format!("; there are no {what} in the range");
    }
    let list = names
        .iter()
        .map(|n| format!("{n:?}"))
        .collect::<Vec<_>>()
        .join(", ");
    match near {
        true => format!("; did you mean {list}?"),
        false => format!("; known {what}: {list}{}", more(known.len())),
    }
}

fn more(n: usize) -> &'static str {
    if n > NEAREST {
        ", …"
    } else {
        ""
    }
}

/// The profile type a selection reads (its `__profile_type__` matcher).
fn profile_type(sel: &Selector) -> Option<&str> {
    sel.matchers
        .iter()
        .find(|m| m.name == PROFILE_TYPE_LABEL && m.op == MatchOp::Eq)
        .map(|m| m.value.as_str())
}

/// Why `sel` may select nothing in `range`: a range in the future, a profile type
/// without data in it, matchers on label names or values no series of the type has.
pub fn selection(
    querier: &Querier,
    tenant: &TenantId,
    sel: &Selector,
    range: TimeRange,
) -> ApiResult<Vec<String>> {
    let mut out = Vec::new();
    let now = now_ms();
    if range.start_ms > now {
        out.push(format!(
            "the range starts in the future ({}, now is {}): nothing is stored there yet",
            crate::time::rfc3339(range.start_ms),
            crate::time::rfc3339(now)
        ));
        return Ok(out);
    }
    let Some(pt) = profile_type(sel) else {
        return Ok(out);
    };
    let types = querier.profile_types(tenant, range)?;
    if !types.iter().any(|t| t == pt) {
        out.push(format!(
            "no data of profile type {pt:?} in the range{}",
            suggestion(pt, &types, "profile types")
        ));
        return Ok(out);
    }
    let of_type = Selector::default().with(profiledb_storage::Matcher::eq(PROFILE_TYPE_LABEL, pt));
    let names = querier.label_names(tenant, &of_type, range)?;
    for m in &sel.matchers {
        // Only matchers that require a label narrow the selection to nothing.
        if m.name == PROFILE_TYPE_LABEL || !matches!(m.op, MatchOp::Eq | MatchOp::Re) {
            continue;
        }
        if !names.contains(&m.name) {
            out.push(format!(
                "no series of {pt:?} has the label {:?} in the range{}",
                m.name,
                suggestion(&m.name, &visible(&names), "labels")
            ));
            continue;
        }
        if m.op == MatchOp::Eq {
            let values = querier.label_values(tenant, &m.name, &of_type, range)?;
            if !values.contains(&m.value) {
                out.push(format!(
                    "no series of {pt:?} has {}={:?} in the range{}",
                    m.name,
                    m.value,
                    suggestion(&m.value, &values, &format!("values of {}", m.name))
                ));
            }
        }
    }
    Ok(out)
}

/// Label names people pick from (reserved `__…__` names left out).
fn visible(names: &[String]) -> Vec<String> {
    names
        .iter()
        .filter(|n| !n.starts_with("__"))
        .cloned()
        .collect()
}

/// The warnings of an answer of `total` grouped by `labels`: why it is empty, else
/// (or when nothing explains it) the labels no selected series carries.
pub fn of_answer(
    querier: &Querier,
    tenant: &TenantId,
    sel: &Selector,
    range: TimeRange,
    total: i64,
    labels: &[&str],
) -> ApiResult<Vec<String>> {
    if total == 0 {
        let w = selection(querier, tenant, sel, range)?;
        if !w.is_empty() {
            return Ok(w);
        }
    }
    group_labels(querier, tenant, sel, range, labels)
}

/// Labels to group by that no selected series carries in `range`: grouping by one
/// answers a single group keyed `""`.
pub fn group_labels(
    querier: &Querier,
    tenant: &TenantId,
    sel: &Selector,
    range: TimeRange,
    labels: &[&str],
) -> ApiResult<Vec<String>> {
    if labels.is_empty() {
        return Ok(Vec::new());
    }
    let names = querier.label_names(tenant, sel, range)?;
    Ok(labels
        .iter()
        .filter(|l| !names.iter().any(|n| n == *l))
        .map(|l| {
            format!(
                "no selected series has the label {l:?} in the range (its value is \"\" everywhere){}",
                suggestion(l, &visible(&names), "labels")
            )
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn near_names_are_offered_closest_first() {
        let known: Vec<String> = ["env", "region", "service_name", "version"]
            .map(String::from)
            .to_vec();
        assert_eq!(nearest("envv", &known), (true, vec!["env"]));
        assert_eq!(nearest("service", &known).1[0], "service_name");
        let (near, names) = nearest("zzz", &known);
        assert!(!near);
        assert_eq!(names, ["env", "region", "service_name"]);
        assert_eq!(
            suggestion("zzz", &known, "labels"),
            "; known labels: \"env\", \"region\", \"service_name\", …"
        );
        assert_eq!(
            suggestion("x", &[], "labels"),
            "; there are no labels in the range"
        );
    }
}
