//! profiledb's storage engine.
//!
//! Samples arrive as [`Batch`]es, land in a write-ahead log and an in-memory head, and
//! are flushed into immutable, checksummed segment files per tenant and time
//! partition. A sled catalog lists the segments and can be rebuilt from them. A
//! [`Store`] writes, keeps and scans the data; a [`Querier`] answers every query over
//! it (label discovery, merges into flame graphs and call trees, group-by, time
//! series, diffs) with a result cache and limits.
//!
//! ```
//! use profiledb_storage::{
//!     Batch, Function, Labels, Location, Querier, QueryLimits, Sample, Selector,
//!     SeriesSamples, Store, StoreConfig, TenantId, TimeRange, PROFILE_TYPE_LABEL,
//! };
//!
//! let dir = tempfile::tempdir()?;
//! let store = Store::open(dir.path(), StoreConfig::default())?;
//!
//! // One sample of 7 on the stack main → work.
//! let mut batch = Batch::new(TenantId::default());
//! for name in ["main", "work"] {
//!     batch.symbols.functions.push(Function { name: name.into(), file: Default::default() });
//!     let function = Some(batch.symbols.functions.len() as u32 - 1);
//!     batch.symbols.locations.push(Location { function, mapping: None, address: 0, line: 0 });
//! }
//! let stack = batch.stacks.push(&[0, 1]);
//! batch.series.push(SeriesSamples {
//!     labels: Labels::new([
//!         (PROFILE_TYPE_LABEL, "process_cpu:cpu:nanoseconds:cpu:nanoseconds"),
//!         ("service_name", "demo"),
//!     ]),
//!     samples: vec![Sample { timestamp_ms: 1_700_000_000_000, stack, value: 7 }],
//! });
//! store.write(batch)?;
//!
//! let querier = Querier::new(&store, 64 << 20, QueryLimits::default());
//! let sel = Selector::parse(r#"{service_name="demo"}"#)?;
//! let tree = querier.merge_tree(&TenantId::default(), &sel, TimeRange::all())?;
//! assert_eq!(tree.total(), 7);
//! assert_eq!(tree.folded().get("main;work"), Some(&7));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! # Layers
//!
//! Each module depends only on modules of its own layer or listed before it (nothing
//! imports upward; `storage/tests/layers.rs` holds the code to this list):
//!
//! 1. `error`, `durable`, `codec`, `byte_eq`, `model` (the `profiledb-model` crate),
//!    `config`, `stats`, `cache`, `bucket` (the object-store client) — the ground.
//! 2. `dict`, `selector`, `index`, `fnindex` — dictionaries and label/function indexes.
//! 3. `wal`, `segment` — the files; `catalog` — their metadata.
//! 4. `intern`, `head` — stack ids, then fresh data in memory.
//! 5. `exec` — query execution: per-source algorithms over a head partition or a segment
//!    (frames below tree, merged, flame graphs, group-by, time series, diff).
//! 6. `compaction` — which segments to merge (its policy) and re-encoding them
//!    into one (its mechanism, the merger).
//! 7. `store` — the roles: recovery, writer, flusher, segments, lifecycle, scan.
//! 8. `analysis` — fleet analyses (hottest shared code, sampling noise) over
//!    group-by rows.
//! 9. `querier` — every query, its cache and limits.
//! 10. `cluster` — the roles over the bucket (writers upload, queriers mirror,
//!     compactors merge in the bucket).

// No unwrap() outside tests: a panic on bad input would take the process down.
#![cfg_attr(not(test), deny(clippy::unwrap_used))]
#![deny(missing_docs)]

pub mod analysis;
mod bucket;
mod byte_eq;
mod cache;
mod catalog;
mod cluster;
mod codec;
mod compaction;
mod config;
mod dict;
mod durable;
mod error;
mod fnindex;
mod head;
mod index;
mod intern;
/// The profile model lives in its own crate (shared with ingest and the server);
/// `crate::model::…` paths keep naming it.
mod model {
    pub use profiledb_model::*;
}
mod exec;
mod querier;
mod segment;
mod selector;
mod stats;
mod store;
mod wal;

pub use bucket::{
    index_key, lease_key, segment_key, AppendHint, Bucket, BucketConfig, BucketError, BucketStats,
    Change, GcReport, Lease, ObjectInfo, Outcome, Quarantined, Retired, SegmentEntry, TenantIndex,
    TenantView, Unreachable, DEFAULT_REQUEST_TIMEOUT, LOG_GRACE, TENANTS,
};
pub use catalog::{Catalog, TenantSettings};
pub use cluster::{
    plan_merges, Acked, ClusterError, Compactor, CompactorConfig, CompactorStats, Fault,
    FaultAction, FaultPoint, Health, InvalidFault, MergePlan, MergePolicy, Mirror, MirrorConfig,
    MirrorStats, Uploader, UploaderConfig, UploaderStats,
};
pub use compaction::{Merger, OutputFrame};
pub use config::{BlockPolicy, DownsampleRule, FsyncPolicy, StoreConfig};
pub use error::{
    Budget, InvalidConfig, InvalidSelector, OpenError, QueryError, Result, StorageError, WriteError,
};
pub use exec::diff::{diff_stats, self_by_name, DiffEntry, DiffStats};
pub use exec::flamegraph::{
    flamegraph, flamegraph_diff, tree_bytes, tree_from_bytes, tree_from_levels, FlameGraph,
    FlameGraphDiff,
};
pub use exec::grouping::{GroupAcc, GroupByQuery, GroupKey};
pub use exec::lines::{FunctionLines, LineFrame, LineProfile, LineValue};
pub use exec::merged::{flamegraph_diff_merged, Merged};
pub use exec::timeseries::SeriesPoints;
pub use exec::{CallTree, TimeRange, TreeNode};
pub use model::{
    Batch, Function, InvalidBatch, InvalidTenant, Labels, Location, Mapping, Sample, SeriesSamples,
    Stacks, Symbols, TenantId, NAME_LABEL, PROFILE_TYPE_LABEL, SERVICE_NAME_LABEL,
};
/// The server-side symbolizer a store names frames kept as addresses with.
pub use profiledb_symbolize as symbolize;
pub use querier::{
    merge_series, AskedBefore, CacheStats, DiffResult, LocalPart, NamedTree, Querier, QueryLimits,
    QueryPlan, ScopePlan, SourceSpan, SplitSide,
};
pub use segment::{
    base_path, encode_segment, BaseRef, SectionKind, SectionSize, SegmentFile, SegmentMeta,
    SegmentSummary, SymbolBase,
};
pub use selector::{MatchOp, Matcher, Selector};
pub use stats::{Gauges, StoreStats};
pub use store::{
    now_ms, CompactProgress, CompactReport, CompactedPartition, Fetch, Fetcher, RetentionReport,
    SkippedPartition, Store, WriteCallback, WriteRemains,
};
pub use wal::ReplayProgress;
