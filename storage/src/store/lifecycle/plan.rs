//! Compaction planning on a single node: which partitions to rewrite and at which step.
//!
//! The rules (windows, blocks, steps, order, budget) are the merge policy's
//! (`crate::compaction`), which a cluster's compactor plans with too; this file gives
//! the policy a single node's view: its catalog's segment metadata, the tenants'
//! block policies, and the head partitions no block may overlap while they hold
//! unflushed data (a block's `max_lsn` covers every partition in it when the WAL is
//! replayed, and unflushed records below it would be skipped).
//!
//! A partition's merge is bounded by the compaction memory budget only when it forms
//! or grows a block; its own partition is one head partition's data.
//!
//! An open partition (still within the flush grace) is not merged whole: every early
//! flush would rewrite all of the hour again. It is merged in tiers instead
//! ([`plan_open`]): once `min` segments of one level have gathered, they become one
//! segment of the next level, so an hour of one-a-minute flushes is read as a handful
//! of segments and each sample is rewritten about log_min(flushes) times.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use crate::compaction::OutputFrame;
use crate::compaction::{Decision, Policy, SegmentView, Skip};
use crate::config::{BlockPolicy, DownsampleRule};
use crate::exec::TimeRange;
use crate::model::TenantId;
use crate::segment::SegmentMeta;
use crate::store::state::SegmentHandle;

use super::report::SkippedPartition;

/// Which live segments a run considers.
pub(crate) struct Scope<'a> {
    pub tenant: Option<&'a TenantId>,
    pub range: Option<TimeRange>,
    /// Background runs leave partitions younger than the flush grace alone: late
    /// writes may still flush segments into them.
    pub background: bool,
    pub grace_ms: i64,
    pub now_ms: i64,
    pub blocks: BlockPolicy,
    /// Tenants with a maximum age, which decides whether they get wide blocks
    /// ([`BlockPolicy::for_max_age`]).
    pub max_age_ms: HashMap<TenantId, i64>,
    /// Head partitions (open or being flushed) as (tenant, start, end): no block
    /// that overlaps one is formed.
    pub busy: Vec<(TenantId, i64, i64)>,
    /// The compaction memory budget: a block merge takes sources while their
    /// estimated decoded size fits it.
    pub max_bytes: u64,
}

impl Scope<'_> {
    /// The partition may still take flushes: its end is within the grace.
    fn is_open(&self, m: &SegmentMeta) -> bool {
        m.partition_end_ms().saturating_add(self.grace_ms) > self.now_ms
    }
}

/// A single node's segment as the planner holds it: a live handle, or (in tests)
/// its metadata alone.
pub(crate) trait HasMeta: Clone {
    fn meta(&self) -> &SegmentMeta;
}

impl HasMeta for Arc<SegmentHandle> {
    fn meta(&self) -> &SegmentMeta {
        &self.meta
    }
}

impl HasMeta for SegmentMeta {
    fn meta(&self) -> &SegmentMeta {
        self
    }
}

/// The merge policy's view of a single node's segment.
impl<H: HasMeta> SegmentView for H {
    fn partition_start_ms(&self) -> i64 {
        self.meta().partition_start_ms
    }
    fn width_ms(&self) -> i64 {
        self.meta().partition_ms
    }
    fn step_ms(&self) -> i64 {
        self.meta().step_ms
    }
    fn cost(&self) -> u64 {
        decoded_estimate(self.meta())
    }
    fn cmp_age(&self, other: &Self) -> std::cmp::Ordering {
        self.meta().id.cmp(&other.meta().id)
    }
}

/// Live segments by the (tenant, start, width) of the output they go into.
type ByOutput = BTreeMap<(TenantId, i64, i64), Vec<Arc<SegmentHandle>>>;

fn by_output<'a>(
    live: impl Iterator<Item = &'a Arc<SegmentHandle>>,
    output: impl Fn(&SegmentMeta) -> Option<(i64, i64)>,
) -> ByOutput {
    let mut groups = ByOutput::new();
    for h in live {
        let m = &h.meta;
        if let Some((start, width)) = output(m) {
            groups
                .entry((m.tenant.clone(), start, width))
                .or_default()
                .push(h.clone());
        }
    }
    groups
}

/// One merge: the live segments, and the frame of the output (the sources' own
/// partition, or their block) at its step.
pub(crate) struct PlannedPartition<H = Arc<SegmentHandle>> {
    pub tenant: TenantId,
    pub frame: OutputFrame,
    pub sources: Vec<H>,
}

/// The partitions to rewrite, and those that need work but cannot be merged.
pub(crate) struct Plan<H = Arc<SegmentHandle>> {
    pub partitions: Vec<PlannedPartition<H>>,
    pub skipped: Vec<SkippedPartition>,
}

