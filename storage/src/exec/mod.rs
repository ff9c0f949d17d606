//! Query execution over a snapshot of head partitions and segments.
//!
//! Every data source (a head partition or a loaded segment) answers the same small
//! [`Source`] interface; each query resolves matchers on the source's roaring index,
//! scans only the selected series' rows, and folds the result into a per-thread
//! accumulator. Sources are scanned in parallel on the query pool ([`par_fold`]).

mod child_map;
pub mod diff;
mod drawn;
pub mod flamegraph;
pub mod frames;
pub mod grouping;
pub mod interner;
pub mod lines;
pub mod merged;
mod node_filter;
pub(crate) mod pool;
pub mod scratch;
mod shape;
mod shares;
pub(crate) mod skeleton;
mod skeleton_shape;
pub mod timeseries;
pub mod tree;

use std::collections::{BTreeMap, BTreeSet};

use parking_lot::RwLock;
use roaring::RoaringBitmap;

use crate::dict::Dict;
use crate::error::Result;
use crate::head::HeadPartition;
use crate::index::LabelIndex;
use crate::model::Labels;
use crate::segment::{LoadedSegment, SegmentSummary, StackIndex};
use crate::selector::Selector;
use frames::{FrameTree, GidMemo};

pub use pool::{join, par_fold};
pub use scratch::Scratch;
pub(crate) use shares::{shares, Share};
pub use tree::{CallTree, TreeNode};

pub use profiledb_model::TimeRange;

/// What queries answered from labels and per-step totals alone need (label
/// discovery, series totals, time series, plans): a head partition, a decoded
/// segment, or a segment's summary (its label and totals sections only).
/// Row access is on [`Source`], which a summary does not implement, so a query
/// needing rows cannot be handed a summary and answer from nothing.
pub trait SummarySource {
    fn index(&self) -> &LabelIndex;
    fn labels(&self, series: u32) -> Option<&Labels>;
    fn partition_start(&self) -> i64;
    fn step(&self) -> i64;
    /// `f(step index, total)` for each step of `series` with data.
    fn step_totals(&self, series: u32, f: &mut dyn FnMut(u32, i64)) -> Result<()>;
    /// The id of the immutable segment behind this source, `None` for the head.
    /// Lets per-segment derived data (function indexes) be cached by id.
    fn segment_id(&self) -> Option<u64> {
        None
    }
    /// Steps in the whole partition (a range covering it selects `0..this`).
    fn partition_steps(&self) -> u32 {
        u32::MAX
    }
    /// The first and last step holding data, for immutable sources: a range
    /// holding both asks what one covering the whole partition does.
    fn data_steps(&self) -> Option<(u32, u32)> {
        None
    }
    /// Bytes the source occupies on disk (0 for the in-memory head).
    fn stored_bytes(&self) -> u64 {
        0
    }
}

/// What queries need from a head partition or a decoded segment: the summary
/// plus stacks and rows.
pub trait Source: SummarySource {
    /// The symbol tables and stack tree; a segment decodes them on first use, so
    /// code that can do without (a merge whose stack nodes are all resolved)
    /// asks for them only when it must.
    fn dict(&self) -> Result<&Dict>;
    /// Stack nodes in the tree, known without decoding it.
    fn node_count(&self) -> usize;
    /// `f(step index, stack node, value)` for each row of `series`.
    fn for_each_row(&self, series: u32, f: &mut dyn FnMut(u32, u32, i64)) -> Result<()>;
    /// The stack and value columns of `series`' rows in steps `[lo, hi)`, for
    /// sources that hold them decoded (segments); `None` means "use the callbacks".
    fn row_slices(&self, _series: u32, _lo: u32, _hi: u32) -> Result<Option<(&[u32], &[i64])>> {
        Ok(None)
    }
    /// The persistent stack node → frame-tree id memo of an immutable source.
    fn gid_memo(&self) -> Option<&GidMemo> {
        None
    }
    /// Subtree ranges and nodes by function, for sources whose stack tree is in
    /// depth-first order (segments).
    fn stack_index(&self) -> Option<&StackIndex> {
        None
    }
}

/// A decoded segment answers summary questions from the summary it holds, so the
/// two cannot answer differently.
impl SummarySource for LoadedSegment {
    fn index(&self) -> &LabelIndex {
        self.summary.index()
    }
    fn labels(&self, series: u32) -> Option<&Labels> {
        self.summary.labels(series)
    }
    fn partition_start(&self) -> i64 {
        self.summary.partition_start()
    }
    fn step(&self) -> i64 {
        self.summary.step()
    }
    fn step_totals(&self, series: u32, f: &mut dyn FnMut(u32, i64)) -> Result<()> {
        self.summary.step_totals(series, f)
    }
    fn segment_id(&self) -> Option<u64> {
        self.summary.segment_id()
    }
    fn partition_steps(&self) -> u32 {
        self.summary.partition_steps()
    }
    fn data_steps(&self) -> Option<(u32, u32)> {
        self.summary.data_steps()
    }
    fn stored_bytes(&self) -> u64 {
        self.summary.stored_bytes()
    }
}

