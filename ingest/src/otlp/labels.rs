//! OTLP attributes → series labels.
//!
//! - Keys are made into label names as Pyroscope shows them: every character outside
//!   `[A-Za-z0-9_]` becomes `_` (`service.name` → `service_name`,
//!   `k8s.pod.name` → `k8s_pod_name`), and a leading digit gets a `_` prefix.
//! - Only string values become labels (inline or by string index): numbers such as
//!   `process.pid` would make a series per process, as in Pyroscope.
//! - Resource attributes come first; scope and profile attributes only add names not
//!   set yet (Pyroscope's order); sample attributes, the most specific, override.
//! - Reserved `__*` names and the per-request ids `span_id`, `trace_id`, `profile_id`
//!   are dropped ([`crate::label_rules::DROPPED_SAMPLE_LABELS`]); sample links to
//!   spans are therefore not kept either.
//! - Without a `service.name`, `service_name` is `unknown_service:<executable>` when a
//!   `process.executable.name` attribute is present, else `unknown_service`, as the
//!   OpenTelemetry resource conventions say.

use profiledb_model::{Labels, SERVICE_NAME_LABEL};

use super::dictionary::Dictionary;
use super::error::OtlpError;
use crate::label_rules::{is_reserved, DROPPED_SAMPLE_LABELS};
use crate::proto::opentelemetry::proto::common::v1::KeyValue;

const UNKNOWN_SERVICE: &str = "unknown_service";
const EXECUTABLE_LABEL: &str = "process_executable_name";

/// An attribute key as a label name.
pub fn label_name(key: &str) -> String {
    let mut out = String::with_capacity(key.len() + 1);
    if key.starts_with(|c: char| c.is_ascii_digit()) {
        out.push('_');
    }
    out.extend(key.chars().map(|c| {
        if c.is_ascii_alphanumeric() || c == '_' {
            c
        } else {
            '_'
        }
    }));
    out
}

/// Whether an attribute may become a label at all.
fn kept(name: &str) -> bool {
    !name.is_empty() && !is_reserved(name) && !DROPPED_SAMPLE_LABELS.contains(&name)
}

/// Adds inline `KeyValue` attributes (resource, scope) not already set.
pub(super) fn add_key_values(
    labels: &mut Labels,
    attrs: &[KeyValue],
    dict: &Dictionary<'_>,
    path: &str,
) -> Result<(), OtlpError> {
    for (i, kv) in attrs.iter().enumerate() {
        let referrer = || format!("{path}.attributes[{i}]");
        let key = match kv.key.as_str() {
            "" => dict.string(kv.key_strindex, referrer)?,
            k => k,
        };
        let Some(value) = dict.string_value(kv.value.as_ref(), referrer)? else {
            continue;
        };
        let name = label_name(key);
        if kept(&name) && labels.get(&name).is_none() {
            labels.set(name, value);
        }
    }
    Ok(())
}

/// Adds dictionary attributes by index; `overwrite` for sample attributes.
pub(super) fn add_indexed(
    labels: &mut Labels,
    indices: &[i32],
    dict: &Dictionary<'_>,
    overwrite: bool,
    path: &str,
) -> Result<(), OtlpError> {
    for &a in indices {
        let Some(attr) = dict.attribute(a, || format!("{path}.attribute_indices"))? else {
            continue;
        };
        let key = dict.string(attr.key_strindex, || format!("attribute_table[{a}]"))?;
        let referrer = || format!("attribute_table[{a}].value");
        let Some(value) = dict.string_value(attr.value.as_ref(), referrer)? else {
            continue;
        };
        let name = label_name(key);
        if kept(&name) && (overwrite || labels.get(&name).is_none()) {
            labels.set(name, value);
        }
    }
    Ok(())
}

/// Fills in `service_name` when no attribute named the service.
pub(super) fn default_service_name(labels: &mut Labels) {
    if labels.get(SERVICE_NAME_LABEL).is_some() {
        return;
    }
    let name = match labels.get(EXECUTABLE_LABEL) {
        Some(exe) => format!("{UNKNOWN_SERVICE}:{exe}"),
        None => UNKNOWN_SERVICE.to_string(),
    };
    labels.set(SERVICE_NAME_LABEL, name);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_become_label_names() {
        assert_eq!(label_name("service.name"), "service_name");
        assert_eq!(label_name("k8s.pod-name"), "k8s_pod_name");
        assert_eq!(label_name("9lives"), "_9lives");
        assert_eq!(label_name("thread_name"), "thread_name");
    }

    #[test]
    fn service_name_falls_back_to_the_executable() {
        let mut l = Labels::new([(EXECUTABLE_LABEL, "nginx")]);
        default_service_name(&mut l);
        assert_eq!(l.get(SERVICE_NAME_LABEL), Some("unknown_service:nginx"));
        let mut l = Labels::default();
        default_service_name(&mut l);
        assert_eq!(l.get(SERVICE_NAME_LABEL), Some("unknown_service"));
        let mut l = Labels::new([(SERVICE_NAME_LABEL, "api"), (EXECUTABLE_LABEL, "x")]);
        default_service_name(&mut l);
        assert_eq!(l.get(SERVICE_NAME_LABEL), Some("api"));
    }
}
