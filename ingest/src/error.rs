//! The one error type every decoder returns.
//!
//! Each variant carries a stable machine-readable [`IngestError::code`] so the HTTP
//! layer can map it to a status without matching on messages, and a human message
//! (the `Display` impl) that names the offending input.

/// Why an upload was refused.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum IngestError {
    /// The bytes are not a valid protobuf message of the expected type.
    #[error("malformed {what} protobuf: {source}")]
    Protobuf {
        /// The message that was expected (`"pprof Profile"`, …).
        what: &'static str,
        /// prost's account of what is wrong.
        #[source]
        source: prost::DecodeError,
    },
    /// The body starts with the gzip magic but is not a valid gzip stream.
    #[error("invalid gzip data: {0}")]
    Gzip(#[source] std::io::Error),
    /// The payload (after decompression) or its sample count is over a size limit.
    /// Kept apart from [`IngestError::LimitExceeded`] because it maps to 413.
    #[error("{what} exceeds the limit {limit} = {max}")]
    TooLarge {
        /// Name of the field of [`crate::Limits`] that was exceeded.
        limit: &'static str,
        /// The limit's value.
        max: u64,
        /// What was measured ("decompressed body", "samples in profile", …).
        what: &'static str,
    },
    /// A shape limit (stack depth, label count or length) was exceeded.
    #[error("{detail} exceeds the limit {limit} = {max}")]
    LimitExceeded {
        /// Name of the field of [`crate::Limits`] that was exceeded.
        limit: &'static str,
        /// The limit's value.
        max: u64,
        /// What exceeded it, naming the offending stack or label.
        detail: String,
    },
    /// A well-formed protobuf whose content breaks the pprof rules (dangling ids,
    /// string index out of range, value count mismatch, …).
    #[error("invalid pprof profile: {0}")]
    InvalidProfile(String),
    /// A folded/lines body line that cannot be parsed (1-based line number).
    #[error("invalid folded input at line {line}: {reason}")]
    InvalidFolded {
        /// 1-based line number.
        line: usize,
        /// What is wrong with the line.
        reason: String,
    },
    /// A query parameter that cannot be parsed.
    #[error("invalid parameter {param}: {reason}")]
    InvalidParameter {
        /// The parameter's name.
        param: &'static str,
        /// What is wrong with its value.
        reason: String,
    },
    /// A label name or value that is not allowed.
    #[error("invalid label {name:?}: {reason}")]
    InvalidLabel {
        /// The label's name.
        name: String,
        /// Which rule it breaks.
        reason: String,
    },
    /// A JSON body (protojson push request, sample_type_config) that cannot be parsed.
    #[error("invalid {what} JSON: {reason}")]
    InvalidJson {
        /// What the JSON was meant to be.
        what: &'static str,
        /// The parser's account of what is wrong.
        reason: String,
    },
    /// A JFR recording or labels snapshot that cannot be read.
    #[error("invalid JFR recording: {0}")]
    InvalidJfr(#[from] crate::jfr::JfrError),
    /// A well-formed OTLP profiles request whose content breaks the OTLP rules
    /// (index out of range, missing dictionary, …).
    #[error("invalid OTLP profiles request: {0}")]
    Otlp(crate::otlp::OtlpError),
    /// A format that exists in the Pyroscope API but that profiledb does not decode yet.
    #[error("format {format:?} is not supported yet")]
    UnsupportedFormat {
        /// The format as the request named it.
        format: String,
    },
}

impl IngestError {
    /// Stable machine-readable error code for API error bodies.
    ///
    /// - `invalid_argument`: the request is malformed or breaks a shape limit (400)
    /// - `payload_too_large`: too many bytes or samples (413)
    /// - `unsupported_format`: a known format that is not implemented (422)
    pub fn code(&self) -> &'static str {
        match self {
            IngestError::TooLarge { .. } => "payload_too_large",
            IngestError::UnsupportedFormat { .. } => "unsupported_format",
            IngestError::Protobuf { .. }
            | IngestError::Gzip(_)
            | IngestError::LimitExceeded { .. }
            | IngestError::InvalidProfile(_)
            | IngestError::InvalidFolded { .. }
            | IngestError::InvalidParameter { .. }
            | IngestError::InvalidLabel { .. }
            | IngestError::InvalidJson { .. }
            | IngestError::InvalidJfr(_)
            | IngestError::Otlp(_) => "invalid_argument",
        }
    }

    /// The HTTP status that goes with [`IngestError::code`].
    pub fn http_status(&self) -> u16 {
        match self.code() {
            "payload_too_large" => 413,
            "unsupported_format" => 422,
            _ => 400,
        }
    }

    pub(crate) fn profile(msg: impl Into<String>) -> Self {
        IngestError::InvalidProfile(msg.into())
    }

    pub(crate) fn param(param: &'static str, reason: impl Into<String>) -> Self {
        IngestError::InvalidParameter {
            param,
            reason: reason.into(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_and_statuses_are_stable() {
        let too_large = IngestError::TooLarge {
            limit: "max_decompressed_bytes",
            max: 10,
            what: "decompressed body",
        };
        assert_eq!(too_large.code(), "payload_too_large");
        assert_eq!(too_large.http_status(), 413);
        assert_eq!(
            too_large.to_string(),
            "decompressed body exceeds the limit max_decompressed_bytes = 10"
        );
        let jfr = IngestError::UnsupportedFormat {
            format: "jfr".into(),
        };
        assert_eq!(jfr.code(), "unsupported_format");
        assert_eq!(jfr.http_status(), 422);
        let bad = IngestError::profile("x");
        assert_eq!(bad.code(), "invalid_argument");
        assert_eq!(bad.http_status(), 400);
        assert_eq!(bad.to_string(), "invalid pprof profile: x");
    }
}
