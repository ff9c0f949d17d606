//! profiledb's wire schemas, compiled once, and the code that frames them.
//!
//! Every `.proto` of the project lives under `proto/schema/` and is compiled here by
//! `build.rs` (protox, so no system `protoc`). The ingest decoders, the server and the
//! collector all use these generated types; the collector depends on this crate and
//! on no other profiledb crate.
//!
//! - [`pprof`]: `perftools.profiles`, the pprof profile format.
//! - [`types::v1`], [`push::v1`], [`querier::v1`]: Pyroscope's public API packages.
//! - [`control::v1`]: the fleet control plane between server and agents.
//! - [`opentelemetry`]: OTLP profiles (`v1development`) and the export service.
//! - [`DESCRIPTORS`]: the descriptor set of all of them, for protojson.
//! - [`ProfileBuilder`]: the one pprof encoder (string interning, functions,
//!   locations, samples).
//! - [`gzip`]: gzip framing, and the one bounded gunzip.

// No unwrap() outside tests: a panic on bad input would take the process down.
#![cfg_attr(not(test), deny(clippy::unwrap_used))]
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

/// Generated code for profiledb's `control.v1` package.
#[allow(clippy::all, missing_docs)]
pub mod control {
    /// `control.v1`: the fleet control plane, agents asking what to sample.
    pub mod v1 {
        include!(concat!(env!("OUT_DIR"), "/control.v1.rs"));
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

/// Generated code for the OpenTelemetry packages OTLP profiles ingest needs.
#[allow(clippy::all, missing_docs)]
pub mod opentelemetry {
    /// `opentelemetry.proto.*`.
    pub mod proto {
        /// `opentelemetry.proto.common.v1`: attributes and instrumentation scopes.
        pub mod common {
            /// `opentelemetry.proto.common.v1`.
            pub mod v1 {
                include!(concat!(
                    env!("OUT_DIR"),
                    "/opentelemetry.proto.common.v1.rs"
                ));
            }
        }
        /// `opentelemetry.proto.resource.v1`: the producing entity.
        pub mod resource {
            /// `opentelemetry.proto.resource.v1`.
            pub mod v1 {
                include!(concat!(
                    env!("OUT_DIR"),
                    "/opentelemetry.proto.resource.v1.rs"
                ));
            }
        }
        /// `opentelemetry.proto.profiles.v1development`: profiles and their dictionary.
        pub mod profiles {
            /// `opentelemetry.proto.profiles.v1development`.
            pub mod v1development {
                include!(concat!(
                    env!("OUT_DIR"),
                    "/opentelemetry.proto.profiles.v1development.rs"
                ));
            }
        }
        /// `opentelemetry.proto.collector.profiles.v1development`: the export service.
        pub mod collector {
            /// `opentelemetry.proto.collector.profiles.*`.
            pub mod profiles {
                /// `opentelemetry.proto.collector.profiles.v1development`.
                pub mod v1development {
                    include!(concat!(
                        env!("OUT_DIR"),
                        "/opentelemetry.proto.collector.profiles.v1development.rs"
                    ));
                }
            }
        }
    }
}

/// Short path to the OTLP profiles export request and response.
pub use opentelemetry::proto::collector::profiles::v1development as otlp_collector;
/// Short path to the OTLP profiles messages.
pub use opentelemetry::proto::profiles::v1development as otlp;

/// Short path to the pprof messages.
pub use perftools::profiles as pprof;

/// The encoded `FileDescriptorSet` of every schema, for protojson through
/// prost-reflect. Besides the generated packages it holds `google.v1.Profile`, the name
/// under which Pyroscope's `SelectMergeProfile` returns a pprof profile: the same
/// message, with the string table declared `string` so JSON shows it as text.
pub const DESCRIPTORS: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/descriptors.bin"));
