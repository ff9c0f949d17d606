//! A segment's summary: its series' labels, label index and per-step totals,
//! decoded from the four sections that hold them (Strings, Series, LabelIndex,
//! SeriesTotals) and nothing else.
//!
//! Label discovery, series totals and time series need no stack and no row, and
//! those four sections are a small part of a segment (rows and stacks are the
//! bulk). A querier whose segments live in a bucket reads them with a few ranged
//! GETs instead of downloading the body; a local file is read with a few seeks.
//! A summary has no row accessor at all (it implements only
//! `exec::SummarySource`), so a query needing rows cannot be handed one.

use std::fs::File;
use std::io::{Read, Seek, SeekFrom};

use super::reader::{corrupt, SectionEntry};
use super::{SectionKind, SegmentFile, SegmentMeta};
use crate::codec::Reader;
use crate::dict::decode_strings;
use crate::error::{IoContext, Result};
use crate::index::LabelIndex;
use crate::model::Labels;

/// The sections a summary is decoded from.
const SUMMARY_SECTIONS: [SectionKind; 4] = [
    SectionKind::Strings,
    SectionKind::Series,
    SectionKind::LabelIndex,
    SectionKind::SeriesTotals,
];

/// Needed sections at most this far apart are read in one request: the bytes in
/// between cost less than another round trip to an object store.
const MAX_GAP: u64 = 16 << 10;

/// The label and totals part of a decoded segment (see the module docs).
#[derive(Debug)]
pub struct SegmentSummary {
    /// The segment's metadata, from the footer.
    pub meta: SegmentMeta,
    /// Labels of each series; the position is the series id.
    pub series: Vec<Labels>,
    /// Series ids by label, for selectors.
    pub index: LabelIndex,
    /// Per series: `(step index, total)` for every step with data.
    pub(super) totals: Totals,
}

/// Every series' per-step totals end to end, and where each series' start: one
/// allocation, where a list per series was thousands of them per segment load.
#[derive(Debug, Default)]
pub(super) struct Totals {
    points: Vec<(u32, i64)>,
    /// Series `i` has `points[starts[i]..starts[i + 1]]`.
    starts: Vec<u32>,
}

impl SegmentSummary {
    /// Per-step totals of `series`.
    pub fn series_totals(&self, series: u32) -> &[(u32, i64)] {
        let t = &self.totals;
        let at = |i: usize| t.starts.get(i).map(|&s| s as usize);
        match (at(series as usize), at(series as usize + 1)) {
            (Some(a), Some(b)) => t.points.get(a..b).unwrap_or(&[]),
            _ => &[],
        }
    }

    /// Approximate bytes it holds in memory (its cache weight).
    pub fn approx_bytes(&self) -> usize {
        self.index.approx_bytes()
            + self.series.iter().map(|l| 48 + l.len() * 64).sum::<usize>()
            + self.totals.points.len() * 16
            + self.totals.starts.len() * 4
    }
}

/// One read covering one or more needed sections.
#[derive(Debug)]
pub(crate) struct ReadRun {
    /// Where the read starts in the file.
    pub offset: u64,
    /// Bytes it reads.
    pub len: u64,
    sections: Vec<SectionEntry>,
}

impl SegmentFile {
    /// The reads that fetch the summary sections: one per run of sections at most
    /// [`MAX_GAP`] apart, in file order.
    pub(crate) fn summary_reads(&self) -> Result<Vec<ReadRun>> {
        let mut entries = SUMMARY_SECTIONS
            .iter()
            .map(|&k| self.entry(k).copied())
            .collect::<Result<Vec<_>>>()?;
        entries.sort_by_key(|e| e.offset);
        let mut runs: Vec<ReadRun> = Vec::new();
        for e in entries {
            let end = e.offset + e.stored_len;
            match runs.last_mut() {
                Some(r) if e.offset <= (r.offset + r.len).saturating_add(MAX_GAP) => {
                    r.len = r.len.max(end - r.offset);
                    r.sections.push(e);
                }
                _ => runs.push(ReadRun {
                    offset: e.offset,
                    len: e.stored_len,
                    sections: vec![e],
                }),
            }
        }
        Ok(runs)
    }

