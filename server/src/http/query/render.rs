//! Pyroscope's legacy HTTP query API, used by older UIs and the Profiles Drilldown
//! app: `GET /pyroscope/render` (flamebearer JSON, or a Graphviz call graph with
//! `format=dot`), `GET /pyroscope/render-diff` (flamebearer JSON),
//! `GET /pyroscope/label-values` and `GET /pyroscope/labels`.
//! `from`/`until` take RFC 3339, unix s/ms/µs/ns or `now-1h`; windows are
//! `[from, until)`, and a query names exactly one profile type.

use axum::extract::State;
use axum::http::{header, HeaderMap};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use profiledb_storage::flamegraph_diff_merged;
use profiledb_storage::TimeRange;
use serde::Deserialize;
use serde_json::{json, Value};

use super::dot::{dot, DEFAULT_DOT_NODES};
use super::grid;
use crate::error::{ApiError, ApiResult};
use crate::http::request::{
    blocking, discovery_selector, pyroscope_max_nodes, window, Params, Selection,
};
use crate::http::{tenant_of, AppRef};

pub fn routes() -> Router<AppRef> {
    Router::new()
        .route("/pyroscope/render", get(render))
        .route("/pyroscope/render-diff", get(render_diff))
        .route("/pyroscope/label-values", get(label_values))
        .route("/pyroscope/labels", get(label_names))
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

impl RenderParams {
    fn window(&self, from: Option<&String>, until: Option<&String>) -> ApiResult<TimeRange> {
        window(
            ("from", from.map(String::as_str)),
            ("until", until.map(String::as_str)),
        )
    }
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

async fn render(
    State(state): State<AppRef>,
    headers: HeaderMap,
    Params(p): Params<RenderParams>,
) -> ApiResult<Response> {
    match p.format.as_deref() {
        None | Some("json") => Ok(render_json(state, headers, p).await?.into_response()),
        Some("dot") => render_dot(state, headers, p).await,
        Some(f) => Err(ApiError::bad_request(format!(
            "unsupported format {f:?}: json or dot"
        ))),
    }
}

/// `format=dot`: the merged profile as a Graphviz call graph of at most `max-nodes`
/// functions (default [`DEFAULT_DOT_NODES`]); an empty profile is an empty text.
async fn render_dot(state: AppRef, headers: HeaderMap, p: RenderParams) -> ApiResult<Response> {
    let Selection {
        profile_type,
        selector: sel,
    } = Selection::from_query(p.query.as_deref())?;
    let range = p.window(p.from.as_ref(), p.until.as_ref())?;
    let (querier, tenant) = (state.querier()?, tenant_of(&headers)?);
    // The tenant's node limit applies to the request as to every render.
    pyroscope_max_nodes(p.max_nodes)?;
    let limit = match p.max_nodes {
        Some(n) if n > 0 => usize::try_from(n).unwrap_or(usize::MAX),
        _ => DEFAULT_DOT_NODES,
    };
    let text = blocking(move || {
        let tree = querier.merge_tree(&tenant, &sel, range)?;
        let [_, _, unit, _, _] = profile_type.parts();
        Ok(dot(&tree, profile_type.as_str(), unit, limit))
    })
    .await?;
    Ok((
        [(header::CONTENT_TYPE, "text/vnd.graphviz; charset=utf-8")],
        text,
    )
        .into_response())
}

async fn render_json(state: AppRef, headers: HeaderMap, p: RenderParams) -> ApiResult<Json<Value>> {
    let Selection {
        profile_type,
        selector: sel,
    } = Selection::from_query(p.query.as_deref())?;
    let range = p.window(p.from.as_ref(), p.until.as_ref())?;
    let pt = profile_type.as_str().to_string();
    let (store, tenant) = (state.store()?, tenant_of(&headers)?);
    let querier = state.querier()?;
    let mn = pyroscope_max_nodes(p.max_nodes)?;
    let step = store.config().step_ms.max(1);
    grid::check(range, step)?;
    let (fg, series) = blocking(move || {
        let m = querier.merge_flamegraph(&tenant, &sel, range)?;
        let series = querier.time_series(&tenant, &sel, range, &[], step, 0)?;
        Ok((m.flamegraph(mn), series))
    })
    .await?;
    let (units, rate) = units(&pt);
    // The timeline is dense: one value per whole step, zeros where no data.
    let points = series.first().map_or(&[][..], |s| &s.points[..]);
    let filled = grid::fill(range, step, points);
    let start = filled.first().map_or(range.start_ms, |p| p.0);
    let samples: Vec<i64> = filled.into_iter().map(|(_, v)| v).collect();
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
            "startTime": start / 1000,
            "samples": samples,
            "durationDelta": step / 1000,
        },
    })))
}

async fn render_diff(
    State(state): State<AppRef>,
    headers: HeaderMap,
    Params(p): Params<RenderParams>,
) -> ApiResult<Json<Value>> {
    let lq = p.left_query.as_ref().or(p.query.as_ref());
    let rq = p.right_query.as_ref().or(p.query.as_ref());
    let left = Selection::from_query(lq.map(String::as_str))?;
    let right = Selection::from_query(rq.map(String::as_str))?;
    if left.profile_type != right.profile_type {
        return Err(ApiError::bad_request(format!(
            "leftQuery and rightQuery name different profile types ({:?} and {:?}): a diff compares one",
            left.profile_type.as_str(),
            right.profile_type.as_str()
        )));
    }
    let lr = p.window(p.left_from.as_ref(), p.left_until.as_ref())?;
    let rr = p.window(p.right_from.as_ref(), p.right_until.as_ref())?;
    let pt = left.profile_type.as_str().to_string();
    let (ls, rs) = (left.selector, right.selector);
    let (querier, tenant) = (state.querier()?, tenant_of(&headers)?);
    let mn = pyroscope_max_nodes(p.max_nodes)?;
    let d = blocking(move || {
        let (l, r) = querier.diff_sides(&tenant, (&ls, lr), (&rs, rr))?;
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
    Params(p): Params<RenderParams>,
) -> ApiResult<Json<Vec<String>>> {
    let name = p
        .label
        .clone()
        .or(p.name.clone())
        .ok_or_else(|| ApiError::bad_request("missing parameter label (the label name)"))?;
    let sel = discovery_selector(p.query.as_deref())?;
    let range = p.window(p.from.as_ref(), p.until.as_ref())?;
    let (querier, tenant) = (state.querier()?, tenant_of(&headers)?);
    Ok(Json(
        blocking(move || Ok(querier.label_values(&tenant, &name, &sel, range)?)).await?,
    ))
}

/// `GET /pyroscope/labels?query=&from=&until=`: the label names of the selected series,
/// as a JSON array (the legacy companion of `label-values`). Reserved `__…__` names
/// are included, as `label-values` accepts them.
async fn label_names(
    State(state): State<AppRef>,
    headers: HeaderMap,
    Params(p): Params<RenderParams>,
) -> ApiResult<Json<Vec<String>>> {
    let sel = discovery_selector(p.query.as_deref())?;
    let range = p.window(p.from.as_ref(), p.until.as_ref())?;
    let (querier, tenant) = (state.querier()?, tenant_of(&headers)?);
    Ok(Json(
        blocking(move || Ok(querier.label_names(&tenant, &sel, range)?)).await?,
    ))
}
