//! Pyroscope `push.v1.PushRequest` bodies (Connect unary `PusherService/Push`).
//!
//! The body may be gzip-framed as a whole (detected by magic bytes) and is either
//! binary protobuf (`application/proto`) or protojson (`application/json`: field
//! names in lowerCamel or as in the .proto, `bytes` as base64 — standard or URL-safe,
//! padded or not — unknown fields ignored, `null` meaning the default).
//!
//! Label handling: `__name__` becomes the profile name part (it overrides inference),
//! other `__*` labels are dropped (clients cannot set `__profile_type__`), and the rest
//! — `service_name`, `otel.scope.name`, user tags — are kept as series labels.

use std::borrow::Cow;

use base64::engine::general_purpose::{GeneralPurpose, GeneralPurposeConfig};
use base64::engine::DecodePaddingMode;
use base64::{alphabet, Engine};
use bytes::Bytes;
use profiledb_model::{Batch, Labels, TenantId, NAME_LABEL};
use prost::Message;
use serde::Deserialize;

use crate::builder::BatchBuilder;
use crate::error::IngestError;
use crate::gzip::decompress_body;
use crate::label_rules::{check_label_name, is_reserved};
use crate::limits::Limits;
use crate::pprof::{decode_pprof_into, PprofOptions};
use crate::proto::push::v1::PushRequest;

/// How the request body is encoded, from its `Content-Type`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PushEncoding {
    /// Binary protobuf.
    Proto,
    /// protojson.
    Json,
}

impl PushEncoding {
    /// `application/json` → Json; `application/proto`, `application/x-protobuf`,
    /// `application/protobuf` and `application/octet-stream` → Proto.
    pub fn from_content_type(content_type: &str) -> Option<PushEncoding> {
        let media = content_type
            .split(';')
            .next()
            .unwrap_or_default()
            .trim()
            .to_ascii_lowercase();
        match media.as_str() {
            "application/json" => Some(PushEncoding::Json),
            "application/proto"
            | "application/protobuf"
            | "application/x-protobuf"
            | "application/octet-stream" => Some(PushEncoding::Proto),
            _ => None,
        }
    }
}

/// One raw profile of a series.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PushProfile {
    /// Client-chosen id (a UUID); may be empty.
    pub id: String,
    /// pprof bytes, gzip-framed or not: a slice of the request body when that was
    /// not compressed (no copy).
    pub raw: Bytes,
}

/// One `RawProfileSeries`, with its labels already sorted out.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PushSeries {
    /// The `__name__` label, if sent.
    pub name: Option<String>,
    /// Every other kept label.
    pub labels: Labels,
    /// The series' raw profiles.
    pub profiles: Vec<PushProfile>,
}

/// Decodes a Push request body into its series.
pub fn decode_push(
    body: &Bytes,
    encoding: PushEncoding,
    limits: &Limits,
) -> Result<Vec<PushSeries>, IngestError> {
    let body = match decompress_body(body, limits)? {
        Cow::Borrowed(_) => body.clone(),
        Cow::Owned(inflated) => Bytes::from(inflated),
    };
    let raw: Vec<RawSeries> = match encoding {
        PushEncoding::Proto => {
            // From `Bytes`, each profile is a slice of the body, not a copy.
            let req =
                PushRequest::decode(body.clone()).map_err(|source| IngestError::Protobuf {
                    what: "push.v1.PushRequest",
                    source,
                })?;
            req.series
                .into_iter()
                .map(|s| {
                    let labels = s.labels.into_iter().map(|l| (l.name, l.value)).collect();
                    let profiles = s
                        .samples
                        .into_iter()
                        .map(|p| PushProfile {
                            id: p.id,
                            raw: p.raw_profile,
                        })
                        .collect();
                    (labels, profiles)
                })
                .collect()
        }
        PushEncoding::Json => json_series(&body)?,
    };
    raw.into_iter()
        .map(|(labels, profiles)| series(labels, profiles, limits))
        .collect()
}

