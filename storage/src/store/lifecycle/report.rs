//! What lifecycle runs report: per partition compacted or skipped, per run totals.
//! Serialized as is by the admin API and the `profiledb compact` command.

use serde::{Deserialize, Serialize};

use crate::model::TenantId;

/// Progress of a long lifecycle operation, reported after each partition.
#[derive(Clone, Debug, Default, Serialize)]
pub struct CompactProgress {
    /// Partitions finished (compacted or skipped).
    pub partitions_done: usize,
    /// Partitions the run planned.
    pub partitions_total: usize,
    /// Bytes of source segments processed so far / in total.
    pub bytes_done: u64,
    /// Bytes of all planned source segments.
    pub bytes_total: u64,
}

/// One partition rewritten.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct CompactedPartition {
    /// The partition's tenant.
    pub tenant: TenantId,
    /// Start of the partition (ms since the epoch).
    pub partition_start_ms: i64,
    /// Ids of the segments replaced.
    pub sources: Vec<u64>,
    /// Id of the segment written.
    pub output: u64,
    /// Compaction level of the output (one above its highest source).
    pub level: u32,
    /// Finest step among the sources (ms).
    pub step_ms_before: i64,
    /// Step of the output (ms); coarser when downsampled.
    pub step_ms_after: i64,
    /// File bytes of the sources.
    pub bytes_before: u64,
    /// File bytes of the output.
    pub bytes_after: u64,
    /// Rows of the sources.
    pub rows_before: u64,
    /// Rows of the output.
    pub rows_after: u64,
}

/// A partition that needed work but was left alone, and why.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct SkippedPartition {
    /// The partition's tenant.
    pub tenant: TenantId,
    /// Start of the partition (ms since the epoch).
    pub partition_start_ms: i64,
    /// Why it was left as it was.
    pub reason: String,
}

/// What a compaction run did.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct CompactReport {
    /// Partitions rewritten.
    pub compacted: Vec<CompactedPartition>,
    /// Partitions that needed work but were left alone.
    pub skipped: Vec<SkippedPartition>,
    /// Live segments (all tenants) and their bytes before and after the run.
    pub segments_before: usize,
    /// Live segments after the run.
    pub segments_after: usize,
    /// Bytes of live segments before the run.
    pub bytes_before: u64,
    /// Bytes of live segments after the run.
    pub bytes_after: u64,
    /// Wall-clock time of the run.
    pub elapsed_ms: u64,
}

/// What a retention run did.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct RetentionReport {
    /// Ids of the deleted segments.
    pub deleted: Vec<u64>,
    /// File bytes deleted.
    pub bytes_deleted: u64,
    /// Live segments (all tenants) before the run.
    pub segments_before: usize,
    /// Live segments after the run.
    pub segments_after: usize,
    /// Wall-clock time of the run.
    pub elapsed_ms: u64,
}
