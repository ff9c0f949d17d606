//! The single node's planner and the cluster's plan the same merges for the same
//! segments, and both follow the rules as written out here, independently of
//! `policy.rs`: windows by hand (a UTC day once it is over for the delay), steps as
//! least common multiples, sources taken oldest first under the budget.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::time::Duration;

use proptest::prelude::*;

use super::policy::output_step;
use crate::bucket::SegmentEntry;
use crate::cluster::{plan_merges, MergePlan, MergePolicy};
use crate::config::{BlockPolicy, DownsampleRule};
use crate::model::TenantId;
use crate::segment::SegmentMeta;
use crate::store::{plan_compaction, CompactionScope};

const HOUR: i64 = 3_600_000;
const DAY: i64 = 24 * HOUR;
const DELAY: i64 = 2 * HOUR;

/// A generated segment: what both sides' metadata say of it.
#[derive(Clone, Debug, PartialEq)]
struct Seg {
    id: u64,
    start: i64,
    width: i64,
    step: i64,
    created: i64,
    cost: u64,
}

fn meta(s: &Seg) -> SegmentMeta {
    SegmentMeta {
        id: s.id,
        tenant: TenantId::default(),
        partition_start_ms: s.start,
        partition_ms: s.width,
        step_ms: s.step,
        min_time_ms: s.start,
        max_time_ms: s.start,
        level: 0,
        max_lsn: 0,
        series: 1,
        // The single node's cost is 16 bytes a row plus the file's bytes.
        rows: 0,
        value_total: 0,
        created_ms: s.created,
        sources: Vec::new(),
        file: String::new(),
        size_bytes: s.cost,
        checksum: 0,
        base: None,
    }
}

fn entry(s: &Seg) -> SegmentEntry {
    SegmentEntry {
        key: key(s.id),
        min_ms: s.start,
        max_ms: s.start,
        partition_ms: s.start,
        level: 0,
        step_ms: s.step,
        width_ms: s.width,
        bytes: s.cost,
        samples: 1,
        series: 1,
        created_ms: s.created,
        origin: "w".into(),
        seq: None,
        profile_types: Vec::new(),
        services: Vec::new(),
    }
}

/// Keys sort like ids (created times follow ids in the generator too), so both
/// sides' "oldest first" agree.
fn key(id: u64) -> String {
    format!("s{id:04}")
}

fn day_blocks() -> BlockPolicy {
    BlockPolicy {
        width_ms: DAY,
        delay_ms: DELAY,
        part_width_ms: 0,
        wide_width_ms: 0,
        wider_width_ms: 0,
    }
}

/// The single node's plan and the cluster's (every window ready: the single node
/// merges whenever asked), each as (start, width, step, keys).
fn plans(
    segs: &[Seg],
    now: i64,
    blocks: BlockPolicy,
    rules: &[DownsampleRule],
    max: u64,
) -> [Vec<MergePlan>; 2] {
    let metas: Vec<SegmentMeta> = segs.iter().map(meta).collect();
    let scope = CompactionScope {
        tenant: None,
        range: None,
        background: false,
        grace_ms: 0,
        now_ms: now,
        blocks,
        max_age_ms: HashMap::new(),
        busy: Vec::new(),
        max_bytes: max,
    };
    let node = plan_compaction(metas.iter(), &scope, rules)
        .partitions
        .into_iter()
        .map(|p| MergePlan {
            partition_ms: p.frame.start_ms,
            width_ms: p.frame.width_ms,
            keys: p.sources.iter().map(|m| key(m.id)).collect(),
            step_ms: p.frame.step_ms,
        })
        .collect();
    let live: Vec<SegmentEntry> = segs.iter().map(entry).collect();
    let policy = MergePolicy {
        min_segments: 1,
        settle_ms: 0,
        max_bytes: max,
        blocks,
    };
    [node, plan_merges(&live, now, &policy, rules)]
}

/// The oracle's window: the UTC day holding the partition once the day is over
/// for the delay (and the partition tiles it), else the partition itself.
fn window(s: &Seg, now: i64, blocks: bool) -> (i64, i64) {
    let day = s.start.div_euclid(DAY) * DAY;
    let tiles = s.width > 0 && DAY % s.width == 0 && s.start + s.width <= day + DAY;
    if blocks && tiles && day + DAY + DELAY <= now {
        (day, DAY)
    } else {
        (s.start, s.width)
    }
}

fn lcm(a: i64, b: i64) -> i64 {
    let (mut x, mut y) = (a, b);
    while y != 0 {
        (x, y) = (y, x % y);
    }
    a / x * b
}

fn seg(id: u64, start: i64, width: i64, step: i64, cost: u64) -> Seg {
    Seg {
        id,
        start,
        width,
        step,
        created: id as i64,
        cost,
    }
}

