//! `POST /querier.v1.QuerierService/<Method>`: Pyroscope's query API over Connect
//! unary, in binary protobuf and protojson. Times are milliseconds since the epoch;
//! the window is `[start, end)` (`end = 0` means now), as everywhere else
//! ([`crate::http::request`]). A merge, series or diff names exactly one profile type.
//!
//! [`call`] is the method table: it decodes the request, runs the method's own
//! function and encodes its answer, so each method reads as one function from its
//! request message to its response message.

use std::collections::{BTreeMap, BTreeSet};

use axum::extract::{Path, State};
use axum::http::HeaderMap;
use axum::response::Response;
use axum::routing::post;
use axum::Router;
use bytes::Bytes;
use profiledb_storage::flamegraph_diff_merged;
use profiledb_storage::FlameGraph;
use profiledb_storage::{CallTree, Selector, TimeRange};

use super::connect::{ConnectError, ConnectResult, Ctx, Unary};
use super::individual::{individuals, top_per_bucket};
use super::merges::{merge, refuse_trace_ids, Format, MergeAnswer, What};
use super::proto::querier::v1 as q;
use super::proto::types::v1 as t;
use crate::error::ApiResult;
use crate::http::request::{
    blocking, discovery_selector, profile_type_parts, pyroscope_max_nodes, window_ms, Selection,
};
use crate::http::{tenant_of, AppRef};

pub fn routes() -> Router<AppRef> {
    Router::new().route("/querier.v1.QuerierService/{method}", post(call))
}

/// The method table.
async fn call(
    State(state): State<AppRef>,
    Path(method): Path<String>,
    headers: HeaderMap,
    body: Bytes,
) -> Result<Response, ConnectError> {
    state
        .http
        .query_requests
        .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let tenant = tenant_of(&headers)?;
    let unary = Unary {
        ctx: Ctx { state, tenant },
        headers: &headers,
        body: &body,
    };
    match method.as_str() {
        "ProfileTypes" => {
            unary
                .run(
                    "querier.v1.ProfileTypesRequest",
                    "querier.v1.ProfileTypesResponse",
                    profile_types,
                )
                .await
        }
        "LabelNames" => {
            unary
                .run(
                    "types.v1.LabelNamesRequest",
                    "types.v1.LabelNamesResponse",
                    label_names,
                )
                .await
        }
        "LabelValues" => {
            unary
                .run(
                    "types.v1.LabelValuesRequest",
                    "types.v1.LabelValuesResponse",
                    label_values,
                )
                .await
        }
        "Series" => {
            unary
                .run(
                    "querier.v1.SeriesRequest",
                    "querier.v1.SeriesResponse",
                    series,
                )
                .await
        }
        "SelectMergeStacktraces" => {
            unary
                .run(
                    "querier.v1.SelectMergeStacktracesRequest",
                    "querier.v1.SelectMergeStacktracesResponse",
                    select_merge_stacktraces,
                )
                .await
        }
        "SelectMergeSpanProfile" => {
            unary
                .run(
                    "querier.v1.SelectMergeSpanProfileRequest",
                    "querier.v1.SelectMergeSpanProfileResponse",
                    select_merge_span_profile,
                )
                .await
        }
        "SelectMergeProfile" => {
            unary
                .run(
                    "querier.v1.SelectMergeProfileRequest",
                    "google.v1.Profile",
                    select_merge_profile,
                )
                .await
        }
        "SelectSeries" => {
            unary
                .run(
                    "querier.v1.SelectSeriesRequest",
                    "querier.v1.SelectSeriesResponse",
                    select_series,
                )
                .await
        }
        "Diff" => {
            unary
                .run("querier.v1.DiffRequest", "querier.v1.DiffResponse", diff)
                .await
        }
        "GetProfileStats" => {
            unary
                .run(
                    "types.v1.GetProfileStatsRequest",
                    "types.v1.GetProfileStatsResponse",
                    get_profile_stats,
                )
                .await
        }
        "SelectHeatmap" => {
            unary
                .run(
                    "querier.v1.SelectHeatmapRequest",
                    "querier.v1.SelectHeatmapResponse",
                    super::heatmap::select_heatmap,
                )
                .await
        }
        "AnalyzeQuery" => {
            unary
                .run(
                    "querier.v1.AnalyzeQueryRequest",
                    "querier.v1.AnalyzeQueryResponse",
                    super::analyze::analyze_query,
                )
                .await
        }
        other => Err(super::services::unimplemented(&format!(
            "querier.v1.QuerierService/{other}"
        ))),
    }
}

