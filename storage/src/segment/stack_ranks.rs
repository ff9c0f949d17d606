//! Stack ranks (format version 4): rows name their stack by its rank in the
//! segment, most frequent first, instead of by its node id.
//!
//! Node ids follow the tree (depth first), so the stacks one profile samples are
//! scattered over the whole range of its service's nodes: in the bench fleet's
//! week blocks a row's stack id delta took 1.73 bytes after zstd, the largest
//! part of a segment. Sampled stacks follow a steep popularity curve, and a
//! profile mostly holds the popular ones: numbered by popularity, the stacks of
//! one step are small numbers close together, and their deltas compress to 1.16
//! bytes a row (and the values, now in popularity order too, from 0.23 to 0.18).
//! The ranks' table costs about 3 bytes per distinct stack, so a segment only
//! gets one when it has many rows per stack ([`MIN_ROWS_PER_STACK`]); an hour
//! of a fleet pushing twice an hour has about as many stacks as rows, and keeps
//! node ids.
//!
//! Section `StackRanks`: `uvarint n`, then `n × uvarint node`, the stack node of
//! each rank. Decoded rows name nodes again (`rows.rs` maps them), so nothing
//! above the segment reader sees ranks.

use super::writer::Row;
use crate::codec::{put_uvarint, Reader};

/// A segment gets a ranks table from this many rows per distinct stack: below
/// it the table (≈ 3 bytes a stack) costs more than the rows save (≈ 0.6 bytes
/// a row on the bench fleet).
pub(super) const MIN_ROWS_PER_STACK: usize = 8;

/// The ranks of a segment being written.
pub(super) struct StackRanks {
    /// By node id; `u32::MAX` for nodes no row names.
    rank_of: Vec<u32>,
    by_rank: Vec<u32>,
}

impl StackRanks {
    /// Ranks for the rows of `series`, whose stacks are node ids below `nodes`:
    /// stacks by descending row count, ties by node id. `None` when the segment
    /// has too few rows per stack to gain.
    pub(super) fn of<'a>(
        series: impl Iterator<Item = &'a [Row]>,
        nodes: usize,
    ) -> Option<StackRanks> {
        let mut count = vec![0u64; nodes];
        let mut rows = 0usize;
        for r in series.flat_map(|rows| rows.iter()) {
            // The writer's rows name nodes of its tree; any other is left unranked
            // and the segment keeps node ids.
            count.get_mut(r.stack as usize).map(|c| *c += 1)?;
            rows += 1;
        }
        let mut by_count: Vec<(u64, u32)> = count
            .iter()
            .enumerate()
            .filter(|&(_, &n)| n > 0)
            .map(|(s, &n)| (n, s as u32))
            .collect();
        if by_count.is_empty() || rows < MIN_ROWS_PER_STACK.saturating_mul(by_count.len()) {
            return None;
        }
        by_count.sort_unstable_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
        let by_rank: Vec<u32> = by_count.into_iter().map(|(_, s)| s).collect();
        let mut rank_of = vec![u32::MAX; nodes];
        for (rank, &s) in by_rank.iter().enumerate() {
            rank_of[s as usize] = rank as u32;
        }
        Some(StackRanks { rank_of, by_rank })
    }

    /// `rows` (in step order) with each stack replaced by its rank, in `(t,
    /// rank)` order: what the row columns store. Only each step's rows are
    /// sorted, a few dozen at a time, not the series.
    pub(super) fn ranked(&self, rows: &[Row]) -> Vec<Row> {
        debug_assert!(rows.windows(2).all(|w| w[0].t <= w[1].t));
        let mut out: Vec<Row> = rows
            .iter()
            .map(|r| Row {
                // Every stack of the segment's rows has a rank (see `of`).
                stack: self
                    .rank_of
                    .get(r.stack as usize)
                    .copied()
                    .unwrap_or(u32::MAX),
                ..*r
            })
            .collect();
        for step in out.chunk_by_mut(|a, b| a.t == b.t) {
            step.sort_unstable_by_key(|r| r.stack);
        }
        out
    }

    /// The `StackRanks` section.
    pub(super) fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(3 * self.by_rank.len() + 8);
        put_uvarint(&mut out, self.by_rank.len() as u64);
        for &s in &self.by_rank {
            put_uvarint(&mut out, u64::from(s));
        }
        out
    }
}

/// The stack node of each rank from a `StackRanks` section of a segment whose
/// tree has `nodes` nodes; an error names what is wrong.
pub(super) fn decode(raw: &[u8], nodes: u64) -> std::result::Result<Vec<u32>, String> {
    let mut r = Reader::new(raw, "stack ranks");
    let n = r.count(1).map_err(|e| e.to_string())?;
    if n as u64 > nodes {
        return Err(format!("{n} stack ranks for {nodes} stack nodes"));
    }
    let mut by_rank = Vec::with_capacity(n);
    for _ in 0..n {
        let s = r.uvarint().map_err(|e| e.to_string())?;
        if s >= nodes {
            return Err(format!("a stack rank names node {s} of {nodes}"));
        }
        by_rank.push(s as u32);
    }
    if !r.is_empty() {
        return Err("bytes after the stack ranks".into());
    }
    Ok(by_rank)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(t: u32, stack: u32) -> Row {
        Row { t, stack, value: 1 }
    }

    #[test]
    fn popular_stacks_get_small_ranks_and_the_table_round_trips() {
        // Stack 40 in every step, 7 in half of them, 3 once.
        let rows: Vec<Row> = (0..16u32)
            .flat_map(|t| {
                let mut r = vec![row(t, 40)];
                if t % 2 == 0 {
                    r.push(row(t, 7));
                }
                if t == 5 {
                    r.push(row(t, 3));
                }
                r
            })
            .collect();
        let ranks = StackRanks::of(std::iter::once(&rows[..]), 41).expect("25 rows, 3 stacks");
        // A row naming a node past the tree: no ranks.
        assert!(StackRanks::of(std::iter::once(&rows[..]), 40).is_none());
        assert_eq!(ranks.by_rank, vec![40, 7, 3]);
        let ranked = ranks.ranked(&rows);
        assert_eq!(&ranked[..3], &[row(0, 0), row(0, 1), row(1, 0)]);
        assert!(ranked.contains(&row(5, 2)));
        assert_eq!(decode(&ranks.encode(), 41).unwrap(), vec![40, 7, 3]);

        // A table naming a node the tree lacks, or longer than the tree, or with
        // bytes after it, is refused.
        assert!(decode(&ranks.encode(), 40).unwrap_err().contains("node 40"));
        let mut long = Vec::new();
        put_uvarint(&mut long, 5);
        long.extend([0; 5]);
        assert!(decode(&long, 4).unwrap_err().contains("5 stack ranks"));
        assert_eq!(decode(&long, 5).unwrap(), vec![0; 5]);
        let mut trailing = ranks.encode();
        trailing.push(0);
        assert!(decode(&trailing, 41).is_err());
    }

    #[test]
    fn few_rows_per_stack_keep_node_ids() {
        let rows: Vec<Row> = (0..40u32).map(|i| row(i / 8, i)).collect();
        assert!(StackRanks::of(std::iter::once(&rows[..]), 40).is_none());
        assert!(StackRanks::of(std::iter::empty(), 40).is_none());
    }
}
