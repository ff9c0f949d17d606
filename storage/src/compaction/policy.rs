//! The merge policy: which segments become one, into which window, at which step.
//!
//! Kept apart from the mechanism (`merger.rs`), as tantivy keeps its merge policy
//! apart from its merger: the policy is pure arithmetic over segment metadata, so a
//! single node (`store/lifecycle/plan.rs`, over its catalog's [`SegmentMeta`]s) and a
//! cluster's compactor (`cluster/plan.rs`, over the bucket index's entries) plan with
//! the same rules, each through its own [`SegmentView`].
//!
//! The rules, in order:
//!
//! 1. **Window.** A segment goes into the block (`BlockPolicy`: a day, a week once it
//!    and the day after it are over, four weeks…) that is due for it, unless a range
//!    still being written overlaps that block; otherwise into its own partition.
//! 2. **Step.** A window's output step is a multiple of every step in it, coarsened
//!    by the oldest downsampling rule the window's end has passed when that still
//!    divides the width ([`output_step`]); steps that share none leave the window
//!    as it is.
//! 3. **Order and budget.** The window's widest segments first (a block made
//!    earlier: later arrivals merge into it), then oldest first; sources are taken
//!    while their summed cost fits the budget, so a window too big for one merge
//!    still grows run by run from its start.
//! 4. **Worth it.** Two or more sources merge; a lone segment is rewritten only to
//!    coarsen its step, and only when the whole window is taken (part of a window
//!    rewritten coarser would leave the rest finer).
//!
//! [`SegmentMeta`]: crate::segment::SegmentMeta

use std::cmp::Ordering;
use std::collections::BTreeMap;

use crate::config::{duration_ms, BlockPolicy, DownsampleRule};

/// What the policy reads of a segment; each side implements it over its own metadata.
pub(crate) trait SegmentView {
    /// Start of the segment's partition (ms since the epoch).
    fn partition_start_ms(&self) -> i64;
    /// Width of its partition: an hour, or a block's width once merged into one.
    fn width_ms(&self) -> i64;
    /// Width of one time step of its rows.
    fn step_ms(&self) -> i64;
    /// What a merge's budget counts of this segment.
    fn cost(&self) -> u64;
    /// Orders two segments of one partition and width: the older first.
    fn cmp_age(&self, other: &Self) -> Ordering;
}

/// The rules with the parameters of one planning run over one tenant's segments.
pub(crate) struct Policy<'a> {
    /// The blocks old partitions are merged into.
    pub blocks: BlockPolicy,
    /// Ranges `[start, end)` still being written: no block overlapping one is formed.
    pub busy: &'a [(i64, i64)],
    /// Downsampling rules, coarsening old windows' steps.
    pub rules: &'a [DownsampleRule],
    pub now_ms: i64,
    /// The budget of one merge, in [`SegmentView::cost`] units.
    pub max_bytes: u64,
    /// Whether the budget bounds a partition's own merge too, or only a block's
    /// (a single node's partition was one head partition in memory once; a
    /// cluster's gathers hundreds of writers' uploads).
    pub bound_partitions: bool,
}

/// One window: the `(start, width)` of the output and the segments that go into it.
pub(crate) type Windows<'s, S> = BTreeMap<(i64, i64), Vec<&'s S>>;

/// What the policy decided for one window.
#[derive(Debug)]
pub(crate) enum Decision<'s, S> {
    /// Merge `sources` (in this order) into one segment covering the window.
    Merge(Merge<'s, S>),
    /// The window needs work the policy cannot do.
    Skip {
        /// Start of the window.
        start_ms: i64,
        /// Why.
        reason: Skip,
    },
}

/// One merge the policy asks for.
#[derive(Debug)]
pub(crate) struct Merge<'s, S> {
    pub start_ms: i64,
    pub width_ms: i64,
    pub step_ms: i64,
    pub sources: Vec<&'s S>,
}

/// Why a window that needs work is left as it is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Skip {
    /// The window's steps share no step that divides its width.
    Steps(Vec<i64>),
    /// Its first source alone exceeds the budget.
    OverBudget,
}

