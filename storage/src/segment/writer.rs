//! Encoding a segment and writing it durably.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::fs;
use std::ops::Range;
use std::path::Path;

use rustc_hash::FxHashMap;

use super::base::{self, base_coded, SymbolBase};
use super::rebase::{self, BaseDecision, BaseFit, On};
use super::stack_ranks::StackRanks;
use super::tree_order;
use super::zstd_frames::{self, CHUNK_SERIES};
use super::{
    file_name, SectionKind, SegmentMeta, CODEC_ZSTD, CODEC_ZSTD_BASE, CODEC_ZSTD_FRAMES,
    FORMAT_VERSION, MAGIC_HEAD, MAGIC_TAIL,
};
use crate::codec::{put_ivarint, put_uvarint};
use crate::dict::{self, Dict};
use crate::durable::write_file;
use crate::error::{IoContext, Result, StorageError};
use crate::index::LabelIndex;
use crate::model::{Labels, SERVICE_NAME_LABEL};

/// One aggregated sample: at step index `t` (relative to the partition start) the
/// stack-tree node `stack` accumulated `value`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Row {
    pub t: u32,
    pub stack: u32,
    pub value: i64,
}

/// Everything a segment is made of. Series and rows may come in any order and rows
/// may repeat a `(t, stack)` pair; the writer sorts, sums and drops zeros.
///
/// The dictionary may be borrowed: a flush encodes a sealed head partition's
/// dictionary in place, since a copy of it (most of a partition of unique stacks)
/// would double the partition's memory while it is written.
pub struct SegmentInput<'a> {
    /// Identity and provenance; the writer fills counts, times and totals.
    pub meta: SegmentMeta,
    pub dict: Cow<'a, Dict>,
    pub series: Vec<(Labels, Vec<Row>)>,
}

/// Which symbol base (`base.rs`) a segment is written on.
#[derive(Clone, Copy)]
pub enum BaseChoice<'b> {
    /// None: the segment holds its tables whole (head flushes, the cluster).
    None,
    /// On `current` or on a new base numbered `new_id`, as `decide` says given
    /// how the segment fits `current` (no current base: a fresh one). A new
    /// base is returned for the caller to write before the segment.
    Shared {
        current: Option<&'b SymbolBase>,
        new_id: u64,
        decide: &'b dyn Fn(&BaseFit) -> BaseDecision,
    },
}

/// A segment's file bytes and metadata, and the base cut for it, if any.
pub(crate) struct Encoded {
    pub bytes: Vec<u8>,
    pub meta: SegmentMeta,
    pub new_base: Option<SymbolBase>,
}

/// Encodes `input` into the bytes of a segment file and the completed metadata.
pub fn encode_segment(input: SegmentInput<'_>, zstd_level: i32) -> Result<(Vec<u8>, SegmentMeta)> {
    let e = encode_segment_as(input, zstd_level, FORMAT_VERSION, BaseChoice::None)?;
    Ok((e.bytes, e.meta))
}

