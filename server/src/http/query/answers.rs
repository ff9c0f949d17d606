//! Whole answers kept in the query engine's cache.
//!
//! The engine already caches the segment part of a merge or group-by, but a hit still
//! merges in the head, renders the flame graph or diff and serializes JSON: several
//! milliseconds for a large profile. When no head partition overlaps the query's
//! ranges, the answer depends on immutable segments alone, so the finished body is
//! kept under the current `segments_version` and served as is. A flush, compaction,
//! retention run or late write into those ranges either puts a head partition over
//! them (no lookup) or bumps the version (the old entry is never looked up again).

use std::future::Future;
use std::sync::Arc;

use axum::http::header;
use axum::response::{IntoResponse, Response};
use profiledb_storage::{TenantId, TimeRange};

use crate::error::ApiResult;
use crate::http::AppRef;

/// Serves `key` from the cache when the answer over `ranges` is segment-only and
/// cached; otherwise runs `compute` and caches its body if it still is segment-only.
/// `key` must identify the request with its ranges resolved (never relative text
/// like `now-1h`, whose meaning moves).
pub(crate) async fn cached_answer<F, Fut>(
    state: &AppRef,
    tenant: &TenantId,
    ranges: &[TimeRange],
    key: String,
    content_type: &'static str,
    compute: F,
) -> ApiResult<Response>
where
    F: FnOnce() -> Fut,
    Fut: Future<Output = ApiResult<Vec<u8>>>,
{
    let (store, engine) = (state.store()?, state.engine()?);
    let Some(version) = store.segments_only_version(tenant, ranges) else {
        return Ok(body(content_type, compute().await?.into()));
    };
    let mut full = String::with_capacity(key.len() + 48);
    full.push_str("answer\u{0}");
    full.push_str(tenant.as_str());
    full.push('\u{0}');
    for r in ranges {
        full.push_str(&format!("{}..{};", r.start_ms, r.end_ms));
    }
    full.push('\u{0}');
    full.push_str(&key);
    full.push_str(&format!("\u{0}v{version}"));
    if let Some(b) = engine.get_body(&full) {
        return Ok(body(content_type, b));
    }
    let computed: Arc<[u8]> = compute().await?.into();
    // Kept only if nothing reached these ranges while it was computed.
    if store.segments_only_version(tenant, ranges) == Some(version) {
        engine.insert(
            full,
            Arc::new(profiledb_storage::query::cache::Cached::Body(
                computed.clone(),
            )),
        );
    }
    Ok(body(content_type, computed))
}

fn body(content_type: &'static str, b: Arc<[u8]>) -> Response {
    (
        [(header::CONTENT_TYPE, content_type)],
        bytes::Bytes::from_owner(ArcBytes(b)),
    )
        .into_response()
}

/// Lets a cached body be sent without copying it.
struct ArcBytes(Arc<[u8]>);

impl AsRef<[u8]> for ArcBytes {
    fn as_ref(&self) -> &[u8] {
        &self.0
    }
}
