//! Checked reads of the shared `ProfilesDictionary`, and its symbols copied into a
//! batch once each, however many samples refer to them.
//!
//! Entry 0 of every table is, by the spec, the zero value that stands for "unset", so
//! index 0 means nothing (the empty string, no mapping, no function, an empty stack)
//! and is never looked up: a minimal request need not pad its tables. Every other
//! index must be in range.

use profiledb_model::{Batch, Function, Location, Mapping};

use super::error::OtlpError;
use crate::proto::opentelemetry::proto::common::v1::{any_value, AnyValue};
use crate::proto::otlp::{KeyValueAndUnit, ProfilesDictionary};

/// Mapping attributes that carry a build id, best first: the GNU build id is what
/// symbol servers index; the eBPF profiler's file hash is a fallback identity.
const BUILD_ID_KEYS: [&str; 2] = [
    "process.executable.build_id.gnu",
    "process.executable.build_id.htlhash",
];

/// The dictionary with bounds-checked lookups.
pub(super) struct Dictionary<'a> {
    pub dict: &'a ProfilesDictionary,
}

fn at<'t, T>(
    table: &'t [T],
    name: &'static str,
    index: i32,
    referrer: impl FnOnce() -> String,
) -> Result<Option<&'t T>, OtlpError> {
    if index == 0 {
        return Ok(None);
    }
    usize::try_from(index)
        .ok()
        .and_then(|i| table.get(i))
        .map(Some)
        .ok_or_else(|| OtlpError::IndexOutOfRange {
            table: name,
            index,
            len: table.len(),
            referrer: referrer(),
        })
}

impl<'a> Dictionary<'a> {
    pub fn string(
        &self,
        index: i32,
        referrer: impl FnOnce() -> String,
    ) -> Result<&'a str, OtlpError> {
        Ok(at(&self.dict.string_table, "string_table", index, referrer)?.map_or("", |s| s))
    }

    pub fn attribute(
        &self,
        index: i32,
        referrer: impl FnOnce() -> String,
    ) -> Result<Option<&'a KeyValueAndUnit>, OtlpError> {
        at(
            &self.dict.attribute_table,
            "attribute_table",
            index,
            referrer,
        )
    }

    pub fn stack(
        &self,
        index: i32,
        referrer: impl FnOnce() -> String,
    ) -> Result<&'a [i32], OtlpError> {
        Ok(at(&self.dict.stack_table, "stack_table", index, referrer)?
            .map_or(&[][..], |s| &s.location_indices))
    }

    /// The text of a string-valued attribute (inline or by string index); `None` for
    /// other value kinds.
    pub fn string_value(
        &self,
        value: Option<&'a AnyValue>,
        referrer: impl FnOnce() -> String,
    ) -> Result<Option<&'a str>, OtlpError> {
        match value.and_then(|v| v.value.as_ref()) {
            Some(any_value::Value::StringValue(s)) => Ok(Some(s)),
            Some(any_value::Value::StringValueStrindex(i)) => self.string(*i, referrer).map(Some),
            _ => Ok(None),
        }
    }
}

/// Where a dictionary entry stands: unset (index 0), already copied into the batch
/// (its batch index), or still to copy (the entry and its cache slot).
enum Entry<'t, T, V> {
    Unset,
    Copied(V),
    New(&'t T, usize),
}

fn entry<'t, T, V: Copy>(
    cache: &[Option<V>],
    table: &'t [T],
    name: &'static str,
    index: i32,
    referrer: impl FnOnce() -> String,
) -> Result<Entry<'t, T, V>, OtlpError> {
    let Some(e) = at(table, name, index, referrer)? else {
        return Ok(Entry::Unset);
    };
    // Non-negative and in range: `at` found it.
    let slot = index as usize;
    Ok(match cache.get(slot).copied().flatten() {
        Some(v) => Entry::Copied(v),
        None => Entry::New(e, slot),
    })
}

/// Dictionary index → batch index, filled on first use.
pub(super) struct Symbols {
    /// location_table index → (first frame, frame count) in `batch.symbols.locations`.
    locations: Vec<Option<(u32, u32)>>,
    functions: Vec<Option<u32>>,
    mappings: Vec<Option<u32>>,
}

impl Symbols {
    pub fn new(dict: &ProfilesDictionary) -> Self {
        Symbols {
            locations: vec![None; dict.location_table.len()],
            functions: vec![None; dict.function_table.len()],
            mappings: vec![None; dict.mapping_table.len()],
        }
    }