/// [`encode_segment`] in format `version` (2, or 1 for tests of old files), on
/// a base as `choice` says (version 6 on).
pub(super) fn encode_segment_as(
    input: SegmentInput<'_>,
    zstd_level: i32,
    version: u16,
    choice: BaseChoice<'_>,
) -> Result<Encoded> {
    let SegmentInput {
        mut meta,
        dict,
        mut series,
    } = input;
    let tree = tree_order::preorder(&dict, &mut series)?;
    let (dict, tree, on) = rebase::tables_for(choice, dict, tree, &mut series, version)?;
    let dict: &Dict = &dict;

    for (_, rows) in series.iter_mut() {
        rows.sort_unstable_by_key(|r| (r.t, r.stack));
        rows.dedup_by(|b, a| {
            if a.t == b.t && a.stack == b.stack {
                a.value += b.value;
                true
            } else {
                false
            }
        });
        rows.retain(|r| r.value != 0);
    }
    series.retain(|(_, rows)| !rows.is_empty());
    // Profile type and service first: what selectors pick, so a selection's
    // series are neighbours and a query decodes few chunks of rows.
    series.sort_by(|a, b| series_order(&a.0).cmp(&series_order(&b.0)));
    // Two inputs with the same labels (possible after compaction) become one series.
    let mut merged: Vec<(Labels, Vec<Row>)> = Vec::with_capacity(series.len());
    for (labels, rows) in series {
        match merged.last_mut() {
            Some((l, r)) if *l == labels => {
                r.extend(rows);
                r.sort_unstable_by_key(|x| (x.t, x.stack));
                r.dedup_by(|b, a| {
                    if a.t == b.t && a.stack == b.stack {
                        a.value += b.value;
                        true
                    } else {
                        false
                    }
                });
                r.retain(|x| x.value != 0);
            }
            _ => merged.push((labels, rows)),
        }
    }
    let series = merged;

    // Label strings share the dictionary's string table; those it lacks are
    // appended after it.
    let sids: FxHashMap<&str, u32> = dict
        .strings
        .iter()
        .enumerate()
        .map(|(i, s)| (s.as_str(), i as u32))
        .collect();
    let mut added: Vec<String> = Vec::new();
    let mut added_ids: FxHashMap<String, u32> = FxHashMap::default();
    let base = dict.strings.len() as u32;
    let mut sid = |s: &str, added: &mut Vec<String>| -> u32 {
        if let Some(&id) = sids.get(s).or_else(|| added_ids.get(s)) {
            return id;
        }
        let id = base + added.len() as u32;
        added.push(s.to_owned());
        added_ids.insert(s.to_owned(), id);
        id
    };

    let mut series_sec = Vec::new();
    let mut index = LabelIndex::default();
    put_uvarint(&mut series_sec, series.len() as u64);
    for (i, (labels, _)) in series.iter().enumerate() {
        index.add_series(i as u32);
        put_uvarint(&mut series_sec, labels.len() as u64);
        for (k, v) in labels.iter() {
            put_uvarint(&mut series_sec, sid(k, &mut added).into());
            put_uvarint(&mut series_sec, sid(v, &mut added).into());
            index.add(i as u32, k, v);
        }
    }
    let index_sec = index.encode(|s| sid(s, &mut added));

    let scales: Vec<i64> = series
        .iter()
        .map(|(_, rows)| if version >= 2 { value_scale(rows) } else { 1 })
        .collect();
    let repeat_of = if version >= 3 {
        repeats(&series, &scales)
    } else {
        vec![None; series.len()]
    };
    // Repeats store no rows: their stacks are not ranked.
    let mut ranks = if version >= 4 {
        StackRanks::of(
            rank_groups(&series, version),
            |s| match repeat_of[s] {
                Some(_) => &[],
                None => &series[s].1[..],
            },
            tree.parents.len(),
        )
    } else {
        None
    };
    let (mut times, mut stacks, mut values) = (Vec::new(), Vec::new(), Vec::new());
    let mut rows_sec = Vec::new();
    let mut totals_sec = Vec::new();
    put_uvarint(&mut rows_sec, series.len() as u64);
    put_uvarint(&mut totals_sec, series.len() as u64);
    let (mut min_t, mut max_t) = (u32::MAX, 0u32);
    let (mut nrows, mut value_total) = (0u64, 0i64);
    // Each series' first byte in each column: where the frames are cut.
    let mut series_starts: Vec<[usize; 3]> = Vec::with_capacity(series.len() + 1);
    for (si, (_, rows)) in series.iter().enumerate() {
        let own = repeat_of[si].is_none();
        // With ranks, the rows as stored: stacks by rank, in `(t, rank)` order.
        let ranked = match ranks.as_mut() {
            Some(r) if own => r.ranked(si, rows),
            _ => None,
        };
        let rows: Cow<'_, [Row]> = match ranked {
            Some(ranked) => Cow::Owned(ranked),
            None => Cow::Borrowed(&rows[..]),
        };
        let (t0, s0, v0) = (times.len(), stacks.len(), values.len());
        series_starts.push([t0, s0, v0]);
        let scale = scales[si];
        let mut prev_t = 0u32;
        let mut prev_stack = 0u32;
        let mut step_totals: BTreeMap<u32, i64> = BTreeMap::new();
        for (i, r) in rows.iter().enumerate() {
            if own {
                // Times: delta from the previous row of the series (first row:
                // absolute).
                put_uvarint(&mut times, u64::from(r.t - if i == 0 { 0 } else { prev_t }));
                // Stacks: delta within a step, absolute at the first row of each step.
                let same_step = i > 0 && r.t == prev_t;
                put_uvarint(
                    &mut stacks,
                    u64::from(if same_step {
                        r.stack - prev_stack
                    } else {
                        r.stack
                    }),
                );
                // Exact: `scale` divides every value of the series.
                put_ivarint(&mut values, r.value / scale);
            }
            prev_t = r.t;
            prev_stack = r.stack;
            *step_totals.entry(r.t).or_default() += r.value;
            min_t = min_t.min(r.t);
            max_t = max_t.max(r.t);
            value_total = value_total.wrapping_add(r.value);
        }
        nrows += rows.len() as u64;
        put_uvarint(&mut rows_sec, rows.len() as u64);
        let spans = [t0..times.len(), s0..stacks.len(), v0..values.len()];
        match repeat_of[si] {
            Some(j) => put_uvarint(&mut rows_sec, (si - j) as u64),
            None => {
                if version >= 3 {
                    put_uvarint(&mut rows_sec, 0);
                }
                for span in &spans {
                    put_uvarint(&mut rows_sec, span.len() as u64);
                }
            }
        }
        if version >= 2 {
            put_uvarint(&mut rows_sec, scale as u64);
        }
        put_uvarint(&mut totals_sec, step_totals.len() as u64);
        let mut prev = 0u32;
        for (t, total) in step_totals {
            put_uvarint(&mut totals_sec, u64::from(t - prev));
            put_ivarint(&mut totals_sec, total);
            prev = t;
        }
    }
    series_starts.push([times.len(), stacks.len(), values.len()]);
    if series.is_empty() {
        min_t = 0;
    }

    meta.series = series.len() as u64;
    meta.rows = nrows;
    meta.value_total = value_total;
    meta.min_time_ms = meta.partition_start_ms + i64::from(min_t) * meta.step_ms;
    meta.max_time_ms = meta.partition_start_ms + i64::from(max_t) * meta.step_ms;

    // Sections are compressed one at a time, each raw buffer dropped once stored:
    // the dictionary's sections are only built when their turn comes.
    let mut file = Vec::with_capacity(1 << 16);
    file.extend_from_slice(MAGIC_HEAD);
    let mut entries = Vec::new();
    let mut sections = 0u64;
    let mut store = |kind: SectionKind, raw: &[u8], how: Coding<'_>| -> Result<()> {
        let (codec, stored) = match how {
            Coding::Whole => (CODEC_ZSTD, compress_section(raw, zstd_level)),
            Coding::Frames(bounds) => (
                CODEC_ZSTD_FRAMES,
                zstd_frames::encode(raw, &bounds, CHUNK_SERIES, zstd_level),
            ),
            Coding::OnPrefix(prefix) => match base::compress_on(raw, prefix, zstd_level) {
                Some(stored) => (CODEC_ZSTD_BASE, stored),
                None => (CODEC_ZSTD, compress_section(raw, zstd_level)),
            },
        };
        let stored = stored.map_err(|e| StorageError::Io {
            path: "<zstd>".into(),
            source: e,
        })?;
        let offset = file.len() as u64;
        file.extend_from_slice(&stored);
        entries.push(kind as u8);
        entries.push(codec);
        put_uvarint(&mut entries, offset);
        put_uvarint(&mut entries, stored.len() as u64);
        put_uvarint(&mut entries, raw.len() as u64);
        entries.extend_from_slice(&crc32fast::hash(&stored).to_le_bytes());
        sections += 1;
        Ok(())
    };
    // A new base's sections are this segment's own, kept raw for it.
    let mut kept: Vec<Vec<u8>> = Vec::new();
    for kind in base::KINDS {
        let raw = match kind {
            SectionKind::Strings => dict::encode_string_table(&dict.strings, &added),
            SectionKind::Mappings => dict::encode_mappings(dict),
            SectionKind::Functions => dict::encode_functions(dict),
            SectionKind::Locations => dict::encode_locations(dict),
            _ => dict::encode_stacks(&tree.parents, &tree.node_locations),
        };
        let prefix = match on {
            On::Base(b) if base_coded(kind) => b.raw(kind),
            On::Cut(_) if base_coded(kind) => Some(&raw[..]),
            _ => None,
        };
        store(kind, &raw, prefix.map_or(Coding::Whole, Coding::OnPrefix))?;
        if matches!(on, On::Cut(_)) {
            kept.push(raw);
        }
    }
    drop(tree);
    let new_base = match (on, <[Vec<u8>; 5]>::try_from(kept)) {
        (On::Cut(id), Ok(raw)) => Some(SymbolBase::new(id, raw)),
        _ => None,
    };
    meta.base = match on {
        On::Base(b) => Some(b.reference()),
        On::Cut(_) => new_base.as_ref().map(SymbolBase::reference),
        On::Own => None,
    };
    store(SectionKind::Series, &series_sec, Coding::Whole)?;
    store(SectionKind::LabelIndex, &index_sec, Coding::Whole)?;
    store(SectionKind::SeriesRows, &rows_sec, Coding::Whole)?;
    for (c, (kind, raw)) in [
        (SectionKind::Times, times),
        (SectionKind::StackIds, stacks),
        (SectionKind::Values, values),
    ]
    .into_iter()
    .enumerate()
    {
        let how = match version {
            3.. => Coding::Frames(
                series_starts[..series_starts.len() - 1]
                    .iter()
                    .step_by(CHUNK_SERIES)
                    .map(|s| s[c])
                    .chain(std::iter::once(raw.len()))
                    .collect(),
            ),
            _ => Coding::Whole,
        };
        store(kind, &raw, how)?;
    }
    // Before SeriesTotals, so that the last section stays a summary one.
    if let Some(r) = &ranks {
        store(SectionKind::StackRanks, &r.encode(version), Coding::Whole)?;
    }
    store(SectionKind::SeriesTotals, &totals_sec, Coding::Whole)?;
    let mut table = Vec::with_capacity(entries.len() + 2);
    put_uvarint(&mut table, sections);
    table.extend_from_slice(&entries);
    let footer_offset = file.len() as u64;
    let mut footer = table;
    meta.encode(&mut footer, version);
    let footer_crc = crc32fast::hash(&footer);
    file.extend_from_slice(&footer);
    file.extend_from_slice(&footer_offset.to_le_bytes());
    file.extend_from_slice(&(footer.len() as u32).to_le_bytes());
    file.extend_from_slice(&footer_crc.to_le_bytes());
    file.extend_from_slice(&version.to_le_bytes());
    file.extend_from_slice(&0u16.to_le_bytes());
    file.extend_from_slice(MAGIC_TAIL);

    meta.size_bytes = file.len() as u64;
    meta.checksum = footer_crc;
    Ok(Encoded {
        bytes: file,
        meta,
        new_base,
    })
}

