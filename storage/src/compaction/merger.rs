//! Merging several decoded segments into one segment's input — of one partition,
//! or of several partitions into one wider block:
//! the mechanism of compaction and downsampling (what to merge and when is planned
//! in `store/lifecycle/plan.rs`; the durable write and the swap are in
//! `store/lifecycle/merge.rs`).
//!
//! Atomicity: the output segment is written durably (tmp, fsync, rename) with the
//! ids it replaces in its footer (`sources`), then cataloged, then swapped into the
//! live set under one lock, then the sources are deleted. A crash before the rename
//! leaves the sources (the `.tmp` is removed at open); after it, `reconcile` at open
//! sees the output and deletes every segment it lists, so the data is never counted
//! twice and never lost.

use std::borrow::Cow;
use std::collections::BTreeMap;

use crate::dict::{DictBuilder, LocationRec, NO_PARENT};
use crate::error::{Result, StorageError};
use crate::model::Labels;
use crate::segment::{LoadedSegment, Row, SegmentInput, SegmentMeta};

fn corrupt(seg: &SegmentMeta, what: &str) -> StorageError {
    StorageError::Corrupt(format!("segment {}: {what}", seg.id))
}

/// The time frame a merge writes: the output's partition and step. A block is a
/// partition wider than its sources' (a day of hourly segments); every source must
/// lie inside it on the grid of the output step.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OutputFrame {
    /// Start of the output partition (ms since the epoch).
    pub start_ms: i64,
    /// Its width.
    pub width_ms: i64,
    /// Width of one of its steps; divides `width_ms`.
    pub step_ms: i64,
}

/// Accumulates decoded segments into one segment's input: the dictionaries and
/// stack trees re-interned into one builder, series merged by labels, rows
/// re-bucketed to the output frame's steps (values summed by the writer).
pub struct Merger {
    builder: DictBuilder,
    series: BTreeMap<Labels, Vec<Row>>,
    frame: OutputFrame,
    rows: usize,
}

impl Merger {
    /// A merger writing rows in `frame`.
    pub fn new(frame: OutputFrame) -> Self {
        Merger {
            builder: DictBuilder::new(),
            series: BTreeMap::new(),
            frame,
            rows: 0,
        }
    }

    /// How a row at step `t` of a source with metadata `m` maps to an output step:
    /// `(offset, ratio)` with output step `(offset + t) / ratio`. An error when the
    /// source's steps do not fall on the output grid or its partition lies outside
    /// the output's.
    fn rebase(&self, m: &SegmentMeta) -> Result<(i64, i64)> {
        let f = &self.frame;
        let invalid = |why: String| Err(StorageError::Invalid(format!("segment {}: {why}", m.id)));
        if m.step_ms <= 0 || f.step_ms <= 0 || f.step_ms % m.step_ms != 0 {
            return invalid(format!(
                "step {} ms does not divide the output step {} ms",
                m.step_ms, f.step_ms
            ));
        }
        let from = m.partition_start_ms - f.start_ms;
        if from < 0 || m.partition_end_ms() > f.start_ms + f.width_ms || from % f.step_ms != 0 {
            return invalid(format!(
                "partition [{}, {}) is not aligned inside the output [{}, {})",
                m.partition_start_ms,
                m.partition_end_ms(),
                f.start_ms,
                f.start_ms + f.width_ms
            ));
        }
        Ok((from / m.step_ms, f.step_ms / m.step_ms))
    }

    /// Rough heap footprint of what was accumulated so far.
    pub fn approx_bytes(&self) -> usize {
        self.builder.approx_bytes() + self.rows * 16 + self.series.len() * 96
    }

    /// Adds every row of `seg`.
    pub fn add(&mut self, seg: &LoadedSegment) -> Result<()> {
        let m = &seg.meta;
        let (offset, ratio) = self.rebase(m)?;
        let d = seg.dict()?;
        let b = &mut self.builder;

        let mut mappings = Vec::with_capacity(d.mappings.len());
        for mp in &d.mappings {
            mappings.push(b.mapping(d.str(mp.file), d.str(mp.build_id), mp.range));
        }
        let mut functions = Vec::with_capacity(d.functions.len());
        for f in &d.functions {
            functions.push(b.function(d.str(f.name), d.str(f.file)));
        }
        let mut locations = Vec::with_capacity(d.locations.len());
        for l in &d.locations {
            let function = match l.function {
                Some(f) => Some(
                    *functions
                        .get(f as usize)
                        .ok_or_else(|| corrupt(m, "location refers to a missing function"))?,
                ),
                None => None,
            };
            let mapping = match l.mapping {
                Some(x) => Some(
                    *mappings
                        .get(x as usize)
                        .ok_or_else(|| corrupt(m, "location refers to a missing mapping"))?,
                ),
                None => None,
            };
            locations.push(b.location(LocationRec {
                function,
                mapping,
                address: l.address,
                line: l.line,
            }));
        }
        // Parents precede children, so one forward pass maps the whole tree.
        let mut nodes: Vec<u32> = Vec::with_capacity(d.parents.len());
        for (i, (&parent, &loc)) in d.parents.iter().zip(&d.node_locations).enumerate() {
            let parent = if parent == NO_PARENT {
                NO_PARENT
            } else if (parent as usize) < i {
                nodes[parent as usize]
            } else {
                return Err(corrupt(m, "stack node parent out of order"));
            };
            let loc = *locations
                .get(loc as usize)
                .ok_or_else(|| corrupt(m, "stack node refers to a missing location"))?;
            nodes.push(b.child(parent, loc));
        }

        let steps = self.frame.width_ms / self.frame.step_ms;
        for (sid, labels) in seg.series.iter().enumerate() {
            let rows = self.series.entry(labels.clone()).or_default();
            let before = rows.len();
            let mut bad = None;
            seg.for_each_row(sid as u32, |t, stack, value| {
                let out = (offset + i64::from(t)) / ratio;
                match nodes.get(stack as usize) {
                    // Only a damaged source has a step past its partition's end.
                    _ if out >= steps => bad = Some("row step outside its partition"),
                    Some(&n) => rows.push(Row {
                        t: out as u32,
                        stack: n,
                        value,
                    }),
                    None => bad = Some("row refers to a missing stack node"),
                }
            })?;
            if let Some(why) = bad {
                return Err(corrupt(m, why));
            }
            self.rows += rows.len() - before;
        }
        Ok(())
    }

