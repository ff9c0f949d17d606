//! `POST /internal/v1/partial`: a peer's part of a split query, answered from
//! this querier's own view of the bucket index. An admin route: with
//! authentication on it needs the admin token, which queriers send each other;
//! either way it is cluster-internal and must not be exposed to clients (it
//! answers any tenant the body names).

use std::sync::atomic::Ordering::Relaxed;

use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::routing::post;
use axum::{Json, Router};
use bytes::Bytes;
use profiledb_storage::{TenantId, TimeRange};

use super::wire::{answer, PartReply, PartRequest, FROM_HEADER};
use crate::error::{ApiError, ApiResult};
use crate::http::request::blocking;
use crate::http::{AppRef, TENANT_HEADER};

pub fn routes() -> Router<AppRef> {
    // A literal, as every route is (the gate's route table is checked against them).
    Router::new().route("/internal/v1/partial", post(partial))
}

async fn partial(
    State(state): State<AppRef>,
    headers: HeaderMap,
    body: Bytes,
) -> ApiResult<Json<PartReply>> {
    let split = state
        .cluster
        .get()
        .and_then(|c| c.split.clone())
        .ok_or_else(|| {
            ApiError::new(
                StatusCode::NOT_FOUND,
                "not_found",
                "this process is not a querier of a cluster: it answers no query parts",
            )
        })?;
    let from = headers.get(FROM_HEADER).and_then(|v| v.to_str().ok());
    if from == Some(split.node.as_str()) {
        return Err(ApiError::new(
            StatusCode::MISDIRECTED_REQUEST,
            "misdirected",
            "this querier asked for this part itself",
        ));
    }
    let req: PartRequest = serde_json::from_slice(&body)
        .map_err(|e| ApiError::bad_request(format!("invalid query part: {e}")))?;
    let tenant = TenantId::new(&req.tenant).map_err(|e| ApiError::bad_request(e.to_string()))?;
    // Two tenants' parts never mix: the header, when sent, must name the body's.
    if let Some(h) = headers.get(TENANT_HEADER) {
        if h.to_str().map(str::trim).ok() != Some(req.tenant.as_str()) {
            return Err(ApiError::bad_request(format!(
                "{TENANT_HEADER} does not name the part's tenant {:?}",
                req.tenant
            )));
        }
    }
    if req.start_ms >= req.end_ms {
        return Err(ApiError::bad_request("a query part's range is empty"));
    }
    let querier = state.querier()?;
    blocking(move || {
        let range = TimeRange::new(req.start_ms, req.end_ms);
        if querier.source_spans(&tenant, range)? != req.expect {
            split.stats.parts_refused.fetch_add(1, Relaxed);
            return Err(ApiError::new(
                StatusCode::CONFLICT,
                "view_differs",
                "this querier's view of the bucket index differs from the asker's for this part (one of them synced later); ask another",
            ));
        }
        let a = answer(&querier, &tenant, range, &req.kind)?;
        split.stats.parts_served.fetch_add(1, Relaxed);
        Ok(Json(PartReply {
            tenant: req.tenant,
            answer: a,
        }))
    })
    .await
}
