//! Native query endpoints under `/api/v1`: GWP group-by, time series, diff, flame
//! graph JSON, pprof export and an SVG flame graph.

use axum::extract::State;
use axum::http::{header, HeaderMap, Uri};
use axum::response::Response;
use axum::routing::{get, post};
use axum::Router;
use bytes::Bytes;
use profiledb_storage::Merged;
use profiledb_storage::{DiffEntry, DiffStats, FlameGraph, FlameGraphDiff};
use profiledb_storage::{GroupByQuery, GroupKey};
use profiledb_storage::{Selector, TenantId, TimeRange};
use regex::Regex;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use super::answers::cached_answer;
use super::fleet::{noise_answer, NoiseOptions};
use super::grid;
use super::warnings;
use crate::cluster::split::queries as split;
use crate::error::{ApiError, ApiResult};
use crate::http::request::{
    blocking, max_nodes, window, window_args, Params, ProfileTypeId, Selection, TimeArg,
};
use crate::http::{tenant_of, AppRef};
use crate::time::parse_duration;

pub fn routes() -> Router<AppRef> {
    Router::new()
        .route("/api/v1/query", post(group_by))
        .route("/api/v1/timeseries", get(timeseries))
        .route("/api/v1/diff", post(diff))
        .route("/api/v1/flamegraph", get(flamegraph_json))
        .route("/api/v1/pprof", get(pprof))
        .route("/api/v1/render.svg", get(svg))
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
    let sel = Selection::from_parts(&r.profile_type, &r.selector)?.selector;
    let range = window_args(r.start.as_ref(), r.end.as_ref())?;
    let q = GroupByQuery {
        keys: r.group_by.iter().map(|k| GroupKey::parse(k)).collect(),
        include: compile("function", r.function.as_ref())?,
        exclude: compile("exclude_function", r.exclude_function.as_ref())?,
        max_groups: 0,
    };
    let tenant = tenant_of(&headers)?;
    let key = format!("query\u{0}{}", String::from_utf8_lossy(&body));
    let labels: Vec<String> = q
        .keys
        .iter()
        .filter_map(|k| match k {
            GroupKey::Label(l) => Some(l.clone()),
            _ => None,
        })
        .collect();
    cached_answer(&state, &tenant, &[range], key, JSON, || async {
        let (querier, t) = (state.querier()?, tenant.clone());
        let split = split::of(&state);
        let (acc, warnings) = blocking(move || {
            let acc = split::group_by(split.as_deref(), &querier, &t, &sel, range, &q)?;
            let labels: Vec<&str> = labels.iter().map(String::as_str).collect();
            let w = warnings::of_answer(&querier, &t, &sel, range, acc.total, &labels)?;
            Ok((acc, w))
        })
        .await?;
        let rows: Vec<Value> = acc
            .sorted(r.limit)
            .into_iter()
            .map(|(key, value)| json!({"key": key, "value": value}))
            .collect();
        let mut answer = json!({
            "group_by": r.group_by,
            "rows": rows,
            "total": acc.total,
        });
        with_warnings(&mut answer, warnings);
        to_json(&answer)
    })
    .await
}

/// Adds Prometheus' `warnings` list to a JSON answer when there is any.
pub(super) fn with_warnings(answer: &mut Value, warnings: Vec<String>) {
    if !warnings.is_empty() {
        answer["warnings"] = json!(warnings);
    }
}

pub(crate) const JSON: &str = "application/json";

pub(super) fn to_json<T: Serialize + ?Sized>(v: &T) -> ApiResult<Vec<u8>> {
    serde_json::to_vec(v).map_err(|e| ApiError::internal(format!("JSON encoding failed: {e}")))
}

/// The raw query string of a GET: with the resolved ranges, the answer's cache key.
pub(super) fn raw_query(uri: &Uri) -> String {
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
    let ms = parse_duration("step", s)?;
    if !(1..=1_000_000_000_000).contains(&ms) {
        return Err(ApiError::bad_request(format!("step {s:?} out of range")));
    }
    Ok(ms)
}

