//! Query endpoints: the Pyroscope `querier.v1` Connect API and the Connect services
//! Grafana calls beside it (version, feature flags, settings), Pyroscope's legacy
//! render endpoints, the native group-by, time series, diff, flame graph, pprof
//! and SVG endpoints, and the fleet analyses (`fleet*.rs`).
//!
//! Every query runs on the blocking pool through the store's query engine
//! (`AppState::engine`), which holds the result cache, the function-name indexes
//! and the limits.

mod analyze;
mod answers;
pub(crate) mod connect;
mod diffsvg;
mod dot;
mod fleet;
mod fleet_cpi;
pub(crate) mod fleet_variance;
mod functions;
mod go_pgo;
mod grid;
mod heatmap;
mod individual;
mod merges;
mod native;
mod pprof;
mod proto;
mod querier;
mod render;
mod services;
mod warnings;

pub(crate) use answers::{AnswerCache, AnswerStats};
pub(crate) use services::{is_procedure, unimplemented};

use axum::Router;

use super::AppRef;

pub fn routes() -> Router<AppRef> {
    Router::new()
        .merge(querier::routes())
        .merge(render::routes())
        .merge(native::routes())
        .merge(functions::routes())
        .merge(fleet::routes())
        .merge(fleet_cpi::routes())
        .merge(fleet_variance::routes())
        .merge(diffsvg::routes())
        .merge(services::routes())
}
