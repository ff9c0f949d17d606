//! Generated prost types for `server/proto/` (Pyroscope's query API).
//!
//! Modules mirror the proto package paths because generated code refers to other
//! packages by relative path (`super::super::types::v1::LabelPair`).

#![allow(clippy::all)]

pub mod types {
    pub mod v1 {
        include!(concat!(env!("OUT_DIR"), "/types.v1.rs"));
    }
}

pub mod google {
    pub mod v1 {
        include!(concat!(env!("OUT_DIR"), "/google.v1.rs"));
    }
}

pub mod querier {
    pub mod v1 {
        include!(concat!(env!("OUT_DIR"), "/querier.v1.rs"));
    }
}

/// The descriptor set of the files above, for protojson through prost-reflect.
pub const DESCRIPTORS: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/query_descriptors.bin"));
