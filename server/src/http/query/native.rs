//! Native query endpoints under `/api/v1`: GWP group-by, time series, diff, flame
//! graph JSON, pprof export and an SVG flame graph.

use axum::extract::{Query, State};
use axum::http::{header, HeaderMap, Uri};
use axum::response::Response;
use axum::routing::{get, post};
use axum::Router;
use bytes::Bytes;
use profiledb_ingest::parse_time;
use profiledb_storage::FlameGraphDiff;
use profiledb_storage::Merged;
use profiledb_storage::{now_ms, Selector, TenantId, TimeRange};
use profiledb_storage::{GroupByQuery, GroupKey};
use regex::Regex;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use super::answers::cached_answer;
use super::render::{profile_type_of, range_params};
use super::{blocking, selector_for, storage_error};
use crate::error::{ApiError, ApiResult};
use crate::http::{tenant_of, AppRef};

pub fn routes() -> Router<AppRef> {
    Router::new()
        .route("/api/v1/query", post(group_by))
        .route("/api/v1/timeseries", get(timeseries))
        .route("/api/v1/diff", post(diff))
        .route("/api/v1/flamegraph", get(flamegraph_json))
        .route("/api/v1/pprof", get(pprof))
        .route("/api/v1/render.svg", get(svg))
}

/// A time in a JSON body: milliseconds, or any form `/ingest` accepts (`"now-1h"`).
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub enum TimeArg {
    Ms(i64),
    Text(String),
}

impl TimeArg {
    fn resolve(&self, what: &'static str, now: i64) -> ApiResult<i64> {
        match self {
            TimeArg::Ms(v) => Ok(*v),
            TimeArg::Text(s) => Ok(parse_time(what, s, now)?),
        }
    }
}

/// `[start, end)` in ms; defaults to the last hour.
fn half_open(start: Option<&TimeArg>, end: Option<&TimeArg>) -> ApiResult<TimeRange> {
    let now = now_ms();
    let s = match start {
        Some(t) => t.resolve("start", now)?,
        None => now - 3_600_000,
    };
    let e = match end {
        Some(t) => t.resolve("end", now)?,
        None => now,
    };
    if e < s {
        return Err(ApiError::bad_request(format!(
            "end ({e}) is before start ({s})"
        )));
    }
    Ok(TimeRange::new(s, e))
}

fn json_body<T: for<'de> Deserialize<'de>>(body: &Bytes) -> ApiResult<T> {
    serde_json::from_slice(body)
        .map_err(|e| ApiError::bad_request(format!("invalid JSON request: {e}")))
}

