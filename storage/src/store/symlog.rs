//! WAL records that name stacks by the interner's ids, each id defined once per
//! WAL file.
//!
//! A push repeats its profile's symbol table, and a full record (`record.rs`)
//! wrote every name, location and stack of it again, most of the push body, copied
//! into the page cache and synced (docs/perf-log/2026-11-27-round-21-id-wal-records.md).
//! An *id record* carries its samples with store-wide stack ids (`crate::intern`)
//! and, before them, the definition of each id its file does not hold yet: a
//! stack's path, a location, a function's or a mapping's names.
//!
//! - Every WAL file is self-contained: the flusher deletes files whose records are
//!   in segments without asking which later record uses a definition in them.
//! - Definitions come before their uses: the writer, which alone orders records,
//!   adds them while it appends a group ([`Defined`]), not the decoders.
//! - An id means one stack only within an interner generation; the record names
//!   its generation, and a change of generation (either way) starts the
//!   definitions over, on both sides.
//!
//! Replay ([`Resolver`]) reads the definitions into tables that it empties at each
//! file and each change of generation, and rebuilds the record's batch. A record
//! using an id defined nowhere before it is an error, never a guess.

use std::borrow::Cow;

use rustc_hash::FxHashMap;
use serde::ser::SerializeSeq;
use serde::{Deserialize, Serialize, Serializer};

use super::record;
use crate::intern::{Interned, NOT_INTERNED};
use crate::model::{Batch, Function, Location, Mapping, Sample, SeriesSamples, TenantId};

/// The first bytes of an id record whose mappings carry their address range
/// (written since segment format 7). A full record starts with
/// [`record::FULL_RECORD`], or in older WALs with its tenant's length (never 0).
const ID_RECORD: [u8; 2] = [0, 2];
/// The first bytes of an id record of earlier versions: mappings as
/// [`NamesDef`]s (file and build id), still replayed.
const ID_RECORD_V1: [u8; 2] = [0, 1];

/// A function's name and file, or a mapping's file and build id.
#[derive(Serialize, Deserialize)]
struct NamesDef<'a> {
    id: u32,
    #[serde(borrow)]
    a: Cow<'a, str>,
    #[serde(borrow)]
    b: Cow<'a, str>,
}

/// A mapping: its names and address range.
#[derive(Serialize, Deserialize)]
struct MappingDef<'a> {
    id: u32,
    #[serde(borrow)]
    file: Cow<'a, str>,
    #[serde(borrow)]
    build_id: Cow<'a, str>,
    start: u64,
    limit: u64,
    offset: u64,
}

/// A mapping's definition in either record version: its id and the mapping.
trait DefinesMapping {
    fn into_mapping(self) -> (u32, Mapping);
}

impl DefinesMapping for MappingDef<'_> {
    fn into_mapping(self) -> (u32, Mapping) {
        let m = Mapping {
            file: self.file.into_owned(),
            build_id: self.build_id.into_owned(),
            start: self.start,
            limit: self.limit,
            offset: self.offset,
        };
        (self.id, m)
    }
}

impl DefinesMapping for NamesDef<'_> {
    fn into_mapping(self) -> (u32, Mapping) {
        let m = Mapping {
            file: self.a.into_owned(),
            build_id: self.b.into_owned(),
            ..Mapping::default()
        };
        (self.id, m)
    }
}

/// A location by the ids of its function and mapping.
#[derive(Clone, Copy, Serialize, Deserialize)]
struct LocationDef {
    id: u32,
    function: Option<u32>,
    mapping: Option<u32>,
    address: u64,
    line: u32,
}

/// A stack's location ids, root first.
#[derive(Serialize, Deserialize)]
struct StackDef {
    id: u32,
    path: Vec<u32>,
}

/// What a record defines, before its body; `M` is how it writes a mapping
/// ([`MappingDef`], or [`NamesDef`] in records of earlier versions).
#[derive(Serialize, Deserialize)]
#[serde(bound(deserialize = "M: Deserialize<'de>"))]
struct Defs<'a, M> {
    generation: u64,
    #[serde(borrow)]
    functions: Vec<NamesDef<'a>>,
    mappings: Vec<M>,
    locations: Vec<LocationDef>,
    stacks: Vec<StackDef>,
}

/// A record's samples, their `stack` being store-wide ids.
#[derive(Deserialize)]
struct Body {
    tenant: TenantId,
    series: Vec<SeriesSamples>,
}