/// How a section is compressed.
enum Coding<'p> {
    /// One zstd frame.
    Whole,
    /// A row column since version 3: one frame per chunk of series, cut at these
    /// column offsets.
    Frames(Vec<usize>),
    /// One frame on a base's same section (codec 3).
    OnPrefix(&'p [u8]),
}

/// For each series, the earlier series whose rows it repeats (version 3; see
/// `rows.rs`): the same steps and stacks, and values alike once divided by each
/// one's scale. One pprof with several sample types gives such series. Decided
/// on nodes, before ranking: the reader copies the rows the earlier series
/// decodes to, so a series may repeat one whose stacks another table ranks
/// (CPU samples and CPU nanoseconds are two profile types, ranked apart).
fn repeats(series: &[(Labels, Vec<Row>)], scales: &[i64]) -> Vec<Option<usize>> {
    use std::hash::{Hash, Hasher};
    let scaled = |s: usize| {
        let scale = scales[s];
        series[s]
            .1
            .iter()
            .map(move |r| (r.t, r.stack, r.value / scale))
    };
    let mut own_rows: FxHashMap<u64, Vec<usize>> = FxHashMap::default();
    let mut out = Vec::with_capacity(series.len());
    for (si, (_, rows)) in series.iter().enumerate() {
        let mut h = rustc_hash::FxHasher::default();
        rows.len().hash(&mut h);
        scaled(si).for_each(|r| r.hash(&mut h));
        let key = h.finish();
        let seen = own_rows.entry(key).or_default();
        let same = seen.iter().copied().find(|&j| scaled(j).eq(scaled(si)));
        if same.is_none() {
            seen.push(si);
        }
        out.push(same);
    }
    out
}

