//! A row column as one zstd frame per chunk of series (format version 3).
//!
//! Whole-section compression made a query decompress every row of every segment
//! it touched: a day's segments are tens of megabytes of row columns once
//! decompressed, when a flame graph of one service reads a fraction of them
//! (docs/perf-log/2026-11-26-round-09-row-columns-by-chunk.md). Framed, a column keeps
//! its compressed bytes and a chunk's frame is decompressed when a query first
//! reads one of the chunk's series. Repeats between series, which a whole-section
//! window used to find, are now mostly stored once (a series whose rows repeat an
//! earlier one's names it instead, see `rows.rs`), so frames lose little.
//!
//! Layout of the stored bytes: `uvarint chunk_series, uvarint frames`, per frame
//! `uvarint stored_len, uvarint raw_len`, then the frames back to back. Frame `k`
//! holds the column's bytes of series `k × chunk_series ..` the next chunk; an
//! empty one is stored as zero bytes.

use std::borrow::Cow;
use std::ops::Range;

use bytes::Bytes;

use crate::codec::{put_uvarint, Reader};

/// Series per chunk in the files this build writes: small enough that a service's
/// series of one profile type decode little else, large enough that a frame is
/// tens of kilobytes and compresses about as well as the whole column.
pub(super) const CHUNK_SERIES: usize = 16;

/// One frame's place in the stored bytes and its size decompressed.
#[derive(Clone, Copy, Debug)]
pub(super) struct Frame {
    at: usize,
    stored: usize,
    raw: usize,
}

/// A row column as held by a loaded segment.
#[derive(Debug)]
pub(super) enum Column {
    /// Decompressed whole at load (versions 1 and 2).
    Whole(Vec<u8>),
    /// Compressed, one frame per chunk (version 3): a slice of the file's bytes
    /// as loaded (a mapping of the file, or a fetched body), not a copy.
    Framed { stored: Bytes, frames: Vec<Frame> },
}

impl Column {
    /// Parses a framed column's table; `raw_len` is the section's decompressed
    /// size from the footer. Returns the column and its chunk size.
    pub(super) fn framed(stored: Bytes, raw_len: u64) -> Result<(Column, usize), String> {
        let mut r = Reader::new(&stored, "framed column");
        let err = |e: crate::StorageError| e.to_string();
        let chunk_series = usize::try_from(r.uvarint().map_err(err)?)
            .ok()
            .filter(|&c| c > 0)
            .ok_or("a framed column's chunk size is 0 or too large")?;
        let n = r.count(2).map_err(err)?;
        let mut sizes = Vec::with_capacity(n);
        for _ in 0..n {
            let stored = r.uvarint().map_err(err)?;
            let raw = r.uvarint().map_err(err)?;
            if (stored == 0) != (raw == 0) {
                return Err("a frame is empty on one side only".into());
            }
            sizes.push((stored, raw));
        }
        let mut at = r.position();
        let mut frames = Vec::with_capacity(n);
        let mut raw_total = 0u64;
        for (s, raw) in sizes {
            let end = usize::try_from(s)
                .ok()
                .and_then(|s| at.checked_add(s))
                .filter(|&e| e <= stored.len())
                .ok_or("a frame runs past its column")?;
            // A frame's size was checked against the file; its raw size is checked
            // against the series lengths before anything is sized from it.
            let raw = usize::try_from(raw).map_err(|_| "a frame is too large")?;
            raw_total = raw_total.saturating_add(raw as u64);
            frames.push(Frame {
                at,
                stored: end - at,
                raw,
            });
            at = end;
        }
        if at != stored.len() {
            return Err("bytes left after a column's last frame".into());
        }
        if raw_total != raw_len {
            return Err(format!(
                "frames decompress to {raw_total} bytes, the footer says {raw_len}"
            ));
        }
        Ok((Column::Framed { stored, frames }, chunk_series))
    }

    /// Each frame's decompressed size, one per chunk (`None`: whole, any
    /// chunking fits).
    pub(super) fn frame_raw_lens(&self) -> Option<Vec<usize>> {
        match self {
            Column::Whole(_) => None,
            Column::Framed { frames, .. } => Some(frames.iter().map(|f| f.raw).collect()),
        }
    }

    /// Decompressed size of the whole column.
    pub(super) fn raw_len(&self) -> usize {
        match self {
            Column::Whole(b) => b.len(),
            Column::Framed { frames, .. } => frames.iter().map(|f| f.raw).sum(),
        }
    }

    /// Bytes held.
    pub(super) fn held_bytes(&self) -> usize {
        match self {
            Column::Whole(b) => b.len(),
            Column::Framed { stored, .. } => stored.len(),
        }
    }

