//! Native discovery and merge endpoints under `/api/v1`:
//! profile types, label names and values, series, and a merged profile as folded
//! text or JSON totals. Times are `from`/`until` (RFC 3339, unix s/ms/µs/ns or
//! `now-1h`), the window `[from, until)`, by default the last hour.

use std::collections::BTreeMap;

use axum::extract::State;
use axum::http::{header, HeaderMap};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use profiledb_storage::{Labels, Selector, TimeRange, PROFILE_TYPE_LABEL};
use serde::Deserialize;

use super::request::{blocking, discovery_selector, window, Params, Selection};
use super::{tenant_of, AppRef};
use crate::cluster::split::queries as split;
use crate::error::{ApiError, ApiResult};

pub fn routes() -> Router<AppRef> {
    Router::new()
        .route("/api/v1/profile_types", get(profile_types))
        .route("/api/v1/labels", get(label_names))
        .route("/api/v1/label_values", get(label_values))
        .route("/api/v1/series", get(series))
        .route("/api/v1/merge", get(merge))
}

/// Query parameters shared by the discovery endpoints.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RangeParams {
    /// `<profile type>{matchers}` or just `{matchers}`.
    #[serde(default)]
    pub query: Option<String>,
    #[serde(default)]
    pub from: Option<String>,
    #[serde(default)]
    pub until: Option<String>,
    /// For `label_values`: the label name.
    #[serde(default)]
    pub name: Option<String>,
    /// For `merge`: `folded` (default) or `json`.
    #[serde(default)]
    pub format: Option<String>,
}

impl RangeParams {
    /// The window `[from, until)` (the rule of [`crate::http::request`]).
    pub fn window(&self) -> ApiResult<TimeRange> {
        window(
            ("from", self.from.as_deref()),
            ("until", self.until.as_deref()),
        )
    }

    /// Discovery's selector (profile type optional) and window.
    pub fn resolve(&self) -> ApiResult<(Selector, TimeRange)> {
        Ok((discovery_selector(self.query.as_deref())?, self.window()?))
    }
}

/// The profile types with data in the window; with a `query`, only those of the
/// series it selects (a per-service type picker).
async fn profile_types(
    State(state): State<AppRef>,
    headers: HeaderMap,
    Params(p): Params<RangeParams>,
) -> ApiResult<Json<Vec<String>>> {
    let (sel, range) = p.resolve()?;
    let (querier, tenant) = (state.querier()?, tenant_of(&headers)?);
    let filtered = p.query.as_deref().is_some_and(|q| !q.trim().is_empty());
    Ok(Json(
        blocking(move || {
            Ok(if filtered {
                querier.label_values(&tenant, PROFILE_TYPE_LABEL, &sel, range)?
            } else {
                querier.profile_types(&tenant, range)?
            })
        })
        .await?,
    ))
}

async fn label_names(
    State(state): State<AppRef>,
    headers: HeaderMap,
    Params(p): Params<RangeParams>,
) -> ApiResult<Json<Vec<String>>> {
    let (sel, range) = p.resolve()?;
    let (querier, tenant) = (state.querier()?, tenant_of(&headers)?);
    let split = split::of(&state);
    Ok(Json(
        blocking(move || split::labels(split.as_deref(), &querier, &tenant, None, &sel, range))
            .await?,
    ))
}

async fn label_values(
    State(state): State<AppRef>,
    headers: HeaderMap,
    Params(p): Params<RangeParams>,
) -> ApiResult<Json<Vec<String>>> {
    let name = p
        .name
        .clone()
        .ok_or_else(|| ApiError::bad_request("missing parameter name (the label name)"))?;
    let (sel, range) = p.resolve()?;
    let (querier, tenant) = (state.querier()?, tenant_of(&headers)?);
    let split = split::of(&state);
    Ok(Json(
        blocking(move || {
            let name = Some(name.as_str());
            split::labels(split.as_deref(), &querier, &tenant, name, &sel, range)
        })
        .await?,
    ))
}

async fn series(
    State(state): State<AppRef>,
    headers: HeaderMap,
    Params(p): Params<RangeParams>,
) -> ApiResult<Json<Vec<BTreeMap<String, String>>>> {
    let (sel, range) = p.resolve()?;
    let (querier, tenant) = (state.querier()?, tenant_of(&headers)?);
    let list: Vec<Labels> = blocking(move || Ok(querier.series(&tenant, &sel, range)?)).await?;
    Ok(Json(
        list.iter()
            .map(|l| {
                l.iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect()
            })
            .collect(),
    ))
}

/// `GET /api/v1/merge?query=…&from=…&until=…&format=folded|json`
async fn merge(
    State(state): State<AppRef>,
    headers: HeaderMap,
    Params(p): Params<RangeParams>,
) -> ApiResult<Response> {
    state
        .http
        .query_requests
        .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let format = p.format.clone().unwrap_or_else(|| "folded".into());
    if format != "folded" && format != "json" {
        return Err(ApiError::bad_request(format!(
            "unknown format {format:?}: use folded or json"
        )));
    }
    let sel = Selection::from_query(p.query.as_deref())?.selector;
    let range = p.window()?;
    let (querier, tenant) = (state.querier()?, tenant_of(&headers)?);
    let split = split::of(&state);
    let tree = blocking(move || {
        split::merge_flamegraph(split.as_deref(), &querier, &tenant, &sel, range)?
            .to_tree_checked()
            .map_err(ApiError::from)
    })
    .await?;
    Ok(if format == "json" {
        let stacks: Vec<serde_json::Value> = tree
            .folded()
            .into_iter()
            .map(
                |(k, v)| serde_json::json!({"stack": k.split(';').collect::<Vec<_>>(), "value": v}),
            )
            .collect();
        Json(serde_json::json!({"total": tree.total(), "stacks": stacks})).into_response()
    } else {
        (
            [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
            tree.to_folded_text(),
        )
            .into_response()
    })
}
