//! The wire messages of Pyroscope's query API and the services beside it, from the one
//! schema crate.

pub use profiledb_proto::{capabilities, pprof, querier, settings, types, version, DESCRIPTORS};
