//! Connect unary framing: request decoding and response encoding in binary protobuf
//! (`application/proto`) and protojson (`application/json`), and Connect errors.
//!
//! protojson goes through prost-reflect's dynamic messages, which implement the
//! canonical JSON mapping: lowerCamel names on output (proto names accepted on input),
//! 64-bit integers as strings, enums by name. Unknown fields are ignored, as Grafana's
//! front end may be newer than us.

use std::future::Future;
use std::sync::LazyLock;

use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use prost::Message;
use prost_reflect::{DescriptorPool, DeserializeOptions, DynamicMessage, SerializeOptions};

use super::proto::DESCRIPTORS;
use crate::error::ApiError;
use crate::http::AppRef;
use profiledb_storage::TenantId;

static POOL: LazyLock<Option<DescriptorPool>> =
    LazyLock::new(|| DescriptorPool::decode(DESCRIPTORS).ok());

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Encoding {
    Proto,
    Json,
}

/// A Connect error: `{"code", "message"}` with the HTTP status Connect assigns.
#[derive(Debug)]
pub struct ConnectError {
    pub code: &'static str,
    pub message: String,
}

impl ConnectError {
    pub fn new(code: &'static str, message: impl Into<String>) -> Self {
        ConnectError {
            code,
            message: message.into(),
        }
    }

    pub fn invalid(message: impl Into<String>) -> Self {
        Self::new("invalid_argument", message)
    }

    fn status(&self) -> StatusCode {
        match self.code {
            "invalid_argument" | "failed_precondition" | "out_of_range" => StatusCode::BAD_REQUEST,
            "unauthenticated" => StatusCode::UNAUTHORIZED,
            "permission_denied" => StatusCode::FORBIDDEN,
            "not_found" => StatusCode::NOT_FOUND,
            "already_exists" | "aborted" => StatusCode::CONFLICT,
            "resource_exhausted" => StatusCode::TOO_MANY_REQUESTS,
            "canceled" => StatusCode::from_u16(499).unwrap_or(StatusCode::BAD_REQUEST),
            // A method we do not serve is the caller's mistake (a client error, not a
            // server fault to log), as an unknown route is.
            "unimplemented" => StatusCode::NOT_FOUND,
            "unavailable" => StatusCode::SERVICE_UNAVAILABLE,
            "deadline_exceeded" => StatusCode::GATEWAY_TIMEOUT,
            _ => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }
}

impl From<ApiError> for ConnectError {
    fn from(e: ApiError) -> Self {
        let code = match e.status.as_u16() {
            400 | 413 | 415 => "invalid_argument",
            404 => "not_found",
            422 | 429 => "resource_exhausted",
            501 => "unimplemented",
            503 => "unavailable",
            504 => "deadline_exceeded",
            _ => "internal",
        };
        ConnectError::new(code, e.message)
    }
}

impl From<profiledb_storage::StorageError> for ConnectError {
    fn from(e: profiledb_storage::StorageError) -> Self {
        crate::error::ApiError::from(e).into()
    }
}

impl IntoResponse for ConnectError {
    fn into_response(self) -> Response {
        let body = serde_json::json!({"code": self.code, "message": self.message});
        (self.status(), axum::Json(body)).into_response()
    }
}

pub type ConnectResult<T> = Result<T, ConnectError>;

/// The request's encoding from its content type.
pub fn encoding(headers: &HeaderMap) -> ConnectResult<Encoding> {
    let ct = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("application/proto");
    let base = ct.split(';').next().unwrap_or("").trim();
    match base {
        "application/proto" | "application/protobuf" | "application/x-protobuf" => {
            Ok(Encoding::Proto)
        }
        "application/json" => Ok(Encoding::Json),
        other => Err(ConnectError::invalid(format!(
            "unsupported content type {other:?}: use application/proto or application/json"
        ))),
    }
}

fn gunzip(body: &[u8], limit: usize) -> ConnectResult<Vec<u8>> {
    use profiledb_proto::gzip::GunzipError;
    profiledb_proto::gzip::gunzip(body, limit).map_err(|e| match e {
        GunzipError::TooLarge { .. } => ConnectError::new(
            "resource_exhausted",
            format!("decompressed request exceeds {limit} bytes"),
        ),
        GunzipError::Invalid(e) => ConnectError::invalid(format!("invalid gzip body: {e}")),
    })
}

/// Decodes a Connect unary request body into `T` (full proto name `name`).
pub fn decode<T: Message + Default>(
    headers: &HeaderMap,
    body: &Bytes,
    name: &str,
    limit: usize,
) -> ConnectResult<(T, Encoding)> {
    let enc = encoding(headers)?;
    let gz = headers
        .get(header::CONTENT_ENCODING)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.eq_ignore_ascii_case("gzip"))
        || body.starts_with(&[0x1f, 0x8b]);
    let raw: Vec<u8>;
    let bytes: &[u8] = if gz {
        raw = gunzip(body, limit)?;
        &raw
    } else {
        body
    };
    let msg = match enc {
        Encoding::Proto => T::decode(bytes)
            .map_err(|e| ConnectError::invalid(format!("invalid {name} protobuf: {e}")))?,
        Encoding::Json => {
            let text: &[u8] = if bytes.iter().all(u8::is_ascii_whitespace) {
                b"{}"
            } else {
                bytes
            };
            let desc = descriptor(name)?;
            let mut de = serde_json::Deserializer::from_slice(text);
            let dm = DynamicMessage::deserialize_with_options(
                desc,
                &mut de,
                &DeserializeOptions::new().deny_unknown_fields(false),
            )
            .map_err(|e| ConnectError::invalid(format!("invalid {name} JSON: {e}")))?;
            de.end()
                .map_err(|e| ConnectError::invalid(format!("invalid {name} JSON: {e}")))?;
            T::decode(dm.encode_to_vec().as_slice())
                .map_err(|e| ConnectError::internal(format!("re-encoding {name}: {e}")))?
        }
    };
    Ok((msg, enc))
}

