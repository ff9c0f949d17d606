//! A loaded segment's rows: the three row columns as held at load (decompressed
//! whole in versions 1 and 2, one compressed frame per chunk in version 3), decoded
//! into flat arrays a chunk of series at a time, when a query first reads one.
//!
//! Decoding every row at load made the first query after a restart pay for the
//! whole segment: an hour of a fleet is millions of rows when a flame graph of one
//! service reads a small part of them
//! (docs/perf-log/2026-11-26-round-07-first-query-rows-by-chunk.md). Series are
//! written in profile-type and service order, so a selector's series sit in a few
//! neighbouring chunks and only those are decoded.
//!
//! A series may name an earlier one whose rows it repeats (version 3): one pprof
//! with several sample types (samples and CPU nanoseconds; four allocation types)
//! gives series with the same times and stacks and, once each is divided by its
//! scale, the same values. Every profile with several sample types gives such
//! repeats; they are stored once and decoded by copying.

use std::ops::Range;
use std::sync::OnceLock;

use super::stack_ranks::RankTables;
use super::zstd_frames::Column;
use crate::codec::Reader;
use crate::error::{Result, StorageError};

/// Where one series' rows are in the three columns (times, stack ids, values).
#[derive(Clone, Copy, Debug)]
pub(super) struct RowRange {
    pub(super) rows: u64,
    /// Offset of the series' first byte in each column (decompressed).
    pub(super) start: [usize; 3],
    /// Its bytes in each column (0 for a repeat).
    pub(super) len: [usize; 3],
    /// Stored values are the values divided by this.
    pub(super) scale: i64,
    /// The earlier series whose stored rows these are, if any.
    pub(super) repeats: Option<u32>,
}

/// The row columns as held and the chunks decoded so far.
#[derive(Debug)]
pub(super) struct Rows {
    segment: u64,
    ranges: Vec<RowRange>,
    columns: [Column; 3],
    chunk_series: usize,
    /// Stack node ids must be below this.
    nodes: u64,
    /// The stack node of each rank, for series whose StackIds hold ranks
    /// (versions 4 and 5).
    ranks: Option<RankTables>,
    total_rows: u64,
    chunks: Box<[OnceLock<std::result::Result<Chunk, String>>]>,
}

/// The rows of `chunk_series` consecutive series, decoded; series `first + i` has
/// rows `starts[i]..starts[i + 1]`, in `(time, stack)` order.
#[derive(Debug)]
struct Chunk {
    starts: Vec<usize>,
    steps: Vec<u32>,
    stacks: Vec<u32>,
    values: Vec<i64>,
}

/// Rows of one series in a decoded chunk.
pub(super) struct SeriesRows<'a> {
    pub(super) steps: &'a [u32],
    pub(super) stacks: &'a [u32],
    pub(super) values: &'a [i64],
}

impl Rows {
    /// Checks that the ranges cover the columns exactly, that repeats name an
    /// earlier series with rows of its own and as many of them, and that frames
    /// match the chunks; rows are checked when their chunk is decoded.
    pub(super) fn new(
        segment: u64,
        ranges: Vec<RowRange>,
        columns: [Column; 3],
        chunk_series: usize,
        nodes: u64,
        ranks: Option<RankTables>,
    ) -> std::result::Result<Rows, String> {
        let mut at = [0usize; 3];
        let mut total = 0u64;
        for (i, r) in ranges.iter().enumerate() {
            if r.start != at {
                return Err("row ranges are not contiguous".into());
            }
            match r.repeats {
                Some(j) => {
                    let Some(src) = ranges.get(j as usize).filter(|_| (j as usize) < i) else {
                        return Err(format!("series {i} repeats a series not before it"));
                    };
                    if src.repeats.is_some() || src.rows != r.rows || r.len != [0; 3] {
                        return Err(format!("series {i} repeats series {j} inconsistently"));
                    }
                }
                // Every row takes at least one byte in each column, so a corrupt
                // count cannot size an allocation beyond the file.
                None if r.len.iter().any(|&l| r.rows > l as u64) => {
                    return Err("a series has more rows than bytes in its columns".into());
                }
                None => {}
            }
            total = total.saturating_add(r.rows);
            for (a, l) in at.iter_mut().zip(r.len) {
                *a = a.saturating_add(l);
            }
        }
        if at != columns.each_ref().map(Column::raw_len) {
            return Err("row ranges do not cover the columns".into());
        }
        let chunks = ranges.len().div_ceil(chunk_series);
        for (c, col) in columns.iter().enumerate() {
            if let Some(lens) = col.frame_raw_lens() {
                if lens.len() != chunks {
                    return Err(format!(
                        "{} frames for {chunks} chunks of series",
                        lens.len()
                    ));
                }
                for (k, len) in lens.into_iter().enumerate() {
                    if len != chunk_span(&ranges, chunk_series, k, c).len() {
                        return Err(format!("frame {k} does not hold its series' bytes"));
                    }
                }
            }
        }
        Ok(Rows {
            segment,
            ranges,
            columns,
            chunk_series,
            nodes,
            ranks,
            total_rows: total,
            chunks: (0..chunks).map(|_| OnceLock::new()).collect(),
        })
    }

