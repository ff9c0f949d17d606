//! Variance hunting (Pythia) under `/api/v1/fleet/variance`: the HTTP shape of
//! `profiledb_storage::analysis::variance`.

use axum::extract::State;
use axum::http::{HeaderMap, Uri};
use axum::response::Response;
use axum::routing::get;
use axum::Router;
use profiledb_storage::analysis::correlated::MAX_LABELS;
use serde::Deserialize;
use serde_json::{json, Value};

use super::answers::cached_answer;
use super::native::{count, raw_query, to_json, with_warnings, JSON};
use super::warnings;
use crate::error::{ApiError, ApiResult};
use crate::http::request::{blocking, window, Params, Selection};
use crate::http::{tenant_of, AppRef};

pub fn routes() -> Router<AppRef> {
    Router::new().route("/api/v1/fleet/variance", get(variance))
}

#[derive(Debug, Default, Deserialize)]
struct VarianceParams {
    query: Option<String>,
    from: Option<String>,
    until: Option<String>,
    /// Comma-separated labels whose values make a group of units that should
    /// behave alike (default `service_name`).
    group_by: Option<String>,
    /// The label naming a unit (default `host`).
    unit: Option<String>,
    /// Groups answered (default 10, 0 = all).
    limit: Option<usize>,
    /// Explaining functions for each of the first `explain_groups` groups (default 5).
    explain: Option<usize>,
    /// How many of the first groups get explained (default 3, at most 20).
    explain_groups: Option<usize>,
    /// Labels best correlated with unit cost for each explained group (default 3).
    correlate: Option<usize>,
}

/// The grouping labels (comma-separated, default `service_name`) and the unit label
/// (default `host`) of a variance request; the boost takes the same.
pub(crate) fn groups_and_unit(
    group_by: Option<&str>,
    unit: Option<&str>,
) -> ApiResult<(Vec<String>, String)> {
    let group_labels: Vec<String> = group_by
        .unwrap_or("service_name")
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(String::from)
        .collect();
    let unit = unit
        .map(str::trim)
        .filter(|u| !u.is_empty())
        .unwrap_or("host")
        .to_string();
    if group_labels.len() > 8 || group_labels.contains(&unit) {
        return Err(ApiError::bad_request(
            "group_by takes at most 8 labels, and not the unit label",
        ));
    }
    Ok((group_labels, unit))
}

/// `GET /api/v1/fleet/variance?query=&from=&until=&group_by=&unit=&limit=&explain=&explain_groups=&correlate=`
async fn variance(
    State(state): State<AppRef>,
    headers: HeaderMap,
    uri: Uri,
    Params(p): Params<VarianceParams>,
) -> ApiResult<Response> {
    count(&state);
    let sel = Selection::from_query(p.query.as_deref())?.selector;
    let range = window(("from", p.from.as_deref()), ("until", p.until.as_deref()))?;
    let (group_labels, unit) = groups_and_unit(p.group_by.as_deref(), p.unit.as_deref())?;
    let explain_groups = p.explain_groups.unwrap_or(3);
    if explain_groups > 20 {
        return Err(ApiError::bad_request("explain_groups must be at most 20"));
    }
    let (k, limit) = (p.explain.unwrap_or(5), p.limit.unwrap_or(10));
    let correlate = p.correlate.unwrap_or(3);
    if correlate > MAX_LABELS {
        return Err(ApiError::bad_request(format!(
            "correlate must be at most {MAX_LABELS}: only that many labels are looked at"
        )));
    }
    let tenant = tenant_of(&headers)?;
    cached_answer(&state, &tenant, &[range], raw_query(&uri), JSON, || async {
        let (querier, t) = (state.querier()?, tenant.clone());
        let (labels, u) = (group_labels.clone(), unit.clone());
        let (groups, warnings) = blocking(move || {
            let mut groups = querier.fleet_variance(&t, &sel, range, &labels, &u)?;
            if limit > 0 {
                groups.truncate(limit);
            }
            let mut out = Vec::with_capacity(groups.len());
            for (i, g) in groups.into_iter().enumerate() {
                // A group whose units all cost the same has nothing to explain.
                let explained = i < explain_groups && g.stddev > 0.0;
                let explainers = match explained && k > 0 {
                    true => querier.fleet_variance_explain(&t, &sel, range, &labels, &g.group, &u, k)?,
                    false => Vec::new(),
                };
                let correlated = match explained && correlate > 0 {
                    true => querier.fleet_variance_labels(&t, &sel, range, &labels, &g.group, &u, correlate)?,
                    false => Vec::new(),
                };
                out.push((g, explainers, correlated));
            }
            let mut labels: Vec<&str> = labels.iter().map(String::as_str).collect();
            labels.push(&u);
            let total = out.iter().map(|(g, ..)| g.mean * g.units as f64).sum::<f64>() as i64;
            let w = warnings::of_answer(&querier, &t, &sel, range, total, &labels)?;
            Ok((out, w))
        })
        .await?;
        let rows: Vec<Value> = groups
            .iter()
            .map(|(g, ex, correlated)| {
                let group: serde_json::Map<String, Value> = group_labels
                    .iter()
                    .zip(&g.group)
                    .map(|(l, v)| (l.clone(), Value::String(v.clone())))
                    .collect();
                let ex: Vec<Value> = ex
                    .iter()
                    .map(|e| json!({"function": e.function, "high_share": e.high_share, "low_share": e.low_share}))
                    .collect();
                let correlated: Vec<Value> = correlated
                    .iter()
                    .map(|c| json!({"label": c.label, "value": c.value, "units": c.units,
                                    "mean_with": c.mean_with, "mean_without": c.mean_without,
                                    "ratio": c.ratio, "effect": c.effect}))
                    .collect();
                json!({"group": group, "units": g.units, "mean": g.mean, "stddev": g.stddev,
                       "cov": g.cov,
                       "max_unit": {"name": g.max_unit.0, "value": g.max_unit.1},
                       "min_unit": {"name": g.min_unit.0, "value": g.min_unit.1},
                       "explainers": ex, "correlated_labels": correlated})
            })
            .collect();
        let mut answer = json!({"group_by": group_labels, "unit": unit, "groups": rows});
        with_warnings(&mut answer, warnings);
        to_json(&answer)
    })
    .await
}