/// Sections above this size are compressed with a window as large as they are
/// (up to zstd's default decoder limit, 128 MiB) and long-distance matching.
const LONG_SECTION_BYTES: usize = 1 << 20;

/// zstd's largest window a decoder accepts without being told to (2^27).
pub(super) const MAX_WINDOW_LOG: u32 = 27;

/// The groups of series ranked apart (see `stack_ranks.rs`): since version 5,
/// each run of series of one profile type and service (neighbours: see
/// [`series_order`]), whose profiles sample that service's stacks; before, one
/// group of every series.
fn rank_groups(series: &[(Labels, Vec<Row>)], version: u16) -> Vec<Range<usize>> {
    if version < 5 {
        return std::iter::once(0..series.len()).collect();
    }
    fn key(l: &Labels) -> (Option<&str>, Option<&str>) {
        let (ty, service, _) = series_order(l);
        (ty, service)
    }
    let mut groups: Vec<Range<usize>> = Vec::new();
    for (i, (labels, _)) in series.iter().enumerate() {
        match groups.last_mut() {
            Some(g) if key(&series[g.start].0) == key(labels) => g.end = i + 1,
            _ => groups.push(i..i + 1),
        }
    }
    groups
}

/// The order series are written in (see `rows.rs`): equal labels stay adjacent.
fn series_order(l: &Labels) -> (Option<&str>, Option<&str>, &Labels) {
    (l.profile_type(), l.get(SERVICE_NAME_LABEL), l)
}

