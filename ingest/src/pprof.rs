//! pprof (`perftools.profiles.Profile`) → [`Batch`].
//!
//! Rules (design.md §4):
//! - Every sample type becomes its own profile type
//!   `name:sample_type:sample_unit:period_type:period_unit`; the name is the caller's
//!   override (Push's `__name__`) or inferred as Pyroscope does
//!   ([`crate::profile_type::infer_profile_name`]).
//! - A `process_cpu` profile that has a `samples`/`count` type but no `cpu` type, and a
//!   `cpu` period in ns/µs/ms/s with a positive period, additionally yields
//!   `process_cpu:cpu:nanoseconds:cpu:nanoseconds` with value = count × period (in ns),
//!   so such uploads show up under the CPU type Grafana looks for. So does one with no
//!   period type and a `milliseconds` period unit (pyroscope-rs: Python, Ruby), each
//!   sample weighing 1 s / `sampleRate` (100 Hz unless the upload says).
//! - Zero values are skipped; a sample whose values are all zero adds no stack.
//! - String sample labels become series labels (they override base labels of the same
//!   name) except `span_id`, `trace_id` and `profile_id`
//!   ([`crate::label_rules::DROPPED_SAMPLE_LABELS`]) and reserved `__*` names, which
//!   are dropped. Numeric labels are ignored.
//! - A location with N lines (inlining, innermost first) becomes N frames; a location
//!   with no line is kept as one unsymbolized frame with its address and mapping.
//! - Timestamps: `time_nanos` in ms, unless it is 0 or before 1971 (old pyspy/rbspy
//!   sent other units), then the caller's fallback time.
//! - Ids are looked up by id, never by position; id 0, duplicate ids, dangling ids
//!   and out-of-range string indices are errors.

use std::borrow::Cow;
use std::collections::HashMap;

use bytes::Bytes;
use profiledb_model::{
    Batch, Function, Labels, Location, Mapping, Name, Sample, TenantId, NAME_LABEL,
    PROFILE_TYPE_LABEL,
};
use prost::Message;
use rustc_hash::FxHashMap;
use std::collections::hash_map::Entry;

use crate::builder::BatchBuilder;
use crate::error::IngestError;
use crate::gzip::decompress_body;
use crate::label_rules::{
    check_label_name, check_series_labels, is_reserved, DROPPED_SAMPLE_LABELS,
};
use crate::limits::Limits;
use crate::profile_type::{infer_profile_name, SampleTypeConfig, CPU_NANOSECONDS};
use crate::proto::pprof::Profile;

mod wire;

/// The sampling rate Pyroscope SDKs use unless told otherwise (Hz).
const DEFAULT_SAMPLE_RATE: u32 = 100;

use wire::RawProfile;

/// What the caller knows about a pprof upload besides its bytes.
#[derive(Clone, Debug, Default)]
pub struct PprofOptions {
    /// Whose data it is.
    pub tenant: TenantId,
    /// Labels every series gets (`service_name`, query-string tags, Push labels).
    /// `__name__` and `__profile_type__` are always set by the decoder.
    pub base_labels: Labels,
    /// Profile name part to use instead of inferring it (Push's `__name__`).
    pub name: Option<String>,
    /// Sample time (ms) when the profile's `time_nanos` is unusable, normally the
    /// request's `from` or the receive time.
    pub fallback_time_ms: i64,
    /// Bounds on the body, its samples, stacks and labels.
    pub limits: Limits,
    /// Pyroscope `sample_type_config` sent with the upload, if any.
    pub sample_type_config: Option<SampleTypeConfig>,
    /// The upload's `sampleRate` (Hz): what one sample of a pyroscope-rs CPU
    /// profile (Python, Ruby) weighs; 100 Hz when unset.
    pub sample_rate: Option<u32>,
}

/// Decodes a pprof profile (gzip-framed or plain) into a new batch.
pub fn decode_pprof(data: &[u8], opts: &PprofOptions) -> Result<Batch, IngestError> {
    let mut out = BatchBuilder::new(opts.tenant.clone());
    // One copy of the profile, which the batch's names then share (see `Name`).
    decode_pprof_into(&Bytes::copy_from_slice(data), opts, &mut out)?;
    Ok(out.finish())
}

