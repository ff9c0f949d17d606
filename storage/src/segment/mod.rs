//! Immutable segment files: one tenant, one time partition, checksummed sections.
//!
//! The byte layout is specified in `docs/format.md`; this module is its reference
//! implementation. A segment is written once (to a temporary name, fsynced, renamed)
//! and never modified; compaction writes new segments instead.

mod gid_memo;
mod reader;
mod summary;
mod writer;

pub use gid_memo::{GidMemo, GidSlots};

pub(crate) use reader::step_range;
pub use reader::{LoadedSegment, SegmentFile};
pub use summary::SegmentSummary;
pub use writer::encode_segment;
pub use writer::{write_segment, Row, SegmentInput};

use serde::{Deserialize, Serialize};

use crate::codec::{put_bytes, put_ivarint, put_uvarint, Reader};
use crate::error::Result;
use crate::model::TenantId;

/// First 8 bytes of every segment file.
pub const MAGIC_HEAD: &[u8; 8] = b"PRFDBSEG";
/// Last 8 bytes of every segment file.
pub const MAGIC_TAIL: &[u8; 8] = b"PRFDBEND";
/// Bumped on any incompatible layout change.
pub const FORMAT_VERSION: u16 = 1;
/// Fixed-size trailer: footer offset (u64), footer length (u32), footer crc (u32),
/// version (u16), flags (u16), tail magic (8 bytes).
pub const TRAILER_LEN: usize = 8 + 4 + 4 + 2 + 2 + 8;

/// Section kinds, in file order.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum SectionKind {
    Strings = 1,
    Mappings = 2,
    Functions = 3,
    Locations = 4,
    Stacks = 5,
    Series = 6,
    LabelIndex = 7,
    SeriesRows = 8,
    Times = 9,
    StackIds = 10,
    Values = 11,
    SeriesTotals = 12,
}

impl SectionKind {
    pub const ALL: [SectionKind; 12] = [
        SectionKind::Strings,
        SectionKind::Mappings,
        SectionKind::Functions,
        SectionKind::Locations,
        SectionKind::Stacks,
        SectionKind::Series,
        SectionKind::LabelIndex,
        SectionKind::SeriesRows,
        SectionKind::Times,
        SectionKind::StackIds,
        SectionKind::Values,
        SectionKind::SeriesTotals,
    ];

    pub fn from_u8(v: u8) -> Option<Self> {
        Self::ALL.into_iter().find(|k| *k as u8 == v)
    }
}

/// Section compression codecs.
pub const CODEC_NONE: u8 = 0;
pub const CODEC_ZSTD: u8 = 1;

/// What the catalog knows about a segment. The part stored in the file footer is
/// enough to rebuild it, so the catalog can always be reconstructed from the files.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SegmentMeta {
    /// The segment's id, unique in the data directory.
    pub id: u64,
    /// The tenant whose data it holds.
    pub tenant: TenantId,
    /// Start of its time partition (ms since the epoch).
    pub partition_start_ms: i64,
    /// Width of its time partition.
    pub partition_ms: i64,
    /// Width of one time step of its rows.
    pub step_ms: i64,
    /// First and last step start present in the data.
    pub min_time_ms: i64,
    /// Last step start present in the data.
    pub max_time_ms: i64,
    /// 0 for head flushes; compaction raises it.
    pub level: u32,
    /// Highest WAL sequence number whose samples for this tenant and partition are
    /// contained here; replay skips those records' samples for the partition.
    pub max_lsn: u64,
    /// Series it holds.
    pub series: u64,
    /// Rows it holds (series × step × stack).
    pub rows: u64,
    /// Sum of all values, a cheap cross-check for tools.
    pub value_total: i64,
    /// When it was written (ms since the epoch).
    pub created_ms: i64,
    /// Segments this one replaces (compaction); they are deleted if still present.
    pub sources: Vec<u64>,
    /// Path relative to the data directory. Not stored in the footer.
    #[serde(default)]
    pub file: String,
    /// File size in bytes. Not stored in the footer.
    #[serde(default)]
    pub size_bytes: u64,
    /// CRC-32 of the footer, which covers every section's CRC.
    #[serde(default)]
    pub checksum: u32,
}

impl SegmentMeta {
    /// End of its time partition (exclusive).
    pub fn partition_end_ms(&self) -> i64 {
        self.partition_start_ms + self.partition_ms
    }

    /// Whether retention with `max_age_ms` deletes this segment at `now_ms`: all of
    /// its data (up to the end of its newest step) is older than the age.
    pub fn expired(&self, max_age_ms: i64, now_ms: i64) -> bool {
        self.max_time_ms.saturating_add(self.step_ms) <= now_ms.saturating_sub(max_age_ms)
    }

