//! Pyroscope's legacy HTTP query API, used by older UIs: `GET /pyroscope/render`,
//! `GET /pyroscope/render-diff` (flamebearer JSON) and `GET /pyroscope/label-values`.
//! `from`/`until` take every form `/ingest` accepts (`now-1h`, unix s/ms/µs/ns).

use axum::extract::{Query, State};
use axum::http::HeaderMap;
use axum::routing::get;
use axum::{Json, Router};
use profiledb_storage::flamegraph_diff_merged;
use serde::Deserialize;
use serde_json::{json, Value};

use super::blocking;
use crate::error::{ApiError, ApiResult};
use crate::http::labels::RangeParams;
use crate::http::{tenant_of, AppRef};

pub fn routes() -> Router<AppRef> {
    Router::new()
        .route("/pyroscope/render", get(render))
        .route("/pyroscope/render-diff", get(render_diff))
        .route("/pyroscope/label-values", get(label_values))
}

#[derive(Debug, Default, Deserialize)]
pub struct RenderParams {
    pub query: Option<String>,
    pub from: Option<String>,
    pub until: Option<String>,
    pub format: Option<String>,
    #[serde(rename = "max-nodes", alias = "maxNodes")]
    pub max_nodes: Option<i64>,
    #[serde(rename = "leftQuery")]
    pub left_query: Option<String>,
    #[serde(rename = "leftFrom")]
    pub left_from: Option<String>,
    #[serde(rename = "leftUntil")]
    pub left_until: Option<String>,
    #[serde(rename = "rightQuery")]
    pub right_query: Option<String>,
    #[serde(rename = "rightFrom")]
    pub right_from: Option<String>,
    #[serde(rename = "rightUntil")]
    pub right_until: Option<String>,
    pub label: Option<String>,
    pub name: Option<String>,
}

fn params(
    q: Result<Query<RenderParams>, axum::extract::rejection::QueryRejection>,
) -> ApiResult<RenderParams> {
    q.map(|Query(p)| p)
        .map_err(|e| ApiError::bad_request(format!("invalid query parameters: {}", e.body_text())))
}

pub(crate) fn range_params(
    query: Option<&String>,
    from: Option<&String>,
    until: Option<&String>,
) -> RangeParams {
    RangeParams {
        query: query.cloned(),
        from: from.cloned(),
        until: until.cloned(),
        ..Default::default()
    }
}

/// The profile type named in a `type{...}` query (empty if none).
pub(crate) fn profile_type_of(query: Option<&String>) -> String {
    query
        .map(|q| q.split('{').next().unwrap_or("").trim().to_string())
        .unwrap_or_default()
}

/// Units and sample rate the flamebearer UI uses to label values.
fn units(profile_type: &str) -> (&'static str, i64) {
    let unit = profile_type.split(':').nth(2).unwrap_or("");
    match unit {
        "nanoseconds" => ("samples", 1_000_000_000),
        "microseconds" => ("samples", 1_000_000),
        "milliseconds" => ("samples", 1_000),
        "bytes" => ("bytes", 100),
        "count" if profile_type.starts_with("memory") => ("objects", 100),
        _ => ("samples", 100),
    }
}

fn max_nodes(v: Option<i64>) -> usize {
    super::querier::max_nodes(v)
}

