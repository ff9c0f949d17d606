//! What a series label may look like, and which pprof sample labels become series
//! labels.

use profiledb_model::Labels;

use crate::error::IngestError;
use crate::limits::Limits;

/// pprof sample labels that are dropped instead of becoming series labels: they are
/// unique per request or span, so as series labels each would create a new series
/// per upload (unbounded cardinality). Profiles keep their stacks; only the label
/// is lost.
pub const DROPPED_SAMPLE_LABELS: [&str; 3] = ["span_id", "trace_id", "profile_id"];

/// Whether `name` is a valid label name: `[A-Za-z_][A-Za-z0-9_.]*`.
///
/// Dots are allowed because Pyroscope SDKs send OpenTelemetry-style names such as
/// `otel.scope.name` and `process.runtime.name`.
pub fn is_valid_label_name(name: &str) -> bool {
    let mut bytes = name.bytes();
    match bytes.next() {
        Some(b) if b.is_ascii_alphabetic() || b == b'_' => {}
        _ => return false,
    }
    bytes.all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'.')
}

/// Whether a label name is reserved for profiledb (`__name__`, `__profile_type__`, …).
pub fn is_reserved(name: &str) -> bool {
    name.starts_with("__")
}

/// Checks a label name's syntax and length.
pub fn check_label_name(name: &str, limits: &Limits) -> Result<(), IngestError> {
    if name.len() > limits.max_label_name_len {
        return Err(IngestError::LimitExceeded {
            limit: "max_label_name_len",
            max: limits.max_label_name_len as u64,
            detail: format!("label name of {} bytes", name.len()),
        });
    }
    if !is_valid_label_name(name) {
        return Err(IngestError::InvalidLabel {
            name: name.to_string(),
            reason: "label names must match [A-Za-z_][A-Za-z0-9_.]*".to_string(),
        });
    }
    Ok(())
}

/// Checks a complete series label set against every label rule and limit.
pub fn check_series_labels(labels: &Labels, limits: &Limits) -> Result<(), IngestError> {
    if labels.len() > limits.max_labels_per_series {
        return Err(IngestError::LimitExceeded {
            limit: "max_labels_per_series",
            max: limits.max_labels_per_series as u64,
            detail: format!("series with {} labels {labels}", labels.len()),
        });
    }
    for (name, value) in labels.iter() {
        check_label_name(name, limits)?;
        if value.len() > limits.max_label_value_len {
            return Err(IngestError::LimitExceeded {
                limit: "max_label_value_len",
                max: limits.max_label_value_len as u64,
                detail: format!("value of label {name:?} ({} bytes)", value.len()),
            });
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn label_name_syntax() {
        for ok in ["a", "_x", "service_name", "otel.scope.name", "A1"] {
            assert!(is_valid_label_name(ok), "{ok}");
        }
        for bad in ["", "1a", "a-b", "a b", ".a", "ä"] {
            assert!(!is_valid_label_name(bad), "{bad}");
        }
    }

    #[test]
    fn series_limits_name_the_limit() {
        let limits = Limits {
            max_labels_per_series: 2,
            max_label_value_len: 3,
            max_label_name_len: 4,
            ..Limits::default()
        };
        let err = check_series_labels(&Labels::new([("a", "1"), ("b", "2"), ("c", "3")]), &limits)
            .unwrap_err();
        assert!(
            err.to_string()
                .ends_with("exceeds the limit max_labels_per_series = 2"),
            "{err}"
        );
        let err = check_series_labels(&Labels::new([("a", "1234")]), &limits).unwrap_err();
        assert_eq!(
            err.to_string(),
            "value of label \"a\" (4 bytes) exceeds the limit max_label_value_len = 3"
        );
        let err = check_series_labels(&Labels::new([("abcde", "1")]), &limits).unwrap_err();
        assert_eq!(
            err.to_string(),
            "label name of 5 bytes exceeds the limit max_label_name_len = 4"
        );
        let err = check_series_labels(&Labels::new([("a-b", "1")]), &limits).unwrap_err();
        assert!(matches!(err, IngestError::InvalidLabel { .. }));
        assert!(check_series_labels(&Labels::new([("a", "1"), ("b", "2")]), &limits).is_ok());
    }
}