    pub(super) fn total_rows(&self) -> u64 {
        self.total_rows
    }

    /// The rows of `series`, decoding its chunk on first use; `None` for a series
    /// the segment lacks.
    pub(super) fn series(&self, series: u32) -> Result<Option<SeriesRows<'_>>> {
        let s = series as usize;
        if s >= self.ranges.len() {
            return Ok(None);
        }
        let (chunk, i) = self.chunk_of(s)?;
        let (a, b) = (chunk.starts[i], chunk.starts[i + 1]);
        Ok(Some(SeriesRows {
            steps: &chunk.steps[a..b],
            stacks: &chunk.stacks[a..b],
            values: &chunk.values[a..b],
        }))
    }

    /// Decodes every chunk not decoded yet, calling `pause` before each.
    pub(super) fn decode_all(&self, mut pause: impl FnMut()) -> Result<()> {
        for k in 0..self.chunks.len() {
            pause();
            self.chunk_of(k * self.chunk_series)?;
        }
        Ok(())
    }

    /// The decoded chunk holding series `s` (which must exist) and its position there.
    fn chunk_of(&self, s: usize) -> Result<(&Chunk, usize)> {
        let k = s / self.chunk_series;
        let chunk = self.chunks[k]
            .get_or_init(|| self.decode(k))
            .as_ref()
            .map_err(|why| {
                StorageError::Corrupt(format!("segment {}: rows: {why}", self.segment))
            })?;
        Ok((chunk, s - k * self.chunk_series))
    }

    /// Heap bytes once every chunk is decoded (what the cache charges up front,
    /// so decoding later never takes it past its budget): the columns as held
    /// plus 16 bytes a row.
    pub(super) fn approx_bytes(&self) -> usize {
        self.columns.iter().map(Column::held_bytes).sum::<usize>()
            + self.ranges.len() * (std::mem::size_of::<RowRange>() + 8)
            + self.total_rows as usize * 16
            + self.ranks.as_ref().map_or(0, RankTables::held_bytes)
    }

    fn decode(&self, k: usize) -> std::result::Result<Chunk, String> {
        let first = k * self.chunk_series;
        let series = first..(first + self.chunk_series).min(self.ranges.len());
        let ranges = &self.ranges[series.clone()];
        let cap = ranges.iter().map(|r| r.rows as usize).sum();
        let mut out = Chunk {
            starts: Vec::with_capacity(ranges.len() + 1),
            steps: Vec::with_capacity(cap),
            stacks: Vec::with_capacity(cap),
            values: Vec::with_capacity(cap),
        };
        let spans: [Range<usize>; 3] =
            std::array::from_fn(|c| chunk_span(&self.ranges, self.chunk_series, k, c));
        let [times, stacks, values] = [0, 1, 2].map(|c| self.columns[c].chunk(k, spans[c].clone()));
        let (times, stacks, values) = (times?, stacks?, values?);
        let err = |e: StorageError| e.to_string();
        let mut tr = Reader::new(&times, "times column");
        let mut sr = Reader::new(&stacks, "stack ids column");
        let mut vr = Reader::new(&values, "values column");
        for (i, range) in ranges.iter().enumerate() {
            out.starts.push(out.steps.len());
            if let Some(j) = range.repeats {
                self.copy_repeat(&mut out, j as usize, &series, range.scale)?;
                continue;
            }
            let ranks = self.ranks.as_ref().and_then(|r| r.of_series(first + i));
            let [ts, ss, vs] = range.start;
            tr.seek(ts - spans[0].start).map_err(err)?;
            sr.seek(ss - spans[1].start).map_err(err)?;
            vr.seek(vs - spans[2].start).map_err(err)?;
            let (mut t, mut stack) = (0u64, 0u64);
            for r in 0..range.rows {
                let dt = tr.uvarint().map_err(err)?;
                let ds = sr.uvarint().map_err(err)?;
                let v = vr
                    .ivarint()
                    .map_err(err)?
                    .checked_mul(range.scale)
                    .ok_or("a row value overflows once scaled")?;
                let same_step = r > 0 && dt == 0;
                t = t.saturating_add(dt);
                stack = if same_step {
                    stack.saturating_add(ds)
                } else {
                    ds
                };
                // `stack` is what the column holds (a rank with a ranks table);
                // rows hold the node.
                let node = match ranks {
                    Some(ranks) => usize::try_from(stack)
                        .ok()
                        .and_then(|r| ranks.get(r))
                        .map(|&n| u64::from(n))
                        .ok_or_else(|| {
                            format!("row refers to stack rank {stack} of {}", ranks.len())
                        })?,
                    None => stack,
                };
                if node >= self.nodes {
                    return Err(format!("row refers to stack node {node} of {}", self.nodes));
                }
                if t > u64::from(u32::MAX) {
                    return Err(format!("row step {t} out of range"));
                }
                out.steps.push(t as u32);
                out.stacks.push(node as u32);
                out.values.push(v);
            }
            debug_assert_eq!(out.steps.len() - out.starts[i], range.rows as usize);
        }
        out.starts.push(out.steps.len());
        Ok(out)
    }

    /// Appends to `out` the rows of series `j`, an earlier series (in this chunk,
    /// `series`, or an earlier chunk), with values rescaled to `scale`.
    fn copy_repeat(
        &self,
        out: &mut Chunk,
        j: usize,
        series: &Range<usize>,
        scale: i64,
    ) -> std::result::Result<(), String> {
        let from_scale = self.ranges[j].scale;
        let rescale = |v: i64| {
            if scale == from_scale {
                Some(v)
            } else {
                (v / from_scale).checked_mul(scale)
            }
        };
        if series.contains(&j) {
            let i = j - series.start;
            let (a, b) = (out.starts[i], out.starts[i + 1]);
            out.steps.extend_from_within(a..b);
            out.stacks.extend_from_within(a..b);
            for x in a..b {
                let v = rescale(out.values[x]).ok_or("a row value overflows once scaled")?;
                out.values.push(v);
            }
        } else {
            let (src, i) = self.chunk_of(j).map_err(|e| e.to_string())?;
            let (a, b) = (src.starts[i], src.starts[i + 1]);
            out.steps.extend_from_slice(&src.steps[a..b]);
            out.stacks.extend_from_slice(&src.stacks[a..b]);
            for &v in &src.values[a..b] {
                out.values
                    .push(rescale(v).ok_or("a row value overflows once scaled")?);
            }
        }
        Ok(())
    }
}

