//! Why a JFR recording could not be read.

/// A recording (or its labels snapshot) that breaks the format or a bound.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum JfrError {
    /// The data ends inside a structure (`at` is the byte offset in the chunk data).
    #[error("recording truncated at byte {at} while reading {what}")]
    Truncated {
        /// Byte offset where more data was needed.
        at: usize,
        /// What was being read.
        what: &'static str,
    },
    /// The chunk does not start with `FLR\0`.
    #[error("not a JFR chunk at byte {at} (bad magic)")]
    BadMagic {
        /// Offset of the chunk in the recording.
        at: usize,
    },
    /// A major version other than 1 or 2.
    #[error("unsupported JFR version {major}.{minor}")]
    UnsupportedVersion {
        /// Major version.
        major: u16,
        /// Minor version.
        minor: u16,
    },
    /// A structurally impossible value: an offset outside the chunk, a bad string
    /// encoding, an index outside a table.
    #[error("malformed recording: {0}")]
    Malformed(String),
    /// Data names a type id the chunk's metadata does not declare.
    #[error("type id {0} is not declared in the chunk's metadata")]
    UnknownType(u64),
    /// The metadata lacks a type the profile conversion needs.
    #[error("the chunk's metadata has no type {0:?}")]
    MissingType(&'static str),
    /// A bound on nesting or work was hit (hostile or corrupt input).
    #[error("recording exceeds the bound {bound} = {max}")]
    Bound {
        /// Which bound.
        bound: &'static str,
        /// Its value.
        max: u64,
    },
    /// The `labels` part is not a `LabelsSnapshot` protobuf.
    #[error("malformed labels snapshot: {0}")]
    Labels(String),
}

impl JfrError {
    pub(crate) fn malformed(msg: impl Into<String>) -> Self {
        JfrError::Malformed(msg.into())
    }
}