impl<'a> Policy<'a> {
    /// Rule 1: the `(start, width)` of the window `s` goes into.
    pub fn window<S: SegmentView>(&self, s: &S) -> (i64, i64) {
        let (start, width) = (s.partition_start_ms(), s.width_ms());
        self.blocks
            .block_of(start, width, self.now_ms)
            .filter(|&(b, w)| {
                let end = b.saturating_add(w);
                !self.busy.iter().any(|&(s, e)| s < end && b < e)
            })
            .unwrap_or((start, width))
    }

    /// `segments` by their window, in window order.
    pub fn windows<'s, S: SegmentView>(
        &self,
        segments: impl IntoIterator<Item = &'s S>,
    ) -> Windows<'s, S> {
        let mut out = Windows::new();
        for s in segments {
            out.entry(self.window(s)).or_default().push(s);
        }
        out
    }

    /// Rules 2 to 4 for the window `(start, width)` holding `segments`. `ready`
    /// says whether the caller wants the window merged now (a cluster waits for
    /// enough segments or a quiet partition); a window is rewritten to coarsen its
    /// step either way.
    pub fn decide<'s, S: SegmentView>(
        &self,
        (start, width): (i64, i64),
        mut segments: Vec<&'s S>,
        ready: bool,
    ) -> Option<Decision<'s, S>> {
        let steps: Vec<i64> = segments.iter().map(|s| s.step_ms()).collect();
        let skip = |reason| {
            Some(Decision::Skip {
                start_ms: start,
                reason,
            })
        };
        let Some(step) = output_step(
            start.saturating_add(width),
            width,
            &steps,
            self.rules,
            self.now_ms,
        ) else {
            return skip(Skip::Steps(steps));
        };
        let coarser = steps.iter().any(|&s| s != step);
        if !ready && !coarser {
            return None;
        }
        segments.sort_by(|a, b| {
            b.width_ms()
                .cmp(&a.width_ms())
                .then(a.partition_start_ms().cmp(&b.partition_start_ms()))
                .then_with(|| a.cmp_age(b))
        });
        let all = segments.len();
        if self.bound_partitions || segments.iter().any(|s| s.width_ms() != width) {
            let mut cost = 0u64;
            let taken = segments
                .iter()
                .take_while(|s| {
                    cost = cost.saturating_add(s.cost());
                    cost <= self.max_bytes
                })
                .count();
            segments.truncate(taken);
        }
        if segments.is_empty() {
            return skip(Skip::OverBudget);
        }
        let whole = segments.len() == all;
        (segments.len() >= 2 || (coarser && whole)).then_some(Decision::Merge(Merge {
            start_ms: start,
            width_ms: width,
            step_ms: step,
            sources: segments,
        }))
    }
}

fn gcd(a: i64, b: i64) -> i64 {
    if b == 0 {
        a.abs()
    } else {
        gcd(b, a % b)
    }
}

fn lcm(a: i64, b: i64) -> Option<i64> {
    if a <= 0 || b <= 0 {
        return None;
    }
    (a / gcd(a, b)).checked_mul(b)
}

/// Rule 2: the step a window's merged output is written at: a multiple of every
/// source step (so re-bucketing is exact), coarsened to the step of the oldest
/// downsampling rule whose age the window's end has passed — when that still
/// divides the window's width. `None` if the sources' steps cannot share a step.
pub(crate) fn output_step(
    partition_end_ms: i64,
    partition_ms: i64,
    source_steps: &[i64],
    rules: &[DownsampleRule],
    now_ms: i64,
) -> Option<i64> {
    let mut step = 1i64;
    for &s in source_steps {
        step = lcm(step, s)?;
    }
    if partition_ms <= 0 || partition_ms % step != 0 {
        return None;
    }
    // The coarsest applicable rule whose step fits the partition.
    let mut targets: Vec<i64> = rules
        .iter()
        .filter(|r| partition_end_ms <= now_ms.saturating_sub(duration_ms(r.after)))
        .map(|r| r.step_ms)
        .collect();
    targets.sort_unstable_by(|a, b| b.cmp(a));
    for t in targets {
        if let Some(c) = lcm(step, t) {
            if partition_ms % c == 0 {
                return Some(c);
            }
        }
    }
    Some(step)
}
