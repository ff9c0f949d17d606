//! Ad-hoc profile endpoints (docs/api.md, "Ad-hoc profiles"):
//! - `POST /api/v1/adhoc?name=&format=&sampleRate=`: upload a file → its id;
//! - `GET /api/v1/adhoc`: the tenant's uploads, the limits and what they hold;
//! - `GET /api/v1/adhoc/{id}`, `DELETE /api/v1/adhoc/{id}`;
//! - `GET /api/v1/adhoc/{id}/flamegraph`, `/functions`: as `/api/v1/flamegraph`
//!   and `/api/v1/functions` answer for stored data;
//! - `POST /api/v1/adhoc/diff`: a diff (as `/api/v1/diff` answers) of two sides,
//!   each an upload or a stored query.

use axum::body::Body;
use axum::extract::{Path, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{middleware, Json, Router};
use bytes::Bytes;
use profiledb_ingest::IngestParams;
use std::borrow::Cow;

use profiledb_storage::{diff_stats, flamegraph, flamegraph_diff, CallTree, Querier, TenantId};
use serde::Deserialize;
use serde_json::json;

use super::AdhocProfile;
use crate::error::{ApiError, ApiResult};
use crate::http::ingest::read_body;
use crate::http::query::{diff_body, flamegraph_body, functions_body, JSON};
use crate::http::request::{blocking, max_nodes, window_args, Params, Selection, TimeArg};
use crate::http::{query_memory, tenant_of, AppRef};

pub fn routes(state: &AppRef) -> Router<AppRef> {
    Router::new()
        .route("/api/v1/adhoc", get(list).post(upload))
        .route(
            "/api/v1/adhoc/diff",
            post(diff).route_layer(middleware::from_fn_with_state(
                state.clone(),
                query_memory::admit,
            )),
        )
        .route("/api/v1/adhoc/{id}", get(meta).delete(remove))
        .route("/api/v1/adhoc/{id}/flamegraph", get(flame))
        .route("/api/v1/adhoc/{id}/functions", get(functions))
}

/// The `/ingest` parameters an upload may give; `name` only names the upload.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct UploadParams {
    name: Option<String>,
    format: Option<String>,
    #[serde(rename = "sampleRate")]
    sample_rate: Option<String>,
    #[serde(rename = "spyName")]
    spy_name: Option<String>,
    units: Option<String>,
    #[serde(rename = "aggregationType")]
    aggregation_type: Option<String>,
}

const MAX_NAME_CHARS: usize = 200;

async fn upload(
    State(state): State<AppRef>,
    headers: HeaderMap,
    Params(p): Params<UploadParams>,
    body: Body,
) -> ApiResult<Response> {
    let tenant = tenant_of(&headers)?;
    // A tenant at its count is refused before its file is read and decoded.
    state.adhoc.check_count(&tenant)?;
    let _turn = state
        .adhoc
        .decoding
        .acquire()
        .await
        .map_err(|_| ApiError::unavailable("the server is shutting down"))?;
    let limit = state.adhoc.options().max_file_bytes;
    let bytes = read_body(body, &headers, limit).await.map_err(|e| {
        if e.status != StatusCode::PAYLOAD_TOO_LARGE {
            return e;
        }
        ApiError::new(
            e.status,
            e.code,
            format!("the file is larger than --adhoc-max-file-mb ({limit} bytes)"),
        )
    })?;
    if bytes.is_empty() {
        return Err(ApiError::bad_request(
            "empty request body: expected a profile file",
        ));
    }
    let name = p
        .name
        .clone()
        .filter(|n| !n.trim().is_empty())
        .unwrap_or_else(|| "upload".into());
    if name.chars().count() > MAX_NAME_CHARS || name.chars().any(char::is_control) {
        return Err(ApiError::bad_request(format!(
            "name must be at most {MAX_NAME_CHARS} characters of text"
        )));
    }
    let fields = [
        ("format", &p.format),
        ("sampleRate", &p.sample_rate),
        ("spyName", &p.spy_name),
        ("units", &p.units),
        ("aggregationType", &p.aggregation_type),
    ];
    let pairs = fields
        .into_iter()
        .filter_map(|(k, v)| Some((k, v.as_deref()?)))
        .chain([("name", "adhoc")]);
    let limits = state.options.ingest.limits.clone();
    let params = IngestParams::from_pairs(pairs, profiledb_storage::now_ms(), &limits)?;
    let symbols = state.store_if_open().and_then(|s| s.symbolizer());
    let file_bytes = bytes.len() as u64;
    let t = tenant.clone();
    let profile =
        blocking(move || AdhocProfile::decode(bytes, params, t, &limits, symbols.as_deref()))
            .await?;
    let meta = state.adhoc.insert(&tenant, name, file_bytes, profile)?;
    Ok((StatusCode::CREATED, Json(meta)).into_response())
}