    /// Reads, verifies and decodes the summary sections of the local file.
    pub fn load_summary(&self) -> Result<SegmentSummary> {
        let mut f = File::open(&self.path).at(&self.path)?;
        self.load_summary_with(|offset, len| {
            let mut buf = vec![0u8; len];
            f.seek(SeekFrom::Start(offset)).at(&self.path)?;
            f.read_exact(&mut buf).at(&self.path)?;
            Ok(buf)
        })
    }

    /// Like [`SegmentFile::load_summary`], reading `len` bytes at `offset` through
    /// `read_at` once per [`SegmentFile::summary_reads`] run (ranged reads of an
    /// object). Every section's checksum is verified before it is decoded.
    pub fn load_summary_with(
        &self,
        mut read_at: impl FnMut(u64, usize) -> Result<Vec<u8>>,
    ) -> Result<SegmentSummary> {
        let mut raw: Vec<(SectionKind, Vec<u8>)> = Vec::with_capacity(SUMMARY_SECTIONS.len());
        for run in self.summary_reads()? {
            let len =
                usize::try_from(run.len).map_err(|_| corrupt(&self.path, "section too large"))?;
            let bytes = read_at(run.offset, len)?;
            if bytes.len() != len {
                return Err(corrupt(&self.path, "short read of a section"));
            }
            for e in &run.sections {
                let at = (e.offset - run.offset) as usize;
                let stored = bytes
                    .get(at..at + e.stored_len as usize)
                    .ok_or_else(|| corrupt(&self.path, "section outside its read"))?;
                raw.push((e.kind, self.decode_section(e, stored)?));
            }
        }
        let take = |kind: SectionKind| -> Result<&[u8]> {
            raw.iter()
                .find(|(k, _)| *k == kind)
                .map(|(_, b)| b.as_slice())
                .ok_or_else(|| corrupt(&self.path, format!("missing section {kind:?}")))
        };
        let strings = decode_strings(take(SectionKind::Strings)?)?;
        let series = decode_series(self, take(SectionKind::Series)?, &strings)?;
        let n = series.len();
        let index = LabelIndex::decode(take(SectionKind::LabelIndex)?, &strings, n as u32)?;
        let totals = decode_totals(self, take(SectionKind::SeriesTotals)?, n)?;
        Ok(SegmentSummary {
            meta: self.meta.clone(),
            series,
            index,
            totals,
        })
    }
}

/// The Series section: each series' labels, checked against the footer's count.
pub(super) fn decode_series(
    file: &SegmentFile,
    bytes: &[u8],
    strings: &[String],
) -> Result<Vec<Labels>> {
    let mut r = Reader::new(bytes, "series section");
    let n = r.count(1)?;
    if n as u64 != file.meta.series {
        return Err(corrupt(
            &file.path,
            "series count disagrees with the footer",
        ));
    }
    let mut series = Vec::with_capacity(n);
    for _ in 0..n {
        let nl = r.count(2)?;
        let mut pairs = Vec::with_capacity(nl);
        for _ in 0..nl {
            let (k, v) = (r.u32v()?, r.u32v()?);
            let (Some(k), Some(v)) = (strings.get(k as usize), strings.get(v as usize)) else {
                return Err(corrupt(&file.path, "series label refers to missing string"));
            };
            pairs.push((k.clone(), v.clone()));
        }
        series.push(Labels::new(pairs));
    }
    Ok(series)
}

