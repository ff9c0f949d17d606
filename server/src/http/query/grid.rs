//! The step grid of a time series: Pyroscope and Prometheus align buckets to whole
//! multiples of the step (not to the request's `from`) and answer every step of the
//! window, with zeros where nothing was sampled, so charts line up across queries and
//! gaps show as gaps.

use profiledb_storage::TimeRange;

use crate::error::{ApiError, ApiResult};

/// Most points one series may have; a larger grid needs a larger step.
pub const MAX_POINTS: i64 = 100_000;

/// The first grid timestamp (the multiple of `step` at or before the window's start)
/// and the number of steps up to the window's end.
pub fn grid(range: TimeRange, step: i64) -> (i64, i64) {
    let step = step.max(1);
    let first = range.start_ms.div_euclid(step) * step;
    let span = range.end_ms.saturating_sub(first).max(0);
    (first, (span + step - 1) / step)
}

/// Refuses a window that would have more than [`MAX_POINTS`] steps.
pub fn check(range: TimeRange, step: i64) -> ApiResult<()> {
    let (_, n) = grid(range, step);
    if n > MAX_POINTS {
        return Err(ApiError::bad_request(format!(
            "{n} points per series (more than {MAX_POINTS}): use a larger step"
        )));
    }
    Ok(())
}

/// `points` (step-aligned, sorted by time) on the whole grid of `range`, zeros where
/// no point fell.
pub fn fill(range: TimeRange, step: i64, points: &[(i64, i64)]) -> Vec<(i64, i64)> {
    let step = step.max(1);
    let (first, n) = grid(range, step);
    let n = n.min(MAX_POINTS);
    let mut out: Vec<(i64, i64)> = (0..n).map(|k| (first + k * step, 0)).collect();
    for &(t, v) in points {
        let k = (t - first).div_euclid(step);
        if let Some(slot) = usize::try_from(k).ok().and_then(|k| out.get_mut(k)) {
            slot.1 += v;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn aligned_to_whole_steps_with_every_step() {
        // A window from 25 s to 65 s at 10 s steps: buckets 20, 30, 40, 50, 60.
        let r = TimeRange::new(25_000, 65_000);
        assert_eq!(grid(r, 10_000), (20_000, 5));
        let filled = fill(r, 10_000, &[(30_000, 7), (60_000, 2)]);
        assert_eq!(
            filled,
            vec![
                (20_000, 0),
                (30_000, 7),
                (40_000, 0),
                (50_000, 0),
                (60_000, 2)
            ]
        );
        // An aligned window has exactly span/step buckets.
        assert_eq!(grid(TimeRange::new(0, 60_000), 10_000), (0, 6));
        assert!(check(TimeRange::new(0, 1_000_000_000), 1).is_err());
        assert!(check(TimeRange::new(0, 60_000), 10_000).is_ok());
    }
}
