//! Which bucket segments a compactor merges: the policy, apart from the merge.
//!
//! Writers flush every few seconds, so an open hour gathers hundreds of small
//! segments per tenant. A partition is merged once it has `min_segments` of them
//! (so queries of the open hour stay fast), or as soon as it has two and has been
//! quiet for `settle_ms` (the hour is over: one segment per partition then). A
//! partition old enough for a downsampling rule is rewritten at the rule's step,
//! even when it is one segment already (the same rules and step arithmetic as a
//! single node's compaction: `store/lifecycle/plan.rs`).

use std::collections::BTreeMap;

use crate::bucket::SegmentEntry;
use crate::config::DownsampleRule;
use crate::store::output_step;

/// When to merge.
#[derive(Clone, Debug)]
pub struct MergePolicy {
    /// Merge an active partition once it has this many segments.
    pub min_segments: usize,
    /// A partition with no new segment for this long is merged whole.
    pub settle_ms: i64,
    /// Upper bound on the sources' bytes in one merge (the compactor's memory).
    pub max_bytes: u64,
}

impl Default for MergePolicy {
    fn default() -> Self {
        MergePolicy {
            min_segments: 8,
            settle_ms: 60_000,
            max_bytes: 256 << 20,
        }
    }
}

/// One merge: a partition's segments, by key.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MergePlan {
    /// Start of the partition.
    pub partition_ms: i64,
    /// The segments to merge, oldest first.
    pub keys: Vec<String>,
    /// The step the merged segment is written at.
    pub step_ms: i64,
}

/// The merges `policy` and the downsampling `rules` ask for among `live` at
/// `now_ms`, one per partition.
pub fn plan_merges(
    live: &[SegmentEntry],
    now_ms: i64,
    policy: &MergePolicy,
    rules: &[DownsampleRule],
) -> Vec<MergePlan> {
    let mut by_partition: BTreeMap<i64, Vec<&SegmentEntry>> = BTreeMap::new();
    for e in live {
        by_partition.entry(e.partition_ms).or_default().push(e);
    }
    let mut plans = Vec::new();
    for (partition_ms, mut segs) in by_partition {
        let width = segs.iter().map(|e| e.width_ms).max().unwrap_or(0);
        let steps: Vec<i64> = segs.iter().map(|e| e.step_ms).collect();
        // Entries that do not say their step cannot be re-bucketed safely.
        let Some(step) = (width > 0 && steps.iter().all(|&s| s > 0))
            .then(|| output_step(partition_ms + width, width, &steps, rules, now_ms))
            .flatten()
        else {
            continue;
        };
        let coarser = steps.iter().any(|&s| s != step);
        let newest = segs.iter().map(|e| e.created_ms).max().unwrap_or(now_ms);
        let settled = newest + policy.settle_ms <= now_ms;
        let many = segs.len() >= 2 && (segs.len() >= policy.min_segments || settled);
        if !many && !coarser {
            continue;
        }
        segs.sort_by(|a, b| (a.created_ms, &a.key).cmp(&(b.created_ms, &b.key)));
        let mut bytes = 0u64;
        let keys: Vec<String> = segs
            .iter()
            .take_while(|e| {
                bytes += e.bytes;
                bytes <= policy.max_bytes
            })
            .map(|e| e.key.clone())
            .collect();
        // Downsampling rewrites even one segment; a plain merge needs two.
        if keys.len() >= 2 || (coarser && keys.len() == segs.len()) {
            plans.push(MergePlan {
                partition_ms,
                keys,
                step_ms: step,
            });
        }
    }
    plans
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seg(key: &str, partition_ms: i64, created_ms: i64, bytes: u64) -> SegmentEntry {
        SegmentEntry {
            key: key.into(),
            min_ms: partition_ms,
            max_ms: partition_ms + 10_000,
            partition_ms,
            level: 0,
            step_ms: 10_000,
            width_ms: 3_600_000,
            bytes,
            samples: 1,
            series: 1,
            created_ms,
            origin: "w".into(),
            profile_types: vec![],
            services: vec![],
        }
    }

    fn policy() -> MergePolicy {
        MergePolicy {
            min_segments: 3,
            settle_ms: 100,
            max_bytes: 1000,
        }
    }

    #[test]
    fn active_partition_waits_for_enough_segments() {
        let live = [seg("a", 0, 10, 1), seg("b", 0, 20, 1)];
        assert!(plan_merges(&live, 50, &policy(), &[]).is_empty());
        let live = [seg("a", 0, 10, 1), seg("b", 0, 20, 1), seg("c", 0, 30, 1)];
        assert_eq!(
            plan_merges(&live, 50, &policy(), &[]),
            vec![MergePlan {
                partition_ms: 0,
                keys: vec!["a".into(), "b".into(), "c".into()],
                step_ms: 10_000,
            }]
        );
    }

    #[test]
    fn settled_partition_merges_two_and_single_segment_never() {
        let live = [
            seg("b", 0, 20, 1),
            seg("a", 0, 10, 1),
            seg("x", 3_600_000, 10, 1),
        ];
        // Quiet since 20: settled at 120.
        assert!(plan_merges(&live, 119, &policy(), &[]).is_empty());
        assert_eq!(
            plan_merges(&live, 120, &policy(), &[]),
            vec![MergePlan {
                partition_ms: 0,
                keys: vec!["a".into(), "b".into()],
                step_ms: 10_000,
            }]
        );
    }

    #[test]
    fn merge_is_bounded_by_bytes_oldest_first() {
        let live = [
            seg("c", 0, 30, 400),
            seg("a", 0, 10, 400),
            seg("b", 0, 20, 400),
            seg("d", 0, 40, 400),
        ];
        assert_eq!(
            plan_merges(&live, 50, &policy(), &[]),
            vec![MergePlan {
                partition_ms: 0,
                keys: vec!["a".into(), "b".into()],
                step_ms: 10_000,
            }]
        );
    }

    #[test]
    fn old_partitions_are_rewritten_at_the_rule_step_even_alone() {
        let day = 86_400_000;
        let rules = [DownsampleRule {
            after: std::time::Duration::from_secs(7 * 86_400),
            step_ms: 60_000,
        }];
        let now = 10 * day;
        let old = [seg("a", 0, 10, 1)];
        assert_eq!(
            plan_merges(&old, now, &policy(), &rules),
            vec![MergePlan {
                partition_ms: 0,
                keys: vec!["a".into()],
                step_ms: 60_000,
            }]
        );
        // Recent: one segment stays as it is.
        let recent = [seg("b", 9 * day, 9 * day, 1)];
        assert!(plan_merges(&recent, now, &policy(), &rules).is_empty());
        // Already at the rule's step: nothing to do.
        let mut done = seg("c", 0, 10, 1);
        done.step_ms = 60_000;
        assert!(plan_merges(&[done], now, &policy(), &rules).is_empty());
    }
}