fn descriptor(name: &str) -> ConnectResult<prost_reflect::MessageDescriptor> {
    POOL.as_ref()
        .and_then(|p| p.get_message_by_name(name))
        .ok_or_else(|| ConnectError::internal(format!("no descriptor for {name}")))
}

impl ConnectError {
    pub fn internal(message: impl Into<String>) -> Self {
        Self::new("internal", message)
    }
}

/// Serializes `msg` (full proto name `name`) as protojson.
pub fn to_json<T: Message>(msg: &T, name: &str) -> ConnectResult<Vec<u8>> {
    let desc = descriptor(name)?;
    let dm = DynamicMessage::decode(desc, msg.encode_to_vec().as_slice())
        .map_err(|e| ConnectError::internal(format!("encoding {name}: {e}")))?;
    let mut ser = serde_json::Serializer::new(Vec::new());
    dm.serialize_with_options(&mut ser, &SerializeOptions::new())
        .map_err(|e| ConnectError::internal(format!("encoding {name} as JSON: {e}")))?;
    Ok(ser.into_inner())
}

/// Encodes a Connect unary response in the request's encoding.
pub fn respond<T: Message>(msg: &T, name: &str, enc: Encoding) -> ConnectResult<Response> {
    Ok(match enc {
        Encoding::Proto => (
            [(
                header::CONTENT_TYPE,
                HeaderValue::from_static("application/proto"),
            )],
            msg.encode_to_vec(),
        )
            .into_response(),
        Encoding::Json => (
            [(
                header::CONTENT_TYPE,
                HeaderValue::from_static("application/json"),
            )],
            to_json(msg, name)?,
        )
            .into_response(),
    })
}

/// What every method gets besides its request message.
pub struct Ctx {
    pub state: AppRef,
    pub tenant: TenantId,
}

/// One Connect unary call: decode, run, encode in the request's encoding.
pub struct Unary<'a> {
    pub ctx: Ctx,
    pub headers: &'a HeaderMap,
    pub body: &'a Bytes,
}

impl Unary<'_> {
    pub async fn run<Req, Resp, F, Fut>(
        self,
        req_name: &str,
        resp_name: &str,
        method: F,
    ) -> ConnectResult<Response>
    where
        Req: Message + Default,
        Resp: Message,
        F: FnOnce(Ctx, Req) -> Fut,
        Fut: Future<Output = ConnectResult<Resp>>,
    {
        let limit = self.ctx.state.options.max_body_bytes;
        let (req, enc) = decode::<Req>(self.headers, self.body, req_name, limit)?;
        respond(&method(self.ctx, req).await?, resp_name, enc)
    }
}
