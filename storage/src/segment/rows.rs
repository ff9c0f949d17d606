//! A loaded segment's rows: the three row columns as decompressed at load, decoded
//! into flat arrays a chunk of series at a time, when a query first reads one.
//!
//! Decoding every row at load made the first query after a restart pay for the
//! whole segment: the last hour of the bench fleet is 10.5 M rows (168 MB once
//! decoded) when a flame graph of one service reads a fortieth of them. Series are
//! written in profile-type and service order, so a selector's series sit in a few
//! neighbouring chunks and only those are decoded; the rest stay as varints
//! (about 4 bytes a row instead of 16) until something reads them.

use std::ops::Range;
use std::sync::OnceLock;

use crate::codec::Reader;
use crate::error::{Result, StorageError};

/// Series per chunk: small enough that a service's series of one profile type
/// decode little else, large enough that a chunk is tens of thousands of rows.
const CHUNK_SERIES: usize = 16;

/// Where one series' rows are in the three columns (times, stack ids, values).
#[derive(Clone, Copy, Debug)]
pub(super) struct RowRange {
    pub(super) rows: u64,
    /// Offset of the series' first byte in each column.
    pub(super) start: [usize; 3],
    /// Its bytes in each column.
    pub(super) len: [usize; 3],
    /// Stored values are the values divided by this.
    pub(super) scale: i64,
}

/// The row columns as stored (varints, decompressed) and the chunks decoded so far.
#[derive(Debug)]
pub(super) struct Rows {
    segment: u64,
    ranges: Vec<RowRange>,
    times: Vec<u8>,
    stacks: Vec<u8>,
    values: Vec<u8>,
    /// Stack node ids must be below this.
    nodes: u64,
    total_rows: u64,
    chunks: Box<[OnceLock<std::result::Result<Chunk, String>>]>,
}