/// The window of a Connect request.
fn range(start: i64, end: i64) -> ConnectResult<TimeRange> {
    Ok(window_ms(start, end, ("start", "end"))?)
}

pub fn fg_proto(fg: FlameGraph) -> q::FlameGraph {
    q::FlameGraph {
        names: fg.names,
        levels: fg
            .levels
            .into_iter()
            .map(|values| q::Level { values })
            .collect(),
        total: fg.total,
        max_self: fg.max_self,
    }
}

/// Keeps only the stacks under a root-first call-site prefix.
pub fn filter_call_site(tree: &CallTree, call_site: &[String]) -> CallTree {
    if call_site.is_empty() {
        return tree.clone();
    }
    let mut out = CallTree::new();
    for (i, n) in tree.nodes().iter().enumerate() {
        if n.self_value == 0 {
            continue;
        }
        let path = tree.path(i as u32);
        if path.len() >= call_site.len() && path.iter().zip(call_site).all(|(a, b)| *a == b) {
            out.add_stack(&path, n.self_value);
        }
    }
    out.finalize();
    out
}

/// Discovery matchers: each one a selector (their union), none meaning everything.
fn matchers_selectors(matchers: &[String]) -> ConnectResult<Vec<Selector>> {
    if matchers.is_empty() {
        return Ok(vec![Selector::default()]);
    }
    matchers
        .iter()
        .map(|m| discovery_selector(Some(m)).map_err(ConnectError::from))
        .collect()
}

/// The sorted, distinct union of `f` over Connect's matchers (each one is an
/// alternative selection).
fn union<T: Ord>(
    sels: &[Selector],
    mut f: impl FnMut(&Selector) -> Result<Vec<T>, profiledb_storage::QueryError>,
) -> ApiResult<Vec<T>> {
    let mut set = BTreeSet::new();
    for s in sels {
        set.extend(f(s)?);
    }
    Ok(set.into_iter().collect())
}

/// The root-first frame names of a stack trace selector's call site (empty: none).
fn call_site(sel: Option<t::StackTraceSelector>) -> Vec<String> {
    sel.map(|s| s.call_site.into_iter().map(|l| l.name).collect())
        .unwrap_or_default()
}

async fn profile_types(
    ctx: Ctx,
    r: q::ProfileTypesRequest,
) -> ConnectResult<q::ProfileTypesResponse> {
    let range = if r.start == 0 && r.end == 0 {
        TimeRange::all()
    } else {
        range(r.start, r.end)?
    };
    let (querier, tenant) = (ctx.state.querier()?, ctx.tenant);
    let ids = blocking(move || Ok(querier.profile_types(&tenant, range)?)).await?;
    let profile_types = ids
        .iter()
        .map(|id| {
            let [name, st, su, pt, pu] = profile_type_parts(id);
            t::ProfileType {
                id: id.clone(),
                name: name.into(),
                sample_type: st.into(),
                sample_unit: su.into(),
                period_type: pt.into(),
                period_unit: pu.into(),
            }
        })
        .collect();
    Ok(q::ProfileTypesResponse { profile_types })
}

async fn label_names(ctx: Ctx, r: t::LabelNamesRequest) -> ConnectResult<t::LabelNamesResponse> {
    let range = range(r.start, r.end)?;
    let sels = matchers_selectors(&r.matchers)?;
    let (querier, tenant) = (ctx.state.querier()?, ctx.tenant);
    let names = blocking(move || union(&sels, |s| querier.label_names(&tenant, s, range))).await?;
    Ok(t::LabelNamesResponse { names })
}

async fn label_values(ctx: Ctx, r: t::LabelValuesRequest) -> ConnectResult<t::LabelValuesResponse> {
    let range = range(r.start, r.end)?;
    let sels = matchers_selectors(&r.matchers)?;
    let (querier, tenant, name) = (ctx.state.querier()?, ctx.tenant, r.name);
    let names =
        blocking(move || union(&sels, |s| querier.label_values(&tenant, &name, s, range))).await?;
    Ok(t::LabelValuesResponse { names })
}