/// `batch`'s tenant and series with each sample's stack replaced by its id: the
/// postcard form of [`Body`], written without copying the series.
struct BodyView<'a> {
    batch: &'a Batch,
    ids: &'a [u32],
}

struct SeriesView<'a>(&'a BodyView<'a>);

struct SamplesView<'a> {
    samples: &'a [Sample],
    ids: &'a [u32],
}

impl Serialize for BodyView<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        (&self.batch.tenant, SeriesView(self)).serialize(s)
    }
}

impl Serialize for SeriesView<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let series = &self.0.batch.series;
        let mut seq = s.serialize_seq(Some(series.len()))?;
        for x in series {
            let samples = SamplesView {
                samples: &x.samples,
                ids: self.0.ids,
            };
            seq.serialize_element(&(&x.labels, samples))?;
        }
        seq.end()
    }
}

impl Serialize for SamplesView<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut seq = s.serialize_seq(Some(self.samples.len()))?;
        for x in self.samples {
            let stack = self.ids.get(x.stack as usize).copied();
            seq.serialize_element(&Sample {
                stack: stack.unwrap_or(NOT_INTERNED),
                ..*x
            })?;
        }
        seq.end()
    }
}

/// The body of `batch`'s id record, when every stack of it has an id (else it
/// needs a full record). Runs on the caller's thread, like the full encoding.
pub(super) fn encode_body(batch: &Batch, ids: &Interned) -> Option<postcard::Result<Vec<u8>>> {
    if !ids.is_complete() {
        return None;
    }
    let len = record::body_len(batch, |s| ids.stacks.get(s as usize).copied());
    let view = BodyView {
        batch,
        ids: &ids.stacks,
    };
    Some(postcard::to_extend(&view, Vec::with_capacity(len)))
}

/// A set of ids, one bit each.
#[derive(Default)]
struct Bits(Vec<u64>);

impl Bits {
    /// Adds `id`; whether it was new.
    fn insert(&mut self, id: u32) -> bool {
        let (word, bit) = (id as usize / 64, id % 64);
        if word >= self.0.len() {
            self.0.resize(word + 1, 0);
        }
        let new = self.0[word] & (1 << bit) == 0;
        self.0[word] |= 1 << bit;
        new
    }
}

/// Which ids the WAL file being written defines: the writer thread's state.
#[derive(Default)]
pub(super) struct Defined {
    /// The WAL's number for the file (`Wal::next_commit_file`); 0 matches none.
    file: u64,
    generation: u64,
    functions: Bits,
    mappings: Bits,
    locations: Bits,
    stacks: Bits,
}

impl Defined {
    /// Forgets every definition: the next records define all they use. For a
    /// commit that failed, whose definitions may not be in the file.
    pub fn reset(&mut self) {
        *self = Defined::default();
    }

    /// The bytes that go before the body of `batch`'s id record in WAL file
    /// `file`: its marker and the definitions the file does not hold yet, which
    /// are then counted as held. `None` when an id is missing (the record must be
    /// written in full); the state is reset then, as some ids were counted.
    pub fn prefix(&mut self, file: u64, batch: &Batch, ids: &Interned) -> Option<Vec<u8>> {
        if (self.file, self.generation) != (file, ids.generation) {
            self.reset();
            self.file = file;
            self.generation = ids.generation;
        }
        let defs = self.new_defs(batch, ids);
        let out = defs.and_then(|d| postcard::to_extend(&d, Vec::from(ID_RECORD)).ok());
        if out.is_none() {
            self.reset();
        }
        out
    }

