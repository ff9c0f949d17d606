//! Which bucket segments a compactor merges: the policy, apart from the merge.
//!
//! Writers flush every few seconds, so an open hour gathers hundreds of small
//! segments per tenant. A partition is merged once it has `min_segments` of them
//! (so queries of the open hour stay fast), or as soon as it has two and has been
//! quiet for `settle_ms` (the hour is over: one segment per partition then). A
//! partition old enough for a downsampling rule is rewritten at the rule's step,
//! even when it is one segment already. The rules (windows, blocks, steps, order,
//! budget) are the merge policy's (`crate::compaction`), the same as a single
//! node's; this file gives it the bucket index's view of a segment and decides
//! when an open partition is ready.
//!
//! Once a whole block (a day by default) has been over for its delay (`BlockPolicy`), its
//! segments are merged into one block spanning the day instead: a week is then 7
//! objects to list, fetch and decode instead of 168, and the index shrinks by as
//! much. The delay lets late writes land in their hours first; a segment arriving
//! after the block was made is merged into it on a later pass.

use crate::bucket::SegmentEntry;
use crate::compaction::{Decision, Policy, SegmentView};
use crate::config::{BlockPolicy, DownsampleRule};

/// When to merge.
#[derive(Clone, Debug)]
pub struct MergePolicy {
    /// Merge an active partition once it has this many segments.
    pub min_segments: usize,
    /// A partition with no new segment for this long is merged whole.
    pub settle_ms: i64,
    /// Upper bound on the sources' bytes in one merge (the compactor's memory).
    pub max_bytes: u64,
    /// The blocks old partitions are merged into (the same policy as a single
    /// node's compaction).
    pub blocks: BlockPolicy,
}

impl Default for MergePolicy {
    fn default() -> Self {
        MergePolicy {
            min_segments: 8,
            settle_ms: 60_000,
            max_bytes: 256 << 20,
            blocks: BlockPolicy::default(),
        }
    }
}

/// One merge: segments by key, and the partition the output covers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MergePlan {
    /// Start of the output's partition.
    pub partition_ms: i64,
    /// Width of the output's partition: the sources' own, or a block's.
    pub width_ms: i64,
    /// The segments to merge, oldest first.
    pub keys: Vec<String>,
    /// The step the merged segment is written at.
    pub step_ms: i64,
}

/// The merges `policy` and the downsampling `rules` ask for among `live` at
/// `now_ms`: one per block that is due, one per partition outside those.
pub fn plan_merges(
    live: &[SegmentEntry],
    now_ms: i64,
    policy: &MergePolicy,
    rules: &[DownsampleRule],
) -> Vec<MergePlan> {
    let shared = Policy {
        blocks: policy.blocks,
        busy: &[],
        rules,
        now_ms,
        max_bytes: policy.max_bytes,
        bound_partitions: true,
    };
    let mut out = Vec::new();
    for (window, segs) in shared.windows(live) {
        // Enough segments, or none new for `settle_ms`: the hour is over.
        let newest = segs.iter().map(|e| e.created_ms).max().unwrap_or(now_ms);
        let settled = newest.saturating_add(policy.settle_ms) <= now_ms;
        let ready = segs.len() >= policy.min_segments || settled;
        if let Some(Decision::Merge(m)) = shared.decide(window, segs, ready) {
            out.push(MergePlan {
                partition_ms: m.start_ms,
                width_ms: m.width_ms,
                keys: m.sources.iter().map(|e| e.key.clone()).collect(),
                step_ms: m.step_ms,
            });
        }
    }
    out
}

