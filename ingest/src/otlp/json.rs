//! OTLP's JSON encoding of `ExportProfilesServiceRequest`.
//!
//! OTLP JSON is protojson (lowerCamelCase or proto field names, 64-bit integers as
//! numbers or strings, enums as integers) with one exception: trace, span and
//! profile ids are hex strings, not base64. Generic protobuf JSON writers (Python's
//! `json_format`, Go's `protojson`) still send base64, so both are accepted: a hex
//! string of exactly an id's length (32 digits for the 16-byte trace and profile
//! ids, 16 for the 8-byte span id) cannot be the base64 of an id of that size, whose
//! base64 is 24 or 12 characters.

use std::sync::LazyLock;

use base64::Engine;
use prost::Message;
use prost_reflect::{DescriptorPool, DeserializeOptions, DynamicMessage};
use serde_json::Value;

use crate::error::IngestError;
use crate::proto::otlp_collector::ExportProfilesServiceRequest;

const REQUEST: &str =
    "opentelemetry.proto.collector.profiles.v1development.ExportProfilesServiceRequest";
const WHAT: &str = "ExportProfilesServiceRequest";

/// JSON field names of the id fields, with the id's size in bytes.
const ID_FIELDS: [(&str, usize); 6] = [
    ("traceId", 16),
    ("trace_id", 16),
    ("profileId", 16),
    ("profile_id", 16),
    ("spanId", 8),
    ("span_id", 8),
];

static POOL: LazyLock<Result<DescriptorPool, String>> = LazyLock::new(|| {
    DescriptorPool::decode(profiledb_proto::DESCRIPTORS).map_err(|e| e.to_string())
});

fn bad(reason: impl Into<String>) -> IngestError {
    IngestError::InvalidJson {
        what: WHAT,
        reason: reason.into(),
    }
}

/// Parses an OTLP JSON request.
pub(super) fn request_from_json(body: &[u8]) -> Result<ExportProfilesServiceRequest, IngestError> {
    let mut value: Value = serde_json::from_slice(body).map_err(|e| bad(e.to_string()))?;
    hex_ids_to_base64(&mut value);
    // The descriptor set is compiled into the binary; failing here is a build defect,
    // reported rather than panicked on.
    let pool = POOL
        .as_ref()
        .map_err(|e| bad(format!("schema unavailable: {e}")))?;
    let desc = pool
        .get_message_by_name(REQUEST)
        .ok_or_else(|| bad("schema unavailable: no ExportProfilesServiceRequest"))?;
    let msg = DynamicMessage::deserialize_with_options(
        desc,
        value,
        &DeserializeOptions::new().deny_unknown_fields(false),
    )
    .map_err(|e| bad(e.to_string()))?;
    ExportProfilesServiceRequest::decode(msg.encode_to_vec().as_slice())
        .map_err(|source| IngestError::Protobuf { what: WHAT, source })
}

/// Rewrites OTLP's hex ids, wherever they are, as the base64 protojson expects.
fn hex_ids_to_base64(value: &mut Value) {
    // Iterative: a deeply nested body must not exhaust the stack here (serde_json
    // already refuses nesting past 128 levels, but the walk need not rely on that).
    let mut todo = vec![value];
    while let Some(v) = todo.pop() {
        match v {
            Value::Object(map) => {
                for (key, child) in map.iter_mut() {
                    let size = ID_FIELDS.iter().find(|(k, _)| k == key).map(|(_, n)| *n);
                    match (size, &*child) {
                        (Some(n), Value::String(s)) => {
                            if let Some(bytes) = hex_id(s, n) {
                                *child = Value::String(
                                    base64::engine::general_purpose::STANDARD.encode(bytes),
                                );
                            }
                        }
                        _ => todo.push(child),
                    }
                }
            }
            Value::Array(items) => todo.extend(items.iter_mut()),
            _ => {}
        }
    }
}

fn hex_id(s: &str, size: usize) -> Option<Vec<u8>> {
    if s.len() != size * 2 || !s.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    (0..size)
        .map(|i| u8::from_str_radix(s.get(2 * i..2 * i + 2)?, 16).ok())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hex_and_base64_ids_both_decode() {
        let hex = r#"{"resourceProfiles":[{"scopeProfiles":[{"profiles":[
            {"profileId":"0102030405060708090a0b0c0d0e0f10","timeUnixNano":"5"}]}]}],
            "dictionary":{"linkTable":[{"traceId":"AQIDBAUGBwgJCgsMDQ4PEA==","spanId":"0102030405060708"}]}}"#;
        let req = request_from_json(hex.as_bytes()).unwrap();
        let p = &req.resource_profiles[0].scope_profiles[0].profiles[0];
        let id: Vec<u8> = (1..=16).collect();
        assert_eq!(p.profile_id, id);
        assert_eq!(p.time_unix_nano, 5);
        let link = &req.dictionary.unwrap().link_table[0];
        assert_eq!(link.trace_id, id);
        assert_eq!(link.span_id, (1..=8).collect::<Vec<u8>>());
    }

    #[test]
    fn malformed_json_is_an_invalid_json_error() {
        let err = request_from_json(b"{\"resourceProfiles\": 3}").unwrap_err();
        assert!(
            matches!(err, IngestError::InvalidJson { what: WHAT, .. }),
            "{err}"
        );
        let err = request_from_json(b"{").unwrap_err();
        assert!(matches!(err, IngestError::InvalidJson { .. }), "{err}");
    }
}
