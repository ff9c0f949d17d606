//! Ingest endpoints: Pyroscope's `/ingest` (also under `/pyroscope/ingest`) and the
//! Connect `push.v1.PusherService/Push`.
//!
//! Handlers read the body (bounded), extract multipart parts, and hand the bytes to
//! the ingest pipeline; decoding happens on its worker pool. The response is sent
//! once the batch is durable in the WAL.

use axum::body::Body;
use axum::extract::{RawQuery, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::Router;
use bytes::Bytes;
use profiledb_ingest::{IngestParams, PushEncoding};
use profiledb_storage::now_ms;

use super::{tenant_of, AppRef};
use crate::error::{ApiError, ApiResult};
use crate::pipeline::{Job, Payload, Stored};
use crate::time::rfc3339;

pub fn routes() -> Router<AppRef> {
    Router::new()
        .route("/ingest", post(ingest))
        .route("/pyroscope/ingest", post(ingest))
        .route("/push.v1.PusherService/Push", post(push))
}

/// Reads the whole body, refusing more than `limit` bytes with 413.
///
/// An oversized body is still read (and discarded) up to twice the limit before the
/// 413 goes out: answering while the client is still sending makes most HTTP
/// clients report a broken pipe instead of the status. Past that the connection is
/// dropped.
pub async fn read_body(body: Body, headers: &HeaderMap, limit: usize) -> ApiResult<Bytes> {
    use http_body_util::BodyExt;
    let too_large = || {
        ApiError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "payload_too_large",
            format!("request body exceeds the limit max_body_bytes = {limit}"),
        )
    };
    let drain_cap = (limit as u64).saturating_mul(2);
    let declared = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|len| len > drain_cap) {
        return Err(too_large());
    }
    let mut over = declared.is_some_and(|len| len > limit as u64);
    let capacity = declared.map_or(0, |l| l.min(limit as u64) as usize);
    let mut buf = bytes::BytesMut::with_capacity(if over { 0 } else { capacity });
    let mut seen = 0u64;
    let mut body = body;
    while let Some(frame) = body.frame().await {
        let frame = frame
            .map_err(|e| ApiError::bad_request(format!("could not read the request body: {e}")))?;
        let Ok(data) = frame.into_data() else {
            continue;
        };
        seen += data.len() as u64;
        if seen > drain_cap {
            return Err(too_large());
        }
        if !over && buf.len() + data.len() > limit {
            over = true;
            buf = bytes::BytesMut::new();
        }
        if !over {
            buf.extend_from_slice(&data);
        }
    }
    if over {
        return Err(too_large());
    }
    Ok(buf.freeze())
}

pub(super) fn content_type(headers: &HeaderMap) -> &str {
    headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
}

async fn ingest(
    State(state): State<AppRef>,
    headers: HeaderMap,
    RawQuery(query): RawQuery,
    body: Body,
) -> ApiResult<Response> {
    state
        .http
        .ingest_requests
        .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    // The body is read first: answering while a client is still sending makes it
    // see a broken pipe instead of the error.
    let bytes = read_body(body, &headers, state.options.max_body_bytes).await?;
    let pipeline = state.pipeline()?;
    let tenant = tenant_of(&headers)?;
    let now = now_ms();
    let params = IngestParams::from_query(
        query.as_deref().unwrap_or(""),
        now,
        &pipeline.config().limits,
    )?;
    let ct = content_type(&headers);
    let payload = if ct.starts_with("multipart/form-data") {
        let boundary = multer::parse_boundary(ct).map_err(|e| {
            ApiError::bad_request(format!("invalid multipart content type {ct:?}: {e}"))
        })?;
        let parts = multipart_parts(bytes, boundary).await?;
        Payload::Multipart {
            params,
            profile: parts.profile,
            sample_type_config: parts.sample_type_config,
            labels: parts.labels,
        }
    } else {
        if bytes.is_empty() {
            return Err(ApiError::bad_request(
                "empty request body: expected a profile",
            ));
        }
        Payload::Raw {
            params,
            body: bytes,
        }
    };
    let stored = submit(
        &state,
        Job {
            tenant,
            payload,
            received_ms: now,
        },
    )
    .await?;
    Ok(stored_response(
        &state,
        &stored,
        now,
        StatusCode::OK.into_response(),
    ))
}

/// Queues `job` and answers once it is stored: in the local WAL, and with
/// `--ack bucket` in the object store too (or, past the wait, marked local-only).
pub(super) async fn submit(state: &AppRef, job: Job) -> ApiResult<Stored> {
    let gate = state.upload_gate();
    if let Some(g) = &gate {
        g.admit()?;
    }
    let rx = state.pipeline()?.try_submit(job)?;
    let mut stored = rx
        .await
        .map_err(|_| ApiError::unavailable("the ingest pipeline stopped"))??;
    if let (Some(g), Some(lsn)) = (&gate, stored.lsn) {
        stored.local_only = !g.uploaded(lsn).await;
    }
    Ok(stored)
}