    /// The bytes of chunk `k`, which are `range` of the whole column.
    pub(super) fn chunk(&self, k: usize, range: Range<usize>) -> Result<Cow<'_, [u8]>, String> {
        match self {
            Column::Whole(b) => b
                .get(range)
                .map(Cow::Borrowed)
                .ok_or_else(|| "a chunk runs past its column".into()),
            Column::Framed { stored, frames } => {
                let f = frames.get(k).ok_or("a chunk without a frame")?;
                if f.raw != range.len() {
                    return Err(format!(
                        "frame {k} holds {} bytes, its series {}",
                        f.raw,
                        range.len()
                    ));
                }
                if f.raw == 0 {
                    return Ok(Cow::Borrowed(&[]));
                }
                let raw = super::unzstd::decompress(&stored[f.at..f.at + f.stored], f.raw)
                    .map_err(|e| format!("frame {k}: zstd: {e}"))?;
                if raw.len() != f.raw {
                    return Err(format!(
                        "frame {k} decompressed to {} bytes, expected {}",
                        raw.len(),
                        f.raw
                    ));
                }
                Ok(Cow::Owned(raw))
            }
        }
    }

    /// The whole column decompressed (verification, tools).
    pub(super) fn decompress_all(&self) -> Result<Vec<u8>, String> {
        match self {
            Column::Whole(b) => Ok(b.clone()),
            Column::Framed { frames, .. } => {
                let mut out = Vec::with_capacity(self.raw_len());
                let mut at = 0;
                for (k, f) in frames.iter().enumerate() {
                    let len = f.raw;
                    out.extend_from_slice(&self.chunk(k, at..at + len)?);
                    at += len;
                }
                Ok(out)
            }
        }
    }
}

/// Encodes `raw` as a framed column whose frame `k` holds `raw[bounds[k]..bounds[k + 1]]`.
pub(super) fn encode(
    raw: &[u8],
    bounds: &[usize],
    chunk_series: usize,
    level: i32,
) -> std::io::Result<Vec<u8>> {
    let mut table = Vec::new();
    let mut body = Vec::new();
    let frames = bounds.len().saturating_sub(1);
    put_uvarint(&mut table, chunk_series as u64);
    put_uvarint(&mut table, frames as u64);
    let mut c = zstd::bulk::Compressor::new(level)?;
    for w in bounds.windows(2) {
        let part = &raw[w[0]..w[1]];
        let stored = if part.is_empty() {
            Vec::new()
        } else {
            c.compress(part)?
        };
        put_uvarint(&mut table, stored.len() as u64);
        put_uvarint(&mut table, part.len() as u64);
        body.extend_from_slice(&stored);
    }
    table.extend_from_slice(&body);
    Ok(table)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_round_trip_and_each_decompresses_alone() {
        let raw: Vec<u8> = (0..5000u32).map(|i| (i % 251) as u8).collect();
        let bounds = [0, 0, 1000, 1000, 4000, 5000];
        let stored = encode(&raw, &bounds, 16, 3).unwrap();
        let (col, cs) = Column::framed(stored.into(), raw.len() as u64).unwrap();
        assert_eq!(cs, 16);
        assert_eq!(col.frame_raw_lens(), Some(vec![0, 1000, 0, 3000, 1000]));
        assert_eq!(col.raw_len(), 5000);
        for (k, w) in bounds.windows(2).enumerate() {
            assert_eq!(&*col.chunk(k, w[0]..w[1]).unwrap(), &raw[w[0]..w[1]]);
        }
        assert_eq!(col.decompress_all().unwrap(), raw);
        // A chunk asked with the wrong size is refused, not decompressed short.
        assert!(col.chunk(2, 1000..2000).unwrap_err().contains("frame 2"));
    }

    #[test]
    fn damaged_tables_are_refused_by_name() {
        let raw = vec![7u8; 300];
        let good = encode(&raw, &[0, 100, 300], 4, 3).unwrap();
        assert!(Column::framed(good.clone().into(), 301)
            .unwrap_err()
            .contains("the footer says 301"));
        let mut short = good.clone();
        short.pop();
        assert!(Column::framed(short.into(), 300).is_err());
        let mut long = good.clone();
        long.push(0);
        assert!(Column::framed(long.into(), 300)
            .unwrap_err()
            .contains("bytes left"));
        // Every truncation of the table is refused, never a panic.
        for cut in 0..good.len() {
            let _ = Column::framed(good[..cut].to_vec().into(), 300);
        }
    }

    proptest::proptest! {
        /// Any bytes either parse as a framed column whose chunks then decompress
        /// or fail, or are refused: never a panic, never an allocation sized by
        /// an unchecked count.
        #[test]
        fn arbitrary_bytes_never_panic(
            bytes in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..200),
            raw_len in 0u64..5000,
        ) {
            if let Ok((col, _)) = Column::framed(bytes.into(), raw_len) {
                let mut at = 0;
                for (k, len) in col.frame_raw_lens().unwrap_or_default().into_iter().enumerate() {
                    let _ = col.chunk(k, at..at + len);
                    at += len;
                }
                let _ = col.decompress_all();
            }
        }
    }
}
