//! Segment lifecycle administration: `GET /api/v1/admin/segments`,
//! `POST /api/v1/admin/compact`, `PUT /api/v1/admin/retention`.
//!
//! When the server runs with an admin token (`--admin-token`), every admin request
//! must carry `Authorization: Bearer <token>`; otherwise it gets 401.

use axum::extract::{Query, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::routing::{get, post, put};
use axum::{Json, Router};
use profiledb_storage::SegmentMeta;
use profiledb_storage::{parse_max_age, CompactReport, RetentionReport};
use profiledb_storage::{TenantId, TimeRange};
use serde::{Deserialize, Serialize};

use super::AppRef;
use crate::error::{ApiError, ApiResult};

pub fn routes() -> Router<AppRef> {
    Router::new()
        .route("/api/v1/admin/segments", get(segments))
        .route("/api/v1/admin/compact", post(compact))
        .route("/api/v1/admin/retention", put(retention))
}

/// Checks the bearer token when one is configured.
fn authorize(state: &AppRef, headers: &HeaderMap) -> ApiResult<()> {
    let Some(want) = state.options.admin_token.as_deref() else {
        return Ok(());
    };
    let got = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .map(str::trim);
    // Compare without an early exit on the first differing byte.
    let ok = got.is_some_and(|g| {
        g.len() == want.len()
            && g.bytes()
                .zip(want.bytes())
                .fold(0u8, |acc, (a, b)| acc | (a ^ b))
                == 0
    });
    if ok {
        Ok(())
    } else {
        Err(ApiError::new(
            StatusCode::UNAUTHORIZED,
            "unauthenticated",
            "admin endpoints need `Authorization: Bearer <admin token>`",
        ))
    }
}

fn tenant_param(t: Option<&str>) -> ApiResult<Option<TenantId>> {
    t.map(|t| TenantId::new(t.trim()).map_err(|e| ApiError::bad_request(e.to_string())))
        .transpose()
}

fn range_param(start: Option<i64>, end: Option<i64>) -> Option<TimeRange> {
    if start.is_none() && end.is_none() {
        return None;
    }
    Some(TimeRange::new(
        start.unwrap_or(i64::MIN),
        end.unwrap_or(i64::MAX),
    ))
}

#[derive(Deserialize, Default)]
struct SegmentsParams {
    tenant: Option<String>,
    /// Milliseconds since the epoch; segments with data in `[start, end)`.
    start: Option<i64>,
    end: Option<i64>,
    level: Option<u32>,
}

#[derive(Serialize)]
struct SegmentInfo {
    id: u64,
    tenant: TenantId,
    partition_start_ms: i64,
    partition_end_ms: i64,
    min_time_ms: i64,
    max_time_ms: i64,
    step_ms: i64,
    level: u32,
    size_bytes: u64,
    series: u64,
    samples: u64,
    value_total: i64,
    created_ms: i64,
    sources: Vec<u64>,
    file: String,
}

impl From<SegmentMeta> for SegmentInfo {
    fn from(m: SegmentMeta) -> Self {
        SegmentInfo {
            id: m.id,
            partition_end_ms: m.partition_end_ms(),
            tenant: m.tenant,
            partition_start_ms: m.partition_start_ms,
            min_time_ms: m.min_time_ms,
            max_time_ms: m.max_time_ms,
            step_ms: m.step_ms,
            level: m.level,
            size_bytes: m.size_bytes,
            series: m.series,
            samples: m.rows,
            value_total: m.value_total,
            created_ms: m.created_ms,
            sources: m.sources,
            file: m.file,
        }
    }
}

#[derive(Serialize)]
struct SegmentsResponse {
    segments: Vec<SegmentInfo>,
    count: usize,
    bytes: u64,
}

async fn segments(
    State(state): State<AppRef>,
    headers: HeaderMap,
    q: Result<Query<SegmentsParams>, axum::extract::rejection::QueryRejection>,
) -> ApiResult<Json<SegmentsResponse>> {
    authorize(&state, &headers)?;
    let Query(q) = q.map_err(|e| ApiError::bad_request(e.body_text()))?;
    let store = state.store()?;
    let tenant = tenant_param(q.tenant.as_deref())?;
    let range = range_param(q.start, q.end);
    let segments: Vec<SegmentInfo> = store
        .segments()
        .into_iter()
        .filter(|m| tenant.as_ref().is_none_or(|t| *t == m.tenant))
        .filter(|m| range.is_none_or(|r| m.overlaps(r.start_ms, r.end_ms)))
        .filter(|m| q.level.is_none_or(|l| l == m.level))
        .map(SegmentInfo::from)
        .collect();
    Ok(Json(SegmentsResponse {
        count: segments.len(),
        bytes: segments.iter().map(|s| s.size_bytes).sum(),
        segments,
    }))
}

#[derive(Deserialize, Default)]
struct CompactRequest {
    tenant: Option<String>,
    start_ms: Option<i64>,
    end_ms: Option<i64>,
}

async fn compact(
    State(state): State<AppRef>,
    headers: HeaderMap,
    body: axum::body::Bytes,
) -> ApiResult<Json<CompactReport>> {
    authorize(&state, &headers)?;
    let req: CompactRequest = if body.iter().all(|b| b.is_ascii_whitespace()) {
        CompactRequest::default()
    } else {
        serde_json::from_slice(&body)
            .map_err(|e| ApiError::bad_request(format!("invalid compact request: {e}")))?
    };
    let tenant = tenant_param(req.tenant.as_deref())?;
    let range = range_param(req.start_ms, req.end_ms);
    let store = state.store()?;
    let report =
        tokio::task::spawn_blocking(move || store.compact(tenant.as_ref(), range, &|_| {}))
            .await
            .map_err(|e| ApiError::internal(format!("compaction task failed: {e}")))??;
    Ok(Json(report))
}

#[derive(Deserialize)]
struct RetentionRequest {
    tenant: String,
    /// `30d`, `12h`, … or `forever`/`null` to keep everything.
    max_age: Option<String>,
}

#[derive(Serialize)]
struct RetentionResponse {
    tenant: TenantId,
    max_age_ms: Option<i64>,
    /// The retention run done right after the change.
    applied: RetentionReport,
}

async fn retention(
    State(state): State<AppRef>,
    headers: HeaderMap,
    body: axum::body::Bytes,
) -> ApiResult<Json<RetentionResponse>> {
    authorize(&state, &headers)?;
    let req: RetentionRequest = serde_json::from_slice(&body)
        .map_err(|e| ApiError::bad_request(format!("invalid retention request: {e}")))?;
    let tenant =
        TenantId::new(req.tenant.trim()).map_err(|e| ApiError::bad_request(e.to_string()))?;
    let max_age = match req.max_age.as_deref() {
        None => None,
        Some(s) => parse_max_age(s)?,
    };
    let store = state.store()?;
    let (settings, applied) = tokio::task::spawn_blocking(move || {
        let s = store.set_retention(&tenant, max_age)?;
        let r = store.apply_retention()?;
        Ok::<_, profiledb_storage::StorageError>((s, r))
    })
    .await
    .map_err(|e| ApiError::internal(format!("retention task failed: {e}")))??;
    Ok(Json(RetentionResponse {
        tenant: TenantId::new(req.tenant.trim())
            .map_err(|e| ApiError::bad_request(e.to_string()))?,
        max_age_ms: settings.max_age_ms,
        applied,
    }))
}
