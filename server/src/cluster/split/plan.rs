//! Where a split query's range is cut: into sub-ranges of about equal stored
//! bytes, at edges of the sources it reads, so that (where the sources allow)
//! no source is read by two parts. Any cut is exact (a step belongs to the
//! sub-range its start lies in); the choice of cuts only decides who reads what.

use profiledb_storage::{SourceSpan, TimeRange};

/// Up to `parts` sub-ranges tiling `range` (fewer when the sources offer fewer
/// cuts), in time order.
pub fn cut(range: TimeRange, spans: &[SourceSpan], parts: usize) -> Vec<TimeRange> {
    let clipped: Vec<(i64, i64, f64)> = spans
        .iter()
        .map(|s| {
            (
                s.start_ms.max(range.start_ms),
                s.end_ms.min(range.end_ms),
                s.bytes as f64,
            )
        })
        .filter(|(s, e, _)| s < e)
        .collect();
    let total: f64 = clipped.iter().map(|c| c.2).sum();
    let mut candidates: Vec<i64> = clipped
        .iter()
        .flat_map(|&(s, e, _)| [s, e])
        .filter(|&c| c > range.start_ms && c < range.end_ms)
        .collect();
    candidates.sort_unstable();
    candidates.dedup();
    // Bytes before a cut (a source cut through counts by its share of time) and
    // bytes of the sources it cuts through (read by both sides).
    let before = |c: i64| -> f64 {
        clipped
            .iter()
            .map(|&(s, e, b)| match () {
                _ if e <= c => b,
                _ if s >= c => 0.0,
                _ => b * (c - s) as f64 / (e - s) as f64,
            })
            .sum()
    };
    let through = |c: i64| -> f64 {
        clipped
            .iter()
            .filter(|&&(s, e, _)| s < c && c < e)
            .map(|c| c.2)
            .sum()
    };
    let mut cuts: Vec<i64> = Vec::new();
    if total > 0.0 {
        for k in 1..parts.max(1) {
            let target = total * k as f64 / parts as f64;
            let last = cuts.last().copied().unwrap_or(range.start_ms);
            let best = candidates
                .iter()
                .copied()
                .filter(|&c| c > last)
                .map(|c| (c, (before(c) - target).abs() + through(c)))
                .min_by(|a, b| a.1.total_cmp(&b.1));
            if let Some((c, _)) = best {
                cuts.push(c);
            }
        }
    }
    let mut edges = vec![range.start_ms];
    edges.extend(cuts);
    edges.push(range.end_ms);
    edges
        .windows(2)
        .map(|w| TimeRange::new(w[0], w[1]))
        .filter(|r| r.start_ms < r.end_ms)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const H: i64 = 3_600_000;

    fn span(h: i64, hours: i64, bytes: u64) -> SourceSpan {
        SourceSpan {
            start_ms: h * H,
            end_ms: (h + hours) * H,
            bytes,
            head: false,
        }
    }

    #[test]
    fn equal_hours_are_cut_into_equal_parts_at_their_edges() {
        let spans: Vec<SourceSpan> = (0..12).map(|h| span(h, 1, 100)).collect();
        let got = cut(TimeRange::new(0, 12 * H), &spans, 3);
        assert_eq!(
            got,
            vec![
                TimeRange::new(0, 4 * H),
                TimeRange::new(4 * H, 8 * H),
                TimeRange::new(8 * H, 12 * H)
            ]
        );
    }

    #[test]
    fn a_day_block_is_not_cut_through_when_its_edges_will_do() {
        // Yesterday's block and today's hours: the cut falls at midnight.
        let mut spans = vec![span(0, 24, 2400), span(3, 1, 5)];
        spans.extend((24..30).map(|h| span(h, 1, 400)));
        let got = cut(TimeRange::new(0, 30 * H), &spans, 2);
        assert_eq!(got[0], TimeRange::new(0, 24 * H));
    }

    #[test]
    fn one_source_is_not_split() {
        let got = cut(TimeRange::new(0, H), &[span(0, 1, 100)], 4);
        assert_eq!(got, vec![TimeRange::new(0, H)]);
    }

    proptest! {
        /// Whatever the sources, the parts tile the range: in order, touching,
        /// no more than asked.
        #[test]
        fn parts_tile_the_range(
            raw in prop::collection::vec((0i64..48, 1i64..25, 0u64..1000), 0..30),
            parts in 1usize..6,
            lo in 0i64..10,
            len in 1i64..60,
        ) {
            let spans: Vec<SourceSpan> = raw.iter().map(|&(h, w, b)| span(h, w, b)).collect();
            let range = TimeRange::new(lo * H + 17, (lo + len) * H);
            let got = cut(range, &spans, parts);
            prop_assert!(!got.is_empty() && got.len() <= parts);
            prop_assert_eq!(got[0].start_ms, range.start_ms);
            prop_assert_eq!(got[got.len() - 1].end_ms, range.end_ms);
            for w in got.windows(2) {
                prop_assert_eq!(w[0].end_ms, w[1].start_ms);
                prop_assert!(w[0].start_ms < w[0].end_ms);
            }
        }
    }
}
