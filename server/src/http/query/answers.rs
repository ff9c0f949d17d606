//! Whole answers, kept by the server in its own bounded cache.
//!
//! The querier already caches the segment part of a merge or group-by, but a hit
//! still merges in the head, renders the flame graph or diff and serializes JSON:
//! several milliseconds for a large profile. When no head partition overlaps the
//! query's ranges, the answer depends on immutable segments alone, so the finished
//! body is kept under the store's current `segments_version` and served as is. A
//! flush, compaction, retention run or late write into those ranges either puts a
//! head partition over them (no lookup) or bumps the version (the old entry is never
//! looked up again, and ages out under the byte bound).
//!
//! Bodies are HTTP's business, so they are kept here rather than in the storage
//! engine's cache; the engine only tells whether and at which version an answer is
//! segment-only ([`profiledb_storage::Store::segments_only_version`]).

use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};

use axum::http::header;
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use profiledb_storage::{AskedBefore, TenantId, TimeRange};

use crate::error::ApiResult;
use crate::http::AppRef;

/// What an answer depends on: the request (with its ranges resolved) and the
/// segment set it was computed from.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct AnswerKey {
    tenant: TenantId,
    ranges: Vec<TimeRange>,
    /// The request's identity (its body or query string).
    request: String,
    segments_version: u64,
}

#[derive(Clone)]
struct BodyWeight;

impl quick_cache::Weighter<AnswerKey, Bytes> for BodyWeight {
    fn weight(&self, k: &AnswerKey, v: &Bytes) -> u64 {
        (k.request.len() + k.ranges.len() * 16 + v.len() + 64) as u64
    }
}

/// Answers served whole / computed (for `/metrics`).
#[derive(Debug, Default)]
pub struct AnswerStats {
    pub hits: AtomicU64,
    pub misses: AtomicU64,
}

impl AnswerStats {
    fn count(&self, hit: bool) {
        let c = if hit { &self.hits } else { &self.misses };
        c.fetch_add(1, Ordering::Relaxed);
    }
}

/// Finished response bodies of segment-only queries, bounded by bytes. A body is
/// kept from its request's second ask on: its key holds the exact ranges, and a
/// dashboard sliding "the last hour" asks each once (see
/// `profiledb_storage::AskedBefore`).
pub struct AnswerCache {
    bodies: quick_cache::sync::Cache<AnswerKey, Bytes, BodyWeight>,
    asked: AskedBefore,
    enabled: bool,
    pub stats: AnswerStats,
}

impl AnswerCache {
    /// The share of the query cache budget kept for whole answers; the querier
    /// gets the rest (see [`AnswerCache::querier_bytes`]), so the configured
    /// budget still bounds both. 0 disables the cache.
    pub fn new(query_cache_bytes: u64) -> Self {
        let bytes = (query_cache_bytes / 4).max(1 << 20);
        AnswerCache {
            bodies: quick_cache::sync::Cache::with_weighter(
                (bytes / 4096).clamp(64, 1_000_000) as usize,
                bytes,
                BodyWeight,
            ),
            asked: AskedBefore::default(),
            enabled: query_cache_bytes > 0,
            stats: AnswerStats::default(),
        }
    }

    /// Bytes of the answers held.
    pub fn weight(&self) -> u64 {
        self.bodies.weight()
    }

    /// What is left of `query_cache_bytes` for the querier's result cache.
    pub fn querier_bytes(query_cache_bytes: u64) -> u64 {
        query_cache_bytes - query_cache_bytes / 4
    }

    fn get(&self, key: &AnswerKey) -> Option<Bytes> {
        let found = self.enabled.then(|| self.bodies.get(key)).flatten();
        self.stats.count(found.is_some());
        found
    }

    fn insert(&self, key: AnswerKey, body: Bytes) {
        if self.enabled && self.asked.asked_before(&key) {
            self.bodies.insert(key, body);
        }
    }
}

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
    let store = state.store()?;
    let Some(version) = store.segments_only_version(tenant, ranges) else {
        return Ok(body(content_type, compute().await?.into()));
    };
    let key = AnswerKey {
        tenant: tenant.clone(),
        ranges: ranges.to_vec(),
        request: key,
        segments_version: version,
    };
    if let Some(b) = state.answers.get(&key) {
        return Ok(body(content_type, b));
    }
    let computed = answer_bytes(compute().await?);
    // Kept only if nothing reached these ranges while it was computed.
    if store.segments_only_version(tenant, ranges) == Some(version) {
        state.answers.insert(key, computed.clone());
    }
    Ok(body(content_type, computed))
}

fn body(content_type: &'static str, b: Bytes) -> Response {
    ([(header::CONTENT_TYPE, content_type)], b).into_response()
}

/// An encoded answer as a body that is sent and cached without copying. The
/// spare capacity is given back first, so a cached answer weighs what it holds.
fn answer_bytes(mut v: Vec<u8>) -> Bytes {
    v.shrink_to_fit();
    Bytes::from(v)
}