/// Decodes a pprof profile (gzip-framed or plain) into `out`, after what it holds
/// (`opts.tenant` is not used: `out` has its tenant). On an error `out` holds part
/// of this profile and must be discarded.
pub fn decode_pprof_into(
    data: &Bytes,
    opts: &PprofOptions,
    out: &mut BatchBuilder,
) -> Result<(), IngestError> {
    // The batch's function names are slices of the plain profile (`Name`).
    let bytes = match decompress_body(data, &opts.limits)? {
        Cow::Borrowed(_) => data.clone(),
        Cow::Owned(inflated) => Bytes::from(inflated),
    };
    let parsed = RawProfile::parse(&bytes);
    match parsed {
        Ok(raw) => convert(&raw, &bytes, opts, out),
        // The streaming reader accepts exactly what prost accepts but keeps no error
        // details: decode again with prost for its error.
        Err(wire::Malformed) => match Profile::decode(&*bytes) {
            Err(source) => Err(IngestError::Protobuf {
                what: "pprof Profile",
                source,
            }),
            // Unreachable unless the two decoders disagree; prost is the reference.
            Ok(profile) => convert(&RawProfile::from_prost(&profile), &Bytes::new(), opts, out),
        },
    }
}

/// Converts an already decoded profile into a new batch.
pub fn profile_to_batch(profile: &Profile, opts: &PprofOptions) -> Result<Batch, IngestError> {
    let mut out = BatchBuilder::new(opts.tenant.clone());
    convert(
        &RawProfile::from_prost(profile),
        &Bytes::new(),
        opts,
        &mut out,
    )?;
    Ok(out.finish())
}

