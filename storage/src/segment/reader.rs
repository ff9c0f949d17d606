//! Opening, verifying and decoding segment files. Every byte is treated as untrusted.

use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};

use bytes::Bytes;

use super::base::{self, base_coded};
use super::lazy_dict::LazyDict;
use super::rows::{RowRange, Rows, SeriesRows};
use super::summary::{decode_series, decode_totals, SegmentSummary};
use super::zstd_frames::{Column, CHUNK_SERIES};
use super::{
    SectionKind, SegmentMeta, CODEC_NONE, CODEC_ZSTD, CODEC_ZSTD_BASE, CODEC_ZSTD_FRAMES,
    FORMAT_VERSION, MAGIC_HEAD, MAGIC_TAIL, OLDEST_READABLE_VERSION, TRAILER_LEN,
};
use crate::codec::Reader;
use crate::dict::{self, Dict};
use crate::error::{IoContext, Result, StorageError};
use crate::index::LabelIndex;

#[derive(Clone, Copy, Debug)]
pub(super) struct SectionEntry {
    pub(super) kind: SectionKind,
    pub(super) codec: u8,
    pub(super) offset: u64,
    pub(super) stored_len: u64,
    pub(super) raw_len: u64,
    crc: u32,
}

/// One section's bytes: as stored (after compression) and decompressed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SectionSize {
    /// Which section.
    pub kind: SectionKind,
    /// Bytes in the file.
    pub stored_bytes: u64,
    /// Bytes once decompressed.
    pub raw_bytes: u64,
}

/// A segment whose trailer and footer have been read and verified.
#[derive(Clone, Debug)]
pub struct SegmentFile {
    /// Where the file is.
    pub path: PathBuf,
    /// Its metadata, from the footer.
    pub meta: SegmentMeta,
    /// The trailer's format version (what SeriesRows holds depends on it).
    version: u16,
    sections: Vec<SectionEntry>,
}

pub(super) fn corrupt(path: &Path, why: impl std::fmt::Display) -> StorageError {
    StorageError::Corrupt(format!("{}: {why}", path.display()))
}

impl SegmentFile {
    /// Reads the trailer and footer and checks their magic, version and checksum.
    /// Section checksums are verified by [`SegmentFile::load`] and [`SegmentFile::verify`].
    pub fn open(path: &Path) -> Result<Self> {
        let mut f = File::open(path).at(path)?;
        let size = f.metadata().at(path)?.len();
        Self::open_with(path, size, |offset, len| {
            let mut buf = vec![0u8; len];
            f.seek(SeekFrom::Start(offset)).at(path)?;
            f.read_exact(&mut buf).at(path)?;
            Ok(buf)
        })
    }

