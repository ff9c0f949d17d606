//! One series' aggregated rows in a head partition: `(step, stack node) → value`.
//!
//! Samples arrive step after step: a push adds the rows of the newest step, and
//! a row of an older step is rare (a late push). So the rows are a vector in
//! arrival order, and only the newest step's rows are found by stack node, in a
//! map that stays as small as one step. A hash map of every row paid a cache miss
//! per sample and a rehash at every doubling, on the writer thread; an appended
//! row is a sequential write.
//!
//! The first sample of an older step than the newest turns the series to the
//! general way: every row indexed by `(step, stack)`, built once from the vector.
//! Either way a `(step, stack)` pair is one row, so readers see each once.

use rustc_hash::FxHashMap;

use crate::segment::Row;

#[derive(Default)]
pub(super) struct SeriesRows {
    rows: Vec<Row>,
    /// The newest step, and its rows' positions by stack node.
    step: u32,
    newest: FxHashMap<u32, u32>,
    /// Every row's position by `(step, stack)`, once a sample came late.
    all: Option<FxHashMap<(u32, u32), u32>>,
}

impl SeriesRows {
    /// Adds `value` to the row `(t, stack)`; whether that made a new row.
    pub fn add(&mut self, t: u32, stack: u32, value: i64) -> bool {
        let at = self.rows.len() as u32;
        let found = match &mut self.all {
            Some(all) => *all.entry((t, stack)).or_insert(at),
            None if t == self.step && !self.rows.is_empty() => {
                *self.newest.entry(stack).or_insert(at)
            }
            None if t > self.step || self.rows.is_empty() => {
                self.newest.clear();
                self.step = t;
                self.newest.insert(stack, at);
                at
            }
            None => {
                self.index_all();
                return self.add(t, stack, value);
            }
        };
        match self.rows.get_mut(found as usize) {
            Some(row) => {
                row.value = row.value.saturating_add(value);
                false
            }
            None => {
                self.rows.push(Row { t, stack, value });
                true
            }
        }
    }

    /// Turns to indexing every row: a sample came for a step before the newest.
    fn index_all(&mut self) {
        let mut all = FxHashMap::with_capacity_and_hasher(self.rows.len() + 1, Default::default());
        for (i, r) in self.rows.iter().enumerate() {
            all.insert((r.t, r.stack), i as u32);
        }
        self.all = Some(all);
        self.newest = FxHashMap::default();
    }

    /// Whether every row is indexed (see [`SeriesRows::index_all`]).
    #[cfg(test)]
    pub fn indexes_all(&self) -> bool {
        self.all.is_some()
    }

    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.rows.len()
    }

    pub fn iter(&self) -> impl Iterator<Item = &Row> {
        self.rows.iter()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::BTreeMap;

    fn sorted(r: &SeriesRows) -> Vec<(u32, u32, i64)> {
        let mut v: Vec<_> = r.iter().map(|x| (x.t, x.stack, x.value)).collect();
        v.sort_unstable();
        v
    }

    #[test]
    fn rows_of_the_newest_step_merge_and_a_new_step_starts_fresh() {
        let mut r = SeriesRows::default();
        assert!(r.add(3, 7, 1));
        assert!(r.add(3, 8, 2));
        assert!(!r.add(3, 7, 10));
        assert!(r.add(4, 7, 5));
        assert!(!r.add(4, 7, 1));
        assert_eq!(sorted(&r), [(3, 7, 11), (3, 8, 2), (4, 7, 6)]);
        assert!(!r.indexes_all());
    }

    #[test]
    fn a_late_sample_merges_into_its_own_step() {
        let mut r = SeriesRows::default();
        r.add(5, 1, 1);
        r.add(6, 1, 1);
        // Step 5 again: the row it already has, not a second one.
        assert!(!r.add(5, 1, 4));
        assert!(r.indexes_all());
        assert!(r.add(5, 2, 1));
        assert!(!r.add(6, 1, 1));
        assert_eq!(sorted(&r), [(5, 1, 5), (5, 2, 1), (6, 1, 2)]);
    }

    proptest! {
        /// Whatever the order of the samples, the rows are a map's: one per
        /// `(step, stack)`, holding the sum, and `add` says when it made one.
        #[test]
        fn rows_are_what_a_map_of_every_row_holds(
            samples in prop::collection::vec((0u32..6, 0u32..5, -3i64..10), 0..80),
        ) {
            let mut r = SeriesRows::default();
            let mut want: BTreeMap<(u32, u32), i64> = BTreeMap::new();
            for &(t, s, v) in &samples {
                let new = !want.contains_key(&(t, s));
                let e = want.entry((t, s)).or_insert(0);
                *e = e.saturating_add(v);
                prop_assert_eq!(r.add(t, s, v), new);
            }
            let want: Vec<_> = want.into_iter().map(|((t, s), v)| (t, s, v)).collect();
            prop_assert_eq!(sorted(&r), want);
            prop_assert_eq!(r.len(), samples.iter().map(|&(t, s, _)| (t, s)).collect::<std::collections::BTreeSet<_>>().len());
        }
    }
}
