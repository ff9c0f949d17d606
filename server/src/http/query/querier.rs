//! `POST /querier.v1.QuerierService/<Method>`: Pyroscope's query API over Connect
//! unary, in binary protobuf and protojson. Times are milliseconds since the epoch;
//! `end` is inclusive as in Pyroscope, `end = 0` means now.

use std::collections::BTreeSet;

use axum::extract::{Path, State};
use axum::http::HeaderMap;
use axum::response::Response;
use axum::routing::post;
use axum::Router;
use bytes::Bytes;
use profiledb_storage::flamegraph_diff_merged;
use profiledb_storage::{flamegraph, tree_bytes, FlameGraph};
use profiledb_storage::{now_ms, CallTree, MatchOp, Matcher, Selector, TimeRange};
use prost::Message;

use super::connect::{decode, respond, ConnectError, ConnectResult, Encoding};
use super::proto::querier::v1 as q;
use super::proto::types::v1 as t;
use super::{blocking, selector_for};
use crate::http::{tenant_of, AppRef};

/// Pyroscope's default `max_nodes` when a request leaves it unset.
pub const DEFAULT_MAX_NODES: i64 = 8192;

pub fn routes() -> Router<AppRef> {
    Router::new().route("/querier.v1.QuerierService/{method}", post(call))
}

/// The half-open engine range of a request's `[start, end]` (ms, `end` inclusive).
pub fn range_ms(start: i64, end: i64) -> ConnectResult<TimeRange> {
    let end = if end == 0 { now_ms() } else { end };
    if end < start {
        return Err(ConnectError::invalid(format!(
            "end ({end}) is before start ({start})"
        )));
    }
    Ok(TimeRange::new(start, end.saturating_add(1)))
}

