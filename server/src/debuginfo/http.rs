//! Debug file and source-line endpoints:
//! - `POST /api/v1/debuginfo[?build_id=HEX]`: upload an ELF debug file;
//! - `GET /api/v1/debuginfo`: the build ids stored;
//! - `GET /api/v1/source-lines?query=&from=&until=&function=`: one function's
//!   source lines with self and total values;
//! - `GET /api/v1/pprof/lines?query=&from=&until=`: the profile as gzip'd pprof
//!   with a location per source line (inlined frames as their own locations).

use std::collections::HashMap;
use std::sync::Arc;

use axum::extract::{DefaultBodyLimit, Query, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use bytes::Bytes;
use profiledb_proto::pprof::{Function, Line, Location, Profile, Sample, ValueType};
use profiledb_storage::symbolize::{DebugFileError, Stats, Symbolizer, UploadError};
use profiledb_storage::LineProfile;
use serde::Deserialize;
use serde_json::json;

use crate::error::{ApiError, ApiResult};
use crate::http::request::{blocking, profile_type_parts, window, Selection};
use crate::http::{tenant_of, AppRef};
use crate::metrics::family;

pub fn routes(state: &AppRef) -> Router<AppRef> {
    // The body limit of debug files, not the ingest one; the symbolizer
    // checks it again, with a clearer message than the transport's.
    let limit = usize::try_from(state.options.debuginfo.max_file_bytes)
        .unwrap_or(usize::MAX)
        .saturating_add(1);
    Router::new()
        .route(
            "/api/v1/debuginfo",
            get(list).post(upload).layer(DefaultBodyLimit::max(limit)),
        )
        .route("/api/v1/source-lines", get(source_lines))
        .route("/api/v1/pprof/lines", get(pprof_lines))
}

fn symbolizer(state: &AppRef) -> ApiResult<Arc<Symbolizer>> {
    state
        .store()?
        .symbolizer()
        .ok_or_else(|| ApiError::unavailable("symbolization is not set up yet"))
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct UploadParams {
    build_id: Option<String>,
}

fn upload_error(e: UploadError) -> ApiError {
    let bad = |code, m: String| ApiError::new(StatusCode::UNPROCESSABLE_ENTITY, code, m);
    match e {
        UploadError::BadBuildId(e) => ApiError::bad_request(e.to_string()),
        UploadError::File(f) => match f {
            DebugFileError::TooLarge { .. } | DebugFileError::SectionTooLarge { .. } => {
                ApiError::new(StatusCode::PAYLOAD_TOO_LARGE, "too_large", f.to_string())
            }
            DebugFileError::BuildIdMismatch { .. } => bad("build_id_mismatch", f.to_string()),
            other => bad("invalid_debug_file", other.to_string()),
        },
        UploadError::Io(e) => ApiError::internal(format!("storing the debug file failed: {e}")),
        UploadError::Replica(e) => ApiError::unavailable(e.to_string()),
        other => ApiError::internal(other.to_string()),
    }
}

/// `POST /api/v1/debuginfo`: the body is the ELF file.
async fn upload(
    State(state): State<AppRef>,
    Query(p): Query<UploadParams>,
    body: Bytes,
) -> ApiResult<Response> {
    let sym = symbolizer(&state)?;
    if body.is_empty() {
        return Err(ApiError::bad_request(
            "the body is empty: send the ELF file",
        ));
    }
    let done = blocking(move || {
        sym.upload(&body, p.build_id.as_deref())
            .map_err(upload_error)
    })
    .await?;
    tracing::info!(build_id = %done.build_id, bytes = done.bytes, "debug file uploaded");
    Ok(Json(json!({
        "build_id": done.build_id,
        "bytes": done.bytes,
        "replaced": done.replaced,
        "has_dwarf": done.has_dwarf,
    }))
    .into_response())
}

/// `GET /api/v1/debuginfo`: `{"files": [{"build_id", "bytes"}], …}`.
async fn list(State(state): State<AppRef>) -> ApiResult<Response> {
    let sym = symbolizer(&state)?;
    let files = blocking(move || {
        sym.store()
            .list()
            .map_err(|e| ApiError::internal(format!("listing debug files failed: {e}")))
    })
    .await?;
    let files: Vec<_> = files
        .into_iter()
        .map(|(id, bytes)| json!({"build_id": id, "bytes": bytes}))
        .collect();
    Ok(Json(json!({ "files": files })).into_response())
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct LinesParams {
    query: Option<String>,
    from: Option<String>,
    until: Option<String>,
    function: Option<String>,
}

async fn line_profile(
    state: &AppRef,
    headers: &HeaderMap,
    p: &LinesParams,
) -> ApiResult<(LineProfile, String, profiledb_storage::TimeRange)> {
    let Selection {
        profile_type,
        selector,
    } = Selection::from_query(p.query.as_deref())?;
    let range = window(("from", p.from.as_deref()), ("until", p.until.as_deref()))?;
    let (querier, tenant) = (state.querier()?, tenant_of(headers)?);
    let lp = blocking(move || Ok(querier.line_profile(&tenant, &selector, range)?)).await?;
    Ok((lp, profile_type.as_str().to_string(), range))
}

/// `GET /api/v1/source-lines`: see docs/api.md.
async fn source_lines(
    State(state): State<AppRef>,
    headers: HeaderMap,
    Query(p): Query<LinesParams>,
) -> ApiResult<Response> {
    let function = p
        .function
        .clone()
        .filter(|f| !f.is_empty())
        .ok_or_else(|| ApiError::bad_request("function is required"))?;
    let (lp, profile_type, _) = line_profile(&state, &headers, &p).await?;
    let fl = lp.function_lines(&function);
    let lines: Vec<_> = fl
        .lines
        .iter()
        .map(|l| json!({"file": l.file, "line": l.line, "self": l.self_value, "total": l.total_value}))
        .collect();
    Ok(Json(json!({
        "function": function,
        "profile_type": profile_type,
        "self": fl.self_value,
        "total": fl.total_value,
        "profile_total": fl.profile_total,
        "lines": lines,
    }))
    .into_response())
}

/// `GET /api/v1/pprof/lines`: gzip'd pprof with lines.
async fn pprof_lines(
    State(state): State<AppRef>,
    headers: HeaderMap,
    Query(p): Query<LinesParams>,
) -> ApiResult<Response> {
    let (lp, profile_type, range) = line_profile(&state, &headers, &p).await?;
    let body = blocking(move || {
        let prof = line_pprof(
            &lp,
            &profile_type,
            range.start_ms,
            range.end_ms - range.start_ms,
        );
        let bytes = prost::Message::encode_to_vec(&prof);
        profiledb_proto::gzip::gzip(&bytes, profiledb_proto::gzip::Compression::default())
            .map_err(|e| ApiError::internal(format!("gzip failed: {e}")))
    })
    .await?;
    Ok((
        [
            (header::CONTENT_TYPE, "application/octet-stream"),
            (
                header::CONTENT_DISPOSITION,
                "attachment; filename=\"profile.pb.gz\"",
            ),
        ],
        body,
    )
        .into_response())
}

/// `lp` as a pprof profile: a function per (name, file), a location per source
/// frame with its one line; a sample's locations are its stack, leaf first.
fn line_pprof(lp: &LineProfile, profile_type: &str, time_ms: i64, duration_ms: i64) -> Profile {
    let mut strings: Vec<String> = vec![String::new()];
    let mut string_ids: HashMap<String, i64> = HashMap::new();
    let mut s = |v: &str| -> i64 {
        if v.is_empty() {
            return 0;
        }
        *string_ids.entry(v.to_string()).or_insert_with(|| {
            strings.push(v.to_string());
            strings.len() as i64 - 1
        })
    };
    let [_, st, su, pt, pu] = profile_type_parts(profile_type);
    let sample_type = vec![ValueType {
        r#type: s(if st.is_empty() { "samples" } else { st }),
        unit: s(if su.is_empty() { "count" } else { su }),
    }];
    let period_type = (!pt.is_empty()).then(|| ValueType {
        r#type: s(pt),
        unit: s(pu),
    });
    let mut functions: Vec<Function> = Vec::new();
    let mut function_ids: HashMap<(&str, &str), u64> = HashMap::new();
    let mut locations = Vec::with_capacity(lp.frames.len());
    for (i, f) in lp.frames.iter().enumerate() {
        let fid = *function_ids
            .entry((f.function.as_str(), f.file.as_str()))
            .or_insert_with(|| {
                let id = functions.len() as u64 + 1;
                functions.push(Function {
                    id,
                    name: s(&f.function),
                    system_name: s(&f.function),
                    filename: s(&f.file),
                    ..Function::default()
                });
                id
            });
        locations.push(Location {
            id: i as u64 + 1,
            line: vec![Line {
                function_id: fid,
                line: i64::from(f.line),
                ..Line::default()
            }],
            ..Location::default()
        });
    }
    let sample = lp
        .stacks
        .iter()
        .map(|(stack, &v)| Sample {
            location_id: stack.iter().rev().map(|&f| u64::from(f) + 1).collect(),
            value: vec![v],
            ..Sample::default()
        })
        .collect();
    Profile {
        sample_type,
        sample,
        location: locations,
        function: functions,
        string_table: strings.into_iter().map(Bytes::from).collect(),
        time_nanos: time_ms.saturating_mul(1_000_000),
        duration_nanos: duration_ms.max(0).saturating_mul(1_000_000),
        period_type,
        ..Profile::default()
    }
}

/// The symbolizer's gauges and counters in `/metrics`.
pub fn render_metrics(out: &mut String, s: &Stats) {
    let rows: [(&str, &str, &str, u64); 9] = [
        (
            "profiledb_symbolizer_cache_bytes",
            "gauge",
            "Bytes of parsed debug files held for symbolization (bounded by --symbol-cache-mb).",
            s.cached_bytes,
        ),
        (
            "profiledb_symbolizer_cached_files",
            "gauge",
            "Debug files (build ids) parsed and held in memory.",
            s.cached_files,
        ),
        (
            "profiledb_symbolizer_generation",
            "gauge",
            "Goes up whenever a debug file arrives (frames are named again).",
            s.generation,
        ),
        (
            "profiledb_symbolizer_lookups_total",
            "counter",
            "Addresses looked up in debug files.",
            s.lookups,
        ),
        (
            "profiledb_symbolizer_evictions_total",
            "counter",
            "Parsed debug files dropped from memory to stay within the cache bound.",
            s.evictions,
        ),
        (
            "profiledb_symbolizer_fetches_ok_total",
            "counter",
            "Debug files fetched from debuginfod or the bucket.",
            s.fetches_ok,
        ),
        (
            "profiledb_symbolizer_fetches_missing_total",
            "counter",
            "Build ids no source had.",
            s.fetches_missing,
        ),
        (
            "profiledb_symbolizer_fetches_failed_total",
            "counter",
            "Fetches that failed or brought a file that was refused.",
            s.fetches_failed,
        ),
        (
            "profiledb_symbolizer_fetches_dropped_total",
            "counter",
            "Fetches not queued because the fetch queue was full.",
            s.fetches_dropped,
        ),
    ];
    for (name, kind, help, v) in rows {
        family(out, name, kind, help, v);
    }
}
