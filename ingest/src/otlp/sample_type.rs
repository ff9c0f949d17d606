//! A profile's one sample type (and its period) → our profile type id, and the
//! factor every value is multiplied by.
//!
//! - The OTel eBPF profiler's on-CPU profile, `samples`/`count` with a `cpu` period in
//!   ns/µs/ms/s, becomes `process_cpu:cpu:nanoseconds:cpu:nanoseconds` with each count
//!   multiplied by the period, as Pyroscope does: the CPU type Grafana looks for.
//! - Its off-CPU profile, `events`/`nanoseconds` without a period, becomes
//!   `off_cpu:events:nanoseconds::` (Pyroscope's name for it).
//! - Anything else keeps its type and unit, named as a pprof profile with that one
//!   sample type would be ([`crate::profile_type::infer_profile_name`]).

use super::dictionary::Dictionary;
use super::error::OtlpError;
use crate::profile_type::{infer_profile_name, CPU_NANOSECONDS};
use crate::proto::otlp::Profile;

/// Profile type of the eBPF profiler's off-CPU profiles.
pub const OFF_CPU: &str = "off_cpu:events:nanoseconds::";

/// Where a profile's values go.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct OutType {
    /// `name:sample_type:sample_unit:period_type:period_unit`.
    pub id: String,
    /// The `__name__` label: the id's first part.
    pub name: String,
    /// Every value is multiplied by this.
    pub scale: i64,
}

pub(super) fn out_type(
    profile: &Profile,
    dict: &Dictionary<'_>,
    path: &str,
) -> Result<OutType, OtlpError> {
    let st = profile
        .sample_type
        .as_ref()
        .ok_or_else(|| OtlpError::MissingSampleType {
            profile: path.to_string(),
        })?;
    let field = |what: &str| format!("{path}.{what}");
    let ty = dict.string(st.type_strindex, || field("sample_type.type_strindex"))?;
    let unit = dict.string(st.unit_strindex, || field("sample_type.unit_strindex"))?;
    if ty.is_empty() {
        return Err(OtlpError::MissingSampleType {
            profile: path.to_string(),
        });
    }
    let (period_type, period_unit) = match &profile.period_type {
        Some(pt) => (
            dict.string(pt.type_strindex, || field("period_type.type_strindex"))?,
            dict.string(pt.unit_strindex, || field("period_type.unit_strindex"))?,
        ),
        None => ("", ""),
    };
    if let Some(part) = [ty, unit, period_type, period_unit]
        .into_iter()
        .find(|p| p.contains(':'))
    {
        return Err(OtlpError::InvalidTypePart {
            profile: path.to_string(),
            part: part.to_string(),
        });
    }
    let period_ns = match period_unit {
        "nanoseconds" => Some(1),
        "microseconds" => Some(1_000),
        "milliseconds" => Some(1_000_000),
        "seconds" => Some(1_000_000_000),
        _ => None,
    }
    .and_then(|unit_ns: i64| profile.period.checked_mul(unit_ns))
    .filter(|&p| p > 0);
    let (id, scale) = match (ty, unit, period_type, period_ns) {
        ("samples", "count", "cpu", Some(ns)) => (CPU_NANOSECONDS.to_string(), ns),
        ("events", "nanoseconds", "", _) => (OFF_CPU.to_string(), 1),
        _ => {
            let name = infer_profile_name([ty], None);
            (format!("{name}:{ty}:{unit}:{period_type}:{period_unit}"), 1)
        }
    };
    let name = id.split(':').next().unwrap_or_default().to_string();
    Ok(OutType { id, name, scale })
}
