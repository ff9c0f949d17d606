//! Which parts of one segment's share of a query can come from the result cache.
//!
//! A segment's share of a merge or group-by is cached when the query covers its
//! whole partition: every such query asks the same share. A sliding window cuts
//! into its oldest segment, and a diff's midpoint into another; those shares change
//! with every query. Computed from rows, they cost up to an hour of rows for an hour
//! segment and a whole day for a day block, on every refresh. So the part of a
//! partition a range covers is split on a fixed grid: each whole hour of a block is
//! a share of its own, cached like a segment's; what is left at either end (or the
//! part of an hour segment a range covers) is split into whole ten-minute chunks,
//! cached too; only the ragged ends (less than ten minutes each) are computed from
//! rows. A window sliding over the data, or a diff halving an hour, then reads at
//! most twenty minutes of rows per query, and adds a cache entry per ten minutes of
//! data, not per refresh.

use super::{steps, Source, TimeRange};

/// Widths of the cached pieces of a partition that a range cuts into, coarse to
/// fine: a coarser chunk is used wherever it fits, so a long range is few shares.
pub(crate) const CHUNKS_MS: [i64; 2] = [3_600_000, 600_000];

/// Steps `[lo, hi)` of one segment: the cache key part of a share.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) struct Share {
    pub segment: u64,
    pub lo: u32,
    pub hi: u32,
}

/// How a query reads one source: cacheable shares, each with the range that
/// selects exactly its steps, and ranges to compute.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct Shares {
    pub cached: Vec<(Share, TimeRange)>,
    pub fresh: Vec<TimeRange>,
}

/// The shares of `src` in a query over `range`.
pub(crate) fn shares(src: &dyn Source, range: TimeRange) -> Shares {
    let Some(segment) = src.segment_id() else {
        return Shares {
            cached: Vec::new(),
            fresh: vec![range],
        };
    };
    let (lo, hi) = whole_if_all_data(steps(src, range), src.data_steps());
    let layout = Layout {
        start_ms: src.partition_start(),
        step_ms: src.step(),
        steps: src.partition_steps(),
    };
    layout.split(segment, range, lo, hi)
}

/// Steps `(lo, hi)` of a range, or the whole partition's when they hold every
/// step with data (`data`: the first and last): the answer is the same, and the
/// whole share is one cached piece where the cut range would be one per hour.
/// A 30-day window starting where a 4-week block's data does reads the block as
/// one share, not some 500 hours.
fn whole_if_all_data((lo, hi): (u32, u32), data: Option<(u32, u32)>) -> (u32, u32) {
    match data {
        Some((first, last)) if lo <= first && hi > last => (0, u32::MAX),
        _ => (lo, hi),
    }
}

/// A partition's time grid.
#[derive(Clone, Copy, Debug)]
struct Layout {
    start_ms: i64,
    step_ms: i64,
    steps: u32,
}

impl Layout {
    /// The range selecting exactly steps `[lo, hi)`.
    fn range(&self, lo: u32, hi: u32) -> TimeRange {
        TimeRange::new(
            self.start_ms + i64::from(lo) * self.step_ms,
            self.start_ms + i64::from(hi) * self.step_ms,
        )
    }

    /// Splits the steps `[lo, hi)` that `range` selects.
    fn split(&self, segment: u64, range: TimeRange, lo: u32, hi: u32) -> Shares {
        let whole = Share {
            segment,
            lo: 0,
            hi: self.steps,
        };
        if lo == 0 && hi >= self.steps {
            return Shares {
                cached: vec![(whole, self.range(0, self.steps))],
                fresh: Vec::new(),
            };
        }
        let hi = hi.min(self.steps);
        let mut out = Shares::default();
        if lo >= hi {
            out.fresh.push(range);
            return out;
        }
        self.split_at(segment, lo, hi, 0, &mut out);
        out
    }