async fn series(ctx: Ctx, r: q::SeriesRequest) -> ConnectResult<q::SeriesResponse> {
    let range = range(r.start, r.end)?;
    let sels = matchers_selectors(&r.matchers)?;
    let (querier, tenant, keep) = (ctx.state.querier()?, ctx.tenant, r.label_names);
    let sets = blocking(move || {
        let mut set = BTreeSet::new();
        for s in &sels {
            for l in querier.series(&tenant, s, range)? {
                let pairs: Vec<(String, String)> = l
                    .iter()
                    .filter(|(k, _)| keep.is_empty() || keep.iter().any(|n| n == k))
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect();
                set.insert(pairs);
            }
        }
        Ok(set)
    })
    .await?;
    let labels_set = sets
        .into_iter()
        .map(|pairs| t::Labels {
            labels: pairs
                .into_iter()
                .map(|(name, value)| t::LabelPair { name, value })
                .collect(),
        })
        .collect();
    Ok(q::SeriesResponse { labels_set })
}

async fn select_merge_stacktraces(
    ctx: Ctx,
    r: q::SelectMergeStacktracesRequest,
) -> ConnectResult<q::SelectMergeStacktracesResponse> {
    refuse_trace_ids(&r.trace_id_selector)?;
    let what = What {
        selection: Selection::from_parts(&r.profile_type_id, &r.label_selector)?,
        range: range(r.start, r.end)?,
        call_site: call_site(r.stack_trace_selector),
        profile_ids: r.profile_id_selector,
    }
    .spans(&r.span_selector)?;
    let format = Format::of(r.format)?;
    Ok(merge(ctx, what, r.max_nodes, format).await?.into_response())
}

async fn select_merge_span_profile(
    ctx: Ctx,
    r: q::SelectMergeSpanProfileRequest,
) -> ConnectResult<q::SelectMergeSpanProfileResponse> {
    let what = What {
        selection: Selection::from_parts(&r.profile_type_id, &r.label_selector)?,
        range: range(r.start, r.end)?,
        call_site: Vec::new(),
        profile_ids: Vec::new(),
    }
    .spans(&r.span_selector)?;
    let format = match Format::of(r.format)? {
        f @ (Format::Flame | Format::Tree) => f,
        _ => {
            return Err(ConnectError::invalid(
                "SelectMergeSpanProfile answers PROFILE_FORMAT_FLAMEGRAPH or _TREE; \
                 ask SelectMergeStacktraces with span_selector for DOT or pprof",
            ))
        }
    };
    let r = merge(ctx, what, r.max_nodes, format).await?.into_response();
    Ok(q::SelectMergeSpanProfileResponse {
        flamegraph: r.flamegraph,
        tree: r.tree,
    })
}

async fn select_merge_profile(
    ctx: Ctx,
    r: q::SelectMergeProfileRequest,
) -> ConnectResult<super::proto::pprof::Profile> {
    refuse_trace_ids(&r.trace_id_selector)?;
    // With `go_pgo` set, Pyroscope ignores the call site.
    let go_pgo = r.stack_trace_selector.as_ref().and_then(|s| s.go_pgo);
    let call_site = match go_pgo {
        Some(_) => Vec::new(),
        None => call_site(r.stack_trace_selector),
    };
    let what = What {
        selection: Selection::from_parts(&r.profile_type_id, &r.label_selector)?,
        range: range(r.start, r.end)?,
        call_site,
        profile_ids: r.profile_id_selector,
    };
    match merge(ctx, what, r.max_nodes, Format::Pprof).await? {
        MergeAnswer::Pprof(p) => Ok(match &go_pgo {
            Some(pgo) => super::go_pgo::apply(p, pgo),
            None => p,
        }),
        _ => Err(ConnectError::internal(
            "a pprof merge answered another form",
        )),
    }
}

