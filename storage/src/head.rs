//! The in-memory head: fresh samples of one tenant and time partition, aggregated by
//! `(series, time step, stack)` until the partition is flushed into a segment.
//!
//! A head partition owns a dictionary of the same shape as a segment's, so flushing
//! is a sort and an encode, not a re-interning of every frame.

use std::borrow::Cow;
use std::time::Instant;

use rustc_hash::FxHashMap;

mod rows;

use rows::SeriesRows;

use crate::dict::{Dict, DictBuilder, LocationRec, MappingRange};
use crate::error::Result;
use crate::index::LabelIndex;
use crate::intern::{Interned, NOT_INTERNED};
use crate::model::{Batch, Labels, TenantId};
use crate::segment::{SegmentInput, SegmentMeta};

pub struct HeadPartition {
    pub tenant: TenantId,
    pub start_ms: i64,
    pub partition_ms: i64,
    pub step_ms: i64,
    dict: DictBuilder,
    series_ids: FxHashMap<Labels, u32>,
    series: Vec<Labels>,
    index: LabelIndex,
    samples: Vec<SeriesRows>,
    /// Stack node of each interned stack id seen here, for ids of generation
    /// `by_id_generation` (see `crate::intern`). A map, not an array indexed by
    /// id: ids are numbered across the store (every tenant), so a partition that
    /// sees a few late ids would otherwise hold room for all the ids before them.
    by_id: FxHashMap<u32, u32>,
    /// Dictionary location of each interned location id seen here, same
    /// generation rule: a stack new to the partition then costs a lookup a frame,
    /// not its function's names hashed and compared again in every batch.
    locations_by_id: FxHashMap<u32, u32>,
    by_id_generation: u64,
    /// First and last WAL sequence numbers applied here.
    pub min_lsn: u64,
    pub max_lsn: u64,
    pub last_write: Instant,
    rows: usize,
    label_bytes: usize,
}

/// Remaps one batch's symbol ids into a head dictionary, each id at most once.
struct Remap {
    mappings: Vec<u32>,
    functions: Vec<u32>,
    locations: Vec<u32>,
    stacks: Vec<u32>,
    path: Vec<u32>,
}

const UNMAPPED: u32 = u32::MAX;

/// The partition's dictionary locations by interned location id, and the batch's
/// interned location ids (empty when it has none).
struct Known<'a> {
    ids: &'a [u32],
    by_id: &'a mut FxHashMap<u32, u32>,
}

impl Remap {
    fn new(b: &Batch) -> Self {
        Remap {
            mappings: vec![UNMAPPED; b.symbols.mappings.len()],
            functions: vec![UNMAPPED; b.symbols.functions.len()],
            locations: vec![UNMAPPED; b.symbols.locations.len()],
            stacks: vec![UNMAPPED; b.stacks.len()],
            path: Vec::new(),
        }
    }

    // Callers only pass ids that `Batch::validate` checked, so indexing is in range.
    fn location(&mut self, d: &mut DictBuilder, b: &Batch, l: u32, known: &mut Known<'_>) -> u32 {
        let cached = self.locations[l as usize];
        if cached != UNMAPPED {
            return cached;
        }
        let interned = known.ids.get(l as usize).copied().unwrap_or(NOT_INTERNED);
        if let Some(&id) = known.by_id.get(&interned) {
            self.locations[l as usize] = id;
            return id;
        }
        let loc = b.symbols.locations[l as usize];
        let function = loc.function.map(|f| {
            let c = &mut self.functions[f as usize];
            if *c == UNMAPPED {
                let func = &b.symbols.functions[f as usize];
                *c = d.function(&func.name, &func.file);
            }
            *c
        });
        let mapping = loc.mapping.map(|m| {
            let c = &mut self.mappings[m as usize];
            if *c == UNMAPPED {
                let map = &b.symbols.mappings[m as usize];
                *c = d.mapping(&map.file, &map.build_id, MappingRange::of(map));
            }
            *c
        });
        let id = d.location(LocationRec {
            function,
            mapping,
            address: loc.address,
            line: loc.line,
        });
        self.locations[l as usize] = id;
        if interned != NOT_INTERNED {
            known.by_id.insert(interned, id);
        }
        id
    }

