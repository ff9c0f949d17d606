//! Profile type ids (`name:sample_type:sample_unit:period_type:period_unit`) and the
//! Pyroscope rules that pick the name part.
//!
//! The rules follow Pyroscope so SDK uploads land under the same ids Grafana's
//! Pyroscope datasource expects:
//!
//! - pprof ([`infer_profile_name`]): a `wall` sample type anywhere → `wall`; otherwise
//!   the first sample type whose (display) name contains `cpu` → `process_cpu`,
//!   `alloc_`/`inuse_` or equals `space`/`objects` → `memory`, contains `mutex_` →
//!   `mutex`, `block_` → `block`, `goroutines` → `goroutines`. Display names come
//!   from the upload's `sample_type_config` or, without one, Pyroscope's defaults
//!   (`samples`→`cpu`, `goroutine`→`goroutines`, `contentions`→`mutex_count`,
//!   `delay`→`mutex_duration`). Go block and mutex profiles have identical sample
//!   types, so — exactly as in Pyroscope — a block profile is only recognised when
//!   the Go SDK's `sample_type_config` renames them `block_count`/`block_duration`.
//!   If nothing matches, the last sample type's display name is used.
//! - folded/lines ([`suffix_profile_type`]): the last dotted suffix of the app name.

use std::collections::HashMap;

use serde::Deserialize;

use crate::error::IngestError;

/// The five parts of a profile type id.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct ProfileType {
    /// The profile name (`process_cpu`, `memory`, …).
    pub name: String,
    /// What a sample value measures (`cpu`, `alloc_space`, …).
    pub sample_type: String,
    /// Its unit (`nanoseconds`, `bytes`, …).
    pub sample_unit: String,
    /// What one sampling event measures.
    pub period_type: String,
    /// Its unit.
    pub period_unit: String,
}

impl ProfileType {
    /// The type `name:sample.0:sample.1:period.0:period.1`.
    pub fn new(name: &str, sample: (&str, &str), period: (&str, &str)) -> Self {
        ProfileType {
            name: name.to_string(),
            sample_type: sample.0.to_string(),
            sample_unit: sample.1.to_string(),
            period_type: period.0.to_string(),
            period_unit: period.1.to_string(),
        }
    }

    /// `name:sample_type:sample_unit:period_type:period_unit`.
    pub fn id(&self) -> String {
        format!(
            "{}:{}:{}:{}:{}",
            self.name, self.sample_type, self.sample_unit, self.period_type, self.period_unit
        )
    }

    /// Parses an id; `None` unless it has exactly five `:`-separated parts.
    pub fn parse(id: &str) -> Option<Self> {
        let mut parts = id.split(':');
        let pt = ProfileType {
            name: parts.next()?.to_string(),
            sample_type: parts.next()?.to_string(),
            sample_unit: parts.next()?.to_string(),
            period_type: parts.next()?.to_string(),
            period_unit: parts.next()?.to_string(),
        };
        parts.next().is_none().then_some(pt)
    }
}

/// Id of the canonical CPU type every CPU upload is made available under.
pub const CPU_NANOSECONDS: &str = "process_cpu:cpu:nanoseconds:cpu:nanoseconds";

/// Per-sample-type settings as the Pyroscope Go SDK sends them in the multipart
/// field `sample_type_config` (JSON object keyed by pprof sample type).
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(default)]
pub struct SampleTypeSettings {
    /// Unit to store the values in, overriding the profile's.
    pub units: Option<String>,
    /// Sample type name to store, overriding the profile's.
    #[serde(rename = "display-name")]
    pub display_name: Option<String>,
    /// How Pyroscope aggregates the values (`sum`, `average`).
    pub aggregation: Option<String>,
    /// Whether the values accumulate over the process's life.
    pub cumulative: bool,
    /// Whether the values are samples of a larger population.
    pub sampled: bool,
}

/// `sample_type_config`: pprof sample type → settings.
pub type SampleTypeConfig = HashMap<String, SampleTypeSettings>;

/// Parses a `sample_type_config` JSON document; unknown keys are ignored.
pub fn parse_sample_type_config(json: &[u8]) -> Result<SampleTypeConfig, IngestError> {
    serde_json::from_slice(json).map_err(|e| IngestError::InvalidJson {
        what: "sample_type_config",
        reason: e.to_string(),
    })
}