/// Says where an upload's samples went. Pyroscope's contract is an empty 200, so
/// this rides in headers: `X-Profiledb-Samples` and `X-Profiledb-Stored-Range`
/// (`<oldest>/<newest>` sample time, RFC 3339). A profile stored more than an hour
/// before it arrived is counted, since last-hour views will not show it.
pub(super) fn stored_response(
    state: &AppRef,
    stored: &Stored,
    now: i64,
    mut resp: Response,
) -> Response {
    let h = resp.headers_mut();
    if let Ok(v) = HeaderValue::from_str(&stored.samples.to_string()) {
        h.insert("x-profiledb-samples", v);
    }
    if stored.local_only {
        h.insert("x-profiledb-ack", HeaderValue::from_static("local"));
    }
    if let Some((lo, hi)) = stored.time_span {
        if let Ok(v) = HeaderValue::from_str(&format!("{}/{}", rfc3339(lo), rfc3339(hi))) {
            h.insert("x-profiledb-stored-range", v);
        }
        if hi < now.saturating_sub(3_600_000) {
            state
                .http
                .ingest_backdated
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            tracing::debug!(
                newest = %rfc3339(hi),
                "upload stored at its own timestamp, more than an hour ago"
            );
        }
    }
    resp
}

/// The parts of a multipart `/ingest` upload profiledb reads.
struct Parts {
    /// `profile` (pprof), or `jfr` as the Pyroscope Java agent names it.
    profile: Bytes,
    sample_type_config: Option<Bytes>,
    /// The Java agent's `LabelsSnapshot`.
    labels: Option<Bytes>,
}

async fn multipart_parts(body: Bytes, boundary: String) -> ApiResult<Parts> {
    let stream = futures_util::stream::once(async move { Ok::<Bytes, std::io::Error>(body) });
    let mut mp = multer::Multipart::new(stream, boundary);
    let (mut profile, mut config, mut labels) = (None, None, None);
    let mut seen = Vec::new();
    loop {
        let field = match mp.next_field().await {
            Ok(Some(f)) => f,
            Ok(None) => break,
            Err(e) => {
                return Err(ApiError::bad_request(format!(
                    "malformed multipart body: {e}"
                )))
            }
        };
        let name = field.name().unwrap_or("").to_string();
        let data = field.bytes().await.map_err(|e| {
            ApiError::bad_request(format!("malformed multipart part {name:?}: {e}"))
        })?;
        match name.as_str() {
            "profile" | "jfr" => profile = Some((name, data)),
            "sample_type_config" => config = Some(data),
            "labels" => labels = Some(data),
            _ => seen.push(name),
        }
    }
    match profile {
        Some((_, p)) if !p.is_empty() => Ok(Parts {
            profile: p,
            sample_type_config: config,
            labels,
        }),
        Some((name, _)) => Err(ApiError::bad_request(format!(
            "the multipart part {name:?} is empty"
        ))),
        None => Err(ApiError::bad_request(format!(
            "the multipart body has no \"profile\" or \"jfr\" part (parts seen: {seen:?})"
        ))),
    }
}

async fn push(State(state): State<AppRef>, headers: HeaderMap, body: Body) -> ApiResult<Response> {
    state
        .http
        .ingest_requests
        .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let bytes = read_body(body, &headers, state.options.max_body_bytes).await?;
    let ct = content_type(&headers).to_string();
    let encoding = PushEncoding::from_content_type(&ct).ok_or_else(|| {
        ApiError::new(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "invalid_argument",
            format!("unsupported content type {ct:?}: use application/proto or application/json"),
        )
    })?;
    let tenant = tenant_of(&headers)?;
    if bytes.is_empty() && encoding == PushEncoding::Json {
        return Err(ApiError::bad_request(
            "empty request body: expected a JSON PushRequest",
        ));
    }
    let now = now_ms();
    let stored = submit(
        &state,
        Job {
            tenant,
            payload: Payload::Push {
                encoding,
                body: bytes,
            },
            received_ms: now,
        },
    )
    .await?;
    // Connect unary success: an empty PushResponse in the request's encoding.
    let resp = match encoding {
        PushEncoding::Json => ([(header::CONTENT_TYPE, "application/json")], "{}").into_response(),
        PushEncoding::Proto => ([(header::CONTENT_TYPE, "application/proto")], "").into_response(),
    };
    Ok(stored_response(&state, &stored, now, resp))
}