async fn select_series(
    ctx: Ctx,
    r: q::SelectSeriesRequest,
) -> ConnectResult<q::SelectSeriesResponse> {
    let sel = Selection::from_parts(&r.profile_type_id, &r.label_selector)?.selector;
    let range = range(r.start, r.end)?;
    let (store, querier) = (ctx.state.store()?, ctx.state.querier()?);
    let storage_step = store.config().step_ms.max(1);
    let step_ms = step_ms(r.step, storage_step);
    super::grid::check(range, step_ms)?;
    let average = r.aggregation == Some(t::TimeSeriesAggregationType::Average as i32);
    let limit = r.limit.map_or(0, |l| usize::try_from(l).unwrap_or(0));
    let with_exemplars = matches!(
        t::ExemplarType::try_from(r.exemplar_type),
        Ok(t::ExemplarType::Individual | t::ExemplarType::Span)
    );
    let (tenant, group_by) = (ctx.tenant, r.group_by);
    let (list, mut exemplars) = blocking(move || {
        let list = querier.time_series(&tenant, &sel, range, &group_by, step_ms, limit)?;
        let mut exemplars = BTreeMap::new();
        if with_exemplars {
            let profiles = individuals(&querier, &tenant, &sel, range)?;
            for (key, p) in top_per_bucket(&profiles, &group_by, step_ms) {
                exemplars.insert(key, p.exemplar(&group_by));
            }
        }
        Ok((list, exemplars))
    })
    .await?;
    // An average spreads each bucket over the storage steps it spans.
    let per_bucket = (step_ms as f64 / storage_step as f64).max(1.0);
    let series = list
        .into_iter()
        .map(|s| {
            let points = super::grid::fill(range, step_ms, &s.points)
                .into_iter()
                .map(|(ts, v)| t::Point {
                    value: if average {
                        v as f64 / per_bucket
                    } else {
                        v as f64
                    },
                    timestamp: ts,
                    annotations: Vec::new(),
                    exemplars: exemplars
                        .remove(&(s.labels.clone(), ts))
                        .into_iter()
                        .collect(),
                })
                .collect();
            t::Series {
                labels: s
                    .labels
                    .into_iter()
                    .map(|(name, value)| t::LabelPair { name, value })
                    .collect(),
                points,
            }
        })
        .collect();
    Ok(q::SelectSeriesResponse { series })
}

/// A Connect request's step (seconds; 0 or absent: the storage step) in ms.
pub fn step_ms(step_s: f64, storage_step_ms: i64) -> i64 {
    if step_s.is_finite() && step_s > 0.0 {
        ((step_s * 1000.0).round() as i64).max(1)
    } else {
        storage_step_ms.max(1)
    }
}

async fn diff(ctx: Ctx, r: q::DiffRequest) -> ConnectResult<q::DiffResponse> {
    let (Some(left), Some(right)) = (r.left, r.right) else {
        return Err(ConnectError::invalid("left and right are required"));
    };
    let ls = Selection::from_parts(&left.profile_type_id, &left.label_selector)?;
    let rs = Selection::from_parts(&right.profile_type_id, &right.label_selector)?;
    if ls.profile_type != rs.profile_type {
        return Err(ConnectError::invalid(format!(
            "left and right name different profile types ({:?} and {:?}): a diff compares one",
            ls.profile_type.as_str(),
            rs.profile_type.as_str()
        )));
    }
    let (lr, rr) = (range(left.start, left.end)?, range(right.start, right.end)?);
    let mn = pyroscope_max_nodes(left.max_nodes.or(right.max_nodes))?;
    let (querier, tenant) = (ctx.state.querier()?, ctx.tenant);
    let (ls, rs) = (ls.selector, rs.selector);
    let d = blocking(move || {
        let (l, r) = querier.diff_sides(&tenant, (&ls, lr), (&rs, rr))?;
        Ok(flamegraph_diff_merged(&l, &r, mn))
    })
    .await?;
    Ok(q::DiffResponse {
        flamegraph: Some(q::FlameGraphDiff {
            names: d.names,
            levels: d
                .levels
                .into_iter()
                .map(|values| q::Level { values })
                .collect(),
            total: d.total,
            max_self: d.max_self,
            left_ticks: d.left_ticks,
            right_ticks: d.right_ticks,
        }),
    })
}

async fn get_profile_stats(
    ctx: Ctx,
    _: t::GetProfileStatsRequest,
) -> ConnectResult<t::GetProfileStatsResponse> {
    let (querier, tenant) = (ctx.state.querier()?, ctx.tenant);
    let (oldest, newest) = blocking(move || {
        let totals = querier.series_totals(&tenant, &Selector::default(), TimeRange::all())?;
        let mut lo = i64::MAX;
        let mut hi = i64::MIN;
        for pts in totals.values() {
            if let (Some((&a, _)), Some((&b, _))) = (pts.first_key_value(), pts.last_key_value()) {
                lo = lo.min(a);
                hi = hi.max(b);
            }
        }
        Ok((lo, hi))
    })
    .await?;
    let any = oldest != i64::MAX;
    Ok(t::GetProfileStatsResponse {
        data_ingested: any,
        oldest_profile_time: if any { oldest } else { 0 },
        newest_profile_time: if any { newest } else { 0 },
    })
}
