//! Liveness, readiness and metrics.

use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::IntoResponse;
use axum::routing::get;
use axum::Router;

use super::AppRef;
use crate::metrics;

pub fn routes() -> Router<AppRef> {
    Router::new()
        .route("/ready", get(ready))
        .route("/healthy", get(|| async { "ok\n" }))
        .route("/metrics", get(prometheus))
}

async fn ready(State(state): State<AppRef>) -> impl IntoResponse {
    match state.store_if_open() {
        Some(_) => (StatusCode::OK, "ready\n"),
        None => (
            StatusCode::SERVICE_UNAVAILABLE,
            "opening the store (replaying the WAL)\n",
        ),
    }
}

async fn prometheus(State(state): State<AppRef>) -> impl IntoResponse {
    let mut body = metrics::render(
        &state.http,
        state.store_if_open().map(|s| s.as_ref()),
        state.pipeline_if_open(),
        state.querier_if_open().map(|q| q.as_ref()),
        &state.answers.stats,
        state.started.elapsed().as_secs(),
    );
    if let Some(a) = state.alerts.get() {
        a.render_metrics(&mut body);
    }
    state.tenancy.admission().render_metrics(&mut body);
    (
        [(
            header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        body,
    )
}
