//! Immutable segment files: one tenant, one time partition, checksummed sections.
//!
//! The byte layout is specified in `docs/format.md`; this module is its reference
//! implementation. A segment is written once (to a temporary name, fsynced, renamed)
//! and never modified; compaction writes new segments instead.

mod base;
#[cfg(test)]
mod base_tests;
mod gid_memo;
mod lazy_dict;
mod reader;
mod rebase;
mod rows;
mod stack_index;
mod stack_ranks;
mod summary;
mod tree_order;
mod unzstd;
mod writer;
mod zstd_frames;

pub use base::{base_path, loaded_bytes as loaded_base_bytes, BaseRef, SymbolBase, BASES_DIR};
pub(crate) use base::{
    forget as forget_base, id_from_file_name as base_id_from_file_name, load as load_base,
    LOADED_MAX as LOADED_BASES,
};
pub use gid_memo::{GidMemo, GidSlots};
pub use rebase::{BaseDecision, BaseFit};

pub(crate) use reader::step_range;
pub use reader::{LoadedSegment, SectionSize, SegmentFile};
pub use stack_index::{subtract as subtract_ranges, StackIndex};
pub use summary::SegmentSummary;
#[cfg(test)]
pub(crate) use tree_order::depth_first_for_tests;
pub use writer::encode_segment;
pub use writer::{write_segment, write_segment_on, BaseChoice, Row, SegmentInput};

use serde::{Deserialize, Serialize};

use crate::codec::{put_bytes, put_ivarint, put_uvarint, Reader};
use crate::error::Result;
use crate::model::TenantId;

/// First 8 bytes of every segment file.
pub const MAGIC_HEAD: &[u8; 8] = b"PRFDBSEG";
/// Last 8 bytes of every segment file.
pub const MAGIC_TAIL: &[u8; 8] = b"PRFDBEND";
/// Bumped on any incompatible layout change. Version 2 added each series' value
/// scale to SeriesRows (Values hold `value / scale`); version 3 stores the row
/// columns one frame per chunk of series and lets a series repeat an earlier
/// one's rows; version 4 may name stacks in StackIds by rank, through an optional
/// StackRanks section (`stack_ranks.rs`); version 5 ranks each service's series
/// apart, with a table per group of series; version 6 may write a segment on a
/// symbol base (`base.rs`), named in the footer, with codec 3 sections; version 7
/// adds each mapping's address range (start, limit, file offset) to Mappings, what
/// a frame kept as an address needs to be symbolized at query time.
pub const FORMAT_VERSION: u16 = 7;
/// The oldest version this build still reads.
pub const OLDEST_READABLE_VERSION: u16 = 1;
/// Fixed-size trailer: footer offset (u64), footer length (u32), footer crc (u32),
/// version (u16), flags (u16), tail magic (8 bytes).
pub const TRAILER_LEN: usize = 8 + 4 + 4 + 2 + 2 + 8;

/// Section kinds, in file order.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum SectionKind {
    /// The string table (function names, file names, label names and values).
    Strings = 1,
    /// Binaries and their build ids.
    Mappings = 2,
    /// Function records: name and file.
    Functions = 3,
    /// Location records: function, mapping, address, line.
    Locations = 4,
    /// The stack tree: each node's parent and location.
    Stacks = 5,
    /// Each series' label set.
    Series = 6,
    /// Label name and value → series postings.
    LabelIndex = 7,
    /// Each series' row count, its bytes in the three row columns and (since
    /// version 2) the scale its values are stored divided by.
    SeriesRows = 8,
    /// Row column: step deltas.
    Times = 9,
    /// Row column: stack node ids.
    StackIds = 10,
    /// Row column: values.
    Values = 11,
    /// Each series' total per step.
    SeriesTotals = 12,
    /// Optional, since version 4: the stack node of each rank StackIds name (per
    /// group of series since version 5). Written after Values, before
    /// SeriesTotals.
    StackRanks = 13,
}

impl SectionKind {
    /// Every kind every segment has, in file order.
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

    /// Kinds a segment may lack.
    pub const OPTIONAL: [SectionKind; 1] = [SectionKind::StackRanks];

    /// The kind a footer's kind byte names (`None` for kinds this build lacks).
    pub fn from_u8(v: u8) -> Option<Self> {
        Self::ALL
            .into_iter()
            .chain(Self::OPTIONAL)
            .find(|k| *k as u8 == v)
    }
}

/// Section compression codecs.
pub const CODEC_NONE: u8 = 0;
pub const CODEC_ZSTD: u8 = 1;
/// Row columns since version 3: one zstd frame per chunk of series (`zstd_frames.rs`).
pub const CODEC_ZSTD_FRAMES: u8 = 2;
/// Since version 6, for the sections a base holds but Strings: one zstd frame
/// compressed with the base's same section as a raw-content prefix.
pub const CODEC_ZSTD_BASE: u8 = 3;

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
    /// The symbol base it was written on (version 6), if any.
    #[serde(default)]
    pub base: Option<BaseRef>,
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

    pub(crate) fn encode(&self, out: &mut Vec<u8>, version: u16) {
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
        if version >= 6 {
            match self.base {
                None => out.push(0),
                Some(b) => {
                    out.push(1);
                    put_uvarint(out, b.id);
                    out.extend_from_slice(&b.checksum.to_le_bytes());
                }
            }
        }
    }

    pub(crate) fn decode(r: &mut Reader<'_>, version: u16) -> Result<Self> {
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
            base: None,
        };
        let n = r.count(1)?;
        for _ in 0..n {
            m.sources.push(r.uvarint()?);
        }
        if version >= 6 {
            m.base = match r.u8()? {
                0 => None,
                1 => Some(BaseRef {
                    id: r.uvarint()?,
                    checksum: r.u32_le()?,
                }),
                _ => {
                    return Err(crate::StorageError::Corrupt(
                        "segment footer: bad symbol base flag".into(),
                    ))
                }
            };
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
            base: None,
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
mod tests;