/// The bytes of column `c` that chunk `k`'s series hold.
fn chunk_span(ranges: &[RowRange], chunk_series: usize, k: usize, c: usize) -> Range<usize> {
    let first = k * chunk_series;
    let end = (first + chunk_series).min(ranges.len());
    match ranges.get(first) {
        Some(r) => {
            let last = &ranges[end - 1];
            r.start[c]..last.start[c] + last.len[c]
        }
        None => 0..0,
    }
}

#[cfg(test)]
mod tests {
    use super::super::zstd_frames::{self, CHUNK_SERIES};
    use super::*;
    use crate::codec::{put_ivarint, put_uvarint};

    fn whole(cols: [Vec<u8>; 3]) -> [Column; 3] {
        cols.map(Column::Whole)
    }

    /// Columns and ranges for `series`, each a list of `(step, stack, value)` rows
    /// in `(step, stack)` order, encoded as the writer does.
    fn encode(series: &[Vec<(u64, u64, i64)>]) -> (Vec<RowRange>, [Vec<u8>; 3]) {
        let mut cols: [Vec<u8>; 3] = Default::default();
        let mut ranges = Vec::new();
        for rows in series {
            let start = [cols[0].len(), cols[1].len(), cols[2].len()];
            let (mut t0, mut s0) = (0, 0);
            for (i, &(t, s, v)) in rows.iter().enumerate() {
                put_uvarint(&mut cols[0], t - t0);
                let same_step = i > 0 && t == t0;
                put_uvarint(&mut cols[1], if same_step { s - s0 } else { s });
                put_ivarint(&mut cols[2], v);
                (t0, s0) = (t, s);
            }
            let len = [
                cols[0].len() - start[0],
                cols[1].len() - start[1],
                cols[2].len() - start[2],
            ];
            ranges.push(RowRange {
                rows: rows.len() as u64,
                start,
                len,
                scale: 1,
                repeats: None,
            });
        }
        (ranges, cols)
    }