    /// Steps of a chunk of `ms`, when the grid divides it and the partition is
    /// wider (a chunk as wide as the partition is the whole share above).
    fn chunk_steps(&self, ms: i64) -> Option<u32> {
        if self.step_ms <= 0 || ms % self.step_ms != 0 {
            return None;
        }
        u32::try_from(ms / self.step_ms)
            .ok()
            .filter(|&c| c > 0 && c < self.steps)
    }

    /// Splits steps `[lo, hi)` into whole chunks of `CHUNKS_MS[level]` where they
    /// fit, and the ends into finer chunks; what no chunk fits is fresh.
    fn split_at(&self, segment: u64, lo: u32, hi: u32, level: usize, out: &mut Shares) {
        for (i, &ms) in CHUNKS_MS.iter().enumerate().skip(level) {
            let Some(chunk) = self.chunk_steps(ms) else {
                continue;
            };
            let first = lo.div_ceil(chunk) * chunk;
            let end = hi / chunk * chunk;
            if first >= end {
                continue;
            }
            if lo < first {
                self.split_at(segment, lo, first, i + 1, out);
            }
            let mut c = first;
            while c < end {
                let share = Share {
                    segment,
                    lo: c,
                    hi: c + chunk,
                };
                out.cached.push((share, self.range(c, c + chunk)));
                c += chunk;
            }
            if end < hi {
                self.split_at(segment, end, hi, i + 1, out);
            }
            return;
        }
        out.fresh.push(self.range(lo, hi));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::segment::step_range;
    use proptest::prelude::*;

    const HOUR: i64 = 3_600_000;

    fn split(layout: Layout, start: i64, end: i64) -> Shares {
        let (lo, hi) = step_range(layout.start_ms, layout.step_ms, start, end);
        layout.split(7, TimeRange::new(start, end), lo, hi)
    }

    fn steps_of(layout: Layout, r: TimeRange) -> (u32, u32) {
        step_range(layout.start_ms, layout.step_ms, r.start_ms, r.end_ms)
    }

    /// A range holding every step with data is read as the whole partition,
    /// one share; one cutting into the data is split as before.
    #[test]
    fn a_range_holding_all_the_data_reads_the_whole_partition() {
        let day = Layout {
            start_ms: 1000 * HOUR,
            step_ms: 10_000,
            steps: 8640,
        };
        // Data from 05:00 to 20:00 (steps 1800 to 7200).
        let data = Some((1800, 7200));
        let whole = |start: i64, end: i64| {
            let r = TimeRange::new(start, end);
            let (lo, hi) = whole_if_all_data(steps_of(day, r), data);
            day.split(7, r, lo, hi)
        };
        let one = whole(1004 * HOUR, 1021 * HOUR);
        assert_eq!(one.cached.len(), 1);
        assert_eq!(
            one.cached[0].0,
            Share {
                segment: 7,
                lo: 0,
                hi: 8640
            }
        );
        assert!(one.fresh.is_empty());
        // The last step with data is 20:00 itself: a range ending there misses it.
        assert_eq!(whole(1004 * HOUR, 1020 * HOUR).cached.len(), 16);
        assert_eq!(whole(1006 * HOUR, 1021 * HOUR).cached.len(), 15);
        assert_eq!(whole_if_all_data((3, 9), None), (3, 9));
    }

    #[test]
    fn a_day_block_cut_at_two_hours_and_a_half() {
        let day = Layout {
            start_ms: 1000 * HOUR,
            step_ms: 10_000,
            steps: 8640,
        };
        let s = split(day, 1000 * HOUR + 2 * HOUR + HOUR / 2, 1030 * HOUR);
        assert!(s.fresh.is_empty());
        // Three ten-minute chunks up to the next hour, then 21 whole hours.
        assert_eq!(s.cached.len(), 3 + 21);
        let ten = |lo: u32, start: i64| {
            (
                Share {
                    segment: 7,
                    lo,
                    hi: lo + 60,
                },
                TimeRange::new(start, start + HOUR / 6),
            )
        };
        assert_eq!(s.cached[0], ten(900, 1002 * HOUR + HOUR / 2));
        assert_eq!(s.cached[2], ten(1020, 1002 * HOUR + 5 * HOUR / 6));
        assert_eq!(
            s.cached[3],
            (
                Share {
                    segment: 7,
                    lo: 1080,
                    hi: 1440
                },
                TimeRange::new(1003 * HOUR, 1004 * HOUR)
            )
        );
        assert_eq!(s.cached[23].0.hi, 8640);
        // Inside an hour and off the ten-minute grid: the ragged ends are fresh.
        let s = split(day, 1000 * HOUR + 25 * 60_000, 1000 * HOUR + 47 * 60_000);
        assert_eq!(
            s.fresh,
            vec![
                TimeRange::new(1000 * HOUR + 25 * 60_000, 1000 * HOUR + 30 * 60_000),
                TimeRange::new(1000 * HOUR + 40 * 60_000, 1000 * HOUR + 47 * 60_000),
            ]
        );
        assert_eq!(s.cached, vec![ten(180, 1000 * HOUR + HOUR / 2)]);
    }

    #[test]
    fn whole_partitions_are_one_share_and_cut_hours_are_split_by_ten_minutes() {
        let hour = Layout {
            start_ms: 5 * HOUR,
            step_ms: 10_000,
            steps: 360,
        };
        let whole = split(hour, 0, 10 * HOUR);
        assert_eq!(whole.cached.len(), 1);
        assert_eq!((whole.cached[0].0.lo, whole.cached[0].0.hi), (0, 360));
        assert!(whole.fresh.is_empty());
        // An hour segment cut one step in: five cached ten-minute chunks, and
        // only the first chunk's steps from the rows.
        let cut = split(hour, 5 * HOUR + 10_000, 10 * HOUR);
        assert_eq!(
            cut.cached
                .iter()
                .map(|(s, _)| (s.lo, s.hi))
                .collect::<Vec<_>>(),
            vec![(60, 120), (120, 180), (180, 240), (240, 300), (300, 360)]
        );
        assert_eq!(
            cut.fresh,
            vec![TimeRange::new(5 * HOUR + 10_000, 5 * HOUR + HOUR / 6)]
        );
    }

    proptest! {
        /// The shares and the fresh ranges select each step of the query exactly
        /// once, and every cached share but a whole partition is one aligned chunk.
        #[test]
        fn shares_tile_the_selected_steps(
            step_ms in prop::sample::select(vec![10_000i64, 60_000, 3_600_000, 7_000]),
            hours in 1u32..48,
            start in -2 * HOUR..50 * HOUR,
            len in 0..60 * HOUR,
        ) {
            let steps = (i64::from(hours) * HOUR / step_ms) as u32;
            let layout = Layout { start_ms: 0, step_ms, steps };
            let s = split(layout, start, start + len);
            let (lo, hi) = step_range(0, step_ms, start, start + len);
            let hi = hi.min(steps);
            let mut covered = vec![0u8; steps as usize];
            for (share, r) in &s.cached {
                prop_assert_eq!(steps_of(layout, *r), (share.lo, share.hi));
                let whole = share.lo == 0 && share.hi == steps;
                let chunk = CHUNKS_MS.iter().any(|&c| {
                    i64::from(share.hi - share.lo) * step_ms == c
                        && (i64::from(share.lo) * step_ms) % c == 0
                });
                prop_assert!(whole || chunk, "{:?}", share);
                for t in share.lo..share.hi {
                    covered[t as usize] += 1;
                }
            }
            for r in &s.fresh {
                let (a, b) = steps_of(layout, *r);
                for t in a..b.min(steps) {
                    covered[t as usize] += 1;
                }
            }
            for (t, &c) in covered.iter().enumerate() {
                let inside = (t as u32) >= lo && (t as u32) < hi;
                // A whole partition's share covers it all, whatever the range.
                let whole = s.cached.iter().any(|(sh, _)| sh.lo == 0 && sh.hi == steps);
                prop_assert_eq!(c, u8::from(inside || whole), "step {}", t);
            }
        }
    }
}
