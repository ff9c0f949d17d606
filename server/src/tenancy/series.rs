//! The active-series registry of one tenant: which series (profile type + labels)
//! were written within the last window, so the series limit counts distinct series
//! and not samples.
//!
//! It lives beside the ingest path rather than in the storage head: the head holds
//! a partition's series until it is flushed, which says nothing about how many a
//! tenant is writing *now*; a window of last-write times does. It is bounded: it
//! never admits more series than the limit, and forgets a series a window after its
//! last write. A restart starts it empty (every tenant gets a fresh window).

use std::hash::{DefaultHasher, Hash, Hasher};

use profiledb_storage::Labels;
use rustc_hash::FxHashMap;

#[derive(Debug, Default)]
pub struct ActiveSeries {
    /// Series fingerprint → last write (ms).
    last_write: FxHashMap<u64, i64>,
    /// When entries older than the window were last dropped.
    pruned_ms: i64,
}

/// A series' fingerprint. 64 bits: at a million series a collision (two series
/// counted as one) has a chance of about 3e-8.
pub fn fingerprint(labels: &Labels) -> u64 {
    let mut h = DefaultHasher::new();
    labels.hash(&mut h);
    h.finish()
}

impl ActiveSeries {
    pub fn len(&self) -> usize {
        self.last_write.len()
    }

    /// Whether writing `series` at `now_ms` leaves the tenant with at most `max`
    /// active series (0: no limit); if not, how many it would have had. Records
    /// nothing: [`ActiveSeries::record`] does, once the whole upload passed.
    pub fn check(
        &mut self,
        series: &[u64],
        now_ms: i64,
        window_ms: i64,
        max: u64,
    ) -> Result<(), usize> {
        // Dropping expired entries costs a pass over the map: do it when over the
        // limit (it may make room) or once per tenth of a window.
        if now_ms.saturating_sub(self.pruned_ms) >= window_ms / 10 {
            self.prune(now_ms, window_ms);
        }
        let mut fresh: Vec<u64> = series
            .iter()
            .copied()
            .filter(|f| !self.last_write.contains_key(f))
            .collect();
        fresh.sort_unstable();
        fresh.dedup();
        if max > 0 && (self.len() + fresh.len()) as u64 > max {
            self.prune(now_ms, window_ms);
            let total = self.len() + fresh.len();
            if total as u64 > max {
                return Err(total);
            }
        }
        Ok(())
    }

    /// Marks `series` as written at `now_ms`.
    pub fn record(&mut self, series: &[u64], now_ms: i64) {
        for f in series {
            self.last_write.insert(*f, now_ms);
        }
    }

    fn prune(&mut self, now_ms: i64, window_ms: i64) {
        let oldest = now_ms.saturating_sub(window_ms);
        self.last_write.retain(|_, t| *t > oldest);
        self.pruned_ms = now_ms;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fp(service: &str) -> u64 {
        fingerprint(&Labels::new([("service_name", service)]))
    }

    fn admit(a: &mut ActiveSeries, series: &[u64], now: i64, max: u64) -> Result<(), usize> {
        a.check(series, now, 60_000, max)?;
        a.record(series, now);
        Ok(())
    }

    #[test]
    fn counts_distinct_series_and_refuses_past_the_limit() {
        let mut a = ActiveSeries::default();
        assert_eq!(
            admit(&mut a, &[fp("a"), fp("b"), fp("a")], 1_000, 2),
            Ok(())
        );
        assert_eq!(a.len(), 2);
        // Known series always pass; a third one does not, and is not recorded.
        assert_eq!(admit(&mut a, &[fp("b")], 2_000, 2), Ok(()));
        assert_eq!(admit(&mut a, &[fp("a"), fp("c")], 2_000, 2), Err(3));
        assert_eq!(a.len(), 2);
        // A window after "a" and "b" were last written they no longer count.
        assert_eq!(admit(&mut a, &[fp("c")], 62_001, 2), Ok(()));
        assert_eq!(a.len(), 1);
    }

    #[test]
    fn a_limit_of_zero_admits_everything() {
        let mut a = ActiveSeries::default();
        let many: Vec<u64> = (0..100).map(|i| fp(&i.to_string())).collect();
        assert_eq!(admit(&mut a, &many, 0, 0), Ok(()));
        assert_eq!(a.len(), 100);
    }
}