impl<H> Default for Plan<H> {
    fn default() -> Self {
        Plan {
            partitions: Vec::new(),
            skipped: Vec::new(),
        }
    }
}

/// The merges the policy asks for among the `live` segments in `scope`, tenant by
/// tenant, and the windows it had to skip.
pub(crate) fn plan<'a, H: HasMeta + 'a>(
    live: impl Iterator<Item = &'a H>,
    scope: &Scope<'_>,
    rules: &[DownsampleRule],
) -> Plan<H> {
    let mut tenants: BTreeMap<&TenantId, Vec<&H>> = BTreeMap::new();
    for h in live {
        let m = h.meta();
        let keep = scope.tenant.is_none_or(|t| *t == m.tenant)
            && scope
                .range
                .is_none_or(|r| r.overlaps(m.partition_start_ms, m.partition_end_ms()))
            && !(scope.background && scope.is_open(m));
        if keep {
            tenants.entry(&m.tenant).or_default().push(h);
        }
    }
    let mut plan = Plan::default();
    for (tenant, segments) in tenants {
        let busy: Vec<(i64, i64)> = (scope.busy.iter())
            .filter(|(t, _, _)| t == tenant)
            .map(|&(_, s, e)| (s, e))
            .collect();
        let policy = Policy {
            blocks: (scope.blocks).for_max_age(scope.max_age_ms.get(tenant).copied()),
            busy: &busy,
            rules,
            now_ms: scope.now_ms,
            max_bytes: scope.max_bytes,
            bound_partitions: false,
        };
        for (window, segments) in policy.windows(segments) {
            match policy.decide(window, segments, true) {
                None => {}
                Some(Decision::Merge(m)) => plan.partitions.push(PlannedPartition {
                    tenant: tenant.clone(),
                    frame: OutputFrame {
                        start_ms: m.start_ms,
                        width_ms: m.width_ms,
                        step_ms: m.step_ms,
                    },
                    sources: m.sources.into_iter().cloned().collect(),
                }),
                Some(Decision::Skip { start_ms, reason }) => {
                    plan.skipped.push(SkippedPartition {
                        tenant: tenant.clone(),
                        partition_start_ms: start_ms,
                        reason: match reason {
                            Skip::Steps(steps) => {
                                format!("segments have incompatible steps {steps:?}")
                            }
                            Skip::OverBudget => format!(
                                "the block's first segment alone exceeds the compaction memory budget ({} bytes)",
                                scope.max_bytes
                            ),
                        },
                    })
                }
            }
        }
    }
    plan
}

/// Estimated memory of decoding a segment for a merge: 16 bytes a row (the decoded
/// columns) plus its file's bytes (a lower bound for its dictionaries).
fn decoded_estimate(m: &SegmentMeta) -> u64 {
    m.rows.saturating_mul(16).saturating_add(m.size_bytes)
}

/// Tier merges for the open partitions of `live` (those a background run leaves to
/// the flush grace): per tenant and partition, the segments of the lowest level that
/// has at least `min` of them, to be merged at their own step. Nothing when `min < 2`.
///
/// A tier whose estimated decoded size passes `max_bytes` is left for the
/// whole-partition merge after the grace: segments that big come from data that does
/// not repeat (unique stacks), which merging does not shrink, and decoding them
/// while the head is full would add their size to the peak memory.
pub(crate) fn plan_open<'a>(
    live: impl Iterator<Item = &'a Arc<SegmentHandle>>,
    scope: &Scope<'_>,
    min: usize,
    max_bytes: u64,
) -> Plan {
    let mut plan = Plan::default();
    if min < 2 {
        return plan;
    }
    let groups = by_output(live, |m| {
        (scope.is_open(m) && scope.tenant.is_none_or(|t| *t == m.tenant))
            .then_some((m.partition_start_ms, m.partition_ms))
    });
    for ((tenant, start, width), segments) in groups {
        let mut levels: BTreeMap<u32, Vec<Arc<SegmentHandle>>> = BTreeMap::new();
        for h in segments {
            levels.entry(h.meta.level).or_default().push(h);
        }
        let Some(mut sources) = levels.into_values().find(|v| v.len() >= min) else {
            continue;
        };
        let estimate = sources
            .iter()
            .fold(0u64, |a, h| a.saturating_add(decoded_estimate(&h.meta)));
        if estimate > max_bytes {
            continue;
        }
        // Oldest first, so the output's rows keep their flush order.
        sources.sort_by_key(|h| h.meta.id);
        let step = sources[0].meta.step_ms;
        if sources.iter().any(|h| h.meta.step_ms != step) {
            // The head writes one step; mixed steps wait for the whole-partition merge.
            continue;
        }
        plan.partitions.push(PlannedPartition {
            tenant,
            frame: OutputFrame {
                start_ms: start,
                width_ms: width,
                step_ms: step,
            },
            sources,
        });
    }
    plan
}
