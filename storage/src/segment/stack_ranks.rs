//! Stack ranks (format versions 4 and 5): rows name their stack by its rank,
//! most frequent first, instead of by its node id.
//!
//! Node ids follow the tree (depth first), so the stacks one profile samples are
//! scattered over the whole range of its service's nodes: a row's stack id delta
//! was the largest part of a segment after zstd. Sampled stacks follow a steep
//! popularity curve, and a profile mostly holds the popular ones: numbered by
//! popularity, the stacks of one step are small numbers close together, and their
//! deltas compress better (and the values, now in popularity order too). Figures:
//! docs/perf-log/2026-11-27-round-15-stack-ranks.md and the round-16 file after it.
//!
//! Version 5 ranks each *group* of neighbouring series apart: the writer groups
//! series by profile type and service. A service's profiles sample that
//! service's stacks only, and ranked among the whole segment's its ranks were
//! spread over ten times the range: ranked per service, the stack deltas
//! compress better again. The tables hold as many
//! entries as before (services rarely share stacks), about 3 bytes each, so a
//! group only gets one when it has many rows per stack ([`MIN_ROWS_PER_STACK`]);
//! an hour of a fleet pushing twice an hour has about as many stacks as rows,
//! and keeps node ids.
//!
//! Section `StackRanks`: version 4 holds one table for every series, `uvarint
//! n`, then `n × uvarint node`, the stack node of each rank. Version 5 holds
//! `uvarint groups`, then per group `uvarint series` (the number of
//! consecutive series it covers, starting where the previous group ended),
//! `uvarint n` and `n × uvarint node`; `n = 0` leaves the group's rows naming
//! nodes. Decoded rows name nodes again (`rows.rs` maps them), so nothing above
//! the segment reader sees ranks.

use std::ops::Range;

use super::writer::Row;
use crate::codec::{put_uvarint, Reader};

/// A group gets a ranks table from this many rows per distinct stack: below it
/// the table (≈ 3 bytes a stack) costs more than the rows save (≈ 0.6 bytes a
/// row on the bench fleet).
pub(super) const MIN_ROWS_PER_STACK: usize = 8;

/// The first format version whose ranks tables each cover a group of series.
const GROUPED_SINCE: u16 = 5;

/// The ranks of a segment being written: a table per group of series.
pub(super) struct StackRanks {
    groups: Vec<Group>,
    /// By node id, the rank of each stack of group `loaded`; `u32::MAX` for
    /// nodes it does not name. One group's at a time: series are ranked in order.
    rank_of: Vec<u32>,
    loaded: Option<usize>,
}

struct Group {
    series: Range<usize>,
    /// Its stacks, most frequent first; empty when its rows keep node ids.
    by_rank: Vec<u32>,
}

