//! The JSON error body every endpoint answers with: `{"code": "...", "message": "..."}`.

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use profiledb_storage::{InvalidSelector, QueryError, StorageError, WriteError};

#[derive(Debug)]
pub struct ApiError {
    pub status: StatusCode,
    pub code: &'static str,
    pub message: String,
    /// `Retry-After` of a 429, in seconds (1 when unset).
    pub retry_after_secs: Option<u64>,
}

impl ApiError {
    pub fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> Self {
        ApiError {
            status,
            code,
            message: message.into(),
            retry_after_secs: None,
        }
    }

    /// A 429 that knows when the request could pass.
    pub fn with_retry_after(mut self, secs: u64) -> Self {
        self.retry_after_secs = Some(secs);
        self
    }

    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, "invalid_argument", message)
    }

    pub fn unavailable(message: impl Into<String>) -> Self {
        Self::new(StatusCode::SERVICE_UNAVAILABLE, "unavailable", message)
    }

    pub fn internal(message: impl Into<String>) -> Self {
        Self::new(StatusCode::INTERNAL_SERVER_ERROR, "internal", message)
    }
}

/// The one mapping of storage errors: invalid input 400, a full queue 429, a query
/// over its time budget 503, over its memory budget 422, the rest 500.
impl From<StorageError> for ApiError {
    fn from(e: StorageError) -> Self {
        match e {
            StorageError::Invalid(m) => ApiError::bad_request(m),
            StorageError::Busy => ApiError::new(
                StatusCode::TOO_MANY_REQUESTS,
                "resource_exhausted",
                "the write queue is full; retry after a short delay",
            ),
            StorageError::Closed => ApiError::unavailable("the store is shutting down"),
            // A query's own failures, reached through an engine call that is not
            // a `Querier` method: mapped as a query's.
            e @ (StorageError::Timeout | StorageError::TooLarge { .. }) => {
                QueryError::from(e).into()
            }
            StorageError::Bucket(b) if b.is_unreachable() => QueryError::Unavailable(b).into(),
            other => {
                tracing::error!(error = %other, "storage error");
                ApiError::internal(other.to_string())
            }
        }
    }
}

/// A query: over its time budget 503, over its memory budget 422, bad input 400,
/// an object store that does not answer 503, the rest as any storage error.
impl From<QueryError> for ApiError {
    fn from(e: QueryError) -> Self {
        match e {
            e @ QueryError::Timeout => ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "deadline_exceeded",
                e.to_string(),
            ),
            e @ QueryError::TooLarge { .. } => ApiError::new(
                StatusCode::UNPROCESSABLE_ENTITY,
                "query_too_large",
                e.to_string(),
            ),
            QueryError::Invalid(m) => ApiError::bad_request(m),
            // A querier fetching a segment from a store that does not answer:
            // not now, not a fault of the server.
            QueryError::Unavailable(b) => ApiError::unavailable(b.to_string()).with_retry_after(5),
            QueryError::Storage(e) => e.into(),
            // A variant added to the engine's non-exhaustive error: the server's.
            other => {
                tracing::error!(error = %other, "query error");
                ApiError::internal(other.to_string())
            }
        }
    }
}

/// A write: a refused batch 400, a full queue 429, a closing store 503, the rest
/// as any storage error.
impl From<WriteError> for ApiError {
    fn from(e: WriteError) -> Self {
        match e {
            WriteError::Invalid(b) => ApiError::bad_request(b.0),
            WriteError::Storage(e) => e.into(),
            other => StorageError::from(other).into(),
        }
    }
}

/// A selector that does not parse: the caller's input, 400.
impl From<InvalidSelector> for ApiError {
    fn from(e: InvalidSelector) -> Self {
        ApiError::bad_request(e.0)
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = serde_json::json!({"code": self.code, "message": self.message});
        let mut resp = (self.status, axum::Json(body)).into_response();
        // Both mean "not now": a full queue, budget or rate (429), or a server busy,
        // opening or over a query budget (503).
        if self.status == StatusCode::TOO_MANY_REQUESTS
            || self.status == StatusCode::SERVICE_UNAVAILABLE
        {
            let secs = self.retry_after_secs.unwrap_or(1).max(1);
            resp.headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from(secs));
        }
        resp
    }
}

pub type ApiResult<T> = Result<T, ApiError>;

impl From<profiledb_ingest::IngestError> for ApiError {
    fn from(e: profiledb_ingest::IngestError) -> Self {
        let status = StatusCode::from_u16(e.http_status()).unwrap_or(StatusCode::BAD_REQUEST);
        ApiError::new(status, e.code(), e.to_string())
    }
}

impl From<crate::pipeline::PipelineError> for ApiError {
    fn from(e: crate::pipeline::PipelineError) -> Self {
        use crate::pipeline::PipelineError as P;
        match e {
            P::Decode(e) => e.into(),
            P::Timestamp(m) => ApiError::bad_request(m),
            P::Storage(e) => e.into(),
            P::Write(e) => e.into(),
            P::Busy => ApiError::new(
                StatusCode::TOO_MANY_REQUESTS,
                "resource_exhausted",
                "the ingest queue is full; retry after a short delay",
            ),
            P::OverMemory(m) => {
                ApiError::new(StatusCode::TOO_MANY_REQUESTS, "resource_exhausted", m)
            }
            P::Closed => ApiError::unavailable("the server is shutting down"),
            P::Limit(e) => e.into(),
        }
    }
}

#[cfg(test)]
mod tests {
    use profiledb_storage::Budget;

    use super::*;

    /// The typed errors a query can end with, and the answer each gets.
    #[test]
    fn storage_errors_map_by_variant() {
        let timeout = ApiError::from(StorageError::from(QueryError::Timeout));
        assert_eq!(
            (timeout.status, timeout.code),
            (StatusCode::SERVICE_UNAVAILABLE, "deadline_exceeded")
        );
        assert!(timeout.message.contains("timed out"), "{}", timeout.message);

        let too_large = ApiError::from(StorageError::from(QueryError::TooLarge {
            budget: Budget::TreeNodes,
            limit: 3,
        }));
        assert_eq!(
            (too_large.status, too_large.code),
            (StatusCode::UNPROCESSABLE_ENTITY, "query_too_large")
        );
        assert!(
            too_large.message.contains("exceeds 3 nodes"),
            "{}",
            too_large.message
        );

        let groups = ApiError::from(StorageError::from(QueryError::TooLarge {
            budget: Budget::Groups,
            limit: 7,
        }));
        assert_eq!(groups.status, StatusCode::UNPROCESSABLE_ENTITY);
        assert!(
            groups.message.contains("more than 7 groups"),
            "{}",
            groups.message
        );

        let part = ApiError::from(QueryError::Invalid("bad part".into()));
        assert_eq!(
            (part.status, part.code, part.message.as_str()),
            (StatusCode::BAD_REQUEST, "invalid_argument", "bad part")
        );
        let corrupt = ApiError::from(QueryError::from(StorageError::Corrupt("x".into())));
        assert_eq!(
            (corrupt.status, corrupt.code),
            (StatusCode::INTERNAL_SERVER_ERROR, "internal")
        );
        let closed = ApiError::from(QueryError::from(StorageError::Closed));
        assert_eq!(closed.status, StatusCode::SERVICE_UNAVAILABLE);

        let invalid = ApiError::from(StorageError::Invalid("bad matcher".into()));
        assert_eq!(
            (invalid.status, invalid.code, invalid.message.as_str()),
            (StatusCode::BAD_REQUEST, "invalid_argument", "bad matcher")
        );
    }
}