pub fn max_nodes(v: Option<i64>) -> usize {
    match v {
        None | Some(0) => DEFAULT_MAX_NODES as usize,
        Some(n) if n < 0 => 0,
        Some(n) => usize::try_from(n).unwrap_or(usize::MAX),
    }
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

fn matchers_selector(matchers: &[String]) -> ConnectResult<Vec<Selector>> {
    if matchers.is_empty() {
        return Ok(vec![Selector::default()]);
    }
    matchers
        .iter()
        .map(|m| selector_for("", m).map_err(ConnectError::from))
        .collect()
}

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
    let limit = state.options.max_body_bytes;
    let store = state.store()?;
    let tenant = tenant_of(&headers)?;
    let querier = state.querier()?;
    macro_rules! req {
        ($ty:ty, $name:literal) => {
            decode::<$ty>(&headers, &body, concat!($name), limit)?
        };
    }
    fn out<T: Message>(m: &T, name: &str, enc: Encoding) -> ConnectResult<Response> {
        respond(m, name, enc)
    }
    match method.as_str() {
        "ProfileTypes" => {
            let (r, enc) = req!(q::ProfileTypesRequest, "querier.v1.ProfileTypesRequest");
            let range = if r.start == 0 && r.end == 0 {
                TimeRange::all()
            } else {
                range_ms(r.start, r.end)?
            };
            let ids = blocking(move || Ok(querier.profile_types(&tenant, range)?)).await?;
            let profile_types = ids
                .iter()
                .map(|id| {
                    let [name, st, su, pt, pu] = super::pprof::profile_type_parts(id);
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
            out(
                &q::ProfileTypesResponse { profile_types },
                "querier.v1.ProfileTypesResponse",
                enc,
            )
        }
        "LabelNames" => {
            let (r, enc) = req!(t::LabelNamesRequest, "types.v1.LabelNamesRequest");
            let range = range_ms(r.start, r.end)?;
            let sels = matchers_selector(&r.matchers)?;
            let names = blocking(move || {
                let mut set = BTreeSet::new();
                for s in &sels {
                    set.extend(querier.label_names(&tenant, s, range)?);
                }
                Ok(set.into_iter().collect())
            })
            .await?;
            out(
                &t::LabelNamesResponse { names },
                "types.v1.LabelNamesResponse",
                enc,
            )
        }
        "LabelValues" => {
            let (r, enc) = req!(t::LabelValuesRequest, "types.v1.LabelValuesRequest");
            let range = range_ms(r.start, r.end)?;
            let sels = matchers_selector(&r.matchers)?;
            let name = r.name;
            let names = blocking(move || {
                let mut set = BTreeSet::new();
                for s in &sels {
                    set.extend(querier.label_values(&tenant, &name, s, range)?);
                }
                Ok(set.into_iter().collect())
            })
            .await?;
            out(
                &t::LabelValuesResponse { names },
                "types.v1.LabelValuesResponse",
                enc,
            )
        }
        "Series" => {
            let (r, enc) = req!(q::SeriesRequest, "querier.v1.SeriesRequest");
            let range = range_ms(r.start, r.end)?;
            let sels = matchers_selector(&r.matchers)?;
            let keep = r.label_names;
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
            out(
                &q::SeriesResponse { labels_set },
                "querier.v1.SeriesResponse",
                enc,
            )
        }
        "SelectMergeStacktraces" => {
            let (r, enc) = req!(
                q::SelectMergeStacktracesRequest,
                "querier.v1.SelectMergeStacktracesRequest"
            );
            let (flamegraph, tree) = match merged_flamegraph(&state, &headers, &r).await? {
                Merge::Flame(fg) => (Some(fg_proto(fg)), Vec::new()),
                Merge::Tree(bytes) => (None, bytes),
            };
            out(
                &q::SelectMergeStacktracesResponse { flamegraph, tree },
                "querier.v1.SelectMergeStacktracesResponse",
                enc,
            )
        }
        "SelectMergeSpanProfile" => {
            let (r, enc) = req!(
                q::SelectMergeSpanProfileRequest,
                "querier.v1.SelectMergeSpanProfileRequest"
            );
            let mut sel = selector_for(&r.profile_type_id, &r.label_selector)?;
            if !r.span_selector.is_empty() {
                let alt: Vec<String> = r.span_selector.iter().map(|s| regex::escape(s)).collect();
                let m = Matcher::new("span_id", MatchOp::Re, alt.join("|"))
                    .map_err(|e| ConnectError::invalid(e.to_string()))?;
                sel = sel.with(m);
            }
            let range = range_ms(r.start, r.end)?;
            let mn = max_nodes(r.max_nodes);
            let as_tree = r.format == q::ProfileFormat::Tree as i32;
            let m = blocking(move || {
                let m = querier
                    .merge_flamegraph(&tenant, &sel, range)
                    .map_err(super::storage_error)?;
                Ok(if as_tree {
                    Merge::Tree(m.tree_bytes(mn))
                } else {
                    Merge::Flame(m.flamegraph(mn))
                })
            })
            .await?;
            let (flamegraph, tree) = match m {
                Merge::Flame(fg) => (Some(fg_proto(fg)), Vec::new()),
                Merge::Tree(bytes) => (None, bytes),
            };
            out(
                &q::SelectMergeSpanProfileResponse { flamegraph, tree },
                "querier.v1.SelectMergeSpanProfileResponse",
                enc,
            )
        }
        "SelectMergeProfile" => {
            let (r, enc) = req!(
                q::SelectMergeProfileRequest,
                "querier.v1.SelectMergeProfileRequest"
            );
            let sel = selector_for(&r.profile_type_id, &r.label_selector)?;
            let range = range_ms(r.start, r.end)?;
            let call_site: Vec<String> = r
                .stack_trace_selector
                .map(|s| s.call_site.into_iter().map(|l| l.name).collect())
                .unwrap_or_default();
            let pt = r.profile_type_id.clone();
            let prof = blocking(move || {
                let tree = querier
                    .merge_tree(&tenant, &sel, range)
                    .map_err(super::storage_error)?;
                let tree = filter_call_site(&tree, &call_site);
                Ok(super::pprof::profile_from_tree(
                    &tree,
                    &pt,
                    range.start_ms,
                    range.end_ms - range.start_ms,
                ))
            })
            .await?;
            out(&prof, "google.v1.Profile", enc)
        }
        "SelectSeries" => {
            let (r, enc) = req!(q::SelectSeriesRequest, "querier.v1.SelectSeriesRequest");
            let sel = selector_for(&r.profile_type_id, &r.label_selector)?;
            let range = range_ms(r.start, r.end)?;
            let step_ms = if r.step.is_finite() && r.step > 0.0 {
                (r.step * 1000.0).round() as i64
            } else {
                store.config().step_ms
            }
            .max(1);
            let average = r.aggregation == Some(t::TimeSeriesAggregationType::Average as i32);
            let limit = r.limit.map_or(0, |l| usize::try_from(l).unwrap_or(0));
            let group_by = r.group_by;
            let storage_step = store.config().step_ms.max(1);
            let list = blocking(move || {
                Ok(querier.time_series(&tenant, &sel, range, &group_by, step_ms, limit)?)
            })
            .await?;
            // An average spreads each bucket over the storage steps it spans.
            let per_bucket = (step_ms as f64 / storage_step as f64).max(1.0);
            let series = list
                .into_iter()
                .map(|s| t::Series {
                    labels: s
                        .labels
                        .into_iter()
                        .map(|(name, value)| t::LabelPair { name, value })
                        .collect(),
                    points: s
                        .points
                        .into_iter()
                        .map(|(ts, v)| t::Point {
                            value: if average {
                                v as f64 / per_bucket
                            } else {
                                v as f64
                            },
                            timestamp: ts,
                        })
                        .collect(),
                })
                .collect();
            out(
                &q::SelectSeriesResponse { series },
                "querier.v1.SelectSeriesResponse",
                enc,
            )
        }
        "Diff" => {
            let (r, enc) = req!(q::DiffRequest, "querier.v1.DiffRequest");
            let (Some(left), Some(right)) = (r.left, r.right) else {
                return Err(ConnectError::invalid("left and right are required"));
            };
            let ls = selector_for(&left.profile_type_id, &left.label_selector)?;
            let rs = selector_for(&right.profile_type_id, &right.label_selector)?;
            let (lr, rr) = (
                range_ms(left.start, left.end)?,
                range_ms(right.start, right.end)?,
            );
            let mn = max_nodes(left.max_nodes.or(right.max_nodes));
            let d = blocking(move || {
                let (l, r) = querier
                    .diff_sides(&tenant, (&ls, lr), (&rs, rr))
                    .map_err(super::storage_error)?;
                Ok(flamegraph_diff_merged(&l, &r, mn))
            })
            .await?;
            out(
                &q::DiffResponse {
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
                },
                "querier.v1.DiffResponse",
                enc,
            )
        }
        "GetProfileStats" => {
            let (_, enc) = req!(t::GetProfileStatsRequest, "types.v1.GetProfileStatsRequest");
            let (oldest, newest) = blocking(move || {
                let totals =
                    querier.series_totals(&tenant, &Selector::default(), TimeRange::all())?;
                let mut lo = i64::MAX;
                let mut hi = i64::MIN;
                for pts in totals.values() {
                    if let (Some((&a, _)), Some((&b, _))) =
                        (pts.first_key_value(), pts.last_key_value())
                    {
                        lo = lo.min(a);
                        hi = hi.max(b);
                    }
                }
                Ok((lo, hi))
            })
            .await?;
            let any = oldest != i64::MAX;
            out(
                &t::GetProfileStatsResponse {
                    data_ingested: any,
                    oldest_profile_time: if any { oldest } else { 0 },
                    newest_profile_time: if any { newest } else { 0 },
                },
                "types.v1.GetProfileStatsResponse",
                enc,
            )
        }
        other => Err(ConnectError::new(
            "unimplemented",
            format!("querier.v1.QuerierService/{other} is not implemented"),
        )),
    }
}

/// A merge answered in the requested `ProfileFormat`.
enum Merge {
    Flame(FlameGraph),
    /// `PROFILE_FORMAT_TREE`: Pyroscope's serialized tree.
    Tree(Vec<u8>),
}

async fn merged_flamegraph(
    state: &AppRef,
    headers: &HeaderMap,
    r: &q::SelectMergeStacktracesRequest,
) -> ConnectResult<Merge> {
    let tenant = tenant_of(headers)?;
    let querier = state.querier()?;
    let sel = selector_for(&r.profile_type_id, &r.label_selector)?;
    let range = range_ms(r.start, r.end)?;
    let mn = max_nodes(r.max_nodes);
    let call_site: Vec<String> = r
        .stack_trace_selector
        .as_ref()
        .map(|s| s.call_site.iter().map(|l| l.name.clone()).collect())
        .unwrap_or_default();
    let as_tree = r.format == q::ProfileFormat::Tree as i32;
    Ok(blocking(move || {
        if call_site.is_empty() {
            let m = querier
                .merge_flamegraph(&tenant, &sel, range)
                .map_err(super::storage_error)?;
            return Ok(if as_tree {
                Merge::Tree(m.tree_bytes(mn))
            } else {
                Merge::Flame(m.flamegraph(mn))
            });
        }
        let tree = querier
            .merge_tree(&tenant, &sel, range)
            .map_err(super::storage_error)?;
        let tree = filter_call_site(&tree, &call_site);
        Ok(if as_tree {
            Merge::Tree(tree_bytes(&tree, mn))
        } else {
            Merge::Flame(flamegraph(&tree, mn))
        })
    })
    .await?)
}