    fn read(rows: &Rows, s: u32) -> Result<Option<Vec<(u32, u32, i64)>>> {
        Ok(rows.series(s)?.map(|r| {
            r.steps
                .iter()
                .zip(r.stacks)
                .zip(r.values)
                .map(|((&t, &st), &v)| (t, st, v))
                .collect()
        }))
    }

    /// Each series reads back its own rows, whichever chunk it is in and in
    /// whatever order the chunks are first read.
    #[test]
    fn series_read_back_from_their_chunks_in_any_order() {
        let n = CHUNK_SERIES * 2 + 3;
        let series: Vec<Vec<(u64, u64, i64)>> = (0..n as u64)
            .map(|s| {
                (0..s % 4)
                    .map(|i| (i, (s + i) % 7, s as i64 * 10 + i as i64))
                    .collect()
            })
            .collect();
        let (ranges, cols) = encode(&series);
        let rows = Rows::new(1, ranges, whole(cols), CHUNK_SERIES, 7, None).unwrap();
        assert_eq!(
            rows.total_rows(),
            series.iter().map(|s| s.len() as u64).sum::<u64>()
        );
        for s in (0..n).rev().chain(0..n) {
            let want: Vec<(u32, u32, i64)> = series[s]
                .iter()
                .map(|&(t, st, v)| (t as u32, st as u32, v))
                .collect();
            assert_eq!(read(&rows, s as u32).unwrap(), Some(want), "series {s}");
        }
        assert!(read(&rows, n as u32).unwrap().is_none());
    }

    /// With a ranks table, the stack column holds ranks and rows read back the
    /// nodes they name; a rank past the table fails the chunk.
    #[test]
    fn ranked_stacks_read_back_as_nodes() {
        // Ranks 0, 1 in step 0 and rank 0 in step 1; the table says node 6, node 2.
        let (ranges, cols) = encode(&[vec![(0, 0, 5), (0, 1, 3), (1, 0, 4)]]);
        let table = |nodes: &[u64]| {
            let mut raw = Vec::new();
            put_uvarint(&mut raw, nodes.len() as u64);
            nodes.iter().for_each(|&n| put_uvarint(&mut raw, n));
            super::super::stack_ranks::decode(&raw, 7, 1, 4).unwrap()
        };
        let rows = Rows::new(
            1,
            ranges.clone(),
            whole(cols.clone()),
            CHUNK_SERIES,
            7,
            Some(table(&[6, 2])),
        )
        .unwrap();
        assert_eq!(
            read(&rows, 0).unwrap(),
            Some(vec![(0, 6, 5), (0, 2, 3), (1, 6, 4)])
        );
        let short = Rows::new(9, ranges, whole(cols), CHUNK_SERIES, 7, Some(table(&[6]))).unwrap();
        match read(&short, 0) {
            Err(StorageError::Corrupt(why)) => assert!(why.contains("stack rank 1 of 1"), "{why}"),
            other => panic!("{other:?}"),
        }
    }

    /// A row naming a stack node the tree lacks fails its own chunk, every time
    /// it is read, and no other chunk.
    #[test]
    fn a_bad_row_fails_its_chunk_only() {
        let n = CHUNK_SERIES * 2;
        let mut series: Vec<Vec<(u64, u64, i64)>> = (0..n).map(|_| vec![(0, 1, 5)]).collect();
        series[CHUNK_SERIES + 3] = vec![(0, 9, 5)];
        let (ranges, cols) = encode(&series);
        let rows = Rows::new(42, ranges, whole(cols), CHUNK_SERIES, 4, None).unwrap();
        assert_eq!(read(&rows, 0).unwrap(), Some(vec![(0, 1, 5)]));
        for _ in 0..2 {
            match read(&rows, CHUNK_SERIES as u32) {
                Err(StorageError::Corrupt(why)) => {
                    assert!(
                        why.contains("segment 42") && why.contains("stack node 9 of 4"),
                        "{why}"
                    )
                }
                other => panic!("expected a corrupt chunk, got {other:?}"),
            }
        }
        assert_eq!(
            read(&rows, CHUNK_SERIES as u32 - 1).unwrap(),
            Some(vec![(0, 1, 5)])
        );
    }