/// `owner` is the buffer `profile` was parsed from, which names share where they
/// lie in it (elsewhere, as in a prost-decoded profile, they are copied).
fn convert(
    profile: &RawProfile<'_>,
    owner: &Bytes,
    opts: &PprofOptions,
    out: &mut BatchBuilder,
) -> Result<(), IngestError> {
    let limits = &opts.limits;
    limits.check_samples(profile.sample_count(), "samples in profile")?;
    let strings = Strings::new(&profile.strings, owner)?;
    let (name, out_types) = output_types(profile, &strings, opts)?;
    let batch = out.batch_mut();
    let ids = build_symbols(profile, &strings, batch)?;

    let timestamp_ms = sample_time_ms(profile.time_nanos, opts.fallback_time_ms);
    let n_values = profile.sample_type.len();
    let n_out = out_types.len();
    let mut label_sets = LabelSets::new(profile.strings.len());
    // series_samples[set * n_out + t]: samples of label set `set`, output type `t`.
    let mut series_samples: Vec<Vec<Sample>> = vec![Vec::new(); n_out];
    let mut frames: Vec<u32> = Vec::with_capacity(64);
    let mut values: Vec<i64> = vec![0; n_out];
    // Pyroscope keeps one sample per stack and label set (Go heap profiles repeat
    // stacks that differ only in the numeric `bytes` label): (label set, location
    // ids) → row; row r is (label set, stack) in `rows[r]` and its summed values in
    // `sums[r * n_out..]`. Fx rather than SipHash: one lookup per sample.
    // Sized for every sample up front: growing the map rehashed each key's
    // location ids again.
    let n_samples = profile.sample_count();
    let mut merged: FxHashMap<SampleKey<'_>, usize> =
        FxHashMap::with_capacity_and_hasher(n_samples, Default::default());
    let mut rows: Vec<(usize, u32)> = Vec::with_capacity(n_samples);
    // No more sums than the profile has values, however many output types.
    let mut sums: Vec<i64> = Vec::with_capacity(
        n_samples
            .saturating_mul(n_out)
            .min(profile.values.len() + n_samples),
    );
    batch.stacks.reserve(n_samples, profile.loc_ids.len());

    for i in 0..profile.sample_count() {
        let (location_ids, sample_values, sample_labels) = profile.sample(i);
        if sample_values.len() != n_values {
            return Err(IngestError::profile(format!(
                "sample {i} has {} values but the profile has {n_values} sample types",
                sample_values.len()
            )));
        }
        // Pyroscope drops a sample with any negative value, whole.
        if sample_values.iter().any(|&v| v < 0) {
            continue;
        }
        let mut any = false;
        for (v, t) in values.iter_mut().zip(&out_types) {
            let raw = sample_values.get(t.value_index).copied().unwrap_or(0);
            *v = raw.checked_mul(t.scale).ok_or_else(|| {
                IngestError::profile(format!(
                    "sample {i}: value {raw} × period {} overflows",
                    t.scale
                ))
            })?;
            any |= *v != 0;
        }
        if !any {
            continue;
        }
        let set = label_sets.id_for(sample_labels, &strings, limits)?;
        // One hash of the key per sample: a repeat sums into its row, a new key
        // keeps its vacant slot until the row exists.
        let slot = match merged.entry((set, location_ids)) {
            Entry::Occupied(o) => {
                let row = *o.get();
                let dsts = sums
                    .get_mut(row * n_out..(row + 1) * n_out)
                    .unwrap_or_default();
                for (dst, &v) in dsts.iter_mut().zip(&values) {
                    *dst = dst.checked_add(v).ok_or_else(|| {
                        IngestError::profile(format!("sample {i}: summed value overflows"))
                    })?;
                }
                continue;
            }
            Entry::Vacant(v) => v,
        };

        frames.clear();
        for &loc_id in location_ids {
            let (start, len) = ids.location(loc_id).ok_or_else(|| {
                IngestError::profile(format!("sample {i} refers to missing location id {loc_id}"))
            })?;
            frames.extend(start..start + len);
            // Checked per location so a sample repeating a many-line location cannot
            // grow the buffer far past the limit first.
            if frames.len() > limits.max_stack_depth {
                return Err(IngestError::LimitExceeded {
                    limit: "max_stack_depth",
                    max: limits.max_stack_depth as u64,
                    detail: format!(
                        "stack of sample {i} with more than {} frames",
                        limits.max_stack_depth
                    ),
                });
            }
        }
        let stack = batch.stacks.push_leaf_first(frames.iter().copied());
        slot.insert(rows.len());
        rows.push((set, stack));
        sums.extend_from_slice(&values);
    }
    // Each series' samples sized once: the rows of its label set.
    let mut per_set: Vec<usize> = Vec::new();
    for &(set, _) in &rows {
        if per_set.len() <= set {
            per_set.resize(set + 1, 0);
        }
        per_set[set] += 1;
    }
    series_samples.resize(per_set.len() * n_out, Vec::new());
    for (row, &n) in series_samples.chunks_mut(n_out.max(1)).zip(&per_set) {
        row.iter_mut().for_each(|v| v.reserve_exact(n));
    }
    for (&(set, stack), row_sums) in rows.iter().zip(sums.chunks(n_out.max(1))) {
        let row = series_samples
            .get_mut(set * n_out..(set + 1) * n_out)
            .ok_or_else(|| IngestError::profile("internal: series table out of range"))?;
        for (dst, &value) in row.iter_mut().zip(row_sums) {
            if value != 0 {
                dst.push(Sample {
                    timestamp_ms,
                    stack,
                    value,
                });
            }
        }
    }

    // Label sets that resolve to the same labels (duplicate strings in the table),
    // and series of earlier profiles with the same labels, are merged by `out`.
    for (set, row) in series_samples.chunks_mut(n_out.max(1)).enumerate() {
        if row.iter().all(|s| s.is_empty()) {
            continue;
        }
        let set_labels = label_sets.resolve(set, &strings, &name, opts)?;
        for (samples, t) in row.iter_mut().zip(&out_types) {
            if samples.is_empty() {
                continue;
            }
            let mut labels = set_labels.clone();
            labels.set(PROFILE_TYPE_LABEL, t.id.as_str());
            check_series_labels(&labels, limits)?;
            out.add_series(labels, std::mem::take(samples));
        }
    }
    Ok(())
}

/// A pprof sample's identity for merging: its label set and location ids.
type SampleKey<'p> = (usize, &'p [u64]);

/// Pyroscope's rule: `time_nanos` of 0 or in 1970 is not a real collection time.
pub(crate) fn sample_time_ms(time_nanos: i64, fallback_ms: i64) -> i64 {
    // 1971-01-01T00:00:00Z in nanoseconds.
    const FIRST_VALID_NANOS: i64 = 365 * 24 * 3600 * 1_000_000_000;
    if time_nanos < FIRST_VALID_NANOS {
        fallback_ms
    } else {
        time_nanos / 1_000_000
    }
}

/// The string table with checked lookups.
struct Strings<'a> {
    table: &'a [&'a [u8]],
    /// The buffer the table's entries may be slices of.
    owner: &'a Bytes,
}