/// Pyroscope's display names for sample types when the upload has no config.
fn default_display_name(sample_type: &str) -> Option<&'static str> {
    match sample_type {
        "samples" => Some("cpu"),
        "goroutine" => Some("goroutines"),
        "contentions" => Some("mutex_count"),
        "delay" => Some("mutex_duration"),
        _ => None,
    }
}

/// Picks the profile name part for a pprof profile from its sample type names (see
/// the module docs). `config` replaces the defaults entirely when given, as in
/// Pyroscope.
pub fn infer_profile_name<'a>(
    sample_types: impl IntoIterator<Item = &'a str> + Clone,
    config: Option<&SampleTypeConfig>,
) -> String {
    if sample_types.clone().into_iter().any(|st| st == "wall") {
        return "wall".to_string();
    }
    let mut last = "";
    for st in sample_types {
        let display = match config {
            Some(cfg) => cfg
                .get(st)
                .and_then(|s| s.display_name.as_deref())
                .filter(|d| !d.is_empty()),
            None => default_display_name(st),
        }
        .unwrap_or(st);
        last = display;
        if display.contains("cpu") {
            return "process_cpu".to_string();
        }
        if display.contains("alloc_")
            || display.contains("inuse_")
            || display == "space"
            || display == "objects"
        {
            return "memory".to_string();
        }
        if display.contains("mutex_") {
            return "mutex".to_string();
        }
        if display.contains("block_") {
            return "block".to_string();
        }
        if display.contains("goroutines") {
            return "goroutines".to_string();
        }
    }
    last.to_string()
}

/// The profile type a folded/lines upload gets from its app-name suffix, and
/// whether its counts are samples taken at `sampleRate` Hz (then stored as
/// nanoseconds: count × 1e9 / sampleRate).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SuffixType {
    /// The profile type the suffix names.
    pub profile_type: ProfileType,
    /// Whether counts are samples at `sampleRate` Hz, stored as nanoseconds.
    pub counts_are_samples: bool,
}

/// Maps a Pyroscope app-name suffix (`cpu` in `myapp.cpu`) to its profile type;
/// `None` for a suffix that names no profile kind (then it is part of the app name
/// and the upload is CPU).
///
/// | suffix | profile type |
/// |---|---|
/// | `cpu`, `itimer` (and no suffix) | `process_cpu:cpu:nanoseconds:cpu:nanoseconds` (×1e9/sampleRate) |
/// | `wall` | `wall:wall:nanoseconds:wall:nanoseconds` (×1e9/sampleRate) |
/// | `alloc_objects`, `inuse_objects` | `memory:<suffix>:count:space:bytes` |
/// | `alloc_space`, `inuse_space` | `memory:<suffix>:bytes:space:bytes` |
/// | `alloc_in_new_tlab_objects`, `alloc_outside_tlab_objects`, `live` | `memory:<suffix>:count:space:bytes` |
/// | `alloc_in_new_tlab_bytes`, `alloc_outside_tlab_bytes` | `memory:<suffix>:bytes:space:bytes` |
/// | `goroutines` | `goroutines:goroutine:count:goroutine:count` |
/// | `mutex_count` / `mutex_duration` | `mutex:contentions:count:contentions:count` / `mutex:delay:nanoseconds:contentions:count` |
/// | `block_count` / `block_duration`, `lock_count` / `lock_duration` | `block:contentions:count:contentions:count` / `block:delay:nanoseconds:contentions:count` |
pub fn suffix_profile_type(suffix: &str) -> Option<SuffixType> {
    let memory = |unit| ProfileType::new("memory", (suffix, unit), ("space", "bytes"));
    let contention = ("contentions", "count");
    let (profile_type, counts_are_samples) = match suffix {
        "cpu" | "itimer" => (
            ProfileType::new(
                "process_cpu",
                ("cpu", "nanoseconds"),
                ("cpu", "nanoseconds"),
            ),
            true,
        ),
        "wall" => (
            ProfileType::new("wall", ("wall", "nanoseconds"), ("wall", "nanoseconds")),
            true,
        ),
        "alloc_objects"
        | "inuse_objects"
        | "alloc_in_new_tlab_objects"
        | "alloc_outside_tlab_objects"
        | "live" => (memory("count"), false),
        "alloc_space" | "inuse_space" | "alloc_in_new_tlab_bytes" | "alloc_outside_tlab_bytes" => {
            (memory("bytes"), false)
        }
        "goroutines" => (
            ProfileType::new("goroutines", ("goroutine", "count"), ("goroutine", "count")),
            false,
        ),
        "mutex_count" => (
            ProfileType::new("mutex", ("contentions", "count"), contention),
            false,
        ),
        "mutex_duration" => (
            ProfileType::new("mutex", ("delay", "nanoseconds"), contention),
            false,
        ),
        "block_count" | "lock_count" => (
            ProfileType::new("block", ("contentions", "count"), contention),
            false,
        ),
        "block_duration" | "lock_duration" => (
            ProfileType::new("block", ("delay", "nanoseconds"), contention),
            false,
        ),
        _ => return None,
    };
    Some(SuffixType {
        profile_type,
        counts_are_samples,
    })
}

