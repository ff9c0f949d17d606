//! The time range of a query.

/// A half-open time range `[start_ms, end_ms)` in milliseconds since the epoch.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct TimeRange {
    /// First millisecond in the range.
    pub start_ms: i64,
    /// First millisecond after the range.
    pub end_ms: i64,
}

impl TimeRange {
    /// `[start_ms, end_ms)`.
    pub fn new(start_ms: i64, end_ms: i64) -> Self {
        TimeRange { start_ms, end_ms }
    }

    /// Every representable time.
    pub fn all() -> Self {
        TimeRange {
            start_ms: i64::MIN,
            end_ms: i64::MAX,
        }
    }

    /// Whether `[start, end)` shares at least one millisecond with this range.
    pub fn overlaps(&self, start: i64, end: i64) -> bool {
        self.start_ms < end && start < self.end_ms
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn overlap_is_half_open() {
        let r = TimeRange::new(10, 20);
        assert!(r.overlaps(19, 30));
        assert!(r.overlaps(0, 11));
        assert!(!r.overlaps(20, 30));
        assert!(!r.overlaps(0, 10));
        assert!(TimeRange::all().overlaps(i64::MIN, i64::MIN + 1));
    }
}
