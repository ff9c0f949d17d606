//! OTLP profiles (`ExportProfilesServiceRequest`, `v1development`) → [`Batch`].
//!
//! One request holds resources, their scopes and profiles, and one shared
//! `ProfilesDictionary` that every index refers to. All of it becomes one batch,
//! with each dictionary symbol copied once ([`dictionary`]):
//! - each profile has one sample type, mapped to a profile type by [`sample_type`];
//! - labels come from resource, scope, profile and sample attributes ([`labels`]);
//! - a sample's values pair with its `timestamps_unix_nano` one to one; times alone
//!   count one event each; values alone are stored at the profile's `time_unix_nano`
//!   (or the receive time when that is unset or before 1971);
//! - a stack's first location is its leaf, and a location with N lines (inlining)
//!   becomes N frames; one without lines stays an unsymbolized frame (address and
//!   mapping);
//! - zero values are skipped, and a failing request stores nothing.
//!
//! Every index is checked ([`OtlpError`]); counts are bounded by [`Limits`].

mod dictionary;
mod error;
mod json;
mod labels;
mod sample_type;

use std::collections::HashMap;

use profiledb_model::{
    Batch, Labels, Sample, SeriesSamples, TenantId, NAME_LABEL, PROFILE_TYPE_LABEL,
};
use prost::Message;

use crate::error::IngestError;
use crate::gzip::decompress_bounded;
use crate::label_rules::check_series_labels;
use crate::limits::Limits;
use crate::pprof::sample_time_ms;
use crate::proto::otlp::Profile;
use crate::proto::otlp_collector::ExportProfilesServiceRequest;
use crate::push::PushEncoding;

use dictionary::{Dictionary, Symbols};
pub use error::OtlpError;
pub use labels::label_name;
pub use sample_type::OFF_CPU;

/// Decodes an OTLP export body (gzip-framed or not, binary or JSON) into a batch.
/// Samples without a usable time get `fallback_time_ms` (the receive time).
pub fn decode_otlp(
    body: &[u8],
    encoding: PushEncoding,
    tenant: TenantId,
    fallback_time_ms: i64,
    limits: &Limits,
) -> Result<Batch, IngestError> {
    let body = decompress_bounded(
        body,
        limits.max_decompressed_bytes,
        "max_decompressed_bytes",
    )?;
    let request = match encoding {
        PushEncoding::Proto => ExportProfilesServiceRequest::decode(&*body).map_err(|source| {
            IngestError::Protobuf {
                what: "ExportProfilesServiceRequest",
                source,
            }
        })?,
        PushEncoding::Json => json::request_from_json(&body)?,
    };
    otlp_to_batch(&request, tenant, fallback_time_ms, limits)
}

/// Converts a decoded request into a batch.
pub fn otlp_to_batch(
    request: &ExportProfilesServiceRequest,
    tenant: TenantId,
    fallback_time_ms: i64,
    limits: &Limits,
) -> Result<Batch, IngestError> {
    let mut batch = Batch::new(tenant);
    let has_profiles = request
        .resource_profiles
        .iter()
        .flat_map(|r| &r.scope_profiles)
        .any(|s| !s.profiles.is_empty());
    if !has_profiles {
        return Ok(batch);
    }
    let dict = request
        .dictionary
        .as_ref()
        .ok_or(OtlpError::MissingDictionary)?;
    let mut conv = Converter {
        dict: Dictionary { dict },
        symbols: Symbols::new(dict),
        stacks: vec![None; dict.stack_table.len()],
        series: HashMap::new(),
        limits,
        fallback_time_ms,
    };
    for (r, rp) in request.resource_profiles.iter().enumerate() {
        let mut resource_labels = Labels::default();
        if let Some(res) = &rp.resource {
            let path = format!("resource_profiles[{r}].resource");
            labels::add_key_values(&mut resource_labels, &res.attributes, &conv.dict, &path)?;
        }
        for (s, sp) in rp.scope_profiles.iter().enumerate() {
            let mut scope_labels = resource_labels.clone();
            if let Some(scope) = &sp.scope {
                let path = format!("resource_profiles[{r}].scope_profiles[{s}].scope");
                labels::add_key_values(&mut scope_labels, &scope.attributes, &conv.dict, &path)?;
            }
            for (p, profile) in sp.profiles.iter().enumerate() {
                let path = format!("resource_profiles[{r}].scope_profiles[{s}].profiles[{p}]");
                conv.profile(&mut batch, profile, &scope_labels, &path)?;
            }
        }
    }
    Ok(batch)
}

struct Converter<'a> {
    dict: Dictionary<'a>,
    symbols: Symbols,
    /// stack_table index → batch stack id.
    stacks: Vec<Option<u32>>,
    /// Series labels → position in `batch.series`.
    series: HashMap<Labels, usize>,
    limits: &'a Limits,
    fallback_time_ms: i64,
}