/// `GET /api/v1/timeseries?query=&from=&until=&step=&group_by=a,b&limit=`
async fn timeseries(
    State(state): State<AppRef>,
    headers: HeaderMap,
    uri: Uri,
    Params(p): Params<SeriesParams>,
) -> ApiResult<Response> {
    count(&state);
    let sel = Selection::from_query(p.query.as_deref())?.selector;
    let range = window(("from", p.from.as_deref()), ("until", p.until.as_deref()))?;
    let (store, tenant) = (state.store()?, tenant_of(&headers)?);
    let querier = state.querier()?;
    let step = match &p.step {
        Some(s) => step_ms(s)?,
        None => store.config().step_ms,
    };
    grid::check(range, step)?;
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
        let split = split::of(&state);
        let (list, warnings) = blocking(move || {
            let s = split.as_deref();
            let list = split::time_series(s, &querier, &t, &sel, range, &g2, step, limit)?;
            let total = list.iter().map(|s| s.total()).sum::<i64>();
            let labels: Vec<&str> = g2.iter().map(String::as_str).collect();
            let w = warnings::of_answer(&querier, &t, &sel, range, total, &labels)?;
            Ok((list, w))
        })
        .await?;
        let series: Vec<Value> = list
            .into_iter()
            .map(|s| {
                let labels: serde_json::Map<String, Value> = s
                    .labels
                    .iter()
                    .map(|(k, v)| (k.clone(), Value::String(v.clone())))
                    .collect();
                let points = grid::fill(range, step, &s.points);
                json!({"labels": labels, "total": s.total(), "points": points})
            })
            .collect();
        let mut answer = json!({"step_ms": step, "group_by": group, "series": series});
        with_warnings(&mut answer, warnings);
        to_json(&answer)
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
    /// Adds the sampling-noise verdict (`super::fleet`).
    noise: Option<NoiseOptions>,
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
    /// Set when a side is empty: shares against an empty side are not a change.
    #[serde(skip_serializing_if = "Option::is_none")]
    notice: Option<&'static str>,
    stats: Value,
    #[serde(skip_serializing_if = "Option::is_none")]
    noise: Option<Value>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    warnings: Vec<String>,
}

/// What a diff with an empty side means, instead of misleading moves of ±100 %.
pub fn empty_sides_notice(samples_base: i64, samples_compare: i64) -> Option<&'static str> {
    match (samples_base == 0, samples_compare == 0) {
        (true, true) => Some("neither range has samples"),
        (true, false) => Some("base range has no samples"),
        (false, true) => Some("compare range has no samples"),
        (false, false) => None,
    }
}

/// `POST /api/v1/diff`
async fn diff(State(state): State<AppRef>, headers: HeaderMap, body: Bytes) -> ApiResult<Response> {
    count(&state);
    let r: DiffRequest = json_body(&body)?;
    // A side's own selector narrows the shared one: both apply.
    let side = |s: &Side| -> ApiResult<(Selector, TimeRange)> {
        let texts = [r.selector.as_str(), s.selector.as_deref().unwrap_or("")];
        let sel = Selection::from_all(&r.profile_type, &texts)?.selector;
        Ok((sel, window_args(s.start.as_ref(), s.end.as_ref())?))
    };
    if let Some(n) = &r.noise {
        n.check()?;
    }
    let (bs, br) = side(&r.base)?;
    let (cs, cr) = side(&r.compare)?;
    let top = r.top.clamp(1, 10_000);
    let mn = max_nodes(r.max_nodes)?;
    let tenant = tenant_of(&headers)?;
    let key = format!("diff\u{0}{}", String::from_utf8_lossy(&body));
    cached_answer(&state, &tenant, &[br, cr], key, JSON, || async {
        let (querier, t) = (state.querier()?, tenant.clone());
        let noise_opts = r.noise.clone();
        let split = split::of(&state);
        let (d, noise, warnings) = blocking(move || {
            let s = split.as_deref();
            let d = split::diff(s, &querier, &t, (&bs, br), (&cs, cr), top, mn)?;
            let noise = noise_opts
                .map(|o| noise_answer(&querier, &t, (&bs, br), &o, top, &d.stats))
                .transpose()?;
            let mut w = Vec::new();
            let sides = [
                ("base", &bs, br, d.stats.samples_base),
                ("compare", &cs, cr, d.stats.samples_compare),
            ];
            for (name, sel, range, samples) in sides {
                if samples == 0 {
                    let found = warnings::selection(&querier, &t, sel, range)?;
                    w.extend(found.into_iter().map(|m| format!("{name}: {m}")));
                }
            }
            Ok((d, noise, w))
        })
        .await?;
        diff_body(&d.flamegraph, &d.top, &d.stats, noise, warnings)
    })
    .await
}

