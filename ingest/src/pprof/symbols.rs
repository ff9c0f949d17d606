//! A profile's symbol tables (mappings, functions, locations) mapped from pprof ids
//! to the batch's dense indices.

use super::*;

/// Maps pprof ids (1-based, arbitrary) to positions. Dense ids, the common case,
/// use a vector; sparse ones fall back to a hash map so a huge id cannot make us
/// allocate a huge table.
enum IdMap<T> {
    Dense(Vec<Option<T>>),
    Sparse(HashMap<u64, T>),
}

impl<T: Copy> IdMap<T> {
    fn new(count: usize, max_id: u64) -> Self {
        let dense_limit = (count as u64).saturating_mul(2).saturating_add(1024);
        if max_id <= dense_limit {
            IdMap::Dense(vec![None; max_id as usize + 1])
        } else {
            IdMap::Sparse(HashMap::with_capacity(count))
        }
    }

    /// Returns false when `id` was already present.
    fn insert(&mut self, id: u64, value: T) -> bool {
        match self {
            IdMap::Dense(v) => match v.get_mut(id as usize) {
                Some(slot @ None) => {
                    *slot = Some(value);
                    true
                }
                _ => false,
            },
            IdMap::Sparse(m) => m.insert(id, value).is_none(),
        }
    }

    fn get(&self, id: u64) -> Option<T> {
        match self {
            IdMap::Dense(v) => v.get(usize::try_from(id).ok()?).copied().flatten(),
            IdMap::Sparse(m) => m.get(&id).copied(),
        }
    }
}

fn build_id_map<T: Copy>(
    kind: &str,
    ids: impl Iterator<Item = u64> + Clone,
    value: impl Fn(usize) -> T,
) -> Result<IdMap<T>, IngestError> {
    let count = ids.clone().count();
    let max_id = ids.clone().max().unwrap_or(0);
    let mut map = IdMap::new(count, max_id);
    for (pos, id) in ids.enumerate() {
        if id == 0 {
            return Err(IngestError::profile(format!(
                "{kind} at position {pos} has id 0"
            )));
        }
        if !map.insert(id, value(pos)) {
            return Err(IngestError::profile(format!("duplicate {kind} id {id}")));
        }
    }
    Ok(map)
}

/// Location id → (first frame index, frame count) in the batch.
pub(super) struct SymbolIds {
    locations: IdMap<(u32, u32)>,
}

impl SymbolIds {
    pub(super) fn location(&self, id: u64) -> Option<(u32, u32)> {
        self.locations.get(id)
    }
}

fn to_u32(n: usize, what: &str) -> Result<u32, IngestError> {
    u32::try_from(n).map_err(|_| IngestError::profile(format!("too many {what}")))
}

/// Builds the batch's symbol tables once per profile.
pub(super) fn build_symbols(
    profile: &RawProfile<'_>,
    strings: &Strings<'_>,
    batch: &mut Batch,
) -> Result<SymbolIds, IngestError> {
    let syms = &mut batch.symbols;
    // Indices in the batch follow what earlier profiles put there.
    let mapping_base = syms.mappings.len();
    let function_base = syms.functions.len();
    to_u32(mapping_base + profile.mappings.len(), "mappings")?;
    to_u32(function_base + profile.functions.len(), "functions")?;
    let mapping_ids = build_id_map("mapping", profile.mappings.iter().map(|m| m.id), |p| {
        (mapping_base + p) as u32
    })?;
    syms.mappings.reserve(profile.mappings.len());
    for m in &profile.mappings {
        syms.mappings.push(Mapping {
            file: strings
                .get(m.filename, || format!("mapping {} filename", m.id))?
                .to_string(),
            build_id: strings
                .get(m.build_id, || format!("mapping {} build_id", m.id))?
                .to_string(),
            start: m.memory_start,
            limit: m.memory_limit,
            offset: m.file_offset,
        });
    }

    let function_ids = build_id_map("function", profile.functions.iter().map(|f| f.id), |p| {
        (function_base + p) as u32
    })?;
    syms.functions.reserve(profile.functions.len());
    for f in &profile.functions {
        let mut name = strings.name(f.name, || format!("function {} name", f.id))?;
        if name.is_empty() {
            name = strings.name(f.system_name, || format!("function {} system_name", f.id))?;
        }
        let file = strings.name(f.filename, || format!("function {} filename", f.id))?;
        syms.functions.push(Function { name, file });
    }

    let mut locations = IdMap::new(
        profile.locations.len(),
        profile.locations.iter().map(|l| l.id).max().unwrap_or(0),
    );
    syms.locations
        .reserve(profile.lines.len().max(profile.locations.len()));
    for (pos, loc) in profile.locations.iter().enumerate() {
        if loc.id == 0 {
            return Err(IngestError::profile(format!(
                "location at position {pos} has id 0"
            )));
        }
        let mapping = match loc.mapping_id {
            0 => None,
            id => Some(mapping_ids.get(id).ok_or_else(|| {
                IngestError::profile(format!(
                    "location {} refers to missing mapping id {id}",
                    loc.id
                ))
            })?),
        };
        let start = to_u32(syms.locations.len(), "frames")?;
        let lines = profile.location_lines(loc);
        if lines.is_empty() {
            syms.locations.push(Location {
                function: None,
                mapping,
                address: loc.address,
                line: 0,
            });
        }
        for line in lines {
            let function = function_ids.get(line.function_id).ok_or_else(|| {
                IngestError::profile(format!(
                    "location {} refers to missing function id {}",
                    loc.id, line.function_id
                ))
            })?;
            syms.locations.push(Location {
                function: Some(function),
                mapping,
                address: loc.address,
                line: u32::try_from(line.line).unwrap_or(0),
            });
        }
        let len = to_u32(syms.locations.len(), "frames")? - start;
        if !locations.insert(loc.id, (start, len)) {
            return Err(IngestError::profile(format!(
                "duplicate location id {}",
                loc.id
            )));
        }
    }
    Ok(SymbolIds { locations })
}