impl<'a> Strings<'a> {
    fn new(table: &'a [&'a [u8]], owner: &'a Bytes) -> Result<Self, IngestError> {
        match table.first() {
            Some(s) if !s.is_empty() => Err(IngestError::profile(format!(
                "string_table[0] must be \"\", found {:?}",
                String::from_utf8_lossy(s)
            ))),
            _ => Ok(Strings { table, owner }),
        }
    }

    /// Entry `index` as a [`Name`]: a slice of the owner when it lies in it, which
    /// costs a reference count, not an allocation and a copy.
    fn name(&self, index: i64, what: impl FnOnce() -> String) -> Result<Name, IngestError> {
        let bytes = self.bytes(index, what)?;
        let (start, at) = (self.owner.as_ptr() as usize, bytes.as_ptr() as usize);
        let inside = !bytes.is_empty()
            && at
                .checked_sub(start)
                .and_then(|offset| offset.checked_add(bytes.len()))
                .is_some_and(|end| end <= self.owner.len());
        let name = if inside {
            // In range, as just checked: `slice_ref` shares the owner's buffer.
            Name::try_from(self.owner.slice_ref(bytes))
        } else {
            Name::try_from(bytes)
        };
        name.map_err(|_| not_utf8(index))
    }

    /// `what` names the referring field for the error message.
    fn get(&self, index: i64, what: impl FnOnce() -> String) -> Result<&'a str, IngestError> {
        std::str::from_utf8(self.bytes(index, what)?).map_err(|_| not_utf8(index))
    }

    fn bytes(&self, index: i64, what: impl FnOnce() -> String) -> Result<&'a [u8], IngestError> {
        if index == 0 {
            return Ok(b"");
        }
        usize::try_from(index)
            .ok()
            .and_then(|i| self.table.get(i))
            .copied()
            .ok_or_else(|| {
                IngestError::profile(format!(
                    "{} refers to string index {index} but the string table has {} entries",
                    what(),
                    self.table.len()
                ))
            })
    }
}

fn not_utf8(index: i64) -> IngestError {
    IngestError::profile(format!("string table entry {index} is not valid UTF-8"))
}

/// One output profile type: which sample value feeds it and by what factor.
struct OutType {
    id: String,
    value_index: usize,
    scale: i64,
}

