//! How big a new head partition is likely to grow, taken from the tenant's
//! partition before it.
//!
//! Continuous profiling sends the same fleet every hour, so the hour before is a
//! good guess of the next hour's stack tree, symbol tables and series. A partition
//! that starts with room for that skips the rehash of every map at every doubling
//! (and the zeroed fresh pages each one touches). The room is counted in the
//! partition's footprint from the start, so the head's memory budget sees it, and
//! it is capped so a hostile hour cannot make the next one reserve the budget.

use crate::dict::DictRoom;

/// The sizes a head partition makes room for when it is created.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SizeHint {
    pub dict: DictRoom,
    pub series: usize,
    /// Aggregated rows over all series.
    pub rows: usize,
    /// Stacks and locations known by interned id.
    pub stack_ids: usize,
    pub location_ids: usize,
}

/// Bytes a series' slot takes besides its labels (map entry, vectors).
pub(super) const SERIES_BYTES: usize = 64;
/// Bytes of one aggregated row: the row, its vector's slack and its share of
/// the step's map, or of the index of every row once a series had a late sample
/// (`rows.rs`).
pub(super) const ROW_BYTES: usize = 40;
/// Bytes of an id map's entry and control byte.
pub(super) const ID_BYTES: usize = 9;

impl SizeHint {
    /// Heap bytes the room takes, as [`super::HeadPartition::approx_bytes`]
    /// counts them.
    pub fn approx_bytes(&self) -> usize {
        self.dict.approx_bytes()
            + self.series * SERIES_BYTES
            + self.rows * ROW_BYTES
            + (self.stack_ids + self.location_ids) * ID_BYTES
    }

    /// This hint scaled down, every size alike, to take at most `max_bytes`.
    pub fn capped(self, max_bytes: usize) -> SizeHint {
        let bytes = self.approx_bytes();
        if bytes <= max_bytes {
            return self;
        }
        let scale = |n: usize| (n as u128 * max_bytes as u128 / bytes as u128) as usize;
        SizeHint {
            dict: DictRoom {
                strings: scale(self.dict.strings),
                functions: scale(self.dict.functions),
                locations: scale(self.dict.locations),
                nodes: scale(self.dict.nodes),
                stacks: scale(self.dict.stacks),
            },
            series: scale(self.series),
            rows: scale(self.rows),
            stack_ids: scale(self.stack_ids),
            location_ids: scale(self.location_ids),
        }
    }

    /// Rows to make room for in each new series: the hint's average.
    pub(super) fn rows_per_series(&self) -> usize {
        self.rows.checked_div(self.series).unwrap_or(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hint() -> SizeHint {
        SizeHint {
            dict: DictRoom {
                strings: 100,
                functions: 50,
                locations: 200,
                nodes: 1000,
                stacks: 300,
            },
            series: 10,
            rows: 5000,
            stack_ids: 300,
            location_ids: 200,
        }
    }

    #[test]
    fn a_hint_under_the_cap_is_kept_whole() {
        let h = hint();
        assert_eq!(h.capped(h.approx_bytes()), h);
    }

    #[test]
    fn a_capped_hint_fits_and_keeps_its_proportions() {
        let h = hint();
        let c = h.capped(h.approx_bytes() / 4);
        assert!(c.approx_bytes() <= h.approx_bytes() / 4);
        assert_eq!(c.dict.nodes, 250);
        assert_eq!(c.rows, 1250);
        assert_eq!(c.series, 2);
        assert_eq!(SizeHint::default().rows_per_series(), 0);
        assert_eq!(h.rows_per_series(), 500);
    }
}