fn plan(start: i64, width: i64, step: i64, ids: &[u64]) -> MergePlan {
    MergePlan {
        partition_ms: start,
        width_ms: width,
        keys: ids.iter().map(|&i| key(i)).collect(),
        step_ms: step,
    }
}

/// A hand-computed case: day 0 is over and becomes a block (its earlier block
/// first, then its hours oldest first); day 1 is not over for the delay, so its
/// hours merge as partitions; a lone hour is rewritten only to coarsen its step;
/// steps 7 s and 10 s share none dividing an hour.
#[test]
fn both_plan_the_hand_computed_merges() {
    let segs = [
        seg(1, 3 * HOUR, HOUR, 10_000, 10),
        seg(2, 0, DAY, 10_000, 10),
        seg(3, HOUR, HOUR, 15_000, 10),
        seg(4, DAY + HOUR, HOUR, 10_000, 10),
        seg(5, DAY + HOUR, HOUR, 10_000, 10),
        seg(6, DAY + 2 * HOUR, HOUR, 10_000, 10),
        seg(7, DAY + 3 * HOUR, HOUR, 7_000, 10),
        seg(8, DAY + 3 * HOUR, HOUR, 10_000, 10),
    ];
    let now = 2 * DAY + DELAY - 1;
    let rules = [DownsampleRule {
        after: Duration::from_secs(2 * 86_400),
        step_ms: 60_000,
    }];
    let want = vec![
        // The rule is judged at the window's end: day 0's is not 2 days old yet.
        plan(0, DAY, 30_000, &[2, 3, 1]),
        plan(DAY + HOUR, HOUR, 10_000, &[4, 5]),
    ];
    assert_eq!(
        plans(&segs, now, day_blocks(), &rules, u64::MAX),
        [want.clone(), want]
    );
    // A budget of two segments' cost cuts the block after the earlier block and
    // one hour, oldest first, on both sides.
    let want = vec![
        plan(0, DAY, 30_000, &[2, 3]),
        plan(DAY + HOUR, HOUR, 10_000, &[4, 5]),
    ];
    assert_eq!(
        plans(&segs, now, day_blocks(), &rules, 20),
        [want.clone(), want]
    );
    // Days later the rule applies to day 0's block; day 1's window holds the
    // 7 s hour, whose step shares none with 10 s that divides a day: left alone.
    let later = 5 * DAY;
    let want = vec![plan(0, DAY, 60_000, &[2, 3, 1])];
    assert_eq!(
        plans(&segs, later, day_blocks(), &rules, u64::MAX),
        [want.clone(), want]
    );
    // Without blocks, every partition on its own: the day block alone is
    // coarsened, the hours alone too, the 7 s hour skipped.
    let want = vec![
        plan(0, DAY, 60_000, &[2]),
        plan(HOUR, HOUR, 60_000, &[3]),
        plan(3 * HOUR, HOUR, 60_000, &[1]),
        plan(DAY + HOUR, HOUR, 60_000, &[4, 5]),
        plan(DAY + 2 * HOUR, HOUR, 60_000, &[6]),
    ];
    assert_eq!(
        plans(&segs, later, BlockPolicy::OFF, &rules, u64::MAX),
        [want.clone(), want]
    );
}

fn segments() -> impl Strategy<Value = Vec<Seg>> {
    let one = (
        prop_oneof![
            6 => (0i64..96).prop_map(|h| (h * HOUR, HOUR)),
            1 => (0i64..4).prop_map(|d| (d * DAY, DAY)),
            1 => (0i64..13).prop_map(|p| (p * 7 * HOUR, 7 * HOUR)),
        ],
        prop::sample::select(vec![10_000i64, 10_000, 15_000, 60_000, 7_000]),
        0u64..100,
    );
    prop::collection::vec(one, 0..40).prop_map(|v| {
        v.into_iter()
            .enumerate()
            .map(|(i, ((start, width), step, cost))| seg(i as u64 + 1, start, width, step, cost))
            .collect()
    })
}