/// The SeriesTotals section: per series, its `(step, total)` points.
pub(super) fn decode_totals(file: &SegmentFile, bytes: &[u8], n: usize) -> Result<Totals> {
    let mut r = Reader::new(bytes, "series totals section");
    if r.count(1)? != n {
        return Err(corrupt(&file.path, "series totals count disagrees"));
    }
    // A point takes two bytes at least and about three on the bench fleet.
    let mut totals = Totals {
        points: Vec::with_capacity(bytes.len() / 3),
        starts: Vec::with_capacity(n + 1),
    };
    for _ in 0..n {
        let start = u32::try_from(totals.points.len())
            .map_err(|_| corrupt(&file.path, "series totals too long"))?;
        totals.starts.push(start);
        let np = r.count(2)?;
        let mut t = 0u32;
        for _ in 0..np {
            t = t
                .checked_add(r.u32v()?)
                .ok_or_else(|| corrupt(&file.path, "series totals time overflow"))?;
            totals.points.push((t, r.ivarint()?));
        }
    }
    let end = u32::try_from(totals.points.len())
        .map_err(|_| corrupt(&file.path, "series totals too long"))?;
    totals.starts.push(end);
    Ok(totals)
}

#[cfg(test)]
mod tests {
    use super::super::{write_segment, Row, SegmentInput};
    use super::*;
    use crate::dict::{DictBuilder, LocationRec};
    use crate::error::StorageError;

    /// A value in 1..=1_000_000 that compresses like real samples (badly).
    fn noise(x: u64) -> i64 {
        let mut z = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        ((z ^ (z >> 31)) % 1_000_000) as i64 + 1
    }

    /// A segment of 6 series × 300 steps × 20 stacks, so rows dwarf labels.
    fn written(dir: &std::path::Path) -> SegmentFile {
        let mut b = DictBuilder::new();
        let stacks: Vec<u32> = (0..20u64)
            .map(|i| {
                let f = b.function(&format!("f{i}"), "x.go");
                let l = b.location(LocationRec {
                    function: Some(f),
                    mapping: None,
                    address: i,
                    line: 1,
                });
                b.stack(&[l])
            })
            .collect();
        let series = (0..6u32)
            .map(|s| {
                let rows = (0..300u32)
                    .flat_map(|t| {
                        stacks.iter().map(move |&stack| Row {
                            t,
                            stack,
                            value: noise(u64::from(t) << 32 | u64::from(stack) << 8 | u64::from(s)),
                        })
                    })
                    .collect();
                (
                    Labels::new([("__profile_type__", "a:b:c:d:e"), ("s", &*s.to_string())]),
                    rows,
                )
            })
            .collect();
        let input = SegmentInput {
            meta: SegmentMeta {
                max_lsn: 1,
                ..SegmentMeta::for_test(1, 0, 3_600_000)
            },
            dict: std::borrow::Cow::Owned(b.finish()),
            series,
        };
        let meta = write_segment(dir, input, 3).unwrap();
        SegmentFile::open(&dir.join(&meta.file)).unwrap()
    }

    #[test]
    fn sections_account_for_the_file_in_file_order() {
        let dir = tempfile::tempdir().unwrap();
        let file = written(dir.path());
        let sections = file.sections();
        let kinds: Vec<SectionKind> = sections.iter().map(|s| s.kind).collect();
        // Every required kind in order, and the ranks of 36,000 rows on a few
        // stacks after the row columns: the last section is still a summary one.
        let mut want = SectionKind::ALL.to_vec();
        want.insert(want.len() - 1, SectionKind::StackRanks);
        assert_eq!(kinds, want);
        let stored: u64 = sections.iter().map(|s| s.stored_bytes).sum();
        let size = std::fs::metadata(&file.path).unwrap().len();
        // The rest is the head magic, the footer and the trailer.
        let framing = (super::super::MAGIC_HEAD.len() + super::super::TRAILER_LEN) as u64;
        assert!(stored + framing < size);
        let of = |k| sections.iter().find(|s| s.kind == k).unwrap();
        // 36,000 rows of noisy values: at least two bytes each, whatever zstd does;
        // their steps repeat 20 times each and compress to almost nothing.
        assert!(of(SectionKind::Values).raw_bytes >= 2 * 36_000);
        assert!(of(SectionKind::Values).stored_bytes > 20 * of(SectionKind::Times).stored_bytes);
    }