    fn stack(&mut self, d: &mut DictBuilder, b: &Batch, s: u32, known: &mut Known<'_>) -> u32 {
        let cached = self.stacks[s as usize];
        if cached != UNMAPPED {
            return cached;
        }
        let mut path = std::mem::take(&mut self.path);
        path.clear();
        for &l in b.stacks.get(s).unwrap_or(&[]) {
            path.push(self.location(d, b, l, known));
        }
        let id = d.stack(&path);
        self.path = path;
        self.stacks[s as usize] = id;
        id
    }
}

impl HeadPartition {
    pub fn new(tenant: TenantId, start_ms: i64, partition_ms: i64, step_ms: i64) -> Self {
        HeadPartition {
            tenant,
            start_ms,
            partition_ms,
            step_ms,
            dict: DictBuilder::new(),
            series_ids: FxHashMap::default(),
            series: Vec::new(),
            index: LabelIndex::default(),
            samples: Vec::new(),
            by_id: FxHashMap::default(),
            locations_by_id: FxHashMap::default(),
            by_id_generation: 0,
            min_lsn: 0,
            max_lsn: 0,
            last_write: Instant::now(),
            rows: 0,
            label_bytes: 0,
        }
    }

    pub fn end_ms(&self) -> i64 {
        self.start_ms + self.partition_ms
    }

    fn series_id(&mut self, labels: &Labels) -> u32 {
        if let Some(&id) = self.series_ids.get(labels) {
            return id;
        }
        let id = self.series.len() as u32;
        self.index.add_series(id);
        for (k, v) in labels.iter() {
            self.index.add(id, k, v);
            self.label_bytes += 2 * (k.len() + v.len()) + 96;
        }
        self.label_bytes += 160;
        self.series.push(labels.clone());
        self.series_ids.insert(labels.clone(), id);
        self.samples.push(SeriesRows::default());
        id
    }

    /// The stack node of batch stack `s`: by its interned id when it has one this
    /// partition has seen, else interned from its frames (and remembered by id).
    fn stack_node(
        &mut self,
        remap: &mut Option<Remap>,
        batch: &Batch,
        interned: Option<&Interned>,
        s: u32,
    ) -> u32 {
        let id = interned.map_or(NOT_INTERNED, |i| {
            i.stacks.get(s as usize).copied().unwrap_or(NOT_INTERNED)
        });
        if let Some(&node) = self.by_id.get(&id) {
            return node;
        }
        let mut known = Known {
            ids: interned.map_or(&[], |i| i.locations.as_slice()),
            by_id: &mut self.locations_by_id,
        };
        // Built on the first stack that needs it: with every stack known by id, a
        // batch costs no per-symbol tables at all.
        let node = remap.get_or_insert_with(|| Remap::new(batch)).stack(
            &mut self.dict,
            batch,
            s,
            &mut known,
        );
        if id != NOT_INTERNED {
            self.by_id.insert(id, node);
        }
        node
    }

    /// Adds the samples of `batch` that fall in this partition. `batch` must have
    /// passed [`Batch::validate`], and `interned` (when given) be the interner's
    /// answer for it. Returns the number of samples applied.
    pub fn apply(&mut self, lsn: u64, batch: &Batch, interned: Option<&Interned>) -> u64 {
        if let Some(i) = interned {
            if i.generation != self.by_id_generation {
                self.by_id = FxHashMap::default();
                self.locations_by_id = FxHashMap::default();
                self.by_id_generation = i.generation;
            }
        }
        let mut remap = None;
        // Each batch stack's node where the partition knows its id, looked up in
        // one pass so the cache misses overlap; the others on first use.
        let mut nodes: Vec<u32> = match interned {
            Some(i) => i
                .stacks
                .iter()
                .map(|id| self.by_id.get(id).copied().unwrap_or(UNMAPPED))
                .collect(),
            None => vec![UNMAPPED; batch.stacks.len()],
        };
        let (start, end, step) = (self.start_ms, self.end_ms(), self.step_ms);
        let mut applied = 0u64;
        for s in &batch.series {
            let mut sid = None;
            for sample in &s.samples {
                if sample.value == 0 || sample.timestamp_ms < start || sample.timestamp_ms >= end {
                    continue;
                }
                let sid = match sid {
                    Some(id) => id,
                    None => {
                        let id = self.series_id(&s.labels);
                        sid = Some(id);
                        id
                    }
                };
                let stack = match nodes.get_mut(sample.stack as usize) {
                    Some(n) if *n != UNMAPPED => *n,
                    found => {
                        let n = self.stack_node(&mut remap, batch, interned, sample.stack);
                        if let Some(slot) = found {
                            *slot = n;
                        }
                        n
                    }
                };
                let t = ((sample.timestamp_ms - start) / step) as u32;
                if self.samples[sid as usize].add(t, stack, sample.value) {
                    self.rows += 1;
                }
                applied += 1;
            }
        }
        if applied > 0 {
            if self.min_lsn == 0 {
                self.min_lsn = lsn;
            }
            self.max_lsn = self.max_lsn.max(lsn);
            self.last_write = Instant::now();
        }
        applied
    }