    /// Whether any data of this segment can fall in `[start, end)`.
    pub fn overlaps(&self, start: i64, end: i64) -> bool {
        self.min_time_ms < end && self.max_time_ms + self.step_ms > start
    }

    pub(crate) fn encode(&self, out: &mut Vec<u8>) {
        put_bytes(out, self.tenant.as_str().as_bytes());
        put_uvarint(out, self.id);
        put_ivarint(out, self.partition_start_ms);
        put_ivarint(out, self.partition_ms);
        put_ivarint(out, self.step_ms);
        put_ivarint(out, self.min_time_ms);
        put_ivarint(out, self.max_time_ms);
        put_uvarint(out, self.level.into());
        put_uvarint(out, self.max_lsn);
        put_uvarint(out, self.series);
        put_uvarint(out, self.rows);
        put_ivarint(out, self.value_total);
        put_ivarint(out, self.created_ms);
        put_uvarint(out, self.sources.len() as u64);
        for s in &self.sources {
            put_uvarint(out, *s);
        }
    }

    pub(crate) fn decode(r: &mut Reader<'_>) -> Result<Self> {
        let tenant = TenantId::new(r.str()?)
            .map_err(|e| crate::StorageError::Corrupt(format!("segment footer: {e}")))?;
        let mut m = SegmentMeta {
            tenant,
            id: r.uvarint()?,
            partition_start_ms: r.ivarint()?,
            partition_ms: r.ivarint()?,
            step_ms: r.ivarint()?,
            min_time_ms: r.ivarint()?,
            max_time_ms: r.ivarint()?,
            level: r.u32v()?,
            max_lsn: r.uvarint()?,
            series: r.uvarint()?,
            rows: r.uvarint()?,
            value_total: r.ivarint()?,
            created_ms: r.ivarint()?,
            sources: Vec::new(),
            file: String::new(),
            size_bytes: 0,
            checksum: 0,
        };
        let n = r.count(1)?;
        for _ in 0..n {
            m.sources.push(r.uvarint()?);
        }
        if m.step_ms <= 0 || m.partition_ms <= 0 || m.partition_ms % m.step_ms != 0 {
            return Err(crate::StorageError::Corrupt(
                "segment footer: invalid step or partition width".into(),
            ));
        }
        Ok(m)
    }
}

#[cfg(test)]
impl SegmentMeta {
    /// The metadata a test writes a level-0 segment of tenant `t` with: the
    /// counts and times are filled in when it is encoded.
    pub(crate) fn for_test(id: u64, partition_start_ms: i64, partition_ms: i64) -> Self {
        SegmentMeta {
            id,
            tenant: TenantId::new("t").expect("a valid tenant"),
            partition_start_ms,
            partition_ms,
            step_ms: 10_000,
            min_time_ms: 0,
            max_time_ms: 0,
            level: 0,
            max_lsn: 0,
            series: 0,
            rows: 0,
            value_total: 0,
            created_ms: 0,
            sources: vec![],
            file: String::new(),
            size_bytes: 0,
            checksum: 0,
        }
    }
}

/// The file name of a segment: `<partition start>-<id as 16 hex digits>.seg`.
pub fn file_name(partition_start_ms: i64, id: u64) -> String {
    format!("{partition_start_ms}-{id:016x}.seg")
}