    /// Like [`SegmentFile::open`], reading the head, trailer and footer (`len`
    /// bytes at `offset`) through `read_at`: the bytes may be elsewhere (ranged
    /// reads of an object), with `path` where they will be once fetched.
    pub fn open_with(
        path: &Path,
        size: u64,
        mut read_at: impl FnMut(u64, usize) -> Result<Vec<u8>>,
    ) -> Result<Self> {
        if size < (MAGIC_HEAD.len() + TRAILER_LEN) as u64 {
            return Err(corrupt(path, "file too short to be a segment"));
        }
        let head = read_at(0, MAGIC_HEAD.len())?;
        if head != MAGIC_HEAD {
            return Err(corrupt(path, "bad head magic"));
        }
        let trailer = read_at(size - TRAILER_LEN as u64, TRAILER_LEN)?;
        if trailer.len() != TRAILER_LEN {
            return Err(corrupt(path, "short read of the trailer"));
        }
        let mut t = Reader::new(&trailer, "segment trailer");
        let footer_offset = t.u64_le()?;
        let footer_len = u64::from(t.u32_le()?);
        let footer_crc = t.u32_le()?;
        let version = t.u16_le()?;
        let _flags = t.u16_le()?;
        if t.bytes(8)? != MAGIC_TAIL {
            return Err(corrupt(path, "bad tail magic (truncated file?)"));
        }
        if version > FORMAT_VERSION {
            return Err(StorageError::UnsupportedVersion {
                what: path.display().to_string(),
                version,
                oldest: OLDEST_READABLE_VERSION,
                newest: FORMAT_VERSION,
            });
        }
        if version < OLDEST_READABLE_VERSION {
            return Err(corrupt(
                path,
                format!(
                    "unsupported format version {version} (this build reads {OLDEST_READABLE_VERSION} to {FORMAT_VERSION})"
                ),
            ));
        }
        if footer_offset < MAGIC_HEAD.len() as u64
            || footer_offset.checked_add(footer_len) != Some(size - TRAILER_LEN as u64)
        {
            return Err(corrupt(path, "footer offset/length do not fit the file"));
        }
        let footer = read_at(footer_offset, footer_len as usize)?;
        let computed = crc32fast::hash(&footer);
        if computed != footer_crc {
            return Err(StorageError::Checksum {
                what: format!("{} footer", path.display()),
                stored: footer_crc,
                computed,
            });
        }
        let mut r = Reader::new(&footer, "segment footer");
        let n = r.count(8)?;
        let mut sections = Vec::with_capacity(n);
        for _ in 0..n {
            let kind_byte = r.u8()?;
            let codec = r.u8()?;
            let offset = r.uvarint()?;
            let stored_len = r.uvarint()?;
            let raw_len = r.uvarint()?;
            let crc = r.u32_le()?;
            let Some(kind) = SectionKind::from_u8(kind_byte) else {
                // Unknown sections are skipped so later versions can add optional ones.
                continue;
            };
            let framed_kind = matches!(
                kind,
                SectionKind::Times | SectionKind::StackIds | SectionKind::Values
            );
            let known = match codec {
                CODEC_NONE | CODEC_ZSTD => true,
                CODEC_ZSTD_FRAMES => framed_kind && version >= 3,
                CODEC_ZSTD_BASE => base_coded(kind) && version >= 6,
                _ => false,
            };
            if !known {
                return Err(corrupt(
                    path,
                    format!("unknown codec {codec} for section {kind:?}"),
                ));
            }
            if offset < MAGIC_HEAD.len() as u64
                || offset
                    .checked_add(stored_len)
                    .is_none_or(|e| e > footer_offset)
            {
                return Err(corrupt(path, format!("section {kind:?} outside the file")));
            }
            sections.push(SectionEntry {
                kind,
                codec,
                offset,
                stored_len,
                raw_len,
                crc,
            });
        }
        let mut meta = SegmentMeta::decode(&mut r, version)?;
        if meta.base.is_none() && sections.iter().any(|s| s.codec == CODEC_ZSTD_BASE) {
            return Err(corrupt(
                path,
                "a section is coded on a base the footer lacks",
            ));
        }
        meta.size_bytes = size;
        meta.checksum = footer_crc;
        for k in SectionKind::ALL {
            if !sections.iter().any(|s| s.kind == k) {
                return Err(corrupt(path, format!("missing section {k:?}")));
            }
        }
        Ok(SegmentFile {
            path: path.to_path_buf(),
            meta,
            version,
            sections,
        })
    }

    /// Each section's size on disk and decompressed, in file order: what a
    /// segment's bytes are spent on (`bench storage` prints it).
    pub fn sections(&self) -> Vec<SectionSize> {
        self.sections
            .iter()
            .map(|e| SectionSize {
                kind: e.kind,
                stored_bytes: e.stored_len,
                raw_bytes: e.raw_len,
            })
            .collect()
    }

    pub(super) fn entry(&self, kind: SectionKind) -> Result<&SectionEntry> {
        self.sections
            .iter()
            .find(|s| s.kind == kind)
            .ok_or_else(|| corrupt(&self.path, format!("missing section {kind:?}")))
    }

    pub(super) fn section(&self, file: &[u8], kind: SectionKind) -> Result<Vec<u8>> {
        let e = self.entry(kind)?;
        self.decode_section(e, self.stored(file, e)?)
    }