fn output_types(
    profile: &RawProfile<'_>,
    strings: &Strings<'_>,
    opts: &PprofOptions,
) -> Result<(String, Vec<OutType>), IngestError> {
    let mut sample_types = Vec::with_capacity(profile.sample_type.len());
    for (i, vt) in profile.sample_type.iter().enumerate() {
        let ty = strings.get(vt.r#type, || format!("sample_type[{i}].type"))?;
        let unit = strings.get(vt.unit, || format!("sample_type[{i}].unit"))?;
        sample_types.push((ty, unit));
    }
    let (period_type, period_unit) = match &profile.period_type {
        Some(vt) => (
            strings.get(vt.r#type, || "period_type.type".to_string())?,
            strings.get(vt.unit, || "period_type.unit".to_string())?,
        ),
        None => ("", ""),
    };
    let name = match opts.name.as_deref() {
        Some(n) if !n.is_empty() => n.to_string(),
        _ => infer_profile_name(
            sample_types.iter().map(|(t, _)| *t),
            opts.sample_type_config.as_ref(),
        ),
    };
    let parts = sample_types.iter().flat_map(|(t, u)| [*t, *u]).chain([
        name.as_str(),
        period_type,
        period_unit,
    ]);
    for part in parts {
        if part.contains(':') {
            return Err(IngestError::profile(format!(
                "profile type part {part:?} contains ':'"
            )));
        }
    }
    let mut out: Vec<OutType> = sample_types
        .iter()
        .enumerate()
        .map(|(i, (t, u))| OutType {
            id: format!("{name}:{t}:{u}:{period_type}:{period_unit}"),
            value_index: i,
            scale: 1,
        })
        .collect();

    let has_cpu = sample_types.iter().any(|(t, _)| *t == "cpu");
    let samples_index = sample_types
        .iter()
        .position(|&(t, u)| t == "samples" && u == "count");
    let unit_ns = match period_unit {
        "nanoseconds" => Some(1),
        "microseconds" => Some(1_000),
        "milliseconds" => Some(1_000_000),
        "seconds" => Some(1_000_000_000),
        _ => None,
    };
    let derived = match (
        has_cpu,
        samples_index,
        name.as_str(),
        period_type,
        period_unit,
    ) {
        (false, Some(i), "process_cpu", "cpu", _) => unit_ns
            .and_then(|u| profile.period.checked_mul(u))
            .filter(|&p| p > 0)
            .map(|scale| (i, scale)),
        // pyroscope-rs (py-spy, rbspy) declares no period type, `milliseconds`, and a
        // period of 1e9 that is no period at all: its samples are taken at the
        // upload's `sampleRate`, so each weighs 1 s / sampleRate of CPU.
        (false, Some(i), "process_cpu", "", "milliseconds") => {
            let rate = i64::from(opts.sample_rate.unwrap_or(DEFAULT_SAMPLE_RATE).max(1));
            Some((i, 1_000_000_000 / rate))
        }
        _ => None,
    };
    if let Some((value_index, scale)) = derived {
        out.push(OutType {
            id: CPU_NANOSECONDS.to_string(),
            value_index,
            scale,
        });
    }
    Ok((name, out))
}

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
struct SymbolIds {
    locations: IdMap<(u32, u32)>,
}

impl SymbolIds {
    fn location(&self, id: u64) -> Option<(u32, u32)> {
        self.locations.get(id)
    }
}

fn to_u32(n: usize, what: &str) -> Result<u32, IngestError> {
    u32::try_from(n).map_err(|_| IngestError::profile(format!("too many {what}")))
}

/// Builds the batch's symbol tables once per profile.
fn build_symbols(
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

/// Distinct sample label sets, keyed by string-table indices so that samples cost
/// no string work; strings are resolved once per set at the end.
struct LabelSets {
    ids: HashMap<Vec<(i64, i64)>, usize>,
    sets: Vec<Vec<(i64, i64)>>,
    /// Per string index: 0 = not yet checked, 1 = keep as label name, 2 = drop.
    key_state: Vec<u8>,
    scratch: Vec<(i64, i64)>,
}

impl LabelSets {
    fn new(n_strings: usize) -> Self {
        LabelSets {
            ids: HashMap::new(),
            // Set 0 is "no labels" so unlabeled samples skip the hash map.
            sets: vec![Vec::new()],
            key_state: vec![0; n_strings],
            scratch: Vec::new(),
        }
    }

    fn keep_key(
        &mut self,
        key: i64,
        strings: &Strings<'_>,
        limits: &Limits,
    ) -> Result<bool, IngestError> {
        let state = usize::try_from(key)
            .ok()
            .and_then(|k| self.key_state.get_mut(k))
            .ok_or_else(|| {
                IngestError::profile(format!(
                    "sample label key refers to string index {key} but the string table has {} entries",
                    strings.table.len()
                ))
            })?;
        if *state == 0 {
            let name = strings.get(key, || "sample label key".to_string())?;
            *state =
                if name.is_empty() || is_reserved(name) || DROPPED_SAMPLE_LABELS.contains(&name) {
                    2
                } else {
                    check_label_name(name, limits)?;
                    1
                };
        }
        Ok(*state == 1)
    }

    /// `labels`: `(key, str)` of the sample's string labels.
    fn id_for(
        &mut self,
        labels: &[(i64, i64)],
        strings: &Strings<'_>,
        limits: &Limits,
    ) -> Result<usize, IngestError> {
        if labels.is_empty() {
            return Ok(0);
        }
        let mut scratch = std::mem::take(&mut self.scratch);
        scratch.clear();
        for &(key, str) in labels {
            if str != 0 && self.keep_key(key, strings, limits)? {
                scratch.push((key, str));
            }
        }
        if scratch.is_empty() {
            self.scratch = scratch;
            return Ok(0);
        }
        scratch.sort_unstable();
        let id = match self.ids.get(scratch.as_slice()) {
            Some(&id) => id,
            None => {
                for &(_, v) in &scratch {
                    strings.get(v, || "sample label value".to_string())?;
                }
                let id = self.sets.len();
                self.sets.push(scratch.clone());
                self.ids.insert(scratch.clone(), id);
                id
            }
        };
        self.scratch = scratch;
        Ok(id)
    }

    /// Base labels, then sample labels (which win), then the reserved labels.
    fn resolve(
        &self,
        set: usize,
        strings: &Strings<'_>,
        name: &str,
        opts: &PprofOptions,
    ) -> Result<Labels, IngestError> {
        let mut labels = opts.base_labels.clone();
        for &(k, v) in self.sets.get(set).map(Vec::as_slice).unwrap_or_default() {
            let value = strings.get(v, || "sample label value".to_string())?;
            // An empty value means "not set" (Prometheus semantics); it must not
            // erase a base label of the same name.
            if !value.is_empty() {
                labels.set(strings.get(k, || "sample label key".to_string())?, value);
            }
        }
        labels.remove(PROFILE_TYPE_LABEL);
        labels.set(NAME_LABEL, name);
        Ok(labels)
    }
}

#[cfg(test)]
mod tests;