    /// Ranges that leave bytes over, overlap, or claim more rows than bytes are
    /// refused at load, before any chunk is sized from them.
    #[test]
    fn inconsistent_ranges_are_refused_at_load() {
        let (ranges, cols) = encode(&[vec![(0, 1, 5), (1, 1, 6)], vec![(0, 2, 7)]]);
        let mut more = ranges.clone();
        more[1].rows = 1 << 40;
        assert!(
            Rows::new(1, more, whole(cols.clone()), CHUNK_SERIES, 4, None)
                .unwrap_err()
                .contains("more rows than bytes")
        );
        let mut gap = ranges.clone();
        gap[1].start[2] += 1;
        assert!(
            Rows::new(1, gap, whole(cols.clone()), CHUNK_SERIES, 4, None)
                .unwrap_err()
                .contains("not contiguous")
        );
        assert!(
            Rows::new(1, ranges[..1].to_vec(), whole(cols), CHUNK_SERIES, 4, None)
                .unwrap_err()
                .contains("do not cover")
        );
    }

    /// Framed columns with repeats inside a chunk and across chunks, at other
    /// scales: every series reads back its own values, in any order.
    #[test]
    fn repeats_and_frames_read_back_exact() {
        let cs = 3;
        let own: Vec<(u64, u64, i64)> = vec![(0, 1, 2), (0, 4, 3), (5, 2, 7)];
        let (mut ranges, cols) = encode(&[own.clone(), vec![(1, 1, 1)]]);
        ranges[0].scale = 10;
        let own_len = ranges[0].len;
        let other = ranges[1];
        // Series 0 own rows (scale 10), 1 another's, 2 repeats 0 at scale 3 (same
        // chunk), 3 and 5 repeat 0 and 1 from the next chunk, 4 empty.
        let at = [own_len[0], own_len[1], own_len[2]];
        let rep = |j: u32, rows: u64, scale: i64| RowRange {
            rows,
            start: [
                at[0] + other.len[0],
                at[1] + other.len[1],
                at[2] + other.len[2],
            ],
            len: [0; 3],
            scale,
            repeats: Some(j),
        };
        ranges.push(rep(0, 3, 3));
        ranges.push(rep(0, 3, 1));
        ranges.push(RowRange {
            rows: 0,
            ..rep(0, 0, 1)
        });
        ranges[4].repeats = None;
        ranges.push(rep(1, 1, 5));
        let bounds = |c: usize| vec![0, cols[c].len(), cols[c].len()];
        let framed: [Column; 3] = std::array::from_fn(|c| {
            let stored = zstd_frames::encode(&cols[c], &bounds(c), cs, 3).unwrap();
            zstd_frames::Column::framed(stored.into(), cols[c].len() as u64)
                .unwrap()
                .0
        });
        let rows = Rows::new(1, ranges, framed, cs, 5, None).unwrap();
        let scaled = |f: i64| -> Vec<(u32, u32, i64)> {
            own.iter()
                .map(|&(t, s, v)| (t as u32, s as u32, v * f))
                .collect()
        };
        for s in [5, 3, 0, 2, 1, 4] {
            let want = match s {
                0 => scaled(10),
                1 => vec![(1, 1, 1)],
                2 => scaled(3),
                3 => scaled(1),
                4 => vec![],
                _ => vec![(1, 1, 5)],
            };
            assert_eq!(read(&rows, s).unwrap(), Some(want), "series {s}");
        }
        assert_eq!(rows.total_rows(), 3 + 1 + 3 + 3 + 1);
    }

    /// A repeat must name an earlier series with rows of its own, as many.
    #[test]
    fn inconsistent_repeats_are_refused_at_load() {
        let (ranges, cols) = encode(&[vec![(0, 1, 5), (1, 1, 6)], vec![(0, 2, 7)]]);
        let end = [cols[0].len(), cols[1].len(), cols[2].len()];
        let rep = |j: u32, rows: u64| RowRange {
            rows,
            start: end,
            len: [0; 3],
            scale: 1,
            repeats: Some(j),
        };
        let load = |extra: Vec<RowRange>| {
            let mut r = ranges.clone();
            r.extend(extra);
            Rows::new(1, r, whole(cols.clone()), CHUNK_SERIES, 4, None)
        };
        assert!(load(vec![rep(0, 2)]).is_ok());
        assert!(load(vec![rep(0, 1)])
            .unwrap_err()
            .contains("inconsistently"));
        assert!(load(vec![rep(2, 2)]).unwrap_err().contains("not before it"));
        assert!(load(vec![rep(0, 2), rep(2, 2)])
            .unwrap_err()
            .contains("inconsistently"));
        let mut with_bytes = rep(1, 1);
        with_bytes.len = [1, 0, 0];
        assert!(load(vec![with_bytes]).is_err());
    }
}