/// The `/api/v1/diff` answer: the diff flame graph, the top movers and the
/// statistics (the noise verdict when asked).
pub(crate) fn diff_body(
    flamegraph: &FlameGraphDiff,
    top: &[DiffEntry],
    stats: &DiffStats,
    noise: Option<Value>,
    warnings: Vec<String>,
) -> ApiResult<Vec<u8>> {
    let top: Vec<Value> = top
        .iter()
        .map(|e| {
            json!({"function": e.function, "base_share": e.base_share,
                   "compare_share": e.compare_share, "delta": e.delta})
        })
        .collect();
    to_json(&DiffAnswer {
        flamegraph: diff_json(flamegraph),
        top,
        notice: empty_sides_notice(stats.samples_base, stats.samples_compare),
        stats: json!({
            "manhattan": stats.manhattan,
            "entropy_base": stats.entropy_base,
            "entropy_compare": stats.entropy_compare,
            "samples_base": stats.samples_base,
            "samples_compare": stats.samples_compare,
        }),
        noise,
        warnings,
    })
}

#[derive(Debug, Default, Deserialize)]
struct MergeParams {
    query: Option<String>,
    from: Option<String>,
    until: Option<String>,
    max_nodes: Option<i64>,
    title: Option<String>,
}

/// The merge of a resolved selection, in frame-tree space.
async fn merged(
    state: &AppRef,
    tenant: &TenantId,
    sel: Selector,
    range: TimeRange,
) -> ApiResult<Merged> {
    let (querier, tenant) = (state.querier()?, tenant.clone());
    let split = split::of(state);
    blocking(move || split::merge_flamegraph(split.as_deref(), &querier, &tenant, &sel, range))
        .await
}

/// Resolves a merge request, then answers it through the answer cache with
/// `render`, which also gets the warnings of an empty merge ([`warnings`]).
async fn merge_answer<R>(
    state: AppRef,
    headers: HeaderMap,
    uri: Uri,
    p: MergeParams,
    content_type: &'static str,
    render: R,
) -> ApiResult<Response>
where
    R: FnOnce(Merged, &MergeParams, &ProfileTypeId, TimeRange, Vec<String>) -> ApiResult<Vec<u8>>
        + Send
        + 'static,
{
    count(&state);
    let Selection {
        profile_type,
        selector: sel,
    } = Selection::from_query(p.query.as_deref())?;
    let range = window(("from", p.from.as_deref()), ("until", p.until.as_deref()))?;
    let tenant = tenant_of(&headers)?;
    cached_answer(
        &state,
        &tenant,
        &[range],
        raw_query(&uri),
        content_type,
        || async {
            let tree = merged(&state, &tenant, sel.clone(), range).await?;
            let (querier, t) = (state.querier()?, tenant.clone());
            blocking(move || {
                let warnings = match tree.total() {
                    0 => warnings::selection(&querier, &t, &sel, range)?,
                    _ => Vec::new(),
                };
                render(tree, &p, &profile_type, range, warnings)
            })
            .await
        },
    )
    .await
}

/// `GET /api/v1/flamegraph`: the Pyroscope flame graph as plain JSON numbers.
async fn flamegraph_json(
    State(state): State<AppRef>,
    headers: HeaderMap,
    uri: Uri,
    Params(p): Params<MergeParams>,
) -> ApiResult<Response> {
    let mn = max_nodes(p.max_nodes)?;
    merge_answer(
        state,
        headers,
        uri,
        p,
        JSON,
        move |merged, _, _, _, warnings| flamegraph_body(&merged.flamegraph(mn), warnings),
    )
    .await
}

/// The `/api/v1/flamegraph` answer.
pub(crate) fn flamegraph_body(fg: &FlameGraph, warnings: Vec<String>) -> ApiResult<Vec<u8>> {
    #[derive(Serialize)]
    struct Answer<'a> {
        #[serde(flatten)]
        flamegraph: FlameJson<'a>,
        #[serde(skip_serializing_if = "Vec::is_empty")]
        warnings: Vec<String>,
    }
    to_json(&Answer {
        flamegraph: flame_json(fg),
        warnings,
    })
}

