//! What can be wrong with a well-formed OTLP profiles request.

/// A decoded `ExportProfilesServiceRequest` whose content cannot be stored. Each
/// variant names where in the request the problem is, so a client can find it.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum OtlpError {
    /// The request carries profiles but no `dictionary` to resolve their indices.
    #[error("the request has profiles but no dictionary")]
    MissingDictionary,
    /// An index into one of the dictionary's tables is negative or past its end.
    #[error("{referrer} refers to {table}[{index}] but the table has {len} entries")]
    IndexOutOfRange {
        /// The dictionary table (`stack_table`, `string_table`, …).
        table: &'static str,
        /// The index as sent.
        index: i32,
        /// The table's length.
        len: usize,
        /// The field that holds the index.
        referrer: String,
    },
    /// A profile without its one `sample_type`.
    #[error("{profile} has no sample_type")]
    MissingSampleType {
        /// Path of the profile in the request.
        profile: String,
    },
    /// A sample with both values and timestamps whose counts differ.
    #[error("{sample} has {values} values but {timestamps} timestamps")]
    SampleShape {
        /// Path of the sample in the request.
        sample: String,
        /// How many values it has.
        values: usize,
        /// How many timestamps it has.
        timestamps: usize,
    },
    /// A value that overflows i64 once scaled by the profile's period.
    #[error("{sample}: value {value} × period {scale} overflows")]
    ValueOverflow {
        /// Path of the sample in the request.
        sample: String,
        /// The value as sent.
        value: i64,
        /// The period factor (nanoseconds per sample).
        scale: i64,
    },
    /// A sample or period type name or unit that cannot be part of a profile type id.
    #[error("{profile}: profile type part {part:?} contains ':'")]
    InvalidTypePart {
        /// Path of the profile in the request.
        profile: String,
        /// The offending name or unit.
        part: String,
    },
}