/// Compresses one section whole. In format 2 the row columns were laid out series
/// after series, and what repeated was the same steps in other series: in a day
/// block those lie tens of megabytes apart, beyond level 3's 2 MiB window. A window
/// covering the section and long-distance matching found them again, halving
/// those columns (docs/perf-log/2026-11-25-round-01-bytes-same-rows-day-blocks.md).
/// Format 3 frames the row columns per chunk and stores repeated series
/// once instead (`zstd_frames.rs`); the stack tree and the other large sections still
/// take this path. The frames decode with the default decoder.
fn compress_section(raw: &[u8], level: i32) -> std::io::Result<Vec<u8>> {
    if raw.len() <= LONG_SECTION_BYTES {
        return zstd::bulk::compress(raw, level);
    }
    let window_log = (usize::BITS - (raw.len() - 1).leading_zeros()).min(MAX_WINDOW_LOG);
    let mut c = zstd::bulk::Compressor::new(level)?;
    c.set_parameter(zstd::zstd_safe::CParameter::WindowLog(window_log))?;
    c.set_parameter(zstd::zstd_safe::CParameter::EnableLongDistanceMatching(
        true,
    ))?;
    c.compress(raw)
}

/// The largest number dividing every value of a series' rows (1 when there are
/// none). CPU profiles count samples times the sampling period, so their
/// nanoseconds are all multiples of it (10,000,000 at 100 Hz): stored divided,
/// a value takes one or two bytes instead of four or five.
fn value_scale(rows: &[Row]) -> i64 {
    fn gcd(mut a: u64, mut b: u64) -> u64 {
        while b != 0 {
            (a, b) = (b, a % b);
        }
        a
    }
    let g = rows.iter().fold(0u64, |g, r| {
        if g == 1 {
            1
        } else {
            gcd(g, r.value.unsigned_abs())
        }
    });
    // A series of only i64::MIN has a gcd of 2^63, which is no i64: scale 1.
    i64::try_from(g).ok().filter(|&g| g > 0).unwrap_or(1)
}

/// Writes a segment under `data_dir/segments/<tenant>/` durably: temporary file,
/// fsync, rename, fsync of the directory. Returns the metadata with `file` set.
pub fn write_segment(
    data_dir: &Path,
    input: SegmentInput<'_>,
    zstd_level: i32,
) -> Result<SegmentMeta> {
    Ok(write_segment_on(data_dir, input, zstd_level, BaseChoice::None)?.0)
}

/// [`write_segment`] on a symbol base as `choice` says. A base cut for it is
/// written first, durably (a crash in between leaves a base nothing names), and
/// returned.
pub fn write_segment_on(
    data_dir: &Path,
    input: SegmentInput<'_>,
    zstd_level: i32,
    choice: BaseChoice<'_>,
) -> Result<(SegmentMeta, Option<SymbolBase>)> {
    let Encoded {
        bytes,
        mut meta,
        new_base,
    } = encode_segment_as(input, zstd_level, FORMAT_VERSION, choice)?;
    let rel = Path::new("segments")
        .join(meta.tenant.as_str())
        .join(file_name(meta.partition_start_ms, meta.id));
    let dir = data_dir.join("segments").join(meta.tenant.as_str());
    fs::create_dir_all(&dir).at(&dir)?;
    if let Some(b) = &new_base {
        base::write_base(&dir, b, zstd_level)?;
    }
    write_file(&data_dir.join(&rel), &bytes)?;
    meta.file = rel.to_string_lossy().into_owned();
    Ok((meta, new_base))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// 3 MiB of noise, then the same 3 MiB again: the repeat lies beyond level 3's
    /// window, as the same steps of other series do in a day block.
    fn far_repeat() -> Vec<u8> {
        let mut x = 0x9E37_79B9_7F4A_7C15u64;
        let half: Vec<u8> = (0..3 << 20)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x as u8
            })
            .collect();
        [half.clone(), half].concat()
    }

    #[test]
    fn a_long_section_finds_repeats_beyond_the_default_window_and_decodes_plainly() {
        let raw = far_repeat();
        let plain = zstd::bulk::compress(&raw, 3).unwrap();
        let long = compress_section(&raw, 3).unwrap();
        assert!(
            plain.len() > 6 << 20,
            "noise does not compress: {}",
            plain.len()
        );
        assert!(long.len() < (3 << 20) + (256 << 10), "{}", long.len());
        // The reader's call, with no decoder parameters.
        assert_eq!(zstd::bulk::decompress(&long, raw.len()).unwrap(), raw);
    }
}
