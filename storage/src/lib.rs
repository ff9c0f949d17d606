//! profiledb's storage engine.
//!
//! Samples arrive as [`Batch`]es, land in a write-ahead log and an in-memory head, and
//! are flushed into immutable, checksummed segment files per tenant and time
//! partition. A sled catalog lists the segments and can be rebuilt from them; queries
//! resolve label matchers on roaring-bitmap indexes, scan the selected series in
//! parallel and merge them into call trees.
//!
//! Module map: [`profiledb_model`] (what is stored), [`wal`] and [`head`] (fresh data),
//! [`segment`], [`dict`] and [`index`] (files on disk), [`catalog`] (metadata),
//! [`query`] and [`selector`] (reading), [`store`] (the engine tying them together).

pub mod catalog;
mod codec;
pub mod compact;
pub mod config;
pub mod dict;
pub mod error;
pub mod fnindex;
pub mod head;
pub mod index;
pub mod query;
pub mod segment;
pub mod selector;
pub mod stats;
pub mod store;
mod store_query;
pub mod wal;

/// The profile model lives in its own crate (shared with ingest and the server);
/// `crate::model::…` paths keep naming it.
mod model {
    pub use profiledb_model::*;
}

pub use compact::{CompactProgress, CompactReport, RetentionReport};
pub use config::{DownsampleRule, FsyncPolicy, StoreConfig};
pub use error::{Result, StorageError};
pub use profiledb_model::{
    Batch, Function, InvalidTenant, Labels, Location, Mapping, Sample, SeriesSamples, Stacks,
    Symbols, TenantId, NAME_LABEL, PROFILE_TYPE_LABEL, SERVICE_NAME_LABEL,
};
pub use query::{CallTree, TimeRange};
pub use selector::{MatchOp, Matcher, Selector};
pub use store::{now_ms, Scope, Store};
