//! Second-ask admission: a result is cached only when the same thing was asked
//! recently, so results no later query reads do not fill a cache.
//!
//! Two kinds of result are seldom asked twice. A function filter typed once while
//! exploring has per-segment parts no later query reads. And a query's whole
//! answer, or its whole-range merge part, is keyed by its exact range: a dashboard
//! sliding "the last hour" asks each range once. Kept on first ask, such entries
//! took fresh memory on every query (the kernel zeroing its pages; figures in
//! docs/perf-log/2026-11-26-round-07-first-query-rows-by-chunk.md) and evicted
//! entries that are read. A dashboard's repeated
//! absolute range, or a panel rendered twice, is cached from its second ask on.

use std::hash::{Hash, Hasher};

/// Hashes of what was asked recently, a bounded number of them.
pub struct AskedBefore {
    asked: quick_cache::sync::Cache<u64, ()>,
}

/// Remembers the last 4,096 asks: more than a busy dashboard repeats between
/// two refreshes, a few tens of KiB.
impl Default for AskedBefore {
    fn default() -> Self {
        AskedBefore::new(4096)
    }
}

impl AskedBefore {
    /// Remembers up to `remembered` recent asks.
    pub fn new(remembered: usize) -> Self {
        AskedBefore {
            asked: quick_cache::sync::Cache::new(remembered.max(1)),
        }
    }

    /// Whether `key` was asked recently, remembering it.
    pub fn asked_before(&self, key: &impl Hash) -> bool {
        let mut h = rustc_hash::FxHasher::default();
        key.hash(&mut h);
        let hash = h.finish();
        if self.asked.get(&hash).is_some() {
            return true;
        }
        self.asked.insert(hash, ());
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_is_admitted_from_its_second_ask() {
        let a = AskedBefore::new(16);
        assert!(!a.asked_before(&("q", 1)));
        assert!(!a.asked_before(&("q", 2)));
        assert!(a.asked_before(&("q", 1)));
        assert!(a.asked_before(&("q", 1)));
        assert!(a.asked_before(&("q", 2)));
    }
}
