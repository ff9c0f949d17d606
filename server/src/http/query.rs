//! Query endpoints: the Pyroscope `querier.v1` Connect API, Pyroscope's legacy
//! render endpoints, and the native group-by, time series, diff, flame graph, pprof
//! and SVG endpoints.
//!
//! Every query runs on the blocking pool through a per-store [`QueryEngine`] that
//! holds the result cache, the function-name indexes and the limits.

mod connect;
mod native;
mod pprof;
mod proto;
mod querier;
mod render;

use std::sync::{Arc, LazyLock, Mutex, Weak};
use std::time::Duration;

use axum::http::StatusCode;
use axum::Router;
use profiledb_storage::query::cache::{QueryEngine, QueryLimits, TIMEOUT_PREFIX};
use profiledb_storage::{Matcher, Selector, StorageError, Store, PROFILE_TYPE_LABEL};

use super::AppRef;
use crate::error::{ApiError, ApiResult};

pub fn routes() -> Router<AppRef> {
    Router::new()
        .merge(querier::routes())
        .merge(render::routes())
        .merge(native::routes())
}

fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(default)
}

/// Limits from the environment (`PROFILEDB_QUERY_CACHE_MB`, `PROFILEDB_QUERY_TIMEOUT_MS`,
/// `PROFILEDB_QUERY_MAX_NODES`, `PROFILEDB_QUERY_MAX_GROUPS`), read once per store.
fn new_engine() -> QueryEngine {
    let d = QueryLimits::default();
    let limits = QueryLimits {
        timeout: Duration::from_millis(env_u64(
            "PROFILEDB_QUERY_TIMEOUT_MS",
            d.timeout.as_millis() as u64,
        )),
        max_tree_nodes: env_u64("PROFILEDB_QUERY_MAX_NODES", d.max_tree_nodes as u64) as usize,
        max_groups: env_u64("PROFILEDB_QUERY_MAX_GROUPS", d.max_groups as u64) as usize,
    };
    QueryEngine::with_stats(
        env_u64("PROFILEDB_QUERY_CACHE_MB", 256) << 20,
        limits,
        crate::metrics::QUERY_CACHE.clone(),
    )
}

/// One engine per open store. `AppState` has no slot for it, so engines live in a
/// registry keyed by the store's identity (weak, so a closed store's engine goes).
type Registry = Mutex<Vec<(Weak<Store>, Arc<QueryEngine>)>>;

static ENGINES: LazyLock<Registry> = LazyLock::new(|| Mutex::new(Vec::new()));

pub(crate) fn engine_for(store: &Arc<Store>) -> Arc<QueryEngine> {
    let mut list = match ENGINES.lock() {
        Ok(l) => l,
        Err(p) => p.into_inner(),
    };
    list.retain(|(w, _)| w.strong_count() > 0);
    if let Some((_, e)) = list
        .iter()
        .find(|(w, _)| w.upgrade().is_some_and(|s| Arc::ptr_eq(&s, store)))
    {
        return e.clone();
    }
    let e = Arc::new(new_engine());
    list.push((Arc::downgrade(store), e.clone()));
    e
}

/// Maps storage errors, turning timeouts into 503 and budget overruns into 422.
pub(crate) fn storage_error(e: StorageError) -> ApiError {
    match e {
        StorageError::QueryLimit(m) if m.starts_with(TIMEOUT_PREFIX) => {
            ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "deadline_exceeded", m)
        }
        other => other.into(),
    }
}

pub(crate) async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> ApiResult<T> + Send + 'static,
) -> ApiResult<T> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| ApiError::internal(format!("query task failed: {e}")))?
}

/// `profile_type` plus `{matchers}` → one selector.
pub(crate) fn selector_for(profile_type: &str, label_selector: &str) -> ApiResult<Selector> {
    let text = if label_selector.trim().is_empty() {
        "{}"
    } else {
        label_selector
    };
    let mut sel = Selector::parse(text).map_err(storage_error)?;
    if !profile_type.is_empty() {
        sel = sel.with(Matcher::eq(PROFILE_TYPE_LABEL, profile_type));
    }
    Ok(sel)
}