/// The rows of `CHUNK_SERIES` consecutive series, decoded; series `first + i` has
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
    /// Checks that the ranges cover the columns exactly; rows are checked when
    /// their chunk is decoded.
    pub(super) fn new(
        segment: u64,
        ranges: Vec<RowRange>,
        [times, stacks, values]: [Vec<u8>; 3],
        nodes: u64,
    ) -> std::result::Result<Rows, String> {
        let mut at = [0usize; 3];
        let mut total = 0u64;
        for r in &ranges {
            if r.start != at {
                return Err("row ranges are not contiguous".into());
            }
            // Every row takes at least one byte in each column, so a corrupt count
            // cannot size an allocation beyond the file.
            if r.len.iter().any(|&l| r.rows > l as u64) {
                return Err("a series has more rows than bytes in its columns".into());
            }
            total = total.saturating_add(r.rows);
            for (a, l) in at.iter_mut().zip(r.len) {
                *a = a.saturating_add(l);
            }
        }
        if at != [times.len(), stacks.len(), values.len()] {
            return Err("row ranges do not cover the columns".into());
        }
        let chunks = (0..ranges.len().div_ceil(CHUNK_SERIES))
            .map(|_| OnceLock::new())
            .collect();
        Ok(Rows {
            segment,
            ranges,
            times,
            stacks,
            values,
            nodes,
            total_rows: total,
            chunks,
        })
    }

    pub(super) fn total_rows(&self) -> u64 {
        self.total_rows
    }

    /// The rows of `series`, decoding its chunk on first use; `None` for a series
    /// the segment lacks.
    pub(super) fn series(&self, series: u32) -> Result<Option<SeriesRows<'_>>> {
        let s = series as usize;
        let Some(cell) = self.chunks.get(s / CHUNK_SERIES) else {
            return Ok(None);
        };
        let first = s - s % CHUNK_SERIES;
        let chunk = cell
            .get_or_init(|| self.decode(first..(first + CHUNK_SERIES).min(self.ranges.len())))
            .as_ref()
            .map_err(|why| {
                StorageError::Corrupt(format!("segment {}: rows: {why}", self.segment))
            })?;
        let i = s - first;
        let (Some(&a), Some(&b)) = (chunk.starts.get(i), chunk.starts.get(i + 1)) else {
            return Ok(None);
        };
        Ok(Some(SeriesRows {
            steps: &chunk.steps[a..b],
            stacks: &chunk.stacks[a..b],
            values: &chunk.values[a..b],
        }))
    }

    /// Heap bytes once every chunk is decoded (what the cache charges up front,
    /// so decoding later never takes it past its budget): the columns as stored
    /// plus 16 bytes a row.
    pub(super) fn approx_bytes(&self) -> usize {
        self.times.len()
            + self.stacks.len()
            + self.values.len()
            + self.ranges.len() * (std::mem::size_of::<RowRange>() + 8)
            + self.total_rows as usize * 16
    }

    fn decode(&self, series: Range<usize>) -> std::result::Result<Chunk, String> {
        let ranges = &self.ranges[series];
        let cap = ranges.iter().map(|r| r.rows as usize).sum();
        let mut out = Chunk {
            starts: Vec::with_capacity(ranges.len() + 1),
            steps: Vec::with_capacity(cap),
            stacks: Vec::with_capacity(cap),
            values: Vec::with_capacity(cap),
        };
        let err = |e: StorageError| e.to_string();
        let mut tr = Reader::new(&self.times, "times column");
        let mut sr = Reader::new(&self.stacks, "stack ids column");
        let mut vr = Reader::new(&self.values, "values column");
        for range in ranges {
            out.starts.push(out.steps.len());
            let [ts, ss, vs] = range.start;
            tr.seek(ts).map_err(err)?;
            sr.seek(ss).map_err(err)?;
            vr.seek(vs).map_err(err)?;
            let (mut t, mut stack) = (0u64, 0u64);
            for i in 0..range.rows {
                let dt = tr.uvarint().map_err(err)?;
                let ds = sr.uvarint().map_err(err)?;
                let v = vr
                    .ivarint()
                    .map_err(err)?
                    .checked_mul(range.scale)
                    .ok_or("a row value overflows once scaled")?;
                let same_step = i > 0 && dt == 0;
                t = t.saturating_add(dt);
                stack = if same_step {
                    stack.saturating_add(ds)
                } else {
                    ds
                };
                if stack >= self.nodes {
                    return Err(format!(
                        "row refers to stack node {stack} of {}",
                        self.nodes
                    ));
                }
                if t > u64::from(u32::MAX) {
                    return Err(format!("row step {t} out of range"));
                }
                out.steps.push(t as u32);
                out.stacks.push(stack as u32);
                out.values.push(v);
            }
        }
        out.starts.push(out.steps.len());
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codec::{put_ivarint, put_uvarint};

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
        let rows = Rows::new(1, ranges, cols, 7).unwrap();
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

    /// A row naming a stack node the tree lacks fails its own chunk, every time
    /// it is read, and no other chunk.
    #[test]
    fn a_bad_row_fails_its_chunk_only() {
        let n = CHUNK_SERIES * 2;
        let mut series: Vec<Vec<(u64, u64, i64)>> = (0..n).map(|_| vec![(0, 1, 5)]).collect();
        series[CHUNK_SERIES + 3] = vec![(0, 9, 5)];
        let (ranges, cols) = encode(&series);
        let rows = Rows::new(42, ranges, cols, 4).unwrap();
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
        assert!(Rows::new(1, more, cols.clone(), 4)
            .unwrap_err()
            .contains("more rows than bytes"));
        let mut gap = ranges.clone();
        gap[1].start[2] += 1;
        assert!(Rows::new(1, gap, cols.clone(), 4)
            .unwrap_err()
            .contains("not contiguous"));
        assert!(Rows::new(1, ranges[..1].to_vec(), cols, 4)
            .unwrap_err()
            .contains("do not cover"));
    }
}
