//! HTTP routes. Each submodule owns one family of endpoints.

mod admin;
pub mod admission;
mod alerts;
mod control;
mod fleet_boost;
mod ingest;
mod labels;
mod otlp;
pub(crate) mod query;
pub(crate) mod request;
mod system;
mod ui;

use std::sync::atomic::Ordering;
use std::sync::Arc;

use axum::extract::{Request, State};
use axum::middleware::{self, Next};
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
            admission::admit,
        )))
        .merge(otlp::routes())
        .merge(query::routes().route_layer(middleware::from_fn_with_state(
            state.clone(),
            admission::admit,
        )))
        .merge(admin::routes())
        .merge(alerts::routes())
        .merge(control::routes())
        .merge(fleet_boost::routes())
        .merge(ui::routes())
        .merge(
            crate::debuginfo::http::routes(&state).route_layer(middleware::from_fn_with_state(
                state.clone(),
                admission::admit,
            )),
        )
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .layer(middleware::from_fn_with_state(
            state.clone(),
            crate::tenancy::gate,
        ))
        .layer(middleware::from_fn_with_state(
            state.clone(),
            count_requests,
        ))
        .layer(tower_http::trace::TraceLayer::new_for_http())
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

async fn count_requests(State(state): State<AppRef>, req: Request, next: Next) -> Response {
    let resp = next.run(req).await;
    let m = &state.http;
    m.requests.fetch_add(1, Ordering::Relaxed);
    if resp.status().is_client_error() {
        m.client_errors.fetch_add(1, Ordering::Relaxed);
    } else if resp.status().is_server_error() {
        m.server_errors.fetch_add(1, Ordering::Relaxed);
    }
    resp
}
