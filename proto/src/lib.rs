//! profiledb's wire schemas, compiled once, and the code that frames them.
//!
//! Every `.proto` of the project lives under `proto/schema/` and is compiled here by
//! `build.rs` (protox, so no system `protoc`). The ingest decoders, the server and the
//! collector all use these generated types; the collector depends on this crate and
//! on no other profiledb crate.
//!
//! - [`pprof`]: `perftools.profiles`, the pprof profile format.
//! - [`types::v1`], [`push::v1`], [`querier::v1`]: Pyroscope's public API packages.
//! - [`DESCRIPTORS`]: the descriptor set of all of them, for protojson.
//! - [`ProfileBuilder`]: the one pprof encoder (string interning, functions,
//!   locations, samples).
//! - [`gzip`]: gzip framing, and the one bounded gunzip.

#![deny(missing_docs)]

pub mod gzip;
mod profile_builder;

pub use profile_builder::{MappingInfo, ProfileBuilder};

/// Generated code for `perftools.profiles`.
///
/// Modules mirror the proto package paths because generated code refers to other
/// packages by relative path (`super::super::types::v1::LabelPair`).
#[allow(clippy::all, missing_docs)]
pub mod perftools {
    /// `perftools.profiles`: the pprof profile format. `Profile.string_table` holds
    /// [`bytes::Bytes`], so a decoded profile's strings are slices of the input.
    pub mod profiles {
        include!(concat!(env!("OUT_DIR"), "/perftools.profiles.rs"));
    }
}

/// Generated code for Pyroscope's `types.v1` package.
#[allow(clippy::all, missing_docs)]
pub mod types {
    /// `types.v1`: label pairs, profile types, series and the label queries.
    pub mod v1 {
        include!(concat!(env!("OUT_DIR"), "/types.v1.rs"));
    }
}

/// Generated code for Pyroscope's `push.v1` package.
#[allow(clippy::all, missing_docs)]
pub mod push {
    /// `push.v1`: the ingest API the Pyroscope SDKs and our collector send.
    pub mod v1 {
        include!(concat!(env!("OUT_DIR"), "/push.v1.rs"));
    }
}

/// Generated code for Pyroscope's `querier.v1` package.
#[allow(clippy::all, missing_docs)]
pub mod querier {
    /// `querier.v1`: the query API Grafana's Pyroscope datasource calls.
    pub mod v1 {
        include!(concat!(env!("OUT_DIR"), "/querier.v1.rs"));
    }
}

/// Generated code for Pyroscope's `version.v1` package.
#[allow(clippy::all, missing_docs)]
pub mod version {
    /// `version.v1`: which query API generation the server speaks.
    pub mod v1 {
        include!(concat!(env!("OUT_DIR"), "/version.v1.rs"));
    }
}

/// Generated code for Pyroscope's `capabilities.v1` package.
#[allow(clippy::all, missing_docs)]
pub mod capabilities {
    /// `capabilities.v1`: the feature flags a client may rely on.
    pub mod v1 {
        include!(concat!(env!("OUT_DIR"), "/capabilities.v1.rs"));
    }
}

/// Generated code for Pyroscope's `settings.v1` package.
#[allow(clippy::all, missing_docs)]
pub mod settings {
    /// `settings.v1`: named values stored per tenant.
    pub mod v1 {
        include!(concat!(env!("OUT_DIR"), "/settings.v1.rs"));
    }
}

/// Short path to the pprof messages.
pub use perftools::profiles as pprof;

/// The encoded `FileDescriptorSet` of every schema, for protojson through
/// prost-reflect. Besides the generated packages it holds `google.v1.Profile`, the name
/// under which Pyroscope's `SelectMergeProfile` returns a pprof profile: the same
/// message, with the string table declared `string` so JSON shows it as text.
pub const DESCRIPTORS: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/descriptors.bin"));