impl Source for LoadedSegment {
    fn dict(&self) -> Result<&Dict> {
        LoadedSegment::dict(self)
    }
    fn node_count(&self) -> usize {
        LoadedSegment::node_count(self)
    }
    fn for_each_row(&self, series: u32, f: &mut dyn FnMut(u32, u32, i64)) -> Result<()> {
        LoadedSegment::for_each_row(self, series, f)
    }
    fn row_slices(&self, series: u32, lo: u32, hi: u32) -> Result<Option<(&[u32], &[i64])>> {
        LoadedSegment::row_slices(self, series, lo, hi)
    }
    fn gid_memo(&self) -> Option<&GidMemo> {
        Some(&self.gids)
    }
    fn stack_index(&self) -> Option<&StackIndex> {
        LoadedSegment::stack_index(self)
    }
}

impl SummarySource for SegmentSummary {
    fn index(&self) -> &LabelIndex {
        &self.index
    }
    fn labels(&self, series: u32) -> Option<&Labels> {
        self.series.get(series as usize)
    }
    fn partition_start(&self) -> i64 {
        self.meta.partition_start_ms
    }
    fn step(&self) -> i64 {
        self.meta.step_ms
    }
    fn step_totals(&self, series: u32, f: &mut dyn FnMut(u32, i64)) -> Result<()> {
        for &(t, v) in self.series_totals(series) {
            f(t, v);
        }
        Ok(())
    }
    fn segment_id(&self) -> Option<u64> {
        Some(self.meta.id)
    }
    fn partition_steps(&self) -> u32 {
        let n = self.meta.partition_ms / self.meta.step_ms.max(1);
        u32::try_from(n.max(0)).unwrap_or(u32::MAX)
    }
    fn data_steps(&self) -> Option<(u32, u32)> {
        let m = &self.meta;
        let step = |t: i64| u32::try_from((t - m.partition_start_ms) / m.step_ms.max(1)).ok();
        if m.rows == 0 {
            return None;
        }
        Some((step(m.min_time_ms)?, step(m.max_time_ms)?))
    }
    fn stored_bytes(&self) -> u64 {
        self.meta.size_bytes
    }
}

impl SummarySource for HeadPartition {
    fn index(&self) -> &LabelIndex {
        HeadPartition::index(self)
    }
    fn labels(&self, series: u32) -> Option<&Labels> {
        HeadPartition::labels(self, series)
    }
    fn partition_start(&self) -> i64 {
        HeadPartition::partition_start(self)
    }
    fn step(&self) -> i64 {
        HeadPartition::step(self)
    }
    fn step_totals(&self, series: u32, f: &mut dyn FnMut(u32, i64)) -> Result<()> {
        HeadPartition::step_totals(self, series, f)
    }
}

impl Source for HeadPartition {
    fn dict(&self) -> Result<&Dict> {
        Ok(HeadPartition::dict(self))
    }
    fn node_count(&self) -> usize {
        HeadPartition::dict(self).node_count()
    }
    fn for_each_row(&self, series: u32, f: &mut dyn FnMut(u32, u32, i64)) -> Result<()> {
        HeadPartition::for_each_row(self, series, f)
    }
}

pub(crate) fn steps(src: &dyn SummarySource, range: TimeRange) -> (u32, u32) {
    crate::segment::step_range(
        src.partition_start(),
        src.step(),
        range.start_ms,
        range.end_ms,
    )
}

/// Adds the selected samples of `src` to the per-thread sums by frame-tree id in
/// `scratch.gids` (see [`frames`]); the call tree is built once per query with
/// [`CallTree::from_frames`].
pub fn merge_frames(
    src: &dyn Source,
    sel: &Selector,
    range: TimeRange,
    tree: &RwLock<FrameTree>,
    scratch: &mut Scratch,
) -> Result<()> {
    let Some((series, lo, hi)) = selection(src, sel, range) else {
        return Ok(());
    };
    node_values(src, &series, lo, hi, scratch)?;
    let generation = tree.read().generation();
    let slots = src
        .gid_memo()
        .map(|m| m.slots(generation, src.node_count()));
    let r = scratch.pairs_to_frames(tree, || src.dict(), slots.as_deref());
    scratch.end_source();
    r
}