/// The rules every plan keeps, whichever side made it.
fn check_rules(
    segs: &[Seg],
    plans: &[MergePlan],
    now: i64,
    blocks: bool,
    max: u64,
) -> Result<(), TestCaseError> {
    let by_key: HashMap<String, &Seg> = segs.iter().map(|s| (key(s.id), s)).collect();
    let mut windows: BTreeMap<(i64, i64), Vec<&Seg>> = BTreeMap::new();
    for s in segs {
        windows.entry(window(s, now, blocks)).or_default().push(s);
    }
    let mut seen = HashSet::new();
    for p in plans {
        let w = (p.partition_ms, p.width_ms);
        let Some(all) = windows.get(&w) else {
            return Err(TestCaseError::fail(format!("{w:?} is no window")));
        };
        let sources: Vec<&Seg> = p.keys.iter().map(|k| by_key[k]).collect();
        prop_assert!(!sources.is_empty());
        for s in &sources {
            prop_assert!(seen.insert(s.id), "{} in two merges", s.id);
            prop_assert_eq!(window(s, now, blocks), w, "{} outside its window", s.id);
            prop_assert_eq!(p.step_ms % s.step, 0);
        }
        prop_assert_eq!(p.width_ms % p.step_ms, 0);
        // Widest first, then oldest first.
        let order: Vec<(i64, i64, u64)> =
            sources.iter().map(|s| (-s.width, s.start, s.id)).collect();
        prop_assert!(order.windows(2).all(|o| o[0] < o[1]), "order {order:?}");
        // Taken from the start of that order while the budget holds.
        let mut sorted = all.clone();
        sorted.sort_by_key(|s| (-s.width, s.start, s.id));
        prop_assert_eq!(&sorted[..sources.len()], &sources[..]);
        let cost: u64 = sources.iter().map(|s| s.cost).sum();
        if sources.len() < all.len() {
            prop_assert!(cost <= max);
            prop_assert!(cost + sorted[sources.len()].cost > max);
        } else if max == u64::MAX {
            // Unbounded: the step is the sources' lcm, coarsened by a rule due.
            let lcm_all = all.iter().fold(1, |a, s| lcm(a, s.step));
            prop_assert_eq!(p.step_ms % lcm_all, 0);
        }
    }
    // Unbounded, every window with two segments whose steps share one that
    // divides it is merged whole.
    if max == u64::MAX {
        for (w, all) in &windows {
            let lcm_all = all.iter().fold(1, |a, s| lcm(a, s.step));
            if all.len() >= 2 && w.1 % lcm_all == 0 {
                let planned = plans.iter().find(|p| (p.partition_ms, p.width_ms) == *w);
                prop_assert!(
                    planned.is_some_and(|p| p.keys.len() == all.len()),
                    "{w:?} not merged whole"
                );
            }
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn both_plan_the_same_merges_by_the_rules(
        segs in segments(),
        now in DAY..6 * DAY,
        blocks in any::<bool>(),
        rule in any::<bool>(),
        budget in prop_oneof![Just(u64::MAX), 0u64..400],
    ) {
        let rules: Vec<DownsampleRule> = if rule {
            vec![DownsampleRule { after: Duration::from_secs(2 * 86_400), step_ms: 60_000 }]
        } else {
            Vec::new()
        };
        let policy = if blocks { day_blocks() } else { BlockPolicy::OFF };
        let [n, c] = plans(&segs, now, policy, &rules, budget);
        check_rules(&segs, &n, now, blocks, budget)?;
        check_rules(&segs, &c, now, blocks, budget)?;
        if budget == u64::MAX {
            prop_assert_eq!(n, c);
        } else {
            // The budget bounds a partition's own merge only in a cluster: the
            // windows forming a block (segments of another width) agree.
            let forming = |p: &&MergePlan| {
                segs.iter().any(|s| window(s, now, blocks) == (p.partition_ms, p.width_ms) && s.width != p.width_ms)
            };
            let n: Vec<&MergePlan> = n.iter().filter(forming).collect();
            let c: Vec<&MergePlan> = c.iter().filter(forming).collect();
            prop_assert_eq!(n, c);
        }
    }
}

#[test]
fn output_step_follows_rules_and_sources() {
    let rules = DownsampleRule::defaults();
    let now = 100 * DAY;
    let h = HOUR;
    // Recent: keep the source step.
    assert_eq!(
        output_step(now - DAY, h, &[10_000], &rules, now),
        Some(10_000)
    );
    // Older than 7 days: 1 minute.
    assert_eq!(
        output_step(now - 8 * DAY, h, &[10_000], &rules, now),
        Some(60_000)
    );
    // Older than 30 days: 1 hour.
    assert_eq!(
        output_step(now - 31 * DAY, h, &[10_000, 60_000], &rules, now),
        Some(h)
    );
    // A rule step that does not divide the partition is not applied; the next
    // coarsest one that does is.
    assert_eq!(
        output_step(now - 31 * DAY, 1_800_000, &[10_000], &rules, now),
        Some(60_000)
    );
    // Mixed source steps share their least common multiple.
    assert_eq!(
        output_step(now, h, &[10_000, 15_000], &[], now),
        Some(30_000)
    );
    assert_eq!(output_step(now, 50_000, &[20_000, 15_000], &[], now), None);
}
