//! The merge behind every Connect merge method: what it selects ([`What`]: a
//! selection over a window, optionally only the stacks under a call site, only the
//! spans named, only the individual profiles named by id) and the form it answers in
//! ([`Format`]: flame graph, Pyroscope's serialized tree, a Graphviz call graph or
//! pprof).

use profiledb_storage::{flamegraph, tree_bytes, CallTree, FlameGraph, MatchOp, Matcher};
use profiledb_storage::{Querier, TenantId, TimeRange};

use super::connect::{ConnectError, ConnectResult, Ctx};
use super::dot::{dot, DEFAULT_DOT_NODES};
use super::individual::merge_profiles;
use super::proto::pprof::Profile;
use super::proto::querier::v1 as q;
use super::querier::filter_call_site;
use crate::error::ApiResult;
use crate::http::request::{blocking, pyroscope_max_nodes, Selection};

/// What a merge selects.
pub struct What {
    pub selection: Selection,
    pub range: TimeRange,
    /// Root-first frame names the stacks must start with (empty: all stacks).
    pub call_site: Vec<String>,
    /// Individual profile ids (empty: every profile of the selection).
    pub profile_ids: Vec<String>,
}

impl What {
    /// Restricts the selection to the series of the named spans (our decoders keep a
    /// pprof sample's `span_id` as a series label).
    pub fn spans(mut self, spans: &[String]) -> ConnectResult<Self> {
        if !spans.is_empty() {
            let alt: Vec<String> = spans.iter().map(|s| regex::escape(s)).collect();
            let m = Matcher::new("span_id", MatchOp::Re, alt.join("|"))
                .map_err(|e| ConnectError::invalid(e.to_string()))?;
            self.selection.selector = self.selection.selector.with(m);
        }
        Ok(self)
    }

    /// The merged call tree.
    pub fn tree(&self, querier: &Querier, tenant: &TenantId) -> ApiResult<CallTree> {
        let sel = &self.selection.selector;
        let tree = if self.profile_ids.is_empty() {
            querier.merge_tree(tenant, sel, self.range)?
        } else {
            merge_profiles(querier, tenant, sel, &self.profile_ids)?
        };
        Ok(filter_call_site(&tree, &self.call_site))
    }

    /// `tree` as a pprof profile covering the window.
    pub fn pprof(&self, tree: &CallTree) -> Profile {
        super::pprof::profile_from_tree(
            tree,
            self.selection.profile_type.as_str(),
            self.range.start_ms,
            self.range.end_ms - self.range.start_ms,
        )
    }
}

/// Trace ids are not kept (a span's samples carry its span id only), so a trace
/// selector cannot be honoured: refusing it beats answering the whole selection.
pub fn refuse_trace_ids(ids: &[String]) -> ConnectResult<()> {
    if ids.is_empty() {
        return Ok(());
    }
    Err(ConnectError::new(
        "unimplemented",
        "trace_id_selector: trace ids are not stored; select spans with span_selector",
    ))
}

/// The answer forms of `ProfileFormat`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    Flame,
    Tree,
    Dot,
    Pprof,
}

impl Format {
    pub fn of(v: i32) -> ConnectResult<Format> {
        match q::ProfileFormat::try_from(v) {
            Ok(q::ProfileFormat::Unspecified | q::ProfileFormat::Flamegraph) => Ok(Format::Flame),
            Ok(q::ProfileFormat::Tree) => Ok(Format::Tree),
            Ok(q::ProfileFormat::Dot) => Ok(Format::Dot),
            Ok(q::ProfileFormat::Pprof) => Ok(Format::Pprof),
            Err(_) => Err(ConnectError::invalid(format!(
                "unknown format {v}: PROFILE_FORMAT_FLAMEGRAPH, _TREE, _DOT or _PPROF"
            ))),
        }
    }
}

/// A merge in its requested form.
pub enum MergeAnswer {
    Flame(FlameGraph),
    /// Pyroscope's serialized tree.
    Tree(Vec<u8>),
    Dot(String),
    Pprof(Profile),
}

impl MergeAnswer {
    pub fn into_response(self) -> q::SelectMergeStacktracesResponse {
        let mut r = q::SelectMergeStacktracesResponse::default();
        match self {
            MergeAnswer::Flame(fg) => r.flamegraph = Some(super::querier::fg_proto(fg)),
            MergeAnswer::Tree(bytes) => r.tree = bytes,
            MergeAnswer::Dot(text) => r.dot = text,
            MergeAnswer::Pprof(profile) => {
                r.pprof = Some(q::PprofProfile {
                    profile: Some(profile),
                })
            }
        }
        r
    }
}

/// Runs the merge. A plain selection stays in frame-tree space (no call tree is
/// built); a call site, profile ids, DOT or pprof go through the call tree.
/// `requested_nodes` is the request's `max_nodes`: for DOT it counts functions
/// (default [`DEFAULT_DOT_NODES`]), otherwise flame graph nodes.
pub async fn merge(
    ctx: Ctx,
    what: What,
    requested_nodes: Option<i64>,
    format: Format,
) -> ConnectResult<MergeAnswer> {
    let (querier, tenant) = (ctx.state.querier()?, ctx.tenant);
    let mn = pyroscope_max_nodes(requested_nodes)?;
    Ok(blocking(move || {
        let plain = what.call_site.is_empty() && what.profile_ids.is_empty();
        if plain && matches!(format, Format::Flame | Format::Tree) {
            let sel = &what.selection.selector;
            let m = querier.merge_flamegraph(&tenant, sel, what.range)?;
            return Ok(if format == Format::Tree {
                MergeAnswer::Tree(m.tree_bytes(mn))
            } else {
                MergeAnswer::Flame(m.flamegraph(mn))
            });
        }
        let tree = what.tree(&querier, &tenant)?;
        Ok(match format {
            Format::Flame => MergeAnswer::Flame(flamegraph(&tree, mn)),
            Format::Tree => MergeAnswer::Tree(tree_bytes(&tree, mn)),
            Format::Pprof => MergeAnswer::Pprof(what.pprof(&tree)),
            Format::Dot => {
                let functions = match requested_nodes {
                    Some(n) if n > 0 => usize::try_from(n).unwrap_or(usize::MAX),
                    _ => DEFAULT_DOT_NODES,
                };
                let pt = &what.selection.profile_type;
                let [_, _, unit, _, _] = pt.parts();
                MergeAnswer::Dot(dot(&tree, pt.as_str(), unit, functions))
            }
        })
    })
    .await?)
}