fn series(
    pairs: Vec<(String, String)>,
    profiles: Vec<PushProfile>,
    limits: &Limits,
) -> Result<PushSeries, IngestError> {
    let mut name = None;
    let mut kept = Vec::with_capacity(pairs.len());
    for (k, v) in pairs {
        if k == NAME_LABEL {
            name = Some(v);
        } else if !is_reserved(&k) {
            check_label_name(&k, limits)?;
            kept.push((k, v));
        }
    }
    if let Some(n) = &name {
        if n.contains(':') {
            return Err(IngestError::InvalidLabel {
                name: NAME_LABEL.to_string(),
                reason: format!("{n:?} contains ':'"),
            });
        }
    }
    Ok(PushSeries {
        name: name.filter(|n| !n.is_empty()),
        labels: Labels::new(kept),
        profiles,
    })
}

/// Decodes every profile of every series into one batch. A profile with no usable
/// `time_nanos` gets `fallback_time_ms` (the receive time).
pub fn push_to_batch(
    series: &[PushSeries],
    tenant: TenantId,
    fallback_time_ms: i64,
    limits: &Limits,
) -> Result<Batch, IngestError> {
    let mut batch = BatchBuilder::new(tenant.clone());
    for s in series {
        let opts = PprofOptions {
            tenant: tenant.clone(),
            base_labels: s.labels.clone(),
            name: s.name.clone(),
            fallback_time_ms,
            limits: limits.clone(),
            sample_type_config: None,
            sample_rate: None,
        };
        for p in &s.profiles {
            decode_pprof_into(&p.raw, &opts, &mut batch)?;
        }
    }
    Ok(batch.finish())
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct JsonRequest {
    series: Option<Vec<JsonSeries>>,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct JsonSeries {
    labels: Option<Vec<JsonLabel>>,
    samples: Option<Vec<JsonSample>>,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct JsonLabel {
    name: Option<String>,
    value: Option<String>,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct JsonSample {
    #[serde(rename = "rawProfile", alias = "raw_profile")]
    raw_profile: Option<String>,
    // The proto field is `ID`, whose JSON name is also `ID`; `id` is tolerated.
    #[serde(rename = "ID", alias = "id")]
    id: Option<String>,
}

type RawSeries = (Vec<(String, String)>, Vec<PushProfile>);

fn json_series(body: &[u8]) -> Result<Vec<RawSeries>, IngestError> {
    let bad = |reason: String| IngestError::InvalidJson {
        what: "push.v1.PushRequest",
        reason,
    };
    let req: JsonRequest = serde_json::from_slice(body).map_err(|e| bad(e.to_string()))?;
    let mut out = Vec::new();
    for (i, s) in req.series.unwrap_or_default().into_iter().enumerate() {
        let labels = s
            .labels
            .unwrap_or_default()
            .into_iter()
            .map(|l| (l.name.unwrap_or_default(), l.value.unwrap_or_default()))
            .collect();
        let mut profiles = Vec::new();
        for (j, p) in s.samples.unwrap_or_default().into_iter().enumerate() {
            let raw = decode_base64(p.raw_profile.as_deref().unwrap_or_default()).map_err(|e| {
                bad(format!(
                    "series[{i}].samples[{j}].rawProfile is not base64: {e}"
                ))
            })?;
            profiles.push(PushProfile {
                id: p.id.unwrap_or_default(),
                raw: raw.into(),
            });
        }
        out.push((labels, profiles));
    }
    Ok(out)
}

/// protojson readers must accept both alphabets, with or without padding.
fn decode_base64(s: &str) -> Result<Vec<u8>, base64::DecodeError> {
    let config =
        GeneralPurposeConfig::new().with_decode_padding_mode(DecodePaddingMode::Indifferent);
    let alphabet = if s.contains(['-', '_']) {
        &alphabet::URL_SAFE
    } else {
        &alphabet::STANDARD
    };
    GeneralPurpose::new(alphabet, config).decode(s)
}

#[cfg(test)]
mod tests;