    /// A section's stored bytes (not yet checked).
    pub(super) fn stored<'f>(&self, file: &'f [u8], e: &SectionEntry) -> Result<&'f [u8]> {
        file.get(e.offset as usize..(e.offset + e.stored_len) as usize)
            .ok_or_else(|| corrupt(&self.path, format!("section {:?} outside the file", e.kind)))
    }

    pub(super) fn check_crc(&self, e: &SectionEntry, stored: &[u8]) -> Result<()> {
        let computed = crc32fast::hash(stored);
        if computed != e.crc {
            return Err(StorageError::Checksum {
                what: format!("{} section {:?}", self.path.display(), e.kind),
                stored: e.crc,
                computed,
            });
        }
        Ok(())
    }

    /// A row column as a loaded segment holds it: framed columns stay compressed,
    /// as a slice of the file's bytes.
    fn column(&self, file: &Bytes, kind: SectionKind) -> Result<(Column, Option<usize>)> {
        let e = self.entry(kind)?;
        if e.codec != CODEC_ZSTD_FRAMES {
            return Ok((Column::Whole(self.section(file, kind)?), None));
        }
        let stored = self.stored(file, e)?;
        self.check_crc(e, stored)?;
        let (col, chunk_series) = Column::framed(file.slice_ref(stored), e.raw_len)
            .map_err(|why| corrupt(&self.path, format!("section {kind:?}: {why}")))?;
        Ok((col, Some(chunk_series)))
    }

    /// Checks the stored bytes of a section against its checksum, then
    /// decompresses them.
    pub(super) fn decode_section(&self, e: &SectionEntry, stored: &[u8]) -> Result<Vec<u8>> {
        let kind = e.kind;
        self.check_crc(e, stored)?;
        if e.codec == CODEC_NONE {
            return Ok(stored.to_vec());
        }
        if e.codec == CODEC_ZSTD_FRAMES {
            return Column::framed(Bytes::copy_from_slice(stored), e.raw_len)
                .and_then(|(c, _)| c.decompress_all())
                .map_err(|why| corrupt(&self.path, format!("section {kind:?}: {why}")));
        }
        let raw_len =
            usize::try_from(e.raw_len).map_err(|_| corrupt(&self.path, "section too large"))?;
        let raw = match (e.codec, self.meta.base) {
            (CODEC_ZSTD_BASE, Some(want)) => {
                base::load(&self.path, want)?.decompress(kind, stored, raw_len)
            }
            _ => super::unzstd::decompress(stored, raw_len),
        }
        .map_err(|err| corrupt(&self.path, format!("section {kind:?}: zstd: {err}")))?;
        if raw.len() != raw_len {
            return Err(corrupt(
                &self.path,
                format!(
                    "section {kind:?} decompressed to {} bytes, expected {raw_len}",
                    raw.len()
                ),
            ));
        }
        Ok(raw)
    }

    fn read_all(&self) -> Result<Vec<u8>> {
        std::fs::read(&self.path).at(&self.path)
    }

    /// Checks every section checksum without decoding.
    pub fn verify(&self) -> Result<()> {
        let file = self.read_all()?;
        for e in &self.sections {
            self.section(&file, e.kind)?;
        }
        Ok(())
    }

    /// Maps, verifies and decodes the whole segment.
    pub fn load(&self) -> Result<LoadedSegment> {
        self.load_from(self.map_all()?)
    }

    /// The file's bytes as a read-only mapping, not a copy: a loaded segment
    /// keeps its row columns compressed as slices of them, and a first query after
    /// a restart paid for reading every segment it touched into fresh memory (the
    /// kernel zeroing each page before the copy) when the page cache held them
    /// already. Segment files are never written after their rename into place, and
    /// one deleted (compaction, retention) or quarantined while mapped stays
    /// readable until unmapped.
    fn map_all(&self) -> Result<Bytes> {
        let file = File::open(&self.path).at(&self.path)?;
        // SAFETY: the mapping is read-only and segment files are immutable once
        // renamed into place (see above); nothing in this process writes to one.
        let map = unsafe { memmap2::Mmap::map(&file) }.at(&self.path)?;
        Ok(Bytes::from_owner(map))
    }

    /// Like [`SegmentFile::load`], over the file's bytes already read (fetched
    /// from elsewhere, or mapped).
    pub fn load_from(&self, file: impl Into<Bytes>) -> Result<LoadedSegment> {
        let file: Bytes = file.into();
        if file.len() as u64 != self.meta.size_bytes {
            return Err(corrupt(&self.path, "file size changed since it was opened"));
        }
        let sec = |k| self.section(&file, k);
        let strings = dict::decode_strings(&sec(SectionKind::Strings)?)?;
        let series = decode_series(self, &sec(SectionKind::Series)?, &strings)?;
        let n = series.len();
        let index = LabelIndex::decode(&sec(SectionKind::LabelIndex)?, &strings, n as u32)?;
        let dict = LazyDict::new(self, &file, strings)?;

        let (times, t_chunks) = self.column(&file, SectionKind::Times)?;
        let (stacks, s_chunks) = self.column(&file, SectionKind::StackIds)?;
        let (values, v_chunks) = self.column(&file, SectionKind::Values)?;
        let chunk_series = match (t_chunks, s_chunks, v_chunks) {
            (None, None, None) => CHUNK_SERIES,
            (Some(a), Some(b), Some(c)) if a == b && b == c => a,
            _ => return Err(corrupt(&self.path, "row columns are chunked differently")),
        };
        let rows_raw = sec(SectionKind::SeriesRows)?;
        let ranges = self.series_rows(&rows_raw, n)?;
        let nodes = dict.counts().nodes as u64;
        // Optional: looked up once, without an error for its absence.
        let ranks_entry = self
            .sections
            .iter()
            .find(|e| e.kind == SectionKind::StackRanks);
        let ranks = match ranks_entry {
            Some(e) if self.version >= 4 => {
                let raw = self.decode_section(e, self.stored(&file, e)?)?;
                Some(
                    super::stack_ranks::decode(&raw, nodes, n, self.version)
                        .map_err(|why| corrupt(&self.path, &why))?,
                )
            }
            // Before version 4 a kind 13 section was not defined: not read.
            _ => None,
        };
        let rows = Rows::new(
            self.meta.id,
            ranges,
            [times, stacks, values],
            chunk_series,
            nodes,
            ranks,
        )
        .map_err(|why| corrupt(&self.path, &why))?;
        if rows.total_rows() != self.meta.rows {
            return Err(corrupt(&self.path, "row count disagrees with the footer"));
        }

        let totals = decode_totals(self, &sec(SectionKind::SeriesTotals)?, n)?;
        let gids = match self.meta.base {
            Some(want) => base::load(&self.path, want)?.segment_memo(),
            None => Default::default(),
        };

        Ok(LoadedSegment {
            summary: SegmentSummary {
                meta: self.meta.clone(),
                series,
                index,
                totals,
            },
            dict,
            rows,
            gids,
            stacks: Default::default(),
            stack_index_asked: Default::default(),
        })
    }
}