async fn list(
    State(state): State<AppRef>,
    headers: HeaderMap,
) -> ApiResult<Json<serde_json::Value>> {
    let tenant = tenant_of(&headers)?;
    let o = state.adhoc.options();
    let profiles = state.adhoc.list(&tenant);
    let bytes: u64 = profiles.iter().map(|m| m.bytes).sum();
    Ok(Json(json!({
        "profiles": profiles,
        "held": {"profiles": profiles.len(), "bytes": bytes},
        "limits": {
            "max_profiles": o.max_profiles,
            "max_bytes": o.max_bytes,
            "max_file_bytes": o.max_file_bytes,
            "ttl_seconds": o.ttl.as_secs_f64(),
        },
    })))
}

async fn meta(
    State(state): State<AppRef>,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> ApiResult<Json<super::Meta>> {
    let tenant = tenant_of(&headers)?;
    Ok(Json(state.adhoc.get(&tenant, &id)?.0))
}

async fn remove(
    State(state): State<AppRef>,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> ApiResult<StatusCode> {
    let tenant = tenant_of(&headers)?;
    state.adhoc.remove(&tenant, &id)?;
    Ok(StatusCode::NO_CONTENT)
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct ViewParams {
    profile_type: Option<String>,
    max_nodes: Option<i64>,
    /// For `/functions`: the top `limit` by self and by total (default 1000, 0 = all).
    limit: Option<usize>,
}

fn json_response(body: Vec<u8>) -> Response {
    ([(header::CONTENT_TYPE, JSON)], body).into_response()
}

/// `GET /api/v1/adhoc/{id}/flamegraph?profile_type=&max_nodes=`
async fn flame(
    State(state): State<AppRef>,
    headers: HeaderMap,
    Path(id): Path<String>,
    Params(p): Params<ViewParams>,
) -> ApiResult<Response> {
    let mn = max_nodes(p.max_nodes)?;
    let (_, profile) = state.adhoc.get(&tenant_of(&headers)?, &id)?;
    let body = blocking(move || {
        let t = profile.pick(p.profile_type.as_deref())?;
        flamegraph_body(&flamegraph(&t.tree, mn), Vec::new())
    })
    .await?;
    Ok(json_response(body))
}

/// `GET /api/v1/adhoc/{id}/functions?profile_type=&limit=`
async fn functions(
    State(state): State<AppRef>,
    headers: HeaderMap,
    Path(id): Path<String>,
    Params(p): Params<ViewParams>,
) -> ApiResult<Response> {
    let (_, profile) = state.adhoc.get(&tenant_of(&headers)?, &id)?;
    let limit = p.limit.unwrap_or(1000);
    let body = blocking(move || {
        let t = profile.pick(p.profile_type.as_deref())?;
        functions_body(&t.tree, limit, Vec::new())
    })
    .await?;
    Ok(json_response(body))
}

/// One side of a diff: an upload (`id`, and `profile_type` to pick one of its
/// types) or a stored query (`query` as `<type>{matchers}`, `start`, `end`).
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct Side {
    id: Option<String>,
    profile_type: Option<String>,
    query: Option<String>,
    start: Option<TimeArg>,
    end: Option<TimeArg>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct DiffRequest {
    base: Side,
    compare: Side,
    #[serde(default = "default_top")]
    top: usize,
    max_nodes: Option<i64>,
}

fn default_top() -> usize {
    10
}

/// A side resolved: the tree it stands for and its profile type.
enum Resolved {
    Upload(std::sync::Arc<AdhocProfile>, Option<String>),
    Stored(Selection, profiledb_storage::TimeRange),
}

fn resolve(state: &AppRef, headers: &HeaderMap, name: &str, s: Side) -> ApiResult<Resolved> {
    match (s.id, s.query) {
        (Some(id), None) => {
            if s.start.is_some() || s.end.is_some() {
                return Err(ApiError::bad_request(format!(
                    "{name}: start and end go with a query, not an upload's id"
                )));
            }
            let (_, p) = state.adhoc.get(&tenant_of(headers)?, &id)?;
            Ok(Resolved::Upload(p, s.profile_type))
        }
        (None, Some(q)) => {
            if s.profile_type.is_some() {
                return Err(ApiError::bad_request(format!(
                    "{name}: a query names its profile type itself (<type>{{matchers}})"
                )));
            }
            let sel = Selection::from_query(Some(&q))?;
            Ok(Resolved::Stored(
                sel,
                window_args(s.start.as_ref(), s.end.as_ref())?,
            ))
        }
        _ => Err(ApiError::bad_request(format!(
            "{name}: give either id (an ad-hoc profile) or query (stored data)"
        ))),
    }
}

/// The call tree a side stands for (an upload's own, borrowed) and its profile type.
fn side_tree<'a>(
    side: &'a Resolved,
    stored_type: Option<&str>,
    querier: Option<&Querier>,
    tenant: &TenantId,
) -> ApiResult<(Cow<'a, CallTree>, String)> {
    match side {
        Resolved::Upload(p, pt) => {
            // An upload with several types compares the one the stored side queries.
            let want = pt.as_deref().or_else(|| {
                let st = stored_type?;
                p.types.iter().any(|t| t.profile_type == st).then_some(st)
            });
            let t = p.pick(want)?;
            Ok((Cow::Borrowed(&t.tree), t.profile_type.clone()))
        }
        Resolved::Stored(sel, range) => {
            let q = querier.ok_or_else(|| ApiError::internal("no querier for a stored side"))?;
            let merged = q.merge_flamegraph(tenant, &sel.selector, *range)?;
            let pt = sel.profile_type.as_str().to_string();
            Ok((Cow::Owned(merged.to_tree_checked()?), pt))
        }
    }
}

/// `POST /api/v1/adhoc/diff`
async fn diff(State(state): State<AppRef>, headers: HeaderMap, body: Bytes) -> ApiResult<Response> {
    let r: DiffRequest = serde_json::from_slice(&body)
        .map_err(|e| ApiError::bad_request(format!("invalid JSON request: {e}")))?;
    let mn = max_nodes(r.max_nodes)?;
    let top = r.top.clamp(1, 10_000);
    let base = resolve(&state, &headers, "base", r.base)?;
    let compare = resolve(&state, &headers, "compare", r.compare)?;
    let stored_type = [&base, &compare].into_iter().find_map(|s| match s {
        Resolved::Stored(sel, _) => Some(sel.profile_type.as_str().to_string()),
        Resolved::Upload(..) => None,
    });
    let needs_querier = stored_type.is_some();
    let querier = needs_querier.then(|| state.querier()).transpose()?;
    let tenant = tenant_of(&headers)?;
    let body = blocking(move || {
        let (q, st) = (querier.as_deref(), stored_type.as_deref());
        let (l, lt) = side_tree(&base, st, q, &tenant)?;
        let (r, rt) = side_tree(&compare, st, q, &tenant)?;
        let mut warnings = Vec::new();
        if lt != rt {
            warnings.push(format!(
                "the sides are different profile types ({lt} and {rt}): shares compare, values do not"
            ));
        }
        let (top, stats) = diff_stats(&l, &r, top);
        diff_body(&flamegraph_diff(&l, &r, mn), &top, &stats, None, warnings)
    })
    .await?;
    Ok(json_response(body))
}
