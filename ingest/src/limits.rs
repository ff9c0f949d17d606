//! Per-request limits that keep one upload from exhausting memory or bloating the
//! index. Every decoder checks them while decoding, before the batch reaches storage.

use crate::error::IngestError;

/// Limits applied to one uploaded profile. Errors name the field and its value.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Largest body accepted after gzip decompression (and the largest plain body).
    /// Default 256 MiB: far above real profiles (large.cpu is ~5 MiB unpacked) while
    /// stopping a gzip bomb long before it exhausts memory.
    pub max_decompressed_bytes: usize,
    /// Most samples (pprof samples, folded lines) in one profile. Default 5,000,000.
    pub max_samples_per_profile: usize,
    /// Deepest stack accepted, counted in frames after inlined pprof lines are
    /// expanded. Default 4096: async-profiler's default depth is 2048 Java frames and
    /// inlining can add more; Go truncates far below this.
    pub max_stack_depth: usize,
    /// Most labels on one series, counting `__profile_type__`, `__name__` and
    /// `service_name`. Default 64.
    pub max_labels_per_series: usize,
    /// Longest label name in bytes. Default 1024.
    pub max_label_name_len: usize,
    /// Longest label value in bytes. Default 4096.
    pub max_label_value_len: usize,
}

impl Limits {
    /// Refuses a profile once `count` samples (what `what` names: pprof samples,
    /// folded lines, JFR events) exceed [`Limits::max_samples_per_profile`].
    pub fn check_samples(&self, count: usize, what: &'static str) -> Result<(), IngestError> {
        if count > self.max_samples_per_profile {
            return Err(IngestError::TooLarge {
                limit: "max_samples_per_profile",
                max: self.max_samples_per_profile as u64,
                what,
            });
        }
        Ok(())
    }

    /// Default of [`Limits::max_decompressed_bytes`]: 256 MiB.
    pub const DEFAULT_MAX_DECOMPRESSED_BYTES: usize = 256 << 20;
    /// Default of [`Limits::max_samples_per_profile`].
    pub const DEFAULT_MAX_SAMPLES_PER_PROFILE: usize = 5_000_000;
    /// Default of [`Limits::max_stack_depth`].
    pub const DEFAULT_MAX_STACK_DEPTH: usize = 4096;
    /// Default of [`Limits::max_labels_per_series`].
    pub const DEFAULT_MAX_LABELS_PER_SERIES: usize = 64;
    /// Default of [`Limits::max_label_name_len`].
    pub const DEFAULT_MAX_LABEL_NAME_LEN: usize = 1024;
    /// Default of [`Limits::max_label_value_len`].
    pub const DEFAULT_MAX_LABEL_VALUE_LEN: usize = 4096;
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_decompressed_bytes: Self::DEFAULT_MAX_DECOMPRESSED_BYTES,
            max_samples_per_profile: Self::DEFAULT_MAX_SAMPLES_PER_PROFILE,
            max_stack_depth: Self::DEFAULT_MAX_STACK_DEPTH,
            max_labels_per_series: Self::DEFAULT_MAX_LABELS_PER_SERIES,
            max_label_name_len: Self::DEFAULT_MAX_LABEL_NAME_LEN,
            max_label_value_len: Self::DEFAULT_MAX_LABEL_VALUE_LEN,
        }
    }
}