/// A flame graph in Pyroscope's field names, with plain JSON numbers.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct FlameJson<'a> {
    names: &'a [String],
    levels: &'a [Vec<i64>],
    total: i64,
    max_self: i64,
}

pub(super) fn flame_json(fg: &FlameGraph) -> FlameJson<'_> {
    FlameJson {
        names: &fg.names,
        levels: &fg.levels,
        total: fg.total,
        max_self: fg.max_self,
    }
}

/// `GET /api/v1/pprof`: gzip'd pprof, so `go tool pprof <url>` works directly.
async fn pprof(
    State(state): State<AppRef>,
    headers: HeaderMap,
    uri: Uri,
    Params(p): Params<MergeParams>,
) -> ApiResult<Response> {
    let mut resp = merge_answer(
        state,
        headers,
        uri,
        p,
        "application/octet-stream",
        |merged, _, pt, range, _| {
            let prof = super::pprof::profile_from_tree(
                &merged.to_tree_checked()?,
                pt.as_str(),
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
    Params(p): Params<MergeParams>,
) -> ApiResult<Response> {
    merge_answer(
        state,
        headers,
        uri,
        p,
        "image/svg+xml",
        |merged, p, pt, _, warnings| {
            let title = p
                .title
                .clone()
                .or_else(|| p.query.clone())
                .unwrap_or_else(|| "profiledb".into());
            let tree = merged.to_tree_checked()?;
            let text = tree.to_folded_text();
            if text.is_empty() {
                // inferno refuses empty input: say plainly that the range holds no data.
                return Ok(empty_svg(&title, &warnings).into_bytes());
            }
            flame_svg(title, pt, &text, tree.total() as f64)
        },
    )
    .await
}

/// An inferno flame graph of non-empty folded `text` summing to `total`, with
/// tooltips in a human unit of the profile type's (`ms` for nanoseconds, `KiB`/`MiB`
/// for bytes).
fn flame_svg(
    title: String,
    profile_type: &ProfileTypeId,
    text: &str,
    total: f64,
) -> ApiResult<Vec<u8>> {
    let mut opts = inferno::flamegraph::Options::default();
    opts.title = title;
    let (name, factor) = svg_unit(profile_type.sample_unit(), total);
    opts.count_name = name;
    opts.factor = factor;
    let mut out = Vec::new();
    inferno::flamegraph::from_lines(&mut opts, text.lines(), &mut out)
        .map_err(|e| ApiError::internal(format!("SVG rendering failed: {e}")))?;
    Ok(out)
}

/// The unit an SVG's tooltips count in, and the factor from stored values: inferno
/// prints whole numbers, so the unit is the largest that keeps most frames above 1.
fn svg_unit(sample_unit: &str, total: f64) -> (String, f64) {
    match sample_unit {
        "nanoseconds" if total >= 1e11 => ("s".into(), 1e-9),
        "nanoseconds" => ("ms".into(), 1e-6),
        "bytes" if total >= 10.0 * (1u64 << 30) as f64 => ("MiB".into(), 1.0 / (1u64 << 20) as f64),
        "bytes" => ("KiB".into(), 1.0 / 1024.0),
        other => (other.to_string(), 1.0),
    }
}

/// A small SVG saying the selection is empty (and why, when a warning says so),
/// instead of an error image.
fn empty_svg(title: &str, warnings: &[String]) -> String {
    let esc = |t: &str| {
        t.replace('&', "&amp;")
            .replace('<', "&lt;")
            .replace('>', "&gt;")
            .replace('"', "&quot;")
    };
    let mut lines = vec!["no samples in this time range".to_string()];
    lines.extend(warnings.iter().map(|w| esc(w)));
    let height = 50 + 25 * lines.len();
    let text: String = lines
        .iter()
        .enumerate()
        .map(|(i, l)| {
            format!(
                "<text x=\"600\" y=\"{}\" text-anchor=\"middle\" font-family=\"Verdana\" font-size=\"13\">{l}</text>",
                60 + 25 * i
            )
        })
        .collect();
    format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"1200\" height=\"{height}\">\
         <text x=\"600\" y=\"30\" text-anchor=\"middle\" font-family=\"Verdana\" font-size=\"17\">{}</text>{text}</svg>",
        esc(title)
    )
}

pub(super) fn count(state: &AppRef) {
    state
        .http
        .query_requests
        .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
}