    fn new_defs<'b>(
        &mut self,
        batch: &'b Batch,
        ids: &Interned,
    ) -> Option<Defs<'b, MappingDef<'b>>> {
        let id = |v: &[u32], i: u32| v.get(i as usize).copied().filter(|&x| x != NOT_INTERNED);
        let syms = &batch.symbols;
        let mut defs = Defs {
            generation: ids.generation,
            functions: Vec::new(),
            mappings: Vec::new(),
            locations: Vec::new(),
            stacks: Vec::new(),
        };
        for (b, &sid) in ids.stacks.iter().enumerate() {
            if sid == NOT_INTERNED {
                return None;
            }
            if !self.stacks.insert(sid) {
                continue;
            }
            let frames = batch.stacks.get(b as u32)?;
            let mut path = Vec::with_capacity(frames.len());
            for &l in frames {
                let lid = id(&ids.locations, l)?;
                path.push(lid);
                if !self.locations.insert(lid) {
                    continue;
                }
                let loc = syms.locations.get(l as usize)?;
                let function = match loc.function {
                    None => None,
                    Some(f) => Some(names_def(
                        id(&ids.functions, f)?,
                        &mut self.functions,
                        &mut defs.functions,
                        || syms.functions.get(f as usize).map(|x| (&*x.name, &*x.file)),
                    )?),
                };
                let mapping = match loc.mapping {
                    None => None,
                    Some(m) => {
                        let mid = id(&ids.mappings, m)?;
                        if self.mappings.insert(mid) {
                            let x = syms.mappings.get(m as usize)?;
                            defs.mappings.push(MappingDef {
                                id: mid,
                                file: Cow::Borrowed(&x.file),
                                build_id: Cow::Borrowed(&x.build_id),
                                start: x.start,
                                limit: x.limit,
                                offset: x.offset,
                            });
                        }
                        Some(mid)
                    }
                };
                defs.locations.push(LocationDef {
                    id: lid,
                    function,
                    mapping,
                    address: loc.address,
                    line: loc.line,
                });
            }
            defs.stacks.push(StackDef { id: sid, path });
        }
        Some(defs)
    }
}

/// `id`, with its names added to `defs` unless `defined` holds it already.
fn names_def<'b>(
    id: u32,
    defined: &mut Bits,
    defs: &mut Vec<NamesDef<'b>>,
    names: impl FnOnce() -> Option<(&'b str, &'b str)>,
) -> Option<u32> {
    if defined.insert(id) {
        let (a, b) = names()?;
        defs.push(NamesDef {
            id,
            a: Cow::Borrowed(a),
            b: Cow::Borrowed(b),
        });
    }
    Some(id)
}

