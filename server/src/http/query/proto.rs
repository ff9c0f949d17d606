//! The wire messages of Pyroscope's query API, from the one schema crate.

pub use profiledb_proto::{pprof, querier, types, DESCRIPTORS};