fn compile(what: &str, re: Option<&String>) -> ApiResult<Option<Regex>> {
    match re.filter(|r| !r.is_empty()) {
        None => Ok(None),
        Some(r) => regex::RegexBuilder::new(r)
            .size_limit(1 << 20)
            .build()
            .map(Some)
            .map_err(|e| ApiError::bad_request(format!("invalid {what} regex: {e}"))),
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct GroupByRequest {
    #[serde(default)]
    profile_type: String,
    #[serde(default)]
    selector: String,
    start: Option<TimeArg>,
    end: Option<TimeArg>,
    #[serde(default)]
    group_by: Vec<String>,
    function: Option<String>,
    exclude_function: Option<String>,
    #[serde(default)]
    limit: usize,
}

/// `POST /api/v1/query`: GWP group-by.
async fn group_by(
    State(state): State<AppRef>,
    headers: HeaderMap,
    body: Bytes,
) -> ApiResult<Response> {
    count(&state);
    let r: GroupByRequest = json_body(&body)?;
    if r.group_by.len() > 16 {
        return Err(ApiError::bad_request("at most 16 group_by keys"));
    }
    let sel = selector_for(&r.profile_type, &r.selector)?;
    let range = half_open(r.start.as_ref(), r.end.as_ref())?;
    let q = GroupByQuery {
        keys: r.group_by.iter().map(|k| GroupKey::parse(k)).collect(),
        include: compile("function", r.function.as_ref())?,
        exclude: compile("exclude_function", r.exclude_function.as_ref())?,
        max_groups: 0,
    };
    let tenant = tenant_of(&headers)?;
    let key = format!("query\u{0}{}", String::from_utf8_lossy(&body));
    cached_answer(&state, &tenant, &[range], key, JSON, || async {
        let (querier, t) = (state.querier()?, tenant.clone());
        let acc =
            blocking(move || querier.group_by(&t, &sel, range, &q).map_err(storage_error)).await?;
        let rows: Vec<Value> = acc
            .sorted(r.limit)
            .into_iter()
            .map(|(key, value)| json!({"key": key, "value": value}))
            .collect();
        to_json(&json!({
            "group_by": r.group_by,
            "rows": rows,
            "total": acc.total,
        }))
    })
    .await
}

const JSON: &str = "application/json";

fn to_json<T: Serialize + ?Sized>(v: &T) -> ApiResult<Vec<u8>> {
    serde_json::to_vec(v).map_err(|e| ApiError::internal(format!("JSON encoding failed: {e}")))
}

/// The raw query string of a GET: with the resolved ranges, the answer's cache key.
fn raw_query(uri: &Uri) -> String {
    format!("{}?{}", uri.path(), uri.query().unwrap_or(""))
}

#[derive(Debug, Default, Deserialize)]
struct SeriesParams {
    query: Option<String>,
    from: Option<String>,
    until: Option<String>,
    /// Seconds, or a duration like `60s`, `5m`.
    step: Option<String>,
    /// Comma-separated label names.
    group_by: Option<String>,
    limit: Option<usize>,
}

fn step_ms(s: &str) -> ApiResult<i64> {
    let s = s.trim();
    let (num, mul) = match s.char_indices().find(|(_, c)| c.is_ascii_alphabetic()) {
        Some((i, _)) => {
            let u = &s[i..];
            let mul = profiledb_ingest::duration_unit_ms(u)
                .ok_or_else(|| ApiError::bad_request(format!("unknown step unit {u:?}")))?;
            (&s[..i], mul)
        }
        None => (s, 1000),
    };
    let v: f64 = num
        .parse()
        .map_err(|_| ApiError::bad_request(format!("invalid step {s:?}")))?;
    let ms = (v * mul as f64).round();
    if !(1.0..=1e12).contains(&ms) {
        return Err(ApiError::bad_request(format!("step {s:?} out of range")));
    }
    Ok(ms as i64)
}

/// `GET /api/v1/timeseries?query=&from=&until=&step=&group_by=a,b&limit=`
async fn timeseries(
    State(state): State<AppRef>,
    headers: HeaderMap,
    uri: Uri,
    q: Result<Query<SeriesParams>, axum::extract::rejection::QueryRejection>,
) -> ApiResult<Response> {
    count(&state);
    let p = q.map(|Query(p)| p).map_err(|e| {
        ApiError::bad_request(format!("invalid query parameters: {}", e.body_text()))
    })?;
    let (sel, range) =
        range_params(p.query.as_ref(), p.from.as_ref(), p.until.as_ref()).resolve()?;
    let (store, tenant) = (state.store()?, tenant_of(&headers)?);
    let querier = state.querier()?;
    let step = match &p.step {
        Some(s) => step_ms(s)?,
        None => store.config().step_ms,
    };
    if (range.end_ms - range.start_ms) / step.max(1) > 100_000 {
        return Err(ApiError::bad_request(
            "more than 100000 points per series: use a larger step",
        ));
    }
    let group: Vec<String> = p
        .group_by
        .as_deref()
        .unwrap_or("")
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(String::from)
        .collect();
    let limit = p.limit.unwrap_or(0);
    let key = raw_query(&uri);
    cached_answer(&state, &tenant, &[range], key, JSON, || async {
        let (g2, t) = (group.clone(), tenant.clone());
        let list =
            blocking(move || Ok(querier.time_series(&t, &sel, range, &g2, step, limit)?)).await?;
        let series: Vec<Value> = list
            .into_iter()
            .map(|s| {
                let labels: serde_json::Map<String, Value> = s
                    .labels
                    .iter()
                    .map(|(k, v)| (k.clone(), Value::String(v.clone())))
                    .collect();
                json!({"labels": labels, "total": s.total(), "points": s.points})
            })
            .collect();
        to_json(&json!({"step_ms": step, "group_by": group, "series": series}))
    })
    .await
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Side {
    start: Option<TimeArg>,
    end: Option<TimeArg>,
    selector: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct DiffRequest {
    #[serde(default)]
    profile_type: String,
    #[serde(default)]
    selector: String,
    base: Side,
    compare: Side,
    #[serde(default = "default_top")]
    top: usize,
    max_nodes: Option<i64>,
}

fn default_top() -> usize {
    10
}

/// A diff flame graph in Pyroscope's field names. Answers are serialized from
/// borrowed structs, not built as `serde_json::Value` trees first: for a diff of
/// 8192 nodes that halves the encoding time.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
pub struct DiffFlameJson<'a> {
    names: &'a [String],
    levels: &'a [Vec<i64>],
    total: i64,
    max_self: i64,
    left_ticks: i64,
    right_ticks: i64,
}

pub fn diff_json(d: &FlameGraphDiff) -> DiffFlameJson<'_> {
    DiffFlameJson {
        names: &d.names,
        levels: &d.levels,
        total: d.total,
        max_self: d.max_self,
        left_ticks: d.left_ticks,
        right_ticks: d.right_ticks,
    }
}

#[derive(Serialize)]
struct DiffAnswer<'a> {
    flamegraph: DiffFlameJson<'a>,
    top: Vec<Value>,
    stats: Value,
}

/// `POST /api/v1/diff`
async fn diff(State(state): State<AppRef>, headers: HeaderMap, body: Bytes) -> ApiResult<Response> {
    count(&state);
    let r: DiffRequest = json_body(&body)?;
    let side = |s: &Side| -> ApiResult<(Selector, TimeRange)> {
        let sel = selector_for(
            &r.profile_type,
            s.selector.as_deref().unwrap_or(&r.selector),
        )?;
        Ok((sel, half_open(s.start.as_ref(), s.end.as_ref())?))
    };
    let (bs, br) = side(&r.base)?;
    let (cs, cr) = side(&r.compare)?;
    let top = r.top.clamp(1, 10_000);
    let mn = super::querier::max_nodes(r.max_nodes);
    let tenant = tenant_of(&headers)?;
    let key = format!("diff\u{0}{}", String::from_utf8_lossy(&body));
    cached_answer(&state, &tenant, &[br, cr], key, JSON, || async {
        let (querier, t) = (state.querier()?, tenant.clone());
        let d = blocking(move || {
            querier
                .diff(&t, (&bs, br), (&cs, cr), top, mn)
                .map_err(storage_error)
        })
        .await?;
        let top: Vec<Value> = d
            .top
            .iter()
            .map(|e| {
                json!({"function": e.function, "base_share": e.base_share,
                       "compare_share": e.compare_share, "delta": e.delta})
            })
            .collect();
        to_json(&DiffAnswer {
            flamegraph: diff_json(&d.flamegraph),
            top,
            stats: json!({
                "manhattan": d.stats.manhattan,
                "entropy_base": d.stats.entropy_base,
                "entropy_compare": d.stats.entropy_compare,
                "samples_base": d.stats.samples_base,
                "samples_compare": d.stats.samples_compare,
            }),
        })
    })
    .await
}

#[derive(Debug, Default, Deserialize)]
struct MergeParams {
    query: Option<String>,
    from: Option<String>,
    until: Option<String>,
    max_nodes: Option<i64>,
    title: Option<String>,
}

fn merge_params(
    q: Result<Query<MergeParams>, axum::extract::rejection::QueryRejection>,
) -> ApiResult<MergeParams> {
    q.map(|Query(p)| p)
        .map_err(|e| ApiError::bad_request(format!("invalid query parameters: {}", e.body_text())))
}

/// The merge of a resolved selection, in frame-tree space.
async fn merged(
    state: &AppRef,
    tenant: &TenantId,
    sel: Selector,
    range: TimeRange,
) -> ApiResult<Merged> {
    let (querier, tenant) = (state.querier()?, tenant.clone());
    blocking(move || {
        querier
            .merge_flamegraph(&tenant, &sel, range)
            .map_err(storage_error)
    })
    .await
}

/// Resolves a merge request, then answers it through the answer cache with `render`.
async fn merge_answer<R>(
    state: AppRef,
    headers: HeaderMap,
    uri: Uri,
    p: MergeParams,
    content_type: &'static str,
    render: R,
) -> ApiResult<Response>
where
    R: FnOnce(Merged, &MergeParams, TimeRange) -> ApiResult<Vec<u8>> + Send + 'static,
{
    count(&state);
    let (sel, range) =
        range_params(p.query.as_ref(), p.from.as_ref(), p.until.as_ref()).resolve()?;
    let tenant = tenant_of(&headers)?;
    cached_answer(
        &state,
        &tenant,
        &[range],
        raw_query(&uri),
        content_type,
        || async {
            let tree = merged(&state, &tenant, sel, range).await?;
            blocking(move || render(tree, &p, range)).await
        },
    )
    .await
}

/// `GET /api/v1/flamegraph`: the Pyroscope flame graph as plain JSON numbers.
async fn flamegraph_json(
    State(state): State<AppRef>,
    headers: HeaderMap,
    uri: Uri,
    q: Result<Query<MergeParams>, axum::extract::rejection::QueryRejection>,
) -> ApiResult<Response> {
    let p = merge_params(q)?;
    merge_answer(state, headers, uri, p, JSON, |merged, p, _| {
        #[derive(Serialize)]
        #[serde(rename_all = "camelCase")]
        struct FlameJson<'a> {
            names: &'a [String],
            levels: &'a [Vec<i64>],
            total: i64,
            max_self: i64,
        }
        let fg = merged.flamegraph(super::querier::max_nodes(p.max_nodes));
        to_json(&FlameJson {
            names: &fg.names,
            levels: &fg.levels,
            total: fg.total,
            max_self: fg.max_self,
        })
    })
    .await
}

