//! Liveness, readiness and metrics.

use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;

use super::AppRef;
use crate::metrics;
use crate::Readiness;

pub fn routes() -> Router<AppRef> {
    Router::new()
        .route("/ready", get(ready))
        .route("/healthy", get(|| async { "ok\n" }))
        .route("/metrics", get(prometheus))
}

/// 200 `ready` once the store is open and the last day's segments are warm;
/// until then 503 with `Retry-After: 1` and where it stands: the replay's
/// progress, `{"status": "replaying", "replayed_bytes": …, "total_bytes": …}`,
/// then `{"status": "warming", …}` (queries are answered meanwhile).
async fn ready(State(state): State<AppRef>) -> Response {
    let body = match state.readiness() {
        Readiness::Ready => return (StatusCode::OK, "ready\n").into_response(),
        Readiness::Opening => {
            let (replayed, total) = state.replay.bytes();
            serde_json::json!({
                "status": "replaying",
                "message": "opening the store (replaying the WAL)",
                "replayed_bytes": replayed,
                "total_bytes": total,
            })
        }
        Readiness::Waiting(w) => serde_json::json!({
            "status": w.status(),
            "message": state.cluster.get().map(|c| c.explain(w)).unwrap_or_default(),
        }),
        Readiness::Warming => serde_json::json!({
            "status": "warming",
            "message": "decoding the last day of segments for queries (answered meanwhile, the first ones slower)",
            "waited_secs_max": state.options.ready_warm_up.as_secs(),
        }),
    };
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
    state.adhoc.render_metrics(&mut body);
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

    /// A serving process is ready once its last day is warm, or once it has
    /// waited as long as configured (zero: at once); warming until then.
    #[test]
    fn readiness_waits_for_the_warm_up_up_to_its_limit() {
        let s = std::time::Duration::from_secs;
        assert_eq!(
            Readiness::of_serving(false, s(0), s(30)),
            Readiness::Warming
        );
        assert_eq!(
            Readiness::of_serving(false, s(29), s(30)),
            Readiness::Warming
        );
        assert_eq!(Readiness::of_serving(false, s(30), s(30)), Readiness::Ready);
        assert_eq!(Readiness::of_serving(true, s(0), s(30)), Readiness::Ready);
        assert_eq!(Readiness::of_serving(false, s(0), s(0)), Readiness::Ready);
    }

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