/// The series of `src` selected by `sel` and the step range `[lo, hi)` of `range`,
/// or `None` when either is empty.
pub(crate) fn selection(
    src: &dyn Source,
    sel: &Selector,
    range: TimeRange,
) -> Option<(RoaringBitmap, u32, u32)> {
    let series = src.index().select(&sel.matchers);
    let (lo, hi) = steps(src, range);
    (!series.is_empty() && lo < hi).then_some((series, lo, hi))
}

/// Sums the rows of `series` in steps `[lo, hi)` per stack node into `scratch.pairs`
/// (node order, non-zero sums only).
pub(crate) fn node_values(
    src: &dyn Source,
    series: &RoaringBitmap,
    lo: u32,
    hi: u32,
    scratch: &mut Scratch,
) -> Result<()> {
    node_values_where(src, series, lo, hi, scratch, |_| true)
}

/// [`node_values`] of the rows whose stack node `keep` accepts.
pub(crate) fn node_values_where(
    src: &dyn Source,
    series: &RoaringBitmap,
    lo: u32,
    hi: u32,
    scratch: &mut Scratch,
    keep: impl Fn(u32) -> bool,
) -> Result<()> {
    let vals = &mut scratch.values;
    vals.prepare(src.node_count());
    for sid in series.iter() {
        match src.row_slices(sid, lo, hi)? {
            Some((stacks, values)) => {
                for (&stack, &v) in stacks.iter().zip(values) {
                    if keep(stack) {
                        vals.add(stack, v);
                    }
                }
            }
            None => src.for_each_row(sid, &mut |t, stack, v| {
                if t >= lo && t < hi && keep(stack) {
                    vals.add(stack, v);
                }
            })?,
        }
    }
    vals.drain(&mut scratch.pairs);
    Ok(())
}

/// Series ids of `src` selected by `sel` that have data in `range`.
fn selected_with_data(
    src: &dyn SummarySource,
    sel: &Selector,
    range: TimeRange,
) -> Result<RoaringBitmap> {
    let mut series = src.index().select(&sel.matchers);
    let (lo, hi) = steps(src, range);
    if (lo == 0 && hi == u32::MAX) || series.is_empty() {
        return Ok(series);
    }
    let mut keep = RoaringBitmap::new();
    for sid in series.iter() {
        let mut any = false;
        src.step_totals(sid, &mut |t, _| any |= t >= lo && t < hi)?;
        if any {
            keep.insert(sid);
        }
    }
    series &= keep;
    Ok(series)
}

/// Label sets of the selected series with data in `range`.
pub fn series_into(
    src: &dyn SummarySource,
    sel: &Selector,
    range: TimeRange,
    out: &mut BTreeSet<Labels>,
) -> Result<()> {
    for sid in selected_with_data(src, sel, range)?.iter() {
        if let Some(l) = src.labels(sid) {
            out.insert(l.clone());
        }
    }
    Ok(())
}

/// Label names present on the selected series.
pub fn label_names_into(
    src: &dyn SummarySource,
    sel: &Selector,
    range: TimeRange,
    out: &mut BTreeSet<String>,
) -> Result<()> {
    let series = selected_with_data(src, sel, range)?;
    out.extend(src.index().names_in(&series));
    Ok(())
}

/// Values of `name` present on the selected series.
pub fn label_values_into(
    src: &dyn SummarySource,
    name: &str,
    sel: &Selector,
    range: TimeRange,
    out: &mut BTreeSet<String>,
) -> Result<()> {
    let series = selected_with_data(src, sel, range)?;
    out.extend(src.index().values_in(name, &series));
    Ok(())
}

/// Per-series totals per step, from the precomputed totals (no row scan).
pub fn step_totals_into(
    src: &dyn SummarySource,
    sel: &Selector,
    range: TimeRange,
    out: &mut BTreeMap<Labels, BTreeMap<i64, i64>>,
) -> Result<()> {
    let (lo, hi) = steps(src, range);
    let (p0, step) = (src.partition_start(), src.step());
    for sid in src.index().select(&sel.matchers).iter() {
        let Some(labels) = src.labels(sid) else {
            continue;
        };
        let mut points: Vec<(i64, i64)> = Vec::new();
        src.step_totals(sid, &mut |t, v| {
            if t >= lo && t < hi {
                points.push((p0 + i64::from(t) * step, v));
            }
        })?;
        if points.is_empty() {
            continue;
        }
        let entry = out.entry(labels.clone()).or_default();
        for (t, v) in points {
            *entry.entry(t).or_insert(0) += v;
        }
    }
    Ok(())
}