    /// Flips one byte in the middle of `kind`'s stored bytes.
    fn damage(file: &SegmentFile, kind: SectionKind) {
        let e = *file.entry(kind).unwrap();
        let mut bytes = std::fs::read(&file.path).unwrap();
        bytes[(e.offset + e.stored_len / 2) as usize] ^= 0x55;
        std::fs::write(&file.path, bytes).unwrap();
    }

    #[test]
    fn reads_only_the_summary_sections() {
        let dir = tempfile::tempdir().unwrap();
        let file = written(dir.path());
        let (mut reads, mut bytes) = (0, 0u64);
        let summary = file
            .load_summary_with(|offset, len| {
                reads += 1;
                bytes += len as u64;
                let all = std::fs::read(&file.path).unwrap();
                Ok(all[offset as usize..offset as usize + len].to_vec())
            })
            .unwrap();
        assert_eq!(summary.series.len(), 6);
        assert!(reads <= 3, "{reads} reads");
        assert!(
            bytes * 4 < file.meta.size_bytes,
            "{bytes} of {} bytes read",
            file.meta.size_bytes
        );
        // Rows are not read at all: damaging them leaves the summary intact
        // (while the whole load fails).
        damage(&file, SectionKind::Values);
        assert!(file.load_summary().is_ok());
        assert!(file.load().unwrap_err().is_corruption());
    }

    #[test]
    fn series_totals_are_the_sums_of_each_series_rows_per_step() {
        let dir = tempfile::tempdir().unwrap();
        let summary = written(dir.path()).load_summary().unwrap();
        for (id, labels) in summary.series.iter().enumerate() {
            let s: u64 = labels.get("s").unwrap().parse().unwrap();
            // The oracle: the rows `written` put in, summed here per step.
            let want: Vec<(u32, i64)> = (0..300u32)
                .map(|t| {
                    let sum = (0..20u64)
                        .map(|stack| noise(u64::from(t) << 32 | stack << 8 | s))
                        .sum();
                    (t, sum)
                })
                .collect();
            assert_eq!(summary.series_totals(id as u32), want, "series s={s}");
        }
        assert!(summary.series_totals(6).is_empty());
        assert!(summary.series_totals(u32::MAX).is_empty());
    }

    #[test]
    fn truncated_or_overflowing_totals_are_corruption_not_a_panic() {
        let dir = tempfile::tempdir().unwrap();
        let file = written(dir.path());
        let mut whole = Vec::new();
        // Two series: the first with points at steps 5 and 7, the second with one.
        // Values are zigzagged: 20 is 10, 40 is 20.
        for v in [2u64, 2, 5, 20, 2, 40, 1, 3, 0] {
            crate::codec::put_uvarint(&mut whole, v);
        }
        let totals = decode_totals(&file, &whole, 2).unwrap();
        assert_eq!(totals.points, [(5, 10), (7, 20), (3, 0)]);
        assert_eq!(totals.starts, [0, 2, 3]);
        for cut in 0..whole.len() {
            let err = decode_totals(&file, &whole[..cut], 2).unwrap_err();
            assert!(err.is_corruption(), "cut at {cut}: {err:?}");
        }
        // The footer's series count disagrees with the section's.
        assert!(decode_totals(&file, &whole, 3).unwrap_err().is_corruption());
        let mut over = Vec::new();
        for v in [1u64, 2, u64::from(u32::MAX), 0, 1, 0] {
            crate::codec::put_uvarint(&mut over, v);
        }
        assert!(decode_totals(&file, &over, 1).unwrap_err().is_corruption());
    }

    #[test]
    fn a_damaged_summary_section_fails_its_checksum() {
        for kind in SUMMARY_SECTIONS {
            let dir = tempfile::tempdir().unwrap();
            let file = written(dir.path());
            damage(&file, kind);
            match file.load_summary() {
                Err(StorageError::Checksum { what, .. }) => {
                    assert!(what.contains(&format!("{kind:?}")), "{what}")
                }
                other => panic!("{kind:?}: expected a checksum error, got {other:?}"),
            }
        }
    }
}
