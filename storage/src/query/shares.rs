//! Which parts of one segment's share of a query can come from the result cache.
//!
//! A segment's share of a merge or group-by is cached when the query covers its
//! whole partition: every such query asks the same share. A sliding window cuts
//! into its oldest segment, and a diff's midpoint into another; those shares change
//! with every query, so they are computed from the rows. For an hour segment that is
//! an hour of rows at most, but a day block would be recomputed whole on every
//! query of a window starting inside the day. So the part of a block a range covers
//! is split at hour boundaries: each whole hour is a share of its own, cached like a
//! segment's, and only the ragged ends (less than an hour each) are computed.

use super::{steps, Source, TimeRange};

/// Width of the cached pieces of a block that a range cuts into.
pub(crate) const CHUNK_MS: i64 = 3_600_000;

/// Steps `[lo, hi)` of one segment: the cache key part of a share.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
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
    let (lo, hi) = steps(src, range);
    let layout = Layout {
        start_ms: src.partition_start(),
        step_ms: src.step(),
        steps: src.partition_steps(),
    };
    layout.split(segment, range, lo, hi)
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
        let fresh = Shares {
            cached: Vec::new(),
            fresh: vec![range],
        };
        let hi = hi.min(self.steps);
        // Only blocks (partitions wider than a chunk, on a grid that divides it)
        // are split.
        let chunk = if self.step_ms > 0 && CHUNK_MS % self.step_ms == 0 {
            u32::try_from(CHUNK_MS / self.step_ms).unwrap_or(0)
        } else {
            0
        };
        if chunk == 0 || chunk >= self.steps || lo >= hi {
            return fresh;
        }
        let first = lo.div_ceil(chunk) * chunk;
        let end = hi / chunk * chunk;
        if first >= end {
            return fresh;
        }
        let mut out = Shares::default();
        if lo < first {
            out.fresh.push(self.range(lo, first));
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
            out.fresh.push(self.range(end, hi));
        }
        out
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

    #[test]
    fn a_day_block_cut_at_two_hours_and_a_half() {
        let day = Layout {
            start_ms: 1000 * HOUR,
            step_ms: 10_000,
            steps: 8640,
        };
        let s = split(day, 1000 * HOUR + 2 * HOUR + HOUR / 2, 1030 * HOUR);
        assert_eq!(
            s.fresh,
            vec![TimeRange::new(1002 * HOUR + HOUR / 2, 1003 * HOUR)]
        );
        assert_eq!(s.cached.len(), 21);
        assert_eq!(
            s.cached[0],
            (
                Share {
                    segment: 7,
                    lo: 1080,
                    hi: 1440
                },
                TimeRange::new(1003 * HOUR, 1004 * HOUR)
            )
        );
        assert_eq!(s.cached[20].0.hi, 8640);
    }

    #[test]
    fn whole_partitions_are_one_share_and_hours_are_not_split() {
        let hour = Layout {
            start_ms: 5 * HOUR,
            step_ms: 10_000,
            steps: 360,
        };
        let whole = split(hour, 0, 10 * HOUR);
        assert_eq!(whole.cached.len(), 1);
        assert_eq!((whole.cached[0].0.lo, whole.cached[0].0.hi), (0, 360));
        assert!(whole.fresh.is_empty());
        let cut = split(hour, 5 * HOUR + 1, 10 * HOUR);
        assert!(cut.cached.is_empty());
        assert_eq!(cut.fresh, vec![TimeRange::new(5 * HOUR + 1, 10 * HOUR)]);
    }

    proptest! {
        /// The shares and the fresh ranges select each step of the query exactly
        /// once, and every cached share but a whole partition is one aligned hour.
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
                let hour = i64::from(share.hi - share.lo) * step_ms == CHUNK_MS
                    && (i64::from(share.lo) * step_ms) % CHUNK_MS == 0;
                prop_assert!(whole || hour, "{:?}", share);
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