/// The type of a folded upload whose name has no known suffix.
pub fn default_suffix_type() -> SuffixType {
    // "cpu" is always in the table.
    suffix_profile_type("cpu").unwrap_or_else(|| SuffixType {
        profile_type: ProfileType::new(
            "process_cpu",
            ("cpu", "nanoseconds"),
            ("cpu", "nanoseconds"),
        ),
        counts_are_samples: true,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn infer(types: &[&str]) -> String {
        infer_profile_name(types.iter().copied(), None)
    }

    #[test]
    fn pyroscope_name_inference_for_common_profiles() {
        assert_eq!(infer(&["samples", "cpu"]), "process_cpu");
        assert_eq!(infer(&["cpu"]), "process_cpu");
        assert_eq!(infer(&["samples"]), "process_cpu");
        assert_eq!(
            infer(&[
                "alloc_objects",
                "alloc_space",
                "inuse_objects",
                "inuse_space"
            ]),
            "memory"
        );
        assert_eq!(infer(&["objects", "space"]), "memory");
        assert_eq!(infer(&["contentions", "delay"]), "mutex");
        assert_eq!(infer(&["goroutine"]), "goroutines");
        assert_eq!(infer(&["samples", "wall"]), "wall");
        assert_eq!(infer(&["something", "else"]), "else");
        assert_eq!(infer(&[]), "");
    }

    #[test]
    fn block_profiles_need_the_sdk_sample_type_config() {
        let cfg = parse_sample_type_config(
            br#"{"contentions":{"units":"lock_samples","display-name":"block_count"},
                 "delay":{"units":"lock_nanoseconds","display-name":"block_duration","x":1}}"#,
        )
        .unwrap();
        assert_eq!(cfg["delay"].display_name.as_deref(), Some("block_duration"));
        assert_eq!(
            infer_profile_name(["contentions", "delay"], Some(&cfg)),
            "block"
        );
        // A config replaces the defaults, so `samples` is no longer called `cpu`.
        assert_eq!(infer_profile_name(["samples"], Some(&cfg)), "samples");
        assert!(parse_sample_type_config(b"[1]").is_err());
    }

    #[test]
    fn suffix_table() {
        let id = |s: &str| suffix_profile_type(s).map(|t| t.profile_type.id());
        assert_eq!(id("cpu").as_deref(), Some(CPU_NANOSECONDS));
        assert_eq!(
            id("alloc_space").as_deref(),
            Some("memory:alloc_space:bytes:space:bytes")
        );
        assert_eq!(
            id("inuse_objects").as_deref(),
            Some("memory:inuse_objects:count:space:bytes")
        );
        assert_eq!(
            id("block_duration").as_deref(),
            Some("block:delay:nanoseconds:contentions:count")
        );
        assert_eq!(
            id("mutex_count").as_deref(),
            Some("mutex:contentions:count:contentions:count")
        );
        assert_eq!(
            id("goroutines").as_deref(),
            Some("goroutines:goroutine:count:goroutine:count")
        );
        assert_eq!(id("app"), None);
        assert!(suffix_profile_type("wall").unwrap().counts_are_samples);
        assert!(
            !suffix_profile_type("inuse_space")
                .unwrap()
                .counts_are_samples
        );
    }

    #[test]
    fn id_round_trip() {
        let pt = ProfileType::parse("memory:alloc_space:bytes:space:bytes").unwrap();
        assert_eq!(pt.sample_type, "alloc_space");
        assert_eq!(pt.id(), "memory:alloc_space:bytes:space:bytes");
        assert_eq!(ProfileType::parse("a:b:c:d"), None);
        assert_eq!(ProfileType::parse("a:b:c:d:e:f"), None);
    }
}
