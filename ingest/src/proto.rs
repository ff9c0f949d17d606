//! Generated prost types for the crate's own `.proto` files (see `proto/`).
//!
//! Modules mirror the proto package paths because generated code refers to other
//! packages by relative path (`super::super::types::v1::LabelPair`).

pub mod perftools {
    /// `perftools.profiles`: the pprof profile format.
    pub mod profiles {
        include!(concat!(env!("OUT_DIR"), "/perftools.profiles.rs"));
    }
}

pub mod types {
    /// Pyroscope's `types.v1` (label pairs).
    pub mod v1 {
        include!(concat!(env!("OUT_DIR"), "/types.v1.rs"));
    }
}

pub mod push {
    /// Pyroscope's `push.v1` ingest API.
    pub mod v1 {
        include!(concat!(env!("OUT_DIR"), "/push.v1.rs"));
    }
}

/// Short path to the pprof messages.
pub use perftools::profiles as pprof;