impl Converter<'_> {
    fn profile(
        &mut self,
        batch: &mut Batch,
        profile: &Profile,
        scope_labels: &Labels,
        path: &str,
    ) -> Result<(), IngestError> {
        let out = sample_type::out_type(profile, &self.dict, path)?;
        let points: usize = profile
            .samples
            .iter()
            .map(|s| s.values.len().max(s.timestamps_unix_nano.len()))
            .fold(0, usize::saturating_add);
        if points > self.limits.max_samples_per_profile {
            return Err(IngestError::TooLarge {
                limit: "max_samples_per_profile",
                max: self.limits.max_samples_per_profile as u64,
                what: "samples in profile",
            });
        }
        let mut base = scope_labels.clone();
        labels::add_indexed(
            &mut base,
            &profile.attribute_indices,
            &self.dict,
            false,
            path,
        )?;
        let profile_ms = sample_time_ms(
            i64::try_from(profile.time_unix_nano).unwrap_or(0),
            self.fallback_time_ms,
        );
        // Samples of one profile often share their attribute list: resolve it once.
        let mut by_attributes: HashMap<&[i32], usize> = HashMap::new();
        let mut points = Vec::new();
        for (i, sample) in profile.samples.iter().enumerate() {
            let sample_path = || format!("{path}.samples[{i}]");
            points.clear();
            sample_points(sample, out.scale, profile_ms, &sample_path, &mut points)?;
            if points.is_empty() {
                continue;
            }
            let series = match by_attributes.get(sample.attribute_indices.as_slice()) {
                Some(&s) => s,
                None => {
                    let s = self.series_for(batch, &base, &out, sample, &sample_path())?;
                    by_attributes.insert(&sample.attribute_indices, s);
                    s
                }
            };
            let stack = self.stack(batch, sample.stack_index, &sample_path)?;
            if let Some(dst) = batch.series.get_mut(series) {
                dst.samples
                    .extend(points.iter().map(|&(timestamp_ms, value)| Sample {
                        timestamp_ms,
                        stack,
                        value,
                    }));
            }
        }
        Ok(())
    }

    /// The batch series of one sample's labels, created on first use.
    fn series_for(
        &mut self,
        batch: &mut Batch,
        base: &Labels,
        out: &sample_type::OutType,
        sample: &crate::proto::otlp::Sample,
        path: &str,
    ) -> Result<usize, IngestError> {
        let mut l = base.clone();
        labels::add_indexed(&mut l, &sample.attribute_indices, &self.dict, true, path)?;
        labels::default_service_name(&mut l);
        l.set(NAME_LABEL, out.name.as_str());
        l.set(PROFILE_TYPE_LABEL, out.id.as_str());
        check_series_labels(&l, self.limits)?;
        Ok(*self.series.entry(l).or_insert_with_key(|labels| {
            batch.series.push(SeriesSamples {
                labels: labels.clone(),
                samples: Vec::new(),
            });
            batch.series.len() - 1
        }))
    }

    /// The batch stack of a stack_table entry, built on first use.
    fn stack(
        &mut self,
        batch: &mut Batch,
        index: i32,
        sample_path: &dyn Fn() -> String,
    ) -> Result<u32, IngestError> {
        let locations = self
            .dict
            .stack(index, || format!("{}.stack_index", sample_path()))?;
        // In range once `stack` resolved it (index 0 is the empty stack).
        let slot = usize::try_from(index).ok();
        if let Some(Some(id)) = slot.and_then(|s| self.stacks.get(s)) {
            return Ok(*id);
        }
        let mut frames: Vec<u32> = Vec::with_capacity(locations.len());
        for &loc in locations {
            let (first, len) = self.symbols.location(&self.dict, batch, loc)?;
            frames.extend(first..first + len);
            // Checked per location so a stack repeating a many-line location cannot
            // grow the buffer far past the limit first.
            if frames.len() > self.limits.max_stack_depth {
                return Err(IngestError::LimitExceeded {
                    limit: "max_stack_depth",
                    max: self.limits.max_stack_depth as u64,
                    detail: format!(
                        "stack_table[{index}] with more than {} frames",
                        self.limits.max_stack_depth
                    ),
                });
            }
        }
        let id = batch.stacks.push_leaf_first(frames.into_iter());
        if let Some(s) = slot.and_then(|s| self.stacks.get_mut(s)) {
            *s = Some(id);
        }
        Ok(id)
    }
}

/// One sample's `(time ms, scaled value)` points, zero values left out.
fn sample_points(
    sample: &crate::proto::otlp::Sample,
    scale: i64,
    profile_ms: i64,
    path: &dyn Fn() -> String,
    out: &mut Vec<(i64, i64)>,
) -> Result<(), OtlpError> {
    let (values, times) = (&sample.values, &sample.timestamps_unix_nano);
    let time = |t: u64| sample_time_ms(i64::try_from(t).unwrap_or(0), profile_ms);
    let scaled = |v: i64| {
        v.checked_mul(scale)
            .ok_or_else(|| OtlpError::ValueOverflow {
                sample: path(),
                value: v,
                scale,
            })
    };
    match (values.len(), times.len()) {
        (_, 0) => {
            for &v in values {
                out.push((profile_ms, scaled(v)?));
            }
        }
        (0, _) => {
            let one = scaled(1)?;
            out.extend(times.iter().map(|&t| (time(t), one)));
        }
        (n, m) if n == m => {
            for (&v, &t) in values.iter().zip(times) {
                out.push((time(t), scaled(v)?));
            }
        }
        (n, m) => {
            return Err(OtlpError::SampleShape {
                sample: path(),
                values: n,
                timestamps: m,
            })
        }
    }
    out.retain(|&(_, v)| v != 0);
    Ok(())
}

impl From<OtlpError> for IngestError {
    fn from(e: OtlpError) -> Self {
        IngestError::Otlp(e)
    }
}

#[cfg(test)]
mod tests;
