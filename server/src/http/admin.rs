//! Segment lifecycle administration: `GET /api/v1/admin/segments`,
//! `POST /api/v1/admin/compact`, `GET` and `PUT /api/v1/admin/retention` (with a dry
//! run that lists what would be deleted). Times take every form the query API takes.
//!
//! When the server runs with an admin token (`--admin-token`), every admin request
//! must carry `Authorization: Bearer <token>`; otherwise it gets 401.

use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::routing::{get, post, put};
use axum::{Json, Router};
use profiledb_storage::SegmentMeta;
use profiledb_storage::{now_ms, TenantId, TimeRange};
use profiledb_storage::{CompactReport, RetentionReport};
use serde::{Deserialize, Serialize};

use super::request::{blocking, Params, TimeArg};
use super::AppRef;
use crate::error::{ApiError, ApiResult};
use crate::retention;
use crate::time::{format_max_age, parse_max_age};

pub fn routes() -> Router<AppRef> {
    Router::new()
        .route("/api/v1/admin/segments", get(segments))
        .route("/api/v1/admin/compact", post(compact))
        .route("/api/v1/admin/retention", put(retention).get(get_retention))
}

/// Checks the bearer token when one is configured.
pub(super) fn authorize(state: &AppRef, headers: &HeaderMap) -> ApiResult<()> {
    if state.options.admin_token.is_none() || crate::tenancy::has_admin_token(state, headers) {
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

/// `[start, end)` of optional times (open-ended where absent), or `None` for all.
fn range_param(start: Option<&TimeArg>, end: Option<&TimeArg>) -> ApiResult<Option<TimeRange>> {
    if start.is_none() && end.is_none() {
        return Ok(None);
    }
    let now = now_ms();
    let s = start.map(|t| t.resolve("start", now)).transpose()?;
    let e = end.map(|t| t.resolve("end", now)).transpose()?;
    if let (Some(s), Some(e)) = (s, e) {
        if e < s {
            return Err(ApiError::bad_request(format!(
                "end ({e}) is before start ({s})"
            )));
        }
    }
    Ok(Some(TimeRange::new(
        s.unwrap_or(i64::MIN),
        e.unwrap_or(i64::MAX),
    )))
}

#[derive(Deserialize, Default)]
struct SegmentsParams {
    tenant: Option<String>,
    /// Segments with data in `[start, end)`: ms since the epoch, `now-1h`, RFC 3339.
    start: Option<String>,
    end: Option<String>,
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
    Params(q): Params<SegmentsParams>,
) -> ApiResult<Json<SegmentsResponse>> {
    authorize(&state, &headers)?;
    let store = state.store()?;
    let tenant = tenant_param(q.tenant.as_deref())?;
    let text = |t: &Option<String>| t.clone().map(TimeArg::Text);
    let range = range_param(text(&q.start).as_ref(), text(&q.end).as_ref())?;
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
    /// Partitions overlapping `[start_ms, end_ms)`: ms or any time text.
    start_ms: Option<TimeArg>,
    end_ms: Option<TimeArg>,
}

/// 409 in a cluster: there the compactor role compacts and expires the bucket's
/// segments, and a querier's local copies are only a cache.
fn local_lifecycle(state: &AppRef) -> ApiResult<()> {
    if state.options.cluster.is_some() {
        return Err(ApiError::new(
            axum::http::StatusCode::CONFLICT,
            "cluster",
            "in a cluster (--storage) the compactor role compacts and expires segments in the bucket: see --bucket-retention-days and --merge-min-segments",
        ));
    }
    Ok(())
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
    let range = range_param(req.start_ms.as_ref(), req.end_ms.as_ref())?;
    local_lifecycle(&state)?;
    let store = state.store()?;
    let report = blocking(move || Ok(store.compact(tenant.as_ref(), range, &|_| {})?)).await?;
    Ok(Json(report))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RetentionRequest {
    tenant: String,
    /// `30d`, `12h`, … or `forever`/`null` to keep everything.
    max_age: Option<String>,
    /// Report what the new age would delete, and change nothing.
    #[serde(default)]
    dry_run: bool,
}

#[derive(Serialize)]
struct RetentionResponse {
    tenant: TenantId,
    max_age_ms: Option<i64>,
    /// `30d`, or `forever`.
    max_age: String,
    dry_run: bool,
    /// Segments the age deletes now (for a dry run: would delete).
    deleted: Vec<u64>,
    bytes_deleted: u64,
    /// The retention run done right after the change (absent on a dry run).
    #[serde(skip_serializing_if = "Option::is_none")]
    applied: Option<RetentionReport>,
    /// Things the caller probably did not mean, e.g. a tenant with no data.
    warnings: Vec<String>,
}

#[derive(Serialize)]
struct TenantRetention {
    tenant: TenantId,
    max_age_ms: Option<i64>,
    max_age: String,
    /// Whether the tenant has data (segments or head) on this server.
    has_data: bool,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RetentionParams {
    tenant: Option<String>,
}

/// `GET /api/v1/admin/retention[?tenant=]`: the age limit of every tenant with data,
/// or of the one named.
async fn get_retention(
    State(state): State<AppRef>,
    headers: HeaderMap,
    Params(q): Params<RetentionParams>,
) -> ApiResult<Json<Vec<TenantRetention>>> {
    authorize(&state, &headers)?;
    let store = state.store()?;
    let only = tenant_param(q.tenant.as_deref())?;
    let list = blocking(move || {
        let with_data = store.tenants();
        let tenants: Vec<TenantId> = match &only {
            Some(t) => vec![t.clone()],
            None => with_data.clone(),
        };
        tenants
            .into_iter()
            .map(|t| {
                let s = store.tenant_settings(&t)?;
                Ok(TenantRetention {
                    has_data: with_data.contains(&t),
                    max_age_ms: s.max_age_ms,
                    max_age: format_max_age(s.max_age_ms),
                    tenant: t,
                })
            })
            .collect::<Result<Vec<_>, profiledb_storage::StorageError>>()
            .map_err(ApiError::from)
    })
    .await?;
    Ok(Json(list))
}

async fn retention(
    State(state): State<AppRef>,
    headers: HeaderMap,
    body: axum::body::Bytes,
) -> ApiResult<Json<RetentionResponse>> {
    authorize(&state, &headers)?;
    let req: RetentionRequest = serde_json::from_slice(&body)
        .map_err(|e| ApiError::bad_request(format!("invalid retention request: {e}")))?;
    let tenant = tenant_param(Some(&req.tenant))?
        .ok_or_else(|| ApiError::bad_request("tenant is required"))?;
    let max_age_ms = match req.max_age.as_deref() {
        None => None,
        Some(s) => parse_max_age("max_age", s)?,
    };
    local_lifecycle(&state)?;
    let store = state.store()?;
    let dry_run = req.dry_run;
    let out = blocking(move || {
        let preview = retention::preview(&store, &tenant, max_age_ms, now_ms());
        let warnings: Vec<String> = preview.warning.iter().cloned().collect();
        let deleted: Vec<u64> = preview.expired.iter().map(|m| m.id).collect();
        let bytes_deleted = preview.bytes();
        let applied = if dry_run {
            None
        } else {
            store.set_retention(
                &tenant,
                max_age_ms.map(|ms| std::time::Duration::from_millis(ms.unsigned_abs())),
            )?;
            Some(store.apply_retention()?)
        };
        Ok(RetentionResponse {
            tenant,
            max_age_ms,
            max_age: format_max_age(max_age_ms),
            dry_run,
            deleted,
            bytes_deleted,
            applied,
            warnings,
        })
    })
    .await?;
    for w in &out.warnings {
        tracing::warn!(tenant = %out.tenant, "{w}");
    }
    Ok(Json(out))
}