    /// The frames of one location (several when functions were inlined, innermost
    /// first), copied into `batch` the first time.
    pub fn location(
        &mut self,
        dict: &Dictionary<'_>,
        batch: &mut Batch,
        index: i32,
    ) -> Result<(u32, u32), OtlpError> {
        let table = &dict.dict.location_table;
        let referrer = || "a stack".to_string();
        let (loc, slot) = match entry(&self.locations, table, "location_table", index, referrer)? {
            Entry::Unset => return Ok((0, 0)),
            Entry::Copied(span) => return Ok(span),
            Entry::New(loc, slot) => (loc, slot),
        };
        let mapping = self.mapping(dict, batch, loc.mapping_index, slot)?;
        let first = to_u32(batch.symbols.locations.len());
        let frame = |function, line: i64| Location {
            function,
            mapping,
            address: loc.address,
            line: u32::try_from(line).unwrap_or(0),
        };
        if loc.lines.is_empty() {
            batch.symbols.locations.push(frame(None, 0));
        }
        for line in &loc.lines {
            let function = self.function(dict, batch, line.function_index, slot)?;
            batch.symbols.locations.push(frame(function, line.line));
        }
        let span = (first, to_u32(batch.symbols.locations.len()) - first);
        if let Some(s) = self.locations.get_mut(slot) {
            *s = Some(span);
        }
        Ok(span)
    }

    fn function(
        &mut self,
        dict: &Dictionary<'_>,
        batch: &mut Batch,
        index: i32,
        location: usize,
    ) -> Result<Option<u32>, OtlpError> {
        let table = &dict.dict.function_table;
        let referrer = || format!("location_table[{location}].lines");
        cached(
            &mut self.functions,
            table,
            "function_table",
            index,
            referrer,
            |f| {
                let field = |what: &str| format!("function_table[{index}].{what}");
                let mut name = dict.string(f.name_strindex, || field("name_strindex"))?;
                if name.is_empty() {
                    name = dict.string(f.system_name_strindex, || field("system_name_strindex"))?;
                }
                let file = dict.string(f.filename_strindex, || field("filename_strindex"))?;
                batch.symbols.functions.push(Function {
                    name: name.into(),
                    file: file.into(),
                });
                Ok(to_u32(batch.symbols.functions.len() - 1))
            },
        )
    }

    fn mapping(
        &mut self,
        dict: &Dictionary<'_>,
        batch: &mut Batch,
        index: i32,
        location: usize,
    ) -> Result<Option<u32>, OtlpError> {
        let table = &dict.dict.mapping_table;
        let referrer = || format!("location_table[{location}].mapping_index");
        cached(
            &mut self.mappings,
            table,
            "mapping_table",
            index,
            referrer,
            |m| {
                let field = |what: &str| format!("mapping_table[{index}].{what}");
                let file = dict.string(m.filename_strindex, || field("filename_strindex"))?;
                let mut build_ids = Vec::new();
                for &a in &m.attribute_indices {
                    let Some(attr) = dict.attribute(a, || field("attribute_indices"))? else {
                        continue;
                    };
                    let key = dict.string(attr.key_strindex, || format!("attribute_table[{a}]"))?;
                    if let Some(rank) = BUILD_ID_KEYS.iter().position(|k| *k == key) {
                        let referrer = || format!("attribute_table[{a}].value");
                        if let Some(v) = dict.string_value(attr.value.as_ref(), referrer)? {
                            build_ids.push((rank, v));
                        }
                    }
                }
                build_ids.sort_by_key(|(rank, _)| *rank);
                batch.symbols.mappings.push(Mapping {
                    file: file.to_string(),
                    build_id: build_ids.first().map_or("", |(_, v)| v).to_string(),
                    start: m.memory_start,
                    limit: m.memory_limit,
                    offset: m.file_offset,
                });
                Ok(to_u32(batch.symbols.mappings.len() - 1))
            },
        )
    }
}

/// The batch index of a dictionary entry: `None` when unset (index 0), else copied
/// into the batch by `copy` the first time and remembered in `cache`.
fn cached<T, V: Copy>(
    cache: &mut [Option<V>],
    table: &[T],
    name: &'static str,
    index: i32,
    referrer: impl FnOnce() -> String,
    copy: impl FnOnce(&T) -> Result<V, OtlpError>,
) -> Result<Option<V>, OtlpError> {
    let (e, slot) = match entry(cache, table, name, index, referrer)? {
        Entry::Unset => return Ok(None),
        Entry::Copied(v) => return Ok(Some(v)),
        Entry::New(e, slot) => (e, slot),
    };
    let v = copy(e)?;
    if let Some(s) = cache.get_mut(slot) {
        *s = Some(v);
    }
    Ok(Some(v))
}

/// Batch tables are indexed by u32; a request big enough to overflow that is far
/// past `max_decompressed_bytes`, so saturating is only a formality.
fn to_u32(n: usize) -> u32 {
    u32::try_from(n).unwrap_or(u32::MAX)
}
