//! Native discovery and merge endpoints under `/api/v1`:
//! profile types, label names and values, series, and a merged profile as folded
//! text or JSON totals. Times are `from`/`until` in any form `/ingest` accepts
//! (unix s/ms/µs/ns or `now-1h`); the default window is the last hour.

use std::collections::BTreeMap;

use axum::extract::{Query, State};
use axum::http::{header, HeaderMap};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use profiledb_ingest::parse_time;
use profiledb_storage::{now_ms, Labels, Selector, TimeRange};
use serde::Deserialize;

use super::{tenant_of, AppRef};
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
    /// The selector and the half-open time range `[from, until)`.
    pub fn resolve(&self) -> ApiResult<(Selector, TimeRange)> {
        let now = now_ms();
        let from = match &self.from {
            Some(f) => parse_time("from", f, now)?,
            None => now - 3_600_000,
        };
        let until = match &self.until {
            Some(u) => parse_time("until", u, now)?,
            None => now,
        };
        if until < from {
            return Err(ApiError::bad_request(format!(
                "until ({until}) is before from ({from})"
            )));
        }
        let sel = Selector::parse(self.query.as_deref().unwrap_or("{}"))?;
        // `until` is inclusive in Pyroscope's API; the engine's ranges are half-open.
        Ok((sel, TimeRange::new(from, until.saturating_add(1))))
    }
}

fn params(
    q: Result<Query<RangeParams>, axum::extract::rejection::QueryRejection>,
) -> ApiResult<RangeParams> {
    q.map(|Query(p)| p)
        .map_err(|e| ApiError::bad_request(format!("invalid query parameters: {}", e.body_text())))
}

async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> ApiResult<T> + Send + 'static,
) -> ApiResult<T> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| ApiError::internal(format!("query task failed: {e}")))?
}

async fn profile_types(
    State(state): State<AppRef>,
    headers: HeaderMap,
    q: Result<Query<RangeParams>, axum::extract::rejection::QueryRejection>,
) -> ApiResult<Json<Vec<String>>> {
    let p = params(q)?;
    let (_, range) = p.resolve()?;
    let (querier, tenant) = (state.querier()?, tenant_of(&headers)?);
    Ok(Json(
        blocking(move || Ok(querier.profile_types(&tenant, range)?)).await?,
    ))
}

async fn label_names(
    State(state): State<AppRef>,
    headers: HeaderMap,
    q: Result<Query<RangeParams>, axum::extract::rejection::QueryRejection>,
) -> ApiResult<Json<Vec<String>>> {
    let (sel, range) = params(q)?.resolve()?;
    let (querier, tenant) = (state.querier()?, tenant_of(&headers)?);
    Ok(Json(
        blocking(move || Ok(querier.label_names(&tenant, &sel, range)?)).await?,
    ))
}

async fn label_values(
    State(state): State<AppRef>,
    headers: HeaderMap,
    q: Result<Query<RangeParams>, axum::extract::rejection::QueryRejection>,
) -> ApiResult<Json<Vec<String>>> {
    let p = params(q)?;
    let name = p
        .name
        .clone()
        .ok_or_else(|| ApiError::bad_request("missing parameter name (the label name)"))?;
    let (sel, range) = p.resolve()?;
    let (querier, tenant) = (state.querier()?, tenant_of(&headers)?);
    Ok(Json(
        blocking(move || Ok(querier.label_values(&tenant, &name, &sel, range)?)).await?,
    ))
}

async fn series(
    State(state): State<AppRef>,
    headers: HeaderMap,
    q: Result<Query<RangeParams>, axum::extract::rejection::QueryRejection>,
) -> ApiResult<Json<Vec<BTreeMap<String, String>>>> {
    let (sel, range) = params(q)?.resolve()?;
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
    q: Result<Query<RangeParams>, axum::extract::rejection::QueryRejection>,
) -> ApiResult<Response> {
    state
        .http
        .query_requests
        .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let p = params(q)?;
    let format = p.format.clone().unwrap_or_else(|| "folded".into());
    if format != "folded" && format != "json" {
        return Err(ApiError::bad_request(format!(
            "unknown format {format:?}: use folded or json"
        )));
    }
    let (sel, range) = p.resolve()?;
    let (querier, tenant) = (state.querier()?, tenant_of(&headers)?);
    let tree = blocking(move || {
        querier
            .merge_tree(&tenant, &sel, range)
            .map_err(crate::http::query_error)
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
