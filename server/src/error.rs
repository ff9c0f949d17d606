//! The JSON error body every endpoint answers with: `{"code": "...", "message": "..."}`.

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use profiledb_storage::query::cache::TIMEOUT_PREFIX;
use profiledb_storage::StorageError;

#[derive(Debug)]
pub struct ApiError {
    pub status: StatusCode,
    pub code: &'static str,
    pub message: String,
}

impl ApiError {
    pub fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> Self {
        ApiError {
            status,
            code,
            message: message.into(),
        }
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
            StorageError::QueryLimit(m) if m.starts_with(TIMEOUT_PREFIX) => {
                ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "deadline_exceeded", m)
            }
            StorageError::QueryLimit(m) => {
                ApiError::new(StatusCode::UNPROCESSABLE_ENTITY, "query_too_large", m)
            }
            other => {
                tracing::error!(error = %other, "storage error");
                ApiError::internal(other.to_string())
            }
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = serde_json::json!({"code": self.code, "message": self.message});
        let mut resp = (self.status, axum::Json(body)).into_response();
        if self.status == StatusCode::TOO_MANY_REQUESTS {
            resp.headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
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
            P::Busy => ApiError::new(
                StatusCode::TOO_MANY_REQUESTS,
                "resource_exhausted",
                "the ingest queue is full; retry after a short delay",
            ),
            P::Closed => ApiError::unavailable("the server is shutting down"),
        }
    }
}