/// `GET /api/v1/pprof`: gzip'd pprof, so `go tool pprof <url>` works directly.
async fn pprof(
    State(state): State<AppRef>,
    headers: HeaderMap,
    uri: Uri,
    q: Result<Query<MergeParams>, axum::extract::rejection::QueryRejection>,
) -> ApiResult<Response> {
    let p = merge_params(q)?;
    let mut resp = merge_answer(
        state,
        headers,
        uri,
        p,
        "application/octet-stream",
        |merged, p, range| {
            let pt = profile_type_of(p.query.as_ref());
            let prof = super::pprof::profile_from_tree(
                &merged.to_tree_checked().map_err(storage_error)?,
                &pt,
                range.start_ms,
                range.end_ms - range.start_ms,
            );
            super::pprof::gzip(&prost::Message::encode_to_vec(&prof))
                .map_err(|e| ApiError::internal(format!("gzip failed: {e}")))
        },
    )
    .await?;
    resp.headers_mut().insert(
        header::CONTENT_DISPOSITION,
        header::HeaderValue::from_static("attachment; filename=\"profile.pb.gz\""),
    );
    Ok(resp)
}

/// `GET /api/v1/render.svg`: an interactive SVG flame graph (inferno).
async fn svg(
    State(state): State<AppRef>,
    headers: HeaderMap,
    uri: Uri,
    q: Result<Query<MergeParams>, axum::extract::rejection::QueryRejection>,
) -> ApiResult<Response> {
    let p = merge_params(q)?;
    merge_answer(state, headers, uri, p, "image/svg+xml", |merged, p, _| {
        let title = p
            .title
            .clone()
            .or_else(|| p.query.clone())
            .unwrap_or_else(|| "profiledb".into());
        let text = merged
            .to_tree_checked()
            .map_err(storage_error)?
            .to_folded_text();
        if text.is_empty() {
            // inferno refuses empty input: say plainly that the range holds no data.
            return Ok(empty_svg(&title).into_bytes());
        }
        flame_svg(title, &profile_type_of(p.query.as_ref()), &text)
    })
    .await
}

/// An inferno flame graph of non-empty folded `text`, counted in the sample unit
/// of `profile_type`.
pub(super) fn flame_svg(title: String, profile_type: &str, text: &str) -> ApiResult<Vec<u8>> {
    let mut opts = inferno::flamegraph::Options::default();
    opts.title = title;
    opts.count_name = profile_type
        .split(':')
        .nth(2)
        .unwrap_or("samples")
        .to_string();
    let mut out = Vec::new();
    inferno::flamegraph::from_lines(&mut opts, text.lines(), &mut out)
        .map_err(|e| ApiError::internal(format!("SVG rendering failed: {e}")))?;
    Ok(out)
}

/// A small SVG saying the selection is empty, instead of an error image.
fn empty_svg(title: &str) -> String {
    let esc = title
        .replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;");
    format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"1200\" height=\"80\">\
         <text x=\"600\" y=\"30\" text-anchor=\"middle\" font-family=\"Verdana\" font-size=\"17\">{esc}</text>\
         <text x=\"600\" y=\"60\" text-anchor=\"middle\" font-family=\"Verdana\" font-size=\"13\">no samples in this time range</text></svg>"
    )
}

fn count(state: &AppRef) {
    state
        .http
        .query_requests
        .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
}