    /// The metadata of a merge of `sources` (one tenant) in this merger's frame:
    /// identity and provenance; the counts are filled in when the segment is
    /// encoded.
    pub fn merged_meta<'a>(
        &self,
        id: u64,
        sources: impl IntoIterator<Item = &'a SegmentMeta> + Clone,
        replaces: Vec<u64>,
        created_ms: i64,
    ) -> Option<SegmentMeta> {
        let first = sources.clone().into_iter().next()?.clone();
        Some(SegmentMeta {
            id,
            tenant: first.tenant,
            partition_start_ms: self.frame.start_ms,
            partition_ms: self.frame.width_ms,
            step_ms: self.frame.step_ms,
            min_time_ms: 0,
            max_time_ms: 0,
            level: sources
                .clone()
                .into_iter()
                .map(|m| m.level)
                .max()
                .unwrap_or(0)
                + 1,
            max_lsn: sources.into_iter().map(|m| m.max_lsn).max().unwrap_or(0),
            series: 0,
            rows: 0,
            value_total: 0,
            created_ms,
            sources: replaces,
            file: String::new(),
            size_bytes: 0,
            checksum: 0,
            base: None,
        })
    }

    /// The merged input; `meta` supplies identity and provenance.
    pub fn finish(self, meta: SegmentMeta) -> SegmentInput<'static> {
        SegmentInput {
            meta,
            dict: Cow::Owned(self.builder.finish()),
            series: self.series.into_iter().collect(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dict::DictBuilder;
    use crate::segment::{write_segment, SegmentFile};

    const HOUR: i64 = 3_600_000;

    /// A one-series segment of the hour at `start` with 10 s steps: `rows` as
    /// (step, value), all on one stack.
    fn hour(dir: &std::path::Path, id: u64, start: i64, rows: &[(u32, i64)]) -> LoadedSegment {
        let (b, stack) = DictBuilder::with_one_stack();
        let meta = SegmentMeta::for_test(id, start, HOUR);
        let rows = rows
            .iter()
            .map(|&(t, value)| Row { t, stack, value })
            .collect();
        let input = SegmentInput {
            meta,
            dict: Cow::Owned(b.finish()),
            series: vec![(Labels::new([("s", "a")]), rows)],
        };
        let written = write_segment(dir, input, 1).unwrap();
        SegmentFile::open(&dir.join(written.file))
            .unwrap()
            .load()
            .unwrap()
    }

    #[test]
    fn hours_rebase_into_a_wider_block_at_a_coarser_step() {
        let dir = tempfile::tempdir().unwrap();
        let day = 20 * 86_400_000;
        let a = hour(dir.path(), 1, day, &[(0, 1), (5, 2), (6, 4)]);
        let b = hour(dir.path(), 2, day + 3 * HOUR, &[(359, 8)]);
        let frame = OutputFrame {
            start_ms: day,
            width_ms: 86_400_000,
            step_ms: 60_000,
        };
        let mut m = Merger::new(frame);
        m.add(&a).unwrap();
        m.add(&b).unwrap();
        let meta = m.merged_meta(9, [&a.meta, &b.meta], vec![], 0).unwrap();
        assert_eq!(
            (meta.partition_start_ms, meta.partition_ms),
            (day, 86_400_000)
        );
        let out = write_segment(dir.path(), m.finish(meta), 1).unwrap();
        let seg = SegmentFile::open(&dir.path().join(out.file))
            .unwrap()
            .load()
            .unwrap();
        let mut got = Vec::new();
        seg.for_each_row(0, |t, _, v| got.push((seg.time_of(t), v)))
            .unwrap();
        // 0 s and 50 s share the first minute, 60 s starts the second; 3 h + 3590 s
        // is the last minute of hour 3.
        assert_eq!(
            got,
            vec![(day, 3), (day + 60_000, 4), (day + 4 * HOUR - 60_000, 8)]
        );
    }

    #[test]
    fn sources_outside_or_off_the_grid_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let a = hour(dir.path(), 1, 5 * HOUR, &[(0, 1)]);
        let refused = |start_ms, width_ms, step_ms| {
            let mut m = Merger::new(OutputFrame {
                start_ms,
                width_ms,
                step_ms,
            });
            matches!(m.add(&a), Err(StorageError::Invalid(_)))
        };
        assert!(refused(0, 5 * HOUR, 10_000), "ends before the source");
        assert!(refused(6 * HOUR, HOUR, 10_000), "starts after it");
        assert!(refused(5_000, 24 * HOUR, 10_000), "off its step grid");
        assert!(refused(0, 24 * HOUR, 15_000), "step not a multiple");
        assert!(!refused(0, 24 * HOUR, 60_000));
    }
}
