//! Merging several decoded segments of one partition into one segment's input:
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

/// Accumulates decoded segments of one partition into one segment's input: the
/// dictionaries and stack trees re-interned into one builder, series merged by
/// labels, rows re-bucketed to the output step (values summed by the writer).
pub struct Merger {
    builder: DictBuilder,
    series: BTreeMap<Labels, Vec<Row>>,
    step_ms: i64,
    rows: usize,
}

impl Merger {
    /// A merger writing rows at `step_ms`.
    pub fn new(step_ms: i64) -> Self {
        Merger {
            builder: DictBuilder::new(),
            series: BTreeMap::new(),
            step_ms,
            rows: 0,
        }
    }

    /// Rough heap footprint of what was accumulated so far.
    pub fn approx_bytes(&self) -> usize {
        self.builder.approx_bytes() + self.rows * 16 + self.series.len() * 96
    }

    /// Adds every row of `seg`.
    pub fn add(&mut self, seg: &LoadedSegment) -> Result<()> {
        let m = &seg.meta;
        if m.step_ms <= 0 || self.step_ms % m.step_ms != 0 {
            return Err(StorageError::Invalid(format!(
                "segment {} step {} ms does not divide the output step {} ms",
                m.id, m.step_ms, self.step_ms
            )));
        }
        let ratio = self.step_ms / m.step_ms;
        let d = &seg.dict;
        let b = &mut self.builder;

        let mut mappings = Vec::with_capacity(d.mappings.len());
        for mp in &d.mappings {
            mappings.push(b.mapping(d.str(mp.file), d.str(mp.build_id)));
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

        for (sid, labels) in seg.series.iter().enumerate() {
            let rows = self.series.entry(labels.clone()).or_default();
            let before = rows.len();
            let mut bad = false;
            seg.for_each_row(sid as u32, |t, stack, value| {
                match nodes.get(stack as usize) {
                    Some(&n) => rows.push(Row {
                        t: (i64::from(t) / ratio) as u32,
                        stack: n,
                        value,
                    }),
                    None => bad = true,
                }
            })?;
            if bad {
                return Err(corrupt(m, "row refers to a missing stack node"));
            }
            self.rows += rows.len() - before;
        }
        Ok(())
    }

    /// The metadata of a merge of `sources` (one tenant and partition) at this
    /// merger's step: identity and provenance; the counts are filled in when the
    /// segment is encoded.
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
            partition_start_ms: first.partition_start_ms,
            partition_ms: first.partition_ms,
            step_ms: self.step_ms,
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
