//! A loaded segment's dictionary (mappings, functions, locations and the stack
//! tree), decoded when a query first needs it.
//!
//! A long block's stack tree is most of what loading it decodes, and a first
//! merge over a week or a month spent most of its work, and of the fresh memory
//! the kernel zeroed for it, decoding the dictionaries of the blocks it read
//! (docs/perf-log/2026-11-29-cold-queries.md). A merge needs a stack node's
//! tables only to resolve it into the frame tree, and the nodes a block shares
//! with its symbol base are resolved already once the warm-up has resolved the
//! last day (`gid_memo.rs`). So a load checks the
//! sections' checksums and reads their leading counts (the first bytes of each
//! decompressed section), and the tables are decoded on first use. The string
//! table is decoded at load, for the labels, and handed over then.
//!
//! A section whose bytes passed their checksum but do not decode fails every
//! query that needs the tables with a `Corrupt` error naming the segment, as a
//! chunk of rows that does not decode does (`rows.rs`): only a faulty writer
//! makes one.

use std::sync::OnceLock;

use bytes::Bytes;
use parking_lot::Mutex;

use super::base::{self, base_coded};
use super::reader::{corrupt, SegmentFile};
use super::{SectionKind, CODEC_NONE, CODEC_ZSTD, CODEC_ZSTD_BASE};
use crate::codec::Reader;
use crate::dict::{self, Dict};
use crate::error::{Result, StorageError};

/// The tables' entry counts, read at load.
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct Counts {
    pub(super) strings: usize,
    pub(super) mappings: usize,
    pub(super) functions: usize,
    pub(super) locations: usize,
    pub(super) nodes: usize,
    /// Decompressed bytes of the Strings section.
    string_bytes: usize,
}

/// The dictionary of a loaded segment: decoded on first use.
pub(super) struct LazyDict {
    file: SegmentFile,
    bytes: Bytes,
    /// The string table decoded at load, until the tables take it.
    strings: Mutex<Option<Vec<String>>>,
    counts: Counts,
    dict: OnceLock<std::result::Result<Dict, String>>,
}

impl std::fmt::Debug for LazyDict {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LazyDict")
            .field("counts", &self.counts)
            .field("decoded", &self.dict.get().is_some())
            .finish()
    }
}

/// Bytes of a section's head read for its count: a `uvarint` takes at most 10.
const COUNT_BYTES: usize = 10;

impl LazyDict {
    /// Checks the dictionary sections of `file` (mapped as `bytes`) against their
    /// checksums and reads their counts; `strings` is its decoded Strings section.
    pub(super) fn new(file: &SegmentFile, bytes: &Bytes, strings: Vec<String>) -> Result<Self> {
        let base = match file.meta.base {
            Some(want) => Some(base::load(&file.path, want)?),
            None => None,
        };
        let count = |kind: SectionKind| -> Result<usize> {
            let e = file.entry(kind)?;
            let stored = file.stored(bytes, e)?;
            file.check_crc(e, stored)?;
            let head = match (e.codec, &base) {
                (CODEC_NONE, _) => stored
                    .get(..COUNT_BYTES.min(stored.len()))
                    .map(<[u8]>::to_vec),
                (CODEC_ZSTD, _) => super::unzstd::head(stored, None, COUNT_BYTES).ok(),
                (CODEC_ZSTD_BASE, Some(b)) if base_coded(kind) => {
                    b.head(kind, stored, COUNT_BYTES).ok()
                }
                _ => None,
            }
            .ok_or_else(|| corrupt(&file.path, format!("section {kind:?}: no count")))?;
            let n = Reader::new(&head, "section count").uvarint()?;
            usize::try_from(n).map_err(|_| corrupt(&file.path, format!("section {kind:?}: count")))
        };
        let string_bytes = usize::try_from(file.entry(SectionKind::Strings)?.raw_len)
            .map_err(|_| corrupt(&file.path, "section too large"))?;
        let counts = Counts {
            strings: strings.len(),
            mappings: count(SectionKind::Mappings)?,
            functions: count(SectionKind::Functions)?,
            locations: count(SectionKind::Locations)?,
            nodes: count(SectionKind::Stacks)?,
            string_bytes,
        };
        Ok(LazyDict {
            file: file.clone(),
            bytes: bytes.clone(),
            strings: Mutex::new(Some(strings)),
            counts,
            dict: OnceLock::new(),
        })
    }

    /// The tables, decoded now if no query decoded them before.
    pub(super) fn get(&self) -> Result<&Dict> {
        self.dict
            .get_or_init(|| self.decode().map_err(|e| e.to_string()))
            .as_ref()
            .map_err(|why| StorageError::Corrupt(why.clone()))
    }

    /// Whether the tables are decoded.
    pub(super) fn is_decoded(&self) -> bool {
        self.dict.get().is_some_and(|d| d.is_ok())
    }

    fn decode(&self) -> Result<Dict> {
        let f = &self.file;
        let sec = |k| f.section(&self.bytes, k);
        let strings = match self.strings.lock().take() {
            Some(s) => s,
            None => dict::decode_strings(&sec(SectionKind::Strings)?)?,
        };
        let d = dict::decode_on(
            strings,
            &sec(SectionKind::Mappings)?,
            &sec(SectionKind::Functions)?,
            &sec(SectionKind::Locations)?,
            &sec(SectionKind::Stacks)?,
        )?;
        if d.node_count() != self.counts.nodes {
            return Err(corrupt(&f.path, "stack tree count changed"));
        }
        Ok(d)
    }

    pub(super) fn counts(&self) -> Counts {
        self.counts
    }

    /// What the decoded tables take, as [`Dict::approx_bytes`] counts it, from
    /// the counts: a segment is weighed in the cache when it is loaded.
    pub(super) fn approx_bytes(&self) -> usize {
        let c = &self.counts;
        c.string_bytes
            + c.strings * 24
            + (c.mappings + c.functions) * 8
            + c.locations * 24
            + c.nodes * 8
    }
}
