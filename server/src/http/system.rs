//! Liveness, readiness and metrics.

use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
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

/// 200 `ready` once the store is open; until then 503 with the replay's progress,
/// `{"status": "replaying", "replayed_bytes": …, "total_bytes": …}`.
async fn ready(State(state): State<AppRef>) -> Response {
    if state.ready() {
        return (StatusCode::OK, "ready\n").into_response();
    }
    let (replayed, total) = state.replay.bytes();
    let body = serde_json::json!({
        "status": "replaying",
        "message": "opening the store (replaying the WAL)",
        "replayed_bytes": replayed,
        "total_bytes": total,
    });
    (
        StatusCode::SERVICE_UNAVAILABLE,
        [(header::RETRY_AFTER, "1")],
        axum::Json(body),
    )
        .into_response()
}

async fn prometheus(State(state): State<AppRef>) -> impl IntoResponse {
    let mut body = metrics::render(
        &state.http,
        state
            .store_if_open()
            .or_else(|| state.cluster.get().and_then(|c| c.writer.as_ref()))
            .map(|s| s.as_ref()),
        state.pipeline_if_open(),
        state.querier_if_open().map(|q| q.as_ref()),
        &state.answers.stats,
        state.started.elapsed().as_secs(),
    );
    crate::memory::render_metrics(&state, &mut body);
    if let Some(c) = state.cluster.get() {
        c.render_metrics(&mut body);
    }
    if let Some(a) = state.alerts.get() {
        a.render_metrics(&mut body);
    }
    if let Some(c) = state.control.get() {
        c.render_metrics(&mut body, profiledb_storage::now_ms());
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

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::{AppState, ServeOptions};

    /// Before the store is open `/ready` is 503 with the replay's progress as JSON.
    #[tokio::test]
    async fn ready_reports_replay_progress_until_the_store_opens() {
        let options = ServeOptions::default();
        let tenancy = crate::tenancy::Tenancy::open(options.tenancy.clone()).unwrap();
        let state = Arc::new(AppState::new(options, tenancy));
        let resp = ready(State(state)).await;
        assert_eq!(resp.status(), StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(resp.headers()[header::RETRY_AFTER], "1");
        let body = axum::body::to_bytes(resp.into_body(), 1 << 16)
            .await
            .unwrap();
        let v: serde_json::Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(v["status"], "replaying");
        assert_eq!(v["replayed_bytes"], 0);
        assert_eq!(v["total_bytes"], 0);
    }
}