    pub fn is_empty(&self) -> bool {
        self.rows == 0
    }

    pub fn rows(&self) -> usize {
        self.rows
    }

    /// `(series, stack nodes, series and label-index bytes, dictionary bytes)`:
    /// what a node pays per series and per distinct stack.
    pub fn footprint(&self) -> (usize, usize, usize, usize) {
        (
            self.series.len(),
            self.dict.node_count(),
            self.label_bytes,
            self.dict.approx_bytes(),
        )
    }

    /// Rough heap footprint; the head's memory bound is enforced on this.
    pub fn approx_bytes(&self) -> usize {
        // A row: 16 bytes, its vector's slack and its share of the step's map, or
        // of the index of every row once its series had a late sample (`rows.rs`):
        // as much as the hash-map entry it was before.
        self.dict.approx_bytes()
            + self.rows * 40
            + self.label_bytes
            + (self.by_id.capacity() + self.locations_by_id.capacity()) * 9
    }

    /// The data as a segment to be written.
    pub fn to_segment_input(&self, id: u64, created_ms: i64) -> SegmentInput<'_> {
        SegmentInput {
            meta: SegmentMeta {
                id,
                tenant: self.tenant.clone(),
                partition_start_ms: self.start_ms,
                partition_ms: self.partition_ms,
                step_ms: self.step_ms,
                min_time_ms: 0,
                max_time_ms: 0,
                level: 0,
                max_lsn: self.max_lsn,
                series: 0,
                rows: 0,
                value_total: 0,
                created_ms,
                sources: Vec::new(),
                file: String::new(),
                size_bytes: 0,
                checksum: 0,
                base: None,
            },
            dict: Cow::Borrowed(self.dict.dict()),
            series: self
                .series
                .iter()
                .zip(&self.samples)
                .map(|(l, m)| (l.clone(), m.iter().copied().collect()))
                .collect(),
        }
    }
}

/// What the query layer reads (it implements its `Source` over these).
impl HeadPartition {
    /// The partition's dictionary (same shape as a segment's).
    pub fn dict(&self) -> &Dict {
        self.dict.dict()
    }
    /// The label index of the partition's series.
    pub fn index(&self) -> &LabelIndex {
        &self.index
    }
    /// The labels of `series`.
    pub fn labels(&self, series: u32) -> Option<&Labels> {
        self.series.get(series as usize)
    }
    /// Start of the partition (ms).
    pub fn partition_start(&self) -> i64 {
        self.start_ms
    }
    /// Width of one time step (ms).
    pub fn step(&self) -> i64 {
        self.step_ms
    }
    /// `f(step index, stack node, value)` for each aggregated row of `series`.
    pub fn for_each_row(&self, series: u32, f: &mut dyn FnMut(u32, u32, i64)) -> Result<()> {
        if let Some(m) = self.samples.get(series as usize) {
            for r in m.iter() {
                f(r.t, r.stack, r.value);
            }
        }
        Ok(())
    }
    /// `f(step index, total)` for each step of `series` with data.
    pub fn step_totals(&self, series: u32, f: &mut dyn FnMut(u32, i64)) -> Result<()> {
        let mut totals: FxHashMap<u32, i64> = FxHashMap::default();
        if let Some(m) = self.samples.get(series as usize) {
            for r in m.iter() {
                *totals.entry(r.t).or_default() += r.value;
            }
        }
        for (t, v) in totals {
            f(t, v);
        }
        Ok(())
    }
}
