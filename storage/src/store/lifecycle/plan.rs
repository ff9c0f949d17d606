//! Compaction planning: which partitions to rewrite and at which step.
//!
//! Kept apart from the merging mechanism (`crate::merger`, and `merge.rs` beside this
//! file), as tantivy keeps its merge policy apart from its merger: the plan is pure
//! arithmetic over segment metadata, so it can be read, tested and changed without
//! touching files.
//!
//! A partition is planned when it has more than one live segment, or when its output
//! step differs from its segments' (downsampling: the oldest rule whose age the
//! partition's end has passed coarsens the step).
//!
//! A partition whose block (`BlockPolicy`: a UTC day by default, a week once the
//! week and the day after it are over, four weeks once those and the week after
//! them are over) ended long enough ago is merged into that
//! block instead: the block's segment first, then its partitions oldest first, as
//! many as the compaction memory budget holds, so a day too big for one merge
//! still grows run by run. A block is not formed while a
//! head partition inside it holds unflushed data: a block's `max_lsn` covers every
//! partition in it when the WAL is replayed, and unflushed records below it would
//! be skipped.
//!
//! An open partition (still within the flush grace) is not merged whole: every early
//! flush would rewrite all of the hour again. It is merged in tiers instead
//! ([`plan_open`]): once `min` segments of one level have gathered, they become one
//! segment of the next level, so an hour of one-a-minute flushes is read as a handful
//! of segments and each sample is rewritten about log_min(flushes) times.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use crate::config::{duration_ms, BlockPolicy, DownsampleRule};
use crate::exec::TimeRange;
use crate::merger::OutputFrame;
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

    /// The `(start, width)` of the block `m` is merged into this run, if any.
    fn block_of(&self, m: &SegmentMeta) -> Option<(i64, i64)> {
        let (start, width) = self
            .blocks
            .for_max_age(self.max_age_ms.get(&m.tenant).copied())
            .block_of(m.partition_start_ms, m.partition_ms, self.now_ms)?;
        let end = start.saturating_add(width);
        let busy = self
            .busy
            .iter()
            .any(|(t, s, e)| *t == m.tenant && *s < end && start < *e);
        (!busy).then_some((start, width))
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
pub(crate) struct PlannedPartition {
    pub tenant: TenantId,
    pub frame: OutputFrame,
    pub sources: Vec<Arc<SegmentHandle>>,
}

/// The partitions to rewrite, and those that need work but cannot be merged.
#[derive(Default)]
pub(crate) struct Plan {
    pub partitions: Vec<PlannedPartition>,
    pub skipped: Vec<SkippedPartition>,
}

/// Groups `live` segments by tenant and partition and keeps the partitions whose
/// output differs from what is stored.
pub(crate) fn plan<'a>(
    live: impl Iterator<Item = &'a Arc<SegmentHandle>>,
    scope: &Scope<'_>,
    rules: &[DownsampleRule],
) -> Plan {
    let groups = by_output(live, |m| {
        let keep = scope.tenant.is_none_or(|t| *t == m.tenant)
            && scope
                .range
                .is_none_or(|r| r.overlaps(m.partition_start_ms, m.partition_end_ms()))
            && !(scope.background && scope.is_open(m));
        keep.then(|| {
            scope
                .block_of(m)
                .unwrap_or((m.partition_start_ms, m.partition_ms))
        })
    });
    let mut plan = Plan::default();
    for ((tenant, start, width), mut sources) in groups {
        let all = sources.len();
        if sources.iter().any(|h| h.meta.partition_ms != width) {
            // Forming or growing a block: the block so far first, then oldest
            // first, while the decoded estimate fits the budget.
            sources.sort_by_key(|h| {
                (
                    std::cmp::Reverse(h.meta.partition_ms),
                    h.meta.partition_start_ms,
                    h.meta.id,
                )
            });
            let mut bytes = 0u64;
            sources.retain(|h| {
                bytes = bytes.saturating_add(decoded_estimate(&h.meta));
                bytes <= scope.max_bytes
            });
        }
        let steps: Vec<i64> = sources.iter().map(|h| h.meta.step_ms).collect();
        match output_step(start + width, width, &steps, rules, scope.now_ms) {
            None => plan.skipped.push(SkippedPartition {
                tenant,
                partition_start_ms: start,
                reason: format!("segments have incompatible steps {steps:?}"),
            }),
            Some(_) if sources.is_empty() => plan.skipped.push(SkippedPartition {
                tenant,
                partition_start_ms: start,
                reason: format!(
                    "the block's first segment alone exceeds the compaction memory budget ({} bytes)",
                    scope.max_bytes
                ),
            }),
            Some(step) => {
                // Downsampling rewrites a lone segment, but only a whole group:
                // part of a block rewritten coarser would leave the rest finer.
                let coarser = steps.iter().any(|&s| s != step) && sources.len() == all;
                if sources.len() > 1 || coarser {
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

/// The step a partition's merged output is written at: a multiple of every source
/// step (so re-bucketing is exact), coarsened to the step of the oldest downsampling
/// rule whose age the partition's end has passed — when that still divides the
/// partition width. `None` if the sources' steps cannot share a step.
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn output_step_follows_rules_and_sources() {
        let rules = DownsampleRule::defaults();
        let day = 86_400_000i64;
        let now = 100 * day;
        let h = 3_600_000;
        // Recent: keep the source step.
        assert_eq!(
            output_step(now - day, h, &[10_000], &rules, now),
            Some(10_000)
        );
        // Older than 7 days: 1 minute.
        assert_eq!(
            output_step(now - 8 * day, h, &[10_000], &rules, now),
            Some(60_000)
        );
        // Older than 30 days: 1 hour.
        assert_eq!(
            output_step(now - 31 * day, h, &[10_000, 60_000], &rules, now),
            Some(h)
        );
        // A rule step that does not divide the partition is not applied; the next
        // coarsest one that does is.
        assert_eq!(
            output_step(now - 31 * day, 1_800_000, &[10_000], &rules, now),
            Some(60_000)
        );
        // Mixed source steps share their least common multiple.
        assert_eq!(
            output_step(now, h, &[10_000, 15_000], &[], now),
            Some(30_000)
        );
        assert_eq!(output_step(now, 50_000, &[20_000, 15_000], &[], now), None);
    }
}
