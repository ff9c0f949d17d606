//! HTTP routes. Each submodule owns one family of endpoints.

pub mod access;
mod admin;
mod alerts;
mod control;
mod fleet_boost;
pub(crate) mod ingest;
mod labels;
pub mod listener;
mod otlp;
pub(crate) mod query;
pub mod query_memory;
pub(crate) mod request;
mod system;
mod ui;

use std::sync::Arc;

use axum::extract::Request;
use axum::middleware;
use axum::response::{IntoResponse, Response};
use axum::Router;

use axum::http::HeaderMap;
use profiledb_storage::TenantId;

use crate::error::ApiError;
use crate::AppState;

/// Header selecting the tenant, as in Pyroscope, Loki and Mimir.
pub const TENANT_HEADER: &str = "X-Scope-OrgID";

/// The request's tenant: `X-Scope-OrgID`, or the default tenant when absent.
///
/// Handlers call this after the gate ([`crate::tenancy::gate`]) ran: with
/// authentication on, the gate has replaced the header by the credential's tenant
/// (refusing a request that named another), so this is the authenticated tenant.
pub fn tenant_of(headers: &HeaderMap) -> Result<TenantId, ApiError> {
    match headers.get(TENANT_HEADER) {
        None => Ok(TenantId::default()),
        Some(v) => {
            let s = v
                .to_str()
                .map_err(|_| ApiError::bad_request(format!("{TENANT_HEADER} is not valid text")))?;
            TenantId::new(s.trim()).map_err(|e| ApiError::bad_request(e.to_string()))
        }
    }
}

pub type AppRef = Arc<AppState>;

pub fn router(state: AppRef) -> Router {
    Router::new()
        .merge(system::routes())
        .merge(ingest::routes())
        .merge(labels::routes().route_layer(middleware::from_fn_with_state(
            state.clone(),
            query_memory::admit,
        )))
        .merge(otlp::routes())
        .merge(query::routes().route_layer(middleware::from_fn_with_state(
            state.clone(),
            query_memory::admit,
        )))
        .merge(
            crate::cluster::split::routes().route_layer(middleware::from_fn_with_state(
                state.clone(),
                query_memory::admit,
            )),
        )
        .merge(admin::routes())
        .merge(alerts::routes())
        .merge(control::routes())
        .merge(fleet_boost::routes())
        .merge(ui::routes())
        .merge(crate::adhoc::http::routes(&state))
        .merge(
            crate::debuginfo::http::routes(&state).route_layer(middleware::from_fn_with_state(
                state.clone(),
                query_memory::admit,
            )),
        )
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .layer(middleware::map_response(json_errors))
        .layer(middleware::from_fn_with_state(
            state.clone(),
            crate::tenancy::gate,
        ))
        .layer(middleware::from_fn_with_state(
            state.clone(),
            access::observe,
        ))
        .with_state(state)
}

/// An unknown route: a 404 naming it, or Connect's `unimplemented` when it names a
/// Connect procedure we do not serve (a newer Grafana calling a method we lack).
async fn not_found(req: Request) -> Response {
    let path = req.uri().path();
    if req.method() == axum::http::Method::POST && query::is_procedure(path) {
        return query::unimplemented(path).into_response();
    }
    ApiError::new(
        axum::http::StatusCode::NOT_FOUND,
        "not_found",
        format!("no endpoint {} {}", req.method(), path),
    )
    .into_response()
}

async fn method_not_allowed(req: Request) -> ApiError {
    ApiError::new(
        axum::http::StatusCode::METHOD_NOT_ALLOWED,
        "method_not_allowed",
        format!("{} is not allowed on {}", req.method(), req.uri().path()),
    )
}

/// Gives an error answered without a JSON body (axum's and tower's rejections: a
/// body over the limit, a malformed path or JSON, a missing content type) the
/// `{"code", "message"}` body every other error has, with their text as the message.
async fn json_errors(resp: Response) -> Response {
    let status = resp.status();
    let is_json = resp
        .headers()
        .get(axum::http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/json") || v.starts_with("application/grpc"));
    if !(status.is_client_error() || status.is_server_error()) || is_json {
        return resp;
    }
    let (parts, body) = resp.into_parts();
    let text = axum::body::to_bytes(body, 64 << 10)
        .await
        .map(|b| String::from_utf8_lossy(&b).trim().to_string())
        .unwrap_or_default();
    let message = match text.is_empty() {
        true => status
            .canonical_reason()
            .unwrap_or("request failed")
            .to_string(),
        false => text,
    };
    let mut out = ApiError::new(status, error_code(status), message).into_response();
    for (name, value) in parts.headers.iter() {
        if name != axum::http::header::CONTENT_TYPE && name != axum::http::header::CONTENT_LENGTH {
            out.headers_mut().insert(name.clone(), value.clone());
        }
    }
    out
}

/// The error code of a status when the rejection did not name one.
fn error_code(status: axum::http::StatusCode) -> &'static str {
    match status.as_u16() {
        400 | 422 => "invalid_argument",
        401 => "unauthenticated",
        403 => "permission_denied",
        404 => "not_found",
        405 => "method_not_allowed",
        408 => "deadline_exceeded",
        413 => "payload_too_large",
        414 => "uri_too_long",
        415 => "unsupported_media_type",
        429 => "resource_exhausted",
        503 => "unavailable",
        _ => "internal",
    }
}