/// Parses the id out of a segment file name.
pub fn id_from_file_name(name: &str) -> Option<u64> {
    let stem = name.strip_suffix(".seg")?;
    let (_, hex) = stem.rsplit_once('-')?;
    u64::from_str_radix(hex, 16).ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dict::{DictBuilder, LocationRec};
    use crate::model::Labels;
    use proptest::prelude::*;
    use std::collections::BTreeMap;

    fn meta(id: u64) -> SegmentMeta {
        SegmentMeta {
            level: 2,
            max_lsn: 77,
            created_ms: 5,
            sources: vec![3, 4],
            ..SegmentMeta::for_test(id, 3_600_000, 3_600_000)
        }
    }

    proptest! {
        /// Rows written are exactly the rows read back (after summing duplicates and
        /// dropping zeros), with the precomputed totals and footer agreeing.
        #[test]
        fn segment_round_trips(
            rows in prop::collection::vec((0u8..4, 0u32..360, 0u8..10, -5i64..1000), 0..200),
            window in (0u32..400, 0u32..400),
        ) {
            let mut b = DictBuilder::new();
            let stacks: Vec<u32> = (0..10u64).map(|i| {
                let f = b.function(&format!("f{i}"), "x.go");
                let l = b.location(LocationRec { function: Some(f), mapping: None, address: i, line: 1 });
                let root = b.location(LocationRec { function: None, mapping: None, address: 0xdead, line: 0 });
                b.stack(&[root, l])
            }).collect();
            // Two label values per name give the label index postings to compare.
            let labels_of = |s: u8| Labels::new([
                ("__profile_type__", "a:b:c:d:e"),
                ("s", &*s.to_string()),
                ("zone", if s.is_multiple_of(2) { "even" } else { "odd" }),
            ]);
            let mut want: BTreeMap<(Labels, u32, u32), i64> = BTreeMap::new();
            let mut series: BTreeMap<u8, Vec<Row>> = BTreeMap::new();
            for (s, t, st, v) in &rows {
                series.entry(*s).or_default().push(Row { t: *t, stack: stacks[*st as usize], value: *v });
                let l = labels_of(*s);
                *want.entry((l, *t, stacks[*st as usize])).or_default() += v;
            }
            want.retain(|_, v| *v != 0);
            let input = SegmentInput {
                meta: meta(9),
                dict: std::borrow::Cow::Owned(b.finish()),
                series: series.into_iter().map(|(s, r)| (labels_of(s), r)).collect(),
            };
            let dir = tempfile::tempdir().unwrap();
            let written = write_segment(dir.path(), input, 3).unwrap();
            let file = SegmentFile::open(&dir.path().join(&written.file)).unwrap();
            prop_assert_eq!(file.meta.rows, want.len() as u64);
            prop_assert_eq!(file.meta.sources.clone(), vec![3, 4]);
            prop_assert_eq!(file.meta.max_lsn, 77);
            let seg = file.load().unwrap();
            // The summary, from its four sections alone, answers exactly as the
            // whole segment does.
            let summary = file.load_summary().unwrap();
            prop_assert_eq!(&summary.series, &seg.series);
            prop_assert_eq!(&summary.index, &seg.index);
            for sid in 0..seg.series.len() as u32 {
                prop_assert_eq!(summary.series_totals(sid), seg.series_totals(sid));
            }
            let mut got: BTreeMap<(Labels, u32, u32), i64> = BTreeMap::new();
            let mut totals: BTreeMap<(Labels, u32), i64> = BTreeMap::new();
            for (sid, labels) in seg.series.iter().enumerate() {
                seg.for_each_row(sid as u32, |t, st, v| { got.insert((labels.clone(), t, st), v); }).unwrap();
                for &(t, v) in seg.series_totals(sid as u32) {
                    totals.insert((labels.clone(), t), v);
                }
            }
            prop_assert_eq!(&got, &want);
            let mut want_totals: BTreeMap<(Labels, u32), i64> = BTreeMap::new();
            for ((l, t, _), v) in &want {
                *want_totals.entry((l.clone(), *t)).or_default() += v;
            }
            prop_assert_eq!(totals, want_totals);
            prop_assert_eq!(seg.meta.value_total, want.values().sum::<i64>());
            // A window of steps reads exactly the rows inside it, through both the
            // callback and the column slices.
            let (lo, hi) = window;
            for (sid, labels) in seg.series.iter().enumerate() {
                let want_win: BTreeMap<(u32, u32), i64> = want
                    .iter()
                    .filter(|((l, t, _), _)| l == labels && *t >= lo && *t < hi)
                    .map(|((_, t, st), v)| ((*t, *st), *v))
                    .collect();
                let mut got_win = BTreeMap::new();
                seg.for_each_row_in(sid as u32, lo, hi, |t, st, v| { got_win.insert((t, st), v); }).unwrap();
                prop_assert_eq!(&got_win, &want_win);
                let (stacks, values) = seg.row_slices(sid as u32, lo, hi).unwrap();
                let mut from_slices: Vec<(u32, i64)> = stacks.iter().copied().zip(values.iter().copied()).collect();
                let mut expected: Vec<(u32, i64)> = want_win.iter().map(|((_, st), v)| (*st, *v)).collect();
                from_slices.sort_unstable();
                expected.sort_unstable();
                prop_assert_eq!(from_slices, expected);
            }
        }
    }

    #[test]
    fn file_names_round_trip() {
        assert_eq!(file_name(3_600_000, 255), "3600000-00000000000000ff.seg");
        assert_eq!(id_from_file_name("3600000-00000000000000ff.seg"), Some(255));
        assert_eq!(id_from_file_name("-5-0a.seg"), Some(10));
        assert_eq!(id_from_file_name("x.seg.tmp"), None);
    }
}
