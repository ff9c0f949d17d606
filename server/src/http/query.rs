//! Query endpoints: group-by, time series, diff, flame graphs and pprof export.

use axum::Router;

use super::AppRef;

pub fn routes() -> Router<AppRef> {
    Router::new()
}