impl SegmentFile {
    /// Decodes SeriesRows: each series' row count, bytes in each column, scale
    /// (version 2 on) and the series it repeats (version 3 on).
    fn series_rows(&self, raw: &[u8], n: usize) -> Result<Vec<RowRange>> {
        let mut r = Reader::new(raw, "series rows section");
        // At least: rows and three lengths; a repeat's rows, distance and scale.
        let min_bytes = if self.version >= 3 { 3 } else { 4 };
        if r.count(min_bytes)? != n {
            return Err(corrupt(&self.path, "series rows count disagrees"));
        }
        let mut ranges = Vec::with_capacity(n);
        let mut at = [0usize; 3];
        for i in 0..n {
            let rows = r.uvarint()?;
            let back = if self.version >= 3 { r.uvarint()? } else { 0 };
            let repeats = match back {
                0 => None,
                b => Some(
                    u64::try_from(i)
                        .ok()
                        .and_then(|i| i.checked_sub(b))
                        .and_then(|j| u32::try_from(j).ok())
                        .ok_or_else(|| {
                            corrupt(
                                &self.path,
                                format!("series {i} repeats one before the first"),
                            )
                        })?,
                ),
            };
            let mut len = [0usize; 3];
            if repeats.is_none() {
                for l in &mut len {
                    *l = usize::try_from(r.uvarint()?)
                        .map_err(|_| corrupt(&self.path, "a series' column is too large"))?;
                }
            }
            let scale = if self.version >= 2 {
                i64::try_from(r.uvarint()?)
                    .ok()
                    .filter(|&s| s > 0)
                    .ok_or_else(|| corrupt(&self.path, "a series' value scale is 0 or too large"))?
            } else {
                1
            };
            ranges.push(RowRange {
                rows,
                start: at,
                len,
                scale,
                repeats,
            });
            for (a, l) in at.iter_mut().zip(len) {
                *a = a.saturating_add(l);
            }
        }
        Ok(ranges)
    }
}