async fn render(
    State(state): State<AppRef>,
    headers: HeaderMap,
    q: Result<Query<RenderParams>, axum::extract::rejection::QueryRejection>,
) -> ApiResult<Json<Value>> {
    let p = params(q)?;
    if let Some(f) = p.format.as_deref() {
        if f != "json" {
            return Err(ApiError::bad_request(format!(
                "unsupported format {f:?}: only json"
            )));
        }
    }
    let (sel, range) =
        range_params(p.query.as_ref(), p.from.as_ref(), p.until.as_ref()).resolve()?;
    let pt = profile_type_of(p.query.as_ref());
    let (store, tenant) = (state.store()?, tenant_of(&headers)?);
    let querier = state.querier()?;
    let mn = max_nodes(p.max_nodes);
    let (fg, series, step) = blocking(move || {
        let m = querier
            .merge_flamegraph(&tenant, &sel, range)
            .map_err(super::storage_error)?;
        let step = store.config().step_ms.max(1);
        let series = querier.time_series(&tenant, &sel, range, &[], step, 0)?;
        Ok((m.flamegraph(mn), series, step))
    })
    .await?;
    let (units, rate) = units(&pt);
    // The timeline is dense: one value per step from `from`, zeros where no data.
    let mut samples = Vec::new();
    if let Some(s) = series.first() {
        let mut t = range.start_ms;
        let mut it = s.points.iter().peekable();
        while t < range.end_ms && samples.len() < 100_000 {
            let mut v = 0;
            while let Some(&&(ts, val)) = it.peek() {
                if ts < t + step {
                    v += val;
                    it.next();
                } else {
                    break;
                }
            }
            samples.push(v);
            t += step;
        }
    }
    Ok(Json(json!({
        "version": 1,
        "flamebearer": {
            "names": fg.names,
            "levels": fg.levels,
            "numTicks": fg.total,
            "maxSelf": fg.max_self,
        },
        "metadata": {
            "format": "single",
            "spyName": "unknown",
            "sampleRate": rate,
            "units": units,
            "name": pt,
        },
        "timeline": {
            "startTime": range.start_ms / 1000,
            "samples": samples,
            "durationDelta": step / 1000,
        },
    })))
}

async fn render_diff(
    State(state): State<AppRef>,
    headers: HeaderMap,
    q: Result<Query<RenderParams>, axum::extract::rejection::QueryRejection>,
) -> ApiResult<Json<Value>> {
    let p = params(q)?;
    let lq = p.left_query.as_ref().or(p.query.as_ref());
    let rq = p.right_query.as_ref().or(p.query.as_ref());
    let (ls, lr) = range_params(lq, p.left_from.as_ref(), p.left_until.as_ref()).resolve()?;
    let (rs, rr) = range_params(rq, p.right_from.as_ref(), p.right_until.as_ref()).resolve()?;
    let pt = profile_type_of(lq);
    let (querier, tenant) = (state.querier()?, tenant_of(&headers)?);
    let mn = max_nodes(p.max_nodes);
    let d = blocking(move || {
        let (l, r) = querier
            .diff_sides(&tenant, (&ls, lr), (&rs, rr))
            .map_err(super::storage_error)?;
        Ok(flamegraph_diff_merged(&l, &r, mn))
    })
    .await?;
    let (units, rate) = units(&pt);
    Ok(Json(json!({
        "version": 1,
        "flamebearer": {
            "names": d.names,
            "levels": d.levels,
            "numTicks": d.total,
            "maxSelf": d.max_self,
        },
        "leftTicks": d.left_ticks,
        "rightTicks": d.right_ticks,
        "metadata": {
            "format": "double",
            "spyName": "unknown",
            "sampleRate": rate,
            "units": units,
            "name": pt,
        },
    })))
}

async fn label_values(
    State(state): State<AppRef>,
    headers: HeaderMap,
    q: Result<Query<RenderParams>, axum::extract::rejection::QueryRejection>,
) -> ApiResult<Json<Vec<String>>> {
    let p = params(q)?;
    let name = p
        .label
        .clone()
        .or(p.name.clone())
        .ok_or_else(|| ApiError::bad_request("missing parameter label (the label name)"))?;
    let (sel, range) =
        range_params(p.query.as_ref(), p.from.as_ref(), p.until.as_ref()).resolve()?;
    let (querier, tenant) = (state.querier()?, tenant_of(&headers)?);
    Ok(Json(
        blocking(move || Ok(querier.label_values(&tenant, &name, &sel, range)?)).await?,
    ))
}