/// The merge policy's view of a bucket index entry.
impl SegmentView for SegmentEntry {
    fn partition_start_ms(&self) -> i64 {
        self.partition_ms
    }
    fn width_ms(&self) -> i64 {
        self.width_ms
    }
    fn step_ms(&self) -> i64 {
        self.step_ms
    }
    fn cost(&self) -> u64 {
        self.bytes
    }
    fn cmp_age(&self, other: &Self) -> std::cmp::Ordering {
        (self.created_ms, &self.key).cmp(&(other.created_ms, &other.key))
    }
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
            seq: None,
            profile_types: vec![],
            services: vec![],
        }
    }

    fn policy() -> MergePolicy {
        MergePolicy {
            min_segments: 3,
            settle_ms: 100,
            max_bytes: 1000,
            blocks: BlockPolicy::OFF,
        }
    }

    const HOUR: i64 = 3_600_000;
    const DAY: i64 = 86_400_000;

    fn blocks() -> MergePolicy {
        MergePolicy {
            blocks: BlockPolicy {
                width_ms: DAY,
                delay_ms: 2 * HOUR,
                part_width_ms: 0,
                wide_width_ms: 0,
                wider_width_ms: 0,
            },
            ..policy()
        }
    }

    #[test]
    fn a_day_is_blocked_once_its_delay_has_passed() {
        let live = [
            seg("h0", 0, 10, 1),
            seg("h5", 5 * HOUR, 20, 1),
            seg("h1", HOUR, 30, 1),
            seg("next", DAY, DAY + 10, 1),
        ];
        // Before the delay each hour is a lone segment: nothing to do.
        assert!(plan_merges(&live, DAY + 2 * HOUR - 1, &blocks(), &[]).is_empty());
        assert_eq!(
            plan_merges(&live, DAY + 2 * HOUR, &blocks(), &[]),
            vec![MergePlan {
                partition_ms: 0,
                width_ms: DAY,
                keys: vec!["h0".into(), "h1".into(), "h5".into()],
                step_ms: 10_000,
            }]
        );
        // Without blocks the same hours stay apart.
        assert!(plan_merges(&live, 3 * DAY, &policy(), &[]).is_empty());
    }

    #[test]
    fn a_late_hour_is_merged_into_its_block_block_first() {
        let mut block = seg("block", 0, 100, 600);
        block.width_ms = DAY;
        let late = seg("late", 3 * HOUR, 200, 10);
        let plans = plan_merges(&[late.clone(), block.clone()], 2 * DAY, &blocks(), &[]);
        assert_eq!(
            plans,
            vec![MergePlan {
                partition_ms: 0,
                width_ms: DAY,
                keys: vec!["block".into(), "late".into()],
                step_ms: 10_000,
            }]
        );
        // A block alone at its step is left as it is.
        assert!(plan_merges(&[block], 2 * DAY, &blocks(), &[]).is_empty());
    }

    #[test]
    fn a_block_merge_is_bounded_by_bytes_from_the_start_of_the_day() {
        let live = [
            seg("h2", 2 * HOUR, 1, 400),
            seg("h0", 0, 3, 400),
            seg("h1", HOUR, 2, 400),
        ];
        let plans = plan_merges(&live, 2 * DAY, &blocks(), &[]);
        assert_eq!(plans.len(), 1);
        assert_eq!(plans[0].keys, vec!["h0".to_string(), "h1".to_string()]);
    }

    /// The day blocks of a week (the epoch's: days 0 to 6) become one wide block
    /// once it and the day after it are over for the delay, blocks and hours
    /// alike; the next week's day stays apart.
    #[test]
    fn the_days_of_a_week_become_one_wide_block_once_it_is_over() {
        const WEEK: i64 = 7 * DAY;
        let wide = MergePolicy {
            blocks: BlockPolicy {
                wide_width_ms: WEEK,
                ..blocks().blocks
            },
            ..policy()
        };
        let day = |key: &str, start: i64| SegmentEntry {
            width_ms: DAY,
            ..seg(key, start, 1, 1)
        };
        let live = [
            day("d1", DAY),
            day("d5", 5 * DAY),
            seg("h6", 6 * DAY + HOUR, 2, 1),
            day("next", WEEK),
        ];
        // Due once the day after the week is over for the delay too.
        let due = WEEK + DAY + 2 * HOUR;
        assert_eq!(
            plan_merges(&live, due - 1, &wide, &[]),
            Vec::new(),
            "the week is not due: day 6's lone hour stays an hour"
        );
        assert_eq!(
            plan_merges(&live, due, &wide, &[]),
            vec![MergePlan {
                partition_ms: 0,
                width_ms: WEEK,
                keys: vec!["d1".into(), "d5".into(), "h6".into()],
                step_ms: 10_000,
            }]
        );
    }

    #[test]
    fn partitions_that_do_not_tile_the_block_stay_apart() {
        let mut a = seg("a", 0, 1, 1);
        let mut b = seg("b", 7 * HOUR, 2, 1);
        a.width_ms = 7 * HOUR;
        b.width_ms = 7 * HOUR;
        assert!(plan_merges(&[a, b], 3 * DAY, &blocks(), &[]).is_empty());
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
                width_ms: 3_600_000,
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
                width_ms: 3_600_000,
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
                width_ms: 3_600_000,
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
                width_ms: 3_600_000,
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