/// A decoded segment, ready to answer queries.
#[derive(Debug)]
pub struct LoadedSegment {
    /// Its labels and per-step totals, what a summary load gives alone; the
    /// segment derefs to it (`seg.meta`, `seg.series`, `seg.series_totals`).
    pub summary: SegmentSummary,
    /// Its symbol tables and stack tree, decoded on first use (`lazy_dict.rs`).
    dict: LazyDict,
    rows: Rows,
    /// Stack node → id in the store's frame tree, filled in by queries.
    pub gids: super::GidMemo,
    /// Built by the second query with a function filter (`None` inside: the tree
    /// is not depth first).
    stacks: std::sync::OnceLock<Option<super::StackIndex>>,
    /// Whether a query asked for the stack index already.
    stack_index_asked: std::sync::atomic::AtomicBool,
}

impl std::ops::Deref for LoadedSegment {
    type Target = SegmentSummary;

    fn deref(&self) -> &SegmentSummary {
        &self.summary
    }
}

impl LoadedSegment {
    /// The symbol tables and stack tree, decoded now if no query needed them
    /// before. A table that does not decode is a `Corrupt` error, every time.
    pub fn dict(&self) -> Result<&Dict> {
        self.dict.get()
    }

    /// Whether the tables are decoded already.
    pub fn dict_decoded(&self) -> bool {
        self.dict.is_decoded()
    }

    /// Stack nodes in the tree (known without decoding it).
    pub fn node_count(&self) -> usize {
        self.dict.counts().nodes
    }

    /// Functions and locations in the tables: the slots a name memo needs.
    pub fn name_slots(&self) -> usize {
        let c = self.dict.counts();
        c.functions + c.locations
    }

    /// Decodes every row now (what queries otherwise decode a chunk of series at
    /// a time, on first read), calling `pause` between chunks. The segment cache
    /// charged for the decoded rows when the segment was loaded.
    pub fn decode_rows(&self, pause: impl FnMut()) -> Result<()> {
        self.rows.decode_all(pause)
    }

    /// Calls `f(step_index, stack_node, value)` for each row of `series`, in
    /// `(time, stack)` order.
    pub fn for_each_row(&self, series: u32, f: impl FnMut(u32, u32, i64)) -> Result<()> {
        self.for_each_row_in(series, 0, u32::MAX, f)
    }

