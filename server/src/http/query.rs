//! Query endpoints: the Pyroscope `querier.v1` Connect API, Pyroscope's legacy
//! render endpoints, and the native group-by, time series, diff, flame graph, pprof
//! and SVG endpoints.
//!
//! Every query runs on the blocking pool through the store's querier
//! (`AppState::querier`), which holds the result cache, the function-name indexes
//! and the limits; whole answers are cached apart (`answers`).

mod answers;
mod connect;
mod diffsvg;
mod native;
mod pprof;
mod proto;
mod querier;
mod render;

use axum::http::StatusCode;
use axum::Router;
use profiledb_storage::{Matcher, QueryError, Selector, StorageError, PROFILE_TYPE_LABEL};

pub(crate) use answers::{AnswerCache, AnswerStats};

use super::AppRef;
use crate::error::{ApiError, ApiResult};

pub fn routes() -> Router<AppRef> {
    Router::new()
        .merge(querier::routes())
        .merge(render::routes())
        .merge(native::routes())
        .merge(diffsvg::routes())
}

/// Maps storage errors, turning timeouts into 503 and budget overruns into 422.
pub(crate) fn storage_error(e: StorageError) -> ApiError {
    match e {
        StorageError::Query(e @ QueryError::Timeout) => ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "deadline_exceeded",
            e.to_string(),
        ),
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

#[cfg(test)]
mod tests {
    use profiledb_storage::Budget;

    use super::*;

    /// The typed storage errors a query can end with, and the answer each gets.
    #[test]
    fn storage_errors_map_by_variant() {
        let timeout = storage_error(QueryError::Timeout.into());
        assert_eq!(
            (timeout.status, timeout.code),
            (StatusCode::SERVICE_UNAVAILABLE, "deadline_exceeded")
        );
        assert!(timeout.message.contains("timed out"), "{}", timeout.message);

        let too_large = storage_error(
            QueryError::TooLarge {
                budget: Budget::TreeNodes,
                limit: 3,
            }
            .into(),
        );
        assert_eq!(
            (too_large.status, too_large.code),
            (StatusCode::UNPROCESSABLE_ENTITY, "query_too_large")
        );
        assert!(
            too_large.message.contains("exceeds 3 nodes"),
            "{}",
            too_large.message
        );

        let groups = storage_error(
            QueryError::TooLarge {
                budget: Budget::Groups,
                limit: 7,
            }
            .into(),
        );
        assert_eq!(groups.status, StatusCode::UNPROCESSABLE_ENTITY);
        assert!(
            groups.message.contains("more than 7 groups"),
            "{}",
            groups.message
        );

        let invalid = storage_error(StorageError::Invalid("bad matcher".into()));
        assert_eq!(
            (invalid.status, invalid.code, invalid.message.as_str()),
            (StatusCode::BAD_REQUEST, "invalid_argument", "bad matcher")
        );
    }
}