impl StackRanks {
    /// Ranks for each of `groups` (consecutive ranges covering the series in
    /// order) of the rows `rows_of` gives per series, whose stacks are node ids
    /// below `nodes`: stacks by descending row count, ties by node id. A group
    /// with too few rows per stack to gain keeps node ids; `None` when every
    /// group does, or when a row names a node past the tree.
    pub(super) fn of<'a>(
        groups: impl IntoIterator<Item = Range<usize>>,
        rows_of: impl Fn(usize) -> &'a [Row],
        nodes: usize,
    ) -> Option<StackRanks> {
        let mut count = vec![0u64; nodes];
        let mut out = Vec::new();
        for series in groups {
            let mut used: Vec<u32> = Vec::new();
            let mut rows = 0usize;
            for r in series.clone().flat_map(&rows_of) {
                // The writer's rows name nodes of its tree; any other is left
                // unranked and the segment keeps node ids.
                let c = count.get_mut(r.stack as usize)?;
                if *c == 0 {
                    used.push(r.stack);
                }
                *c += 1;
                rows += 1;
            }
            let mut by_count: Vec<(u64, u32)> =
                used.iter().map(|&s| (count[s as usize], s)).collect();
            for &s in &used {
                count[s as usize] = 0;
            }
            let by_rank = if by_count.is_empty()
                || rows < MIN_ROWS_PER_STACK.saturating_mul(by_count.len())
            {
                Vec::new()
            } else {
                by_count.sort_unstable_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
                by_count.into_iter().map(|(_, s)| s).collect()
            };
            out.push(Group { series, by_rank });
        }
        if out.iter().all(|g| g.by_rank.is_empty()) {
            return None;
        }
        Some(StackRanks {
            groups: out,
            rank_of: vec![u32::MAX; nodes],
            loaded: None,
        })
    }

    /// The group of `series` if it has a table.
    fn table_of(&self, series: usize) -> Option<usize> {
        let g = self.groups.partition_point(|g| g.series.end <= series);
        self.groups
            .get(g)
            .filter(|g| g.series.contains(&series) && !g.by_rank.is_empty())
            .map(|_| g)
    }

    /// The rows of `series` (in step order) with each stack replaced by its
    /// rank, in `(t, rank)` order: what the row columns store; `None` when its
    /// group keeps node ids. Only each step's rows are sorted, a few dozen at a
    /// time, not the series.
    pub(super) fn ranked(&mut self, series: usize, rows: &[Row]) -> Option<Vec<Row>> {
        debug_assert!(rows.windows(2).all(|w| w[0].t <= w[1].t));
        let g = self.table_of(series)?;
        if self.loaded != Some(g) {
            if let Some(old) = self.loaded {
                for &s in &self.groups[old].by_rank {
                    self.rank_of[s as usize] = u32::MAX;
                }
            }
            for (rank, &s) in self.groups[g].by_rank.iter().enumerate() {
                self.rank_of[s as usize] = rank as u32;
            }
            self.loaded = Some(g);
        }
        let mut out: Vec<Row> = rows
            .iter()
            .map(|r| Row {
                // Every stack of the group's rows has a rank (see `of`).
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
        Some(out)
    }

    /// The `StackRanks` section in format `version`: before version 5 the
    /// writer makes one group of every series, and its table is the section.
    pub(super) fn encode(&self, version: u16) -> Vec<u8> {
        let entries: usize = self.groups.iter().map(|g| g.by_rank.len()).sum();
        let mut out = Vec::with_capacity(3 * entries + 3 * self.groups.len() + 8);
        let put_table = |out: &mut Vec<u8>, by_rank: &[u32]| {
            put_uvarint(out, by_rank.len() as u64);
            for &s in by_rank {
                put_uvarint(out, u64::from(s));
            }
        };
        if version < GROUPED_SINCE {
            debug_assert_eq!(self.groups.len(), 1);
            put_table(&mut out, self.groups.first().map_or(&[], |g| &g.by_rank));
            return out;
        }
        put_uvarint(&mut out, self.groups.len() as u64);
        for g in &self.groups {
            put_uvarint(&mut out, g.series.len() as u64);
            put_table(&mut out, &g.by_rank);
        }
        out
    }
}

/// A segment's ranks tables as read: which series each covers, and the stack
/// node of each rank.
#[derive(Debug)]
pub(super) struct RankTables {
    /// The series each group ends before, ascending.
    ends: Box<[usize]>,
    /// Per group; empty for a group whose rows name nodes.
    tables: Box<[Box<[u32]>]>,
}

impl RankTables {
    /// The stack node of each rank the rows of `series` name; `None` when they
    /// name nodes.
    pub(super) fn of_series(&self, series: usize) -> Option<&[u32]> {
        let g = self.ends.partition_point(|&e| e <= series);
        self.tables.get(g).filter(|t| !t.is_empty()).map(|t| &t[..])
    }

    /// Heap bytes held.
    pub(super) fn held_bytes(&self) -> usize {
        self.ends.len() * std::mem::size_of::<usize>()
            + self
                .tables
                .iter()
                .map(|t| t.len() * 4 + std::mem::size_of::<Box<[u32]>>())
                .sum::<usize>()
    }
}

/// The tables of a `StackRanks` section of a format `version` segment with
/// `series` series and a tree of `nodes` nodes; an error names what is wrong.
pub(super) fn decode(
    raw: &[u8],
    nodes: u64,
    series: usize,
    version: u16,
) -> std::result::Result<RankTables, String> {
    let mut r = Reader::new(raw, "stack ranks");
    let table = |r: &mut Reader<'_>| -> std::result::Result<Box<[u32]>, String> {
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
        Ok(by_rank.into_boxed_slice())
    };
    let (ends, tables) = if version < GROUPED_SINCE {
        let t = table(&mut r)?;
        if t.is_empty() {
            return Err("an empty stack ranks table".into());
        }
        (vec![series], vec![t])
    } else {
        let groups = r.count(2).map_err(|e| e.to_string())?;
        let (mut ends, mut tables) = (Vec::with_capacity(groups), Vec::with_capacity(groups));
        let mut end = 0usize;
        for _ in 0..groups {
            let n = r.uvarint().map_err(|e| e.to_string())?;
            end = usize::try_from(n)
                .ok()
                .filter(|&n| n > 0)
                .and_then(|n| end.checked_add(n))
                .filter(|&e| e <= series)
                .ok_or_else(|| {
                    format!("stack rank groups cover more than the segment's {series} series")
                })?;
            ends.push(end);
            tables.push(table(&mut r)?);
        }
        if end != series {
            return Err(format!(
                "stack rank groups cover {end} of the segment's {series} series"
            ));
        }
        (ends, tables)
    };
    if !r.is_empty() {
        return Err("bytes after the stack ranks".into());
    }
    Ok(RankTables {
        ends: ends.into_boxed_slice(),
        tables: tables.into_boxed_slice(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(t: u32, stack: u32) -> Row {
        Row { t, stack, value: 1 }
    }

    /// 16 steps: stack `a` in every one, `b` in half of them, `c` once.
    fn steps(a: u32, b: u32, c: u32) -> Vec<Row> {
        (0..16u32)
            .flat_map(|t| {
                let mut r = vec![row(t, a)];
                if t % 2 == 0 {
                    r.push(row(t, b));
                }
                if t == 5 {
                    r.push(row(t, c));
                }
                r
            })
            .collect()
    }

    #[test]
    fn popular_stacks_get_small_ranks_and_the_table_round_trips() {
        let rows = steps(40, 7, 3);
        let one = |nodes| StackRanks::of(std::iter::once(0..1), |_| &rows[..], nodes);
        let mut ranks = one(41).expect("25 rows, 3 stacks");
        // A row naming a node past the tree: no ranks.
        assert!(one(40).is_none());
        assert_eq!(ranks.groups[0].by_rank, vec![40, 7, 3]);
        let ranked = ranks.ranked(0, &rows).unwrap();
        assert_eq!(&ranked[..3], &[row(0, 0), row(0, 1), row(1, 0)]);
        assert!(ranked.contains(&row(5, 2)));
        for version in [4, 5] {
            let tables = decode(&ranks.encode(version), 41, 1, version).unwrap();
            assert_eq!(tables.of_series(0), Some(&[40, 7, 3][..]), "v{version}");
            // A table naming a node the tree lacks is refused.
            let why = decode(&ranks.encode(version), 40, 1, version).unwrap_err();
            assert!(why.contains("node 40"), "{why}");
            let mut trailing = ranks.encode(version);
            trailing.push(0);
            assert!(decode(&trailing, 41, 1, version).is_err());
        }
        // A table longer than the tree, or empty in version 4, is refused.
        let mut long = Vec::new();
        put_uvarint(&mut long, 5);
        long.extend([0; 5]);
        assert!(decode(&long, 4, 1, 4)
            .unwrap_err()
            .contains("5 stack ranks"));
        assert_eq!(
            decode(&long, 5, 1, 4).unwrap().of_series(0),
            Some(&[0; 5][..])
        );
        assert!(decode(&[0], 5, 1, 4).unwrap_err().contains("empty"));
    }

    /// Each group ranks its own stacks from 0; a group with few rows per stack
    /// keeps node ids, and its series' rows are stored as they are.
    #[test]
    fn groups_rank_their_own_stacks_and_a_sparse_group_keeps_node_ids() {
        let series = [
            steps(40, 7, 3),
            steps(9, 8, 40),
            steps(1, 2, 3),
            vec![row(0, 5), row(1, 6)],
        ];
        let mut ranks = StackRanks::of([0..1, 1..3, 3..4], |s| &series[s][..], 41).unwrap();
        assert_eq!(
            (0..4).map(|s| ranks.table_of(s)).collect::<Vec<_>>(),
            vec![Some(0), Some(1), Some(1), None]
        );
        // Group 1: 9 and 1 in every step of two series, 8 and 2 in half, 40 and 3 once.
        assert_eq!(ranks.groups[1].by_rank, vec![1, 9, 2, 8, 3, 40]);
        let first = |r: Vec<Row>| r.into_iter().take(2).collect::<Vec<_>>();
        assert_eq!(
            first(ranks.ranked(1, &series[1]).unwrap()),
            [row(0, 1), row(0, 3)]
        );
        // Back to group 0 after group 1: its table is loaded again, alone.
        assert_eq!(
            first(ranks.ranked(0, &series[0]).unwrap()),
            [row(0, 0), row(0, 1)]
        );
        assert_eq!(
            first(ranks.ranked(2, &series[2]).unwrap()),
            [row(0, 0), row(0, 2)]
        );
        assert!(ranks.ranked(3, &series[3]).is_none());

        let tables = decode(&ranks.encode(5), 41, 4, 5).unwrap();
        assert_eq!(tables.of_series(0), Some(&[40, 7, 3][..]));
        assert_eq!(tables.of_series(1), tables.of_series(2));
        assert_eq!(tables.of_series(2), Some(&[1, 9, 2, 8, 3, 40][..]));
        assert_eq!(tables.of_series(3), None);
        // Groups must cover the series exactly, each at least one.
        for (series, why) in [(3, "more than"), (5, "cover 4 of")] {
            let e = decode(&ranks.encode(5), 41, series, 5).unwrap_err();
            assert!(e.contains(why), "{e}");
        }
        let empty_group = [1, 0, 0];
        assert!(decode(&empty_group, 41, 1, 5).is_err());
    }

    #[test]
    fn few_rows_per_stack_keep_node_ids() {
        let rows: Vec<Row> = (0..40u32).map(|i| row(i / 8, i)).collect();
        assert!(StackRanks::of(std::iter::once(0..1), |_| &rows[..], 40).is_none());
        assert!(StackRanks::of([], |_| &rows[..], 40).is_none());
    }
}
