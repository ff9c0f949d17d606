//! OTLP profiles export on the main port: `POST /v1development/profiles` (binary
//! protobuf or OTLP JSON) and the gRPC method
//! `/opentelemetry.proto.collector.profiles.v1development.ProfilesService/Export`.
//!
//! Both hand the request bytes to the ingest pipeline like `/ingest` does, so
//! decoding runs on its workers and a full queue is refused at once: HTTP 429, gRPC
//! `RESOURCE_EXHAUSTED`. The answer, an empty `ExportProfilesServiceResponse`, goes
//! out once the batch is durable. gRPC framing, compression (gzip) and statuses are
//! tonic's; its codec here passes the message bytes through undecoded.

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::Router;
use bytes::{Buf, Bytes};
use profiledb_ingest::proto::otlp_collector::ExportProfilesServiceResponse;
use profiledb_ingest::PushEncoding;
use profiledb_storage::{now_ms, TenantId};
use prost::Message;
use tonic::codec::{Codec, CompressionEncoding, DecodeBuf, Decoder, EncodeBuf, Encoder};

use super::ingest::{content_type, read_body, stored_response};
use super::{tenant_of, AppRef};
use crate::error::{ApiError, ApiResult};
use crate::pipeline::{Job, Payload, Stored};

/// The gRPC method path of `ProfilesService/Export`.
pub const GRPC_PATH: &str =
    "/opentelemetry.proto.collector.profiles.v1development.ProfilesService/Export";

pub fn routes() -> Router<AppRef> {
    Router::new()
        // Literal paths, as every route is written, so the tenancy route check sees them.
        .route("/v1development/profiles", post(export_http))
        .route(
            "/opentelemetry.proto.collector.profiles.v1development.ProfilesService/Export",
            post(export_grpc),
        )
}

/// Queues one export and waits until it is stored.
async fn store(
    state: &AppRef,
    tenant: TenantId,
    encoding: PushEncoding,
    body: Bytes,
) -> ApiResult<(Stored, i64)> {
    state
        .http
        .ingest_requests
        .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let now = now_ms();
    let stored = super::ingest::submit(
        state,
        Job {
            tenant,
            payload: Payload::Otlp { encoding, body },
            received_ms: now,
        },
    )
    .await?;
    Ok((stored, now))
}

async fn export_http(
    State(state): State<AppRef>,
    headers: HeaderMap,
    body: Body,
) -> ApiResult<Response> {
    let bytes = read_body(body, &headers, state.options.max_body_bytes).await?;
    let ct = content_type(&headers).to_string();
    let encoding = PushEncoding::from_content_type(&ct).ok_or_else(|| {
        ApiError::new(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "invalid_argument",
            format!(
                "unsupported content type {ct:?}: use application/x-protobuf or application/json"
            ),
        )
    })?;
    let tenant = tenant_of(&headers)?;
    let (stored, now) = store(&state, tenant, encoding, bytes).await?;
    // An empty ExportProfilesServiceResponse (no partial success) in the request's
    // encoding: every profile was stored.
    let resp = match encoding {
        PushEncoding::Json => ([(header::CONTENT_TYPE, "application/json")], "{}").into_response(),
        PushEncoding::Proto => {
            let body = ExportProfilesServiceResponse::default().encode_to_vec();
            ([(header::CONTENT_TYPE, "application/x-protobuf")], body).into_response()
        }
    };
    Ok(stored_response(&state, &stored, now, resp))
}

fn is_grpc(headers: &HeaderMap) -> bool {
    content_type(headers).starts_with("application/grpc")
}

async fn export_grpc(State(state): State<AppRef>, req: Request) -> Response {
    if !is_grpc(req.headers()) {
        return ApiError::new(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "invalid_argument",
            format!("{GRPC_PATH} is a gRPC method: send content-type application/grpc"),
        )
        .into_response();
    }
    let tenant = tenant_of(req.headers()).map_err(|e| grpc_status(&e));
    let mut grpc = tonic::server::Grpc::new(PassThrough)
        .accept_compressed(CompressionEncoding::Gzip)
        .max_decoding_message_size(state.options.max_body_bytes);
    let export = tower::service_fn(move |msg: tonic::Request<Bytes>| {
        let (state, tenant) = (state.clone(), tenant.clone());
        async move {
            store(&state, tenant?, PushEncoding::Proto, msg.into_inner())
                .await
                .map_err(|e| grpc_status(&e))?;
            Ok::<_, tonic::Status>(tonic::Response::new(
                ExportProfilesServiceResponse::default(),
            ))
        }
    });
    grpc.unary(export, req).await.map(Body::new)
}

/// The gRPC status for an API error, chosen by its HTTP status: back-pressure is
/// `RESOURCE_EXHAUSTED` (retry later), a store not open yet `UNAVAILABLE`, any other
/// client error `INVALID_ARGUMENT`.
fn grpc_status(e: &ApiError) -> tonic::Status {
    let code = match e.status {
        StatusCode::TOO_MANY_REQUESTS | StatusCode::PAYLOAD_TOO_LARGE => {
            tonic::Code::ResourceExhausted
        }
        StatusCode::SERVICE_UNAVAILABLE => tonic::Code::Unavailable,
        s if s.is_client_error() => tonic::Code::InvalidArgument,
        _ => tonic::Code::Internal,
    };
    tonic::Status::new(code, e.message.clone())
}

/// A tonic codec that hands the request message over as bytes (the pipeline
/// decodes it on its workers) and encodes the response with prost.
#[derive(Clone, Copy, Debug, Default)]
struct PassThrough;

impl Codec for PassThrough {
    type Encode = ExportProfilesServiceResponse;
    type Decode = Bytes;
    type Encoder = PassThrough;
    type Decoder = PassThrough;

    fn encoder(&mut self) -> Self::Encoder {
        PassThrough
    }

    fn decoder(&mut self) -> Self::Decoder {
        PassThrough
    }
}

impl Decoder for PassThrough {
    type Item = Bytes;
    type Error = tonic::Status;

    fn decode(&mut self, src: &mut DecodeBuf<'_>) -> Result<Option<Bytes>, tonic::Status> {
        Ok(Some(src.copy_to_bytes(src.remaining())))
    }
}

impl Encoder for PassThrough {
    type Item = ExportProfilesServiceResponse;
    type Error = tonic::Status;

    fn encode(
        &mut self,
        item: ExportProfilesServiceResponse,
        dst: &mut EncodeBuf<'_>,
    ) -> Result<(), tonic::Status> {
        item.encode(dst)
            .map_err(|e| tonic::Status::internal(format!("encoding the response: {e}")))
    }
}