    /// The rows of `series` in steps `[lo, hi)`: the series' rows are in time
    /// order, so the bounds are found by binary search and a window cutting into
    /// the partition reads only its own rows. Decodes the series' chunk on first
    /// use; `None` for a series the segment lacks.
    fn rows_in(&self, series: u32, lo: u32, hi: u32) -> Result<Option<SeriesRows<'_>>> {
        let Some(rows) = self.rows.series(series)? else {
            return Ok(None);
        };
        let steps = rows.steps;
        // Most windows cover a series' rows whole: two reads, not two searches.
        let a = match steps.first() {
            Some(&t) if t >= lo => 0,
            _ => steps.partition_point(|&t| t < lo),
        };
        let b = match steps.last() {
            Some(&t) if t < hi => steps.len(),
            _ => steps.partition_point(|&t| t < hi),
        }
        .max(a);
        Ok(Some(SeriesRows {
            steps: &steps[a..b],
            stacks: &rows.stacks[a..b],
            values: &rows.values[a..b],
        }))
    }

    /// Stack nodes and values of the rows of `series` in steps `[lo, hi)`.
    pub fn row_slices(&self, series: u32, lo: u32, hi: u32) -> Result<Option<(&[u32], &[i64])>> {
        Ok(self.rows_in(series, lo, hi)?.map(|r| (r.stacks, r.values)))
    }

    /// [`LoadedSegment::for_each_row`] for the rows in steps `[lo, hi)` only.
    pub fn for_each_row_in(
        &self,
        series: u32,
        lo: u32,
        hi: u32,
        mut f: impl FnMut(u32, u32, i64),
    ) -> Result<()> {
        let Some(r) = self.rows_in(series, lo, hi)? else {
            return Err(StorageError::Invalid(format!(
                "no series {series} in segment"
            )));
        };
        for ((&t, &stack), &v) in r.steps.iter().zip(r.stacks).zip(r.values) {
            f(t, stack, v);
        }
        Ok(())
    }

    /// Timestamp of a step index.
    pub fn time_of(&self, t: u32) -> i64 {
        self.meta.partition_start_ms + i64::from(t) * self.meta.step_ms
    }

    /// Range of step indices `[lo, hi)` whose step start lies in `[start, end)`.
    pub fn step_range(&self, start: i64, end: i64) -> (u32, u32) {
        step_range(self.meta.partition_start_ms, self.meta.step_ms, start, end)
    }

    /// The stack index of this segment's tree.
    ///
    /// Built from the second ask on, as answers are cached: the index takes 8 bytes a
    /// stack node (millions in a busy hour's segment), and a first filtered
    /// query after a restart built one for every segment of its window, most of the
    /// cost in the kernel zeroing their pages. A first ask gets `None`, and the
    /// filter marks the stack tree's nodes in one pass instead (a byte a node,
    /// `exec::node_filter`).
    pub fn stack_index(&self) -> Option<&super::StackIndex> {
        if let Some(built) = self.stacks.get() {
            return built.as_ref();
        }
        if !self
            .stack_index_asked
            .swap(true, std::sync::atomic::Ordering::Relaxed)
        {
            return None;
        }
        self.stacks
            .get_or_init(|| super::StackIndex::build(self.dict().ok()?))
            .as_ref()
    }

    /// What the segment takes once queries decoded all of it (its tables and
    /// rows, whether decoded yet or not).
    pub fn approx_bytes(&self) -> usize {
        let c = self.dict.counts();
        self.dict.approx_bytes()
            // What queries add: the frame-tree memo (4 bytes per stack node) and
            // the stack index.
            + c.nodes * (4 + super::StackIndex::BYTES_PER_NODE)
            + c.functions * super::StackIndex::BYTES_PER_FUNCTION
            + self.rows.approx_bytes()
            + self.summary.approx_bytes()
    }
}

/// Step indices `[lo, hi)` of a partition whose step start lies in `[start, end)`.
pub(crate) fn step_range(partition_start: i64, step: i64, start: i64, end: i64) -> (u32, u32) {
    let clamp = |x: i64| x.clamp(0, i64::from(u32::MAX)) as u32;
    // ceil((start - p) / step) and ceil((end - p) / step)
    let rel = |x: i64| {
        x.saturating_sub(partition_start)
            .saturating_add(step - 1)
            .div_euclid(step)
    };
    let (lo, hi) = (rel(start), rel(end));
    (clamp(lo), clamp(hi))
}