/// Why a WAL record could not be read back.
#[derive(Debug, thiserror::Error)]
pub(super) enum RecordError {
    /// Its bytes are not a record of either kind.
    #[error("not a WAL record: {0}")]
    Decode(#[from] postcard::Error),
    /// A record kind this version does not know.
    #[error("unknown WAL record kind {0}")]
    Kind(u8),
    /// It uses an id that no earlier record of its file and generation defines.
    #[error("{kind} id {id} is used but defined nowhere before")]
    Undefined { kind: &'static str, id: u32 },
    /// It decodes to a batch that breaks the batch rules.
    #[error("invalid batch: {0}")]
    Invalid(#[from] crate::model::InvalidBatch),
}

/// Where the generations replay gives its ids start: far above any the live
/// interner reaches (it counts up from 0), so the head never takes a replayed id
/// for a live one.
const REPLAY_GENERATIONS: u64 = 1 << 63;

/// Reads WAL records of both kinds back into batches, in WAL order.
#[derive(Default)]
pub(super) struct Resolver {
    /// Tables emptied so far: each emptying starts a new replay generation.
    epoch: u64,
    generation: Option<u64>,
    functions: FxHashMap<u32, Function>,
    mappings: FxHashMap<u32, Mapping>,
    locations: FxHashMap<u32, LocationDef>,
    stacks: FxHashMap<u32, Vec<u32>>,
}

/// Store ids → the batch's indices, for one record.
#[derive(Default)]
struct Local {
    functions: FxHashMap<u32, u32>,
    mappings: FxHashMap<u32, u32>,
    locations: FxHashMap<u32, u32>,
    stacks: FxHashMap<u32, u32>,
    /// The store id of each batch stack, in batch order.
    ids: Vec<u32>,
    /// The store id of each batch location, in batch order.
    location_ids: Vec<u32>,
}

impl Resolver {
    /// Empties the tables for a new file or generation.
    fn reset(&mut self, generation: Option<u64>) {
        *self = Resolver {
            epoch: self.epoch + 1,
            generation,
            ..Resolver::default()
        };
    }

    /// The batch of one record; `first_in_file` empties the tables first, so a
    /// file is read as if the files before it were deleted. An id record's batch
    /// comes with its stacks' ids, in a generation of replay's own: the head then
    /// finds a stack it saw in an earlier record by one lookup, as it does live.
    pub fn decode(
        &mut self,
        payload: &[u8],
        first_in_file: bool,
    ) -> Result<(Batch, Option<Interned>), RecordError> {
        if first_in_file {
            self.reset(None);
        }
        match payload {
            [a, b, rest @ ..] if [*a, *b] == ID_RECORD => {
                let (defs, body) = postcard::take_from_bytes::<Defs<'_, MappingDef<'_>>>(rest)?;
                self.id_record(defs, body).map(|(b, i)| (b, Some(i)))
            }
            [a, b, rest @ ..] if [*a, *b] == ID_RECORD_V1 => {
                let (defs, body) = postcard::take_from_bytes::<Defs<'_, NamesDef<'_>>>(rest)?;
                self.id_record(defs, body).map(|(b, i)| (b, Some(i)))
            }
            [a, b, ..] if [*a, *b] == record::FULL_RECORD => Ok((record::decode(payload)?, None)),
            [0, kind, ..] => Err(RecordError::Kind(*kind)),
            _ => Ok((record::decode(payload)?, None)),
        }
    }

    fn id_record<M: DefinesMapping>(
        &mut self,
        defs: Defs<'_, M>,
        body: &[u8],
    ) -> Result<(Batch, Interned), RecordError> {
        let body: Body = postcard::from_bytes(body)?;
        if self.generation != Some(defs.generation) {
            self.reset(Some(defs.generation));
        }
        for f in defs.functions {
            let (name, file) = (f.a.into_owned(), f.b.into_owned());
            self.functions.insert(
                f.id,
                Function {
                    name: name.into(),
                    file: file.into(),
                },
            );
        }
        for m in defs.mappings {
            let (id, m) = m.into_mapping();
            self.mappings.insert(id, m);
        }
        for l in defs.locations {
            self.locations.insert(l.id, l);
        }
        for s in defs.stacks {
            self.stacks.insert(s.id, s.path);
        }
        let mut batch = Batch::new(body.tenant);
        let mut local = Local::default();
        let mut series = body.series;
        for x in series.iter_mut().flat_map(|s| s.samples.iter_mut()) {
            x.stack = self.stack(x.stack, &mut batch, &mut local)?;
        }
        batch.series = series;
        let ids = Interned {
            generation: REPLAY_GENERATIONS + self.epoch,
            stacks: local.ids,
            locations: local.location_ids,
            ..Interned::default()
        };
        Ok((batch, ids))
    }

    /// The batch index of store stack `id`, added with its symbols on first use.
    fn stack(&self, id: u32, batch: &mut Batch, local: &mut Local) -> Result<u32, RecordError> {
        if let Some(&i) = local.stacks.get(&id) {
            return Ok(i);
        }
        let undefined = |kind, id| RecordError::Undefined { kind, id };
        let path = self.stacks.get(&id).ok_or(undefined("stack", id))?;
        let mut frames = Vec::with_capacity(path.len());
        for &lid in path {
            let frame = match local.locations.get(&lid) {
                Some(&i) => i,
                None => {
                    let l = self.locations.get(&lid).ok_or(undefined("location", lid))?;
                    let syms = &mut batch.symbols;
                    let function = l
                        .function
                        .map(|f| {
                            let (table, local) = (&self.functions, &mut local.functions);
                            local_index("function", f, table, local, &mut syms.functions)
                        })
                        .transpose()?;
                    let mapping = l
                        .mapping
                        .map(|m| {
                            let (table, local) = (&self.mappings, &mut local.mappings);
                            local_index("mapping", m, table, local, &mut syms.mappings)
                        })
                        .transpose()?;
                    let i = batch.symbols.locations.len() as u32;
                    batch.symbols.locations.push(Location {
                        function,
                        mapping,
                        address: l.address,
                        line: l.line,
                    });
                    local.locations.insert(lid, i);
                    local.location_ids.push(lid);
                    i
                }
            };
            frames.push(frame);
        }
        let i = batch.stacks.push(&frames);
        local.stacks.insert(id, i);
        local.ids.push(id);
        Ok(i)
    }
}

/// The batch index of `id` from `table`, copied into `out` on first use.
fn local_index<T: Clone>(
    kind: &'static str,
    id: u32,
    table: &FxHashMap<u32, T>,
    local: &mut FxHashMap<u32, u32>,
    out: &mut Vec<T>,
) -> Result<u32, RecordError> {
    if let Some(&i) = local.get(&id) {
        return Ok(i);
    }
    let x = table.get(&id).ok_or(RecordError::Undefined { kind, id })?;
    let i = out.len() as u32;
    out.push(x.clone());
    local.insert(id, i);
    Ok(i)
}

#[cfg(test)]
mod tests;
